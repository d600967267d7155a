"""``--chat-template`` as users pass it, and model directories that carry their own templates.

* Without the flag the DeepSeek-V4 encoding renders every chat prompt, whatever template the
  tokenizer directory holds (a string, a list of named templates, ``chat_template.jinja``):
  SGLang's rule for DeepSeek-V4 checkpoints. Oracle: the published encoder's gold prompt
  (``fixtures/dsv4_chat_encoding.json``).
* A file path (SGLang's and vLLM's form), the template given inline (vLLM's: a value with ``{``,
  ``}`` or a newline; its ``\\n`` escapes decoded) and the name of one of the tokenizer's own
  templates (transformers' ``apply_chat_template(chat_template=name)``) render the prompt with
  transformers; the oracle is transformers' own rendering on the same directory.
* Refused before any process loads the model, naming ``chat_template``: a missing path, a JSON file
  (SGLang's conversation-template format: before, its text was rendered as the prompt of every
  request), a template Jinja cannot compile (before, every chat request was a 400), a name the
  tokenizer does not have (before: "no file", even for the tokenizer's own ``tool_use``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from openai_fake_tm import FakeTM, app_client, oai_client
from server_fixture import tokenizer_source_dir
from sglang_v4.entrypoints.chat_template import resolve_chat_template
from sglang_v4.entrypoints.launcher import check_model_dir
from sglang_v4.hf_transformers_utils import get_tokenizer
from sglang_v4.server_args import ServerArgs
from tokenizer_testutil import tiny_tokenizer_json
from transformers import AutoTokenizer

SRC = Path(tokenizer_source_dir())
FIXTURES = Path(__file__).parent / "fixtures"
GOLD = {c["name"]: c for c in json.loads((FIXTURES / "dsv4_chat_encoding.json").read_text())["cases"]}
#: the reference encoder's case without its DeepSeek ``developer`` turn (the chat route hands an
#: OpenAI developer message over as a system one, SGLang's rule; the turn renders as
#: ``<｜User｜>dev note`` in the reference output, so leaving it out removes exactly that text)
_GOLD_CASE = GOLD["chat_consecutive_user_messages_merge"]
CASE = {
    "messages": [m for m in _GOLD_CASE["messages"] if m["role"] != "developer"],
    "expected": _GOLD_CASE["expected"].replace("<｜User｜>dev note", "", 1),
}
assert len(CASE["messages"]) == len(_GOLD_CASE["messages"]) - 1
MSGS = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
#: named templates in the list layout of CohereForAI/c4ai-command-r-v01's tokenizer_config.json
NAMED = [
    {
        "name": "default",
        "template": "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}",
    },
    {
        "name": "tool_use",
        "template": "{{ bos_token }}TOOLS{% for m in messages %}[{{ m.content }}]{% endfor %}",
    },
]


def model_dir(
    root: Path, template: Any = None, files: dict[str, str] | None = None, tiny: bool = True
) -> Path:
    """A config-only model directory with the small test tokenizer (the V4 one with ``tiny``
    false); ``template`` as ``tokenizer_config.json``'s ``chat_template`` and ``files`` beside it."""
    root.mkdir(parents=True)
    shutil.copy(FIXTURES / "configs" / "tiny-DeepseekV4ForCausalLM.config.json", root / "config.json")
    if tiny:
        tiny_tokenizer_json(root / "tokenizer.json")
    else:
        shutil.copy(SRC / "tokenizer.json", root / "tokenizer.json")
    cfg = json.loads((SRC / "tokenizer_config.json").read_text())
    if template is not None:
        cfg["chat_template"] = template
    (root / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False))
    for name, text in (files or {}).items():
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("template", "files"),
    [
        ("{{ 'a template of the directory' }}", {}),
        (NAMED, {"chat_template.jinja": "{% for m in messages %}{{ m.content }}{% endfor %}"}),
    ],
    ids=["string", "named-list-and-jinja-file"],
)
def test_directory_templates_do_not_replace_the_v4_encoding(
    tmp_path: Path, template: Any, files: dict
) -> None:
    d = model_dir(tmp_path / "m", template, files, tiny=False)
    tok = get_tokenizer(str(d))
    assert tok.chat_template  # the directory does carry a template
    tm = FakeTM(tok)
    c = app_client(tm, tokenizer_path=str(d), model_path=str(d))
    r = c.post("/v1/chat/completions", json={"model": "dsv4-test", "messages": CASE["messages"]})
    assert r.status_code == 200, r.text
    assert tm.received[-1].input_ids == tok.encode(CASE["expected"], add_special_tokens=False)


def _rendered(tmp_path: Path, flag: str, d: Path) -> list[int]:
    tok = get_tokenizer(str(d))
    tm = FakeTM(tok)
    sa = ServerArgs(device="cpu", chat_template=flag)  # the flag's own checks
    check_model_dir(str(d), load_format="dummy", chat_template=sa.chat_template)
    c = app_client(tm, chat_template=flag, tokenizer_path=str(d), model_path=str(d))
    oai_client(c).chat.completions.create(model="dsv4-test", messages=MSGS)
    return tm.received[-1].input_ids


def test_template_name_of_the_tokenizer(tmp_path: Path) -> None:
    d = model_dir(tmp_path / "m", NAMED)
    ref = AutoTokenizer.from_pretrained(str(d))
    for name in ("tool_use", "default"):
        want = ref.apply_chat_template(MSGS, chat_template=name, tokenize=True, add_generation_prompt=True)
        assert _rendered(tmp_path, name, d) == list(getattr(want, "input_ids", want)), name


def test_template_file_and_inline_template(tmp_path: Path) -> None:
    d = model_dir(tmp_path / "m")
    ref = AutoTokenizer.from_pretrained(str(d))
    body = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{{ eos_token }}"
    f = tmp_path / "t.jinja"
    f.write_text(body)
    want = ref.apply_chat_template(MSGS, chat_template=body, tokenize=True)
    want = list(getattr(want, "input_ids", want))
    assert _rendered(tmp_path, str(f), d) == want
    # vLLM's inline form: one shell line, "\n" typed as a backslash escape
    assert _rendered(tmp_path, body.replace("\n", "\\n"), d) == want


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda p: str(p / "missing.jinja"), "no file"),
        (
            lambda p: _write(p / "conv.json", json.dumps({"name": "my-conv", "roles": ["U", "A"]})),
            "JSON file",
        ),
        (
            lambda p: _write(p / "bad.jinja", "{% for m in messages %}{{ m.content }}"),
            "not a valid Jinja template",
        ),
        (lambda p: "{% if %}", "not a valid Jinja template"),
        (lambda p: _write(p / "empty.jinja", "  \n"), "is empty"),
    ],
    ids=["missing", "sglang-json", "unclosed-for", "inline-syntax", "empty"],
)
def test_unusable_templates_refused_by_the_flag(tmp_path: Path, make: Any, match: str) -> None:
    value = make(tmp_path)
    with pytest.raises(ValueError, match=f"chat_template.*{match}"):
        ServerArgs(device="cpu", chat_template=value)


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_unknown_template_name_refused_listing_the_names(tmp_path: Path) -> None:
    with_names = model_dir(tmp_path / "named", NAMED)
    plain = model_dir(tmp_path / "plain")
    ServerArgs(device="cpu", chat_template="chatml")  # a name: checked against the tokenizer
    with pytest.raises(ValueError, match=r"chat_template: 'chatml' .*\['default', 'tool_use'\]"):
        check_model_dir(str(with_names), load_format="dummy", chat_template="chatml")
    with pytest.raises(ValueError, match="chat_template: 'default' .*has no chat template"):
        check_model_dir(str(plain), load_format="dummy", chat_template="default")
    # the tokenizer's names are only looked up, never run, when the tokenizer is not loaded
    check_model_dir(str(plain), load_format="dummy", chat_template="chatml", skip_tokenizer_init=True)
    assert resolve_chat_template("tool_use", str(with_names)) == NAMED[1]["template"]


def test_launch_exit_codes_follow_where_the_template_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``--chat-template`` the flag alone shows unusable (a missing file) is argparse's error,
    exit code 2, as every flag value ``ServerArgs`` refuses; a name the tokenizer directory does
    not hold is found by the pre-flight check of the model directory and exits 1 in one log line,
    as the other refusals against the model directory (``test_server_launch``: a bad
    ``--model-path``, a missing tokenizer) do. SGLang (its template manager, at start-up) and vLLM
    (its chat-template load, at start-up) both end a launch with an unresolvable template by an
    exception, exit code 1; neither has a flag-level check."""
    from server_fixture import free_port
    from sglang_v4.launch_server import main

    d = model_dir(tmp_path / "named", NAMED)
    base = ["--model-path", str(d), "--load-format", "dummy", "--device", "cpu", "--port", str(free_port())]
    with pytest.raises(SystemExit) as ei:
        main([*base, "--chat-template", str(tmp_path / "missing.jinja")])
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: argument --chat-template: chat_template" in err[0], err
    assert main([*base, "--chat-template", "chatml"]) == 1
    cap = capsys.readouterr()
    lines = [ln for ln in (cap.out + cap.err).splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert "chat_template: 'chatml'" in lines[0] and "['default', 'tool_use']" in lines[0], lines

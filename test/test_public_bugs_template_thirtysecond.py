"""A thirty-second set of public bug reports on chat templates: the BOS token of a ``--chat-template``
that writes ``{{ bos_token }}`` itself (once, also where the tokenizer adds one to plain text),
``continue_final_message`` on a template that closes assistant turns with the EOS, tool-call
arguments and ``reasoning_content`` of the history as a Jinja template reads them, a template
that tells a string content from a list of parts, and ``reasoning_effort`` (top-level, OpenRouter's
``reasoning``, Responses' ``reasoning.effort``, ``chat_template_kwargs``) as a template variable.
No fault was found by these reports; they stand as regression guards.

Fixtures: the OpenAI routes in process over ``openai_fake_tm.FakeTM`` (the engine request it
receives is kept), with ``--chat-template`` on a model directory of the small byte-level test
tokenizer (``tokenizer_testutil``) and V4's ``tokenizer_config.json`` (one variant with
``add_bos_token: true``). Oracles: ``transformers``' own ``apply_chat_template`` on the same
directory (its ``tokenize=True`` ids, which add no special tokens), the tokenizer's BOS / EOS ids,
and the reports' stated expected behaviour.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from openai_fake_tm import FakeTM, app_client
from server_fixture import tokenizer_source_dir
from tokenizer_testutil import tiny_tokenizer_json

pytestmark = pytest.mark.timeout(120)

MODEL = "dsv4-test"
FIXTURES = Path(__file__).parent / "fixtures"
USER = [{"role": "user", "content": "hi"}]
#: a Llama-3-style template that writes the BOS itself
BOS_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
#: DeepSeek-R1-Distill's shape: a namespace for the system prompt, then ``bos_token`` and it
R1_DISTILL_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(system_prompt='') %}"
    "{% for m in messages %}{% if m['role'] == 'system' %}{% set ns.system_prompt = m['content'] %}"
    "{% endif %}{% endfor %}{{ bos_token }}{{ ns.system_prompt }}"
    "{% for m in messages %}{% if m['role'] == 'user' %}<U>{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}<A>{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<A><think>\n{% endif %}"
)
#: a template that closes every assistant turn with the EOS (Mistral's, Llama 2's)
EOS_TEMPLATE = (
    "{% for m in messages %}{% if m.role == 'assistant' %} {{ m.content }}{{ eos_token }}"
    "{% else %}[{{ m.role }}]{{ m.content }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %} {% endif %}"
)
#: a template that prints a history call's arguments with ``tojson`` (mistral-common's v3)
TOJSON_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for tc in m.tool_calls or [] %}[CALL]{{ tc.function.name }}{{ tc.function.arguments | tojson }}"
    "{% endfor %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
#: Qwen2-VL's system block of mlx-examples#1195: a list of parts or a string
PARTS_TEMPLATE = (
    "{% if messages[0]['content'] and messages[0]['content'][0] and "
    "messages[0]['content'][0] is not iterable %}S:{{ messages[0]['content'] }}"
    "{% else %}{% for item in messages[0]['content'] %}{% if item.type == 'text' %}P:{{ item.text }}"
    "{% endif %}{% endfor %}{% endif %}|"
    "{% for m in messages[1:] %}<{{ m.role }}>{% for item in m.content %}{{ item.text }}{% endfor %}"
    "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
#: Qwen3's shape: the reasoning of a history turn printed from ``reasoning_content``
REASONING_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>"
    "{% if m.role == 'assistant' and m.reasoning_content %}<think>{{ m.reasoning_content }}</think>"
    "{% endif %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)


def _model_dir(root: Path, add_bos: bool) -> Path:
    """A config-only model directory with the small byte-level test tokenizer and V4's
    ``tokenizer_config.json`` (``add_bos_token`` set to ``add_bos``)."""
    shutil.copy(FIXTURES / "configs" / "tiny-DeepseekV4ForCausalLM.config.json", root / "config.json")
    tiny_tokenizer_json(root / "tokenizer.json")
    cfg = json.loads((Path(tokenizer_source_dir()) / "tokenizer_config.json").read_text())
    cfg["add_bos_token"] = add_bos
    (root / "tokenizer_config.json").write_text(json.dumps(cfg))
    if add_bos:  # the BOS on every encoded text, as Llama's ``tokenizer.json`` post-processor adds it
        tok = json.loads((root / "tokenizer.json").read_text())
        bos = cfg["bos_token"]["content"]
        bos_id = next(t["id"] for t in tok["added_tokens"] if t["content"] == bos)
        seq = [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
        tok["post_processor"] = {
            "type": "TemplateProcessing",
            "single": seq,
            "pair": [*seq, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
        }
        (root / "tokenizer.json").write_text(json.dumps(tok))
    return root


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """V4's tokenizer settings (no BOS added to plain text)."""
    return _model_dir(tmp_path_factory.mktemp("tpl32"), add_bos=False)


@pytest.fixture(scope="module")
def bos_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same tokenizer with ``add_bos_token: true`` and a post-processor that puts the BOS
    before every encoded text (Llama's, Gemma's, R1-Distill's)."""
    return _model_dir(tmp_path_factory.mktemp("tpl32bos"), add_bos=True)


def _client(d: Path, template: str) -> tuple[Any, FakeTM]:
    """A router on directory ``d`` started with ``--chat-template`` ``template``, and its fake
    engine."""
    from sglang_v4.hf_transformers_utils import get_tokenizer

    tm = FakeTM(get_tokenizer(str(d)))
    return app_client(tm, chat_template=template, tokenizer_path=str(d), model_path=str(d)), tm


def _chat(d: Path, template: str, body: dict[str, Any]) -> tuple[Any, FakeTM]:
    """POST ``body`` to ``/v1/chat/completions`` of a router on directory ``d`` started with
    ``--chat-template`` ``template``; returns the response and the fake engine."""
    c, tm = _client(d, template)
    r = c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 4, **body})
    return r, tm


def _hf(d: Path) -> Any:
    """``transformers``' own tokenizer of directory ``d``."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(d))


def _hf_ids(d: Path, template: str, messages: list[dict[str, Any]], **kw: Any) -> list[int]:
    """``transformers``' own ``apply_chat_template(tokenize=True)`` ids of ``messages``."""
    out = _hf(d).apply_chat_template(messages, chat_template=template, tokenize=True, **kw)
    ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
    return list(ids)


# --------------------------------------------------------------------------- BOS


@pytest.mark.parametrize("which", ["v4", "add_bos"])
def test_cortex_618_template_bos_is_not_doubled(tiny_dir: Path, bos_dir: Path, which: str) -> None:
    """janhq/cortex.cpp#618 and abetlen/llama-cpp-python#1501: the template writes
    ``{{ bos_token }}`` and the runtime tokenized the rendered text with the tokenizer's own BOS
    on top, so the prompt began with two BOS tokens. Expected: ``transformers``'
    ``apply_chat_template(tokenize=True)`` ids -- one BOS, first -- with and without
    ``add_bos_token``."""
    d = tiny_dir if which == "v4" else bos_dir
    r, tm = _chat(d, BOS_TEMPLATE, {"messages": USER})
    assert r.status_code == 200, r.text
    ids = list(tm.received[-1].input_ids)
    bos = _hf(d).bos_token_id
    assert ids == _hf_ids(d, BOS_TEMPLATE, USER, add_generation_prompt=True)
    assert ids[0] == bos and ids.count(bos) == 1


def test_nemo_rl_855_r1_distill_template_single_bos(bos_dir: Path) -> None:
    """NVIDIA-NeMo/RL#855 (and allenai/reward-bench#164): with DeepSeek-R1-Distill's template,
    whose ``bos_token`` sits after a namespace block (no literal BOS at the text's start to spot),
    an ``add_bos_token: true`` tokenizer doubled the BOS. Expected: one BOS, and the ids of
    ``transformers``' ``apply_chat_template(tokenize=True)`` with the system prompt in place."""
    msgs = [{"role": "system", "content": "be brief"}, *USER]
    r, tm = _chat(bos_dir, R1_DISTILL_TEMPLATE, {"messages": msgs})
    assert r.status_code == 200, r.text
    ids = list(tm.received[-1].input_ids)
    assert ids == _hf_ids(bos_dir, R1_DISTILL_TEMPLATE, msgs, add_generation_prompt=True)
    assert ids.count(_hf(bos_dir).bos_token_id) == 1


# --------------------------------------------------------------------------- continue_final_message

PREFILL = [
    {"role": "system", "content": "system message"},
    {"role": "user", "content": "user message"},
    {"role": "assistant", "content": "An apple a day"},
]


@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_search_and_learn_21_continue_final_message_drops_the_eos(
    tiny_dir: Path, add_generation_prompt: bool
) -> None:
    """huggingface/search-and-learn#21 and huggingface/transformers#46326 (an EOS left after the
    continued message), with huggingface/text-generation-inference#2733's request
    (``continue_final_message: true`` on system / user / assistant): the final assistant turn
    must stay open. Expected: ``transformers``' rendering with ``continue_final_message=True``
    (no EOS, the prompt ends in the message's text), whatever ``add_generation_prompt`` says."""
    body = {
        "messages": PREFILL,
        "continue_final_message": True,
        "add_generation_prompt": add_generation_prompt,
    }
    r, tm = _chat(tiny_dir, EOS_TEMPLATE, body)
    assert r.status_code == 200, r.text
    ids = list(tm.received[-1].input_ids)
    want = _hf_ids(tiny_dir, EOS_TEMPLATE, PREFILL, add_generation_prompt=False, continue_final_message=True)
    assert ids == want
    hf = _hf(tiny_dir)
    assert hf.eos_token_id not in ids and hf.decode(ids).endswith("An apple a day")


def test_transformers_32213_assistant_last_without_continue_starts_a_new_turn(tiny_dir: Path) -> None:
    """huggingface/transformers#32213 (assistant prefill): without ``continue_final_message`` a
    final assistant message is a closed turn. Expected: ``transformers``' rendering with the
    turn closed by the EOS and the generation prompt after it."""
    r, tm = _chat(tiny_dir, EOS_TEMPLATE, {"messages": PREFILL})
    assert r.status_code == 200, r.text
    assert list(tm.received[-1].input_ids) == _hf_ids(
        tiny_dir, EOS_TEMPLATE, PREFILL, add_generation_prompt=True
    )


# --------------------------------------------------------------------------- history as templates read it


def test_mistral_common_311_tool_call_arguments_tojson_unescaped(tiny_dir: Path) -> None:
    """mistralai/mistral-common#311: a history call's arguments printed with ``tojson`` came out
    HTML-escaped (``\\u0026``, ``\\u003c``) where the model was trained on plain JSON. Expected:
    the OpenAI string arguments reach the template decoded, and the prompt is ``transformers``'
    rendering of the same call with mapping arguments (its ``tojson``: no HTML escaping)."""
    args = {"city": "Paris & <Nice>", "unit": "°C"}
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "weather", "arguments": json.dumps(args)},
    }
    msgs = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    r, tm = _chat(tiny_dir, TOJSON_TEMPLATE, {"messages": msgs})
    assert r.status_code == 200, r.text
    ids = list(tm.received[-1].input_ids)
    oracle = [dict(m) for m in msgs]
    oracle[1] = {**msgs[1], "tool_calls": [{**call, "function": {"name": "weather", "arguments": args}}]}
    assert ids == _hf_ids(tiny_dir, TOJSON_TEMPLATE, oracle, add_generation_prompt=True)
    text = _hf(tiny_dir).decode(ids)
    assert "\\u0026" not in text and "&amp;" not in text and "Paris & <Nice>" in text


@pytest.mark.parametrize("shape", ["string", "parts"])
def test_mlx_examples_1195_template_of_content_parts(tiny_dir: Path, shape: str) -> None:
    """ml-explore/mlx-examples#1195: Qwen2-VL's template (``messages[0]['content'][0] is not
    iterable``, then a loop over the parts) failed to render a plain-string system prompt.
    Expected: 200, and a string and its one-text-part list give the same prompt --
    ``transformers``' rendering of the parts."""
    parts = [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]
    sent = parts if shape == "parts" else [{"role": "system", "content": "be brief"}, *USER]
    r, tm = _chat(tiny_dir, PARTS_TEMPLATE, {"messages": sent})
    assert r.status_code == 200, r.text
    ids = list(tm.received[-1].input_ids)
    assert ids == _hf_ids(tiny_dir, PARTS_TEMPLATE, parts, add_generation_prompt=True)
    assert "P:be brief|<user>hi<assistant>" in _hf(tiny_dir).decode(ids)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_sglang_39866_history_reasoning_reaches_the_template(tiny_dir: Path, field: str) -> None:
    """sgl-project/sglang#39866 (clients echo a turn's ``reasoning_content`` so the template
    reproduces the generated tokens; also ai-dynamo/aiperf#485): the history's reasoning must reach
    a template that prints it, under OpenRouter's ``reasoning`` name too. Expected:
    ``transformers``' rendering of the message with ``reasoning_content``."""
    msgs = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", field: "add them"},
        {"role": "user", "content": "and 3+3?"},
    ]
    oracle = [dict(m) for m in msgs]
    oracle[1] = {"role": "assistant", "content": "4", "reasoning_content": "add them"}
    r, tm = _chat(tiny_dir, REASONING_TEMPLATE, {"messages": msgs})
    assert r.status_code == 200, r.text
    ids = list(tm.received[-1].input_ids)
    assert ids == _hf_ids(tiny_dir, REASONING_TEMPLATE, oracle, add_generation_prompt=True)
    assert "<think>add them</think>4" in _hf(tiny_dir).decode(ids)


# --------------------------------------------------------------------------- reasoning_effort

#: a template that prints the effort it is given (gpt-oss's, Qwen3.8's levels)
EFFORT_TEMPLATE = (
    "E={{ reasoning_effort | default('unset') }}|{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.mark.parametrize(
    "route, body, used",
    [
        ("chat", {"reasoning_effort": "medium"}, "medium"),
        ("chat", {"reasoning": {"effort": "low"}}, "low"),
        ("chat", {"reasoning_effort": "low", "chat_template_kwargs": {"reasoning_effort": "high"}}, "high"),
        ("responses", {"reasoning": {"effort": "medium"}}, "medium"),
        ("chat", {}, None),
    ],
)
def test_vllm_54616_reasoning_effort_reaches_the_template(
    tiny_dir: Path, route: str, body: dict[str, Any], used: str | None
) -> None:
    """vllm-project/vllm#54616 (a top-level ``reasoning_effort`` inert for the template),
    gty111/gLLM#274 (Responses' ``reasoning.effort`` lost before rendering) and
    waybarrios/vllm-mlx#772 (precedence: an explicit ``chat_template_kwargs.reasoning_effort``
    wins over the top-level field). Expected: ``transformers``' rendering with the effort that
    wins, and the template's own default when none is sent."""
    c, tm = _client(tiny_dir, EFFORT_TEMPLATE)
    if route == "chat":
        r = c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 4, "messages": USER, **body})
    else:
        r = c.post("/v1/responses", json={"model": MODEL, "max_output_tokens": 4, "input": "hi", **body})
    assert r.status_code == 200, r.text
    kw = {} if used is None else {"reasoning_effort": used}
    assert list(tm.received[-1].input_ids) == _hf_ids(
        tiny_dir, EFFORT_TEMPLATE, USER, add_generation_prompt=True, **kw
    )

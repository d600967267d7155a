"""A twenty-eighth set of public bug reports on chat templates: ``chat_template_kwargs`` (template
variables, the thinking switch, the server's ``--default-chat-template-kwargs`` under the
request's own keys, and keys that name the renderer's own arguments), and templates that call
``strftime_now`` or ``raise_exception``.

Fault found here and fixed (``sglang_v4.entrypoints.openai.template_kwargs``): a
``chat_template_kwargs`` key naming one of the renderer's own arguments (``tools``, ``messages``,
``tokenize``, ``documents``, ``chat_template``...) collided with the value the server passes to
``apply_chat_template``, and Python's ``got multiple values for keyword argument`` reached the
client as the message of the 400 (sgl-project/sglang#17275, vllm-project/vllm#30200); a
``chat_template`` key was only refused by that accident, where vLLM and SGLang refuse a
request-supplied template on purpose (vllm-project/vllm#25794, sgl-project/sglang#28135). Such keys
are now refused by name, for a request on every prompt path and for
``--default-chat-template-kwargs`` at start-up. The other reports found no fault and stand as
regression guards.

Fixtures: the OpenAI routes in process over ``openai_fake_tm.FakeTM`` (the engine request it
receives is kept), with ``--chat-template`` on a model directory of the small byte-level test
tokenizer (``tokenizer_testutil``). Oracles: ``transformers``' own ``apply_chat_template`` on the
same directory with the variables the reports name; the reports' stated expected behaviour.
"""

from __future__ import annotations

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
#: Qwen3's thinking switch: an empty think block when ``enable_thinking`` is false
THINK_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>"
    "{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}{% endif %}"
)
#: Llama 3.3's ``date_string`` variable, with the template's own default
DATE_TEMPLATE = (
    "{% if not date_string is defined %}{% set date_string = '26 Jul 2024' %}{% endif %}"
    "Today: {{ date_string }}|{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
#: a template that prints the tools it is given
TOOLS_TEMPLATE = (
    "{% for t in tools or [] %}[{{ t.function.name }}]{% endfor %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
TOOLS = [
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config-only model directory with the small byte-level test tokenizer and the V4
    ``tokenizer_config.json`` (BOS / EOS of V4)."""
    root = tmp_path_factory.mktemp("tpl28")
    shutil.copy(FIXTURES / "configs" / "tiny-DeepseekV4ForCausalLM.config.json", root / "config.json")
    tiny_tokenizer_json(root / "tokenizer.json")
    shutil.copy(Path(tokenizer_source_dir()) / "tokenizer_config.json", root / "tokenizer_config.json")
    return root


def _chat(d: Path, template: str | None, body: dict[str, Any], **server: Any) -> tuple[Any, FakeTM, Any]:
    """POST ``body`` (after a first one, when a list of bodies is given, to the same router) to
    ``/v1/chat/completions`` of a router on directory ``d`` started with ``--chat-template``
    ``template`` (``None``: the DeepSeek-V4 encoding) and server arguments ``server``; returns the
    response, the fake engine and the client."""
    from sglang_v4.hf_transformers_utils import get_tokenizer

    tm = FakeTM(get_tokenizer(str(d)))
    c = app_client(tm, chat_template=template, tokenizer_path=str(d), model_path=str(d), **server)
    r = c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 4, **body})
    return r, tm, c


def _hf_ids(d: Path, template: str, messages: list[dict[str, Any]], **kw: Any) -> list[int]:
    """``transformers``' own rendering of ``messages`` with ``template`` on directory ``d`` (and
    template variables ``kw``), tokenized as a whole as the server tokenizes a Jinja prompt."""
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(str(d))
    text = ref.apply_chat_template(messages, chat_template=template, tokenize=False, **kw)
    return ref.encode(text, add_special_tokens=False)


# --------------------------------------------------------------------------- template variables


@pytest.mark.parametrize("flag", [False, True])
def test_rapid_mlx_389_enable_thinking_reaches_the_template(tiny_dir: Path, flag: bool) -> None:
    """raullenchai/Rapid-MLX#389 (also penta2himajin/qwisp#77, Blaizzy/mlx-vlm#533):
    ``chat_template_kwargs: {"enable_thinking": false}`` was dropped on parse, so the template
    always took its thinking branch. Expected: the prompt is ``transformers``' rendering with the
    switch as sent (the empty think block exactly when it is false)."""
    r, tm, _ = _chat(
        tiny_dir, THINK_TEMPLATE, {"messages": USER, "chat_template_kwargs": {"enable_thinking": flag}}
    )
    assert r.status_code == 200, r.text
    want = _hf_ids(tiny_dir, THINK_TEMPLATE, USER, add_generation_prompt=True, enable_thinking=flag)
    assert list(tm.received[-1].input_ids) == want


@pytest.mark.parametrize("sent, used", [(None, False), (True, True), (False, False)])
def test_maclocal_api_35_request_kwargs_win_over_server_defaults(
    tiny_dir: Path, sent: bool | None, used: bool
) -> None:
    """scouzi1966/maclocal-api#35 and sgl-project/sglang#24883 (vLLM's precedence, which SGLang's
    ``--default-chat-template-kwargs`` follows): the server's default ``{"enable_thinking": false}``
    applies to a request that sets nothing; a request's own ``enable_thinking`` wins over it.
    Expected: the prompt is ``transformers``' rendering with the value that wins."""
    body: dict[str, Any] = {"messages": USER}
    if sent is not None:
        body["chat_template_kwargs"] = {"enable_thinking": sent}
    r, tm, _ = _chat(tiny_dir, THINK_TEMPLATE, body, default_chat_template_kwargs={"enable_thinking": False})
    assert r.status_code == 200, r.text
    want = _hf_ids(tiny_dir, THINK_TEMPLATE, USER, add_generation_prompt=True, enable_thinking=used)
    assert list(tm.received[-1].input_ids) == want


@pytest.mark.parametrize("kwargs", [{}, {"date_string": "1 Jan 2025"}])
def test_vllm_11854_custom_template_variable(tiny_dir: Path, kwargs: dict[str, Any]) -> None:
    """vllm-project/vllm#11854 (Llama 3.3's template: ``date_string`` set by the caller, else the
    template's own default). Expected: a variable sent in ``chat_template_kwargs`` reaches the
    template, and without it the template's default applies -- ``transformers``' rendering."""
    r, tm, _ = _chat(tiny_dir, DATE_TEMPLATE, {"messages": USER, "chat_template_kwargs": kwargs})
    assert r.status_code == 200, r.text
    assert list(tm.received[-1].input_ids) == _hf_ids(
        tiny_dir, DATE_TEMPLATE, USER, add_generation_prompt=True, **kwargs
    )


def test_vllm_10075_continue_final_message_given_as_a_template_kwarg(tiny_dir: Path) -> None:
    """vllm-project/vllm#10075 (fixed by #10076): ``chat_template_kwargs: {"continue_final_message":
    true}`` with ``add_generation_prompt: false`` failed with ``got multiple values for keyword
    argument 'continue_final_message'`` (500). Expected: 200, the final assistant message left open
    -- ``transformers``' rendering with ``continue_final_message=True``."""
    msgs = [
        {"role": "user", "content": "a saying"},
        {"role": "assistant", "content": "An apple a day, keeps"},
    ]
    body = {
        "messages": msgs,
        "add_generation_prompt": False,
        "chat_template_kwargs": {"continue_final_message": True},
    }
    r, tm, _ = _chat(tiny_dir, DATE_TEMPLATE, body)
    assert r.status_code == 200, r.text
    want = _hf_ids(tiny_dir, DATE_TEMPLATE, msgs, add_generation_prompt=False, continue_final_message=True)
    assert list(tm.received[-1].input_ids) == want


# --------------------------------------------------------------------------- reserved keys


@pytest.mark.parametrize("template", [TOOLS_TEMPLATE, None], ids=["jinja", "v4"])
@pytest.mark.parametrize(
    "key, value",
    [
        ("tools", TOOLS),
        ("messages", [{"role": "user", "content": "other"}]),
        ("tokenize", True),
        ("documents", []),
    ],
)
def test_sglang_17275_renderer_arguments_in_template_kwargs_are_named_400s(
    tiny_dir: Path, template: str | None, key: str, value: Any
) -> None:
    """sgl-project/sglang#17275 (and vllm-project/vllm#30200's review): a ``chat_template_kwargs``
    key that is also an argument the server passes to the renderer (``tools``, ``tokenize``...)
    raised ``TypeError: ... got multiple values for keyword argument``. Expected: a 400 in
    OpenAI's error shape naming ``chat_template_kwargs.<key>`` (not Python's message), on the
    Jinja path and the DeepSeek-V4 encoding alike, nothing sent to the engine, and the same router
    then serves a clean request."""
    r, tm, c = _chat(tiny_dir, template, {"messages": USER, "chat_template_kwargs": {key: value}})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert f"chat_template_kwargs.{key}" in err["message"], err
    assert "multiple values" not in err["message"] and err["type"] == "BadRequestError"
    assert not tm.received
    ok = c.post(
        "/v1/chat/completions", json={"model": MODEL, "max_tokens": 4, "messages": USER, "tools": TOOLS}
    )
    assert ok.status_code == 200, ok.text


def test_vllm_25794_request_cannot_replace_the_chat_template(tiny_dir: Path) -> None:
    """vllm-project/vllm#25794 (GHSA-6fvq-23cw-5628) and sgl-project/sglang#28135:
    ``chat_template_kwargs.chat_template`` replaced the server's template with the request's own
    Jinja text. Expected: a 400 naming ``chat_template_kwargs.chat_template`` on the chat route
    and the Responses route, and the next request is rendered with the server's template
    (``transformers``' rendering of it)."""
    evil = "{{ 'X' * 10 }}"
    r, tm, c = _chat(
        tiny_dir, TOOLS_TEMPLATE, {"messages": USER, "chat_template_kwargs": {"chat_template": evil}}
    )
    assert r.status_code == 400 and "chat_template_kwargs.chat_template" in r.json()["error"]["message"], (
        r.text
    )
    resp = c.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "input": "hi",
            "max_output_tokens": 4,
            "chat_template_kwargs": {"chat_template": evil},
        },
    )
    assert resp.status_code == 400 and "chat_template_kwargs.chat_template" in resp.text, resp.text
    assert not tm.received
    ok = c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 4, "messages": USER})
    assert ok.status_code == 200, ok.text
    assert list(tm.received[-1].input_ids) == _hf_ids(
        tiny_dir, TOOLS_TEMPLATE, USER, add_generation_prompt=True
    )


@pytest.mark.parametrize("key", ["tools", "chat_template", "messages"])
def test_sglang_17275_reserved_default_template_kwargs_fail_at_start_up(key: str) -> None:
    """sgl-project/sglang#17275, server side: a reserved key in ``--default-chat-template-kwargs``
    would fail every chat request. Expected: ``ServerArgs`` refuses it at start-up with a
    ``ValueError`` naming ``default_chat_template_kwargs.<key>``; a template variable passes."""
    from sglang_v4.server_args import ServerArgs

    with pytest.raises(ValueError, match=rf"default_chat_template_kwargs\.{key}\b"):
        ServerArgs(model_path="x", device="cpu", default_chat_template_kwargs={key: "x"})
    sa = ServerArgs(model_path="x", device="cpu", default_chat_template_kwargs={"date_string": "x"})
    assert sa.default_chat_template_kwargs == {"date_string": "x"}


# --------------------------------------------------------------------------- template functions


def test_tabbyapi_281_strftime_now_in_a_template(tiny_dir: Path) -> None:
    """theroyallab/tabbyAPI#281 and huggingface/text-generation-inference#2987: Granite 3's and
    Mistral Small 3's templates call ``strftime_now`` (a ``transformers`` template function); a
    renderer without it failed every chat request. Expected: 200 and the prompt of
    ``transformers``' rendering (the year, as ``%Y`` formats it today)."""
    tpl = "Year {{ strftime_now('%Y') }}|{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    r, tm, _ = _chat(tiny_dir, tpl, {"messages": USER})
    assert r.status_code == 200, r.text
    assert list(tm.received[-1].input_ids) == _hf_ids(tiny_dir, tpl, USER, add_generation_prompt=True)


def test_sglang_892_template_raise_exception_is_a_400(tiny_dir: Path) -> None:
    """sgl-project/sglang#892 (Gemma 2) and arcee-ai/fastmlx#22: a template's
    ``raise_exception('System role not supported')`` on a system message came back as a 500
    with a traceback. Expected: a 400 in OpenAI's error shape carrying the template's own message,
    and the same router serves a request without the system message."""
    tpl = (
        "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    )
    msgs = [{"role": "system", "content": "be brief"}, *USER]
    r, tm, c = _chat(tiny_dir, tpl, {"messages": msgs})
    assert r.status_code == 400, r.text
    assert "System role not supported" in r.json()["error"]["message"]
    assert not tm.received
    ok = c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 4, "messages": USER})
    assert ok.status_code == 200, ok.text
    assert list(tm.received[-1].input_ids) == _hf_ids(tiny_dir, tpl, USER, add_generation_prompt=True)

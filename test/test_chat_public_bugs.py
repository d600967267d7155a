"""``/v1/chat/completions`` (and ``/tokenize`` with ``messages``, which renders exactly as the chat
route): public bug reports of peer servers' DeepSeek chat handling that failed here. The routes run
through FastAPI's TestClient over the fake tokenizer manager of ``test_openai_api`` (fast tier).

Oracles: prompts produced by DeepSeek's reference encoder (``fixtures/dsv4_chat_encoding.json``)
or written by hand from the V4 format (:mod:`sglang_v4.entrypoints.chat_encoding`'s rules), encoded
by the tokenizer itself; responses read with the ``openai`` client's own parsers.

* An assistant turn's reasoning sent as ``reasoning`` (vLLM's field name since it renamed
  ``reasoning_content``; its clients replay it under that name) was silently dropped from the
  prompt, the mirror of vllm-project/vllm#38488 (there ``reasoning_content`` was dropped).
* DeepSeek-V4 sometimes opens its tool calls without closing its reasoning and writes the
  ``</think>`` after the DSML block (vllm-project/vllm#45862; the same output in
  ggml-org/llama.cpp#25891): the ``</think>`` leaked into ``content`` and the block's ``"\\n\\n"``
  separator into ``reasoning_content``.
* DeepSeek-V4 sometimes writes its invokes without the ``<｜DSML｜tool_calls>`` wrapper (at long
  contexts; at times with the wrapper's closing tag alone), or in a misspelled one: the markup
  was returned as ``content`` with no ``tool_calls`` and ``finish_reason: "stop"``
  (sgl-project/sglang#40236 path 1, vllm-project/vllm#48931, vllm-project/vllm#51914); a block
  the model stopped in after its last closed invoke (no closing tag) answered
  ``finish_reason: "stop"`` (sgl-project/sglang#40236 path 2), and one malformed invoke dropped
  its valid siblings (path 3).
* DeepSeek-V4 at times wraps a call's arguments in a spurious ``arguments`` / ``input``
  parameter (sgl-project/sglang#38924, vllm-project/vllm#41240): the wrapper reached the client,
  whose schema validation rejected the call.
* DeepSeek-V4-Flash-0731 moved the reasoning-effort tiers (sgl-project/sglang#33185): its encoder
  has ``low`` (no instruction), ``high`` (the first checkpoints' "max" text) and ``max`` (a new
  "Beyond maximum" text); ``high`` rendered nothing and its ``max`` was unreachable. The profile is
  read from the checkpoint's ``encoding/encoding_dsv4.py`` (as SGLang's fix, sgl-project/sglang#33140).
* DeepSeek's chat prefix completion, ``prefix: true`` on the final assistant message
  (vllm-project/vllm#31147 added it for DeepSeek-V3.2), was ignored: the message was rendered as a
  finished turn followed by a new assistant turn.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from openai_fake_tm import A, B, E, FakeTM, U
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from transformers import PreTrainedTokenizerFast

_CASES = json.loads((Path(__file__).parent / "fixtures" / "dsv4_chat_encoding.json").read_text())["cases"]
#: Reference-encoder cases whose assistant turns carry reasoning that the prompt keeps.
_REASONING_CASES = [
    c
    for c in _CASES
    if any(m.get("reasoning_content") for m in c["messages"])
    and any(m["reasoning_content"] in c["expected"] for m in c["messages"] if m.get("reasoning_content"))
]


def _tokenize_body(case: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": messages,
        "chat_template_kwargs": {"thinking": case["thinking"]},
        # a conversation ending with an assistant turn is a finished one in the reference encoder
        "add_generation_prompt": case["messages"][-1]["role"] != "assistant",
    }
    if case["tools"]:
        body["tools"] = case["tools"]
    if case["reasoning_effort"]:
        body["reasoning_effort"] = case["reasoning_effort"]
    return body


@pytest.mark.parametrize("case", _REASONING_CASES, ids=[c["name"] for c in _REASONING_CASES])
def test_reasoning_field_name_of_vllm_is_kept_in_the_prompt(tok: PreTrainedTokenizerFast, case: dict) -> None:
    """vllm-project/vllm#38488 (and vLLM's DeepSeek-V3.2 history example, vllm-project/vllm#29837):
    a client replaying an assistant turn's reasoning as ``reasoning`` must get the same prompt as
    with ``reasoning_content``: the reference encoder's string, reasoning included."""
    assert _REASONING_CASES, "the fixture has no case that keeps reasoning"
    msgs = copy.deepcopy(case["messages"])
    for m in msgs:
        if "reasoning_content" in m:
            m["reasoning"] = m.pop("reasoning_content")
    c = _client(FakeTM(tok))
    r = c.post("/tokenize", json=_tokenize_body(case, msgs))
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == tok.encode(case["expected"], add_special_tokens=False)


def test_reasoning_both_names_equal_or_400_and_bad_types_are_400(tok: PreTrainedTokenizerFast) -> None:
    """Both names given with the same text (an answer echoed back as the openai client dumps it:
    our message carries both): the reference encoder's prompt. Both given and different: a 400
    naming both fields (which one the client meant is unknown). A ``reasoning`` that is not a
    string is a 400 naming the field, as for ``reasoning_content``."""
    case = _REASONING_CASES[0]
    c = _client(FakeTM(tok))
    same = copy.deepcopy(case["messages"])
    for m in same:
        if "reasoning_content" in m:
            m["reasoning"] = m["reasoning_content"]
    r = c.post("/tokenize", json=_tokenize_body(case, same))
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == tok.encode(case["expected"], add_special_tokens=False)
    differ = copy.deepcopy(case["messages"])
    for m in differ:
        if "reasoning_content" in m:
            m["reasoning"] = "NOT THIS " + m["reasoning_content"]
    for path in ("/tokenize", "/v1/chat/completions"):
        r = c.post(path, json=_tokenize_body(case, differ))
        assert r.status_code == 400, r.text
        assert "reasoning_content" in r.json()["message"] and "reasoning " in r.json()["message"], r.json()
    bad = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "reasoning": {"t": 1}}]
    for path in ("/tokenize", "/v1/chat/completions"):
        r = c.post(path, json={"messages": bad, "max_tokens": 1})
        assert r.status_code == 400, r.text
        assert "reasoning" in r.json()["message"]


@pytest.mark.parametrize("thinking", [False, True])
def test_deepseek_prefix_completion(tok: PreTrainedTokenizerFast, thinking: bool) -> None:
    """vllm-project/vllm#31147 (DeepSeek's chat prefix completion, a documented feature of its
    API): ``prefix: true`` on the final assistant message continues that message. The prompt is
    the conversation up to the message's text without its EOS; in thinking mode the message's
    reasoning stays in a closed ``<think>`` block (V4 format: an assistant turn after the last user
    turn keeps its reasoning), so what the model writes is the answer: ``content``, read here with
    the ``openai`` client."""
    reply = "print('hi')\n```"
    c = _client(FakeTM(tok, reply=reply), reasoning_parser="deepseek-v4")
    prefix: dict[str, Any] = {"role": "assistant", "content": "```python\n", "prefix": True}
    if thinking:
        prefix["reasoning_content"] = "Code it is."
    msgs = [{"role": "user", "content": "Write code"}, prefix]
    kw = {"chat_template_kwargs": {"thinking": thinking}}
    expected = (
        B + U + "Write code" + A + ("<think>Code it is.</think>" if thinking else "</think>") + "```python\n"
    )
    assert E not in expected
    r = c.post("/tokenize", json={"messages": msgs, **kw})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == tok.encode(expected, add_special_tokens=False)
    out = _oai(c).chat.completions.create(model="dsv4-test", messages=msgs, max_tokens=50, extra_body=kw)
    msg = out.choices[0].message
    assert msg.content == reply and not getattr(msg, "reasoning_content", None)
    assert out.usage.prompt_tokens == len(tok.encode(expected, add_special_tokens=False))


@pytest.mark.parametrize(
    "msgs",
    [
        [{"role": "assistant", "content": "x", "prefix": True}, {"role": "user", "content": "hi"}],
        [{"role": "user", "content": "hi", "prefix": True}],
    ],
)
def test_prefix_elsewhere_than_the_final_assistant_message_is_400(
    tok: PreTrainedTokenizerFast, msgs: list
) -> None:
    c = _client(FakeTM(tok))
    r = c.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 1})
    assert r.status_code == 400, r.text
    assert "messages[0].prefix" in r.json()["message"] and r.json()["param"] == "messages"


D = "｜DSML｜"


def _stream(client: Any, **kw: Any) -> tuple[str, str, dict[int, list[str]], str | None]:
    """(content, reasoning_content, {index: [name, arguments]}, finish_reason) of a stream, read
    with the ``openai`` client."""
    content, reasoning, calls, finish = "", "", {}, None
    for ch in _oai(client).chat.completions.create(stream=True, **kw):
        for cc in ch.choices:
            finish = cc.finish_reason or finish
            content += cc.delta.content or ""
            reasoning += getattr(cc.delta, "reasoning_content", None) or ""
            for tc in cc.delta.tool_calls or []:
                d = calls.setdefault(tc.index, ["", ""])
                d[0] += tc.function.name or ""
                d[1] += tc.function.arguments or ""
    return content, reasoning, calls, finish


@pytest.mark.parametrize("late_tag", ["\n</think>", "</think>\n", ""])
def test_tool_block_before_the_end_of_reasoning(tok: PreTrainedTokenizerFast, late_tag: str) -> None:
    """vllm-project/vllm#45862 (ggml-org/llama.cpp#25891 has the model's text): in thinking mode
    DeepSeek-V4 writes ``reasoning`` + ``"\\n\\n"`` + DSML block + ``"\\n</think>"``. The reasoning is
    the text before the block's separator, the block's calls are the tool calls, nothing is
    content; streamed and not. Oracles: the ``openai`` client's parsers and ``json.loads``."""
    block = (
        f'\n\n<{D}tool_calls>\n<{D}invoke name="get_time">\n'
        f'<{D}parameter name="city" string="true">Tokyo</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
    )
    reply = "Let me check the time" + block + late_tag
    c = _client(FakeTM(tok, reply=reply), tool_call_parser="deepseekv4", reasoning_parser="deepseek-v4")
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    kw: dict[str, Any] = dict(
        model="dsv4-test",
        messages=[{"role": "user", "content": "Time in Tokyo?"}],
        tools=tools,
        max_tokens=200,
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    out = _oai(c).chat.completions.create(**kw)
    msg = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls"
    assert msg.reasoning_content == "Let me check the time"
    assert not msg.content
    assert [(t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls] == [
        ("get_time", {"city": "Tokyo"})
    ]
    content, reasoning, calls, finish = _stream(c, **kw)
    assert (content, reasoning, finish) == ("", "Let me check the time", "tool_calls")
    assert [(n, json.loads(a)) for n, a in calls.values()] == [("get_time", {"city": "Tokyo"})]


#: The reasoning-effort instructions as DeepSeek published them (DeepSeek-V4-Flash-0731's
#: ``encoding/encoding_dsv4.py``, quoted in sgl-project/sglang#33185): written out here, not
#: imported from the code under test.
ABSOLUTE = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"
)
BEYOND = (
    "Reasoning Effort: Beyond maximum \u2014 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively "
    "decompose the problem into its most fundamental components, trace every causal chain to its root, and "
    "resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are "
    "certain that no assumption remains unchecked and no error remains undiscovered.\n\n"
)
#: The shape of the two encoders' effort definitions (module-level names; the texts elided).
PREVIEW_ENCODER = 'REASONING_EFFORT_MAX = (\n    "Reasoning Effort: Absolute maximum ..."\n)\n'
OFFICIAL_ENCODER = (
    'DEFAULT_REASONING_EFFORT = "low"\n'
    'REASONING_EFFORT_PROMPTS = {\n    "low": "",\n    "high": "...",\n    "max": "...",\n}\n'
)


def _model_dir(root: Path, encoder: str | None, config: dict[str, Any] | None = None) -> str:
    (root / "config.json").write_text(json.dumps({"model_type": "deepseek_v4", **(config or {})}))
    if encoder is not None:
        (root / "encoding").mkdir()
        (root / "encoding" / "encoding_dsv4.py").write_text(encoder)
    return str(root)


@pytest.mark.parametrize(
    ("encoder", "config", "expected"),
    [
        # DeepSeek-V4-Flash-0731 (official profile)
        (OFFICIAL_ENCODER, None, {None: "", "low": "", "high": ABSOLUTE, "max": BEYOND, "xhigh": ABSOLUTE}),
        # the first V4 checkpoints (preview profile), and a checkpoint without the encoder file
        (PREVIEW_ENCODER, None, {None: "", "low": "", "high": "", "max": ABSOLUTE, "xhigh": ABSOLUTE}),
        (None, None, {None: "", "high": "", "max": ABSOLUTE}),
        # a converted checkpoint naming its profile in config.json
        (None, {"dsv4_reasoning_effort_profile": "official"}, {"high": ABSOLUTE, "max": BEYOND}),
    ],
)
def test_reasoning_effort_tiers_follow_the_checkpoint(
    tok: PreTrainedTokenizerFast, tmp_path: Path, encoder: str | None, config: dict | None, expected: dict
) -> None:
    """sgl-project/sglang#33185: with DeepSeek-V4-Flash-0731's encoder, ``reasoning_effort``
    ``"high"`` puts the "Absolute maximum" instruction after BOS and ``"max"`` the "Beyond maximum"
    one; the first V4 checkpoints keep their tiers (only ``"max"``, "Absolute maximum"). Thinking
    mode only: chat mode never has an instruction."""
    c = _client(FakeTM(tok), model_path=_model_dir(tmp_path, encoder, config))
    msgs = [{"role": "user", "content": "q"}]
    for effort, prefix in expected.items():
        body: dict[str, Any] = {"messages": msgs, "chat_template_kwargs": {"thinking": True}}
        if effort is not None:
            body["reasoning_effort"] = effort
        r = c.post("/tokenize", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == tok.encode(
            B + prefix + U + "q" + A + "<think>", add_special_tokens=False
        ), effort
        body["chat_template_kwargs"] = {"thinking": False}
        r = c.post("/tokenize", json=body)
        assert r.json()["tokens"] == tok.encode(B + U + "q" + A + "</think>", add_special_tokens=False), (
            effort
        )
    r = c.post(
        "/v1/chat/completions", json={"messages": msgs, "reasoning_effort": "extreme", "max_tokens": 1}
    )
    assert r.status_code == 400 and r.json()["param"] == "reasoning_effort"


def test_unknown_effort_profile_in_config_is_refused(tok: PreTrainedTokenizerFast, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dsv4_reasoning_effort_profile"):
        _client(FakeTM(tok), model_path=_model_dir(tmp_path, None, {"dsv4_reasoning_effort_profile": "v9"}))


@pytest.mark.parametrize(("opening", "closing"), [("", ""), ("", "tool_calls"), ("toolcalls", "toolcalls")])
def test_invokes_without_the_block_wrapper_are_tool_calls(
    tok: PreTrainedTokenizerFast, opening: str, closing: str
) -> None:
    """sgl-project/sglang#40236 (bare invoke), vllm-project/vllm#48931 (the start wrapper left
    out, its closing tag written) and vllm-project/vllm#51914 (the wrapper misspelled
    ``toolcalls``): the invokes are tool calls, ``finish_reason`` is ``"tool_calls"``, no DSML
    reaches ``content``; streamed and not. Oracles: the ``openai`` client's parsers and
    ``json.loads``."""
    reply = (
        "I'll check.\n\n"
        + (f"<{D}{opening}>\n" if opening else "")
        + f'<{D}invoke name="get_weather">\n<{D}parameter name="city" string="true">Oslo</{D}parameter>\n'
        f'<{D}parameter name="days" string="false">2</{D}parameter>\n</{D}invoke>'
        + (f"\n</{D}{closing}>" if closing else "")
    )
    c = _client(FakeTM(tok, reply=reply), tool_call_parser="deepseekv4")
    props = {"city": {"type": "string"}, "days": {"type": "integer"}}
    tools = [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object", "properties": props}},
        }
    ]
    kw: dict[str, Any] = dict(model="dsv4-test", messages=[{"role": "user", "content": "Oslo?"}], tools=tools)
    out = _oai(c).chat.completions.create(**kw)
    msg = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls" and msg.content == "I'll check."
    want = [("get_weather", {"city": "Oslo", "days": 2})]
    assert [(t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls] == want
    content, _, calls, finish = _stream(c, **kw)
    assert (content, finish) == ("I'll check.", "tool_calls")
    assert [(n, json.loads(a)) for n, a in calls.values()] == want


_READ = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
_BASH = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
_RAW = {"type": "object", "properties": {"arguments": {"type": "string"}}}
_TWO = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
_SCHEMAS = {"read": _READ, "bash": _BASH, "raw": _RAW, "two": _TWO}


def _param(k: str, s: str, v: str) -> str:
    return f'<{D}parameter name="{k}" string="{s}">{v}</{D}parameter>'


def _call(name: str, body: str) -> str:
    return f'\n\n<{D}tool_calls>\n<{D}invoke name="{name}">\n{body}\n</{D}invoke>\n</{D}tool_calls>'


WRAPPED = [  # (model output, the call's arguments as the tool's schema wants them)
    (_call("read", _param("arguments", "false", '{"path": "/x"}')), {"path": "/x"}),
    (_call("read", _param("arguments", "true", '{"path": "/x"}')), {"path": "/x"}),
    (_call("read", _param("input", "false", '{"path": "/x"}')), {"path": "/x"}),
    (_call("bash", _param("arguments", "true", "cd /x && ls -la 2>&1")), {"command": "cd /x && ls -la 2>&1"}),
    (_call("read", '{"arguments": {"path": "/x"}}'), {"path": "/x"}),
    (_call("read", '{ "input" : "{\\"path\\": \\"/x\\"}" }'), {"path": "/x"}),
    # left as written: a declared "arguments" parameter, a second parameter, no single string
    # parameter to give a bare string to, a JSON body whose first key is a real one
    (_call("raw", _param("arguments", "true", "x")), {"arguments": "x"}),
    (
        _call("read", _param("arguments", "true", "a") + "\n" + _param("path", "true", "/p")),
        {"arguments": "a", "path": "/p"},
    ),
    (_call("two", _param("arguments", "true", "ls")), {"arguments": "ls"}),
    (_call("read", '{"path": "/y", "arguments": 1}'), {"path": "/y", "arguments": 1}),
]


@pytest.mark.parametrize("text,want", WRAPPED, ids=[str(i) for i in range(len(WRAPPED))])
def test_spurious_arguments_wrapper_is_removed(text: str, want: dict) -> None:
    """sgl-project/sglang#38924 / vllm-project/vllm#41240: a call whose only parameter is an
    ``arguments`` / ``input`` wrapper the tool does not declare gets the wrapped arguments (its
    schema's shape); everything else is left as the model wrote it. Streamed in every chunking
    (the test_openai_tool_parser ones), the arguments text is the non-streamed one. Oracle: the
    expected dicts, written out by hand; ``json.loads``."""
    from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser, parse_tool_calls
    from tool_parser_testutil import chunkings

    content, calls, complete = parse_tool_calls(text, _SCHEMAS)
    assert content == "" and complete and [json.loads(c.arguments) for c in calls] == [want]
    for chunks in chunkings(text):
        p = DsmlToolParser(_SCHEMAS)
        args, streamed = "", ""
        for ch in [*chunks, None]:
            c, deltas = p.feed(ch) if ch is not None else p.finish()
            streamed += c
            args += "".join(d.arguments for d in deltas)
        assert streamed == "" and args == calls[0].arguments, chunks


def test_wrapper_repair_through_the_chat_route(tok: PreTrainedTokenizerFast) -> None:
    """The same through ``/v1/chat/completions`` with the ``openai`` client, streamed and not; a
    call cut inside a held wrapper still streams what was generated."""
    reply = _call("bash", _param("arguments", "true", "pwd"))
    c = _client(FakeTM(tok, reply=reply), tool_call_parser="deepseekv4")
    tools = [{"type": "function", "function": {"name": "bash", "parameters": _BASH}}]
    kw: dict[str, Any] = dict(
        model="dsv4-test", messages=[{"role": "user", "content": "where?"}], tools=tools
    )
    out = _oai(c).chat.completions.create(**kw)
    assert out.choices[0].finish_reason == "tool_calls"
    assert json.loads(out.choices[0].message.tool_calls[0].function.arguments) == {"command": "pwd"}
    content, _, calls, finish = _stream(c, **kw)
    assert finish == "tool_calls" and [json.loads(a) for _, a in calls.values()] == [{"command": "pwd"}]
    n = len(tok.encode(reply[: reply.index("pwd") + 2], add_special_tokens=False))
    out = _oai(c).chat.completions.create(max_tokens=n, **kw)
    cut = out.choices[0].message.tool_calls[0].function.arguments
    _, _, calls, finish = _stream(c, max_tokens=n, **kw)
    assert (
        finish == "length" and [a for _, a in calls.values()] == [cut] and cut.startswith('{"arguments": "p')
    )


def test_block_left_open_by_eos_after_closed_invokes(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#40236 path 2: the model stops (EOS) after a closed invoke without the
    block's closing tag: the call is made, ``finish_reason`` is ``"tool_calls"``, streamed and not.
    Cut by ``max_tokens`` at the same place, the finish reason stays ``"length"``."""
    body = _param("path", "true", "/etc/hosts")
    reply = _call("read", body).removesuffix(f"\n</{D}tool_calls>")
    c = _client(FakeTM(tok, reply=reply), tool_call_parser="deepseekv4")
    tools = [{"type": "function", "function": {"name": "read", "parameters": _READ}}]
    kw: dict[str, Any] = dict(model="dsv4-test", messages=[{"role": "user", "content": "read"}], tools=tools)
    out = _oai(c).chat.completions.create(**kw)
    assert out.choices[0].finish_reason == "tool_calls" and not out.choices[0].message.content
    assert json.loads(out.choices[0].message.tool_calls[0].function.arguments) == {"path": "/etc/hosts"}
    content, _, calls, finish = _stream(c, **kw)
    assert (content, finish) == ("", "tool_calls")
    assert [json.loads(a) for _, a in calls.values()] == [{"path": "/etc/hosts"}]
    n = len(tok.encode(reply, add_special_tokens=False))
    out = _oai(c).chat.completions.create(max_tokens=n - 1, **kw)
    assert out.choices[0].finish_reason == "length"


def test_malformed_invoke_keeps_its_valid_siblings() -> None:
    """sgl-project/sglang#40236 path 3: in a block whose second invoke is malformed (a
    ``string="false"`` value that is not JSON), the first invoke stays a call; the rest of the
    block is dropped and the text after it is content, streamed in every chunking as parsed
    whole. Oracle: the positions in the hand-written text, ``json.loads``."""
    from sglang_v4.entrypoints.openai.tool_parser import parse_tool_calls
    from tool_parser_testutil import TOOLS, block, chunkings, invoke, run_stream

    good = invoke("get_weather", ("city", "true", "Paris"))
    text = "Two calls." + block(good, invoke("book", ("pax", "false", "two"))) + "\nSorry."
    content, calls, complete = parse_tool_calls(text, TOOLS)
    assert content == "Two calls.\nSorry." and not complete
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    for chunks in chunkings(text):
        s_content, s_calls, p = run_stream(chunks)
        assert s_content == content and p.malformed, chunks
        assert (
            json.loads(s_calls[0]["arguments"]) == {"city": "Paris"} and s_calls[0]["name"] == "get_weather"
        )

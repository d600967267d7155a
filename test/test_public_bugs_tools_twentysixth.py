"""A twenty-sixth set of public reports on tool calling on ``/v1/chat/completions`` (``strict``
per function, typed DSML parameters, coarse and fine stream deltas, finish reasons, parallel and
zero-parameter calls), in process.

Fixed here: under ``tool_choice: "auto"`` beside a ``strict`` tool, a tool sent without ``strict``
(OpenAI's default ``false``) had its arguments constrained to its schema too, as if strict; the
grammar now constrains only the ``strict: true`` functions and leaves the others' parameters free.
The other reports found no fault and stand as regression guards of the behaviour each asked for.
The model's text is written by hand (:class:`~chat_tools_testutil.ChunkTM`). Oracles: the
``openai`` client (its response types and stream accumulator), xgrammar's own string matcher,
``jsonschema`` validation against the tool's schema, ``json.loads`` of the written values,
OpenAI's documented ``strict`` and ``finish_reason`` semantics.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from chat_tools_testutil import (
    WEATHER,
    _grammar_of,
    client_for,
    fold_chat_stream,
    grammar_chunk_tm,
    routes_client,
    sse_chunks,
)
from dsml_testutil import DSML, dsml_block, dsml_invoke, dsml_param
from openai.types.chat import ChatCompletion
from transformers import PreTrainedTokenizerFast

CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "Do it."}]
RUN = {
    "type": "function",
    "function": {
        "name": "run",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "run_in_background": {"type": "boolean"},
                "timeout": {"type": "integer"},
                "edits": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                        "required": ["old", "new"],
                    },
                },
            },
            "required": ["command"],
        },
    },
}
PING = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}


def _answer(
    tok: PreTrainedTokenizerFast, reply: str, body: dict[str, Any], stream: bool, per_chunk: int = 1
) -> tuple[Any, str]:
    """(``choices[0]`` as the ``openai`` client reads it, the raw body) of ``body`` answered by a
    model writing ``reply``; streamed answers are folded by the client's accumulator."""
    _, tc = client_for(grammar_chunk_tm(tok, reply, per_chunk), allow_auto_truncate=False)
    r = tc.post(CHAT, json={"model": "m", "messages": MSGS, **body, "stream": stream})
    assert r.status_code == 200, r.text
    ch = (fold_chat_stream(r.text) if stream else ChatCompletion.model_validate(r.json())).choices[0]
    return ch, r.text


def _args(ch: Any) -> list[tuple[str, Any]]:
    """[(name, parsed arguments)] of a choice's tool calls (``json.loads`` must take each)."""
    return [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls or []]


# --------------------------------------------------------------------------- strict per function


def test_strict_is_enforced_per_function_under_auto(tok: PreTrainedTokenizerFast) -> None:
    """kekzl/imp#1597: with one ``strict`` tool and one loose tool, enforcement was
    all-or-nothing; OpenAI defines ``strict`` per function (absent or ``null`` is ``false``).
    Expected, under ``tool_choice: "auto"``: the strict tool's calls follow its schema (a wrong
    type, an undeclared or a missing required parameter is refused) while the tools without
    ``strict: true`` stay callable with any parameters, and prose stays possible. Before the fix
    a tool without the field was constrained as if strict. Oracle: xgrammar's own string matcher
    over the grammar the route sent; OpenAI's ``strict`` semantics."""
    import xgrammar as xgr

    write = {
        "type": "function",
        "function": {
            "name": "write_file",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "size": {"type": "integer"}},
                "required": ["path", "size"],
                "additionalProperties": False,
            },
        },
    }
    null_strict = {"type": "function", "function": {**PING["function"], "name": "ping2", "strict": None}}
    tm = grammar_chunk_tm(tok, "Hello.")
    _, tc = client_for(tm, allow_auto_truncate=False)
    r = tc.post(CHAT, json={"model": "m", "messages": MSGS, "tools": [write, RUN, null_strict]})
    assert r.status_code == 200, r.text
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([f"<t{i}>" for i in range(8)])).compile_grammar(
        _grammar_of(tm.received[0].sampling_params)
    )

    def accepts(text: str) -> bool:
        """Whether xgrammar's matcher of the sent grammar takes ``text`` whole."""
        m = xgr.GrammarMatcher(compiled)
        return bool(m.accept_string(text)) and bool(m.is_completed())

    ok = dsml_invoke("write_file", dsml_param("path", True, "a.txt"), dsml_param("size", False, "3"))
    assert accepts("Hello.")
    assert accepts(dsml_block(ok))
    # loose tools: any parameters, any types (their schema is not a constraint)
    loose = [
        dsml_invoke("run", dsml_param("command", False, "3")),
        dsml_invoke("run", dsml_param("command", True, "ls"), dsml_param("cwd", True, "/tmp")),
        dsml_invoke("run", dsml_param("extra", False, '{"x": [1]}')),
        dsml_invoke("ping2", dsml_param("anything", True, "goes")),
    ]
    for inv in loose:
        assert accepts(dsml_block(inv)), inv
    assert accepts(dsml_block(loose[1], ok))
    # the strict tool: its schema holds
    bad = [
        dsml_invoke("write_file", dsml_param("path", True, "a.txt"), dsml_param("size", False, '"3"')),
        dsml_invoke("write_file", dsml_param("path", True, "a.txt")),
        dsml_invoke(
            "write_file",
            dsml_param("path", True, "a.txt"),
            dsml_param("size", False, "3"),
            dsml_param("mode", True, "w"),
        ),
    ]
    for inv in bad:
        assert not accepts(dsml_block(inv)), inv


# --------------------------------------------------------------------------- typed parameters


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("flag", ["false", "true"])
def test_boolean_and_integer_parameters_are_json_typed(
    tok: PreTrainedTokenizerFast, stream: bool, flag: str
) -> None:
    """vllm-project/vllm#41122: DeepSeek-V4 tool calls returned a boolean parameter as the
    quoted string ``"true"``, failing the agent's input validation against a ``boolean``
    schema. Expected: ``run_in_background`` is a JSON boolean and ``timeout`` a JSON integer,
    streamed or not, and the arguments validate against the tool's schema. Oracles:
    ``jsonschema`` over the tool's own ``parameters``; the report's expected value."""
    reply = dsml_block(
        dsml_invoke(
            "run",
            dsml_param("command", True, "make test"),
            dsml_param("run_in_background", False, flag),
            dsml_param("timeout", False, "30"),
        )
    )
    ch, _ = _answer(tok, reply, {"tools": [RUN]}, stream)
    [(name, args)] = _args(ch)
    assert name == "run" and ch.finish_reason == "tool_calls"
    assert args == {"command": "make test", "run_in_background": flag == "true", "timeout": 30}
    assert type(args["run_in_background"]) is bool and type(args["timeout"]) is int
    jsonschema.validate(args, RUN["function"]["parameters"])


def test_boolean_parameter_is_a_boolean_in_anthropic_tool_use(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#41122 (the Messages route Claude Code calls): a boolean parameter came
    back as ``"true"`` in ``tool_use.input``. Expected: ``input`` holds JSON ``true``, and the
    stop reason is ``tool_use``. Oracles: ``jsonschema`` over the tool's ``input_schema``; the
    report's expected value."""
    reply = dsml_block(
        dsml_invoke("run", dsml_param("command", True, "ls"), dsml_param("run_in_background", False, "true"))
    )
    tc = routes_client(grammar_chunk_tm(tok, reply))
    tool = {"name": "run", "input_schema": RUN["function"]["parameters"]}
    body = {"model": "m", "max_tokens": 256, "messages": MSGS, "tools": [tool]}
    r = tc.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    [use] = [b for b in r.json()["content"] if b["type"] == "tool_use"]
    assert use["name"] == "run" and use["input"] == {"command": "ls", "run_in_background": True}
    assert r.json()["stop_reason"] == "tool_use"
    jsonschema.validate(use["input"], tool["input_schema"])


@pytest.mark.parametrize("stream", [False, True])
def test_array_of_objects_parameter_is_an_array_not_a_string(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """earendil-works/pi#9931 (nested array/object parameters arrived as JSON strings and failed
    ``edits.0: must be object``) and ollama/ollama#13787 (nested arguments were cut at the first
    closing brace). Expected: ``edits`` is the array of objects the model wrote, braces and
    brackets inside its strings included, streamed or not. Oracles: ``json.loads`` of the
    written value; ``jsonschema`` over the tool's schema."""
    edits = '[{"old": "f() { return 1; }", "new": "f() { return [2]; }"}, {"old": "}", "new": "{"}]'
    reply = dsml_block(
        dsml_invoke("run", dsml_param("command", True, "edit"), dsml_param("edits", False, edits))
    )
    ch, _ = _answer(tok, reply, {"tools": [RUN]}, stream)
    [(_, args)] = _args(ch)
    assert args == {"command": "edit", "edits": json.loads(edits)}
    assert isinstance(args["edits"], list) and all(isinstance(e, dict) for e in args["edits"])
    jsonschema.validate(args, RUN["function"]["parameters"])


# --------------------------------------------------------------------------- stream deltas


@pytest.mark.parametrize("per_chunk", [1, 7, 10_000])
def test_coarse_stream_deltas_keep_the_whole_arguments(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """vllm-project/vllm#48852: with coarse deltas (``stream_interval > 1``, async scheduling),
    a delta that carried the rest of a call's markup was not found in the re-serialized JSON
    and the client got the call with empty arguments. Expected: whatever the chunking, even the
    whole reply in one delta, the folded stream holds the call with all its arguments, the same
    as the non-streamed answer. Oracles: the ``openai`` client's stream accumulator;
    ``json.loads`` of the written values."""
    reply = "Checking." + dsml_block(
        dsml_invoke("get_weather", dsml_param("city", True, "Paris"), dsml_param("days", False, "3")),
        dsml_invoke("get_weather", dsml_param("city", True, "Oslo")),
    )
    want = [("get_weather", {"city": "Paris", "days": 3}), ("get_weather", {"city": "Oslo"})]
    ch, _ = _answer(tok, reply, {"tools": [WEATHER]}, True, per_chunk)
    assert _args(ch) == want and ch.message.content == "Checking." and ch.finish_reason == "tool_calls"
    ns, _ = _answer(tok, reply, {"tools": [WEATHER]}, False)
    assert _args(ns) == want


@pytest.mark.parametrize("per_chunk", [1, 2])
def test_non_ascii_arguments_are_literal_utf8_streamed_and_not(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """vllm-project/vllm#17703 (umlauts in tool arguments broke the streamed arguments, the
    already-sent text being compared against ``json.dumps`` output with another ``ensure_ascii``).
    Expected: the arguments carry the characters as literal UTF-8 (no ``\\uXXXX`` escapes), the
    folded stream equals the non-streamed answer, token by token or two tokens per delta.
    Oracles: the ``openai`` client's stream accumulator; ``json.loads`` of the written values."""
    city = "Düsseldorf 東京 🌧"
    reply = dsml_block(
        dsml_invoke("get_weather", dsml_param("city", True, city), dsml_param("days", False, "2"))
    )
    s, _ = _answer(tok, reply, {"tools": [WEATHER]}, True, per_chunk)
    ns, _ = _answer(tok, reply, {"tools": [WEATHER]}, False)
    for ch in (s, ns):
        raw = ch.message.tool_calls[0].function.arguments
        assert "\\u" not in raw and city in raw, raw
        assert json.loads(raw) == {"city": city, "days": 2}
    assert s.message.tool_calls[0].function.arguments == ns.message.tool_calls[0].function.arguments


@pytest.mark.parametrize("per_chunk", [1, 4])
def test_one_finish_reason_in_a_tool_call_stream(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """RayBytes/ChatMock#114 (a tool-call stream sent ``finish_reason: "tool_calls"`` and then a
    second, trailing ``"stop"``; clients that keep the last one dropped the calls) and
    BerriAI/litellm#12862 (a streamed tool call ended with ``"stop"``). Expected: exactly one
    chunk carries a ``finish_reason``, it is ``"tool_calls"``, and no choice delta follows it; the
    prose before the call stays content. Oracle: OpenAI's streaming format (one terminal
    ``finish_reason`` per choice)."""
    reply = "Let me look." + dsml_block(dsml_invoke("get_weather", dsml_param("city", True, "Lima")))
    _, tc = client_for(grammar_chunk_tm(tok, reply, per_chunk), allow_auto_truncate=False)
    body = {"model": "m", "messages": MSGS, "tools": [WEATHER], "stream": True}
    r = tc.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    per_choice: dict[int, list[Any]] = {}
    for c in sse_chunks(r.text):
        assert "error" not in c, c
        for choice in c["choices"]:
            per_choice.setdefault(choice["index"], []).append(choice)
    assert sorted(per_choice) == [0]
    for seq in per_choice.values():
        finishes = [c["finish_reason"] for c in seq if c["finish_reason"] is not None]
        assert finishes == ["tool_calls"], finishes
        assert seq[-1]["finish_reason"] == "tool_calls"
    ch = fold_chat_stream(r.text).choices[0]
    assert ch.message.content == "Let me look." and _args(ch) == [("get_weather", {"city": "Lima"})]


@pytest.mark.parametrize("stream", [False, True])
def test_finish_reason_is_stop_with_tools_but_no_call(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """Blaizzy/mlx-vlm#990: ``finish_reason`` was hard-coded, not ``"tool_calls"`` when a call was
    made; the complement matters as much: tools declared but no call made is ``"stop"``.
    Expected: prose answer with tools -> ``"stop"`` and no ``tool_calls``; a call -> ``"tool_calls"``,
    streamed or not. Oracle: OpenAI's chat object (``"tool_calls"`` iff the model called a tool)."""
    ch, _ = _answer(tok, "It is sunny.", {"tools": [WEATHER]}, stream)
    assert ch.finish_reason == "stop" and not ch.message.tool_calls and ch.message.content == "It is sunny."
    call = dsml_block(dsml_invoke("get_weather", dsml_param("city", True, "Rome")))
    ch, _ = _answer(tok, call, {"tools": [WEATHER]}, stream)
    assert ch.finish_reason == "tool_calls" and _args(ch) == [("get_weather", {"city": "Rome"})]


@pytest.mark.parametrize("stream", [False, True])
def test_zero_parameter_call_has_empty_object_arguments(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """brave/brave-browser#56601 and petersalomonsen/javascriptmusic#208: a call of a tool with
    no parameters came back with ``arguments: ""``, which ``JSON.parse`` / ``json.loads`` refuse
    and which then poisoned the replayed history. Expected: ``arguments`` is ``"{}"`` (a JSON
    object), streamed (folded) or not. Oracle: ``json.loads``; OpenAI's ``arguments`` being a
    JSON object text."""
    reply = f'\n\n<{DSML}tool_calls>\n<{DSML}invoke name="ping">\n</{DSML}invoke>\n</{DSML}tool_calls>'
    ch, _ = _answer(tok, reply, {"tools": [PING]}, stream)
    assert [c.function.arguments for c in ch.message.tool_calls or []] == ["{}"]
    assert _args(ch) == [("ping", {})] and ch.finish_reason == "tool_calls"


def test_parallel_calls_with_mixed_string_and_json_parameters(tok: PreTrainedTokenizerFast) -> None:
    """ml-explore/mlx-lm#1337: DeepSeek-V4 writes several invokes in one DSML block, mixing
    ``string="true"`` (raw text) and ``string="false"`` (JSON) parameters; without a parser for
    it the calls came back as content. Expected: one call per invoke, in order, with distinct
    ids and stream indexes 0 and 1 whose first delta carries the id and name; a ``string="true"``
    value that looks like a number stays a string. Oracles: the ``openai`` client's accumulator;
    ``json.loads`` of the written values."""
    reply = dsml_block(
        dsml_invoke("get_weather", dsml_param("city", True, "42"), dsml_param("days", False, "7")),
        dsml_invoke(
            "run", dsml_param("command", True, "echo ok"), dsml_param("run_in_background", False, "false")
        ),
    )
    want = [
        ("get_weather", {"city": "42", "days": 7}),
        ("run", {"command": "echo ok", "run_in_background": False}),
    ]
    ch, text = _answer(tok, reply, {"tools": [WEATHER, RUN]}, True)
    assert _args(ch) == want and ch.finish_reason == "tool_calls"
    ids = [c.id for c in ch.message.tool_calls]
    assert len(set(ids)) == 2 and all(ids)
    firsts: dict[int, dict[str, Any]] = {}
    for c in sse_chunks(text):
        for d in c["choices"][0]["delta"].get("tool_calls") or []:
            firsts.setdefault(d["index"], d)
    assert sorted(firsts) == [0, 1]
    assert [(firsts[i]["id"], firsts[i]["function"]["name"]) for i in (0, 1)] == list(
        zip(ids, ["get_weather", "run"], strict=True)
    )
    ns, _ = _answer(tok, reply, {"tools": [WEATHER, RUN]}, False)
    assert _args(ns) == want


@pytest.mark.parametrize("per_chunk", [1, 5])
def test_dsml_markup_never_reaches_streamed_content(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """earendil-works/pi#3712: with DeepSeek-V4 the DSML marker ``<｜DSML｜tool_calls`` showed up in
    the assistant's visible text beside the structured calls. Expected: no content delta holds
    any part of the markup (not even a lone ``<``), the content is the prose before the block,
    and the call is in ``tool_calls``, whatever the chunking. Oracle: the ``openai`` client's
    chunk types; the text the model wrote before the block."""
    prose = "I will check the weather in Paris (a < b)."
    reply = prose + dsml_block(dsml_invoke("get_weather", dsml_param("city", True, "Paris")))
    ch, text = _answer(tok, reply, {"tools": [WEATHER]}, True, per_chunk)
    deltas = [c["choices"][0]["delta"].get("content") or "" for c in sse_chunks(text) if c["choices"]]
    assert "".join(deltas) == prose
    assert all("DSML" not in d and "｜" not in d for d in deltas), deltas
    assert _args(ch) == [("get_weather", {"city": "Paris"})]

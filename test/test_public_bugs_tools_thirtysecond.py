"""A thirty-second set of public reports on tool calling, in process: call ids that never repeat
an id of the conversation (and a history whose clients reused ids across turns); tools that take
no parameters in each of the shapes clients send (no ``parameters``, a bare ``{"type": "object"}``,
empty ``properties``), their calls' arguments, streamed and not, and a strict tool of no fields
parsed by the ``openai`` client; text before a streamed call kept free of DSML markup; arguments
of nested arrays of objects streamed intact however the engine groups tokens; streamed arguments
that only become JSON at their last delta.

The model's text is written by hand (:func:`~chat_tools_testutil.grammar_chunk_tm`). Oracles: the
``openai`` client (its response and chunk types, its stream accumulator, ``.parse()`` of a
``pydantic_function_tool``), ``json.loads`` of the arguments against the values written, the
non-streamed answer of the same text and the prompt of the same history with distinct ids (cold
runs), and OpenAI's documented shapes (unique call ids, ``finish_reason: "tool_calls"``).

No fault was found by these reports; they stand as regression guards.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_tools_testutil import (
    client_for,
    first_choice,
    grammar_chunk_tm,
    post_chat_reply,
    sse_chunks,
)
from dsml_testutil import DSML, dsml_block, dsml_invoke, dsml_param
from openai import pydantic_function_tool
from openai.types.chat import ChatCompletionChunk
from pydantic import BaseModel
from transformers import PreTrainedTokenizerFast

CHAT = "/v1/chat/completions"


def _tool(name: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A function tool ``name`` with the given ``parameters`` (one string ``q`` by default)."""
    params = params if params is not None else {"type": "object", "properties": {"q": {"type": "string"}}}
    return {"type": "function", "function": {"name": name, "parameters": params}}


def _q_call(name: str, q: str) -> str:
    """One DSML invoke of ``name`` with the string parameter ``q``."""
    return dsml_invoke(name, dsml_param("q", True, q))


def _no_arg_block(name: str) -> str:
    """A DSML block of one call of ``name`` with no parameter tags."""
    return dsml_block(f'<{DSML}invoke name="{name}">\n</{DSML}invoke>')


def _deltas(text: str) -> list[dict[str, Any]]:
    """Every ``delta.tool_calls`` entry of a chat SSE body, in order (each chunk validated by the
    ``openai`` client's ``ChatCompletionChunk``)."""
    out = []
    for c in sse_chunks(text):
        ChatCompletionChunk.model_validate(c)
        for ch in c["choices"]:
            out.extend((ch.get("delta") or {}).get("tool_calls") or [])
    return out


def _joined_args(deltas: list[dict[str, Any]]) -> dict[int, list[str]]:
    """Per ``index``, the ``function.arguments`` pieces of its deltas, in order."""
    out: dict[int, list[str]] = {}
    for d in deltas:
        out.setdefault(d["index"], []).append((d.get("function") or {}).get("arguments") or "")
    return out


def _post(tok: PreTrainedTokenizerFast, reply: str, body: dict[str, Any], per_chunk: int = 1) -> Any:
    """The raw chat answer to ``body`` (its own ``messages``) from a fake engine writing ``reply``;
    HTTP 200 asserted."""
    _, tc = client_for(grammar_chunk_tm(tok, reply, per_chunk), allow_auto_truncate=False)
    r = tc.post(CHAT, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    return r


# --------------------------------------------------------------------------- call ids across turns


def _turn(call_id: str, q: str) -> list[dict[str, Any]]:
    """An assistant turn calling ``lookup(q)`` under ``call_id`` and the tool's answer to it."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({"q": q})},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": f"result of {q}"},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_new_call_ids_never_repeat_an_id_of_the_history(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """cloudflare/ai#526 and esengine/DeepSeek-Reasonix#8164: call ids of the form
    ``functions.<name>:<position>`` / ``call_<index>`` restarted every turn, so a later turn's
    call took the id of an earlier one and clients that key results by id (persistence, result
    pairing) overwrote the first turn's call. OpenAI's ids are unique. Expected: a second turn
    calling the same tool at the same position gets an id that is none of the history's, and two
    cold runs of the same request give two different ids."""
    history = [{"role": "user", "content": "Look up a."}, *_turn("call_0", "a")]
    body = {"messages": history, "tools": [_tool("lookup")], "stream": stream}
    reply = dsml_block(_q_call("lookup", "b"))
    ids = []
    for _ in range(2):
        calls = first_choice(_post(tok, reply, body), stream).message.tool_calls or []
        assert [json.loads(c.function.arguments) for c in calls] == [{"q": "b"}]
        ids.append(calls[0].id)
    assert all(ids) and "call_0" not in ids, ids
    assert ids[0] != ids[1], ids


def test_history_reusing_ids_across_turns_replays_as_distinct_ids(tok: PreTrainedTokenizerFast) -> None:
    """stanfordnlp/dspy#9825: an agent numbered its calls ``call_{turn}_{call}`` from zero on
    every run, so a replayed history carried the same id ``call_0_0`` in two turns. Each ``tool``
    message answers the call right before it, so the pairing stays unambiguous. Expected: the
    history is served (HTTP 200), its prompt equal to the same history with distinct ids (a cold
    run), and the answer reads as usual."""
    user = [{"role": "user", "content": "Look up a, then b."}]
    prompts = []
    for ids in (("call_0_0", "call_0_0"), ("call_x", "call_y")):
        tm = grammar_chunk_tm(tok, "Both found.")
        _, tc = client_for(tm, allow_auto_truncate=False)
        msgs = user + _turn(ids[0], "a") + _turn(ids[1], "b")
        r = tc.post(CHAT, json={"model": "m", "messages": msgs, "tools": [_tool("lookup")]})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "Both found."
        prompts.append(tm.received[0].input_ids)
    assert prompts[0] == prompts[1]


# --------------------------------------------------------------------------- tools of no parameters

NO_PARAM_SHAPES = {
    "no_parameters": None,
    "bare_object": {"type": "object"},
    "empty_properties": {"type": "object", "properties": {}},
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
@pytest.mark.parametrize("shape", list(NO_PARAM_SHAPES))
def test_parameterless_tool_in_every_shape_is_called_with_empty_object(
    tok: PreTrainedTokenizerFast, shape: str, choice: str, stream: bool
) -> None:
    """langchain-ai/langchain-mcp-adapters#137, containers/kubernetes-mcp-server#340,
    huggingface/huggingface_hub#3214 and spring-projects/spring-ai#4776: a tool that takes no
    parameters reaches servers as ``{"type": "object"}`` (MCP), with ``properties: {}``, or with
    no ``parameters`` at all (OpenAI's documented way); servers refused one shape or another
    ("object schema missing properties"). Each is a valid JSON Schema of an object. Expected:
    each shape served under ``auto``, ``required`` and the named choice, the call's arguments
    ``json.loads`` to ``{}``, ``finish_reason: "tool_calls"``, streamed (folded by the ``openai``
    client) or not."""
    fn: dict[str, Any] = {"name": "ping"}
    if NO_PARAM_SHAPES[shape] is not None:
        fn["parameters"] = NO_PARAM_SHAPES[shape]
    tc_choice: Any = {"type": "function", "function": {"name": "ping"}} if choice == "named" else choice
    body = {"tools": [{"type": "function", "function": fn}], "tool_choice": tc_choice}
    ch = first_choice(post_chat_reply(tok, _no_arg_block("ping"), body, stream), stream)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls or []] == [
        ("ping", {})
    ]
    assert ch.finish_reason == "tool_calls"


@pytest.mark.parametrize("per_chunk", [1, 4, 100000])
def test_streamed_parameterless_call_deltas_join_to_empty_object(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """open-webui/open-webui#22189, agentjido/req_llm#761 and pydantic/pydantic-ai#1512: a
    parameterless call streamed with ``arguments: ""`` and no later fragment left clients with an
    empty arguments string, which ``json.loads`` refuses ("Tool call arguments could not be
    parsed") or which dropped the call. Expected: beside a call with arguments, the
    parameterless call's first delta carries its id and name, and its deltas joined are exactly
    ``"{}"`` (``json.loads`` gives ``{}``), however the engine groups tokens; the other call's
    join is its own arguments."""
    reply = dsml_block(f'<{DSML}invoke name="ping">\n</{DSML}invoke>', _q_call("lookup", "x"))
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": [_tool("ping", {}), _tool("lookup")]}
    deltas = _deltas(_post(tok, reply, {**body, "stream": True}, per_chunk).text)
    firsts = {}
    for d in deltas:
        firsts.setdefault(d["index"], d)
    assert [(f.get("id") is not None, f["function"]["name"]) for f in firsts.values()] == [
        (True, "ping"),
        (True, "lookup"),
    ]
    joined = {i: "".join(p) for i, p in _joined_args(deltas).items()}
    assert joined[0] == "{}" and json.loads(joined[0]) == {}
    assert json.loads(joined[1]) == {"q": "x"}


class NoArgs(BaseModel):
    """A tool input of no fields (a strict tool that takes nothing)."""


@pytest.mark.parametrize("stream", [False, True])
def test_strict_tool_of_no_fields_parses_with_the_client(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """openai/openai-python#3502: for a strict tool of no parameters the arguments came back as
    ``""``, and the client's ``parse_function_tool_arguments`` raised (``json.loads("")``, pydantic's
    ``model_validate_json("")``) in ``.parse()`` and on the stream's done events. Expected: a
    ``pydantic_function_tool`` of a model with no fields (strict, ``additionalProperties: false``)
    is served, and the client's own ``.parse()`` / ``.stream()`` give ``parsed_arguments ==
    NoArgs()`` with ``finish_reason: "tool_calls"``."""
    client, _ = client_for(grammar_chunk_tm(tok, _no_arg_block("NoArgs")), allow_auto_truncate=False)
    kw: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": "Go."}],
        "tools": [pydantic_function_tool(NoArgs)],
    }
    if stream:
        with client.chat.completions.stream(**kw) as s:
            ch = s.get_final_completion().choices[0]
    else:
        ch = client.chat.completions.parse(**kw).choices[0]
    calls = ch.message.tool_calls or []
    assert [(c.function.name, c.function.parsed_arguments) for c in calls] == [("NoArgs", NoArgs())]
    assert ch.finish_reason == "tool_calls"


# --------------------------------------------------------------------------- streamed text and arguments


@pytest.mark.parametrize("per_chunk", [1, 5, 100000])
def test_text_before_a_streamed_call_has_no_markup_and_the_call_keeps_its_arguments(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """jeremychone/rust-genai#127 (DeepSeek, streamed: a call after a sentence of text came with
    ``arguments: ""`` though the non-streamed answer had them) and Blaizzy/mlx-vlm#1037 (the
    tool-call markup leaked into streamed ``delta.content``). Expected: the content deltas join
    to the sentence written, none carries DSML markup or a piece of a tag; the call's deltas join
    to non-empty arguments equal to the non-streamed answer's (a cold run), ``json.loads`` to the
    values written; no tool-call delta comes after the chunk with the finish reason."""
    reply = "Let me check the weather." + dsml_block(_q_call("get_weather", "Paris"))
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": [_tool("get_weather")]}
    cold = first_choice(_post(tok, reply, body, per_chunk), False).message
    assert cold.content == "Let me check the weather."
    chunks = sse_chunks(_post(tok, reply, {**body, "stream": True}, per_chunk).text)
    contents, args, finish_at, last_call_at = [], [], None, -1
    for k, c in enumerate(chunks):
        ChatCompletionChunk.model_validate(c)
        for ch in c["choices"]:
            delta = ch.get("delta") or {}
            if delta.get("content"):
                contents.append(delta["content"])
            for d in delta.get("tool_calls") or []:
                args.append((d.get("function") or {}).get("arguments") or "")
                last_call_at = k
            if ch.get("finish_reason"):
                finish_at = k
                assert ch["finish_reason"] == "tool_calls"
    assert "".join(contents) == cold.content
    assert not any("DSML" in p or "<" in p or "｜" in p for p in contents), contents
    assert "".join(args) == cold.tool_calls[0].function.arguments
    assert json.loads("".join(args)) == {"q": "Paris"}
    assert finish_at is not None and last_call_at <= finish_at


PLAN = [
    {"step": "读取配置", "priority": "high", "notes": 'say "hi" {}'},
    {"step": "并据此调优", "priority": "medium", "estimated_minutes": 15, "deps": [0]},
]
PLAN_TOOL = _tool(
    "plan",
    {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "tasks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "step": {"type": "string"},
                        "priority": {"type": "string"},
                        "notes": {"type": "string"},
                        "estimated_minutes": {"type": "integer"},
                        "deps": {"type": "array", "items": {"type": "integer"}},
                    },
                },
            },
        },
    },
)


@pytest.mark.parametrize("per_chunk", [1, 2, 3, 7, 100000])
def test_nested_array_of_objects_arguments_stream_intact(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """sgl-project/sglang#36339: with DeepSeek-V4's DSML parser, streamed ``function.arguments``
    of a planner tool (a nested array of objects, CJK text) arrived as invalid JSON with a run of
    bytes missing mid-string, 5% of streamed calls, never unstreamed. Expected, however the
    engine groups tokens: the deltas join to the non-streamed arguments (a cold run), which
    ``json.loads`` to the values written (quotes, braces and CJK inside strings kept)."""
    value = json.dumps(PLAN, ensure_ascii=False)
    reply = dsml_block(
        dsml_invoke("plan", dsml_param("title", True, "调优"), dsml_param("tasks", False, value))
    )
    body = {"messages": [{"role": "user", "content": "Plan it."}], "tools": [PLAN_TOOL]}
    cold = first_choice(_post(tok, reply, body, per_chunk), False).message.tool_calls or []
    assert [json.loads(c.function.arguments) for c in cold] == [{"title": "调优", "tasks": PLAN}]
    joined = _joined_args(_deltas(_post(tok, reply, {**body, "stream": True}, per_chunk).text))
    assert ["".join(p) for p in joined.values()] == [cold[0].function.arguments]


@pytest.mark.parametrize("per_chunk", [1, 3, 6])
def test_streamed_arguments_become_json_only_at_their_last_delta(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """charmbracelet/fantasy#289 (charmbracelet/crush#3153) and mcowger/plexus#759: clients that
    finalize a streamed call as soon as its accumulated arguments parse as JSON, or that take a
    fragment parsing on its own as a full snapshot, cut calls short when a server sent a complete
    object early (``"{}"`` first, the arguments after). Expected: for a call whose values hold
    ``{}`` (inside a string and as an empty object), no prefix of its joined deltas short of the
    last parses (``json.loads`` raises), and the whole join gives the values written."""
    params = {
        "type": "object",
        "properties": {"cmd": {"type": "string"}, "env": {"type": "object"}, "q": {"type": "string"}},
    }
    reply = dsml_block(
        dsml_invoke(
            "run",
            dsml_param("cmd", True, "echo {} && printf '{}'"),
            dsml_param("env", False, "{}"),
            dsml_param("q", True, "x"),
        )
    )
    body = {
        "messages": [{"role": "user", "content": "Run."}],
        "tools": [_tool("run", params)],
        "stream": True,
    }
    pieces = _joined_args(_deltas(_post(tok, reply, body, per_chunk).text))[0]
    for k in range(1, len(pieces)):
        prefix = "".join(pieces[:k])
        with pytest.raises(json.JSONDecodeError):
            json.loads(prefix)
    assert json.loads("".join(pieces)) == {"cmd": "echo {} && printf '{}'", "env": {}, "q": "x"}

"""A twenty-eighth set of public reports on tool calling, in process: ``finish_reason`` of a call
forced by a named ``tool_choice`` (or ``"required"``), streamed or not; a call of a tool without
parameters (its arguments ``{}``, never ``""``); tool-call arguments streamed as they are written
(several deltas, on the chat route and as Responses ``function_call_arguments.delta`` events);
and the client's own answer of a call replayed with its result in the next request.

No fault was found by these reports; they stand as regression guards of the behaviour each asked
for.
The model's text is written by hand (:class:`~chat_tools_testutil.ChunkTM`). Oracles: the
``openai`` client (its response and chunk types, its stream accumulator), ``json.loads`` of the
arguments, the non-streamed answer of the same text (a cold run), the prompt of the same history
written by hand, and the OpenAI behaviour the reports quote.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_tools_testutil import (
    DO_IT_MESSAGES,
    client_for,
    first_choice,
    grammar_chunk_tm,
    post_chat_reply,
    sse_chunks,
)
from dsml_testutil import DSML, dsml_block, dsml_invoke, dsml_param
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from responses_testutil import sse
from transformers import PreTrainedTokenizerFast

CHAT = "/v1/chat/completions"
LONG = "The quick brown fox jumps over the lazy dog near the riverbank at dawn."


def _tool(name: str, props: dict[str, Any] | None = None) -> dict[str, Any]:
    """A function tool ``name`` whose parameters are ``props`` (one string ``q`` by default)."""
    params = {"type": "object", "properties": {"q": {"type": "string"}} if props is None else props}
    return {"type": "function", "function": {"name": name, "parameters": params}}


# --------------------------------------------------------------------------- finish_reason


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", "named"])
def test_forced_call_finishes_with_tool_calls(
    tok: PreTrainedTokenizerFast, stream: bool, choice: str
) -> None:
    """MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#177 and vllm-project/vllm#9209: a call forced
    by a named ``tool_choice`` came with correct arguments but the stream's last choice said
    ``finish_reason: "stop"``, so agent loops branching on ``"tool_calls"`` never ran the tool.
    Expected: the answer that makes the call finishes with ``"tool_calls"``, streamed (exactly
    one chunk carries a finish reason, after every tool-call delta) or not, under ``"required"``
    and the named function; the call's arguments are those written (``json.loads``)."""
    reply = dsml_block(dsml_invoke("record", dsml_param("q", True, "KEY-short")))
    tc_choice: Any = {"type": "function", "function": {"name": "record"}} if choice == "named" else choice
    r = post_chat_reply(tok, reply, {"tools": [_tool("record")], "tool_choice": tc_choice}, stream)
    ch = first_choice(r, stream)
    assert ch.finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls or []] == [
        ("record", {"q": "KEY-short"})
    ]
    if stream:
        chunks = [ChatCompletionChunk.model_validate(c) for c in sse_chunks(r.text)]
        finishes = [i for i, c in enumerate(chunks) for x in c.choices if x.finish_reason]
        deltas = [i for i, c in enumerate(chunks) for x in c.choices if x.delta.tool_calls]
        assert len(finishes) == 1 and deltas and max(deltas) <= finishes[0]
        assert chunks[finishes[0]].choices[0].finish_reason == "tool_calls"


# --------------------------------------------------------------------------- empty arguments


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required"])
def test_call_without_parameters_has_empty_object_arguments(
    tok: PreTrainedTokenizerFast, stream: bool, choice: str
) -> None:
    """pydantic/pydantic-ai#1407: a tool taking no arguments was called with ``args=''``, which
    the client's JSON parse rejects; OpenAI's ``arguments`` is a JSON object serialised, ``"{}"``
    when there is none. Expected: a DSML invoke of no parameters comes back as one call whose
    ``arguments`` ``json.loads`` to ``{}`` (never ``""``), streamed (the deltas joined) or not,
    ``finish_reason`` ``"tool_calls"``, no DSML in the content."""
    reply = f'\n\n<{DSML}tool_calls>\n<{DSML}invoke name="check_credentials">\n</{DSML}invoke>\n</{DSML}tool_calls>'
    body = {"tools": [_tool("check_credentials", {})], "tool_choice": choice}
    ch = first_choice(post_chat_reply(tok, reply, body, stream), stream)
    calls = ch.message.tool_calls or []
    assert [c.function.name for c in calls] == ["check_credentials"]
    assert calls[0].function.arguments.strip() and json.loads(calls[0].function.arguments) == {}
    assert ch.finish_reason == "tool_calls" and DSML not in (ch.message.content or "")


# --------------------------------------------------------------------------- incremental arguments


def test_chat_arguments_stream_as_they_are_written(tok: PreTrainedTokenizerFast) -> None:
    """cacheplane/b4run#777: tool-call arguments arrived in one delta holding the finished
    arguments, while text streamed token by token, so a client rendering from the arguments
    could not paint progressively. Expected: a long string argument written token by token
    arrives in several ``arguments`` deltas (at least one before the value is complete), whose
    concatenation is the non-streamed answer's arguments (a cold run), ``json.loads`` to the
    value written."""
    reply = dsml_block(dsml_invoke("render", dsml_param("q", True, LONG)))
    body = {"tools": [_tool("render")]}
    cold = (
        first_choice(post_chat_reply(tok, reply, body, False), False).message.tool_calls[0].function.arguments
    )
    pieces = []
    for c in sse_chunks(post_chat_reply(tok, reply, body, True).text):
        for ch in c["choices"]:
            for e in (ch.get("delta") or {}).get("tool_calls") or []:
                if (e.get("function") or {}).get("arguments"):
                    pieces.append(e["function"]["arguments"])
    assert "".join(pieces) == cold and json.loads(cold) == {"q": LONG}
    assert len(pieces) > 2, pieces
    assert any("quick" in p for p in pieces) and not any(LONG in p for p in pieces), pieces


def test_responses_arguments_stream_as_they_are_written(tok: PreTrainedTokenizerFast) -> None:
    """zendev-sh/goai#56: ``response.function_call_arguments.delta`` events were buffered until
    the arguments were whole, so large tool inputs showed nothing until the end. Expected on
    ``/v1/responses``: several argument deltas for a long argument written token by token (none
    holding the whole value), joined equal to ``.done``'s ``arguments`` and to the non-streamed
    response's call, ``json.loads`` to the value written."""
    reply = dsml_block(dsml_invoke("render", dsml_param("q", True, LONG)))
    tool = {"type": "function", "name": "render", "parameters": _tool("render")["function"]["parameters"]}
    _, tc = client_for(grammar_chunk_tm(tok, reply), allow_auto_truncate=False)
    body = {"model": "m", "input": "Do it.", "tools": [tool]}
    cold = tc.post("/v1/responses", json=body)
    assert cold.status_code == 200, cold.text
    whole = next(o["arguments"] for o in cold.json()["output"] if o["type"] == "function_call")
    s = tc.post("/v1/responses", json={**body, "stream": True})
    assert s.status_code == 200, s.text
    events = sse(s.text)
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    done = [e["arguments"] for e in events if e["type"] == "response.function_call_arguments.done"]
    assert done == [whole] and "".join(deltas) == whole and json.loads(whole) == {"q": LONG}
    assert len(deltas) > 2 and not any(LONG in d for d in deltas), deltas


# --------------------------------------------------------------------------- replayed answer


@pytest.mark.parametrize("stream", [False, True])
def test_clients_own_call_answer_replays_with_its_result(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """jundot/omlx#1334: DeepSeek-V4's DSML calls must come back as OpenAI ``tool_calls`` with
    ``finish_reason: "tool_calls"`` and the multi-turn loop with the tool results must work
    (Claude Code / agent clients). Expected: the assistant message exactly as the ``openai``
    client gave it (``model_dump``, streamed answers folded by its accumulator) is accepted back
    with a ``tool`` message answering its ``id``; the prompt is the one of the same turn written
    by hand (``content: null``, the call's name and arguments), and holds the result."""
    reply = dsml_block(dsml_invoke("get_weather", dsml_param("q", True, "Paris")))
    first = first_choice(post_chat_reply(tok, reply, {"tools": [_tool("get_weather")]}, stream), stream)
    assert first.finish_reason == "tool_calls"
    call = first.message.tool_calls[0]
    as_given = first.message.model_dump(exclude_none=True)
    by_hand = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"q": "Paris"})},
            }
        ],
    }
    prompts = []
    for turn in (as_given, by_hand):
        tm = grammar_chunk_tm(tok, "Sunny in Paris.")
        _, tc = client_for(tm, allow_auto_truncate=False)
        msgs = [*DO_IT_MESSAGES, turn, {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21C"}]
        r = tc.post(CHAT, json={"model": "m", "messages": msgs, "tools": [_tool("get_weather")]})
        assert r.status_code == 200, r.text
        assert ChatCompletion.model_validate(r.json()).choices[0].message.content == "Sunny in Paris."
        prompts.append(tok.decode(tm.received[0].input_ids))
    assert prompts[0] == prompts[1]
    assert "Sunny, 21C" in prompts[0] and 'name="get_weather"' in prompts[0]

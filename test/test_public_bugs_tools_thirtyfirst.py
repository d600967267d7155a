"""A thirty-first set of public reports on tool calling, in process: the ids and indexes of
parallel calls (distinct per call, streamed or not); a streamed call's id and name sent once, on
its first delta, and never changed on later deltas; ``tool_choice: "none"`` with no ``tools``;
an empty ``tools`` array refused as OpenAI and DeepSeek refuse it, and ``tools: null`` taken as
no tools.

The model's text is written by hand (:class:`~chat_tools_testutil.ChunkTM`). Oracles: the
``openai`` client (its response and chunk types, its stream accumulator), ``json.loads`` of the
arguments, the non-streamed answer of the same text (a cold run), the prompt of the same request
without ``tools`` (a cold run), and the OpenAI / DeepSeek behaviour the reports quote.

No fault was found by these reports; they stand as regression guards. local-inference-lab/vllm#193
(serve ``tools: []`` as no tools) was read but not followed: OpenAI's chat API refuses the empty
array (``empty_array``), as this server does.
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
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from openai.types.chat import ChatCompletionChunk
from transformers import PreTrainedTokenizerFast

CHAT = "/v1/chat/completions"
CITIES = ["Paris", "Oslo", "Lima"]


def _tool(name: str) -> dict[str, Any]:
    """A function tool ``name`` taking one string ``q``."""
    params = {"type": "object", "properties": {"q": {"type": "string"}}}
    return {"type": "function", "function": {"name": name, "parameters": params}}


def _three_calls() -> str:
    """A DSML block of three calls of ``get_weather``, one per city of :data:`CITIES`."""
    return dsml_block(*(dsml_invoke("get_weather", dsml_param("q", True, c)) for c in CITIES))


def _tool_call_deltas(text: str) -> list[dict[str, Any]]:
    """Every ``delta.tool_calls`` entry of a chat SSE body, in order (each chunk validated by the
    ``openai`` client's ``ChatCompletionChunk``)."""
    out = []
    for c in sse_chunks(text):
        ChatCompletionChunk.model_validate(c)
        for ch in c["choices"]:
            out.extend((ch.get("delta") or {}).get("tool_calls") or [])
    return out


# --------------------------------------------------------------------------- parallel calls


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_calls_have_distinct_ids(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """ai-dynamo/dynamo#10608: parallel calls of one answer all came back with the same id
    (``call-1``), so the client's ``tool`` messages could not say which result answers which call
    and test harnesses rejected the answer as ``duplicate_tool_ids``. Expected: three calls in one
    answer carry three distinct non-empty ids, streamed (folded by the ``openai`` client) or not,
    each with its own arguments in order (``json.loads``)."""
    ch = first_choice(post_chat_reply(tok, _three_calls(), {"tools": [_tool("get_weather")]}, stream), stream)
    calls = ch.message.tool_calls or []
    assert [json.loads(c.function.arguments) for c in calls] == [{"q": c} for c in CITIES]
    ids = [c.id for c in calls]
    assert all(ids) and len(set(ids)) == len(ids), ids
    assert ch.finish_reason == "tool_calls"


def test_streamed_parallel_calls_have_distinct_indexes(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-python#3241 and google-deepmind/amplio#3: a
    server streamed distinct parallel calls under one ``tool_calls[].index``, so clients
    accumulating by index glued two calls into one whose arguments were ``{..}{..}`` (not JSON).
    Expected: each streamed call has its own ``index`` (0, 1, 2 in order of first appearance), its
    deltas joined per index ``json.loads`` to that call's arguments, and equal the non-streamed
    answer of the same text (a cold run)."""
    body = {"tools": [_tool("get_weather")]}
    cold = first_choice(post_chat_reply(tok, _three_calls(), body, False), False).message.tool_calls
    deltas = _tool_call_deltas(post_chat_reply(tok, _three_calls(), body, True).text)
    order: list[int] = []
    args: dict[int, str] = {}
    for d in deltas:
        if d["index"] not in order:
            order.append(d["index"])
        args[d["index"]] = args.get(d["index"], "") + ((d.get("function") or {}).get("arguments") or "")
    assert order == [0, 1, 2], order
    assert [json.loads(args[i]) for i in order] == [{"q": c} for c in CITIES]
    assert [args[i] for i in order] == [c.function.arguments for c in cold]


# --------------------------------------------------------------------------- ids across deltas


def test_streamed_call_id_and_name_come_once_and_stay(tok: PreTrainedTokenizerFast) -> None:
    """poolsideai/pool#9, 0xPlaygrounds/rig#1510 and SillyTavern/SillyTavern#5948: servers sent a
    different ``id`` on later deltas of one call (clients split it into broken calls), or repeated
    the ``id``/``name`` on every delta (clients that append fields got
    ``chatcmpl-tool-aa62chatcmpl-tool-aa62..``). OpenAI sends the id, ``type`` and name on a
    call's first delta only and the arguments after. Expected: per ``index``, the first delta
    carries a non-empty ``id``, ``type: "function"`` and the name; no later delta of that index
    carries an ``id``, ``type`` or name; the ``openai`` client's fold keeps that id."""
    r = post_chat_reply(tok, _three_calls(), {"tools": [_tool("get_weather")]}, True)
    seen: dict[int, dict[str, Any]] = {}
    for d in _tool_call_deltas(r.text):
        fn = d.get("function") or {}
        if d["index"] not in seen:
            assert d.get("id") and d.get("type") == "function" and fn.get("name") == "get_weather", d
            seen[d["index"]] = d
        else:
            assert d.get("id") is None and d.get("type") is None and fn.get("name") is None, d
    folded = first_choice(r, True).message.tool_calls
    assert [c.id for c in folded] == [seen[i]["id"] for i in sorted(seen)]


# --------------------------------------------------------------------------- tool_choice / tools


@pytest.mark.parametrize("stream", [False, True])
def test_tool_choice_none_without_tools_is_accepted(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """vllm-project/vllm#10000: ``tool_choice: "none"`` with no ``tools`` (Semantic Kernel always
    sends it) was refused with "When using `tool_choice`, `tools` must be set". OpenAI accepts it:
    no tool may be called, and there is none. Expected: HTTP 200, the text as the answer, no
    ``tool_calls``, ``finish_reason`` ``"stop"``, streamed (folded by the ``openai`` client) or
    not."""
    ch = first_choice(post_chat_reply(tok, "A short poem.", {"tool_choice": "none"}, stream), stream)
    assert ch.message.content == "A short poem." and not ch.message.tool_calls
    assert ch.finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["absent", "auto", "none", "required", "named"])
def test_empty_tools_array_is_refused_cleanly(
    tok: PreTrainedTokenizerFast, stream: bool, choice: str
) -> None:
    """runebookai/tome#87: DeepSeek's API refuses ``"tools": []`` (the array needs at least one
    item, as OpenAI's ``empty_array`` error says), so clients must leave the field out; a server
    of the same API has to refuse it the same way, cleanly, whatever the ``tool_choice``
    (openclaw/openclaw#44229: a ``tool_choice`` sent with no tools is refused too). Expected:
    HTTP 400 in OpenAI's error shape with ``param`` ``"tools"``, before any stream starts (no
    SSE body), and nothing generated."""
    tm = grammar_chunk_tm(tok, "Hello there.")
    _, tc = client_for(tm, allow_auto_truncate=False)
    body: dict[str, Any] = {"model": "m", "messages": DO_IT_MESSAGES, "tools": [], "stream": stream}
    if choice != "absent":
        body["tool_choice"] = {"type": "function", "function": {"name": "f"}} if choice == "named" else choice
    r = tc.post(CHAT, json=body)
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json"), r.text
    err = r.json()["error"]
    assert err["param"] == "tools" and "empty" in err["message"], err
    assert tm.received == []


@pytest.mark.parametrize("stream", [False, True])
def test_null_tools_is_like_no_tools(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """runebookai/tome#87: the client's fix leaves ``tools`` out when it has none; clients that
    serialise the absent field as ``null`` (OpenAI's schema makes it nullable) must get the same
    answer. Expected: ``"tools": null`` with ``tool_choice`` ``"auto"`` answers HTTP 200 with the
    prompt of the same request without ``tools`` or ``tool_choice`` (a cold run) and the text
    as the answer, streamed (folded by the ``openai`` client) or not."""
    prompts = []
    for extra in ({"tools": None, "tool_choice": "auto"}, {}):
        tm = grammar_chunk_tm(tok, "Hello there.")
        _, tc = client_for(tm, allow_auto_truncate=False)
        r = tc.post(CHAT, json={"model": "m", "messages": DO_IT_MESSAGES, **extra, "stream": stream})
        assert r.status_code == 200, r.text
        ch = first_choice(r, stream)
        assert ch.message.content == "Hello there." and not ch.message.tool_calls
        prompts.append(tok.decode(tm.received[0].input_ids))
    assert prompts[0] == prompts[1]

"""A thirty-first set of public reports on tool calling, in process: the ids and indexes of
parallel calls (distinct per call, streamed or not); a streamed call's id and name sent once, on
its first delta, and never changed on later deltas; ``tool_choice: "none"`` with no ``tools``;
an empty ``tools`` array refused as OpenAI and DeepSeek refuse it, and ``tools: null`` taken as
no tools; history replayed as clients write it (a call turn with ``content: ""`` or ``[]``,
``tool_calls: []``, an empty assistant turn); a strict tool from the ``openai`` client's
``pydantic_function_tool``, parsed by the client's own ``.parse()`` / ``.stream()``; string
arguments holding quotes, backslashes, newlines and non-ASCII text kept valid JSON.

The model's text is written by hand (:class:`~chat_tools_testutil.ChunkTM`). Oracles: the
``openai`` client (its response and chunk types, its stream accumulator), ``json.loads`` of the
arguments, the non-streamed answer of the same text (a cold run), the prompt of the same request
without ``tools`` or of the history written the canonical way (a cold run), and the OpenAI /
DeepSeek behaviour the reports quote.

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


# --------------------------------------------------------------------------- replayed history


def _prompt(tok: PreTrainedTokenizerFast, messages: list[dict[str, Any]], tools: bool = True) -> str:
    """The decoded prompt of a chat request of ``messages`` (with the ``get_weather`` tool when
    ``tools``); HTTP 200 and a text answer asserted."""
    tm = grammar_chunk_tm(tok, "Done.")
    _, tc = client_for(tm, allow_auto_truncate=False)
    body: dict[str, Any] = {"model": "m", "messages": messages}
    if tools:
        body["tools"] = [_tool("get_weather")]
    r = tc.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "Done."
    return tok.decode(tm.received[0].input_ids)


def _call_turn(content: Any) -> list[dict[str, Any]]:
    """A user turn, an assistant call of ``get_weather`` whose ``content`` is ``content``, and the
    ``tool`` message answering it."""
    call = {
        "id": "call_7",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"q": "Oslo"}'},
    }
    return [
        *DO_IT_MESSAGES,
        {"role": "assistant", "content": content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_7", "content": "Snow, -3C"},
    ]


@pytest.mark.parametrize("content", ["", []])
def test_tool_call_turn_with_empty_content_replays(tok: PreTrainedTokenizerFast, content: Any) -> None:
    """agentjido/req_llm#966 and just-llms/justllms#33: clients replay an assistant call with
    ``content: ""`` (or no parts) instead of ``null``; some servers refused it, though OpenAI
    (and DeepSeek's API, measured in the first report) accept it. Expected: HTTP 200, and the same
    prompt as the turn with ``content: null`` (a cold run), holding the call and its result."""
    by_null = _prompt(tok, _call_turn(None))
    assert _prompt(tok, _call_turn(content)) == by_null
    assert "Snow, -3C" in by_null and 'name="get_weather"' in by_null


def test_empty_tool_calls_list_in_history_is_no_call(tok: PreTrainedTokenizerFast) -> None:
    """microsoft/autogen#5814: an agent replayed an assistant message with ``tool_calls: []``
    and a server answered "Empty tool_calls is not supported in message", failing the loop.
    Expected: HTTP 200; the message is read as the plain text turn it is (the same prompt as the
    message without ``tool_calls``, a cold run)."""
    plain = {"role": "assistant", "content": "Which city?"}
    follow = {"role": "user", "content": "Oslo."}
    by_hand = _prompt(tok, [*DO_IT_MESSAGES, plain, follow])
    assert _prompt(tok, [*DO_IT_MESSAGES, {**plain, "tool_calls": []}, follow]) == by_hand


@pytest.mark.parametrize("content", [None, ""])
def test_empty_assistant_turn_in_history_is_accepted(tok: PreTrainedTokenizerFast, content: Any) -> None:
    """tashfeenahmed/freellmapi#165: a server refused any history holding an assistant message
    with empty or ``null`` content and no ``tool_calls`` ("must include non-empty content or
    tool_calls"), which OpenAI accepts (an aborted or silent turn replayed verbatim). Expected:
    HTTP 200 and a text answer, without and with tools; the prompt holds both user turns."""
    msgs = [*DO_IT_MESSAGES, {"role": "assistant", "content": content}, {"role": "user", "content": "Again?"}]
    for tools in (False, True):
        prompt = _prompt(tok, msgs, tools)
        assert "Do it." in prompt and "Again?" in prompt


# --------------------------------------------------------------------------- strict tools


@pytest.mark.parametrize("stream", [False, True])
def test_strict_pydantic_tool_is_served_and_parsed_by_the_client(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """vllm-project/vllm#15526 and openai/openai-python#1733: a tool's ``function.strict`` was
    refused as an extra field ("Extra inputs are not permitted"), so the ``openai`` client's
    ``.parse()`` helper, which needs strict tools (``openai.pydantic_function_tool``), could not
    be used. Expected: the helper's request is served, and the client's own parser gives the
    call's ``parsed_arguments`` as the pydantic model of the arguments written, streamed (the
    client's ``.stream()`` accumulator) or not."""
    import openai
    from pydantic import BaseModel

    class GetWeather(BaseModel):
        city: str
        days: int

    reply = dsml_block(
        dsml_invoke("GetWeather", dsml_param("city", True, "Oslo"), dsml_param("days", False, "3"))
    )
    client, _ = client_for(grammar_chunk_tm(tok, reply), allow_auto_truncate=False)
    tool = openai.pydantic_function_tool(GetWeather)
    assert tool["function"]["strict"] is True
    kw: dict[str, Any] = {"model": "m", "messages": DO_IT_MESSAGES, "tools": [tool]}
    if stream:
        with client.chat.completions.stream(**kw) as s:
            ch = s.get_final_completion().choices[0]
    else:
        ch = client.chat.completions.parse(**kw).choices[0]
    assert ch.finish_reason == "tool_calls"
    [call] = ch.message.tool_calls or []
    assert call.function.parsed_arguments == GetWeather(city="Oslo", days=3)


# --------------------------------------------------------------------------- argument escaping

#: String values that need JSON escaping: quotes, a Windows path and a regex (backslashes), a
#: newline and a tab, and non-ASCII text.
AWKWARD = [
    'say "AI" twice',
    "C:\\path\\to\\file.txt",
    "grep -E '\\d+' x",
    "line1\nline2\tend",
    "naïve café ✓",
]


@pytest.mark.parametrize("stream", [False, True])
def test_string_arguments_with_quotes_backslashes_newlines_stay_json(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """cline/cline#10518 (DeepSeek V4 Flash: "Tool call run_commands emitted invalid JSON
    arguments ... escape embedded quotes/newlines inside string fields"), wanxingai/LightAgent#31
    (a call failed when the input held quotes, ``what is "AI"?``) and
    NousResearch/hermes-agent#110436 (``C:\\path`` and ``\\d+`` turned the arguments invalid).
    Expected: DSML string parameters holding quotes, backslashes, a newline, a tab and non-ASCII
    text come back as arguments that ``json.loads`` to exactly the values written, streamed (the
    deltas folded by the ``openai`` client) or not."""
    params = [dsml_param(f"a{i}", True, v) for i, v in enumerate(AWKWARD)]
    reply = dsml_block(dsml_invoke("run_commands", *params))
    props = {f"a{i}": {"type": "string"} for i in range(len(AWKWARD))}
    tool = {
        "type": "function",
        "function": {"name": "run_commands", "parameters": {"type": "object", "properties": props}},
    }
    ch = first_choice(post_chat_reply(tok, reply, {"tools": [tool]}, stream), stream)
    [call] = ch.message.tool_calls or []
    assert json.loads(call.function.arguments) == {f"a{i}": v for i, v in enumerate(AWKWARD)}

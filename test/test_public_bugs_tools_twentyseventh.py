"""A twenty-seventh set of public reports on tool calling, in process: namespaced tool names (``:``,
``.``, ``-``) through the DSML parser under every ``tool_choice``, streamed or not; the ``index``
of every streamed tool-call delta; streamed arguments that are never repeated; replayed
assistant turns whose ``content`` is ``null``, ``""`` or absent; and ``tool_choice`` checked
against ``tools`` on the Responses API.

No fault was found by these reports; they stand as regression guards of the behaviour each asked
for. The model's text is written by hand (:class:`~chat_tools_testutil.ChunkTM`). Oracles: the
``openai`` client (its response and chunk types, its stream accumulator), ``json.loads`` of the
arguments, the non-streamed answer of the same text (a cold run), the rendered prompt of the
same history written another way, and the OpenAI / vLLM behaviour tables the reports quote.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_tools_testutil import (
    WEATHER_FLAT,
    client_for,
    first_choice,
    grammar_chunk_tm,
    post_chat_reply,
    routes_client,
    sse_chunks,
)
from dsml_testutil import DSML, dsml_block, dsml_invoke, dsml_param
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response
from transformers import PreTrainedTokenizerFast

CHAT = "/v1/chat/completions"


def _tool(name: str) -> dict[str, Any]:
    """A function tool ``name`` taking one string ``q``."""
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
    }


# --------------------------------------------------------------------------- namespaced names


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "name",
    [
        "google-workspace:google-workspace",  # Blaizzy/mlx-vlm#1365 (MCP server:tool)
        "xyz.toolname",  # Blaizzy/mlx-vlm#1365 (dotted names)
        "mcp__github__create-pull-request",  # vercel/ai#7374 (several hyphens)
    ],
)
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_namespaced_tool_names_round_trip(
    tok: PreTrainedTokenizerFast, stream: bool, name: str, choice: str
) -> None:
    """Blaizzy/mlx-vlm#1365: a name regex of word characters and hyphens dropped every call to a
    colon-namespaced tool (``google-workspace:google-workspace``) as "Invalid tool call"; the fix
    also admits dotted names. vercel/ai#7374: a tool name holding several hyphens was cut at the
    second one. Expected: the call comes back with the whole name as declared, under
    ``tool_choice`` ``auto`` / ``required`` / the named function, streamed or not, its arguments
    the parameters written (``json.loads``), and ``finish_reason`` ``tool_calls``."""
    reply = dsml_block(dsml_invoke(name, dsml_param("q", True, "list_events")))
    tool_choice: Any = {"type": "function", "function": {"name": name}} if choice == "named" else choice
    ch = first_choice(
        post_chat_reply(tok, reply, {"tools": [_tool(name)], "tool_choice": tool_choice}, stream), stream
    )
    assert [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls or []] == [
        (name, {"q": "list_events"})
    ]
    assert ch.finish_reason == "tool_calls"
    assert DSML not in (ch.message.content or "")


# --------------------------------------------------------------------------- stream deltas


@pytest.mark.parametrize("per_chunk", [1, 4, 1000])
def test_every_streamed_tool_call_delta_has_its_index(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """ollama/ollama#7881, Oaklight/llm-rosetta#57, xorbitsai/inference#3634: streamed
    ``delta.tool_calls`` entries came without ``index``, which OpenAI always sends (from 0,
    enumerating the calls) and which the ``openai`` client's stream helper, LangChain and genai
    dereference. Expected: every entry of every chunk carries an integer ``index``; two
    parallel calls are ``0`` then ``1``; each call's ``id`` / ``name`` come once, on its first
    entry, with ``type: "function"``. Oracles: the ``openai`` client's ``ChatCompletionChunk``
    type; OpenAI's streaming format as the reports quote it."""
    reply = dsml_block(
        dsml_invoke("a:first", dsml_param("q", True, "one")),
        dsml_invoke("b.second", dsml_param("q", True, "two")),
    )
    r = post_chat_reply(tok, reply, {"tools": [_tool("a:first"), _tool("b.second")]}, True, per_chunk)
    entries = []
    for c in sse_chunks(r.text):
        ChatCompletionChunk.model_validate(c)
        for ch in c["choices"]:
            entries += (ch.get("delta") or {}).get("tool_calls") or []
    assert entries and all(type(e.get("index")) is int for e in entries), entries
    order = list(dict.fromkeys(e["index"] for e in entries))
    assert order == [0, 1], order
    for i, name in ((0, "a:first"), (1, "b.second")):
        mine = [e for e in entries if e["index"] == i]
        assert mine[0].get("id") and mine[0].get("type") == "function", mine[0]
        assert mine[0]["function"].get("name") == name
        assert [e for e in mine[1:] if e.get("id") or (e.get("function") or {}).get("name")] == []


@pytest.mark.parametrize("per_chunk", [1, 3, 1000])
def test_streamed_arguments_are_never_repeated(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """lidge-jun/opencodex#361 and elizaOS/eliza#16973: the argument deltas of a streamed call
    were followed by the whole arguments again, so a client concatenating the deltas, as the
    spec has it, got ``{...}{...}``. Expected: for each call the concatenated ``arguments``
    deltas are exactly the arguments of the same answer unstreamed (a cold run), one JSON
    object ``json.loads`` takes."""
    reply = dsml_block(
        dsml_invoke("shell", dsml_param("q", True, "ls /home/opc")),
        dsml_invoke("read_file", dsml_param("q", True, "/home/opc/README.md")),
    )
    body = {"tools": [_tool("shell"), _tool("read_file")]}
    cold = first_choice(post_chat_reply(tok, reply, body, False), False)
    whole = [c.function.arguments for c in cold.message.tool_calls]
    joined: dict[int, str] = {}
    for c in sse_chunks(post_chat_reply(tok, reply, body, True, per_chunk).text):
        for ch in c["choices"]:
            for e in (ch.get("delta") or {}).get("tool_calls") or []:
                joined[e["index"]] = joined.get(e["index"], "") + (
                    (e.get("function") or {}).get("arguments") or ""
                )
    assert [joined[i] for i in sorted(joined)] == whole
    assert [json.loads(a) for a in whole] == [{"q": "ls /home/opc"}, {"q": "/home/opc/README.md"}]


# --------------------------------------------------------------------------- replayed history


def test_replayed_tool_call_turn_with_null_empty_or_absent_content(tok: PreTrainedTokenizerFast) -> None:
    """OpenHands/OpenHands#8685 ("Assistant message must have either content or tool_calls"),
    langchain4j/langchain4j#1958 and BerriAI/litellm#39268 (the second turn of a tool loop
    refused because the replayed assistant turn has ``"content": null``, or no ``content``):
    OpenAI's own responses write ``content: null`` beside ``tool_calls``. Expected: the replayed
    turn is accepted with ``content`` ``null``, ``""`` or absent, the three render the same prompt
    (one meaning), and the prompt holds the replayed call (its name and its argument value)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "sqrt", "arguments": '{"q": "101"}'}}
    prompts = []
    for content in ({"content": None}, {"content": ""}, {}):
        tm = grammar_chunk_tm(tok, "About 10.05.")
        _, tc = client_for(tm, allow_auto_truncate=False)
        msgs = [
            {"role": "user", "content": "What is the square root of 101?"},
            {"role": "assistant", **content, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "10.0499"},
        ]
        r = tc.post(CHAT, json={"model": "m", "messages": msgs, "tools": [_tool("sqrt")]})
        assert r.status_code == 200, (content, r.text)
        assert ChatCompletion.model_validate(r.json()).choices[0].message.content == "About 10.05."
        prompts.append(tm.received[0].input_ids)
    assert prompts[0] == prompts[1] == prompts[2]
    text = tok.decode(prompts[0])
    assert 'name="sqrt"' in text and "101" in text and "10.0499" in text


# --------------------------------------------------------------------------- Responses API


@pytest.mark.parametrize(
    "extra, ok",
    [
        ({}, True),
        ({"tool_choice": "none"}, True),
        ({"tool_choice": "auto"}, True),
        ({"tools": [], "tool_choice": "none"}, True),
        ({"tools": [], "tool_choice": "auto"}, True),
        ({"tool_choice": "required"}, False),
        ({"tools": [], "tool_choice": "required"}, False),
        ({"tool_choice": {"type": "function", "name": "f"}}, False),
        ({"tools": [], "tool_choice": {"type": "function", "name": "f"}}, False),
        ({"tools": [WEATHER_FLAT], "tool_choice": {"type": "function", "name": "f"}}, False),
    ],
)
def test_responses_tool_choice_is_checked_against_tools(
    tok: PreTrainedTokenizerFast, extra: dict[str, Any], ok: bool
) -> None:
    """vllm-project/vllm#40399 (OpenAI's own answers, measured): on ``/v1/responses``, with no
    ``tools`` or ``tools: []``, ``tool_choice`` ``"none"`` / ``"auto"`` generate text, while
    ``"required"`` or a named function is an error; a named function missing from ``tools`` is
    an error too. Expected: the text cases answer 200 with a completed ``Response`` (the
    ``openai`` client's type) holding the model's text; the others a 400 in OpenAI's error
    shape naming ``tool_choice``, and no generation is started."""
    tm = grammar_chunk_tm(tok, "Hello.")
    tc = routes_client(tm)
    r = tc.post("/v1/responses", json={"model": "m", "input": "hi", **extra})
    if ok:
        assert r.status_code == 200, r.text
        resp = Response.model_validate(r.json())
        assert resp.status == "completed" and resp.output_text == "Hello."
        return
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "BadRequestError" and err["param"] == "tool_choice", err
    assert tm.received == []

"""Public bug reports of peer servers' and gateways' Anthropic Messages API (``/v1/messages``,
``/v1/messages/count_tokens``), replayed through the in-process routes (each test names its
report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: the
``anthropic`` client's own types (every body and event validated by ``post``), its stream
accumulator (``client.messages.stream``) and its error classes; the Messages API's streaming
reference (the event names, a delta's type is that of the open block, ``error`` events); and
DeepSeek's own Messages converter and V4 encoder (the ``deepseek-recipe`` package) for the prompt
a replayed conversation must render.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import anthropic
import deepseek_recipe as recipe
import pytest
from anthropic_testutil import WEATHER, make_clients, post
from deepseek_recipe_testutil import ids_in_written_order
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM, blocks
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
THINK = {"type": "enabled", "budget_tokens": 1024}
REASONING = "The user asks about the weather. I should look it up for Paris before answering."
#: the delta types each content block type takes (Anthropic's streaming Messages reference)
DELTA_OF = {
    "text": ("text_delta",),
    "thinking": ("thinking_delta", "signature_delta"),
    "tool_use": ("input_json_delta",),
}
#: every event type of Anthropic's streaming Messages reference
EVENT_TYPES = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 8}


def _set_fields(bs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Content blocks without their unset (``None``) fields and their ``id`` (fresh per request)."""
    return [{k: v for k, v in b.items() if v is not None and k != "id"} for b in bs]


def _frames(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event line, data)`` of each frame of a raw server-sent-event stream; each frame must be
    exactly one ``event:`` and one ``data:`` line."""
    out = []
    for frame in text.split("\n\n"):
        if not frame.strip():
            continue
        lines = frame.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), frame
        out.append((lines[0].removeprefix("event: "), json.loads(lines[1].removeprefix("data: "))))
    return out


def _stream_raw(tc: Any, body: dict[str, Any]) -> str:
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 100, **body, "stream": True})
    assert r.status_code == 200, r.text
    return r.text


def _block_kinds_checked(events: list[dict[str, Any]]) -> list[str]:
    """The content block types in stream order; asserts each delta's type is one its open block
    takes and a thinking block's last delta is its ``signature_delta``."""
    kinds: list[str] = []
    open_type, last_delta = None, None
    for ev in events:
        if ev["type"] == "content_block_start":
            open_type = ev["content_block"]["type"]
            kinds.append(open_type)
        elif ev["type"] == "content_block_delta":
            assert ev["delta"]["type"] in DELTA_OF[open_type], (open_type, ev)
            last_delta = ev["delta"]["type"]
        elif ev["type"] == "content_block_stop":
            if open_type == "thinking":
                assert last_delta == "signature_delta"
            open_type = None
    return kinds


def test_reasoning_deltas_stay_in_the_thinking_block(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#33224: a reasoning model's last ``thinking_delta`` was sent into the
    ``text`` block opened for the answer, and Claude Code rejected the stream ("Content block is
    not a thinking block"). Streamed token by token, every reasoning delta is a ``thinking_delta``
    of the thinking block (closed by its ``signature_delta``) before the text block opens, every
    answer delta a ``text_delta`` of the text block; the client's accumulation of the stream is the
    non-streamed message."""
    reply = REASONING + "</think>It is sunny in Paris today."
    tm = PromptTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "thinking": THINK})
    assert _block_kinds_checked(events) == ["thinking", "text"]
    thinking = "".join(e["delta"].get("thinking", "") for e in events if e["type"] == "content_block_delta")
    assert thinking == REASONING
    with client.messages.stream(model=MODEL, max_tokens=100, messages=USER, thinking=THINK) as s:
        final = s.get_final_message()
    assert _set_fields(blocks(final)) == _set_fields(body["content"])
    assert [b["type"] for b in body["content"]] == ["thinking", "text"]
    assert body["content"][1]["text"] == "It is sunny in Paris today."


def test_one_message_start_and_a_visible_answer_after_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#32357: a gateway in front of a reasoning model sent ``message_start``
    twice and streamed the reasoning inside a ``text`` block, so the Anthropic SDK (Claude Code)
    assembled an empty message ("Your previous response had no visible output"). The stream has
    one ``message_start`` (first), one ``message_delta`` and one ``message_stop`` (last); the
    SDK's assembled message has the reasoning as a ``thinking`` block and the answer as a
    non-empty ``text`` block."""
    tm = PromptTM(tok, reply=REASONING + "</think>Sunny, 25 degrees.")
    client, _, tc = make_clients(tm)
    _, events = post(tc, {"messages": USER, "thinking": THINK})
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [kinds.count(k) for k in ("message_start", "message_delta", "message_stop")] == [1, 1, 1]
    with client.messages.stream(model=MODEL, max_tokens=100, messages=USER, thinking=THINK) as s:
        final = s.get_final_message()
    assert [(b.type, getattr(b, "text", None)) for b in final.content] == [
        ("thinking", None),
        ("text", "Sunny, 25 degrees."),
    ]
    assert final.content[0].thinking == REASONING


class RepeatingTM(PromptTM):
    """A :class:`PromptTM` whose stream sends every output twice: a step that adds no text, as
    the detokenizer's while it holds back the bytes of an unfinished character."""

    async def generate_request(self, obj: Any, request: Any = None) -> Any:
        async for out in super().generate_request(obj, request):
            if obj.stream and out["meta_info"]["finish_reason"] is None:
                yield copy.deepcopy(out)
            yield out


@pytest.mark.parametrize("tools", [False, True])
def test_no_empty_delta_when_a_step_adds_no_text(tok: PreTrainedTokenizerFast, tools: bool) -> None:
    """BerriAI/litellm#29441: empty ``content_block_delta`` events (an upstream step that carried
    no new reasoning or text) were passed on, and a client rejected them. An engine step that adds
    nothing (the same cumulative text again) sends no event: no ``thinking_delta``,
    ``text_delta`` or ``input_json_delta`` is empty, and the stream still adds up to the
    non-streamed message."""
    reply = "Need the forecast.</think>Let me check." + (CALL if tools else " Sunny.")
    tm = RepeatingTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    extra: dict[str, Any] = {"tools": [WEATHER]} if tools else {}
    body, events = post(tc, {"messages": USER, "thinking": THINK, **extra})
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert len(deltas) > 3
    for d in deltas:
        payload = {k: v for k, v in d.items() if k != "type"}
        assert all(v != "" for v in payload.values()), d
    with client.messages.stream(model=MODEL, max_tokens=100, messages=USER, thinking=THINK, **extra) as s:
        final = s.get_final_message()
    assert _set_fields(blocks(final)) == _set_fields(body["content"])
    if tools:
        assert body["content"][-1]["input"] == ARGS


def test_engine_error_mid_stream_is_an_anthropic_error_event(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#4562: an ``error`` event in the middle of a stream (after some text
    deltas) was not reported; the client saw a cut answer as if it were whole. Here an engine
    failure after three tokens ends the stream with one ``event: error`` frame holding Anthropic's
    error body (``{"type": "error", "error": {"type": "api_error", "message"}}``, the message
    naming the failure), with no ``message_delta`` or ``message_stop`` after the text; the
    ``anthropic`` client raises instead of returning a message."""
    tm = PromptTM(tok, reply="It is sunny and warm in Paris today.", abort_after=3)
    client, _, tc = make_clients(tm)
    frames = _frames(_stream_raw(tc, {"messages": USER}))
    names = [name for name, _ in frames]
    assert "content_block_delta" in names
    assert names[-1] == "error" and names.count("error") == 1
    assert "message_delta" not in names and "message_stop" not in names
    body = frames[-1][1]
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert body["error"]["type"] == "api_error" and "engine failure" in body["error"]["message"]
    with pytest.raises(anthropic.APIStatusError) as ei:
        with client.messages.stream(model=MODEL, max_tokens=100, messages=USER) as s:
            s.get_final_message()
    assert "engine failure" in str(ei.value)


def test_server_web_search_tool_is_a_clear_anthropic_400(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#46790: Claude Code's WebSearch sends Anthropic's server tool
    ``{"type": "web_search_20250305", "name": "web_search", "max_uses": 8}``; the server answered
    a 400 whose message was a Python ``repr`` of a validation error about a missing
    ``input_schema``. A server tool cannot run here: both routes answer a 400 in Anthropic's error
    shape (``invalid_request_error``) whose message starts with the field, ``tools.0.type``, and
    names the tool type, the ``anthropic`` client raises ``BadRequestError``, and nothing reaches
    the engine."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)
    for path, extra in (("/v1/messages", {"max_tokens": 100}), ("/v1/messages/count_tokens", {})):
        for stream in (False, True) if path == "/v1/messages" else (False,):
            body = {"model": MODEL, "messages": USER, "tools": [WEB_SEARCH], **extra}
            r = tc.post(path, json={**body, **({"stream": True} if stream else {})})
            assert r.status_code == 400, r.text
            err = r.json()
            assert set(err) == {"type", "error"} and err["error"]["type"] == "invalid_request_error"
            message = err["error"]["message"]
            assert message.startswith("tools.0.type") and "web_search_20250305" in message
            assert "{'" not in message and "input_schema" not in message
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=100, messages=USER, tools=[WEB_SEARCH])
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model=MODEL, messages=USER, tools=[WEB_SEARCH])
    assert tm.received == []


@pytest.mark.parametrize("kind", ["image", "document"])
def test_image_in_a_tool_result_is_refused_by_name_not_dropped(
    tok: PreTrainedTokenizerFast, kind: str
) -> None:
    """jundot/omlx#393: an ``image`` block inside a ``tool_result`` (Claude Code's Read tool on a
    PNG) was silently dropped, so the model answered about a picture it never saw;
    CommandCodeAI/command-code#850 asks for a specific error instead of a generic one. The model
    reads text only: the request is a 400 naming the block
    (``messages.2.content.0.content.0.type``) and saying that its kind is not supported, as an
    image in a message is, streamed or not and on ``count_tokens``; nothing reaches the engine."""
    tm = PromptTM(tok, reply="Sunny.")
    _, _, tc = make_clients(tm)
    source = (
        {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
        if kind == "image"
        else {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}
    )
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": kind, "source": source}, {"type": "text", "text": "Image of /tmp/shot.png"}],
    }
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    messages = [*USER, {"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
    for path, extra in (
        ("/v1/messages", {"max_tokens": 50}),
        ("/v1/messages", {"max_tokens": 50, "stream": True}),
        ("/v1/messages/count_tokens", {}),
    ):
        r = tc.post(path, json={"model": MODEL, "messages": messages, "tools": [WEATHER], **extra})
        assert r.status_code == 400, r.text
        message = r.json()["error"]["message"]
        assert message.startswith("messages.2.content.0.content.0.type")
        assert repr(kind) in message and "not supported" in message
    assert tm.received == []


def test_every_frame_names_its_event_error_included(tok: PreTrainedTokenizerFast) -> None:
    """earendil-works/pi#1983: a server sent ``data:`` lines without the ``event:`` line before
    them; the ``@anthropic-ai/sdk`` parser dispatches on the event name, so it dropped every event
    ("request ended without sending any chunks"). Each frame of a stream here is an ``event:``
    line naming the data's ``type`` and one ``data:`` line, for reasoning, text and tool-use
    streams and for the ``error`` frame of a failed one."""
    tm = PromptTM(tok, reply="Need it.</think>Checking." + CALL)
    _, _, tc = make_clients(tm)
    frames = _frames(_stream_raw(tc, {"messages": USER, "thinking": THINK, "tools": [WEATHER]}))
    assert {name for name, _ in frames} >= {"message_start", "ping", "content_block_delta", "message_stop"}
    assert all(name == data["type"] for name, data in frames)
    failing = PromptTM(tok, reply="It is sunny and warm.", abort_after=2)
    _, _, tc = make_clients(failing)
    frames = _frames(_stream_raw(tc, {"messages": USER}))
    assert frames[-1][0] == "error" and all(name == data["type"] for name, data in frames)


@pytest.mark.parametrize(
    ("reply", "body"),
    [
        ("Sunny.", {}),
        ("Need it.</think>Checking." + CALL, {"thinking": THINK, "tools": [WEATHER]}),
        ("It is sunny and warm in Paris today.", {"max_tokens": 3}),
        ("Sunny.", {"max_tokens": 0}),
    ],
)
def test_stream_sends_only_documented_event_types(
    tok: PreTrainedTokenizerFast, reply: str, body: dict[str, Any]
) -> None:
    """vercel/ai#11309: an Anthropic-compatible proxy passed on a ``vertex_event`` its upstream
    sent, and strict clients (the AI SDK's discriminated union) failed on the unknown type. Every
    event of a stream here is one of the streaming reference's types, with a ``ping`` right after
    ``message_start``; text, reasoning with a tool call, a ``max_tokens`` cut and a pre-warm call
    alike."""
    tm = PromptTM(tok, reply=reply)
    _, _, tc = make_clients(tm)
    _, events = post(tc, {"messages": USER, **body})
    kinds = [e["type"] for e in events]
    assert set(kinds) <= EVENT_TYPES, kinds
    assert kinds[:2] == ["message_start", "ping"]


@pytest.mark.parametrize(
    ("reply", "max_tokens", "has_call"),
    [
        ("Sunny.", 100, False),
        ("Let me check." + CALL, 300, True),
        (CALL, 300, True),
        ("Let me check." + CALL, 12, False),
        ("Recall.</think>Let me check." + CALL, 300, True),
    ],
)
def test_stop_reason_tool_use_iff_a_tool_use_block(
    tok: PreTrainedTokenizerFast, reply: str, max_tokens: int, has_call: bool
) -> None:
    """anthropics/claude-code#40240: a response said ``stop_reason: "tool_use"`` while its
    content held only a text block, so the agent announced an action and never took it. A
    ``tool_use`` stop comes with a whole ``tool_use`` block and a ``tool_use`` block (a whole
    call) with a ``tool_use`` stop, in the message and in the client's accumulation of the
    stream: text only, text and a call, a call alone, a call cut by ``max_tokens`` (a
    ``max_tokens`` stop), reasoning then a call."""
    tm = PromptTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    extra: dict[str, Any] = {"thinking": THINK} if "</think>" in reply else {}
    body, _ = post(tc, {"messages": USER, "tools": [WEATHER], "max_tokens": max_tokens, **extra})
    with client.messages.stream(
        model=MODEL, max_tokens=max_tokens, messages=USER, tools=[WEATHER], **extra
    ) as s:
        final = s.get_final_message()
    for reason, kinds, inputs in (
        (
            body["stop_reason"],
            [b["type"] for b in body["content"]],
            [b.get("input") for b in body["content"]],
        ),
        (
            final.stop_reason,
            [b.type for b in final.content],
            [getattr(b, "input", None) for b in final.content],
        ),
    ):
        assert (reason == "tool_use") == has_call, (reason, kinds)
        if has_call:
            assert kinds[-1] == "tool_use" and inputs[-1] == ARGS
        elif max_tokens < 100:
            assert reason == "max_tokens"
        else:
            assert "tool_use" not in kinds


@pytest.mark.parametrize("cache_report", [False, True])
def test_usage_counts_are_never_null(tok: PreTrainedTokenizerFast, cache_report: bool) -> None:
    """vllm-project/vllm#33923: the Messages ``usage`` sent ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens`` as ``null``; its fix (vllm-project/vllm#40912) leaves an
    unknown cache count out and reports ``cache_creation_input_tokens: 0`` when the cache is
    reported (as ai-dynamo/dynamo#12472 does too). Here every count of the message's
    ``usage``, ``message_start``'s and ``message_delta``'s is an integer, and the three have the
    same keys: without ``--enable-cache-report`` just ``input_tokens`` and ``output_tokens``, with
    it the cache counts too (the prompt = ``input_tokens`` + ``cache_read_input_tokens``). The
    client reads the same usage either way."""
    tm = PromptTM(tok, reply="Sunny and warm.")
    client, _, tc = make_clients(tm, cache_report=cache_report)
    body, events = post(tc, {"messages": USER})
    start = events[0]["message"]["usage"]
    delta = next(e for e in events if e["type"] == "message_delta")["usage"]
    for usage in (body["usage"], start, delta):
        assert all(isinstance(v, int) for v in usage.values()), usage
    keys = {"input_tokens", "output_tokens"}
    if cache_report:
        keys |= {"cache_creation_input_tokens", "cache_read_input_tokens"}
        assert body["usage"]["cache_creation_input_tokens"] == 0
    assert set(body["usage"]) == set(start) == set(delta) == keys
    n_prompt = len(tm.received[-1].input_ids)
    assert body["usage"]["input_tokens"] + body["usage"].get("cache_read_input_tokens", 0) == n_prompt
    m = client.messages.create(model=MODEL, max_tokens=100, messages=USER)
    assert m.usage.input_tokens == body["usage"]["input_tokens"]
    assert m.usage.cache_read_input_tokens == body["usage"].get("cache_read_input_tokens")


@pytest.mark.parametrize(
    "headers",
    [{}, {"anthropic-version": "2023-06-01, 2023-06-01"}, {"anthropic-version": "2023-06-01"}],
)
def test_anthropic_version_header_is_not_required_nor_checked(
    tok: PreTrainedTokenizerFast, headers: dict[str, str]
) -> None:
    """decolua/9router#2357: a gateway doubled the ``anthropic-version`` header
    (``"2023-06-01, 2023-06-01"``) and the request failed with a 400 about it. This server has a
    single API version and reads no version header: a request without it (a plain ``curl``), with
    a doubled value, or with the client's own value, gets the same answer from the same prompt."""
    tm = PromptTM(tok, reply="Sunny.")
    _, _, tc = make_clients(tm)
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 50, "messages": USER}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["content"] == [{"type": "text", "text": "Sunny."}]
    assert r.json()["stop_reason"] == "end_turn"
    r = tc.post("/v1/messages/count_tokens", json={"model": MODEL, "messages": USER}, headers=headers)
    assert r.status_code == 200 and r.json() == {"input_tokens": len(tm.received[-1].input_ids)}


def _recipe_prompt(body: dict[str, Any]) -> str:
    """DeepSeek's own prompt text (``deepseek-recipe``'s Messages converter and V4 encoder) of a
    Messages request body, thinking disabled."""
    b = {**ids_in_written_order(body, "toolu_"), "model": "DeepSeek-V4-Pro", "thinking": {"type": "disabled"}}
    req = recipe.MessagesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def test_replayed_empty_text_block_before_a_tool_use_is_served(tok: PreTrainedTokenizerFast) -> None:
    """anthropics/claude-code#88536: a server streamed an empty leading ``text`` block before a
    tool call; Claude Code stored it and replayed ``{"type": "text", "text": ""}`` on every later
    turn, which Anthropic's API refuses ("text content blocks must be non-empty"), breaking the
    session for good. Here a tool-only turn streams no empty text block to store, and a history
    that carries one anyway (written by another server) is served: it renders the prompt
    DeepSeek's own Messages converter renders, the same as without the empty block."""
    tm = PromptTM(tok, reply=CALL)
    client, _, tc = make_clients(tm)
    _, events = post(tc, {"messages": USER, "tools": [WEATHER]})
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [b["type"] for b in starts] == ["tool_use"]
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}],
    }
    prompts = []
    for assistant in ([{"type": "text", "text": ""}, call], [call]):
        body = {"messages": [*USER, {"role": "assistant", "content": assistant}, result], "tools": [WEATHER]}
        client.messages.create(model=MODEL, max_tokens=50, thinking={"type": "disabled"}, **body)
        prompts.append(tok.decode(tm.received[-1].input_ids))
        assert prompts[-1] == _recipe_prompt(body)
    assert prompts[0] == prompts[1]

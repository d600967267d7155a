"""Anthropic's ``ping`` event as the SSE keep-alive of ``/v1/messages`` (``--sse-keep-alive-interval``).

Claude Code and other Anthropic clients feed only SSE events, never SSE comments, to their stall
watchdogs (public reports: MadSkittles/Router-Maestro#61, ollama/ollama#14902,
BerriAI/litellm#36024), and no event may come before ``message_start``. So a Messages stream silent
for an interval sends ``event: ping`` / ``data: {"type": "ping"}`` (Anthropic's streaming docs),
with ``message_start`` sent first when the first output has not come yet.

Oracles: the ``anthropic`` client's own SSE decoder and stream accumulator
(``client.messages.stream`` / ``create(stream=True)``) and its event, message and error types; the
non-streamed message of the same request; the same request on an app without the keep-alive (the
frames, byte for byte apart from ids); ``/v1/messages/count_tokens`` for the prompt's size.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest
from anthropic.types import ErrorResponse, Message, RawMessageStreamEvent
from anthropic_testutil import WEATHER, make_clients
from fake_prompt_tm import CALL, MODEL, PromptTM, SlowTM
from pydantic import TypeAdapter
from sglang_v4.managers.io_struct import GenerateReqInput
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
REPLY = "It is sunny in Paris today."
#: the silence before the first output, and the keep-alive interval (several fit in it)
DELAY_S = 0.4
INTERVAL_S = 0.05
EVENTS = TypeAdapter(RawMessageStreamEvent)


def _clients(tm: PromptTM, interval: float, cache_report: bool = False) -> tuple[anthropic.Anthropic, Any]:
    """The ``anthropic`` client and the test client of an app over ``tm``, its keep-alive interval
    ``interval`` seconds (0: off)."""
    client, _, tc = make_clients(tm, cache_report=cache_report)
    tc.app.state.sse_keep_alive_interval = interval
    return client, tc


def _frames(text: str) -> list[dict[str, Any]]:
    """Each SSE frame of ``text`` as ``{"event", "data"}`` (``data`` parsed as JSON); a comment
    frame as ``{"comment": line}``. Parsed by the SSE rules (lines ``field: value``), not by the
    server's code."""
    out: list[dict[str, Any]] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        if block.startswith(":"):
            out.append({"comment": block})
            continue
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append({"event": fields.get("event"), "data": json.loads(fields["data"])})
    return out


def _is_ping(f: dict[str, Any]) -> bool:
    return f.get("event") == "ping" and f.get("data") == {"type": "ping"}


def _without_ids(m: Message) -> dict[str, Any]:
    """``m`` as a dict without its per-request ids (the message's, each ``tool_use`` block's)."""
    d = m.model_dump()
    d.pop("id")
    for b in d["content"]:
        if b["type"] == "tool_use":
            b["id"] = ""
    return d


@pytest.mark.parametrize("cache_report", [False, True])
@pytest.mark.parametrize("tools", [False, True])
def test_client_parsers_read_a_pinged_stream_as_the_whole_message(
    tok: PreTrainedTokenizerFast, cache_report: bool, tools: bool
) -> None:
    """The ``anthropic`` client's stream helper and raw ``create(stream=True)`` read a stream whose
    silence before the first output is filled with ``ping`` events (after an early
    ``message_start``): the accumulated message equals the non-streamed one, content, stop reason
    and every usage count (with ``--enable-cache-report`` the cache split too, which only the
    closing ``message_delta`` knows)."""
    reply = "Checking." + CALL if tools else REPLY
    kw: dict[str, Any] = {"model": MODEL, "max_tokens": 200, "messages": USER}
    if tools:
        kw["tools"] = [WEATHER]
    client, _ = _clients(SlowTM(tok, reply=reply, delay_s=DELAY_S), INTERVAL_S, cache_report)
    whole = client.messages.create(**kw)
    with client.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert _without_ids(final) == _without_ids(whole)
    assert final.stop_reason == ("tool_use" if tools else "end_turn")
    if cache_report:
        assert final.usage.cache_read_input_tokens is not None and final.usage.cache_read_input_tokens > 0
    events = list(client.messages.create(**kw, stream=True))
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    assert "ping" not in [e.type for e in events]  # the client's decoder drops ping events
    start = events[0].message.usage
    end = next(e for e in events if e.type == "message_delta").usage
    # message_start's prompt count is the whole prompt; the closing counts are the message's
    total = (start.input_tokens or 0) + (start.cache_read_input_tokens or 0)
    total += start.cache_creation_input_tokens or 0
    assert total == whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0)
    assert (end.input_tokens, end.output_tokens) == (whole.usage.input_tokens, whole.usage.output_tokens)
    assert end.cache_read_input_tokens == whole.usage.cache_read_input_tokens


def test_a_slow_first_output_gets_message_start_and_pings_first(tok: PreTrainedTokenizerFast) -> None:
    """A first output slower than the interval: the stream opens with ``message_start`` (a valid
    ``Message`` with empty content, ``input_tokens`` the prompt's count as ``count_tokens`` gives
    it), then ``event: ping`` frames with data ``{"type": "ping"}`` fill the silence before the
    first content block; no SSE comment is sent. The other events are Anthropic's types and are
    those of the same request without the keep-alive (byte for byte apart from the message id,
    and the one ``ping`` after ``message_start`` both have)."""
    client, tc = _clients(SlowTM(tok, reply=REPLY, delay_s=DELAY_S), INTERVAL_S)
    _, quiet = _clients(SlowTM(tok, reply=REPLY, delay_s=DELAY_S), 0)
    body = {"model": MODEL, "max_tokens": 50, "messages": USER, "stream": True}
    r = tc.post("/v1/messages", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    frames = _frames(r.text)
    assert not [f for f in frames if "comment" in f]
    assert frames[0]["event"] == "message_start"
    start = Message.model_validate(frames[0]["data"]["message"])
    assert start.content == [] and start.stop_reason is None and start.usage.output_tokens == 0
    counted = client.messages.count_tokens(model=MODEL, messages=USER).input_tokens  # type: ignore[arg-type]
    assert start.usage.input_tokens == counted
    first_block = next(i for i, f in enumerate(frames) if f["event"] == "content_block_start")
    assert first_block >= 4 and all(_is_ping(f) for f in frames[1:first_block])
    assert not [f for f in frames[first_block:] if f["event"] == "ping"]  # outputs came without pause
    for f in frames:
        assert f["event"] == f["data"]["type"]
        if f["event"] != "ping":
            EVENTS.validate_python(f["data"])
    assert "event: ping\ndata: " in r.text

    plain = _frames(quiet.post("/v1/messages", json=body).text)

    def strip(fs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [f for f in fs if not _is_ping(f)]
        out[0]["data"]["message"]["id"] = ""
        return out

    assert [f["event"] for f in plain[:2]] == ["message_start", "ping"]
    assert strip(frames) == strip(plain)


def test_a_fast_first_output_streams_as_without_the_keep_alive(tok: PreTrainedTokenizerFast) -> None:
    """A first output that comes within the interval: the stream is the one sent without the
    keep-alive (``message_start``, one ``ping``, the blocks), frame for frame, and an abort as the
    first output is still the plain HTTP error (the client's ``InternalServerError``), not a
    stream."""
    body = {"model": MODEL, "max_tokens": 50, "messages": USER, "stream": True}
    _, kept = _clients(PromptTM(tok, reply=REPLY), 5.0)
    _, quiet = _clients(PromptTM(tok, reply=REPLY), 0)
    a, b = (
        _frames(kept.post("/v1/messages", json=body).text),
        _frames(quiet.post("/v1/messages", json=body).text),
    )
    for fs in (a, b):
        fs[0]["data"]["message"]["id"] = ""
    assert a == b and [f["event"] for f in a[:3]] == ["message_start", "ping", "content_block_start"]
    client, tc = _clients(PromptTM(tok, reply=REPLY, abort_after=0), 5.0)
    with pytest.raises(anthropic.InternalServerError, match="engine failure"):
        list(client.messages.create(model=MODEL, max_tokens=50, messages=USER, stream=True))
    r = tc.post("/v1/messages", json=body)
    assert r.status_code == 500
    ErrorResponse.model_validate(r.json())


@pytest.mark.parametrize(("status", "err_type"), [(500, "api_error"), (400, "invalid_request_error")])
def test_an_abort_after_an_early_start_is_an_error_event(
    tok: PreTrainedTokenizerFast, status: int, err_type: str
) -> None:
    """An engine abort that comes after the early ``message_start`` (the answer is 200 already)
    is Anthropic's in-stream ``event: error`` (an ``ErrorResponse``, the type Anthropic's docs give
    the status: 500 ``api_error``, 400 ``invalid_request_error``) and the stream ends there; the
    ``anthropic`` client raises it with the abort's message, never a message that finished."""
    reason = {"type": "abort", "message": "engine failure", "status_code": status}
    tm = SlowTM(tok, reply=REPLY, delay_s=DELAY_S, abort_after=0, abort_reason=reason)
    client, tc = _clients(tm, INTERVAL_S)
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 50, "messages": USER, "stream": True})
    assert r.status_code == 200
    frames = _frames(r.text)
    assert frames[0]["event"] == "message_start" and _is_ping(frames[1])
    assert all(_is_ping(f) for f in frames[1:-1]) and len(frames) >= 5
    assert frames[-1]["event"] == "error"
    err = ErrorResponse.model_validate(frames[-1]["data"])
    assert (err.error.type, err.error.message) == (err_type, "engine failure")
    with pytest.raises(anthropic.APIStatusError, match="engine failure"):
        with client.messages.stream(model=MODEL, max_tokens=50, messages=USER) as s:
            s.get_final_message()


class PausingTM(PromptTM):
    """:class:`PromptTM` that goes silent for ``pause_s`` seconds before its third output (a
    withheld tool call, a slow step) and answers its first at once."""

    def __init__(self, *args: Any, pause_s: float = 0.4, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.pause_s = pause_s

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        k = 0
        async for out in super().generate_request(obj, request):
            if k == 2:
                await asyncio.sleep(self.pause_s)
            k += 1
            yield out


def test_a_silence_mid_stream_sends_pings(tok: PreTrainedTokenizerFast) -> None:
    """A silence after the stream started (between two outputs) is filled with ``ping`` events,
    never SSE comments, and the ``anthropic`` client still accumulates the non-streamed message."""
    client, tc = _clients(PausingTM(tok, reply=REPLY), INTERVAL_S)
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 50, "messages": USER, "stream": True})
    frames = _frames(r.text)
    assert not [f for f in frames if "comment" in f]
    first_block = next(i for i, f in enumerate(frames) if f["event"] == "content_block_start")
    later = [i for i, f in enumerate(frames) if _is_ping(f) and i > first_block]
    assert len(later) >= 3 and frames[1]["event"] == "ping" and first_block == 2
    whole = client.messages.create(model=MODEL, max_tokens=50, messages=USER)  # type: ignore[arg-type]
    with client.messages.stream(model=MODEL, max_tokens=50, messages=USER) as s:  # type: ignore[arg-type]
        assert _without_ids(s.get_final_message()) == _without_ids(whole)


@pytest.mark.parametrize("delay_s", [0.0, 0.002, 0.01])
def test_no_event_precedes_message_start(tok: PreTrainedTokenizerFast, delay_s: float) -> None:
    """With an interval about the first output's delay (either may come first), the stream's first
    frame is always ``message_start``, which the ``anthropic`` client's accumulator requires before
    any other event, and exactly one ``message_start`` is sent."""
    client, tc = _clients(SlowTM(tok, reply=REPLY, delay_s=delay_s), 0.002)
    body = {"model": MODEL, "max_tokens": 50, "messages": USER, "stream": True}
    for _ in range(4):
        frames = _frames(tc.post("/v1/messages", json=body).text)
        assert frames[0]["event"] == "message_start" and _is_ping(frames[1])
        assert [f["event"] for f in frames].count("message_start") == 1
        assert frames[-1]["event"] == "message_stop"
    with client.messages.stream(model=MODEL, max_tokens=50, messages=USER) as s:  # type: ignore[arg-type]
        assert s.get_final_message().content[0].text == REPLY  # type: ignore[union-attr]


class TruncatingTM(SlowTM):
    """:class:`SlowTM` that cuts a prompt over ``max_req_input_len`` tokens to its first ones, as
    the tokenizer manager does under ``--allow-auto-truncate`` (SGLang's
    ``TokenizerManager._validate_one_request``), so its outputs report the cut length."""

    max_req_input_len = 5

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        obj.input_ids = list(obj.input_ids)[: self.max_req_input_len]
        async for out in super().generate_request(obj, request):
            yield out


def test_an_early_start_counts_the_auto_truncated_prompt(tok: PreTrainedTokenizerFast) -> None:
    """Under ``--allow-auto-truncate`` a prompt over ``max_req_input_len`` tokens runs cut: the
    early ``message_start`` counts the prompt that runs, the ``input_tokens`` of the closing
    ``message_delta`` and of the non-streamed message (the engine's count)."""
    client, _, tc = make_clients(TruncatingTM(tok, reply=REPLY, delay_s=DELAY_S), auto_truncate=True)
    tc.app.state.sse_keep_alive_interval = INTERVAL_S
    whole = client.messages.create(model=MODEL, max_tokens=50, messages=USER)  # type: ignore[arg-type]
    assert whole.usage.input_tokens == TruncatingTM.max_req_input_len
    events = list(client.messages.create(model=MODEL, max_tokens=50, messages=USER, stream=True))  # type: ignore[arg-type]
    assert events[0].type == "message_start"
    assert events[0].message.usage.input_tokens == whole.usage.input_tokens

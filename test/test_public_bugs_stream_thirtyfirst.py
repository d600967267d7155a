"""A thirty-first set of public bug reports on the server-sent-event streams of every route: one
``id`` and one ``created`` for every chunk of a stream (``n: 2``, the usage chunk and a stream that
crosses a second boundary included), the ``openai`` client's accumulator rebuilding ``n: 2``
choices, a ``text/event-stream`` media type whose charset decodes to the UTF-8 text of the reply,
multibyte text (emoji, CJK) streamed without replacement characters (reply text and tool-call
arguments), usage only on the final chunk
with ``include_usage`` and every choice's finish chunk ahead of it, stop strings forwarded on every
streaming format, and the Anthropic stream rebuilt by the ``anthropic`` client's own accumulator
(``stop_reason`` / ``stop_sequence`` of the ``message_delta`` event, ``message_stop`` last).

Fixtures: the OpenAI router in-process over ``openai_fake_tm.FakeTM`` (a fixed reply written one
token per output) and the OpenAI + Anthropic routers over ``fake_prompt_tm.PromptTM``.
Oracles: the ``openai`` client's ``ChatCompletionChunk`` / ``Completion`` types and its
``ChatCompletionStreamState`` accumulator, the ``anthropic`` client's ``MessageStream``
accumulator, ``requests``' own charset rule for a response (``get_encoding_from_headers``), the
reply text as written (the DeepSeek-V4 tokenizer round-trips it), and OpenAI's / Anthropic's API
references (every chunk of a completion shares ``id`` and ``created``; with ``include_usage`` all
chunks but the last carry ``usage: null``; a Messages stream ends with ``message_delta`` then
``message_stop``), and the Responses stream's ``sequence_number`` on every event.

Every report passed as it was; the tests are regression guards.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from anthropic_testutil import CHAT_WEATHER, WEATHER, make_clients, stream_events
from fake_prompt_tm import CALL, PromptTM
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events
from pydantic import TypeAdapter
from requests.utils import get_encoding_from_headers
from responses_testutil import sse
from sglang_v4.managers.io_struct import GenerateReqInput

MODEL = "dsv4-test"
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
USER = [{"role": "user", "content": "Hi"}]
#: a reply of multibyte characters: U+2705 (``e2 9c 85``, whose last byte is U+0085 in Latin-1),
#: CJK and an emoji outside the BMP
WIDE = "Done ✅ 完成了 🚀 ok"


def _stream(tc: Any, path: str, body: dict[str, Any]) -> list[Any]:
    """The ``data:`` payloads of ``body`` streamed on ``path``; the last one must be ``[DONE]``."""
    r = tc.post(path, json={"model": MODEL, "stream": True, **body})
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    return events[:-1]


# --------------------------------------------------------------------------- id and created


class _TickingTM(FakeTM):
    """``FakeTM`` counting the outputs it has yielded (the test's clock moves 0.7 s per output)."""

    outputs = 0

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        async for out in super().generate_request(obj, request):
            self.outputs += 1
            yield out


def test_sglang_39887_one_id_and_created_over_n_choices_usage_and_a_second_boundary(
    tok: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sgl-project/sglang#39887 (chat stream chunks of ``n > 1`` took each candidate's own id, and
    ``created`` changed when the stream crossed a second boundary; the fix reads both once and
    carries them to usage and tool-call chunks) and microsoft/foundry-local#221 (differing chunk
    ids made the Go SDK fail after the stream). Expected (OpenAI's chunk reference): every chunk
    of one stream, the usage chunk included, has the same ``id`` and the same ``created``, even
    while the wall clock moves on between chunks; chat and legacy completions alike."""
    tm = _TickingTM(tok)
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0 + 0.7 * tm.outputs)
    opts = {"include_usage": True}
    tc = app_client(tm)
    body = {"max_tokens": 6, "n": 2, "stream_options": opts}
    chat = _stream(tc, CHAT, {"messages": USER, **body})
    for e in chat:
        ChatCompletionChunk.model_validate(e)
    comp = _stream(tc, COMPLETIONS, {"prompt": "Hi", **body})
    for chunks in (chat, comp):
        assert {ch["index"] for c in chunks for ch in c["choices"]} == {0, 1}
        assert chunks[-1]["usage"] is not None and chunks[-1]["choices"] == []
        assert len({c["id"] for c in chunks}) == 1
        assert len({c["created"] for c in chunks}) == 1


def test_foundry_local_221_client_accumulator_rebuilds_both_choices(tok: Any) -> None:
    """microsoft/foundry-local#221 (a stream whose chunks disagreed on their id could not be
    assembled by the client SDKs). Expected: the ``openai`` client's ``ChatCompletionStreamState``
    fed every chunk of an ``n: 2`` stream gives two choices, indices 0 and 1, each with the role
    ``assistant`` and the content and finish reason of the same choice unstreamed."""
    tm = FakeTM(tok)
    whole = oai_client(app_client(tm)).chat.completions.create(model=MODEL, messages=USER, max_tokens=64, n=2)
    state = ChatCompletionStreamState()
    for e in _stream(app_client(tm), CHAT, {"messages": USER, "max_tokens": 64, "n": 2}):
        state.handle_chunk(ChatCompletionChunk.model_validate(e))
    final = state.get_final_completion()
    got = sorted(final.choices, key=lambda c: c.index)
    want = sorted(whole.choices, key=lambda c: c.index)
    assert [c.index for c in got] == [0, 1]
    for g, w in zip(got, want, strict=True):
        assert g.message.role == "assistant"
        assert g.message.content == w.message.content
        assert g.finish_reason == w.finish_reason == "stop"
    assert got[0].message.content != got[1].message.content  # the two choices are not merged


# --------------------------------------------------------------------------- content type, UTF-8


def _held(outs: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """The streamed outputs of a manager as the detokenizer hands them on: an output whose
    cumulative text ends inside a character (trailing U+FFFD, HF ``TextStreamer``'s rule) waits
    for the token that completes it; a finished output always passes."""

    async def gen() -> AsyncIterator[Any]:
        async for out in outs:
            if (
                isinstance(out, dict)
                and out["text"].endswith("\ufffd")
                and not out["meta_info"]["finish_reason"]
            ):
                continue
            yield out

    return gen()


class _HeldFakeTM(FakeTM):
    """``FakeTM`` whose streamed outputs pass through :func:`_held`."""

    def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        return _held(super().generate_request(obj, request))


class _HeldPromptTM(PromptTM):
    """``PromptTM`` whose streamed outputs pass through :func:`_held`."""

    def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        return _held(super().generate_request(obj, request))


def _route_streams(tok: Any) -> dict[str, Any]:
    """Each streaming route's raw response for a request answered with :data:`WIDE`."""
    oa = app_client(_HeldFakeTM(tok, reply=WIDE))
    _, _, tc = make_clients(_HeldPromptTM(tok, reply=WIDE))
    return {
        "chat": oa.post(CHAT, json={"model": MODEL, "messages": USER, "stream": True}),
        "completions": oa.post(COMPLETIONS, json={"model": MODEL, "prompt": "Hi", "stream": True}),
        "messages": tc.post(
            "/v1/messages", json={"model": MODEL, "max_tokens": 64, "messages": USER, "stream": True}
        ),
        "responses": tc.post("/v1/responses", json={"model": MODEL, "input": "Hi", "stream": True}),
    }


def _streamed_text(route: str, body: str) -> list[str]:
    """The text deltas of one route's stream body, in order."""
    if route in ("chat", "completions"):
        out = []
        for e in body.split("\n"):
            if e.startswith("data: ") and e != "data: [DONE]":
                for ch in json.loads(e[6:])["choices"]:
                    out.append(ch["delta"].get("content") or "" if route == "chat" else ch["text"])
        return out
    events = sse(body)
    if route == "messages":
        return [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"]
    return [e["delta"] for e in events if e["type"] == "response.output_text.delta"]


def test_openmetadata_29532_event_stream_charset_decodes_to_the_utf8_reply(tok: Any) -> None:
    """open-metadata/OpenMetadata#29532 (a ``text/event-stream`` without a charset made
    ``requests`` decode as ISO-8859-1, so U+2705's last byte became U+0085, a line break that cut
    the ``data:`` line) and Azure/fetch-event-source#1 (a client must accept
    ``text/event-stream;charset=...``). Expected: on every streaming route (chat, completions,
    Messages, Responses) the media type is exactly ``text/event-stream``, the charset ``requests``
    resolves from the headers is UTF-8, and the body decoded with it holds the reply intact."""
    assert tok.decode(tok.encode(WIDE, add_special_tokens=False)) == WIDE  # the oracle text round-trips
    for route, r in _route_streams(tok).items():
        assert r.status_code == 200, (route, r.text)
        ctype = r.headers["content-type"]
        assert ctype.split(";")[0].strip().lower() == "text/event-stream", (route, ctype)
        enc = get_encoding_from_headers(r.headers)
        assert enc is not None and enc.replace("-", "").lower() == "utf8", (route, ctype)
        text = r.content.decode(enc)
        assert "\x85" not in text
        assert "".join(_streamed_text(route, text)) == WIDE, route


def test_librefang_3448_multibyte_reply_streams_without_replacement_characters(tok: Any) -> None:
    """librefang/librefang#3448 and api7/aisix#111 (multibyte characters split between stream
    pieces came out as U+FFFD on CJK/emoji streams). Expected: on every streaming route no text
    delta contains U+FFFD, no delta holds a lone surrogate
    (each encodes as UTF-8), and the deltas joined are the reply."""
    for route, r in _route_streams(tok).items():
        deltas = _streamed_text(route, r.text)
        assert all("\ufffd" not in d for d in deltas), (route, deltas)
        for d in deltas:
            d.encode("utf-8")  # a lone surrogate (half of an escaped astral character) raises
        assert "".join(deltas) == WIDE, route


# --------------------------------------------------------------------------- usage and finish


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_cliproxyapi_3077_usage_only_on_the_final_chunk_after_every_finish(tok: Any, path: str) -> None:
    """router-for-me/CLIProxyAPI#3077 (a client that took the first chunk's usage reported zeros
    because usage was not null before the end), earendil-works/pi#7441 and vercel/ai#19165 (a
    stream must carry each choice's ``finish_reason`` before its usage chunk and ``[DONE]``).
    Expected (OpenAI's ``include_usage``): every chunk but the last has ``usage`` null or absent;
    the last has ``choices: []`` and the whole usage (completion tokens of both choices); each of
    the ``n: 2`` choices has exactly one chunk with a non-null ``finish_reason``, before it."""
    inp = {"messages": USER} if path == CHAT else {"prompt": "Hi"}
    events = _stream(
        app_client(FakeTM(tok)),
        path,
        {**inp, "max_tokens": 3, "n": 2, "stream_options": {"include_usage": True}},
    )
    *body, last = events
    assert all(e.get("usage") is None for e in body)
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 6
    finishes = [
        (ch["index"], ch["finish_reason"]) for e in body for ch in e["choices"] if ch["finish_reason"]
    ]
    assert sorted(finishes) == [(0, "length"), (1, "length")]


# --------------------------------------------------------------------------- stop strings


def test_lucebox_251_stop_strings_reach_the_sampler_on_every_streaming_format(tok: Any) -> None:
    """Luce-Org/lucebox#251 (stop sequences were honoured only on some API formats when
    streaming). Expected: the stop strings of a streamed request reach the generation's sampling
    parameters as given, on chat (``stop``), legacy completions (``stop``) and Messages
    (``stop_sequences``)."""
    stops = ["\nUser:", "END"]
    oa_tm, msg_tm = FakeTM(tok), PromptTM(tok, reply="Sunny.")
    _, _, tc = make_clients(msg_tm)
    for tm, client, path, body in (
        (oa_tm, app_client(oa_tm), CHAT, {"messages": USER, "stop": stops}),
        (oa_tm, app_client(oa_tm), COMPLETIONS, {"prompt": "Hi", "stop": stops}),
        (msg_tm, tc, "/v1/messages", {"messages": USER, "max_tokens": 16, "stop_sequences": stops}),
    ):
        r = client.post(path, json={"model": MODEL, "stream": True, **body})
        assert r.status_code == 200, (path, r.text)
        sp = tm.received[-1].sampling_params
        got = sp.get("stop") if isinstance(sp, dict) else sp.stop
        assert sorted(got) == sorted(stops), path


# --------------------------------------------------------------------------- Anthropic accumulator


class _MatchedStopTM(PromptTM):
    """``PromptTM`` whose generation ends on the stop string ``"END"`` (the matched text reported
    as the real manager does, a string of the request's stop list)."""

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        async for out in super().generate_request(obj, request):
            fr = out["meta_info"].get("finish_reason")
            if fr and fr.get("type") == "stop":
                out["meta_info"]["finish_reason"] = {"type": "stop", "matched": "END"}
            yield out


@pytest.mark.parametrize("stop", [None, ["END"]])
def test_anthropic_sdk_1469_stream_accumulates_to_the_unstreamed_message(tok: Any, stop: Any) -> None:
    """anthropics/anthropic-sdk-python#1469 (the stop fields of ``message_delta`` must reach the
    accumulated message) and anomalyco/opencode#38733 (a Messages stream is complete only at
    ``message_stop``, after the ``message_delta`` carrying the finish). Expected: the last two
    events are ``message_delta`` then ``message_stop``; the ``anthropic`` client's
    ``MessageStream.get_final_message()`` has the unstreamed message's content, ``stop_reason``
    and ``stop_sequence`` (``end_turn``/``None`` without stops, ``stop_sequence``/``"END"`` when
    the stop string ended it) and its output token count."""
    tm = _MatchedStopTM(tok, reply="Sunny and warm.")
    client, _, tc = make_clients(tm)
    kw: dict[str, Any] = {"stop_sequences": stop} if stop else {}
    whole = client.messages.create(model=MODEL, max_tokens=32, messages=USER, **kw)
    with client.messages.stream(model=MODEL, max_tokens=32, messages=USER, **kw) as s:
        final = s.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]
    want = ("stop_sequence", "END") if stop else ("end_turn", None)
    assert (whole.stop_reason, whole.stop_sequence) == want
    assert (final.stop_reason, final.stop_sequence) == want
    assert final.usage.output_tokens == whole.usage.output_tokens > 0
    kinds = [e["type"] for e in stream_events(tc, {"messages": USER, "max_tokens": 32, **kw})]
    assert kinds[-2:] == ["message_delta", "message_stop"]


# --------------------------------------------------------------------------- tool arguments


def test_llama_cpp_28926_multibyte_tool_arguments_stream_whole(tok: Any) -> None:
    """ggml-org/llama.cpp#28926 (UTF-8 characters were cut between tool-call argument chunks,
    leaving JSON a client could not parse). Expected: a tool call whose string argument is CJK and
    an emoji streams argument pieces free of U+FFFD that, joined per call, ``json.loads`` to the
    arguments as written, on chat (``function.arguments``) and Messages (``input_json_delta``)."""
    city = "北京🚀"
    reply = CALL.replace("Paris", city)
    want = {"city": city, "days": 3}
    _, _, tc = make_clients(_HeldPromptTM(tok, reply=reply))
    events = _stream(tc, CHAT, {"messages": USER, "tools": [CHAT_WEATHER], "max_tokens": 200})
    pieces = [
        tc_["function"].get("arguments") or ""
        for e in events
        for ch in e["choices"]
        for tc_ in ch["delta"].get("tool_calls") or []
    ]
    assert all("\ufffd" not in p for p in pieces)
    assert json.loads("".join(pieces)) == want
    msg = stream_events(tc, {"messages": USER, "tools": [WEATHER], "max_tokens": 200})
    parts = [
        e["delta"]["partial_json"]
        for e in msg
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
    ]
    assert all("\ufffd" not in p for p in parts)
    assert json.loads("".join(parts)) == want


# --------------------------------------------------------------------------- Responses events


@functools.cache
def _response_events() -> TypeAdapter[Any]:
    """The ``openai`` client's ``ResponseStreamEvent`` union as a validator (built once)."""
    return TypeAdapter(ResponseStreamEvent)


@pytest.mark.parametrize("limit", [None, 3])
def test_openai_php_764_every_responses_event_has_the_next_sequence_number(tok: Any, limit: Any) -> None:
    """openai-php/client#764 and Blaizzy/mlx-vlm#494 (Responses stream events such as
    ``output_item.added`` / ``content_part.done`` / ``output_text.done`` lacked
    ``sequence_number``, which OpenAI's streaming-events reference gives every event). Expected:
    every event validates as the ``openai`` client's ``ResponseStreamEvent``, the sequence numbers
    are ``0, 1, 2, ...`` in order, every embedded response has the same ``id``, and the stream
    ends with ``response.completed`` or, when ``max_output_tokens`` cut it,
    ``response.incomplete`` with reason ``max_output_tokens``."""
    _, _, tc = make_clients(PromptTM(tok, reply="Sunny and warm today."))
    body: dict[str, Any] = {"model": MODEL, "input": "Hi", "stream": True}
    if limit:
        body["max_output_tokens"] = limit
    r = tc.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    events = sse(r.text)
    for e in events:
        _response_events().validate_python(e)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert len({e["response"]["id"] for e in events if "response" in e}) == 1
    last = events[-1]
    if limit:
        assert last["type"] == "response.incomplete"
        assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    else:
        assert last["type"] == "response.completed"

"""A twenty-seventh set of public bug reports on server-sent-event streams: the native
``/generate`` stream of text whose CJK characters are split across tokens (no U+FFFD, cumulative
texts that only grow), the raw SSE bytes read in arbitrary network pieces (UTF-8 split inside a
character), one ``data:`` line per event even when the text holds newlines, the chat chunks'
``finish_reason`` key and ``delta`` object on every choice of an ``n: 2`` stream, the usage chunk
after both choices' finish chunks, and a native ``/generate`` stream whose generation fails after
its first output.

Fixtures: conftest's session ``held_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens, its Chinese characters split across byte-level tokens, through the
real detokenizer process), the OpenAI router in-process over ``openai_fake_tm.FakeTM``, and the
native app of ``admin_app_testutil`` with its tokenizer manager's generation replaced by one that
fails after its first output.
Oracles: ``transformers``' decode of the ids the fake model writes, the same request not
streamed, Python's incremental UTF-8 decoder over the whole body, the SSE format (W3C: events end
at a blank line, a ``data:`` field is one line), the ``openai`` client's ``ChatCompletionChunk``
type, OpenAI's API reference for ``stream_options.include_usage`` (one extra chunk before
``[DONE]``, ``choices: []``, ``usage`` null on every other chunk) and SGLang's native error shape
``{"error": {"message", "type", "code"}}``.

Fault fixed here (jgravelle/jmunch-mcp#5): the native ``/generate`` stream caught only request
errors and a missing first output, so any other failure of the generation after the first chunk
cut the body off mid-stream, with neither an error event nor ``data: [DONE]`` (the OpenAI and
Anthropic streams already ended with an error event); it now ends with SGLang's error object
(HTTP status 500, the exception's type and message) and ``[DONE]``. The other reports passed as
they were and are kept as regression tests.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import requests
from openai.types.chat import ChatCompletionChunk
from openai_fake_tm import FakeTM, app_client, sse_data_events
from server_fixture import ServerHandle, fake_output_text, sse_events

pytestmark = pytest.mark.timeout(240)
FFFD = "\ufffd"
MODEL = "dsv4-test"
USER = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def server(held_fake_server: ServerHandle) -> ServerHandle:
    """conftest's session fake-model server."""
    return held_fake_server


def _fake_len(tok: Any) -> int:
    """How many tokens the fake model's ``FAKE_TEXT`` is (``transformers``' encoding)."""
    from server_fixture import FAKE_TEXT

    return len(tok.encode(FAKE_TEXT))


def _native_body(tok: Any, stream: bool) -> dict[str, Any]:
    """A ``/generate`` body whose output is the whole of ``FAKE_TEXT`` (its CJK included)."""
    return {"text": "Say it", "sampling_params": {"max_new_tokens": _fake_len(tok)}, "stream": stream}


def _records(body: str) -> list[str]:
    """The SSE events of ``body`` (each ended by a blank line), checked to end the body whole."""
    parts = body.split("\n\n")
    assert parts[-1] == "", body[-200:]  # the body ends at an event's end
    return parts[:-1]


# --------------------------------------------------------------------------- split characters


def test_oobabot_9_native_stream_sends_no_replacement_characters(server: ServerHandle, tok: Any) -> None:
    """chrisrude/oobabot#9 (a streaming API sent each byte of a character made of several tokens
    on its own, so the client got U+FFFD where the unstreamed answer had the character).
    Expected on ``/generate``'s stream of ``FAKE_TEXT`` (its Chinese characters split across
    byte-level tokens): no chunk's text holds U+FFFD, each cumulative text extends the one before,
    and the last equals the unstreamed text, which is ``transformers``' decode of the ids."""
    want = fake_output_text(tok, _fake_len(tok))
    assert "你好" in want and FFFD not in want
    whole = requests.post(server.url + "/generate", json=_native_body(tok, False), timeout=60).json()
    assert whole["text"] == want
    r = requests.post(server.url + "/generate", json=_native_body(tok, True), timeout=60, stream=True)
    assert r.status_code == 200
    events = sse_events(r)
    assert events[-1] == "[DONE]"
    texts = [e["text"] for e in events[:-1]]
    assert len(texts) > 1
    assert not any(FFFD in t for t in texts), texts
    for a, b in zip(texts, texts[1:], strict=False):
        assert b.startswith(a), (a, b)
    assert texts[-1] == want


@pytest.mark.parametrize("piece", [1, 2, 3, 5, 7])
def test_cache_fix_365_sse_bytes_split_inside_a_character_decode_whole(
    server: ServerHandle, tok: Any, piece: int
) -> None:
    """cnighswonger/claude-code-cache-fix#365, wecode-ai/Wegent#2271 and
    Pasta-Devs/Marinara-Engine#2472 (a streamed body read in network pieces, each piece decoded on
    its own, turned a multi-byte character cut by a piece boundary into U+FFFD). Expected: the
    native stream's body is valid UTF-8 carrying the Chinese text as raw multi-byte characters;
    read in pieces of ``piece`` bytes through an incremental UTF-8 decoder it gives the same
    events as the whole body, and the last event's text is the unstreamed text (the lossy
    per-piece decoding of the reports is shown to differ, so the pieces do cut characters)."""
    r = requests.post(server.url + "/generate", json=_native_body(tok, True), timeout=60)
    raw = r.content
    assert "你好".encode() in raw  # raw UTF-8, not \\u escapes: the pieces can cut a character
    whole = _records(raw.decode("utf-8"))
    dec = codecs.getincrementaldecoder("utf-8")()
    text, records = "", []
    for i in range(0, len(raw), piece):
        text += dec.decode(raw[i : i + piece])
        *done, text = text.split("\n\n")
        records += done
    text += dec.decode(b"", final=True)
    assert text == "" and records == whole
    assert json.loads(records[-2][len("data: ") :])["text"] == fake_output_text(tok, _fake_len(tok))
    if piece < 3:
        lossy = "".join(raw[i : i + piece].decode("utf-8", "replace") for i in range(0, len(raw), piece))
        assert FFFD in lossy


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_fastgpt_798_each_event_is_one_data_line_though_the_text_has_newlines(tok: Any, route: str) -> None:
    """labring/FastGPT#798 and graniet/llm#90 (a JSON payload split over two SSE reads or lines
    left the client with a fragment that never parsed, and every later chunk was lost). Expected,
    per the SSE format, for a reply full of newlines and blank lines: every event is exactly one
    ``data: `` line (the newlines escaped inside the JSON), each parses on its own, the last is
    ``[DONE]``, and the streamed texts join to the reply."""
    reply = "line one\n\nline two\r\n  - item\n\n\nend"
    tc = app_client(FakeTM(tok, reply))
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 64, "stream": True}
    body |= {"messages": USER} if route.endswith("chat/completions") else {"prompt": "Hi"}
    r = tc.post(route, json=body)
    assert r.status_code == 200
    records = _records(r.text)
    assert all("\n" not in rec and rec.startswith("data: ") for rec in records), records
    assert records[-1] == "data: [DONE]"
    chunks = [json.loads(rec[len("data: ") :]) for rec in records[:-1]]
    if route.endswith("chat/completions"):
        got = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    else:
        got = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert got == reply


# --------------------------------------------------------------------------- chunk shapes


def _chat_chunks(
    tok: Any, max_tokens: int, stream_options: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The streamed chat chunks of an ``n: 2`` request (``[DONE]`` checked and dropped) and the
    same request's unstreamed answer (``stream_options`` go with the streamed one only)."""
    tc = app_client(FakeTM(tok))
    body: dict[str, Any] = {"model": MODEL, "messages": USER, "n": 2, "max_tokens": max_tokens}
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    whole = r.json()
    if stream_options is not None:
        body["stream_options"] = stream_options
    r = tc.post("/v1/chat/completions", json={**body, "stream": True})
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    return events[:-1], whole


@pytest.mark.parametrize("max_tokens", [64, 3])
def test_litellm_proxy_19_every_choice_has_finish_reason_and_a_delta_object(
    tok: Any, max_tokens: int
) -> None:
    """BerriAI/liteLLM-proxy#19 (the ``finish_reason`` key was dropped from chunks where it was
    null), microsoft/agent-framework#5734 (a finish chunk's ``delta`` sent as ``null`` instead of
    an object) and openvinotoolkit/model_server#4372 (the last chunk lost its ``delta`` key when it
    had no content). Expected on an ``n: 2`` stream, ending on ``stop`` or ``length``: every
    choice of every chunk has ``index``, a ``delta`` JSON object and the ``finish_reason`` key;
    ``finish_reason`` is null until the choice's own last chunk, which has the unstreamed answer's
    reason; each chunk validates as the ``openai`` client's ``ChatCompletionChunk``."""
    chunks, whole = _chat_chunks(tok, max_tokens=max_tokens)
    want = {c["index"]: c["finish_reason"] for c in whole["choices"]}
    assert set(want) == {0, 1}
    seen: dict[int, list[Any]] = {0: [], 1: []}
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
        for c in chunk["choices"]:
            assert isinstance(c["delta"], dict), c
            assert "finish_reason" in c and "index" in c, c
            seen[c["index"]].append(c["finish_reason"])
    for i, reasons in seen.items():
        assert reasons[-1] == want[i]
        assert all(r is None for r in reasons[:-1]), reasons


def test_litellm_17136_usage_chunk_comes_after_both_finish_chunks(tok: Any) -> None:
    """BerriAI/litellm#17136 (the usage sat on the second-to-last chunk and an empty chunk came
    last) and tensorzero/tensorzero#2078 (a client wanted the finish reason and the usage on one
    last chunk; OpenAI sends them apart). Expected, per OpenAI's ``stream_options.include_usage``,
    on an ``n: 2`` stream: exactly one chunk has ``usage``, the last before ``[DONE]``, with
    ``choices: []``; both choices' finish chunks come before it with ``usage`` null; its counts are
    the unstreamed answer's (``total_tokens`` their sum)."""
    chunks, whole = _chat_chunks(tok, max_tokens=64, stream_options={"include_usage": True})
    with_usage = [i for i, c in enumerate(chunks) if c.get("usage")]
    assert with_usage == [len(chunks) - 1]
    assert chunks[-1]["choices"] == []
    finishes = [(i, c["index"]) for i, ch in enumerate(chunks) for c in ch["choices"] if c["finish_reason"]]
    assert sorted(idx for _, idx in finishes) == [0, 1]
    assert all(i < len(chunks) - 1 and chunks[i]["usage"] is None for i, _ in finishes)
    u, w = chunks[-1]["usage"], whole["usage"]
    assert (u["prompt_tokens"], u["completion_tokens"]) == (w["prompt_tokens"], w["completion_tokens"])
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]


# --------------------------------------------------------------------------- failure mid-stream


@pytest.fixture(scope="module")
def native_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """``(TestClient, TokenizerManager)`` of ``admin_app_testutil``, native routes only."""
    from admin_app_testutil import admin_app_client

    with admin_app_client(tmp_path_factory.mktemp("stream27"), openai_routes=False) as pair:
        yield pair


@pytest.mark.parametrize("failure", [KeyError("boom"), ZeroDivisionError("division by zero"), TypeError()])
def test_jmunch_mcp_5_native_stream_failure_is_an_error_event_then_done(
    native_app: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    """jgravelle/jmunch-mcp#5 (a streaming failure reached the client as empty chunks with the
    error's details lost; the fix sends the error object as a ``data:`` event, then
    ``data: [DONE]``). Expected when the generation of a native ``/generate`` stream raises after
    its first output: HTTP 200 with the first chunk, then one event holding SGLang's error object
    (``code`` 500, a ``type``, the message naming the exception's type and
    text), then ``[DONE]``; the route still serves the next stream."""
    from admin_app_testutil import ADMIN_KEY

    client, tm = native_app
    first = {"text": "Hel", "output_ids": [42], "meta_info": {"id": "r", "finish_reason": None}}

    async def failing(obj: Any, request: Any = None) -> AsyncIterator[dict[str, Any]]:
        yield first
        raise failure

    monkeypatch.setattr(tm, "generate_request", failing)
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    body = {"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 8}}
    r = client.post("/generate", json=body, headers=headers)
    assert r.status_code == 200
    records = _records(r.text)
    assert records[-1] == "data: [DONE]"
    events = [json.loads(rec[len("data: ") :]) for rec in records[:-1]]
    assert events[0] == first
    assert len(events) == 2
    err = events[1]["error"]
    assert err["code"] == 500 and isinstance(err["type"], str) and err["type"]
    name = type(failure).__name__
    assert err["message"] == (f"{name}: {failure}" if str(failure) else name)

    async def fine(obj: Any, request: Any = None) -> AsyncIterator[dict[str, Any]]:
        yield {**first, "meta_info": {"id": "r", "finish_reason": {"type": "length", "length": 1}}}

    monkeypatch.setattr(tm, "generate_request", fine)
    again = _records(client.post("/generate", json=body, headers=headers).text)
    assert again[-1] == "data: [DONE]" and "error" not in json.loads(again[0][len("data: ") :])

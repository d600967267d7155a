"""Public reports on server-sent-event streams that stay silent (a queued request, a long prefill,
a slow reasoning gap) until a proxy's idle timeout drops them, replayed through the in-process
OpenAI and Anthropic routes over a fake tokenizer manager that waits before its first output.

vLLM's answer (vllm-project/vllm#51034, ``--sse-keep-alive-interval``, off by default) is an SSE
comment frame ``: keep-alive`` whenever the stream has sent nothing for the interval. Oracles: the
``openai`` and ``anthropic`` clients' own SSE decoders and stream accumulators (a comment frame
must change nothing they return), the same request on an app without the interval (the data
frames, byte for byte), vLLM's flag semantics (0 default, negative refused) and the SSE framing
rule that a line starting ``:`` is a comment.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest
from anthropic_testutil import make_clients
from asgi_testutil import json_post_scope
from fake_prompt_tm import MODEL, SlowTM, blocks
from sglang_v4.entrypoints.sse_keep_alive import SSE_KEEP_ALIVE_COMMENT, with_keep_alive
from sglang_v4.server_args import ServerArgs, check_server_args
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
REPLY = "It is sunny in Paris today."
#: the silence before the first output, and the keep-alive interval (several fit in it)
DELAY_S = 0.4
INTERVAL_S = 0.05


def _clients(tok: PreTrainedTokenizerFast, interval: float, **kw: Any) -> tuple[Any, Any, Any, SlowTM]:
    """The ``anthropic`` and ``openai`` clients and the test client of an app over a
    :class:`SlowTM` (returned last), its keep-alive interval ``interval`` seconds."""
    tm = SlowTM(tok, reply=REPLY, **{"delay_s": DELAY_S, **kw})
    client, oa, tc = make_clients(tm)
    tc.app.state.sse_keep_alive_interval = interval
    return client, oa, tc, tm


def _frames(text: str) -> list[str]:
    return [f for f in text.split("\n\n") if f.strip()]


def _is_ping(frame: str) -> bool:
    """An Anthropic ``ping`` event (Anthropic's streaming docs: ``event: ping`` with data
    ``{"type": "ping"}``)."""
    lines = dict(line.split(": ", 1) for line in frame.split("\n"))
    return lines.get("event") == "ping" and json.loads(lines.get("data", "null")) == {"type": "ping"}


def _is_keep_alive(frame: str, path: str) -> bool:
    """A keep-alive frame of ``path``: Anthropic's ``ping`` event on ``/v1/messages`` (Anthropic
    clients count events, not comments, as a live stream), the SSE comment elsewhere."""
    if path == "/v1/messages":
        return not frame.startswith(":") and _is_ping(frame)
    return frame.encode() + b"\n\n" == SSE_KEEP_ALIVE_COMMENT


def _data_frames(text: str, path: str = "") -> list[str]:
    """The frames that are not keep-alives (comments; on ``/v1/messages`` every ``ping``), with
    their per-request fields (ids, timestamps) stripped so two requests compare."""
    out = []
    for f in _frames(text):
        if f.startswith(":") or (path == "/v1/messages" and _is_ping(f)):
            continue
        f = re.sub(r'"(\w*id)":\s*"[^"]*"', r'"\1":""', f)
        out.append(re.sub(r'"(created|\w+_at)":\s*\d+', r'"\1":0', f))
    return out


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/completions", {"prompt": "Weather in Paris:", "max_tokens": 50}),
        ("/v1/chat/completions", {"messages": USER, "max_tokens": 50}),
        ("/v1/messages", {"messages": USER, "max_tokens": 50}),
        (
            "/v1/responses",
            {"input": "What is the weather in Paris?", "max_output_tokens": 50, "store": False},
        ),
    ],
)
def test_vllm_47647_a_silent_stream_sends_keep_alive_comments(
    tok: PreTrainedTokenizerFast, path: str, body: dict[str, Any]
) -> None:
    """vllm-project/vllm#47647: a streamed response sends no byte while the request is queued or
    prefilling, so a proxy with an idle read timeout (Cloudflare Tunnel 120 s, NGINX 60 s) closes
    it. With the interval set, keep-alive frames (each a frame of its own, before the first
    output's frame) fill the silence: the ``: keep-alive`` comment on the completions, chat and
    Responses routes, Anthropic's ``ping`` event (after an early ``message_start``) on the
    Messages route; without it (the default, as vLLM's) none is sent (the Messages stream's one
    ``ping`` after ``message_start`` aside). The other frames are the same, byte for byte, either
    way."""
    req = {"model": MODEL, **body, "stream": True}
    _, _, quiet, _ = _clients(tok, 0)
    _, _, kept, _ = _clients(tok, INTERVAL_S)
    plain = quiet.post(path, json=req)
    alive = kept.post(path, json=req)
    assert plain.status_code == alive.status_code == 200
    assert not [f for f in _frames(plain.text) if f.startswith(":")]
    frames = _frames(alive.text)
    kept_alive = [i for i, f in enumerate(frames) if _is_keep_alive(f, path)]
    assert len(kept_alive) >= 3, frames[:5]
    if path == "/v1/messages":  # no comment frame; the pings follow message_start
        assert not [f for f in frames if f.startswith(":")]
        assert json.loads(frames[0].split("data: ", 1)[1])["type"] == "message_start"
        assert len([f for f in _frames(plain.text) if _is_ping(f)]) == 1
    # the silence before the first output: one run of keep-alives at the start (after the Responses
    # API's response.created / response.in_progress and the Messages API's message_start, sent
    # before any output)
    assert kept_alive[0] <= 2 and kept_alive[:3] == list(range(kept_alive[0], kept_alive[0] + 3))
    assert _data_frames(alive.text, path) == _data_frames(plain.text, path)


def test_ollama_16443_client_parsers_skip_keep_alive_frames(tok: PreTrainedTokenizerFast) -> None:
    """ollama/ollama#16443: a client that read every SSE line as JSON broke on an upstream's
    keep-alive comment frames. The ``openai`` client's decoder skips comment lines and the
    ``anthropic`` client's skips ``ping`` events (the Messages route's keep-alive): through a
    stream full of keep-alives, the completions and chat streams assemble the reply and the
    Messages stream accumulator gives the non-streamed message."""
    client, oa, _, _ = _clients(tok, INTERVAL_S)
    text = "".join(
        c.choices[0].text
        for c in oa.completions.create(model=MODEL, prompt="Weather in Paris:", max_tokens=50, stream=True)
        if c.choices
    )
    assert text == REPLY
    chat = "".join(
        c.choices[0].delta.content or ""
        for c in oa.chat.completions.create(model=MODEL, messages=USER, max_tokens=50, stream=True)
        if c.choices
    )
    assert chat == REPLY
    whole = client.messages.create(model=MODEL, max_tokens=50, messages=USER)
    with client.messages.stream(model=MODEL, max_tokens=50, messages=USER) as s:
        final = s.get_final_message()
    assert [{k: v for k, v in b.items() if v is not None} for b in blocks(final)] == [
        {"type": "text", "text": REPLY}
    ]
    assert blocks(final) == blocks(whole)
    assert (final.stop_reason, final.usage.output_tokens) == (whole.stop_reason, whole.usage.output_tokens)


def test_vllm_51034_sse_keep_alive_interval_flag() -> None:
    """vllm-project/vllm#51034 (vLLM's ``--sse-keep-alive-interval``): 0 (off) by default, a
    positive number of seconds is taken, a negative one is refused naming the flag's field."""
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    sa = ServerArgs.from_cli_args(parser.parse_args(["--sse-keep-alive-interval", "15", "--device", "cpu"]))
    assert sa.sse_keep_alive_interval == 15.0
    assert ServerArgs(device="cpu").sse_keep_alive_interval == 0
    for bad in (-1, float("nan"), float("inf"), "5"):
        with pytest.raises(ValueError, match="sse_keep_alive_interval"):
            check_server_args(ServerArgs(device="cpu", sse_keep_alive_interval=bad))  # type: ignore[arg-type]
    with pytest.raises(SystemExit):
        parser.parse_args(["--sse-keep-alive-interval", "soon"])


def test_vllm_51034_closing_a_kept_alive_stream_closes_its_body() -> None:
    """vllm-project/vllm#51034 (its cancellation and ``aclose()`` cases): a client that goes away
    while the stream sends only keep-alives must still abort the request: closing the wrapped
    stream cancels the body's pending step and runs its ``finally`` (where the routes close the
    tokenizer manager's generator, which aborts the request) at once; a keep-alive never cancels
    a step that is merely slow."""
    closed: list[str] = []

    async def body() -> AsyncIterator[bytes]:
        try:
            yield b"data: 1\n\n"
            await asyncio.sleep(3 * INTERVAL_S)  # slower than the interval, but not cancelled
            yield b"data: 2\n\n"
            await asyncio.sleep(3600)  # the silent request the client gives up on
            yield b"data: never\n\n"
        finally:
            closed.append("body")

    async def run() -> list[bytes]:
        got = []
        stream = with_keep_alive(body(), INTERVAL_S)
        async for chunk in stream:
            got.append(chunk)
            if got.count(b"data: 2\n\n") and got[-3:] == [SSE_KEEP_ALIVE_COMMENT] * 3:
                break
        t0 = time.monotonic()
        await stream.aclose()
        assert time.monotonic() - t0 < 1.0 and closed == ["body"]
        return got

    got = asyncio.run(run())
    data = [c for c in got if c != SSE_KEEP_ALIVE_COMMENT]
    assert data == [b"data: 1\n\n", b"data: 2\n\n"]
    assert got.index(b"data: 2\n\n") >= 2  # keep-alives came while step 2 was slow


def test_vllm_47647_an_abort_after_the_silence_is_an_error_event(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#47647 (queue wait): with the keep-alive on, a stream answers 200 before
    its request's first output, so an abort that comes later (here the engine's 500) can only be
    reported in the stream, as vLLM reports a failure after its start. The ``openai`` client raises
    it as an ``APIError`` carrying the abort's message, never a stream that ends as a completion;
    without the keep-alive it stays the plain HTTP error (``InternalServerError``)."""
    req = {"model": MODEL, "prompt": "Weather in Paris:", "max_tokens": 50}
    _, oa, tc, _ = _clients(tok, INTERVAL_S, abort_after=0)
    with pytest.raises(openai.APIError, match="engine failure") as err:
        list(oa.completions.create(**req, stream=True))
    assert not isinstance(err.value, openai.APIStatusError)
    raw = tc.post("/v1/completions", json={**req, "stream": True})
    assert raw.status_code == 200 and raw.text.startswith(SSE_KEEP_ALIVE_COMMENT.decode())
    _, quiet, _, _ = _clients(tok, 0, abort_after=0)
    with pytest.raises(openai.InternalServerError, match="engine failure"):
        list(quiet.completions.create(**req, stream=True))


@pytest.mark.parametrize(
    ("path", "body", "first_frame"),
    [
        ("/v1/completions", {"prompt": "Weather in Paris:", "max_tokens": 50}, SSE_KEEP_ALIVE_COMMENT),
        ("/v1/chat/completions", {"messages": USER, "max_tokens": 50}, SSE_KEEP_ALIVE_COMMENT),
        ("/v1/messages", {"messages": USER, "max_tokens": 50}, b"event: message_start\n"),
        (
            "/v1/responses",
            {"input": "What is the weather in Paris?", "max_output_tokens": 50, "store": False},
            b"event: response.created\n",
        ),
    ],
)
def test_vllm_51034_a_client_gone_during_the_silence_aborts_at_once(
    tok: PreTrainedTokenizerFast, path: str, body: dict[str, Any], first_frame: bytes
) -> None:
    """vllm-project/vllm#51034 (its cancellation cases): a client that goes away while its stream
    sends only keep-alives (the request still queued) must have its request aborted then, not when
    the queue would have served it. Driven through the ASGI app with a client whose first read
    of the body fails (a closed socket): the tokenizer manager's generator for the request is
    closed at once, long before its first output. The first frame is the keep-alive comment, or
    on the Messages route the early ``message_start`` (its stream's keep-alive is a ``ping``
    event, which no event may precede), on the Responses route ``response.created`` (sent before
    any output)."""
    _, _, tc, tm = _clients(tok, INTERVAL_S, delay_s=60)
    app = tc.app
    data = json.dumps({"model": MODEL, **body, "stream": True}).encode()
    sent: list[dict[str, Any]] = []

    async def run() -> tuple[float, list[float]]:
        inbox = [{"type": "http.request", "body": data, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if inbox:
                return inbox.pop(0)
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if message["type"] == "http.response.body" and message.get("body"):
                raise OSError("connection closed by the client")

        scope = json_post_scope(path)
        t0 = time.monotonic()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(app(scope, receive, send), timeout=20)
        await asyncio.sleep(0.2)
        # read before asyncio.run returns: its teardown cancels every task left, which would
        # close a generator the response left running
        return t0, list(tm.closed)

    t0, closed = asyncio.run(run())
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert sent[1]["body"].startswith(first_frame)
    assert len(closed) == 1 and closed[0] - t0 < 5.0


def test_vllm_47647_native_generate_stream_keeps_alive_from_the_flag(
    tok: PreTrainedTokenizerFast, tmp_path: Any
) -> None:
    """vllm-project/vllm#47647 on SGLang's native ``/generate`` stream, the server built by
    ``create_app`` from ``--sse-keep-alive-interval`` on the command line: the silence before the
    first output is filled with ``: keep-alive`` frames, and the data frames (SGLang's cumulative
    chunks, then ``data: [DONE]``) are those of the same server with the flag left at 0."""
    from server_fixture import make_fake_model_dir
    from sglang_v4.entrypoints.http_server import create_app
    from starlette.testclient import TestClient

    model = str(make_fake_model_dir(tmp_path))
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    texts = {}
    for interval in ("0", str(INTERVAL_S)):
        argv = ["--model-path", model, "--device", "cpu", "--sse-keep-alive-interval", interval]
        sa = ServerArgs.from_cli_args(parser.parse_args(argv))
        app, state = create_app(sa, SimpleNamespace(scheduler_info={}, port_args=None))  # type: ignore[arg-type]
        state.tokenizer_manager = SlowTM(tok, reply=REPLY)
        r = TestClient(app).post("/generate", json={"text": "Weather in Paris:", "stream": True})
        assert r.status_code == 200, r.text
        texts[interval] = r.text
    quiet, alive = texts["0"], texts[str(INTERVAL_S)]
    assert ": keep-alive" not in quiet
    frames = _frames(alive)
    assert frames[:3] == [SSE_KEEP_ALIVE_COMMENT.decode().strip()] * 3
    assert [f for f in frames if not f.startswith(":")] == _frames(quiet)
    assert _frames(quiet)[-1] == "data: [DONE]"
    last = json.loads(_frames(quiet)[-2].removeprefix("data: "))
    assert last["text"] == REPLY

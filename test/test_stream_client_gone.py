"""A streaming client that goes away must have its request aborted at once, on every streaming
route (``/v1/completions``, ``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages``,
SGLang's native ``/generate``), wherever the stream stands: before any byte of the body (the
response start fails), after the frames a route sends before the first output (the SSE
keep-alive, the Responses API's ``response.created`` / ``response.in_progress``, the Messages
API's early ``message_start``), during the silence of a queued request or a long prefill, or
between two slow decode steps; with ``--sse-keep-alive-interval`` on and off.

vllm-project/vllm#51034 (its cancellation cases): a request whose client is gone keeps its slot
and KV pages until the route closes its generator (the tokenizer manager aborts it there). The
routes are driven through the ASGI app with a client that fails as a closed socket does (ASGI
2.4: ``send`` raises ``OSError``) or reports ``http.disconnect`` (ASGI 2.3: Starlette's
disconnect listener cancels the response), over a fake tokenizer manager silent for a minute
before its first output or between two outputs; the oracle is the time its generator closed
(:class:`~fake_prompt_tm.SlowTM` records it), read before the event loop's teardown would close
any generator left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
from anthropic_testutil import make_clients
from asgi_testutil import json_post_scope
from fake_prompt_tm import MODEL, SlowTM
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
REPLY = "It is sunny in Paris today."
#: the keep-alive interval when on (seconds)
INTERVAL_S = 0.05
#: a silence no test waits out: a request still closed this long after the client left leaked
LONG_S = 60.0
#: how soon after the client left (the response start, at the latest) its request must be closed
#: (seconds; a loaded machine's margin, far below the silence)
AT_ONCE_S = 5.0

BODIES: dict[str, dict[str, Any]] = {
    "/v1/completions": {"model": MODEL, "prompt": "Weather in Paris:", "max_tokens": 50},
    "/v1/chat/completions": {"model": MODEL, "messages": USER, "max_tokens": 50},
    "/v1/messages": {"model": MODEL, "messages": USER, "max_tokens": 50},
    "/v1/responses": {
        "model": MODEL,
        "input": "What is the weather in Paris?",
        "max_output_tokens": 50,
        "store": False,
    },
    "/generate": {"text": "Weather in Paris:", "sampling_params": {"max_new_tokens": 50}},
}

#: where the stream stands when the client goes: (keep-alive interval, silence before the first
#: output, pause between outputs)
PHASES = {
    "queued, keep-alive on": (INTERVAL_S, LONG_S, 0.0),
    "decoding, keep-alive on": (INTERVAL_S, 0.0, LONG_S),
    "decoding, keep-alive off": (0.0, 0.0, LONG_S),
}

#: how the client goes: ``start`` (sending the response start fails: no body byte sent),
#: ``frame`` (sending the first body frame fails), ``disconnect`` (``http.disconnect`` once the
#: request body is read; ASGI 2.3, so Starlette's listener cancels the response)
GONE = ("start", "frame", "disconnect")


def _native_app(tmp_path: Any) -> tuple[Any, Any]:
    """SGLang's native server app (``create_app``) of a fake model directory, and its server state
    (its ``tokenizer_manager`` is the test's to set)."""
    from server_fixture import make_fake_model_dir
    from sglang_v4.entrypoints.http_server import create_app
    from sglang_v4.server_args import ServerArgs

    model = str(make_fake_model_dir(tmp_path))
    sa = ServerArgs(model_path=model, device="cpu")
    return create_app(sa, SimpleNamespace(scheduler_info={}, port_args=None))  # type: ignore[arg-type]


async def _drive(app: Any, path: str, body: dict[str, Any], gone: str, sent: list[dict[str, Any]]) -> None:
    """One streamed request to ``app`` from a client that goes away as ``gone`` says."""
    data = json.dumps({**body, "stream": True}).encode()
    inbox = [{"type": "http.request", "body": data, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if inbox:
            return inbox.pop(0)
        if gone == "disconnect":
            return {"type": "http.disconnect"}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append({**message, "at": time.monotonic()})
        if gone == "start" and message["type"] == "http.response.start":
            raise OSError("connection closed by the client")
        if gone == "frame" and message["type"] == "http.response.body" and message.get("body"):
            raise OSError("connection closed by the client")

    scope = json_post_scope(path, "2.3" if gone == "disconnect" else "2.4")
    with contextlib.suppress(Exception):
        await asyncio.wait_for(app(scope, receive, send), timeout=20)


@pytest.fixture(scope="module")
def native_app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """:func:`_native_app`, built once for the module (each test sets its tokenizer manager)."""
    return _native_app(tmp_path_factory.mktemp("native"))


@pytest.mark.parametrize("gone", GONE)
@pytest.mark.parametrize("phase", list(PHASES))
@pytest.mark.parametrize("path", list(BODIES))
def test_a_client_gone_aborts_its_request_at_once(
    tok: PreTrainedTokenizerFast, native_app: Any, path: str, phase: str, gone: str
) -> None:
    """The request's generator is closed within :data:`AT_ONCE_S` of the client going away, never
    when the minute-long silence would have ended; the request reached the tokenizer manager
    once and the response, when it started, was a 200 event stream."""
    interval, delay_s, step_s = PHASES[phase]
    tm = SlowTM(tok, reply=REPLY, delay_s=delay_s, step_s=step_s)
    if path == "/generate":
        app, state = native_app
        state.tokenizer_manager = tm
    else:
        app = make_clients(tm)[2].app
    app.state.sse_keep_alive_interval = interval
    sent: list[dict[str, Any]] = []

    async def run() -> list[float]:
        await _drive(app, path, BODIES[path], gone, sent)
        await asyncio.sleep(0.2)
        # read before asyncio.run returns: its teardown cancels every task left, which would
        # close a generator the response left running
        return list(tm.closed)

    closed = asyncio.run(run())
    assert sent and sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200, sent[:1]
    assert (b"content-type", b"text/event-stream; charset=utf-8") in sent[0]["headers"]
    assert len(closed) == 1, "the request was not closed when its client went away"
    assert closed[0] - sent[0]["at"] < AT_ONCE_S

"""Request admission and graceful drain for the HTTP server: API key, drain, body size, timeouts.

:class:`AdmissionMiddleware` is a plain ASGI middleware (not Starlette's ``BaseHTTPMiddleware``,
which wraps streaming responses in its own task and hides client disconnects). Per HTTP request,
in this order:

1. **Drain**: while the server drains after SIGTERM / SIGINT every route except the open ones
   (below) answers 503 ``The server is shutting down``.
2. **API key** (``--api-key``): every route except the open ones needs
   ``Authorization: Bearer KEY`` or ``x-api-key: KEY`` (Anthropic's header, which its clients
   send), compared in constant time (``hmac.compare_digest``); otherwise 401 with
   ``WWW-Authenticate: Bearer realm="sglang"`` (RFC 9110 section 15.5.2 requires the challenge). The open routes are SGLang's (``http_server.py``'s ``add_api_key_middleware`` lets
   ``/health*``, ``/ready`` and ``/metrics`` through, and ``OPTIONS`` preflights): here exactly
   ``/health``, ``/health_generate``, ``/ready`` and ``/metrics``. The admin routes (:data:`ADMIN_ROUTES`:
   ``/flush_cache``, ``/abort_request`` and the runtime-control routes) follow SGLang's ``--admin-api-key`` rule: with an admin
   key they need it (the API key is not accepted there), without one the API key as every route.
3. **Body size**: a ``Content-Length`` above ``max_body_bytes`` is refused with 413 before the
   body is read; a chunked body is counted as it arrives and refused once it exceeds the limit.
   (Starlette's ``RequestBodyLimitMiddleware`` answers in plain text; these errors are JSON.)
4. **Body read timeout**: the whole body must arrive within ``read_timeout_s`` of the request's
   start, else 408, so a client that trickles its body cannot hold a request open.
5. **Client gone mid-body**: a client that closes the connection before its whole body arrived
   (or sends a malformed chunk, which uvicorn answers 400 and turns into a disconnect) ends the
   request quietly: nothing was parsed or queued, and there is no one to answer. (Starlette's
   ``Request.body()`` raises ``ClientDisconnect``, which uvicorn would log as an ASGI error.)

The routes are told by their path without the ``--root-path`` prefix
(:func:`~sglang_v4.entrypoints.root_path.route_path`): ``/my-model/health`` is as open as
``/health``, ``/my-model/flush_cache`` as guarded as ``/flush_cache``.

Errors are JSON in the route family's shape: under ``/v1/`` SGLang's ``{"object": "error",
"message", "type", "param", "code"}`` plus OpenAI's nested ``"error"`` object
(:func:`~sglang_v4.entrypoints.openai.protocol.error_body`), elsewhere SGLang's ``{"error":
{"message", ...}}`` (401 keeps SGLang's exact ``{"error": "Unauthorized"}``); the ``type`` is the
status's (:func:`~sglang_v4.entrypoints.openai.protocol.error_type_for_status`); the Anthropic
routes (``/v1/messages``, ``/v1/messages/count_tokens``), and ``/v1/models[/{id}]`` asked with
the ``anthropic-version`` header (the ``anthropic`` SDK's model listing), answer in Anthropic's
shape ``{"type": "error", "error": {"type", "message"}}``
(:func:`~sglang_v4.entrypoints.anthropic.protocol.anthropic_error_body`); the bodies are
:func:`~sglang_v4.entrypoints.route_errors.route_error_body`'s.

Slow headers are bounded by :class:`HeaderTimeoutH11Protocol` (uvicorn has keep-alive and
graceful-shutdown timeouts but none for a request's headers): a connection that has not sent a
complete request head within ``header_timeout_s`` of its first byte (or of connecting) is closed.
The header block size is bounded by uvicorn's ``h11_max_incomplete_event_size``. A connection that
opens with the HTTP/2 connection preface (RFC 9113, section 3.4: an h2c or gRPC client, such as
``sglang-router`` probing each ``--dp-size`` replica for gRPC at start-up) is closed without a
warning: the server speaks HTTP/1.1 only, and uvicorn would log each probe as "Invalid HTTP request
received."

:class:`DrainingServer` is the ``uvicorn.Server`` whose SIGTERM / SIGINT starts a drain (the
HTTP server's coroutine: stop admitting, wait for in-flight requests up to a timeout) and only then
stops uvicorn; a second signal stops at once.

Limits (environment, read at server start; the SGLang-style names):
``SGLANG_V4_MAX_REQUEST_BODY_BYTES`` (default 64 MiB), ``SGLANG_V4_REQUEST_READ_TIMEOUT`` (seconds,
default 60; headers and body each), ``SGLANG_V4_TIMEOUT_KEEP_ALIVE`` (seconds, default 5; idle
keep-alive connections, as SGLang's ``SGLANG_TIMEOUT_KEEP_ALIVE``).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol

from sglang_v4.entrypoints.openai.protocol import auth_challenge_headers
from sglang_v4.entrypoints.root_path import route_path
from sglang_v4.entrypoints.route_errors import route_error_body, wants_anthropic_errors

logger = logging.getLogger(__name__)

#: Seconds the handlers of the requests a drain failed have to send their error (a stream's error
#: event) before the HTTP server stops; they usually need one turn of the event loop.
FAIL_GRACE_S = 1.0

__all__ = [
    "AdmissionLimits",
    "AdmissionMiddleware",
    "api_key_matches",
    "DrainingServer",
    "HeaderTimeoutH11Protocol",
    "drain_in_flight",
    "OPEN_ROUTES",
    "ADMIN_ROUTES",
    "H11_MAX_INCOMPLETE_EVENT_SIZE",
]

#: Routes that need no API key and stay up while draining (SGLang leaves /health*, /ready and
#: /metrics open; ``/metrics/`` is the same scrape, as SGLang's ``/metrics`` mount serves it).
OPEN_ROUTES = frozenset({"/health", "/health_generate", "/ready", "/metrics", "/metrics/"})
#: Routes SGLang marks as admin (its ``ADMIN_OPTIONAL`` level) that this server has.
ADMIN_ROUTES = frozenset(
    {
        "/flush_cache",
        "/abort_request",
        "/update_weights_from_disk",
        "/get_weights_by_name",
        "/pause_generation",
        "/continue_generation",
        "/start_profile",
        "/stop_profile",
        "/configure_logging",
    }
)

#: Largest request head (request line + headers) h11 buffers, bytes (h11's default is 16 KiB).
H11_MAX_INCOMPLETE_EVENT_SIZE = 64 * 1024
#: How an HTTP/2 client opens a connection (RFC 9113, section 3.4): the preface's first line.
HTTP2_PREFACE_START = b"PRI * HTTP/2.0\r\n"


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {raw!r}")
    return value


@dataclass(frozen=True)
class AdmissionLimits:
    """Body size (bytes) and read / keep-alive timeouts (seconds) of the HTTP server."""

    max_body_bytes: int = 64 * 1024 * 1024
    read_timeout_s: float = 60.0
    keep_alive_s: float = 5.0

    @classmethod
    def from_env(cls) -> AdmissionLimits:
        """Read the ``SGLANG_V4_*`` variables of the module docstring.

        Raises:
            ValueError: a variable is not a positive number (the message names it).
        """
        d = cls()
        return cls(
            max_body_bytes=int(_env_float("SGLANG_V4_MAX_REQUEST_BODY_BYTES", d.max_body_bytes)),
            read_timeout_s=_env_float("SGLANG_V4_REQUEST_READ_TIMEOUT", d.read_timeout_s),
            keep_alive_s=_env_float("SGLANG_V4_TIMEOUT_KEEP_ALIVE", d.keep_alive_s),
        )


class _BodyTooLarge(Exception):
    pass


class _BodyTimeout(Exception):
    pass


def _anthropic_shaped(scope: dict[str, Any]) -> bool:
    """Whether the errors of this request take Anthropic's shape (module docstring)."""
    return wants_anthropic_errors(route_path(scope), (k for k, _ in scope.get("headers", ())))


async def _send_error(send: Any, path: str, status: int, message: str, anthropic: bool | None = None) -> None:
    body = route_error_body(path, status, message, anthropic)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status in (408, 413):
        headers.append((b"connection", b"close"))  # the rest of the body is not read
    for name, value in (auth_challenge_headers(status) or {}).items():
        headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def api_key_matches(headers: Iterable[tuple[bytes, bytes]], expected: bytes) -> bool:
    """Whether the raw ASGI ``headers`` (lower-case names) carry the key ``expected``: the first
    ``Authorization`` as ``Bearer KEY`` (the scheme in any case, RFC 9110 section 11.1; spaces
    around the key ignored) or the first ``x-api-key`` (Anthropic's header) as ``KEY``. The key
    itself is compared exactly, in constant time (``hmac.compare_digest``). One rule for the
    middleware and the routes that check the key again."""
    auth = b""
    x_key: bytes | None = None
    for k, v in headers:
        if k == b"authorization" and not auth:
            auth = v
        elif k == b"x-api-key" and x_key is None:
            x_key = v
    scheme, _, token = auth.partition(b" ")
    # compare_digest runs in time independent of where the bytes differ
    bearer = hmac.compare_digest(token.strip(), expected) and scheme.lower() == b"bearer"
    return (x_key is not None and hmac.compare_digest(x_key.strip(), expected)) or bearer


class AdmissionMiddleware:
    """ASGI middleware applying the checks of the module docstring to every HTTP request.

    Args:
        app: the wrapped ASGI app.
        api_key: the server's ``--api-key`` (``None``: no authentication).
        limits: body size and read timeout.
        is_draining: returns True while the server drains (new requests get 503).
        admin_api_key: ``--admin-api-key``: the only key the :data:`ADMIN_ROUTES` accept
            (``None``: they take ``api_key`` like the other routes).
    """

    def __init__(
        self,
        app: Any,
        api_key: str | None,
        limits: AdmissionLimits,
        is_draining: Callable[[], bool],
        admin_api_key: str | None = None,
    ) -> None:
        self.app = app
        self.expected = api_key.encode() if api_key else None
        self.admin_expected = admin_api_key.encode() if admin_api_key else None
        self.limits = limits
        self.is_draining = is_draining

    def _authorized(self, scope: dict[str, Any]) -> bool:
        expected = self.expected
        if self.admin_expected is not None and route_path(scope) in ADMIN_ROUTES:
            expected = self.admin_expected
        if expected is None:
            return True
        return api_key_matches(scope.get("headers", ()), expected)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)  # the route, without the --root-path prefix (root_path.py)
        open_route = path in OPEN_ROUTES or scope.get("method") == "OPTIONS"
        if not open_route and self.is_draining():
            await _send_error(send, path, 503, "The server is shutting down.", _anthropic_shaped(scope))
            return
        if not open_route and not self._authorized(scope):
            await _send_error(
                send, path, 401, "Unauthorized: invalid or missing API key.", _anthropic_shaped(scope)
            )
            return
        limit = self.limits.max_body_bytes
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    declared = int(v)
                except ValueError:
                    declared = -1
                if declared > limit:
                    await _send_error(
                        send,
                        path,
                        413,
                        f"Payload Too Large: the request body ({declared} bytes) is larger than the limit of {limit} bytes.",
                    )
                    return
                break

        deadline = time.monotonic() + self.limits.read_timeout_s
        received = 0
        body_done = False
        started = False

        async def guarded_receive() -> Any:
            nonlocal received, body_done
            if body_done:
                return await receive()  # after the body: disconnect polling, no deadline
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise _BodyTimeout from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge
                body_done = not message.get("more_body", False)
            return message

        async def tracked_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, guarded_receive, tracked_send)
        except _BodyTooLarge:
            if started:
                raise
            await _send_error(
                send,
                path,
                413,
                f"Payload Too Large: the request body is larger than the limit of {limit} bytes.",
            )
        except _BodyTimeout:
            if started:
                raise
            await _send_error(
                send,
                path,
                408,
                f"The request body did not arrive within {self.limits.read_timeout_s:g}s.",
            )
        except ClientDisconnect:
            if started or body_done:
                raise
            # gone before its body was complete: nothing was parsed or queued, no one to answer
            logger.info("%s: the client closed the connection before sending its whole body", path)


class HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol plus a deadline for each request head (see the module docstring).

    Pass the class as ``uvicorn.Config(http=...)`` after setting :attr:`header_timeout_s`.
    """

    header_timeout_s: float = 60.0

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        """A new connection: arm the request-head deadline and start telling HTTP/2 from HTTP/1.1."""
        self._head_timer: asyncio.TimerHandle | None = None
        self._first_bytes: bytes | None = b""  # the connection's opening bytes until told apart
        super().connection_made(transport)
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self._idle() and not self.transport.is_closing():
            self.logger.info(
                "Closing a connection that sent no complete request head in %gs", self.header_timeout_s
            )
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        """Bytes from the client: an HTTP/2 preface closes the connection; otherwise h11 parses them,
        the head deadline armed while no request is in progress and cancelled once a head is complete."""
        if self._first_bytes is not None:  # is this an HTTP/2 client (module docstring)?
            opening = self._first_bytes + data
            n = min(len(opening), len(HTTP2_PREFACE_START))
            if opening[:n] != HTTP2_PREFACE_START[:n]:
                self._first_bytes = None  # HTTP/1.1 (or garbage, which h11 answers with a 400)
            elif n == len(HTTP2_PREFACE_START):
                logger.debug("Closing an HTTP/2 connection (this server speaks HTTP/1.1)")
                self._cancel_head_timer()
                self.transport.close()
                return
            else:
                self._first_bytes = opening  # a prefix of the preface so far: wait for more
                return
            data = opening
        before = self.cycle
        if self._idle():
            self._arm_head_timer()
        super().data_received(data)
        if self.cycle is not before:  # a complete request head arrived
            self._cancel_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection closed: cancel the head deadline, then uvicorn's own handling."""
        self._cancel_head_timer()
        super().connection_lost(exc)


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` whose first SIGTERM / SIGINT runs ``drain(signum)`` before stopping.

    uvicorn's own handler stops accepting connections at once and, after
    ``timeout_graceful_shutdown``, cancels the responses still streaming (tracebacks, streams cut
    without an error event). Here the first signal schedules ``drain`` on the server's loop; when
    it returns, uvicorn shuts down as usual, with nothing left in flight. A second signal during
    the drain sets :attr:`hurry`: the drain stops waiting and fails what is left at once. A signal
    before the server has started sets ``should_exit`` (a repeated SIGINT also ``force_exit``).
    Signals are not re-raised after the shutdown.

    Args:
        config: the uvicorn configuration.
        drain: coroutine function run once on the first signal, with the signal number and the
            :attr:`hurry` event (set by a second signal).
    """

    def __init__(
        self, config: uvicorn.Config, drain: Callable[[int, asyncio.Event], Awaitable[None]]
    ) -> None:
        super().__init__(config)
        self._drain = drain
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Future[None] | None = None
        self._signalled = False
        #: Set by a second signal while draining (on the server's loop).
        self.hurry: asyncio.Event | None = None

    async def serve(self, sockets: Any = None) -> None:
        """Run the server (uvicorn's ``serve``), recording its event loop and creating :attr:`hurry`."""
        self._loop = asyncio.get_running_loop()
        self.hurry = asyncio.Event()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: Any) -> None:
        """uvicorn's signal handler: the first SIGTERM / SIGINT after start-up schedules the drain; a
        second one sets :attr:`hurry`; one before start-up sets ``should_exit`` (class docstring)."""
        if self._signalled and self._loop is not None and self.hurry is not None:
            logger.warning("%s received again: stopping now.", signal.Signals(sig).name)
            self._loop.call_soon_threadsafe(self.hurry.set)
            return
        if self._signalled or self._loop is None or not self.started:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True
            return
        self._signalled = True
        self._loop.call_soon_threadsafe(self._begin_drain, sig)

    def _begin_drain(self, sig: int) -> None:
        async def run() -> None:
            try:
                assert self.hurry is not None
                await self._drain(sig, self.hurry)
            finally:
                self.should_exit = True

        self._drain_task = asyncio.ensure_future(run())


async def _run_stop_work(
    stop_work: Callable[[], Awaitable[None]], hurry: asyncio.Event | None, timeout_s: float
) -> None:
    """Run ``stop_work`` until it ends, ``hurry`` is set (a second signal) or ``timeout_s``
    seconds passed (what is left of the drain); then it is cancelled. Never raises: a failure is
    logged, and the drain goes on."""
    work = asyncio.ensure_future(stop_work())
    hurried = asyncio.ensure_future(hurry.wait()) if hurry is not None else None
    await asyncio.wait(
        [w for w in (work, hurried) if w is not None],
        timeout=max(0.0, timeout_s),
        return_when=asyncio.FIRST_COMPLETED,
    )
    if hurried is not None:
        hurried.cancel()
    if not work.done():
        why = "a second signal" if hurry is not None and hurry.is_set() else "the drain timeout"
        logger.warning("Stopping the server's own work cut short by %s.", why)
        work.cancel()
        await asyncio.wait([work])  # let it unwind
    if not work.cancelled() and work.exception() is not None:
        exc = work.exception()
        logger.error("Stopping the server's own work failed", exc_info=(type(exc), exc, exc.__traceback__))


async def drain_in_flight(
    get_tokenizer_manager: Callable[[], Any],
    set_draining: Callable[[], None],
    sig: int,
    timeout_s: float,
    hurry: asyncio.Event | None = None,
    stop_work: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """The HTTP server's drain (run by :class:`DrainingServer` on the first signal).

    Marks the server draining (new requests 503, also those a task inside the server would
    start: ``TokenizerManager.stop_admitting``), runs ``stop_work`` (the server's own work that
    does not drain: running batches are cancelled, an open profile is stopped and its trace
    written; a second signal cuts it short), then waits until nothing is in flight: no request
    (those not yet sent to the scheduler included: ``TokenizerManager.num_in_flight``) and no
    control request waiting for the scheduler (a weight update loading), or ``hurry`` is set (a
    second signal). ``timeout_s`` bounds the whole drain from its start, ``stop_work`` included
    (cancelled when it runs past it). What is left then gets a 503: the requests through
    ``TokenizerManager.fail_all`` (an error event on a stream; up to :data:`FAIL_GRACE_S` to send
    it), the control requests through ``TokenizerManager.fail_control`` (the HTTP server would
    cancel them: a 500 and a traceback). While generation is paused (``/pause_generation``; the
    drain refuses ``/continue_generation``) no request can finish: they are not waited for.
    """
    set_draining()
    tm = get_tokenizer_manager()
    if tm is not None:
        tm.stop_admitting("The server is shutting down.", 503)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    n = tm.num_in_flight() if tm is not None else 0
    logger.info(
        "%s received: draining %d in-flight request(s) for up to %gs; new requests get 503.",
        signal.Signals(sig).name,
        n,
        timeout_s,
    )
    if stop_work is not None:
        await _run_stop_work(stop_work, hurry, deadline - loop.time())
    hurried = paused = False

    def busy() -> bool:
        nonlocal hurried, paused
        hurried = hurry is not None and hurry.is_set()
        paused = tm.is_pause
        requests_left = tm.num_in_flight() and not paused
        return bool(requests_left or tm.pending_control) and not hurried and tm.crashed is None

    while tm is not None and busy() and loop.time() < deadline:
        await asyncio.sleep(0.05)
    if tm is not None and tm.num_in_flight() and tm.crashed is None:
        if hurried:
            why = "stopped by a second signal"
        elif paused:
            why = "could not run: generation is paused"
        else:
            why = f"did not finish within the {timeout_s:g}s drain"
        k = tm.fail_all(f"The server is shutting down: the request {why}.", 503)
        if hurried:
            logger.warning("Drain cut short by a second signal: failed %d request(s).", k)
        elif paused:
            logger.warning("Generation is paused: failed %d request(s) at once.", k)
        else:
            logger.warning("Drain timed out after %gs: failed %d request(s).", timeout_s, k)
        until = loop.time() + FAIL_GRACE_S
        while tm.num_in_flight() and loop.time() < until:  # let their handlers send the error
            await asyncio.sleep(0.05)
    if tm is not None and tm.crashed is None:
        k = tm.fail_control("The server is shutting down.", 503)
        if k:
            logger.warning("Failed %d control request(s) still waiting for the scheduler.", k)
            await asyncio.sleep(0.05)  # let their handlers answer
    logger.info("Drained; shutting down.")

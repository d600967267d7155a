"""The server-sent-events response of every streaming route: Starlette's ``StreamingResponse``
that always closes its body generator.

Starlette stops iterating a body when the client goes away (the send fails, or the disconnect
listener cancels the response) or before the first chunk, and leaves the generator suspended;
its ``finally`` blocks (which close the tokenizer manager's request generator, so the request is
aborted in the scheduler and leaves the in-flight table) would then run only when the garbage
collector finalises it, which on an idle server may be never. Closing it when the response ends
runs them at once.

With vLLM's ``--sse-keep-alive-interval`` set, the body is sent through
:func:`~.sse_keep_alive.with_keep_alive` (SSE comment frames while it is silent, or the frame the
route gives: Anthropic's ``ping`` event on ``/v1/messages``).

Two things every stream does for the clients and proxies between it and the server:

* headers :data:`SSE_HEADERS`: ``Cache-Control: no-cache`` (an event stream is never a cached
  answer) and ``X-Accel-Buffering: no``, which tells NGINX (and proxies that honour it) not to
  buffer the body: with its default ``proxy_buffering on`` the events arrive in bursts of a buffer
  (4-16 KB) or all at the end, instead of as they are written.
* :func:`escape_unicode_line_breaks` on every frame: JSON leaves U+2028, U+2029 (line and
  paragraph separators) and U+0085 (next line) unescaped inside strings, but readers that split a
  stream with Python's ``str.splitlines()`` (``requests``' ``iter_lines(decode_unicode=True)``,
  several SSE libraries) or JavaScript's line rules break a ``data:`` line there, and the JSON
  they read is cut short. The SSE format splits lines at CR and LF only, so the frames are valid
  either way; written as JSON escapes (``\u2028``) the data decodes to the same value and no
  reader sees a line break in it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from sglang_v4.entrypoints.sse_keep_alive import (
    SSE_KEEP_ALIVE_COMMENT,
    app_keep_alive_interval,
    with_keep_alive,
)

logger = logging.getLogger(__name__)

#: the headers of every event stream (a header the route sets itself wins)
SSE_HEADERS: dict[str, str] = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

#: the UTF-8 bytes of the characters some readers take for line breaks, and their JSON escapes
_LINE_BREAK_ESCAPES = (
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
    ("\u0085".encode(), b"\\u0085"),
)


def escape_unicode_line_breaks(frame: bytes | str) -> bytes | str:
    """``frame`` (SSE frames of JSON data, whole characters) with U+2028, U+2029 and U+0085
    written as the JSON escapes ``\\u2028``, ``\\u2029``, ``\\u0085``.

    Outside its strings JSON text is ASCII, so each such character is inside a string, where the
    escape decodes to the same character: every ``data:`` value parses to what it did. In UTF-8
    their byte sequences (``E2 80 A8``, ``E2 80 A9``, ``C2 85``) cannot occur inside another
    character, so a byte replacement finds only them. A ``str`` frame is returned as ``str``."""
    if isinstance(frame, str):
        for raw, esc in _LINE_BREAK_ESCAPES:
            frame = frame.replace(raw.decode(), esc.decode())
        return frame
    for raw, esc in _LINE_BREAK_ESCAPES:
        if raw in frame:
            frame = frame.replace(raw, esc)
    return frame


async def _escaped(body: AsyncIterable[Any]) -> AsyncIterator[Any]:
    """``body``'s frames through :func:`escape_unicode_line_breaks`; closing it closes ``body``."""
    it = body.__aiter__()
    try:
        async for frame in it:
            yield escape_unicode_line_breaks(frame) if isinstance(frame, (bytes, str)) else frame
    finally:
        close: Any = getattr(it, "aclose", None)
        if close is not None:
            await close()


class ClosingStreamingResponse(StreamingResponse):
    """``StreamingResponse`` whose async-generator body is closed (``aclose()``, shielded from the
    response's cancellation) when the response ends for any reason: sent in full, client gone,
    cancelled. Arguments are ``StreamingResponse``'s; the response carries :data:`SSE_HEADERS`
    (a header in ``headers`` wins) and its frames go through :func:`escape_unicode_line_breaks`.
    With the app's ``state.sse_keep_alive_interval`` > 0 the body is sent through
    :func:`~.sse_keep_alive.with_keep_alive`, its silences filled with ``keep_alive_frame`` (the
    SSE comment :data:`~.sse_keep_alive.SSE_KEEP_ALIVE_COMMENT` unless the route gives its own).

    ``on_close`` (no arguments, awaited after the body is closed, shielded too) ends what the
    body streams (:func:`~.sse_keep_alive.close_generation`: the request's generator and a first
    output still being read): a body closed before its first step, or at a ``yield`` outside its
    ``try``, never reaches its ``finally``, and a request read by a
    :class:`~.sse_keep_alive.PendingFirst` would keep its slot until the scheduler served it."""

    def __init__(
        self,
        content: Any,
        *args: Any,
        headers: Mapping[str, str] | None = None,
        keep_alive_frame: bytes = SSE_KEEP_ALIVE_COMMENT,
        on_close: Callable[[], Awaitable[None]] | None = None,
        **kw: Any,
    ) -> None:
        self.keep_alive_frame = keep_alive_frame
        self.on_close = on_close
        given = {k.lower() for k in headers or {}}
        merged = {k: v for k, v in SSE_HEADERS.items() if k.lower() not in given}
        merged.update(headers or {})
        body = _escaped(content) if isinstance(content, AsyncIterable) else content
        super().__init__(body, *args, headers=merged, **kw)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        interval = app_keep_alive_interval(scope.get("app"))
        if interval > 0:
            self.body_iterator = with_keep_alive(self.body_iterator, interval, self.keep_alive_frame)
        try:
            await super().__call__(scope, receive, send)
        finally:
            close: Any = getattr(self.body_iterator, "aclose", None)
            with anyio.CancelScope(shield=True):
                if close is not None:
                    try:
                        await close()
                    except RuntimeError:  # still running in a task being torn down: it ends itself
                        logger.debug("Stream body still running at close.", exc_info=True)
                if self.on_close is not None:
                    try:
                        await self.on_close()
                    except RuntimeError:  # the generator still running in a task being torn down
                        logger.debug("Stream generation still running at close.", exc_info=True)

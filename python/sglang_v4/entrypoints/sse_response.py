"""The server-sent-events response of every streaming route: Starlette's ``StreamingResponse``
that always closes its body generator.

Starlette stops iterating a body when the client goes away (the send fails, or the disconnect
listener cancels the response) or before the first chunk, and leaves the generator suspended;
its ``finally`` blocks (which close the tokenizer manager's request generator, so the request is
aborted in the scheduler and leaves the in-flight table) would then run only when the garbage
collector finalises it, which on an idle server may be never. Closing it when the response ends
runs them at once.

With vLLM's ``--sse-keep-alive-interval`` set, the body is sent through
:func:`~.sse_keep_alive.with_keep_alive` (SSE comment frames while it is silent).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from sglang_v4.entrypoints.sse_keep_alive import app_keep_alive_interval, with_keep_alive

logger = logging.getLogger(__name__)


class ClosingStreamingResponse(StreamingResponse):
    """``StreamingResponse`` whose async-generator body is closed (``aclose()``, shielded from the
    response's cancellation) when the response ends for any reason: sent in full, client gone,
    cancelled. Arguments are ``StreamingResponse``'s. With the app's
    ``state.sse_keep_alive_interval`` > 0 the body is sent through
    :func:`~.sse_keep_alive.with_keep_alive`."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        interval = app_keep_alive_interval(scope.get("app"))
        if interval > 0:
            self.body_iterator = with_keep_alive(self.body_iterator, interval)
        try:
            await super().__call__(scope, receive, send)
        finally:
            close: Any = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                with anyio.CancelScope(shield=True):
                    try:
                        await close()
                    except RuntimeError:  # still running in a task being torn down: it ends itself
                        logger.debug("Stream body still running at close.", exc_info=True)

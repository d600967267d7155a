"""``HEAD`` on every ``GET`` route of the HTTP server (RFC 9110, section 9.3.2: HEAD is GET
without the content).

FastAPI's ``APIRoute`` matches only the methods it is declared with (Starlette's plain ``Route``
adds ``HEAD`` to a ``GET`` route; FastAPI's does not), so ``HEAD /v1/models``,
``HEAD /get_model_info`` or ``HEAD /metrics`` answered 405 while ``GET`` answered 200, and an
uptime monitor or load balancer that probes with ``HEAD`` saw the server as down.
:class:`HeadAsGetMiddleware` routes a ``HEAD`` request as ``GET`` and sends the ``GET`` answer's
status and headers (``Content-Length`` included, as RFC 9110 allows) without its body. A path
without a ``GET`` route answers ``HEAD`` as it answers ``GET`` (404 or 405).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["HeadAsGetMiddleware"]

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]


class HeadAsGetMiddleware:
    """ASGI middleware: a ``HEAD`` request is handled as ``GET``; the answer's status and headers
    are sent, its body is not (one empty final body message instead)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "HEAD":
            await self.app(scope, receive, send)
            return
        started = body_sent = False

        async def send_without_body(message: Message) -> None:
            nonlocal started, body_sent
            if message.get("type") != "http.response.body":
                started = started or message.get("type") == "http.response.start"
                await send(message)
                return
            if body_sent or message.get("more_body", False):
                return  # the content of a HEAD answer is left out
            body_sent = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app({**scope, "method": "GET"}, receive, send_without_body)
        if started and not body_sent:  # the app ended a streamed body without its final message
            await send({"type": "http.response.body", "body": b"", "more_body": False})

"""Request-id response headers: every HTTP answer names the request it answers.

OpenAI's API answers each request with an ``x-request-id`` header and Anthropic's with
``request-id``; their Python clients read those headers into ``_request_id`` (``openai``:
``response.headers["x-request-id"]``; ``anthropic``: ``response.headers["request-id"]``) and into
the ``request_id`` of the errors they raise. vLLM's ``--enable-request-id-headers`` echoes a
client's ``X-Request-Id`` (vllm-project/vllm#9593), so a gateway or client can correlate its own
trace id with the server's answers.

:class:`RequestIdMiddleware` is a plain ASGI middleware (streaming answers pass through
untouched, as in :mod:`sglang_v4.entrypoints.admission`). Per HTTP request: the id is the
client's ``X-Request-Id`` header when it sent a usable one (1 to :data:`MAX_REQUEST_ID_LEN`
visible ASCII characters), else a fresh ``uuid4`` hex; the response start then carries it as
both ``x-request-id`` and ``request-id`` (any such header a route set itself is replaced). It runs
outside the admission checks, so their 401 / 413 / 503 answers carry the id too. The header is
not the engine's request id (``rid``): two clients may send the same value, and a ``rid`` must be
unique.
"""

from __future__ import annotations

import uuid
from typing import Any

__all__ = ["MAX_REQUEST_ID_LEN", "RequestIdMiddleware", "request_id_of"]

#: The longest client ``X-Request-Id`` echoed (characters); a longer one is replaced by a fresh id.
MAX_REQUEST_ID_LEN = 256

_ID_HEADERS = (b"x-request-id", b"request-id")


def request_id_of(headers: list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...]) -> str:
    """The request id for an ASGI request's raw ``headers`` (lower-case names).

    Returns:
        The first ``x-request-id`` value when it is 1 to :data:`MAX_REQUEST_ID_LEN` visible ASCII
        characters (0x21 to 0x7E), else a new ``uuid.uuid4().hex`` (32 hex digits).
    """
    for name, value in headers:
        if name == b"x-request-id":
            if 0 < len(value) <= MAX_REQUEST_ID_LEN and all(0x21 <= b <= 0x7E for b in value):
                return value.decode("ascii")
            break
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """ASGI middleware putting the request id (module docstring) on every HTTP response.

    Args:
        app: the wrapped ASGI app.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id_of(scope.get("headers", ())).encode("ascii")

        async def send_with_id(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() not in _ID_HEADERS]
                headers += [(name, rid) for name in _ID_HEADERS]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_id)

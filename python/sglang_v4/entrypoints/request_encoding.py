"""Compressed request bodies (``Content-Encoding``, RFC 9110 section 8.4) for every route.

Clients compress large bodies: OpenAI's Codex client sends long ``/v1/responses`` conversations
with ``Content-Encoding: zstd`` or ``gzip``, and ``curl --data-binary @req.json.gz -H
"Content-Encoding: gzip"`` is a common way to send a big prompt. Read as they arrive, such bodies
fail as "not valid UTF-8" JSON, which names the wrong fault.

:class:`RequestDecodingMiddleware` decodes the body before any route reads it:

- ``gzip`` / ``x-gzip`` (RFC 1952) and ``deflate`` (zlib, RFC 1950; a raw RFC 1951 stream is
  accepted too, as browsers and servers do) are decoded, several codings in the order they were
  applied (``Content-Encoding: deflate, gzip`` is undone gzip first); ``identity`` is none.
- another coding (``br``, ``zstd``, ...) is refused with 415 and an ``Accept-Encoding: gzip,
  deflate`` header (RFC 9110 section 15.5.16, 12.5.3), before the body is read.
- a body that is not valid data of its coding is refused with 400 naming ``Content-Encoding``.
- the decoded body may be at most ``max_body_bytes`` long (the admission's body limit), else 413:
  a small compressed body cannot expand into gigabytes in memory (it is decoded in steps and the
  decoding stops at the limit).

The route then sees the decoded body, without the ``content-encoding`` header and with the
decoded ``content-length``. The errors use the route's error shape
(:func:`~sglang_v4.entrypoints.route_errors.route_error_body`).
"""

from __future__ import annotations

import zlib
from typing import Any

from sglang_v4.entrypoints.root_path import route_path
from sglang_v4.entrypoints.route_errors import route_error_body, wants_anthropic_errors

__all__ = ["SUPPORTED_CODINGS", "RequestDecodingMiddleware", "decode_body"]

#: The content codings decoded (RFC 9110 section 8.4.1 names; ``x-gzip`` is ``gzip``).
SUPPORTED_CODINGS = ("gzip", "deflate")
_ALIASES = {"x-gzip": "gzip"}
_STEP = 1 << 16  # bytes decoded per step


class BodyDecodeError(ValueError):
    """A body that could not be decoded; ``status`` is 400 (corrupt) or 413 (too large)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _codings(headers: list[tuple[bytes, bytes]]) -> list[str]:
    """The content codings of the ``content-encoding`` header(s), in the order applied, lower
    case, ``identity`` left out."""
    out: list[str] = []
    for name, value in headers:
        if name.lower() == b"content-encoding":
            for part in value.decode("latin-1").split(","):
                c = part.strip().lower()
                if c and c != "identity":
                    out.append(_ALIASES.get(c, c))
    return out


def _inflate(data: bytes, wbits: int, limit: int) -> bytes:
    """``data`` inflated (``wbits`` as :func:`zlib.decompressobj`; 31: gzip, whose members may
    follow one another, RFC 1952 2.2), in steps of :data:`_STEP` bytes.

    Raises:
        BodyDecodeError: 413 when more than ``limit`` bytes come out.
        ValueError: a truncated stream, or data after its end.
        zlib.error: data that is not of the coding.
    """
    d = zlib.decompressobj(wbits)
    out = bytearray()
    buf = data
    while True:
        out += d.decompress(buf, _STEP)
        if len(out) > limit:
            raise BodyDecodeError(f"the decoded request body is larger than the limit of {limit} bytes", 413)
        buf = d.unconsumed_tail
        if d.eof:
            if d.unused_data and wbits == 31:  # the next gzip member, in a loop (no recursion)
                d, buf = zlib.decompressobj(wbits), d.unused_data
                continue
            if d.unused_data:
                raise ValueError("data after the end of the compressed stream")
            return bytes(out)
        if not buf:
            raise ValueError("the compressed stream is truncated")


def decode_body(body: bytes, codings: list[str], limit: int) -> bytes:
    """``body`` with the content ``codings`` (in the order applied) undone.

    Args:
        body: the body as received.
        codings: coding names from :data:`SUPPORTED_CODINGS`, first applied first.
        limit: the most bytes any decoded stage may hold.

    Raises:
        BodyDecodeError: status 400 when the body is not valid data of its coding, 413 when a
            decoded stage exceeds ``limit`` bytes.
    """
    for coding in reversed(codings):
        try:
            if coding == "gzip":
                body = _inflate(body, 31, limit)
            else:
                try:
                    body = _inflate(body, 15, limit)  # zlib stream (RFC 1950)
                except zlib.error:
                    body = _inflate(body, -15, limit)  # raw deflate (RFC 1951)
        except (zlib.error, ValueError) as e:
            if isinstance(e, BodyDecodeError):
                raise
            raise BodyDecodeError(
                f"Content-Encoding: the request body is not valid {coding} data ({e})", 400
            ) from e
    return body


class RequestDecodingMiddleware:
    """ASGI middleware decoding ``gzip`` / ``deflate`` request bodies (module docstring).

    Args:
        app: the ASGI app it wraps.
        max_body_bytes: the most bytes a decoded body may hold (413 above).
    """

    def __init__(self, app: Any, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def _refuse(self, scope: dict[str, Any], send: Any, status: int, message: str) -> None:
        path = route_path(scope)
        anthropic = wants_anthropic_errors(path, (k for k, _ in scope.get("headers", ())))
        body = route_error_body(path, status, message, anthropic)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status == 415:
            headers.append((b"accept-encoding", ", ".join(SUPPORTED_CODINGS).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        codings = _codings(scope.get("headers", []))
        if not codings:
            await self.app(scope, receive, send)
            return
        unknown = [c for c in codings if c not in SUPPORTED_CODINGS]
        if unknown:
            await self._refuse(
                scope,
                send,
                415,
                f"Unsupported Media Type: Content-Encoding {unknown[0]!r} is not supported; "
                f"supported: {', '.join(SUPPORTED_CODINGS)}.",
            )
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # gone before the body was complete
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        try:
            body = decode_body(b"".join(chunks), codings, self.max_body_bytes)
        except BodyDecodeError as e:
            msg = str(e)
            if e.status == 413:
                msg = f"Payload Too Large: {msg}."
            await self._refuse(scope, send, e.status, msg)
            return
        headers = [
            (k, v) for k, v in scope["headers"] if k.lower() not in (b"content-encoding", b"content-length")
        ]
        headers.append((b"content-length", str(len(body)).encode()))
        sent = False

        async def decoded_receive() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app({**scope, "headers": headers}, decoded_receive, send)

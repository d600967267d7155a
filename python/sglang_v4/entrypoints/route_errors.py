"""Error bodies the server writes outside a route handler, in the shape of the route family asked.

Used where no route handler runs: the admission middleware (drain, API key, body limits:
:mod:`sglang_v4.entrypoints.admission`) and the ``--dp-size`` gateway (a router or replica that did
not answer: :mod:`sglang_v4.entrypoints.dp_gateway`). A client then reads the error as it reads
the route's own errors:

* the Anthropic routes (``/v1/messages``, ``/v1/messages/count_tokens``), and ``/v1/models[/{id}]``
  asked with the ``anthropic-version`` header (the ``anthropic`` SDK's model listing): Anthropic's
  ``{"type": "error", "error": {"type", "message"}}``
  (:func:`~sglang_v4.entrypoints.anthropic.protocol.anthropic_error_body`);
* other routes under ``/v1/``: SGLang's flat ``{"object": "error", "message", "type", "param",
  "code"}`` plus OpenAI's nested ``"error": {"message", "type", "param", "code"}``
  (:func:`~sglang_v4.entrypoints.openai.protocol.error_body`; the ``openai`` client reads the
  nested one);
* elsewhere (``/generate``, ``/health``, ...): SGLang's native ``{"error": {"message", "type",
  "code"}}`` (:func:`~sglang_v4.entrypoints.native_api.error_body`; also ``sglang-router``'s own
  shape for its errors), except a 401, SGLang's exact ``{"error": "Unauthorized"}``.

The ``type`` is the status's (:func:`~sglang_v4.entrypoints.openai.protocol.error_type_for_status`:
``"service_unavailable"`` for 503, ``"server_error"`` for another 5xx).

Starlette's router answers a path no route has (404) and a method the path's routes lack (405,
with the ``Allow`` header) by raising its ``HTTPException`` before any handler runs.
:func:`install_route_error_handler` gives those answers the same shapes under ``/v1/``: OpenAI's
on the OpenAI paths, Anthropic's on ``/v1/messages*``. Other paths keep FastAPI's
``{"detail": "Not Found"}`` / ``{"detail": "Method Not Allowed"}``, which SGLang answers there
too (its own handler is registered for FastAPI's ``HTTPException`` subclass, which the router
does not raise).
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson
from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler as fastapi_http_exception_handler
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from sglang_v4.entrypoints.anthropic.protocol import ANTHROPIC_ROUTES, anthropic_error_body
from sglang_v4.entrypoints.native_api import error_body as native_error_body
from sglang_v4.entrypoints.openai.protocol import error_body
from sglang_v4.entrypoints.root_path import route_path

__all__ = [
    "http_exception_handler",
    "install_route_error_handler",
    "route_error_body",
    "wants_anthropic_errors",
]


def wants_anthropic_errors(path: str, header_names: Iterable[str | bytes]) -> bool:
    """Whether the errors of a request for ``path`` take Anthropic's shape (module docstring).

    Args:
        path: the request's path (no query).
        header_names: the request's header names, ``str`` or ASGI's lower-case ``bytes``.
    """
    if path in ANTHROPIC_ROUTES:
        return True
    if path != "/v1/models" and not path.startswith("/v1/models/"):
        return False
    return any(
        (k.decode("latin-1") if isinstance(k, bytes) else k).lower() == "anthropic-version"
        for k in header_names
    )


def route_error_body(path: str, status: int, message: str, anthropic: bool | None = None) -> bytes:
    """The JSON body (UTF-8 bytes) of an error answered to a request for ``path``.

    Args:
        path: the request's path (no query); it picks the shape (module docstring).
        status: the HTTP status (its ``type`` and ``code``).
        message: the human-readable message.
        anthropic: Anthropic's shape or not (:func:`wants_anthropic_errors`); ``None``: the
            Anthropic routes only (the path alone decides).
    """
    if path in ANTHROPIC_ROUTES if anthropic is None else anthropic:
        return orjson.dumps(anthropic_error_body(message, status))
    if status == 401 and not path.startswith("/v1/"):
        return orjson.dumps({"error": "Unauthorized"})
    if path.startswith("/v1/"):
        return orjson.dumps(error_body(message, status))
    return orjson.dumps(native_error_body(message, status))


def _routing_message(request: Request, exc: StarletteHTTPException) -> str:
    """The message of an ``HTTPException``: its ``detail``, naming the method and path when it is
    the router's bare status phrase (``Not Found (POST /v1/chat/complete)``), and the allowed
    methods of a 405 (``; allowed: POST``)."""
    message = str(exc.detail)
    if exc.status_code not in (404, 405) or message not in ("Not Found", "Method Not Allowed"):
        return message
    message = f"{message} ({request.method} {request.url.path})"
    allow = (exc.headers or {}).get("Allow")
    return f"{message}; allowed: {allow}" if allow else message


async def http_exception_handler(request: Request, exc: StarletteHTTPException) -> Response:
    """Starlette's ``HTTPException`` (the router's 404 / 405, or one a dependency raises) in the
    shape of the path's route family (module docstring); the exception's headers (``Allow`` on a
    405) are kept.

    Args:
        request: the request that raised.
        exc: the exception; ``status_code`` is the answer's status.

    Returns:
        OpenAI's error body under ``/v1/``, Anthropic's on ``/v1/messages*`` (and ``/v1/models``
        asked with ``anthropic-version``), else FastAPI's own ``{"detail": ...}`` answer.
    """
    path = route_path(request.scope)
    if not path.startswith("/v1/"):
        return await fastapi_http_exception_handler(request, exc)
    anthropic = path.startswith("/v1/messages") or wants_anthropic_errors(path, request.headers.keys())
    body = route_error_body(path, exc.status_code, _routing_message(request, exc), anthropic=anthropic)
    return Response(body, exc.status_code, headers=exc.headers, media_type="application/json")


def install_route_error_handler(app: FastAPI) -> None:
    """Register :func:`http_exception_handler` on ``app`` for Starlette's ``HTTPException`` (and
    so FastAPI's subclass), in place of FastAPI's default handler."""
    app.add_exception_handler(StarletteHTTPException, http_exception_handler)

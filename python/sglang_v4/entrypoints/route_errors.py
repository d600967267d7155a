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
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from sglang_v4.entrypoints.anthropic.protocol import ANTHROPIC_ROUTES, anthropic_error_body
from sglang_v4.entrypoints.native_api import error_body as native_error_body
from sglang_v4.entrypoints.openai.protocol import error_body

__all__ = ["route_error_body", "wants_anthropic_errors"]


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

"""Anthropic's Models API shapes of ``GET /v1/models`` and ``GET /v1/models/{model_id}``.

The OpenAI routes answer these paths; a request that carries the ``anthropic-version`` header
(every ``anthropic`` SDK request does) gets Anthropic's shapes instead
(:mod:`sglang_v4.entrypoints.openai.serving_base` asks :func:`is_anthropic_request`):

* a model: ``{"type": "model", "id", "display_name", "created_at", "lifecycle": "active",
  "max_input_tokens"}``; ``created_at`` is an RFC 3339 time, the Unix epoch since the release
  date of a served checkpoint is not known (Anthropic: "May be set to an epoch value if the
  release date is unknown"); ``max_input_tokens`` is the longest prompt the server takes
  (context length - 1);
* the list: ``{"data", "has_more", "first_id", "last_id"}`` with Anthropic's cursor parameters
  ``limit`` (1..1000, default 20), ``after_id`` and ``before_id`` (the one served model has
  nothing after or before it);
* errors in Anthropic's body (``{"type": "error", "error": {"type", "message"}}``).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from sglang_v4.entrypoints.openai.request_errors import RequestError

__all__ = ["ANTHROPIC_VERSION_HEADER", "anthropic_model", "anthropic_model_list", "is_anthropic_request"]

#: The header every Anthropic API request carries (the SDK sends it).
ANTHROPIC_VERSION_HEADER = "anthropic-version"
#: ``created_at`` of a model whose release date is unknown (Anthropic: an epoch value).
UNKNOWN_RELEASE = "1970-01-01T00:00:00Z"
#: Anthropic's ``limit`` default and bound for ``GET /v1/models``.
DEFAULT_LIMIT, MAX_LIMIT = 20, 1000


def is_anthropic_request(request: Request) -> bool:
    """Whether ``request`` is an Anthropic API request (it carries ``anthropic-version``)."""
    return ANTHROPIC_VERSION_HEADER in request.headers


def anthropic_model(model_id: str, context_len: int | None) -> dict[str, Any]:
    """Anthropic's ``ModelInfo`` of a served model name.

    Args:
        model_id: the name as the API accepts it.
        context_len: the server's context length in tokens (None: unknown, the field is left out).
    """
    info: dict[str, Any] = {
        "type": "model",
        "id": model_id,
        "display_name": model_id,
        "created_at": UNKNOWN_RELEASE,
        "lifecycle": "active",
    }
    if context_len:
        info["max_input_tokens"] = context_len - 1
    return info


def anthropic_model_list(models: list[dict[str, Any]], query: Any) -> dict[str, Any]:
    """Anthropic's model list page of ``models`` (:func:`anthropic_model` dicts) for the query
    parameters ``limit``, ``after_id``, ``before_id``.

    Raises:
        RequestError: 400 naming ``limit`` when it is not an integer in 1..1000.
    """
    raw = query.get("limit")
    try:
        limit = DEFAULT_LIMIT if raw is None else int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise RequestError(f"limit: must be an integer from 1 to {MAX_LIMIT}; got {raw!r}.", param="limit")
    ids = [m["id"] for m in models]
    start, end = 0, len(models)
    if query.get("after_id") is not None:
        after = query.get("after_id")
        start = ids.index(after) + 1 if after in ids else len(models)
    if query.get("before_id") is not None:
        before = query.get("before_id")
        end = ids.index(before) if before in ids else 0
    window = models[start:end]
    page = window[:limit] if query.get("before_id") is None else window[-limit:]
    return {
        "data": page,
        "has_more": len(page) < len(window),
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
    }

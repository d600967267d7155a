"""OpenAI's ``service_tier`` on ``/v1/chat/completions`` and ``/v1/responses``.

The request field picks a processing tier (``auto``, ``default``, ``flex``, ``priority``...). OpenAI's
API reference: "When the ``service_tier`` parameter is set, the response body will include the
``service_tier`` value based on the processing mode actually used to serve the request. This
response value may be different from the value set in the parameter." This server has one
processing mode, OpenAI's ``default`` (standard pricing and performance): every tier the API
names is accepted and served by it, and the response names ``default``, the tier used, never
the one asked for (echoing ``priority`` would tell the client it got a tier it did not).
A value the API does not name is a 400 naming ``service_tier``, as OpenAI, SGLang and vLLM answer
a value outside the field's enum.
"""

from __future__ import annotations

from typing import Any

from sglang_v4.entrypoints.openai.request_errors import RequestError

__all__ = ["CHAT_SERVICE_TIERS", "RESPONSES_SERVICE_TIERS", "SERVED_TIER", "served_service_tier"]

#: The tier every request is served with (and that the response names).
SERVED_TIER = "default"
#: The values of the request field, as the ``openai`` client's types list them per route.
CHAT_SERVICE_TIERS = ("auto", "default", "flex", "scale", "priority", "fast")
RESPONSES_SERVICE_TIERS = (*CHAT_SERVICE_TIERS, "ultrafast")


def served_service_tier(value: Any, allowed: tuple[str, ...]) -> str | None:
    """The ``service_tier`` a response names for a request's ``value``.

    Args:
        value: the request's ``service_tier`` (``None`` when not sent).
        allowed: the route's values (:data:`CHAT_SERVICE_TIERS` or :data:`RESPONSES_SERVICE_TIERS`).

    Returns:
        :data:`SERVED_TIER` for any allowed value; ``None`` when ``value`` is ``None`` (the chat
        route then leaves the field out, the Responses route names ``default`` anyway).

    Raises:
        RequestError: 400 (``param="service_tier"``) for a value not in ``allowed``.
    """
    if value is None:
        return None
    if value not in allowed:
        raise RequestError(
            f"Invalid value for 'service_tier': {value!r}. Supported values are: "
            + ", ".join(repr(v) for v in allowed)
            + ".",
            param="service_tier",
        )
    return SERVED_TIER

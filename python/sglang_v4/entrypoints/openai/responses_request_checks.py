"""Bounds of ``/v1/responses`` request fields that the request model does not check: fields of
features not served (:data:`~.protocol_responses.UNSERVED_RESPONSES_FIELDS`), ``truncation:
"auto"``, vLLM's non-empty ``cache_salt``, and OpenAI's bounds on ``metadata``, ``text.verbosity``
and ``safety_identifier``, and ``service_tier`` outside OpenAI's values (each a 400 naming the field, in OpenAI's error shape).
"""

from __future__ import annotations

from sglang_v4.entrypoints.openai.protocol_responses import UNSERVED_RESPONSES_FIELDS, ResponsesRequest
from sglang_v4.entrypoints.openai.request_errors import RequestError
from sglang_v4.entrypoints.openai.service_tier import RESPONSES_SERVICE_TIERS, served_service_tier

__all__ = ["check_responses_request"]

#: OpenAI's bound on ``metadata``: pairs, key and value lengths (characters).
METADATA_MAX_PAIRS, METADATA_MAX_KEY, METADATA_MAX_VALUE = 16, 64, 512
#: OpenAI's ``text.verbosity`` values (the ``openai`` client's ``ResponseTextConfig``).
TEXT_VERBOSITY_VALUES = ("low", "medium", "high")
#: OpenAI's bound on ``safety_identifier`` (the ``openai`` client's ``ResponseCreateParams`` docs).
SAFETY_IDENTIFIER_MAX_LEN = 128


def check_responses_request(req: ResponsesRequest) -> None:
    """Fields refused when set, ``truncation: "auto"``, ``metadata`` bounds, ``text.verbosity``
    outside OpenAI's values, a ``safety_identifier`` over OpenAI's length (400 naming the field)."""
    for name, why in UNSERVED_RESPONSES_FIELDS.items():
        value = getattr(req, name)
        if value not in (None, False, 0, [], {}):
            raise RequestError(f"{name}: {why}.", param=name)
    served_service_tier(req.service_tier, RESPONSES_SERVICE_TIERS)
    if req.truncation == "auto":
        raise RequestError(
            'truncation: "auto" is not supported (a conversation longer than the context is a 400).',
            param="truncation",
        )
    if req.cache_salt == "":  # vLLM's rule, as on the chat route
        raise RequestError(
            "Parameter 'cache_salt' must be a non-empty string if provided.", param="cache_salt"
        )
    verbosity = req.text.get("verbosity") if isinstance(req.text, dict) else None
    if verbosity is not None and verbosity not in TEXT_VERBOSITY_VALUES:
        raise RequestError(
            f"Invalid value for text.verbosity: {verbosity!r}; supported values are "
            + ", ".join(repr(v) for v in TEXT_VERBOSITY_VALUES)
            + ".",
            param="text.verbosity",
        )
    if req.safety_identifier is not None and len(req.safety_identifier) > SAFETY_IDENTIFIER_MAX_LEN:
        raise RequestError(
            f"safety_identifier takes at most {SAFETY_IDENTIFIER_MAX_LEN} characters; "
            f"got {len(req.safety_identifier)}.",
            param="safety_identifier",
        )
    md = req.metadata or {}
    if len(md) > METADATA_MAX_PAIRS or any(
        len(k) > METADATA_MAX_KEY or len(v) > METADATA_MAX_VALUE for k, v in md.items()
    ):
        raise RequestError(
            f"metadata takes at most {METADATA_MAX_PAIRS} pairs, keys of at most {METADATA_MAX_KEY} "
            f"and values of at most {METADATA_MAX_VALUE} characters.",
            param="metadata",
        )

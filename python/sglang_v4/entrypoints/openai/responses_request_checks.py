"""Bounds of ``/v1/responses`` request fields that the request model does not check: fields of
features not served (:data:`~.protocol_responses.UNSERVED_RESPONSES_FIELDS`), vLLM's non-empty
``cache_salt``, and OpenAI's bounds on ``metadata``, ``text.verbosity``
and ``safety_identifier``, ``service_tier`` outside OpenAI's values, and ``max_output_tokens``
below :data:`MIN_MAX_OUTPUT_TOKENS`, ``max_tool_calls`` below 1, either above :data:`INT64_MAX`
(each a 400 naming the field, in OpenAI's error shape).
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
#: The least ``max_output_tokens`` taken (tokens). A response of no token asks for nothing: OpenAI
#: refuses it (400 ``integer below minimum value``, ``code`` ``integer_below_min_value``) and so
#: does SGLang 0.5.23 (``max_output_tokens`` 0 is ``max_new_tokens`` -2 after its headroom, a
#: ``max_new_tokens must be at least 0`` 400). The references disagree above 0: OpenAI's floor is
#: 16, while SGLang serves 2..15 (its headroom of 2 refuses 1 as well) and vLLM's own tests ask
#: its Responses route for a single token; tests and clients of both ask for a few tokens.
#: Against the rule of following OpenAI on its routes, this one keeps OpenAI's error words but
#: the floor every reference shares (no response of zero tokens), not OpenAI's 16, so that those
#: requests keep being served.
MIN_MAX_OUTPUT_TOKENS = 1
#: The greatest ``max_output_tokens`` / ``max_tool_calls`` taken: both are echoed in the response
#: object, and a JSON integer past the signed 64-bit range (kept exact by the body reader) cannot
#: be written back by orjson (``Integer exceeds 64-bit range``), nor held by an int64 tensor.
INT64_MAX = 2**63 - 1


def check_responses_request(req: ResponsesRequest) -> None:
    """Fields refused when set, ``max_tool_calls`` other than an integer >= 1 (OpenAI's bound),
    ``metadata`` bounds, ``text.verbosity``
    outside OpenAI's values, a ``safety_identifier`` over OpenAI's length, ``max_output_tokens``
    below :data:`MIN_MAX_OUTPUT_TOKENS`, either integer above :data:`INT64_MAX` (400 naming the
    field).

    Raises:
        RequestError: 400 whose ``param`` names the field.
    """
    calls = req.max_tool_calls
    if calls is not None and (not isinstance(calls, int) or isinstance(calls, bool) or calls < 1):
        raise RequestError(
            f"Invalid 'max_tool_calls': expected an integer >= 1, but got {calls!r} instead.",
            param="max_tool_calls",
        )
    for name in ("max_tool_calls", "max_output_tokens"):
        value = getattr(req, name)
        if value is not None and value > INT64_MAX:
            raise RequestError(
                f"Invalid '{name}': integer above maximum value. Expected a value <= {INT64_MAX}, "
                f"but got {value} instead.",
                param=name,
            )
    if req.max_output_tokens is not None and req.max_output_tokens < MIN_MAX_OUTPUT_TOKENS:
        raise RequestError(
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
            f"{MIN_MAX_OUTPUT_TOKENS}, but got {req.max_output_tokens} instead.",
            param="max_output_tokens",
        )
    for name, why in UNSERVED_RESPONSES_FIELDS.items():
        value = getattr(req, name)
        if value not in (None, False, 0, [], {}):
            raise RequestError(f"{name}: {why}.", param=name)
    served_service_tier(req.service_tier, RESPONSES_SERVICE_TIERS)
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

"""SGLang's ``X-Data-Parallel-Rank`` request header: a data-parallel rank pin sent as a header.

SGLang's OpenAI serving (``OpenAIServingBase.extract_routed_dp_rank_from_header``, read for
behaviour) reads it on its OpenAI generation routes (chat, completions, responses): the header,
matched case-insensitively as HTTP headers are, overrides the body's ``routed_dp_rank``; a value
that is not an integer is a 400 ``Invalid X-Data-Parallel-Rank header: must be an integer``; the
rank it names is then checked as the body's is (``[0, dp_size)``). vLLM's OpenAI server reads the
same header (``X-data-parallel-rank``) for the same purpose.

Here a single server is one rank (``dp_size`` 1: rank 0 is served, any other is a 400 in the body
field's words, :func:`sglang_v4.entrypoints.native_api.check_dp_rank`), and the ``--dp-size``
gateway (:mod:`sglang_v4.entrypoints.dp_gateway`) sends a pinned request straight to that replica.
This module imports nothing heavy: the gateway process uses it.
"""

from __future__ import annotations

__all__ = [
    "BODY_PIN_FIELDS",
    "DP_RANK_HEADER",
    "DP_RANK_HEADER_ROUTES",
    "GATEWAY_HEADER_PIN_ROUTES",
    "dp_rank_from_header",
    "header_overrides_body_pins",
]

#: The header's name (HTTP header names are case-insensitive).
DP_RANK_HEADER = "X-Data-Parallel-Rank"

#: The routes whose requests the header pins (SGLang's OpenAI generation routes).
DP_RANK_HEADER_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})

#: The routes the ``--dp-size`` gateway sends to the replica the header names: the OpenAI
#: generation routes, ``/generate`` (whose single-server handler reads the header too:
#: :func:`header_overrides_body_pins`) and Anthropic's ``/v1/messages`` (sgl-project/sglang#38729:
#: a pin ignored on a route is a 200 that lands on any rank, its prefix re-computed cold).
GATEWAY_HEADER_PIN_ROUTES = DP_RANK_HEADER_ROUTES | frozenset({"/generate", "/v1/messages"})

#: The body fields that pin a rank (SGLang's ``routed_dp_rank`` and its deprecated
#: ``data_parallel_rank``), the first one set winning.
BODY_PIN_FIELDS = ("routed_dp_rank", "data_parallel_rank")


def dp_rank_from_header(value: str | None, dp_size: int = 1) -> int | None:
    """The rank ``value`` (the header's text) pins, or ``None`` when the header is absent.

    The text is read as Python's ``int`` reads it, as SGLang reads it (surrounding spaces allowed).

    Args:
        value: the header's value, or ``None``.
        dp_size: the number of data-parallel ranks the request may go to (``>= 1``).

    Raises:
        ValueError: not an integer (SGLang's message), negative, or ``>= dp_size``; the message
            names the header.
    """
    if value is None:
        return None
    try:
        rank = int(value)
    except ValueError:
        raise ValueError(
            f"Invalid {DP_RANK_HEADER} header: must be an integer, got {value[:40]!r}."
        ) from None
    if rank < 0:
        raise ValueError(f"{DP_RANK_HEADER} header: the rank must be non-negative, got {rank}.")
    if rank >= dp_size:
        raise ValueError(
            f"{DP_RANK_HEADER} header: the rank must be less than dp_size: {dp_size}, got {rank}."
        )
    return rank


def header_overrides_body_pins(body: object, value: str | None, dp_size: int = 1) -> object:
    """``body`` as the rank check should see it when the header may be set: with the header
    (``value``, a valid rank), a JSON object's :data:`BODY_PIN_FIELDS` are dropped (the header
    overrides them, as on SGLang's OpenAI routes); without it, ``body`` unchanged.

    Raises:
        ValueError: the header is not a rank of ``dp_size`` (:func:`dp_rank_from_header`).
    """
    if dp_rank_from_header(value, dp_size) is None or not isinstance(body, dict):
        return body
    return {k: v for k, v in body.items() if k not in BODY_PIN_FIELDS}

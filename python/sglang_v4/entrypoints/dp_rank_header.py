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

__all__ = ["DP_RANK_HEADER", "DP_RANK_HEADER_ROUTES", "dp_rank_from_header"]

#: The header's name (HTTP header names are case-insensitive).
DP_RANK_HEADER = "X-Data-Parallel-Rank"

#: The routes whose requests the header pins (SGLang's OpenAI generation routes).
DP_RANK_HEADER_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})


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

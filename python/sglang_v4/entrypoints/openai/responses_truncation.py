"""``truncation: "auto"`` of ``POST /v1/responses``: a conversation longer than the context is
cut from its beginning until it fits, as OpenAI's API reference defines the value ("If the input
to this Response exceeds the model's context window size, the model will truncate the response to
fit the context window by dropping items from the beginning of the conversation").

The unit dropped is a whole turn of the conversation (chat messages: a stored conversation, then
the request's ``input``): everything from its first non-system message up to the next ``user``
message, so a tool call is never kept without its output nor an output without its call. System
messages (``developer`` / ``system`` input items; the request's ``instructions`` are not part of
the conversation and are always kept) stay where they are. The latest turn, from the last
``user`` message on, is never dropped: when it alone does not fit, the request is refused with the
context-length 400, as under ``truncation: "disabled"``.

A prompt fits when its tokens plus ``max_output_tokens`` (one token when unset: the room of the
first generated token) are at most the context length, the tokenizer manager's own rule. The
fewest turns that make it fit are found by bisection over the turn boundaries (the prompt shrinks
as turns go), so a long conversation is rendered and tokenized a logarithmic number of times.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["turn_starts", "without_turns_before", "is_context_overflow", "fit_to_context"]

T = TypeVar("T")

#: The sentence every context-length refusal of the tokenizer manager carries
#: (:func:`~sglang_v4.managers.control_struct.context_length_message`).
_CONTEXT_SENTENCE = "maximum context length is"


def turn_starts(conversation: Sequence[Mapping[str, Any]]) -> list[int]:
    """The indices in ``conversation`` (chat messages) where a later turn begins: every ``user``
    message after the first non-system one. Cutting before ``turn_starts(c)[j]`` drops ``j + 1``
    turns; an empty list means there is nothing to drop."""
    first = next((i for i, m in enumerate(conversation) if m.get("role") != "system"), None)
    if first is None:
        return []
    return [i for i, m in enumerate(conversation) if i > first and m.get("role") == "user"]


def without_turns_before(conversation: Sequence[Mapping[str, Any]], start: int) -> list[dict[str, Any]]:
    """``conversation`` without its non-system messages before index ``start`` (a turn start of
    :func:`turn_starts`); the system messages before it are kept, in order."""
    kept = [dict(m) for m in conversation[:start] if m.get("role") == "system"]
    return kept + [dict(m) for m in conversation[start:]]


def is_context_overflow(error: BaseException) -> bool:
    """Whether ``error`` is the tokenizer manager's refusal of a prompt that does not fit in the
    context (the prompt alone, or with ``max_new_tokens``), the one error truncation can cure."""
    return _CONTEXT_SENTENCE in str(getattr(error, "message", None) or error)


async def fit_to_context(
    conversation: Sequence[Mapping[str, Any]],
    measure: Callable[[list[dict[str, Any]]], Awaitable[tuple[T, list[int] | None]]],
    context_len: int | None,
    max_output_tokens: int | None,
) -> tuple[T, list[dict[str, Any]]]:
    """The prepared request of ``conversation`` with the fewest oldest turns dropped that makes its
    prompt fit in the context (module docstring).

    Args:
        conversation: the chat messages of the request (stored conversation + ``input``; without
            the ``instructions``, which ``measure`` adds).
        measure: prepares the request of a conversation: its result and its prompt token ids
            (``None`` when no tokenizer is loaded: nothing can be measured, nothing is dropped).
            It may raise the tokenizer manager's context-length error (:func:`is_context_overflow`).
        context_len: the model's context length in tokens (``None``: unknown, nothing is dropped).
        max_output_tokens: the request's ``max_output_tokens`` (``None``: one token of room).

    Returns:
        The prepared request and the conversation it was built from.

    Raises:
        Whatever ``measure`` raises other than a context overflow; a context overflow of the
        latest turn alone (nothing is left to drop), the same error as without truncation.
    """
    room = max_output_tokens if max_output_tokens is not None else 1

    async def attempt(kept: list[dict[str, Any]]) -> tuple[T, list[dict[str, Any]]] | None:
        """``measure(kept)`` with ``kept`` when its prompt fits, else ``None`` (a context-length
        error of ``measure`` counts as not fitting; any other is raised)."""
        try:
            result, ids = await measure(kept)
        except Exception as e:  # noqa: BLE001 - only the context overflow is caught, the rest re-raised
            if not is_context_overflow(e):
                raise
            return None
        if ids is None or context_len is None or len(ids) + room <= context_len:
            return result, kept
        return None

    full = [dict(m) for m in conversation]
    best = await attempt(full)
    if best is not None:
        return best
    starts = turn_starts(full)
    lo, hi = 0, len(starts) - 1  # bisection over how many turns go: the fewest that fit
    while lo <= hi:
        mid = (lo + hi) // 2
        got = await attempt(without_turns_before(full, starts[mid]))
        if got is not None:
            best, hi = got, mid - 1
        else:
            lo = mid + 1
    if best is not None:
        return best
    # nothing fits: the request of the shortest conversation, which the engine refuses as too long
    last = without_turns_before(full, starts[-1]) if starts else full
    result, _ = await measure(last)
    return result, last

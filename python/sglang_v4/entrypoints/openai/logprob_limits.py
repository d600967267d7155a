"""How many top logprobs per position the OpenAI routes give: vLLM's ``--max-logprobs`` rule.

vLLM bounds every request's top-token counts by its ``--max-logprobs`` (``ModelConfig.max_logprobs``,
default 20; ``-1`` stands for the vocabulary size): the sample logprobs (chat ``top_logprobs``,
completions ``logprobs``) and ``prompt_logprobs``, where a request's ``-1`` also means the whole
vocabulary. A count above the bound is a 400, in vLLM's words (its ``SamplingParams``' logprob
check): ``Requested sample logprobs of N, which is greater than max allowed: M`` (``prompt`` for
``prompt_logprobs``). OpenAI documents chat ``top_logprobs`` as 0..20 (its ``logprobs`` on
completions as at most 5), so the default bound is OpenAI's for chat; SGLang's OpenAI routes have
no such flag.

Below the bound, vLLM's request validators: chat ``top_logprobs`` is a count or ``-1`` (``"`top_logprobs`
must be a positive value or -1."``), and a count other than 0 needs ``logprobs: true``
(``"when using `top_logprobs`, `logprobs` must be set to true."``); completions ``logprobs`` is a
count or ``-1`` (``"`logprobs` must be a positive value or -1."``).

``/generate``'s ``top_logprobs_num`` is SGLang's field and keeps SGLang's bound (the vocabulary;
:mod:`sglang_v4.managers.tokenization`). A count above 20 (``--max-logprobs`` raised) also meets
the engine's bound on a request's logprob values (``SGLANG_V4_MAX_LOGPROB_ENTRIES``), whose 400
the routes re-word with their own field (:func:`logprob_volume_error`).
"""

from __future__ import annotations

from typing import Any

from sglang_v4.entrypoints.openai.request_errors import RequestError

__all__ = [
    "DEFAULT_MAX_LOGPROBS",
    "check_chat_top_logprobs",
    "check_completion_logprobs",
    "logprob_count",
    "logprob_volume_error",
    "logprob_volume_field",
    "max_logprobs_of",
]

#: vLLM's default ``--max-logprobs`` (and OpenAI's chat ``top_logprobs`` maximum).
DEFAULT_MAX_LOGPROBS = 20


def max_logprobs_of(args: Any, vocab_size: int | None) -> int:
    """The bound of the server arguments ``args`` (``max_logprobs``, :data:`DEFAULT_MAX_LOGPROBS`
    when absent): ``-1`` resolved to ``vocab_size`` (unbounded when the vocabulary is unknown)."""
    bound = getattr(args, "max_logprobs", DEFAULT_MAX_LOGPROBS)
    if bound is None:
        bound = DEFAULT_MAX_LOGPROBS
    if bound == -1:
        return vocab_size if vocab_size is not None else 2**31 - 1
    return int(bound)


def logprob_count(value: int, field: str, kind: str, max_logprobs: int, vocab_size: int | None) -> int:
    """The top-token count a request's ``value`` (``-1``: the vocabulary) asks for, checked
    against the bound.

    Args:
        value: the request's count (at least -1; the callers check the lower end).
        field: the request field (the error's ``param``).
        kind: ``"sample"`` or ``"prompt"`` (vLLM's message).
        max_logprobs: the bound (:func:`max_logprobs_of`).
        vocab_size: the vocabulary size (what ``-1`` stands for), ``None`` when unknown.

    Raises:
        RequestError: 400 naming ``field`` when the count is above ``max_logprobs``.
    """
    count = value if value != -1 else (vocab_size if vocab_size is not None else max_logprobs + 1)
    if count > max_logprobs:
        raise RequestError(
            f"Requested {kind} logprobs of {count}, which is greater than max allowed: {max_logprobs}",
            param=field,
        )
    return count


def check_chat_top_logprobs(
    top_logprobs: int | None, logprobs: bool | None, max_logprobs: int, vocab_size: int | None
) -> int:
    """The ``top_logprobs_num`` of a chat request (``0`` when ``top_logprobs`` is unset).

    Raises:
        RequestError: 400 naming ``top_logprobs``: below -1, a count other than 0 without
            ``logprobs: true``, or above the bound (module docstring).
    """
    if top_logprobs is None:
        return 0
    if top_logprobs < -1:
        raise RequestError(
            f"`top_logprobs` must be a positive value or -1 (got {top_logprobs}).", param="top_logprobs"
        )
    if top_logprobs != 0 and not logprobs:
        raise RequestError("when using `top_logprobs`, `logprobs` must be set to true.", param="top_logprobs")
    return logprob_count(top_logprobs, "top_logprobs", "sample", max_logprobs, vocab_size)


def check_completion_logprobs(logprobs: int | None, max_logprobs: int, vocab_size: int | None) -> int | None:
    """The ``top_logprobs_num`` of a completions request's ``logprobs`` (``None`` when unset):
    the count itself, or the vocabulary size for ``-1`` ("every token", as vLLM reads it on this
    field since vllm-project/vllm#46175, like chat's ``top_logprobs`` and ``prompt_logprobs``).

    Raises:
        RequestError: 400 naming ``logprobs``: below -1, or above the bound (module docstring;
            ``-1`` passes only where ``--max-logprobs`` is ``-1`` or at least the vocabulary).
    """
    if logprobs is None:
        return None
    if logprobs < -1:
        raise RequestError(f"`logprobs` must be a positive value or -1 (got {logprobs}).", param="logprobs")
    return logprob_count(logprobs, "logprobs", "sample", max_logprobs, vocab_size)


def logprob_volume_field(sample_field: str, sample_count: int | None, prompt_count: int | None) -> str:
    """The request field that set the engine's top count (the larger of the output's and
    ``prompt_logprobs``', :func:`~.prompt_logprobs.prompt_logprobs_engine_fields`): ``sample_field``
    (chat ``top_logprobs``, completions ``logprobs``; its count ``sample_count``) unless
    ``prompt_count`` is larger, then ``prompt_logprobs``."""
    return "prompt_logprobs" if (prompt_count or 0) > (sample_count or 0) else sample_field


def logprob_volume_error(e: Any, field: str) -> RequestError:
    """The OpenAI route's 400 for the engine's logprob-volume refusal ``e``
    (:class:`sglang_v4.managers.tokenization.LogprobVolumeError`: ``total`` values asked for,
    ``limit`` served), naming the route's ``field`` in the message and ``param`` instead of
    ``/generate``'s ``top_logprobs_num``."""
    from sglang_v4.managers.tokenization import MAX_LOGPROB_ENTRIES_ENV

    return RequestError(
        f"{field}: the request asks for up to {e.total} logprob values (1 + {field} per output "
        "position, and per prompt position with prompt_logprobs, over every choice and prompt); at "
        f"most {e.limit} are served ({MAX_LOGPROB_ENTRIES_ENV}). Reduce {field}, the token limit, "
        "n or the number of prompts.",
        param=field,
    )

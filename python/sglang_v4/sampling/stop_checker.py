"""Finish checks for one request after each generated token, with SGLang 0.5.x semantics.

Re-derived from SGLang's ``Req.update_finish_state`` (``srt/managers/schedule_batch.py``) and
``DetokenizerManager.trim_matched_stop``. Order of checks: stop tokens (EOS, ``stop_token_ids``)
first, as SGLang's ``Req.check_finished`` and vLLM's stop checker do, so a stop token is reported
as itself even when the text of a special token (EOS is ``<｜end▁of▁sentence｜>``) holds a stop
string; then stop strings / stop regex; then the length limit (vLLM's order: a stop on the last
allowed token is a stop, not a length finish).

Finish-reason dicts (SGLang's ``to_json`` shapes):
    ``{"type": "stop", "matched": <int token id>}``  EOS or a ``stop_token_ids`` entry;
    ``{"type": "stop", "matched": "<stop string or regex>"}``;
    ``{"type": "length", "length": <int>}``;
    ``{"type": "abort", ...}``  a ``stop_regex`` whose search ran past its time bound.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from sglang_v4.managers.io_struct import finish_abort
from sglang_v4.sampling.sampling_params import SamplingParams

__all__ = [
    "check_stop",
    "stop_holdback",
    "stop_regex_window",
    "stop_text_start",
    "trim_matched_stop",
    "STOP_REGEX_TIMEOUT_S",
    "STOP_TAIL_EXTRA_TOKENS",
]

STOP_TAIL_EXTRA_TOKENS = 2
"""Tokens decoded beyond ``stop_str_max_len`` so a stop string straddling token boundaries (and
multi-byte characters split across byte-level tokens) is still seen whole."""

STOP_REGEX_TIMEOUT_S = 0.25
"""Seconds one ``stop_regex`` search of one step may take (the ``regex`` engine's ``timeout``). A
pattern that backtracks catastrophically on the output (``((a )+)+c`` on ``"a a a ..."``) would
otherwise hold the scheduler loop, and every request in it, for hours (sgl-project/sglang#28203);
past the bound the request ends with a 400 abort naming the pattern, the others go on."""

#: Characters a regex may match beyond which it counts as unbounded (the whole output is searched).
_UNBOUNDED_CHARS = 1 << 16


@functools.lru_cache(maxsize=1024)
def stop_regex_window(pattern: str) -> int | None:
    """Output tokens a match of ``pattern`` can span (at most), or ``None`` when unbounded.

    From the longest text the pattern can match (``re``'s parser: ``getwidth()``, in characters):
    a character is at most 4 UTF-8 bytes and every token covers at least one byte, so ``4 *
    width`` tokens hold any match; a pattern without such a bound (``X[^Z]*Z``, ``.+``) is searched
    in the whole output, as SGLang sizes its stop-regex tail (``get_max_seq_length``). The window
    used to be a fixed 64 tokens: a match longer than that was never seen.
    """
    try:
        width = re._parser.parse(pattern).getwidth()[1]  # type: ignore[attr-defined]
    except (re.error, OverflowError, RecursionError, AttributeError):
        return None
    return None if width >= _UNBOUNDED_CHARS else 4 * int(width)


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    """``pattern`` compiled by the ``regex`` engine (it bounds a search's time; ``re`` cannot), or
    by ``re`` where ``regex`` is missing or reads the pattern otherwise."""
    try:
        import regex

        return regex.compile(pattern, flags=regex.V0)
    except Exception:  # noqa: BLE001 - no regex module, or a pattern only ``re`` accepts
        return re.compile(pattern)


def _regex_search(pattern: str, text: str) -> bool | None:
    """Whether ``pattern`` matches in ``text``; ``None`` when the search ran past
    :data:`STOP_REGEX_TIMEOUT_S`."""
    compiled = _compiled(pattern)
    if isinstance(compiled, re.Pattern):
        return compiled.search(text) is not None
    try:
        return compiled.search(text, timeout=STOP_REGEX_TIMEOUT_S) is not None
    except TimeoutError:
        return None


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids))


def stop_text_start(output_ids: Sequence[int], params: SamplingParams) -> int:
    """Index of the first output token that stop strings / regexes may match in.

    ``0`` without ``params.stop_str_after_token_id``; with it, the index right after the first
    occurrence of that token in ``output_ids``, or ``-1`` while it has not occurred (stop strings
    dormant). The scheduler keeps this per request and updates it token by token (O(1) a step);
    this function computes it from scratch (O(output length)).
    """
    t = params.stop_str_after_token_id
    if t is None:
        return 0
    for i, tok in enumerate(output_ids):
        if tok == t:
            return i + 1
    return -1


def check_stop(
    output_ids: Sequence[int],
    params: SamplingParams,
    eos_token_ids: set[int] | frozenset[int] | Sequence[int] | None,
    tokenizer: Any,
    max_new_tokens_reached: bool,
    text_start: int = 0,
) -> dict[str, Any] | None:
    """Decide whether a request is finished after its latest token.

    Args:
        output_ids: all generated token ids so far (the last one is the new token).
        params: the request's sampling parameters (normalized or not; stop strings are read from
            ``stop_strs``/``stop``).
        eos_token_ids: the model's EOS ids (ignored when ``params.ignore_eos``).
        tokenizer: object with ``decode(list[int]) -> str`` (needed only with stop strings / regex).
        max_new_tokens_reached: the caller's length verdict (``len(output_ids) >= max_new_tokens``
            or the context is full).
        text_start: stop strings / regexes match only in the text of ``output_ids[text_start:]``;
            ``-1``: not at all yet (see :func:`stop_text_start`, ``stop_str_after_token_id``).
            ``params.min_new_tokens`` (vLLM's ``min_tokens`` rule for stop strings, which the
            OpenAI route's ``min_tokens`` follows): a stop string lying wholly in the text of the
            first ``min_new_tokens`` tokens does not end the request, one that ends after that
            text does, even where it begins inside it (vLLM searches the new text together with
            the ``len(stop) - 1`` characters before it); a stop regex matches only in the text
            after the first ``min_new_tokens`` tokens.

    Returns:
        A finish-reason dict (see module docstring) or ``None`` when generation continues; an
        abort (``{"type": "abort", "message", "status_code": 400, "err_type": None}``, the shape
        of ``io_struct.finish_abort``) when a ``stop_regex`` search ran past
        :data:`STOP_REGEX_TIMEOUT_S`. Stop strings are searched in the last ``stop_str_max_len``
        tokens, stop regexes in the last :func:`stop_regex_window` tokens (the whole output for an
        unbounded pattern), each plus :data:`STOP_TAIL_EXTRA_TOKENS`.
        Token stops are suppressed while ``len(output_ids) < min_new_tokens`` (the sampler also
        masks those tokens then). As in SGLang 0.5.x, ``ignore_eos`` disables all token-based stops
        (EOS and ``stop_token_ids``); stop strings still apply.

    Raises:
        ValueError: stop strings are set but ``tokenizer`` is ``None``.
    """
    if not output_ids:
        return {"type": "length", "length": 0} if max_new_tokens_reached else None
    stops = params.stop_strs if params.stop_strs is not None else params.stop
    if isinstance(stops, str):
        stops = [stops]
    regs = params.stop_regex_strs if params.stop_regex_strs is not None else params.stop_regex
    if isinstance(regs, str):
        regs = [regs]
    last = int(output_ids[-1])
    if not params.ignore_eos and len(output_ids) >= params.min_new_tokens:
        if params.stop_token_ids and last in params.stop_token_ids:
            return {"type": "stop", "matched": last}
        if eos_token_ids and last in eos_token_ids:
            return {"type": "stop", "matched": last}

    head = params.min_new_tokens  # stop strings must end after the text of these tokens
    if (stops or regs) and 0 <= text_start < len(output_ids) and head < len(output_ids):
        if tokenizer is None:
            raise ValueError("stop: stop strings need a tokenizer to decode the output")
        max_len = params.stop_str_max_len
        if not params.is_normalized or max_len <= 0:
            # Not normalized: bound the window by UTF-8 bytes (every token covers at least one
            # byte of the stop string in the worst case, SamplingParams.normalize).
            max_len = max((len(s.encode("utf-8", errors="surrogatepass")) for s in (stops or [])), default=0)
        windows = [stop_regex_window(r) for r in regs or []]
        if any(w is None for w in windows):
            max_len = len(output_ids)  # an unbounded pattern reads the whole output
        else:
            max_len = max([max_len, *windows])  # type: ignore[list-item]
        window = max_len + STOP_TAIL_EXTRA_TOKENS
        first = max(text_start, len(output_ids) - window)  # the stop strings' window
        tail = _decode(tokenizer, output_ids[first:])
        # characters of the window inside the text of the first min_new_tokens tokens; a
        # character those tokens only begin (U+FFFD, bytes still missing) is text of the tokens
        # that complete it, as an incremental detokenizer emits it
        boundary = len(_decode(tokenizer, output_ids[first:head]).rstrip("\ufffd")) if first < head else 0
        hit = _earliest_stop(tail, stops or [], boundary)
        if hit is not None:
            return {"type": "stop", "matched": hit}
        if regs and first < head:  # regexes match only after the first min_new_tokens tokens
            tail = _decode(tokenizer, output_ids[max(text_start, head, len(output_ids) - window) :])
        for r in regs or []:
            found = _regex_search(r, tail)
            if found is None:
                return finish_abort(
                    f"stop_regex {r!r} took longer than {STOP_REGEX_TIMEOUT_S} s to match "
                    "the output (catastrophic backtracking); the request was stopped.",
                    400,
                )
            if found:
                return {"type": "stop", "matched": r}

    if max_new_tokens_reached:
        return {"type": "length", "length": len(output_ids)}
    return None


def _earliest_stop(text: str, stops: Sequence[str], boundary: int = 0) -> str | None:
    """The stop string of ``stops`` whose first occurrence in ``text`` ending after character
    ``boundary`` ends first (ties: the earlier in ``stops``), or ``None`` when none occurs.

    One new token can complete several stop strings at once (``" there"`` with ``stop:
    ["re", "he"]``); the text generated character by character would have met the one that
    ends first, so that is the match, whatever the list order (vLLM's ``check_stop_strings``
    since vllm-project/vllm#49391; ai-dynamo/dynamo#14848). Taking the first listed one left the
    earlier stop string in the answer.
    """
    best: str | None = None
    best_end = -1
    for s in stops:
        if not s:
            continue
        pos = text.find(s, max(0, boundary - len(s) + 1))
        if pos >= 0 and (best is None or pos + len(s) < best_end):
            best, best_end = s, pos + len(s)
    return best


def trim_matched_stop(
    output: str | list[int], finish_reason: dict[str, Any] | None, no_stop_trim: bool, start: int = 0
) -> Any:
    """Remove the matched stop from the final output, as SGLang's detokenizer does.

    Args:
        output: decoded text (for a string match) or the output id list (for a token match).
        finish_reason: a dict from :func:`check_stop` (or ``None``).
        no_stop_trim: keep the stop string / token.
        start: the text offset where stop strings could match (after the text of the
            ``stop_str_after_token_id`` token); earlier occurrences are not the match.

    Returns:
        Text cut before the first occurrence at or after ``start`` of the matched stop string (through its end with
        ``no_stop_trim``), or the id list without its final (matched) token; anything else unchanged.
    """
    if not finish_reason:
        return output
    matched = finish_reason.get("matched")
    if matched is None:
        return output
    if isinstance(matched, str) and isinstance(output, str):
        pos = output.find(matched, start)
        if pos < 0:
            return output
        return output[: pos + len(matched)] if no_stop_trim else output[:pos]
    if isinstance(matched, int) and isinstance(output, list):
        if no_stop_trim or not output:
            return output
        return output[:-1]
    return output


def stop_holdback(text: str, stops: list[str]) -> str:
    """``text`` minus its longest suffix that is a proper prefix of one of ``stops``.

    Example: ``stop_holdback("Hello wo", ["world"]) == "Hello "``.
    """
    cut = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), cut, -1):
            if text.endswith(s[:k]):
                cut = k
                break
    return text[: len(text) - cut] if cut else text

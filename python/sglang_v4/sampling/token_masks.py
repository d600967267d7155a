"""Vocabulary constraints of a request: vLLM's ``allowed_token_ids`` and ``bad_words``.

Both are fields of :class:`~sglang_v4.sampling.sampling_params.SamplingParams`
(``allowed_token_ids``, and ``bad_words_ids``: the bad words as token sequences, made by
:func:`bad_word_token_ids` on the OpenAI routes) and are applied by
:func:`~sglang_v4.sampling.sampler.apply_penalties` after the penalties and ``logit_bias``, with
vLLM's meaning (its ``SamplingParams`` / ``v1/sample/ops/bad_words.py``, re-derived):

* ``allowed_token_ids``: every token not in the list gets ``-inf`` (nothing can bring it back);
* a bad word is banned as each of its token sequences: the word with its leading whitespace
  dropped, and the same text after one space (how a tokenizer with a space prefix writes it in
  the middle of a text). A sequence's last token gets ``-inf`` when its other tokens are the
  last tokens generated (the prompt does not count), so a one-token word is never generated;
* the allowlist is the hard constraint: where the bans or the ``min_new_tokens`` mask would leave
  no allowed token, the row keeps the allowlist alone (:func:`restore_dead_rows`). A request
  whose one-token bad words cover the whole allowlist cannot generate anything and is refused
  up front (:func:`check_token_constraints`; vllm-project/vllm#57986 emitted token 0 there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a mask is applied: the checks run without it
    import torch

__all__ = [
    "apply_allowed_token_ids",
    "apply_bad_words",
    "bad_word_token_ids",
    "banned_next_tokens",
    "check_token_constraints",
    "normalize_token_lists",
    "restore_dead_rows",
]


def _int_list(name: str, value: Any) -> list[int]:
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{name} must be a list of integers, got {value!r}.")
    out = []
    for t in value:
        if isinstance(t, bool) or not isinstance(t, int):
            raise ValueError(f"{name} must be a list of integers, got {t!r} in it.")
        out.append(int(t))
    return out


def normalize_token_lists(
    allowed: Any, bad_words_ids: Any
) -> tuple[list[int] | None, list[list[int]] | None]:
    """Type-checked ``(allowed_token_ids, bad_words_ids)``: a list of ints and a list of non-empty
    lists of ints, each ``None`` when unset (``bad_words_ids``: also when ``[]``, no word banned).

    Raises:
        ValueError: a value of another type, an empty token sequence, or an empty allowlist
            (``allowed_token_ids: []`` would leave no token to generate; vLLM refuses it too); the
            message names the field.
    """
    allowed_out = _int_list("allowed_token_ids", allowed) if allowed is not None else []
    if allowed is not None and not allowed_out:
        raise ValueError(
            "allowed_token_ids must not be empty: it would leave no token to generate "
            "(leave the field out for no constraint)."
        )
    bad_out: list[list[int]] = []
    if bad_words_ids is not None:
        if isinstance(bad_words_ids, (str, bytes, dict)) or not isinstance(bad_words_ids, (list, tuple)):
            raise ValueError(f"bad_words_ids must be a list of token id lists, got {bad_words_ids!r}.")
        for seq in bad_words_ids:
            ids = _int_list("bad_words_ids", seq)
            if not ids:
                raise ValueError("bad_words_ids must not contain an empty token list.")
            bad_out.append(ids)
    return allowed_out or None, bad_out or None


def check_token_constraints(
    allowed: Sequence[int] | None, bad_words_ids: Sequence[Sequence[int]] | None, vocab_size: int | None
) -> None:
    """Range checks of the two constraints (``vocab_size``: the model's vocabulary, when known).

    Raises:
        ValueError: an id outside ``[0, vocab_size)`` (naming ``allowed_token_ids`` or
            ``bad_words_ids``), or one-token bad words that ban every allowed token (naming
            ``bad_words_ids``: such a request could generate nothing).
    """
    hi = "" if vocab_size is None else f", {vocab_size - 1}"
    for name, ids in (
        ("allowed_token_ids", list(allowed or ())),
        ("bad_words_ids", [t for seq in bad_words_ids or () for t in seq]),
    ):
        for t in ids:
            if t < 0 or (vocab_size is not None and t >= vocab_size):
                raise ValueError(f"{name} must be token ids in [0{hi}], got {t}.")
    if allowed and bad_words_ids:
        single = {seq[0] for seq in bad_words_ids if len(seq) == 1}
        if set(allowed) <= single:
            raise ValueError(
                "bad_words_ids ban every token of allowed_token_ids: the request could generate nothing."
            )


def bad_word_token_ids(tokenizer: Any, words: Sequence[str]) -> list[list[int]]:
    """The token sequences that ban ``words`` (vLLM's ``SamplingParams`` rule): for each word, the
    encoding (no special tokens added) of the word with its leading whitespace dropped, and the
    encoding of the same text after one space only when that is a new word token: the same number
    of tokens with a different first token. Empty and repeated sequences are left out.

    Args:
        tokenizer: a ``transformers`` tokenizer (``encode(text, add_special_tokens=False)``).
        words: the ``bad_words`` strings.

    Raises:
        ValueError: a word that is not a string, or ``""``.
    """
    out: list[list[int]] = []
    for word in words:
        if not isinstance(word, str):
            raise ValueError(f"bad_words must be a list of strings, got {word!r} in it.")
        if not word:
            raise ValueError("bad_words must not contain an empty string.")
        stripped = word.lstrip()
        plain = [int(t) for t in tokenizer.encode(stripped, add_special_tokens=False)] if stripped else []
        spaced = [int(t) for t in tokenizer.encode(" " + stripped, add_special_tokens=False)]
        forms = [plain]
        if plain and spaced and spaced[0] != plain[0] and len(spaced) == len(plain):
            forms.append(spaced)
        elif not plain:
            forms = [spaced]
        for ids in forms:
            if ids and ids not in out:
                out.append(ids)
    return out


def banned_next_tokens(bad_words_ids: Sequence[Sequence[int]], output_ids: Sequence[int]) -> list[int]:
    """The tokens ``bad_words_ids`` ban as the next token after ``output_ids`` (the generated
    tokens so far): the last token of each sequence whose other tokens end ``output_ids``."""
    banned = []
    n = len(output_ids)
    for seq in bad_words_ids:
        k = len(seq) - 1
        if k > n:
            continue
        if k == 0 or list(output_ids[n - k :]) == list(seq[:k]):
            banned.append(seq[-1])
    return banned


def apply_allowed_token_ids(logits: torch.Tensor, params: Sequence[Any]) -> list[int]:
    """Set every token outside a row's ``allowed_token_ids`` to ``-inf`` (``logits``: ``[B, V]``
    float, modified in place). Returns the rows that have an allowlist."""
    import torch

    rows = [i for i, p in enumerate(params) if getattr(p, "allowed_token_ids", None)]
    for i in rows:
        keep = torch.as_tensor(params[i].allowed_token_ids, dtype=torch.long, device=logits.device)
        kept = logits[i].index_select(0, keep)
        logits[i].fill_(float("-inf"))
        logits[i].index_copy_(0, keep, kept)
    return rows


def apply_bad_words(logits: torch.Tensor, params: Sequence[Any], output_ids: Sequence[Sequence[int]]) -> None:
    """Ban each row's bad words (:func:`banned_next_tokens`) with ``-inf`` in ``logits``
    (``[B, V]`` float, modified in place). ``output_ids[i]``: row ``i``'s generated tokens (read
    only for its sequences of two or more tokens)."""
    import torch

    for i, p in enumerate(params):
        seqs = getattr(p, "bad_words_ids", None)
        if not seqs:
            continue
        banned = banned_next_tokens(seqs, output_ids[i])
        if banned:
            idx = torch.as_tensor(sorted(set(banned)), dtype=torch.long, device=logits.device)
            logits[i].index_fill_(0, idx, float("-inf"))


def restore_dead_rows(logits: torch.Tensor, kept: dict[int, torch.Tensor]) -> None:
    """Give back ``kept[i]`` (the row with only its allowlist applied) to each row ``i`` whose
    every logit is ``-inf`` (the bans and the ``min_new_tokens`` mask covered its allowlist)."""
    import torch

    if not kept:
        return
    rows = list(kept)
    idx = torch.as_tensor(rows, dtype=torch.long, device=logits.device)
    alive = torch.isfinite(logits.index_select(0, idx)).any(dim=-1).tolist()
    for i, ok in zip(rows, alive):
        if not ok:
            logits[i].copy_(kept[i])

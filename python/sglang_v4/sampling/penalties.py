"""Penalties and vocabulary constraints on next-token logits (step 1 of the pipeline of
:mod:`sglang_v4.sampling.sampler`; SGLang's ``srt/sampling/penaltylib``, re-derived).

On the raw logits ``z`` (float32, ``[B, V]``), in this order:

* repetition (CTRL, Keskar et al. 2019, Sec. 4.1): for every token present in prompt+output,
  ``z = z / r`` if ``z > 0`` else ``z * r``;
* frequency / presence (OpenAI API definition): ``z -= f * count_out(t) + p * [count_out(t) > 0]``,
  counts over *output* tokens only;
* ``logit_bias``: ``z[t] += bias[t]`` (one bias per token id: of keys naming the same id, the
  last one's);
* ``allowed_token_ids`` / ``bad_words_ids`` (vLLM's): ``-inf`` outside the allowlist and on each
  banned next token (:mod:`sglang_v4.sampling.token_masks`);
* min_new_tokens: while ``len(output) < min_new_tokens`` the EOS ids and ``stop_token_ids`` get
  ``-inf``.

Penalty work is O(tokens in the histories), done sparsely; the id lists are flattened on the host
each step. A :class:`PenaltyCache` keeps per-request counts on the device instead.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.token_masks import apply_allowed_token_ids, apply_bad_words, restore_dead_rows

__all__ = ["PenaltyCache", "apply_penalties", "device_tensor"]


def device_tensor(values: Sequence[Any], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.tensor(values, dtype=dtype)`` on ``device`` (a 1-D tensor of ``len(values)``
    entries for a flat ``values``). On CUDA the host copy is pinned and
    the upload asynchronous: a plain host-to-device copy synchronises the stream, which would make
    the model worker wait for the forward instead of queueing the sampling behind it."""
    t = torch.tensor(values, dtype=dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t if device.type == "cpu" else t.to(device)


def _unique_counts(
    rows: list[int], ids: Sequence[Sequence[int]], vocab: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct flat keys ``row * vocab + token`` (int64, on ``device``) of ``ids[r]`` for ``r`` in
    ``rows``, with their occurrence counts (int64). The id lists are flattened on the host; the
    de-duplication runs on ``device``."""
    lengths = [len(ids[r]) for r in rows]
    total = sum(lengths)
    if total == 0:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return empty, empty
    flat = torch.from_numpy(np.fromiter(itertools.chain.from_iterable(ids[r] for r in rows), np.int64, total))
    row_idx = torch.from_numpy(np.repeat(np.asarray(rows, dtype=np.int64), lengths))
    keys = (row_idx * vocab + flat).to(device, non_blocking=True)
    return torch.unique(keys, return_counts=True)


@dataclasses.dataclass
class _PenaltyEntry:
    vocab: int
    device: torch.device
    n_prompt: int
    n_out: int
    prompt_present: torch.Tensor  # [V] bool
    out_counts: torch.Tensor  # [V] float32


class PenaltyCache:
    """Per-request token statistics kept on the device between decode steps (optional).

    Without it, :func:`apply_penalties` re-reads every request's whole prompt/output id lists each
    step (host cost linear in the history length). With it, each request keeps a dense
    ``[V]`` output-count vector and a ``[V]`` prompt-presence mask (about 0.65 MB per request at
    V = 129k) updated with only the new tokens; the penalties are then dense ops on ``[R, V]``.
    Call :meth:`release` when a request finishes or is aborted. A request whose output list got
    shorter (retraction) or whose prompt length changed is rebuilt from scratch.
    """

    def __init__(self) -> None:
        """An empty cache; entries are made by :meth:`rows` on a request's first use."""
        self._entries: dict[Any, _PenaltyEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def release(self, rid: Any) -> None:
        """Forget a request (no error if unknown)."""
        self._entries.pop(rid, None)

    def clear(self) -> None:
        """Forget all requests."""
        self._entries.clear()

    def _entry(
        self, rid: Any, prompt: Sequence[int], output: Sequence[int], vocab: int, device: torch.device
    ) -> _PenaltyEntry:
        e = self._entries.get(rid)
        if (
            e is None
            or e.vocab != vocab
            or e.device != device
            or e.n_prompt != len(prompt)
            or len(output) < e.n_out
        ):
            present = torch.zeros(vocab, dtype=torch.bool, device=device)
            if len(prompt):
                present[torch.as_tensor(list(prompt), dtype=torch.long, device=device)] = True
            e = _PenaltyEntry(vocab, device, len(prompt), 0, present, torch.zeros(vocab, device=device))
            self._entries[rid] = e
        if len(output) > e.n_out:
            new = torch.as_tensor(list(output[e.n_out :]), dtype=torch.long, device=device)
            e.out_counts.index_add_(0, new, torch.ones(new.numel(), device=device))
            e.n_out = len(output)
        return e

    def rows(
        self,
        rids: Sequence[Any],
        prompt_ids: Sequence[Sequence[int]] | None,
        output_ids: Sequence[Sequence[int]],
        vocab: int,
        device: torch.device,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The penalty statistics of ``R = len(rids)`` requests, updated with their new tokens.

        Args:
            rids: request ids (any hashable), the cache keys.
            prompt_ids: ``R`` prompt token-id lists (``None``: no prompt presence, all False).
            output_ids: ``R`` output token-id lists; only the ids past the cached count are added.
            vocab: ``V``, the logits' last dim; every id must be in ``[0, V)``.
            device: where the rows live (an entry kept on another device is rebuilt).

        Returns:
            ``(out_counts [R, V] float32, prompt_present [R, V] bool)``: occurrences of each token
            in the output, and whether it occurs in the prompt (the inputs of the repetition /
            frequency / presence formulas of the module docstring).

        Raises:
            IndexError / RuntimeError: an id outside ``[0, V)`` (torch's indexing error; a
                request's prompt ids past the vocabulary are refused at admission).
        """
        entries = [
            self._entry(rid, prompt_ids[j] if prompt_ids is not None else (), output_ids[j], vocab, device)
            for j, rid in enumerate(rids)
        ]
        return torch.stack([e.out_counts for e in entries]), torch.stack([e.prompt_present for e in entries])


def apply_penalties(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    output_ids: Sequence[Sequence[int]],
    prompt_ids: Sequence[Sequence[int]] | None = None,
    eos_token_ids: Iterable[int] | None = None,
    penalty_cache: PenaltyCache | None = None,
    rids: Sequence[Any] | None = None,
    output_lens: Sequence[int] | None = None,
) -> torch.Tensor:
    """Apply repetition / frequency / presence penalties, logit_bias, the vocabulary constraints
    (``allowed_token_ids``, ``bad_words_ids``) and the min_new_tokens mask.

    Args:
        logits: ``[B, V]`` float32 raw next-token logits; modified in place and returned.
        params: ``B`` sampling parameters.
        output_ids: ``B`` lists of already generated token ids (penalties, bad words of two or
            more tokens).
        prompt_ids: ``B`` lists of prompt token ids (for the repetition penalty); ``None`` = output
            tokens only.
        eos_token_ids: EOS ids masked (with each row's ``stop_token_ids``) before ``min_new_tokens``.
        penalty_cache: optional :class:`PenaltyCache` (with ``rids``) to keep token statistics on
            the device between steps; results are identical to the uncached path.
        rids: ``B`` request ids (keys of ``penalty_cache``).
        output_lens: ``B`` numbers of generated tokens (``min_new_tokens``); default
            ``len(output_ids[i])``. Lets a caller pass ``()`` as the history of rows without
            penalties while their earlier tokens are still being sampled on the device.

    Returns:
        ``logits`` (same tensor).

    Raises:
        ValueError: length mismatch between ``logits`` rows and ``params`` / ``output_ids``.
    """
    bsz, vocab = logits.shape
    if len(params) != bsz or len(output_ids) != bsz:
        raise ValueError(
            f"batch mismatch: logits has {bsz} rows, params {len(params)}, output_ids {len(output_ids)}"
        )
    if prompt_ids is not None and len(prompt_ids) != bsz:
        raise ValueError(f"batch mismatch: logits has {bsz} rows, prompt_ids {len(prompt_ids)}")
    if output_lens is not None and len(output_lens) != bsz:
        raise ValueError(f"batch mismatch: logits has {bsz} rows, output_lens {len(output_lens)}")
    dev = logits.device

    work = logits if logits.is_contiguous() else logits.contiguous()
    flat_logits = work.view(-1)
    rep_rows = [i for i, p in enumerate(params) if p.repetition_penalty != 1.0]
    fp_rows = [i for i, p in enumerate(params) if p.frequency_penalty != 0.0 or p.presence_penalty != 0.0]
    if penalty_cache is not None and (rep_rows or fp_rows):
        if rids is None or len(rids) != bsz:
            raise ValueError("penalty_cache needs one request id per row (rids)")
        rows = sorted(set(rep_rows) | set(fp_rows))
        ridx = device_tensor(rows, torch.long, dev)
        counts, present_prompt = penalty_cache.rows(
            [rids[i] for i in rows],
            None if prompt_ids is None else [prompt_ids[i] for i in rows],
            [output_ids[i] for i in rows],
            vocab,
            dev,
        )
        sub = work.index_select(0, ridx).to(torch.float32)
        col = lambda xs: device_tensor(xs, torch.float32, dev).unsqueeze(1)  # noqa: E731
        r = col([params[i].repetition_penalty for i in rows])
        present = (counts > 0) | present_prompt
        sub = torch.where(present, torch.where(sub > 0, sub / r, sub * r), sub)
        f = col([params[i].frequency_penalty for i in rows])
        pp = col([params[i].presence_penalty for i in rows])
        sub = sub - (f * counts + pp * (counts > 0).to(torch.float32))
        work.index_copy_(0, ridx, sub.to(work.dtype))
        rep_rows, fp_rows = [], []
    if rep_rows:
        keys, _ = _unique_counts(rep_rows, output_ids, vocab, dev)
        if prompt_ids is not None:
            pkeys, _ = _unique_counts(rep_rows, prompt_ids, vocab, dev)
            keys = torch.unique(torch.cat([keys, pkeys]))
        if keys.numel():
            r_all = device_tensor([p.repetition_penalty for p in params], torch.float32, dev)
            r = r_all[keys // vocab]
            z = flat_logits.index_select(0, keys)  # index_select/index_copy_: far faster than [] on CPU
            flat_logits.index_copy_(0, keys, torch.where(z > 0, z / r, z * r).to(flat_logits.dtype))

    if fp_rows:
        keys, counts = _unique_counts(fp_rows, output_ids, vocab, dev)
        if keys.numel():
            f_all = device_tensor([p.frequency_penalty for p in params], torch.float32, dev)
            p_all = device_tensor([p.presence_penalty for p in params], torch.float32, dev)
            rows_of = keys // vocab
            delta = f_all[rows_of] * counts.to(torch.float32) + p_all[rows_of]
            flat_logits.index_add_(0, keys, -delta.to(flat_logits.dtype))

    if work is not logits:
        logits.copy_(work)

    for i, p in enumerate(params):
        if p.logit_bias:
            # one bias per token id: keys naming one id ("5", "05", 5) keep the last value, as
            # SGLang (its dict keyed by int(key)) and vLLM ({int(token): bias}) read the object
            bias = {int(k): float(v) for k, v in p.logit_bias.items()}
            idx = device_tensor(list(bias), torch.long, dev)
            val = device_tensor(list(bias.values()), logits.dtype, dev)
            logits[i].index_add_(0, idx, val)

    # vLLM's vocabulary constraints (token_masks.py); the allowlist wins where the bad-word bans
    # or the min_new_tokens mask below would leave none of its tokens
    allow_rows = apply_allowed_token_ids(logits, params)
    kept = {
        i: logits[i].clone() for i in allow_rows if params[i].bad_words_ids or params[i].min_new_tokens > 0
    }
    apply_bad_words(logits, params, output_ids)

    eos = set(eos_token_ids or ())
    mask_rows: list[int] = []
    mask_ids: list[int] = []
    for i, p in enumerate(params):
        n_out = output_lens[i] if output_lens is not None else len(output_ids[i])
        if p.min_new_tokens > 0 and n_out < p.min_new_tokens:
            stop = eos | set(p.stop_token_ids or ())
            stop = {t for t in stop if 0 <= t < vocab}
            mask_rows.extend([i] * len(stop))
            mask_ids.extend(sorted(stop))
    if mask_ids:
        logits[
            device_tensor(mask_rows, torch.long, dev),
            device_tensor(mask_ids, torch.long, dev),
        ] = float("-inf")
    restore_dead_rows(logits, kept)
    return logits

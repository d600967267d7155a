"""Batched next-token sampling in torch (CPU and CUDA), with SGLang 0.5.x semantics.

Pipeline per row (SGLang ``srt/layers/sampler.py`` + ``srt/sampling/penaltylib``, re-derived):

1. Penalties on the raw logits ``z`` (float32, ``[B, V]``):
   * repetition (CTRL, Keskar et al. 2019, Sec. 4.1): for every token present in prompt+output,
     ``z = z / r`` if ``z > 0`` else ``z * r``;
   * frequency / presence (OpenAI API definition): ``z -= f * count_out(t) + p * [count_out(t) > 0]``,
     counts over *output* tokens only;
   * ``logit_bias``: ``z[t] += bias[t]``;
   * ``allowed_token_ids`` / ``bad_words_ids`` (vLLM's): ``-inf`` outside the allowlist and on
     each banned next token (:mod:`sglang_v4.sampling.token_masks`);
   * min_new_tokens: while ``len(output) < min_new_tokens`` the EOS ids and ``stop_token_ids`` get
     ``-inf``;
   * grammar (``json_schema`` / ``regex`` / ``ebnf``, optional): xgrammar's token bitmask sets
     disallowed tokens to ``-inf`` (see :mod:`sglang_v4.sampling.grammar`).
   Penalty work is O(tokens in the histories), done sparsely; the id lists are flattened on the
   host each step (28 ms per step for 64 requests x 6k history tokens on an H200 host). Passing a
   :class:`PenaltyCache` keeps per-request counts on the device instead (4.7 ms for the same case).
2. Greedy rows (``top_k == 1``; temperature 0 maps there): ``argmax z``.
3. Other rows: ``p = softmax(z / T)``; sort descending (a partial top-1024 sort when that is exact,
   see :func:`filter_probs`); drop ranks ``>= top_k``; drop tokens whose
   exclusive cumulative mass (over the unfiltered sorted ``p``) exceeds ``top_p``; drop
   ``p < min_p * max(p)``; sample from the remaining (unnormalised) weights with the exponential
   race (``argmax w / E``, ``E ~ Exp(1)``), which is exactly categorical sampling proportional to
   ``w``. Rows with a ``torch.Generator`` draw their noise from it (reproducible, independent of
   the batch composition); others use the global RNG.
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

_TOPK_CAP = 1024
"""Candidates examined by the partial-sort fast path of :func:`filter_probs`."""

__all__ = [
    "PenaltyCache",
    "apply_penalties",
    "filter_probs",
    "sample",
    "compute_logprobs",
    "unconstrained_logprobs",
    "top_logprobs",
    "token_logprobs",
    "token_ranks",
    "logprobs_for_tokens",
]


def _device_tensor(values: Sequence[Any], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.tensor(values, dtype=dtype)`` on ``device``. On CUDA the host copy is pinned and
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
        """``(out_counts [R, V] float32, prompt_present [R, V] bool)`` for the given requests."""
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
        ridx = _device_tensor(rows, torch.long, dev)
        counts, present_prompt = penalty_cache.rows(
            [rids[i] for i in rows],
            None if prompt_ids is None else [prompt_ids[i] for i in rows],
            [output_ids[i] for i in rows],
            vocab,
            dev,
        )
        sub = work.index_select(0, ridx).to(torch.float32)
        col = lambda xs: _device_tensor(xs, torch.float32, dev).unsqueeze(1)  # noqa: E731
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
            r_all = _device_tensor([p.repetition_penalty for p in params], torch.float32, dev)
            r = r_all[keys // vocab]
            z = flat_logits.index_select(0, keys)  # index_select/index_copy_: far faster than [] on CPU
            flat_logits.index_copy_(0, keys, torch.where(z > 0, z / r, z * r).to(flat_logits.dtype))

    if fp_rows:
        keys, counts = _unique_counts(fp_rows, output_ids, vocab, dev)
        if keys.numel():
            f_all = _device_tensor([p.frequency_penalty for p in params], torch.float32, dev)
            p_all = _device_tensor([p.presence_penalty for p in params], torch.float32, dev)
            rows_of = keys // vocab
            delta = f_all[rows_of] * counts.to(torch.float32) + p_all[rows_of]
            flat_logits.index_add_(0, keys, -delta.to(flat_logits.dtype))

    if work is not logits:
        logits.copy_(work)

    for i, p in enumerate(params):
        if p.logit_bias:
            idx = _device_tensor([int(k) for k in p.logit_bias], torch.long, dev)
            val = _device_tensor([float(v) for v in p.logit_bias.values()], logits.dtype, dev)
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
            _device_tensor(mask_rows, torch.long, dev),
            _device_tensor(mask_ids, torch.long, dev),
        ] = float("-inf")
    restore_dead_rows(logits, kept)
    return logits


def _exp_noise(rows: int, vocab: int, device: torch.device, gen: torch.Generator | None) -> torch.Tensor:
    """``[rows, vocab]`` float32 Exp(1) noise from ``gen`` (or the global RNG), on ``device``."""
    gdev = device if gen is None else gen.device
    q = torch.empty(rows, vocab, dtype=torch.float32, device=gdev).exponential_(1.0, generator=gen)
    return q.to(device)


def filter_probs(probs: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Apply top-k, top-p and min-p to probabilities (SGLang's torch sampler semantics).

    Args:
        probs: ``[R, V]`` float32 softmax probabilities (after temperature).
        params: ``R`` sampling parameters.

    Returns:
        ``[R, V]`` float32 weights: ``probs`` with dropped tokens set to 0 (not renormalised).
        Sorted descending (stable, ties by token id), a token at rank ``i`` is dropped when
        ``i >= top_k`` (``top_k=-1``: never), or when the mass of the tokens ranked before it
        exceeds ``top_p``, or when ``p < min_p * max(p)``. The top token is never dropped.
    """
    vocab = probs.shape[-1]
    dev = probs.device
    ks_list = [p.top_k if 0 < p.top_k < vocab else vocab for p in params]
    tps_list = [p.top_p for p in params]
    sort_rows = [i for i in range(len(params)) if ks_list[i] < vocab or tps_list[i] < 1.0]
    if sort_rows:
        all_rows = len(sort_rows) == probs.shape[0]
        ridx = _device_tensor(sort_rows, torch.long, dev)
        sub = probs if all_rows else probs.index_select(0, ridx)
        ks = _device_tensor([ks_list[i] for i in sort_rows], torch.int64, dev).unsqueeze(1)
        tps = _device_tensor([tps_list[i] for i in sort_rows], torch.float32, dev).unsqueeze(1)
        # Fast path: only the top `cap` tokens can survive when top_k <= cap or when the top-cap
        # mass already exceeds top_p (every lower-ranked token then has exclusive mass > top_p).
        cap = min(
            vocab,
            max(
                _TOPK_CAP,
                max(ks_list[i] for i in sort_rows if ks_list[i] < vocab)
                if any(ks_list[i] < vocab for i in sort_rows)
                else 0,
            ),
        )
        if cap < vocab:
            p_sort, p_idx = torch.topk(sub, cap, dim=-1, largest=True, sorted=True)
            if any(ks_list[i] > cap for i in sort_rows):  # else exact without asking the device
                exact = (ks.squeeze(1) <= cap) | (p_sort.sum(dim=-1) > tps.squeeze(1))
                if not bool(exact.all()):
                    p_sort, p_idx = sub.sort(dim=-1, descending=True, stable=True)
        else:
            p_sort, p_idx = sub.sort(dim=-1, descending=True, stable=True)
        ranks = torch.arange(p_sort.shape[-1], device=dev).unsqueeze(0)
        excl_cum = torch.cumsum(p_sort, dim=-1) - p_sort
        kept = p_sort.masked_fill((ranks >= ks) | (excl_cum > tps), 0.0)
        filtered = torch.zeros_like(sub).scatter_(1, p_idx, kept)
        probs = filtered if all_rows else probs.index_copy(0, ridx, filtered)
    if any(p.min_p > 0.0 for p in params):
        mps = _device_tensor([p.min_p for p in params], torch.float32, dev).unsqueeze(1)
        pmax = probs.max(dim=-1, keepdim=True).values
        probs = probs.masked_fill(probs < pmax * mps, 0.0)
    return probs


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    output_ids: Sequence[Sequence[int]],
    prompt_ids: Sequence[Sequence[int]] | None = None,
    generators: Sequence[torch.Generator | None] | None = None,
    *,
    eos_token_ids: Iterable[int] | None = None,
    return_logprobs: bool = False,
    grammars: Sequence[Any] | None = None,
    penalty_cache: PenaltyCache | None = None,
    rids: Sequence[Any] | None = None,
    output_lens: Sequence[int] | None = None,
    plain_greedy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Sample one next token per row.

    Args:
        logits: ``[B, V]`` next-token logits (any float dtype; computed in float32). Not modified.
        params: ``B`` :class:`SamplingParams`.
        output_ids: ``B`` lists of generated ids so far (frequency/presence/repetition, min_new_tokens).
        prompt_ids: ``B`` prompt id lists (repetition penalty), or ``None``.
        generators: ``B`` entries, a ``torch.Generator`` for seeded rows (``sampling_seed``) or ``None``;
            the whole argument may be ``None``. A generator on another device than ``logits`` is allowed
            (noise is drawn on its device and moved).
        eos_token_ids: the tokenizer's EOS ids, masked until ``min_new_tokens`` is reached.
        grammars: ``B`` entries of :class:`sglang_v4.sampling.grammar.Grammar` or ``None``; their
            token bitmasks are applied after the penalties (the caller then ``accept``s the tokens).
        penalty_cache, rids: optional device-side penalty statistics, see :func:`apply_penalties`.
        output_lens: generated-token counts per row, see :func:`apply_penalties`.
        return_logprobs: also return SGLang's output logprobs ``[B, V]`` float32: ``log_softmax`` of the
            penalized logits divided by the row temperature (greedy rows: temperature 1).
        plain_greedy: the caller guarantees that every row is greedy with no penalty, logit bias,
            ``min_new_tokens`` or grammar (``SamplingBatchInfo.plain_greedy``): the argmax (and
            ``log_softmax``) of the float32 logits is taken without the per-row checks, which on
            such a batch change nothing (same result as ``False``).

    Returns:
        ``[B]`` int64 token ids on ``logits.device`` (and the logprobs when ``return_logprobs``).

    Raises:
        ValueError: batch-size mismatch among the arguments.
    """
    bsz, vocab = logits.shape
    if generators is not None and len(generators) != bsz:
        raise ValueError(f"batch mismatch: logits has {bsz} rows, generators {len(generators)}")
    dev = logits.device
    if plain_greedy and (grammars is None or grammars.count(None) == len(grammars)):
        if len(params) != bsz:
            raise ValueError(f"batch mismatch: logits has {bsz} rows, params {len(params)}")
        z = logits.detach().to(torch.float32)  # not modified: no copy
        out = torch.argmax(z, dim=-1)
        return (out, torch.log_softmax(z, dim=-1)) if return_logprobs else out
    z = logits.detach().to(torch.float32).clone()
    apply_penalties(z, params, output_ids, prompt_ids, eos_token_ids, penalty_cache, rids, output_lens)
    if grammars is not None and any(g is not None for g in grammars):
        from sglang_v4.sampling.grammar import apply_grammar_masks

        apply_grammar_masks(z, grammars)
        # A grammar that only allows EOS while min_new_tokens masks EOS leaves nothing: the grammar
        # wins (the row is recomputed without the min_new_tokens mask). A grammar whose match is
        # complete may always end the output: where the allowlist or the bad words mask its stop
        # tokens too (allowed_token_ids without EOS), those stop tokens alone are kept. A row left
        # dead is sampled anyway; the grammar rejects the token and names the field that left
        # nothing (Grammar.rejection_reason).
        dead = (~torch.isfinite(z).any(dim=-1)).nonzero().flatten().tolist()
        for i in dead:
            g = grammars[i]
            if g is None:
                continue
            row = logits[i : i + 1].detach().to(torch.float32).clone()
            relaxed = dataclasses.replace(params[i], min_new_tokens=0, is_normalized=True)
            apply_penalties(row, [relaxed], [output_ids[i]], None if prompt_ids is None else [prompt_ids[i]])
            apply_grammar_masks(row, [g])
            ends = g.end_tokens()
            if ends and not bool(torch.isfinite(row).any()):
                idx = _device_tensor(ends, torch.long, dev)
                kept = logits[i].detach().to(torch.float32).index_select(0, idx)
                row.fill_(float("-inf"))
                row[0].index_copy_(0, idx, kept)
            z[i] = row[0]

    greedy = [p.is_greedy for p in params]
    rows = [] if all(greedy) else [i for i, g in enumerate(greedy) if not g]
    out = torch.argmax(z, dim=-1)
    if rows:  # greedy rows use temperature 1 (dividing by it is exact: skipped when all are greedy)
        temps = _device_tensor(
            [1.0 if g else p.temperature for p, g in zip(params, greedy)], torch.float32, dev
        ).unsqueeze(1)
        logprobs = torch.log_softmax(z / temps, dim=-1) if return_logprobs else None
    else:
        logprobs = torch.log_softmax(z, dim=-1) if return_logprobs else None

    if rows:
        ridx = _device_tensor(rows, torch.long, dev)
        probs = torch.softmax(z[ridx] / temps[ridx], dim=-1)
        probs = filter_probs(probs, [params[i] for i in rows])

        gens = [generators[i] if generators is not None else None for i in rows]
        noise = torch.empty_like(probs)
        free = [j for j, g in enumerate(gens) if g is None]
        if free:
            noise[free] = _exp_noise(len(free), vocab, dev, None)
        for j, g in enumerate(gens):
            if g is not None:
                noise[j] = _exp_noise(1, vocab, dev, g)[0]
        noise.clamp_min_(torch.finfo(torch.float32).tiny)
        picked = torch.argmax(probs / noise, dim=-1)
        out[ridx] = picked

    out = out.to(torch.int64)
    if return_logprobs:
        assert logprobs is not None
        return out, logprobs
    return out


def unconstrained_logprobs(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    output_ids: Sequence[Sequence[int]],
    prompt_ids: Sequence[Sequence[int]] | None = None,
) -> torch.Tensor:
    """SGLang's output logprobs (as :func:`sample` returns them: ``log_softmax`` of the penalized
    logits divided by the row temperature, greedy rows at temperature 1) without the vocabulary
    masks: the repetition / frequency / presence penalties and the (finite, ``[-100, 100]``)
    ``logit_bias`` apply, as they do for every sampled token of the response; ``allowed_token_ids``,
    ``bad_words_ids``, the ``min_new_tokens`` mask and grammar masks (``-inf`` entries) do not.
    These are the logprobs of a token that ``thinking_token_budget`` forces
    (:mod:`sglang_v4.sampling.thinking_budget`): the same rule as the rest of the response, and
    finite where a mask removed the forced id. vLLM reports either the raw model logprobs or
    those after every logits processor (its budget processor included, which leaves the forced
    id alone at logprob 0); ours are the processed logits before the masks, so that a forced
    token's logprob still says how likely the model (with the request's penalties and bias)
    found it. A row without masks gets exactly the values :func:`sample` returns for it.

    Args:
        logits: ``[B, V]`` next-token logits (any float dtype). Not modified.
        params: ``B`` :class:`SamplingParams`.
        output_ids: ``B`` output histories (penalties; ``()`` for a row without penalties).
        prompt_ids: ``B`` prompt id lists (repetition penalty), or ``None``.

    Returns:
        ``[B, V]`` float32 log-probabilities.

    Raises:
        ValueError: batch-size mismatch among the arguments.
    """
    z = logits.detach().to(torch.float32).clone()
    bare = [
        dataclasses.replace(
            p,
            allowed_token_ids=None,
            bad_words_ids=None,
            min_new_tokens=0,
            is_normalized=True,
        )
        for p in params
    ]
    apply_penalties(z, bare, output_ids, prompt_ids)
    temps = [1.0 if p.is_greedy else p.temperature for p in params]
    if any(t != 1.0 for t in temps):
        z = z / _device_tensor(temps, torch.float32, z.device).unsqueeze(1)
    return torch.log_softmax(z, dim=-1)


def compute_logprobs(logits: torch.Tensor) -> torch.Tensor:
    """``log_softmax`` over the last dim in float32.

    Args:
        logits: ``[..., V]`` any float dtype.

    Returns:
        ``[..., V]`` float32 log-probabilities (``-inf`` stays ``-inf``).
    """
    return torch.log_softmax(logits.to(torch.float32), dim=-1)


def top_logprobs(logprobs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest log-probabilities per row.

    Args:
        logprobs: ``[B, V]`` float32.
        k: how many (``0 <= k``; clipped to ``V``).

    Returns:
        ``(values [B, k] float32, token_ids [B, k] int64)``, descending by value.

    Raises:
        ValueError: ``k < 0``.
    """
    if k < 0:
        raise ValueError(f"top_logprobs_num must be >= 0, got {k}")
    k = min(k, logprobs.shape[-1])
    vals, idx = torch.topk(logprobs, k, dim=-1, largest=True, sorted=True)
    return vals, idx.to(torch.int64)


def token_logprobs(logprobs: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Gather the log-probability of given tokens.

    Args:
        logprobs: ``[B, V]`` float32.
        token_ids: ``[B]`` int64.

    Returns:
        ``[B]`` float32 ``logprobs[b, token_ids[b]]``.
    """
    return logprobs.gather(1, token_ids.view(-1, 1).to(torch.long)).squeeze(1)


def token_ranks(logprobs: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Each token's rank among its row's log-probabilities, as vLLM's ``Logprob.rank`` reports
    it: the count of vocabulary entries whose log-probability is at least the token's (vLLM's
    ``batched_count_greater_than``, ``(x >= value).sum(-1)``), so 1 is the most likely token and a
    token tied with others gets the last rank of the tie.

    Args:
        logprobs: ``[B, V]`` float32.
        values: ``[B]`` float32, the log-probability of each row's token (``token_logprobs``).

    Returns:
        ``[B]`` int64 ranks in ``[1, V]`` (0 for a NaN value, which nothing is ``>=``).
    """
    return (logprobs >= values.unsqueeze(-1)).sum(dim=-1)


def logprobs_for_tokens(
    logits: torch.Tensor, token_ids: torch.Tensor, top_k: int = 0, chunk_size: int = 2048
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Log-probabilities of given tokens (and the top-k) row by row, in chunks to bound memory.

    Meant for input (prompt) logprobs, where ``T`` can be long: only ``chunk_size x V`` float32
    log-softmax values exist at a time.

    Args:
        logits: ``[T, V]`` any float dtype (row ``t`` predicts ``token_ids[t]``).
        token_ids: ``[T]`` int64.
        top_k: also return the ``top_k`` best per row (0 = no).
        chunk_size: rows per chunk.

    Returns:
        ``(token_logprobs [T] float32, top_vals [T, k] float32 | None, top_ids [T, k] int64 | None)``.

    Raises:
        ValueError: shape mismatch, ``top_k < 0`` or ``chunk_size < 1``.
    """
    if logits.dim() != 2 or token_ids.shape != (logits.shape[0],):
        raise ValueError(
            f"logits must be [T, V] and token_ids [T]; got {tuple(logits.shape)}, {tuple(token_ids.shape)}"
        )
    if top_k < 0 or chunk_size < 1:
        raise ValueError(f"top_k must be >= 0 and chunk_size >= 1; got {top_k}, {chunk_size}")
    n = logits.shape[0]
    k = min(top_k, logits.shape[1])
    vals = torch.empty(n, dtype=torch.float32, device=logits.device)
    tv = torch.empty(n, k, dtype=torch.float32, device=logits.device) if k else None
    ti = torch.empty(n, k, dtype=torch.int64, device=logits.device) if k else None
    ids = token_ids.to(device=logits.device, dtype=torch.long)
    for s in range(0, n, chunk_size):
        lp = compute_logprobs(logits[s : s + chunk_size])
        vals[s : s + chunk_size] = lp.gather(1, ids[s : s + chunk_size].unsqueeze(1)).squeeze(1)
        if k:
            v, i = torch.topk(lp, k, dim=-1)
            tv[s : s + chunk_size] = v  # type: ignore[index]
            ti[s : s + chunk_size] = i  # type: ignore[index]
    return vals, tv, ti

"""Batched next-token sampling in torch (CPU and CUDA), with SGLang 0.5.x semantics.

Pipeline per row (SGLang ``srt/layers/sampler.py`` + ``srt/sampling/penaltylib``, re-derived):

1. Penalties on the raw logits ``z`` (float32, ``[B, V]``; :mod:`sglang_v4.sampling.penalties`):
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
3. Other rows: ``p = softmax(z / T)`` (computed as ``softmax((z - max z) / T)``, which cannot
   overflow); sort descending (a partial top-1024 sort when that is exact,
   see :func:`filter_probs`); drop ranks ``>= top_k``; when ``top_p`` is below 1 in float32,
   drop tokens whose exclusive cumulative mass (over the unfiltered sorted ``p``) exceeds
   ``top_p``; drop ``p < min_p * max(p)``; sample from the remaining (unnormalised) weights with the exponential
   race (``argmax w / E``, ``E ~ Exp(1)``), which is exactly categorical sampling proportional to
   ``w``. Rows with a ``torch.Generator`` draw their noise from it (reproducible, independent of
   the batch composition); others use the global RNG.

Non-finite logits (:func:`~sglang_v4.sampling.logprobs.finite_limit`): a NaN logit is never
picked and gets logprob ``-inf``; ``+inf`` logits share the whole
probability. Without this, one NaN or ``+inf`` made the softmax NaN and every sampled row token 0.
``z / T`` is computed after shifting each row by its maximum, so a tiny temperature cannot
overflow a large finite logit to ``+inf``. Cost on the decode path (all rows sampled, no
logprobs): one pass over ``[B, V]`` makes the float32 copy without NaN that the penalties then
edit in place, and the shift / temperature / ``+inf`` limit takes four more on that copy
(``amax``, sub, div, ``nan_to_num_``), with no host synchronisation; on CUDA those four are two
Triton launches (:mod:`sgl_kernel_v4.triton.sampling`: two passes, bit for bit the same values).

The logprob helpers (a forced row's output logprobs, top-k, ranks, prompt logprobs) live in
:mod:`sglang_v4.sampling.logprobs`; this module re-exports them and the penalty functions.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from sglang_v4.sampling.logprobs import (
    compute_logprobs,
    drop_nan,
    finite_limit_,
    logprobs_for_tokens,
    scale_by_temperature_,
    token_logprobs,
    token_ranks,
    top_logprobs,
    topk_low_id_ties,
    unconstrained_logprobs,
)
from sglang_v4.sampling.penalties import PenaltyCache, apply_penalties, device_tensor
from sglang_v4.sampling.sampling_params import SamplingParams

_TOPK_CAP = 1024
"""Candidates examined by the partial-sort fast path of :func:`filter_probs`."""

_TOP_P_F32_ONE = 1.0 - 2.0**-25
"""Every ``top_p`` at or above this rounds to 1.0 in float32 (the largest float32 below 1 is
``1 - 2**-24``; this is the midpoint, which rounds to even, i.e. to 1.0)."""

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
        A ``top_p`` that is 1 in float32 (``>= 1 - 2**-25``) drops nothing: the float32 running
        sum of a large vocabulary can round past 1.0 before its last tokens, and comparing it
        with ``top_p = 1`` would then drop that tail from a row that only asked for ``top_k``.
    """
    vocab = probs.shape[-1]
    dev = probs.device
    ks_list = [p.top_k if 0 < p.top_k < vocab else vocab for p in params]
    tps_list = [p.top_p if p.top_p < _TOP_P_F32_ONE else math.inf for p in params]
    sort_rows = [i for i in range(len(params)) if ks_list[i] < vocab or tps_list[i] < 1.0]
    if sort_rows:
        all_rows = len(sort_rows) == probs.shape[0]
        ridx = device_tensor(sort_rows, torch.long, dev)
        sub = probs if all_rows else probs.index_select(0, ridx)
        ks = device_tensor([ks_list[i] for i in sort_rows], torch.int64, dev).unsqueeze(1)
        tps = device_tensor([tps_list[i] for i in sort_rows], torch.float32, dev).unsqueeze(1)
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
            # ties by token id, as the stable sort below orders them (torch.topk does not)
            p_sort, p_idx = topk_low_id_ties(sub, cap)
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
        mps = device_tensor([p.min_p for p in params], torch.float32, dev).unsqueeze(1)
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
        z = drop_nan(logits.detach().to(torch.float32))  # a NaN logit is never picked
        out = torch.argmax(z, dim=-1)
        return (out, torch.log_softmax(finite_limit_(z), dim=-1)) if return_logprobs else out
    # a new tensor (penalised in place) without NaN: a NaN logit is never picked (finite_limit)
    z = drop_nan(logits.detach().to(torch.float32))
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
                idx = device_tensor(ends, torch.long, dev)
                kept = logits[i].detach().to(torch.float32).index_select(0, idx)
                row.fill_(float("-inf"))
                row[0].index_copy_(0, idx, kept)
            z[i] = row[0]

    greedy = [p.is_greedy for p in params]
    rows = [] if all(greedy) else [i for i, g in enumerate(greedy) if not g]
    out = torch.argmax(z, dim=-1)
    # From here z (NaN-free, our own copy) is only read through `scaled` / `sub`, which reuse it in
    # place (scale_by_temperature_ / finite_limit_: four / three passes over it, no copy).
    if rows:  # greedy rows use temperature 1 (dividing by it is exact: skipped when all are greedy)
        temps = device_tensor(
            [1.0 if g else p.temperature for p, g in zip(params, greedy)], torch.float32, dev
        ).unsqueeze(1)
        scaled = scale_by_temperature_(z, temps) if return_logprobs else None
    else:
        scaled = finite_limit_(z) if return_logprobs else None
    logprobs = torch.log_softmax(scaled, dim=-1) if scaled is not None else None

    if rows:
        all_rows = len(rows) == bsz
        ridx = device_tensor(rows, torch.long, dev)
        # z / T overflows to +inf for a tiny T: scale_by_temperature_ shifts by the row max first
        if scaled is not None:
            sub = scaled if all_rows else scaled.index_select(0, ridx)
        else:
            sub = scale_by_temperature_(z if all_rows else z[ridx], temps if all_rows else temps[ridx])
        probs = torch.softmax(sub, dim=-1)
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

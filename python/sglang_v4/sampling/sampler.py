"""Batched next-token sampling in torch (CPU and CUDA), with SGLang 0.5.x semantics.

Pipeline per row (SGLang ``srt/layers/sampler.py`` + ``srt/sampling/penaltylib``, re-derived):

1. Penalties on the raw logits ``z`` (float32, ``[B, V]``):
   * repetition (CTRL, Keskar et al. 2019, Sec. 4.1): for every token present in prompt+output,
     ``z = z / r`` if ``z > 0`` else ``z * r``;
   * frequency / presence (OpenAI API definition): ``z -= f * count_out(t) + p * [count_out(t) > 0]``,
     counts over *output* tokens only;
   * ``logit_bias``: ``z[t] += bias[t]``;
   * min_new_tokens: while ``len(output) < min_new_tokens`` the EOS ids and ``stop_token_ids`` get
     ``-inf``.
2. Greedy rows (``top_k == 1``; temperature 0 maps there): ``argmax z``.
3. Other rows: ``p = softmax(z / T)``; sort descending; drop ranks ``>= top_k``; drop tokens whose
   exclusive cumulative mass (over the unfiltered sorted ``p``) exceeds ``top_p``; drop
   ``p < min_p * max(p)``; sample from the remaining (unnormalised) weights with the exponential
   race (``argmax w / E``, ``E ~ Exp(1)``), which is exactly categorical sampling proportional to
   ``w``. Rows with a ``torch.Generator`` draw their noise from it (reproducible, independent of
   the batch composition); others use the global RNG.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from sglang_v4.sampling.sampling_params import SamplingParams

__all__ = [
    "apply_penalties",
    "filter_probs",
    "sample",
    "compute_logprobs",
    "top_logprobs",
    "token_logprobs",
]


def _counts(
    rows: list[int], ids: list[list[int]], batch: int, vocab: int, device: torch.device
) -> torch.Tensor:
    """Token-occurrence counts ``[batch, vocab]`` float32 for the given rows' id lists."""
    counts = torch.zeros(batch, vocab, dtype=torch.float32, device=device)
    flat_rows: list[int] = []
    flat_ids: list[int] = []
    for r in rows:
        seq = ids[r]
        flat_rows.extend([r] * len(seq))
        flat_ids.extend(seq)
    if flat_ids:
        ri = torch.tensor(flat_rows, dtype=torch.long, device=device)
        ti = torch.tensor(flat_ids, dtype=torch.long, device=device)
        counts.index_put_(
            (ri, ti), torch.ones(len(flat_ids), dtype=torch.float32, device=device), accumulate=True
        )
    return counts


def apply_penalties(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    output_ids: Sequence[Sequence[int]],
    prompt_ids: Sequence[Sequence[int]] | None = None,
    eos_token_ids: Iterable[int] | None = None,
) -> torch.Tensor:
    """Apply repetition / frequency / presence penalties, logit_bias and the min_new_tokens mask.

    Args:
        logits: ``[B, V]`` float32 raw next-token logits; modified in place and returned.
        params: ``B`` sampling parameters.
        output_ids: ``B`` lists of already generated token ids.
        prompt_ids: ``B`` lists of prompt token ids (for the repetition penalty); ``None`` = output
            tokens only.
        eos_token_ids: EOS ids masked (with each row's ``stop_token_ids``) before ``min_new_tokens``.

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
    dev = logits.device

    rep_rows = [i for i, p in enumerate(params) if p.repetition_penalty != 1.0]
    if rep_rows:
        rep_set = set(rep_rows)
        seqs = [
            (list(prompt_ids[i]) if prompt_ids is not None else []) + list(output_ids[i])
            if i in rep_set
            else []
            for i in range(bsz)
        ]
        present = _counts(rep_rows, seqs, bsz, vocab, dev) > 0
        r = torch.tensor([p.repetition_penalty for p in params], dtype=torch.float32, device=dev).unsqueeze(1)
        penalized = torch.where(logits > 0, logits / r, logits * r)
        logits.copy_(torch.where(present, penalized, logits))

    fp_rows = [i for i, p in enumerate(params) if p.frequency_penalty != 0.0 or p.presence_penalty != 0.0]
    if fp_rows:
        cnt = _counts(fp_rows, [list(x) for x in output_ids], bsz, vocab, dev)
        f = torch.tensor([p.frequency_penalty for p in params], dtype=torch.float32, device=dev).unsqueeze(1)
        pr = torch.tensor([p.presence_penalty for p in params], dtype=torch.float32, device=dev).unsqueeze(1)
        logits.sub_(f * cnt + pr * (cnt > 0).to(torch.float32))

    for i, p in enumerate(params):
        if p.logit_bias:
            idx = torch.tensor([int(k) for k in p.logit_bias], dtype=torch.long, device=dev)
            val = torch.tensor([float(v) for v in p.logit_bias.values()], dtype=logits.dtype, device=dev)
            logits[i].index_add_(0, idx, val)

    eos = set(eos_token_ids or ())
    mask_rows: list[int] = []
    mask_ids: list[int] = []
    for i, p in enumerate(params):
        if p.min_new_tokens > 0 and len(output_ids[i]) < p.min_new_tokens:
            stop = eos | set(p.stop_token_ids or ())
            stop = {t for t in stop if 0 <= t < vocab}
            mask_rows.extend([i] * len(stop))
            mask_ids.extend(sorted(stop))
    if mask_ids:
        logits[
            torch.tensor(mask_rows, dtype=torch.long, device=dev),
            torch.tensor(mask_ids, dtype=torch.long, device=dev),
        ] = float("-inf")
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
    need_sort = any((0 < p.top_k < vocab) or p.top_p < 1.0 for p in params)
    if need_sort:
        p_sort, p_idx = probs.sort(dim=-1, descending=True, stable=True)
        ranks = torch.arange(vocab, device=dev).unsqueeze(0)
        ks = torch.tensor([p.top_k if p.top_k > 0 else vocab for p in params], device=dev).unsqueeze(1)
        tps = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=dev).unsqueeze(1)
        excl_cum = torch.cumsum(p_sort, dim=-1) - p_sort
        drop = (ranks >= ks) | (excl_cum > tps)
        p_sort = p_sort.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(1, p_idx, p_sort)
    if any(p.min_p > 0.0 for p in params):
        mps = torch.tensor([p.min_p for p in params], dtype=torch.float32, device=dev).unsqueeze(1)
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
        return_logprobs: also return SGLang's output logprobs ``[B, V]`` float32: ``log_softmax`` of the
            penalized logits divided by the row temperature (greedy rows: temperature 1).

    Returns:
        ``[B]`` int64 token ids on ``logits.device`` (and the logprobs when ``return_logprobs``).

    Raises:
        ValueError: batch-size mismatch among the arguments.
    """
    bsz, vocab = logits.shape
    if generators is not None and len(generators) != bsz:
        raise ValueError(f"batch mismatch: logits has {bsz} rows, generators {len(generators)}")
    dev = logits.device
    z = logits.detach().to(torch.float32).clone()
    apply_penalties(z, params, output_ids, prompt_ids, eos_token_ids)

    temps = torch.tensor(
        [1.0 if p.is_greedy else p.temperature for p in params], dtype=torch.float32, device=dev
    ).unsqueeze(1)
    out = torch.argmax(z, dim=-1)
    logprobs = torch.log_softmax(z / temps, dim=-1) if return_logprobs else None

    rows = [i for i, p in enumerate(params) if not p.is_greedy]
    if rows:
        ridx = torch.tensor(rows, dtype=torch.long, device=dev)
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

"""Output and prompt logprobs: SGLang's output logprobs of a forced row
(:func:`unconstrained_logprobs`), ``log_softmax`` in float32, the top-k, the chosen tokens' values
and vLLM's ranks, and chunked prompt logprobs. The sampler's own output logprobs come with its
sample (:func:`sglang_v4.sampling.sampler.sample`, ``return_logprobs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from sglang_v4.sampling.penalties import apply_penalties, device_tensor
from sglang_v4.sampling.sampling_params import SamplingParams

__all__ = [
    "compute_logprobs",
    "drop_nan",
    "finite_limit",
    "finite_limit_",
    "scale_by_temperature",
    "scale_by_temperature_",
    "logprobs_for_tokens",
    "token_logprobs",
    "token_ranks",
    "top_logprobs",
    "topk_low_id_ties",
    "unconstrained_logprobs",
]


def topk_low_id_ties(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest entries of each row of ``x``, equal values ordered by ascending index.

    ``torch.topk`` leaves the order of equal values (and which of them make the cut at rank ``k``)
    unspecified: on a row of ties it returns e.g. ids ``[1, 3, 0, 2]``, so the top-1 entry need not
    be the token ``torch.argmax`` (first maximum) picks, and which tied tokens a top-k keeps varies
    with the vocabulary size and the device. Here each value is made into a distinct int64 key,
    ``(its float32 order bits) * 2**32 + (2**32 - 1 - index)``, so the top-k of the keys is the
    top-k of the values with ties won by the lower index: the same order as a stable descending
    sort, and the same first entry as ``torch.argmax``. ``-0.0`` counts as ``+0.0``; NaN sorts
    above everything, as in ``torch.topk``.

    Args:
        x: ``[..., V]`` float32 (other float dtypes are converted).
        k: how many, ``0 <= k <= V``.

    Returns:
        ``(values [..., k] x.dtype, indices [..., k] int64)``, descending by value.
    """
    xf = x.to(torch.float32) + 0.0  # a new contiguous tensor; -0.0 + 0.0 = +0.0: one key for both
    keys = xf.view(torch.int32).to(torch.int64)
    keys ^= (keys >> 31) & 0x7FFFFFFF  # negative floats: flip the magnitude bits (monotone order)
    keys <<= 32
    keys += 0xFFFFFFFF - torch.arange(x.shape[-1], device=x.device, dtype=torch.int64)
    idx = torch.topk(keys, k, dim=-1, largest=True, sorted=True).indices
    return x.gather(-1, idx), idx


_INF = float("inf")


def drop_nan(x: torch.Tensor) -> torch.Tensor:
    """``x`` with NaN entries replaced by ``-inf`` (``+inf`` / ``-inf`` kept), in a new tensor: one
    element-wise pass (``torch.nan_to_num``). A NaN logit then has probability 0.

    Args:
        x: ``[..., V]`` float tensor. Not modified.

    Returns:
        ``[..., V]`` tensor of ``x.dtype`` without NaN.
    """
    return torch.nan_to_num(x, nan=-_INF, posinf=_INF, neginf=-_INF)


def _kernels(x: torch.Tensor) -> Any:
    """``sgl_kernel_v4.triton.sampling`` (two launches: two passes over ``[B, V]``) when ``x`` is a
    ``[B, V]`` float32 CUDA tensor with a contiguous last dim and the Triton path is on
    (``sgl_kernel_v4.ops.triton_enabled``: ``SGLANG_V4_DISABLE_TRITON``), else ``None`` (the torch
    path of this module, the CPU and reference path; bit for bit the same results)."""
    if not x.is_cuda or x.dim() != 2 or x.dtype != torch.float32 or x.stride(-1) != 1:
        return None
    from sgl_kernel_v4 import ops

    if not ops.triton_enabled():
        return None
    from sgl_kernel_v4.triton import sampling

    return sampling


def _shift_(y: torch.Tensor, shift: torch.Tensor, temps: torch.Tensor | None = None) -> torch.Tensor:
    """In place ``y = (y - shift) / temps`` with NaN results (``inf - inf``) made 0: two or three
    element-wise passes over ``y`` (sub, optional div, ``nan_to_num_``). ``shift`` is ``[..., 1]``
    and ``y`` has no NaN; ``+inf`` results cannot occur (``y <= shift`` or ``shift = 0`` on a row
    without ``+inf``)."""
    y.sub_(shift)
    if temps is not None:
        y.div_(temps)
    return torch.nan_to_num_(y, nan=0.0, posinf=_INF, neginf=-_INF)


def finite_limit_(y: torch.Tensor) -> torch.Tensor:
    """:func:`finite_limit` of a NaN-free ``y`` (e.g. :func:`drop_nan`'s result), in place: three
    passes over ``y`` (``amax`` reads it; sub and ``nan_to_num_`` read and write it; on CUDA one
    Triton launch, two passes). Returns ``y``.
    """
    k = _kernels(y)
    if k is not None:
        return k.finite_limit(y, out=y)
    m = y.amax(dim=-1, keepdim=True)
    return _shift_(y, torch.where(m == _INF, m, torch.zeros_like(m)))


def finite_limit(x: torch.Tensor) -> torch.Tensor:
    """Logits with the non-finite entries a model can emit (a bf16/fp16 overflow, a bad kernel)
    replaced by the limit of the softmax over them, so that neither the sampler nor the logprobs
    see NaN.

    * NaN -> ``-inf``: a NaN logit has probability 0 (it is never picked, greedy or sampled; without
      this one NaN made every probability NaN and the sampler emitted token 0).
    * In a row with ``+inf`` entries: those become 0 and every other entry ``-inf``, the limit of
      ``softmax`` as the logit grows (probability spread evenly over the ``+inf`` tokens, logprob
      ``-log(count)``; ``softmax`` itself gives NaN there). ``torch.argmax`` (greedy) picks the
      first ``+inf`` token, which this keeps.

    A row with no finite or ``+inf`` entry stays all ``-inf`` (it has no distribution). Other
    entries are returned bit for bit (``-0.0`` included). No host synchronisation.

    Cost: four element-wise passes over ``[..., V]`` (``nan_to_num``, ``amax`` (read only), a
    subtraction of the per-row shift ``+inf`` or 0, ``nan_to_num_`` turning the ``inf - inf`` of the
    ``+inf`` entries into 0), with no data-dependent branch: the rows with ``+inf`` are handled by
    the same arithmetic as the others. A ``[B, V]`` float32 CUDA tensor takes two Triton launches
    instead (:mod:`sgl_kernel_v4.triton.sampling`: two passes, the maximum then the result; the
    same values bit for bit).

    Args:
        x: ``[..., V]`` float logits (or logits divided by the temperature). Not modified.

    Returns:
        ``[..., V]`` tensor of ``x.dtype``, with no NaN and no ``+inf``.
    """
    k = _kernels(x)
    if k is not None:
        return k.finite_limit(x)
    return finite_limit_(drop_nan(x))


def scale_by_temperature_(y: torch.Tensor, temps: torch.Tensor) -> torch.Tensor:
    """:func:`scale_by_temperature` of a NaN-free ``y`` (e.g. :func:`drop_nan`'s result), in
    place: four passes over ``y`` (``amax`` reads it; sub, div and ``nan_to_num_`` read and write
    it; on CUDA two Triton launches, two passes). Returns ``y``."""
    k = _kernels(y)
    if k is not None:
        return k.scale_by_temperature(y, temps, out=y)
    m = y.amax(dim=-1, keepdim=True)
    return _shift_(y, torch.where(m == -_INF, torch.zeros_like(m), m), temps)


def scale_by_temperature(z: torch.Tensor, temps: torch.Tensor) -> torch.Tensor:
    """``finite_limit(z) / T`` computed without overflow: each row is first shifted by its largest
    entry (``softmax`` / ``log_softmax`` do not change under a shift), so every value is ``<= 0``
    before the division and a tiny temperature cannot turn a large finite logit into ``+inf``
    (which would make the row NaN; vllm-project/vllm#22180, #890). Values far below the maximum
    may become ``-inf`` (their float64 probability is below float32's range anyway).

    The shift is the row maximum over the non-NaN entries: a finite maximum gives ``(z - m) / T``;
    ``+inf`` gives ``inf - inf = NaN`` at the ``+inf`` entries, made 0, and ``-inf`` elsewhere
    (:func:`finite_limit`'s limit); a row with nothing above ``-inf`` is shifted by 0 (stays
    ``-inf``). Cost: five element-wise passes over ``[B, V]`` (``nan_to_num`` of the NaN, ``amax``
    (read only), sub, div, ``nan_to_num_``), no host synchronisation; callers whose rows carry no
    NaN use :func:`scale_by_temperature_` (four, in place). On CUDA (float32, last dim contiguous,
    Triton enabled) two launches of :mod:`sgl_kernel_v4.triton.sampling` do it all in two passes
    (the row maximum, then the result), bit for bit the same values.

    Args:
        z: ``[B, V]`` float32 logits (penalties applied). Not modified.
        temps: ``[B, 1]`` float32 positive temperatures.

    Returns:
        ``[B, V]`` float32 with the row maximum at 0 (or all ``-inf``), no NaN and no ``+inf``.
    """
    k = _kernels(z)
    if k is not None:
        return k.scale_by_temperature(z, temps)
    return scale_by_temperature_(drop_nan(z), temps)


def unconstrained_logprobs(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    output_ids: Sequence[Sequence[int]],
    prompt_ids: Sequence[Sequence[int]] | None = None,
) -> torch.Tensor:
    """SGLang's output logprobs (as :func:`~sglang_v4.sampling.sampler.sample` returns them: ``log_softmax`` of the penalized
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
    found it. A row without masks gets exactly the values
    :func:`~sglang_v4.sampling.sampler.sample` returns for it.

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
    z = drop_nan(logits.detach().to(torch.float32))  # a new tensor: penalised in place
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
        return torch.log_softmax(
            scale_by_temperature_(z, device_tensor(temps, torch.float32, z.device).unsqueeze(1)), dim=-1
        )
    return torch.log_softmax(finite_limit_(z), dim=-1)


def compute_logprobs(logits: torch.Tensor) -> torch.Tensor:
    """``log_softmax`` over the last dim in float32, of :func:`finite_limit` of the logits.

    Args:
        logits: ``[..., V]`` any float dtype.

    Returns:
        ``[..., V]`` float32 log-probabilities (``-inf`` stays ``-inf``; a NaN logit gives
        ``-inf``; a row with ``+inf`` logits gives them ``-log(count)`` and the rest ``-inf``).
    """
    return torch.log_softmax(finite_limit(logits.to(torch.float32)), dim=-1)


def top_logprobs(logprobs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest log-probabilities per row.

    Args:
        logprobs: ``[B, V]`` float32.
        k: how many (``0 <= k``; clipped to ``V``).

    Returns:
        ``(values [B, k] float32, token_ids [B, k] int64)``, descending by value; equal values
        by ascending token id (:func:`topk_low_id_ties`), so a greedy row's first entry is the
        token the sampler's argmax picked.

    Raises:
        ValueError: ``k < 0``.
    """
    if k < 0:
        raise ValueError(f"top_logprobs_num must be >= 0, got {k}")
    k = min(k, logprobs.shape[-1])
    return topk_low_id_ties(logprobs, k)


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
        ``(token_logprobs [T] float32, top_vals [T, k] float32 | None, top_ids [T, k] int64 | None)``;
        equal values in the top-k by ascending token id (:func:`topk_low_id_ties`).

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
            v, i = topk_low_id_ties(lp, k)
            tv[s : s + chunk_size] = v  # type: ignore[index]
            ti[s : s + chunk_size] = i  # type: ignore[index]
    return vals, tv, ti

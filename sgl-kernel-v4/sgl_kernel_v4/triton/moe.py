"""Fused MoE (Triton): grouped GEMMs over the routed experts with clamped SwiGLU, bf16.

Op-table entry 8 (``sgl_kernel_v4/ops.py``); math from HF ``DeepseekV4Experts``
(``transformers/models/deepseek_v4/modeling_deepseek_v4.py``): for each (token, slot) pair routed
to expert ``e``: ``gate, up = x @ W_gate_up[e]ᵀ`` split in halves, ``gate.clamp(max=limit)``,
``up.clamp(-limit, limit)``, ``h = silu(gate) * up``, ``y = h @ W_down[e]ᵀ * weight``; the output
is the sum over the token's ``k`` slots.

Steps (no host synchronisation, so the whole op is CUDA-graph capturable):
1. ``_align``: sort the ``T*k`` pairs by expert (stably: by pair index within an expert) and lay
   them out in ``BLOCK_M``-row blocks, each block belonging to one expert (padding rows carry the
   sentinel ``T*k``); the number of blocks is the static bound ``cdiv(T*k + E*(BLOCK_M-1),
   BLOCK_M)``; unused blocks have expert -1 and exit at once. Up to 4,096 pairs one program
   (``_align_kernel``: histogram, padded offsets, a sort of packed (expert, pair) keys, scatter,
   block -> expert). Above, two launches over chunks of ``_CHUNK_P`` pairs (``_align_chunks``;
   :data:`ALIGN_CHUNKS`): ``_align_count_kernel`` writes each
   chunk's expert histogram into a ``[n_chunks, BLOCK_E]`` table and fills its share of the rows
   with the sentinel; ``_align_scatter_kernel`` sums the table (expert totals -> padded offsets;
   the counts of the chunks before its own), ranks its chunk's pairs by the same packed-key sort,
   scatters their ids and writes its share of the block -> expert map. Pair counts are runtime
   arguments: the variants are per ``BLOCK_E`` (``next_power_of_2(E + 1)``) and, for the
   one-program kernel, ``BLOCK_M`` and sort size, never per batch. ``_align_torch`` (torch ops,
   the same output) serves CPU tensors outside the interpreter, ``next_power_of_2(E + 1) > 4096``
   and, with ``SGLANG_V4_MOE_ALIGN_CHUNKS=0``, CUDA above 4,096 pairs; it is the tests' oracle.
2. ``_gate_up_kernel``: per (block, N tile) two accumulators (gate and up rows of the same
   expert), clamp + SiLU epilogue, ``h [T*k, I]`` in bf16.
3. ``_down_kernel``: ``h @ W_downᵀ`` per block, scaled by the routing weight and added with fp32
   atomics into ``[T, D]`` (the sum over the ``k`` slots; order of the k additions unspecified),
   cast to x's dtype at the end.
Invalid expert ids (< 0 or >= E) are skipped (their contribution is 0).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.triton._dot import dot_acc
from sgl_kernel_v4.triton._utils import cdiv, ieee_f32_dots, next_power_of_2

__all__ = ["fused_moe"]


@triton.jit(do_not_specialize=["n", "n_blocks", "bound"])  # batch-dependent counts
def _align_kernel(
    ids_ptr,
    n,
    E,
    sorted_ptr,
    bexp_ptr,
    n_blocks,
    bound,
    BM: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """One-program version of :func:`_align_torch` for small ``n`` (decode): expert histogram,
    padded offsets, a stable sort of packed (expert, pair) keys, scatter, block -> expert."""
    offs = tl.arange(0, BLOCK_P)
    m = offs < n
    e = tl.load(ids_ptr + offs, mask=m, other=-1).to(tl.int32)
    valid = m & (e >= 0) & (e < E)
    ee = tl.where(valid, e, BLOCK_E - 1)  # BLOCK_E > E: the last bin is a dummy, never counted
    counts = tl.histogram(ee, BLOCK_E, mask=valid)
    padded = (counts + BM - 1) // BM * BM
    pad_end = tl.cumsum(padded, 0)
    pad_start = pad_end - padded
    start = tl.cumsum(counts, 0) - counts
    key = tl.where(m, ee * 65536 + offs, 2147483647)
    skey = tl.sort(key)
    se = tl.minimum(skey // 65536, BLOCK_E - 1)
    sp = skey % 65536
    dest = tl.gather(pad_start, se, 0) + offs - tl.gather(start, se, 0)
    ok = (offs < n) & (se < E)
    for b0 in range(0, bound, BLOCK_P):
        tl.store(sorted_ptr + b0 + offs, tl.full([BLOCK_P], 0, tl.int32) + n, mask=(b0 + offs) < bound)
    tl.debug_barrier()
    tl.store(sorted_ptr + dest, sp, mask=ok)
    for b0 in range(0, n_blocks, BLOCK_B):
        ob = b0 + tl.arange(0, BLOCK_B)
        cnt = tl.sum((pad_end[None, :] <= (ob * BM)[:, None]).to(tl.int32), 1)
        tl.store(bexp_ptr + ob, tl.where(cnt < E, cnt, -1), mask=ob < n_blocks)


# the multi-program layout (``_align_chunks``): pairs per program, and the cap on
# next_power_of_2(E + 1) for the Triton paths (packed sort keys ``bin * BLOCK_P + index`` stay in
# int32; the [rows, BLOCK_E] tiles stay small); larger E takes ``_align_torch``
_CHUNK_P = 1024
_MAX_BLOCK_E = 4096
#: Above 4,096 pairs on CUDA: the two-launch Triton layout (``True``, the default) or the torch op
#: chain (``SGLANG_V4_MOE_ALIGN_CHUNKS=0``, read once per process). On an H200 the Triton layout
#: cut a 1,024-token flash-8l-32e step from 795 kernels to 331 and its forward's host time from
#: 21.7 to 17.8 ms (benchmark/RESULTS.md). The interpreter always takes the Triton layout.
ALIGN_CHUNKS = os.environ.get("SGLANG_V4_MOE_ALIGN_CHUNKS", "1") == "1"


@triton.jit(do_not_specialize=["n", "E", "bound", "n_chunks"])  # batch-dependent counts
def _align_count_kernel(
    ids_ptr,
    n,
    E,
    table_ptr,
    sorted_ptr,
    bound,
    n_chunks,
    BLOCK_P: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    """Launch 1 of :func:`_align_chunks`, one program per chunk of ``BLOCK_P`` pairs: the chunk's
    expert histogram into row ``pid`` of ``table [n_chunks, BLOCK_E]`` (bins >= E stay 0), and the
    sentinel ``n`` into this program's strided share of ``sorted_ids [bound]``."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK_P)
    p = pid * BLOCK_P + offs
    m = p < n
    e = tl.load(ids_ptr + p, mask=m, other=-1)
    valid = m & (e >= 0) & (e < E)
    ee = tl.where(valid, e, BLOCK_E - 1).to(tl.int32)
    counts = tl.histogram(ee, BLOCK_E, mask=valid)
    tl.store(table_ptr + pid * BLOCK_E + tl.arange(0, BLOCK_E), counts)
    fill = tl.full([BLOCK_P], 0, tl.int32) + n
    for f0 in range(pid * BLOCK_P, bound, n_chunks * BLOCK_P):
        tl.store(sorted_ptr + f0 + offs, fill, mask=(f0 + offs) < bound)


@triton.jit(do_not_specialize=["n", "E", "BM", "n_blocks", "n_chunks"])  # batch-dependent counts
def _align_scatter_kernel(
    ids_ptr,
    n,
    E,
    BM,
    table_ptr,
    sorted_ptr,
    bexp_ptr,
    n_blocks,
    n_chunks,
    BLOCK_P: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """Launch 2 of :func:`_align_chunks` (same grid): sums the histogram table for the expert
    totals and the counts of the chunks before this one, ranks the chunk's pairs stably by a sort
    of packed ``bin * BLOCK_P + index`` keys, scatters their pair ids into ``sorted_ids``, and
    writes its strided share of ``block_expert [n_blocks]``."""
    pid = tl.program_id(0)
    eo = tl.arange(0, BLOCK_E)
    co = tl.arange(0, BLOCK_C)
    total = tl.zeros([BLOCK_E], tl.int32)
    before = tl.zeros([BLOCK_E], tl.int32)
    for c0 in range(0, n_chunks, BLOCK_C):
        c = c0 + co
        rows = tl.load(table_ptr + c[:, None] * BLOCK_E + eo[None, :], mask=(c < n_chunks)[:, None], other=0)
        total += tl.sum(rows, 0)
        before += tl.sum(tl.where((c < pid)[:, None], rows, 0), 0)
    own = tl.load(table_ptr + pid * BLOCK_E + eo)
    padded = (total + BM - 1) // BM * BM
    pad_end = tl.cumsum(padded, 0)
    # destination of the chunk's j-th pair of expert e (0-based, in sorted order):
    # pad_start[e] + before[e] + j, and its position in the chunk's sorted keys is own_start[e] + j
    base = pad_end - padded + before - (tl.cumsum(own, 0) - own)
    offs = tl.arange(0, BLOCK_P)
    p = pid * BLOCK_P + offs
    m = p < n
    e = tl.load(ids_ptr + p, mask=m, other=-1)
    valid = m & (e >= 0) & (e < E)
    ee = tl.where(valid, e, BLOCK_E - 1).to(tl.int32)  # bins >= E sort after every expert
    key = tl.where(m, ee * BLOCK_P + offs, 2147483647)
    skey = tl.sort(key)
    se = tl.minimum(skey // BLOCK_P, BLOCK_E - 1)
    dest = tl.gather(base, se, 0) + offs
    tl.store(sorted_ptr + dest, pid * BLOCK_P + skey % BLOCK_P, mask=se < E)
    bo = tl.arange(0, BLOCK_B)
    for b0 in range(pid * BLOCK_B, n_blocks, n_chunks * BLOCK_B):
        ob = b0 + bo
        cnt = tl.sum((pad_end[None, :] <= (ob * BM)[:, None]).to(tl.int32), 1)
        tl.store(bexp_ptr + ob, tl.where(cnt < E, cnt, -1), mask=ob < n_blocks)


def _align_chunks(
    topk_ids: torch.Tensor, E: int, block_m: int, block_p: int = _CHUNK_P
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_align_torch`'s layout for any pair count in two Triton launches over
    ``cdiv(n, block_p)`` programs (no host synchronisation; the grid depends on the shapes only).

    Args:
        topk_ids: contiguous int expert ids (any shape, ``n`` elements, CUDA or the interpreter).
        E: number of experts (``next_power_of_2(E + 1) <= 4096``).
        block_m: rows per GEMM block.
        block_p: pairs per program (a power of two; a constexpr: one compile per value).

    Returns:
        ``(sorted_ids [n_blocks*block_m] int32, block_expert [n_blocks] int32)`` as
        :func:`_align_torch`.

    Raises:
        ValueError: ``block_p`` not a power of two, or ``next_power_of_2(E + 1) * block_p`` over
            2**31 (the packed sort keys would overflow int32).
    """
    if block_p < 1 or block_p & (block_p - 1) or next_power_of_2(E + 1) * block_p > 2**31:
        raise ValueError(
            f"block_p: expected a power of two with next_power_of_2(E + 1) * block_p <= 2**31, got {block_p}"
        )
    n = topk_ids.numel()
    dev = topk_ids.device
    n_blocks = cdiv(n + E * (block_m - 1), block_m)
    bound = n_blocks * block_m
    n_chunks = max(1, cdiv(n, block_p))
    block_e = next_power_of_2(E + 1)  # BLOCK_E > E: the last bin is a dummy, never counted
    sorted_ids = torch.empty(bound, dtype=torch.int32, device=dev)
    block_expert = torch.empty(n_blocks, dtype=torch.int32, device=dev)
    table = torch.empty((n_chunks, block_e), dtype=torch.int32, device=dev)
    tile = max(1, 8192 // block_e)  # table rows / blocks per [rows, BLOCK_E] step
    _align_count_kernel[(n_chunks,)](
        topk_ids, n, E, table, sorted_ids, bound, n_chunks, BLOCK_P=block_p, BLOCK_E=block_e, num_warps=4
    )
    _align_scatter_kernel[(n_chunks,)](
        topk_ids, n, E, block_m, table, sorted_ids, block_expert, n_blocks, n_chunks,
        BLOCK_P=block_p, BLOCK_E=block_e, BLOCK_C=tile, BLOCK_B=tile, num_warps=8,
    )  # fmt: skip
    return sorted_ids, block_expert


def _align(topk_ids: torch.Tensor, E: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pair layout for the grouped GEMMs (see :func:`_align_torch`): one Triton launch up to 4,096
    pairs (``_align_kernel``), two above (:func:`_align_chunks`, unless :data:`ALIGN_CHUNKS` is
    off); ``_align_torch`` on a CPU tensor outside the interpreter, for
    ``next_power_of_2(E + 1) > 4096``, and above 4,096 pairs on CUDA without :data:`ALIGN_CHUNKS`."""
    if (
        (not topk_ids.is_cuda and os.environ.get("TRITON_INTERPRET") != "1")
        or next_power_of_2(E + 1) > _MAX_BLOCK_E
        or (topk_ids.is_cuda and not ALIGN_CHUNKS and topk_ids.numel() > 4096)
    ):
        return _align_torch(topk_ids, E, block_m)
    topk_ids = topk_ids.reshape(-1)  # a copy only when not contiguous
    n = topk_ids.numel()
    if n > 4096:
        return _align_chunks(topk_ids, E, block_m)
    n_blocks = cdiv(n + E * (block_m - 1), block_m)
    bound = n_blocks * block_m
    sorted_ids = torch.empty(bound, dtype=torch.int32, device=topk_ids.device)
    block_expert = torch.empty(n_blocks, dtype=torch.int32, device=topk_ids.device)
    # at least 256 pairs per sort: every decode batch up to 256 / top-k requests shares one variant
    block_p = max(256, next_power_of_2(n))
    _align_kernel[(1,)](
        topk_ids, n, E, sorted_ids, block_expert, n_blocks, bound,
        BM=block_m, BLOCK_P=block_p, BLOCK_E=next_power_of_2(E + 1), BLOCK_B=64, num_warps=8,
    )  # fmt: skip
    return sorted_ids, block_expert


def _align_torch(topk_ids: torch.Tensor, E: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(sorted_ids [n_blocks*BLOCK_M] int32 pair ids or T*k, block_expert [n_blocks] int32)``."""
    n = topk_ids.numel()
    dev = topk_ids.device
    flat = topk_ids.reshape(-1).to(torch.int64)
    flat = torch.where((flat >= 0) & (flat < E), flat, torch.full_like(flat, E))
    counts = torch.zeros(E + 1, dtype=torch.int64, device=dev)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts[:E] + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    fs = flat[order]
    rank = torch.arange(n, device=dev) - start[fs]
    n_blocks = cdiv(n + E * (block_m - 1), block_m)
    bound = n_blocks * block_m
    dest = torch.where(fs < E, pad_start[fs.clamp(max=E - 1)] + rank, torch.full_like(fs, bound))
    sorted_ids = torch.full((bound + 1,), n, dtype=torch.int32, device=dev)
    sorted_ids.scatter_(0, dest, order.to(torch.int32))
    block_start = torch.arange(n_blocks, device=dev, dtype=torch.int64) * block_m
    be = torch.searchsorted(pad_end, block_start, right=True)
    block_expert = torch.where(be < E, be, torch.full_like(be, -1)).to(torch.int32)
    return sorted_ids[:bound], block_expert


@triton.jit(do_not_specialize=["n_pairs"])  # the batch's (token, expert) pairs
def _gate_up_kernel(
    x_ptr,
    stride_xt,
    w_ptr,
    stride_we,
    stride_wn,
    h_ptr,
    sorted_ptr,
    bexp_ptr,
    n_pairs,
    N_INTER,
    D,
    limit,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    IEEE: tl.constexpr = False,
):
    b = tl.program_id(0)
    e = tl.load(bexp_ptr + b)
    if e >= 0:
        rows = tl.load(sorted_ptr + b * BLOCK_M + tl.arange(0, BLOCK_M))
        rm = rows < n_pairs
        tok = (rows // TOPK).to(tl.int64)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        nm = offs_n < N_INTER
        offs_k = tl.arange(0, BLOCK_K)
        wbase = w_ptr + e.to(tl.int64) * stride_we
        acc_g = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, D, BLOCK_K):
            km = (k0 + offs_k) < D
            a = tl.load(
                x_ptr + tok[:, None] * stride_xt + (k0 + offs_k)[None, :],
                mask=rm[:, None] & km[None, :],
                other=0.0,
            )
            wg = tl.load(
                wbase + offs_n[None, :] * stride_wn + (k0 + offs_k)[:, None],
                mask=nm[None, :] & km[:, None],
                other=0.0,
            )
            wu = tl.load(
                wbase + (N_INTER + offs_n)[None, :] * stride_wn + (k0 + offs_k)[:, None],
                mask=nm[None, :] & km[:, None],
                other=0.0,
            )
            acc_g = dot_acc(a, wg, acc_g, IEEE)
            acc_u = dot_acc(a, wu, acc_u, IEEE)
        g = tl.minimum(acc_g, limit)
        u = tl.minimum(tl.maximum(acc_u, -limit), limit)
        h = g * tl.sigmoid(g) * u
        tl.store(
            h_ptr + rows[:, None].to(tl.int64) * N_INTER + offs_n[None, :],
            h.to(h_ptr.dtype.element_ty),
            mask=rm[:, None] & nm[None, :],
        )


@triton.jit(do_not_specialize=["n_pairs"])
def _down_kernel(
    h_ptr,
    w_ptr,
    stride_we,
    stride_wn,
    y_ptr,
    wt_ptr,
    sorted_ptr,
    bexp_ptr,
    n_pairs,
    N_INTER,
    D,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    IEEE: tl.constexpr = False,
):
    b = tl.program_id(0)
    e = tl.load(bexp_ptr + b)
    if e >= 0:
        rows = tl.load(sorted_ptr + b * BLOCK_M + tl.arange(0, BLOCK_M))
        rm = rows < n_pairs
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        nm = offs_n < D
        offs_k = tl.arange(0, BLOCK_K)
        wbase = w_ptr + e.to(tl.int64) * stride_we
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, N_INTER, BLOCK_K):
            km = (k0 + offs_k) < N_INTER
            a = tl.load(
                h_ptr + rows[:, None].to(tl.int64) * N_INTER + (k0 + offs_k)[None, :],
                mask=rm[:, None] & km[None, :],
                other=0.0,
            )
            w = tl.load(
                wbase + offs_n[None, :] * stride_wn + (k0 + offs_k)[:, None],
                mask=nm[None, :] & km[:, None],
                other=0.0,
            )
            acc = dot_acc(a, w, acc, IEEE)
        wt = tl.load(wt_ptr + rows, mask=rm, other=0.0).to(tl.float32)
        acc = acc * wt[:, None]
        tok = (rows // TOPK).to(tl.int64)
        tl.atomic_add(
            y_ptr + tok[:, None] * D + offs_n[None, :], acc, mask=rm[:, None] & nm[None, :], sem="relaxed"
        )


def _config(n_pairs: int, E: int, elem_bytes: int) -> dict[str, int]:
    """Tiles by tokens per expert (H200 sweep in benchmark/RESULTS.md); fewer stages for fp32."""
    per_expert = n_pairs / max(E, 1)
    if per_expert <= 16:
        cfg = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4}
    elif per_expert <= 64:
        cfg = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4}
    else:
        cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
    if elem_bytes > 2:
        cfg.update(BLOCK_K=32, num_stages=2)
    return cfg


def fused_moe(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    swiglu_limit: float,
    *,
    config: dict[str, int] | None = None,
) -> torch.Tensor:
    """Routed-expert MLP with clamped SwiGLU, weighted sum over the top-k (op table entry 8).

    Args:
        x: ``[T, D]`` bf16/fp16/fp32 (last dim contiguous).
        w_gate_up: ``[E, 2I, D]`` (gate rows then up rows; last dim contiguous), x's dtype.
        w_down: ``[E, D, I]`` (last dim contiguous), x's dtype.
        topk_ids: ``[T, k]`` int expert ids (ids outside ``[0, E)`` are skipped).
        topk_weights: ``[T, k]`` fp32 routing weights.
        swiglu_limit: clamp limit (V4: 10.0).
        config: tile override ``{BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages}``.

    Returns:
        ``[T, D]`` in x's dtype (accumulated in fp32). fp32 products are IEEE unless torch allows
        TF32 (:func:`sgl_kernel_v4.triton._utils.ieee_f32_dots`).

    Raises:
        ValueError: shapes/dtypes inconsistent.
    """
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(f"x: expected [T, D] with a contiguous last dim, got {tuple(x.shape)}")
    T, D = x.shape
    if w_gate_up.dim() != 3 or w_gate_up.shape[2] != D or w_gate_up.shape[1] % 2 or w_gate_up.stride(2) != 1:
        raise ValueError(
            f"w_gate_up: expected [E, 2I, {D}] (last dim contiguous), got {tuple(w_gate_up.shape)}"
        )
    E, I2, _ = w_gate_up.shape
    inter = I2 // 2
    if w_down.shape != (E, D, inter) or w_down.stride(2) != 1:
        raise ValueError(
            f"w_down: expected [{E}, {D}, {inter}] (last dim contiguous), got {tuple(w_down.shape)}"
        )
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T or topk_weights.shape != topk_ids.shape:
        raise ValueError(f"topk_ids/topk_weights: expected equal [{T}, k], got {tuple(topk_ids.shape)}")
    if w_gate_up.dtype != x.dtype or w_down.dtype != x.dtype:
        raise ValueError(
            f"w_gate_up/w_down: dtype must match x ({x.dtype}), got {w_gate_up.dtype}/{w_down.dtype}"
        )
    k = topk_ids.shape[1]
    n_pairs = T * k
    if n_pairs == 0:
        return torch.zeros_like(x)
    cfg = dict(config or _config(n_pairs, E, x.element_size()))
    bm, bn, bk = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("BLOCK_K")
    sorted_ids, block_expert = _align(topk_ids.contiguous(), E, bm)
    n_blocks = block_expert.shape[0]
    ieee = ieee_f32_dots(x.dtype)
    h = torch.empty((n_pairs, inter), dtype=x.dtype, device=x.device)
    _gate_up_kernel[(n_blocks, cdiv(inter, bn))](
        x, x.stride(0), w_gate_up, w_gate_up.stride(0), w_gate_up.stride(1), h, sorted_ids, block_expert,
        n_pairs, inter, D, float(swiglu_limit), TOPK=k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, IEEE=ieee, **cfg,
    )  # fmt: skip
    y = torch.zeros((T, D), dtype=torch.float32, device=x.device)  # fp32 atomics sum the k slots
    wt = topk_weights.reshape(-1).float().contiguous()
    _down_kernel[(n_blocks, cdiv(D, bn))](
        h, w_down, w_down.stride(0), w_down.stride(1), y, wt, sorted_ids, block_expert,
        n_pairs, inter, D, TOPK=k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, IEEE=ieee, **cfg,
    )  # fmt: skip
    return y.to(x.dtype)

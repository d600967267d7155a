"""Fused MoE over FP4 routed experts (Triton): e2m1 x ue8m0 weights dequantized in the kernel.

Format: :mod:`sgl_kernel_v4.ref.moe_fp4`; tile decode: :mod:`.fp4_tile`. The weight tiles are
read packed (half a byte per weight plus a scale byte per 32: 0.53 B per weight instead of 2),
decoded in registers into bf16 (exact) and multiplied on the tensor cores as ``W_tile @ x^T``:
the decoded weights are the MMA's register operand (64 weight rows per warp group, no
shared-memory round trip), the tokens its narrow side (16 and up), and the even inputs of a tile
meet the even activation columns, the odd the odd (two dots of half depth), so nibbles are never
interleaved back into K order. With 64-row tiles and this decode the kernels spill nothing
(``test_kernels_compile.py``); compiled for sm_90 the two-launch gate/up kernel holds 189
registers per thread, the fused one 140, the token down kernel 168. The same routing, SwiGLU clamp and
hash-routing ids as the bf16 :mod:`.moe`; ids outside ``[0, E)`` contribute nothing.

Two layouts of the work, by how many (token, slot) pairs share an expert (tiles and layout:
:mod:`.moe_fp4_tiles`, its names re-exported here):

* **pair mode** (decode, about one pair per touched expert, e.g. bs 1): no sort. The gate/up
  kernel runs one program per (pair, N tile), reading the expert id of its pair directly; the
  down kernel runs one program per (token, N tile) and loops over the token's ``k`` slots, so it
  sums the slots in registers and writes ``y`` in x's dtype: two launches in all, no atomics, no
  zero-fill, no cast. Named alternatives (:data:`DECODE_VARIANTS`, one selected by
  :data:`DECODE_DEFAULT`) give the few touched experts more programs: gate and up rows interleaved
  in one tile (``GU_FUSED``), and a down kernel split over slots and K (``DOWN_SPLIT``) that writes
  fp32 partials summed by a third launch, in a fixed order (no atomics).
* **expert mode** (several pairs per expert, prefill): the pairs are sorted by expert into
  ``BLOCK_M``-row blocks (``moe._align``, as the bf16 MoE), each weight tile is decoded once per
  block, and the down kernel adds its rows, scaled by the routing weights, into an fp32 ``[T, D]``
  with atomics (the sum over the ``k`` slots).

**Product** (``SGLANG_V4_MOE_FP4_MMA``, read once; the ``FP8_MMA`` config key per call): ``bf16``
(default) as above, exact weights times the activations in their dtype; ``fp8``
(:mod:`.fp4_fp8`): the weights decoded to e4m3 bytes (exact), the activations (x for gate/up, the
SwiGLU output h for down) quantized in the kernel to e4m3 per row and 128-column group with
power-of-two scales, bit for bit as ``fp8_gemm.act_quant(pow2=True)``, and multiplied on the fp8
tensor cores (twice the bf16 rate, half the MMAs, four weights per decoded register). Accuracy: it
adds that activation quantization (about 2**-5 relative rounding per element, as a w8a8 linear);
K steps are multiples of 128.

Neither synchronises with the host, so decode steps are CUDA-graph capturable.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.ref.moe_fp4 import check_moe_fp4_args
from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2

from .fp4_fp8 import MMA_ENV, default_mma, dot_fp4_fp8, fp8_code
from .fp4_tile import fp4_tile, fp4_words_tile, permute_fp4_k
from .moe import _align
from .moe_fp4_tiles import (  # re-exported: the warm-up, tests and benchmarks import them from here
    DECODE_DEFAULT,
    DECODE_VARIANTS,
    _config,
    _use_pair_mode,  # noqa: F401
    tile_class_token_counts,
)

__all__ = [
    "DECODE_DEFAULT",
    "DECODE_VARIANTS",
    "MMA_ENV",
    "default_mma",
    "fused_moe_fp4",
    "tile_class_token_counts",
]

#: Keys :func:`fused_moe_fp4`'s ``config`` accepts.
_CONFIG_KEYS = frozenset(
    {"BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages", "PAIR", "DOWN_STAGES", "GU_FUSED",
     "DOWN_SPLIT", "DOWN_BLOCK_N", "DOWN_BLOCK_K", "DOWN_WARPS", "FP8_MMA", "FP8_DECODE", "FP8_CVT",
     "FP4_WORDS"}
)  # fmt: skip
_SUM_BLOCK = 256  # columns per program of the partial-sum kernel


@triton.jit
def _dot_fp4(a, a_rows, a_rmask, w_rows, s_rows, row_mask, k0, K, acc, BLOCK_N: tl.constexpr,
             BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, USE_ASM: tl.constexpr, FP8_MMA: tl.constexpr,
             ONE_ROW: tl.constexpr):  # fmt: skip
    """``acc + (a @ W[:, k0 : k0 + BLOCK_K]^T)^T`` for activations ``a [BLOCK_M, BLOCK_K]``, with
    ``acc [BLOCK_N, BLOCK_M]``: computed as ``W @ a^T`` so that the decoded weights are the tensor
    cores' register operand (no shared-memory round trip for them) and the tokens the other side
    (any count from 16 up). ``FP8_MMA`` (:func:`.fp4_fp8.fp8_code`; 0: bf16 MMA on ``a``): the fp8 product
    of :func:`.fp4_fp8.dot_fp4_fp8`, which reads and quantizes the activations itself from the row
    pointers ``a_rows [BLOCK_M]`` (rows ``a_rmask``, inputs ``< K``; ``ONE_ROW``: the scalar pointer
    and flag of tile row 0, the only token of a pair-mode tile); ``a`` is then unused. ``USE_ASM``
    2 / 3 (``FP4_WORDS``; 3 with the PTX scale multiply): the word decode of
    :func:`.fp4_tile.fp4_words_tile` and one dot in its K order, where the step is whole
    (``EVEN_K``, ``BLOCK_K`` a multiple of 128); elsewhere the decode of ``USE_ASM % 2``."""
    if FP8_MMA:
        acc = dot_fp4_fp8(a_rows, a_rmask, K, w_rows, s_rows, row_mask, k0, K, acc, BLOCK_N, BLOCK_K, EVEN_K,
                          USE_ASM, (FP8_MMA >> 1) & 3, (FP8_MMA >> 3) & 1, ONE_ROW)  # fmt: skip
    elif USE_ASM >= 2 and EVEN_K and BLOCK_K % 128 == 0:
        w = fp4_words_tile(w_rows, s_rows, row_mask, k0, BLOCK_N, BLOCK_K, USE_ASM == 3, a.dtype)
        acc = tl.dot(w, tl.trans(permute_fp4_k(a, BLOCK_K)), acc)
    else:
        BM: tl.constexpr = a.shape[0]
        a_even, a_odd = tl.split(tl.reshape(a, (BM, BLOCK_K // 2, 2)))
        lo, hi = fp4_tile(
            w_rows, s_rows, row_mask, k0, K, BLOCK_N, BLOCK_K, EVEN_K, USE_ASM % 2 == 1, a.dtype
        )
        acc = tl.dot(lo, tl.trans(a_even), acc)
        acc = tl.dot(hi, tl.trans(a_odd), acc)
    return acc


@triton.jit(do_not_specialize=["n_pairs"])  # the batch's (token, expert) pairs: no variant per count
def _gate_up_fp4_kernel(
    x_ptr,
    stride_xt,
    w_ptr,
    s_ptr,
    stride_we,
    stride_wn,
    stride_se,
    stride_sn,
    h_ptr,
    ids_ptr,
    sorted_ptr,
    bexp_ptr,
    n_pairs,
    E,
    N_INTER,
    D,
    limit,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PAIR_MODE: tl.constexpr,
    EVEN_K: tl.constexpr,
    USE_ASM: tl.constexpr,
    GU_FUSED: tl.constexpr = False,
    FP8_MMA: tl.constexpr = 0,
):
    """``GU_FUSED``: one ``BLOCK_N``-row tile holds ``BLOCK_N / 2`` gate rows and the matching up rows,
    interleaved (tile row ``2r`` is gate row ``r``, ``2r + 1`` up row ``r``): one dot per K step and
    twice the programs of the split layout (two ``BLOCK_N``-row tiles, one dot each)."""
    b = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    if PAIR_MODE:  # block b = pair b, alone in row 0
        e = tl.load(ids_ptr + b).to(tl.int32)
        valid = (e >= 0) & (e < E)
        rows = tl.where(offs_m == 0, b, n_pairs)
    else:
        e = tl.load(bexp_ptr + b)
        valid = e >= 0
        rows = tl.load(sorted_ptr + b * BLOCK_M + offs_m)
    if valid:
        rm = rows < n_pairs
        tok = (rows // TOPK).to(tl.int64)
        e64 = e.to(tl.int64)
        offs_k = tl.arange(0, BLOCK_K)
        x_rows = (x_ptr + tok * stride_xt)[:, None]
        if PAIR_MODE:  # the fp8 product's activation rows: the pair's token alone
            a_src = x_ptr + (b // TOPK).to(tl.int64) * stride_xt
            a_ok = valid
        else:
            a_src = x_ptr + tok * stride_xt
            a_ok = rm
        if GU_FUSED:
            HALF_N: tl.constexpr = BLOCK_N // 2
            offs_c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
            w_row = (offs_c // 2 + (offs_c % 2) * N_INTER).to(tl.int64)
            cm = offs_c // 2 < N_INTER
            c_rows = w_ptr + e64 * stride_we + w_row * stride_wn
            cs_rows = s_ptr + e64 * stride_se + w_row * stride_sn
            acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
            for k0 in range(0, D, BLOCK_K):
                if EVEN_K:
                    am = rm[:, None]
                else:
                    am = rm[:, None] & ((k0 + offs_k) < D)[None, :]
                a = tl.load(x_rows + (k0 + offs_k)[None, :], mask=am, other=0.0)
                acc = _dot_fp4(a, a_src, a_ok, c_rows, cs_rows, cm, k0, D, acc, BLOCK_N, BLOCK_K, EVEN_K, USE_ASM,
                               FP8_MMA, PAIR_MODE)  # fmt: skip
            acc_g, acc_u = tl.split(tl.reshape(tl.trans(acc), (BLOCK_M, HALF_N, 2)))
            offs_n = tl.program_id(1) * HALF_N + tl.arange(0, HALF_N)
        else:
            offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
            nm = offs_n < N_INTER
            g_rows = w_ptr + e64 * stride_we + offs_n.to(tl.int64) * stride_wn
            u_rows = g_rows + N_INTER * stride_wn
            gs_rows = s_ptr + e64 * stride_se + offs_n.to(tl.int64) * stride_sn
            us_rows = gs_rows + N_INTER * stride_sn
            acc_gt = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
            acc_ut = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
            for k0 in range(0, D, BLOCK_K):
                if EVEN_K:
                    am = rm[:, None]
                else:
                    am = rm[:, None] & ((k0 + offs_k) < D)[None, :]
                a = tl.load(x_rows + (k0 + offs_k)[None, :], mask=am, other=0.0)
                acc_gt = _dot_fp4(a, a_src, a_ok, g_rows, gs_rows, nm, k0, D, acc_gt, BLOCK_N, BLOCK_K, EVEN_K,
                                  USE_ASM, FP8_MMA, PAIR_MODE)  # fmt: skip
                acc_ut = _dot_fp4(a, a_src, a_ok, u_rows, us_rows, nm, k0, D, acc_ut, BLOCK_N, BLOCK_K, EVEN_K,
                                  USE_ASM, FP8_MMA, PAIR_MODE)  # fmt: skip
            acc_g = tl.trans(acc_gt)
            acc_u = tl.trans(acc_ut)
        nm = offs_n < N_INTER
        g = tl.minimum(acc_g, limit)
        u = tl.minimum(tl.maximum(acc_u, -limit), limit)
        h = g * tl.sigmoid(g) * u
        tl.store(
            h_ptr + rows[:, None].to(tl.int64) * N_INTER + offs_n[None, :],
            h.to(h_ptr.dtype.element_ty),
            mask=rm[:, None] & nm[None, :],
        )


@triton.jit(do_not_specialize=["n_pairs"])
def _down_fp4_kernel(
    h_ptr,
    w_ptr,
    s_ptr,
    stride_we,
    stride_wn,
    stride_se,
    stride_sn,
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
    EVEN_K: tl.constexpr,
    USE_ASM: tl.constexpr,
    FP8_MMA: tl.constexpr = 0,
):
    """Expert mode: rows of a sorted block, fp32 atomics into ``y [T, D]``."""
    b = tl.program_id(0)
    e = tl.load(bexp_ptr + b)
    if e >= 0:
        rows = tl.load(sorted_ptr + b * BLOCK_M + tl.arange(0, BLOCK_M))
        rm = rows < n_pairs
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        nm = offs_n < D
        e64 = e.to(tl.int64)
        w_rows = w_ptr + e64 * stride_we + offs_n.to(tl.int64) * stride_wn
        s_rows = s_ptr + e64 * stride_se + offs_n.to(tl.int64) * stride_sn
        offs_k = tl.arange(0, BLOCK_K)
        h_row0 = h_ptr + rows.to(tl.int64) * N_INTER
        h_rows = h_row0[:, None]
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
        for k0 in range(0, N_INTER, BLOCK_K):
            if EVEN_K:
                am = rm[:, None]
            else:
                am = rm[:, None] & ((k0 + offs_k) < N_INTER)[None, :]
            a = tl.load(h_rows + (k0 + offs_k)[None, :], mask=am, other=0.0)
            acc = _dot_fp4(a, h_row0, rm, w_rows, s_rows, nm, k0, N_INTER, acc, BLOCK_N, BLOCK_K,
                           EVEN_K, USE_ASM, FP8_MMA, False)  # fmt: skip
        wt = tl.load(wt_ptr + rows, mask=rm, other=0.0).to(tl.float32)
        acc = tl.trans(acc) * wt[:, None]
        tok = (rows // TOPK).to(tl.int64)
        tl.atomic_add(
            y_ptr + tok[:, None] * D + offs_n[None, :], acc, mask=rm[:, None] & nm[None, :], sem="relaxed"
        )


@triton.jit
def _down_fp4_token_kernel(
    h_ptr,
    w_ptr,
    s_ptr,
    stride_we,
    stride_wn,
    stride_se,
    stride_sn,
    y_ptr,
    stride_yt,
    ids_ptr,
    wt_ptr,
    E,
    N_INTER,
    D,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    USE_ASM: tl.constexpr,
    FP8_MMA: tl.constexpr = 0,
):
    """Pair mode: one token (row 0 of the tile), its ``TOPK`` slots summed in registers. One loop
    over (slot, K step), so the software pipeline runs across slot boundaries."""
    t = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    nm = offs_n < D
    offs_m = tl.arange(0, BLOCK_M)
    row0 = offs_m == 0
    offs_k = tl.arange(0, BLOCK_K)
    n_k = tl.cdiv(N_INTER, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    part = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    for it in range(0, TOPK * n_k):
        j = it // n_k
        k0 = (it - j * n_k) * BLOCK_K
        pair = t * TOPK + j
        e = tl.load(ids_ptr + pair).to(tl.int32)
        e64 = tl.where((e >= 0) & (e < E), e, 0).to(tl.int64)
        # ids outside [0, E) read nothing (vector compares: the interpreter mishandles a scalar mask)
        ev_m = (offs_m * 0 + e >= 0) & (offs_m * 0 + e < E)
        ev_n = (offs_n * 0 + e >= 0) & (offs_n * 0 + e < E)
        w_rows = w_ptr + e64 * stride_we + offs_n.to(tl.int64) * stride_wn
        s_rows = s_ptr + e64 * stride_se + offs_n.to(tl.int64) * stride_sn
        h_row = h_ptr + pair.to(tl.int64) * N_INTER
        am = (row0 & ev_m)[:, None] & ((k0 + offs_k) < N_INTER)[None, :]
        a = tl.load(h_row + (k0 + offs_k)[None, :] + offs_m[:, None] * 0, mask=am, other=0.0)
        part = _dot_fp4(a, h_row, (e >= 0) & (e < E), w_rows, s_rows, nm & ev_n, k0, N_INTER, part, BLOCK_N,
                        BLOCK_K, EVEN_K, USE_ASM, FP8_MMA, True)  # fmt: skip
        last = k0 + BLOCK_K >= N_INTER
        wt = tl.load(wt_ptr + pair).to(tl.float32)
        acc = tl.where(last, acc + part * wt, acc)
        part = tl.where(last, 0.0, part)
    tl.store(
        y_ptr + t.to(tl.int64) * stride_yt + offs_n[None, :] + offs_m[:, None] * 0,
        tl.trans(acc).to(y_ptr.dtype.element_ty),
        mask=row0[:, None] & nm[None, :],
    )


@triton.jit
def _down_fp4_split_kernel(
    h_ptr,
    w_ptr,
    s_ptr,
    stride_we,
    stride_wn,
    stride_se,
    stride_sn,
    part_ptr,
    ids_ptr,
    wt_ptr,
    E,
    N_INTER,
    D,
    SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    USE_ASM: tl.constexpr,
    FP8_MMA: tl.constexpr = 0,
):
    """Pair mode, split over slots and K: program ``(pair * SPLIT + s, N tile)`` multiplies K steps
    ``s * ceil(n_k / SPLIT) ..`` of its pair's row of ``h`` (row 0 of the tile) and writes the
    routing-weighted fp32 partial to row ``pair * SPLIT + s`` of ``part [T * TOPK * SPLIT, D]``
    (zeros for an id outside ``[0, E)``); :func:`_sum_rows_kernel` adds a token's rows."""
    pid = tl.program_id(0)
    pair = pid // SPLIT
    split = pid - pair * SPLIT
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    nm = offs_n < D
    offs_m = tl.arange(0, BLOCK_M)
    row0 = offs_m == 0
    acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    e = tl.load(ids_ptr + pair).to(tl.int32)
    if (e >= 0) & (e < E):
        e64 = e.to(tl.int64)
        w_rows = w_ptr + e64 * stride_we + offs_n.to(tl.int64) * stride_wn
        s_rows = s_ptr + e64 * stride_se + offs_n.to(tl.int64) * stride_sn
        h_row = h_ptr + pair.to(tl.int64) * N_INTER
        offs_k = tl.arange(0, BLOCK_K)
        per = tl.cdiv(tl.cdiv(N_INTER, BLOCK_K), SPLIT) * BLOCK_K
        k_lo = split * per
        k_hi = tl.minimum(k_lo + per, N_INTER)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            if EVEN_K:
                am = row0[:, None] & (offs_k >= 0)[None, :]
            else:
                am = row0[:, None] & ((k0 + offs_k) < N_INTER)[None, :]
            a = tl.load(h_row + (k0 + offs_k)[None, :] + offs_m[:, None] * 0, mask=am, other=0.0)
            acc = _dot_fp4(a, h_row, pair >= 0, w_rows, s_rows, nm, k0, N_INTER, acc, BLOCK_N, BLOCK_K,
                           EVEN_K, USE_ASM, FP8_MMA, True)  # fmt: skip
        acc = acc * tl.load(wt_ptr + pair).to(tl.float32)
    tl.store(
        part_ptr + pid.to(tl.int64) * D + offs_n[None, :] + offs_m[:, None] * 0,
        tl.trans(acc),
        mask=row0[:, None] & nm[None, :],
    )


@triton.jit
def _sum_rows_kernel(
    part_ptr, y_ptr, stride_yt, D, R: tl.constexpr, R_POW2: tl.constexpr, BLOCK: tl.constexpr
):
    """``y[t, n] = sum_r part[t * R + r, n]`` (fp32, in row order), cast to y's dtype."""
    t = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    offs_r = tl.arange(0, R_POW2)
    m = (offs_r < R)[:, None] & (offs < D)[None, :]
    p = tl.load(part_ptr + (t.to(tl.int64) * R + offs_r[:, None]) * D + offs[None, :], mask=m, other=0.0)
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs, tl.sum(p, axis=0).to(y_ptr.dtype.element_ty),
             mask=offs < D)  # fmt: skip


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def fused_moe_fp4(
    x: torch.Tensor,
    w13: torch.Tensor,
    w13_scale: torch.Tensor,
    w2: torch.Tensor,
    w2_scale: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    swiglu_limit: float,
    *,
    config: dict[str, int] | None = None,
) -> torch.Tensor:
    """Routed-expert MLP over FP4 experts, clamped SwiGLU, weighted sum over the top-k.

    Args:
        x: ``[T, D]`` bf16/fp16 (fp32 under the interpreter), last dim contiguous.
        w13, w13_scale: ``[E, 2I, D/2]`` packed e2m1 (uint8 / int8), ``[E, 2I, D/32]`` ue8m0 (uint8).
        w2, w2_scale: ``[E, D, I/2]``, ``[E, D, I/32]``.
        topk_ids: ``[T, k]`` expert ids (ids outside ``[0, E)`` are skipped).
        topk_weights: ``[T, k]`` fp32 routing weights.
        swiglu_limit: clamp limit (V4: 10.0).
        config: tile override ``{BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages}`` and optionally
            ``PAIR`` (1: pair mode, 0: expert mode; default :func:`_use_pair_mode`) and the keys of
            :data:`DECODE_VARIANTS` (``GU_FUSED``, ``DOWN_SPLIT`` (pair mode only),
            ``DOWN_BLOCK_N``, ``DOWN_BLOCK_K``, ``DOWN_STAGES``, ``DOWN_WARPS``); merged over the
            default. BLOCK_K / DOWN_BLOCK_K multiples of 32, BLOCK_N / DOWN_BLOCK_N of 16, BLOCK_M
            at least 16. ``FP8_MMA`` (1: the fp8 product of :mod:`.fp4_fp8`, activations quantized;
            0: bf16; default :func:`.fp4_fp8.default_mma`), with ``FP8_DECODE`` (0 ``shift``, 1 ``table``,
            2 ``fold``: exact only if :func:`.fp4_fp8.fold_exact` holds for the scales)
            and ``FP8_CVT`` (1: the GPU's e4m3 conversion); in fp8 the K steps are multiples of
            128 (a default that is not becomes 128). ``FP4_WORDS`` (1: the bf16 product with the
            word decode of :func:`.fp4_tile.fp4_words_tile` where a K step is a whole multiple of
            128 inside K; 4-byte aligned weights; not with ``FP8_MMA``): the pair-mode default
            without ``config`` (dropped under the fp8 product); a given ``config`` without the key
            runs the byte decode (``DECODE_VARIANTS["fused_dsplit1"]`` is that layout's byte form).

    Returns:
        ``[T, D]`` in x's dtype (fp32 accumulation).

    Raises:
        ValueError: shapes/dtypes inconsistent, or a bad ``config`` (unknown key, tile size,
            ``FP4_WORDS`` with the fp8 product), or a bad ``$SGLANG_V4_MOE_FP4_MMA``.
    """
    T, D, E, inter = check_moe_fp4_args(x, w13, w13_scale, w2, w2_scale, topk_ids, topk_weights)
    if x.stride(1) != 1:
        raise ValueError("x: last dim must be contiguous")
    for name, t in (("w13", w13), ("w2", w2), ("w13_scale", w13_scale), ("w2_scale", w2_scale)):
        if t.stride(2) != 1:
            raise ValueError(f"{name}: last dim must be contiguous")
    k = topk_ids.shape[1]
    n_pairs = T * k
    if n_pairs == 0:
        return torch.zeros_like(x)
    cfg = dict(_config(n_pairs, E, k, x.element_size()))
    if config:
        unknown = set(config) - _CONFIG_KEYS
        if unknown:
            raise ValueError(f"config: unknown keys {sorted(unknown)} (known: {sorted(_CONFIG_KEYS)})")
    fp8 = fp8_code(dict(config or {}), x, _interpreting())
    if fp8:  # an activation group (128) never spans two K steps
        cfg.update({key: 128 for key in ("BLOCK_K", "DOWN_BLOCK_K") if cfg.get(key, 128) % 128})
    cfg.update(config or {})
    if config and "FP4_WORDS" not in config:
        cfg.pop("FP4_WORDS", None)  # a given configuration names its decode: without the key, bytes
    fp8 = fp8_code(cfg, x, _interpreting())
    bm, bn, bk, pair = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("BLOCK_K"), bool(cfg.pop("PAIR"))
    fused = bool(cfg.pop("GU_FUSED", 0))
    split = int(cfg.pop("DOWN_SPLIT", 0))
    dbn, dbk = cfg.pop("DOWN_BLOCK_N", bn), cfg.pop("DOWN_BLOCK_K", bk)
    down_cfg = {
        "num_warps": cfg.pop("DOWN_WARPS", cfg["num_warps"]),
        "num_stages": cfg.pop("DOWN_STAGES", cfg["num_stages"]),
    }
    if bk % 32 or dbk % 32 or bm < 16 or min(bn, dbn) < 16 or bn % 16 or dbn % 16:
        raise ValueError(
            "config: BLOCK_K / DOWN_BLOCK_K must be multiples of 32, BLOCK_M >= 16, BLOCK_N / DOWN_BLOCK_N "
            f"multiples of 16, got {bk}, {dbk}, {bm}, {bn}, {dbn}"
        )
    if fp8 and (bk % 128 or dbk % 128):
        raise ValueError(
            f"config: the fp8 product needs BLOCK_K / DOWN_BLOCK_K multiples of 128, got {bk}, {dbk}"
        )
    if split < 0 or (split and not pair):
        raise ValueError(f"config: DOWN_SPLIT must be >= 0, and 0 outside pair mode (PAIR=0), got {split}")
    use_asm = (fp8 or x.dtype == torch.bfloat16) and x.is_cuda and not _interpreting()
    words = bool(cfg.pop("FP4_WORDS", 0))
    if words and fp8:
        if (config or {}).get("FP4_WORDS"):
            raise ValueError(
                "config: FP4_WORDS (the bf16 word decode) and the fp8 product exclude each other"
            )
        words = False  # the decode default's word form: the fp8 product decodes its own way
    if words and all(
        t.stride(0) % 4 == 0 and t.stride(1) % 4 == 0 and t.data_ptr() % 4 == 0 for t in (w13, w2)
    ):
        use_asm = 3 if use_asm else 2  # the word decode where a step is whole (see _dot_fp4)
    ids = topk_ids.contiguous()
    wt = topk_weights.reshape(-1).float().contiguous()
    h = torch.empty((n_pairs, inter), dtype=x.dtype, device=x.device)
    if pair:
        n_blocks, sorted_ids, block_expert = n_pairs, ids, ids  # the last two unused
    else:
        sorted_ids, block_expert = _align(ids, E, bm)
        n_blocks = block_expert.shape[0]
    _gate_up_fp4_kernel[(n_blocks, cdiv(2 * inter if fused else inter, bn))](
        x, x.stride(0), w13, w13_scale, w13.stride(0), w13.stride(1), w13_scale.stride(0),
        w13_scale.stride(1), h, ids, sorted_ids, block_expert, n_pairs, E, inter, D, float(swiglu_limit),
        TOPK=k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, PAIR_MODE=pair, EVEN_K=D % bk == 0, USE_ASM=use_asm,
        GU_FUSED=fused, FP8_MMA=fp8, **cfg,
    )  # fmt: skip
    even_k = inter % dbk == 0
    w2_args = (w2, w2_scale, w2.stride(0), w2.stride(1), w2_scale.stride(0), w2_scale.stride(1))
    if pair and split:
        part = torch.empty((n_pairs * split, D), dtype=torch.float32, device=x.device)
        _down_fp4_split_kernel[(n_pairs * split, cdiv(D, dbn))](
            h, *w2_args, part, ids, wt, E, inter, D, SPLIT=split, BLOCK_M=bm, BLOCK_N=dbn, BLOCK_K=dbk,
            EVEN_K=even_k, USE_ASM=use_asm, FP8_MMA=fp8, **down_cfg,
        )  # fmt: skip
        y = torch.empty_like(x)
        r = k * split
        _sum_rows_kernel[(T, cdiv(D, _SUM_BLOCK))](
            part, y, y.stride(0), D, R=r, R_POW2=next_power_of_2(r), BLOCK=_SUM_BLOCK, num_warps=4
        )
        return y
    if pair:
        y = torch.empty_like(x)
        _down_fp4_token_kernel[(T, cdiv(D, dbn))](
            h, *w2_args, y, y.stride(0), ids, wt, E, inter, D, TOPK=k, BLOCK_M=bm, BLOCK_N=dbn, BLOCK_K=dbk,
            EVEN_K=even_k, USE_ASM=use_asm, FP8_MMA=fp8, **down_cfg,
        )  # fmt: skip
        return y
    y = torch.zeros((T, D), dtype=torch.float32, device=x.device)
    _down_fp4_kernel[(n_blocks, cdiv(D, dbn))](
        h, *w2_args, y, wt, sorted_ids, block_expert, n_pairs, inter, D, TOPK=k, BLOCK_M=bm, BLOCK_N=dbn,
        BLOCK_K=dbk, EVEN_K=even_k, USE_ASM=use_asm, FP8_MMA=fp8, **down_cfg,
    )  # fmt: skip
    return y.to(x.dtype)

"""Fused MoE over FP4 routed experts (Triton): e2m1 x ue8m0 weights dequantized in the kernel.

Format: :mod:`sgl_kernel_v4.ref.moe_fp4` (two e2m1 values per byte along the input dim, one
power-of-two scale byte per 32 inputs). Same three steps as the bf16 :mod:`.moe` (whose pair
layout ``_align`` this reuses): sort the ``T*k`` (token, slot) pairs by expert into ``BLOCK_M``
row blocks, a gate/up grouped GEMM with the clamped-SwiGLU epilogue, a down grouped GEMM whose
rows are scaled by the routing weight and summed over the k slots with fp32 atomics.

The weight tiles are read packed (``BLOCK_K / 2`` bytes per row plus one scale byte per 32
inputs: 0.53 B per weight instead of 2) and decoded in registers: a nibble's magnitude is
``m / 2`` (``e == 0``) or ``(2 + m) * 2 ** (e - 2)``, the scale ``2 ** (b - 127)`` is built from its
bits, and the low / high nibble values are interleaved back into K order with ``join`` +
``reshape``. Each decoded value has at most two significant bits, so the cast to the activation
dtype is exact and the products run on bf16 tensor cores. The same kernels serve decode
(CUDA-graph capturable: no host synchronisation) and prefill; MXFP4 tensor-core instructions
(Blackwell) are not used on Hopper.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.ref.moe_fp4 import check_moe_fp4_args

from .moe import _align

__all__ = ["fused_moe_fp4"]


@triton.jit
def _e2m1_x2(c):
    """Nibble codes (int32) -> 2 * their e2m1 value, as int32 (exact)."""
    e = (c >> 1) & 3
    m = c & 1
    mag2 = tl.where(e == 0, m, (2 + m) << tl.maximum(e - 1, 0))
    return tl.where((c & 8) != 0, -mag2, mag2)


@triton.jit
def _fp4_tile(w_rows, s_rows, row_mask, k0, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Dequantized ``[BLOCK_N, BLOCK_K]`` fp32 tile at inputs ``k0 ..`` of the rows ``w_rows``
    (pointers to each row's packed bytes) with scale rows ``s_rows``."""
    offs_b = k0 // 2 + tl.arange(0, BLOCK_K // 2)  # byte j holds inputs 2j (low) and 2j+1 (high)
    mask = row_mask[:, None] & (offs_b < K // 2)[None, :]
    p = tl.load(w_rows[:, None] + offs_b[None, :], mask=mask, other=0).to(tl.int32) & 0xFF
    sb = tl.load(s_rows[:, None] + (offs_b // 16)[None, :], mask=mask, other=0).to(tl.int32) & 0xFF
    half_scale = (sb << 23).to(tl.float32, bitcast=True) * 0.5
    lo = _e2m1_x2(p & 15).to(tl.float32) * half_scale
    hi = _e2m1_x2(p >> 4).to(tl.float32) * half_scale
    return tl.reshape(tl.join(lo, hi), (BLOCK_N, BLOCK_K))


@triton.jit
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
):
    b = tl.program_id(0)
    e = tl.load(bexp_ptr + b)
    if e >= 0:
        rows = tl.load(sorted_ptr + b * BLOCK_M + tl.arange(0, BLOCK_M))
        rm = rows < n_pairs
        tok = (rows // TOPK).to(tl.int64)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        nm = offs_n < N_INTER
        e64 = e.to(tl.int64)
        g_rows = w_ptr + e64 * stride_we + offs_n.to(tl.int64) * stride_wn
        u_rows = g_rows + N_INTER * stride_wn
        gs_rows = s_ptr + e64 * stride_se + offs_n.to(tl.int64) * stride_sn
        us_rows = gs_rows + N_INTER * stride_sn
        offs_k = tl.arange(0, BLOCK_K)
        acc_g = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, D, BLOCK_K):
            km = (k0 + offs_k) < D
            a = tl.load(
                x_ptr + tok[:, None] * stride_xt + (k0 + offs_k)[None, :],
                mask=rm[:, None] & km[None, :],
                other=0.0,
            )
            wg = _fp4_tile(g_rows, gs_rows, nm, k0, D, BLOCK_N, BLOCK_K).to(a.dtype)
            wu = _fp4_tile(u_rows, us_rows, nm, k0, D, BLOCK_N, BLOCK_K).to(a.dtype)
            acc_g = tl.dot(a, tl.trans(wg), acc_g)
            acc_u = tl.dot(a, tl.trans(wu), acc_u)
        g = tl.minimum(acc_g, limit)
        u = tl.minimum(tl.maximum(acc_u, -limit), limit)
        h = g * tl.sigmoid(g) * u
        tl.store(
            h_ptr + rows[:, None].to(tl.int64) * N_INTER + offs_n[None, :],
            h.to(h_ptr.dtype.element_ty),
            mask=rm[:, None] & nm[None, :],
        )


@triton.jit
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
):
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
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, N_INTER, BLOCK_K):
            km = (k0 + offs_k) < N_INTER
            a = tl.load(
                h_ptr + rows[:, None].to(tl.int64) * N_INTER + (k0 + offs_k)[None, :],
                mask=rm[:, None] & km[None, :],
                other=0.0,
            )
            w = _fp4_tile(w_rows, s_rows, nm, k0, N_INTER, BLOCK_N, BLOCK_K).to(a.dtype)
            acc = tl.dot(a, tl.trans(w), acc)
        wt = tl.load(wt_ptr + rows, mask=rm, other=0.0).to(tl.float32)
        acc = acc * wt[:, None]
        tok = (rows // TOPK).to(tl.int64)
        tl.atomic_add(
            y_ptr + tok[:, None] * D + offs_n[None, :], acc, mask=rm[:, None] & nm[None, :], sem="relaxed"
        )


def _config(n_pairs: int, E: int, elem_bytes: int) -> dict[str, int]:
    """Tiles by tokens per expert (as the bf16 MoE's); 3 stages: the decoded fp32 tiles already
    take many registers. fp32 activations (the interpreter) use 32-deep K steps."""
    per_expert = n_pairs / max(E, 1)
    if per_expert <= 16:
        cfg = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3}
    elif per_expert <= 64:
        cfg = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3}
    else:
        cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
    if elem_bytes > 2:
        cfg.update(BLOCK_K=32, num_stages=2)
    return cfg


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
        w13, w13_scale: ``[E, 2I, D/2]`` packed e2m1 (uint8), ``[E, 2I, D/32]`` ue8m0 (uint8).
        w2, w2_scale: ``[E, D, I/2]``, ``[E, D, I/32]``.
        topk_ids: ``[T, k]`` expert ids (ids outside ``[0, E)`` are skipped).
        topk_weights: ``[T, k]`` fp32 routing weights.
        swiglu_limit: clamp limit (V4: 10.0).
        config: tile override ``{BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages}`` (BLOCK_K a
            multiple of 32).

    Returns:
        ``[T, D]`` in x's dtype (fp32 accumulation).

    Raises:
        ValueError: shapes/dtypes inconsistent.
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
    cfg = dict(config or _config(n_pairs, E, x.element_size()))
    bm, bn, bk = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("BLOCK_K")
    if bk % 32:
        raise ValueError(f"config: BLOCK_K must be a multiple of 32, got {bk}")
    sorted_ids, block_expert = _align(topk_ids.contiguous(), E, bm)
    n_blocks = block_expert.shape[0]
    h = torch.empty((n_pairs, inter), dtype=x.dtype, device=x.device)
    _gate_up_fp4_kernel[(n_blocks, triton.cdiv(inter, bn))](
        x, x.stride(0), w13, w13_scale, w13.stride(0), w13.stride(1), w13_scale.stride(0),
        w13_scale.stride(1), h, sorted_ids, block_expert, n_pairs, inter, D, float(swiglu_limit),
        TOPK=k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **cfg,
    )  # fmt: skip
    y = torch.zeros((T, D), dtype=torch.float32, device=x.device)
    wt = topk_weights.reshape(-1).float().contiguous()
    _down_fp4_kernel[(n_blocks, triton.cdiv(D, bn))](
        h, w2, w2_scale, w2.stride(0), w2.stride(1), w2_scale.stride(0), w2_scale.stride(1), y, wt,
        sorted_ids, block_expert, n_pairs, inter, D, TOPK=k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **cfg,
    )  # fmt: skip
    return y.to(x.dtype)

"""Fused KV compressor (Triton): gated softmax pooling + RMSNorm + RoPE + compressed-pool write.

Op-table entry 2 (``sgl_kernel_v4/ops.py``); math from HF ``DeepseekV4CSACompressor.forward`` /
``DeepseekV4HCACompressor.forward`` (``transformers/models/deepseek_v4/modeling_deepseek_v4.py``;
paper §2.3, eqs. 20-23): per window ``w`` and channel ``c``,
``C[w, c] = sum_l softmax_l(score[w, :, c]) * kv[w, l, c]`` (fp32), then ``RMSNorm(weight)`` over
the channels, then interleaved RoPE on the trailing ``r`` channels at the window's position, then
``pool_flat[out_index[w]] = C[w]`` (skipped for ``-1``).

CSA (L = 8 with the overlap, d = 512 main / 128 indexer): one program per window streams the
window rows in ``BLOCK_L`` chunks with a per-channel online softmax (base 2). HCA (L = 128): one
program per (window, 64 channels) pools all rows at once into an fp32 scratch row, then one
program per window normalises, rotates and writes (the one-program version was latency-bound at
~57 µs per call on H200). Every input element is read once and every entry written twice
(returned + pool).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.paged import as_paged
from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2
from sgl_kernel_v4.triton.kv_codec import row_offsets, store_entry

__all__ = ["compress_and_insert"]


@triton.jit
def _softmax_step(m, den, acc, sc, kv):
    """One chunk of the per-channel online softmax pooling: ``sc`` ``[BLOCK_L, C]`` scores already
    scaled by ``log2(e)`` (``-inf``: empty slot), ``kv`` the rows; ``(m, den, acc)`` ``[C]`` fp32."""
    m_new = tl.maximum(m, tl.max(sc, 0))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(sc - m_new[None, :])
    den = den * alpha + tl.sum(p, 0)
    acc = acc * alpha + tl.sum(p * kv.to(tl.float32), 0)
    return m_new, den, acc


@triton.jit
def _pool_half(score_ptr, kv_ptr, ssl, skl, offs_p, L, BLOCK_L: tl.constexpr, HALF_D: tl.constexpr):
    m = tl.full([HALF_D], -1.0e30, tl.float32)
    den = tl.zeros([HALF_D], tl.float32)
    acc = tl.zeros([HALF_D], tl.float32)
    for l0 in range(0, L, BLOCK_L):
        offs_l = l0 + tl.arange(0, BLOCK_L)
        lm = offs_l < L
        sc = tl.load(
            score_ptr + offs_l[:, None] * ssl + 2 * offs_p[None, :], mask=lm[:, None], other=float("-inf")
        )
        sc = sc.to(tl.float32) * 1.4426950408889634
        kv = tl.load(kv_ptr + offs_l[:, None] * skl + 2 * offs_p[None, :], mask=lm[:, None], other=0.0)
        m, den, acc = _softmax_step(m, den, acc, sc, kv)
    return acc / den


@triton.jit
def _pool_tile(sc, kv):
    """Softmax pooling of a whole window tile at once: ``sc``, ``kv`` ``[BLOCK_L, C]`` -> ``[C]`` fp32."""
    m = tl.max(sc, 0)
    p = tl.exp(sc - m[None, :])
    return tl.sum(p * kv.to(tl.float32), 0) / tl.sum(p, 0)


@triton.jit
def _norm_rope_store(
    a, b, w_ptr, cos_ptr, sin_ptr, HALF_R, eps, out_ptr, slot, pool_ptr, pool_rpp, pool_ps, pool_rs,
    HALF_D: tl.constexpr, CODEC: tl.constexpr, NOPE: tl.constexpr,
):  # fmt: skip
    """RMSNorm + interleaved RoPE of one pooled entry given as its even / odd channels ``a``, ``b``
    ``[HALF_D]`` fp32 (``cos_ptr`` / ``sin_ptr`` / ``out_ptr`` at the window's row), stored to
    ``out_ptr`` (its dtype) and, for ``slot >= 0``, to the pool."""
    offs_p = tl.arange(0, HALF_D)
    rstd = tl.rsqrt((tl.sum(a * a, 0) + tl.sum(b * b, 0)) / (2 * HALF_D) + eps)
    a = a * rstd * tl.load(w_ptr + 2 * offs_p).to(tl.float32)
    b = b * rstd * tl.load(w_ptr + 2 * offs_p + 1).to(tl.float32)
    rp = offs_p - (HALF_D - HALF_R)
    is_rope = rp >= 0
    c = tl.load(cos_ptr + rp, mask=is_rope, other=1.0).to(tl.float32)
    s = tl.load(sin_ptr + rp, mask=is_rope, other=0.0).to(tl.float32)
    ra = a * c - b * s
    rb = b * c + a * s
    y = tl.reshape(tl.join(ra, rb), [2 * HALF_D]).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + tl.arange(0, 2 * HALF_D), y)
    if slot >= 0:
        off = row_offsets(slot, pool_rpp, pool_ps, pool_rs)
        store_entry(pool_ptr, off, y.to(tl.float32), CODEC, 2 * HALF_D, NOPE)


@triton.jit
def _compress_kernel(
    kv_ptr,
    skw,
    skl,
    score_ptr,
    ssw,
    ssl,
    w_ptr,
    cos_ptr,
    stride_c,
    sin_ptr,
    stride_s,
    pool_ptr,
    pool_rpp,
    pool_ps,
    pool_rs,
    idx_ptr,
    out_ptr,
    stride_o,
    L,
    HALF_R,
    eps,
    HALF_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
    CODEC: tl.constexpr,
    NOPE: tl.constexpr,
):
    w = tl.program_id(0).to(tl.int64)
    offs_p = tl.arange(0, HALF_D)
    a = _pool_half(score_ptr + w * ssw, kv_ptr + w * skw, ssl, skl, offs_p, L, BLOCK_L, HALF_D)
    b = _pool_half(score_ptr + w * ssw + 1, kv_ptr + w * skw + 1, ssl, skl, offs_p, L, BLOCK_L, HALF_D)
    _norm_rope_store(
        a, b, w_ptr, cos_ptr + w * stride_c, sin_ptr + w * stride_s, HALF_R, eps, out_ptr + w * stride_o,
        tl.load(idx_ptr + w), pool_ptr, pool_rpp, pool_ps, pool_rs, HALF_D, CODEC, NOPE,
    )  # fmt: skip


@triton.jit
def _pool_chunk_kernel(
    kv_ptr, skw, skl, score_ptr, ssw, ssl, scratch_ptr, L, D, BLOCK_L: tl.constexpr, CH: tl.constexpr
):
    """Long windows (HCA): one program per (window, CH channels) pools all L rows at once."""
    w = tl.program_id(0).to(tl.int64)
    offs_c = tl.program_id(1) * CH + tl.arange(0, CH)
    offs_l = tl.arange(0, BLOCK_L)
    lm = offs_l < L
    sc = tl.load(
        score_ptr + w * ssw + offs_l[:, None] * ssl + offs_c[None, :], mask=lm[:, None], other=float("-inf")
    ).to(tl.float32)
    kv = tl.load(kv_ptr + w * skw + offs_l[:, None] * skl + offs_c[None, :], mask=lm[:, None], other=0.0)
    tl.store(scratch_ptr + w * D + offs_c, _pool_tile(sc, kv))


@triton.jit(do_not_specialize=["idx_ptr"])  # the window slots: a slice of the metadata buffer
def _norm_rope_write_kernel(
    scratch_ptr,
    w_ptr,
    cos_ptr,
    stride_c,
    sin_ptr,
    stride_s,
    pool_ptr,
    pool_rpp,
    pool_ps,
    pool_rs,
    idx_ptr,
    out_ptr,
    stride_o,
    HALF_R,
    eps,
    HALF_D: tl.constexpr,
    CODEC: tl.constexpr,
    NOPE: tl.constexpr,
):
    w = tl.program_id(0).to(tl.int64)
    offs_d = tl.arange(0, 2 * HALF_D)
    x = tl.load(scratch_ptr + w * 2 * HALF_D + offs_d)
    rstd = tl.rsqrt(tl.sum(x * x, 0) / (2 * HALF_D) + eps)
    x = x * rstd * tl.load(w_ptr + offs_d).to(tl.float32)
    a, b = tl.split(tl.reshape(x, [HALF_D, 2]))
    offs_p = tl.arange(0, HALF_D)
    rp = offs_p - (HALF_D - HALF_R)
    is_rope = rp >= 0
    c = tl.load(cos_ptr + w * stride_c + rp, mask=is_rope, other=1.0).to(tl.float32)
    s = tl.load(sin_ptr + w * stride_s + rp, mask=is_rope, other=0.0).to(tl.float32)
    y = tl.reshape(tl.join(a * c - b * s, b * c + a * s), [2 * HALF_D]).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + w * stride_o + offs_d, y)
    slot = tl.load(idx_ptr + w)
    if slot >= 0:
        off = row_offsets(slot, pool_rpp, pool_ps, pool_rs)
        store_entry(pool_ptr, off, y.to(tl.float32), CODEC, 2 * HALF_D, NOPE)


def check_entry_args(
    W: int,
    d: int,
    dtype: torch.dtype,
    device: torch.device,
    norm_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pool_flat: Any,
    out_index: torch.Tensor | None,
    out: torch.Tensor | None,
) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """Validate the per-entry arguments of the compress ops (``W`` windows of ``d`` channels).

    Returns ``(out [W, d] of dtype, pool PagedRows, out_index [W])``: with no pool (``pool_flat``
    or ``out_index`` None) ``out`` doubles as the pool and every index is -1.

    Raises:
        ValueError: as :func:`compress_and_insert`.
    """
    if d % 2 or (d // 2) & (d // 2 - 1):
        raise ValueError(f"kv: d must be 2 * a power of 2, got {d}")
    if norm_weight.shape != (d,):
        raise ValueError(f"norm_weight: expected [{d}], got {tuple(norm_weight.shape)}")
    if cos.shape != sin.shape or cos.dim() != 2 or cos.shape[0] != W or 2 * cos.shape[1] > d:
        raise ValueError(f"cos/sin: expected [{W}, r/2] with r <= {d}, got {tuple(cos.shape)}")
    if cos.stride(1) != 1 or sin.stride(1) != 1:
        raise ValueError("cos/sin: last dim must be contiguous")
    out = torch.empty((W, d), dtype=dtype, device=device) if out is None else out
    if pool_flat is None or out_index is None:  # no pool write: every index -1, out as a dummy pool
        pool_flat, out_index = out, torch.full((W,), -1, dtype=torch.int64, device=device)
    pool = as_paged(pool_flat)
    if pool.dim != d:
        raise ValueError(f"pool_flat: expected entries of {d} values, got {pool.dim}")
    if out_index.shape != (W,) or out_index.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"out_index: expected int32/int64 [{W}], got {out_index.dtype} {tuple(out_index.shape)}"
        )
    return out, pool, out_index


def uses_channel_split(L: int) -> bool:
    """Windows of ``L`` slots pooled by one program per (window, 64 channels) then a norm + rope +
    write pass (HCA), rather than one program per window (CSA)."""
    return 16 < L <= 256


def default_block_l(L: int, d: int) -> int:
    """Window rows per online-softmax step of the one-program-per-window kernels."""
    return min(next_power_of_2(max(L, 1)), 16 if d >= 512 else 32)


def norm_rope_write(
    scratch: torch.Tensor,
    norm_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pool: Any,
    out_index: torch.Tensor,
    out: torch.Tensor,
    eps: float,
) -> None:
    """RMSNorm + RoPE + write of pooled entries ``scratch [W, d]`` fp32 (contiguous) into ``out``
    and the pool (``PagedRows``); one program per window."""
    W, d = scratch.shape
    _norm_rope_write_kernel[(W,)](
        scratch, norm_weight, cos, cos.stride(0), sin, sin.stride(0),
        pool.storage, pool.rows_per_page, pool.page_stride, pool.row_stride,
        out_index, out, out.stride(0), cos.shape[1], float(eps), HALF_D=d // 2,
        CODEC=pool.codec_id, NOPE=d - pool.rope_dim, num_warps=4,
    )  # fmt: skip


def compress_and_insert(
    kv: torch.Tensor,
    score: torch.Tensor,
    norm_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pool_flat: Any,
    out_index: torch.Tensor | None,
    eps: float,
    *,
    out: torch.Tensor | None = None,
    block_l: int | None = None,
) -> torch.Tensor:
    """Compress ``W`` windows into entries and write them into the compressed pool (op table entry 2).

    Args:
        kv: ``[W, L, d]`` window rows (bf16/fp32; strided views allowed, last dim contiguous).
        score: ``[W, L, d]`` gate + position bias (fp32 usually); ``-inf`` marks empty slots.
        norm_weight: ``[d]`` fp32 RMSNorm weight.
        cos, sin: ``[W, r/2]`` at each window's position (``r <= d``).
        pool_flat: the compressed pool layer (written in place), or None: a float ``[N, d]`` flat
            view, or a quantized row view (fp8 main entries, fp8 / fp4 indexer keys, encoded in
            the kernel from the entries rounded to kv's dtype, as the reference encoders do).
        out_index: ``[W]`` int32/int64 flat slots, -1 = do not write (None: no write).
        eps: RMSNorm epsilon.
        out: optional ``[W, d]`` buffer for the returned entries (kv's dtype).
        block_l: window rows per loop step (default min(L, 16)).

    Returns:
        ``[W, d]`` compressed entries in kv's dtype.

    Raises:
        ValueError: shapes/layouts out of range (``d / 2`` must be a power of 2).
    """
    if kv.dim() != 3 or score.shape != kv.shape:
        raise ValueError(f"kv/score: expected equal [W, L, d], got {tuple(kv.shape)} / {tuple(score.shape)}")
    W, L, d = kv.shape
    if kv.stride(2) != 1 or score.stride(2) != 1:
        raise ValueError("kv/score: last dim must be contiguous")
    out, pool, out_index = check_entry_args(
        W, d, kv.dtype, kv.device, norm_weight, cos, sin, pool_flat, out_index, out
    )
    if W == 0:
        return out
    if uses_channel_split(L) and block_l is None:
        # long windows (HCA, L = 128): split the channels over programs, then norm + rope + write
        ch = 64 if d >= 64 else d
        scratch = torch.empty((W, d), dtype=torch.float32, device=kv.device)
        _pool_chunk_kernel[(W, cdiv(d, ch))](
            kv, kv.stride(0), kv.stride(1), score, score.stride(0), score.stride(1), scratch, L, d,
            BLOCK_L=next_power_of_2(L), CH=ch, num_warps=8 if L * ch >= 4096 else 4,
        )  # fmt: skip
        norm_rope_write(scratch, norm_weight, cos, sin, pool, out_index, out, eps)
        return out
    if block_l is None:
        block_l = default_block_l(L, d)
    _compress_kernel[(W,)](
        kv, kv.stride(0), kv.stride(1), score, score.stride(0), score.stride(1), norm_weight,
        cos, cos.stride(0), sin, sin.stride(0), pool.storage, pool.rows_per_page, pool.page_stride,
        pool.row_stride, out_index, out, out.stride(0), L, cos.shape[1], float(eps),
        HALF_D=d // 2, BLOCK_L=block_l, CODEC=pool.codec_id, NOPE=d - pool.rope_dim, num_warps=4 if d >= 256 else 2,
    )  # fmt: skip
    return out

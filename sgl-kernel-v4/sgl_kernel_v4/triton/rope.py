"""Interleaved RoPE kernels (Triton): apply / inverse (+ fp8 quant), fused q-norm + kv norm/RoPE + window insert.

Op-table entries 3 and 4 (``sgl_kernel_v4/ops.py``). RoPE convention: HF ``apply_rotary_pos_emb``
(``transformers/models/deepseek_v4/modeling_deepseek_v4.py``): interleaved pairs
``(a, b) = (x[2i], x[2i+1])`` of the trailing ``r = 2 * cos.shape[-1]`` channels become
``(a cos_i - b sin_i, b cos_i + a sin_i)``, computed in fp32; the leading ``D - r`` channels pass
through. Inverse RoPE = the same with ``-sin``. RMSNorm: HF ``DeepseekV4RMSNorm`` /
``DeepseekV4UnweightedRMSNorm`` (fp32 statistics).

All kernels load rows contiguously and split them into even / odd channel halves in registers
(``tl.split``), so a pair is one element of each and the nope channels are pairs with
``cos = 1, sin = 0``: one code path, one coalesced read and one write of every element.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.paged import as_paged
from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2
from sgl_kernel_v4.triton.kv_codec import row_offsets, store_entry

__all__ = ["apply_rope", "inv_rope_quant", "qnorm_rope_kv_insert", "FP8_GROUP"]

FP8_GROUP = 128  # channels per fp8 scale group (DeepSeek activation quant granularity)
FP8_MAX = 448.0  # float8_e4m3fn max finite


@triton.jit
def _cos_sin(cos_ptr, sin_ptr, t, stride_ct, stride_st, offs_p, P0, HALF_R, SIGN: tl.constexpr):
    """cos/sin per pair index (pairs < P0 are nope: cos 1, sin 0)."""
    rp = offs_p - P0
    is_rope = (rp >= 0) & (rp < HALF_R)
    c = tl.load(cos_ptr + t * stride_ct + rp, mask=is_rope, other=1.0).to(tl.float32)
    s = tl.load(sin_ptr + t * stride_st + rp, mask=is_rope, other=0.0).to(tl.float32)
    return c, s * SIGN


@triton.jit
def _rope_kernel(
    x_ptr,
    stride_xt,
    stride_xh,
    cos_ptr,
    stride_ct,
    sin_ptr,
    stride_st,
    out_ptr,
    stride_ot,
    stride_oh,
    scale_ptr,
    H,
    HALF_R,
    HALF_D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    SIGN: tl.constexpr,
    FP8: tl.constexpr,
    GROUP_P: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = offs_h < H
    offs_p = tl.arange(0, HALF_D)
    P0 = HALF_D - HALF_R
    c, s = _cos_sin(cos_ptr, sin_ptr, t, stride_ct, stride_st, offs_p, P0, HALF_R, SIGN)
    offs_d = tl.arange(0, 2 * HALF_D)
    x = tl.load(
        x_ptr + t * stride_xt + offs_h[:, None] * stride_xh + offs_d[None, :], mask=hm[:, None], other=0.0
    )
    a, b = tl.split(tl.reshape(x.to(tl.float32), [BLOCK_H, HALF_D, 2]))  # contiguous load, pairs in registers
    # nope pairs pass through untouched (not ``a * 1 - b * 0``: an infinite ``b`` would make ``a`` NaN)
    rope_p = (offs_p >= P0)[None, :]
    ra = tl.where(rope_p, a * c[None, :] - b * s[None, :], a)
    rb = tl.where(rope_p, b * c[None, :] + a * s[None, :], b)
    optr = out_ptr + t * stride_ot + offs_h[:, None] * stride_oh + offs_d[None, :]
    if FP8:
        # scale from the group's finite values; NaN stays NaN and +-inf saturates to +-448 (clamped
        # before the cast, as act_quant), so one such value neither zeroes nor overflows its group
        G: tl.constexpr = HALF_D // GROUP_P
        fa = tl.where(tl.abs(ra) < float("inf"), tl.abs(ra), 0.0)
        fb = tl.where(tl.abs(rb) < float("inf"), tl.abs(rb), 0.0)
        amax = tl.max(tl.reshape(tl.maximum(fa, fb), [BLOCK_H, G, GROUP_P]), 2)  # [BLOCK_H, G]
        scale = tl.maximum(amax, 1e-10) / 448.0
        inv = tl.reshape(tl.broadcast_to((1.0 / scale)[:, :, None], [BLOCK_H, G, GROUP_P]), [BLOCK_H, HALF_D])
        qa = tl.where(ra == ra, tl.minimum(tl.maximum(ra * inv, -448.0), 448.0), ra)
        qb = tl.where(rb == rb, tl.minimum(tl.maximum(rb * inv, -448.0), 448.0), rb)
        y = tl.reshape(tl.join(qa, qb), [BLOCK_H, 2 * HALF_D])
        yq = y.to(out_ptr.dtype.element_ty).to(tl.uint8, bitcast=True)
        yq = tl.where(y == y, yq, 0x7F)  # the e4m3fn NaN byte, whatever the backend's conversion
        tl.store(optr, yq.to(out_ptr.dtype.element_ty, bitcast=True), mask=hm[:, None])
        offs_g = tl.arange(0, G)
        tl.store(scale_ptr + (t * H + offs_h[:, None]) * G + offs_g[None, :], scale, mask=hm[:, None])
    else:
        y = tl.reshape(tl.join(ra, rb), [BLOCK_H, 2 * HALF_D])
        tl.store(optr, y.to(out_ptr.dtype.element_ty), mask=hm[:, None])


def _check_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    if x.dim() != 3:
        raise ValueError(f"x: expected [T, H, D], got {tuple(x.shape)}")
    T, _, D = x.shape
    if D % 2 or (D // 2) & (D // 2 - 1):
        raise ValueError(f"x: head dim must be 2 * a power of 2, got {D}")
    if cos.dim() != 2 or cos.shape[0] != T or cos.shape != sin.shape:
        raise ValueError(f"cos/sin: expected [{T}, r/2] each, got {tuple(cos.shape)} / {tuple(sin.shape)}")
    if 2 * cos.shape[1] > D:
        raise ValueError(f"cos: rope dim {2 * cos.shape[1]} exceeds head dim {D}")
    if x.stride(2) != 1 or cos.stride(1) != 1 or sin.stride(1) != 1:
        raise ValueError("x/cos/sin: last dim must be contiguous")


def _rope(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    sign: float,
    fp8: bool,
    out: torch.Tensor | None,
    block_h: int = 4,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    _check_rope(x, cos, sin)
    T, H, D = x.shape
    if fp8 and D % FP8_GROUP:
        raise ValueError(f"x: head dim {D} is not a multiple of the fp8 group {FP8_GROUP}")
    out_dtype = torch.float8_e4m3fn if fp8 else x.dtype
    if out is not None:
        if out.shape != (T, H, D) or out.dtype != out_dtype:
            raise ValueError(f"out: expected {(T, H, D)} {out_dtype}, got {tuple(out.shape)} {out.dtype}")
        if out.stride(2) != 1 and T * H:
            # the kernel writes channels at unit stride: go through a contiguous buffer
            res, scales = _rope(x, cos, sin, sign, fp8, None, block_h)
            return out.copy_(res), scales
    else:
        out = torch.empty((T, H, D), dtype=out_dtype, device=x.device)
    scales = torch.empty((T, H, D // FP8_GROUP), dtype=torch.float32, device=x.device) if fp8 else None
    if T == 0 or H == 0:
        return out, scales
    block_h = min(block_h, next_power_of_2(H))
    _rope_kernel[(T, cdiv(H, block_h))](
        x, x.stride(0), x.stride(1), cos, cos.stride(0), sin, sin.stride(0),
        out, out.stride(0), out.stride(1), scales if fp8 else out, H, cos.shape[1],
        HALF_D=D // 2, BLOCK_H=block_h, SIGN=sign, FP8=fp8, GROUP_P=FP8_GROUP // 2, num_warps=4,
    )  # fmt: skip
    return out, scales


def apply_rope(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Interleaved RoPE on the trailing ``r = 2 * cos.shape[-1]`` channels (op table entry 3).

    Args:
        x: ``[T, H, D]`` or ``[T, D]`` (last dim contiguous; ``D/2`` a power of 2).
        cos, sin: ``[T, r/2]`` (any float dtype; math in fp32).
        out: optional ``[T, H, D]`` output buffer in x's dtype (may be ``x`` itself: in place; a
            last dim with a stride other than 1 is written through a contiguous copy).

    Returns:
        ``[T, H, D]`` in x's dtype.

    Raises:
        ValueError: shapes/layouts out of range, or an ``out`` of another shape or dtype.
    """
    if x.dim() == 2:
        o2 = None if out is None else out.unsqueeze(1)
        return _rope(x.unsqueeze(1), cos, sin, 1.0, False, o2)[0].squeeze(1)
    return _rope(x, cos, sin, 1.0, False, out)[0]


def inv_rope_quant(
    o: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    fp8: bool = False,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Inverse RoPE on the attention output, optionally quantized to fp8 (op table entry 3).

    Args:
        o: ``[T, H, D]`` attention output (bf16/fp32).
        cos, sin: ``[T, r/2]`` of the query positions.
        fp8: quantize for an fp8 O projection.
        out: optional ``[T, H, D]`` output buffer (o's dtype, or float8_e4m3fn when ``fp8``; any
            strides).

    Returns:
        ``fp8=False``: ``[T, H, D]`` in o's dtype (HF: ``apply_rotary_pos_emb(o, cos, -sin)``).
        ``fp8=True``: ``(q [T, H, D] float8_e4m3fn, scales [T, H, D // 128] fp32)`` with
        ``dequant = q * scales`` repeated over each group of 128 channels; ``scale = amax / 448``
        per (token, head, 128-channel group).

    Raises:
        ValueError: shapes/layouts out of range (fp8 needs ``D % 128 == 0``).
    """
    res, scales = _rope(o, cos, sin, -1.0, fp8, out)
    return (res, scales) if fp8 else res


# ------------------------------------------------------------------------------------------------
# fused q-norm + kv norm/RoPE + sliding-window insert
# ------------------------------------------------------------------------------------------------


@triton.jit
def _norm_rope_rows(
    x_ptr,
    stride_r,
    n_rows,
    offs_r,
    w_ptr,
    out_ptr,
    stride_or,
    c,
    s,
    eps,
    HALF_D: tl.constexpr,
    HAS_W: tl.constexpr,
    R: tl.constexpr,
):
    """RMSNorm (optionally weighted) + RoPE of rows ``offs_r`` (``[R, D]``, pairs split in registers)."""
    rm = offs_r < n_rows
    offs_p = tl.arange(0, HALF_D)
    offs_d = tl.arange(0, 2 * HALF_D)
    x = tl.load(x_ptr + offs_r[:, None] * stride_r + offs_d[None, :], mask=rm[:, None], other=0.0)
    a, b = tl.split(tl.reshape(x.to(tl.float32), [R, HALF_D, 2]))
    ms = (tl.sum(a * a, 1) + tl.sum(b * b, 1)) / (2 * HALF_D)
    rstd = tl.rsqrt(ms + eps)
    a = a * rstd[:, None]
    b = b * rstd[:, None]
    if HAS_W:
        a = a * tl.load(w_ptr + 2 * offs_p).to(tl.float32)[None, :]
        b = b * tl.load(w_ptr + 2 * offs_p + 1).to(tl.float32)[None, :]
    ra = a * c[None, :] - b * s[None, :]
    rb = b * c[None, :] + a * s[None, :]
    y = tl.reshape(tl.join(ra, rb), [R, 2 * HALF_D])
    tl.store(
        out_ptr + offs_r[:, None] * stride_or + offs_d[None, :],
        y.to(out_ptr.dtype.element_ty),
        mask=rm[:, None],
    )
    return y


@triton.jit
def _qnorm_rope_kv_kernel(
    q_ptr,
    stride_qt,
    stride_qh,
    kv_ptr,
    stride_kvt,
    w_ptr,
    cos_ptr,
    stride_ct,
    sin_ptr,
    stride_st,
    qo_ptr,
    stride_qot,
    stride_qoh,
    kvo_ptr,
    stride_kvot,
    swa_ptr,
    swa_rpp,
    swa_ps,
    swa_rs,
    idx_ptr,
    H,
    HALF_R,
    eps,
    HALF_D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    N_HB: tl.constexpr,
    CODEC: tl.constexpr,
    NOPE: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    offs_p = tl.arange(0, HALF_D)
    c, s = _cos_sin(cos_ptr, sin_ptr, t, stride_ct, stride_st, offs_p, HALF_D - HALF_R, HALF_R, 1.0)
    if hb < N_HB:  # a block of query heads: unweighted RMSNorm + RoPE
        offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
        _norm_rope_rows(
            q_ptr + t * stride_qt, stride_qh, H, offs_h, w_ptr, qo_ptr + t * stride_qot, stride_qoh, c, s, eps,
            HALF_D, False, BLOCK_H,
        )  # fmt: skip
    else:  # the kv row: weighted RMSNorm + RoPE, returned and inserted into the window pool
        offs_r = tl.arange(0, 1)
        y = _norm_rope_rows(
            kv_ptr + t * stride_kvt,
            0,
            1,
            offs_r,
            w_ptr,
            kvo_ptr + t * stride_kvot,
            0,
            c,
            s,
            eps,
            HALF_D,
            True,
            1,
        )
        slot = tl.load(idx_ptr + t)
        if slot >= 0:
            # the entry as returned (rounded to kv's dtype), then encoded in the pool's format
            y1 = tl.reshape(y, [2 * HALF_D]).to(kvo_ptr.dtype.element_ty).to(tl.float32)
            store_entry(swa_ptr, row_offsets(slot, swa_rpp, swa_ps, swa_rs), y1, CODEC, 2 * HALF_D, NOPE)


def qnorm_rope_kv_insert(
    q: torch.Tensor,
    kv: torch.Tensor,
    kv_norm_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    swa_flat: Any,
    swa_index: torch.Tensor,
    eps: float,
    *,
    q_out: torch.Tensor | None = None,
    kv_out: torch.Tensor | None = None,
    block_h: int = 8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused q-norm + RoPE and kv RMSNorm + RoPE + sliding-window insert (op table entry 4).

    One launch: programs ``(t, head block)`` normalise (unweighted RMSNorm, HF
    ``DeepseekV4UnweightedRMSNorm``) and rotate ``BLOCK_H`` query heads; program ``(t, last)``
    normalises ``kv[t]`` with ``kv_norm_weight`` (HF ``DeepseekV4RMSNorm``), rotates it, returns it
    and writes it to ``swa_flat[swa_index[t]]`` (skipped when the index is -1).

    Args:
        q: ``[T, H, D]``; kv: ``[T, D]``; kv_norm_weight: ``[D]`` (fp32).
        cos, sin: ``[T, r/2]``; swa_flat: the window pool layer: a float ``[N, D]`` view, or a
        quantized row view (fp8 main entries, encoded in the kernel from ``kv_out``'s values);
        swa_index: ``[T]`` int32/int64 flat slots, -1 = skip; eps: RMSNorm epsilon.
        q_out / kv_out: optional output buffers (may alias q / kv: in place).

    Returns:
        ``(q_out [T, H, D], kv_out [T, D])`` in q's / kv's dtype.

    Raises:
        ValueError: shapes/layouts out of range.
    """
    _check_rope(q, cos, sin)
    T, H, D = q.shape
    if kv.shape != (T, D) or kv.stride(1) != 1:
        raise ValueError(f"kv: expected contiguous-last-dim [{T}, {D}], got {tuple(kv.shape)}")
    if kv_norm_weight.shape != (D,):
        raise ValueError(f"kv_norm_weight: expected [{D}], got {tuple(kv_norm_weight.shape)}")
    swa = as_paged(swa_flat)
    if swa.dim != D or swa.codec not in ("float", "fp8_main"):
        raise ValueError(
            f"swa_flat: expected main entries of {D} values, got {swa.codec} entries of {swa.dim}"
        )
    if swa_index.shape != (T,) or swa_index.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"swa_index: expected int32/int64 [{T}], got {swa_index.dtype} {tuple(swa_index.shape)}"
        )
    q_out = torch.empty_like(q) if q_out is None else q_out
    kv_out = torch.empty_like(kv) if kv_out is None else kv_out
    if T == 0:
        return q_out, kv_out
    block_h = min(block_h, next_power_of_2(H))
    n_hb = cdiv(H, block_h)
    _qnorm_rope_kv_kernel[(T, n_hb + 1)](
        q, q.stride(0), q.stride(1), kv, kv.stride(0), kv_norm_weight, cos, cos.stride(0), sin, sin.stride(0),
        q_out, q_out.stride(0), q_out.stride(1), kv_out, kv_out.stride(0),
        swa.storage, swa.rows_per_page, swa.page_stride, swa.row_stride,
        swa_index, H, cos.shape[1], float(eps),
        HALF_D=D // 2, BLOCK_H=block_h, N_HB=n_hb, CODEC=swa.codec_id, NOPE=D - swa.rope_dim, num_warps=4,
    )  # fmt: skip
    return q_out, kv_out

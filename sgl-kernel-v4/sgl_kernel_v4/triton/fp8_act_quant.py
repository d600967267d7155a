"""Activation tiles of the FP8 block-scaled linears (Triton), scaled per 1x128 group by a power of two.

* e4m3 (``w8a8``, ``w8a8_fused``): :func:`act_quant` writes ``[M, K]`` activations as e4m3 with
  one float32 scale per (row, 128-column group), as :func:`sgl_kernel_v4.ref.fp8_gemm.act_quant`
  (``amax / 448``, rounded up to a power of two with ``pow2``: DeepSeek's ``ue8m0`` scales);
  :func:`_quant_rows` is the same quantization of a register tile inside the fused decode kernel.
  The e4m3 bytes come from the fp32 bits (:func:`_e4m3_code`, round to nearest, ties to even),
  not from a backend's fp8 conversion, so every backend gives the same bytes. Non-finite
  elements as the reference and CUDA's saturating conversion treat them: a NaN becomes the
  e4m3fn NaN and ``+-inf`` saturates to ``+-448`` (e4m3fn has no infinity); a
  group's scale comes from its finite elements, so one such element neither zeroes nor
  overflows the rest of its group, and a NaN reaches the GEMM's output as it would in bf16.
* fp16 (``w8a16_f16`` / ``w8a16_f16asm``): :func:`_f16_rows` scales a bf16 / fp32 tile per row
  so its largest magnitude is at most ``2**F16_AMAX_LOG2``.

The kernels that consume these tiles are in :mod:`sgl_kernel_v4.triton.fp8_gemm`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.ref.fp8_gemm import AMAX_MIN, BLOCK, FP8_MAX
from sgl_kernel_v4.triton._utils import cdiv

__all__ = ["F16_AMAX_LOG2", "act_quant"]

_FP8_MAX = tl.constexpr(FP8_MAX)
_AMAX_MIN = tl.constexpr(AMAX_MIN)
#: The e4m3fn NaN byte (``S.1111.111``, sign 0): the code of a NaN activation.
_E4M3_NAN = tl.constexpr(0x7F)

#: fp16 activations of the ``w8a16_f16`` variants are scaled so each 1x128 group's largest magnitude
#: is at most ``2**F16_AMAX_LOG2`` (fp16's largest finite value is 65,504 < 2**16).
F16_AMAX_LOG2 = 14
_F16_AMAX_INV = tl.constexpr(2.0**-F16_AMAX_LOG2)


@triton.jit
def _pow2_ceil(s):
    """Smallest power of two >= s (positive normal fp32), exact from the bits."""
    bits = s.to(tl.int32, bitcast=True)
    e = (bits >> 23) & 0xFF
    e = tl.where((bits & 0x7FFFFF) != 0, e + 1, e)
    return (e << 23).to(tl.float32, bitcast=True)


@triton.jit
def _pow2_recip(s):
    """``1 / s`` for a power of two ``s`` with biased exponent 1..253, exact from the bits."""
    return ((254 << 23) - s.to(tl.int32, bitcast=True)).to(tl.float32, bitcast=True)


@triton.jit
def _e4m3_code(y):
    """fp32 ``|y| <= 448`` -> its e4m3 byte (int32), rounded to nearest, ties to even, from the bits.

    ``ex`` = the biased fp32 exponent of ``|y|`` (at least 121 = 2**-6, the e4m3 subnormal range);
    the e4m3 step there is ``2**(ex - 130)``, ``f = round(|y| / step)`` and the code is
    ``((ex - 121) << 3) + f``: ``f`` in 8..16 carries into the exponent field by itself (and 0..8 in
    the subnormal range). No float -> fp8 conversion instruction is involved, so the byte does not
    depend on how a backend rounds that conversion (the CPU interpreter does not round to
    nearest-even; the GPU does)."""
    bits = y.to(tl.int32, bitcast=True)
    a = tl.abs(y)
    ex = tl.maximum((a.to(tl.int32, bitcast=True) >> 23) & 0xFF, 121)
    r = a * ((257 - ex) << 23).to(tl.float32, bitcast=True)  # |y| / 2**(ex - 130), exact
    f = tl.floor(r + 0.5)
    odd = (f - 2.0 * tl.floor(f * 0.5)) != 0.0
    f = tl.where(((f - r) == 0.5) & odd, f - 1.0, f)
    code = ((ex - 121) << 3) + f.to(tl.int32)
    return tl.where(bits < 0, code | 0x80, code)


@triton.jit
def _act_quant_kernel(
    x_ptr,
    q_ptr,
    s_ptr,
    M,
    K,
    stride_xm,
    stride_qm,
    stride_sm,
    POW2: tl.constexpr,
    BLOCK_M: tl.constexpr,
    GROUP: tl.constexpr,
):
    """``q_ptr`` is the e4m3 output viewed as uint8 (the codes are stored as bytes)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    kb = tl.program_id(1)
    offs_k = kb * GROUP + tl.arange(0, GROUP)
    mask = (offs_m < M)[:, None] & (offs_k < K)[None, :]
    rows = offs_m.to(tl.int64)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + offs_k[None, :], mask=mask, other=0.0).to(tl.float32)
    fin = tl.abs(x) < float("inf")  # False for NaN and +-inf
    amax = tl.maximum(tl.max(tl.where(fin, tl.abs(x), 0.0), axis=1), _AMAX_MIN)
    s = tl.math.div_rn(amax, _FP8_MAX)
    if POW2:
        s = _pow2_ceil(s)
    q = tl.math.div_rn(tl.where(x == x, x, 0.0), s[:, None])  # +-inf stays +-inf: saturates below
    code = tl.where(x == x, _e4m3_code(tl.minimum(tl.maximum(q, -_FP8_MAX), _FP8_MAX)), _E4M3_NAN)
    tl.store(q_ptr + rows[:, None] * stride_qm + offs_k[None, :], code.to(tl.uint8), mask=mask)
    tl.store(s_ptr + rows * stride_sm + kb, s, mask=offs_m < M)


@triton.jit
def _quant_rows(a):
    """One 1x128 activation group per row of ``a [BLOCK_M, 128]`` -> ``(xq [BLOCK_M, 128]
    float8e4nv, sx [BLOCK_M] float32)``, the values and scales :func:`act_quant` (``pow2``) gives.
    ``x / sx`` is ``x * (1 / sx)`` exactly (``sx`` is a power of two, ``2**-22 .. 2**120``); the e4m3
    bytes come from :func:`_e4m3_code` and are bitcast, so no backend's fp8 conversion rounds them."""
    af = a.to(tl.float32)
    fin = tl.abs(af) < float("inf")  # False for NaN and +-inf
    amax = tl.maximum(tl.max(tl.where(fin, tl.abs(af), 0.0), axis=1), _AMAX_MIN)
    sx = _pow2_ceil(tl.math.div_rn(amax, _FP8_MAX))
    q = tl.where(af == af, af, 0.0) * _pow2_recip(sx)[:, None]  # +-inf saturates below
    code = tl.where(af == af, _e4m3_code(tl.minimum(tl.maximum(q, -_FP8_MAX), _FP8_MAX)), _E4M3_NAN)
    return code.to(tl.uint8).to(tl.float8e4nv, bitcast=True), sx


def act_quant(x: torch.Tensor, pow2: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x [M, K]`` (last dim contiguous) per 1x128 group to e4m3.

    Returns:
        ``(q [M, K] float8_e4m3fn, scale [M, ceil(K/128)] float32)``, as
        :func:`sgl_kernel_v4.ref.fp8_gemm.act_quant`.
    """
    M, K = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    nk = cdiv(K, BLOCK)
    q = torch.empty((M, K), dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty((M, nk), dtype=torch.float32, device=x.device)
    if M:
        bm = 16
        _act_quant_kernel[(cdiv(M, bm), nk)](
            x, q.view(torch.uint8), s, M, K, x.stride(0), q.stride(0), s.stride(0), POW2=pow2, BLOCK_M=bm, GROUP=BLOCK,
            num_warps=4,
        )  # fmt: skip
    return q, s


@triton.jit
def _f16_rows(a):
    """``a [BLOCK_M, 128]`` (bf16 / fp32) -> ``(xh [BLOCK_M, 128] fp16, sx [BLOCK_M] fp32)`` with
    ``a = xh * sx``: ``sx`` the power of two putting the row's largest magnitude at most
    ``2**F16_AMAX_LOG2`` (exact for bf16 input: fp16 has more mantissa bits, and the scale moves
    only the exponent; values below ``amax * 2**-38`` flush, as in any fp16 product)."""
    af = a.to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(af), axis=1), _AMAX_MIN)
    sx = _pow2_ceil(amax * _F16_AMAX_INV)
    return (af * _pow2_recip(sx)[:, None]).to(tl.float16), sx

"""FP8 block-scaled linear layers (Triton): weight-only (w8a16) and activation-quantized (w8a8).

Formats and math: :mod:`sgl_kernel_v4.ref.fp8_gemm` (weights ``[G*N, K]`` e4m3 with one float32
scale per 128x128 block; activations, in the w8a8 variant, e4m3 with one power-of-two scale per
1x128 group). torch 2.11's ``_scaled_mm`` does not take 128x128 block scales, hence these kernels.

Techniques (from DeepGEMM's and DeepSeek's published FP8 GEMM designs, written anew here):

* The K loop steps one scale block at a time (``BLOCK_K`` divides 128), so inside a step the
  weight scale is constant along K: the fp32 partial product of the step is multiplied by the
  scale row vector (``s[n // 128, k // 128]`` per output column; per column, not per tile, so
  groups and N need not align to 128) and added to the accumulator ("promotion" of the tensor-core
  partial sums to fp32 with the scale applied once per 128-deep step).
* ``w8a16`` (decode, few tokens): weights are the traffic; each tile loads e4m3 bytes and converts
  them to the activation dtype in registers (exact: e4m3 fits bf16), the product runs on bf16
  tensor cores. Small N gets narrow tiles, and when even that leaves most SMs idle the K loop is
  split over programs that add fp32 partials atomically (``SPLIT_K``).
* ``w8a8`` (prefill, many tokens): ``act_quant`` writes e4m3 activations with per-(row, 128)
  power-of-two scales, then an fp8 x fp8 tensor-core GEMM with both scales applied per K step
  (``acc += dot(a, b) * sa[:, None] * sb[None, :]``), grouped program order for L2 reuse.

:func:`fp8_linear` picks the variant per shape (:func:`choose_variant`): w8a16 for at most
:data:`W8A16_MAX_TOKENS` tokens, else w8a8 (``docs/QUANTIZATION.md``). Nothing here synchronises
with the host, so decode steps are CUDA-graph capturable.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.ref.fp8_gemm import AMAX_MIN, BLOCK, FP8_MAX, check_fp8_linear_args

from ._utils import num_sms

__all__ = ["W8A16_MAX_TOKENS", "act_quant", "choose_variant", "fp8_linear"]

_FP8_MAX = tl.constexpr(FP8_MAX)
_AMAX_MIN = tl.constexpr(AMAX_MIN)

#: Largest token count that takes the weight-only kernel (decode / small chunks); above it the
#: activations are quantized and the GEMM runs on fp8 tensor cores.
W8A16_MAX_TOKENS = 64


def choose_variant(num_tokens: int) -> str:
    """``"w8a16"`` for ``num_tokens <= W8A16_MAX_TOKENS`` (weight-bandwidth bound), else ``"w8a8"``."""
    return "w8a16" if num_tokens <= W8A16_MAX_TOKENS else "w8a8"


@triton.jit
def _pow2_ceil(s):
    """Smallest power of two >= s (positive normal fp32), exact from the bits."""
    bits = s.to(tl.int32, bitcast=True)
    e = (bits >> 23) & 0xFF
    e = tl.where((bits & 0x7FFFFF) != 0, e + 1, e)
    return (e << 23).to(tl.float32, bitcast=True)


@triton.jit
def _round_e4m3(y):
    """Round fp32 ``|y| <= 448`` to the nearest e4m3 value (ties to even), staying in fp32.

    The cast to e4m3 after this is exact, so the result does not depend on the cast's rounding
    (Triton's CPU interpreter does not round to nearest-even; the GPU's ``cvt.rn`` does)."""
    bits = y.to(tl.int32, bitcast=True)
    e = tl.maximum((bits >> 23) & 0xFF, 127 - 6) - 3  # biased exponent of the e4m3 ulp at |y|
    ulp = (e << 23).to(tl.float32, bitcast=True)
    r = y * ((254 - e) << 23).to(tl.float32, bitcast=True)  # y / ulp, exact (1/ulp is a power of two)
    f = tl.floor(r + 0.5)
    odd = (f - 2.0 * tl.floor(f * 0.5)) != 0.0
    f = tl.where(((f - r) == 0.5) & odd, f - 1.0, f)
    return f * ulp


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
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    kb = tl.program_id(1)
    offs_k = kb * GROUP + tl.arange(0, GROUP)
    mask = (offs_m < M)[:, None] & (offs_k < K)[None, :]
    rows = offs_m.to(tl.int64)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + offs_k[None, :], mask=mask, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=1), _AMAX_MIN)
    s = tl.math.div_rn(amax, _FP8_MAX)
    if POW2:
        s = _pow2_ceil(s)
    q = tl.math.div_rn(x, s[:, None])
    q = _round_e4m3(tl.minimum(tl.maximum(q, -_FP8_MAX), _FP8_MAX))
    tl.store(q_ptr + rows[:, None] * stride_qm + offs_k[None, :], q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + rows * stride_sm + kb, s, mask=offs_m < M)


def act_quant(x: torch.Tensor, pow2: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x [M, K]`` (last dim contiguous) per 1x128 group to e4m3.

    Returns:
        ``(q [M, K] float8_e4m3fn, scale [M, ceil(K/128)] float32)``, as
        :func:`sgl_kernel_v4.ref.fp8_gemm.act_quant`.
    """
    M, K = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    nk = triton.cdiv(K, BLOCK)
    q = torch.empty((M, K), dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty((M, nk), dtype=torch.float32, device=x.device)
    if M:
        bm = 16
        _act_quant_kernel[(triton.cdiv(M, bm), nk)](
            x, q, s, M, K, x.stride(0), q.stride(0), s.stride(0), POW2=pow2, BLOCK_M=bm, GROUP=BLOCK,
            num_warps=4,
        )  # fmt: skip
    return q, s


@triton.jit
def _w8a16_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xg,
    stride_wn,
    stride_sn,
    stride_ym,
    SPLIT_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ATOMIC: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_z = tl.program_id(2)
    g = pid_z // SPLIT_K
    ks = pid_z % SPLIT_K
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mm = offs_m < M
    nm = offs_n < N
    rows_w = (g * N + offs_n).to(tl.int64)
    k_tiles = tl.cdiv(K, BLOCK_K)
    per = tl.cdiv(k_tiles, SPLIT_K)
    kt0 = ks * per
    kt1 = tl.minimum(kt0 + per, k_tiles)
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm + g * stride_xg
    w_rows = w_ptr + rows_w[:, None] * stride_wn
    s_rows = s_ptr + (rows_w // 128) * stride_sn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kt in range(kt0, kt1):
        offs_k = kt * BLOCK_K + tl.arange(0, BLOCK_K)
        km = offs_k < K
        a = tl.load(x_rows + offs_k[None, :], mask=mm[:, None] & km[None, :], other=0.0)
        b = tl.load(w_rows + offs_k[None, :], mask=nm[:, None] & km[None, :], other=0.0)
        sb = tl.load(s_rows + (kt * BLOCK_K) // 128, mask=nm, other=0.0)
        acc += tl.dot(a, tl.trans(b.to(a.dtype))) * sb[None, :]
    out = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + (g * N + offs_n)[None, :]
    omask = mm[:, None] & nm[None, :]
    if ATOMIC:
        tl.atomic_add(out, acc, mask=omask, sem="relaxed")
    else:
        tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=omask)


@triton.jit
def _w8a8_kernel(
    q_ptr,
    qs_ptr,
    w_ptr,
    s_ptr,
    y_ptr,
    M,
    N,
    K,
    G,
    stride_qm,
    stride_qsm,
    stride_wn,
    stride_sn,
    stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    g = tl.program_id(1)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mm = offs_m < M
    nm = offs_n < N
    rows_q = offs_m.to(tl.int64) * G + g  # activation rows are (token, group) pairs
    rows_w = (g * N + offs_n).to(tl.int64)
    q_rows = q_ptr + rows_q[:, None] * stride_qm
    w_rows = w_ptr + rows_w[:, None] * stride_wn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        offs_k = kt * BLOCK_K + tl.arange(0, BLOCK_K)
        km = offs_k < K
        a = tl.load(q_rows + offs_k[None, :], mask=mm[:, None] & km[None, :], other=0.0)
        b = tl.load(w_rows + offs_k[None, :], mask=nm[:, None] & km[None, :], other=0.0)
        kb = (kt * BLOCK_K) // 128
        sa = tl.load(qs_ptr + rows_q * stride_qsm + kb, mask=mm, other=0.0)
        sb = tl.load(s_ptr + (rows_w // 128) * stride_sn + kb, mask=nm, other=0.0)
        acc += tl.dot(a, tl.trans(b)) * sa[:, None] * sb[None, :]
    out = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + (g * N + offs_n)[None, :]
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=mm[:, None] & nm[None, :])


def _w8a16_config(M: int, N: int, G: int, K: int, sms: int) -> dict[str, int]:
    """Tiles for the weight-only kernel: the narrowest N tile that still gives every SM a program,
    then split-K when even 16-wide tiles leave more than half the SMs idle."""
    bm = 16 if M <= 16 else 32 if M <= 32 else 64 if M <= 64 else 128
    m_tiles = triton.cdiv(M, bm)
    bn = 16
    for cand in (128, 64, 32):
        if triton.cdiv(N, cand) * G * m_tiles >= sms:
            bn = cand
            break
    tiles = triton.cdiv(N, bn) * G * m_tiles
    bk = 128
    k_tiles = triton.cdiv(K, bk)
    split = 1
    if tiles * 2 <= sms:
        split = max(1, min(k_tiles, 8, sms // tiles))
    warps = 8 if bm * bn >= 128 * 64 else 4
    return {
        "BLOCK_M": bm,
        "BLOCK_N": bn,
        "BLOCK_K": bk,
        "SPLIT_K": split,
        "num_warps": warps,
        "num_stages": 4,
    }


def _w8a8_config(M: int, N: int) -> dict[str, int]:
    if M <= 64:
        return {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 4}
    return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}


def fp8_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    variant: str | None = None,
    *,
    config: dict[str, int] | None = None,
) -> torch.Tensor:
    """``y = x @ (weight * weight_scale)^T`` with 128x128 block scales (grouped when x is 3-D).

    Args:
        x: ``[T, K]`` or ``[T, G, K]``, bf16 / fp16 (fp32 runs the dot in tf32 on GPUs).
        weight: ``[G * N, K]`` float8_e4m3fn, last dim contiguous.
        weight_scale: ``[ceil(G*N/128), ceil(K/128)]`` float32.
        variant: ``None`` (:func:`choose_variant` by ``T``), ``"w8a16"`` or ``"w8a8"``.
        config: tile override for the chosen kernel (keys of ``_w8a16_config`` / ``_w8a8_config``).

    Returns:
        ``[T, G * N]`` in x's dtype (fp32 accumulation).

    Raises:
        ValueError: shapes/dtypes inconsistent, or an unknown ``variant``.
    """
    T, G, N, K = check_fp8_linear_args(x, weight, weight_scale)
    if variant is None:
        variant = choose_variant(T)
    if variant not in ("w8a16", "w8a8"):
        raise ValueError(f"variant: expected None, 'w8a16' or 'w8a8', got {variant!r}")
    if weight.stride(1) != 1:
        raise ValueError("weight: last dim must be contiguous")
    dev = x.device
    if T == 0:
        return torch.empty((0, G * N), dtype=x.dtype, device=dev)
    x3 = x.view(T, 1, K) if x.dim() == 2 else x
    if x3.stride(2) != 1:
        x3 = x3.contiguous()
    if variant == "w8a8":
        q, qs = act_quant(x3.reshape(T * G, K))
        y = torch.empty((T, G * N), dtype=x.dtype, device=dev)
        cfg = dict(config or _w8a8_config(T, N))
        bm, bn, bk, gm = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("BLOCK_K"), cfg.pop("GROUP_M")
        grid = (triton.cdiv(T, bm) * triton.cdiv(N, bn), G)
        _w8a8_kernel[grid](
            q, qs, weight, weight_scale, y, T, N, K, G, q.stride(0), qs.stride(0), weight.stride(0),
            weight_scale.stride(0), y.stride(0), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, **cfg,
        )  # fmt: skip
        return y
    cfg = dict(config or _w8a16_config(T, N, G, K, num_sms(dev)))
    bm, bn, bk, split = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("BLOCK_K"), cfg.pop("SPLIT_K")
    atomic = split > 1
    y = torch.zeros((T, G * N), dtype=torch.float32, device=dev) if atomic else x.new_empty((T, G * N))
    grid = (triton.cdiv(N, bn), triton.cdiv(T, bm), G * split)
    _w8a16_kernel[grid](
        x3, weight, weight_scale, y, T, N, K, x3.stride(0), x3.stride(1), weight.stride(0),
        weight_scale.stride(0), y.stride(0), SPLIT_K=split, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
        ATOMIC=atomic, **cfg,
    )  # fmt: skip
    return y.to(x.dtype) if atomic else y

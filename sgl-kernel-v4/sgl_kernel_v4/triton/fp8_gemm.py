"""FP8 block-scaled linear layers (Triton): weight-only (w8a16) and activation-quantized (w8a8).

Formats and math: :mod:`sgl_kernel_v4.ref.fp8_gemm` (weights ``[G*N, K]`` e4m3 with one float32
scale per 128x128 block; activations, in the w8a8 variant, e4m3 with one power-of-two scale per
1x128 group). torch 2.11's ``_scaled_mm`` does not take 128x128 block scales, hence these kernels.

Techniques (from DeepGEMM's and DeepSeek's published FP8 GEMM designs, written anew here):

* The K loop steps one scale block at a time (``BLOCK_K`` divides 128; the weight-only kernel's
  256-deep steps are two 128-deep sub-steps), so inside a (sub-)step the weight scale is constant
  along K: the fp32 partial product of the step is multiplied by the
  scale row vector (``s[n // 128, k // 128]`` per output column; per column, not per tile, so
  groups and N need not align to 128) and added to the accumulator ("promotion" of the tensor-core
  partial sums to fp32 with the scale applied once per 128-deep step).
* ``w8a16`` (decode, few tokens): weights are the traffic. The product is computed as
  ``W_tile @ x^T`` so that the converted weights are the tensor cores' register operand (64
  weight rows per warp group) and the tokens the narrow side (16 up to 64): no shared-memory
  round trip for the weights. On the GPU the e4m3 -> bf16 conversion is packed PTX (two values
  per 32-bit shift / mask, one ``mul.bf16x2`` by ``2**120``; the conversion instructions run on a
  16-per-clock pipe). When the tiles leave SMs idle, K is split over programs that write fp32
  partials; the last program of a tile (an arrival counter it resets) sums them in split order
  and stores the output: one launch, deterministic, no zero-fill or cast kernel.
* ``w8a8_fused`` (decode, opt-in): the ``w8a16`` kernel with ``QUANT_A``: each 128-deep
  sub-step quantizes its activation tile in registers exactly as :func:`act_quant` (``pow2``) does
  (the 128 columns of a sub-step are one activation group) and multiplies the e4m3 weights as
  loaded by the e4m3 activations on the fp8 tensor cores (``W_tile @ xq^T``, both operands K-major:
  the weight tile as loaded, ``xq`` transposed), then applies ``sb[n] * sx[m]``. No weight
  conversion and no separate quantization launch.
* ``w8a8`` (prefill, many tokens): ``act_quant`` writes e4m3 activations with per-(row, 128)
  power-of-two scales (DeepSeek's inference recipe for V4's ``ue8m0`` format), then an fp8 x fp8
  tensor-core GEMM; when a 128-row N tile lies inside one weight-scale block, a K step's weight
  scale is one number folded into the row scale (promotion = one FMA per element), grouped
  program order for L2 reuse.
* Pipeline depth is chosen from the shared memory one stage takes (:data:`SMEM_BUDGET`), so a
  4-byte activation tile gets fewer stages instead of a launch the GPU refuses.

The activation side (``act_quant``, the in-register e4m3 and fp16 tiles) is
:mod:`.fp8_act_quant`; :func:`act_quant` is re-exported here.

:func:`fp8_linear` picks the variant per shape (:func:`choose_variant`): w8a16 (its word decode up
to :data:`WORDS_MAX_TOKENS` tokens) for at most :data:`W8A16_MAX_TOKENS` tokens, else w8a8 (``docs/QUANTIZATION.md``); the environment variable
:data:`DECODE_VARIANT_ENV` (one of :data:`DECODE_VARIANTS`, read once) replaces the decode choice.
``w8a16_f16`` / ``w8a16_f16asm`` (opt-in; measured 0.94x of w8a16 at one token on the H200): the
weight-only kernel with an fp16 product, the weights converted on the GPU's conversion pipe (one
instruction per two values) and the activations scaled to fp16 per token and sub-step.
``w8a16_words`` (the default up to :data:`WORDS_MAX_TOKENS` tokens; 1.07x - 1.08x ``w8a16`` per
decode step on the H100) / ``w8a16_words_fold`` (opt-in, as fast): the weights read as 32-bit words
and decoded by shifts and masks in a permuted K order (:mod:`.fp8_words`).
Nothing here synchronises with the host, so decode steps are CUDA-graph capturable.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.ref.fp8_gemm import BLOCK, check_fp8_linear_args
from sgl_kernel_v4.triton._dot import dot
from sgl_kernel_v4.triton._utils import cdiv, ieee_f32_dots

from ._utils import num_sms
from .fp8_act_quant import _f16_rows, _quant_rows, act_quant
from .fp8_gemm_tiles import (
    SMEM_BUDGET,
    check_w8a16_config,
    stages_for,
    w8a8_config,
    w8a16_config,
    w8a16_config_legacy,
)
from .fp8_words import ACT_SHIFT, E4M3_BF16_BIAS_LOG2, e4m3_words_decode, permute_k_block

__all__ = [
    "DECODE_VARIANTS",
    "DECODE_VARIANT_ENV",
    "SMEM_BUDGET",
    "VARIANTS",
    "W8A16_MAX_TOKENS",
    "act_quant",
    "WORDS_MAX_TOKENS",
    "choose_variant",
    "decode_variant_override",
    "fp8_linear",
]

#: Largest token count that takes the weight-only kernel (decode / small chunks); above it the
#: activations are quantized and the GEMM runs on fp8 tensor cores.
W8A16_MAX_TOKENS = 64


#: Largest token count that takes ``w8a16_words`` (the word decode): from the H100 run of
#: ``fp8_linear_sweep.py --ab-only`` (benchmark/RESULTS.md) a flash decode step's FP8 linears took
#: 3292 / 3522 us with it against 3508 / 3801 us with ``w8a16`` at 1 / 16 tokens (1.07x / 1.08x),
#: and 5321 against 5025 us at 64 tokens (0.94x).
WORDS_MAX_TOKENS = 16


def choose_variant(num_tokens: int) -> str:
    """``"w8a16_words"`` for ``num_tokens <= WORDS_MAX_TOKENS``, ``"w8a16"`` up to
    ``W8A16_MAX_TOKENS`` (both weight-bandwidth bound), else ``"w8a8"``. (:func:`fp8_linear` runs
    ``w8a16``'s decode where the word decode does not apply: fp16 activations, a partial K step,
    rows not 4-byte aligned.)"""
    if num_tokens <= WORDS_MAX_TOKENS:
        return "w8a16_words"
    return "w8a16" if num_tokens <= W8A16_MAX_TOKENS else "w8a8"


#: Every ``variant`` :func:`fp8_linear` accepts; the decode kernels (the weight-only kernel's
#: structure, ``T <= 64`` tiles) are :data:`DECODE_VARIANTS`.
VARIANTS = ("w8a16", "w8a8", "w8a8_fused", "w8a16_f16", "w8a16_f16asm", "w8a16_words", "w8a16_words_fold")
DECODE_VARIANTS = ("w8a16", "w8a8_fused", "w8a16_f16", "w8a16_f16asm", "w8a16_words", "w8a16_words_fold")
#: ``WORDS`` of :func:`_w8a16_kernel` per variant (the e4m3 word decode of :mod:`.fp8_words`).
_WORDS = {"w8a16_words": 1, "w8a16_words_fold": 2}
#: Names the decode variant :func:`fp8_linear` uses for ``variant=None`` and at most
#: :data:`W8A16_MAX_TOKENS` tokens (unset or empty: :func:`choose_variant`'s).
DECODE_VARIANT_ENV = "SGLANG_V4_FP8_DECODE_VARIANT"


@functools.cache
def decode_variant_override() -> str | None:
    """The decode variant named by :data:`DECODE_VARIANT_ENV`, read once per process (``None`` when
    unset or empty).

    Raises:
        ValueError: the variable names something other than one of :data:`DECODE_VARIANTS`.
    """
    v = os.environ.get(DECODE_VARIANT_ENV, "").strip()
    if not v:
        return None
    if v not in DECODE_VARIANTS:
        raise ValueError(f"{DECODE_VARIANT_ENV}: expected one of {', '.join(DECODE_VARIANTS)}, got {v!r}")
    return v


#: e4m3 byte -> bf16 bits: magnitude (bits 0-6) into bits 4-10 (exponent low 4 bits, mantissa
#: top 3), sign (bit 7) to bit 15; the bf16 is then ``e4m3 * 2**-120`` for every code (e4m3
#: subnormals as bf16 subnormals: the biases differ by 120), so one multiply by ``2**120`` is exact.
#: A pair of bytes ``b0 b1`` is spread to bits 0-7 and 16-23 first; then one shift per field
#: serves both values (SIMD within the register).
E4M3_PERM = 0x4140  # prmt selector: bytes (b0, 0, b1, 0)
E4M3_MAG_SHIFT, E4M3_SIGN_SHIFT = 4, 8
E4M3_MAG_MASK = 0x07F007F0
E4M3_SIGN_MASK = 0x80008000
BF16X2_2P120 = 0x7B807B80


def _e4m3_asm() -> str:
    """PTX: 2 packed e4m3 bytes (``$1``, bits 0-15) -> one bf16x2 register (``$0``): a byte
    permutation, two shifts, two masks and one ``mul.bf16x2`` per two values (the e4m3 conversion
    instructions would take the conversion pipe, 16 results per clock per SM, twice via fp16)."""
    return "\n".join([
        "{",
        ".reg .b32 w, m, s;",
        f"prmt.b32 w, $1, 0, {E4M3_PERM:#x};",
        f"shl.b32 m, w, {E4M3_MAG_SHIFT};",
        f"shl.b32 s, w, {E4M3_SIGN_SHIFT};",
        f"and.b32 m, m, {E4M3_MAG_MASK:#x};",
        f"and.b32 s, s, {E4M3_SIGN_MASK:#x};",
        "or.b32 m, m, s;",
        f"mov.b32 s, {BF16X2_2P120:#x};",
        "mul.rn.bf16x2 $0, m, s;",
        "}",
    ])  # fmt: skip


_E4M3_ASM = tl.constexpr(_e4m3_asm())
#: ``w8a16_words``: activations times ``2**ACT_SHIFT``, scale rows times ``2**(120 - ACT_SHIFT)``;
#: ``w8a16_words_fold``: scale rows times ``2**120`` (the decoded weights are ``e4m3 * 2**-120``).
_ACT_SCALE = tl.constexpr(2.0**ACT_SHIFT)
_SB_SCALE_WORDS = tl.constexpr(2.0 ** (E4M3_BF16_BIAS_LOG2 - ACT_SHIFT))
_SB_SCALE_FOLD = tl.constexpr(2.0**E4M3_BF16_BIAS_LOG2)

#: PTX: 2 packed e4m3 bytes (bits 0-15 of ``$1``) -> one f16x2 register, by the hardware conversion
#: (sm_89+; exact: every e4m3 value is an fp16 value).
_E4M3_F16_ASM = tl.constexpr("{ .reg .b16 lo; cvt.u16.u32 lo, $1; cvt.rn.f16x2.e4m3x2 $0, lo; }")


@triton.jit
def _e4m3_to(b, dtype: tl.constexpr, USE_ASM: tl.constexpr):
    """e4m3 tile -> ``dtype`` (exact): the packed PTX for bf16 on the GPU, else Triton's cast."""
    if USE_ASM:
        out = tl.inline_asm_elementwise(
            _E4M3_ASM, "=r,r", [b.to(tl.uint8, bitcast=True)], dtype=tl.bfloat16, is_pure=True, pack=2
        )
    else:
        out = b.to(dtype)
    return out


@triton.jit
def _e4m3_to_f16(b, USE_ASM: tl.constexpr):
    """e4m3 tile -> fp16 (exact): the hardware's paired conversion (inline PTX) or Triton's cast."""
    if USE_ASM:
        out = tl.inline_asm_elementwise(
            _E4M3_F16_ASM, "=r,r", [b.to(tl.uint8, bitcast=True)], dtype=tl.float16, is_pure=True, pack=2
        )
    else:
        out = b.to(tl.float16)
    return out


@triton.jit
def _w8a16_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    y_ptr,
    part_ptr,
    cnt_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xg,
    stride_wn,
    stride_sn,
    stride_ym,
    stride_part,
    SPLIT_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SUB_K: tl.constexpr,
    USE_ASM: tl.constexpr,
    QUANT_A: tl.constexpr,
    F16: tl.constexpr = 0,
    WORDS: tl.constexpr = 0,
    IEEE: tl.constexpr = False,
):
    """``acc [BLOCK_N, BLOCK_M] = W_tile @ x_tile^T``: the converted weights are the tensor cores'
    register operand (the 64-row MMA side), the tokens the narrow side. A K step of ``BLOCK_K``
    (a multiple of 128, or a divisor of it) is ``BLOCK_K / SUB_K`` sub-steps of ``SUB_K =
    min(BLOCK_K, 128)``, each inside one weight-scale block (the loads of all of them are in the
    loop body, so the pipeline prefetches a whole step). With ``SPLIT_K > 1`` each
    program writes its fp32 partial to ``part`` and the last of a tile's ``SPLIT_K`` programs (a
    per-tile arrival counter, reset by that program) sums them and stores the output: one launch,
    no zero-fill, no cast kernel.

    ``QUANT_A`` (``w8a8_fused``; needs ``SUB_K == 128``): each sub-step's activation tile, one 1x128
    group per token, is quantized in registers (:func:`_quant_rows`) and the dot is e4m3 x e4m3 on
    the weights as loaded (fp32 accumulate), scaled by ``sb[n] * sx[m]``.

    ``F16`` (``w8a16_f16``: 1, Triton's e4m3 -> fp16 cast; ``w8a16_f16asm``: 2, the paired
    conversion in PTX): the weights are converted to fp16 on the conversion pipe (one instruction
    per two values, exact) and each sub-step's activation tile to fp16 with a power-of-two scale
    per token (:func:`_f16_rows`); fp16 dot, scaled by ``sb[n] * sx[m]``.

    ``WORDS`` (``w8a16_words``: 1, ``w8a16_words_fold``: 2; bf16 / fp32 activations, ``SUB_K ==
    128``, ``K % BLOCK_K == 0``): the weights are read as 32-bit words and decoded four at a time
    to ``e4m3 * 2**-120`` in the K order of :mod:`.fp8_words` (the activations permuted to match);
    the ``2**120`` goes to the scale row (with 1, ``2**ACT_SHIFT`` of it to the activations).

    ``IEEE`` (fp32 activations with TF32 off in torch, :func:`~sgl_kernel_v4.triton._utils.ieee_f32_dots`):
    the products of the converted weights and fp32 activations are IEEE fp32, as torch's fp32
    matmul; otherwise an fp32 activation would be rounded to TF32 (10-bit mantissa)."""
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
    if WORDS != 0:
        tl.static_assert(SUB_K == 128, "the word decode needs 128-deep sub-steps")
        w_words = w_ptr.to(tl.pointer_type(tl.uint32)) + rows_w[:, None] * (stride_wn // 4)
        offs_q = tl.arange(0, SUB_K // 4)
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for kt in range(kt0, kt1):
        for h in tl.static_range(BLOCK_K // SUB_K):  # one weight-scale block per sub-step
            k0 = kt * BLOCK_K + h * SUB_K
            offs_k = k0 + tl.arange(0, SUB_K)
            km = offs_k < K
            if WORDS != 0:  # K % BLOCK_K == 0: every sub-step is inside K
                a = tl.load(x_rows + offs_k[None, :], mask=mm[:, None], other=0.0)
                q = tl.load(w_words + (k0 // 4 + offs_q)[None, :], mask=nm[:, None], other=0)
            else:
                a = tl.load(x_rows + offs_k[None, :], mask=mm[:, None] & km[None, :], other=0.0)
                b = tl.load(w_rows + offs_k[None, :], mask=nm[:, None] & km[None, :], other=0.0)
            # clamped: a sub-step past K (BLOCK_K = 256, K % 256 <= 128) reads a real scale, times 0
            sb = tl.load(s_rows + tl.minimum(k0 // 128, (K - 1) // 128), mask=nm, other=0.0)
            if WORDS == 1:
                xa = (permute_k_block(a) * _ACT_SCALE).to(a.dtype)
                acc += (
                    dot(e4m3_words_decode(q, a.dtype), tl.trans(xa), IEEE) * (sb * _SB_SCALE_WORDS)[:, None]
                )
            elif WORDS == 2:
                xa = permute_k_block(a)
                acc += dot(e4m3_words_decode(q, a.dtype), tl.trans(xa), IEEE) * (sb * _SB_SCALE_FOLD)[:, None]
            elif QUANT_A:
                xq, sx = _quant_rows(a)
                acc += tl.dot(b, tl.trans(xq)) * (sb[:, None] * sx[None, :])
            elif F16 != 0:
                xh, sx = _f16_rows(a)
                acc += tl.dot(_e4m3_to_f16(b, F16 == 2), tl.trans(xh)) * (sb[:, None] * sx[None, :])
            else:
                acc += dot(_e4m3_to(b, a.dtype, USE_ASM), tl.trans(a), IEEE) * sb[:, None]
    out = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + (g * N + offs_n)[None, :]
    omask = mm[:, None] & nm[None, :]
    if SPLIT_K == 1:
        tl.store(out, tl.trans(acc).to(y_ptr.dtype.element_ty), mask=omask)
    else:
        # partials [SPLIT_K, M, G*N] fp32, same row stride as y
        part = part_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + (g * N + offs_n)[None, :]
        tl.store(part + ks * stride_part, tl.trans(acc), mask=omask)
        tl.debug_barrier()  # every thread's partial is written before the arrival
        tile = (g * tl.num_programs(1) + pid_m) * tl.num_programs(0) + pid_n
        arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                total += tl.load(part + s * stride_part, mask=omask, other=0.0, cache_modifier=".cg")
            tl.store(out, total.to(y_ptr.dtype.element_ty), mask=omask)
            tl.store(cnt_ptr + tile, 0)  # ready for the next launch


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
    TILE_SCALE: tl.constexpr,
):
    """``TILE_SCALE``: every N tile lies inside one 128-row weight-scale block (``N % 128 == 0`` and
    ``BLOCK_N`` divides 128), so a K step's weight scale is one number: it is folded into the
    per-row activation scale and the fp32 promotion of the step costs one FMA per element."""
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
        if TILE_SCALE:
            sb1 = tl.load(s_ptr + ((g * N + pid_n * BLOCK_N) // 128) * stride_sn + kb)
            acc += tl.dot(a, tl.trans(b)) * (sa * sb1)[:, None]
        else:
            sb = tl.load(s_ptr + (rows_w // 128) * stride_sn + kb, mask=nm, other=0.0)
            acc += tl.dot(a, tl.trans(b)) * sa[:, None] * sb[None, :]
    out = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + (g * N + offs_n)[None, :]
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=mm[:, None] & nm[None, :])


#: Tile rules (:mod:`sgl_kernel_v4.triton.fp8_gemm_tiles`) under the names the tests and the
#: benchmark sweep use: ``_w8a16_config`` is the default, ``_w8a16_config_legacy`` the first rule.
_w8a16_config = w8a16_config
_w8a16_config_legacy = w8a16_config_legacy
_w8a8_config = w8a8_config
_stages = stages_for


_COUNTERS: dict[tuple, torch.Tensor] = {}
_COUNTER_SLOTS = 4096


def _arrival_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Zeroed int32 arrival counters for split-K, one buffer per (device, stream): each launch
    leaves its counters at 0 again, and kernels on one stream never overlap, so the buffer is
    reused by every launch (also inside CUDA graphs; a buffer first made during capture belongs to
    the graph's memory pool and is kept alive here). Streams that run concurrently (the indexer's)
    get their own."""
    if tiles > _COUNTER_SLOTS:
        raise ValueError(f"split-K over {tiles} tiles exceeds {_COUNTER_SLOTS} arrival counters")
    stream = torch.cuda.current_stream(device).stream_id if device.type == "cuda" else 0
    key = (str(device), stream)
    buf = _COUNTERS.get(key)
    if buf is None:
        buf = _COUNTERS[key] = torch.zeros(_COUNTER_SLOTS, dtype=torch.int32, device=device)
    return buf


def _ptx_ok(x: torch.Tensor) -> bool:
    """Inline PTX can run: a CUDA tensor outside Triton's interpreter."""
    return x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1"


def _words_ok(x: torch.Tensor, weight: torch.Tensor, K: int, block_k: int) -> bool:
    """The word decode applies: bf16 / fp32 activations, whole K steps of whole 128-wide permuted
    blocks, 4-byte aligned rows."""
    aligned = weight.stride(0) % 4 == 0 and weight.data_ptr() % 4 == 0
    whole = block_k % BLOCK == 0 and K % block_k == 0
    return x.dtype in (torch.bfloat16, torch.float32) and whole and aligned


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
        variant: ``None`` (:func:`choose_variant` by ``T``; at most :data:`W8A16_MAX_TOKENS` tokens
            :data:`DECODE_VARIANT_ENV` overrides it), ``"w8a16"``, ``"w8a8"``, ``"w8a8_fused"``
            (the decode kernel with the activations quantized per 1x128 group inside it, as
            :func:`act_quant` does; any ``T``, tiled for decode), ``"w8a16_f16"`` or
            ``"w8a16_f16asm"`` (the decode kernel with an fp16 product: weights converted exactly
            to fp16, activations to fp16 with a power-of-two scale per token and sub-step),
            ``"w8a16_words"`` / ``"w8a16_words_fold"`` (weights read as 32-bit words, decoded by
            shifts and masks in a permuted K order, :mod:`.fp8_words`; activations below ``2**64``
            / weight scales below ``2**8``; fp16 activations, ``K`` not a multiple of the K step
            or unaligned weight rows run ``w8a16``, as does a default choice with a ``config``
            whose ``BLOCK_K`` is below 128).
        config: tile override for the chosen kernel (keys of ``_w8a16_config`` / ``_w8a8_config``;
            w8a16 / w8a8_fused: ``fp8_gemm_tiles.check_w8a16_config`` says what is valid, and
            w8a8_fused and the words variants need ``BLOCK_K`` a multiple of 128: a sub-step is
            one activation group / one permuted K block).

    Returns:
        ``[T, G * N]`` in x's dtype (fp32 accumulation).

    Raises:
        ValueError: shapes/dtypes inconsistent, an unknown ``variant``, an invalid w8a16 /
            w8a8_fused ``config``, or (``variant=None``) an invalid :data:`DECODE_VARIANT_ENV`.
    """
    T, G, N, K = check_fp8_linear_args(x, weight, weight_scale)
    chosen = variant is None  # a default: a form that does not apply falls back, never raises
    if variant is None:
        variant = choose_variant(T)
        if T <= W8A16_MAX_TOKENS:
            variant = decode_variant_override() or variant
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected None or one of {', '.join(VARIANTS)}, got {variant!r}")
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
        grid = (cdiv(T, bm) * cdiv(N, bn), G)
        _w8a8_kernel[grid](
            q, qs, weight, weight_scale, y, T, N, K, G, q.stride(0), qs.stride(0), weight.stride(0),
            weight_scale.stride(0), y.stride(0), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm,
            TILE_SCALE=N % 128 == 0 and 128 % bn == 0, **cfg,
        )  # fmt: skip
        return y
    quant_a = variant == "w8a8_fused"
    f16 = {"w8a16_f16": 1, "w8a16_f16asm": 2}.get(variant, 0)
    words = _WORDS.get(variant, 0)
    if config is not None:
        check_w8a16_config(config)
        if (quant_a or (words and not chosen)) and config["BLOCK_K"] < BLOCK:
            raise ValueError(f"config: {variant} needs BLOCK_K >= {BLOCK}, got {config['BLOCK_K']}")
    cfg = dict(config or _w8a16_config(T, N, G, K, num_sms(dev), x.element_size()))
    bm, bn, bk, split = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("BLOCK_K"), cfg.pop("SPLIT_K")
    if words and not _words_ok(x, weight, K, bk):
        words = 0  # the default decode
    grid = (cdiv(N, bn), cdiv(T, bm), G * split)
    y = x.new_empty((T, G * N))
    part, cnt = y, y  # unused without split-K
    if split > 1:
        part = torch.empty((split, T, G * N), dtype=torch.float32, device=dev)
        cnt = _arrival_counters(dev, grid[0] * grid[1] * G)
    _w8a16_kernel[grid](
        x3, weight, weight_scale, y, part, cnt, T, N, K, x3.stride(0), x3.stride(1), weight.stride(0),
        weight_scale.stride(0), y.stride(0), T * G * N, SPLIT_K=split, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
        SUB_K=min(bk, BLOCK), USE_ASM=x.dtype == torch.bfloat16 and _ptx_ok(x),
        QUANT_A=quant_a, F16=f16 if f16 != 2 or _ptx_ok(x) else 1, WORDS=words,
        IEEE=ieee_f32_dots(x.dtype) and not quant_a and f16 == 0, **cfg,
    )  # fmt: skip
    return y

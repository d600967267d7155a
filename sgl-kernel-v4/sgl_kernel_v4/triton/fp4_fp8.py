"""FP4 weight tiles on fp8 tensor cores: e2m1 -> e4m3 byte decode, activations quantized in the kernel.

The opt-in ``fp8`` product of the FP4 MoE kernels (:mod:`.moe_fp4`, ``SGLANG_V4_MOE_FP4_MMA=fp8``).
Every e2m1 value is exact in e4m3 and Hopper multiplies fp8 x fp8 at twice the bf16 rate, so the
weights are decoded to e4m3 *bytes* (no scale applied, four per 32-bit register instead of two
bf16) and the activations are quantized in registers to e4m3 exactly as
:func:`sgl_kernel_v4.ref.fp8_gemm.act_quant` with ``pow2=True`` does (per row and 128-column group:
``amax`` clamped to ``AMAX_MIN``, scale ``pow2_ceil(amax / 448)``, round to nearest even). Per
32-deep scale group of the weights one ``[BLOCK_N, 32] x [32, BLOCK_M]`` fp8 dot gives an fp32
partial that is multiplied by the group's weight scale; the partials of a 128-column activation
group are then multiplied by the activation scale of each token column::

    acc[n, m] += xs[m, g128] * sum_{j < 4} ws[n, 4 g128 + j] * dot(w8[n, 32 j ..], xq[m, 32 j ..])

(DeepSeek's inference code feeds its FP4 expert GEMM fp8 activations in the same per-128 format.)
Pair-mode tiles hold one token (row 0 of the MMA's 16 columns): ``ONE_ROW`` quantizes that row
alone and zero-fills the others, instead of quantizing 16 rows of which 15 are masked.
Both scales are powers of two, so the only rounding beyond fp32 accumulation is the activation
quantization itself.

Weight decode (``DECODE``), on the two nibbles of each packed byte (low nibble = even input):

* ``0`` (``shift``): the three magnitude bits ``e1 e0 m`` go to e4m3 bits 2-4 (lowest two exponent
  bits, top mantissa bit), the sign to bit 7. With e4m3's bias 7 that byte is exactly
  ``e2m1 * 2**-6`` for every code (``0.5`` as the subnormal ``0x04``), and ``2**6`` is folded into
  the fp32 group scale (``2**(b - 121)``: scale bytes up to 248, far beyond the bf16 product's
  128). On 32-bit words: ``lo = (p << 2 & 0x1C1C1C1C) | (p << 4 & 0x80808080)``,
  ``hi = (p >> 2 & 0x1C1C1C1C) | (p & 0x80808080)``: four weights per shift / mask / or.
* ``1`` (``table``): the exact e4m3 byte of the value (``0, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48,
  0x4C`` for magnitudes ``0 .. 6``) by a ``prmt.b32`` byte lookup in the table words
  ``0x3C383000 / 0x4C484440`` (selector nibbles gathered from the bytes first), sign to bit 7; no
  subnormal e4m3 inputs reach the tensor cores.

``USE_ASM`` (CUDA): the decode is inline PTX on packed registers (four bytes per register);
otherwise (the Triton interpreter) the same bytes are computed one per lane. Activation rounding:
``NATIVE_CVT = False`` computes the e4m3 code from the fp32 bits
(:func:`~sgl_kernel_v4.triton.fp8_gemm._e4m3_code`, identical on every backend); ``True`` uses the
GPU's round-to-nearest-even fp32 -> e4m3 conversion (the same bytes on CUDA, fewer instructions;
not on the interpreter, whose conversion does not round to nearest even).
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.ref.fp8_gemm import AMAX_MIN, FP8_MAX

from .fp8_gemm import _e4m3_code, _pow2_ceil

__all__ = [
    "DECODE_NAMES",
    "E4M3_TABLE",
    "MMA_ENV",
    "default_mma",
    "dot_fp4_fp8",
    "fp4_e4m3_group",
    "fp8_code",
]

#: ``FP8_DECODE`` values by name (the config key of :func:`~.moe_fp4.fused_moe_fp4`).
DECODE_NAMES = {"shift": 0, "table": 1}
#: e4m3 bytes of the e2m1 magnitudes ``0, 0.5, 1, 1.5, 2, 3, 4, 6`` (the ``table`` decode).
E4M3_TABLE = (0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C)
_TABLE_LO = sum(b << (8 * i) for i, b in enumerate(E4M3_TABLE[:4]))  # 0x3C383000
_TABLE_HI = sum(b << (8 * i) for i, b in enumerate(E4M3_TABLE[4:]))  # 0x4C484440

_FP8_MAX = tl.constexpr(FP8_MAX)
_AMAX_MIN = tl.constexpr(AMAX_MIN)

#: PTX, ``shift`` decode of four packed bytes ``$2``: ``$0`` their low nibbles, ``$1`` the high ones.
_SHIFT_ASM = tl.constexpr(
    "{\n.reg .b32 t, u;\n"
    "shl.b32 t, $2, 2;\nand.b32 t, t, 0x1C1C1C1C;\nshl.b32 u, $2, 4;\nand.b32 u, u, 0x80808080;\n"
    "or.b32 $0, t, u;\n"
    "shr.b32 t, $2, 2;\nand.b32 t, t, 0x1C1C1C1C;\nand.b32 u, $2, 0x80808080;\nor.b32 $1, t, u;\n}"
)


def _table_asm() -> str:
    """PTX, ``table`` decode of four packed bytes ``$2`` (``$0`` low nibbles, ``$1`` high ones): the
    four 3-bit magnitudes of one half are gathered into the low 16 bits (selector nibbles 0-3), one
    ``prmt`` looks their bytes up in the table words, the signs are or-ed into bit 7."""
    lines = [
        "{",
        ".reg .b32 x, y, s, lo, hi;",
        f"mov.b32 lo, {_TABLE_LO:#x};",
        f"mov.b32 hi, {_TABLE_HI:#x};",
    ]
    for out, (mag, sign) in enumerate(
        (("mov.b32 x, $2;", "shl.b32 s, $2, 4;"), ("shr.b32 x, $2, 4;", "mov.b32 s, $2;"))
    ):
        lines += [
            mag,
            "and.b32 x, x, 0x07070707;",  # bytes m0 m1 m2 m3
            "shr.b32 y, x, 4;",
            "or.b32 x, x, y;",  # nibbles 0, 1 = m0, m1; nibbles 4, 5 = m2, m3
            "prmt.b32 x, x, 0, 0x20;",  # low 16 bits: m0 m1 m2 m3
            "prmt.b32 x, lo, hi, x;",
            sign,
            "and.b32 s, s, 0x80808080;",
            f"or.b32 ${out}, x, s;",
        ]
    return "\n".join([*lines, "}"])


_TABLE_ASM = tl.constexpr(_table_asm())


@triton.jit
def _decode_portable(p, DECODE: tl.constexpr):
    """int32 bytes (one per lane) -> (lo, hi) e4m3 bytes as int32 (see the module docstring)."""
    if DECODE == 0:
        lo = ((p << 2) & 0x1C) | ((p << 4) & 0x80)
        hi = ((p >> 2) & 0x1C) | (p & 0x80)
    else:
        m_lo = p & 7
        m_hi = (p >> 4) & 7
        lo = tl.where(m_lo >= 2, 4 * m_lo + 0x30, tl.where(m_lo == 1, 0x30, 0)) | ((p << 4) & 0x80)
        hi = tl.where(m_hi >= 2, 4 * m_hi + 0x30, tl.where(m_hi == 1, 0x30, 0)) | (p & 0x80)
    return lo, hi


@triton.jit
def fp4_e4m3_group(
    w_rows, sb, row_mask, k0, K, BLOCK_N: tl.constexpr, EVEN_K: tl.constexpr, USE_ASM: tl.constexpr,
    DECODE: tl.constexpr,
):  # fmt: skip
    """One 32-input scale group of the rows ``w_rows`` as e4m3 and its fp32 scale.

    Args:
        w_rows: ``[BLOCK_N]`` pointers to each row's packed bytes; ``sb [BLOCK_N]`` int32 the rows'
            scale bytes of this group (loaded by the caller, one load per K step).
        row_mask: ``[BLOCK_N]`` rows that exist (others read as 0); ``k0`` the group's first input
            (a multiple of 32), ``K`` the row length in inputs (``EVEN_K``: no mask along K).

    Returns:
        ``(w8, ws)``: ``w8 [BLOCK_N, 32]`` float8e4nv in input order, ``ws [BLOCK_N]`` fp32 with
        ``w8 * ws`` the dequantized weights exactly (``2**(b - 127)``, times ``2**6`` for the
        ``shift`` decode).
    """
    offs = tl.multiple_of(k0 // 2, 16) + tl.arange(0, 16)
    if EVEN_K:
        mask = row_mask[:, None]
    else:
        mask = row_mask[:, None] & (offs < K // 2)[None, :]
    p = tl.load(w_rows[:, None] + offs[None, :], mask=mask, other=0).to(tl.uint8, bitcast=True)
    if USE_ASM:
        if DECODE == 0:
            lo, hi = tl.inline_asm_elementwise(
                _SHIFT_ASM, "=r,=r,r", [p], dtype=(tl.uint8, tl.uint8), is_pure=True, pack=4
            )
        else:
            lo, hi = tl.inline_asm_elementwise(
                _TABLE_ASM, "=r,=r,r", [p], dtype=(tl.uint8, tl.uint8), is_pure=True, pack=4
            )
    else:
        lo, hi = _decode_portable(p.to(tl.int32), DECODE)
        lo = lo.to(tl.uint8)
        hi = hi.to(tl.uint8)
    w8 = tl.reshape(tl.join(lo, hi), (BLOCK_N, 32)).to(tl.float8e4nv, bitcast=True)
    if DECODE == 0:
        ws = ((sb + 6) << 23).to(tl.float32, bitcast=True)  # 2**(b - 127) * 2**6
    else:  # 2**(b - 127); byte 0 is the subnormal 2**-127
        ws = tl.where(sb == 0, 5.877471754111438e-39, (sb << 23).to(tl.float32, bitcast=True))
    return w8, ws


@triton.jit
def _quant(q, NATIVE_CVT: tl.constexpr):
    """fp32 ``q`` (activations times the exact inverse of their power-of-two scale) -> e4m3 bytes
    (uint8), clamped to +-448 and rounded to nearest even."""
    q = tl.minimum(tl.maximum(q, -_FP8_MAX), _FP8_MAX)
    if NATIVE_CVT:
        out = q.to(tl.float8e4nv, fp_downcast_rounding="rtne").to(tl.uint8, bitcast=True)
    else:
        out = _e4m3_code(q).to(tl.uint8)
    return out


@triton.jit
def _scales(amax):
    """Group amax -> (power-of-two scale, its exact inverse), as ``act_quant(pow2=True)``."""
    s = _pow2_ceil(tl.math.div_rn(tl.maximum(amax, _AMAX_MIN), _FP8_MAX))
    inv = ((254 - ((s.to(tl.int32, bitcast=True) >> 23) & 0xFF)) << 23).to(tl.float32, bitcast=True)
    return s, inv


@triton.jit
def dot_fp4_fp8(
    a_rows, a_rmask, KA, w_rows, s_rows, row_mask, k0, K, acc, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, USE_ASM: tl.constexpr, DECODE: tl.constexpr, NATIVE_CVT: tl.constexpr,
    ONE_ROW: tl.constexpr,
):  # fmt: skip
    """``acc + W[:, k0 : k0 + BLOCK_K] @ act_quant(a[:, k0 : k0 + BLOCK_K])^T`` on fp8 tensor cores.

    Args:
        a_rows: ``[BM]`` pointers to the activation rows (inputs ``0 .. KA``, any float dtype),
            ``a_rmask [BM]`` the rows that exist (others read as 0). ``ONE_ROW`` (pair mode: only
            tile row 0 is a real token): ``a_rows`` is that row's pointer and ``a_rmask`` whether it
            exists (scalars); it alone is quantized (not ``BM`` rows), the other rows are zeros.
        w_rows, row_mask, K, EVEN_K: the weight rows as :func:`fp4_e4m3_group`; ``s_rows
            [BLOCK_N]`` pointers to their scale bytes.
        k0: first input of the step, a multiple of ``BLOCK_K`` (itself a multiple of 128: an
            activation group never spans two steps).
        acc: ``[BLOCK_N, BM]`` fp32.

    Returns:
        ``acc`` plus the step's product; the activations are quantized per row and 128-column
        group as ``act_quant(pow2=True)`` (``KA`` ends the last, partial group), the weights exact.
    """
    BM: tl.constexpr = acc.shape[1]
    NG: tl.constexpr = BLOCK_K // 128
    G: tl.constexpr = BLOCK_K // 32
    offs = k0 + tl.arange(0, BLOCK_K)
    col = tl.arange(0, NG)
    # the step's weight scale bytes in one load (G contiguous bytes a row: pipelined like the weights)
    offs_g = tl.multiple_of(k0 // 32, G) + tl.arange(0, G)
    if EVEN_K:
        smask = row_mask[:, None]
    else:
        smask = row_mask[:, None] & (offs_g < K // 32)[None, :]
    sbs = tl.load(s_rows[:, None] + offs_g[None, :], mask=smask, other=0).to(tl.int32) & 0xFF
    if ONE_ROW:  # the row flag as a vector compare (the interpreter mishandles a scalar in a mask)
        a_ok = (offs * 0 + a_rmask.to(tl.int32)) != 0
        a = tl.load(a_rows + offs, mask=(offs < KA) & a_ok, other=0.0)
        s, inv = _scales(tl.max(tl.abs(tl.reshape(a.to(tl.float32), (NG, 128))), axis=1))  # [NG]
        row0 = (tl.arange(0, BM) == 0)[:, None]
    else:
        a = tl.load(a_rows[:, None] + offs[None, :], mask=a_rmask[:, None] & (offs < KA)[None, :], other=0.0)
        s, inv = _scales(tl.max(tl.abs(tl.reshape(a.to(tl.float32), (BM, NG, 128))), axis=2))  # [BM, NG]
    for g in tl.static_range(NG):
        if ONE_ROW:
            s_g = tl.sum(tl.where(col == g, s, 0.0), axis=0)  # scalars: group g
            inv_g = tl.sum(tl.where(col == g, inv, 0.0), axis=0)
        else:
            s_g = tl.sum(tl.where(col[None, :] == g, s, 0.0), axis=1)[None, :]  # [1, BM]: column g
            inv_g = tl.sum(tl.where(col[None, :] == g, inv, 0.0), axis=1)[:, None]
        gacc = tl.zeros([BLOCK_N, BM], tl.float32)
        for j in tl.static_range(4):
            kk = k0 + g * 128 + j * 32
            o32 = kk + tl.arange(0, 32)
            if ONE_ROW:
                x = tl.load(a_rows + o32, mask=(o32 < KA) & (o32 * 0 + a_rmask.to(tl.int32) != 0), other=0.0)
                x = x.to(tl.float32)
                xq = tl.where(row0, _quant(x * inv_g, NATIVE_CVT)[None, :], 0)
            else:
                am = a_rmask[:, None] & (o32 < KA)[None, :]
                x = tl.load(a_rows[:, None] + o32[None, :], mask=am, other=0.0).to(tl.float32)
                xq = _quant(x * inv_g, NATIVE_CVT)
            sb = tl.sum(tl.where(tl.arange(0, G)[None, :] == g * 4 + j, sbs, 0), axis=1)  # column g * 4 + j
            w8, ws = fp4_e4m3_group(w_rows, sb, row_mask, kk, K, BLOCK_N, EVEN_K, USE_ASM, DECODE)
            gacc += tl.dot(w8, tl.trans(xq.to(tl.float8e4nv, bitcast=True))) * ws[:, None]
        acc += gacc * s_g
    return acc


#: Environment variable choosing the product of the FP4 kernels: ``bf16`` (default) or ``fp8``.
MMA_ENV = "SGLANG_V4_MOE_FP4_MMA"


@functools.cache
def default_mma() -> str:
    """``$SGLANG_V4_MOE_FP4_MMA`` (read once): ``"bf16"`` (unset or empty) or ``"fp8"``.

    Raises:
        ValueError: any other value."""
    v = os.environ.get(MMA_ENV, "").strip().lower() or "bf16"
    if v not in ("bf16", "fp8"):
        raise ValueError(f"{MMA_ENV}: expected 'bf16' or 'fp8', got {v!r}")
    return v


def fp8_code(cfg: dict[str, int], x: torch.Tensor, interpreting: bool) -> int:
    """The FP4 MoE kernels' ``FP8_MMA`` constexpr from the config keys it pops from ``cfg``
    (``FP8_MMA``, default :func:`default_mma`; ``FP8_DECODE``; ``FP8_CVT``): 0 (bf16 product), else
    ``1 | FP8_DECODE << 1 | FP8_CVT << 2``. ``x``: the activations (``FP8_CVT`` needs them on CUDA,
    not ``interpreting``).

    Raises:
        ValueError: ``FP8_DECODE`` / ``FP8_CVT`` not 0 or 1, ``FP8_CVT`` off CUDA."""
    on = bool(cfg.pop("FP8_MMA", int(default_mma() == "fp8")))
    decode, cvt = int(cfg.pop("FP8_DECODE", 0)), int(cfg.pop("FP8_CVT", 0))
    if decode not in DECODE_NAMES.values() or cvt not in (0, 1):
        raise ValueError(f"config: FP8_DECODE and FP8_CVT must be 0 or 1, got {decode}, {cvt}")
    if cvt and (not x.is_cuda or interpreting):
        raise ValueError("config: FP8_CVT=1 (the GPU's e4m3 conversion) needs CUDA, not the interpreter")
    return (1 | decode << 1 | cvt << 2) if on else 0

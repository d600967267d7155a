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
* ``2`` (``fold``): one dot per 128 inputs instead of four per-32 dots: the table holds the values
  times ``2**-5`` (:data:`FOLD_TABLE`, all normal) plus ``8 * (b - bmin)`` in the exponent field,
  ``bmin`` the smallest of the row's four scale bytes in the 128-group, so the bytes carry the
  four scales relative to ``2**(bmin - 122)``, one fp32 multiply per row. Exact when the four
  bytes span at most :data:`FOLD_MAX_SPREAD` = 11 octaves (``6 * 2**-5 * 2**11 = 384`` is still an
  e4m3 value), which :func:`fold_exact` checks on the host (once, at load); the kernel does not.

``USE_ASM`` (CUDA): the decode is inline PTX on packed registers (four bytes per register);
otherwise (the Triton interpreter) the same bytes are computed one per lane. Activation rounding:
``NATIVE_CVT = False`` computes the e4m3 code from the fp32 bits
(:func:`~sgl_kernel_v4.triton.fp8_act_quant._e4m3_code`, identical on every backend); ``True`` uses the
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

from .fp8_act_quant import _e4m3_code, _pow2_ceil

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
DECODE_NAMES = {"shift": 0, "table": 1, "fold": 2}
#: e4m3 bytes of the e2m1 magnitudes ``0, 0.5, 1, 1.5, 2, 3, 4, 6`` (the ``table`` decode).
E4M3_TABLE = (0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C)
_TABLE_LO = sum(b << (8 * i) for i, b in enumerate(E4M3_TABLE[:4]))  # 0x3C383000
_TABLE_HI = sum(b << (8 * i) for i, b in enumerate(E4M3_TABLE[4:]))  # 0x4C484440
#: e4m3 bytes of the e2m1 magnitudes times ``2**-5`` (the ``fold`` decode: all normal, and up to
#: 11 octaves can be added to their exponent field before 384 = the largest byte used, 0x7C).
FOLD_TABLE = (0x00, 0x08, 0x10, 0x14, 0x18, 0x1C, 0x20, 0x24)
FOLD_MAX_SPREAD = 11
_FOLD_LO = sum(b << (8 * i) for i, b in enumerate(FOLD_TABLE[:4]))  # 0x14100800
_FOLD_HI = sum(b << (8 * i) for i, b in enumerate(FOLD_TABLE[4:]))  # 0x24201C18

_FP8_MAX = tl.constexpr(FP8_MAX)
_AMAX_MIN = tl.constexpr(AMAX_MIN)

#: PTX, ``shift`` decode of four packed bytes ``$2``: ``$0`` their low nibbles, ``$1`` the high ones.
_SHIFT_ASM = tl.constexpr(
    "{\n.reg .b32 t, u;\n"
    "shl.b32 t, $2, 2;\nand.b32 t, t, 0x1C1C1C1C;\nshl.b32 u, $2, 4;\nand.b32 u, u, 0x80808080;\n"
    "or.b32 $0, t, u;\n"
    "shr.b32 t, $2, 2;\nand.b32 t, t, 0x1C1C1C1C;\nand.b32 u, $2, 0x80808080;\nor.b32 $1, t, u;\n}"
)


def _table_asm(fold: bool = False) -> str:
    """PTX, ``table`` decode of four packed bytes ``$2`` (``$0`` low nibbles, ``$1`` high ones): the
    four 3-bit magnitudes of one half are gathered into the low 16 bits (selector nibbles 0-3), one
    ``prmt`` looks their bytes up in the table words, the signs are or-ed into bit 7. ``fold``: the
    table is :data:`FOLD_TABLE` (values times ``2**-5``, bytes <= 0x24) and ``$3`` holds each
    element's exponent offset byte ``8 d`` (<= 0x58), added to the nonzero codes: per byte
    ``(code + 0x7F) & 0x80`` flags a nonzero code, ``flag - flag >> 7`` widens it to 0x7F (no
    carry or borrow crosses a byte: the sums stay below 0x100, the results below 0x80)."""
    lo, hi = (_FOLD_LO, _FOLD_HI) if fold else (_TABLE_LO, _TABLE_HI)
    lines = ["{", ".reg .b32 x, y, s, lo, hi;", f"mov.b32 lo, {lo:#x};", f"mov.b32 hi, {hi:#x};"]
    halves = (("mov.b32 x, $2;", "shl.b32 s, $2, 4;"), ("shr.b32 x, $2, 4;", "mov.b32 s, $2;"))
    for out, (mag, sign) in enumerate(halves):
        lines += [
            mag,
            "and.b32 x, x, 0x07070707;",  # bytes m0 m1 m2 m3
            "shr.b32 y, x, 4;",
            "or.b32 x, x, y;",  # nibbles 0, 1 = m0, m1; nibbles 4, 5 = m2, m3
            "prmt.b32 x, x, 0, 0x20;",  # low 16 bits: m0 m1 m2 m3
            "prmt.b32 x, lo, hi, x;",
        ]
        if fold:
            lines += [
                "add.u32 y, x, 0x7F7F7F7F;",
                "and.b32 y, y, 0x80808080;",  # bit 7: code != 0
                "shr.b32 s, y, 7;",
                "sub.u32 y, y, s;",  # 0x7F where code != 0
                "and.b32 y, y, $3;",
                "add.u32 x, x, y;",
            ]
        lines += [sign, "and.b32 s, s, 0x80808080;", f"or.b32 ${out}, x, s;"]
    return "\n".join([*lines, "}"])


_TABLE_ASM = tl.constexpr(_table_asm())
_FOLD_ASM = tl.constexpr(_table_asm(fold=True))


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
def _fold_group(w_rows, sb4, v4, row_mask, kk, K, BLOCK_N: tl.constexpr, EVEN_K: tl.constexpr,
                USE_ASM: tl.constexpr):  # fmt: skip
    """128 inputs from ``kk`` of the rows ``w_rows`` with their four 32-groups' scales folded into the
    bytes: ``sb4 [BLOCK_N, 4]`` int32 scale bytes (``v4 [4]``: the groups inside K). Each byte is
    the exact e4m3 of ``e2m1 * 2**(b - bmin - 5)`` (``bmin`` the row's smallest valid byte; exact
    when ``b - bmin <= FOLD_MAX_SPREAD``; scale bytes up to 249); returns ``(w8 [BLOCK_N, 128], ws = 2**(bmin - 122) [BLOCK_N])``."""
    offs = tl.multiple_of(kk // 2, 64) + tl.arange(0, 64)
    if EVEN_K:
        mask = row_mask[:, None]
    else:
        mask = row_mask[:, None] & (offs < K // 2)[None, :]
    p = tl.load(w_rows[:, None] + offs[None, :], mask=mask, other=0).to(tl.uint8, bitcast=True)
    bmin = tl.min(tl.where(v4[None, :], sb4, 255), axis=1)
    d8 = tl.where(v4[None, :], sb4 - bmin[:, None], 0) * 8  # [BLOCK_N, 4]
    dd = tl.reshape(tl.broadcast_to(d8[:, :, None], (BLOCK_N, 4, 16)), (BLOCK_N, 64))
    if USE_ASM:
        lo, hi = tl.inline_asm_elementwise(
            _FOLD_ASM, "=r,=r,r,r", [p, dd.to(tl.uint8)], dtype=(tl.uint8, tl.uint8), is_pure=True, pack=4
        )
    else:
        q = p.to(tl.int32)
        m_lo = q & 7
        m_hi = (q >> 4) & 7
        lo = tl.where(m_lo >= 2, 4 * m_lo + 0x08 + dd, tl.where(m_lo == 1, 0x08 + dd, 0)) | ((q << 4) & 0x80)
        hi = tl.where(m_hi >= 2, 4 * m_hi + 0x08 + dd, tl.where(m_hi == 1, 0x08 + dd, 0)) | (q & 0x80)
        lo = lo.to(tl.uint8)
        hi = hi.to(tl.uint8)
    w8 = tl.reshape(tl.join(lo, hi), (BLOCK_N, 128)).to(tl.float8e4nv, bitcast=True)
    ws = ((tl.where(bmin == 255, 0, bmin) + 5) << 23).to(tl.float32, bitcast=True)  # 255: no valid group
    return w8, ws


@triton.jit
def _act_tile(a_rows, a_rmask, kk, KA, inv_g, N: tl.constexpr, BM: tl.constexpr, ONE_ROW: tl.constexpr,
              NATIVE_CVT: tl.constexpr):  # fmt: skip
    """Activations ``kk .. kk + N`` (inside one 128-group) times ``inv_g``, quantized: ``[BM, N]`` e4m3."""
    o = kk + tl.arange(0, N)
    if ONE_ROW:  # the row flag as a vector compare (the interpreter mishandles a scalar in a mask)
        x = tl.load(a_rows + o, mask=(o < KA) & (o * 0 + a_rmask.to(tl.int32) != 0), other=0.0)
        xq = tl.where(
            (tl.arange(0, BM) == 0)[:, None], _quant(x.to(tl.float32) * inv_g, NATIVE_CVT)[None, :], 0
        )
    else:
        x = tl.load(a_rows[:, None] + o[None, :], mask=a_rmask[:, None] & (o < KA)[None, :], other=0.0)
        xq = _quant(x.to(tl.float32) * inv_g, NATIVE_CVT)
    return xq.to(tl.float8e4nv, bitcast=True)


@triton.jit
def _group_scale(s, g: tl.constexpr, NG: tl.constexpr, ONE_ROW: tl.constexpr):
    """Column ``g`` of the activation scales ``s``: a scalar from ``s [NG]`` (``ONE_ROW``), else
    ``[BM]`` from ``s [BM, NG]``."""
    col = tl.arange(0, NG)
    if ONE_ROW:
        out = tl.sum(tl.where(col == g, s, 0.0), axis=0)
    else:
        out = tl.sum(tl.where(col[None, :] == g, s, 0.0), axis=1)
    return out


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
        DECODE: 0 ``shift`` / 1 ``table`` (one dot per 32-group, scaled in fp32), 2 ``fold`` (one dot
            per 128-group, the four weight scales folded into the bytes: exact only where every
            row's scale bytes in each 128-group span at most ``FOLD_MAX_SPREAD`` octaves, which
            :func:`fold_exact` checks; not checked here, a runtime branch would stop the software
            pipelining of the loads).

    Returns:
        ``acc`` plus the step's product; the activations are quantized per row and 128-column
        group as ``act_quant(pow2=True)`` (``KA`` ends the last, partial group), the weights exact.
    """
    BM: tl.constexpr = acc.shape[1]
    NG: tl.constexpr = BLOCK_K // 128
    G: tl.constexpr = BLOCK_K // 32
    offs = k0 + tl.arange(0, BLOCK_K)
    # the step's weight scale bytes in one load (G contiguous bytes a row)
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
    else:
        a = tl.load(a_rows[:, None] + offs[None, :], mask=a_rmask[:, None] & (offs < KA)[None, :], other=0.0)
        s, inv = _scales(tl.max(tl.abs(tl.reshape(a.to(tl.float32), (BM, NG, 128))), axis=2))  # [BM, NG]
    if DECODE == 2:
        for gf in tl.static_range(NG):
            s_g_f = _group_scale(s, gf, NG, ONE_ROW)
            inv_g_f = _group_scale(inv, gf, NG, ONE_ROW)
            if not ONE_ROW:
                s_g_f = s_g_f[None, :]
                inv_g_f = inv_g_f[:, None]
            sel_f = tl.arange(0, NG)[None, :, None] == gf
            sb4_f = tl.sum(tl.where(sel_f, tl.reshape(sbs, (BLOCK_N, NG, 4)), 0), axis=1)  # [BLOCK_N, 4]
            v4_f = (k0 + gf * 128 + tl.arange(0, 4) * 32) < K
            w8_f, ws_f = _fold_group(
                w_rows, sb4_f, v4_f, row_mask, k0 + gf * 128, K, BLOCK_N, EVEN_K, USE_ASM
            )
            xq_f = _act_tile(a_rows, a_rmask, k0 + gf * 128, KA, inv_g_f, 128, BM, ONE_ROW, NATIVE_CVT)
            acc += (tl.dot(w8_f, tl.trans(xq_f)) * ws_f[:, None]) * s_g_f
    else:
        for g in tl.static_range(NG):
            s_g = _group_scale(s, g, NG, ONE_ROW)
            inv_g = _group_scale(inv, g, NG, ONE_ROW)
            if not ONE_ROW:
                s_g = s_g[None, :]
                inv_g = inv_g[:, None]
            gacc = tl.zeros([BLOCK_N, BM], tl.float32)
            for j in tl.static_range(4):
                kk = k0 + g * 128 + j * 32
                xq = _act_tile(a_rows, a_rmask, kk, KA, inv_g, 32, BM, ONE_ROW, NATIVE_CVT)
                sb = tl.sum(tl.where(tl.arange(0, G)[None, :] == g * 4 + j, sbs, 0), axis=1)  # column g*4+j
                w8, ws = fp4_e4m3_group(w_rows, sb, row_mask, kk, K, BLOCK_N, EVEN_K, USE_ASM, DECODE % 2)
                gacc += tl.dot(w8, tl.trans(xq)) * ws[:, None]
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
    ``1 | FP8_DECODE << 1 | FP8_CVT << 3``. ``x``: the activations (``FP8_CVT`` needs them on CUDA,
    not ``interpreting``).

    Raises:
        ValueError: ``FP8_DECODE`` not 0-2 / ``FP8_CVT`` not 0 or 1, ``FP8_CVT`` off CUDA."""
    on = bool(cfg.pop("FP8_MMA", int(default_mma() == "fp8")))
    decode, cvt = int(cfg.pop("FP8_DECODE", 0)), int(cfg.pop("FP8_CVT", 0))
    if decode not in DECODE_NAMES.values() or cvt not in (0, 1):
        raise ValueError(f"config: FP8_DECODE must be 0, 1 or 2 and FP8_CVT 0 or 1, got {decode}, {cvt}")
    if cvt and (not x.is_cuda or interpreting):
        raise ValueError("config: FP8_CVT=1 (the GPU's e4m3 conversion) needs CUDA, not the interpreter")
    return (1 | decode << 1 | cvt << 3) if on else 0


def fold_exact(*scales: torch.Tensor) -> bool:
    """Whether the ``fold`` decode (``FP8_DECODE=2``) is exact for these ue8m0 scale tensors
    (``[..., R, C/32]`` uint8, e.g. ``w13_scale, w2_scale``): in every row each aligned group of four
    scale bytes (128 inputs) spans at most :data:`FOLD_MAX_SPREAD` octaves and no byte exceeds 249.
    One reduction per tensor and a host sync: call once at load, not per forward.

    Raises:
        ValueError: a scale tensor that is not uint8."""
    for sc in scales:
        if sc.dtype != torch.uint8:
            raise ValueError(f"scales: expected uint8 ue8m0 bytes, got {sc.dtype}")
        b = sc.to(torch.int16)
        pad = (-b.shape[-1]) % 4
        hi = torch.nn.functional.pad(b, (0, pad), value=0).unflatten(-1, (-1, 4)).amax(-1)
        lo = torch.nn.functional.pad(b, (0, pad), value=255).unflatten(-1, (-1, 4)).amin(-1)
        if bool(((hi - lo) > FOLD_MAX_SPREAD).any()) or bool((b > 249).any()):
            return False
    return True

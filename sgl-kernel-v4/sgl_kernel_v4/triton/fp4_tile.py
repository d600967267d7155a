"""Decoding FP4 (e2m1 x ue8m0 per 32) weight tiles in registers, shared by the FP4 MoE kernels.

Format: :mod:`sgl_kernel_v4.ref.moe_fp4` (byte ``j`` of a row holds inputs ``2j`` in its low nibble
and ``2j+1`` in its high nibble; one scale byte ``b`` per 32 inputs, value ``2 ** (b - 127)``).

A tile is returned as two halves, ``lo`` (the even inputs) and ``hi`` (the odd inputs), each
``[BLOCK_N, BLOCK_K / 2]``: the kernels multiply them with the even and odd columns of the
activations (two dots of depth ``BLOCK_K / 2``), so nibbles are never interleaved back into K
order in registers.

The decode is integer bit placement, no conversion instruction and no table: the three magnitude
bits ``e1 e0 m`` of a nibble are written into the lowest two exponent bits and the top mantissa bit
of a float, its sign bit into the float's sign. With exponent bias 127 (fp32 and bf16 alike) that
float is exactly ``e2m1 * 2**-126`` for every code: ``e >= 1`` gives the normal
``(1 + m/2) * 2**(e - 127)``, ``e == 0`` the subnormal ``m/2 * 2**-126``. One multiply by
``2**126 * 2**(b - 127) = 2**(b - 1)`` (a power of two, built from the scale byte's bits) gives the
dequantized weight exactly: two significant bits times a power of two fit bf16. So scale bytes
``0 .. 128`` (scales up to 2; V4's are around ``2**-7``) are exact; larger scales overflow the
single multiply and are not supported (``Experts`` checks this once at load).

Two implementations of the same arithmetic:

* ``USE_ASM`` (CUDA, bf16 activations): inline PTX on packed registers. Four bytes
  (``b0 b1 b2 b3``) are permuted to ``b0 b2 b1 b3``, after which one 32-bit shift / mask places two
  nibbles at once into the two bf16 halves of a register (SIMD within a register): about two
  integer instructions per weight plus one ``mul.bf16x2`` per two weights (subnormal bf16 inputs
  are exact in it). :data:`SWAR_PLAN` lists the shifts; ``test/test_kernels_moe_fp4.py`` replays
  it on every byte value on the CPU and, on the GPU, checks the compiled decode on every byte.
* Portable (the Triton interpreter, fp16 / fp32 activations): the same placement on one nibble per
  32-bit lane (fp32 bits: magnitude at bits 22-24, sign at bit 31) and the same multiply in fp32.

The word decode (:func:`fp4_words_tile`, opt-in ``FP4_WORDS`` of :mod:`.moe_fp4`) does the same
placement on whole 32-bit words (8 nibbles) without the byte permutation: nibbles ``j`` and ``j + 4``
of a word go to the two halves of one bf16x2 register by one shift / mask pair (15 integer
instructions per word, then one ``mul.bf16x2`` per register), in a permuted K order
(:func:`fp4_words_k_perm`: each thread's MMA fragment is whole words, read with 16-byte loads; the
activations are permuted to match, :func:`permute_fp4_k`, and multiplied in one dot per step).

Compile statistics (``benchmark/decode_sass_count.py --moe``: Triton 3.6, sm_90, bf16, the
pair-mode tiles: 64 x 256 steps, 4 warps; K loop SASS per step and warp, 8,192 e2m1 bytes per
step). Counts, not timings: no speed is claimed from them.

=======================  ===============  ====  =====  ======  ======  =====  =====  ========
configuration            kernel           regs  spill  smem B  decode  scale  total  per byte
=======================  ===============  ====  =====  ======  ======  =====  =====  ========
``fused_dsplit1``        gate/up (fused)  141   0      41,984  288     64     583    0.285
``fused_dsplit1``        down (K split)   145   0      58,880  288     64     572    0.279
``fused_dsplit1_words``  gate/up (fused)  138   0      41,984  240     64     459    0.224
``fused_dsplit1_words``  down (K split)   138   0      58,880  240     64     463    0.226
=======================  ===============  ====  =====  ======  ======  =====  =====  ========
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["SWAR_PLAN", "fp4_tile", "fp4_words_k_perm", "fp4_words_tile", "permute_fp4_k"]

#: (nibble, magnitude shift, sign shift) for the two bf16x2 outputs of one byte pair ``b0 b1``,
#: after the byte permutation that puts ``b0`` at bits 0-7 and ``b1`` at bits 16-23 (a positive
#: shift is to the left): the magnitude bits go to 6-8 and 22-24, the signs to 15 and 31.
SWAR_PLAN = (("lo", 6, 12), ("hi", 2, 8))
MAG_MASK = 0x01C001C0
SIGN_MASK = 0x80008000
BYTE_PERM = 0x4140  # prmt selector: result bytes (b0, 0, b1, 0)


def _shift(dst: str, src: str, n: int) -> str:
    if n > 0:
        return f"shl.b32 {dst}, {src}, {n};"
    if n < 0:
        return f"shr.b32 {dst}, {src}, {-n};"
    return f"mov.b32 {dst}, {src};"


def _asm() -> str:
    """PTX for one pair of bytes (two consecutive ones of a row, inputs ``2j .. 2j+3``): outputs ``$0``
    (their low nibbles, bf16x2) and ``$1`` (high nibbles); inputs ``$2`` (the two bytes in bits
    0-15) and ``$3, $4`` (each byte's scale register, the bf16x2 pair ``2**(b-1), 2**(b-1)``; the
    pair lies inside one 32-input group, so ``$3`` serves both)."""
    lines = ["{", ".reg .b32 w, m, s;", f"prmt.b32 w, $2, 0, {BYTE_PERM:#x};"]
    for i, (_, mag, sign) in enumerate(SWAR_PLAN):
        lines += [
            _shift("m", "w", mag),
            _shift("s", "w", sign),
            f"and.b32 m, m, {MAG_MASK:#x};",
            f"and.b32 s, s, {SIGN_MASK:#x};",
            "or.b32 m, m, s;",
            f"mul.rn.bf16x2 ${i}, m, $3;",
        ]
    lines.append("}")
    return "\n".join(lines)


_ASM = tl.constexpr(_asm())


@triton.jit
def _decode_portable(p, scale, dtype: tl.constexpr):
    """int32 bytes + fp32 ``2**(b-1)`` scales (same shape) -> (lo, hi) in ``dtype``."""
    sign_bit = -2147483648  # 1 << 31 as int32
    lo = ((p << 22) & 0x01C00000) | ((p << 28) & sign_bit)
    hi = ((p << 18) & 0x01C00000) | ((p << 24) & sign_bit)
    lo = lo.to(tl.float32, bitcast=True) * scale
    hi = hi.to(tl.float32, bitcast=True) * scale
    return lo.to(dtype), hi.to(dtype)


@triton.jit
def fp4_tile(
    w_rows,
    s_rows,
    row_mask,
    k0,
    K,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    USE_ASM: tl.constexpr,
    dtype: tl.constexpr,
):
    """Dequantized tile of inputs ``k0 .. k0 + BLOCK_K`` of the rows ``w_rows``.

    Args:
        w_rows: ``[BLOCK_N]`` pointers to each row's packed bytes (int8 / uint8).
        s_rows: ``[BLOCK_N]`` pointers to each row's scale bytes (uint8).
        row_mask: ``[BLOCK_N]`` rows that exist (others read as 0).
        k0: first input (a multiple of ``BLOCK_K``); ``K`` the row length in inputs.
        EVEN_K: ``K % BLOCK_K == 0`` (no mask along K).
        USE_ASM: the packed PTX decode (requires ``dtype == tl.bfloat16`` and a GPU).

    Returns:
        ``(lo, hi)``: ``[BLOCK_N, BLOCK_K // 2]`` in ``dtype``; ``lo[n, j]`` is input ``k0 + 2j``,
        ``hi[n, j]`` input ``k0 + 2j + 1``.
    """
    HALF: tl.constexpr = BLOCK_K // 2
    G: tl.constexpr = BLOCK_K // 32
    offs_b = tl.multiple_of(k0 // 2, HALF) + tl.arange(0, HALF)
    offs_g = tl.multiple_of(k0 // 32, G) + tl.arange(0, G)
    if EVEN_K:
        mask = row_mask[:, None]
        smask = row_mask[:, None]
    else:
        mask = row_mask[:, None] & (offs_b < K // 2)[None, :]
        smask = row_mask[:, None] & (offs_g < K // 32)[None, :]
    p = tl.load(w_rows[:, None] + offs_b[None, :], mask=mask, other=0)
    sb = tl.load(s_rows[:, None] + offs_g[None, :], mask=smask, other=0).to(tl.int32) & 0xFF
    if USE_ASM:
        # 2**126 * 2**(b - 127) as bf16 bits (exponent field b - 1), in both halves
        s16 = (sb + 126) << 7
        s = tl.reshape(tl.broadcast_to((s16 | (s16 << 16))[:, :, None], (BLOCK_N, G, 16)), (BLOCK_N, HALF))
        lo, hi = tl.inline_asm_elementwise(
            _ASM,
            "=r,=r,r,r,r",
            [p, s],
            dtype=(tl.bfloat16, tl.bfloat16),
            is_pure=True,
            pack=2,
        )
    else:
        s32 = ((sb + 126) << 23).to(tl.float32, bitcast=True)
        s = tl.reshape(tl.broadcast_to(s32[:, :, None], (BLOCK_N, G, 16)), (BLOCK_N, HALF))
        lo, hi = _decode_portable(p.to(tl.int32), s, dtype)
    return lo, hi


# ---- the word decode (opt-in ``FP4_WORDS``): 32-bit words, a permuted K order, one dot ------------

#: ``mul.rn.bf16x2`` of two packed registers (the scale multiply of the word decode's bf16 lanes).
_MUL_BF16X2 = tl.constexpr("mul.rn.bf16x2 $0, $1, $2;")


def fp4_words_k_perm(block_k: int) -> list[int]:
    """Host copy of the word decode's K order: ``perm[k]`` = the input (``k0 + perm[k]``) that
    logical index ``k = 16 t + 8 h + 2 c + e`` of a ``block_k``-deep step reads, ``t = 2 tw + tm``:
    input ``8 (C c + tw) + 2 tm + h + 4 e`` with ``C = block_k / 32`` (thread column ``c`` of the MMA
    fragment owns words ``C c .. C c + C - 1`` of each row, 8 inputs per word).

    Raises:
        ValueError: ``block_k`` not a positive multiple of 128.
    """
    if block_k < 128 or block_k % 128:
        raise ValueError(f"block_k: the word decode needs a positive multiple of 128, got {block_k}")
    C = block_k // 32
    out = []
    for k in range(block_k):
        t, h, c, e = k // 16, (k // 8) % 2, (k // 2) % 4, k % 2
        out.append(8 * (C * c + t // 2) + 2 * (t % 2) + h + 4 * e)
    return out


@triton.jit
def _word_lanes(v, s, MUL_ASM: tl.constexpr, dtype: tl.constexpr):
    """uint32 ``v`` holding two placed nibbles (bf16 bit patterns ``e2m1 * 2**-126`` in bits 0-15 and
    16-31) times the scale ``s`` (uint32: bf16 ``2**(b-1)`` in both halves) -> (lo, hi) in ``dtype``."""
    if MUL_ASM:
        v = tl.inline_asm_elementwise(_MUL_BF16X2, "=r,r,r", [v, s], dtype=tl.uint32, is_pure=True, pack=1)
        lo = v.to(tl.uint16).to(tl.bfloat16, bitcast=True)
        hi = (v >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        sf = (s << 16).to(tl.float32, bitcast=True)
        lo = ((v << 16).to(tl.float32, bitcast=True) * sf).to(dtype)
        hi = ((v & 0xFFFF0000).to(tl.float32, bitcast=True) * sf).to(dtype)
    return lo, hi


@triton.jit
def fp4_words_tile(
    w_rows, s_rows, row_mask, k0, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MUL_ASM: tl.constexpr,
    dtype: tl.constexpr,
):  # fmt: skip
    """Dequantized ``[BLOCK_N, BLOCK_K]`` tile (``dtype``) of inputs ``k0 ..`` in the logical K order
    of :func:`fp4_words_k_perm` (``BLOCK_K`` a multiple of 128, the whole step inside K; arguments as
    :func:`fp4_tile`). The packed bytes are read as 32-bit words (``BLOCK_K / 32`` per thread and
    row: 16-byte loads); a word's 8 nibbles give four bf16x2 registers, nibbles ``j`` and ``j + 4``
    placed by one shift / mask pair each (no byte permutation), then one multiply by the scale
    (``MUL_ASM``: ``mul.rn.bf16x2`` in PTX; else per value in fp32, the interpreter's twin)."""
    C: tl.constexpr = BLOCK_K // 32
    wp = w_rows.to(tl.pointer_type(tl.uint32))
    q = tl.load(
        wp[:, None] + (k0 // 8 + tl.arange(0, BLOCK_K // 8))[None, :], mask=row_mask[:, None], other=0
    )
    q = tl.permute(tl.reshape(q, (BLOCK_N, 4, C)), (0, 2, 1))  # [n, tw, c]: word C c + tw
    sb = tl.load(s_rows[:, None] + (k0 // 32 + tl.arange(0, C))[None, :], mask=row_mask[:, None], other=0)
    s16 = ((sb.to(tl.uint32) & 0xFF) + 126) << 7  # 2**126 * 2**(b - 127) as bf16 bits
    # word C c + tw lies in scale group (C c + tw) // 4 = (C / 4) c + tw // 4
    s = tl.permute(tl.reshape(s16 | (s16 << 16), (BLOCK_N, 4, C // 4)), (0, 2, 1))  # [n, tw // 4, c]
    s = tl.reshape(tl.broadcast_to(s[:, :, None, :], (BLOCK_N, C // 4, 4, 4)), (BLOCK_N, C, 4))
    m = 0x01C001C0  # magnitude bits to 6-8 / 22-24, sign to 15 / 31: e2m1 * 2**-126 as bf16
    g = 0x80008000
    l0, h0 = _word_lanes(((q << 6) & m) | ((q << 12) & g), s, MUL_ASM, dtype)  # nibbles 0, 4
    l1, h1 = _word_lanes(((q << 2) & m) | ((q << 8) & g), s, MUL_ASM, dtype)  # 1, 5
    l2, h2 = _word_lanes(((q >> 2) & m) | ((q << 4) & g), s, MUL_ASM, dtype)  # 2, 6
    l3, h3 = _word_lanes(((q >> 6) & m) | (q & g), s, MUL_ASM, dtype)  # 3, 7
    # nibble j = 2 tm + h, lane e: [n, tw, c, e, h, tm] -> [n, tw, tm, h, c, e]
    v = tl.join(tl.join(tl.join(l0, h0), tl.join(l1, h1)), tl.join(tl.join(l2, h2), tl.join(l3, h3)))
    return tl.reshape(tl.permute(v, (0, 1, 5, 4, 2, 3)), (BLOCK_N, BLOCK_K))


@triton.jit
def permute_fp4_k(a, BLOCK_K: tl.constexpr):
    """``a [R, BLOCK_K]`` in input order -> the logical K order of :func:`fp4_words_k_perm` (input
    ``8 (C c + tw) + 2 tm + h + 4 e`` -> index ``16 (2 tw + tm) + 8 h + 2 c + e``)."""
    R: tl.constexpr = a.shape[0]
    C: tl.constexpr = BLOCK_K // 32
    a = tl.reshape(a, (R, 4, C, 2, 2, 2))  # [r, c, tw, e, tm, h]
    return tl.reshape(tl.permute(a, (0, 2, 4, 5, 1, 3)), (R, BLOCK_K))

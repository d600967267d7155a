"""e4m3 weights decoded to bf16 four at a time, from 32-bit words (the ``w8a16_words`` decode forms).

The weight-only FP8 kernel (:func:`sgl_kernel_v4.triton.fp8_gemm._w8a16_kernel`) multiplies a
``[BLOCK_N, 128]`` e4m3 weight tile, decoded to bf16 in registers, by the activations on the
tensor cores (the decoded weights are the MMA's register operand). Its default decode reads two
bytes per shared-memory load (the MMA register fragment holds pairs of K-adjacent values, two rows
apart) and spends six integer / bf16 instructions per pair (:func:`fp8_gemm._e4m3_asm`). The forms
here change the order of K inside each 128-wide block instead, so that every thread's fragment is
whole 32-bit words of the weight row:

* Logical K index ``k = 16 t + 8 h + 2 c + e`` (``t`` the 16-deep MMA step, ``c`` the thread's
  column pair in it, ``h`` the upper 8 columns of the step, ``e`` the value in the pair) is weight
  byte ``32 c + 4 t + 2 e + h`` of the block (:func:`words_k_perm`). A thread then holds bytes
  ``32 c .. 32 c + 31`` of two rows: four 16-byte loads per 128-wide block (LDS.128 after a
  16-byte cp.async), no 2-byte loads. The activations are loaded in memory order and permuted the
  same way in registers (:func:`permute_k_block`), so the dot product is unchanged (only its
  summation order differs).
* A word ``q`` (bytes ``b0 b1 b2 b3``, little-endian) gives two bf16x2 registers by shifts and masks
  (:func:`e4m3_words_decode`): ``(b0, b2) = ((q << 8) & 0x80008000) | ((q << 4) & 0x07F007F0)``
  and ``(b1, b3) = (q & 0x80008000) | ((q >> 4) & 0x07F007F0)``: the sign to bit 15 of the lane, the
  7 magnitude bits to bits 4-10. Each lane is then the bf16 ``e4m3 * 2**-120`` exactly, for every
  code: e4m3 subnormals land on bf16 subnormals (the exponent biases differ by 120), zero and
  negative zero stay themselves, 448 is ``448 * 2**-120``. The NaN codes 0x7F / 0xFF are not
  NaN here: they decode as ``+-480 * 2**-120`` (the bit pattern's finite reading). Seven integer
  instructions per four weights; no multiply per weight.
* The ``2**120`` is not applied per weight: with :data:`ACT_SHIFT` the activations are multiplied
  by ``2**ACT_SHIFT`` (a power of two, exact below ``2**(128 - ACT_SHIFT)`` in magnitude) and the
  fp32 weight-scale row by ``2**(120 - ACT_SHIFT)`` once per 128-deep step, so the MMA's products
  stay in fp32's normal range; with ``act_shift = 0`` (``w8a16_words_fold``) the whole ``2**120``
  goes to the scale row and products of small activations fall in fp32's subnormal range inside
  the MMA (what the tensor cores do there is for the GPU tests to show).

Compile statistics (``benchmark/decode_sass_count.py``: Triton 3.6, sm_90, bf16 activations, the
decode rule's tiles for every V4-Flash decode shape: 64 x 128 K steps, 16-token MMA side, 4 warps;
SASS of the K loop per step and warp (2,048 weight bytes), specialised as a launch at 1 token
(``M == 1`` constant) and at 16; shapes differ only in split K, within 3 instructions). Counts, not
timings: no speed is claimed from them.

==================  =======  ======  =======  ===  ===  ======  =====  ====  ====  =====  ========
setting             regs     spill   smem B   mma  mem  decode  scale  sync  addr  total  per byte
==================  =======  ======  =======  ===  ===  ======  =====  ====  ====  =====  ========
``w8a16``           91-96    0       40,960   10   50   192     8      2     98    360    0.176
``w8a16_words``     86-96    0       40,960   10   32   112     18     4     66    242    0.118
``w8a16_words_fold`` 88-96   0       40,960   10   32   112     10     4     66    234    0.114
``w8a16_f16asm``    105-115  0       40,960   10   61   32      74     6     102   285    0.139
==================  =======  ======  =======  ===  ===  ======  =====  ====  ====  =====  ========

The default's decode is 32 two-byte shared loads (under ``mem``) and 192 instructions per step
(prmt, 2 shifts, 2 masks, one ``2**120`` multiply per pair); the word forms' is 4 16-byte shared
loads and 112 (7 per word), and their ``scale`` includes the activation permutation's ``2**64``
(``w8a16_words`` only).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = [
    "ACT_SHIFT",
    "E4M3_BF16_BIAS_LOG2",
    "decode_words",
    "e4m3_words_decode",
    "permute_k_block",
    "words_k_perm",
]

#: The decoded weights are ``e4m3 * 2**-E4M3_BF16_BIAS_LOG2`` (bf16 bias 127 minus e4m3 bias 7).
E4M3_BF16_BIAS_LOG2 = 120
#: Activations are scaled by ``2**ACT_SHIFT`` before the MMA in ``w8a16_words`` (exact: a power of
#: two; bf16 inputs at or above ``2**(128 - ACT_SHIFT)`` in magnitude would overflow to inf).
ACT_SHIFT = 64

#: The K block the permutation acts on (one weight-scale block).
WORDS_BLOCK_K = 128


def words_k_perm(block_k: int = WORDS_BLOCK_K) -> list[int]:
    """Host copy of the permutation: ``perm[k]`` = the weight byte (activation column) of a
    128-wide K block that logical index ``k`` reads (``k = 16 t + 8 h + 2 c + e`` ->
    ``32 c + 4 t + 2 e + h``).

    Raises:
        ValueError: ``block_k`` is not 128.
    """
    if block_k != WORDS_BLOCK_K:
        raise ValueError(
            f"block_k: the word decode is defined on {WORDS_BLOCK_K}-wide K blocks, got {block_k}"
        )
    out = []
    for k in range(block_k):
        t, h, c, e = k // 16, (k // 8) % 2, (k // 2) % 4, k % 2
        out.append(32 * c + 4 * t + 2 * e + h)
    return out


@triton.jit
def _lane(w, DTYPE: tl.constexpr):
    """The bf16 bit pattern in bits 0-15 of uint32 ``w`` as ``DTYPE`` (bf16, or the same value in
    fp32: the pattern moved to bits 16-31)."""
    if DTYPE == tl.float32:
        out = (w << 16).to(tl.float32, bitcast=True)
    else:
        out = w.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return out


@triton.jit
def e4m3_words_decode(q, DTYPE: tl.constexpr):
    """``q [R, 32]`` uint32, the 128 e4m3 bytes of each row's K block as little-endian words ->
    ``[R, 128]`` ``DTYPE`` (bf16 on the serving path; fp32, the same values, for fp32 activations)
    equal to ``e4m3 * 2**-120`` (exact for every non-NaN code) in the logical K order of
    :func:`words_k_perm`. Shifts and masks on whole words: seven integer instructions per word."""
    R: tl.constexpr = q.shape[0]
    q = tl.permute(tl.reshape(q, (R, 4, 8)), (0, 2, 1))  # [R, t, c]: word 8 c + t
    even = ((q << 8) & 0x80008000) | ((q << 4) & 0x07F007F0)  # bf16x2 lanes (b0, b2)
    odd = (q & 0x80008000) | ((q >> 4) & 0x07F007F0)  # bf16x2 lanes (b1, b3)
    b0 = _lane(even & 0xFFFF, DTYPE)
    b2 = _lane(even >> 16, DTYPE)
    b1 = _lane(odd & 0xFFFF, DTYPE)
    b3 = _lane(odd >> 16, DTYPE)
    v = tl.join(tl.join(b0, b2), tl.join(b1, b3))  # [R, t, c, e, h]
    return tl.reshape(tl.permute(v, (0, 1, 4, 2, 3)), (R, 128))  # [R, t, h, c, e]


@triton.jit
def permute_k_block(a):
    """``a [R, 128]`` in memory order -> ``[R, 128]`` in the logical K order of
    :func:`words_k_perm` (a register relabelling: byte ``32 c + 4 t + 2 e + h`` -> index
    ``16 t + 8 h + 2 c + e``)."""
    R: tl.constexpr = a.shape[0]
    return tl.reshape(tl.permute(tl.reshape(a, (R, 4, 8, 2, 2)), (0, 2, 4, 1, 3)), (R, 128))


@triton.jit
def _decode_words_kernel(q_ptr, out_ptr, R: tl.constexpr, DTYPE: tl.constexpr):
    r = tl.arange(0, R)
    q = tl.load(q_ptr + r[:, None] * 32 + tl.arange(0, 32)[None, :])
    tl.store(out_ptr + r[:, None] * 128 + tl.arange(0, 128)[None, :], e4m3_words_decode(q, DTYPE))


def decode_words(w: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Run :func:`e4m3_words_decode` alone (the kernels' decode, for tests and inspection).

    Args:
        w: ``[R, 128]`` float8_e4m3fn / uint8 (one K block per row, contiguous; ``R`` a power of two).
        dtype: ``torch.float32`` or ``torch.bfloat16``.

    Returns:
        ``[R, 128]`` ``dtype``, ``out[r, k] = e4m3(w[r, words_k_perm()[k]]) * 2**-120`` (the logical
        K order; NaN codes as ``+-480 * 2**-120``).

    Raises:
        ValueError: ``w`` not ``[R, 128]`` one-byte, contiguous, ``R`` a power of two; or ``dtype``.
    """
    if w.dim() != 2 or w.shape[1] != WORDS_BLOCK_K or w.element_size() != 1 or not w.is_contiguous():
        raise ValueError(f"w: expected a contiguous [R, 128] one-byte tensor, got {tuple(w.shape)} {w.dtype}")
    R = w.shape[0]
    if R < 1 or R & (R - 1):
        raise ValueError(f"w: the row count must be a power of two, got {R}")
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"dtype: expected torch.float32 or torch.bfloat16, got {dtype}")
    out = torch.empty(R, WORDS_BLOCK_K, dtype=dtype, device=w.device)
    q = w.view(torch.uint8).view(torch.int32).view(torch.uint32)
    _decode_words_kernel[(1,)](q, out, R=R, DTYPE=tl.float32 if dtype == torch.float32 else tl.bfloat16)
    return out

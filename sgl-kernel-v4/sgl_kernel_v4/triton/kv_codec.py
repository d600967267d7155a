"""Triton helpers that read and write KV entries in their pool formats, in registers.

The byte formats are those of the torch codecs in :mod:`sgl_kernel_v4.ref.kv_quant` (the oracle of
every helper here), addressed as :class:`sgl_kernel_v4.paged.PagedRows` describes:

* codec 0, float: ``D`` plain values;
* codec 1, fp8 main entry: ``NOPE`` e4m3 values, ``D - NOPE`` bf16 rope values, ``NOPE / 64`` ue8m0
  scale bytes (one per 64 nope values), one zero pad byte (584 B for 512 / 64);
* codec 2, fp8 indexer key: ``D`` e4m3 values then one fp32 power-of-two scale (132 B for 128);
* codec 3, fp4 indexer key: ``D / 2`` bytes of e2m1 pairs (even index in the low nibble, sign in
  bit 3), then ``D / 32`` ue8m0 scale bytes (68 B for 128).

Scales are powers of two, so a dequantized value is exact in bf16 and fp32, and the encoders pick
the exponent exactly as the references do: ``ceil(log2(max(amax, 1e-4) / 448))`` for fp8 (the
division correctly rounded, as torch's) and ``ceil(log2(max(amax / 6, 1e-4)))`` clamped to
``[-126, 127]`` for fp4, values rounded to nearest even.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def row_offsets(slots, rows_per_page, page_stride, row_stride):
    """Element offsets of flat slots: ``(s // rows_per_page) * page_stride + (s % rows_per_page) *
    row_stride`` (int64). The page / row split runs in int32 (a pool's rows number below 2^31,
    which the pool wrappers check): a 64-bit division is a ~70-instruction subroutine per value,
    and the gathers' programs repeat it for every key row they load."""
    s = slots.to(tl.int32)
    q = s // rows_per_page  # int32 when rows_per_page is (a launch's small integers are)
    return q.to(tl.int64) * page_stride + (s - q * rows_per_page).to(tl.int64) * row_stride


@triton.jit
def _exp2i(e):
    """``2.0 ** e`` (fp32) for an int32 tensor ``e`` in [-126, 127], exact."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _ceil_log2(r):
    """``ceil(log2(r))`` (int32) of a positive normal fp32 tensor, exact."""
    bits = r.to(tl.int32, bitcast=True)
    e = ((bits >> 23) & 0xFF) - 127
    return e + ((bits & 0x7FFFFF) != 0).to(tl.int32)


@triton.jit
def _to_bf16(x):
    """fp32 -> bf16, round to nearest even, by integer ops (the same bits on the GPU and in the
    Triton interpreter, whose float casts truncate)."""
    u = x.to(tl.int32, bitcast=True)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return r.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _to_e4m3_byte(x):
    """fp32 (``|x| <= 448``) -> float8_e4m3fn bits as uint8, round to nearest even (subnormals
    below 2^-6 in steps of 2^-9), by integer ops as :func:`_to_bf16`."""
    u = x.to(tl.int32, bitcast=True)
    sign = ((u >> 31) & 1) << 7
    a = tl.abs(x)
    ua = a.to(tl.int32, bitcast=True)
    normal = ((ua + 0x7FFFF + ((ua >> 20) & 1)) >> 20) - (120 << 3)
    sub = ((a * 512.0 + 8388608.0) - 8388608.0).to(tl.int32)
    code = tl.minimum(tl.where(a < 0.015625, sub, normal), 0x7E)
    return (code | sign).to(tl.uint8)


@triton.jit
def _ue8m0(byte):
    """Scale of a ue8m0 byte: ``2 ** (byte - 127)`` (fp32)."""
    return (byte.to(tl.int32) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _e2m1_value(code):
    """fp32 value of e2m1 codes (int32 in [0, 15]): magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; sign bit 3."""
    mag = code & 7
    e = mag >> 1
    m = (mag & 1).to(tl.float32)
    v = tl.where(e == 0, 0.5 * m, (1.0 + 0.5 * m) * (1 << tl.maximum(e - 1, 0)).to(tl.float32))
    return tl.where((code & 8) != 0, -v, v)


@triton.jit
def _e2m1_bf16(code, eadd):
    """bf16 of e2m1 codes ``code`` (int32 in [0, 15]) times ``2 ** (eadd >> 7)``, by integer ops:
    the magnitudes 0.5 .. 6 are the bf16 bit patterns ``0x3F00 + (mag << 6)`` (less 64 for 0.5,
    e2m1's one subnormal), and ``eadd`` (a ue8m0 scale's ``(byte - 127) << 7``) moves the exponent
    field. Exact while that field stays normal: scale bytes 2 .. 252, which covers every entry
    :func:`store_entry` writes from bf16 values below ``2**127``."""
    mag = code & 7
    bits = (mag << 6) + 0x3F00 - ((mag == 1).to(tl.int32) << 6) + eadd
    bits = tl.where(mag == 0, 0, bits) | ((code & 8) << 12)
    return bits.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def load_fp4_key_block(base, j: tl.constexpr, valid, D: tl.constexpr):
    """Values ``32 j .. 32 j + 31`` of fp4 indexer keys (``[N, 32]`` bf16, the block's ue8m0 scale
    applied; zeros where ``valid`` is False) from their entries' byte pointers ``base [N]``: 16
    bytes (dim ``2i`` in the low nibble of byte ``i``) and one scale byte per key, decoded by
    :func:`_e2m1_bf16` and interleaved with ``tl.join``. A scoring dot over the key is then one dot
    of K = 32 per block (``D / 32`` of them): no per-value scale gather nor fp32 multiply, about
    half the time of :func:`load_key` on the H200 (``benchmark/indexer_fp4_variants.py``)."""
    offs = tl.arange(0, 16)
    b = tl.load(base[:, None] + j * 16 + offs[None, :], mask=valid[:, None], other=0).to(tl.int32)
    sb = tl.load(base + D // 2 + j, mask=valid, other=127).to(tl.int32)
    eadd = ((sb - 127) << 7)[:, None]
    pair = tl.join(_e2m1_bf16(b & 15, eadd), _e2m1_bf16(b >> 4, eadd))
    return tl.reshape(pair, [base.shape[0], 32])


@triton.jit
def load_fp4_key_row(base, valid, D: tl.constexpr):
    """Whole fp4 indexer keys (``[N, D]`` bf16, each 32-value block's ue8m0 scale applied; zeros
    where ``valid`` is False) from their entries' byte pointers ``base [N]``: the ``D / 2`` bytes
    loaded once each, both nibbles decoded by :func:`_e2m1_bf16` (the scale byte of byte ``i`` is
    byte ``D / 2 + i // 16``, added to the exponent field) and interleaved with ``tl.join`` (dim
    ``2i`` is the low nibble of byte ``i``). For a kernel that reuses one key tile in several dots
    (the extend scoring's keys-major forms), where :func:`load_fp4_key_block`'s four K = 32 dots
    per dot would multiply; the same values as :func:`load_key`'s fp4 branch, exactly."""
    offs = tl.arange(0, D // 2)
    m = valid[:, None]
    b = tl.load(base[:, None] + offs[None, :], mask=m, other=0).to(tl.int32)
    sb = tl.load(base[:, None] + D // 2 + offs[None, :] // 16, mask=m, other=127).to(tl.int32)
    eadd = (sb - 127) << 7
    pair = tl.join(_e2m1_bf16(b & 15, eadd), _e2m1_bf16(b >> 4, eadd))
    return tl.reshape(pair, [base.shape[0], D])


@triton.jit
def _load_f32_bytes(p, mask):
    """fp32 values ``[N]`` stored little-endian at byte pointers ``p [N]`` (4 byte loads each):
    an fp8 indexer entry is 132 bytes, so its scale is only 4-byte aligned, and a 4-byte load
    through a cast pointer faulted on the H200 (misaligned address); bytes cannot be misaligned."""
    bits = tl.load(p, mask=mask, other=0).to(tl.int32)
    bits |= tl.load(p + 1, mask=mask, other=0).to(tl.int32) << 8
    bits |= tl.load(p + 2, mask=mask, other=0).to(tl.int32) << 16
    bits |= tl.load(p + 3, mask=mask, other=0).to(tl.int32) << 24
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _store_f32_bytes(p, x):
    """Store the fp32 scalar ``x`` little-endian at the byte pointer ``p`` (as :func:`_load_f32_bytes`)."""
    offs = tl.arange(0, 4)
    bits = x.to(tl.int32, bitcast=True)
    tl.store(p + offs, ((bits >> (offs * 8)) & 0xFF).to(tl.uint8))


@triton.jit
def aligned(ptr, off, CODEC: tl.constexpr, D: tl.constexpr, NOPE: tl.constexpr):
    """``ptr + off`` for a rank-1 ``off`` (entry starts, or one entry's contiguous bytes) with the true
    alignment of the codec's entries stated to the compiler: the largest power of two (<= 16)
    dividing the entry's bytes (``entry_align`` in :mod:`sgl_kernel_v4.paged`: 4 for 132 / 68-byte
    fp8 / fp4 indexer keys), or less (2 for fp8 main entries, see below). Without it Triton 3.6 infers 16-byte
    alignment for ``(slot % rows_per_page) * row_stride`` and compiles an entry's contiguous byte
    loads into 16-byte ``cp.async`` copies, which fault (``misaligned address``) on rows 4 bytes off
    a 16-byte boundary. :class:`~sgl_kernel_v4.paged.PagedRows` checks that strides and the storage
    pointer are multiples of it. Float entries get no hint. The hint is set on the ``addptr`` made
    here: ``tl.multiple_of`` on a jit function's argument is dropped when the call is inlined."""
    p = ptr + off
    if CODEC == 1:
        # stated as 2 bytes, not their 8: 4-byte and wider loads of the 512-byte entry tiles are
        # staged through shared memory by the pipeliner (cp.async), which overflows it at 64-key
        # tiles (246 KB on sm_90 with Triton 3.6); 2-byte loads stay in registers
        EB: tl.constexpr = 2
    elif CODEC == 2:
        EB: tl.constexpr = D + 4
    else:
        EB: tl.constexpr = D // 2 + D // 32
    if CODEC != 0:
        if EB % 16 == 0:
            p = tl.multiple_of(p, 16)
        elif EB % 8 == 0:
            p = tl.multiple_of(p, 8)
        elif EB % 4 == 0:
            p = tl.multiple_of(p, 4)
        elif EB % 2 == 0:
            p = tl.multiple_of(p, 2)
        else:
            p = tl.multiple_of(p, 1)
    return p


@triton.jit
def load_main(
    ptr, off, valid, offs_d, CODEC: tl.constexpr, D: tl.constexpr, NOPE: tl.constexpr, ALIGN: tl.constexpr = 2
):
    """``[N, BLOCK_D]`` main entries (K = V rows) at element offsets ``off [N]`` of ``ptr``; zeros
    where ``valid`` is False or ``offs_d >= D``. Float pools return their own dtype, fp8 entries
    bf16: exact, as every value is an e4m3 value times a power-of-two scale of at least ``2^-22``
    (the encoder's ``amax`` floor) or a stored bf16 rope value; half the registers of fp32.
    ``ALIGN``: the byte alignment of fp8 entry rows stated to the compiler (2 or 8; see
    :func:`aligned`: wider loads vectorise but are staged through shared memory when pipelined)."""
    dmask = offs_d < D
    if CODEC == 0:
        x = tl.load(ptr + off[:, None] + offs_d[None, :], mask=valid[:, None] & dmask[None, :], other=0.0)
    else:
        is_nope = offs_d < NOPE
        nm = valid[:, None] & is_nope[None, :]
        if ALIGN == 8:
            base = tl.multiple_of(ptr + off, 8)
        else:
            base = aligned(ptr, off, CODEC, D, NOPE)
        b = tl.load(base[:, None] + offs_d[None, :], mask=nm, other=0)
        sb = tl.load(base[:, None] + (NOPE + 2 * (D - NOPE)) + offs_d[None, :] // 64, mask=nm, other=127)
        # e4m3 -> fp32 -> bf16 (the interpreter has no direct fp8 -> bf16 cast); exact either way
        nope = (b.to(tl.float8e4nv, bitcast=True).to(tl.float32) * _ue8m0(sb)).to(tl.bfloat16)
        rope_ptr = (base + NOPE).to(tl.pointer_type(tl.bfloat16))
        rm = valid[:, None] & (offs_d[None, :] >= NOPE) & dmask[None, :]
        rope = tl.load(rope_ptr[:, None] + (offs_d - NOPE)[None, :], mask=rm, other=0.0)
        x = tl.where(is_nope[None, :], nope, rope)
    return x


@triton.jit
def load_key(ptr, off, valid, offs_d, CODEC: tl.constexpr, D: tl.constexpr):
    """Indexer keys ``[N, D]`` at offsets ``off [N]`` and their per-entry scale ``[N]`` fp32: the
    key is ``values * scale[:, None]`` (fp8 keys keep their one scale apart so it can be applied
    after the dot; float and fp4 keys return scale 1). Zeros where ``valid`` is False."""
    m = valid[:, None] & (offs_d[None, :] < D)
    if CODEC == 0:
        x = tl.load(ptr + off[:, None] + offs_d[None, :], mask=m, other=0.0)
        s = tl.full(off.shape, 1.0, tl.float32)
    elif CODEC == 2:
        base = aligned(ptr, off, CODEC, D, D)
        b = tl.load(base[:, None] + offs_d[None, :], mask=m, other=0)
        x = b.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        s = _load_f32_bytes(base + D, valid)
    else:
        base = aligned(ptr, off, CODEC, D, D)
        b = tl.load(base[:, None] + offs_d[None, :] // 2, mask=m, other=0).to(tl.int32)
        code = (b >> ((offs_d[None, :] % 2) * 4)) & 0xF
        sb = tl.load(base[:, None] + D // 2 + offs_d[None, :] // 32, mask=m, other=127)
        x = _e2m1_value(code) * _ue8m0(sb)
        s = tl.full(off.shape, 1.0, tl.float32)
    return x, s


@triton.jit
def store_entry(ptr, off, y, CODEC: tl.constexpr, D: tl.constexpr, NOPE: tl.constexpr):
    """Write one entry ``y [D]`` (fp32 values already rounded to the compute dtype; ``D`` a power
    of two) at element offset ``off`` of ``ptr`` in the codec's format (module docstring)."""
    offs_d = tl.arange(0, D)
    if CODEC == 0:
        tl.store(ptr + off + offs_d, y.to(ptr.dtype.element_ty))
    elif CODEC == 1:
        NB: tl.constexpr = D // 64
        yb = tl.reshape(y, [NB, 64])
        amax = tl.max(tl.abs(yb), 1)
        e = _ceil_log2(tl.math.div_rn(tl.maximum(amax, 1e-4), 448.0))
        qv = tl.reshape(yb * _exp2i(-e)[:, None], [D])
        tl.store(
            aligned(ptr, off + offs_d, CODEC, D, NOPE),
            _to_e4m3_byte(tl.clamp(qv, -448.0, 448.0)),
            mask=offs_d < NOPE,
        )
        rope_ptr = (ptr + off + NOPE).to(tl.pointer_type(tl.bfloat16))
        tl.store(rope_ptr + (offs_d - NOPE), _to_bf16(y), mask=offs_d >= NOPE)
        offs_b = tl.arange(0, NB)
        sc = tl.where(offs_b < NOPE // 64, e + 127, 0).to(tl.uint8)  # the byte after the scales: pad 0
        tl.store(ptr + off + NOPE + 2 * (D - NOPE) + offs_b, sc, mask=offs_b <= NOPE // 64)
    elif CODEC == 2:
        amax = tl.max(tl.abs(y), 0)
        e = _ceil_log2(tl.math.div_rn(tl.maximum(amax, 1e-4), 448.0))
        tl.store(
            aligned(ptr, off + offs_d, CODEC, D, NOPE), _to_e4m3_byte(tl.clamp(y * _exp2i(-e), -448.0, 448.0))
        )
        _store_f32_bytes(ptr + off + D, _exp2i(e))
    else:
        NB4: tl.constexpr = D // 32
        yb = tl.reshape(y, [NB4, 32])
        amax6 = tl.math.div_rn(tl.max(tl.abs(yb), 1), 6.0)
        e = tl.minimum(tl.maximum(_ceil_log2(tl.maximum(amax6, 1e-4)), -126), 127)
        v = tl.reshape(yb * _exp2i(-e)[:, None], [D])
        a = tl.minimum(tl.abs(v), 6.0)
        idx = (
            (a > 0.25).to(tl.int32)
            + (a > 0.75).to(tl.int32)
            + (a > 1.25).to(tl.int32)
            + (a > 1.75).to(tl.int32)
            + (a > 2.5).to(tl.int32)
            + (a > 3.5).to(tl.int32)
            + (a > 5.0).to(tl.int32)
        )
        tie = (a == 0.25) | (a == 0.75) | (a == 1.25) | (a == 1.75) | (a == 2.5) | (a == 3.5) | (a == 5.0)
        idx = tl.where(tie & ((idx & 1) == 1), idx + 1, idx)
        code = idx | (((v < 0) & (idx != 0)).to(tl.int32) << 3)
        lo, hi = tl.split(tl.reshape(code, [D // 2, 2]))
        offs_h = tl.arange(0, D // 2)
        tl.store(aligned(ptr, off + offs_h, CODEC, D, NOPE), (lo | (hi << 4)).to(tl.uint8))
        offs_b = tl.arange(0, NB4)
        tl.store(ptr + off + D // 2 + offs_b, (e + 127).to(tl.uint8))


def codec_args(rows) -> tuple:
    """``(storage, rows_per_page, page_stride, row_stride, codec id)`` kernel arguments of a
    :class:`~sgl_kernel_v4.paged.PagedRows`."""
    return rows.storage, rows.rows_per_page, rows.page_stride, rows.row_stride, rows.codec_id


__all__ = [
    "aligned",
    "row_offsets",
    "load_main",
    "load_key",
    "load_fp4_key_block",
    "store_entry",
    "codec_args",
    "triton",
]

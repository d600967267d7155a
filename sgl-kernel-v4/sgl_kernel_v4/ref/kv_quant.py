"""Reference encoders / decoders of the low-precision DeepSeek-V4 KV-cache entry formats.

Three byte formats, all produced as ``uint8`` rows (one row per cache entry), vectorised over the
leading dimension (no Python loop over entries), on whatever device the input lives on (CPU or
CUDA). They are the torch references for the fused Triton insert / gather kernels and the storage
format of ``--kv-cache-dtype fp8_e4m3`` in the KV pools.

1. Attention KV entry, "fp8_ds_mla" V4 layout (:func:`quantize_kv_fp8`): for DeepSeek-V4's
   512-d shared K=V vector ``[448 nope | 64 rope]`` one entry is 584 bytes::

       bytes [0, 448)     448 nope values, float8_e4m3fn, each divided by its block's scale
       bytes [448, 576)   64 rope values, bfloat16 (little-endian), not quantized
       bytes [576, 583)   7 ue8m0 scale exponents, one per 64 nope values (block b covers
                          nope[64b : 64b+64]); scale = 2 ** (byte - 127)
       byte  583          padding, always 0

   This is the per-token record of the layout vLLM (``fp8_ds_mla`` for DeepSeek-V4,
   ``_rope_quant_insert_kernel``) and SGLang (``DeepSeekV4SingleKVPool``: "448 fp8 nope + 64 bf16
   rope + 7 scales + 1 pad = 584") use, which FlashMLA's sparse decode kernel reads. Those engines
   store a *page* of ``B`` entries "segregated": the ``B`` data rows (bytes 0..575 of each entry)
   first, then the ``B`` scale rows (bytes 576..583 of each entry), the page padded to a multiple
   of 576 bytes. :func:`entries_to_paged` / :func:`paged_to_entries` convert between our
   row-per-entry form and that page form; the byte content of each entry is identical.

   The scale of a block is the smallest power of two ``s`` with ``amax / s <= 448``, i.e.
   ``s = 2 ** ceil(log2(max(amax, 1e-4) / 448))`` (the peers' rule: ``amax`` floored at 1e-4 so an
   all-zero block still gets a finite scale). Values are ``x / s`` rounded to nearest-even e4m3
   (saturated to +-448, which cannot trigger since ``|x / s| <= 448``).

   The layout is generic: ``head_dim = nope + rope`` with ``nope % quant_block == 0``; the entry
   size is ``nope + 2 * rope + nope // quant_block + 1`` (:func:`kv_fp8_entry_bytes`; 584 for
   512 / 64, 194 for the tiny test model's 128 / 64).

2. Indexer key, fp8 (:func:`quantize_indexer_fp8`): ``d`` (128) e4m3 values followed by one
   float32 scale (little-endian), ``d + 4`` bytes (132). One scale per entry, a power of two
   chosen as above (``2 ** ceil(log2(max(amax, 1e-4) / 448))``), stored as float32 — the DeepSeek
   V3.2 / V4 lightning-indexer cache record (vLLM / SGLang page it as ``B`` value rows then ``B``
   scale words).

3. Indexer key, fp4 (:func:`quantize_indexer_fp4`): ``d`` (128) values as e2m1 (OCP MX FP4:
   magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6), two per byte with the *even* index in the low nibble,
   sign in bit 3 of each nibble; then one ue8m0 exponent byte per 32 values; ``d / 2 + d / 32``
   bytes (68). Scale of a 32-block: ``2 ** ceil(log2(max(amax / 6, 1e-4)))``, exponent byte
   clamped to [1, 254] (SGLang's ``quantize_fp4_indexer_tensor``: per-32 ue8m0, even index low
   nibble, 64 B payload + 4 B scales). We round to nearest, ties to even (SGLang's ``rne=True``
   variant).

Compressor state (the rolling window of projected kv / gate rows) stays float32; it has no
encoder here.
"""

from __future__ import annotations

import torch

__all__ = [
    "FP8_E4M3_MAX",
    "FP4_E2M1_MAX",
    "to_float32_round_odd",
    "kv_fp8_entry_bytes",
    "kv_fp8_data_bytes",
    "indexer_fp8_entry_bytes",
    "indexer_fp4_entry_bytes",
    "quantize_kv_fp8",
    "dequantize_kv_fp8",
    "quantize_indexer_fp8",
    "dequantize_indexer_fp8",
    "quantize_indexer_fp4",
    "dequantize_indexer_fp4",
    "entries_to_paged",
    "paged_to_entries",
]

FP8_E4M3_MAX = 448.0
FP4_E2M1_MAX = 6.0
_AMAX_FLOOR = 1e-4
_FP4_BLOCK = 32

# e2m1 magnitudes by 3-bit code, and the midpoints between consecutive codes.
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


# ---------------------------------------------------------------------------------------------
# sizes
# ---------------------------------------------------------------------------------------------
def _check_kv_dims(head_dim: int, rope_dim: int, quant_block: int) -> int:
    if rope_dim < 0 or rope_dim > head_dim:
        raise ValueError(f"rope_dim: must be in [0, head_dim={head_dim}], got {rope_dim}")
    nope = head_dim - rope_dim
    if quant_block <= 0 or nope % quant_block != 0:
        raise ValueError(
            f"quant_block: nope dim {nope} (head_dim {head_dim} - rope_dim {rope_dim}) must be a "
            f"positive multiple of quant_block={quant_block}"
        )
    return nope


def kv_fp8_data_bytes(head_dim: int = 512, rope_dim: int = 64) -> int:
    """Bytes of the data part of one fp8 KV entry: ``nope`` e4m3 bytes + ``rope`` bf16 values.

    576 for DeepSeek-V4 (448 + 128). The peers pad a page to a multiple of this row size.
    """
    return (head_dim - rope_dim) + 2 * rope_dim


def kv_fp8_entry_bytes(head_dim: int = 512, rope_dim: int = 64, quant_block: int = 64) -> int:
    """Bytes of one fp8 KV entry: ``nope + 2 * rope + nope // quant_block + 1`` (584 for 512/64).

    Raises:
        ValueError: if ``head_dim - rope_dim`` is not a positive multiple of ``quant_block``.
    """
    nope = _check_kv_dims(head_dim, rope_dim, quant_block)
    return nope + 2 * rope_dim + nope // quant_block + 1


def indexer_fp8_entry_bytes(index_head_dim: int = 128) -> int:
    """Bytes of one fp8 indexer key: ``d`` e4m3 values + a float32 scale (132 for d=128)."""
    if index_head_dim <= 0:
        raise ValueError(f"index_head_dim: must be positive, got {index_head_dim}")
    return index_head_dim + 4


def indexer_fp4_entry_bytes(index_head_dim: int = 128) -> int:
    """Bytes of one fp4 indexer key: ``d / 2`` packed e2m1 bytes + ``d / 32`` ue8m0 bytes (68).

    Raises:
        ValueError: if ``index_head_dim`` is not a positive multiple of 32.
    """
    if index_head_dim <= 0 or index_head_dim % _FP4_BLOCK != 0:
        raise ValueError(f"index_head_dim: fp4 indexer needs a positive multiple of 32, got {index_head_dim}")
    return index_head_dim // 2 + index_head_dim // _FP4_BLOCK


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def to_float32_round_odd(x: torch.Tensor) -> torch.Tensor:
    """``x`` as float32, a float64 input rounded *to odd* (truncated towards zero, the last
    mantissa bit set when inexact); any other float dtype converts exactly or as ``Tensor.to``.

    A later round-to-nearest-even to a format with at least two fewer significand bits (e4m3,
    e2m1, bf16) then gives the correctly rounded value of the float64 input (Boldo & Melquiond,
    "When double rounding is odd", 2005). A plain float64 -> float32 (or torch's float64 ->
    float8 / bfloat16, which goes through float32) rounding can land a value just past a midpoint
    of the narrow format exactly on it, and ties-to-even then picks the wrong neighbour. Values
    beyond float32's range become its largest finite value (with their sign); NaN and inf stay.

    Args:
        x: a floating-point tensor of any shape.

    Returns:
        float32 tensor of ``x``'s shape.
    """
    y = x.to(torch.float32).contiguous()
    if x.dtype != torch.float64:
        return y
    over = y.double().abs() > x.abs()  # rounded away from zero: step back one ulp towards it
    y = torch.where(over, torch.nextafter(y, torch.zeros_like(y)), y)
    inexact = (y.double() != x) & ~torch.isnan(x)
    return (y.view(torch.int32) | inexact.to(torch.int32)).view(torch.float32)


def _check_2d(x: torch.Tensor, name: str, last: int | None = None) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name}: expected a 2-D tensor [N, D], got shape {tuple(x.shape)}")
    if last is not None and x.shape[1] != last:
        raise ValueError(f"{name}: expected last dim {last}, got {x.shape[1]}")


def _check_float(x: torch.Tensor, name: str) -> None:
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got {x.dtype}")


def _pow2_exponent(amax: torch.Tensor, qmax: float) -> torch.Tensor:
    """``ceil(log2(max(amax, 1e-4) / qmax))`` as int32: exponent of the smallest power of two ``s``
    with ``max(amax, 1e-4) / s <= qmax``. Computed exactly with ``frexp`` (no log rounding): for
    ``r = m * 2**e`` with ``m`` in [0.5, 1), ``ceil(log2 r)`` is ``e - 1`` when ``m == 0.5`` else ``e``.
    """
    r = torch.clamp(amax.to(torch.float32), min=_AMAX_FLOOR) / qmax
    m, e = torch.frexp(r)
    return torch.where(m == 0.5, e - 1, e).to(torch.int32)


def _exp2(e: torch.Tensor) -> torch.Tensor:
    """``2.0 ** e`` in float32 for an integer tensor (exact)."""
    return torch.ldexp(torch.ones_like(e, dtype=torch.float32), e.to(torch.int32))


def _reinterpret(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The bytes of an ``[N, k]`` tensor (any strides: a column slice of packed rows included) as
    ``[N, k * t.itemsize / dtype.itemsize]`` of ``dtype``.

    ``Tensor.contiguous()`` alone does not do for a column slice of one row (or of none): torch
    calls it contiguous and keeps its row stride, which ``view(dtype)`` then refuses when the stride
    does not divide by the new item size (an odd-sized entry row), and ``reshape(N, -1)`` cannot
    infer a width from zero elements. Such slices are copied to a fresh buffer first."""
    n, k = t.shape
    width = k * t.element_size() // torch.empty((), dtype=dtype).element_size()
    if n <= 1:
        t = t.reshape(-1).clone()
    return t.contiguous().view(dtype).reshape(n, width)


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """Reinterpret an [N, k] tensor as its [N, k * itemsize] uint8 bytes."""
    return _reinterpret(t, torch.uint8)


# ---------------------------------------------------------------------------------------------
# attention KV, fp8_ds_mla (V4)
# ---------------------------------------------------------------------------------------------
def quantize_kv_fp8(x: torch.Tensor, rope_dim: int = 64, quant_block: int = 64) -> torch.Tensor:
    """Encode KV entries to the fp8 layout described in the module docstring.

    Args:
        x: ``[N, head_dim]`` float tensor (fp32 / bf16 / fp16 / fp64: rounded once, see
            :func:`to_float32_round_odd`), ``[nope | rope]`` per row, the rope
            slice already rotated (the cache stores post-RoPE keys).
        rope_dim: trailing dims stored as bf16 (64 for DeepSeek-V4).
        quant_block: nope values per ue8m0 scale (64).

    Returns:
        ``[N, kv_fp8_entry_bytes(head_dim, rope_dim)]`` uint8 on ``x.device``.

    Raises:
        ValueError: on a non-2-D / non-float input or dims that do not divide (see
            :func:`kv_fp8_entry_bytes`).
    """
    _check_2d(x, "x")
    _check_float(x, "x")
    n, head_dim = x.shape
    nope = _check_kv_dims(head_dim, rope_dim, quant_block)
    nb = nope // quant_block
    xf = to_float32_round_odd(x)
    blocks = xf[:, :nope].reshape(n, nb, quant_block)
    exp = _pow2_exponent(blocks.abs().amax(dim=-1), FP8_E4M3_MAX)  # [N, nb]
    q = blocks * _exp2(-exp).unsqueeze(-1)
    q = q.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).reshape(n, nope)
    rope = to_float32_round_odd(x[:, nope:]).to(torch.bfloat16)
    scales = torch.clamp(exp + 127, 0, 255).to(torch.uint8)
    pad = torch.zeros(n, 1, dtype=torch.uint8, device=x.device)
    return torch.cat([_bytes_of(q), _bytes_of(rope), scales, pad], dim=1)


def dequantize_kv_fp8(
    b: torch.Tensor, rope_dim: int = 64, out_dtype: torch.dtype = torch.float32, quant_block: int = 64
) -> torch.Tensor:
    """Decode fp8 KV entries (inverse of :func:`quantize_kv_fp8` up to the format's rounding).

    Args:
        b: ``[N, E]`` uint8 with ``E = nope + 2 * rope_dim + nope // quant_block + 1``.
        rope_dim / quant_block: as used for encoding.
        out_dtype: dtype of the result.

    Returns:
        ``[N, nope + rope_dim]`` tensor of ``out_dtype``: ``fp8 * 2 ** (scale_byte - 127)`` for the
        nope slice, the stored bf16 values for the rope slice.

    Raises:
        ValueError: if ``b`` is not ``uint8 [N, E]`` for some valid head_dim.
    """
    _check_2d(b, "b")
    if b.dtype != torch.uint8:
        raise ValueError(f"b: expected uint8, got {b.dtype}")
    e = b.shape[1]
    # E = nope * (1 + 1/qb) + 2 * rope + 1  ->  nope = (E - 2 rope - 1) * qb / (qb + 1)
    num = (e - 2 * rope_dim - 1) * quant_block
    if num <= 0 or num % (quant_block + 1) != 0:
        raise ValueError(f"b: row size {e} is not an fp8 KV entry size for rope_dim={rope_dim}")
    nope = num // (quant_block + 1)
    nb = nope // quant_block
    n = b.shape[0]
    vals = _reinterpret(b[:, :nope], torch.float8_e4m3fn).to(torch.float32)
    exp = b[:, nope + 2 * rope_dim : nope + 2 * rope_dim + nb].to(torch.int32) - 127
    nope_out = (vals.reshape(n, nb, quant_block) * _exp2(exp).unsqueeze(-1)).reshape(n, nope)
    rope = _reinterpret(b[:, nope : nope + 2 * rope_dim], torch.bfloat16).to(torch.float32)
    return torch.cat([nope_out, rope], dim=1).to(out_dtype)


# ---------------------------------------------------------------------------------------------
# indexer keys
# ---------------------------------------------------------------------------------------------
def quantize_indexer_fp8(x: torch.Tensor) -> torch.Tensor:
    """Encode indexer keys as ``[d e4m3 | float32 scale]`` (one power-of-two scale per entry).

    Args:
        x: ``[N, d]`` float tensor (d = index_head_dim, 128 for V4).

    Returns:
        ``[N, d + 4]`` uint8.

    Raises:
        ValueError: on a non-2-D or non-float input.
    """
    _check_2d(x, "x")
    _check_float(x, "x")
    n = x.shape[0]
    xf = to_float32_round_odd(x)
    exp = _pow2_exponent(xf.abs().amax(dim=-1), FP8_E4M3_MAX)  # [N]
    scale = _exp2(exp)
    q = (xf * _exp2(-exp).unsqueeze(-1)).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return torch.cat([_bytes_of(q), _bytes_of(scale.reshape(n, 1))], dim=1)


def dequantize_indexer_fp8(b: torch.Tensor, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Decode ``[N, d + 4]`` uint8 fp8 indexer keys to ``[N, d]`` ``out_dtype``.

    Raises:
        ValueError: if ``b`` is not a 2-D uint8 tensor with more than 4 columns.
    """
    _check_2d(b, "b")
    if b.dtype != torch.uint8 or b.shape[1] <= 4:
        raise ValueError(f"b: expected uint8 [N, d + 4], got {b.dtype} {tuple(b.shape)}")
    d = b.shape[1] - 4
    vals = _reinterpret(b[:, :d], torch.float8_e4m3fn).to(torch.float32)
    scale = _reinterpret(b[:, d:], torch.float32)  # [N, 1]
    return (vals * scale).to(out_dtype)


def _e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """Round float32 values (already scaled, |v| <= 6 up to saturation) to e2m1 4-bit codes
    (uint8 in [0, 15]), nearest with ties to the even code; sign bit 3 (no negative zero)."""
    mid = torch.tensor(_E2M1_MIDPOINTS, dtype=torch.float32, device=v.device)
    a = v.abs().clamp(max=FP4_E2M1_MAX)
    idx = torch.bucketize(a, mid, right=False)  # ties go to the lower code
    tie = (a.unsqueeze(-1) == mid).any(dim=-1)
    idx = torch.where(tie & (idx % 2 == 1), idx + 1, idx)
    sign = (v < 0) & (idx != 0)
    return (idx | (sign.to(idx.dtype) << 3)).to(torch.uint8)


def _e2m1_decode(code: torch.Tensor) -> torch.Tensor:
    table = torch.tensor(_E2M1_VALUES, dtype=torch.float32, device=code.device)
    mag = table[(code & 7).long()]
    return torch.where((code & 8) != 0, -mag, mag)


def quantize_indexer_fp4(x: torch.Tensor) -> torch.Tensor:
    """Encode indexer keys as e2m1 pairs + per-32 ue8m0 exponents (layout in module docstring).

    Args:
        x: ``[N, d]`` float tensor, ``d`` a multiple of 32 (128 for V4).

    Returns:
        ``[N, d / 2 + d / 32]`` uint8 (68 for d=128).

    Raises:
        ValueError: on a non-2-D / non-float input or ``d`` not a multiple of 32.
    """
    _check_2d(x, "x")
    _check_float(x, "x")
    n, d = x.shape
    indexer_fp4_entry_bytes(d)  # validates d
    nb = d // _FP4_BLOCK
    xf = to_float32_round_odd(x).reshape(n, nb, _FP4_BLOCK)
    # scale = 2 ** ceil(log2(max(amax / 6, 1e-4))), exponent byte clamped to [1, 254]
    amax6 = xf.abs().amax(dim=-1) / FP4_E2M1_MAX
    exp = _pow2_exponent(amax6, 1.0)
    exp = torch.clamp(exp + 127, 1, 254) - 127
    codes = _e2m1_encode(xf * _exp2(-exp).unsqueeze(-1)).reshape(n, d)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return torch.cat([packed, (exp + 127).to(torch.uint8)], dim=1)


def dequantize_indexer_fp4(b: torch.Tensor, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Decode ``[N, d / 2 + d / 32]`` uint8 fp4 indexer keys to ``[N, d]`` ``out_dtype``.

    Raises:
        ValueError: if the row size is not ``d / 2 + d / 32`` for a multiple-of-32 ``d``.
    """
    _check_2d(b, "b")
    if b.dtype != torch.uint8:
        raise ValueError(f"b: expected uint8, got {b.dtype}")
    e = b.shape[1]
    # e = d/2 + d/32 = 17 d / 32
    if e % 17 != 0 or e == 0:
        raise ValueError(f"b: row size {e} is not an fp4 indexer entry size (17 * d / 32)")
    d = e * 32 // 17
    n = b.shape[0]
    packed = b[:, : d // 2]
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(n, d)
    exp = b[:, d // 2 :].to(torch.int32) - 127
    vals = _e2m1_decode(codes).reshape(n, d // _FP4_BLOCK, _FP4_BLOCK) * _exp2(exp).unsqueeze(-1)
    return vals.reshape(n, d).to(out_dtype)


# ---------------------------------------------------------------------------------------------
# page form used by the peers' kernels
# ---------------------------------------------------------------------------------------------
def entries_to_paged(entries: torch.Tensor, data_bytes: int, page_bytes: int | None = None) -> torch.Tensor:
    """Rearrange ``[P, B, E]`` uint8 entries into the peers' segregated page form.

    Each page becomes ``[B * data_bytes data rows | B * (E - data_bytes) scale rows | zero pad]``
    (``data_bytes`` = 576 for fp8 KV (:func:`kv_fp8_data_bytes`), ``d`` for fp8 / ``d / 2`` for fp4
    indexer keys), padded with zeros to ``page_bytes`` (default: no padding).

    Returns:
        ``[P, page_bytes]`` uint8.

    Raises:
        ValueError: on a wrong rank / dtype, ``data_bytes`` outside (0, E), or a too small
            ``page_bytes``.
    """
    if entries.dim() != 3 or entries.dtype != torch.uint8:
        raise ValueError(f"entries: expected uint8 [P, B, E], got {entries.dtype} {tuple(entries.shape)}")
    p, bsz, e = entries.shape
    if not 0 < data_bytes < e:
        raise ValueError(f"data_bytes: must be in (0, {e}), got {data_bytes}")
    raw = bsz * e
    page_bytes = raw if page_bytes is None else page_bytes
    if page_bytes < raw:
        raise ValueError(f"page_bytes: {page_bytes} < {raw} bytes of content")
    out = torch.zeros(p, page_bytes, dtype=torch.uint8, device=entries.device)
    out[:, : bsz * data_bytes] = entries[:, :, :data_bytes].reshape(p, -1)
    out[:, bsz * data_bytes : raw] = entries[:, :, data_bytes:].reshape(p, -1)
    return out


def paged_to_entries(pages: torch.Tensor, block_size: int, entry_bytes: int, data_bytes: int) -> torch.Tensor:
    """Inverse of :func:`entries_to_paged`: ``[P, page_bytes]`` uint8 -> ``[P, B, E]`` uint8.

    Raises:
        ValueError: on a wrong rank / dtype or a page smaller than ``block_size * entry_bytes``.
    """
    if pages.dim() != 2 or pages.dtype != torch.uint8:
        raise ValueError(f"pages: expected uint8 [P, page_bytes], got {pages.dtype} {tuple(pages.shape)}")
    p = pages.shape[0]
    raw = block_size * entry_bytes
    if pages.shape[1] < raw:
        raise ValueError(f"pages: page of {pages.shape[1]} bytes < {raw} bytes of content")
    data = pages[:, : block_size * data_bytes].reshape(p, block_size, data_bytes)
    scales = pages[:, block_size * data_bytes : raw].reshape(p, block_size, entry_bytes - data_bytes)
    return torch.cat([data, scales], dim=2)

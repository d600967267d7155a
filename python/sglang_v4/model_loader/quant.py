"""FP8 block and FP4 (e2m1 / ue8m0) weight quantization formats of DeepSeek-V4 checkpoints.

Formats (DeepSeek-V3 ``README_WEIGHTS.md``; V4-Flash ``config.json`` ``quantization_config``; HF
``transformers/integrations/finegrained_fp8.py``):

* FP8: the weight ``[..., R, C]`` is ``float8_e4m3fn``; one scale per 128x128 block (partial blocks
  at the edges have their own scale), ``scale [..., ceil(R/128), ceil(C/128)]``. Dequantized
  ``w = q * scale`` (the scale is the *inverse* quantization scale, hence HF's name
  ``weight_scale_inv``; the official V4 files call it ``<module>.scale``). With
  ``scale_fmt: ue8m0`` (V4) the scale is a power of two stored as ``float8_e8m0fnu``; V3-style
  files store it as float32.
* FP4 (routed experts, ``expert_dtype: fp4``): e2m1 values, two per byte (``int8``, element 2j in
  the low nibble, 2j+1 in the high nibble), ``[..., R, C/2]``; one ue8m0 scale per 32 consecutive
  input values, ``[..., R, C/32]``. Nibble code: bit 3 = sign, bits 0-2 index
  ``(0, 0.5, 1, 1.5, 2, 3, 4, 6)``. Dequantized ``w = e2m1(code) * scale``.

Quantization (used by the random-checkpoint writer and to quantize an unquantized checkpoint
on load) picks the smallest power-of-two scale with ``amax / scale <= 448`` (FP8) or ``<= 6``
(FP4), as ue8m0 requires. Every function here runs on the tensors' device.

In the runtime model (``layers/quantization.py``) FP8 block scales are held as float32 and FP4
scales as uint8 exponent bytes (``2 ** (b - 127)``); :func:`scale_to_float` and
:func:`fp4_scale_bytes` convert stored scales to those forms.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
E8M0_DTYPE = torch.float8_e8m0fnu
#: ue8m0's smallest value (byte 0), a float32 subnormal.
_E8M0_MIN = 2.0**-127
#: The e8m0 byte that encodes NaN (OCP MX spec; torch's ``float8_e8m0fnu`` reads it so).
E8M0_NAN_BYTE = 255
FP4_GROUP = 32
#: e2m1 magnitudes by 3-bit code.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
FP4_PACKED_DTYPES: tuple[torch.dtype, ...] = (torch.int8, torch.uint8) + (
    (torch.float4_e2m1fn_x2,) if hasattr(torch, "float4_e2m1fn_x2") else ()
)


def scale_to_float(scale: torch.Tensor) -> torch.Tensor:
    """A stored scale tensor as float32.

    ``float8_e8m0fnu`` and ``uint8`` (raw e8m0 exponent bytes, as some MX checkpoints store them)
    are read as ``2 ** (b - 127)`` from the byte, byte 0 as the subnormal ``2 ** -127`` and byte
    255 as NaN (the OCP MX spec's e8m0 encoding, as torch converts ``float8_e8m0fnu``); float
    scales convert directly. Exact, and no e8m0 cast is needed on the device.
    """
    if scale.dtype == E8M0_DTYPE:
        scale = scale.contiguous().view(torch.uint8)
    if scale.dtype == torch.uint8:
        b = scale.to(torch.int32)
        f = (b << 23).view(torch.float32)  # the byte as an fp32 exponent field: 2 ** (b - 127)
        f = torch.where(b == 0, torch.full_like(f, 2.0**-127), f)  # byte 0: subnormal 2 ** -127
        return torch.where(b == E8M0_NAN_BYTE, torch.full_like(f, float("nan")), f)  # not +inf
    return scale.to(torch.float32)


def check_scale(scale: torch.Tensor, name: str = "weight") -> None:
    """Refuse a stored quantization scale that encodes no number.

    Raises:
        ValueError: ``scale`` (``float8_e8m0fnu`` / ``uint8`` exponent bytes, or a float dtype)
            holds the e8m0 NaN byte 255, a NaN or an infinity (names ``name``): every weight of its
            block would dequantize to NaN or infinity.
    """
    if scale.dtype in (E8M0_DTYPE, torch.uint8, torch.int8):
        bad = scale.contiguous().view(torch.uint8) == E8M0_NAN_BYTE
        what = "the e8m0 NaN byte 0xFF"
    else:
        f = scale.to(torch.float32)
        bad = ~torch.isfinite(f)
        what = "a NaN or an infinity"
    if bool(bad.any()):
        raise ValueError(
            f"{name}: the quantization scale holds {what} ({int(bad.sum())} entries); the checkpoint is corrupt"
        )


def _as_scale_dtype(pow2: torch.Tensor, scale_dtype: torch.dtype) -> torch.Tensor:
    """Power-of-two float32 scales as ``scale_dtype``; e8m0 built from the exponent bits (exact,
    no e8m0 cast needed on the device)."""
    if scale_dtype == E8M0_DTYPE:
        bits = pow2.to(torch.float32).contiguous().view(torch.int32)
        return ((bits >> 23) & 0xFF).to(torch.uint8).view(E8M0_DTYPE)
    return pow2.to(scale_dtype)


def _pow2_ceil(x: torch.Tensor) -> torch.Tensor:
    """Smallest power of two >= x for x > 0, 1 where x == 0.

    Exact (from ``frexp``, no ``log2``), so identical on every machine and device.
    """
    m, _ = torch.frexp(x)  # x = m * 2**e, m in [0.5, 1)
    p = torch.where(m == 0.5, x, x / m)  # x / m == 2**e exactly
    return torch.where(x > 0, p, torch.ones_like(x))


def _fp4_bucket_codes() -> torch.Tensor:
    """e2m1 magnitude code nearest to |x| for |x| in [b/4, (b+1)/4), b = 0..24.

    Every midpoint between neighbouring e2m1 magnitudes (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5) is a
    multiple of 1/4, so the nearest code is constant on each bucket; a bucket's left edge ``b/4``
    may be such a midpoint (a tie), which :func:`quantize_fp4` sends to the even code.
    """
    grid = torch.tensor(E2M1_VALUES, dtype=torch.float64)
    centers = (torch.arange(25, dtype=torch.float64) + 0.5) / 4
    return (centers[:, None] - grid).abs().argmin(dim=1).to(torch.uint8)


_FP4_BUCKET_CODE = _fp4_bucket_codes()

#: Buckets whose left edge ``b/4`` is a midpoint between two e2m1 magnitudes (0.25 .. 5): an exact
#: ``|x| / scale == b/4`` is a tie between the bucket's code and the one below it.
_FP4_TIE_BUCKET = torch.zeros(25, dtype=torch.bool)
_FP4_TIE_BUCKET[[1, 3, 5, 7, 10, 14, 20]] = True


def _fp4_byte_table() -> torch.Tensor:
    """``[256, 2]`` float32: the two e2m1 values (low nibble, high nibble) of every byte."""
    vals = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=torch.float32)
    b = torch.arange(256)
    return torch.stack([vals[b & 0x0F], vals[b >> 4]], dim=1)


_FP4_BYTE_TABLE = _fp4_byte_table()


def quantize_fp8_block(
    w: torch.Tensor, block: tuple[int, int] = (128, 128), scale_dtype: torch.dtype = E8M0_DTYPE
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``w [..., R, C]`` to FP8 e4m3 with one scale per ``block`` (edge blocks partial).

    Returns:
        ``(q [..., R, C] float8_e4m3fn, scale [..., ceil(R/bm), ceil(C/bn)] scale_dtype)`` with
        ``w ~= q * scale`` blockwise. ``scale_dtype`` ``float8_e8m0fnu`` rounds each scale up to a
        power of two (V4's ``scale_fmt: ue8m0``); ``float32`` keeps ``amax / 448`` exactly.
    """
    bm, bn = block
    *lead, r, c = w.shape
    nr, nc = -(-r // bm), -(-c // bn)
    x = w.to(torch.float32)
    x = torch.nn.functional.pad(x, (0, nc * bn - c, 0, nr * bm - r))
    blocks = x.reshape(*lead, nr, bm, nc, bn)
    amax = blocks.abs().amax(dim=(-3, -1))  # [..., nr, nc]
    scale = amax / FP8_MAX
    if scale_dtype == E8M0_DTYPE:
        scale = _pow2_ceil(scale)
    else:
        scale = torch.where(amax > 0, scale, torch.ones_like(scale))
    q = (blocks / scale[..., :, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.reshape(*lead, nr * bm, nc * bn)[..., :r, :c].to(FP8_DTYPE)
    return q.contiguous(), _as_scale_dtype(scale, scale_dtype)


def dequantize_fp8_block(
    q: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] = (128, 128), name: str = "weight"
) -> torch.Tensor:
    """``q [..., R, C]`` (float8_e4m3fn) times its block scale -> float32 ``[..., R, C]``.

    Raises:
        ValueError: if ``scale``'s shape is not ``[..., ceil(R/bm), ceil(C/bn)]`` (names ``name``).
    """
    bm, bn = block
    *lead, r, c = q.shape
    want = (*lead, -(-r // bm), -(-c // bn))
    if tuple(scale.shape) != want:
        raise ValueError(
            f"{name}: FP8 block scale has shape {tuple(scale.shape)}, expected {want} for a weight of "
            f"shape {tuple(q.shape)} with {bm}x{bn} blocks"
        )
    sf = scale_to_float(scale)
    if r % bm == 0 and c % bn == 0:  # whole blocks: broadcast the scale over each block
        x = q.to(torch.float32).reshape(*lead, r // bm, bm, c // bn, bn) * sf[..., :, None, :, None]
        return x.reshape(*lead, r, c)
    s = sf.repeat_interleave(bm, dim=-2).repeat_interleave(bn, dim=-1)[..., :r, :c]
    return q.to(torch.float32) * s


def quantize_fp4(
    w: torch.Tensor, scale_dtype: torch.dtype = E8M0_DTYPE, name: str = "weight"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``w [..., R, C]`` (C divisible by 32) to packed e2m1 with per-32 ue8m0 scales.

    Each group's scale is the smallest power of two ``>= amax / 6`` and ``>= 2**-127`` (ue8m0's
    smallest value, byte 0; an all-zero group gets 1), so a group of tiny or subnormal values keeps
    what e2m1 at ``2**-127`` can hold. A value below zero keeps its sign when it rounds to zero
    (code 8, ``-0.0``).

    Returns:
        ``(packed [..., R, C/2] int8, scale [..., R, C/32] scale_dtype)``; rounding is to the
        nearest e2m1 value, ties to the even code (IEEE 754 roundTiesToEven, which the OCP MX
        spec prescribes for conversions to FP4; the indexer's fp4 key cache rounds the same way).

    Raises:
        ValueError: if C is not a multiple of 32, or ``w`` holds a NaN or an infinity (e2m1 has
            neither; names ``name``).
    """
    *lead, r, c = w.shape
    if c % FP4_GROUP:
        raise ValueError(
            f"{name}: FP4 quantization needs the last dim divisible by {FP4_GROUP}, got shape {tuple(w.shape)}"
        )
    g = w.to(torch.float32).reshape(*lead, r, c // FP4_GROUP, FP4_GROUP)
    amax = g.abs().amax(dim=-1)  # [..., R, C/32]
    if not bool(torch.isfinite(amax).all()):
        raise ValueError(f"{name}: FP4 quantization of a tensor holding NaN or infinity (e2m1 has neither)")
    # clamped before the power-of-two step: amax / 6 of a subnormal amax may underflow to 0
    scale = _pow2_ceil(torch.where(amax > 0, (amax / E2M1_VALUES[-1]).clamp(min=_E8M0_MIN), 0.0))
    # bucket index floor(4 |x| / scale) in 0..24 (|x| / scale <= 6), then its nearest code
    y = g.abs() / scale[..., None] * 4.0  # exact: scale is a power of two (4 / scale may overflow)
    bucket = y.to(torch.int64).clamp_(0, 24)
    code = torch.take(_FP4_BUCKET_CODE.to(bucket.device), bucket)
    # a tie (y on a midpoint) sits at its bucket's left edge, whose code is the upper neighbour:
    # step down to the lower one when the upper code is odd (ties to even)
    tie = torch.take(_FP4_TIE_BUCKET.to(bucket.device), bucket) & (y == bucket.to(y.dtype))
    code = torch.where(tie & ((code & 1) == 1), code - 1, code)
    code |= (g < 0).to(torch.uint8) << 3
    code = code.reshape(*lead, r, c)
    packed = code[..., 0::2] | (code[..., 1::2] << 4)
    return packed.view(torch.int8).contiguous(), _as_scale_dtype(scale, scale_dtype)


def dequantize_fp4(packed: torch.Tensor, scale: torch.Tensor, name: str = "weight") -> torch.Tensor:
    """Packed e2m1 ``[..., R, C/2]`` times per-32 scales ``[..., R, C/32]`` -> float32 ``[..., R, C]``.

    Raises:
        ValueError: if the scale shape does not match (names ``name``).
    """
    *lead, r, half = packed.shape
    c = 2 * half
    want = (*lead, r, c // FP4_GROUP)
    if c % FP4_GROUP or tuple(scale.shape) != want:
        raise ValueError(
            f"{name}: FP4 scale has shape {tuple(scale.shape)}, expected {want} for packed weight of shape "
            f"{tuple(packed.shape)} (one scale per {FP4_GROUP} values)"
        )
    u = packed.contiguous().view(torch.uint8).to(torch.int64)
    vals = torch.nn.functional.embedding(
        u, _FP4_BYTE_TABLE.to(u.device)
    )  # [..., R, C/2, 2]: (low, high) nibble values
    vals = vals.reshape(*lead, r, c // FP4_GROUP, FP4_GROUP)
    return (vals * scale_to_float(scale)[..., None]).reshape(*lead, r, c)


def fp4_scale_bytes(scale: torch.Tensor, name: str = "weight") -> torch.Tensor:
    """A stored FP4 scale as uint8 ue8m0 exponent bytes (the runtime's FP4 expert format).

    ``float8_e8m0fnu`` is reinterpreted, ``uint8`` taken as is; float scales must be powers of two
    in ``[2**-126, 2**127]`` and are converted exactly.

    Raises:
        ValueError: a float scale that is not such a power of two (names ``name``).
    """
    if scale.dtype == E8M0_DTYPE:
        return scale.contiguous().view(torch.uint8)
    if scale.dtype == torch.uint8:
        return scale
    if scale.dtype == torch.int8:
        return scale.view(torch.uint8)
    m, e = torch.frexp(scale.to(torch.float32))  # scale = m * 2**e, m in [0.5, 1)
    b = e.to(torch.int32) - 1 + 127
    if not bool(((m == 0.5) & (b >= 1) & (b <= 254)).all()):
        raise ValueError(
            f"{name}: FP4 scales are not all powers of two (ue8m0); the FP4 expert kernels need ue8m0 "
            "scales (load with --quantization none to dequantize instead)"
        )
    return b.to(torch.uint8)

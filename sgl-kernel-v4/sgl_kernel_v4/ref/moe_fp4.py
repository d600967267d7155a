"""Routed experts with FP4 weights (DeepSeek-V4 ``expert_dtype: fp4``): torch reference.

Format (MXFP4-style, as V4 publishes its routed experts): e2m1 values packed two per byte along
the input dim (element ``2j`` in the low nibble of byte ``j``, ``2j+1`` in the high nibble), so
``w13 [E, 2I, D/2]`` (gate rows then up rows, HF packing) and ``w2 [E, D, I/2]``; one ue8m0 scale
byte per 32 consecutive inputs, ``w13_scale [E, 2I, D/32]``, ``w2_scale [E, D, I/32]`` (uint8,
value ``2 ** (byte - 127)``). Nibble: bit 3 sign, bits 1-2 exponent ``e``, bit 0 mantissa ``m``;
magnitude ``m / 2`` if ``e == 0`` else ``(1 + m/2) * 2 ** (e - 1)``, i.e.
``0, 0.5, 1, 1.5, 2, 3, 4, 6``.

Every dequantized value ``e2m1 * 2**k`` has at most two significant bits, so it is exact in
bfloat16: the MoE over FP4 experts equals the bf16 MoE over the dequantized weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .moe import swiglu_clamped

FP4_GROUP = 32
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def ue8m0_to_float(scale: torch.Tensor) -> torch.Tensor:
    """uint8 exponent bytes -> float32 ``2 ** (b - 127)`` (exact; byte 0 is the subnormal ``2**-127``)."""
    b = scale.to(torch.int32)
    return torch.where(b == 0, 2.0**-127, (b << 23).view(torch.float32))


def dequant_fp4(
    packed: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Packed e2m1 ``[..., R, C/2]`` (uint8/int8) x ue8m0 ``[..., R, C/32]`` (uint8) -> ``[..., R, C]``.

    Raises:
        ValueError: if the scale's shape does not fit the packed weight.
    """
    *lead, r, half = packed.shape
    c = 2 * half
    if c % FP4_GROUP or tuple(scale.shape) != (*lead, r, c // FP4_GROUP):
        raise ValueError(
            f"scale: shape {tuple(scale.shape)} does not fit packed FP4 weight {tuple(packed.shape)} "
            f"(one scale per {FP4_GROUP} values)"
        )
    table = torch.tensor(_E2M1, dtype=torch.float32, device=packed.device)
    u = packed.view(torch.uint8).to(torch.int64)
    vals = torch.stack([table[u & 15], table[u >> 4]], dim=-1).view(*lead, r, c // FP4_GROUP, FP4_GROUP)
    return (vals * ue8m0_to_float(scale)[..., None]).view(*lead, r, c).to(dtype)


def check_moe_fp4_args(
    x: torch.Tensor,
    w13: torch.Tensor,
    w13_scale: torch.Tensor,
    w2: torch.Tensor,
    w2_scale: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
) -> tuple[int, int, int, int]:
    """Validate :func:`fused_moe_fp4`'s arguments; return ``(T, D, E, I)``.

    Raises:
        ValueError: naming the argument whose shape or dtype is wrong.
    """
    if x.dim() != 2:
        raise ValueError(f"x: expected [T, D], got shape {tuple(x.shape)}")
    T, D = x.shape
    if w13.dim() != 3 or w13.shape[2] * 2 != D or w13.shape[1] % 2 or w13.element_size() != 1:
        raise ValueError(f"w13: expected packed uint8 [E, 2I, {D // 2}], got {w13.dtype} {tuple(w13.shape)}")
    E, I2, _ = w13.shape
    inter = I2 // 2
    if D % FP4_GROUP or inter % FP4_GROUP:
        raise ValueError(f"x/w13: hidden {D} and intermediate {inter} must be multiples of {FP4_GROUP}")
    if tuple(w2.shape) != (E, D, inter // 2) or w2.element_size() != 1:
        raise ValueError(
            f"w2: expected packed uint8 [{E}, {D}, {inter // 2}], got {w2.dtype} {tuple(w2.shape)}"
        )
    for name, s, want in (
        ("w13_scale", w13_scale, (E, I2, D // FP4_GROUP)),
        ("w2_scale", w2_scale, (E, D, inter // FP4_GROUP)),
    ):
        if tuple(s.shape) != want or s.dtype != torch.uint8:
            raise ValueError(f"{name}: expected uint8 {want}, got {s.dtype} {tuple(s.shape)}")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T or topk_weights.shape != topk_ids.shape:
        raise ValueError(f"topk_ids/topk_weights: expected equal [{T}, k], got {tuple(topk_ids.shape)}")
    return T, D, E, inter


def fused_moe_fp4(
    x: torch.Tensor,
    w13: torch.Tensor,
    w13_scale: torch.Tensor,
    w2: torch.Tensor,
    w2_scale: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    swiglu_limit: float,
) -> torch.Tensor:
    """Weighted sum over the top-k FP4 experts (HF ``DeepseekV4Experts`` on the dequantized weights).

    Args:
        x: ``[T, D]``.
        w13, w13_scale: ``[E, 2I, D/2]`` packed e2m1 (gate rows, then up rows), ``[E, 2I, D/32]`` ue8m0.
        w2, w2_scale: ``[E, D, I/2]`` packed e2m1, ``[E, D, I/32]`` ue8m0.
        topk_ids: ``[T, k]`` expert ids (ids outside ``[0, E)`` contribute nothing).
        topk_weights: ``[T, k]`` routing weights.
        swiglu_limit: SwiGLU clamp (V4: 10).

    Returns:
        ``[T, D]`` in x's dtype; each used expert is dequantized to x's dtype (exact) once.

    Raises:
        ValueError: shapes/dtypes inconsistent.
    """
    T, D, E, _ = check_moe_fp4_args(x, w13, w13_scale, w2, w2_scale, topk_ids, topk_weights)
    out = torch.zeros_like(x)
    if T == 0:
        return out
    k = topk_ids.shape[1]
    flat = topk_ids.reshape(-1).to(torch.int64)
    valid = (flat >= 0) & (flat < E)
    pairs = torch.nonzero(valid).flatten()
    order = pairs[torch.argsort(flat[pairs], stable=True)]
    counts = torch.bincount(flat[order], minlength=E).tolist()
    start = 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        sel = order[start : start + c]
        tok, slot = sel // k, sel % k
        gu = F.linear(x[tok], dequant_fp4(w13[e], w13_scale[e], x.dtype))
        y = F.linear(swiglu_clamped(gu, swiglu_limit), dequant_fp4(w2[e], w2_scale[e], x.dtype))
        out.index_add_(0, tok, (y * topk_weights[tok, slot].unsqueeze(-1).to(x.dtype)).to(out.dtype))
        start += c
    return out

"""FP8 block-scaled linear layers (DeepSeek-V3/V4 weight format): torch reference.

Weight format (DeepSeek-V3 ``README_WEIGHTS.md``; V4 ``quantization_config``: e4m3, 128x128 blocks,
``scale_fmt: ue8m0``): ``weight [N, K]`` float8_e4m3fn and one float32 scale per 128x128 block,
``weight_scale [ceil(N/128), ceil(K/128)]``; the real weight is ``weight * scale`` blockwise (the
scale is the *inverse* quantization scale, HF's ``weight_scale_inv``).

``y = x @ W^T`` is computed one of two ways (both in the Triton module, chosen per shape):

* weight-only (``w8a16``): ``W`` dequantized, ``x`` kept in its dtype; fp32 accumulation. The
  reference computes exactly ``x @ dequant(W)^T`` (the CPU oracle path).
* activation-quantized (``w8a8``, DeepSeek's inference code ``act_quant`` + ``fp8_gemm``): ``x`` is
  quantized per 1x128 group along K to e4m3 with scale ``sx = amax / 448`` (amax clamped to
  ``>= 1e-4``), rounded up to a power of two (ue8m0, as V4's ``scale_fmt``), then
  ``y = sum_kb (q[:, kb] @ w[:, kb]^T) * sx[:, kb] * s[nb, kb]``. The power-of-two rounding is
  what the Triton kernels do whatever the checkpoint's ``scale_fmt``; DeepSeek's ``act_quant``
  keeps the exact ``amax / 448`` when ``scale_fmt`` is absent (:func:`act_quant` with
  ``pow2=False``). The CPU path (``variant=None``) quantizes no activations, as transformers
  does on CPU (it dequantizes FP8 checkpoints), so it is exact under either ``scale_fmt``.

Grouped projections (V4's grouped output projection ``o_a``) pass ``x [T, G, K]`` and a weight
``[G * N, K]``: group ``g`` multiplies ``x[:, g]`` by rows ``g*N .. (g+1)*N - 1``; the output is
``[T, G * N]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FP8_MAX = 448.0
BLOCK = 128
#: Lower clamp of a 1x128 group's amax before its scale is computed (DeepSeek's ``act_quant``).
AMAX_MIN = 1e-4


def pow2_ceil(s: torch.Tensor) -> torch.Tensor:
    """Smallest power of two ``>= s`` for positive normal float32 ``s`` (exact, from the bits)."""
    bits = s.to(torch.float32).contiguous().view(torch.int32)
    e = (bits >> 23) & 0xFF
    e = torch.where((bits & 0x7FFFFF) != 0, e + 1, e)
    return (e << 23).view(torch.float32)


def round_e4m3(y: torch.Tensor) -> torch.Tensor:
    """Round float32 ``|y| <= 448`` to the nearest e4m3 value (ties to even), staying in float32.

    The e4m3 step at ``|y|`` is ``2**(ex - 130)`` (``ex`` = its biased fp32 exponent, at least 121 =
    the subnormal range); ``round(|y| / step) * step`` with ``torch.round`` (half to even) is exact.
    The cast to float8 afterwards is exact, so the result does not depend on the rounding of the
    host's float -> float8 conversion."""
    y = y.to(torch.float32)
    a = y.abs()
    ex = ((a.contiguous().view(torch.int32) >> 23) & 0xFF).clamp_min(121)
    step = ((ex - 3) << 23).view(torch.float32)
    return torch.copysign(torch.round(a / step) * step, y)


def act_quant(x: torch.Tensor, group: int = BLOCK, pow2: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x [M, K]`` per 1 x ``group`` block along K to float8_e4m3fn.

    Returns:
        ``(q [M, K] float8_e4m3fn, scale [M, ceil(K/group)] float32)`` with ``x ~= q * scale``
        groupwise; ``scale = amax / 448`` (``amax >= 1e-4``), rounded up to a power of two when
        ``pow2`` (ue8m0). The last group may be partial. Non-finite elements: NaN -> NaN,
        ``+-inf`` -> ``+-448`` (clamped before the cast, as DeepSeek's reference ``act_quant``;
        torch's own cast of ``+-inf`` gives NaN in some releases), left out of their group's
        ``amax``.
    """
    M, K = x.shape
    nk = -(-K // group)
    xf = F.pad(x.to(torch.float32), (0, nk * group - K)).view(M, nk, group)
    amax = torch.where(xf.isfinite(), xf.abs(), 0.0).amax(dim=-1).clamp_min(AMAX_MIN)
    s = amax / FP8_MAX
    if pow2:
        s = pow2_ceil(s)
    nan = xf.isnan()
    q = round_e4m3((torch.where(nan, 0.0, xf) / s[..., None]).clamp(-FP8_MAX, FP8_MAX))
    q = torch.where(nan, float("nan"), q).to(torch.float8_e4m3fn)
    return q.view(M, nk * group)[:, :K].contiguous(), s


def dequant_act(q: torch.Tensor, scale: torch.Tensor, group: int = BLOCK) -> torch.Tensor:
    """Inverse of :func:`act_quant`: ``q [M, K]`` times its group scales -> float32 ``[M, K]``."""
    K = q.shape[-1]
    return q.to(torch.float32) * scale.repeat_interleave(group, dim=-1)[..., :K]


def dequant_fp8_block(weight: torch.Tensor, weight_scale: torch.Tensor, block: int = BLOCK) -> torch.Tensor:
    """``weight [N, K]`` (float8_e4m3fn) times its ``[ceil(N/b), ceil(K/b)]`` block scale -> float32.

    Raises:
        ValueError: if the scale's shape does not fit the weight.
    """
    N, K = weight.shape
    want = (-(-N // block), -(-K // block))
    if tuple(weight_scale.shape) != want:
        raise ValueError(
            f"weight_scale: shape {tuple(weight_scale.shape)} does not fit weight {tuple(weight.shape)} "
            f"with {block}x{block} blocks (expected {want})"
        )
    s = weight_scale.to(torch.float32).repeat_interleave(block, 0).repeat_interleave(block, 1)
    return weight.to(torch.float32) * s[:N, :K]


def check_fp8_linear_args(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor) -> tuple:
    """Validate :func:`fp8_linear`'s arguments; return ``(T, G, N, K)`` (N per group).

    Raises:
        ValueError: naming the argument whose shape or dtype is wrong.
    """
    if x.dim() not in (2, 3):
        raise ValueError(f"x: expected [T, K] or [T, G, K], got shape {tuple(x.shape)}")
    T, K = x.shape[0], x.shape[-1]
    G = x.shape[1] if x.dim() == 3 else 1
    if weight.dtype != torch.float8_e4m3fn or weight.dim() != 2 or weight.shape[1] != K:
        raise ValueError(
            f"weight: expected float8_e4m3fn [G * N, {K}], got {weight.dtype} {tuple(weight.shape)}"
        )
    if weight.shape[0] % G:
        raise ValueError(f"weight: {weight.shape[0]} rows do not split into {G} groups")
    N = weight.shape[0] // G
    want = (-(-G * N // BLOCK), -(-K // BLOCK))
    if tuple(weight_scale.shape) != want or weight_scale.dtype != torch.float32:
        raise ValueError(
            f"weight_scale: expected float32 {want} for weight {tuple(weight.shape)}, got "
            f"{weight_scale.dtype} {tuple(weight_scale.shape)}"
        )
    return T, G, N, K


def fp8_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    variant: str | None = None,
) -> torch.Tensor:
    """``y = x @ (weight * weight_scale)^T`` (grouped when ``x`` is 3-D), reference.

    Args:
        x: ``[T, K]`` or ``[T, G, K]`` (float32 / bfloat16 / float16).
        weight: ``[G * N, K]`` float8_e4m3fn.
        weight_scale: ``[ceil(G*N/128), ceil(K/128)]`` float32 block scales.
        variant: ``None`` / ``"w8a16"`` (exact weight dequantization) or ``"w8a8"`` /
            ``"w8a8_fused"`` (activations quantized per 1x128 group first, as the Triton prefill
            kernel and the fused decode kernel do).

    Returns:
        ``[T, G * N]`` in x's dtype (computed in float32).

    Raises:
        ValueError: shapes/dtypes inconsistent, or an unknown ``variant``.
    """
    T, G, N, K = check_fp8_linear_args(x, weight, weight_scale)
    if variant not in (None, "w8a16", "w8a8", "w8a8_fused"):
        raise ValueError(f"variant: expected None, 'w8a16', 'w8a8' or 'w8a8_fused', got {variant!r}")
    w = dequant_fp8_block(weight, weight_scale).view(G, N, K)
    xf = x.reshape(T, G, K)
    if variant in ("w8a8", "w8a8_fused"):
        q, s = act_quant(xf.reshape(T * G, K))
        xf = dequant_act(q, s).view(T, G, K)
    else:
        xf = xf.to(torch.float32)
    y = torch.einsum("tgk,gnk->tgn", xf, w) if G > 1 else F.linear(xf[:, 0], w[0])[:, None]
    return y.reshape(T, G * N).to(x.dtype)

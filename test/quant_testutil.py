"""float64 oracles of DeepSeek's FP8 / FP4 weight formats, written from the format definitions
(DeepSeek-V3 ``README_WEIGHTS.md``; V4 ``quantization_config``), shared by the quantization tests.

* FP8 weight: e4m3 value x scale per 128x128 block.
* FP8 activations (1x128 groups): scale ``2 ** ceil(log2(max(amax, 1e-4) / 448))``, values
  ``x / scale`` rounded to the nearest e4m3 (ties to the even code) by a search of the 127
  non-negative e4m3 values in float64 (no float8 cast involved).
* FP4 (e2m1, two per byte, element 2j in the low nibble): sign bit 3, exponent bits 1-2, mantissa
  bit 0; magnitude ``(1 + m/2) * 2**(e-1)``, or ``m/2`` when ``e == 0``; times ``2 ** (b - 127)``
  per 32 values (ue8m0 byte ``b``).
"""

from __future__ import annotations

import torch


def fp8_weight64(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """e4m3 ``w [R, C]`` x block scales ``s [ceil(R/128), ceil(C/128)]`` -> float64."""
    r, c = w.shape
    i, j = torch.arange(r) // 128, torch.arange(c) // 128
    return w.to(torch.float64) * s.to(torch.float64)[i[:, None], j[None, :]]


def e4m3_grid64() -> torch.Tensor:
    """The 127 non-negative finite e4m3 values, ascending (index = code), from the bit fields."""
    c = torch.arange(127, dtype=torch.float64)
    e, m = torch.div(c, 8, rounding_mode="floor"), c % 8
    return torch.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * torch.pow(2.0, e - 7))


def e4m3_round64(v: torch.Tensor) -> torch.Tensor:
    """``v`` (|v| <= 448) to the nearest e4m3 value in float64; a tie goes to the even code."""
    grid = e4m3_grid64()
    a = v.to(torch.float64).abs()
    hi_i = torch.searchsorted(grid, a).clamp(1, 126)
    lo, hi = grid[hi_i - 1], grid[hi_i]
    d_lo, d_hi = a - lo, hi - a
    r = torch.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi_i % 2 == 0)), hi, lo)
    return torch.copysign(r, v.to(torch.float64))


def act_quant64(x: torch.Tensor) -> torch.Tensor:
    """float64 values of the 1x128-group e4m3 quantization of ``x [M, K]`` (dequantized)."""
    M, K = x.shape
    out = torch.empty(M, K, dtype=torch.float64)
    for k0 in range(0, K, 128):
        blk = x[:, k0 : k0 + 128].to(torch.float64)
        amax = blk.abs().amax(dim=1).clamp_min(1e-4)
        scale = torch.pow(2.0, torch.ceil(torch.log2(amax / 448.0)))
        q = e4m3_round64((blk / scale[:, None]).clamp(-448, 448))
        out[:, k0 : k0 + 128] = q * scale[:, None]
    return out


def e4m3_rounding_cases() -> torch.Tensor:
    """float32 ``[4, 384]``: per row, every midpoint between adjacent e4m3 values and the float32
    neighbours on both sides of it, times ``2**k`` (k = -3, 0, 2, 5), in the first 127 of each 128
    columns, with ``448 * 2**k`` in the last so the group scale is exactly ``2**k``; negated in
    every other group. The ties (half of them toward an odd code) and the near-ties, normal and
    subnormal, of a 1x128 quantizer."""
    grid = e4m3_grid64()
    mid = ((grid[1:] + grid[:-1]) / 2).to(torch.float32)
    below = torch.nextafter(mid, torch.zeros_like(mid))
    above = torch.nextafter(mid, torch.full_like(mid, 1e4))
    rows = []
    for k in (-3, 0, 2, 5):
        groups = []
        for i, v in enumerate((mid, below, above)):
            g = torch.cat([v[:126], v[:1], torch.tensor([448.0])]) * 2.0**k
            groups.append(-g if i % 2 else g)
        rows.append(torch.cat(groups))
    return torch.stack(rows)


def linear64(x: torch.Tensor, w64: torch.Tensor, groups: int) -> torch.Tensor:
    """``x [T, K]`` or ``[T, G, K]`` times the grouped float64 weight ``[G*N, K]`` -> ``[T, G*N]``."""
    T, K = x.shape[0], w64.shape[1]
    xg = x.reshape(T, groups, K).to(torch.float64)
    return torch.einsum("tgk,gnk->tgn", xg, w64.view(groups, -1, K)).reshape(T, -1)


def scale_byte64(scale: torch.Tensor) -> torch.Tensor:
    """A ue8m0 scale (uint8 exponent bytes or float8_e8m0fnu) as float64 ``2 ** (b - 127)``."""
    if scale.dtype == torch.float8_e8m0fnu:
        scale = scale.view(torch.uint8)
    if scale.dtype == torch.uint8:
        return torch.pow(2.0, scale.to(torch.float64) - 127.0)
    return scale.to(torch.float64)


def fp4_weight64(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Packed e2m1 ``[..., R, C/2]`` + ue8m0 ``[..., R, C/32]`` -> float64 ``[..., R, C]``."""
    u = packed.view(torch.uint8).to(torch.int64)
    codes = torch.stack([u & 15, u >> 4], dim=-1).flatten(-2)
    sign = 1.0 - 2.0 * ((codes >> 3) & 1).to(torch.float64)
    e, m = ((codes >> 1) & 3).to(torch.float64), (codes & 1).to(torch.float64)
    mag = torch.where(e == 0, 0.5 * m, (1.0 + 0.5 * m) * torch.pow(2.0, e - 1.0))
    return sign * mag * scale_byte64(scale).repeat_interleave(32, dim=-1)


def moe64(
    x: torch.Tensor,
    wgu: torch.Tensor,
    wd: torch.Tensor,
    ids: torch.Tensor,
    wts: torch.Tensor,
    limit: float,
    stats: dict | None = None,
) -> torch.Tensor:
    """HF ``DeepseekV4Experts.forward`` in float64 on float64 weights (ids outside [0, E) skipped).

    ``stats``, if given, receives ``max_pre``: the largest |gate / up pre-activation| (to check
    that a test reaches the SwiGLU clamp)."""
    T, D = x.shape
    E = wgu.shape[0]
    out = torch.zeros(T, D, dtype=torch.float64)
    max_pre = 0.0
    for t in range(T):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            if not 0 <= e < E:
                continue
            gu = wgu[e] @ x[t].double()
            max_pre = max(max_pre, float(gu.abs().max()))
            g, u = gu.chunk(2)
            h = torch.nn.functional.silu(g.clamp(max=limit)) * u.clamp(-limit, limit)
            out[t] += (wd[e] @ h) * float(wts[t, j])
    if stats is not None:
        stats["max_pre"] = max_pre
    return out


def random_fp4_experts(E: int, D: int, I: int, gen: torch.Generator, up_octaves: int = 2) -> tuple:  # noqa: E741
    """Random packed FP4 experts ``(w13, s13, w2, s2)`` with per-32 scales near
    ``1 / (2.9 sqrt(fan_in))`` (+-1 octave; gate/up ``up_octaves`` larger to reach the SwiGLU clamp)."""
    w13 = torch.randint(0, 256, (E, 2 * I, D // 2), generator=gen, dtype=torch.uint8)
    w2 = torch.randint(0, 256, (E, D, I // 2), generator=gen, dtype=torch.uint8)
    b13 = 127 - round(torch.log2(torch.tensor(2.9 * D**0.5)).item()) + up_octaves
    b2 = 127 - round(torch.log2(torch.tensor(2.9 * I**0.5)).item())
    s13 = torch.randint(b13 - 1, b13 + 2, (E, 2 * I, D // 32), generator=gen, dtype=torch.uint8)
    s2 = torch.randint(b2 - 1, b2 + 2, (E, D, I // 32), generator=gen, dtype=torch.uint8)
    return w13, s13, w2, s2


def random_fp8_weight(rows: int, cols: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random e4m3 weight ``[rows, cols]`` and float32 block scales (one a power of two)."""
    w = (torch.randn(rows, cols, generator=gen) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    s = torch.rand(-(-rows // 128), -(-cols // 128), generator=gen) * cols**-0.5 / 32 + 1e-4
    s[0, 0] = 2.0**-10
    return w, s


def state_dict64(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every weight of a state dict in float64: FP8 (``float8_e4m3fn`` + ``*_scale_inv``) and FP4
    (packed bytes + ``*_scale_inv``) dequantized with :func:`fp8_weight64` / :func:`fp4_weight64`,
    other floating tensors cast, integer tensors kept; the scale tensors themselves dropped."""
    out = {}
    for k, v in sd.items():
        if k.endswith("_scale_inv"):
            continue
        s = sd.get(k + "_scale_inv")
        if s is not None and v.dtype == torch.float8_e4m3fn:
            out[k] = fp8_weight64(v, s)
        elif s is not None:
            out[k] = fp4_weight64(v, s)
        else:
            out[k] = v.double() if v.is_floating_point() else v
    return out

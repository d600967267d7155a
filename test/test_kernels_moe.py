"""GPU tests: Triton fused MoE (grouped GEMM + clamped SwiGLU) vs a float64 per-pair loop (op table 8).

Marked ``gpu``; skipped without CUDA + Triton (they also run under ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS, dtypes, rel_err

pytestmark = KERNEL_MARKS


def moe64(
    x: torch.Tensor, wgu: torch.Tensor, wd: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor, limit: float
) -> torch.Tensor:
    """float64 transcription of HF DeepseekV4Experts.forward (ids outside [0, E) skipped)."""
    T, D = x.shape
    E = wgu.shape[0]
    out = torch.zeros(T, D, dtype=torch.float64)
    for t in range(T):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            if not 0 <= e < E:
                continue
            gu = wgu[e].double() @ x[t].double()
            g, u = gu.chunk(2)
            h = torch.nn.functional.silu(g.clamp(max=limit)) * u.clamp(-limit, limit)
            out[t] += (wd[e].double() @ h) * float(wts[t, j])
    return out


CASES = [
    # T, D, I, E, k
    (1, 256, 128, 8, 6),
    (5, 256, 192, 8, 2),
    (64, 512, 256, 32, 6),  # many tokens per expert: larger tiles
    (300, 256, 128, 4, 2),
    (700, 128, 64, 16, 6),  # 4200 pairs: the chunked (two-launch) align path
]


@pytest.mark.parametrize("T,D,I,E,k", CASES)
@pytest.mark.parametrize("dtype", dtypes())
def test_fused_moe(T: int, D: int, I: int, E: int, k: int, dtype: torch.dtype) -> None:  # noqa: E741
    from sgl_kernel_v4.triton.moe import fused_moe

    if INTERP and T * D * I > 64 * 512 * 256:
        pytest.skip("interpreter: too slow")
    gen = torch.Generator().manual_seed(T + D + E)
    x = torch.randn(T, D, generator=gen).to(dtype)
    wgu = (torch.randn(E, 2 * I, D, generator=gen) * D**-0.5 * 4).to(dtype)  # large enough to hit the clamp
    wd = (torch.randn(E, D, I, generator=gen) * I**-0.5).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    wts = torch.rand(T, k, generator=gen)
    if T > 2:
        ids[1, 0] = -1  # a dropped slot contributes nothing
    limit = 3.0
    ref = moe64(x, wgu, wd, ids, wts, limit)
    out = fused_moe(x.to(DEVICE), wgu.to(DEVICE), wd.to(DEVICE), ids.to(DEVICE), wts.to(DEVICE), limit)
    assert out.dtype == dtype and out.shape == (T, D)
    assert not torch.isnan(out).any()
    assert rel_err(out, ref) < (1.5e-2 if dtype == torch.bfloat16 else 2e-3)
    # the clamp was active (the test exercises it): some pre-activation exceeds the limit
    gu = torch.einsum("td,tkfd->tkf", x.double(), wgu.double()[ids.clamp(min=0)])
    assert (gu.abs() > limit).any()


@pytest.mark.parametrize("T,k,E,bm", [(1, 6, 32, 16), (9, 2, 8, 16), (300, 6, 256, 32), (682, 6, 32, 128)])
def test_align_kernel_matches_torch_align(T: int, k: int, E: int, bm: int) -> None:
    """The one-program Triton pair layout equals the torch one exactly (incl. skipped ids)."""
    from sgl_kernel_v4.triton.moe import _align, _align_torch

    gen = torch.Generator().manual_seed(T + E)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    ids[0, 0] = -1
    if T > 3:
        ids[3, -1] = E + 5
    ids = ids.to(DEVICE)
    a, b = _align(ids, E, bm), _align_torch(ids, E, bm)
    assert torch.equal(a[0].cpu(), b[0].cpu())
    assert torch.equal(a[1].cpu(), b[1].cpu())


def test_fused_moe_bad_input() -> None:
    from sgl_kernel_v4.triton.moe import fused_moe

    x = torch.randn(2, 64, device=DEVICE)
    wgu = torch.randn(4, 64, 64, device=DEVICE)
    wd = torch.randn(4, 64, 32, device=DEVICE)
    ids = torch.zeros(2, 2, dtype=torch.int64, device=DEVICE)
    w = torch.ones(2, 2, device=DEVICE)
    with pytest.raises(ValueError, match="w_down"):
        fused_moe(x, wgu, wd[:, :, :16], ids, w, 10.0)
    with pytest.raises(ValueError, match="topk"):
        fused_moe(x, wgu, wd, ids[:1], w, 10.0)
    assert fused_moe(x[:0], wgu, wd, ids[:0], w[:0], 10.0).shape == (0, 64)

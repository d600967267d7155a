"""GPU tests: Triton fused compressor (pooling + RMSNorm + RoPE + pool write) vs float64 (op table 2).

Marked ``gpu``; skipped without CUDA + Triton (they also run under ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, KERNEL_MARKS, dtypes, rel_err

pytestmark = KERNEL_MARKS


def compress64(
    kv: torch.Tensor, score: torch.Tensor, w: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float
) -> torch.Tensor:
    """float64 oracle of HF DeepseekV4CSACompressor/HCACompressor per window (softmax over L)."""
    p = torch.softmax(score.double(), dim=1)
    c = (p * kv.double()).sum(1)  # [W, d]
    c = c * torch.rsqrt(c.square().mean(-1, keepdim=True) + eps) * w.double()
    r = 2 * cos.shape[-1]
    a, b = c[:, -r::2].clone(), c[:, -r + 1 :: 2].clone()
    cc, ss = cos.double(), sin.double()
    c[:, -r::2] = a * cc - b * ss
    c[:, -r + 1 :: 2] = b * cc + a * ss
    return c


CASES = [
    # W, L, d, r, overlap(-inf first half of window 0)
    (1, 8, 512, 64, True),  # CSA main decode
    (1, 8, 128, 64, True),  # CSA indexer decode
    (64, 8, 512, 64, True),  # CSA prefill
    (3, 128, 512, 64, False),  # HCA
    (200, 8, 128, 64, True),
    (5, 5, 64, 16, False),  # odd L
    (2, 32, 128, 64, False),  # long window, channel-split path
    (4, 100, 512, 64, True),  # long window not a power of 2, -inf rows
]


@pytest.mark.parametrize("W,L,d,r,overlap", CASES)
@pytest.mark.parametrize("dtype", dtypes())
def test_compress_and_insert(W: int, L: int, d: int, r: int, overlap: bool, dtype: torch.dtype) -> None:
    from sgl_kernel_v4.triton.compressor import compress_and_insert

    gen = torch.Generator().manual_seed(W * 11 + L + d)
    # kv as a strided view (like slicing a [W, L, 2d] projection), score fp32 = gate + ape
    kv_full = torch.randn(W, L, 2 * d, generator=gen).to(dtype)
    kv = kv_full[..., d:]
    score = torch.randn(W, L, d, generator=gen) * 2
    if overlap:
        score[0, : L // 2] = float("-inf")  # empty overlap slots of the first window
    w = torch.rand(d, generator=gen) + 0.5
    pos = torch.randint(0, 50000, (W, 1), generator=gen).double()
    inv = 160000.0 ** (-torch.arange(0, r, 2).double() / r)
    cos, sin = (pos * inv).cos().float(), (pos * inv).sin().float()
    N = 2 * W + 4
    pool = torch.full((N, d), float("nan")).to(dtype).to(DEVICE)
    idx = torch.randperm(N, generator=gen)[:W]
    if W > 2:
        idx[1] = -1
    out = torch.full((W, d), float("nan")).to(dtype).to(DEVICE)
    res = compress_and_insert(
        kv.to(DEVICE), score.to(DEVICE), w.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE), pool, idx.to(DEVICE), 1e-6,
        out=out,
    )  # fmt: skip
    assert res.data_ptr() == out.data_ptr() and not torch.isnan(out).any()
    ref = compress64(kv, score, w, cos, sin, 1e-6)
    assert rel_err(out, ref) < (8e-3 if dtype == torch.bfloat16 else 1e-5)
    p = pool.cpu()
    assert torch.equal(p[idx[idx >= 0]], out.cpu()[idx >= 0])
    mask = torch.ones(N, dtype=torch.bool)
    mask[idx[idx >= 0]] = False
    assert torch.isnan(p[mask]).all()


def test_compress_empty_and_bad_input() -> None:
    from sgl_kernel_v4.triton.compressor import compress_and_insert

    d = 64
    kv = torch.randn(0, 8, d, device=DEVICE)
    cs = torch.randn(0, 8, device=DEVICE)
    pool = torch.randn(4, d, device=DEVICE)
    z = torch.zeros(0, dtype=torch.int64, device=DEVICE)
    out = compress_and_insert(kv, kv, torch.ones(d, device=DEVICE), cs, cs, pool, z, 1e-6)
    assert out.shape == (0, d)
    kv = torch.randn(2, 8, d, device=DEVICE)
    cs = torch.randn(2, 8, device=DEVICE)
    with pytest.raises(ValueError, match="norm_weight"):
        compress_and_insert(
            kv,
            kv,
            torch.ones(3, device=DEVICE),
            cs,
            cs,
            pool,
            torch.zeros(2, dtype=torch.int64, device=DEVICE),
            1e-6,
        )
    with pytest.raises(ValueError, match="out_index"):
        compress_and_insert(
            kv,
            kv,
            torch.ones(d, device=DEVICE),
            cs,
            cs,
            pool,
            torch.zeros(3, dtype=torch.int64, device=DEVICE),
            1e-6,
        )

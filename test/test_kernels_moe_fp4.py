"""GPU tests: Triton fused MoE over FP4 experts (e2m1 x ue8m0 per 32, dequantized in the kernel)
against a float64 per-pair loop on weights decoded here from the bit fields.

Oracle (``quant_testutil``): each nibble decoded from its sign / exponent / mantissa bits
(``(1 + m/2) * 2**(e-1)``, ``m/2`` when ``e == 0``), times ``2 ** (byte - 127)`` per 32 inputs,
then HF ``DeepseekV4Experts.forward`` transcribed in float64 (clamped SwiGLU, routing weights,
skipped ids).
Marked ``gpu``; they also run under ``TRITON_INTERPRET=1`` (small shapes, fp32).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS, dtypes, rel_err
from quant_testutil import fp4_weight64, moe64
from quant_testutil import random_fp4_experts as _experts


def _moe64(x, w13, s13, w2, s2, ids, wts, limit, stats: dict | None = None) -> torch.Tensor:
    """float64 oracle, decoding only the experts the batch uses."""
    used = sorted({int(e) for e in ids.flatten() if 0 <= int(e) < w13.shape[0]})
    remap = torch.full((w13.shape[0] + 1,), -1, dtype=torch.long)
    remap[torch.tensor(used, dtype=torch.long)] = torch.arange(len(used))
    local = torch.where((ids >= 0) & (ids < w13.shape[0]), remap[ids.clamp(0, w13.shape[0])], -1)
    wgu = fp4_weight64(w13[used], s13[used])
    wd = fp4_weight64(w2[used], s2[used])
    return moe64(x, wgu, wd, local, wts, limit, stats)


pytestmark = KERNEL_MARKS


CASES_INTERP = [(1, 128, 64, 8, 2), (5, 64, 96, 4, 2), (24, 128, 64, 8, 6)]
CASES_GPU = [
    (1, 4096, 2048, 32, 6),  # flash expert shapes, decode bs 1
    (16, 2048, 1024, 16, 6),
    (200, 1024, 512, 16, 6),
    (700, 256, 128, 16, 6),  # 4200 pairs: the torch align path
]


@pytest.mark.parametrize("T,D,I,E,k", CASES_INTERP if INTERP else CASES_GPU)
@pytest.mark.parametrize("dtype", dtypes())
def test_fused_moe_fp4_vs_float64(T: int, D: int, I: int, E: int, k: int, dtype: torch.dtype) -> None:  # noqa: E741
    from sgl_kernel_v4.triton.moe_fp4 import fused_moe_fp4

    gen = torch.Generator().manual_seed(T + D + E)
    w13, s13, w2, s2 = _experts(E, D, I, gen)
    x = torch.randn(T, D, generator=gen).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    if T > 2:
        ids[1, 0] = -1  # a dropped slot contributes nothing
        ids[2, 1] = E + 3
    wts = torch.rand(T, k, generator=gen)
    limit = 3.0
    stats: dict = {}
    ref = _moe64(x, w13, s13, w2, s2, ids, wts, limit, stats)
    dev = [t.to(DEVICE) for t in (x, w13, s13, w2, s2, ids, wts)]
    out = fused_moe_fp4(*dev, limit)
    assert out.dtype == dtype and out.shape == (T, D) and not torch.isnan(out).any()
    assert rel_err(out, ref) < (1.5e-2 if dtype == torch.bfloat16 else 2e-3)
    assert stats["max_pre"] > limit  # the clamp was exercised


def test_hash_routing_ids_and_int8_storage() -> None:
    """Hash-routed ids (a tid2eid lookup, as V4's first layers) and int8-typed packed bytes, as
    the official files store them, give the float64 result."""
    from sgl_kernel_v4.triton.moe_fp4 import fused_moe_fp4

    gen = torch.Generator().manual_seed(5)
    E, D, I, k, T = 8, 64, 64, 2, 6  # noqa: E741
    w13, s13, w2, s2 = _experts(E, D, I, gen)
    tid2eid = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(50)])
    ids = tid2eid[torch.randint(0, 50, (T,), generator=gen)]
    x = torch.randn(T, D, generator=gen).to(dtypes()[0])
    wts = torch.rand(T, k, generator=gen)
    ref = _moe64(x, w13, s13, w2, s2, ids, wts, 10.0)
    dev = [t.to(DEVICE) for t in (x, w13.view(torch.int8), s13, w2.view(torch.int8), s2, ids, wts)]
    out = fused_moe_fp4(*dev, 10.0)
    assert rel_err(out, ref) < (1.5e-2 if x.dtype == torch.bfloat16 else 2e-3)

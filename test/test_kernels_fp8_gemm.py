"""GPU tests: Triton FP8 block-scaled linear (weight-only and activation-quantized) and the 1x128
activation quantizer, against float64 oracles written here from the format definitions.

Oracles (``quant_testutil``): the weight is ``e4m3 value x scale`` per 128x128 block in float64;
the activation quantizer's scale is ``2 ** ceil(log2(max(amax, 1e-4) / 448))`` per 1x128 group and
its values ``x / scale`` rounded to the nearest e4m3 (torch's own float8 cast, ties to even). Marked ``gpu``; they also run on the CPU under ``TRITON_INTERPRET=1`` (small shapes, fp32).
"""

from __future__ import annotations

import math

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS, dtypes, rel_err
from quant_testutil import act_quant64, random_fp8_weight
from quant_testutil import fp8_weight64 as _w64
from quant_testutil import linear64 as _y64

pytestmark = KERNEL_MARKS


def _weights(G: int, N: int, K: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return random_fp8_weight(G * N, K, gen)


# T, G, N (per group), K
CASES_INTERP = [(1, 1, 200, 300), (5, 2, 32, 256), (33, 1, 128, 384), (70, 1, 160, 256)]
CASES_GPU = [
    (1, 1, 1024, 4096),  # q_a at decode
    (4, 8, 1024, 4096),  # grouped o_a
    (16, 1, 32768, 1024),  # q_b
    (64, 1, 512, 4096),  # kv
    (300, 1, 4096, 8192),  # o_b, prefill chunk
    (2048, 1, 2048, 4096),  # shared expert, prefill
    (7, 2, 96, 200),  # ragged: N and K not multiples of 128
]
CASES = CASES_INTERP if INTERP else CASES_GPU


@pytest.mark.parametrize("T,G,N,K", CASES)
@pytest.mark.parametrize("variant", ["w8a16", "w8a8"])
@pytest.mark.parametrize("dtype", dtypes())
def test_fp8_linear_vs_float64(T: int, G: int, N: int, K: int, variant: str, dtype: torch.dtype) -> None:
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    gen = torch.Generator().manual_seed(T * 7 + N + K)
    w, s = _weights(G, N, K, gen)
    x = torch.randn(T, G, K, generator=gen) if G > 1 else torch.randn(T, K, generator=gen)
    x[0, ..., 5] = 40.0  # an outlier: its group's activation scale is large
    x = x.to(dtype)
    w64 = _w64(w, s)
    out = fp8_linear(x.to(DEVICE), w.to(DEVICE), s.to(DEVICE), variant)
    assert out.shape == (T, G * N) and out.dtype == dtype
    exact = _y64(x, w64, G)
    if variant == "w8a16":
        want, tol = exact, (1e-2 if dtype == torch.bfloat16 else 2e-3)
    else:  # the oracle quantizes the activations the same way, independently
        want = _y64(act_quant64(x.reshape(-1, K).float()).reshape(x.shape), w64, G)
        tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
        assert rel_err(out, exact) < 0.08  # and fp8 activations stay close to the exact product
    assert rel_err(out, want) < tol


@pytest.mark.parametrize("split", [2, 3])
def test_w8a16_split_k_atomic_path(split: int) -> None:
    """Split-K (fp32 atomic partial sums) gives the same product as one program per tile."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    gen = torch.Generator().manual_seed(split)
    w, s = _weights(1, 96, 640, gen)
    x = torch.randn(3, 640, generator=gen).to(dtypes()[0])
    cfg = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": split, "num_warps": 4, "num_stages": 2}
    out = fp8_linear(x.to(DEVICE), w.to(DEVICE), s.to(DEVICE), "w8a16", config=cfg)
    assert rel_err(out, _y64(x, _w64(w, s), 1)) < (1e-2 if x.dtype == torch.bfloat16 else 2e-3)


@pytest.mark.parametrize("M,K", [(3, 300), (37, 256), (1, 128)])
def test_act_quant_vs_float64(M: int, K: int) -> None:
    from sgl_kernel_v4.triton.fp8_gemm import act_quant

    gen = torch.Generator().manual_seed(M + K)
    x = torch.randn(M, K, generator=gen) * 3
    x[0, :128] = 0.0  # an all-zero group: amax clamped to 1e-4
    x[-1, -1] = 1000.0
    q, s = act_quant(x.to(DEVICE))
    assert q.dtype == torch.float8_e4m3fn and s.shape == (M, math.ceil(K / 128))
    got = q.double().cpu() * s.double().cpu().repeat_interleave(128, dim=1)[:, :K]
    assert torch.equal(got, act_quant64(x))
    assert bool((torch.log2(s.double()) == torch.log2(s.double()).round()).all())  # ue8m0 scales


def test_variant_choice_and_bad_args() -> None:
    from sgl_kernel_v4.triton.fp8_gemm import W8A16_MAX_TOKENS, choose_variant, fp8_linear

    assert choose_variant(1) == "w8a16" and choose_variant(W8A16_MAX_TOKENS) == "w8a16"
    assert choose_variant(W8A16_MAX_TOKENS + 1) == "w8a8"
    w = torch.zeros(256, 128, dtype=torch.float8_e4m3fn, device=DEVICE)
    s = torch.ones(2, 1, device=DEVICE)
    x = torch.zeros(2, 128, device=DEVICE)
    with pytest.raises(ValueError, match="variant"):
        fp8_linear(x, w, s, "w4a4")
    with pytest.raises(ValueError, match="weight_scale"):
        fp8_linear(x, w, torch.ones(1, 1, device=DEVICE))
    with pytest.raises(ValueError, match="weight"):
        fp8_linear(x, w.float(), s)
    assert fp8_linear(x[:0], w, s).shape == (0, 256)


@pytest.mark.skipif(INTERP, reason="CUDA graphs")
def test_fp8_linear_cuda_graph_capture() -> None:
    """Decode-shaped calls (both the direct and the split-K path) capture and replay."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    gen = torch.Generator().manual_seed(0)
    shapes = [(1024, 4096), (32768, 1024)]
    ws = [_weights(1, n, k, gen) for n, k in shapes]
    xs = [torch.randn(2, k, generator=gen).to(torch.bfloat16).cuda() for _, k in shapes]
    ws = [(w.cuda(), s.cuda()) for w, s in ws]
    outs = [fp8_linear(x, w, s) for x, (w, s) in zip(xs, ws)]  # compile + warm up
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [fp8_linear(x, w, s) for x, (w, s) in zip(xs, ws)]
    for x in xs:
        x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    for x, (w, s), o in zip(xs, ws, outs):
        assert rel_err(o, _y64(x.cpu(), _w64(w.cpu(), s.cpu()), 1)) < 1e-2

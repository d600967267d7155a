"""GPU tests: Triton FP8 block-scaled linear (weight-only and activation-quantized) and the 1x128
activation quantizer, against float64 oracles written here from the format definitions.

Oracles (``quant_testutil``): the weight is ``e4m3 value x scale`` per 128x128 block in float64;
the activation quantizer's scale is ``2 ** ceil(log2(max(amax, 1e-4) / 448))`` per 1x128 group and
its values ``x / scale`` rounded to the nearest e4m3 (ties to the even code) by a float64 search of
the e4m3 values. Marked ``gpu``; they also run on the CPU under ``TRITON_INTERPRET=1`` (small
shapes, fp32).

Tolerances (relative L2 error): bf16 outputs carry one bf16 rounding (at most 2**-9 per element,
about 1.1e-3 in L2) on top of an fp32 accumulation, so 2.5e-3; fp32 activations multiply on the
tensor cores in tf32 (inputs truncated to 10 mantissa bits: a bias of about 5e-4), so 2e-3.
"""

from __future__ import annotations

import math

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS, dtypes, rel_err
from quant_testutil import act_quant64, e4m3_grid64, e4m3_rounding_cases, random_fp8_weight
from quant_testutil import fp8_weight64 as _w64
from quant_testutil import linear64 as _y64

pytestmark = KERNEL_MARKS


def _weights(G: int, N: int, K: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return random_fp8_weight(G * N, K, gen)


# T, G, N (per group), K
CASES_INTERP = [(1, 1, 200, 300), (5, 2, 32, 256), (33, 1, 128, 384), (70, 1, 160, 256)]
CASES_GPU = [
    (1, 1, 1024, 4096),  # q_a at decode (split-K)
    (4, 8, 1024, 4096),  # grouped o_a
    (16, 1, 32768, 1024),  # q_b
    (64, 1, 512, 4096),  # kv
    (300, 1, 4096, 8192),  # o_b, prefill chunk (fp32: once over the shared-memory limit)
    (2048, 1, 2048, 4096),  # shared expert, prefill
    (7, 2, 96, 200),  # ragged: N and K not multiples of 128
]


def _tol(dtype: torch.dtype) -> float:
    return 2.5e-3 if dtype == torch.bfloat16 else 2e-3


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
        want = exact
    else:  # the oracle quantizes the activations the same way, independently
        want = _y64(act_quant64(x.reshape(-1, K).float()).reshape(x.shape), w64, G)
        assert rel_err(out, exact) < 0.08  # and fp8 activations stay close to the exact product
    assert rel_err(out, want) < _tol(dtype)


@pytest.mark.parametrize("split", [2, 3])
def test_w8a16_split_k(split: int) -> None:
    """Split-K (fp32 partials, the last program of a tile sums them) gives the product of one
    program per tile, for several tiles and groups, and twice in a row (the arrival counters are
    back at 0 after each launch)."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    gen = torch.Generator().manual_seed(split)
    w, s = _weights(2, 96, 640, gen)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": split, "num_warps": 4, "num_stages": 2}
    for T in (3, 17):
        x = torch.randn(T, 2, 640, generator=gen).to(dtypes()[0])
        want = _y64(x, _w64(w, s), 2)
        for _ in range(2):
            out = fp8_linear(x.to(DEVICE), w.to(DEVICE), s.to(DEVICE), "w8a16", config=cfg)
            assert rel_err(out, want) < _tol(x.dtype)


def _mismatches(got: torch.Tensor, want: torch.Tensor, x: torch.Tensor) -> str:
    bad = torch.nonzero(got != want)
    rows = [
        f"[{i},{j}] x={x[i, j].item()!r} got={got[i, j].item()!r} want={want[i, j].item()!r}"
        for i, j in bad[:8].tolist()
    ]
    return f"{len(bad)} of {got.numel()} differ: " + "; ".join(rows)


@pytest.mark.parametrize("M,K", [(3, 300), (37, 256), (1, 128), (4, 384)])
def test_act_quant_vs_float64(M: int, K: int) -> None:
    """Bit-exact against the float64 oracle; ``(4, 384)`` is every e4m3 tie and near-tie (normal and
    subnormal, both signs) at four scales, the rest random with an all-zero group and an outlier."""
    from sgl_kernel_v4.triton.fp8_gemm import act_quant

    gen = torch.Generator().manual_seed(M + K)
    if (M, K) == (4, 384):
        x = e4m3_rounding_cases()
    else:
        x = torch.randn(M, K, generator=gen) * 3
        x[0, :128] = 0.0  # an all-zero group: amax clamped to 1e-4
        x[-1, -1] = 1000.0
        x[M // 2, 1] = 3e-7  # e4m3-subnormal after scaling
    q, s = act_quant(x.to(DEVICE))
    assert q.dtype == torch.float8_e4m3fn and s.shape == (M, math.ceil(K / 128))
    got = q.double().cpu() * s.double().cpu().repeat_interleave(128, dim=1)[:, :K]
    want = act_quant64(x)
    assert torch.equal(got, want), _mismatches(got, want, x)
    # ue8m0 scales: exact powers of two, checked on the mantissa (frexp gives 0.5 for 2^k) rather than
    # with log2, whose CUDA float64 result is not exact for every power of two
    mantissa, _ = torch.frexp(s.double().cpu())
    assert bool((mantissa == 0.5).all()), s[mantissa != 0.5][:6]


@pytest.mark.skipif(INTERP, reason="the PTX decode runs on the GPU only")
def test_e4m3_register_decode_every_code() -> None:
    """The packed PTX e4m3 -> bf16 decode of the weight-only kernel, on every finite code (through a
    1-row product with a one-hot activation per column)."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8)
    w = codes.view(torch.float8_e4m3fn).repeat(128, 1)[:, : codes.numel() // 2 * 2]  # [128, 254]
    K = w.shape[1]
    w = torch.nn.functional.pad(w.view(torch.uint8), (0, 256 - K)).view(torch.float8_e4m3fn)
    s = torch.ones(1, 2)
    x = torch.eye(256)[:K].to(torch.bfloat16).cuda()  # row j picks input j: out[j, n] = w[n, j]
    grid = e4m3_grid64()
    want = torch.where(codes[:K] >= 128, -1.0, 1.0).double() * grid[(codes[:K] & 0x7F).long()]
    w, s = w.cuda(), s.cuda()
    outs = {"prefill tiles": fp8_linear(x, w, s, "w8a16")}  # all K rows at once: 128-row tiles
    outs["decode tiles"] = torch.cat([fp8_linear(x[j : j + 16], w, s, "w8a16") for j in range(0, K, 16)])
    for name, out in outs.items():
        got = out.double().cpu()[:, 0]
        assert torch.equal(got, want), name + ": " + _mismatches(got[:, None], want[:, None], codes[:K, None])


@pytest.mark.skipif(INTERP, reason="CUDA graphs")
@pytest.mark.parametrize("variant", [None, "w8a8_fused"])
def test_fp8_linear_cuda_graph_capture(variant: str | None) -> None:
    """Decode-shaped calls (both the direct and the split-K path) capture and replay."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    gen = torch.Generator().manual_seed(0)
    shapes = [(1024, 4096), (32768, 1024)]
    ws = [_weights(1, n, k, gen) for n, k in shapes]
    xs = [torch.randn(2, k, generator=gen).to(torch.bfloat16).cuda() for _, k in shapes]
    ws = [(w.cuda(), s.cuda()) for w, s in ws]
    outs = [fp8_linear(x, w, s, variant) for x, (w, s) in zip(xs, ws)]  # compile + warm up
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [fp8_linear(x, w, s, variant) for x, (w, s) in zip(xs, ws)]
    for x in xs:
        x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    for x, (w, s), o in zip(xs, ws, outs):
        want = _fused_oracles(x, w, s, 1)[0] if variant else _y64(x.cpu(), _w64(w.cpu(), s.cpu()), 1)
        assert rel_err(o, want) < 1e-2


def _rule_outputs() -> set[tuple[int, ...]]:
    """Every decode config ``_w8a16_config`` returns over the V4 shapes (Flash and Pro, with the
    tensor-parallel splits of N), ragged shapes, token counts 1..64, SM counts 8..132, both dtypes."""
    from sgl_kernel_v4.triton.fp8_gemm import _w8a16_config

    shapes = [(1, 1536, 4096), (1, 32768, 1024), (8, 1024, 4096), (1, 4096, 8192), (1, 4096, 4096),
              (1, 4096, 2048), (1, 8192, 1024), (16, 1024, 4096), (1, 7168, 16384), (2, 96, 640), (1, 200, 300)]  # fmt: skip
    out = set()
    for G, N, K in shapes:
        for n in (N, max(64, N // 8)):
            for M in (1, 2, 16, 17, 33, 64):
                for sms in (8, 78, 132):
                    for eb in (2, 4):
                        c = _w8a16_config(M, n, G, K, sms, eb)
                        out.add(tuple(c[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps",
                                                     "num_stages")))  # fmt: skip
    return out


def test_w8a16_rule_stays_in_its_domain() -> None:
    """The decode rule returns only tiles that the oracle test below covers: BLOCK_M 16/32/64,
    BLOCK_N 64 on 4 warps, BLOCK_K 128/256, SPLIT_K 1-16, 2-6 stages inside the shared-memory budget."""
    from sgl_kernel_v4.triton.fp8_gemm import SMEM_BUDGET

    seen = _rule_outputs()
    for bm, bn, bk, split, warps, stages in seen:
        assert bm in (16, 32, 64) and bn == 64 and warps == 4 and bk in (128, 256), seen
        assert 1 <= split <= 16 and 2 <= stages <= 6, seen
        assert (bm * bk * 4 + bn * bk) * stages <= SMEM_BUDGET or (
            bm * bk * 2 + bn * bk
        ) * stages <= SMEM_BUDGET
    assert any(s > 1 for *_, s, _, _ in seen)  # the split-K path is among them


def _check_w8a16_tiles(bm: int, bk: int, split: int) -> None:
    """``fp8_linear`` with these tiles at a tiny ragged shape (G = 2 groups of N = 96, ``split`` K
    steps so every split is non-empty, the last step partly - for ``bk = 256`` one whole scale
    block - past K) against the float64 oracle."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    K = split * bk - (160 if bk == 256 else 32)
    gen = torch.Generator().manual_seed(bk + split + bm)
    w, s = _weights(2, 96, K, gen)
    T = 3 if bm == 16 else bm - 5
    x = torch.randn(T, 2, K, generator=gen).to(dtypes()[0])
    cfg = {"BLOCK_M": bm, "BLOCK_N": 64, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4, "num_stages": 3}
    out = fp8_linear(x.to(DEVICE), w.to(DEVICE), s.to(DEVICE), "w8a16", config=cfg)
    assert rel_err(out, _y64(x, _w64(w, s), 2)) < _tol(x.dtype), cfg


def test_w8a16_every_rule_config_vs_float64() -> None:
    """Every (BLOCK_M, BLOCK_K, SPLIT_K) the decode rule returns (:func:`_rule_outputs`; warps and
    stages do not change the interpreter's result) matches the oracle."""
    for bm, bk, split in sorted({(c[0], c[2], c[3]) for c in _rule_outputs()}):
        _check_w8a16_tiles(bm, bk, split)


@pytest.mark.parametrize("split", [1, 3])
def test_w8a16_two_scale_blocks_per_step(split: int) -> None:
    """256-deep K steps (two weight-scale blocks each, the second past K in the last step)."""
    _check_w8a16_tiles(16, 256, split)


@pytest.mark.parametrize(
    "bad",
    [{"BLOCK_M": None}, {"BLOCK_K": 192}, {"BLOCK_N": 8}, {"SPLIT_K": 0}, {"num_warps": 3}, {"extra": 1}],
)
def test_w8a16_config_override_checked(bad: dict) -> None:
    """A tile override with a missing / unknown key or an invalid value is a ValueError naming it
    (``None`` in ``bad``: the key is left out)."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    cfg = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4, "num_stages": 2}
    cfg = {k: v for k, v in {**cfg, **bad}.items() if v is not None}
    w, s = _weights(1, 64, 128, torch.Generator().manual_seed(0))
    x = torch.randn(1, 128).to(dtypes()[0])
    with pytest.raises(ValueError, match="config"):
        fp8_linear(x.to(DEVICE), w.to(DEVICE), s.to(DEVICE), "w8a16", config=cfg)


# ---- w8a8_fused: the decode kernel quantizing its activation tiles in registers ----------------

#: T, G, N (per group), K, config override (None: the decode rule). Split-K (3 splits, 2 with
#: 256-deep steps whose last sub-step lies past K), G > 1, ragged N and K, T = 1 and 17.
FUSED_INTERP = [
    (1, 1, 200, 300, None),
    (17, 2, 96, 384, {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 3, "num_warps": 4,
                      "num_stages": 2}),
    (5, 1, 64, 640, {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 2, "num_warps": 4,
                     "num_stages": 2}),
]  # fmt: skip
#: the V4-Flash decode shapes of benchmark/fp8_linear_sweep.py (G, N, K) at 1, 17 and 64 tokens
FUSED_GPU = [
    (T, G, N, K, None)
    for G, N, K in ((1, 1536, 4096), (1, 32768, 1024), (8, 1024, 4096), (1, 4096, 8192), (1, 4096, 2048),
                    (1, 8192, 1024), (2, 96, 200))
    for T in (1, 17, 64)
]  # fmt: skip


def _fused_oracles(
    x: torch.Tensor, w: torch.Tensor, s: torch.Tensor, G: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 ``(quantized, exact)`` products on ``x``'s device: ``x`` quantized by the reference
    ``act_quant`` (pow2, per token and group, 1x128 along K) and dequantized, or ``x`` as is, times
    the dequantized weight."""
    from sgl_kernel_v4.ref.fp8_gemm import act_quant

    T, K = x.shape[0], x.shape[-1]
    q, sx = act_quant(x.reshape(T * G, K).float(), pow2=True)
    xq = q.double() * sx.double().repeat_interleave(128, dim=1)[:, :K]
    i, j = torch.arange(w.shape[0], device=w.device) // 128, torch.arange(K, device=w.device) // 128
    w64 = (w.double() * s.double()[i[:, None], j[None, :]]).view(G, -1, K)
    return tuple(torch.einsum("tgk,gnk->tgn", a.view(T, G, K), w64).reshape(T, -1) for a in (xq, x.double()))


def _fused_x(T: int, G: int, K: int, gen: torch.Generator) -> torch.Tensor:
    """Random activations with an outlier, an all-zero group (amax clamped) and, where they fit,
    rows of every e4m3 tie and near-tie (:func:`e4m3_rounding_cases`)."""
    x = torch.randn(T, G, K, generator=gen) * 2
    x[0, :, 5] = 40.0
    x[T - 1, 0, :128] = 0.0
    if K >= 384 and T >= 5:
        x[1:5, -1, :384] = e4m3_rounding_cases()
    return x if G > 1 else x[:, 0]


@pytest.mark.parametrize("T,G,N,K,cfg", FUSED_INTERP if INTERP else FUSED_GPU)
@pytest.mark.parametrize("dtype", dtypes())
def test_w8a8_fused_vs_float64(T: int, G: int, N: int, K: int, cfg: dict | None, dtype: torch.dtype) -> None:
    """``w8a8_fused`` equals the float64 product of the reference-quantized activations and the
    dequantized weights. The quantized values are the same, only the summation differs: fp32
    accumulation on the CPU (1e-5); on the GPU the fp8 MMA's reduced-precision accumulation
    within each 128-deep step plus, for bf16 outputs, one bf16 rounding (2**-9 per element)."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    gen = torch.Generator().manual_seed(T * 11 + G * N + K)
    w, s = _weights(G, N, K, gen)
    x = _fused_x(T, G, K, gen).to(dtype)
    xd, wd, sd = x.to(DEVICE), w.to(DEVICE), s.to(DEVICE)
    out = fp8_linear(xd, wd, sd, "w8a8_fused", config=cfg)
    assert out.shape == (T, G * N) and out.dtype == dtype
    want, exact = _fused_oracles(xd, wd, sd, G)
    tol = 1e-5 if INTERP else (3e-3 if dtype == torch.bfloat16 else 1e-3)
    assert rel_err(out, want) < tol
    # the weight-only product differs by the activation rounding: far more than the tolerance
    assert rel_err(exact, want) > 3 * tol


def test_w8a8_fused_config_needs_whole_groups() -> None:
    """A K step shallower than one 128-wide activation group is refused (``config`` named)."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    cfg = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 4, "num_stages": 2}
    w, s = _weights(1, 64, 128, torch.Generator().manual_seed(0))
    x = torch.randn(1, 128).to(dtypes()[0])
    with pytest.raises(ValueError, match="config: w8a8_fused"):
        fp8_linear(x.to(DEVICE), w.to(DEVICE), s.to(DEVICE), "w8a8_fused", config=cfg)


# ---- w8a16_f16: fp16 product (weights converted exactly, activations scaled per token) ------------


@pytest.mark.parametrize("T,G,N,K,cfg", FUSED_INTERP if INTERP else FUSED_GPU)
@pytest.mark.parametrize("variant", ["w8a16_f16", "w8a16_f16asm"])
@pytest.mark.parametrize("dtype", dtypes())
def test_w8a16_f16_vs_float64(
    T: int, G: int, N: int, K: int, cfg: dict | None, variant: str, dtype: torch.dtype
) -> None:
    """The fp16-product decode variants equal the float64 product of the activations as given and
    the dequantized weights, also with activations past fp16's range (1e5, 3e6: the per-token
    power-of-two scale keeps them finite) and an all-zero group. bf16 activations convert exactly
    (fp16 has more mantissa bits); fp32 ones round to 11 bits; on the GPU the MMA accumulates in
    fp32 and bf16 outputs round once (2**-9 per element)."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    gen = torch.Generator().manual_seed(T * 13 + G * N + K)
    w, s = _weights(G, N, K, gen)
    x = _fused_x(T, G, K, gen)
    x.view(T, G, K)[0, 0, 7] = 1.0e5
    x.view(T, G, K)[T - 1, G - 1, K - 3] = -3.0e6
    xd, wd, sd = x.to(dtype).to(DEVICE), w.to(DEVICE), s.to(DEVICE)
    out = fp8_linear(xd, wd, sd, variant, config=cfg)
    assert out.shape == (T, G * N) and out.dtype == dtype
    assert torch.isfinite(out).all()
    _, exact = _fused_oracles(xd, wd, sd, G)
    tol = 2e-3 if dtype == torch.float32 else 3e-3
    assert rel_err(out, exact) < tol


@pytest.fixture
def _fresh_override(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202 - a fixture's generator
    from sgl_kernel_v4.triton import fp8_gemm

    fp8_gemm.decode_variant_override.cache_clear()
    yield monkeypatch
    monkeypatch.delenv(fp8_gemm.DECODE_VARIANT_ENV, raising=False)
    fp8_gemm.decode_variant_override.cache_clear()


def test_decode_variant_env_override(_fresh_override: pytest.MonkeyPatch) -> None:
    """``SGLANG_V4_FP8_DECODE_VARIANT`` picks the decode kernel of ``variant=None`` calls (read
    once: a later change is not seen); an unknown value is a ValueError naming the variable."""
    from sgl_kernel_v4.triton import fp8_gemm

    gen = torch.Generator().manual_seed(3)
    w, s = _weights(1, 64, 256, gen)
    x = torch.randn(2, 256, generator=gen).to(dtypes()[0])
    x, w, s = x.to(DEVICE), w.to(DEVICE), s.to(DEVICE)
    fused = fp8_gemm.fp8_linear(x, w, s, "w8a8_fused")
    plain = fp8_gemm.fp8_linear(x, w, s, "w8a16")
    assert not torch.equal(fused, plain)
    assert fp8_gemm.choose_variant(2) == "w8a16_words"
    words = fp8_gemm.fp8_linear(x, w, s, "w8a16_words")
    assert torch.equal(fp8_gemm.fp8_linear(x, w, s), words)  # unset: choose_variant's
    fp8_gemm.decode_variant_override.cache_clear()
    _fresh_override.setenv(fp8_gemm.DECODE_VARIANT_ENV, "w8a8_fused")
    assert torch.equal(fp8_gemm.fp8_linear(x, w, s), fused)
    _fresh_override.setenv(fp8_gemm.DECODE_VARIANT_ENV, "w8a16")  # read once: still fused
    assert torch.equal(fp8_gemm.fp8_linear(x, w, s), fused)
    fp8_gemm.decode_variant_override.cache_clear()
    assert torch.equal(fp8_gemm.fp8_linear(x, w, s), plain)  # w8a16: the word decode's baseline
    fp8_gemm.decode_variant_override.cache_clear()
    _fresh_override.setenv(fp8_gemm.DECODE_VARIANT_ENV, "w8a8")
    with pytest.raises(ValueError, match=fp8_gemm.DECODE_VARIANT_ENV):
        fp8_gemm.fp8_linear(x, w, s)


# ---- w8a16_words: e4m3 read as 32-bit words, decoded by shifts and masks in a permuted K order ----

#: T, G, N (per group), K (a multiple of the K step), config override (None: the decode rule):
#: ragged N, G > 1, 256-deep steps, split K, T = 1 / 5 / 17.
WORDS_INTERP = [
    (1, 1, 200, 256, None),
    (5, 2, 96, 384, {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 3, "num_warps": 4,
                     "num_stages": 2}),
    (17, 1, 64, 512, {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 2, "num_warps": 4,
                      "num_stages": 2}),
]  # fmt: skip
WORDS_GPU = [(T, G, N, K, None) for _, G, N, K, _ in FUSED_GPU[::3] if K % 256 == 0 for T in (1, 16, 64)]


@pytest.mark.parametrize("T,G,N,K,cfg", WORDS_INTERP if INTERP else WORDS_GPU)
@pytest.mark.parametrize("variant", ["w8a16_words", "w8a16_words_fold"])
@pytest.mark.parametrize("dtype", dtypes())
def test_w8a16_words_vs_float64(
    T: int, G: int, N: int, K: int, cfg: dict | None, variant: str, dtype: torch.dtype
) -> None:
    """The word-decode variants equal the float64 product of the activations and the dequantized
    weights (the same operands as ``w8a16``; only the summation order inside a 128-deep step
    differs), with an outlier and small activations (1e-6: products of the ``2**-120`` weights
    far below fp32's normal range in the ``_fold`` form)."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    gen = torch.Generator().manual_seed(T * 17 + G * N + K)
    w, s = _weights(G, N, K, gen)
    x = torch.randn(T, G, K, generator=gen)
    x[0, :, 5] = 40.0
    x[T - 1, :, : K // 2] *= 1e-6
    x = (x if G > 1 else x[:, 0]).to(dtype)
    out = fp8_linear(x.to(DEVICE), w.to(DEVICE), s.to(DEVICE), variant, config=cfg)
    assert out.shape == (T, G * N) and out.dtype == dtype
    want = _y64(x, _w64(w, s), G)
    assert rel_err(out, want) < (1e-6 if INTERP else _tol(dtype))
    small = want[T - 1].abs() > 0
    assert rel_err(out[T - 1][small.to(out.device)], want[T - 1][small]) < (1e-6 if INTERP else _tol(dtype))


def test_w8a16_words_falls_back_off_the_k_step() -> None:
    """``K`` not a multiple of the K step: the words variants run the default decode (same output)."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    gen = torch.Generator().manual_seed(5)
    w, s = _weights(1, 96, 200, gen)
    x = torch.randn(3, 200, generator=gen).to(dtypes()[0])
    x, w, s = x.to(DEVICE), w.to(DEVICE), s.to(DEVICE)
    base = fp8_linear(x, w, s, "w8a16")
    for v in ("w8a16_words", "w8a16_words_fold"):
        assert torch.equal(fp8_linear(x, w, s, v), base)


def test_words_k_perm_is_a_permutation_of_each_thread_word() -> None:
    """The host permutation maps the 128 logical K indices onto the 128 bytes of the block, and
    the four values of a thread in one 16-deep MMA step (``2c, 2c+1, 2c+8, 2c+9``) onto one
    aligned 4-byte word; anything but 128 is refused."""
    from sgl_kernel_v4.triton.fp8_words import words_k_perm

    perm = words_k_perm()
    assert sorted(perm) == list(range(128))
    for t in range(8):
        for c in range(4):
            ks = [16 * t + 2 * c + d for d in (0, 1, 8, 9)]
            words = {perm[k] // 4 for k in ks}
            assert len(words) == 1 and sorted(perm[k] % 4 for k in ks) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="block_k"):
        words_k_perm(64)


def _decode_all_codes(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes [2, 128] uint8: all 256 e4m3 codes; decoded [2, 128] float64 in memory order): the
    words decode run alone (``fp8_words.decode_words``), its logical K order mapped back."""
    from sgl_kernel_v4.triton.fp8_words import decode_words, words_k_perm

    codes = torch.arange(256, dtype=torch.uint8).view(2, 128)
    out = decode_words(codes.to(DEVICE), dtype)
    got = torch.empty(2, 128, dtype=torch.float64)
    got[:, torch.tensor(words_k_perm())] = out.double().cpu()
    return codes, got


@pytest.mark.parametrize("dtype", [torch.float32] if INTERP else [torch.float32, torch.bfloat16])
def test_e4m3_words_decode_every_code(dtype: torch.dtype) -> None:
    """The word decode gives ``e4m3 * 2**-120`` bit for bit for all 254 non-NaN codes (subnormals,
    +0 and -0 with their signs, +-448; oracle: the bit-field grid), and the NaN codes 0x7F / 0xFF
    as +-480 * 2**-120 (not NaN: the pattern's finite reading)."""
    codes, got = _decode_all_codes(dtype)
    c = codes.flatten().long()
    grid = e4m3_grid64()
    mag = torch.where(c & 0x7F == 0x7F, 480.0, grid[(c & 0x7F).clamp_max(126)].double())
    want = torch.where(c >= 128, -mag, mag) * 2.0**-120
    got = got.flatten()
    assert torch.equal(got, want)
    assert torch.equal(torch.signbit(got), c >= 128)  # -0 keeps its sign
    assert got[0x7E] == 448 * 2.0**-120 and got[0xFE] == -448 * 2.0**-120 and got[0x01] == 2.0**-129


@pytest.mark.parametrize("variant", ["w8a16_words", "w8a16_words_fold"])
def test_w8a16_words_every_code_through_the_mma(variant: str) -> None:
    """Every finite e4m3 code through the word-decode kernels (a one-hot activation per column,
    scale 1): the output is the code's value exactly, the bf16-subnormal inputs (``e4m3 * 2**-120``
    for e4m3 subnormals) and, in ``_fold``, the MMA products below fp32's normal range included
    (on the GPU: what the tensor cores do with them)."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F] + [0, 0], dtype=torch.uint8)  # 256
    w = codes.view(torch.float8_e4m3fn).repeat(64, 1)  # [64, 256]
    s = torch.ones(1, 2)
    x = torch.eye(256).to(dtypes()[0])  # row j picks input j: out[j, n] = w[n, j]
    grid = e4m3_grid64()
    want = torch.where(codes >= 128, -1.0, 1.0).double() * grid[(codes & 0x7F).long().clamp_max(126)]
    got = torch.cat(
        [fp8_linear(x[j : j + 16].to(DEVICE), w.to(DEVICE), s.to(DEVICE), variant) for j in range(0, 256, 16)]
    )
    got = got.double().cpu()[:, 0]
    assert torch.equal(got, want), _mismatches(got[:, None], want[:, None], codes[:, None])

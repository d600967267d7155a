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

if DEVICE is not None:
    import triton
    import triton.language as tl
    from sgl_kernel_v4.triton.fp4_tile import fp4_tile, fp4_words_tile

    @triton.jit
    def _decode_probe(
        w_ptr, s_ptr, lo_ptr, hi_ptr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_ASM: tl.constexpr
    ):
        """Rows of ``BLOCK_K / 2`` packed bytes -> their decoded lo / hi halves (bf16)."""
        rows = tl.arange(0, BLOCK_N)
        k0 = tl.program_id(0) * BLOCK_K  # a tensor (0 on the one-program grid): fp4_tile hints its alignment
        lo, hi = fp4_tile(w_ptr + rows * (BLOCK_K // 2), s_ptr + rows * (BLOCK_K // 32), rows < BLOCK_N, k0,
                          BLOCK_K, BLOCK_N, BLOCK_K, True, USE_ASM, tl.bfloat16)  # fmt: skip
        offs = rows[:, None] * (BLOCK_K // 2) + tl.arange(0, BLOCK_K // 2)[None, :]
        tl.store(lo_ptr + offs, lo)
        tl.store(hi_ptr + offs, hi)

    @triton.jit
    def _words_probe(
        w_ptr, s_ptr, out_ptr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MUL_ASM: tl.constexpr
    ):
        """Rows of ``BLOCK_K / 2`` packed bytes -> the word decode's tile (logical K order)."""
        rows = tl.arange(0, BLOCK_N)
        w = fp4_words_tile(w_ptr + rows * (BLOCK_K // 2), s_ptr + rows * (BLOCK_K // 32), rows < BLOCK_N, 0,
                           BLOCK_N, BLOCK_K, MUL_ASM, out_ptr.dtype.element_ty)  # fmt: skip
        tl.store(out_ptr + rows[:, None] * BLOCK_K + tl.arange(0, BLOCK_K)[None, :], w)


# T, D, I, E, k; the comment names the layout (moe_fp4._config) the case takes
CASES_INTERP = [
    (1, 128, 64, 8, 2),  # pair mode
    (3, 64, 96, 24, 2),  # pair mode, several tokens
    (5, 64, 96, 4, 2),  # expert mode, 16-row blocks
    (24, 128, 64, 8, 6),  # expert mode, 32-row blocks
]
CASES_GPU = [
    (1, 4096, 2048, 32, 6),  # flash expert shapes, decode bs 1: pair mode
    (6, 1024, 512, 160, 6),  # flash-43l's 160 experts, bs 6: pair mode
    (16, 2048, 1024, 16, 6),  # expert mode, 16-row blocks
    (100, 1024, 512, 16, 6),  # 32-row blocks
    (200, 1024, 512, 16, 6),  # 64-row blocks
    (700, 256, 128, 16, 6),  # 4200 pairs: 128-row blocks, the torch align path
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


@pytest.mark.parametrize(
    "T,D,I,E,k", CASES_INTERP[:1] + CASES_INTERP[2:3] if INTERP else CASES_GPU[:1] + CASES_GPU[2:3]
)
def test_no_clamp_limit_vs_float64(T: int, D: int, I: int, E: int, k: int) -> None:  # noqa: E741
    """``limit = inf`` (a config ``swiglu_limit`` of 0 or below: no clamp, as DeepSeek's reference
    ``Expert.forward``) in pair and expert mode: the float64 oracle with no clamp, and pre-activations
    past the positive limits the other tests use, so a clamp left in would show."""
    import math

    from sgl_kernel_v4.triton.moe_fp4 import fused_moe_fp4

    gen = torch.Generator().manual_seed(11 + T)
    w13, s13, w2, s2 = _experts(E, D, I, gen)
    x = (torch.randn(T, D, generator=gen) * 4).to(dtypes()[0])
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    wts = torch.rand(T, k, generator=gen)
    stats: dict = {}
    ref = _moe64(x, w13, s13, w2, s2, ids, wts, math.inf, stats)
    assert stats["max_pre"] > 10.0  # a clamp at any limit the other tests use would change the output
    dev = [t.to(DEVICE) for t in (x, w13, s13, w2, s2, ids, wts)]
    out = fused_moe_fp4(*dev, math.inf)
    assert not torch.isnan(out).any() and not torch.isinf(out).any()
    assert rel_err(out, ref) < (1.5e-2 if x.dtype == torch.bfloat16 else 2e-3)


@pytest.mark.parametrize("pair", [0, 1])
def test_both_layouts_any_batch(pair: int) -> None:
    """Pair mode and expert mode forced on the same batch (dropped ids, a repeated expert) give the
    float64 result: the layout choice is a speed decision only."""
    from sgl_kernel_v4.triton.moe_fp4 import _config, fused_moe_fp4

    gen = torch.Generator().manual_seed(11 + pair)
    T, D, I, E, k = 4, 128, 64, 6, 3  # noqa: E741
    w13, s13, w2, s2 = _experts(E, D, I, gen)
    x = torch.randn(T, D, generator=gen).to(dtypes()[0])
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    ids[0, 1], ids[3, 2] = -1, E
    wts = torch.rand(T, k, generator=gen)
    ref = _moe64(x, w13, s13, w2, s2, ids, wts, 4.0)
    cfg = dict(_config(T * k, E, k, x.element_size()), PAIR=pair)
    out = fused_moe_fp4(*[t.to(DEVICE) for t in (x, w13, s13, w2, s2, ids, wts)], 4.0, config=cfg)
    assert rel_err(out, ref) < (1.5e-2 if x.dtype == torch.bfloat16 else 2e-3)


@pytest.mark.parametrize("use_asm", [False, True])
def test_fp4_tile_decode_every_byte(use_asm: bool) -> None:
    """``fp4_tile`` (the PTX decode on the GPU, the portable one too) on every byte value in every
    position, with scale bytes from 2 to 128 (the smallest values are bf16-subnormal before the scale
    multiply), is the e2m1 value times the scale exactly."""
    if use_asm and INTERP:
        pytest.skip("the PTX decode runs on the GPU only")
    n, kk = 256, 64
    w = (torch.arange(n)[:, None] * 7 + torch.arange(kk // 2)[None, :] * 13).remainder(256).to(torch.uint8)
    s = (torch.arange(n)[:, None] * 5 + torch.arange(kk // 32)[None, :] * 3).remainder(127) + 2
    s = s.to(torch.uint8)
    want = fp4_weight64(w, s)
    lo = torch.empty(n, kk // 2, dtype=torch.bfloat16, device=DEVICE)
    hi = torch.empty_like(lo)
    _decode_probe[(1,)](w.to(DEVICE), s.to(DEVICE), lo, hi, BLOCK_N=n, BLOCK_K=kk, USE_ASM=use_asm)
    got = torch.stack([lo.double().cpu(), hi.double().cpu()], dim=-1).flatten(1)
    bad = torch.nonzero(got != want)
    assert not len(bad), f"{len(bad)} differ, e.g. " + ", ".join(
        f"byte {int(w[i, j // 2])} scale {int(s[i, j // 32])}: {got[i, j].item()} vs {want[i, j].item()}"
        for i, j in bad[:6].tolist()
    )


@pytest.mark.parametrize("block_k", [128, 256])
@pytest.mark.parametrize("dtype", [torch.float32] if INTERP else [torch.float32, torch.bfloat16])
def test_fp4_words_tile_decode_every_byte(block_k: int, dtype: torch.dtype) -> None:
    """The word decode (``FP4_WORDS``; bf16: its PTX scale multiply, fp32: the interpreter's twin)
    on every byte value in every position, scale bytes 2 to 128, is the e2m1 value times the scale
    exactly, at the place ``fp4_words_k_perm`` names."""
    from sgl_kernel_v4.triton.fp4_tile import fp4_words_k_perm

    n = 256
    w = (
        (torch.arange(n)[:, None] * 7 + torch.arange(block_k // 2)[None, :] * 13)
        .remainder(256)
        .to(torch.uint8)
    )
    s = (torch.arange(n)[:, None] * 5 + torch.arange(block_k // 32)[None, :] * 3).remainder(127) + 2
    s = s.to(torch.uint8)
    want = fp4_weight64(w, s)
    out = torch.empty(n, block_k, dtype=dtype, device=DEVICE)
    _words_probe[(1,)](
        w.to(DEVICE), s.to(DEVICE), out, BLOCK_N=n, BLOCK_K=block_k, MUL_ASM=dtype == torch.bfloat16
    )
    got = torch.empty(n, block_k, dtype=torch.float64)
    got[:, torch.tensor(fp4_words_k_perm(block_k))] = out.double().cpu()
    bad = torch.nonzero(got != want)
    assert not len(bad), f"{len(bad)} differ, e.g. " + ", ".join(
        f"byte {int(w[i, j // 2])} scale {int(s[i, j // 32])}: {got[i, j].item()} vs {want[i, j].item()}"
        for i, j in bad[:6].tolist()
    )


def test_fp4_words_k_perm() -> None:
    """The word decode's K order is a permutation of the step; the four values of a thread in one
    16-deep MMA step (``2c, 2c+1, 2c+8, 2c+9``) and those of the next step come from one 32-bit
    word (8 inputs), which lies inside one 32-input scale group; other depths are refused."""
    from sgl_kernel_v4.triton.fp4_tile import fp4_words_k_perm

    for bk in (128, 256, 512):
        perm = fp4_words_k_perm(bk)
        assert sorted(perm) == list(range(bk))
        for t2 in range(bk // 32):
            for c in range(4):
                ks = [16 * t + 2 * c + d for t in (2 * t2, 2 * t2 + 1) for d in (0, 1, 8, 9)]
                assert len({perm[k] // 8 for k in ks}) == 1 and len({perm[k] // 32 for k in ks}) == 1
    for bad in (64, 192):
        with pytest.raises(ValueError, match="block_k"):
            fp4_words_k_perm(bad)


@pytest.mark.parametrize("T,D,I,E,k", [(3, 256, 256, 8, 3), (2, 384, 160, 4, 2)] if INTERP else CASES_GPU[:3])
def test_fp4_words_vs_float64(T: int, D: int, I: int, E: int, k: int) -> None:  # noqa: E741
    """``FP4_WORDS`` (the default's tiles; 128-deep steps under the interpreter) gives the float64
    result, also where a K step is partial (I = 160: the down kernel keeps the byte decode) and in
    expert mode; with the fp8 product it is a ValueError."""
    from sgl_kernel_v4.triton.moe_fp4 import DECODE_VARIANTS, _config, fused_moe_fp4

    gen = torch.Generator().manual_seed(T + D + I)
    w13, s13, w2, s2 = _experts(E, D, I, gen)
    x = torch.randn(T, D, generator=gen).to(dtypes()[0])
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    wts = torch.rand(T, k, generator=gen)
    ref = _moe64(x, w13, s13, w2, s2, ids, wts, 3.0)
    dev = [t.to(DEVICE) for t in (x, w13, s13, w2, s2, ids, wts)]
    if INTERP:  # the second case in expert mode (sorted blocks, the per-expert down kernel)
        cfg = dict(DECODE_VARIANTS["fused_dsplit1_words"], BLOCK_K=128, num_stages=2, DOWN_STAGES=2)
        cfg.update(PAIR=1) if T == 3 else cfg.update(PAIR=0, DOWN_SPLIT=0)
    else:
        cfg = dict(_config(T * k, E, k, x.element_size()), FP4_WORDS=1, FP8_MMA=0)
    out = fused_moe_fp4(*dev, 3.0, config=cfg)
    assert rel_err(out, ref) < (1.5e-2 if x.dtype == torch.bfloat16 else 2e-3)
    with pytest.raises(ValueError, match="FP4_WORDS"):
        fused_moe_fp4(*dev, 3.0, config=dict(cfg, FP8_MMA=1))


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


def _variant_config(name: str) -> dict:
    """A named decode configuration, with K steps cut to 64 under the interpreter (tiny shapes)."""
    from sgl_kernel_v4.triton.moe_fp4 import DECODE_VARIANTS

    cfg = dict(DECODE_VARIANTS[name], PAIR=1)
    if INTERP:
        cfg.update(BLOCK_K=64, num_stages=2, DOWN_STAGES=2)
        if "DOWN_BLOCK_K" in cfg:
            cfg["DOWN_BLOCK_K"] = 64
    return cfg


def _decode_variant_names() -> list[str]:
    from sgl_kernel_v4.triton.moe_fp4 import DECODE_VARIANTS

    return list(DECODE_VARIANTS)


@pytest.mark.parametrize("name", _decode_variant_names())
def test_decode_variants_vs_float64(name: str) -> None:
    """Every named pair-mode configuration (fused gate/up tiles, the slot / K-split down kernel and
    its partial sum, other tiles) gives the float64 result on a batch with dropped ids (-1, >= E)
    and an expert shared by two tokens; I = 96 is not a multiple of the 64-deep interpreter K step
    (masked K tail; with 2 K splits the second holds only the tail)."""
    from sgl_kernel_v4.triton.moe_fp4 import fused_moe_fp4

    T, D, I, E, k = (3, 128, 96, 8, 3) if INTERP else (4, 1024, 512, 160, 6)  # noqa: E741
    gen = torch.Generator().manual_seed(29)
    w13, s13, w2, s2 = _experts(E, D, I, gen)
    x = torch.randn(T, D, generator=gen).to(dtypes()[0])
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    ids[1, 0], ids[2, 1] = -1, E + 3
    ids[2, 0] = ids[0, 0]
    wts = torch.rand(T, k, generator=gen)
    limit = 3.0
    stats: dict = {}
    ref = _moe64(x, w13, s13, w2, s2, ids, wts, limit, stats)
    dev = [t.to(DEVICE) for t in (x, w13, s13, w2, s2, ids, wts)]
    out = fused_moe_fp4(*dev, limit, config=_variant_config(name))
    assert out.dtype == x.dtype and out.shape == (T, D)
    assert rel_err(out, ref) < (1.5e-2 if x.dtype == torch.bfloat16 else 2e-3)
    assert stats["max_pre"] > limit  # the clamp was exercised


@pytest.mark.parametrize(
    "extra",
    [
        {"DOWN_SPLIT": 3, "GU_FUSED": 1},  # more K splits than K steps: the last split is empty
        {"PAIR": 0, "GU_FUSED": 1},  # fused gate/up tiles in expert mode (sorted blocks)
    ],
)
def test_split_and_fused_edge_cases(extra: dict) -> None:
    """An empty K split writes a zero partial (the buffer is not zero-filled); fused gate/up tiles
    also serve expert mode; both against float64."""
    from sgl_kernel_v4.triton.moe_fp4 import fused_moe_fp4

    gen = torch.Generator().manual_seed(31)
    T, D, I, E, k = 4, 64, 64, 6, 3  # noqa: E741
    w13, s13, w2, s2 = _experts(E, D, I, gen)
    x = torch.randn(T, D, generator=gen).to(dtypes()[0])
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    ids[3, 2] = -1
    wts = torch.rand(T, k, generator=gen)
    ref = _moe64(x, w13, s13, w2, s2, ids, wts, 4.0)
    cfg = dict(
        {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2, "PAIR": 1}, **extra
    )
    out = fused_moe_fp4(*[t.to(DEVICE) for t in (x, w13, s13, w2, s2, ids, wts)], 4.0, config=cfg)
    assert rel_err(out, ref) < (1.5e-2 if x.dtype == torch.bfloat16 else 2e-3)


@pytest.mark.parametrize(
    "bad",
    [
        {"DOWN_SPLT": 1},
        {"DOWN_SPLIT": -1},
        {"DOWN_SPLIT": 1, "PAIR": 0},
        {"DOWN_BLOCK_K": 48},
        {"BLOCK_N": 24},
    ],
)
def test_bad_config_raises(bad: dict) -> None:
    from sgl_kernel_v4.triton.moe_fp4 import fused_moe_fp4

    gen = torch.Generator().manual_seed(3)
    w13, s13, w2, s2 = _experts(4, 64, 64, gen)
    x = torch.randn(1, 64, generator=gen).to(dtypes()[0])
    ids, wts = torch.tensor([[0, 1]]), torch.rand(1, 2, generator=gen)
    with pytest.raises(ValueError, match="config"):
        fused_moe_fp4(*[t.to(DEVICE) for t in (x, w13, s13, w2, s2, ids, wts)], 4.0, config=bad)

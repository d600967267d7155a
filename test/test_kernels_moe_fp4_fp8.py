"""GPU tests: the fp8 product of the FP4 MoE (``FP8_MMA``: e2m1 weights decoded to e4m3, activations
quantized in the kernel) against a float64 oracle of the quantized computation.

Oracle (independent of the kernels): the experts dequantized by ``ref.moe_fp4.dequant_fp4``; x
quantized by ``ref.fp8_gemm.act_quant`` (power-of-two scales per 128 columns) and dequantized;
gate/up, the clamped SwiGLU and the routing sum in float64; the SwiGLU output ``h`` rounded to the
kernel's storage dtype (x's) and quantized by ``act_quant`` again before the down projection.
The inputs' 128-column groups differ in magnitude by up to 2**6 either way, so a group scale
taken from the wrong group or a dropped sign fails by far; so would skipping the activation
quantization (each test checks that its tolerance is under a third of that gap).
Marked ``gpu``; they also run under ``TRITON_INTERPRET=1`` (small shapes, fp32).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS, dtypes, rel_err
from quant_testutil import fp4_weight64
from quant_testutil import random_fp4_experts as _experts
from sgl_kernel_v4.ref.fp8_gemm import act_quant, dequant_act
from sgl_kernel_v4.ref.moe import swiglu_clamped
from sgl_kernel_v4.ref.moe_fp4 import dequant_fp4

pytestmark = KERNEL_MARKS


def _oracle(x, w13, s13, w2, s2, ids, wts, limit: float, quant: bool = True) -> torch.Tensor:
    """float64 ``[T, D]`` on x's device; ``quant=False``: the same without activation quantization."""
    T, D = x.shape
    E, k = w13.shape[0], ids.shape[1]

    def q(a: torch.Tensor) -> torch.Tensor:
        return dequant_act(*act_quant(a.float())).double() if quant else a.double()

    xq = q(x)
    out = torch.zeros(T, D, dtype=torch.float64, device=x.device)
    flat = ids.reshape(-1).long()
    for e in sorted({int(v) for v in flat.tolist() if 0 <= int(v) < E}):
        sel = torch.nonzero(flat == e).flatten()
        tok, slot = sel // k, sel % k
        gu = xq[tok] @ dequant_fp4(w13[e], s13[e]).double().T
        h = swiglu_clamped(gu, limit).to(x.dtype)  # the kernel stores h in x's dtype
        y = q(h) @ dequant_fp4(w2[e], s2[e]).double().T
        out.index_add_(0, tok, y * wts[tok, slot].double()[:, None])
    return out


def _inputs(T: int, D: int, I: int, E: int, k: int, seed: int, dtype: torch.dtype):  # noqa: E741
    """Experts, x with 128-column groups scaled by ``2**r`` (``r`` in -6..6 per token and group),
    distinct ids per token, some dropped (-1, >= E) and one expert shared by two tokens."""
    gen = torch.Generator().manual_seed(seed)
    w13, s13, w2, s2 = _experts(E, D, I, gen, up_octaves=3)
    r = torch.randint(-6, 7, (T, -(-D // 128)), generator=gen).double()
    x = (
        torch.randn(T, D, generator=gen, dtype=torch.float64)
        * torch.pow(2.0, r).repeat_interleave(128, 1)[:, :D]
    )
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    if T > 2:
        ids[1, 0], ids[2, 1] = -1, E + 3
        ids[2, 0] = ids[0, 0] if ids[0, 0] not in ids[2, 1:] else ids[2, 0]
    wts = torch.rand(T, k, generator=gen)
    return [t.to(DEVICE) for t in (x.to(dtype), w13, s13, w2, s2, ids, wts)]


def _tol(dtype: torch.dtype) -> float:
    return 1e-3 if dtype == torch.float32 else 1e-2


def _check(args: list, cfg: dict, limit: float = 4.0) -> None:
    from sgl_kernel_v4.triton.moe_fp4 import fused_moe_fp4

    out = fused_moe_fp4(*args, limit, config=cfg)
    x = args[0]
    ref = _oracle(*args, limit)
    gap = rel_err(_oracle(*args, limit, quant=False), ref)  # what skipping the quantization costs
    tol = _tol(x.dtype)
    assert tol < gap / 3, (tol, gap)
    assert out.dtype == x.dtype and out.shape == x.shape and not torch.isnan(out).any()
    err = rel_err(out, ref)
    assert err < tol, (err, gap)


# (T, D, I, E, k): D = 256 is two activation groups; I = 160 ends in a partial (32-column) group
SHAPE_INTERP = (3, 256, 160, 8, 2)
SHAPE_GPU = (8, 4096, 2048, 160, 6)  # V4-Flash experts


def _shape() -> tuple[int, ...]:
    return SHAPE_INTERP if INTERP else SHAPE_GPU


@pytest.mark.parametrize(
    "layout",
    [
        "fused_dsplit1",  # the decode default: fused gate/up tiles, one-way K split of the down kernel
        "baseline",  # separate gate / up tiles, the per-token down kernel
        {"PAIR": 0},  # expert mode: sorted blocks, atomics
    ],
    ids=["pair-fused-dsplit1", "pair-baseline", "expert"],
)
@pytest.mark.parametrize("decode", [0, 1, 2], ids=["shift", "table", "fold"])
def test_fp8_product_vs_float64(layout: str | dict, decode: int) -> None:
    """Pair mode (both down kernels) and expert mode, every weight decode, on a batch with dropped
    ids and a shared expert, against the quantized float64 oracle (the experts' scale bytes span 3
    octaves per row: the ``fold`` decode is exact on them)."""
    from sgl_kernel_v4.triton.moe_fp4 import DECODE_VARIANTS

    if INTERP and decode == 1 and layout != "fused_dsplit1":
        pytest.skip("the table decode's portable bytes are covered by the every-byte test")
    cfg = dict(DECODE_VARIANTS[layout], PAIR=1) if isinstance(layout, str) else dict(layout)
    args = _inputs(*_shape(), seed=7 + decode, dtype=dtypes()[0])
    _check(args, dict(cfg, FP8_MMA=1, FP8_DECODE=decode))


def test_hash_routing_ids_int8_storage() -> None:
    """Hash-routed ids (a ``tid2eid`` lookup) and int8-typed packed bytes, as the official files store
    them, with the fp8 product in the wrapper's default layout."""
    T, D, I, E, k = (6, 256, 64, 8, 2) if INTERP else (16, 4096, 2048, 160, 6)  # noqa: E741
    x, w13, s13, w2, s2, _, wts = _inputs(T, D, I, E, k, seed=5, dtype=dtypes()[0])
    gen = torch.Generator().manual_seed(6)
    tid2eid = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(50)])
    ids = tid2eid[torch.randint(0, 50, (T,), generator=gen)].to(DEVICE)
    _check([x, w13.view(torch.int8), s13, w2.view(torch.int8), s2, ids, wts], {"FP8_MMA": 1})


@pytest.mark.skipif(INTERP, reason="served shapes and the GPU's conversion: GPU only")
@pytest.mark.parametrize("T,pair", [(1, 1), (16, 1), (64, 0)])
@pytest.mark.parametrize(
    "opts", [{}, {"FP8_CVT": 1}, {"FP8_DECODE": 1}, {"FP8_DECODE": 2}], ids=["shift", "cvt", "table", "fold"]
)
def test_served_shapes_gpu(T: int, pair: int, opts: dict) -> None:
    """E=160, k=6, D=4096, I=2048 at decode and prefill sizes, every decode, with the bit-level
    rounding and the GPU's e4m3 conversion (both round to nearest even: the same result)."""
    args = _inputs(T, 4096, 2048, 160, 6, seed=T, dtype=torch.bfloat16)
    _check(args, dict(opts, FP8_MMA=1, PAIR=pair))


def test_fold_exact() -> None:
    """The host check of the ``fold`` decode's precondition: 11 octaves within an aligned group of
    four scale bytes pass, 12 fail, 12 between two groups pass; bytes above 249 fail."""
    from sgl_kernel_v4.triton.fp4_fp8 import fold_exact

    s = torch.full((2, 3, 8), 120, dtype=torch.uint8)
    assert fold_exact(s)
    s[1, 2, 1] = 131
    assert fold_exact(s)
    s[1, 2, 1] = 132
    assert not fold_exact(s)
    s[1, 2, 1] = 120
    s[1, 2, 4:] = 132  # the second group all 132: 12 octaves across groups, none within one
    assert fold_exact(s)
    assert not fold_exact(s, torch.full((1, 5), 250, dtype=torch.uint8))
    with pytest.raises(ValueError, match="uint8"):
        fold_exact(s.to(torch.int32))


if DEVICE is not None:
    import triton
    import triton.language as tl
    from sgl_kernel_v4.triton.fp4_fp8 import fp4_e4m3_group

    @triton.jit
    def _decode_probe(
        w_ptr, s_ptr, w8_ptr, ws_ptr, N: tl.constexpr, USE_ASM: tl.constexpr, DECODE: tl.constexpr
    ):
        """``N`` rows of 16 packed bytes (one scale group) -> their e4m3 bytes ``[N, 32]`` and scales."""
        rows = tl.arange(0, N)
        k0 = tl.program_id(0) * 32  # a tensor (0 on the one-program grid)
        sb = tl.load(s_ptr + rows).to(tl.int32)
        w8, ws = fp4_e4m3_group(w_ptr + rows * 16, sb, rows < N, k0, 32, N, True, USE_ASM, DECODE)
        tl.store(w8_ptr + rows[:, None] * 32 + tl.arange(0, 32)[None, :], w8.to(tl.uint8, bitcast=True))
        tl.store(ws_ptr + rows, ws)


@pytest.mark.parametrize("use_asm", [False, True], ids=["portable", "ptx"])
@pytest.mark.parametrize("decode", [0, 1], ids=["shift", "table"])
def test_e4m3_decode_every_byte(decode: int, use_asm: bool) -> None:
    """Every byte value in every position, scale bytes 1..248: e4m3 byte times the fp32 scale is the
    e2m1 value times ``2**(b - 127)`` exactly, in input order; the table decode's bytes are the
    exact e4m3 codes (no subnormals)."""
    if use_asm and INTERP:
        pytest.skip("the PTX decode runs on the GPU only")
    n = 256
    w = (torch.arange(n)[:, None] * 7 + torch.arange(16)[None, :] * 13).remainder(256).to(torch.uint8)
    s = (torch.arange(n) % 248 + 1).to(torch.uint8)[:, None]
    w8 = torch.empty(n, 32, dtype=torch.uint8, device=DEVICE)
    ws = torch.empty(n, dtype=torch.float32, device=DEVICE)
    _decode_probe[(1,)](w.to(DEVICE), s.to(DEVICE), w8, ws, N=n, USE_ASM=use_asm, DECODE=decode)
    got = w8.cpu().view(torch.float8_e4m3fn).double() * ws.cpu().double()[:, None]
    want = fp4_weight64(w, s)
    bad = torch.nonzero(got != want)
    assert not len(bad), f"{len(bad)} differ, e.g. " + ", ".join(
        f"byte {int(w[i, j // 2])} scale {int(s[i, 0])}: {got[i, j].item()} vs {want[i, j].item()}"
        for i, j in bad[:6].tolist()
    )
    if decode == 1:
        mag = w8.cpu() & 0x7F
        assert bool(((mag == 0) | (mag >= 0x30)).all())


@pytest.mark.parametrize(
    "bad",
    [{"FP8_MMA": 1, "BLOCK_K": 64}, {"FP8_MMA": 1, "DOWN_BLOCK_K": 96}, {"FP8_MMA": 1, "FP8_DECODE": 3}],
)
def test_bad_fp8_config_raises(bad: dict) -> None:
    from sgl_kernel_v4.triton.moe_fp4 import fused_moe_fp4

    args = _inputs(1, 128, 64, 4, 2, seed=3, dtype=dtypes()[0])
    with pytest.raises(ValueError, match="config"):
        fused_moe_fp4(*args, 4.0, config=bad)


def test_env_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SGLANG_V4_MOE_FP4_MMA`` picks the default product (read once); other values are refused."""
    from sgl_kernel_v4.triton import moe_fp4

    for val, want in (("", "bf16"), ("fp8", "fp8"), ("BF16", "bf16")):
        monkeypatch.setenv(moe_fp4.MMA_ENV, val)
        moe_fp4.default_mma.cache_clear()
        assert moe_fp4.default_mma() == want
    monkeypatch.setenv(moe_fp4.MMA_ENV, "fp4")
    moe_fp4.default_mma.cache_clear()
    with pytest.raises(ValueError, match=moe_fp4.MMA_ENV):
        moe_fp4.default_mma()
    monkeypatch.setenv(moe_fp4.MMA_ENV, "fp8")
    moe_fp4.default_mma.cache_clear()
    args = (
        _inputs(3, 256, 160, 8, 2, seed=9, dtype=dtypes()[0])
        if INTERP
        else _inputs(*SHAPE_GPU, 9, torch.bfloat16)
    )
    try:
        out = moe_fp4.fused_moe_fp4(*args, 4.0)  # no config: the environment's fp8 product
        assert rel_err(out, _oracle(*args, 4.0)) < _tol(args[0].dtype)
    finally:
        monkeypatch.delenv(moe_fp4.MMA_ENV)
        moe_fp4.default_mma.cache_clear()

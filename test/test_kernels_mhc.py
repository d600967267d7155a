"""GPU tests: Triton mHC pre/post (Sinkhorn per token) vs a float64 transcription of HF (op table 7).

Marked ``gpu``; skipped without CUDA + Triton (they also run under ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS, dtypes, rel_err

pytestmark = KERNEL_MARKS


def hc_pre64(
    x: torch.Tensor,
    fn: torch.Tensor,
    base: torch.Tensor,
    scale: torch.Tensor,
    iters: int,
    eps: float,
    neps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 transcription of HF DeepseekV4HyperConnection.forward."""
    T, n, D = x.shape
    flat = x.double().reshape(T, n * D)
    flat = flat * torch.rsqrt(flat.square().mean(-1, keepdim=True) + neps)
    mix = flat @ fn.double().T
    pre_w, post_w, comb_w = mix.split([n, n, n * n], -1)
    b = base.double()
    s = scale.double()
    pre = torch.sigmoid(pre_w * s[0] + b[:n]) + eps
    post = 2 * torch.sigmoid(post_w * s[1] + b[n : 2 * n])
    comb = torch.softmax(comb_w.view(T, n, n) * s[2] + b[2 * n :].view(n, n), -1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    collapsed = (pre[..., None] * x.double()).sum(1)
    return collapsed, post, comb


def make(T: int, n: int, D: int, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    x = torch.randn(T, n, D, generator=gen).to(dtype)
    fn = torch.randn((2 + n) * n, n * D, generator=gen) * (n * D) ** -0.5
    base = torch.randn((2 + n) * n, generator=gen) * 0.5
    scale = torch.rand(3, generator=gen) + 0.5
    return x, fn, base, scale


@pytest.mark.parametrize("T,n,D", [(1, 4, 4096), (8, 4, 4096), (130, 4, 4096), (5, 2, 256), (3, 4, 1000)])
@pytest.mark.parametrize("dtype", dtypes())
def test_hc_pre(T: int, n: int, D: int, dtype: torch.dtype) -> None:
    from sgl_kernel_v4.triton.mhc import hc_pre

    if INTERP and T * D > 40000:
        pytest.skip("interpreter: too slow")
    gen = torch.Generator().manual_seed(T + D)
    x, fn, base, scale = make(T, n, D, dtype, gen)
    iters, eps, neps = 20, 1e-6, 1e-6
    rc, rp, rcomb = hc_pre64(x, fn, base, scale, iters, eps, neps)
    for splits in (None, 1, 3):
        col, post, comb = hc_pre(
            x.to(DEVICE), fn.to(DEVICE), base.to(DEVICE), scale.to(DEVICE), iters, eps, neps, splits=splits
        )
        assert col.dtype == dtype and post.dtype == torch.float32 and comb.dtype == torch.float32
        assert rel_err(post, rp) < 1e-5, splits
        assert rel_err(comb, rcomb) < 1e-5, splits
        assert rel_err(col, rc) < (8e-3 if dtype == torch.bfloat16 else 1e-5), splits
        # comb is doubly stochastic (rows and columns ~ 1)
        c = comb.double().cpu()
        assert torch.allclose(c.sum(-2), torch.ones(T, n, dtype=torch.float64), atol=1e-4)
        assert torch.allclose(c.sum(-1), torch.ones(T, n, dtype=torch.float64), atol=1e-2)


@pytest.mark.parametrize("mix_tile", [(32, 4), (64, 8), (128, 8)])
@pytest.mark.parametrize("T,n,D", [(70, 4, 512), (3, 2, 300)])
def test_hc_pre_mix_tiles(mix_tile: tuple[int, int], T: int, n: int, D: int) -> None:
    """The prefill path with other projection tiles (``mix_tile``: tokens per program, warps;
    programs whose tokens run past ``T``) vs the float64 reference."""
    from sgl_kernel_v4.triton.mhc import hc_pre

    gen = torch.Generator().manual_seed(T * 7 + D)
    x, fn, base, scale = make(T, n, D, torch.float32, gen)
    rc, rp, rcomb = hc_pre64(x, fn, base, scale, 20, 1e-6, 1e-6)
    col, post, comb = hc_pre(x.to(DEVICE), fn.to(DEVICE), base.to(DEVICE), scale.to(DEVICE), 20, 1e-6, 1e-6,
                             path="legacy", mix_tile=mix_tile)  # fmt: skip
    assert rel_err(post, rp) < 1e-5 and rel_err(comb, rcomb) < 1e-5 and rel_err(col, rc) < 1e-5


@pytest.mark.parametrize("T,n,D", [(70, 4, 512), (130, 4, 4096), (3, 2, 300), (1100, 4, 4096)])
def test_hc_pre_bf16x3_product(T: int, n: int, D: int) -> None:
    """The prefill projection with the three-term bf16 product (``mix_prec="bf16x3"``, bf16 streams)
    vs the float64 reference, at the tf32x3 product's bounds; fp32 streams fall back to tf32x3."""
    from sgl_kernel_v4.triton.mhc import hc_pre

    if INTERP:
        pytest.skip("interpreter: bf16 tl.dot is not exact there")
    gen = torch.Generator().manual_seed(T * 11 + D)
    x, fn, base, scale = make(T, n, D, torch.bfloat16, gen)
    rc, rp, rcomb = hc_pre64(x, fn, base, scale, 20, 1e-6, 1e-6)
    for tile, splits in (((128, 8), None), ((64, 4), 7), ((32, 4), 64)):
        col, post, comb = hc_pre(x.to(DEVICE), fn.to(DEVICE), base.to(DEVICE), scale.to(DEVICE), 20, 1e-6, 1e-6,
                                 path="legacy", mix_tile=tile, splits=splits, mix_prec="bf16x3")  # fmt: skip
        assert rel_err(post, rp) < 1e-5 and rel_err(comb, rcomb) < 1e-5, (tile, splits)
        assert rel_err(col, rc) < 8e-3, (tile, splits)
    if T >= 1024:  # the defaults of that size (PREFILL_MIX_TILE, PREFILL_MIX_PREC, their split rule)
        col, post, comb = hc_pre(
            x.to(DEVICE), fn.to(DEVICE), base.to(DEVICE), scale.to(DEVICE), 20, 1e-6, 1e-6
        )
        assert rel_err(post, rp) < 1e-5 and rel_err(comb, rcomb) < 1e-5 and rel_err(col, rc) < 8e-3
    x32 = x.float()
    col, post, comb = hc_pre(x32.to(DEVICE), fn.to(DEVICE), base.to(DEVICE), scale.to(DEVICE), 20, 1e-6, 1e-6,
                             path="legacy", mix_prec="bf16x3")  # fmt: skip
    assert rel_err(post, rp) < 1e-5 and rel_err(comb, rcomb) < 1e-5


def test_hc_pre_bad_mix_tile() -> None:
    from sgl_kernel_v4.triton.mhc import hc_pre

    x, fn, base, scale = make(2, 2, 64, torch.float32, torch.Generator().manual_seed(0))
    for tile in ((8, 4), (48, 4), (32, 3), (32, 0)):
        with pytest.raises(ValueError, match="mix_tile"):
            hc_pre(
                x.to(DEVICE), fn.to(DEVICE), base.to(DEVICE), scale.to(DEVICE), 20, 1e-6, 1e-6, mix_tile=tile
            )


@pytest.mark.parametrize("T,n,D", [(1, 4, 4096), (9, 4, 4096), (3, 4, 1000), (4, 2, 256)])
@pytest.mark.parametrize("dtype", dtypes())
def test_hc_pre_fused_norm(T: int, n: int, D: int, dtype: torch.dtype) -> None:
    """``hc_pre(..., norm_weight=w)`` = RMSNorm(w) of the x.dtype-rounded collapse (the block's
    ``input_layernorm`` fused into the launch): vs float64 of the rounded reference collapse, and
    vs the unfused Triton pair (hc_pre, then rms_norm): one bf16 rounding; fp32: see the bound."""
    from sgl_kernel_v4.triton.mhc import hc_pre
    from sgl_kernel_v4.triton.norm import rms_norm

    if INTERP and T * D > 40000:
        pytest.skip("interpreter: too slow")
    gen = torch.Generator().manual_seed(3 * T + D)
    x, fn, base, scale = make(T, n, D, dtype, gen)
    w = torch.rand(D, generator=gen) + 0.5
    iters, eps, neps, weps = 20, 1e-6, 1e-6, 1e-5
    args = (x.to(DEVICE), fn.to(DEVICE), base.to(DEVICE), scale.to(DEVICE), iters, eps, neps)
    col, post, comb = hc_pre(*args, norm_weight=w.to(DEVICE), norm_weight_eps=weps)
    plain, post0, comb0 = hc_pre(*args)
    assert torch.equal(post, post0) and torch.equal(comb, comb0)
    # oracle: float64 RMSNorm of the collapse as the unfused path rounds it
    c64 = plain.double().cpu()
    ref = c64 * torch.rsqrt(c64.square().mean(-1, keepdim=True) + weps) * w.double()
    assert col.dtype == dtype
    assert rel_err(col, ref) < (8e-3 if dtype == torch.bfloat16 else 1e-5)
    unfused = rms_norm(plain, w.to(DEVICE), weps).double().cpu()
    # fp32: the collapse of the fused launch and that of the plain one are separate compilations
    # (HAS_NORM), so an element can differ by a rounding of the terms sum_i pre_i x_i; where those
    # cancel, that is large relative to the element (an H200 run: 1.2e-4 relative at D = 1000,
    # 0 in the other cases). Bound: 2**-20 of the element (as before) plus 2**-20 of the row's largest
    # |value| (the terms' scale). bf16: one rounding of the output.
    diff = (col.double().cpu() - unfused).abs()
    if dtype == torch.bfloat16:
        bound = 2.0**-7 * unfused.abs()
    else:
        bound = 2.0**-20 * (unfused.abs() + unfused.abs().amax(-1, keepdim=True))
    assert (diff <= bound + 1e-30).all(), (diff - bound).max().item()
    with pytest.raises(ValueError, match="norm_weight"):
        hc_pre(*args, norm_weight=w[:-1].to(DEVICE), norm_weight_eps=weps)


@pytest.mark.parametrize("T,n,D", [(1, 4, 4096), (64, 4, 4096), (7, 2, 300)])
@pytest.mark.parametrize("dtype", dtypes())
def test_hc_post(T: int, n: int, D: int, dtype: torch.dtype) -> None:
    from sgl_kernel_v4.triton.mhc import hc_post

    gen = torch.Generator().manual_seed(T * 5 + D)
    o = torch.randn(T, D, generator=gen).to(dtype)
    res = torch.randn(T, n, D, generator=gen).to(dtype)
    post = torch.rand(T, n, generator=gen) * 2
    comb = torch.softmax(torch.randn(T, n, n, generator=gen), -1)
    ref = post.double()[..., None] * o.double()[:, None, :] + torch.einsum(
        "tjk,tjd->tkd", comb.double(), res.double()
    )
    out = torch.full_like(res, float("nan")).to(DEVICE)
    hc_post(o.to(DEVICE), res.to(DEVICE), post.to(DEVICE), comb.to(DEVICE), out=out)
    assert not torch.isnan(out).any()
    assert rel_err(out, ref) < (8e-3 if dtype == torch.bfloat16 else 1e-5)


class _LaunchSpy:
    """Stands in for a Triton kernel in its module: records each launch's grid, then launches."""

    def __init__(self, kernel: object) -> None:
        self.kernel, self.grids = kernel, []

    def __getitem__(self, grid: tuple) -> object:
        self.grids.append(grid)
        return self.kernel[grid]


@pytest.mark.parametrize("T,n,D", [(1, 4, 256), (32, 2, 64), (33, 2, 64), (2, 2, 4100)])
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("dtype", dtypes())
def test_hc_pre_decode_and_legacy_paths(
    T: int, n: int, D: int, norm: bool, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both finish paths (``decode``: two programs per token, the collapse from one tile or, for
    ``D`` over 4096, in slices; ``legacy``: one single-warp program per token), with and without
    the fused RMSNorm, at batch sizes on either side of ``DECODE_MAX_T``, vs the float64 oracle
    (the norm's: float64 RMSNorm of the oracle collapse rounded to x.dtype); ``auto`` launches the
    decode finish (grid ``(T, 2)``) exactly when ``T <= DECODE_MAX_T``."""
    import sgl_kernel_v4.triton.mhc as mhc

    gen = torch.Generator().manual_seed(7 * T + D + norm)
    x, fn, base, scale = make(T, n, D, dtype, gen)
    w = torch.rand(D, generator=gen) + 0.5
    iters, eps, neps, weps = 20, 1e-6, 1e-6, 1e-5
    rc, rp, rcomb = hc_pre64(x, fn, base, scale, iters, eps, neps)
    if norm:
        r = rc.to(dtype).double()
        rc = r * torch.rsqrt(r.square().mean(-1, keepdim=True) + weps) * w.double()
    kw = {"norm_weight": w.to(DEVICE), "norm_weight_eps": weps} if norm else {}
    args = (x.to(DEVICE), fn.to(DEVICE), base.to(DEVICE), scale.to(DEVICE), iters, eps, neps)
    dec = _LaunchSpy(mhc._hc_finish_decode_kernel)
    leg = _LaunchSpy(mhc._hc_finish_kernel)
    monkeypatch.setattr(mhc, "_hc_finish_decode_kernel", dec)
    monkeypatch.setattr(mhc, "_hc_finish_kernel", leg)
    for path in ("decode", "legacy", "auto"):
        col, post, comb = mhc.hc_pre(*args, path=path, **kw)
        assert col.dtype == dtype and col.shape == (T, D), path
        assert rel_err(post, rp) < 1e-5, path
        assert rel_err(comb, rcomb) < 1e-5, path
        assert rel_err(col, rc) < (8e-3 if dtype == torch.bfloat16 else 1e-5), path
    auto_decode = T <= mhc.DECODE_MAX_T
    assert dec.grids == [(T, 2)] * (2 if auto_decode else 1)
    assert leg.grids == [(T,)] * (1 if auto_decode else 2)


@pytest.mark.parametrize("T,n,D", [(3, 4, 300), (33, 2, 260)])
@pytest.mark.parametrize("dtype", dtypes())
def test_hc_post_paths(T: int, n: int, D: int, dtype: torch.dtype) -> None:
    """``hc_post`` with the decode (256-wide) and legacy (1024-wide) ``D`` tiles vs float64."""
    from sgl_kernel_v4.triton.mhc import hc_post

    gen = torch.Generator().manual_seed(T + 11 * D)
    o = torch.randn(T, D, generator=gen).to(dtype)
    res = torch.randn(T, n, D, generator=gen).to(dtype)
    post = torch.rand(T, n, generator=gen) * 2
    comb = torch.softmax(torch.randn(T, n, n, generator=gen), -1)
    ref = post.double()[..., None] * o.double()[:, None, :] + torch.einsum(
        "tjk,tjd->tkd", comb.double(), res.double()
    )
    for path in ("decode", "legacy", "auto"):
        out = hc_post(o.to(DEVICE), res.to(DEVICE), post.to(DEVICE), comb.to(DEVICE), path=path)
        assert rel_err(out, ref) < (8e-3 if dtype == torch.bfloat16 else 1e-5), path


def test_hc_bad_input() -> None:
    from sgl_kernel_v4.triton.mhc import hc_post, hc_pre

    gen = torch.Generator().manual_seed(0)
    x, fn, base, scale = (t.to(DEVICE) for t in make(2, 4, 64, torch.float32, gen))
    with pytest.raises(ValueError, match="fn"):
        hc_pre(x, fn[:, :10], base, scale, 20, 1e-6, 1e-6)
    with pytest.raises(ValueError, match="sinkhorn_iters"):
        hc_pre(x, fn, base, scale, 0, 1e-6, 1e-6)
    with pytest.raises(ValueError, match="post"):
        hc_post(x[:, 0], x, scale[:2].expand(2, 2), scale.new_zeros(2, 4, 4))
    with pytest.raises(ValueError, match="path"):
        hc_pre(x, fn, base, scale, 20, 1e-6, 1e-6, path="fast")
    with pytest.raises(ValueError, match="path"):
        hc_post(x[:, 0], x, x.new_zeros(2, 4), x.new_zeros(2, 4, 4), path="fast")
    col, post, comb = hc_pre(x[:0], fn, base, scale, 20, 1e-6, 1e-6)
    assert col.shape == (0, 64) and post.shape == (0, 4) and comb.shape == (0, 4, 4)

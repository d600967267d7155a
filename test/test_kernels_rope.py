"""GPU tests: Triton RoPE / inverse RoPE (+fp8) / fused q-norm + kv insert / RMSNorm vs float64 (op table 1, 3, 4).

Marked ``gpu``; skipped without CUDA + Triton (they also run under ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS, dtypes, rel_err

pytestmark = KERNEL_MARKS


def rope64(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """float64 HF apply_rotary_pos_emb on the trailing 2*cos.shape[-1] channels of [T, H, D]."""
    x = x.double().clone()
    r = 2 * cos.shape[-1]
    c = cos.double()[:, None, :]
    s = sin.double()[:, None, :]
    a = x[..., -r::2].clone()
    b = x[..., -r + 1 :: 2].clone()
    x[..., -r::2] = a * c - b * s
    x[..., -r + 1 :: 2] = b * c + a * s
    return x


def rms64(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    x = x.double()
    y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return y * w.double() if w is not None else y


def make_cos_sin(T: int, r: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    pos = torch.randint(0, 100000, (T, 1), generator=gen).double()
    inv = 10000.0 ** (-torch.arange(0, r, 2).double() / r)
    ang = pos * inv
    return ang.cos().float(), ang.sin().float()


SHAPES = [(1, 64, 512, 64), (7, 64, 512, 64), (256, 8, 512, 64), (33, 5, 128, 64), (4, 3, 64, 16)]


@pytest.mark.parametrize("T,H,D,R", SHAPES)
@pytest.mark.parametrize("dtype", dtypes())
def test_apply_and_inverse_rope(T: int, H: int, D: int, R: int, dtype: torch.dtype) -> None:
    from sgl_kernel_v4.triton.rope import apply_rope, inv_rope_quant

    gen = torch.Generator().manual_seed(T + H + D)
    x = torch.randn(T, H, D, generator=gen).to(dtype)
    cos, sin = make_cos_sin(T, R, gen)
    dx, dc, ds = x.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE)
    tol = 8e-3 if dtype == torch.bfloat16 else 1e-6
    out = torch.full_like(dx, float("nan"))
    apply_rope(dx, dc, ds, out=out)
    assert not torch.isnan(out).any()
    assert rel_err(out, rope64(x, cos, sin)) < tol
    inv = inv_rope_quant(dx, dc, ds, False)
    assert inv.dtype == dtype
    assert rel_err(inv, rope64(x, cos, -sin)) < tol
    # round trip and nope channels untouched (bit exact)
    assert torch.equal(inv[..., : D - R].cpu(), x[..., : D - R])
    back = apply_rope(inv_rope_quant(dx.float(), dc, ds, False), dc, ds)
    assert rel_err(back, x) < 1e-5


@pytest.mark.parametrize("T,H,D", [(1, 64, 512), (40, 16, 512), (3, 2, 256)])
def test_inv_rope_fp8(T: int, H: int, D: int) -> None:
    from sgl_kernel_v4.triton.rope import FP8_GROUP, inv_rope_quant

    if INTERP:
        pytest.skip("interpreter: no fp8")
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(T, H, D, generator=gen) * torch.rand(T, H, 1, generator=gen) * 4).bfloat16()
    x[0, 0] = 0.0  # an all-zero group must not produce NaN
    cos, sin = make_cos_sin(T, 64, gen)
    out = torch.full((T, H, D), float("nan"), device=DEVICE).to(torch.float8_e4m3fn)
    q, scales = inv_rope_quant(x.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE), True, out=out)
    assert q.dtype == torch.float8_e4m3fn and scales.shape == (T, H, D // FP8_GROUP)
    ref = rope64(x, cos, -sin)
    deq = q.float().cpu().view(T, H, D // FP8_GROUP, FP8_GROUP) * scales.cpu()[..., None]
    deq = deq.view(T, H, D)
    assert torch.isfinite(deq).all()
    assert rel_err(deq, ref) < 0.04  # e4m3: 3 mantissa bits
    amax = ref.view(T, H, D // FP8_GROUP, FP8_GROUP).abs().amax(-1)
    want = amax.clamp_min(1e-10) / 448.0
    assert torch.allclose(scales.cpu().double(), want, rtol=1e-2, atol=1e-12)


@pytest.mark.parametrize("T,H,D,R", [(1, 64, 512, 64), (9, 64, 512, 64), (128, 16, 512, 64), (5, 3, 128, 32)])
@pytest.mark.parametrize("dtype", dtypes())
def test_qnorm_rope_kv_insert(T: int, H: int, D: int, R: int, dtype: torch.dtype) -> None:
    from sgl_kernel_v4.triton.rope import qnorm_rope_kv_insert

    gen = torch.Generator().manual_seed(T * 3 + H)
    q = (torch.randn(T, H, D, generator=gen) * 3).to(dtype)
    kv = (torch.randn(T, D, generator=gen) * 2).to(dtype)
    w = torch.rand(D, generator=gen) + 0.5
    cos, sin = make_cos_sin(T, R, gen)
    N = 4 * T + 8
    pool = torch.full((N, D), float("nan")).to(dtype)
    idx = torch.randperm(N, generator=gen)[:T]
    if T > 1:
        idx[0] = -1  # padded token: no insert
    eps = 1e-6
    dpool = pool.to(DEVICE)
    qo = torch.full_like(q, float("nan")).to(DEVICE)
    kvo = torch.full_like(kv, float("nan")).to(DEVICE)
    q_out, kv_out = qnorm_rope_kv_insert(
        q.to(DEVICE), kv.to(DEVICE), w.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE), dpool, idx.to(DEVICE), eps,
        q_out=qo, kv_out=kvo,
    )  # fmt: skip
    tol = 8e-3 if dtype == torch.bfloat16 else 1e-5
    ref_q = rope64(rms64(q, None, eps), cos, sin)
    ref_kv = rope64(rms64(kv, w, eps)[:, None, :], cos, sin)[:, 0]
    assert not torch.isnan(q_out).any() and not torch.isnan(kv_out).any()
    assert rel_err(q_out, ref_q) < tol
    assert rel_err(kv_out, ref_kv) < tol
    pool_after = dpool.cpu()
    written = idx[idx >= 0]
    assert torch.equal(pool_after[written], kv_out.cpu()[idx >= 0])
    untouched = torch.ones(N, dtype=torch.bool)
    untouched[written] = False
    assert torch.isnan(pool_after[untouched]).all()


@pytest.mark.parametrize("T,D", [(1, 4096), (37, 4096), (300, 512), (3, 1000)])
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("dtype", dtypes())
def test_rms_norm(T: int, D: int, weighted: bool, dtype: torch.dtype) -> None:
    from sgl_kernel_v4.triton.norm import rms_norm

    gen = torch.Generator().manual_seed(D + T)
    x = (torch.randn(T, D, generator=gen) * 5).to(dtype)
    w = torch.rand(D, generator=gen) + 0.5 if weighted else None
    out = torch.full_like(x, float("nan")).to(DEVICE)
    rms_norm(x.to(DEVICE), w.to(DEVICE) if w is not None else None, 1e-6, out=out)
    assert not torch.isnan(out).any()
    assert rel_err(out, rms64(x, w, 1e-6)) < (8e-3 if dtype == torch.bfloat16 else 1e-5)


def test_rope_bad_input() -> None:
    from sgl_kernel_v4.triton.rope import apply_rope, qnorm_rope_kv_insert

    x = torch.randn(2, 2, 64, device=DEVICE)
    c = torch.randn(2, 8, device=DEVICE)
    with pytest.raises(ValueError, match="cos"):
        apply_rope(x, c[:1], c[:1])
    with pytest.raises(ValueError, match="swa_index"):
        qnorm_rope_kv_insert(
            x, x[:, 0], torch.ones(64, device=DEVICE), c, c, x[0], torch.zeros(3, device=DEVICE), 1e-6
        )

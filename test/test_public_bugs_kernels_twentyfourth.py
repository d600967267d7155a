"""Public reports against other projects' kernels, ported to the Triton kernels of
``sgl_kernel_v4.triton`` and their torch references ``sgl_kernel_v4.ref``.

Each test names its report and its oracle: float64 arithmetic written here (exact fractions for
the scale rounding), or the e4m3fn encoding of non-finite values written out (:func:`_e4m3_non_finite`).
Kernel tests run on CUDA or on
the CPU under ``TRITON_INTERPRET=1`` (tiny shapes: the interpreter is slow).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS
from kernels_attention_testutil import make_case, oracle, run, slot_lists

pytestmark = KERNEL_MARKS

FP8_MAX = 448.0


def _e4m3_non_finite(v: torch.Tensor) -> torch.Tensor:
    """The e4m3fn value a non-finite input quantizes to, in float64: NaN stays NaN, ``+-inf``
    saturates to ``+-448`` (e4m3fn has no infinity; DeepSeek's reference ``act_quant`` clamps to
    ``+-448`` before its cast, CUDA's ``satfinite`` conversion does the same). Written out rather
    than taken from torch's cast, whose answer for ``+-inf`` changed between releases (NaN in 2.11,
    ``+-448`` in 2.13)."""
    v = v.double()
    return torch.where(v.isnan(), v, v.sign() * FP8_MAX)


def _rms_norm64(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    """float64 RMSNorm: ``x / sqrt(mean(x^2) + eps) * w``."""
    x64 = x.double().cpu()
    y = x64 / torch.sqrt(x64.square().mean(-1, keepdim=True) + eps)
    return y if w is None else y * w.double().cpu()


def test_rms_norm_strided_input_output_and_weight() -> None:
    """ModelTC/LightLLM#1467: an RMSNorm kernel that indexes a non-unit last-dim stride as if it
    were 1 gives silently wrong rows. Here a transposed input, a transposed ``out`` buffer and a
    strided weight must each give the float64 RMSNorm of the values (oracle: float64 formula)."""
    from sgl_kernel_v4.triton.norm import rms_norm

    g = torch.Generator().manual_seed(0)
    base = torch.randn(24, 5, generator=g)
    x = base.t().to(DEVICE)  # [5, 24], stride (1, 5)
    w_full = torch.rand(48, generator=g) + 0.5
    w = w_full[::2].to(DEVICE)  # [24], stride 2
    want = _rms_norm64(base.t(), w_full[::2], 1e-6)
    torch.testing.assert_close(rms_norm(x, w, 1e-6).double().cpu(), want, rtol=1e-5, atol=1e-6)
    out = torch.full((24, 5), float("nan"), device=DEVICE).t()  # [5, 24] with stride (1, 5)
    got = rms_norm(x.contiguous(), w, 1e-6, out=out)
    assert got.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out.double().cpu(), want, rtol=1e-5, atol=1e-6)
    # in place on a transposed view (out is x)
    xin = base.clone().to(DEVICE).t()
    rms_norm(xin, None, 1e-6, out=xin)
    torch.testing.assert_close(xin.double().cpu(), _rms_norm64(base.t(), None, 1e-6), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="out"):
        rms_norm(x, w, 1e-6, out=torch.empty(5, 23, device=DEVICE))


def test_rope_and_hc_post_write_strided_out_buffers() -> None:
    """ModelTC/LightLLM#1467 (the same fault in other kernels with an output buffer): RoPE and the
    mHC post wrote channels at unit stride whatever ``out``'s last-dim stride, and took an ``out``
    of any shape or dtype. A transposed ``out`` must hold the float64 result (oracle: interleaved
    rotation of the trailing pairs, and ``post * out + comb^T @ residual``, in float64) and a
    wrongly shaped one is refused."""
    from sgl_kernel_v4.triton.mhc import hc_post
    from sgl_kernel_v4.triton.rope import apply_rope

    g = torch.Generator().manual_seed(7)
    T, H, D, r = 3, 2, 16, 8
    x = torch.randn(T, H, D, generator=g)
    ang = torch.rand(T, r // 2, generator=g) * 6
    cos, sin = ang.cos(), ang.sin()
    want = x.double().clone()
    x0, x1 = x.double()[..., D - r :: 2], x.double()[..., D - r + 1 :: 2]
    c, s_ = cos.double()[:, None, :], sin.double()[:, None, :]
    want[..., D - r :: 2] = x0 * c - x1 * s_
    want[..., D - r + 1 :: 2] = x0 * s_ + x1 * c
    out = torch.full((D, H, T), float("nan"), device=DEVICE).permute(2, 1, 0)  # [T, H, D], stride(2) = H*T
    got = apply_rope(x.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE), out=out)
    assert got.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out.double().cpu(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="out"):
        apply_rope(x.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE), out=torch.empty(T, H, D - 2, device=DEVICE))

    n, Dm = 4, 32
    block_out = torch.randn(T, Dm, generator=g)
    residual = torch.randn(T, n, Dm, generator=g)
    post = torch.rand(T, n, generator=g)
    comb = torch.rand(T, n, n, generator=g)
    want = (
        post.double()[..., None] * block_out.double()[:, None, :]
        + comb.double().transpose(1, 2) @ residual.double()
    )
    out = torch.full((Dm, n, T), float("nan"), device=DEVICE).permute(2, 1, 0)
    hc_post(block_out.to(DEVICE), residual.to(DEVICE), post.to(DEVICE), comb.to(DEVICE), out=out)
    torch.testing.assert_close(out.double().cpu(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="out"):
        hc_post(block_out.to(DEVICE), residual.to(DEVICE), post.to(DEVICE), comb.to(DEVICE),
                out=torch.empty(T, n, Dm, dtype=torch.float64, device=DEVICE))  # fmt: skip


def _rope64(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    """float64 interleaved rotation of the trailing ``2 * cos.shape[1]`` channels by ``sign * angle``;
    the leading (nope) channels are copied."""
    x64 = x.double().clone()
    r = 2 * cos.shape[1]
    D = x.shape[-1]
    a, b = x.double()[..., D - r :: 2], x.double()[..., D - r + 1 :: 2]
    c, s_ = cos.double()[:, None, :], sign * sin.double()[:, None, :]
    x64[..., D - r :: 2] = a * c - b * s_
    x64[..., D - r + 1 :: 2] = b * c + a * s_
    return x64


def test_rope_leaves_nope_channels_untouched_even_next_to_inf() -> None:
    """vllm-project/vllm#55204 (a RoPE that altered its unrotated channels) and
    gyrovorbis/sh4zam#67 (clearing by multiplying by zero gives NaN for an infinite input): the
    kernel computed a nope channel as ``a * 1 - b * 0``, so an infinite neighbour ``b`` made ``a``
    NaN. Nope channels must come out bit for bit, non-finite values included, and the rope ones as
    the float64 rotation (oracle: float64 rotation, identity on the nope channels)."""
    from sgl_kernel_v4.ref.rope import apply_rope as ref_apply_rope
    from sgl_kernel_v4.triton.rope import apply_rope

    g = torch.Generator().manual_seed(8)
    T, H, D, r = 2, 2, 16, 8
    x = torch.randn(T, H, D, generator=g)
    x[0, 0, 1] = float("inf")
    x[0, 1, 3] = float("-inf")
    x[1, 0, 5] = float("nan")
    ang = torch.rand(T, r // 2, generator=g) * 6
    cos, sin = ang.cos(), ang.sin()
    want = _rope64(x, cos, sin, 1.0)
    for got in (apply_rope(x.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE)).cpu(), ref_apply_rope(x, cos, sin)):
        assert torch.equal(got[..., : D - r].view(torch.int32), x[..., : D - r].view(torch.int32))
        torch.testing.assert_close(got[..., D - r :].double(), want[..., D - r :], rtol=1e-5, atol=1e-5)


def test_inv_rope_quant_fp8_zero_groups_and_non_finite() -> None:
    """huggingface/kernels-community#681 and intel/intel-xpu-backend-for-triton#7771 for the fp8
    output of the inverse RoPE: an all-zero 128-group quantizes without NaN; a NaN stays the e4m3fn
    NaN and ``+-inf`` saturates to ``+-448`` (:func:`_e4m3_non_finite`), while the rest of
    its group keeps the scale of its finite values (before: an inf made its group's scale inf and
    every other value of the group 0). Oracle: float64 inverse rotation, that encoding for the
    non-finite values, ``|q*s - y| <= |y| / 16 + s * 2**-9`` for the others."""
    from sgl_kernel_v4.triton.rope import inv_rope_quant

    g = torch.Generator().manual_seed(9)
    T, H, D, r = 2, 2, 256, 64
    o = torch.randn(T, H, D, generator=g)
    o[0, 1, :128] = 0.0
    o[0, 0, 4] = float("nan")  # nope channels: untouched by the rotation
    o[1, 0, 10] = float("inf")
    o[1, 1, 20] = float("-inf")
    ang = torch.rand(T, r // 2, generator=g) * 6
    cos, sin = ang.cos(), ang.sin()
    want = _rope64(o, cos, sin, -1.0)
    q, sc = inv_rope_quant(o.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE), True)
    qf, sc = q.cpu().double(), sc.cpu().double()
    bad = ~want.isfinite()
    want_bad = _e4m3_non_finite(want[bad])
    assert torch.equal(qf[bad].isnan(), want_bad.isnan())
    assert torch.equal(qf[bad].nan_to_num(0.0), want_bad.nan_to_num(0.0))
    finite_amax = want.nan_to_num(0.0, 0.0, 0.0).abs().view(T, H, D // 128, 128).amax(-1)
    torch.testing.assert_close(sc, finite_amax.clamp_min(1e-10) / FP8_MAX, rtol=1e-6, atol=0.0)
    good = ~bad
    assert not bool(qf[good].isnan().any())
    assert bool((qf[0, 1, :128] == 0).all())
    if not INTERP:  # the interpreter's fp32 -> e4m3 conversion does not round to nearest
        s_full = sc.repeat_interleave(128, -1)
        err = (qf * s_full - want)[good].abs()
        assert bool((err <= want[good].abs() / 16 + s_full[good] * 2.0**-9).all())


def _act_quant_both(x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    from sgl_kernel_v4.ref.fp8_gemm import act_quant as ref_act_quant
    from sgl_kernel_v4.triton.fp8_act_quant import act_quant

    q, s = act_quant(x.to(DEVICE))
    qr, sr = ref_act_quant(x)
    return [(q.cpu(), s.cpu()), (qr, sr)]


def test_act_quant_all_zero_groups_and_partial_k() -> None:
    """huggingface/kernels-community#681 and pytorch/ao#4762: a per-block fp8 scale ``amax / 448``
    with no floor is 0 on an all-zero block, and ``0 / 0`` makes the block NaN. Zero rows, a zero
    128-group and a partial last group (K = 200) must quantize without NaN and dequantize to the
    input within e4m3's rounding (oracle: float64 bound ``|q*s - x| <= |x| / 16 + s * 2**-9``)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 200, generator=g)
    x[1, :128] = 0.0
    x[2] = 0.0
    x[3, 128:] = 0.0  # the partial last group all zero
    for q, s in _act_quant_both(x):
        assert s.shape == (4, 2) and bool((s > 0).all()) and bool(s.isfinite().all())
        qf = q.double()
        assert not bool(qf.isnan().any())
        deq = qf * s.double().repeat_interleave(128, 1)[:, :200]
        bound = x.double().abs() / 16 + s.double().repeat_interleave(128, 1)[:, :200] * 2.0**-9
        assert bool(((deq - x.double()).abs() <= bound).all())
        assert bool((deq[2] == 0).all()) and bool((deq[1, :128] == 0).all())


def _ue8m0_ceil(amax: float) -> float:
    """Smallest power of two ``s`` with ``max(amax, 1e-4) / 448 <= s`` (exact rational)."""
    r = max(Fraction(amax), Fraction(1e-4)) / 448
    e = math.floor(math.log2(r))
    while Fraction(2) ** e < r:
        e += 1
    while Fraction(2) ** (e - 1) >= r:
        e -= 1
    return float(Fraction(2) ** e)


def test_act_quant_ue8m0_scale_is_smallest_power_of_two() -> None:
    """sgl-project/sglang#29954 (fixed by #29956) and microsoft/onnxruntime#32122: ue8m0 scales
    rounded through ``log2`` / ``frexp`` land one power of two off at exact powers of two. A group
    whose ``amax / 448`` is exactly ``2**k`` keeps ``2**k``; one ulp above doubles it (oracle: exact
    rational arithmetic with ``fractions.Fraction``)."""
    amaxes = []
    for k in (-3, 0, 5):
        exact = 448.0 * 2.0**k
        amaxes += [exact, math.nextafter(exact, math.inf), math.nextafter(exact, 0.0)]
    amaxes += [1e-4, 3e-5, 1.0]
    amaxes = [float(torch.tensor(a, dtype=torch.float32)) for a in amaxes]  # fp32 inputs
    x = torch.zeros(len(amaxes), 128)
    x[:, 7] = torch.tensor(amaxes)
    x[:, 8] = -torch.tensor(amaxes) / 3
    want = torch.tensor([_ue8m0_ceil(a) for a in amaxes], dtype=torch.float64)
    for q, s in _act_quant_both(x):
        assert torch.equal(s[:, 0].double(), want), (s[:, 0].tolist(), want.tolist())
        assert bool((q.double()[:, 7].abs() <= FP8_MAX).all())


def test_act_quant_non_finite_as_torch_e4m3_cast() -> None:
    """intel/intel-xpu-backend-for-triton#7771 and ml-explore/mlx#4164: a NaN silently turned into
    a finite fp8 value computes on as ordinary data. A NaN activation must quantize to the e4m3fn
    NaN and ``+-inf`` to ``+-448`` (oracle: :func:`_e4m3_non_finite`; before the fix the kernel wrote -448 for both a NaN and a +inf, and an inf set
    its group's scale to inf), while the other elements of the group keep the scale of its
    finite values (float64 bound ``|q*s - x| <= |x| / 16 + s * 2**-9``)."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 256, generator=g)
    x[0, 3] = float("inf")
    x[1, 5] = float("nan")
    x[2, 130] = float("-inf")
    bad = ~x.isfinite()
    want_bad = _e4m3_non_finite(x[bad])
    for q, s in _act_quant_both(x):
        qf = q.double()
        assert torch.equal(qf[bad].isnan(), want_bad.isnan())
        assert torch.equal(qf[bad].nan_to_num(0.0), want_bad.nan_to_num(0.0))
        good = ~bad
        assert not bool(qf[good].isnan().any())
        s_full = s.double().repeat_interleave(128, 1)
        assert bool(s.isfinite().all())
        err = (qf * s_full - x.double())[good].abs()
        assert bool((err <= x.double()[good].abs() / 16 + s_full[good] * 2.0**-9).all())


def test_fp8_linear_reference_keeps_nan_rows_nan() -> None:
    """intel/intel-xpu-backend-for-triton#7771 (a NaN must not turn finite on the way through fp8):
    the activation-quantized linear of the reference gives NaN in the rows whose input holds a
    NaN and finite rows elsewhere, as the float64 product does (oracle: float64 ``x @ w.T``)."""
    from sgl_kernel_v4.ref.fp8_gemm import fp8_linear

    g = torch.Generator().manual_seed(3)
    w = (torch.randn(64, 256, generator=g) * 0.5).to(torch.float8_e4m3fn)
    ws = torch.ones(1, 2)
    x = torch.randn(3, 256, generator=g)
    x[1, 10] = float("nan")
    x[2, 200] = float("nan")
    want = x.double() @ w.double().t()
    got = fp8_linear(x, w, ws, "w8a8")
    assert got.isnan().all(1).tolist() == want.isnan().all(1).tolist() == [False, True, True]
    torch.testing.assert_close(got[0].double(), want[0], rtol=0.1, atol=0.5)


def test_fp8_linear_k_not_multiple_of_128_applies_last_scale_block() -> None:
    """pytorch/FBGEMM#6159: a block-fp8 GEMM skipped the trailing K scale block when K is not a
    multiple of the 128 scale block, leaving that tail in raw quantized units. K = 200 and N = 136
    (partial blocks on both axes) with scales three orders of magnitude apart: every variant within
    its precision of the float64 product of the dequantized weight (oracle: float64 matmul)."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    g = torch.Generator().manual_seed(4)
    K, N = 200, 136
    w = (torch.randn(N, K, generator=g) * 0.5).to(torch.float8_e4m3fn)
    ws = torch.tensor([[1e-3, 1.0], [2.0, 5e-4]])
    x = torch.randn(3, K, generator=g)
    w64 = w.double() * ws.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:N, :K]
    want = x.double() @ w64.t()
    for variant, tol in (("w8a16", 1e-5), ("w8a8", 0.06), ("w8a8_fused", 0.06)):
        got = fp8_linear(x.to(DEVICE), w.to(DEVICE), ws.to(DEVICE), variant).double().cpu()
        for cols in (slice(0, 128), slice(128, N)):  # each N block on its own (scales differ 1e3x)
            err = (got[:, cols] - want[:, cols]).norm() / want[:, cols].norm()
            assert err < tol, (variant, cols, float(err))


def test_zero_token_batches_on_every_token_op() -> None:
    """sgl-project/sglang#38773: a MoE backend crashed on a 0-token batch (an idle data-parallel
    rank, a two-batch-overlap half). Every per-token Triton op and its reference take ``T = 0``
    and return empty results of the right shape (oracle: the shapes by definition)."""
    from sgl_kernel_v4.ref import moe as ref_moe
    from sgl_kernel_v4.ref import moe_router as ref_router
    from sgl_kernel_v4.triton import activation, fp8_act_quant, fp8_gemm, moe, moe_router, norm

    E, D, inter, k = 4, 32, 16, 2
    x = torch.zeros(0, D, device=DEVICE)
    wgu, wd = torch.randn(E, 2 * inter, D, device=DEVICE), torch.randn(E, D, inter, device=DEVICE)
    ids, wts = torch.zeros(0, k, dtype=torch.int64, device=DEVICE), torch.zeros(0, k, device=DEVICE)
    assert moe.fused_moe(x, wgu, wd, ids, wts, 10.0).shape == (0, D)
    assert ref_moe.fused_moe(x.cpu(), wgu.cpu(), wd.cpu(), ids.cpu(), wts.cpu(), 10.0).shape == (0, D)
    bias = torch.zeros(E, device=DEVICE)
    for fn in (moe_router.moe_route, ref_router.moe_route):
        dev = DEVICE if fn is moe_router.moe_route else "cpu"
        got_ids, got_w = fn(torch.zeros(0, E, device=dev), bias.to(dev), None, None, k, 1.5)
        assert got_ids.shape == (0, k) and got_w.shape == (0, k)
    assert activation.swiglu_clamped(torch.zeros(0, 2 * inter, device=DEVICE), 10.0).shape == (0, inter)
    assert norm.rms_norm(x, torch.ones(D, device=DEVICE), 1e-6).shape == (0, D)
    q, s = fp8_act_quant.act_quant(torch.zeros(0, 200, device=DEVICE))
    assert q.shape == (0, 200) and s.shape == (0, 2)
    w8 = torch.zeros(136, 200, device=DEVICE).to(torch.float8_e4m3fn)
    for variant in ("w8a16", "w8a8", "w8a8_fused"):
        got = fp8_gemm.fp8_linear(
            torch.zeros(0, 200, device=DEVICE), w8, torch.ones(2, 2, device=DEVICE), variant
        )
        assert got.shape == (0, 136)


def test_moe_route_ties_prefer_lower_expert_id() -> None:
    """vllm-project/vllm#55514 and #52679: ``torch.topk`` does not fix which of equal scores it
    returns, so tied experts at the top-k cutoff came back in an arbitrary order. Equal router
    logits must select the lowest expert ids, in the kernel and the reference alike (oracle: a
    stable descending sort in float64 of ``sqrt(softplus(logit))``)."""
    from sgl_kernel_v4.ref.moe_router import moe_route as ref_route
    from sgl_kernel_v4.triton.moe_router import moe_route

    logits = torch.tensor(
        [[0.0] * 8, [1.0, 2.0, 2.0, 2.0, 1.0, 1.0, 2.0, 0.0], [3.0, -1.0, 3.0, 3.0, -1.0, 3.0, 0.5, 3.0]]
    )
    bias = torch.zeros(8)
    scores = torch.sqrt(torch.nn.functional.softplus(logits.double()))
    want_ids = scores.sort(dim=-1, descending=True, stable=True).indices[:, :3]
    want_w = scores.gather(1, want_ids)
    want_w = want_w / want_w.sum(-1, keepdim=True) * 1.5
    for ids, w in (
        moe_route(logits.to(DEVICE), bias.to(DEVICE), None, None, 3, 1.5),
        ref_route(logits, bias, None, None, 3, 1.5),
    ):
        assert ids.cpu().tolist() == want_ids.tolist()
        torch.testing.assert_close(w.double().cpu(), want_w, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("score_func", ["sqrtsoftplus", "sigmoid"])
def test_moe_route_nan_logits_give_distinct_in_range_ids_and_finite_weights(score_func: str) -> None:
    """sgl-project/sglang#30079 and vllm-project/vllm#39391: NaN router logits (CUDA-graph padding
    rows) gave out-of-range or duplicate expert ids and NaN weights, crashing the MoE kernels after
    the router (the Triton interpreter raised outright on an all-NaN row). A NaN expert must never
    be chosen over a real one and weigh 0; an all-NaN row routes to experts ``0 .. k-1`` with
    weight 0; kernel and reference agree bit for bit (oracle: float64 scores, NaN experts ranked
    last by id, a stable descending sort, weights renormalised over the real experts)."""
    from sgl_kernel_v4.ref.moe_router import moe_route as ref_route
    from sgl_kernel_v4.triton.moe_router import moe_route

    g = torch.Generator().manual_seed(10)
    E, k, scaling = 8, 3, 2.5
    logits = torch.randn(4, E, generator=g)
    logits[0] = float("nan")
    logits[1, [2, 5]] = float("nan")
    logits[2, :6] = float("nan")  # fewer real experts than k
    bias = torch.randn(E, generator=g) * 0.1
    x64 = logits.double()
    scores = torch.sigmoid(x64) if score_func == "sigmoid" else torch.nn.functional.softplus(x64).sqrt()
    keys = torch.where(scores.isnan(), -1e300, scores + bias.double())
    want_ids = keys.sort(dim=-1, descending=True, stable=True).indices[:, :k]
    w = torch.where(scores.isnan(), 0.0, scores).gather(1, want_ids)
    want_w = w / (w.sum(-1, keepdim=True) + 1e-20) * scaling
    got = [moe_route(logits.to(DEVICE), bias.to(DEVICE), None, None, k, scaling, score_func)]
    got.append(ref_route(logits, bias, None, None, k, scaling, score_func))
    for ids, wts in got:
        ids, wts = ids.cpu(), wts.cpu()
        assert ids.tolist() == want_ids.tolist()
        assert bool(wts.isfinite().all())
        torch.testing.assert_close(wts.double(), want_w, rtol=1e-6, atol=1e-7)
    assert torch.equal(got[0][0].cpu(), got[1][0]) and torch.equal(got[0][1].cpu(), got[1][1])


def test_fused_moe_skips_out_of_range_expert_ids() -> None:
    """lightseekorg/tokenspeed#1461 (review: an out-of-range expert id from a NaN padding row
    poisons the MoE kernel after the router) and sgl-project/sglang#30079: expert ids ``-1`` and
    ``E`` (expert-parallel masks, padding) contribute nothing and a repeated id counts each time;
    the rest is the float64 expert MLP (oracle: float64 clamped SwiGLU MLP per selected expert)."""
    from sgl_kernel_v4.triton.moe import fused_moe

    g = torch.Generator().manual_seed(11)
    E, D, inter, limit = 4, 32, 16, 10.0
    x = torch.randn(3, D, generator=g)
    wgu = torch.randn(E, 2 * inter, D, generator=g) * 0.3
    wd = torch.randn(E, D, inter, generator=g) * 0.3
    ids = torch.tensor([[0, -1, 3], [E, 2, 2], [-1, E, -1]])
    wts = torch.rand(3, 3, generator=g)
    want = torch.zeros(3, D, dtype=torch.float64)
    for t in range(3):
        for j in range(3):
            e = int(ids[t, j])
            if not 0 <= e < E:
                continue
            gu = wgu[e].double() @ x[t].double()
            gate, up = gu[:inter].clamp(max=limit), gu[inter:].clamp(-limit, limit)
            want[t] += float(wts[t, j]) * (wd[e].double() @ (torch.nn.functional.silu(gate) * up))
    got = fused_moe(x.to(DEVICE), wgu.to(DEVICE), wd.to(DEVICE), ids.to(DEVICE), wts.to(DEVICE), limit)
    torch.testing.assert_close(got.double().cpu(), want, rtol=1e-5, atol=1e-5)
    assert bool((got[2] == 0).all())


def test_attention_ignores_nan_in_unused_pool_slots() -> None:
    """Dao-AILab/flash-attention#1745: NaN / inf in KV-cache slots past a sequence's length (never
    written, ``torch.empty``) leaked into the attention output. Every pool slot that no token's
    window or entry list reaches is NaN here; the output must equal the float64 attention over the
    listed slots only (oracle: ``kernels_attention_testutil.oracle``, float64 softmax with sink)."""
    g = torch.Generator().manual_seed(5)
    case = make_case(4, 2, 32, 64, "hca", torch.float32, g, e=32)
    case["pos"] = torch.tensor([5, 40, 130, 300])  # partial windows: unused slots in live pages
    used_swa, used_comp = set(), set()
    for t in range(4):
        for src, s in slot_lists(case, t):
            (used_swa if src == "swa" else used_comp).add(s)
    swa, comp = case["swa"].clone(), case["comp"].clone()
    swa[[i for i in range(swa.shape[0]) if i not in used_swa]] = float("nan")
    comp[[i for i in range(comp.shape[0]) if i not in used_comp]] = float("nan")
    case["swa"], case["comp"] = swa, comp
    want = oracle(case, swa.double(), comp.double())
    got = run(case, swa.to(DEVICE), comp.to(DEVICE)).double().cpu()
    assert not bool(got.isnan().any())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sink", [-1000.0, 1000.0])
def test_attention_sink_with_empty_or_swamped_rows(sink: float) -> None:
    """NVIDIA/cudnn-frontend#1095 and flashinfer-ai/flashinfer#4484: with an attention sink, a row
    with no key (empty window) must give 0, not NaN, for any sink magnitude (``exp(sink - max)``
    under- or overflows at +-1000); a sink that dwarfs every logit gives ~0 and a sink far below
    gives plain softmax attention (oracle: float64 softmax with the sink logit, 0 for empty rows)."""
    g = torch.Generator().manual_seed(6)
    case = make_case(3, 2, 32, 0, "swa", torch.float32, g)
    case["sinks"] = torch.full((2,), sink)
    case["swa_pages"][1] = -1  # empty window
    want = oracle(case, case["swa"].double(), None)
    got = run(case, case["swa"].to(DEVICE), None).double().cpu()
    assert not bool(got.isnan().any())
    assert bool((got[1] == 0).all())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)

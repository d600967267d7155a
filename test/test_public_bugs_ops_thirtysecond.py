"""A thirty-second set of public bug reports, replayed against the hot ops of ``sgl_kernel_v4``:
RMSNorm at odd, non-power-of-two and split-view hidden sizes, the per-1x128 e4m3 activation
quantization (ue8m0 power-of-two scales) at fp32 and at a hidden size that is no multiple of the
group, RoPE on sliced query / key views with wide head strides, the MoE router on a batch longer
than one program's row block, and the sampler's temperature scaling at a vocabulary one past its
slice width.

Fixture: the Triton kernels of ``sgl_kernel_v4.triton`` on CUDA, or on the CPU under
``TRITON_INTERPRET=1`` (``kernel_testutil``; tiny shapes, the interpreter is slow). In a CPU run
without the interpreter, :func:`test_cases_under_the_interpreter` runs them in a pytest subprocess
with ``TRITON_INTERPRET=1`` and requires every one to pass.
Oracles: float64 formulas written here: RMSNorm ``x / sqrt(mean(x^2) + eps) * w``; the e4m3
rounding of ``x / s`` (round to nearest, ties to even, on the e4m3 grid) with ``s`` the smallest
power of two ``>= amax / 448`` computed with exact fractions; the interleaved rotation of the
trailing pairs; ``sqrt(softplus)`` scores with a stable descending top-k and normalised weights;
``(x - max) / T``.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from fractions import Fraction

import pytest
import torch
from kernel_testutil import DEVICE

KERNEL = pytest.mark.skipif(DEVICE is None, reason="needs CUDA and triton, or TRITON_INTERPRET=1")

FP8_MAX = 448.0
GROUP = 128
#: The amax floor of the quantizer (DeepSeek's ``act_quant`` clamps amax to 1e-4), as float32.
AMAX_MIN = float(torch.tensor(1e-4, dtype=torch.float32))


def _rms_norm64(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    """float64 RMSNorm over the last dim: ``x / sqrt(mean(x^2) + eps) * w``."""
    x64 = x.double().cpu()
    y = x64 / torch.sqrt(x64.square().mean(-1, keepdim=True) + eps)
    return y if w is None else y * w.double().cpu()


def _pow2_scale(amax: float) -> float:
    """Smallest power of two ``>= amax / 448`` (exact fractions), DeepSeek's ue8m0 scale rule."""
    target = Fraction(amax) / Fraction(448)
    e = math.frexp(float(target))[1] - 1  # 2**e <= target (approximately): fix up exactly below
    while Fraction(2) ** e < target:
        e += 1
    while e > -200 and Fraction(2) ** (e - 1) >= target:
        e -= 1
    return 2.0**e


def _e4m3_round64(v: torch.Tensor) -> torch.Tensor:
    """float64 ``v`` (finite, ``|v| <= 448``) rounded to the e4m3fn grid, nearest, ties to even:
    the step is ``2**(e - 3)`` for ``|v|`` in ``[2**e, 2**(e+1))`` and ``2**-9`` below ``2**-6``."""
    a = v.abs()
    e = torch.floor(torch.log2(a.clamp_min(2.0**-6))).clamp_min(-6)
    step = torch.pow(2.0, e - 3)
    return torch.sign(v) * torch.round(a / step) * step  # torch.round: half to even


def _check_act_quant(x: torch.Tensor) -> None:
    """The Triton ``act_quant(x)`` and the torch reference (the CPU server's path) against the
    float64 oracle: every group's scale, every value's e4m3 byte."""
    from sgl_kernel_v4.ref.fp8_gemm import act_quant as ref_act_quant
    from sgl_kernel_v4.triton.fp8_act_quant import act_quant

    M, K = x.shape
    ng = -(-K // GROUP)
    x64 = x.double().cpu()
    for q, s in (act_quant(x.to(DEVICE)), ref_act_quant(x)):
        assert q.shape == (M, K) and s.shape == (M, ng)
        for m in range(M):
            for g in range(ng):
                cols = slice(g * GROUP, min(K, (g + 1) * GROUP))
                amax = x64[m, cols].abs().max().item()
                want_s = _pow2_scale(max(amax, AMAX_MIN))
                assert s[m, g].item() == want_s, (m, g, s[m, g].item(), want_s)
                want_q = _e4m3_round64((x64[m, cols] / want_s).clamp(-FP8_MAX, FP8_MAX))
                assert torch.equal(q[m, cols].double().cpu(), want_q), (m, g)


# --------------------------------------------------------------------------- RMSNorm
@KERNEL
def test_aiter_5044_rms_norm_odd_hidden_size_keeps_to_its_own_row() -> None:
    """ROCm/aiter#5044 (fix ROCm/aiter#5290): RMSNorm at an odd fp16 hidden size (769, 7 rows)
    wrote a row's tail over the next row's column 0. Here rows of 769 live in a wider buffer
    whose extra columns hold a sentinel: every row must equal the float64 RMSNorm and no
    sentinel may change (oracle: float64 formula)."""
    from sgl_kernel_v4.triton.norm import rms_norm

    g = torch.Generator().manual_seed(5044)
    T, D = 7, 769
    base = torch.randn(T, D + 3, generator=g)
    w = torch.randn(D, generator=g)
    x = base.to(DEVICE)[:, :D]  # row stride D + 3
    buf = torch.full((T, D + 3), 7.25, device=DEVICE)
    out = buf[:, :D]
    rms_norm(x, w.to(DEVICE), 1e-6, out=out)
    torch.testing.assert_close(out.double().cpu(), _rms_norm64(base[:, :D], w, 1e-6), rtol=1e-5, atol=1e-6)
    assert bool((buf[:, D:] == 7.25).all())


@KERNEL
def test_xpu_kernels_387_rms_norm_hidden_5120_at_odd_token_counts() -> None:
    """vllm-project/vllm-xpu-kernels#387: RMSNorm gave wrong rows at hidden sizes 5120 / 7168 for
    1, 8, 17 or 32 tokens, whose work-group size came out a non power of two. Our kernel tiles a
    row by a power of two >= D; each token count must give the float64 RMSNorm (oracle: float64
    formula), weighted and unweighted."""
    from sgl_kernel_v4.triton.norm import rms_norm

    g = torch.Generator().manual_seed(387)
    for T, D in ((1, 5120), (17, 7168)):
        x = torch.randn(T, D, generator=g)
        w = torch.rand(D, generator=g) + 0.5
        got = rms_norm(x.to(DEVICE), w.to(DEVICE), 1e-6)
        torch.testing.assert_close(got.double().cpu(), _rms_norm64(x, w, 1e-6), rtol=1e-5, atol=1e-6)
        got = rms_norm(x.to(DEVICE), None, 1e-6)
        torch.testing.assert_close(got.double().cpu(), _rms_norm64(x, None, 1e-6), rtol=1e-5, atol=1e-6)


@KERNEL
def test_xpu_kernels_396_rms_norm_of_a_split_projection() -> None:
    """vllm-project/vllm-xpu-kernels#396: RMSNorm indexed rows at ``hidden_size`` instead of the
    row stride, so the ``torch.split`` pieces of a fused projection (DeepSeek's fused
    ``q_a`` / ``kv_a``) were normalised from the wrong rows. The second split piece of a
    ``[B, S, 3D]`` projection (3-D, row stride 3D) must give the float64 RMSNorm of its own
    values (oracle: float64 formula)."""
    from sgl_kernel_v4.triton.norm import rms_norm

    g = torch.Generator().manual_seed(396)
    B, S, D = 2, 3, 40
    fused = torch.randn(B, S, 3 * D, generator=g)
    w = torch.rand(D, generator=g) + 0.5
    _, piece, _ = torch.split(fused.to(DEVICE), [D, D, D], dim=-1)
    assert not piece.is_contiguous()
    got = rms_norm(piece, w.to(DEVICE), 1e-6)
    assert got.shape == (B, S, D)
    want = _rms_norm64(fused[..., D : 2 * D], w, 1e-6)
    torch.testing.assert_close(got.double().cpu(), want, rtol=1e-5, atol=1e-6)
    # the torch reference (the CPU server's path) on the same split piece
    from sgl_kernel_v4.ref.norm import rms_norm as ref_rms_norm

    ref_piece = torch.split(fused, [D, D, D], dim=-1)[1]
    torch.testing.assert_close(ref_rms_norm(ref_piece, w, 1e-6).double(), want, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- fp8 activation quant
@KERNEL
def test_xpu_kernels_521_fp32_group_quant_scales_and_bytes() -> None:
    """vllm-project/vllm-xpu-kernels#521 (issue #520): per-token-group fp8 quantization of fp32
    input at group size 128+ reduced each group's absmax over the wrong lanes, giving garbage
    scales (1e19, 1e34) and corrupt bytes. Here fp32 rows of four 128-groups with magnitudes
    spread over many binades (and one all-zero group) must give, per group, the ue8m0 scale
    ``2**ceil(log2(amax / 448))`` and the e4m3 byte of every ``x / s`` (oracle: exact fractions
    and float64 rounding to the e4m3 grid)."""
    g = torch.Generator().manual_seed(521)
    x = torch.randn(5, 4 * GROUP, generator=g) * torch.logspace(-3, 3, 4 * GROUP)[None, :]
    x[2, GROUP : 2 * GROUP] = 0.0
    x[3, 3 * GROUP + 17] = -9000.0  # the group's amax sits mid-group
    _check_act_quant(x)


@KERNEL
def test_sglang_12883_group_quant_hidden_not_a_multiple_of_the_group() -> None:
    """sgl-project/sglang#12883: per-token fp8 quantization refused a hidden size of 1076 (not a
    multiple of 8) in a served FP8 MoE. At K = 1076 the last 1x128 group
    holds 52 columns: its scale must come from those alone, every byte must be the e4m3 rounding
    of ``x / s`` (oracle: exact fractions and float64), one token and zero tokens included."""
    g = torch.Generator().manual_seed(12883)
    x = torch.randn(3, 1076, generator=g)
    x[1, 1024:] *= 1e-3  # a tail group far smaller than the rest of its row
    _check_act_quant(x)
    _check_act_quant(x[:1].clone())
    from sgl_kernel_v4.triton.fp8_act_quant import act_quant

    q, s = act_quant(torch.empty(0, 1076, device=DEVICE))
    assert q.shape == (0, 1076) and s.shape == (0, 9)


# --------------------------------------------------------------------------- RoPE
def _rope64(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """float64 interleaved rotation of the trailing ``2 * cos.shape[1]`` channels; the leading
    channels are copied."""
    x64 = x.double().cpu().clone()
    r, D = 2 * cos.shape[1], x.shape[-1]
    a, b = x64[..., D - r :: 2].clone(), x64[..., D - r + 1 :: 2].clone()
    c, s_ = cos.double()[:, None, :], sin.double()[:, None, :]
    x64[..., D - r :: 2] = a * c - b * s_
    x64[..., D - r + 1 :: 2] = b * c + a * s_
    return x64


@KERNEL
def test_vllm_17091_rope_on_a_sliced_mla_query() -> None:
    """vllm-project/vllm#17091 (also #18046): MLA passes ``q[..., nope:]`` (a slice with row and
    head strides of the full head) to the rotary kernel, which ignored the first-dim stride and
    rotated other tokens' channels. The rope slice of a ``[T, H, nope + rope]`` query must get
    the float64 rotation of its own channels (oracle: float64 interleaved rotation)."""
    from sgl_kernel_v4.triton.rope import apply_rope

    g = torch.Generator().manual_seed(17091)
    T, H, nope, rope = 3, 4, 24, 16
    q = torch.randn(T, H, nope + rope, generator=g)
    ang = torch.rand(T, rope // 2, generator=g) * 6
    q_pe = q.to(DEVICE)[..., nope:]
    assert q_pe.stride() == (H * (nope + rope), nope + rope, 1)
    got = apply_rope(q_pe, ang.cos().to(DEVICE), ang.sin().to(DEVICE))
    want = _rope64(q[..., nope:], ang.cos(), ang.sin())
    torch.testing.assert_close(got.double().cpu(), want, rtol=1e-5, atol=1e-5)


@KERNEL
def test_sglang_20559_rope_with_wide_head_stride_and_one_key_head() -> None:
    """sgl-project/sglang#20559: the rope kernel read out of bounds / wrong heads for q of shape
    ``[8, 64, 64]`` with head stride 256 next to a k of one head with token stride 2624. A query
    whose heads sit 4 head-widths apart and a one-head key whose tokens sit at an odd stride must
    each get the float64 rotation (oracle: float64 interleaved rotation); in place too."""
    from sgl_kernel_v4.triton.rope import apply_rope

    g = torch.Generator().manual_seed(20559)
    T, H, D = 3, 4, 16
    ang = torch.rand(T, D // 2, generator=g) * 6
    cos, sin = ang.cos().to(DEVICE), ang.sin().to(DEVICE)
    q_store = torch.randn(T, H, 4 * D, generator=g)
    q = q_store.to(DEVICE)[..., :D]  # head stride 4 * D
    got = apply_rope(q, cos, sin)
    torch.testing.assert_close(
        got.double().cpu(), _rope64(q_store[..., :D], ang.cos(), ang.sin()), rtol=1e-5, atol=1e-5
    )
    k_store = torch.randn(T, 41, generator=g)
    k = k_store.to(DEVICE)[:, 5 : 5 + D].unsqueeze(1)  # [T, 1, D], token stride 41
    want = _rope64(k_store[:, 5 : 5 + D].unsqueeze(1), ang.cos(), ang.sin())
    apply_rope(k, cos, sin, out=k)  # in place on the strided view
    torch.testing.assert_close(k.double().cpu(), want, rtol=1e-5, atol=1e-5)
    # the channels around the view are untouched
    assert torch.equal(k_store.to(DEVICE)[:, :5].cpu(), k_store[:, :5])


# --------------------------------------------------------------------------- MoE router
@KERNEL
def test_mirage_764_router_covers_rows_past_the_first_block() -> None:
    """mirage-project/mirage#764: the MoE router visited only the rows of its first thread block
    (16 for 128 experts); later tokens kept zero weights and index 0. A batch of 37 tokens (over
    four of our row blocks, the last partial) must route every token to the float64 oracle's
    experts and weights (oracle: ``sqrt(softplus)`` scores + bias, stable descending top-k,
    weights ``w / sum * scaling``)."""
    from sgl_kernel_v4.triton.moe_router import moe_route

    g = torch.Generator().manual_seed(764)
    T, E, k, scaling = 37, 64, 6, 2.5
    logits = torch.randn(T, E, generator=g) * 3
    bias = torch.randn(E, generator=g) * 0.1
    ids, w = moe_route(logits.to(DEVICE), bias.to(DEVICE), None, None, k, scaling)
    scores = torch.nn.functional.softplus(logits.double()).sqrt()
    keys = scores + bias.double()
    want_ids = torch.sort(keys, dim=-1, descending=True, stable=True).indices[:, :k]
    sel = scores.gather(1, want_ids)
    want_w = sel / sel.sum(-1, keepdim=True) * scaling
    assert torch.equal(ids.cpu(), want_ids)
    torch.testing.assert_close(w.double().cpu(), want_w, rtol=1e-5, atol=1e-6)
    from sgl_kernel_v4.ref.moe_router import moe_route as ref_moe_route

    ref_ids, ref_w = ref_moe_route(logits, bias, None, None, k, scaling)
    assert torch.equal(ref_ids, want_ids)
    torch.testing.assert_close(ref_w.double(), want_w, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- sampling
@KERNEL
def test_exllamav2_778_temperature_scaling_at_vocab_one_past_the_slice() -> None:
    """turboderp-org/exllamav2#778 (also flashinfer-ai/flashinfer#211): the sampler broke at
    a vocabulary one past an aligned size (40001 failed where 40000 worked). Here V = 4097 is one
    past the kernel's 4096-wide slice and the row's maximum sits in that last one-element slice;
    two rows, one with a NaN logit: every entry must be ``(x - max) / T`` of the finite logits,
    ``-inf`` for the NaN (oracle: float64 formula)."""
    from sgl_kernel_v4.triton.sampling import scale_by_temperature

    g = torch.Generator().manual_seed(778)
    B, V = 2, 4097
    z = torch.randn(B, V, generator=g) * 4
    z[:, -1] = 30.0  # the maximum in the tail slice
    z[1, 123] = float("nan")
    temps = torch.tensor([0.7, 1.3])
    got = scale_by_temperature(z.to(DEVICE), temps.to(DEVICE)).double().cpu()
    z64 = z.double()
    want = (z64 - 30.0) / temps.double()[:, None]
    want[1, 123] = float("-inf")
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    assert got[:, -1].eq(0).all()


@pytest.mark.skipif(DEVICE is not None, reason="the cases ran in this process")
def test_cases_under_the_interpreter() -> None:
    """Without CUDA or ``TRITON_INTERPRET=1`` the kernel cases above skip here (Triton picks the
    interpreter when a kernel is defined, at import): this runs them in a pytest subprocess with
    ``TRITON_INTERPRET=1`` and requires all of them to pass, none skipped."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_V4_LAUNCH_LOG"}
    env["TRITON_INTERPRET"] = "1"
    own = [here, os.path.join(root, "python"), os.path.join(root, "sgl-kernel-v4")]
    env["PYTHONPATH"] = os.pathsep.join([*own, *filter(None, [os.environ.get("PYTHONPATH")])])
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--noconftest",
        "-rs",
        os.path.abspath(__file__),
    ]
    proc = subprocess.run(
        cmd + ["-k", "not under_the_interpreter"], cwd=here, env=env, capture_output=True, text=True
    )
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    n_cases = sum(1 for name in globals() if name.startswith("test_")) - 1
    assert proc.returncode == 0, tail
    assert re.search(rf"\b{n_cases} passed\b", tail) and "skipped" not in tail, tail

"""MoE router and shared-expert activation: Triton ``moe_route`` / ``swiglu_clamped`` vs their torch
references, and the references vs the router code they replaced.

The kernel tests are marked ``gpu`` and run on CUDA or under ``TRITON_INTERPRET=1`` (elementwise
and reductions only, so bf16 runs in the interpreter too); the reference tests run on the CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_testutil import DEVICE

ROUTE_CASES = [
    # T, E, k
    (1, 32, 6),
    (5, 32, 8),
    (37, 256, 6),
    (300, 256, 8),
]
DTYPES = [torch.float32, torch.bfloat16]


def old_router(
    logits: torch.Tensor, bias: torch.Tensor | None, ids: torch.Tensor | None, k: int, scaling: float
):
    """The torch code ``layers/moe.py`` ran before ``moe_route`` (HF ``DeepseekV4TopKRouter`` maths)."""
    scores = F.softplus(logits.double()).sqrt().to(logits.dtype)
    if ids is None:
        ids = torch.topk(scores + bias, k, dim=-1, sorted=False).indices
    w = scores.gather(1, ids)
    w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return ids, (w * scaling).float()


def _logits(T: int, E: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(T, E, generator=gen) * 3).to(dtype)
    bias = torch.randn(E, generator=gen) * 0.1
    return logits, bias


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,E,k", ROUTE_CASES)
def test_reference_matches_the_replaced_router(T: int, E: int, k: int, dtype: torch.dtype) -> None:
    """Without ties, the reference selects the same experts as the torch.topk code it replaced, with
    the same weights: bit for bit for bf16 logits (the model dtype: a float32 sum of <= 8 bf16
    values is exact in any order), within an ulp for float32 logits (the reference sums in slot
    order, torch in its own); the slot order is now defined (descending key)."""
    from sgl_kernel_v4.ref.moe_router import moe_route

    logits, bias = _logits(T, E, dtype, T + E + k)
    ids, w = moe_route(logits, bias, None, None, k, 2.5)
    old_ids, old_w = old_router(logits, bias, None, k, 2.5)
    keys = F.softplus(logits.double()).sqrt().to(dtype).float() + bias
    if (keys.sort(dim=-1).values.diff(dim=-1) == 0).any():
        pytest.skip("random keys tie")
    o1, o2 = ids.sort(dim=-1), old_ids.sort(dim=-1)
    assert torch.equal(o1.values, o2.values)

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return torch.equal(a, b) if dtype != torch.float32 else torch.allclose(a, b, rtol=5e-7, atol=0)

    assert same(w.gather(1, o1.indices), old_w.gather(1, o2.indices))
    assert (keys.gather(1, ids).diff(dim=-1) < 0).all()  # descending key order
    tid2eid = torch.stack([torch.randperm(E)[:k] for _ in range(64)])
    tok = torch.randint(0, 64, (T,))
    h_ids, h_w = moe_route(logits, None, tid2eid, tok, k, 1.5)
    oh_ids, oh_w = old_router(logits, None, tid2eid[tok], k, 1.5)
    assert torch.equal(h_ids, oh_ids) and same(h_w, oh_w)


def test_reference_tie_rule_lower_expert_id_wins() -> None:
    """Equal keys: the lower expert id is selected and listed first (a hand-built oracle)."""
    from sgl_kernel_v4.ref.moe_router import moe_route

    E, k = 32, 6
    logits = torch.zeros(3, E)
    logits[1, [3, 9, 17, 30]] = 1.0  # four equal winners, then 28 equal losers
    logits[2] = torch.arange(E).float().flip(0) % 4  # ids 0, 4, 8 ... share the top key (3)
    ids, w = moe_route(logits, torch.zeros(E), None, None, k, 1.0)
    assert ids[0].tolist() == [0, 1, 2, 3, 4, 5]
    assert ids[1].tolist() == [3, 9, 17, 30, 0, 1]
    assert ids[2].tolist() == [0, 4, 8, 12, 16, 20]
    assert torch.allclose(w[0], torch.full((k,), 1 / k))


def _route_inputs(T: int, E: int, k: int, dtype: torch.dtype):
    logits, bias = _logits(T, E, dtype, 7 * T + E + k)
    logits[0, : E // 2] = logits[0, E // 2]  # ties in the scores (and in the keys: bias tied below)
    bias[: E // 4] = 0.0
    if T > 2:
        logits[2] = 0.0  # every key of a token equal up to the bias
        logits[1, :8] = 25.0  # softplus's linear branch (x > 20)
    tid2eid = torch.stack([torch.randperm(E)[:k] for _ in range(100)])
    tok = torch.randint(0, 100, (T,))
    return logits, bias, tid2eid, tok


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,E,k", ROUTE_CASES)
def test_moe_route_kernel_bit_equal(T: int, E: int, k: int, dtype: torch.dtype) -> None:
    """Triton ``moe_route`` == the torch reference, bit for bit (ids and weights), top-k and hash."""
    if DEVICE is None:
        pytest.skip("needs CUDA and triton (or TRITON_INTERPRET=1)")
    from sgl_kernel_v4.ref.moe_router import moe_route as ref
    from sgl_kernel_v4.triton.moe_router import moe_route

    logits, bias, tid2eid, tok = _route_inputs(T, E, k, dtype)
    want = ref(logits, bias, None, None, k, 2.5)
    got = moe_route(logits.to(DEVICE), bias.to(DEVICE), None, None, k, 2.5)
    assert got[0].dtype == torch.int64 and got[1].dtype == torch.float32 and got[0].shape == (T, k)
    assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    want = ref(logits, None, tid2eid, tok, k, 1.5)
    got = moe_route(logits.to(DEVICE), None, tid2eid.to(DEVICE), tok.to(DEVICE), k, 1.5)
    assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,E,k", [(5, 32, 8), (37, 256, 6)])
def test_moe_route_kernel_sigmoid_bit_equal(T: int, E: int, k: int, dtype: torch.dtype) -> None:
    """``scoring_func="sigmoid"``: Triton ``moe_route`` == the torch reference, bit for bit."""
    if DEVICE is None:
        pytest.skip("needs CUDA and triton (or TRITON_INTERPRET=1)")
    from sgl_kernel_v4.ref.moe_router import moe_route as ref
    from sgl_kernel_v4.triton.moe_router import moe_route

    logits, bias, tid2eid, tok = _route_inputs(T, E, k, dtype)
    logits[-1, :4] = -800.0  # exp(-x) overflows float64: score 0
    want = ref(logits, bias, None, None, k, 2.5, "sigmoid")
    got = moe_route(logits.to(DEVICE), bias.to(DEVICE), None, None, k, 2.5, "sigmoid")
    assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    want = ref(logits, None, tid2eid, tok, k, 1.5, "sigmoid")
    got = moe_route(logits.to(DEVICE), None, tid2eid.to(DEVICE), tok.to(DEVICE), k, 1.5, "sigmoid")
    assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])


@pytest.mark.parametrize("is_hash", [False, True])
def test_reference_sigmoid_matches_hf_router(is_hash: bool) -> None:
    """``scoring_func="sigmoid"``: the reference selects HF's experts with HF's weights
    (``DeepseekV4TopKRouter`` / ``DeepseekV4HashRouter`` of transformers as the oracle)."""
    from sgl_kernel_v4.ref.moe_router import moe_route
    from transformers import DeepseekV4Config
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import (
        DeepseekV4HashRouter,
        DeepseekV4TopKRouter,
    )

    T, E, k, D = 40, 16, 3, 24
    cfg = DeepseekV4Config(
        hidden_size=D, n_routed_experts=E, num_experts_per_tok=k, vocab_size=50,
        scoring_func="sigmoid", routed_scaling_factor=2.5, num_hidden_layers=2,
    )  # fmt: skip
    gen = torch.Generator().manual_seed(3)
    router = DeepseekV4HashRouter(cfg) if is_hash else DeepseekV4TopKRouter(cfg)
    with torch.no_grad():
        router.weight.copy_(torch.randn(E, D, generator=gen))
        if is_hash:
            router.tid2eid.copy_(torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(50)]))
        else:
            router.e_score_correction_bias.copy_(torch.randn(E, generator=gen) * 0.1)
    x = torch.randn(T, D, generator=gen)
    tok = torch.randint(0, 50, (T,), generator=gen)
    with torch.no_grad():
        _, hf_w, hf_ids = router(x, tok) if is_hash else router(x)
    logits = x @ router.weight.detach().T
    if is_hash:
        ids, w = moe_route(logits, None, router.tid2eid, tok, k, 2.5, "sigmoid")
    else:
        ids, w = moe_route(logits, router.e_score_correction_bias, None, None, k, 2.5, "sigmoid")
    o1, o2 = ids.sort(dim=-1), hf_ids.sort(dim=-1)
    assert torch.equal(o1.values, o2.values)
    torch.testing.assert_close(w.gather(1, o1.indices), hf_w.float().gather(1, o2.indices), rtol=1e-6, atol=0)


def test_reference_rejects_unknown_score_func() -> None:
    from sgl_kernel_v4.ref.moe_router import moe_route

    with pytest.raises(ValueError, match="scoring_func"):
        moe_route(torch.zeros(2, 8), torch.zeros(8), None, None, 2, 1.0, "softmax")


@pytest.mark.gpu
def test_moe_route_kernel_edge_cases() -> None:
    if DEVICE is None:
        pytest.skip("needs CUDA and triton (or TRITON_INTERPRET=1)")
    from sgl_kernel_v4.triton.moe_router import moe_route

    logits = torch.randn(4, 32, device=DEVICE)
    bias = torch.zeros(32, device=DEVICE)
    ids, w = moe_route(logits[:0], bias, None, None, 6, 1.0)
    assert ids.shape == (0, 6) and w.shape == (0, 6)
    with pytest.raises(ValueError, match="exactly one"):
        moe_route(logits, None, None, None, 6, 1.0)
    with pytest.raises(ValueError, match="top_k"):
        moe_route(logits, bias, None, None, 33, 1.0)
    # a strided [T, E] view (rows of a wider tensor) routes like its contiguous copy
    wide = torch.randn(4, 48, device=DEVICE)
    a = moe_route(wide[:, :32], bias, None, None, 6, 1.0)
    b = moe_route(wide[:, :32].contiguous(), bias, None, None, 6, 1.0)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def _ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in units of the last place of ``a``'s dtype (same-sign finite values)."""
    it = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[a.dtype]
    return (a.view(it).long() - b.view(it).long()).abs()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("T,inter,stride_pad", [(1, 64, 0), (37, 320, 0), (5, 1536, 16)])
def test_swiglu_clamped_kernel_vs_reference(T: int, inter: int, stride_pad: int, dtype: torch.dtype) -> None:
    """Triton clamped SwiGLU == ``ref.moe.swiglu_clamped`` within one ulp of the dtype (the two
    ``expf`` may differ by an ulp in float32; on CUDA both are libdevice's; float32 a few ulp) and,
    for bf16 / fp16, bit-equal on almost every element; the clamps are exercised on both sides."""
    if DEVICE is None:
        pytest.skip("needs CUDA and triton (or TRITON_INTERPRET=1)")
    from sgl_kernel_v4.ref.moe import swiglu_clamped as ref
    from sgl_kernel_v4.triton.activation import swiglu_clamped

    gen = torch.Generator().manual_seed(T + inter)
    full = (torch.randn(T, 2 * inter + stride_pad, generator=gen) * 8).to(dtype)
    gu = full[:, : 2 * inter]  # a row stride other than 2I when padded
    limit = 10.0
    assert (gu[:, :inter] > limit).any() and (gu[:, inter:].abs() > limit).any()
    want = ref(gu, limit)
    got = swiglu_clamped(gu.to(DEVICE), limit).cpu()
    assert got.shape == (T, inter) and got.dtype == dtype
    sign_ok = (got.float() * want.float() >= 0).all()
    # float32: numpy's expf (interpreter) vs torch's vectorised one, a few ulp; halves: one ulp
    assert sign_ok and _ulps(got, want).max() <= (4 if dtype == torch.float32 else 1)
    if dtype != torch.float32:
        assert (got != want).float().mean() < 0.01


@pytest.mark.gpu
def test_swiglu_clamped_kernel_empty_and_bad_input() -> None:
    if DEVICE is None:
        pytest.skip("needs CUDA and triton (or TRITON_INTERPRET=1)")
    from sgl_kernel_v4.triton.activation import swiglu_clamped

    assert swiglu_clamped(torch.empty(0, 64, device=DEVICE), 10.0).shape == (0, 32)
    with pytest.raises(ValueError, match="gate_up"):
        swiglu_clamped(torch.empty(3, 63, device=DEVICE), 10.0)

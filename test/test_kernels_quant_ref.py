"""CPU tests of the FP8-linear and FP4-MoE torch references (the CPU path of the quantized layers)
against the float64 oracles of ``quant_testutil``, and their place in the op table."""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import rel_err
from quant_testutil import (
    act_quant64,
    e4m3_rounding_cases,
    fp4_weight64,
    fp8_weight64,
    linear64,
    moe64,
    random_fp4_experts,
    random_fp8_weight,
)
from sgl_kernel_v4 import ops
from sgl_kernel_v4.ref import fp8_gemm as ref_fp8
from sgl_kernel_v4.ref import moe_fp4 as ref_fp4


@pytest.mark.parametrize("T,G,N,K", [(3, 1, 200, 300), (4, 2, 96, 256), (1, 8, 32, 128)])
def test_fp8_linear_reference(T: int, G: int, N: int, K: int) -> None:
    gen = torch.Generator().manual_seed(T + G + N)
    w, s = random_fp8_weight(G * N, K, gen)
    x = torch.randn(T, G, K, generator=gen) if G > 1 else torch.randn(T, K, generator=gen)
    w64 = fp8_weight64(w, s)
    exact = ops.fp8_linear(x, w, s)  # CPU: the reference, weight-only (the oracle path)
    assert exact.dtype == torch.float32 and rel_err(exact, linear64(x, w64, G)) < 1e-6
    aq = ref_fp8.fp8_linear(x, w, s, "w8a8")
    want = linear64(act_quant64(x.reshape(-1, K)).reshape(x.shape), w64, G)
    assert rel_err(aq, want) < 1e-6
    # one float32 rounding of (e4m3 x float32 scale)
    torch.testing.assert_close(ref_fp8.dequant_fp8_block(w, s).double(), w64, rtol=2**-24, atol=0)


def test_act_quant_reference() -> None:
    x = torch.randn(9, 300, generator=torch.Generator().manual_seed(3)) * 5
    x[2, 128:256] = 0.0
    q, s = ref_fp8.act_quant(x)
    assert torch.equal(ref_fp8.dequant_act(q, s).double(), act_quant64(x))


def test_act_quant_reference_rounds_ties_to_even() -> None:
    """Every e4m3 tie and near-tie (normal and subnormal, both signs, four scales): the reference
    rounds them itself, so the host's float -> float8 cast does not decide them."""
    x = e4m3_rounding_cases()
    q, s = ref_fp8.act_quant(x)
    assert torch.equal(ref_fp8.dequant_act(q, s).double(), act_quant64(x))


def test_fp4_experts_reject_scales_over_two() -> None:
    """FP4 expert scale bytes above 128 (scales over 2) are refused with the buffer's name at the
    first forward; 128 itself runs."""
    from sglang_v4.layers.moe import Experts

    ex = Experts(4, 64, 32, 10.0, torch.float32, "cpu", quant="fp4")
    for buf in (ex.gate_up_proj, ex.down_proj):
        buf.data.random_(0, 256)
    ex.gate_up_proj_scale_inv.fill_(120)
    ex.down_proj_scale_inv.fill_(128)
    x, ids, w = torch.randn(2, 64), torch.tensor([[0, 1], [2, 3]]), torch.rand(2, 2)
    assert ex(x, ids, w).shape == (2, 64)
    ex._scales_checked = False
    ex.down_proj_scale_inv[1, 3, 0] = 129
    with pytest.raises(ValueError, match="down_proj_scale_inv"):
        ex(x, ids, w)


def test_fp8_reference_bad_args() -> None:
    w = torch.zeros(256, 128, dtype=torch.float8_e4m3fn)
    x = torch.zeros(2, 128)
    with pytest.raises(ValueError, match="weight_scale"):
        ops.fp8_linear(x, w, torch.ones(1, 1))
    with pytest.raises(ValueError, match="x: expected"):
        ops.fp8_linear(torch.zeros(2), w, torch.ones(2, 1))
    with pytest.raises(ValueError, match="groups"):
        ops.fp8_linear(torch.zeros(2, 3, 128), w, torch.ones(2, 1))
    with pytest.raises(ValueError, match="variant"):
        ref_fp8.fp8_linear(x, w, torch.ones(2, 1), "int4")


def test_fused_moe_fp4_reference() -> None:
    gen = torch.Generator().manual_seed(9)
    E, D, I, k, T = 4, 64, 32, 2, 5  # noqa: E741
    w13, s13, w2, s2 = random_fp4_experts(E, D, I, gen)
    x = torch.randn(T, D, generator=gen)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    ids[0, 0] = -1
    ids[3, 1] = E
    wts = torch.rand(T, k, generator=gen)
    out = ops.fused_moe_fp4(x, w13, s13, w2, s2, ids, wts, 5.0)
    want = moe64(x, fp4_weight64(w13, s13), fp4_weight64(w2, s2), ids, wts, 5.0)
    assert rel_err(out, want) < 1e-6
    assert torch.equal(ref_fp4.dequant_fp4(w13, s13).double(), fp4_weight64(w13, s13))
    # the dequantized values are exact in bf16 (at most two significant bits x a power of two)
    assert torch.equal(ref_fp4.dequant_fp4(w13, s13, torch.bfloat16).double(), fp4_weight64(w13, s13))
    with pytest.raises(ValueError, match="w2_scale"):
        ops.fused_moe_fp4(x, w13, s13, w2, s2[:, :, :0], ids, wts, 5.0)
    with pytest.raises(ValueError, match="w13"):
        ops.fused_moe_fp4(x, w13[:, :, :-1], s13, w2, s2, ids, wts, 5.0)


def test_op_table_entries() -> None:
    assert ops.get_op("fp8_linear", "cpu") is ref_fp8.fp8_linear
    assert ops.get_op("fused_moe_fp4", "cpu") is ref_fp4.fused_moe_fp4
    assert {"fp8_linear", "fused_moe_fp4"} <= set(ops.OP_NAMES)

"""The shared expert's fused ``[gate | up]`` weight: loaded checkpoints (FP8 as published, bf16, dummy
weights) fill it through the unchanged ``gate_proj`` / ``up_proj`` names, and the fused forward
(one GEMM) equals the unfused one (two GEMMs + ``torch.cat``, the code before the fusion) on the CPU.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from dsv4_testutil import CONFIGS
from sgl_kernel_v4 import ops
from sgl_kernel_v4.ref.moe import swiglu_clamped
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.layers.moe import SharedMLP
from sglang_v4.layers.quantization import QuantConfig
from sglang_v4.model_loader.dummy import init_dummy_weights
from sglang_v4.model_loader.loader import load_weights_into
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.tools.make_checkpoint import write_checkpoint


def unfused_shared(m: SharedMLP, x: torch.Tensor) -> torch.Tensor:
    """The shared-expert forward before the fusion (two Linear calls, cat, torch SwiGLU)."""
    gu = torch.cat([m.gate_proj(x), m.up_proj(x)], dim=-1)
    return m.down_proj(swiglu_clamped(gu, m.limit))


def _cfg(inter: int) -> dict:
    cfg = copy.deepcopy(CONFIGS["sliding_first"])
    cfg["moe_intermediate_size"] = inter
    return ModelConfig.from_dict(cfg).to_dict()


def _check_fused(model: DeepseekV4ForCausalLM, expect_fused: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    for layer in model.model.layers:
        m = layer.mlp.shared_experts
        assert (m._gate_up is not None) == expect_fused
        x = torch.randn(7, m.gate_proj.in_features, generator=gen)
        if expect_fused:
            w, s = m._gate_up
            assert torch.equal(
                w.view(torch.uint8), torch.cat([m.gate_proj.weight, m.up_proj.weight]).view(torch.uint8)
            )
            if s is not None:
                assert torch.equal(s, torch.cat([m.gate_proj.weight_scale_inv, m.up_proj.weight_scale_inv]))
            assert w.abs().float().sum() > 0  # filled by the loader, not left empty
        want = unfused_shared(m, x)
        assert torch.equal(m(x), want)


@pytest.mark.parametrize("weights,inter,quant,fused", [
    ("fp8", 128, QuantConfig(), True),  # FP8 kept: 128-row scale blocks concatenate
    ("fp8", 32, QuantConfig(), False),  # FP8 with I % 128 != 0: two GEMMs (unchanged)
    ("fp8", 32, None, True),  # dequantized at load
    ("bf16", 32, None, True),
])  # fmt: skip
def test_checkpoint_fills_the_fused_gate_up(tmp_path, weights: str, inter: int, quant, fused: bool) -> None:
    path = write_checkpoint(
        str(tmp_path / "ck"), fmt="official", weights=weights, seed=3, config_dict=_cfg(inter)
    )
    mc = ModelConfig.from_pretrained(path)
    model = DeepseekV4ForCausalLM(mc, torch.float32, "cpu", quant)
    names = set(model.state_dict())
    assert "model.layers.1.mlp.shared_experts.gate_proj.weight" in names
    assert not any("_gate_up" in n for n in names)
    load_weights_into(model, path, progress=False)
    _check_fused(model, fused)


def test_dummy_weights_fill_the_fused_gate_up() -> None:
    mc = ModelConfig.from_dict(_cfg(128))
    model = DeepseekV4ForCausalLM(mc, torch.float32, "cpu", QuantConfig())
    init_dummy_weights(model, seed=0)
    _check_fused(model, True)


def test_reallocated_halves_fall_back_to_two_gemms() -> None:
    """A weight replaced after construction (no longer a view of the fused tensor) is still used."""
    m = SharedMLP(64, 32, 10.0, torch.float32, "cpu")
    gen = torch.Generator().manual_seed(0)
    for lin in (m.gate_proj, m.up_proj, m.down_proj):
        lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen) * 0.3)
    x = torch.randn(5, 64, generator=gen)
    before = m(x)
    assert torch.equal(before, unfused_shared(m, x))
    m.up_proj.weight = torch.nn.Parameter(m.up_proj.weight * 2, requires_grad=False)
    after = m(x)
    assert torch.equal(after, unfused_shared(m, x)) and not torch.equal(after, before)


def test_fused_gemm_is_the_concatenation() -> None:
    """Independent oracle: the fused GEMM's output columns are ``x @ gate^T`` then ``x @ up^T``."""
    m = SharedMLP(64, 32, 10.0, torch.float32, "cpu")
    gen = torch.Generator().manual_seed(2)
    for lin in (m.gate_proj, m.up_proj):
        lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen))
    x = torch.randn(3, 64, generator=gen)
    gu = m.gate_up(x).double()
    assert torch.allclose(gu[:, :32], F.linear(x.double(), m.gate_proj.weight.double()), atol=1e-4)
    assert torch.allclose(gu[:, 32:], F.linear(x.double(), m.up_proj.weight.double()), atol=1e-4)
    assert ops.get_op("swiglu_clamped", "cpu") is swiglu_clamped

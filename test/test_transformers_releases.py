"""What differs between the transformers releases users may have (5.17 on), pinned without them.

The model is read through transformers (``DeepseekV4Config`` parses ``config.json``; YaRN comes
from ``transformers.modeling_rope_utils``), and HF's ``DeepseekV4ForCausalLM`` is the logits
oracle of the parity tests. The releases 5.17 to 5.25 give bit-identical float32 logits on the
same weights, but some changed what the runtime reads or what a bfloat16 model computes
(``docs/MODEL_NOTES.md``, "transformers releases"). These tests pin the runtime's behaviour
against references that do not come from the installed release:

* RMSNorm in bfloat16: normalised and weighted in float32, rounded once to the input's dtype, as
  DeepSeek's reference (deepseek-ai/DeepSeek-V4-Flash, ``inference/model.py``) and transformers
  from 5.20 on compute it. Before 5.20 transformers rounded the normalised input to bfloat16
  first and returned float32 (a bfloat16 model of those releases fails in its first linear).
  Oracle: float64 evaluation of the reference formula.
* The compress rope's YaRN frequencies: DeepSeek's ``precompute_freqs_cis`` in float64, from the
  official ``config.json``'s own numbers (``rope_scaling``, ``compress_rope_theta``,
  ``qk_rope_head_dim``), also when ``max_position_embeddings`` is not ``factor`` times
  ``original_max_position_embeddings`` (a shortened context must not change the frequencies).
* ``expert_dtype``: transformers 5.21 on copies a top-level ``expert_dtype`` into
  ``quantization_config`` (DeepSeek-V4.1's place for it); 5.17 to 5.20 leave it at the top level
  only. The three layouts (top level only, both, inside the block only) resolve the same
  quantization.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from sgl_kernel_v4 import ops
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.layers.quantization import QuantConfig, declared_expert_dtype, resolve_quantization
from sglang_v4.layers.rotary_embedding import RotaryTables

FLASH = json.loads(
    (Path(__file__).parent / "fixtures" / "configs" / "DeepSeek-V4-Flash.config.json").read_text()
)


# ------------------------------------------------------------------------------------ RMSNorm
def _bf16_ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in bfloat16 steps between two bfloat16 tensors of one sign pattern."""
    ia, ib = a.view(torch.int16).to(torch.int32), b.view(torch.int16).to(torch.int32)
    return (ia - ib).abs()


def test_rms_norm_rounds_once_in_the_input_dtype() -> None:
    g = torch.Generator().manual_seed(0)
    x = (3.0 * torch.randn(64, 512, generator=g)).to(torch.bfloat16)
    w = 1.0 + 0.1 * torch.randn(512, generator=g)  # float32, not bfloat16-representable
    eps = 1e-6
    got = ops.rms_norm(x, w, eps)
    assert got.dtype == torch.bfloat16 and got.shape == x.shape
    x64 = x.double()
    normed = x64 * torch.rsqrt(x64.square().mean(-1, keepdim=True) + eps)
    want = (w.double() * normed).to(torch.bfloat16)
    ulps = _bf16_ulps(got, want)
    # float32 evaluation then one rounding: at most one step off the float64 value's rounding, and
    # only where float32's error crosses a bfloat16 rounding boundary (rare)
    assert int(ulps.max()) <= 1 and float((ulps > 0).float().mean()) < 1e-3
    # the input rounded to bfloat16 before the weight (transformers before 5.20) is another result
    # on these inputs, so this test tells the two apart
    two_roundings = (w.double() * normed.to(torch.bfloat16).double()).to(torch.bfloat16)
    assert float((_bf16_ulps(two_roundings, want) > 0).float().mean()) > 0.05


# ------------------------------------------------------------------------------------ YaRN
def _reference_yarn_inv_freq(
    dim: int, original_seq_len: int, base: float, factor: float, beta_fast: float, beta_slow: float
) -> torch.Tensor:
    """DeepSeek's ``precompute_freqs_cis`` frequencies (V4 reference inference code), in float64."""

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original_seq_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    smooth = 1 - ramp
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    return freqs / factor * (1 - smooth) + freqs * smooth


@pytest.mark.parametrize("max_position_embeddings", [None, 262144], ids=["published", "shortened-context"])
def test_compress_rope_yarn_matches_the_reference(max_position_embeddings: int | None) -> None:
    raw = copy.deepcopy(FLASH)
    if max_position_embeddings is not None:
        raw["max_position_embeddings"] = max_position_embeddings
    rt = RotaryTables(ModelConfig.from_dict(raw), "cpu")
    ys = FLASH["rope_scaling"]
    dim = FLASH["qk_rope_head_dim"]
    want = _reference_yarn_inv_freq(
        dim, ys["original_max_position_embeddings"], float(FLASH["compress_rope_theta"]),
        float(ys["factor"]), float(ys["beta_fast"]), float(ys["beta_slow"]),
    )  # fmt: skip
    got = rt.inv_freq["compress"].double()
    assert got.shape == want.shape == (dim // 2,)
    assert torch.allclose(got, want, rtol=2e-6, atol=0)
    # YaRN actually interpolates here: the low frequencies are ``factor`` times lower than plain rope
    plain = 1.0 / (
        float(FLASH["compress_rope_theta"]) ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    )
    assert torch.allclose(got[-1], plain[-1] / ys["factor"], rtol=2e-6)
    assert rt.scaling["compress"] == 1.0  # the reference does not scale cos / sin (no YaRN mscale)
    # sliding-window layers: plain rope of ``rope_theta``, unscaled
    main = 1.0 / (float(FLASH["rope_theta"]) ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    assert torch.allclose(rt.inv_freq["main"].double(), main, rtol=2e-6, atol=0)
    assert rt.scaling["main"] == 1.0


# ------------------------------------------------------------------------------------ expert_dtype
def _layouts() -> dict[str, object]:
    """The parsed Flash config with ``expert_dtype`` where each transformers release (or a
    DeepSeek-V4.1-style file) leaves it."""
    base = ModelConfig.from_dict(copy.deepcopy(FLASH)).hf
    qc = {k: v for k, v in dict(base.quantization_config).items() if k != "expert_dtype"}
    top_only, both, block_only = (copy.deepcopy(base) for _ in range(3))
    top_only.quantization_config = dict(qc)  # transformers 5.17 to 5.20
    top_only.expert_dtype = "fp4"
    both.quantization_config = {**qc, "expert_dtype": "fp4"}  # transformers 5.21 on
    both.expert_dtype = "fp4"
    block_only.quantization_config = {**qc, "expert_dtype": "fp4"}  # the key only inside the block
    block_only.expert_dtype = None
    return {"top-level": top_only, "both": both, "in-block": block_only}


def test_expert_dtype_read_wherever_the_release_leaves_it() -> None:
    for name, hf in _layouts().items():
        assert declared_expert_dtype(hf)[0] == "fp4", name
        assert resolve_quantization(None, hf, "cuda") == QuantConfig("fp8", "fp4"), name
        assert resolve_quantization("fp8", hf, "cuda") == QuantConfig("fp8", "fp4"), name
        assert resolve_quantization("none", hf, "cuda") is None, name
    # without it anywhere, the FP8 block's experts are FP8 (dequantized at load), not FP4
    hf = _layouts()["top-level"]
    hf.expert_dtype = None
    assert declared_expert_dtype(hf)[0] == "fp8"
    assert resolve_quantization(None, hf, "cuda") == QuantConfig("fp8", None)

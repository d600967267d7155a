"""Quantizers against brute force; official <-> HF names against transformers' conversion rules."""

from __future__ import annotations

import torch
from sglang_v4.configs.presets import get_preset
from sglang_v4.model_loader.names import hf_to_official, official_to_hf
from sglang_v4.model_loader.quant import (
    dequantize_fp4,
    dequantize_fp8_block,
    quantize_fp4,
    quantize_fp8_block,
)
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.conversion_mapping import get_checkpoint_conversion_mapping

E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def _is_pow2(x: torch.Tensor) -> bool:
    m, _ = torch.frexp(x.to(torch.float64))
    return bool((m == 0.5).all())


def test_fp8_block_quantization_partial_blocks() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(200, 300, generator=g) * torch.logspace(-3, 1, 300)  # uneven column scales
    q, s = quantize_fp8_block(w)
    assert q.dtype == torch.float8_e4m3fn and q.shape == w.shape
    assert s.dtype == torch.float8_e8m0fnu and s.shape == (2, 3)
    sf = s.to(torch.float64)
    assert _is_pow2(sf)
    for bi in range(2):
        for bj in range(3):
            blk = w[bi * 128 : (bi + 1) * 128, bj * 128 : (bj + 1) * 128].double()
            amax = float(blk.abs().max())
            assert amax / float(sf[bi, bj]) <= 448.0 < 2 * amax / float(sf[bi, bj])  # smallest pow2 that fits
    deq = dequantize_fp8_block(q, s).double()
    scale_full = sf.repeat_interleave(128, 0).repeat_interleave(128, 1)[:200, :300]
    # e4m3 round-to-nearest: relative error <= 2^-4 for normals, absolute <= 2^-10 * scale for subnormals
    assert bool(((deq - w.double()).abs() <= 2.0**-4 * w.double().abs() + 2.0**-10 * scale_full).all())


def test_fp8_float32_scales() -> None:
    w = torch.randn(128, 256, generator=torch.Generator().manual_seed(1))
    q, s = quantize_fp8_block(w, scale_dtype=torch.float32)
    assert s.dtype == torch.float32
    torch.testing.assert_close(s, torch.stack([w[:, :128].abs().max(), w[:, 128:].abs().max()])[None] / 448.0)
    assert float((dequantize_fp8_block(q, s) - w).abs().max()) <= 2.0**-4 * float(w.abs().max())


def test_fp4_rounds_to_nearest_e2m1() -> None:
    w = torch.randn(
        3, 64, 96, generator=torch.Generator().manual_seed(2)
    )  # leading batch dim (HF-packed experts)
    w[0, 0, :32] = 0.0  # an all-zero group
    packed, s = quantize_fp4(w)
    assert packed.dtype == torch.int8 and packed.shape == (3, 64, 48)
    assert s.dtype == torch.float8_e8m0fnu and s.shape == (3, 64, 3)
    sf = s.to(torch.float64).repeat_interleave(32, -1)
    assert _is_pow2(sf)
    x = w.double() / sf
    amax = x.abs().reshape(3, 64, 3, 32).amax(-1)
    assert bool((amax <= 6.0).all()) and bool(((amax > 3.0) | (amax == 0)).all())
    got = dequantize_fp4(packed, s).double() / sf
    nearest = (x.abs()[..., None] - E2M1_GRID).abs().min(-1).values
    assert bool(((got - x).abs() <= nearest + 1e-12).all())
    assert bool(((got == 0) | (torch.sign(got) == torch.sign(x))).all())


def test_names_roundtrip_and_match_transformers_rules() -> None:
    with torch.device("meta"):
        names = list(DeepseekV4ForCausalLM(DeepseekV4Config(**get_preset("tiny"))).state_dict())
    rules = get_checkpoint_conversion_mapping("deepseek_v4")
    for name in names:
        off = hf_to_official(name)
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            assert off is None
            continue
        assert off is not None and not off.startswith("model."), name
        assert official_to_hf(off) == name
        key = off  # transformers' own renaming of the official name
        for rule in rules:
            renamed, pattern = rule.rename_source_key(key)
            if pattern is not None:
                key = renamed
        assert (key if key.startswith("lm_head.") else "model." + key) == name, (off, key)
    assert official_to_hf("layers.0.attn.wq_a.scale") == "model.layers.0.self_attn.q_a_proj.scale"
    assert official_to_hf("layers.0.unknown.weight") is None

"""The batched rope tables of a forward (``RotaryTables.cos_sin_many``) equal the per-table ones.

A forward needs cos/sin at the token positions for both rope kinds and at the completed windows'
positions for each compression ratio; ``cos_sin_many`` computes them all in one ``[2, N, r/2]``
pass (7 device ops instead of 20). The oracle is the per-(kind, vector) ``cos_sin`` (bit-equal:
the same IEEE operation per element) and a float64 evaluation of ``cos(p * inv_freq) * scaling``.
"""

from __future__ import annotations

import pytest
import torch
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset
from sglang_v4.layers.rotary_embedding import RotaryTables


@pytest.mark.parametrize("preset", ["tiny", "flash-8l-32e"])  # default rope / YaRN compress rope
def test_cos_sin_many_equals_cos_sin(preset: str) -> None:
    rt = RotaryTables(ModelConfig.from_dict(get_preset(preset)), "cpu")
    g = torch.Generator().manual_seed(0)
    vecs = [
        torch.randint(0, 1 << 20, (37,), generator=g),
        torch.arange(0, 4 * 9, 4),
        torch.zeros(0, dtype=torch.long),  # a ratio with no completed window this step
        torch.tensor([0, 128, 1 << 20]),
    ]
    many = rt.cos_sin_many(vecs)
    assert len(many) == len(vecs)
    for p, tabs in zip(vecs, many):
        for kind in ("main", "compress"):
            cos, sin = tabs[kind]
            ref_cos, ref_sin = rt.cos_sin(kind, p)
            assert cos.shape == ref_cos.shape == (p.shape[0], rt.inv_freq[kind].shape[0])
            assert cos.is_contiguous() and sin.is_contiguous()
            assert torch.equal(cos, ref_cos) and torch.equal(sin, ref_sin)
            f64 = p.double()[:, None] * rt.inv_freq[kind].double()[None, :]
            s = rt.scaling[kind]
            # fp32 argument rounding: |p * inv_freq| < 2^20 rad carries an absolute error ~ 2^-4 at most
            tol = (
                2.0 ** (-24) * float(f64.abs().amax(dim=(0, 1), keepdim=False).clamp(min=1.0)) * 2 + 1e-6
                if p.numel()
                else 0.0
            )
            assert torch.allclose(cos.double(), f64.cos() * s, atol=tol, rtol=0)
            assert torch.allclose(sin.double(), f64.sin() * s, atol=tol, rtol=0)


def test_cos_sin_many_single_vector_and_mismatched_dims() -> None:
    rt = RotaryTables(ModelConfig.from_dict(get_preset("tiny")), "cpu")
    p = torch.arange(10)
    (one,) = rt.cos_sin_many([p])
    assert torch.equal(one["main"][0], rt.cos_sin("main", p)[0])
    # rope dims that differ between the kinds: the per-table fallback
    rt.inv_freq["main"] = rt.inv_freq["main"][:-1]
    rt._inv2 = None
    (two,) = rt.cos_sin_many([p])
    assert two["main"][0].shape[1] == rt.inv_freq["main"].shape[0]
    assert torch.equal(two["compress"][1], rt.cos_sin("compress", p)[1])

"""``presets.to_official_config``'s ropes: every HF-dialect rope form written in DeepSeek's official
dialect (flat ``rope_scaling``, top-level ``rope_theta`` / ``compress_rope_theta``,
``qk_rope_head_dim``) and read back by our loader is the rope transformers' ``DeepseekV4Config``
builds from the HF dict itself (the oracle); forms the official dialect cannot carry are refused
with a ValueError naming the field and value."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset, to_official_config
from transformers import DeepseekV4Config

LINEAR = {"rope_type": "linear", "factor": 2.0}
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16384, "beta_fast": 16.0}


def _tiny(**changes: Any) -> dict[str, Any]:
    d = get_preset("tiny")
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = copy.deepcopy(v)
    return d


def _nested(compress: dict[str, Any], theta: float = 500.0, compress_theta: float = 20000.0) -> dict:
    p = 0.5
    return {
        "main": {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": p},
        "compress": {**compress, "rope_theta": compress_theta, "partial_rotary_factor": p},
    }


def _ropes(c: Any) -> dict[str, dict[str, Any]]:
    """A config's ropes without the ``type`` alias transformers keeps beside ``rope_type`` and
    without YaRN's ``attention_factor`` (compared as transformers computes it: :func:`_rope_values`)."""
    drop = ("type", "attention_factor")
    return {k: {f: v for f, v in r.items() if f not in drop} for k, r in c.rope_parameters.items()}


def _rope_values(c: Any) -> dict[str, list[float]]:
    """Per scaled rope, transformers' own ``inv_freq`` followed by its ``attention_factor``."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    out = {}
    for k, r in c.rope_parameters.items():
        if r["rope_type"] == "default":
            continue
        inv_freq, attention = ROPE_INIT_FUNCTIONS[r["rope_type"]](c, "cpu", layer_type=k)
        out[k] = [*inv_freq.tolist(), float(attention)]
    return out


CASES = {
    "preset_yarn": _tiny(),
    "no_rope_parameters": _tiny(rope_parameters=None, rope_theta=500.0, compress_rope_theta=20000.0),
    "no_rope_no_partial": _tiny(rope_parameters=None, partial_rotary_factor=None, head_dim=512),
    "no_layer_schedules": _tiny(rope_parameters=None, layer_types=None, mlp_layer_types=None),
    "flat_default": _tiny(rope_parameters={"rope_type": "default"}),
    "flat_linear": _tiny(rope_parameters=LINEAR, compress_rope_theta=20000.0),
    "flat_llama3": _tiny(rope_parameters=LLAMA3),
    "flat_yarn": _tiny(rope_parameters=YARN),
    "nested_linear": _tiny(rope_parameters=_nested(LINEAR)),
    "nested_llama3": _tiny(rope_parameters=_nested(LLAMA3)),
    "nested_yarn_attention_factor": _tiny(rope_parameters=_nested({**YARN, "attention_factor": 0.8})),
    "nested_default": _tiny(rope_parameters=_nested({"rope_type": "default"})),
    # no attention_factor: transformers derives 0.1 ln(factor) + 1 (nested) but injects 1.0 (flat)
    "nested_yarn": _tiny(rope_parameters=_nested(YARN)),
    "nested_yarn_mscale": _tiny(rope_parameters=_nested({**YARN, "mscale": 1.0, "mscale_all_dim": 0.707})),
    "flat_yarn_mscale": _tiny(rope_parameters={**YARN, "mscale": 1.0, "mscale_all_dim": 0.707}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_official_rope_round_trip_matches_transformers(name: str) -> None:
    d = CASES[name]
    oracle = DeepseekV4Config(**{k: v for k, v in copy.deepcopy(d).items() if k != "model_type"})
    off = to_official_config(d)
    assert "rope_parameters" not in off and "partial_rotary_factor" not in off
    ours = ModelConfig.from_dict(off).hf
    assert _ropes(ours) == _ropes(oracle)
    got, want = _rope_values(ours), _rope_values(oracle)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-6), k
    assert ours.qk_rope_head_dim == oracle.qk_rope_head_dim
    assert ours.layer_types == oracle.layer_types and ours.mlp_layer_types == oracle.mlp_layer_types
    # the official dialect's own form: a flat rope_scaling only where the compress rope scales
    scaled = oracle.rope_parameters["compress"]["rope_type"] != "default"
    assert ("rope_scaling" in off) == scaled
    if scaled:
        assert off["rope_scaling"]["type"] == oracle.rope_parameters["compress"]["rope_type"]


@pytest.mark.parametrize(
    ("rope_parameters", "field", "value"),
    [
        ({"rope_type": "dynamic", "factor": 2.0}, "rope_parameters.rope_type", "dynamic"),
        (_nested({"rope_type": "longrope", "factor": 2.0}), "rope_parameters.compress.rope_type", "longrope"),
        (
            {**_nested({"rope_type": "default"}), "main": {**_nested({})["main"], **LINEAR}},
            "rope_parameters.main.rope_type",
            "linear",
        ),
    ],
)
def test_official_rope_refuses_unsupported_types(rope_parameters: dict, field: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"{field}: '{value}'"):
        to_official_config(_tiny(rope_parameters=rope_parameters))


def test_official_rope_refuses_two_partial_rotary_factors() -> None:
    rp = _nested(LINEAR)
    rp["compress"]["partial_rotary_factor"] = 0.25
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        to_official_config(_tiny(rope_parameters=rp))


@pytest.mark.parametrize(
    "changes",
    [
        {"rope_parameters": None, "partial_rotary_factor": None},  # None: transformers' default
        {"rope_parameters": LINEAR, "partial_rotary_factor": 36.6 / 128},  # int(), not round()
    ],
)
def test_official_rope_head_dim_is_the_one_transformers_builds(changes: dict) -> None:
    """``qk_rope_head_dim`` of the official dialect is ``int(head_dim x partial_rotary_factor)``,
    transformers' own rule (a factor of ``None`` being no factor), and the official file read back
    has transformers' rope frequencies."""
    d = _tiny()
    d.update(copy.deepcopy(changes))
    oracle = DeepseekV4Config(**{k: v for k, v in copy.deepcopy(d).items() if k != "model_type"})
    off = to_official_config(d)
    assert off.get("qk_rope_head_dim", oracle.qk_rope_head_dim) == oracle.qk_rope_head_dim
    ours = ModelConfig.from_dict(off).hf
    assert ours.qk_rope_head_dim == oracle.qk_rope_head_dim
    got, want = _rope_values(ours), _rope_values(oracle)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-6), k

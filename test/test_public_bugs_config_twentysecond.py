"""Rope parameters and context lengths of ``config.json`` as users bring them, and a checkpoint
whose shards do not follow the ``model-0000i-of-0000n`` naming.

Each test ports one public report (cited as ``owner/repo#N``).

Faults found here, fixed:

* The rope parameters were taken as they came: a ``rope_theta`` / ``compress_rope_theta`` of 0 or
  below built rotary tables of ``inf`` / NaN frequencies (mlx-node/mlx-node#117); a ``factor`` of
  ``null``, a string, or below 1, an ``attention_factor`` of 0 or below, ``beta_fast`` below
  ``beta_slow`` or a llama3 ``high_freq_factor`` not above its ``low_freq_factor`` were accepted
  (transformers only logs a warning) and gave non-finite tables, tables scaled to nothing, or a
  ``TypeError`` deep inside torch (NVIDIA-NeMo/Safe-Synthesizer#713); an
  ``original_max_position_embeddings`` or a llama3 ``low_freq_factor`` of 0 divided by zero inside
  transformers. Each is now a ``ValueError`` naming the field (``configs/rope_check.py``), checked
  before transformers' validators and again on the ropes transformers built.
* ``max_position_embeddings: 0`` was read as the model's context length (qdrant/fastembed#685); it
  is now refused with the other non-positive sizes.

Reports that showed no fault here (their tests are regression guards): an explicit YaRN
``attention_factor`` is the table's amplitude and V4's default is 1 (ml-explore/mlx-lm#1507); an
unscaled compress rope stays a plain rope (sgl-project/sglang#34792); shards named
``consolidated-*`` load through the index (InfiniTensor/InfiniLM#467).

Oracles: transformers' own rope validators (the warnings they log for the same values), float64
references of the rope frequencies (``theta ** (-2i / d)``) and of ``cos^2 + sin^2``, safetensors'
own reader of the shards.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.layers.rotary_embedding import RotaryTables
from sglang_v4.model_loader import load_state_dict
from transformers import DeepseekV4Config

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
TINY = json.loads((FIXTURES / "tiny-DeepseekV4ForCausalLM.config.json").read_text())
FLASH = json.loads((FIXTURES / "DeepSeek-V4-Flash.config.json").read_text())
#: The official release's YaRN block (``rope_scaling`` of DeepSeek-V4-Flash's config.json).
YARN = dict(FLASH["rope_scaling"])
#: A llama3 rope (transformers' ``rope_type: "llama3"`` keys); merged over :data:`YARN`.
LLAMA3 = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
_META = ("architectures", "auto_map", "torch_dtype", "dtype", "transformers_version", "model_type")


def _tiny(**changes: Any) -> dict[str, Any]:
    """The tiny config in the official dialect (a flat YaRN ``rope_scaling``), with ``changes``."""
    raw = copy.deepcopy(TINY)
    raw.pop("rope_parameters", None)
    raw["rope_scaling"] = dict(YARN)
    raw.update(changes)
    return raw


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _hf_warnings(raw: dict[str, Any]) -> list[str]:
    """The warnings transformers' ``DeepseekV4Config`` logs while reading ``raw`` (its
    ``rope_scaling`` given as HF's ``rope_parameters``)."""
    r = copy.deepcopy(raw)
    for k in _META:
        r.pop(k, None)
    r["rope_parameters"] = r.pop("rope_scaling")
    h = _Records()
    log = logging.getLogger("transformers")
    log.addHandler(h)
    try:
        DeepseekV4Config(**r)
    finally:
        log.removeHandler(h)
    return h.messages


# --------------------------------------------------------------------------- rope values


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rope_theta", 0),
        ("rope_theta", -10000.0),
        ("compress_rope_theta", 0.0),
        ("compress_rope_theta", -1.0),
    ],
)
def test_mlx_node_117_rope_base_that_is_not_positive_is_refused(field: str, value: float) -> None:
    """mlx-node/mlx-node#117: a config whose rope base was negative (or zero) reached the RoPE
    kernel as a valid base and produced invalid rotary frequencies instead of a configuration
    error. Expected: the float64 frequencies ``theta ** (-2i / d)`` of such a base are not finite
    reals (the reason), and the config is refused with a ``ValueError`` naming the field; the
    published bases build finite tables."""
    d = ModelConfig.from_dict(_tiny()).rope_dim
    for i in range(1, d // 2):
        try:
            f = float(value) ** (-2 * i / d)
        except ZeroDivisionError:
            f = math.inf
        assert not (isinstance(f, float) and math.isfinite(f) and f > 0), (i, f)
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_dict(_tiny(**{field: value}))
    tables = RotaryTables(ModelConfig.from_dict(_tiny()), "cpu")
    for kind in ("main", "compress"):
        cos, sin = tables.cos_sin(kind, torch.arange(0, 70000, 997))
        assert bool(torch.isfinite(cos).all() and torch.isfinite(sin).all()), kind


@pytest.mark.parametrize(
    ("key", "change"),
    [
        ("factor", {"factor": None}),
        ("factor", {"factor": 0.5}),
        ("attention_factor", {"attention_factor": -1.0}),
        ("beta_fast", {"beta_fast": 1, "beta_slow": 32}),
        ("high_freq_factor", LLAMA3 | {"high_freq_factor": 1.0}),
        ("high_freq_factor", LLAMA3 | {"low_freq_factor": 4.0, "high_freq_factor": 1.0}),
    ],
)
def test_safe_synthesizer_713_rope_values_transformers_only_warns_about_are_refused(
    key: str, change: dict[str, Any]
) -> None:
    """NVIDIA-NeMo/Safe-Synthesizer#713: a ``null`` rope scaling factor was not rejected cleanly
    (it reached the code that computes with it). Expected: for each YaRN value that transformers'
    own validator flags (it logs a warning naming the field, then builds the config anyway), the
    runtime refuses the config with a ``ValueError`` naming the same field (YaRN's and llama3's
    values alike)."""
    raw = _tiny(rope_scaling={**YARN, **change})
    assert any(key in m for m in _hf_warnings(raw)), _hf_warnings(raw)
    with pytest.raises(ValueError, match=key):
        ModelConfig.from_dict(raw)


@pytest.mark.parametrize(
    ("key", "change"),
    [
        ("factor", {"factor": "16"}),
        ("factor", {"factor": 0}),
        ("original_max_position_embeddings", {"original_max_position_embeddings": 0}),
        ("original_max_position_embeddings", {"original_max_position_embeddings": None}),
        ("attention_factor", {"attention_factor": 0.0}),
        ("beta_slow", {"beta_slow": "1"}),
        ("low_freq_factor", LLAMA3 | {"low_freq_factor": 0.0}),
        ("low_freq_factor", LLAMA3 | {"low_freq_factor": None}),
    ],
)
def test_safe_synthesizer_713_rope_values_that_fail_inside_the_math_name_their_field(
    key: str, change: dict[str, Any]
) -> None:
    """NVIDIA-NeMo/Safe-Synthesizer#713 (the same kind): a rope value that cannot be computed with
    (a string factor, a zero length, a zero amplitude) failed inside torch / transformers' division
    with a message naming no field, or built a table scaled to zero. Expected: a ``ValueError``
    naming the field, from ``config.json`` parsing."""
    with pytest.raises(ValueError, match=key):
        ModelConfig.from_dict(_tiny(rope_scaling={**YARN, **change}))


def test_fastembed_685_zero_max_position_embeddings_is_refused() -> None:
    """qdrant/fastembed#685: a model config with a context length of 0 was read as a real limit
    (the loader then truncated nothing and crashed on longer inputs). Expected: a config with
    ``max_position_embeddings: 0`` (or negative) is refused naming the field; the tiny config's
    value is the context length."""
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_position_embeddings"):
            ModelConfig.from_dict(_tiny(max_position_embeddings=bad))
    assert ModelConfig.from_dict(_tiny()).context_length == TINY["max_position_embeddings"]


# --------------------------------------------------------------------------- rope tables


def test_mlx_lm_1507_explicit_yarn_attention_factor_is_the_table_amplitude() -> None:
    """ml-explore/mlx-lm#1507: an explicit ``rope_scaling.attention_factor`` was ignored in favour
    of the computed YaRN mscale. Expected: with ``attention_factor: 1.3`` the compress rope's
    ``cos^2 + sin^2`` is ``1.3^2`` at every position (float64), the main rope's is 1; without the
    key (the official file) DeepSeek-V4's compress amplitude is 1, not YaRN's computed
    ``0.1 * ln(16) + 1``."""
    positions = torch.arange(0, 1 << 20, 4099)
    for af, want in ((1.3, 1.3**2), (None, 1.0)):
        scaling = dict(YARN) if af is None else {**YARN, "attention_factor": af}
        tables = RotaryTables(ModelConfig.from_dict(_tiny(rope_scaling=scaling)), "cpu")
        for kind, w in (("compress", want), ("main", 1.0)):
            cos, sin = tables.cos_sin(kind, positions)
            amp = cos.double() ** 2 + sin.double() ** 2
            assert amp.sub(w).abs().max().item() < 1e-5, (af, kind)
    assert abs(0.1 * math.log(16) + 1 - 1.0) > 0.2  # the amplitude a generic YaRN would use


def test_sglang_34792_unscaled_compress_rope_is_not_coerced_onto_yarn() -> None:
    """sgl-project/sglang#34792: every MLA model with an unscaled rope (``rope_type: "default"``)
    was coerced onto the YaRN path. Expected: with ``rope_scaling: {"type": "default"}`` the
    compress rope's frequencies are the float64 ``compress_rope_theta ** (-2i / d)`` and its
    amplitude 1; with the official YaRN block they differ from those (the scaling acts)."""
    mc = ModelConfig.from_dict(_tiny(rope_scaling={"type": "default"}))
    d, theta = mc.rope_dim, float(TINY["compress_rope_theta"])
    want = torch.tensor([theta ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    tables = RotaryTables(mc, "cpu")
    assert torch.allclose(tables.inv_freq["compress"].double(), want, rtol=1e-6, atol=0)
    assert tables.scaling["compress"] == 1.0
    yarn = RotaryTables(ModelConfig.from_dict(_tiny()), "cpu")
    assert not torch.allclose(yarn.inv_freq["compress"].double(), want, rtol=1e-3, atol=0)


# --------------------------------------------------------------------------- shards


def test_infinilm_467_consolidated_shard_names_load_through_the_index(tmp_path: Path) -> None:
    """InfiniTensor/InfiniLM#467: shards named ``consolidated-00001-of-00051.safetensors`` (not
    ``model-...``) were not found by a loader that globbed a fixed prefix. Expected: a checkpoint
    whose index names three ``consolidated-*`` shards loads every tensor of them, equal to
    safetensors' own reading of those files."""
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    gen = torch.Generator().manual_seed(0)
    weight_map: dict[str, str] = {}
    want: dict[str, torch.Tensor] = {}
    for i in range(3):
        name = f"consolidated-{i + 1:05d}-of-00003.safetensors"
        shard = {
            f"model.layers.{i}.input_layernorm.weight": torch.randn(8, generator=gen).to(torch.bfloat16),
            f"model.layers.{i}.mlp.shared_experts.gate_proj.weight": torch.randn(4, 8, generator=gen),
        }
        save_file(shard, str(tmp_path / name))
        weight_map.update(dict.fromkeys(shard, name))
        want.update(load_file(str(tmp_path / name)))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    got = load_state_dict(str(tmp_path), dtype=torch.float32, progress=False)
    assert set(got) == set(want) and len(want) == 6
    for k, v in want.items():
        assert torch.equal(got[k], v.to(torch.float32)), k

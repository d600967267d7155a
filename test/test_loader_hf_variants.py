"""Every naming variant ``transformers``' ``save_pretrained`` writes loads into the runtime model.

A tiny HF ``DeepseekV4ForCausalLM`` (random weights) is saved with ``save_pretrained`` as HF 5.x
really does it -- by default with its conversion mapping reversed (official layer names under
``model.``, ``head.weight``), with ``save_original_format=False`` (plain HF names), sharded with a
``model.safetensors.index.json``, with tied embeddings (no LM head written) and in bfloat16 --
then loaded by the loader into the runtime model (``configs.ModelConfig.from_pretrained`` on the
saved ``config.json``, ``load_weights_into``) and run on the paged KV. Oracle: the saved HF model's
own log-probabilities (fp32, 1e-3 as the model-parity tests), and for the bf16 save the same HF
model reloaded by ``from_pretrained``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from dsv4_testutil import CONFIGS, Driver, Twin, hf_logprobs, random_ids
from safetensors import safe_open
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_loader import checkpoint_shapes, load_weights_into
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.tools.make_checkpoint import make_random_state_dict
from transformers import DeepseekV4Config
from transformers import DeepseekV4ForCausalLM as HFModel

TOL = 1e-3
IDS = random_ids(300, seed=11)  # > 256: CSA top-k and one HCA entry are exercised


def _hf_model(tied: bool = False) -> HFModel:
    cfg = copy.deepcopy(CONFIGS["sliding_first"])
    cfg["tie_word_embeddings"] = tied
    state = make_random_state_dict(copy.deepcopy(cfg), 3)
    hf = HFModel(DeepseekV4Config(**{k: v for k, v in cfg.items() if k != "model_type"})).eval()
    if tied:
        state.pop("lm_head.weight")
    hf.load_state_dict(state, strict=not tied)
    if tied:
        assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    return hf


def _keys(path: Path) -> list[str]:
    keys: list[str] = []
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            keys += list(h.keys())
    return keys


def _load_runtime(path: Path) -> Twin:
    mc = ModelConfig.from_pretrained(str(path))
    ours = DeepseekV4ForCausalLM(mc)
    load_weights_into(ours, str(path), progress=False)
    return Twin("saved", {}, mc, None, ours)  # type: ignore[arg-type]


def _check(path: Path, oracle: HFModel) -> None:
    twin = _load_runtime(path)
    out = Driver(twin).run_chunked(IDS, 100)
    ref = hf_logprobs(Twin("hf", {}, twin.mc, oracle, None), IDS)  # type: ignore[arg-type]
    err = (out - ref).abs().max().item()
    assert err <= TOL, f"max |dlogprob| {err}"


@pytest.fixture(scope="module")
def hf_model() -> HFModel:
    return _hf_model()


def test_default_save_pretrained_writes_mixed_names_and_loads(hf_model, tmp_path: Path) -> None:
    hf_model.save_pretrained(tmp_path)
    keys = _keys(tmp_path)
    # what HF 5.x writes today: official layer names under model., head.weight, HF top-level names
    assert "head.weight" in keys and "lm_head.weight" not in keys
    assert "model.layers.1.attn.wq_a.weight" in keys and "model.layers.1.attn.norm.weight" in keys
    assert "model.layers.1.ffn.experts.0.w1.weight" in keys and "model.embed_tokens.weight" in keys
    _check(tmp_path, hf_model)


def test_save_original_format_false_loads(hf_model, tmp_path: Path) -> None:
    hf_model.save_pretrained(tmp_path, save_original_format=False)
    keys = _keys(tmp_path)
    assert "lm_head.weight" in keys and "model.layers.1.mlp.experts.gate_up_proj" in keys
    _check(tmp_path, hf_model)


@pytest.mark.parametrize("original", [True, False])
def test_sharded_save_with_index_loads(hf_model, tmp_path: Path, original: bool) -> None:
    hf_model.save_pretrained(tmp_path, max_shard_size="300KB", save_original_format=original)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    _check(tmp_path, hf_model)


@pytest.mark.parametrize("original", [True, False])
def test_tied_embeddings_save_loads(tmp_path: Path, original: bool) -> None:
    hf = _hf_model(tied=True)
    hf.save_pretrained(tmp_path, save_original_format=original)
    keys = _keys(tmp_path)
    assert not any(k in keys for k in ("head.weight", "lm_head.weight"))  # HF writes no LM head
    assert checkpoint_shapes(str(tmp_path))["lm_head.weight"] == tuple(hf.lm_head.weight.shape)
    _check(tmp_path, hf)


def test_bf16_save_matches_hf_reload(hf_model, tmp_path: Path) -> None:
    bf = copy.deepcopy(hf_model).to(torch.bfloat16)
    bf.save_pretrained(tmp_path)
    oracle = HFModel.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    _check(tmp_path, oracle)


def test_two_spellings_of_one_tensor_are_refused(hf_model, tmp_path: Path) -> None:
    """A directory holding both a save_pretrained checkpoint and an HF-named copy of a tensor."""
    from safetensors.torch import save_file

    hf_model.save_pretrained(tmp_path)
    save_file(
        {"lm_head.weight": hf_model.lm_head.weight.detach().clone()}, str(tmp_path / "extra.safetensors")
    )
    (tmp_path / "model.safetensors").rename(tmp_path / "a.safetensors")
    with pytest.raises(ValueError, match=r"lm_head\.weight: stored twice in the checkpoint, as"):
        checkpoint_shapes(str(tmp_path))


def test_official_and_hf_roots_still_refused(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {
        "layers.0.attn_norm.weight": torch.zeros(2),
        "model.layers.0.input_layernorm.weight": torch.ones(2),
    }
    save_file(tensors, str(tmp_path / "m.safetensors"))
    with pytest.raises(ValueError, match="mixes official DeepSeek names"):
        checkpoint_shapes(str(tmp_path))

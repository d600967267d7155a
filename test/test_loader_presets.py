"""Presets: HF transformers accepts them; official dialect parses to the same model; published facts."""

from __future__ import annotations

import pytest
import torch
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset, list_presets, to_official_config
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

# Published DeepSeek-V4 config.json `compress_ratios` (deepseek-ai/DeepSeek-V4-Flash and -Pro;
# the trailing 0 is the MTP layer).
FLASH_RATIOS = [0, 0] + [4, 128] * 20 + [4, 0]
PRO_RATIOS = [128, 128] + [4, 128] * 29 + [4, 0]


def _param_count(d: dict) -> int:
    with torch.device("meta"):
        m = DeepseekV4ForCausalLM(DeepseekV4Config(**d))
    return sum(p.numel() for p in m.parameters())


def test_list_and_unknown() -> None:
    assert set(list_presets()) >= {"tiny", "flash-8l-32e", "flash", "pro"}
    with pytest.raises(ValueError, match="nope"):
        get_preset("nope")


def test_tiny_matches_spec() -> None:
    d = get_preset("tiny")
    c = DeepseekV4Config(**d)
    assert c.model_type == "deepseek_v4"
    assert c.vocab_size == 129280 and c.hidden_size == 128 and c.num_hidden_layers == 4
    assert c.layer_types == [
        "sliding_attention",
        "compressed_sparse_attention",
        "heavily_compressed_attention",
        "compressed_sparse_attention",
    ]
    assert c.mlp_layer_types == ["hash_moe", "moe", "moe", "moe"]
    assert (c.num_attention_heads, c.head_dim, c.qk_rope_head_dim) == (4, 128, 64)
    assert (c.q_lora_rank, c.o_groups, c.o_lora_rank) == (64, 2, 32)
    assert (c.index_n_heads, c.index_topk) == (16, 16)
    assert c.index_head_dim >= c.qk_rope_head_dim  # HF ropes the trailing 64 dims of each indexer head
    assert (c.n_routed_experts, c.num_experts_per_tok, c.n_shared_experts, c.moe_intermediate_size) == (
        8,
        2,
        1,
        64,
    )
    assert (c.sliding_window, c.hc_mult, c.hc_sinkhorn_iters) == (128, 4, 20)
    comp = c.rope_parameters["compress"]
    assert (
        comp["rope_type"] == "yarn"
        and comp["factor"] == 16
        and comp["original_max_position_embeddings"] == 4096
    )
    assert (comp["beta_fast"], comp["beta_slow"], comp["attention_factor"]) == (32, 1, 1.0)
    assert c.rope_parameters["main"]["rope_type"] == "default"
    assert (c.max_position_embeddings, c.bos_token_id, c.eos_token_id) == (65536, 0, 1)
    # index_topk below the number of compressed CSA entries after a few hundred tokens
    assert c.index_topk < 300 // 4


def test_flash_8l_32e_shapes() -> None:
    c = DeepseekV4Config(**get_preset("flash-8l-32e"))
    assert (c.hidden_size, c.num_attention_heads, c.head_dim, c.qk_rope_head_dim) == (4096, 64, 512, 64)
    assert (c.q_lora_rank, c.o_groups, c.o_lora_rank) == (1024, 8, 1024)
    assert (c.index_n_heads, c.index_head_dim, c.index_topk) == (64, 128, 512)
    assert (c.moe_intermediate_size, c.num_experts_per_tok, c.n_shared_experts, c.swiglu_limit) == (
        2048,
        6,
        1,
        10.0,
    )
    assert c.num_hidden_layers == 8 and c.n_routed_experts == 32 and c.sliding_window == 128
    assert set(c.layer_types) == {
        "sliding_attention",
        "compressed_sparse_attention",
        "heavily_compressed_attention",
    }
    assert c.mlp_layer_types.count("hash_moe") == 1


@pytest.mark.parametrize(
    "name, ratios, published_params",
    [("flash", FLASH_RATIOS, 284e9), ("pro", PRO_RATIOS, 1.6e12)],
)
def test_full_size_presets_match_published(name: str, ratios: list[int], published_params: float) -> None:
    d = get_preset(name)
    off = to_official_config(d, fp8=True)
    assert off["compress_ratios"] == ratios
    assert off["num_hash_layers"] == 3
    n = _param_count(d)  # the model cards: Flash 284B, Pro 1.6T total parameters
    assert abs(n - published_params) / published_params < 0.03, n


@pytest.mark.parametrize("name", ["tiny", "flash-8l-32e", "flash", "pro"])
def test_official_dialect_is_the_same_model(name: str) -> None:
    d = get_preset(name)
    off = to_official_config(d, fp8=True)
    for legacy in ("compress_ratios", "num_hash_layers", "qk_rope_head_dim", "quantization_config"):
        assert legacy in off
    assert "layer_types" not in off and "rope_parameters" not in off
    a, b = ModelConfig.from_dict(d), ModelConfig.from_dict(off)
    assert a.hf.layer_types == b.hf.layer_types
    assert a.hf.mlp_layer_types == b.hf.mlp_layer_types
    assert a.hf.rope_parameters == b.hf.rope_parameters
    assert a.rope_dim == b.rope_dim == 64
    assert a.compress_ratios == b.compress_ratios
    if name in ("flash", "pro"):  # planning-only sizes: the config comparison above suffices
        return
    with torch.device("meta"):
        sa = DeepseekV4ForCausalLM(a.hf).state_dict()
        sb = DeepseekV4ForCausalLM(b.hf).state_dict()
    assert {k: v.shape for k, v in sa.items()} == {k: v.shape for k, v in sb.items()}


def test_official_config_rejects_non_prefix_hash_schedule() -> None:
    d = get_preset("tiny")
    d["mlp_layer_types"] = ["moe", "hash_moe", "moe", "moe"]
    with pytest.raises(ValueError, match="mlp_layer_types"):
        to_official_config(d)


def test_presets_raise_no_transformers_warnings() -> None:
    """Every preset, in both dialects, builds its config without a transformers warning (the tiny
    preset once printed a RoPE scaling-factor mismatch on every command). A fresh interpreter, as
    transformers warns only once per process."""
    import subprocess
    import sys

    code = (
        "from sglang_v4.configs.model_config import ModelConfig\n"
        "from sglang_v4.configs.presets import get_preset, list_presets, to_official_config\n"
        "from transformers import DeepseekV4Config\n"
        "for n in list_presets():\n"
        "    d = get_preset(n)\n"
        "    ModelConfig.from_dict(d)\n"
        "    DeepseekV4Config(**{k: v for k, v in d.items() if k != 'model_type'})\n"
        "    ModelConfig.from_dict(to_official_config(d, fp8=True))\n"
        "print('done')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "done" and r.stderr.strip() == "", r.stdout + r.stderr

"""Shared pieces of the model-config variant and fuzz tests: the variant configs and their cached HF twins, page sizes, the random config generator and its tolerances; and transformers' own config object of a published ``config.json`` (``hf_config``), the oracle of the config-report modules."""

from __future__ import annotations

import copy
import functools
import math
import random
from typing import Any

from dsv4_testutil import BASE, CSA, HCA, SL, make_twin

#: Keys transformers' config class does not take as fields (file metadata).
HF_METADATA_KEYS = ("architectures", "auto_map", "torch_dtype", "dtype", "transformers_version", "model_type")


def hf_config(raw: dict[str, Any]) -> Any:
    """transformers' own ``DeepseekV4Config`` of the ``config.json`` dict ``raw`` (a flat
    ``rope_scaling`` given as HF's ``rope_parameters`` with its ``type`` as ``rope_type``, the
    file-metadata keys dropped); ``raw`` is not modified."""
    from transformers import DeepseekV4Config

    r = copy.deepcopy(raw)
    for k in HF_METADATA_KEYS:
        r.pop(k, None)
    if isinstance(r.get("rope_scaling"), dict) and "rope_parameters" not in r:
        rope = r.pop("rope_scaling")
        rope["rope_type"] = rope.pop("type", rope.get("rope_type"))
        r["rope_parameters"] = rope
    return DeepseekV4Config(**r)


YARN = {
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 16384,
    "beta_fast": 32,
    "beta_slow": 1,
}


def variant(**overrides: Any) -> dict[str, Any]:
    """A 4-layer config (sliding, CSA, HCA, CSA; one hash layer) with ``overrides`` applied."""
    d = dict(BASE, layer_types=[SL, CSA, HCA, CSA], mlp_layer_types=["hash_moe", "moe", "moe", "moe"])
    d.update(copy.deepcopy(overrides))
    return d


def _without(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


def _nested_rope(main: dict[str, Any], compress: dict[str, Any]) -> dict[str, Any]:
    return {"rope_parameters": {"main": main, "compress": compress}}


VARIANTS: dict[str, dict[str, Any]] = {
    # fixed here (fast tier)
    "scoring_sigmoid": variant(scoring_func="sigmoid"),
    "tie_word_embeddings": variant(tie_word_embeddings=True, vocab_size=1001),
    # attention schedules
    "all_csa": variant(layer_types=[CSA] * 4),
    "all_hca": variant(layer_types=[HCA] * 4),
    "sliding_only": variant(layer_types=[SL] * 4),
    "hca_first_6_layers": variant(
        num_hidden_layers=6,
        layer_types=[HCA, HCA, CSA, HCA, CSA, SL],
        mlp_layer_types=["hash_moe"] * 3 + ["moe"] * 3,
    ),
    "one_layer": variant(num_hidden_layers=1, layer_types=[CSA], mlp_layer_types=["hash_moe"]),
    "legacy_compress_ratios": {**_without(variant(), "layer_types"), "compress_ratios": [128, 4, 0, 4, 0]},
    "default_schedules": _without(variant(), "layer_types", "mlp_layer_types"),
    "legacy_compress_rate_kwargs": variant(compress_rate_csa=8, compress_rate_hca=64),
    "legacy_qk_rope_head_dim": {**_without(variant(), "partial_rotary_factor"), "qk_rope_head_dim": 32},
    # hash layers
    "no_hash_layers": variant(mlp_layer_types=["moe"] * 4),
    "all_hash_layers": variant(mlp_layer_types=["hash_moe"] * 4),
    "hash_layer_last": variant(mlp_layer_types=["moe", "moe", "moe", "hash_moe"]),
    "legacy_num_hash_layers": {**_without(variant(), "mlp_layer_types"), "num_hash_layers": 2},
    # compression rates and the sliding window
    "rates_8_64": variant(compress_rates={CSA: 8, HCA: 64}),
    "rates_16_4": variant(compress_rates={CSA: 16, HCA: 4}),
    "rates_3_5": variant(compress_rates={CSA: 3, HCA: 5}),
    "window_64": variant(sliding_window=64),
    "window_256": variant(sliding_window=256),
    "window_100": variant(sliding_window=100),
    "window_1": variant(sliding_window=1),
    # mHC
    "hc_2_iters_5": variant(hc_mult=2, hc_sinkhorn_iters=5),
    "hc_1_eps": variant(hc_mult=1, hc_eps=0.1),
    "hc_3_iters_1": variant(hc_mult=3, hc_sinkhorn_iters=1, hc_eps=1e-2),
    # attention shapes
    "o_groups_1": variant(o_groups=1, o_lora_rank=8),
    "heads_3_groups_3": variant(num_attention_heads=3, o_groups=3),
    "q_lora_48": variant(q_lora_rank=48),
    "head_dim_64": variant(head_dim=64),
    "head_dim_96": variant(head_dim=96),
    "head_dim_256_rope_64": variant(head_dim=256, partial_rotary_factor=0.25),
    "full_rotary": variant(head_dim=64, partial_rotary_factor=1.0),
    "hidden_96": variant(hidden_size=96),
    # indexer
    "indexer_128d_top16": variant(index_head_dim=128, index_topk=16, index_n_heads=32),
    "indexer_top1": variant(index_topk=1),
    # MoE
    "experts_8_top3": variant(n_routed_experts=8, num_experts_per_tok=3),
    "experts_8_top1": variant(n_routed_experts=8, num_experts_per_tok=1),
    "top_k_all_experts": variant(num_experts_per_tok=4),
    "inter_48": variant(moe_intermediate_size=48),
    "routed_scaling_2_5": variant(routed_scaling_factor=2.5),
    "swiglu_limit_small": variant(swiglu_limit=0.05),
    "n_shared_experts_2": variant(n_shared_experts=2),
    "norm_topk_prob_false": variant(norm_topk_prob=False),
    # norms and rope
    "rms_norm_eps_1e-2": variant(rms_norm_eps=1e-2),
    "rope_thetas": variant(rope_theta=500.0, compress_rope_theta=1000),
    "yarn_flat": variant(rope_parameters=YARN),
    "yarn_legacy_rope_scaling": {
        **variant(),
        "rope_scaling": {"type": "yarn", **_without(YARN, "rope_type"), "mscale": 1.0, "mscale_all_dim": 1.0},
    },
    "yarn_both_nested_attention_factor": variant(
        **_nested_rope(
            {**YARN, "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            {**YARN, "rope_theta": 160000.0, "partial_rotary_factor": 0.5},
        )
    ),
    "yarn_no_truncate": variant(rope_parameters={**YARN, "truncate": False}),
    "linear_rope": variant(rope_parameters={"rope_type": "linear", "factor": 2.0}),
    "llama3_rope": variant(
        rope_parameters={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        }
    ),
    # fields without effect on the math
    "vocab_1001": variant(vocab_size=1001),
    "max_position_256": variant(max_position_embeddings=256),
    "num_nextn_predict_layers_2": variant(num_nextn_predict_layers=2),
    "attention_bias_kv_heads": variant(attention_bias=True, num_key_value_heads=2),
    "eos_list_pad": variant(eos_token_id=[1, 2], pad_token_id=5),
}


def _page_size(twin) -> int:
    """Smallest multiple of 256 that holds whole entries of both rates and whole window pages."""
    mc = twin.mc
    return math.lcm(256, mc.csa_ratio, mc.hca_ratio, mc.sliding_window)


@functools.cache
def get_twin(name: str):
    return make_twin(name, seed=3, cfg=VARIANTS[name])


#: logprob bound against HF (``test_model_config_variants.TOL``) and of a cache hit against a cold
#: run (``test_radix_exactness.TOL``).
HF_TOL = 1e-3


HIT_TOL = 1e-4


#: greedy tokens generated per request; with prompts placed just before an HCA boundary this
#: crosses it during decode.
DECODE = 8


ROPES: list[dict[str, Any] | None] = [
    None,
    None,
    YARN,
    {"rope_type": "linear", "factor": 2.0},
    {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
]


def page_size_for(cfg: dict[str, Any]) -> int:
    """Smallest multiple of 256 holding whole compressed entries of every rate the model's layers
    use and whole window pages (``launcher.check_page_size``)."""
    rates = cfg["compress_rates"]
    need = [256, cfg["sliding_window"]]
    if CSA in cfg["layer_types"]:
        need.append(rates[CSA])
    if HCA in cfg["layer_types"]:
        need.append(rates[HCA])
    return math.lcm(*need)


def random_config(seed: int) -> dict[str, Any]:
    """A valid tiny HF-dialect DeepSeek-V4 config drawn from ``seed`` (same dict for the same seed).

    Page sizes (:func:`page_size_for`) stay at most 6400 tokens. ``index_n_heads`` is at least 16
    (fewer heads leave exact ties among indexer scores, where HF's top-k order is arbitrary; see
    ``dsv4_testutil.BASE``)."""
    rng = random.Random(seed)
    n_layers = rng.randint(1, 5)
    layer_types = [rng.choice([SL, CSA, HCA]) for _ in range(n_layers)]
    mlp_layer_types = [rng.choice(["hash_moe", "moe"]) for _ in range(n_layers)]
    while True:
        csa = rng.choice([4, 4, 8, 16, 3, 5, 6])
        hca = rng.choice([128, 128, 64, 32, 4, 5, 6, 100])
        window = rng.choice([128, 128, 64, 256, 100, 1, 32])
        cfg = {"compress_rates": {CSA: csa, HCA: hca}, "sliding_window": window, "layer_types": layer_types}
        if page_size_for(cfg) <= 6400:
            break
    while True:
        head_dim = rng.choice([64, 96, 128, 256])
        rope_dim = rng.choice([16, 32, 64, head_dim])
        prf = rope_dim / head_dim
        if rope_dim <= head_dim and int(head_dim * prf) == rope_dim and rope_dim <= 128:
            break
    index_head_dim = rng.choice([d for d in (64, 128) if d >= rope_dim])
    heads = rng.choice([1, 2, 3, 4])
    o_groups = rng.choice([g for g in (1, 2, 3, 4) if heads % g == 0])
    n_experts = rng.choice([4, 8])
    cfg = dict(
        model_type="deepseek_v4",
        vocab_size=rng.choice([1000, 1001, 997, 1283, 515]),
        hidden_size=rng.choice([64, 96]),
        num_hidden_layers=n_layers,
        layer_types=layer_types,
        mlp_layer_types=mlp_layer_types,
        compress_rates={CSA: csa, HCA: hca},
        sliding_window=window,
        num_attention_heads=heads,
        head_dim=head_dim,
        partial_rotary_factor=prf,
        q_lora_rank=rng.choice([16, 32, 48]),
        o_groups=o_groups,
        o_lora_rank=rng.choice([8, 16]),
        index_n_heads=rng.choice([16, 32]),
        index_head_dim=index_head_dim,
        index_topk=rng.choice([1, 4, 8, 16, 512]),
        n_routed_experts=n_experts,
        num_experts_per_tok=rng.randint(1, min(4, n_experts)),
        n_shared_experts=rng.choice([1, 2]),
        moe_intermediate_size=rng.choice([32, 48]),
        scoring_func=rng.choice(["sqrtsoftplus", "sigmoid"]),
        norm_topk_prob=rng.choice([True, False]),
        routed_scaling_factor=rng.choice([1.0, 1.5, 2.5]),
        swiglu_limit=rng.choice([10.0, 1.0, 0.05]),
        hc_mult=rng.randint(1, 3),
        hc_sinkhorn_iters=rng.choice([1, 3, 5, 20]),
        hc_eps=rng.choice([1e-6, 1e-2]),
        rms_norm_eps=rng.choice([1e-6, 1e-2]),
        rope_theta=rng.choice([10000.0, 500.0]),
        compress_rope_theta=rng.choice([160000.0, 1000.0]),
        tie_word_embeddings=rng.random() < 0.3,
        max_position_embeddings=65536,
    )
    rope = rng.choice(ROPES)
    if rope is not None:
        cfg["rope_parameters"] = copy.deepcopy(rope)
    return cfg


def prompt_length(cfg: dict[str, Any], seed: int) -> int:
    """300-700 tokens, or just past one page when a page is 768 or 1280 tokens (so the resent
    prompt hits the cache; larger pages, from ``sliding_window`` 100 or an HCA rate of 100, are
    not reached); half the time placed 1-5 tokens before an HCA boundary, so that decode closes an
    HCA entry."""
    rng = random.Random(seed * 7919 + 1)
    page = page_size_for(cfg)
    lo, hi = (300, 700) if page == 256 or page > 1280 else (page + 1, page + 250)
    n = rng.randint(lo, hi)
    hca = cfg["compress_rates"][HCA]
    if rng.random() < 0.5 and hca < n:
        n = max(lo, (n // hca) * hca - rng.randint(1, min(5, hca)))
    return n


def chunk_size(cfg: dict[str, Any], seed: int) -> int:
    """A prefill chunk that is not a multiple of either compression rate (it cuts groups)."""
    rates = [cfg["compress_rates"][CSA], cfg["compress_rates"][HCA]]
    rng = random.Random(seed * 104729 + 3)
    while True:
        c = rng.randint(17, 160)
        if all(c % r for r in rates if r > 1):
            return c

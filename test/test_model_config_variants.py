"""DeepSeek-V4 config variants: the runtime follows every ``DeepseekV4Config`` field HF transformers'
model reads, or refuses the config by naming the field.

For each variant HF can build, HF/runtime twins with the same random weights (``dsv4_testutil``)
must agree on teacher-forced log-probabilities of a 300-token prompt computed in chunks of 100
(within 1e-3, as test_model_parity) and on a greedy continuation through the paged KV. 300 tokens
reach CSA top-k selection (75 entries at ratio 4, ``index_topk`` 8) and two HCA entries (ratio
128). The fast tier runs the variants of the fields that were fixed here; the rest is ``slow``.

Fields HF's model never reads (``n_shared_experts``, ``norm_topk_prob``, ``num_key_value_heads``,
``attention_bias``, ``max_position_embeddings`` outside dynamic rope) are ignored by both alike; their
variants are twins like the others, so a change on either side shows up.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from typing import Any

import pytest
import torch
from dsv4_testutil import BASE, CSA, HCA, SL, Driver, hf_greedy, hf_logprobs, make_twin, random_ids

TOL = 1e-3
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
FAST = ("scoring_sigmoid", "tie_word_embeddings", "window_100", "rates_3_5", "hc_2_iters_5")
CASES = [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in VARIANTS]

# (overrides, the field the error must name): configs the runtime does not compute
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"scoring_func": "softmax"}, "scoring_func"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, "rope_parameters"),
    (
        {
            "rope_parameters": {
                "rope_type": "longrope",
                "short_factor": [1.0] * 32,
                "long_factor": [2.0] * 32,
                "original_max_position_embeddings": 128,
            }
        },
        "rope_parameters",
    ),
    ({"index_head_dim": 32}, "index_head_dim"),
    ({"num_experts_per_tok": 5}, "num_experts_per_tok"),
    ({"compress_rates": {CSA: 0, HCA: 128}}, "compress_rates"),
    ({"partial_rotary_factor": 37 / 128}, "partial_rotary_factor"),
    ({"sliding_window": 0}, "sliding_window"),
    # transformers accepts it; the KV layout planner failed on it with an empty ``min()``
    ({"num_hidden_layers": 0, "layer_types": [], "mlp_layer_types": []}, "num_hidden_layers"),
]


def _page_size(twin) -> int:
    """Smallest multiple of 256 that holds whole entries of both rates and whole window pages."""
    mc = twin.mc
    return math.lcm(256, mc.csa_ratio, mc.hca_ratio, mc.sliding_window)


@functools.cache
def get_twin(name: str):
    return make_twin(name, seed=3, cfg=VARIANTS[name])


@pytest.mark.parametrize("name", CASES)
def test_teacher_forced_logprobs_match_hf(name: str) -> None:
    twin = get_twin(name)
    ids = random_ids(300, seed=1, vocab=twin.mc.vocab_size)
    ref = hf_logprobs(twin, ids)
    out = Driver(twin, page_size=_page_size(twin)).run_chunked(ids, 100)
    err = (out - ref).abs().max().item()
    assert err <= TOL, f"{name}: max |dlogprob| {err}"


@pytest.mark.parametrize("name", CASES)
def test_greedy_decode_matches_hf(name: str) -> None:
    twin = get_twin(name)
    prompt = random_ids(250, seed=2, vocab=twin.mc.vocab_size)
    want = hf_greedy(twin, prompt, 6)
    assert Driver(twin, page_size=_page_size(twin)).greedy(prompt, 6, chunk=100) == want


#: bound of the CUDA run (fp32 weights, Triton kernels) against HF on the CPU. With TF32 off (torch's
#: default, set explicitly by the test) the kernels' fp32 dots are IEEE (``sgl_kernel_v4.ops``), so
#: the GPU differs from the CPU runtime only in the order of fp32 sums (split attention partials,
#: the MoE's fp32 atomics, cuBLAS): rounding of order 1e-6 relative, far below the CPU tier's 1e-3.
#: Twice that bound leaves room for the atomics' run-to-run order; a wrong kernel, a TF32 product
#: (its 10-bit mantissa flipped near-tied indexer / expert choices: errors 0.07-20 before) or an
#: unhandled shape gives errors of order 0.1-1.
GPU_TOL = 2 * TOL


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", CASES)
def test_variant_on_cuda_kernels_matches_hf(name: str) -> None:
    """The runtime on CUDA (its Triton kernels; the torch reference for the ops whose shapes a
    kernel does not support, e.g. ``head_dim`` 96, ``hc_mult`` 3; fp32 weights) vs HF on the CPU,
    within :data:`GPU_TOL`."""
    from dsv4_testutil import Twin
    from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM

    twin = get_twin(name)
    ours = DeepseekV4ForCausalLM(twin.mc, torch.float32, "cuda")
    ours.load_state_dict(twin.state, strict=True)
    gpu = Twin(name=name, cfg=twin.cfg, mc=twin.mc, hf=twin.hf, ours=ours)
    ids = random_ids(300, seed=1, vocab=twin.mc.vocab_size)
    matmul = torch.backends.cuda.matmul
    tf32 = matmul.allow_tf32
    matmul.allow_tf32 = False
    try:
        out = Driver(gpu, page_size=_page_size(twin), device="cuda").run_chunked(ids, 100).cpu()
    finally:
        matmul.allow_tf32 = tf32
    err = (out - hf_logprobs(twin, ids)).abs().max().item()
    assert err <= GPU_TOL, f"{name}: max |dlogprob| {err}"


@pytest.mark.parametrize("overrides,field", REFUSED, ids=[f for _, f in REFUSED])
def test_unsupported_field_is_refused_by_name(overrides: dict[str, Any], field: str) -> None:
    from sglang_v4.configs.model_config import ModelConfig

    with pytest.raises(ValueError, match=f"^{field}: "):
        ModelConfig.from_dict(variant(**overrides))


def test_refusal_reaches_the_server_start_up_as_one_line(tmp_path) -> None:
    """``check_model_dir`` (run by the launcher before any process loads the model) turns the refusal into
    one ``ValueError`` line naming the file and the field."""
    from sglang_v4.entrypoints.engine import check_model_dir

    (tmp_path / "config.json").write_text(json.dumps(variant(scoring_func="softmax")))
    with pytest.raises(ValueError) as e:
        check_model_dir(str(tmp_path), load_format="dummy", skip_tokenizer_init=True)
    msg = str(e.value)
    assert "\n" not in msg and "config.json" in msg and "scoring_func: 'softmax'" in msg


def test_launcher_exits_1_with_one_line_naming_the_field(tmp_path, capsys) -> None:
    """``python -m sglang_v4.launch_server`` on such a model: exit code 1 and one log line naming
    the field, before any process loads the model."""
    import socket

    from sglang_v4 import launch_server

    (tmp_path / "config.json").write_text(json.dumps(variant(hidden_act="gelu")))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["--model-path", str(tmp_path), "--load-format", "dummy", "--skip-tokenizer-init"]
    assert launch_server.main([*argv, "--host", "127.0.0.1", "--port", str(port)]) == 1
    cap = capsys.readouterr()
    lines = [ln for ln in (cap.out + cap.err).splitlines() if ln.strip()]
    assert len(lines) == 1 and "hidden_act: 'gelu' is not supported" in lines[0], lines


def test_page_size_checked_against_the_model_at_start_up(tmp_path) -> None:
    from sglang_v4.entrypoints.engine import check_model_dir

    (tmp_path / "config.json").write_text(json.dumps(variant(sliding_window=100)))
    kw = dict(load_format="dummy", skip_tokenizer_init=True)
    with pytest.raises(ValueError, match=r"^page_size: 256 .*sliding_window \(100\).*--page-size 3200"):
        check_model_dir(str(tmp_path), page_size=256, **kw)
    check_model_dir(str(tmp_path), page_size=3200, **kw)


@pytest.mark.parametrize("stored", ["model.embed_tokens.weight", "lm_head.weight"])
def test_tied_checkpoint_with_one_matrix_fills_the_other(tmp_path, stored: str) -> None:
    """``tie_word_embeddings`` and only one of the embedding / LM head stored: the stored matrix
    serves both (transformers' ``tie_weights``, which swaps source and target when the source is
    the one missing); the runtime then gives the log-probabilities of HF's tied model."""
    from safetensors.torch import save_file
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.model_loader.weight_loader import load_weights_into
    from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
    from sglang_v4.tools.make_checkpoint import make_random_state_dict
    from transformers import DeepseekV4Config
    from transformers import DeepseekV4ForCausalLM as HFModel

    cfg = variant(tie_word_embeddings=True)
    state = make_random_state_dict(copy.deepcopy(cfg), seed=4)
    other = "lm_head.weight" if stored != "lm_head.weight" else "model.embed_tokens.weight"
    matrix = state[stored].clone() + 0.5  # differs from the random draw of the other name
    state[stored] = matrix
    save_file(
        {k: v.contiguous() for k, v in state.items() if k != other}, str(tmp_path / "model.safetensors")
    )
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ours = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(str(tmp_path)))
    load_weights_into(ours, str(tmp_path), progress=False)
    assert torch.equal(ours.lm_head.weight, matrix) and torch.equal(ours.model.embed_tokens.weight, matrix)
    hf = HFModel(DeepseekV4Config(**_without(cfg, "model_type"))).eval()
    hf.load_state_dict({**state, other: matrix})
    from dsv4_testutil import Twin

    twin = Twin(name="tied", cfg=cfg, mc=ours.mc, hf=hf, ours=ours)
    ids = random_ids(200, seed=6)
    out = Driver(twin).run_chunked(ids, 64)
    assert (out - hf_logprobs(twin, ids)).abs().max().item() <= TOL


@pytest.mark.parametrize("fmt", ["official", "hf"])
def test_checkpoint_with_mtp_layers_and_tied_head(tmp_path, fmt: str) -> None:
    """A written checkpoint of ``num_nextn_predict_layers=2`` (official: two ``mtp.<i>`` heads
    stored, skipped at load; ``compress_ratios`` with two trailing MTP entries) and
    ``tie_word_embeddings`` (no LM head stored) loads and gives HF's log-probabilities."""
    from safetensors import safe_open
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.model_loader.loader import load_state_dict
    from sglang_v4.model_loader.weight_loader import load_weights_into
    from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
    from sglang_v4.tools.make_checkpoint import write_checkpoint
    from transformers import DeepseekV4Config
    from transformers import DeepseekV4ForCausalLM as HFModel

    cfg = variant(num_nextn_predict_layers=2, tie_word_embeddings=True)
    full = ModelConfig.from_dict(copy.deepcopy(cfg)).to_dict()
    path = write_checkpoint(str(tmp_path), fmt=fmt, weights="fp32", seed=8, config_dict=full)
    stored = set()
    for f in tmp_path.glob("*.safetensors"):
        with safe_open(str(f), "pt") as h:
            stored |= set(h.keys())
    assert not {"lm_head.weight", "head.weight"} & stored
    if fmt == "official":
        assert {"mtp.0.enorm.weight", "mtp.1.enorm.weight"} <= stored
        assert json.loads((tmp_path / "config.json").read_text())["compress_ratios"][-2:] == [0, 0]
    ours = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(path))
    load_weights_into(ours, path, progress=False)
    hf = HFModel(DeepseekV4Config(**_without(cfg, "model_type"))).eval()
    hf.load_state_dict(load_state_dict(path))
    from dsv4_testutil import Twin

    twin = Twin(name=fmt, cfg=cfg, mc=ours.mc, hf=hf, ours=ours)
    ids = random_ids(300, seed=9)
    assert (Driver(twin).run_chunked(ids, 100) - hf_logprobs(twin, ids)).abs().max().item() <= TOL

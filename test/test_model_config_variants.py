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
import json
from typing import Any

import pytest
import torch
from dsv4_testutil import CSA, HCA, Driver, hf_greedy, hf_logprobs, random_ids
from model_config_testutil import VARIANTS, _page_size, _without, get_twin, variant

TOL = 1e-3


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

"""A fifteenth set of public reports, checkpoint loading: DeepSeek-V4 checkpoints that carry
multi-token-prediction tensors, packed FP4 routed experts, a top-level ``head.weight``
(transformers' ``save_pretrained`` layout) or one decoder layer more than the config declares
(each test names its report).

Oracle: HF transformers' ``DeepseekV4ForCausalLM.from_pretrained`` on the same files (its own
name mapping, handling of ``mtp.*`` and FP8 / FP4 dequantization), run once cache-free in fp32;
the runtime side is :func:`~sglang_v4.model_loader.weight_loader.load_weights_into` into the
runtime model, run through :class:`dsv4_testutil.Driver`.
"""

from __future__ import annotations

import copy
import json
import os
import shutil

import pytest
import torch
from dsv4_testutil import CONFIGS, Driver, Twin, hf_logprobs, random_ids
from safetensors import safe_open
from safetensors.torch import save_file
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_loader.weight_loader import load_weights_into
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.tools.make_checkpoint import write_checkpoint

TOL = 1e-3  # max |dlogprob| against HF, fp32 both sides


def _max_err(ours: torch.Tensor, want: torch.Tensor) -> float:
    return (ours - want).abs().max().item()


# ---------------------------------------------------------------------------------------------
# checkpoints with MTP tensors, a top-level head, an extra layer (huggingface/transformers#46129,
# local-inference-lab/vllm#436, vllm-project/vllm#43456, huggingface/transformers#35688)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def official_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An official-format fp32 checkpoint (DeepSeek names, ``compress_ratios``) with ``mtp.0.*``."""
    out = str(tmp_path_factory.mktemp("official_mtp"))
    cfg = copy.deepcopy(CONFIGS["sliding_first"])
    return write_checkpoint(out, fmt="official", weights="fp32", seed=46129, config_dict=cfg)


def _file_keys(path: str) -> list[str]:
    keys: list[str] = []
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(path, name), "pt") as f:
                keys += list(f.keys())
    return keys


def _hf_from(path: str):  # noqa: ANN202 - transformers model
    from transformers import DeepseekV4ForCausalLM as HFModel

    return HFModel.from_pretrained(path, dtype=torch.float32).eval()


def _ours_from(path: str) -> tuple[ModelConfig, DeepseekV4ForCausalLM]:
    mc = ModelConfig.from_pretrained(path)
    model = DeepseekV4ForCausalLM(mc)
    load_weights_into(model, path, progress=False)
    return mc, model


def _loaded_twin(path: str, hf: object | None = None) -> Twin:
    mc, ours = _ours_from(path)
    return Twin(os.path.basename(path), {}, mc, hf if hf is not None else _hf_from(path), ours, {})


def test_transformers_46129_mtp_tensors_never_reach_the_main_model(official_dir: str) -> None:
    """huggingface/transformers#46129 and #46127 (DeepSeek-V4 ``mtp.*`` tensors were matched by no
    rename and silently mishandled at load): an official checkpoint that holds ``mtp.0.*``
    tensors loads into the runtime with none of them in its state, and the model gives the
    log-probabilities of HF's ``from_pretrained`` on the same files (its own name mapping, which
    ignores ``mtp.*``) on a 96-token prompt."""
    assert any(k.startswith("mtp.0.") for k in _file_keys(official_dir))
    twin = _loaded_twin(official_dir)
    assert not any("mtp" in k for k in twin.ours.state_dict())
    ids = random_ids(96, seed=46129)
    assert _max_err(Driver(twin).run_chunked(ids, 96), hf_logprobs(twin, ids)) <= TOL


def test_vllm_local_436_mtp_tensors_present_with_zero_nextn_layers(
    official_dir: str, tmp_path: pytest.TempPathFactory
) -> None:
    """local-inference-lab/vllm#436 (with ``num_nextn_predict_layers = 0`` the MTP layers are never
    built, and their checkpoint tensors hit a ``KeyError`` at load): the same official checkpoint
    with ``num_nextn_predict_layers: 0`` in its ``config.json`` (its ``mtp.0.*`` tensors kept)
    loads, into the same weights as with one MTP layer declared."""
    copy_dir = os.path.join(str(tmp_path), "no_nextn")
    shutil.copytree(official_dir, copy_dir)
    cfg_path = os.path.join(copy_dir, "config.json")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["num_nextn_predict_layers"] = 0
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    assert any(k.startswith("mtp.") for k in _file_keys(copy_dir))
    _, zero = _ours_from(copy_dir)
    _, one = _ours_from(official_dir)
    a, b = zero.state_dict(), one.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def saved_dir(official_dir: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object]:
    """HF's ``save_pretrained`` of the official checkpoint (top-level ``head.weight``) and that HF model."""
    hf = _hf_from(official_dir)
    out = str(tmp_path_factory.mktemp("hf_saved"))
    hf.save_pretrained(out)
    return out, hf


def test_vllm_43456_top_level_head_weight_is_the_lm_head(saved_dir: tuple[str, object]) -> None:
    """vllm-project/vllm#43456 (a DeepSeek-V4 artifact written by transformers' ``save_pretrained``
    keeps ``head.weight`` at the top level; a loader matched no rule for it and left the head
    uninitialised, with no error): the runtime loads that file's ``head.weight`` into
    ``lm_head.weight`` and its embedding into ``embed_tokens``, both equal to HF's, and gives
    HF's log-probabilities on a 64-token prompt."""
    path, hf = saved_dir
    keys = _file_keys(path)
    assert "head.weight" in keys and "lm_head.weight" not in keys
    twin = _loaded_twin(path, hf)
    assert torch.equal(twin.ours.lm_head.weight, hf.lm_head.weight.detach())
    assert torch.equal(twin.ours.model.embed_tokens.weight, hf.model.embed_tokens.weight.detach())
    ids = random_ids(64, seed=43456)
    assert _max_err(Driver(twin).run_chunked(ids, 64), hf_logprobs(twin, ids)) <= TOL


def test_transformers_35688_extra_trailing_layer_in_the_checkpoint(
    saved_dir: tuple[str, object], tmp_path: pytest.TempPathFactory
) -> None:
    """huggingface/transformers#35688 (a DeepSeek checkpoint held one decoder layer more than
    ``num_hidden_layers``, the MTP layer stored as ``model.layers.{N}``; transformers loads the
    first ``N`` and reports the rest unused): with ``model.layers.4.*`` tensors added to a 4-layer
    checkpoint the runtime loads the first 4 layers unchanged and gives HF's log-probabilities
    on a 64-token prompt."""
    path, hf = saved_dir
    out = os.path.join(str(tmp_path), "extra_layer")
    shutil.copytree(path, out)
    tensors: dict[str, torch.Tensor] = {}
    files = [n for n in os.listdir(out) if n.endswith(".safetensors")]
    assert len(files) == 1  # one shard: no index to rewrite
    with safe_open(os.path.join(out, files[0]), "pt") as f:
        for k in f.keys():
            tensors[k] = f.get_tensor(k)
    extra = {
        k.replace("model.layers.3.", "model.layers.4."): v.clone()
        for k, v in tensors.items()
        if k.startswith("model.layers.3.")
    }
    assert extra
    save_file({**tensors, **extra}, os.path.join(out, files[0]), metadata={"format": "pt"})
    twin = _loaded_twin(out, hf)
    assert len(twin.ours.model.layers) == 4
    _, ref = _ours_from(path)
    a, b = twin.ours.state_dict(), ref.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    ids = random_ids(64, seed=35688)
    assert _max_err(Driver(twin).run_chunked(ids, 64), hf_logprobs(twin, ids)) <= TOL


# ---------------------------------------------------------------------------------------------
# FP4 routed experts are not FP8 (modelscope/ms-swift#9724)
# ---------------------------------------------------------------------------------------------


def test_ms_swift_9724_fp4_experts_dequantize_to_full_width(tmp_path: pytest.TempPathFactory) -> None:
    """modelscope/ms-swift#9724 (a DeepSeek-V4 tool dequantized the packed FP4 routed experts with
    the FP8 dequantizer, one value per byte, and lost half of every expert's weights): an
    official-format checkpoint with FP8 block-scaled linears and FP4 experts (``I8`` with two
    e2m1 values per byte, ``F8_E8M0`` scales per 32) loads into an fp32 runtime model equal, tensor
    for tensor, to HF's ``from_pretrained`` with ``FineGrainedFP8Config(dequantize=True)`` (its
    own FP8 / FP4 decoders), experts at full width, and gives HF's log-probabilities."""
    from transformers import DeepseekV4ForCausalLM as HFModel
    from transformers import FineGrainedFP8Config

    cfg = dict(copy.deepcopy(CONFIGS["sliding_first"]), hidden_size=128, moe_intermediate_size=128)
    path = write_checkpoint(str(tmp_path), fmt="official", weights="fp8", seed=9724, config_dict=cfg)
    key = "layers.1.ffn.experts.0.w1.weight"
    files = [n for n in os.listdir(path) if n.endswith(".safetensors")]
    stored: tuple[str, list[int]] | None = None
    for name in files:
        with safe_open(os.path.join(path, name), "pt") as f:
            if key in f.keys():
                sl = f.get_slice(key)
                stored = (sl.get_dtype(), sl.get_shape())
    assert stored == ("I8", [128, 64])  # 128 inputs stored as 64 bytes
    hf = HFModel.from_pretrained(
        path, dtype=torch.float32, quantization_config=FineGrainedFP8Config(dequantize=True)
    )
    hf.eval()
    twin = _loaded_twin(path, hf)
    ours, want = twin.ours.state_dict(), hf.state_dict()
    assert ours.keys() == want.keys()
    assert ours["model.layers.1.mlp.experts.gate_up_proj"].shape == (4, 256, 128)
    assert all(torch.equal(ours[k].float(), want[k].float()) for k in want)
    ids = random_ids(64, seed=9724)
    assert _max_err(Driver(twin).run_chunked(ids, 64), hf_logprobs(twin, ids)) <= TOL

"""Quantized and re-quantized DeepSeek-V4 / V3.x checkpoints as users point the server at them.

Each is either served as the published format means it, or refused by the start-up check
(``check_model_dir``) with one line naming the field or the file and tensor, and never loaded:

* ``quantization_config`` shapes from the hub and from the producers' own code: DeepSeek's
  (deepseek-ai/DeepSeek-V3 ``fmt: e4m3``; V4 ``scale_fmt: ue8m0``), transformers'
  ``FineGrainedFP8Config`` (its ``to_json_string`` at test time), a hand-edited ``"FP8"`` (SGLang
  and vLLM lower-case ``quant_method``: sgl-project/sglang, vllm-project/vllm), and other methods
  whose ``modules_to_not_convert`` / ``ignore`` / ``exclude_modules`` must not make them look
  like DeepSeek's: compressed-tensors w8a8 FP8 block and w4a16 (neuralmagic/compressed-tensors
  ``config_groups``), ModelOpt FP8 (NVIDIA/TensorRT-Model-Optimizer), fbgemm FP8, AWQ, MXFP4
  (openai/gpt-oss's ``modules_to_not_convert`` regexes).
* ``modules_to_not_convert`` (transformers) / ``ignored_layers`` (vLLM / SGLang ``Fp8Config``)
  naming FP8 linears: those are stored in bf16 on purpose, so they are read as stored, not
  re-quantized. Oracle: the stored tensors themselves (safetensors' reader), and float64 block
  dequantization of the FP8 ones.
* Tensor layouts of other methods in a checkpoint whose ``config.json`` says nothing (a stripped
  or re-saved config): GPTQ / AWQ ``qweight``, compressed-tensors ``weight_packed``, ModelOpt
  NVFP4 ``weight_scale_2`` / ``input_scale``, bitsandbytes ``absmax``, MXFP4 ``*_blocks``, and
  bare int8 weights (which a dtype cast would have read as weights), and the GPTQ / AWQ side files
  (``quantize_config.json``, ``quant_config.json``) vLLM reads a method from.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.entrypoints.launcher import check_model_dir
from sglang_v4.layers.quantization import QuantConfig, resolve_quantization
from sglang_v4.model_loader.builder import get_model
from sglang_v4.tools.make_checkpoint import write_checkpoint
from transformers import FineGrainedFP8Config

FLASH = json.loads(
    (Path(__file__).parent / "fixtures" / "configs" / "DeepSeek-V4-Flash.config.json").read_text()
)
QC = FLASH["quantization_config"]
INDEX = "model.safetensors.index.json"


def _config_dir(tmp_path: Path, qc: Any) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({**FLASH, "quantization_config": qc}))
    return tmp_path


def _refusal(d: Path, **kw: Any) -> str:
    with pytest.raises(ValueError) as e:
        check_model_dir(str(d), skip_tokenizer_init=True, **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("model_path: "), msg
    return msg


# ------------------------------------------------------------------ quantization_config shapes
def _transformers_fp8() -> dict[str, Any]:
    return json.loads(FineGrainedFP8Config(modules_to_not_convert=["lm_head"]).to_json_string())


@pytest.mark.parametrize(
    ("qc", "want"),
    [
        # deepseek-ai/DeepSeek-V3's block (no scale_fmt / expert_dtype): V4-Flash's top-level
        # expert_dtype "fp4" still says the routed experts are FP4
        (
            {
                "activation_scheme": "dynamic",
                "fmt": "e4m3",
                "quant_method": "fp8",
                "weight_block_size": [128, 128],
            },
            QuantConfig("fp8", "fp4"),
        ),
        ({**QC, "quant_method": "FP8"}, QuantConfig("fp8", "fp4")),
        ({**QC, "quant_method": "Fp8", "modules_to_not_convert": None}, QuantConfig("fp8", "fp4")),
        # lm_head / embedding / router are bf16 in DeepSeek's format anyway: nothing changes
        (
            {**QC, "modules_to_not_convert": ["lm_head", "model.embed_tokens", "model.layers.0.mlp.gate"]},
            QuantConfig("fp8", "fp4"),
        ),
        # its expert_dtype "fp8" (inside quantization_config, where it wins): experts dequantized
        ("transformers", QuantConfig("fp8", None)),
    ],
    ids=["deepseek-v3", "upper-case", "mixed-case-null-list", "unquantized-anyway", "transformers-fp8"],
)
def test_fp8_shapes_are_served(tmp_path: Path, qc: Any, want: QuantConfig) -> None:
    qc = _transformers_fp8() if qc == "transformers" else qc
    d = _config_dir(tmp_path, qc)
    check_model_dir(str(d), load_format="dummy", skip_tokenizer_init=True)
    hf = ModelConfig.from_pretrained(str(d)).hf
    assert resolve_quantization(None, hf, "cuda") == want
    assert resolve_quantization(None, hf, "cpu") is None  # the CPU path dequantizes at load


@pytest.mark.parametrize(
    "entries",
    [
        {"modules_to_not_convert": ["model.layers.3.self_attn.q_a_proj"]},  # HF name
        {"modules_to_not_convert": ["model.layers.3.self_attn.q_a_proj.weight"]},
        {"ignored_layers": ["layers.3.attn.wq_a"]},  # official name (vLLM's Fp8Config key)
        {"ignored_layers": ["model.layers.3.self_attn"]},  # a parent module, vLLM prefix style
        {"modules_to_not_convert": ["model.layers.3.attn.wq_a"]},  # save_pretrained's spelling
        {"modules_to_not_convert": ["model.layers.*.self_attn.compressor.indexer"]},  # a regex
        {"modules_to_not_convert": ["model.layers.5.mlp.shared_experts"]},
    ],
    ids=["hf", "hf-weight", "official", "parent", "saved", "regex", "shared-expert"],
)
def test_unconverted_fp8_linears_keep_every_linear_in_the_model_dtype(entries: dict[str, Any]) -> None:
    hf = ModelConfig.from_dict({**FLASH, "quantization_config": {**QC, **entries}}).hf
    assert resolve_quantization(None, hf, "cuda") == QuantConfig(None, "fp4")
    assert resolve_quantization("fp8", hf, "cpu") == QuantConfig(None, "fp4")


def test_unconverted_routed_experts_stay_in_the_model_dtype_unless_stored_fp4() -> None:
    hf = ModelConfig.from_dict(
        {**FLASH, "quantization_config": {**QC, "modules_to_not_convert": ["model.layers.2.mlp.experts"]}}
    ).hf
    assert resolve_quantization(None, hf, "cuda") == QuantConfig("fp8", None)
    assert resolve_quantization(None, hf, "cuda", stored_experts="fp4") == QuantConfig("fp8", "fp4")


@pytest.mark.parametrize("key", ["modules_to_not_convert", "ignored_layers"])
def test_unconverted_list_that_is_not_a_list_is_refused(tmp_path: Path, key: str) -> None:
    msg = _refusal(_config_dir(tmp_path, {**QC, key: "lm_head"}), load_format="dummy")
    assert f"quantization_config.{key}: expected a list of module names, got 'lm_head'" in msg


@pytest.mark.parametrize(
    "qc",
    [
        {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": 8,
                        "type": "float",
                        "strategy": "block",
                        "block_structure": [128, 128],
                    },
                    "input_activations": {
                        "num_bits": 8,
                        "type": "float",
                        "strategy": "group",
                        "group_size": 128,
                    },
                }
            },
            "ignore": ["lm_head"],
            "quantization_status": "compressed",
        },
        {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
                }
            },
            "ignore": ["lm_head"],
        },
        {
            "quant_method": "modelopt",
            "quant_algo": "FP8",
            "kv_cache_quant_algo": "FP8",
            "exclude_modules": ["lm_head"],
        },
        {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0, "modules_to_not_convert": ["lm_head"]},
        {
            "quant_method": "awq",
            "bits": 4,
            "group_size": 128,
            "zero_point": True,
            "modules_to_not_convert": ["gate"],
        },
        {
            "quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "lm_head"],
        },
    ],
    ids=["ct-w8a8-fp8-block", "ct-w4a16", "modelopt-fp8", "fbgemm-fp8", "awq-skip-list", "mxfp4-skip-list"],
)
@pytest.mark.parametrize("flag", [None, "none", "fp8"])
def test_other_methods_are_refused_naming_quant_method(
    tmp_path: Path, qc: dict[str, Any], flag: str | None
) -> None:
    msg = _refusal(_config_dir(tmp_path, qc), load_format="dummy", quantization=flag)
    assert (
        "config.json: quantization_config.quant_method: only DeepSeek's block FP8 ('fp8') is supported" in msg
    )
    assert repr(qc["quant_method"]) in msg


@pytest.mark.parametrize("qc", ["gptq", ["awq"], 4, True], ids=["str", "list", "int", "bool"])
def test_quantization_config_that_is_not_an_object_is_refused_by_name(tmp_path: Path, qc: Any) -> None:
    # a hand-edited config.json: the refusal names the value, not a "missing" quant_method
    msg = _refusal(_config_dir(tmp_path, qc), load_format="dummy")
    assert "config.json: quantization_config: expected an object with a quant_method" in msg, msg
    assert f"got {type(qc).__name__} {qc!r}" in msg, msg


@pytest.mark.parametrize(
    "flag",
    ["compressed-tensors", "modelopt", "bitsandbytes", "gptq_marlin", "awq_marlin", "fbgemm_fp8", "FP8"],
)
def test_vllm_quantization_flag_values_are_refused(tmp_path: Path, flag: str) -> None:
    msg = _refusal(_config_dir(tmp_path, QC), load_format="dummy", quantization=flag)
    assert f"quantization {flag!r} is not supported (expected one of ['fp8', 'none'])" in msg


# ------------------------------------------------------------------ checkpoints on disk
@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("qbase")
    return {
        "bf16": Path(write_checkpoint(str(root / "bf16"), "tiny", "hf", "bf16", 0)),
        "fp8": Path(write_checkpoint(str(root / "fp8"), "tiny", "hf", "fp8", 0)),
    }


def _copy(base: dict[str, Path], which: str, tmp_path: Path) -> Path:
    d = tmp_path / which
    shutil.copytree(base[which], d)
    return d


def _shard(d: Path) -> Path:
    (name,) = set(json.loads((d / INDEX).read_text())["weight_map"].values())
    return d / name


def _replace(d: Path, drop: list[str], add: dict[str, torch.Tensor]) -> None:
    """Drop tensors from the (single) shard, add others, and rewrite the index to match."""
    shard = _shard(d)
    tensors = load_file(shard)
    for k in drop:
        del tensors[k]
    tensors.update(add)
    save_file(tensors, shard, metadata={"format": "pt"})
    index = json.loads((d / INDEX).read_text())
    index["weight_map"] = dict.fromkeys(tensors, shard.name)
    (d / INDEX).write_text(json.dumps(index))


def _block_dequant64(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    s = scale.to(torch.float64).repeat_interleave(128, 0).repeat_interleave(128, 1)
    return q.to(torch.float64) * s[: q.shape[0], : q.shape[1]]


def test_modules_to_not_convert_are_read_as_stored(base, tmp_path: Path) -> None:
    """An FP8 checkpoint that keeps one FP8-format linear in bf16 and lists it in
    ``modules_to_not_convert``: with the model kept quantized (``--quantization fp8``, the CUDA
    default) that weight is the stored bf16 tensor exactly (it was re-quantized to FP8 before) and
    an FP8-stored neighbour is its float64 block dequantization."""
    d = _copy(base, "fp8", tmp_path)
    kept, fp8 = "model.layers.1.self_attn.q_a_proj.weight", "model.layers.1.self_attn.kv_proj.weight"
    stored = load_file(_shard(d))
    w = (
        torch.randn(stored[kept].shape, generator=torch.Generator().manual_seed(5))
        .mul(0.05)
        .to(torch.bfloat16)
    )
    _replace(d, [kept, kept + "_scale_inv"], {kept: w})
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"]["modules_to_not_convert"] = ["lm_head", kept.removesuffix(".weight")]
    (d / "config.json").write_text(json.dumps(cfg))
    check_model_dir(str(d), skip_tokenizer_init=True, quantization="fp8")
    model = get_model(ModelConfig.from_pretrained(str(d)), str(d), "cpu", torch.bfloat16, quantization="fp8")
    state = model.state_dict()
    assert state[kept].dtype == torch.bfloat16 and torch.equal(state[kept], w)
    ref = _block_dequant64(stored[fp8], stored[fp8 + "_scale_inv"]).to(torch.bfloat16)
    assert state[fp8].dtype == torch.bfloat16 and torch.equal(state[fp8], ref)


W = "model.layers.0.self_attn.q_a_proj.weight"
P = W.removesuffix(".weight")
EXPERTS = "model.layers.0.mlp.experts.gate_up_proj"


def _layout(
    name: str, shape: tuple[int, ...], experts: tuple[int, ...]
) -> tuple[list[str], dict[str, Any], str]:
    """(tensors dropped, tensors added, the words the refusal must hold) for one foreign layout of
    the weight ``W`` (shape ``[out, in]``) or the routed experts (``[E, 2I, D]``)."""
    o, k = shape
    i32, u8 = torch.int32, torch.uint8
    if name == "gptq":  # AutoGPTQ: qweight [in/8, out] int32, qzeros, scales, g_idx
        add = {
            P + ".qweight": torch.zeros(k // 8, o, dtype=i32),
            P + ".qzeros": torch.zeros(1, o // 8, dtype=i32),
            P + ".scales": torch.ones(1, o, dtype=torch.float16),
            P + ".g_idx": torch.zeros(k, dtype=i32),
        }
        return [W], add, "GPTQ"
    if name == "awq":  # AutoAWQ GEMM: qweight [in, out/8]
        add = {
            P + ".qweight": torch.zeros(k, o // 8, dtype=i32),
            P + ".qzeros": torch.zeros(1, o // 8, dtype=i32),
            P + ".scales": torch.ones(1, o, dtype=torch.float16),
        }
        return [W], add, "AWQ"
    if name == "compressed-tensors":  # pack-quantized w4a16
        add = {
            P + ".weight_packed": torch.zeros(o, k // 8, dtype=i32),
            P + ".weight_scale": torch.ones(o, k // 128, dtype=torch.bfloat16),
            P + ".weight_shape": torch.tensor([o, k]),
        }
        return [W], add, "compressed-tensors"
    if name == "modelopt-nvfp4":  # uint8 [out, in/2] + e4m3 per-16 scales + two fp32 scalars
        add = {
            W: torch.zeros(o, k // 2, dtype=u8),
            P + ".weight_scale": torch.ones(o, k // 16).to(torch.float8_e4m3fn),
            P + ".weight_scale_2": torch.tensor(1.0),
            P + ".input_scale": torch.tensor(1.0),
        }
        return [W], add, "quantization, which is not supported"
    if name == "bitsandbytes-nf4":
        add = {
            W: torch.zeros(o * k // 2, 1, dtype=u8),
            W + ".absmax": torch.ones(o * k // 64),
            W + ".quant_map": torch.zeros(16),
            W + ".quant_state.bitsandbytes__nf4": torch.zeros(8, dtype=u8),
        }
        return [W], add, "bitsandbytes"
    if name == "mxfp4":  # gpt-oss: [E, N, K/32, 16] blocks + [E, N, K/32] exponent scales
        e, n, dk = experts
        add = {
            EXPERTS + "_blocks": torch.zeros(e, n, dk // 32, 16, dtype=u8),
            EXPERTS + "_scales": torch.full((e, n, dk // 32), 127, dtype=u8),
        }
        return [EXPERTS], add, "MXFP4"
    assert name == "int8"  # same shape as the weight: a cast would have read it as one
    return [W], {W: torch.ones(o, k, dtype=torch.int8)}, "I8 (integer) weight without a scale"


LAYOUTS = ["gptq", "awq", "compressed-tensors", "modelopt-nvfp4", "bitsandbytes-nf4", "mxfp4", "int8"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_foreign_tensor_layouts_are_refused_naming_the_method(base, tmp_path: Path, layout: str) -> None:
    d = _copy(base, "bf16", tmp_path)
    stored = load_file(_shard(d))
    drop, add, words = _layout(layout, tuple(stored[W].shape), tuple(stored[EXPERTS].shape))
    _replace(d, drop, add)
    msg = _refusal(d)
    assert f"{_shard(d)}: " in msg and words in msg and "not supported" in msg, msg
    assert "DeepSeek's block FP8 / FP4 weights and unquantized (float) ones" in msg
    with pytest.raises(ValueError, match="not supported"):  # the loader itself refuses too
        get_model(ModelConfig.from_pretrained(str(d)), str(d), "cpu", torch.float32)


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("quantize_config.json", {"bits": 4, "group_size": 128, "desc_act": False, "sym": True}, "GPTQ"),
        (
            "quant_config.json",
            {"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM"},
            "AWQ",
        ),
        ("quantize_config.json", {"quant_method": "gptq", "bits": 4}, "quant_method 'gptq'"),
    ],
    ids=["gptq", "awq", "gptq-method"],
)
def test_gptq_awq_side_files_are_refused(
    base, tmp_path: Path, name: str, content: dict[str, Any], words: str
) -> None:
    d = _copy(base, "bf16", tmp_path)
    (d / name).write_text(json.dumps(content))
    msg = _refusal(d)
    assert f"{d / name}: {words} quantization (bits 4) is not supported" in msg

"""Published DeepSeek-V4-architecture configs and the quantization shapes users pair with them.

Served as transformers reads them:

* ``tiny-DeepseekV4ForCausalLM.config.json``: shape of trl-internal-testing/tiny-DeepseekV4ForCausalLM's
  ``config.json`` (a transformers-written tiny model: ``compress_rope_parameters`` beside a flat
  YaRN ``rope_parameters`` carrying both ``type`` and ``rope_type``, ``o_groups`` 8 over 4 heads,
  ``intermediate_size`` beside ``moe_intermediate_size``, null V3 keys ``kv_lora_rank`` /
  ``n_group`` / ``topk_group`` / ``v_head_dim``, ``dtype`` instead of ``torch_dtype``).
* ``DeepSeek-V4-Flash-FP8-4layer.config.json``: shape of Pinaster/DeepSeek-V4-Flash-FP8-4layer's
  ``config.json`` (an FP8 repackage cut to 4 layers with no ``compress_ratios``,
  ``compress_rope_theta``, ``expert_dtype`` or ``first_k_dense_replace``: transformers' default
  schedules and FP8 experts).
* ``transformers.DeepseekV4Config().to_dict()``: every default of the installed transformers.

Oracle: ``transformers.AutoConfig`` on the same file (the config fields) and HF's
``DeepseekV4ForCausalLM`` on the same random weights (log-probabilities, slow tier).

Refused or read up front (each failed before the fix here):

* ``quantization_config: {}`` beside a top-level ``expert_dtype`` (a BF16 conversion that emptied
  the block and kept the key; transformers folds the key into the empty block) is an unquantized
  checkpoint, as the same file without the block is; it was refused as a quantization with no
  ``quant_method``.
* ``--quantization none`` still checks the checkpoint's quantization: only DeepSeek's FP8 / FP4 can
  be dequantized at load, so an AWQ / GPTQ / compressed-tensors / MLX / ModelOpt config is refused
  by name (it was served with random weights under ``--load-format dummy``).
* FP8 with ``activation_scheme: static`` (per-tensor input scales, which the runtime never applies)
  is refused naming the field.
* SGLang ``--quantization`` methods the runtime does not compute (``w8a8_fp8``, ``modelopt_fp4``,
  ...) are refused in one line saying why (argparse's bare "invalid choice" before).
* An ``architectures`` given by ``--json-model-override-args`` is checked as the file's is.
* ``--quantization fp8`` (FP4 experts) on a model whose expert input sizes are not multiples of 32
  is refused naming the size before any process loads the model (it failed in the model process).
* A rope key of ``--json-model-override-args`` wins over the file's other spellings of it
  (``rope_parameters`` over an official file's ``rope_scaling``; ``rope_theta`` & co. over the
  copies in a transformers-dialect ``rope_parameters``), and an ``expert_dtype`` override over the
  copy inside ``quantization_config``: all were silently lost.
"""

from __future__ import annotations

import copy
import json
import math
import shlex
from pathlib import Path
from typing import Any

import pytest
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.entrypoints.launcher import check_model_dir
from sglang_v4.layers.quantization import QuantConfig, resolve_quantization
from transformers import AutoConfig, DeepseekV4Config

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
FLASH = json.loads((CONFIGS / "DeepSeek-V4-Flash.config.json").read_text())
TRL_TINY = json.loads((CONFIGS / "tiny-DeepseekV4ForCausalLM.config.json").read_text())
FP8_4LAYER = json.loads((CONFIGS / "DeepSeek-V4-Flash-FP8-4layer.config.json").read_text())
DUMMY = dict(load_format="dummy", skip_tokenizer_init=True)


def _write(d: Path, cfg: dict[str, Any]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    return d


def _fields(cfg: DeepseekV4Config) -> dict[str, Any]:
    """A config's values less the bookkeeping of how it was read (the directory, the popped
    ``architectures`` / ``dtype``, the legacy ``type`` transformers keeps beside ``rope_type``)."""
    skip = ("_name_or_path", "architectures", "dtype", "transformers_version")
    d = {k: v for k, v in cfg.to_dict().items() if k not in skip}
    d["rope_parameters"] = {
        k: {x: y for x, y in p.items() if x != "type"} for k, p in cfg.rope_parameters.items()
    }
    return d


def _refusal(d: Path, **kw: Any) -> str:
    with pytest.raises(ValueError) as e:
        check_model_dir(str(d), **{**DUMMY, **kw})
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


# ------------------------------------------------------------------------------- served as published
@pytest.mark.parametrize(
    "cfg",
    [TRL_TINY, FP8_4LAYER, DeepseekV4Config().to_dict()],
    ids=["trl-tiny", "fp8-4layer", "transformers-defaults"],
)
def test_published_shapes_read_as_transformers_reads_them(tmp_path: Path, cfg: dict[str, Any]) -> None:
    d = _write(tmp_path, cfg)
    check_model_dir(str(d), **DUMMY)
    mc = ModelConfig.from_pretrained(str(d))
    assert _fields(mc.hf) == _fields(AutoConfig.from_pretrained(str(d)))
    assert len(mc.compress_ratios) == mc.num_layers == cfg["num_hidden_layers"]


def test_fp8_repackage_without_expert_dtype_keeps_fp8_linears(tmp_path: Path) -> None:
    """The 4-layer FP8 repackage names no ``expert_dtype``: FP8 linears kept, experts (FP8 in
    such files, as vLLM's ``DeepseekV4FP8Config`` reads a Base checkpoint's) dequantized."""
    mc = ModelConfig.from_pretrained(str(_write(tmp_path, FP8_4LAYER)))
    assert resolve_quantization(None, mc.hf, "cuda") == QuantConfig("fp8", None)
    assert resolve_quantization("none", mc.hf, "cuda") is None


@pytest.mark.slow
def test_trl_tiny_shape_matches_hf_logprobs() -> None:
    """The trl tiny shape (vocabulary cut to 1000) on random weights: the runtime's teacher-forced
    log-probabilities over 300 tokens in chunks of 100 equal HF's within 1e-3."""
    from dsv4_testutil import Driver, hf_logprobs, make_twin, random_ids

    cfg = {k: v for k, v in copy.deepcopy(TRL_TINY).items() if k not in ("dtype", "transformers_version")}
    twin = make_twin("trl-tiny", seed=3, cfg={**cfg, "vocab_size": 1000})
    ids = random_ids(300, seed=1)
    mc = twin.mc
    page = math.lcm(256, mc.csa_ratio, mc.hca_ratio, mc.sliding_window)
    got = Driver(twin, page_size=page).run_chunked(ids, 100)
    assert (got - hf_logprobs(twin, ids)).abs().max().item() <= 1e-3


# ------------------------------------------------------------------------------- quantization blocks
def test_empty_quantization_config_with_expert_dtype_is_unquantized(tmp_path: Path) -> None:
    emptied = _write(tmp_path / "emptied", {**FLASH, "quantization_config": {}})
    dropped = _write(tmp_path / "dropped", {**FLASH, "quantization_config": None})
    check_model_dir(str(emptied), **DUMMY)
    got = ModelConfig.from_pretrained(str(emptied)).hf
    # transformers 5.21 on fold the top-level ``expert_dtype`` into the empty block; 5.17 to 5.20 keep
    # it empty (the key stays at the top level in both)
    hf = AutoConfig.from_pretrained(str(emptied))
    assert hf.quantization_config in ({}, {"expert_dtype": "fp4"}) and hf.expert_dtype == "fp4"
    want = ModelConfig.from_pretrained(str(dropped)).hf
    for flag in (None, "fp8", "none"):
        for device in ("cuda", "cpu"):
            assert resolve_quantization(flag, got, device) == resolve_quantization(flag, want, device)
    assert resolve_quantization(None, got, "cuda") is None
    assert resolve_quantization("fp8", got, "cuda") == QuantConfig("fp8", "fp4")  # quantized on load


@pytest.mark.parametrize(
    ("qc", "field"),
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}, "quant_method"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "quant_method"),
        ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}, "quant_method"),
        ({"quant_algo": "NVFP4", "kv_cache_quant_algo": None}, "quant_method"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "quant_method"),
    ],
    ids=["awq", "gptq", "compressed-tensors", "modelopt", "bitsandbytes"],
)
@pytest.mark.parametrize("flag", [None, "none", "fp8"])
def test_foreign_quantization_refused_whatever_the_flag(
    tmp_path: Path, qc: dict[str, Any], field: str, flag: str | None
) -> None:
    d = _write(tmp_path, {**FLASH, "quantization_config": qc, "expert_dtype": None})
    assert f"quantization_config.{field}" in _refusal(d, quantization=flag)


def test_mlx_block_refused_with_quantization_none(tmp_path: Path) -> None:
    mlx = {"group_size": 64, "bits": 4, "mode": "affine"}
    d = _write(tmp_path, {**FLASH, "quantization_config": None, "quantization": mlx})
    assert "quantization: MLX" in _refusal(d, quantization="none")


@pytest.mark.parametrize("scheme", ["static", "STATIC"])
@pytest.mark.parametrize("flag", [None, "none", "fp8"])
def test_static_fp8_activation_scheme_refused(tmp_path: Path, scheme: str, flag: str | None) -> None:
    d = _write(
        tmp_path,
        {**FLASH, "quantization_config": {**FLASH["quantization_config"], "activation_scheme": scheme}},
    )
    assert "quantization_config.activation_scheme" in _refusal(d, quantization=flag)


@pytest.mark.parametrize("scheme", ["dynamic", "DYNAMIC", None])
def test_dynamic_or_absent_activation_scheme_served(tmp_path: Path, scheme: str | None) -> None:
    qc = {
        k: v
        for k, v in {**FLASH["quantization_config"], "activation_scheme": scheme}.items()
        if v is not None
    }
    d = _write(tmp_path, {**FLASH, "quantization_config": qc})
    check_model_dir(str(d), **DUMMY)
    assert resolve_quantization(None, ModelConfig.from_pretrained(str(d)).hf, "cuda") == QuantConfig(
        "fp8", "fp4"
    )


# ------------------------------------------------------------------------------- launch flags
@pytest.mark.parametrize("method", ["w8a8_fp8", "modelopt_fp4", "mxfp4", "awq", "gguf"])
def test_sglang_quantization_methods_refused_saying_why(
    method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from sglang_v4.launch_server import main

    with pytest.raises(SystemExit) as e:
        main(shlex.split(f"--quantization {method} --device cpu"))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "usage:" not in err, err
    assert f"argument --quantization: quantization {method!r} is not supported" in err, err
    assert "DeepSeek's published format" in err, err


def test_architectures_override_is_checked(tmp_path: Path) -> None:
    d = _write(tmp_path, FLASH)
    check_model_dir(str(d), model_overrides={"architectures": ["DeepseekV4ForCausalLM"]}, **DUMMY)
    msg = _refusal(d, model_overrides={"architectures": ["DeepseekV3ForCausalLM"]})
    assert "architectures" in msg and "DeepseekV3ForCausalLM" in msg


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"moe_intermediate_size": 48}, "moe_intermediate_size"), ({"hidden_size": 100}, "hidden_size")],
)
def test_fp4_experts_of_sizes_not_multiple_of_32_refused_up_front(
    tmp_path: Path, changes: dict[str, Any], field: str
) -> None:
    """``--quantization fp8`` (FP4 experts, one scale per 32 inputs) on a model whose expert input
    sizes are not multiples of 32: refused by ``check_model_dir`` before any process loads the model (the
    experts' constructor raised it in the model process); ``none`` serves it."""
    from dsv4_testutil import BASE

    d = _write(tmp_path, {**BASE, **changes})
    for device in ("cpu", "cuda"):
        msg = _refusal(d, quantization="fp8", device=device)
        assert msg.startswith(f"model_path: {d / 'config.json'}: {field}: ") and "--quantization none" in msg
    check_model_dir(str(d), quantization="none", device="cpu", **DUMMY)
    check_model_dir(str(d), quantization=None, device="cuda", **DUMMY)  # unquantized checkpoint


# ------------------------------------------------------------------------------- rope overrides
YARN_32 = {
    "rope_type": "yarn",
    "factor": 32.0,
    "original_max_position_embeddings": 65536,
    "beta_fast": 32,
    "beta_slow": 1,
}


def _rope(cfg: DeepseekV4Config) -> dict[str, Any]:
    return {k: {x: y for x, y in p.items() if x != "type"} for k, p in cfg.rope_parameters.items()}


def _hf_format(cfg: dict[str, Any]) -> dict[str, Any]:
    """What ``save_pretrained`` writes for ``cfg``: transformers' dialect (nested
    ``rope_parameters`` holding each rope's ``rope_theta`` and ``partial_rotary_factor``)."""
    return DeepseekV4Config(**{k: v for k, v in cfg.items() if k != "model_type"}).to_dict()


@pytest.mark.parametrize(
    "override",
    [
        {"rope_parameters": YARN_32},
        {"rope_scaling": YARN_32},
        {"rope_theta": 20000.0},
        {"compress_rope_theta": 320000.0},
        {"partial_rotary_factor": 0.25},
        {"rope_theta": 20000.0, "compress_rope_theta": 320000.0},
    ],
    ids=[
        "rope_parameters",
        "rope_scaling",
        "rope_theta",
        "compress_rope_theta",
        "partial_rotary_factor",
        "both_thetas",
    ],
)
@pytest.mark.parametrize("dialect", ["official", "transformers", "trl-tiny"])
def test_rope_override_wins_over_the_files_other_spelling(
    tmp_path: Path, override: dict[str, Any], dialect: str
) -> None:
    """``--json-model-override-args`` of a rope key gives the model transformers builds from the
    file with that key written in it by hand (the official dialect: the key's only spelling there).
    Before, a ``rope_parameters`` override of an official file (which has ``rope_scaling``) and a
    ``rope_theta`` / ``compress_rope_theta`` / ``partial_rotary_factor`` override of a file in
    transformers' dialect (whose nested ``rope_parameters`` repeats them) were silently lost."""
    source = {"official": FLASH, "transformers": _hf_format(FLASH), "trl-tiny": TRL_TINY}[dialect]
    base = {"official": FLASH, "transformers": FLASH, "trl-tiny": TRL_TINY}[dialect]
    edited = dict(base)
    if "rope_parameters" in override or "rope_scaling" in override:
        for k in ("rope_scaling", "rope_parameters", "compress_rope_parameters"):
            edited.pop(k, None)
    elif dialect == "trl-tiny":  # its flat rope_parameters / compress_rope_parameters repeat the scalars
        for k in ("rope_parameters", "compress_rope_parameters"):
            edited[k] = dict(edited[k])
            if "rope_theta" in override and k == "rope_parameters":
                edited[k]["rope_theta"] = override["rope_theta"]
            if "compress_rope_theta" in override and k == "compress_rope_parameters":
                edited[k]["rope_theta"] = override["compress_rope_theta"]
            if "partial_rotary_factor" in override:
                edited[k]["partial_rotary_factor"] = override["partial_rotary_factor"]
    edited.update(override)
    oracle = AutoConfig.from_pretrained(str(_write(tmp_path / "oracle", edited)))
    d = _write(tmp_path / "file", source)
    check_model_dir(str(d), model_overrides=override, **DUMMY)
    got = ModelConfig.from_pretrained(str(d), override).hf
    assert _rope(got) == _rope(oracle)
    assert _rope(got) != _rope(ModelConfig.from_pretrained(str(d)).hf)  # the override did change it


@pytest.mark.parametrize("inside", [False, True], ids=["top-level", "in-quantization_config"])
def test_expert_dtype_override_wins(tmp_path: Path, inside: bool) -> None:
    """``{"expert_dtype": "fp8"}`` overrides the file's, also where the file keeps it inside
    ``quantization_config`` (DeepSeek-V4.1's place, read first; the override was lost there). Oracle:
    the file with ``fp8`` written in that place, as the FP8-expert Base checkpoints have it."""
    qc = {**FLASH["quantization_config"], **({"expert_dtype": "fp4"} if inside else {})}
    d = _write(tmp_path / "file", {**FLASH, "quantization_config": qc})
    oracle_qc = {**qc, **({"expert_dtype": "fp8"} if inside else {})}
    oracle = _write(tmp_path / "oracle", {**FLASH, "quantization_config": oracle_qc, "expert_dtype": "fp8"})
    want = resolve_quantization(None, ModelConfig.from_pretrained(str(oracle)).hf, "cuda")
    assert want == QuantConfig("fp8", None)
    got = ModelConfig.from_pretrained(str(d), {"expert_dtype": "fp8"}).hf
    assert resolve_quantization(None, got, "cuda") == want


def test_trl_tiny_tp_sizes(tmp_path: Path) -> None:
    """The trl tiny shape has 4 query heads over 8 output groups: ``--tp-size`` 8 would leave half
    the ranks no head (refused naming ``num_attention_heads``); 2 and 4 split both."""
    d = _write(tmp_path, TRL_TINY)
    for tp in (2, 4):
        check_model_dir(str(d), tp_size=tp, **DUMMY)
    msg = _refusal(d, tp_size=8)
    assert msg.startswith("tp_size: ") and "num_attention_heads (4) is not divisible by 8" in msg, msg

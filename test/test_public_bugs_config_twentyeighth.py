"""Model-directory files that public reports found misread elsewhere, replayed against this
runtime's config reader (``ModelConfig``), quantization resolver and tokenizer loader: the three
forms of ``rope_scaling`` (``null``, absent, a dict of the old ``type`` spelling), an incomplete
``rope_scaling`` block, a flat ``rope_theta`` beside transformers' nested ``rope_parameters``, a
``quantization_config`` that omits or nulls ``weight_block_size``, the stop set built from
``config.json``, ``generation_config.json`` and the tokenizer together, a
``tokenizer_config.json`` whose ``model_max_length`` is shorter than the model's context, and a
``generation_config.json`` ``top_k`` of 0 (transformers' "no top-k").

Each test ports one public report (cited as ``owner/repo#N``). Oracles: transformers'
``DeepseekV4Config`` (the config the model is built from), the values written into the files
(``json``), the ``tokenizers`` library's own encoding of the same ``tokenizer.json``, and
DeepSeek's published block size (128 x 128) for an FP8 block that does not state one.

No fault was found by these reports; the tests guard the behaviour they ask for.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from dsv4_testutil import CONFIGS
from public_bug_configs_testutil import write_model_dir
from sglang_v4.configs.model_config import ModelConfig
from transformers import DeepseekV4Config

CFG: dict[str, Any] = CONFIGS["sliding_first"]


def _rope(params: dict[str, Any]) -> dict[str, tuple[Any, Any, Any]]:
    """``{kind: (rope_type, factor, rope_theta)}`` of a nested ``rope_parameters``."""
    return {k: (v.get("rope_type"), v.get("factor"), v.get("rope_theta")) for k, v in params.items()}


def _cfg(**changes: Any) -> dict[str, Any]:
    """``CFG`` without any rope block of its own, with ``changes`` applied."""
    d = copy.deepcopy(CFG)
    for key in ("rope_scaling", "rope_parameters", "rope_theta"):
        d.pop(key, None)
    d.update(changes)
    return d


# --------------------------------------------------------------------------- rope_scaling forms
@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"rope_scaling": None}, id="null"),
        pytest.param({}, id="absent"),
        pytest.param({"rope_scaling": {"type": "linear", "factor": 4.0}}, id="old_type_key"),
    ],
)
def test_llama_cpp_2793_rope_scaling_null_absent_or_defined(changes: dict[str, Any]) -> None:
    """ggml-org/llama.cpp#2793: ``config.json`` can hold ``"rope_scaling": null``, no
    ``rope_scaling`` at all, or a block such as ``{"type": "linear", "factor": 4.0}``, and the
    converter broke on the ``null`` one. Expected: all three load, and each layer kind's rope
    (type, factor, base) is the one transformers' ``DeepseekV4Config`` builds from the same dict."""
    d = _cfg(**changes)
    want = _rope(DeepseekV4Config(**copy.deepcopy(d)).rope_parameters)
    got = _rope(ModelConfig.from_dict(d).hf.rope_parameters)
    assert got == want


def test_sglang_14772_an_incomplete_rope_scaling_block() -> None:
    """sgl-project/sglang#14772: a ``rope_scaling`` that holds only ``rope_type`` / ``rope_theta``
    (no ``factor`` nor ``original_max_position_embeddings``) made SGLang index the missing keys
    and fail. Expected: a ``default`` block with no factor loads as the default rope
    (transformers' reading of it); a ``yarn`` block with no factor, which has no scaling to
    apply, is refused with a ``ValueError`` that names ``factor``, not a ``KeyError``."""
    default = _cfg(rope_scaling={"rope_type": "default", "rope_theta": 10000.0})
    want = _rope(DeepseekV4Config(**copy.deepcopy(default)).rope_parameters)
    assert _rope(ModelConfig.from_dict(default).hf.rope_parameters) == want
    yarn = _cfg(rope_scaling={"rope_type": "yarn", "rope_theta": 10000.0})
    with pytest.raises(ValueError, match="factor") as e:
        ModelConfig.from_dict(yarn)
    assert not isinstance(e.value, KeyError)


def test_vmlx_swift_83_flat_rope_theta_and_nested_rope_parameters_agree() -> None:
    """osaurus-ai/vmlx-swift#83: a loader that read only a nested ``rope_parameters`` aborted on
    configs giving the base as a flat top-level ``rope_theta``. Expected: both layouts load, give
    the main rope the same base, and each matches what transformers' ``DeepseekV4Config`` reads
    from the same dict."""
    flat = _cfg(rope_theta=20000.0)
    nested = _cfg(
        rope_parameters={
            "main": {"rope_type": "default", "rope_theta": 20000.0},
            "compress": {"rope_type": "default", "rope_theta": 160000.0},
        }
    )
    for d in (flat, nested):
        want = _rope(DeepseekV4Config(**copy.deepcopy(d)).rope_parameters)
        got = _rope(ModelConfig.from_dict(d).hf.rope_parameters)
        assert got == want
        assert got["main"][2] == 20000.0


# --------------------------------------------------------------------------- quantization_config
@pytest.mark.parametrize(
    "qc",
    [
        pytest.param({"quant_method": "fp8", "activation_scheme": "dynamic"}, id="no_block"),
        pytest.param({"quant_method": "fp8", "weight_block_size": None}, id="null_block"),
        pytest.param({"quant_method": "fp8", "weight_block_size": [128, 128]}, id="stated_block"),
    ],
)
def test_vllm_47972_fp8_block_size_defaults_to_deepseeks(qc: dict[str, Any]) -> None:
    """vllm-project/vllm#47972 (DeepSeek-V4 FP8 checkpoints of another exporter) reads an FP8
    weight config that states no block size as the 128 x 128 block
    (``list(block_size or [128, 128])``) rather than failing on the missing key. Expected: with the block left out or ``null`` the
    config loads and the linears keep DeepSeek's block FP8 on CUDA exactly as when the file
    states ``[128, 128]`` (no dequantization to the model dtype, no error)."""
    from sglang_v4.layers.quantization import resolve_quantization

    got = resolve_quantization(None, ModelConfig.from_dict(_cfg(quantization_config=qc)).hf, "cuda")
    stated = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    want = resolve_quantization(None, ModelConfig.from_dict(_cfg(quantization_config=stated)).hf, "cuda")
    assert want is not None and want.linear == "fp8"
    assert got == want


# --------------------------------------------------------------------------- stop set
def test_rapid_mlx_546_stop_set_is_the_union_of_every_file(tmp_path: Path) -> None:
    """raullenchai/Rapid-MLX#546: ``tokenizer_config.json`` declares one end token while
    ``generation_config.json`` lists the full stop set (the chat-turn terminator too); using only
    one source let the model run past its turn. Expected: generations stop on the union of
    ``config.json``'s ``eos_token_id``, every id of ``generation_config.json``'s list and the
    tokenizer's ``eos_token`` (ids read back from the files and the ``tokenizers`` library)."""
    from sglang_v4.hf_transformers_utils import get_tokenizer
    from sglang_v4.managers.stop_tokens import stop_token_ids
    from tokenizers import Tokenizer

    d = write_model_dir(tmp_path / "m", _cfg(eos_token_id=7), generation={"eos_token_id": [7, 11, 13]})
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text())
    eos_text = (
        tok_cfg["eos_token"]["content"] if isinstance(tok_cfg["eos_token"], dict) else tok_cfg["eos_token"]
    )
    tok_eos = Tokenizer.from_file(str(d / "tokenizer.json")).token_to_id(eos_text)
    assert tok_eos is not None and tok_eos < CFG["vocab_size"]
    mc = ModelConfig.from_pretrained(str(d))
    assert stop_token_ids(mc, get_tokenizer(str(d))) == {7, 11, 13, tok_eos}


# --------------------------------------------------------------------------- tokenizer length
def test_sglang_7515_tokenizer_model_max_length_does_not_cap_the_context(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """sgl-project/sglang#7515: with ``--context-length`` larger than the tokenizer's
    ``model_max_length`` the server logged "Token indices sequence length is longer than the
    specified maximum sequence length for this model (18294 > 16384)", and users read the 16384 as
    a limit. Expected: the context length comes from ``config.json``
    (``max_position_embeddings``), a prompt longer than ``model_max_length`` encodes whole, to the
    ids the ``tokenizers`` library gives for the same ``tokenizer.json``, and no such warning is
    logged."""
    from sglang_v4.hf_transformers_utils import get_tokenizer
    from tokenizers import Tokenizer

    d = write_model_dir(tmp_path / "m", _cfg())
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text())
    tok_cfg["model_max_length"] = 16
    (d / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    assert ModelConfig.from_pretrained(str(d)).context_length == CFG["max_position_embeddings"]
    text = "the quick brown fox jumps over the lazy dog " * 8
    want = Tokenizer.from_file(str(d / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    assert len(want) > 16
    with caplog.at_level(logging.WARNING):
        got = get_tokenizer(str(d)).encode(text, add_special_tokens=False)
    assert got == want
    assert "Token indices sequence length" not in caplog.text


# --------------------------------------------------------------------------- generation_config top_k
def test_ms_swift_9071_generation_config_top_k_zero_means_no_top_k(tmp_path: Path) -> None:
    """modelscope/ms-swift#9071: a model's ``generation_config.json`` with ``"top_k": 0`` was
    turned into transformers' default 50 (or refused), where transformers reads 0 as "no top-k
    filtering" (the review's point). Expected: with the model's sampling defaults a chat request
    that sets no ``top_k`` samples from the whole vocabulary (SGLang's ``top_k=-1``) and keeps the
    file's ``temperature``; a request's own ``top_k`` still wins."""
    from sglang_v4.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang_v4.entrypoints.openai.request_sampling import build_sampling_params
    from sglang_v4.entrypoints.openai.sampling_defaults import model_sampling_defaults
    from sglang_v4.sampling.sampling_params import TOP_K_ALL

    d = write_model_dir(tmp_path / "m", _cfg(), generation={"top_k": 0, "temperature": 0.6})
    defaults = model_sampling_defaults(str(d), "model")
    assert TOP_K_ALL == -1

    def sent(**body: Any) -> dict[str, Any]:
        req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Hi"}], **body)
        return build_sampling_params(
            req, 3, tokenizer=None, vocab_size=None, grammar_enabled=False, chat_defaults=defaults
        )

    sp = sent()
    assert (sp["top_k"], sp["temperature"]) == (-1, 0.6)
    assert sent(top_k=5)["top_k"] == 5

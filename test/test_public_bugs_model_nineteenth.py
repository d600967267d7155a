"""A nineteenth set of public reports, model configs and checkpoint files: YaRN fields written as
JSON integers, ue8m0 block scales of FP8 linears, FP4 (e2m1) experts' nibble order and e8m0
scale bytes, FP8 weights whose sizes are not block multiples and stacked experts, HF-named FP8
checkpoints (``weight_scale_inv``), the top-level tensors of an HF-namespace checkpoint, a
``[1, 1]`` scale of a multi-block weight, BF16 weights under a stale FP8 ``quantization_config``,
scales in another shard than their weights, an absent / null / malformed ``weight_block_size``,
``generation_config.json``'s ``max_new_tokens`` and ``eos_token_id`` against a request's own
fields, ``ignore_eos``, and one BOS per chat prompt (each test names its report).

Oracles: float64 references written here from the documented formats (DeepSeek's YaRN frequency
ramp, ``w = q * 2 ** (b - 127)`` over ``weight_block_size`` blocks, the OCP MX e2m1 table with
the low nibble first), HF transformers (``DeepseekV4ForCausalLM.from_pretrained`` and
``AutoTokenizer`` on the same files), the raw tensors of the safetensors files, and the OpenAI
API's own definition of the request fields.
"""

from __future__ import annotations

import copy
import glob
import json
import logging
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from dsv4_testutil import CONFIGS, Driver, Twin, hf_logprobs, random_ids
from openai_fake_tm import FakeTM, app_client
from safetensors import safe_open
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.layers.rotary_embedding import RotaryTables
from sglang_v4.model_loader.loader import load_state_dict
from sglang_v4.model_loader.quant import (
    E8M0_DTYPE,
    FP8_DTYPE,
    check_scale,
    dequantize_fp4,
    dequantize_fp8_block,
)
from sglang_v4.model_loader.weight_loader import load_weights_into
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import check_stop
from sglang_v4.tools.make_checkpoint import write_checkpoint

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
FLASH = FIXTURES / "DeepSeek-V4-Flash.config.json"
TINY = FIXTURES / "tiny-DeepseekV4ForCausalLM.config.json"
MSGS = [{"role": "user", "content": "hi"}]

#: OCP MX e2m1 values by 4-bit code (sign bit 3): the table of DeepSeek's ``inference/convert.py``.
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def _e8m0_value64(b: torch.Tensor) -> torch.Tensor:
    """float64 ``2 ** (b - 127)`` of e8m0 bytes (byte 0 is ``2 ** -127``)."""
    return torch.pow(torch.tensor(2.0, dtype=torch.float64), b.to(torch.float64) - 127.0)


def _block_dequant64(q: torch.Tensor, s: torch.Tensor, bm: int = 128, bn: int = 128) -> torch.Tensor:
    """float64 ``q * scale`` with one scale per ``bm x bn`` block (partial at the edges), element
    by element over the block grid; ``q [..., R, C]``, ``s [..., ceil(R/bm), ceil(C/bn)]`` float64."""
    *lead, r, c = q.shape
    out = q.to(torch.float64).clone()
    for i in range(-(-r // bm)):
        for j in range(-(-c // bn)):
            out[..., i * bm : (i + 1) * bm, j * bn : (j + 1) * bn] *= s[..., i, j][..., None, None]
    return out


# ---------------------------------------------------------------------------------------------
# YaRN fields given as JSON integers (huggingface/transformers#37134)
# ---------------------------------------------------------------------------------------------


def _deepseek_yarn_inv_freq64(dim: int, base: float, factor: float, beta_fast: float, beta_slow: float,
                              original: int) -> torch.Tensor:  # fmt: skip
    """float64 YaRN inverse frequencies as DeepSeek's reference ``precompute_freqs_cis`` computes
    them (the sequence is longer than ``original``): the correction range of ``beta_fast`` /
    ``beta_slow`` rotations, floored / ceiled and clamped to ``[0, dim - 1]``, a linear ramp
    between, ``freq / factor`` below it and ``freq`` above."""
    freqs = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)

    def corr(rot: float) -> float:
        return dim * math.log(original / (rot * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    smooth = 1 - ramp
    return freqs / factor * (1 - smooth) + freqs * smooth


def test_transformers_37134_integer_yarn_fields_give_the_reference_frequencies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """huggingface/transformers#37134 (DeepSeek's published ``rope_scaling`` writes ``factor``,
    ``beta_fast`` and ``beta_slow`` as JSON integers, and transformers' YaRN validation warned
    that each "must be a float"): the official DeepSeek-V4-Flash config (``factor: 16``,
    ``beta_fast: 32``, ``beta_slow: 1``) loads without a rope warning, and the compress rope's
    frequencies are DeepSeek's reference YaRN ramp in float64; the same file with the fields
    written as floats gives bit-identical tables."""
    raw = json.loads(FLASH.read_text())
    ys = raw["rope_scaling"]
    assert all(type(ys[k]) is int for k in ("factor", "beta_fast", "beta_slow"))
    with caplog.at_level(logging.WARNING):
        mc = ModelConfig.from_dict(copy.deepcopy(raw))
    assert not [m for m in caplog.messages if "rope" in m.lower() or "float" in m.lower()], caplog.messages
    rope = RotaryTables(mc, "cpu")
    dim = raw["qk_rope_head_dim"]  # the rotated channels of each head (64)
    want = _deepseek_yarn_inv_freq64(
        dim, float(raw["compress_rope_theta"]), 16.0, 32.0, 1.0, ys["original_max_position_embeddings"]
    )
    got = rope.inv_freq["compress"].to(torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0.0)
    floats = copy.deepcopy(raw)
    floats["rope_scaling"].update(factor=16.0, beta_fast=32.0, beta_slow=1.0)
    cold = RotaryTables(ModelConfig.from_dict(floats), "cpu")
    for kind in ("main", "compress"):
        assert (
            torch.equal(cold.inv_freq[kind], rope.inv_freq[kind]) and cold.scaling[kind] == rope.scaling[kind]
        )


# ---------------------------------------------------------------------------------------------
# FP8 block scales stored as ue8m0 (deepseek-ai/DeepSeek-V3#994)
# ---------------------------------------------------------------------------------------------


def test_deepseek_v3_994_ue8m0_block_scales_are_powers_of_two_exponents() -> None:
    """deepseek-ai/DeepSeek-V3#994 (``scale_fmt: ue8m0``: a block scale is one exponent byte,
    ``2 ** (b - 127)``, not a float32): an FP8 weight with ``float8_e8m0fnu`` block scales
    dequantizes to ``q * 2 ** (b - 127)`` per 128x128 block, in float64, bytes 0 (``2**-127``)
    included; the same scales as uint8 exponent bytes give the same weight."""
    g = torch.Generator().manual_seed(994)
    q = (torch.randn(256, 384, generator=g) * 100).clamp(-448, 448).to(FP8_DTYPE)
    b = torch.tensor([[120, 127, 0], [140, 1, 133]], dtype=torch.uint8)
    want = _block_dequant64(q, _e8m0_value64(b))
    for scale in (b.view(E8M0_DTYPE), b):
        got = dequantize_fp8_block(q, scale).to(torch.float64)
        assert torch.equal(got, want)


# ---------------------------------------------------------------------------------------------
# FP4 experts: nibble order and e8m0 bytes (anthony-chaudhary/fak#4829)
# ---------------------------------------------------------------------------------------------


def test_fak_4829_fp4_low_nibble_first_and_e8m0_byte_rules() -> None:
    """anthony-chaudhary/fak#4829 (DeepSeek-V4's packed FP4 experts: low nibble first, e2m1 values
    of the OCP MX table, one e8m0 scale per 32 values, byte 0 = ``2 ** -127``, byte 255 refused):
    every byte value decodes to ``(E2M1[b & 15], E2M1[b >> 4]) * scale`` in float64, and a scale
    holding byte 255 is refused with a ``ValueError`` naming the tensor."""
    packed = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.int8).reshape(16, 16)
    sbytes = torch.tensor([0, 1, 100, 127, 128, 130, 200, 160] * 2, dtype=torch.uint8).reshape(16, 1)
    table = torch.tensor(E2M1, dtype=torch.float64)
    u = packed.view(torch.uint8).to(torch.int64)
    vals = torch.stack([table[u & 15], table[u >> 4]], dim=-1).reshape(16, 32)
    want = vals * _e8m0_value64(sbytes)
    got = dequantize_fp4(packed, sbytes.view(E8M0_DTYPE)).to(torch.float64)
    assert torch.equal(got, want)
    bad = sbytes.clone()
    bad[3, 0] = 255
    with pytest.raises(ValueError, match=r"layers\.0\.ffn\.experts\.0\.w1\.scale"):
        check_scale(bad.view(E8M0_DTYPE), "layers.0.ffn.experts.0.w1.scale")


# ---------------------------------------------------------------------------------------------
# FP8 weights that are not block multiples, and stacked experts (intel/auto-round#747)
# ---------------------------------------------------------------------------------------------


def test_auto_round_747_partial_blocks_and_stacked_expert_scales() -> None:
    """intel/auto-round#747 (DeepSeek stores FP8 weights whose rows are not a multiple of 128,
    e.g. ``[587, 7168]``, and stacked experts ``[E, R, C]`` with ``[E, ceil(R/128), ceil(C/128)]``
    scales; the dequantizer assumed whole blocks): a ``[587, 300]`` weight and a stacked
    ``[3, 200, 130]`` one dequantize to the float64 block product, each expert with its own
    scales; a scale grid of the wrong size is refused naming the tensor."""
    g = torch.Generator().manual_seed(747)
    q = (torch.randn(587, 300, generator=g) * 50).clamp(-448, 448).to(FP8_DTYPE)
    s = torch.rand(5, 3, generator=g) + 0.01
    # q (4 significant bits) times a float32 scale is exact in float64: one rounding to float32
    assert torch.equal(dequantize_fp8_block(q, s), _block_dequant64(q, s.to(torch.float64)).float())
    qe = (torch.randn(3, 200, 130, generator=g) * 50).clamp(-448, 448).to(FP8_DTYPE)
    se = torch.rand(3, 2, 2, generator=g) + 0.01
    got = dequantize_fp8_block(qe, se)
    assert torch.equal(got, _block_dequant64(qe, se.to(torch.float64)).float())
    for e in range(3):
        assert torch.equal(got[e], _block_dequant64(qe[e], se[e].to(torch.float64)).float())
    with pytest.raises(ValueError, match="experts.down_proj"):
        dequantize_fp8_block(qe, se[:, :1], name="experts.down_proj")


# ---------------------------------------------------------------------------------------------
# HF-named FP8 checkpoints (ggml-org/llama.cpp#14781) and HF-namespace top-level tensors
# (Blaizzy/mlx-vlm#2277)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_fp8_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An HF-named checkpoint (``model.layers.N...weight_scale_inv``): FP8 linears with ue8m0
    block scales, packed FP4 experts."""
    out = str(tmp_path_factory.mktemp("hf_fp8_19"))
    write_checkpoint(
        out, fmt="hf", weights="fp8", seed=19, config_dict=copy.deepcopy(CONFIGS["sliding_first"])
    )
    return out


def _file_tensors(d: str) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for path in sorted(glob.glob(f"{d}/*.safetensors")):
        with safe_open(path, "pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    return out


def test_llama_cpp_14781_hf_named_weight_scale_inv_is_applied(hf_fp8_dir: str) -> None:
    """ggml-org/llama.cpp#14781 (a converter could not map ``model.layers.0.mlp.down_proj.
    weight_scale_inv`` of an HF-named DeepSeek FP8 checkpoint): every FP8 weight of an HF-named
    checkpoint is read as the float64 product of its ``F8_E4M3`` values and its
    ``weight_scale_inv`` blocks from the file, and no scale tensor is left over as a weight."""
    raw = _file_tensors(hf_fp8_dir)
    state = load_state_dict(hf_fp8_dir, dtype=torch.float32)
    fp8 = [k for k, v in raw.items() if v.dtype == FP8_DTYPE]
    assert fp8 and all(k + "_scale_inv" in raw for k in fp8)
    for k in fp8:
        want = _block_dequant64(raw[k], _e8m0_value64(raw[k + "_scale_inv"].view(torch.uint8)))
        torch.testing.assert_close(state[k].to(torch.float64), want, rtol=0, atol=0)
    assert not [k for k in state if "scale_inv" in k]


def test_mlx_vlm_2277_hf_namespace_top_level_tensors_all_arrive(tmp_path: Path) -> None:
    """Blaizzy/mlx-vlm#2277 (keys of an HF-namespace DeepSeek-V4 checkpoint were normalised so that
    the top-level tensors -- ``hc_head`` base / fn / scale, the final norm, the embedding, the
    head -- never reached the model, silently): loading an HF-named checkpoint fills each of them
    with the file's values, equal to what transformers' ``from_pretrained`` reads from the same
    files, and the logits of both agree."""
    from transformers import DeepseekV4ForCausalLM as HFModel

    d = str(tmp_path / "hf32")
    write_checkpoint(
        d, fmt="hf", weights="fp32", seed=2277, config_dict=copy.deepcopy(CONFIGS["sliding_first"])
    )
    raw = _file_tensors(d)
    ours = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(d))
    load_weights_into(ours, d, progress=False)
    hf = HFModel.from_pretrained(d, dtype=torch.float32).eval()
    ours_sd, hf_sd = ours.state_dict(), hf.state_dict()
    top = [k for k in raw if not k.startswith("model.layers.")]
    assert {"model.hc_head.hc_base", "model.hc_head.hc_fn", "model.hc_head.hc_scale"} <= set(top)
    for k in top:
        assert k in ours_sd and k in hf_sd, k
        assert torch.equal(ours_sd[k].float(), raw[k].float()), k
        assert torch.equal(ours_sd[k].float(), hf_sd[k].float()), k
    mc = ModelConfig.from_pretrained(d)
    twin = Twin(name="hf32", cfg={}, mc=mc, hf=hf, ours=ours)
    ids = random_ids(12, seed=2277)
    with torch.no_grad():
        assert (Driver(twin).run_chunked(ids, 12) - hf_logprobs(twin, ids)).abs().max().item() <= 1e-3


# ---------------------------------------------------------------------------------------------
# generation_config.json and a request's own length / EOS fields (vllm-project/vllm#34005,
# huggingface/text-generation-inference#2421, Blaizzy/mlx-vlm#2112, vllm-project/vllm#4589)
# ---------------------------------------------------------------------------------------------


def _model_dir(tmp_path: Path, gen: dict[str, Any], config_edit: dict[str, Any] | None = None) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    cfg = json.loads(TINY.read_text())
    cfg.update(config_edit or {})
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "generation_config.json").write_text(json.dumps(gen))
    return d


def _chat(tok: Any, d: Path, body: dict[str, Any], reply: str) -> tuple[dict[str, Any], dict[str, Any]]:
    tm = FakeTM(tok, reply=reply)
    r = app_client(tm, model_path=str(d)).post(
        "/v1/chat/completions", json={"model": "dsv4-test", "messages": MSGS, **body}
    )
    assert r.status_code == 200, r.text
    return dict(tm.received[-1].sampling_params or {}), r.json()


LONG_REPLY = " ".join(f"word{i}" for i in range(60))


def test_vllm_34005_explicit_max_tokens_is_not_capped_by_generation_config(tok: Any, tmp_path: Path) -> None:
    """vllm-project/vllm#34005 (``generation_config.json``'s ``max_new_tokens`` became a ceiling:
    an explicit ``max_tokens: 5000`` was cut to the file's 2048): with a file saying
    ``max_new_tokens: 4``, a request's ``max_tokens`` of 30 reaches the engine as 30 and the reply
    has 30 tokens (the client's own count of ``usage.completion_tokens``), finishing on length."""
    d = _model_dir(tmp_path, {"max_new_tokens": 4, "temperature": 0.6})
    sp, out = _chat(tok, d, {"max_tokens": 30}, LONG_REPLY)
    assert sp["max_new_tokens"] == 30
    assert out["usage"]["completion_tokens"] == 30 and out["choices"][0]["finish_reason"] == "length"
    assert len(tok.encode(out["choices"][0]["message"]["content"], add_special_tokens=False)) >= 29


def test_tgi_2421_max_tokens_null_is_no_limit(tok: Any, tmp_path: Path) -> None:
    """huggingface/text-generation-inference#2421 (``"max_tokens": null`` cut chat replies at a
    server default of 100 tokens): ``null`` is the OpenAI API's "no limit" -- the engine gets no
    ``max_new_tokens`` (the context alone bounds the reply), the same as leaving the field out,
    even beside a ``generation_config.json`` ``max_new_tokens``; the whole reply comes back."""
    d = _model_dir(tmp_path, {"max_new_tokens": 4})
    want = len(tok.encode(LONG_REPLY, add_special_tokens=False))
    for body in ({"max_tokens": None}, {"max_completion_tokens": None}, {}):
        sp, out = _chat(tok, d, body, LONG_REPLY)
        assert sp.get("max_new_tokens") is None, body
        assert out["usage"]["completion_tokens"] == want and out["choices"][0]["finish_reason"] == "stop"


def test_mlx_vlm_2112_tokenizer_eos_joins_the_generation_config_eos(
    default_model_dir: str, mtok: Any, tmp_path: Path
) -> None:
    """Blaizzy/mlx-vlm#2112 (``generation_config.json`` listed only one end token, which replaced
    the tokenizer's own instead of joining it: generation ran on to ``max_tokens``): with
    ``config.json`` and ``generation_config.json`` naming other ids, the stop set still holds the
    tokenizer's ``eos_token_id`` as transformers' ``AutoTokenizer`` reads it, plus every id the
    two files list."""
    from sglang_v4.hf_transformers_utils import get_tokenizer
    from sglang_v4.managers.stop_tokens import stop_token_ids

    d = tmp_path / "m"
    shutil.copytree(default_model_dir, d, ignore=shutil.ignore_patterns("*.safetensors*"))
    tok_eos = mtok.eos_token_id
    assert isinstance(tok_eos, int)
    others = [i for i in (5, 6, 7) if i != tok_eos]
    cfg = json.loads((d / "config.json").read_text())
    cfg["eos_token_id"] = others[0]
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": others[1:3]}))
    mc = ModelConfig.from_pretrained(str(d))
    assert stop_token_ids(mc, get_tokenizer(str(d))) == {tok_eos, *others[:3]}


def test_vllm_4589_ignore_eos_overrides_generation_config_eos_ids(tmp_path: Path) -> None:
    """vllm-project/vllm#4589 (the ``generation_config.json`` EOS ids were copied into each
    request's ``stop_token_ids``, so ``ignore_eos: true`` still stopped on them): with
    ``ignore_eos`` a token of the file's ``eos_token_id`` list does not end the request, and
    without it each of them does."""
    d = _model_dir(tmp_path, {"eos_token_id": [1, 7, 9]}, {"eos_token_id": 1})
    eos = set(ModelConfig.from_pretrained(str(d)).eos_token_ids)
    assert eos == {1, 7, 9}
    ignore = SamplingParams.from_dict({"ignore_eos": True, "max_new_tokens": 10})
    keep = SamplingParams.from_dict({"max_new_tokens": 10})
    for t in (1, 7, 9):
        assert check_stop([3, t], ignore, eos, None, False) is None
        assert check_stop([3, t], keep, eos, None, False) == {"type": "stop", "matched": t}


# ---------------------------------------------------------------------------------------------
# a per-tensor scale saved as a [1, 1] grid (unslothai/unsloth#8953) and one BOS per chat
# prompt (RooCodeInc/Roo-Code#7500)
# ---------------------------------------------------------------------------------------------


def test_unsloth_8953_singleton_scale_of_a_multi_block_weight_is_refused_untouched(
    hf_fp8_dir: str, tmp_path: Path
) -> None:
    """unslothai/unsloth#8953 (a per-tensor FP8 scale stored as a 2-D ``[1, 1]`` tensor was taken
    for a block grid): DeepSeek's format has one scale per 128x128 block, so a ``[1, 1]`` scale
    beside a weight of two row blocks is refused with a ``ValueError`` naming the weight and both
    grids, before any tensor is copied: the model keeps every value it had."""
    d = tmp_path / "ckpt"
    shutil.copytree(hf_fp8_dir, d)
    (shard,) = glob.glob(f"{d}/*.safetensors")
    with safe_open(shard, "pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    key = "model.layers.1.self_attn.q_b_proj.weight"
    assert tuple(tensors[key].shape) == (256, 32) and tuple(tensors[key + "_scale_inv"].shape) == (2, 1)
    tensors[key + "_scale_inv"] = tensors[key + "_scale_inv"][:1].contiguous()
    from safetensors.torch import save_file

    save_file(tensors, shard, metadata=meta)
    model = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(str(d)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"q_b_proj\.weight.*\(1, 1\).*\(2, 1\)"):
        load_weights_into(model, str(d), progress=False)
    after = model.state_dict()
    for k in before:  # bit for bit (the unloaded model's memory may hold NaN patterns)
        assert torch.equal(
            before[k].contiguous().view(torch.uint8), after[k].contiguous().view(torch.uint8)
        ), k


def test_roo_code_7500_chat_prompt_holds_one_bos(default_model_dir: str, mtok: Any) -> None:
    """RooCodeInc/Roo-Code#7500 and deepseek-ai/DeepSeek-Coder-V2#50 (a DeepSeek chat prompt began
    with two BOS tokens: the template's and one the tokenizer added again): the ids a chat request
    sends to the engine hold the tokenizer's BOS (``AutoTokenizer``'s ``bos_token_id`` on the
    model's files) exactly once, as the first token, also when a system message and earlier turns
    come first; and they re-encode to themselves without special tokens added."""
    from sglang_v4.hf_transformers_utils import get_tokenizer

    tm = FakeTM(get_tokenizer(default_model_dir))
    client = app_client(tm, model_path=default_model_dir)
    bos = mtok.bos_token_id
    assert isinstance(bos, int)
    convs = [
        MSGS,
        [{"role": "system", "content": "Be brief."}, *MSGS, {"role": "assistant", "content": "Hello"}, *MSGS],
    ]
    for messages in convs:
        r = client.post("/v1/chat/completions", json={"model": "dsv4-test", "messages": messages})
        assert r.status_code == 200, r.text
        ids = list(tm.received[-1].input_ids)
        assert ids[0] == bos and ids.count(bos) == 1, ids[:6]
        text = mtok.decode(ids)
        assert mtok.encode(text, add_special_tokens=False) == ids


# ---------------------------------------------------------------------------------------------
# a BF16 checkpoint under an FP8 quantization_config (sgl-project/sglang#23841) and a scale in
# another shard than its weight (deepseek-ai/DeepSeek-V3#2)
# ---------------------------------------------------------------------------------------------


def _state(d: str) -> dict[str, torch.Tensor]:
    model = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(d))
    load_weights_into(model, d, progress=False)
    return model.state_dict()


def test_sglang_23841_bf16_weights_under_an_fp8_quantization_config_load_as_stored(tmp_path: Path) -> None:
    """sgl-project/sglang#23841 (a config carrying DeepSeek's FP8 ``quantization_config`` beside
    BF16 weights made the loader treat the BF16 tensors as FP8: dtype errors at load): the BF16
    checkpoint with that block added to its ``config.json`` loads to the same model, bit for bit,
    as the cold run of the file without it, and its weights are the file's BF16 values."""
    plain = tmp_path / "plain"
    write_checkpoint(
        str(plain), fmt="hf", weights="bf16", seed=23841, config_dict=copy.deepcopy(CONFIGS["sliding_first"])
    )
    stale = tmp_path / "stale"
    shutil.copytree(plain, stale)
    cfg = json.loads((stale / "config.json").read_text())
    cfg["quantization_config"] = {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "scale_fmt": "ue8m0",
        "weight_block_size": [128, 128],
    }
    (stale / "config.json").write_text(json.dumps(cfg))
    want, got = _state(str(plain)), _state(str(stale))
    assert want.keys() == got.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    raw = _file_tensors(str(stale))
    key = "model.layers.1.self_attn.q_b_proj.weight"
    assert raw[key].dtype == torch.bfloat16
    assert torch.equal(got[key].float(), raw[key].float())


def test_deepseek_v3_2_scale_in_another_shard_than_its_weight(hf_fp8_dir: str, tmp_path: Path) -> None:
    """deepseek-ai/DeepSeek-V3#2 (a ``weight`` and its ``weight_scale_inv`` stored in different
    shards failed an assertion in the FP8 -> BF16 cast): the HF-named FP8 checkpoint rewritten
    with every scale in a shard of its own (the index updated to match) loads to the same model,
    bit for bit, as the single-shard original."""
    from safetensors.torch import save_file

    d = tmp_path / "split"
    shutil.copytree(hf_fp8_dir, d)
    for p in glob.glob(f"{d}/*.safetensors"):
        Path(p).unlink()
    raw = _file_tensors(hf_fp8_dir)
    scales = {k: v for k, v in raw.items() if k.endswith("scale_inv")}
    rest = {k: v for k, v in raw.items() if k not in scales}
    assert any(k.endswith(".weight_scale_inv") for k in scales)
    files = {"model-00001-of-00002.safetensors": rest, "model-00002-of-00002.safetensors": scales}
    for name, tensors in files.items():
        save_file(tensors, str(d / name), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: name for name, ts in files.items() for k in ts}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    want, got = _state(hf_fp8_dir), _state(str(d))
    assert want.keys() == got.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k


# ---------------------------------------------------------------------------------------------
# a quantization_config without weight_block_size, or not an object (lightseekorg/tokenspeed#259)
# ---------------------------------------------------------------------------------------------


def _with_quantization_config(src: str, dst: Path, qc: Any) -> str:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = qc
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


def test_tokenspeed_259_weight_block_size_absent_null_or_malformed(hf_fp8_dir: str, tmp_path: Path) -> None:
    """lightseekorg/tokenspeed#259 (the DeepSeek loader read ``quant_config.weight_block_size``
    unguarded and crashed when a quantization config did not carry it): an FP8 checkpoint whose
    ``quantization_config`` omits ``weight_block_size``, or sets it to ``null``, loads to the same
    model, bit for bit, as the cold run with ``[128, 128]`` (DeepSeek's block). A
    ``quantization_config`` that is a string, or a block size that is not two positive integers,
    is refused by the loader with a ``ValueError`` naming the field (was: a bare
    ``AttributeError`` / ``TypeError``), before any tensor is copied."""
    qc = json.loads(Path(hf_fp8_dir, "config.json").read_text())["quantization_config"]
    assert qc["weight_block_size"] == [128, 128]
    want = _state(hf_fp8_dir)
    absent = {k: v for k, v in qc.items() if k != "weight_block_size"}
    for i, edited in enumerate((absent, {**qc, "weight_block_size": None})):
        got = _state(_with_quantization_config(hf_fp8_dir, tmp_path / f"ok{i}", edited))
        for k in want:
            assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    model = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(hf_fp8_dir))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bad = [("fp8", r"quantization_config: expected an object")]
    bad += [({**qc, "weight_block_size": b}, r"weight_block_size: expected two positive integers") for b in
            ([128], [128, 0], [128.5, 128], "128")]  # fmt: skip
    for i, (edited, msg) in enumerate(bad):
        d = _with_quantization_config(hf_fp8_dir, tmp_path / f"bad{i}", edited)
        with pytest.raises(ValueError, match=msg):
            load_weights_into(model, d, progress=False)
        with pytest.raises(ValueError, match=msg):
            load_state_dict(d)
    after = model.state_dict()
    for k in before:
        assert torch.equal(
            before[k].contiguous().view(torch.uint8), after[k].contiguous().view(torch.uint8)
        ), k

"""Checkpoint writer + loader against HF transformers on the tiny preset.

Oracles: HF's own rename table (``transformers.conversion_mapping``, key ``deepseek_v4``) for the
official names, a float64 dequantizer written here from the format definitions (FP8 e4m3 x
ue8m0 128x128 block scale; e2m1 decoded from its bit fields x ue8m0 per-32 scale), and
``transformers.DeepseekV4ForCausalLM`` logits.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from sglang_v4.configs.presets import get_preset
from sglang_v4.model_loader import checkpoint_shapes, load_state_dict, load_weights_into
from sglang_v4.tools.make_checkpoint import (
    iter_random_tensors,
    make_random_state_dict,
    tokenizer_dir,
    write_checkpoint,
)
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM, FineGrainedFP8Config
from transformers.conversion_mapping import get_checkpoint_conversion_mapping
from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4PreTrainedModel

TINY = get_preset("tiny")
SEED = 0
PROMPT_LEN = 136  # > 128: the HCA layer emits one compressed entry, the CSA layers 34 (> index_topk 16)
KEEP = 16  # logits of the last KEEP positions (all of them see HCA and top-k CSA entries)


# ---------------------------------------------------------------------------------------------
# independent references
# ---------------------------------------------------------------------------------------------
def _keep_fp32(name: str) -> bool:
    mods = DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict
    return any(re.search(rf"(^|\.){re.escape(m)}($|\.)", name) for m in mods)


def _scale_f64(s: torch.Tensor) -> torch.Tensor:
    if s.dtype == torch.float8_e8m0fnu:  # ue8m0: the byte is a biased exponent
        return torch.pow(2.0, s.view(torch.uint8).to(torch.float64) - 127.0)
    return s.to(torch.float64)


def _fp8_ref(q: torch.Tensor, s: torch.Tensor, block: int = 128) -> torch.Tensor:
    r, c = q.shape
    i, j = torch.arange(r) // block, torch.arange(c) // block
    return q.to(torch.float64) * _scale_f64(s)[i[:, None], j[None, :]]


def _e2m1(code: torch.Tensor) -> torch.Tensor:
    sign = 1.0 - 2.0 * ((code >> 3) & 1).to(torch.float64)
    e, m = ((code >> 1) & 3).to(torch.float64), (code & 1).to(torch.float64)
    mag = torch.where(e == 0, 0.5 * m, (1.0 + 0.5 * m) * torch.pow(2.0, e - 1.0))
    return sign * mag


def _fp4_ref(packed: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    u = packed.view(torch.uint8).to(torch.int64)
    r, half = u.shape
    vals = torch.empty(r, 2 * half, dtype=torch.float64)
    vals[:, 0::2], vals[:, 1::2] = _e2m1(u & 15), _e2m1(u >> 4)
    return vals * _scale_f64(s)[:, torch.arange(2 * half) // 32]


_RULES = get_checkpoint_conversion_mapping("deepseek_v4")


def _hf_name(official: str) -> str:
    """Official -> HF name using transformers' own conversion rules."""
    key = official
    for rule in _RULES:
        renamed, pattern = rule.rename_source_key(key)
        if pattern is not None:
            key = renamed
    return key if key.startswith("lm_head.") else "model." + key


def _raw(path: str | Path) -> dict[str, torch.Tensor]:
    with open(os.path.join(path, "model.safetensors.index.json")) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    out: dict[str, torch.Tensor] = {}
    for fn in files:
        out.update(load_file(os.path.join(path, fn)))
    return out


def _official_reference(raw: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """float64 HF-named state dict from raw official tensors (experts packed as HF does)."""
    ref: dict[str, torch.Tensor] = {}
    experts: dict[tuple[str, str], dict[int, torch.Tensor]] = {}
    for k, t in raw.items():
        if k.startswith("mtp.") or k.endswith(".scale"):
            continue
        sk = k[: -len(".weight")] + ".scale" if k.endswith(".weight") else None
        if sk in raw:
            v = _fp8_ref(t, raw[sk]) if t.dtype == torch.float8_e4m3fn else _fp4_ref(t, raw[sk])
        else:
            v = t if not t.dtype.is_floating_point else t.to(torch.float64)
        m = re.match(r"layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.weight$", k)
        if m:
            experts.setdefault((m.group(1), m.group(3)), {})[int(m.group(2))] = v
        else:
            ref[_hf_name(k)] = v
    for (layer, proj), per in list(experts.items()):
        if proj == "w2":
            ref[f"model.layers.{layer}.mlp.experts.down_proj"] = torch.stack([per[e] for e in sorted(per)])
        elif proj == "w1":
            up = experts[(layer, "w3")]
            ref[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = torch.stack(
                [torch.cat([per[e], up[e]]) for e in sorted(per)]
            )
    return ref


# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ref_sd() -> dict[str, torch.Tensor]:
    return make_random_state_dict(TINY, SEED)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ckpt")
    hf32 = root / "hf_fp32"  # via the CLI, in another process: also checks cross-process determinism
    cmd = [sys.executable, "-m", "sglang_v4.tools.make_checkpoint", str(hf32), "--preset", "tiny"]
    cmd += ["--format", "hf", "--weights", "fp32", "--seed", str(SEED), "--shard-size-mb", "30"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return {
        "official_fp8": Path(write_checkpoint(str(root / "official_fp8"), "tiny", "official", "fp8", SEED)),
        "hf_bf16": Path(write_checkpoint(str(root / "hf_bf16"), "tiny", "hf", "bf16", SEED)),
        "hf_fp32": hf32,
    }


@pytest.fixture(scope="module")
def hf_model() -> DeepseekV4ForCausalLM:
    return DeepseekV4ForCausalLM(DeepseekV4Config(**TINY)).eval()


@pytest.fixture(scope="module")
def prompt() -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def ref_logits(hf_model, ref_sd, prompt) -> torch.Tensor:
    """HF logits of the unquantized float32 random model."""
    _load_ref(hf_model, ref_sd)
    out = _logits(hf_model, prompt)
    assert torch.isfinite(out).all() and float(out.std()) > 0.5  # a non-degenerate model
    return out


def _logits(model: DeepseekV4ForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, logits_to_keep=KEEP).logits[0].double()


def _load_ref(model: DeepseekV4ForCausalLM, sd: dict[str, torch.Tensor]) -> None:
    params = model.state_dict()
    model.load_state_dict({k: v.to(params[k].dtype) for k, v in sd.items()}, strict=True)


# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------
def test_random_state_dict_matches_hf_model(ref_sd: dict[str, torch.Tensor], hf_model) -> None:
    expected = hf_model.state_dict()
    assert list(ref_sd) == list(expected)
    for k, v in expected.items():
        assert ref_sd[k].shape == v.shape, k
    name, other = next(iter_random_tensors(TINY, SEED + 1))
    assert name == "model.embed_tokens.weight" and not torch.equal(other, ref_sd[name])
    t = ref_sd["model.layers.0.mlp.gate.tid2eid"]
    assert t.shape == (TINY["vocab_size"], TINY["num_experts_per_tok"]) and t.dtype == torch.int64
    assert int(t.min()) >= 0 and int(t.max()) < TINY["n_routed_experts"]
    assert bool((t[:, 0] != t[:, 1]).all())  # distinct experts per token
    assert ref_sd["model.layers.1.self_attn.sinks"].abs().min() > 0
    assert ref_sd["model.layers.1.self_attn.compressor.position_bias"].std() > 0.1
    assert ref_sd["model.layers.1.mlp.gate.e_score_correction_bias"].abs().max() > 0
    norm = ref_sd["model.layers.2.input_layernorm.weight"]
    assert abs(float(norm.mean()) - 1.0) < 0.05 and float(norm.std()) > 0.01
    w = ref_sd["model.layers.1.self_attn.q_a_proj.weight"]  # ~ N(0, 1/fan_in)
    assert abs(float(w.std()) * w.shape[1] ** 0.5 - 1.0) < 0.1


def test_official_fp8_checkpoint(ckpts, ref_sd, hf_model, prompt, ref_logits, caplog) -> None:
    path = ckpts["official_fp8"]
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["compress_ratios"] == [0, 4, 128, 4, 0] and cfg["num_hash_layers"] == 1
    assert cfg["qk_rope_head_dim"] == 64 and cfg["rope_scaling"]["type"] == "yarn"
    assert cfg["quantization_config"]["weight_block_size"] == [128, 128] and cfg["expert_dtype"] == "fp4"
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        assert (path / fn).read_bytes() == Path(tokenizer_dir(), fn).read_bytes()
    assert json.loads((path / "generation_config.json").read_text())["eos_token_id"] == 1

    raw = _raw(path)
    assert raw["layers.0.attn.wq_a.weight"].dtype == torch.float8_e4m3fn
    assert raw["layers.0.attn.wq_a.scale"].dtype == torch.float8_e8m0fnu
    assert raw["layers.1.ffn.experts.3.w2.weight"].dtype == torch.int8
    assert raw["layers.1.attn.compressor.wkv.weight"].dtype == torch.bfloat16
    assert any(k.startswith("mtp.0.") for k in raw)

    ref = _official_reference(raw)
    with caplog.at_level(logging.INFO, logger="sglang_v4.model_loader"):
        loaded = load_state_dict(str(path), dtype=torch.float32, progress=False)
    assert sum("mtp" in r.getMessage() for r in caplog.records) == 1
    assert set(loaded) == set(ref) == set(ref_sd)
    for k, v in loaded.items():
        assert v.shape == ref_sd[k].shape, k
        assert torch.equal(v.to(torch.float64) if v.dtype.is_floating_point else v, ref[k]), k

    # the quantized weights are close to the random originals (the writer quantizes sensibly)
    def rel(k: str) -> float:
        return float((ref[k] - ref_sd[k].double()).norm() / ref_sd[k].double().norm())

    assert rel("model.layers.1.self_attn.q_b_proj.weight") < 0.05  # FP8
    assert rel("model.layers.1.mlp.shared_experts.down_proj.weight") < 0.05  # FP8
    assert rel("model.layers.3.mlp.experts.gate_up_proj") < 0.15  # FP4
    assert rel("model.layers.3.self_attn.compressor.indexer.kv_proj.weight") < 0.01  # bf16

    load_weights_into(hf_model, str(path), progress=False)
    got = _logits(hf_model, prompt)
    _load_ref(hf_model, ref)
    want = _logits(hf_model, prompt)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    orig = ref_logits  # the unquantized model: close but not equal
    assert (
        1e-4 < float((orig - want).abs().max())
        and float(torch.corrcoef(torch.stack([orig.flatten(), want.flatten()]))[0, 1]) > 0.5
    )


def test_hf_bf16_checkpoint(ckpts, ref_sd, hf_model, prompt) -> None:
    path = str(ckpts["hf_bf16"])
    raw = _raw(path)
    rounded = {}
    for k, v in ref_sd.items():
        if not v.dtype.is_floating_point:
            rounded[k] = v
        elif _keep_fp32(k):
            assert raw[k].dtype == torch.float32, k
            rounded[k] = v
        else:
            assert raw[k].dtype == torch.bfloat16, k
            rounded[k] = v.to(torch.bfloat16).float()
    loaded = load_state_dict(path, dtype=torch.float32, progress=False)
    assert set(loaded) == set(rounded)
    assert all(torch.equal(loaded[k], rounded[k]) for k in rounded)

    as_bf16 = load_state_dict(path, dtype=torch.bfloat16, progress=False)
    for k, v in as_bf16.items():
        want = torch.int64 if k.endswith("tid2eid") else (torch.float32 if _keep_fp32(k) else torch.bfloat16)
        assert v.dtype == want, k
    assert as_bf16["model.layers.0.attn_hc.fn"].dtype == torch.float32
    assert as_bf16["model.layers.1.self_attn.q_a_proj.weight"].dtype == torch.bfloat16

    load_weights_into(hf_model, path, progress=False)
    got = _logits(hf_model, prompt)
    _load_ref(hf_model, rounded)
    torch.testing.assert_close(got, _logits(hf_model, prompt), atol=1e-5, rtol=0)


def test_hf_fp32_sharded_checkpoint_from_cli(ckpts, ref_sd, hf_model, prompt, ref_logits) -> None:
    path = str(ckpts["hf_fp32"])
    cfg = json.loads(Path(path, "config.json").read_text())
    assert cfg["layer_types"] == TINY["layer_types"] and "compress_ratios" not in cfg
    assert cfg["dtype"] == "float32" and "quantization_config" not in cfg
    with open(os.path.join(path, "model.safetensors.index.json")) as f:
        index = json.load(f)
    assert len(set(index["weight_map"].values())) >= 3
    assert set(index["weight_map"]) == set(ref_sd)
    loaded = load_state_dict(path, progress=False)
    assert all(torch.equal(loaded[k], ref_sd[k]) for k in ref_sd)
    load_weights_into(hf_model, path, progress=False)
    torch.testing.assert_close(_logits(hf_model, prompt), ref_logits, atol=0, rtol=0)


def test_shape_mismatch_names_tensor_and_shapes(ckpts) -> None:
    cfg = dict(TINY, moe_intermediate_size=32)
    with torch.device("meta"):
        model = DeepseekV4ForCausalLM(DeepseekV4Config(**cfg))
    with pytest.raises(ValueError) as ei:
        load_weights_into(model, str(ckpts["hf_fp32"]), progress=False)
    msg = str(ei.value)
    assert (
        "model.layers.0.mlp.experts.gate_up_proj: expected shape [8, 64, 128], found shape [8, 128, 128]"
        in msg
    )
    assert (
        "model.layers.3.mlp.shared_experts.down_proj.weight: expected shape [128, 32], found shape [128, 64]"
        in msg
    )


def test_missing_and_unexpected_tensors(ckpts, tmp_path) -> None:
    raw = _raw(ckpts["hf_fp32"])
    del raw["model.layers.2.self_attn.sinks"]
    raw["model.layers.0.extra.weight"] = torch.zeros(3, 5)
    single = tmp_path / "single"
    single.mkdir()
    save_file(raw, str(single / "model.safetensors"), metadata={"format": "pt"})  # single-file layout
    shapes = checkpoint_shapes(str(single))
    assert shapes["model.layers.0.extra.weight"] == (3, 5)
    with torch.device("meta"):
        model = DeepseekV4ForCausalLM(DeepseekV4Config(**TINY))
    with pytest.raises(ValueError) as ei:
        load_weights_into(model, str(single), progress=False)
    msg = str(ei.value)
    assert "model.layers.2.self_attn.sinks: expected shape [4], found missing" in msg
    assert "model.layers.0.extra.weight: unexpected" in msg and "[3, 5]" in msg


def test_missing_expert_and_bad_scale(ckpts, tmp_path) -> None:
    raw = _raw(ckpts["official_fp8"])
    experts = {k: v for k, v in raw.items() if k.startswith("layers.2.ffn.experts.")}
    del experts["layers.2.ffn.experts.5.w3.weight"], experts["layers.2.ffn.experts.5.w3.scale"]
    (tmp_path / "a").mkdir()
    save_file(experts, str(tmp_path / "a" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"layers\.2\.ffn\.experts\.5\.w3\.weight is missing"):
        checkpoint_shapes(str(tmp_path / "a"))
    bad = {k: raw[k] for k in ("layers.1.attn.wq_b.weight", "layers.1.attn.wq_b.scale")}
    bad["layers.1.attn.wq_b.scale"] = bad["layers.1.attn.wq_b.scale"][:, :0].contiguous()
    (tmp_path / "b").mkdir()
    save_file(bad, str(tmp_path / "b" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"layers\.1\.attn\.wq_b\.weight: FP8 block scale has shape"):
        checkpoint_shapes(str(tmp_path / "b"))  # caught from the headers, before any data is read


@pytest.mark.parametrize("which", ["official_fp8", "hf_bf16", "hf_fp32"])
def test_same_tensors_as_transformers_from_pretrained(ckpts, which: str) -> None:
    """transformers' own loader (renames, FP8 + FP4 dequantization, expert packing) agrees exactly."""
    kwargs: dict = {"dtype": torch.float32}
    if which == "official_fp8":
        kwargs["quantization_config"] = FineGrainedFP8Config(dequantize=True)
    model = DeepseekV4ForCausalLM.from_pretrained(str(ckpts[which]), **kwargs)
    theirs = model.state_dict()
    ours = load_state_dict(str(ckpts[which]), dtype=torch.float32, progress=False)
    assert set(ours) == set(theirs)
    # Some transformers releases (5.17 to 5.23) build an FP8 checkpoint's model in bfloat16 whatever
    # ``dtype`` asks, leaving the checkpoint's bf16 tensors bf16: the values are the same, and ours
    # are in the dtype asked for.
    hf_follows_dtype = model.dtype == torch.float32
    for k, v in ours.items():
        assert v.dtype == (torch.float32 if v.is_floating_point() else theirs[k].dtype), k
        assert torch.equal(theirs[k].to(v.dtype), v), k
        assert theirs[k].dtype == v.dtype or not hf_follows_dtype, k


def test_weight_scale_inv_name_and_float32_scales(ckpts, tmp_path) -> None:
    """V3-style files: ``<module>.weight_scale_inv`` in float32 instead of V4's ``.scale`` in ue8m0."""
    raw = _raw(ckpts["official_fp8"])
    keep = ("layers.0.attn.wq_a", "layers.1.ffn.shared_experts.w2", "layers.3.ffn.experts.0.w1")
    sub: dict[str, torch.Tensor] = {}
    for mod in keep:
        sub[mod + ".weight"] = raw[mod + ".weight"]
        sub[mod + ".weight_scale_inv"] = _scale_f64(raw[mod + ".scale"]).float()
    sub["layers.3.ffn.experts.0.w3.weight"] = raw["layers.3.ffn.experts.0.w3.weight"]
    sub["layers.3.ffn.experts.0.w3.scale"] = raw["layers.3.ffn.experts.0.w3.scale"].view(
        torch.uint8
    )  # raw bytes
    (tmp_path / "v3").mkdir()
    save_file(sub, str(tmp_path / "v3" / "model.safetensors"))
    got = load_state_dict(str(tmp_path / "v3"), progress=False)
    ref = _official_reference(raw)
    for name in (
        "model.layers.0.self_attn.q_a_proj.weight",
        "model.layers.1.mlp.shared_experts.down_proj.weight",
    ):
        assert torch.equal(got[name].double(), ref[name]), name
    assert torch.equal(
        got["model.layers.3.mlp.experts.gate_up_proj"][0].double(),
        ref["model.layers.3.mlp.experts.gate_up_proj"][0],
    )


def test_reduced_depth_loads_the_first_layers(ckpts, tmp_path, caplog) -> None:
    """SGLang's ``--json-model-override-args '{"num_hidden_layers": 2}'`` on the 4-layer checkpoint:
    the tensors of layers 2-3 are skipped with a warning, every tensor of the 2-layer model is the
    one stored in the file (read back with safetensors). It used to be refused as "unexpected"."""
    from sglang_v4.configs.model_config import ModelConfig

    path = str(ckpts["hf_fp32"])
    mc = ModelConfig.from_pretrained(path, {"num_hidden_layers": 2})
    model = DeepseekV4ForCausalLM(mc.hf).eval()
    with caplog.at_level(logging.WARNING, logger="sglang_v4.model_loader.weight_loader"):
        load_weights_into(model, path, progress=False)
    assert "more decoder layers than the model" in caplog.text
    raw = _raw(path)
    sd = model.state_dict()
    in_file = {k for k in raw if re.match(r"model\.layers\.[01]\.", k)}
    assert {k for k in sd if k.startswith("model.layers.")} == in_file
    for k, t in sd.items():
        assert torch.equal(t, raw[k]), k
    # a tensor missing below the model's depth is still refused
    del raw["model.layers.1.self_attn.sinks"]
    save_file(raw, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(
        ValueError, match=r"model\.layers\.1\.self_attn\.sinks: expected shape \[4\], found missing"
    ):
        load_weights_into(DeepseekV4ForCausalLM(mc.hf).eval(), str(tmp_path), progress=False)

"""FP8 / FP4 weights kept quantized in the runtime model (CPU: the layers run the torch references).

Oracles: HF transformers on the dequantized weights (the loader's dequantized state dict, which
``test_loader_checkpoint.py`` checks against a float64 decoder; or the float64 decode of the
model's own in-memory bytes, ``quant_testutil``), the raw safetensors bytes, the FP8 / FP4 rounding
bounds from the format definitions, and the weight bytes counted from the config by hand.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from dsv4_testutil import CONFIGS, Driver, Twin, hf_greedy, hf_logprobs, random_ids
from quant_testutil import fp4_weight64, fp8_weight64, scale_byte64, state_dict64
from safetensors.torch import load_file, save_file
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset
from sglang_v4.layers.quantization import QuantConfig, resolve_quantization
from sglang_v4.model_loader.builder import check_weights_fit, get_model, model_weight_bytes
from sglang_v4.model_loader.dummy import init_dummy_weights
from sglang_v4.model_loader.loader import (
    checkpoint_nbytes,
    load_state_dict,
    load_weights_into,
    weight_nbytes,
)
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.server_args import ServerArgs
from sglang_v4.tools.make_checkpoint import write_checkpoint
from transformers import DeepseekV4Config
from transformers import DeepseekV4ForCausalLM as HFModel

TOL = 1e-3  # as test_model_parity.py (we see ~1e-5)
CFG = CONFIGS["sliding_first"]  # SL, CSA, HCA, CSA; a hash layer; FP4-able sizes (D 64, I 32)
GiB = 2**30


def _full_cfg() -> dict:
    return ModelConfig.from_dict(copy.deepcopy(CFG)).to_dict()


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("qckpt")
    out = {}
    for fmt, weights in (("official", "fp8"), ("hf", "fp8"), ("hf", "fp32")):
        out[f"{fmt}_{weights}"] = write_checkpoint(
            str(root / f"{fmt}_{weights}"), fmt=fmt, weights=weights, seed=5, config_dict=_full_cfg()
        )
    return out


def _raw(path: str) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _hf_twin(mc: ModelConfig, ours: DeepseekV4ForCausalLM, state: dict[str, torch.Tensor]) -> Twin:
    hf = HFModel(DeepseekV4Config(**{k: v for k, v in CFG.items() if k != "model_type"})).eval()
    hf.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    return Twin(name="quant", cfg=CFG, mc=mc, hf=hf, ours=ours)


def _dequantized_state(model: DeepseekV4ForCausalLM) -> dict[str, torch.Tensor]:
    """The model's weights as HF-named float64 tensors, decoded from its own bytes (oracle)."""
    return state_dict64(model.state_dict())


@pytest.mark.parametrize("which", ["official_fp8", "hf_fp8"])
def test_quantized_runtime_matches_hf_on_dequantized_weights(ckpts, which: str) -> None:
    path = ckpts[which]
    mc = ModelConfig.from_pretrained(path)
    ours = DeepseekV4ForCausalLM(mc, torch.float32, "cpu", QuantConfig())
    load_weights_into(ours, path, progress=False)
    sd = ours.state_dict()
    attn = sd["model.layers.1.self_attn.q_b_proj.weight"]
    assert (
        attn.dtype == torch.float8_e4m3fn and sd["model.layers.1.self_attn.q_b_proj.weight_scale_inv"].shape
    )
    assert sd["model.layers.2.mlp.experts.down_proj"].dtype == torch.uint8
    assert sd["model.layers.1.self_attn.compressor.kv_proj.weight"].dtype == torch.float32  # bf16 on disk
    raw = _raw(path)
    if which == "official_fp8":  # the published bytes, copied as they are
        assert torch.equal(attn.view(torch.uint8), raw["layers.1.attn.wq_b.weight"].view(torch.uint8))
        assert torch.equal(
            sd["model.layers.2.mlp.experts.down_proj"][3],
            raw["layers.2.ffn.experts.3.w2.weight"].view(torch.uint8),
        )
        gate_up = sd["model.layers.2.mlp.experts.gate_up_proj_scale_inv"][1]
        i = gate_up.shape[0] // 2
        assert torch.equal(gate_up[i:], raw["layers.2.ffn.experts.1.w3.scale"].view(torch.uint8))
    twin = _hf_twin(mc, ours, load_state_dict(path, progress=False))
    ids = random_ids(300, seed=77)
    out = Driver(twin).run_chunked(ids, 128)
    assert (out - hf_logprobs(twin, ids)).abs().max().item() <= TOL
    assert Driver(twin).greedy(ids[:150], 6, chunk=100) == hf_greedy(twin, ids[:150], 6)


def test_online_quantization_of_an_unquantized_checkpoint(ckpts) -> None:
    """``--quantization fp8`` on an fp32 checkpoint: every FP8 / FP4 weight is within its format's
    rounding of the checkpoint's value with the smallest power-of-two scale, and the model equals
    HF on those (decoded) weights."""
    path = ckpts["hf_fp32"]
    mc = ModelConfig.from_pretrained(path)
    ours = DeepseekV4ForCausalLM(mc, torch.float32, "cpu", QuantConfig())
    load_weights_into(ours, path, progress=False)
    src = _raw(path)
    sd = ours.state_dict()
    n_fp8 = n_fp4 = 0
    for k, v in sd.items():
        s = sd.get(k + "_scale_inv")
        if s is None:
            continue
        w = src[k].double()
        if v.dtype == torch.float8_e4m3fn:
            n_fp8 += 1
            deq, sc = fp8_weight64(v, s), s.double()
            i, j = torch.arange(w.shape[0]) // 128, torch.arange(w.shape[1]) // 128
            full = sc[i[:, None], j[None, :]]
            r, c = w.shape
            pad = torch.nn.functional.pad(w.abs(), (0, sc.shape[1] * 128 - c, 0, sc.shape[0] * 128 - r))
            amax = pad.view(sc.shape[0], 128, sc.shape[1], 128).amax(dim=(1, 3))
            assert bool((torch.log2(sc) == torch.log2(sc).round()).all()), k
            assert bool(((amax / sc <= 448) & (amax / sc > 224)).all()), k
            assert bool(((deq - w).abs() <= torch.maximum(w.abs() / 16, full * 2**-10)).all()), k
        else:
            n_fp4 += 1
            deq, sc = fp4_weight64(v, s), scale_byte64(s).repeat_interleave(32, dim=-1)
            assert bool(((deq - w).abs() <= sc).all()), k
            amax = w.abs().view(*w.shape[:-1], -1, 32).amax(-1)
            ratio = amax / scale_byte64(s)
            assert bool(((ratio <= 6) & (ratio > 3)).all()), k
    assert n_fp8 == 8 * 4 + 2 and n_fp4 == 2 * 4  # 8 linears per layer + 2 indexer q_b; 2 expert stacks
    twin = _hf_twin(mc, ours, _dequantized_state(ours))
    ids = random_ids(200, seed=3)
    assert (Driver(twin).run_chunked(ids, 64) - hf_logprobs(twin, ids)).abs().max().item() <= TOL


def test_weight_bytes_within_two_percent_of_checkpoint(tmp_path, caplog) -> None:
    """The tiny preset, official FP8/FP4 checkpoint, bf16 runtime keeping it quantized: the weights
    take the checkpoint's bytes (counted here from the raw tensors, mtp head excluded)."""
    path = write_checkpoint(str(tmp_path / "tiny"), "tiny", "official", "fp8", 0)
    raw = _raw(path)
    stored = sum(t.numel() * t.element_size() for k, t in raw.items() if not k.startswith("mtp."))
    assert checkpoint_nbytes(path) == stored
    mc = ModelConfig.from_pretrained(path)
    with caplog.at_level(logging.INFO, logger="sglang_v4.model_loader"):
        model = get_model(mc, path, "cpu", torch.bfloat16, quantization="fp8")
    have = weight_nbytes(model)
    assert have == model_weight_bytes(mc, torch.bfloat16, QuantConfig())
    assert abs(have / stored - 1) < 0.02, (have, stored)
    msgs = [r.getMessage() for r in caplog.records]
    assert any(f"Weights: {have} bytes" in m and f"checkpoint {stored} bytes" in m for m in msgs)
    assert not any(r.levelno >= logging.WARNING and r.name.startswith("sglang_v4") for r in caplog.records)
    # the CPU default dequantizes (the exact oracle path): bf16 weights (tiny is mostly its bf16
    # embedding and head, so only slightly larger)
    plain = get_model(mc, path, "cpu", torch.bfloat16)
    assert plain.quant is None and weight_nbytes(plain) > have
    assert plain.state_dict()["model.layers.1.mlp.experts.down_proj"].dtype == torch.bfloat16


_META_BUILD = """
import json, sys, torch
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
mc = ModelConfig.from_dict(json.loads(sys.argv[1]))
with torch.device("meta"):
    m = DeepseekV4ForCausalLM(mc, torch.bfloat16, "meta")
print(json.dumps({"dynamo": "torch._dynamo" in sys.modules, "shapes": {k: list(v.shape) for k, v in m.state_dict().items()}}))
"""


def test_meta_build_has_the_cpu_shapes_and_imports_no_dynamo() -> None:
    """The model built on the meta device (the launcher's checkpoint check and every rank's
    weight-bytes plan, before any process serves) has the state dict keys and shapes of the model
    built on the CPU, and does not import ``torch._dynamo``: ``torch._refs`` (random init or
    ``arange`` / ``stack`` of meta tensors) imports it on first use, ~1.5 s of CPU in each of those
    processes. Run in a fresh interpreter (this one may have imported it already)."""
    cfg = copy.deepcopy(CFG)
    out = subprocess.run(
        [sys.executable, "-c", _META_BUILD, json.dumps(cfg)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["dynamo"] is False
    cpu = DeepseekV4ForCausalLM(ModelConfig.from_dict(cfg), torch.bfloat16, "cpu")
    assert got["shapes"] == {k: list(v.shape) for k, v in cpu.state_dict().items()}


def test_dummy_quantized_weights_are_a_sane_model() -> None:
    mc = ModelConfig.from_dict(copy.deepcopy(CFG))
    ours = DeepseekV4ForCausalLM(mc, torch.float32, "cpu", QuantConfig())
    init_dummy_weights(ours, seed=1)
    sd = ours.state_dict()
    for k, v in sd.items():
        s = sd.get(k + "_scale_inv")
        if s is None:
            continue
        deq = fp8_weight64(v, s) if v.dtype == torch.float8_e4m3fn else fp4_weight64(v, s)
        fan_in = deq.shape[-1]
        assert torch.isfinite(deq).all(), k
        # ~N(0, 1/fan_in) like the bf16 dummies (FP4: within sqrt(2), its scales are powers of two)
        lo, hi = (0.9, 1.1) if v.dtype == torch.float8_e4m3fn else (0.69, 1.45)
        assert lo < float(deq.std()) * math.sqrt(fan_in) < hi, k
    twin = _hf_twin(mc, ours, _dequantized_state(ours))
    ids = random_ids(150, seed=4)
    assert (Driver(twin).run_chunked(ids, 50) - hf_logprobs(twin, ids)).abs().max().item() <= TOL


def test_resolve_quantization() -> None:
    fp8 = ModelConfig.from_dict(get_preset("flash-43l")).hf
    plain = ModelConfig.from_dict(get_preset("tiny")).hf
    assert resolve_quantization(None, fp8, "cuda") == QuantConfig("fp8", "fp4")
    assert resolve_quantization(None, fp8, "cpu") is None  # CPU: dequantize (the exact oracle)
    assert resolve_quantization("fp8", fp8, "cpu") == QuantConfig("fp8", "fp4")
    assert resolve_quantization("none", fp8, "cuda") is None
    assert resolve_quantization(None, plain, "cuda") is None
    assert resolve_quantization("fp8", plain, "cuda") == QuantConfig("fp8", "fp4")  # online
    v3 = ModelConfig.from_dict(dict(get_preset("tiny"), quantization_config=dict(fp8.quantization_config)))
    v3.hf.quantization_config.pop("expert_dtype", None)
    assert resolve_quantization(None, v3.hf, "cuda") == QuantConfig("fp8", None)  # FP8 experts: dequantized
    with pytest.raises(ValueError, match="quantization"):
        resolve_quantization("int4", fp8, "cuda")
    awq = ModelConfig.from_dict(dict(get_preset("tiny"), quantization_config={"quant_method": "awq"}))
    with pytest.raises(ValueError, match="quant_method"):
        resolve_quantization(None, awq.hf, "cuda")


def test_quantization_server_arg() -> None:
    assert ServerArgs(quantization="fp8").quantization == "fp8"
    assert ServerArgs().quantization is None
    with pytest.raises(ValueError, match="quantization"):
        ServerArgs(quantization="int4")


def test_fp4_scales_that_are_not_powers_of_two_are_refused(ckpts, tmp_path) -> None:
    raw = _raw(ckpts["official_fp8"])
    bad = dict(raw)
    s = bad["layers.2.ffn.experts.0.w1.scale"]
    bad["layers.2.ffn.experts.0.w1.scale"] = scale_byte64(s).float() * 1.5
    d = tmp_path / "bad"
    d.mkdir()
    save_file(bad, str(d / "model.safetensors"))
    (d / "config.json").write_text(Path(ckpts["official_fp8"], "config.json").read_text())
    mc = ModelConfig.from_pretrained(str(d))
    model = DeepseekV4ForCausalLM(mc, torch.float32, "cpu", QuantConfig())
    with pytest.raises(
        ValueError, match=r"layers\.2\.ffn\.experts\.0\.w1\.weight: FP4 scales are not all powers of two"
    ):
        load_weights_into(model, str(d), progress=False)
    plain = DeepseekV4ForCausalLM(mc, torch.float32, "cpu")  # dequantizing them is fine
    load_weights_into(plain, str(d), progress=False)


# ---------------------------------------------------------------------------------------------
# presets: bytes counted by hand from the config
# ---------------------------------------------------------------------------------------------
def _bytes_by_hand(c: dict) -> int:
    """Weight bytes of V4 with FP8 linears (+ float32 128x128 scales), FP4 experts (+ one byte per
    32), bf16 compressor / router / embedding / head, fp32 norms / mHC / sinks / biases, int64
    tid2eid; from the config's dimensions."""
    D, V, H, hd = c["hidden_size"], c["vocab_size"], c["num_attention_heads"], c["head_dim"]
    qr, G, orank = c["q_lora_rank"], c["o_groups"], c["o_lora_rank"]
    E, k, inter = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    Hi, ihd, n = c["index_n_heads"], c["index_head_dim"], c["hc_mult"]

    def fp8(r: int, cols: int) -> int:
        return r * cols + 4 * math.ceil(r / 128) * math.ceil(cols / 128)

    total = 2 * V * D * 2 + 4 * D + 4 * (n * n * D + n + 1)  # embed, head, norm, hc_head
    for lt, mt in zip(c["layer_types"], c["mlp_layer_types"]):
        b = fp8(qr, D) + fp8(H * hd, qr) + fp8(hd, D) + fp8(G * orank, H * hd // G) + fp8(D, G * orank)
        b += 4 * (qr + hd + 2 * D + H)  # q_a_norm, kv_norm, two layer norms, sinks
        b += 2 * 4 * ((2 + n) * n * n * D + (2 + n) * n + 3)  # attn_hc, ffn_hc
        if lt != "sliding_attention":
            x, ratio = (2 * hd, 4) if lt == "compressed_sparse_attention" else (hd, 128)
            b += 2 * 2 * x * D + 4 * ratio * x + 4 * hd  # kv/gate proj (bf16), ape, norm
        if lt == "compressed_sparse_attention":  # indexer: compressor + q_b (FP8) + weights_proj
            b += 2 * 2 * 2 * ihd * D + 4 * 4 * 2 * ihd + 4 * ihd + fp8(Hi * ihd, qr) + 2 * Hi * D
        b += 2 * E * D + (8 * V * k if mt == "hash_moe" else 4 * E)  # router; tid2eid or bias
        b += E * 3 * inter * D * (1 / 2 + 1 / 32)  # FP4 experts: values + one scale byte per 32
        b += fp8(inter, D) * 2 + fp8(D, inter)  # shared expert
        total += int(b)
    return total


def test_flash_43l_is_the_largest_single_h200_flash() -> None:
    d = get_preset("flash-43l")
    assert d["num_hidden_layers"] == 43 and d["n_routed_experts"] == 160 and d["n_routed_experts"] % 32 == 0
    assert d["quantization_config"]["quant_method"] == "fp8" and d["expert_dtype"] == "fp4"
    flash = get_preset("flash")
    assert {k: v for k, v in d.items() if k != "n_routed_experts"} == {
        k: v for k, v in flash.items() if k != "n_routed_experts"
    }
    usable = 0.9 * 141 * GiB
    by_e = {}
    for e in (160, 192, 256):
        c = dict(d, n_routed_experts=e)
        b = model_weight_bytes(ModelConfig.from_dict(c), torch.bfloat16, QuantConfig())
        assert b == _bytes_by_hand(ModelConfig.from_dict(c).to_dict()), e
        by_e[e] = b
    assert by_e[160] == 100_795_178_844 and by_e[192] == 119_202_673_500  # the preset docstring
    assert usable - by_e[160] >= 16 * GiB > usable - by_e[192]


def test_flash_on_one_h200_fails_up_front_naming_the_bytes() -> None:
    h200 = 141 * GiB
    need = model_weight_bytes(ModelConfig.from_dict(get_preset("flash")), torch.bfloat16, QuantConfig())
    assert need == 156_017_662_812
    with pytest.raises(ValueError) as ei:
        check_weights_fit(need, h200 - GiB, h200, "flash")
    msg = str(ei.value)
    assert f"need {need} bytes (145.3 GiB)" in msg and "--tp-size 2" in msg
    # The smaller presets are named with their shapes, so the message stays true when the model
    # that does not fit is one of them (flash-43l on an 80 GB card).
    assert "flash-43l, 43 layers x 160 experts" in msg and "flash-8l-32e" in msg
    check_weights_fit(100_795_178_844, h200 - GiB, h200, "flash-43l")  # fits
    with pytest.raises(ValueError, match="free"):  # and the free memory counts too
        check_weights_fit(100_795_178_844, 90 * GiB, h200, "flash-43l")

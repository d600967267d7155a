"""The routed experts' in-memory format follows how the checkpoint stores them, not only what
``config.json`` says.

Public reports: sgl-project/sglang#24213 reads one routed-expert weight's safetensors header
(``I8`` / ``U8`` / ``F4``: packed FP4 as DeepSeek publishes V4; ``F8_E4M3``: the FP8 repackages,
whose config drops ``expert_dtype``; anything else: keep the config's answer);
vllm-project/vllm#42970 infers a missing ``expert_dtype`` from ``quant_method`` (fp8 -> FP8);
radixark/miles#2717's converter writes FP8 experts with 128x128 ue8m0 block scales and no
``expert_dtype``. Faults fixed here: ``expert_dtype: fp4`` over FP8-stored experts re-quantized
them to FP4 (lossy); a config without ``expert_dtype`` (or saying ``fp8``) over packed FP4 experts
dequantized them (4x the bytes) on the GPU path.

Every stored format x config combination is checked for the format the model keeps (the packed
bytes as stored, or the exact dequantized values), for one warning line naming both formats where
config and checkpoint disagree, and for logits: the runtime (``--quantization fp8`` on the CPU,
whose quantized layers run the torch references) against HF transformers on a float64 decoding of
the stored bytes written here from the format definitions (``quant_testutil``).
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from dsv4_testutil import CONFIGS, Driver, Twin, hf_logprobs, random_ids
from quant_testutil import fp4_weight64, fp8_weight64, scale_byte64
from safetensors.torch import load_file, save_file
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.layers.quantization import QuantConfig, declared_expert_dtype, resolve_quantization
from sglang_v4.model_loader import load_state_dict
from sglang_v4.model_loader.builder import get_model, resolve_model_quantization
from sglang_v4.model_loader.expert_format import stored_expert_format
from sglang_v4.model_loader.quant import quantize_fp8_block
from sglang_v4.tools.make_checkpoint import write_checkpoint
from transformers import DeepseekV4Config
from transformers import DeepseekV4ForCausalLM as HFModel

TOL = 1e-3  # as test_loader_quantized.py
CFG = CONFIGS["sliding_first"]  # FP4-able sizes (D 64, I 32); every layer has routed experts
EXPERT_KEY = "layers.{l}.ffn.experts.{e}.{p}.{leaf}"
BUILDER_LOG = "sglang_v4.model_loader.builder"


def _full_cfg() -> dict:
    return ModelConfig.from_dict(copy.deepcopy(CFG)).to_dict()


def _fp8_experts(src: Path, dst: Path) -> None:
    """``src`` (official names, FP4 experts) with every routed expert replaced by random e4m3
    weights with one ue8m0 scale per 128x128 block, as FP8 repackages store them."""
    shutil.copytree(src, dst)
    gen = torch.Generator().manual_seed(11)
    for shard in sorted(dst.glob("*.safetensors")):
        tensors = load_file(shard)
        for k in [
            k for k in tensors if ".ffn.experts." in k and k.endswith(".weight") and k.startswith("layers.")
        ]:
            r, half = tensors[k].shape
            w = torch.randn(r, 2 * half, generator=gen) * (2 * half) ** -0.5
            q, s = quantize_fp8_block(w, (128, 128), torch.float8_e8m0fnu)
            tensors[k], tensors[k[: -len(".weight")] + ".scale"] = q, s
        save_file(tensors, shard, metadata={"format": "pt"})


def _set_expert_dtype(path: Path, value: str | None) -> None:
    cfg = json.loads((path / "config.json").read_text())
    cfg.pop("expert_dtype", None)
    cfg["quantization_config"].pop("expert_dtype", None)
    if value is not None:
        cfg["expert_dtype"] = value
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("expfmt")
    fp4 = Path(
        write_checkpoint(str(root / "fp4"), fmt="official", weights="fp8", seed=5, config_dict=_full_cfg())
    )
    _fp8_experts(fp4, root / "fp8")
    out = {}
    for stored in ("fp4", "fp8"):
        for config in ("fp4", "missing", "fp8"):
            d = root / f"{stored}-{config}"
            shutil.copytree(root / stored, d)
            _set_expert_dtype(d, None if config == "missing" else config)
            out[f"{stored}-{config}"] = d
    return out


def _raw(path: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(path.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def _experts64(raw: dict[str, torch.Tensor], layer: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """HF ``gate_up_proj [E, 2I, D]`` / ``down_proj [E, D, I]`` in float64 from the stored bytes."""

    def one(e: int, p: str) -> torch.Tensor:
        w = raw[EXPERT_KEY.format(l=layer, e=e, p=p, leaf="weight")]
        s = raw[EXPERT_KEY.format(l=layer, e=e, p=p, leaf="scale")]
        return fp8_weight64(w, scale_byte64(s)) if w.dtype == torch.float8_e4m3fn else fp4_weight64(w, s)

    gate_up = torch.stack([torch.cat([one(e, "w1"), one(e, "w3")]) for e in range(n)])
    return gate_up, torch.stack([one(e, "w2") for e in range(n)])


# declared format per config (the public reports' rule): expert_dtype, else quant_method fp8 -> fp8
DECLARED = {"fp4": "fp4", "missing": "fp8", "fp8": "fp8"}
LABEL = {"fp4": "packed FP4", "fp8": "FP8 (e4m3)"}
CASES = [f"{s}-{c}" for s in ("fp4", "fp8") for c in ("fp4", "missing", "fp8")]


@pytest.mark.parametrize("case", CASES)
def test_stored_format_decides_the_experts(ckpts, case: str, caplog) -> None:
    stored, config = case.split("-")
    path = ckpts[case]
    mc = ModelConfig.from_pretrained(str(path))
    assert declared_expert_dtype(mc.hf)[0] == DECLARED[config]
    got = stored_expert_format(str(path))
    assert got.fmt == stored and got.header_dtype == ("I8" if stored == "fp4" else "F8_E4M3")
    want_experts = "fp4" if stored == "fp4" else None  # no FP4 re-quantization, no FP4 dequantization
    with caplog.at_level(logging.WARNING, logger=BUILDER_LOG):
        quant = resolve_model_quantization(None, mc, str(path), "cuda")
    assert quant == QuantConfig("fp8", want_experts)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    if DECLARED[config] == stored:
        assert warnings == []
    else:
        assert len(warnings) == 1 and "\n" not in warnings[0]
        msg = warnings[0]
        assert LABEL[DECLARED[config]] in msg and LABEL[stored] in msg and got.key in msg, msg
    assert resolve_model_quantization(None, mc, str(path), "cpu", warn=False) is None  # the CPU oracle path
    assert resolve_model_quantization("none", mc, str(path), "cuda", warn=False) is None
    # dummy weights: no checkpoint to read, the config decides as before
    dummy = resolve_model_quantization(None, mc, str(path), "cuda", "dummy", warn=False)
    assert dummy == QuantConfig("fp8", "fp4" if config == "fp4" else None)


@pytest.mark.parametrize("case", CASES)
def test_logits_match_hf_on_the_stored_experts(ckpts, case: str) -> None:
    """``--quantization fp8`` (FP8 linears; experts as stored, or dequantized when FP8) against
    HF on the float64 decoding of the stored bytes."""
    stored, _ = case.split("-")
    path = ckpts[case]
    mc = ModelConfig.from_pretrained(str(path))
    ours = get_model(mc, str(path), "cpu", torch.float32, quantization="fp8")
    assert ours.quant == QuantConfig("fp8", "fp4" if stored == "fp4" else None)
    raw = _raw(path)
    sd = ours.state_dict()
    state = load_state_dict(str(path), progress=False)  # non-expert weights (test_loader_checkpoint)
    n = int(CFG["n_routed_experts"])
    for layer in range(int(CFG["num_hidden_layers"])):
        gate_up, down = _experts64(raw, layer, n)
        name = f"model.layers.{layer}.mlp.experts"
        state[f"{name}.gate_up_proj"], state[f"{name}.down_proj"] = gate_up.float(), down.float()
        have = sd[f"{name}.down_proj"]
        if stored == "fp4":  # the published bytes, copied
            assert have.dtype == torch.uint8
            assert torch.equal(
                have[1], raw[EXPERT_KEY.format(l=layer, e=1, p="w2", leaf="weight")].view(torch.uint8)
            )
        else:  # dequantized exactly (e4m3 x 2^k is exact in fp32), not re-quantized to FP4
            assert have.dtype == torch.float32 and f"{name}.down_proj_scale_inv" not in sd
            assert torch.equal(have.double(), down) and torch.equal(
                sd[f"{name}.gate_up_proj"].double(), gate_up
            )
    hf = HFModel(DeepseekV4Config(**{k: v for k, v in CFG.items() if k != "model_type"})).eval()
    hf.load_state_dict(state)
    twin = Twin(name=case, cfg=CFG, mc=mc, hf=hf, ours=ours)
    ids = random_ids(96, seed=7)
    assert (Driver(twin).run_chunked(ids, 48) - hf_logprobs(twin, ids)).abs().max().item() <= TOL


def test_float_stored_experts_keep_the_config_rule(tmp_path) -> None:
    """bf16 / fp32-stored experts are not definite: ``expert_dtype: fp4`` quantizes them on load
    where the model keeps FP8 (docs/QUANTIZATION.md), anything else keeps the model dtype."""
    path = Path(
        write_checkpoint(
            str(tmp_path / "f32"), fmt="official", weights="fp32", seed=1, config_dict=_full_cfg()
        )
    )
    got = stored_expert_format(str(path))
    assert got.fmt is None and got.header_dtype == "F32"
    cfg = json.loads((path / "config.json").read_text())
    for expert_dtype, want in (("fp4", "fp4"), (None, None), ("fp8", None)):
        qc = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
        if expert_dtype:
            qc["expert_dtype"] = expert_dtype
        (path / "config.json").write_text(json.dumps({**cfg, "quantization_config": qc}))
        mc = ModelConfig.from_pretrained(str(path))
        assert resolve_model_quantization(None, mc, str(path), "cuda") == QuantConfig("fp8", want)
    (path / "config.json").write_text(json.dumps(cfg))  # no quantization_config at all
    mc = ModelConfig.from_pretrained(str(path))
    assert resolve_model_quantization(None, mc, str(path), "cuda") is None
    assert resolve_model_quantization("fp8", mc, str(path), "cuda") == QuantConfig("fp8", "fp4")  # online


def test_packed_fp4_beside_an_unquantized_config_stays_fp4(ckpts, tmp_path, caplog) -> None:
    """A config with no ``quantization_config`` over FP4-stored experts: the experts stay packed
    (the linears follow the config), with the warning naming both."""
    d = tmp_path / "noqc"
    shutil.copytree(ckpts["fp4-fp4"], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("quantization_config")
    cfg.pop("expert_dtype", None)
    (d / "config.json").write_text(json.dumps(cfg))
    mc = ModelConfig.from_pretrained(str(d))
    with caplog.at_level(logging.WARNING, logger=BUILDER_LOG):
        assert resolve_model_quantization(None, mc, str(d), "cuda") == QuantConfig(None, "fp4")
    (msg,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "unquantized (no quantization_config)" in msg and "packed FP4" in msg


def test_header_reading_variants(ckpts, tmp_path) -> None:
    """HF packed names, a sharded index (only the shard it names is opened), ``F4`` headers,
    and checkpoints with nothing definite."""
    hf = Path(
        write_checkpoint(str(tmp_path / "hf"), fmt="hf", weights="fp8", seed=2, config_dict=_full_cfg())
    )
    got = stored_expert_format(str(hf))
    assert got.fmt == "fp4" and got.key == "model.layers.0.mlp.experts.down_proj"
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    raw = _raw(ckpts["fp8-fp4"])
    experts = {k: v for k, v in raw.items() if ".ffn.experts." in k}
    save_file({k: v for k, v in raw.items() if k not in experts}, sharded / "a.safetensors")
    save_file(experts, sharded / "b.safetensors")
    weight_map = {k: "a.safetensors" for k in raw if k not in experts} | {k: "b.safetensors" for k in experts}
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (sharded / "a.safetensors").write_bytes(b"not safetensors")  # never opened
    got = stored_expert_format(str(sharded))
    assert (got.fmt, got.key, got.header_dtype) == ("fp8", "layers.0.ffn.experts.0.w1.weight", "F8_E4M3")
    f4 = tmp_path / "f4.safetensors"
    packed = torch.zeros(32, 32, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    save_file(
        {"layers.3.ffn.experts.0.w2.weight": packed, "mtp.0.ffn.experts.0.w2.weight": torch.zeros(2)}, f4
    )
    assert stored_expert_format(str(f4)).fmt == "fp4"
    nothing = tmp_path / "dense.safetensors"
    save_file(
        {"mtp.0.ffn.experts.0.w1.weight": torch.zeros(2, dtype=torch.int8), "embed.weight": torch.zeros(2)},
        nothing,
    )
    assert stored_expert_format(str(nothing)).fmt is None  # the MTP head's experts do not count
    assert stored_expert_format(str(tmp_path / "missing")).fmt is None
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.safetensors").write_bytes(b"\x00" * 16)
    assert stored_expert_format(str(broken)).fmt is None
    with pytest.raises(ValueError, match="stored_experts"):
        resolve_quantization(None, ModelConfig.from_pretrained(str(hf)).hf, "cuda", "int4")

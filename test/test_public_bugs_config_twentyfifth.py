"""FP8 block scales and their encodings, packed FP4 nibbles, checkpoint files and depth, YaRN's
attention factor and the stop ids, as public reports found them broken elsewhere.

Each test ports one public report (cited as ``owner/repo#N``) and checks the right value against an
independent oracle: a float64 decoding of the stored bytes written here from the format
definitions (e4m3 and e2m1 bit fields, ue8m0 ``2 ** (b - 127)``; DeepSeek's FP4 table as quoted in
RobTand/prismaquant#26), transformers (``DeepseekV4ForCausalLM.from_pretrained``,
``DeepseekV4RotaryEmbedding``, ``AutoConfig``, ``AutoTokenizer``, ``GenerationConfig``), SGLang
0.5.23's own ``ModelConfig._get_hf_eos_token_id`` (its source, from the installed package), or the
value the report states.

No report here showed a fault in this runtime; every test is a regression guard: FP8 blocks with
partial edges (vllm-project/compressed-tensors#547) and a block extent read from
``weight_block_size``, not derived from the shapes (NVIDIA/TensorRT-Model-Connect#1115); ue8m0
scale bytes read as exponents whether stored as ``float8_e8m0fnu`` or ``uint8``
(JustVugg/colibri#779, sgl-project/sglang#38446) and held as values in the runtime's float32
scales (vllm-project/vllm#51946); FP4 nibbles in linear order (RobTand/prismaquant#26,
kekzl/imp#567); FP4 experts kept packed under a model-wide FP8 config
(lightseekorg/tokenspeed#1095); an unsupported ``quant_method`` refused by name
(vllm-project/vllm#45568); no pickle loaded and no look-alike file taken for safetensors
(huggingface/transformers#31649, #26729); a checkpoint deeper than its config
(ml-explore/mlx#3214) and a declared MTP layer without tensors (ggml-org/llama.cpp#26942); stop
ids as a union of the config files and the tokenizer (Blaizzy/mlx-vlm#1501, ml-explore/mlx-lm#1414);
YaRN's attention factor from ``mscale`` / ``mscale_all_dim`` (sgl-project/sglang#22711).
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from dsv4_testutil import CONFIGS
from public_bug_configs_testutil import write_model_dir
from safetensors.torch import load_file, save_file
from sglang_source_testutil import sglang_function
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_loader import load_state_dict
from sglang_v4.model_loader.loader import checkpoint_files
from sglang_v4.model_loader.quant import quantize_fp4, quantize_fp8_block
from sglang_v4.tools.make_checkpoint import write_checkpoint
from transformers import AutoConfig, AutoTokenizer, DeepseekV4Config, GenerationConfig

FP8_QC = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "activation_scheme": "dynamic"}
CFG = CONFIGS["sliding_first"]

# --------------------------------------------------------------------------- float64 oracles


def e4m3_64(q: torch.Tensor) -> torch.Tensor:
    """float64 values of ``float8_e4m3fn`` bytes from the bit fields (sign 7, exponent 3-6 with
    bias 7, mantissa 0-2; exponent 0 subnormal ``m/8 * 2**-6``); no float8 cast involved."""
    b = q.contiguous().view(torch.uint8).to(torch.int64)
    s, e, m = b >> 7, (b >> 3) & 0xF, b & 0x7
    mag = torch.where(e == 0, m.double() / 8 * 2.0**-6, (1 + m.double() / 8) * torch.pow(2.0, e.double() - 7))
    return torch.where(s == 1, -mag, mag)


def ue8m0_64(scale: torch.Tensor) -> torch.Tensor:
    """float64 ``2 ** (b - 127)`` of ue8m0 bytes (``float8_e8m0fnu`` or ``uint8``)."""
    b = scale.contiguous().view(torch.uint8).to(torch.float64)
    return torch.pow(2.0, b - 127)


def block_dequant64(q: torch.Tensor, s64: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """``q [R, C]`` e4m3 times the scale of its ``block`` (row ``i // bm``, column ``j // bn``)."""
    r, c = q.shape
    i, j = torch.arange(r) // block[0], torch.arange(c) // block[1]
    return e4m3_64(q) * s64[i[:, None], j[None, :]]


#: DeepSeek's FP4 decode table (``inference/convert.py`` as quoted in RobTand/prismaquant#26).
FP4_TABLE = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def fp4_dequant64(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Packed e2m1 ``[R, C/2]`` (element 2j in the low nibble, 2j+1 in the high nibble) times one
    ue8m0 scale per 32 values, float64, by a Python loop over the table."""
    u = packed.contiguous().view(torch.uint8).tolist()
    vals = torch.tensor(
        [[FP4_TABLE[v] for b in row for v in (b & 0x0F, b >> 4)] for row in u], dtype=torch.float64
    )
    s = ue8m0_64(scale).repeat_interleave(32, dim=1)
    return vals * s


def _fp8_checkpoint(path: Path, tensors: dict[str, torch.Tensor], qc: dict[str, Any] | None = None) -> Path:
    """A one-file checkpoint of ``tensors`` with a ``config.json`` holding only ``qc`` as its
    ``quantization_config`` (the loader's view needs nothing else)."""
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(
        json.dumps({"quantization_config": qc or {**FP8_QC, "weight_block_size": [128, 128]}})
    )
    return path


# --------------------------------------------------------------------------- FP8 block scales


@pytest.mark.parametrize("shape", [(576, 2048), (4544, 768), (192, 320), (100, 60)])
def test_compressed_tensors_547_fp8_blocks_with_partial_edges(tmp_path: Path, shape: tuple[int, int]) -> None:
    """vllm-project/compressed-tensors#547: FP8 block quantization required each dim divisible by
    the 128 block, so DeepSeek-V2-Lite's ``kv_a_proj_with_mqa [576, 2048]`` (and Falcon's 4544)
    failed (``Tensor height ... is not divisible by block_height 128``). Expected: the edge blocks
    are partial, each with its own scale (``ceil(R/128) x ceil(C/128)`` grid); every element
    dequantizes to its e4m3 value times the scale of its block, exactly (float64 oracle)."""
    g = torch.Generator().manual_seed(sum(shape))
    w = torch.randn(*shape, generator=g) * torch.logspace(-3, 1, shape[0])[:, None]
    q, s = quantize_fp8_block(w, (128, 128), torch.float8_e8m0fnu)
    assert tuple(s.shape) == (math.ceil(shape[0] / 128), math.ceil(shape[1] / 128))
    name = "model.layers.0.self_attn.kv_proj.weight"
    d = _fp8_checkpoint(tmp_path / "m", {name: q, name + "_scale_inv": s})
    got = load_state_dict(str(d), progress=False)[name]
    assert got.dtype == torch.float32 and tuple(got.shape) == shape
    assert torch.equal(got.double(), block_dequant64(q, ue8m0_64(s), (128, 128)))


@pytest.mark.parametrize("block", [(128, 128), (64, 128), (32, 64)])
def test_tensorrt_model_connect_1115_block_extent_from_weight_block_size(
    tmp_path: Path, block: tuple[int, int]
) -> None:
    """NVIDIA/TensorRT-Model-Connect#1115: the FP8 block extent was derived from the two shapes
    (``ceil(rows / scale_rows)``), which is wrong whenever the last block is partial: rows 1000
    over 8 scale rows gave 125-row blocks instead of 128. Expected: the block comes from
    ``quantization_config.weight_block_size``; a ``[1000, 300]`` weight dequantizes with that
    block (float64 oracle), and a scale grid that only a shape-derived block would fit is refused
    with a ``ValueError`` naming the tensor and the expected grid."""
    g = torch.Generator().manual_seed(block[0])
    w = torch.randn(1000, 300, generator=g)
    q, s = quantize_fp8_block(w, block, torch.float32)
    name = "model.layers.0.self_attn.q_b_proj.weight"
    qc = {**FP8_QC, "weight_block_size": list(block)}
    d = _fp8_checkpoint(tmp_path / "ok", {name: q, name + "_scale_inv": s}, qc)
    got = load_state_dict(str(d), progress=False)[name]
    # float32 scales: the float64 product rounded once to float32 (e4m3 x fp32 needs 28 bits)
    assert torch.equal(got, block_dequant64(q, s.double(), block).float())
    if block == (128, 128):  # the report's numbers: the ceil grid is 8 x 3
        assert tuple(s.shape) == (8, 3) and math.ceil(1000 / 8) == 125
    # a 10 x 3 grid (what 100-row blocks would give) does not fit the declared block
    bad = torch.ones(10, s.shape[1])
    d = _fp8_checkpoint(tmp_path / "bad", {name: q, name + "_scale_inv": bad}, qc)
    want = (math.ceil(1000 / block[0]), math.ceil(300 / block[1]))
    with pytest.raises(ValueError, match=rf"{name}.*expected {re.escape(str(want))}"):
        load_state_dict(str(d), progress=False)


@pytest.mark.parametrize("stored", ["float8_e8m0fnu", "uint8"])
def test_colibri_779_and_sglang_38446_ue8m0_scale_bytes_are_exponents(tmp_path: Path, stored: str) -> None:
    """JustVugg/colibri#779 (also unslothai/unsloth#6848): DeepSeek-V4-Flash-0731 stores its FP8
    block scales as one UE8M0 byte per block (``F8_E8M0``), which loaders that read f32 scales
    could not take; sgl-project/sglang#38446: a conversion dropped the mark that a scale holds raw
    UE8M0 bytes and later code treated them as numbers. Expected: official ``<module>.scale``
    tensors stored as ``float8_e8m0fnu`` or as raw ``uint8`` exponent bytes both dequantize as
    ``e4m3 * 2 ** (b - 127)`` (float64 oracle), never ``e4m3 * b``, on an odd shape; and the same
    values stored as float32 scales give the same tensor."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(200, 136, generator=g) * 0.01
    q, s = quantize_fp8_block(w, (128, 128), torch.float8_e8m0fnu)
    s_stored = s if stored == "float8_e8m0fnu" else s.view(torch.uint8).clone()
    name = "layers.0.attn.wq_b"
    d = _fp8_checkpoint(
        tmp_path / "e8m0", {name + ".weight": q, name + ".scale": s_stored, "embed.weight": torch.zeros(4, 4)}
    )
    got = load_state_dict(str(d), progress=False)["model.layers.0.self_attn.q_b_proj.weight"]
    want = block_dequant64(q, ue8m0_64(s), (128, 128))
    assert torch.equal(got.double(), want)
    raw = s.view(torch.uint8).double()
    assert not torch.allclose(want, block_dequant64(q, raw, (128, 128)))  # bytes as numbers: wrong
    d32 = _fp8_checkpoint(
        tmp_path / "f32",
        {name + ".weight": q, name + ".scale": ue8m0_64(s).float(), "embed.weight": torch.zeros(4, 4)},
    )
    assert torch.equal(
        load_state_dict(str(d32), progress=False)["model.layers.0.self_attn.q_b_proj.weight"], got
    )


@pytest.fixture(scope="module")
def official_fp8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random official-format checkpoint as released: FP8 attention / shared expert with ue8m0
    block scales, packed FP4 routed experts with per-32 ue8m0 scales."""
    cfg = ModelConfig.from_dict(copy.deepcopy(CFG)).to_dict()
    root = tmp_path_factory.mktemp("r25cfg")
    return Path(write_checkpoint(str(root / "ck"), fmt="official", weights="fp8", seed=9, config_dict=cfg))


def _raw(path: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(path.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def test_vllm_51946_runtime_fp8_scales_hold_values_not_bytes(official_fp8: Path) -> None:
    """vllm-project/vllm#51946 (fixing vllm-project/vllm#43416, garbled DeepSeek-V4-Flash output):
    the loader reinterpreted every ``float8_e8m0fnu`` scale as raw ``uint8`` bytes and copied them
    into float32 block-scale parameters, so exponent byte 120 (``2**-7``) became ``120.0``. Expected
    in the runtime model (``--quantization fp8``): each FP8 linear's float32 block scale equals
    ``2 ** (b - 127)`` of its stored byte, and each packed FP4 expert scale, held as ue8m0 bytes,
    equals the stored byte (float64 / byte oracles from the safetensors files)."""
    from sglang_v4.model_loader.builder import get_model

    mc = ModelConfig.from_pretrained(str(official_fp8))
    model = get_model(mc, str(official_fp8), "cpu", torch.float32, quantization="fp8")
    sd = model.state_dict()
    raw = _raw(official_fp8)
    pairs = {
        "self_attn.q_a_proj": "attn.wq_a",
        "self_attn.q_b_proj": "attn.wq_b",
        "self_attn.kv_proj": "attn.wkv",
        "self_attn.o_a_proj": "attn.wo_a",
        "self_attn.o_b_proj": "attn.wo_b",
        "mlp.shared_experts.down_proj": "ffn.shared_experts.w2",
    }
    checked = 0
    for layer in range(int(CFG["num_hidden_layers"])):
        for ours, official in pairs.items():
            have = sd[f"model.layers.{layer}.{ours}.weight_scale_inv"]
            stored = raw[f"layers.{layer}.{official}.scale"]
            assert stored.dtype == torch.float8_e8m0fnu
            assert have.dtype == torch.float32
            assert torch.equal(have.double(), ue8m0_64(stored)), (layer, ours)
            checked += 1
        have = sd[f"model.layers.{layer}.mlp.experts.down_proj_scale_inv"]
        assert have.dtype == torch.uint8
        assert torch.equal(have[1], raw[f"layers.{layer}.ffn.experts.1.w2.scale"].view(torch.uint8))
    assert checked == 6 * int(CFG["num_hidden_layers"])


# --------------------------------------------------------------------------- FP4 experts


def test_prismaquant_26_and_imp_567_fp4_nibbles_are_in_linear_order(official_fp8: Path) -> None:
    """RobTand/prismaquant#26 settled DeepSeek-V4-Flash's FP4 expert decode from the authors'
    ``inference/convert.py`` (table ``FP4_TABLE``, element 2j = low nibble, 2j+1 = high nibble);
    kekzl/imp#567 found a loader permuting every 32-value block by reading another nibble order
    (split: j low, j+16 high). Expected: the dequantized ``gate_up_proj`` / ``down_proj`` of
    every expert equal the table decode in linear order times ``2 ** (b - 127)`` per 32 values
    (float64, Python loop), and a byte whose two nibbles differ decodes to (low, high)."""
    state = load_state_dict(str(official_fp8), progress=False)
    raw = _raw(official_fp8)
    n = int(CFG["n_routed_experts"])
    for layer in (0, 3):
        gate_up = state[f"model.layers.{layer}.mlp.experts.gate_up_proj"]
        down = state[f"model.layers.{layer}.mlp.experts.down_proj"]
        for e in range(n):
            key = f"layers.{layer}.ffn.experts.{e}.{{}}"
            w1, w3, w2 = (
                fp4_dequant64(raw[key.format(p + ".weight")], raw[key.format(p + ".scale")])
                for p in ("w1", "w3", "w2")
            )
            assert torch.equal(gate_up[e].double(), torch.cat([w1, w3]))
            assert torch.equal(down[e].double(), w2)
    # one hand-made byte: low nibble 0x2 (1.0), high nibble 0xB (-1.5), scale byte 127 (1.0)
    from sglang_v4.model_loader.quant import dequantize_fp4

    packed = torch.full((1, 16), 0xB2, dtype=torch.uint8).view(torch.int8)
    out = dequantize_fp4(packed, torch.full((1, 1), 127, dtype=torch.uint8))
    assert out[0, :4].tolist() == [1.0, -1.5, 1.0, -1.5]


def test_fp4_quantize_roundtrip_keeps_the_table_values(tmp_path: Path) -> None:
    """RobTand/prismaquant#26's table again, from the writing side: weights that are exactly table
    values times a power of two survive a write (``quantize_fp4``) and a load unchanged, so the
    writer and the loader agree with DeepSeek's nibble order and scale encoding."""
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 16, (8, 64), generator=g)
    idx[:, 0::32] = 7  # each group holds 6.0, so its scale is exactly the power of two below
    exps = torch.randint(-6, 4, (8, 2), generator=g).double()
    w = torch.tensor(FP4_TABLE, dtype=torch.float64)[idx] * torch.pow(2.0, exps).repeat_interleave(32, dim=1)
    packed, scale = quantize_fp4(w.float())
    assert torch.equal(fp4_dequant64(packed, scale), w)
    name = "layers.0.ffn.experts.0.w2"
    d = _fp8_checkpoint(
        tmp_path / "m", {name + ".weight": packed, name + ".scale": scale, "embed.weight": torch.zeros(4, 4)}
    )
    got = load_state_dict(str(d), progress=False)["model.layers.0.mlp.experts.down_proj"]
    assert tuple(got.shape) == (1, 8, 64) and torch.equal(got[0].double(), w)


# --------------------------------------------------------------------------- checkpoint files and depth


def test_transformers_31649_and_26729_only_safetensors_are_weights(tmp_path: Path) -> None:
    """huggingface/transformers#31649: with ``use_safetensors=True`` a directory holding only
    ``pytorch_model.bin`` still loaded the pickle; huggingface/transformers#26729: a non-weight
    file whose name merely contains ``safetensors`` switched the loader to safetensors. Expected:
    a directory of ``pytorch_model.bin`` (+ its index) and ``notes.safetensors.json`` has no
    checkpoint here: ``FileNotFoundError`` naming the directory, and the pickle is never unpickled
    (a file that raises when unpickled shows it)."""

    class _Boom:
        def __reduce__(self) -> Any:
            return (exec, ("raise RuntimeError('unpickled')",))

    d = tmp_path / "m"
    d.mkdir()
    torch.save({"model.embed_tokens.weight": torch.zeros(2, 2), "x": _Boom()}, d / "pytorch_model.bin")
    (d / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {"model.embed_tokens.weight": "pytorch_model.bin"}})
    )
    (d / "notes.safetensors.json").write_text("{}")
    (d / "config.json").write_text(json.dumps({"model_type": "deepseek_v4"}))
    with pytest.raises(FileNotFoundError, match=re.escape(str(d))):
        checkpoint_files(str(d))
    with pytest.raises(FileNotFoundError, match="safetensors"):
        load_state_dict(str(d), progress=False)


def _hf_checkpoint(root: Path) -> Path:
    """An HF-named float32 checkpoint of ``CFG`` (4 layers), written by transformers'
    ``save_pretrained`` from a randomly initialised ``DeepseekV4ForCausalLM``."""
    from sglang_v4.tools.make_checkpoint import make_random_state_dict
    from transformers import DeepseekV4ForCausalLM as HFModel

    cfg = copy.deepcopy(CFG)
    hf = HFModel(DeepseekV4Config(**{k: v for k, v in cfg.items() if k != "model_type"})).eval()
    hf.load_state_dict(make_random_state_dict(copy.deepcopy(cfg), 4))
    hf.save_pretrained(root, save_original_format=False)
    return root


def test_mlx_3214_checkpoint_deeper_than_the_config_loads_its_first_layers(tmp_path: Path) -> None:
    """ml-explore/mlx#3214: loading a full checkpoint into a model built with fewer layers
    (``num_hidden_layers=1``) crashed (``IndexError``) on the extra ``layers.N`` keys instead of
    dropping them. Expected: a 4-layer checkpoint under a ``config.json`` cut to 2 layers loads
    those 2 layers, every weight equal to transformers' ``from_pretrained`` of the same directory
    (which drops the extra layers as unexpected keys)."""
    from sglang_v4.model_loader.builder import get_model
    from transformers import DeepseekV4ForCausalLM as HFModel

    d = _hf_checkpoint(tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = 2
    for k in ("layer_types", "mlp_layer_types"):
        cfg[k] = cfg[k][:2]
    (d / "config.json").write_text(json.dumps(cfg))
    ref = HFModel.from_pretrained(str(d), dtype=torch.float32)
    assert ref.config.num_hidden_layers == 2
    want = ref.state_dict()
    mc = ModelConfig.from_pretrained(str(d))
    assert mc.num_layers == 2
    ours = get_model(mc, str(d), "cpu", torch.float32).state_dict()
    assert not any(k.startswith(("model.layers.2.", "model.layers.3.")) for k in ours)
    common = [k for k in ours if k in want]
    assert len(common) >= 0.9 * len(ours), sorted(set(ours) - set(want))[:10]
    for k in common:
        assert torch.equal(ours[k].float(), want[k].float()), k


def test_llama_cpp_26942_declared_mtp_layer_without_tensors(official_fp8: Path, tmp_path: Path) -> None:
    """ggml-org/llama.cpp#26942: a config declaring one MTP layer over a checkpoint holding no
    ``mtp.*`` tensors made the loader ask for the missing block and fail. Expected: the MTP head is
    not read here, so ``num_nextn_predict_layers: 1`` without ``mtp.*`` tensors loads, and every
    model tensor equals the load of the same checkpoint with its ``mtp.*`` tensors."""
    from sglang_v4.model_loader.builder import get_model

    cfg = json.loads((official_fp8 / "config.json").read_text())
    assert int(cfg.get("num_nextn_predict_layers", 0)) >= 1
    d = tmp_path / "no-mtp"
    shutil.copytree(official_fp8, d)
    dropped = 0
    for shard in sorted(d.glob("*.safetensors")):
        tensors = load_file(shard)
        kept = {k: v for k, v in tensors.items() if not k.startswith("mtp.")}
        dropped += len(tensors) - len(kept)
        save_file(kept, shard, metadata={"format": "pt"})
    index = d / "model.safetensors.index.json"
    if index.exists():
        idx = json.loads(index.read_text())
        idx["weight_map"] = {k: v for k, v in idx["weight_map"].items() if not k.startswith("mtp.")}
        index.write_text(json.dumps(idx))
    assert dropped > 0
    with_mtp = get_model(
        ModelConfig.from_pretrained(str(official_fp8)), str(official_fp8), "cpu", torch.float32
    )
    without = get_model(ModelConfig.from_pretrained(str(d)), str(d), "cpu", torch.float32)
    a, b = with_mtp.state_dict(), without.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- stop ids

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
TINY = json.loads((FIXTURES / "tiny-DeepseekV4ForCausalLM.config.json").read_text())


def _sglang_eos(d: Path) -> set[int]:
    """SGLang's ``ModelConfig._get_hf_eos_token_id`` (its source) over transformers' config and
    generation config of ``d``."""
    fn = sglang_function("srt/configs/model_config.py", "_get_hf_eos_token_id", {}, class_name="ModelConfig")
    gen = GenerationConfig.from_pretrained(str(d)) if (d / "generation_config.json").exists() else None
    return fn(SimpleNamespace(hf_config=AutoConfig.from_pretrained(str(d)), hf_generation_config=gen))


def test_mlx_vlm_1501_generation_config_eos_does_not_narrow_the_config_list(tmp_path: Path) -> None:
    """Blaizzy/mlx-vlm#1501 (and vllm-project/vllm#45591, where an override dropped
    ``generation_config.json``'s ``eos_token_id``): a model's list of chat stop ids
    (``[2, 32000, 32007]`` for Phi-3-V) was narrowed to the single ``eos_token_id`` of
    ``generation_config.json`` when its defaults were applied, so ``<|end|>`` was printed. Expected:
    the stop set is the union SGLang's ``_get_hf_eos_token_id`` builds from transformers'
    ``config.json`` and ``generation_config.json``, plus the tokenizer's EOS, whichever file names
    the list."""
    from sglang_v4.entrypoints.launcher import check_model_dir
    from sglang_v4.managers.stop_tokens import stop_token_ids

    cases = {
        "config-list": ({**TINY, "eos_token_id": [2, 320, 327]}, {"eos_token_id": 2}),
        "generation-list": ({**TINY, "eos_token_id": 2}, {"eos_token_id": [2, 320, 327]}),
        "both-lists": ({**TINY, "eos_token_id": [2, 320]}, {"eos_token_id": [327, 2]}),
    }
    for name, (cfg, gen) in cases.items():
        d = write_model_dir(tmp_path / name, cfg, gen)
        tok = check_model_dir(str(d), load_format="dummy", device="cpu")
        want = _sglang_eos(d) | {AutoTokenizer.from_pretrained(str(d)).eos_token_id}
        assert {2, 320, 327} <= want
        assert stop_token_ids(ModelConfig.from_pretrained(str(d)), tok) == want, name


def test_mlx_lm_1414_a_stale_config_eos_list_keeps_the_tokenizers_eos(tmp_path: Path) -> None:
    """ml-explore/mlx-lm#1414: ``config.json``'s ``eos_token_id`` (a stale value in re-quantized
    repos) replaced the EOS the tokenizer derives, so the real stop token leaked into the output
    until ``max_tokens``. Expected: with a ``config.json`` list naming neither the tokenizer's EOS
    nor anything of ``generation_config.json``, the stop set still holds the tokenizer's
    ``eos_token_id`` (transformers' ``AutoTokenizer``) beside every config id."""
    from sglang_v4.entrypoints.launcher import check_model_dir
    from sglang_v4.managers.stop_tokens import stop_token_ids

    d = write_model_dir(tmp_path / "m", {**TINY, "eos_token_id": [7, 9]})
    tok = check_model_dir(str(d), load_format="dummy", device="cpu")
    tok_eos = AutoTokenizer.from_pretrained(str(d)).eos_token_id
    assert isinstance(tok_eos, int) and tok_eos not in (7, 9)
    assert AutoConfig.from_pretrained(str(d)).eos_token_id == [7, 9]
    assert stop_token_ids(ModelConfig.from_pretrained(str(d)), tok) == {7, 9, tok_eos}


# --------------------------------------------------------------------------- YaRN attention factor


@pytest.mark.parametrize(
    ("mscale", "mscale_all_dim"), [(1.0, 1.0), (1.0, 0.707), (0.707, 0.707), (None, None), (1.0, 0.0)]
)
def test_sglang_22711_yarn_attention_factor_from_mscale_and_mscale_all_dim(
    mscale: float | None, mscale_all_dim: float | None
) -> None:
    """sgl-project/sglang#22711: the YaRN rope ignored ``mscale`` / ``mscale_all_dim`` and scaled
    cos/sin by ``0.1 ln(factor) + 1`` (1.277 at factor 16) where transformers computes
    ``get_mscale(f, mscale) / get_mscale(f, mscale_all_dim)`` (1.0 when both are 1), giving
    repetitive output. Expected: for a nested ``compress`` YaRN rope with these fields, the
    runtime's cos/sin amplitude and frequencies equal transformers' ``DeepseekV4RotaryEmbedding``
    of the same config, and the amplitude is the report's formula."""
    from sglang_v4.layers.rotary_embedding import RotaryTables
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4RotaryEmbedding

    compress: dict[str, Any] = {
        "rope_type": "yarn",
        "rope_theta": 160000.0,
        "factor": 16.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "partial_rotary_factor": CFG["partial_rotary_factor"],
    }
    if mscale is not None:
        compress["mscale"], compress["mscale_all_dim"] = mscale, mscale_all_dim
    main = {
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": CFG["partial_rotary_factor"],
    }
    raw = {**copy.deepcopy(CFG), "rope_parameters": {"main": main, "compress": compress}}
    hf = DeepseekV4RotaryEmbedding(DeepseekV4Config(**{k: v for k, v in raw.items() if k != "model_type"}))
    ours = RotaryTables(ModelConfig.from_dict(raw), "cpu")

    def get_mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if mscale is not None and mscale_all_dim:
        want = get_mscale(16.0, mscale) / get_mscale(16.0, mscale_all_dim)
    else:
        want = get_mscale(16.0)
    assert hf.compress_attention_scaling == pytest.approx(want, rel=1e-12)
    assert ours.scaling["compress"] == pytest.approx(hf.compress_attention_scaling, rel=1e-12)
    assert torch.equal(ours.inv_freq["compress"], hf.compress_inv_freq.float())
    pos = torch.tensor([0, 1, 7, 33])  # small: float32 p * inv_freq is then exact to ~1e-6 rad
    cos, sin = ours.cos_sin("compress", pos)
    freqs = pos.double()[:, None] * hf.compress_inv_freq.double()[None, :]
    assert torch.allclose(cos.double(), freqs.cos() * want, atol=1e-5)
    assert torch.allclose(sin.double(), freqs.sin() * want, atol=1e-5)


# --------------------------------------------------------------------------- quantization_config


def test_tokenspeed_1095_expert_dtype_fp4_under_a_model_wide_fp8_config(official_fp8: Path) -> None:
    """lightseekorg/tokenspeed#1095: DeepSeek-V4-Flash declares model-wide FP8
    (``quantization_config.quant_method: fp8``) while storing its routed experts as packed FP4
    (``expert_dtype: fp4``); inferring the expert format from the model-wide config allocated the
    experts as block FP8 and the packed checkpoint failed to load. Expected: on the GPU path the
    linears are FP8 and the routed experts FP4; the runtime model (``--quantization fp8``) holds
    every expert's packed bytes exactly as stored (``uint8`` view of the ``I8`` tensors)."""
    from sglang_v4.layers.quantization import QuantConfig
    from sglang_v4.model_loader.builder import get_model, resolve_model_quantization

    cfg = json.loads((official_fp8 / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "fp8" and cfg.get("expert_dtype", "fp4") == "fp4"
    mc = ModelConfig.from_pretrained(str(official_fp8))
    assert resolve_model_quantization(None, mc, str(official_fp8), "cuda", warn=False) == QuantConfig(
        "fp8", "fp4"
    )
    sd = get_model(mc, str(official_fp8), "cpu", torch.float32, quantization="fp8").state_dict()
    raw = _raw(official_fp8)
    n = int(CFG["n_routed_experts"])
    for layer in range(int(CFG["num_hidden_layers"])):
        gate_up = sd[f"model.layers.{layer}.mlp.experts.gate_up_proj"]
        assert gate_up.dtype == torch.uint8
        for e in range(n):
            key = f"layers.{layer}.ffn.experts.{e}.{{}}.weight"
            want = torch.cat([raw[key.format("w1")], raw[key.format("w3")]]).view(torch.uint8)
            assert torch.equal(gate_up[e], want), (layer, e)


@pytest.mark.parametrize("method", ["mxfp8", "mxfp4", "fbgemm_fp8", "compressed-tensors"])
def test_vllm_45568_an_unsupported_quant_method_is_refused_by_name(tmp_path: Path, method: str) -> None:
    """vllm-project/vllm#45568: a pre-quantized checkpoint whose ``quant_method`` (``mxfp8``)
    this server cannot read crashed at engine-config creation with a ``NotImplementedError`` from
    an unrelated code path. Expected: refused before any weight is read, with a ``ValueError``
    naming ``quantization_config.quant_method`` and the value, as transformers'
    ``AutoQuantizationConfig`` knows each of these methods (so the config itself is well formed)."""
    from sglang_v4.entrypoints.launcher import check_model_dir
    from transformers.quantizers.auto import AUTO_QUANTIZATION_CONFIG_MAPPING

    assert method in AUTO_QUANTIZATION_CONFIG_MAPPING
    flash = json.loads((FIXTURES / "DeepSeek-V4-Flash.config.json").read_text())
    qc = {**flash["quantization_config"], "quant_method": method}
    d = write_model_dir(tmp_path / "m", {**flash, "quantization_config": qc})
    with pytest.raises(ValueError, match=rf"quantization_config\.quant_method.*{method}"):
        check_model_dir(str(d), load_format="dummy", device="cpu")

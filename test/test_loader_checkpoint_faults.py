"""Checkpoint directories as users download them, with the faults public bug reports show.

Each fault is refused by the start-up check (``check_model_dir``, run before any process loads the model)
with one line naming the file and the tensor / field, instead of a traceback from the scheduler
process or, worse, a model that loads and computes garbage. Oracles: the tensor names and shapes of
HF transformers' ``DeepseekV4ForCausalLM`` (built on the meta device from the same config),
safetensors' own header reader for the shapes found, the index file for the shard names.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from sglang_v4.entrypoints.engine import check_model_dir
from sglang_v4.tools.make_checkpoint import write_checkpoint
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

INDEX = "model.safetensors.index.json"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random checkpoints, sharded (~1 MiB shards, 8 files) with an index."""
    root = tmp_path_factory.mktemp("base")
    return {
        "hf": Path(write_checkpoint(str(root / "hf_bf16"), "tiny", "hf", "bf16", 0, shard_size_mb=1)),
        "official": Path(
            write_checkpoint(str(root / "off_fp8"), "tiny", "official", "fp8", 0, shard_size_mb=1)
        ),
    }


def _copy(base: dict[str, Path], which: str, tmp_path: Path) -> Path:
    d = tmp_path / which
    shutil.copytree(base[which], d)
    return d


def _weight_map(d: Path) -> dict[str, str]:
    return json.loads((d / INDEX).read_text())["weight_map"]


def _edit_shard(d: Path, key: str, new: torch.Tensor | None) -> Path:
    """Replace (or, with ``None``, delete) tensor ``key`` in the shard the index lists it in."""
    shard = d / _weight_map(d)[key]
    tensors = load_file(shard)
    if new is None:
        del tensors[key]
    else:
        tensors[key] = new
    save_file(tensors, shard, metadata={"format": "pt"})
    return shard


def _set_config(d: Path, **fields: Any) -> None:
    cfg = json.loads((d / "config.json").read_text())
    for k, v in fields.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (d / "config.json").write_text(json.dumps(cfg))


def _refusal(d: Path, **kw: Any) -> str:
    with pytest.raises(ValueError) as e:
        check_model_dir(str(d), skip_tokenizer_init=True, **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("model_path: "), msg
    return msg


def _hf_shapes(d: Path) -> dict[str, tuple[int, ...]]:
    """HF transformers' parameter shapes for the config of ``d`` (HF names)."""
    cfg = json.loads((d / "config.json").read_text())
    cfg = {k: v for k, v in cfg.items() if k not in ("quantization_config", "architectures", "model_type")}
    with torch.device("meta"):
        model = DeepseekV4ForCausalLM(DeepseekV4Config(**cfg))
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def test_sharded_checkpoints_pass_the_start_up_check(base) -> None:
    for d in base.values():
        check_model_dir(str(d), skip_tokenizer_init=True)


def test_index_naming_a_missing_shard(base, tmp_path) -> None:
    d = _copy(base, "hf", tmp_path)
    shard = sorted(set(_weight_map(d).values()))[1]
    (d / shard).unlink()
    msg = _refusal(d)
    assert f"{d / shard}: shard listed in {INDEX} does not exist" in msg


@pytest.mark.parametrize(
    "which,key,hf_name",
    [
        ("hf", "model.layers.1.self_attn.q_a_proj.weight", "model.layers.1.self_attn.q_a_proj.weight"),
        ("official", "layers.2.attn.attn_sink", "model.layers.2.self_attn.sinks"),
        ("hf", "lm_head.weight", "lm_head.weight"),  # tie_word_embeddings false: no stand-in
    ],
)
def test_shard_missing_a_tensor_names_it_and_its_shard(base, tmp_path, which, key, hf_name) -> None:
    d = _copy(base, which, tmp_path)
    assert json.loads((d / "config.json").read_text()).get("tie_word_embeddings") in (False, None)
    shard = _edit_shard(d, key, None)
    assert hf_name in _hf_shapes(d)  # the model needs it
    msg = _refusal(d)
    assert f"{shard} (where {INDEX} lists {key}): {hf_name}" in msg and ": missing" in msg


def test_tensor_with_the_wrong_shape_names_both_shapes(base, tmp_path) -> None:
    d = _copy(base, "hf", tmp_path)
    key = "model.layers.3.mlp.shared_experts.down_proj.weight"
    w = load_file(d / _weight_map(d)[key])[key]
    shard = _edit_shard(d, key, w[:, :-8].contiguous())
    with safe_open(str(shard), framework="pt") as f:
        found = list(f.get_slice(key).get_shape())
    want = list(_hf_shapes(d)[key])
    assert found != want
    msg = _refusal(d)
    assert f"{shard}: {key}: expected shape {want}, found shape {found}" in msg


def test_several_problems_stay_one_line_with_a_count(base, tmp_path) -> None:
    d = _copy(base, "hf", tmp_path)
    for key in ("model.layers.0.self_attn.sinks", "model.layers.1.self_attn.sinks", "model.norm.weight"):
        _edit_shard(d, key, None)
    assert "(and 2 more: " in _refusal(d)


def test_duplicate_tensor_across_shards(base, tmp_path) -> None:
    """A tensor stored in two shards that the index does not settle (it lists the tensor in
    neither) is refused naming both files; one the index maps to a shard is read from there
    (test_public_bugs_loader_thirtysecond.py)."""
    d = _copy(base, "hf", tmp_path)
    index = json.loads((d / INDEX).read_text())
    wm = index["weight_map"]
    first = max(set(wm.values()), key=list(wm.values()).count)  # still listed without ``key``
    second = next(v for v in sorted(set(wm.values())) if v != first)
    key = next(k for k, v in wm.items() if v == first)
    tensors = load_file(d / second)
    tensors[key] = load_file(d / first)[key]
    save_file(tensors, d / second, metadata={"format": "pt"})
    del wm[key]
    (d / INDEX).write_text(json.dumps(index))
    msg = _refusal(d)
    assert key in msg and str(d / first) in msg and str(d / second) in msg and "stored twice" in msg


def test_index_pointing_at_a_pytorch_bin_file(base, tmp_path) -> None:
    d = _copy(base, "hf", tmp_path)
    index = json.loads((d / INDEX).read_text())
    shard = sorted(set(index["weight_map"].values()))[0]
    torch.save(load_file(d / shard), d / "pytorch_model-00001-of-00008.bin")
    (d / shard).unlink()
    index["weight_map"] = {
        k: ("pytorch_model-00001-of-00008.bin" if v == shard else v) for k, v in index["weight_map"].items()
    }
    (d / INDEX).write_text(json.dumps(index))
    msg = _refusal(d)
    assert (
        str(d / INDEX) in msg
        and "'pytorch_model-00001-of-00008.bin', which is not a .safetensors file" in msg
    )


def test_corrupt_safetensors_file_is_named(base, tmp_path) -> None:
    d = _copy(base, "hf", tmp_path)
    shard = d / sorted(set(_weight_map(d).values()))[2]
    shard.write_bytes(b"<html>rate limited</html>")  # what a failed download leaves
    msg = _refusal(d)
    assert f"{shard}: not a readable safetensors file" in msg


def test_index_that_is_not_json(base, tmp_path) -> None:
    d = _copy(base, "hf", tmp_path)
    (d / INDEX).write_text('{"weight_map": ')
    assert f"{d / INDEX}: not a safetensors index" in _refusal(d)


def test_bin_only_directory_is_refused_naming_the_bin(base, tmp_path) -> None:
    d = _copy(base, "hf", tmp_path)
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(set(_weight_map(d).values())):
        tensors.update(load_file(d / shard))
        (d / shard).unlink()
    (d / INDEX).unlink()
    torch.save(tensors, d / "pytorch_model.bin")
    msg = _refusal(d)
    assert "has no *.safetensors weights (found pytorch_model.bin: sglang-v4 reads safetensors only)" in msg
    check_model_dir(str(d), load_format="dummy", skip_tokenizer_init=True)  # random weights need none


@pytest.mark.parametrize("scale_suffix", [".scale", ".weight_scale_inv"])
def test_fp8_weight_without_its_scale(base, tmp_path, scale_suffix: str) -> None:
    """An e4m3 weight whose scale is gone: loading it as plain values would run the model on
    numbers off by the block scales (silently wrong output)."""
    d = _copy(base, "official", tmp_path)
    weight, scale = "layers.1.attn.wq_b.weight", "layers.1.attn.wq_b.scale"
    shard = d / _weight_map(d)[scale]
    tensors = load_file(shard)
    if scale_suffix == ".weight_scale_inv":  # HF's spelling of the scale: accepted, then dropped
        tensors[weight + "_scale_inv"] = tensors.pop(scale)
        save_file(tensors, shard, metadata={"format": "pt"})
        check_model_dir(str(d), skip_tokenizer_init=True)
        scale = weight + "_scale_inv"
    del tensors[scale]
    save_file(tensors, shard, metadata={"format": "pt"})
    with safe_open(str(d / _weight_map(d)[weight]), framework="pt") as f:
        assert f.get_slice(weight).get_dtype() == "F8_E4M3"
    msg = _refusal(d)
    assert f"{weight}: F8_E4M3 weight without its block scale" in msg
    assert f"{weight}_scale_inv or layers.1.attn.wq_b.scale" in msg


@pytest.mark.parametrize(
    "qc",
    [
        {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
        {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False},
        {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
        {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"},
    ],
    ids=lambda qc: qc["quant_method"],
)
def test_quantization_config_of_another_method(base, tmp_path, qc: dict[str, Any]) -> None:
    d = _copy(base, "hf", tmp_path)
    _set_config(d, quantization_config=qc)
    msg = _refusal(d)
    assert f"{d / 'config.json'}: quantization_config.quant_method" in msg and repr(qc["quant_method"]) in msg


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLMNextN"])
def test_architectures_naming_another_model(base, tmp_path, arch: str) -> None:
    d = _copy(base, "hf", tmp_path)
    _set_config(d, architectures=[arch])
    msg = _refusal(d)
    assert f"{d / 'config.json'}: architectures ['{arch}'] names '{arch}'" in msg


@pytest.mark.parametrize("block", [[128], "128x128", [128, 0], [128.0, 128.0]])
def test_malformed_weight_block_size(base, tmp_path, block) -> None:
    d = _copy(base, "official", tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"]["weight_block_size"] = block
    (d / "config.json").write_text(json.dumps(cfg))
    assert f"{d / 'config.json'}: quantization_config.weight_block_size: expected two positive" in _refusal(d)


def test_empty_quantization_config_is_unquantized(base, tmp_path) -> None:
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.layers.quantization import resolve_quantization

    d = _copy(base, "hf", tmp_path)
    _set_config(d, quantization_config={})
    check_model_dir(str(d), skip_tokenizer_init=True)
    assert resolve_quantization(None, ModelConfig.from_pretrained(str(d)).hf, "cuda") is None


def test_architectures_absent_is_read_from_model_type(base, tmp_path) -> None:
    """transformers resolves the class from ``model_type`` alone; so does the start-up check."""
    d = _copy(base, "hf", tmp_path)
    _set_config(d, architectures=None)
    check_model_dir(str(d), skip_tokenizer_init=True)


def test_launcher_exits_1_with_one_line_naming_the_tensor(base, tmp_path, capsys) -> None:
    from sglang_v4 import launch_server

    d = _copy(base, "hf", tmp_path)
    shard = _edit_shard(d, "model.layers.0.self_attn.kv_proj.weight", None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["--model-path", str(d), "--skip-tokenizer-init", "--host", "127.0.0.1", "--port", str(port)]
    assert launch_server.main(argv) == 1
    cap = capsys.readouterr()
    lines = [ln for ln in (cap.out + cap.err).splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert str(shard) in lines[0] and "model.layers.0.self_attn.kv_proj.weight: missing" in lines[0]


@pytest.mark.parametrize("gen_eos", [[1, 7, 1], 7, None])
def test_generation_config_eos_ids_join_the_config_ones(base, tmp_path, gen_eos) -> None:
    """SGLang stops on ``config.json``'s ``eos_token_id`` and ``generation_config.json``'s (an int
    or a list) alike; the ids come from transformers' own readers of both files."""
    from sglang_v4.configs.model_config import ModelConfig
    from transformers import AutoConfig, GenerationConfig

    d = _copy(base, "hf", tmp_path)
    gen = json.loads((d / "generation_config.json").read_text())
    gen["eos_token_id"] = gen_eos
    gen.update(temperature=0.6, top_p=0.95, do_sample=True)
    (d / "generation_config.json").write_text(json.dumps(gen))
    cfg_eos = AutoConfig.from_pretrained(str(d)).eos_token_id
    gen_ids = GenerationConfig.from_pretrained(str(d)).eos_token_id
    want = {cfg_eos} | ({gen_ids} if isinstance(gen_ids, int) else set(gen_ids or ()))
    mc = ModelConfig.from_pretrained(str(d))
    assert set(mc.eos_token_ids) == want and len(mc.eos_token_ids) == len(want)
    assert (7 in mc.eos_token_ids) == (gen_eos is not None)


def test_generation_stops_on_a_generation_config_eos_id(sched_model_dir, tmp_path) -> None:
    """End to end: a token listed only in ``generation_config.json``'s ``eos_token_id`` ends a
    greedy generation where HF transformers' greedy continuation (the oracle) emits it."""
    from scheduler_testutil import make_scheduler, run_one

    d = tmp_path / "model"
    shutil.copytree(sched_model_dir, d)
    hf = DeepseekV4ForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()
    prompt = [5, 17, 301, 42, 7, 99, 3, 250]
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(4):
            seq.append(int(hf(torch.tensor([seq])).logits[0, -1].argmax()))
    greedy = seq[len(prompt) :]
    cfg_eos = json.loads((d / "config.json").read_text()).get("eos_token_id")
    k = next(i for i in range(1, 4) if greedy[i] not in greedy[:i] and greedy[i] != cfg_eos)
    gen = json.loads((d / "generation_config.json").read_text())
    gen["eos_token_id"] = [greedy[k]] if cfg_eos is None else [cfg_eos, greedy[k]]
    (d / "generation_config.json").write_text(json.dumps(gen))
    out = run_one(make_scheduler(str(d)), "r", prompt, n=8, ignore_eos=False)
    assert out["ids"] == greedy[: k + 1], (out["ids"], greedy)
    assert out["finish"]["type"] == "stop", out["finish"]


def _block_dequant64(q: torch.Tensor, s: torch.Tensor, bm: int, bn: int) -> torch.Tensor:
    r, c = q.shape
    i, j = torch.arange(r) // bm, torch.arange(c) // bn
    return q.to(torch.float64) * s.to(torch.float64)[i[:, None], j[None, :]]


@pytest.mark.parametrize("block", [(64, 64), (128, 64), (32, 128)])
def test_fp8_block_size_other_than_128_is_dequantized_exactly(base, tmp_path, block) -> None:
    """``weight_block_size`` other than 128x128: read with the config's blocks (one float32 scale
    per block, edge blocks partial), equal to a float64 dequantization written here; a config that
    says 128x128 over such scales is refused naming the tensor and both scale shapes."""
    from sglang_v4.model_loader import load_state_dict

    bm, bn = block
    d = _copy(base, "official", tmp_path)
    wm = _weight_map(d)
    want: dict[str, torch.Tensor] = {}
    gen = torch.Generator().manual_seed(3)
    for shard in sorted(set(wm.values())):
        tensors = load_file(d / shard)
        for k in [k for k, t in tensors.items() if t.dtype == torch.float8_e4m3fn]:
            scale_key = k[: -len(".weight")] + ".scale"
            if scale_key not in tensors or ".experts." in k:
                continue
            r, c = tensors[k].shape
            nr, nc = -(-r // bm), -(-c // bn)
            s = torch.rand(nr, nc, generator=gen) * 0.01 + 1e-3  # float32 scales (V3 style)
            q = (torch.randn(r, c, generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
            tensors[k], tensors[scale_key] = q, s
            want[k] = _block_dequant64(q, s, bm, bn)
        save_file(tensors, d / shard, metadata={"format": "pt"})
    assert want
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"]["weight_block_size"] = [bm, bn]
    (d / "config.json").write_text(json.dumps(cfg))
    check_model_dir(str(d), skip_tokenizer_init=True)
    got = load_state_dict(str(d), dtype=torch.float32, progress=False)
    names = {  # transformers' conversion_mapping renames (key deepseek_v4)
        "layers.1.attn.wq_b.weight": "model.layers.1.self_attn.q_b_proj.weight",
        "layers.0.attn.wq_a.weight": "model.layers.0.self_attn.q_a_proj.weight",
        "layers.2.attn.wo_b.weight": "model.layers.2.self_attn.o_b_proj.weight",
        "layers.3.ffn.shared_experts.w2.weight": "model.layers.3.mlp.shared_experts.down_proj.weight",
    }
    assert set(names) <= set(want)
    for official, hf in names.items():
        torch.testing.assert_close(got[hf].double(), want[official], rtol=2**-23, atol=0)
    cfg["quantization_config"]["weight_block_size"] = [128, 128]
    (d / "config.json").write_text(json.dumps(cfg))
    msg = _refusal(d)
    assert "FP8 block scale has shape" in msg and "with 128x128 blocks" in msg


def test_modelopt_export_with_hf_quant_config_json(base, tmp_path) -> None:
    """ModelOpt exports can carry their quantization in ``hf_quant_config.json`` only (config.json
    without ``quantization_config``); SGLang reads it from there, so it is refused by name."""
    d = _copy(base, "hf", tmp_path)
    _set_config(d, quantization_config=None)
    (d / "hf_quant_config.json").write_text(
        json.dumps(
            {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16}}
        )
    )
    msg = _refusal(d)
    assert f"{d / 'hf_quant_config.json'}: quantization.quant_algo 'NVFP4'" in msg


def test_per_tensor_fp8_scale_is_named(base, tmp_path) -> None:
    """vLLM-style FP8 (``weight_scale``, one number per tensor) is not block-scaled: refused naming
    the weight and the scale found instead of being read as unscaled e4m3 values."""
    d = _copy(base, "official", tmp_path)
    weight, scale = "layers.0.attn.wkv.weight", "layers.0.attn.wkv.scale"
    shard = d / _weight_map(d)[scale]
    tensors = load_file(shard)
    del tensors[scale]
    tensors["layers.0.attn.wkv.weight_scale"] = torch.tensor(0.01)
    save_file(tensors, shard, metadata={"format": "pt"})
    msg = _refusal(d)
    assert f"{weight}: F8_E4M3 weight without its block scale" in msg
    assert "found layers.0.attn.wkv.weight_scale, a per-tensor / per-channel scale" in msg


def test_missing_official_expert_names_it_and_its_shard(base, tmp_path) -> None:
    d = _copy(base, "official", tmp_path)
    key = "layers.2.ffn.experts.5.w3.weight"
    scale_shard = _edit_shard(d, key[: -len(".weight")] + ".scale", None)
    shard = _edit_shard(d, key, None)
    msg = _refusal(d)
    assert f"{shard} (where {INDEX} lists {key})" in msg and f"official expert tensor {key} is missing" in msg
    # the weight gone, its ue8m0 scale left: named as an orphan scale (not read as the weight)
    d = _copy(base, "official", tmp_path / "b")
    _edit_shard(d, key, None)
    scale = key[: -len(".weight")] + ".scale"
    scale_shard = d / scale_shard.name
    assert f"{scale_shard}: {scale}: scale tensor without its weight {key}" in _refusal(d)


def test_tokenizer_config_without_a_vocabulary(base, tmp_path) -> None:
    """``tokenizer_config.json`` but no ``tokenizer.json``: one line at start-up (the detokenizer
    and scheduler processes crashed with tracebacks before); ``--skip-tokenizer-init`` still starts."""
    d = _copy(base, "hf", tmp_path)
    (d / "tokenizer.json").unlink()
    assert (d / "tokenizer_config.json").exists()
    with pytest.raises(ValueError) as e:
        check_model_dir(str(d))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"tokenizer_path: cannot load a tokenizer from '{d}'"), msg
    assert "--skip-tokenizer-init" in msg
    check_model_dir(str(d), skip_tokenizer_init=True)


def test_official_and_hf_names_mixed_across_shards_name_the_files(base, tmp_path) -> None:
    d = _copy(base, "hf", tmp_path)
    off = _copy(base, "official", tmp_path)
    key = "layers.1.attn.attn_sink"
    extra = d / "model-00009-of-00009.safetensors"
    save_file({key: load_file(off / _weight_map(off)[key])[key]}, extra, metadata={"format": "pt"})
    index = json.loads((d / INDEX).read_text())
    index["weight_map"][key] = extra.name
    (d / INDEX).write_text(json.dumps(index))
    msg = _refusal(d)
    assert str(extra) in msg and "mixes official DeepSeek names" in msg and key in msg


@pytest.mark.parametrize("model_type", ["deepseek_v3", "deepseek_v32", "deepseek_v2"])
def test_other_deepseek_model_types_are_refused_by_name(base, tmp_path, model_type: str) -> None:
    d = _copy(base, "hf", tmp_path)
    _set_config(d, model_type=model_type)
    assert f"{d / 'config.json'} has model_type '{model_type}'" in _refusal(d)


@pytest.mark.parametrize(
    "fields,field",
    [
        (
            {"quantization_config": {"quant_algo": "NVFP4", "group_size": 16}},
            "quantization_config.quant_method",
        ),
        ({"quantization_config": {"weight_block_size": [128, 128]}}, "quantization_config.quant_method"),
        (
            {"compression_config": {"format": "float-quantized", "quant_method": "compressed-tensors"}},
            "compression_config",
        ),
    ],
    ids=["modelopt-without-quant-method", "no-quant-method", "compression-config"],
)
def test_quantization_blocks_sglang_reads_as_other_methods(base, tmp_path, fields, field) -> None:
    """A ``quantization_config`` without ``quant_method`` (SGLang parses it as ModelOpt's) and an
    older compressed-tensors ``compression_config`` were read as unquantized / DeepSeek FP8."""
    d = _copy(base, "hf", tmp_path)
    _set_config(d, **fields)
    assert f"{d / 'config.json'}: {field}: " in _refusal(d)


def test_bf16_checkpoint_with_the_fp8_quantization_config(base, tmp_path, caplog) -> None:
    """A bf16 conversion that kept the official ``quantization_config``: on the CPU the weights are
    read as stored (equal to safetensors' own reader); where the model keeps them quantized (CUDA,
    or ``--quantization fp8``) they are quantized on load (with scales: not the bare cast of the
    bf16 values into FP8 parameters a loader trusting the config would do), with one warning
    naming the checkpoint."""
    import logging

    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.layers.quantization import QuantConfig, resolve_quantization
    from sglang_v4.model_loader.builder import get_model

    d = _copy(base, "hf", tmp_path)
    qc = json.loads((base["official"] / "config.json").read_text())["quantization_config"]
    _set_config(d, quantization_config=qc)
    check_model_dir(str(d), skip_tokenizer_init=True)
    mc = ModelConfig.from_pretrained(str(d))
    assert resolve_quantization(None, mc.hf, "cpu") is None
    assert resolve_quantization(None, mc.hf, "cuda") == QuantConfig("fp8", None)
    key = "model.layers.1.self_attn.q_a_proj.weight"
    stored = load_file(d / _weight_map(d)[key])[key]
    model = get_model(mc, str(d), "cpu", torch.bfloat16)
    assert torch.equal(model.state_dict()[key], stored)
    assert not [r for r in caplog.records if "quantized on load" in r.getMessage()]
    with caplog.at_level(logging.WARNING):
        model = get_model(mc, str(d), "cpu", torch.bfloat16, quantization="fp8")
    q, s = model.state_dict()[key], model.state_dict()[key + "_scale_inv"]
    assert q.dtype == torch.float8_e4m3fn
    w = _block_dequant64(q, s, 128, 128)
    err = (w - stored.double()).abs()
    assert float((err / stored.double().abs().clamp_min(float(stored.abs().max()) * 2**-9)).max()) <= 2**-4
    assert any("quantized on load" in r.getMessage() and str(d) in r.getMessage() for r in caplog.records)


def test_hugging_face_cache_root_points_at_its_snapshot(base, tmp_path) -> None:
    """``--model-path ~/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash`` (the cache
    root of a repo, as ``hf download`` without ``--local-dir`` leaves it)."""
    root = tmp_path / "models--deepseek-ai--DeepSeek-V4-Flash"
    snap = root / "snapshots" / "553034d7dd9e06c2eeaee68cf85a17d6d4754cf0"
    shutil.copytree(base["hf"], snap)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(snap.name)
    msg = _refusal(root)
    assert "is a Hugging Face cache directory" in msg and f"pass --model-path {snap}" in msg
    check_model_dir(str(snap), skip_tokenizer_init=True)


def test_saved_rotary_tables_and_an_hf_prefixed_mtp_head_are_skipped(base, tmp_path, caplog) -> None:
    """Older exporters saved ``rotary_emb.inv_freq`` buffers (SGLang's and vLLM's loaders skip
    them); a conversion may keep the MTP head under ``model.mtp.``. Both are skipped: the tensors
    read are those of the checkpoint without them (safetensors' own reader)."""
    import logging

    from sglang_v4.model_loader import load_state_dict

    d = _copy(base, "hf", tmp_path)
    extra = d / "model-00009-of-00009.safetensors"
    added = {
        "model.rotary_emb.inv_freq": torch.rand(32),
        "model.layers.0.self_attn.rotary_emb.inv_freq": torch.rand(32),
        "model.mtp.0.enorm.weight": torch.ones(128),
    }
    save_file(added, extra, metadata={"format": "pt"})
    index = json.loads((d / INDEX).read_text())
    index["weight_map"].update({k: extra.name for k in added})
    (d / INDEX).write_text(json.dumps(index))
    check_model_dir(str(d), skip_tokenizer_init=True)
    with caplog.at_level(logging.INFO):
        got = load_state_dict(str(d), dtype=None, progress=False)
    want: dict[str, torch.Tensor] = {}
    for shard in sorted(set(_weight_map(base["hf"]).values())):
        want.update(load_file(base["hf"] / shard))
    assert set(got) == set(want)
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert any("2 saved rotary tables" in r.getMessage() for r in caplog.records)


def test_base_checkpoint_with_fp8_routed_experts(base, tmp_path) -> None:
    """``DeepSeek-V4-Flash-Base`` declares ``expert_dtype: fp8``: routed experts stored as e4m3 with
    128x128 ue8m0 block scales (vLLM #43416 read those scale bytes as floats: garbled output).
    Each expert reads as a float64 dequantization written here (scale byte b = 2 ** (b - 127)),
    and the model does not keep such experts as FP4."""
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.layers.quantization import resolve_quantization
    from sglang_v4.model_loader import load_state_dict
    from sglang_v4.model_loader.quant import quantize_fp8_block

    d = _copy(base, "official", tmp_path)
    gen = torch.Generator().manual_seed(5)
    want: dict[str, torch.Tensor] = {}
    for shard in sorted(set(_weight_map(d).values())):
        tensors = load_file(d / shard)
        for k in [k for k in tensors if ".ffn.experts." in k and k.endswith(".weight")]:
            r, c2 = tensors[k].shape
            w = torch.randn(r, 2 * c2, generator=gen) * 0.05
            q, s = quantize_fp8_block(w, (128, 128), torch.float8_e8m0fnu)
            tensors[k], tensors[k[: -len(".weight")] + ".scale"] = q, s
            s64 = torch.pow(2.0, s.view(torch.uint8).to(torch.float64) - 127)
            want[k] = (
                q.to(torch.float64) * s64.repeat_interleave(128, 0)[:r].repeat_interleave(128, 1)[:, : 2 * c2]
            )
        save_file(tensors, d / shard, metadata={"format": "pt"})
    _set_config(d, expert_dtype="fp8")
    check_model_dir(str(d), skip_tokenizer_init=True)
    mc = ModelConfig.from_pretrained(str(d))
    for flag in (None, "fp8"):
        assert resolve_quantization(flag, mc.hf, "cuda").experts is None
    got = load_state_dict(str(d), dtype=torch.float32, progress=False)
    gate_up = got["model.layers.1.mlp.experts.gate_up_proj"].double()
    down = got["model.layers.1.mlp.experts.down_proj"].double()
    for e in (0, 3):
        w1, w3 = want[f"layers.1.ffn.experts.{e}.w1.weight"], want[f"layers.1.ffn.experts.{e}.w3.weight"]
        torch.testing.assert_close(gate_up[e], torch.cat([w1, w3]), rtol=2**-23, atol=0)
        torch.testing.assert_close(down[e], want[f"layers.1.ffn.experts.{e}.w2.weight"], rtol=2**-23, atol=0)

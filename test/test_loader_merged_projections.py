"""Merged input projections (one GEMM per group of linears reading the same input).

The attention's ``q_a_proj`` / ``kv_proj`` (plus, unquantized, the compressor's ``kv_proj`` /
``gate_proj``), each compressor's ``kv_proj`` / ``gate_proj`` and the indexer's ``kv_proj`` /
``gate_proj`` / ``scorer.weights_proj`` are row slices of one tensor per group. Checked here: the
loaders (official checkpoints, FP8 as published and bf16, HF state dicts, dummy weights) fill the
merged tensors through the unchanged names; a merged GEMM's outputs equal each projection computed
on its own (float64 from the weights, dequantized for FP8, as the oracle); FP8 groups whose sizes
are not multiples of the 128-row scale block stay separate; and a whole model's logits equal those
of the same weights with every group split back into separate tensors (the code before the merge).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from dsv4_testutil import CONFIGS, Driver, Twin, random_ids
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset
from sglang_v4.layers.attention import DSV4Attention
from sglang_v4.layers.linear import Linear, MergedLinear
from sglang_v4.layers.quantization import FP8_BLOCK, QuantConfig
from sglang_v4.model_loader.dummy import init_dummy_weights
from sglang_v4.model_loader.loader import load_weights_into
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.tools.make_checkpoint import make_random_state_dict, write_checkpoint

SL, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"


def _cfg(q_lora_rank: int = 128) -> dict:
    """``sliding_first`` (SL, CSA, HCA, CSA) with a ``q_lora_rank`` of choice (128: FP8-mergeable)."""
    cfg = copy.deepcopy(CONFIGS["sliding_first"])
    cfg["q_lora_rank"] = q_lora_rank
    return cfg


def _groups(model: DeepseekV4ForCausalLM) -> list[tuple[str, MergedLinear | None, list[Linear]]]:
    """Every group of linears that read one input, with its merge (``None``: not merged)."""
    out = []
    for i, layer in enumerate(model.model.layers):
        a = layer.self_attn
        out.append((f"{i}.attn", a._qkv_a, [a.q_a_proj, a.kv_proj]))
        comp = a.compressor
        if comp is not None:
            out.append((f"{i}.comp", comp._merged, [comp.kv_proj, comp.gate_proj]))
            ix = getattr(comp, "indexer", None)
            if ix is not None:
                out.append((f"{i}.indexer", ix._merged, [ix.kv_proj, ix.gate_proj, ix.scorer.weights_proj]))
    return out


def _real_weight(m: Linear) -> torch.Tensor:
    """``[out, in]`` float64 weight (FP8: times its 128x128 block scales), the oracle's matrix."""
    w = m.weight.double()
    if m.quant == "fp8":
        s = m.weight_scale_inv.double()
        s = s.repeat_interleave(FP8_BLOCK[0], 0)[: w.shape[0]].repeat_interleave(FP8_BLOCK[1], 1)
        w = w * s[:, : w.shape[1]]
    return w


def _check_groups(model: DeepseekV4ForCausalLM, fp8_q: bool) -> None:
    """Expected merges, merged tensors filled by the loader, merged outputs = separate outputs."""
    gen = torch.Generator().manual_seed(5)
    D = model.mc.hidden_size
    x = torch.randn(6, D, generator=gen)
    n_merged = 0
    for name, merged, layers in _groups(model):
        a_layer = name.endswith(".attn")
        comp_in_attn = False
        if a_layer:
            attn: DSV4Attention = model.model.layers[int(name.split(".")[0])].self_attn
            comp_in_attn = attn.compressor is not None and not fp8_q
            want = layers + ([attn.compressor.kv_proj, attn.compressor.gate_proj] if comp_in_attn else [])
        else:
            want = layers
        if name.endswith(".comp") and not fp8_q:
            assert merged is None, f"{name}: merged into the attention's GEMM, not its own"
            continue
        assert merged is not None, name
        assert merged.layers == want, name
        assert merged.is_aliased(), name
        n_merged += 1
        assert torch.equal(
            merged.weight.view(torch.uint8), torch.cat([m.weight for m in want]).view(torch.uint8)
        ), name
        assert merged.weight.float().abs().sum() > 0, f"{name}: merged weight left unfilled"
        if merged.scale is not None:
            assert torch.equal(merged.scale, torch.cat([m.weight_scale_inv for m in want])), name
        outs = merged(x)
        for m, y in zip(want, outs):
            oracle = F.linear(x.double(), _real_weight(m))
            assert y.shape == (x.shape[0], m.out_features) and y.stride(-1) == 1
            assert torch.allclose(y.double(), oracle, rtol=1e-4, atol=1e-4), name
            assert torch.equal(y, m(x)), f"{name}: merged != the layer's own forward"
    assert n_merged >= 4


@pytest.mark.parametrize("weights,quant", [
    ("fp8", QuantConfig()),  # FP8 kept: q_a | kv merged with their 128-row scale blocks
    ("fp8", None),  # dequantized at load: all bf16-format groups, compressor joins the attention
    ("bf16", None),
])  # fmt: skip
def test_checkpoint_fills_the_merged_projections(tmp_path, weights: str, quant) -> None:
    full = ModelConfig.from_dict(_cfg()).to_dict()
    path = write_checkpoint(str(tmp_path / "ck"), fmt="official", weights=weights, seed=3, config_dict=full)
    model = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(path), torch.float32, "cpu", quant)
    names = set(model.state_dict())
    for n in ("q_a_proj", "kv_proj", "compressor.kv_proj", "compressor.indexer.scorer.weights_proj"):
        assert f"model.layers.1.self_attn.{n}.weight" in names
    assert not any("_merged" in n or "_qkv_a" in n for n in names)
    load_weights_into(model, path, progress=False)
    _check_groups(model, fp8_q=quant is not None)


def test_dummy_weights_fill_the_merged_projections() -> None:
    model = DeepseekV4ForCausalLM(ModelConfig.from_dict(_cfg()), torch.float32, "cpu", QuantConfig())
    init_dummy_weights(model, seed=0)
    _check_groups(model, fp8_q=True)


@pytest.mark.parametrize("hf_name,row0", [
    ("model.layers.1.self_attn.kv_proj.weight", 128),  # after q_a's 128 rows
    ("model.layers.1.self_attn.compressor.gate_proj.weight", 128 + 128 + 256),
    ("model.layers.1.self_attn.compressor.indexer.scorer.weights_proj.weight", 2 * 128),
    ("model.layers.2.self_attn.compressor.kv_proj.weight", 128 + 128),
])  # fmt: skip
def test_a_parameter_loaded_by_its_hf_name_changes_the_merged_weight(hf_name: str, row0: int) -> None:
    cfg = _cfg()
    model = DeepseekV4ForCausalLM(ModelConfig.from_dict(cfg))
    state = make_random_state_dict(copy.deepcopy(cfg), seed=1)
    model.load_state_dict(state, strict=True)
    layer = model.model.layers[int(hf_name.split(".")[2])].self_attn
    merged = layer.compressor.indexer._merged if ".indexer." in hf_name else layer._qkv_a
    new = torch.randn(state[hf_name].shape, generator=torch.Generator().manual_seed(9))
    before = merged.weight.clone()
    model.load_state_dict({hf_name: new}, strict=False)
    n = new.shape[0]
    assert torch.equal(merged.weight[row0 : row0 + n], new)
    assert torch.equal(merged.weight[:row0], before[:row0])
    assert torch.equal(merged.weight[row0 + n :], before[row0 + n :])
    x = torch.randn(3, cfg["hidden_size"], generator=torch.Generator().manual_seed(2))
    idx = [m.weight.data_ptr() for m in merged.layers].index(merged.weight[row0].data_ptr())
    assert torch.allclose(merged(x)[idx].double(), x.double() @ new.double().T, atol=1e-5)


def test_fp8_groups_off_the_scale_block_stay_separate() -> None:
    """The tiny preset's ``q_lora_rank`` (64) is not a multiple of 128: with FP8 the attention keeps
    two GEMMs; the bf16 compressor / indexer groups still merge."""
    mc = ModelConfig.from_dict(get_preset("tiny"))
    model = DeepseekV4ForCausalLM(mc, torch.float32, "cpu", QuantConfig())
    init_dummy_weights(model, seed=0)
    seen = set()
    for layer in model.model.layers:
        a = layer.self_attn
        assert a._qkv_a is None
        assert not MergedLinear.can_merge([a.q_a_proj, a.kv_proj])
        if a.compressor is not None:
            assert a.compressor._merged is not None
            seen.add(a.layer_type)
    assert seen == {CSA, HCA}
    with pytest.raises(ValueError, match="multiple of 128"):
        MergedLinear([a.q_a_proj, a.kv_proj])


def test_reallocated_slices_fall_back_to_separate_gemms() -> None:
    """A weight replaced after construction (no longer a slice of the merged tensor) is still used."""
    layers = [Linear(32, n, torch.float32, "cpu") for n in (16, 8, 4)]
    merged = MergedLinear(layers)
    gen = torch.Generator().manual_seed(0)
    for m in layers:
        m.weight.copy_(torch.randn(m.weight.shape, generator=gen))
    x = torch.randn(5, 32, generator=gen)
    assert merged.is_aliased()
    layers[1].weight = torch.nn.Parameter(layers[1].weight * 2, requires_grad=False)
    assert not merged.is_aliased()
    got = merged(x)
    assert torch.allclose(got[1].double(), x.double() @ (layers[1].weight.double()).T, atol=1e-5)
    assert torch.equal(merged.gemm(x), torch.cat([m(x) for m in layers], dim=-1))


def _split_back(model: DeepseekV4ForCausalLM) -> None:
    """Give every merged linear its own tensor again (the layout before the merge)."""
    for _, merged, _ in _groups(model):
        if merged is None:
            continue
        for m in merged.layers:
            m.weight = torch.nn.Parameter(m.weight.clone(), requires_grad=False)
            if m.quant == "fp8":
                m.weight_scale_inv = m.weight_scale_inv.clone()
        assert not merged.is_aliased()


@pytest.mark.parametrize("name", ["sliding_first", "hca_first_yarn"])
def test_model_logits_equal_the_unmerged_model(name: str) -> None:
    """Prefill 300 tokens (CSA and HCA windows complete) then 3 decode steps: the merged model's
    log-probs equal those of the same weights multiplied one projection at a time."""
    cfg = copy.deepcopy(CONFIGS[name])
    mc = ModelConfig.from_dict(copy.deepcopy(cfg))
    state = make_random_state_dict(copy.deepcopy(cfg), seed=4)
    runs = []
    for split in (False, True):
        model = DeepseekV4ForCausalLM(mc)
        model.load_state_dict(state, strict=True)
        if split:
            _split_back(model)
        drv = Driver(Twin(name, cfg, mc, None, model))  # type: ignore[arg-type]
        slot = drv.new_req()
        ids = random_ids(300, seed=7)
        outs = [drv.step([(slot, ids)])[0]]
        for t in range(3):
            outs.append(drv.step([(slot, [int(outs[-1][-1].argmax()) + t])])[0])
        runs.append(torch.cat(outs))
    assert torch.allclose(runs[0], runs[1], rtol=0, atol=1e-5), (runs[0] - runs[1]).abs().max()

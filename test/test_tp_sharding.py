"""Per-rank weights: what each rank loads (or generates) is exactly its part of the one-rank model.

Oracle: the whole model loaded on one rank, cut by :class:`TensorShard.cut` (plain narrow + cat),
compared in float64 after dequantization (FP8 blocks, FP4 groups); replicated tensors are equal.
"""

from __future__ import annotations

import copy

import pytest
import torch
from quant_testutil import state_dict64
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup
from sglang_v4.layers.quantization import QuantConfig
from sglang_v4.model_loader.dummy import init_dummy_weights
from sglang_v4.model_loader.weight_loader import load_weights_into
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.tools.make_checkpoint import write_checkpoint
from tp_testutil import TP_CONFIG

LAYOUTS = [(2, 0, 1), (2, 1, 1), (2, 1, 2), (4, 3, 2), (4, 2, 4)]  # (tp, rank, ep)


def _model(
    mc: ModelConfig, quant: QuantConfig | None, layout: tuple[int, int, int] | None
) -> DeepseekV4ForCausalLM:
    tp = TPGroup(ParallelConfig(layout[0], layout[1], layout[2])) if layout else None
    return DeepseekV4ForCausalLM(mc, torch.float32, "cpu", quant, tp)


def _assert_rank_is_cut(full: DeepseekV4ForCausalLM, rank: DeepseekV4ForCausalLM) -> None:
    whole, mine = state_dict64(full.state_dict()), state_dict64(rank.state_dict())
    shards = rank.weight_shards()
    assert shards, "a TP layout must split something"
    for k, v in mine.items():
        want = shards[k].cut(whole[k]) if k in shards else whole[k]
        assert v.shape == want.shape and torch.equal(v, want), k


@pytest.fixture(scope="module", params=["official-fp8", "hf-fp32"])
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bool]:
    fmt, weights = request.param.split("-")
    d = tmp_path_factory.mktemp(f"shard_{fmt}")
    cfg = ModelConfig.from_dict(copy.deepcopy(TP_CONFIG)).to_dict()
    path = write_checkpoint(str(d), fmt=fmt, weights=weights, seed=3, config_dict=cfg)
    return path, weights == "fp8"


@pytest.mark.parametrize("layout", LAYOUTS, ids=[f"tp{t}r{r}ep{e}" for t, r, e in LAYOUTS])
def test_loaded_shard_is_the_cut_of_the_whole(checkpoint: tuple[str, bool], layout: tuple) -> None:
    path, fp8 = checkpoint
    mc = ModelConfig.from_pretrained(path)
    quant = QuantConfig() if fp8 else None  # keep the published FP8 / FP4 formats on the CPU
    full = _model(mc, quant, None)
    load_weights_into(full, path, progress=False)
    rank = _model(mc, quant, layout)
    load_weights_into(rank, path, progress=False)
    _assert_rank_is_cut(full, rank)


@pytest.mark.parametrize("quant", [None, QuantConfig()], ids=["fp32", "fp8-fp4"])
@pytest.mark.parametrize("layout", LAYOUTS[1:4], ids=[f"tp{t}r{r}ep{e}" for t, r, e in LAYOUTS[1:4]])
def test_dummy_shard_is_the_cut_of_the_whole(quant: QuantConfig | None, layout: tuple) -> None:
    mc = ModelConfig.from_dict(copy.deepcopy(TP_CONFIG))
    full, rank = _model(mc, quant, None), _model(mc, quant, layout)
    init_dummy_weights(full, seed=9)
    init_dummy_weights(rank, seed=9)
    _assert_rank_is_cut(full, rank)


def test_split_breaking_an_fp8_block_is_refused(tmp_path: pytest.TempPathFactory) -> None:
    """o_a_proj has 4 groups x 48 rows = 192: rank 1 of 2 would start at row 96, inside the
    first 128x128 block while also reaching into the second."""
    cfg = ModelConfig.from_dict(dict(copy.deepcopy(TP_CONFIG), o_lora_rank=48)).to_dict()
    path = write_checkpoint(str(tmp_path), fmt="official", weights="fp8", seed=1, config_dict=cfg)
    mc = ModelConfig.from_pretrained(path)
    rank = _model(mc, QuantConfig(), (2, 1, 1))
    with pytest.raises(ValueError, match=r"o_a_proj\.weight.*break a 128x128 block"):
        load_weights_into(rank, path, progress=False)
    plain = _model(mc, None, (2, 1, 1))  # dequantized at load: any split works
    load_weights_into(plain, path, progress=False)


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(tp_size=2, ep_size=3), "ep_size"),
        (dict(tp_size=3), "o_groups"),
        (dict(tp_size=4, ep_size=4, tp_rank=1, n_experts=6), "n_routed_experts"),
    ],
)
def test_layouts_that_cannot_split_the_model_are_refused(kw: dict, field: str) -> None:
    cfg = copy.deepcopy(TP_CONFIG)
    if "n_experts" in kw:
        cfg["n_routed_experts"] = kw.pop("n_experts")
    with pytest.raises(ValueError, match=field):
        pc = ParallelConfig(kw.get("tp_size", 1), kw.get("tp_rank", 0), kw.get("ep_size", 1))
        DeepseekV4ForCausalLM(ModelConfig.from_dict(cfg), torch.float32, "meta", None, TPGroup(pc))

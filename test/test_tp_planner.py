"""Per-GPU planning of TP / EP layouts (``kv_planner --tp-size``): V4-Flash at TP 2 (2 x H200) and
TP 4, V4-Pro at TP 8.

Oracle for the weights: the one-rank model's bytes (meta device) split by hand: the tensors a
layout splits are divided evenly over the ranks, every other tensor is held by every rank.
"""

from __future__ import annotations

import pytest
import torch
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset
from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup
from sglang_v4.layers.quantization import QuantConfig
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.tools.kv_planner import main, per_gpu_plan

pytestmark = pytest.mark.slow
GiB = 2**30


def _by_hand(mc: ModelConfig, tp: int, ep: int) -> tuple[int, int]:
    """(bytes per GPU, bytes held by every GPU) from the whole model's tensors."""
    with torch.device("meta"):
        whole = DeepseekV4ForCausalLM(mc, torch.bfloat16, "meta", QuantConfig())
        rank = DeepseekV4ForCausalLM(
            mc, torch.bfloat16, "meta", QuantConfig(), TPGroup(ParallelConfig(tp, 0, ep))
        )
    split = set(rank.weight_shards())
    shared = sharded = 0
    for k, t in whole.state_dict().items():
        b = t.numel() * t.element_size()
        if k in split or k.removesuffix("_scale_inv") in split:
            sharded += b
        else:
            shared += b
    assert sharded % tp == 0
    return shared + sharded // tp, shared


@pytest.mark.parametrize("preset, tp, ep", [("flash", 2, 2), ("flash", 4, 1), ("pro", 8, 8)])
def test_per_gpu_weights_and_kv(preset: str, tp: int, ep: int, capsys: pytest.CaptureFixture) -> None:
    mc = ModelConfig.from_dict(get_preset(preset))
    r = per_gpu_plan(mc, tp, ep, "fp8_e4m3", True, 8192)
    per_gpu, shared = _by_hand(mc, tp, ep)
    assert r["weight_bytes_per_gpu"] == per_gpu
    assert r["replicated_weight_bytes"] == shared
    assert r["weight_bytes_all_gpus"] == tp * per_gpu
    budget = int(r["gpu_memory_bytes"] * r["mem_fraction"]) - per_gpu
    assert r["kv_budget_bytes_per_gpu"] == budget > 0
    assert 0 < r["plan"]["total_bytes"] <= budget
    assert r["max_concurrency"] > 0
    print(
        f"\n{preset} TP {tp} EP {ep}: weights {per_gpu / GiB:.2f} GiB/GPU, KV {r['plan']['total_bytes'] / GiB:.2f} GiB/GPU"
    )


def test_cli_prints_the_per_gpu_account(capsys: pytest.CaptureFixture) -> None:
    assert main(["--preset", "flash", "--tp-size", "2", "--ep-size", "2", "--context-length", "8192"]) == 0
    out = capsys.readouterr().out
    assert "per GPU at --tp-size 2 --ep-size 2" in out and "weights:" in out and "KV pools:" in out
    assert main(["--preset", "flash", "--tp-size", "3"]) == 2  # 8 output groups do not split in 3


def test_indexer_tradeoff_bytes() -> None:
    """The figures of docs/PARALLELISM.md for V4-Flash at TP 2: 21 CSA layers; q_b 8192 x 1024
    FP8 (+ 64 x 8 fp32 block scales) and weights_proj 64 x 4096 bf16 per layer, half of it extra
    per GPU when replicated; split heads: an fp32 all-reduce of context / 4 scores per token."""
    from sglang_v4.tools.kv_planner import indexer_tradeoff

    mc = ModelConfig.from_dict(get_preset("flash"))
    r = indexer_tradeoff(mc, 2, 1, 8192)
    per_layer = 8192 * 1024 + 64 * 8 * 4 + 2 * 64 * 4096
    assert r["csa_layers"] == 21
    assert r["replicated_extra_weight_bytes_per_gpu"] == 21 * per_layer // 2  # ~94 MB
    assert r["split_allreduce_bytes_per_layer"] == 2048 * 4  # 8 KB at batch 1, 8k context
    assert indexer_tradeoff(mc, 2, 1, 1 << 20)["split_allreduce_bytes_per_layer"] == 1 << 20

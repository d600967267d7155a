"""A thirty-second set of public reports on tensor / expert / data parallelism: TP ranks whose
sharded attention, MoE and vocabulary-parallel LM head must give the one-rank logits, every rank's
greedy tokens agreeing, EP ranks that must hold their own experts (not the first shard twice), a
vocabulary the TP size does not divide, and pure data parallelism that must not shard the model.

Fixture: one module-scoped tiny model (``tp_testutil.TP_CONFIG``: every attention kind, a hash-routed
and three score-routed MoE layers, a 1000-token vocabulary) with random fp32 weights. Its TP ranks
run as threads of this process (``tp_thread_testutil``: collectives meet at a barrier, sums and
concatenations in rank order, as ``torch.distributed`` does them), each rank built with its layout
and loaded with its cut of the full tensors; no ranks are spawned.

Oracles: the same model on one rank (``tp_size=1``; tied to HF transformers by the parity tests)
run through the same batches; slices of the full checkpoint tensors taken by hand; hand-derived
divisors of the model's dimensions; SGLang's documented meaning of ``--dp-size`` (whole replicas).
"""

from __future__ import annotations

import copy
import dataclasses
import re

import pytest
import torch
from dsv4_testutil import Driver, Twin, random_ids
from sglang_flags_testutil import parse
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup, check_parallel_layout
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.tools.make_checkpoint import make_random_state_dict
from tp_testutil import TP_CONFIG
from tp_thread_testutil import rank_models, run_ranks
from transformers import DeepseekV4Config

pytestmark = pytest.mark.timeout(120)

#: fp32 reassociation of the sharded sums (the same bound as the multi-process TP parity tests)
LP_TOL = 2e-4
IDS = random_ids(40, seed=21, vocab=1000)
VOCAB = TP_CONFIG["vocab_size"]


@pytest.fixture(scope="module")
def one_rank() -> Twin:
    """The model on one rank (the oracle), with the full state dict it was loaded from."""
    cfg = copy.deepcopy(TP_CONFIG)
    mc = ModelConfig.from_dict(copy.deepcopy(cfg))
    state = make_random_state_dict(copy.deepcopy(cfg), seed=9)
    model = DeepseekV4ForCausalLM(mc)
    model.load_state_dict(state, strict=True)
    return Twin("tp", cfg, mc, None, model, state)  # type: ignore[arg-type]


def _driver(twin: Twin, model: DeepseekV4ForCausalLM | None = None) -> Driver:
    t = twin if model is None else dataclasses.replace(twin, ours=model)
    return Driver(t, num_block_pages=4, num_window_pages=8, max_reqs=2, page_size=128)


@pytest.fixture(scope="module")
def oracle_lp(one_rank: Twin) -> torch.Tensor:
    """``[40, 1000]`` one-rank log-probabilities of ``IDS`` (one prefill)."""
    return _driver(one_rank).run_chunked(IDS, 1 << 30)


@pytest.mark.parametrize("tp, ep", [(2, 1), (4, 2)], ids=["tp2", "tp4-ep2"])
def test_megatron_lm_1754_tp_ranks_give_the_one_rank_logprobs(
    one_rank: Twin, oracle_lp: torch.Tensor, tp: int, ep: int
) -> None:
    """NVIDIA/Megatron-LM#1754 (tensor parallelism gave results far from the single-GPU run, not a
    reassociation-sized difference): the model split over ``tp`` ranks (heads, output groups,
    shared-expert slices, experts over ``ep`` shards sliced ``tp / ep`` ways, LM-head vocabulary
    rows), run in 16-token prefill chunks, gives on EVERY rank the one-rank log-probabilities of all
    40 positions within fp32 reassociation, and the ranks agree with each other exactly."""
    drivers = [_driver(one_rank, m) for m in rank_models(one_rank.mc, one_rank.state, tp, ep)]
    outs = run_ranks([lambda d=d: d.run_chunked(IDS, 16) for d in drivers])
    for r, lp in enumerate(outs):
        assert lp.shape == oracle_lp.shape, r
        err = (lp - oracle_lp).abs().max().item()
        assert err <= LP_TOL, (r, err)
        assert torch.equal(lp, outs[0]), f"rank {r} differs from rank 0"


def test_megatron_bridge_4780_gathered_logits_cover_the_global_vocabulary(
    one_rank: Twin, oracle_lp: torch.Tensor
) -> None:
    """NVIDIA-NeMo/Megatron-Bridge#4780 (with TP > 1 each rank sampled from its own vocabulary
    shard, treating local indices as global token ids): with two ranks each holding 500 LM-head
    rows, the logits every rank samples from span all 1000 tokens in global order, so the greedy
    tokens -- prefill then 12 decode steps, each rank feeding back its own choice -- are the
    one-rank tokens on every rank (rank-consistent), including tokens of rank 1's half
    (ids >= 500), which a rank-local argmax could never return."""
    want = _driver(one_rank).greedy(IDS, 12)
    drivers = [_driver(one_rank, m) for m in rank_models(one_rank.mc, one_rank.state, 2)]
    got = run_ranks([lambda d=d: d.greedy(IDS, 12) for d in drivers])
    assert got == [want, want]
    top = oracle_lp.argmax(-1).tolist() + want
    assert any(t >= VOCAB // 2 for t in top) and any(t < VOCAB // 2 for t in top), top


def test_deepspeed_6589_each_ep_rank_holds_its_own_experts(one_rank: Twin) -> None:
    """deepspeedai/DeepSpeed#6589 (with 60 experts over two expert-parallel ranks, both ranks
    loaded the first 30): for ``--tp-size 2 --ep-size 2`` on 4 experts, rank ``r``'s routed experts
    of every MoE layer are the checkpoint's experts ``2r, 2r+1`` (sliced by hand from the full
    tensors), whole, with the shared expert split by rows; the two ranks hold different experts."""
    ranks = rank_models(one_rank.mc, one_rank.state, 2, 2)
    n_layers = one_rank.mc.hf.num_hidden_layers
    for i in range(n_layers):
        for name in ("gate_up_proj", "down_proj"):
            key = f"model.layers.{i}.mlp.experts.{name}"
            full = one_rank.state[key]
            held = [dict(m.state_dict())[key] for m in ranks]
            for r, t in enumerate(held):
                assert torch.equal(t, full[2 * r : 2 * r + 2]), (key, r)
            assert not torch.equal(held[0], held[1]), key
        key = f"model.layers.{i}.mlp.shared_experts.gate_proj.weight"
        full = one_rank.state[key]
        half = full.shape[0] // 2
        for r, m in enumerate(ranks):
            assert torch.equal(dict(m.state_dict())[key], full[r * half : (r + 1) * half]), (key, r)


def _listed_tp_sizes(message: str) -> list[int]:
    m = re.search(r"--tp-size values that split it[^:]*: \[([0-9, ]*)\]", message)
    assert m, message
    return [int(v) for v in m.group(1).split(",")]


def test_vllm_578_vocab_not_divisible_by_tp_is_refused_naming_vocab_and_sizes_that_work() -> None:
    """vllm-project/vllm#578 and vllm-project/vllm#440 (a 49954-token vocabulary on 16 GPUs failed
    with a bare "not divisible" assertion from inside a rank): the layout check refuses ``--tp-size
    16`` before any rank starts, naming ``tp_size`` and ``vocab_size (49954)``, and lists exactly the
    TP sizes (up to 256) dividing every split dimension -- 49954 = 2 x 24977 leaves ``[1, 2]`` --;
    a rank model built with such a layout raises ValueError naming the vocabulary too, and the
    listed size 2 builds."""
    dims = dict(
        hidden_size=512,
        num_attention_heads=64,
        o_groups=16,
        vocab_size=49954,
        moe_intermediate_size=2048,
        n_routed_experts=16,
        num_hidden_layers=1,
    )
    hf = DeepseekV4Config(**dims)
    with pytest.raises(ValueError) as exc:
        check_parallel_layout(hf, 16, 1)
    msg = str(exc.value)
    assert msg.startswith("tp_size") and "vocab_size (49954)" in msg
    want = [t for t in range(1, 257) if all(d % t == 0 for d in (64, 16, 49954, 2048))]
    assert _listed_tp_sizes(msg) == want == [1, 2]
    check_parallel_layout(hf, 2, 1)

    cfg = copy.deepcopy(TP_CONFIG)
    cfg["vocab_size"] = 999  # odd: no split over 2 ranks
    mc = ModelConfig.from_dict(cfg)
    with pytest.raises(ValueError, match=r"vocab_size.*999"):
        DeepseekV4ForCausalLM(mc, torch.float32, "meta", None, TPGroup(ParallelConfig(2, 1)))


@pytest.mark.parametrize("cmd", ["--dp 2", "--dp 4 --tp 2"])
def test_vllm_51130_pure_dp_keeps_whole_replicas_and_ep_ranges_tile_the_experts(cmd: str) -> None:
    """vllm-project/vllm#51130 (pure data parallelism folded the DP size into the MoE's tensor
    split, halving each replica's experts, and DP + EP passed an expert range's bounds reversed,
    giving empty ``[16:0]`` slices): ``--dp N`` leaves each replica's TP group at ``--tp-size``
    with no expert split (``ep_size 1``), so a rank keeps every expert and its ``1 / tp`` slice of
    each; and over every ``--ep-size`` dividing ``--tp-size`` (64 experts), each rank's expert
    range is non-empty and ascending, and the ranks sharing an EP shard together tile
    ``[0, 64)`` in order."""
    sa = parse(cmd)
    tp = int(cmd.split("--tp ")[1]) if "--tp " in cmd else 1
    assert (sa.tp_size, sa.ep_size, sa.dp_size) == (tp, 1, int(cmd.split()[1]))
    for rank in range(sa.tp_size):
        pc = ParallelConfig(sa.tp_size, rank, sa.ep_size)
        assert pc.expert_range(64) == (0, 64)
        assert pc.moe_inter_range(2048) == (rank * 2048 // tp, (rank + 1) * 2048 // tp)
    for ep in (1, 2, 4, 8):
        shards = []
        for rank in range(8):
            s, e = ParallelConfig(8, rank, ep).expert_range(64)
            assert 0 <= s < e <= 64 and e - s == 64 // ep, (ep, rank, s, e)
            if rank % (8 // ep) == 0:
                shards.append((s, e))
        assert [x for s, e in shards for x in range(s, e)] == list(range(64)), ep

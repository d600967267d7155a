"""A twenty-seventh set of public reports on the tensor / expert / data-parallel layout: a
``--tp-size`` the attention heads cannot be split by, an ``--ep-size`` above the number of routed
experts, expert parallelism narrower than the TP group, and SGLang's ``--enable-dp-attention``
with a DP size below (or equal to one with) the TP size, all checked on one CPU without starting
ranks (each test names its report).

Fault found here and fixed: an ``--ep-size`` the routed experts cannot be split by (``--tp-size 8
--ep-size 8`` for 4 experts) was refused with no size that works (the hint only listed TP sizes
for the same EP size, and there were none); the error now lists the ``--ep-size`` values that
split the model at that ``--tp-size``.

Oracles: hand-derived divisors of the model's dimensions (the DeepSeek-V4-Flash shapes: 64 heads,
8 output groups, 2048-wide experts, a 129280-token vocabulary); a hand-built ownership table of
every (expert, intermediate slice) pair over the ranks; SGLang's documented meaning of
``--dp-size`` with ``--enable-dp-attention`` (attention split inside the ``--tp-size`` group, one
server).
"""

from __future__ import annotations

import math
import re

import pytest
from sglang_flags_testutil import parse
from sglang_v4.distributed.parallel_state import ParallelConfig, check_parallel_layout
from transformers import DeepseekV4Config

pytestmark = pytest.mark.timeout(60)

#: DeepSeek-V4-Flash's split dimensions (only these matter for the layout checks)
FLASH = dict(
    hidden_size=4096,
    num_attention_heads=64,
    o_groups=8,
    vocab_size=129280,
    moe_intermediate_size=2048,
    n_routed_experts=256,
    num_hidden_layers=2,
)


def _hf(**overrides: int) -> DeepseekV4Config:
    return DeepseekV4Config(**{**FLASH, **overrides})


def _listed(message: str, flag: str) -> list[int]:
    """The sizes an error lists after ``"<flag> values that split it"``."""
    m = re.search(re.escape(flag) + r" values that split it[^:]*: \[([0-9, ]*)\]", message)
    assert m, message
    return [int(v) for v in m.group(1).split(",")]


# ---------------------------------------------------------------------------------------------
# --tp-size / --ep-size the model cannot be split by (vllm-project/vllm#52535,
# deepspeedai/DeepSpeed#7551, ai-dynamo/aiconfigurator#684)
# ---------------------------------------------------------------------------------------------


def test_vllm_52535_tp_size_3_for_64_heads_is_refused_with_the_sizes_that_work() -> None:
    """vllm-project/vllm#52535 (serving DeepSeek-V4-Flash with ``--tensor-parallel-size 3`` failed
    with "64 heads must be divisible by 3" and no size to use instead; the error should explain and
    list the valid TP sizes): ``--tp-size 3`` on Flash's shapes is refused naming ``tp_size`` and
    lists exactly the sizes dividing every split dimension -- the divisors of
    ``gcd(64, 8, 2048, 129280) = 8``: ``[1, 2, 4, 8]`` --, and one rank's share of 64 heads over 3
    ranks is refused too."""
    with pytest.raises(ValueError) as exc:
        check_parallel_layout(_hf(), 3, 1)
    msg = str(exc.value)
    assert msg.startswith("tp_size") and "--tp-size 3" in msg
    g = math.gcd(64, 8, 2048, 129280)
    assert _listed(msg, "--tp-size") == [t for t in range(1, g + 1) if g % t == 0] == [1, 2, 4, 8]
    for t in (1, 2, 4, 8):
        check_parallel_layout(_hf(), t, 1)  # every listed size is accepted
    with pytest.raises(ValueError, match="64"):
        ParallelConfig(tp_size=3, tp_rank=0).tp_range(64, "num_attention_heads")


def test_deepspeed_7551_ep_size_above_the_expert_count_is_refused_with_ep_sizes_that_work() -> None:
    """deepspeedai/DeepSpeed#7551 (an expert-parallel group size larger than the experts it splits
    gave invalid groups; such a configuration must be caught with a clear error): ``--tp-size 8
    --ep-size 8`` for a model of 4 routed experts is refused naming ``ep_size``, and the error lists
    the ``--ep-size`` values that work with ``--tp-size 8`` -- those dividing both 8 and 4 (the
    2048-wide experts split over ``8 / ep`` ranks either way): ``[1, 2, 4]``."""
    hf = _hf(n_routed_experts=4)
    with pytest.raises(ValueError) as exc:
        check_parallel_layout(hf, 8, 8)
    msg = str(exc.value)
    assert msg.startswith("ep_size") and "n_routed_experts (4)" in msg
    want = [e for e in range(1, 9) if 8 % e == 0 and 4 % e == 0 and 2048 % (8 // e) == 0]
    assert _listed(msg, "--ep-size") == want == [1, 2, 4]
    for e in want:
        check_parallel_layout(hf, 8, e)
    with pytest.raises(ValueError, match="n_routed_experts"):
        ParallelConfig(tp_size=8, tp_rank=0, ep_size=8).expert_range(4)


def test_aiconfigurator_684_fp4_expert_slice_too_narrow_lists_ep_sizes_that_fit() -> None:
    """ai-dynamo/aiconfigurator#684 (MoE layouts must satisfy ``tp = moe_tp x moe_ep`` with whole
    shards on every rank): with FP4 experts (one scale per 32 columns) of width 2048 and 128 heads /
    output groups, ``--tp-size 128 --ep-size 1`` would slice each expert into 16-column pieces, half
    a scale group; it is refused, and the ``--ep-size`` values listed for ``--tp-size 128`` are
    exactly those where ``256 / ep`` experts are whole and ``2048 / (128 / ep)`` is a multiple of
    32: ``[2, 4, 8, 16, 32, 64, 128]``."""
    hf = _hf(o_groups=128, num_attention_heads=128)
    with pytest.raises(ValueError) as exc:
        check_parallel_layout(hf, 128, 1, fp4_experts=True)
    msg = str(exc.value)
    assert "FP4" in msg
    want = [e for e in range(1, 129) if 128 % e == 0 and 256 % e == 0 and (2048 // (128 // e)) % 32 == 0]
    assert _listed(msg, "--ep-size") == want == [2, 4, 8, 16, 32, 64, 128]
    check_parallel_layout(hf, 128, 1, fp4_experts=False)  # bf16 experts split 16 columns wide


def test_sglang_12012_ep_size_below_tp_size_owns_every_expert_slice_once() -> None:
    """sgl-project/sglang#12012 (expert parallelism narrower than the TP group, ``ep_size <
    tp_size``, is a supported layout: each EP shard's experts are further sliced over ``tp / ep``
    ranks): for ``--tp-size 4 --ep-size 2`` on 8 experts of width 12, ``moe_tp x ep == tp`` and the
    four ranks together own every (expert, intermediate column) exactly once, as the hand-built
    table says (ranks 0-1: experts 0-3, columns 0-5 / 6-11; ranks 2-3: experts 4-7)."""
    owner: dict[tuple[int, int], list[int]] = {}
    for rank in range(4):
        pc = ParallelConfig(tp_size=4, tp_rank=rank, ep_size=2)
        assert pc.moe_tp_size * pc.ep_size == pc.tp_size
        e0, e1 = pc.expert_range(8)
        c0, c1 = pc.moe_inter_range(12)
        assert (e0, e1, c0, c1) == [(0, 4, 0, 6), (0, 4, 6, 12), (4, 8, 0, 6), (4, 8, 6, 12)][rank]
        for e in range(e0, e1):
            for c in range(c0, c1):
                owner.setdefault((e, c), []).append(rank)
    assert sorted(owner) == [(e, c) for e in range(8) for c in range(12)]
    assert all(len(r) == 1 for r in owner.values())
    with pytest.raises(ValueError, match="ep_size"):
        parse("--tp 4 --ep 3")  # 3 EP shards cannot tile a 4-rank group


# ---------------------------------------------------------------------------------------------
# --enable-dp-attention (sgl-project/sglang#5873, sgl-project/sglang#4770, sgl-project/sglang#38614)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cmd", ["--tp 8 --dp 4 --enable-dp-attention", "--tp 4 --dp 2 --enable-dp-attention"]
)
def test_sglang_5873_dp_attention_with_dp_below_tp_is_one_server_on_the_tp_group(cmd: str) -> None:
    """sgl-project/sglang#5873 and sgl-project/sglang#4770 (``--enable-dp-attention`` with
    ``1 <= dp < tp``: the DP ranks split the attention of ONE ``--tp-size`` group -- the same GPUs
    --, they are not extra replicas): such a command parses to one server on ``tp_size`` ranks
    (``dp_size = 1``), keeping the TP size, never ``dp x tp`` GPUs."""
    tp = int(cmd.split()[1])
    sa = parse(cmd)
    assert (sa.tp_size, sa.dp_size) == (tp, 1)


def test_sglang_38614_dp_attention_with_dp_size_one_is_accepted_as_a_no_op() -> None:
    """sgl-project/sglang#38614 (with ``dp_size == 1`` SGLang resolves ``--enable-dp-attention`` to
    off; a launch must not then fail or ask for the flag that was just given): ``--tp 2
    --enable-dp-attention`` parses to the plain ``--tp 2`` layout (``tp_size 2``, ``dp_size 1``,
    ``ep_size 1``)."""
    sa, plain = parse("--tp 2 --enable-dp-attention"), parse("--tp 2")
    assert (sa.tp_size, sa.dp_size, sa.ep_size) == (plain.tp_size, plain.dp_size, plain.ep_size) == (2, 1, 1)

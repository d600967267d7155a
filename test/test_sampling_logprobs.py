"""Prompt logprobs with ``logprob_start_len`` on a radix-cache hit.

Found by hand: a 600-token prompt with ``logprob_start_len=512`` after its first 512 tokens were
cached returned 87 input logprobs instead of 88, shifted by one position (max error 3.1 nats).
The logprob of token ``s`` needs the logits at position ``s - 1``, so a cache hit may cover at most
``s - 1`` tokens. Oracle: the same request on a cold cache (exact match), and the count
``len(prompt) - logprob_start_len`` (SGLang's convention).
"""

from __future__ import annotations

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir, max_total_tokens=16 * 256)


def _run(s: Scheduler, rid: str, ids: list[int], start: int = -1) -> list[float | None]:
    submit(s, rid, ids, 1, ignore_eos=False, return_logprob=start >= 0, logprob_start_len=start)
    return drain(s, max_steps=1000)[rid]["in_lp"]


@pytest.mark.parametrize("start", [512, 300, 256, 257])
def test_input_logprobs_on_cache_hit_equal_cold(sched: Scheduler, start: int) -> None:
    ids = random_ids(600, 11)
    sched.flush_cache()
    cold = _run(sched, "cold", ids, start)
    assert len(cold) == len(ids) - start
    sched.flush_cache()
    _run(sched, "warm-up", ids[:590])  # caches the first two 256-token blocks
    warm = _run(sched, "warm", ids, start)
    assert len(warm) == len(cold)
    assert warm == pytest.approx(cold, abs=1e-4)

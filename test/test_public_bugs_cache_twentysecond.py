"""The twenty-second set of public bug reports on the radix prefix cache, replayed against
sglang-v4's in-process scheduler on conftest's ``sched_model_dir`` checkpoint (CPU, float32,
256-token pages, greedy). Oracles: the allocators' own free counts, the prompt lengths for the
prefix matches that must survive, and a cold run (after ``flush_cache``) for outputs.
"""

from __future__ import annotations

from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, make_scheduler, run_one

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """An in-process ``Scheduler`` on the real tiny model (32 pages of 256 tokens)."""
    return make_scheduler(sched_model_dir)


def test_sglang_32016_eviction_frees_only_the_shortfall(sched: Any) -> None:
    """sgl-project/sglang#32016 (under memory pressure the tree was asked to evict the whole
    requirement instead of the shortfall ``need - available``, so every pressure event destroyed
    extra cached prefixes). Three 2-page prompts are cached; asking for one page more than is
    free must evict at most one of them (a leaf is the eviction unit): the other two still match
    in full (oracle: their prompt lengths), and the free count grows by at most one prompt's
    pages. Outputs of a prompt that survived equal its cold run."""
    assert sched.flush_cache()
    prompts = [random_ids(2 * PAGE + 8, seed=3201 + i) for i in range(3)]
    cold = {i: run_one(sched, f"c{i}", p, 4)["ids"] for i, p in enumerate(prompts)}
    cm, ba = sched.cache_manager, sched.pool.block_alloc
    for p in prompts:
        assert cm.prefix_match_len(p) == 2 * PAGE
    free = ba.available
    assert cm.evict(free + 1, 0)
    assert free + 1 <= ba.available <= free + 2  # one 2-page leaf at most
    matched = [cm.prefix_match_len(p) for p in prompts]
    assert sorted(matched) in ([0, 2 * PAGE, 2 * PAGE], [PAGE, 2 * PAGE, 2 * PAGE])
    for i, p in enumerate(prompts):
        if matched[i] == 2 * PAGE:
            again = run_one(sched, f"w{i}", p, 4)
            assert again["cached"] == 2 * PAGE
            assert again["ids"] == cold[i]
    assert_idle(sched)


def test_sglang_32016_eviction_with_enough_free_pages_evicts_nothing(sched: Any) -> None:
    """sgl-project/sglang#32016, the edge: when the free pages already cover the need (shortfall
    0), nothing is evicted; every cached prompt still matches in full."""
    assert sched.flush_cache()
    prompts = [random_ids(PAGE + 5, seed=3301 + i) for i in range(2)]
    for i, p in enumerate(prompts):
        run_one(sched, f"e{i}", p, 3)
    cm, ba = sched.cache_manager, sched.pool.block_alloc
    free = ba.available
    assert cm.evict(free, 0)
    assert ba.available == free
    assert [cm.prefix_match_len(p) for p in prompts] == [PAGE, PAGE]
    assert_idle(sched)


def test_dynamo_14938_every_stream_message_reports_the_cache_hit(sched: Any) -> None:
    """ai-dynamo/dynamo#14938 (the cached-token count of an SGLang stream reached the client only
    with the finishing chunk; SGLang's scheduler puts ``cached_tokens`` on every streamed
    message). A prompt whose first page is cached is streamed: every message for it reports
    ``cached_tokens == PAGE`` (oracle: the cached prompt's whole pages), not only the last, and
    its tokens equal the cold run's."""
    from scheduler_testutil import submit

    assert sched.flush_cache()
    base = random_ids(PAGE + 20, seed=1493)
    cold = run_one(sched, "cold", base + [7, 8, 9], 5)["ids"]
    assert sched.flush_cache()
    run_one(sched, "warm", base, 2)
    submit(sched, "s", base + [7, 8, 9], 5, stream=True)
    counts, ids = [], []
    while sched.has_work():
        out = sched.step()
        for i, rid in enumerate(out.rids if out else []):
            if rid == "s":
                counts.append(out.cached_tokens[i])
                ids += out.output_ids[i]
    assert len(counts) >= 2
    assert counts == [PAGE] * len(counts)
    assert ids == cold
    assert_idle(sched)


def test_mlxcel_227_concurrent_siblings_all_reuse_a_running_requests_prefix(sched: Any) -> None:
    """lablup/mlxcel#227 (the first of several concurrent same-prefix requests consumed the stored
    prefix and its siblings prefilled cold). Request ``a`` is prefilled and still decoding when
    three siblings sharing its 2-page prefix arrive together: each reports ``cached_tokens`` of
    the two whole pages (oracle: the prefix length), and each sibling's tokens equal its cold run
    (after ``flush_cache``)."""
    from scheduler_testutil import drain, submit

    assert sched.flush_cache()
    prefix = random_ids(2 * PAGE + 10, seed=227)
    tails = [[11, 12], [13], [14, 15, 16]]
    cold = {}
    for i, t in enumerate(tails):
        cold[i] = run_one(sched, f"cold{i}", prefix + t, 3)["ids"]
        assert sched.flush_cache()
    submit(sched, "a", prefix + [9, 9], 30)
    for _ in range(3):
        sched.step()
    for i, t in enumerate(tails):
        submit(sched, f"sib{i}", prefix + t, 3)
    res = drain(sched)
    for i in range(len(tails)):
        assert res[f"sib{i}"]["cached"] == 2 * PAGE
        assert res[f"sib{i}"]["ids"] == cold[i]
    assert_idle(sched)

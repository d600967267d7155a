"""The thirty-second set of public bug reports on the radix prefix cache: exact repeats that
ask for prompt logprobs, exact repeats whose hit must restore the sliding window, suffixes that
end right at the window's edge, branches forking inside a cached node, seeded sampling on a hit,
identical prompts arriving together, ``--disable-radix-cache``, and the LRU order after a node
split and across a cascade of parents that become leaves during one eviction.

Scheduler tests run on the in-process scheduler over conftest's ``sched_model_dir`` checkpoint
(CPU, float32, 256-token pages, 128-token sliding window), sixteen block pages, 256-token
prefill chunks, no overlap; tree tests run on a bare ``RadixCache`` of
``scheduler_testutil.radix_tree``.

Oracles: a cold run of the same request alone on a flushed cache (tokens and logprobs equal it),
hits derived by hand (``floor((len - 1) / 256) * 256``, capped at ``logprob_start_len``), page
counts derived by hand (``floor(len / 256)`` cached blocks), and the LRU order written out by
hand from the order of uses.
"""

from __future__ import annotations

from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import (
    PAGE,
    assert_idle,
    cold_output_ids,
    drain,
    insert_finished,
    make_scheduler,
    radix_tree,
    run_one,
    submit,
)

pytestmark = pytest.mark.timeout(300)

WINDOW = 128  # the checkpoint's sliding window (the module docstring of ``radix_cache``)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """Sixteen block pages (4096 tokens), 256-token prefill chunks, no overlap."""
    return make_scheduler(
        sched_model_dir, max_total_tokens=16 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )


def _hit(n: int) -> int:
    """The hit of an ``n``-token prompt whose blocks are all cached: whole blocks, at least one
    token computed."""
    return (n - 1) // PAGE * PAGE


def _close(a: list[Any], b: list[Any], tol: float = 1e-4) -> bool:
    """Equal lengths, ``None`` at the same places, the other values within ``tol``."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if (x is None) != (y is None):
            return False
        if x is not None and abs(x - y) > tol:
            return False
    return True


# --- scheduler level -----------------------------------------------------------------------------


def _flushed_run(sched: Any, rid: str, ids: list[int], n: int, **kw: Any) -> dict:
    """The cold run: ``ids`` run alone on a flushed cache (its blocks stay cached after)."""
    assert sched.flush_cache()
    return run_one(sched, rid, ids, n, **kw)


@pytest.mark.parametrize("start", [0, 280])
def test_sglang_21164_an_exact_repeat_keeps_the_prompt_logprobs_it_asks_for(sched: Any, start: int) -> None:
    """sgl-project/sglang#21164 (an exact repeat may match its whole prompt only when no prompt
    logprobs are asked for; a request asking for them must compute the positions it asks for).
    A 296-token prompt asking for prompt logprobs from ``start`` is run cold (caching its
    block); an exact repeat hits ``min(floor(295 / 256) * 256, floor(start / 256) * 256)``
    tokens (0 from position 0, 256 from 280) and returns the cold run's ``296 - start`` prompt
    logprobs, tokens and output logprobs."""
    prompt = random_ids(PAGE + 40, seed=21164)
    kw: dict[str, Any] = dict(return_logprob=True, logprob_start_len=start)
    cold = _flushed_run(sched, "cold", prompt, 3, **kw)
    assert cold["cached"] == 0 and len(cold["in_lp"]) == len(prompt) - start
    warm = run_one(sched, "warm", prompt, 3, **kw)
    assert warm["cached"] == min(_hit(len(prompt)), start // PAGE * PAGE) == (0 if start < PAGE else PAGE)
    assert warm["ids"] == cold["ids"]
    assert _close(warm["in_lp"], cold["in_lp"]) and _close(warm["lp"], cold["lp"])
    assert_idle(sched)


def test_rapid_mlx_1124_an_exact_repeat_restores_the_window_at_its_hit(sched: Any) -> None:
    """raullenchai/Rapid-MLX#1124 (an exact hit on a sliding-window model re-forwarded the last
    prompt token without rewinding the window, so the first generated token drifted). An exact
    repeat of a 300-token prompt hits 256 tokens, so the 128-token window of positions 128..255
    is restored from the resume state and the last 44 tokens are computed on top: its tokens and
    output logprobs equal the cold run's."""
    prompt = random_ids(PAGE + 44, seed=1124)
    cold = _flushed_run(sched, "cold", prompt, 4, return_logprob=True)
    warm = run_one(sched, "warm", prompt, 4, return_logprob=True)
    assert (cold["cached"], warm["cached"]) == (0, PAGE)
    assert warm["ids"] == cold["ids"] and _close(warm["lp"], cold["lp"])
    assert_idle(sched)


def test_transformers_37574_a_suffix_that_exactly_fills_the_window_after_a_hit(sched: Any) -> None:
    """huggingface/transformers#37574 (the sliding-window KV was updated wrongly when the
    sequence reached exactly the window size). A prompt of one 256-token block plus 128 more
    tokens (exactly the sliding window) is run cold on a flushed cache, which caches its block;
    the same prompt again hits 256, computes a suffix that exactly fills the window on top of
    the restored one, and returns the cold run's tokens and output logprobs."""
    prompt = random_ids(PAGE + WINDOW, seed=37574)
    cold = _flushed_run(sched, "cold", prompt, 3, return_logprob=True)
    warm = run_one(sched, "warm", prompt, 3, return_logprob=True)
    assert (cold["cached"], warm["cached"]) == (0, PAGE)
    assert warm["ids"] == cold["ids"] and _close(warm["lp"], cold["lp"])
    assert_idle(sched)


def test_mlc_llm_2615_a_branch_forking_inside_a_cached_sequence_matches_cold(sched: Any) -> None:
    """mlc-ai/mlc-llm#2615 (with a prefix cache, the sliding-window state was kept only for the
    leaf sequence, so a fork from an interior point of a cached sequence read the wrong state).
    A 520-token prompt caches two blocks by its cold run; a branch forking after 300 of its
    tokens (inside the second block) hits 256, resuming from the interior block end's window
    state, and returns its own cold run's tokens; the original prompt then still hits 512 with
    its cold tokens."""
    base = random_ids(2 * PAGE + 8, seed=2615)
    branch = base[:300] + random_ids(20, seed=2616)
    cold_branch = cold_output_ids(sched, "cb", branch, 3)
    cold = _flushed_run(sched, "base", base, 3)
    assert sched.tree_cache.stats()["cached_blocks"] == 2
    warm = run_one(sched, "branch", branch, 3)
    assert warm["cached"] == PAGE and warm["ids"] == cold_branch
    again = run_one(sched, "base2", base, 3)
    assert again["cached"] == 2 * PAGE and again["ids"] == cold["ids"]
    assert_idle(sched)


def test_sglang_10721_a_seeded_sample_is_the_same_on_a_hit_and_on_a_miss(sched: Any) -> None:
    """sgl-project/sglang#10721 (results should not depend on whether the prefix came from the
    cache). A 300-token prompt sampled at temperature 0.9 with ``sampling_seed`` 7 and a
    repetition penalty is run cold on a flushed cache; the same request again hits 256 tokens
    and draws the same tokens."""
    prompt = random_ids(PAGE + 44, seed=10721)
    params = {"temperature": 0.9, "sampling_seed": 7, "repetition_penalty": 1.3}
    cold = _flushed_run(sched, "cold", prompt, 6, sampling=params)
    warm = run_one(sched, "warm", prompt, 6, sampling=params)
    assert (cold["cached"], warm["cached"]) == (0, PAGE)
    assert warm["ids"] == cold["ids"]
    assert_idle(sched)


def test_kvcached_401_identical_prompts_arriving_together_keep_one_copy(sched: Any) -> None:
    """ovg-project/kvcached#401 (concurrent requests materialised the same prefix twice before
    either was reusable and the cache kept the duplicate blocks inconsistently). Two identical
    300-token prompts are submitted in the same step on an empty cache: each returns the cold
    run's tokens, the tree then holds ``floor(300 / 256) = 1`` block, the only block page in use
    is that one (the duplicate went back), and nothing stays locked; a third copy hits 256."""
    prompt = random_ids(PAGE + 44, seed=401)
    cold = cold_output_ids(sched, "cold", prompt, 3)
    for rid in ("a", "b"):
        submit(sched, rid, prompt, 3)
    res = drain(sched)
    assert [res[r]["ids"] for r in ("a", "b")] == [cold] * 2
    st = sched.tree_cache.stats()
    assert st["cached_blocks"] == 1
    assert sched.pool.block_alloc.used == 1
    assert (st["locked_blocks"], st["locked_nodes"]) == (0, 0)
    again = run_one(sched, "c", prompt, 3)
    assert again["cached"] == _hit(len(prompt)) == PAGE and again["ids"] == cold
    assert_idle(sched)


def test_vllm_mlx_217_a_hit_stops_at_the_last_block_end_whose_window_state_is_live(sched: Any) -> None:
    """waybarrios/vllm-mlx#217 (a hybrid model may resume only at a boundary whose recurrent
    snapshot exists, though the KV blocks past it are cached) and LMCache/LMCache#2863 (a hit
    reported for tokens whose non-KV state was never restored gave garbled output). A 600-token
    prompt caches two blocks with a resume state at each block end; evicting one resume state
    takes the one at 512 (the deepest of the least recently used path); the same prompt then
    hits 256 (both blocks still cached, only the end at 256 resumable), reports 256 cached
    tokens and returns the cold run's tokens and output logprobs."""
    prompt = random_ids(600, seed=217)
    cold = _flushed_run(sched, "cold", prompt, 3, return_logprob=True)
    tree = sched.tree_cache
    assert tree.stats()["resume_states"] == 2 and tree.match_prefix_len(prompt) == 2 * PAGE
    assert tree.evict(num_window_pages=1) == (0, 1)
    assert tree.stats()["cached_blocks"] == 2 and tree.match_prefix_len(prompt) == PAGE
    warm = run_one(sched, "warm", prompt, 3, return_logprob=True)
    assert warm["cached"] == PAGE
    assert warm["ids"] == cold["ids"] and _close(warm["lp"], cold["lp"])
    assert_idle(sched)


@pytest.fixture(scope="module")
def nocache(sched_model_dir: str) -> Any:
    """As ``sched``, with ``--disable-radix-cache``."""
    return make_scheduler(
        sched_model_dir,
        max_total_tokens=16 * PAGE,
        chunked_prefill_size=PAGE,
        disable_overlap_schedule=True,
        disable_radix_cache=True,
    )


def test_sglang_451_disable_radix_cache_reports_no_hit_and_matches_the_cached_server(
    sched: Any, nocache: Any
) -> None:
    """sgl-project/sglang#451 (``--disable-radix-cache`` was broken) and sgl-project/sglang#24210
    (with the cache disabled no two requests may share a prefix). A 300-token prompt run twice
    with the cache disabled reports 0 cached tokens both times, keeps no page once each ends,
    and returns the same tokens as the cold run with the cache on."""
    prompt = random_ids(PAGE + 44, seed=451)
    cold = cold_output_ids(sched, "cold", prompt, 3)
    for rid in ("a", "b"):
        out = run_one(nocache, rid, prompt, 3)
        assert out["cached"] == 0 and out["ids"] == cold
        assert nocache.pool.block_alloc.used == 0 and nocache.pool.window_alloc.used == 0
    assert nocache.tree_cache.stats()["cached_blocks"] == 0


# --- tree level ----------------------------------------------------------------------------------


def test_sglang_omni_1724_a_split_leaves_its_lower_half_with_the_old_stamp() -> None:
    """sgl-project/sglang-omni#1724 (a lazily kept eviction heap must not evict a node by an
    outdated priority). A three-block sequence ``x`` is cached, then a one-block ``y``; a hit on
    the first two blocks of ``x`` splits its node and makes those two the most recent, while the
    third block keeps ``x``'s old stamp. Evicting one block takes ``x``'s third block (least
    recently used), the next takes ``y``, and ``x`` still hits two blocks."""
    c, ba, wa = radix_tree(PAGE)
    x = random_ids(3 * PAGE, seed=1724)
    y = random_ids(PAGE, seed=1725)
    insert_finished(c, ba, wa, x, PAGE)
    insert_finished(c, ba, wa, y, PAGE)
    assert c.match_prefix(x[: 2 * PAGE] + [0]).num_tokens == 2 * PAGE
    assert c.evict(num_block_pages=1)[0] == 1
    assert [c.match_prefix_len(x), c.match_prefix_len(y + [0])] == [2 * PAGE, PAGE]
    assert c.evict(num_block_pages=1)[0] == 1
    assert [c.match_prefix_len(x), c.match_prefix_len(y + [0])] == [2 * PAGE, 0]
    assert ba.used == 2


def test_sglang_24072_one_eviction_takes_parents_that_become_leaves_on_the_way() -> None:
    """sgl-project/sglang#24072 (an eviction walk must reach ancestors once their children are
    gone, within the same eviction). Three sequences share one block and two of them share a
    second, so the tree has 5 blocks in 5 nodes under a two-level shared path; one call asking
    for 5 block pages frees all 5 (with their resume states) and leaves every page free."""
    c, ba, wa = radix_tree(PAGE)
    root_blk, mid = random_ids(PAGE, seed=24072), random_ids(PAGE, seed=24073)
    seqs = [
        root_blk + mid + random_ids(PAGE, seed=24074),
        root_blk + random_ids(PAGE, seed=24075),
        root_blk + mid + random_ids(PAGE, seed=24076),
    ]
    for s in seqs:
        insert_finished(c, ba, wa, s, PAGE)
    assert c.stats()["cached_blocks"] == 5 and ba.used == 5
    assert c.evict(num_block_pages=5) == (5, 5)
    assert (ba.used, wa.used) == (0, 0)
    assert [c.match_prefix_len(s) for s in seqs] == [0, 0, 0]

"""Public bug reports on radix / sliding-window / sparse-attention KV caches, replayed on the
tri-structured KV of DeepSeek-V4 (256-token blocks, CSA entries every 4 tokens, HCA every 128, the
128-token sliding window and its resume states, compressor state, indexer keys).

In-process schedulers on the ``sched_model_dir`` checkpoint (fp32 KV, and fp8 KV on the CPU
reference path). Oracles: the cold run (after ``flush_cache``, or with the radix cache disabled)
of the same request for outputs; the allocators' free counts and
``CacheManager.check_integrity`` for page accounting; the prompt length for ``cached_tokens``.
"""

from __future__ import annotations

from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit

pytestmark = pytest.mark.timeout(300)

WINDOW = 128


def _integrity(s: Any) -> None:
    """The cache manager's ownership invariant holds over every queued and running request."""
    s.cache_manager.check_integrity(list(s.running) + list(s.waiting))


def _cold(s: Any, rid: str, ids: list[int], n: int, **kw: Any) -> dict:
    """``ids`` run on an empty radix cache (the oracle), the cache flushed again after."""
    assert s.flush_cache()
    res = run_one(s, rid, ids, n, **kw)
    assert res["cached"] == 0
    assert s.flush_cache()
    return res


@pytest.fixture(scope="module")
def sched(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """A 24-block pool, prefill unchunked."""
    return make_scheduler(sched_model_dir, max_total_tokens=24 * PAGE, chunked_prefill_size=-1)


# --- usage: cached_tokens ----------------------------------------------------------------------


@pytest.mark.slow
def test_cached_tokens_after_retraction_count_only_the_first_admission(sched_model_dir: str) -> None:
    """sgl-project/sglang#11900: after a retraction the re-admitted request hit its own blocks
    (prompt and output) and reported them as cached, up to ``cached_tokens > prompt_tokens``.
    Three distinct 490-token prompts decoding 30 tokens on a 5-block pool (each needs a third
    block at token 512): the retracted ones keep the hit of their first admission (0: nothing was
    shared) and their outputs equal the cold runs."""
    s = make_scheduler(sched_model_dir, max_total_tokens=5 * PAGE, chunked_prefill_size=-1)
    prompts = [random_ids(490, seed=1700 + i) for i in range(3)]
    for i, p in enumerate(prompts):
        submit(s, f"r{i}", p, 30)
    got = drain(s)
    assert s.num_retractions > 0
    for i, p in enumerate(prompts):
        assert got[f"r{i}"]["cached"] == 0, (i, got[f"r{i}"]["cached"])
        assert got[f"r{i}"]["ids"] == _cold(s, f"cold{i}", p, 30)["ids"], i
    assert_idle(s)


def test_retraction_mid_chunked_prefill_keeps_the_first_hit_and_equals_cold(sched_model_dir: str) -> None:
    """sgl-project/sglang#38319 (a request retracted during chunked prefill, after some of its
    chunks were inserted into the radix tree, left corrupt pages behind for later hits) and
    sgl-project/sglang#11900 (its re-admission counted as cached tokens): a 700-token prompt whose
    first 300 tokens are cached (a 256-token hit) is retracted (``/pause_generation`` mode
    ``retract``) after three 100-token chunks; when it resumes it reports the 256 cached tokens of
    its first admission, and it and a prompt sharing its first 600 tokens give their cold tokens."""
    s = make_scheduler(sched_model_dir, max_total_tokens=12 * PAGE, chunked_prefill_size=100)
    prompt = random_ids(700, seed=1780)
    other = prompt[:600] + random_ids(15, seed=1781)
    cold = {"a": _cold(s, "cold-a", prompt, 3)["ids"], "b": _cold(s, "cold-b", other, 3)["ids"]}
    run_one(s, "seed", prompt[:300], 1)
    submit(s, "a", prompt, 3)
    res: dict[str, dict] = {}
    for _ in range(3):
        s.step()
    s.retract_all()
    assert s.num_retractions == 1
    _integrity(s)
    drain(s, res)
    b = run_one(s, "b", other, 3)
    assert res["a"]["cached"] == PAGE
    assert b["cached"] == 2 * PAGE
    assert (res["a"]["ids"], b["ids"]) == (cold["a"], cold["b"])
    assert_idle(s)


def test_cached_tokens_of_a_resent_prompt_are_its_whole_blocks(sched: Any) -> None:
    """vllm-project/vllm#42948 (DeepSeek-V4 hybrid groups lost their first-block keys: a re-sent
    prompt hit 0%), vllm-project/vllm-ascend#10710 and vllm-project/vllm-ascend#13339 (identical
    DeepSeek-V4 requests never hit): the same 1000-token prompt sent again hits
    every whole block short of its last token, 768 tokens, and gives the cold tokens."""
    ids = random_ids(1000, seed=1710)
    cold = _cold(sched, "cold", ids, 4)
    first = run_one(sched, "first", ids, 4)
    again = run_one(sched, "again", ids, 4)
    assert (first["cached"], again["cached"]) == (0, 768)
    assert again["ids"] == first["ids"] == cold["ids"]
    assert_idle(sched)


# --- hits ending at every kind of boundary -----------------------------------------------------


@pytest.mark.parametrize("shared", [260, 384, 511])
def test_hit_ending_at_block_group_or_window_boundary_equals_cold(sched: Any, shared: int) -> None:
    """ROCm/ATOM#1417 (a DeepSeek-V4 cross-request hit read the sliding window from a stale
    per-request ring) and vllm-project/vllm#57610 (a prompt diverging inside the last aligned
    block of a cached one missed): a prompt sharing ``shared`` tokens with a cached 700-token one,
    diverging at a CSA group end inside a block (260), an HCA group and window-span end (384) or
    one token before a block end (511), hits the whole blocks before the divergence and gives the
    cold run's tokens."""
    base = random_ids(700, seed=1720)
    ids = base[:shared] + random_ids(20, seed=1721 + shared)
    cold = _cold(sched, "cold", ids, 4)
    run_one(sched, "base", base, 1)
    warm = run_one(sched, "warm", ids, 4)
    assert warm["cached"] == shared // PAGE * PAGE
    assert warm["ids"] == cold["ids"]
    assert_idle(sched)


def test_fp8_kv_hit_equals_the_fp8_cold_run(sched_model_dir: str) -> None:
    """vllm-project/vllm#3880 (prefix caching failed with an fp8-quantized KV cache): on the fp8
    KV pool (CPU reference codecs) a prompt sharing 300 tokens with a cached one hits 256 and
    gives the fp8 cold run's tokens, its output logprobs within 0.05 (the quantized-format bound
    of ``resume_testutil``)."""
    s = make_scheduler(sched_model_dir, max_total_tokens=8 * PAGE, kv_cache_dtype="fp8_e4m3")
    base = random_ids(400, seed=1730)
    ids = base[:300] + random_ids(12, seed=1731)
    cold = _cold(s, "cold", ids, 4, return_logprob=True)
    run_one(s, "base", base, 1)
    warm = run_one(s, "warm", ids, 4, return_logprob=True)
    assert warm["cached"] == PAGE
    assert warm["ids"] == cold["ids"]
    assert max(abs(a - b) for a, b in zip(warm["lp"], cold["lp"])) <= 0.05
    assert_idle(s)


# --- window pages released while decoding or between chunks -----------------------------------


def test_hit_on_blocks_completed_after_their_window_was_released(sched: Any) -> None:
    """sgl-project/sglang#31486 (an all-SWA radix cache re-inserted window KV that decode had
    already freed: stale reads on a later hit, then a double free on eviction): a 200-token
    prompt decoded for 70 tokens releases its first window page while decoding and completes
    its first block; prompt + output sent back hits that block (256 tokens), gives the cold
    tokens, and the flush after frees every page exactly once (the allocators end empty)."""
    prompt = random_ids(200, seed=1740)
    first = run_one(sched, "first", prompt, 70)
    _integrity(sched)
    turn2 = prompt + first["ids"][:60] + random_ids(10, seed=1741)
    warm = run_one(sched, "warm", turn2, 3)
    assert warm["cached"] == PAGE
    assert warm["ids"] == _cold(sched, "cold", turn2, 3)["ids"]
    assert_idle(sched)


@pytest.mark.parametrize("chunk", [100])
def test_chunked_prefill_with_chunks_ending_mid_block_caches_every_block(
    sched_model_dir: str, chunk: int
) -> None:
    """sgl-project/sglang#30845 (during chunked prefill, window KV released before the unfinished
    request was inserted was cached as live) and sgl-project/sglang#25091 (a chunked request
    cached twice in one step tripped an assertion): with chunks ending inside blocks and window
    spans, every block end gets its resume state, so the re-sent prompt hits all whole blocks
    (768 of 800 tokens) and equals the unchunked cold run; caching an unfinished request again
    with no new progress changes nothing."""
    s = make_scheduler(sched_model_dir, max_total_tokens=16 * PAGE, chunked_prefill_size=chunk)
    ids = random_ids(800, seed=1750)
    submit(s, "first", ids, 3)
    res: dict[str, dict] = {}
    while s.has_work():
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            res.setdefault(rid, {"ids": []})["ids"] += out.output_ids[i]
        for r in list(s.running):
            before = (list(r.block_pages), dict(r.window_pages), r.num_tree_blocks, s.pool.block_alloc.used)
            s.cache_manager.cache_unfinished_req(r)
            after = (list(r.block_pages), dict(r.window_pages), r.num_tree_blocks, s.pool.block_alloc.used)
            assert after == before
        _integrity(s)
    again = run_one(s, "again", ids, 3)
    assert again["cached"] == 768
    cold_s = make_scheduler(sched_model_dir, max_total_tokens=16 * PAGE, disable_radix_cache=True)
    cold = run_one(cold_s, "cold", ids, 3)
    assert res["first"]["ids"] == again["ids"] == cold["ids"]
    assert_idle(s)


# --- memory pressure and accounting ------------------------------------------------------------


def test_repeating_other_prompts_does_not_evict_a_cached_prefix_while_room_is_left(
    sched_model_dir: str,
) -> None:
    """vllm-project/vllm#42656 (repeating prompts B evicted the cached prompts A although the
    pool had room for both): on a 12-block pool, A (700 tokens) cached, then B (500 tokens) sent
    five times: A still hits its two whole blocks and no block was evicted."""
    s = make_scheduler(sched_model_dir, max_total_tokens=12 * PAGE, chunked_prefill_size=-1)
    a, b = random_ids(700, seed=1760), random_ids(500, seed=1761)
    run_one(s, "a", a, 1)
    for k in range(5):
        assert run_one(s, f"b{k}", b, 1)["cached"] == (0 if k == 0 else PAGE)
    assert s.tree_cache.stats()["evicted_blocks"] == 0
    assert run_one(s, "a-again", a, 1)["cached"] == 2 * PAGE
    assert_idle(s)


def test_idle_pool_counts_add_up_after_every_kind_of_request(sched_model_dir: str) -> None:
    """sgl-project/sglang#27770 (an SWA pool leak: at idle ``available + evictable`` exceeded
    the pool) and sgl-project/sglang#12693 (an abort between the prefix match and the allocation
    leaked state): after a decode past the window, a chunked prefill, an abort mid-prefill and an
    abort of a queued request, the idle pool's free plus evictable pages equal its size for both
    block and window pages, and a flush empties both allocators."""
    s = make_scheduler(sched_model_dir, max_total_tokens=10 * PAGE, chunked_prefill_size=200)
    base = random_ids(600, seed=1770)
    run_one(s, "long", base[:200], 70)
    run_one(s, "chunked", base, 2)
    submit(s, "aborted-mid", base + random_ids(300, seed=1771), 2)
    s.step()
    s.step()
    submit(s, "aborted-queued", base[:400] + [5, 6], 2)
    s.abort_request("aborted-mid")
    s.abort_request("aborted-queued")
    drain(s)
    assert not s.running and not s.waiting
    _integrity(s)
    eb, ew = s.tree_cache.evictable_sizes()
    ba, wa = s.pool.block_alloc, s.pool.window_alloc
    assert ba.available + eb == ba.num_pages
    assert wa.available + ew == wa.num_pages
    assert s.cache_manager.kv_block_counts()[2] == 0
    assert_idle(s)


def test_evicting_resume_states_shortens_a_hit_instead_of_losing_the_branch(sched: Any) -> None:
    """sgl-project/sglang#35515 (evicting one sliding-window node at a branch's tail made the
    whole branch unmatchable): a 1100-token prompt cached with a resume state at each of its four
    block ends; evicting one or two resume states leaves a hit of at least the blocks before
    them (never 0), the re-sent prompt gives the cold tokens, and the block pages all stay."""
    ids = random_ids(1100, seed=1790)
    cold = _cold(sched, "cold", ids, 3)
    run_one(sched, "first", ids, 1)
    blocks = sched.tree_cache.total_pages()[0]
    for k in (1, 2):
        assert sched.cache_manager.tree_cache.evict(0, k) == (0, k)
        assert sched.tree_cache.total_pages()[0] == blocks
        hit = sched.cache_manager.prefix_match_len(ids[:-1])
        assert hit >= (4 - k) * PAGE, (k, hit)
        warm = run_one(sched, f"warm{k}", ids, 3)
        assert warm["cached"] == hit
        assert warm["ids"] == cold["ids"]
    assert_idle(sched)

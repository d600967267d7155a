"""Public bug reports on the radix prefix cache and the KV page accounting, replayed here.

Two levels:

* :class:`~sglang_v4.mem_cache.radix_cache.RadixCache` alone on small blocks (``page_size`` 4)
  with real page allocators. Oracle: an independent walk of the tree (its nodes' pages and
  lock counts), and the allocators' own counts.
* The in-process scheduler on the ``sched_model_dir`` checkpoint. Oracles: the cold run of the
  same request (after ``flush_cache``) for outputs; the prompt length for ``cached_tokens``;
  ``CacheManager.check_integrity`` and the allocators' free counts (``assert_idle``) for pages.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import (
    PAGE,
    assert_idle,
    drain,
    insert_finished,
    make_scheduler,
    radix_tree,
    run_one,
    submit,
)
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.radix_cache import RadixCache, TreeNode

pytestmark = pytest.mark.timeout(300)

P = 4  # block size of the tree-level tests


# --- tree level ----------------------------------------------------------------------------------


def _insert(c: RadixCache, ba: PageAllocator, wa: PageAllocator, key: list[int]) -> None:
    """``scheduler_testutil.insert_finished`` on this file's block size."""
    insert_finished(c, ba, wa, key, P)


def _walk(c: RadixCache) -> dict[str, int]:
    """Block / resume-state / lock counts recomputed from the tree's nodes (the oracle of the
    counters ``stats`` keeps incrementally)."""
    out = {"blocks": 0, "windows": 0, "locked_blocks": 0, "locked_windows": 0, "nodes": 0}
    stack: list[TreeNode] = list(c.root.children.values())
    while stack:
        n = stack.pop()
        nw = sum(w is not None for w in n.window_pages)
        out["nodes"] += 1
        out["blocks"] += n.num_blocks
        out["windows"] += nw
        if n.lock_ref > 0:
            out["locked_blocks"] += n.num_blocks
            out["locked_windows"] += nw
        stack.extend(n.children.values())
    return out


def test_partial_match_locks_only_the_matched_blocks() -> None:
    # bytedance-iaas/sglang#508: match_prefix did not split a node matched in part, so locking
    # the match pinned the node's whole edge, and the unmatched tail could never be evicted.
    # A 4-block sequence is cached; a request sharing its first 2 blocks matches and locks them:
    # exactly those 2 stay locked, the other 2 are evictable and evict() frees them.
    c, ba, wa = radix_tree(P)
    seq = list(range(100, 100 + 4 * P))
    _insert(c, ba, wa, seq)
    m = c.match_prefix(seq[: 2 * P] + [7, 7, 7])
    assert m.num_tokens == 2 * P
    c.inc_lock_ref(m.last_node)
    assert c.evictable_sizes() == (2, 2)
    assert c.evict(num_block_pages=4) == (2, 2)
    assert ba.used == 2 and wa.used == 2
    assert c.match_prefix(seq).num_tokens == 2 * P  # the locked half is still served
    c.dec_lock_ref(m.last_node)
    assert c.evict(num_block_pages=4) == (2, 2) and ba.used == 0 and wa.used == 0


def test_evictable_and_locked_counts_match_the_tree_after_splits_and_evictions() -> None:
    # sgl-project/sglang#6907 (review): the evictable size was decremented by a node's key length
    # where every other path counted its value, so it drifted from what the tree held. Random
    # overlapping inserts,
    # partial matches that lock (splitting nodes), unlocks and evictions: after every operation
    # the counters in stats() equal a walk of the tree, and the allocators hold exactly its pages.
    rng = random.Random(6907)
    c, ba, wa = radix_tree(P, 256)
    stems = [[rng.randrange(1, 50) for _ in range(6 * P)] for _ in range(3)]
    locked: list[TreeNode] = []
    for _ in range(300):
        op = rng.random()
        stem = rng.choice(stems)
        if op < 0.35:
            nb = rng.randint(1, 6)
            tail = [rng.randrange(50, 60) for _ in range(rng.randint(0, 2) * P)]
            if ba.available >= 8 and wa.available >= 8:
                _insert(c, ba, wa, stem[: nb * P] + tail)
        elif op < 0.6:
            m = c.match_prefix(stem[: rng.randint(1, 6) * P + rng.randint(0, P - 1)])
            if m.num_tokens:
                c.inc_lock_ref(m.last_node)
                locked.append(m.last_node)
        elif op < 0.8 and locked:
            c.dec_lock_ref(locked.pop(rng.randrange(len(locked))))
        else:
            c.evict(num_block_pages=rng.randint(0, 3), num_window_pages=rng.randint(0, 3))
        w = _walk(c)
        st = c.stats()
        assert st["cached_blocks"] == w["blocks"] == ba.used
        assert st["resume_states"] == w["windows"] == wa.used
        assert st["locked_blocks"] == w["locked_blocks"]
        assert st["locked_resume_states"] == w["locked_windows"]
        assert st["evictable_blocks"] == w["blocks"] - w["locked_blocks"]
        assert st["nodes"] == w["nodes"]
    for node in locked:
        c.dec_lock_ref(node)
    assert c.flush() and ba.used == 0 and wa.used == 0


def test_token_ids_equal_in_their_low_bits_never_share_a_block() -> None:
    # waybarrios/vllm-mlx#444: the block key kept only the low 8 bits of each token id, so token
    # 65 and token 321 keyed the same block and a prompt was served another prompt's KV. Blocks
    # that differ only above bit 8, 16 or 24 of one token id are distinct keys here.
    c, ba, wa = radix_tree(P)
    base = [65, 1, 2, 3] * 2
    _insert(c, ba, wa, base)
    assert c.match_prefix(base + [9]).num_tokens == 2 * P
    for high in (256, 2**16, 2**24, 2**31):
        other = [65 + high, 1, 2, 3] + base[P:] + [9]
        assert c.match_prefix(other).num_tokens == 0, high
        assert c.match_prefix_len(other) == 0


def test_lock_calls_on_an_evicted_node_are_refused() -> None:
    # sgl-project/sglang#29291: dec_lock_ref got a request's stale node that was no longer in the
    # tree and walked its parent chain, corrupting the lock counts. An evicted node (and one
    # dropped by a flush) is refused with ValueError and the counters stay as they were.
    c, ba, wa = radix_tree(P)
    seq = list(range(1, 1 + 2 * P))
    _insert(c, ba, wa, seq)
    node = c.match_prefix(seq + [0]).last_node
    assert c.evict(num_block_pages=2) == (2, 2)
    before = c.stats()
    with pytest.raises(ValueError, match="not locked"):
        c.dec_lock_ref(node)
    with pytest.raises(ValueError, match="no longer in the tree"):
        c.inc_lock_ref(node)
    assert c.stats() == before
    _insert(c, ba, wa, seq)
    node = c.match_prefix(seq + [0]).last_node
    assert c.flush()
    with pytest.raises(ValueError, match="not locked"):
        c.dec_lock_ref(node)
    assert c.stats()["locked_blocks"] == 0 and ba.used == 0


# --- scheduler level -----------------------------------------------------------------------------


def _integrity(s: Any) -> None:
    s.cache_manager.check_integrity(list(s.running) + list(s.waiting))


def _collect(out: Any, res: dict) -> None:
    """Add one message's outputs to ``res`` as ``drain`` does (ids, cached, finish)."""
    for i, rid in enumerate(out.rids if out else []):
        r = res.setdefault(rid, {"ids": [], "lp": [], "in_lp": [], "chunks": []})
        r["ids"] += out.output_ids[i]
        r["cached"] = out.cached_tokens[i]
        r["finish"] = out.finished_reasons[i]


def _steps(s: Any, n: int, res: dict) -> None:
    """``n`` scheduler steps, their outputs collected into ``res``."""
    for _ in range(n):
        _collect(s.step(), res)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """256-token prefill chunks, no overlap (each step's result is processed in that step)."""
    return make_scheduler(
        sched_model_dir, max_total_tokens=16 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )


@pytest.fixture(scope="module")
def cold(sched: Any) -> dict[str, dict]:
    """Cold runs (the oracle), by name: ``long`` a 600-token prompt, 4 new tokens."""
    assert sched.flush_cache()
    out = {"long": run_one(sched, "cold-long", random_ids(600, 2101), 4)}
    assert sched.flush_cache()
    return out


def test_abort_mid_chunked_prefill_releases_pages_and_locks(sched: Any, cold: dict) -> None:
    # sgl-project/sglang#2238: aborting a request in the middle of its chunked prefill leaked its
    # KV and left its radix path locked. Two 256-token chunks are computed, then the request is
    # aborted: nothing stays locked, the pool holds only the tree's pages, the completed blocks
    # serve the same prompt again, whose output equals the cold run, and a flush frees every page.
    ids = random_ids(600, 2101)
    assert sched.flush_cache()
    submit(sched, "a", ids, 4)
    sched.step()
    sched.step()
    assert sched.running[0].num_computed == 2 * PAGE
    _integrity(sched)
    sched.abort_request("a")
    out = drain(sched)["a"]
    assert out["finish"]["type"] == "abort"
    st = sched.tree_cache.stats()
    assert st["locked_blocks"] == 0 and st["locked_nodes"] == 0
    assert sched.pool.block_alloc.used == st["cached_blocks"] == 2
    _integrity(sched)
    again = run_one(sched, "again", ids, 4)
    assert again["cached"] == 2 * PAGE
    assert again["ids"] == cold["long"]["ids"]
    assert_idle(sched)


def test_release_of_a_request_with_no_cached_prefix(sched: Any) -> None:
    # sgl-project/sglang#37494: releasing a request that owns KV but never matched or locked a
    # radix node tried to unlock a node that did not exist. A 100-token prompt (shorter than a
    # block: no node) is aborted while decoding, another finishes: no error, no lock, no page kept.
    assert sched.flush_cache()
    submit(sched, "short-a", random_ids(100, 2102), 50)
    submit(sched, "short-b", random_ids(100, 2103), 3)
    got: dict = {}
    _steps(sched, 5, got)
    assert {r.rid for r in sched.running} == {"short-a"} and sched.running[0].last_node is None
    sched.abort_request("short-a")
    drain(sched, got)
    assert got["short-a"]["finish"]["type"] == "abort" and len(got["short-b"]["ids"]) == 3
    assert sched.tree_cache.stats()["locked_nodes"] == 0
    assert sched.pool.block_alloc.used == 0 and sched.pool.window_alloc.used == 0
    assert sched.pool.req_slots.available == sched.pool.req_slots.size


def test_admission_rolled_back_after_a_prefix_match_leaks_nothing(sched: Any, cold: dict) -> None:
    # sgl-project/sglang#40360: a request dropped between match_prefix (which locks its hit) and
    # its allocation kept the lock and the slot, so the cached entries could never be evicted.
    # A queued request is matched (a 512-token hit, locked) and then released as an admission that
    # cannot get its pages is: the lock and the slot are returned, and it is later served from
    # the same hit with the cold run's output.
    ids = random_ids(600, 2101)
    assert sched.flush_cache()
    run_one(sched, "warm", ids[:520], 1)
    submit(sched, "late", ids, 4)
    req = sched.waiting[0]
    cm = sched.cache_manager
    slots = sched.pool.req_slots.available
    assert cm.match_prefix(req) and req.num_computed == 2 * PAGE
    assert sched.tree_cache.stats()["locked_blocks"] == 2
    cm.release_req(req)
    assert sched.tree_cache.stats()["locked_blocks"] == 0
    assert sched.pool.req_slots.available == slots
    _integrity(sched)
    out = drain(sched)["late"]
    assert out["cached"] == 2 * PAGE and out["ids"] == cold["long"]["ids"]
    assert_idle(sched)


def test_request_retracted_after_a_hit_recomputes_what_a_flush_dropped(sched: Any) -> None:
    # vllm-project/vllm#17305: the number of cached tokens found for a request was kept while it
    # waited, and used when it ran although the cache had changed since, so it read KV that was no
    # longer there. A 600-token request admitted with a 512-token hit decodes, is retracted
    # (/pause_generation mode retract), the cache is flushed, and it resumes: it recomputes
    # everything and its output equals the cold run; its usage keeps the hit of its first
    # admission (sgl-project/sglang#11900's rule), and the hit totals count its prompt once.
    ids = random_ids(600, 2104)
    assert sched.flush_cache()
    ref = run_one(sched, "ref", ids, 8)
    assert sched.flush_cache()
    run_one(sched, "seed", ids[:520], 1)
    st0 = sched.tree_cache.stats()
    submit(sched, "r", ids, 8)
    got: dict = {}
    _steps(sched, 4, got)
    assert sched.running and sched.running[0].output_ids
    _collect(sched.retract_all(), got)
    assert sched.waiting[0].rid == "r" and sched.waiting[0].num_retractions == 1
    assert sched.flush_cache()
    out = drain(sched, got)["r"]
    st = sched.tree_cache.stats()
    assert out["ids"] == ref["ids"]
    assert out["cached"] == 2 * PAGE
    assert st["prompt_tokens"] - st0["prompt_tokens"] == 600
    assert st["hit_tokens"] - st0["hit_tokens"] == 2 * PAGE
    assert_idle(sched)


def test_later_chunks_of_a_cold_prompt_are_not_cache_hits(sched: Any) -> None:
    # sgl-project/sglang#2555: with chunked prefill, each later chunk of a prompt matched the
    # blocks its own earlier chunks had just inserted and counted them as cache hits. A cold
    # 600-token prompt in 256-token chunks after a hit on another prompt: its usage reports no
    # cached tokens, the hit totals grow by its prompt and no hit, and /metrics' cache_hit_rate
    # (the last admitting prefill batch's) is 0.
    assert sched.flush_cache()
    other = random_ids(300, 2108)
    run_one(sched, "o1", other, 1)
    assert run_one(sched, "o2", other, 1)["cached"] == PAGE
    assert sched.get_metrics()["cache_hit_rate"] > 0
    st0 = sched.tree_cache.stats()
    out = run_one(sched, "cold", random_ids(600, 2109), 2)
    st = sched.tree_cache.stats()
    assert out["cached"] == 0
    assert (st["prompt_tokens"] - st0["prompt_tokens"], st["hit_tokens"] - st0["hit_tokens"]) == (600, 0)
    assert sched.get_metrics()["cache_hit_rate"] == 0.0
    assert_idle(sched)


def test_cache_hit_rate_gauge_is_not_reset_by_decode_batches(sched: Any) -> None:
    # sgl-project/sglang#26608: the cache_hit_rate gauge was set to 0 on every decode batch, so it
    # read ~0 while prefix caching worked. After a prefill that hit 512 of 700 prompt tokens and
    # 10 decode batches, /metrics' cache_hit_rate is still that prefill's rate (from the usage).
    ids = random_ids(700, 2105)
    assert sched.flush_cache()
    run_one(sched, "seed", ids[:600], 1)
    out = run_one(sched, "hit", ids, 10)
    assert out["cached"] == 2 * PAGE
    assert sched.get_metrics()["cache_hit_rate"] == pytest.approx(out["cached"] / len(ids))
    assert_idle(sched)


def test_flush_then_resend_is_served_cold(sched: Any) -> None:
    # vllm-project/vllm#57727: a prefix-cache reset answered success while another cache tier kept
    # serving the same blocks, so "reset, then send" measured a warm path. After a successful
    # flush the same prompt reports no cached tokens, the tree holds nothing until it finishes,
    # and its output equals the first (cold) run.
    ids = random_ids(520, 2106)
    assert sched.flush_cache()
    first = run_one(sched, "first", ids, 4)
    assert run_one(sched, "warm", ids, 1)["cached"] == 2 * PAGE
    assert sched.flush_cache()
    st = sched.tree_cache.stats()
    assert st["cached_blocks"] == 0 and st["resume_states"] == 0 and st["nodes"] == 0
    again = run_one(sched, "after-flush", ids, 4)
    assert again["cached"] == 0 and again["ids"] == first["ids"]
    assert_idle(sched)


def test_integrity_check_catches_a_page_freed_behind_the_tree(sched: Any) -> None:
    # sgl-project/mini-sglang#149: the radix cache's integrity check was a no-op, so a page held
    # by the tree and also free in the allocator passed the idle check. Here a cached block page
    # freed behind the tree's back fails check_integrity; taken back, the check passes again.
    assert sched.flush_cache()
    run_one(sched, "c", random_ids(300, 2107), 1)
    page = sched.tree_cache.root.children[next(iter(sched.tree_cache.root.children))].block_pages[0]
    ba = sched.cache_manager.block_alloc
    ba.free([page])
    with pytest.raises(AssertionError, match="block pages"):
        _integrity(sched)
    assert ba.alloc(1) == [page]
    _integrity(sched)
    assert_idle(sched)


@pytest.fixture(scope="module")
def nocache(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """As ``sched``, with ``--disable-radix-cache``."""
    return make_scheduler(
        sched_model_dir,
        max_total_tokens=16 * PAGE,
        chunked_prefill_size=PAGE,
        disable_overlap_schedule=True,
        disable_radix_cache=True,
    )


@pytest.mark.parametrize("abort_at", [None, 2], ids=["finish", "abort-mid-prefill"])
def test_disabled_radix_cache_with_chunked_prefill_frees_every_page(
    nocache: Any, cold: dict, abort_at
) -> None:
    # sgl-project/sglang#33996 (and sgl-project/sglang#984): with the radix cache disabled the
    # chunk cache lost the pages of earlier chunks, which were allocated again and never freed.
    # --disable-radix-cache, 256-token chunks, a 600-token prompt: its output equals the cold run
    # with the radix cache, it reports no cached tokens, and when it ends (finished, or aborted
    # after two chunks) every page and slot is free without a flush.
    s = nocache
    submit(s, "x", random_ids(600, 2101), 4)
    if abort_at is not None:
        for _ in range(abort_at):
            s.step()
        assert s.running[0].num_computed == abort_at * PAGE and len(s.running[0].block_pages) >= 2
        s.abort_request("x")
    out = drain(s)["x"]
    assert out["cached"] == 0
    if abort_at is None:
        assert out["ids"] == cold["long"]["ids"]
    else:
        assert out["finish"]["type"] == "abort"
    assert s.pool.block_alloc.used == 0 and s.pool.window_alloc.used == 0
    assert s.pool.req_slots.available == s.pool.req_slots.size


@pytest.fixture(scope="module")
def overlapped(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """As ``sched``, with the overlap schedule (a step launches a batch before the last one's
    result is processed)."""
    return make_scheduler(sched_model_dir, max_total_tokens=16 * PAGE, chunked_prefill_size=PAGE)


@pytest.mark.parametrize("steps", [2, 3])
def test_abort_with_a_chunk_in_flight_caches_only_computed_blocks(
    overlapped: Any, cold: dict, steps: int
) -> None:
    # sgl-project/sglang#35204: under the overlap schedule a request's committed KV length runs
    # ahead of the forward that computes it, and the cleanup of a request ended in that window
    # sized what it kept from the committed length. A 600-token prompt in 256-token chunks is
    # aborted while a chunk is still in flight: the tree keeps only the blocks already computed,
    # nothing stays locked, and a resend hits exactly those blocks with the cold run's output.
    s = overlapped
    ids = random_ids(600, 2101)
    assert s.flush_cache()
    submit(s, "a", ids, 4)
    for _ in range(steps):
        s.step()
    req = s.running[0]
    assert s.last_batch is not None and req.num_inflight > 0
    done = req.num_computed // PAGE
    s.abort_request("a")
    drain(s)
    st = s.tree_cache.stats()
    assert st["cached_blocks"] == done and st["locked_nodes"] == 0
    _integrity(s)
    again = run_one(s, "again", ids, 4)
    assert again["cached"] == done * PAGE and again["ids"] == cold["long"]["ids"]
    assert_idle(s)


# --- flags ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("hicache", ["--enable-hierarchical-cache", "--enable-hicache --hicache-ratio 2"])
def test_hierarchical_cache_with_the_radix_cache_disabled_is_refused(hicache: str) -> None:
    # sgl-project/sglang#9452: --enable-hierarchical-cache with --disable-radix-cache started and
    # then crashed the scheduler on the first request (the hierarchical cache extends the radix
    # tree); SGLang refuses the pair at start-up with a ValueError saying they are mutually
    # exclusive. Either flag alone is accepted (the hierarchical cache as a logged no-op).
    from sglang_flags_testutil import parse

    model = "--model-path deepseek-ai/DeepSeek-V4-Flash"
    with pytest.raises(
        ValueError, match="enable-hierarchical-cache and disable-radix-cache are mutually exclusive"
    ):
        parse(f"{model} {hicache} --disable-radix-cache")
    assert parse(f"{model} {hicache}").disable_radix_cache is False
    assert parse(f"{model} --disable-radix-cache").disable_radix_cache is True

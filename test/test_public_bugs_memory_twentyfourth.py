"""Public bug reports on the radix prefix cache's memory: LRU eviction order, how much an eviction
frees and how it is counted, prefix matching at page boundaries (partial pages, prompts shorter
than a page, an identical prompt), the pool's split into available / evictable / used tokens,
the cache-size and hit-rate gauges, and ``flush_cache`` while requests run.

In-process schedulers on the ``sched_model_dir`` checkpoint (fp32, 256-token pages; one with
512-token pages) and the radix tree over real ``PageAllocator`` s. Oracles: SGLang 0.5.23's own
code installed in the venv (its LRU priority, its page-aligned prefix match, its
``input_len - 1`` prefix cap), page arithmetic, the allocators' counts, a brute-force model of
the tree's contents (the distinct whole-block prefixes of what was cached), and the cold run of
the same request.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, step_outputs, submit
from sglang_source_testutil import sglang_function
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.radix_cache import RadixCache

pytestmark = pytest.mark.timeout(300)


def _sglang_source(module: str) -> str:
    """The text of an SGLang 0.5.23 module, read from the installed package without importing
    it or its parent packages (their imports need packages this venv does not have)."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, "sglang is not installed"
    root = Path(next(iter(spec.submodule_search_locations)))
    return root.joinpath(*module.split(".")[1:]).with_suffix(".py").read_text()


def _integrity(s: Any) -> None:
    """The cache manager's ownership invariant over every queued and running request."""
    s.cache_manager.check_integrity(list(s.running) + list(s.waiting))


def _sglang_prefix_cap(input_len: int) -> int:
    """SGLang 0.5.23's ``Req._compute_max_prefix_len`` for a plain request (no logprobs, not a
    diffusion model), run from its installed source."""
    cap = sglang_function("srt/managers/schedule_batch.py", "_compute_max_prefix_len", {}, "Req")
    req = SimpleNamespace(dllm_config=None, return_logprob=False, logprob_start_len=-1, is_dllm=lambda: False)
    return cap(req, input_len)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """A 12-page pool of 256-token pages."""
    return make_scheduler(sched_model_dir, max_total_tokens=12 * PAGE)


@pytest.fixture(scope="module")
def sched512(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """The same pool in 512-token pages (``--page-size 512``)."""
    return make_scheduler(sched_model_dir, max_total_tokens=12 * PAGE, page_size=512)


def _tree(
    num_pages: int = 64, page_size: int = 2, **kw: Any
) -> tuple[RadixCache, PageAllocator, PageAllocator]:
    """A radix tree over two real allocators (block pages, window pages)."""
    blocks, windows = PageAllocator(num_pages, "blocks"), PageAllocator(num_pages, "windows")
    return RadixCache(blocks, windows, page_size=page_size, **kw), blocks, windows


def _cache(tree: RadixCache, blocks: PageAllocator, windows: PageAllocator, key: list[int]) -> None:
    """Insert ``key`` (whole blocks) as a finished request does: fresh pages for every block, the
    duplicates of blocks the tree already had freed again."""
    n = len(key) // tree.page_size
    mine_b, mine_w = blocks.alloc_or_raise(n), windows.alloc_or_raise(n)
    tree_b, tree_w = tree.insert(key, mine_b, list(mine_w))
    blocks.free([m for m, t in zip(mine_b, tree_b) if m != t])
    windows.free([m for m, t in zip(mine_w, tree_w) if t is not None and m != t])


# --- eviction order and amount ------------------------------------------------------------------


def test_lru_priority_is_the_last_access_in_sglang() -> None:
    """Oracle for the LRU tests below: SGLang 0.5.23's default eviction strategy ranks a node by
    its ``last_access_time`` (touched on every match), not by when it was inserted."""
    src = _sglang_source("sglang.srt.mem_cache.evict_policy")
    lru = src[src.index("class LRUStrategy") :]
    lru = lru[: lru.index("class ", 10)]
    assert "return node.last_access_time" in lru


def test_a_prefix_that_keeps_being_hit_survives_newer_one_shot_prompts(sched: Any) -> None:
    """antonellof/ferrox#14 (a prefix cache documented as LRU evicted by insertion order, so a
    shared system prompt went as soon as newer one-shot prompts arrived): three 2-block prompts
    A, B, C are cached in that order, A is hit again, then requests that need the pool's free
    pages force evictions. B goes first, then C, and A, the oldest insertion but the most recent
    use, survives both; the runs on A give the tokens of A's cold run."""
    assert sched.flush_cache()
    heads = {k: random_ids(2 * PAGE, seed=2400 + i) for i, k in enumerate("ABC")}
    cold = run_one(sched, "coldA", heads["A"] + random_ids(30, seed=2410), 3)["ids"]
    assert sched.flush_cache()
    for k in "ABC":  # each caches its two prompt blocks (prompt + 3 tokens < 3 blocks)
        run_one(sched, f"seed{k}", heads[k] + random_ids(20, seed=2420 + ord(k)), 3)
    hit = run_one(sched, "hitA", heads["A"] + random_ids(30, seed=2410), 3)
    assert hit["cached"] == 2 * PAGE and hit["ids"] == cold

    def cached(k: str) -> int:
        return sched.tree_cache.match_prefix_len(heads[k] + [1])

    assert [cached(k) for k in "ABC"] == [2 * PAGE] * 3
    free = sched.pool.block_alloc.available
    # a request needing every free page plus two more: one 2-block prefix must go
    run_one(sched, "big1", random_ids((free + 2) * PAGE - 10, seed=2430), 1)
    assert [cached(k) for k in "ABC"] == [2 * PAGE, 0, 2 * PAGE]
    free = sched.pool.block_alloc.available
    run_one(sched, "big2", random_ids((free + 2) * PAGE - 10, seed=2431), 1)
    assert cached("A") == 2 * PAGE and cached("C") == 0
    again = run_one(sched, "againA", heads["A"] + random_ids(30, seed=2410), 3)
    assert again["cached"] == 2 * PAGE and again["ids"] == cold
    assert_idle(sched)


def test_evict_frees_what_was_asked_and_counts_what_it_freed() -> None:
    """sgl-project/sglang#4987 (an eviction loop whose counters never moved, so it freed an
    uncontrolled amount) and sgl-project/sglang#12983 (the evicted-token metric counted entries,
    not what was freed): over random inserts, matches, locks and evictions, ``evict(b, w)``
    frees ``min(b, evictable blocks)`` block pages, at least ``min(w, evictable resume states)``
    window pages, returns what the allocators got back, and ``stats()``'s ``evicted_*``
    counters grow by exactly that. Oracle: the allocators' ``used`` counts."""
    rng = random.Random(2440)
    for trial in range(60):
        tree, blocks, windows = _tree(resume_interval=rng.choice([1, 2]))
        locks = []
        for _ in range(40):
            x = rng.random()
            key = [rng.randint(0, 2) for _ in range(2 * rng.randint(1, 5))]
            if x < 0.4:
                if blocks.available >= 5 and windows.available >= 5:
                    _cache(tree, blocks, windows, key)
            elif x < 0.6:
                m = tree.match_prefix(key + [0])
                if m.num_tokens and rng.random() < 0.5:
                    tree.inc_lock_ref(m.last_node)
                    locks.append(m.last_node)
            elif x < 0.7 and locks:
                tree.dec_lock_ref(locks.pop(rng.randrange(len(locks))))
            else:
                eb, ew = tree.evictable_sizes()
                nb, nw = rng.randint(0, 4), rng.randint(0, 3)
                used_b, used_w = blocks.used, windows.used
                st = tree.stats()
                fb, fw = tree.evict(nb, nw)
                assert fb == min(nb, eb), (trial, nb, eb, fb)
                assert fw >= min(nw, ew), (trial, nw, ew, fw)
                assert (used_b - blocks.used, used_w - windows.used) == (fb, fw)
                st2 = tree.stats()
                assert st2["evicted_blocks"] - st["evicted_blocks"] == fb
                assert st2["evicted_resume_states"] - st["evicted_resume_states"] == fw
            assert (blocks.used, windows.used) == tree.total_pages()


def test_an_evicted_tail_leaves_the_contiguous_prefix_before_it() -> None:
    """llm-d/llm-d-inference-sim#705 (blocks still present after an earlier one was evicted were
    counted as a prefix hit): after the last block of a cached 3-block sequence is evicted the
    match is the first two blocks, after the resume state at their end is evicted too it is the
    first block, and nothing past a missing block is counted. Oracle: a brute-force prefix
    length (the longest run of leading blocks whose resume state at the end is live)."""
    ps = 2
    tree, blocks, windows = _tree(page_size=ps)
    seq = [1, 1, 2, 2, 3, 3]
    _cache(tree, blocks, windows, seq)
    assert tree.match_prefix(seq + [9]).num_tokens == 6
    assert tree.evict(1, 0) == (1, 1)
    assert tree.match_prefix(seq + [9]).num_tokens == 4 == tree.match_prefix_len(seq + [9])
    assert tree.evict(0, 1) == (0, 1)
    m = tree.match_prefix(seq + [9])
    assert m.num_tokens == 2 == tree.match_prefix_len(seq + [9]) and len(m.block_pages) == 1
    # a new sequence through the evicted tail: only its cached leading blocks count
    assert tree.match_prefix([1, 1, 2, 2, 3, 3, 4, 4]).num_tokens == 2
    assert tree.match_prefix([7, 7, 2, 2, 3, 3]).num_tokens == 0


# --- prefix matching at page boundaries ---------------------------------------------------------


def test_sglang_matches_whole_pages_and_keeps_the_last_prompt_token() -> None:
    """Oracle for the matching tests below: SGLang 0.5.23 caps a request's prefix match at
    ``input_len - 1`` (the last prompt token is always computed: it gives the first output
    token's logits) and its paged radix tree matches whole pages only."""
    sb = _sglang_source("sglang.srt.managers.schedule_batch")
    cap = sb[sb.index("def _compute_max_prefix_len") :]
    assert "max_prefix_len = input_len - 1" in cap[:400]
    rc = _sglang_source("sglang.srt.mem_cache.radix_cache")
    assert "aligned_len = len(self) // page_size * page_size" in rc  # RadixKey.page_aligned
    assert "key = key.page_aligned(self.page_size)" in rc  # applied before every match


@pytest.mark.parametrize("page", [PAGE, 2 * PAGE])
def test_partial_page_of_a_shared_prefix_is_not_reused(sched: Any, sched512: Any, page: int) -> None:
    """sgl-project/sglang#35635 (a paged radix cache reuses only the page-aligned part of a common
    prefix; the tokens of the last partial page are computed again): two prompts sharing 700
    tokens report ``700 // page * page`` cached tokens (512 with 256-token pages and with
    512-token pages alike), one sharing 300 tokens ``300 // page * page``, and each gives the
    tokens of its cold run on the 256-token scheduler."""
    s = sched if page == PAGE else sched512
    assert s.get_server_info()["page_size"] == page
    for shared, seed in ((700, 2450), (300, 2460)):
        head = random_ids(shared, seed=seed)
        a = head + random_ids(40, seed=seed + 1)
        b = head + random_ids(50, seed=seed + 2)
        assert sched.flush_cache()
        cold_b = run_one(sched, "cold", b, 3)["ids"]
        assert s.flush_cache()
        run_one(s, "a", a, 3)
        got = run_one(s, "b", b, 3)
        assert got["cached"] == shared // page * page, (page, shared)
        assert got["ids"] == cold_b
    assert_idle(s)
    assert_idle(sched)


def test_prompts_shorter_than_a_page_never_reach_the_tree() -> None:
    """sgl-project/sglang#24371 (a paged radix lookup computed a page key for a remaining key
    shorter than a page and indexed past its end): every read and write of the tree with a key
    shorter than one page (empty included) matches nothing, inserts nothing and raises nothing;
    a length that is not a whole number of pages is refused by ``insert`` naming its length.
    Oracle: page arithmetic (``len // page_size`` whole blocks)."""
    tree, blocks, windows = _tree(page_size=4)
    _cache(tree, blocks, windows, [5, 5, 5, 5])
    for key in ([], [5], [5, 5, 5]):
        m = tree.match_prefix(key)
        assert (m.num_tokens, m.block_pages, m.window_page, m.last_node) == (0, [], None, tree.root)
        assert tree.match_prefix_len(key) == 0
        assert tree.match_path(key) == []
        assert tree.find_node(key) == (tree.root, 0)
        assert tree.insert(key[:0], [], []) == ([], [])
    assert tree.total_pages() == (1, 1)
    with pytest.raises(ValueError, match="length 3 is not a multiple of page_size 4"):
        tree.insert([5, 5, 5], [], [])


def test_short_prompts_repeat_with_nothing_cached(sched: Any) -> None:
    """sgl-project/sglang#24371 on the serving path: a 100-token prompt sent three times reports
    0 cached tokens each time (less than a page is never cached), leaves the tree empty and
    gives the same tokens each time. Oracle: page arithmetic and the first (cold) run."""
    assert sched.flush_cache()
    p = random_ids(100, seed=2470)
    runs = [run_one(sched, f"short{i}", p, 4) for i in range(3)]
    assert [r["cached"] for r in runs] == [0, 0, 0]
    assert runs[1]["ids"] == runs[0]["ids"] == runs[2]["ids"]
    assert sched.tree_cache.total_pages() == (0, 0)
    assert_idle(sched)


@pytest.mark.parametrize("page", [PAGE, 2 * PAGE])
def test_an_identical_prompt_recomputes_its_last_token(sched: Any, sched512: Any, page: int) -> None:
    """mattn/tensai#221 (an identical second prompt matched the cache to its end, leaving nothing
    to prefill, and failed): a prompt of exactly 1024 tokens (whole pages) sent twice, and one of
    1025, report SGLang's prefix cap (``Req._compute_max_prefix_len``, run from its installed
    source: ``input_len - 1``) rounded down to whole pages the second time, and give the tokens
    of their first run."""
    s = sched if page == PAGE else sched512
    for n, seed in ((4 * PAGE, 2480), (4 * PAGE + 1, 2481)):
        assert s.flush_cache()
        p = random_ids(n, seed=seed)
        first = run_one(s, "first", p, 3)
        second = run_one(s, "second", p, 3)
        assert first["cached"] == 0
        assert second["cached"] == _sglang_prefix_cap(n) // page * page, (page, n)
        assert second["ids"] == first["ids"]
    assert_idle(s)


# --- flush_cache while requests run -------------------------------------------------------------


def test_flush_refused_while_requests_run_then_done_once_they_are_aborted(sched: Any) -> None:
    """radixark/miles#847 (``flush_cache`` kept timing out while stuck requests ran; aborting
    them first let it through): with three requests running and one queued, ``flush_cache`` is
    refused and changes nothing (the allocators' counts, the ownership invariant); once two are
    aborted and the others have finished it succeeds and every page and slot is free, and the
    request left to run gives the tokens of its cold run. Oracle: SGLang's rule that a flush is
    done only when the scheduler is idle (``is_fully_idle``)."""
    assert sched.flush_cache()
    keep = random_ids(300, seed=2490)
    cold = run_one(sched, "cold", keep, 8)["ids"]
    run_one(sched, "cached", random_ids(2 * PAGE + 5, seed=2491), 1)  # something to flush
    submit(sched, "keep", keep, 8)
    submit(sched, "x0", random_ids(600, seed=2492), 40)
    submit(sched, "x1", random_ids(500, seed=2493), 40)
    got = step_outputs(sched, 3)
    submit(sched, "x2", random_ids(400, seed=2494), 40)
    before = (sched.pool.block_alloc.used, sched.pool.window_alloc.used, sched.tree_cache.total_pages())
    assert sched.flush_cache() is False
    assert (
        sched.pool.block_alloc.used,
        sched.pool.window_alloc.used,
        sched.tree_cache.total_pages(),
    ) == before
    _integrity(sched)
    for rid in ("x0", "x1", "x2"):
        sched.abort_request(rid)
    got = drain(sched, got)
    assert {got[r]["finish"]["type"] for r in ("x0", "x1", "x2")} == {"abort"}
    assert got["keep"]["ids"] == cold
    assert sched.tree_cache.total_pages()[0] > 0
    assert_idle(sched)
    assert sched.tree_cache.total_pages() == (0, 0)


# --- what the gauges report ---------------------------------------------------------------------


def test_pool_split_sums_to_the_pool_and_usage_excludes_the_cache(sched: Any) -> None:
    """sgl-project/sglang#22726 (``token_usage`` counts only KV held by requests, so the pool looked
    empty while the radix cache filled it; the raw available / evictable / used token gauges were
    added): mid-run, with a running request locking a cached prefix beside an unlocked cached
    prompt, ``kv_available_tokens + kv_evictable_tokens + kv_used_tokens`` is the pool,
    ``kv_available_tokens`` is the free pages, ``kv_evictable_tokens`` the unlocked cached pages
    and ``token_usage = kv_used_tokens / max_total_num_tokens``; idle, usage is 0 and everything
    cached is evictable. Oracle: the allocators' and the tree's page counts."""
    assert sched.flush_cache()
    prefix = random_ids(2 * PAGE, seed=2500)
    run_one(sched, "seed", prefix + random_ids(10, seed=2501), 1)
    run_one(sched, "other", random_ids(PAGE + 20, seed=2502), 1)
    submit(sched, "run", prefix + random_ids(100, seed=2503), 30)
    got = step_outputs(sched, 3)
    assert [r.rid for r in sched.running] == ["run"]
    m = sched.get_metrics()
    total = sched.get_server_info()["max_total_num_tokens"]
    assert m["kv_available_tokens"] + m["kv_evictable_tokens"] + m["kv_used_tokens"] == total
    assert m["kv_available_tokens"] == sched.pool.block_alloc.available * PAGE
    evictable_blocks = sched.tree_cache.stats()["evictable_blocks"]
    assert m["kv_evictable_tokens"] == evictable_blocks * PAGE == PAGE  # "other"'s block; prefix locked
    assert m["kv_used_tokens"] == (sched.pool.block_alloc.used - evictable_blocks) * PAGE
    assert m["token_usage"] == pytest.approx(m["kv_used_tokens"] / total)
    assert m["token_usage"] > 0
    drain(sched, got)
    m = sched.get_metrics()
    assert m["token_usage"] == 0 and m["kv_used_tokens"] == 0
    assert m["kv_evictable_tokens"] == sched.tree_cache.total_pages()[0] * PAGE > 0
    assert_idle(sched)


def test_radix_cache_size_counts_each_shared_block_once(sched: Any) -> None:
    """sgl-project/sglang#28508 (the radix tree's own footprint, its total cached tokens, had no
    gauge; it must count a block shared by several requests once): three requests sharing a
    2-block prefix, each with its own third block, leave ``cached_blocks`` equal to the number
    of distinct whole-block prefixes of what they cached, ``cached_tokens = cached_blocks * 256``
    and, idle, the block pages the allocator has handed out. Oracle: a set of the distinct
    block prefixes, built from the token lists, and the allocator's ``used`` count."""
    assert sched.flush_cache()
    prefix = random_ids(2 * PAGE, seed=2510)
    seqs = []
    for i in range(3):
        prompt = prefix + random_ids(PAGE + 30, seed=2511 + i)
        out = run_one(sched, f"r{i}", prompt, 3)["ids"]
        seqs.append(prompt + out)
    distinct = {tuple(seq[: (k + 1) * PAGE]) for seq in seqs for k in range(len(seq) // PAGE)}
    st = sched.get_server_info()["radix_cache"]
    assert st["cached_blocks"] == len(distinct) == 5
    assert st["cached_tokens"] == st["cached_blocks"] * PAGE
    assert sched.pool.block_alloc.used == st["cached_blocks"]
    assert st["evictable_blocks"] == st["cached_blocks"] and st["locked_blocks"] == 0
    assert_idle(sched)


@pytest.mark.parametrize("overlap", [True, False])
def test_cache_hit_rate_gauge_is_each_prefill_batch_and_holds_through_decode(
    sched: Any, sched_model_dir: str, overlap: bool
) -> None:
    """sgl-project/sglang#12459 (``cache_hit_rate`` was reset to 0 at every decode step, so
    averages over time read near 0) and SGLang's per-batch prefill stats (the gauge is the hit
    tokens over the prompt tokens of the batch just processed, counted when it was scheduled):
    a 150-token prompt with no hit is admitted in one step and a prompt with a 512-token hit in
    the next, with and without the overlap schedule (where the second batch is scheduled before
    the first one's result is processed). The gauge reads 0 for the first batch, then the second
    batch's own ratio, and keeps it through the decode-only steps after it; it never reads a
    mix of the two batches. Oracle: the ratio of the counts each request reports."""
    s = (
        sched
        if overlap
        else make_scheduler(sched_model_dir, max_total_tokens=12 * PAGE, disable_overlap_schedule=True)
    )
    assert s.enable_overlap is overlap
    assert s.flush_cache()
    prefix = random_ids(2 * PAGE, seed=2520)
    run_one(s, "seed", prefix + random_ids(10, seed=2521), 1)
    a, b = prefix + random_ids(60, seed=2522), random_ids(150, seed=2523)
    seen = [s.get_metrics()["cache_hit_rate"]]
    submit(s, "b", b, 12)
    got = step_outputs(s, 1)
    seen.append(s.get_metrics()["cache_hit_rate"])
    submit(s, "a", a, 12)
    while s.has_work():
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            got.setdefault(rid, {"ids": []})["ids"] += out.output_ids[i]
        seen.append(s.get_metrics()["cache_hit_rate"])
    rate_a = 2 * PAGE / len(a)
    changes = [x for i, x in enumerate(seen) if i == 0 or x != seen[i - 1]]
    assert changes == [0.0, pytest.approx(rate_a)], (changes, rate_a)
    assert seen[-1] == pytest.approx(rate_a) and len(got["a"]["ids"]) == 12
    assert_idle(s)

"""The twenty-sixth set of public bug reports on the radix prefix cache (hit lengths at block
boundaries, chunked prefill with prefix hits, eviction limits and locks) and the scheduler
around it (abort and timeout of queued requests, flush while busy, retraction, requests the pool
can never hold).

Two levels:

* :class:`~sglang_v4.mem_cache.radix_cache.RadixCache` alone on small blocks (``page_size`` 4)
  with real page allocators. Oracle: counts derived by hand from the inserted sequences and the
  reports' stated expected values.
* The in-process scheduler on conftest's ``sched_model_dir`` checkpoint (CPU, float32, 256-token
  pages, greedy). Oracles: a cold run of the same request (after ``flush_cache``) for outputs,
  hit lengths derived by hand (``floor((len - 1) / 256) * 256``: at least one prompt token is
  always computed), and the allocators' own counts for pages.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import (
    PAGE,
    assert_idle,
    cold_output_ids,
    collect_outputs,
    drain,
    insert_finished,
    make_scheduler,
    radix_tree,
    run_one,
    submit,
)
from sglang_v4.managers.request_timeouts import WAITING_TIMEOUT_ENV, WAITING_TIMEOUT_MSG, abort_timed_out
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.radix_cache import RadixCache

pytestmark = pytest.mark.timeout(300)

P = 4  # block size of the tree-level tests


# --- tree level ----------------------------------------------------------------------------------


def _insert(c: RadixCache, ba: PageAllocator, wa: PageAllocator, key: list[int]) -> None:
    """``scheduler_testutil.insert_finished`` on this file's block size."""
    insert_finished(c, ba, wa, key, P)


def test_vllm_53749_a_shared_prefix_hits_its_whole_blocks_and_nothing_below_one() -> None:
    """vllm-project/vllm#53749 (the hit of a shared prefix of X tokens is ``floor(X / block) *
    block``: zero below one block; a control prompt of the same length with a different prefix
    hits 0). A 5-block sequence is cached; queries sharing its first X tokens (X = 0 .. 20) and
    then diverging hit exactly the report's predicted ``floor(X / 4) * 4``, through both
    ``match_prefix_len`` and ``match_prefix``; the length-matched control hits 0."""
    c, ba, wa = radix_tree(P)
    base = list(range(100, 100 + 5 * P))
    _insert(c, ba, wa, base)
    for x in range(0, 5 * P + 1):
        query = base[:x] + list(range(5000, 5000 + 2 * P))  # diverges right after X tokens
        want = (x // P) * P
        assert c.match_prefix_len(query) == want, x
        assert c.match_prefix(query).num_tokens == want, x
        control = list(range(7000, 7000 + x)) + list(range(5000, 5000 + 2 * P))
        assert c.match_prefix_len(control) == 0, x


def test_sglang_34144_eviction_skips_a_locked_path_and_its_shared_ancestors() -> None:
    """sgl-project/sglang#34144 (eviction must respect lock references: a locked node stays,
    after the unlock its tokens are evictable again). Two sequences share one block and then
    own two blocks each; ``b``'s leaf is locked (so is the shared block, its ancestor). Asking
    for every page frees only ``a``'s own 2 blocks; ``b`` still hits all 3 blocks; after the
    unlock the remaining 3 are evictable and go (counts derived by hand)."""
    c, ba, wa = radix_tree(P)
    shared = [9] * P
    a = shared + list(range(200, 200 + 2 * P))
    b = shared + list(range(300, 300 + 2 * P))
    _insert(c, ba, wa, a)
    _insert(c, ba, wa, b)
    assert ba.used == 5
    node = c.match_prefix(b + [0]).last_node
    c.inc_lock_ref(node)
    assert c.evict(num_block_pages=100)[0] == 2
    assert ba.used == 3
    assert c.match_prefix_len(a + [0]) == P  # the shared block stayed
    assert c.match_prefix_len(b + [0]) == 3 * P
    c.dec_lock_ref(node)
    assert c.evictable_sizes()[0] == 3
    assert c.evict(num_block_pages=100)[0] == 3 and ba.used == 0 and wa.used == 0


# --- scheduler level -----------------------------------------------------------------------------


def _run(s: Any, res: dict[str, dict], max_steps: int = 2000) -> None:
    for _ in range(max_steps):
        if not s.has_work():
            return
        collect_outputs(s.step(), res)
    raise AssertionError("scheduler did not finish")


def _hit(prompt_len: int) -> int:
    """The hit a fully cached prompt gets: whole blocks of its first ``prompt_len - 1`` tokens."""
    return (prompt_len - 1) // PAGE * PAGE


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """Four block pages (1024 tokens), 256-token prefill chunks, no overlap (each step's result
    is processed in that step)."""
    return make_scheduler(
        sched_model_dir, max_total_tokens=4 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )


def test_vllm_ascend_7965_a_prompt_of_whole_blocks_hits_one_block_less(sched: Any) -> None:
    """vllm-project/vllm-ascend#7965 (prompts of exactly ``n * block`` tokens hit one block less,
    ``n * block + 1`` the full ``n`` blocks: the report's table, 1024 -> 0, 1025 -> 1024,
    2047 -> 1024, 4096 -> 3072, because at least one token is computed). With both blocks of a
    2-page prefix cached, prompts of 256, 257, 511 and 512 tokens hit 0, 256, 256 and 256
    tokens (the table at a 256-token block)."""
    base = random_ids(2 * PAGE + 10, seed=7965)
    lengths = {PAGE: 0, PAGE + 1: PAGE, 2 * PAGE - 1: PAGE, 2 * PAGE: PAGE}
    assert sched.flush_cache()
    run_one(sched, "seed", base, 1)
    assert sched.tree_cache.total_pages()[0] == 2
    for n, want in lengths.items():
        assert run_one(sched, f"p{n}", base[:n], 1)["cached"] == want == _hit(n), n
    assert_idle(sched)


def test_aisimulate_197_a_warm_multi_chunk_prompt_reuses_beyond_its_first_chunk(sched: Any) -> None:
    """ai-dynamo/aisimulate#197 (a second identical multi-chunk prompt must reuse the cached
    prefix beyond the first chunk: the warm request computes at most one block, not everything
    past chunk one); llm-d/llm-d-inference-sim#430 (the hit rate is token-level: cached tokens
    over prompt tokens, not whole blocks over blocks). A 552-token prompt in 256-token chunks:
    cold, it computes all 552 tokens; warm, it hits 512 and computes the 40 left, with the cold
    run's output; the cache's counters grow by 512 hit tokens over 1104 prompt tokens."""
    prompt = random_ids(2 * PAGE + 40, seed=197)
    assert sched.flush_cache()
    done = sched.prefill_tokens_done
    st0 = sched.tree_cache.stats()
    cold = run_one(sched, "cold", prompt, 2)
    assert cold["cached"] == 0 and sched.prefill_tokens_done - done == len(prompt)
    done = sched.prefill_tokens_done
    warm = run_one(sched, "warm", prompt, 2)
    assert warm["cached"] == 2 * PAGE
    assert sched.prefill_tokens_done - done == len(prompt) - 2 * PAGE <= PAGE
    assert warm["ids"] == cold["ids"]
    st = sched.tree_cache.stats()
    assert st["hit_tokens"] - st0["hit_tokens"] == 2 * PAGE
    assert st["prompt_tokens"] - st0["prompt_tokens"] == 2 * len(prompt)
    assert_idle(sched)


def test_inference_sim_196_chunked_prefill_caches_blocks_at_absolute_offsets(sched: Any) -> None:
    """inference-sim/inference-sim#196 (the blocks of later prefill chunks were keyed by their
    offset in the chunk, not in the prompt, so later requests missed or matched the wrong
    prefix). After ``a`` (552 tokens, three 256-token chunks) ran: ``b`` sharing its first 306
    tokens hits 256 (1 whole block) with its cold run's output; ``c`` whose first block is
    ``a``'s second block (a chunk-relative key) matches nothing."""
    a = random_ids(2 * PAGE + 40, seed=196)
    b = a[: PAGE + 50] + random_ids(30, seed=1961)
    c = a[PAGE : 2 * PAGE] + random_ids(40, seed=1962)
    cold_b = cold_output_ids(sched, "cb", b, 2)
    run_one(sched, "a", a, 1)
    rb = run_one(sched, "b", b, 2)
    assert rb["cached"] == PAGE and rb["ids"] == cold_b
    assert sched.tree_cache.match_prefix_len(c) == 0
    assert sched.tree_cache.match_prefix_len(a) == 2 * PAGE  # a's own blocks are all there
    assert_idle(sched)


def test_sglang_418_a_prefilled_prompt_is_cached_before_its_request_finishes(sched: Any) -> None:
    """sgl-project/sglang#418 (a prefilled request's prompt goes into the radix cache before it
    starts decoding, so a request with the same prefix sent meanwhile hits it). ``a`` (286
    tokens) is decoding 8 tokens when ``b`` with the same prompt arrives: ``b`` hits 256
    tokens while ``a`` still runs, and both outputs equal their cold runs."""
    prompt = random_ids(PAGE + 30, seed=418)
    cold_a = cold_output_ids(sched, "ca", prompt, 8)
    submit(sched, "a", prompt, 8)
    res: dict[str, dict] = {}
    for _ in range(10):
        collect_outputs(sched.step(), res)
        if res.get("a", {}).get("ids"):
            break
    assert res["a"]["ids"] and res["a"]["finish"] is None  # decoding, not done
    submit(sched, "b", prompt, 2)
    collect_outputs(sched.step(), res)
    assert {r.rid for r in sched.running} >= {"a", "b"}
    _run(sched, res)
    assert res["b"]["cached"] == _hit(len(prompt)) == PAGE
    assert res["a"]["ids"] == cold_a and res["b"]["ids"] == cold_a[:2]  # greedy: b's cold run
    assert_idle(sched)


def test_sglang_103_flush_cache_is_refused_while_a_request_holds_the_tree(sched: Any) -> None:
    """sgl-project/sglang#103 (``flush_cache`` empties the cache only when no request is running;
    otherwise it refuses and changes nothing). A request that hit a cached block is mid-decode:
    the flush returns False, the cached blocks and locks are unchanged and the request's output
    equals its cold run; once it is done the flush succeeds and nothing stays cached."""
    prompt = random_ids(PAGE + 30, seed=103)
    cold = cold_output_ids(sched, "c", prompt, 4)
    run_one(sched, "seed", prompt, 1)
    submit(sched, "r", prompt, 4)
    res: dict[str, dict] = {}
    collect_outputs(sched.step(), res)
    assert sched.running and sched.running[0].rid == "r"
    before = sched.tree_cache.stats()
    assert before["locked_blocks"] == 1
    assert sched.flush_cache() is False
    after = sched.tree_cache.stats()
    assert (after["cached_blocks"], after["locked_blocks"]) == (before["cached_blocks"], 1)
    _run(sched, res)
    assert res["r"]["cached"] == PAGE and res["r"]["ids"] == cold
    assert sched.flush_cache() is True
    assert sched.tree_cache.total_pages() == (0, 0)
    assert_idle(sched)


def _a_runs_b_waits(
    sched: Any, monkeypatch: pytest.MonkeyPatch, pa: list[int], pb: list[int]
) -> dict[str, dict]:
    """With one running request at most, submit ``a`` (prompt ``pa``) then ``b`` (``pb``), 4 new
    tokens each, and take one step: ``a`` runs, ``b`` waits. Returns the outputs collected so far
    (see ``collect_outputs``)."""
    monkeypatch.setattr(sched, "max_running_requests", 1)
    submit(sched, "a", pa, 4)
    submit(sched, "b", pb, 4)
    res: dict[str, dict] = {}
    collect_outputs(sched.step(), res)
    return res


def test_sglang_8587_aborting_a_queued_request_leaves_no_page_and_others_unaffected(
    sched: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sgl-project/sglang#8587 (a request aborted while still in the waiting queue must leave
    nothing allocated). One running request at most: ``a`` runs, ``b`` waits and is aborted.
    ``b`` is reported aborted with no token, the page counts do not move at the abort, ``a``
    gets its cold run's tokens, and after a flush every page and slot is free."""
    pa, pb = random_ids(100, seed=8587), random_ids(100, seed=8588)
    cold_a = cold_output_ids(sched, "ca", pa, 4)
    res = _a_runs_b_waits(sched, monkeypatch, pa, pb)
    assert [r.rid for r in sched.waiting] == ["b"]
    p = sched.pool
    used = (p.block_alloc.used, p.window_alloc.used, p.req_slots.available)
    sched.abort_request("b")
    assert (p.block_alloc.used, p.window_alloc.used, p.req_slots.available) == used
    _run(sched, res)
    assert res["b"]["finish"]["type"] == "abort" and res["b"]["ids"] == []
    assert res["a"]["ids"] == cold_a
    assert_idle(sched)


def test_sglang_31767_a_waiting_timeout_releases_like_an_explicit_abort(
    sched: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sgl-project/sglang#31767 (the waiting-timeout path must clean up as the explicit abort
    does). With ``SGLANG_REQ_WAITING_TIMEOUT`` set and one running request at most, ``b`` is
    past its waiting limit while ``a`` runs: exactly ``b`` is ended, with a 503 abort carrying
    the timeout message and no token; nothing is allocated for it, ``a``'s output equals its
    cold run, and no page or slot is left in use."""
    pa, pb = random_ids(100, seed=31767), random_ids(100, seed=31768)
    cold_a = cold_output_ids(sched, "ca", pa, 4)
    res = _a_runs_b_waits(sched, monkeypatch, pa, pb)
    p = sched.pool
    used = (p.block_alloc.used, p.window_alloc.used, p.req_slots.available)
    monkeypatch.setenv(WAITING_TIMEOUT_ENV, "5")
    assert abort_timed_out(sched, now=time.monotonic() + 60) == 1
    monkeypatch.delenv(WAITING_TIMEOUT_ENV)
    assert (p.block_alloc.used, p.window_alloc.used, p.req_slots.available) == used
    assert [r.rid for r in sched.running] == ["a"] and not sched.waiting
    _run(sched, res)
    fin = res["b"]["finish"]
    assert fin["type"] == "abort" and fin["status_code"] == 503 and fin["message"] == WAITING_TIMEOUT_MSG
    assert res["b"]["ids"] == []
    assert res["a"]["ids"] == cold_a
    assert_idle(sched)


def test_vllm_rbln_957_a_prompt_above_the_pool_is_rejected_and_the_queue_moves(sched: Any) -> None:
    """RBLN-SW/vllm-rbln#957 and vllm-project/vllm#35570 (a prompt longer than the usable KV
    pool was admitted and then never scheduled, freezing every request behind it; it should be
    rejected with an error and the rest served). Four 256-token pages (1024 tokens): a
    1024-token prompt (no room for one generated token) is finished with a 400 abort naming
    the KV cache pool and no token, and the request queued behind it gets its cold run's
    tokens."""
    big, small = random_ids(4 * PAGE, seed=957), random_ids(100, seed=9571)
    cold = cold_output_ids(sched, "c", small, 3)
    submit(sched, "big", big, 4)
    submit(sched, "small", small, 3)
    res = drain(sched)
    fin = res["big"]["finish"]
    assert fin["type"] == "abort" and fin["status_code"] == 400 and "KV cache pool" in fin["message"]
    assert res["big"]["ids"] == []
    assert res["small"]["ids"] == cold
    assert_idle(sched)


def test_vllm_56028_a_request_at_the_pool_limit_is_never_re_prefilled(sched: Any) -> None:
    """vllm-project/vllm#56028 (a request whose footprint exceeds the pool preempted itself and
    was prefilled again from token zero, forever). Four 256-token pages: a 1020-token prompt
    asking for 1000 tokens can hold 4 more positions; it finishes by length with exactly
    ``1024 - 1020 = 4`` tokens (SGLang's ``min(max_new_tokens, room)``), is never retracted,
    and its prompt is prefilled exactly once (prefill tokens counted = 1020)."""
    prompt = random_ids(4 * PAGE - 4, seed=56028)
    assert sched.flush_cache()
    done, retractions = sched.prefill_tokens_done, sched.num_retractions
    r = run_one(sched, "r", prompt, 1000)
    assert r["finish"]["type"] == "length" and len(r["ids"]) == 4 * PAGE - len(prompt)
    assert sched.num_retractions == retractions
    assert sched.prefill_tokens_done - done == len(prompt)
    assert_idle(sched)


def _private_pages(reqs: list[Any]) -> tuple[int, int]:
    """Block and window pages the requests hold themselves (not the tree's)."""
    blocks = sum(len(r.block_pages) - r.num_tree_blocks for r in reqs)
    windows = sum(len(set(r.window_pages) - set(r.tree_window_spans)) for r in reqs)
    return blocks, windows


def test_sglang_22151_a_retracted_request_gives_back_every_page_it_held(sched: Any) -> None:
    """sgl-project/sglang#22151 (on retraction the pages a request had allocated beyond what it
    committed to the cache were kept) and sgl-project/sglang#18705 (aborting a request that sat
    retracted in the queue leaked what it held). Four pages, three requests of 250 prompt
    tokens and 8 new ones (2 pages each at the end: 6 > 4) force retractions; the first
    retracted request is aborted while queued. After every step each queued request holds no
    page and no slot, and the allocators' used counts equal the tree's pages plus the running
    requests' own (counted from the requests); the aborted one is reported aborted, the others
    finish with their 8 tokens, and nothing is left in use."""
    prompts = {f"r{i}": random_ids(250, seed=22151 + i) for i in range(3)}
    assert sched.flush_cache()
    for k, p in prompts.items():
        submit(sched, k, p, 8)
    retractions = sched.num_retractions
    res: dict[str, dict] = {}
    ba, wa = sched.pool.block_alloc, sched.pool.window_alloc
    aborted = None
    for _ in range(500):
        if not sched.has_work():
            break
        collect_outputs(sched.step(), res)
        if aborted is None:
            retracted = [q for q in sched.waiting if q.num_retractions > 0]
            if retracted:
                aborted = retracted[0].rid
                sched.abort_request(aborted)
        for q in sched.waiting:
            assert q.block_pages == [] and q.req_pool_idx is None, q.rid
        tb, tw = sched.tree_cache.total_pages()
        pb, pw = _private_pages(list(sched.running))
        assert (ba.used, wa.used) == (tb + pb, tw + pw)
    assert sched.num_retractions > retractions and aborted is not None
    assert res[aborted]["finish"]["type"] == "abort"
    for k in prompts.keys() - {aborted}:
        assert len(res[k]["ids"]) == 8 and res[k]["finish"]["type"] == "length", k
    assert_idle(sched)


def test_sglang_2442_identical_prompts_arriving_together_share_one_prefill(sched: Any) -> None:
    """sgl-project/sglang#2442 (in-batch prefix caching: of several new requests sharing a
    prefix not cached yet, one is scheduled and the others wait for its blocks instead of each
    computing the whole prompt). Two requests with the same 542-token prompt arrive in one
    step: one computes all 542 tokens, the other hits 512 (2 whole blocks) and computes 30
    (prefill tokens counted: 542 + 30, not 2 * 542); both outputs equal the cold run."""
    prompt = random_ids(2 * PAGE + 30, seed=2442)
    cold = cold_output_ids(sched, "c", prompt, 2)
    done = sched.prefill_tokens_done
    submit(sched, "x", prompt, 2)
    submit(sched, "y", prompt, 2)
    res = drain(sched)
    assert sorted(res[k]["cached"] for k in ("x", "y")) == [0, 2 * PAGE]
    assert sched.prefill_tokens_done - done == len(prompt) + len(prompt) - 2 * PAGE
    assert res["x"]["ids"] == cold and res["y"]["ids"] == cold
    assert_idle(sched)


def test_fak_12414_eviction_stops_once_the_shortfall_is_met(sched: Any) -> None:
    """anthony-chaudhary/fak#12414 and sgl-project/sglang#32016 (the eviction loop ran to a
    fixed budget instead of stopping once the pending allocation fits, destroying warm
    prefixes). Four pages, two of them cached blocks of one prompt, two free: asking for 2
    free pages evicts nothing; asking for 3 evicts exactly 1 block (the last, LRU leaf), and
    the prompt sent again hits its first block with its cold run's output."""
    prompt = random_ids(2 * PAGE + 10, seed=12414)
    cold = cold_output_ids(sched, "c", prompt, 2)
    run_one(sched, "seed", prompt, 2)
    ba, tc = sched.pool.block_alloc, sched.tree_cache
    assert tc.total_pages()[0] == 2 and ba.available == 2
    evicted = tc.stats()["evicted_blocks"]
    assert sched.cache_manager.evict(2, 0) and tc.stats()["evicted_blocks"] == evicted
    assert sched.cache_manager.evict(3, 0)
    assert tc.stats()["evicted_blocks"] - evicted == 1
    assert (ba.available, tc.total_pages()[0]) == (3, 1)
    again = run_one(sched, "again", prompt, 2)
    assert again["cached"] == PAGE and again["ids"] == cold
    assert_idle(sched)

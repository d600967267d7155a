"""The twenty-fifth set of public bug reports on the radix prefix cache (eviction order, lock
counts across splits and namespaces, page reuse), the scheduler around it (abort and priority
preemption in the middle of a chunked prefill, re-admission order) and the page accounting.

Two levels:

* :class:`~sglang_v4.mem_cache.radix_cache.RadixCache` alone on small blocks (``page_size`` 4)
  with real page allocators. Oracle: counts derived by hand from the inserted sequences (blocks,
  resume states, locks), the allocators' own counts, and the reports' stated expected values.
* The in-process scheduler on conftest's ``sched_model_dir`` checkpoint (CPU, float32, 256-token
  pages, greedy). Oracles: a cold run of the same request (after ``flush_cache``) for outputs;
  ``CacheManager.check_integrity`` and the allocators' free counts (``assert_idle``) for pages.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import (
    PAGE,
    assert_idle,
    cold_output_ids,
    collect_outputs,
    make_scheduler,
    radix_tree,
    run_one,
    submit,
)
from sglang_v4.managers.schedule_policy import priority_preemption
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.radix_cache import RadixCache, RadixKey, TreeNode

pytestmark = pytest.mark.timeout(300)

P = 4  # block size of the tree-level tests


# --- tree level ----------------------------------------------------------------------------------


def _insert(
    c: RadixCache, ba: PageAllocator, wa: PageAllocator, key: list[int] | RadixKey, windows: bool = True
) -> list[int]:
    """Insert ``key`` (whole blocks) as a finished request would: fresh block pages, a resume
    state at every block end (none with ``windows=False``), duplicates freed as the ownership
    contract says. Returns the block pages the caller allocated."""
    tokens = key.token_ids if isinstance(key, RadixKey) else key
    nb = len(tokens) // P
    blocks = ba.alloc_or_raise(nb)
    wins: list[int | None] = list(wa.alloc_or_raise(nb)) if windows else [None] * nb
    tb, tw = c.insert(key, blocks, wins)
    ba.free([b for b, t in zip(blocks, tb) if t != b])
    wa.free([w for w, t in zip(wins, tw) if w is not None and t != w])
    return blocks


def _children_consistent(c: RadixCache) -> int:
    """Every live node is stored in its parent's children under its own key (first block, after
    its namespace tag for a first block); returns the number of nodes walked."""
    n = 0
    stack: list[TreeNode] = list(c.root.children.values())
    while stack:
        node = stack.pop()
        first = node.edge[: P * 4]
        key = node.tag + first if node.depth == 0 else first
        assert node.parent.children.get(key) is node, node
        assert node.alive
        n += 1
        stack.extend(node.children.values())
    return n


def test_llm_d_sim_704_eviction_takes_the_last_block_of_a_chain_first() -> None:
    """llm-d/llm-d-inference-sim#704 (eviction picked any block of a finished request's chain,
    often its first, leaving blocks no prefix can reach; vLLM evicts the last block first).
    A three-block sequence is cached; evicting one block page at a time drops block 3, then 2,
    then 1: the same prompt then hits 2 blocks, then 1, then none (the report's stated vLLM
    behaviour), and the allocator gets back exactly one page each time."""
    c, ba, wa = radix_tree(P)
    seq = list(range(100, 100 + 3 * P))
    _insert(c, ba, wa, seq)
    assert (ba.used, wa.used) == (3, 3)
    for left in (2, 1, 0):
        freed_b, _ = c.evict(num_block_pages=1)
        assert freed_b == 1
        assert ba.used == left and wa.used == left
        assert c.match_prefix_len(seq + [0]) == left * P
        m = c.match_prefix(seq + [0])
        assert m.num_tokens == left * P and len(m.block_pages) == left


def test_lmcache_443_eviction_never_orphans_blocks_after_a_shared_prefix() -> None:
    """LMCache/LMCache#443 (evicting a middle block, ``efgh`` of ``abcd|efgh|ijkl|mnop``, leaves
    the blocks after it cached but unusable). Two sequences share one block and then differ by
    two blocks each: under pressure for two pages only leaf tails go, so the shared block
    stays, every cached block is still reachable from the root, the older branch (LRU) is the
    one dropped: its sequence still hits the shared block, the other all 3 blocks (counts
    derived by hand)."""
    c, ba, wa = radix_tree(P)
    shared = [7] * P
    a = shared + list(range(200, 200 + 2 * P))
    b = shared + list(range(300, 300 + 2 * P))
    _insert(c, ba, wa, a)
    _insert(c, ba, wa, b)
    assert ba.used == 5  # 1 shared + 2 + 2
    assert c.evict(num_block_pages=2)[0] == 2
    assert ba.used == 3
    # reachable blocks (walk from the root) == blocks the allocator holds: no orphan
    reach = 0
    stack: list[TreeNode] = list(c.root.children.values())
    while stack:
        n = stack.pop()
        reach += n.num_blocks
        stack.extend(n.children.values())
    assert reach == ba.used == c.stats()["cached_blocks"]
    # a's branch is the least recently used (b's insert touched the shared block and b's own):
    # its two blocks go, the shared block stays
    assert c.match_prefix_len(a + [0]) == P
    assert c.match_prefix_len(b + [0]) == 3 * P


def test_kvcached_362_an_evicted_page_reused_for_another_prefix_no_longer_matches() -> None:
    """ovg-project/kvcached#362 and vllm-project/vllm#4761 (a block evicted from the prefix
    cache kept its hash, so a page re-allocated to a different prefix could still be served
    for the old one). Sequence A is cached, fully evicted, and its pages go to sequence B:
    A then matches nothing, B matches all of its blocks with exactly the pages it was given."""
    c, ba, wa = radix_tree(P, n=2)  # two pages: B must reuse A's
    a = list(range(10, 10 + 2 * P))
    bseq = list(range(50, 50 + 2 * P))
    a_pages = _insert(c, ba, wa, a)
    assert c.evict(num_block_pages=2) == (2, 2)
    b_pages = _insert(c, ba, wa, bseq)
    assert sorted(b_pages) == sorted(a_pages)  # the same page ids, now B's
    assert c.match_prefix_len(a + [0]) == 0
    assert c.match_prefix(a + [0]).num_tokens == 0
    m = c.match_prefix(bseq + [0])
    assert m.num_tokens == 2 * P and m.block_pages == b_pages


def test_mini_sglang_45_a_lock_count_back_at_zero_makes_the_path_evictable() -> None:
    """sgl-project/mini-sglang#45 (an assertion refused a lock count reaching 0, so the branch
    that makes a node evictable again was dead). Two requests lock the same 3-block path:
    after the first unlock all 3 blocks stay locked; after the second they are evictable
    again and ``evict`` frees all 3 (counts derived from the inserted sequence)."""
    c, ba, wa = radix_tree(P)
    seq = list(range(1, 1 + 3 * P))
    _insert(c, ba, wa, seq)
    node = c.match_prefix(seq + [0]).last_node
    c.inc_lock_ref(node)
    c.inc_lock_ref(node)
    c.dec_lock_ref(node)
    assert c.evictable_sizes() == (0, 0) and c.stats()["locked_blocks"] == 3
    assert c.evict(num_block_pages=3) == (0, 0)
    c.dec_lock_ref(node)
    assert node.lock_ref == 0 and c.stats()["locked_blocks"] == 0
    assert c.evictable_sizes() == (3, 3)
    assert c.evict(num_block_pages=3) == (3, 3)
    assert (ba.used, wa.used) == (0, 0)


def test_sglang_27147_resume_state_adopted_while_locked_keeps_counts_balanced() -> None:
    """sgl-project/sglang#27147 (a lock taken on a node without its state; the state was
    revived before the unlock, which then released a lock never taken and broke the counts).
    A 2-block path is cached without resume states and locked (``find_node`` ignores resume
    states); a second insert brings resume states for both block ends while it is locked. They
    count as locked (2) at once; after the unlock nothing is locked and all 2 blocks and 2
    resume states are evictable, and a flush returns every page."""
    c, ba, wa = radix_tree(P)
    seq = list(range(40, 40 + 2 * P))
    _insert(c, ba, wa, seq, windows=False)
    assert c.match_prefix_len(seq + [0]) == 0  # no resume state: no usable hit
    node, nblocks = c.find_node(seq)
    assert nblocks == 2
    c.inc_lock_ref(node)
    st = c.stats()
    assert (st["locked_blocks"], st["locked_resume_states"]) == (2, 0)
    _insert(c, ba, wa, seq)  # adopts the 2 window pages into the locked node
    st = c.stats()
    assert (st["locked_blocks"], st["locked_resume_states"], st["resume_states"]) == (2, 2, 2)
    assert c.evictable_sizes() == (0, 0)
    c.dec_lock_ref(node)
    st = c.stats()
    assert (st["locked_blocks"], st["locked_resume_states"], st["locked_nodes"]) == (0, 0, 0)
    assert c.evictable_sizes() == (2, 2)
    assert c.flush() and (ba.used, wa.used) == (0, 0)


def test_sglang_38480_a_lock_taken_before_a_split_is_released_on_every_fragment() -> None:
    """sgl-project/sglang#38480 (a node split while locked: the new prefix fragment did not
    inherit the lock, or the release missed it). A 3-block node is locked, then a 1-block
    match splits it into 1 + 2 blocks: both fragments count as locked (2 nodes, 3 blocks).
    Releasing the lock through the original node unlocks both: no lock is left and all
    3 blocks can be evicted (counts derived by hand)."""
    c, ba, wa = radix_tree(P)
    seq = list(range(60, 60 + 3 * P))
    _insert(c, ba, wa, seq)
    node = c.match_prefix(seq + [0]).last_node
    c.inc_lock_ref(node)
    upper = c.match_prefix(seq[:P] + [0]).last_node
    assert upper is not node and upper is node.parent
    st = c.stats()
    assert (st["nodes"], st["locked_nodes"], st["locked_blocks"]) == (2, 2, 3)
    assert c.evict(num_block_pages=1) == (0, 0)  # nothing evictable while locked
    c.dec_lock_ref(node)
    assert upper.lock_ref == 0 and node.lock_ref == 0
    st = c.stats()
    assert (st["locked_nodes"], st["locked_blocks"], st["locked_resume_states"]) == (0, 0, 0)
    assert c.evictable_sizes() == (3, 3)
    assert c.evict(num_block_pages=3)[0] == 3 and ba.used == 0


def test_sglang_36696_a_split_node_stays_under_its_own_key_in_a_namespace() -> None:
    """sgl-project/sglang#36696 (a split node was registered in its parent under a stale key;
    eviction later found the tree corrupt: "parent does not have child key"). Two sequences
    in namespace ``s1`` share their first block (the first node is split), one sequence with
    the same tokens lives in namespace ``s2``; then leaves are evicted one page at a time until
    the tree is empty. After every step each node sits in its parent under its own key, and
    the namespaces never see each other's blocks (hits derived by hand)."""
    c, ba, wa = radix_tree(P)
    a = list(range(500, 500 + 3 * P))
    b = a[:P] + list(range(900, 900 + 2 * P))
    _insert(c, ba, wa, RadixKey(a, "s1"))
    _insert(c, ba, wa, RadixKey(b, "s1"))  # splits s1's node after its first block
    _insert(c, ba, wa, RadixKey(a, "s2"))
    assert _children_consistent(c) == 4  # s1: shared + 2 branches; s2: one node
    assert c.match_prefix_len(RadixKey(b + [0], "s2")) == P  # s2 holds a, whose 1st block is b's
    assert c.match_prefix_len(RadixKey(b + [0], "s1")) == 3 * P
    assert c.match_prefix_len(RadixKey(b + [0], None)) == 0
    total = ba.used
    assert total == 1 + 2 + 2 + 3
    for left in range(total - 1, -1, -1):
        assert c.evict(num_block_pages=1)[0] == 1
        assert ba.used == left == c.stats()["cached_blocks"]
        _children_consistent(c)
    assert c.match_prefix_len(RadixKey(a + [0], "s1")) == 0


# --- scheduler level -----------------------------------------------------------------------------


def _integrity(s: Any) -> None:
    s.cache_manager.check_integrity(list(s.running) + list(s.waiting))


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """16 block pages, 256-token prefill chunks, no overlap (each step's result is processed in
    that step)."""
    return make_scheduler(
        sched_model_dir, max_total_tokens=16 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )


@pytest.fixture(scope="module")
def prio(sched_model_dir: str) -> Any:
    """As ``sched`` with priority scheduling (higher values first, preemption threshold 10) and
    one running request at most."""
    return make_scheduler(
        sched_model_dir,
        max_total_tokens=16 * PAGE,
        chunked_prefill_size=PAGE,
        disable_overlap_schedule=True,
        enable_priority_scheduling=True,
        max_running_requests=1,
    )


def test_sglang_jax_1471_an_aborted_chunked_prefill_schedules_no_further_chunk(sched: Any) -> None:
    """sgl-project/sglang-jax#1471 and #984 (an abort did not reach the request mid chunked
    prefill: it kept its slot and KV, or had further chunks scheduled). A 1000-token prompt is
    aborted after its first 256-token chunk: no later step prefills a token, the abort is
    reported with no output token, every page and slot is free, and a request sent next gets
    its cold run's tokens."""
    prompt, nxt = random_ids(1000, seed=14711), random_ids(300, seed=14712)
    cold = cold_output_ids(sched, "cold", nxt, 4)
    submit(sched, "long", prompt, 4)
    res: dict[str, dict] = {}
    collect_outputs(sched.step(), res)
    done = sched.prefill_tokens_done
    assert sched.running and sched.running[0].num_computed < len(prompt)  # mid-prefill
    sched.abort_request("long")
    for _ in range(5):
        collect_outputs(sched.step(), res)
    assert sched.prefill_tokens_done == done  # no chunk after the abort
    assert res["long"]["finish"]["type"] == "abort" and res["long"]["ids"] == []
    assert not sched.running and not sched.waiting
    _integrity(sched)
    p = sched.pool
    assert p.req_slots.available == p.req_slots.size
    assert p.block_alloc.used == sched.tree_cache.total_pages()[0]
    assert run_one(sched, "next", nxt, 4)["ids"] == cold
    assert_idle(sched)


def test_sglang_29471_a_request_preempted_mid_chunked_prefill_resumes_cold_equal(prio: Any) -> None:
    """sgl-project/sglang#29471 (a request retracted and later resumed crashed the scheduler
    in ``cache_unfinished_req`` or had to recompute what the tree still held). A low-priority
    1000-token prompt is preempted by a high-priority one after its first chunk (one running
    request at most): both finish, with their cold runs' tokens; the resumed request reports
    the cache hit of its first admission (0: nothing was cached), locks stay balanced, and no
    page is left in use."""
    low, high = random_ids(1000, seed=29471), random_ids(300, seed=29472)
    cold_low, cold_high = cold_output_ids(prio, "cl", low, 5), cold_output_ids(prio, "ch", high, 5)
    submit(prio, "low", low, 5, priority=0)
    res: dict[str, dict] = {}
    collect_outputs(prio.step(), res)
    assert prio.running[0].rid == "low" and 0 < prio.running[0].num_computed < len(low)
    submit(prio, "high", high, 5, priority=100)
    order: list[str] = []
    for _ in range(200):
        if not prio.has_work():
            break
        out = prio.step()
        collect_outputs(out, res)
        order += [rid for i, rid in enumerate(out.rids if out else []) if out.finished_reasons[i]]
        _integrity(prio)
    assert order == ["high", "low"]
    assert prio.num_retractions >= 1
    assert res["high"]["ids"] == cold_high
    assert res["low"]["ids"] == cold_low
    assert res["low"]["cached"] == 0
    assert prio.tree_cache.stats()["locked_blocks"] == 0
    assert_idle(prio)


def test_vllm_51574_a_preempted_request_is_readmitted_before_a_newer_equal_one(prio: Any) -> None:
    """vllm-project/vllm#51574 and #41952 (a request preempted under priority scheduling went
    back behind newer requests of its own priority, which then took the pages it had
    computed). ``a`` (priority 0) runs, ``hi`` (priority 100) preempts it, then ``b``
    (priority 0, arrived after ``a``) is queued: once ``hi`` is done, ``a`` is admitted before
    ``b`` (finish order hi, a, b with one running request at most), all with cold outputs."""
    pa, pb, ph = random_ids(300, seed=51574), random_ids(300, seed=51575), random_ids(200, seed=51576)
    colds = {k: cold_output_ids(prio, "c" + k, p, 4) for k, p in (("a", pa), ("b", pb), ("hi", ph))}
    submit(prio, "a", pa, 4, priority=0)
    res: dict[str, dict] = {}
    collect_outputs(prio.step(), res)
    submit(prio, "hi", ph, 4, priority=100)
    collect_outputs(prio.step(), res)
    assert prio.running and prio.running[0].rid == "hi"  # ``a`` was preempted
    submit(prio, "b", pb, 4, priority=0)
    order: list[str] = []
    for _ in range(100):
        if not prio.has_work():
            break
        out = prio.step()
        collect_outputs(out, res)
        order += [rid for i, rid in enumerate(out.rids if out else []) if out.finished_reasons[i]]
    assert order == ["hi", "a", "b"]
    for k in colds:
        assert res[k]["ids"] == colds[k], k
    assert_idle(prio)


class _KV:
    """Block-page counts of a fake cache (``preemption_makes_room`` reads these only)."""

    page_size = P

    def __init__(self, available: int) -> None:
        self.available = available

    def kv_block_counts(self) -> tuple[int, int, int]:
        return self.available, 0, 0

    def prefix_match_len(self, token_ids: Any) -> int:
        return 0


def _req(rid: str, priority: int, seq_len: int, max_new: int, blocks: int, running: bool) -> Any:
    return SimpleNamespace(
        rid=rid,
        priority=priority,
        arrival=len(rid),
        num_future=0,
        seq_len=seq_len,
        num_outputs=0,
        max_new_tokens=max_new,
        block_pages=list(range(blocks)),
        req_pool_idx=0 if running else None,
        cache_key=lambda end: [1] * end,
        max_prefix_len=lambda: seq_len - 1,
    )


@pytest.mark.parametrize(
    ("available", "max_running", "victims"),
    [(1, 8, []), (3, 8, ["lo"]), (4, 8, []), (4, 2, ["lo"])],
)
def test_vllm_39375_preempt_only_when_it_makes_room(
    available: int, max_running: int, victims: list[str]
) -> None:
    """vllm-project/vllm#39375 at the policy function (4-token pages). ``h2`` (priority 100,
    12 prompt tokens and 4 to generate: ceil(13 / 4) = 4 pages) is blocked; ``h1`` (priority
    100, all its pages held) and ``lo`` (priority 0, 1 page) run. With 1 free page even ``lo``
    gone leaves 2 < 4: no victim. With 3 free, ``lo``'s page makes 4: ``lo`` is the victim.
    With 4 free ``h2`` fits as is: no victim, unless the running cap (2) is what blocks it."""
    h1 = _req("h1", 100, 16, 1, 4, True)
    lo = _req("lo", 0, 3, 1, 1, True)
    h2 = _req("h2", 100, 12, 4, 0, False)
    blocked, got = priority_preemption(
        h2, [h2], [h1, lo], max_running, priority_sign=-1, threshold=10, kv=_KV(available)
    )
    assert blocked is h2
    assert [r.rid for r in got] == victims


@pytest.fixture(scope="module")
def tight(sched_model_dir: str) -> Any:
    """Six block pages, 256-token chunks, no overlap, priority scheduling (higher values first,
    preemption threshold 10), no cap on running requests below the pool's."""
    return make_scheduler(
        sched_model_dir,
        max_total_tokens=6 * PAGE,
        chunked_prefill_size=PAGE,
        disable_overlap_schedule=True,
        enable_priority_scheduling=True,
    )


def test_vllm_39375_no_preemption_that_cannot_make_room(tight: Any) -> None:
    """vllm-project/vllm#39375 (a blocked high-priority request preempted running lower-priority
    requests one by one before finding that it still could not be scheduled; the right
    behaviour is to preempt only when the pages it would free make room). Six block pages:
    ``h1`` (priority 100, 4 blocks) and ``lo`` (priority 0, 1 block) run; ``h2`` (priority 100)
    needs 4 blocks while 1 is free and preempting ``lo`` would free 1 more (2 < 4). ``lo`` is
    never retracted; ``h2`` runs once ``h1`` is done; every output equals its cold run."""
    p1, pl, p2 = (
        random_ids(3 * PAGE + 10, seed=39375),
        random_ids(50, seed=39376),
        random_ids(3 * PAGE, seed=39377),
    )
    colds = {
        "h1": cold_output_ids(tight, "c1", p1, 30),
        "lo": cold_output_ids(tight, "cl", pl, 120),
        "h2": cold_output_ids(tight, "c2", p2, 4),
    }
    submit(tight, "h1", p1, 30, priority=100)
    submit(tight, "lo", pl, 120, priority=0)
    res: dict[str, dict] = {}
    for _ in range(6):  # h1's four chunks and lo's prompt; both decode after
        collect_outputs(tight.step(), res)
    assert {r.rid for r in tight.running} == {"h1", "lo"}
    ba = tight.pool.block_alloc
    assert ba.num_pages - ba.used == 1  # h1 holds 4 blocks, lo 1
    submit(tight, "h2", p2, 4, priority=100)
    retracted_lo = 0
    for _ in range(400):
        if not tight.has_work():
            break
        collect_outputs(tight.step(), res)
        retracted_lo = max(retracted_lo, next((r.num_retractions for r in tight.running if r.rid == "lo"), 0))
        retracted_lo = max(retracted_lo, next((r.num_retractions for r in tight.waiting if r.rid == "lo"), 0))
    assert retracted_lo == 0
    assert tight.num_retractions == 0
    for k in colds:
        assert res[k]["ids"] == colds[k], k
    assert_idle(tight)


def test_vllm_4761_a_prefix_whose_pages_were_reused_is_recomputed(tight: Any) -> None:
    """vllm-project/vllm#4761 and ovg-project/kvcached#362 at the scheduler (a block popped
    from the evictor stayed in the cached-block index, so a page handed to another request
    could still be served for the old prefix). Six block pages: ``a`` (2 blocks + 10 tokens)
    finishes and leaves 2 cached blocks; ``b`` (5 blocks' worth) then needs one of them and
    LRU eviction takes ``a``'s last block (its page is reused by ``b``). ``a`` sent again hits
    exactly its first block (256 tokens, derived by hand; not 512), and every output equals
    its cold run."""
    pa, pb = random_ids(2 * PAGE + 10, seed=4761), random_ids(5 * PAGE - 20, seed=4762)
    cold_a, cold_b = cold_output_ids(tight, "ca", pa, 4), cold_output_ids(tight, "cb", pb, 4)
    first = run_one(tight, "a", pa, 4)
    assert first["ids"] == cold_a and first["cached"] == 0
    assert tight.tree_cache.total_pages()[0] == 2
    evicted = tight.tree_cache.stats()["evicted_blocks"]
    assert run_one(tight, "b", pb, 4)["ids"] == cold_b
    assert tight.tree_cache.stats()["evicted_blocks"] - evicted == 1
    again = run_one(tight, "a2", pa, 4)
    assert again["cached"] == PAGE
    assert again["ids"] == cold_a
    assert_idle(tight)

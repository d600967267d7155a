"""Property test of ``CacheManager``'s page lifecycle against a brute-force model.

Hypothesis drives random request lives through the cache manager's verbs — admit
(``match_prefix``), extend (``alloc_for_extend`` + a simulated forward + ``cache_unfinished_req``,
appending a token when the chunk reaches the end), finish and abort (``cache_finished_req``),
retract (``release_req``), ``evict`` and ``flush`` — over small pools (page_size 4, window 2, a
few pages) so that shared prefixes, duplicate blocks, eviction and failed allocations are common.

The model is independent of the code under test:

* **Page contents.** A simulated forward writes each position's token into the block page and
  the window page that hold it (a freshly allocated page starts empty). Every page a running
  request reads must hold exactly its tokens (prefix hits and swapped duplicates included), and
  every block page and resume state in the radix tree must hold the tokens of its path — so a
  page freed while in use, or cached under the wrong tokens, is caught.
* **Ownership.** ``check_integrity``'s counts are re-derived here: allocator ``used`` equals the
  pages in the tree (walked node by node) plus the pages the requests own, with no page owned
  twice; a queued request owns nothing.
* **Locks.** Each node's ``lock_ref`` equals the number of requests whose ``last_node`` path runs
  through it (counted by walking parents).
* **Return.** At the end every request is finished or aborted and the cache flushed: every page
  and request slot is free.
"""

from __future__ import annotations

from array import array
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from sglang_v4.managers.req import Req
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.cache_manager import CacheManager
from sglang_v4.mem_cache.memory_pool import ReqSlotAllocator
from sglang_v4.sampling.sampling_params import SamplingParams

PS = 4  # tokens per block page
W = 2  # positions per window page (the sliding window)
NUM_BLOCKS = 14
NUM_WINDOWS = 12
NUM_SLOTS = 4


class _TrackingAllocator(PageAllocator):
    """A page allocator that empties the model's copy of a page when it is handed out."""

    def __init__(self, num_pages: int, name: str, content: dict[tuple[str, int], dict[int, int]]) -> None:
        super().__init__(num_pages, name)
        self.content = content

    def alloc(self, n: int) -> list[int] | None:
        out = super().alloc(n)
        for p in out or []:
            self.content[(self.name, p)] = {}
        return out


class _FakePool:
    """The parts of ``DSV4KVPool`` the cache manager uses; records each slot's resume state."""

    def __init__(self, content: dict[tuple[str, int], dict[int, int]]) -> None:
        self.block_alloc = _TrackingAllocator(NUM_BLOCKS, "block", content)
        self.window_alloc = _TrackingAllocator(NUM_WINDOWS, "window", content)
        self.req_slots = ReqSlotAllocator(NUM_SLOTS)
        self.resume: dict[int, int | None] = {}

    def reset_req_state(self, slot: int) -> None:
        self.resume[slot] = None

    def load_resume_state(self, slot: int, window_page: int) -> None:
        self.resume[slot] = window_page

    def block_pages_changed(self, slot: int, first_block: int) -> None:
        pass  # no device page table here


def _tokens_of(edge: bytes) -> list[int]:
    return list(array("I", edge))


class CacheManagerMachine(RuleBasedStateMachine):
    @initialize(
        interval=st.sampled_from([1, 1, 2]),
        docs=st.lists(st.lists(st.integers(0, 2), min_size=3 * PS, max_size=6 * PS), min_size=1, max_size=3),
    )
    def setup(self, interval: int, docs: list[list[int]]) -> None:
        self.content: dict[tuple[str, int], dict[int, int]] = {}
        self.pool = _FakePool(self.content)
        self.cm = CacheManager(self.pool, PS, W, resume_interval=interval)  # type: ignore[arg-type]
        self.docs = docs
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.num = 0

    # ------------------------------------------------------------------ helpers
    def _pick(self, reqs: list[Req], i: int) -> Req:
        return reqs[i % len(reqs)]

    def _write(self, req: Req, start: int, end: int) -> None:
        """A forward of positions ``start .. end - 1``: each token into its block and window page."""
        ids = req.fill_ids
        for pos in range(start, end):
            self.content[("block", req.block_pages[pos // PS])][pos % PS] = ids[pos]
            self.content[("window", req.window_pages[pos // W])][pos % W] = ids[pos]

    def _finish(self, req: Req) -> None:
        self.cm.cache_finished_req(req)
        for q in (self.waiting, self.running):
            if req in q:
                q.remove(req)

    # ------------------------------------------------------------------ rules
    @rule(
        doc=st.integers(0, 2), cut=st.integers(1, 6 * PS), suffix=st.lists(st.integers(0, 2), max_size=2 * PS)
    )
    def new_req(self, doc: int, cut: int, suffix: list[int]) -> None:
        ids = self.docs[doc % len(self.docs)][:cut] + suffix
        self.num += 1
        self.waiting.append(Req(rid=f"r{self.num}", origin_input_ids=ids, sampling_params=SamplingParams()))

    @precondition(lambda self: getattr(self, "waiting", None))
    @rule(i=st.integers(0, 10))
    def admit(self, i: int) -> None:
        req = self._pick(self.waiting, i)
        if not self.cm.match_prefix(req):
            assert self.pool.req_slots.available == 0
            assert req.req_pool_idx is None and not req.block_pages
            return
        self.waiting.remove(req)
        self.running.append(req)
        hit = req.num_computed
        assert hit % PS == 0 and hit <= req.seq_len - 1 and req.cached_tokens == hit
        assert len(req.block_pages) == req.num_tree_blocks == hit // PS
        if hit:
            assert self.pool.resume[req.req_pool_idx] == req.window_pages[(hit - 1) // W]
        else:
            assert self.pool.resume[req.req_pool_idx] is None and req.last_node is None

    @precondition(lambda self: getattr(self, "running", None))
    @rule(i=st.integers(0, 10), chunk=st.integers(1, 3 * PS), tok=st.integers(0, 2))
    def extend(self, i: int, chunk: int, tok: int) -> None:
        req = self._pick(self.running, i)
        p = req.num_computed
        end = p + min(req.remaining, chunk)
        used = (self.pool.block_alloc.used, self.pool.window_alloc.used, len(req.block_pages))
        if not self.cm.alloc_for_extend(req, end):
            # nothing allocated (eviction may have freed tree pages): retract it
            assert self.pool.block_alloc.used <= used[0] and self.pool.window_alloc.used <= used[1]
            assert len(req.block_pages) == used[2]
            self.retract_req(req)
            return
        assert len(req.block_pages) == -(-end // PS)
        self._write(req, p, end)
        req.num_computed = end
        self.cm.cache_unfinished_req(req)
        if end == req.seq_len:
            req.output_ids.append(tok)  # the sampled token

    def retract_req(self, req: Req) -> None:
        self.cm.release_req(req)
        assert (
            req.req_pool_idx is None
            and req.num_computed == 0
            and not req.block_pages
            and not req.window_pages
        )
        self.running.remove(req)
        self.waiting.insert(0, req)

    @precondition(lambda self: getattr(self, "running", None))
    @rule(i=st.integers(0, 10))
    def retract(self, i: int) -> None:
        self.retract_req(self._pick(self.running, i))

    @precondition(lambda self: getattr(self, "running", None))
    @rule(i=st.integers(0, 10))
    def finish(self, i: int) -> None:
        self._finish(self._pick(self.running, i))

    @precondition(lambda self: getattr(self, "waiting", None) or getattr(self, "running", None))
    @rule(i=st.integers(0, 10))
    def abort(self, i: int) -> None:
        self._finish(self._pick(self.waiting + self.running, i))

    @precondition(lambda self: hasattr(self, "cm"))
    @rule(nb=st.integers(0, NUM_BLOCKS), nw=st.integers(0, NUM_WINDOWS))
    def evict(self, nb: int, nw: int) -> None:
        ok = self.cm.evict(nb, nw)
        assert ok == (self.pool.block_alloc.available >= nb and self.pool.window_alloc.available >= nw)

    @precondition(lambda self: hasattr(self, "cm"))
    @rule()
    def flush(self) -> None:
        locked = any(r.last_node is not None for r in self.running)
        assert self.cm.flush() == (not locked)
        if not locked:
            assert self.cm.tree_cache.total_pages() == (0, 0)

    # ------------------------------------------------------------------ the model
    def _tree(self) -> list[tuple[Any, list[int], int, int | None]]:
        """Every cached block: (node, path tokens up to the block end, block page, window page)."""
        out = []
        stack = [(self.cm.tree_cache.root, [])]
        while stack:
            node, prefix = stack.pop()
            for child in node.children.values():
                toks = _tokens_of(child.edge)
                path = list(prefix)
                for b in range(child.num_blocks):
                    path = path + toks[b * PS : (b + 1) * PS]
                    out.append((child, path, child.block_pages[b], child.window_pages[b]))
                stack.append((child, path))
        return out

    @invariant()
    def pages_hold_their_tokens(self) -> None:
        if not hasattr(self, "cm"):
            return
        for _, path, bp, wp in self._tree():
            n = len(path)
            assert self.content[("block", bp)] == {o: path[n - PS + o] for o in range(PS)}
            if wp is not None:
                assert self.content[("window", wp)] == {o: path[n - W + o] for o in range(W)}
        for req in self.running:
            ids, q = req.fill_ids, req.num_computed
            for pos in range(q):
                assert self.content[("block", req.block_pages[pos // PS])][pos % PS] == ids[pos], req.rid
            for pos in range(max(0, q - W + 1), q):  # the window the next position attends to
                assert self.content[("window", req.window_pages[pos // W])][pos % W] == ids[pos], req.rid
            assert all(self.pool.block_alloc.is_allocated(p) for p in req.block_pages)
            assert all(self.pool.window_alloc.is_allocated(p) for p in req.window_pages.values())

    @invariant()
    def ownership_and_locks(self) -> None:
        if not hasattr(self, "cm"):
            return
        for req in self.waiting:
            assert req.req_pool_idx is None and not req.block_pages and not req.window_pages
            assert req.last_node is None
        blocks = self._tree()
        tree_b = [bp for _, _, bp, _ in blocks]
        tree_w = [wp for _, _, _, wp in blocks if wp is not None]
        own_b = [p for r in self.running for p in r.block_pages[r.num_tree_blocks :]]
        own_w = [p for r in self.running for k, p in r.window_pages.items() if k not in r.tree_window_spans]
        everything_b, everything_w = tree_b + own_b, tree_w + own_w
        assert len(set(everything_b)) == len(everything_b) == self.pool.block_alloc.used
        assert len(set(everything_w)) == len(everything_w) == self.pool.window_alloc.used
        assert NUM_SLOTS - self.pool.req_slots.available == len(self.running)
        # a request's tree-owned pages are the tree's pages of its path
        for r in self.running:
            assert set(r.block_pages[: r.num_tree_blocks]) <= set(tree_b)
            assert {r.window_pages[k] for k in r.tree_window_spans} <= set(tree_w)
        # lock refs: one per request whose last_node path runs through the node
        expected: dict[int, int] = {}
        root = self.cm.tree_cache.root
        for r in self.running:
            node = r.last_node
            while node is not None and node is not root:
                expected[id(node)] = expected.get(id(node), 0) + 1
                node = node.parent
        for node, *_ in blocks:
            assert node.lock_ref == expected.get(id(node), 0)
        self.cm.check_integrity(self.waiting + self.running)

    def teardown(self) -> None:
        if not hasattr(self, "cm"):
            return
        for req in list(self.running) + list(self.waiting):
            self._finish(req)
        assert self.cm.flush()
        assert self.pool.block_alloc.used == 0 and self.pool.window_alloc.used == 0
        assert self.pool.req_slots.available == NUM_SLOTS


CacheManagerMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCacheManagerMachine = CacheManagerMachine.TestCase

"""Property test of the radix prefix cache against a brute-force model.

The model is a plain dict from every cached block-prefix (the token tuple up to a block end) to
``[block_page, window_page, stamp]`` plus a lock count per prefix. It re-implements the documented
semantics independently of the tree (no shared code): match = deepest cached prefix whose end has
a live window; insert ownership rules; eviction order ascending ``(stamp, -depth)`` over unlocked
prefixes, windows first (phase 1), then blocks (phase 2). Hypothesis drives random
insert / match / lock / unlock / evict / flush sequences over a 2-letter alphabet with
page_size 4 so that shared prefixes and splits are common.
"""

from __future__ import annotations

from array import array

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.radix_cache import RadixCache

PS = 4
NUM_BLOCK_PAGES = 64
NUM_WINDOW_PAGES = 48

tokens_st = st.lists(st.integers(0, 1), min_size=0, max_size=6 * PS + 3)


class RadixMachine(RuleBasedStateMachine):
    @initialize(
        interval=st.sampled_from([1, 1, 2, 3]),
        docs=st.lists(st.lists(st.integers(0, 1), min_size=4 * PS, max_size=8 * PS), min_size=1, max_size=3),
    )
    def setup(self, interval: int, docs: list[list[int]]) -> None:
        self.k = interval
        self.ba = PageAllocator(NUM_BLOCK_PAGES, "block")
        self.wa = PageAllocator(NUM_WINDOW_PAGES, "window")
        self.cache = RadixCache(self.ba, self.wa, page_size=PS, resume_interval=interval)
        self.model: dict[tuple[int, ...], list] = {}  # prefix -> [block, window|None, stamp]
        self.lockcount: dict[tuple[int, ...], int] = {}
        self.clock = 0
        self.locks: list[tuple[object, list[tuple[int, ...]]]] = []  # (node, locked prefixes)
        self.held_blocks: list[int] = []  # pages the test (a "request") still holds
        self.held_windows: list[int] = []
        self.seqs: list[list[int]] = docs  # sources of shared prefixes

    # ------------------------------------------------------------------ helpers
    def _prefixes(self, tokens: list[int], nblocks: int) -> list[tuple[int, ...]]:
        return [tuple(tokens[: (i + 1) * PS]) for i in range(nblocks)]

    def _model_match(self, tokens: list[int]) -> tuple[int, list[int], int | None]:
        best = 0
        for i, key in enumerate(self._prefixes(tokens, len(tokens) // PS)):
            if key not in self.model:
                break
            if self.model[key][1] is not None:
                best = i + 1
        keys = self._prefixes(tokens, best)
        pages = [self.model[k][0] for k in keys]
        return best * PS, pages, (self.model[keys[-1]][1] if keys else None)

    def _draw_tokens(self, data: st.DataObject) -> list[int]:
        if data.draw(st.integers(0, 7)) == 0:
            return data.draw(tokens_st)
        base = data.draw(st.sampled_from(self.seqs))
        cut = data.draw(st.integers(0, len(base)))
        return base[:cut] + data.draw(st.lists(st.integers(0, 1), max_size=2 * PS + 1))

    def _unlocked(self, key: tuple[int, ...]) -> bool:
        return self.lockcount.get(key, 0) == 0

    # ------------------------------------------------------------------ rules
    @rule(data=st.data())
    def insert(self, data: st.DataObject, tokens: list[int] | None = None) -> None:
        """A request inserts its whole blocks with freshly allocated pages (prefill done)."""
        if tokens is None:
            tokens = self._draw_tokens(data)
        n = len(tokens) // PS
        tokens = tokens[: n * PS]
        mask = data.draw(st.lists(st.integers(0, 3).map(bool), min_size=n, max_size=n))
        bp = self.ba.alloc(n)
        wp_ids = self.wa.alloc(sum(mask))
        if bp is None or wp_ids is None:  # pool short: give back and skip
            self.ba.free(bp or [])
            self.wa.free(wp_ids or [])
            return
        it = iter(wp_ids)
        wp = [next(it) if m else None for m in mask]
        rb, rw = self.cache.insert(tokens, bp, wp)
        # expected result from the model
        if n:
            self.clock += 1
        exp_b, exp_w, freed_by_tree = [], [], []
        for i, key in enumerate(self._prefixes(tokens, n)):
            keep = (i + 1) % self.k == 0
            w = wp[i]
            if key in self.model:
                e = self.model[key]
                exp_b.append(e[0])
                if not keep:
                    if w is not None:
                        freed_by_tree.append(w)
                    exp_w.append(None)
                elif e[1] is None and w is not None:
                    e[1] = w
                    exp_w.append(w)
                else:
                    exp_w.append(e[1])
                e[2] = self.clock
            else:
                if not keep and w is not None:
                    freed_by_tree.append(w)
                    w = None
                self.model[key] = [bp[i], w, self.clock]
                exp_b.append(bp[i])
                exp_w.append(w)
        assert rb == exp_b
        assert rw == exp_w
        for w in freed_by_tree:
            assert not self.wa.is_allocated(w)
        # caller keeps its duplicates for a while (a running request), frees them later
        for mine, tree in zip(bp, rb):
            if mine != tree:
                self.held_blocks.append(mine)
        for mine, tree in zip(wp, rw):
            if mine is not None and tree is not None and mine != tree:
                self.held_windows.append(mine)
        if n and len(self.seqs) < 12:
            self.seqs.append(tokens)
        if data.draw(st.booleans()):  # a finished request frees its duplicates at once
            self.release_held()

    @rule(data=st.data())
    def insert_shared(self, data: st.DataObject) -> None:
        """Insert 1+ blocks of a known sequence plus a fresh tail (shared prefixes are common)."""
        base = data.draw(st.sampled_from(self.seqs))
        n = data.draw(st.integers(1, len(base) // PS))
        tail = data.draw(st.lists(st.integers(0, 1), max_size=2 * PS))
        self.insert(data, base[: n * PS] + tail)

    @rule(data=st.data(), lock=st.booleans())
    def match(self, data: st.DataObject, lock: bool) -> None:
        tokens = self._draw_tokens(data)
        m = self.cache.match_prefix(tokens)
        num, pages, window = self._model_match(tokens)
        assert (m.num_tokens, m.block_pages, m.window_page) == (num, pages, window)
        keys = self._prefixes(tokens, num // PS)
        if keys:
            self.clock += 1
            for k in keys:
                self.model[k][2] = self.clock
        if m.num_tokens == 0:
            assert m.last_node is self.cache.root
        else:
            assert m.last_node.end_depth == num // PS
        if lock and keys:  # locking the root is a no-op and does not block flush
            self.cache.inc_lock_ref(m.last_node)
            for k in keys:
                self.lockcount[k] = self.lockcount.get(k, 0) + 1
            self.locks.append((m.last_node, keys))

    @rule(data=st.data())
    def find_and_lock(self, data: st.DataObject) -> None:
        tokens = self._draw_tokens(data)
        node, nb = self.cache.find_node(tokens)
        exp = 0
        for key in self._prefixes(tokens, len(tokens) // PS):
            if key not in self.model:
                break
            exp += 1
        assert nb == exp
        keys = self._prefixes(tokens, nb)
        if not keys:
            assert node is self.cache.root
            return
        self.cache.inc_lock_ref(node)
        for k in keys:
            self.lockcount[k] = self.lockcount.get(k, 0) + 1
        self.locks.append((node, keys))

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        idx = data.draw(st.integers(0, len(self.locks) - 1))
        node, keys = self.locks.pop(idx)
        self.cache.dec_lock_ref(node)
        for k in keys:
            self.lockcount[k] -= 1

    @precondition(lambda self: self.cache.total_pages()[0] >= 6)  # evict under pressure only
    @rule(nb=st.integers(0, 4), nw=st.integers(0, 4))
    def evict(self, nb: int, nw: int) -> None:
        got = self.cache.evict(nb, nw)
        order = lambda k: (self.model[k][2], -len(k))  # noqa: E731
        freed_w = 0
        if nw:
            cands = sorted(
                (k for k, e in self.model.items() if e[1] is not None and self._unlocked(k)), key=order
            )
            for k in cands[:nw]:
                assert not self.wa.is_allocated(self.model[k][1])
                self.model[k][1] = None
                freed_w += 1
        freed_b = 0
        if nb:
            cands = sorted((k for k in self.model if self._unlocked(k)), key=order)
            for k in cands[:nb]:
                e = self.model.pop(k)
                assert not self.ba.is_allocated(e[0])
                if e[1] is not None:
                    assert not self.wa.is_allocated(e[1])
                    freed_w += 1
                freed_b += 1
        assert got == (freed_b, freed_w)

    @rule(go=st.integers(0, 9))
    def flush(self, go: int) -> None:
        if go != 0:  # keep flushes rare so that trees grow
            return
        ok = self.cache.flush()
        assert ok == (not self.locks)
        if ok:
            self.model.clear()
            self.lockcount.clear()

    @precondition(lambda self: self.held_blocks or self.held_windows)
    @rule()
    def release_held(self) -> None:
        """The request holding duplicate pages finishes and frees them."""
        self.ba.free(self.held_blocks)
        self.wa.free(self.held_windows)
        self.held_blocks, self.held_windows = [], []

    # ------------------------------------------------------------------ invariants
    def _dump_tree(self) -> dict[tuple[int, ...], tuple[int, int | None, int]]:
        out: dict[tuple[int, ...], tuple[int, int | None, int]] = {}
        root = self.cache.root
        stack = [(root, ())]
        while stack:
            node, prefix = stack.pop()
            for first, child in node.children.items():
                assert child.parent is node and child.alive
                assert child.num_blocks >= 1
                assert child.depth == node.end_depth
                toks = list(array("I", child.edge))
                assert len(toks) == child.num_blocks * PS
                assert tuple(array("I", first)) == tuple(toks[:PS])
                assert child.num_windows == sum(w is not None for w in child.window_pages)
                p = prefix
                for i in range(child.num_blocks):
                    p = p + tuple(toks[i * PS : (i + 1) * PS])
                    out[p] = (child.block_pages[i], child.window_pages[i], child.lock_ref)
                stack.append((child, p))
        return out

    @invariant()
    def tree_equals_model(self) -> None:
        if not hasattr(self, "cache"):
            return
        tree = self._dump_tree()
        assert set(tree) == set(self.model)
        for k, (b, w, lock_ref) in tree.items():
            assert (b, w) == (self.model[k][0], self.model[k][1])
            assert lock_ref == self.lockcount.get(k, 0)
            if w is not None:
                assert len(k) // PS % self.k == 0  # kept only at resume_interval ends
        # every page owned exactly once: tree pages and test-held pages are disjoint, and the
        # allocators' used sets are exactly their union
        tb = [e[0] for e in self.model.values()]
        tw = [e[1] for e in self.model.values() if e[1] is not None]
        assert len(set(tb)) == len(tb) and len(set(tw)) == len(tw)
        assert set(tb).isdisjoint(self.held_blocks) and set(tw).isdisjoint(self.held_windows)
        assert self.ba.used == len(tb) + len(self.held_blocks)
        assert self.wa.used == len(tw) + len(self.held_windows)
        assert all(self.ba.is_allocated(p) for p in tb + self.held_blocks)
        assert all(self.wa.is_allocated(p) for p in tw + self.held_windows)
        assert self.cache.total_pages() == (len(tb), len(tw))
        ev_b = sum(1 for k in self.model if self._unlocked(k))
        ev_w = sum(1 for k, e in self.model.items() if e[1] is not None and self._unlocked(k))
        assert self.cache.evictable_sizes() == (ev_b, ev_w)
        s = self.cache.stats()
        assert s["cached_blocks"] == len(tb) and s["resume_states"] == len(tw)

    def teardown(self) -> None:
        if not hasattr(self, "cache"):
            return
        for node, _ in self.locks:
            self.cache.dec_lock_ref(node)
        self.ba.free(self.held_blocks)
        self.wa.free(self.held_windows)
        assert self.cache.flush()
        assert self.ba.used == 0 and self.wa.used == 0
        assert self.ba.available == NUM_BLOCK_PAGES and self.wa.available == NUM_WINDOW_PAGES
        assert self.cache.total_pages() == (0, 0)


def _machine_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


class TestRadixMachine(RadixMachine.TestCase):
    """300 sequences of 40 rules. Fewer miss rarer orders: with 100, a match that stamps only the
    last node of its path, not its ancestors, went unfound."""

    settings = _machine_settings(300)


@pytest.mark.parametrize("interval", [1, 2])
def test_lock_protects_resume_state_under_pressure(interval: int) -> None:
    """Evicting everything keeps exactly the locked path (blocks and resume states)."""
    ba, wa = PageAllocator(32), PageAllocator(32)
    c = RadixCache(ba, wa, page_size=PS, resume_interval=interval)
    a = [0, 1, 1, 0] * 4
    c.insert(a, ba.alloc(4), wa.alloc(4))
    m = c.match_prefix(a[: 2 * PS])
    assert m.num_tokens == 2 * PS
    c.inc_lock_ref(m.last_node)
    c.evict(100, 100)
    assert c.total_pages() == (2, 2 // interval)
    assert c.match_prefix(a).window_page == m.window_page
    c.dec_lock_ref(m.last_node)
    assert c.flush() and ba.used == 0 and wa.used == 0

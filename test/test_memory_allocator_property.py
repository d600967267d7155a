"""Property test of ``PageAllocator`` (``mem_cache/allocator.py``) against a brute-force model.

The model is the set of page ids each live "request" holds. Hypothesis drives random sequences
of allocations (new requests and growth of existing ones, including requests larger than what is
free), partial and full frees, double frees and foreign ids. After every step: the pages live
requests hold are pairwise disjoint, inside ``1 .. num_pages`` (the reserved dummy page 0 is never
handed out), and ``available + held == num_pages``; a refused allocation takes nothing. When every
request has ended the allocator is all-free, and allocating the whole pool hands out exactly
``{1 .. num_pages}``.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, rule
from sglang_v4.mem_cache.allocator import OutOfPagesError, PageAllocator


class AllocatorMachine(RuleBasedStateMachine):
    reqs = Bundle("reqs")

    def __init__(self) -> None:
        super().__init__()
        self.alloc: PageAllocator | None = None
        self.n = 0
        self.held: dict[int, list[int]] = {}  # request id -> pages it owns
        self.next_id = 0

    @initialize(num_pages=st.integers(1, 40))
    def setup(self, num_pages: int) -> None:
        self.n = num_pages
        self.alloc = PageAllocator(num_pages, "prop_pages")

    def _free_count(self) -> int:
        return self.n - sum(len(p) for p in self.held.values())

    @rule(target=reqs, k=st.integers(0, 45))
    def new_request(self, k: int) -> int:
        assert self.alloc is not None
        rid = self.next_id
        self.next_id += 1
        before = self.alloc.available
        got = self.alloc.alloc(k)
        if k > self._free_count():
            assert got is None and self.alloc.available == before  # refused: takes nothing
            self.held[rid] = []
        else:
            assert got is not None and len(got) == k
            self.held[rid] = list(got)
        return rid

    @rule(rid=reqs, k=st.integers(1, 12))
    def grow(self, rid: int, k: int) -> None:
        assert self.alloc is not None
        if rid not in self.held:
            return
        if k > self._free_count():
            with pytest.raises(OutOfPagesError):
                self.alloc.alloc_or_raise(k)
        else:
            self.held[rid].extend(self.alloc.alloc_or_raise(k))

    @rule(rid=reqs, data=st.data())
    def free_some(self, rid: int, data: st.DataObject) -> None:
        assert self.alloc is not None
        pages = self.held.get(rid, [])
        if not pages:
            return
        sub = data.draw(st.lists(st.sampled_from(pages), unique=True, max_size=len(pages)))
        self.alloc.free(sub)
        self.held[rid] = [p for p in pages if p not in sub]

    @rule(rid=consumes(reqs))
    def finish(self, rid: int) -> None:
        assert self.alloc is not None
        pages = self.held.pop(rid, [])
        self.alloc.free(pages)
        # a double free of any of them is refused and changes nothing
        if pages:
            before = self.alloc.available
            with pytest.raises(ValueError, match="freed but not allocated"):
                self.alloc.free([pages[0]])
            assert self.alloc.available == before

    @rule(page=st.integers(-3, 45))
    def free_foreign(self, page: int) -> None:
        assert self.alloc is not None
        owned = {p for ps in self.held.values() for p in ps}
        if page in owned:
            return
        with pytest.raises(ValueError):
            self.alloc.free([page])

    @invariant()
    def disjoint_and_in_range(self) -> None:
        if self.alloc is None:
            return
        all_pages = [p for ps in self.held.values() for p in ps]
        assert len(all_pages) == len(set(all_pages)), "a page was handed out twice"
        assert all(1 <= p <= self.n for p in all_pages)
        assert self.alloc.used == len(all_pages)
        assert self.alloc.available + len(all_pages) == self.n
        assert all(self.alloc.is_allocated(p) for p in all_pages)

    def teardown(self) -> None:
        if self.alloc is None:
            return
        for rid in list(self.held):
            self.alloc.free(self.held.pop(rid))
        assert self.alloc.available == self.n and self.alloc.used == 0
        everything = self.alloc.alloc(self.n)
        assert everything is not None and sorted(everything) == list(range(1, self.n + 1))
        assert self.alloc.alloc(1) is None


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_allocator_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="num_pages"):
        PageAllocator(0)
    a = PageAllocator(3)
    with pytest.raises(ValueError, match="cannot allocate"):
        a.alloc(-1)
    assert a.alloc(0) == [] and a.available == 3

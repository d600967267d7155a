"""Targeted tests of the radix prefix cache (expected values are worked out by hand from the spec:
a hit is the shared length rounded down to a block, and needs a live resume state at its end)."""

from __future__ import annotations

import random

import pytest
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.radix_cache import RadixCache

P = 256


def _cache(n: int = 64, page_size: int = P, **kw) -> tuple[RadixCache, PageAllocator, PageAllocator]:
    ba, wa = PageAllocator(n, "block"), PageAllocator(n, "window")
    return RadixCache(ba, wa, page_size=page_size, **kw), ba, wa


def _finish(c: RadixCache, ba: PageAllocator, wa: PageAllocator, tokens: list[int]) -> tuple[list, list]:
    """What the scheduler does when a request finishes: insert its whole blocks with fresh pages,
    then free its duplicates."""
    n = len(tokens) // c.page_size
    bp, wp = ba.alloc_or_raise(n), wa.alloc_or_raise(n)
    rb, rw = c.insert(tokens[: n * c.page_size], bp, wp)
    ba.free([m for m, t in zip(bp, rb) if m != t])
    wa.free([m for m, t in zip(wp, rw) if t is not None and m != t])
    return rb, rw


def _rand(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 129_000) for _ in range(n)]


def test_resent_identical_300_token_prompt_hits_256() -> None:
    c, ba, wa = _cache()
    prompt = _rand(300, 0)
    assert c.match_prefix(prompt).num_tokens == 0
    rb, rw = _finish(c, ba, wa, prompt)
    m = c.match_prefix(prompt)
    assert m.num_tokens == 256
    assert m.block_pages == rb and m.window_page == rw[0]
    assert m.last_node.end_depth == 1


@pytest.mark.parametrize("shared,expected", [(255, 0), (256, 256), (257, 256), (511, 256), (512, 512)])
def test_shared_prefix_lengths(shared: int, expected: int) -> None:
    c, ba, wa = _cache()
    first = _rand(1100, 1)
    _finish(c, ba, wa, first)  # 4 blocks cached, resume state at every block end
    second = first[:shared] + [t + 1 for t in first[shared : shared + 400]]  # diverges at `shared`
    m = c.match_prefix(second)
    assert m.num_tokens == expected
    assert len(m.block_pages) == expected // P
    assert (m.window_page is None) == (expected == 0)


def test_insert_returns_tree_ids_for_present_blocks_and_adopts_missing_resume_state() -> None:
    c, ba, wa = _cache(page_size=4)
    a = list(range(12))
    bp, wp = ba.alloc(3), wa.alloc(3)
    assert c.insert(a, bp, [wp[0], None, wp[2]]) == (bp, [wp[0], None, wp[2]])
    bp2, wp2 = ba.alloc(4), wa.alloc(4)
    rb, rw = c.insert(a + [9, 9, 9, 9], bp2, wp2)
    assert rb == bp + [bp2[3]]
    assert rw == [wp[0], wp2[1], wp[2], wp2[3]]  # block 1's missing resume state adopted
    assert c.total_pages() == (4, 4)
    # the caller still holds its 3 duplicate block pages, 2 duplicate window pages and wp[1]
    assert ba.used == 4 + 3 and wa.used == 4 + 3


def test_evicted_interior_resume_state_still_counts_inside_a_longer_match() -> None:
    c, ba, wa = _cache(page_size=4)
    a = list(range(12))
    rb, _ = _finish(c, ba, wa, a)
    assert c.evict(0, 3) == (0, 3)  # every resume state gone; blocks stay
    assert c.match_prefix(a).num_tokens == 0
    w3 = wa.alloc(1)[0]
    assert c.insert(a, list(rb), [None, None, w3]) == (rb, [None, None, w3])  # a request recomputed the end
    m = c.match_prefix(a + [5])
    assert (m.num_tokens, m.block_pages, m.window_page) == (12, rb, w3)
    assert c.match_prefix(a[:8] + [7, 7, 7, 7]).num_tokens == 0  # block 2's end has no resume state
    assert c.stats()["evicted_resume_states"] == 3


def test_resume_interval_2_keeps_every_second_block_end() -> None:
    c, ba, wa = _cache(page_size=4, resume_interval=2)
    a = list(range(20))  # 5 blocks
    bp, wp = ba.alloc(5), wa.alloc(5)
    rb, rw = c.insert(a, bp, wp)
    assert rb == bp and rw == [None, wp[1], None, wp[3], None]
    for i in (0, 2, 4):
        assert not wa.is_allocated(wp[i])  # freed by the tree
    assert wa.used == 2 and c.total_pages() == (5, 2)
    expected = {4: 0, 8: 8, 12: 8, 16: 16, 20: 16}
    for n, exp in expected.items():
        assert c.match_prefix(a[:n]).num_tokens == exp


def test_lru_evicts_least_recently_used_first_and_deepest_first() -> None:
    c, ba, wa = _cache(page_size=4)
    a, b = [1] * 8, [2] * 8
    rb_a, rw_a = _finish(c, ba, wa, a)
    rb_b, rw_b = _finish(c, ba, wa, b)
    c.match_prefix(a)  # a is now more recent than b
    assert c.evict(0, 1) == (0, 1)
    assert not wa.is_allocated(rw_b[1])  # b's deepest resume state went first
    assert c.evict(3, 0) == (3, 2)  # b's two blocks (+1 resume state), then a's tail block
    assert not ba.is_allocated(rb_a[1]) and ba.is_allocated(rb_a[0])
    assert c.match_prefix(a).num_tokens == 4
    assert c.evictable_sizes() == (1, 1)


def test_locked_match_keeps_its_resume_state_and_flush_is_refused() -> None:
    c, ba, wa = _cache(page_size=4)
    a = [3] * 12
    _finish(c, ba, wa, a)
    m = c.match_prefix(a[:8])
    c.inc_lock_ref(m.last_node)
    assert c.evictable_sizes() == (1, 1)
    assert c.evict(10, 10) == (1, 1)
    assert c.flush() is False and c.total_pages() == (2, 2)
    again = c.match_prefix(a)
    assert (again.num_tokens, again.window_page) == (8, m.window_page)
    c.dec_lock_ref(m.last_node)
    with pytest.raises(ValueError, match="not locked"):
        c.dec_lock_ref(m.last_node)
    assert c.flush() is True and ba.used == 0 and wa.used == 0


def test_disabled_cache_matches_nothing_and_takes_nothing() -> None:
    c, ba, wa = _cache(page_size=4, disable=True)
    a = list(range(8))
    bp, wp = ba.alloc(2), wa.alloc(2)
    assert c.insert(a, bp, wp) == (bp, wp)
    assert c.match_prefix(a).num_tokens == 0
    assert ba.used == 2 and wa.used == 2 and c.total_pages() == (0, 0)


def test_stats_and_record_hit() -> None:
    c, ba, wa = _cache(page_size=4)
    c.record_hit(300, 256)
    c.record_hit(100, 0)
    s = c.stats()
    assert (s["hit_tokens"], s["prompt_tokens"]) == (256, 400)
    assert s["hit_rate"] == pytest.approx(0.64)
    with pytest.raises(ValueError, match="hit_tokens"):
        c.record_hit(10, 11)


def test_bad_input_raises_value_error_naming_the_field() -> None:
    c, ba, wa = _cache(page_size=4)
    with pytest.raises(ValueError, match="token_ids"):
        c.insert([1, 2, 3], [1], [None])
    with pytest.raises(ValueError, match="block_pages"):
        c.insert([1, 2, 3, 4], [], [None])
    with pytest.raises(ValueError, match="window_pages"):
        c.insert([1, 2, 3, 4], [1], [])
    with pytest.raises(ValueError, match="token_ids"):
        c.match_prefix([-1, 2, 3, 4])
    with pytest.raises(ValueError, match="page_size"):
        RadixCache(ba, wa, page_size=0)
    with pytest.raises(ValueError, match="resume_interval"):
        RadixCache(ba, wa, resume_interval=0)


def test_numpy_and_torch_token_inputs_match_like_lists() -> None:
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    c, ba, wa = _cache(page_size=4)
    a = [7, 1, 2, 3, 9, 9, 8, 8, 5]
    rb, rw = _finish(c, ba, wa, a)
    for q in (np.array(a, dtype=np.int64), torch.tensor(a), tuple(a)):
        m = c.match_prefix(q)
        assert (m.num_tokens, m.block_pages, m.window_page) == (8, rb, rw[1])
    with pytest.raises(ValueError, match="token_ids"):
        c.match_prefix(np.array([1, 2, -3, 4]))
    with pytest.raises(ValueError, match="token_ids"):
        c.match_prefix(np.ones((4, 4), dtype=np.int64))


def test_chunked_prefill_flow_second_request_hits_while_first_runs() -> None:
    """The scheduler recipe: insert at each chunk's block boundary, lock the inserted path with
    find_node, release the previous lock; a concurrent request hits the running one's prefix."""
    c, ba, wa = _cache(page_size=4)
    a = list(range(1, 23))  # 22 tokens: 5 whole blocks + 2 private tokens
    # chunk 1 computed 10 tokens: blocks 0-1 are whole, the rest stays private
    bp, wp = ba.alloc(2), wa.alloc(2)
    assert c.insert(a[:8], bp, wp) == (bp, wp)
    node, nb = c.find_node(a[:8])
    assert nb == 2
    c.inc_lock_ref(node)
    # a second request sharing 13 tokens hits the 8 cached ones while the first still runs
    m = c.match_prefix(a[:13] + [99] * 6)
    assert (m.num_tokens, m.block_pages, m.window_page) == (8, bp, wp[1])
    c.inc_lock_ref(m.last_node)
    assert c.evict(10, 10) == (0, 0)  # everything cached is in use
    # the first request finishes: insert all 5 whole blocks, it passes the tree's ids for 0-1
    bp2, wp2 = ba.alloc(3), wa.alloc(3)
    rb, rw = c.insert(a[:20], bp + bp2, wp + wp2)
    assert (rb, rw) == (bp + bp2, wp + wp2)
    c.dec_lock_ref(node)
    c.dec_lock_ref(m.last_node)
    assert c.match_prefix(a).num_tokens == 20
    assert c.evictable_sizes() == (5, 5)
    assert c.flush() and ba.used == 0 and wa.used == 0

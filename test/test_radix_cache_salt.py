"""Prefix-cache namespaces of the radix tree (vLLM's ``cache_salt``, SGLang's ``extra_key``):
sequences of different namespaces share no block, those of one namespace share as without one.

Oracle: the rule vLLM states for ``cache_salt`` (its salt enters the first block's hash, so two
tenants' prompts never share a cached block, one tenant's do) and the unsalted tree's own hits on
the same token lists, worked out by hand (a hit is whole blocks with a live resume state at the
end); through the scheduler, the prompt's cold run.
"""

from __future__ import annotations

import random

from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.radix_cache import RadixCache, RadixKey

P = 4


def _cache(n: int = 64) -> tuple[RadixCache, PageAllocator, PageAllocator]:
    ba, wa = PageAllocator(n, "block"), PageAllocator(n, "window")
    return RadixCache(ba, wa, page_size=P), ba, wa


def _finish(c: RadixCache, ba: PageAllocator, wa: PageAllocator, key: list[int] | RadixKey) -> list[int]:
    """A finished request: insert its whole blocks with fresh pages, free the duplicates."""
    ids = key.token_ids if isinstance(key, RadixKey) else key
    n = len(ids) // P
    bp, wp = ba.alloc_or_raise(n), wa.alloc_or_raise(n)
    k = RadixKey(ids[: n * P], key.extra_key) if isinstance(key, RadixKey) else ids[: n * P]
    rb, rw = c.insert(k, bp, wp)
    ba.free([m for m, t in zip(bp, rb) if m != t])
    wa.free([m for m, t in zip(wp, rw) if t is not None and m != t])
    return rb


def _ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 1000) for _ in range(n)]


def test_salts_isolate_and_one_salt_shares() -> None:
    c, ba, wa = _cache()
    prompt = _ids(13, 0)  # 3 whole blocks
    plain = _finish(c, ba, wa, prompt)
    assert c.match_prefix(prompt).num_tokens == 12
    for salt in ("tenant-a", "tenant-b"):
        assert c.match_prefix(RadixKey(prompt, salt)).num_tokens == 0
        assert c.match_prefix_len(RadixKey(prompt, salt)) == 0
        assert c.match_path(RadixKey(prompt, salt)) == []
    a = _finish(c, ba, wa, RadixKey(prompt, "tenant-a"))
    assert set(a).isdisjoint(plain)  # its own pages: nothing shared with the unsalted copy
    m = c.match_prefix(RadixKey(prompt, "tenant-a"))
    assert m.num_tokens == 12 and m.block_pages == a
    assert c.match_prefix(RadixKey(prompt, "tenant-b")).num_tokens == 0
    assert c.match_prefix(prompt).block_pages == plain
    # "" and None are the shared namespace, as a plain list
    assert c.match_prefix(RadixKey(prompt, "")).block_pages == plain
    assert c.match_prefix(RadixKey(prompt, None)).block_pages == plain
    # a salt is not a token prefix: a salted key never matches an unsalted one of other tokens
    assert c.match_prefix(RadixKey(prompt[4:], "tenant-a")).num_tokens == 0
    assert c.total_pages() == (6, 6)


def test_salted_branches_split_evict_and_flush() -> None:
    c, ba, wa = _cache()
    base = _ids(16, 1)
    other = base[:8] + _ids(8, 2)  # shares 2 blocks with base
    _finish(c, ba, wa, RadixKey(base, "s"))
    _finish(c, ba, wa, RadixKey(other, "s"))  # splits the salted first node after 2 blocks
    assert c.match_prefix(RadixKey(other, "s")).num_tokens == 16
    assert c.total_pages()[0] == 6  # 4 + 2: the two shared blocks are stored once
    assert c.match_prefix(RadixKey(base[:8] + _ids(8, 3), "s")).num_tokens == 8
    assert c.match_prefix(RadixKey(base[:8] + _ids(8, 3), "t")).num_tokens == 0
    _finish(c, ba, wa, base)  # the same tokens unsalted: 4 more blocks
    assert c.total_pages()[0] == 10
    freed, _ = c.evict(num_block_pages=10)  # everything unlocked goes, salted nodes too
    assert freed == 10 and c.total_pages() == (0, 0)
    assert c.match_prefix(RadixKey(base, "s")).num_tokens == 0
    assert ba.used == 0 and wa.used == 0
    _finish(c, ba, wa, RadixKey(base, "s"))
    m = c.match_prefix(RadixKey(base, "s"))
    c.inc_lock_ref(m.last_node)
    assert c.flush() is False  # a lock is held
    c.dec_lock_ref(m.last_node)
    assert c.flush() is True and c.match_prefix(RadixKey(base, "s")).num_tokens == 0
    assert ba.used == 0


def test_scheduler_shares_within_a_namespace_only(sched_model_dir) -> None:  # noqa: ANN001
    """Through the scheduler, four copies of one 300-token prompt queued together: namespaces
    ``a``, ``b``, ``a`` and none. In-batch prefix sharing waits for the first ``a`` to cache its
    blocks and the second ``a`` hits them; ``b`` and the unsalted copy share nothing with ``a``
    (0 cached tokens). Every output equals the prompt's cold run (0 cached tokens)."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import assert_idle, drain, make_scheduler, run_one, submit

    prompt = random_ids(300, seed=91)
    s = make_scheduler(sched_model_dir)
    cold = run_one(s, "cold", prompt, 2, extra_key="cold")  # its own namespace: shares with none below
    assert cold["cached"] == 0
    for rid, key in (("a1", "a"), ("b1", "b"), ("a2", "a"), ("plain", None)):
        submit(s, rid, prompt, 2, extra_key=key)
    got = drain(s)
    assert {rid: got[rid]["cached"] for rid in ("a1", "b1", "a2", "plain")} == {
        "a1": 0,
        "b1": 0,
        "a2": 256,
        "plain": 0,
    }
    assert all(got[rid]["ids"] == cold["ids"] for rid in ("a1", "b1", "a2", "plain"))
    assert_idle(s)

"""CPU benchmark of the radix prefix cache: match and insert cost vs prefix length.

Builds a tree holding ``--cached-blocks`` blocks (default 10k): one long document of
``max(sizes)`` tokens plus branches that share a random prefix of it and add their own blocks,
so a long match crosses many nodes (one per branch point). Then, for each prefix length, it times
(median of ``--repeats`` runs, wall clock, ``time.perf_counter``):

* ``match hit``: ``match_prefix`` of the document's first L tokens (everything cached);
* ``match hit, numpy input``: the same query as an int32 numpy array (vectorised packing);
* ``match miss``: ``match_prefix`` of L fresh tokens (cost of packing the query + one lookup);
* ``insert present``: ``insert`` of the cached L tokens (walk + returning the tree's ids);
* ``insert new``: ``insert`` of L fresh tokens as a new branch (removed again between repeats).

Usage: ``python benchmark/radix_bench.py [--page-size 256] [--cached-blocks 10000] [--repeats 15]``
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from collections.abc import Callable

import numpy as np
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.radix_cache import RadixCache

DEFAULT_SIZES = [1024, 4096, 16384, 65536, 262144, 1048576]


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build(page_size: int, cached_blocks: int, doc_tokens: int, extra_pages: int, seed: int):
    """Return (cache, block allocator, window allocator, document tokens, rng)."""
    rng = random.Random(seed)
    ba = PageAllocator(cached_blocks + extra_pages, "block")
    wa = PageAllocator(cached_blocks + extra_pages, "window")
    cache = RadixCache(ba, wa, page_size=page_size)
    doc = [rng.randrange(1, 129_000) for _ in range(doc_tokens)]
    doc_blocks = doc_tokens // page_size
    if doc_blocks > cached_blocks:
        raise ValueError(f"--cached-blocks {cached_blocks} < document blocks {doc_blocks}")
    cache.insert(doc, ba.alloc_or_raise(doc_blocks), wa.alloc_or_raise(doc_blocks))
    left = cached_blocks - doc_blocks
    while left > 0:  # branches: random shared prefix of the document + up to 32 own blocks
        share = rng.randrange(0, doc_blocks)
        own = min(left, rng.randrange(1, 33))
        toks = doc[: share * page_size] + [rng.randrange(1, 129_000) for _ in range(own * page_size)]
        bp, wp = ba.alloc_or_raise(share + own), wa.alloc_or_raise(share + own)
        rb, rw = cache.insert(toks, bp, wp)
        ba.free([m for m, t in zip(bp, rb) if m != t])
        wa.free([m for m, t in zip(wp, rw) if t is not None and m != t])
        left -= own
    assert cache.total_pages()[0] == cached_blocks
    return cache, ba, wa, doc, rng


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--page-size", type=int, default=256)
    ap.add_argument("--cached-blocks", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--sizes", type=int, nargs="+", default=DEFAULT_SIZES, help="prefix lengths (tokens)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ps = args.page_size
    max_len = max(args.sizes)
    max_blocks = max_len // ps
    cache, ba, wa, doc, rng = build(ps, args.cached_blocks, max_len, max_blocks + 8, args.seed)
    leaves = []
    stack = [cache.root]
    while stack:
        n = stack.pop()
        stack.extend(n.children.values())
        if not n.children:
            leaves.append(n)
    for leaf in leaves:  # lock the base tree (see "insert new" below)
        cache.inc_lock_ref(leaf)
    st = cache.stats()
    print(
        f"# radix_bench: page_size={ps} cached_blocks={st['cached_blocks']} nodes={st['nodes']} "
        f"repeats={args.repeats} python={platform.python_version()} cpu={platform.processor() or platform.machine()}"
    )
    print(
        "| prefix tokens | blocks | nodes on path | match hit (ms) | us/block | match hit, numpy input (ms) | match miss (ms) "
        "| insert present (ms) | insert new (ms) | us/block |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for length in args.sizes:
        nb = length // ps
        query = doc[:length]
        m = cache.match_prefix(query)
        assert m.num_tokens == nb * ps, (m.num_tokens, nb * ps)
        path = 0
        node = m.last_node
        while node is not cache.root:
            path += 1
            node = node.parent
        t_hit = _median_s(lambda q=query: cache.match_prefix(q), args.repeats)
        query_np = np.asarray(query, dtype=np.int32)
        t_hit_np = _median_s(lambda q=query_np: cache.match_prefix(q), args.repeats)
        fresh = [rng.randrange(1, 129_000) for _ in range(length)]
        t_miss = _median_s(lambda q=fresh: cache.match_prefix(q), args.repeats)
        dup_b, dup_w = list(range(1, nb + 1)), list(range(1, nb + 1))  # never taken: all blocks present
        t_ins_present = _median_s(lambda q=query, b=dup_b, w=dup_w: cache.insert(q, b, w), args.repeats)
        # insert new: L fresh tokens as a branch under the root; the base tree is locked, so an
        # untimed evict() afterwards removes exactly that branch and the next repeat starts equal
        times = []
        for _ in range(args.repeats):
            bp, wp = ba.alloc_or_raise(nb), wa.alloc_or_raise(nb)
            t0 = time.perf_counter()
            cache.insert(fresh, bp, wp)
            times.append(time.perf_counter() - t0)
            assert cache.evict(nb, 0) == (nb, nb)
        t_ins_new = statistics.median(times)
        print(
            f"| {length:,} | {nb:,} | {path} | {t_hit * 1e3:.3f} | {t_hit * 1e6 / nb:.2f} | {t_hit_np * 1e3:.3f} | {t_miss * 1e3:.3f} "
            f"| {t_ins_present * 1e3:.3f} | {t_ins_new * 1e3:.3f} | {t_ins_new * 1e6 / nb:.2f} |"
        )


if __name__ == "__main__":
    main()

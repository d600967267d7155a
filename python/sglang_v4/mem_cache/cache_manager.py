"""Page lifecycle of requests: admission with a prefix hit, allocation with eviction, caching after
each forward, and release. The scheduler decides *which* requests run; this module decides *which
pages* they use (SGLang's ``match_prefix`` / ``cache_unfinished_req`` / ``cache_finished_req``
verbs, here over DeepSeek-V4's two page kinds).

Page kinds (``memory_pool.py``): a *block page* holds one ``page_size``-token block's compressed
entries (CSA main, CSA indexer, HCA) for every layer; a *window page* holds the raw sliding-window
KV of ``W`` positions (``W`` = the model's sliding window, 128) and, at a block end, the
compressor overlap snapshot that makes it a *resume state*. A request at ``num_computed`` reads the
block pages of every block so far and the window pages of the spans its next position still sees.

A request's life, in calls:

1. :meth:`CacheManager.match_prefix` (admission): a request slot, the longest cached prefix
   (whole blocks ending in a live resume state) and a lock on it; the compressor state is loaded
   from the resume state.
2. :meth:`CacheManager.alloc_for_extend` before every forward: the block pages and window pages
   for the positions to compute, evicting from the radix cache when the pools run dry.
3. :meth:`CacheManager.cache_unfinished_req` after every forward: completed blocks go into the
   radix cache (duplicates are swapped for the tree's pages and freed), the lock moves to the new
   deepest node, and window pages that fell out of the sliding window are released.
4. :meth:`CacheManager.cache_finished_req` when the request ends (also on abort), or
   :meth:`CacheManager.release_req` when it is retracted: every page it owns goes back, the lock
   is dropped, the slot is freed.

Device work: admission resets the slot's compressor state or loads it from the resume state. A
cache manager built with ``defer_req_state_ops=True`` (the scheduler's) does not touch the device
then; it queues a :class:`ReqStateOp` that the model worker applies before the next forward, so a
batch still running on the device never sees a slot change under it (overlap scheduling) and all
device work stays in the model worker's one call.

A forward in flight keeps the block-page list it was built with: pages are appended to
``req.block_pages`` in place, but a cached block swapped for the tree's copy makes a new list.
``req.window_pages`` is never edited in place (every change makes a new dict), so a forward's
inputs hold the request's dict itself, without a per-step copy.

Ownership invariant (checked by :meth:`CacheManager.check_integrity`): every allocated page is
owned by exactly one of the radix cache or one request; a request owns ``block_pages[b]`` for
``b >= num_tree_blocks`` and ``window_pages[k]`` for ``k`` not in ``tree_window_spans``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sglang_v4.mem_cache.radix_cache import RadixCache, RadixKey

if TYPE_CHECKING:
    from sglang_v4.managers.req import Req
    from sglang_v4.mem_cache.memory_pool import DSV4KVPool

__all__ = ["CacheManager", "ReqStateOp"]


@dataclass(frozen=True)
class ReqStateOp:
    """A request slot's compressor state to set before a forward reads it.

    Attributes:
        slot: the request slot.
        window_page: ``None``: zero the state (a request starting at position 0); else load it from
            the resume snapshot under this window page (a prefix-cache hit).
    """

    slot: int
    window_page: int | None

    def apply(self, pool: DSV4KVPool) -> None:
        """Write the state into ``pool`` (device work)."""
        if self.window_page is None:
            pool.reset_req_state(self.slot)
        else:
            pool.load_resume_state(self.slot, self.window_page)


class CacheManager:
    """Allocates, caches and frees the KV pages of requests (see the module docstring).

    Args:
        pool: the KV pool (its ``block_alloc``, ``window_alloc`` and ``req_slots`` allocators, the
            per-slot compressor state ``reset_req_state`` / ``load_resume_state``, and
            ``block_pages_changed`` for its device page table).
        page_size: tokens per block page (256).
        sliding_window: positions per window page (the model's sliding window, 128).
        disable_radix_cache: cache nothing (every request starts cold; pages are freed at the end).
        resume_interval: keep resume states only at every ``resume_interval``-th block end (see
            ``radix_cache.py``).
        defer_req_state_ops: queue the slot-state writes of admissions (:meth:`take_req_state_ops`)
            instead of writing the pool at once.
    """

    def __init__(
        self,
        pool: DSV4KVPool,
        page_size: int,
        sliding_window: int,
        disable_radix_cache: bool = False,
        resume_interval: int = 1,
        defer_req_state_ops: bool = False,
    ) -> None:
        self.pool = pool
        self.defer_req_state_ops = defer_req_state_ops
        self._req_state_ops: list[ReqStateOp] = []
        self.block_alloc = pool.block_alloc
        self.window_alloc = pool.window_alloc
        self.req_slots = pool.req_slots
        self.page_size = page_size
        self.window = sliding_window
        self.tree_cache = RadixCache(
            self.block_alloc,
            self.window_alloc,
            page_size,
            disable=disable_radix_cache,
            resume_interval=resume_interval,
        )

    # ------------------------------------------------------------------ admission
    def match_prefix(self, req: Req) -> bool:
        """Admit ``req``: give it a request slot and its prefix-cache hit, locked.

        The hit covers at most ``req.max_prefix_len()`` tokens (whole blocks whose end has a live
        resume state); its block pages and resume-state window page become the request's first
        pages (owned by the tree), its compressor state is loaded from the resume state, and
        ``req.num_computed`` is set to the hit length (0 on a miss), and so is
        ``req.cached_tokens`` on the first admission (a retracted request keeps the value it got
        then: the usage's ``cached_tokens`` counts the prompt tokens served from the cache, never
        more than the prompt).

        Returns:
            False (and changes nothing) when no request slot is free.
        """
        slot = self.req_slots.alloc()
        if slot is None:
            return False
        req.req_pool_idx = slot
        m = self.tree_cache.match_prefix(req.cache_key(req.max_prefix_len()))
        hit = m.num_tokens > 0 and m.window_page is not None
        self._set_req_state(ReqStateOp(slot, None))
        if hit:
            self.tree_cache.inc_lock_ref(m.last_node)
            req.last_node = m.last_node
            req.block_pages = list(m.block_pages)
            req.num_tree_blocks = len(m.block_pages)
            span = (m.num_tokens - 1) // self.window
            req.window_pages = {span: m.window_page}
            req.tree_window_spans = {span}
            self._set_req_state(ReqStateOp(slot, m.window_page))
            req.num_computed = m.num_tokens
        if req.num_retractions == 0:
            # a retracted request re-admitted keeps the hit of its first admission: the blocks
            # it finds now are its own, computed once already (SGLang counts cached tokens of a
            # retracted prefill the same way), and they may include its output tokens
            req.cached_tokens = req.num_computed
        return True

    def _set_req_state(self, op: ReqStateOp) -> None:
        if self.defer_req_state_ops:
            self._req_state_ops.append(op)
        else:
            op.apply(self.pool)

    def take_req_state_ops(self) -> list[ReqStateOp]:
        """The slot-state writes queued since the last call (``defer_req_state_ops``), in order;
        the next forward must apply them before it runs."""
        ops, self._req_state_ops = self._req_state_ops, []
        return ops

    def prefix_match_len(self, token_ids: Sequence[int] | RadixKey) -> int:
        """Tokens of ``token_ids`` (a :class:`RadixKey` in a namespace) a :meth:`match_prefix` would hit now. Read-only: no lock, no
        node split, no LRU stamp (ordering the queue by longest prefix match must not make the
        queued requests' prefixes look recently used)."""
        return self.tree_cache.match_prefix_len(token_ids)

    # ------------------------------------------------------------------ allocation
    def evict(self, num_block_pages: int, num_window_pages: int) -> bool:
        """Evict from the radix cache until ``num_block_pages`` block pages and
        ``num_window_pages`` window pages are free (resume states first, then LRU leaf blocks,
        never locked ones). Returns whether that many are free now.

        A window-page shortfall is met by resume states alone: they are the only window pages
        the tree holds, and the resume-state pass visits every unlocked node (inner ones too),
        so when it falls short, evicting blocks would free no window page and only destroy
        cached prefixes."""
        ba, wa = self.block_alloc, self.window_alloc
        if ba.available < num_block_pages or wa.available < num_window_pages:
            self.tree_cache.evict(
                max(0, num_block_pages - ba.available), max(0, num_window_pages - wa.available)
            )
        return ba.available >= num_block_pages and wa.available >= num_window_pages

    def can_hold(self, req: Req, end: int, reserved: int = 0) -> bool:
        """Whether the block pages for positions ``0 .. end - 1`` of ``req`` that it does not hold
        yet could be had now, free or by evicting unlocked radix-cache blocks, beside ``reserved``
        pages promised to others (nothing is allocated nor evicted). Window pages are not
        counted: a request needs only the spans of its last window at a time."""
        need = -(-end // self.page_size) - len(req.block_pages)
        if need <= 0:
            return True
        available, evictable, _ = self.kv_block_counts()
        return need + reserved <= available + evictable

    def alloc_for_extend(self, req: Req, end: int) -> bool:
        """Give ``req`` the pages for computing positions ``req.scheduled_len .. end - 1``: a block
        page per block up to ``end`` and a window page per span the chunk (and the window of its
        first position) touches that it does not have yet. Evicts when the pools are short.

        Returns:
            False (and allocates nothing) when the pages cannot be found even after eviction.
        """
        W = self.window
        wp = req.window_pages
        start = req.num_computed + req.num_inflight
        need_blocks = -(-end // self.page_size) - len(req.block_pages)
        lo = max(0, (start - W + 1) // W)
        last = (end - 1) // W
        if need_blocks <= 0 and end - start == 1 and last in wp and lo in wp:
            return True  # decode fast path (spans lo..last are one or two): every page is there
        need_blocks = max(0, need_blocks)
        spans = [k for k in range(lo, last + 1) if k not in wp]
        if not self.evict(need_blocks, len(spans)):
            return False
        req.block_pages.extend(self.block_alloc.alloc_or_raise(need_blocks))
        if spans:  # a new dict: a batch in flight keeps the one it was built with
            req.window_pages = {**wp, **dict(zip(spans, self.window_alloc.alloc_or_raise(len(spans))))}
        return True

    # ------------------------------------------------------------------ after a forward
    def cache_unfinished_req(self, req: Req) -> None:
        """After a forward that brought ``req.num_computed`` up: insert its completed blocks into
        the radix cache and release the window pages it no longer reads.

        Inserted blocks the tree already had are swapped for the tree's pages (the request's
        duplicates are freed); resume states are handed to the tree at the block ends it keeps;
        the lock moves from the old ``last_node`` to the node ending at the last inserted block, so
        a second request can hit this prefix while the first is still running.
        """
        if req.num_computed // self.page_size > req.num_tree_blocks and not self.tree_cache.disable:
            self._insert_completed_blocks(req)
        wp = req.window_pages
        if wp and min(wp) < (req.num_computed - self.window + 1) // self.window:
            self.release_stale_windows(req)

    def _insert_completed_blocks(self, req: Req) -> None:
        ps, W, tree = self.page_size, self.window, self.tree_cache
        nb_done = req.num_computed // ps
        if nb_done <= req.num_tree_blocks or tree.disable:
            return
        wins: list[int | None] = []
        for b in range(nb_done):
            span = ((b + 1) * ps - 1) // W
            keep = (
                b >= req.num_tree_blocks and (b + 1) % tree.resume_interval == 0 and span in req.window_pages
            )
            wins.append(req.window_pages[span] if keep else None)
        tokens = req.cache_key(nb_done * ps)
        tree_blocks, tree_wins = tree.insert(tokens, req.block_pages[:nb_done], wins)
        if any(w is not None for w in wins[req.num_tree_blocks :]):
            req.window_pages = dict(req.window_pages)  # edited below; a batch in flight keeps the old one
        for b in range(req.num_tree_blocks, nb_done):
            if tree_blocks[b] != req.block_pages[b]:
                self.block_alloc.free([req.block_pages[b]])
                # a new list: a batch in flight keeps the one it was built with (module docstring)
                req.block_pages = list(req.block_pages)
                req.block_pages[b] = tree_blocks[b]
                if req.req_pool_idx is not None:  # the device page table must follow the swap
                    self.pool.block_pages_changed(req.req_pool_idx, b)
            if wins[b] is not None:
                span = ((b + 1) * ps - 1) // W
                if tree_wins[b] is not None and tree_wins[b] != wins[b]:
                    self.window_alloc.free([wins[b]])
                    req.window_pages[span] = tree_wins[b]
                if tree_wins[b] is not None:
                    req.tree_window_spans.add(span)
                else:  # not kept by the tree: it freed the page
                    del req.window_pages[span]
        node, nblocks = tree.find_node(tokens)
        tree.inc_lock_ref(node)
        if req.last_node is not None:
            tree.dec_lock_ref(req.last_node)
        req.last_node = node
        req.num_tree_blocks = nblocks

    def release_stale_windows(self, req: Req) -> None:
        """Drop the window pages of spans that the next position (``req.num_computed``) no longer
        sees: freed when the request owns them, just forgotten when the tree does."""
        lo = max(0, (req.num_computed - self.window + 1) // self.window)
        stale = [k for k in req.window_pages if k < lo]
        if not stale:
            return
        for k in stale:
            p = req.window_pages[k]
            if k in req.tree_window_spans:
                req.tree_window_spans.discard(k)
            else:
                self.window_alloc.free([p])
        # a new dict: a batch in flight keeps the one it was built with
        req.window_pages = {k: p for k, p in req.window_pages.items() if k >= lo}

    # ------------------------------------------------------------------ the end of a request
    def cache_finished_req(self, req: Req) -> None:
        """``req`` is finished (or aborted): insert what it completed, then :meth:`release_req`."""
        if req.req_pool_idx is not None:
            self._insert_completed_blocks(req)
        self.release_req(req)

    def release_req(self, req: Req) -> None:
        """Return every page ``req`` owns, unlock its radix path and free its slot; the request is
        back at ``num_computed = 0`` with no pages (as after a retraction). Safe to call twice."""
        own_blocks = req.block_pages[req.num_tree_blocks :]
        if own_blocks:
            self.block_alloc.free(own_blocks)
        own_wins = [p for k, p in req.window_pages.items() if k not in req.tree_window_spans]
        if own_wins:
            self.window_alloc.free(own_wins)
        if req.last_node is not None:
            self.tree_cache.dec_lock_ref(req.last_node)
        if req.req_pool_idx is not None:
            self.req_slots.free(req.req_pool_idx)
        req.block_pages, req.window_pages, req.tree_window_spans = [], {}, set()
        req.num_tree_blocks, req.last_node, req.req_pool_idx, req.num_computed = 0, None, None, 0
        req.num_inflight = 0

    # ------------------------------------------------------------------ whole-cache operations
    def record_hit(self, req: Req) -> None:
        """Count an admitted request's prompt and cache hit in the radix-cache statistics."""
        self.tree_cache.record_hit(len(req.origin_input_ids), req.cached_tokens)

    def flush(self) -> bool:
        """Empty the radix cache; refused (False) while a request holds a lock on it."""
        return bool(self.tree_cache.flush())

    def kv_block_counts(self) -> tuple[int, int, int]:
        """``(available, evictable, used)`` block pages: free, held only by the radix cache and
        unlocked (reclaimable), and held by requests (owned, or cached pages they lock). They sum
        to the pool size (SGLang's ``kv_available_tokens`` / ``kv_evictable_tokens`` /
        ``kv_used_tokens``, in pages)."""
        evictable = self.tree_cache.evictable_sizes()[0]
        used = self.block_alloc.used
        return self.block_alloc.num_pages - used, evictable, used - evictable

    def token_usage(self) -> float:
        """Fraction of block pages held by requests, 0..1. Cached pages no request locks are not
        in use (they are reclaimed on demand), as in SGLang's ``token_usage``: an idle server
        reports 0 however full its radix cache."""
        return self.kv_block_counts()[2] / max(1, self.block_alloc.num_pages)

    def check_integrity(self, reqs: Iterable[Req]) -> None:
        """Check the ownership invariant of the module docstring against the allocators.

        Args:
            reqs: every request that may own pages or a slot (running and queued).

        Raises:
            AssertionError: a page owned twice, an owned page not allocated, or allocator counts
                that differ from what the tree and the requests own (a leak).
        """
        tree_blocks, tree_windows = self.tree_cache.total_pages()
        own_blocks: set[int] = set()
        own_wins: set[int] = set()
        slots = 0
        for r in reqs:
            mine_b = r.block_pages[r.num_tree_blocks :]
            mine_w = [p for k, p in r.window_pages.items() if k not in r.tree_window_spans]
            _check(
                own_blocks.isdisjoint(mine_b) and len(set(mine_b)) == len(mine_b),
                f"{r.rid}: block owned twice",
            )
            _check(
                own_wins.isdisjoint(mine_w) and len(set(mine_w)) == len(mine_w),
                f"{r.rid}: window owned twice",
            )
            _check(r.tree_window_spans <= set(r.window_pages), f"{r.rid}: tree window span without page")
            own_blocks.update(mine_b)
            own_wins.update(mine_w)
            slots += r.req_pool_idx is not None
        _check(all(self.block_alloc.is_allocated(p) for p in own_blocks), "owned block page not allocated")
        _check(all(self.window_alloc.is_allocated(p) for p in own_wins), "owned window page not allocated")
        _check(
            self.block_alloc.used == tree_blocks + len(own_blocks),
            f"block pages: {self.block_alloc.used} used, tree {tree_blocks} + requests {len(own_blocks)}",
        )
        _check(
            self.window_alloc.used == tree_windows + len(own_wins),
            f"window pages: {self.window_alloc.used} used, tree {tree_windows} + requests {len(own_wins)}",
        )
        _check(self.req_slots.size - self.req_slots.available == slots, "request slots leaked")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise AssertionError(f"CacheManager integrity: {message}")

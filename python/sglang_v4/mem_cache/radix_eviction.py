"""LRU, lock and eviction bookkeeping of the radix prefix cache (:class:`~.radix_cache.RadixCache`).

:class:`RadixEvictionMixin` is the half of ``RadixCache`` that owns the tree's pages over time: the
LRU clock and heap (one entry per live node, re-pushed lazily when stale), the lock counts along a
root..node path (``inc_lock_ref`` / ``dec_lock_ref``), eviction of resume states and of leaf blocks
in LRU order (``evict``), ``flush``, and the page / hit counters ``stats`` reports. The tree's shape
(block keys, walking, splitting, ``match_prefix``, ``insert``) is :mod:`.radix_cache`, which owns
the state this mixin reads (set in its ``__init__`` / ``_reset``). Eviction order and why:
``docs/KV_CACHE.md``, "Radix cache".
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from sglang_v4.mem_cache.radix_node import PageFreer, TreeNode

__all__ = ["RadixEvictionMixin"]


class RadixEvictionMixin:
    """LRU stamps, path locks, eviction, flush and counters of :class:`~.radix_cache.RadixCache`.

    Not usable alone: ``RadixCache`` sets the attributes below and provides ``_child_key`` (a
    node's key in its parent's children) and ``_reset`` (an empty tree). Page counts are in pages
    (one block page per ``page_size``-token block, one window page per resume state).
    """

    root: TreeNode
    block_alloc: PageFreer
    window_alloc: PageFreer
    page_size: int
    disable: bool
    resume_interval: int
    _bb: int
    _clock: int
    _heap: list[tuple[int, int, int, TreeNode]]
    _num_nodes: int
    _num_blocks: int
    _num_windows: int
    _locked_blocks: int
    _locked_windows: int
    _locked_nodes: int
    _locks_held: int
    _hit_tokens: int
    _prompt_tokens: int
    _evicted_blocks: int
    _evicted_windows: int

    if TYPE_CHECKING:

        def _child_key(self, node: TreeNode) -> bytes: ...

        def _reset(self) -> None: ...

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _push(self, node: TreeNode) -> None:
        heapq.heappush(self._heap, (node.last_access, -node.end_depth, node.uid, node))

    def _pop_lru(self) -> TreeNode | None:
        """Pop the live node with the smallest ``(last_access, -end_depth)``; None if none left.

        The heap holds exactly one entry per live node, pushed when the node was created and
        not updated when the node is touched: a node's key only grows (stamps increase, a
        trimmed edge ends higher), so an outdated entry surfaces early and is re-pushed with the
        current key. Touching a node is O(1); each eviction pop is O(log nodes) amortised.
        """
        heap = self._heap
        while heap:
            stamp, neg_end, _, node = heapq.heappop(heap)
            if not node.alive:
                continue
            if stamp != node.last_access or neg_end != -node.end_depth:
                self._push(node)
                continue
            return node
        return None

    def _set_window(self, node: TreeNode, t: int, page: int | None) -> None:
        old = node.window_pages[t]
        node.window_pages[t] = page
        delta = (page is not None) - (old is not None)
        node.num_windows += delta
        self._num_windows += delta
        if node.lock_ref > 0:
            self._locked_windows += delta

    def inc_lock_ref(self, node: TreeNode) -> None:
        """Lock the path root..node: none of its blocks or resume states can be evicted.

        Raises:
            ValueError: if ``node`` was already evicted.
        """
        if node is self.root:
            return
        if not node.alive:
            raise ValueError("inc_lock_ref: node is no longer in the tree")
        self._locks_held += 1
        while node is not self.root:
            if node.lock_ref == 0:
                self._locked_nodes += 1
                self._locked_blocks += node.num_blocks
                self._locked_windows += node.num_windows
            node.lock_ref += 1
            node = node.parent

    def dec_lock_ref(self, node: TreeNode) -> None:
        """Undo one :meth:`inc_lock_ref` on ``node``.

        Raises:
            ValueError: if the node is not locked (unbalanced call).
        """
        if node is self.root:
            return
        if not node.alive or node.lock_ref <= 0:
            raise ValueError("dec_lock_ref: node is not locked")
        self._locks_held -= 1
        while node is not self.root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._locked_nodes -= 1
                self._locked_blocks -= node.num_blocks
                self._locked_windows -= node.num_windows
            node = node.parent

    def evict(self, num_block_pages: int = 0, num_window_pages: int = 0) -> tuple[int, int]:
        """Free at least the requested pages if possible (fewer if not enough are evictable).

        Phase 1 frees resume states (window pages) of unlocked nodes until ``num_window_pages``
        are freed; phase 2 frees unlocked leaf blocks (tail of the edge first, each with its
        resume state) until ``num_block_pages`` are freed. Both in LRU order (module docstring).

        Returns:
            ``(block_pages_freed, window_pages_freed)``; window pages freed in phase 2 count too.

        Raises:
            ValueError: on a negative request.
        """
        if num_block_pages < 0 or num_window_pages < 0:
            raise ValueError(f"evict: negative request ({num_block_pages}, {num_window_pages})")
        freed_b = freed_w = 0
        if num_window_pages > 0 and self._num_windows > self._locked_windows:
            popped: list[TreeNode] = []
            freed: list[int] = []
            while freed_w < num_window_pages:
                node = self._pop_lru()
                if node is None:
                    break
                popped.append(node)
                if node.lock_ref > 0 or node.num_windows == 0:
                    continue
                wp = node.window_pages
                for t in range(len(wp) - 1, -1, -1):
                    if wp[t] is not None:
                        freed.append(wp[t])
                        self._set_window(node, t, None)
                        freed_w += 1
                        if freed_w >= num_window_pages:
                            break
            for node in popped:
                self._push(node)
            self.window_alloc.free(freed)
        if num_block_pages > 0 and self._num_blocks > self._locked_blocks:
            popped = []
            freed_blocks: list[int] = []
            freed_windows: list[int] = []
            while freed_b < num_block_pages:
                node = self._pop_lru()
                if node is None:
                    break
                if node.lock_ref > 0 or node.children:
                    popped.append(node)
                    continue
                k = min(node.num_blocks, num_block_pages - freed_b)
                keep = node.num_blocks - k
                freed_blocks.extend(node.block_pages[keep:])
                for w in node.window_pages[keep:]:
                    if w is not None:
                        freed_windows.append(w)
                nw = sum(w is not None for w in node.window_pages[keep:])
                freed_b += k
                self._num_blocks -= k
                self._num_windows -= nw
                if keep == 0:
                    node.alive = False
                    del node.parent.children[self._child_key(node)]
                    self._num_nodes -= 1
                else:
                    node.edge = node.edge[: keep * self._bb]
                    del node.block_pages[keep:]
                    del node.window_pages[keep:]
                    node.num_windows -= nw
                    popped.append(node)
            for node in popped:
                self._push(node)
            freed_w += len(freed_windows)
            self.block_alloc.free(freed_blocks)
            self.window_alloc.free(freed_windows)
        self._evicted_blocks += freed_b
        self._evicted_windows += freed_w
        return freed_b, freed_w

    def evictable_sizes(self) -> tuple[int, int]:
        """``(block pages, window pages)`` that :meth:`evict` could free now (unlocked ones)."""
        return self._num_blocks - self._locked_blocks, self._num_windows - self._locked_windows

    def total_pages(self) -> tuple[int, int]:
        """``(block pages, window pages)`` currently owned by the tree."""
        return self._num_blocks, self._num_windows

    def flush(self) -> bool:
        """Empty the tree and free every page it owns. Refused (returns False, changes nothing)
        while any lock is held, as SGLang refuses ``flush_cache`` while requests run."""
        if self._locks_held > 0:
            return False
        blocks: list[int] = []
        windows: list[int] = []
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            blocks.extend(n.block_pages)
            windows.extend(w for w in n.window_pages if w is not None)
            n.alive = False
            stack.extend(n.children.values())
        self.block_alloc.free(blocks)
        self.window_alloc.free(windows)
        self._reset()
        return True

    def record_hit(self, prompt_tokens: int, hit_tokens: int) -> None:
        """Add one request's prompt length and cache hit (tokens) to the totals in :meth:`stats`.

        Raises:
            ValueError: unless ``0 <= hit_tokens <= prompt_tokens``.
        """
        if prompt_tokens < 0 or hit_tokens < 0 or hit_tokens > prompt_tokens:
            raise ValueError(
                f"record_hit: need 0 <= hit_tokens ({hit_tokens}) <= prompt_tokens ({prompt_tokens})"
            )
        self._prompt_tokens += prompt_tokens
        self._hit_tokens += hit_tokens

    def stats(self) -> dict[str, Any]:
        """Counters for ``get_server_info()["radix_cache"]``.

        Returns:
            A JSON-ready dict: the settings (``disabled``, ``page_size`` in tokens,
            ``resume_interval`` in blocks), ``nodes``; block pages (``cached_blocks``,
            ``evictable_blocks``, ``locked_blocks``, ``evicted_blocks``: counts of
            ``page_size``-token block pages, and
            ``cached_tokens = cached_blocks * page_size``); resume states (window pages:
            ``resume_states``, ``evictable_resume_states``, ``locked_resume_states``,
            ``evicted_resume_states``); ``locked_nodes``; the hit totals of :meth:`record_hit`
            in tokens (``hit_tokens``, ``prompt_tokens``) and ``hit_rate = hit / prompt`` (0.0
            before any prompt).
        """
        eb, ew = self.evictable_sizes()
        return {
            "disabled": self.disable,
            "page_size": self.page_size,
            "resume_interval": self.resume_interval,
            "nodes": self._num_nodes,
            "cached_blocks": self._num_blocks,
            "cached_tokens": self._num_blocks * self.page_size,
            "resume_states": self._num_windows,
            "evictable_blocks": eb,
            "evictable_resume_states": ew,
            "locked_nodes": self._locked_nodes,
            "locked_blocks": self._locked_blocks,
            "locked_resume_states": self._locked_windows,
            "hit_tokens": self._hit_tokens,
            "prompt_tokens": self._prompt_tokens,
            "hit_rate": self._hit_tokens / self._prompt_tokens if self._prompt_tokens else 0.0,
            "evicted_blocks": self._evicted_blocks,
            "evicted_resume_states": self._evicted_windows,
        }

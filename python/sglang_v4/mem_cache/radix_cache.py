"""Radix prefix cache over 256-token logical blocks of the tri-structured DeepSeek-V4 KV.

The key unit is a *block* of ``page_size`` tokens (256 = 64 CSA windows of 4 = 2 HCA windows of
128, so every compressor's partial window is empty at a block boundary). Per block the tree holds
two page ids, never tensors:

* ``block_page`` (from ``block_alloc``): the block's compressed entries of every layer (CSA main
  64 entries, CSA indexer 64 entries, HCA 2 entries). This is the *full-history* state; a later
  request that extends this prefix reads it through its block table.
* ``window_page`` (from ``window_alloc``, may be ``None``): the *resume state* at the block's END:
  the raw sliding-window KV of the last ``sliding_window`` (128) positions of the block for every
  layer, plus the CSA overlap halves (main and indexer compressor) snapshotted under the same id.
  A request can continue from a block end only if that resume state is live.

``match_prefix`` returns the longest cached prefix (whole blocks) whose end has a live resume
state; interior block ends whose resume state was evicted still count as part of a longer match,
because only the compressed pages are needed there. ``resume_interval = k`` keeps resume states
only at block ends whose block index + 1 is a multiple of ``k``.

Namespaces (vLLM's ``cache_salt``, SGLang's ``extra_key``): a key may be a
:class:`~.radix_node.RadixKey` with an ``extra_key``; the first block of such a sequence hangs
below the root under :func:`~.radix_node.extra_key_tag` + its tokens, so sequences of different
keys share no block (their whole paths differ from the first block on, as vLLM's salted block
hashes chain from the first one) and those of one key share as usual. The pages, LRU and eviction
are common to all namespaces. Why (the cost of a resume state),
the tree layout and the LRU / eviction order: ``docs/KV_CACHE.md``, "Radix cache".

This module is the tree's shape: block keys, walking, splitting, :meth:`RadixCache.match_prefix`
and :meth:`RadixCache.insert`. Its LRU stamps, path locks, eviction, ``flush`` and counters are
:class:`~.radix_eviction.RadixEvictionMixin` (:mod:`.radix_eviction`), a base of ``RadixCache``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from sglang_v4.mem_cache.radix_eviction import RadixEvictionMixin
from sglang_v4.mem_cache.radix_node import (
    TOKEN_BYTES,
    MatchResult,
    PageFreer,
    RadixKey,
    TreeNode,
    pack_token_ids,
    split_key,
)

__all__ = ["MatchResult", "RadixCache", "RadixKey", "TreeNode"]

#: A tree key: token ids (the shared namespace) or a :class:`RadixKey`.
Key = Sequence[int] | RadixKey


class RadixCache(RadixEvictionMixin):
    """Radix prefix cache keyed on whole ``page_size``-token blocks (see the module docstring).

    Args:
        block_alloc: allocator of block pages (``free(ids)`` is called for pages the tree drops).
        window_alloc: allocator of window pages (resume states).
        page_size: tokens per block (256 for DeepSeek-V4; must be a multiple of the compression
            ratio of each compressed layer kind the model has and of the sliding window, which the
            caller checks against the model config: ``kv_spec.check_page_size_fits``).
        disable: if True the cache holds nothing: ``match_prefix`` matches nothing and ``insert``
            returns the caller's ids without taking or freeing anything.
        resume_interval: keep resume states only at block ends whose block index + 1 is a multiple
            of this (1 = every block end); see the module docstring for the trade-off.

    Raises:
        ValueError: if ``page_size`` or ``resume_interval`` is not a positive int.

    Page ownership contract of :meth:`insert`: for a block the tree did not have, it takes the
    caller's block page (and window page, at a kept block end); for a block it had, it returns its
    own ids and the caller keeps (and must eventually free) its duplicates: the caller frees its
    page wherever the returned id is a different non-None id. A window page passed for a block end
    that is not kept (``resume_interval``) is freed by the tree and ``None`` is returned for it,
    so do not pass a window page that is still being read.

    The tree is not thread-safe; the scheduler calls it from its one event loop.
    """

    def __init__(
        self,
        block_alloc: PageFreer,
        window_alloc: PageFreer,
        page_size: int = 256,
        disable: bool = False,
        resume_interval: int = 1,
    ) -> None:
        if not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size must be a positive int, got {page_size!r}")
        if not isinstance(resume_interval, int) or resume_interval < 1:
            raise ValueError(f"resume_interval must be a positive int, got {resume_interval!r}")
        self.block_alloc = block_alloc
        self.window_alloc = window_alloc
        self.page_size = page_size
        self.disable = disable
        self.resume_interval = resume_interval
        self._bb = page_size * TOKEN_BYTES  # bytes per block key
        self._uids = itertools.count(1)
        self._hit_tokens = 0
        self._prompt_tokens = 0
        self._evicted_blocks = 0
        self._evicted_windows = 0
        self._reset()

    # ------------------------------------------------------------------ internals
    def _reset(self) -> None:
        self.root = TreeNode(None, b"", [], [], 0, 0)
        self.root.lock_ref = 1  # the root is never evicted
        self._clock = 0
        self._heap: list[tuple[int, int, int, TreeNode]] = []
        self._num_nodes = 0
        self._num_blocks = 0
        self._num_windows = 0
        self._locked_blocks = 0
        self._locked_windows = 0
        self._locked_nodes = 0
        self._locks_held = 0

    def _keeps(self, block_index: int) -> bool:
        return (block_index + 1) % self.resume_interval == 0

    def _child_key(self, node: TreeNode) -> bytes:
        """The key of ``node`` in ``node.parent.children``: its first block (after its namespace
        tag when that block is a sequence's first)."""
        first = node.edge[: self._bb]
        return node.tag + first if node.depth == 0 else first

    def _lookup_key(self, buf: bytes, i: int, tag: bytes) -> bytes:
        """The children-dict key of block ``i`` of ``buf`` below its parent: the block's bytes,
        after the namespace ``tag`` when it is the sequence's first block."""
        block = buf[i * self._bb : (i + 1) * self._bb]
        return tag + block if i == 0 else block

    def _split(self, node: TreeNode, k: int) -> TreeNode:
        """Split ``node`` after its first ``k`` blocks (0 < k < num_blocks); returns the new upper
        node. ``node`` keeps its identity as the lower part (locks taken on it stay valid)."""
        bb = self._bb
        upper = TreeNode(
            node.parent,
            node.edge[: k * bb],
            node.block_pages[:k],
            node.window_pages[:k],
            node.depth,
            next(self._uids),
        )
        upper.lock_ref = node.lock_ref
        upper.last_access = node.last_access
        upper.tag = node.tag
        node.parent.children[self._child_key(node)] = upper
        node.edge = node.edge[k * bb :]
        node.block_pages = node.block_pages[k:]
        node.window_pages = node.window_pages[k:]
        node.num_windows -= upper.num_windows
        node.depth += k
        node.parent = upper
        upper.children[node.edge[:bb]] = node
        self._num_nodes += 1
        if upper.lock_ref > 0:
            self._locked_nodes += 1
        self._push(upper)
        return upper

    def _common_blocks(self, node: TreeNode, buf: bytes, start_block: int, max_blocks: int) -> int:
        """Number of leading blocks of ``node.edge`` equal to ``buf`` from ``start_block``
        (at most ``max_blocks``; the first block is known to match)."""
        bb = self._bb
        n = min(node.num_blocks, max_blocks)
        off = start_block * bb
        if buf[off : off + n * bb] == node.edge[: n * bb]:
            return n
        lo, hi = 1, n  # edge[:lo] matches, edge[:hi] does not; binary search on memcmp
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if buf[off : off + mid * bb] == node.edge[: mid * bb]:
                lo = mid
            else:
                hi = mid
        return lo

    def _walk(self, buf: bytes, nblocks: int, tag: bytes = b"") -> tuple[list[TreeNode], list[int]]:
        """Walk the tree along ``buf`` (in the namespace of ``tag``); returns the visited nodes
        and blocks matched in each."""
        nodes: list[TreeNode] = []
        counts: list[int] = []
        node = self.root
        i = 0
        while i < nblocks:
            child = node.children.get(self._lookup_key(buf, i, tag))
            if child is None:
                break
            j = self._common_blocks(child, buf, i, nblocks - i)
            nodes.append(child)
            counts.append(j)
            if j < child.num_blocks:
                break
            node = child
            i += j
        return nodes, counts

    # ------------------------------------------------------------------ public API
    def match_prefix(self, key: Key) -> MatchResult:
        """Longest cached prefix of ``key`` (whole blocks, in its namespace) whose end has a live
        resume state.

        A trailing partial block is never counted. The node holding the match end is split so that
        ``last_node`` ends exactly there, and the path root..last_node is stamped as used (LRU).
        Cost: O(len(token_ids)) to pack the query once, plus O(matched blocks).

        Raises:
            ValueError: if a token id is not an int in [0, 2**32).
        """
        if self.disable:
            return MatchResult(0, [], None, self.root)
        token_ids, tag = split_key(key)
        nblocks = len(token_ids) // self.page_size
        if nblocks == 0:
            return MatchResult(0, [], None, self.root)
        buf = pack_token_ids(token_ids, nblocks * self.page_size)
        if not self.root.children:
            return MatchResult(0, [], None, self.root)
        nodes, counts = self._walk(buf, nblocks, tag)
        # find the deepest matched block end with a live resume state
        best = -1
        for idx in range(len(nodes) - 1, -1, -1):
            n, j = nodes[idx], counts[idx]
            if n.num_windows == 0:
                continue
            wp = n.window_pages
            for t in range(j - 1, -1, -1):
                if wp[t] is not None:
                    best = idx
                    best_t = t
                    break
            if best >= 0:
                break
        if best < 0:
            return MatchResult(0, [], None, self.root)
        last = nodes[best]
        if best_t + 1 < last.num_blocks:
            last = self._split(last, best_t + 1)
        stamp = self._tick()
        pages: list[int] = []
        for n in nodes[:best]:
            pages.extend(n.block_pages)
            n.last_access = stamp
        pages.extend(last.block_pages)
        last.last_access = stamp
        return MatchResult(len(pages) * self.page_size, pages, last.window_pages[-1], last)

    def match_prefix_len(self, key: Key) -> int:
        """Tokens :meth:`match_prefix` would return for ``key`` now, without changing the
        tree: no node split and no LRU stamp (the scheduler's longest-prefix ordering asks this
        of every queued request each step; only an admission counts as a use).

        Raises:
            ValueError: if a token id is not an int in [0, 2**32).
        """
        if self.disable or not self.root.children:
            return 0
        token_ids, tag = split_key(key)
        nblocks = len(token_ids) // self.page_size
        if nblocks == 0:
            return 0
        nodes, counts = self._walk(pack_token_ids(token_ids, nblocks * self.page_size), nblocks, tag)
        before = sum(counts)
        for idx in range(len(nodes) - 1, -1, -1):
            n, j = nodes[idx], counts[idx]
            before -= j
            if n.num_windows == 0:
                continue
            wp = n.window_pages
            for t in range(j - 1, -1, -1):
                if wp[t] is not None:
                    return (before + t + 1) * self.page_size
        return 0

    def match_path(self, key: Key) -> list[TreeNode]:
        """The nodes whole blocks of ``key`` walk through from the root (root excluded; the
        last one may be matched only in part; empty when no block is cached), ignoring resume
        states. Read-only like :meth:`match_prefix_len` (``--schedule-policy dfs-weight`` groups
        the queued requests by it).

        Raises:
            ValueError: if a token id is not an int in [0, 2**32).
        """
        token_ids, tag = split_key(key)
        nblocks = len(token_ids) // self.page_size
        if self.disable or not self.root.children or nblocks == 0:
            return []
        return self._walk(pack_token_ids(token_ids, nblocks * self.page_size), nblocks, tag)[0]

    def insert(
        self,
        key: Key,
        block_pages: list[int],
        window_pages: list[int | None],
    ) -> tuple[list[int], list[int | None]]:
        """Insert whole blocks with their pages; returns the tree's ``(block_pages, window_pages)``.

        Args:
            key: token ids or a :class:`RadixKey` (its namespace); ``len`` must be a multiple
                of ``page_size``; block ``i`` is ``token_ids[i * page_size : (i + 1) * page_size]``.
            block_pages: one block-page id per block.
            window_pages: per block, the resume-state page at that block's end, or ``None``.

        Ownership (see the class docstring): new blocks take the caller's ids; present blocks
        return the tree's ids (caller frees its duplicates); a present block without a resume
        state adopts the caller's window page; window pages for block ends not kept by
        ``resume_interval`` are freed here and returned as ``None``. With ``disable`` the caller's
        lists are returned unchanged and nothing is taken or freed. The path is stamped as used.

        Raises:
            ValueError: on a length that is not a multiple of ``page_size``, list lengths that do
                not equal the number of blocks, or a token id outside [0, 2**32).
        """
        ps = self.page_size
        token_ids, tag = split_key(key)
        if len(token_ids) % ps != 0:
            raise ValueError(f"token_ids: length {len(token_ids)} is not a multiple of page_size {ps}")
        nblocks = len(token_ids) // ps
        if len(block_pages) != nblocks:
            raise ValueError(f"block_pages: expected {nblocks} entries, got {len(block_pages)}")
        if len(window_pages) != nblocks:
            raise ValueError(f"window_pages: expected {nblocks} entries, got {len(window_pages)}")
        if self.disable or nblocks == 0:
            return list(block_pages), list(window_pages)
        buf = pack_token_ids(token_ids, nblocks * self.page_size)
        bb = self._bb
        stamp = self._tick()
        out_b: list[int] = []
        out_w: list[int | None] = []
        to_free: list[int] = []
        node = self.root
        i = 0
        while i < nblocks:
            first = self._lookup_key(buf, i, tag)
            child = node.children.get(first)
            if child is None:
                wins: list[int | None] = []
                for t in range(i, nblocks):
                    w = window_pages[t]
                    if w is not None and not self._keeps(t):
                        to_free.append(w)
                        w = None
                    wins.append(w)
                new = TreeNode(node, buf[i * bb :], list(block_pages[i:]), wins, i, next(self._uids))
                new.tag = tag
                node.children[first] = new
                self._num_nodes += 1
                self._num_blocks += new.num_blocks
                self._num_windows += new.num_windows
                new.last_access = stamp
                self._push(new)
                out_b.extend(new.block_pages)
                out_w.extend(wins)
                break
            j = self._common_blocks(child, buf, i, nblocks - i)
            if j < child.num_blocks:
                child = self._split(child, j)
            for t in range(j):
                out_b.append(child.block_pages[t])
                w = window_pages[i + t]
                tw = child.window_pages[t]
                if not self._keeps(i + t):
                    if w is not None:
                        to_free.append(w)
                    out_w.append(None)
                elif tw is None and w is not None:
                    self._set_window(child, t, w)
                    out_w.append(w)
                else:
                    out_w.append(tw)
            child.last_access = stamp
            node = child
            i += j
        if to_free:
            self.window_alloc.free(to_free)
        return out_b, out_w

    def find_node(self, key: Key) -> tuple[TreeNode, int]:
        """Node ending exactly at the deepest cached whole-block prefix of ``key``, ignoring
        resume states, and that prefix's length in blocks (root and 0 if none).

        For a running request that just inserted its blocks: lock the returned node (then unlock
        its previous node) so the blocks it reads cannot be evicted. Splits a node if needed; does
        not stamp LRU.
        """
        token_ids, tag = split_key(key)
        nblocks = len(token_ids) // self.page_size
        if self.disable or nblocks == 0:
            return self.root, 0
        nodes, counts = self._walk(pack_token_ids(token_ids, nblocks * self.page_size), nblocks, tag)
        if not nodes:
            return self.root, 0
        last, j = nodes[-1], counts[-1]
        if j < last.num_blocks:
            last = self._split(last, j)
        return last, last.end_depth

"""Node of the radix prefix cache (:mod:`sglang_v4.mem_cache.radix_cache`), and what the tree needs
from a page allocator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["PageFreer", "TreeNode"]


class PageFreer(Protocol):
    """What the tree needs from an allocator (``PageAllocator`` satisfies it)."""

    def free(self, pages: Sequence[int]) -> None: ...


class TreeNode:
    """One radix-tree node: an edge of ``num_blocks`` whole blocks hanging below ``parent``.

    Attributes:
        edge: packed token ids of the edge (uint32, ``4 * page_size`` bytes per block).
        block_pages: one block-page id per block of the edge.
        window_pages: per block, the resume-state page id at that block's end, or ``None``.
        depth: number of blocks from the root to the first block of this edge.
        lock_ref: number of outstanding locks whose path passes through this node.
        last_access: LRU stamp (a clock value of :class:`RadixCache`, not wall time).
    """

    __slots__ = (
        "parent",
        "children",
        "edge",
        "block_pages",
        "window_pages",
        "depth",
        "lock_ref",
        "last_access",
        "uid",
        "alive",
        "num_windows",
    )

    def __init__(
        self,
        parent: TreeNode | None,
        edge: bytes,
        block_pages: list[int],
        window_pages: list[int | None],
        depth: int,
        uid: int,
    ) -> None:
        self.parent = parent
        self.children: dict[bytes, TreeNode] = {}
        self.edge = edge
        self.block_pages = block_pages
        self.window_pages = window_pages
        self.depth = depth
        self.lock_ref = 0
        self.last_access = 0
        self.uid = uid
        self.alive = True
        self.num_windows = sum(w is not None for w in window_pages)

    @property
    def num_blocks(self) -> int:
        """Number of blocks on this node's edge."""
        return len(self.block_pages)

    @property
    def end_depth(self) -> int:
        """Number of blocks from the root to the end of this node's edge."""
        return self.depth + len(self.block_pages)

    def __repr__(self) -> str:
        return (
            f"TreeNode(uid={self.uid}, depth={self.depth}, blocks={self.num_blocks}, "
            f"windows={self.num_windows}, lock_ref={self.lock_ref})"
        )

"""Node, key (:class:`RadixKey`, packing) and match result of the radix prefix cache
(:mod:`sglang_v4.mem_cache.radix_cache`), and what the tree needs from a page allocator."""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = [
    "TOKEN_BYTES",
    "MatchResult",
    "PageFreer",
    "RadixKey",
    "TreeNode",
    "extra_key_tag",
    "pack_token_ids",
]

TOKEN_BYTES = 4  # tokens are packed as uint32
assert array("I").itemsize == TOKEN_BYTES, "array('I') must be 4 bytes to match numpy '=u4'"


@dataclass(frozen=True)
class RadixKey:
    """A token sequence in a cache namespace (SGLang's ``RadixKey``): sequences of different
    ``extra_key`` never share cached blocks, those of the same one do.

    ``extra_key`` is what a request sends as vLLM's ``cache_salt`` (and SGLang's ``extra_key``):
    vLLM mixes the salt into the hash of a prompt's first block, so that every later block, whose
    hash chains on it, differs too; the tree here does the same by keying the first block of a
    salted sequence on :func:`extra_key_tag` + its tokens (:class:`~.radix_cache.RadixCache`).
    ``None`` or ``""``: the shared namespace (a plain token list is the same).

    Attributes:
        token_ids: the token ids (a list, tuple or 1-D integer array).
        extra_key: the namespace, or None.
    """

    token_ids: Sequence[int]
    extra_key: str | None = None

    def __len__(self) -> int:
        return len(self.token_ids)


def extra_key_tag(extra_key: str | None) -> bytes:
    """The bytes put before a first block's packed tokens in its tree key: ``b""`` for the shared
    namespace, else the 32-byte SHA-256 of ``extra_key`` (UTF-8), so a salted key (block bytes +
    32) can never equal an unsalted one (block bytes) and two salts differ unless SHA-256
    collides."""
    if not extra_key:
        return b""
    return hashlib.sha256(extra_key.encode("utf-8", "surrogatepass")).digest()


def split_key(key: Sequence[int] | RadixKey) -> tuple[Sequence[int], bytes]:
    """``(token_ids, extra_key_tag)`` of a tree key: a :class:`RadixKey` or plain token ids."""
    if isinstance(key, RadixKey):
        return key.token_ids, extra_key_tag(key.extra_key)
    return key, b""


def pack_token_ids(token_ids: Sequence[int], num_tokens: int, field: str = "token_ids") -> bytes:
    """Pack the first ``num_tokens`` of ``token_ids`` as uint32 bytes (O(tokens), in C): a tree key.

    Accepts a list / tuple of ints, or a 1-D numpy array / CPU torch tensor of integers.

    Raises:
        ValueError: naming ``field``, if the ids are not a 1-D integer sequence in ``[0, 2**32)``.
    """
    if hasattr(token_ids, "dtype"):  # numpy array or torch tensor: vectorised check + cast
        arr = np.asarray(token_ids[:num_tokens])
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise ValueError(f"{field}: expected a 1-D integer array, got {arr.dtype} {arr.shape}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= 2**32):
            raise ValueError(f"{field}: token ids must be ints in [0, 2**32)")
        return arr.astype("=u4", copy=False).tobytes()
    try:
        packed = array("I", token_ids)
    except (OverflowError, TypeError) as e:
        raise ValueError(f"{field}: token ids must be ints in [0, 2**32): {e}") from None
    del packed[num_tokens:]
    return packed.tobytes()


class PageFreer(Protocol):
    """What the tree needs from an allocator (``PageAllocator`` satisfies it)."""

    def free(self, pages: Sequence[int]) -> None:
        """Return ``pages`` to the allocator."""


class TreeNode:
    """One radix-tree node: an edge of ``num_blocks`` whole blocks hanging below ``parent``.

    Attributes:
        edge: packed token ids of the edge (uint32, ``4 * page_size`` bytes per block).
        block_pages: one block-page id per block of the edge.
        window_pages: per block, the resume-state page id at that block's end, or ``None``.
        depth: number of blocks from the root to the first block of this edge.
        lock_ref: number of outstanding locks whose path passes through this node.
        last_access: LRU stamp (a clock value of :class:`RadixCache`, not wall time).
        tag: :func:`extra_key_tag` of the node's namespace; part of its key in ``parent.children``
            only while ``depth == 0`` (a first block), ``b""`` for the shared namespace.
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
        "tag",
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
        self.tag = b""

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


@dataclass
class MatchResult:
    """Result of :meth:`RadixCache.match_prefix`.

    Attributes:
        num_tokens: matched tokens, a multiple of ``page_size``: the longest cached prefix whose
            end has a live resume state (0 if none).
        block_pages: block-page ids of the matched blocks, ``len == num_tokens // page_size``.
        window_page: resume-state page id at the end of the match; ``None`` iff ``num_tokens == 0``.
        last_node: node whose edge ends exactly at the match end (the root when nothing matched);
            pass it to :meth:`RadixCache.inc_lock_ref` / :meth:`RadixCache.dec_lock_ref`.
    """

    num_tokens: int
    block_pages: list[int]
    window_page: int | None
    last_node: TreeNode

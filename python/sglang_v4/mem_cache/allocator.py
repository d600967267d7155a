"""Page allocator: hands out integer page ids from a fixed pool.

One allocator serves one id space. The tri-structured KV uses two id spaces (see
``memory_pool.py``): *block pages* (one per 256-token logical block, indexing the CSA-main,
CSA-indexer and HCA pools at once) and *window pages* (one per ``sliding_window`` raw-KV
positions, also carrying the compressor overlap snapshot used as a resume state).
Page id 0 is reserved as a scratch / padding page and is never handed out, so a padded batch
entry can point at page 0 without corrupting live data (the same trick SGLang uses).
"""

from __future__ import annotations

from collections.abc import Iterable


class OutOfPagesError(RuntimeError):
    """Raised by :meth:`PageAllocator.alloc_or_raise` when the pool cannot satisfy a request."""


class PageAllocator:
    """A free-list allocator over page ids ``1 .. num_pages`` (0 is the reserved dummy page).

    Args:
        num_pages: number of usable pages (the backing tensors have ``num_pages + 1`` rows).
        name: label used in error messages and stats.

    Invariants (checked by ``test/test_allocator.py``): a page is never handed out twice
    without being freed in between, and freeing a page that is not allocated raises.
    """

    def __init__(self, num_pages: int, name: str = "pages") -> None:
        if num_pages < 1:
            raise ValueError(f"{name}: num_pages must be >= 1, got {num_pages}")
        self.num_pages = num_pages
        self.name = name
        self._free: list[int] = list(range(num_pages, 0, -1))  # pop() yields 1, 2, 3...
        self._allocated: set[int] = set()

    @property
    def available(self) -> int:
        """Number of free pages."""
        return len(self._free)

    @property
    def used(self) -> int:
        """Number of pages handed out and not yet freed."""
        return len(self._allocated)

    def alloc(self, n: int) -> list[int] | None:
        """Take ``n`` pages; returns their ids, or ``None`` (and takes nothing) if fewer are free."""
        if n < 0:
            raise ValueError(f"{self.name}: cannot allocate {n} pages")
        if n > len(self._free):
            return None
        out = [self._free.pop() for _ in range(n)]
        self._allocated.update(out)
        return out

    def alloc_or_raise(self, n: int) -> list[int]:
        """Like :meth:`alloc` but raises :class:`OutOfPagesError` when the pool is short."""
        out = self.alloc(n)
        if out is None:
            raise OutOfPagesError(f"{self.name}: need {n} pages, {self.available} free")
        return out

    def free(self, pages: Iterable[int]) -> None:
        """Return pages to the pool.

        Raises:
            ValueError: if a page is not currently allocated (double free or foreign id).
        """
        for p in pages:
            if p not in self._allocated:
                raise ValueError(f"{self.name}: page {p} freed but not allocated")
            self._allocated.remove(p)
            self._free.append(p)

    def is_allocated(self, page: int) -> bool:
        """``page`` is handed out (not free)."""
        return page in self._allocated

    def stats(self) -> dict[str, int]:
        """``{"total", "free", "used"}`` page counts."""
        return {"total": self.num_pages, "free": self.available, "used": self.used}

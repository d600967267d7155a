"""The device page table of the running requests (SGLang's ``req_to_token``, at page granularity).

Row ``slot`` of :attr:`ReqToPageTable.table` lists the block pages of the request in request slot
``slot``: column ``b`` is the block page of its logical block ``b`` (``-1`` = none). The attention
and indexer kernels read it through ``req_pool_indices`` (:mod:`sgl_kernel_v4.paged`), so a forward
uploads only the pages that changed since the request's last forward, never a whole block table:
O(new pages) host work per step, whatever the context length.

The request's page list is held by the scheduler (``Req.block_pages``) and passed to every forward
(``ReqForwardInput.block_pages``); :meth:`ReqToPageTable.sync` copies the entries past the row's
synced prefix. A request's list only grows in place; every other change makes a new list object
(a new request in the slot, a prefix-cache hit, the radix cache swapping a completed block for the
tree's identical page: ``CacheManager``), so a row is re-synced whole when the list given is not
the object it was synced from. This holds under overlap scheduling, where the scheduler thread
swaps pages while the model worker syncs the batch in flight with the list it was built with: the
next batch's new list is always written. :meth:`invalidate` forces a re-sync explicitly
(``DSV4KVPool.reset_req_state``, ``block_pages_changed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

__all__ = ["ReqToPageTable"]


class _ReqPages(Protocol):
    req_pool_idx: int
    block_pages: list[int]


class ReqToPageTable:
    """``[num_slots, max_pages]`` int32 page table on the device, with its host mirror.

    Args:
        num_slots: request slots, the reserved padding slot 0 included.
        max_pages: block pages one request can hold (``ceil(context / page_size)``).
        device: where the table lives.

    Attributes:
        table: ``[num_slots, max_pages]`` int32 device tensor (``-1`` = no page).
        max_pages: columns.
    """

    def __init__(self, num_slots: int, max_pages: int, device: torch.device | str) -> None:
        if num_slots < 1 or max_pages < 1:
            raise ValueError(f"req_to_page: needs >= 1 slot and page, got {num_slots} x {max_pages}")
        self.device = torch.device(device)
        self.max_pages = int(max_pages)
        self.table = torch.full((num_slots, self.max_pages), -1, dtype=torch.int32, device=self.device)
        self._host = np.full((num_slots, self.max_pages), -1, dtype=np.int32)
        self._synced = np.zeros(num_slots, dtype=np.int64)
        self._lists: list[object | None] = [None] * num_slots  # the page list each row mirrors

    @property
    def num_slots(self) -> int:
        """Request slots (rows of the table)."""
        return int(self._synced.shape[0])

    def invalidate(self, slot: int, first_block: int = 0) -> None:
        """Pages of ``slot`` from logical block ``first_block`` on may have changed: the next
        :meth:`sync` writes them again."""
        self._synced[slot] = min(int(self._synced[slot]), max(0, int(first_block)))

    def sync(self, reqs: Sequence[_ReqPages], num_blocks: Sequence[int]) -> int:
        """Write the pages of blocks ``synced .. num_blocks[i] - 1`` of every request into the
        table (one host-to-device copy of the changes, none when nothing changed).

        Args:
            reqs: objects with ``req_pool_idx`` and ``block_pages`` (``ReqForwardInput``).
            num_blocks: blocks each request reads in this forward (``ceil(end / page_size)``).

        Returns:
            the number of entries written.

        Vectorised over the batch: the per-request work is reading each page list's identity,
        length and last synced entry; only rows with new pages are written.

        Raises:
            ValueError: a request needs more blocks than ``max_pages``, has fewer pages than it
                reads, or names a slot outside the table (checked before anything is written:
                the table and every row's synced state are unchanged).
        """
        B = len(reqs)
        if B == 0:
            return 0
        slot_l = [int(r.req_pool_idx) for r in reqs]
        slot = np.asarray(slot_l, dtype=np.int64)
        nb = np.asarray(num_blocks, dtype=np.int64).reshape(B)
        lens = np.fromiter([len(r.block_pages) for r in reqs], np.int64, B)
        bad_slot = (slot < 0) | (slot >= self.num_slots)
        fail = bad_slot | (nb > self.max_pages) | (lens < nb)
        if fail.any():  # nothing is written: the first failing request's first failing check
            i = int(np.argmax(fail))
            if bad_slot[i]:
                raise ValueError(
                    f"req_pool_idx: slot {slot_l[i]} outside the page table ({self.num_slots} slots)"
                )
            if nb[i] > self.max_pages:
                raise ValueError(
                    f"request slot {slot_l[i]}: {nb[i]} block pages exceed the page table's {self.max_pages} "
                    "(the context length)"
                )
            raise ValueError(f"request slot {slot_l[i]}: {lens[i]} block pages for {nb[i]} blocks")
        # where each row's synced prefix still holds: the same list (module docstring), not
        # shorter than the prefix, and its last synced entry unchanged (else written whole)
        lists = self._lists
        same = np.fromiter([lists[k] is r.block_pages for k, r in zip(slot_l, reqs)], bool, B)
        s = np.where(same, self._synced[slot], 0)
        s[s > lens] = 0
        chk = np.nonzero(s)[0]
        if chk.size:
            last = np.fromiter(
                [reqs[i].block_pages[k - 1] for i, k in zip(chk.tolist(), s[chk].tolist())],
                np.int64,
                chk.size,
            )
            s[chk[self._host[slot[chk], s[chk] - 1] != last]] = 0
        for k, r in zip(slot_l, reqs):
            lists[k] = r.block_pages
        slots: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        for i in np.nonzero(nb > s)[0].tolist():  # rows with new pages: few in a decode step
            k, a, b = slot_l[i], int(s[i]), int(nb[i])
            new = np.asarray(reqs[i].block_pages[a:b], dtype=np.int32)
            self._host[k, a:b] = new
            slots.append(np.full(b - a, k, dtype=np.int64))
            cols.append(np.arange(a, b, dtype=np.int64))
            vals.append(new)
        self._synced[slot] = np.maximum(s, nb)
        if not slots:
            return 0
        idx = torch.from_numpy(np.stack([np.concatenate(slots), np.concatenate(cols)]))
        v = torch.from_numpy(np.concatenate(vals))
        if self.device.type == "cuda":  # pinned staging: the copy does not wait for the GPU
            idx = idx.pin_memory().to(self.device, non_blocking=True)
            v = v.pin_memory().to(self.device, non_blocking=True)
        self.table[idx[0], idx[1]] = v
        return int(v.shape[0])

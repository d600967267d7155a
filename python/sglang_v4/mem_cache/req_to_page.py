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

        Raises:
            ValueError: a request needs more blocks than ``max_pages``, has fewer pages than it
                reads, or names a slot outside the table.
        """
        slots: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        for r, nb in zip(reqs, num_blocks):
            slot, nb = int(r.req_pool_idx), int(nb)
            if not 0 <= slot < self.num_slots:
                raise ValueError(f"req_pool_idx: slot {slot} outside the page table ({self.num_slots} slots)")
            if nb > self.max_pages:
                raise ValueError(
                    f"request slot {slot}: {nb} block pages exceed the page table's {self.max_pages} "
                    "(the context length)"
                )
            if len(r.block_pages) < nb:
                raise ValueError(f"request slot {slot}: {len(r.block_pages)} block pages for {nb} blocks")
            s = int(self._synced[slot])
            if self._lists[slot] is not r.block_pages:
                s = 0  # another page list (module docstring): write it whole
            elif s > len(r.block_pages) or (s > 0 and self._host[slot, s - 1] != r.block_pages[s - 1]):
                s = 0  # the list was changed in place other than by appending: write it whole
            self._lists[slot] = r.block_pages
            if nb > s:
                new = np.asarray(r.block_pages[s:nb], dtype=np.int32)
                self._host[slot, s:nb] = new
                slots.append(np.full(nb - s, slot, dtype=np.int64))
                cols.append(np.arange(s, nb, dtype=np.int64))
                vals.append(new)
                s = nb
            self._synced[slot] = s
        if not slots:
            return 0
        idx = torch.from_numpy(np.stack([np.concatenate(slots), np.concatenate(cols)]))
        v = torch.from_numpy(np.concatenate(vals))
        if self.device.type == "cuda":  # pinned staging: the copy does not wait for the GPU
            idx = idx.pin_memory().to(self.device, non_blocking=True)
            v = v.pin_memory().to(self.device, non_blocking=True)
        self.table[idx[0], idx[1]] = v
        return int(v.shape[0])

"""The device page table (``mem_cache/req_to_page.py``) mirrors each request's page list.

Oracle: after every sync, the first ``num_blocks`` columns of each synced row equal the Python list
given. Cases: appends write only the new pages; a new request in a reused slot whose page list
happens to end with the previous occupant's last page; the overlap-scheduling order where the
batch in flight syncs its old list after the scheduler already swapped a block into a new list.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from sglang_v4.mem_cache.req_to_page import ReqToPageTable


@dataclass
class R:
    req_pool_idx: int
    block_pages: list[int]


def _row(t: ReqToPageTable, slot: int, n: int) -> list[int]:
    return t.table[slot, :n].tolist()


def test_appends_write_only_new_pages() -> None:
    t = ReqToPageTable(4, 8, "cpu")
    r = R(1, [5, 9])
    assert t.sync([r], [2]) == 2
    assert t.sync([r], [2]) == 0
    r.block_pages.append(3)  # in place, as the scheduler grows a request
    assert t.sync([r], [3]) == 1
    assert _row(t, 1, 3) == [5, 9, 3]


def test_reused_slot_with_same_last_page_is_rewritten() -> None:
    t = ReqToPageTable(4, 8, "cpu")
    t.sync([R(2, [4, 6, 7])], [3])
    new = R(2, [1, 0, 7])  # pages freed and reallocated: the same last page at the same index
    t.sync([new], [3])
    assert _row(t, 2, 3) == [1, 0, 7]


def test_swap_during_overlap_is_not_lost() -> None:
    t = ReqToPageTable(4, 8, "cpu")
    old = [10, 11, 12]
    t.sync([R(1, old)], [3])
    # the scheduler swaps block 0 for the tree's page into a new list and invalidates the row ...
    new = list(old)
    new[0] = 20
    t.invalidate(1, 0)
    # ... then the model worker syncs the batch in flight, built with the old list
    t.sync([R(1, old)], [3])
    assert _row(t, 1, 3) == [10, 11, 12]
    # the next batch carries the new list: its block 0 must reach the table
    new.append(13)
    t.sync([R(1, new)], [4])
    assert _row(t, 1, 4) == [20, 11, 12, 13]


def test_random_histories_match_the_lists() -> None:
    g = torch.Generator().manual_seed(0)
    t = ReqToPageTable(5, 16, "cpu")
    lists: dict[int, list[int]] = {}
    for _ in range(300):
        slot = int(torch.randint(1, 5, (1,), generator=g))
        op = int(torch.randint(0, 3, (1,), generator=g))
        if op == 0 or slot not in lists:  # a new request in the slot
            lists[slot] = torch.randint(
                0, 50, (int(torch.randint(1, 4, (1,), generator=g)),), generator=g
            ).tolist()
        elif op == 1 and len(lists[slot]) < 16:  # decode grows the list in place
            lists[slot].append(int(torch.randint(0, 50, (1,), generator=g)))
        else:  # a block swapped into a new list
            b = int(torch.randint(0, len(lists[slot]), (1,), generator=g))
            lists[slot] = list(lists[slot])
            lists[slot][b] = int(torch.randint(0, 50, (1,), generator=g))
        t.sync([R(slot, lists[slot])], [len(lists[slot])])
        for s, pages in lists.items():
            if s == slot:
                assert _row(t, s, len(pages)) == pages


def test_random_batches_match_the_lists() -> None:
    """Several requests per sync (a decode batch), each slot's list changed in one of the ways above
    between syncs: every row still equals its list."""
    g = torch.Generator().manual_seed(1)
    t = ReqToPageTable(9, 16, "cpu")
    lists: dict[int, list[int]] = {}

    def rnd(hi: int) -> int:
        return int(torch.randint(0, hi, (1,), generator=g))

    for _ in range(200):
        batch = sorted({1 + rnd(8) for _ in range(1 + rnd(6))})
        for slot in batch:
            op = rnd(4)
            if op == 0 or slot not in lists:
                lists[slot] = [rnd(50) for _ in range(1 + rnd(3))]
            elif op == 1 and len(lists[slot]) < 16:
                lists[slot].append(rnd(50))
            elif op == 2:
                b = rnd(len(lists[slot]))
                lists[slot] = list(lists[slot])
                lists[slot][b] = rnd(50)
            # op 3: unchanged (a decode step inside a block)
        t.sync([R(s, lists[s]) for s in batch], [len(lists[s]) for s in batch])
        for s in batch:
            assert _row(t, s, len(lists[s])) == lists[s]


def test_bad_batch_writes_nothing() -> None:
    """A batch with one bad request (slot outside the table, more blocks than the context, fewer
    pages than blocks) raises and leaves every row, the good requests' included, as it was."""
    for bad, nb, msg in (
        (R(7, [1]), 1, "outside the page table"),
        (R(2, list(range(9))), 9, "exceed the page table"),
        (R(2, [1]), 2, "1 block pages for 2 blocks"),
    ):
        t = ReqToPageTable(4, 8, "cpu")
        pages = [5]
        t.sync([R(1, pages)], [1])
        before = t.table.clone()
        pages.append(6)
        good = R(1, pages)
        try:
            t.sync([good, bad], [2, nb])
        except ValueError as e:
            assert msg in str(e)
        else:
            raise AssertionError("no error")
        assert torch.equal(t.table, before)
        assert t.sync([good], [2]) == 1  # the good request's new page was not marked synced
        assert _row(t, 1, 2) == [5, 6]

"""Indexer top-k: rows that see at most ``topk`` entries (the short-row path) mixed with longer
rows in one batch, against an exact oracle; the histogram pass against ``torch.bincount``.

Scores are built from small integers (exact in fp32, tf32 and float64; many ties), so the kernel
must return exactly the oracle's positions: per row the ``topk`` best valid entries by
``(-score, position)`` (a plain Python sort), ascending, ``-1`` after them. The oracle computes
the scores in float64 entry by entry from the page table, by Python loops.

Marked ``gpu``; skipped without CUDA + Triton (they also run under ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, KERNEL_MARKS

pytestmark = KERNEL_MARKS

E, DI, H, K = 8, 16, 4, 16  # entries per page, key width, heads, top-k
GARBAGE = 0x5A5A5A5


def paged_problem(vis: list[int], reqs: list[int], seed: int) -> dict:
    """Two requests of 12 pages of ``E`` entries (request 1's second page unmapped) over a pool of
    small-integer keys (24 distinct rows, many zero: equal scores at every rank)."""
    gen = torch.Generator().manual_seed(seed)
    T, P = len(vis), 12
    n_pages = 2 * P + 3
    kv = torch.randint(-1, 2, (24, DI), generator=gen).float()[
        torch.randint(0, 24, (n_pages * E,), generator=gen)
    ]
    kv[torch.rand(n_pages * E, generator=gen) < 0.3] = 0.0
    r2p = torch.randperm(n_pages, generator=gen)[: 2 * P].view(2, P).int()
    r2p[0, 1] = -1  # row 0: request 1
    return dict(
        q=torch.randint(-2, 3, (T, H, DI), generator=gen).float(),
        w=torch.tensor([-1.0, -0.5, 0.5, 1.0, 2.0])[torch.randint(0, 5, (T, H), generator=gen)],
        kv=kv,
        visible=torch.tensor(vis, dtype=torch.int64),
        req_to_page=r2p,
        req_rows=torch.tensor([1, 0]),  # request 0 uses page-table row 1
        token_req=torch.tensor(reqs, dtype=torch.int64),
    )


def oracle(p: dict, k: int, scale: float) -> torch.Tensor:
    """``[T, k]`` exact selection from the definition (float64 scores, Python sort)."""
    T = p["q"].shape[0]
    out = torch.full((T, k), -1, dtype=torch.int64)
    for t in range(T):
        row = p["req_to_page"][int(p["req_rows"][int(p["token_req"][t])])].tolist()
        scored = []
        for w in range(int(p["visible"][t])):
            if row[w // E] < 0:
                continue
            key = p["kv"][row[w // E] * E + w % E].double()
            dots = (p["q"][t].double() * key).sum(-1) * scale
            scored.append((-float((torch.relu(dots) * p["w"][t].double()).sum()), w))
        best = sorted(w for _, w in sorted(scored)[:k])
        out[t, : len(best)] = torch.tensor(best, dtype=torch.int64)
    return out


def run(p: dict, k: int, scale: float, **kw) -> torch.Tensor:
    from sgl_kernel_v4.triton.indexer import indexer_topk

    d = {n: p[n].to(DEVICE) for n in ("q", "w", "kv", "visible", "req_to_page", "req_rows", "token_req")}
    out = torch.full((p["q"].shape[0], k), 777, dtype=torch.int64, device=DEVICE)
    res = indexer_topk(d["q"], d["w"], d["kv"], d["visible"], d["req_to_page"], d["req_rows"], d["token_req"], E,
                       k, scale, out=out, **kw)  # fmt: skip
    assert res.data_ptr() == out.data_ptr()
    return res.cpu()


@pytest.fixture
def poisoned_workspace(monkeypatch):
    """Workspace buffers full of garbage (the short-row path zeroes what it reads in-kernel)."""
    from sgl_kernel_v4.triton import indexer

    class Poisoned(indexer._Workspace):
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, **kw)
            for x in (self.keys, self.tie_key, self.tie_pos, self.hist, self.cnt, self.sure):
                x.fill_(GARBAGE)

    monkeypatch.setattr(indexer, "_Workspace", Poisoned)


# short rows: 5, 16 (= K) of request 0, 0 and 12 of request 1 (entries 8..15 unmapped);
# long rows: 40, 70 of request 0, 90 of request 1
VIS = [5, 16, 40, 70, 0, 12, 90]
REQS = [0, 0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize(
    "short_rows,block_t,rows_per_block,max_visible",
    [
        (True, None, None, None),
        (True, 2, 2, 128),  # a 2-token program of two short rows; blocks of 2 rows
        (True, 4, None, 128),  # a 4-token program mixing short and long rows of one request
        (False, None, None, None),
        (False, 4, 2, 128),
    ],
)
def test_short_and_long_rows_in_one_batch(
    short_rows: bool, block_t: int | None, rows_per_block: int | None, max_visible: int | None,
    poisoned_workspace, monkeypatch,
) -> None:  # fmt: skip
    from sgl_kernel_v4.triton import indexer

    if rows_per_block:
        monkeypatch.setattr(indexer, "SCRATCH_ELEMS", 3 * (max_visible or max(VIS)) * rows_per_block)
    p = paged_problem(VIS, REQS, seed=7)
    want = oracle(p, K, 0.25)
    assert int((want[6] == -1).sum()) == 0 and int((want[5] >= 0).sum()) == 8  # the cases under test
    got = run(p, K, 0.25, short_rows=short_rows, block_t=block_t, max_visible=max_visible)
    assert torch.equal(got, want)


@pytest.mark.parametrize("select_impl", ["radix", "bitsearch"])
def test_short_and_long_rows_other_select_impls(select_impl: str, poisoned_workspace) -> None:
    """The separate-final selections (radix, and the bit-search baseline) on the same mixed batch."""
    p = paged_problem(VIS, REQS, seed=7)
    assert torch.equal(run(p, K, 0.25, select_impl=select_impl), oracle(p, K, 0.25))


def test_all_rows_short_by_host_bound_launches_no_histogram(poisoned_workspace, monkeypatch) -> None:
    """``max_visible <= topk``: no histogram nor filter launch, the reference selection."""
    from sgl_kernel_v4.triton import indexer_select

    class Refused:
        def __getitem__(self, grid):
            raise AssertionError("launched")

    monkeypatch.setattr(indexer_select, "_hist_kernel", Refused())
    monkeypatch.setattr(indexer_select, "_filter_kernel", Refused())
    monkeypatch.setattr(indexer_select, "_filter_final_kernel", Refused())
    p = paged_problem([5, 16, 0, 12, 16], [0, 0, 1, 1, 1], seed=3)
    got = run(p, K, 0.25, max_visible=K)
    assert torch.equal(got, oracle(p, K, 0.25))


def test_all_rows_short_under_a_larger_bound(poisoned_workspace) -> None:
    """A CUDA graph's bound above ``topk`` with every row short: decided on the device."""
    p = paged_problem([1, 16, 9, 12, 16], [0, 0, 1, 1, 1], seed=5)
    assert torch.equal(run(p, K, 0.25, max_visible=4 * K), oracle(p, K, 0.25))


@pytest.mark.parametrize("short", [True, False])
def test_histogram_pass_matches_bincount(short: bool) -> None:
    """Step 1b over shares of whole 1,024-key blocks and 256-key steps (a row of 9,000 keys in 4
    shares of 2,304), partial tails, short rows (skipped with ``short``: their bins untouched). The
    two levels against bincounts of the 12-bit bins: the coarse histogram of their top 6 bits, then
    the fine histogram of the low 6 bits over the coarse bin that holds the K-th largest key."""
    from types import SimpleNamespace

    from sgl_kernel_v4.triton.indexer_select import HB, HIST_W_VALUE, INT_MIN_VALUE, histogram, splits

    gen = torch.Generator().manual_seed(11)
    vis = torch.tensor([9000, 0, K, 300, 1500], dtype=torch.int64)
    G, C = len(vis), 9024
    keys = torch.randint(-(2**31), 2**31 - 1, (G, C), generator=gen, dtype=torch.int64)
    keys[:, ::7] = torch.randint(-1000, 1000, (G, -(-C // 7)), generator=gen)  # clustered bins
    keys[torch.rand(G, C, generator=gen) < 0.1] = INT_MIN_VALUE
    keys = keys.int()
    long_rows = vis > K if short else vis >= 0
    hist = torch.where(long_rows[:, None], 0, GARBAGE).int().expand(G, HIST_W_VALUE).contiguous()
    ws = SimpleNamespace(keys=keys.to(DEVICE), hist=hist.to(DEVICE))
    if DEVICE == "cpu":
        assert splits(G, torch.device(DEVICE)) == 4  # the shares the docstring counts
    histogram(ws, G, vis.to(DEVICE), 0, K, short)
    got = ws.hist.cpu()
    nb = HIST_W_VALUE // 2
    for g in range(G):
        if not long_rows[g]:
            assert (got[g] == GARBAGE).all(), f"row {g}: a short row's bins were written"
            continue
        k = keys[g, : int(vis[g])].long()
        k = k[k != INT_MIN_VALUE]
        bins = (k >> (32 - HB)) + (1 << (HB - 1))
        coarse = torch.bincount(bins // nb, minlength=nb)
        assert torch.equal(got[g, :nb].long(), coarse), f"row {g}: coarse level"
        suffix = coarse.flip(0).cumsum(0).flip(0)
        c1 = int((suffix >= K).sum()) - 1 if len(k) > K else -1
        fine = torch.bincount(bins[bins // nb == c1] % nb, minlength=nb) if c1 >= 0 else torch.zeros(nb)
        assert torch.equal(got[g, nb:].long(), fine.long()), f"row {g}: fine level (coarse bin {c1})"

"""Shared pieces of the indexer kernel tests: candidate sets, paged cases, the selection check and the float64 extend reference."""

from __future__ import annotations

import torch
from kernel_testutil import DEVICE


def _ref64(q, w, kv64, cand, scale, chunk: int = 16) -> torch.Tensor:
    """float64 scores [T, C] of the gathered candidates (HF DeepseekV4IndexerScorer), -inf invalid.

    Computed on ``DEVICE`` in chunks of ``chunk`` tokens (a [T, C, D] gather of a prefill-sized
    case is ~10 GB in float64; on the CPU it stalls a test shard for minutes)."""
    dev = torch.device(DEVICE)
    kv = kv64.to(dev)
    out = []
    for t0 in range(0, q.shape[0], chunk):
        c = cand[t0 : t0 + chunk].to(dev)
        k = kv[c.clamp(min=0)]
        s = torch.relu(torch.einsum("thd,tcd->thc", q[t0 : t0 + chunk].to(dev).double(), k) * scale)
        s = torch.einsum("thc,th->tc", s, w[t0 : t0 + chunk].to(dev).double())
        out.append(s.masked_fill(c < 0, float("-inf")).cpu())
    return torch.cat(out)


def check_selection(out: torch.Tensor, scores: torch.Tensor, topk: int, tol: float) -> None:
    """out: positions (ascending, -1 after them); scores: fp64 oracle [T, C] with -inf invalid."""
    out = out.cpu()
    scores = scores.cpu()
    T, C = scores.shape
    assert out.shape == (T, topk) and out.dtype == torch.int64
    for t in range(T):
        row = out[t]
        nv = int(torch.isfinite(scores[t]).sum())
        m = min(topk, nv)
        sel = row[row >= 0]
        assert sel.numel() == m, f"row {t}: {sel.numel()} selected, expected {m}"
        assert int((row == -1).sum()) == topk - m  # order is free: count the padding
        assert sel.unique().numel() == m, f"row {t}: duplicate positions"
        if m == 0:
            continue
        assert int(sel.max()) < C
        assert (sel[1:] > sel[:-1]).all() and (row[m:] == -1).all(), f"row {t}: not ascending / padded"
        vals = scores[t, sel]
        assert torch.isfinite(vals).all(), f"row {t}: selected an invalid candidate"
        kth = scores[t].topk(m).values[-1]
        assert vals.min() >= kth - tol, f"row {t}: selected {vals.min()} < k-th {kth} - {tol}"


def paged_case(T: int, n_max: int, N: int, gen: torch.Generator, e: int = 64) -> dict:
    """Two requests over a pool of ``N`` keys in pages of ``e``: random page rows (one page
    missing), tokens of request 0 then 1, random visible counts up to ``n_max`` (one 0)."""
    n_pages = N // e
    P = -(-n_max // e)
    req_to_page = torch.stack([torch.randperm(n_pages, generator=gen)[:P] for _ in range(3)]).int()
    req_to_page[2, P // 2] = -1
    vis = torch.randint(0, n_max + 1, (T,), generator=gen)
    vis[0] = n_max
    if T > 1:
        vis[-1] = 0
    return dict(
        req_to_page=req_to_page,
        req_rows=torch.tensor([2, 1]),
        token_req=(torch.arange(T) >= (T + 1) // 2).long(),
        visible=vis,
        e=e,
        C=n_max,
    )


def candidates(case: dict) -> torch.Tensor:
    """``[T, C]`` slots of each token's entries ``0 .. visible - 1``, -1 = none: entry ``w`` of a
    token lives at ``req_to_page[row, w // e] * e + w % e`` (one token at a time, per entry
    vectorised; a page row of -1 is unmapped)."""
    T, C, e = case["visible"].shape[0], case["C"], case["e"]
    out = torch.full((T, C), -1, dtype=torch.int64)
    for t in range(T):
        row = case["req_to_page"][int(case["req_rows"][int(case["token_req"][t])])].long()
        n = int(case["visible"][t])
        w = torch.arange(n)
        page = row[w // e]
        out[t, :n] = torch.where(page >= 0, page * e + w % e, -1)
    return out

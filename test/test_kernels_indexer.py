"""GPU tests: Triton indexer scoring + radix top-k vs float64 / brute-force oracles (op table entry 6).

Marked ``gpu``; skipped without CUDA + Triton (they also run under ``TRITON_INTERPRET=1``, small sizes).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS

pytestmark = KERNEL_MARKS


def ref_scores(
    q: torch.Tensor, weights: torch.Tensor, kv: torch.Tensor, cand: torch.Tensor, scale: float
) -> torch.Tensor:
    """float64 oracle of HF DeepseekV4IndexerScorer over gathered candidates; -inf = invalid."""
    k = kv.double()[cand.clamp(min=0)]  # [T, C, di]
    s = torch.einsum("thd,tcd->thc", q.double(), k)
    s = torch.relu(s * scale) * weights.double()[:, :, None]
    s = s.sum(1)
    return s.masked_fill(cand < 0, float("-inf"))


def check_selection(out: torch.Tensor, scores: torch.Tensor, topk: int, tol: float) -> None:
    """out: positions; scores: fp64 oracle [T, C] with -inf invalid."""
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
        vals = scores[t, sel]
        assert torch.isfinite(vals).all(), f"row {t}: selected an invalid candidate"
        kth = scores[t].topk(m).values[-1]
        assert vals.min() >= kth - tol, f"row {t}: selected {vals.min()} < k-th {kth} - {tol}"


TOPK_CASES = [
    # T, C, k
    (1, 100, 16),
    (3, 5000, 512),
    (2, 3000, 4000),  # k > C: everything valid selected, rest -1
    (64, 2048, 512),
    (1, 262144, 512),
    (4, 262144, 2048),
    (300, 8192, 512),
]


@pytest.mark.parametrize("T,C,k", TOPK_CASES)
@pytest.mark.parametrize("tiling", [None, (1024, 2048)])
def test_topk_from_scores_exact(T: int, C: int, k: int, tiling: tuple[int, int] | None) -> None:
    from sgl_kernel_v4.triton.indexer import topk_from_scores

    if INTERP and T * C > 20000:
        pytest.skip("interpreter: too slow")
    gen = torch.Generator().manual_seed(T + C + k)
    scores = torch.randn(T, C, generator=gen)
    scores[torch.rand(T, C, generator=gen) < 0.1] = float("-inf")
    if T > 1:
        scores[-1] = float("-inf")  # all-masked row
    out = torch.full((T, k), 12345, dtype=torch.int64)
    ch, mr = tiling or (None, None)
    res = topk_from_scores(scores.to(DEVICE), k, out=out.to(DEVICE), chunk=ch, max_row=mr)
    # exact: continuous random scores have no ties, so the selected set is the true top-k set
    check_selection(res, scores.double(), k, tol=0.0)


@pytest.mark.parametrize("tiling", [None, (1024, 1024)])
def test_topk_ties_and_concentrated_values(tiling: tuple[int, int] | None) -> None:
    """Few distinct values (heavy ties in every radix digit) and all-equal rows."""
    from sgl_kernel_v4.triton.indexer import topk_from_scores

    gen = torch.Generator().manual_seed(3)
    T, C, k = 4, 6000 if not INTERP else 3000, 300
    scores = torch.randint(0, 7, (T, C), generator=gen).float() * 0.001 + 1.0
    scores[1] = 2.5  # every candidate equal
    scores[2, :10] = -1e30
    scores[3] = torch.where(torch.rand(C, generator=gen) < 0.5, float("-inf"), -3.0)
    ch, mr = tiling or (None, None)
    res = topk_from_scores(scores.to(DEVICE), k, chunk=ch, max_row=mr).cpu()
    for t in range(T):
        sel = res[t][res[t] >= 0]
        got = scores[t, sel].sort(descending=True).values
        want = scores[t].topk(k).values
        assert sel.unique().numel() == sel.numel() == k
        assert torch.equal(got, want), f"row {t}: selected values differ from the top-k multiset"


SCORE_CASES = [
    # T, Hi, di, C, k, n_pool
    (1, 64, 128, 2048, 512, 3000),
    (8, 64, 128, 1000, 512, 1200),  # C < k
    (33, 16, 64, 700, 64, 900),
    (1, 64, 128, 65536, 512, 70000),
]


@pytest.mark.parametrize("T,HI,DI,C,k,N", SCORE_CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_indexer_topk_matches_fp64(
    T: int, HI: int, DI: int, C: int, k: int, N: int, dtype: torch.dtype
) -> None:
    from sgl_kernel_v4.triton.indexer import indexer_scores, indexer_topk

    if INTERP and (dtype != torch.float32 or T * C > 20000):
        pytest.skip("interpreter: too slow / no bf16 dot")
    gen = torch.Generator().manual_seed(T * 7 + C)
    q = torch.randn(T, HI, DI, generator=gen).to(dtype)
    w = torch.randn(T, HI, generator=gen) * HI**-0.5
    kv = torch.randn(N, DI, generator=gen).to(dtype)
    cand = torch.randperm(N, generator=gen)[:C].repeat(T, 1)
    cand[torch.rand(T, C, generator=gen) < 0.15] = -1
    if T > 1:
        cand[-1] = -1
    scale = DI**-0.5
    ref = ref_scores(q, w, kv, cand, scale)
    dq, dw, dkv, dc = (x.to(DEVICE) for x in (q, w, kv, cand))
    out = torch.full((T, k), 777, dtype=torch.int64, device=DEVICE)
    res = indexer_topk(dq, dw, dkv, dc, k, scale, out=out)
    assert res.data_ptr() == out.data_ptr()
    # tolerance: bf16/tf32 scoring error relative to the score spread
    spread = ref[torch.isfinite(ref)].abs().max().item() if torch.isfinite(ref).any() else 1.0
    check_selection(res, ref, k, tol=3e-3 * spread)
    _, sc = indexer_scores(dq, dw, dkv, dc, scale)
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(sc.cpu()), finite)
    err = (sc.cpu().double()[finite] - ref[finite]).norm() / ref[finite].norm()
    assert err < 5e-3


def test_indexer_topk_bad_input() -> None:
    from sgl_kernel_v4.triton.indexer import indexer_topk

    q = torch.randn(2, 4, 32, device=DEVICE)
    w = torch.randn(2, 4, device=DEVICE)
    kv = torch.randn(10, 32, device=DEVICE)
    cand = torch.zeros(2, 5, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="weights"):
        indexer_topk(q, w[:1], kv, cand, 2, 1.0)
    with pytest.raises(ValueError, match="idx_kv_flat"):
        indexer_topk(q, w, kv[:, :16], cand, 2, 1.0)
    with pytest.raises(ValueError, match="topk"):
        indexer_topk(q, w, kv, cand, 0, 1.0)

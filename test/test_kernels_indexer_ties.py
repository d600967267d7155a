"""Indexer top-k tie rule and batch invariance, torch reference and Triton kernel.

The rule (``sgl_kernel_v4.ref.attention.indexer_topk``): a row keeps the ``topk`` largest composite
keys ``(score, -position)`` among its valid candidates (equal scores: the lower position wins,
``-0.0 == +0.0``), written in ascending position order, ``-1`` after them. The oracle is a plain
Python sort on that composite key. Scores built from small integers are exact in fp32, tf32 and
float64, so the reference and the kernel must select exactly the oracle's positions.

The reference tests run on the CPU; the Triton ones need CUDA or ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, KERNEL_MARKS
from sgl_kernel_v4.ref.attention import indexer_scores, indexer_topk, select_topk


def triton_test(fn):
    """Mark a Triton test ``gpu`` and skip it without CUDA + triton (or ``TRITON_INTERPRET=1``)."""
    for mark in KERNEL_MARKS:
        fn = mark(fn)
    return fn


def oracle_topk(scores: torch.Tensor, valid: torch.Tensor, topk: int) -> torch.Tensor:
    """``[T, topk]``: per row the ``topk`` best valid positions by ``(-score, position)``, ascending."""
    out = torch.full((scores.shape[0], topk), -1, dtype=torch.int64)
    for t in range(scores.shape[0]):
        cand = [c for c in range(scores.shape[1]) if bool(valid[t, c])]
        best = sorted(cand, key=lambda c: (-float(scores[t, c]), c))[:topk]
        out[t, : len(best)] = torch.tensor(sorted(best), dtype=torch.int64)
    return out


def tie_heavy_scores(T: int, C: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores with few distinct values (both zero signs), invalid entries, a short row and an
    all-invalid row."""
    gen = torch.Generator().manual_seed(seed)
    s = torch.randint(-2, 3, (T, C), generator=gen).float() * 0.5
    s[torch.rand(T, C, generator=gen) < 0.3] = -0.0
    valid = torch.rand(T, C, generator=gen) > 0.1
    if T > 2:
        valid[1, 5:] = False  # fewer valid candidates than topk
        valid[2] = False
    return s, valid


def integer_indexer_inputs(
    T: int, H: int, di: int, N: int, C: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, weights, keys, candidates whose indexer scores are exact in fp32/tf32/float64: small
    integers, weights in {-1, -1/2, 1/2, 1, 2}; the keys repeat 24 distinct rows (equal scores at
    every rank) and many are zero (every ReLU off: score 0)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(-2, 3, (T, H, di), generator=gen).float()
    w = torch.tensor([-1.0, -0.5, 0.5, 1.0, 2.0])[torch.randint(0, 5, (T, H), generator=gen)]
    kv = torch.randint(-1, 2, (24, di), generator=gen).float()[torch.randint(0, 24, (N,), generator=gen)]
    kv[torch.rand(N, generator=gen) < 0.3] = 0.0
    cand = torch.randperm(N, generator=gen)[:C].repeat(T, 1)
    nvis = torch.randint(C // 2, C + 1, (T,), generator=gen)
    cand = torch.where(torch.arange(C)[None, :] < nvis[:, None], cand, -1)
    return q, w, kv, cand


def boundary_ties(scores: torch.Tensor, k: int) -> int:
    """Rows whose k-th and (k+1)-th best valid scores are equal."""
    v = scores.sort(dim=1, descending=True).values
    return int(((v[:, k - 1] == v[:, k]) & torch.isfinite(v[:, k])).sum())


def exact_scores(q: torch.Tensor, w: torch.Tensor, kv: torch.Tensor, cand: torch.Tensor, scale: float):
    """float64 oracle of the indexer score, one candidate at a time; -inf = invalid."""
    T, C = cand.shape
    out = torch.full((T, C), float("-inf"), dtype=torch.float64)
    for t in range(T):
        for c in range(C):
            if cand[t, c] >= 0:
                dots = (q[t].double() * kv[cand[t, c]].double()).sum(-1) * scale  # [H]
                out[t, c] = (torch.relu(dots) * w[t].double()).sum()
    return out


# ------------------------------------------------------------------ torch reference (CPU)


@pytest.mark.parametrize("T,C,k", [(5, 40, 8), (3, 300, 16), (4, 10, 16), (2, 1, 3), (1, 50, 50)])
def test_select_topk_rule(T: int, C: int, k: int) -> None:
    s, valid = tie_heavy_scores(T, C, seed=T * 100 + C)
    got = select_topk(s, valid, k)
    assert torch.equal(got, oracle_topk(s, valid, k))


def test_select_topk_integer_keys_and_empty() -> None:
    gen = torch.Generator().manual_seed(1)
    keys = torch.randint(-3, 3, (4, 64), generator=gen, dtype=torch.int32)
    valid = keys != -3
    assert torch.equal(select_topk(keys, valid, 10), oracle_topk(keys, valid, 10))
    assert select_topk(torch.zeros(3, 0), torch.zeros(3, 0, dtype=torch.bool), 4).eq(-1).all()


@pytest.mark.parametrize("H", [2, 16])
def test_ref_indexer_topk_exact_ties(H: int) -> None:
    q, w, kv, cand = integer_indexer_inputs(T=6, H=H, di=16, N=200, C=120, seed=H)
    scale = 0.25
    ref = exact_scores(q, w, kv, cand, scale)
    assert boundary_ties(ref, 16) >= 3  # the case under test: ties across the k-th place
    assert torch.equal(indexer_scores(q, w, kv, cand, scale).double(), ref)
    assert torch.equal(indexer_topk(q, w, kv, cand, 16, scale), oracle_topk(ref, cand >= 0, 16))


def test_ref_scores_batch_invariant() -> None:
    """A query's scores and selection alone equal those it gets inside a larger batch with a longer
    (padded) candidate row and more distinct keys: bitwise, on random fp32 inputs."""
    gen = torch.Generator().manual_seed(7)
    T, H, di, N, C, k = 37, 2, 64, 600, 500, 16
    q = torch.randn(T, H, di, generator=gen)
    w = torch.randn(T, H, generator=gen)
    kv = torch.randn(N, di, generator=gen)
    row = torch.randperm(N, generator=gen)[:C]
    nvis = torch.arange(C - T + 1, C + 1)
    cand = torch.where(torch.arange(C)[None, :] < nvis[:, None], row, -1)
    scale = di**-0.5
    batch_scores = indexer_scores(q, w, kv, cand, scale)
    batch_sel = indexer_topk(q, w, kv, cand, k, scale)
    for t in (0, 17, T - 1):
        n = int(nvis[t])
        one = indexer_scores(q[t : t + 1], w[t : t + 1], kv, cand[t : t + 1, :n], scale)
        assert torch.equal(one, batch_scores[t : t + 1, :n])
        assert torch.equal(
            indexer_topk(q[t : t + 1], w[t : t + 1], kv, cand[t : t + 1, :n], k, scale), batch_sel[t : t + 1]
        )


# ------------------------------------------------------------------ Triton kernel


@pytest.mark.parametrize("tiling", [None, (64, 64)])
@pytest.mark.parametrize("T,C,k", [(4, 300, 16), (3, 2000, 24), (2, 40, 64)])
@triton_test
def test_triton_topk_tie_rule(T: int, C: int, k: int, tiling: tuple[int, int] | None) -> None:
    """Radix select, single pass and chunked multi-pass, keeps exactly the oracle's positions."""
    from sgl_kernel_v4.triton.indexer import topk_from_scores

    s, valid = tie_heavy_scores(T, C, seed=C + k)
    ch, mr = tiling or (None, None)
    got = topk_from_scores(s.masked_fill(~valid, float("-inf")).to(DEVICE), k, chunk=ch, max_row=mr).cpu()
    assert torch.equal(got, oracle_topk(s, valid, k))


@triton_test
def test_triton_topk_tie_rule_torch_fallback() -> None:
    """``topk > 4096`` takes the torch path of the kernel module; same rule."""
    from sgl_kernel_v4.triton.indexer import topk_from_scores

    s, valid = tie_heavy_scores(2, 6000, seed=5)
    got = topk_from_scores(s.masked_fill(~valid, float("-inf")).to(DEVICE), 4100).cpu()
    assert torch.equal(got, oracle_topk(s, valid, 4100))


@triton_test
@pytest.mark.parametrize("H", [2, 16])
def test_triton_indexer_topk_exact_ties_match_ref(H: int) -> None:
    from sgl_kernel_v4.triton.indexer import indexer_scores as tri_scores
    from sgl_kernel_v4.triton.indexer import indexer_topk as tri_topk

    q, w, kv, cand = integer_indexer_inputs(T=6, H=H, di=16, N=200, C=120, seed=H + 1)
    scale = 0.25
    ref = exact_scores(q, w, kv, cand, scale)
    dev = [x.to(DEVICE) for x in (q, w, kv, cand)]
    _, sc = tri_scores(*dev, scale)
    assert torch.equal(sc.cpu().double(), ref)
    got = tri_topk(*dev, 16, scale).cpu()
    assert torch.equal(got, oracle_topk(ref, cand >= 0, 16))
    assert torch.equal(got, indexer_topk(q, w, kv, cand, 16, scale))


@triton_test
def test_triton_scores_batch_invariant() -> None:
    """A query's score keys alone equal those it gets in a batch of 37 with a longer candidate row."""
    from sgl_kernel_v4.triton.indexer import indexer_scores as tri_scores

    gen = torch.Generator().manual_seed(3)
    T, H, di, N, C = 37, 16, 64, 400, 300
    q = torch.randn(T, H, di, generator=gen)
    w = torch.randn(T, H, generator=gen)
    kv = torch.randn(N, di, generator=gen)
    cand = torch.randperm(N, generator=gen)[:C].repeat(T, 1)
    nvis = torch.arange(C - T + 1, C + 1)
    cand = torch.where(torch.arange(C)[None, :] < nvis[:, None], cand, -1)
    d = [x.to(DEVICE) for x in (q, w, kv, cand)]
    keys, _ = tri_scores(*d, di**-0.5)
    for t in (0, 20, T - 1):
        n = int(nvis[t])
        one, _ = tri_scores(d[0][t : t + 1], d[1][t : t + 1], d[2], d[3][t : t + 1, :n], di**-0.5)
        assert torch.equal(one.cpu(), keys[t : t + 1, :n].cpu())


# ------------------------------------------------------------------ the chain feeding the scores


def test_ref_hc_pre_rows_batch_invariant() -> None:
    """mHC pre (the input of every layer) gives each token the same bits in 37-row chunks as in
    one batch: its ``[T, 4]`` sigmoids must not depend on which rows end up in torch's scalar tail."""
    from sgl_kernel_v4.ref.mhc import hc_pre

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(300, 4, 64, generator=gen)
    fn = torch.randn(24, 256, generator=gen) * 0.1
    base, scale = torch.randn(24, generator=gen), torch.rand(3, generator=gen)
    whole = hc_pre(x, fn, base, scale, 20, 1e-6, 1e-6)
    parts = [hc_pre(x[s : s + 37], fn, base, scale, 20, 1e-6, 1e-6) for s in range(0, 300, 37)]
    for i in range(3):
        assert torch.equal(torch.cat([p[i] for p in parts]), whole[i])


def test_router_rows_batch_invariant() -> None:
    """MoE routing scores of a token are the same bits in 37-row chunks as in one batch."""
    from sglang_v4.layers.moe import Router

    gen = torch.Generator().manual_seed(0)
    router = Router(64, 4, 2, False, 1000, 1.5, torch.float32, "cpu")
    router.weight.copy_(torch.randn(4, 64, generator=gen) * 0.2)
    x = torch.randn(300, 64, generator=gen)
    ids = torch.zeros(300, dtype=torch.long)
    whole = router(x, ids)
    parts = [router(x[s : s + 37], ids[s : s + 37]) for s in range(0, 300, 37)]
    for i in range(2):
        assert torch.equal(torch.cat([p[i] for p in parts]), whole[i])

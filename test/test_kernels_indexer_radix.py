"""The indexer top-k's selection inside a large threshold bin: radix digits, exact ties.

The final pass of :mod:`sgl_kernel_v4.triton.indexer` selects the best ``topk - above`` of the
candidates that share the ``topk``-th key's top 12 bits (:mod:`sgl_kernel_v4.triton.indexer_radix`).
These cases put (nearly) every key into that bin: scores in ``[1.0, 1.0625)`` with few distinct
values (ties across the boundary), and all-equal scores (the position search decides everything).
Each selection implementation (``fused``, ``radix``, the ``bitsearch`` baseline) and the re-read
path of a list longer than the register cap must give the oracle's positions: a plain torch sort on
the composite key ``(-score, position)``, cross-checked with
:func:`sgl_kernel_v4.ref.attention.select_topk`. Scores are exact in fp32 (multiples of 2^-10).

Triton tests: CUDA, or the CPU under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, KERNEL_MARKS
from sgl_kernel_v4.ref.attention import select_topk

triton = pytest.importorskip("triton")  # the kernel below is defined at import
import triton.language as tl  # noqa: E402
from sgl_kernel_v4.triton.indexer_radix import finish_row  # noqa: E402

pytestmark = KERNEL_MARKS

IMPLS = ["fused", "radix", "bitsearch"]


def oracle(scores: torch.Tensor, k: int) -> torch.Tensor:
    """``[T, k]`` int64: per row the ``k`` best non ``-inf`` positions by ``(-score, position)``
    (a stable sort of the negated float64 scores), ascending, ``-1`` padded."""
    out = torch.full((scores.shape[0], k), -1, dtype=torch.int64)
    for t, row in enumerate(scores.double()):
        order = torch.sort(-row, stable=True).indices
        best = order[row[order] != float("-inf")][:k]
        out[t, : best.numel()] = torch.sort(best).values
    return out


def bin_heavy(C: int, seed: int) -> torch.Tensor:
    """``[3, C]`` fp32 rows whose keys nearly all share the top 12 bits: row 0 in ``[1, 1.0625)``
    (64 values, ~C/64 ties each) with a few above the bin and invalid entries; row 1 all equal
    but a few invalid; row 2 all ``1.0`` (pure position order)."""
    gen = torch.Generator().manual_seed(seed)
    s = 1.0 + torch.randint(0, 64, (3, C), generator=gen).float() / 1024
    s[0, torch.randint(0, C, (7,), generator=gen)] = 2.5  # above the threshold bin
    s[0, torch.rand(C, generator=gen) < 0.05] = float("-inf")
    s[1] = 0.75
    s[1, torch.rand(C, generator=gen) < 0.05] = float("-inf")
    s[2] = 1.0
    return s


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cap", [None, 256])
def test_large_threshold_bin_with_ties(impl: str, cap: int | None, monkeypatch) -> None:
    """C = 3,000, top-100: ~3,000 candidates in the threshold bin, the boundary inside a run of
    equal scores; ``cap=256`` forces the re-read path (list longer than the register copy)."""
    from sgl_kernel_v4.triton import indexer_select
    from sgl_kernel_v4.triton.indexer import topk_from_scores

    if cap is not None:
        if impl == "bitsearch":
            pytest.skip("the register cap is the radix selection's")
        monkeypatch.setattr(indexer_select, "RADIX_CAP", cap)
    s = bin_heavy(3000, seed=11)
    want = oracle(s, 100)
    assert torch.equal(want, select_topk(s, s != float("-inf"), 100))
    got = topk_from_scores(s.to(DEVICE), 100, select_impl=impl).cpu()
    assert torch.equal(got, want)


def test_bad_select_impl() -> None:
    from sgl_kernel_v4.triton.indexer import topk_from_scores

    with pytest.raises(ValueError, match="select_impl"):
        topk_from_scores(torch.zeros(1, 8, device=DEVICE), 2, select_impl="sort")


@triton.jit
def _finish_rows_kernel(cnt_ptr, sure_ptr, key_ptr, pos_ptr, out_ptr, K, M_MAX, npos,
                        BLOCK_K2: tl.constexpr, CAP: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    g = tl.program_id(0)
    n_sure = tl.load(cnt_ptr + 2 * g)
    M = tl.load(cnt_ptr + 2 * g + 1)
    finish_row(n_sure, M, sure_ptr + g * K, key_ptr + g * M_MAX, pos_ptr + g * M_MAX, out_ptr + g * K, K, npos,
               BLOCK_K2, CAP, BLOCK)  # fmt: skip


@pytest.mark.parametrize("cap", [1024, 128])
def test_finish_row_wide_keys_and_positions(cap: int) -> None:
    """The radix passes alone on hand-made candidate lists: keys spread over all 20 bits below a
    shared top-12 prefix (negative and positive bins), positions up to 2^30 (every position digit
    pass runs), ties on the boundary key; ``sure`` entries merged in. Oracle: a Python sort."""
    K, M_MAX = 64, 600
    gen = torch.Generator().manual_seed(5)
    cases = []
    for prefix, distinct, n_sure in ((0x3F800000, 40, 9), (-0x40000000, 6, 0), (0x00100000, 1, 3)):
        low = torch.randint(0, 1 << 20, (distinct,), generator=gen)
        key = (prefix | low[torch.randint(0, distinct, (M_MAX,), generator=gen)]).to(torch.int32)
        pos = torch.unique(torch.randint(0, 1 << 30, (2 * (M_MAX + n_sure),), generator=gen))  # distinct
        pos = pos[torch.randperm(pos.numel(), generator=gen)][: M_MAX + n_sure].to(torch.int32)
        cases.append((key, pos[:M_MAX], pos[M_MAX:], n_sure))
    cnt = torch.tensor([[n, M_MAX] for *_, n in cases], dtype=torch.int32)
    sure = torch.zeros(len(cases), K, dtype=torch.int32)
    for i, (_, _, sp, n) in enumerate(cases):
        sure[i, :n] = sp
    keys = torch.stack([c[0] for c in cases])
    poss = torch.stack([c[1] for c in cases])
    out = torch.full((len(cases), K), 777, dtype=torch.int64)
    args = [x.to(DEVICE) for x in (cnt, sure, keys, poss, out)]
    _finish_rows_kernel[(len(cases),)](*args, K, M_MAX, 2**31 - 1, BLOCK_K2=K, CAP=cap, BLOCK=256)
    for i, (key, pos, sp, n) in enumerate(cases):
        best = sorted(zip(key.tolist(), pos.tolist()), key=lambda kp: (-kp[0], kp[1]))[: K - n]
        want = sorted(sp.tolist() + [p for _, p in best])
        assert args[4][i].cpu().tolist() == want, i

"""GPU tests: Triton indexer scoring + top-k over paged keys vs float64 / brute-force oracles (op
table entry 6).

Each token scores every entry below its visible count of its request, the keys found through the
request's row of ``req_to_page`` (the oracle lists the slots with Python loops from the definition);
keys in bf16 / fp32, fp8 (one scale per key) and fp4 (e2m1, one ue8m0 scale per 32), decoded by the
reference codecs for the oracle.

Marked ``gpu``; skipped without CUDA + Triton (they also run under ``TRITON_INTERPRET=1``, small sizes).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS
from kernels_indexer_testutil import candidates, check_selection, paged_case

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


def run_topk(q, w, pool, case: dict, k: int, scale: float, **kw) -> torch.Tensor:
    from sgl_kernel_v4.triton.indexer import indexer_topk

    d = {n: case[n].to(DEVICE) for n in ("visible", "req_to_page", "req_rows", "token_req")}
    return indexer_topk(q, w, pool, d["visible"], d["req_to_page"], d["req_rows"], d["token_req"], case["e"], k,
                        scale, **kw)  # fmt: skip


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
@pytest.mark.parametrize("rows_per_block", [None, 2])
def test_topk_from_scores_exact(T: int, C: int, k: int, rows_per_block: int | None, monkeypatch) -> None:
    from sgl_kernel_v4.triton import indexer
    from sgl_kernel_v4.triton.indexer import topk_from_scores

    if INTERP and T * C > 20000:
        pytest.skip("interpreter: too slow")
    if rows_per_block:  # several blocks of rows through one workspace
        monkeypatch.setattr(indexer, "SCRATCH_ELEMS", 3 * C * rows_per_block)
    gen = torch.Generator().manual_seed(T + C + k)
    scores = torch.randn(T, C, generator=gen)
    scores[torch.rand(T, C, generator=gen) < 0.1] = float("-inf")
    if T > 1:
        scores[-1] = float("-inf")  # all-masked row
    out = torch.full((T, k), 12345, dtype=torch.int64)
    res = topk_from_scores(scores.to(DEVICE), k, out=out.to(DEVICE))
    # exact: continuous random scores have no ties, so the selected set is the true top-k set
    check_selection(res, scores.double(), k, tol=0.0)


@pytest.mark.parametrize("rows_per_block", [None, 1])
def test_topk_ties_and_concentrated_values(rows_per_block: int | None, monkeypatch) -> None:
    """Few distinct values (the threshold bin holds most of a row), all-equal rows, huge negatives."""
    from sgl_kernel_v4.triton import indexer
    from sgl_kernel_v4.triton.indexer import topk_from_scores

    gen = torch.Generator().manual_seed(3)
    T, C, k = 4, 6000 if not INTERP else 3000, 300
    if rows_per_block:
        monkeypatch.setattr(indexer, "SCRATCH_ELEMS", 3 * C * rows_per_block)
    scores = torch.randint(0, 7, (T, C), generator=gen).float() * 0.001 + 1.0
    scores[1] = 2.5  # every candidate equal
    scores[2, :10] = -1e30
    scores[3] = torch.where(torch.rand(C, generator=gen) < 0.5, float("-inf"), -3.0)
    res = topk_from_scores(scores.to(DEVICE), k).cpu()
    for t in range(T):
        sel = res[t][res[t] >= 0]
        got = scores[t, sel].sort(descending=True).values
        want = scores[t].topk(k).values
        assert sel.unique().numel() == sel.numel() == k
        assert torch.equal(got, want), f"row {t}: selected values differ from the top-k multiset"


SCORE_CASES = [
    # T, Hi, di, C, k, n_pool
    (1, 64, 128, 2048, 512, 3072),
    (8, 64, 128, 1000, 512, 1280),  # C < k
    (33, 16, 64, 700, 64, 960),
    (9, 16, 64, 300, 32, 640),  # tokens 0-4 of request 0, 5-8 of request 1: a 4-token block spans both
    (1, 64, 128, 65536, 512, 70016),
    (2, 64, 128, 262144, 512, 262144 + 128),  # a 1M-token context
]


@pytest.mark.parametrize("T,HI,DI,C,k,N", SCORE_CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("block_t", [None, 4])
def test_indexer_topk_matches_fp64(
    T: int, HI: int, DI: int, C: int, k: int, N: int, dtype: torch.dtype, block_t: int | None
) -> None:
    """Scores and selection vs float64; ``block_t=4``: 4 tokens per scoring program (the extend
    path), including blocks whose tokens belong to two requests."""
    from sgl_kernel_v4.triton.indexer import indexer_scores

    if INTERP and (dtype != torch.float32 or T * C > 20000):
        pytest.skip("interpreter: too slow / no bf16 dot")
    gen = torch.Generator().manual_seed(T * 7 + C)
    q = torch.randn(T, HI, DI, generator=gen).to(dtype)
    w = torch.randn(T, HI, generator=gen) * HI**-0.5
    kv = torch.randn(N, DI, generator=gen).to(dtype)
    case = paged_case(T, C, N, gen)
    cand = candidates(case)
    scale = DI**-0.5
    ref = ref_scores(q, w, kv, cand, scale)
    dq, dw, dkv = (x.to(DEVICE) for x in (q, w, kv))
    out = torch.full((T, k), 777, dtype=torch.int64, device=DEVICE)
    res = run_topk(dq, dw, dkv, case, k, scale, out=out, max_visible=C, block_t=block_t)
    assert res.data_ptr() == out.data_ptr()
    # tolerance: bf16/tf32 scoring error relative to the score spread
    spread = ref[torch.isfinite(ref)].abs().max().item() if torch.isfinite(ref).any() else 1.0
    check_selection(res, ref, k, tol=3e-3 * spread)
    d = {n: case[n].to(DEVICE) for n in ("visible", "req_to_page", "req_rows", "token_req")}
    _, sc = indexer_scores(dq, dw, dkv, d["visible"], d["req_to_page"], d["req_rows"], d["token_req"], 64,
                           scale, max_visible=C, block_t=block_t)  # fmt: skip
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(sc.cpu()), finite)
    err = (sc.cpu().double()[finite] - ref[finite]).norm() / ref[finite].norm()
    assert err < 5e-3


@pytest.mark.parametrize("fp4", [False, True])
@pytest.mark.parametrize("block_t", [None, 2])
def test_indexer_topk_quantized_keys(fp4: bool, block_t: int | None) -> None:
    """fp8 keys (e4m3 + one fp32 scale, 132 B) and fp4 keys (e2m1 + 4 ue8m0, 68 B), read and
    dequantized in the kernel: the selection is the float64 top-k of the decoded keys."""
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    mc = ModelConfig.from_dict(get_preset("tiny"))
    spec = build_kv_layout(mc, "fp8_e4m3", fp4, 256).kinds[KVKind.CSA_INDEXER]
    gen = torch.Generator().manual_seed(11 + fp4)
    T, HI, DI, C, k = (3, 16, 128, 300, 16) if INTERP else (6, 64, 128, 20000, 512)
    n_pages = -(-C // 64) * 2 + 2
    st = spec.allocate(n_pages, DEVICE)[0]
    pool = KVRowsView(st, spec.entry, out_dtype=torch.float32)
    pool[torch.arange(len(pool), device=DEVICE)] = torch.randn(len(pool), DI, generator=gen).to(DEVICE)
    keys64 = pool[torch.arange(len(pool), device=DEVICE)].double().cpu()  # the reference codec's decode
    dtype = torch.float32 if INTERP else torch.bfloat16
    q = torch.randn(T, HI, DI, generator=gen).to(dtype)
    w = torch.randn(T, HI, generator=gen) * HI**-0.5
    case = paged_case(T, C, len(pool), gen)
    ref = ref_scores(q, w, keys64, candidates(case), DI**-0.5)
    res = run_topk(q.to(DEVICE), w.to(DEVICE), pool, case, k, DI**-0.5, block_t=block_t)
    spread = ref[torch.isfinite(ref)].abs().max().item()
    check_selection(res, ref, k, tol=(1e-5 if INTERP else 3e-3) * spread)


def test_indexer_topk_bad_input() -> None:
    from sgl_kernel_v4.triton.indexer import indexer_topk

    q = torch.randn(2, 4, 32, device=DEVICE)
    w = torch.randn(2, 4, device=DEVICE)
    kv = torch.randn(64, 32, device=DEVICE)
    r2p = torch.zeros(1, 1, dtype=torch.int32, device=DEVICE)
    rows = torch.zeros(1, dtype=torch.int64, device=DEVICE)
    treq = torch.zeros(2, dtype=torch.int64, device=DEVICE)
    vis = torch.full((2,), 5, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="weights"):
        indexer_topk(q, w[:1], kv, vis, r2p, rows, treq, 64, 2, 1.0)
    with pytest.raises(ValueError, match="idx_kv"):
        indexer_topk(q, w, kv[:, :16], vis, r2p, rows, treq, 64, 2, 1.0)
    with pytest.raises(ValueError, match="topk"):
        indexer_topk(q, w, kv, vis, r2p, rows, treq, 64, 0, 1.0)
    with pytest.raises(ValueError, match="visible"):
        indexer_topk(q, w, kv, vis[:1], r2p, rows, treq, 64, 2, 1.0)
    with pytest.raises(ValueError, match="select_impl"):
        indexer_topk(q, w, kv, vis, r2p, rows, treq, 64, 2, 1.0, select_impl="sort")

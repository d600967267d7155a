"""Indexer top-k of long prefill runs over fp4 keys decoded once per call
(:mod:`sgl_kernel_v4.triton.indexer_decoded`).

Oracles: the pool path (``indexer.indexer_topk`` over the fp4 pool, itself tested against float64
in ``test_kernels_indexer_extend.py``) must give the same selection bit for bit, since the copy
holds what the scoring kernel decodes in registers; the float64 scores of the reference codec's
decode bound the selection independently; the copy's values equal the reference codec's decode.

Runs on CUDA or under ``TRITON_INTERPRET=1`` (fp32 queries there). Marked ``gpu`` as the other
kernel tests.
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS
from kernels_indexer_testutil import _ref64, candidates, check_selection

pytestmark = KERNEL_MARKS


def _fp4_pool(n_pages: int, e: int, gen: torch.Generator):
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    spec = build_kv_layout(ModelConfig.from_dict(get_preset("tiny")), "fp8_e4m3", True, 4 * e)
    spec = spec.kinds[KVKind.CSA_INDEXER]
    pool = KVRowsView(spec.allocate(n_pages, DEVICE)[0], spec.entry, out_dtype=torch.float32)
    pool[torch.arange(len(pool), device=DEVICE)] = torch.randn(len(pool), spec.entry.dim, generator=gen).to(
        DEVICE
    )
    return pool


def _case(gen: torch.Generator, e: int = 64) -> dict:
    """Request 0: 20 tokens with random visible counts; request 1: a 240-token prefill run at the
    end of its context (token ``t`` of the run sees ``C - 60 + t // 4`` entries), its row with a
    missing page; rows listed request 0 then 1 (261 tokens: more than a decode-sized batch)."""
    T0, T1, C = 20, 241, 400
    P = -(-C // e)
    n_pages = 3 * P + 2
    r2p = torch.randperm(n_pages, generator=gen)[: 3 * P].view(3, P).int()
    r2p[2, 3] = -1
    vis0 = torch.randint(0, C, (T0,), generator=gen)
    vis1 = C - 60 + torch.arange(T1) // 4
    return dict(
        req_to_page=r2p,
        req_rows=torch.tensor([0, 2]),
        token_req=torch.cat([torch.zeros(T0), torch.ones(T1)]).long(),
        visible=torch.cat([vis0, vis1]),
        e=e,
        C=C,
        n_pages=n_pages,
        run=(T0, T0 + T1),
    )


def test_decoded_run_selects_what_the_pool_path_selects() -> None:
    """fp4 keys: the run's tokens over the decoded copy, the others over the pool: the same
    ``[T, topk]`` indices as the whole batch over the pool, and within float64's selection."""
    from sgl_kernel_v4.dense_prefix import PrefixSegment
    from sgl_kernel_v4.triton.indexer import indexer_topk
    from sgl_kernel_v4.triton.indexer_decoded import indexer_topk_decoded

    gen = torch.Generator().manual_seed(3)
    case = _case(gen)
    pool = _fp4_pool(case["n_pages"], case["e"], gen)
    T, HI, DI, k = case["visible"].shape[0], 16, 128, 32
    dtype = torch.float32 if INTERP else torch.bfloat16
    q = torch.randn(T, HI, DI, generator=gen).to(dtype).to(DEVICE)
    w = (torch.randn(T, HI, generator=gen) * HI**-0.5).to(DEVICE)
    d = {n: case[n].to(DEVICE) for n in ("visible", "req_to_page", "req_rows", "token_req")}
    args = (q, w, pool, d["visible"], d["req_to_page"], d["req_rows"], d["token_req"], case["e"], k, DI**-0.5)
    a, b = case["run"]
    seg = PrefixSegment(a, b, 1, int(case["visible"][a:b].max()))
    got = indexer_topk_decoded(*args, [seg], max_visible=case["C"]).cpu()
    pool_path = indexer_topk(*args, max_visible=case["C"]).cpu()
    assert torch.equal(got, pool_path)
    keys64 = pool[torch.arange(len(pool), device=DEVICE)].double().cpu()
    ref = _ref64(q.cpu(), w.cpu(), keys64, candidates(case), DI**-0.5)
    spread = ref[torch.isfinite(ref)].abs().max().item()
    check_selection(got, ref, k, tol=(1e-5 if INTERP else 3e-3) * spread)


def test_decoded_copy_scores_are_the_pool_scores_bit_for_bit() -> None:
    """The run's scores over the decoded copy (its table and one request row) are the same fp32
    bits as over the pool, with the tokens per program of the whole forward."""
    from sgl_kernel_v4.triton.indexer import _tokens_per_program, indexer_scores
    from sgl_kernel_v4.triton.indexer_decoded import gather_index_keys

    gen = torch.Generator().manual_seed(5)
    case = _case(gen)
    pool = _fp4_pool(case["n_pages"], case["e"], gen)
    a, b = case["run"]
    HI, DI, e = 16, 128, case["e"]
    dtype = torch.float32 if INTERP else torch.bfloat16
    q = torch.randn(b - a, HI, DI, generator=gen).to(dtype).to(DEVICE)
    w = (torch.randn(b - a, HI, generator=gen) * HI**-0.5).to(DEVICE)
    vis = case["visible"][a:b].to(DEVICE)
    r2p = case["req_to_page"].to(DEVICE)
    row = case["req_rows"][1:2].to(DEVICE)
    treq = torch.zeros(b - a, dtype=torch.int64, device=DEVICE)
    bt = _tokens_per_program(len(case["visible"]), HI)
    n = int(vis.max())
    keys, table = gather_index_keys(pool, r2p, row, n, e, torch.float32 if INTERP else torch.bfloat16)
    _, s_copy = indexer_scores(q, w, keys, vis, table, torch.zeros_like(row), treq, e, DI**-0.5, block_t=bt)
    _, s_pool = indexer_scores(q, w, pool, vis, r2p, row, treq, e, DI**-0.5, block_t=bt)
    assert bt > 1 and torch.isinf(s_pool).any() and torch.isfinite(s_pool).any()
    assert torch.equal(s_copy.cpu().view(torch.int32), s_pool.cpu().view(torch.int32))


def test_gathered_keys_are_the_codec_decode_with_missing_pages_marked() -> None:
    """The copy of request 1's keys: each mapped page equals the reference codec's decode of the
    pool page it stands for; the missing page is ``-1`` in the copy's table (zeros in the copy)."""
    from sgl_kernel_v4.triton.indexer_decoded import gather_index_keys

    gen = torch.Generator().manual_seed(4)
    case = _case(gen)
    pool = _fp4_pool(case["n_pages"], case["e"], gen)
    e, row = case["e"], 2
    r2p = case["req_to_page"].to(DEVICE)
    n = 380  # entries covered: 6 pages of 64, page 3 missing
    keys, table = gather_index_keys(pool, r2p, torch.tensor([row], device=DEVICE), n, e, torch.float32)
    keys, table = keys.cpu(), table.cpu()
    pages = case["req_to_page"][row, : -(-n // e)]
    assert table.shape == (1, len(pages))
    assert torch.equal(table[0], torch.where(pages >= 0, torch.arange(len(pages)), -1).int())
    for p, page in enumerate(pages.tolist()):
        got = keys[p * e : (p + 1) * e]
        if page < 0:
            assert (got == 0).all()
        else:
            want = pool[torch.arange(page * e, (page + 1) * e, device=DEVICE)].cpu()
            assert torch.equal(got, want), p


def test_decoded_path_refuses_bad_input() -> None:
    """Float pools and overlapping segments: ValueError naming the field."""
    from sgl_kernel_v4.dense_prefix import PrefixSegment
    from sgl_kernel_v4.triton.indexer_decoded import gather_index_keys, indexer_topk_decoded

    T, HI, DI = 8, 16, 32
    q = torch.zeros(T, HI, DI, device=DEVICE)
    w = torch.zeros(T, HI, device=DEVICE)
    kv = torch.zeros(64, DI, device=DEVICE)
    r2p = torch.zeros(1, 1, dtype=torch.int32, device=DEVICE)
    row = torch.zeros(1, dtype=torch.int64, device=DEVICE)
    z = torch.zeros(T, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="idx_kv"):
        gather_index_keys(kv, r2p, row, 10, 64, torch.float32)
    with pytest.raises(ValueError, match="idx_kv"):
        indexer_topk_decoded(q, w, kv, z, r2p, row, z, 64, 4, 1.0, [PrefixSegment(0, 8, 0, 10)])
    pool = _fp4_pool(2, 64, torch.Generator().manual_seed(0))
    q = torch.zeros(T, HI, 128, device=DEVICE)
    segs = [PrefixSegment(0, 6, 0, 10), PrefixSegment(4, 8, 0, 10)]
    with pytest.raises(ValueError, match="segments"):
        indexer_topk_decoded(q, w, pool, z, r2p, row, z, 64, 4, 1.0, segs)

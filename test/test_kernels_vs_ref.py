"""GPU tests: every Triton op == its torch reference (``sgl_kernel_v4.ref``) on the same CUDA inputs.

Both sides are checked independently against float64 oracles in the other ``test_kernels_*``
files; this file checks that the two backends of ``sgl_kernel_v4.ops`` agree on V4-Flash-like
shapes in bf16 (tolerance: bf16 rounding, stated per op).
"""

from __future__ import annotations

import math

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS, rel_err

pytestmark = KERNEL_MARKS


def _cos_sin(T: int, r: int, dev: str) -> tuple[torch.Tensor, torch.Tensor]:
    pos = torch.randint(0, 100000, (T, 1), device=dev).double()
    ang = pos * 10000.0 ** (-torch.arange(0, r, 2, device=dev).double() / r)
    return ang.cos().float(), ang.sin().float()


@pytest.fixture
def dev() -> str:
    if INTERP:
        pytest.skip("reference comparison runs on CUDA only")
    assert DEVICE is not None
    torch.manual_seed(0)
    return DEVICE


def _paged(T: int, n_pages: int, e: int, dev: str) -> dict:
    """Page-table inputs for ``T`` tokens of two requests (page rows random permutations)."""
    P = 40
    return dict(
        req_to_page=torch.stack([torch.randperm(n_pages, device=dev)[:P] for _ in range(3)]).int(),
        req_rows=torch.tensor([2, 0], device=dev),
        token_req=(torch.arange(T, device=dev) >= T // 2).long(),
        entries_per_page=e,
    )


def test_sparse_attention_vs_ref(dev: str) -> None:
    from sgl_kernel_v4.ref.attention import sparse_attention as ref
    from sgl_kernel_v4.triton.attention import sparse_attention

    T, H, D, W = 9, 64, 512, 128
    q = torch.randn(T, H, D, device=dev, dtype=torch.bfloat16)
    swa = torch.randn(20 * W, D, device=dev, dtype=torch.bfloat16)
    comp = torch.randn(50 * 64, D, device=dev, dtype=torch.bfloat16)
    pos = torch.randint(0, 8000, (T,), device=dev)
    pages = torch.randint(-1, 20, (T, 2), device=dev)
    pages[-1] = -1
    ent = torch.randint(-1, 2000, (T, 512), device=dev)
    vis = torch.randint(0, 2500, (T,), device=dev)
    sinks = torch.randn(H, device=dev)
    pg = _paged(T, 50, 64, dev)
    for extra in ({}, dict(comp_kv=comp, comp_entries=ent, **pg), dict(comp_kv=comp, comp_visible=vis, **pg)):
        a = sparse_attention(q, swa, pages, pos, W, sinks, D**-0.5, **extra)
        b = ref(q, swa, pages, pos, W, sinks, D**-0.5, **extra)
        assert rel_err(a, b) < 1e-2


def _indexer_key_pools(n: int, di: int, dev: str) -> list[tuple[str, object]]:
    """The same ``n`` random indexer keys (``di`` wide) in the three serving formats: bf16
    (``[n, di]``), fp8 (``--kv-cache-dtype fp8_e4m3``: e4m3 + one fp32 scale per key) and fp4
    (``--enable-fp4-indexer``: e2m1 + one ue8m0 scale per 32), the quantized ones as the row views
    of the V4-Flash CSA indexer layout (256-token pages: 64 entries per page)."""
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    keys = torch.randn(n, di, device=dev)
    out: list[tuple[str, object]] = [("bf16", keys.bfloat16())]
    mc = ModelConfig.from_dict(get_preset("flash"))
    for fp4 in (False, True):
        spec = build_kv_layout(mc, "fp8_e4m3", fp4, 256).kinds[KVKind.CSA_INDEXER]
        st = spec.allocate(-(-n // spec.rows_per_page), dev)[0]
        pool = KVRowsView(st, spec.entry, out_dtype=torch.float32)
        pool[torch.arange(n, device=dev)] = keys
        out.append(("fp4" if fp4 else "fp8", pool))
    return out


def test_indexer_topk_vs_ref(dev: str) -> None:
    """bf16 queries over bf16, fp8 and fp4 keys; one token per scoring program (the decode scoring
    kernel) with each selection implementation, and two (the general kernel, an extend's tiling).
    Every call is made before any check: the sm_90 compile test records these launches without
    running them (``test_kernels_compile_all``), so a failed check must not cut the list short."""
    from sgl_kernel_v4.ref.attention import indexer_topk as ref
    from sgl_kernel_v4.triton.indexer import indexer_topk
    from sgl_kernel_v4.triton.indexer_select import SELECT_IMPLS

    T, Hi, di, k = 4, 64, 128, 512
    q = torch.randn(T, Hi, di, device=dev, dtype=torch.bfloat16)
    w = torch.randn(T, Hi, device=dev) * Hi**-0.5
    vis = torch.tensor([2560, 2500, 2000, 100], device=dev)  # at most the 40 pages x 64 of a row
    pg = _paged(T, 64, 64, dev)
    runs = []
    for fmt, kv in _indexer_key_pools(64 * 64, di, dev):
        args = (q, w, kv, vis, pg["req_to_page"], pg["req_rows"], pg["token_req"], 64, k, di**-0.5)
        want = ref(*args).cpu()
        for block_t, impl in [(None, impl) for impl in SELECT_IMPLS] + [(2, None)]:
            kw = {"block_t": block_t} if impl is None else {"block_t": block_t, "select_impl": impl}
            runs.append(((fmt, block_t, impl), indexer_topk(*args, **kw).cpu(), want))
    for label, a, b in runs:
        for t in range(T):
            sa, sb = set(a[t].tolist()) - {-1}, set(b[t].tolist()) - {-1}
            assert len(sa) == len(sb) == min(k, int(vis[t])), label
            assert len(sa & sb) >= 0.97 * len(sa), label  # only near-ties at the k-th score may differ


def test_compressor_vs_ref(dev: str) -> None:
    from sgl_kernel_v4.ref.compressor import compress_and_insert as ref
    from sgl_kernel_v4.triton.compressor import compress_and_insert

    for W, L, d in [(16, 8, 512), (16, 8, 128), (4, 128, 512)]:
        kv = torch.randn(W, L, d, device=dev, dtype=torch.bfloat16)
        score = torch.randn(W, L, d, device=dev)
        score[0, : L // 2] = float("-inf")
        w = torch.rand(d, device=dev) + 0.5
        cos, sin = _cos_sin(W, 64, dev)
        p1 = torch.zeros(2 * W, d, device=dev, dtype=torch.bfloat16)
        p2 = p1.clone()
        idx = torch.randperm(2 * W, device=dev)[:W]
        a = compress_and_insert(kv, score, w, cos, sin, p1, idx, 1e-6)
        b = ref(kv, score, w, cos, sin, p2, idx, 1e-6)
        assert rel_err(a, b) < 1e-2 and rel_err(p1, p2) < 1e-2


def test_compressor_state_vs_ref(dev: str) -> None:
    """The in-place window / state kernels on serving shapes in bf16 (CSA main d 512, CSA indexer
    d 128, HCA d 512 with m 128; a decode of 7 requests and an extend): entries within bf16
    rounding of the reference, bit-equal to the unfused path; the state bit-equal."""
    from kernels_compressor_testutil import Case, _batch, _clone, _compress_args, _inputs
    from sgl_kernel_v4.ref import compressor_state as ref
    from sgl_kernel_v4.triton import compressor_state as tri
    from sgl_kernel_v4.triton.compressor import compress_and_insert

    for m, d, overlap in ((4, 512, True), (4, 128, True), (128, 512, False)):
        for reqs in ([(s, 100 * s + 255, 1) for s in range(1, 8)], [(1, 250, 300), (2, 0, 1000)]):
            case = Case(m, d, overlap, 256, reqs)
            fb = _batch(case)
            plan = fb.csa if overlap else fb.hca
            inp = _inputs(case, fb, seed=m + d, dtype=torch.bfloat16)
            N = int(plan.win_out.max()) + 1 if plan.win_out.numel() else 1  # a decode may complete none
            pools = [torch.zeros(N, d, device=dev, dtype=torch.bfloat16) for _ in range(3)]
            args = _compress_args(case, fb, inp, inp["state"], pools[0], torch.Generator().manual_seed(0))
            a = tri.compress_windows_and_insert(*args)
            b = ref.compress_windows_and_insert(*args[:14], pools[1], *args[15:])
            c = compress_and_insert(*ref.gather_windows(*args[:11]), *args[11:14], pools[2], *args[15:])
            real = plan.win_out >= 0
            assert rel_err(a[real], b[real]) < 1e-2 and rel_err(pools[0], pools[1]) < 1e-2
            assert torch.equal(a[real], c[real]) and torch.equal(pools[0], pools[2])
            got, want = _clone(inp["state"]), _clone(inp["state"])
            n = inp["new"]
            head = (n["kv_new"], n["gate"], n["position_bias"], fb.positions, fb.req_pool_indices)
            tail = (plan.buf_rows, plan.ovl_rows, plan.snap_rows, plan.snap_pages)
            tri.advance_compressor_state(*head, *got.values(), *tail)
            ref.advance_compressor_state(*head, *want.values(), *tail)
            assert all(v is None or torch.equal(v, want[k]) for k, v in got.items())


def test_rope_ops_vs_ref(dev: str) -> None:
    import sgl_kernel_v4.ref.norm as rn
    import sgl_kernel_v4.ref.rope as rr
    from sgl_kernel_v4.triton.norm import rms_norm
    from sgl_kernel_v4.triton.rope import apply_rope, inv_rope_quant, qnorm_rope_kv_insert

    T, H, D = 33, 64, 512
    x = torch.randn(T, H, D, device=dev, dtype=torch.bfloat16)
    cos, sin = _cos_sin(T, 64, dev)
    assert rel_err(apply_rope(x, cos, sin), rr.apply_rope(x, cos, sin)) < 5e-3
    assert rel_err(apply_rope(x[:, 0], cos, sin), rr.apply_rope(x[:, 0], cos, sin)) < 5e-3
    assert rel_err(inv_rope_quant(x, cos, sin, False), rr.inv_rope_quant(x, cos, sin, False)) < 5e-3
    kv = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
    w = torch.rand(D, device=dev) + 0.5
    p1 = torch.zeros(64, D, device=dev, dtype=torch.bfloat16)
    p2 = p1.clone()
    idx = torch.arange(T, device=dev)
    idx[3] = -1
    qa, ka = qnorm_rope_kv_insert(x, kv, w, cos, sin, p1, idx, 1e-6)
    qb, kb = rr.qnorm_rope_kv_insert(x, kv, w, cos, sin, p2, idx, 1e-6)
    assert rel_err(qa, qb) < 1e-2 and rel_err(ka, kb) < 1e-2 and rel_err(p1, p2) < 1e-2
    y = torch.randn(T, 4096, device=dev, dtype=torch.bfloat16)
    assert rel_err(rms_norm(y, w.repeat(8), 1e-6), rn.rms_norm(y, w.repeat(8), 1e-6)) < 5e-3
    assert rel_err(rms_norm(y, None, 1e-6), rn.rms_norm(y, None, 1e-6)) < 5e-3


def test_mhc_vs_ref(dev: str) -> None:
    import sgl_kernel_v4.ref.mhc as rm
    from sgl_kernel_v4.triton.mhc import hc_post, hc_pre

    T, n, D = 17, 4, 4096
    x = torch.randn(T, n, D, device=dev, dtype=torch.bfloat16)
    fn = torch.randn((2 + n) * n, n * D, device=dev) * (n * D) ** -0.5
    base = torch.randn((2 + n) * n, device=dev) * 0.5
    scale = torch.rand(3, device=dev) + 0.5
    a = hc_pre(x, fn, base, scale, 20, 1e-6, 1e-6)
    b = rm.hc_pre(x, fn, base, scale, 20, 1e-6, 1e-6)
    # the reference's fp32 GEMM may run in TF32 on GPU: allow ~1e-3 on the weights
    assert rel_err(a[1], b[1]) < 2e-3 and rel_err(a[2], b[2]) < 2e-3 and rel_err(a[0], b[0]) < 1e-2
    o = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
    assert rel_err(hc_post(o, x, a[1], a[2]), rm.hc_post(o, x, a[1], a[2])) < 1e-2


@pytest.mark.parametrize("limit", [10.0, math.inf], ids=["clamp10", "noclamp"])
def test_moe_vs_ref(dev: str, limit: float) -> None:
    """bf16 fused MoE, clamped (V4's 10) and unclamped (``inf``: a config limit of 0 or below)."""
    from sgl_kernel_v4.ref.moe import fused_moe as ref
    from sgl_kernel_v4.triton.moe import fused_moe

    T, D, inter, E, k = 20, 1024, 512, 8, 6
    x = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
    wgu = torch.randn(E, 2 * inter, D, device=dev, dtype=torch.bfloat16) * D**-0.5 * 3
    wd = torch.randn(E, D, inter, device=dev, dtype=torch.bfloat16) * inter**-0.5
    ids = torch.stack([torch.randperm(E, device=dev)[:k] for _ in range(T)])
    wts = torch.rand(T, k, device=dev)
    assert rel_err(fused_moe(x, wgu, wd, ids, wts, limit), ref(x, wgu, wd, ids, wts, limit)) < 1.5e-2


def test_moe_route_vs_ref(dev: str) -> None:
    """V4-Flash router shapes (256 experts, top-6; bf16 logits): bit-equal, top-k and hash."""
    from sgl_kernel_v4.ref.moe_router import moe_route as ref
    from sgl_kernel_v4.triton.moe_router import moe_route

    T, E, k = 20, 256, 6
    logits = torch.randn(T, E, device=dev, dtype=torch.bfloat16) * 3
    bias = torch.randn(E, device=dev) * 0.1
    a, b = moe_route(logits, bias, None, None, k, 2.5), ref(logits, bias, None, None, k, 2.5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    tid2eid = torch.randint(0, E, (1000, k), device=dev)
    tok = torch.randint(0, 1000, (T,), device=dev)
    a, b = moe_route(logits, None, tid2eid, tok, k, 2.5), ref(logits, None, tid2eid, tok, k, 2.5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("limit", [10.0, math.inf], ids=["clamp10", "noclamp"])
def test_swiglu_vs_ref(dev: str, limit: float) -> None:
    """Shared-expert SwiGLU on a fused ``[T, 2I]`` GEMM output, bf16: at most one bf16 ulp apart;
    clamped at V4's 10 and unclamped (``inf``: a config limit of 0 or below)."""
    from sgl_kernel_v4.ref.moe import swiglu_clamped as ref
    from sgl_kernel_v4.triton.activation import swiglu_clamped

    gu = torch.randn(20, 2 * 2048, device=dev, dtype=torch.bfloat16) * 8
    a, b = swiglu_clamped(gu, limit), ref(gu, limit)
    assert (a.view(torch.int16).int() - b.view(torch.int16).int()).abs().max() <= 1


def test_ops_table_picks_triton_on_cuda(dev: str) -> None:
    from sgl_kernel_v4 import ops
    from sgl_kernel_v4.triton.attention import sparse_attention

    ops.set_triton_enabled(None)
    if ops.triton_enabled():
        assert ops.get_op("sparse_attention", dev) is sparse_attention

# ruff: noqa: E731
"""Microbenchmarks: each Triton kernel of ``sgl_kernel_v4.triton`` against the unfused torch ops it replaces.

Shapes are V4-Flash per-layer shapes (``flash-8l-32e`` preset: hidden 4096, 64 heads x 512,
rope 64, window 128, indexer 64 x 128 with top-512, hc_mult 4, experts [2I=4096, D=4096],
top-6), at decode batch sizes and prefill token counts. Every row reports the median time of
the Triton path and of the torch baseline measured in the same process, both eagerly
(``triton.testing.do_bench``, L2 flushed between runs) and replayed from a CUDA graph
(``triton.testing.do_bench_cudagraph``, launch overhead removed: how decode runs), the
speedup (graph times), the bytes that must move / FLOPs that must run, and the achieved
fraction of the measured ceilings. A relative error between the two outputs is recorded as a
sanity check (the real correctness tests are ``test/test_kernels_*.py``).

Usage (GPU): ``python benchmark/bench_kernels.py [--only attention,indexer] [--quick]`` or through
``benchmark/gpu_suite.py``, which measures the ceilings first.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any

import torch

DEV = "cuda"
H, D, ROPE = 64, 512, 64
HIDDEN = 4096
WINDOW, TOPK = 128, 512
HI, DI = 64, 128
HC = 4
N_EXPERTS, MOE_I, MOE_K = 32, 2048, 6

Row = dict[str, Any]
_GEN: torch.Generator | None = None


def _G() -> torch.Generator:
    """The benches' own CUDA generator (the default one is poisoned by a failed graph capture)."""
    global _GEN
    if _GEN is None:
        _GEN = torch.Generator(device=DEV).manual_seed(1234)
    return _GEN


def _time(fn: Callable[[], Any], graph: bool = True) -> tuple[float, float | None]:
    """(eager median ms, cuda-graph median ms or None if capture failed)."""
    import triton.testing as tt

    fn()
    torch.cuda.synchronize()
    eager = tt.do_bench(fn, warmup=10, rep=60, return_mode="median")
    g = None
    if graph:
        try:
            g = tt.do_bench_cudagraph(fn, rep=60, return_mode="median")
        except Exception as e:  # noqa: BLE001 - record, keep going
            print(f"  cudagraph timing failed: {type(e).__name__}: {e}", file=sys.stderr)
            torch.cuda.synchronize()
    return eager, g


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _row(
    kernel: str,
    shape: str,
    fused: Callable[[], Any],
    baseline: Callable[[], Any],
    nbytes: float,
    flops: float,
    ceil: dict[str, float],
    err: float | None,
    baseline_name: str,
) -> Row:
    tf_e, tf_g = _time(fused)
    tb_e, tb_g = _time(baseline)
    tf = tf_g if tf_g is not None else tf_e
    tb = tb_g if tb_g is not None else tb_e
    bw = nbytes / (tf * 1e-3) / 1e9  # GB/s
    fl = flops / (tf * 1e-3) / 1e12  # TFLOP/s
    row = {
        "kernel": kernel,
        "shape": shape,
        "triton_ms_eager": tf_e,
        "triton_ms_graph": tf_g,
        "torch_ms_eager": tb_e,
        "torch_ms_graph": tb_g,
        "speedup": tb / tf,
        "speedup_eager": tb_e / tf_e,
        "bytes": nbytes,
        "gbps": bw,
        "frac_bw": bw / ceil.get("copy_gbps", float("nan")),
        "flops": flops,
        "tflops": fl,
        "frac_gemm": fl / ceil.get("bf16_tflops", float("nan")),
        "rel_err_vs_torch": err,
        "baseline": baseline_name,
    }
    print(
        f"  {kernel:22s} {shape:34s} triton {tf * 1e3:9.1f} us  torch {tb * 1e3:9.1f} us  "
        f"x{row['speedup']:6.2f}  {bw:7.0f} GB/s ({row['frac_bw'] * 100:4.1f}%)  {fl:6.1f} TF/s  err {err}",
        flush=True,
    )
    return row


# ------------------------------------------------------------------------------------------------
# sparse attention
# ------------------------------------------------------------------------------------------------


def _page_table(T: int, n_entries: int, e: int, n_pages: int, g: torch.Generator) -> dict:
    """Paged inputs for ``T`` tokens of one request each seeing ``n_entries`` entries in random
    pages of ``e`` entries: ``req_to_page`` / ``req_rows`` / ``token_req`` / ``entries_per_page``."""
    P = max(1, -(-n_entries // e))
    rows = torch.stack([torch.randperm(n_pages, device=DEV, generator=g)[:P] for _ in range(T)]).int()
    return dict(
        req_to_page=rows,
        req_rows=torch.arange(T, device=DEV),
        token_req=torch.arange(T, device=DEV),
        entries_per_page=e,
    )


def _window_inputs(T: int, n_win_pages: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions past the first window and two random window pages per token."""
    pos = torch.randint(WINDOW, 1 << 20, (T,), device=DEV, generator=g)
    pages = torch.randint(1, n_win_pages, (T, 2), device=DEV, generator=g)
    return pos, pages


def torch_sparse_attention(q, swa, swa_pages, pos, comp, ent, pg, sinks, scale) -> torch.Tensor:
    """Unfused torch over the same paged inputs: slots from the page tables, gather keys, bmm,
    mask, sink column, fp32 softmax, bmm (HF eager attention)."""
    from sgl_kernel_v4.paged import entry_slots, window_slots

    i0 = window_slots(pos, swa_pages, WINDOW)
    i1 = entry_slots(pg["req_to_page"], pg["req_rows"][pg["token_req"]][:, None], ent, pg["entries_per_page"])
    k = torch.cat([swa[i0.clamp(min=0)], comp[i1.clamp(min=0)]], 1)  # [T, K, D]
    m = torch.cat([i0 >= 0, i1 >= 0], 1)
    logits = torch.bmm(q, k.transpose(1, 2)).float() * scale  # [T, H, K]
    logits = logits.masked_fill(~m[:, None, :], float("-inf"))
    T, Hq, _ = q.shape
    logits = torch.cat([logits, sinks.view(1, Hq, 1).expand(T, Hq, 1)], -1)
    p = torch.softmax(logits, -1)[..., :-1].to(q.dtype)
    return torch.bmm(p, k)


def _attention_case(T: int, k1: int, g: torch.Generator, kv_win, kv_cmp) -> tuple:
    q = torch.randn(T, H, D, device=DEV, dtype=torch.bfloat16, generator=g)
    pos, pages = _window_inputs(T, kv_win.shape[0] // WINDOW, g)
    pg = _page_table(T, 4 * k1, 64, kv_cmp.shape[0] // 64, g)
    ent = torch.randint(0, 4 * k1, (T, k1), device=DEV, generator=g)
    return q, pos, pages, pg, ent


def bench_attention(ceil: dict[str, float], quick: bool) -> list[Row]:
    from sgl_kernel_v4.triton.attention import sparse_attention

    rows = []
    shapes = [(1, 512), (8, 512), (32, 512), (128, 512), (256, 512), (4096, 512)]
    if quick:
        shapes = [(1, 512), (32, 512), (4096, 512)]
    pool_rows = 1 << 20
    g = torch.Generator(device=DEV).manual_seed(0)
    kv_win = torch.randn(pool_rows, D, device=DEV, dtype=torch.bfloat16, generator=g)
    kv_cmp = torch.randn(pool_rows // 4, D, device=DEV, dtype=torch.bfloat16, generator=g)
    sinks = torch.randn(H, device=DEV, generator=_G())
    scale = D**-0.5
    for T, k1 in shapes:
        q, pos, pages, pg, ent = _attention_case(T, k1, g, kv_win, kv_cmp)
        out = torch.empty_like(q)

        def fused(q=q, pos=pos, pages=pages, pg=pg, ent=ent, o=out):
            return sparse_attention(
                q, kv_win, pages, pos, WINDOW, sinks, scale, kv_cmp, ent, None, **pg, out=o
            )

        def base(q=q, pos=pos, pages=pages, pg=pg, ent=ent):
            return torch_sparse_attention(q, kv_win, pages, pos, kv_cmp, ent, pg, sinks, scale)

        err = _rel(fused(), base())
        K = WINDOW + k1
        nbytes = T * H * D * 2 * 2 + T * K * (D * 2 + 8)
        flops = 4.0 * T * H * K * D
        rows.append(
            _row("sparse_attention", f"T={T} H={H} D={D} K={WINDOW}+{k1}", fused, base, nbytes, flops, ceil, err, "slots+gather+bmm+softmax+bmm")
        )  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------------------
# indexer
# ------------------------------------------------------------------------------------------------


def torch_indexer_topk(q, w, kv, vis, pg, topk: int, scale: float) -> torch.Tensor:
    """Unfused torch (HF scorer) over the same paged inputs: slots, gather, matmul in fp32, relu,
    head-weighted sum, mask, topk."""
    from sgl_kernel_v4.paged import entry_slots

    C = int(vis.max())
    col = torch.arange(C, device=q.device)[None, :]
    ent = torch.where(col < vis[:, None], col, -1)
    cand = entry_slots(
        pg["req_to_page"], pg["req_rows"][pg["token_req"]][:, None], ent, pg["entries_per_page"]
    )
    k = kv[cand.clamp(min=0)]  # [T, C, di]
    s = torch.bmm(q, k.transpose(1, 2)).float()  # [T, Hi, C]
    s = torch.relu(s * scale) * w[:, :, None]
    s = s.sum(1).masked_fill(cand < 0, float("-inf"))
    kk = min(topk, s.shape[1])
    return s.topk(kk, dim=-1).indices


def bench_indexer(ceil: dict[str, float], quick: bool) -> list[Row]:
    from sgl_kernel_v4.triton.indexer import indexer_topk, topk_from_scores

    rows = []
    g = torch.Generator(device=DEV).manual_seed(1)
    # top-k alone (the 106 us torch.topk figure of PERF.md)
    tk_shapes = [(1, 262144), (8, 65536), (128, 16384), (4096, 4096)]
    if quick:
        tk_shapes = [(1, 262144), (4096, 4096)]
    for T, C in tk_shapes:
        scores = torch.randn(T, C, device=DEV, generator=g)
        out = torch.empty(T, TOPK, dtype=torch.int64, device=DEV)
        fused = lambda s=scores, o=out: topk_from_scores(s, TOPK, out=o)  # noqa: E731
        base = lambda s=scores: s.topk(TOPK, dim=-1)  # noqa: E731
        got = scores.gather(1, fused()).sort(1).values
        want = base().values.sort(1).values
        err = _rel(got, want)
        rows.append(
            _row(
                "topk_select", f"T={T} C={C} k={TOPK}", fused, base, T * C * 4.0, 0.0, ceil, err, "torch.topk"
            )
        )
    # full indexer over paged keys: scoring + top-k
    shapes = [(1, 262144), (1, 65536), (8, 65536), (32, 16384), (128, 8192), (2048, 2048)]
    if quick:
        shapes = [(1, 262144), (32, 16384)]
    n_pool = 300032
    kv = torch.randn(n_pool, DI, device=DEV, dtype=torch.bfloat16, generator=g)
    for T, C in shapes:
        q = torch.randn(T, HI, DI, device=DEV, dtype=torch.bfloat16, generator=g)
        w = torch.randn(T, HI, device=DEV, generator=g) * HI**-0.5
        pg = _page_table(T, C, 64, n_pool // 64, g)
        vis = torch.full((T,), C, dtype=torch.int64, device=DEV)
        out = torch.empty(T, TOPK, dtype=torch.int64, device=DEV)
        scale = DI**-0.5

        def fused(q=q, w=w, pg=pg, vis=vis, o=out, C=C, scale=scale):
            return indexer_topk(q, w, kv, vis, pg["req_to_page"], pg["req_rows"], pg["token_req"],
                                pg["entries_per_page"], TOPK, scale, max_visible=C, out=o)  # fmt: skip

        def base(q=q, w=w, pg=pg, vis=vis, scale=scale):
            return torch_indexer_topk(q, w, kv, vis, pg, TOPK, scale)

        # agreement: fraction of the torch top-k set that the kernel also selected
        a, b = fused().sort(1).values, base().sort(1).values
        overlap = sum(len(set(a[i].tolist()) & set(b[i].tolist())) for i in range(min(T, 16))) / (
            min(T, 16) * TOPK
        )
        nbytes = T * C * (DI * 2 + 8) + T * HI * DI * 2
        flops = 2.0 * T * HI * C * DI
        rows.append(
            _row("indexer_topk", f"T={T} C={C} Hi={HI} di={DI} k={TOPK}", fused, base, nbytes, flops, ceil, 1.0 - overlap, "slots+gather+bmm+relu+sum+topk")
        )  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------------------
# tile sweeps (attention, indexer scoring, MoE): each config vs the default config of the same run
# ------------------------------------------------------------------------------------------------


def bench_attention_sweep(ceil: dict[str, float], quick: bool) -> list[Row]:
    from sgl_kernel_v4.triton.attention import sparse_attention

    rows = []
    g = torch.Generator(device=DEV).manual_seed(2)
    pool = torch.randn(1 << 20, D, device=DEV, dtype=torch.bfloat16, generator=g)
    sinks = torch.randn(H, device=DEV, generator=_G())
    for T in (1, 32, 4096):
        q, pos, pages, pg, ent = _attention_case(T, TOPK, g, pool, pool)
        out = torch.empty_like(q)

        def run(q=q, pos=pos, pages=pages, pg=pg, ent=ent, o=out, **kw):
            return sparse_attention(
                q, pool, pages, pos, WINDOW, sinks, D**-0.5, pool, ent, None, **pg, out=o, **kw
            )

        ref = run().clone()
        for bh in (16, 32, 64):
            for bn in (16, 32, 64):
                if bh * bn > 2048:
                    continue
                fn = lambda run=run, bh=bh, bn=bn: run(block_h=bh, block_n=bn)  # noqa: E731
                try:
                    err = _rel(fn(), ref)
                    K = WINDOW + TOPK
                    rows.append(
                        _row("attn_sweep", f"T={T} bh={bh} bn={bn}", fn, run, T * K * (D * 2 + 8), 4.0 * T * H * K * D, ceil, err, "default cfg")
                    )  # fmt: skip
                except Exception as e:  # noqa: BLE001
                    print(
                        f"  attn_sweep T={T} bh={bh} bn={bn}: {type(e).__name__}: {str(e)[:200]}", flush=True
                    )
    return rows


def bench_moe_sweep(ceil: dict[str, float], quick: bool) -> list[Row]:
    from sgl_kernel_v4.triton.moe import fused_moe

    rows = []
    g = torch.Generator(device=DEV).manual_seed(3)
    wgu = torch.randn(N_EXPERTS, 2 * MOE_I, HIDDEN, device=DEV, dtype=torch.bfloat16, generator=g) * 0.02
    wd = torch.randn(N_EXPERTS, HIDDEN, MOE_I, device=DEV, dtype=torch.bfloat16, generator=g) * 0.02
    cfgs = [
        {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
        {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3},
        {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3},
        {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4},
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
        {"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
    ]
    for T in (1, 32, 8192):
        x = torch.randn(T, HIDDEN, device=DEV, dtype=torch.bfloat16, generator=g)
        ids = torch.rand(T, N_EXPERTS, device=DEV, generator=g).topk(MOE_K, -1).indices
        wts = torch.rand(T, MOE_K, device=DEV, generator=g)
        ref = fused_moe(x, wgu, wd, ids, wts, 10.0)
        base = lambda x=x, i=ids, w=wts: fused_moe(x, wgu, wd, i, w, 10.0)  # noqa: E731
        n_act = int(torch.unique(ids).numel())
        nbytes = n_act * 3 * MOE_I * HIDDEN * 2 + T * HIDDEN * 4
        flops = 2.0 * T * MOE_K * 3 * HIDDEN * MOE_I
        for cfg in cfgs:
            if T >= 1024 and cfg["BLOCK_M"] == 16:
                continue
            if T < 1024 and cfg["BLOCK_M"] > 16:
                continue
            fn = lambda x=x, i=ids, w=wts, c=cfg: fused_moe(x, wgu, wd, i, w, 10.0, config=c)  # noqa: E731
            try:
                err = _rel(fn(), ref)
                name = f"T={T} M{cfg['BLOCK_M']} N{cfg['BLOCK_N']} K{cfg['BLOCK_K']} w{cfg['num_warps']} s{cfg['num_stages']}"
                rows.append(_row("moe_sweep", name, fn, base, nbytes, flops, ceil, err, "default cfg"))
            except Exception as e:  # noqa: BLE001
                print(f"  moe_sweep {cfg}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    return rows


# ------------------------------------------------------------------------------------------------
# compressor, rope family, norm, mHC, MoE: fused kernel vs the unfused torch reference ops
# ------------------------------------------------------------------------------------------------


def _cos_sin(T: int, r: int = ROPE) -> tuple[torch.Tensor, torch.Tensor]:
    pos = torch.randint(0, 100000, (T, 1), device=DEV, generator=_G()).float()
    ang = pos * 10000.0 ** (-torch.arange(0, r, 2, device=DEV).float() / r)
    return ang.cos(), ang.sin()


def bench_compressor(ceil: dict[str, float], quick: bool) -> list[Row]:
    from sgl_kernel_v4.ref.compressor import compress_and_insert as ref
    from sgl_kernel_v4.triton.compressor import compress_and_insert

    rows = []
    cases = [
        ("CSA main", 8, 512, [1, 32, 128, 2048]),
        ("CSA indexer", 8, 128, [1, 32, 128, 2048]),
        ("HCA", 128, 512, [1, 32, 64]),
    ]
    for name, L, d, Ws in cases:
        for W in Ws if not quick else Ws[:1] + Ws[-1:]:
            kv = torch.randn(W, L, d, device=DEV, dtype=torch.bfloat16, generator=_G())
            score = torch.randn(W, L, d, device=DEV, generator=_G())
            w = torch.rand(d, device=DEV, generator=_G()) + 0.5
            cos, sin = _cos_sin(W)
            pool = torch.zeros(4 * W + 8, d, device=DEV, dtype=torch.bfloat16)
            idx = torch.randperm(4 * W + 8, device=DEV, generator=_G())[:W]
            out = torch.empty(W, d, device=DEV, dtype=torch.bfloat16)
            fused = lambda kv=kv, s=score, w=w, c=cos, si=sin, p=pool, i=idx, o=out: compress_and_insert(  # noqa: E731
                kv, s, w, c, si, p, i, 1e-6, out=o
            )
            base = lambda kv=kv, s=score, w=w, c=cos, si=sin, p=pool, i=idx: ref(kv, s, w, c, si, p, i, 1e-6)  # noqa: E731
            err = _rel(fused(), base())
            nbytes = W * L * d * (2 + 4) + 2 * W * d * 2
            rows.append(_row("compress_and_insert", f"{name} W={W} L={L} d={d}", fused, base, nbytes, 0.0, ceil, err, "ref: softmax,mul,sum,rms,rope,index_put"))  # fmt: skip
    return rows


def bench_rope(ceil: dict[str, float], quick: bool) -> list[Row]:
    import sgl_kernel_v4.ref.norm as rn
    import sgl_kernel_v4.ref.rope as rr
    from sgl_kernel_v4.triton.norm import rms_norm
    from sgl_kernel_v4.triton.rope import FP8_GROUP, inv_rope_quant, qnorm_rope_kv_insert

    def torch_inv_rope_fp8(
        o: torch.Tensor, c: torch.Tensor, s: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y = rr.apply_rope(o, c, -s).float()
        T_, H_, D_ = y.shape
        g = y.view(T_, H_, D_ // FP8_GROUP, FP8_GROUP)
        sc = g.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448.0
        return (g / sc).to(torch.float8_e4m3fn).view(T_, H_, D_), sc.squeeze(-1)

    rows = []
    Ts = [1, 32, 128, 8192] if not quick else [1, 8192]
    for T in Ts:
        o = torch.randn(T, H, D, device=DEV, dtype=torch.bfloat16, generator=_G())
        cos, sin = _cos_sin(T)
        out = torch.empty_like(o)
        f = lambda o=o, c=cos, s=sin, u=out: inv_rope_quant(o, c, s, False, out=u)  # noqa: E731
        b = lambda o=o, c=cos, s=sin: rr.inv_rope_quant(o, c, s, False)  # noqa: E731
        rows.append(_row("inv_rope(bf16)", f"T={T} H={H} D={D}", f, b, T * H * D * 4.0, 0.0, ceil, _rel(f(), b()), "ref: split,float,stack,cat"))  # fmt: skip
        f8 = lambda o=o, c=cos, s=sin: inv_rope_quant(o, c, s, True)  # noqa: E731
        b8 = lambda o=o, c=cos, s=sin: torch_inv_rope_fp8(o, c, s)  # noqa: E731
        qa, sa = f8()
        qb, sb = b8()
        err = _rel(
            qa.float() * sa.repeat_interleave(FP8_GROUP, -1), qb.float() * sb.repeat_interleave(FP8_GROUP, -1)
        )
        rows.append(_row("inv_rope_quant(fp8)", f"T={T} H={H} D={D}", f8, b8, T * H * D * 3.0 + T * H * 16, 0.0, ceil, err, "ref rope + torch amax/div/cast"))  # fmt: skip
        kv = torch.randn(T, D, device=DEV, dtype=torch.bfloat16, generator=_G())
        w = torch.rand(D, device=DEV, generator=_G()) + 0.5
        pool = torch.zeros(T + 64, D, device=DEV, dtype=torch.bfloat16)
        idx = torch.arange(T, device=DEV)
        qo, ko = torch.empty_like(o), torch.empty_like(kv)
        fq = lambda o=o, kv=kv, w=w, c=cos, s=sin, p=pool, i=idx, qo=qo, ko=ko: qnorm_rope_kv_insert(  # noqa: E731
            o, kv, w, c, s, p, i, 1e-6, q_out=qo, kv_out=ko
        )
        bq = lambda o=o, kv=kv, w=w, c=cos, s=sin, p=pool, i=idx: rr.qnorm_rope_kv_insert(
            o, kv, w, c, s, p, i, 1e-6
        )  # noqa: E731
        err = max(_rel(fq()[0], bq()[0]), _rel(fq()[1], bq()[1]))
        rows.append(_row("qnorm_rope_kv_insert", f"T={T} H={H} D={D}", fq, bq, T * (H + 1) * D * 4.0 + T * D * 2, 0.0, ceil, err, "ref: rms(q),rope(q),rms(kv),rope(kv),index_put"))  # fmt: skip
        x = torch.randn(T, HIDDEN, device=DEV, dtype=torch.bfloat16, generator=_G())
        wn = torch.rand(HIDDEN, device=DEV, generator=_G())
        fo = torch.empty_like(x)
        fr = lambda x=x, u=fo, wn=wn: rms_norm(x, wn, 1e-6, out=u)  # noqa: E731
        br = lambda x=x, wn=wn: rn.rms_norm(x, wn, 1e-6)  # noqa: E731
        rows.append(_row("rms_norm", f"T={T} D={HIDDEN}", fr, br, T * HIDDEN * 4.0, 0.0, ceil, _rel(fr(), br()), "ref: float,pow,mean,rsqrt,mul"))  # fmt: skip
    return rows


def bench_mhc(ceil: dict[str, float], quick: bool) -> list[Row]:
    import sgl_kernel_v4.ref.mhc as rm
    from sgl_kernel_v4.triton.mhc import hc_post, hc_pre

    rows = []
    n = HC
    fn = torch.randn((2 + n) * n, n * HIDDEN, device=DEV, generator=_G()) * (n * HIDDEN) ** -0.5
    base = torch.randn((2 + n) * n, device=DEV, generator=_G()) * 0.5
    scale = torch.rand(3, device=DEV, generator=_G()) + 0.5
    for T in [1, 8, 32, 128, 8192] if not quick else [1, 8192]:
        x = torch.randn(T, n, HIDDEN, device=DEV, dtype=torch.bfloat16, generator=_G())
        f = lambda x=x: hc_pre(x, fn, base, scale, 20, 1e-6, 1e-6)  # noqa: E731
        b = lambda x=x: rm.hc_pre(x, fn, base, scale, 20, 1e-6, 1e-6)  # noqa: E731
        a1, b1 = f(), b()
        err = max(_rel(a1[0], b1[0]), _rel(a1[2], b1[2]))
        nbytes = T * n * HIDDEN * 2 * 2 + fn.numel() * 4 + T * HIDDEN * 2
        rows.append(_row("hc_pre", f"T={T} n={n} D={HIDDEN} sinkhorn=20", f, b, nbytes, 2.0 * T * n * HIDDEN * 24, ceil, err, "ref: rms,linear,sigmoid,softmax,40 sinkhorn ops,sum"))  # fmt: skip
        o = torch.randn(T, HIDDEN, device=DEV, dtype=torch.bfloat16, generator=_G())
        post, comb = a1[1], a1[2]
        out = torch.empty_like(x)
        fp = lambda o=o, x=x, p=post, c=comb, u=out: hc_post(o, x, p, c, out=u)  # noqa: E731
        bp = lambda o=o, x=x, p=post, c=comb: rm.hc_post(o, x, p, c)  # noqa: E731
        rows.append(_row("hc_post", f"T={T} n={n} D={HIDDEN}", fp, bp, T * HIDDEN * 2 * (2 * n + 1), 0.0, ceil, _rel(fp(), bp()), "ref: mul + matmul(combT, res)"))  # fmt: skip
    return rows


def bench_moe(ceil: dict[str, float], quick: bool) -> list[Row]:
    from sgl_kernel_v4.ref.moe import fused_moe as ref
    from sgl_kernel_v4.triton.moe import fused_moe

    rows = []
    g = torch.Generator(device=DEV).manual_seed(4)
    wgu = torch.randn(N_EXPERTS, 2 * MOE_I, HIDDEN, device=DEV, dtype=torch.bfloat16, generator=g) * 0.02
    wd = torch.randn(N_EXPERTS, HIDDEN, MOE_I, device=DEV, dtype=torch.bfloat16, generator=g) * 0.02
    for T in [1, 8, 32, 128, 1024, 8192] if not quick else [1, 8192]:
        x = torch.randn(T, HIDDEN, device=DEV, dtype=torch.bfloat16, generator=g)
        ids = torch.rand(T, N_EXPERTS, device=DEV, generator=g).topk(MOE_K, -1).indices
        wts = torch.rand(T, MOE_K, device=DEV, generator=g)
        f = lambda x=x, i=ids, w=wts: fused_moe(x, wgu, wd, i, w, 10.0)  # noqa: E731
        b = lambda x=x, i=ids, w=wts: ref(x, wgu, wd, i, w, 10.0)  # noqa: E731
        n_act = int(torch.unique(ids).numel())
        nbytes = n_act * 3 * MOE_I * HIDDEN * 2 + T * HIDDEN * 4
        flops = 2.0 * T * MOE_K * 3 * HIDDEN * MOE_I
        rows.append(_row("fused_moe", f"T={T} E={N_EXPERTS} k={MOE_K} D={HIDDEN} I={MOE_I} active={n_act}", f, b, nbytes, flops, ceil, _rel(f(), b()), "ref: per-expert loop of F.linear"))  # fmt: skip
        if T * MOE_K <= 4096:
            from sgl_kernel_v4.triton.moe import _align, _align_torch

            fa = lambda i=ids: _align(i, N_EXPERTS, 16)
            ba = lambda i=ids: _align_torch(i, N_EXPERTS, 16)
            same = float(not (torch.equal(fa()[0], ba()[0]) and torch.equal(fa()[1], ba()[1])))
            rows.append(_row("moe_align", f"T={T} k={MOE_K} E={N_EXPERTS}", fa, ba, 0.0, 0.0, ceil, same, "torch align (~25 ops)"))  # fmt: skip
    return rows


BENCHES: dict[str, Callable[[dict[str, float], bool], list[Row]]] = {
    "attention": bench_attention,
    "indexer": bench_indexer,
    "compressor": bench_compressor,
    "rope": bench_rope,
    "mhc": bench_mhc,
    "moe": bench_moe,
    "attn_sweep": bench_attention_sweep,
    "moe_sweep": bench_moe_sweep,
}


def measure_ceilings() -> dict[str, float]:
    """Copy bandwidth (read + write bytes) and bf16 GEMM 8192^3 rate on random data, medians."""
    import triton.testing as tt

    n = 1 << 30  # 1 GiB
    a = torch.empty(n, dtype=torch.uint8, device=DEV).random_()
    b = torch.empty_like(a)
    t_copy = tt.do_bench(lambda: b.copy_(a), warmup=20, rep=200, return_mode="median")
    m = 8192
    x = torch.randn(m, m, device=DEV, dtype=torch.bfloat16, generator=_G())
    y = torch.randn(m, m, device=DEV, dtype=torch.bfloat16, generator=_G())
    t_mm = tt.do_bench(lambda: x @ y, warmup=50, rep=300, return_mode="median")
    torch.cuda.empty_cache()
    return {
        "copy_gbps": 2 * n / (t_copy * 1e-3) / 1e9,
        "copy_ms": t_copy,
        "bf16_tflops": 2 * m**3 / (t_mm * 1e-3) / 1e12,
        "gemm_ms": t_mm,
    }


def run(only: list[str] | None, quick: bool, ceil: dict[str, float] | None = None) -> dict[str, Any]:
    """Run the selected benchmarks; returns ``{"ceilings": ..., "rows": [...], "errors": {...}}``."""
    if ceil is None:
        ceil = measure_ceilings()
    rows: list[Row] = []
    errors: dict[str, str] = {}
    for name, fn in BENCHES.items():
        if only and name not in only:
            continue
        print(f"[bench] {name}", flush=True)
        try:
            rows.extend(fn(ceil, quick))
        except Exception as e:  # noqa: BLE001 - one broken kernel must not hide the others
            import traceback

            traceback.print_exc()
            errors[name] = f"{type(e).__name__}: {e}"
        torch.cuda.empty_cache()
    return {"ceilings": ceil, "rows": rows, "errors": errors}


def to_markdown(res: dict[str, Any]) -> str:
    """Markdown table of a :func:`run` result."""
    c = res["ceilings"]
    lines = [
        f"Ceilings (same run): copy {c['copy_gbps']:.0f} GB/s (read+write), bf16 GEMM 8192^3 {c['bf16_tflops']:.0f} TFLOP/s",
        "",
        "| kernel | shape | triton µs (graph) | torch µs (graph) | speedup | triton µs (eager) | torch µs (eager) | GB/s | % copy BW | TFLOP/s | % GEMM | check | baseline |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def us(v: float | None) -> str:
        return "n/a" if v is None else f"{v * 1e3:.1f}"

    for r in res["rows"]:
        err = r["rel_err_vs_torch"]
        lines.append(
            f"| {r['kernel']} | {r['shape']} | {us(r['triton_ms_graph'])} | {us(r['torch_ms_graph'])} | "
            f"{r['speedup']:.2f}x | {us(r['triton_ms_eager'])} | {us(r['torch_ms_eager'])} | {r['gbps']:.0f} | "
            f"{r['frac_bw'] * 100:.1f} | {r['tflops']:.1f} | {r['frac_gemm'] * 100:.1f} | "
            f"{'n/a' if err is None or (isinstance(err, float) and math.isnan(err)) else f'{err:.1e}'} | {r['baseline']} |"
        )
    for k, v in res["errors"].items():
        lines.append(f"\nBENCH ERROR {k}: {v}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma list of " + ",".join(BENCHES))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    res = run([s for s in args.only.split(",") if s] or None, args.quick)
    print(to_markdown(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()

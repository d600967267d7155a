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


def torch_sparse_attention(
    q: torch.Tensor, sources: list[tuple[torch.Tensor, torch.Tensor]], sinks: torch.Tensor, scale: float
) -> torch.Tensor:
    """Unfused torch: gather keys, bmm, mask, sink column, fp32 softmax, bmm (HF eager attention)."""
    ks, ms = [], []
    for kv, idx in sources:
        ks.append(kv[idx.clamp(min=0)])
        ms.append(idx >= 0)
    k = torch.cat(ks, 1)  # [T, K, D]
    m = torch.cat(ms, 1)
    logits = torch.bmm(q, k.transpose(1, 2)).float() * scale  # [T, H, K]
    logits = logits.masked_fill(~m[:, None, :], float("-inf"))
    T, Hq, _ = q.shape
    logits = torch.cat([logits, sinks.view(1, Hq, 1).expand(T, Hq, 1)], -1)
    p = torch.softmax(logits, -1)[..., :-1].to(q.dtype)
    return torch.bmm(p, k)


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
    sinks = torch.randn(H, device=DEV)
    scale = D**-0.5
    for T, k1 in shapes:
        q = torch.randn(T, H, D, device=DEV, dtype=torch.bfloat16, generator=g)
        idx0 = torch.randint(0, pool_rows, (T, WINDOW), device=DEV, generator=g)
        idx1 = torch.randint(0, pool_rows // 4, (T, k1), device=DEV, generator=g)
        sources = [(kv_win, idx0), (kv_cmp, idx1)]
        out = torch.empty_like(q)
        fused = lambda q=q, s=sources, o=out: sparse_attention(q, s, sinks, scale, out=o)  # noqa: E731
        base = lambda q=q, s=sources: torch_sparse_attention(q, s, sinks, scale)  # noqa: E731
        err = _rel(fused(), base())
        K = WINDOW + k1
        nbytes = T * H * D * 2 * 2 + T * K * (D * 2 + 8)
        flops = 4.0 * T * H * K * D
        rows.append(
            _row("sparse_attention", f"T={T} H={H} D={D} K={WINDOW}+{k1}", fused, base, nbytes, flops, ceil, err, "gather+bmm+softmax+bmm")
        )  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------------------
# indexer
# ------------------------------------------------------------------------------------------------


def torch_indexer_topk(
    q: torch.Tensor, w: torch.Tensor, kv: torch.Tensor, cand: torch.Tensor, topk: int, scale: float
) -> torch.Tensor:
    """Unfused torch (HF scorer): gather, matmul in fp32, relu, head-weighted sum, mask, topk."""
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
    # full indexer: scoring + top-k
    shapes = [(1, 262144), (1, 65536), (8, 65536), (32, 16384), (128, 8192), (2048, 2048)]
    if quick:
        shapes = [(1, 262144), (32, 16384)]
    n_pool = 300000
    kv = torch.randn(n_pool, DI, device=DEV, dtype=torch.bfloat16, generator=g)
    for T, C in shapes:
        q = torch.randn(T, HI, DI, device=DEV, dtype=torch.bfloat16, generator=g)
        w = torch.randn(T, HI, device=DEV, generator=g) * HI**-0.5
        cand = torch.randint(0, n_pool, (T, C), device=DEV, generator=g)
        out = torch.empty(T, TOPK, dtype=torch.int64, device=DEV)
        scale = DI**-0.5
        fused = lambda q=q, w=w, c=cand, o=out, s=scale: indexer_topk(q, w, kv, c, TOPK, s, out=o)  # noqa: E731
        base = lambda q=q, w=w, c=cand, s=scale: torch_indexer_topk(q, w, kv, c, TOPK, s)  # noqa: E731
        # agreement: fraction of the torch top-k set that the kernel also selected
        a, b = fused().sort(1).values, base().sort(1).values
        overlap = sum(len(set(a[i].tolist()) & set(b[i].tolist())) for i in range(min(T, 16))) / (
            min(T, 16) * TOPK
        )
        nbytes = T * C * (DI * 2 + 8) + T * HI * DI * 2
        flops = 2.0 * T * HI * C * DI
        rows.append(
            _row("indexer_topk", f"T={T} C={C} Hi={HI} di={DI} k={TOPK}", fused, base, nbytes, flops, ceil, 1.0 - overlap, "gather+bmm+relu+sum+topk")
        )  # fmt: skip
    return rows


BENCHES: dict[str, Callable[[dict[str, float], bool], list[Row]]] = {
    "attention": bench_attention,
    "indexer": bench_indexer,
}


def measure_ceilings() -> dict[str, float]:
    """Copy bandwidth (read + write bytes) and bf16 GEMM 8192^3 rate on random data, medians."""
    import triton.testing as tt

    n = 1 << 30  # 1 GiB
    a = torch.empty(n, dtype=torch.uint8, device=DEV).random_()
    b = torch.empty_like(a)
    t_copy = tt.do_bench(lambda: b.copy_(a), warmup=20, rep=200, return_mode="median")
    m = 8192
    x = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
    y = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
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

"""Kernel timings of the FP8 / FP4 device benchmark (``bench_quant.py``): the FP8 block-scaled
linear (both variants) and the FP4 MoE against bf16 and the copy-bandwidth roofline, and a tile
sweep of the decode kernels. Each function appends its rows to the ``results`` dict it is given
(``results["ceilings"]["copy_tbps"]``, when present, sets the rooflines).

Calls up to 2048 tokens are timed as CUDA-graph replays (decode-sized ones of back-to-back calls on
rotating weight copies: no launch gaps, no L2 reuse across calls), so the host's launch overhead
(tens of microseconds per Triton launch from Python) does not hide the kernels; larger calls
eagerly between CUDA events; on the CPU (dry run) by wall time.
"""

from __future__ import annotations

import functools
import gc
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from timing import cuda_ms

#: V4-Flash FP8 projections: name -> (groups, N per group, K).
FLASH_LINEARS = {
    "q_a": (1, 1024, 4096),
    "q_b": (1, 32768, 1024),
    "kv": (1, 512, 4096),
    "o_a (8 groups)": (8, 1024, 4096),
    "o_b": (1, 4096, 8192),
    "indexer q_b": (1, 8192, 1024),
    "shared gate/up": (1, 2048, 4096),
    "shared down": (1, 4096, 2048),
}


def sync() -> None:
    """Wait for the GPU (no-op without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def free_memory() -> None:
    """Collect garbage and return cached GPU memory between phases."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def time_calls(fns: list, device: str, graph: bool, reps: int = 10) -> float:
    """Median ms per call of ``fns`` run back to back (each a call on its own weight copy).

    CUDA with ``graph``: the calls captured in one graph, replayed ``reps`` times (CUDA events);
    CUDA without: eager calls between events; CPU: wall time."""
    for f in fns:
        f()
    sync()
    if device != "cuda":
        ts = []
        for _ in range(max(1, reps // 3)):
            t = time.perf_counter()
            for f in fns:
                f()
            ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts) / len(fns)
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for f in fns:
                f()
        g.replay()
        sync()
        ms = statistics.median(cuda_ms(g.replay, reps, warm=1))
        del g
        return ms / len(fns)

    def all_calls() -> None:
        for f in fns:
            f()

    return statistics.median(cuda_ms(all_calls, max(3, reps // 2), warm=1)) / len(fns)


def copy_bw(results: dict) -> float | None:
    """Measured copy bandwidth in bytes/s (``results["ceilings"]``), or None."""
    c = results.get("ceilings")
    return c["copy_tbps"] * 1e12 if c else None


def _fp8_weight(n: int, k: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    w = (torch.randn(n, k, device=device) * 16).to(torch.float8_e4m3fn)
    s = torch.full((-(-n // 128), -(-k // 128)), 1.0 / (16 * k**0.5), device=device)
    return w, s


def bench_fp8_gemm(
    results: dict,
    device: str,
    shapes: dict,
    tokens: list[int],
    dtype: torch.dtype,
    extra: dict[str, list[int]] | None = None,
) -> None:
    """FP8 linear rows; ``extra``: more token counts for some shapes (where w8a16 / w8a8 cross)."""
    from sgl_kernel_v4 import ops
    from sgl_kernel_v4.ref.fp8_gemm import dequant_fp8_block

    if device == "cuda":
        from sgl_kernel_v4.triton.fp8_gemm import choose_variant, fp8_linear
    else:
        from sgl_kernel_v4.ref.fp8_gemm import fp8_linear

        def choose_variant(t: int) -> str:
            return "w8a16"

    rows = results.setdefault("fp8_gemm", [])
    bw = copy_bw(results)
    gemm = (results.get("ceilings") or {}).get("gemm_tflops")
    for name, (G, N, K) in shapes.items():
        w_bytes = G * N * K + 4 * (-(-G * N // 128)) * (-(-K // 128))
        copies = max(1, min(16, -(-(256 << 20) // w_bytes))) if device == "cuda" else 1
        ws = [_fp8_weight(G * N, K, device) for _ in range(copies)]
        wb = [dequant_fp8_block(w, s).to(dtype) for w, s in ws]
        for T in sorted(set(tokens) | set((extra or {}).get(name, []))):
            graph = device == "cuda" and T <= 2048
            n_calls = copies if T <= 128 else 1
            x = (
                torch.randn(T, G, K, device=device).to(dtype)
                if G > 1
                else torch.randn(T, K, device=device).to(dtype)
            )
            row: dict[str, Any] = {"shape": name, "T": T, "G": G, "N": N, "K": K, "auto": choose_variant(T)}

            if G > 1:
                bf16 = [
                    functools.partial(torch.einsum, "tgk,gnk->tgn", x, wb[i].view(G, N, K))
                    for i in range(n_calls)
                ]
            else:
                bf16 = [functools.partial(F.linear, x, wb[i]) for i in range(n_calls)]
            row["bf16_ms"] = time_calls(bf16, device, graph)
            for v in ("w8a16", "w8a8"):
                if device != "cuda" and v == "w8a8" and T > 64:
                    continue
                fns = [functools.partial(fp8_linear, x, ws[i][0], ws[i][1], v) for i in range(n_calls)]
                row[f"{v}_ms"] = time_calls(fns, device, graph)
            if device != "cuda":
                ops.fp8_linear(x, ws[0][0], ws[0][1])  # the dispatching wrapper runs too
            act = T * G * K * x.element_size() + T * G * N * x.element_size()
            row["fp8_bytes"] = w_bytes + act + (2 * T * G * K + 4 * T * G * (-(-K // 128)) if T > 64 else 0)
            row["bf16_bytes"] = 2 * G * N * K + act
            best = min(row.get("w8a16_ms", 1e9), row.get("w8a8_ms", 1e9))
            row["best_fp8_ms"] = best
            row["fp8_speedup_vs_bf16"] = round(row["bf16_ms"] / best, 2)
            if bw:
                row["fp8_roofline_ms"] = row["fp8_bytes"] / bw * 1e3
                row["bf16_roofline_ms"] = row["bf16_bytes"] / bw * 1e3
                row["fp8_x_roofline"] = round(best / row["fp8_roofline_ms"], 2)
                row["bf16_x_roofline"] = round(row["bf16_ms"] / row["bf16_roofline_ms"], 2)
            flops = 2.0 * T * G * N * K
            row["fp8_tflops"] = round(flops / (best * 1e-3) / 1e12, 1)
            if gemm and T >= 1024:
                row["fp8_fraction_of_bf16_gemm_rate"] = round(row["fp8_tflops"] / gemm, 2)
            fp8_peak = (results.get("ceilings") or {}).get("fp8_gemm_tflops")
            if fp8_peak and T >= 1024 and "w8a8_ms" in row:
                row["w8a8_fraction_of_fp8_rate"] = round(flops / (row["w8a8_ms"] * 1e-3) / 1e12 / fp8_peak, 2)
            rows.append({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()})
        del ws, wb
        free_memory()


def bench_moe_fp4(
    results: dict, device: str, cases: list[tuple[int, int, int, int]], tokens: list[int], dtype
) -> None:
    """``cases``: (E, D, I, k). bf16 baseline only when its weights are small enough to hold."""
    from sgl_kernel_v4 import ops
    from sgl_kernel_v4.ref.moe_fp4 import dequant_fp4

    rows = results.setdefault("moe_fp4", [])
    bw = copy_bw(results)
    for E, D, I, k in cases:  # noqa: E741
        g = torch.Generator(device=device).manual_seed(E)
        w13 = torch.randint(0, 256, (E, 2 * I, D // 2), dtype=torch.uint8, device=device, generator=g)
        w2 = torch.randint(0, 256, (E, D, I // 2), dtype=torch.uint8, device=device, generator=g)
        s13 = torch.full((E, 2 * I, D // 32), 127 - 8, dtype=torch.uint8, device=device)
        s2 = torch.full((E, D, I // 32), 127 - 8, dtype=torch.uint8, device=device)
        bf16_ok = E * 3 * I * D * 2 <= (4 << 30)
        if bf16_ok:
            wgu = torch.cat([dequant_fp4(w13[e : e + 1], s13[e : e + 1], dtype) for e in range(E)])
            wd = torch.cat([dequant_fp4(w2[e : e + 1], s2[e : e + 1], dtype) for e in range(E)])
        per_expert = 3 * I * D * (0.5 + 1 / 32)
        for T in tokens:
            x = torch.randn(T, D, device=device).to(dtype)
            ids = (
                torch.stack([torch.randperm(E, device=device)[:k] for _ in range(T)])
                if T <= 256
                else (torch.rand(T, E, device=device).argsort(dim=1)[:, :k])
            )
            wts = torch.rand(T, k, device=device)
            graph = device == "cuda" and T <= 2048
            row: dict[str, Any] = {"E": E, "D": D, "I": I, "k": k, "T": T}
            if device == "cuda":
                from sgl_kernel_v4.triton.moe_fp4 import _config as moe_config

                c = moe_config(T * k, E, k, x.element_size())
                row["layout"] = (
                    f"{'pair' if c['PAIR'] else 'expert'} {c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']}"
                )
            fp4 = functools.partial(ops.fused_moe_fp4, x, w13, s13, w2, s2, ids, wts, 10.0)
            row["fp4_ms"] = time_calls([fp4], device, graph)
            if bf16_ok:
                bf16 = functools.partial(ops.fused_moe, x, wgu, wd, ids, wts, 10.0)
                row["bf16_ms"] = time_calls([bf16], device, graph)
                row["fp4_speedup_vs_bf16"] = round(row["bf16_ms"] / row["fp4_ms"], 2)
            touched = E * (1 - (1 - k / E) ** T)
            row["experts_touched"] = round(touched, 1)
            row["fp4_bytes"] = int(touched * per_expert + 2 * T * D * 2)
            if bw:
                row["fp4_roofline_ms"] = row["fp4_bytes"] / bw * 1e3
                row["fp4_x_roofline"] = round(row["fp4_ms"] / row["fp4_roofline_ms"], 2)
                if bf16_ok:
                    row["bf16_roofline_ms"] = (touched * 3 * I * D * 2 + 2 * T * D * 2) / bw * 1e3
                    row["bf16_x_roofline"] = round(row["bf16_ms"] / row["bf16_roofline_ms"], 2)
            rows.append({kk: (round(v, 4) if isinstance(v, float) else v) for kk, v in row.items()})
        del w13, w2, s13, s2
        if bf16_ok:
            del wgu, wd
        free_memory()


def sweep(results: dict, device: str, dtype: torch.dtype, quick: bool = False) -> None:
    """Tile sweep (data for the config tables): the weight-only FP8 GEMM at decode shapes (tile
    width, split-K, stages), the w8a8 GEMM at a prefill shape, and the FP4 MoE in pair mode (bs 1)
    and expert mode (bs 32); ms per call for each config, best first, next to the default's."""
    from sgl_kernel_v4 import ops

    if device == "cuda":
        from sgl_kernel_v4.triton.fp8_gemm import fp8_linear
        from sgl_kernel_v4.triton.moe_fp4 import fused_moe_fp4
    else:
        from sgl_kernel_v4.ref.fp8_gemm import fp8_linear as ref_linear
        from sgl_kernel_v4.ref.moe_fp4 import fused_moe_fp4 as ref_moe

        def fp8_linear(x, w, s, v=None, config=None):  # noqa: ARG001 - the dry run ignores tiles
            return ref_linear(x, w, s, v)

        def fused_moe_fp4(*a, config=None):  # noqa: ARG001
            return ref_moe(*a)

    cuda = device == "cuda"
    out = results.setdefault("sweep", {})

    def run(key: str, make, cands: list[dict], default) -> None:
        res = []
        for cfg in cands if cuda else cands[:2]:
            try:
                res.append({"config": cfg, "ms": round(time_calls([make(cfg)], device, cuda), 4)})
            except Exception as e:  # noqa: BLE001 - e.g. out of shared memory: skip the config
                res.append({"config": cfg, "error": repr(e)[:200]})
        res.sort(key=lambda r: r.get("ms", 1e9))
        out[key] = res[:6]
        out[f"{key} default_ms"] = round(time_calls([default], device, cuda), 4)

    gemm_shapes = (
        [("q_a", 1, 1024, 4096, 1), ("kv", 1, 512, 4096, 1), ("o_b", 1, 4096, 8192, 1), ("shared down", 1, 4096, 2048, 32)]
        if cuda else [("q_a-like", 1, 64, 256, 1)]
    )  # fmt: skip
    if quick:
        gemm_shapes = gemm_shapes[:2]
    for name, G, N, K, T in gemm_shapes:
        w, s = _fp8_weight(G * N, K, device)
        x = (torch.randn(T, G, K, device=device) if G > 1 else torch.randn(T, K, device=device)).to(dtype)
        bm = 16 if T <= 16 else 32
        grid = ((64,), (1, 8, 16), (6,)) if quick else ((64, 128), (1, 4, 8, 16), (3, 6))
        cands = [
            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": sk, "num_warps": 4 if bn == 64 else 8,
             "num_stages": st}
            for bn in grid[0] for sk in grid[1] for st in grid[2] if sk <= K // 256
        ]  # fmt: skip
        run(f"w8a16 {name} T={T}", lambda c, x=x, w=w, s=s: functools.partial(fp8_linear, x, w, s, "w8a16", config=c),
            cands, functools.partial(fp8_linear, x, w, s, "w8a16"))  # fmt: skip
        del w, s
    T, N, K = (8192, 4096, 8192) if cuda else (96, 64, 256)
    w, s = _fp8_weight(N, K, device)
    x = torch.randn(T, K, device=device).to(dtype)
    cands = [
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": nw, "num_stages": st}
        for bm, bn, nw in ((128, 128, 8), (128, 128, 4), (64, 128, 4), (128, 64, 4)) for st in (3, 4)
    ][: 2 if quick else None]  # fmt: skip
    run(f"w8a8 o_b T={T}", lambda c, x=x, w=w, s=s: functools.partial(fp8_linear, x, w, s, "w8a8", config=c), cands,
        functools.partial(fp8_linear, x, w, s, "w8a8"))  # fmt: skip
    del w, s, x
    E, D, I, k = (32, 4096, 2048, 6) if cuda else (8, 128, 64, 2)  # noqa: E741
    w13 = torch.randint(0, 256, (E, 2 * I, D // 2), dtype=torch.uint8, device=device)
    w2 = torch.randint(0, 256, (E, D, I // 2), dtype=torch.uint8, device=device)
    s13 = torch.full((E, 2 * I, D // 32), 119, dtype=torch.uint8, device=device)
    s2 = torch.full((E, D, I // 32), 119, dtype=torch.uint8, device=device)
    mcands = {
        1: [{"BLOCK_M": 16, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": 4, "num_stages": st, "PAIR": 1,
             "DOWN_STAGES": ds} for bn in (64, 128) for bk in (128, 256) for st, ds in ((3, 6), (4, 8))],
        32: [{"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": 4, "num_stages": 4, "PAIR": 0,
              "DOWN_STAGES": 4} for bm in (16, 32) for bn in (64, 128) for bk in (64, 128)],
    }  # fmt: skip
    if quick:
        mcands = {t: c[::2] for t, c in mcands.items()}
    for T in (1, 32):
        x = torch.randn(T, D, device=device).to(dtype)
        ids = torch.rand(T, E, device=device).argsort(dim=1)[:, :k]
        wts = torch.rand(T, k, device=device)
        args = (x, w13, s13, w2, s2, ids, wts, 10.0)
        run(f"moe_fp4 E={E} T={T}", lambda c, a=args: functools.partial(fused_moe_fp4, *a, config=c), mcands[T],
            functools.partial(ops.fused_moe_fp4, *args))  # fmt: skip
    del w13, w2, s13, s2
    free_memory()

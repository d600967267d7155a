"""Where the fused indexer top-k spends its time at long context (one decode row, bs 1).

Builds the inputs of ``benchmark/longctx.py``'s top-k phase (64 heads x 128 dims, bf16 keys in
64-entry pages, top-512) for each candidate count, then:

* the median time of the whole call under a CUDA graph (``triton.testing.do_bench_cudagraph``);
* each kernel's mean device time over 20 eager calls (``torch.profiler``);
* the selection's shape: entries above the threshold bin and the size of the threshold bin's
  candidate list (the work of the single-program final pass).

Usage: ``python3 benchmark/indexer_topk_profile.py --out DIR [--contexts 65536,262144]``; writes
``DIR/indexer_topk_profile.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from typing import Any

import torch

TOPK = 512


def _keys(C: int, fmt: str, gen: torch.Generator) -> Any:
    """``C`` indexer keys of 128 dims in 64-entry pages: a bf16 tensor, or the runtime's fp4 pool view
    (e2m1 + ue8m0 per 32, 68 B per key, as ``--enable-fp4-indexer`` stores them)."""
    n_pages = C // 64 + 1
    if fmt == "bf16":
        return torch.randn(n_pages * 64, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    mc = ModelConfig.from_dict(get_preset("tiny"))
    spec = build_kv_layout(mc, "fp8_e4m3", fmt == "fp4", 256).kinds[KVKind.CSA_INDEXER]
    pool = KVRowsView(spec.allocate(n_pages, "cuda")[0], spec.entry, out_dtype=torch.float32)
    idx = torch.arange(len(pool), device="cuda")
    pool[idx] = torch.randn(len(pool), 128, device="cuda", generator=gen)
    return pool


def hist_bins(C: int = 262144) -> dict[str, float]:
    """The histogram pass alone over ``C`` keys (one row, the served grid) with 2^8 and 2^12 bins:
    microseconds per call under a CUDA graph."""
    import triton.testing as tt
    from sgl_kernel_v4.triton.indexer_select import _hist_kernel, splits

    keys = torch.randn(1, C, device="cuda").view(torch.int32)
    vis = torch.full((1,), C, dtype=torch.int64, device="cuda")
    nss = splits(1, keys.device)
    res = {}
    for hb in (8, 12):
        hist = torch.zeros(1, 1 << hb, dtype=torch.int32, device="cuda")

        def run(hb: int = hb, hist: torch.Tensor = hist) -> None:
            _hist_kernel[(1, nss)](keys, keys.stride(0), vis, 0, hist, nss, 512, BLOCK=1024, STEP=256, HB=hb,
                                   SHORT=True, num_warps=4)  # fmt: skip

        res[f"hb{hb}_us"] = float(tt.do_bench_cudagraph(run, rep=50, return_mode="median")) * 1e3
    return res


def profile(
    C: int, fmt: str = "bf16", block_c: int = 64, kernel: str = "decode", calls: int = 20
) -> dict[str, Any]:
    """One candidate count: timings by kernel and the selection shape (CUDA only). ``kernel``: the
    scoring kernel of a one-token-per-program batch, ``decode`` (``indexer_score``) or ``general``."""
    import sgl_kernel_v4.triton.indexer as ix
    import triton.testing as tt

    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    Hi, di, e = 64, 128, 64
    n_pages = C // e + 1
    kv = _keys(C, fmt, g)
    req_to_page = torch.randperm(n_pages, device=dev, generator=g)[None, : C // e].int()
    rows = torch.zeros(1, dtype=torch.int64, device=dev)
    vis = torch.full((1,), C, dtype=torch.int64, device=dev)
    q = torch.randn(1, Hi, di, device=dev, dtype=torch.bfloat16, generator=g)
    w = torch.randn(1, Hi, device=dev, generator=g) * Hi**-0.5
    o = torch.empty(1, TOPK, dtype=torch.int64, device=dev)

    captured: list[Any] = []
    orig = ix._Workspace

    class Spy(orig):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            captured.append(self)

    def fused() -> torch.Tensor:
        return ix.indexer_topk(
            q, w, kv, vis, req_to_page, rows, rows, e, TOPK, di**-0.5, max_visible=C, out=o, block_c=block_c
        )

    ix._Workspace = Spy
    ix.DECODE_SCORE_KERNEL = kernel == "decode"
    try:
        fused()
        torch.cuda.synchronize()
        ws = captured[-1]
        n_sure, n_tie = (int(v) for v in ws.cnt[0].tolist())
        ix._Workspace = orig
        graph_ms = float(tt.do_bench_cudagraph(fused, rep=100, return_mode="median"))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fused()
            torch.cuda.synchronize()
        sel = sorted(o[0].tolist())
    finally:
        ix._Workspace = orig
        ix.DECODE_SCORE_KERNEL = True
    per: dict[str, float] = defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name] += ev.device_time_total / calls
    return {"selection": sel, "candidates": C, "keys": fmt, "block_c": block_c, "kernel": kernel, "graph_us": graph_ms * 1e3, "kernels_us": dict(per), "above": n_sure,
            "tie_bin": n_tie}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--contexts", default="65536,262144")
    ap.add_argument("--keys", default="bf16", help="comma list of key formats: bf16, fp8, fp4")
    ap.add_argument("--block-c", default="64", help="comma list of scoring tile widths")
    ap.add_argument(
        "--hist-bins", action="store_true", help="also time the histogram pass at 2^8 / 2^12 bins"
    )
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    from sgl_kernel_v4.triton.indexer_score import DECODE_SCORE_CONFIG

    res = []
    for c in a.contexts.split(","):
        for fmt in a.keys.split(","):
            for bc in a.block_c.split(","):
                for kern in a.kernels.split(","):
                    for st in a.stages.split(",") if a.stages and kern == "decode" else [""]:
                        if st:
                            DECODE_SCORE_CONFIG["num_stages"] = int(st)
                        r = profile(int(c), fmt, int(bc), kern)
                        r["stages"] = DECODE_SCORE_CONFIG["num_stages"] if kern == "decode" else None
                        same = [
                            x
                            for x in res
                            if (x["candidates"], x["keys"], x["block_c"]) == (int(c), fmt, int(bc))
                        ]
                        if same:  # the selection of the first kernel timed on these inputs
                            r["same_selection_as_first"] = (
                                len(set(r["selection"]) & set(same[0]["selection"])) / TOPK
                            )
                        res.append(r)
    hb = hist_bins() if a.hist_bins else {}
    with open(os.path.join(a.out, "indexer_topk_profile.json"), "w") as f:
        json.dump({"profiles": res, "hist_bins": hb}, f, indent=1)
    if hb:
        print("histogram pass alone, 262,144 keys: " + ", ".join(f"{k} {v:.1f}" for k, v in hb.items()))
    for r in res:
        print(f"\n### {r['candidates']} {r['keys']} keys, block_c {r['block_c']}, {r['kernel']} scoring (stages {r['stages']}): {r['graph_us']:.1f} us per call (CUDA graph); "
              f"{r['above']} above the threshold bin, {r['tie_bin']} in it; selection agreement with the first kernel {r.get('same_selection_as_first', 1.0):.3f}")  # fmt: skip
        print("| kernel | us per call |\n|---|---:|")
        for k, v in sorted(r["kernels_us"].items(), key=lambda kv: -kv[1]):
            print(f"| `{k[:60]}` | {v:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

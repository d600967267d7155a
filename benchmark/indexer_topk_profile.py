"""Where the fused indexer top-k spends its time at long context (one decode row, bs 1).

Builds the inputs of ``benchmark/longctx.py``'s top-k phase (64 heads x 128 dims, bf16 keys in
64-entry pages, top-512) for each candidate count, then:

* the median time of the whole call under a CUDA graph (``triton.testing.do_bench_cudagraph``);
* each kernel's mean device time over 20 eager calls (``torch.profiler``);
* the selection's shape: entries above the threshold bin and the size of the threshold bin's
  candidate list (the work of the single-program final pass);
* per selection implementation (``select_impl`` of ``indexer_topk``: ``fused``, ``radix``,
  ``bitsearch`` the earlier bit-by-bit final), in the same run, and whether its output equals the
  first implementation's (``same``).

``--distinct N`` draws the keys from ``N`` distinct rows (equal scores: a threshold bin of about
``C / N`` candidates with ties across the boundary, the selection's hard case); 0 (default): every
key drawn independently.

Usage: ``python3 benchmark/indexer_topk_profile.py --out DIR [--contexts 65536,262144]
[--impls fused,radix,bitsearch] [--distinct N]``; writes ``DIR/indexer_topk_profile.json`` and prints a markdown
table per context and implementation.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from typing import Any

import torch

TOPK = 512


def profile(C: int, impl: str = "fused", calls: int = 20, distinct: int = 0) -> dict[str, Any]:
    """One candidate count and selection implementation: timings by kernel, the selection shape
    and the output (CUDA only; the inputs depend on ``C`` only)."""
    import sgl_kernel_v4.triton.indexer as ix
    import triton.testing as tt

    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    Hi, di, e = 64, 128, 64
    n_pages = -(-C // e) + 1  # (a context need not be a multiple of the page size)
    kv = torch.randn(n_pages * e, di, device=dev, dtype=torch.bfloat16, generator=g)
    if distinct > 0:
        kv = kv[:distinct][torch.randint(0, distinct, (n_pages * e,), device=dev, generator=g)]
    req_to_page = torch.randperm(n_pages, device=dev, generator=g)[None, : n_pages - 1].int()
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
            q, w, kv, vis, req_to_page, rows, rows, e, TOPK, di**-0.5, max_visible=C, out=o, select_impl=impl
        )

    ix._Workspace = Spy
    try:
        fused()
        torch.cuda.synchronize()
        ws = captured[-1]
        n_sure, n_tie = (int(v) for v in ws.cnt[0, :2].tolist())
        selected = o.clone().cpu()
    finally:
        ix._Workspace = orig
    graph_ms = float(tt.do_bench_cudagraph(fused, rep=100, return_mode="median"))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fused()
        torch.cuda.synchronize()
    per: dict[str, float] = defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name] += ev.device_time_total / calls
    return {"candidates": C, "impl": impl, "distinct": distinct, "graph_us": graph_ms * 1e3, "kernels_us": dict(per), "above": n_sure,
            "tie_bin": n_tie, "selected": selected}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--contexts", default="65536,262144")
    ap.add_argument(
        "--impls", default="fused,radix,bitsearch", help="select_impl values, compared to the first"
    )
    ap.add_argument("--distinct", type=int, default=0, help="distinct key rows (0: all random)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    res = []
    for c in a.contexts.split(","):
        runs = [profile(int(c), impl, distinct=a.distinct) for impl in a.impls.split(",")]
        first = runs[0]["selected"]
        for r in runs:
            r["same"] = bool(torch.equal(r.pop("selected"), first))
        res += runs
    with open(os.path.join(a.out, "indexer_topk_profile.json"), "w") as f:
        json.dump(res, f, indent=1)
    for r in res:
        print(f"\n### {r['candidates']} candidates, {r['impl']}: {r['graph_us']:.1f} us per call (CUDA graph); "
              f"{r['above']} above the threshold bin, {r['tie_bin']} in it; output equal to the first: {r['same']}")  # fmt: skip
        print("| kernel | us per call |\n|---|---:|")
        for k, v in sorted(r["kernels_us"].items(), key=lambda kv: -kv[1]):
            print(f"| `{k[:60]}` | {v:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

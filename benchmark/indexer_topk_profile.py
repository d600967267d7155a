"""Where the fused indexer top-k spends its time at long context (one decode row, bs 1).

Builds the inputs of ``benchmark/longctx.py``'s top-k phase (64 heads x 128 dims, keys in 64-entry
pages, top-512) for each candidate count and key format, then for each variant:

* the median time of the whole call under a CUDA graph (``triton.testing.do_bench_cudagraph``);
* each kernel's mean device time over 20 eager calls (``torch.profiler``);
* the selection's shape: entries above the threshold bin and the size of the threshold bin's
  candidate list (the work of the selection after the histogram);
* whether its output equals the first variant's on the same inputs (``same``) and the fraction of
  selected entries they share (another scoring kernel may round a score differently in the last
  bit, which can swap near-ties at the boundary).

Variants: the scoring kernel of a one-token-per-program batch (``--kernels``: ``decode``, the
``indexer_score`` kernel, or ``general``), its pipeline depth (``--stages``), the scoring tile
(``--block-c``) and the selection implementation (``--impls``: ``select_impl`` of
``indexer_topk``: ``fused``, ``radix``, ``bitsearch`` the earlier bit-by-bit final).

``--keys``: ``bf16`` keys, or the runtime's ``fp8`` / ``fp4`` indexer pools (``fp4`` is what
``--enable-fp4-indexer`` stores). ``--distinct N`` draws the bf16 keys from ``N`` distinct rows
(equal scores: a threshold bin of about ``C / N`` candidates with ties across the boundary, the
selection's hard case). ``--hist-bins`` also times the histogram pass alone at 2^8 and 2^12 bins.

Usage: ``python3 benchmark/indexer_topk_profile.py --out DIR [--contexts 65536,262144] [--keys
bf16,fp4] [--kernels general,decode] [--stages 2,3] [--block-c 64] [--impls fused,bitsearch]
[--distinct N] [--hist-bins]``; writes ``DIR/indexer_topk_profile.json`` and prints a markdown table
per variant.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections import defaultdict
from typing import Any

import torch

TOPK = 512


def _keys(C: int, fmt: str, gen: torch.Generator, distinct: int = 0) -> Any:
    """Indexer keys of 128 dims for ``C`` entries in 64-entry pages (one spare page): a bf16 tensor,
    or the runtime's fp8 / fp4 pool view (``KVRowsView``)."""
    n_pages = -(-C // 64) + 1
    if fmt == "bf16":
        kv = torch.randn(n_pages * 64, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        if distinct > 0:
            kv = kv[:distinct][torch.randint(0, distinct, (n_pages * 64,), device="cuda", generator=gen)]
        return kv
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    mc = ModelConfig.from_dict(get_preset("tiny"))
    spec = build_kv_layout(mc, "fp8_e4m3", fmt == "fp4", 256).kinds[KVKind.CSA_INDEXER]
    pool = KVRowsView(spec.allocate(n_pages, "cuda")[0], spec.entry, out_dtype=torch.float32)
    pool[torch.arange(len(pool), device="cuda")] = torch.randn(len(pool), 128, device="cuda", generator=gen)
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


def profile(C: int, fmt: str, var: dict[str, Any], calls: int = 20, distinct: int = 0) -> dict[str, Any]:
    """One candidate count, key format and variant (``kernel``, ``stages``, ``block_c``, ``impl``):
    timings by kernel, the selection shape and the output (CUDA only; the inputs depend on ``C``,
    ``fmt`` and ``distinct`` only)."""
    import sgl_kernel_v4.triton.indexer as ix
    import triton.testing as tt
    from sgl_kernel_v4.triton.indexer_score import DECODE_SCORE_CONFIG

    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    Hi, di, e = 64, 128, 64
    n_pages = -(-C // e) + 1  # (a context need not be a multiple of the page size)
    kv = _keys(C, fmt, g, distinct)
    req_to_page = torch.randperm(n_pages, device=dev, generator=g)[None, : n_pages - 1].int()
    rows = torch.zeros(1, dtype=torch.int64, device=dev)
    vis = torch.full((1,), C, dtype=torch.int64, device=dev)
    q = torch.randn(1, Hi, di, device=dev, dtype=torch.bfloat16, generator=g)
    w = torch.randn(1, Hi, device=dev, generator=g) * Hi**-0.5
    o = torch.empty(1, TOPK, dtype=torch.int64, device=dev)

    captured: list[Any] = []
    orig, orig_cfg = ix._Workspace, dict(DECODE_SCORE_CONFIG)

    class Spy(orig):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            captured.append(self)

    def fused() -> torch.Tensor:
        return ix.indexer_topk(q, w, kv, vis, req_to_page, rows, rows, e, TOPK, di**-0.5, max_visible=C, out=o,
                               block_c=var["block_c"], select_impl=var["impl"])  # fmt: skip

    ix._Workspace = Spy
    ix.DECODE_SCORE_KERNEL = var["kernel"] == "decode"
    if var["stages"]:
        DECODE_SCORE_CONFIG["num_stages"] = var["stages"]
    if var.get("warps"):
        DECODE_SCORE_CONFIG["num_warps"] = var["warps"]
    try:
        fused()
        torch.cuda.synchronize()
        n_sure, n_tie = (int(v) for v in captured[-1].cnt[0, :2].tolist())
        selected = o.clone().cpu()
        ix._Workspace = orig
        graph_ms = float(tt.do_bench_cudagraph(fused, rep=100, return_mode="median"))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fused()
            torch.cuda.synchronize()
    finally:
        ix._Workspace = orig
        ix.DECODE_SCORE_KERNEL = True
        DECODE_SCORE_CONFIG.update(orig_cfg)
    per: dict[str, float] = defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name] += ev.device_time_total / calls
    return {"candidates": C, "keys": fmt, "distinct": distinct, **var, "graph_us": graph_ms * 1e3,
            "kernels_us": dict(per), "above": n_sure, "tie_bin": n_tie, "selected": selected}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--contexts", default="65536,262144")
    ap.add_argument("--keys", default="bf16", help="comma list of key formats: bf16, fp8, fp4")
    ap.add_argument("--kernels", default="decode", help="scoring kernels: decode, general")
    ap.add_argument(
        "--stages", default="", help="comma list of the decode kernel's num_stages (default: its config)"
    )
    ap.add_argument("--block-c", default="64", help="comma list of scoring tile widths")
    ap.add_argument(
        "--warps", default="", help="comma list of the decode kernel's num_warps (default: its config)"
    )
    ap.add_argument("--impls", default="fused", help="select_impl values: fused, radix, bitsearch")
    ap.add_argument("--distinct", type=int, default=0, help="distinct bf16 key rows (0: all random)")
    ap.add_argument(
        "--hist-bins", action="store_true", help="also time the histogram pass at 2^8 / 2^12 bins"
    )
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    variants = []
    for kern, bc, impl in itertools.product(a.kernels.split(","), a.block_c.split(","), a.impls.split(",")):
        for st in a.stages.split(",") if (a.stages and kern == "decode") else [""]:
            for wp in a.warps.split(",") if (a.warps and kern == "decode") else [""]:
                variants.append({"kernel": kern, "stages": int(st) if st else None, "block_c": int(bc),
                                 "impl": impl, "warps": int(wp) if wp else None})  # fmt: skip
    res = []
    for c, fmt in itertools.product(a.contexts.split(","), a.keys.split(",")):
        runs = [profile(int(c), fmt, v, distinct=a.distinct) for v in variants]
        first = runs[0]["selected"]
        for r in runs:
            sel = r.pop("selected")
            r["same"] = bool(torch.equal(sel, first))
            r["shared"] = len(set(sel[0].tolist()) & set(first[0].tolist())) / TOPK
        res += runs
    hb = hist_bins() if a.hist_bins else {}
    with open(os.path.join(a.out, "indexer_topk_profile.json"), "w") as f:
        json.dump({"profiles": res, "hist_bins": hb}, f, indent=1)
    if hb:
        print("histogram pass alone, 262,144 keys: " + ", ".join(f"{k} {v:.1f}" for k, v in hb.items()))
    for r in res:
        print(f"\n### {r['candidates']} {r['keys']} keys: {r['kernel']} scoring (stages {r['stages']}, warps {r['warps']}, "
              f"block_c {r['block_c']}), {r['impl']} selection: {r['graph_us']:.1f} us per call (CUDA graph); "
              f"{r['above']} above the threshold bin, {r['tie_bin']} in it; same output as the first: "
              f"{r['same']} ({r['shared']:.3f} shared)")  # fmt: skip
        print("| kernel | us per call |\n|---|---:|")
        for k, v in sorted(r["kernels_us"].items(), key=lambda kv: -kv[1]):
            print(f"| `{k[:60]}` | {v:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

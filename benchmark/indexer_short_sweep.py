"""Indexer top-k at decode across context lengths: the short-row path against the pipeline before it.

For decode batches of ``bs`` tokens (one per request) that each see ``n`` compressed entries, the
fused indexer (``sgl_kernel_v4.triton.indexer.indexer_topk``: scoring + histogram + filter +
final) runs twice in the same process,

* ``old``: ``short_rows=False`` (every row through the histogram path, host memsets), and
* ``new``: ``short_rows=True`` (rows of at most ``topk`` entries answered without scores nor
  histogram; finer histogram shares; zeroing in the scoring pass),

each with the scratch bound ``max_visible`` equal to ``n`` (an eager call) and to ``--bound`` (a
CUDA graph captured for a longer context: the grids are sized by the bound, the work by ``n``).
Every case is replayed from a CUDA graph holding ``--calls`` calls; the time per call is the
median over ``--reps`` (>= 20) replays divided by ``--calls``. The two outputs must be equal
(``same`` column: the selection is exact, so any difference is a bug).

Shapes (V4 CSA indexer, ``flash`` presets): 64 heads x 128, top-512, 64 entries per page
(256-token pages, ratio 4); keys bf16 or the fp8 indexer pool format (``--keys``).

Usage:
    GPU:  ``python benchmark/indexer_short_sweep.py --out DIR`` (about a minute on an H200)
    CPU:  ``python benchmark/indexer_short_sweep.py --dry --out DIR`` (tiny shapes under
          ``TRITON_INTERPRET=1``, eager timing; checks the plumbing and the old/new equality)

Writes ``DIR/indexer_short_sweep.md`` and ``DIR/indexer_short_sweep.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import graph_us  # noqa: E402

GPU_SHAPES = dict(heads=64, di=128, topk=512, e=64, bs=(1, 16), ctx=(256, 2048, 32768, 262144), bound=262144)
DRY_SHAPES = dict(heads=4, di=16, topk=16, e=8, bs=(1, 2), ctx=(8, 40), bound=64)


def _keys(n_rows: int, di: int, kind: str, dev: str, gen: torch.Generator) -> Any:
    """A pool of ``n_rows`` indexer keys: a bf16 / fp32 tensor, or the fp8 indexer row view."""
    if kind != "fp8":
        dtype = torch.float32 if dev == "cpu" else torch.bfloat16
        return torch.randn(n_rows, di, device=dev, generator=gen).to(dtype)
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    spec = build_kv_layout(ModelConfig.from_dict(get_preset("flash-8l-32e")), "fp8_e4m3", False, 256)
    spec = spec.kinds[KVKind.CSA_INDEXER]
    st = spec.allocate(-(-n_rows // 64) + 1, dev)[0]
    pool = KVRowsView(st, spec.entry, out_dtype=torch.float32)
    if len(pool) < n_rows or di != spec.entry.dim:
        raise ValueError(f"--keys fp8: a pool of {len(pool)} keys of {spec.entry.dim}, need {n_rows} of {di}")
    idx = torch.arange(len(pool), device=dev)
    pool[idx] = torch.randn(len(pool), di, device=dev, generator=gen)
    return pool


def _case(bs: int, n: int, sh: dict, kind: str, dev: str, gen: torch.Generator) -> dict:
    """Inputs of ``bs`` requests of one token each seeing ``n`` entries in random pages."""
    e, bound = sh["e"], max(sh["bound"], n)
    n_pages = -(-bound // e) + 8
    P = -(-bound // e)
    r2p = torch.stack([torch.randperm(n_pages, device=dev, generator=gen)[:P] for _ in range(bs)]).int()
    q = torch.randn(bs, sh["heads"], sh["di"], device=dev, generator=gen)
    return dict(
        q=q if dev == "cpu" else q.to(torch.bfloat16),
        w=torch.randn(bs, sh["heads"], device=dev, generator=gen) * sh["heads"] ** -0.5,
        kv=_keys(n_pages * e, sh["di"], kind, dev, gen),
        visible=torch.full((bs,), n, dtype=torch.int64, device=dev),
        req_to_page=r2p,
        req_rows=torch.arange(bs, device=dev),
        token_req=torch.arange(bs, device=dev),
    )


def _call(c: dict, sh: dict, bound: int, short: bool, out: torch.Tensor) -> Callable[[], Any]:
    from sgl_kernel_v4.triton.indexer import indexer_topk

    def fn() -> torch.Tensor:
        return indexer_topk(c["q"], c["w"], c["kv"], c["visible"], c["req_to_page"], c["req_rows"], c["token_req"],
                            sh["e"], sh["topk"], sh["di"] ** -0.5, max_visible=bound, out=out,
                            short_rows=short)  # fmt: skip

    return fn


def _graph_us(fn: Callable[[], Any], calls: int, reps: int) -> float:
    """Median µs per call over ``reps`` replays of a CUDA graph of ``calls`` calls of ``fn``."""
    return graph_us([fn] * calls, reps)


def _eager_us(fn: Callable[[], Any], calls: int, reps: int) -> float:
    """Median µs per call, eager (the ``--dry`` interpreter run)."""
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) * 1e6 / calls)
    return statistics.median(times)


def run(args: argparse.Namespace) -> list[dict]:
    """Every ``(bs, n, bound)`` case, old and new; rows of the report."""
    dry = args.dry
    sh = DRY_SHAPES if dry else GPU_SHAPES
    dev = "cpu" if dry else "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    timer = _eager_us if dry else _graph_us
    calls, reps = (1, 1) if dry else (args.calls, args.reps)
    rows = []
    for bs in sh["bs"]:
        for n in sh["ctx"]:
            c = _case(bs, n, sh, args.keys, dev, gen)
            for bound in sorted({n, max(n, sh["bound"])}):
                res, outs = {}, {}
                for name, short in (("old", False), ("new", True)):
                    outs[name] = torch.empty(bs, sh["topk"], dtype=torch.int64, device=dev)
                    fn = _call(c, sh, bound, short, outs[name])
                    fn()
                    res[name] = timer(fn, calls, reps)
                same = bool(torch.equal(outs["old"], outs["new"]))
                rows.append(dict(bs=bs, n=n, bound=bound, old_us=res["old"], new_us=res["new"], same=same,
                                 speedup=res["old"] / res["new"]))  # fmt: skip
                print(f"bs={bs:3d} n={n:7d} bound={bound:7d} old {res['old']:9.1f} us  new {res['new']:9.1f} us  "
                      f"x{res['old'] / res['new']:.2f} same={same}", flush=True)  # fmt: skip
    return rows


def report(rows: list[dict], args: argparse.Namespace, device: str) -> str:
    """Markdown table of ``rows``."""
    sh = DRY_SHAPES if args.dry else GPU_SHAPES
    how = (
        "eager, interpreter"
        if args.dry
        else f"CUDA graph of {args.calls} calls, median of {args.reps} replays"
    )
    lines = [
        "# Indexer top-k: short-row path (new) vs the histogram path for every row (old)",
        "",
        f"Device: {device}. Heads {sh['heads']} x {sh['di']}, top-{sh['topk']}, {sh['e']} entries per page, "
        f"keys {args.keys}. Time per call ({how}).",
        "",
        "| bs | entries seen | max_visible | old µs | new µs | old / new | same output |",
        "|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in rows:
        lines.append(f"| {r['bs']} | {r['n']} | {r['bound']} | {r['old_us']:.1f} | {r['new_us']:.1f} | "
                     f"{r['speedup']:.2f} | {'yes' if r['same'] else 'NO'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the sweep, write the md + json; 1 if an old/new output differs."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="directory for indexer_short_sweep.{md,json}")
    p.add_argument("--dry", action="store_true", help="CPU, tiny shapes, TRITON_INTERPRET=1")
    p.add_argument("--keys", choices=("bf16", "fp8"), default="bf16", help="indexer key pool format")
    p.add_argument("--calls", type=int, default=20, help="calls per captured graph")
    p.add_argument("--reps", type=int, default=25, help="graph replays timed (>= 20)")
    args = p.parse_args(argv)
    if args.reps < 20 and not args.dry:
        raise ValueError(f"--reps: at least 20 replays, got {args.reps}")
    if args.dry:
        os.environ["TRITON_INTERPRET"] = "1"  # before the first triton import
    elif not torch.cuda.is_available():
        raise ValueError("--dry: needed without a CUDA device")
    device = "cpu (TRITON_INTERPRET=1)" if args.dry else torch.cuda.get_device_name()
    t0 = time.time()
    rows = run(args)
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, "indexer_short_sweep")
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(report(rows, args, device))
    with open(base + ".json", "w", encoding="utf-8") as f:
        json.dump(dict(device=device, keys=args.keys, dry=args.dry, calls=args.calls, reps=args.reps,
                       seconds=time.time() - t0, rows=rows), f, indent=1)  # fmt: skip
    print(f"wrote {base}.md / .json ({time.time() - t0:.0f} s)")
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

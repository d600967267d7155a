"""mHC pre / post kernels: the decode path against the legacy path, per batch size.

For each token count ``T`` (decode batch sizes and a prefill chunk) this times, in one run,

* ``hc_pre`` with the block's RMSNorm fused (``norm_weight``), ``path="legacy"`` (the kernels
  before the decode path existed) and ``path="auto"`` (what serving uses: the decode path for
  ``T <= DECODE_MAX_T``), and
* ``hc_post`` (``out=`` given, as the model calls it), ``path="legacy"`` and ``path="auto"``,

each captured in a CUDA graph as one call on each of several distinct input sets (enough bytes
that, as in a 43-layer forward, the projection weights are not all in L2), the graph replayed
``--reps`` times; reported: the median µs per call, the speed-up, the per-step cost of the two
pre and two post calls of each of 43 layers, and the largest absolute difference of the new
outputs from the legacy ones (collapse, post, comb; hc_post output).

Usage:
    GPU:  ``python benchmark/mhc_sweep.py --out DIR`` (n = 4, D = 4096, T in 1, 8, 16, 32, 2048;
          DIR/mhc_sweep.md and DIR/mhc_sweep.json).
    CPU:  ``python benchmark/mhc_sweep.py --dry --out DIR`` (Triton interpreter, tiny shapes, one
          timed call each: checks the script and the paths run, the µs mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import graph_us  # noqa: E402

LAYERS = 43  # DeepSeek-V4: two hc_pre and two hc_post per layer
GPU_TS = (1, 8, 16, 32, 2048)
DRY_TS = (1, 3, 40)


def _inputs(T: int, n: int, D: int, dtype: torch.dtype, dev: str, seed: int) -> dict[str, torch.Tensor]:
    """One input set: streams ``x [T, n, D]``, projection / base / scale, norm weight, block output."""
    g = torch.Generator().manual_seed(seed)
    nm = (2 + n) * n
    return {
        "x": torch.randn(T, n, D, generator=g).to(dtype).to(dev),
        "fn": (torch.randn(nm, n * D, generator=g) * (n * D) ** -0.5).to(dev),
        "base": (torch.randn(nm, generator=g) * 0.5).to(dev),
        "scale": (torch.rand(3, generator=g) + 0.5).to(dev),
        "w": (torch.rand(D, generator=g) + 0.5).to(dev),
        "o": torch.randn(T, D, generator=g).to(dtype).to(dev),
    }


def _time_cpu(calls: list[Callable[[], Any]]) -> float:
    """µs of one pass over ``calls`` per call (interpreter: only checks that they run)."""
    t0 = time.perf_counter()
    for c in calls:
        c()
    return (time.perf_counter() - t0) * 1e6 / len(calls)


def _maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def sweep_one(T: int, n: int, D: int, dry: bool, reps: int) -> dict[str, Any]:
    """The timings and differences of one token count ``T`` (see the module docstring)."""
    from sgl_kernel_v4.triton.mhc import hc_post, hc_pre

    dev, dtype = ("cpu", torch.float32) if dry else ("cuda", torch.bfloat16)
    iters, eps, neps, weps = 20, 1e-6, 1e-6, 1e-6
    set_bytes = (2 + n) * n * n * D * 4 + T * n * D * 2 * 3
    n_sets = 1 if dry else max(2, min(48, -(-(96 << 20) // set_bytes)))
    sets = [_inputs(T, n, D, dtype, dev, seed) for seed in range(n_sets)]
    outs = [torch.empty_like(s["x"]) for s in sets]

    def pre(s: dict[str, torch.Tensor], path: str) -> tuple[torch.Tensor, ...]:
        return hc_pre(s["x"], s["fn"], s["base"], s["scale"], iters, eps, neps,
                      norm_weight=s["w"], norm_weight_eps=weps, path=path)  # fmt: skip

    s0 = sets[0]
    old_c, old_p, old_m = pre(s0, "legacy")
    new_c, new_p, new_m = pre(s0, "auto")
    old_y = hc_post(s0["o"], s0["x"], old_p, old_m, path="legacy")
    new_y = hc_post(s0["o"], s0["x"], old_p, old_m, path="auto")
    row: dict[str, Any] = {
        "T": T,
        "n": n,
        "D": D,
        "dtype": str(dtype).replace("torch.", ""),
        "input_sets": n_sets,
        "maxdiff_collapsed": _maxdiff(new_c, old_c),
        "maxdiff_post": _maxdiff(new_p, old_p),
        "maxdiff_comb": _maxdiff(new_m, old_m),
        "maxdiff_hc_post": _maxdiff(new_y, old_y),
    }
    pcs = [pre(s, "auto")[1:] for s in sets]  # post / comb inputs of hc_post, per set
    for path, key in (("legacy", "old"), ("auto", "new")):
        pre_calls = [lambda s=s, p=path: pre(s, p) for s in sets]
        post_calls = [
            lambda s=s, u=u, pc=pc, p=path: hc_post(s["o"], s["x"], pc[0], pc[1], out=u, path=p)
            for s, u, pc in zip(sets, outs, pcs)
        ]
        row[f"pre_us_{key}"] = _time_cpu(pre_calls) if dry else graph_us(pre_calls, reps)
        row[f"post_us_{key}"] = _time_cpu(post_calls) if dry else graph_us(post_calls, reps)
    for key in ("old", "new"):
        row[f"step_us_{key}"] = LAYERS * 2 * (row[f"pre_us_{key}"] + row[f"post_us_{key}"])
    return row


def _markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# mHC pre / post: decode path vs legacy",
        "",
        f"device: {meta['device']}; {meta['mode']}; median of {meta['reps']} CUDA-graph replays"
        if not meta["dry"]
        else f"device: {meta['device']}; {meta['mode']} (timings meaningless)",
        "",
        'hc_pre with the fused RMSNorm; `old` = `path="legacy"`, `new` = `path="auto"`; '
        f"step = {LAYERS} layers x 2 x (pre + post).",
        "",
        "| T | n | D | pre µs old | pre µs new | pre x | post µs old | post µs new | post x | "
        "step µs old | step µs new | max abs Δ collapsed | max abs Δ post | max abs Δ comb | max abs Δ hc_post |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['T']} | {r['n']} | {r['D']} | {r['pre_us_old']:.1f} | {r['pre_us_new']:.1f} | "
            f"{r['pre_us_old'] / r['pre_us_new']:.2f} | {r['post_us_old']:.1f} | {r['post_us_new']:.1f} | "
            f"{r['post_us_old'] / r['post_us_new']:.2f} | {r['step_us_old']:.0f} | {r['step_us_new']:.0f} | "
            f"{r['maxdiff_collapsed']:.2e} | {r['maxdiff_post']:.2e} | {r['maxdiff_comb']:.2e} | "
            f"{r['maxdiff_hc_post']:.2e} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; writes ``mhc_sweep.md`` and ``mhc_sweep.json`` under ``--out``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dry", action="store_true", help="CPU: Triton interpreter, tiny shapes")
    ap.add_argument("--reps", type=int, default=50, help="CUDA-graph replays per timing (>= 20)")
    ap.add_argument("--tokens", type=int, nargs="*", help="token counts (default: GPU 1 8 16 32 2048)")
    args = ap.parse_args(argv)
    if args.reps < 20:
        raise ValueError(f"--reps: need >= 20, got {args.reps}")
    if args.dry:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (sweep_one imports it)
        if "triton" in sys.modules:
            raise RuntimeError("--dry: triton was imported before TRITON_INTERPRET could be set")
    elif not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: run with --dry for the CPU check")
    n, D = (4, 64) if args.dry else (4, 4096)
    ts = args.tokens or (DRY_TS if args.dry else GPU_TS)
    rows = []
    for T in ts:
        rows.append(sweep_one(T, n, D, args.dry, args.reps))
        print(json.dumps(rows[-1]), flush=True)
    meta = {
        "device": "cpu (TRITON_INTERPRET=1)" if args.dry else torch.cuda.get_device_name(),
        "mode": "dry" if args.dry else "gpu",
        "dry": args.dry,
        "reps": args.reps,
        "torch": torch.__version__,
    }
    os.makedirs(args.out, exist_ok=True)
    md = _markdown(rows, meta)
    with open(os.path.join(args.out, "mhc_sweep.md"), "w", encoding="utf-8") as f:
        f.write(md)
    with open(os.path.join(args.out, "mhc_sweep.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Serving test matrix: concurrency x input length x output length, with knee and cliff detection.

The DeepSeek-V4 deployment guides ask for a matrix rather than one number: for every
(input length, output length) pair, sweep the batch size (client concurrency) and find

* the **knee**: the last concurrency worth having, i.e. the step after which one more doubling of
  concurrency buys less than ``--knee-threshold`` (default 10%) more output throughput. The gain per
  doubling between steps ``c0 -> c1`` with throughputs ``t0 -> t1`` is
  ``(t1 / t0) ** (1 / log2(c1 / c0)) - 1`` (so 1 -> 8 is three doublings);
* the **cliff**: the first step where p99 TTFT or p99 TPOT is more than ``--cliff-factor`` (default
  2x) the previous step's, or where any request failed (an error answer, a dropped connection,
  an out-of-memory abort). Along the input-length axis (fixed concurrency and output length) the
  cliff is a failure or a p99 TPOT jump (TTFT is expected to grow with the prompt there).

Each cell is one ``sglang_v4.bench_serving`` run against an already running server
(``--max-concurrency bs``, ``--num-prompts bs * --prompts-per-concurrency``, all requests at t=0).
Outputs in ``--out-dir``: ``matrix.csv``, ``runs.jsonl`` (bench_serving's result lines),
``throughput_vs_concurrency.png``, ``p99_latency_vs_input.png``, ``summary.md``.

Usage (GPU default matrix; a scaled-down CPU run)::

    python benchmark/matrix.py --base-url http://127.0.0.1:30000 --out-dir benchmark/results/matrix
    python benchmark/matrix.py --base-url http://127.0.0.1:30000 --preset cpu --out-dir /tmp/m
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_v4 import bench_serving as bs

PRESETS: dict[str, dict[str, list[int]]] = {
    "default": {"batch_sizes": [1, 8, 32], "input_lens": [1024, 10240, 102400], "output_lens": [128, 512]},
    "cpu": {"batch_sizes": [1, 2, 4], "input_lens": [64, 256, 1024], "output_lens": [8, 16]},
}

#: CSV columns, in order. Latencies in ms, throughputs per second.
COLUMNS = [
    "input_len",
    "output_len",
    "concurrency",
    "num_prompts",
    "completed",
    "failed",
    "duration_s",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "p99_itl_ms",
    "p99_e2e_latency_ms",
    "measured_concurrency",
    "error",
]

OOM_MARKERS = ("out of memory", "oom", "not enough memory", "kv cache is full")


# ----------------------------------------------------------------------------------------------
# Knee and cliff (pure functions)
# ----------------------------------------------------------------------------------------------


def gain_per_doubling(c0: float, t0: float, c1: float, t1: float) -> float:
    """Relative throughput gain per doubling of concurrency between two steps.

    ``(t1 / t0) ** (1 / log2(c1 / c0)) - 1``; ``inf`` if ``t0 <= 0 < t1``, ``-1`` if ``t1 <= 0``.
    Raises ``ValueError`` unless ``0 < c0 < c1``.
    """
    if not 0 < c0 < c1:
        raise ValueError(f"concurrency steps must satisfy 0 < c0 < c1 (got {c0}, {c1})")
    if t1 <= 0:
        return -1.0
    if t0 <= 0:
        return math.inf
    return (t1 / t0) ** (1.0 / math.log2(c1 / c0)) - 1.0


@dataclass
class Knee:
    """``concurrency``: the last step worth having; ``next_concurrency``: the step that gained only
    ``gain_per_doubling`` (a fraction) per doubling over it."""

    concurrency: float
    next_concurrency: float
    gain_per_doubling: float


@dataclass
class Cliff:
    """The first step ``x`` (after ``prev_x``) where latency jumped or requests failed."""

    x: float
    prev_x: float | None
    reason: str
    ratio: float | None


def find_knee(
    concurrencies: Sequence[float], throughputs: Sequence[float], threshold: float = 0.10
) -> Knee | None:
    """First step whose gain per doubling over the previous one is below ``threshold``.

    Inputs are parallel lists (any order; sorted by concurrency here). Returns ``None`` when
    throughput keeps scaling over the whole sweep (no knee inside it) or with fewer than 2 points.
    Raises ``ValueError`` on mismatched lengths or repeated concurrencies.
    """
    if len(concurrencies) != len(throughputs):
        raise ValueError("concurrencies and throughputs must have the same length")
    pts = sorted(zip(concurrencies, throughputs))
    if len({c for c, _ in pts}) != len(pts):
        raise ValueError("concurrencies must be distinct")
    for (c0, t0), (c1, t1) in zip(pts, pts[1:]):
        g = gain_per_doubling(c0, t0, c1, t1)
        if g < threshold:
            return Knee(c0, c1, g)
    return None


def find_cliff(
    xs: Sequence[float],
    p99_ttft: Sequence[float] | None,
    p99_tpot: Sequence[float] | None,
    failed: Sequence[int],
    factor: float = 2.0,
) -> Cliff | None:
    """First step (in increasing ``xs``) with failed requests, or whose p99 TTFT or p99 TPOT is more
    than ``factor`` times the previous step's. ``p99_ttft``/``p99_tpot`` may be ``None`` to ignore
    that metric. Returns ``None`` if there is no such step. Raises ``ValueError`` on mismatched
    lengths."""
    n = len(xs)
    for name, seq in (("p99_ttft", p99_ttft), ("p99_tpot", p99_tpot), ("failed", failed)):
        if seq is not None and len(seq) != n:
            raise ValueError(f"{name} must have the same length as xs")
    order = sorted(range(n), key=lambda i: xs[i])
    prev: int | None = None
    for i in order:
        if failed[i] > 0:
            return Cliff(
                xs[i], xs[prev] if prev is not None else None, f"{failed[i]} failed request(s)", None
            )
        if prev is not None:
            for name, seq in (("p99 TTFT", p99_ttft), ("p99 TPOT", p99_tpot)):
                if seq is None or seq[prev] <= 0:
                    continue
                r = seq[i] / seq[prev]
                if r > factor:
                    return Cliff(xs[i], xs[prev], f"{name} x{r:.2f} over the previous step", r)
        prev = i
    return None


def analyze(
    rows: list[dict[str, Any]],
    knee_threshold: float = 0.10,
    cliff_factor: float = 2.0,
    knee_metric: str = "output_throughput",
) -> dict[str, Any]:
    """Knee and cliff per (input, output) over concurrency, and cliff per (concurrency, output)
    over input length. ``rows`` are CSV rows (``COLUMNS``); the knee is taken on ``knee_metric``
    (``output_throughput`` or ``total_throughput``, tok/s; ``ValueError`` for another). Returns
    ``{"by_shape": {(in, out): {"knee": Knee|None, "cliff": Cliff|None}},
    "by_concurrency": {(bs, out): {"cliff": Cliff|None}}, "knee_metric": knee_metric}``."""
    if knee_metric not in ("output_throughput", "total_throughput"):
        raise ValueError(f"knee_metric must be output_throughput or total_throughput (got {knee_metric!r})")
    by_shape: dict[tuple[int, int], dict[str, Any]] = {}
    for key in sorted({(int(r["input_len"]), int(r["output_len"])) for r in rows}):
        cell = sorted(
            (r for r in rows if (int(r["input_len"]), int(r["output_len"])) == key),
            key=lambda r: r["concurrency"],
        )
        ok = [r for r in cell if int(r["failed"]) == 0 and int(r["completed"]) > 0]
        knee = find_knee([r["concurrency"] for r in ok], [float(r[knee_metric]) for r in ok], knee_threshold)
        cliff = find_cliff(
            [r["concurrency"] for r in cell],
            [float(r["p99_ttft_ms"]) for r in cell],
            [float(r["p99_tpot_ms"]) for r in cell],
            [int(r["failed"]) for r in cell],
            cliff_factor,
        )
        by_shape[key] = {"knee": knee, "cliff": cliff}
    by_conc: dict[tuple[int, int], dict[str, Any]] = {}
    for key in sorted({(int(r["concurrency"]), int(r["output_len"])) for r in rows}):
        cell = sorted(
            (r for r in rows if (int(r["concurrency"]), int(r["output_len"])) == key),
            key=lambda r: r["input_len"],
        )
        cliff = find_cliff(
            [r["input_len"] for r in cell],
            None,
            [float(r["p99_tpot_ms"]) for r in cell],
            [int(r["failed"]) for r in cell],
            cliff_factor,
        )
        by_conc[key] = {"cliff": cliff}
    return {"by_shape": by_shape, "by_concurrency": by_conc, "knee_metric": knee_metric}


# ----------------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------------


def _row_from_result(inp: int, out: int, bs_: int, n: int, res: dict[str, Any]) -> dict[str, Any]:
    errors = [e for e in res.get("errors", []) if e]
    return {
        "input_len": inp,
        "output_len": out,
        "concurrency": bs_,
        "num_prompts": n,
        "completed": res["completed"],
        "failed": res["failed"],
        "duration_s": res["duration"],
        "request_throughput": res["request_throughput"],
        "input_throughput": res["input_throughput"],
        "output_throughput": res["output_throughput"],
        "total_throughput": res["total_throughput"],
        "mean_ttft_ms": res["mean_ttft_ms"],
        "median_ttft_ms": res["median_ttft_ms"],
        "p99_ttft_ms": res["p99_ttft_ms"],
        "mean_tpot_ms": res["mean_tpot_ms"],
        "median_tpot_ms": res["median_tpot_ms"],
        "p99_tpot_ms": res["p99_tpot_ms"],
        "p99_itl_ms": res["p99_itl_ms"],
        "p99_e2e_latency_ms": res["p99_e2e_latency_ms"],
        "measured_concurrency": res["concurrency"],
        "error": _short_error(errors[0]) if errors else "",
    }


def _short_error(e: str) -> str:
    last = e.strip().splitlines()[-1] if e.strip() else ""
    tag = "OOM: " if any(m in e.lower() for m in OOM_MARKERS) else ""
    return (tag + last)[:200]


def _failed_row(inp: int, out: int, bs_: int, n: int, err: str) -> dict[str, Any]:
    row = dict.fromkeys(COLUMNS, 0.0)
    row.update(input_len=inp, output_len=out, concurrency=bs_, num_prompts=n, completed=0, failed=n)
    row["error"] = _short_error(err)
    return row


def run_matrix(
    base_url: str,
    batch_sizes: Sequence[int],
    input_lens: Sequence[int],
    output_lens: Sequence[int],
    out_dir: Path,
    backend: str = "sglang",
    prompts_per_concurrency: int = 2,
    tokenize_prompt: bool = True,
    warmup_requests: int = 1,
    flush_cache: bool = True,
    stop_after_failure: bool = True,
    seed: int = 1,
    tok: bs.BenchTokenizer | None = None,
    **bench_overrides: Any,
) -> list[dict[str, Any]]:
    """Run every cell against ``base_url``; returns the CSV rows (also written incrementally to
    ``out_dir/matrix.csv``). Requests use ``random-ids`` prompts of exactly ``input_len`` tokens
    (sent as token ids when ``tokenize_prompt``), ``ignore_eos`` and ``output_len`` new tokens.
    A cell whose run raises (server down, warm-up failed) is recorded with every request failed;
    with ``stop_after_failure`` larger concurrencies of that shape are then skipped."""
    for name, vals in (
        ("batch_sizes", batch_sizes),
        ("input_lens", input_lens),
        ("output_lens", output_lens),
    ):
        if not vals or any(v < 1 for v in vals):
            raise ValueError(f"{name} must be a non-empty list of positive integers (got {list(vals)})")
    if prompts_per_concurrency < 1:
        raise ValueError(f"prompts_per_concurrency must be >= 1 (got {prompts_per_concurrency})")
    out_dir.mkdir(parents=True, exist_ok=True)
    if tok is None:
        _, tok_path = bs.resolve_model_and_tokenizer(base_url.rstrip("/"), None, None, bs.auth_headers())
        tok = bs.get_tokenizer(tok_path)
    rows: list[dict[str, Any]] = []
    for inp in input_lens:
        for out in output_lens:
            for b in sorted(batch_sizes):
                n = b * prompts_per_concurrency
                print(f"[matrix] input={inp} output={out} concurrency={b} prompts={n}", flush=True)
                args = bs.make_args(
                    base_url=base_url,
                    backend=backend,
                    dataset_name="random-ids",
                    random_input_len=inp,
                    random_output_len=out,
                    random_range_ratio=1.0,
                    num_prompts=n,
                    max_concurrency=b,
                    tokenize_prompt=tokenize_prompt,
                    warmup_requests=warmup_requests,
                    flush_cache=flush_cache,
                    seed=seed,
                    disable_tqdm=True,
                    output_file=str(out_dir / "runs.jsonl"),
                    tag=f"matrix in={inp} out={out} bs={b}",
                    **bench_overrides,
                )
                try:
                    row = _row_from_result(inp, out, b, n, bs.run_benchmark(args, tok=tok))
                except Exception as e:  # noqa: BLE001 - a crashed/refusing server is a cliff, not a crash
                    row = _failed_row(inp, out, b, n, f"{type(e).__name__}: {e}")
                rows.append(row)
                write_csv(rows, out_dir / "matrix.csv")
                if stop_after_failure and int(row["failed"]) > 0:
                    print(f"[matrix] failures at concurrency {b}; skipping larger batches for this shape")
                    break
    return rows


# ----------------------------------------------------------------------------------------------
# Outputs
# ----------------------------------------------------------------------------------------------


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """Write ``rows`` with the ``COLUMNS`` header."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in COLUMNS})


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Read a ``matrix.csv`` back (numbers as int/float)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for r in csv.DictReader(f):
            row: dict[str, Any] = {}
            for k, v in r.items():
                if k == "error":
                    row[k] = v
                elif k in ("input_len", "output_len", "concurrency", "num_prompts", "completed", "failed"):
                    row[k] = int(float(v))
                else:
                    row[k] = float(v)
            rows.append(row)
    return rows


def plot(rows: list[dict[str, Any]], out_dir: Path, analysis: dict[str, Any] | None = None) -> list[Path]:
    """Draw ``throughput_vs_concurrency.png`` (output and total tok/s vs concurrency, one line per
    (input, output), knee marked) and ``p99_latency_vs_input.png`` (p99 TTFT and p99 TPOT vs input
    length, one line per (concurrency, output)). Returns the two paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    analysis = analysis or analyze(rows)
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for (inp, out), res in analysis["by_shape"].items():
        cell = sorted(
            (r for r in rows if (r["input_len"], r["output_len"]) == (inp, out)),
            key=lambda r: r["concurrency"],
        )
        xs = [r["concurrency"] for r in cell]
        for ax, key in zip(axes, ("output_throughput", "total_throughput")):
            (line,) = ax.plot(xs, [r[key] for r in cell], marker="o", label=f"in={inp} out={out}")
            knee = res["knee"]
            if knee is not None and key == analysis.get("knee_metric", "output_throughput"):
                y = next(r[key] for r in cell if r["concurrency"] == knee.concurrency)
                ax.plot([knee.concurrency], [y], marker="*", markersize=16, color=line.get_color())
    for ax, title in zip(axes, ("Output token throughput (tok/s)", "Total token throughput (tok/s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (batch size)")
        ax.set_title(title + "  [* = knee]")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    p = out_dir / "throughput_vs_concurrency.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for b, out in sorted({(r["concurrency"], r["output_len"]) for r in rows}):
        cell = sorted(
            (r for r in rows if (r["concurrency"], r["output_len"]) == (b, out)), key=lambda r: r["input_len"]
        )
        cell = [r for r in cell if r["completed"] > 0]
        if not cell:
            continue
        xs = [r["input_len"] for r in cell]
        axes[0].plot(xs, [r["p99_ttft_ms"] for r in cell], marker="o", label=f"bs={b} out={out}")
        axes[1].plot(xs, [r["p99_tpot_ms"] for r in cell], marker="o", label=f"bs={b} out={out}")
    for ax, title in zip(axes, ("p99 TTFT (ms)", "p99 TPOT (ms)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("input length (tokens)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    p = out_dir / "p99_latency_vs_input.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths


def _fmt_cliff(c: Cliff | None, unit: str) -> str:
    if c is None:
        return "none in sweep"
    prev = f" (after {unit}={int(c.prev_x)})" if c.prev_x is not None else ""
    return f"{unit}={int(c.x)}{prev}: {c.reason}"


def render_markdown(rows: list[dict[str, Any]], analysis: dict[str, Any], header: str = "") -> str:
    """Markdown summary: knee/cliff per shape, cliff per concurrency over input length, full table."""
    lines = [header] if header else []
    lines += [
        f"| input | output | knee on {analysis.get('knee_metric', 'output_throughput')} "
        "(last concurrency worth having) | cliff over concurrency |",
        "|---:|---:|---|---|",
    ]
    for (inp, out), res in analysis["by_shape"].items():
        k = res["knee"]
        knee = (
            f"bs={int(k.concurrency)} (to bs={int(k.next_concurrency)}: {k.gain_per_doubling * 100:+.1f}%/doubling)"
            if k
            else "none in sweep (still scaling)"
        )
        lines.append(f"| {inp} | {out} | {knee} | {_fmt_cliff(res['cliff'], 'bs')} |")
    lines += [
        "",
        "| concurrency | output | cliff over input length (failures or p99 TPOT jump) |",
        "|---:|---:|---|",
    ]
    for (b, out), res in analysis["by_concurrency"].items():
        lines.append(f"| {b} | {out} | {_fmt_cliff(res['cliff'], 'input')} |")
    lines += [
        "",
        "| input | output | bs | ok/fail | out tok/s | total tok/s | p50 TTFT ms | p99 TTFT ms "
        "| p50 TPOT ms | p99 TPOT ms | p99 ITL ms | error |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["input_len"], r["output_len"], r["concurrency"])):
        lines.append(
            f"| {r['input_len']} | {r['output_len']} | {r['concurrency']} | {r['completed']}/{r['failed']} "
            f"| {r['output_throughput']:.1f} | {r['total_throughput']:.1f} | {r['median_ttft_ms']:.1f} "
            f"| {r['p99_ttft_ms']:.1f} | {r['median_tpot_ms']:.2f} | {r['p99_tpot_ms']:.2f} "
            f"| {r['p99_itl_ms']:.2f} | {r['error'] or ''} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """CLI; returns 0 (failures are results, recorded in the outputs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--backend", default="sglang", choices=bs.BACKENDS)
    p.add_argument("--preset", default="default", choices=sorted(PRESETS))
    p.add_argument("--batch-sizes", type=int, nargs="+", default=None)
    p.add_argument("--input-lens", type=int, nargs="+", default=None)
    p.add_argument("--output-lens", type=int, nargs="+", default=None)
    p.add_argument("--prompts-per-concurrency", type=int, default=2, help="num_prompts = bs * this")
    p.add_argument("--text-prompts", action="store_true", help="Send text instead of token ids.")
    p.add_argument("--warmup-requests", type=int, default=1)
    p.add_argument("--no-flush-cache", action="store_true")
    p.add_argument("--keep-going", action="store_true", help="Run larger batches after a failing one.")
    p.add_argument("--knee-threshold", type=float, default=0.10)
    p.add_argument("--cliff-factor", type=float, default=2.0)
    p.add_argument(
        "--knee-metric",
        default="output_throughput",
        choices=["output_throughput", "total_throughput"],
        help="Throughput the knee is taken on (total suits prefill-heavy shapes).",
    )
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--title", default="")
    p.add_argument("--out-dir", type=Path, default=Path("benchmark/results/matrix"))
    p.add_argument(
        "--from-csv",
        type=Path,
        nargs="+",
        default=None,
        help="Only re-analyse/plot existing matrix.csv files (several are merged, e.g. one per call).",
    )
    a = p.parse_args(argv)
    preset = PRESETS[a.preset]
    a.out_dir.mkdir(parents=True, exist_ok=True)
    if a.from_csv:
        rows = [r for path in a.from_csv for r in read_csv(path)]
        write_csv(rows, a.out_dir / "matrix.csv")
    else:
        base_url = (a.base_url or f"http://{a.host}:{a.port}").rstrip("/")
        tok = bs.get_tokenizer(a.tokenizer) if a.tokenizer else None
        t0 = time.time()
        rows = run_matrix(
            base_url,
            a.batch_sizes or preset["batch_sizes"],
            a.input_lens or preset["input_lens"],
            a.output_lens or preset["output_lens"],
            a.out_dir,
            backend=a.backend,
            prompts_per_concurrency=a.prompts_per_concurrency,
            tokenize_prompt=not a.text_prompts and a.backend in ("sglang", "sglang-native"),
            warmup_requests=a.warmup_requests,
            flush_cache=not a.no_flush_cache,
            stop_after_failure=not a.keep_going,
            seed=a.seed,
            tok=tok,
        )
        print(f"[matrix] {len(rows)} cells in {time.time() - t0:.1f}s")
    res = analyze(rows, a.knee_threshold, a.cliff_factor, a.knee_metric)
    plot(rows, a.out_dir, res)
    cli_args = list(argv) if argv is not None else sys.argv[1:]
    header = f"### {a.title}\n" if a.title else ""
    header += f"Command: `{shlex.join(['python', 'benchmark/' + Path(__file__).name, *cli_args])}`\n"
    md = render_markdown(rows, res, header)
    (a.out_dir / "summary.md").write_text(md, encoding="utf-8")
    (a.out_dir / "analysis.json").write_text(
        json.dumps(
            {
                "by_shape": {
                    f"{k[0]}x{k[1]}": {n: (vars(v) if v else None) for n, v in d.items()}
                    for k, d in res["by_shape"].items()
                },
                "knee_metric": res["knee_metric"],
                "by_concurrency": {
                    f"bs{k[0]}xout{k[1]}": {n: (vars(v) if v else None) for n, v in d.items()}
                    for k, d in res["by_concurrency"].items()
                },
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The serving loop at device speed, in one run: serving TPOT next to the runner's step time, long
prompts, the first requests after ready, the prefix cache, overlap scheduling on and off.

Phases (each skipped when the time budget ``--budget-s`` is too short; results are rewritten after
every phase, so a cut-off run keeps what it measured):

1. ``runner``: the model runner alone (subprocess, ``model_harness.Bench``): decode ms/step at batch
   sizes ``--concurrency`` with contexts of ``input + output / 2`` tokens, graphs as the server uses
   them (the indexer stream for at most 4 requests).
2. ``overlap_on``: a server with the default flags (overlap scheduling on). In order: ``first16``
   (``--first-n`` requests sent at once right after ``/health`` turned 200, ``--input-len`` tokens
   in, ``--first-out`` out: their TTFT), the ``bench_serving`` cells at every ``--concurrency``
   (``--input-len`` in, ``--output-len`` out, ``2 x concurrency`` prompts, fixed lengths), the long
   cell (``--long-input-len`` in at concurrency ``--long-concurrency``: p50 / p99 TPOT), then
   ``steady16`` (the ``first16`` load again), and ``/server_info`` (Triton compiles after ready).
3. ``overlap_off``: the same server with ``--disable-overlap-schedule``: the cells again.
4. ``prefix_cache``: ``benchmark/prefix_cache.py --launch`` (radix cache on vs off), no JIT warm-up
   pass (the server's own start-up warm-up is what is measured).

Outputs in ``--out``: ``results.json``, ``summary.md`` (tables and the issue's targets, met or not),
server logs. ``--dry`` runs everything on the CPU with tiny sizes and the embedded model (what the
test suite checks); on a GPU run it with the flash-8l-32e preset directory (dummy weights)::

    python benchmark/serving_overlap.py --out /tmp/so --model-path /tmp/m --budget-s 470
    python benchmark/serving_overlap.py --out /tmp/so-dry --dry
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

T0 = time.monotonic()


def left(budget: float) -> float:
    return budget - (time.monotonic() - T0)


def save(out: Path, res: dict[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(res, indent=1), encoding="utf-8")
    (out / "summary.md").write_text(summary(res), encoding="utf-8")


# ----------------------------------------------------------------------------------------------
# 1. the runner alone
# ----------------------------------------------------------------------------------------------
def runner_main(a: argparse.Namespace) -> None:
    """Decode ms/step of the model runner at each concurrency (printed as one JSON line)."""
    import torch
    from model_harness import Bench

    dry = a.dry
    ctx = a.input_len + a.output_len // 2
    bench = Bench(
        ctx_len=max(4096, ctx + 64),
        preset="tiny" if dry else a.preset,
        device="cpu" if dry else "cuda",
        dtype="float32" if dry else "bfloat16",
    )
    if dry:
        torch.set_num_threads(1)
    _, src = bench.prefill(ctx)
    rows = {}
    for bs in a.concurrency:
        row = bench.decode(
            src, ctx, bs, graphs=True, stream=bs <= 4, steps=3 if dry else 30, warm=1 if dry else 5
        )
        rows[str(bs)] = row["ms_step"]
    print("RUNNER " + json.dumps({"ctx": ctx, "ms_step": rows}), flush=True)


def run_runner(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "runner", *_shared_flags(a)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(30, left(a.budget_s) - 30))
    (out / "runner.log").write_text(p.stdout + p.stderr, encoding="utf-8")
    for line in p.stdout.splitlines():
        if line.startswith("RUNNER "):
            return json.loads(line[len("RUNNER ") :])
    raise RuntimeError(f"runner phase failed (rc {p.returncode}): {p.stderr[-2000:]}")


# ----------------------------------------------------------------------------------------------
# 2-3. servers
# ----------------------------------------------------------------------------------------------
def _cell(
    url: str, tok: Any, input_len: int, output_len: int, conc: int, prompts: int, warmup: int, seed: int
) -> dict:
    """One ``bench_serving`` cell (random token ids). Each cell of a server has its own ``seed``, so
    no cell's prompts are in the radix cache from an earlier cell (the same seed would repeat the
    prompts: the steady-state TTFT would be a cache hit)."""
    from sglang_v4 import bench_serving as bs

    args = bs.make_args(
        base_url=url,
        dataset_name="random-ids",
        random_input_len=input_len,
        random_output_len=output_len,
        random_range_ratio=1.0,
        num_prompts=prompts,
        max_concurrency=conc,
        warmup_requests=warmup,
        seed=seed,
        disable_tqdm=True,
    )
    r = bs.run_benchmark(args, tok=tok)
    keep = ("completed", "failed", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
            "median_tpot_ms", "p99_tpot_ms", "output_throughput", "concurrency")  # fmt: skip
    return {k: r.get(k) for k in keep} | {
        "input_len": input_len,
        "output_len": output_len,
        "max_concurrency": conc,
    }


def server_phase(
    a: argparse.Namespace, out: Path, overlap: bool, res: dict[str, Any], ab: bool = False
) -> dict[str, Any]:
    """One server's cells. ``ab``: the ``overlap_on_ab`` phase, overlap on with ``--ab-args`` added
    to the flags (the cells and the long cell only: no first / steady TTFT)."""
    from prefix_cache import launch_server, stop_server
    from sglang_v4 import bench_serving as bs

    name = "overlap_on_ab" if ab else "overlap_on" if overlap else "overlap_off"
    phase: dict[str, Any] = res.setdefault(name, {})
    flags = [*shlex.split(a.server_args), *([] if overlap else ["--disable-overlap-schedule"])]
    if ab:
        flags += shlex.split(a.ab_args)
        phase["extra_args"] = a.ab_args
    log = out / f"server_{name}.log"
    t_start = time.monotonic()
    proc, url = launch_server(flags, log, timeout_s=max(60, left(a.budget_s) - 60))
    try:
        phase["ready_s"] = round(time.monotonic() - t_start, 1)
        m = re.search(r"Warm-up: (\d+) dummy forwards, (\d+) decode CUDA graphs, (\d+) Triton compiles in ([\d.]+) s",
                      log.read_text(errors="replace"))  # fmt: skip
        if m:
            phase["warmup"] = {
                "forwards": int(m[1]),
                "graphs": int(m[2]),
                "compiles": int(m[3]),
                "s": float(m[4]),
            }
        _, tok_path = bs.resolve_model_and_tokenizer(url, None, None, bs.auth_headers())
        tok = bs.get_tokenizer(tok_path)
        if overlap and not ab and left(a.budget_s) > 30:
            phase["first16"] = _cell(url, tok, a.input_len, a.first_out, a.first_n, a.first_n, 0, seed=11)
            save(out, res)
        for c in a.concurrency if overlap else [c for c in a.concurrency if c > 1]:
            if left(a.budget_s) < 45:
                break
            phase[f"c{c}"] = _cell(
                url, tok, a.input_len, a.output_len, c, max(a.min_prompts, 2 * c), 1, seed=100 + c
            )
            save(out, res)
        if left(a.budget_s) > 60 and (overlap or a.long_both):
            lc = a.long_concurrency
            phase["long"] = _cell(
                url, tok, a.long_input_len, a.output_len, lc, max(a.min_prompts, lc), 1, seed=200
            )
            save(out, res)
        if overlap and not ab and left(a.budget_s) > 20:
            phase["steady16"] = _cell(url, tok, a.input_len, a.first_out, a.first_n, a.first_n, 0, seed=12)
        info = requests.get(url + "/server_info", timeout=60).json()
        phase["jit"] = info.get("jit")
        phase["num_oom_errors"] = info.get("num_oom_errors")
        save(out, res)
    finally:
        stop_server(proc)
    return phase


def prefix_phase(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    sizes = (
        ["--gsp-num-groups", "2", "--gsp-prompts-per-group", "2", "--gsp-system-prompt-len", "300",
         "--gsp-question-len", "16", "--gsp-output-len", "4", "--mt-conversations", "2", "--mt-turns", "2",
         "--mt-system-len", "300", "--mt-question-len", "16", "--mt-output-len", "4", "--max-concurrency", "2"]
        if a.dry
        else ["--gsp-num-groups", "8", "--gsp-prompts-per-group", "8", "--gsp-system-prompt-len", "2048",
              "--mt-conversations", "8", "--mt-system-len", "2048", "--max-concurrency", "16"]
    )  # fmt: skip
    d = out / "prefix_cache"
    cmd = [sys.executable, str(HERE / "prefix_cache.py"), "--launch", "--server-args", a.server_args,
           "--server-timeout", str(int(max(60, left(a.budget_s) - 60))), "--out-dir", str(d), *sizes]  # fmt: skip
    log = out / "prefix_cache.log"
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    try:
        proc.wait(timeout=max(30, left(a.budget_s) - 10))
    except BaseException as e:  # the budget, or our own SIGTERM: let the child stop its servers first
        proc.terminate()
        try:
            proc.wait(45)
        except subprocess.TimeoutExpired:
            proc.kill()
        if not isinstance(e, subprocess.TimeoutExpired):
            raise
    got = json.loads((d / "results.json").read_text()) if (d / "results.json").exists() else {}
    return {w: r["compare"] | {"hit_rate_on": r["on"]["cache_hit_rate"]} for w, r in got.items()}


# ----------------------------------------------------------------------------------------------
# summary
# ----------------------------------------------------------------------------------------------
def _f(x: Any, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


def summary(res: dict[str, Any]) -> str:
    """Markdown: the cells next to the runner, the long cell, first vs steady TTFT, prefix cache,
    and the targets with their verdicts."""
    lines = [f"# Serving loop ({res.get('mode', '')})", ""]
    runner = res.get("runner", {}).get("ms_step", {})
    on, off = res.get("overlap_on", {}), res.get("overlap_off", {})
    lines += ["| concurrency | runner ms/step | TPOT mean / p50 / p99 ms (overlap on) | TPOT / step | "
              "TPOT mean ms (overlap off) | TPOT / step (off) |", "|---:|---:|---|---:|---:|---:|"]  # fmt: skip
    targets: list[str] = []
    for c in res.get("concurrency", []):
        step = runner.get(str(c))
        a, b = on.get(f"c{c}", {}), off.get(f"c{c}", {})
        ra = a.get("mean_tpot_ms") / step if a.get("mean_tpot_ms") and step else None
        rb = b.get("mean_tpot_ms") / step if b.get("mean_tpot_ms") and step else None
        lines.append(
            f"| {c} | {_f(step, '.3f')} | {_f(a.get('mean_tpot_ms'))} / {_f(a.get('median_tpot_ms'))} / "
            f"{_f(a.get('p99_tpot_ms'))} | {_f(ra)} | {_f(b.get('mean_tpot_ms'))} | {_f(rb)} |"
        )
        if c >= 16 and ra is not None:
            targets.append(
                f"TPOT at concurrency {c} within 10% of the runner step: {ra:.2f}x -> {'met' if ra <= 1.1 else 'not met'}"
            )
    long, big = on.get("long", {}), on.get(f"c{max(res.get('concurrency', [0]))}", {})
    if long:
        ratio = (
            long["p99_tpot_ms"] / big["p99_tpot_ms"]
            if big.get("p99_tpot_ms") and long.get("p99_tpot_ms")
            else None
        )
        lines += ["", f"Long prompts ({long['input_len']} in, concurrency {long['max_concurrency']}): TPOT p50 "
                  f"{_f(long.get('median_tpot_ms'))} ms, p99 {_f(long.get('p99_tpot_ms'))} ms; p99 vs the "
                  f"{big.get('input_len')}-input cell: {_f(ratio)}x"]  # fmt: skip
        if ratio is not None:
            targets.append(
                f"p99 TPOT long / short cell under 2x: {ratio:.2f}x -> {'met' if ratio < 2 else 'not met'}"
            )
    f16, s16 = on.get("first16", {}), on.get("steady16", {})
    if f16 and s16 and s16.get("mean_ttft_ms"):
        ratio = f16["mean_ttft_ms"] / s16["mean_ttft_ms"]
        lines += ["", f"TTFT of the first {f16['max_concurrency']} requests after ready: mean "
                  f"{_f(f16['mean_ttft_ms'], '.1f')} ms vs steady state {_f(s16['mean_ttft_ms'], '.1f')} ms ({ratio:.2f}x)"]  # fmt: skip
        targets.append(
            f"first-16 TTFT within 1.5x of steady state: {ratio:.2f}x -> {'met' if ratio <= 1.5 else 'not met'}"
        )
    jit = on.get("jit") or {}
    if jit:
        lines += ["", f"Triton compiles: {jit.get('compiles_before_ready')} before ready, "
                  f"{jit.get('compiles_after_ready')} after ready {jit.get('late', [])[:5]}"]  # fmt: skip
    if on.get("warmup") or on.get("ready_s") is not None:
        lines += ["", f"Server start to ready: {on.get('ready_s')} s; warm-up {on.get('warmup')}"]
    ab = res.get("overlap_on_ab", {})
    if ab:
        lines += ["", f"A/B: overlap on with `{ab.get('extra_args')}` (B) against the default flags (A), same run", "",
                  "| cell | A TPOT mean / p99 ms | B TPOT mean / p99 ms | A / B mean | A TTFT mean ms | B TTFT mean ms |",
                  "|---|---|---|---:|---:|---:|"]  # fmt: skip
        for cell in [f"c{c}" for c in res.get("concurrency", [])] + ["long"]:
            x, y = on.get(cell, {}), ab.get(cell, {})
            if not x or not y:
                continue
            r = (
                x["mean_tpot_ms"] / y["mean_tpot_ms"]
                if x.get("mean_tpot_ms") and y.get("mean_tpot_ms")
                else None
            )
            lines.append(f"| {cell} | {_f(x.get('mean_tpot_ms'))} / {_f(x.get('p99_tpot_ms'))} | "
                         f"{_f(y.get('mean_tpot_ms'))} / {_f(y.get('p99_tpot_ms'))} | {_f(r)} | "
                         f"{_f(x.get('mean_ttft_ms'), '.1f')} | {_f(y.get('mean_ttft_ms'), '.1f')} |")  # fmt: skip
        if ab.get("long") and big and ab.get(f"c{max(res.get('concurrency', [0]))}"):
            bb = ab[f"c{max(res.get('concurrency', [0]))}"]
            if bb.get("p99_tpot_ms") and ab["long"].get("p99_tpot_ms"):
                lines += [
                    "",
                    f"B: p99 TPOT long / short cell {ab['long']['p99_tpot_ms'] / bb['p99_tpot_ms']:.2f}x",
                ]
    pc = res.get("prefix_cache", {})
    if pc:
        lines += ["", "| prefix workload | hit rate | mean TTFT speedup (off/on) | p50 | total throughput on/off |",
                  "|---|---:|---:|---:|---:|"]  # fmt: skip
        for w, c in pc.items():
            lines.append(f"| {w} | {c['hit_rate_on'] * 100:.1f}% | {_f(c.get('ttft_speedup_mean'))}x | "
                         f"{_f(c.get('ttft_speedup_median'))}x | {_f(c.get('throughput_ratio_total'))}x |")  # fmt: skip
            if w == "gsp" and c.get("ttft_speedup_mean") is not None:
                s = c["ttft_speedup_mean"]
                targets.append(
                    f"shared-prompt mean TTFT speedup >= 4x without a warm-up pass: {s:.2f}x -> {'met' if s >= 4 else 'not met'}"
                )
    if res.get("errors"):
        lines += ["", "Errors: " + json.dumps(res["errors"])]
    lines += ["", "Targets:", *[f"- {t}" for t in targets]]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
def _shared_flags(a: argparse.Namespace) -> list[str]:
    out = ["--out", str(a.out), "--input-len", str(a.input_len), "--output-len", str(a.output_len),
           "--preset", a.preset, "--concurrency", *map(str, a.concurrency)]  # fmt: skip
    return out + (["--dry"] if a.dry else [])


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", nargs="?", default="all", choices=["all", "runner"])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dry", action="store_true", help="CPU, tiny sizes, the embedded model")
    ap.add_argument("--model-path", default=None, help="model directory for the servers (dummy weights)")
    ap.add_argument("--preset", default="flash-8l-32e", help="preset of the runner phase")
    ap.add_argument("--budget-s", type=float, default=470.0)
    ap.add_argument("--concurrency", type=int, nargs="+", default=None)
    ap.add_argument("--input-len", type=int, default=None)
    ap.add_argument("--output-len", type=int, default=None)
    ap.add_argument("--long-input-len", type=int, default=None)
    ap.add_argument("--long-concurrency", type=int, default=None)
    ap.add_argument("--long-both", action="store_true", help="also run the long cell without overlap")
    ap.add_argument("--first-n", type=int, default=None)
    ap.add_argument("--first-out", type=int, default=None)
    ap.add_argument("--min-prompts", type=int, default=None)
    ap.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["runner", "overlap_on", "overlap_on_ab", "overlap_off", "prefix_cache"],
    )
    ap.add_argument(
        "--ab-args",
        default="",
        help="server flags of a second overlap-on server (phase overlap_on_ab, right after "
        "overlap_on): the same cells, compared side by side in summary.md",
    )
    a = ap.parse_args(argv)
    dry = a.dry
    defaults = dict(
        concurrency=[1, 2, 4] if dry else [1, 16, 32],
        input_len=64 if dry else 1024,
        output_len=8 if dry else 512,
        long_input_len=300 if dry else 10000,
        long_concurrency=4 if dry else 32,
        first_n=4 if dry else 16,
        first_out=4 if dry else 32,
        min_prompts=2 if dry else 3,
    )
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    dev = "--device cpu" if dry else "--load-format dummy"
    a.server_args = dev + (f" --model-path {a.model_path}" if a.model_path else "")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.what == "runner":
        runner_main(a)
        return 0
    res: dict[str, Any] = {"mode": "dry run, CPU" if a.dry else "device", "concurrency": a.concurrency,
                           "server_args": a.server_args, "errors": {}}  # fmt: skip
    phases = [
        ("runner", lambda: res.__setitem__("runner", run_runner(a, a.out)), 60),
        ("overlap_on", lambda: server_phase(a, a.out, True, res), 120),
        ("overlap_on_ab", lambda: server_phase(a, a.out, True, res, ab=True), 120),
        ("overlap_off", lambda: server_phase(a, a.out, False, res), 90),
        ("prefix_cache", lambda: res.__setitem__("prefix_cache", prefix_phase(a, a.out)), 90),
    ]
    for name, fn, need in phases:
        if name in a.skip or (name == "overlap_on_ab" and not a.ab_args):
            continue
        if left(a.budget_s) < (need / 4 if a.dry else need):
            res.setdefault("skipped", []).append(name)
            continue
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - record and go on with the next phase
            res["errors"][name] = f"{type(e).__name__}: {e}"[-2000:]
        save(a.out, res)
    save(a.out, res)
    print((a.out / "summary.md").read_text())
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    from prefix_cache import exit_on_sigterm

    exit_on_sigterm()  # a terminated run still stops the servers it launched
    if os.environ.get("PYTHONHASHSEED") is None:
        os.environ["PYTHONHASHSEED"] = "0"
    sys.exit(main())

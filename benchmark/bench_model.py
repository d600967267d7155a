"""Whole-model GPU benchmark and end-to-end GPU correctness check, one call.

Everything runs under a hard time budget (``--budget-s``); each phase is skipped when too little
time is left, and the results are rewritten after every phase, so a cut-off run still leaves
what it measured. Phases, most important first:

1. ``correctness`` (``model_correctness.py``, in a subprocess started at once, overlapping the model build / Triton compiles
   of the main process; the timings below wait for it): the ``tiny`` preset (fp32 checkpoint,
   seed 0) driven through ``Scheduler`` in-process twice, CPU fp32 and CUDA bf16 (Triton kernels,
   CUDA graphs, indexer stream), with chunked prefill (chunk 256), a prefix-cache hit (a second
   prompt sharing 600 tokens) and batched decode. Greedy tokens and output logprobs are compared;
   tolerance stated in the output (bf16: |d logprob| <= 0.1 on matching tokens; a differing token
   is accepted only at an fp32 near-tie, top-1/top-2 gap <= 0.1).
2. ceilings: device copy bandwidth (1 GiB, bytes read + written) and the bf16 GEMM rate (8192^3).
3. ``flash-8l-32e`` (dummy bf16 weights on the GPU): decode ms/step at bs 1 (eager vs graphs),
   the HF transformers eager baseline at bs 1 (same weights), bs 8 / 32 / 128, prefill tok/s at
   1k / 8k / 32k, the second stream on/off at bs 1 / 8 / 32, HF bs 8.

Decode batches: one request is prefilled with 1024 tokens; the other requests of a batch share
its block pages and its last window page read-only (as prefix-cache hits do), each with its own
copy of the compressor state and its own pages for the positions it decodes. Step time = wall
time of ``ModelRunner.forward`` (host batch build + upload + forward) with a device sync per step
(the scheduler reads the tokens every step), median over the timed steps; ``replay_ms`` is the
graph replay alone (CUDA events).

Usage (device)::

    PYTHONPATH=python:sgl-kernel-v4 python benchmark/bench_model.py --out $OUT --budget-s 200

4. last: the GPU tests of the CUDA runner (``pytest -m gpu test/test_gpu_cuda_graph_padding.py``:
   graph replay vs eager on CUDA, with and without the indexer stream).

Outputs: ``model_bench.json``, ``model_bench.md``, ``correctness.json``, ``correctness.log``,
``pytest_gpu.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from typing import Any

import torch
from model_harness import Bench, active_bytes, prefill_flops, sync
from timing import cuda_ms

T0 = time.time()
RESULTS: dict[str, Any] = {"rows": {}, "errors": {}, "skipped": []}


def left(budget: float) -> float:
    return budget - (time.time() - T0)


def save(out: str) -> None:
    """Rewrite the JSON and the markdown summary (called after every phase)."""
    RESULTS["elapsed_s"] = round(time.time() - T0, 1)
    try:
        summarize()
    except Exception as e:  # noqa: BLE001 - a summary bug must not lose the rows
        RESULTS["errors"]["summary"] = repr(e)
    with open(os.path.join(out, "model_bench.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)
    with open(os.path.join(out, "model_bench.md"), "w") as f:
        f.write(markdown())


def summarize() -> None:
    """Same-run ratios for RESULTS.md (filled from whatever rows exist)."""
    rows, out = RESULTS["rows"], {}

    def ms(name: str) -> float | None:
        return rows.get(name, {}).get("ms_step")

    e, g, hf1 = ms("decode bs1 eager stream"), ms("decode bs1 graph stream"), ms("HF eager bs1")
    roof = RESULTS.get("roofline", {}).get("bs1_ms")
    if e and g:
        out["bs1 graphs speedup over eager"] = round(e / g, 2)
    if g and hf1:
        out["bs1 graph speedup over HF eager"] = round(hf1 / g, 1)
    if g and roof:
        out["bs1 graph x roofline"] = round(g / roof, 2)
        out["bs1 target <= 2.0 ms/step met"] = g <= 2.0
    for bs in (1, 2, 4, 8, 32):
        a, b = ms(f"decode bs{bs} graph stream"), ms(f"decode bs{bs} graph nostream")
        if a and b:
            out[f"bs{bs} second-stream gain %"] = round(100 * (b - a) / b, 1)
        a, b = ms(f"decode bs{bs} graph stream"), ms(f"decode bs{bs} eager stream")
        if a and b and bs > 1:
            out[f"bs{bs} graphs speedup over eager"] = round(b / a, 2)
    a, b = rows.get("decode bs8 graph stream", {}).get("tok_s"), rows.get("HF eager bs8", {}).get("tok_s")
    if a and b:
        out["bs8 tok/s over HF eager"] = round(a / b, 1)
    gemm = RESULTS.get("ceilings", {}).get("gemm_tflops")
    for name, r in rows.items():
        if name.startswith("prefill ") and "tflops" in r and gemm:
            out[f"{name} fraction of bf16 GEMM rate"] = round(r["tflops"] / gemm, 3)
    RESULTS["summary"] = out


def markdown() -> str:
    r = RESULTS
    lines = [f"# bench_model ({r.get('env', {}).get('gpu', '?')}, elapsed {r.get('elapsed_s')} s)", ""]
    c = r.get("ceilings", {})
    if c:
        lines.append(f"ceilings: copy {c.get('copy_tbps')} TB/s, bf16 GEMM {c.get('gemm_tflops')} TFLOP/s")
    rf = r.get("roofline", {})
    if rf:
        lines.append(f"bs-1 roofline: {rf.get('active_gb')} GB active weights -> {rf.get('bs1_ms')} ms/step")
    cr = r.get("correctness")
    if cr:
        lines.append(
            f"correctness (tiny, CPU fp32 vs {'CUDA bf16' if cr.get('graphs', {}).get('enabled') else 'CPU'}): "
            f"ok={cr.get('ok')} graphs={json.dumps(cr.get('graphs'))}"
        )
        for rid, v in cr.get("requests", {}).items():
            lines.append(f"- {rid}: {json.dumps(v)}")
        lines.append(f"- tolerance: {cr.get('tolerance')}")
    if r.get("summary"):
        lines += ["", "| same-run ratio | value |", "| --- | --- |"]
        lines += [f"| {k} | {v} |" for k, v in r["summary"].items()]
    lines += ["", "| row | value |", "| --- | --- |"]
    for k, v in r["rows"].items():
        lines.append(f"| {k} | {json.dumps(v, default=str)} |")
    for name, top in r.get("profile", {}).items():
        lines += [
            "",
            f"profile {name} (CUDA kernel time, top 15)",
            "",
            "| kernel | us | % | calls |",
            "|---|---:|---:|---:|",
        ]
        lines += [f"| `{t['kernel']}` | {t['us']} | {t['pct']} | {t['calls']} |" for t in top]
    if r["errors"]:
        lines += ["", "## errors"] + [f"- {k}: {v[:400]}" for k, v in r["errors"].items()]
    if r["skipped"]:
        lines += ["", "skipped (time budget): " + ", ".join(r["skipped"])]
    return "\n".join(lines) + "\n"


def phase(name: str, need_s: float, budget: float, out: str):
    """Decorator-ish runner: run ``fn`` if ``need_s`` seconds are left, record errors, save."""

    def run(fn, *a, **kw):
        if left(budget) < need_s:
            RESULTS["skipped"].append(name)
            save(out)
            return None
        t = time.time()
        try:
            return fn(*a, **kw)
        except Exception:  # noqa: BLE001 - a failed phase must not lose the others
            RESULTS["errors"][name] = traceback.format_exc()[-3000:]
            return None
        finally:
            RESULTS.setdefault("phase_s", {})[name] = round(time.time() - t, 1)
            save(out)
            print(f"[{time.time() - T0:6.1f}s] {name} done", flush=True)

    return run


# ----------------------------------------------------------------------------------------------
# 2. ceilings
# ----------------------------------------------------------------------------------------------
def ceilings() -> None:
    n = 1 << 29  # 1 GiB of bf16
    x = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    ms = statistics.median(cuda_ms(lambda: y.copy_(x), 10))
    copy_tbps = 2 * x.numel() * 2 / (ms * 1e-3) / 1e12
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    ms = statistics.median(cuda_ms(lambda: a @ b, 10, warm=3))
    RESULTS["ceilings"] = {
        "copy_tbps": round(copy_tbps, 3),
        "gemm_tflops": round(2 * 8192**3 / (ms * 1e-3) / 1e12, 1),
        "method": "median of 10 CUDA-event timings; copy = 1 GiB d2d, bytes read+written; GEMM 8192^3 bf16 random",
    }


# ----------------------------------------------------------------------------------------------
# 3. flash-8l-32e
# ----------------------------------------------------------------------------------------------
def profile(bench: Bench, src: tuple, ctx: int, out: str) -> None:
    """Where the time goes: CUDA kernel time per kernel name (torch.profiler) of 5 eager bs-1 decode
    steps (inline indexer) and of one 8k-token prefill; top kernels into ``RESULTS["profile"]``,
    the full tables into ``profile.txt``. Eager, so kernel times add up (graph replay hides them)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    cuda = bench.device == "cuda"
    attr = "device_time_total" if cuda else "self_cpu_time_total"  # CPU: the dry run

    def table(fn) -> tuple[list, str]:
        with tprofile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
            fn()
            sync()
        ev = prof.key_averages()
        tot = sum(getattr(e, attr) for e in ev) or 1.0
        rows = sorted(ev, key=lambda e: -getattr(e, attr))
        top = [
            {
                "kernel": e.key[:90],
                "us": round(getattr(e, attr), 1),
                "pct": round(100 * getattr(e, attr) / tot, 1),
                "calls": e.count,
            }
            for e in rows[:15]
        ]
        return top, ev.table(sort_by=attr, row_limit=40)

    bench.decode(src, ctx, 1, graphs=False, stream=False, steps=1, warm=1)
    dec_top, dec_tab = table(lambda: bench.decode(src, ctx, 1, graphs=False, stream=False, steps=5, warm=0))

    def pre() -> None:
        _, (slot, blocks, wins) = bench.prefill(8192, seed=9)
        bench.release(slot, blocks, wins)

    pre_top, pre_tab = table(pre)
    RESULTS["profile"] = {"decode_bs1_eager_5_steps": dec_top, "prefill_8192": pre_top}
    with open(os.path.join(out, "profile.txt"), "w") as f:
        f.write("# decode bs1 eager, 5 steps\n" + dec_tab + "\n\n# prefill 8192\n" + pre_tab + "\n")


def hf_baseline(bench: Bench, bs: int, ctx: int, steps: int) -> dict:
    """HF transformers eager (same weights): prefill ``ctx`` then ``steps`` decode steps."""
    import transformers

    cfg = {k: v for k, v in bench.cfg.items() if k != "model_type"}
    hcfg = transformers.DeepseekV4Config(**cfg)
    if getattr(bench, "hf", None) is None:
        from transformers.initialization import no_init_weights

        with torch.device(bench.device), no_init_weights():
            hf = transformers.DeepseekV4ForCausalLM._from_config(hcfg, dtype=bench.runner.dtype)
        missing, unexpected = hf.load_state_dict(bench.runner.model.state_dict(), strict=False)
        hf.eval()
        bench.hf = hf
        RESULTS["hf_load"] = {"missing": list(missing)[:10], "unexpected": list(unexpected)[:10]}
    hf = bench.hf
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, 120000, (bs, ctx), generator=g).to(bench.device)
    with torch.inference_mode():
        sync()
        t = time.perf_counter()
        o = hf(input_ids=ids, use_cache=True)
        sync()
        t_pre = time.perf_counter() - t
        cache = o.past_key_values
        nxt = o.logits[:, -1].argmax(-1, keepdim=True)
        times = []
        for i in range(steps + 1):
            sync()
            t = time.perf_counter()
            o = hf(input_ids=nxt, past_key_values=cache, use_cache=True)
            nxt = o.logits[:, -1].argmax(-1, keepdim=True)
            sync()
            if i:
                times.append((time.perf_counter() - t) * 1e3)
            cache = o.past_key_values
    ms = statistics.median(times)
    return {
        "ms_step": round(ms, 2),
        "tok_s": round(bs / ms * 1e3, 1),
        "prefill_s": round(t_pre, 3),
        "prefill_tok_s": round(bs * ctx / t_pre, 1),
        "transformers": transformers.__version__,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--correctness-only", action="store_true")
    ap.add_argument("--no-correctness", action="store_true")
    ap.add_argument(
        "--ctx", type=int, default=960, help="decode context (960: 40+ steps stay in the 1024 graph bucket)"
    )
    ap.add_argument(
        "--device", default="cuda", choices=("cuda", "cpu"), help="cpu: dry run of the driver (no ceilings)"
    )
    ap.add_argument("--preset", default="flash-8l-32e")
    ap.add_argument("--prefill", default="1024,8192,32768", help="prefill sizes (tokens)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cuda = args.device == "cuda"
    if args.correctness_only:
        from model_correctness import correctness_main

        correctness_main(args.out, args.device, "bfloat16" if cuda else "float32")
        return 0
    B = args.budget_s
    gpu_name, triton_version = "cpu (dry run)", None
    if cuda:
        import triton

        gpu_name, triton_version = torch.cuda.get_device_properties(0).name, triton.__version__
    RESULTS["env"] = {
        "gpu": gpu_name,
        "torch": torch.__version__,
        "triton": triton_version,
        "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "command": " ".join(sys.argv),
    }
    save(args.out)
    proc = None
    if not args.no_correctness:
        log = open(os.path.join(args.out, "correctness.log"), "w")
        proc = subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--out",
                args.out,
                "--correctness-only",
                "--device",
                args.device,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )

    def wait_correctness() -> None:
        if proc is None:
            return
        try:
            proc.wait(timeout=max(1.0, left(B) - 60))
        except subprocess.TimeoutExpired:
            proc.kill()
            RESULTS["errors"]["correctness"] = "timed out (killed to keep the time budget)"
        path = os.path.join(args.out, "correctness.json")
        if os.path.exists(path):
            with open(path) as f:
                RESULTS["correctness"] = json.load(f)
        elif "correctness" not in RESULTS["errors"]:
            RESULTS["errors"]["correctness"] = f"subprocess rc={proc.returncode}; see correctness.log"
        save(args.out)

    ctx = args.ctx
    state: dict[str, Any] = {}

    def build() -> None:
        bench = Bench(40000, args.preset, args.device, "bfloat16" if cuda else "float32")
        state["bench"] = bench
        ab = active_bytes(bench.runner.model, bench.mc, 1)
        RESULTS["roofline"] = {"active_gb": round(ab["active_gb"], 3)}
        # Triton compiles + graph capture of the main decode keys while the check runs
        _, src = bench.prefill(ctx)
        state["src"] = src
        bench.decode(src, ctx, 1, graphs=False, stream=True, steps=1, warm=1)
        bench.decode(src, ctx, 1, graphs=True, stream=True, steps=1, warm=1)

    phase("build", 40, B, args.out)(build)
    wait_correctness()
    if cuda:
        phase("ceilings", 20, B, args.out)(ceilings)
    if "ceilings" in RESULTS and "roofline" in RESULTS:
        bw = RESULTS["ceilings"]["copy_tbps"] * 1e12
        RESULTS["roofline"]["bs1_ms"] = round(RESULTS["roofline"]["active_gb"] * 1e9 / bw * 1e3, 3)
    bench = state.get("bench")
    if bench is None or "src" not in state:
        save(args.out)
        return 1
    src = state["src"]
    rows = RESULTS["rows"]

    def dec(name: str, bs: int, graphs: bool, stream: bool, steps: int = 20, warm: int = 3) -> None:
        r = bench.decode(src, ctx, bs, graphs, stream, steps, warm)
        ab = active_bytes(bench.runner.model, bench.mc, bs)
        r["roofline_ms"] = None
        if "ceilings" in RESULTS:
            r["roofline_ms"] = round(
                ab["active_gb"] * 1e9 / (RESULTS["ceilings"]["copy_tbps"] * 1e12) * 1e3, 3
            )
            r["x_roofline"] = round(r["ms_step"] / r["roofline_ms"], 2)
        rows[name] = r

    phase("decode_bs1_eager", 10, B, args.out)(dec, "decode bs1 eager stream", 1, False, True)
    phase("decode_bs1_graph", 10, B, args.out)(dec, "decode bs1 graph stream", 1, True, True, 30)
    phase("hf_bs1", 30, B, args.out)(lambda: rows.__setitem__("HF eager bs1", hf_baseline(bench, 1, ctx, 8)))
    for bs in (8, 32):
        phase(f"decode_bs{bs}_graph", 15, B, args.out)(dec, f"decode bs{bs} graph stream", bs, True, True)
        phase(f"decode_bs{bs}_eager", 10, B, args.out)(
            dec, f"decode bs{bs} eager stream", bs, False, True, 10, 2
        )

    def pre(n: int, reps: int) -> None:
        ts = []
        for i in range(reps + 1):
            dt, (slot, blocks, wins) = bench.prefill(n, seed=i)
            bench.release(slot, blocks, wins)
            if i:
                ts.append(dt)
        t = statistics.median(ts)
        fl = prefill_flops(bench.runner.model, bench.mc, n)
        rows[f"prefill {n}"] = {
            "s": round(t, 4),
            "tok_s": round(n / t, 1),
            "reps": reps,
            "tflops": round(fl / t / 1e12, 1),
            "gflop_per_tok": round(fl / n / 1e9, 2),
        }

    sizes = [int(x) for x in args.prefill.split(",") if x]
    for n in sizes[:2]:
        phase(f"prefill_{n}", 8 if n <= 2048 else 15, B, args.out)(pre, n, 3 if n <= 2048 else 2)
    phase("decode_bs128_graph", 20, B, args.out)(dec, "decode bs128 graph stream", 128, True, True, 10, 2)
    for bs in (1, 8, 32):
        phase(f"decode_bs{bs}_graph_nostream", 12, B, args.out)(
            dec, f"decode bs{bs} graph nostream", bs, True, False, 20 if bs == 1 else 10, 2
        )
    for bs in (2, 4):  # where the second stream stops paying (--indexer-stream-max-bs)
        for st in (True, False):
            name = f"decode bs{bs} graph {'stream' if st else 'nostream'}"
            phase(name.replace(" ", "_"), 8, B, args.out)(dec, name, bs, True, st, 20, 2)
    phase("profile", 20, B, args.out)(profile, bench, src, ctx, args.out)
    phase("hf_bs8", 30, B, args.out)(lambda: rows.__setitem__("HF eager bs8", hf_baseline(bench, 8, ctx, 5)))
    for n in sizes[2:]:
        phase(f"prefill_{n}", 25, B, args.out)(pre, n, 1)
    phase("decode_bs1_eager_nostream", 8, B, args.out)(
        dec, "decode bs1 eager nostream", 1, False, False, 10, 2
    )

    def gpu_tests() -> None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"]
        cmd.append(os.path.join(root, "test", "test_gpu_cuda_graph_padding.py"))
        try:
            pr = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=max(5.0, left(B) - 3))
            log, rc = pr.stdout + pr.stderr, pr.returncode
        except subprocess.TimeoutExpired as e:
            log, rc = str(e.stdout or "") + "\nTIMEOUT", -1
        with open(os.path.join(args.out, "pytest_gpu.log"), "w") as f:
            f.write(log)
        tail = [ln for ln in log.strip().splitlines() if ln.strip()]
        RESULTS["gpu_tests"] = {"rc": rc, "summary": tail[-1] if tail else ""}

    # free the flash model, its pool and graphs and the HF twin before the tests allocate theirs
    state.clear()
    bench.__dict__.clear()
    import gc

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        phase("gpu_tests", 25, B, args.out)(gpu_tests)
    save(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

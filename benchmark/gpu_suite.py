"""One-call GPU driver: ceilings, GPU tests, kernel microbenchmarks; JSON + markdown under ``--out``.

1. Measures the ceilings in the same process as the numbers they bound: device-to-device copy
   bandwidth (bytes read + written, 1 GiB) and the bf16 GEMM rate (8192^3, random data).
2. Runs the GPU tests (``pytest -m gpu test/test_kernels_*.py``) in a subprocess (a kernel fault
   there cannot corrupt the timing process); the log is ``pytest.log``.
3. Times every Triton kernel against the unfused torch ops it replaces (``bench_kernels.py``).

Usage on the device (``$OUT`` is the folder that comes back)::

    PYTHONPATH=python:sgl-kernel-v4 python benchmark/gpu_suite.py --out $OUT [--quick] [--only attention]

Outputs: ``suite.json`` (environment, ceilings, pytest summary, rows), ``suite.md`` (tables),
``pytest.log``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_kernels  # noqa: E402


def env_info() -> dict[str, Any]:
    """Versions and device properties."""
    import triton

    p = torch.cuda.get_device_properties(0)
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "gpu": p.name,
        "sms": p.multi_processor_count,
        "mem_gib": round(p.total_memory / 2**30, 1),
        "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }


def run_tests(out_dir: str, extra: list[str], timeout: int) -> dict[str, Any]:
    """pytest -m gpu over test/test_kernels_*.py; returns the summary line and return code."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = sorted(glob.glob(os.path.join(root, "test", "test_kernels_*.py")))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-m",
        "gpu",
        "-rfEs",
        "-p",
        "no:cacheprovider",
        *files,
        *extra,
    ]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout)
        log, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        log = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        log += f"\nTIMEOUT after {timeout}s"
        rc = -1
    with open(os.path.join(out_dir, "pytest.log"), "w") as f:
        f.write(log)
    lines = [ln for ln in log.strip().splitlines() if ln.strip()]
    summary = lines[-1] if lines else ""
    fails = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    print(f"[tests] rc={rc} {summary} ({time.time() - t0:.0f}s)", flush=True)
    for ln in fails[:40]:
        print("   ", ln[:300], flush=True)
    return {"rc": rc, "summary": summary, "failures": fails, "seconds": time.time() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description="GPU suite: ceilings + GPU tests + kernel benchmarks")
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu_suite_out"))
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--only", default="", help="benchmarks: comma list of " + ",".join(bench_kernels.BENCHES))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--pytest-args", default="", help="extra pytest args (e.g. '-k attention -x')")
    ap.add_argument("--test-timeout", type=int, default=240)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    res: dict[str, Any] = {"env": env_info()}
    print("[env]", res["env"], flush=True)
    res["ceilings"] = bench_kernels.measure_ceilings()
    print("[ceilings]", {k: round(v, 2) for k, v in res["ceilings"].items()}, flush=True)
    if not args.skip_tests:
        res["tests"] = run_tests(args.out, args.pytest_args.split(), args.test_timeout)
    if not args.skip_bench:
        only = [s for s in args.only.split(",") if s] or None
        b = bench_kernels.run(only, args.quick, res["ceilings"])
        res["rows"], res["bench_errors"] = b["rows"], b["errors"]
        md = bench_kernels.to_markdown(b)
    else:
        md = ""
    header = f"# gpu_suite {res['env']['time_utc']} on {res['env']['gpu']}\n\n"
    header += f"torch {res['env']['torch']}, triton {res['env']['triton']}, CUDA {res['env']['cuda']}\n\n"
    if "tests" in res:
        header += f"GPU tests: `{res['tests']['summary']}` (rc {res['tests']['rc']})\n\n"
    with open(os.path.join(args.out, "suite.md"), "w") as f:
        f.write(header + md)
    with open(os.path.join(args.out, "suite.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    print(header + md, flush=True)


if __name__ == "__main__":
    main()

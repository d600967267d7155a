"""Seconds from ``python -m sglang_v4.launch_server`` to the first ``/health`` 200 (warm-up done),
with the backend processes prewarmed (the default, ``entrypoints/prewarm.py``) and without
(``SGLANG_V4_NO_PREWARM=1``: spawned after the model checks), alternating, ``--runs`` times each.

    python benchmark/startup_time.py --runs 3 [--warmup-runs 1] [-- extra launch_server flags]

``--warmup-runs``: untimed launches first (on a GPU the first start compiles the Triton kernels
into the on-disk cache that later starts load).

Prints each run and the medians as JSON. Runs on the CPU (``--device cpu`` unless the extra flags
give one) on the embedded default model unless ``--model-path`` is among the extra flags.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import requests


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def time_to_ready(extra: list[str], prewarm: bool, timeout_s: float = 300.0) -> float:
    """Seconds from the launch to the first ``GET /health`` answered 200.

    Raises:
        RuntimeError: the server exited or was not ready within ``timeout_s``.
    """
    port = _free_port()
    env = dict(os.environ)
    env.pop("SGLANG_V4_NO_PREWARM", None)
    if not prewarm:
        env["SGLANG_V4_NO_PREWARM"] = "1"
    cmd = [sys.executable, "-m", "sglang_v4.launch_server", "--port", str(port), *extra]
    if "--device" not in extra:
        cmd += ["--device", "cpu"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.monotonic() - t0 < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with code {proc.returncode}")
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return time.monotonic() - t0
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"not ready within {timeout_s} s")
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup-runs", type=int, default=0)
    ap.add_argument("extra", nargs="*", help="flags passed to launch_server (after --)")
    args = ap.parse_args()
    for _ in range(args.warmup_runs):
        time_to_ready(args.extra, prewarm=True, timeout_s=600.0)
    runs: dict[str, list[float]] = {"prewarm": [], "no_prewarm": []}
    for _ in range(args.runs):
        for key in runs:
            runs[key].append(round(time_to_ready(args.extra, prewarm=key == "prewarm"), 2))
    medians = {k: statistics.median(v) for k, v in runs.items()}
    print(
        json.dumps({"runs_s": runs, "median_s": medians, "ratio": medians["no_prewarm"] / medians["prewarm"]})
    )


if __name__ == "__main__":
    main()

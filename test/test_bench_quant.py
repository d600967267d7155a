"""The FP8/FP4 device benchmark driver runs end to end in its CPU dry mode (torch references, tiny
shapes), so a GPU call is not spent on a driver bug. The numbers themselves mean nothing on CPU;
what is checked is that every phase ran, wrote its rows and reported no error, and that the
accuracy phase compared the runtime with HF transformers (exact on CPU: fp32 references)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from server_fixture import REPO


@pytest.mark.slow
def test_bench_quant_dry_run(tmp_path) -> None:
    out = tmp_path / "q"
    cmd = [sys.executable, "benchmark/bench_quant.py", "--out", str(out), "--device", "cpu", "--dry-run"]
    cmd += ["--no-tests", "--budget-s", "1500"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500, env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "quant_bench.json").read_text())
    assert res["errors"] == {} and res["skipped"] == [], (res["errors"], res["skipped"])
    assert {row["shape"] for row in res["fp8_gemm"]} == {"q_a-like", "o_a-like (2 groups)"}
    assert all("w8a16_ms" in row and "bf16_ms" in row for row in res["fp8_gemm"])
    assert res["moe_fp4"] and all("fp4_ms" in row for row in res["moe_fp4"])
    models = res["models"]
    assert models["tiny fp8"]["weight_format"] == "FP8 linears + FP4 experts"
    assert models["tiny bf16"]["weight_format"].endswith("(unquantized)")
    for m in models.values():
        assert {"decode bs1", "decode bs2", "prefill 256"} <= set(m["rows"])
    (acc,) = res["accuracy"]
    assert acc["config"] == "tiny" and acc["tokens"] == 200
    for label in (
        "dequantized bf16 (floor)",
        "FP8/FP4, one forward (w8a8)",
        "FP8/FP4, 32-token chunks (w8a16)",
    ):
        assert acc[label]["max_abs_dlogprob"] < 1e-3  # CPU: the fp32 references are exact
    assert res["sweep"] and "## Accuracy" in (out / "quant_bench.md").read_text()


@pytest.mark.slow
def test_bench_quant_quick_dry_run(tmp_path) -> None:
    """``--quick`` (the device re-check of the kernel fixes): its test selection runs, and the FP8,
    FP4 and sweep rows are written without errors."""
    out = tmp_path / "q"
    cmd = [
        sys.executable,
        "benchmark/bench_quant.py",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--dry-run",
        "--quick",
    ]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "quant_bench.json").read_text())
    assert res["errors"] == {} and res["skipped"] == [], (res["errors"], res["skipped"])
    assert res["gpu_tests"]["rc"] == 0 and "2 passed" in res["gpu_tests"]["summary"]
    assert {row["T"] for row in res["fp8_gemm"]} == {1, 96} and len(res["moe_fp4"]) == 2
    assert "models" not in res and "accuracy" not in res and res["sweep"]


def test_gpu_tests_interrupted_at_budget_keep_failures(tmp_path) -> None:
    """A pytest run past the budget is interrupted, not killed: its log still names the failure that
    happened before the cut and ends with pytest's summary (a killed run leaves only progress
    characters, which is how the first device run lost its failure messages)."""
    sys.path.insert(0, str(REPO / "benchmark"))
    import bench_quant

    (tmp_path / "test_slow.py").write_text(
        "import time\n\ndef test_a_fails():\n    assert 1 + 1 == 3\n\ndef test_b_hangs():\n    time.sleep(120)\n"
    )
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-v",
        "-rfE",
        "-p",
        "no:cacheprovider",
        str(tmp_path / "test_slow.py"),
    ]
    log = open(tmp_path / "pytest_quant_gpu.log", "w")  # noqa: SIM115 - the driver reads it back
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # as the device scripts run it
    # started from a process that ignores SIGINT (inherited across exec): the driver's child
    # must still be interruptible (this failed CI once a test run left SIGINT ignored)
    prev = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, env=env,
            preexec_fn=bench_quant.interruptible_child,
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, prev)
    # the cut comes once the first test has failed and the second hangs, however long a loaded
    # machine takes to get there (a fixed 8 s budget raced pytest's start-up)
    deadline = time.time() + 120
    while "test_b_hangs" not in (tmp_path / "pytest_quant_gpu.log").read_text() and time.time() < deadline:
        time.sleep(0.2)
    budget = time.time() - bench_quant.T0 + 1.0
    bench_quant.wait_gpu_tests(proc, str(tmp_path), budget, keep_s=0.0)
    text = (tmp_path / "pytest_quant_gpu.log").read_text()
    assert "FAILED test_slow.py::test_a_fails - assert (1 + 1) == 3" in text and "1 failed" in text, text[
        -2000:
    ]
    assert "interrupted" in bench_quant.R["errors"]["gpu_tests"]


def test_quick_test_ids_exist_on_gpu() -> None:
    """Every test id ``--quick`` names is collected under the GPU parametrization (no interpreter):
    a renamed case would otherwise only show up as an error in the device call."""
    sys.path.insert(0, str(REPO / "benchmark"))
    import bench_quant

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider"]
    r = subprocess.run(
        cmd + bench_quant.QUICK_TESTS, cwd=REPO, capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    collected = {ln.strip() for ln in r.stdout.splitlines() if "::" in ln}
    assert collected == set(bench_quant.QUICK_TESTS), r.stdout[-2000:]

"""The FP4 MoE decode sweep (``benchmark/moe_fp4_sweep.py``) runs end to end in its CPU dry mode
(tiny shapes under the interpreter), so a GPU call is not spent on a script bug: every row timed,
every variant's output checked against the default's (the fp8 product's rows too), both reports written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from server_fixture import REPO


@pytest.mark.slow
def test_moe_fp4_sweep_dry_run(tmp_path) -> None:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the script sets it itself in --dry mode
    cmd = [sys.executable, "benchmark/moe_fp4_sweep.py", "--dry", "--out", str(tmp_path)]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "moe_fp4_sweep.json").read_text())
    rows = res["rows"]
    assert {row["T"] for row in rows} == {1, 2} and rows[0]["variant"] == "default"
    assert all("error" not in row and row["us"] > 0 for row in rows)
    # bf16 rows differ from the default in summation order only; fp8 rows by the activation rounding
    assert all(row["max_abs_diff"] <= 1e-6 * max(1.0, row["ref_max_abs"]) for row in rows if not row["fp8"])
    fp8 = [row for row in rows if row["fp8"]]
    assert {row["variant"] for row in fp8} == {
        "fp8",
        "fp8_table",
        "fp8_fold",
        "fp8_expert",
        "fp8_pair",
        "fp8_fold_expert",
        "fp8_fold_pair",
    }
    assert all(0 < row["max_abs_diff"] <= 0.1 * row["ref_max_abs"] for row in fp8)
    md = (tmp_path / "moe_fp4_sweep.md").read_text()
    assert "| variant | T | us | x roofline |" in md and "fused" in md and "bf16_expert" in md

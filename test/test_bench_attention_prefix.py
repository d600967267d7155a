"""The HCA dense-prefix benchmark (``benchmark/attention_prefix_bench.py``) runs end to end in its
CPU dry mode (tiny shapes under the interpreter), so a GPU call is not spent on a script bug: the
paged baseline, the window-only call and the dense path timed, the dense output within fp32
rounding of the paged kernel's (an independent implementation of the same attention), the
profile table printed, both reports written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from server_fixture import REPO


@pytest.mark.slow
def test_attention_prefix_bench_dry_run(tmp_path) -> None:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the script sets it itself in --dry mode
    cmd = [
        sys.executable,
        "benchmark/attention_prefix_bench.py",
        "--dry",
        "--profile",
        "--out",
        str(tmp_path),
    ]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((tmp_path / "attention_prefix_bench.json").read_text())
    assert [row["setting"].split()[0] for row in rows] == ["paged", "window", "dense"]
    assert all("error" not in row and row["ms"] > 0 for row in rows)
    assert rows[2]["rel_err"] < 1e-5 and "Self CPU" in rows[2]["profile"]
    md = (tmp_path / "attention_prefix_bench.md").read_text()
    assert "| C | pool | path | ms |" in md

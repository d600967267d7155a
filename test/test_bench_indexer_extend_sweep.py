"""The extend scoring sweep (``benchmark/indexer_extend_sweep.py``) runs end to end in its CPU dry
mode (tiny shapes under the interpreter), so a GPU call is not spent on a script bug: the baseline
and one setting of each keys-major form timed over bf16 and fp4 keys, every top-k equal to the
baseline's (exact scores in fp32 at these sizes), both reports written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from server_fixture import REPO


@pytest.mark.slow
def test_indexer_extend_sweep_dry_run(tmp_path) -> None:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the script sets it itself in --dry mode
    cmd = [sys.executable, "benchmark/indexer_extend_sweep.py", "--dry", "--out", str(tmp_path)]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((tmp_path / "indexer_extend_sweep.json").read_text())["rows"]
    assert {(row["keys"], row["setting"].split()[0]) for row in rows} == {
        (k, f)
        for k in ("bf16", "fp4")
        for f in ("general", "keys", "keys_split", "keys_wdot", "keys_wdot16", "keys_wdot_pairs", "keys_fold")
    }
    assert all("error" not in row and row["ms"] > 0 and row["same"] for row in rows)
    md = (tmp_path / "indexer_extend_sweep.md").read_text()
    assert "| C | keys | setting | ms per call |" in md and "keys_split t" in md

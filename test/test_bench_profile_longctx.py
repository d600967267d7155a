"""``benchmark/profile_longctx.py --dry`` runs on a CPU machine as the benchmark README says, without
the caller setting ``TRITON_INTERPRET`` (it used to stop with Triton's "0 active drivers" error)."""

from __future__ import annotations

import os
import subprocess
import sys

from server_fixture import REPO


def test_profile_longctx_dry_runs_without_triton_interpret_set(tmp_path) -> None:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # a fresh shell: the script must set it itself in --dry mode
    cmd = [
        sys.executable,
        "benchmark/profile_longctx.py",
        "--dry",
        "--phases",
        "indexer",
        "--out",
        str(tmp_path),
    ]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    md = (tmp_path / "profile.md").read_text()
    # both indexer shapes of the dry run were profiled (the second is the one that needs the interpreter)
    assert "indexer_topk, decode: 1 tokens x 1024 candidates" in md
    assert "indexer_topk, prefill chunk: 8 tokens x 512 candidates" in md

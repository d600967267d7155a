"""The README's Engine snippet pasted into a script without a main guard.

``Engine`` starts its processes with ``spawn``, which re-runs the script's top level in the child;
an unguarded ``Engine(...)`` there used to fail with only "scheduler exit code 1". The error must
now say what to do (Python's multiprocessing docs: "Safe importing of main module"), once: the
children that re-run the script exit with one line each, not a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from server_fixture import REPO

pytestmark = pytest.mark.timeout(180)


def test_unguarded_engine_script_gets_a_clear_error(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from sglang_v4 import Engine\n"
        "with Engine(device='cpu', skip_warmup=True) as engine:\n"
        "    print(engine.generate(prompt='Hi', sampling_params={'max_new_tokens': 1})['text'])\n"
    )
    env = dict(os.environ)
    env.pop("SGLANG_V4_SCHEDULER_CLASS", None)
    p = subprocess.run(
        [sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True, timeout=170
    )
    assert p.returncode != 0
    final = p.stderr.split("RuntimeError: The scheduler process failed to start")
    assert len(final) > 1, p.stderr[-3000:]
    assert 'if __name__ == "__main__":' in final[-1], p.stderr[-3000:]
    # the spawned children, which re-run the script, each say so in one line and exit 1 without a
    # traceback of their own: the only traceback is the script's uncaught RuntimeError
    assert p.stderr.count("Traceback (most recent call last)") == 1, p.stderr[-3000:]
    child_line = "sglang_v4::scheduler: an Engine was created while this child process"
    assert child_line in p.stderr, p.stderr[-3000:]

"""Start-up and shutdown as SGLang users expect (fake scheduler: no model to load).

* While the warm-up request runs (held by the fake scheduler: no bet on timing), ``/health`` and
  ``/health_generate`` answer 503 in the SGLang / OpenAI error shape and ``/get_server_info``,
  ``/get_model_info`` and ``/v1/models`` answer 200 (every ``start_server`` shows that ``/health``
  turns 200 once the warm-up is done).
* A SIGTERM / SIGINT while the model loads (before the HTTP server is up) or while the warm-up
  request is in flight (held by the fake scheduler), to the launcher or to its whole process group,
  is a clean stop: exit code 0, every child gone, no traceback, no crash line.
* A warm-up that fails exits non-zero with one line saying so, without a traceback of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from server_fixture import REPO, ServerHandle, fake_env, free_port, make_fake_model_dir, start_server
from server_process_testutil import _alive, _children

pytestmark = pytest.mark.timeout(300)  # a server start or two per test: generous for a loaded machine
#: A word of the warm-up prompt (``startup_warmup.WARMUP_PROMPT``): the fake scheduler holds or
#: crashes the warm-up request on it.
WARMUP_WORD = "capital"
CRASH_WORDS = ("Traceback", "crash", "Backend failure", "BackendDiedError", "Backend process died")


def _assert_clean_stop(h: ServerHandle, kids: list[int]) -> None:
    assert h.proc.wait(timeout=60) == 0, h.log()[-3000:]
    log = h.log()
    assert not [w for w in CRASH_WORDS if w in log], log[-5000:]
    deadline = time.time() + 15
    while time.time() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.1)
    assert not any(_alive(k) for k in kids)


def _ignores_sigint(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


def _signal(h: ServerHandle, how: str) -> None:
    sig = signal.SIGINT if how.startswith("sigint") else signal.SIGTERM
    if how.endswith("group"):
        os.killpg(h.proc.pid, sig)
    else:
        h.proc.send_signal(sig)


def _held_warmup_server(tmp_path: Path) -> ServerHandle:
    """A server whose warm-up request is in flight and held (never released)."""
    extra = {"FAKE_HOLD_ON_TEXT": WARMUP_WORD}
    args = ["--model-path", str(make_fake_model_dir(tmp_path)), "--graceful-shutdown-timeout", "1"]
    h = start_server(args, fake_env(extra), tmp_path / "server.log", new_session=True, healthy=False)
    deadline = time.time() + 30
    while requests.get(h.url + "/get_server_info", timeout=10).json()["num_running_reqs"] < 1:
        assert time.time() < deadline, h.log()[-3000:]
        time.sleep(0.05)
    return h


@pytest.mark.parametrize("how", ["sigterm_group", pytest.param("sigint_group", marks=pytest.mark.slow)])
def test_starting_server_answers_503_and_stops_cleanly(tmp_path: Path, how: str) -> None:
    """While the warm-up runs: the health routes 503 in the error shape (before: an empty body),
    the info routes 200. Then a stop signal: before, a group SIGTERM stopped the scheduler (exit
    0), which was reported as a backend crash (``BackendDiedError`` traceback from the warm-up,
    exit 1); a SIGINT drained the held warm-up until the drain timeout, then reported its failure
    the same way."""
    h = _held_warmup_server(tmp_path)
    kids = _children(h.proc.pid)
    for path in ("/health", "/health_generate"):
        r = requests.get(h.url + path, timeout=10)
        assert r.status_code == 503, (path, r.status_code)
        err = r.json()["error"]
        assert err["code"] == 503 and err["type"] == "service_unavailable", err
        assert "starting" in err["message"], err
    for path in ("/get_server_info", "/get_model_info", "/v1/models"):
        assert requests.get(h.url + path, timeout=10).status_code == 200, path
    _signal(h, how)
    _assert_clean_stop(h, kids)
    assert "fired up" not in h.log()


@pytest.mark.parametrize("how", ["sigint_group", pytest.param("sigterm", marks=pytest.mark.slow)])
def test_stop_while_the_model_loads_is_clean(tmp_path: Path, how: str) -> None:
    """Before: a SIGTERM killed the launcher by the signal (exit -15), a Ctrl+C printed a
    ``KeyboardInterrupt`` traceback (exit 1)."""
    env = fake_env({"FAKE_LOAD_SLEEP": "60"})
    port = free_port()
    cmd = [sys.executable, "-m", "sglang_v4.launch_server", "--port", str(port)]
    cmd += ["--model-path", str(make_fake_model_dir(tmp_path))]
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO), start_new_session=True
        )
    h = ServerHandle(proc=proc, url=f"http://127.0.0.1:{port}", log_path=log_path)
    try:
        # the scheduler, the detokenizer and multiprocessing's resource tracker are started, and
        # the launcher has its SIGINT handler back (it ignores SIGINT while it spawns a child)
        deadline = time.time() + 60
        while len(_children(proc.pid)) < 3 or _ignores_sigint(proc.pid):
            assert time.time() < deadline and proc.poll() is None, h.log()[-3000:]
            time.sleep(0.05)
        kids = _children(proc.pid)
        _signal(h, how)
        _assert_clean_stop(h, kids)
        assert "received during start-up; stopped." in h.log()
    finally:
        h.stop()


def test_failed_warmup_exits_nonzero_with_one_line(tmp_path: Path) -> None:
    env = fake_env({"FAKE_CRASH_ON_TEXT": WARMUP_WORD, "SGLANG_V4_CRASH_EXIT_DELAY": "0"})
    cmd = [sys.executable, "-m", "sglang_v4.launch_server", "--port", str(free_port())]
    cmd += ["--model-path", str(make_fake_model_dir(tmp_path))]
    # a whole start-up up to the failed warm-up: as generous as start_server's deadline and more
    r = subprocess.run(cmd, env=env, cwd=str(REPO), capture_output=True, text=True, timeout=240)
    log = r.stdout + r.stderr
    assert r.returncode == 1, log[-3000:]
    lines = [ln for ln in log.splitlines() if "The server failed to start" in ln]
    assert len(lines) == 1 and "the warm-up request failed" in lines[0], log[-3000:]
    assert "Warm-up request failed" not in log and "in warmup" not in log, log[-3000:]

"""Failure handling of the server processes: a crashing scheduler and a killed parent.

* A scheduler exception: the in-flight request fails with 503, ``/health`` turns 503, the
  traceback is logged, and the server process exits with a non-zero code (no hang).
* A hung scheduler step: the watchdog (``--watchdog-timeout``) ends it the same way.
* ``kill -9`` of the server's main process: its scheduler and detokenizer children exit too.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import requests
from server_fixture import fake_env, make_fake_model_dir, start_server

pytestmark = pytest.mark.timeout(240)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.extend(int(x) for x in text)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_scheduler_crash_turns_health_503_and_exits_nonzero(tmp_path: Path):
    model = make_fake_model_dir(tmp_path)
    env = fake_env({"FAKE_CRASH_ON_TEXT": "CRASH-NOW", "SGLANG_V4_CRASH_EXIT_DELAY": "4"})
    h = start_server(["--model-path", str(model)], env, tmp_path / "server.log")
    try:
        r = requests.post(
            h.url + "/generate", json={"text": "ok", "sampling_params": {"max_new_tokens": 2}}, timeout=30
        )
        assert r.status_code == 200
        r = requests.post(h.url + "/generate", json={"text": "please CRASH-NOW"}, timeout=30)
        assert r.status_code == 503, r.text
        assert "crashed" in r.json()["error"]["message"]
        assert requests.get(h.url + "/health", timeout=5).status_code == 503
        code = h.proc.wait(timeout=60)
        assert code != 0
        log = h.log()
        assert "RuntimeError: FakeScheduler: injected crash" in log
        assert "Traceback" in log
    finally:
        h.stop()


def test_hung_step_is_killed_by_watchdog(tmp_path: Path):
    model = make_fake_model_dir(tmp_path)
    env = fake_env({"FAKE_HANG_ON_TEXT": "HANG-NOW", "SGLANG_V4_CRASH_EXIT_DELAY": "1"})
    h = start_server(["--model-path", str(model), "--watchdog-timeout", "3"], env, tmp_path / "server.log")
    try:
        t0 = time.time()
        r = requests.post(h.url + "/generate", json={"text": "HANG-NOW please"}, timeout=60)
        assert r.status_code == 503, r.text
        assert time.time() - t0 < 30
        assert h.proc.wait(timeout=60) != 0
        assert "Scheduler watchdog: a step ran longer than 3s" in h.log()
    finally:
        h.stop()


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_children_die_with_killed_parent(tmp_path: Path):
    model = make_fake_model_dir(tmp_path)
    h = start_server(["--model-path", str(model)], fake_env(), tmp_path / "server.log")
    kids = _children(h.proc.pid)
    assert len(kids) >= 2, kids  # scheduler + detokenizer
    assert all(_alive(k) for k in kids)
    os.kill(h.proc.pid, signal.SIGKILL)
    h.proc.wait(10)
    deadline = time.time() + 15
    while time.time() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.2)
    assert not any(_alive(k) for k in kids)


def test_sigterm_during_a_stream_exits_promptly(tmp_path: Path):
    import threading

    model = make_fake_model_dir(tmp_path)
    h = start_server(
        ["--model-path", str(model)], fake_env({"FAKE_STEP_SLEEP": "0.05"}), tmp_path / "server.log"
    )
    kids = _children(h.proc.pid)
    body = {"text": "slow", "sampling_params": {"max_new_tokens": 450}, "stream": True}
    r = requests.post(h.url + "/generate", json=body, stream=True, timeout=60)
    lines = r.iter_lines()
    next(lines)

    def drain() -> None:
        try:
            for _ in lines:
                pass
        except requests.RequestException:
            pass

    threading.Thread(target=drain, daemon=True).start()
    t0 = time.time()
    h.proc.send_signal(signal.SIGTERM)
    assert h.proc.wait(timeout=30) == 0  # a 22 s stream does not hold the shutdown
    assert time.time() - t0 < 15
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.2)
    assert not any(_alive(k) for k in kids)
    r.close()

"""Failure handling of the server processes: a crashing scheduler, killed children, a killed parent.

* A scheduler exception: the in-flight request fails with 503, ``/health`` turns 503, the
  traceback is logged, and the server process exits with a non-zero code (no hang).
* A hung scheduler step: the watchdog (``--watchdog-timeout``) ends it the same way.
* ``kill -9`` of the scheduler or of the detokenizer while streams are in flight: within seconds
  every in-flight request gets an error naming the dead process (an SSE error event then
  ``[DONE]`` on native and OpenAI streams, a 503 JSON body otherwise), new requests get 503,
  ``/health`` turns 503, and the server exits with a non-zero code; its other child exits too.
* The same kills under the offline ``Engine``: the running stream and a blocked ``generate`` raise
  ``BackendDiedError`` (a ``RuntimeError``) naming the process, later calls raise it at once,
  and ``shutdown()`` returns promptly.
* ``kill -9`` of the server's main process: its scheduler and detokenizer children exit too.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from server_crash_testutil import _child_named, _children, _children_named
from server_fixture import fake_env, make_fake_model_dir, start_server

pytestmark = pytest.mark.timeout(240)


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
    # a 1 s drain instead of the default 5 s: the endless stream outlives any drain, so what is
    # checked (it does not hold the stop; exit 0, children gone) is the same for every timeout,
    # and the stop lands well inside the 15 s bound either way
    h = start_server(
        ["--model-path", str(model), "--graceful-shutdown-timeout", "1"],
        fake_env({"FAKE_STEP_SLEEP": "0.05", "FAKE_HOLD_ON_TEXT": "[hold]"}),
        tmp_path / "server.log",
    )
    kids = _children(h.proc.pid)
    # held: the stream never ends by itself (FakeScheduler)
    body = {"text": "[hold] slow", "sampling_params": {"max_new_tokens": 450}, "stream": True}
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
    assert h.proc.wait(timeout=30) == 0  # an endless stream does not hold the shutdown
    assert time.time() - t0 < 15
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.2)
    assert not any(_alive(k) for k in kids)
    r.close()


#: Seconds within which an in-flight request must see the error after a kill (the children are
#: polled every 0.1 s; the rest is slack for a loaded 2-core machine).
ERROR_WITHIN_S = 10.0


def _post_in_thread(url: str, body: dict[str, Any], out: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        r = requests.post(url, json=body, timeout=120)
        out["status"], out["body"], out["t"] = r.status_code, r.json(), time.time()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def _first_event(resp: requests.Response) -> tuple[Any, Any]:
    """The first SSE payload of ``resp`` and the line iterator positioned after it."""
    lines = resp.iter_lines()
    for line in lines:
        if line:
            return json.loads(line.decode()[len("data: ") :]), lines
    raise AssertionError("stream ended before its first event")


def _rest(lines: Any) -> list[Any]:
    """The remaining SSE payloads of a line iterator (``"[DONE]"`` as a string)."""
    out: list[Any] = []
    for line in lines:
        if line:
            payload = line.decode()[len("data: ") :]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("victim", ["scheduler", pytest.param("detokenizer", marks=pytest.mark.slow)])
def test_kill9_of_a_child_fails_in_flight_streams_and_exits_nonzero(tmp_path: Path, victim: str):
    model = make_fake_model_dir(tmp_path)
    # a request whose prompt has "[hold]" runs until it is aborted (FakeScheduler): all three are
    # still running at the kill however slow the machine is
    env = fake_env(
        {"FAKE_STEP_SLEEP": "0.05", "SGLANG_V4_CRASH_EXIT_DELAY": "5", "FAKE_HOLD_ON_TEXT": "[hold]"}
    )
    h = start_server(["--model-path", str(model)], env, tmp_path / "server.log")
    kids = _children(h.proc.pid)
    try:
        long = {"max_new_tokens": 400}
        native = requests.post(
            h.url + "/generate",
            json={"text": "[hold] native", "sampling_params": long, "stream": True},
            stream=True,
            timeout=60,
        )
        chat = requests.post(
            h.url + "/v1/chat/completions",
            json={
                "model": "default",
                "messages": [{"role": "user", "content": "[hold] hi"}],
                "max_tokens": 400,
                "stream": True,
            },
            stream=True,
            timeout=60,
        )
        plain: dict[str, Any] = {}
        th = _post_in_thread(h.url + "/generate", {"text": "[hold] plain", "sampling_params": long}, plain)
        first, native_lines = _first_event(native)
        assert first["meta_info"]["finish_reason"] is None
        _, chat_lines = _first_event(chat)
        deadline = time.time() + 30  # the non-streaming request is running too
        while requests.get(h.url + "/server_info", timeout=10).json()["num_running_reqs"] < 3:
            assert time.time() < deadline
            time.sleep(0.05)
        pid = _child_named(h.proc.pid, victim)
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)

        rest = _rest(native_lines)
        assert time.time() - t_kill < ERROR_WITHIN_S
        assert rest[-1] == "[DONE]", rest[-3:]
        err = rest[-2]["error"]
        assert err["code"] == 503 and f"{victim} process" in err["message"] and "-9" in err["message"], err
        chat_events = _rest(chat_lines)
        assert time.time() - t_kill < ERROR_WITHIN_S
        assert chat_events[-1] == "[DONE]"
        assert (
            chat_events[-2]["error"]["code"] == 503
            and f"{victim} process" in chat_events[-2]["error"]["message"]
        )
        th.join(ERROR_WITHIN_S)
        assert plain.get("status") == 503, plain
        assert plain["t"] - t_kill < ERROR_WITHIN_S
        assert f"{victim} process" in plain["body"]["error"]["message"]

        r = requests.post(h.url + "/generate", json={"text": "after"}, timeout=30)
        assert r.status_code == 503 and "crashed" in r.json()["error"]["message"]
        assert requests.get(h.url + "/health", timeout=5).status_code == 503
        assert h.proc.wait(timeout=60) != 0
    finally:
        h.stop()
    deadline = time.time() + 15
    while time.time() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.2)
    assert not any(_alive(k) for k in kids)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("victim", ["scheduler", "detokenizer"])
def test_engine_raises_when_a_child_is_killed_mid_stream(
    tmp_path: Path, victim: str, monkeypatch: pytest.MonkeyPatch
):
    from sglang_v4 import Engine
    from sglang_v4.managers.tokenizer_manager import BackendDiedError

    model = make_fake_model_dir(tmp_path)
    monkeypatch.setenv("SGLANG_V4_SCHEDULER_CLASS", "server_fixture:FakeScheduler")
    monkeypatch.setenv("FAKE_STEP_SLEEP", "0.05")
    monkeypatch.setenv("FAKE_HOLD_ON_TEXT", "[hold]")  # both requests run until the kill
    engine = Engine(model_path=str(model))
    procs = engine._procs
    try:
        long = {"max_new_tokens": 400}
        stream = engine.generate(prompt="[hold] stream", sampling_params=long, stream=True)
        assert next(stream)["meta_info"]["finish_reason"] is None
        blocked: dict[str, Any] = {}

        def run() -> None:
            try:
                engine.generate(prompt="[hold] plain", sampling_params=long)
            except Exception as e:  # noqa: BLE001 - checked below
                blocked["error"], blocked["t"] = e, time.time()

        th = threading.Thread(target=run, daemon=True)
        th.start()
        deadline = time.time() + 30  # until the blocking request runs too
        while engine.get_server_info()["num_running_reqs"] < 2:
            assert time.time() < deadline
            time.sleep(0.05)
        pid = getattr(procs, victim).pid
        # the test process may hold other engines (conftest's session one): this one's child is
        # among its children named for the role
        assert pid in _children_named(os.getpid(), victim)
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)
        message = rf"{victim} process \(pid {pid}\) exited with code -9"
        with pytest.raises(BackendDiedError, match=message):
            for _ in stream:
                pass
        assert time.time() - t_kill < ERROR_WITHIN_S
        th.join(ERROR_WITHIN_S)
        assert isinstance(blocked.get("error"), RuntimeError), blocked
        assert blocked["t"] - t_kill < ERROR_WITHIN_S and f"{victim} process" in str(blocked["error"])
        with pytest.raises(RuntimeError, match="crashed"):
            engine.generate(prompt="after", sampling_params={"max_new_tokens": 1})
    finally:
        t0 = time.time()
        engine.shutdown()
        assert time.time() - t0 < 15
    assert not procs.scheduler.is_alive() and not procs.detokenizer.is_alive()

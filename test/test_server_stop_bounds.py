"""A stopping server is gone within ``--graceful-shutdown-timeout`` plus a small margin, whatever
its requests do.

* A server (fake scheduler) with requests that never finish (held running with a large
  ``max_new_tokens``) and one whose prompt of megabytes is still being tokenized exits with code 0
  within the timeout plus :data:`MARGIN_S` of SIGTERM; each client gets the 503 shutdown error
  (an error event on a stream) and the log has no traceback. Before, it took 9.5 s here: uvicorn
  waited for the tokenizing request's handler (then cancelled it: a traceback) and ``asyncio.run``
  for the tokenizing thread; the children were stopped one after the other and each process ran
  the interpreter's teardown (the held requests alone: the timeout plus 4 s on a loaded machine).
* :func:`sglang_v4.utils.stop_processes` stops children in parallel within its bound: two that
  take 0.8 s each to exit after SIGTERM both get the signal before either has exited, and one that
  ignores SIGTERM is killed at the deadline.

The idle server's stop time is measured by ``test_server_drain.test_real_server_stops_quietly_on_sigterm``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from server_fixture import fake_env, make_fake_model_dir, start_server
from server_process_testutil import _alive, _children

pytestmark = pytest.mark.timeout(240)

#: The drain timeout of the server under test (seconds).
TIMEOUT_S = 2.0
#: What the stop may take past the timeout: about 0.5 s here, 1 s beside one CPU hog on two cores,
#: 3 s beside two; generous for a loaded machine, and still under what waiting for the tokenizing
#: request took (9.5 s in all).
MARGIN_S = 5.0
#: A prompt that takes several seconds to tokenize (about 2 s per 4 MiB on one core).
LONG_PROMPT = "hello world, the quick brown fox. " * (16 * 1024 * 1024 // 34)


class _Call(threading.Thread):
    """One request in a thread: its status and its JSON payloads (SSE events for a stream)."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.status = 0
        self.payloads: list[Any] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with requests.post(self.url, json=self.body, stream=True, timeout=120) as r:
                self.status = r.status_code
                if not self.body.get("stream"):
                    self.payloads.append(r.json())
                    return
                for line in r.iter_lines():
                    if line:
                        payload = line.decode()[len("data: ") :]
                        self.payloads.append(payload if payload == "[DONE]" else json.loads(payload))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e


def test_requests_that_never_finish_cannot_hold_the_stop(tmp_path: Path) -> None:
    model = make_fake_model_dir(tmp_path)
    args = ["--model-path", str(model), "--graceful-shutdown-timeout", str(TIMEOUT_S)]
    args += ["--allow-auto-truncate"]  # the long prompt is tokenized (then cut), not refused
    env = fake_env({"FAKE_HOLD_ON_TEXT": "[hold]", "FAKE_STEP_SLEEP": "0.01"})
    h = start_server(args, env, tmp_path / "server.log")
    kids = _children(h.proc.pid)
    try:
        held = {"max_new_tokens": 450}  # held by the fake scheduler: never finishes
        calls = [
            _Call(h.url + "/generate", {"text": "[hold] a", "sampling_params": held, "stream": True}),
            _Call(h.url + "/generate", {"text": "[hold] b", "sampling_params": held}),
        ]
        for c in calls:
            c.start()
        deadline = time.time() + 60
        while requests.get(h.url + "/get_server_info", timeout=10).json()["num_running_reqs"] < 2:
            assert time.time() < deadline, h.log()[-3000:]
            time.sleep(0.05)
        long_call = _Call(
            h.url + "/generate", {"text": LONG_PROMPT, "sampling_params": {"max_new_tokens": 4}}
        )
        long_call.start()
        time.sleep(2.0)  # uploaded (a local 16 MiB body), now tokenizing for several seconds

        t0 = time.monotonic()
        h.proc.send_signal(signal.SIGTERM)
        try:
            code = h.proc.wait(timeout=TIMEOUT_S + 60)
        except Exception:  # noqa: BLE001 - reported below
            code = None
        took = time.monotonic() - t0
        print(f"stopped {took:.2f}s after SIGTERM (drain timeout {TIMEOUT_S}s)")
        assert code == 0, h.log()[-3000:]
        assert took < TIMEOUT_S + MARGIN_S, h.log()[-3000:]
    finally:
        h.stop()
    log = h.log()
    assert "draining 3 in-flight request(s)" in log, log[-3000:]  # the long prompt was in flight
    assert "Traceback" not in log and "Exception" not in log, log[-5000:]
    for c in [*calls, long_call]:
        c.join(30)
        assert c.error is None, c.error
    stream, plain = calls
    assert stream.payloads[-1] == "[DONE]" and "shutting down" in stream.payloads[-2]["error"]["message"]
    for c in (plain, long_call):
        assert c.status == 503 and "shutting down" in c.payloads[0]["error"]["message"], c.payloads
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.1)
    assert not any(_alive(k) for k in kids)


def _slow_to_stop(delay_s: float, ready: Any, term_at: Any, done_at: Any) -> None:
    """A child whose SIGTERM handler takes ``delay_s`` seconds (negative: it ignores SIGTERM).
    It sets ``ready`` once its handler is installed; the handler stores the ``time.monotonic()``
    (one clock for every process) of the signal in ``term_at`` and of its end in ``done_at``."""

    def on_term(signum: int, frame: Any) -> None:
        term_at.value = time.monotonic()
        time.sleep(delay_s)
        done_at.value = time.monotonic()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term if delay_s >= 0 else signal.SIG_IGN)
    ready.set()
    while True:
        time.sleep(0.05)


def test_stop_processes_stops_children_in_parallel_then_kills() -> None:
    from sglang_v4.utils import stop_processes

    ctx = mp.get_context("spawn")

    def child(delay_s: float) -> tuple[Any, Any, Any, Any]:
        ready, term_at, done_at = ctx.Event(), ctx.Value("d", 0.0), ctx.Value("d", 0.0)
        p = ctx.Process(target=_slow_to_stop, args=(delay_s, ready, term_at, done_at))
        return p, ready, term_at, done_at

    slow = [child(0.8) for _ in range(2)]
    stubborn = child(-1.0)
    for p, *_ in (*slow, stubborn):
        p.start()
    try:
        # each handler is installed (a spawned child imports this module first: seconds when loaded)
        assert all(ready.wait(120) for _, ready, _, _ in (*slow, stubborn))
        t0 = time.monotonic()
        stop_processes([p for p, *_ in slow], timeout_s=10.0)
        took = time.monotonic() - t0
        assert [p.exitcode for p, *_ in slow] == [0, 0]  # their handlers ended them: no SIGKILL
        # in parallel: both got SIGTERM before either handler ended (one after the other, the second
        # SIGTERM would come once the first child had exited), however slow the machine
        term = [t.value for _, _, t, _ in slow]
        done = [d.value for _, _, _, d in slow]
        assert 0.0 < max(term) < min(done), (term, done)
        assert took >= 0.75, took
        p, *_ = stubborn
        t0 = time.monotonic()
        stop_processes([p], timeout_s=0.5)
        took = time.monotonic() - t0
        # killed at the deadline; the upper bound (10x the deadline, generous for a loaded machine)
        # catches a stop that does not kill at its deadline
        assert p.exitcode == -signal.SIGKILL and 0.45 <= took < 5.0, (p.exitcode, took)
    finally:  # a failed check leaves no child behind (the stubborn one ignores SIGTERM)
        for p, *_ in (*slow, stubborn):
            if p.is_alive():
                p.kill()
                p.join(10)

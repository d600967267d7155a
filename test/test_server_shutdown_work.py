"""What a stopping server must end of its own, and the requests it holds before the scheduler sees
them (fake scheduler: requests held running until aborted, outputs known in advance).

* A batch running at SIGTERM is cancelled at the start of the drain: the server exits 0 well
  before ``--graceful-shutdown-timeout`` (it used to wait for the whole timeout and kept starting
  the batch's next requests after it), the answers already complete are in the output file, the
  others in the error file with ``batch_cancelled``; a temporary file store is removed.
* A profile left open (``/start_profile`` without ``/stop_profile``) is stopped and its trace
  written, on SIGTERM to the server and on SIGTERM to the whole process group (the trace used to be
  lost with the scheduler process).
* Requests held at the admission gate while generation is paused: ``/abort_request`` ends one at
  once (the abort used to be lost: it ran after ``/continue_generation``), SIGTERM fails the rest
  with a 503 at once (the drain saw nothing in flight and the HTTP server cancelled them after 5 s:
  a 500 and a traceback), and so does a crash of the scheduler (they used to wait forever).
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests
from batches_testutil import MODEL, chat_line, jsonl
from server_fixture import ServerHandle, fake_env, make_fake_model_dir, start_server

# each test starts and stops a server (12-20 s on two cores); the fast tier covers the same code in
# process: test_admitting_rids.py (the drain, requests held at the gate) and test_openai_batches.py
# (batches cancelled at the stop)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

HOLD = "[hold]"
#: The drain timeout of these servers: a stop that waits for it fails the tests' time bounds.
DRAIN_S = 60


@pytest.fixture
def started() -> Iterator[list[ServerHandle]]:
    """The servers a test starts, stopped at its end whatever happened (a failed test leaves none)."""
    handles: list[ServerHandle] = []
    yield handles
    for h in handles:
        h.stop()


def _server(
    tmp_path: Path,
    started: list[ServerHandle],
    *extra: str,
    env: dict[str, str] | None = None,
    group: bool = False,
) -> ServerHandle:
    model = make_fake_model_dir(tmp_path)
    args = [
        "--model-path",
        str(model),
        "--served-model-name",
        MODEL,
        "--graceful-shutdown-timeout",
        str(DRAIN_S),
    ]
    args += extra
    e = fake_env({"FAKE_HOLD_ON_TEXT": HOLD, "FAKE_STEP_SLEEP": "0.01", **(env or {})})
    h = start_server(args, e, tmp_path / "server.log", new_session=group)
    started.append(h)
    return h


def _wait_exit(h: ServerHandle, within_s: float) -> float:
    """Seconds the server took to exit (asserts exit code 0 within ``within_s``)."""
    t0 = time.time()
    try:
        code = h.proc.wait(timeout=within_s)
    except Exception:  # noqa: BLE001 - reported below
        h.proc.kill()
        raise AssertionError(f"the server did not exit within {within_s}s:\n{h.log()[-3000:]}") from None
    assert code == 0, h.log()[-3000:]
    return time.time() - t0


def _running(h: ServerHandle) -> int:
    return int(requests.get(h.url + "/get_server_info", timeout=10).json()["num_running_reqs"])


def _wait(cond: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.time() + timeout_s
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize("store", ["storage_path", "temporary"])
def test_sigterm_cancels_a_running_batch(tmp_path: Path, started: list[ServerHandle], store: str) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    storage = tmp_path / "files"
    extra = ["--file-storage-path", str(storage)] if store == "storage_path" else []
    h = _server(tmp_path, started, *extra, env={"TMPDIR": str(tmpdir)})
    client = openai.OpenAI(base_url=h.url + "/v1", api_key="x", max_retries=0, timeout=30)
    quick = [chat_line(f"quick{i}", f"question {i}", max_tokens=3) for i in range(2)]
    held = [chat_line(f"held{i}", f"{HOLD} question {i}", max_tokens=50) for i in range(2)]
    f = client.files.create(file=("in.jsonl", io.BytesIO(jsonl(quick + held))), purpose="batch")
    directory = storage if store == "storage_path" else Path(glob.glob(str(tmpdir / "sglang_v4_files_*"))[0])
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")

    def progressed() -> bool:
        counts = client.batches.retrieve(b.id).request_counts
        return counts is not None and counts.completed == 2 and _running(h) == 2

    _wait(progressed, "the quick requests done and the held ones running")
    h.proc.send_signal(signal.SIGTERM)
    took = _wait_exit(h, DRAIN_S / 3)
    log = h.log()
    assert "Cancelled 1 running batch(es)" in log and "Traceback" not in log, log[-3000:]
    assert took < DRAIN_S / 3
    if store == "temporary":
        assert not directory.exists()  # removed with the store
        return
    # the input file, the output file (the answers complete), the error file (the cancelled ones)
    files = {p.name: [json.loads(x) for x in p.read_text().splitlines()] for p in directory.iterdir()}
    assert f.id in files and len(files) == 3, sorted(files)
    outs = [rows for name, rows in files.items() if name != f.id]
    by_kind = {("error" if rows[0]["error"] else "output"): rows for rows in outs}
    assert sorted(r["custom_id"] for r in by_kind["output"]) == ["quick0", "quick1"]
    assert all(r["response"]["status_code"] == 200 for r in by_kind["output"])
    assert sorted(r["custom_id"] for r in by_kind["error"]) == ["held0", "held1"]
    assert {r["error"]["code"] for r in by_kind["error"]} == {"batch_cancelled"}


@pytest.mark.parametrize("how", ["sigterm", "sigterm_to_group"])
def test_open_profile_is_written_at_sigterm(tmp_path: Path, started: list[ServerHandle], how: str) -> None:
    h = _server(tmp_path, started, group=how == "sigterm_to_group")
    out_dir = tmp_path / "profile"
    r = requests.post(h.url + "/start_profile", json={"output_dir": str(out_dir)}, timeout=30)
    assert r.status_code == 200, r.text
    body = {"text": "x", "sampling_params": {"max_new_tokens": 4}}
    assert requests.post(h.url + "/generate", json=body, timeout=30).status_code == 200
    if how == "sigterm":
        h.proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(h.proc.pid, signal.SIGTERM)
    _wait_exit(h, 30)
    traces = list(out_dir.glob("*-TP-0.trace.json.gz"))
    assert len(traces) == 1, (sorted(out_dir.iterdir()) if out_dir.exists() else None, h.log()[-3000:])
    with gzip.open(traces[0]) as fh:
        events = json.load(fh)["traceEvents"]
    assert sum(e.get("name") == "scheduler_step" for e in events) >= 4  # the request's steps


class _Call(threading.Thread):
    """One request in a thread: its status, body (JSON or the SSE payloads) and when it ended."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.status = 0
        self.payloads: list[Any] = []
        self.ended = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with requests.post(self.url, json=self.body, stream=True, timeout=90) as r:
                self.status = r.status_code
                if r.headers.get("content-type", "").startswith("text/event-stream"):
                    for line in r.iter_lines():
                        if line:
                            payload = line.decode()[len("data: ") :]
                            self.payloads.append(payload if payload == "[DONE]" else json.loads(payload))
                else:
                    self.payloads.append(r.json())
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        self.ended = time.time()


def _held_calls(h: ServerHandle) -> dict[str, _Call]:
    """Three requests sent while generation is paused (held at the admission gate)."""
    sp = {"max_new_tokens": 4}
    calls = {
        "native_stream": _Call(
            h.url + "/generate", {"text": "a", "rid": "n1", "sampling_params": sp, "stream": True}
        ),
        "native": _Call(h.url + "/generate", {"text": "b", "rid": "n2", "sampling_params": sp}),
        "chat_stream": _Call(
            h.url + "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "c"}], "max_tokens": 4, "stream": True},
        ),
    }
    for c in calls.values():
        c.start()
    time.sleep(1.0)  # they reach the gate (nothing they could do would end them meanwhile)
    assert not any(c.ended for c in calls.values())
    return calls


def test_requests_held_while_paused_are_aborted_and_failed_at_sigterm(
    tmp_path: Path, started: list[ServerHandle]
) -> None:
    h = _server(tmp_path, started)
    r = requests.post(h.url + "/pause_generation", json={"mode": "abort"}, timeout=30)
    assert r.status_code == 200, r.text
    calls = _held_calls(h)
    t0 = time.time()
    assert requests.post(h.url + "/abort_request", json={"rid": "n2"}, timeout=30).status_code == 200
    calls["native"].join(20)
    native = calls["native"]
    assert native.ended and native.ended - t0 < 10, "the abort of a held request was lost"
    assert native.status == 200
    # what the scheduler answers for a queued request it aborts (SGLang's message), no token
    meta = native.payloads[0]["meta_info"]
    assert meta["finish_reason"] == {
        "type": "abort",
        "message": "Abort in waiting queue",
        "status_code": None,
        "err_type": None,
    }
    assert meta["completion_tokens"] == 0 and meta["prompt_tokens"] == 1
    assert native.payloads[0]["output_ids"] == []
    t1 = time.time()
    h.proc.send_signal(signal.SIGTERM)
    for name in ("native_stream", "chat_stream"):
        c = calls[name]
        c.join(30)
        assert c.ended and c.ended - t1 < 10, name
        assert c.error is None and c.status == 503, (name, c.status, c.payloads, c.error)
        body = c.payloads[0]
        assert body["error"]["code"] == 503 and "shutting down" in body["error"]["message"], body
    _wait_exit(h, 30)
    log = h.log()
    assert "Generation is paused: failed 2 request(s) at once." in log, log[-3000:]
    assert "Traceback" not in log and "Exception" not in log, log[-3000:]


def test_requests_held_while_paused_fail_when_the_scheduler_dies(
    tmp_path: Path, started: list[ServerHandle]
) -> None:
    from server_crash_testutil import _child_named

    h = _server(tmp_path, started)
    r = requests.post(h.url + "/pause_generation", json={"mode": "in_place"}, timeout=30)
    assert r.status_code == 200, r.text
    calls = _held_calls(h)
    t0 = time.time()
    os.kill(_child_named(h.proc.pid, "scheduler"), signal.SIGKILL)
    for name, c in calls.items():
        c.join(30)
        assert c.ended and c.ended - t0 < 10, name
        assert c.error is None and c.status == 503, (name, c.status, c.payloads, c.error)
        assert "crashed" in json.dumps(c.payloads[0]), (name, c.payloads)
    assert h.proc.wait(timeout=30) == 1


def test_engine_shutdown_writes_an_open_profile(tmp_path: Path) -> None:
    """The offline ``Engine`` stops its scheduler with SIGTERM: the scheduler writes the trace of a
    profile still open before it exits."""
    from server_fixture import fake_engine

    out_dir = tmp_path / "profile"
    with fake_engine(make_fake_model_dir(tmp_path)) as eng:
        eng.start_profile(output_dir=str(out_dir))
        assert (
            eng.generate(prompt="hi", sampling_params={"max_new_tokens": 3})["meta_info"]["completion_tokens"]
            == 3
        )
    traces = list(out_dir.glob("*-TP-0.trace.json.gz"))
    assert len(traces) == 1, sorted(out_dir.iterdir()) if out_dir.exists() else None
    with gzip.open(traces[0]) as fh:
        assert sum(e.get("name") == "scheduler_step" for e in json.load(fh)["traceEvents"]) >= 3

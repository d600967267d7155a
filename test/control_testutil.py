"""Helpers of the runtime-control route tests (``test_server_control_routes``,
``test_server_update_weights``): native requests to a running server, its scheduler's counters,
a call on a thread, and the rest of an SSE stream being read.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import requests
from server_fixture import ServerHandle, sse_events

HOLD = "[hold]"  # FakeScheduler's FAKE_HOLD_ON_TEXT: such a request runs until it is aborted


def post(server: ServerHandle, path: str, body: Any = None, timeout: float = 120) -> requests.Response:
    """``POST server.url + path`` with the JSON ``body`` (no API key)."""
    return requests.post(server.url + path, json=body, timeout=timeout)


def generate(server: ServerHandle, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON answer of a ``/generate`` that must succeed (200)."""
    r = post(server, "/generate", body)
    assert r.status_code == 200, r.text
    return r.json()


def native_error(r: requests.Response, field: str) -> str:
    """The message of a native 400 that names ``field``."""
    assert r.status_code == 400, r.text
    msg = r.json()["error"]["message"]
    assert field in msg, msg
    return msg


def running_reqs(server: ServerHandle) -> int:
    """The scheduler's running requests (``/get_server_info``'s ``num_running_reqs``)."""
    return int(requests.get(server.url + "/get_server_info", timeout=10).json()["num_running_reqs"])


def scheduler_steps(server: ServerHandle) -> int:
    """Steps the fake scheduler has run."""
    return int(requests.get(server.url + "/get_server_info", timeout=10).json()["num_steps"])


def in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``fn()`` on a daemon thread; its result lands in ``box["out"]`` of the returned
    ``(thread, box)``."""
    box: dict[str, Any] = {}

    def run() -> None:
        box["out"] = fn()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def sse_events_rest(lines: Any) -> list[Any]:
    """The rest of an SSE stream already being read (``sse_events`` on an iterator)."""

    class _Resp:
        def iter_lines(self, decode_unicode: bool = False) -> Any:
            return lines

    return sse_events(_Resp())  # type: ignore[arg-type]


def hold_stream(
    server: ServerHandle, text: str = "[hold] a long story"
) -> tuple[str, threading.Thread, list[bytes]]:
    """Start a streamed ``/generate`` of a ``[hold]`` prompt on the fake server (it runs until
    aborted); returns its rid, the reading thread and the SSE data lines read so far (at least
    one: it has started)."""
    rid = f"held-{uuid.uuid4().hex}"
    body = {"text": text, "rid": rid, "stream": True, "sampling_params": {"max_new_tokens": 50}}
    lines: list[bytes] = []

    def read() -> None:
        with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
            lines.extend(line for line in r.iter_lines() if line.startswith(b"data: {"))

    t = threading.Thread(target=read)
    t.start()
    deadline = time.time() + 30
    while not lines and time.time() < deadline:
        time.sleep(0.05)
    assert lines, "the held request never started"
    return rid, t, lines

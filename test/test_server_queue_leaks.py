"""Requests that end before their first output, at the queue: nothing stays in flight, no page leaks.

A CPU server on the embedded model with a queue of 2 (``--max-queued-requests 2``) and 2 running
requests at most takes rounds of mixed bursts: native ``/generate``, OpenAI chat and completions,
streaming and not, ``n = 2`` requests, some refused because the queue is full (503, SGLang's
message), some aborted while queued or running (``/abort_request`` by ``rid``, a child of an
``n = 2`` request by its ``rid_k``), some whose client goes away (before the first chunk of a
stream, during a non-streamed request), the rest finishing. After every round, once the server is
idle: ``/get_load`` and ``/metrics`` report 0 running and 0 queued requests, and after
``/flush_cache`` every KV pool is back to its value at start (``/get_server_info``). Then
``/pause_generation`` (abort mode, which waits until the tokenizer manager's in-flight table is
empty) answers within seconds, and SIGTERM drains 0 requests and exits 0 well before the drain
timeout. Before requests that ended without an output left the table (SGLang's tokenizer manager
keeps the same table), both waited on the stale entries: the pause hung and the drain ran its whole
timeout.
"""

from __future__ import annotations

import json
import random
import re
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests
from server_fixture import ServerHandle, real_env, start_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DRAIN_S = 60
ROUNDS = 3
BURST = 80


def _pools(h: ServerHandle) -> dict[str, Any]:
    return requests.get(h.url + "/get_server_info", timeout=30).json()["kv_pool"]


def _gauge(text: str, name: str) -> float:
    m = re.search(rf"^sglang:{name}\{{[^}}]*\}} (\S+)$", text, re.M)
    assert m is not None, name
    return float(m.group(1))


class _Client(threading.Thread):
    """One request of a burst: ``kind`` says the route, streaming, and how it ends early."""

    def __init__(self, url: str, kind: str, i: int, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.url, self.kind, self.i = url, kind, i
        self.delay = rng.random() * 2.0
        self.abort_after = rng.random() * 0.6
        self.max_new = rng.choice([4, 16, 40])
        self.outcome = ""

    def _body(self, rid: str) -> tuple[str, dict[str, Any]]:
        stream = "stream" in self.kind
        sp = {"max_new_tokens": self.max_new, "temperature": 0, "ignore_eos": True}
        if self.kind.startswith("gen"):
            if "n2" in self.kind:
                sp["n"] = 2
            return "/generate", {
                "text": f"burst {self.i} " * 8,
                "rid": rid,
                "sampling_params": sp,
                "stream": stream,
            }
        if self.kind.startswith("chat"):
            msgs = [{"role": "user", "content": f"burst {self.i}"}]
            return "/v1/chat/completions", {
                "messages": msgs,
                "max_tokens": self.max_new,
                "temperature": 0,
                "stream": stream,
                "rid": rid,
            }
        return "/v1/completions", {"prompt": f"burst {self.i}", "max_tokens": self.max_new, "stream": stream}

    def run(self) -> None:
        time.sleep(self.delay)
        rid = uuid.uuid4().hex
        path, body = self._body(rid)
        if "abort" in self.kind:
            target = f"{rid}_1" if "n2" in self.kind else rid

            def abort() -> None:
                time.sleep(self.abort_after)
                requests.post(self.url + "/abort_request", json={"rid": target}, timeout=30)

            threading.Thread(target=abort, daemon=True).start()
        gone = "gone" in self.kind
        read_timeout = 0.3 if gone and "stream" not in self.kind else 120
        try:
            with requests.post(self.url + path, json=body, stream=True, timeout=(10, read_timeout)) as r:
                if r.status_code == 503:
                    msg = json.dumps(r.json())
                    self.outcome = "refused" if "The request queue is full." in msg else f"503 {msg[:200]}"
                    return
                if gone and "stream" in self.kind:
                    self.outcome = f"gone {r.status_code}"  # closed before reading the first chunk
                    return
                text = r.content.decode()
                self.outcome = f"{r.status_code} {'abort' if 'abort' in text.lower() else 'done'}"
        except requests.exceptions.ReadTimeout:
            self.outcome = "gone timeout"


KINDS = [
    "gen",
    "gen_stream",
    "gen_n2",
    "gen_stream_n2_abort",
    "gen_n2_abort",
    "chat",
    "chat_stream",
    "cmpl",
    "cmpl_stream",
    "gen_abort",
    "gen_stream_abort",
    "chat_abort",
    "chat_stream_abort",
    "gen_stream_gone",
    "gen_gone",
    "chat_stream_gone",
]


def _wait_idle(h: ServerHandle, timeout_s: float = 60.0) -> tuple[list[Any], str]:
    deadline = time.time() + timeout_s
    while True:
        load = requests.get(h.url + "/get_load", timeout=30).json()
        metrics = requests.get(h.url + "/metrics", timeout=30).text
        if load[0]["num_reqs"] == 0 and _gauge(metrics, "num_running_reqs") == 0:
            return load, metrics
        assert time.time() < deadline, load
        time.sleep(0.2)


def test_requests_ending_before_their_first_output_leave_nothing_in_flight(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--max-queued-requests", "2", "--max-running-requests", "2"]
    args += ["--max-total-tokens", "2048", "--enable-metrics", "--graceful-shutdown-timeout", str(DRAIN_S)]
    h = start_server(args, real_env(), tmp_path / "server.log", timeout_s=300)
    try:
        assert requests.post(h.url + "/flush_cache", timeout=30).status_code == 200
        start = _pools(h)
        assert all(p["used"] == 0 for p in start.values()), start
        rng = random.Random(12)
        outcomes: Counter[str] = Counter()
        for _ in range(ROUNDS):
            clients = [_Client(h.url, rng.choice(KINDS), i, rng) for i in range(BURST)]
            for c in clients:
                c.start()
            for c in clients:
                c.join(180)
            outcomes.update(c.outcome for c in clients)
            assert not any(c.is_alive() for c in clients)
            bad = [c.outcome for c in clients if c.outcome.startswith("5") or not c.outcome]
            assert not bad, bad  # 503 only for a full queue (counted as "refused")
            # at once (before other traffic lets the garbage collector run): abort mode waits until
            # the in-flight table is empty
            try:  # a leaked entry makes it wait forever; 60 s leaves room for a loaded box
                r = requests.post(h.url + "/pause_generation", json={"mode": "abort"}, timeout=60)
            except requests.exceptions.ReadTimeout:
                raise AssertionError("/pause_generation hung: requests left in the in-flight table") from None
            assert r.status_code == 200, r.text
            assert requests.post(h.url + "/continue_generation", json={}, timeout=30).status_code == 200
            load, metrics = _wait_idle(h)
            assert load == [{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}]
            assert _gauge(metrics, "num_queue_reqs") == 0 and _gauge(metrics, "num_running_reqs") == 0
            assert requests.post(h.url + "/flush_cache", timeout=30).status_code == 200
            assert _pools(h) == start
        # every way of ending was taken (the seed's bursts refuse, abort, lose clients and finish)
        for way in ("refused", "200 done", "200 abort", "gone"):
            assert any(o.startswith(way) for o in outcomes), (way, outcomes)
        h.proc.send_signal(signal.SIGTERM)
        assert h.proc.wait(timeout=DRAIN_S / 2) == 0, h.log()[-3000:]
        log = h.log()
        assert "SIGTERM received: draining 0 in-flight request(s)" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
    finally:
        h.stop()

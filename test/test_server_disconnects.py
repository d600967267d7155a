"""Client disconnects and aborts on the HTTP server (model-free FakeScheduler with
``--enable-metrics``): what a request reusing a given-up ``rid`` receives, what the metrics count
for a request whose client went away, and SGLang's ``/flush_cache?timeout=T``.

A ``"[hold]"`` prompt makes the fake model emit one token and then hold the request until it is
aborted, so a disconnect always lands on a running request. Expected texts come from
``transformers``' decoding of ``FAKE_TEXT``; metrics are read with ``prometheus_client``'s parser.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from server_fixture import (
    fake_env,
    fake_output_text,
    hf_auto_tokenizer,
    make_fake_model_dir,
    start_server,
)

pytestmark = pytest.mark.timeout(300)
HOLD = "[hold]"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - server_fixture.ServerHandle
    root: Path = tmp_path_factory.mktemp("disconnects")
    args = ["--model-path", str(make_fake_model_dir(root)), "--enable-metrics"]
    h = start_server(
        args, fake_env({"FAKE_STEP_SLEEP": "0.01", "FAKE_HOLD_ON_TEXT": HOLD}), root / "server.log"
    )
    yield h
    assert h.stop() == 0, h.log()[-3000:]


@pytest.fixture(scope="module")
def expected_text() -> Any:
    tok = hf_auto_tokenizer()
    return lambda n: fake_output_text(tok, n)


def gen(server, body: dict[str, Any]) -> requests.Response:
    return requests.post(server.url + "/generate", json=body, timeout=60)


def _counters(server) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(server.url + "/metrics", timeout=30).text
    found = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    names = (
        "sglang:num_aborted_requests_total",
        "sglang:num_requests_total",
        "sglang:generation_tokens_total",
    )
    return {name: found.get(name, 0.0) for name in names}  # a counter never incremented is absent


def test_disconnected_request_is_counted_as_aborted(server) -> None:
    """``sglang:num_aborted_requests`` counts a request whose client went away (as its help text
    says), and ``sglang:num_requests`` counts it finished; before, the scheduler's final abort
    output arrived after the request was forgotten and neither counter moved. (First in this
    module, so that no other test's abort lands in its counts.)"""
    before = _counters(server)
    body = {"text": f"{HOLD} count me", "sampling_params": {"max_new_tokens": 400}, "stream": True}
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
        assert next(line for line in r.iter_lines() if line).startswith(b"data:")
    deadline = time.time() + 30
    while time.time() < deadline:
        after = _counters(server)
        if after["sglang:num_aborted_requests_total"] > before["sglang:num_aborted_requests_total"]:
            break
        time.sleep(0.1)
    assert after["sglang:num_aborted_requests_total"] == before["sglang:num_aborted_requests_total"] + 1
    assert after["sglang:num_requests_total"] == before["sglang:num_requests_total"] + 1
    assert after["sglang:generation_tokens_total"] >= before["sglang:generation_tokens_total"] + 1


def test_rid_reused_right_after_a_disconnect(server, expected_text):
    """A request reusing the ``rid`` of a stream whose client just went away gets its own output;
    before, it got the old request's final abort output (its text, ``finish_reason`` abort), which
    the scheduler sent after the client had gone."""
    for k in range(4):
        rid = f"reused-{k}"
        body = {"text": f"{HOLD} old", "rid": rid, "sampling_params": {"max_new_tokens": 400}, "stream": True}
        with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
            assert next(line for line in r.iter_lines() if line).startswith(b"data:")
        out = gen(server, {"text": "new", "rid": rid, "sampling_params": {"max_new_tokens": 5}})
        assert out.status_code == 200, out.text
        meta = out.json()["meta_info"]
        assert (out.json()["text"], meta["id"]) == (expected_text(5), rid)
        assert meta["finish_reason"] == {"type": "length", "length": 5}


def test_flush_cache_timeout_waits_for_idle(server):
    """SGLang's ``/flush_cache?timeout=T``: a busy server flushes as soon as it is idle within
    ``T`` seconds (200), else answers 400 after ``T``; a bad ``timeout`` is a 400 naming it.
    Before, the parameter was ignored: a busy server answered 400 at once."""
    for bad in ("-1", "abc", "nan"):
        r = requests.post(server.url + "/flush_cache", params={"timeout": bad}, timeout=10)
        assert r.status_code == 400 and "timeout" in r.text, (bad, r.text)
    body = {"text": f"{HOLD} busy", "sampling_params": {"max_new_tokens": 480}, "stream": True}
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
        lines = r.iter_lines()  # kept referenced: a dropped generator closes the connection
        assert next(lines).startswith(b"data:")
        t0 = time.monotonic()
        f = requests.post(server.url + "/flush_cache", params={"timeout": "0.5"}, timeout=10)
        assert f.status_code == 400 and time.monotonic() - t0 >= 0.5, f.text
        results: dict[str, requests.Response] = {}
        t = threading.Thread(
            target=lambda: results.update(
                f=requests.post(server.url + "/flush_cache", params={"timeout": "30"}, timeout=60)
            )
        )
        t.start()
        time.sleep(0.5)
        assert t.is_alive()  # still waiting: the held request runs
    t.join(40)  # the stream closed: its request is aborted, the server goes idle, the flush runs
    assert results["f"].status_code == 200 and results["f"].text.startswith("Cache flushed."), results[
        "f"
    ].text


@pytest.mark.parametrize("route", ["/generate", "/v1/chat/completions", "/v1/completions"])
def test_client_gone_from_an_n3_stream_aborts_every_sample(server, route: str) -> None:
    """vllm#14326: a client that leaves an ``n > 1`` stream (Ctrl-C) left the samples running.
    Here every sample of a held ``n = 3`` stream stops: no request running, every page back."""
    base = requests.get(server.url + "/get_server_info", timeout=10).json()["kv_pool"]["used_pages"]
    if route == "/generate":
        body: dict[str, Any] = {"text": f"{HOLD} n3", "sampling_params": {"max_new_tokens": 400, "n": 3}}
    elif route == "/v1/chat/completions":
        body = {"messages": [{"role": "user", "content": f"{HOLD} n3"}], "max_tokens": 400, "n": 3}
    else:
        body = {"prompt": f"{HOLD} n3", "max_tokens": 400, "n": 3}
    with requests.post(server.url + route, json={**body, "stream": True}, stream=True, timeout=60) as r:
        lines = r.iter_lines()  # kept referenced: a dropped generator closes the connection
        assert next(line for line in lines if line).startswith(b"data:")
        deadline = time.time() + 20
        while requests.get(server.url + "/get_server_info", timeout=10).json()["num_running_reqs"] < 3:
            assert time.time() < deadline, "the three samples never ran together"
            time.sleep(0.05)
    deadline = time.time() + 30
    while True:
        info = requests.get(server.url + "/get_server_info", timeout=10).json()
        if info["num_running_reqs"] == 0 and info["kv_pool"]["used_pages"] == base:
            break
        assert time.time() < deadline, info
        time.sleep(0.05)

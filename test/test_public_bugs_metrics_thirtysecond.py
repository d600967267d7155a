"""A thirty-second set of public bug reports, replayed against ``GET /metrics`` (``--enable-metrics``)
of the shared fake-model server (conftest's ``secured_fake_server``: ``launch_server`` on
``server_fixture.FakeScheduler``, served name ``fake-v4``, a ``[hold]`` prompt runs until aborted):
requests with ``n > 1``, requests refused with 400 before reaching the scheduler, a streamed request
whose client went away, concurrent requests, and SGLang's HTTP-level families. Each test names its
report and compares counter deltas between its own scrapes.

Fault found and fixed: SGLang's server (``--enable-metrics``) exports the HTTP-level families
``sglang:http_requests_total`` / ``sglang:http_responses_total`` (by ``endpoint``, ``method`` and
``status_code``), ``sglang:http_requests_active`` and ``sglang:routing_keys_active``; this server had
none of them, so a request refused with 400 (or 401, 404) left no trace on ``/metrics`` at all.
They are now kept by an ASGI middleware (``entrypoints/http_request_metrics.py``).

Oracles: ``prometheus_client``'s own text parser; hand counts of the requests each test sends and of
the tokens their own responses report (``meta_info`` / ``usage``); SGLang's names, types and labels
(its ``observability/http_request_metrics.py``) and the HTTP statuses the client received.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.timeout(120)

Key = tuple[str, tuple[tuple[str, str], ...]]


def _scrape(server: Any) -> tuple[dict[Key, float], dict[str, str]]:
    """Every sample of ``/metrics`` (``(name, sorted labels but model_name)`` -> value) and every
    family's type, read with prometheus_client's parser; each sample must carry the served name."""
    text = requests.get(server.url + "/metrics", timeout=30).text
    values: dict[Key, float] = {}
    types: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            labels = dict(s.labels)
            assert labels.pop("model_name") == "fake-v4", s
            key = (s.name, tuple(sorted(labels.items())))
            assert key not in values, key  # each series once per page
            values[key] = s.value
    return values, types


def _get(values: dict[Key, float], name: str, **labels: str) -> float:
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


def _delta(after: dict[Key, float], before: dict[Key, float], name: str, **labels: str) -> float:
    return _get(after, name, **labels) - _get(before, name, **labels)


def _idle(server: Any, timeout_s: float = 30.0) -> dict[Key, float]:
    """A scrape once no request runs, queues or is being served over HTTP but the scrape."""
    deadline = time.time() + timeout_s
    while True:
        v, _ = _scrape(server)
        busy = _get(v, "sglang:num_running_reqs") + _get(v, "sglang:num_queue_reqs")
        http = sum(
            x
            for (n, lab), x in v.items()
            if n == "sglang:http_requests_active" and ("endpoint", "/metrics") not in lab
        )
        if (busy == 0 and http == 0) or time.time() > deadline:
            return v
        time.sleep(0.05)


def _assert_monotonic(after: dict[Key, float], before: dict[Key, float]) -> None:
    """No counter (``_total``) or histogram ``_count`` / ``_sum`` / ``_bucket`` went down."""
    for key, old in before.items():
        name = key[0]
        if name.endswith(("_total", "_count", "_bucket")) or (name.endswith("_sum") and "seconds" in name):
            assert after.get(key, 0.0) >= old, (key, old, after.get(key))


def test_sglang_6140_n_samples_count_n_requests_not_n_plus_one(secured_fake_server: Any) -> None:
    """sgl-project/sglang#6140 (``n > 1`` made ``num_requests_total`` count ``n + 1``: a hidden
    prefix-caching request was counted) and vllm-project/vllm#5250 (``request_success_total``
    doubled for one request with ``n = 2``). Expected, by hand count: one ``/generate`` with
    ``n = 3`` adds exactly 3 to ``num_requests_total`` / e2e / TTFT counts (one per sample, as
    SGLang), its generated tokens equal the samples' own ``completion_tokens``, and the HTTP
    request itself is counted once."""
    server = secured_fake_server
    before = _idle(server)
    body = {"text": "metrics n three", "sampling_params": {"max_new_tokens": 4, "n": 3}}
    r = requests.post(server.url + "/generate", json=body, headers=server.headers(), timeout=60)
    assert r.status_code == 200, r.text
    outs = r.json()
    assert isinstance(outs, list) and len(outs) == 3
    after = _idle(server)
    lab = {"is_streaming": "false"}
    assert _delta(after, before, "sglang:num_requests_total", **lab) == 3
    assert _delta(after, before, "sglang:e2e_request_latency_seconds_count", **lab) == 3
    assert _delta(after, before, "sglang:time_to_first_token_seconds_count", **lab) == 3
    gen = sum(o["meta_info"]["completion_tokens"] for o in outs)
    assert _delta(after, before, "sglang:generation_tokens_total", **lab) == gen
    prompt = sum(o["meta_info"]["prompt_tokens"] for o in outs)
    assert _delta(after, before, "sglang:prompt_tokens_total", **lab) == prompt
    assert _delta(after, before, "sglang:http_requests_total", endpoint="/generate", method="POST") == 1
    assert (
        _delta(
            after,
            before,
            "sglang:http_responses_total",
            endpoint="/generate",
            method="POST",
            status_code="200",
        )
        == 1
    )
    _assert_monotonic(after, before)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/generate",
            {"text": "metrics refused", "sampling_params": {"max_new_tokens": 4, "temperature": -1}},
        ),
        (
            "/v1/chat/completions",
            {"model": "fake-v4", "messages": [{"role": "user", "content": "hi"}], "temperature": -1},
        ),
        ("/v1/completions", {"model": "fake-v4", "prompt": "hi", "max_tokens": 4, "n": 0}),
    ],
)
def test_apollo_router_2064_requests_refused_with_400_are_counted(
    secured_fake_server: Any, path: str, body: dict[str, Any]
) -> None:
    """apollographql/router#2064 (requests refused with 400 were missing from the Prometheus
    metrics) and kekzl/imp#1579 (only 5xx counted, every designed 4xx rejection invisible).
    Expected: a request refused with 400 adds 1 to SGLang's ``sglang:http_requests_total`` and to
    ``sglang:http_responses_total{status_code="400"}`` of its route, and nothing to the generation
    families (it never reached the scheduler), which a following valid request still counts
    exactly once."""
    server = secured_fake_server
    before = _idle(server)
    r = requests.post(server.url + path, json=body, headers=server.headers(), timeout=60)
    assert r.status_code == 400, r.text
    mid = _idle(server)
    assert _delta(mid, before, "sglang:http_requests_total", endpoint=path, method="POST") == 1
    assert (
        _delta(mid, before, "sglang:http_responses_total", endpoint=path, method="POST", status_code="400")
        == 1
    )
    for streaming in ("false", "true"):
        for name in ("sglang:num_requests_total", "sglang:e2e_request_latency_seconds_count"):
            assert _delta(mid, before, name, is_streaming=streaming) == 0, name
    assert _delta(mid, before, "sglang:num_aborted_requests_total") == 0
    ok = {"text": "metrics after refusal", "sampling_params": {"max_new_tokens": 2}}
    r = requests.post(server.url + "/generate", json=ok, headers=server.headers(), timeout=60)
    assert r.status_code == 200, r.text
    after = _idle(server)
    assert _delta(after, mid, "sglang:num_requests_total", is_streaming="false") == 1
    assert (
        _delta(after, mid, "sglang:http_responses_total", endpoint=path, method="POST", status_code="400")
        == 0
    )
    _assert_monotonic(after, before)


def test_unauthorized_request_counted_with_its_status(secured_fake_server: Any) -> None:
    """kekzl/imp#1579 (a 4xx the server is designed to answer must show in its error counts):
    a request without the API key is answered 401 and counted under that status, its route's
    template as ``endpoint``."""
    server = secured_fake_server
    before = _idle(server)
    r = requests.post(server.url + "/generate", json={"text": "x"}, timeout=30)
    assert r.status_code == 401
    after = _idle(server)
    assert (
        _delta(
            after,
            before,
            "sglang:http_responses_total",
            endpoint="/generate",
            method="POST",
            status_code="401",
        )
        == 1
    )
    assert _delta(after, before, "sglang:num_requests_total", is_streaming="false") == 0


def test_vllm_22545_gauges_return_to_zero_after_a_client_disconnect(secured_fake_server: Any) -> None:
    """vllm-project/vllm#22545 (after a load whose requests were all aborted the running /
    waiting / KV-usage stats stayed at their last values) and Ptrskay3/axum-prometheus#7 (the
    pending-requests gauge leaked when the client connection was aborted). Expected: a streamed
    ``[hold]`` request whose client disconnects after its first token leaves
    ``num_running_reqs``, ``num_queue_reqs``, ``num_used_tokens``, ``token_usage`` and
    ``http_requests_active`` at 0; its first token was observed once in TTFT
    (``is_streaming="true"``) and its end once in e2e; no counter went down."""
    server = secured_fake_server
    before = _idle(server)
    body = {"text": "[hold] metrics disconnect", "sampling_params": {"max_new_tokens": 64}, "stream": True}
    with requests.post(
        server.url + "/generate", json=body, headers=server.headers(), stream=True, timeout=60
    ) as r:
        assert r.status_code == 200
        lines = r.iter_lines()  # kept open: closing the generator closes the connection
        first = next(x for x in lines if x.startswith(b"data:"))
        assert json.loads(first[5:])["meta_info"]["completion_tokens"] >= 1
        mid, _ = _scrape(server)
        assert _get(mid, "sglang:num_running_reqs") == 1
        assert _get(mid, "sglang:http_requests_active", endpoint="/generate", method="POST") == 1
        lines.close()
    deadline = time.time() + 30
    while True:  # the abort reaches the scheduler after the connection closes
        after = _idle(server)
        if _delta(after, before, "sglang:num_aborted_requests_total") >= 1 or time.time() > deadline:
            break
        time.sleep(0.05)
    for gauge in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:num_used_tokens",
        "sglang:token_usage",
    ):
        assert _get(after, gauge) == 0, gauge
    assert _get(after, "sglang:http_requests_active", endpoint="/generate", method="POST") == 0
    assert _delta(after, before, "sglang:num_aborted_requests_total") == 1
    assert _delta(after, before, "sglang:time_to_first_token_seconds_count", is_streaming="true") == 1
    assert _delta(after, before, "sglang:e2e_request_latency_seconds_count", is_streaming="true") == 1
    _assert_monotonic(after, before)


def test_client_python_751_concurrent_requests_all_counted(secured_fake_server: Any) -> None:
    """prometheus/client_python#751 (a request counter read lower than the requests served,
    under concurrent workers). Expected, by hand count: 6 concurrent ``/generate`` requests
    (3 streamed, 3 not) add exactly 3 to each ``is_streaming`` series of ``num_requests_total``,
    6 to ``http_requests_total`` of the route, and the sum of their own ``completion_tokens`` to
    ``generation_tokens_total``."""
    server = secured_fake_server
    before = _idle(server)
    got: list[tuple[bool, int]] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        stream = i % 2 == 1
        body = {
            "text": f"metrics concurrent {i}",
            "sampling_params": {"max_new_tokens": 2 + i},
            "stream": stream,
        }
        with requests.post(
            server.url + "/generate", json=body, headers=server.headers(), stream=stream, timeout=60
        ) as r:
            r.raise_for_status()
            if stream:
                events = [
                    json.loads(x[5:])
                    for x in r.iter_lines()
                    if x.startswith(b"data:") and x != b"data: [DONE]"
                ]
                meta = events[-1]["meta_info"]
            else:
                meta = r.json()["meta_info"]
        with lock:
            got.append((stream, int(meta["completion_tokens"])))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == 6
    after = _idle(server)
    for streaming in (False, True):
        lab = {"is_streaming": "true" if streaming else "false"}
        assert _delta(after, before, "sglang:num_requests_total", **lab) == 3
        mine = sum(c for s, c in got if s == streaming)
        assert _delta(after, before, "sglang:generation_tokens_total", **lab) == mine
    assert _delta(after, before, "sglang:http_requests_total", endpoint="/generate", method="POST") == 6
    assert _get(after, "sglang:http_requests_active", endpoint="/generate", method="POST") == 0
    _assert_monotonic(after, before)


def test_http_families_have_sglang_names_types_and_route_templates(secured_fake_server: Any) -> None:
    """apollographql/router#2064 again (the per-route request counts a dashboard reads): the
    HTTP families have SGLang's names and types (counters ``sglang:http_requests`` /
    ``sglang:http_responses``, gauges ``sglang:http_requests_active`` /
    ``sglang:routing_keys_active``), and a parameterised route is labelled with its template, not
    the value asked for (one series per route, whatever the clients send)."""
    server = secured_fake_server
    for name in ("fake-v4", "no-such-model"):
        requests.get(server.url + f"/v1/models/{name}", headers=server.headers(), timeout=30)
    values, types = _scrape(server)
    assert types["sglang:http_requests"] == "counter"
    assert types["sglang:http_responses"] == "counter"
    assert types["sglang:http_requests_active"] == "gauge"
    assert types["sglang:routing_keys_active"] == "gauge"
    endpoints = {dict(lab).get("endpoint") for (n, lab) in values if n == "sglang:http_requests_total"}
    assert not any("fake-v4" in (e or "") or "no-such-model" in (e or "") for e in endpoints), endpoints
    templ = [e for e in endpoints if e and e.startswith("/v1/models/")]
    assert len(templ) == 1 and "{" in templ[0], endpoints
    assert _get(values, "sglang:routing_keys_active") == 0


def test_unknown_paths_share_one_series(secured_fake_server: Any) -> None:
    """prometheus/docs "use labels with care" (an unbounded label value set grows the registry
    with every new value): requests to paths no route serves must not add a series per path, or a
    client probing random URLs grows ``/metrics`` without bound. Every unknown path is counted
    under the one ``endpoint="unmatched"`` series with its 404. Oracle: prometheus_client's
    parser and hand counts."""
    server = secured_fake_server
    before, _ = _scrape(server)
    paths = [f"/no-such-route-{i}" for i in range(5)]
    for p in paths:
        r = requests.get(server.url + p, headers=server.headers(), timeout=30)
        assert r.status_code == 404
    after, _ = _scrape(server)
    endpoints = {dict(lab).get("endpoint") for (n, lab) in after if n == "sglang:http_requests_total"}
    assert not any(e and e.startswith("/no-such-route-") for e in endpoints), endpoints
    assert _delta(after, before, "sglang:http_requests_total", endpoint="unmatched", method="GET") == 5
    assert (
        _delta(
            after,
            before,
            "sglang:http_responses_total",
            endpoint="unmatched",
            method="GET",
            status_code="404",
        )
        == 5
    )

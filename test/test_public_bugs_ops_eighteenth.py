"""An eighteenth set of public bug reports, replayed against operating the server: the Prometheus
``/metrics`` counters (series present at 0 before the first request, aborts counted once per
request and never after a normal finish, the token counters agreeing on an aborted request), the
health probes (``HEAD``, no API key needed), ``/v1/models``' ``created``, a client that hangs up on
a non-streamed request, and ``/flush_cache`` while a request runs. Each test names its report.

Faults found here and fixed: every counter and histogram series with labels was missing from
``/metrics`` until its first increment (so PromQL's ``rate()`` / ``increase()`` missed that first
request), ``HEAD`` on ``/health``, ``/health_generate``, ``/ready`` and ``/ping`` answered 405,
``/v1/models`` gave a new ``created`` time on every call, and a scrape of ``/metrics`` waited up
to a minute for a busy scheduler's gauges. The other reports passed as-is and
are kept as regression tests.

Fixtures: ``secured_fake_server`` (``server_fixture.FakeScheduler`` with ``--api-key``,
``--enable-metrics``, ``--served-model-name fake-v4``; a prompt holding ``[hold]`` runs until it
is aborted), an in-process ``TokenizerMetrics`` and a CPU ``Scheduler`` on the ``sched_model_dir``
checkpoint, and the app's ``/metrics`` route over a tokenizer manager whose scheduler never
answers. Oracles: ``prometheus_client``'s text parser, the ``openai`` client's own model
parser, the server's own answers to the requests counted (``meta_info``), the FakeScheduler's page
accounting, and a cold run on a fresh scheduler.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
import zmq
from server_fixture import SECURED_API_KEY, ServerHandle, wait_used_pages

pytestmark = pytest.mark.timeout(120)

HOLD = "[hold]"
MODEL = "fake-v4"


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {SECURED_API_KEY}"}


def _samples(server: ServerHandle) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics`` as ``prometheus_client``'s parser reads it:
    ``(name, sorted labels) -> value``."""
    from prometheus_client.parser import text_string_to_metric_families

    r = requests.get(server.url + "/metrics", timeout=30)
    assert r.status_code == 200, r.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(r.text)
        for s in fam.samples
    }


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sample ``name`` with ``model_name="fake-v4"`` and ``labels``; absent: 0."""
    key = (name, tuple(sorted({"model_name": MODEL, **labels}.items())))
    return samples.get(key, 0.0)


def _running(server: ServerHandle) -> float:
    return _value(_samples(server), "sglang:num_running_reqs")


def _wait_running(server: ServerHandle, want: float, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _running(server) != want:
        assert time.monotonic() < deadline, f"num_running_reqs never became {want}"
        time.sleep(0.05)


# --------------------------------------------------------------------------- /metrics


def test_labelled_counters_are_exposed_at_zero_before_the_first_request() -> None:
    """volcengine/OpenViking#4620 (and prometheus/client_java#632): a labelled counter series was
    created lazily, on its first increment, so Prometheus first scraped it at 1, never at 0, and
    ``rate()`` / ``increase()`` never counted that first event (the first abort of a quiet server
    was invisible to an alert on ``increase(sglang:num_aborted_requests_total[5m])``). Expected:
    a fresh metrics registry already exposes every counter and histogram of the per-request
    families at 0, for both ``is_streaming`` values where the family has that label, as
    ``prometheus_client``'s own parser reads the exposition."""
    from prometheus_client.parser import text_string_to_metric_families
    from sglang_v4.entrypoints.metrics import TokenizerMetrics

    text = TokenizerMetrics(MODEL).render().decode()
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    base = {"model_name": MODEL}
    want: list[tuple[str, dict[str, str]]] = []
    for streaming in ("false", "true"):
        lab = {**base, "is_streaming": streaming}
        want += [
            ("sglang:num_requests_total", lab),
            ("sglang:prompt_tokens_total", lab),
            ("sglang:generation_tokens_total", lab),
            ("sglang:e2e_request_latency_seconds_count", lab),
            ("sglang:time_to_first_token_seconds_count", lab),
            ("sglang:request_time_per_output_token_seconds_count", lab),
        ]
    want += [
        ("sglang:num_aborted_requests_total", base),
        ("sglang:num_so_requests_total", base),
        ("sglang:num_retracted_requests_total", base),
        ("sglang:cached_tokens_total", {**base, "cache_source": "device"}),
        ("sglang:inter_token_latency_seconds_count", base),
        ("sglang:time_per_output_token_seconds_count", base),
        ("sglang:prompt_tokens_histogram_count", base),
        ("sglang:uncached_prompt_tokens_histogram_count", base),
        ("sglang:generation_tokens_histogram_count", base),
    ]
    for name, labels in want:
        key = (name, tuple(sorted(labels.items())))
        assert got.get(key) == 0.0, (name, labels)


def test_abort_all_counts_every_aborted_request(secured_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#31647: ``/abort_request`` with ``abort_all`` aborted every request but
    ``sglang:num_aborted_requests_total`` went up by one. Expected: three held requests aborted by
    one ``abort_all`` each end with SGLang's abort finish reason, the counter goes up by exactly
    three (the number of requests the server answered with an abort), ``num_requests_total`` by
    three, and none is left running."""
    s = secured_fake_server
    before = _samples(s)
    finishes: list[Any] = []

    def hold(i: int) -> None:
        r = requests.post(
            s.url + "/generate",
            headers=_auth(),
            json={"text": f"{HOLD} all {i}", "sampling_params": {"max_new_tokens": 64}},
            timeout=60,
        )
        finishes.append(r.json()["meta_info"]["finish_reason"])

    threads = [threading.Thread(target=hold, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    _wait_running(s, 3)
    r = requests.post(s.url + "/abort_request", headers=_auth(), json={"abort_all": True}, timeout=30)
    assert r.status_code == 200, r.text
    for t in threads:
        t.join(60)
    assert [f["type"] for f in finishes] == ["abort"] * 3, finishes
    _wait_running(s, 0)
    after = _samples(s)
    aborted = _value(after, "sglang:num_aborted_requests_total") - _value(
        before, "sglang:num_aborted_requests_total"
    )
    done = _value(after, "sglang:num_requests_total", is_streaming="false") - _value(
        before, "sglang:num_requests_total", is_streaming="false"
    )
    assert (aborted, done) == (len(finishes), len(finishes))


def test_abort_after_a_finished_stream_is_not_counted(secured_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#37605: a cleanup abort sent after a streamed request had finished
    normally (``finish_reason`` ``length``) still raised ``sglang:num_aborted_requests_total``.
    Expected: aborting the rid of a stream that already ended leaves the abort counter as it was;
    the request counts once, as finished by its length (the stream's own last chunk)."""
    s = secured_fake_server
    before = _samples(s)
    rid = f"done-{time.monotonic_ns()}"
    r = requests.post(
        s.url + "/generate",
        headers=_auth(),
        json={"text": "hi", "rid": rid, "stream": True, "sampling_params": {"max_new_tokens": 3}},
        stream=True,
        timeout=60,
    )
    chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith(b"data: {")]
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    r = requests.post(s.url + "/abort_request", headers=_auth(), json={"rid": rid}, timeout=30)
    assert r.status_code == 200, r.text
    time.sleep(0.3)  # an abort that were counted would have reached the metrics by now
    after = _samples(s)
    for name, labels in (
        ("sglang:num_aborted_requests_total", {}),
        ("sglang:num_requests_total", {"is_streaming": "true"}),
    ):
        want = 0.0 if "aborted" in name else 1.0
        assert _value(after, name, **labels) - _value(before, name, **labels) == want, name


def test_token_counters_agree_on_a_disconnected_stream(secured_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#55634: a stream its client closed added its prompt to
    ``prompt_tokens_total`` but to none of the per-request metrics, so the two ways of billing
    prompt tokens disagreed by every abandoned request. Expected: after a client closes a
    held stream, ``prompt_tokens_total`` and ``prompt_tokens_histogram``'s sum both grew by the
    prompt length the stream's first chunk reported, the request histogram counts and
    ``num_requests_total`` by one, and ``num_aborted_requests_total`` by one."""
    s = secured_fake_server
    before = _samples(s)
    body = {"text": f"{HOLD} gone", "stream": True, "sampling_params": {"max_new_tokens": 64}}
    with requests.post(s.url + "/generate", headers=_auth(), json=body, stream=True, timeout=60) as r:
        first = next(line for line in r.iter_lines() if line.startswith(b"data: {"))
    prompt = json.loads(first[6:])["meta_info"]["prompt_tokens"]
    assert prompt > 0
    _wait_running(s, 0)
    deadline = time.monotonic() + 10
    while True:
        after = _samples(s)
        if _value(after, "sglang:num_aborted_requests_total") > _value(
            before, "sglang:num_aborted_requests_total"
        ):
            break
        assert time.monotonic() < deadline, "the closed stream was never counted"
        time.sleep(0.05)

    def grew(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert grew("sglang:prompt_tokens_total", is_streaming="true") == prompt
    assert grew("sglang:prompt_tokens_histogram_sum") == prompt
    assert grew("sglang:prompt_tokens_histogram_count") == 1
    assert grew("sglang:e2e_request_latency_seconds_count", is_streaming="true") == 1
    assert grew("sglang:num_requests_total", is_streaming="true") == 1
    assert grew("sglang:num_aborted_requests_total") == 1


# --------------------------------------------------------------------------- client disconnects


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/generate", {"text": f"{HOLD} a", "sampling_params": {"max_new_tokens": 64}}),
        ("/v1/completions", {"model": MODEL, "prompt": f"{HOLD} b", "max_tokens": 64}),
        (
            "/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": f"{HOLD} c"}], "max_tokens": 64},
        ),
    ],
)
def test_non_streamed_request_is_aborted_when_its_client_hangs_up(
    secured_fake_server: ServerHandle, path: str, body: dict[str, Any]
) -> None:
    """ROCm/ATOM#1562: a non-streamed handler was not cancelled when its client hung up (only
    streamed responses were), so the engine kept generating and the request's KV blocks stayed
    taken until ``max_tokens``. Expected: once the client of a held, non-streamed request gives up
    (its read timeout), the server aborts the request: no request is left running, the KV pages
    the scheduler reports in use go back to 0, and the abort is counted once."""
    s = secured_fake_server
    before = _value(_samples(s), "sglang:num_aborted_requests_total")
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(s.url + path, headers=_auth(), json=body, timeout=(10, 0.6))
    _wait_running(s, 0)
    wait_used_pages(s, 0)
    deadline = time.monotonic() + 10
    while _value(_samples(s), "sglang:num_aborted_requests_total") != before + 1:
        assert time.monotonic() < deadline, "the abandoned request was not counted as aborted once"
        time.sleep(0.05)


# --------------------------------------------------------------------------- probes and models


def test_health_probes_answer_head(secured_fake_server: ServerHandle) -> None:
    """punkpeye/fastmcp#275 (and saml7n/parbaked#564): ``/health`` and ``/ready`` matched GET
    only, so load balancers and uptime monitors probing with ``HEAD`` saw the server as down.
    Expected (RFC 9110 section 9.3.2: HEAD is GET without the body): ``HEAD`` on ``/health``,
    ``/health_generate`` and ``/ready`` answers what ``GET`` answers (200 on a serving server),
    without an API key and without a body; ``HEAD /ping`` (SageMaker's probe) likewise, with
    the key."""
    s = secured_fake_server
    for path, headers in (
        ("/health", {}),
        ("/health_generate", {}),
        ("/ready", {}),
        ("/ping", _auth()),
    ):
        got = requests.get(s.url + path, headers=headers, timeout=30)
        head = requests.head(s.url + path, headers=headers, timeout=30)
        assert (head.status_code, got.status_code) == (200, 200), path
        assert head.content == b"", path


def test_probes_and_metrics_need_no_api_key(secured_fake_server: ServerHandle) -> None:
    """qdrant/qdrant#2401: with an API key set, the health probe and ``/metrics`` demanded it too,
    so Kubernetes probes and the Prometheus scraper (which carry no key) marked the pod down.
    Expected, as SGLang's key check: ``/health``, ``/health_generate``, ``/ready`` and
    ``/metrics`` answer 200 without a key, while ``/v1/models`` still answers 401 without one
    and 200 with it."""
    s = secured_fake_server
    for path in ("/health", "/health_generate", "/ready", "/metrics"):
        assert requests.get(s.url + path, timeout=30).status_code == 200, path
    assert requests.get(s.url + "/v1/models", timeout=30).status_code == 401
    assert requests.get(s.url + "/v1/models", headers=_auth(), timeout=30).status_code == 200


def test_models_created_is_the_same_on_every_call(secured_fake_server: ServerHandle) -> None:
    """ggml-org/llama.cpp#27719 (fixing ggml-org/llama.cpp#26169): ``/v1/models`` made its
    ``created`` time anew on every request, so a client that caches the list saw a new model each
    time. Expected: as the ``openai`` client parses them, two listings a second apart and the
    retrieved model carry one ``created`` time, no later than the first listing."""
    import openai

    client = openai.OpenAI(base_url=secured_fake_server.url + "/v1", api_key=SECURED_API_KEY)
    t0 = time.time()
    first = client.models.list().data
    time.sleep(1.1)
    second = client.models.list().data
    one = client.models.retrieve(MODEL)
    assert [m.id for m in first] == [m.id for m in second] == [MODEL]
    assert first[0].created == second[0].created == one.created
    assert first[0].created <= t0 + 1


# --------------------------------------------------------------------------- /flush_cache


def test_flush_cache_is_refused_while_a_request_runs(sched_model_dir: str) -> None:
    """THUDM/slime#1953 (``/flush_cache`` without a timeout checks for idleness once: with a request
    in flight it is refused at once, and a caller that retries must wait for the request) and
    sgl-project/sglang#12107 (a flush that slipped past that check rebuilt the radix tree under a
    running request, which later crashed releasing its nodes). Expected: with a request running
    on a cached prefix the flush is refused, the request's greedy output equals a cold run on a
    flushed scheduler, and once it has finished the flush succeeds with nothing left in use."""
    from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit

    prefix = [(11 * j) % 400 + 20 for j in range(PAGE + 8)]
    ids = prefix + [5, 6, 7, 8]
    s = make_scheduler(sched_model_dir)
    run_one(s, "warm", prefix + [1, 2], 2)  # the prefix's first page now sits in the radix cache
    submit(s, "r", ids, 6)
    s.step()  # admitted: it holds the cached prefix
    assert s.flush_cache() is False
    got = drain(s)["r"]
    assert got["cached"] >= PAGE
    assert_idle(s)  # flushes
    cold = run_one(s, "cold", ids, 6)
    assert cold["cached"] == 0  # the flush emptied the cache: a cold run
    assert got["ids"] == cold["ids"] and len(got["ids"]) == 6


# --------------------------------------------------------------------------- a busy scheduler


def test_metrics_scrape_does_not_wait_for_a_busy_scheduler(tmp_path: Path) -> None:
    """mirage/prometheus#27 (metrics collection without a timeout let a scrape run far past the
    scraper's own limit, which Prometheus sends in ``X-Prometheus-Scrape-Timeout-Seconds``, so the
    target read as down exactly while it was busiest): ``/metrics`` waited up to a minute for the
    scheduler's gauges. Expected: with a scheduler that does not answer (one long step), a scrape
    sent with a 2 s scrape timeout is answered 200 inside that budget, and carries
    the counters and histograms (they live in the HTTP process), as ``prometheus_client``'s parser
    reads them."""
    from fastapi.testclient import TestClient
    from prometheus_client.parser import text_string_to_metric_families
    from server_fixture import make_fake_model_dir
    from sglang_v4.entrypoints.http_server import create_app
    from sglang_v4.entrypoints.metrics import TokenizerMetrics
    from sglang_v4.managers.control_struct import SchedulerReadyInfo
    from sglang_v4.managers.tokenizer_manager import TokenizerManager
    from sglang_v4.server_args import PortArgs, ServerArgs

    sa = ServerArgs(
        model_path=str(make_fake_model_dir(tmp_path)),
        device="cpu",
        enable_metrics=True,
        served_model_name=MODEL,
    )
    info = SchedulerReadyInfo(
        status="ready", max_total_num_tokens=4096, max_req_input_len=4095, context_len=4096
    )
    pa = PortArgs.init_new()
    inbox = zmq.Context.instance().socket(zmq.PULL)  # the scheduler: it reads and never answers
    inbox.bind(pa.scheduler_input_ipc_name)
    tm = TokenizerManager(sa, pa, info, None)
    try:
        tm.metrics = TokenizerMetrics(MODEL)
        app, state = create_app(sa, SimpleNamespace(scheduler_info=info, port_args=pa))  # type: ignore[arg-type]
        state.tokenizer_manager = tm
        client = TestClient(app)  # no lifespan: the manager above stands for the started one
        t0 = time.monotonic()
        r = client.get("/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "2"})
        took = time.monotonic() - t0
        assert r.status_code == 200
        assert took < 2.0, took
        names = {s.name for fam in text_string_to_metric_families(r.text) for s in fam.samples}
        assert {"sglang:num_requests_total", "sglang:e2e_request_latency_seconds_count"} <= names
    finally:
        tm.close()
        inbox.close(linger=0)
        shutil.rmtree(pa.ipc_dir, ignore_errors=True)

"""Public reports on a data-parallel group behind one front door, replayed on the ``--dp-size``
gateway (:mod:`sglang_v4.entrypoints.dp_gateway`): per-rank metrics, request ids across workers,
workers dying and coming back, many requests at once, and an upstream failing mid-answer.

All in this process: the gateway in front of a router stub and replica stubs (no model). The
replica stubs answer ``/metrics`` as ``prometheus_client`` writes a registry whose samples carry
SGLang's per-scheduler labels (``model_name`` -- a served name with spaces --, a custom label, and
the replica's own ``dp_rank="0"``), ``/get_load`` and ``/health`` as a single server does. The router stub
answers ``/generate`` and ``/v1/chat/completions`` after a delay the body asks for (so requests
overlap), and ``/broken_stream`` with a 200 SSE answer it drops after one event.

Faults found here and fixed: every ``/generate`` and OpenAI generation request that pinned no
rank reached the router with an empty body (the gateway read the body to look for a rank pin,
after which aiohttp's ``can_read_body`` is false, so the forward sent none); a label value holding
a space, written before the replica's own ``dp_rank`` (``customer="Acme Corp"``), made the merged
``/metrics`` repeat ``dp_rank`` on every sample (an exposition ``prometheus_client`` refuses); two
concurrent requests with one ``rid`` went to two replicas and
both ran, where a single server refuses the second with a 400 naming the rid.

Oracles: ``prometheus_client``'s parser and each replica's own scrape read with it, the ``openai``
client's error classes, SGLang's single-server answer to a duplicate running ``rid`` (400,
``Duplicate request id 'x'.``), ``requests``' own reading of a truncated chunked body.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import openai
import pytest
import requests
from aiohttp import web
from aiohttp_serve_testutil import free_port, serve_aiohttp
from prometheus_client.parser import text_string_to_metric_families
from sglang_v4.entrypoints.dp_gateway import GATEWAY_SERVER_OPTIONS, create_gateway_app

pytestmark = pytest.mark.timeout(90)
MODEL_NAME = "DeepSeek V4 Flash"  # a served model name with spaces (``--served-model-name``)
#: a custom label (SGLang's ``tokenizer_metrics_allowed_custom_labels``) whose value holds a space;
#: ``prometheus_client`` writes labels sorted by name, so it comes before ``dp_rank``
CUSTOM_LABEL = ("customer", "Acme Corp")
#: replica -> (``sglang:gen_throughput``, observations of ``sglang:time_to_first_token_seconds``)
REPLICA_METRICS = [(386.25, [0.05, 0.3]), (120.5, [0.02, 0.7, 2.5])]


def _replica_metrics_text(index: int) -> str:
    """Replica ``index``'s ``/metrics`` as ``prometheus_client`` writes it, with SGLang's
    per-scheduler labels (the replica is one rank of its own: ``dp_rank="0"``)."""
    from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

    reg = CollectorRegistry()
    labels = {
        "model_name": MODEL_NAME,
        "engine_type": "unified",
        "tp_rank": "0",
        "dp_rank": "0",
        CUSTOM_LABEL[0]: CUSTOM_LABEL[1],
    }
    g = Gauge("sglang:gen_throughput", "The generation throughput (token/s).", list(labels), registry=reg)
    g.labels(**labels).set(REPLICA_METRICS[index][0])
    h = Histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        list(labels),
        buckets=(0.1, 1.0, 5.0),
        registry=reg,
    )
    for v in REPLICA_METRICS[index][1]:
        h.labels(**labels).observe(v)
    return generate_latest(reg).decode()


def _replica(index: int) -> web.Application:
    """A replica stub (``dp_size`` 1): ``/metrics`` (one registry's text, the same each scrape),
    ``/get_load`` and ``/health``."""
    text = _replica_metrics_text(index)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=text, content_type="text/plain")

    async def load(request: web.Request) -> web.Response:
        return web.json_response([{"dp_rank": 0, "num_reqs": index, "num_waiting_reqs": 0, "num_tokens": 0}])

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/get_load", load)
    app.router.add_get("/health", health)
    return app


def _router(seen: list[str], raw: dict[str, bytes] | None = None) -> web.Application:
    """The router stub: generation routes answer after ``body["delay"]`` seconds with the body's
    ``rid`` (the bytes received kept in ``raw[rid]``); ``/broken_stream`` starts a 200 SSE answer
    and drops the connection."""

    async def generate(request: web.Request) -> web.Response:
        data = await request.read()
        if raw is not None:
            raw[f"{request.path} {request.headers.get('X-Tag')}"] = data
        body = json.loads(data)
        seen.append(str(body.get("rid")))
        await asyncio.sleep(float(body.get("delay", 0)))
        if request.path == "/generate":
            return web.json_response({"text": "ok", "meta_info": {"id": body.get("rid")}})
        return web.json_response(
            {
                "id": str(body.get("rid") or "chatcmpl-1"),
                "object": "chat.completion",
                "created": 0,
                "model": "dsv4",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
                ],
            }
        )

    async def broken_stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"text": "Once"}\n\n')
        await asyncio.sleep(0.2)
        assert request.transport is not None
        request.transport.abort()  # the worker died mid-answer
        return resp

    app = web.Application(client_max_size=0)  # sglang-router's own bound is far larger
    app.router.add_post("/generate", generate)
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
        app.router.add_post(path, generate)
    app.router.add_post("/broken_stream", broken_stream)
    return app


def _serve_on(app: web.Application, port: int) -> Callable[[], None]:
    """``app`` served on loopback ``port`` (one that was in use before: a worker coming back on
    its address) from a thread; returns its ``stop``."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    return stop


@pytest.fixture(scope="module")
def dp() -> Iterator[SimpleNamespace]:
    seen: list[str] = []
    raw: dict[str, bytes] = {}
    stops, urls = [], []
    for i in range(2):
        url, stop = serve_aiohttp(_replica(i))
        urls.append(url)
        stops.append(stop)
    router_url, stop = serve_aiohttp(_router(seen, raw))
    stops.append(stop)
    gateway, stop = serve_aiohttp(create_gateway_app(router_url, urls), **GATEWAY_SERVER_OPTIONS)
    stops.append(stop)
    yield SimpleNamespace(url=gateway, replicas=urls, seen=seen, raw=raw)
    for stop in reversed(stops):
        stop()


def _samples(text: str, name: str) -> list[Any]:
    """The samples named ``name`` in ``text``, read by ``prometheus_client``'s parser."""
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def test_connexion_737_generation_bodies_reach_the_router_whole(dp: SimpleNamespace) -> None:
    """spec-first/connexion#737 (fix #738): once aiohttp's request body has been read,
    ``can_read_body`` is false, so code reading it again through that check got no body. The
    gateway read each generation body to look for a rank pin and then forwarded, by that check,
    no body at all: the router got an empty ``POST /generate``. Expected: the router receives the
    very bytes the client sent, on every route whose body the gateway reads (unusual spacing and
    non-ASCII kept: the body is passed on, not re-serialised)."""
    body = '{ "text" : "café ☕",\n  "rid": null, "sampling_params": {"max_new_tokens": 2} }'.encode()
    for path in ("/generate", "/v1/chat/completions", "/v1/completions", "/v1/responses"):
        r = requests.post(
            dp.url + path,
            data=body,
            headers={"Content-Type": "application/json", "X-Tag": "whole"},
            timeout=10,
        )
        assert r.status_code == 200, (path, r.text)
        assert dp.raw[f"{path} whole"] == body, path


def test_sglang_6622_a_large_image_body_passes_the_gateway_whole(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#6622: a 10 MB JSON body (base64 images in a chat request) failed with
    "payload reached size limit". The gateway reads a generation body to look for a rank pin;
    aiohttp's own default refuses bodies over 1 MiB with a 413. Expected: a 12 MB chat body
    (one base64 data-URL image) reaches the router byte for byte and is answered 200; bounding
    bodies is the replica's to do, as a single server does."""
    image = "data:image/png;base64," + "A" * (12 * 1024 * 1024)
    body = json.dumps(
        {
            "model": "dsv4",
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}],
        }
    ).encode()
    r = requests.post(
        dp.url + "/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "X-Tag": "large"},
        timeout=60,
    )
    assert r.status_code == 200, r.text[:300]
    assert dp.raw["/v1/chat/completions large"] == body


def test_vllm_22227_every_ranks_histogram_is_whole_and_cumulative(dp: SimpleNamespace) -> None:
    """vllm-project/vllm#22227: with several API servers each engine's histogram series had to be
    exported per engine (``engine="0"``, ``engine="1"``) for the scrape to be right. Expected:
    through the gateway each rank's ``_bucket`` series is cumulative (non-decreasing in ``le``),
    its ``+Inf`` bucket equals its ``_count`` (the Prometheus text format's rule for histograms),
    and each rank's buckets are that replica's own."""
    text = requests.get(dp.url + "/metrics", timeout=10).text
    name = "sglang:time_to_first_token_seconds"
    for rank, (_, observed) in enumerate(REPLICA_METRICS):
        buckets = sorted(
            (float(s.labels["le"]), s.value)
            for s in _samples(text, name + "_bucket")
            if s.labels["dp_rank"] == str(rank)
        )
        assert [le for le, _ in buckets] == [0.1, 1.0, 5.0, float("inf")]
        assert [v for _, v in buckets] == [float(sum(o <= le for o in observed)) for le, _ in buckets]
        assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))
        (count,) = [s.value for s in _samples(text, name + "_count") if s.labels["dp_rank"] == str(rank)]
        assert buckets[-1][1] == count == len(observed)


def test_sglang_7597_rank_label_with_spaced_label_values_is_not_repeated(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#7597: SGLang's per-scheduler metrics carry a ``dp_rank`` label, next to
    ``model_name`` and custom labels; through the gateway a label written before ``dp_rank`` whose
    value held a space (``customer="Acme Corp"``) made every merged sample repeat ``dp_rank``
    (``prometheus_client`` refuses: "duplicate label name"). Expected: the
    scrape parses, each sample has one ``dp_rank`` (the replica's index) and keeps its other
    labels exactly as the replica wrote them."""
    r = requests.get(dp.url + "/metrics", timeout=10)
    assert r.status_code == 200, r.text
    merged = [s for f in text_string_to_metric_families(r.text) for s in f.samples]
    for rank, url in enumerate(dp.replicas):
        own = [
            s
            for f in text_string_to_metric_families(requests.get(url + "/metrics", timeout=10).text)
            for s in f.samples
        ]
        mine = [s for s in merged if s.labels.get("dp_rank") == str(rank)]
        want = sorted(
            (s.name, tuple(sorted({**s.labels, "dp_rank": str(rank)}.items())), s.value) for s in own
        )
        got = sorted((s.name, tuple(sorted(s.labels.items())), s.value) for s in mine)
        assert got == want
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            assert line.count('dp_rank="') == 1, line
    assert {s.labels["model_name"] for s in merged if "model_name" in s.labels} == {MODEL_NAME}
    assert {s.labels[CUSTOM_LABEL[0]] for s in merged if "model_name" in s.labels} == {CUSTOM_LABEL[1]}


def test_sglang_6892_every_ranks_throughput_is_in_the_scrape(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#6892: with several data-parallel ranks ``/metrics`` showed one rank's
    ``gen_throughput`` (the last to report), about ``dp`` times less than the total. Expected:
    one sample per rank, each that rank's own value, so their sum is the group's throughput; a
    histogram keeps every rank's own ``_count`` and ``_sum``."""
    text = requests.get(dp.url + "/metrics", timeout=10).text
    rates = {s.labels["dp_rank"]: s.value for s in _samples(text, "sglang:gen_throughput")}
    assert rates == {str(i): v for i, (v, _) in enumerate(REPLICA_METRICS)}
    assert sum(rates.values()) == pytest.approx(sum(v for v, _ in REPLICA_METRICS))
    counts = {
        s.labels["dp_rank"]: s.value for s in _samples(text, "sglang:time_to_first_token_seconds_count")
    }
    sums = {s.labels["dp_rank"]: s.value for s in _samples(text, "sglang:time_to_first_token_seconds_sum")}
    assert counts == {str(i): float(len(obs)) for i, (_, obs) in enumerate(REPLICA_METRICS)}
    assert sums == pytest.approx({str(i): sum(obs) for i, (_, obs) in enumerate(REPLICA_METRICS)})


def test_dynamo_8601_one_rid_on_two_concurrent_requests_is_refused(dp: SimpleNamespace) -> None:
    """ai-dynamo/dynamo#8601: two concurrent requests sharing one id sent to SGLang through a
    multi-worker front end broke them (SGLang keys its state by ``rid``). A single SGLang server
    refuses the second with a 400 ``Duplicate request id 'x'.``; behind the gateway the router
    sent them to two replicas that both ran them. Expected: as a single server, on ``/generate``
    (native error shape) and on ``/v1/chat/completions`` (the ``openai`` client's
    ``BadRequestError``); the first request unaffected, the rid free again once it ended (or its
    client went away), and requests with other rids never refused."""
    body = {"text": "Hi", "rid": "same-1", "delay": 1.0}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(requests.post, dp.url + "/generate", json=body, timeout=30)
        while "same-1" not in dp.seen:
            assert not first.done(), first.result().text
            time.sleep(0.01)
        dup = requests.post(dp.url + "/generate", json={**body, "delay": 0}, timeout=10)
        other = requests.post(dp.url + "/generate", json={**body, "rid": "other-1", "delay": 0}, timeout=10)
        batch = requests.post(
            dp.url + "/generate", json={"text": ["a", "b"], "rid": ["x-2", "same-1"], "delay": 0}, timeout=10
        )
        assert first.result().status_code == 200 and first.result().json()["meta_info"]["id"] == "same-1"
    assert dup.status_code == 400 and dup.json()["error"]["message"] == "Duplicate request id 'same-1'."
    assert batch.status_code == 400 and "'same-1'" in batch.json()["error"]["message"]
    assert other.status_code == 200
    assert dp.seen.count("same-1") == 1  # the duplicates never reached a replica
    again = requests.post(dp.url + "/generate", json={**body, "delay": 0}, timeout=10)
    assert again.status_code == 200, again.text
    # a client that goes away frees its rid too (its request ended), long before the router would
    # have answered it
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(dp.url + "/generate", json={**body, "rid": "gone-1", "delay": 8.0}, timeout=0.5)
    deadline = time.time() + 4
    while (
        r := requests.post(dp.url + "/generate", json={**body, "rid": "gone-1", "delay": 0}, timeout=10)
    ).status_code == 400:
        assert time.time() < deadline, r.text
        time.sleep(0.05)
    assert r.status_code == 200, r.text

    client = openai.OpenAI(base_url=dp.url + "/v1", api_key="none", max_retries=0)
    chat = {"model": "dsv4", "messages": [{"role": "user", "content": "Hello"}]}
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(client.chat.completions.create, **chat, extra_body={"rid": "chat-1", "delay": 1.0})
        while "chat-1" not in dp.seen:
            assert not run.done()
            time.sleep(0.01)
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(**chat, extra_body={"rid": "chat-1"})
        assert run.result().choices[0].message.content == "ok"
    assert "chat-1" in str(err.value.message)
    assert client.chat.completions.create(**chat, extra_body={"rid": "chat-1"}).id == "chat-1"


def test_sglang_13894_many_concurrent_requests_all_answered(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#13894: 2048 concurrent requests through the router got massive 503s
    while every worker was alive. Expected: through the gateway, 96 requests held open at once
    are all answered 200 with their own answer (no connection pool limit, no refusal)."""

    def one(i: int) -> tuple[int, Any]:
        r = requests.post(dp.url + "/generate", json={"text": "x", "rid": f"c-{i}", "delay": 0.5}, timeout=60)
        return r.status_code, r.json()["meta_info"]["id"] if r.status_code == 200 else r.text

    with ThreadPoolExecutor(96) as pool:
        answers = list(pool.map(one, range(96)))
    assert answers == [(200, f"c-{i}") for i in range(96)]


def test_sglang_omni_442_failure_mid_stream_is_not_a_complete_answer(dp: SimpleNamespace) -> None:
    """sgl-project/sglang-omni#442: a worker failing after its 2xx began never shows as a 502; a
    client must still be able to tell the answer was cut short. Expected: the event already sent
    arrives, then reading on fails (a chunked body ended without its last chunk), never a clean
    end that passes for a finished stream."""
    r = requests.post(dp.url + "/broken_stream", json={}, stream=True, timeout=30)
    assert r.status_code == 200
    got = b""
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        for chunk in r.iter_content(None):
            got += chunk
    assert got == b'data: {"text": "Once"}\n\n'


def test_sglang_7028_and_3802_gateway_serves_on_after_workers_die_and_return() -> None:
    """sgl-project/sglang#7028: after every worker died under load the router kept failing even
    once live workers were back; sgl-project/sglang#3802: the router would not start unless every
    worker was healthy. Expected: the gateway starts with rank 1 down and answers for rank 0
    (``/get_load`` lists it alone, ``/health`` is 503: a single server is unhealthy while a rank
    is); with every worker gone ``/get_load`` is a 503 and ``/generate`` a 502 in SGLang's native
    error shape; once they are back on their addresses both answer 200 again, no restart."""
    seen: list[str] = []
    ports = [free_port() for _ in range(3)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    stops = [_serve_on(_replica(0), ports[0]), _serve_on(_router(seen), ports[2])]
    gateway, stop_gateway = serve_aiohttp(create_gateway_app(urls[2], urls[:2]), **GATEWAY_SERVER_OPTIONS)
    try:
        load = requests.get(gateway + "/get_load", timeout=10)
        assert load.status_code == 200 and [e["dp_rank"] for e in load.json()] == [0]
        assert requests.get(gateway + "/health", timeout=10).status_code == 503
        stops.append(_serve_on(_replica(1), ports[1]))
        assert requests.get(gateway + "/health", timeout=10).status_code == 200
        while stops:
            stops.pop()()
        down = requests.get(gateway + "/get_load", timeout=10)
        gen = requests.post(gateway + "/generate", json={"text": "x", "rid": "r-1"}, timeout=10)
        assert down.status_code == 503 and isinstance(down.json()["error"]["message"], str)
        assert gen.status_code == 502 and isinstance(gen.json()["error"]["message"], str)
        stops = [
            _serve_on(_replica(0), ports[0]),
            _serve_on(_replica(1), ports[1]),
            _serve_on(_router(seen), ports[2]),
        ]
        load = requests.get(gateway + "/get_load", timeout=10)
        assert load.status_code == 200 and [e["dp_rank"] for e in load.json()] == [0, 1]
        assert requests.get(gateway + "/health", timeout=10).status_code == 200
        gen = requests.post(gateway + "/generate", json={"text": "x", "rid": "r-1"}, timeout=10)
        assert gen.status_code == 200 and gen.json()["meta_info"]["id"] == "r-1"  # rid r-1 was freed
    finally:
        stop_gateway()
        for stop in stops:
            stop()


def test_body_rids_reads_only_a_json_objects_rid() -> None:
    """The ids the gateway holds are those a single server would register: a string ``rid``, each
    string of a list; nothing for a body that is not a JSON object or names none."""
    from sglang_v4.entrypoints.dp_gateway_rids import body_rids

    assert body_rids(json.dumps({"rid": "a"}).encode()) == ["a"]
    assert body_rids(json.dumps({"rid": ["a", "b"]}).encode()) == ["a", "b"]
    assert body_rids(b'{"text": "x"}') == [] and body_rids(b"[1]") == [] and body_rids(b"not json") == []
    assert body_rids(None) == [] and body_rids(json.dumps({"rid": 3}).encode()) == []

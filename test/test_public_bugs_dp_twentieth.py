"""Public reports on data parallelism behind a router, replayed on the ``--dp-size`` gateway
(:mod:`sglang_v4.entrypoints.dp_gateway`).

All in this process: the gateway in front of a router stub (it answers 404 to what
``sglang-router`` 0.3.2 lacks -- ``/get_load``, ``/abort_request`` -- and records what reaches it)
and three replicas: two stubs that answer as a replica does (``/get_load`` in SGLang's shape, the
body's rank pin checked by the replica's own :func:`~sglang_v4.entrypoints.native_api.check_dp_rank`,
which refuses any rank but 0) and one port nothing listens on (rank 2, a replica that died).
Oracles: SGLang's documented shapes and messages for a server with ``dp_size`` ranks, the
stubs' records of what reached which replica, and the ``openai`` client's own parser.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest
import requests
from aiohttp import web
from aiohttp_serve_testutil import free_port as _free_port
from aiohttp_serve_testutil import serve_aiohttp as _serve
from sglang_v4.entrypoints.dp_gateway import GATEWAY_SERVER_OPTIONS, body_dp_rank, create_gateway_app
from sglang_v4.entrypoints.native_api import RequestError, check_dp_rank

pytestmark = pytest.mark.timeout(60)
KEY = "k3y"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: each live replica's load (replica index -> num_reqs)
LOADS = {0: 3, 1: 5}


def _replica(index: int, seen: list[dict[str, Any]]) -> web.Application:
    """A replica as the router sees it: one rank of its own (``dp_rank`` 0), its API key checked."""

    async def record(request: web.Request) -> dict[str, Any] | web.Response:
        body = await request.read()
        entry = {"replica": index, "path": request.path, "body": body, "headers": dict(request.headers)}
        seen.append(entry)
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return entry

    async def get_load(request: web.Request) -> web.Response:
        e = await record(request)
        if isinstance(e, web.Response):
            return e
        load = {"dp_rank": 0, "num_reqs": LOADS[index], "num_waiting_reqs": 1, "num_tokens": 10 * index}
        return web.json_response([load])

    async def abort(request: web.Request) -> web.Response:
        e = await record(request)
        return e if isinstance(e, web.Response) else web.Response(status=200)

    async def generate(request: web.Request) -> web.Response:
        e = await record(request)
        if isinstance(e, web.Response):
            return e
        body = json.loads(e["body"])
        try:  # the replica's own check of a body pin (it is rank 0 of 1); the header overrides it
            for name in (
                () if "X-Data-Parallel-Rank" in request.headers else ("data_parallel_rank", "routed_dp_rank")
            ):
                check_dp_rank(name, body.get(name))
        except RequestError as err:
            return web.json_response({"error": {"message": str(err), "code": 400}}, status=400)
        if request.path == "/generate":
            return web.json_response({"text": f"replica {index}", "meta_info": {"id": "r"}})
        return web.json_response(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": f"replica {index}"},
                    }
                ],
            }
        )

    async def metrics(request: web.Request) -> web.Response:
        await record(request)  # open route: no key needed, as on a single server
        return web.Response(body=_replica_metrics(index), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/get_load", get_load)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/abort_request", abort)
    for path in ("/generate", "/v1/chat/completions", "/v1/completions"):
        app.router.add_post(path, generate)
    return app


def _replica_metrics(index: int) -> bytes:
    """A replica's ``/metrics`` as ``prometheus_client`` writes it: a labelled counter, a gauge
    and a histogram, their values set by the replica's index."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    reg = CollectorRegistry()
    Counter("sglang:prompt_tokens", "prompt tokens", ["model_name"], registry=reg).labels("m").inc(7 + index)
    Gauge("sglang:num_running_reqs", "running", registry=reg).set(LOADS[index])
    h = Histogram("sglang:e2e_request_latency_seconds", "e2e", ["model_name"], buckets=[1.0], registry=reg)
    for _ in range(index + 1):
        h.labels("m").observe(0.5)
    return generate_latest(reg)


def _router(seen: list[dict[str, Any]]) -> web.Application:
    """``sglang-router`` as far as these tests go: 404 to ``/get_load`` and ``/abort_request``,
    an unpinned generation served (by "the router")."""

    async def any_route(request: web.Request) -> web.Response:
        seen.append({"replica": "router", "path": request.path, "body": await request.read()})
        if request.path == "/generate":
            return web.json_response({"text": "router", "meta_info": {"id": "r"}})
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_route)
    return app


@pytest.fixture(scope="module")
def dp() -> Iterator[SimpleNamespace]:
    seen: list[dict[str, Any]] = []
    stops = []
    urls = []
    for i in range(2):
        url, stop = _serve(_replica(i, seen))
        urls.append(url)
        stops.append(stop)
    urls.append(f"http://127.0.0.1:{_free_port()}")  # rank 2: nothing listens
    router_url, stop = _serve(_router(seen))
    stops.append(stop)
    gateway_url, stop = _serve(create_gateway_app(router_url, urls), **GATEWAY_SERVER_OPTIONS)
    stops.append(stop)
    yield SimpleNamespace(url=gateway_url, seen=seen)
    for stop in reversed(stops):
        stop()


def _since(dp: SimpleNamespace, n: int) -> list[dict[str, Any]]:
    return dp.seen[n:]


def test_sglang_6531_abort_request_reaches_every_replica(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#6531 (also THUDM/slime#2340): ``/abort_request`` sent to a server group
    behind ``sglang-router`` was a 404 (the router has no such route), so the request went on
    decoding on its worker. Expected: the body reaches every live replica (the router cannot know
    which holds the rid; a replica without it does nothing), as sent, key included; the answer is
    a single server's 200; the router never sees it. A bad key is each replica's own 401."""
    n = len(dp.seen)
    for body in ({"rid": "req-42"}, {"abort_all": True}):
        r = requests.post(dp.url + "/abort_request", json=body, headers=AUTH, timeout=10)
        assert r.status_code == 200, r.text
        got = _since(dp, n)
        assert sorted(e["replica"] for e in got) == [0, 1], got
        assert all(json.loads(e["body"]) == body and e["path"] == "/abort_request" for e in got)
        n = len(dp.seen)
    r = requests.post(dp.url + "/abort_request", json={"rid": "x"}, headers={"Authorization": "Bearer no"})
    assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}


def test_smg_1630_get_load_lists_every_data_parallel_rank(dp: SimpleNamespace) -> None:
    """smg-project/smg#1630 (review): a load report that hard-codes ``dp_rank: 0`` and one entry
    hides every other data-parallel rank. Here ``/get_load`` on the ``--dp-size`` port was the
    router's 404. Expected (SGLang's ``/get_load`` for a server with ``dp_size`` ranks): one entry
    per rank that answered, ``dp_rank`` its index, each replica's own counts; the dead rank 2 is
    left out rather than failing the report."""
    n = len(dp.seen)
    r = requests.get(dp.url + "/get_load", headers=AUTH, timeout=10)
    assert r.status_code == 200, r.text
    loads = r.json()
    assert [(e["dp_rank"], e["num_reqs"]) for e in loads] == sorted(LOADS.items())
    assert [e["num_tokens"] for e in loads] == [0, 10] and all(e["num_waiting_reqs"] == 1 for e in loads)
    assert not any(e["replica"] == "router" for e in _since(dp, n))
    bad = requests.get(dp.url + "/get_load", headers={"Authorization": "Bearer no"}, timeout=10)
    assert bad.status_code == 401


def test_sglang_6884_generate_data_parallel_rank_goes_to_that_rank(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#6884: ``data_parallel_rank`` in a ``/generate`` body routes the request
    to that DP rank. Behind the router the body went to any replica, which refused every rank but
    its own 0 (``data_parallel_rank must be less than dp_size: 1`` for a group of 3). Expected:
    rank ``k`` is served by replica ``k`` (the one the stubs record), the router never sees it; a
    body without a pin still goes through the router."""
    for rank in (1, 0, 1):
        n = len(dp.seen)
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 2}, "data_parallel_rank": rank}
        r = requests.post(dp.url + "/generate", json=body, headers=AUTH, timeout=10)
        assert r.status_code == 200, r.text
        assert r.json()["text"] == f"replica {rank}"
        (got,) = _since(dp, n)
        assert got["replica"] == rank
        sent = json.loads(got["body"])
        assert sent["text"] == "hi" and sent["sampling_params"] == {"max_new_tokens": 2}
    n = len(dp.seen)
    r = requests.post(dp.url + "/generate", json={"text": "hi"}, headers=AUTH, timeout=10)
    assert r.json()["text"] == "router" and [e["replica"] for e in _since(dp, n)] == ["router"]


def test_sglang_38729_routed_dp_rank_pins_openai_routes(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#38729: a ``routed_dp_rank`` pin that is ignored (or refused) sends the
    request to another rank, which re-prefills the prefix cold. Expected on the OpenAI chat and
    completions routes (read with the ``openai`` client's parser): ``routed_dp_rank`` and the
    deprecated ``data_parallel_rank`` each pin replica ``k``; the header still wins over the
    body."""
    oa = openai.OpenAI(base_url=dp.url + "/v1", api_key=KEY, max_retries=0)
    msgs = [{"role": "user", "content": "hi"}]
    for field in ("routed_dp_rank", "data_parallel_rank"):
        for rank in (1, 0):
            r = oa.chat.completions.create(model="m", messages=msgs, extra_body={field: rank})  # type: ignore[arg-type]
            assert r.choices[0].message.content == f"replica {rank}"
    n = len(dp.seen)
    r = oa.chat.completions.create(
        model="m",
        messages=msgs,  # type: ignore[arg-type]
        extra_body={"routed_dp_rank": 1},
        extra_headers={"X-Data-Parallel-Rank": "0"},
    )
    assert r.choices[0].message.content == "replica 0"
    assert [e["replica"] for e in _since(dp, n)] == [0]


def test_vllm_24386_out_of_range_body_rank_is_a_400_naming_dp_size(dp: SimpleNamespace) -> None:
    """vllm-project/vllm#24386: ``data_parallel_rank`` from the OpenAI request has to reach the
    engine's rank choice, which checks it against the deployment's DP size. Expected: a rank
    ``>= dp_size`` (3 here, not a replica's 1) or a negative one is a 400 in SGLang's words, in
    OpenAI's error shape under ``/v1/`` (the ``openai`` client's parse) and the native shape on
    ``/generate``; no replica or router sees it. A rank whose replica died is a 502."""
    oa = openai.OpenAI(base_url=dp.url + "/v1", api_key=KEY, max_retries=0)
    n = len(dp.seen)
    with pytest.raises(openai.BadRequestError) as ei:
        oa.completions.create(model="m", prompt="hi", extra_body={"data_parallel_rank": 3})
    assert isinstance(ei.value.body, dict), ei.value.body
    assert ei.value.body["message"] == "data_parallel_rank must be less than dp_size: 3", ei.value.body
    r = requests.post(dp.url + "/generate", json={"text": "hi", "routed_dp_rank": -1}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["message"] == "routed_dp_rank must be non-negative"
    assert _since(dp, n) == []
    dead = requests.post(dp.url + "/generate", json={"text": "hi", "data_parallel_rank": 2}, timeout=10)
    assert dead.status_code == 502 and "rank 2" in dead.json()["error"]["message"]


def test_body_dp_rank_leaves_other_bodies_to_the_replica() -> None:
    """The pin reader itself: no JSON object, no pin, or a pin of the wrong type is left to the
    replica (its own type error); a pin is rewritten to 0 with the rest of the body unchanged
    (``ensure_ascii`` off: text as sent)."""
    for body in (
        b"[1]",
        b"not json",
        b'{"text": "x"}',
        b'{"data_parallel_rank": "1"}',
        b'{"routed_dp_rank": true}',
    ):
        assert body_dp_rank(body, 2) is None, body
    rank, sent = body_dp_rank('{"text": "café", "data_parallel_rank": 1, "routed_dp_rank": null}'.encode(), 2)
    assert rank == 1 and json.loads(sent) == {"text": "café", "data_parallel_rank": 0, "routed_dp_rank": None}
    assert "café".encode() in sent


def test_sglang_11456_metrics_merge_every_replica_labelled_by_rank(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#11456 (sglang-router's ``/engine_metrics``: the workers' metrics in one
    answer, a label per worker) and vtex/node-vtex-api#667 (a ``/metrics`` answered by whichever
    worker braids independent counters into one series). Here ``/metrics`` on the ``--dp-size``
    port was the router's 404. Expected, read with ``prometheus_client``'s own parser: each family
    once, with every live replica's samples labelled ``dp_rank`` and each replica's own values."""
    from prometheus_client.parser import text_string_to_metric_families

    r = requests.get(dp.url + "/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
    families = list(text_string_to_metric_families(r.text))
    names = [f.name for f in families]
    assert len(names) == len(set(names)), names
    by = {f.name: f for f in families}
    prompt = {
        s.labels["dp_rank"]: s.value for s in by["sglang:prompt_tokens"].samples if s.name.endswith("_total")
    }
    assert prompt == {"0": 7.0, "1": 8.0}
    running = {s.labels["dp_rank"]: s.value for s in by["sglang:num_running_reqs"].samples}
    assert running == {str(k): float(v) for k, v in LOADS.items()}
    counts = {
        s.labels["dp_rank"]: s.value
        for s in by["sglang:e2e_request_latency_seconds"].samples
        if s.name.endswith("_count")
    }
    assert counts == {"0": 1.0, "1": 2.0}
    assert all(s.labels.get("model_name") == "m" for s in by["sglang:prompt_tokens"].samples)

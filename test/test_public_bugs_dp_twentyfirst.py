"""Public reports on routes a data-parallel group must apply to every rank (cache flushes, weight
updates, pausing, server info, load reports), replayed on the ``--dp-size`` gateway
(:mod:`sglang_v4.entrypoints.dp_gateway`).

All in this process: the gateway in front of a router stub and two replica stubs. The router stub
answers as ``sglang-router`` 0.3.2 answered in a run against two workers, one refusing its flush:
``/flush_cache`` a ``206`` ``{"status": "partial_success", ...}`` (``200`` ``{"status":
"success", ...}`` when none refuses), ``/get_server_info`` its own ``{"router_manager",
"routers_count", "workers_count"}`` reaching no worker, ``/health_generate`` a 200 "At least one
router has healthy workers" reaching no worker, and 404 for ``/v1/loads``,
``/update_weights_from_disk``, ``/pause_generation``, ``/continue_generation``. The replica stubs
answer in a single server's shapes (SGLang's texts and fields) and record what reached them; a
second gateway adds a rank nothing listens on (a replica that died).

The ``X-Data-Parallel-Rank`` header on a single server's ``/generate`` is checked on the app of
``http_server.create_app`` in-process (``admin_app_testutil.admin_app_client``).

Faults found here and fixed: a flush one replica refused was a 2xx; ``/get_server_info`` had none
of a server's fields; weight updates, pause / continue and ``/v1/loads`` were a 404;
``/health_generate`` was 200 without any replica generating; a ``dp_rank`` label a replica's
sample already had was repeated (an invalid exposition); the header pin was lost on
``/generate`` and ``/v1/messages`` and ignored by a single server's ``/generate``. The model list
skipping a dead replica (sglang#10827) passed as-is and is kept as a regression test.

Oracles: each replica's own answer to the same request sent to it directly, SGLang's documented
single-server answers and messages, ``prometheus_client``'s parser, the ``openai`` client's
parser, and the stubs' records.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest
import requests
from admin_app_testutil import ADMIN_KEY, admin_app_client
from aiohttp import web
from aiohttp_serve_testutil import free_port as _free_port
from aiohttp_serve_testutil import serve_aiohttp as _serve
from prometheus_client.parser import text_string_to_metric_families
from sglang_v4.entrypoints.dp_gateway import GATEWAY_SERVER_OPTIONS, create_gateway_app
from sglang_v4.entrypoints.dp_gateway_fanout import merge_metrics
from sglang_v4.entrypoints.dp_rank_header import header_overrides_body_pins
from sglang_v4.entrypoints.native_api import RequestError, check_dp_rank, parse_generate_body

pytestmark = pytest.mark.timeout(60)
KEY = "k3y"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: SGLang's answer to a flush that was done (``http_server.flush_cache``).
FLUSHED = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)
#: per replica: running requests, tokens in use, its speculative accept length (None: none yet)
STATE = {0: (3, 40, None), 1: (5, 70, 2.9)}


def _replica(index: int, seen: list[dict[str, Any]], flags: dict[str, Any]) -> web.Application:
    """One replica (``dp_size`` 1) answering as a single server does; ``flags["refuse_flush"]``
    holds the indices whose flush is refused (requests in flight), ``flags["paused"]`` the paused
    ones."""

    async def record(request: web.Request) -> web.Response | None:
        seen.append(
            {
                "replica": index,
                "method": request.method,
                "path_qs": request.rel_url.raw_path_qs,
                "body": await request.read(),
            }
        )
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return None

    async def flush(request: web.Request) -> web.Response:
        if (denied := await record(request)) is not None:
            return denied
        if index in flags["refuse_flush"]:
            return web.Response(text="Flush cache failed.\n", status=400)
        return web.Response(text=FLUSHED)

    async def server_info(request: web.Request) -> web.Response:
        if (denied := await record(request)) is not None:
            return denied
        running, tokens, accept = STATE[index]
        live = {"last_gen_throughput": 10.0 * (index + 1), "avg_spec_accept_length": accept}
        return web.json_response(
            {
                "model_path": "/models/dsv4",
                "tokenizer_path": "/models/dsv4",
                "dp_size": 1,
                "tp_size": 1,
                "port": 30001 + index,
                "max_total_num_tokens": 4096,
                **live,
                "internal_states": [live],
                "version": "0.1.0",
            }
        )

    async def update_weights(request: web.Request) -> web.Response:
        if (denied := await record(request)) is not None:
            return denied
        body = json.loads(await request.read())
        if body["model_path"] == "/ckpt/bad" and index == 1:
            msg = "config.json differs from the served model: num_hidden_layers 2 != 4"
            return web.json_response({"success": False, "message": msg, "num_paused_requests": 0}, status=400)
        msg = "Succeeded to update model weights."
        return web.json_response({"success": True, "message": msg, "num_paused_requests": index + 1})

    async def pause(request: web.Request) -> web.Response:
        if (denied := await record(request)) is not None:
            return denied
        flags["paused"].add(index)
        return web.json_response({"message": "Generation paused successfully."})

    async def resume(request: web.Request) -> web.Response:
        if (denied := await record(request)) is not None:
            return denied
        flags["paused"].discard(index)
        return web.json_response({"message": "Generation continued successfully."})

    async def loads(request: web.Request) -> web.Response:
        if (denied := await record(request)) is not None:
            return denied
        running, tokens, _ = STATE[index]
        rank = request.query.get("dp_rank")
        entries = (
            []
            if rank not in (None, "0")
            else [{"dp_rank": 0, "num_running_reqs": running, "num_used_tokens": tokens}]
        )
        if request.query.get("format") == "prometheus":
            lines = ["# TYPE sglang_num_running_reqs gauge"]
            lines += [f'sglang_num_running_reqs{{dp_rank="0"}} {e["num_running_reqs"]}' for e in entries]
            return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
        envelope = {"timestamp": "t", "version": "0.1.0", "accelerator": None, "num_accelerators": 1}
        return web.json_response({**envelope, "loads": entries})

    async def health_generate(request: web.Request) -> web.Response:
        await record(request)  # open route, as on a single server
        if index in flags["dead_scheduler"]:
            return web.Response(status=503)  # SGLang's answer when no token comes back in time
        return web.Response(status=200)

    async def generate(request: web.Request) -> web.Response:
        """``/generate`` and ``/v1/messages``: the body's rank pins checked against this replica's
        one rank (``check_dp_rank``), as a replica that does not read the header checks them."""
        if (denied := await record(request)) is not None:
            return denied
        body = json.loads(await request.read())
        try:
            for name in ("data_parallel_rank", "routed_dp_rank"):
                check_dp_rank(name, body.get(name))
        except RequestError as err:
            return web.json_response({"error": {"message": str(err), "code": 400}}, status=400)
        return web.json_response({"text": f"replica {index}", "meta_info": {"id": "r"}})

    async def models(request: web.Request) -> web.Response:
        if (denied := await record(request)) is not None:
            return denied
        return web.json_response(
            {"object": "list", "data": [{"id": "fake-v4", "object": "model", "owned_by": "sglang"}]}
        )

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/generate", generate)
    app.router.add_post("/v1/messages", generate)
    app.router.add_get("/health_generate", health_generate)
    app.router.add_route("*", "/flush_cache", flush)
    app.router.add_get("/get_server_info", server_info)
    app.router.add_get("/server_info", server_info)
    app.router.add_post("/update_weights_from_disk", update_weights)
    app.router.add_post("/pause_generation", pause)
    app.router.add_post("/continue_generation", resume)
    app.router.add_get("/v1/loads", loads)
    return app


def _router(seen: list[dict[str, Any]], flags: dict[str, Any]) -> web.Application:
    """``sglang-router`` 0.3.2 as recorded (module docstring)."""

    async def any_route(request: web.Request) -> web.Response:
        seen.append({"replica": "router", "path_qs": request.rel_url.raw_path_qs})
        if request.path == "/flush_cache":
            failed = bool(flags["refuse_flush"])
            return web.json_response(
                {"status": "partial_success" if failed else "success", "total_workers": 2},
                status=206 if failed else 200,
            )
        if request.path == "/generate":  # an unpinned generation, served "by the router"
            return web.json_response({"text": "router", "meta_info": {"id": "r"}})
        if request.path == "/health_generate":  # answered from its own registry, no generation
            return web.Response(text="At least one router has healthy workers")
        if request.path == "/get_server_info":
            return web.json_response({"router_manager": True, "routers_count": 1, "workers_count": 2})
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_route)
    return app


@pytest.fixture(scope="module")
def dp() -> Iterator[SimpleNamespace]:
    seen: list[dict[str, Any]] = []
    flags: dict[str, Any] = {"refuse_flush": set(), "paused": set(), "dead_scheduler": set()}
    stops, urls = [], []
    for i in range(2):
        url, stop = _serve(_replica(i, seen, flags))
        urls.append(url)
        stops.append(stop)
    router_url, stop = _serve(_router(seen, flags))
    stops.append(stop)
    gateway, stop = _serve(create_gateway_app(router_url, urls), **GATEWAY_SERVER_OPTIONS)
    stops.append(stop)
    dead = urls + [f"http://127.0.0.1:{_free_port()}"]  # rank 2: nothing listens
    gateway_dead, stop = _serve(create_gateway_app(router_url, dead), **GATEWAY_SERVER_OPTIONS)
    stops.append(stop)
    yield SimpleNamespace(url=gateway, url_dead=gateway_dead, replicas=urls, seen=seen, flags=flags)
    for stop in reversed(stops):
        stop()


def _reached(dp: SimpleNamespace, n: int, path: str) -> list[str]:
    """Who got ``path`` (its path and query) since record ``n``, in arrival order, sorted."""
    return sorted(str(e["replica"]) for e in dp.seen[n:] if e["path_qs"].split("?")[0] == path)


def test_sglang_39562_flush_refused_by_one_rank_is_not_reported_done(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#39562: with several DP workers, ``/flush_cache`` answered 200 when one
    worker refused the flush (only the first reply was read). Through ``sglang-router`` it was a
    206 ``partial_success``, a 2xx that ``raise_for_status()`` passes. A single server answers a
    refused flush with SGLang's 400 ``Flush cache failed.``: the gateway must too."""
    dp.flags["refuse_flush"] = {1}
    try:
        n = len(dp.seen)
        r = requests.post(dp.url + "/flush_cache", headers=AUTH, timeout=10)
        direct = requests.post(dp.replicas[1] + "/flush_cache", headers=AUTH, timeout=10)
    finally:
        dp.flags["refuse_flush"] = set()
    assert direct.status_code == 400
    assert (r.status_code, r.text) == (400, direct.text)
    with pytest.raises(requests.HTTPError):
        r.raise_for_status()
    assert _reached(dp, n, "/flush_cache") == ["0", "1", "1"]  # both ranks, then the direct call


def test_sglang_27612_flush_cache_reaches_every_worker_with_one_servers_answer(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#27612 (a ``/flush_cache`` that flushes every worker): each replica gets
    the flush once, query kept, and the answer is a single server's 200 and text; a rank that
    cannot be reached makes it a 502 naming that rank, never a 200."""
    n = len(dp.seen)
    r = requests.post(dp.url + "/flush_cache?timeout=5", headers=AUTH, timeout=10)
    assert (r.status_code, r.text) == (200, FLUSHED)
    flushed = [e for e in dp.seen[n:] if e["path_qs"].startswith("/flush_cache")]
    assert sorted((str(e["replica"]), e["path_qs"]) for e in flushed) == [
        ("0", "/flush_cache?timeout=5"),
        ("1", "/flush_cache?timeout=5"),
    ]
    r = requests.post(dp.url_dead + "/flush_cache", headers=AUTH, timeout=10)
    assert r.status_code == 502
    assert "rank 2" in r.json()["error"]["message"]
    r = requests.post(dp.url + "/flush_cache", timeout=10)  # no key: each replica's own 401
    assert (r.status_code, r.json()) == (401, {"error": "Unauthorized"})


def test_sglang_7813_get_server_info_has_a_servers_fields(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#7813 (and #7731): ``/get_server_info`` through the router lacked
    ``tokenizer_path`` (``bench_one_batch_server`` failed reading it); ``sglang-router`` 0.3.2
    answers its own summary. Through the gateway both server-info routes answer a replica's
    fields, ``dp_size`` the number of replicas."""
    direct = requests.get(dp.replicas[0] + "/get_server_info", headers=AUTH, timeout=10).json()
    for path in ("/get_server_info", "/server_info"):
        info = requests.get(dp.url + path, headers=AUTH, timeout=10).json()
        assert info["tokenizer_path"] == direct["tokenizer_path"]
        assert info["dp_size"] == 2
        assert {k: v for k, v in info.items() if k not in ("dp_size", "internal_states")} == {
            k: v for k, v in direct.items() if k not in ("dp_size", "internal_states")
        }


def test_sglang_34743_internal_states_has_one_entry_per_rank(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#34743: with DP, ``internal_states`` lists one scheduler per rank (e.g.
    ``[null, 2.90]`` accept lengths), and reading one rank's entry loses the others. The gateway's
    list is every replica's own entries in rank order; a dead rank is left out."""
    own = [
        requests.get(url + "/get_server_info", headers=AUTH, timeout=10).json()["internal_states"]
        for url in dp.replicas
    ]
    info = requests.get(dp.url + "/get_server_info", headers=AUTH, timeout=10).json()
    assert info["internal_states"] == own[0] + own[1]
    assert [s["avg_spec_accept_length"] for s in info["internal_states"]] == [None, 2.9]
    r = requests.get(dp.url_dead + "/get_server_info", headers=AUTH, timeout=10)
    assert r.status_code == 200
    assert r.json()["internal_states"] == own[0] + own[1]
    assert r.json()["dp_size"] == 3


def test_sglang_4282_update_weights_reaches_every_replica(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#4282: ``update_weights_from_disk`` sent to the router did not reach the
    workers (``sglang-router`` 0.3.2: 404), so each had to be updated by hand. Through the gateway
    every replica gets the same body; done is every replica done (``num_paused_requests`` summed),
    and one replica's refusal is the answer."""
    body = {"model_path": "/ckpt/step-200", "weight_version": "200"}
    n = len(dp.seen)
    r = requests.post(dp.url + "/update_weights_from_disk", json=body, headers=AUTH, timeout=10)
    assert r.status_code == 200
    assert r.json() == {
        "success": True,
        "message": "Succeeded to update model weights.",
        "num_paused_requests": 3,
    }
    got = [e for e in dp.seen[n:] if e["path_qs"] == "/update_weights_from_disk"]
    assert sorted(e["replica"] for e in got) == [0, 1]
    assert all(json.loads(e["body"]) == body for e in got)
    bad = {"model_path": "/ckpt/bad"}
    direct = requests.post(dp.replicas[1] + "/update_weights_from_disk", json=bad, headers=AUTH, timeout=10)
    r = requests.post(dp.url + "/update_weights_from_disk", json=bad, headers=AUTH, timeout=10)
    assert (r.status_code, r.json()) == (400, direct.json())
    assert r.json()["success"] is False


def test_sglang_24462_pause_and_continue_reach_every_replica(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#24462: ``/pause_generation`` reached one of the frontends only, leaving
    the others dispatching during a weight transfer. Through the gateway the pause and the
    continue reach every replica before the answer comes back."""
    r = requests.post(dp.url + "/pause_generation", json={"mode": "abort"}, headers=AUTH, timeout=10)
    assert r.status_code == 200
    assert dp.flags["paused"] == {0, 1}
    r = requests.post(dp.url + "/continue_generation", json={}, headers=AUTH, timeout=10)
    assert r.status_code == 200
    assert dp.flags["paused"] == set()


def test_sglang_24167_v1_loads_answers_as_a_server_with_one_entry_per_rank(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#24167: the gateway's ``/v1/loads`` must answer as the SGLang server's
    (``sglang-router`` 0.3.2 has none: 404). A server with ``dp_size`` ranks lists one ``loads``
    entry per rank; here each replica's own entry, ``dp_rank`` its index."""
    own = [requests.get(url + "/v1/loads", headers=AUTH, timeout=10).json() for url in dp.replicas]
    r = requests.get(dp.url + "/v1/loads", headers=AUTH, timeout=10)
    assert r.status_code == 200
    body = r.json()
    expected = [{**e, "dp_rank": rank} for rank, o in enumerate(own) for e in o["loads"]]
    assert body["loads"] == expected
    assert [e["dp_rank"] for e in body["loads"]] == [0, 1]
    assert body["num_accelerators"] == own[0]["num_accelerators"] + own[1]["num_accelerators"]


def test_sglang_32070_v1_loads_dp_rank_maps_to_that_rank(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#32070 (and #28634): a balancer maps each ``loads[].dp_rank`` to that
    rank; ``?dp_rank=1`` must be rank 1's own numbers (replica 1 asked as its rank 0), and a rank
    the group does not have an empty list, as a server answers."""
    own = requests.get(dp.replicas[1] + "/v1/loads", headers=AUTH, timeout=10).json()["loads"][0]
    n = len(dp.seen)
    body = requests.get(dp.url + "/v1/loads?dp_rank=1", headers=AUTH, timeout=10).json()
    assert body["loads"] == [{**own, "dp_rank": 1}]
    assert _reached(dp, n, "/v1/loads") == ["1"]
    assert requests.get(dp.url + "/v1/loads?dp_rank=7", headers=AUTH, timeout=10).json()["loads"] == []


def test_inference_extension_2950_prometheus_loads_keep_every_rank(dp: SimpleNamespace) -> None:
    """kubernetes-sigs/gateway-api-inference-extension#2950: per-rank series (``engine="0"``,
    ``engine="1"``) must all be there, each under its own label, for a scraper to aggregate.
    ``/v1/loads?format=prometheus`` through the gateway parses (one ``dp_rank`` label a sample)
    and has each replica's value under its rank."""
    r = requests.get(dp.url + "/v1/loads?format=prometheus", headers=AUTH, timeout=10)
    assert r.status_code == 200
    samples = [s for f in text_string_to_metric_families(r.text) for s in f.samples]
    assert sorted((s.labels["dp_rank"], s.value) for s in samples) == [("0", 3.0), ("1", 5.0)]
    # a replica's sample already labelled dp_rank="0" gets its rank, not a second dp_rank label
    merged = merge_metrics([(0, 'x{dp_rank="0",a="b"} 1\n'), (1, 'x{dp_rank="0"} 2\n')])
    parsed = [s for f in text_string_to_metric_families(merged) for s in f.samples]
    assert [(s.labels, s.value) for s in parsed] == [
        ({"dp_rank": "0", "a": "b"}, 1.0),
        ({"dp_rank": "1"}, 2.0),
    ]


def test_sglang_6624_health_generate_fails_when_one_rank_cannot_generate(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#6624: ``/health_generate`` kept answering 200 after the scheduler died.
    ``sglang-router`` 0.3.2 answers it from its registry without generating anywhere. Through the
    gateway every replica generates; one that cannot (its own 503) or cannot be reached makes the
    probe fail, and a healthy group answers 200."""
    n = len(dp.seen)
    assert requests.get(dp.url + "/health_generate", timeout=10).status_code == 200
    assert _reached(dp, n, "/health_generate") == ["0", "1"]
    dp.flags["dead_scheduler"] = {1}
    try:
        direct = requests.get(dp.replicas[1] + "/health_generate", timeout=10)
        r = requests.get(dp.url + "/health_generate", timeout=10)
    finally:
        dp.flags["dead_scheduler"] = set()
    assert direct.status_code == 503
    assert r.status_code == direct.status_code
    r = requests.get(dp.url_dead + "/health_generate", timeout=10)
    assert r.status_code == 503
    assert "rank 2" in r.json()["error"]["message"]


def test_vllm_42330_header_pins_generate_and_messages_through_the_gateway(dp: SimpleNamespace) -> None:
    """vllm-project/vllm#42330 (and sgl-project/sglang#38729's table): a generate route that does
    not read ``X-Data-Parallel-Rank`` answers 200 from whichever rank the balancer picks, so a
    router's pin is silently lost. Through the gateway the header pins ``/generate`` and
    ``/v1/messages`` as it pins the OpenAI routes: replica ``k`` answers, the router is not
    asked, the header wins over a body pin (sent on as 0, which the replica accepts), and a rank
    the group does not have is a 400 naming ``dp_size``."""
    for path in ("/generate", "/v1/messages"):
        for rank in (1, 0):
            n = len(dp.seen)
            r = requests.post(
                dp.url + path,
                json={"text": "hi", "data_parallel_rank": 1 - rank},
                headers={**AUTH, "X-Data-Parallel-Rank": str(rank)},
                timeout=10,
            )
            assert (r.status_code, r.json()["text"]) == (200, f"replica {rank}")
            got = [e for e in dp.seen[n:]]
            assert [e["replica"] for e in got] == [rank]
            assert json.loads(got[0]["body"]) == {"text": "hi", "data_parallel_rank": 0}
    r = requests.post(
        dp.url + "/generate", json={"text": "hi"}, headers={**AUTH, "X-Data-Parallel-Rank": "2"}, timeout=10
    )
    assert r.status_code == 400
    assert "dp_size: 2" in r.json()["error"]["message"]
    r = requests.post(dp.url + "/generate", json={"text": "hi"}, headers=AUTH, timeout=10)
    assert r.json()["text"] == "router"  # no pin: the router's choice, as before


ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(scope="module")
def admin_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``admin_app_testutil.admin_app_client``: ``(client, tokenizer_manager)``."""
    with admin_app_client(tmp_path_factory.mktemp("admin")) as pair:
        yield pair


def test_sglang_19832_generate_reads_the_header_on_a_single_server(admin_app: Any) -> None:
    """sgl-project/sglang#19832 (the ``X-Data-Parallel-Rank`` header, vLLM's ``X-data-parallel-
    rank``): the header outranks the body's ``routed_dp_rank``, a non-integer is a 400 "Invalid
    X-Data-Parallel-Rank header: must be an integer", and the rank is checked against
    ``dp_size``. A single server is one rank: on ``/generate`` the header ``1`` is a 400 naming
    ``dp_size: 1`` (before, ignored), and header ``0`` lets a body pin ``1`` through as the OpenAI
    routes do."""
    client, _ = admin_app
    for value, words in (("1", "less than dp_size: 1"), ("zero", "must be an integer")):
        r = client.post(
            "/generate", json={"text": "hi"}, headers={**ADMIN_AUTH, "X-Data-Parallel-Rank": value}
        )
        assert r.status_code == 400
        assert words in r.text and "X-Data-Parallel-Rank" in r.text
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 1}, "routed_dp_rank": 1}
    with pytest.raises(RequestError, match="less than dp_size: 1"):
        parse_generate_body(header_overrides_body_pins(body, None))
    assert parse_generate_body(header_overrides_body_pins(body, "0")).text == "hi"


def test_sglang_10827_model_list_skips_a_dead_replica(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#10827: the router proxied ``GET`` routes (``/v1/models``) to the first
    worker whatever its health, so a restarted pod made them fail until the worker list changed.
    Through the gateway with rank 2 dead, every ``/v1/models`` (the turn starts at each replica in
    turn) is a live replica's own answer, parsed by the ``openai`` client."""
    direct = requests.get(dp.replicas[0] + "/v1/models", headers=AUTH, timeout=10).json()
    client = openai.OpenAI(base_url=dp.url_dead + "/v1", api_key=KEY, max_retries=0)
    for _ in range(4):
        assert [m.id for m in client.models.list()] == [c["id"] for c in direct["data"]]

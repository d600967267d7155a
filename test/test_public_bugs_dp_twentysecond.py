"""Public reports on reading weights from a data-parallel group, replayed on the ``--dp-size``
gateway (:mod:`sglang_v4.entrypoints.dp_gateway_control`): ``/get_weights_by_name`` and
``/get_weight_version``.

All in this process: the gateway in front of a router stub and two replica stubs (a second gateway
adds a rank nothing listens on). ``sglang-router`` 0.3.2 has neither route (its route table has
no ``/get_weights_by_name`` nor ``/get_weight_version``): the router stub answers 404 to both, as it
does to every route it lacks. The replica stubs answer as a single server with ``dp_size`` 1 does:
``/get_weights_by_name`` the parameter's rows (a 400 in the native error shape for a name the
model lacks), ``/get_weight_version`` ``{"weight_version": ...}``.

Faults found here and fixed: ``/get_weights_by_name`` went to the router (a 404, or one worker's
parameter where a router forwards it) where SGLang's server with ``dp_size > 1`` answers a list,
one parameter per rank; ``/get_weight_version`` answered the first replica's version even when the
replicas' versions differed (a weight update that reached only some of them).

Oracles: each replica's own answer to the same request sent to it directly, SGLang 0.5.23's
``TokenizerControlMixin.get_weights_by_name`` (a list of every data-parallel rank's parameter when
there are several ranks, the parameter itself otherwise), ``requests``' ``raise_for_status``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from aiohttp import web
from aiohttp_serve_testutil import free_port, serve_aiohttp
from sglang_v4.entrypoints.dp_gateway import GATEWAY_SERVER_OPTIONS, create_gateway_app

pytestmark = pytest.mark.timeout(60)
KEY = "k3y-22"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: replica -> the rows of ``model.embed_tokens.weight`` it answers (the replicas hold the same
#: checkpoint: the same rows)
ROWS = [[0.25, -0.5], [1.0, 0.125]]


def _replica(index: int, seen: list[dict[str, Any]], versions: list[str]) -> web.Application:
    """One replica (``dp_size`` 1) answering as a single server does; ``versions[index]`` is its
    ``weight_version``."""

    async def record(request: web.Request) -> web.Response | None:
        seen.append({"replica": index, "method": request.method, "path": request.path})
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return None

    async def weights(request: web.Request) -> web.Response:
        if (denied := await record(request)) is not None:
            return denied
        body = json.loads(await request.read() or b"{}")
        if body.get("name") != "model.embed_tokens.weight":
            msg = f"Parameter {body.get('name')!r} not found in the model."
            return web.json_response(
                {"error": {"message": msg, "type": "BadRequestError", "code": 400}}, status=400
            )
        return web.json_response(ROWS[: body.get("truncate_size", 100)])

    async def version(request: web.Request) -> web.Response:
        if (denied := await record(request)) is not None:
            return denied
        return web.json_response({"weight_version": versions[index]})

    app = web.Application()
    app.router.add_route("GET", "/get_weights_by_name", weights)
    app.router.add_route("POST", "/get_weights_by_name", weights)
    app.router.add_get("/get_weight_version", version)
    return app


def _router() -> web.Application:
    """``sglang-router`` 0.3.2 on the routes it lacks: 404."""

    async def any_route(request: web.Request) -> web.Response:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_route)
    return app


def _sglang_function_source(relpath: str, name: str) -> str:
    """The source of the function ``name`` in the installed SGLang's ``relpath`` (read, not
    imported: importing it needs GPU-only packages)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("SGLang is not installed")
    text = (Path(next(iter(spec.submodule_search_locations))) / relpath).read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return ast.get_source_segment(text, node) or ""
    raise AssertionError(f"{name} not found in SGLang's {relpath}")


@pytest.fixture(scope="module")
def dp() -> Iterator[SimpleNamespace]:
    seen: list[dict[str, Any]] = []
    versions = ["default", "default"]
    stops, urls = [], []
    for i in range(2):
        url, stop = serve_aiohttp(_replica(i, seen, versions))
        urls.append(url)
        stops.append(stop)
    router_url, stop = serve_aiohttp(_router())
    stops.append(stop)
    gateway, stop = serve_aiohttp(create_gateway_app(router_url, urls), **GATEWAY_SERVER_OPTIONS)
    stops.append(stop)
    dead = urls + [f"http://127.0.0.1:{free_port()}"]  # rank 2: nothing listens
    gateway_dead, stop = serve_aiohttp(create_gateway_app(router_url, dead), **GATEWAY_SERVER_OPTIONS)
    stops.append(stop)
    yield SimpleNamespace(url=gateway, url_dead=gateway_dead, replicas=urls, seen=seen, versions=versions)
    for stop in reversed(stops):
        stop()


def test_sglang_1814_get_weights_by_name_answers_every_rank_as_sglang_with_dp(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#1814 (the parameter-update API failing with DP=2; its test reads the
    parameter back with ``/get_weights_by_name`` to check every rank took the update). Expected:
    through the gateway, the answer is a list with each replica's own answer to the same request,
    in rank order: the shape of SGLang's ``get_weights_by_name`` with several data-parallel ranks
    (read from SGLang's installed source), so a rank that missed an update shows; GET and POST
    alike."""
    source = _sglang_function_source("srt/managers/tokenizer_control_mixin.py", "get_weights_by_name")
    returns = re.findall(r"return (all_parameters\S*)", source)
    assert sorted(returns) == ["all_parameters", "all_parameters[0]"], source  # dp > 1: the list
    body = {"name": "model.embed_tokens.weight", "truncate_size": 1}
    direct = [
        requests.post(u + "/get_weights_by_name", json=body, headers=AUTH, timeout=10) for u in dp.replicas
    ]
    assert [r.status_code for r in direct] == [200, 200]
    for method in ("POST", "GET"):
        r = requests.request(method, dp.url + "/get_weights_by_name", json=body, headers=AUTH, timeout=10)
        assert r.status_code == 200, r.text
        assert r.json() == [d.json() for d in direct]


def test_sglang_2050_get_weights_by_name_refusal_and_dead_rank_are_not_one_replicas_answer(
    dp: SimpleNamespace,
) -> None:
    """sgl-project/sglang#2050 (weight update and read-back fixed for data parallelism: every rank
    is asked). Expected: a name a replica refuses passes that replica's 400 on (the same body as
    asked directly); a rank that cannot be reached is a 502 naming it, never the other ranks'
    parameters presented as the group's; a missing key is each replica's 401."""
    bad = {"name": "no.such.weight"}
    direct = requests.post(dp.replicas[0] + "/get_weights_by_name", json=bad, headers=AUTH, timeout=10)
    r = requests.post(dp.url + "/get_weights_by_name", json=bad, headers=AUTH, timeout=10)
    assert direct.status_code == 400
    assert (r.status_code, r.json()) == (400, direct.json())
    good = {"name": "model.embed_tokens.weight"}
    r = requests.post(dp.url_dead + "/get_weights_by_name", json=good, headers=AUTH, timeout=10)
    assert r.status_code == 502, r.text
    assert "rank 2" in r.text
    assert requests.post(dp.url + "/get_weights_by_name", json=good, timeout=10).status_code == 401


def test_vime_45_weight_version_disagreement_between_replicas_is_reported(dp: SimpleNamespace) -> None:
    """vllm-project/vime#45 (a trainer compares one engine's ``get_weight_version`` with its own
    and fails with "Weight version mismatch" when an engine missed the update). Expected: when every
    replica reports the same version the gateway answers it as a replica does (same body); when
    they differ it is an error status naming each rank's version (``raise_for_status`` raises),
    never the first replica's version taken for the group's."""
    same = requests.get(dp.url + "/get_weight_version", headers=AUTH, timeout=10)
    direct = requests.get(dp.replicas[1] + "/get_weight_version", headers=AUTH, timeout=10)
    assert (same.status_code, same.json()) == (200, direct.json())
    dp.versions[1] = "step-7"
    try:
        r = requests.get(dp.url + "/get_weight_version", headers=AUTH, timeout=10)
    finally:
        dp.versions[1] = "default"
    assert r.status_code == 409, r.text
    with pytest.raises(requests.HTTPError):
        r.raise_for_status()
    msg = r.json()["error"]["message"]
    assert "rank 0: 'default'" in msg and "rank 1: 'step-7'" in msg, msg
    r = requests.get(dp.url_dead + "/get_weight_version", headers=AUTH, timeout=10)
    assert r.status_code == 502 and "rank 2" in r.text

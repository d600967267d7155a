"""The ``--dp-size`` gateway (:mod:`sglang_v4.entrypoints.dp_gateway`) in front of a router and a
replica, all in this process: the model routes answer as the replica does, in Anthropic's shape for
a request carrying ``anthropic-version`` (``sglang-router`` answered ``/v1/models`` itself, in
OpenAI's shape only, with the model's path as its id, and had no ``/v1/models/{id}``), and every
other request reaches the router as sent, its answer coming back as the router sent it, streamed
(repeated headers kept); a client that goes away closes the router's request (also before any
answer), and a router that drops the connection unanswered is a 502, not the gateway's 500; the
gateway's own errors are in the route's error shape (OpenAI's, Anthropic's or SGLang's native).

The replica is the OpenAI and Anthropic routers over ``fake_prompt_tm.PromptTM`` (uvicorn); the
router a stub that answers like ``sglang-router`` and echoes what it receives (aiohttp). Oracles:
the ``anthropic`` and ``openai`` clients' own parsers, the replica's own answers to the same
requests, and the stub's record of what reached it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import anthropic
import openai
import pytest
import requests
import uvicorn
from aiohttp import web
from aiohttp_serve_testutil import free_port as _free_port
from aiohttp_serve_testutil import serve_aiohttp as _serve_aiohttp
from fake_prompt_tm import MODEL, PromptTM
from fastapi import FastAPI
from sglang_v4.entrypoints.anthropic import create_anthropic_router
from sglang_v4.entrypoints.dp_gateway import GATEWAY_SERVER_OPTIONS, create_gateway_app
from sglang_v4.entrypoints.openai import create_openai_router
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)
KEY = "s3cret"
ANTHROPIC = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
#: what sglang-router 0.3.2 answers to ``GET /v1/models`` (its worker registry: the model's path)
ROUTER_MODELS = {"object": "list", "data": [{"id": "/models/dsv4", "object": "model", "owned_by": "local"}]}


def _router_stub(seen: list[dict[str, Any]]) -> web.Application:
    """Answers like ``sglang-router`` (its own model list, 404 on routes it lacks), echoes
    ``/echo``, streams ``/stream`` (its first event, then the rest once the client has read it:
    ``"go_on"`` set in its record), sets two cookies on ``/cookies``, closes the connection
    unanswered on ``/drop``, ``/v1/chat/completions``, ``/v1/messages/count_tokens`` and
    ``/generate``, and answers ``/slow`` after 5 s (``"cancelled"`` in its record when
    the gateway closes the request first); records each request it gets in ``seen``."""

    async def record(request: web.Request) -> dict[str, Any]:
        entry = {
            "method": request.method,
            "path_qs": request.rel_url.raw_path_qs,
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "body": await request.read(),
        }
        seen.append(entry)
        return entry

    async def models(request: web.Request) -> web.Response:
        await record(request)
        return web.json_response(ROUTER_MODELS)

    async def echo(request: web.Request) -> web.Response:
        e = await record(request)
        return web.json_response(
            {"method": e["method"], "path_qs": e["path_qs"], "body": e["body"].decode()},
            status=201,
            headers={"x-upstream": "router"},
        )

    async def stream(request: web.Request) -> web.StreamResponse:
        e = await record(request)
        e["go_on"] = threading.Event()  # set by the client once it has read the first event
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: 0\n\n")
        # True when the client read the first event before the rest was written (a gateway that
        # buffered the answer would hold it until the 30 s are over: False)
        e["released"] = await asyncio.get_running_loop().run_in_executor(None, e["go_on"].wait, 30)
        for k in (1, 2):
            await resp.write(f"data: {k}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def cookies(request: web.Request) -> web.Response:
        await record(request)
        resp = web.Response(text="ok")
        resp.headers.add("Set-Cookie", "a=1")
        resp.headers.add("Set-Cookie", "b=2")
        return resp

    async def drop(request: web.Request) -> web.Response:
        await record(request)
        assert request.transport is not None
        request.transport.close()
        return web.Response(text="never sent")

    async def slow(request: web.Request) -> web.Response:
        e = await record(request)
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            e["cancelled"] = True
            raise
        return web.Response(text="late")

    async def missing(request: web.Request) -> web.Response:
        await record(request)
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_route("*", "/echo", echo)
    app.router.add_post("/stream", stream)
    app.router.add_get("/cookies", cookies)
    for path in ("/drop", "/v1/chat/completions", "/v1/messages/count_tokens", "/generate"):
        app.router.add_post(path, drop)
    app.router.add_post("/slow", slow)
    app.router.add_route("*", "/{tail:.*}", missing)
    return app


@pytest.fixture(scope="module")
def stack(tok: PreTrainedTokenizerFast) -> Iterator[SimpleNamespace]:
    """A replica (uvicorn), a router stub and the gateway over them; the gateway's URL."""
    sa = SimpleNamespace(served_model_name=MODEL, model_path=None, api_key=KEY, enable_cache_report=False)
    app = FastAPI()
    router = create_openai_router(PromptTM(tok), sa)
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    replica = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while not server.started:
        assert time.time() < deadline, "the replica did not start"
        time.sleep(0.02)
    seen: list[dict[str, Any]] = []
    # the stub notices a closed request as sglang-router's server does (its handler is cancelled)
    router_url, stop_router = _serve_aiohttp(_router_stub(seen), handler_cancellation=True, access_log=None)
    # the first replica URL answers nothing: the model routes go on to the next one
    gateway_url, stop_gateway = _serve_aiohttp(
        create_gateway_app(router_url, [f"http://127.0.0.1:{_free_port()}", replica]),
        **GATEWAY_SERVER_OPTIONS,
    )
    yield SimpleNamespace(url=gateway_url, replica=replica, seen=seen)
    stop_gateway()
    stop_router()
    server.should_exit = True
    thread.join(10)


def test_models_answer_as_a_single_server_in_both_shapes(stack: SimpleNamespace) -> None:
    client = anthropic.Anthropic(base_url=stack.url, api_key=KEY, max_retries=0)
    for _ in range(2):  # each replica in turn: the dead one is skipped
        page = client.models.list()
        (info,) = page.data
        assert info.type == "model" and info.id == MODEL and page.first_id == MODEL
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("no-such-model")
    with pytest.raises(anthropic.AuthenticationError):  # the replica checks the key
        anthropic.Anthropic(base_url=stack.url, api_key="bad", max_retries=0).models.list()
    oa = openai.OpenAI(base_url=stack.url + "/v1", api_key=KEY, max_retries=0)
    assert [m.id for m in oa.models.list().data] == [MODEL]  # the router said "/models/dsv4"
    assert oa.models.retrieve(MODEL).id == MODEL  # the router has no such route
    for path, headers in (
        ("/v1/models", ANTHROPIC),
        ("/v1/models?limit=1", ANTHROPIC),
        (f"/v1/models/{MODEL}", ANTHROPIC),
        ("/v1/models", {"authorization": f"Bearer {KEY}"}),
    ):
        direct = requests.get(stack.replica + path, headers=headers, timeout=10)
        through = requests.get(stack.url + path, headers=headers, timeout=10)
        assert (through.status_code, through.json()) == (direct.status_code, direct.json()), path
    assert not any(e["path_qs"].startswith("/v1/models") for e in stack.seen)


def test_other_requests_reach_the_router_as_sent(stack: SimpleNamespace) -> None:
    n = len(stack.seen)
    body = b'{"text": "caf\xc3\xa9", "sampling_params": {"max_new_tokens": 2}}'
    r = requests.post(
        stack.url + "/echo?a=1&b=%2F",
        data=body,
        headers={
            "authorization": f"Bearer {KEY}",
            "content-type": "application/json",
            "x-request-id": "rq-7",
        },
        timeout=10,
    )
    assert r.status_code == 201 and r.headers["x-upstream"] == "router"
    assert r.json() == {"method": "POST", "path_qs": "/echo?a=1&b=%2F", "body": body.decode()}
    got = stack.seen[n]
    assert got["body"] == body and got["headers"]["authorization"] == f"Bearer {KEY}"
    assert got["headers"]["x-request-id"] == "rq-7"
    gone = requests.post(stack.url + "/v1/messages", json={}, headers=ANTHROPIC, timeout=10)
    assert gone.status_code == 404  # the router's answer, as it gave it
    n = len(stack.seen)
    with requests.post(stack.url + "/stream", json={}, stream=True, timeout=60) as s:
        assert s.headers["content-type"].startswith("text/event-stream")
        got = []
        for ln in s.iter_lines():
            if ln and not got:
                stack.seen[n]["go_on"].set()
            got += [ln] if ln else []
    assert got == [b"data: 0", b"data: 1", b"data: 2", b"data: [DONE]"]
    # streamed: the first event came before the stub wrote the others (it waits for this client
    # to have read it; a bet on the time between events failed when a loaded client read late)
    assert stack.seen[n]["released"] is True


def test_repeated_headers_come_back_whole(stack: SimpleNamespace) -> None:
    r = requests.get(stack.url + "/cookies", timeout=10)
    assert r.status_code == 200 and r.raw.headers.getlist("Set-Cookie") == ["a=1", "b=2"]


def test_router_dropping_the_connection_is_a_502(stack: SimpleNamespace) -> None:
    r = requests.post(stack.url + "/drop", json={}, timeout=10)
    assert r.status_code == 502 and "error" in r.json()


def _openai_error_object(e: openai.APIStatusError) -> dict[str, Any]:
    """The error object the ``openai`` client parsed (its ``body``: the ``"error"`` member)."""
    assert isinstance(e.body, dict), e.body
    return e.body


def test_gateway_errors_have_the_routes_error_shape(stack: SimpleNamespace) -> None:
    """The gateway's own 502 (router unanswered) and 503 (no replica answered) are written as a
    single server writes errors for the route (they were ``{"error": "<text>"}``, which no client
    parses): OpenAI's error object ``{"message", "type", "param", "code"}`` under ``/v1/``
    (https://platform.openai.com/docs/guides/error-codes; oracle: the ``openai`` client's
    parser), Anthropic's ``{"type": "error", "error": {"type", "message"}}`` on its routes (the
    ``anthropic`` client's parser), SGLang's native ``{"error": {"message", "type", "code"}}``
    elsewhere (also sglang-router's own shape)."""
    oa = openai.OpenAI(base_url=stack.url + "/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.InternalServerError) as ei:
        oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    err = _openai_error_object(ei.value)
    assert ei.value.status_code == 502 and set(err) >= {"message", "type", "param", "code"}, err
    assert err["message"] == "The router did not answer." and err["code"] == 502
    an = anthropic.Anthropic(base_url=stack.url, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.InternalServerError) as ai:
        an.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert ai.value.status_code == 502 and isinstance(ai.value.body, dict)
    assert (
        ai.value.body["type"] == "error" and ai.value.body["error"]["message"] == "The router did not answer."
    )
    r = requests.post(stack.url + "/generate", json={"text": "hi"}, timeout=10)
    assert r.status_code == 502
    native = r.json()["error"]
    assert native["message"] == "The router did not answer." and native["code"] == 502
    # no replica answers: 503 in the shape the request asked for
    router_url, stop_router = _serve_aiohttp(_router_stub([]))
    gateway_url, stop_gateway = _serve_aiohttp(
        create_gateway_app(router_url, [f"http://127.0.0.1:{_free_port()}"]), **GATEWAY_SERVER_OPTIONS
    )
    try:
        oa = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEY, max_retries=0)
        with pytest.raises(openai.APIStatusError) as ei:
            oa.models.list()
        err = _openai_error_object(ei.value)
        assert ei.value.status_code == 503 and set(err) >= {"message", "type", "param", "code"}, err
        assert err["message"] == "No replica answered." and err["code"] == 503
        an = anthropic.Anthropic(base_url=gateway_url, api_key=KEY, max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as ai:
            an.models.list()
        assert ai.value.status_code == 503 and isinstance(ai.value.body, dict)
        assert (
            ai.value.body["type"] == "error" and ai.value.body["error"]["message"] == "No replica answered."
        )
    finally:
        stop_gateway()
        stop_router()


def test_client_gone_before_the_answer_closes_the_router_request(stack: SimpleNamespace) -> None:
    """A non-streamed request whose client disconnects while the router has not answered yet:
    the router's request is closed (its handler cancelled) well before its 5 s answer."""
    n = len(stack.seen)
    host, port = stack.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        )
        deadline = time.time() + 30
        while len(stack.seen) <= n:
            assert time.time() < deadline, "the request did not reach the router"
            time.sleep(0.02)
    # only a cancellation sets "cancelled" (a handler that ran to its answer never does), so the
    # wait may be generous for a loaded machine
    deadline = time.time() + 30
    while not stack.seen[n].get("cancelled"):
        assert time.time() < deadline, "the router's request stayed open after the client left"
        time.sleep(0.02)


def test_dp_rank_header_goes_straight_to_that_replica(stack: SimpleNamespace) -> None:
    """SGLang's ``X-Data-Parallel-Rank`` header (read by SGLang's OpenAI serving, and by vLLM as
    ``X-data-parallel-rank``) on a generation route: rank ``i`` is replica ``i`` (here 1: the live
    replica, which answers as it does directly; 0: the dead one, a 502), the router never sees the
    request and the replica gets the header as ``0`` (it is one rank of its own), so a body pin
    does not make it refuse what the header routed; a rank outside ``[0, dp_size)`` or a non-integer is a 400 in OpenAI's error shape (the
    ``openai`` client's own parse). A header on another route goes to the router unchanged."""
    n = len(stack.seen)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    auth = {"authorization": f"Bearer {KEY}"}
    direct = requests.post(stack.replica + "/v1/chat/completions", json=body, headers=auth, timeout=30)
    assert direct.status_code == 200, direct.text
    for name in ("X-Data-Parallel-Rank", "x-data-parallel-rank"):
        r = requests.post(
            stack.url + "/v1/chat/completions", json=body, headers={**auth, name: "1"}, timeout=30
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"] == direct.json()["choices"][0]["message"]
    for pin in ("routed_dp_rank", "data_parallel_rank"):  # the header overrides the body's pin, as
        # in SGLang: the same rank pinned in both (or another in the body) is served by replica 1
        for body_rank in (1, 0, 5):
            r = requests.post(
                stack.url + "/v1/chat/completions",
                json={**body, pin: body_rank},
                headers={**auth, "X-Data-Parallel-Rank": "1"},
                timeout=30,
            )
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"] == direct.json()["choices"][0]["message"]
    dead = requests.post(
        stack.url + "/v1/chat/completions", json=body, headers={**auth, "X-Data-Parallel-Rank": "0"}
    )
    assert dead.status_code == 502 and "rank 0" in dead.json()["error"]["message"]
    oa = openai.OpenAI(base_url=stack.url + "/v1", api_key=KEY, max_retries=0)
    for bad, words in (("2", "less than dp_size: 2"), ("-1", "non-negative"), ("one", "must be an integer")):
        with pytest.raises(openai.BadRequestError) as ei:
            oa.chat.completions.create(**body, extra_headers={"X-Data-Parallel-Rank": bad})
        assert words in ei.value.message, ei.value.message
    assert len(stack.seen) == n  # none of them reached the router
    r = requests.post(stack.url + "/echo", json={}, headers={"X-Data-Parallel-Rank": "7"}, timeout=10)
    assert r.status_code == 201 and stack.seen[-1]["headers"]["x-data-parallel-rank"] == "7"

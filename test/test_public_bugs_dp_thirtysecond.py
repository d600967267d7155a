"""Public reports on a proxy in front of data-parallel replicas, replayed on the ``--dp-size``
gateway (:mod:`sglang_v4.entrypoints.dp_gateway`): a client leaving a silent stream (through the
router or pinned to a replica), a streamed answer's anti-buffering headers, a request id reused as
soon as its answer was read, a dead replica next to live ones, and ``/abort_request`` fanned out
when a replica is gone or its URL ends in ``/``.

All in this process, no model: the gateway served from a thread in front of a router stub and
replica stubs (``aiohttp_serve_testutil``). The router stub answers ``/generate`` at once with the
body's ``rid``, and with ``"stream": true`` as SGLang's streaming routes answer (``text/event-stream``,
``X-Accel-Buffering: no``, ``Cache-Control: no-cache``): one event, then silence until the
gateway closes the request (its handler cancelled, as ``sglang-router``'s server notices a closed
connection). The replica stubs record each ``/abort_request`` they get; one replica URL answers
nothing (a dead replica).

Fault found here and fixed: a router or replica URL written with a trailing ``/``
(``http://host:port/``) made the gateway ask ``//abort_request`` (and ``//generate``, ...), a
path no server serves (404); the gateway now drops the trailing ``/`` of each URL it is given.

Oracles: the SSE and HTTP/1.1 framing rules (a streamed answer carries no ``Content-Length``),
the headers the upstream itself sent, SGLang's single-server rule that a ``rid`` is refused only
while a request holding it is in flight, the ``openai``-independent ``requests`` / raw-socket
reading of each answer, and the body each client sent.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from aiohttp import web
from aiohttp_serve_testutil import free_port, serve_aiohttp
from sglang_v4.entrypoints.dp_gateway import GATEWAY_SERVER_OPTIONS, create_gateway_app

pytestmark = pytest.mark.timeout(60)
#: the headers SGLang's streaming routes send (``sse_response.ClosingStreamingResponse``)
SSE_HEADERS = {"Content-Type": "text/event-stream", "X-Accel-Buffering": "no", "Cache-Control": "no-cache"}


def _generate_handler(seen: list[dict[str, Any]], index: int | None) -> Any:
    """``/generate`` of the router (``index`` ``None``) or of replica ``index``: the body's ``rid``
    echoed at once, or with ``"stream": true`` one SSE event and then silence (``"cancelled"`` set
    in its record when the gateway closes the request). Each request is recorded in ``seen``."""

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        entry: dict[str, Any] = {"body": body, "at": index}
        seen.append(entry)
        if not body.get("stream"):
            return web.json_response({"text": "ok", "meta_info": {"id": body.get("rid")}})
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        await resp.write(b'data: {"text": "a"}\n\n')
        try:
            await asyncio.sleep(30)  # a long prefill of the next piece: nothing to send
        except asyncio.CancelledError:
            entry["cancelled"] = True
            raise
        await resp.write(b"data: [DONE]\n\n")
        return resp

    return generate


def _router_stub(seen: list[dict[str, Any]]) -> web.Application:
    """The router stub: ``/generate`` (:func:`_generate_handler`)."""
    app = web.Application()
    app.router.add_post("/generate", _generate_handler(seen, None))
    return app


def _replica_stub(
    index: int, aborts: list[tuple[int, str, Any]], seen: list[dict[str, Any]] | None = None
) -> web.Application:
    """Records each ``/abort_request`` as ``(index, content type, JSON body)`` and answers 200;
    serves ``/generate`` (:func:`_generate_handler`, recorded in ``seen``) when ``seen`` is given."""

    async def abort(request: web.Request) -> web.Response:
        aborts.append((index, request.headers.get("Content-Type", ""), await request.json()))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/abort_request", abort)
    if seen is not None:
        app.router.add_post("/generate", _generate_handler(seen, index))
    return app


@pytest.fixture(scope="module")
def dp() -> Iterator[SimpleNamespace]:
    """The gateway over the router stub and replicas ``[live 0, dead, live 2]`` (``url``), and a
    gateway whose replicas are all dead (``url_dead``)."""
    seen: list[dict[str, Any]] = []
    aborts: list[tuple[int, str, Any]] = []
    router_url, stop_router = serve_aiohttp(_router_stub(seen), handler_cancellation=True, access_log=None)
    live = [
        serve_aiohttp(_replica_stub(i, aborts, seen), handler_cancellation=True, access_log=None)
        for i in (0, 2)
    ]
    replicas = [live[0][0], f"http://127.0.0.1:{free_port()}", live[1][0]]
    url, stop = serve_aiohttp(create_gateway_app(router_url, replicas), **GATEWAY_SERVER_OPTIONS)
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    url_dead, stop_dead = serve_aiohttp(create_gateway_app(router_url, dead), **GATEWAY_SERVER_OPTIONS)
    yield SimpleNamespace(url=url, url_dead=url_dead, seen=seen, aborts=aborts, replicas=replicas)
    for s in (stop, stop_dead, stop_router, live[0][1], live[1][1]):
        s()


def _wait(cond: Any, what: str, limit: float = 20.0) -> None:
    deadline = time.time() + limit
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.02)


def _open_stream(url: str, rid: str, rank: int | None = None) -> tuple[socket.socket, bytes]:
    """A streamed ``/generate`` with ``rid`` (and ``X-Data-Parallel-Rank: rank`` when given) sent
    on a raw socket; the bytes read up to its first SSE event (head and first chunk)."""
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    body = json.dumps({"text": "hi", "rid": rid, "stream": True}).encode()
    pin = b"" if rank is None else f"X-Data-Parallel-Rank: {rank}\r\n".encode()
    s.sendall(
        b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + pin
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    got = b""
    while b'{"text": "a"}' not in got:
        piece = s.recv(65536)
        assert piece, got
        got += piece
    return s, got


def test_smg_2136_client_leaving_a_silent_stream_closes_the_upstream(dp: SimpleNamespace) -> None:
    """smg-project/smg#2136 (also sgl-project/sglang#19524): the router's streaming relay noticed a
    client's disconnect only when it next wrote a chunk, so a client that left while the upstream
    was silent (a long prefill) kept the engine's request running. Expected: once the client closes
    the connection, the upstream request is closed too (the stub's handler cancelled) well before
    its next event, and the stream's ``rid`` is free again (SGLang refuses a rid only while its
    request is in flight)."""
    n = len(dp.seen)
    s, _ = _open_stream(dp.url, "silent-1")
    s.close()
    _wait(lambda: dp.seen[n].get("cancelled"), "the router's stream stayed open after the client left")
    # the rid was released with the request: the same rid is served again
    _wait(
        lambda: (
            requests.post(
                dp.url + "/generate", json={"text": "hi", "rid": "silent-1"}, timeout=10
            ).status_code
            == 200
        ),
        "the rid of a request whose client left stayed held",
    )


def test_sglang_39461_client_leaving_a_pinned_stream_closes_the_replicas_request(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#39461: a client that disconnected mid-request left the engine generating
    (the router did not cancel it), silent streams included. Expected for a stream pinned to a
    rank (``X-Data-Parallel-Rank: 2``, sent straight to that replica, not the router): it reaches
    replica 2 only, and once the client closes the connection that replica's request is closed
    while it is still silent."""
    n = len(dp.seen)
    s, _ = _open_stream(dp.url, "pinned-1", rank=2)
    s.close()
    _wait(lambda: dp.seen[n].get("cancelled"), "the replica's stream stayed open after the client left")
    assert [e["at"] for e in dp.seen[n:]] == [2], dp.seen[n:]


def test_omlx_2708_dead_rank_is_an_error_and_the_others_keep_serving(dp: SimpleNamespace) -> None:
    """jundot/omlx#2708: with one rank's worker not listening, a request that needed it came back
    as an empty ``200`` (no error). Expected: a request pinned to the dead replica (rank 1, by the
    header or by ``routed_dp_rank``) is a ``502`` in SGLang's native error shape naming rank 1,
    never a 2xx; requests pinned to the live ranks 0 and 2 are served by them at the same time."""
    for kw in ({"headers": {"X-Data-Parallel-Rank": "1"}}, {"json_extra": {"routed_dp_rank": 1}}):
        body = {"text": "hi", **kw.get("json_extra", {})}
        r = requests.post(dp.url + "/generate", json=body, headers=kw.get("headers"), timeout=10)
        assert r.status_code == 502, r.text
        assert "rank 1" in r.json()["error"]["message"], r.text
    n = len(dp.seen)
    for rank in (0, 2):
        r = requests.post(
            dp.url + "/generate",
            json={"text": "hi", "rid": f"live-{rank}"},
            headers={"X-Data-Parallel-Rank": str(rank)},
            timeout=10,
        )
        assert r.status_code == 200 and r.json()["meta_info"]["id"] == f"live-{rank}", r.text
    assert [e["at"] for e in dp.seen[n:]] == [0, 2], dp.seen[n:]


def test_xagent_1358_streamed_answer_keeps_its_anti_buffering_headers(dp: SimpleNamespace) -> None:
    """xorbitsai/xagent#1358 (also kychee-com/run402#510): a streamed answer behind a proxy lost
    ``X-Accel-Buffering: no`` / ``Cache-Control: no-cache``, or came back with a
    ``Content-Length`` (only possible once the whole body was collected), so small SSE frames sat
    in a buffer. Expected through the gateway: the upstream's three headers as it sent them, no
    ``Content-Length``, HTTP/1.1 chunked framing, and the first event delivered while the
    upstream is still silent."""
    s, got = _open_stream(dp.url, "headers-1")
    try:
        head = got.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        assert head[0].startswith("HTTP/1.1 200"), head
        fields: dict[str, list[str]] = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            fields.setdefault(name.strip().lower(), []).append(value.strip())
        for name, value in SSE_HEADERS.items():
            assert fields.get(name.lower()) == [value], (name, fields)
        assert "content-length" not in fields, fields
        assert fields.get("transfer-encoding") == ["chunked"], fields
    finally:
        s.close()


def test_quantick_425_rid_reusable_as_soon_as_its_answer_is_read(dp: SimpleNamespace) -> None:
    """milocaetano/quantick#425: a gateway wrote its answer before releasing the request id, so a
    client that reused the id right after reading the answer was refused as a duplicate. SGLang
    refuses a ``rid`` only while a request holding it is in flight. Expected: the same ``rid``
    sent again the moment each answer was read is served every time (a batch's rids too)."""
    with requests.Session() as http:
        for k in range(40):
            body = {"text": "hi", "rid": "again"} if k % 2 else {"text": ["a", "b"], "rid": ["again", "b2"]}
            r = http.post(dp.url + "/generate", json=body, timeout=10)
            assert r.status_code == 200, (k, r.text)


def test_sglang_35782_abort_reaches_live_replicas_when_one_is_dead(dp: SimpleNamespace) -> None:
    """sgl-project/sglang#35782 (also sgl-project/sglang#31685): ``/abort_request`` must reach every
    worker, since the router does not know which one holds the rid; a worker that cannot be
    reached must not stop the abort reaching the others. Expected: with replica 1 dead, both live
    replicas get the body as the client sent it (``rid`` or ``abort_all``) as JSON, and the answer
    is a server's 200; with every replica dead the answer is a 502 in SGLang's native error shape
    (nothing was aborted)."""
    for body in ({"rid": "req-7"}, {"abort_all": True}):
        n = len(dp.aborts)
        r = requests.post(dp.url + "/abort_request", json=body, timeout=10)
        assert r.status_code == 200, r.text
        got = sorted(dp.aborts[n:], key=lambda a: a[0])
        assert [a[0] for a in got] == [0, 2], got
        assert all(a[1].startswith("application/json") and a[2] == body for a in got), got
    r = requests.post(dp.url_dead + "/abort_request", json={"rid": "req-7"}, timeout=10)
    assert r.status_code == 502, r.text
    assert isinstance(r.json()["error"]["message"], str) and r.json()["error"]["message"]


def test_sglang_35782_replica_urls_with_a_trailing_slash() -> None:
    """sgl-project/sglang#35782 (its trailing-slash worker URLs): a worker URL written with a
    trailing ``/`` made the fan-out ask ``//abort_request``, a path the worker does not serve.
    Expected: ``http://host:port/`` names the same replica as ``http://host:port``; the abort
    reaches it at ``/abort_request``, and so does a pinned generation request."""
    aborts: list[tuple[int, str, Any]] = []
    rep_url, stop_rep = serve_aiohttp(_replica_stub(0, aborts), access_log=None)
    seen: list[dict[str, Any]] = []
    router_url, stop_router = serve_aiohttp(_router_stub(seen), access_log=None)
    url, stop = serve_aiohttp(create_gateway_app(router_url + "/", [rep_url + "/"]), **GATEWAY_SERVER_OPTIONS)
    try:
        r = requests.post(url + "/abort_request", json={"rid": "z"}, timeout=10)
        assert r.status_code == 200, r.text
        assert aborts == [(0, "application/json", {"rid": "z"})]
        r = requests.post(url + "/generate", json={"text": "hi", "rid": "g"}, timeout=10)
        assert r.status_code == 200 and r.json()["meta_info"]["id"] == "g", r.text
    finally:
        stop()
        stop_router()
        stop_rep()

"""The ``--dp-size`` front door: an HTTP gateway on the server's port in front of ``sglang-router``.

``sglang-router`` answers ``GET /v1/models`` itself, from its worker registry and in OpenAI's shape
only (each model's id its path on disk, ``owned_by: "local"``), and has no ``/v1/models/{id}``: a
client of the Anthropic API (its SDK, Claude Code's gateway discovery) sends ``anthropic-version``
and gets no Anthropic ``ModelInfo`` list, where a single server answers in Anthropic's shape
(:mod:`sglang_v4.entrypoints.anthropic.models`). The gateway sends the model routes
(:data:`MODEL_ROUTES`) to a replica, headers and query kept, so they answer as one server does in
both shapes, and forwards every other request to the router unchanged: method, path, query,
headers (hop-by-hop ones excepted), body, and the router's status, headers and body, streamed as
they come (SSE included). A request to an OpenAI generation route, ``/generate`` or ``/v1/messages``
(:data:`~sglang_v4.entrypoints.dp_rank_header.GATEWAY_HEADER_PIN_ROUTES`) carrying SGLang's
``X-Data-Parallel-Rank`` header (:mod:`sglang_v4.entrypoints.dp_rank_header`) goes straight to
replica ``rank`` (replica ``i`` is rank ``i``) with the header, and any rank pin in a JSON body,
set to ``0`` (that replica is one rank of its own; the header overrides a body pin, as in
SGLang); a rank outside ``[0, dp_size)`` or a value that is not an integer is the gateway's 400, in
the route's error shape. A JSON body of ``/generate`` or of those routes pinning a rank with
SGLang's ``routed_dp_rank`` / ``data_parallel_rank`` (:func:`body_dp_rank`) goes to that replica
too, the pin set to ``0`` there (the router would send it to any replica, which refused any rank
but its own 0); a pinned rank outside ``[0, dp_size)`` is the gateway's 400 in SGLang's words.
A generation request naming a ``rid`` that a request still passing through holds is the
gateway's 400, as a single server refuses it (:mod:`sglang_v4.entrypoints.dp_gateway_rids`).
``/get_load``, ``/v1/loads``, ``/abort_request`` and ``/metrics``, which the router lacks, are answered from every replica
(:mod:`sglang_v4.entrypoints.dp_gateway_fanout`); ``/flush_cache``, the runtime-control routes
and ``/get_server_info``, which the router lacks or answers in its own shape, go to every replica
too (:mod:`sglang_v4.entrypoints.dp_gateway_control`). A client that goes away cancels its handler (aiohttp's
``handler_cancellation``, :data:`GATEWAY_SERVER_OPTIONS`), which closes the router's request and
so aborts the generation on the replica, streamed or not. An upstream that cannot be reached or
drops the connection before answering is a 502 (the model routes try the next replica first, and
are a 503 when none answers); one that fails later ends the answer where it stands. Those errors
have the body a single server writes for the route (OpenAI's error object under ``/v1/``,
Anthropic's for its routes, SGLang's native shape elsewhere:
:func:`~sglang_v4.entrypoints.route_errors.route_error_body`). The replicas serve one model under one name, so
any healthy replica answers for all.

API keys are checked where they were: by the router on its routes and by the replica on the model
routes (both start with the server's ``--api-key``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from sglang_v4.entrypoints.dp_gateway_control import add_control_routes
from sglang_v4.entrypoints.dp_gateway_fanout import add_fanout_routes
from sglang_v4.entrypoints.dp_gateway_rids import DuplicateRid, RidsInFlight, body_rids
from sglang_v4.entrypoints.dp_rank_header import (
    BODY_PIN_FIELDS,
    DP_RANK_HEADER,
    DP_RANK_HEADER_ROUTES,
    GATEWAY_HEADER_PIN_ROUTES,
    dp_rank_from_header,
)
from sglang_v4.entrypoints.route_errors import route_error_body, wants_anthropic_errors

logger = logging.getLogger(__name__)

__all__ = [
    "BODY_PIN_ROUTES",
    "GATEWAY_SERVER_OPTIONS",
    "HOP_BY_HOP_HEADERS",
    "MODEL_ROUTES",
    "UpstreamUnanswered",
    "body_dp_rank",
    "create_gateway_app",
    "run_gateway",
]

#: The pin header as sent on to the replica it chose: that replica is one rank of its own (rank
#: 0), and the header, as in SGLang, overrides a ``routed_dp_rank`` / ``data_parallel_rank`` pin
#: in the body, which the replica would otherwise check against its own single rank.
_DP_RANK_FOR_REPLICA = {DP_RANK_HEADER: "0"}

#: Paths the gateway answers from a replica (``/v1/models`` and ``/v1/models/{model_id}``).
MODEL_ROUTES = ("/v1/models", "/v1/models/{model_id:.+}")

#: Headers of one connection, not of the request (RFC 9110 section 7.6.1), and those the
#: forwarding recomputes (``Host``, ``Content-Length``).
HOP_BY_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)

#: Options of the gateway's aiohttp server (``web.run_app`` / ``web.AppRunner``): a client that
#: disconnects cancels its handler, and with it the upstream request (aiohttp >= 3.9 leaves the
#: handler running by default, so a non-streamed generation would run on to its end).
GATEWAY_SERVER_OPTIONS: dict[str, Any] = {"handler_cancellation": True}

_SESSION = web.AppKey("session", aiohttp.ClientSession)


class UpstreamUnanswered(Exception):
    """The router or replica could not be reached, or closed the connection before its answer
    began (nothing was sent to the client yet)."""


def _forward_headers(headers: Mapping[str, str], drop: frozenset[str] = frozenset()) -> CIMultiDict[str]:
    """``headers`` without :data:`HOP_BY_HOP_HEADERS` and ``drop`` (lower-case names); a repeated
    name (``Set-Cookie``, ``Vary``, ...) keeps all its values, in order."""
    return CIMultiDict(
        (k, v) for k, v in headers.items() if k.lower() not in HOP_BY_HOP_HEADERS and k.lower() not in drop
    )


async def _forward(
    request: web.Request,
    session: aiohttp.ClientSession,
    base_url: str,
    replace: Mapping[str, str] | None = None,
    body: bytes | None = None,
) -> web.StreamResponse:
    """``request`` sent to ``base_url`` (same method, path, query, headers, and body; a header
    named in ``replace`` is sent with that value only; ``body``, when given, sent instead of the
    request's), its answer streamed back.

    Raises:
        UpstreamUnanswered: ``base_url`` cannot be reached or sent no answer (any
            ``aiohttp.ClientError`` before its status line; nothing was sent back yet). An upstream
            that fails later ends the answer where it stands.
    """
    if body is None:
        body = await request.read() if request.body_exists else None
    # the server hands the body over decoded: its Content-Encoding no longer applies
    headers = _forward_headers(request.headers, frozenset({"content-encoding"}))
    for name, value in (replace or {}).items():
        headers[name] = value  # case-insensitive: replaces every value the client sent
    try:
        upstream = await session.request(
            request.method,
            URL(base_url + request.rel_url.raw_path_qs, encoded=True),  # the path and query as sent
            headers=headers,
            data=body,
            allow_redirects=False,
        )
    except aiohttp.ClientError as e:
        raise UpstreamUnanswered(f"{type(e).__name__}: {e}") from e
    async with upstream:  # released (its connection closed, mid-answer) on the way out
        resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        resp.headers.extend(_forward_headers(upstream.headers))
        if upstream.content_length is not None:
            resp.content_length = upstream.content_length
        await resp.prepare(request)
        async for chunk in upstream.content.iter_any():  # each piece passed on as it arrives
            await resp.write(chunk)
        await resp.write_eof()
        return resp


#: The routes whose JSON body may pin a data-parallel rank (SGLang's ``data_parallel_rank`` and
#: ``routed_dp_rank`` fields): ``/generate`` and the OpenAI generation routes.
BODY_PIN_ROUTES = frozenset({"/generate"}) | DP_RANK_HEADER_ROUTES

#: The body fields that pin a rank, the first one set winning.
_BODY_PIN_FIELDS = BODY_PIN_FIELDS


def _body_pins_zeroed(body: bytes) -> bytes:
    """``body`` as the replica a header pin chose gets it: a JSON object's rank pins set to ``0``
    (the header overrides them; ``/generate`` on the replica would otherwise check a pin ``k`` > 0
    against its own single rank), any other body as it came."""
    try:
        obj = json.loads(body)
    except ValueError:
        return body
    if not isinstance(obj, dict) or all(obj.get(n) is None for n in _BODY_PIN_FIELDS):
        return body
    return json.dumps(
        {**obj, **{n: 0 for n in _BODY_PIN_FIELDS if obj.get(n) is not None}}, ensure_ascii=False
    ).encode()


def body_dp_rank(body: bytes, dp_size: int) -> tuple[int, bytes] | None:
    """The rank a request body pins, and the body as its replica gets it (each pin field set to
    ``0``: the replica is one rank of its own), or ``None`` when the body pins none (not a JSON
    object, no pin field set, or one that is not an integer: the replica then answers as it does).

    Raises:
        ValueError: the pinned rank is negative or ``>= dp_size`` (SGLang's message, naming the
            field).
    """
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    name = next((n for n in _BODY_PIN_FIELDS if obj.get(n) is not None), None)
    if name is None:
        return None
    rank = obj[name]
    if not isinstance(rank, int) or isinstance(rank, bool):
        return None
    if rank < 0:
        raise ValueError(f"{name} must be non-negative")
    if rank >= dp_size:
        raise ValueError(f"{name} must be less than dp_size: {dp_size}")
    for n in _BODY_PIN_FIELDS:
        if obj.get(n) is not None:
            obj[n] = 0
    return rank, json.dumps(obj, ensure_ascii=False).encode()


def _error(request: web.Request, status: int, message: str) -> web.Response:
    """The gateway's own error answer to ``request``: ``status`` with the body a single server
    writes for that route (:func:`~sglang_v4.entrypoints.route_errors.route_error_body`: OpenAI's
    ``{"error": {"message", "type", "param", "code"}}`` under ``/v1/``, Anthropic's for its routes
    and an ``anthropic-version`` model listing, SGLang's native shape elsewhere)."""
    anthropic = wants_anthropic_errors(request.path, request.headers.keys())
    body = route_error_body(request.path, status, message, anthropic)
    return web.Response(body=body, status=status, content_type="application/json")


def create_gateway_app(router_url: str, replica_urls: Sequence[str]) -> web.Application:
    """The gateway's ``aiohttp`` application (module docstring).

    Args:
        router_url: ``http://host:port`` of ``sglang-router``.
        replica_urls: the replicas' ``http://host:port``; the model routes go to them in turn, the
            next one when one cannot be reached. A trailing ``/`` on any URL is dropped
            (``http://host:port/`` names the same server; each request path is appended to it).

    Raises:
        ValueError: ``replica_urls`` is empty.
    """
    if not replica_urls:
        raise ValueError("replica_urls: the gateway needs at least one replica")
    router_url = router_url.rstrip("/")
    replicas = [url.rstrip("/") for url in replica_urls]
    turn = itertools.cycle(range(len(replicas)))
    in_flight = RidsInFlight()
    app = web.Application(client_max_size=0)  # bodies are the router's and replicas' to bound

    async def start(app: web.Application) -> None:
        # no total timeout (a generation runs as long as it runs); bytes passed on as they are
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        app[_SESSION] = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)

    async def stop(app: web.Application) -> None:
        await app[_SESSION].close()

    async def models(request: web.Request) -> web.StreamResponse:
        first = next(turn)
        for k in range(len(replicas)):
            url = replicas[(first + k) % len(replicas)]
            try:
                return await _forward(request, app[_SESSION], url)
            except UpstreamUnanswered as e:
                logger.warning("DP gateway: replica %s did not answer %s (%s)", url, request.path, e)
        return _error(request, 503, "No replica answered.")

    async def other(request: web.Request) -> web.StreamResponse:
        rids: list[str] = []
        if request.method == "POST" and request.path in BODY_PIN_ROUTES and request.body_exists:
            rids = body_rids(await request.read())  # read once: the body stays with the request
        try:
            with in_flight.hold(rids):
                return await route(request)
        except DuplicateRid as e:
            return _error(request, 400, str(e))

    async def route(request: web.Request) -> web.StreamResponse:
        raw_rank = request.headers.get(DP_RANK_HEADER)
        if raw_rank is not None and request.path in GATEWAY_HEADER_PIN_ROUTES:
            try:
                rank = dp_rank_from_header(raw_rank, len(replicas))
            except ValueError as e:
                return _error(request, 400, str(e))
            assert rank is not None
            body = _body_pins_zeroed(await request.read()) if request.body_exists else None
            try:  # the replica is one rank of its own: the header pins its rank 0
                return await _forward(request, app[_SESSION], replicas[rank], _DP_RANK_FOR_REPLICA, body)
            except UpstreamUnanswered as e:
                logger.warning("DP gateway: replica %d did not answer %s (%s)", rank, request.path, e)
                return _error(request, 502, f"Data-parallel rank {rank} did not answer.")
        if request.method == "POST" and request.path in BODY_PIN_ROUTES and request.body_exists:
            try:
                pinned = body_dp_rank(await request.read(), len(replicas))
            except ValueError as e:
                return _error(request, 400, str(e))
            if pinned is not None:
                rank, body = pinned
                try:
                    return await _forward(request, app[_SESSION], replicas[rank], body=body)
                except UpstreamUnanswered as e:
                    logger.warning("DP gateway: replica %d did not answer %s (%s)", rank, request.path, e)
                    return _error(request, 502, f"Data-parallel rank {rank} did not answer.")
        try:
            return await _forward(request, app[_SESSION], router_url)
        except UpstreamUnanswered as e:
            logger.warning("DP gateway: the router did not answer %s (%s)", request.path, e)
            return _error(request, 502, "The router did not answer.")

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    for path in MODEL_ROUTES:
        app.router.add_get(path, models)
    add_fanout_routes(app, replicas, lambda: app[_SESSION], _forward_headers, _error)
    add_control_routes(app, replicas, lambda: app[_SESSION], _forward_headers, _error)
    app.router.add_route("*", "/{tail:.*}", other)
    return app


def run_gateway(host: str, port: int, router_url: str, replica_urls: Sequence[str], log_level: str) -> None:
    """Serve :func:`create_gateway_app` on ``host:port`` until SIGTERM / SIGINT (the process
    target of :func:`~sglang_v4.entrypoints.data_parallel.launch_data_parallel`)."""
    from sglang_v4.utils import configure_logging, set_parent_death_signal

    configure_logging(log_level, prefix=" DP gateway")
    set_parent_death_signal()
    asyncio.set_event_loop(asyncio.new_event_loop())
    web.run_app(
        create_gateway_app(router_url, replica_urls),
        host=host,
        port=port,
        print=None,
        access_log=None,
        shutdown_timeout=5.0,
        **GATEWAY_SERVER_OPTIONS,
    )

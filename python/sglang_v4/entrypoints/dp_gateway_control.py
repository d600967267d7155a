"""Routes the ``--dp-size`` gateway sends to every replica because one server with ``dp_size``
ranks applies them to all its ranks: ``/flush_cache``, the runtime-control routes, and
``/get_server_info`` / ``/server_info``, and the health probes.

``sglang-router`` (0.3.2) has no runtime-control route on its port (``/update_weights_from_disk``,
``/pause_generation``, ... answer 404), answers ``/get_server_info`` with its own summary
(``{"router_manager", "routers_count", "workers_count"}``, none of SGLang's fields: no
``tokenizer_path``, no ``internal_states``), and answers a ``/flush_cache`` that one worker
refused with ``206 Partial Content`` and its own JSON, a 2xx that ``raise_for_status()`` takes for
success. A single SGLang server with ``--dp-size D`` answers each of them in its own shape, for
all D ranks:

* :data:`BROADCAST_ROUTES` (``/flush_cache``, ``/update_weights_from_disk``,
  ``/pause_generation``, ``/continue_generation``, ``/configure_logging``,
  ``/get_weight_version``; not the profiler, whose replicas would write traces of one name into
  one directory: send ``/start_profile`` to a replica's own port): the request (method, query,
  headers, body) goes to every replica at once. Every replica accepting it (2xx) is the first replica's answer, with
  ``num_paused_requests`` (``/update_weights_from_disk``) summed over the replicas; a replica
  refusing it passes its answer on (the first refusal in rank order: ``/flush_cache``'s 400
  ``Flush cache failed.``, a 400 naming a bad field, a 401 for a missing key), so a flush or a
  weight update that did not reach every rank is never reported as done. A replica that cannot
  be reached is a 502 naming its rank (the others did get the request).
* ``GET /health`` and ``GET /health_generate`` (probes; ``HEAD`` too): every replica is asked
  (``/health_generate`` makes each one generate a token); 200 with the first replica's answer when
  every replica answers 200, otherwise the first other answer passed on, or a 503 naming a rank
  that cannot be reached. The router answered ``/health_generate`` itself ("At least one router
  has healthy workers") without generating on any replica, so a replica whose scheduler had died
  still probed healthy.
* ``GET /get_server_info`` and ``GET /server_info``: the first answering replica's server info
  (SGLang's fields: the server arguments, ``tokenizer_path``, ``max_total_num_tokens``, ...) with
  ``dp_size`` set to the number of replicas and ``internal_states`` listing every answering
  replica's states in rank order, as a server with ``dp_size`` ranks lists one entry per rank. A
  replica that cannot be reached is left out; none reached is a 503; a replica's own non-200 is
  passed on.

Headers go on as the client sent them (hop-by-hop ones excepted): each replica checks the API key
(and ``--admin-api-key``) as it does when called directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
from aiohttp import web

from sglang_v4.entrypoints.dp_gateway_fanout import ask_every_replica, passed_on

__all__ = [
    "BROADCAST_ROUTES",
    "HEALTH_ROUTES",
    "SERVER_INFO_ROUTES",
    "add_control_routes",
    "merge_server_info",
]

#: ``(path, methods)`` of the routes sent to every replica (the methods a single server accepts).
BROADCAST_ROUTES = (
    ("/flush_cache", ("GET", "POST")),
    ("/update_weights_from_disk", ("POST",)),
    ("/pause_generation", ("POST",)),
    ("/continue_generation", ("POST",)),
    ("/configure_logging", ("GET", "POST")),
    ("/get_weight_version", ("GET",)),
)

#: The health probes answered 200 only when every replica answers 200.
HEALTH_ROUTES = ("/health", "/health_generate")

#: The server-info routes answered from every replica's info.
SERVER_INFO_ROUTES = ("/get_server_info", "/server_info")


def merge_server_info(infos: Sequence[dict[str, Any]], dp_size: int) -> dict[str, Any]:
    """One server info from the replicas' (``infos``, in rank order, at least one).

    Returns:
        The first info with ``dp_size`` set to ``dp_size`` and ``internal_states`` the
        concatenation of every info's ``internal_states`` (a list each; an info without one adds
        nothing).

    Raises:
        ValueError: ``infos`` is empty.
    """
    if not infos:
        raise ValueError("infos: at least one replica's server info is needed")
    states: list[Any] = []
    for info in infos:
        own = info.get("internal_states")
        if isinstance(own, list):
            states.extend(own)
    return {**infos[0], "dp_size": dp_size, "internal_states": states}


def _summed_paused(answers: Sequence[tuple[int, bytes, str | None]]) -> web.Response:
    """The first answer, its JSON ``num_paused_requests`` (when every answer has an integer one)
    replaced by the sum over ``answers``; otherwise the first answer as it came."""
    first = answers[0]
    try:
        bodies = [json.loads(a[1]) for a in answers]
    except ValueError:
        return passed_on(first)
    counts = [b.get("num_paused_requests") if isinstance(b, dict) else None for b in bodies]
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        return passed_on(first)
    merged = {**bodies[0], "num_paused_requests": sum(counts)}
    return web.json_response(merged, status=first[0])


def add_control_routes(
    app: web.Application,
    replicas: Sequence[str],
    session: Callable[[], aiohttp.ClientSession],
    forward_headers: Callable[[Any], Any],
    error: Callable[[web.Request, int, str], web.Response],
) -> None:
    """Add :data:`BROADCAST_ROUTES`, :data:`HEALTH_ROUTES` and :data:`SERVER_INFO_ROUTES` to the
    gateway's ``app``
    (module docstring).

    Args:
        app: the gateway's application (before its catch-all route is added).
        replicas: the replicas' ``http://host:port``; replica ``i`` is data-parallel rank ``i``.
        session: the gateway's client session (read when a request comes).
        forward_headers: the request's headers as sent on (hop-by-hop ones dropped).
        error: the gateway's error answer in the route's shape.
    """

    async def ask_all(request: web.Request) -> list[tuple[int, bytes, str | None] | None]:
        return await ask_every_replica(request, replicas, session(), forward_headers)

    async def broadcast(request: web.Request) -> web.Response:
        answers = await ask_all(request)
        for rank, answer in enumerate(answers):
            if answer is None:
                return error(request, 502, f"Data-parallel rank {rank} did not answer {request.path}.")
        done = [a for a in answers if a is not None]
        refused = [a for a in done if not 200 <= a[0] < 300]
        if refused:
            return passed_on(refused[0])
        return _summed_paused(done)

    async def health(request: web.Request) -> web.Response:
        answers = await ask_all(request)
        for rank, answer in enumerate(answers):
            if answer is None:
                return error(request, 503, f"Data-parallel rank {rank} did not answer {request.path}.")
        done = [a for a in answers if a is not None]
        failing = [a for a in done if a[0] != 200]
        return passed_on(failing[0] if failing else done[0])

    async def server_info(request: web.Request) -> web.Response:
        answers = await ask_all(request)
        infos: list[dict[str, Any]] = []
        for rank, answer in enumerate(answers):
            if answer is None:
                continue
            if answer[0] != 200:
                return passed_on(answer)
            try:
                info = json.loads(answer[1])
            except ValueError:
                info = None
            if not isinstance(info, dict):
                return error(
                    request, 502, f"Data-parallel rank {rank} answered {request.path} with no JSON object."
                )
            infos.append(info)
        if not infos:
            return error(request, 503, "No replica answered.")
        return web.json_response(merge_server_info(infos, len(replicas)))

    for path, methods in BROADCAST_ROUTES:
        for method in methods:
            app.router.add_route(method, path, broadcast)
    for path in HEALTH_ROUTES:
        app.router.add_get(path, health)
    for path in SERVER_INFO_ROUTES:
        app.router.add_get(path, server_info)

"""Routes the ``--dp-size`` gateway sends to every replica because one server with ``dp_size``
ranks applies them to all its ranks: ``/flush_cache``, the runtime-control routes,
``/get_server_info`` / ``/server_info``, ``/get_model_info`` / ``/model_info``, and the health
probes.

``sglang-router`` (0.3.2) has no runtime-control route on its port (``/update_weights_from_disk``,
``/pause_generation``, ... answer 404), answers ``/get_server_info`` with its own summary
(``{"router_manager", "routers_count", "workers_count"}``, none of SGLang's fields: no
``tokenizer_path``, no ``internal_states``), and answers a ``/flush_cache`` that one worker
refused with ``206 Partial Content`` and its own JSON, a 2xx that ``raise_for_status()`` takes for
success. A single SGLang server with ``--dp-size D`` answers each of them in its own shape, for
all D ranks:

* :data:`BROADCAST_ROUTES` (``/flush_cache``, ``/update_weights_from_disk``,
  ``/pause_generation``, ``/continue_generation``, ``/configure_logging``,
  not the profiler, whose replicas would write traces of one name into
  one directory: send ``/start_profile`` to a replica's own port): the request (method, query,
  headers, body) goes to every replica at once. Every replica accepting it (2xx) is the first replica's answer, with
  ``num_paused_requests`` (``/update_weights_from_disk``) summed over the replicas; a replica
  refusing it passes its answer on (the first refusal in rank order: ``/flush_cache``'s 400
  ``Flush cache failed.``, a 400 naming a bad field, a 401 for a missing key), so a flush or a
  weight update that did not reach every rank is never reported as done. A replica that cannot
  be reached is a 502 naming its rank (the others did get the request).
* ``GET /get_weight_version``: every replica is asked; when all report the same
  ``weight_version``, that answer (a single server's shape). Replicas reporting different versions
  (a weight update that reached only some of them, or replicas started with different
  ``--weight-version``) are a ``409`` naming each rank's version, never one replica's version
  taken for the group's; a refusal or an unreachable rank as for :data:`BROADCAST_ROUTES`.
* ``GET /get_model_info`` and ``GET /model_info`` (:data:`MODEL_INFO_ROUTES`): every replica is
  asked; when all answer the same info, that answer (a single server's shape), otherwise a ``409``
  naming each field the replicas disagree on and each rank's value. SGLang 0.5.23's server with
  ``dp_size > 1`` answers from its one tokenizer manager, whose ``model_path``,
  ``weight_version``, parsers ... are those of every rank (a weight update moves them for all
  ranks at once); here each replica has its own, and a weight update that reached only some of
  them leaves them different, so one replica's info is the group's only when they agree. A refusal
  or an unreachable rank as for :data:`BROADCAST_ROUTES`.
* ``GET|POST /get_weights_by_name`` (:data:`PER_REPLICA_ROUTES`): every replica is asked and the
  answer is a JSON list of their parameters in rank order, as SGLang's server with ``dp_size > 1``
  answers (one entry per data-parallel rank; ``dp_size`` 1 answers the parameter itself). The
  router has no such route; a replica refusing (unknown parameter name, bad body) passes its
  answer on, an unreachable one is a 502 naming its rank.
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
    "MODEL_INFO_ROUTES",
    "PER_REPLICA_ROUTES",
    "SERVER_INFO_ROUTES",
    "add_control_routes",
    "merge_model_infos",
    "merge_server_info",
    "merge_weight_versions",
]

#: ``(path, methods)`` of the routes sent to every replica (the methods a single server accepts).
BROADCAST_ROUTES = (
    ("/flush_cache", ("GET", "POST")),
    ("/update_weights_from_disk", ("POST",)),
    ("/pause_generation", ("POST",)),
    ("/continue_generation", ("POST",)),
    ("/configure_logging", ("GET", "POST")),
)

#: ``(path, methods)`` of the routes answered with every replica's answer, a list in rank order.
PER_REPLICA_ROUTES = (("/get_weights_by_name", ("GET", "POST")),)

#: The health probes answered 200 only when every replica answers 200 (``/ready``: every
#: replica serves and none is paused).
HEALTH_ROUTES = ("/health", "/health_generate", "/ready")

#: The server-info routes answered from every replica's info.
SERVER_INFO_ROUTES = ("/get_server_info", "/server_info")

#: The model-info routes answered when every replica's info is the same.
MODEL_INFO_ROUTES = ("/get_model_info", "/model_info")


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


def merge_weight_versions(bodies: Sequence[Any]) -> tuple[Any, str | None]:
    """The group's ``/get_weight_version`` from the replicas' answers (``bodies``, parsed JSON, in
    rank order, at least one).

    Returns:
        ``(first body, None)`` when every body is an object with the same ``weight_version``;
        otherwise ``(None, message)``, the message naming each rank's version (``None`` where a
        body has none).

    Raises:
        ValueError: ``bodies`` is empty.
    """
    if not bodies:
        raise ValueError("bodies: at least one replica's answer is needed")
    versions = [b.get("weight_version") if isinstance(b, dict) else None for b in bodies]
    if all(isinstance(b, dict) for b in bodies) and len(set(map(repr, versions))) == 1:
        return bodies[0], None
    listed = ", ".join(f"rank {rank}: {v!r}" for rank, v in enumerate(versions))
    return None, (
        f"The data-parallel replicas disagree on weight_version ({listed}): a weight update did not "
        "reach every replica; update them again or ask each replica's own port."
    )


def merge_model_infos(bodies: Sequence[Any]) -> tuple[Any, str | None]:
    """The group's ``/get_model_info`` from the replicas' answers (``bodies``, parsed JSON, in rank
    order, at least one).

    Returns:
        ``(first body, None)`` when every body is an object and all are equal; otherwise
        ``(None, message)``, the message naming each field whose values differ and each rank's
        value (``None`` where a body lacks the field or is not an object).

    Raises:
        ValueError: ``bodies`` is empty.
    """
    if not bodies:
        raise ValueError("bodies: at least one replica's answer is needed")
    objects = [b if isinstance(b, dict) else {} for b in bodies]
    if all(isinstance(b, dict) for b in bodies) and all(b == bodies[0] for b in bodies[1:]):
        return bodies[0], None
    fields = list(dict.fromkeys(k for o in objects for k in o))
    differing = [k for k in fields if len({json.dumps(o.get(k), sort_keys=True) for o in objects}) > 1]
    if not differing:  # a replica answered no JSON object
        differing = fields or ["the answer"]
    listed = "; ".join(
        f"{k}: " + ", ".join(f"rank {rank}: {o.get(k)!r}" for rank, o in enumerate(objects))
        for k in differing
    )
    return None, (
        f"The data-parallel replicas disagree on the model info ({listed}): a weight update did not "
        "reach every replica, or the replicas were started differently; ask each replica's own port."
    )


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
    """Add :data:`BROADCAST_ROUTES`, :data:`PER_REPLICA_ROUTES`, ``/get_weight_version``,
    :data:`MODEL_INFO_ROUTES`, :data:`HEALTH_ROUTES` and :data:`SERVER_INFO_ROUTES` to the
    gateway's ``app`` (module docstring).

    Args:
        app: the gateway's application (before its catch-all route is added).
        replicas: the replicas' ``http://host:port``; replica ``i`` is data-parallel rank ``i``.
        session: the gateway's client session (read when a request comes).
        forward_headers: the request's headers as sent on (hop-by-hop ones dropped).
        error: the gateway's error answer in the route's shape.
    """

    async def ask_all(request: web.Request) -> list[tuple[int, bytes, str | None] | None]:
        return await ask_every_replica(request, replicas, session(), forward_headers)

    async def all_accepted(request: web.Request) -> list[tuple[int, bytes, str | None]] | web.Response:
        """Every replica's answer in rank order, or the response to give instead (a 502 naming
        an unreachable rank, the first replica's refusal passed on)."""
        answers = await ask_all(request)
        for rank, answer in enumerate(answers):
            if answer is None:
                return error(request, 502, f"Data-parallel rank {rank} did not answer {request.path}.")
        done = [a for a in answers if a is not None]
        refused = [a for a in done if not 200 <= a[0] < 300]
        if refused:
            return passed_on(refused[0])
        return done

    async def broadcast(request: web.Request) -> web.Response:
        done = await all_accepted(request)
        if isinstance(done, web.Response):
            return done
        return _summed_paused(done)

    async def every_answer(request: web.Request) -> list[Any] | web.Response:
        """Every replica's JSON answer in rank order, or the response to give instead (a 502
        naming an unreachable rank or one answering no JSON, a replica's refusal passed on)."""
        done = await all_accepted(request)
        if isinstance(done, web.Response):
            return done
        bodies: list[Any] = []
        for rank, answer in enumerate(done):
            try:
                bodies.append(json.loads(answer[1]))
            except ValueError:
                return error(request, 502, f"Data-parallel rank {rank} answered {request.path} with no JSON.")
        return bodies

    async def per_replica(request: web.Request) -> web.Response:
        bodies = await every_answer(request)
        return bodies if isinstance(bodies, web.Response) else web.json_response(bodies)

    def agreed_answer(merge: Any) -> Any:
        """A handler answering the replicas' common body, as ``merge`` (``bodies -> (agreed,
        disagreement)``) finds it, or a 409 with ``merge``'s text when they disagree."""

        async def handler(request: web.Request) -> web.Response:
            bodies = await every_answer(request)
            if isinstance(bodies, web.Response):
                return bodies
            agreed, disagreement = merge(bodies)
            if disagreement is not None:
                return error(request, 409, disagreement)
            return web.json_response(agreed)

        return handler

    weight_version = agreed_answer(merge_weight_versions)
    model_info = agreed_answer(merge_model_infos)

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
    for path, methods in PER_REPLICA_ROUTES:
        for method in methods:
            app.router.add_route(method, path, per_replica)
    app.router.add_get("/get_weight_version", weight_version)
    for path in MODEL_INFO_ROUTES:
        app.router.add_get(path, model_info)
    for path in HEALTH_ROUTES:
        app.router.add_get(path, health)
    for path in SERVER_INFO_ROUTES:
        app.router.add_get(path, server_info)

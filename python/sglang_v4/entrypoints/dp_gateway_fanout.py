"""Routes the ``--dp-size`` gateway answers from every replica at once: ``/get_load``,
``/v1/loads``, ``/abort_request`` and ``/metrics``.

``sglang-router`` has none of them on its port (it answers 404; its own ``/get_loads`` has another
shape, its Prometheus exporter shows router metrics on another port), while a single SGLang server
with ``--dp-size D`` answers them for all its ranks:

* ``GET /get_load``: one load entry per data-parallel rank (``dp_rank``, ``num_reqs``,
  ``num_waiting_reqs``, ``num_tokens``). The gateway asks each replica (one rank of its own, which
  reports ``dp_rank: 0``) and lists the entries in replica order with ``dp_rank`` set to the
  replica's index. A replica that cannot be reached is left out (its rank missing from the list);
  none reached is a 503; a replica's own error (a 401 for a missing API key, ...) is passed on.
* ``GET /v1/loads`` (``?include=``, ``?dp_rank=``, ``?format=prometheus``): SGLang's load report
  with one ``loads`` entry per data-parallel rank. Without ``dp_rank`` every replica is asked and
  the entries are listed in replica order, ``dp_rank`` set to the replica's index (Prometheus
  samples relabelled the same way), ``num_accelerators`` summed; ``dp_rank=i`` asks replica ``i``
  alone (as its rank 0) and labels its entry ``i``; a ``dp_rank`` that names no replica is
  answered by replica 0 as a server answers it (an empty list, or its 422). Unreachable replicas
  are left out; none reached is a 503.
* ``POST /abort_request``: the router does not know which replica holds a request id, so the
  body goes to every replica (a replica without that ``rid`` does nothing, as SGLang's does);
  ``abort_all`` reaches them all. The answer is the first replica's 200 when any accepted it,
  otherwise the first replica's answer (the same 400 / 401 each gives to a bad body or key), or a
  502 when none answered.
* ``GET /metrics`` (replicas started with ``--enable-metrics``): every replica's Prometheus text
  exposition merged into one (:func:`merge_metrics`): each family's ``# HELP`` / ``# TYPE`` once,
  then its samples from each replica in turn, each sample labelled ``dp_rank="i"`` -- so a scrape
  sees every rank's own monotonic counters, never one replica's counters in place of another's.
  A replica that cannot be reached is left out; none reached is a 503; a replica's own non-200
  (404 without ``--enable-metrics``) is passed on.

Headers are sent as the client sent them (hop-by-hop ones excepted), so each replica checks the
API key as it does directly.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

logger = logging.getLogger(__name__)

__all__ = [
    "FANOUT_ROUTES",
    "add_fanout_routes",
    "ask_every_replica",
    "ask_replica",
    "merge_metrics",
    "passed_on",
]

#: ``(method, path)`` of the routes answered here.
FANOUT_ROUTES = (
    ("GET", "/get_load"),
    ("GET", "/v1/loads"),
    ("POST", "/abort_request"),
    ("GET", "/metrics"),
)


def _family(line: str) -> str | None:
    """The metric family a ``# HELP`` / ``# TYPE`` line declares, ``None`` for another line."""
    parts = line.split(None, 3)
    if len(parts) >= 3 and parts[0] == "#" and parts[1] in ("HELP", "TYPE"):
        return parts[2]
    return None


def _labels(text: str, start: int) -> tuple[list[tuple[str, str]], int] | None:
    """The ``name="value"`` pairs of a label set whose ``{`` is at ``start - 1`` in ``text``
    (each value as written, quotes and escapes kept: a value may hold spaces, ``,``, ``}`` and
    ``\\"``), and the index just past its ``}``; ``None`` when the set is malformed."""
    pairs: list[tuple[str, str]] = []
    i, n = start, len(text)
    while i < n:
        while i < n and text[i] in " \t,":
            i += 1
        if i < n and text[i] == "}":
            return pairs, i + 1
        eq = text.find("=", i)
        if eq == -1:
            return None
        name = text[i:eq].strip()
        j = eq + 1
        while j < n and text[j] in " \t":
            j += 1
        if j >= n or text[j] != '"' or not name:
            return None
        k = j + 1
        while k < n and text[k] != '"':
            k += 2 if text[k] == "\\" else 1
        if k >= n:
            return None
        pairs.append((name, text[j : k + 1]))
        i = k + 1
    return None


def _with_rank(sample: str, rank: int) -> str:
    """A sample line with ``dp_rank="rank"`` as its first label; a ``dp_rank`` label the sample
    already has (the replica's own rank, always 0) is dropped, so the label is never repeated (a
    repeated label name makes the exposition invalid). Label values are read as the text format
    writes them (quoted, with escapes), so a value holding spaces, commas or braces -- a served
    model name ``"DeepSeek V4 Flash"`` -- is kept whole."""
    label = f'dp_rank="{rank}"'
    name_end = next((i for i, c in enumerate(sample) if c in "{ \t"), len(sample))
    name, rest = sample[:name_end], sample[name_end:]
    if not rest.startswith("{"):
        return f"{name}{{{label}}}{rest}"
    parsed = _labels(sample, name_end + 1)
    if parsed is None:  # not the text format: the label goes first, the rest as it came
        return f"{name}{{{label},{rest[1:]}"
    pairs, end = parsed
    kept = [f"{k}={v}" for k, v in pairs if k != "dp_rank"]
    return f"{name}{{{','.join([label, *kept])}}}{sample[end:]}"


def merge_metrics(texts: Sequence[tuple[int, str]]) -> str:
    """One Prometheus text exposition (format 0.0.4) from ``(dp_rank, text)`` pairs.

    Each family keeps its first ``# HELP`` / ``# TYPE`` lines and lists the samples of every text
    in the order given, each labelled ``dp_rank``; families keep the order they first appear in.
    Samples before any family line form a family of their own. Blank lines and other comments are
    dropped.
    """
    order: list[str] = []
    heads: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for rank, text in texts:
        current = ""
        for line in text.splitlines():
            if not line.strip():
                continue
            name = _family(line)
            if name is not None:
                current = name
                if name not in heads:
                    order.append(name)
                    heads[name], samples[name] = [], []
                if line.split(None, 2)[1] not in {h.split(None, 2)[1] for h in heads[name]}:
                    heads[name].append(line)
                continue
            if line.startswith("#"):
                continue
            if current not in samples:
                order.append(current)
                heads[current], samples[current] = [], []
            samples[current].append(_with_rank(line, rank))
    out = [line for name in order for line in heads[name] + samples[name]]
    return "\n".join(out) + "\n" if out else ""


async def ask_replica(
    session: aiohttp.ClientSession, method: str, url: str, headers: Any, body: bytes | None
) -> tuple[int, bytes, str | None] | None:
    """``(status, body, content type)`` of one replica's answer, ``None`` when it did not answer."""
    try:
        async with session.request(method, url, headers=headers, data=body, allow_redirects=False) as r:
            return r.status, await r.read(), r.headers.get("Content-Type")
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        logger.warning("DP gateway: replica %s did not answer (%s: %s)", url, type(e).__name__, e)
        return None


async def ask_every_replica(
    request: web.Request,
    replicas: Sequence[str],
    session: aiohttp.ClientSession,
    forward_headers: Callable[[Any], Any],
) -> list[tuple[int, bytes, str | None] | None]:
    """``request`` (method, path with query, body, headers less hop-by-hop ones) sent to every
    replica at once; one :func:`ask_replica` answer per replica, in rank order."""
    body = await request.read() if request.can_read_body else None
    headers = forward_headers(request.headers)
    return await asyncio.gather(
        *(
            ask_replica(session, request.method, url + request.rel_url.raw_path_qs, headers, body)
            for url in replicas
        )
    )


def passed_on(answer: tuple[int, bytes, str | None]) -> web.Response:
    """A replica's answer (``(status, body, content type)``) passed on as it came."""
    status, body, ctype = answer
    resp = web.Response(status=status, body=body)
    if ctype:
        resp.headers["Content-Type"] = ctype
    return resp


def add_fanout_routes(
    app: web.Application,
    replicas: Sequence[str],
    session: Callable[[], aiohttp.ClientSession],
    forward_headers: Callable[[Any], Any],
    error: Callable[[web.Request, int, str], web.Response],
) -> None:
    """Add :data:`FANOUT_ROUTES` to the gateway's ``app`` (module docstring).

    Args:
        app: the gateway's application (before its catch-all route is added).
        replicas: the replicas' ``http://host:port``; replica ``i`` is data-parallel rank ``i``.
        session: the gateway's client session (read when a request comes).
        forward_headers: the request's headers as sent on (hop-by-hop ones dropped).
        error: the gateway's error answer in the route's shape.
    """

    async def ask_all(request: web.Request) -> list[tuple[int, bytes, str | None] | None]:
        return await ask_every_replica(request, replicas, session(), forward_headers)

    async def get_load(request: web.Request) -> web.Response:
        answers = await ask_all(request)
        loads: list[dict[str, Any]] = []
        for rank, answer in enumerate(answers):
            if answer is None:
                continue
            if answer[0] != 200:
                return passed_on(answer)
            try:
                entries = json.loads(answer[1])
            except ValueError:
                return error(request, 502, f"Data-parallel rank {rank} answered /get_load with no JSON.")
            for entry in entries if isinstance(entries, list) else [entries]:
                loads.append({**entry, "dp_rank": rank} if isinstance(entry, dict) else entry)
        if all(a is None for a in answers):
            return error(request, 503, "No replica answered.")
        return web.json_response(loads)

    async def abort_request(request: web.Request) -> web.Response:
        answers = await ask_all(request)
        answered = [a for a in answers if a is not None]
        if not answered:
            return error(request, 502, "No replica answered.")
        ok = [a for a in answered if a[0] == 200]
        return passed_on(ok[0] if ok else answered[0])

    async def metrics(request: web.Request) -> web.Response:
        answers = await ask_all(request)
        texts: list[tuple[int, str]] = []
        for rank, answer in enumerate(answers):
            if answer is None:
                continue
            if answer[0] != 200:
                return passed_on(answer)
            texts.append((rank, answer[1].decode("utf-8", "replace")))
        if not texts:
            return error(request, 503, "No replica answered.")
        return web.Response(
            body=merge_metrics(texts).encode(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def v1_loads(request: web.Request) -> web.Response:
        query = request.rel_url.query
        targets = list(range(len(replicas)))
        raw_rank = query.get("dp_rank")
        pinned = raw_rank.strip().isdigit() if raw_rank is not None else False
        if pinned and int(raw_rank) < len(replicas):  # that replica alone, as its own rank 0
            targets = [int(raw_rank)]
            query = query.copy()
            query["dp_rank"] = "0"
        elif raw_rank is not None:  # not a rank here: one replica answers as a server does
            targets = [0]
        headers = forward_headers(request.headers)
        qs = ("?" + urlencode(list(query.items()))) if query else ""
        answers = await asyncio.gather(
            *(ask_replica(session(), "GET", replicas[i] + request.path + qs, headers, None) for i in targets)
        )
        prometheus = query.get("format") == "prometheus"
        texts: list[tuple[int, str]] = []
        envelope: dict[str, Any] | None = None
        loads: list[Any] = []
        for rank, answer in zip(targets, answers):
            if answer is None:
                continue
            if answer[0] != 200:
                return passed_on(answer)
            if prometheus:
                texts.append((rank, answer[1].decode("utf-8", "replace")))
                continue
            try:
                body = json.loads(answer[1])
            except ValueError:
                body = None
            if not isinstance(body, dict):
                return error(
                    request, 502, f"Data-parallel rank {rank} answered /v1/loads with no JSON object."
                )
            if envelope is None:
                envelope = {**body, "num_accelerators": 0}
            if isinstance(body.get("num_accelerators"), int):
                envelope["num_accelerators"] += body["num_accelerators"]
            for entry in body.get("loads") or []:
                loads.append({**entry, "dp_rank": rank} if isinstance(entry, dict) else entry)
        if all(a is None for a in answers):
            return error(request, 503, "No replica answered.")
        if prometheus:
            return web.Response(
                body=merge_metrics(texts).encode(),
                headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
            )
        return web.json_response({**(envelope or {}), "loads": loads})

    app.router.add_get("/get_load", get_load)
    app.router.add_get("/v1/loads", v1_loads)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/metrics/", metrics)  # the same scrape (SGLang's mount serves both)
    app.router.add_post("/abort_request", abort_request)

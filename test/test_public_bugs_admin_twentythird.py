"""A twenty-third set of public bug reports, replayed against the server's administration surface:
the URL the server arguments give for the server (``ServerArgs.url``, which a client on the same
machine dials) under a wildcard, empty or IPv6 ``--host``, ``/flush_cache``'s ``timeout`` query
parameter, the ``/ready`` probe while generation is paused (one server and the data-parallel
gateway), the Prometheus scrape at ``/metrics/``, and the watermark secret of
``--watermark-config`` in what the server shows of its arguments. Each test names its report.

Faults found here and fixed: ``ServerArgs.url()`` answered the bind address itself, so
``--host 0.0.0.0`` gave ``http://0.0.0.0:30000`` (behind an HTTP proxy, a 502 from the proxy),
``--host ::`` gave ``http://[::]:30000`` and ``--host ''`` (every address, dual stack) gave
``http://:30000``, which no client can dial; SGLang answers the loopback for each. An empty
``/flush_cache?timeout=`` was read as ``0`` where SGLang's ``Query(float)`` refuses it as no
number. ``/ready`` answered 200 while generation was paused (SGLang: 503, ``is_ready`` is
``not is_pause and is_healthy()``), and the data-parallel gateway sent ``/ready`` to the router,
which asks one rank of its choice. ``/metrics/`` (the path a prometheus_client mount serves) was
a 401 under ``--api-key`` and a 404 with it, where SGLang's ``/metrics`` mount serves it, open.
The value of ``--watermark-config`` (it holds the watermark keys) was printed in full by the
ignored-flags warning, the ``repr`` of the server arguments and ``/server_info``.

Fixtures: ``ServerArgs`` built in-process (CPU), and the app of ``http_server.create_app``
in-process (``admin_app_testutil``), whose scheduler never answers, so a refused request is seen to
change nothing. Oracles: SGLang 0.5.23's own ``ServerArgs.url`` (its installed code, called on the
same host and port), Python's ``urllib.parse.urlsplit`` and ``ipaddress``, and FastAPI with the
``timeout`` declaration SGLang 0.5.23's ``/flush_cache`` has (read from its installed source),
SGLang 0.5.23's own ``TokenizerManager.is_ready`` / ``is_healthy`` (their installed source, run),
its ``add_prometheus_middleware`` route and ``decide_request_auth``, its watermark redaction
(``redact_watermark_secrets`` / ``redact_watermark_command_line``), and ``prometheus_client``'s
text parser.
The gateway test serves stand-in replicas and router (aiohttp, loopback ports).
"""

from __future__ import annotations

import ast
import importlib.util
import ipaddress
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from admin_app_testutil import ADMIN_KEY, admin_app_client
from aiohttp import web
from aiohttp_serve_testutil import serve_aiohttp

sglang_server_args = pytest.importorskip("sglang.srt.server_args")

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
PORT = 30123


def _sglang_url(host: str, port: int = PORT) -> str:
    """SGLang 0.5.23's ``ServerArgs.url()`` for ``host`` / ``port`` (no TLS), its own code run on
    a namespace holding the fields it reads."""
    return sglang_server_args.ServerArgs.url(SimpleNamespace(host=host, port=port, ssl_certfile=None))


def _our_url(host: str, port: int = PORT) -> str:
    from sglang_v4.server_args import ServerArgs

    return ServerArgs(model_path="m", device="cpu", host=host, port=port).url()


def _dialable(url: str) -> tuple[str, int]:
    """``(host, port)`` a client would connect to for ``url``; fails on a URL without a host or
    on a wildcard address (one a socket listens on, never one a packet is sent to)."""
    parts = urlsplit(url)
    assert parts.scheme == "http" and parts.hostname, url
    assert parts.port is not None, url
    try:
        assert not ipaddress.ip_address(parts.hostname).is_unspecified, url
    except ValueError:
        pass  # a name, not an address literal
    return parts.hostname, parts.port


# --------------------------------------------------------------------------- ServerArgs.url


def test_sglang_9814_url_of_a_0_0_0_0_server_is_the_loopback() -> None:
    """sgl-project/sglang#9814 (and #4935): with ``--host 0.0.0.0`` the server's URL was
    ``http://0.0.0.0:30000`` and a request to it went out through the HTTP proxy (502), since
    ``0.0.0.0`` is where the socket listens, not an address to send to. Expected: the URL is
    SGLang 0.5.23's own ``ServerArgs.url()`` for the same host and port, a loopback address."""
    ours = _our_url("0.0.0.0")
    assert ours == _sglang_url("0.0.0.0")
    host, port = _dialable(ours)
    assert ipaddress.ip_address(host).is_loopback and port == PORT


def test_sglang_18201_url_of_an_empty_host_dual_stack_server_is_dialable() -> None:
    """sgl-project/sglang#18201: ``--host ''`` (bind every address, IPv4 and IPv6, as a dual-stack
    Kubernetes pod wants) gave the URL ``http://:30000``, which has no host, so the start-up
    requests to it failed. Expected: the URL is SGLang 0.5.23's ``ServerArgs.url()`` for the empty
    host, one that ``urlsplit`` parses to a loopback host and the port."""
    ours = _our_url("")
    assert ours == _sglang_url("")
    host, port = _dialable(ours)
    assert ipaddress.ip_address(host).is_loopback and port == PORT


@pytest.mark.parametrize("host", ["::", "::1", "[::1]", "fe80::1", "2001:db8::1", "127.0.0.1", "localhost"])
def test_sglang_1537_ipv6_and_named_hosts_give_sglangs_url(host: str) -> None:
    """sgl-project/sglang#1537 (``Failed to parse: http://fdbd:dc05:8:8::24:10052/...``: an IPv6
    host without brackets) and sgl-project/sglang#4939 (``--host ::`` dialled as is). Expected:
    for IPv6 literals (bracketed or not), the IPv6 wildcard, IPv4 and names, the URL is SGLang
    0.5.23's ``ServerArgs.url()`` for the same host, and it parses back to a host a client can
    dial (the loopback for ``::``) and the port."""
    ours = _our_url(host)
    assert ours == _sglang_url(host)
    got, port = _dialable(ours)
    assert port == PORT
    if host == "::":
        assert ipaddress.ip_address(got) == ipaddress.ip_address("::1")


def test_sglang_9814_tls_url_keeps_the_loopback_and_the_https_scheme(tmp_path: Path) -> None:
    """The same report (sgl-project/sglang#9814) with ``--ssl-certfile``: SGLang's ``url()`` gives
    ``https://`` and the loopback for ``0.0.0.0``. Expected: the same URL here."""
    from sglang_v4.server_args import ServerArgs

    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    key.write_text("x")
    sa = ServerArgs(model_path="m", device="cpu", host="0.0.0.0", port=PORT)
    sa.ssl_certfile = str(cert)  # set after the checks: only the scheme is read here
    want = sglang_server_args.ServerArgs.url(
        SimpleNamespace(host="0.0.0.0", port=PORT, ssl_certfile=str(cert))
    )
    assert sa.url() == want and want.startswith("https://127.0.0.1:")


# --------------------------------------------------------------------------- /flush_cache timeout


def _sglang_source(rel: str) -> Path:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / rel


def _sglang_flush_timeout_app() -> Any:
    """A FastAPI app whose ``/flush_cache`` declares ``timeout`` as SGLang 0.5.23's does (the
    declaration is checked in its installed ``http_server.py``); it answers the parsed value."""
    from fastapi import FastAPI, Query
    from fastapi.testclient import TestClient

    text = _sglang_source("srt/entrypoints/http_server.py").read_text()
    assert "async def flush_cache(timeout: float = Query(0.0, ge=0.0)):" in text
    app = FastAPI()

    @app.post("/flush_cache")
    async def flush_cache(timeout: float = Query(0.0, ge=0.0)) -> dict[str, float]:
        return {"timeout": timeout}

    return TestClient(app)


#: Query strings SGLang takes or refuses; an infinite wait (``inf``, ``1e400``) is refused here by
#: design (it would hold the route forever) and so left out of the comparison.
FLUSH_QUERIES = ["", "timeout=", "timeout=0", "timeout=2.5", "timeout=.5", "timeout=+1", "timeout=-1",
                 "timeout=abc", "timeout=nan", "timeout=0x10", "timeout=-0"]  # fmt: skip


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    with admin_app_client(Path(tmp_path_factory.mktemp("admin23"))) as pair:
        yield pair


def test_sglang_21413_flush_timeout_is_read_as_sglangs_query_reads_it() -> None:
    """sgl-project/sglang#21413 (``/flush_cache?timeout=`` added: wait up to that many seconds for
    the server to go idle). Expected: for each query string, ``timeout`` is refused exactly where
    SGLang 0.5.23's declaration (``Query(0.0, ge=0.0)``, through FastAPI) refuses it, and where it
    is taken the number of seconds is the same; an empty ``timeout=`` is no number (SGLang: 422),
    not ``0``."""
    from sglang_v4.entrypoints.native_api import parse_flush_timeout
    from sglang_v4.managers.tokenizer_manager import RequestError

    sglang = _sglang_flush_timeout_app()
    for query in FLUSH_QUERIES:
        r = sglang.post(f"/flush_cache?{query}")
        raw = None if not query else query.partition("=")[2]
        try:
            ours: float | None = parse_flush_timeout(raw)
        except RequestError as e:
            assert e.status_code == 400 and "timeout" in str(e), (query, e)
            ours = None
        if r.status_code == 422:
            assert ours is None, (query, ours)
        else:
            assert r.status_code == 200 and ours == r.json()["timeout"], (query, ours, r.text)


def test_sglang_21413_empty_flush_timeout_is_a_400_before_the_scheduler(admin: tuple[Any, Any]) -> None:
    """The same report (sgl-project/sglang#21413) through the route: ``POST /flush_cache?timeout=``
    is answered at once with a 400 in OpenAI's error shape naming ``timeout`` (SGLang: 422), and no
    flush request reaches the scheduler (which never answers here: reaching it would hang)."""
    client, _ = admin
    r = client.post("/flush_cache?timeout=", headers=AUTH)
    assert r.status_code == 400, r.text  # a flush sent to the silent scheduler ends in a 503
    err = r.json()["error"]
    assert err["code"] == 400 and "timeout" in err["message"]


# --------------------------------------------------------------------------- /ready while paused


def _sglang_is_ready() -> Any:
    """SGLang 0.5.23's own ``TokenizerManager.is_ready`` and ``is_healthy`` (their source, taken
    from the installed ``tokenizer_manager.py`` and run as is) on a namespace with the fields
    they read; ``ServerStatus.Up`` stands for the started status."""
    tree = ast.parse(_sglang_source("srt/managers/tokenizer_manager.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TokenizerManager")
    wanted = {"is_ready", "is_healthy"}
    defs = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {d.name for d in defs} == wanted
    module = ast.Module(body=[ast.ClassDef("Probe", [], [], defs, [])], type_ignores=[])  # type: ignore[call-arg]
    scope: dict[str, Any] = {"ServerStatus": SimpleNamespace(Up="Up")}
    exec(compile(ast.fix_missing_locations(module), "sglang_tokenizer_manager", "exec"), scope)
    probe = scope["Probe"]

    def is_ready(is_pause: bool, status: str = "Up") -> bool:
        tm = probe()
        tm.is_pause, tm.gracefully_exit, tm.server_status = is_pause, False, status
        return bool(tm.is_ready())

    return is_ready


def test_sglang_37488_ready_is_503_while_generation_is_paused(admin: tuple[Any, Any]) -> None:
    """sgl-project/sglang#37488 (``/ready``: whether the server should receive new requests,
    ``not is_pause and is_healthy()``): a load balancer probing ``/ready`` keeps sending requests to
    a server whose generation is paused (for a weight update), where they only wait. Expected:
    ``/ready`` answers 200 where SGLang 0.5.23's own ``is_ready`` is true and 503 where it is
    false -- serving, paused by ``/pause_generation``, and serving again once the pause is lifted."""
    sglang_is_ready = _sglang_is_ready()
    client, tm = admin
    assert sglang_is_ready(False) and not sglang_is_ready(True)
    assert client.get("/ready").status_code == 200
    r = client.post(
        "/pause_generation", json={"mode": "abort"}, headers=AUTH
    )  # abort: no scheduler reply needed
    assert r.status_code == 200, r.text
    try:
        assert tm.is_pause
        assert client.get("/ready").status_code == 503
        assert client.head("/ready").status_code == 503
        assert client.get("/v1/models", headers=AUTH).status_code == 200  # the server still answers
    finally:  # /continue_generation waits for the scheduler, which never answers here
        tm.is_pause = False
        tm._reopen_admission()
    assert client.get("/ready").status_code == 200


def _ready_replica(status: list[int]) -> web.Application:
    """A replica whose ``/ready`` answers ``status[0]`` (503: paused, as a single server's)."""

    async def ready(request: web.Request) -> web.Response:
        return web.Response(status=status[0])

    app = web.Application()
    app.router.add_get("/ready", ready)
    return app


def _router_ready_200() -> web.Application:
    """A router that answers 200 to anything (it sends ``/ready`` to one replica of its choice)."""

    async def any_route(request: web.Request) -> web.Response:
        return web.Response(status=200)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_route)
    return app


def test_sglang_37488_dp_gateway_ready_is_503_while_any_rank_is_paused() -> None:
    """The same report (sgl-project/sglang#37488) with ``--dp-size 2``: SGLang's one server is not
    ready while paused, and ``/pause_generation`` pauses every rank, so the group is ready only
    when every rank is. Expected: the data-parallel gateway's ``/ready`` asks every rank (not the
    router's pick of one) and answers 503 while a rank answers 503, 200 when all answer 200."""
    from sglang_v4.entrypoints.dp_gateway import GATEWAY_SERVER_OPTIONS, create_gateway_app

    statuses = [[200], [503]]
    stops = []
    try:
        urls = []
        for status in statuses:
            url, stop = serve_aiohttp(_ready_replica(status))
            urls.append(url)
            stops.append(stop)
        router, stop = serve_aiohttp(_router_ready_200())
        stops.append(stop)
        gateway, stop = serve_aiohttp(create_gateway_app(router, urls), **GATEWAY_SERVER_OPTIONS)
        stops.append(stop)
        assert requests.get(f"{gateway}/ready", timeout=10).status_code == 503
        statuses[1][0] = 200
        assert requests.get(f"{gateway}/ready", timeout=10).status_code == 200
    finally:
        for stop in reversed(stops):
            stop()


# --------------------------------------------------------------------------- /metrics/


def _sglang_metrics_app(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """SGLang 0.5.23's own ``/metrics`` route (``add_prometheus_middleware``: prometheus_client's
    ASGI app mounted with its path pattern) on an empty FastAPI app."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # read by prometheus_client
    common = pytest.importorskip("sglang.srt.utils.common")
    app = FastAPI()
    common.add_prometheus_middleware(app)
    return TestClient(app)


def _sglang_auth_allows(monkeypatch: pytest.MonkeyPatch, path: str, api_key: str) -> bool:
    """SGLang 0.5.23's own ``decide_request_auth`` (``srt/utils/auth.py``, loaded alone) for a GET
    of ``path`` without a key while ``--api-key`` is set."""
    spec = importlib.util.spec_from_file_location(
        "sglang_auth_oracle_23", _sglang_source("srt/utils/auth.py")
    )
    assert spec is not None and spec.loader is not None
    auth = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, auth)  # its dataclasses resolve their module
    spec.loader.exec_module(auth)
    return bool(
        auth.decide_request_auth(
            method="GET",
            path=path,
            authorization_header=None,
            api_key=api_key,
            admin_api_key=None,
            auth_level=auth.AuthLevel.NORMAL,
        ).allowed
    )


def test_litellm_3475_metrics_with_a_trailing_slash_is_the_same_open_scrape(
    admin: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """BerriAI/litellm#3475 (and prometheus/client_python#1016, gpustack/gpustack#2811): a
    prometheus_client mount serves ``/metrics/`` (``/metrics`` redirects there), so scrape
    configs carry ``metrics_path: /metrics/``; here ``/metrics/`` was a 401 under ``--api-key``
    (a 404 with the key). Expected: as SGLang 0.5.23's own ``/metrics`` route (its
    ``add_prometheus_middleware``) serves ``/metrics/`` with 200 and its ``decide_request_auth``
    lets it through without a key, ``GET /metrics/`` without a key answers 200 with the exposition
    format, whose families (``prometheus_client``'s parser) are those of ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    sglang = _sglang_metrics_app(monkeypatch, tmp_path)
    for path in ("/metrics", "/metrics/"):
        r = sglang.get(path, follow_redirects=False)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), (
            path,
            r.status_code,
        )
        assert _sglang_auth_allows(monkeypatch, path, ADMIN_KEY), path
    client, _ = admin
    scrape = {"X-Prometheus-Scrape-Timeout-Seconds": "0.2"}  # the silent scheduler is waited 0.2 s
    bare = client.get("/metrics", headers=scrape)
    slash = client.get("/metrics/", headers=scrape, follow_redirects=False)
    assert bare.status_code == 200 and slash.status_code == 200, (slash.status_code, slash.text[:200])
    assert slash.headers["content-type"].startswith("text/plain; version=0.0.4")

    def families(text: str) -> set[str]:
        return {f.name for f in text_string_to_metric_families(text)}

    assert families(slash.text) == families(bare.text) and "sglang:num_requests" in families(slash.text)


# --------------------------------------------------------------------------- watermark secrets

WATERMARK_SECRET = "wm-s3cr3t-23"


def test_sglang_39449_watermark_config_secret_is_redacted_as_sglang_redacts_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """sgl-project/sglang#39449 (credentials given on the command line reached the server-args
    log, ``/server_info`` and the launch command). ``--watermark-config`` carries the watermark
    keys; here it is accepted and ignored, and its value was printed in full by the ignored-flags
    warning, the ``repr`` of the server arguments and their dict (``/server_info``). Expected: as
    SGLang 0.5.23's own ``redact_watermark_secrets`` (its ``/server_info``) and
    ``redact_watermark_command_line`` do, the value is shown as ``<redacted>`` in the dict and the
    warning, is absent from the ``repr`` (SGLang's ``__repr__`` hides it), and the secret appears
    in none of them, while the field itself keeps the value given."""
    import argparse
    import json
    import logging

    from sglang_v4.server_args import ServerArgs
    from sglang_v4.server_args_compat import warn_ignored_sglang_args

    wm = pytest.importorskip("sglang.srt.sampling.watermarking.core")
    given = json.dumps({"enabled": True, "key": WATERMARK_SECRET})
    argv = ["--model-path", "m", "--device", "cpu", "--watermark-config", given, "--tp-size", "1"]
    assert "watermark_config" in wm.WATERMARK_SECRET_FIELD_NAMES
    want_dict = wm.redact_watermark_secrets({"watermark_config": given})["watermark_config"]
    want_cmd = wm.redact_watermark_command_line(argv, given)
    assert WATERMARK_SECRET not in want_cmd and f"--watermark-config {want_dict}" in want_cmd

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(argv)
    with caplog.at_level(logging.WARNING):
        warning = warn_ignored_sglang_args(args)
    sa = ServerArgs.from_cli_args(args)
    assert sa.watermark_config == given  # kept as given; only what is shown is redacted
    assert warning is not None and f"--watermark-config {want_dict}" in warning
    assert sa.to_dict()["watermark_config"] == want_dict
    assert "watermark_config" not in repr(sa)
    for shown in (warning, caplog.text, repr(sa), json.dumps(sa.to_dict())):
        assert WATERMARK_SECRET not in shown

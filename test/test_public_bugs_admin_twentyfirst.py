"""A twenty-first set of public bug reports, replayed against the server's administration surface:
serving under a reverse proxy's path prefix (SGLang's ``--fastapi-root-path``, vLLM's
``--root-path``) with the API-key, admin-key and error-shape rules unchanged under the prefix,
model ids holding a ``/``, the secrets of the server arguments kept out of their ``repr`` and of
``/server_info``, the ``Bearer`` scheme in any case, vLLM's ``--shutdown-timeout``, and
``/metrics`` left open to Prometheus under ``--api-key``. Each test names its report.

Faults found here and fixed: ``--fastapi-root-path`` was refused and ``--root-path`` unknown (a
server behind a prefix-forwarding proxy could not be run); the route checks read the raw path, so
under a prefix the probes would have needed the key and the admin routes taken the plain key; the
``repr`` of ``ServerArgs`` (a logged or printed one) showed ``api_key``, ``admin_api_key`` and
``ssl_keyfile_password``; the OpenAI routes' second key check refused ``Bearer`` followed by two
spaces and a padded ``x-api-key``, which the middleware accepted; vLLM's ``--shutdown-timeout`` was
an unrecognized argument.

Fixtures: the app of ``http_server.create_app`` in-process (no lifespan) over a
``TokenizerManager`` whose scheduler socket is read and never answered (``--api-key``,
``--admin-api-key``, ``--enable-metrics``, ``--fastapi-root-path``, two served names). Oracles:
the ``openai`` client (its types, ``models.retrieve``, ``NotFoundError``), ``prometheus_client``'s
text parser, the same request on the bare path, FastAPI's documented ``root_path`` behaviour (the
prefix listed as the OpenAPI server), RFC 9110 (the authentication scheme is case-insensitive).
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import zmq

openai = pytest.importorskip("openai")

from openai.types import Model  # noqa: E402

pytestmark = pytest.mark.timeout(120)

KEY = "sk-plain-21"
ADMIN_KEY = "sk-admin-21"
PREFIX = "/my-model"
#: Prometheus' scrape-timeout header: the scheduler (never answering here) is waited 0.1 s for.
SCRAPE = {"X-Prometheus-Scrape-Timeout-Seconds": "0.2"}
NAME = "fake-v4"
SLASH_NAME = "org/fake-v4"  # a hub-style alias: the id holds a "/"
AUTH = {"Authorization": f"Bearer {KEY}"}
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
CONTEXT = 4096


def _parse(argv: list[str]) -> Any:
    from sglang_v4.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args([*argv, "--device", "cpu"]))


@pytest.fixture(scope="module")
def prefixed_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A ``TestClient`` over ``create_app`` run as SGLang's ``--fastapi-root-path /my-model/
    --api-key K --admin-api-key A --enable-metrics`` (parsed from the command line); its tokenizer
    manager stands for the started one (status ``Up``) and its scheduler never answers."""
    from fastapi.testclient import TestClient
    from server_fixture import make_fake_model_dir
    from sglang_v4.entrypoints.http_server import create_app
    from sglang_v4.entrypoints.metrics import TokenizerMetrics
    from sglang_v4.entrypoints.route_families import mount_openai
    from sglang_v4.managers.control_struct import SchedulerReadyInfo
    from sglang_v4.managers.tokenizer_manager import TokenizerManager
    from sglang_v4.server_args import PortArgs

    model = make_fake_model_dir(Path(tmp_path_factory.mktemp("admin21")))
    sa = _parse(
        [
            "--model-path", str(model), "--served-model-name", NAME, SLASH_NAME, "--fastapi-root-path", PREFIX + "/",
            "--api-key", KEY, "--admin-api-key", ADMIN_KEY, "--enable-metrics",
        ]
    )  # fmt: skip
    info = SchedulerReadyInfo(
        status="ready", max_total_num_tokens=CONTEXT, max_req_input_len=CONTEXT - 1, context_len=CONTEXT
    )
    pa = PortArgs.init_new()
    inbox = zmq.Context.instance().socket(zmq.PULL)  # the scheduler: it reads and never answers
    inbox.bind(pa.scheduler_input_ipc_name)
    tm = TokenizerManager(sa, pa, info, None)
    try:
        tm.metrics = TokenizerMetrics(NAME)
        app, state = create_app(sa, SimpleNamespace(scheduler_info=info, port_args=pa))  # type: ignore[arg-type]
        state.tokenizer_manager = tm
        state.openai_serving = mount_openai(app, tm, sa)
        tm.server_status = "Up"
        yield TestClient(app), sa, tm
    finally:
        tm.close()
        inbox.close(linger=0)
        shutil.rmtree(pa.ipc_dir, ignore_errors=True)


# --------------------------------------------------------------------------- --root-path


def test_sglang_5879_fastapi_root_path_serves_prefixed_and_bare_paths(prefixed_app: Any) -> None:
    """sgl-project/sglang#5879 (SGLang's ``--fastapi-root-path``, handed to the ASGI server as
    ``root_path``, so an API behind a proxy at ``/my-model`` serves its docs and routes there).
    Expected: the flag is accepted (trailing ``/`` dropped); ``/my-model/v1/models`` answers as
    ``/v1/models`` does (a proxy that forwards the prefix, one that strips it), the ``openai``
    client parses the card; ``/openapi.json`` lists ``/my-model`` as its server (FastAPI's
    documented ``root_path`` behaviour), and a path outside the prefix's segment is not taken
    for it."""
    client, sa, _ = prefixed_app
    assert sa.root_path == PREFIX
    bare = client.get("/v1/models", headers=AUTH)
    prefixed = client.get(PREFIX + "/v1/models", headers=AUTH)
    assert bare.status_code == prefixed.status_code == 200, (bare.text, prefixed.text)
    assert [Model.model_validate(c).id for c in prefixed.json()["data"]] == [NAME, SLASH_NAME]
    assert prefixed.json()["data"] == bare.json()["data"]
    assert client.get(PREFIX + "/get_model_info", headers=AUTH).json()["served_model_name"] == NAME
    doc = client.get(PREFIX + "/openapi.json", headers=AUTH)
    assert doc.status_code == 200, doc.text
    assert {"url": PREFIX} in doc.json()["servers"]
    assert client.get("/my-modelx/v1/models", headers=AUTH).status_code == 404


def test_vllm_10172_root_path_flag_and_route_rules_under_the_prefix(prefixed_app: Any) -> None:
    """vllm-project/vllm#10172 (a base path for the API, answered by vLLM's ``--root-path``).
    Expected: ``--root-path /p`` parses to the same ``root_path`` as SGLang's spelling, a path
    that is no URL path is refused naming ``root_path``; under the prefix the route rules are the
    bare path's: ``/health`` and ``/metrics`` need no key, ``/v1/models`` without a key is a 401 in
    the same body as the bare path's, and the admin route ``/flush_cache`` takes only the admin
    key (the plain key is a 401 there, prefixed or not; the admin key reaches the route, whose 400
    for a bad ``timeout`` shows it)."""
    from sglang_v4.server_args import ServerArgs

    assert _parse(["--root-path", "/p/"]).root_path == "/p"
    assert _parse([]).root_path == ""
    for bad in ("p", "/a b", "/a?x", "//p"):
        with pytest.raises(ValueError, match="root_path"):
            ServerArgs(model_path=None, device="cpu", root_path=bad)
    client, _, _ = prefixed_app
    for base in ("", PREFIX):
        assert client.get(base + "/health").status_code == 200
        assert client.get(base + "/metrics", headers=SCRAPE).status_code == 200
    bare, prefixed = client.get("/v1/models"), client.get(PREFIX + "/v1/models")
    assert bare.status_code == prefixed.status_code == 401
    assert prefixed.json() == bare.json()
    for base in ("", PREFIX):  # a bad timeout: past the key check, answered before the scheduler
        assert client.post(base + "/flush_cache?timeout=x", headers=AUTH).status_code == 401
        assert client.post(base + "/flush_cache?timeout=x", headers=ADMIN_AUTH).status_code == 400


def test_ollama_10139_model_id_with_a_slash_is_retrievable_through_the_client(prefixed_app: Any) -> None:
    """ollama/ollama#10139 (also BerriAI/litellm#37271): a model listed as ``org/name`` could not
    be fetched back with ``GET /v1/models/org/name`` (404, percent-encoded or not). Expected: the
    ``openai`` client, pointed at the prefixed base URL, lists both served names and retrieves
    each, the slashed one included, as the card the listing gave; the slash sent percent-encoded
    (``org%2Ffake-v4``) answers the same card; an unknown id is the client's ``NotFoundError``."""
    from openai_fake_tm import oai_client

    client, _, _ = prefixed_app
    oai = oai_client(client, KEY)
    oai.base_url = f"http://testserver{PREFIX}/v1"
    listed = {m.id: m for m in oai.models.list().data}
    assert list(listed) == [NAME, SLASH_NAME]
    for name in (NAME, SLASH_NAME):
        assert oai.models.retrieve(name) == listed[name]
    encoded = client.get(PREFIX + "/v1/models/org%2Ffake-v4", headers=AUTH)
    assert encoded.status_code == 200 and Model.model_validate(encoded.json()) == listed[SLASH_NAME]
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("org/other")


def test_tower_mcp_1289_bearer_scheme_any_case_and_exact_open_paths(prefixed_app: Any) -> None:
    """joshrotenberg/tower-mcp#1289: the key check matched a literal ``"Bearer "``, so
    ``authorization: bearer KEY`` (RFC 9110 section 11.1: the scheme is case-insensitive) was a
    401; and an open-path test by prefix would let ``/healthz-internal`` through as ``/health``.
    Found here: the OpenAI routes checked the key a second time by their own rule, which refused
    ``Bearer`` followed by two spaces (and a padded ``x-api-key``) that the middleware accepted;
    both now share one rule. Expected: ``bearer``, ``BEARER``, ``Bearer`` with two spaces and a
    padded ``x-api-key`` reach ``/v1/models`` (200);
    the key itself is compared exactly (another case, a suffix, another scheme, the bare key:
    401); ``/healthz`` and ``/health-x`` (prefixed or not) are not open: 401 without a key."""
    client, _, _ = prefixed_app
    for auth in (f"bearer {KEY}", f"BEARER {KEY}", f"Bearer  {KEY}"):
        assert client.get("/v1/models", headers={"Authorization": auth}).status_code == 200, auth
    assert client.get("/v1/models", headers={"x-api-key": f" {KEY} "}).status_code == 200
    for auth in (f"Bearer {KEY.upper()}", f"Bearer {KEY}x", f"Basic {KEY}", KEY, "Bearer"):
        assert client.get("/v1/models", headers={"Authorization": auth}).status_code == 401, auth
    for base in ("", PREFIX):
        for path in ("/healthz", "/health-x", "/metricsx"):
            assert client.get(base + path).status_code == 401, base + path


# --------------------------------------------------------------------------- graceful shutdown


def test_vllm_34730_shutdown_timeout_is_the_drain_time(capsys: pytest.CaptureFixture[str]) -> None:
    """vllm-project/vllm#34730 (re-applied by vllm-project/vllm#36666): vLLM's
    ``--shutdown-timeout SECONDS`` lets in-flight requests finish for up to that long after
    SIGTERM, ``0`` aborting them at once. Expected: the flag is accepted as the same setting as
    ``--graceful-shutdown-timeout`` (30 and 0 stored as given, the default unchanged without it);
    a negative time is refused naming the setting, as the native spelling is."""
    from sglang_v4.launch_server import main

    assert _parse(["--shutdown-timeout", "30"]).graceful_shutdown_timeout == 30.0
    assert _parse(["--shutdown-timeout", "0"]).graceful_shutdown_timeout == 0.0
    assert (
        _parse([]).graceful_shutdown_timeout
        == _parse(["--graceful-shutdown-timeout", "5"]).graceful_shutdown_timeout
    )
    for flag in ("--shutdown-timeout", "--graceful-shutdown-timeout"):
        with pytest.raises(SystemExit) as e:
            main(["--model-path", "m", "--device", "cpu", flag, "-1"])
        assert e.value.code != 0
        assert "graceful_shutdown_timeout" in capsys.readouterr().err


# --------------------------------------------------------------------------- secrets


def test_sglang_37457_server_args_repr_hides_the_keys() -> None:
    """sgl-project/sglang#37457: the start-up log and ``/server_info`` printed the resolved
    server arguments with ``api_key`` and ``admin_api_key`` in clear. Expected: neither the
    ``repr`` nor the ``str`` of a ``ServerArgs`` (what a log line or a traceback shows) holds any
    of the three secrets, while the fields keep their values; ``to_dict`` (``/get_server_info``)
    masks them."""
    from sglang_v4.server_args import ServerArgs

    secrets = {
        "api_key": "sk-secret-one",
        "admin_api_key": "sk-secret-two",
        "ssl_keyfile_password": "pw-three",
    }
    sa = ServerArgs(model_path=None, device="cpu", **secrets)
    for text in (repr(sa), str(sa), f"{sa!r}"):
        for value in secrets.values():
            assert value not in text
    assert {k: getattr(sa, k) for k in secrets} == secrets
    d = sa.to_dict()
    assert all(d[k] != v and v not in str(d) for k, v in secrets.items())


def test_sglang_30166_server_info_shows_no_key_to_any_caller(prefixed_app: Any, monkeypatch: Any) -> None:
    """sgl-project/sglang#30166: ``/server_info`` serialized the whole ``ServerArgs``, so a caller
    with the plain key read the admin key. Expected: ``/get_server_info`` and ``/server_info``,
    asked with the plain key, prefixed or not, answer the arguments (``served_model_name``,
    ``root_path``) with neither key anywhere in the body; without a key they are a 401."""
    client, sa, tm = prefixed_app

    async def no_live_state() -> dict[str, Any]:  # the scheduler of the fixture never answers
        return {}

    monkeypatch.setattr(tm, "get_internal_state", no_live_state)
    for base in ("", PREFIX):
        assert client.get(base + "/get_server_info").status_code == 401
        for route in ("/get_server_info", "/server_info"):
            r = client.get(base + route, headers=AUTH)
            assert r.status_code == 200, r.text
            body = r.json()
            assert (body["served_model_name"], body["root_path"]) == (sa.served_model_name, PREFIX)
            assert KEY not in r.text and ADMIN_KEY not in r.text


# --------------------------------------------------------------------------- /metrics


def test_sglang_3443_metrics_open_to_prometheus_under_api_key(prefixed_app: Any) -> None:
    """sgl-project/sglang#3443 (also ggml-org/llama.cpp#28915): with ``--api-key`` a Prometheus
    scrape of ``/metrics`` (no key) was refused. Expected: ``/metrics`` answers 200 without a key,
    prefixed or not, in the text format ``prometheus_client``'s parser reads, with SGLang's
    ``sglang:`` families; a wrong key on it is no reason to refuse either."""
    from prometheus_client.parser import text_string_to_metric_families

    client, _, _ = prefixed_app
    for base in ("", PREFIX):
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = client.get(base + "/metrics", headers={**SCRAPE, **headers})
            assert r.status_code == 200, r.text
            assert r.headers["content-type"].startswith("text/plain")
            names = {f.name for f in text_string_to_metric_families(r.text)}
            assert "sglang:prompt_tokens" in names, sorted(names)[:20]

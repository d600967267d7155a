"""``--api-key``: every route of the server without a key, with a wrong key and with the right key.

The route list is the app's own (``create_app`` plus the OpenAI and Anthropic routers, enumerated from their
``routes``), so a route added later is covered without editing this test. Open routes are
SGLang's: ``/health``, ``/health_generate``, ``/ready`` and ``/metrics``; every other one -- the admin routes
``/flush_cache`` and ``/abort_request`` included, and unknown paths -- answers 401 without the
right ``Authorization: Bearer KEY`` (or ``x-api-key: KEY``, Anthropic's header). The key is compared
with ``hmac.compare_digest``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from server_fixture import SECURED_API_KEY, make_fake_model_dir
from sglang_v4.entrypoints.admission import OPEN_ROUTES
from sglang_v4.entrypoints.anthropic import create_anthropic_router
from sglang_v4.entrypoints.anthropic.protocol import ANTHROPIC_ROUTES
from sglang_v4.entrypoints.http_server import create_app
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.entrypoints.openai.serving_score import create_score_router
from sglang_v4.managers.control_struct import SchedulerReadyInfo
from sglang_v4.server_args import ServerArgs

pytestmark = pytest.mark.timeout(240)
KEY = SECURED_API_KEY

# a plausible body per POST route, so that a request that passes authentication can succeed
BODIES: dict[str, Any] = {
    "/generate": {"text": "hi", "sampling_params": {"max_new_tokens": 2}},
    "/abort_request": {"rid": "nope"},
    "/v1/completions": {"prompt": "hi", "max_tokens": 2},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/responses": {"input": "hi", "max_output_tokens": 2},
    "/v1/messages": {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/messages/count_tokens": {"model": "default", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/score": {"query": "hi", "items": [" there"], "label_token_ids": [5, 6]},
    # the runtime-control routes get bodies they refuse (400): the sweep must not pause the shared
    # server, start a profile or reload weights
    "/pause_generation": {"mode": "not-a-mode"},
    "/start_profile": {"num_steps": 0},
    "/update_weights_from_disk": {},
    "/get_weights_by_name": {},
}
#: Stands for the id of a stored response in ``/v1/responses/{response_id}``: none is stored under
#: it, so the right key gets OpenAI's 404 for an unknown response.
UNKNOWN_RESPONSE = "resp_unknown"
#: Path parameters of the routes of stored objects, and the unknown ids the test puts there (a 404
#: with the key).
UNKNOWN_IDS = {"{response_id}": UNKNOWN_RESPONSE, "{file_id}": "file-unknown", "{batch_id}": "batch_unknown"}


def _routes(model_dir: Path) -> list[tuple[str, str]]:
    sa = ServerArgs(model_path=str(model_dir), device="cpu", api_key=KEY, enable_metrics=True)
    procs = SimpleNamespace(scheduler_info=SchedulerReadyInfo(status="ready"))
    app, _ = create_app(sa, procs)  # type: ignore[arg-type]
    tm = SimpleNamespace(tokenizer=None, vocab_size=10, context_len=10)
    openai_router = create_openai_router(tm, sa)
    anthropic_router = create_anthropic_router(openai_router.serving)  # type: ignore[attr-defined]
    routes = list(app.routes) + list(openai_router.routes) + list(anthropic_router.routes)
    routes += list(create_score_router(tm, sa).routes)  # mounted next to the OpenAI router
    out = []
    for r in routes:
        path = getattr(r, "path", "")
        if path.startswith(("/docs", "/openapi", "/redoc")):
            continue  # FastAPI's own documentation pages
        for m in sorted(getattr(r, "methods", None) or ()):
            if m != "HEAD":
                for param, unknown in UNKNOWN_IDS.items():
                    path = path.replace(param, unknown)
                out.append((m, path.replace("{model:path}", "default")))
    return out


@pytest.fixture(scope="module")
def secured(secured_fake_server):  # noqa: ANN201 - a server_fixture.ServerHandle
    """The session's fake-model server with ``--api-key KEY`` (conftest ``secured_fake_server``)."""
    assert secured_fake_server.api_key == KEY
    return secured_fake_server


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str]]:
    return _routes(make_fake_model_dir(tmp_path_factory.mktemp("auth")))


def _call(h, method: str, path: str, headers: dict[str, str]) -> requests.Response:
    body = BODIES.get(path)
    return requests.request(method, h.url + path, json=body, headers=headers, timeout=60)


def test_every_route_without_a_key_wrong_key_and_right_key(secured, routes) -> None:
    paths = {p for _, p in routes}
    assert {"/generate", "/flush_cache", "/abort_request", "/v1/completions", "/health"} <= paths
    wrong = [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}, {"Authorization": "Basic " + KEY}]
    wrong += [{"Authorization": f"Bearer {KEY}x"}, {"x-api-key": "wrong"}, {"x-api-key": f"Bearer {KEY}"}]
    assert ANTHROPIC_ROUTES <= paths
    for method, path in routes:
        for headers in wrong:
            r = _call(secured, method, path, headers)
            if path in OPEN_ROUTES:
                assert r.status_code != 401, (method, path, headers)
            else:
                assert r.status_code == 401, (method, path, headers, r.status_code)
                body = r.json()
                if path in ANTHROPIC_ROUTES:
                    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
                elif path.startswith("/v1/"):
                    assert body["object"] == "error" and body["code"] == 401
                else:
                    assert body == {"error": "Unauthorized"}
        ok = (404,) if any(u in path for u in UNKNOWN_IDS.values()) else (200, 400)
        for headers in (secured.headers(), {"x-api-key": KEY}):  # Anthropic's header, on every route
            r = _call(secured, method, path, headers)
            assert r.status_code in ok, (method, path, headers, r.status_code, r.text[:300])


def test_unknown_paths_and_open_routes(secured) -> None:
    assert requests.get(secured.url + "/no/such/route", timeout=30).status_code == 401
    r = requests.get(secured.url + "/no/such/route", headers=secured.headers(), timeout=30)
    assert r.status_code == 404
    # a path that only starts like an open route is not open
    assert requests.get(secured.url + "/healthz", timeout=30).status_code == 401
    assert requests.get(secured.url + "/health", timeout=30).status_code == 200
    assert requests.get(secured.url + "/metrics", timeout=30).status_code == 200
    assert requests.get(secured.url + "/ready", timeout=30).status_code == 200
    ok = requests.post(secured.url + "/flush_cache", headers=secured.headers(), timeout=30)
    assert ok.status_code == 200


def test_browser_preflight_passes_and_every_answer_carries_cors_headers(secured) -> None:
    """A browser page on another origin can use the API with a key (SGLang's app allows any
    origin): the preflight ``OPTIONS`` (sent without ``Authorization``, by the CORS standard) is
    answered 200 and allows the method and headers asked for; the answers, a 401 included (so the
    page can read why), carry ``Access-Control-Allow-Origin`` for the page's origin. Before, the
    preflight got 405 and no answer carried the header, so the browser blocked every call."""
    origin = "http://app.example"
    pre = requests.options(
        secured.url + "/v1/chat/completions",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
        timeout=30,
    )
    assert pre.status_code == 200, pre.text
    assert pre.headers["access-control-allow-origin"] in (origin, "*")
    assert "POST" in pre.headers["access-control-allow-methods"]
    allowed = {h.strip().lower() for h in pre.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type"} <= allowed
    denied = requests.get(secured.url + "/v1/models", headers={"Origin": origin}, timeout=30)
    assert denied.status_code == 401
    assert denied.headers.get("access-control-allow-origin") in (origin, "*")
    ok = requests.get(secured.url + "/v1/models", headers={"Origin": origin, **secured.headers()}, timeout=30)
    assert ok.status_code == 200
    assert ok.headers.get("access-control-allow-origin") in (origin, "*")


def test_key_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The middleware's comparison goes through ``hmac.compare_digest`` (whose running time does
    not depend on where the bytes differ), for right and wrong keys alike."""
    import hmac

    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from sglang_v4.entrypoints import admission

    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(admission.hmac, "compare_digest", spy)
    app = FastAPI()

    @app.get("/x")
    async def x() -> dict[str, int]:
        return {"ok": 1}

    app.add_middleware(
        admission.AdmissionMiddleware,
        api_key=KEY,
        limits=admission.AdmissionLimits(),
        is_draining=lambda: False,
    )
    c = TestClient(app)
    assert c.get("/x", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert c.get("/x", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert calls == [(b"nope", KEY.encode()), (KEY.encode(), KEY.encode())]


@pytest.mark.parametrize(("api_key", "admin_key"), [(None, None), ("k", None), (None, "adm"), ("k", "adm")])
def test_admin_api_key_follows_sglangs_rule(api_key: str | None, admin_key: str | None) -> None:
    """``--admin-api-key``: with it the admin routes take only that key; without it they take the
    API key like every route; the other routes never take the admin key in its place. Oracle:
    SGLang's own ``decide_request_auth`` (its admin routes are ``ADMIN_OPTIONAL``), where sglang is
    installed, and the rule as its docstring states it otherwise."""
    from sglang_v4.entrypoints.admission import ADMIN_ROUTES, AdmissionLimits, AdmissionMiddleware
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    async def ok(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    routes = ["/generate", "/get_model_info", *sorted(ADMIN_ROUTES), "/health", "/metrics"]
    app = Starlette(routes=[Route(r, ok, methods=["GET", "POST"]) for r in routes])
    limits = AdmissionLimits(max_body_bytes=1 << 20, read_timeout_s=10.0, keep_alive_s=5.0)
    client = TestClient(
        AdmissionMiddleware(app, api_key, limits, lambda: False, admin_api_key=admin_key)  # type: ignore[arg-type]
    )

    def expected(path: str, token: str | None) -> bool:
        header = f"Bearer {token}" if token else None
        try:
            from sglang.srt.utils.auth import AuthLevel, decide_request_auth
        except ImportError:
            if path in OPEN_ROUTES:
                return True
            want = admin_key if (path in ADMIN_ROUTES and admin_key) else api_key
            return want is None or token == want
        level = AuthLevel.ADMIN_OPTIONAL if path in ADMIN_ROUTES else AuthLevel.NORMAL
        return decide_request_auth(
            method="POST", path=path, authorization_header=header, api_key=api_key,
            admin_api_key=admin_key, auth_level=level,
        ).allowed  # fmt: skip

    for path in routes:
        for token in (None, "k", "adm", "wrong"):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            allowed = client.post(path, headers=headers).status_code == 200
            assert allowed == expected(path, token), (path, token, api_key, admin_key)
    if admin_key:
        assert ServerArgs(device="cpu", admin_api_key=admin_key).to_dict()["admin_api_key"] == "***"

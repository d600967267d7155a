"""A twenty-sixth set of public bug reports, replayed against the server's administration surface
in-process (``admin_app_testutil``: ``create_app`` with ``--api-key``, ``--enable-metrics``, a
scheduler that never answers): which routes the API key guards (every mounted route, a route added
later, browser preflights), CORS on credentialed requests, and bad bodies on the runtime-control
routes (``/update_weights_from_disk``, ``/pause_generation``). Each test names its report.

No fault was found by these reports; the tests guard the behaviour they ask for.

Oracles: SGLang 0.5.23's own key decision (``sglang.srt.utils.auth.decide_request_auth``, its
installed code, run on each route and method), SGLang's ``PauseGenerationReqInput.mode`` type
(its installed ``io_struct`` source, read), the Fetch standard's CORS rules (a credentialed response names
the origin, never ``*``, and says ``Vary: Origin``) and the reports' stated expected values.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_app_testutil import ADMIN_KEY, admin_app_client
from sglang_v4.entrypoints.metrics import SCRAPE_TIMEOUT_HEADER
from sglang_v4.managers.tokenizer_control_mixin import PAUSE_MODES


def _sglang_source(module_path: str) -> Path:
    """The installed SGLang's file ``module_path`` (below the package), found without importing
    the package (its ``__init__`` takes seconds)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        pytest.skip("SGLang is not installed")
    return Path(spec.origin).parent.joinpath(*module_path.split("/"))


@functools.cache
def _load_sglang_auth() -> Any:
    """SGLang 0.5.23's ``srt/utils/auth.py`` loaded alone (stdlib imports only at module level),
    once, when a test first needs it (a test that does is skipped where SGLang is not installed)."""
    name = "sglang_auth_oracle_r26"
    spec = importlib.util.spec_from_file_location(name, _sglang_source("srt/utils/auth.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
ORIGIN = "https://ui.example"
#: Routes not called here: each reaches the scheduler, which never answers in this app.
NOT_CALLED = {"/health_generate"}


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    with admin_app_client(Path(tmp_path_factory.mktemp("r26admin"))) as pair:
        yield pair


def _mounted(routes: Any) -> Iterator[tuple[str, str]]:
    """``(method, path)`` of every route the app mounts, the included routers' too (``HEAD``
    left out: it is answered as ``GET``)."""
    for r in routes:
        inner = getattr(r, "original_router", None)
        if inner is not None:
            yield from _mounted(inner.routes)
            continue
        path = getattr(r, "path", None)
        for method in sorted(getattr(r, "methods", None) or ()):
            if path and method != "HEAD":
                yield method, path


def _concrete(path: str) -> str:
    """``path`` with each ``{param}`` / ``{param:path}`` filled in with a plain word."""
    out, depth = [], 0
    for ch in path:
        if ch == "{":
            depth += 1
            out.append("x")
        elif ch == "}":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _sglang_pause_modes() -> set[str]:
    """The values of SGLang 0.5.23's ``PauseGenerationReqInput.mode`` literal, read from its
    installed ``io_struct.py`` source (importing it needs ``torchvision``)."""
    tree = ast.parse(_sglang_source("srt/managers/io_struct.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "PauseGenerationReqInput":
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and getattr(stmt.target, "id", None) == "mode":
                    sub = stmt.annotation
                    assert isinstance(sub, ast.Subscript) and getattr(sub.value, "id", None) == "Literal"
                    elts = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
                    return {e.value for e in elts if isinstance(e, ast.Constant)}
    raise AssertionError("PauseGenerationReqInput.mode not found in SGLang's io_struct")


def _sglang_allows(method: str, path: str, authorization: str | None) -> bool:
    """SGLang 0.5.23's decision for a request to ``path`` on a server with ``--api-key
    ADMIN_KEY`` and no admin key (a route's level does not matter then)."""
    sglang_auth = _load_sglang_auth()
    return sglang_auth.decide_request_auth(
        method=method,
        path=path,
        authorization_header=authorization,
        api_key=ADMIN_KEY,
        admin_api_key=None,
        auth_level=sglang_auth.AuthLevel.NORMAL,
    ).allowed


# --------------------------------------------------------------------------- API key


def test_vllm_18892_no_mounted_route_is_reachable_without_the_key(admin: tuple[Any, Any]) -> None:
    """vllm-project/vllm#18892: with an API key set, many routes (``/tokenize``, ``/version``,
    ``/classify``, ``/load``, ...) answered without one. Expected, walking every route the app
    really mounts (not a list kept by hand): a request without the key is refused with 401
    exactly where SGLang's own key decision refuses it, so only its open probes and ``/metrics``
    answer; the 401 keeps SGLang's body ``{"error": "Unauthorized"}`` outside ``/v1/``."""
    client, _ = admin
    seen = list(_mounted(client.app.routes))
    paths = {p for _, p in seen}
    # the walk reaches the included routers (control, loads, OpenAI, Anthropic)
    assert {"/pause_generation", "/update_weights_from_disk", "/v1/models", "/tokenize"} <= paths
    for method, path in seen:
        if path in NOT_CALLED:
            continue
        url = _concrete(path)
        # a short scrape limit: the gauges' wait on the never-answering scheduler is cut short
        r = client.request(method, url, headers={SCRAPE_TIMEOUT_HEADER: "0.1"})
        allowed = _sglang_allows(method, url, None)
        assert (r.status_code != 401) == allowed, (method, url, r.status_code, r.text[:200])
        if not allowed and not url.startswith("/v1/"):
            assert r.json() == {"error": "Unauthorized"}, (method, url)
    assert not _sglang_allows("GET", "/version", None)  # the oracle guards what the report saw open


def test_vllm_58028_a_route_added_later_is_guarded_from_the_start(admin: tuple[Any, Any]) -> None:
    """vllm-project/vllm#58028: the key guarded a list of path prefixes, so any route added
    outside them was open from its first commit; the fix denies by default. Expected: a route
    mounted on the running app after it was built needs the key at once (401 without it, as
    SGLang's decision says), and answers with it."""
    client, _ = admin
    path = "/r26_added_control_route"

    async def added() -> dict[str, str]:
        return {"status": "ok"}

    client.app.add_api_route(path, added, methods=["POST"])
    assert not _sglang_allows("POST", path, None)
    r = client.post(path)
    assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
    r = client.post(path, headers=AUTH)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert _sglang_allows("POST", path, AUTH["Authorization"])


def test_aana_sdk_236_preflight_on_an_admin_route_needs_no_key_and_runs_nothing(
    admin: tuple[Any, Any],
) -> None:
    """dropbox/aana_sdk#236: the API-key check refused browsers' ``OPTIONS`` preflights (which
    never carry credentials, by the Fetch standard), so no browser could call the API. Expected
    (SGLang lets ``OPTIONS`` through): the preflight of ``POST /pause_generation`` with an
    ``Authorization`` header answers 200 allowing that origin, method and header, and the
    preflight itself pauses nothing (``/ready`` stays 200)."""
    client, tm = admin
    assert _sglang_allows("OPTIONS", "/pause_generation", None)
    r = client.options(
        "/pause_generation",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] in (ORIGIN, "*")
    assert "POST" in [m.strip() for m in r.headers["access-control-allow-methods"].split(",")]
    allowed_headers = [h.strip().lower() for h in r.headers["access-control-allow-headers"].split(",")]
    assert "authorization" in allowed_headers
    assert tm.is_pause is False
    assert client.get("/ready").status_code == 200


def test_django_cors_headers_36_credentialed_response_names_the_origin(admin: tuple[Any, Any]) -> None:
    """adamchainz/django-cors-headers#36: with every origin allowed and credentials on, the server
    answered ``Access-Control-Allow-Origin: *``, which browsers refuse for a credentialed request
    ("A wildcard '*' cannot be used ... when the credentials flag is true"). Expected (Fetch
    standard): a request with a cookie gets its own origin back with ``...-Allow-Credentials:
    true`` and ``Vary: Origin`` (the answer differs per origin, so caches must key on it), on a
    200 and on the key check's 401 alike."""
    client, _ = admin
    for headers, status in ((AUTH, 200), ({}, 401)):
        r = client.get("/v1/models", headers={**headers, "Origin": ORIGIN, "Cookie": "session=abc"})
        assert r.status_code == status, r.text
        assert r.headers["access-control-allow-origin"] == ORIGIN
        assert r.headers["access-control-allow-credentials"] == "true"
        assert "origin" in [v.strip().lower() for v in r.headers["vary"].split(",")]


# --------------------------------------------------------------------------- control routes


@pytest.mark.parametrize(
    "body",
    [{}, {"model_path": 3}, {"model_path": "/nonexistent/r26/checkpoint"}, {"load_format": "auto"}],
    ids=["empty", "not-a-string", "missing-dir", "no-model-path"],
)
def test_tokenspeed_1479_bad_weight_update_is_a_400_and_the_server_keeps_serving(
    admin: tuple[Any, Any], body: dict[str, Any]
) -> None:
    """lightseekorg/tokenspeed#1479: a ``/update_weights_from_disk`` the engine could not take
    answered 500 and killed the scheduler, so every later request got 503. Expected (SGLang's
    answer shape ``{"success", "message", "num_paused_requests"}``): a body without a usable
    ``model_path`` is a 400 with ``success: false`` whose message names ``model_path``, and the
    server still serves afterwards (``/health`` and ``/get_model_info`` 200, not paused)."""
    client, tm = admin
    r = client.post("/update_weights_from_disk", json=body, headers=AUTH)
    assert r.status_code == 400, r.text
    out = r.json()
    assert out["success"] is False and "model_path" in out["message"]
    assert out["num_paused_requests"] == 0
    assert client.get("/health").status_code == 200
    assert client.get("/get_model_info", headers=AUTH).status_code == 200
    assert tm.is_pause is False


def test_sglang_30673_a_pause_mode_that_does_not_exist_is_refused(admin: tuple[Any, Any]) -> None:
    """sgl-project/sglang#30673: ``pause_generation`` was called with an ``abort`` mode the
    scheduler did not have. Expected: the modes are exactly SGLang's
    (``PauseGenerationReqInput.mode``'s literal values); any other is a 400 that names
    ``mode``, lists the real ones and pauses nothing (``/ready`` stays 200). (A real pause is
    not made here: ``/continue_generation`` waits for the scheduler, which never answers in this
    app.)"""
    client, tm = admin
    modes = sorted(_sglang_pause_modes())
    assert modes == ["abort", "in_place", "retract"]
    for bad in ("Abort", "pause", "in-place", ""):
        r = client.post("/pause_generation", json={"mode": bad}, headers=AUTH)
        assert r.status_code == 400, (bad, r.text)
        assert "mode" in r.json()["error"]["message"]
        assert tm.is_pause is False and client.get("/ready").status_code == 200
    # the modes accepted are SGLang's, and the refusal lists each of them
    assert set(PAUSE_MODES) == set(modes)
    message = client.post("/pause_generation", json={"mode": "bogus"}, headers=AUTH).json()["error"][
        "message"
    ]
    assert all(m in message for m in modes), message

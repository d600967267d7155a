"""Every route of SGLang 0.5.23's HTTP app, called on a running sglang-v4 server.

The route list is SGLang's own: its ``srt/entrypoints/http_server.py`` (with the routers it
includes, ``v1_loads.py`` and ``elastic_ep.py``) read with ``ast`` from the installed ``sglang``
package (importing that module needs SGLang's GPU-side dependencies). For each path and method the
server either serves it (any answer but a 404 / 405) or answers a JSON 404 / 405 for a route it
lacks: FastAPI's ``{"detail": "Not Found"}`` on a native path (SGLang's own answer there), OpenAI's
error object (``NotFoundError``, as the ``openai`` client reads it) under ``/v1/`` and Anthropic's
``not_found_error`` under ``/v1/messages``; every route answered so must be listed, with its reason, in ``docs/SGLANG_ROUTES.md``. No answer may be a 5xx, an HTML page, a
non-JSON error, a hang (each call has a timeout) or a crash (``/health`` stays 200). Bodies are
chosen so that no call changes the shared server: the control routes get values they refuse.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import requests
from server_fixture import REPO

pytestmark = pytest.mark.timeout(240)

ROUTES_DOC = REPO / "docs" / "SGLANG_ROUTES.md"
#: SGLang's modules that declare routes, and the name of the app / router object in each.
SGLANG_ROUTE_MODULES = (("http_server.py", "app"), ("v1_loads.py", "router"), ("elastic_ep.py", "router"))
#: Bodies the routes that change the server refuse (a 400), so the sweep pauses, profiles and
#: reloads nothing; every other route gets ``{}``.
REFUSED_BODIES: dict[str, Any] = {
    "/pause_generation": {"mode": "not-a-mode"},
    "/start_profile": {"num_steps": 0},
    "/update_weights_from_disk": {},
    "/get_weights_by_name": {},
    "/configure_logging": {"log_level": "not-a-level"},
}
#: Values put in path parameters.
PATH_PARAMS = {"{model:path}": "default", "{response_id}": "resp_unknown", "{method}": "dump"}
#: FastAPI's answers for a path (404) or a method (405) the app has no route for (native paths).
NOT_SERVED = [(404, {"detail": "Not Found"}), (405, {"detail": "Method Not Allowed"})]
#: The error ``type`` of such an answer under ``/v1/``: OpenAI's, then Anthropic's (``/v1/messages``).
V1_NOT_SERVED_TYPES = {
    404: ("NotFoundError", "not_found_error"),
    405: ("MethodNotAllowedError", "invalid_request_error"),
}
#: Route paths served only with a flag (sglang-v4 and SGLang alike): out of this sweep.
FLAG_ROUTES = {"/metrics"}


def _sglang_entrypoints_dir() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("sglang is not installed: no SGLang route list to compare with")
    return Path(next(iter(spec.submodule_search_locations))) / "srt" / "entrypoints"


def _path_of(arg: ast.expr) -> str | None:
    """A decorator's path: a literal, or ``os.environ.get(NAME, DEFAULT)``'s default."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.Call) and len(arg.args) == 2 and isinstance(arg.args[1], ast.Constant):
        return str(arg.args[1].value)
    return None  # a route whose path is a variable (Ollama's optional root route)


def sglang_routes() -> list[tuple[str, str]]:
    """``(METHOD, path)`` of every route SGLang's app declares (``WEBSOCKET`` for a websocket)."""
    out: list[tuple[str, str]] = []
    for file, obj in SGLANG_ROUTE_MODULES:
        tree = ast.parse((_sglang_entrypoints_dir() / file).read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for d in node.decorator_list:
                if not (
                    isinstance(d, ast.Call)
                    and isinstance(d.func, ast.Attribute)
                    and isinstance(d.func.value, ast.Name)
                    and d.func.value.id == obj
                    and d.args
                ):
                    continue
                path = _path_of(d.args[0])
                kind = d.func.attr
                if path is None or kind == "exception_handler":
                    continue
                if kind == "api_route":
                    methods = [
                        e.value
                        for k in d.keywords
                        if k.arg == "methods" and isinstance(k.value, ast.List)
                        for e in k.value.elts
                        if isinstance(e, ast.Constant)
                    ]
                else:
                    methods = [kind.upper()]
                out += [(m, path) for m in methods if (m, path) not in out]
    return out


def documented_routes() -> set[tuple[str, str]]:
    """``(METHOD, path)`` of the list items ``- `GET|POST /path`: reason`` of the routes doc."""
    out = set()
    for methods, path in re.findall(r"^- `([A-Z|]+) (/\S*)`: \S", ROUTES_DOC.read_text(), re.M):
        out |= {(m, path) for m in methods.split("|")}
    return out


def _is_not_served(path: str, status: int, body: Any) -> bool:
    """Whether ``status`` / ``body`` is the answer for a route the server lacks (``NOT_SERVED``
    on a native path; under ``/v1/`` the family's error object with the 404 / 405 type)."""
    if not path.startswith("/v1/"):
        return (status, body) in NOT_SERVED
    if status not in V1_NOT_SERVED_TYPES or not isinstance(body, dict):
        return False
    openai_type, anthropic_type = V1_NOT_SERVED_TYPES[status]
    err = body.get("error")
    phrase = "Method Not Allowed" if status == 405 else "Not Found"  # the router's, then the route
    if not isinstance(err, dict) or not str(err.get("message")).startswith(phrase):
        return False  # a served route's own 404 (an unknown id, model...) names what it lacks
    if path.startswith("/v1/messages"):
        return body.get("type") == "error" and err.get("type") == anthropic_type
    return body.get("object") == "error" and err.get("type") == openai_type


def _is_json_error(body: Any) -> bool:
    """SGLang's error shapes: FastAPI's ``{"detail"}``, ``{"object": "error", "message", ...}``,
    the native ``{"error": {"message"}}`` / ``{"error": "..."}``, Anthropic's ``{"type": "error"}``."""
    if not isinstance(body, dict):
        return False
    if "detail" in body or (body.get("object") == "error" and isinstance(body.get("message"), str)):
        return True
    err = body.get("error")
    return isinstance(err, str) or (isinstance(err, dict) and isinstance(err.get("message"), str))


@pytest.fixture(scope="module")
def server(plain_fake_server):  # noqa: ANN201 - a server_fixture.ServerHandle
    """The session's fake-model server (conftest ``plain_fake_server``)."""
    return plain_fake_server


def test_sglang_route_list_is_read() -> None:
    """The parse finds SGLang's well-known routes (a broken parse must not pass as "nothing to
    check")."""
    routes = set(sglang_routes())
    for r in [("POST", "/generate"), ("PUT", "/generate"), ("GET", "/flush_cache"), ("GET", "/v1/loads")]:
        assert r in routes, r
    assert ("POST", "/api/chat") in routes and ("WEBSOCKET", "/v1/realtime") in routes
    assert len(routes) > 80


def test_every_sglang_route_is_served_or_a_documented_json_404(server) -> None:
    undocumented, stale, bad = [], [], []
    documented = documented_routes()
    for method, path in sglang_routes():
        if path in FLAG_ROUTES:
            continue
        url = server.url + path
        for param, value in PATH_PARAMS.items():
            url = url.replace(param, value)
        # a websocket route is probed with a plain GET (no upgrade): a JSON 404 where not served
        http_method = "GET" if method == "WEBSOCKET" else method
        r = requests.request(http_method, url, json=REFUSED_BODIES.get(path, {}), timeout=30)
        ctype = r.headers.get("content-type") or ""
        what = (method, path, r.status_code, ctype, r.text[:200])
        if r.status_code >= 500 or "html" in ctype or (r.status_code >= 400 and "json" not in ctype):
            bad.append(what)
            continue
        if method == "HEAD":  # no body; not served: a 404 / 405 whose head says JSON
            unserved = r.status_code in (404, 405)
        else:
            body = r.json() if "json" in ctype else None  # a 200 may be empty or plain text, as SGLang's
            unserved = _is_not_served(path, r.status_code, body)
            if not unserved and r.status_code >= 400 and not _is_json_error(body):
                bad.append(what)
        if unserved and (method, path) not in documented:
            undocumented.append((method, path))
        if not unserved and (method, path) in documented:
            stale.append((method, path))
    assert not bad, bad
    assert not stale, f"routes served but listed as missing in {ROUTES_DOC.name}: {stale}"
    assert not undocumented, f"SGLang routes answered 404 but missing from {ROUTES_DOC.name}: {undocumented}"
    assert requests.get(server.url + "/health", timeout=30).status_code == 200


def test_documented_routes_are_sglang_routes() -> None:
    """Each route the doc lists as missing is one of SGLang's (no typo hides a real gap)."""
    stray = documented_routes() - set(sglang_routes())
    assert not stray, stray

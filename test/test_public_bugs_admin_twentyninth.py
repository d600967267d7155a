"""A twenty-ninth set of public bug reports, replayed against the server's administration surface
in-process (``admin_app_testutil``: ``create_app`` with ``--api-key``, ``--enable-metrics``, two
served names, a scheduler that never answers): CORS preflights on key-protected routes, ``HEAD``
on the probe and information routes, ``GET /v1/models/{model}`` for each served name, and the ``X-Request-Id`` a client sends or the server makes.
Each test names its report.

No fault was found by these reports; the tests guard the behaviour they ask for.

Oracles: the Fetch standard (a CORS preflight carries no credentials, so it must not need the
key; a cross-origin reader sees only the response headers named in
``Access-Control-Expose-Headers``), RFC 9110 (section 9.3.2: ``HEAD`` answers as ``GET`` would,
without content), the same route's own ``GET`` answer (a cold request beside the ``HEAD``), and
the ``openai`` client's own ``Model`` type and ``NotFoundError``, and the reports' stated behaviour
(a client's ``X-Request-Id`` is echoed; without one each answer gets a fresh id).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_app_testutil import ADMIN_KEY, ADMIN_NAMES, admin_app_client

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
ORIGIN = "http://browser.example"


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    with admin_app_client(Path(tmp_path_factory.mktemp("r29admin"))) as pair:
        yield pair


def _tokens(value: str | None) -> set[str]:
    """The lower-cased items of a comma-separated header value (``#field-name`` lists)."""
    return {x.strip().lower() for x in (value or "").split(",") if x.strip()}


# --------------------------------------------------------------------------- CORS
@pytest.mark.parametrize(
    ("path", "method"),
    [("/v1/chat/completions", "POST"), ("/generate", "POST"), ("/v1/models", "GET"), ("/v1/files", "POST")],
)
def test_karakeep_1679_a_preflight_needs_no_key(admin: tuple[Any, Any], path: str, method: str) -> None:
    """karakeep-app/karakeep#1679 (also jeremyben/json-server-auth#15): with an API key set, the
    browser's CORS preflight (``OPTIONS``, which by the Fetch standard never carries credentials)
    got 401, so the real request was never sent. Expected: a 2xx preflight without the key that
    allows the origin, the method and the ``Authorization`` header the real request will send."""
    client, _ = admin
    r = client.options(
        path,
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert 200 <= r.status_code < 300, r.text
    assert r.headers.get("access-control-allow-origin") in (ORIGIN, "*")
    allowed_methods = _tokens(r.headers.get("access-control-allow-methods"))
    assert method.lower() in allowed_methods or "*" in allowed_methods
    allowed_headers = _tokens(r.headers.get("access-control-allow-headers"))
    assert "authorization" in allowed_headers or "*" in allowed_headers


def test_cli2api_148_the_real_request_still_needs_the_key_and_its_401_is_readable(
    admin: tuple[Any, Any],
) -> None:
    """caigee-cmd/cli2api#148: answering preflights without the key must not open the routes;
    the real request without a key stays 401, and that 401 carries the CORS headers so the
    browser page can read the error (and its request id) instead of a network failure."""
    client, _ = admin
    r = client.post("/v1/chat/completions", headers={"Origin": ORIGIN}, json={})
    assert r.status_code == 401
    assert r.headers.get("access-control-allow-origin") in (ORIGIN, "*")
    assert "x-request-id" in _tokens(r.headers.get("access-control-expose-headers"))
    ok = client.get("/v1/models", headers={**AUTH, "Origin": ORIGIN})
    assert ok.status_code == 200 and ok.headers.get("access-control-allow-origin") in (ORIGIN, "*")


# --------------------------------------------------------------------------- HEAD probes
@pytest.mark.parametrize("path", ["/health", "/v1/models", "/get_model_info"])
def test_healthcheck_29_head_answers_as_get_without_a_body(admin: tuple[Any, Any], path: str) -> None:
    """vmware-archive/healthcheck#29 (also steemit/jussi#164, ArcadeData/arcadedb#8133,
    mozilla-it/ctms-api#165): ``curl --head`` / ``wget --spider`` probes got 405 from a health
    endpoint that answered ``GET``. Expected (RFC 9110 section 9.3.2): ``HEAD`` gives the status
    ``GET`` gives, with no content, on the probe and the read-only information routes."""
    client, _ = admin
    got = client.get(path, headers=AUTH)
    head = client.head(path, headers=AUTH)
    assert head.status_code == got.status_code == 200
    assert head.content == b""
    assert client.head(path).status_code == client.get(path).status_code  # the key check alike


def test_arcadedb_8133_head_keeps_the_not_ready_status(admin: tuple[Any, Any]) -> None:
    """ArcadeData/arcadedb#8133: the fix made ``HEAD /health`` answer as ``GET`` does, including
    the non-2xx status a server in trouble gives. Expected: while the backend has crashed both
    ``GET`` and ``HEAD /health`` say 503, and both say 200 again once it is back."""
    client, tm = admin
    before = tm.crashed
    tm.crashed = "the scheduler process exited with code -9"
    try:
        assert client.get("/health", headers=AUTH).status_code == 503
        assert client.head("/health", headers=AUTH).status_code == 503
    finally:
        tm.crashed = before
    assert client.head("/health", headers=AUTH).status_code == 200


# --------------------------------------------------------------------------- request ids
@pytest.mark.parametrize(("path", "headers", "status"), [("/health", AUTH, 200), ("/v1/models", {}, 401)])
def test_requestid_2_a_client_request_id_is_echoed(
    admin: tuple[Any, Any], path: str, headers: dict[str, str], status: int
) -> None:
    """gin-contrib/requestid#2: the response did not pass through the ``X-Request-ID`` the
    client sent, so a trace could not be followed across the hop. Expected: the answer --
    success or a 401 -- carries the client's value unchanged in ``X-Request-Id``."""
    client, _ = admin
    rid = "trace-7f3a.ok_1"
    r = client.get(path, headers={**headers, "X-Request-Id": rid})
    assert r.status_code == status
    assert r.headers.get("x-request-id") == rid


def test_request_id_5_an_id_is_made_when_none_is_sent(admin: tuple[Any, Any]) -> None:
    """remind101/request_id#5 (also adonisjs/http-server#96): responses carried no request id
    unless the client sent one. Expected: without an ``X-Request-Id`` every answer still has one,
    non-empty, and two requests never share it; a value that is not a header token (a space in
    it) is not echoed but replaced."""
    client, _ = admin
    ids = [client.get("/health", headers=AUTH).headers.get("x-request-id") for _ in range(3)]
    assert all(ids) and len(set(ids)) == 3
    r = client.get("/health", headers={**AUTH, "X-Request-Id": "a b"})
    assert r.headers.get("x-request-id") not in (None, "", "a b")


# --------------------------------------------------------------------------- /v1/models/{model}
def test_pollinations_13839_retrieve_each_served_model(admin: tuple[Any, Any]) -> None:
    """pollinations/pollinations#13839 (issue #13795 there): OpenAI clients call
    ``models.retrieve(id)`` (``GET /v1/models/{model}``), which the server lacked. Expected: each
    served name -- the alias too -- comes back as the ``openai`` client's ``Model`` with that id
    and the ``owned_by`` the list gives it; an unknown name, one with a slash included, is the
    client's ``NotFoundError`` (404), not a 405 or a 200."""
    import openai
    from openai_fake_tm import oai_client

    client, _ = admin
    oai = oai_client(client, key=ADMIN_KEY)
    listed = {m.id: m for m in oai.models.list()}
    assert set(listed) == set(ADMIN_NAMES)
    for name in ADMIN_NAMES:
        got = oai.models.retrieve(name)
        assert got.id == name and got.object == "model" and got.owned_by == listed[name].owned_by
    for missing in ("no-such-model", "org/no-such-model"):
        with pytest.raises(openai.NotFoundError):
            oai.models.retrieve(missing)

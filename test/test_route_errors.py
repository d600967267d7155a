"""Unknown paths and wrong methods answer in the error shape of their route family.

Found by hand: ``POST /v1/chat/complete`` (a typo) answered FastAPI's 404 ``{"detail": "Not
Found"}`` and ``GET /v1/chat/completions`` its 405 ``{"detail": "Method Not Allowed"}``, bodies
the ``openai`` client reads no message, type or code from, unlike every other error of an OpenAI
route. Now a path or method no route has is a 404 / 405 in OpenAI's error shape under ``/v1/``
(``Allow`` kept on a 405), in Anthropic's under ``/v1/messages*``; native paths keep FastAPI's
``{"detail"}`` body, which SGLang answers there too.

Oracles: the ``openai`` client's parsing of an error answer (``NotFoundError`` /
``APIStatusError`` and the ``body`` / ``code`` / ``type`` it reads from the nested ``error``), the
``anthropic`` client's (``NotFoundError`` and ``body["error"]["type"]``), and FastAPI's own answer
on an app without the handler for the native paths.

Fixtures: the app of ``http_server.create_app`` in-process (``admin_app_testutil``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from admin_app_testutil import ADMIN_KEY, admin_app_client
from fastapi import FastAPI
from fastapi.testclient import TestClient

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    with admin_app_client(Path(tmp_path_factory.mktemp("route_errors"))) as pair:
        yield pair


@pytest.fixture(scope="module")
def oai(admin: tuple[Any, Any]) -> openai.OpenAI:
    client, _ = admin
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key=ADMIN_KEY, http_client=client, max_retries=0
    )


@pytest.fixture(scope="module")
def anth(admin: tuple[Any, Any]) -> anthropic.Anthropic:
    client, _ = admin
    return anthropic.Anthropic(
        base_url="http://testserver", api_key=ADMIN_KEY, http_client=client, max_retries=0
    )


def _bare_fastapi_answer(method: str, path: str) -> tuple[int, Any, str | None]:
    """FastAPI's own answer (no handler installed) for ``method path`` on an app whose only route
    is ``/generate`` with the server's methods (``POST``, ``PUT``, as SGLang's)."""
    app = FastAPI()

    @app.api_route("/generate", methods=["POST", "PUT"])
    async def generate() -> dict[str, Any]:
        return {}

    r = TestClient(app).request(method, path)
    return r.status_code, r.json(), r.headers.get("allow")


def test_unknown_openai_path_is_an_openai_404(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as ei:
        oai.post("/chat/complete", body={"model": "fake-v4", "messages": []}, cast_to=object)
    err = ei.value
    assert err.status_code == 404 and err.code == "404" and err.type == "NotFoundError"
    assert "POST /v1/chat/complete" in err.message
    body = err.response.json()  # SGLang's flat fields carry the same values as the nested error
    assert body["object"] == "error" and body["param"] is None
    assert {k: body[k] for k in ("message", "type", "param", "code")} == body["error"]


def test_wrong_method_on_openai_route_is_an_openai_405_with_allow(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as ei:
        oai.get("/chat/completions", cast_to=object)
    err = ei.value
    assert err.status_code == 405 and err.code == "405" and err.type == "MethodNotAllowedError"
    assert "GET /v1/chat/completions" in err.message and "POST" in err.message
    assert err.response.headers["allow"] == "POST"
    assert err.response.json()["object"] == "error"


def test_unknown_messages_path_and_method_are_anthropic_errors(anth: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as ei:
        anth.post("/v1/messages/batches", body={}, cast_to=object)
    assert ei.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": ei.value.body["error"]["message"]},
    }
    assert "POST /v1/messages/batches" in ei.value.message
    with pytest.raises(anthropic.APIStatusError) as ei2:
        anth.get("/v1/messages/count_tokens", cast_to=object)
    assert ei2.value.status_code == 405 and ei2.value.response.headers["allow"] == "POST"
    assert ei2.value.body["type"] == "error" and ei2.value.body["error"]["type"] == "invalid_request_error"


def test_wrong_method_on_models_with_anthropic_version_is_anthropic(admin: tuple[Any, Any]) -> None:
    """``/v1/models`` asked by the ``anthropic`` SDK (``anthropic-version``) errs in its shape, as
    the admission middleware's errors there do; without the header, OpenAI's."""
    client, _ = admin
    r = client.post("/v1/models", headers={**AUTH, "anthropic-version": "2023-06-01"})
    assert r.status_code == 405 and r.json()["type"] == "error"
    r = client.post("/v1/models", headers=AUTH)
    assert r.status_code == 405 and r.json()["error"]["type"] == "MethodNotAllowedError"


@pytest.mark.parametrize(("method", "path"), [("POST", "/no_such_route"), ("GET", "/generate")])
def test_native_paths_keep_fastapis_answer(admin: tuple[Any, Any], method: str, path: str) -> None:
    """Outside ``/v1/`` the answer is FastAPI's own (SGLang's there: its handler does not see the
    router's exception), ``Allow`` included."""
    client, _ = admin
    r = client.request(method, path, headers=AUTH)
    assert (r.status_code, r.json(), r.headers.get("allow")) == _bare_fastapi_answer(method, path)


def test_root_path_prefix_keeps_the_shape() -> None:
    """Under ``--root-path`` the family is decided on the path without the prefix."""
    from sglang_v4.entrypoints.route_errors import install_route_error_handler

    app = FastAPI()
    install_route_error_handler(app)
    tc = TestClient(app, root_path="/my-model")
    r = tc.post("/my-model/v1/nope")
    assert r.status_code == 404 and r.json()["error"]["type"] == "NotFoundError"
    assert tc.post("/my-model/v1/messages/nope").json()["error"]["type"] == "not_found_error"
    assert tc.post("/my-model/nope").json() == {"detail": "Not Found"}

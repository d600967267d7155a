"""``GET /v1/models`` and ``GET /v1/models/{id}`` in Anthropic's shape for the ``anthropic`` SDK
(a request carrying ``anthropic-version``) and in OpenAI's shape otherwise, on an in-process app of
the OpenAI and Anthropic routers over ``fake_prompt_tm.PromptTM``.

Oracles: the ``anthropic`` client's own parsers (``models.list()`` -> ``SyncPage[ModelInfo]``,
``models.retrieve()`` -> ``ModelInfo``, its ``NotFoundError`` / ``AuthenticationError`` raised from
Anthropic's error body) and the ``openai`` client's ``models.list()`` on the same server.
"""

from __future__ import annotations

import anthropic
import openai
import pytest
from anthropic.types import ModelInfo
from anthropic_testutil import KEY, make_clients
from fake_prompt_tm import MODEL, PromptTM
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)


def test_anthropic_sdk_gets_anthropic_model_shapes(tok: PreTrainedTokenizerFast) -> None:
    """The SDK's ``models.list()`` / ``models.retrieve()`` parse Anthropic's shapes (``type``
    "model", ``display_name``, an RFC 3339 ``created_at``; ``has_more`` / ``first_id`` /
    ``last_id``); an unknown model is the SDK's ``NotFoundError``; a wrong key its
    ``AuthenticationError``; the OpenAI client on the same server still gets OpenAI's list."""
    tm = PromptTM(tok)
    client, oa, tc = make_clients(tm, api_key=KEY)
    page = client.models.list()
    (info,) = page.data
    assert isinstance(info, ModelInfo) and info.type == "model" and info.id == MODEL
    assert info.display_name == MODEL and info.created_at.year == 1970 and info.lifecycle == "active"
    assert info.max_input_tokens == tm.context_len - 1
    assert page.has_more is False and page.first_id == page.last_id == MODEL
    raw = tc.get("/v1/models", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"}).json()
    assert set(raw) == {"data", "has_more", "first_id", "last_id"} and "object" not in raw
    got = client.models.retrieve(MODEL)
    assert isinstance(got, ModelInfo) and got.id == MODEL and got.type == "model"
    assert client.models.retrieve("default").id == MODEL  # an accepted alias: the listed id
    assert client.models.list(after_id=MODEL).data == []
    assert client.models.list(limit=1).data[0].id == MODEL
    bad = tc.get(
        "/v1/models", params={"limit": 0}, headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    )
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError) as ei:
        client.models.retrieve("no-such-model")
    assert ei.value.body["type"] == "error" and ei.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(
            base_url="http://testserver", api_key="bad", http_client=tc, max_retries=0
        ).models.list()
    # without anthropic-version: OpenAI's shapes, as before
    assert [m.id for m in oa.models.list().data] == [MODEL]
    body = tc.get("/v1/models", headers={"authorization": f"Bearer {KEY}"}).json()
    assert body["object"] == "list" and body["data"][0]["object"] == "model"
    assert (
        tc.get(f"/v1/models/{MODEL}", headers={"authorization": f"Bearer {KEY}"}).json()["object"] == "model"
    )
    with pytest.raises(openai.NotFoundError):
        oa.models.retrieve("no-such-model")
    denied = tc.get("/v1/models")
    assert denied.status_code == 401 and denied.json()["type"] != "error"  # not Anthropic's body


def test_admission_401_on_models_is_anthropic_shaped_for_the_sdk() -> None:
    """The API-key check of the admission middleware answers ``/v1/models`` in Anthropic's error
    body when the request carries ``anthropic-version`` (the SDK raises its
    ``AuthenticationError`` with ``error.type`` ``authentication_error``), in OpenAI's otherwise."""
    from sglang_v4.entrypoints.admission import AdmissionLimits, AdmissionMiddleware
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    async def ok(request: object) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/v1/models", ok), Route("/v1/models/{m}", ok)])
    limits = AdmissionLimits(max_body_bytes=1 << 20, read_timeout_s=10.0, keep_alive_s=5.0)
    tc = TestClient(AdmissionMiddleware(app, KEY, limits, lambda: False))  # type: ignore[arg-type]
    client = anthropic.Anthropic(base_url="http://testserver", api_key="bad", http_client=tc, max_retries=0)
    for call in (client.models.list, lambda: client.models.retrieve(MODEL)):
        with pytest.raises(anthropic.AuthenticationError) as ei:
            call()
        assert ei.value.body["type"] == "error" and ei.value.body["error"]["type"] == "authentication_error"
    plain = tc.get("/v1/models")
    assert plain.status_code == 401 and plain.json()["object"] == "error"

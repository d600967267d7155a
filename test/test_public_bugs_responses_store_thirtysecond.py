"""A thirty-second set of public reports on the stateful parts of ``/v1/responses``: the store
(``store`` true / false, streamed or not), ``GET`` / ``DELETE /v1/responses/{id}``,
``previous_response_id`` chains (long ones, one through an ``incomplete`` response, one through a
stream that failed), ``/v1/responses/{id}/input_items`` paging and the store's eviction bound.

Fixture: an in-process app of the OpenAI router over a fake engine
(:class:`~fake_prompt_tm.PromptTM`, a reply that is a function of the prompt ids, every request
recorded), driven through the ``openai`` client. Oracles: the ``openai`` client's own types and
paginator, the stream's own terminal event, a cold run (the same conversation sent whole with
``store: false``: the prompt ids the engine receives must be the same) and OpenAI's API reference
(``store``, ``previous_response_id``, the input-items list).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, get_args

import openai
import pytest
from fake_prompt_tm import MODEL, PromptTM
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openai.types.responses import Response as OpenAIResponse
from openai.types.responses import ResponseIncludable
from responses_testutil import make_client, sse
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.entrypoints.openai.responses_store import ResponseStore
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)


def _prompt(tm: PromptTM) -> list[int]:
    """The prompt ids of the engine's latest request."""
    return list(tm.received[-1].input_ids)


def _stream(tc: TestClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of ``body`` streamed."""
    r = tc.post("/v1/responses", json={"model": MODEL, **body, "stream": True})
    assert r.status_code == 200, r.text
    return sse(r.text)


def _turns(client: openai.OpenAI, first_id: str) -> list[dict[str, Any]]:
    """The whole conversation a stored response ended, as explicit input items (oracle of a cold
    run): its input items, oldest first, then its own output, as the client's types dump them."""
    items = [
        i.model_dump(mode="json", exclude_none=True)
        for i in client.responses.input_items.list(first_id, order="asc")
    ]
    out = [o.model_dump(mode="json", exclude_none=True) for o in client.responses.retrieve(first_id).output]
    return items + out


def test_streamed_stored_response_is_retrievable_as_its_completed_event(tok: PreTrainedTokenizerFast) -> None:
    """EricLBuehler/mistral.rs#1946: a streamed response with ``store`` true (the default) was
    never put in the store, so ``GET /v1/responses/{id}`` answered 404. Expected: the stream's
    ``response.completed`` response is what ``GET`` returns, field for field (and it parses as the
    client's ``Response``); with ``store: false`` the same stream leaves nothing to ``GET``."""
    client, tc = make_client(PromptTM(tok))
    events = _stream(tc, {"input": "Name a colour."})
    done = events[-1]
    assert done["type"] == "response.completed"
    got = tc.get(f"/v1/responses/{done['response']['id']}")
    assert got.status_code == 200 and got.json() == done["response"]
    assert client.responses.retrieve(done["response"]["id"]) == OpenAIResponse.model_validate(
        done["response"]
    )
    unstored = _stream(tc, {"input": "Name a colour.", "store": False})[-1]["response"]["id"]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored)


def test_streamed_response_id_is_one_id_and_continues_like_a_cold_run(tok: PreTrainedTokenizerFast) -> None:
    """stdapi-ai/stdapi.ai#87: a streamed response carried an id of its own making, unlike the one
    the store kept, so using it for ``GET`` or ``previous_response_id`` always 404ed. Expected:
    ``response.created``, ``response.in_progress`` and ``response.completed`` name one id, and
    that id continues the conversation: the engine gets the same prompt as a cold run of the whole
    conversation sent explicitly with ``store: false``."""
    tm = PromptTM(tok)
    client, tc = make_client(tm)
    events = _stream(tc, {"input": "Pick a number."})
    ids = {e["response"]["id"] for e in events if "response" in e}
    assert len(ids) == 1 and next(iter(ids)).startswith("resp_")
    (rid,) = ids
    cont = client.responses.create(model=MODEL, input="Double it.", previous_response_id=rid)
    continued = _prompt(tm)
    whole = [*_turns(client, rid), {"role": "user", "content": "Double it."}]
    cold = client.responses.create(model=MODEL, input=whole, store=False)
    assert _prompt(tm) == continued and cont.output_text == cold.output_text
    assert cont.previous_response_id == rid


def test_non_streamed_response_is_retrievable_unchanged(tok: PreTrainedTokenizerFast) -> None:
    """SamSaffron/term-llm#460: a non-streamed reply's id was only noted in a side table, so
    fetching it by id 404ed. Expected: ``GET`` returns exactly the body ``POST`` returned (the
    same ``created_at``, output item ids, usage), and ``DELETE`` then makes it a 404."""
    client, tc = make_client(PromptTM(tok))
    r = tc.post("/v1/responses", json={"model": MODEL, "input": "Hello"})
    assert r.status_code == 200
    body = r.json()
    got = tc.get(f"/v1/responses/{body['id']}")
    assert got.status_code == 200 and got.json() == body
    deleted = client.responses.delete(body["id"])
    assert deleted is None  # the client parses the deletion body without error
    assert tc.get(f"/v1/responses/{body['id']}").status_code == 404


def test_streamed_continuation_names_its_previous_response(tok: PreTrainedTokenizerFast) -> None:
    """masaic-ai-platform/AgC#49: a continued response did not carry ``previous_response_id``.
    OpenAI's ``Response`` has the field; expected: a streamed continuation names its parent in
    ``response.created`` and ``response.completed``, and the stored copy (``GET``) names it too."""
    client, tc = make_client(PromptTM(tok))
    first = client.responses.create(model=MODEL, input="Say hi.")
    events = _stream(tc, {"input": "Again.", "previous_response_id": first.id})
    named = {e["type"]: e["response"]["previous_response_id"] for e in events if "response" in e}
    assert named["response.created"] == named["response.completed"] == first.id
    assert client.responses.retrieve(events[-1]["response"]["id"]).previous_response_id == first.id


def test_long_chain_lists_every_item_once_and_prompts_like_a_cold_run(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#2299: the input items of earlier responses were not saved with a new response,
    so a client walking a long chain (Codex) lost them. Expected, over a chain of seven turns: the
    last response's input items are every turn's input and output in order, each once, and the
    client's paginator (``limit`` 3, ``after`` cursors, both orders) walks exactly that list;
    the last turn's prompt equals a cold run of the whole conversation."""
    tm = PromptTM(tok)
    client, _ = make_client(tm)
    prev = None
    outputs: list[str] = []
    for k in range(7):
        r = client.responses.create(model=MODEL, input=f"Turn {k}.", previous_response_id=prev)
        outputs.append(r.output[-1].id)
        prev = r.id
    continued = _prompt(tm)
    asc = list(client.responses.input_items.list(prev, order="asc", limit=3))
    desc = list(client.responses.input_items.list(prev, limit=3))
    assert [i.id for i in desc] == [i.id for i in asc][::-1]
    assert len({i.id for i in asc}) == len(asc) == 13  # 7 inputs + 6 earlier outputs
    users = [i.content[0].text for i in asc if i.type == "message" and i.role == "user"]
    assert users == [f"Turn {k}." for k in range(7)]
    assert [i.id for i in asc if i.type == "message" and i.role == "assistant"] == outputs[:-1]
    whole = [i.model_dump(mode="json", exclude_none=True) for i in asc]
    client.responses.create(model=MODEL, input=whole, store=False)
    assert _prompt(tm) == continued


def test_incomplete_parent_is_stored_and_continued_with_its_partial_text(
    tok: PreTrainedTokenizerFast,
) -> None:
    """NousResearch/hermes-agent#37367: a response cut by ``max_output_tokens`` (``status``
    ``incomplete``, reason ``max_output_tokens``) is continued by chaining onto it. Expected: the
    stored copy keeps that status and reason, and the continuation's prompt is a cold run's of the
    conversation holding the partial text."""
    tm = PromptTM(tok)
    client, _ = make_client(tm)
    cut = client.responses.create(model=MODEL, input="Tell a long story.", max_output_tokens=3)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    stored = client.responses.retrieve(cut.id)
    assert stored.status == "incomplete" and stored.incomplete_details.reason == "max_output_tokens"
    client.responses.create(model=MODEL, input="Go on.", previous_response_id=cut.id)
    continued = _prompt(tm)
    whole = [*_turns(client, cut.id), {"role": "user", "content": "Go on."}]
    client.responses.create(model=MODEL, input=whole, store=False)
    assert _prompt(tm) == continued


def test_a_failed_stream_is_not_continued_silently(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#57999 (a response's terminal state misread by a later call on its id);
    here: a stream that failed (engine abort after two tokens: ``response.failed``) must not
    become a parent whose continuation runs as if it had an answer. Expected: chaining onto the
    failed response's id is a 4xx naming ``previous_response_id`` (OpenAI's error shape) and the
    engine gets no request."""
    tm = PromptTM(tok, abort_after=2)
    client, tc = make_client(tm)
    events = _stream(tc, {"input": "Hello"})
    assert events[-1]["type"] == "response.failed"
    rid = events[-1]["response"]["id"]
    before = len(tm.received)
    r = tc.post("/v1/responses", json={"model": MODEL, "input": "And?", "previous_response_id": rid})
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["error"]["param"] == "previous_response_id"
    assert len(tm.received) == before


def test_evicted_response_is_gone_for_every_stateful_route(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#48275: the Responses store grew without bound. Ours is an LRU bounded in
    entries and bytes; expected, with room for two responses: after a third, the least recently
    used one is gone for ``GET``, ``input_items``, ``DELETE`` and ``previous_response_id`` (404s
    naming the id's field, in OpenAI's error shape), while the two kept still chain."""
    tm = PromptTM(tok)
    sa = SimpleNamespace(served_model_name=MODEL, model_path=None, api_key=None, enable_cache_report=False)
    router = create_openai_router(tm, sa)
    router.serving._responses_store = ResponseStore(max_entries=2)
    app = FastAPI()
    app.include_router(router)
    tc = TestClient(app)
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=tc, max_retries=0)
    a, b, c = (client.responses.create(model=MODEL, input=f"Q{k}") for k in range(3))
    for call in (
        lambda: client.responses.retrieve(a.id),
        lambda: client.responses.input_items.list(a.id),
        lambda: client.responses.delete(a.id),
    ):
        with pytest.raises(openai.NotFoundError) as ei:
            call()
        assert ei.value.body["param"] == "response_id"
    with pytest.raises(openai.NotFoundError) as ei:
        client.responses.create(model=MODEL, input="More.", previous_response_id=a.id)
    assert ei.value.body["param"] == "previous_response_id"
    for kept in (b, c):
        assert client.responses.retrieve(kept.id).id == kept.id
    assert client.responses.create(model=MODEL, input="More.", previous_response_id=c.id, store=False)


def test_include_of_stored_response_reads_is_checked_like_the_create(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#5345: ``/responses/{id}/input_items`` accepted ``include`` and then failed late
    (or ignored it) instead of answering an unsupported value up front. Expected: every value of
    the client's own ``ResponseIncludable`` is accepted by ``GET /v1/responses/{id}`` and by its
    ``input_items`` (sent by the client, ``include[]=...``); a value outside it is a 400 naming
    ``include`` on both, in either spelling, as ``POST /v1/responses`` answers it."""
    client, tc = make_client(PromptTM(tok))
    r = client.responses.create(model=MODEL, input="Hello")
    values = list(get_args(ResponseIncludable))
    assert client.responses.retrieve(r.id, include=values).id == r.id
    assert [i.id for i in client.responses.input_items.list(r.id, include=values)] == [
        i.id for i in client.responses.input_items.list(r.id)
    ]
    post = tc.post("/v1/responses", json={"model": MODEL, "input": "Hi", "include": ["bogus.field"]})
    assert post.status_code == 400 and post.json()["error"]["param"].startswith("include")
    for path in (f"/v1/responses/{r.id}", f"/v1/responses/{r.id}/input_items"):
        for key in ("include", "include[]"):
            bad = tc.get(path, params={key: ["message.output_text.logprobs", "bogus.field"]})
            assert bad.status_code == 400, (path, key, bad.text)
            assert (
                bad.json()["error"]["param"] == "include" and "bogus.field" in bad.json()["error"]["message"]
            )
    with pytest.raises(openai.BadRequestError):
        client.responses.input_items.list(r.id, include=["bogus.field"])  # type: ignore[list-item]

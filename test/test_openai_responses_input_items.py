"""``GET /v1/responses/{id}/input_items`` (OpenAI's "List input items"): read through the ``openai``
client's ``client.responses.input_items.list`` (its ``SyncCursorPage[ResponseItem]`` parser and its
``after`` pagination) on an in-process app of the OpenAI router over ``fake_prompt_tm.PromptTM``.

Oracles: the items the test sent (their text and order), OpenAI's documented defaults (``order``
``desc``, ``limit`` 20, 1..100), the client's own types and cursor, and OpenAI's list shape for a
response that continues another (openai/openai-openapi#491: the previous turn's items are listed
too).
"""

from __future__ import annotations

import openai
import pytest
from fake_prompt_tm import CALL, MODEL, PromptTM
from openai.types.responses import ResponseItem
from openai.types.responses.response_item_list import ResponseItemList
from pydantic import TypeAdapter
from responses_testutil import WEATHER, make_client
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)


def _texts(items: list[ResponseItem]) -> list[str]:
    return [i.content[0].text if i.type == "message" else i.type for i in items]


def test_input_items_listed_paged_and_404(tok: PreTrainedTokenizerFast) -> None:
    """The items of a response, newest first by default, ``asc`` oldest first; ``limit`` pages
    with ``has_more`` / ``first_id`` / ``last_id``, and the client's auto-pagination (``after``)
    walks them all; ids the client sent are kept; a string input is one ``input_text`` user
    message; a bad ``limit`` / ``order`` / ``after`` is a 400 naming it; an unknown or deleted
    response is a 404 in OpenAI's error shape."""
    client, tc = make_client(PromptTM(tok))
    sent = [
        {"role": "developer", "content": "Be brief."},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Q1"}],
            "id": "msg_mine",
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A1"}]},
        {"role": "user", "content": "Q2"},
    ]
    r = client.responses.create(model=MODEL, input=sent, temperature=0)
    want = ["Be brief.", "Q1", "A1", "Q2"]
    desc = client.responses.input_items.list(r.id)
    assert _texts(desc.data) == want[::-1] and desc.has_more is False
    asc = client.responses.input_items.list(r.id, order="asc")
    assert _texts(asc.data) == want
    assert [i.role for i in asc.data] == ["developer", "user", "assistant", "user"]
    assert asc.data[1].id == "msg_mine" and len({i.id for i in asc.data}) == 4
    assert {i.status for i in asc.data} == {"completed"}
    assert [i.content[0].type for i in asc.data] == ["input_text", "input_text", "output_text", "input_text"]
    page = tc.get(f"/v1/responses/{r.id}/input_items", params={"order": "asc", "limit": 3}).json()
    ResponseItemList.model_validate(page)
    assert page["object"] == "list" and page["has_more"] is True
    assert (page["first_id"], page["last_id"]) == (asc.data[0].id, asc.data[2].id)
    first = client.responses.input_items.list(r.id, order="asc", limit=3)
    assert _texts(list(first)) == want  # the client follows `after` = last_id to the second page
    nxt = client.responses.input_items.list(r.id, order="asc", limit=3, after=first.data[-1].id)
    assert _texts(nxt.data) == ["Q2"] and nxt.has_more is False
    for params, field in (({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"order": "up"}, "order"),
                          ({"after": "msg_nope"}, "after")):  # fmt: skip
        bad = tc.get(f"/v1/responses/{r.id}/input_items", params=params)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == field, params
    with pytest.raises(openai.NotFoundError) as ei:
        client.responses.input_items.list("resp_unknown")
    assert set(ei.value.body) >= {"message", "type", "param", "code"}  # OpenAI's error object
    assert ei.value.body["param"] == "response_id" and "resp_unknown" in ei.value.message
    s = client.responses.create(model=MODEL, input="Hello there")
    (only,) = client.responses.input_items.list(s.id).data
    assert (only.type, only.role, only.content[0].type, only.content[0].text) == (
        "message",
        "user",
        "input_text",
        "Hello there",
    )
    client.responses.delete(s.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(s.id)


def test_input_items_of_a_continued_response_include_the_previous_turn(tok: PreTrainedTokenizerFast) -> None:
    """With ``previous_response_id`` the list holds the previous response's input items and
    output items, then this request's input (openai/openai-openapi#491): here a tool round trip,
    whose ``function_call`` and ``function_call_output`` parse as the client's item types."""
    client, _ = make_client(PromptTM(tok, reply=CALL))
    r1 = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER], temperature=0)
    (call,) = [o for o in r1.output if o.type == "function_call"]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    r2 = client.responses.create(model=MODEL, previous_response_id=r1.id, input=[result], tools=[WEATHER])
    items = client.responses.input_items.list(r2.id, order="asc").data
    want = ["message", *(o.type for o in r1.output), "function_call_output"]
    assert [i.type for i in items] == want
    assert items[0].content[0].text == "Weather in Paris?"
    assert [i.id for i in items[1:-1]] == [o.id for o in r1.output]
    got_call = next(i for i in items if i.type == "function_call")
    assert (got_call.call_id, got_call.name, got_call.arguments) == (call.call_id, call.name, call.arguments)
    assert (items[-1].call_id, items[-1].output, items[-1].status) == (call.call_id, "sunny", "completed")
    adapter = TypeAdapter(ResponseItem)
    for i in items:
        adapter.validate_python(i.model_dump(mode="json", exclude_unset=True))
    assert len(client.responses.input_items.list(r1.id).data) == 1

"""A thirty-second set of public reports on ``/v1/responses``, replayed on an in-process app of the
OpenAI router over a fake engine (:class:`~fake_prompt_tm.PromptTM`, the model's text written by
hand: reasoning, then text, then a DSML ``get_weather`` call): the stream's sequence numbers and
output indexes, the ids of a function call's item through its lifecycle, the client's stream
accumulator, the usage details, and ``max_output_tokens`` cuts.

No fault was found by these reports; they stand as regression guards of the behaviour each asked
for. Oracles: the ``openai`` client's own types (required fields), its stream helper
``client.responses.stream`` (``snapshot`` accumulation), ``json.loads``, the text written by hand,
the request the fake engine recorded, and OpenAI's API reference.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM
from openai.types.responses import Response as OpenAIResponse
from openai.types.responses import ResponseUsage
from responses_testutil import EVENTS, WEATHER, final_response, make_client, post
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

THINK_CALL = "Need the weather.</think>Let me check." + CALL
THINKING = {"reasoning": {"effort": "low"}}


def _stream(tok: PreTrainedTokenizerFast) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The non-streamed body and the stream events of a reasoning + text + call reply."""
    _, tc = make_client(PromptTM(tok, reply=THINK_CALL))
    return post(tc, {"input": "Weather in Paris?", "tools": [WEATHER], **THINKING})


def test_every_stream_event_carries_its_required_sequence_number(tok: PreTrainedTokenizerFast) -> None:
    """onyx-dot-app/onyx#13624: a gateway's Responses events (``response.created`` included) had
    no ``sequence_number``, which the ``openai`` client's event types require. Expected: every
    event of a reasoning + text + call stream has an integer ``sequence_number`` (required by its
    own client type, read off ``model_fields``), numbered 0, 1, 2, ... in the order sent."""
    _, events = _stream(tok)
    kinds = {e["type"] for e in events}
    assert {
        "response.created",
        "response.reasoning_text.delta",
        "response.function_call_arguments.done",
    } <= kinds
    for i, ev in enumerate(events):
        model = type(EVENTS.validate_python(ev))
        assert model.model_fields["sequence_number"].is_required(), model
        assert isinstance(ev["sequence_number"], int) and ev["sequence_number"] == i


def test_stream_output_index_is_the_items_place_in_the_final_output(tok: PreTrainedTokenizerFast) -> None:
    """mrwogu/factory-droid-openai#148: reasoning that arrived late took a later ``output_index``
    in the stream than its place in the terminal response's ``output``. OpenAI defines
    ``output_index`` as the item's index in ``response.output``. Expected: every item added at
    ``output_index`` k is ``response.completed``'s ``output[k]`` (same id and type), in the order
    reasoning, message, function call, and every event naming an index names an added item."""
    _, events = _stream(tok)
    final = events[-1]["response"]["output"]
    added = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.added"}
    assert sorted(added) == list(range(len(final)))
    assert [o["type"] for o in final] == ["reasoning", "message", "function_call"]
    for k, item in added.items():
        assert (item["id"], item["type"]) == (final[k]["id"], final[k]["type"])
    for ev in events:
        if "output_index" in ev:
            assert ev["output_index"] in added
            if "item_id" in ev:
                assert ev["item_id"] == added[ev["output_index"]]["id"]


def test_function_call_item_keeps_one_id_from_added_to_the_response(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#44608: a streamed ``function_call`` item was done with ``id: null`` (the id
    went into an extra ``item_id`` field). openai/openai-dotnet#424: the function's name is
    carried by the item events, not the argument deltas. Expected: the call's item has one non-empty
    id on ``output_item.added``, every argument event's ``item_id``, ``output_item.done`` and the
    completed output; its name is ``get_weather`` on added and done, and no ``item_id`` key sits
    inside the item (the client's ``ResponseFunctionToolCall`` fields only)."""
    _, events = _stream(tok)
    ids, names = set(), []
    for ev in events:
        if ev["type"] in ("response.output_item.added", "response.output_item.done"):
            if ev["item"]["type"] == "function_call":
                assert "item_id" not in ev["item"] and "output_index" not in ev["item"]
                ids.add(ev["item"]["id"])
                names.append(ev["item"]["name"])
        elif ev["type"].startswith("response.function_call_arguments."):
            ids.add(ev["item_id"])
    final_call = events[-1]["response"]["output"][-1]
    ids.add(final_call["id"])
    assert len(ids) == 1 and all(ids), ids
    assert names == ["get_weather", "get_weather"]


def test_client_stream_helper_accumulates_the_call_arguments(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-python#2731: the client's stream helper is where a call's arguments are
    accumulated (``snapshot`` on each ``response.function_call_arguments.delta``). Expected, read
    by ``client.responses.stream``: the last delta's snapshot equals the ``done`` event's
    arguments, which ``json.loads`` to the call written by hand; the final response's call equals
    the non-streamed one's name and arguments."""
    client, _ = make_client(PromptTM(tok, reply=THINK_CALL))
    with client.responses.stream(model=MODEL, input="Weather in Paris?", tools=[WEATHER], **THINKING) as s:
        events = list(s)
        final = s.get_final_response()
    snaps = [e.snapshot for e in events if e.type == "response.function_call_arguments.delta"]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert snaps and len(done) == 1 and snaps[-1] == done[0].arguments
    assert json.loads(done[0].arguments) == ARGS
    plain = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER], **THINKING)
    calls = [(o.name, json.loads(o.arguments)) for o in final.output if o.type == "function_call"]
    assert calls == [(o.name, json.loads(o.arguments)) for o in plain.output if o.type == "function_call"]
    assert calls == [("get_weather", ARGS)]


def test_reasoning_deltas_follow_their_items_added_event(tok: PreTrainedTokenizerFast) -> None:
    """maximhq/bifrost#5170: reasoning deltas were sent with no ``output_item.added`` before them
    and a hard-coded ``output_index`` 0. Expected: the reasoning item is added (type
    ``reasoning``) before its first delta; every reasoning delta names that item's
    ``output_index`` and id; the deltas build the reasoning written by hand."""
    _, events = _stream(tok)
    kinds = [e["type"] for e in events]
    first = kinds.index("response.reasoning_text.delta")
    added = [e for e in events[:first] if e["type"] == "response.output_item.added"]
    assert [a["item"]["type"] for a in added] == ["reasoning"]
    deltas = [e for e in events if e["type"] == "response.reasoning_text.delta"]
    assert {(d["output_index"], d["item_id"]) for d in deltas} == {
        (added[0]["output_index"], added[0]["item"]["id"])
    }
    assert "".join(d["delta"] for d in deltas) == "Need the weather."


def test_message_text_is_not_duplicated_by_its_done_events(tok: PreTrainedTokenizerFast) -> None:
    """docker/docker-agent#2976: a client that read both the deltas and ``output_item.done``'s
    snapshot showed the answer twice when the events disagreed. Expected: the message's
    ``content_part.added`` part is an empty ``output_text``; the deltas, ``output_text.done``,
    ``content_part.done`` and ``output_item.done`` all give "Let me check." once; the client's
    stream helper ``output_text`` equals the non-streamed one."""
    body, events = _stream(tok)
    msg = [e for e in events if e.get("output_index") == 1]
    part_added = next(e for e in msg if e["type"] == "response.content_part.added")
    assert part_added["part"]["type"] == "output_text" and part_added["part"]["text"] == ""
    deltas = "".join(e["delta"] for e in msg if e["type"] == "response.output_text.delta")
    text_done = next(e for e in msg if e["type"] == "response.output_text.done")["text"]
    part_done = next(e for e in msg if e["type"] == "response.content_part.done")["part"]["text"]
    item_done = next(e for e in msg if e["type"] == "response.output_item.done")["item"]
    assert deltas == text_done == part_done == item_done["content"][0]["text"] == "Let me check."
    assert len(item_done["content"]) == 1
    assert OpenAIResponse.model_validate(body).output_text == "Let me check."


def test_usage_details_are_present_and_add_up_everywhere(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#4690: ``input_tokens_details`` / ``output_tokens_details`` were optional and left
    out, though the Responses usage requires them; huggingface/responses.js#8: usage was missing.
    Expected, non-streamed, on ``response.completed`` and on the stored response: the ``openai``
    client's ``ResponseUsage`` validates, ``cached_tokens`` and ``reasoning_tokens`` are integers,
    ``total_tokens = input_tokens + output_tokens``, ``input_tokens`` is the length of the prompt
    the engine received, and reasoning tokens are some but not all of the output."""
    tm = PromptTM(tok, reply=THINK_CALL)
    _, tc = make_client(tm)
    body, events = post(tc, {"input": "Weather in Paris?", "tools": [WEATHER], **THINKING})
    stored = tc.get(f"/v1/responses/{body['id']}").json()
    n_prompt = len(tm.received[-1].input_ids)
    for got in (body["usage"], events[-1]["response"]["usage"], stored["usage"]):
        for key in ("input_tokens_details", "output_tokens_details"):
            assert ResponseUsage.model_fields[key].is_required() and key in got
        u = ResponseUsage.model_validate(got)
        assert u.total_tokens == u.input_tokens + u.output_tokens
        assert u.input_tokens == n_prompt
        assert 0 < u.output_tokens_details.reasoning_tokens < u.output_tokens
        assert 0 <= u.input_tokens_details.cached_tokens <= u.input_tokens


def test_max_output_tokens_cut_is_incomplete_everywhere(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#24561: a reply cut by the token limit came back ``completed`` with no
    ``incomplete_details``. OpenAI's reference: a reply cut at ``max_output_tokens`` has
    ``status: "incomplete"`` and ``incomplete_details.reason: "max_output_tokens"``. Expected,
    non-streamed, on the stream's terminal ``response.incomplete`` (read by the client's stream
    helper) and on the stored response: that status and reason, and ``output_tokens`` equal to
    the limit asked for."""
    client, tc = make_client(PromptTM(tok))
    body, events = post(tc, {"input": "Tell me a story.", "max_output_tokens": 5})
    assert events[-1]["type"] == "response.incomplete"
    stored = tc.get(f"/v1/responses/{body['id']}").json()
    with client.responses.stream(model=MODEL, input="Tell me a story.", max_output_tokens=5) as s:
        helper = final_response(s)
    for got in (body, events[-1]["response"], stored, helper.model_dump()):
        r = OpenAIResponse.model_validate(got)
        assert r.status == "incomplete" and r.incomplete_details is not None
        assert r.incomplete_details.reason == "max_output_tokens"
        assert r.usage is not None and r.usage.output_tokens == 5


def test_max_output_tokens_with_a_system_message_list(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#5089: ``max_output_tokens=256`` with an input list of a system and a user
    message raised an error. Expected: the ``openai`` client's call succeeds, the response echoes
    ``max_output_tokens`` 256, and the engine is asked for at most 256 new tokens."""
    tm = PromptTM(tok)
    client, _ = make_client(tm)
    r = client.responses.create(
        model=MODEL,
        input=[
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is a mixture of experts model?"},
        ],
        max_output_tokens=256,
    )
    assert r.status == "completed" and r.max_output_tokens == 256 and r.output_text
    assert tm.received[-1].sampling_params["max_new_tokens"] == 256

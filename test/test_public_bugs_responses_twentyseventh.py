"""Public bug reports of OpenAI-compatible servers' ``/v1/responses``, replayed on an in-process
app of the OpenAI router over a fake engine (each test names its report): an assistant's text or
reasoning replayed after its ``function_call`` items and before their outputs (Codex, Continue,
goai, kolega-code and Alma send it so; OpenAI pairs a call with its output by ``call_id``, not by
adjacency), parallel calls answered after both, ``input`` of a type that is neither a string nor
a list, the stream's text and function-call event sequences, and a continuation naming a
built-in tool.

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: DeepSeek's own
Responses converter and V4 encoder (``deepseek-recipe``) on the same conversation in the order
the model wrote it (reasoning, text, calls); the ``openai`` client's own types, stream
accumulator and errors; ``json.loads``; the event order OpenAI's streaming reference gives.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_responses_prompt  # noqa: E402
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM  # noqa: E402
from openai.types.responses import Response as OpenAIResponse  # noqa: E402
from responses_testutil import WEATHER, make_client, post  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

pytestmark = pytest.mark.timeout(120)

BOS = "<｜begin▁of▁sentence｜>"
USER = {
    "type": "message",
    "role": "user",
    "content": [{"type": "input_text", "text": "Weather in Paris and Rome?"}],
}
TEXT = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]}
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "Both cities need a lookup."}],
}
THINKING = {"reasoning": {"effort": "high"}}


def _call(cid: str, city: str) -> dict[str, Any]:
    """A ``get_weather`` ``function_call`` item of ``call_id`` ``cid``."""
    return {
        "type": "function_call",
        "call_id": cid,
        "name": "get_weather",
        "arguments": json.dumps({"city": city}),
    }


def _out(cid: str, text: str) -> dict[str, Any]:
    """The ``function_call_output`` item answering ``cid``."""
    return {"type": "function_call_output", "call_id": cid, "output": text}


def _after_effort(prompt: str) -> str:
    """``prompt`` without the reasoning-effort paragraph that may follow BOS: DeepSeek's Responses
    converter writes its top-tier paragraph whenever thinking is on, while the server's depends on
    the checkpoint's effort profile (tested elsewhere), so thinking prompts compare after it."""
    if prompt.startswith(BOS + "Reasoning Effort:"):
        return BOS + prompt[len(BOS) :].split("\n\n", 1)[1]
    return prompt


def _served(tok: PreTrainedTokenizerFast, body: dict[str, Any]) -> str:
    """The prompt ``body`` renders, asserting a 200 streamed and not, both prompts alike."""
    tm = PromptTM(tok, reply="It is sunny.")
    _, tc = make_client(tm)
    resp, events = post(tc, {"tools": [WEATHER], **body})
    assert resp["status"] == "completed" and events[-1]["type"] == "response.completed"
    prompts = {tok.decode(r.input_ids) for r in tm.received}
    assert len(tm.received) == 2 and len(prompts) == 1
    return prompts.pop()


# --------------------------------------------------------------------------- item order


@pytest.mark.parametrize("cities", [["Paris"], ["Paris", "Rome", "Oslo"]])
def test_assistant_text_after_its_calls_is_that_turns_text(
    tok: PreTrainedTokenizerFast, cities: list[str]
) -> None:
    """kolega-ai/kolega-code#403 and yetone/alma-releases#81: an agent replayed a step of text and
    tool calls as ``function_call`` x N, then the assistant ``message``, then the outputs; a
    DeepSeek Responses server answered 400 "No tool output found for tool call" (sticky for the
    whole session) though every output was there, while OpenAI takes the order. Expected: 200,
    and the prompt of the turn as the model wrote it (text, then the calls; DeepSeek's converter
    on that order)."""
    calls = [_call(f"c{i}", c) for i, c in enumerate(cities)]
    outs = [_out(f"c{i}", f"Sunny in {c}") for i, c in enumerate(cities)]
    prompt = _served(tok, {"input": [USER, *calls, TEXT, *outs]})
    assert prompt == recipe_responses_prompt({"input": [USER, TEXT, *calls, *outs], "tools": [WEATHER]})
    assert prompt.count("Let me check.") == 1


def test_reasoning_call_then_text_replays_as_one_thinking_turn(tok: PreTrainedTokenizerFast) -> None:
    """continuedev/continue#11994 and zendev-sh/goai#141: clients serialise a step of reasoning,
    text and a tool call as ``reasoning, function_call, message, function_call_output`` (goai: the
    message moved after the call). Expected: one assistant turn, rendered as the model wrote it:
    the reasoning, the text, the call, then its result (DeepSeek's converter on that order, in
    thinking mode; the reasoning text is in the prompt)."""
    got = [USER, REASONING, _call("c1", "Paris"), TEXT, _out("c1", "Sunny")]
    written = [USER, REASONING, TEXT, _call("c1", "Paris"), _out("c1", "Sunny")]
    prompt = _served(tok, {"input": got, **THINKING})
    want = recipe_responses_prompt({"input": written, "tools": [WEATHER], **THINKING})
    assert _after_effort(prompt) == _after_effort(want)
    assert "Both cities need a lookup." in prompt


def test_reasoning_item_between_call_and_output_is_paired_by_call_id(tok: PreTrainedTokenizerFast) -> None:
    """deepseek-ai/awesome-deepseek-integration#740 (case B): a ``reasoning`` item between a
    ``function_call`` and its ``function_call_output`` made a DeepSeek Responses server answer 400
    "No tool output found for tool call" although the output was in the same ``input``; OpenAI
    pairs them by ``call_id`` regardless of position. Expected: 200, the reasoning that turn's
    reasoning (DeepSeek's converter on ``reasoning, function_call, function_call_output``)."""
    got = [USER, _call("c1", "Paris"), REASONING, _out("c1", "Sunny")]
    written = [USER, REASONING, _call("c1", "Paris"), _out("c1", "Sunny")]
    prompt = _served(tok, {"input": got, **THINKING})
    want = recipe_responses_prompt({"input": written, "tools": [WEATHER], **THINKING})
    assert _after_effort(prompt) == _after_effort(want)


def test_two_calls_then_both_outputs_render_as_one_parallel_turn(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#3134 (fixed by ogx-ai/ogx#3224): a LangChain history of two ``function_call``
    items followed by each one's output, which OpenAI accepts, failed once converted for the chat
    path. Expected: 200, one assistant turn of both calls then both results (DeepSeek's
    converter on the same input)."""
    items = [USER, _call("a", "Paris"), _call("b", "Rome"), _out("a", "Sunny"), _out("b", "Rain")]
    prompt = _served(tok, {"input": items})
    assert prompt == recipe_responses_prompt({"input": items, "tools": [WEATHER]})
    conversation = prompt.split("<｜User｜>", 1)[1]  # after the tool list's own format example
    assert conversation.count("<｜DSML｜tool_calls>") == 1 and conversation.count("<｜DSML｜invoke") == 2


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("value", [12345, 1.5, True, None, {"role": "user", "content": "hi"}])
def test_input_neither_string_nor_list_is_a_400(tok: PreTrainedTokenizerFast, value: Any) -> None:
    """BerriAI/litellm#36947: ``"input": 12345`` (or a float, a bool, ``null``, an object) was
    iterated and surfaced as a 500 ``TypeError``. Expected: a 400 naming ``input``, streamed or
    not, the ``openai`` client raising its ``BadRequestError``, and nothing sent to the engine."""
    tm = PromptTM(tok, reply="x")
    client, tc = make_client(tm)
    for stream in (False, True):
        r = tc.post("/v1/responses", json={"model": MODEL, "input": value, "stream": stream})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "input" and r.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input=value)  # type: ignore[arg-type]
    assert not tm.received


# --------------------------------------------------------------------------- stream events

TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def test_text_stream_has_the_whole_event_sequence(tok: PreTrainedTokenizerFast) -> None:
    """Sophomoresty/gemini-web2api#57, Wei-Shaw/sub2api#2875 and BerriAI/litellm#24445: streams
    that skipped ``response.content_part.added`` (or sent only created / text.done / completed)
    made Codex and the ``openai`` client's accumulator drop the reply ("text part not found",
    ``IndexError``). Expected (OpenAI's streaming reference): created, in_progress,
    output_item.added, content_part.added, the text deltas, output_text.done, content_part.done,
    output_item.done, completed, each item event on the message's ``item_id``; the client's
    ``responses.stream`` rebuilds the reply."""
    reply = "Paris is sunny today."
    tm = PromptTM(tok, reply=reply)
    client, tc = make_client(tm)
    _, events = post(tc, {"input": "Weather?"})
    kinds = [e["type"] for e in events]
    squeezed = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    assert squeezed == TEXT_EVENTS and kinds.count("response.output_text.delta") > 1
    item_id = events[2]["item"]["id"]
    assert all(e["item_id"] == item_id for e in events[3:-2])
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == reply
    with client.responses.stream(model=MODEL, input="Weather?") as stream:
        assert stream.get_final_response().output_text == reply


def test_function_call_argument_events_name_their_item(tok: PreTrainedTokenizerFast) -> None:
    """0xPlaygrounds/rig#1827 and BerriAI/litellm#27144: clients key streamed argument deltas by
    the event's ``item_id`` (no ``content_index``) and read the whole arguments from
    ``response.function_call_arguments.done``; deltas without that id, or a ``.done`` without
    ``arguments``, lost the call. Expected: every delta and the ``.done`` carry the ``item_id``
    and ``output_index`` of the ``function_call`` item added; ``.done``'s ``arguments`` is the
    deltas joined and parses (``json.loads``) to the call written; the ``openai`` client's final
    response has the same call."""
    tm = PromptTM(tok, reply="Let me check." + CALL)
    client, tc = make_client(tm)
    _, events = post(tc, {"input": "Weather in Paris?", "tools": [WEATHER]})
    added = [
        e
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    ]
    assert len(added) == 1
    item, index = added[0]["item"], added[0]["output_index"]
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert deltas and len(done) == 1
    assert all(e["item_id"] == item["id"] and e["output_index"] == index for e in [*deltas, *done])
    assert done[0]["arguments"] == "".join(e["delta"] for e in deltas)
    assert json.loads(done[0]["arguments"]) == ARGS
    with client.responses.stream(model=MODEL, input="Weather in Paris?", tools=[WEATHER]) as stream:  # type: ignore[list-item]
        final = stream.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and json.loads(calls[0].arguments) == ARGS


# --------------------------------------------------------------------------- continuation


def test_continuation_naming_a_built_in_tool_is_a_400_not_a_500(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#3269: a ``previous_response_id`` continuation that offered an ``mcp`` tool
    answered 500. Expected on a server without MCP: a 400 naming ``tools[0].type`` (not a 500),
    nothing sent to the engine, and the stored response still continues with the function tool
    (200, the call's result in the prompt)."""
    tm = PromptTM(tok, reply="Let me check." + CALL)
    _, tc = make_client(tm)
    first = tc.post("/v1/responses", json={"model": MODEL, "input": "Weather?", "tools": [WEATHER]}).json()
    call_id = next(o["call_id"] for o in first["output"] if o["type"] == "function_call")
    body = {"model": MODEL, "previous_response_id": first["id"], "input": [_out(call_id, "Sunny, 21C")]}
    mcp = {"type": "mcp", "server_label": "weather", "server_url": "http://127.0.0.1:9/mcp"}
    sent = len(tm.received)
    for stream in (False, True):
        r = tc.post("/v1/responses", json={**body, "tools": [mcp], "stream": stream})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "tools[0].type"
    assert len(tm.received) == sent
    r = tc.post("/v1/responses", json={**body, "tools": [WEATHER]})
    assert r.status_code == 200, r.text
    assert "Sunny, 21C" in tok.decode(tm.received[-1].input_ids)


@pytest.mark.parametrize("bad", [0, -1, "2", True, 1.5])
def test_max_tool_calls_is_accepted_echoed_and_bounded(tok: PreTrainedTokenizerFast, bad: Any) -> None:
    """ogx-ai/ogx#3563 (implemented by ogx-ai/ogx#4062): ``max_tool_calls``, a field of OpenAI's
    Responses request and response, was not served. Expected: an integer >= 1 is accepted and
    echoed in the response, streamed, non-streamed and stored (the ``openai`` client's
    ``Response.max_tool_calls``), a call still comes back; a value below 1 (or not an integer) is
    a 400 naming ``max_tool_calls`` (the report's rule, OpenAI's behaviour per ogx-ai/ogx#4062)
    and nothing is run."""
    tm = PromptTM(tok, reply=CALL)
    client, tc = make_client(tm)
    resp, events = post(tc, {"input": "Weather in Paris?", "tools": [WEATHER], "max_tool_calls": 2})
    stored = tc.get(f"/v1/responses/{resp['id']}").json()
    for body in (resp, events[0]["response"], events[-1]["response"], stored):
        assert OpenAIResponse.model_validate(body).max_tool_calls == 2
    assert [o["type"] for o in resp["output"]] == ["function_call"]
    sent = len(tm.received)
    for stream in (False, True):
        r = tc.post(
            "/v1/responses", json={"model": MODEL, "input": "hi", "max_tool_calls": bad, "stream": stream}
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "max_tool_calls"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="hi", max_tool_calls=bad)
    assert len(tm.received) == sent

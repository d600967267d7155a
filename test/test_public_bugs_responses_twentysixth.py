"""Public bug reports of OpenAI-compatible servers' ``/v1/responses`` (inference servers, gateways
and agent frameworks), replayed on an in-process app of the OpenAI router over a fake engine
(each test names its report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: the ``openai``
client's own types and stream parser (:mod:`openai.types.responses`), DeepSeek's own Responses
converter and V4 encoder (``deepseek-recipe``: the prompt a request renders), the rules OpenAI's
API reference and the reports state, and the text written by hand (what the deltas must carry).
"""

from __future__ import annotations

from typing import Any

import pytest
from deepseek_recipe_testutil import recipe_responses_prompt
from fake_prompt_tm import CALL, MODEL, PromptTM
from openai.types.responses import (
    Response,
    ResponseCreatedEvent,
    ResponseInProgressEvent,
    ResponseInputMessageItem,
)
from responses_testutil import WEATHER, make_client, post, streamed_items
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

#: a reply of reasoning, a short answer and one ``get_weather`` call (Paris)
THINK_CALL = "Need the weather.</think>Let me check." + CALL


def _prompt(tok: PreTrainedTokenizerFast, tm: PromptTM) -> str:
    """The text of the engine's latest prompt."""
    return tok.decode(tm.received[-1].input_ids)


def _err(r: Any, status: int, param: str) -> dict[str, Any]:
    """The error of an OpenAI-shaped error answer, checked for its status and ``param``."""
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"], err
    return err


# --------------------------------------------------------------------------- input shapes


def test_mixed_string_and_part_list_messages_render_as_deepseek_renders_them(
    tok: PreTrainedTokenizerFast,
) -> None:
    """MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#138: a DeepSeek-V4 server answered an
    ordinary chat client's Responses history (a ``system`` message of string content, ``user``
    messages of ``input_text`` parts, an ``assistant`` message of ``output_text`` parts) with 240
    validation errors; the right answer is a 200 whose prompt is that conversation. Oracle:
    DeepSeek's own Responses converter and V4 encoder render the same body."""
    body = {
        "input": [
            {"role": "system", "content": "Current model: deepseek-v4-flash\nCurrent date: 2026-08-25"},
            {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
            {
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello there! How can I help?"}],
            },
            {"role": "user", "content": [{"type": "input_text", "text": "your version"}]},
        ]
    }
    tm = PromptTM(tok, reply="I am DeepSeek-V4.")
    _, tc = make_client(tm)
    resp, _ = post(tc, body)
    assert resp["status"] == "completed" and resp["output"][-1]["content"][0]["text"] == "I am DeepSeek-V4."
    assert _prompt(tok, tm) == recipe_responses_prompt(body)


def test_input_text_parts_of_one_message_are_its_text(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#56297: a DeepSeek V4.1 server refused ``input_text`` content parts
    ("supports text and image content only; got 'input_text'"), expected: "``input_text`` is
    normalized as text and the request returns HTTP 200"; sgl-project/sglang#11924 lists a user
    message of two ``input_text`` parts as one of the input formats to serve. Oracle: DeepSeek's
    converter and encoder render the same body (the two parts are one user turn, both texts in
    order); the ``openai`` client reads the stored input back as one message of both parts."""
    parts = [
        {"type": "input_text", "text": "introduce me a programming language in one sentence"},
        {"type": "input_text", "text": "introduce me a chinese famous dish in one sentence"},
    ]
    body = {"input": [{"type": "message", "role": "user", "content": parts}], "max_output_tokens": 8}
    tm = PromptTM(tok, reply="Python. Peking duck.")
    client, tc = make_client(tm)
    resp, _ = post(tc, body)
    assert resp["status"] == "completed"
    assert _prompt(tok, tm) == recipe_responses_prompt(body)
    items = client.responses.input_items.list(resp["id"]).data
    assert len(items) == 1 and isinstance(items[0], ResponseInputMessageItem)
    assert [(c.type, c.text) for c in items[0].content] == [(p["type"], p["text"]) for p in parts]


def test_string_input_is_one_user_message(tok: PreTrainedTokenizerFast) -> None:
    """router-for-me/CLIProxyAPI#1403, Wei-Shaw/sub2api#919, zyycn/codex-proxy-rs#178 and
    BerriAI/litellm#41989: gateways answered a string ``input`` with 400 "Input must be a list",
    though OpenAI's reference takes a string as one user message (litellm's fix maps ``"hello"``
    to ``[{"role": "user", "content": "hello"}]``). Oracle: that mapping, rendered by DeepSeek's
    converter and encoder, and the ``openai`` client's input-item type. Expected: 200 streamed and
    not, the prompt of the one-message list, and the stored input one ``user`` message of one
    ``input_text`` part."""
    text = "Hello, world!"
    tm = PromptTM(tok, reply="Hi.")
    client, tc = make_client(tm)
    resp, events = post(tc, {"input": text})
    assert resp["status"] == "completed" and events[-1]["type"] == "response.completed"
    assert _prompt(tok, tm) == recipe_responses_prompt({"input": [{"role": "user", "content": text}]})
    items = client.responses.input_items.list(resp["id"]).data
    assert len(items) == 1 and isinstance(items[0], ResponseInputMessageItem)
    assert items[0].role == "user" and [(c.type, c.text) for c in items[0].content] == [("input_text", text)]


# --------------------------------------------------------------------------- stream lifecycle


def test_stream_opens_with_created_then_in_progress_of_one_response(tok: PreTrainedTokenizerFast) -> None:
    """Oaklight/llm-rosetta#455: a Responses stream must send ``response.in_progress`` right
    after ``response.created`` (Open Responses spec); microsoft/agent-framework#2975: clients read
    the response id from those two lifecycle events, so they must carry the id the stream
    completes with. Oracle: the ``openai`` client's stream parser and event types. Expected:
    events 0 and 1 are ``response.created`` and ``response.in_progress``, status
    ``in_progress`` and no output yet, with the id of ``response.completed``, which ``GET``
    retrieves."""
    tm = PromptTM(tok, reply="Sunny in Paris.")
    client, _ = make_client(tm)
    with client.responses.stream(model=MODEL, input="Weather?") as stream:
        events = list(stream)
    assert isinstance(events[0], ResponseCreatedEvent) and isinstance(events[1], ResponseInProgressEvent)
    assert [e.sequence_number for e in events[:2]] == [0, 1]
    done = events[-1]
    assert done.type == "response.completed" and done.response.output_text == "Sunny in Paris."
    for ev in events[:2]:
        assert ev.response.status == "in_progress" and ev.response.output == []
        assert ev.response.id == done.response.id
    assert client.responses.retrieve(done.response.id).output_text == "Sunny in Paris."


def test_reasoning_streams_as_reasoning_text_before_the_answer(tok: PreTrainedTokenizerFast) -> None:
    """mudler/LocalAI#9658: a server sent the reasoning only at the end of the stream, as an
    item of ``output_text`` parts after the answer's deltas; the right stream sends the reasoning
    as it comes (``response.reasoning_text.delta``), in a ``reasoning`` item whose parts are
    ``reasoning_text``, before the answer's message. Oracle: the text written by hand (split at
    ``</think>``) and the ``openai`` client's event types. Expected: the reasoning deltas build
    "Need the weather." and all come before the message is added; the answer's deltas build
    "Let me check." alone; the streamed items equal the non-streamed output.
    vllm-project/vllm#52418: a call following reasoning and text was announced as a
    ``function_call`` item with no name, which aborted the stream; here the call's item is added
    with its name and ``call_id`` and the stream ends with ``response.completed``."""
    tm = PromptTM(tok, reply=THINK_CALL)
    _, tc = make_client(tm)
    resp, events = post(
        tc, {"input": "Weather in Paris?", "tools": [WEATHER], "reasoning": {"effort": "low"}}
    )
    kinds = [e["type"] for e in events]
    reasoning = [i for i, k in enumerate(kinds) if k == "response.reasoning_text.delta"]
    message_added = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "message"
    )
    assert reasoning and max(reasoning) < message_added
    assert "".join(events[i]["delta"] for i in reasoning) == "Need the weather."
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "Let me check."
    calls = [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    ]
    assert [(c["name"], bool(c["call_id"])) for c in calls] == [("get_weather", True)]
    assert kinds[-1] == "response.completed"
    items = streamed_items(events)
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call"]
    assert items[0]["content"] == [{"type": "reasoning_text", "text": "Need the weather."}]
    assert [{k: v for k, v in i.items() if k not in ("id", "text", "call_id")} for i in items] == [
        {k: v for k, v in o.items() if k not in ("id", "call_id")} for o in resp["output"]
    ]


# --------------------------------------------------------------------------- request checks


def test_required_tool_choice_without_tools_is_a_400_streamed_or_not(tok: PreTrainedTokenizerFast) -> None:
    """moeru-ai/airi#2554: a Responses gateway accepted ``tool_choice: "required"`` with no
    ``tools`` (or an empty list), which no reply can satisfy; the right answer is a local 400.
    Oracle: that rule (OpenAI's reference: ``required`` "means the model must call one or more
    tools"). Expected: a 400 naming ``tool_choice``, streamed or not (no event stream opened),
    and nothing reaches the engine; the same request with a tool is served."""
    tm = PromptTM(tok, reply="Hi.")
    _, tc = make_client(tm)
    for extra in ({}, {"tools": []}):
        for stream in (False, True):
            body = {"model": MODEL, "input": "Hi", "tool_choice": "required", "stream": stream, **extra}
            r = tc.post("/v1/responses", json=body)
            _err(r, 400, "tool_choice")
            assert r.headers["content-type"].startswith("application/json")
    assert tm.received == []
    tm.reply = "Checking." + CALL
    ok, _ = post(tc, {"input": "Weather?", "tools": [WEATHER], "tool_choice": "required"})
    assert [o["type"] for o in ok["output"]][-1] == "function_call"


def test_max_output_tokens_reaches_the_engine_unreduced(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#26158: SGLang's Responses route took two tokens off
    ``max_output_tokens`` (1 became -1, 2 became 0); the fix passes the requested limit through
    and refuses a value that is not positive. Oracle: the report's stated rule and the DeepSeek-V4
    tokenizer (the tokens of the written reply). Expected: 1, 2 and 5 reach the engine as
    ``max_new_tokens`` unchanged and the response holds exactly that many output tokens (the
    reply is longer: ``incomplete``); 0 and -1 are a 400 naming ``max_output_tokens`` that reaches
    no engine."""
    reply = "one two three four five six seven eight nine ten"
    ids = tok.encode(reply, add_special_tokens=False)
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    for mot in (1, 2, 5):
        resp, events = post(tc, {"input": "Count.", "max_output_tokens": mot})
        assert [r.sampling_params["max_new_tokens"] for r in tm.received[-2:]] == [mot, mot]
        assert resp["status"] == "incomplete" and resp["usage"]["output_tokens"] == mot
        assert resp["output"][0]["content"][0]["text"] == tok.decode(ids[:mot])
        assert events[-1]["type"] == "response.incomplete"
    n = len(tm.received)
    for bad in (0, -1):
        _err(
            tc.post("/v1/responses", json={"model": MODEL, "input": "x", "max_output_tokens": bad}),
            400,
            "max_output_tokens",
        )
    assert len(tm.received) == n


# --------------------------------------------------------------------------- stored responses


def test_deleted_response_is_gone_for_retrieval_items_and_continuation(tok: PreTrainedTokenizerFast) -> None:
    """matthewhand/open-swarm#144: a stateful Responses route must answer ``DELETE`` with the
    deletion and afterwards ``GET`` 404, an unknown ``previous_response_id`` 404, and keep a
    ``store: false`` response out of the store. Oracle: those rules and OpenAI's reference (the
    deletion answer carries the id and ``deleted: true``; the ``openai`` client's
    ``NotFoundError``). Expected: the deleted response is gone from ``GET``, its input items,
    ``previous_response_id`` and a second ``DELETE`` (each a 404 naming the id); another stored
    response is untouched and still continues."""
    import openai

    tm = PromptTM(tok, reply="Noted.")
    client, tc = make_client(tm)
    gone = client.responses.create(model=MODEL, input="Remember 7.")
    kept = client.responses.create(model=MODEL, input="Remember 9.")
    unstored = client.responses.create(model=MODEL, input="Remember 3.", store=False)
    d = tc.delete(f"/v1/responses/{gone.id}")
    assert d.status_code == 200 and d.json()["id"] == gone.id and d.json()["deleted"] is True
    for rid in (gone.id, unstored.id):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(rid)
        with pytest.raises(openai.NotFoundError):
            client.responses.input_items.list(rid)
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model=MODEL, input="And?", previous_response_id=rid)
    assert gone.id in _err(tc.delete(f"/v1/responses/{gone.id}"), 404, "response_id")["message"]
    assert client.responses.retrieve(kept.id).output_text == "Noted."
    nxt = client.responses.create(model=MODEL, input="Which number?", previous_response_id=kept.id)
    assert (
        nxt.status == "completed"
        and "Remember 9." in _prompt(tok, tm)
        and "Remember 7." not in _prompt(tok, tm)
    )


def test_instructions_are_not_carried_by_previous_response_id(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#37727: vLLM replayed a response's ``instructions`` into the next turn
    through ``previous_response_id`` (old and new system messages both in the prompt); OpenAI's
    reference: "When using along with ``previous_response_id``, the instructions from a previous
    response will not be carried over to the next response." Oracle: DeepSeek's converter and
    encoder render the stateless equivalent (turn 1's input and reply, turn 2's input, turn 2's
    ``instructions`` alone). Expected: with new instructions the prompt holds them and not the
    old ones; with none it holds no system text at all."""
    tm = PromptTM(tok, reply="Bonjour.")
    client, _ = make_client(tm)
    r1 = client.responses.create(model=MODEL, input="Say hello.", instructions="Answer in French.")
    history = [
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Bonjour."}]},
        {"role": "user", "content": "Again."},
    ]
    client.responses.create(
        model=MODEL, input="Again.", previous_response_id=r1.id, instructions="Answer in German."
    )
    assert _prompt(tok, tm) == recipe_responses_prompt(
        {"input": history, "instructions": "Answer in German."}
    )
    assert "French" not in _prompt(tok, tm)
    client.responses.create(model=MODEL, input="Again.", previous_response_id=r1.id)
    assert _prompt(tok, tm) == recipe_responses_prompt({"input": history})


def test_function_call_output_alone_continues_the_stored_tool_turn(tok: PreTrainedTokenizerFast) -> None:
    """stdapi-ai/stdapi.ai#241: in the canonical agent loop the follow-up carries only the
    ``function_call_output`` and ``previous_response_id``, and the server supplies the stored
    turn's ``function_call`` (and its ``reasoning``) itself. Oracle: DeepSeek's converter and
    encoder render the stateless equivalent (the user turn, the stored output items replayed as
    input, the tool output). Expected: the follow-up is a 200 whose prompt is that rendering,
    the call and its reasoning included."""
    tm = PromptTM(tok, reply=THINK_CALL)
    client, tc = make_client(tm)
    common = {"tools": [WEATHER], "reasoning": {"effort": "low"}}
    r1 = tc.post("/v1/responses", json={"model": MODEL, "input": "Weather in Paris?", **common}).json()
    call = next(o for o in r1["output"] if o["type"] == "function_call")
    out = {"type": "function_call_output", "call_id": call["call_id"], "output": '{"sky": "sunny"}'}
    tm.reply = "Read the tool output.</think>It is sunny in Paris."
    r2 = client.responses.create(model=MODEL, input=[out], previous_response_id=r1["id"], **common)
    assert isinstance(r2, Response) and r2.output_text == "It is sunny in Paris."
    replay = [{"role": "user", "content": "Weather in Paris?"}, *r1["output"], out]
    assert _prompt(tok, tm) == recipe_responses_prompt({"input": replay, **common})
    assert "Need the weather." in _prompt(tok, tm)


def test_arguments_done_event_names_the_function_it_completes(tok: PreTrainedTokenizerFast) -> None:
    """MacPaw/OpenAI#409: by OpenAI's reference example, ``response.function_call_arguments.done``
    "must include a name field indicating the function being called" (``type``, ``item_id``,
    ``name``, ``output_index``, ``arguments``, ``sequence_number``), and decoders generated from
    that spec fail without it; the current spec leaves ``name`` out, its clients reading the name
    off the item the event's ``item_id`` names (so an extra ``name`` costs them nothing). Oracle:
    the reference example's fields, the names written by hand and the ``openai`` client's event
    types. Expected: for two calls of two different functions in one turn, each ``.done`` event
    has every field of the example, the ``name`` of its own call and the same name as the
    ``function_call`` item its ``item_id`` names."""
    clock = {
        "type": "function",
        "name": "get_time",
        "description": "Local time of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    second = CALL[CALL.index("<｜DSML｜invoke") :].replace("get_weather", "get_time")
    second = second.replace('\n<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>', "")
    reply = "Checking." + CALL.replace("</｜DSML｜tool_calls>", "") + second
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    resp, events = post(tc, {"input": "Weather and time in Paris?", "tools": [WEATHER, clock]})
    assert [(o["name"], o["arguments"]) for o in resp["output"] if o["type"] == "function_call"] == [
        ("get_weather", '{"city": "Paris", "days": 3}'),
        ("get_time", '{"city": "Paris"}'),
    ]
    added = {e["item"]["id"]: e["item"] for e in events if e["type"] == "response.output_item.added"}
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [e["name"] for e in done] == ["get_weather", "get_time"]
    for ev in done:
        assert {"type", "item_id", "name", "output_index", "arguments", "sequence_number"} <= set(ev)
        assert added[ev["item_id"]]["name"] == ev["name"]
    assert [e["arguments"] for e in done] == ['{"city": "Paris", "days": 3}', '{"city": "Paris"}']


def test_empty_arguments_of_a_no_parameter_call_replay_as_no_parameters(tok: PreTrainedTokenizerFast) -> None:
    """qwersyk/Newelle#429 and sigoden/aichat#1217: for a tool of no parameters a model or client
    may write the call's ``arguments`` as the empty string (OpenAI itself sometimes does:
    sashirestela/simple-openai#166), and clients failed on it as non-JSON; the reports' reading:
    an empty (or blank) text is the empty object ``{}``. Oracle: that reading, rendered by
    DeepSeek's converter and encoder (the same history with ``"{}"``). Expected: a history
    replaying such a call is a 200 whose prompt shows the call with no parameters, and the
    stored item keeps the arguments as sent."""
    ping = {
        "type": "function",
        "name": "ping",
        "description": "Ping",
        "parameters": {"type": "object", "properties": {}},
    }

    def body(args: str) -> dict[str, Any]:
        call = {"type": "function_call", "call_id": "call_1", "name": "ping", "arguments": args}
        out = {"type": "function_call_output", "call_id": "call_1", "output": "pong"}
        return {"input": [{"role": "user", "content": "Ping it."}, call, out], "tools": [ping]}

    tm = PromptTM(tok, reply="Pong received.")
    client, tc = make_client(tm)
    for args in ("", " ", "\n"):
        resp, _ = post(tc, body(args))
        assert _prompt(tok, tm) == recipe_responses_prompt(body("{}")), repr(args)
        items = client.responses.input_items.list(resp["id"], order="asc").data
        assert [i.arguments for i in items if i.type == "function_call"] == [args]

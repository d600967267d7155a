"""``POST /v1/responses`` (OpenAI's Responses API) on the chat-completions path.

Oracles: the ``openai`` client's own types (every body and every stream event validated against
``openai.types.responses``, and its ``responses.stream`` helper's accumulator), and
``/v1/chat/completions`` on the same fake engine (same prompt token ids, same text, same sampling
parameters for the same conversation). The fake tokenizer manager's reply is a function of the
prompt's token ids, so equal texts also mean equal prompts. The tests through the real server
processes are in ``test_openai_responses_server.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM, prompt_reply
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openai.types.responses import Response as OpenAIResponse
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter
from responses_testutil import (
    CHAT_WEATHER,
    EVENTS,
    WEATHER,
    chat,
    make_client,
    post,
    sse,
    streamed_items,
)
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.managers.io_struct import GenerateReqInput
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(300)


def test_text_prompt_and_usage_equal_chat_completions(tok: PreTrainedTokenizerFast) -> None:
    """``instructions`` + input items render the prompt chat completions renders for the same
    messages; the text, the usage and the sampling parameters are the chat route's; the stream
    carries OpenAI's event sequence and the client's helper rebuilds the same response."""
    tm = PromptTM(tok)
    client, tc = make_client(tm)
    items = [
        {"role": "developer", "content": "Answer in Greek letters."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Q1"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A1"}]},
        {"role": "user", "content": "Q2"},
    ]
    msgs = [  # a Responses developer item is a developer message of the chat route (an instruction)
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Answer in Greek letters."},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2"},
    ]
    want = chat(client, msgs, max_completion_tokens=50, top_p=0.9)
    chat_req = tm.received[-1]
    body, events = post(
        tc,
        {
            "input": items,
            "instructions": "Be brief.",
            "temperature": 0,
            "max_output_tokens": 50,
            "top_p": 0.9,
        },
    )
    for sent in tm.received[-2:]:
        assert sent.input_ids == chat_req.input_ids
        assert {k: v for k, v in sent.sampling_params.items()} == chat_req.sampling_params
    resp = client.responses.create(
        model=MODEL, input=items, instructions="Be brief.", temperature=0, max_output_tokens=50, top_p=0.9
    )
    text = want.choices[0].message.content
    assert resp.output_text == text == prompt_reply(list(chat_req.input_ids))
    assert resp.status == "completed" and body["status"] == "completed" and body["incomplete_details"] is None
    (msg,) = resp.output
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    u = resp.usage
    assert (u.input_tokens, u.output_tokens) == (want.usage.prompt_tokens, want.usage.completion_tokens)
    assert u.total_tokens == u.input_tokens + u.output_tokens and u.input_tokens_details.cached_tokens == 2
    assert u.output_tokens_details.reasoning_tokens == 0
    assert resp.instructions == "Be brief." and resp.temperature == 0 and resp.top_p == 0.9
    assert resp.max_output_tokens == 50 and resp.model == MODEL
    # the stream: lifecycle, one message item, the text in deltas, the final response
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert kinds[2:5] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert kinds[-5:-1] == [
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert len({e["response"]["id"] for e in events if "response" in e}) == 1
    (item,) = streamed_items(events)
    assert item["text"] == text and item["status"] == "completed"
    final = events[-1]["response"]
    assert final["output"][0]["id"] == item["id"] and final["output"][0]["content"][0]["text"] == text
    assert final["usage"] == body["usage"]
    with client.responses.stream(model=MODEL, input=items, instructions="Be brief.", temperature=0) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final_resp = stream.get_final_response()
    assert "".join(deltas) == final_resp.output_text == text


def test_string_input_and_max_output_tokens_cut(tok: PreTrainedTokenizerFast) -> None:
    """A string ``input`` is one user message; a reply cut by ``max_output_tokens`` is
    ``incomplete`` (reason ``max_output_tokens``), streamed too, with the chat route's text."""
    tm = PromptTM(tok)
    client, tc = make_client(tm)
    want = chat(client, [{"role": "user", "content": "Hi"}], max_tokens=3)
    body, events = post(tc, {"input": "Hi", "temperature": 0, "max_output_tokens": 3})
    assert tm.received[-1].input_ids == tm.received[0].input_ids
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["content"][0]["text"] == want.choices[0].message.content
    assert body["output"][0]["status"] == "incomplete" and body["usage"]["output_tokens"] == 3
    final = events[-1]  # OpenAI ends a cut stream with response.incomplete (ResponseIncompleteEvent)
    assert final["type"] == "response.incomplete" and final["response"]["status"] == "incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["usage"]["output_tokens"] == 3
    TypeAdapter(ResponseStreamEvent).validate_python(final)
    assert "response.completed" not in [e["type"] for e in events]
    assert streamed_items(events)[0]["text"] == want.choices[0].message.content


def test_reasoning_effort_switches_thinking_as_chat_does(tok: PreTrainedTokenizerFast) -> None:
    """``reasoning.effort`` turns thinking mode on (prompt as chat's with ``thinking`` and
    ``reasoning_effort``), ``"none"`` turns it off; the reasoning comes back as a ``reasoning``
    item (``reasoning_text`` content) before the message, streamed as ``reasoning_text`` events,
    and its tokens are counted as chat counts them."""
    tm = PromptTM(tok, "Let me think.</think>\n\nThe answer.")
    client, tc = make_client(tm)
    msgs = [{"role": "user", "content": "Why?"}]
    want = chat(client, msgs, reasoning_effort="max", extra_body={"chat_template_kwargs": {"thinking": True}})
    chat_ids = tm.received[-1].input_ids
    body, events = post(tc, {"input": "Why?", "reasoning": {"effort": "max"}, "temperature": 0})
    assert tm.received[-1].input_ids == chat_ids
    rs, msg = body["output"]
    assert rs["type"] == "reasoning" and rs["content"] == [
        {"type": "reasoning_text", "text": "Let me think."}
    ]
    assert rs["summary"] == [] and rs["id"].startswith("rs_")
    assert msg["content"][0]["text"] == want.choices[0].message.content == "The answer."
    assert body["reasoning"]["effort"] == "max"
    assert (
        body["usage"]["output_tokens_details"]["reasoning_tokens"]
        == want.usage.completion_tokens_details.reasoning_tokens
        > 0
    )
    items = streamed_items(events)
    assert [(i["type"], i["text"]) for i in items] == [
        ("reasoning", "Let me think."),
        ("message", "The answer."),
    ]
    kinds = [e["type"] for e in events]
    assert "response.reasoning_text.delta" in kinds and "response.reasoning_text.done" in kinds
    assert [i["id"] for i in items] == [i["id"] for i in events[-1]["response"]["output"]]
    resp = client.responses.create(model=MODEL, input="Why?", reasoning={"effort": "max"})
    assert resp.output[0].content[0].text == "Let me think." and resp.output_text == "The answer."
    # effort "none": chat mode, the prompt of a plain chat request
    chat(client, msgs)
    plain_ids = tm.received[-1].input_ids
    client.responses.create(
        model=MODEL,
        input="Why?",
        reasoning={"effort": "none"},
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    assert tm.received[-1].input_ids == plain_ids != chat_ids


def test_thinking_token_budget_reaches_the_engine_as_on_chat(tok: PreTrainedTokenizerFast) -> None:
    """vLLM's ``thinking_token_budget`` (a chat and completions field) on ``/v1/responses``: the
    engine gets the sampling parameters the chat route gives it for the same budget and
    conversation, streamed or not (vLLM's Responses route drops the field unread, the fault
    reported in vllm-project/vllm#43692); below -1 it is a 400 naming the field, as on chat.
    Oracle: the chat route's own request to the same fake engine."""
    tm = PromptTM(tok, "Let me think.</think>\n\nThe answer.")
    client, tc = make_client(tm)
    msgs = [{"role": "user", "content": "Why?"}]
    kw = {"chat_template_kwargs": {"thinking": True}}
    chat(client, msgs, extra_body={**kw, "thinking_token_budget": 3})
    want = tm.received[-1]
    assert want.sampling_params["thinking_token_budget"] == 3
    post(tc, {"input": "Why?", "temperature": 0, **kw, "thinking_token_budget": 3})
    for got in tm.received[-2:]:  # non-streamed, streamed
        assert got.input_ids == want.input_ids
        assert got.sampling_params["thinking_token_budget"] == 3
    r = tc.post("/v1/responses", json={"model": MODEL, "input": "Why?", "thinking_token_budget": -2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "thinking_token_budget", r.text


def test_unclosed_reasoning_that_stops_stays_reasoning_streamed_or_not(tok: PreTrainedTokenizerFast) -> None:
    """A thinking-mode reply that stops without ``</think>`` stays reasoning (chat's rule): the
    response is one reasoning item with chat's ``reasoning_content``; streamed, the text goes out
    as reasoning once, and the final response (``response.completed``, the stored one) is the
    non-streamed one."""
    tm = PromptTM(tok, "Just the answer.")
    client, tc = make_client(tm)
    want = chat(
        client, [{"role": "user", "content": "Q"}], extra_body={"chat_template_kwargs": {"thinking": True}}
    )
    assert want.choices[0].message.model_extra["reasoning_content"] == "Just the answer."
    body, events = post(tc, {"input": "Q", "reasoning": {"effort": "high"}})
    assert [(o["type"], o["content"][0]["text"]) for o in body["output"]] == [
        ("reasoning", "Just the answer.")
    ]
    final = events[-1]["response"]
    assert [(o["type"], o["content"][0]["text"]) for o in final["output"]] == [
        ("reasoning", "Just the answer.")
    ]
    assert [(i["type"], i["text"]) for i in streamed_items(events)] == [("reasoning", "Just the answer.")]
    assert client.responses.retrieve(final["id"]).output_text == ""


def test_call_stopped_inside_its_invoke_streamed_or_not(tok: PreTrainedTokenizerFast) -> None:
    """A reply that stops (EOS) inside its invoke made no call (chat's rule, vllm-project/vllm#42210):
    the response is one message holding chat's content, the text before the block (the block is
    dropped). Streamed,
    the ``function_call`` item and its first argument deltas went out before the stop: that item
    is closed ``incomplete`` (no text follows it), and the final response
    (``response.completed``) is the non-streamed one."""
    reply = "Let me look." + CALL[: CALL.index("Paris") + len("Par")]
    client, tc = make_client(PromptTM(tok, reply))
    user = {"role": "user", "content": "Weather in Paris?"}
    want = chat(client, [user], tools=[CHAT_WEATHER]).choices[0]
    assert (want.message.content, want.message.tool_calls, want.finish_reason) == (
        "Let me look.",
        None,
        "stop",
    )
    body, events = post(tc, {"input": [user], "tools": [WEATHER]})

    def output(r: dict[str, Any]) -> list[tuple[str, str, str]]:
        return [(o["type"], o["status"], o["content"][0]["text"]) for o in r["output"]]

    assert output(body) == output(events[-1]["response"]) == [("message", "completed", "Let me look.")]
    items = streamed_items(events)
    assert [(i["type"], i["status"]) for i in items] == [
        ("message", "completed"),
        ("function_call", "incomplete"),
    ]
    assert items[0]["text"] == "Let me look."
    assert items[1]["name"] == "get_weather" and items[1]["arguments"]
    assert '{"city": "Paris'.startswith(items[1]["arguments"]), items[1]


class AbortingTM(PromptTM):
    """Streams two tokens, then an engine abort (as the tokenizer manager reports one); not
    streamed, its one output is the abort."""

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        outs = [out async for out in super().generate_request(obj, request)][:3]
        abort = {"type": "abort", "message": "KV cache lost", "status_code": 500}
        outs[-1] = dict(outs[-1], meta_info=dict(outs[-1]["meta_info"], finish_reason=abort))
        for out in outs:
            yield out


def test_engine_abort_mid_stream_is_response_failed(tok: PreTrainedTokenizerFast) -> None:
    """An abort after the stream started ends it with ``error`` and ``response.failed`` (status
    ``failed``, OpenAI's error code), the open item closed ``incomplete``; nothing is stored. Not
    streamed, the abort is an HTTP 500 in OpenAI's error shape."""
    tm = AbortingTM(tok)
    client, tc = make_client(tm)
    s = tc.post("/v1/responses", json={"model": MODEL, "input": "Q", "stream": True})
    events = sse(s.text)
    for ev in events:
        EVENTS.validate_python(ev)
    assert [e["type"] for e in events[-3:]] == ["response.output_item.done", "error", "response.failed"]
    assert events[-3]["item"]["status"] == "incomplete"
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"] == {
        "code": "server_error",
        "message": "KV cache lost",
    }
    assert tc.get(f"/v1/responses/{failed['id']}").status_code == 404
    with pytest.raises(openai.InternalServerError, match="KV cache lost"):
        client.responses.create(model=MODEL, input="Q")


def test_api_key_guards_every_responses_route(tok: PreTrainedTokenizerFast) -> None:
    """With ``--api-key``, create, retrieve and delete answer 401 without the key."""
    tm = PromptTM(tok)
    sa = SimpleNamespace(served_model_name=MODEL, model_path=None, api_key="k", enable_cache_report=False)
    app = FastAPI()
    app.include_router(create_openai_router(tm, sa))
    tc = TestClient(app)
    good = {"Authorization": "Bearer k"}
    rid = tc.post("/v1/responses", json={"input": "Q"}, headers=good).json()["id"]
    assert tc.post("/v1/responses", json={"input": "Q"}).status_code == 401
    assert tc.get(f"/v1/responses/{rid}").status_code == 401
    assert tc.delete(f"/v1/responses/{rid}").status_code == 401
    assert tc.get(f"/v1/responses/{rid}", headers=good).json()["id"] == rid
    assert tc.delete(f"/v1/responses/{rid}", headers=good).json() == {
        "id": rid,
        "object": "response.deleted",
        "deleted": True,
    }
    assert len(tm.received) == 1


def test_function_call_round_trip(tok: PreTrainedTokenizerFast) -> None:
    """A DSML call comes back as a ``function_call`` item (flat tool, ``call_id``, JSON
    arguments), streamed as argument deltas; fed back with a ``function_call_output`` item (the
    whole output replayed, or through ``previous_response_id``) it renders the prompt of the chat
    conversation with that call and its ``tool`` result."""
    tm = PromptTM(tok, "Let me look." + CALL)
    client, tc = make_client(tm)
    user = {"role": "user", "content": "Weather in Paris?"}
    r = client.responses.create(model=MODEL, input=[user], tools=[WEATHER], tool_choice="auto")
    msg, call = r.output
    assert msg.type == "message" and msg.content[0].text == "Let me look."
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert (
        json.loads(call.arguments) == ARGS and call.call_id.startswith("call_") and call.id.startswith("fc_")
    )
    prompt = tok.decode(tm.received[-1].input_ids)
    assert "## Tools" in prompt and '"name": "get_weather"' in prompt
    chat(client, [user], tools=[CHAT_WEATHER])
    assert tm.received[-1].input_ids == tm.received[-2].input_ids
    _, events = post(tc, {"input": [user], "tools": [WEATHER]})
    items = streamed_items(events)
    assert [i["type"] for i in items] == ["message", "function_call"]
    assert json.loads(items[1]["arguments"]) == ARGS and items[1]["name"] == "get_weather"
    assert sum(e["type"] == "response.function_call_arguments.delta" for e in events) > 3
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [json.loads(e["arguments"]) for e in done] == [ARGS]
    # second turn: the call's output fed back
    tm.reply = prompt_reply
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 18}'}
    replay = [user] + [item.model_dump(exclude_none=True) for item in r.output] + [result]
    r2 = client.responses.create(model=MODEL, input=replay, tools=[WEATHER])
    replay_ids = tm.received[-1].input_ids
    r3 = client.responses.create(model=MODEL, previous_response_id=r.id, input=[result], tools=[WEATHER])
    assert tm.received[-1].input_ids == replay_ids
    tool_call = {
        "id": call.call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": call.arguments},
    }
    msgs = [
        user,
        {"role": "assistant", "content": "Let me look.", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": call.call_id, "content": '{"temp": 18}'},
    ]
    want = chat(client, msgs, tools=[CHAT_WEATHER])
    assert tm.received[-1].input_ids == replay_ids
    assert r2.output_text == r3.output_text == want.choices[0].message.content
    assert '<tool_result>{"temp": 18}</tool_result>' in tok.decode(replay_ids)


def test_call_cut_by_max_output_tokens_can_be_continued(tok: PreTrainedTokenizerFast) -> None:
    """A ``function_call`` cut by ``max_output_tokens`` (``status: "incomplete"``, arguments a
    prefix of a JSON object) does not make its conversation unusable: continued through
    ``previous_response_id``, or replayed whole with ``store: false`` (Codex-style), it renders the
    chat prompt of that call with the members that were complete (``{"city": "Paris"}``, written
    here by hand), where it was a 400 blaming an ``input`` field the client never sent. A
    poisoned history is the failure kind of MoonshotAI/kimi-cli#1378 (a malformed call persisted
    to the session makes it irrecoverable)."""
    tm = PromptTM(tok, CALL)
    client, tc = make_client(tm)
    user = {"role": "user", "content": "Weather in Paris?"}
    cut = None
    for limit in range(4, 60):
        r = client.responses.create(model=MODEL, input=[user], tools=[WEATHER], max_output_tokens=limit)
        # a limit cutting the reply before any text or call leaves ``output`` empty
        last = r.output[-1] if r.output else None
        args = last.arguments if last is not None and last.type == "function_call" else ""
        if args.startswith('{"city": "Paris"') and "3" not in args:
            cut = r
            break
    assert cut is not None and cut.status == "incomplete"
    call = cut.output[-1]
    assert call.status == "incomplete"
    with pytest.raises(ValueError):
        json.loads(call.arguments)  # the case under test: the stored arguments are not JSON
    tm.reply = prompt_reply
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    tool_call = {
        "id": call.call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
    }
    msgs = [
        user,
        {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"},
    ]
    want = chat(client, msgs, tools=[CHAT_WEATHER])
    want_ids = tm.received[-1].input_ids
    r2 = client.responses.create(model=MODEL, previous_response_id=cut.id, input=[result], tools=[WEATHER])
    assert tm.received[-1].input_ids == want_ids and r2.output_text == want.choices[0].message.content
    replay = [user] + [item.model_dump(exclude_none=True) for item in cut.output] + [result]
    r3 = client.responses.create(model=MODEL, input=replay, tools=[WEATHER], store=False)
    assert tm.received[-1].input_ids == want_ids and r3.output_text == r2.output_text
    # a plain message after the cut call continues too (the call stays in the history)
    r4 = client.responses.create(model=MODEL, previous_response_id=cut.id, input="Go on.", tools=[WEATHER])
    assert r4.status == "completed"
    # a later turn chains through r2: the call and its output stay in the prompt (the failure of
    # vllm-project/vllm#43244 was to drop them from the stored context)
    r5 = client.responses.create(model=MODEL, previous_response_id=r2.id, input="Thanks.", tools=[WEATHER])
    r5_ids = tm.received[-1].input_ids
    more = [{"role": "assistant", "content": r2.output_text}, {"role": "user", "content": "Thanks."}]
    want5 = chat(client, msgs + more, tools=[CHAT_WEATHER])
    assert tm.received[-1].input_ids == r5_ids and r5.output_text == want5.choices[0].message.content


def test_tool_choice_and_parallel_calls_reach_the_grammar_as_chat(tok: PreTrainedTokenizerFast) -> None:
    """A named ``tool_choice`` (flat shape) and ``parallel_tool_calls: false`` give the sampling
    parameters (tool-call grammar) chat completions gives for the same request."""
    tm = PromptTM(tok, CALL)
    client, _ = make_client(tm)
    user = {"role": "user", "content": "Weather?"}
    chat(client, [user], tools=[CHAT_WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
         parallel_tool_calls=False)  # fmt: skip
    want = tm.received[-1].sampling_params
    r = client.responses.create(
        model=MODEL, input=[user], tools=[WEATHER], temperature=0, parallel_tool_calls=False,
        tool_choice={"type": "function", "name": "get_weather"},
    )  # fmt: skip
    assert tm.received[-1].sampling_params == want and want.get("structural_tag")
    assert r.tool_choice.name == "get_weather" and r.parallel_tool_calls is False
    assert [json.loads(o.arguments) for o in r.output] == [ARGS]


def test_previous_response_id_continues_the_conversation(tok: PreTrainedTokenizerFast) -> None:
    """Turn 2 with ``previous_response_id`` renders the prompt of the whole chat (turn 1's input
    and output, turn 2's input; turn 1's ``instructions`` not carried over, as in OpenAI's API);
    ``GET`` returns the stored body; ``store: false`` and ``DELETE`` leave nothing to continue;
    an unknown id is a 404 naming ``previous_response_id``."""
    tm = PromptTM(tok)
    client, tc = make_client(tm)
    r1 = client.responses.create(model=MODEL, input="Hi", instructions="Be brief.", temperature=0)
    body2 = tc.post(
        "/v1/responses",
        json={"model": MODEL, "input": "And then?", "previous_response_id": r1.id, "instructions": "Be kind.",
              "temperature": 0},
    ).json()  # fmt: skip
    r2 = OpenAIResponse.model_validate(body2)
    turn2_ids = tm.received[-1].input_ids
    msgs = [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": r1.output_text},
        {"role": "user", "content": "And then?"},
    ]
    want = chat(client, msgs)
    assert tm.received[-1].input_ids == turn2_ids and r2.output_text == want.choices[0].message.content
    assert r2.previous_response_id == r1.id
    # a third turn chains through r2 (which holds r1's turn), streamed
    with client.responses.stream(model=MODEL, input="Last?", previous_response_id=r2.id) as s:
        r3 = s.get_final_response()
    want3 = chat(
        client,
        msgs[1:] + [{"role": "assistant", "content": r2.output_text}, {"role": "user", "content": "Last?"}],
    )
    assert tm.received[-2].input_ids == tm.received[-1].input_ids
    assert r3.output_text == want3.choices[0].message.content
    got = tc.get(f"/v1/responses/{r2.id}")
    assert got.status_code == 200 and got.json() == body2
    assert client.responses.retrieve(r2.id).output_text == r2.output_text
    assert client.responses.retrieve(r3.id).output_text == r3.output_text  # the streamed one is stored too
    n = len(tm.received)
    with pytest.raises(openai.NotFoundError) as ei:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_unknown")
    assert ei.value.body["param"] == "previous_response_id" and "resp_unknown" in ei.value.message
    unstored = client.responses.create(model=MODEL, input="Hi", store=False)
    assert unstored.model_extra.get("store") is False
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="x", previous_response_id=unstored.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    client.responses.delete(r1.id)
    for call in (lambda: client.responses.retrieve(r1.id), lambda: client.responses.delete(r1.id)):
        with pytest.raises(openai.NotFoundError):
            call()
    assert len(tm.received) == n + 1  # only the stored=False request reached the engine


def test_json_schema_format_takes_the_chat_grammar_path(tok: PreTrainedTokenizerFast) -> None:
    """``text.format`` ``json_schema`` / ``json_object`` become the grammar chat completions builds
    from the same ``response_format``; the format is echoed in ``text``."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tm = PromptTM(tok, '{"n": 7}')
    client, _ = make_client(tm)
    user = [{"role": "user", "content": "n?"}]
    for rf, fmt in (
        ({"type": "json_schema", "json_schema": {"name": "N", "schema": schema, "strict": True}},
         {"type": "json_schema", "name": "N", "schema": schema, "strict": True}),
        ({"type": "json_object"}, {"type": "json_object"}),
    ):  # fmt: skip
        chat(client, user, response_format=rf)
        want = tm.received[-1].sampling_params
        r = client.responses.create(model=MODEL, input=user, temperature=0, text={"format": fmt})
        assert tm.received[-1].sampling_params == want and want["json_schema"]
        assert r.text.format.type == fmt["type"] and json.loads(r.output_text) == {"n": 7}
    assert json.loads(want["json_schema"]) == {"type": "object"}
    chat(
        client, user, response_format={"type": "json_schema", "json_schema": {"name": "N", "schema": schema}}
    )
    assert json.loads(tm.received[-1].sampling_params["json_schema"]) == schema


BAD_INPUTS = [
    ({}, "input"),
    ({"input": 5}, "input"),
    ({"input": []}, "input"),
    ({"input": [{"type": "web_search_call", "id": "w"}]}, "input[0].type"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "user"}]}, "input[0].content"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}, "input[0].content[0]"),
    ({"input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]}, "input[0].call_id"),
    ({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}, "input[0].name"),
    # (arguments that are no JSON object are no 400: replayed as DeepSeek's converter replays
    # them, one "arguments" string parameter; see test_public_bugs_tools_twentythird)
    ({"input": [{"role": "user", "content": None}]}, "input[0].content"),
    ({"input": [{"role": "user", "content": "x"}, {"type": "function_call", "call_id": "c", "name": "f",
                "arguments": "{}"}, {"type": "function_call_output", "call_id": "c", "output": None}]},
     "input[2].output"),
    ({"input": [{"type": "reasoning", "summary": [{"type": "x", "text": "t"}]}]}, "input[0].summary[0]"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "tools": [{"type": "function", "parameters": {}}]}, "tools[0].name"),
    ({"input": "x", "tools": [WEATHER, WEATHER]}, "tools[1].name"),
    ({"input": "x", "tools": [dict(WEATHER, strict="false")]}, "tools[0].strict"),
    ({"input": "x", "tools": [dict(WEATHER, description=5)]}, "tools[0].description"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"input": "x", "tool_choice": {"type": "file_search"}}, "tool_choice"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name"),
    ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "s", "schema": {}, "strict": "yes"}}},
     "text.format.strict"),
    ({"input": "x", "reasoning": {"summary": 5}}, "reasoning.summary"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "bogus"}}}}, "text.format"),
    ({"input": "x", "reasoning": {"effort": "bogus"}}, "reasoning.effort"),
    ({"input": "x", "max_output_tokens": -1}, "max_output_tokens"),
    ({"input": "x", "temperature": 3}, "temperature"),
    ({"input": "x", "top_p": "high"}, "top_p"),
    ({"input": "x", "stop": ["\n"]}, "stop"),
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "truncation": "middle"}, "truncation"),
    ({"input": "x", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"input": "x", "previous_response_id": 7}, "previous_response_id"),
]  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_bad_input_is_a_400_naming_the_field(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """Each bad field is a 400 in OpenAI's error shape whose ``param`` (and message) name the
    field as the client sent it, before anything reaches the engine; the route serves the next
    request."""
    tm = PromptTM(tok)
    client, tc = make_client(tm)
    for body, param in BAD_INPUTS:
        r = tc.post("/v1/responses", json={"model": MODEL, "stream": stream, **body})
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert err["param"] == param and param.split("[")[0].split(".")[0] in err["message"], (body, err)
    assert [r.sampling_params.get("json_schema") for r in tm.received] == ['{"type": "bogus"}'] * 1
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(model=MODEL, input=[{"role": "user", "content": "x"}], max_output_tokens=-1)
    assert ei.value.body["param"] == "max_output_tokens"
    with pytest.raises(openai.NotFoundError) as ei:
        client.responses.create(model="other", input="x")
    assert ei.value.body["param"] == "model"
    # the chat route refuses the same wrong-typed flags (a string "false" would read as strict)
    bad_tool = {"type": "function", "function": {"name": "f", "strict": "false"}}
    bad_format = {"type": "json_schema", "json_schema": {"name": "s", "schema": {}, "strict": "yes"}}
    for kw, field in ((dict(tools=[bad_tool]), "tools[0].function.strict"),
                      (dict(response_format=bad_format), "response_format.json_schema.strict")):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as ei:
            chat(client, [{"role": "user", "content": "x"}], **kw)
        assert field in ei.value.message
    assert client.responses.create(model=MODEL, input="ok").status == "completed"


def test_store_is_bounded() -> None:
    """The store keeps at most its entry and byte bounds, dropping the least recently used."""
    from sglang_v4.entrypoints.openai.responses_store import ResponseStore

    store = ResponseStore(max_entries=2, max_bytes=10_000)
    for k in "abc":
        assert store.put(k, {"id": k}, [{"role": "user", "content": k}])
    assert store.get("a") is None and store.get("b") is not None and len(store) == 2
    store.put("d", {"id": "d"}, [])  # "c" is now the least recently used ("b" was read)
    assert store.get("c") is None and store.get("b") is not None
    assert not store.put("big", {"id": "x" * 20_000}, []) and store.get("big") is None
    assert store.bytes == sum(store.get(k).size for k in "bd")
    with pytest.raises(ValueError):
        ResponseStore(max_entries=0)


def test_context_length_400_keeps_the_sentence_of_the_chat_route(tok: PreTrainedTokenizerFast) -> None:
    """A prompt over the context is the chat route's 400 with the field words renamed once:
    vLLM's closing sentence ``Please reduce the length of the input messages.`` stays whole
    (it read ``the input input.`` when every ``messages`` became ``input``), streamed or not."""
    from sglang_v4.managers.control_struct import context_length_message
    from sglang_v4.managers.tokenization import RequestError as EngineRequestError

    class TooLongTM(PromptTM):
        async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
            raise EngineRequestError(context_length_message(self.context_len, self.context_len + 5, None))
            yield  # an async generator, as the real tokenizer manager's

    client, tc = make_client(TooLongTM(tok))
    chat_msg = tc.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
    ).json()["error"]["message"]
    assert chat_msg.endswith("Please reduce the length of the input messages.")
    for stream in (False, True):
        r = tc.post(
            "/v1/responses", json={"model": MODEL, "input": "x", "max_output_tokens": 2, "stream": stream}
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"] == chat_msg

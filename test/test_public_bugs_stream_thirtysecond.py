"""A thirty-second set of public bug reports on the server-sent-event streams of every route: an
over-long streamed prompt refused with an HTTP 400 before any event on all five streaming routes
(chat, completions, Responses, Messages, native ``/generate``), so that each client raises its own
``BadRequestError``; ``n: 2`` tool-call streams and parallel tool calls rebuilt by the ``openai``
client's accumulator; the Responses stream's function-call events and its terminal snapshot; the
Anthropic stream's content blocks opened and closed in order, with the ``anthropic`` client's
accumulator rebuilding the unstreamed message (tool inputs and usage, cached tokens included).

Fixtures: the in-process app of ``admin_app_testutil`` (the real ``TokenizerManager``, whose
scheduler never answers: a request refused before the scheduler is answered, any other hangs) for
the context-length checks; the OpenAI router over ``openai_fake_tm.FakeTM`` (a fixed reply per
choice) and the OpenAI + Anthropic routers over ``fake_prompt_tm.PromptTM`` for the rest.
Oracles: the ``openai`` client's ``BadRequestError``, ``ChatCompletionStreamState`` and
``responses.stream()`` accumulators; the ``anthropic`` client's ``BadRequestError`` and
``MessageStream`` accumulator; the unstreamed answer of the same request; OpenAI's / Anthropic's
API references (a ``tool_use`` block opens with ``input: {}`` and its input arrives as
``input_json_delta``; a block's ``content_block_stop`` follows all its deltas and precedes the next
block's start; ``response.completed`` carries the whole response).

Every report passed as it was; the tests are regression guards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic_testutil import CHAT_WEATHER, WEATHER, make_clients, stream_events
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from fake_prompt_tm import ARGS, CALL, PromptTM
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from openai_fake_tm import FakeTM, app_client, sse_data_events
from responses_testutil import WEATHER as RESP_WEATHER
from responses_testutil import sse
from sglang_v4.managers.io_struct import GenerateReqInput

MODEL = "dsv4-test"
CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "Weather?"}]
#: two calls in one DSML block (what the model writes for parallel tool calls) and their arguments
TWO_CALLS = dsml_block(
    dsml_invoke("get_weather", dsml_param("city", True, "Paris"), dsml_param("days", False, "3")),
    dsml_invoke("get_weather", dsml_param("city", True, "Oslo"), dsml_param("days", False, "1")),
)
TWO_ARGS = [{"city": "Paris", "days": 3}, {"city": "Oslo", "days": 1}]


# --------------------------------------------------------------------------- context limit


@pytest.fixture(scope="module")
def admin_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """``(TestClient, TokenizerManager)`` of ``admin_app_testutil`` with the OpenAI and Anthropic
    routes (context ``ADMIN_CONTEXT`` tokens)."""
    from admin_app_testutil import admin_app_client

    with admin_app_client(tmp_path_factory.mktemp("stream32")) as pair:
        yield pair


@pytest.mark.parametrize(
    ("words", "max_tokens"),
    [(5000, 8), (3000, 2000)],
    ids=["prompt-alone-too-long", "prompt-plus-max-tokens-too-long"],
)
def test_kronk_862_over_long_streamed_prompt_is_a_400_before_the_stream_on_every_route(
    admin_app: tuple[Any, Any], words: int, max_tokens: int
) -> None:
    """ardanlabs/kronk#862 and ggml-org/llama.cpp#16486 (a streamed prompt longer than the context
    was answered HTTP 200 ``text/event-stream`` with the error as an in-band SSE chunk),
    lmstudio-ai/lmstudio-bug-tracker#2322 (clients could not tell the cause from that 200) and
    Mesh-LLM/mesh-llm#1352 (the same for a prompt plus an explicit completion limit over the
    context). Expected on chat, completions, Responses, Messages and native ``/generate``: the
    streamed request is an HTTP 400 JSON error (no ``data:``), the same status and message as
    unstreamed, which the ``openai`` / ``anthropic`` clients raise as their ``BadRequestError``
    before any event; nothing is left in flight."""
    from admin_app_testutil import ADMIN_KEY, ADMIN_NAMES

    tc, tm = admin_app
    name = ADMIN_NAMES[0]
    text = "word " * words
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    msgs = [{"role": "user", "content": text}]
    routes = [
        ("/v1/chat/completions", {"model": name, "messages": msgs, "max_tokens": max_tokens}),
        ("/v1/completions", {"model": name, "prompt": text, "max_tokens": max_tokens}),
        ("/v1/responses", {"model": name, "input": text, "max_output_tokens": max_tokens}),
        ("/v1/messages", {"model": name, "messages": msgs, "max_tokens": max_tokens}),
        ("/generate", {"text": text, "sampling_params": {"max_new_tokens": max_tokens}}),
    ]
    for path, body in routes:
        flat = tc.post(path, json=body, headers=headers)
        streamed = tc.post(path, json={**body, "stream": True}, headers=headers)
        assert flat.status_code == streamed.status_code == 400, (path, streamed.text)
        assert streamed.headers["content-type"].startswith("application/json"), (path, streamed.headers)
        assert not streamed.text.lstrip().startswith(("data:", "event:")), (path, streamed.text)
        assert streamed.json() == flat.json(), path
    oa = openai.OpenAI(base_url="http://testserver/v1", api_key=ADMIN_KEY, http_client=tc, max_retries=0)
    an = anthropic.Anthropic(base_url="http://testserver", api_key=ADMIN_KEY, http_client=tc, max_retries=0)
    with pytest.raises(openai.BadRequestError):
        oa.chat.completions.create(model=name, messages=msgs, max_tokens=max_tokens, stream=True)
    with pytest.raises(openai.BadRequestError):
        oa.completions.create(model=name, prompt=text, max_tokens=max_tokens, stream=True)
    with pytest.raises(openai.BadRequestError):
        oa.responses.create(model=name, input=text, max_output_tokens=max_tokens, stream=True)
    with pytest.raises(anthropic.BadRequestError):
        with an.messages.stream(model=name, messages=msgs, max_tokens=max_tokens) as s:
            s.get_final_message()
    assert tm.rid_to_state == {}


# --------------------------------------------------------------------------- chat tool calls


class _PerChoiceTM(FakeTM):
    """``FakeTM`` whose choice ``k`` of ``n`` writes ``replies[k]`` (no ``#k`` suffix)."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        super().__init__(tokenizer, replies[0])
        self.replies = replies

    def _output(self, sub: GenerateReqInput, k: int) -> list[dict[str, Any]]:
        self.reply = self.replies[k]
        return super()._output(sub, 0)


def _accumulate(events: list[Any]) -> Any:
    """The ``openai`` client's ``ChatCompletionStreamState`` fed every chunk: the final completion."""
    state = ChatCompletionStreamState()
    for e in events:
        state.handle_chunk(ChatCompletionChunk.model_validate(e))
    return state.get_final_completion()


def test_litellm_15962_n_choices_of_tool_calls_stream_under_their_own_index(tok: Any) -> None:
    """BerriAI/litellm#15962 (with ``n > 1`` and tool calls every streamed choice came with
    ``index`` 0, so the choices' calls were merged). Expected: an ``n: 2`` stream whose choices
    each call ``get_weather`` (Paris for one, Oslo for the other) has chunks of choice indices 0
    and 1 only, each choice's calls numbered from 0; the ``openai`` client's accumulator gives two
    choices, each one call whose ``id``-less argument JSON is its own choice's arguments, finish
    ``tool_calls``, as the unstreamed answer has them."""
    oslo = CALL.replace("Paris", "Oslo").replace(">3<", ">1<")
    tm = _PerChoiceTM(tok, [CALL, oslo])
    tc = app_client(tm)
    body = {"model": MODEL, "messages": USER, "tools": [CHAT_WEATHER], "max_tokens": 200, "n": 2}
    whole = tc.post(CHAT, json=body).json()
    events = sse_data_events(tc.post(CHAT, json={**body, "stream": True}))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert {ch["index"] for c in chunks for ch in c["choices"]} == {0, 1}
    for c in chunks:
        for ch in c["choices"]:
            assert {t["index"] for t in ch["delta"].get("tool_calls") or []} <= {0}
    final = _accumulate(chunks)
    got = sorted(final.choices, key=lambda c: c.index)
    want = sorted(whole["choices"], key=lambda c: c["index"])
    assert [c.index for c in got] == [0, 1]
    for g, w, args in zip(got, want, [ARGS, {"city": "Oslo", "days": 1}], strict=True):
        assert g.finish_reason == w["finish_reason"] == "tool_calls"
        assert len(g.message.tool_calls) == len(w["message"]["tool_calls"]) == 1
        call, wcall = g.message.tool_calls[0], w["message"]["tool_calls"][0]
        assert call.function.name == wcall["function"]["name"] == "get_weather"
        assert json.loads(call.function.arguments) == json.loads(wcall["function"]["arguments"]) == args


def test_smolagents_1958_parallel_calls_stream_as_separate_indices(tok: Any) -> None:
    """huggingface/smolagents#1958 (parallel calls streamed under one index were merged into one
    call of concatenated JSON ``{..}{..}``), oracle/langchain-oracle#252 (argument pieces without
    ``id`` were given to the wrong call) and maximhq/bifrost#1982 (indices not sequenced 0, 1).
    Expected: a reply of two ``get_weather`` calls streams call indices 0 then 1, each call's
    ``id`` and name on its first delta only, later pieces of one call keeping its index; the
    ``openai`` client's accumulator gives two calls with distinct ids whose arguments each parse
    to their own call's (Paris 3, Oslo 1), as unstreamed."""
    tm = PromptTM(tok, reply=TWO_CALLS)
    _, oa, tc = make_clients(tm)
    body = {"model": MODEL, "messages": USER, "tools": [CHAT_WEATHER], "max_tokens": 300}
    whole = oa.chat.completions.create(**body)
    events = sse_data_events(tc.post(CHAT, json={**body, "stream": True}))
    assert events[-1] == "[DONE]"
    seen: dict[int, int] = {}
    order: list[int] = []
    for c in events[:-1]:
        for ch in c["choices"]:
            for t in ch["delta"].get("tool_calls") or []:
                i = t["index"]
                if i not in seen:
                    order.append(i)
                    assert t.get("id") and t["function"].get("name") == "get_weather", t
                else:
                    assert t.get("id") is None, t
                seen[i] = seen.get(i, 0) + 1
    assert order == [0, 1]
    final = _accumulate(events[:-1])
    calls = final.choices[0].message.tool_calls
    want = whole.choices[0].message.tool_calls
    assert [json.loads(c.function.arguments) for c in calls] == TWO_ARGS
    assert [json.loads(c.function.arguments) for c in want] == TWO_ARGS
    assert len({c.id for c in calls}) == 2
    assert final.choices[0].finish_reason == whole.choices[0].finish_reason == "tool_calls"


# --------------------------------------------------------------------------- Responses


def test_opencodex_4652_responses_function_call_events_agree_with_the_final_response(tok: Any) -> None:
    """lidge-jun/opencodex#4652 (a client that read tool arguments only from
    ``function_call_arguments.done`` lost them when the stream's events disagreed),
    NVIDIA-NeMo/Switchyard#777 and Oaklight/llm-rosetta#56 (``response.completed`` without the
    output, id or model). Expected for a reply of two parallel calls on ``/v1/responses``: each
    call's ``function_call_arguments.delta`` pieces join to its ``.done`` ``arguments`` and to the
    ``output_item.done`` item's, under the ``item_id`` / ``output_index`` its ``output_item.added``
    gave; ``response.completed`` carries ``id``, ``model`` and an ``output`` equal to the
    ``openai`` client's ``responses.stream()`` final response and to the unstreamed one."""
    tm = PromptTM(tok, reply=TWO_CALLS)
    _, oa, tc = make_clients(tm)
    body = {"model": MODEL, "input": "Weather?", "tools": [RESP_WEATHER], "max_output_tokens": 300}
    whole = oa.responses.create(**body)
    r = tc.post("/v1/responses", json={**body, "stream": True})
    assert r.status_code == 200, r.text
    events = sse(r.text)
    added = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.added"}
    calls = {i: it for i, it in added.items() if it["type"] == "function_call"}
    assert len(calls) == 2
    for i, item in calls.items():
        pieces = [
            e["delta"]
            for e in events
            if e["type"] == "response.function_call_arguments.delta" and e["output_index"] == i
        ]
        assert all(
            e["item_id"] == item["id"]
            for e in events
            if e["type"].startswith("response.function_call_arguments.") and e["output_index"] == i
        )
        (done,) = [
            e
            for e in events
            if e["type"] == "response.function_call_arguments.done" and e["output_index"] == i
        ]
        (item_done,) = [
            e for e in events if e["type"] == "response.output_item.done" and e["output_index"] == i
        ]
        assert "".join(pieces) == done["arguments"] == item_done["item"]["arguments"]
    completed = events[-1]
    assert completed["type"] == "response.completed"
    snap = completed["response"]
    assert snap["id"] and snap["model"] == MODEL and snap["status"] == "completed"
    with oa.responses.stream(**body) as s:
        final = s.get_final_response()
    got = [json.loads(o.arguments) for o in final.output if o.type == "function_call"]
    assert got == [json.loads(o["arguments"]) for o in snap["output"] if o["type"] == "function_call"]
    assert got == [json.loads(o.arguments) for o in whole.output if o.type == "function_call"] == TWO_ARGS


# --------------------------------------------------------------------------- Messages


def _no_id(block: dict[str, Any]) -> dict[str, Any]:
    """A content block without its ``id`` (a fresh ``toolu_`` id per request)."""
    return {k: v for k, v in block.items() if k != "id"}


def test_agentgateway_2147_tool_use_blocks_close_after_their_last_delta(tok: Any) -> None:
    """agentgateway/agentgateway#2147 (a ``tool_use`` block's ``content_block_stop`` came before
    its last ``input_json_delta``) and Yeachan-Heo/gajae-code#1895 (a client that kept the
    ``input`` of ``content_block_start`` lost the streamed one). Expected for a text then two
    calls on ``/v1/messages``: blocks are numbered 0, 1, 2 in order; each block's start, deltas
    and stop are contiguous (no event of another block between them); a ``tool_use`` start has
    ``input: {}`` and its ``partial_json`` pieces parse to the call's arguments; the
    ``anthropic`` client's ``MessageStream`` gives the unstreamed message's blocks and
    ``stop_reason`` ``tool_use``."""
    tm = PromptTM(tok, reply="Checking both." + TWO_CALLS)
    client, _, tc = make_clients(tm)
    body = {"messages": USER, "tools": [WEATHER], "max_tokens": 300}
    events = stream_events(tc, body)
    block_events = [e for e in events if e["type"].startswith("content_block_")]
    runs: list[int] = []
    for e in block_events:
        if not runs or runs[-1] != e["index"]:
            runs.append(e["index"])
    assert runs == [0, 1, 2]  # each block's events are one contiguous run, in order
    for i in runs:
        mine = [e for e in block_events if e["index"] == i]
        assert mine[0]["type"] == "content_block_start" and mine[-1]["type"] == "content_block_stop"
        assert all(e["type"] == "content_block_delta" for e in mine[1:-1])
    inputs = []
    for i in (1, 2):
        mine = [e for e in block_events if e["index"] == i]
        assert mine[0]["content_block"]["type"] == "tool_use" and mine[0]["content_block"]["input"] == {}
        inputs.append(json.loads("".join(e["delta"]["partial_json"] for e in mine[1:-1])))
    assert inputs == TWO_ARGS
    whole = client.messages.create(model=MODEL, **body)
    with client.messages.stream(model=MODEL, **body) as s:
        final = s.get_final_message()
    assert [_no_id(b.model_dump()) for b in final.content] == [_no_id(b.model_dump()) for b in whole.content]
    assert [b.input for b in final.content if b.type == "tool_use"] == TWO_ARGS
    assert final.stop_reason == whole.stop_reason == "tool_use"


def test_anthropic_sdk_994_streamed_usage_accumulates_to_the_unstreamed_usage(tok: Any) -> None:
    """anthropics/anthropic-sdk-python#994 and BerriAI/litellm#31069 (streamed Messages reported
    ``cache_read_input_tokens`` as 0 or null where the unstreamed answer had the cached count),
    decolua/9router#2209 (``input_tokens`` lost when only ``message_delta`` was read) and
    envoyproxy/ai-gateway#2241 (cached tokens counted twice across ``message_start`` and
    ``message_delta``). Expected with the cache report on: the ``anthropic`` client's
    ``MessageStream`` final usage (which takes ``message_delta``'s fields over ``message_start``'s)
    equals the unstreamed usage field by field, cached tokens included and not doubled, and
    ``message_start`` already has the unstreamed ``input_tokens``."""
    tm = PromptTM(tok)
    client, _, tc = make_clients(tm, cache_report=True)
    body = {"messages": USER, "max_tokens": 32}
    whole = client.messages.create(model=MODEL, **body)
    with client.messages.stream(model=MODEL, **body) as s:
        final = s.get_final_message()
    assert whole.usage.cache_read_input_tokens == 2  # PromptTM reports two cached tokens
    for field in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        assert getattr(final.usage, field) == getattr(whole.usage, field), field
    start = stream_events(tc, body)[0]
    assert start["type"] == "message_start"
    assert start["message"]["usage"]["input_tokens"] == whole.usage.input_tokens


def test_vllm_46303_a_call_cut_by_max_tokens_streams_as_truncated_on_every_route(tok: Any) -> None:
    """vllm-project/vllm#46303 and #47963 (a streamed tool call cut by ``max_tokens`` ended with
    ``finish_reason: "tool_calls"``, where the unstreamed answer said ``length``) and
    langchain-ai/langchainjs#11494 (a client keeps truncated arguments aside only when it sees the
    length finish). Expected for a text then a call cut inside its arguments: the chat stream,
    accumulated by the ``openai`` client, has the unstreamed choice's content, call arguments and
    finish ``length``; the Messages stream, accumulated by the ``anthropic`` client, the unstreamed
    blocks and ``stop_reason`` ``max_tokens``; the Responses stream ends with
    ``response.incomplete`` (reason ``max_output_tokens``) whose output has the unstreamed item
    types and call arguments."""
    reply = "Checking." + CALL
    cut = len(tok.encode(reply, add_special_tokens=False)) - 12  # inside the ``days`` parameter
    tm = PromptTM(tok, reply=reply)
    client, oa, tc = make_clients(tm)
    body = {"model": MODEL, "messages": USER, "tools": [CHAT_WEATHER], "max_tokens": cut}
    whole = tc.post(CHAT, json=body).json()["choices"][0]
    events = sse_data_events(tc.post(CHAT, json={**body, "stream": True}))
    state = ChatCompletionStreamState()
    for e in events[:-1]:
        state.handle_chunk(ChatCompletionChunk.model_validate(e))
    got = state.current_completion_snapshot.choices[0]
    assert got.finish_reason == whole["finish_reason"] == "length"
    assert got.message.content == whole["message"]["content"] == "Checking."
    want_calls = [(t["function"]["name"], t["function"]["arguments"]) for t in whole["message"]["tool_calls"]]
    assert [(t.function.name, t.function.arguments) for t in got.message.tool_calls] == want_calls
    ab = {"messages": USER, "tools": [WEATHER], "max_tokens": cut}
    wm = client.messages.create(model=MODEL, **ab)
    with client.messages.stream(model=MODEL, **ab) as s:
        fm = s.get_final_message()
    assert fm.stop_reason == wm.stop_reason == "max_tokens"
    assert [_no_id(b.model_dump()) for b in fm.content] == [_no_id(b.model_dump()) for b in wm.content]
    rb = {"model": MODEL, "input": "Weather?", "tools": [RESP_WEATHER], "max_output_tokens": cut}
    wr = oa.responses.create(**rb)
    last = sse(tc.post("/v1/responses", json={**rb, "stream": True}).text)[-1]
    assert last["type"] == "response.incomplete"
    snap = last["response"]
    assert snap["status"] == wr.status == "incomplete"
    assert snap["incomplete_details"]["reason"] == wr.incomplete_details.reason == "max_output_tokens"
    assert [o["type"] for o in snap["output"]] == [o.type for o in wr.output]
    assert [o["arguments"] for o in snap["output"] if o["type"] == "function_call"] == [
        o.arguments for o in wr.output if o.type == "function_call"
    ]

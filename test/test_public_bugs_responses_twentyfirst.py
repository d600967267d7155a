"""Public bug reports of peer servers' OpenAI Responses API (``/v1/responses``: vLLM, SGLang's
router, Llama Stack, LM Studio, proxies in front of OpenAI), replayed on an in-process app of the
OpenAI router over a fake engine (each test names its report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: the
``/v1/chat/completions`` route on the same fake (the prompt and the grammar of the same
conversation and tools), a cold run (the same conversation sent whole), the ``openai`` client's
own types, stream helper and error classes, and the OpenAI API reference for shapes and statuses.
"""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pytest
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM
from openai.types.responses import Response as OpenAIResponse
from responses_testutil import CHAT_WEATHER, WEATHER, make_client, post, sse
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

#: a second tool, in the Responses and the chat shapes
TIME = {
    **WEATHER,
    "name": "get_time",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
}
CHAT_TIME = {"type": "function", "function": {k: v for k, v in TIME.items() if k != "type"}}


def _prompt(tm: PromptTM) -> list[int]:
    """The prompt ids of the engine's latest request."""
    return list(tm.received[-1].input_ids)


def _grammar(tm: PromptTM) -> dict[str, Any]:
    """The engine's latest sampling parameters that a tool choice or format sets."""
    sp = tm.received[-1].sampling_params or {}
    return {k: sp.get(k) for k in ("json_schema", "regex", "ebnf", "structural_tag")}


def _chat_oracle(client: openai.OpenAI, tm: PromptTM, tools: list[Any], choice: Any) -> tuple[list[int], Any]:
    """The prompt and grammar the chat route gives ``hi`` with ``tools`` and ``choice``."""
    client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=tools, tool_choice=choice
    )
    return _prompt(tm), _grammar(tm)


# --------------------------------------------------------------------------- response object


def test_completed_at_is_set_when_completed_and_null_otherwise(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#38616: the response object had no ``completed_at`` (OpenAI's field: the
    Unix time the response completed, present only when ``status`` is ``completed``). Expected: a
    completed response (non-streamed, the stream's ``response.completed``, and the stored copy)
    has it, an int between the request's start and end and not before ``created_at``; the
    stream's ``response.created`` / ``in_progress`` and a response cut by ``max_output_tokens``
    have ``null``."""
    tm = PromptTM(tok, reply="Hello there.")
    client, tc = make_client(tm)
    start = int(time.time())
    resp, events = post(tc, {"input": "hi"})
    end = int(time.time()) + 1
    for body in (resp, events[-1]["response"]):
        assert body["status"] == "completed"
        parsed = OpenAIResponse.model_validate(body)
        assert isinstance(body["completed_at"], int)
        assert start <= parsed.created_at <= parsed.completed_at <= end
    assert [e["response"]["completed_at"] for e in events[:2]] == [None, None]
    assert client.responses.retrieve(resp["id"]).completed_at == resp["completed_at"]
    cut = tc.post("/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 1}).json()
    assert cut["status"] == "incomplete"
    assert cut["completed_at"] is None


#: the fields the Open Responses specification requires of every response resource (its
#: ``ResponseResource`` schema's ``required`` list, which the audit below checked)
OPEN_RESPONSES_REQUIRED = (
    "id object created_at completed_at status incomplete_details model previous_response_id "
    "instructions output error tools tool_choice truncation parallel_tool_calls text top_p "
    "presence_penalty frequency_penalty top_logprobs temperature reasoning usage max_output_tokens "
    "max_tool_calls store background service_tier metadata safety_identifier prompt_cache_key"
).split()


def test_response_resource_has_every_required_field(tok: PreTrainedTokenizerFast) -> None:
    """Oaklight/llm-rosetta#412: an Open Responses audit of a gateway found fields of the
    response resource missing (``completed_at``, the echoed request fields). Expected: every one
    of the specification's 31 required fields in the non-streamed body, in the stream's
    ``response.created`` and ``response.completed``, and in the stored copy; ``top_logprobs``,
    ``prompt_cache_key``, ``safety_identifier`` and ``presence_penalty`` come back as sent,
    ``background`` is false and ``service_tier`` ``default`` (read through the ``openai``
    client's ``Response`` type); unset echoes are ``null``."""
    assert len(OPEN_RESPONSES_REQUIRED) == 31
    tm = PromptTM(tok, reply="Hi.")
    client, tc = make_client(tm)
    sent = {"top_logprobs": 3, "prompt_cache_key": "conv-7", "safety_identifier": "user-hash-1"}
    resp, events = post(tc, {"input": "hi", "presence_penalty": 0.5, **sent})
    stored = tc.get(f"/v1/responses/{resp['id']}").json()
    for body in (resp, events[0]["response"], events[-1]["response"], stored):
        assert [k for k in OPEN_RESPONSES_REQUIRED if k not in body] == []
        parsed = OpenAIResponse.model_validate(body)
        assert {k: getattr(parsed, k) for k in sent} == sent
        assert (parsed.background, parsed.service_tier, parsed.max_tool_calls) == (False, "default", None)
        assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, 0.0)
    plain = client.responses.create(model=MODEL, input="hi")
    assert {k: getattr(plain, k) for k in sent} == dict.fromkeys(sent)


# --------------------------------------------------------------------------- tool_choice


def test_allowed_tools_required_calls_one_of_the_subset(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#3548: ``tool_choice: {"type": "allowed_tools", ...}`` (OpenAI's way to let the
    model call only a subset of ``tools``) was a 400. Expected: served; with ``mode: "required"``
    the engine gets the prompt and the grammar the chat route gives for the subset alone under
    ``tool_choice: "required"`` (not those of every tool), the call comes back as a
    ``function_call`` item, and the response echoes the ``tool_choice`` (the ``openai`` client's
    ``ToolChoiceAllowed``)."""
    tm = PromptTM(tok, reply=CALL)
    client, tc = make_client(tm)
    oracle = _chat_oracle(client, tm, [CHAT_WEATHER], "required")
    assert oracle[1]["structural_tag"] is not None
    every = _chat_oracle(client, tm, [CHAT_WEATHER, CHAT_TIME], "required")
    assert every != oracle
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "get_weather"}],
    }
    resp, events = post(tc, {"input": "hi", "tools": [TIME, WEATHER], "tool_choice": choice})
    assert (_prompt(tm), _grammar(tm)) == oracle  # the streamed request, post's second
    calls = [o for o in resp["output"] if o["type"] == "function_call"]
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", '{"city": "Paris", "days": 3}')]
    parsed = OpenAIResponse.model_validate(resp).tool_choice
    assert (parsed.type, parsed.mode, parsed.tools) == ("allowed_tools", "required", choice["tools"])
    assert events[-1]["response"]["tool_choice"] == choice


def test_allowed_tools_auto_and_bad_references(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#12668: SGLang's router added ``allowed_tools`` to the Responses API's
    ``tool_choice`` (the tools cut to the allowed ones, ``mode`` as the choice). Expected: with
    ``mode: "auto"`` the prompt and grammar are the chat route's for the subset under ``"auto"``;
    an allowed tool that is not in ``tools``, a wrong ``type`` for it, an empty list or another
    ``mode`` is a 400 naming the ``tool_choice`` field (the ``openai`` client's
    ``BadRequestError``) with nothing run."""
    tm = PromptTM(tok, reply="Sure.")
    client, tc = make_client(tm)
    oracle = _chat_oracle(client, tm, [CHAT_TIME], "auto")
    assert oracle != _chat_oracle(client, tm, [CHAT_WEATHER, CHAT_TIME], "auto")
    ref = {"type": "function", "name": "get_time"}
    r = client.responses.create(
        model=MODEL,
        input="hi",
        tools=[WEATHER, TIME],
        tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [ref]},
    )
    assert (_prompt(tm), _grammar(tm)) == oracle
    assert r.output_text == "Sure."
    n = len(tm.received)
    for bad, param in [
        ({"mode": "auto", "tools": [{"type": "function", "name": "nope"}]}, "tool_choice.tools[0]"),
        ({"mode": "auto", "tools": [ref, {"type": "custom", "name": "get_weather"}]}, "tool_choice.tools[1]"),
        ({"mode": "auto", "tools": []}, "tool_choice.tools"),
        ({"mode": "none", "tools": [ref]}, "tool_choice.mode"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(
                model=MODEL, input="hi", tools=[WEATHER, TIME], tool_choice={"type": "allowed_tools", **bad}
            )
        assert e.value.body["param"] == param
    assert len(tm.received) == n


def test_allowed_tools_is_served_on_the_chat_route_too(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#23227: the Responses route took only ``tool_choice: "auto"``; the other
    choices, OpenAI's ``allowed_tools`` among them, need the grammar path. The Chat Completions
    API has the same choice in its own shape (``{"type": "allowed_tools", "allowed_tools":
    {"mode", "tools": [{"type": "function", "function": {"name"}}]}}``), which was a 400 there.
    Expected: on the chat route, for both modes, the prompt and grammar of the subset alone
    under ``mode`` (the same as the Responses route's), and an allowed tool not in ``tools`` a
    400 naming ``tool_choice.allowed_tools.tools[0]``, nothing run."""
    tm = PromptTM(tok, reply=CALL)
    client, tc = make_client(tm)
    msgs = [{"role": "user", "content": "hi"}]
    ref = [{"type": "function", "function": {"name": "get_weather"}}]
    for mode in ("required", "auto"):
        oracle = _chat_oracle(client, tm, [CHAT_WEATHER], mode)
        allowed = {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": ref}}
        chat = client.chat.completions.create(
            model=MODEL, messages=msgs, tools=[CHAT_TIME, CHAT_WEATHER], tool_choice=allowed
        )
        assert (_prompt(tm), _grammar(tm)) == oracle
        assert [c.function.name for c in chat.choices[0].message.tool_calls] == ["get_weather"]
        flat = {"type": "allowed_tools", "mode": mode, "tools": [{"type": "function", "name": "get_weather"}]}
        r = tc.post(
            "/v1/responses",
            json={"model": MODEL, "input": "hi", "tools": [TIME, WEATHER], "tool_choice": flat},
        )
        assert r.status_code == 200, r.text
        assert (_prompt(tm), _grammar(tm)) == oracle
    n = len(tm.received)
    bad = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "nope"}}]},
    }
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=msgs, tools=[CHAT_WEATHER], tool_choice=bad)
    assert e.value.body["param"] == "tool_choice.allowed_tools.tools[0]"
    assert len(tm.received) == n


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "web_search_preview"},
        {"type": "file_search"},
        {"type": "mcp", "server_label": "dice"},
        {"type": "function"},
        "sometimes",
    ],
)
def test_unserved_tool_choice_is_a_400_not_a_5xx(tok: PreTrainedTokenizerFast, choice: Any) -> None:
    """vllm-project/vllm#53626: a ``tool_choice`` the Responses route does not serve came back as
    HTTP 501 (a server fault) instead of a client error. Expected: 400 in OpenAI's error shape
    naming ``tool_choice`` (the ``openai`` client's ``BadRequestError``; ``tool_choice.name`` for a
    function choice without its name, the field the client's request types require), nothing
    run."""
    tm = PromptTM(tok)
    client, _ = make_client(tm)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", tools=[WEATHER], tool_choice=choice)
    assert e.value.status_code == 400
    assert e.value.body["param"] == ("tool_choice.name" if choice == {"type": "function"} else "tool_choice")
    assert tm.received == []


# --------------------------------------------------------------------------- input and reasoning


def test_input_image_on_a_text_model_is_a_short_400(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#46631: an ``input_image`` part (``image_url`` a URL string, an object,
    or a base64 data URL) gave a validation error that dumped the whole base64 payload. This
    model reads text only. Expected: a 400 naming the part (``input[0].content[1]``), whose
    message does not repeat the image data, nothing run; the same message without the image is
    served."""
    tm = PromptTM(tok, reply="Text.")
    client, tc = make_client(tm)
    blob = "data:image/png;base64," + "iVBORw0KGgo" * 400
    for image in (
        {"image_url": blob},
        {"image_url": "https://example.com/a.jpg"},
        {"image_url": {"url": blob}},
    ):
        part = {"type": "input_image", **image}
        msg = {"role": "user", "content": [{"type": "input_text", "text": "What is it?"}, part]}
        r = tc.post("/v1/responses", json={"model": MODEL, "input": [msg]})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "input[0].content[1]"
        assert "iVBORw0KGgo" not in err["message"] and len(err["message"]) < 300
    assert tm.received == []
    text_only = [{"role": "user", "content": [{"type": "input_text", "text": "What is it?"}]}]
    assert client.responses.create(model=MODEL, input=text_only).output_text == "Text."


def test_reasoning_summary_none_is_refused_as_openai_does(tok: PreTrainedTokenizerFast) -> None:
    """openai/codex#7845: Codex sent ``reasoning.summary: "none"`` and OpenAI answered 400
    ("Invalid value: 'none'. Supported values are: 'concise', 'detailed', and 'auto'.", param
    ``reasoning.summary``). Expected: the same 400 (``BadRequestError``, param
    ``reasoning.summary``) with nothing run; the supported values and an omitted summary are
    served."""
    tm = PromptTM(tok, reply="Ok.")
    client, _ = make_client(tm)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", reasoning={"summary": "none"})
    assert e.value.body["param"] == "reasoning.summary"
    assert tm.received == []
    for summary in ("auto", "concise", "detailed", None):
        r = client.responses.create(model=MODEL, input="hi", reasoning={"effort": "high", "summary": summary})
        assert r.status == "completed"


# --------------------------------------------------------------------------- streaming


def test_message_stream_sends_output_text_done_before_content_part_done(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#5309: a stream skipped ``response.output_text.done``. OpenAI's order for a
    message: ``output_item.added``, ``content_part.added``, ``output_text.delta``...,
    ``output_text.done`` (the whole text), ``content_part.done``, ``output_item.done``. Expected:
    that order, ``output_text.done``'s text the deltas joined and the non-streamed text."""
    tm = PromptTM(tok, reply="One two three four.")
    _, tc = make_client(tm)
    resp, events = post(tc, {"input": "hi"})
    kinds = [e["type"] for e in events if e["type"] not in ("response.created", "response.in_progress")]
    n = kinds.count("response.output_text.delta")
    assert n >= 2
    assert kinds == [
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * n,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    done = next(e for e in events if e["type"] == "response.output_text.done")
    part = next(e for e in events if e["type"] == "response.content_part.done")
    assert done["text"] == part["part"]["text"] == text == resp["output"][0]["content"][0]["text"]


def test_stream_helper_accumulates_the_final_response(tok: PreTrainedTokenizerFast) -> None:
    """Wei-Shaw/sub2api#4468: without ``content_part.added`` the ``openai`` client's
    ``responses.stream`` helper failed on the first delta (IndexError), and an empty ``output``
    in ``response.completed`` gave ``get_final_response()`` no text. Expected: the helper reads
    the stream through, and its final response has the non-streamed response's text, with the
    text and the function call of a reply that calls a tool."""
    tm = PromptTM(tok, reply="Let me check." + CALL)
    client, _ = make_client(tm)
    cold = client.responses.create(model=MODEL, input="hi", tools=[WEATHER])
    with client.responses.stream(model=MODEL, input="hi", tools=[WEATHER]) as s:
        deltas = "".join(ev.delta for ev in s if ev.type == "response.output_text.delta")
        final = s.get_final_response()
    assert final.output_text == cold.output_text == deltas == "Let me check."
    calls = [(o.name, o.arguments) for o in final.output if o.type == "function_call"]
    assert calls == [(o.name, o.arguments) for o in cold.output if o.type == "function_call"]
    assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", ARGS)]


# --------------------------------------------------------------------------- previous_response_id


def test_streamed_response_id_continues_the_conversation(tok: PreTrainedTokenizerFast) -> None:
    """lmstudio-ai/lmstudio-bug-tracker#1188: the id of a streamed ``response.completed`` was
    unknown to ``previous_response_id`` ("previous_response_not_found"). Expected: a streamed
    turn's id continues the conversation, streamed and not, and the prompt is the cold run's: the
    whole conversation (turn 1, its reply, turn 2) sent as input items."""
    tm = PromptTM(tok, reply="Paris is sunny.")
    client, tc = make_client(tm)
    with client.responses.create(model=MODEL, input="Weather in Paris?", stream=True) as s:
        first = [ev.response for ev in s if ev.type == "response.completed"][0]
    turn2 = [{"role": "user", "content": "And tomorrow?"}]
    cont = client.responses.create(model=MODEL, input=turn2, previous_response_id=first.id)
    continued = _prompt(tm)
    with client.responses.create(model=MODEL, input=turn2, previous_response_id=first.id, stream=True) as s:
        assert [ev.type for ev in s][-1] == "response.completed"
    assert _prompt(tm) == continued
    whole = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": first.output_text},
        *turn2,
    ]
    cold = client.responses.create(model=MODEL, input=whole, store=False)
    assert _prompt(tm) == continued
    assert cont.output_text == cold.output_text
    assert cont.previous_response_id == first.id


def test_continued_response_lists_the_previous_input_items(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#2074: a response continued by ``previous_response_id`` carried only the
    previous response's output, not the input items that went into it. Expected: ``GET
    /v1/responses/{id}/input_items`` of the continued response lists turn 1's user message, turn
    1's reply and turn 2's message (newest first, OpenAI's default order), read by the ``openai``
    client."""
    tm = PromptTM(tok, reply="Noted.")
    client, _ = make_client(tm)
    first = client.responses.create(model=MODEL, input="My name is Ada.")
    second = client.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id)
    items = list(client.responses.input_items.list(second.id))
    texts = [(i.type, i.role, i.content[0].text) for i in items]
    assert texts == [
        ("message", "user", "What is my name?"),
        ("message", "assistant", "Noted."),
        ("message", "user", "My name is Ada."),
    ]


# --------------------------------------------------------------------------- stream identity and usage


def test_streamed_item_ids_are_stable_through_the_lifecycle(tok: PreTrainedTokenizerFast) -> None:
    """EricLBuehler/mistral.rs#1944: a streamed message got a fresh id at ``output_item.added``,
    at ``output_item.done`` and in ``response.completed``, so clients could not correlate them.
    Expected: for a reply of text then a call, each item keeps one id through ``added``, its
    deltas' ``item_id``, ``done``, the final ``response.completed`` output and the stored response
    (``GET``), at the ``output_index`` where it was added; the call's ``name`` is the same in
    ``added`` and ``done``."""
    tm = PromptTM(tok, reply="Let me check." + CALL)
    client, tc = make_client(tm)
    r = tc.post("/v1/responses", json={"model": MODEL, "input": "hi", "tools": [WEATHER], "stream": True})
    events = sse(r.text)
    added = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.added"}
    done = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    final = events[-1]["response"]["output"]
    assert [i["type"] for i in final] == ["message", "function_call"]
    assert (
        [added[k]["id"] for k in sorted(added)]
        == [done[k]["id"] for k in sorted(done)]
        == [i["id"] for i in final]
    )
    for e in events:
        if "item_id" in e:
            assert e["item_id"] == added[e["output_index"]]["id"], e
    assert added[1]["name"] == done[1]["name"] == "get_weather"
    stored = client.responses.retrieve(events[-1]["response"]["id"])
    assert [i.id for i in stored.output] == [i["id"] for i in final]


def test_cached_prompt_tokens_reach_the_usage(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#23363: the Responses usage reported ``cached_tokens`` 0 whatever the
    prefix cache served. Expected: ``usage.input_tokens_details.cached_tokens`` is the engine's
    count of prompt tokens served from the cache (the fake engine reports 2), streamed and not,
    and ``total_tokens`` is input plus output (the ``openai`` client's ``ResponseUsage``)."""
    tm = PromptTM(tok, reply="Cached.")
    _, tc = make_client(tm)
    resp, events = post(tc, {"input": "hi"})
    for body in (resp, events[-1]["response"]):
        usage = OpenAIResponse.model_validate(body).usage
        assert usage.input_tokens_details.cached_tokens == 2
        assert usage.input_tokens == len(tm.received[-1].input_ids)
        assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_streamed_retrieve_of_a_finished_response_is_refused(tok: PreTrainedTokenizerFast) -> None:
    """exo-explore/exo#1356: ``GET /v1/responses/{id}?stream=true&starting_after=N`` (OpenAI's
    resumable stream of a ``background`` response) was not served. This server runs no
    background response; the route answered with the JSON body, which the ``openai`` client,
    expecting server-sent events, read as a stream of no events. Expected: a 400 naming
    ``stream`` (the client's ``BadRequestError``), an unknown id still a 404, and the response
    unchanged and retrievable without ``stream``."""
    tm = PromptTM(tok, reply="Done.")
    client, tc = make_client(tm)
    resp = client.responses.create(model=MODEL, input="hi")
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.retrieve(resp.id, stream=True, starting_after=3)
    assert e.value.body["param"] == "stream"
    assert tc.get(f"/v1/responses/{resp.id}?stream=true").status_code == 400
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_" + "0" * 32, stream=True)
    again = client.responses.retrieve(resp.id)
    assert again.output_text == "Done." and again.id == resp.id
    assert (
        tc.get(f"/v1/responses/{resp.id}?stream=false").json()["output"][0]["content"][0]["text"] == "Done."
    )


@pytest.mark.parametrize("top", [21, -2, 100000])
def test_out_of_range_top_logprobs_is_refused_with_or_without_include(
    tok: PreTrainedTokenizerFast, top: int
) -> None:
    """sgl-project/sglang#28794: an out-of-range ``top_logprobs`` must be refused at the API
    boundary. On ``/v1/responses`` it was checked only with ``include:
    ["message.output_text.logprobs"]``; without it the value was accepted (and is echoed on the
    response). Expected: the 400 the chat route gives the same count with ``logprobs: true``
    (same message, param ``top_logprobs``), with or without the ``include``, nothing run; 0..20
    are served."""
    tm = PromptTM(tok, reply="Ok.")
    client, tc = make_client(tm)
    with pytest.raises(openai.BadRequestError) as chat_err:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=top
        )
    for include in ([], ["message.output_text.logprobs"]):
        r = tc.post(
            "/v1/responses", json={"model": MODEL, "input": "hi", "top_logprobs": top, "include": include}
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "top_logprobs"
        assert r.json()["error"]["message"] == chat_err.value.body["message"]
    assert tm.received == []
    for ok in (0, 20):
        assert client.responses.create(model=MODEL, input="hi", top_logprobs=ok).top_logprobs == ok

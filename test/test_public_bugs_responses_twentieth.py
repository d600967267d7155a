"""Public bug reports of peer servers' OpenAI Responses API (``/v1/responses``: vLLM, SGLang's
gateway, LM Studio, LiteLLM, proxies in front of OpenAI), replayed on an in-process app of the
OpenAI router over a fake engine (each test names its report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: the
``/v1/chat/completions`` route on the same fake (the sampling parameters and the usage of the same
conversation), a cold run (the same conversation sent whole), the ``openai`` client's own types
and error classes, and the OpenAI API reference for the shapes and statuses.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import openai
import pytest
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM
from openai.types.responses import Response as OpenAIResponse
from responses_testutil import CHAT_WEATHER, WEATHER, make_client, post
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

USER = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]}]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
#: the tool loop's answer to the call (``function_call_output`` item); its ``call_id`` is set later
RESULT = {"type": "function_call_output", "output": "sunny"}


def _prompt(tm: PromptTM) -> str:
    """The prompt text of the engine's latest request."""
    return tm.tokenizer.decode(tm.received[-1].input_ids)


def _sampling(tm: PromptTM) -> dict[str, Any]:
    """The engine's latest sampling parameters that a format or tool choice sets."""
    sp = tm.received[-1].sampling_params or {}
    return {k: sp.get(k) for k in ("json_schema", "regex", "ebnf", "structural_tag")}


# --------------------------------------------------------------------------- structured output


def test_chat_shaped_response_format_json_schema_constrains_the_reply(tok: PreTrainedTokenizerFast) -> None:
    """lmstudio-ai/lmstudio-bug-tracker#2403: a ``/v1/responses`` request with the chat-shaped
    ``response_format: {"type": "json_schema", "json_schema": {...}}`` came back as free markdown
    while ``/v1/chat/completions`` gave JSON. Expected: the engine gets the grammar the chat route
    gives it for that ``response_format``, and the response echoes it as ``text.format`` (OpenAI's
    field, the ``openai`` client's type)."""
    tm = PromptTM(tok, reply='{"city": "Paris", "days": 3}')
    client, tc = make_client(tm)
    rf = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}}
    client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Weather?"}], response_format=rf
    )
    oracle = _sampling(tm)
    assert oracle["json_schema"] is not None
    resp, events = post(tc, {"input": USER, "response_format": rf})
    assert _sampling(tm) == oracle  # the streamed request (post's second) too
    tc.post("/v1/responses", json={"model": MODEL, "input": USER, "response_format": rf})
    assert _sampling(tm) == oracle
    fmt = OpenAIResponse.model_validate(resp).text.format
    assert (fmt.type, fmt.name, fmt.schema_, fmt.strict) == ("json_schema", "weather", SCHEMA, True)
    assert events[-1]["response"]["text"] == resp["text"]


def test_response_format_is_never_silently_dropped(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#37125: ``response_format`` on the Responses path was accepted and silently
    ignored (200, unconstrained prose). Expected: ``{"type": "json_object"}`` constrains the reply
    as ``text.format: {"type": "json_object"}`` does (same engine parameters), and a
    ``response_format`` that asks for another format than the request's ``text.format`` is a 400
    naming ``response_format`` (the ``openai`` client's ``BadRequestError``) with nothing run."""
    tm = PromptTM(tok, reply="{}")
    client, tc = make_client(tm)
    r = tc.post(
        "/v1/responses", json={"model": MODEL, "input": "hi", "text": {"format": {"type": "json_object"}}}
    )
    assert r.status_code == 200, r.text
    oracle = _sampling(tm)
    assert oracle != _sampling_of_plain(tm, tc)
    r = tc.post(
        "/v1/responses", json={"model": MODEL, "input": "hi", "response_format": {"type": "json_object"}}
    )
    assert r.status_code == 200, r.text
    assert _sampling(tm) == oracle
    assert r.json()["text"]["format"] == {"type": "json_object"}
    n = len(tm.received)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(
            model=MODEL,
            input="hi",
            text={"format": {"type": "text"}},
            extra_body={"response_format": {"type": "json_object"}},
        )
    assert e.value.body["param"] == "response_format"
    assert len(tm.received) == n


def _sampling_of_plain(tm: PromptTM, tc: Any) -> dict[str, Any]:
    """The sampling parameters of a plain-text request (no format)."""
    assert tc.post("/v1/responses", json={"model": MODEL, "input": "hi"}).status_code == 200
    return _sampling(tm)


def test_json_schema_format_without_name_is_a_400(tok: PreTrainedTokenizerFast) -> None:
    """jamesrochabrun/SwiftOpenAI#151: ``text.format`` of type ``json_schema`` without ``name``
    is refused by OpenAI ("Missing required parameter: 'text.format.name'"). Expected: a 400
    naming ``text.format.name`` (the ``openai`` client's ``BadRequestError``), nothing run; the
    same format with its ``name`` is served."""
    tm = PromptTM(tok, reply="{}")
    client, tc = make_client(tm)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(
            model=MODEL, input="hi", text={"format": {"type": "json_schema", "schema": SCHEMA}}
        )
    assert e.value.body["param"] == "text.format.name"
    assert tm.received == []
    r = tc.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "input": "hi",
            "text": {"format": {"type": "json_schema", "name": "w", "schema": SCHEMA}},
        },
    )
    assert r.status_code == 200, r.text


# --------------------------------------------------------------------------- tools


def test_flat_function_tool_choice_forces_that_function(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#29812: the Responses API's flat ``tool_choice: {"type": "function", "name":
    ...}`` was turned into ``"required"`` (any tool) on the way to chat. Expected: the engine gets
    the constraint the chat route gives for the named choice of that function, not the one of
    ``"required"``; the call comes back as a ``function_call`` item of that name."""
    tm = PromptTM(tok, reply=CALL)
    client, tc = make_client(tm)
    other = {**CHAT_WEATHER, "function": {**CHAT_WEATHER["function"], "name": "get_time"}}
    msgs = [{"role": "user", "content": "Weather?"}]
    named = {"type": "function", "function": {"name": "get_weather"}}
    client.chat.completions.create(model=MODEL, messages=msgs, tools=[CHAT_WEATHER, other], tool_choice=named)
    oracle = _sampling(tm)
    client.chat.completions.create(
        model=MODEL, messages=msgs, tools=[CHAT_WEATHER, other], tool_choice="required"
    )
    assert _sampling(tm) != oracle
    flat_other = {**WEATHER, "name": "get_time"}
    body = {
        "input": USER,
        "tools": [WEATHER, flat_other],
        "tool_choice": {"type": "function", "name": "get_weather"},
    }
    resp, _ = post(tc, body)
    assert _sampling(tm) == oracle
    calls = [o for o in resp["output"] if o["type"] == "function_call"]
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", '{"city": "Paris", "days": 3}')]
    assert resp["tool_choice"] == {"type": "function", "name": "get_weather"}


# --------------------------------------------------------------------------- store and replay


def test_store_false_response_is_neither_retrievable_nor_continuable(tok: PreTrainedTokenizerFast) -> None:
    """smg-project/smg#916: with ``store: false`` a non-streamed response was stored anyway (and
    could be continued). OpenAI: not persisted, ``GET`` is a 404 and a ``previous_response_id``
    naming it is a 404 too. Expected: both, streamed and not, as the ``openai`` client's
    ``NotFoundError``; the same request with ``store: true`` is retrievable."""
    tm = PromptTM(tok, reply="Hello.")
    client, tc = make_client(tm)
    ids = [client.responses.create(model=MODEL, input="hi", store=False).id]
    with client.responses.create(model=MODEL, input="hi", store=False, stream=True) as s:
        ids += [ev.response.id for ev in s if ev.type == "response.completed"]
    assert len(ids) == 2
    for rid in ids:
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(rid)
        with pytest.raises(openai.NotFoundError) as e:
            client.responses.create(model=MODEL, input="again", previous_response_id=rid)
        assert e.value.body["param"] == "previous_response_id"
    kept = client.responses.create(model=MODEL, input="hi")
    assert client.responses.retrieve(kept.id).output_text == "Hello."


def test_replayed_items_with_unstored_ids_are_read_not_looked_up(tok: PreTrainedTokenizerFast) -> None:
    """jrkropp/open-webui-developer-toolkit#715: with ``store: false``, a tool-call turn replayed
    with its items' own ``id`` fields was a 400 (the server looked the ids up in its store).
    Expected: 200, and the prompt of the same items sent without their ids (a cold run)."""
    tm = PromptTM(tok, reply="Checking." + CALL)
    _, tc = make_client(tm)
    first = tc.post("/v1/responses", json={"model": MODEL, "input": USER, "tools": [WEATHER], "store": False})
    assert first.status_code == 200, first.text
    out = first.json()["output"]
    call = next(o for o in out if o["type"] == "function_call")
    result = {**RESULT, "call_id": call["call_id"]}
    with_ids = USER + out + [{**result, "id": "fco_client_side_1"}]
    without = [{k: v for k, v in it.items() if k != "id"} for it in USER + out + [result]]
    body = {"model": MODEL, "tools": [WEATHER], "store": False}
    r = tc.post("/v1/responses", json={**body, "input": without})
    assert r.status_code == 200, r.text
    cold = _prompt(tm)
    r = tc.post("/v1/responses", json={**body, "input": with_ids})
    assert r.status_code == 200, r.text
    assert _prompt(tm) == cold


def _codex_replay(item: dict[str, Any]) -> dict[str, Any]:
    """A reasoning item as Codex replays it: ``id``, ``summary`` and ``encrypted_content``, its
    ``reasoning_text`` content left out."""
    return {k: v for k, v in item.items() if k in ("type", "id", "summary", "encrypted_content")}


def test_encrypted_reasoning_carries_the_reasoning_of_a_stateless_tool_loop(
    tok: PreTrainedTokenizerFast,
) -> None:
    """vllm-project/vllm#57323: a ``store: false`` client (Codex) that asks for ``include:
    ["reasoning.encrypted_content"]`` replays the reasoning of a tool-call turn by its
    ``encrypted_content`` only, and the server had none to give: the reasoning fell out of the
    next prompt. Expected: the reasoning item carries ``encrypted_content`` (non-streamed, in the
    streamed ``output_item.done`` and ``response.completed``; the ``openai`` client's types), and
    the turn replayed with the blobs only renders the prompt of the same turn continued by
    ``previous_response_id`` (the stored conversation: the oracle)."""
    tm = PromptTM(tok, reply="Look it up.</think>" + CALL)
    _, tc = make_client(tm)
    body = {"tools": [WEATHER], "reasoning": {"effort": "high"}}
    stored = tc.post("/v1/responses", json={"model": MODEL, "input": USER, **body}).json()
    call = next(o for o in stored["output"] if o["type"] == "function_call")
    r = tc.post(
        "/v1/responses",
        json={
            "model": MODEL,
            **body,
            "previous_response_id": stored["id"],
            "input": [{**RESULT, "call_id": call["call_id"]}],
        },
    )
    assert r.status_code == 200, r.text
    oracle = _prompt(tm)
    assert "Look it up." in oracle

    stateless = {**body, "store": False, "include": ["reasoning.encrypted_content"]}
    resp, events = post(tc, {"input": USER, **stateless})
    streamed = next(
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning"
    )
    for item in (resp["output"][0], streamed, events[-1]["response"]["output"][0]):
        assert item["type"] == "reasoning" and item["content"][0]["text"] == "Look it up."
        assert isinstance(item["encrypted_content"], str) and "Look it up." not in item["encrypted_content"]
    call = next(o for o in resp["output"] if o["type"] == "function_call")
    items = USER + [_codex_replay(resp["output"][0]), call, {**RESULT, "call_id": call["call_id"]}]
    r = tc.post("/v1/responses", json={"model": MODEL, **stateless, "input": items})
    assert r.status_code == 200, r.text
    assert _prompt(tm) == oracle
    # the streamed blob replays the same
    items[1] = _codex_replay(streamed)
    assert tc.post("/v1/responses", json={"model": MODEL, **stateless, "input": items}).status_code == 200
    assert _prompt(tm) == oracle
    # without the include, no blob (OpenAI's default)
    plain = tc.post("/v1/responses", json={"model": MODEL, "input": USER, **body, "store": False}).json()
    assert "encrypted_content" not in plain["output"][0]


def test_reasoning_items_with_ids_and_foreign_blobs_under_store_false(tok: PreTrainedTokenizerFast) -> None:
    """maximhq/bifrost#5410: ``store: false`` with reasoning items replayed by ``id`` and
    ``encrypted_content`` was a 400 "Item with id 'rs_...' not found". Expected: another
    server's blob (OpenAI's ``gAAAA...``) is opaque and replays no text (the prompt of the input
    without the item, a cold run), not a lookup by id; a blob of this server's format that was
    altered in transit is a 400 naming ``input[1].encrypted_content`` (the ``openai`` client's
    ``BadRequestError``) with nothing run."""
    tm = PromptTM(tok, reply="Done.")
    client, tc = make_client(tm)
    again = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}]}
    foreign = {
        "type": "reasoning",
        "id": "rs_03ede13b80370d1b",
        "summary": [],
        "encrypted_content": "gAAAAABqX1a78BDqk",
    }
    body = {
        "model": MODEL,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "none"},
    }
    assert tc.post("/v1/responses", json={**body, "input": USER + [again]}).status_code == 200
    cold = _prompt(tm)
    r = tc.post("/v1/responses", json={**body, "input": USER + [foreign, again]})
    assert r.status_code == 200, r.text
    assert _prompt(tm) == cold

    tm2 = PromptTM(tok, reply="Because.</think>Done.")
    _, tc2 = make_client(tm2)
    own = tc2.post("/v1/responses", json={**body, "input": USER, "reasoning": {"effort": "high"}}).json()[
        "output"
    ][0]
    blob = own["encrypted_content"]
    altered = {
        **_codex_replay(own),
        "encrypted_content": blob[:-6] + ("A" if blob[-6] != "A" else "B") + blob[-5:],
    }
    n = len(tm.received)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input=USER + [copy.deepcopy(altered), again], store=False)
    assert e.value.body["param"] == "input[1].encrypted_content"
    assert len(tm.received) == n


# --------------------------------------------------------------------------- stream and usage


def test_token_limit_stream_ends_with_response_incomplete(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/agentic-api#273: a stream cut by ``max_output_tokens`` ended with a
    ``response.completed`` event whose response was ``incomplete``, and gateways reading the event
    type lost the truncation. Expected (OpenAI's ``ResponseIncompleteEvent``): the terminal event
    is ``response.incomplete``, no ``response.completed`` is sent, its response is the
    non-streamed one's (status, ``incomplete_details``, text, usage)."""
    tm = PromptTM(tok, reply="one two three four five six seven eight nine ten")
    _, tc = make_client(tm)
    resp, events = post(tc, {"input": "count", "max_output_tokens": 4})
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "response.incomplete" and "response.completed" not in kinds
    done = events[-1]["response"]
    assert resp["status"] == done["status"] == "incomplete"
    assert resp["incomplete_details"] == done["incomplete_details"] == {"reason": "max_output_tokens"}
    assert resp["usage"]["output_tokens"] == done["usage"]["output_tokens"] == 4
    text = tok.decode(
        tok.encode("one two three four five six seven eight nine ten", add_special_tokens=False)[:4]
    )
    assert (
        OpenAIResponse.model_validate(done).output_text
        == OpenAIResponse.model_validate(resp).output_text
        == text
    )


def test_stream_events_are_numbered_and_completed_carries_format_and_usage_details(
    tok: PreTrainedTokenizerFast,
) -> None:
    """BerriAI/litellm#28899: Responses streams were sent without ``sequence_number`` (or with
    0 on some events), without ``text.format`` in the final response and without the usage
    details. Expected: every event numbered 0, 1, 2... in order (validated against the ``openai``
    client's event types), the ``response.completed`` response carrying the request's
    ``text.format`` and ``usage`` with ``input_tokens_details.cached_tokens`` and
    ``output_tokens_details.reasoning_tokens`` (OpenAI's required fields), equal to the
    non-streamed response's."""
    tm = PromptTM(tok, reply='Plan.</think>{"city": "Paris", "days": 3}')
    _, tc = make_client(tm)
    fmt = {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}
    resp, events = post(tc, {"input": USER, "text": {"format": fmt}, "reasoning": {"effort": "high"}})
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = events[-1]
    assert done["type"] == "response.completed"
    assert done["response"]["text"]["format"] == resp["text"]["format"] == fmt
    for usage in (done["response"]["usage"], resp["usage"]):
        assert usage["output_tokens_details"]["reasoning_tokens"] > 0
        assert isinstance(usage["input_tokens_details"]["cached_tokens"], int)
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert done["response"]["usage"]["output_tokens"] == resp["usage"]["output_tokens"]


def test_reasoning_tokens_of_responses_equal_chat_completions(tok: PreTrainedTokenizerFast) -> None:
    """ZhiYi-R/moon-bridge#113: ``usage.output_tokens_details.reasoning_tokens`` of a Responses
    reply was always 0, though the model reasoned. Expected: the count the chat route reports
    (``completion_tokens_details.reasoning_tokens``) for the same conversation, and the same
    output and input token counts, streamed and not."""
    tm = PromptTM(tok, reply="Let me think about the weather.</think>Sunny.")
    client, tc = make_client(tm)
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather?"}],
        reasoning_effort="high",
        temperature=0,
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    oracle = chat.usage
    assert oracle.completion_tokens_details.reasoning_tokens > 0
    resp, events = post(tc, {"input": "Weather?", "reasoning": {"effort": "high"}, "temperature": 0})
    for usage in (resp["usage"], events[-1]["response"]["usage"]):
        assert (
            usage["output_tokens_details"]["reasoning_tokens"]
            == oracle.completion_tokens_details.reasoning_tokens
        )
        assert usage["output_tokens"] == oracle.completion_tokens
        assert usage["input_tokens"] == oracle.prompt_tokens
    assert resp["output"][0]["content"][0]["text"] == chat.choices[0].message.reasoning_content


def test_streamed_tool_call_is_a_function_call_item_not_text(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#36445: on non-harmony models the streamed Responses reply carried a tool
    call as message text (or a whitespace-only message before it), with no
    ``response.function_call_arguments.*`` events. Expected: a reply that is only a call streams
    one ``function_call`` item and no message item; its argument deltas, under the item id and
    output index ``output_item.added`` announced, concatenate to the ``.done`` event's
    ``arguments`` and to the ``output_item.done`` item's, whose JSON is the model's call; the
    non-streamed output is the same single item."""
    tm = PromptTM(tok, reply=CALL)
    _, tc = make_client(tm)
    resp, events = post(tc, {"input": USER, "tools": [WEATHER]})
    assert [o["type"] for o in resp["output"]] == ["function_call"]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [a["item"]["type"] for a in added] == ["function_call"]
    idx, item_id = added[0]["output_index"], added[0]["item"]["id"]
    assert not any(e["type"].startswith("response.output_text") for e in events)
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    item_done = next(e for e in events if e["type"] == "response.output_item.done")
    assert deltas and all((d["output_index"], d["item_id"]) == (idx, item_id) for d in deltas)
    assert (done["output_index"], done["item_id"], item_done["output_index"]) == (idx, item_id, idx)
    whole = "".join(d["delta"] for d in deltas)
    assert whole == done["arguments"] == item_done["item"]["arguments"]
    assert json.loads(whole) == json.loads(resp["output"][0]["arguments"]) == ARGS
    assert done["sequence_number"] < item_done["sequence_number"] < events[-1]["sequence_number"]
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["function_call"]


class _PrefixCacheTM(PromptTM):
    """A :class:`PromptTM` that reports as ``cached_tokens`` the longest prompt prefix it has seen
    before (a radix cache of every earlier prompt plus its reply), as the engine counts them."""

    def __init__(self, tokenizer: Any, reply: str) -> None:
        super().__init__(tokenizer, reply=reply)
        self.seen: list[list[int]] = []

    async def generate_request(self, obj: Any, request: Any = None) -> Any:
        ids = list(obj.input_ids)
        hit = max((_common_prefix(ids, s) for s in self.seen), default=0)
        self.seen.append(ids + self.tokenizer.encode(self.reply, add_special_tokens=False))
        async for out in super().generate_request(obj, request):
            yield dict(out, meta_info=dict(out["meta_info"], cached_tokens=hit))


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_cached_tokens_of_a_continued_response_are_the_shared_prefix(tok: PreTrainedTokenizerFast) -> None:
    """EricLBuehler/mistral.rs#2398 (Responses ``usage.input_tokens_details.cached_tokens`` was
    not reported): a turn continued by ``previous_response_id`` re-reads the whole earlier
    conversation from the prefix cache. Expected: ``cached_tokens`` is the engine's count, which
    is the length of the prompt prefix the second turn shares with the first turn's prompt and
    reply (computed from the two token lists), streamed and not; 0 on a cold first turn; never
    more than ``input_tokens``."""
    tm = _PrefixCacheTM(tok, reply="Fine.")
    client, _ = make_client(tm)
    first = client.responses.create(model=MODEL, input="A long question about the weather in Paris.")
    assert first.usage.input_tokens_details.cached_tokens == 0
    first_ids = tm.seen[-1]
    second = client.responses.create(model=MODEL, input="And tomorrow?", previous_response_id=first.id)
    shared = _common_prefix(list(tm.received[-1].input_ids), first_ids)
    assert shared > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens == shared <= second.usage.input_tokens
    with client.responses.stream(model=MODEL, input="And tomorrow?", previous_response_id=first.id) as s:
        done = s.get_final_response()
    shared = _common_prefix(list(tm.received[-1].input_ids), tm.seen[-2])
    assert done.usage.input_tokens_details.cached_tokens == shared


# --------------------------------------------------------------------------- request validation


def test_unknown_include_value_is_a_400_naming_include(tok: PreTrainedTokenizerFast) -> None:
    """An ``include`` value outside OpenAI's ``ResponseIncludable`` list was accepted and ignored
    (OpenAI and vLLM answer 400). Expected: a 400 in OpenAI's error shape naming ``include``, seen
    by the ``openai`` client as ``BadRequestError``, and nothing sent to the engine; every value of
    the client's own ``ResponseIncludable`` type is still accepted."""
    from typing import get_args

    from openai.types.responses import ResponseIncludable

    tm = PromptTM(tok, reply="hi")
    client, tc = make_client(tm)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=MODEL, input="hi", include=["foo.bar"])  # type: ignore[list-item]
    body = err.value.body
    assert isinstance(body, dict) and "include" in (body.get("param") or "") + body.get("message", "")
    assert tm.received == []
    r = client.responses.create(model=MODEL, input="hi", include=list(get_args(ResponseIncludable)))
    assert r.status == "completed" and r.output_text == "hi"

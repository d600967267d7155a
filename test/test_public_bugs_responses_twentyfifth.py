"""Public bug reports of OpenAI-compatible servers' ``/v1/responses`` (gateways, agent servers and
SDKs in front of Responses models), replayed on an in-process app of the OpenAI router over a
fake engine (each test names its report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: the ``openai``
client's own types (:mod:`openai.types.responses`: which fields and values a response, an output
item and a stream event take), DeepSeek's own Responses converter and V4 encoder
(``deepseek-recipe``) with the DeepSeek-V4 tokenizer as ``transformers`` loads it (the prompt a
conversation renders and its length), the limits and rules the reports and OpenAI's API
reference state, the text the stream's own deltas carry, and a one-turn-at-a-time scan (the
truncation the bisection must match).
"""

from __future__ import annotations

import copy
import typing
from collections.abc import AsyncIterator
from typing import Any

import deepseek_recipe as recipe
import pytest
from deepseek_recipe_testutil import ids_in_written_order
from fake_prompt_tm import CALL, MODEL, D, PromptTM
from openai.types.responses import Response, ResponseError, ResponseTextConfig
from responses_testutil import WEATHER, make_client, post
from sglang_v4.managers.control_struct import context_length_message
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.managers.tokenization import RequestError as EngineRequestError
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

#: A reply of two ``get_weather`` calls in one DSML block (Paris, then Tokyo).
TWO_CALLS = CALL.replace(f"</{D}tool_calls>", "") + CALL[CALL.index(f"<{D}invoke") :].replace(
    "Paris", "Tokyo"
)


def _recipe_prompt(body: dict[str, Any], thinking: bool = False) -> str:
    """DeepSeek's own prompt text of a Responses body (its ``deepseek-recipe`` Responses converter
    and V4 encoder)."""
    req = recipe.ResponsesRequest({**ids_in_written_order(body), "model": "DeepSeek-V4-Pro"})
    opts = recipe.ConversionOptions(default_thinking_mode=thinking)
    return recipe.DeepseekV4Encoding().render_conversation(req.convert(opts).conversation).prompt


def _prompt(tok: PreTrainedTokenizerFast, tm: PromptTM) -> str:
    """The text of the engine's latest prompt."""
    return tok.decode(tm.received[-1].input_ids)


class ContextTM(PromptTM):
    """:class:`PromptTM` that refuses a prompt over its context as the tokenizer manager does
    (SGLang's context-length 400: the prompt plus ``max_new_tokens``, or one token, over
    ``context_len``)."""

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        n, mnt = len(obj.input_ids), (obj.sampling_params or {}).get("max_new_tokens")
        if n + (mnt if mnt is not None else 1) > self.context_len:
            self.received.append(obj)
            raise EngineRequestError(
                context_length_message(self.context_len, n, mnt if n < self.context_len else None)
            )
        async for out in super().generate_request(obj, request):
            yield out


# --------------------------------------------------------------------------- truncation: "auto"


def test_truncation_auto_drops_the_oldest_turns_until_the_prompt_fits(tok: PreTrainedTokenizerFast) -> None:
    """stdapi-ai/stdapi.ai#121: ``truncation: "auto"`` (what OpenAI's agent tooling sets for long
    sessions) was a 400, breaking clients mid-conversation; ogx-ai/ogx#6410 implemented it by
    dropping the oldest user/assistant turns, never the latest; NousResearch/hermes-agent#55224:
    the cut dropped the leading summary message that stood for the compacted history. OpenAI's
    reference: "If the input ... exceeds the model's context window size, the model will
    truncate ... by dropping items from the beginning of the conversation".

    Oracle: DeepSeek's converter and encoder render each candidate conversation (the leading
    system summary and the ``instructions`` kept, the first k turns dropped) and the DeepSeek-V4
    tokenizer counts it; the context is set between the counts of k = 1 and k = 2 (a turn of
    margin each way). Expected: ``"disabled"`` is the context-length 400; ``"auto"`` runs the
    k = 2 prompt exactly, echoes ``truncation: "auto"`` (the ``openai`` client's ``Response``),
    counts those tokens in ``usage.input_tokens`` and in ``/v1/responses/input_tokens``, lists
    every input item (the stored conversation is not cut) and continues by
    ``previous_response_id``; a last turn that alone does not fit is still the 400."""
    summary = {"role": "system", "content": "Summary of the earlier session: the user plans a trip."}
    turns: list[dict[str, Any]] = []
    for i in range(5):
        turns += [
            {"role": "user", "content": f"Question {i}: " + " ".join(f"w{i}x{j}" for j in range(30))},
            {"role": "assistant", "content": f"Answer {i}."},
        ]
    last = {"role": "user", "content": "Which city first?"}
    mot, instructions = 8, "Be brief."

    def body(k: int) -> dict[str, Any]:
        return {"input": [summary, *turns[2 * k :], last], "instructions": instructions}

    lens = [len(tok.encode(_recipe_prompt(body(k)), add_special_tokens=False)) for k in range(6)]
    assert all(a - b > 40 for a, b in zip(lens, lens[1:])), lens  # each turn is a wide margin
    tm = ContextTM(tok, reply="Paris.")
    tm.context_len = (lens[1] + lens[2]) // 2 + mot
    client, tc = make_client(tm)
    full = {"model": MODEL, **body(0), "max_output_tokens": mot}

    r = tc.post("/v1/responses", json={**full, "truncation": "disabled"})
    assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"], r.text

    resp = client.responses.create(**full, truncation="auto")
    assert isinstance(resp, Response) and resp.truncation == "auto" and resp.status == "completed"
    assert _prompt(tok, tm) == _recipe_prompt(body(2))
    assert resp.usage is not None and resp.usage.input_tokens == len(tm.received[-1].input_ids)
    assert len(tm.received[-1].input_ids) + mot <= tm.context_len
    count = tc.post("/v1/responses/input_tokens", json={**full, "truncation": "auto"}).json()
    assert count["input_tokens"] == resp.usage.input_tokens
    items = client.responses.input_items.list(resp.id, order="asc", limit=100).data
    assert len(items) == len(full["input"])

    # the next turn goes on from the stored (whole) conversation and is cut again
    nxt = client.responses.create(
        model=MODEL,
        previous_response_id=resp.id,
        input="And then?",
        instructions=instructions,
        max_output_tokens=mot,
        truncation="auto",
    )
    assert nxt.status == "completed" and len(tm.received[-1].input_ids) + mot <= tm.context_len

    tm.context_len = len(tok.encode(_recipe_prompt({"input": [last]}), add_special_tokens=False))
    r = tc.post("/v1/responses", json={**full, "truncation": "auto"})
    assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"], r.text


def test_truncation_auto_keeps_a_tool_call_with_its_output(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#6410: the cut must not leave a tool call without its output nor an output
    without its call (it drops whole turns "to avoid breaking assistant tool-call/turn pairs").
    Oracle: DeepSeek's converter and encoder (which refuses an output without its call) render
    the conversation from the second user turn on. Expected: with a context that holds only the
    last turn, the prompt is exactly that turn, its ``function_call`` and its
    ``function_call_output`` together."""
    call = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    out = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    first = [
        {"role": "user", "content": "Long question " + " ".join(f"p{j}" for j in range(60))},
        {"role": "assistant", "content": "Long answer."},
    ]
    tail = [{"role": "user", "content": "Weather in Paris?"}, call, out]
    kept = {"input": tail, "tools": [WEATHER]}
    n = len(tok.encode(_recipe_prompt(kept), add_special_tokens=False))
    tm = ContextTM(tok, reply="Sunny.")
    tm.context_len = n + 20
    _, tc = make_client(tm)
    r = tc.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "input": first + tail,
            "tools": [WEATHER],
            "truncation": "auto",
            "max_output_tokens": 8,
        },
    )
    assert r.status_code == 200, r.text
    Response.model_validate(r.json())
    assert _prompt(tok, tm) == _recipe_prompt(kept)


# --------------------------------------------------------------------------- tools


def test_parallel_tool_calls_false_returns_at_most_one_call(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#4124: ``parallel_tool_calls`` was not honoured on the Responses API; its fix:
    "no more than one function call is generated when set to ``False``" (OpenAI's default,
    true, allows several). Oracle: that rule and the ``openai`` client's types. Expected: a model
    that writes two calls gives two ``function_call`` items by default and one (the first, Paris)
    with ``parallel_tool_calls: false``, streamed and not, and the response echoes the flag."""
    tm = PromptTM(tok, reply="Checking." + TWO_CALLS)
    _, tc = make_client(tm)
    both, _ = post(tc, {"input": "Weather in Paris and Tokyo?", "tools": [WEATHER]})
    assert [o["arguments"] for o in both["output"] if o["type"] == "function_call"] == [
        '{"city": "Paris", "days": 3}',
        '{"city": "Tokyo", "days": 3}',
    ]
    one, events = post(
        tc, {"input": "Weather in Paris and Tokyo?", "tools": [WEATHER], "parallel_tool_calls": False}
    )
    calls = [o for o in one["output"] if o["type"] == "function_call"]
    assert [c["arguments"] for c in calls] == ['{"city": "Paris", "days": 3}'] and one[
        "parallel_tool_calls"
    ] is False
    done = events[-1]["response"]
    assert [o["arguments"] for o in done["output"] if o["type"] == "function_call"] == [calls[0]["arguments"]]
    added = [
        e
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    ]
    assert len(added) == 1


def test_tool_choice_none_hides_the_tools_from_the_prompt(tok: PreTrainedTokenizerFast) -> None:
    """jundot/omlx#3383: ``tool_choice: "none"`` was never checked before the tools were shown
    to the chat template, so a request that asked for no tool calls still offered the tools to
    the model. Oracle: DeepSeek's own converter and encoder, whose prompt of a body with
    ``tool_choice: "none"`` carries no tool (the same as without ``tools``). Expected: the
    engine's prompt is that prompt, and the response echoes ``tool_choice: "none"`` and the
    tools as sent."""
    tm = PromptTM(tok, reply="It is sunny.")
    _, tc = make_client(tm)
    body = {"input": "Weather in Paris?", "tools": [WEATHER], "tool_choice": "none"}
    resp, _ = post(tc, body)
    assert _recipe_prompt(body) == _recipe_prompt({"input": body["input"]})
    assert _prompt(tok, tm) == _recipe_prompt(body) and "get_weather" not in _prompt(tok, tm)
    assert resp["tool_choice"] == "none" and [t["name"] for t in resp["tools"]] == ["get_weather"]


# --------------------------------------------------------------------------- request fields echoed


def test_metadata_is_accepted_echoed_and_bounded(tok: PreTrainedTokenizerFast) -> None:
    """router-for-me/CLIProxyAPI#3296: a valid top-level ``metadata`` (what LiteLLM sends on
    every bridged request) was a 400; Azure/azure-sdk-for-python#49073 states the Responses
    limits it follows: 16 keys, 64 characters per key, 512 per value. Oracle: those limits.
    Expected: 16 pairs at the bounds are served and echoed, on the response, on the streamed
    ``response.created`` and ``response.completed`` and on the stored response; one pair, key
    character or value character more is a 400 naming ``metadata``, and nothing reaches the
    engine."""
    tm = PromptTM(tok, reply="Hi.")
    client, tc = make_client(tm)
    md = {f"k{i:02d}" + "x" * 61: "v" * 512 for i in range(16)}
    assert all(len(k) == 64 for k in md)
    resp, events = post(tc, {"input": "hi", "metadata": md})
    assert resp["metadata"] == md
    assert events[0]["response"]["metadata"] == md and events[-1]["response"]["metadata"] == md
    assert client.responses.retrieve(resp["id"]).metadata == md
    sent = len(tm.received)
    for bad in (
        {**md, "k16": "v"},
        {"k" * 65: "v"},
        {"k": "v" * 513},
    ):
        r = tc.post("/v1/responses", json={"model": MODEL, "input": "hi", "metadata": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "metadata", r.text
    assert len(tm.received) == sent


def test_text_verbosity_is_checked_and_echoed(tok: PreTrainedTokenizerFast) -> None:
    """lidge-jun/opencodex#2503: a server accepted ``text.verbosity: "not-a-real-value"`` with a
    200 ("a server that rejects nothing is not parsing the field"). Oracle: the ``openai``
    client's ``ResponseTextConfig`` (``verbosity``: ``low`` / ``medium`` / ``high``; ``format``
    beside it). Expected: a value outside those is a 400 naming ``text.verbosity``; each of them
    is echoed on the response's ``text`` with the format, given alone or with a ``format``."""
    values = typing.get_args(typing.get_args(ResponseTextConfig.model_fields["verbosity"].annotation)[0])
    assert set(values) == {"low", "medium", "high"}
    _, tc = make_client(PromptTM(tok, reply="Hi."))
    r = tc.post(
        "/v1/responses", json={"model": MODEL, "input": "hi", "text": {"verbosity": "not-a-real-value"}}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "text.verbosity", r.text
    for v in values:
        alone, events = post(tc, {"input": "hi", "text": {"verbosity": v}})
        assert alone["text"] == {"format": {"type": "text"}, "verbosity": v}
        assert events[-1]["response"]["text"] == alone["text"]
        fmt = {"type": "json_object"}
        both, _ = post(tc, {"input": "hi", "text": {"verbosity": v, "format": fmt}})
        assert both["text"] == {"format": fmt, "verbosity": v}
        ResponseTextConfig.model_validate(both["text"])


def test_store_flag_is_echoed_and_governs_retrieval(tok: PreTrainedTokenizerFast) -> None:
    """danny-avila/LibreChat#13300: the response body's ``store`` was hard-coded ``false``
    whatever the request asked, and ``previous_response_id`` of a stored response was never
    found. Oracle: the ``openai`` client's ``Response.store`` and OpenAI's rule (a stored
    response is retrievable and continuable, an unstored one is not). Expected: ``store`` echoes
    the request (true by default) on the response and on every streamed lifecycle event; a
    stored response is retrieved equal and continued, an unstored one is a 404 for both."""
    client, tc = make_client(PromptTM(tok, reply="Hi."))
    for asked, want in ((None, True), (True, True), (False, False)):
        body = {"input": "hi"} if asked is None else {"input": "hi", "store": asked}
        resp, events = post(tc, body)
        assert resp["store"] is want
        lifecycle = [
            e
            for e in events
            if e["type"] in ("response.created", "response.in_progress", "response.completed")
        ]
        assert len(lifecycle) == 3 and all(e["response"]["store"] is want for e in lifecycle)
        got = tc.get(f"/v1/responses/{resp['id']}")
        nxt = tc.post(
            "/v1/responses", json={"model": MODEL, "input": "more", "previous_response_id": resp["id"]}
        )
        if want:
            assert got.status_code == 200 and got.json() == resp and nxt.status_code == 200
            assert client.responses.retrieve(resp["id"]).store is True
        else:
            assert got.status_code == 404 and nxt.status_code == 404


# --------------------------------------------------------------------------- stream events


def test_terminal_stream_events_carry_the_text_the_deltas_built(tok: PreTrainedTokenizerFast) -> None:
    """KochC/opencode-llm-proxy#48 (``response.output_text.done`` sent with ``text: ""`` and no
    ``response.content_part.done``) and agentgateway/agentgateway#2281 (``content_part.done``
    with an empty part, ``output_item.done`` with no content and ``response.completed`` with no
    output: Codex builds the message from those terminal events and rendered nothing). Oracle:
    the concatenated deltas of the stream itself and the non-streamed response of the same
    request. Expected: for the reasoning and the message, ``*.done`` text, ``content_part.done``
    part text, ``output_item.done`` content and the ``response.completed`` output item all equal
    the concatenated deltas, which equal the non-streamed text."""
    tm = PromptTM(tok, reply="Plan the answer.</think>Paris is sunny today.")
    _, tc = make_client(tm)
    resp, events = post(tc, {"input": "Weather?", "reasoning": {"effort": "low"}})
    final = {o["type"]: o for o in events[-1]["response"]["output"]}
    plain = {o["type"]: o["content"][0]["text"] for o in resp["output"]}
    assert set(plain) == {"reasoning", "message"}
    for kind, delta, done in (
        ("reasoning", "response.reasoning_text.delta", "response.reasoning_text.done"),
        ("message", "response.output_text.delta", "response.output_text.done"),
    ):
        idx = next(
            e["output_index"]
            for e in events
            if e["type"] == "response.output_item.added" and e["item"]["type"] == kind
        )
        mine = [e for e in events if e.get("output_index") == idx]
        text = "".join(e["delta"] for e in mine if e["type"] == delta)
        assert text == plain[kind] and text
        assert [e["text"] for e in mine if e["type"] == done] == [text]
        assert [e["part"]["text"] for e in mine if e["type"] == "response.content_part.done"] == [text]
        item_done = [e["item"] for e in mine if e["type"] == "response.output_item.done"]
        assert [i["content"][0]["text"] for i in item_done] == [text]
        assert final[kind]["content"][0]["text"] == text


def test_failed_response_error_code_is_one_of_openais_codes(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#4942: a stream that failed mid-way carried codes outside the Responses spec
    (``internal_error``, ``invalid_request_error``) in ``response.failed``, so clients could not
    tell failures apart; Menci/Floway#330: a mid-stream failure must reach the ``openai`` client
    as a failure, not as a stream that just ends. Oracle: the ``openai`` client's
    ``ResponseError.code`` values and its stream parser. Expected: an engine failure (500) is
    ``server_error`` and a refused prompt (400) ``invalid_prompt``, in the ``error`` event and in
    the ``response.failed`` response's ``error``, with the engine's message; the client's stream
    yields both events (no ``response.completed``) and ``GET`` finds nothing stored."""
    codes = set(typing.get_args(ResponseError.model_fields["code"].annotation))
    for status, want in ((500, "server_error"), (400, "invalid_prompt")):
        reason = {"type": "abort", "message": f"engine said {status}", "status_code": status}
        tm = PromptTM(tok, reply="alpha beta gamma delta", abort_after=2, abort_reason=reason)
        client, tc = make_client(tm)
        events = list(client.responses.create(model=MODEL, input="hi", stream=True))
        kinds = [e.type for e in events]
        assert kinds[-2:] == ["error", "response.failed"] and "response.completed" not in kinds
        err, failed = events[-2], events[-1]
        assert want in codes and err.code == want and err.message == f"engine said {status}"
        assert failed.response.status == "failed" and failed.response.error is not None
        assert failed.response.error.code == want and failed.response.error.message == err.message
        assert tc.get(f"/v1/responses/{failed.response.id}").status_code == 404


# --------------------------------------------------------------------------- item references


def test_item_reference_stands_for_the_stored_item(tok: PreTrainedTokenizerFast) -> None:
    """langgenius/syncless-issue#13: a gateway answered ``item_reference is not supported``, so
    a client that sends references to stored items (the ``openai`` client's ``ItemReference``
    input item, ``{"type": "item_reference", "id"}``) could not go on. Oracle: DeepSeek's own
    converter and encoder rendering the same conversation with the referenced items written out
    in full. Expected: references to a stored input message and to a stored ``function_call``
    output item, with the call's output, render exactly that prompt and list the referenced
    items (their ids) among the input items; a reference to an id no stored response holds is a
    404 naming ``input[0].id`` and nothing reaches the engine."""
    tm = PromptTM(tok, reply="Checking." + CALL)
    client, tc = make_client(tm)
    question = {"role": "user", "content": "Weather in Paris?"}
    first = client.responses.create(model=MODEL, input=[question], tools=[WEATHER])
    user_id = client.responses.input_items.list(first.id).data[0].id
    call = next(o for o in first.output if o.type == "function_call")
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    tm.reply = "It is sunny."
    second = client.responses.create(
        model=MODEL,
        input=[{"type": "item_reference", "id": user_id}, {"type": "item_reference", "id": call.id}, output],
        tools=[WEATHER],
        store=True,
    )
    written = [
        question,
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        output,
    ]
    assert second.status == "completed" and second.output_text == "It is sunny."
    assert _prompt(tok, tm) == _recipe_prompt({"input": written, "tools": [WEATHER]})
    ids = [i.id for i in client.responses.input_items.list(second.id, order="asc").data]
    assert ids[:2] == [user_id, call.id]
    sent = len(tm.received)
    r = tc.post(
        "/v1/responses", json={"model": MODEL, "input": [{"type": "item_reference", "id": "msg_nope"}]}
    )
    assert r.status_code == 404 and r.json()["error"]["param"] == "input[0].id", r.text
    assert len(tm.received) == sent


# --------------------------------------------------------------------------- call ids


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def _output(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def test_two_calls_of_one_turn_under_one_call_id_are_a_400(tok: PreTrainedTokenizerFast) -> None:
    """openai/gpt-oss#309: two ``function_call`` items of one turn sharing a ``call_id`` (a
    per-turn counter such as ``call_0`` reused by a client) were accepted, and each output was
    bound to whichever call registered last: a weather result shown under ``delete_file``, the
    other call left without a result. OpenAI answers ``Duplicate 'call_id'`` (earendil-works/pi
    #9057), and so does DeepSeek's own Responses converter (the oracle). Expected: a 400 naming
    the repeated item's ``call_id``, and also for a second output of one call (OpenAI's
    ``Duplicate function_call_output``); nothing reaches the engine and the next request is
    served."""
    rm = {"type": "function", "name": "delete_file", "description": "rm", "parameters": {"type": "object"}}
    same_turn = [
        {"role": "user", "content": "Weather, then clean up."},
        _call("call_0", "get_weather", '{"city": "Paris"}'),
        _call("call_0", "delete_file", '{"path": "/tmp/x"}'),
        _output("call_0", "sunny"),
        _output("call_0", "deleted"),
    ]
    twice_answered = [
        {"role": "user", "content": "Weather?"},
        _call("call_0", "get_weather", '{"city": "Paris"}'),
        _output("call_0", "sunny"),
        _output("call_0", "rainy"),
    ]
    for items in (same_turn, twice_answered):
        with pytest.raises(Exception, match="Duplicate") as ei:  # the converter's ConversionError
            _recipe_prompt({"input": items, "tools": [WEATHER, rm]})
        assert type(ei.value).__name__ == "ConversionError"
    tm = PromptTM(tok, reply="Done.")
    _, tc = make_client(tm)
    for items, param in ((same_turn, "input[2].call_id"), (twice_answered, "input[3].call_id")):
        for stream in (False, True):
            body = {"model": MODEL, "input": items, "tools": [WEATHER, rm], "stream": stream}
            r = tc.post("/v1/responses", json=body)
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
            assert "Duplicate" in r.json()["error"]["message"]
    assert tm.received == []
    post(tc, {"input": same_turn[:2] + [_output("call_0", "sunny")], "tools": [WEATHER]})


def test_call_id_reused_by_a_later_turn_is_that_turns_call(tok: PreTrainedTokenizerFast) -> None:
    """NousResearch/hermes-agent#102629 (and mnfst/llm-gateway#2858): an agent that mints
    turn-local ids (``terminal:0``) reuses them on later turns; a strict server refused the
    replayed history with a 400 on every request, bricking the session, and the clients' fix
    renames each repeat (``terminal:0_dup1``) before sending. Each output directly follows its
    own call, so the pairing is not ambiguous. Oracle: DeepSeek's own converter and encoder
    rendering the conversation as that fix sends it (the repeat renamed; call ids do not reach
    the prompt). Expected: the request as the agent sent it is served, on exactly that prompt."""
    turns = [
        {"role": "user", "content": "Weather in Paris?"},
        _call("terminal:0", "get_weather", '{"city": "Paris"}'),
        _output("terminal:0", "sunny"),
        {"role": "assistant", "content": "Sunny in Paris."},
        {"role": "user", "content": "And Tokyo?"},
        _call("terminal:0", "get_weather", '{"city": "Tokyo"}'),
        _output("terminal:0", "rainy"),
    ]
    renamed = copy.deepcopy(turns)
    renamed[5]["call_id"] = renamed[6]["call_id"] = "terminal:0_dup1"
    tm = PromptTM(tok, reply="Rainy in Tokyo.")
    _, tc = make_client(tm)
    resp, _ = post(tc, {"input": turns, "tools": [WEATHER]})
    assert resp["status"] == "completed"
    assert _prompt(tok, tm) == _recipe_prompt({"input": renamed, "tools": [WEATHER]})


def test_truncation_bisection_finds_the_fewest_turns_a_linear_scan_finds() -> None:
    """ogx-ai/ogx#6410 drops the oldest turn group, one at a time, until the request fits; the
    bisection here must land where that one-at-a-time scan lands. Oracle: the linear scan over
    the same turn boundaries (a user message after the first non-system one starts a turn;
    system messages stay), with a prompt length that is the sum of the kept messages' lengths.
    Expected: for random conversations and contexts, the same kept conversation, or the last
    turn alone when nothing fits; a tool message never opens what is kept."""
    import asyncio
    import random

    from sglang_v4.entrypoints.openai.responses_truncation import fit_to_context

    def size(conv: list[dict[str, Any]]) -> int:
        """The prompt length of ``conv``: its messages' lengths summed."""
        return sum(len(m["content"]) for m in conv)

    async def measure(kept: list[dict[str, Any]]) -> tuple[int, list[int]]:
        return size(kept), [0] * size(kept)

    rng = random.Random(25)
    for _ in range(300):
        conv: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            conv.append({"role": "system", "content": "s" * rng.randint(1, 9)})
        for _ in range(rng.randint(1, 7)):
            conv.append({"role": "user", "content": "u" * rng.randint(1, 30)})
            for _ in range(rng.randint(0, 2)):
                conv.append({"role": "assistant", "content": "a" * rng.randint(1, 30)})
                if rng.random() < 0.5:
                    conv.append({"role": "tool", "content": "t" * rng.randint(1, 30)})
            if rng.random() < 0.2:
                conv.append({"role": "system", "content": "m" * rng.randint(1, 9)})
        ctx, room = rng.randint(5, size(conv) + 10), rng.choice([None, 1, 4])
        need = room if room is not None else 1

        # the oracle: drop whole turns one at a time from the oldest
        first = next(i for i, m in enumerate(conv) if m["role"] != "system")
        starts = [i for i, m in enumerate(conv) if i > first and m["role"] == "user"]
        cands = [conv] + [[m for m in conv[:s] if m["role"] == "system"] + conv[s:] for s in starts]
        want = next((c for c in cands if size(c) + need <= ctx), cands[-1])

        _, got = asyncio.run(fit_to_context(conv, measure, ctx, room))
        assert got == want
        assert next(m["role"] for m in got if m["role"] != "system") != "tool"

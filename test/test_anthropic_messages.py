"""``POST /v1/messages`` and ``/v1/messages/count_tokens`` (Anthropic's Messages API) on the
chat-completions path.

Oracles: the ``anthropic`` client's own types (every body and every stream event validated against
``anthropic.types``, and its ``messages.stream`` helper's accumulator), and
``/v1/chat/completions`` on the same fake engine (same prompt token ids, same text, same sampling
parameters for the same conversation). The fake tokenizer manager's reply is a function of the
prompt's token ids, so equal texts also mean equal prompts. The tests through the real server
processes are in ``test_anthropic_messages_server.py``.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import MessageTokensCount
from anthropic_testutil import CHAT_WEATHER, KEY, WEATHER, make_clients, post
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM, blocks, prompt_reply
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(300)


def chat(oa: openai.OpenAI, messages: list[dict[str, Any]], **kw: Any) -> Any:
    return oa.chat.completions.create(model=MODEL, messages=messages, **kw)


def test_text_equals_chat_completions(tok: PreTrainedTokenizerFast) -> None:
    """``system`` + a multi-turn conversation (string and block contents) renders the prompt chat
    completions renders for the same messages; text, usage and sampling parameters are the chat
    route's; the client's typed message and its stream helper's final message agree."""
    tm = PromptTM(tok)
    client, oa, tc = make_clients(tm)
    msgs = [
        {"role": "system", "content": "Be brief.\n\nAnswer in Greek letters."},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2\n\nQ3"},
    ]
    want = chat(oa, msgs, max_tokens=50, temperature=0.5, top_p=0.9, extra_body={"top_k": 5})
    chat_req = tm.received[-1]
    kw: dict[str, Any] = dict(
        model=MODEL,
        max_tokens=50,
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in Greek letters."}],
        messages=[
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": [{"type": "text", "text": "A1"}]},
            {"role": "user", "content": [{"type": "text", "text": "Q2"}, {"type": "text", "text": "Q3"}]},
        ],
        # (this client has no sampling arguments any more; older clients and other tools send them)
        extra_body={"temperature": 0.5, "top_p": 0.9, "top_k": 5},
    )
    m = client.messages.create(**kw)
    assert tm.received[-1].input_ids == chat_req.input_ids
    assert tm.received[-1].sampling_params == chat_req.sampling_params
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == want.choices[0].message.content
    assert m.stop_reason == "end_turn" and m.stop_sequence is None and m.role == "assistant"
    assert m.model == MODEL and m.id.startswith("msg_")
    assert (m.usage.input_tokens, m.usage.output_tokens) == (
        want.usage.prompt_tokens,
        want.usage.completion_tokens,
    )
    with client.messages.stream(**kw) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == final.content[0].text == m.content[0].text
    assert final.stop_reason == "end_turn" and final.usage == m.usage
    raw = {k: v for k, v in kw.items() if k not in ("model", "extra_body")}
    body, events = post(tc, {**raw, **kw["extra_body"]})
    assert body["content"] == [{"type": "text", "text": m.content[0].text}]
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == want.usage.prompt_tokens


def test_thinking_blocks_and_switch(tok: PreTrainedTokenizerFast) -> None:
    """``thinking: enabled`` is the chat template's thinking mode (same prompt as chat's
    ``thinking`` switch): the reasoning comes back as a ``thinking`` block with a signature, the
    answer as text, streamed as ``thinking_delta`` events closed by a ``signature_delta``;
    ``disabled`` renders chat mode; replayed thinking blocks are the chat turn's
    ``reasoning_content``; ``output_config.effort`` is ``reasoning_effort``."""
    tm = PromptTM(tok, reply="Let me think.</think>The answer.")
    client, oa, tc = make_clients(tm)
    user = [{"role": "user", "content": "Q"}]
    want = chat(oa, user, max_tokens=60, reasoning_effort="max", extra_body={"thinking": {"type": "enabled"}})
    chat_ids = tm.received[-1].input_ids
    kw: dict[str, Any] = dict(
        model=MODEL,
        max_tokens=60,
        messages=user,
        thinking={"type": "enabled", "budget_tokens": 2048},
        output_config={"effort": "max"},
    )
    m = client.messages.create(**kw)
    assert tm.received[-1].input_ids == chat_ids
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert (
        m.content[0].thinking == want.choices[0].message.model_extra["reasoning_content"] == "Let me think."
    )
    assert isinstance(m.content[0].signature, str) and m.content[0].signature
    assert m.content[1].text == want.choices[0].message.content == "The answer."
    with client.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert blocks(final) == blocks(m)
    _, events = post(tc, {"messages": user, "thinking": {"type": "enabled", "budget_tokens": 2048}})
    deltas = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert deltas[-1] == "text_delta" and "signature_delta" in deltas
    assert (
        deltas.index("signature_delta") == max(i for i, d in enumerate(deltas) if d == "thinking_delta") + 1
    )
    # disabled: chat mode, as chat's thinking switch off
    chat(oa, user, max_tokens=60, extra_body={"thinking": {"type": "disabled"}})
    off_ids = tm.received[-1].input_ids
    client.messages.create(model=MODEL, max_tokens=60, messages=user, thinking={"type": "disabled"})
    assert tm.received[-1].input_ids == off_ids != chat_ids
    # a replayed thinking block is the assistant turn's reasoning_content
    hist = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "reasoning_content": "R1", "content": "A1"},
        {"role": "user", "content": "Q2"},
    ]
    chat(oa, hist, max_tokens=60, extra_body={"thinking": {"type": "enabled"}})
    chat_ids = tm.received[-1].input_ids
    client.messages.create(
        model=MODEL,
        max_tokens=60,
        thinking={"type": "adaptive"},
        messages=[
            {"role": "user", "content": "Q"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "R1", "signature": "opaque"},
                    {"type": "redacted_thinking", "data": "xyz"},
                    {"type": "text", "text": "A1"},
                ],
            },
            {"role": "user", "content": "Q2"},
        ],
    )
    assert tm.received[-1].input_ids == chat_ids


def test_tool_use_round_trip(tok: PreTrainedTokenizerFast) -> None:
    """A DSML call is a ``tool_use`` block (``input`` the arguments object, ``stop_reason``
    ``tool_use``), streamed as ``input_json_delta`` fragments the client's helper rebuilds; the
    message sent back with a ``tool_result`` renders the chat route's prompt of the same
    conversation (an ``is_error`` result's text as is, as DeepSeek's Messages converter renders
    it); ``tool_choice`` maps to chat's."""
    tm = PromptTM(tok, reply="Checking." + CALL)
    client, oa, tc = make_clients(tm)
    user = {"role": "user", "content": "Weather in Paris?"}
    want = chat(oa, [user], max_tokens=200, tools=[CHAT_WEATHER])
    chat_ids = tm.received[-1].input_ids
    m = client.messages.create(model=MODEL, max_tokens=200, messages=[user], tools=[WEATHER])
    assert tm.received[-1].input_ids == chat_ids
    assert m.stop_reason == "tool_use" and [b.type for b in m.content] == ["text", "tool_use"]
    assert m.content[0].text == want.choices[0].message.content == "Checking."
    call = m.content[1]
    assert call.name == "get_weather" and call.input == ARGS and call.id.startswith("toolu_")
    assert json.loads(want.choices[0].message.tool_calls[0].function.arguments) == ARGS
    with client.messages.stream(model=MODEL, max_tokens=200, messages=[user], tools=[WEATHER]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[1].input == ARGS
    assert blocks(final)[0] == blocks(m)[0]
    _, events = post(tc, {"messages": [user], "tools": [WEATHER]})
    assert any(e.get("delta", {}).get("type") == "input_json_delta" for e in events)
    # the round trip: the assistant turn as the client returns it, then the tool results
    for is_error, text in ((False, "18C"), (True, "timeout")):
        result = {"type": "tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": text}]}
        if is_error:
            result["is_error"] = True
        tm.reply = "It is mild."
        convo = [
            user,
            m.to_param(),
            {"role": "user", "content": [result, {"type": "text", "text": "Thanks"}]},
        ]
        r = client.messages.create(model=MODEL, max_tokens=200, messages=convo, tools=[WEATHER])
        ids = tm.received[-1].input_ids
        tc_msg = {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps(ARGS)},
        }
        chat_convo = [
            user,
            {"role": "assistant", "content": "Checking.", "tool_calls": [tc_msg]},
            {"role": "tool", "tool_call_id": "c1", "content": text},
            {"role": "user", "content": "Thanks"},
        ]
        again = chat(oa, chat_convo, max_tokens=200, tools=[CHAT_WEATHER])
        assert tm.received[-1].input_ids == ids
        assert r.content[0].text == again.choices[0].message.content == "It is mild."
        assert r.stop_reason == "end_turn"
    # tool_choice: any -> required, tool -> named, none -> no tools shown; disable_parallel_tool_use
    tm.reply = "x"
    for choice, chat_choice, parallel in (
        ({"type": "any"}, "required", True),
        (
            {"type": "tool", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
            True,
        ),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
        ({"type": "none"}, "none", True),
    ):
        chat(
            oa,
            [user],
            max_tokens=20,
            tools=[CHAT_WEATHER],
            tool_choice=chat_choice,
            parallel_tool_calls=parallel,
        )
        want_req = tm.received[-1]
        client.messages.create(
            model=MODEL, max_tokens=20, messages=[user], tools=[WEATHER], tool_choice=choice
        )
        got = tm.received[-1]
        assert got.input_ids == want_req.input_ids and got.sampling_params == want_req.sampling_params, choice


def test_max_tokens_cut_call_and_prefill(tok: PreTrainedTokenizerFast) -> None:
    """``max_tokens`` ends a message with ``stop_reason`` ``max_tokens`` and that many output
    tokens; a call cut inside its arguments keeps what parses, the same streamed and not; a final
    assistant message is continued (chat's ``continue_final_message``)."""
    tm = PromptTM(tok, reply="Checking." + CALL)
    client, oa, _ = make_clients(tm)
    user = {"role": "user", "content": "Weather?"}
    ids = tok.encode("Checking." + CALL, add_special_tokens=False)

    def cut_after(marker: str) -> int:
        return next(n for n in range(len(ids)) if marker in tok.decode(ids[:n]))

    # cut inside the first value (nothing parses yet), then right after the second key's tag
    for n_cut, want_input in (
        (cut_after("Pa"), {}),
        (cut_after('"days" string="false">'), {"city": "Paris"}),
    ):
        m = client.messages.create(model=MODEL, max_tokens=n_cut, messages=[user], tools=[WEATHER])
        assert m.stop_reason == "max_tokens" and m.usage.output_tokens == n_cut
        assert m.content[-1].type == "tool_use" and m.content[-1].input == want_input
        with client.messages.stream(model=MODEL, max_tokens=n_cut, messages=[user], tools=[WEATHER]) as s:
            final = s.get_final_message()
        assert final.stop_reason == "max_tokens" and final.content[-1].input == want_input
    tm.reply = prompt_reply
    convo = [user, {"role": "assistant", "content": "The weather is"}]
    want = chat(oa, convo, max_tokens=30, extra_body={"continue_final_message": True})
    chat_ids = tm.received[-1].input_ids
    m = client.messages.create(model=MODEL, max_tokens=30, messages=convo)
    assert tm.received[-1].input_ids == chat_ids and m.content[0].text == want.choices[0].message.content


def test_stop_inside_a_call_streams_the_text_of_the_whole_message(tok: PreTrainedTokenizerFast) -> None:
    """A generation that *stops* (EOS here) inside an invoke made no call: the whole message is
    its text, ``end_turn``; streamed, the same text goes out (after the call's already sent
    ``tool_use`` block, which a delta cannot take back), not a call cut as by ``max_tokens``.
    Oracle: chat completions on the same engine, streamed and not."""
    reply = "Checking." + CALL[: CALL.index("Paris") + 3]
    tm = PromptTM(tok, reply=reply)
    client, oa, tc = make_clients(tm)
    user = {"role": "user", "content": "Weather?"}
    want = chat(oa, [user], tools=[CHAT_WEATHER])
    assert want.choices[0].finish_reason == "stop" and not want.choices[0].message.tool_calls
    chat_stream = "".join(
        c.choices[0].delta.content or ""
        for c in chat(oa, [user], tools=[CHAT_WEATHER], stream=True)
        if c.choices
    )
    assert chat_stream == want.choices[0].message.content
    msg, events = post(tc, {"messages": [user], "tools": [WEATHER]})
    assert msg["stop_reason"] == "end_turn"
    assert [b["type"] for b in msg["content"]] == ["text"]
    assert msg["content"][0]["text"] == want.choices[0].message.content
    streamed = "".join(
        e["delta"]["text"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    )
    assert streamed == want.choices[0].message.content
    assert events[-2]["delta"]["stop_reason"] == "end_turn"
    with client.messages.stream(model=MODEL, max_tokens=100, messages=[user], tools=[WEATHER]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "end_turn"
    assert "".join(b.text for b in final.content if b.type == "text") == want.choices[0].message.content


def test_count_tokens_equals_chat_prompt(tok: PreTrainedTokenizerFast) -> None:
    """``count_tokens`` is the prompt length chat completions reports for the same conversation
    (tools, system, thinking); it generates nothing."""
    tm = PromptTM(tok)
    client, oa, _ = make_clients(tm)
    user = [{"role": "user", "content": "Weather in Paris?"}]
    for think in (False, True):
        want = chat(
            oa,
            [{"role": "system", "content": "Sys"}, *user],
            max_tokens=5,
            tools=[CHAT_WEATHER],
            extra_body={"thinking": {"type": "enabled" if think else "disabled"}},
        )
        n = len(tm.received)
        got = client.messages.count_tokens(
            model=MODEL,
            system="Sys",
            messages=user,
            tools=[WEATHER],
            thinking={"type": "enabled", "budget_tokens": 1024} if think else {"type": "disabled"},
        )
        MessageTokensCount.model_validate(got.model_dump())
        assert got.input_tokens == want.usage.prompt_tokens and len(tm.received) == n


@pytest.mark.parametrize("stream", [False, True])
def test_context_overflow_is_worded_as_anthropic(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """A prompt that does not fit with ``max_tokens`` in the 4,096-token context is a 400 in
    Anthropic's own words (``input length and `max_tokens` exceed context limit: N + K > C`` /
    ``prompt is too long: N tokens > M maximum``), the wording Anthropic clients match to compact
    the conversation or retry with a lower ``max_tokens`` (anthropics/claude-code#476 shows it);
    N is the prompt's token count on the chat route, and nothing reaches the engine."""
    tm = PromptTM(tok)
    client, oai, _ = make_clients(tm)
    short = [{"role": "user", "content": "Hi"}]
    n_short = chat(oai, short, max_tokens=1).usage.prompt_tokens
    long = [{"role": "user", "content": "word " * 5000}]
    n_long = client.messages.count_tokens(model=MODEL, messages=long).input_tokens
    assert n_long > 4096  # the case under test: the prompt alone overflows
    seen = len(tm.received)
    for messages, max_tokens, want in (
        (short, 5000, f"input length and `max_tokens` exceed context limit: {n_short} + 5000 > 4096, "),
        (short, 4096 - n_short + 1, f"exceed context limit: {n_short} + {4096 - n_short + 1} > 4096"),
        (long, 10, f"prompt is too long: {n_long} tokens > 4095 maximum"),
    ):
        with pytest.raises(anthropic.BadRequestError) as ei:
            client.messages.create(model=MODEL, max_tokens=max_tokens, messages=messages, stream=stream)
        assert ei.value.body["error"]["type"] == "invalid_request_error" and want in ei.value.message
    assert len(tm.received) == seen
    fits = client.messages.create(model=MODEL, max_tokens=4096 - n_short, messages=short)
    assert fits.usage.input_tokens == n_short


def test_auto_truncate_server_passes_overflowing_prompts_on(tok: PreTrainedTokenizerFast) -> None:
    """``--allow-auto-truncate``: a prompt over the context, or a ``max_tokens`` over what it
    leaves, is cut by the tokenizer manager (as on the OpenAI routes and in SGLang), not refused
    by the Messages route's own context check."""
    tm = PromptTM(tok)
    client, _, _ = make_clients(tm, auto_truncate=True)
    long = [{"role": "user", "content": "word " * 5000}]
    assert client.messages.count_tokens(model=MODEL, messages=long).input_tokens > 4096
    for messages, max_tokens in ((long, 10), ([{"role": "user", "content": "Hi"}], 5000)):
        seen = len(tm.received)
        m = client.messages.create(model=MODEL, max_tokens=max_tokens, messages=messages)
        assert m.stop_reason in ("end_turn", "max_tokens") and len(tm.received) == seen + 1
        assert tm.received[-1].sampling_params["max_new_tokens"] == max_tokens  # the manager cuts it


def test_cache_report_and_engine_error(tok: PreTrainedTokenizerFast) -> None:
    """With ``--enable-cache-report`` the cached prompt tokens are ``cache_read_input_tokens``
    (``input_tokens`` the rest, as Anthropic splits them); an engine error mid-stream is an
    ``error`` event the client raises."""
    tm = PromptTM(tok)
    client, oa, _ = make_clients(tm, cache_report=True)
    want = chat(oa, [{"role": "user", "content": "Q"}], max_tokens=20)
    m = client.messages.create(model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "Q"}])
    cached = want.usage.prompt_tokens_details.cached_tokens
    assert cached == 2
    assert (m.usage.input_tokens, m.usage.cache_read_input_tokens) == (
        want.usage.prompt_tokens - cached,
        cached,
    )
    tm.abort_after = 3
    with pytest.raises(anthropic.APIStatusError) as ei:
        with client.messages.stream(
            model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "Q"}]
        ) as s:
            s.get_final_message()
    assert "engine failure" in str(ei.value.body)


BAD_INPUTS = [
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": "10"}, "max_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
    # a system message (the SDK's SystemMessageParam) takes a string or text blocks only
    ({"messages": [{"role": "system", "content": [{"type": "image"}]}, {"role": "user", "content": "q"}]}, "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0.text"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "1"}]}]}, "messages.0.content.0.tool_use_id"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}, "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "get_weather", "input": []}]}, {"role": "user", "content": "x"}]}, "messages.1.content.0.input"),
    ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}]}]}, "messages.1.content"),
    ({"system": [{"type": "image"}]}, "system.0.type"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
    ({"tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({"tools": [WEATHER, WEATHER]}, "tools.1.name"),
    ({"tools": [dict(WEATHER, strict="false")]}, "tools.0.strict"),
    ({"tools": [dict(WEATHER, description=5)]}, "tools.0.description"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "maybe"}}, "thinking.type"),
    ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
    ({"output_config": {"format": {"type": "xml"}}}, "output_config.format.type"),
    ({"temperature": 3}, "temperature"),
    ({"top_p": "high"}, "top_p"),
    ({"stop_sequences": "x"}, "stop_sequences"),
    ({"metadata": {"user_id": 5}}, "metadata.user_id"),
]  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_bad_input_is_a_400_naming_the_field(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """Each bad field is a 400 in Anthropic's error shape whose message starts with the field as
    the client sent it, before anything reaches the engine; an unknown model is a 404
    ``not_found_error``, so is an unknown route under ``/v1/messages/``; the route serves the next
    request."""
    tm = PromptTM(tok)
    client, _, tc = make_clients(tm)
    base = {
        "model": MODEL,
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "q"}],
        "stream": stream,
    }
    for body, field in BAD_INPUTS:
        r = tc.post("/v1/messages", json={k: v for k, v in {**base, **body}.items() if v is not None})
        assert r.status_code == 400, (body, r.text)
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error", err
        assert err["error"]["message"].startswith(field), (body, err)
    assert tm.received == []
    with pytest.raises(anthropic.BadRequestError) as ei:
        client.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[{"role": "user", "content": "q"}],
            extra_body={"temperature": 5},
        )
    assert ei.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError) as ei:
        client.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "q"}])
    assert ei.value.body["error"]["type"] == "not_found_error" and "claude-x" in ei.value.message
    r = tc.post("/v1/messages/count_tokens", json={"model": MODEL, "messages": []})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("messages")
    with pytest.raises(anthropic.NotFoundError) as ei:  # a route this server lacks: Anthropic's 404
        client.post("/v1/messages/batches", body={}, cast_to=object)
    assert ei.value.body["error"]["type"] == "not_found_error"
    assert client.messages.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "q"}]
    ).content


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_body_that_is_not_utf8_says_so(tok: PreTrainedTokenizerFast, path: str) -> None:
    """A body that is not valid UTF-8 (here Latin-1 text) is a 400 ``invalid_request_error`` in
    Anthropic's shape saying so and where, not orjson's "surrogates not allowed" (a detail of
    Python's codec). Oracle: Python's UTF-8 decoder's offset of the first bad byte."""
    body = b'{"model": "dsv4-test", "max_tokens": 5, "messages": [{"role": "user", "content": "caf\xe9"}]}'
    with pytest.raises(UnicodeDecodeError) as bad:
        body.decode("utf-8")
    tm = PromptTM(tok)
    _, _, tc = make_clients(tm)
    r = tc.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error", err
    msg = err["error"]["message"]
    assert "not valid UTF-8" in msg and "surrogate" not in msg, msg
    assert f"byte 0xe9 at byte offset {bad.value.start}" in msg, msg
    assert tm.received == []


def test_empty_model_is_the_served_model(tok: PreTrainedTokenizerFast) -> None:
    """``model: ""`` on ``/v1/messages`` and ``/v1/messages/count_tokens`` is served by the served
    model, as on the OpenAI routes (vLLM serves it on its Anthropic route too): the same reply and
    token count as the request naming the served model, echoed as the chat route echoes it
    (``"default"``). An omitted ``model`` stays a 400 naming it (Anthropic's API requires it)."""
    client, oa, tc = make_clients(PromptTM(tok))
    msgs = [{"role": "user", "content": "q"}]
    named = client.messages.create(model=MODEL, max_tokens=10, messages=msgs)
    empty = client.messages.create(model="", max_tokens=10, messages=msgs)
    assert blocks(empty) == blocks(named) and empty.model == "default"
    chat_empty = oa.chat.completions.create(model="", messages=msgs, max_tokens=10)
    assert empty.model == chat_empty.model
    with client.messages.stream(model="", max_tokens=10, messages=msgs) as st:
        assert blocks(st.get_final_message()) == blocks(named)
    count = client.messages.count_tokens(model="", messages=msgs)
    assert count.input_tokens == client.messages.count_tokens(model=MODEL, messages=msgs).input_tokens
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = tc.post(path, json={"max_tokens": 10, "messages": msgs})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith("model"), r.text


def test_api_key_headers(tok: PreTrainedTokenizerFast) -> None:
    """With an API key: ``x-api-key`` and ``Authorization: Bearer`` both work (the client's
    ``api_key`` and a ``default_headers`` x-api-key); none or a wrong one is a 401
    ``authentication_error`` in Anthropic's shape, on both routes."""
    tm = PromptTM(tok)
    client, _, tc = make_clients(tm, api_key=KEY)
    body = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "q"}]}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        for headers in ({}, {"x-api-key": "wrong"}, {"authorization": "Bearer wrong"}):
            r = tc.post(path, json=body, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", (
                path,
                headers,
            )
        for headers in ({"x-api-key": KEY}, {"authorization": f"Bearer {KEY}"}):
            assert tc.post(path, json=body, headers=headers).status_code == 200, (path, headers)
    assert client.messages.create(**body).content
    x_client = anthropic.Anthropic(
        base_url="http://testserver",
        auth_token=None,
        api_key=None,
        default_headers={"x-api-key": KEY},
        http_client=tc,
        max_retries=0,
    )
    assert x_client.messages.create(**body).content
    assert x_client.messages.count_tokens(model=MODEL, messages=body["messages"]).input_tokens > 0
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(
            base_url="http://testserver", api_key="bad", http_client=tc, max_retries=0
        ).messages.create(**body)

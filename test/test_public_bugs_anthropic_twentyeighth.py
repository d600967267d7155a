"""A twenty-eighth set of public bug reports, replayed against the Anthropic Messages API
(``/v1/messages``, ``/v1/messages/count_tokens``): ``stop_sequences`` forwarded to the engine and a
matched one reported as ``stop_reason: "stop_sequence"`` with the matched text, the streamed
``tool_use`` block's ``content_block_start`` (an empty ``input`` object, then
``input_json_delta`` events whose ``partial_json`` joins to the input), ``count_tokens`` over a
plain string ``content``, ``thinking.budget_tokens`` checks in Anthropic's error shape,
``usage.input_tokens`` in ``message_start``, a ``tool_use`` left without its ``tool_result``,
and ``service_tier``.

Fixed here: ``service_tier`` was ignored whatever its value; a value other than ``auto`` /
``standard_only`` is now a 400 naming it, and a request that sets it gets
``usage.service_tier: "standard"`` on the message and ``message_start``
(Portkey-AI/gateway#1681). The other reports passed as-is; their tests are regression guards.

Replayed through the in-process routes on fake tokenizer managers (no server, no model): the
engine's stop-string behaviour is that of ``chat_tools_testutil.ChunkTM``. Oracles: Anthropic's
API reference (the stream's event order, the ``tool_use`` start block, ``stop_sequence``) and the
reports' stated expected values; the ``anthropic`` client's own types, stream accumulator and
errors; ``json.loads`` on the joined ``partial_json``; the DeepSeek tokenizer (``tok``) on the
prompt the route handed the engine for token counts.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest
from anthropic_testutil import NO_THINK, make_clients
from anthropic_testutil import stream_events as _stream
from chat_tools_testutil import ChunkTM
from fake_prompt_tm import ARGS, CALL, MODEL, WEATHER_SCHEMA, PromptTM
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "Count: one two three STOP four five"}]
TOOL = {"name": "get_weather", "description": "Weather of a city.", "input_schema": WEATHER_SCHEMA}


# ----------------------------------------------------------------------------- stop sequences


def test_rapid_mlx_462_stop_sequences_reach_the_engine_and_stop(tok: PreTrainedTokenizerFast) -> None:
    """raullenchai/Rapid-MLX#462 (``/v1/messages`` mapped ``stop_sequences`` onto the chat request
    but never handed them to the engine, so the model wrote past the stop; its note: the matched
    stop should then be ``stop_reason: "stop_sequence"`` with the string in ``stop_sequence``):
    the engine request carries the stop strings, streamed and not; the text ends before the
    match (the match itself left out, as Anthropic returns it), ``stop_reason`` is
    ``stop_sequence`` and ``stop_sequence`` the string that matched, in the non-streamed
    message, in the stream's ``message_delta`` and in the ``anthropic`` client's accumulated
    message. A reply that never meets a stop is ``end_turn`` with ``stop_sequence`` null.
    Oracle: Anthropic's Messages reference; the ``anthropic`` client's types and accumulator."""
    stops = ["STOP", "never-written"]
    tm = ChunkTM(tok, reply="one two three STOP four five")
    client, _, tc = make_clients(tm)  # type: ignore[arg-type]
    msg = client.messages.create(
        model=MODEL, max_tokens=50, messages=USER, stop_sequences=stops, thinking=NO_THINK
    )
    assert tm.received[-1].sampling_params["stop"] == stops
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "STOP")
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text.rstrip() == "one two three"

    events = _stream(tc, {"messages": USER, "stop_sequences": stops, "thinking": NO_THINK, "max_tokens": 50})
    assert tm.received[-1].sampling_params["stop"] == stops
    delta = next(e for e in events if e["type"] == "message_delta")["delta"]
    assert (delta["stop_reason"], delta["stop_sequence"]) == ("stop_sequence", "STOP")
    streamed = "".join(e["delta"]["text"] for e in events if e.get("delta", {}).get("type") == "text_delta")
    assert "STOP" not in streamed and streamed.rstrip() == "one two three"

    with client.messages.stream(
        model=MODEL, max_tokens=50, messages=USER, stop_sequences=stops, thinking=NO_THINK
    ) as s:
        final = s.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "STOP")

    plain = ChunkTM(tok, reply="one two three")
    client2, _, _ = make_clients(plain)  # type: ignore[arg-type]
    msg2 = client2.messages.create(
        model=MODEL, max_tokens=50, messages=USER, stop_sequences=stops, thinking=NO_THINK
    )
    assert (msg2.stop_reason, msg2.stop_sequence) == ("end_turn", None)


# ----------------------------------------------------------------------------- streamed tool_use


def test_cc_switch_2556_streamed_tool_use_starts_with_empty_input(tok: PreTrainedTokenizerFast) -> None:
    """farion1231/cc-switch#2556 and its fix farion1231/cc-switch#2557 (a streamed ``tool_use``
    ``content_block_start`` came without ``input``, and clients rejected the malformed block
    before the argument deltas arrived): Anthropic's streaming reference opens a ``tool_use``
    block with ``id``, ``name`` and ``input: {}``, then streams the arguments as
    ``input_json_delta`` events whose ``partial_json`` pieces join to the input's JSON. Here the
    start block is exactly that, the joined ``partial_json`` parses to the call's arguments, the
    block closes with ``content_block_stop``, ``stop_reason`` is ``tool_use``, and the
    ``anthropic`` client's accumulated message holds the same input as the non-streamed one.
    Oracle: Anthropic's streaming reference; ``json.loads``; the ``anthropic`` accumulator."""
    tm = PromptTM(tok, reply="Checking." + CALL)
    client, _, tc = make_clients(tm)
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Weather in Paris for 3 days?"}],
        "tools": [TOOL],
        "thinking": NO_THINK,
    }
    events = _stream(tc, body)
    starts = [e for e in events if e["type"] == "content_block_start"]
    use = next(e for e in starts if e["content_block"]["type"] == "tool_use")
    block = use["content_block"]
    assert block["input"] == {} and block["name"] == "get_weather"
    assert isinstance(block["id"], str) and block["id"]
    idx = use["index"]
    mine = [e for e in events if e.get("index") == idx]
    assert mine[0] is use and mine[-1]["type"] == "content_block_stop"
    deltas = [e["delta"] for e in mine[1:-1]]
    assert deltas and {d["type"] for d in deltas} == {"input_json_delta"}
    assert json.loads("".join(d["partial_json"] for d in deltas)) == ARGS
    assert next(e for e in events if e["type"] == "message_delta")["delta"]["stop_reason"] == "tool_use"

    with client.messages.stream(model=MODEL, max_tokens=200, **body) as s:
        final = s.get_final_message()
    done = client.messages.create(model=MODEL, max_tokens=200, **body)
    got = [b for b in final.content if b.type == "tool_use"]
    want = [b for b in done.content if b.type == "tool_use"]
    assert [(b.name, b.input) for b in got] == [(b.name, b.input) for b in want] == [("get_weather", ARGS)]


# ----------------------------------------------------------------------------- count_tokens


def test_litellm_15323_count_tokens_on_string_content_counts_the_prompt(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#15323 (``POST /v1/messages/count_tokens`` with ``{"role": "user",
    "content": "Hello"}`` answered HTTP 500 "'NoneType' object is not iterable"; the expected
    answer is ``{"input_tokens": N}``): here the plain-string form is served with HTTP 200, its
    ``input_tokens`` is the token count of the prompt ``/v1/messages`` hands the engine for the
    same body, and the block form of the same text counts the same. Oracle: the DeepSeek
    tokenizer on the prompt the engine received; the ``anthropic`` client's
    ``MessageTokensCount`` type."""
    msgs_str = [{"role": "user", "content": "Hello"}]
    msgs_blocks = [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
    tm = PromptTM(tok, reply="Hi.")
    client, _, tc = make_clients(tm)
    r = tc.post(
        "/v1/messages/count_tokens", json={"model": MODEL, "messages": msgs_str, "thinking": NO_THINK}
    )
    assert r.status_code == 200, r.text
    assert set(r.json()) >= {"input_tokens"}
    client.messages.create(model=MODEL, max_tokens=8, messages=msgs_str, thinking=NO_THINK)  # type: ignore[arg-type]
    served = len(tok.encode(tok.decode(tm.received[-1].input_ids), add_special_tokens=False))
    assert r.json()["input_tokens"] == len(tm.received[-1].input_ids) == served
    counted = client.messages.count_tokens(model=MODEL, messages=msgs_blocks, thinking=NO_THINK)  # type: ignore[arg-type]
    assert counted.input_tokens == r.json()["input_tokens"]


# ----------------------------------------------------------------------------- thinking budget


@pytest.mark.parametrize("budget", [0, -5, "1024", 1.5, None, True])
def test_antigravity2api_150_bad_budget_tokens_is_a_400_naming_it(
    tok: PreTrainedTokenizerFast, budget: Any
) -> None:
    """liuw1535/antigravity2api-nodejs#150 and themaximalist/llm.js#30 (a client built a
    ``thinking: {"type": "enabled", "budget_tokens": ...}`` the Messages API refused; the
    refusal is a 400 ``invalid_request_error`` in Anthropic's error shape naming
    ``thinking.budget_tokens``): a ``budget_tokens`` that is not a positive integer (zero,
    negative, a string, a float, missing, a boolean) is a 400 with ``type: "error"``,
    ``error.type: "invalid_request_error"`` and a message naming ``thinking.budget_tokens``; the
    ``anthropic`` client raises ``BadRequestError``; no engine request is made. Oracle:
    Anthropic's error reference (the shape); the ``anthropic`` client's error type."""
    thinking: dict[str, Any] = {"type": "enabled"}
    if budget is not None:
        thinking["budget_tokens"] = budget
    tm = PromptTM(tok, reply="Ok.")
    client, _, tc = make_clients(tm)
    for stream in (False, True):
        r = tc.post(
            "/v1/messages",
            json={
                "model": MODEL,
                "max_tokens": 2048,
                "messages": USER,
                "thinking": thinking,
                "stream": stream,
            },
        )
        assert r.status_code == 400, r.text
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
        assert "thinking.budget_tokens" in err["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=2048, messages=USER, thinking=thinking)  # type: ignore[arg-type]
    assert tm.received == []


# ----------------------------------------------------------------------------- usage in message_start


def test_glm5_139_message_start_reports_the_input_tokens(tok: PreTrainedTokenizerFast) -> None:
    """zai-org/GLM-5#139 and chenyme/grok2api#612 (an Anthropic-compatible stream's
    ``message_start`` carried ``usage: {"input_tokens": 0, "output_tokens": 0}`` and the real
    counts came only in the last ``message_delta``, so clients that read context usage at the
    start of the stream, Claude Code among them, showed none; also sgl-project/sglang#20830):
    Anthropic's native API fills ``usage.input_tokens`` in ``message_start``. Here it is the
    prompt's token count (the ids the engine received), the same as the non-streamed message's
    ``usage.input_tokens``; the ``message_delta``'s ``output_tokens`` is the reply's token count,
    the same as the non-streamed ``usage.output_tokens``. Oracle: Anthropic's streaming
    reference; the DeepSeek tokenizer on the reply and the engine request."""
    reply = "Sunny and mild."
    tm = PromptTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    body = {"messages": [{"role": "user", "content": "Weather?"}], "thinking": NO_THINK}
    events = _stream(tc, body)
    prompt_len = len(tm.received[-1].input_ids)
    start = events[0]
    assert start["type"] == "message_start"
    assert start["message"]["usage"]["input_tokens"] == prompt_len > 0
    out_len = len(tok.encode(reply, add_special_tokens=False))
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["usage"]["output_tokens"] == out_len
    done = client.messages.create(model=MODEL, max_tokens=200, **body)  # type: ignore[arg-type]
    assert (done.usage.input_tokens, done.usage.output_tokens) == (prompt_len, out_len)


# ----------------------------------------------------------------------------- orphan tool_use


def test_claude_code_8847_tool_use_without_result_is_a_400(tok: PreTrainedTokenizerFast) -> None:
    """anthropics/claude-code#8847 (a history whose assistant ``tool_use`` is not answered by a
    ``tool_result`` in the next user message is refused by the Messages API: 400
    ``invalid_request_error`` "messages.N: `tool_use` ids were found without `tool_result` blocks
    immediately after: <id>"): here the same history is a 400 in Anthropic's error shape whose
    message starts ``messages.2`` and names the id, on ``/v1/messages`` (streamed too) and on
    ``/v1/messages/count_tokens``; the ``anthropic`` client raises ``BadRequestError``; no
    engine request is made. Answered by a ``tool_result``, the same history is served. Oracle:
    DeepSeek's own Messages converter refuses the same history with the same message
    (``deepseek-recipe``); the ``anthropic`` client's error type."""
    recipe = pytest.importorskip("deepseek_recipe_testutil")
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": "And now?"},
    ]
    with pytest.raises(Exception, match="without `tool_result` blocks immediately after"):
        recipe.recipe_messages_prompt({"messages": history})
    tm = PromptTM(tok, reply="Ok.")
    client, _, tc = make_clients(tm)
    base = {"model": MODEL, "messages": history, "tools": [TOOL], "thinking": NO_THINK}
    for path, extra in (
        ("/v1/messages", {"max_tokens": 20}),
        ("/v1/messages", {"max_tokens": 20, "stream": True}),
        ("/v1/messages/count_tokens", {}),
    ):
        r = tc.post(path, json={**base, **extra})
        assert r.status_code == 400, (path, r.text)
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
        msg = err["error"]["message"]
        assert msg.startswith("messages.2") and "toolu_1" in msg and "tool_result" in msg
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(max_tokens=20, **base)  # type: ignore[arg-type]
    assert tm.received == []

    answered = [
        *history[:2],
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny."}]},
    ]
    ok = client.messages.create(max_tokens=20, **{**base, "messages": answered})  # type: ignore[arg-type]
    assert ok.stop_reason == "end_turn" and len(tm.received) == 1


# ----------------------------------------------------------------------------- service_tier


def test_portkey_1681_service_tier_checked_and_named_in_usage(tok: PreTrainedTokenizerFast) -> None:
    """Portkey-AI/gateway#1681 (fixing Portkey-AI/gateway#1645: a Messages ``service_tier`` of
    ``auto`` or ``standard_only`` must be taken as sent, and the response's ``usage.service_tier``,
    ``standard`` / ``priority`` / ``batch``, surfaced; also tghamm/Anthropic.SDK#147 and
    spanlens/Spanlens#148: Anthropic's responses carry ``usage.service_tier``): here either value
    is served and the message's ``usage.service_tier`` is ``standard`` (the one tier this server
    has), non-streamed and in the stream's ``message_start``, read by the ``anthropic`` client's
    ``Usage``; without the field the key is left out; a value outside Anthropic's two is a 400
    ``invalid_request_error`` naming ``service_tier`` (streamed too, and the client raises
    ``BadRequestError``) with no engine request, as the chat route refuses an unknown tier.
    Served before, ``service_tier`` was ignored whatever its value. Oracle: Anthropic's API
    reference (the request's two values, the ``Usage.service_tier`` values); the ``anthropic``
    client's types and errors."""
    tm = PromptTM(tok, reply="Ok.")
    client, _, tc = make_clients(tm)
    for tier in ("auto", "standard_only"):
        msg = client.messages.create(
            model=MODEL, max_tokens=20, messages=USER, thinking=NO_THINK, service_tier=tier
        )
        assert msg.usage.service_tier == "standard"
        events = _stream(tc, {"messages": USER, "thinking": NO_THINK, "service_tier": tier})
        assert events[0]["message"]["usage"]["service_tier"] == "standard"
        with client.messages.stream(
            model=MODEL, max_tokens=20, messages=USER, thinking=NO_THINK, service_tier=tier
        ) as s:
            assert s.get_final_message().usage.service_tier == "standard"
    plain = client.messages.create(model=MODEL, max_tokens=20, messages=USER, thinking=NO_THINK)
    assert "service_tier" not in plain.usage.model_dump(exclude_unset=True)

    sent = len(tm.received)
    for stream in (False, True):
        r = tc.post(
            "/v1/messages",
            json={
                "model": MODEL,
                "max_tokens": 20,
                "messages": USER,
                "service_tier": "priority",
                "stream": stream,
            },
        )
        assert r.status_code == 400, r.text
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
        assert err["error"]["message"].startswith("service_tier")
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=20, messages=USER, service_tier="fast")  # type: ignore[arg-type]
    assert len(tm.received) == sent

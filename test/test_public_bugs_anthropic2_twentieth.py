"""Public bug reports of peer servers' (and gateways') Anthropic Messages API, replayed through
the in-process ``/v1/messages`` and ``/v1/messages/count_tokens`` routes (each test names its
report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: the
``anthropic`` client's own types (every body and event validated by ``post``) and its stream
accumulator (``client.messages.stream``), the Messages API reference (the stream's event grammar,
``message_delta``'s shape, Anthropic's own 400 texts), and ``/v1/chat/completions`` on the same
fake engine for the prompt a conversation must render.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic_testutil import CHAT_WEATHER, WEATHER, make_clients, post
from deepseek_recipe_testutil import recipe_messages_prompt
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM, blocks
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
THINK = {"type": "enabled", "budget_tokens": 1024}


def _starts(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(e["index"], e["content_block"]["type"]) for e in events if e["type"] == "content_block_start"]


def _set_fields(bs: list[dict[str, Any]], drop: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Content blocks without their unset (``None``) fields and the ``drop`` keys."""
    return [{k: v for k, v in b.items() if v is not None and k not in drop} for b in bs]


def _message_delta(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e["type"] == "message_delta")


def test_thinking_text_and_tool_use_blocks_have_their_own_indices(tok: PreTrainedTokenizerFast) -> None:
    """ollama/ollama#14816: after a thinking block (index 0) and a text block (index 1), the
    ``tool_use`` block was started with a stale index, so its deltas landed on the text block.
    Anthropic's stream numbers blocks 0, 1, 2 in the order they are written, each delta carrying
    its block's index; the SDK's accumulation of the stream is the non-streamed message."""
    tm = PromptTM(tok, reply="Need the weather tool.</think>Let me check." + CALL)
    client, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "tools": [WEATHER], "thinking": THINK})
    assert _starts(events) == [(0, "thinking"), (1, "text"), (2, "tool_use")]
    json_deltas = {e["index"] for e in events if e.get("delta", {}).get("type") == "input_json_delta"}
    assert json_deltas == {2}
    assert [b["type"] for b in body["content"]] == ["thinking", "text", "tool_use"]
    assert body["content"][2]["input"] == ARGS
    with client.messages.stream(
        model=MODEL, max_tokens=100, messages=USER, tools=[WEATHER], thinking=THINK
    ) as s:
        final = s.get_final_message()
    assert _set_fields(blocks(final), ("id",)) == _set_fields(body["content"], ("id",))


def test_tool_only_turn_streams_no_empty_text_block_and_ends_tool_use(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#34692: a turn that is only a tool call streamed a spurious empty leading
    ``text`` block and ended with ``stop_reason: "end_turn"``. The model's markup opens with a
    blank line before the call; that whitespace is no text block: the stream has the ``tool_use``
    block alone at index 0, and ``message_delta`` says ``tool_use``, as the whole message does."""
    tm = PromptTM(tok, reply=CALL)
    client, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "tools": [WEATHER]})
    assert [b["type"] for b in body["content"]] == ["tool_use"] and body["stop_reason"] == "tool_use"
    assert _starts(events) == [(0, "tool_use")]
    assert _message_delta(events)["delta"]["stop_reason"] == "tool_use"
    with client.messages.stream(model=MODEL, max_tokens=100, messages=USER, tools=[WEATHER]) as s:
        final = s.get_final_message()
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == [("tool_use", ARGS)]
    assert final.stop_reason == "tool_use"


@pytest.mark.parametrize("forced", [False, True])
def test_text_then_tool_call_stream_ends_with_tool_use(tok: PreTrainedTokenizerFast, forced: bool) -> None:
    """maximhq/bifrost#3638: a streamed turn of text followed by a tool call ended with the text's
    ``end_turn`` instead of ``tool_use`` (the finish reason of the last chunk was read, not the
    turn's). Here the stream's ``message_delta`` and the non-streamed message both say
    ``tool_use``, with ``tool_choice`` left to the model or forcing the tool."""
    tm = PromptTM(tok, reply="I will look it up." + CALL)
    _, _, tc = make_clients(tm)
    extra = {"tool_choice": {"type": "tool", "name": "get_weather"}} if forced else {}
    body, events = post(tc, {"messages": USER, "tools": [WEATHER], **extra})
    assert body["stop_reason"] == "tool_use"
    assert _message_delta(events)["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert [t for _, t in _starts(events)][-1] == "tool_use"


@pytest.mark.parametrize(
    ("reply", "max_tokens", "reason"),
    [("Sunny.", 100, "end_turn"), ("It is sunny and warm in Paris today.", 3, "max_tokens")],
)
def test_message_delta_always_carries_stop_sequence(
    tok: PreTrainedTokenizerFast, reply: str, max_tokens: int, reason: str
) -> None:
    """vllm-project/vllm#55324: the streamed ``message_delta`` left ``stop_sequence`` out (a
    serializer that dropped unset fields), where Anthropic's API always sends it (``null`` when no
    stop sequence fired). Both keys are in the delta, for a natural end and a ``max_tokens`` cut."""
    tm = PromptTM(tok, reply=reply)
    _, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "max_tokens": max_tokens, "stop_sequences": ["NEVER"]})
    assert body["stop_reason"] == reason
    assert _message_delta(events)["delta"] == {"stop_reason": reason, "stop_sequence": None}


@pytest.mark.parametrize("cache_report", [False, True])
def test_message_delta_usage_is_cumulative_and_matches_the_message(
    tok: PreTrainedTokenizerFast, cache_report: bool
) -> None:
    """cline/cline#4346: Anthropic's ``message_delta`` usage is cumulative and carries the input
    and cache counts too; a client that adds them up was thrown off by a server whose counts
    disagreed. Here the final ``message_delta``'s usage equals the non-streamed message's (every
    field it sends), its ``input_tokens`` equal ``message_start``'s, and no count is ``null``."""
    tm = PromptTM(tok, reply="Sunny and warm.")
    _, _, tc = make_clients(tm, cache_report=cache_report)
    body, events = post(tc, {"messages": USER})
    final_usage = _message_delta(events)["usage"]
    assert all(isinstance(v, int) for v in final_usage.values()), final_usage
    assert {k: body["usage"][k] for k in final_usage} == final_usage
    assert final_usage["input_tokens"] == events[0]["message"]["usage"]["input_tokens"]
    assert final_usage["input_tokens"] + final_usage.get("cache_read_input_tokens", 0) == len(
        tm.received[-1].input_ids
    )


def test_message_delta_usage_is_beside_the_delta_not_inside(tok: PreTrainedTokenizerFast) -> None:
    """fumito-ito/AnthropicSwiftSDK#7: Anthropic's documentation once showed ``usage`` inside
    ``message_delta.delta`` while the API sends it beside ``delta``; clients that read one place
    saw no usage. The ``anthropic`` client's ``RawMessageDeltaEvent`` reads it beside ``delta``:
    here it is there, and ``delta`` holds the stop fields only."""
    tm = PromptTM(tok, reply="Sunny.")
    _, _, tc = make_clients(tm)
    _, events = post(tc, {"messages": USER})
    md = _message_delta(events)
    assert set(md) == {"type", "delta", "usage"}
    assert set(md["delta"]) == {"stop_reason", "stop_sequence"}
    assert md["usage"]["output_tokens"] > 0


@pytest.mark.parametrize("stops", [[""], ["\n", ""]])
@pytest.mark.parametrize("stream", [False, True])
def test_empty_stop_sequence_is_a_400(tok: PreTrainedTokenizerFast, stops: list[str], stream: bool) -> None:
    """MegaGrindStone/mcp-web-ui#5: Anthropic's API refuses an empty stop sequence (400
    ``invalid_request_error``, "stop_sequences: each stop sequence must be non-empty"); an empty
    stop string would otherwise match at once. Here too: a 400 in Anthropic's error shape naming
    ``stop_sequences``, nothing reaches the engine, and the ``anthropic`` client raises its
    ``BadRequestError``."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)
    r = tc.post(
        "/v1/messages",
        json={"model": MODEL, "max_tokens": 20, "messages": USER, "stop_sequences": stops, "stream": stream},
    )
    assert r.status_code == 400
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"].startswith("stop_sequences")
    assert tm.received == []
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=20, messages=USER, stop_sequences=stops)


def test_count_tokens_without_messages_is_a_400_naming_messages(tok: PreTrainedTokenizerFast) -> None:
    """langchain4j/langchain4j#3764: a count-tokens request without ``messages`` got Anthropic's
    400 ``invalid_request_error`` "messages: Field required". Here the same: a 400 in Anthropic's
    error shape whose message starts with ``messages``, for a missing field and a wrong type; a
    well-formed request is then counted."""
    tm = PromptTM(tok)
    client, _, tc = make_clients(tm)
    for body in ({"model": MODEL}, {"model": MODEL, "messages": "hi"}):
        r = tc.post("/v1/messages/count_tokens", json=body)
        assert r.status_code == 400, r.text
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
        assert err["error"]["message"].startswith("messages"), err
    assert client.messages.count_tokens(model=MODEL, messages=USER).input_tokens > 0


@pytest.mark.parametrize("bad_input", ['{"city": "Paris"}', None, 3])
def test_replayed_tool_use_input_must_be_an_object(tok: PreTrainedTokenizerFast, bad_input: Any) -> None:
    """0xPlaygrounds/rig#1964: a replayed ``tool_use`` whose ``input`` was a JSON string (the
    OpenAI-style arguments text) or another non-object got Anthropic's deterministic 400
    ("...tool_use.input: Input should be a valid dictionary"). Here it is a 400 naming
    ``messages.1.content.0.input`` on both routes, and nothing reaches the engine; the same turn
    with an object ``input`` is served."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)

    def history(inp: Any) -> list[dict[str, Any]]:
        use = {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": inp}
        result = {"type": "tool_result", "tool_use_id": "toolu_01", "content": "18C"}
        return [*USER, {"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]

    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = tc.post(
            path, json={"model": MODEL, "max_tokens": 20, "messages": history(bad_input), "tools": [WEATHER]}
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"].startswith("messages.1.content.0.input"), r.text
    assert tm.received == []
    m = client.messages.create(model=MODEL, max_tokens=20, messages=history(ARGS), tools=[WEATHER])
    assert m.stop_reason == "end_turn"


def test_thinking_and_redacted_thinking_replayed_in_a_tool_loop(tok: PreTrainedTokenizerFast) -> None:
    """CaddyGlow/ccproxy-api#72: the second request of a tool loop with thinking on (adaptive) --
    the assistant turn replayed as ``thinking``, ``redacted_thinking`` and ``tool_use`` blocks,
    then the ``tool_result`` -- was refused because the request schema knew no thinking blocks.
    It is served here; the ``redacted_thinking`` block (another model's encrypted reasoning) adds
    nothing to the prompt, and the prompt is the chat route's for the same turn (reasoning as
    ``reasoning_content``, the call as ``tool_calls``, the result as a ``tool`` message)."""
    tm = PromptTM(tok, reply="The tool said 18C.</think>It is sunny.")
    client, oa, tc = make_clients(tm)
    think = {"type": "thinking", "thinking": "Call the weather tool.", "signature": "sig"}
    use = {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": ARGS}
    result = {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "18C"}]}

    def prompt(assistant: list[dict[str, Any]]) -> list[int]:
        msgs = [*USER, {"role": "assistant", "content": assistant}, {"role": "user", "content": [result]}]
        m = client.messages.create(
            model=MODEL, max_tokens=50, messages=msgs, tools=[WEATHER], thinking={"type": "adaptive"}
        )
        assert m.content[-1].type == "text"
        return list(tm.received[-1].input_ids)

    with_redacted = prompt([think, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}, use])
    assert with_redacted == prompt([think, use])
    call = {
        "id": "toolu_01",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'},
    }
    oa.chat.completions.create(
        model=MODEL,
        max_tokens=50,
        messages=[
            *USER,
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": think["thinking"],
                "tool_calls": [call],
            },
            {"role": "tool", "tool_call_id": "toolu_01", "content": "18C"},
        ],
        tools=[CHAT_WEATHER],
        extra_body={"thinking": {"type": "enabled"}},
    )
    assert with_redacted == list(tm.received[-1].input_ids)


def test_system_role_inside_messages_is_a_system_turn(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#28792: Claude Code sends ``{"role": "system"}`` entries inside
    ``messages`` and the Anthropic route refused them (its message role allowed user and
    assistant only), so Claude Code did not work. Here they are served, string or text blocks
    alike, and render the prompt DeepSeek's own Messages converter renders (the entry stays at its
    place as a ``<system-reminder>``); ``count_tokens`` counts that prompt."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, _ = make_clients(tm)
    note = "Reply in one word."
    for content in (note, [{"type": "text", "text": note, "cache_control": {"type": "ephemeral"}}]):
        msgs = [*USER, {"role": "system", "content": content}]
        body = {"system": "You are a weather bot.", "messages": msgs}
        m = client.messages.create(model=MODEL, max_tokens=20, thinking={"type": "disabled"}, **body)
        want = recipe_messages_prompt(body)
        assert tok.decode(tm.received[-1].input_ids) == want
        assert m.usage.input_tokens == len(tm.received[-1].input_ids)
        counted = client.messages.count_tokens(model=MODEL, thinking={"type": "disabled"}, **body)
        assert counted.input_tokens == len(tm.received[-1].input_ids)


@pytest.mark.parametrize("thinking", [THINK, {"type": "disabled"}])
def test_thinking_blocks_follow_the_thinking_config_not_the_transport(
    tok: PreTrainedTokenizerFast, thinking: dict[str, Any]
) -> None:
    """AgnesAI-Labs/AgnesAI-Models#117: ``thinking`` blocks came only when streaming (and without
    a ``signature``), never in the non-streamed message. The Messages reference: the ``thinking``
    config decides, not ``stream``: enabled, both carry the same signed ``thinking`` block first
    (the SDK's accumulation equals the whole message); disabled, neither has one and the model is
    asked without its thinking mode."""
    enabled = thinking["type"] == "enabled"
    tm = PromptTM(tok, reply="Look it up.</think>Sunny." if enabled else "Sunny.")
    client, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "thinking": thinking})
    kinds = [b["type"] for b in body["content"]]
    assert kinds == (["thinking", "text"] if enabled else ["text"])
    assert [t for _, t in _starts(events)] == kinds
    with client.messages.stream(model=MODEL, max_tokens=100, messages=USER, thinking=thinking) as s:
        final = s.get_final_message()
    assert _set_fields(blocks(final)) == body["content"]
    if enabled:
        assert body["content"][0]["signature"]
    prompt = tok.decode(tm.received[-1].input_ids)
    assert prompt.endswith("<think>") == enabled


def test_max_tokens_zero_is_a_cache_prewarm_call(tok: PreTrainedTokenizerFast) -> None:
    """stdapi-ai/stdapi.ai#266: ``max_tokens: 0`` -- the ``anthropic`` client's documented cache
    pre-warm call ("Set to 0 to populate the prompt cache without generating a response",
    ``MessageCreateParams.max_tokens``) -- was refused as under the minimum of 1. Here it is
    served: the engine prefills the same prompt a real request would send with no token budget
    (``max_new_tokens`` 0, so the prefix is cached), and the reply is Anthropic's pre-warm answer:
    no content, ``stop_reason: "max_tokens"``, ``output_tokens`` 0, the prompt's
    ``input_tokens``; streamed the same, with no content block. A negative ``max_tokens`` is
    still a 400 naming it."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)
    system = [{"type": "text", "text": "You are a weather bot.", "cache_control": {"type": "ephemeral"}}]
    client.messages.create(model=MODEL, max_tokens=20, system=system, messages=USER, tools=[WEATHER])
    real_prompt = list(tm.received[-1].input_ids)
    body, events = post(tc, {"max_tokens": 0, "system": system, "messages": USER, "tools": [WEATHER]})
    assert (body["content"], body["stop_reason"], body["stop_sequence"]) == ([], "max_tokens", None)
    assert body["usage"]["output_tokens"] == 0 and body["usage"]["input_tokens"] == len(real_prompt)
    assert list(tm.received[-1].input_ids) == real_prompt
    assert tm.received[-1].sampling_params["max_new_tokens"] == 0
    assert [e["type"] for e in events if e["type"] != "ping"] == [
        "message_start",
        "message_delta",
        "message_stop",
    ]
    assert _message_delta(events)["delta"]["stop_reason"] == "max_tokens"
    m = client.messages.create(model=MODEL, max_tokens=0, system=system, messages=USER, tools=[WEATHER])
    assert m.content == [] and m.stop_reason == "max_tokens" and m.usage.output_tokens == 0
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": -1, "messages": USER})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("max_tokens")

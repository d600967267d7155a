"""A thirty-second set of public bug reports, replayed against the Anthropic Messages API
(``/v1/messages``, ``/v1/messages/count_tokens``): prompt-cache accounting in ``usage``
(``cache_read_input_tokens`` and ``cache_creation_input_tokens`` next to ``input_tokens``,
non-streamed, in the stream's ``message_start`` and in the ``anthropic`` client's accumulated
message), a ``tool_result`` block without ``content``, with ``is_error: true`` or followed by
text in the same turn, an assistant ``thinking`` block replayed without its ``signature``,
``count_tokens`` checking ``tool_result`` / ``tool_use`` pairing as ``/v1/messages`` does,
``anthropic-beta`` values the server has no feature for, and a refused ``image`` block leaving
later requests unaffected.

All reports passed as-is; their tests are regression guards.

Replayed through the in-process routes on the fake tokenizer manager ``fake_prompt_tm.PromptTM``
(no server, no model; it reports 2 cached prompt tokens on every output). Oracles: the
``anthropic`` client's own types, errors, stream accumulator and ``Usage`` docs (the total input
is ``input_tokens + cache_creation_input_tokens + cache_read_input_tokens``); Anthropic's error
shape; the DeepSeek tokenizer (``tok``) on the prompt the route handed the engine; a cold run of
the same conversation on a fresh app.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic_testutil import NO_THINK, make_clients
from anthropic_testutil import stream_events as _stream
from fake_prompt_tm import MODEL, PromptTM
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "Hello, who are you?"}]
CACHED = 2  # what PromptTM reports as the engine's cached prompt tokens


def _total_input(usage: Any) -> int:
    """Anthropic's total input: ``input_tokens + cache_creation + cache_read`` (0 when unset)."""
    get = usage.get if isinstance(usage, dict) else lambda k: getattr(usage, k)
    return (
        get("input_tokens")
        + (get("cache_creation_input_tokens") or 0)
        + (get("cache_read_input_tokens") or 0)
    )


def test_omlx_912_cache_read_tokens_are_reported_not_zero(tok: PreTrainedTokenizerFast) -> None:
    """jundot/omlx#912 (``/v1/messages`` always returned ``cache_read_input_tokens: 0`` whatever the
    prefix cache served): with the cache report on, the non-streamed message's
    ``cache_read_input_tokens`` is the engine's cached count, ``cache_creation_input_tokens`` 0,
    and the three fields sum to the prompt's token count (no double counting, as in the
    ``anthropic`` client's ``Usage`` docs). Oracle: the prompt ids the engine received."""
    tm = PromptTM(tok, reply="I am a model.")
    client, _, _ = make_clients(tm, cache_report=True)
    msg = client.messages.create(model=MODEL, max_tokens=30, messages=USER, thinking=NO_THINK)
    n_prompt = len(tm.received[-1].input_ids)
    assert msg.usage.cache_read_input_tokens == CACHED
    assert msg.usage.cache_creation_input_tokens == 0
    assert msg.usage.input_tokens == n_prompt - CACHED
    assert _total_input(msg.usage) == n_prompt
    assert msg.usage.output_tokens == len(tok.encode("I am a model.", add_special_tokens=False))


def test_vllm_45083_streamed_usage_carries_cache_reads(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#45083 (the Messages converters built ``usage`` with input/output tokens
    only, so ``cache_read_input_tokens`` was absent from ``message_start`` and ``message_delta``
    even with prompt-token details on): streamed with the cache report on, ``message_start``'s
    usage reports the cache reads and the total input equals the prompt's token count; the
    ``anthropic`` client's accumulated message has the same usage as the non-streamed one.
    Oracle: the prompt ids the engine received; the client's stream accumulator."""
    tm = PromptTM(tok, reply="I am a model.")
    client, _, tc = make_clients(tm, cache_report=True)
    events = _stream(tc, {"messages": USER, "thinking": NO_THINK, "max_tokens": 30})
    n_prompt = len(tm.received[-1].input_ids)
    start = events[0]["message"]["usage"]
    assert start["cache_read_input_tokens"] == CACHED and _total_input(start) == n_prompt
    delta = next(e for e in events if e["type"] == "message_delta")["usage"]
    assert delta["output_tokens"] == len(tok.encode("I am a model.", add_special_tokens=False))
    with client.messages.stream(model=MODEL, max_tokens=30, messages=USER, thinking=NO_THINK) as s:
        final = s.get_final_message()
    plain = client.messages.create(model=MODEL, max_tokens=30, messages=USER, thinking=NO_THINK)
    assert final.usage.model_dump() == plain.usage.model_dump()
    assert _total_input(final.usage) == n_prompt


def _tool_turns(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A user turn, the assistant's ``get_weather`` call and the user's ``result`` block."""
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", **result}]},
    ]


TOOL = {
    "name": "get_weather",
    "description": "Weather of a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.mark.parametrize("result", [{}, {"content": []}, {"content": ""}], ids=["absent", "list", "str"])
def test_inspect_ai_3181_tool_result_without_content(
    tok: PreTrainedTokenizerFast, result: dict[str, Any]
) -> None:
    """UKGovernmentBEIS/inspect_ai#3181 (a ``tool_result`` block without its optional ``content``
    broke the Anthropic bridge): the block's ``content`` is optional in Anthropic's schema, so a
    ``tool_result`` without it (or with an empty list / string) is accepted and runs on the same
    prompt as the others. Oracle: the ``anthropic`` client's ``ToolResultBlockParam`` (``content``
    not required) and a cold run of the empty-string form."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, _ = make_clients(tm)
    msg = client.messages.create(
        model=MODEL, max_tokens=20, messages=_tool_turns(result), tools=[TOOL], thinking=NO_THINK
    )
    assert msg.content[0].type == "text" and msg.content[0].text == "Sunny."
    cold = PromptTM(tok, reply="Sunny.")
    client2, _, _ = make_clients(cold)
    client2.messages.create(
        model=MODEL, max_tokens=20, messages=_tool_turns({"content": ""}), tools=[TOOL], thinking=NO_THINK
    )
    assert list(tm.received[-1].input_ids) == list(cold.received[-1].input_ids)


def test_any_llm_1401_failed_tool_result_reaches_the_prompt(tok: PreTrainedTokenizerFast) -> None:
    """mozilla-ai/any-llm#1401 (a ``tool_result`` with ``is_error: true`` was forwarded as an
    ``is_error`` key on the converted tool message, and strict backends refused every later turn):
    a failed tool result is accepted, streamed and not, and its text reaches the prompt the engine
    runs on, with no ``is_error`` key leaking into it. Oracle: the DeepSeek tokenizer decoding
    the engine's prompt ids."""
    tm = PromptTM(tok, reply="That city is unknown.")
    client, _, tc = make_clients(tm)
    turns = _tool_turns({"content": "failed: no such city", "is_error": True})
    msg = client.messages.create(model=MODEL, max_tokens=20, messages=turns, tools=[TOOL], thinking=NO_THINK)
    assert msg.stop_reason == "end_turn" and msg.content[0].text == "That city is unknown."
    prompt = tok.decode(tm.received[-1].input_ids)
    assert "failed: no such city" in prompt and "is_error" not in prompt
    events = _stream(tc, {"messages": turns, "tools": [TOOL], "thinking": NO_THINK, "max_tokens": 20})
    assert events[-1]["type"] == "message_stop"
    assert list(tm.received[-1].input_ids) == list(tm.received[0].input_ids)


def test_antigravity_270_unsigned_thinking_block_in_history(tok: PreTrainedTokenizerFast) -> None:
    """lbjlaq/Antigravity-Manager#270 (with thinking on, a replayed assistant ``thinking`` block
    without ``signature`` was a 400 ``thinking.signature: Field required``): this server checks no
    signatures, so an unsigned thinking block (as clients replaying another backend's history
    send) is accepted and runs on the same prompt as the signed one. Oracle: a cold run of the
    same history with a signature."""

    def history(block: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": [block, {"type": "text", "text": "Paris."}]},
            {"role": "user", "content": "And of Italy?"},
        ]

    thinking = {"type": "enabled", "budget_tokens": 1024}
    unsigned = {"type": "thinking", "thinking": "The user asks a capital."}
    tm = PromptTM(tok, reply="Another capital.</think>Rome.")
    client, _, _ = make_clients(tm)
    msg = client.messages.create(model=MODEL, max_tokens=2048, messages=history(unsigned), thinking=thinking)
    assert [b.type for b in msg.content] == ["thinking", "text"] and msg.content[1].text == "Rome."
    assert isinstance(msg.content[0].signature, str) and msg.content[0].signature
    cold = PromptTM(tok, reply="Another capital.</think>Rome.")
    client2, _, _ = make_clients(cold)
    signed = {**unsigned, "signature": "c2ln"}
    client2.messages.create(model=MODEL, max_tokens=2048, messages=history(signed), thinking=thinking)
    assert list(tm.received[-1].input_ids) == list(cold.received[-1].input_ids)


def test_litellm_22841_tool_result_then_text_in_one_turn(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#22841 (a user turn holding a ``tool_result`` block was partly lost on the
    way through ``/v1/messages``): a user turn with a ``tool_result`` followed by a ``text`` block
    (as Claude Code sends a result with the user's next words) hands the engine both, the result
    before the text. Oracle: the DeepSeek tokenizer decoding the engine's prompt ids."""
    tm = PromptTM(tok, reply="Sunny in Paris.")
    client, _, _ = make_clients(tm)
    turns = _tool_turns({"content": "RESULT-SUNNY"})
    turns[-1]["content"].append({"type": "text", "text": "NOW-SUMMARISE"})
    msg = client.messages.create(model=MODEL, max_tokens=20, messages=turns, tools=[TOOL], thinking=NO_THINK)
    assert msg.content[0].text == "Sunny in Paris."
    prompt = tok.decode(tm.received[-1].input_ids)
    last_user = prompt.rsplit("<｜User｜>", 1)[1]
    assert 0 <= last_user.find("RESULT-SUNNY") < last_user.find("NOW-SUMMARISE")


def test_roo_code_9873_count_tokens_checks_tool_result_pairing(tok: PreTrainedTokenizerFast) -> None:
    """RooCodeInc/Roo-Code#9873 (``count_tokens`` on a lone user turn holding a ``tool_result``
    was refused by Anthropic: "unexpected ``tool_use_id`` found in ``tool_result`` blocks ... must
    have a corresponding ``tool_use`` block in the previous message"): ``count_tokens`` validates
    the conversation as ``/v1/messages`` does, so an orphan ``tool_result`` is the same 400
    ``invalid_request_error`` naming ``messages.0.content.0.tool_use_id`` from both routes, and
    nothing reaches the engine; the paired form counts the tokens ``/v1/messages`` runs on.
    Oracle: Anthropic's behaviour quoted in the report; the ``anthropic`` client's
    ``BadRequestError``; the engine's prompt ids for the count."""
    tm = PromptTM(tok, reply="ok")
    client, _, _ = make_clients(tm)
    orphan = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_123", "content": "x"}]}
    ]
    bodies = []
    for call, kw in ((client.messages.count_tokens, {}), (client.messages.create, {"max_tokens": 10})):
        with pytest.raises(anthropic.BadRequestError) as e:
            call(model=MODEL, messages=orphan, tools=[TOOL], thinking=NO_THINK, **kw)  # type: ignore[operator]
        bodies.append(e.value.body)
    assert bodies[0] == bodies[1]
    assert bodies[0]["type"] == "error" and bodies[0]["error"]["type"] == "invalid_request_error"
    assert bodies[0]["error"]["message"].startswith("messages.0.content.0.tool_use_id")
    assert tm.received == []
    paired = _tool_turns({"content": "x"})
    n = client.messages.count_tokens(
        model=MODEL, messages=paired, tools=[TOOL], thinking=NO_THINK
    ).input_tokens
    client.messages.create(model=MODEL, max_tokens=10, messages=paired, tools=[TOOL], thinking=NO_THINK)
    assert n == len(tm.received[-1].input_ids)


BETAS = [
    "context-1m-2025-08-07",
    "prompt-caching-scope-2026-01-05",
    "advisor-tool-2026-03-01",
    "oauth-2025-04-20",
]


def test_claude_code_70563_unknown_beta_values_are_ignored(tok: PreTrainedTokenizerFast) -> None:
    """anthropics/claude-code#70563 (with a custom ``ANTHROPIC_BASE_URL`` every request failed 400
    "Unexpected beta header" for an ``anthropic-beta`` value the server did not know; also
    QuantumNous/new-api#2975 and the deprecated ``context-1m-2025-08-07``): ``anthropic-beta``
    values this server has no feature for are ignored, on ``/v1/messages`` (streamed and not) and
    ``count_tokens`` via the ``anthropic`` client's ``beta`` resource (``?beta=true``), and the
    request runs on the same prompt and count as without the header. Oracle: a cold run without
    betas; the client's beta types."""
    tm = PromptTM(tok, reply="ok")
    client, _, _ = make_clients(tm)
    msg = client.beta.messages.create(
        model=MODEL, max_tokens=10, messages=USER, betas=BETAS, thinking=NO_THINK
    )
    assert msg.content[0].type == "text" and msg.content[0].text == "ok"
    with client.beta.messages.stream(
        model=MODEL, max_tokens=10, messages=USER, betas=BETAS, thinking=NO_THINK
    ) as s:
        assert s.get_final_text() == "ok"
    n = client.beta.messages.count_tokens(
        model=MODEL, messages=USER, betas=BETAS, thinking=NO_THINK
    ).input_tokens
    cold = PromptTM(tok, reply="ok")
    client2, _, _ = make_clients(cold)
    client2.messages.create(model=MODEL, max_tokens=10, messages=USER, thinking=NO_THINK)
    assert (
        list(tm.received[0].input_ids) == list(tm.received[1].input_ids) == list(cold.received[0].input_ids)
    )
    assert n == len(cold.received[0].input_ids)


def test_free_claude_code_310_refused_image_leaves_later_turns_working(tok: PreTrainedTokenizerFast) -> None:
    """Alishahryar1/free-claude-code#310 (after an image request failed with an opaque 400, every
    later plain-text request failed too): an ``image`` block, which this text-only model cannot
    read, is a 400 ``invalid_request_error`` in Anthropic's error shape naming
    ``messages.0.content.0.type``, nothing reaches the engine, and the next text request on the
    same server succeeds as on a fresh one. Oracle: Anthropic's error shape (the ``anthropic``
    client's ``BadRequestError``); a cold run of the text request."""
    tm = PromptTM(tok, reply="A cat.")
    client, _, _ = make_clients(tm)
    img = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(
            model=MODEL,
            max_tokens=10,
            thinking=NO_THINK,
            messages=[{"role": "user", "content": [img, {"type": "text", "text": "What is this?"}]}],
        )
    body = e.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("messages.0.content.0.type")
    assert tm.received == []
    msg = client.messages.create(model=MODEL, max_tokens=10, messages=USER, thinking=NO_THINK)
    assert msg.content[0].text == "A cat."
    cold = PromptTM(tok, reply="A cat.")
    client2, _, _ = make_clients(cold)
    client2.messages.create(model=MODEL, max_tokens=10, messages=USER, thinking=NO_THINK)
    assert list(tm.received[0].input_ids) == list(cold.received[0].input_ids)

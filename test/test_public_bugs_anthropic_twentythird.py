"""Public bug reports of peer servers' and gateways' Anthropic Messages API (``/v1/messages``,
``/v1/messages/count_tokens``), replayed through the in-process routes (each test names its
report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: DeepSeek's own
Messages converter, V4 encoder and Messages response generator (the ``deepseek-recipe`` package)
for the prompt a conversation renders and the content blocks a reply reads as; the ``anthropic``
client's types (every body and event validated by ``post``) and its stream accumulator
(``client.messages.stream``).
"""

from __future__ import annotations

from typing import Any

import deepseek_recipe as recipe
import pytest
from anthropic_testutil import NO_THINK, WEATHER, comparable_content, make_clients, post, served_prompt
from deepseek_recipe_testutil import recipe_messages_prompt, recipe_messages_response
from fake_prompt_tm import ARGS, CALL, MODEL, D, PromptTM, blocks
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
THINK = {"type": "enabled", "budget_tokens": 1024}
REASONING = "The user asks about the weather, so I should look it up before answering"
CALL_USE = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 25C"}


def _prompt(tm: PromptTM, tok: PreTrainedTokenizerFast) -> str:
    return tok.decode(tm.received[-1].input_ids)


REMINDER = "The date has changed. Today's date is now 2026-12-08."


@pytest.mark.parametrize(
    "before",
    [
        pytest.param(
            [*USER, {"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "And tomorrow?"}],
            id="after-user-turn",
        ),
        pytest.param(
            [*USER, {"role": "assistant", "content": [CALL_USE]}, {"role": "user", "content": [RESULT]}],
            id="after-tool-result",
        ),
    ],
)
def test_system_message_inside_messages_stays_at_its_place(
    tok: PreTrainedTokenizerFast, before: list[dict[str, Any]]
) -> None:
    """ollama/ollama#18431 (also sgl-project/sglang#28883, vllm-project/vllm#44602,
    Blaizzy/mlx-vlm#2001): Claude Code appends ``{"role": "system"}`` messages inside ``messages``
    (a date change, plan mode, a token budget), and the server hoisted each into the top-level
    system prompt, so the head of the prompt changed every turn and the prefix cache never covered
    the conversation. jundot/omlx#2483 is the same after a ``tool_result``. Here the system message
    renders the prompt DeepSeek's own Messages converter renders (a ``<system-reminder>`` at its
    place); the prompt of the turn before it is a prefix of the prompt with it (so its cached pages
    are reused), the top-level ``system`` stays first, and ``count_tokens`` counts that prompt."""
    system = "You are a weather bot."
    first = {"system": system, "messages": before, "tools": [WEATHER]}
    nudged = {
        **first,
        "messages": [*before, {"role": "system", "content": [{"type": "text", "text": REMINDER}]}],
    }
    base, _, _ = served_prompt(tok, first)
    prompt, n, counted = served_prompt(tok, nudged)
    assert prompt == recipe_messages_prompt(nudged)
    assert base == recipe_messages_prompt(first)
    head = base.removesuffix("<｜Assistant｜></think>")
    assert head != base and prompt.startswith(head) and len(prompt) > len(head)
    assert prompt.index(system) < prompt.index(REMINDER) and prompt.count(REMINDER) == 1
    assert counted == n


def test_system_messages_of_later_turns_keep_earlier_prompts_as_prefixes(
    tok: PreTrainedTokenizerFast,
) -> None:
    """raullenchai/Rapid-MLX#1512 and BerriAI/litellm#36559: an agent's conversation grows one
    turn at a time and some turns add a ``system`` message; hoisting them to the head made every
    such turn a full re-prefill (zero reused tokens). Over three turns that each add a system
    message and a user message, each turn's prompt (up to its generation prompt) is a prefix of the
    next one's, and each is DeepSeek's own Messages converter's prompt."""
    msgs: list[dict[str, Any]] = [*USER]
    prompts = []
    for k in range(3):
        body = {"system": "Be brief.", "messages": list(msgs)}
        prompt, _, _ = served_prompt(tok, body)
        assert prompt == recipe_messages_prompt(body)
        prompts.append(prompt.removesuffix("<｜Assistant｜></think>"))
        msgs += [
            {"role": "assistant", "content": f"Answer {k}."},
            {"role": "system", "content": f"<total_tokens>{900 - k} tokens left</total_tokens>"},
            {"role": "user", "content": f"Question {k + 1}?"},
        ]
    for a, b in zip(prompts, prompts[1:], strict=False):
        assert b.startswith(a) and len(b) > len(a)


@pytest.mark.parametrize(
    ("reply", "max_tokens", "finish"),
    [
        pytest.param(REASONING, 200, "stop", id="stopped-in-reasoning"),
        pytest.param(REASONING + ".</think>Sunny.", 8, "length", id="cut-in-reasoning"),
    ],
)
def test_unclosed_reasoning_is_one_thinking_block_not_repeated_as_text(
    tok: PreTrainedTokenizerFast, reply: str, max_tokens: int, finish: str
) -> None:
    """jundot/omlx#2457: when the generation ended inside the thinking block, a Messages stream
    sent the thinking as ``thinking_delta`` events and then opened a ``text`` block holding the
    whole thinking again (byte-identical), so Claude Code showed the reasoning twice. Here a
    reasoning that never closes (the model stops in it, or ``max_tokens`` cuts it) is one
    ``thinking`` block and no ``text`` block, as DeepSeek's own Messages response generator reads
    it; the stream, the ``anthropic`` client's accumulation of it and the non-streamed message are
    the same."""
    tm = PromptTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "thinking": THINK, "max_tokens": max_tokens})
    sent = tok.decode(tok.encode(reply, add_special_tokens=False)[:max_tokens])
    want = recipe_messages_response({"messages": USER}, sent, thinking=True, finish=finish)
    assert comparable_content(body["content"]) == comparable_content(want["content"])
    assert [b["type"] for b in body["content"]] == ["thinking"]
    assert body["stop_reason"] == want["stop_reason"]
    assert [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"] == ["thinking"]
    assert not any(
        e["delta"].get("type") == "text_delta" for e in events if e["type"] == "content_block_delta"
    )
    with client.messages.stream(model=MODEL, max_tokens=max_tokens, messages=USER, thinking=THINK) as s:
        final = s.get_final_message()
    assert comparable_content(blocks(final)) == comparable_content(body["content"])
    assert final.stop_reason == body["stop_reason"]


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_is_a_thinking_block_streamed_or_not(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """raullenchai/Rapid-MLX#413: with ``stream: false`` the Messages route returned only the
    answer and dropped the reasoning (the streamed answer had it). Streamed or not, the message
    holds the reasoning as a ``thinking`` block with a non-empty ``signature`` and the answer as a
    ``text`` block, the blocks DeepSeek's own Messages response generator reads from the same
    reply."""
    reply = REASONING + ".</think>Sunny and 25C in Paris."
    tm = PromptTM(tok, reply=reply)
    client, _, _ = make_clients(tm)
    kw: dict[str, Any] = {"model": MODEL, "max_tokens": 200, "messages": USER, "thinking": THINK}
    if stream:
        with client.messages.stream(**kw) as s:
            msg = s.get_final_message()
    else:
        msg = client.messages.create(**kw)
    want = recipe_messages_response({"messages": USER}, reply, thinking=True)
    assert comparable_content(blocks(msg)) == comparable_content(want["content"])
    assert msg.content[0].type == "thinking" and msg.content[0].signature
    assert msg.stop_reason == want["stop_reason"] == "end_turn"


def test_answer_after_reasoning_is_text_not_reasoning_again(tok: PreTrainedTokenizerFast) -> None:
    """ai-dynamo/dynamo#7358: the Messages stream parsed the reasoning a second time over output
    the chat layer had split already, and every token after ``</think>`` was classified as
    reasoning (no ``text`` block: the answer never reached Claude Code). Streamed token by token,
    every delta after the reasoning is a ``text_delta`` of a ``text`` block, and the reasoning and
    answer are those DeepSeek's own Messages response generator reads."""
    reply = REASONING + ".</think>It is sunny in Paris today, 25C."
    tm = PromptTM(tok, reply=reply)
    _, _, tc = make_clients(tm)
    _, events = post(tc, {"messages": USER, "thinking": THINK, "max_tokens": 200})
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    kinds = [d["type"] for d in deltas]
    first_text = kinds.index("text_delta")
    assert set(kinds[first_text:]) == {"text_delta"}
    assert set(kinds[:first_text]) == {"thinking_delta", "signature_delta"}
    want = recipe_messages_response({"messages": USER}, reply, thinking=True)["content"]
    assert "".join(d.get("thinking", "") for d in deltas) == want[0]["thinking"]
    assert "".join(d.get("text", "") for d in deltas) == want[1]["text"]


def test_count_tokens_counts_system_tools_and_formatting(tok: PreTrainedTokenizerFast) -> None:
    """router-for-me/CLIProxyAPI#679 (the token-counting endpoint counted the message text only,
    not the system prompt, the tool definitions or the formatting: 48 counted, 728 used):
    ``count_tokens`` of a Claude Code-shaped request (``system`` blocks, tools, a tool loop with a
    system reminder) is the token count of DeepSeek's own Messages converter's prompt, the same as
    the ``input_tokens`` the Messages call reports."""
    body = {
        "system": [
            {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [WEATHER],
        "messages": [
            *USER,
            {"role": "assistant", "content": [CALL_USE]},
            {"role": "user", "content": [RESULT]},
            {"role": "system", "content": REMINDER},
        ],
    }
    tm = PromptTM(tok, reply="Sunny.")
    client, _, _ = make_clients(tm)
    m = client.messages.create(model=MODEL, max_tokens=20, thinking=NO_THINK, **body)
    counted = client.messages.count_tokens(model=MODEL, thinking=NO_THINK, **body).input_tokens
    want = recipe_messages_prompt(body)
    assert _prompt(tm, tok) == want
    n = len(tm.received[-1].input_ids)
    assert counted == m.usage.input_tokens == n
    assert n > len(tok.encode(REMINDER + "What is the weather in Paris?", add_special_tokens=False)) + 100


@pytest.mark.parametrize("reply", ["Let me check." + CALL, "Need the forecast.</think>" + CALL])
def test_tool_use_block_is_the_recipe_call_streamed_or_not(tok: PreTrainedTokenizerFast, reply: str) -> None:
    """vllm-project/vllm#30010 (its review: the streamed and non-streamed converters read the
    model output differently, so a client saw different messages for the same generation): the
    non-streamed message, the ``anthropic`` client's accumulation of the stream and DeepSeek's own
    Messages response generator give the same blocks for a call after text or after reasoning,
    with a ``tool_use`` stop."""
    thinking = "</think>" in reply
    tm = PromptTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    switch = THINK if thinking else NO_THINK
    body, _ = post(tc, {"messages": USER, "tools": [WEATHER], "thinking": switch, "max_tokens": 300})
    with client.messages.stream(
        model=MODEL, max_tokens=300, messages=USER, tools=[WEATHER], thinking=switch
    ) as s:
        final = s.get_final_message()
    want = recipe_messages_response({"messages": USER, "tools": [WEATHER]}, reply, thinking=thinking)
    assert (
        comparable_content(body["content"])
        == comparable_content(want["content"])
        == comparable_content(blocks(final))
    )
    assert body["content"][-1]["input"] == ARGS
    assert body["stop_reason"] == final.stop_reason == want["stop_reason"] == "tool_use"


def _two_calls() -> str:
    """A DSML block of two ``get_weather`` calls (Paris, then Rome)."""
    one, two = (
        f'<{D}invoke name="get_weather">\n<{D}parameter name="city" string="true">{c}</{D}parameter>\n</{D}invoke>\n'
        for c in ("Paris", "Rome")
    )
    return f"\n\n<{D}tool_calls>\n{one}{two}</{D}tool_calls>"


@pytest.mark.parametrize("kind", ["auto", "any"])
def test_disable_parallel_tool_use_gives_at_most_one_tool_use(
    tok: PreTrainedTokenizerFast, kind: str
) -> None:
    """anthropics/anthropic-sdk-python#553 (asking for OpenAI's ``parallel_tool_calls: false`` on
    the Messages API, answered by ``tool_choice.disable_parallel_tool_use``): the ``anthropic``
    client's ``ToolChoiceAutoParam`` / ``ToolChoiceAnyParam`` document that with it "the model will
    output at most one tool use". A model that writes two calls anyway gets one ``tool_use`` block
    (the first, as DeepSeek's own Messages response generator reads it) with a ``tool_use`` stop,
    streamed or not; without the switch both calls come back."""
    reply = _two_calls()
    tm = PromptTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    req = {"messages": USER, "tools": [WEATHER], "thinking": NO_THINK, "max_tokens": 300}
    want = recipe_messages_response({"messages": USER, "tools": [WEATHER]}, reply, thinking=False)["content"]
    assert [b["input"] for b in want] == [{"city": "Paris"}, {"city": "Rome"}]
    choice = {"type": kind, "disable_parallel_tool_use": True}
    body, _ = post(tc, {**req, "tool_choice": choice})
    with client.messages.stream(model=MODEL, tool_choice=choice, **req) as s:  # type: ignore[arg-type]
        final = s.get_final_message()
    assert (
        comparable_content(body["content"])
        == comparable_content(blocks(final))
        == comparable_content(want[:1])
    )
    assert body["stop_reason"] == final.stop_reason == "tool_use"
    both, _ = post(tc, {**req, "tool_choice": {"type": kind}})
    assert comparable_content(both["content"]) == comparable_content(want)


def test_parallel_tool_uses_need_every_result_in_the_next_message(tok: PreTrainedTokenizerFast) -> None:
    """Chainlit/chainlit#2662: a client replayed two parallel ``tool_use`` blocks but answered one,
    and Anthropic's API refused the request: ``messages.2: `tool_use` ids were found without
    `tool_result` blocks immediately after: <id>. Each `tool_use` block must have a corresponding
    `tool_result` block in the next message.``. The same history is refused here with that 400,
    word for word (the unanswered id), on both routes and before the engine; DeepSeek's own
    Messages converter refuses it too. Answering both (in any order) is served and renders
    DeepSeek's converter's prompt."""
    rome = {**CALL_USE, "id": "toolu_2", "input": {"city": "Rome"}}
    assistant = {"role": "assistant", "content": [CALL_USE, rome]}
    answer_rome = {"type": "tool_result", "tool_use_id": "toolu_2", "content": "Rainy"}
    half = {"tools": [WEATHER], "messages": [*USER, assistant, {"role": "user", "content": [RESULT]}]}
    with pytest.raises(recipe.ConversionError, match="toolu_2"):
        recipe_messages_prompt(half)
    anthropic_words = (
        "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_2. "
        "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    )
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)
    for path, extra in (("/v1/messages", {"max_tokens": 20}), ("/v1/messages/count_tokens", {})):
        r = tc.post(path, json={"model": MODEL, **half, **extra})
        assert r.status_code == 400, r.text
        assert r.json() == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": anthropic_words},
        }
    assert tm.received == []
    whole = {**half, "messages": [*USER, assistant, {"role": "user", "content": [answer_rome, RESULT]}]}
    client.messages.create(model=MODEL, max_tokens=20, thinking=NO_THINK, **whole)
    assert _prompt(tm, tok) == recipe_messages_prompt(whole)

"""Public bug reports of peer servers', gateways' and clients' Anthropic Messages API streams
(``/v1/messages``: event order, block transitions, ``tool_use`` input, usage, thinking replay),
replayed through the in-process routes; most of them turn on an engine output that carries many
tokens at once (a whole reply in one scheduler step, speculative decoding, ``--stream-interval``).

The model's text is written by hand (:class:`BurstTM`). Oracles: Anthropic's documented event
order (``message_start``, per block ``content_block_start`` / deltas / ``content_block_stop``,
``message_delta``, ``message_stop``) and the ``anthropic`` client's own types and stream
accumulator (``client.messages.stream``); DeepSeek's own Messages response generator and
converter (the ``deepseek-recipe`` package) for the content blocks a reply reads as and the
prompt a conversation renders; the DeepSeek tokenizer (``tok``) for token counts.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from anthropic_testutil import WEATHER, make_clients
from anthropic_testutil import stream_events as _stream
from deepseek_recipe_testutil import recipe_messages_prompt, recipe_messages_response
from fake_prompt_tm import ARGS, CALL, MODEL, D, PromptTM, blocks
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "What is the weather in Paris and Rome?"}]
THINK = {"type": "enabled", "budget_tokens": 1024}
REASONING = "The user asks about two cities, so I call the tool twice"
#: two ``get_weather`` calls in one DSML block
TWO_CALLS = (
    f'\n\n<{D}tool_calls>\n<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="city" string="true">Paris</{D}parameter>\n</{D}invoke>\n'
    f'<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="city" string="true">Rome</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
)
NO_ARGS_CALL = f'\n\n<{D}tool_calls>\n<{D}invoke name="get_time">\n</{D}invoke>\n</{D}tool_calls>'
TIME_TOOL = {
    "name": "get_time",
    "description": "The time now",
    "input_schema": {"type": "object", "properties": {}},
}
ONE_STEP: tuple[int, ...] = ()  # BurstTM cuts: the whole reply in one output


class BurstTM(PromptTM):
    """:class:`PromptTM` whose stream sends only the outputs after the given token counts and the
    last one (``cuts=()``: the whole reply in one output, as one scheduler step gives a short
    reply; ``None``: every token); ``matched``: the stop string the finish reports (SGLang's
    ``FINISH_MATCHED_STR``)."""

    def __init__(
        self, tokenizer: Any, reply: str, cuts: tuple[int, ...] | None = ONE_STEP, matched: str | None = None
    ) -> None:
        super().__init__(tokenizer, reply=reply)
        self.cuts = cuts
        self.matched = matched

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        outs = [o async for o in super().generate_request(obj, request)]
        fr = outs[-1]["meta_info"]["finish_reason"]
        if self.matched is not None and fr["type"] == "stop":
            outs[-1]["meta_info"]["finish_reason"] = {"type": "stop", "matched": self.matched}
        if not obj.stream:
            yield outs[-1]
            return
        for j, o in enumerate(outs, start=1):
            if self.cuts is None or j in self.cuts or j == len(outs):
                yield o


def _documented_order(events: list[dict[str, Any]]) -> None:
    """Anthropic's documented event order: ``message_start`` first; each block's start, deltas and
    stop contiguous, indices 0, 1, ... in turn; ``message_delta`` and ``message_stop`` last, once."""
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("message_start") == kinds.count("message_delta") == kinds.count("message_stop") == 1
    open_index, next_index = None, 0
    for e in events[1:-2]:
        if e["type"] == "content_block_start":
            assert open_index is None and e["index"] == next_index
            open_index, next_index = e["index"], next_index + 1
        elif e["type"] == "content_block_delta":
            assert e["index"] == open_index
        else:
            assert e["type"] == "content_block_stop" and e["index"] == open_index
            open_index = None
    assert open_index is None


def _folded(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The content blocks the events spell, folded by hand from their deltas (``input`` parsed
    from the joined ``partial_json``), per-response fields (``id``, ``signature``) left out."""
    out: list[dict[str, Any]] = []
    parts: list[str] = []
    for e in events:
        if e["type"] == "content_block_start":
            out.append({k: v for k, v in e["content_block"].items() if k not in ("id", "signature")})
            parts = []
        elif e["type"] == "content_block_delta":
            d = e["delta"]
            if d["type"] == "text_delta":
                out[-1]["text"] += d["text"]
            elif d["type"] == "thinking_delta":
                out[-1]["thinking"] += d["thinking"]
            elif d["type"] == "input_json_delta":
                parts.append(d["partial_json"])
        elif e["type"] == "content_block_stop" and out[-1]["type"] == "tool_use":
            out[-1]["input"] = json.loads("".join(parts)) if "".join(parts) else {}
    return out


def _plain(bs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Content blocks without per-response fields (``id``, ``signature``) and unset ones."""
    return [{k: v for k, v in b.items() if v is not None and k not in ("id", "signature")} for b in bs]


def _cut_patterns(tok: PreTrainedTokenizerFast, reply: str, n: int = 6) -> list[tuple[int, ...] | None]:
    """One output, every token, and ``n`` seeded random burst patterns of ``reply``."""
    k = len(tok.encode(reply, add_special_tokens=False))
    rng = random.Random(25)
    return [ONE_STEP, None] + [tuple(sorted(rng.sample(range(1, k), rng.randint(1, 4)))) for _ in range(n)]


# ----------------------------------------------------------------------------- one-step streams
@pytest.mark.parametrize("cuts", [ONE_STEP, None], ids=["one-step", "per-token"])
def test_whole_reply_in_one_step_keeps_documented_event_order(
    tok: PreTrainedTokenizerFast, cuts: Any
) -> None:
    """BerriAI/litellm#25214 (PR #25216: on each block transition the chunk that triggered it was
    dropped, so a block's first text was lost): a reply whose thinking, answer and call arrive in
    one engine output (one scheduler step) still streams Anthropic's documented event order
    (start, each block's start/deltas/stop, ``message_delta``, ``message_stop``), and each block's
    deltas hold its whole text: the blocks DeepSeek's own Messages response generator reads the
    reply as, and what the ``anthropic`` client's accumulator folds."""
    reply = f"{REASONING}</think>Let me check." + CALL
    body = {"messages": USER, "tools": [WEATHER], "thinking": THINK}
    client, _, tc = make_clients(BurstTM(tok, reply, cuts))
    events = _stream(tc, body)
    _documented_order(events)
    want = _plain(recipe_messages_response(body, reply, thinking=True)["content"])
    assert want[0] == {"type": "thinking", "thinking": REASONING}  # the oracle reads what we wrote
    assert _plain(_folded(events)) == want
    with client.messages.stream(model=MODEL, max_tokens=200, **body) as s:
        final = s.get_final_message()
    assert _plain(blocks(final)) == want and final.stop_reason == "tool_use"


@pytest.mark.parametrize("cuts", [ONE_STEP, None], ids=["one-step", "per-token"])
def test_call_arguments_in_the_transition_output_reach_tool_use_input(
    tok: PreTrainedTokenizerFast, cuts: Any
) -> None:
    """BerriAI/litellm#24134 (PR #24355: a provider sent a call's arguments in the same chunk as the
    block transition; the adapter dropped that chunk and clients got ``tool_use`` with ``input:
    {}``): text and a whole call in one output give the ``tool_use`` block the call's arguments,
    as the ``anthropic`` client's accumulator reads the stream."""
    client, _, _ = make_clients(BurstTM(tok, "Let me check." + CALL, cuts))
    with client.messages.stream(model=MODEL, max_tokens=200, messages=USER, tools=[WEATHER]) as s:
        final = s.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("get_weather", ARGS)]
    assert final.stop_reason == "tool_use"


@pytest.mark.parametrize("thinking", [False, True], ids=["no-thinking", "thinking"])
def test_text_after_calls_in_one_output_keeps_the_model_order(
    tok: PreTrainedTokenizerFast, thinking: bool
) -> None:
    """strands-agents/harness-sdk#4004 (an adapter that opened the call block without closing the
    text one merged the text written before and after the call into one block ahead of it) and
    minpeter/kiro-lb#40 (prose written after a call published before the call's block): text,
    two calls, then more text, arriving in one output or in any bursts, stream as blocks in the
    order the model wrote them (text, ``tool_use``, ``tool_use``, text), each call keeping its
    arguments, and the ``anthropic`` client's accumulator folds the same. The blocks up to the
    calls are those DeepSeek's own Messages response generator reads; the trailing text is the
    hand-written one (that generator drops text after the calls). (Read whole, one output's text
    was sent before its calls, and a later argument fragment of the open call was dropped.)"""
    head = ("I will look both up.</think>" if thinking else "") + "Checking both." + TWO_CALLS
    reply = head + "\n\nDone."
    body: dict[str, Any] = {"messages": USER, "tools": [WEATHER]}
    if thinking:
        body["thinking"] = THINK
    recipe = _plain(recipe_messages_response(body, head, thinking=thinking)["content"])
    want = [*recipe, {"type": "text", "text": "Done."}]
    assert [b["type"] for b in want][-4:] == ["text", "tool_use", "tool_use", "text"]
    for cuts in _cut_patterns(tok, reply):
        client, _, tc = make_clients(BurstTM(tok, reply, cuts))
        events = _stream(tc, body)
        _documented_order(events)
        assert _plain(_folded(events)) == want, cuts
        with client.messages.stream(model=MODEL, max_tokens=200, **body) as s:
            assert _plain(blocks(s.get_final_message())) == want, cuts


@pytest.mark.parametrize("cuts", [ONE_STEP, (30,), None], ids=["one-step", "two-outputs", "per-token"])
def test_parallel_calls_in_one_output_are_separate_blocks(tok: PreTrainedTokenizerFast, cuts: Any) -> None:
    """praxis-proxy/ai#266 (parallel calls' argument deltas were sent to the wrong Anthropic block
    once the second call opened) and headroomlabs-ai/headroom#2890 (review: each call's deltas must
    come between that block's start and stop): two calls written in one output are two
    ``tool_use`` blocks, each with exactly one start and stop, no delta after its stop, and each
    ``input`` its own call's arguments (the ``anthropic`` client's accumulator agrees)."""
    client, _, tc = make_clients(BurstTM(tok, TWO_CALLS.lstrip(), cuts))
    events = _stream(tc, {"messages": USER, "tools": [WEATHER]})
    _documented_order(events)
    uses = [b for b in _folded(events) if b["type"] == "tool_use"]
    assert [u["input"] for u in uses] == [{"city": "Paris"}, {"city": "Rome"}]
    with client.messages.stream(model=MODEL, max_tokens=200, messages=USER, tools=[WEATHER]) as s:
        final = s.get_final_message()
    assert [b.input for b in final.content if b.type == "tool_use"] == [{"city": "Paris"}, {"city": "Rome"}]
    assert len({b.id for b in final.content if b.type == "tool_use"}) == 2


@pytest.mark.parametrize("cuts", [ONE_STEP, None], ids=["one-step", "per-token"])
def test_message_start_carries_no_final_state(tok: PreTrainedTokenizerFast, cuts: Any) -> None:
    """BerriAI/litellm#38153 (review: a stream synthesized from a finished response put the final
    ``stop_reason``, ``stop_sequence`` and ``output_tokens`` into ``message_start``, so clients saw
    the message finished at its first event) and ai-dynamo/dynamo#7206 with
    router-for-me/CLIProxyAPI#1700 (``message_start`` said ``input_tokens: 0``, breaking Claude
    Code's context meter): even when the whole reply is one output, ``message_start`` has empty
    ``content``, no stop reason or sequence, ``output_tokens`` 0 and the prompt's token count as
    ``input_tokens`` (the tokenizer's count of DeepSeek's own prompt for the request)."""
    body = {"messages": USER, "tools": [WEATHER]}
    _, _, tc = make_clients(BurstTM(tok, "Sunny in both.", cuts))
    start = _stream(tc, body)[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["stop_sequence"] is None
    prompt = recipe_messages_prompt(body)
    assert start["usage"] == {
        "input_tokens": len(tok.encode(prompt, add_special_tokens=False)),
        "output_tokens": 0,
    }


@pytest.mark.parametrize("cuts", [ONE_STEP, (2,), None], ids=["one-step", "two-outputs", "per-token"])
def test_one_message_stop_at_the_end_with_the_whole_output_count(
    tok: PreTrainedTokenizerFast, cuts: Any
) -> None:
    """vllm-project/semantic-router#2215 (a usage-only first chunk was read as the end: an early
    ``message_stop`` and ``output_tokens`` 4 instead of 252) and jamesrochabrun/SwiftAnthropic#31
    (``message_delta``'s ``output_tokens`` is the whole count, not an increment): however the reply
    is split into outputs, one ``message_delta`` and one ``message_stop`` close the stream, the
    ``message_delta``'s ``output_tokens`` is the reply's token count (the tokenizer's) and the
    ``anthropic`` client's final message says the same."""
    reply = "Sunny in Paris, rainy in Rome."
    n = len(tok.encode(reply, add_special_tokens=False))
    client, _, tc = make_clients(BurstTM(tok, reply, cuts))
    events = _stream(tc, {"messages": USER})
    _documented_order(events)
    assert events[-2]["usage"]["output_tokens"] == n
    assert _folded(events) == [{"type": "text", "text": reply}]
    with client.messages.stream(model=MODEL, max_tokens=200, messages=USER) as s:
        final = s.get_final_message()
    assert final.usage.output_tokens == n and final.content[0].text == reply


@pytest.mark.parametrize("cuts", [ONE_STEP, None], ids=["one-step", "per-token"])
def test_no_argument_call_streams_an_empty_object_input(tok: PreTrainedTokenizerFast, cuts: Any) -> None:
    """MadSkittles/Router-Maestro#162 (a zero-argument call's empty argument buffer aborted the
    stream with ``JSONDecodeError``) and BerriAI/litellm#5063 (a streamed call without arguments
    failed to parse): a call of a tool that takes no parameters streams ``partial_json`` that
    joins into valid JSON, and its ``tool_use`` ``input`` is ``{}`` in the stream and in the
    ``anthropic`` client's accumulated message, as DeepSeek's own response generator reads it."""
    body = {"messages": USER, "tools": [TIME_TOOL]}
    want = _plain(recipe_messages_response(body, NO_ARGS_CALL.lstrip(), thinking=False)["content"])
    assert [(b["type"], b["input"]) for b in want] == [("tool_use", {})]
    client, _, tc = make_clients(BurstTM(tok, NO_ARGS_CALL.lstrip(), cuts))
    events = _stream(tc, body)
    assert _plain(_folded(events)) == want
    with client.messages.stream(model=MODEL, max_tokens=200, **body) as s:
        final = s.get_final_message()
    assert [(b.name, b.input) for b in final.content] == [
        ("get_time", {})
    ] and final.stop_reason == "tool_use"


@pytest.mark.parametrize("cuts", [ONE_STEP, None], ids=["one-step", "per-token"])
def test_streamed_stop_sequence_hit_after_thinking_is_reported(
    tok: PreTrainedTokenizerFast, cuts: Any
) -> None:
    """agentgateway/agentgateway#3283 (the stop sequence SGLang reports as ``matched_stop`` was
    dropped, buffered and streamed alike, and the stop read as ``end_turn``): a thinking reply cut
    by one of the request's ``stop_sequences``, whole in one output or token by token, ends with
    ``message_delta`` ``stop_reason: "stop_sequence"`` and the matched string (the Messages API
    reference), and the ``anthropic`` client's final message says so."""
    reply = "Recall the capital.</think>The answer is "
    client, _, tc = make_clients(BurstTM(tok, reply, cuts, matched="Paris"))
    events = _stream(tc, {"messages": USER, "thinking": THINK, "stop_sequences": ["Paris"]})
    _documented_order(events)
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "Paris"}
    kw = {"messages": USER, "thinking": THINK, "stop_sequences": ["Paris"]}
    with client.messages.stream(model=MODEL, max_tokens=200, **kw) as s:
        final = s.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "Paris")
    assert [b.type for b in final.content] == ["thinking", "text"]


# ----------------------------------------------------------------------------- requests
def test_replayed_thinking_block_with_empty_text_is_accepted(tok: PreTrainedTokenizerFast) -> None:
    """langchain-ai/langchain#38639 (a streamed thinking block that had only a ``signature_delta``
    came back as ``{"type": "thinking", "signature": ...}`` with empty or no thinking text, and
    replaying it failed with 400): an assistant turn whose thinking block has ``"thinking": ""``
    is accepted, thinking on or off, streamed or not, ``count_tokens`` counts the prompt served,
    and with thinking off the prompt is DeepSeek's own Messages converter's (with it on, the
    converter's default effort paragraph differs from the server's)."""
    msgs = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "", "signature": "c2ln"},
                {"type": "text", "text": "Hello."},
            ],
        },
        {"role": "user", "content": "What is the weather in Paris?"},
    ]
    tm = BurstTM(tok, "Sunny.")
    client, _, tc = make_clients(tm)
    for thinking in (THINK, {"type": "disabled"}):
        for stream in (False, True):
            body = {
                "model": MODEL,
                "max_tokens": 20,
                "messages": msgs,
                "thinking": thinking,
                "stream": stream,
            }
            r = tc.post("/v1/messages", json=body)
            assert r.status_code == 200, r.text
        n = client.messages.count_tokens(model=MODEL, messages=msgs, thinking=thinking).input_tokens
        assert n == len(tm.received[-1].input_ids)
    assert tok.decode(tm.received[-1].input_ids) == recipe_messages_prompt({"messages": msgs})


def test_context_management_from_claude_code_is_ignored(tok: PreTrainedTokenizerFast) -> None:
    """KarpelesLab/teamclaude#244 and caozhiyuan/copilot-api#175 (Claude Code sends
    ``context_management``, and Anthropic-compatible servers answered every request 400 "Extra
    inputs are not permitted"): the ``anthropic`` client's beta call with ``context_management``
    (``POST /v1/messages?beta=true``), streamed or not, and ``count_tokens`` with it, are served
    on the same prompt as the request without it."""
    tm = BurstTM(tok, "Sunny.")
    client, _, _ = make_clients(tm)
    cm = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    betas = ["context-management-2025-06-27"]
    plain = client.messages.create(model=MODEL, max_tokens=20, messages=USER)
    base = list(tm.received[-1].input_ids)
    m = client.beta.messages.create(
        model=MODEL, max_tokens=20, messages=USER, betas=betas, context_management=cm
    )
    assert list(tm.received[-1].input_ids) == base and m.content[0].text == plain.content[0].text
    with client.beta.messages.stream(
        model=MODEL, max_tokens=20, messages=USER, betas=betas, context_management=cm
    ) as s:
        assert s.get_final_message().content[0].text == "Sunny."
    assert list(tm.received[-1].input_ids) == base
    n = client.beta.messages.count_tokens(model=MODEL, messages=USER, betas=betas, context_management=cm)
    assert n.input_tokens == len(base)

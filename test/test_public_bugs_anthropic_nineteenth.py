"""Public bug reports of peer servers' Anthropic Messages API (``/v1/messages``,
``/v1/messages/count_tokens``) replayed through the in-process routes (each test names its
report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: the
``anthropic`` client's own types and its stream accumulator (``client.messages.stream``), the
Messages API reference (``stop_reason``/``stop_sequence``, the stream's event grammar, the
``message_start`` usage), the chat-completions route on the same fake engine, and the prompt
tokenized independently (``transformers``).
"""

from __future__ import annotations

from typing import Any

import pytest
from anthropic_testutil import CHAT_WEATHER, WEATHER, make_clients, post
from fake_prompt_tm import CALL, MODEL, PromptTM, blocks
from transformers import PreTrainedTokenizerFast

D = "｜DSML｜"
USER = [{"role": "user", "content": "What is the capital of France?"}]
THINK = {"type": "enabled", "budget_tokens": 1024}
NO_ARGS_TOOL = {"name": "list_files", "description": "List the files", "input_schema": {"type": "object"}}


class MatchedStopTM(PromptTM):
    """A :class:`PromptTM` whose generation ends on the stop string ``matched`` (what the
    scheduler reports when one of the request's ``stop`` strings fired: SGLang's
    ``FINISH_MATCHED_STR``), the reply being the text before it."""

    def __init__(self, tokenizer: Any, reply: str, matched: str) -> None:
        super().__init__(tokenizer, reply=reply)
        self.matched = matched

    async def generate_request(self, obj: Any, request: Any = None) -> Any:
        async for out in super().generate_request(obj, request):
            if out["meta_info"]["finish_reason"] is not None:
                out["meta_info"]["finish_reason"] = {"type": "stop", "matched": self.matched}
            yield out


def _message_delta(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e["type"] == "message_delta")


@pytest.mark.parametrize("thinking", [None, THINK])
def test_stop_sequence_hit_is_reported_not_end_turn(tok: PreTrainedTokenizerFast, thinking: Any) -> None:
    """kekzl/imp#1550: a stop sequence that fired was reported as ``stop_reason: "end_turn"`` with
    ``stop_sequence: null`` (there with thinking on), so a client could not tell a natural end
    from a stop hit. The Messages API reference: ``stop_sequence`` and the matched string, in the
    whole message and in the stream's ``message_delta``, thinking on (the answer after a closed
    thinking block) or off; the SDK's accumulator agrees, and the stop string reaches the
    sampler."""
    reply = "The answer: " if thinking is None else "Recall it.</think>The answer: "
    tm = MatchedStopTM(tok, reply=reply, matched="the")
    client, _, tc = make_clients(tm)
    extra = {} if thinking is None else {"thinking": thinking}
    body, events = post(tc, {"messages": USER, "stop_sequences": ["the"], **extra})
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "the")
    assert body["content"][-1] == {"type": "text", "text": "The answer: "}
    assert _message_delta(events)["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "the"}
    with client.messages.stream(
        model=MODEL, max_tokens=50, messages=USER, stop_sequences=["the"], **extra
    ) as s:
        final = s.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "the")
    assert [b.type for b in final.content] == ["text"] if thinking is None else ["thinking", "text"]
    assert tm.received[-1].sampling_params["stop"] == ["the"]


def test_the_stop_sequence_that_fired_is_echoed_among_several(tok: PreTrainedTokenizerFast) -> None:
    """invergent-ai/surogate#133: with several ``stop_sequences`` the response must echo the one
    that ended the generation (there the second declared one), not the first declared nor
    ``null``. The scheduler reports the string that matched; that string is the response's
    ``stop_sequence``."""
    tm = MatchedStopTM(tok, reply="A B C ", matched="STOP")
    _, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "stop_sequences": ["NEVER", "STOP", "\n\nHuman:"]})
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "STOP")
    assert _message_delta(events)["delta"]["stop_sequence"] == "STOP"
    assert body["content"] == [{"type": "text", "text": "A B C "}]


def test_eos_is_end_turn_even_with_stop_sequences(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#45807's guard (the fix's own rule): a generation that ends on EOS (the
    scheduler's ``matched`` a token id) is ``end_turn`` with ``stop_sequence: null`` although the
    request has ``stop_sequences``; only a matched string is ``stop_sequence``."""
    tm = PromptTM(tok, reply="Paris.")
    _, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "stop_sequences": ["the"]})
    assert (body["stop_reason"], body["stop_sequence"]) == ("end_turn", None)
    assert _message_delta(events)["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}


def test_count_tokens_counts_system_tools_and_markup(tok: PreTrainedTokenizerFast) -> None:
    """router-for-me/CLIProxyAPI#679: ``/v1/messages/count_tokens`` counted the message text only
    (48 tokens for a request that used 728): the system prompt, the tool definitions and the
    template's markup were left out, and Claude Code's context accounting overflowed. Here the
    count is the ``usage.input_tokens`` of the same request on ``/v1/messages`` (streamed:
    ``message_start``'s), and the length of the prompt the engine got, tokenized by
    ``transformers``."""
    tm = PromptTM(tok, reply="ok")
    client, _, tc = make_clients(tm)
    kw: dict[str, Any] = {
        "model": MODEL,
        "system": [
            {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": USER,
        "tools": [WEATHER],
    }
    counted = client.messages.count_tokens(**kw).input_tokens
    m = client.messages.create(max_tokens=5, **kw)
    prompt_text = tok.decode(tm.received[-1].input_ids)
    assert counted == m.usage.input_tokens == len(tm.received[-1].input_ids)
    assert "You are a coding agent." in prompt_text and "get_weather" in prompt_text
    message_only = len(tok.encode(USER[0]["content"], add_special_tokens=False))
    assert counted > message_only + 100  # the tool schema alone is well over 100 tokens
    _, events = post(tc, {"max_tokens": 5, **kw})
    assert events[0]["message"]["usage"]["input_tokens"] == counted


@pytest.mark.parametrize("cache_report", [False, True])
def test_streamed_message_start_carries_the_input_usage(
    tok: PreTrainedTokenizerFast, cache_report: bool
) -> None:
    """ai-dynamo/aiperf#1054 (review: "streaming drops all input-side usage"): a streamed reply
    lost the prompt tokens and the cache read counts that the non-streamed one had. Anthropic's
    stream carries them in ``message_start``'s ``usage`` (``output_tokens`` there counts nothing
    generated yet); the final ``message_delta`` has the cumulative ``output_tokens``. The SDK's
    accumulated message has the non-streamed usage."""
    tm = PromptTM(tok, reply="Paris is the capital.")
    client, _, tc = make_clients(tm, cache_report=cache_report)
    body, events = post(tc, {"messages": USER})
    start = events[0]["message"]["usage"]
    keys = ["input_tokens", "cache_read_input_tokens"] if cache_report else ["input_tokens"]
    assert {k: start[k] for k in keys} == {k: body["usage"][k] for k in keys}
    assert start["output_tokens"] == 0
    assert _message_delta(events)["usage"]["output_tokens"] == body["usage"]["output_tokens"]
    n_prompt = len(tm.received[-1].input_ids)
    assert body["usage"]["input_tokens"] + body["usage"].get("cache_read_input_tokens", 0) == n_prompt
    with client.messages.stream(model=MODEL, max_tokens=100, messages=USER) as s:
        final = s.get_final_message()
    assert {k: getattr(final.usage, k) for k in body["usage"]} == body["usage"]


def test_tool_without_parameters_gets_an_empty_input_object(tok: PreTrainedTokenizerFast) -> None:
    """pipecat-ai/pipecat#409: a call of a tool with no parameters streamed no JSON at all and
    its arguments read as a string, not an object. Here the ``tool_use`` block's ``input`` is
    ``{}`` in the whole message, and the SDK's stream accumulator (which parses the
    ``input_json_delta`` fragments, or keeps ``content_block_start``'s ``input``) ends with
    ``{}`` too: the same blocks either way."""
    call = f'\n\n<{D}tool_calls>\n<{D}invoke name="list_files">\n</{D}invoke>\n</{D}tool_calls>'
    tm = PromptTM(tok, reply="Listing." + call)
    client, _, tc = make_clients(tm)
    body, _ = post(tc, {"messages": USER, "tools": [NO_ARGS_TOOL]})
    assert body["stop_reason"] == "tool_use"
    assert [(b["type"], b.get("name"), b.get("input")) for b in body["content"]] == [
        ("text", None, None),
        ("tool_use", "list_files", {}),
    ]
    with client.messages.stream(model=MODEL, max_tokens=100, messages=USER, tools=[NO_ARGS_TOOL]) as s:
        final = s.get_final_message()
    got = [(b["type"], b.get("text"), b.get("name"), b.get("input")) for b in blocks(final)]
    assert got == [("text", "Listing.", None, None), ("tool_use", None, "list_files", {})]


def test_thinking_signature_is_non_empty_and_the_same_streamed(tok: PreTrainedTokenizerFast) -> None:
    """earendil-works/pi#4464: Anthropic-compatible servers returned thinking blocks with an empty
    ``signature``, so clients could not replay them as thinking and sent the reasoning back as
    visible text. Here the ``thinking`` block has a non-empty signature, the stream's
    ``signature_delta`` carries the same one (the SDK's accumulated block equals the whole
    message's), and replaying the block in history is accepted."""
    tm = PromptTM(tok, reply="The user asks a capital.</think>Paris.")
    client, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "thinking": THINK})
    think = body["content"][0]
    assert think["type"] == "thinking" and think["thinking"] == "The user asks a capital."
    assert isinstance(think["signature"], str) and think["signature"]
    sig = [e["delta"]["signature"] for e in events if e.get("delta", {}).get("type") == "signature_delta"]
    assert sig == [think["signature"]]
    with client.messages.stream(model=MODEL, max_tokens=100, messages=USER, thinking=THINK) as s:
        final = s.get_final_message()
    assert blocks(final)[0] == think
    history = [
        *USER,
        {"role": "assistant", "content": body["content"]},
        {"role": "user", "content": "And Italy?"},
    ]
    again = client.messages.create(model=MODEL, max_tokens=100, messages=history, thinking=THINK)
    assert again.stop_reason == "end_turn"


@pytest.mark.parametrize("signature", [None, "", "not-ours", "MISSING"])
def test_replayed_thinking_with_any_signature_is_accepted(
    tok: PreTrainedTokenizerFast, signature: Any
) -> None:
    """BerriAI/litellm#31654 (and JohnnyZ93/oai-compatible-copilot#217, "thinking.signature:
    Field required" on the follow-up turn): thinking blocks replayed with a null, empty, foreign
    or missing signature made the follow-up request fail. The signature is opaque here and not
    checked (DeepSeek's own Anthropic-compatible API does not check it either): each such
    history is served, and renders the same prompt as the one with this server's signature."""
    think = {"type": "thinking", "thinking": "Recall the capital."}
    if signature != "MISSING":
        think["signature"] = signature
    tm = PromptTM(tok, reply="Rome.")
    _, _, tc = make_clients(tm)

    def prompt(block: dict[str, Any]) -> list[int]:
        history = [
            *USER,
            {"role": "assistant", "content": [block, {"type": "text", "text": "Paris."}]},
            {"role": "user", "content": "And Italy?"},
        ]
        r = tc.post(
            "/v1/messages", json={"model": MODEL, "max_tokens": 20, "messages": history, "thinking": THINK}
        )
        assert r.status_code == 200, r.text
        return list(tm.received[-1].input_ids)

    assert prompt(think) == prompt({**think, "signature": "a" * 64})


TIME_TOOL = {
    "name": "get_time",
    "description": "Current time",
    "input_schema": {"type": "object", "properties": {}},
}
CHAT_TIME = {
    "type": "function",
    "function": {"name": "get_time", "description": "Current time", "parameters": TIME_TOOL["input_schema"]},
}


@pytest.mark.parametrize(
    ("choice", "chat_choice"),
    [
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "get_time"}, {"type": "function", "function": {"name": "get_time"}}),
        ({"type": "any"}, "required"),
        ({"type": "auto"}, "auto"),
    ],
)
def test_tool_choice_is_enforced_as_on_chat_completions(
    tok: PreTrainedTokenizerFast, choice: dict[str, Any], chat_choice: Any
) -> None:
    """Blaizzy/mlx-vlm#2000: ``/v1/messages`` ignored ``tool_choice`` (``tool``, ``none``) that
    ``/v1/chat/completions`` enforced: a forced ``get_time`` came back as a call of the tool the
    prompt favoured. Here each Messages ``tool_choice`` reaches the engine as the chat route's
    counterpart does (same prompt ids, same sampling parameters, the constraint included); a
    forced tool's constraint names that tool only, ``none`` constrains nothing and a call the
    model writes anyway is no ``tool_use`` block."""
    tm = PromptTM(tok, reply="Sure." + CALL)
    client, oa, _ = make_clients(tm)
    m = client.messages.create(
        model=MODEL, max_tokens=200, messages=USER, tools=[TIME_TOOL, WEATHER], tool_choice=choice
    )
    got = tm.received[-1]
    oa.chat.completions.create(
        model=MODEL, max_tokens=200, messages=USER, tools=[CHAT_TIME, CHAT_WEATHER], tool_choice=chat_choice
    )
    want = tm.received[-1]
    assert list(got.input_ids) == list(want.input_ids)
    assert got.sampling_params == want.sampling_params
    tag = got.sampling_params.get("structural_tag")
    if choice["type"] == "none":
        assert tag is None and [b.type for b in m.content] == ["text"] and m.stop_reason == "end_turn"
    elif choice["type"] == "tool":
        assert 'name=\\"get_time\\"' in tag and "get_weather" not in tag
    elif choice["type"] == "any":
        assert "get_time" in tag and "get_weather" in tag


def test_empty_thinking_opens_no_unclosed_block(tok: PreTrainedTokenizerFast) -> None:
    """looplj/axonhub#1135: an empty thinking (the model closes its reasoning at once) left a
    content block that was never stopped, and the client's stream hung on it. Here every
    ``content_block_start`` has its ``content_block_stop`` (checked by ``post``); the empty
    thinking is an empty ``thinking`` block (closed with its signature) before the answer, as
    DeepSeek's own Messages response generator (``deepseek-recipe``) writes it, and the SDK's
    accumulated message equals the whole one."""
    tm = PromptTM(tok, reply="</think>Paris.")
    client, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "thinking": THINK})
    assert [{k: v for k, v in b.items() if k != "signature"} for b in body["content"]] == [
        {"type": "thinking", "thinking": ""},
        {"type": "text", "text": "Paris."},
    ]
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    stops = [e for e in events if e["type"] == "content_block_stop"]
    assert starts == ["thinking", "text"] and len(stops) == 2
    with client.messages.stream(model=MODEL, max_tokens=100, messages=USER, thinking=THINK) as s:
        final = s.get_final_message()
    got = [(b.type, getattr(b, "thinking", getattr(b, "text", None))) for b in final.content]
    assert got == [("thinking", ""), ("text", "Paris.")]


def test_max_tokens_spent_in_thinking_is_a_thinking_block_and_max_tokens(
    tok: PreTrainedTokenizerFast,
) -> None:
    """anthropics/claude-code#68882: when the whole ``max_tokens`` went to thinking, the reply
    looked like a finished one. Anthropic's answer, which clients test for, is
    ``stop_reason: "max_tokens"`` with the cut reasoning as a ``thinking`` block and no ``text``
    block; streamed the same (the thinking block closed with its signature). The cut reasoning
    is the first ``max_tokens`` tokens of the model's text, decoded by ``transformers``."""
    reasoning = "Let me weigh every option carefully before I answer anything at all."
    tm = PromptTM(tok, reply=reasoning + "</think>Paris.")
    client, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "thinking": THINK, "max_tokens": 5})
    cut = tok.decode(tok.encode(reasoning, add_special_tokens=False)[:5])
    assert body["stop_reason"] == "max_tokens" and body["stop_sequence"] is None
    assert [(b["type"], b.get("thinking")) for b in body["content"]] == [("thinking", cut)]
    assert _message_delta(events)["delta"]["stop_reason"] == "max_tokens"
    with client.messages.stream(model=MODEL, max_tokens=5, messages=USER, thinking=THINK) as s:
        final = s.get_final_message()
    assert final.stop_reason == "max_tokens" and blocks(final) == body["content"]


@pytest.mark.parametrize("thinking", [None, THINK])
def test_text_after_the_calls_keeps_its_place_in_the_whole_message(
    tok: PreTrainedTokenizerFast, thinking: Any
) -> None:
    """experientiallabs/experiential#621 (review: "Buffered content blocks are reordered"): the
    non-streamed message joined all text into one block before every ``tool_use`` block, while
    the stream keeps the order the model wrote. The Messages API's content is in written order:
    text written after the tool calls is a ``text`` block after them, in the whole message as in
    the SDK's accumulation of the stream; the text before them is its own block."""
    reply = "Checking." + CALL + "\n\nDone."
    if thinking is not None:
        reply = "Plan it.</think>" + reply
    tm = PromptTM(tok, reply=reply)
    client, _, _ = make_clients(tm)
    kw: dict[str, Any] = {"model": MODEL, "max_tokens": 200, "messages": USER, "tools": [WEATHER]}
    if thinking is not None:
        kw["thinking"] = thinking
    m = client.messages.create(**kw)
    with client.messages.stream(**kw) as s:
        final = s.get_final_message()

    def shape(bs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(b["type"], b.get("text"), b.get("input")) for b in bs if b["type"] != "thinking"]

    want = [
        ("text", "Checking.", None),
        ("tool_use", None, {"city": "Paris", "days": 3}),
        ("text", "Done.", None),
    ]
    assert shape(blocks(m)) == want
    assert shape(blocks(final)) == want
    assert m.stop_reason == final.stop_reason == "tool_use"

"""A thirty-second set of public bug reports, replayed against the thinking side of every route:
the reasoning-token count of a streamed chat answer (``n`` choices, ``include_usage``) against the
non-streamed one; no reasoning count where nothing was reasoned; a Responses reasoning item (its
``reasoning_text`` content, its place before the message, its tokens in ``usage``) streamed and
not; thinking switched off by ``reasoning_effort: "none"``, OpenRouter's ``reasoning`` object and
Responses' ``reasoning.effort: "none"``; Anthropic's ``thinking: {"type": "disabled"}``; the
order of a Messages reply's thinking, text and ``tool_use`` blocks streamed and not; and a signed
thinking block (an empty one too) replayed in the next turn; a Messages reply cut by
``max_tokens`` while reasoning; reasoning left out of the answer (``include_reasoning: false``)
but still counted; a Responses reply cut mid-reasoning, streamed; and a Responses tool loop
continued by ``previous_response_id`` and replayed statelessly.

Every report passed as-is; the tests are regression guards.

The routes run in process over the fake tokenizer managers of ``openai_fake_tm`` (a fixed reply)
and ``fake_prompt_tm`` (a fixed reply, every request recorded); the prompt a request renders is
read back from the engine request the fake receives. Oracles: DeepSeek's own request converters,
V4 encoder and response parsers (``deepseek-recipe``), the DeepSeek tokenizer (``tok``) for token
counts (SGLang's documented reasoning count: the generated tokens up to and including
``</think>``), and the ``openai`` / ``anthropic`` clients' types.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from transformers import PreTrainedTokenizerFast

pytest.importorskip("deepseek_recipe")
pytest.importorskip("openai")
pytest.importorskip("anthropic")

from anthropic_testutil import WEATHER, make_clients  # noqa: E402
from anthropic_testutil import post as messages_post  # noqa: E402
from deepseek_recipe_testutil import (  # noqa: E402
    recipe_message,
    recipe_messages_prompt,
    recipe_messages_response,
    recipe_prompt,
    recipe_responses_prompt,
)
from fake_prompt_tm import CALL, MODEL, PromptTM  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from openai.types.responses import Response  # noqa: E402
from responses_testutil import WEATHER as RESPONSES_WEATHER  # noqa: E402
from responses_testutil import post as responses_post  # noqa: E402
from thinking_chat_testutil import THINK_END, post_chat, prompt_of, reasoning_of  # noqa: E402

ON = {"chat_template_kwargs": {"thinking": True}}
HI = [{"role": "user", "content": "What is 2+2?"}]
THOUGHT = "Two plus two is four."
ANSWER = "The answer is 4."
REPLY = f"{THOUGHT}{THINK_END}{ANSWER}"


def _reasoning_count(tok: PreTrainedTokenizerFast, reply: str) -> int:
    """SGLang's reasoning-token count of a generated ``reply``: its tokens up to and including the
    first ``</think>`` (the tokenizer's own encoding, the oracle)."""
    ids = tok.encode(reply, add_special_tokens=False)
    return ids.index(tok.convert_tokens_to_ids(THINK_END)) + 1


def test_sglang_15875_streamed_usage_counts_reasoning_of_every_choice(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#15875 (the streamed chat answer's ``usage`` left
    ``completion_tokens_details.reasoning_tokens`` at 0 while the non-streamed one counted them):
    with ``n`` 2 and ``stream_options.include_usage`` the final usage chunk carries the reasoning
    tokens of both choices, as the non-streamed answer does, each choice's reasoning and answer
    kept apart. Oracle: the tokenizer's count of the reply up to ``</think>``; ``deepseek-recipe``'s
    response parser for the split; the ``openai`` client's types."""
    per_choice = _reasoning_count(tok, REPLY)
    expected = recipe_message({"messages": HI}, REPLY, thinking=True)
    body = {"messages": HI, "n": 2, **ON}
    plain = ChatCompletion.model_validate(post_chat(FakeTM(tok, reply=REPLY), body).json())
    assert plain.usage is not None and plain.usage.completion_tokens_details is not None
    assert plain.usage.completion_tokens_details.reasoning_tokens == 2 * per_choice

    r = post_chat(
        FakeTM(tok, reply=REPLY), {**body, "stream": True, "stream_options": {"include_usage": True}}
    )
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
    reasoning: dict[int, str] = {0: "", 1: ""}
    for c in chunks:
        for ch in c.choices:
            reasoning[ch.index] += reasoning_of(ch.delta) or ""
    assert reasoning == {0: expected["reasoning_content"], 1: expected["reasoning_content"]}
    usage = chunks[-1].usage
    assert usage is not None and not chunks[-1].choices
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 2 * per_choice
    assert usage.completion_tokens == plain.usage.completion_tokens


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_vllm_35037_no_reasoning_count_without_reasoning(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """vllm-project/vllm#35037 (``completion_tokens_details`` to be set only when some completion
    tokens were reasoning): an answer written with thinking off reports no reasoning tokens,
    streamed and not, while ``completion_tokens`` counts the whole answer. Oracle: the tokenizer's
    token count of the reply; the ``openai`` client's types."""
    body: dict[str, Any] = {"messages": HI, "chat_template_kwargs": {"thinking": False}}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    r = post_chat(FakeTM(tok, reply=ANSWER), body)
    if stream:
        usage = ChatCompletionChunk.model_validate(sse_data_events(r)[-2]).usage
    else:
        usage = ChatCompletion.model_validate(r.json()).usage
    assert usage is not None
    assert usage.completion_tokens == len(tok.encode(ANSWER, add_special_tokens=False))
    details = usage.completion_tokens_details
    assert details is None or not details.reasoning_tokens


@pytest.mark.parametrize(
    "controls",
    [
        {"reasoning_effort": "none"},
        {"reasoning": {"effort": "none"}},
        {"reasoning": {"enabled": False}},
    ],
    ids=["reasoning_effort", "openrouter_effort", "openrouter_enabled"],
)
def test_layr_labs_639_reasoning_off_by_openai_controls(
    tok: PreTrainedTokenizerFast, controls: dict[str, Any]
) -> None:
    """Layr-Labs/d-inference#639 (``reasoning_effort: "none"`` and OpenRouter's ``reasoning``
    object ignored: the model kept thinking): each control renders DeepSeek's thinking-off
    prompt, over a server default of thinking on, and the reply is all ``content``, streamed.
    Oracle: ``deepseek-recipe``'s converter and V4 encoder (thinking off) and response parser;
    the ``openai`` client's types."""
    tm = FakeTM(tok, reply=ANSWER)
    body = {"messages": HI, **controls, "stream": True}
    r = post_chat(tm, body, default_chat_template_kwargs={"thinking": True})
    assert prompt_of(tok, tm) == recipe_prompt({"messages": HI}, thinking=False)
    events = sse_data_events(r)
    reasoning, content = "", ""
    for e in events[:-1]:
        for ch in ChatCompletionChunk.model_validate(e).choices:
            reasoning += reasoning_of(ch.delta) or ""
            content += ch.delta.content or ""
    expected = recipe_message({"messages": HI}, ANSWER, thinking=False)
    assert content == expected["content"] and not reasoning


def test_halogen_44_responses_reasoning_item_streamed_and_counted(tok: PreTrainedTokenizerFast) -> None:
    """peonist-ai/halogen-flash-server#44 (``/v1/responses`` dropped the reasoning: no reasoning
    item, no ``reasoning_text`` events, ``reasoning_tokens`` 0): with reasoning on, the response's
    output is a reasoning item (its text a ``reasoning_text`` content part) ahead of the message,
    the stream's ``response.reasoning_text.delta`` events join to the same text before any
    ``output_text`` delta, and ``output_tokens_details.reasoning_tokens`` counts it on both.
    Oracle: ``deepseek-recipe``'s response parser; the tokenizer's count; the ``openai`` client's
    types (``post`` validates every event)."""
    _, _, tc = make_clients(PromptTM(tok, reply=REPLY))
    body = {"input": "What is 2+2?", "reasoning": {"effort": "high"}}
    resp, events = responses_post(tc, body)
    expected = recipe_message({"messages": HI}, REPLY, thinking=True)
    out = Response.model_validate(resp).output
    assert [o.type for o in out] == ["reasoning", "message"]
    assert out[0].content is not None and [(c.type, c.text) for c in out[0].content] == [
        ("reasoning_text", expected["reasoning_content"])
    ]
    assert out[1].content[0].text == expected["content"]  # type: ignore[union-attr]
    count = _reasoning_count(tok, REPLY)
    assert resp["usage"]["output_tokens_details"]["reasoning_tokens"] == count

    kinds = [e["type"] for e in events]
    r_deltas = [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"]
    assert "".join(r_deltas) == expected["reasoning_content"]
    last_reasoning = max(i for i, k in enumerate(kinds) if k == "response.reasoning_text.delta")
    first_text = kinds.index("response.output_text.delta")
    assert last_reasoning < first_text
    done = events[-1]
    assert done["type"] == "response.completed"
    assert done["response"]["usage"]["output_tokens_details"]["reasoning_tokens"] == count


def test_omlx_1512_responses_effort_none_turns_thinking_off(tok: PreTrainedTokenizerFast) -> None:
    """jundot/omlx#1512 (the Responses ``reasoning`` field silently ignored: ``effort: "none"``
    still thought): ``reasoning.effort: "none"`` renders DeepSeek's thinking-off prompt, and
    ``"low"`` its thinking-on prompt (the tier of no instruction paragraph under either effort
    profile), whatever the server's default; with it off the reply is
    one message and no reasoning item. Oracle: ``deepseek-recipe``'s Responses converter and V4
    encoder; the ``openai`` client's types."""
    for effort, thinking in (("none", False), ("low", True)):
        tm = PromptTM(tok, reply=ANSWER)
        _, _, tc = make_clients(tm)
        body = {"input": "What is 2+2?", "reasoning": {"effort": effort}}
        r = tc.post("/v1/responses", json={"model": MODEL, **body})
        assert r.status_code == 200, r.text
        assert tok.decode(tm.received[-1].input_ids) == recipe_responses_prompt(body, thinking=thinking)
        out = Response.model_validate(r.json()).output
        if not thinking:
            assert [o.type for o in out] == ["message"]


def test_sglang_33913_messages_thinking_disabled_is_served(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#33913 (``thinking: {"type": "disabled"}`` on ``/v1/messages`` answered
    400 where the reasoning could be switched off): the request is served with DeepSeek's
    thinking-off prompt and the reply is one ``text`` block, streamed and not. Oracle:
    ``deepseek-recipe``'s Messages converter, V4 encoder and Messages response; the
    ``anthropic`` client's types (``post`` validates both)."""
    tm = PromptTM(tok, reply=ANSWER)
    _, _, tc = make_clients(tm)
    body = {"messages": HI, "thinking": {"type": "disabled"}}
    msg, events = messages_post(tc, body)
    assert tok.decode(tm.received[-1].input_ids) == recipe_messages_prompt(body, thinking=False)
    expected = recipe_messages_response(body, ANSWER, thinking=False)
    assert [(b["type"], b.get("text")) for b in msg["content"]] == [
        (b["type"], b.get("text")) for b in expected["content"]
    ]
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["text"]


def test_claurst_217_messages_block_order_thinking_text_tool_use(tok: PreTrainedTokenizerFast) -> None:
    """Kuberwastaken/claurst#217 (a non-streamed Messages reply rebuilt with its thinking block
    dropped and its blocks reordered, text first and ``tool_use`` last whatever came first): a
    reply of reasoning, text and a tool call comes back as thinking, text, ``tool_use`` in that
    order, non-streamed and streamed alike, and the thinking text is the reasoning. Oracle:
    ``deepseek-recipe``'s Messages response (thinking on); the ``anthropic`` client's types."""
    reply = f"{THOUGHT}{THINK_END}Let me check.{CALL}"
    _, _, tc = make_clients(PromptTM(tok, reply=reply))
    body = {
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    msg, events = messages_post(tc, body)
    expected = recipe_messages_response(body, reply, thinking=True)
    want = [b["type"] for b in expected["content"]]
    assert want == ["thinking", "text", "tool_use"]
    assert [b["type"] for b in msg["content"]] == want
    assert [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"] == want
    assert msg["content"][0]["thinking"] == expected["content"][0]["thinking"]
    streamed = "".join(
        e["delta"]["thinking"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "thinking_delta"
    )
    assert streamed == expected["content"][0]["thinking"]
    assert msg["content"][2]["input"] == expected["content"][2]["input"]
    assert msg["stop_reason"] == "tool_use"


def test_oh_my_pi_6046_signed_thinking_replayed_next_turn(tok: PreTrainedTokenizerFast) -> None:
    """can1357/oh-my-pi#6046 (a streamed thinking block's signature lost, so the next turn replayed
    the block with ``signature: ""`` and its reasoning was dropped): the stream's
    ``signature_delta`` is the thinking block's signature, non-empty, and the block sent back with
    it in the tool-use continuation keeps its reasoning in the prompt, as DeepSeek's converter
    renders that history. Oracle: ``deepseek-recipe``'s Messages converter and V4 encoder; the
    ``anthropic`` client's types."""
    reply = f"{THOUGHT}{THINK_END}{CALL}"
    tm = PromptTM(tok, reply=reply)
    _, _, tc = make_clients(tm)
    first = {
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "output_config": {"effort": "low"},  # no effort paragraph under either profile
    }
    msg, events = messages_post(tc, first)
    sigs = [
        e["delta"]["signature"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "signature_delta"
    ]
    assert len(sigs) == 1 and sigs[0]
    stops = [i for i, e in enumerate(events) if e["type"] == "content_block_stop"]
    sig_at = next(
        i for i, e in enumerate(events) if e["type"] == "content_block_delta" and "signature" in e["delta"]
    )
    assert sig_at + 1 == stops[0]  # the signature closes the thinking block, as Anthropic's stream
    thinking_block = msg["content"][0]
    assert thinking_block["type"] == "thinking" and thinking_block["signature"]
    tool_use = msg["content"][-1]
    second = {
        **first,
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": [events_block(events), tool_use]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_use["id"], "content": "Sunny."}],
            },
        ],
    }
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 100, **second})
    assert r.status_code == 200, r.text
    prompt = tok.decode(tm.received[-1].input_ids)
    assert prompt == recipe_messages_prompt(second, thinking=True)
    assert THOUGHT in prompt


def events_block(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The first thinking block as the stream built it: its ``thinking_delta`` texts joined and its
    ``signature_delta``."""
    text = "".join(
        e["delta"]["thinking"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "thinking_delta"
    )
    sig = next(
        e["delta"]["signature"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "signature_delta"
    )
    return {"type": "thinking", "thinking": text, "signature": sig}


@pytest.mark.parametrize(
    "exclude", [{"include_reasoning": False}, {"reasoning": {"exclude": True}}], ids=["vllm", "openrouter"]
)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_layr_labs_625_excluded_reasoning_still_counted(
    tok: PreTrainedTokenizerFast, exclude: dict[str, Any], stream: bool
) -> None:
    """Layr-Labs/d-inference#625 (with ``include_reasoning: false`` / ``reasoning.exclude: true``
    the reasoning text was dropped before it was counted, so ``reasoning_tokens`` read 0 for a
    request that reasoned): the reasoning is left out of the answer but still counted in
    ``usage``, streamed and not, and the answer is the text after ``</think>``. Oracle: the
    tokenizer's count up to ``</think>``; ``deepseek-recipe``'s response parser; the ``openai``
    client's types."""
    body: dict[str, Any] = {"messages": HI, **ON, **exclude}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    r = post_chat(FakeTM(tok, reply=REPLY), body)
    expected = recipe_message({"messages": HI}, REPLY, thinking=True)
    if stream:
        chunks = [ChatCompletionChunk.model_validate(e) for e in sse_data_events(r)[:-1]]
        content = "".join(ch.delta.content or "" for c in chunks for ch in c.choices)
        reasoning = "".join(reasoning_of(ch.delta) or "" for c in chunks for ch in c.choices)
        usage = chunks[-1].usage
    else:
        answer = ChatCompletion.model_validate(r.json())
        content, reasoning = answer.choices[0].message.content or "", reasoning_of(answer.choices[0].message)
        usage = answer.usage
    assert content == expected["content"] and not reasoning
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == _reasoning_count(tok, REPLY)


def test_rapid_mlx_866_responses_cut_mid_reasoning_streams_the_item(tok: PreTrainedTokenizerFast) -> None:
    """raullenchai/Rapid-MLX#866 (a streamed ``/v1/responses`` cut by ``max_output_tokens`` while
    still reasoning ended ``completed`` with no output, where the non-streamed one answered
    ``incomplete`` with a reasoning item): streamed and not, the response ends ``incomplete``
    (``max_output_tokens``) with one reasoning item holding the partial thought, the stream's
    ``reasoning_text`` deltas join to it, and every output token is a reasoning token. Oracle:
    the tokenizer (the first ``k`` tokens of the reply, decoded); OpenAI's reasoning guide
    (``status`` / ``incomplete_details``); the ``openai`` client's types."""
    k = 4
    ids = tok.encode(REPLY, add_special_tokens=False)
    assert ids.index(tok.convert_tokens_to_ids(THINK_END)) > k
    partial = tok.decode(ids[:k])
    _, _, tc = make_clients(PromptTM(tok, reply=REPLY))
    body = {"input": "What is 2+2?", "reasoning": {"effort": "low"}, "max_output_tokens": k}
    resp, events = responses_post(tc, body)
    terminal = events[-1]
    assert terminal["type"] == "response.incomplete"
    for got in (resp, terminal["response"]):
        assert got["status"] == "incomplete"
        assert got["incomplete_details"] == {"reason": "max_output_tokens"}
        out = Response.model_validate(got).output
        assert [o.type for o in out] == ["reasoning"]
        assert out[0].content is not None and out[0].content[0].text == partial
        assert got["usage"]["output_tokens"] == k
        assert got["usage"]["output_tokens_details"]["reasoning_tokens"] == k
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert deltas == partial


def test_immich_923_messages_reasoning_cut_by_max_tokens(tok: PreTrainedTokenizerFast) -> None:
    """sam-dumont/immich-video-memory-generator#923 (every token of a small ``max_tokens`` went to
    the reasoning: the reply is one thinking block and ``stop_reason: max_tokens``, which the
    reader must be able to tell from an empty answer): the Messages reply cut while still
    reasoning is a single signed thinking block holding the partial thought, ``stop_reason``
    ``max_tokens`` and ``output_tokens`` the cap, streamed and not (the streamed block closed
    after its ``signature_delta``). Oracle: ``deepseek-recipe``'s Messages response (finish
    ``length``); the tokenizer (the first ``k`` tokens of the reply, decoded); the ``anthropic``
    client's types."""
    k = 4
    ids = tok.encode(REPLY, add_special_tokens=False)
    partial = tok.decode(ids[:k])
    _, _, tc = make_clients(PromptTM(tok, reply=REPLY))
    body = {
        "messages": HI,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "max_tokens": k,
    }
    msg, events = messages_post(tc, body)
    expected = recipe_messages_response(body, partial, thinking=True, finish="length")
    assert [b["type"] for b in expected["content"]] == ["thinking"]
    assert expected["stop_reason"] == "max_tokens"
    assert [b["type"] for b in msg["content"]] == ["thinking"]
    assert msg["content"][0]["thinking"] == expected["content"][0]["thinking"] == partial
    assert msg["content"][0]["signature"]
    assert msg["stop_reason"] == "max_tokens" and msg["usage"]["output_tokens"] == k
    kinds = [(e["type"], e.get("delta", {}).get("type")) for e in events]
    assert [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"] == ["thinking"]
    assert kinds.index(("content_block_delta", "signature_delta")) + 1 == kinds.index(
        ("content_block_stop", None)
    )
    assert events_block(events)["thinking"] == partial
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] == "max_tokens" and delta["usage"]["output_tokens"] == k


def test_pi_6457_empty_thinking_block_replayed(tok: PreTrainedTokenizerFast) -> None:
    """earendil-works/pi#6457 (a thinking block whose text was empty was left out of the history
    sent back, so the tool-use turn was replayed without it): an assistant turn of an empty signed
    thinking block and a ``tool_use`` block, answered by a ``tool_result``, is served, its prompt
    the one DeepSeek's converter renders for the same history. Oracle: ``deepseek-recipe``'s
    Messages converter and V4 encoder; the ``anthropic`` client's types."""
    tm = PromptTM(tok, reply=REPLY)
    _, _, tc = make_clients(tm)
    body = {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "", "signature": "sig"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny."}],
            },
        ],
        "tools": [WEATHER],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "output_config": {"effort": "low"},  # no effort paragraph under either profile
    }
    msg, _ = messages_post(tc, body)
    assert tok.decode(tm.received[-1].input_ids) == recipe_messages_prompt(body, thinking=True)
    assert [(b["type"], b.get("text")) for b in msg["content"]][-1] == ("text", ANSWER)


def test_tanstack_1266_responses_tool_loop_replays_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """TanStack/ai#1266 (a Responses tool loop did not send back the reasoning item paired with the
    function call, so the next turn ran without the reasoning that led to the call): the tool
    result sent with ``previous_response_id`` and the same history replayed statelessly (the
    reasoning item, the call and its output as input items) both render DeepSeek's prompt of that
    history, the call turn's reasoning kept in it. Oracle: ``deepseek-recipe``'s Responses
    converter and V4 encoder; the ``openai`` client's types."""
    thought = "I should look it up."
    tm = PromptTM(tok, reply=f"{thought}{THINK_END}{CALL}")
    _, _, tc = make_clients(tm)
    first = {"input": "Weather in Paris?", "reasoning": {"effort": "low"}, "tools": [RESPONSES_WEATHER]}
    r = tc.post("/v1/responses", json={"model": MODEL, **first})
    assert r.status_code == 200, r.text
    out = r.json()["output"]
    assert [o["type"] for o in out] == ["reasoning", "function_call"]
    result = [{"type": "function_call_output", "call_id": out[1]["call_id"], "output": "Sunny."}]
    history = {
        "input": [{"role": "user", "content": "Weather in Paris?"}, *out, *result],
        "reasoning": {"effort": "low"},
        "tools": [RESPONSES_WEATHER],
    }
    expected = recipe_responses_prompt(history, thinking=True)
    assert f"{thought}{THINK_END}" in expected

    tm.reply = REPLY
    for body in ({**history, "input": result, "previous_response_id": r.json()["id"]}, history):
        got = tc.post("/v1/responses", json={"model": MODEL, **body})
        assert got.status_code == 200, got.text
        assert tok.decode(tm.received[-1].input_ids) == expected
        Response.model_validate(got.json())

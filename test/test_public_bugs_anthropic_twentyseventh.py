"""A twenty-seventh set of public bug reports, replayed against the Anthropic Messages API
(``/v1/messages``, ``/v1/messages/count_tokens``): the ``signature`` of a thinking block (a
``signature_delta`` before the block closes, streamed or cut by ``max_tokens``) and the signed
block replayed on the next turn, ``system`` as a list of text blocks with ``cache_control`` and
a non-text block there, ``cache_control`` inside and on a ``tool_result``, ``count_tokens`` over
system blocks, tools, ``tool_use`` and ``tool_result``, and ``thinking.display``.

Fixed here: ``thinking.display`` was ignored, so ``"omitted"`` still returned the reasoning
(streamed as ``thinking_delta`` events) and an unknown value was served; ``"omitted"`` now
returns the thinking block with an empty ``thinking`` and its signature (streamed: the
``signature_delta`` only), and another value is a 400 naming ``thinking.display``
(anomalyco/opencode#44544, router-for-me/CLIProxyAPI#5253). The other reports passed as-is;
their tests are regression guards.

Replayed through the in-process routes on a fake tokenizer manager (no server, no model).
Oracles: Anthropic's API reference (the stream's event order, ``signature_delta``) and the
reports' stated expected values; the ``anthropic`` client's own types, stream accumulator and
errors; DeepSeek's own Messages converter and V4 encoder (``deepseek-recipe``) for the prompt a
request renders, tokenized by the DeepSeek tokenizer (``tok``) for token counts.
"""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import pytest
from anthropic_testutil import NO_THINK, WEATHER, make_clients
from anthropic_testutil import stream_events as _stream
from fake_prompt_tm import MODEL, PromptTM
from transformers import PreTrainedTokenizerFast

pytest.importorskip("deepseek_recipe")
from deepseek_recipe_testutil import recipe_messages_prompt  # noqa: E402

USER = [{"role": "user", "content": "Which is larger, 9.11 or 9.9?"}]
THINK = {"type": "enabled", "budget_tokens": 1024}
THOUGHT = "Compare the tenths: 9.9 has nine, 9.11 has one."
ANSWER = "9.9 is larger."


def _block_events(events: list[dict[str, Any]], index: int) -> list[str]:
    """The kinds of the events of content block ``index``: ``start``, each delta's ``type``,
    ``stop``."""
    out = []
    for e in events:
        if e.get("index") != index:
            continue
        if e["type"] == "content_block_start":
            out.append("start")
        elif e["type"] == "content_block_delta":
            out.append(e["delta"]["type"])
        elif e["type"] == "content_block_stop":
            out.append("stop")
    return out


def _prompt(tm: PromptTM) -> str:
    """The prompt text of the last engine request ``tm`` received."""
    return tm.tokenizer.decode(tm.received[-1].input_ids)


# ----------------------------------------------------------------------------- signatures


def test_hebo_gateway_132_streamed_thinking_is_signed_and_replays(tok: PreTrainedTokenizerFast) -> None:
    """8monkey-ai/hebo-gateway#132 (also #131: a streamed ``/v1/messages`` thinking block came
    without a ``signature_delta``, so the client stored an unsigned block and the next turn that
    replayed it was refused "Invalid `signature` in `thinking` block"): the streamed thinking block
    carries one ``signature_delta`` (a non-empty string) after its ``thinking_delta`` events and
    before ``content_block_stop``; the ``anthropic`` client's accumulated message holds the
    thinking text and that signature; sent back as the assistant turn of the next request, the
    signed block is served and renders the prompt DeepSeek's own Messages converter renders.
    Oracle: Anthropic's streaming reference; the ``anthropic`` stream accumulator;
    ``deepseek-recipe``."""
    tm = PromptTM(tok, reply=THOUGHT + "</think>" + ANSWER)
    client, _, tc = make_clients(tm)
    events = _stream(tc, {"messages": USER, "thinking": THINK})
    kinds = _block_events(events, 0)
    assert kinds[0] == "start" and kinds[-2:] == ["signature_delta", "stop"]
    assert set(kinds[1:-2]) == {"thinking_delta"}
    sig = next(e["delta"]["signature"] for e in events if e.get("delta", {}).get("type") == "signature_delta")
    assert isinstance(sig, str) and sig

    with client.messages.stream(model=MODEL, max_tokens=200, messages=USER, thinking=THINK) as s:
        final = s.get_final_message()
    thinking, text = final.content
    assert (thinking.type, thinking.thinking, thinking.signature) == ("thinking", THOUGHT, sig)
    assert (text.type, text.text) == ("text", ANSWER)

    history = [
        *USER,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]},
        {"role": "user", "content": "And 9.8?"},
    ]
    low = {"output_config": {"effort": "low"}}  # no effort paragraph under either profile
    again = client.messages.create(
        model=MODEL, max_tokens=200, messages=history, thinking=THINK, extra_body=low
    )
    assert again.stop_reason == "end_turn"
    assert _prompt(tm) == recipe_messages_prompt({"messages": history, **low}, thinking=True)


@pytest.mark.parametrize(
    "reply, max_tokens, stop_reason, types",
    [
        (THOUGHT + "</think>" + ANSWER, 200, "end_turn", ["thinking", "text"]),
        (THOUGHT + "</think>", 200, "end_turn", ["thinking"]),
        (THOUGHT + "</think>" + ANSWER, 4, "max_tokens", ["thinking"]),
    ],
    ids=["then-text", "thinking-only", "cut-mid-thought"],
)
def test_lmdeploy_4851_signature_delta_closes_every_thinking_block(
    tok: PreTrainedTokenizerFast, reply: str, max_tokens: int, stop_reason: str, types: list[str]
) -> None:
    """InternLM/lmdeploy#4851 (thinking blocks had no ``signature``; the fix signs the
    non-streamed block and emits one ``signature_delta`` just before each streamed thinking block
    closes, whether text, a tool call or the end follows): the order is ``content_block_start``,
    ``thinking_delta`` ..., ``signature_delta``, ``content_block_stop`` when text follows, when
    the message ends after the thought, and when ``max_tokens`` cuts the thought (``stop_reason``
    ``max_tokens``); the non-streamed message's thinking block carries a non-empty
    ``signature``. Oracle: Anthropic's streaming reference; the ``anthropic`` client's
    ``Message`` type."""
    tm = PromptTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    body = {"messages": USER, "thinking": THINK, "max_tokens": max_tokens}
    events = _stream(tc, body)
    kinds = _block_events(events, 0)
    assert kinds[0] == "start" and kinds[-2:] == ["signature_delta", "stop"]
    assert kinds.count("signature_delta") == 1 and set(kinds[1:-2]) == {"thinking_delta"}
    assert events[-2]["delta"]["stop_reason"] == stop_reason
    msg = client.messages.create(model=MODEL, **body)
    assert [b.type for b in msg.content] == types and msg.stop_reason == stop_reason
    assert isinstance(msg.content[0].signature, str) and msg.content[0].signature


# ----------------------------------------------------------------------------- system blocks


def test_ai_sdk_provider_389_system_text_blocks_render_as_the_string(tok: PreTrainedTokenizerFast) -> None:
    """OpenRouterTeam/ai-sdk-provider#389 and cortexkit/anthropic-auth#203 (prompt caching needs
    ``system`` as a list of text blocks with ``cache_control`` on a block; a client or server
    that read only a string system lost or mangled it): one text block with ``cache_control``
    renders the same prompt as the plain string, and several blocks render the prompt DeepSeek's
    own Messages converter renders for them (``cache_control`` adds nothing to the text).
    Oracle: ``deepseek-recipe``; the string form of the same system prompt."""
    prompts = []
    for system in (
        "You are terse.",
        [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        [
            {"type": "text", "text": "You are terse."},
            {"type": "text", "text": "Answer in English.", "cache_control": {"type": "ephemeral"}},
        ],
    ):
        tm = PromptTM(tok, reply="Ok.")
        client, _, _ = make_clients(tm)
        body = {"messages": USER, "system": system}
        client.messages.create(model=MODEL, max_tokens=20, thinking=NO_THINK, **body)
        prompts.append(_prompt(tm))
        assert prompts[-1] == recipe_messages_prompt(body), system
    assert prompts[0] == prompts[1] != prompts[2]


def test_anthropic_auth_203_non_text_system_block_is_400(tok: PreTrainedTokenizerFast) -> None:
    """cortexkit/anthropic-auth#203 (a non-text block in ``system`` had its fields flattened into
    the prompt text; the fix reads ``type: "text"`` blocks only): Anthropic's ``system`` takes
    text blocks only, and DeepSeek's own converter refuses an ``image`` there; here such a
    ``system`` is a 400 in Anthropic's error shape naming ``system.0``, the ``anthropic`` client
    raises ``BadRequestError``, and no engine request is made. Oracle: ``deepseek-recipe``'s
    converter refuses the same body; the ``anthropic`` client's error type."""
    system = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]
    with pytest.raises(Exception, match="text"):
        recipe_messages_prompt({"messages": USER, "system": system})
    tm = PromptTM(tok, reply="Ok.")
    client, _, tc = make_clients(tm)
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 20, "messages": USER, "system": system})
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"].startswith("system.0")
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=20, messages=USER, system=system)  # type: ignore[arg-type]
    assert tm.received == []


# ----------------------------------------------------------------------------- tool results


def _tool_turns(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A weather question, the assistant's ``get_weather`` call, and ``result`` answering it."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]


def _strip_cache_control(value: Any) -> Any:
    """``value`` with every ``cache_control`` key removed, at any depth."""
    if isinstance(value, dict):
        return {k: _strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_control(v) for v in value]
    return value


def test_copilot_api_241_cache_control_around_a_tool_result_renders_nothing(
    tok: PreTrainedTokenizerFast,
) -> None:
    """caozhiyuan/copilot-api#241 (a client put ``cache_control`` on blocks inside
    ``tool_result.content``, and the request failed on the upstream's placement rule): a
    ``cache_control`` is a caching hint with no text of its own; on the ``tool_result`` itself or
    on its inner text blocks the request is served and renders exactly the prompt of the same
    body without any ``cache_control``, which is DeepSeek's own converter's prompt. Oracle:
    ``deepseek-recipe`` on the stripped body."""
    eph = {"type": "ephemeral"}
    results = [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny", "cache_control": eph},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [{"type": "text", "text": "Sunny", "cache_control": eph}],
        },
    ]
    for result in results:
        body = {"messages": _tool_turns(result), "tools": [WEATHER]}
        tm = PromptTM(tok, reply="It is sunny.")
        client, _, _ = make_clients(tm)
        client.messages.create(model=MODEL, max_tokens=20, thinking=NO_THINK, **copy.deepcopy(body))
        assert _prompt(tm) == recipe_messages_prompt(_strip_cache_control(body))


def test_kiro_gateway_135_count_tokens_counts_every_part(tok: PreTrainedTokenizerFast) -> None:
    """jwadow/kiro-gateway#135 (``input_tokens`` undercounted: ``tool_use`` / ``tool_result``
    blocks, Anthropic-shaped tools and a ``system`` block list were skipped): ``count_tokens`` on
    a body with all of them equals the served message's ``usage.input_tokens`` and the token
    count of the prompt DeepSeek's own Messages converter renders; dropping the tools or the
    system lowers it. Oracle: ``deepseek-recipe``'s prompt tokenized by the DeepSeek tokenizer."""
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "Sunny"}]}
    body: dict[str, Any] = {
        "messages": _tool_turns(result),
        "tools": [WEATHER],
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    }
    want = len(tok.encode(recipe_messages_prompt(body), add_special_tokens=False))
    client, _, _ = make_clients(PromptTM(tok, reply="Sunny."))
    counted = client.messages.count_tokens(model=MODEL, thinking=NO_THINK, **body).input_tokens
    served = client.messages.create(model=MODEL, max_tokens=20, thinking=NO_THINK, **body)
    assert counted == served.usage.input_tokens == want
    for drop in ("tools", "system"):
        rest = {k: v for k, v in body.items() if k != drop}
        fewer = client.messages.count_tokens(model=MODEL, thinking=NO_THINK, **rest).input_tokens
        assert fewer == len(tok.encode(recipe_messages_prompt(rest), add_special_tokens=False)) < counted


# ----------------------------------------------------------------------------- display


def test_opencode_44544_display_omitted_returns_a_signed_empty_thinking_block(
    tok: PreTrainedTokenizerFast,
) -> None:
    """anomalyco/opencode#44544 (``thinking: {"type": "enabled", "display": "omitted"}`` lost its
    ``display`` and the reasoning came back summarized instead of omitted) and
    router-for-me/CLIProxyAPI#5253 (with ``display: "omitted"`` an empty thinking block with a
    signature and no ``thinking_delta`` events is the requested behaviour); Anthropic's reference:
    "omitted" redacts the thinking content but returns the signature for multi-turn continuity.
    Here the model still reasons (the answer is the same), the thinking block comes back with
    ``thinking: ""`` and the same non-empty signature as the summarized block, the stream sends
    the block's ``signature_delta`` and no ``thinking_delta``, and ``summarized`` returns the
    text. Served before, ``display`` was ignored and the reasoning returned. Oracle: the
    reference and the reports' stated behaviour; the ``anthropic`` client's types; the
    summarized response of the same request."""
    reply = THOUGHT + "</think>" + ANSWER
    client, _, tc = make_clients(PromptTM(tok, reply=reply))
    shown = client.messages.create(
        model=MODEL, max_tokens=200, messages=USER, thinking={**THINK, "display": "summarized"}
    )
    omitted_think = {**THINK, "display": "omitted"}
    hidden = client.messages.create(model=MODEL, max_tokens=200, messages=USER, thinking=omitted_think)
    assert [b.type for b in shown.content] == [b.type for b in hidden.content] == ["thinking", "text"]
    assert shown.content[0].thinking == THOUGHT and hidden.content[0].thinking == ""
    assert hidden.content[0].signature and hidden.content[0].signature == shown.content[0].signature
    assert hidden.content[1].text == shown.content[1].text == ANSWER

    events = _stream(tc, {"messages": USER, "thinking": omitted_think})
    assert _block_events(events, 0) == ["start", "signature_delta", "stop"]
    assert events[1]["content_block"]["type"] == "thinking"
    assert "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta") == ANSWER

    with client.messages.stream(model=MODEL, max_tokens=200, messages=USER, thinking=omitted_think) as s:
        final = s.get_final_message()
    assert (final.content[0].thinking, final.content[0].signature) == ("", hidden.content[0].signature)


@pytest.mark.parametrize("display", ["hidden", "", 1])
def test_opencode_44544_unknown_display_is_400(tok: PreTrainedTokenizerFast, display: Any) -> None:
    """anomalyco/opencode#44544 (a ``display`` the server did not read was silently served as the
    default): ``display`` takes ``summarized`` or ``omitted`` (Anthropic's reference); another
    value is a 400 in Anthropic's error shape naming ``thinking.display``, no engine request
    made. Oracle: the reference's enum; the ``anthropic`` client's ``BadRequestError``."""
    tm = PromptTM(tok, reply="Hi.")
    client, _, _ = make_clients(tm)
    with pytest.raises(anthropic.BadRequestError, match="thinking.display"):
        client.messages.create(
            model=MODEL,
            max_tokens=20,
            messages=USER,
            thinking={**THINK, "display": display},  # type: ignore[typeddict-item]
        )
    assert tm.received == []


def test_librechat_279_replayed_signed_empty_thinking_block_is_served(tok: PreTrainedTokenizerFast) -> None:
    """LibreChat-AI/agents#279 (an omitted-display turn's signed thinking block has empty text;
    replayed, it must still carry its ``thinking`` field and be accepted): the
    ``display: "omitted"`` answer, sent back as the assistant turn of the next request, is served
    and renders the prompt DeepSeek's own Messages converter renders for that history. Oracle:
    ``deepseek-recipe``."""
    tm = PromptTM(tok, reply=THOUGHT + "</think>" + ANSWER)
    client, _, _ = make_clients(tm)
    omitted_think = {**THINK, "display": "omitted"}
    first = client.messages.create(model=MODEL, max_tokens=200, messages=USER, thinking=omitted_think)
    history = [
        *USER,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": "And 9.8?"},
    ]
    assert history[1]["content"][0] == {
        "type": "thinking",
        "thinking": "",
        "signature": first.content[0].signature,
    }
    low = {"output_config": {"effort": "low"}}
    again = client.messages.create(
        model=MODEL, max_tokens=200, messages=history, thinking=THINK, extra_body=low
    )
    assert again.stop_reason == "end_turn"
    assert _prompt(tm) == recipe_messages_prompt({"messages": history, **low}, thinking=True)

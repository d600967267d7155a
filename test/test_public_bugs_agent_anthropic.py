"""Public bug reports of peer servers' Anthropic Messages API as Claude Code uses it, replayed
through ``/v1/messages`` (each test names its report, or the rule it pins).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: the
``anthropic`` client's own types and its stream accumulator (``client.messages.stream``), the
Messages API's streaming rules (a delta's type is that of the open block it targets), and DeepSeek's
own Messages converter and V4 encoder (the ``deepseek-recipe`` package) for the prompt a request
must render.
"""

from __future__ import annotations

import json
from typing import Any

import deepseek_recipe as recipe
import pytest
from anthropic_testutil import WEATHER, make_clients, post
from deepseek_recipe_testutil import ids_in_written_order
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM, blocks
from transformers import PreTrainedTokenizerFast

D = "｜DSML｜"
USER = {"role": "user", "content": "Weather in Paris and Rome?"}
#: the delta type each content block type takes (Anthropic's streaming Messages reference)
DELTA_OF = {
    "text": "text_delta",
    "tool_use": "input_json_delta",
    "thinking": ("thinking_delta", "signature_delta"),
}


def recipe_prompt(body: dict[str, Any]) -> str:
    """DeepSeek's own prompt text (``deepseek-recipe``'s Messages converter and V4 encoder) of a
    Messages request body whose thinking is disabled."""
    b = {**ids_in_written_order(body, "toolu_"), "model": "DeepSeek-V4-Pro", "thinking": {"type": "disabled"}}
    b.pop("stream", None)
    req = recipe.MessagesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def _invoke(city: str) -> str:
    return f'<{D}invoke name="get_weather">\n<{D}parameter name="city" string="true">{city}</{D}parameter>\n</{D}invoke>'


def _delta_types_match_blocks(events: list[dict[str, Any]]) -> list[str]:
    """The block types in order, checking that every delta targets the open block with its type."""
    kinds: list[str] = []
    open_type = None
    for ev in events:
        if ev["type"] == "content_block_start":
            open_type = ev["content_block"]["type"]
            kinds.append(open_type)
        elif ev["type"] == "content_block_delta":
            want = DELTA_OF[open_type]
            assert ev["delta"]["type"] in (want if isinstance(want, tuple) else (want,)), (open_type, ev)
        elif ev["type"] == "content_block_stop":
            open_type = None
    return kinds


@pytest.mark.parametrize("sep", ["\n", "\n\n \n"])
def test_sglang_24293_no_text_delta_on_an_open_tool_use_block(tok: PreTrainedTokenizerFast, sep: str) -> None:
    """sgl-project/sglang#24293: with two tool calls in one turn, the whitespace between them was
    streamed as a ``text_delta`` carrying the index of the still-open ``tool_use`` block; the
    Anthropic SDK (and Claude Code) refused the stream ("Content block is not a text block").
    Expected: every delta of the type of the block it targets, and the streamed message the
    non-streamed one: text, then one ``tool_use`` per call."""
    block = f"\n\n<{D}tool_calls>\n" + _invoke("Paris") + sep + _invoke("Rome") + f"\n</{D}tool_calls>"
    tm = PromptTM(tok, reply="Checking both." + block)
    client, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": [USER], "tools": [WEATHER]})
    assert _delta_types_match_blocks(events) == ["text", "tool_use", "tool_use"]
    assert body["stop_reason"] == "tool_use"
    assert [b.get("input") for b in body["content"]] == [None, {"city": "Paris"}, {"city": "Rome"}]
    with client.messages.stream(model=MODEL, max_tokens=100, messages=[USER], tools=[WEATHER]) as s:
        final = s.get_final_message()
    m = client.messages.create(model=MODEL, max_tokens=100, messages=[USER], tools=[WEATHER])
    strip = [{k: v for k, v in b.items() if k != "id"} for b in blocks(final)]
    assert strip == [{k: v for k, v in b.items() if k != "id"} for b in blocks(m)]
    assert m.content[0].text == "Checking both."


def test_sglang_26795_thinking_streamed_as_thinking_deltas_before_tool_use(
    tok: PreTrainedTokenizerFast,
) -> None:
    """sgl-project/sglang#26795: streamed, the reasoning never became ``thinking_delta`` events
    (and, with no block-type tracking, a ``tool_use`` opened while another block was open).
    Expected: a ``thinking`` block of ``thinking_delta`` events closed before the ``tool_use``
    block, the client's accumulated message equal to the non-streamed one."""
    tm = PromptTM(tok, reply="I need the weather tool." + "</think>" + CALL)
    client, _, tc = make_clients(tm)
    kw: dict[str, Any] = {
        "messages": [USER],
        "tools": [WEATHER],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    body, events = post(tc, kw)
    assert _delta_types_match_blocks(events) == ["thinking", "tool_use"]
    thought = "".join(e["delta"].get("thinking", "") for e in events if e["type"] == "content_block_delta")
    assert thought == "I need the weather tool."
    assert body["stop_reason"] == "tool_use" and body["content"][1]["input"] == ARGS
    with client.messages.stream(model=MODEL, max_tokens=100, **kw) as s:
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "tool_use"]
    assert final.content[0].thinking == "I need the weather tool." and final.content[1].input == ARGS


def test_vllm_38738_multi_turn_tool_use_history(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#38738: the second request of a Messages tool loop -- an assistant turn of
    ``tool_use`` blocks only, then a user turn of ``tool_result`` blocks (one a list of text
    blocks, one a string) and text -- failed ("Invalid assistant message"). Expected: accepted,
    and the prompt DeepSeek's own Messages converter renders for it."""
    tm = PromptTM(tok, reply="Paris 18C, Rome 21C.")
    client, _, _ = make_clients(tm)
    body = {
        "max_tokens": 100,
        "tools": [WEATHER],
        "messages": [
            USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "18C"}],
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "21C"},
                    {"type": "text", "text": "Summarize."},
                ],
            },
        ],
    }
    m = client.messages.create(model=MODEL, **body)
    assert m.content[0].text == "Paris 18C, Rome 21C." and m.stop_reason == "end_turn"
    assert tok.decode(tm.received[-1].input_ids) == recipe_prompt(body)


@pytest.mark.parametrize("stream", [False, True])
def test_tool_result_is_error_renders_its_text_as_is(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """A ``tool_result`` with ``is_error: true`` (a string content and a list of text blocks):
    DeepSeek's own Messages converter (``deepseek-recipe``) renders it as the same result without
    the flag, and so do SGLang's and vLLM's Anthropic adapters (sgl-project/sglang,
    vllm-project/vllm: the tool message's content is the block's content). It used to get an
    ``"Error: "`` prefix the model was never trained on. Oracle: ``deepseek-recipe``'s prompt."""
    tm = PromptTM(tok, reply="The tool failed.")
    _, _, tc = make_clients(tm)
    calls = [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
    ]
    results = [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "timeout", "is_error": True},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_2",
            "content": [{"type": "text", "text": "no such city"}],
            "is_error": True,
        },
        {"type": "text", "text": "What happened?"},
    ]
    body = {
        "max_tokens": 100,
        "tools": [WEATHER],
        "messages": [USER, {"role": "assistant", "content": calls}, {"role": "user", "content": results}],
    }
    r = tc.post("/v1/messages", json={"model": MODEL, **body, "stream": stream})
    assert r.status_code == 200, r.text
    prompt = tok.decode(tm.received[-1].input_ids)
    assert prompt == recipe_prompt(body)
    assert "Error: " not in prompt  # old code: "<tool_result>Error: timeout</tool_result>"


def test_vllm_44576_claude_code_request_shape(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#44576 (and vllm-project/vllm-ascend#8634, ``POST /v1/messages?beta=true``
    answered 400): Claude Code's requests did not get through. Its shape: the ``?beta=true``
    query, ``anthropic-beta`` headers, ``system`` as a list of text blocks with ``cache_control``
    (one with a ``ttl``), ``cache_control`` on a tool and on message blocks, ``metadata.user_id``,
    streaming. Expected: accepted, the prompt DeepSeek's own Messages converter renders, and
    ``count_tokens`` of the same body counting that prompt."""
    tm = PromptTM(tok, reply="Done.")
    client, _, tc = make_clients(tm)
    body = {
        "max_tokens": 100,
        "system": [
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be concise.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        ],
        "tools": [{**WEATHER, "cache_control": {"type": "ephemeral"}}],
        "metadata": {"user_id": "user_abc_account__session_1"},
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
                    {"type": "text", "text": "Weather?", "cache_control": {"type": "ephemeral"}},
                ],
            }
        ],
    }
    headers = {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
    }
    for stream in (False, True):
        r = tc.post(
            "/v1/messages?beta=true", json={"model": MODEL, **body, "stream": stream}, headers=headers
        )
        assert r.status_code == 200, r.text
        assert tok.decode(tm.received[-1].input_ids) == recipe_prompt(body)
    n = len(tm.received[-1].input_ids)
    count = {k: v for k, v in body.items() if k not in ("max_tokens", "metadata")}
    r = tc.post("/v1/messages/count_tokens?beta=true", json={"model": MODEL, **count}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"input_tokens": n}
    assert json.loads(json.dumps(client.messages.count_tokens(model=MODEL, **count).model_dump())) == {
        "input_tokens": n
    }


@pytest.mark.parametrize("text", ["Is 3 < 4? Yes: 3 <", "Done.\n\n<｜"])
def test_sglang_9657_messages_unused_tools_never_cut_the_answer(
    tok: PreTrainedTokenizerFast, text: str
) -> None:
    """sgl-project/sglang#9657 through ``/v1/messages``: with tools given but not used, an answer
    that stopped on characters that could begin a DSML block (``"<"``, ``"<｜"``) lost them.
    Expected: the text block the same request without tools gets, streamed and not."""
    tm = PromptTM(tok, reply=text)
    client, _, tc = make_clients(tm)
    plain = client.messages.create(model=MODEL, max_tokens=100, messages=[USER])
    assert plain.content[0].text == text  # the oracle: no tool parser at all
    body, events = post(tc, {"messages": [USER], "tools": [WEATHER]})
    assert body["content"] == [{"type": "text", "text": text}] and body["stop_reason"] == "end_turn"
    streamed = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert streamed == text

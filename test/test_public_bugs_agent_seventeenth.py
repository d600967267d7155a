"""Public bug reports of peer servers' agent-facing APIs (the OpenAI Responses API and the
Anthropic Messages API as Codex, Claude Code, LiteLLM and the OpenAI Agents SDK drive them),
replayed through ``/v1/responses`` and ``/v1/messages`` on an in-process app (each test names its
report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: DeepSeek's own
Messages / Responses converters and V4 encoder (the ``deepseek-recipe`` package) for the prompt a
request must render, a cold run of the same conversation sent whole, and the ``openai`` /
``anthropic`` clients' own types.
"""

from __future__ import annotations

from typing import Any

import deepseek_recipe as recipe
import pytest
from anthropic.types import Message
from anthropic_testutil import WEATHER as MESSAGES_WEATHER
from anthropic_testutil import make_clients
from deepseek_recipe_testutil import ids_in_written_order
from fake_prompt_tm import CALL, MODEL, PromptTM
from openai.types.responses import Response as OpenAIResponse
from responses_testutil import WEATHER, make_client
from responses_testutil import post as responses_post
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)


def _recipe_messages_prompt(body: dict[str, Any]) -> str:
    """DeepSeek's own prompt text of a Messages request body, thinking disabled."""
    b = {**ids_in_written_order(body, "toolu_"), "model": "DeepSeek-V4-Pro", "thinking": {"type": "disabled"}}
    req = recipe.MessagesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def _recipe_responses_prompt(body: dict[str, Any]) -> str:
    """DeepSeek's own prompt text of a Responses request body, thinking disabled."""
    b = {**ids_in_written_order(body), "model": "DeepSeek-V4-Pro", "reasoning": {"effort": "none"}}
    req = recipe.ResponsesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def _prompt(tm: PromptTM) -> str:
    return tm.tokenizer.decode(tm.received[-1].input_ids)


# --------------------------------------------------------------------------- Messages API


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "text", "text": ""}, {"type": "text", "text": "hi"}],
        [
            {"type": "text", "text": "hi"},
            {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}},
        ],
        [{"type": "text", "text": "a"}, {"type": "text", "text": ""}, {"type": "text", "text": "b"}],
        [{"type": "text", "text": ""}],
    ],
)
def test_empty_user_text_block_adds_no_blank_line(tok: PreTrainedTokenizerFast, content: list[Any]) -> None:
    """anthropics/claude-code#59812 (and #55302): Claude Code sends user messages holding an empty
    ``text`` block (with ``cache_control`` at times). It is no text: the prompt must be DeepSeek's
    own (its converter drops the empty block), not the other blocks joined around a blank line
    (``"\\n\\nhi"``), for the request and for ``count_tokens`` alike."""
    tm = PromptTM(tok, reply="Done.")
    _, _, tc = make_clients(tm)
    body = {"max_tokens": 20, "messages": [{"role": "user", "content": content}]}
    r = tc.post("/v1/messages", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    Message.model_validate(r.json())
    want = _recipe_messages_prompt(body)
    assert _prompt(tm) == want
    n = tc.post("/v1/messages/count_tokens", json={"model": MODEL, "messages": body["messages"]})
    assert n.status_code == 200, n.text
    assert n.json()["input_tokens"] == len(tok.encode(want, add_special_tokens=False))


def test_stop_sequences_reach_the_sampler_as_chat_stop(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#37118: ``/v1/messages`` dropped ``stop_sequences`` (the model ran on past
    them) while ``/v1/chat/completions`` honoured ``stop``. Expected: the engine request of the
    Messages call carries the same stop strings as the chat call of the same conversation."""
    tm = PromptTM(tok, reply="Done.")
    _, oa, tc = make_clients(tm)
    user = {"role": "user", "content": "Say STOPPROBE then a poem."}
    r = tc.post(
        "/v1/messages",
        json={
            "model": MODEL,
            "max_tokens": 20,
            "messages": [user],
            "stop_sequences": ["STOPPROBE", "\n\nHuman:"],
        },
    )
    assert r.status_code == 200, r.text
    messages_sp = tm.received[-1].sampling_params
    oa.chat.completions.create(model=MODEL, messages=[user], max_tokens=20, stop=["STOPPROBE", "\n\nHuman:"])
    chat_sp = tm.received[-1].sampling_params
    assert messages_sp["stop"] == chat_sp["stop"]
    assert set(chat_sp["stop"]) >= {"STOPPROBE", "\n\nHuman:"}


def test_tool_result_blocks_with_cache_control_render_as_deepseek_does(tok: PreTrainedTokenizerFast) -> None:
    """anthropics/claude-code#50082: Claude Code marks the last blocks of a turn (a ``tool_result``
    and its text blocks, the tool definitions) with ``cache_control``. The marker is a hint of
    Anthropic's cache only: the request is served and renders DeepSeek's own prompt."""
    tm = PromptTM(tok, reply="Done.")
    _, _, tc = make_clients(tm)
    cache = {"type": "ephemeral"}
    body = {
        "max_tokens": 20,
        "system": [{"type": "text", "text": "You are an agent.", "cache_control": cache}],
        "tools": [{**MESSAGES_WEATHER, "cache_control": cache}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "sunny", "cache_control": cache}],
                    },
                    {"type": "text", "text": "Summarize.", "cache_control": cache},
                ],
            },
        ],
    }
    r = tc.post("/v1/messages", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    assert _prompt(tm) == _recipe_messages_prompt(body)


# --------------------------------------------------------------------------- Responses API

USER_ITEM = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
AGAIN_ITEM = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}]}


@pytest.mark.parametrize(
    "reasoning",
    [
        {"type": "reasoning", "id": "rs_1", "summary": None},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": []},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB"},
    ],
)
@pytest.mark.parametrize("where", ["first", "between_users"])
def test_empty_reasoning_item_is_a_no_op(
    tok: PreTrainedTokenizerFast, reasoning: dict[str, Any], where: str
) -> None:
    """ggml-org/llama.cpp#29159: replaying a reasoning item with no summary and no content (Codex
    replays ``encrypted_content``-only ones) must be a no-op, not a rejection, and not an empty
    assistant turn either (an ``<｜end▁of▁sentence｜>`` in the prompt). Expected: 200 and the
    prompt of the same input without the item, which is DeepSeek's own prompt of it."""
    tm = PromptTM(tok, reply="Done.")
    _, tc = make_client(tm)
    items = [reasoning, USER_ITEM] if where == "first" else [USER_ITEM, reasoning, AGAIN_ITEM]
    without = [it for it in items if it is not reasoning]
    body = {"model": MODEL, "reasoning": {"effort": "none"}, "max_output_tokens": 8}
    r = tc.post("/v1/responses", json={**body, "input": without})
    assert r.status_code == 200, r.text
    cold = _prompt(tm)
    r = tc.post("/v1/responses", json={**body, "input": items})
    assert r.status_code == 200, r.text
    OpenAIResponse.model_validate(r.json())
    assert _prompt(tm) == cold == _recipe_responses_prompt({"input": items})


def test_function_call_output_alone_continues_previous_response(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#2522: the second turn of a tool loop sends only a ``function_call_output`` item
    and ``previous_response_id``; it was a 400. Expected: 200, and the prompt of the same
    conversation sent whole with ``store: false`` (a cold run)."""
    tm = PromptTM(tok, reply="Checking." + CALL)
    client, tc = make_client(tm)
    user = {"role": "user", "content": "what's the weather in Paris?"}
    first = client.responses.create(model=MODEL, input=[user], tools=[WEATHER])
    call = next(o for o in first.output if o.type == "function_call")
    tm.reply = "Sunny in Paris."
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny and warm"}
    second = client.responses.create(
        model=MODEL, input=[output], previous_response_id=first.id, tools=[WEATHER]
    )
    assert second.output_text == "Sunny in Paris."
    continued = _prompt(tm)
    whole = [user] + [o.model_dump(mode="json", exclude_none=True) for o in first.output] + [output]
    client.responses.create(model=MODEL, input=whole, tools=[WEATHER], store=False)
    assert continued == _prompt(tm)


def test_previous_output_items_replayed_as_input_reasoning_included(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#13420: a client that does ``input.extend(response.output)`` (reasoning item,
    function call) and adds the ``function_call_output`` got an error once the output held a
    ``ResponseReasoningItem``. Expected: 200 through the ``openai`` client's own item objects, and
    the prompt of the same turn continued by ``previous_response_id``."""
    tm = PromptTM(tok, reply="I should look it up.</think>Checking." + CALL)
    client, _ = make_client(tm)
    conv: list[Any] = [{"role": "user", "content": "Weather in Paris? Call get_weather."}]
    first = client.responses.create(model=MODEL, input=conv, tools=[WEATHER], reasoning={"effort": "high"})
    assert [o.type for o in first.output][0] == "reasoning"
    conv.extend(first.output)
    calls = [o for o in first.output if o.type == "function_call"]
    conv.extend({"type": "function_call_output", "call_id": c.call_id, "output": "sunny"} for c in calls)
    tm.reply = "It is sunny."
    second = client.responses.create(model=MODEL, input=conv, tools=[WEATHER], reasoning={"effort": "high"})
    assert second.status == "completed"
    replayed = _prompt(tm)
    client.responses.create(
        model=MODEL,
        input=conv[-len(calls) :],
        previous_response_id=first.id,
        tools=[WEATHER],
        reasoning={"effort": "high"},
    )
    assert replayed == _prompt(tm)


@pytest.mark.parametrize(
    "item",
    [
        {
            "type": "computer_call_output",
            "call_id": "c1",
            "output": {"type": "computer_screenshot", "image_url": "x"},
        },
        {"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "n", "arguments": "{}"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    ],
)
def test_unsupported_input_item_is_a_400_naming_it(
    tok: PreTrainedTokenizerFast, item: dict[str, Any]
) -> None:
    """vllm-project/vllm#55974: an input item type the server does not serve fell through to the
    chat renderer and came back as a 500 (``'role'``). Expected: a 400 in OpenAI's error shape
    whose ``param`` is the item's ``type`` field, and nothing queued. (``item_reference`` items
    are served: an unknown id is a 404, tested with the Responses reports.)"""
    tm = PromptTM(tok, reply="Done.")
    _, tc = make_client(tm)
    r = tc.post("/v1/responses", json={"model": MODEL, "input": [USER_ITEM, item]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "input[1].type" and item["type"] in err["message"]
    assert tm.received == []


def test_codex_shaped_request_is_served(tok: PreTrainedTokenizerFast) -> None:
    """earendil-works/pi#484: Codex always sends ``include: ["reasoning.encrypted_content"]`` with
    ``store: false``, plus ``prompt_cache_key``, ``text.verbosity``, ``reasoning.summary: "auto"``
    and ``parallel_tool_calls: false``. A server that rejects any of them breaks Codex. Expected:
    200 streamed and not (validated against the ``openai`` client's types), a function call
    item, and no reasoning text lost (the reasoning item's text is the model's)."""
    tm = PromptTM(tok, reply="Look it up.</think>" + CALL)
    _, tc = make_client(tm)
    body = {
        "instructions": "You are a coding agent.",
        "input": [USER_ITEM],
        "tools": [WEATHER],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "session-1",
        "text": {"verbosity": "medium"},
    }
    resp, events = responses_post(tc, body)
    kinds = [o["type"] for o in resp["output"]]
    assert kinds == ["reasoning", "function_call"]
    assert resp["output"][0]["content"][0]["text"] == "Look it up."
    done = events[-1]["response"]
    assert [o["type"] for o in done["output"]] == kinds


def test_arguments_done_event_names_its_item_by_id(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-openapi#545 (openai/openai-python#3801): ``response.function_call_arguments.done``
    carries no ``name``; clients take the function's name from the item its ``item_id`` names.
    Expected: that ``item_id`` is the ``function_call`` item announced by
    ``response.output_item.added`` at the same ``output_index``, and its final ``arguments`` are
    those of the item's ``output_item.done``."""
    tm = PromptTM(tok, reply="Checking." + CALL)
    _, tc = make_client(tm)
    _, events = responses_post(tc, {"input": "Weather in Paris?", "tools": [WEATHER]})
    added = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.added"}
    done = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    args_done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert len(args_done) == 1
    ev = args_done[0]
    assert added[ev["output_index"]]["type"] == "function_call"
    assert added[ev["output_index"]]["id"] == ev["item_id"] == done[ev["output_index"]]["id"]
    assert added[ev["output_index"]]["name"] == "get_weather"
    assert ev["arguments"] == done[ev["output_index"]]["arguments"]

"""The ``deepseek-recipe`` oracle and tool-call ids.

DeepSeek's converter renders a turn's parallel tool calls, and their results, sorted by call id,
while a served prompt keeps them in the order the model wrote them. Ids never reach the prompt,
so a test whose history carries server-chosen (random) ids would compare against a prompt whose
call order is left to chance. These tests pin both facts: the converter's raw prompt depends on
the ids' order, and the ``deepseek_recipe_testutil`` helpers' prompts do not -- they render the
written order, which is the converter's own prompt of the same history with ids that already sort
in written order (the oracle), for Chat Completions, Anthropic Messages and Responses bodies.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

recipe = pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import (  # noqa: E402
    ids_in_written_order,
    recipe_messages_prompt,
    recipe_prompt,
    recipe_responses_prompt,
)

MODEL = "DeepSeek-V4-Pro"
NAMES = ("get_weather", "get_time")  # written in this order: weather first
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}}
# (first call's id, second call's id): the first pair sorts in written order, the others reversed
# (server-style random ids included), so only the first renders the written order unaided.
IN_ORDER = ("call_a", "call_b")
REVERSED = [("call_b", "call_a"), ("call_9f3e0c", "call_1b7d22"), ("toolu_zz", "toolu_01")]


def _written_first(prompt: str) -> bool:
    """Whether ``prompt``'s last call block invokes ``get_weather`` before ``get_time``, and its
    results come in the same order (``r-weather`` before ``r-time``)."""
    calls = prompt[prompt.rindex("<｜DSML｜tool_calls>") :]
    return calls.index(f'invoke name="{NAMES[0]}"') < calls.index(
        f'invoke name="{NAMES[1]}"'
    ) and calls.index("r-weather") < calls.index("r-time")


def _chat(ids: tuple[str, str]) -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": '{"city": "Paris"}'}}
        for i, n in zip(ids, NAMES, strict=True)
    ]
    return {
        "messages": [
            {"role": "user", "content": "Weather and time in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": ids[0], "content": "r-weather"},
            {"role": "tool", "tool_call_id": ids[1], "content": "r-time"},
        ],
        "tools": [{"type": "function", "function": {"name": n, "parameters": PARAMS}} for n in NAMES],
    }


def _messages(ids: tuple[str, str]) -> dict[str, Any]:
    uses = [
        {"type": "tool_use", "id": i, "name": n, "input": {"city": "Paris"}}
        for i, n in zip(ids, NAMES, strict=True)
    ]
    results = [
        {"type": "tool_result", "tool_use_id": i, "content": r}
        for i, r in zip(ids, ("r-weather", "r-time"), strict=True)
    ]
    return {
        "messages": [
            {"role": "user", "content": "Weather and time in Paris?"},
            {"role": "assistant", "content": uses},
            {"role": "user", "content": results},
        ],
        "tools": [{"name": n, "input_schema": PARAMS} for n in NAMES],
    }


def _responses(ids: tuple[str, str]) -> dict[str, Any]:
    calls = [
        {"type": "function_call", "id": f"fc_{k}", "call_id": i, "name": n, "arguments": '{"city": "Paris"}'}
        for k, (i, n) in enumerate(zip(ids, NAMES, strict=True))
    ]
    outputs = [
        {"type": "function_call_output", "call_id": i, "output": r}
        for i, r in zip(ids, ("r-weather", "r-time"), strict=True)
    ]
    return {
        "input": [{"role": "user", "content": "Weather and time in Paris?"}, *calls, *outputs],
        "tools": [{"type": "function", "name": n, "parameters": PARAMS} for n in NAMES],
        "reasoning": {"effort": "none"},
    }


def _raw_chat(body: dict[str, Any]) -> str:
    b = {**copy.deepcopy(body), "model": MODEL, "thinking": {"type": "disabled"}, "reasoning_effort": "low"}
    conv = recipe.ChatCompletionRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt


def _raw_messages(body: dict[str, Any]) -> str:
    b = {**copy.deepcopy(body), "model": MODEL, "max_tokens": 1, "thinking": {"type": "disabled"}}
    conv = recipe.MessagesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt


def _raw_responses(body: dict[str, Any]) -> str:
    conv = recipe.ResponsesRequest({**copy.deepcopy(body), "model": MODEL}).convert(
        recipe.ConversionOptions(default_thinking_mode=False)
    )
    return recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt


APIS = {
    "chat": (_chat, _raw_chat, lambda b: recipe_prompt(b, thinking=False)),
    "messages": (_messages, _raw_messages, lambda b: recipe_messages_prompt(b, thinking=False)),
    "responses": (_responses, _raw_responses, lambda b: recipe_responses_prompt(b, thinking=False)),
}


@pytest.mark.parametrize("api", list(APIS))
@pytest.mark.parametrize("ids", REVERSED)
def test_raw_converter_orders_parallel_calls_by_id_and_helpers_keep_written_order(
    api: str, ids: tuple[str, str]
) -> None:
    """The converter's raw prompt of two parallel calls (and their results) depends on how their
    ids sort: with ids sorting in written order it renders the written order, with ids sorting the
    other way it renders them swapped -- the flake. The testutil helper renders, for either id
    pair, exactly the raw converter's prompt of the in-order ids (oracle: the converter itself on
    a history whose ids already sort in written order)."""
    build, raw, helper = APIS[api]
    want = raw(build(IN_ORDER))
    assert _written_first(want)
    swapped = raw(build(ids))
    assert not _written_first(swapped)  # the converter sorted by id: the written order is lost
    assert swapped != want
    assert helper(build(ids)) == helper(build(IN_ORDER)) == want


@pytest.mark.parametrize("api", list(APIS))
def test_renaming_keeps_pairing_and_the_callers_body(api: str) -> None:
    """``ids_in_written_order`` leaves the caller's body untouched, renames every reference of an
    id alike (a call and its result still pair, the converter takes the body) and keeps the old
    id at the end of the new one, so a converter error naming an id still names it."""
    build = APIS[api][0]
    body = build(REVERSED[1])
    before = copy.deepcopy(body)
    out = ids_in_written_order(body)
    assert body == before
    assert out != body
    text = repr(out)
    assert text.count("call_000000_call_9f3e0c") == 2 and text.count("call_000001_call_1b7d22") == 2


def test_converter_error_still_names_the_unanswered_id() -> None:
    """A Messages history whose second parallel ``tool_use`` goes unanswered: DeepSeek's converter
    refuses it naming that id, through the helper too."""
    body = _messages(("toolu_zz", "toolu_01"))
    body["messages"][2]["content"] = body["messages"][2]["content"][:1]
    with pytest.raises(recipe.ConversionError, match="toolu_01"):
        _raw_messages(body)
    with pytest.raises(recipe.ConversionError, match="toolu_01"):
        recipe_messages_prompt(body)

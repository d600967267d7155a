"""More of vLLM's OpenAI-server tests (``tests/entrypoints/openai/`` of vllm-project/vllm), their
model-independent assertions replayed on the embedded DeepSeek-V4 model's ``more_bugs_server``
(the first set is ``test_vllm_suite_port``).

Each test names the vLLM test it comes from. Faults they showed here:

* A streamed chat request with ``return_token_ids`` was refused (400 on ``stream``); vLLM streams
  the prompt's ids at the top of each choice's first chunk and the generated ids as each chunk's
  choice ``token_ids``.
* ``/v1/responses`` refused ``include: ["message.output_text.logprobs"]`` and ``top_logprobs``
  (400); vLLM and OpenAI return the answer's logprobs on the message's ``output_text`` part.
* With ``tool_choice`` ``"required"`` / named, a reply cut by ``max_completion_tokens`` before its
  block began had the grammar's separator newline as ``content``.
* A missing ``response_format.json_schema`` and a negative prompt id were 400s without vLLM's
  words ("must be provided", "greater than or equal to 0").

Oracles: the same request not streamed (greedy), the embedded model's tokenizer, the usage counts
and the vLLM tests' stated expectations.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import requests
from public_bugs_testutil import MODEL, post, sse
from server_fixture import ServerHandle

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@pytest.fixture(scope="module")
def server(more_bugs_server: ServerHandle) -> ServerHandle:
    """The session's embedded-model server (conftest ``more_bugs_server``)."""
    return more_bugs_server


def test_chat_stream_return_token_ids(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/basic/test_return_token_ids.py::test_chat_completion_with_emoji_and_token_ids
    (its streamed half) -- the first chunk has the prompt's ids at its top level (decoding to the
    non-streamed answer's prompt), no later chunk has the key; the choices' ``token_ids`` joined
    are the non-streamed answer's ``token_ids`` (greedy), as many as its ``completion_tokens``;
    with ``n: 2`` each choice's first chunk has the prompt's ids and each choice's ids are whole.
    Without ``return_token_ids`` no chunk has either key."""
    msgs = [
        {"role": "system", "content": "You like to use emojis in your responses."},
        {"role": "user", "content": "Repeat after me: I love cats 🐱"},
    ]
    body = {"model": MODEL, "messages": msgs, "max_tokens": 8, "temperature": 0, "return_token_ids": True}
    whole = post(server, CHAT, body).json()
    chunks = sse(server, CHAT, body)
    assert mtok.decode(chunks[0]["prompt_token_ids"]) == mtok.decode(whole["prompt_token_ids"])
    assert all("prompt_token_ids" not in c for c in chunks[1:]), chunks
    got = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids", [])]
    assert got == whole["choices"][0]["token_ids"] and len(got) == whole["usage"]["completion_tokens"]
    assert all(ch.get("token_ids") != [] for c in chunks for ch in c["choices"])  # no empty lists

    sampled = {**body, "n": 2, "temperature": 1.0, "seed": 7, "stream_options": {"include_usage": True}}
    chunks = sse(server, CHAT, sampled)
    per: dict[int, list[int]] = {0: [], 1: []}
    firsts = 0
    for c in chunks:
        if "prompt_token_ids" in c:
            firsts += 1
            assert c["prompt_token_ids"] == whole["prompt_token_ids"]
            assert c["choices"][0]["delta"].get("role") == "assistant"
        for ch in c["choices"]:
            per[ch["index"]] += ch.get("token_ids", [])
    assert firsts == 2
    assert len(per[0]) + len(per[1]) == chunks[-1]["usage"]["completion_tokens"], per

    plain = sse(server, CHAT, {**body, "return_token_ids": False})
    assert all("prompt_token_ids" not in c for c in plain)
    assert all("token_ids" not in ch for c in plain for ch in c["choices"])


def _events(server: ServerHandle, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``data:`` payloads of a streamed ``/v1/responses`` answer."""
    r = requests.post(server.url + "/v1/responses", json={**body, "stream": True}, stream=True, timeout=120)
    assert r.status_code == 200, r.text
    return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith(b"data: ")]


def test_responses_logprobs(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/responses/test_basic.py::test_logprobs -- with
    ``include: ["message.output_text.logprobs"]`` and ``top_logprobs: 5`` the message's
    ``output_text`` has one logprob entry per answer token, each with 5 ``top_logprobs``: the
    tokens and logprobs ``/v1/chat/completions`` gives the same greedy request. Streamed, the
    deltas' logprobs joined are those of ``output_text.done`` and of the final response. Without
    the ``include`` (``top_logprobs`` alone, vLLM's rule) the list is empty; a ``top_logprobs``
    past the bound is a 400 naming it; ``model`` may be left out."""
    base: dict[str, Any] = {"input": "What is 13 * 24?", "max_output_tokens": 5, "temperature": 0}
    body = {**base, "include": ["message.output_text.logprobs"], "top_logprobs": 5}
    resp = post(server, "/v1/responses", body)
    assert resp.status_code == 200, resp.text
    part = resp.json()["output"][-1]["content"][0]
    chat = post(
        server,
        CHAT,
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": base["input"]}],
            "max_tokens": 5,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 5,
        },
    ).json()
    want = chat["choices"][0]["logprobs"]["content"]
    assert len(part["logprobs"]) == resp.json()["usage"]["output_tokens"] == len(want) == 5
    for got, ref in zip(part["logprobs"], want):
        assert got["token"] == ref["token"] and got["bytes"] == ref["bytes"]
        assert got["logprob"] == pytest.approx(ref["logprob"], abs=1e-4)
        assert [t["token"] for t in got["top_logprobs"]] == [t["token"] for t in ref["top_logprobs"]]
        assert len(got["top_logprobs"]) == 5
    assert "".join(e["token"] for e in part["logprobs"]) == part["text"]

    events = _events(server, body)
    deltas = [lp for e in events if e["type"] == "response.output_text.delta" for lp in e["logprobs"]]
    done = next(e for e in events if e["type"] == "response.output_text.done")
    final = events[-1]["response"]["output"][-1]["content"][0]["logprobs"]
    assert (
        [d["token"] for d in deltas] == [d["token"] for d in done["logprobs"]] == [d["token"] for d in final]
    )
    assert [d["token"] for d in final] == [d["token"] for d in part["logprobs"]]

    plain = post(server, "/v1/responses", {**base, "top_logprobs": 5}).json()
    assert plain["output"][-1]["content"][0]["logprobs"] == []
    bad = post(server, "/v1/responses", {**body, "top_logprobs": 21})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "top_logprobs", bad.text


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city", "unit"],
            },
        },
    }
]


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_current_weather"}}]
)
def test_forced_tool_choice_cut_by_max_tokens(server: ServerHandle, tool_choice: Any) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/chat_completion/test_completion_with_function_calling.py::test_max_tokens_with_tool_choice_required
    -- a forced tool choice cut by ``max_completion_tokens`` before its call began has
    ``finish_reason: "length"``, no ``tool_calls`` and empty content (the grammar's separator
    newlines are no answer text), streamed or not."""
    msgs = [{"role": "user", "content": "What is the weather in Berlin, in fahrenheit?"}]
    for limit in (1, 2):
        body = {
            "model": MODEL,
            "messages": msgs,
            "tools": TOOLS,
            "tool_choice": tool_choice,
            "temperature": 0,
            "max_completion_tokens": limit,
        }
        choice = post(server, CHAT, body).json()["choices"][0]
        assert choice["finish_reason"] == "length", choice
        assert not choice["message"]["tool_calls"] and not choice["message"]["content"], (limit, choice)
        chunks = sse(server, CHAT, body)
        deltas = [ch for c in chunks for ch in c["choices"]]
        assert [d["finish_reason"] for d in deltas if d["finish_reason"]] == ["length"]
        assert not any(d["delta"].get("content") or d["delta"].get("tool_calls") for d in deltas), deltas


def test_request_errors_in_vllms_words(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/completion/test_completion_error.py
    (::test_json_schema_response_format_missing_schema, ::test_negative_prompt_token_ids_nested,
    ::test_negative_prompt_token_ids_flat) -- ``response_format: {"type": "json_schema"}``
    without ``json_schema`` is a 400 matching ``json_schema.*must be provided``; a negative prompt
    id, flat or nested, a 400 saying "greater than or equal to 0"; on chat too for the first."""
    for path, extra in (
        (COMPLETIONS, {"prompt": "x"}),
        (CHAT, {"messages": [{"role": "user", "content": "x"}]}),
    ):
        body = {"model": MODEL, "max_tokens": 2, "response_format": {"type": "json_schema"}, **extra}
        r = post(server, path, body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "response_format", r.text
        assert re.search("json_schema.*must be provided", r.json()["error"]["message"]), r.text
    for prompt in ([[-1]], [-1], [5, -2]):
        r = post(server, COMPLETIONS, {"model": MODEL, "max_tokens": 2, "prompt": prompt})
        assert r.status_code == 400 and "greater than or equal to 0" in r.json()["error"]["message"], r.text


def test_thinking_token_budget_checked(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/chat_completion/test_thinking_token_budget_validation.py
    (all six) -- ``thinking_token_budget`` -2, 0.6, 10.5 is a 400 naming it, on chat and
    completions; -1 (unlimited) and a budget with no reasoning block to bound (thinking off,
    completions) are served. In thinking mode a budget is served too (it is enforced:
    ``test_thinking_budget_chat``), and so is -1."""
    msgs = [{"role": "user", "content": "hello"}]
    for path, extra in ((CHAT, {"messages": msgs}), (COMPLETIONS, {"prompt": "hello"})):
        base = {"model": MODEL, "max_tokens": 2, **extra}
        for bad in (-2, 0.6, 10.5):
            r = post(server, path, {**base, "thinking_token_budget": bad})
            assert r.status_code == 400 and r.json()["error"]["param"] == "thinking_token_budget", (
                bad,
                r.text,
            )
        for ok in (-1, 0, 10):
            assert post(server, path, {**base, "thinking_token_budget": ok}).status_code == 200, (path, ok)
    think = {"model": MODEL, "messages": msgs, "max_tokens": 2, "chat_template_kwargs": {"thinking": True}}
    assert post(server, CHAT, {**think, "thinking_token_budget": 5}).status_code == 200
    assert post(server, CHAT, {**think, "thinking_token_budget": -1}).status_code == 200

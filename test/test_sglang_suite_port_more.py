"""More of SGLang's public server test suite: the model-independent assertions of its constrained
decoding, penalty, reasoning, structural-tag, tool-choice, metrics and input-embeddings tests,
replayed on the embedded DeepSeek-V4 model's ``more_bugs_server`` (``--context-length 1024
--enable-cache-report``) and, for ``/metrics``, the fake-model ``secured_fake_server``
(``--enable-metrics --api-key``).

Each test names the SGLang test it comes from (``sgl-project/sglang:path::test_name``). Those
assertions that already had a test here are not repeated.

Fault found and fixed: ``/metrics`` lacked ``sglang:num_grammar_queue_reqs`` and
``sglang:spec_accept_length``, two of the "essential metrics" SGLang's metrics test requires;
they (and ``spec_accept_rate``) are now exported at 0, SGLang's values on a server without a
grammar queue or speculative decoding.

Deliberately not matched: a thinking-mode answer that is all reasoning has ``content: ""`` here
(SGLang's ``null``); the tests here only read ``reasoning_content``, as SGLang's do.

Oracles: Python's ``re`` and ``json`` on the constraints the tests state, the same request's
non-streamed answer for its streamed form, ``prometheus_client``'s own text parser, and the SGLang
tests' stated expectations.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from public_bugs_testutil import MODEL, generate, post, sse
from server_fixture import ServerHandle

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Hello"}]


def test_regex_anchors_ebnf_n3_and_invalid_schema(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang:python/sglang/test/kits/regex_constrained_kit.py::
    test_regex_generate_email, sgl-project/sglang:python/sglang/test/kits/ebnf_constrained_kit.py::
    test_ebnf_generate_greeting and ::test_ebnf_generate_number, and
    sgl-project/sglang:python/sglang/test/kits/json_constrained_kit.py::test_json_invalid: a regex
    with ``^``/``$`` anchors is accepted and the text is exactly its one match; an EBNF request
    with ``n: 3`` answers a list of 3 texts, each matching the grammar; a ``json_schema`` that is
    no JSON is a 400 naming the field."""
    r = generate(
        more_bugs_server,
        {
            "text": "Generate an email address:",
            "sampling_params": {"temperature": 0, "max_new_tokens": 32, "regex": r"^user@example\.com$"},
            "logprob_start_len": 0,
        },
    )
    assert r["text"] == "user@example.com" and r["meta_info"]["finish_reason"]["type"] == "stop", r
    for ebnf, pattern in (
        ('root ::= "Hello" | "Hi" | "Hey"', r"^(Hello|Hi|Hey)$"),
        ("root ::= digit digit digit\ndigit ::= [0-9]", r"^\d{3}$"),
    ):
        out = generate(
            more_bugs_server,
            {
                "text": "Generate:",
                "sampling_params": {"temperature": 0.5, "max_new_tokens": 16, "n": 3, "ebnf": ebnf},
            },
        )
        assert isinstance(out, list) and len(out) == 3, out
        for item in out:
            assert re.match(pattern, item["text"].strip()), (ebnf, item["text"])
    bad = post(
        more_bugs_server,
        "/generate",
        {"text": "x", "sampling_params": {"max_new_tokens": 4, "json_schema": "INVALID"}},
    )
    assert bad.status_code == 400, bad.text[:300]
    assert "json_schema" in bad.json()["error"]["message"]


def test_penalty_mixed_concurrent(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang:test/srt/test_penalty.py::test_penalty_mixed: concurrent requests with
    frequency / presence penalties (negative ones too), ``min_new_tokens`` and explicit ``null``
    penalties, with logprobs, all answer 200; ``min_new_tokens`` is honoured (no earlier stop) and
    the logprob lists have one entry per prompt / output token."""
    prompt = "What is the answer for 1 + 1 = ?"
    args: list[dict[str, Any]] = [
        {},
        {"frequency_penalty": 2},
        {"presence_penalty": 1},
        {"min_new_tokens": 6},
        {"presence_penalty": -0.3, "frequency_penalty": 1.3, "min_new_tokens": 6},
        {"presence_penalty": 0.3, "frequency_penalty": -1.3, "min_new_tokens": 6},
        {"frequency_penalty": None, "presence_penalty": None},
        {"repetition_penalty": 1.3},
    ]

    def run(sp: dict[str, Any]) -> tuple[dict[str, Any], requests.Response]:
        body = {
            "text": prompt,
            "sampling_params": {"max_new_tokens": 6, "n": 1, **sp},
            "return_logprob": True,
            "top_logprobs_num": 5,
            "return_text_in_logprobs": True,
            "logprob_start_len": 0,
        }
        return sp, post(more_bugs_server, "/generate", body)

    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(run, args))
    for sp, r in results:
        assert r.status_code == 200, (sp, r.text[:300])
        m = r.json()["meta_info"]
        assert len(m["input_token_logprobs"]) == m["prompt_tokens"]
        assert len(m["output_token_logprobs"]) == len(m["output_top_logprobs"]) == m["completion_tokens"]
        if "min_new_tokens" in sp:
            assert m["completion_tokens"] == 6, (sp, m["finish_reason"])


def _stream_parts(server: ServerHandle, body: dict[str, Any]) -> tuple[list[str], list[str], list[Any]]:
    """The streamed chat answer's ``reasoning_content`` and ``content`` deltas (non-empty ones, in
    order) and its finish reasons."""
    reasoning, content, finishes = [], [], []
    for e in sse(server, CHAT, body):
        for c in e["choices"]:
            if c["delta"].get("reasoning_content"):
                reasoning.append(c["delta"]["reasoning_content"])
            if c["delta"].get("content"):
                content.append(c["delta"]["content"])
            if c.get("finish_reason"):
                finishes.append(c["finish_reason"])
    return reasoning, content, finishes


def test_enable_thinking_and_separate_reasoning(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang:test/srt/openai_server/features/test_enable_thinking.py::
    test_chat_completion_with_reasoning, ::test_chat_completion_without_reasoning,
    ::test_stream_chat_completion_without_reasoning and
    sgl-project/sglang:test/srt/openai_server/features/test_reasoning_content.py::
    test_nonstreaming_separate_reasoning_false and
    ::test_streaming_separate_reasoning_true_stream_reasoning_false:
    ``enable_thinking: false`` gives ``reasoning_content: null`` and a stream without reasoning
    deltas but with content; ``true`` gives a ``reasoning_content``; ``separate_reasoning: false``
    gives it all as content; ``stream_reasoning: false`` sends no reasoning before one chunk with
    the whole of it (the non-streamed answer's)."""
    base = {"model": MODEL, "messages": HELLO, "temperature": 0, "max_tokens": 6, "separate_reasoning": True}
    off = {**base, "chat_template_kwargs": {"enable_thinking": False}}
    r = post(more_bugs_server, CHAT, off)
    assert r.status_code == 200, r.text[:300]
    msg = r.json()["choices"][0]["message"]
    assert msg["reasoning_content"] is None and msg["content"], msg
    reasoning, content, _ = _stream_parts(more_bugs_server, off)
    assert reasoning == [] and "".join(content) == msg["content"]

    on = {**base, "chat_template_kwargs": {"enable_thinking": True}}
    r = post(more_bugs_server, CHAT, on)
    assert r.status_code == 200, r.text[:300]
    thought = r.json()["choices"][0]["message"]["reasoning_content"]
    assert thought, r.json()  # greedy, 6 tokens: no </think> from this random model in them
    msg = post(more_bugs_server, CHAT, {**on, "separate_reasoning": False}).json()["choices"][0]["message"]
    assert not msg["reasoning_content"] and msg["content"] == thought, msg

    reasoning, content, finishes = _stream_parts(more_bugs_server, {**on, "stream_reasoning": False})
    assert reasoning == [thought] and content == [] and finishes == ["length"], (reasoning, content)
    reasoning, _, _ = _stream_parts(more_bugs_server, on)
    assert len(reasoning) > 1 and "".join(reasoning) == thought


def test_structural_tag_const_string(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang:test/srt/openai_server/features/test_structural_tag.py::
    test_stag_constant_str_openai: ``response_format`` ``{"type": "structural_tag", "format":
    {"type": "const_string", "value": V}}`` makes the content exactly ``V`` (and the streamed
    content too), whatever the model would say."""
    answer = "The capital of France is Berlin."
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Introduce the capital of France."}],
        "temperature": 0,
        "max_tokens": 64,
        "response_format": {"type": "structural_tag", "format": {"type": "const_string", "value": answer}},
    }
    r = post(more_bugs_server, CHAT, body)
    assert r.status_code == 200, r.text[:300]
    c = r.json()["choices"][0]
    assert c["message"]["content"] == answer and c["finish_reason"] == "stop", c
    _, content, finishes = _stream_parts(more_bugs_server, body)
    assert "".join(content) == answer and finishes == ["stop"]


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["unit"],
        },
    },
}
POKEMON = {
    "type": "function",
    "function": {
        "name": "get_pokemon_info",
        "description": "get detailed information about a pokemon given its name",
        "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
}


def test_tool_choice_streams_and_unknown_function(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang:test/srt/openai_server/function_call/test_openai_function_calling.py::
    test_streaming_multiple_choices_finish_reason and ::test_function_calling_streaming_no_tool_call,
    sgl-project/sglang:test/srt/openai_server/function_call/test_tool_choice.py::
    test_tool_choice_specific_function_streaming and ::test_error_handling_invalid_tool_choice:
    streamed with ``n: 2`` and a named function, each index has exactly one finish chunk and its
    first tool-call delta names that function; with ``tool_choice: "none"`` no chunk carries
    ``tool_calls``; a named function that is not in ``tools`` is a 400 naming ``tool_choice``."""
    messages = [{"role": "user", "content": "What is the weather like in Los Angeles?"}]
    named = {"type": "function", "function": {"name": "get_current_weather"}}
    body = {"model": MODEL, "messages": messages, "tools": [POKEMON, WEATHER], "max_tokens": 64}
    events = sse(more_bugs_server, CHAT, {**body, "tool_choice": named, "temperature": 0.8, "n": 2})
    finishes: dict[int, int] = {0: 0, 1: 0}
    first_name: dict[int, str] = {}
    for e in events:
        for c in e["choices"]:
            if c.get("finish_reason") is not None:
                finishes[c["index"]] += 1
            for call in c["delta"].get("tool_calls") or []:
                if call.get("function", {}).get("name"):
                    first_name.setdefault(c["index"], call["function"]["name"])
    assert finishes == {0: 1, 1: 1}, finishes
    assert first_name == {0: "get_current_weather", 1: "get_current_weather"}, first_name

    events = sse(more_bugs_server, CHAT, {**body, "tool_choice": "none", "temperature": 0, "max_tokens": 8})
    assert events and all(c["delta"].get("tool_calls") is None for e in events for c in e["choices"])

    bad = {"type": "function", "function": {"name": "nonexistent_function"}}
    r = post(more_bugs_server, CHAT, {**body, "tool_choice": bad})
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "tool_choice" and "nonexistent_function" in err["message"]


def test_input_embeds_is_a_clean_400(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang:test/srt/test_input_embeddings.py::test_embedding_based_response (a
    feature this server does not have): ``input_embeds`` is a 400 in SGLang's error shape naming
    the field, and a text request with the same extra ``model`` field still answers."""
    r = post(
        more_bugs_server,
        "/generate",
        {"model": MODEL, "input_embeds": [[0.1] * 8] * 3, "sampling_params": {"max_new_tokens": 2}},
    )
    assert r.status_code == 400, r.text[:300]
    assert (
        set(r.json()["error"]) >= {"message", "type", "code"}
        and "input_embeds" in r.json()["error"]["message"]
    )
    ok = generate(
        more_bugs_server,
        {
            "model": MODEL,
            "text": "The capital of France is",
            "sampling_params": {"temperature": 0, "max_new_tokens": 2},
        },
    )
    assert ok["meta_info"]["completion_tokens"] == 2


def test_metrics_essential_names(secured_fake_server: ServerHandle) -> None:
    """sgl-project/sglang:test/srt/test_metrics.py::test_metrics_1gpu: after ``/health_generate``
    and a streamed ``/generate``, ``/metrics`` has every one of SGLang's essential metrics
    (``num_grammar_queue_reqs`` and ``spec_accept_length`` included), the served model's
    ``model_name`` label and histogram ``_sum`` / ``_count`` / ``_bucket`` samples."""
    from prometheus_client.parser import text_string_to_metric_families

    server = secured_fake_server
    assert (
        requests.get(server.url + "/health_generate", headers=server.headers(), timeout=60).status_code == 200
    )
    body = {"text": "The capital of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
    with requests.post(
        server.url + "/generate",
        json={**body, "stream": True},
        headers=server.headers(),
        stream=True,
        timeout=60,
    ) as r:
        assert r.status_code == 200
        for _ in r.iter_lines():
            pass
    resp = requests.get(server.url + "/metrics", headers=server.headers(), timeout=30)
    assert resp.status_code == 200
    text = resp.text
    samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_used_tokens",
        "sglang:token_usage",
        "sglang:gen_throughput",
        "sglang:num_queue_reqs",
        "sglang:num_grammar_queue_reqs",
        "sglang:cache_hit_rate",
        "sglang:spec_accept_length",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:cached_tokens_total",
        "sglang:num_requests_total",
        "sglang:time_to_first_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:e2e_request_latency_seconds",
    ):
        assert name in text, name  # SGLang's check: the name in the exposition text
    assert (
        samples["sglang:num_grammar_queue_reqs"].value == 0
        and samples["sglang:spec_accept_length"].value == 0
    )
    assert 'model_name="fake-v4"' in text
    assert "_sum{" in text and "_count{" in text and "_bucket{" in text
    assert samples["sglang:num_running_reqs"].labels == {"model_name": "fake-v4"}

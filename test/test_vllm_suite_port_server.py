"""vLLM's server-level tests (``tests/entrypoints/openai/`` of vllm-project/vllm: the serving-chat
unit tests, async tokenization, the OpenAPI schema, chat-template flags, prompt embeddings, the
Responses store) replayed, where their assertions do not depend on a model, on the embedded
DeepSeek-V4 model's ``more_bugs_server`` (``--context-length 1024``). The earlier sets are
``test_vllm_suite_port`` and ``test_vllm_suite_port_more``.

Each test names the vLLM test it comes from. Faults they showed here:

* ``POST /v1/responses/{id}/cancel`` (OpenAI's and vLLM's route) was not served: FastAPI's bare 404
  ``{"detail": "Not Found"}`` for every id. It is now OpenAI's refusal for a response that was not
  run in the background (a 400 saying it cannot be cancelled; the stored response unchanged), and
  a 404 in the error shape for an unknown id.
* A completions body with ``prompt_embeds`` and no ``prompt`` (vLLM's way to send embeddings) was
  a 400 about the missing ``prompt``; the refusal now names ``prompt_embeds`` as with a ``prompt``.
* ``/openapi.json`` documented no request body for any OpenAI route (they read their body
  themselves) and no error response, so a schema-driven client or fuzzer (vLLM's test uses
  schemathesis) had nothing to build requests from; the routes' models are now documented.
* ``model: ""`` was a 404 ("The model `` does not exist"); vLLM serves it with the served model,
  as an omitted ``model`` is served here.

Oracles: the server's context length (the fixture's flag) and the usage counts it reports, the ids
of the same conversation rendered with and without the generation prompt (one a prefix of the
other), ``/v1/tokenize`` of the same body, the ``jsonschema`` package's validation against the
document's own ``/openapi.json`` and the vLLM tests' stated expectations.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import pytest
import referencing
import requests
from public_bugs_testutil import MODEL, post
from referencing.jsonschema import DRAFT202012
from server_fixture import ServerHandle

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
CONTEXT_LEN = 1024  # the fixture's --context-length


@pytest.fixture(scope="module")
def server(more_bugs_server: ServerHandle) -> ServerHandle:
    """The session's embedded-model server (conftest ``more_bugs_server``)."""
    return more_bugs_server


def _error(r: requests.Response, status: int) -> dict[str, Any]:
    """The ``error`` object of an OpenAI-shaped error answer with HTTP ``status``."""
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == status and body["error"]["message"], body
    return body["error"]


def test_responses_cancel_of_a_stored_response(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/responses/test_store.py::TestServingCancelIntegration
    -- cancelling a finished (not background) response is an error whose message says it cannot be
    cancelled, and leaves the stored response as it was; an unknown id is a 404 in the error shape
    (vLLM: ``error.code == 404``)."""
    made = post(
        server, "/v1/responses", {"model": MODEL, "input": "Hi", "max_output_tokens": 2, "temperature": 0}
    )
    assert made.status_code == 200, made.text
    rid = made.json()["id"]
    err = _error(post(server, f"/v1/responses/{rid}/cancel", {}), 400)
    assert "cannot cancel" in err["message"].lower(), err
    kept = requests.get(f"{server.url}/v1/responses/{rid}", timeout=30)
    assert kept.status_code == 200 and kept.json() == made.json()
    err = _error(post(server, "/v1/responses/resp_ghost/cancel", {}), 404)
    assert "resp_ghost" in err["message"]
    assert requests.delete(f"{server.url}/v1/responses/{rid}", timeout=30).status_code == 200
    _error(post(server, f"/v1/responses/{rid}/cancel", {}), 404)


def test_prompt_embeds_refused_by_name(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/completion/test_completion_with_prompt_embeds.py
    -- vLLM takes ``prompt_embeds`` in place of ``prompt``; this server has no embedding input, so
    the request is a clean 400 whose ``param`` and message name ``prompt_embeds`` -- with or
    without a ``prompt`` (not a complaint about the missing ``prompt``) -- and the server then
    answers a plain request."""
    for extra in ({}, {"prompt": "Hello"}, {"prompt": ""}):
        body = {"model": MODEL, "prompt_embeds": "AAAAAA==", "max_tokens": 2, **extra}
        err = _error(post(server, COMPLETIONS, body), 400)
        assert err["param"] == "prompt_embeds" and "prompt_embeds" in err["message"], (extra, err)
    ok = post(server, COMPLETIONS, {"model": MODEL, "prompt": "Hello", "max_tokens": 1})
    assert ok.status_code == 200, ok.text


def test_default_max_tokens_fill_the_context(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/chat_completion/test_serving_chat.py::test_serving_chat_should_set_correct_max_tokens
    and ::test_serving_chat_truncate_prompt_tokens_max_token_accounting -- a chat request without
    ``max_tokens`` may generate up to the context length minus its prompt; with
    ``truncate_prompt_tokens`` the budget is counted from the truncated prompt (vLLM's regression:
    from the untruncated one). ``ignore_eos`` makes the budget the only limit; a smaller
    ``max_tokens`` is kept."""
    base = {"model": MODEL, "temperature": 0, "ignore_eos": True}
    short = {**base, "messages": [{"role": "user", "content": "hello " * 1000}]}
    cases = (
        (short, None),
        (
            {
                **base,
                "messages": [{"role": "user", "content": "hello " * 1100}],
                "truncate_prompt_tokens": 1018,
            },
            1018,
        ),
    )
    for body, truncated_to in cases:
        r = post(server, CHAT, body)
        assert r.status_code == 200, r.text
        usage, choice = r.json()["usage"], r.json()["choices"][0]
        if truncated_to is not None:
            assert usage["prompt_tokens"] == truncated_to
        assert CONTEXT_LEN - 40 < usage["prompt_tokens"] < CONTEXT_LEN, usage
        assert usage["completion_tokens"] == CONTEXT_LEN - usage["prompt_tokens"], usage
        assert choice["finish_reason"] == "length"
    r = post(server, CHAT, {**short, "max_tokens": 3})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text


def test_concurrent_prompts_with_and_without_truncation(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/test_async_tokenization.py::test_with_and_without_truncate
    and ::test_healthcheck_response_time -- ten concurrent requests of a prompt longer than the
    context (vLLM: 10,000 words; here 2,000, twice the context), half with ``truncate_prompt_tokens``, on both routes: no 5xx; the truncated ones are
    answered with exactly that many prompt tokens, the others are 400s. While a batch of very long
    prompts is in flight, ``/health`` answers 200 (vLLM bounds its response time to 0.1 s; here
    the order is checked, not a time)."""
    long_text = " ".join(["A"] * 2_000)

    def one(path: str, truncate: int | None) -> tuple[int | None, requests.Response]:
        body: dict[str, Any] = {"model": MODEL, "max_tokens": 2, "temperature": 0}
        if path == COMPLETIONS:
            body["prompt"] = long_text
        else:
            body["messages"] = [{"role": "user", "content": long_text}]
        if truncate is not None:
            body["truncate_prompt_tokens"] = truncate
        return truncate, post(server, path, body)

    plan = [(p, t) for p in (COMPLETIONS, CHAT) for t in [100] * 5 + [None] * 5]
    random.Random(0).shuffle(plan)
    with ThreadPoolExecutor(len(plan)) as pool:
        answers = list(pool.map(lambda a: one(*a), plan))
    for truncate, r in answers:
        if truncate is None:
            _error(r, 400)
        else:
            assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == truncate, r.text

    # /health answers 200 while four requests of huge prompts are in flight: their bodies' last
    # byte is held back until /health has answered, so none of them can have been answered yet
    # (state, not a time bound); then they complete without a 5xx
    huge = json.dumps({"model": MODEL, "prompt": " ".join(["A"] * 30_000), "max_tokens": 2}).encode()
    release = threading.Event()
    started = threading.Semaphore(0)

    def held_body() -> Iterator[bytes]:
        yield huge[:-1]
        started.release()
        assert release.wait(120), "never released"
        yield huge[-1:]

    def send_huge() -> requests.Response:
        headers = {"Content-Type": "application/json"}  # chunked: the body is a generator
        return requests.post(server.url + COMPLETIONS, data=held_body(), headers=headers, timeout=120)

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(send_huge) for _ in range(4)]
        try:
            for _ in futures:
                assert started.acquire(timeout=60), "a huge request never started its upload"
            health = requests.get(f"{server.url}/health", timeout=30)
            assert not any(f.done() for f in futures)  # all four still in flight
        finally:
            release.set()
        codes = [f.result().status_code for f in futures]
    assert health.status_code == 200, health.text
    assert all(c < 500 for c in codes), codes


#: Documented routes not fuzzed: they change the shared server's state (pause, flush, weights,
#: profiles, logging, aborts) or store files and batches.
_STATEFUL = {
    "/abort_request",
    "/flush_cache",
    "/pause_generation",
    "/continue_generation",
    "/update_weights_from_disk",
    "/start_profile",
    "/stop_profile",
    "/configure_logging",
    "/v1/files",
    "/v1/batches",
}


def _body_validator(spec: dict[str, Any], path: str) -> jsonschema.Draft202012Validator:
    """A JSON Schema 2020-12 validator (the ``jsonschema`` package) of the documented request body
    of ``POST path``, its ``#/components/...`` references resolved in ``spec``."""
    schema = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    registry = referencing.Registry().with_resource("urn:doc", DRAFT202012.create_resource(spec))
    rebased = json.loads(json.dumps(schema).replace('"#/components/', '"urn:doc#/components/'))
    return jsonschema.Draft202012Validator(rebased, registry=registry)


def test_openapi_document_and_routes(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/test_openai_schema.py::test_openapi_stateless --
    ``/openapi.json`` is an OpenAPI 3 document whose schemas are valid JSON Schema; the OpenAI
    routes document their JSON request bodies (vLLM's and SGLang's documents do: schemathesis
    builds its requests from them) and an error response; the server agrees with its document
    (a body the schema accepts is served, one it rejects is a 400); and every documented ``POST``
    route (the stateful ones left out) answers malformed bodies -- empty, not an object, wrongly
    typed fields, invalid JSON -- with a 4xx, never a 5xx (schemathesis' "not a server error")."""
    spec = requests.get(f"{server.url}/openapi.json", timeout=30).json()
    assert spec["openapi"].startswith("3.")
    for schema in spec["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    paths = spec["paths"]
    user = [{"role": "user", "content": "hi"}]
    cases = {
        CHAT: ({"model": MODEL, "messages": user, "max_tokens": 1}, {"model": MODEL}),
        COMPLETIONS: ({"model": MODEL, "prompt": "hi", "max_tokens": 1}, {"model": MODEL, "prompt": 5}),
        "/v1/responses": (
            {"model": MODEL, "input": "hi", "max_output_tokens": 1},
            {"model": MODEL, "input": 3},
        ),
        "/tokenize": ({"model": MODEL, "prompt": "hi"}, {"model": MODEL, "prompt": 5}),
        "/detokenize": ({"model": MODEL, "tokens": [1, 2]}, {"model": MODEL, "tokens": "x"}),
        "/v1/messages": (
            {"model": MODEL, "max_tokens": 1, "messages": user},
            {"model": MODEL, "max_tokens": 1},
        ),
    }
    for path, (good, bad) in cases.items():
        assert "default" in paths[path]["post"]["responses"], path
        valid = _body_validator(spec, path)
        assert valid.is_valid(good) and post(server, path, good).status_code == 200, path
        assert not valid.is_valid(bad) and post(server, path, bad).status_code == 400, path
    for route in ("/v1/models", "/generate"):
        assert route in paths, route

    bodies: list[Any] = [{}, [], "x", 7, {"model": 5, "messages": "x", "prompt": {}, "input": 3, "text": 5}]
    failures = []
    for path, ops in paths.items():
        if "post" not in ops or "{" in path or path in _STATEFUL:
            continue
        for body in [*bodies, None]:
            if body is None:
                r = requests.post(
                    server.url + path, data=b"\xff{", headers={"content-type": "application/json"}, timeout=60
                )
            else:
                r = requests.post(server.url + path, json=body, timeout=60)
            if r.status_code >= 500 or (path in (CHAT, COMPLETIONS) and r.status_code != 400):
                failures.append((path, body, r.status_code, r.text[:200]))
    assert not failures, failures


def test_generation_prompt_and_continue_final_message(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/basic/test_chat_template.py::test_get_gen_prompt
    -- on ``/v1/chat/completions``: ``add_generation_prompt: false`` renders the conversation up
    to the last user text with no assistant opening; the default adds the opening after it (so the
    first prompt is a prefix of the second); ``continue_final_message`` with a final assistant
    message ends the prompt on that message's text, unclosed, right after the same opening. The
    prompt ids agree with ``/v1/tokenize`` of the same body."""
    msgs = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
        {"role": "user", "content": "What is the capital of"},
    ]
    cont = {"role": "assistant", "content": "The capital of"}

    def prompt(messages: list[dict[str, str]], **flags: bool) -> list[int]:
        body = {"model": MODEL, "messages": messages, **flags}
        r = post(server, CHAT, {**body, "max_tokens": 1, "temperature": 0, "return_prompt_token_ids": True})
        assert r.status_code == 200, r.text
        ids = r.json()["choices"][0]["prompt_token_ids"]
        assert post(server, "/v1/tokenize", body).json()["tokens"] == ids
        return ids

    no_gen = prompt(msgs, add_generation_prompt=False)
    gen = prompt(msgs)
    continued = prompt([*msgs, cont], continue_final_message=True, add_generation_prompt=False)
    assert mtok.decode(no_gen).endswith("What is the capital of")
    assert len(gen) > len(no_gen) and gen[: len(no_gen)] == no_gen
    assert continued[: len(gen)] == gen and mtok.decode(continued[len(gen) :]) == "The capital of"


#: vLLM's pairing of the Responses stream's closing events with their opening ones.
_CLOSES = {
    "response.completed": "response.created",
    "response.incomplete": "response.created",
    "response.output_item.done": "response.output_item.added",
    "response.output_text.done": "response.output_text.delta",
    "response.content_part.done": "response.content_part.added",
    "response.reasoning_text.done": "response.reasoning_text.delta",
    "response.function_call_arguments.done": "response.function_call_arguments.delta",
}


def test_responses_function_call_stream_and_round_trip(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/responses/test_function_call.py
    (::test_function_calling_with_streaming_types, ::test_function_calling_with_streaming_expected_arguments,
    ::test_named_tool_use) -- a streamed forced call: every opened block is closed in order (vLLM's
    stack of event types; ``response.incomplete`` closes like ``response.completed``), the
    ``output_item.added`` item is a ``function_call`` whose argument deltas join to the
    ``output_item.done`` item's JSON arguments, valid for the tool's schema, and the final
    response equals the non-streamed one (greedy). The call item sent back as input with a
    ``function_call_output`` for its ``call_id`` is answered with a message."""
    # no parameters: the shortest forced call (the grammar's reading of the schema: no keys)
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}]
    base = {"model": MODEL, "tools": tools, "max_output_tokens": 200, "temperature": 0}
    body = {**base, "input": [{"role": "user", "content": "Weather in Berlin?"}], "tool_choice": "required"}
    r = requests.post(f"{server.url}/v1/responses", json={**body, "stream": True}, stream=True, timeout=120)
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith(b"data: {")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    stack: list[str] = []
    for e in events:
        t = e["type"]
        if t == "response.created" or t.endswith("added"):
            stack.append(t)
        elif t.endswith("delta"):
            if stack[-1] != t:
                stack.append(t)
        elif t in _CLOSES:
            assert stack and stack[-1] == _CLOSES[t], (t, stack)
            stack.pop()
    assert stack == [], stack
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["type"] for i in added] == ["function_call"] and added[0]["name"] == "get_weather"
    streamed_args = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert done[0]["arguments"] == streamed_args and done[0]["call_id"] == added[0]["call_id"]
    assert json.loads(streamed_args) == {}
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed" and final["output"] == done
    whole = post(server, "/v1/responses", body).json()
    assert [o["arguments"] for o in whole["output"]] == [streamed_args] and whole["status"] == "completed"

    call = whole["output"][0]
    back = [
        *body["input"],
        call,
        {"type": "function_call_output", "call_id": call["call_id"], "output": "20 C"},
    ]
    second = post(server, "/v1/responses", {**base, "input": back, "max_output_tokens": 3})
    assert second.status_code == 200, second.text
    assert [o["type"] for o in second.json()["output"]] == ["message"]


def test_empty_or_missing_model_is_the_served_model(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/chat_completion/test_serving_chat.py::test_serving_chat_returns_correct_model_name
    -- a request with ``model: ""`` or no ``model`` is served by the served model (vLLM: "full name
    is returned when empty string is specified"), on chat, completions, Responses and
    ``/tokenize``, and is answered as the same request naming ``"default"``; an unknown name stays
    a 404."""
    cases = (
        (CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}),
        (COMPLETIONS, {"prompt": "hi", "max_tokens": 2, "temperature": 0}),
        ("/v1/responses", {"input": "hi", "max_output_tokens": 2, "temperature": 0}),
        ("/tokenize", {"prompt": "hi"}),
    )
    for path, body in cases:
        named = post(server, path, {**body, "model": MODEL})
        assert named.status_code == 200, named.text
        for model in ({}, {"model": ""}):
            r = post(server, path, {**body, **model})
            assert r.status_code == 200, (path, model, r.text)
            got = r.json()
            if "model" in got:
                assert got["model"] == MODEL, (path, got)
            if path == "/v1/responses":
                assert (
                    got["output"][0]["content"][0]["text"] == named.json()["output"][0]["content"][0]["text"]
                )
            elif path == "/tokenize":
                assert got == named.json()
            else:
                assert got["choices"] == named.json()["choices"], path
        _error(post(server, path, {**body, "model": "no-such-model"}), 404)

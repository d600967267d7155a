"""Public bug reports on the API surface of peer servers (Responses, Anthropic Messages, SSE
framing, error shapes, headers), replayed through the real server processes on
``server_fixture.FakeScheduler`` (the session's ``secured_fake_server``, with an API key).

Faults found here, fixed:

* No request id in the answers' headers (vllm-project/vllm#9593): OpenAI answers every request
  with ``x-request-id`` and Anthropic with ``request-id``, which their clients read into
  ``_request_id`` and into their errors' ``request_id``. Now every answer (errors, the admission's
  401 and streams included) carries both, the client's ``X-Request-Id`` echoed or a fresh id.
* A ``system`` message inside Anthropic ``messages`` was a 400 (sgl-project/sglang#28792: Claude
  Code sends them), although the ``anthropic`` SDK's ``MessageParam`` includes
  ``SystemMessageParam`` (``role: "system"``, a string or text blocks).

Reports replayed that showed no fault here (the tests keep them so): a cut Responses reply is
``incomplete`` in the response and in its items (vllm-project/vllm#24184, vllm-project/vllm#57998),
with gap-free ``sequence_number`` s; OpenAI's nested error object (vllm-project/vllm#12886); a
``json_schema`` response format without its wrapper is a 400, not a 500 (vllm-project/vllm#35438); a
malformed Responses ``input`` gets a small 400, not one echoing the input per error
(vllm-project/vllm#49239); the streamed usage chunk (sgl-project/sglang#954);
``/v1/responses/input_tokens`` is served (vllm-project/vllm#49533); Anthropic validation errors in
Anthropic's envelope (vllm-project/vllm#57997); a matched stop sequence is
``stop_reason: "stop_sequence"`` (vllm-project/vllm#45807).

Oracles: the ``openai`` and ``anthropic`` clients' own parsers, types and stream helpers, the
fake model's known text (``server_fixture.FAKE_TEXT``), the chat-completions prompt count of the
same conversation.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anthropic
import openai
import pytest
import requests
from anthropic.types import RawMessageStreamEvent
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter
from server_fixture import FAKE_TEXT, SECURED_API_KEY, ServerHandle

pytestmark = pytest.mark.timeout(300)

#: the served model name and API key of the session's ``secured_fake_server`` (conftest.py)
MODEL = "fake-v4"
KEY = SECURED_API_KEY
USER = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def server(secured_fake_server: ServerHandle) -> ServerHandle:
    """The session's ``secured_fake_server`` (conftest.py): API key :data:`KEY`, served as
    :data:`MODEL`."""
    return secured_fake_server


@pytest.fixture(scope="module")
def oai(server: ServerHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def claude(server: ServerHandle) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)


# --------------------------------------------------------------------------------- request id
def test_request_id_headers_echoed_or_fresh(
    server: ServerHandle, oai: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    """vllm-project/vllm#9593: the client's ``X-Request-Id`` comes back; without one each answer
    has its own id; the OpenAI client's ``_request_id`` / error ``request_id`` and the Anthropic
    client's (``request-id``) read it, on bodies, streams and errors alike."""
    raw = oai.chat.completions.with_raw_response.create(
        model=MODEL, messages=USER, max_tokens=2, extra_headers={"X-Request-Id": "trace-9593"}
    )
    assert raw.request_id == "trace-9593" and raw.parse()._request_id == "trace-9593"
    fresh = [oai.models.with_raw_response.list().request_id for _ in range(2)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", f or "") for f in fresh) and fresh[0] != fresh[1]
    with oai.chat.completions.with_streaming_response.create(
        model=MODEL, messages=USER, max_tokens=2, stream=True, extra_headers={"X-Request-Id": "s-1"}
    ) as r:
        assert r.request_id == "s-1" and r.headers["content-type"].startswith("text/event-stream")
        assert sum(1 for _ in r.iter_lines()) > 0
    with pytest.raises(openai.NotFoundError) as nf:
        oai.chat.completions.create(
            model="nope", messages=USER, max_tokens=2, extra_headers={"X-Request-Id": "e-404"}
        )
    assert nf.value.request_id == "e-404"
    bad_key = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as ae:  # the admission middleware's 401
        bad_key.models.list(extra_headers={"X-Request-Id": "e-401"})
    assert ae.value.request_id == "e-401"
    msg = claude.messages.with_raw_response.create(
        model=MODEL, max_tokens=2, messages=USER, extra_headers={"X-Request-Id": "a-1"}
    )
    assert msg.request_id == "a-1" and msg.parse()._request_id == "a-1"
    with pytest.raises(anthropic.BadRequestError) as be:
        claude.messages.create(
            model=MODEL, max_tokens=-1, messages=USER, extra_headers={"X-Request-Id": "a-2"}
        )
    assert be.value.request_id == "a-2"
    # a header that is no usable id (too long, not visible ASCII) is replaced; browsers may read it
    r = requests.get(
        server.url + "/v1/models",
        headers={**server.headers(), "X-Request-Id": "x" * 300, "Origin": "http://ui.example"},
        timeout=30,
    )
    assert (
        re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
        and r.headers["request-id"] == r.headers["x-request-id"]
    )
    assert "x-request-id" in r.headers["access-control-expose-headers"].lower()


# ----------------------------------------------------------------------------------- Responses
def test_responses_cut_reply_is_incomplete_in_items_and_stream(oai: openai.OpenAI) -> None:
    """vllm-project/vllm#24184 (no way to tell a ``max_output_tokens`` cut) and
    vllm-project/vllm#57998 (the cut item said ``completed``): the response and its message item
    are ``incomplete`` with reason ``max_output_tokens``; an uncut reply is ``completed``. Streamed,
    the last event is ``response.incomplete`` (OpenAI's ``ResponseIncompleteEvent``), every event parses as the client's ``ResponseStreamEvent``, ``sequence_number`` counts 0, 1, 2...
    without a gap (OpenAI: "The sequence number of this event"), and the final response equals the
    non-streamed one's status and text."""
    cut = oai.responses.create(model=MODEL, input="Hello", max_output_tokens=4)
    assert cut.status == "incomplete" and cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"
    assert [o.status for o in cut.output] == ["incomplete"] and cut.usage is not None
    assert cut.usage.output_tokens == 4 and FAKE_TEXT.startswith(cut.output_text)
    whole = oai.responses.create(model=MODEL, input="[script] Hello", reasoning={"effort": "high"})
    assert whole.status == "completed" and whole.incomplete_details is None
    assert {o.status for o in whole.output} == {"completed"}
    events = list(oai.responses.create(model=MODEL, input="Hello", max_output_tokens=4, stream=True))
    with oai.responses.stream(model=MODEL, input="Hello", max_output_tokens=4) as s:
        streamed = list(s)  # the stream helper accepts the terminal response.incomplete
    assert streamed[-1].type == "response.incomplete" and events[-1].type == "response.incomplete"
    final = streamed[-1].response
    assert [e.sequence_number for e in events] == list(range(len(events)))
    adapter = TypeAdapter(ResponseStreamEvent)
    for e in events:
        adapter.validate_python(e.model_dump(mode="json"))
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.status for i in done] == ["incomplete"]
    assert (final.status, final.output_text) == (cut.status, cut.output_text)


def test_responses_malformed_input_gets_a_small_400(server: ServerHandle) -> None:
    """vllm-project/vllm#49239: thousands of malformed input items answered a 100 MB 400 (the whole
    input echoed per validation error). Here: a 400 in OpenAI's shape naming the first bad field,
    a few hundred bytes."""
    items = [{"role": "user", "content": [{"type": "input_text", "text": 5, "pad": "x" * 500}]}] * 2000
    r = requests.post(
        server.url + "/v1/responses",
        json={"model": MODEL, "input": items},
        headers=server.headers(),
        timeout=60,
    )
    assert r.status_code == 400 and len(r.content) < 2000, len(r.content)
    assert r.json()["error"]["param"] == "input[0].content[0].text"


def test_responses_input_tokens_route(oai: openai.OpenAI) -> None:
    """vllm-project/vllm#49533: ``POST /v1/responses/input_tokens`` answered 405 on vLLM. The
    client's ``responses.input_tokens.count`` parses the answer, whose count is the
    ``usage.input_tokens`` of the same request run."""
    kw: dict[str, Any] = {"model": MODEL, "input": "Hello there", "instructions": "Be brief."}
    counted = oai.responses.input_tokens.count(**kw)
    ran = oai.responses.create(max_output_tokens=1, **kw)
    assert ran.usage is not None and counted.input_tokens == ran.usage.input_tokens > 0


# ------------------------------------------------------------------------ errors and SSE framing
def test_openai_error_object_and_bad_response_format(server: ServerHandle, oai: openai.OpenAI) -> None:
    """vllm-project/vllm#12886 (error bodies without OpenAI's nested ``error`` object) and
    vllm-project/vllm#35438 (``response_format: {"type": "json_schema", "schema": ...}``, the schema
    not wrapped in ``json_schema``, was a 500): the client's error parser finds ``message``,
    ``type``, ``param`` and ``code``; the unwrapped schema is a 400 naming ``response_format``,
    and the server serves on."""
    with pytest.raises(openai.NotFoundError) as nf:
        oai.chat.completions.create(model="nope", messages=USER)
    assert nf.value.param == "model" and "nope" in nf.value.message and nf.value.code is not None
    with pytest.raises(openai.BadRequestError) as br:
        oai.chat.completions.create(model=MODEL, messages=USER, temperature=-1)
    assert br.value.param == "temperature" and br.value.type
    body = {
        "model": MODEL,
        "messages": USER,
        "response_format": {"type": "json_schema", "schema": {"type": "object"}},
    }
    r = requests.post(server.url + "/v1/chat/completions", json=body, headers=server.headers(), timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
    assert oai.chat.completions.create(model=MODEL, messages=USER, max_tokens=1).choices


def _sse_lines(r: requests.Response) -> list[str]:
    return [line for line in r.iter_lines(decode_unicode=True) if line]


def test_stream_usage_chunk_and_framing(server: ServerHandle, oai: openai.OpenAI) -> None:
    """sgl-project/sglang#954 (``usage`` null when streaming) and OpenAI's ``stream_options`` text:
    with ``include_usage`` an extra chunk before ``data: [DONE]`` has empty ``choices`` and the
    usage, every other chunk ``usage: null``; the chunk before it carries the ``finish_reason``.
    Without it no chunk has usage and every chunk has a choice. Each ``data:`` line is one JSON
    chunk the client's ``ChatCompletionChunk`` parses; the stream ends with ``data: [DONE]``."""
    n = 5
    body = {"model": MODEL, "messages": USER, "max_tokens": n, "stream": True}
    for include in (True, False):
        extra = {"stream_options": {"include_usage": True}} if include else {}
        with requests.post(
            server.url + "/v1/chat/completions",
            json={**body, **extra},
            headers=server.headers(),
            stream=True,
            timeout=60,
        ) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            lines = _sse_lines(r)
        assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
        chunks = [ChatCompletionChunk.model_validate(json.loads(line[6:])) for line in lines[:-1]]
        if include:
            *body_chunks, last = chunks
            assert last.choices == [] and last.usage is not None
            assert (
                last.usage.completion_tokens == n and last.usage.total_tokens == last.usage.prompt_tokens + n
            )
            assert all(c.usage is None for c in body_chunks)
            assert '"usage":null' in lines[0].replace(" ", "")
        else:
            body_chunks = chunks
            assert all(c.usage is None for c in chunks)
        assert all(len(c.choices) == 1 for c in body_chunks)
        assert [c.choices[0].finish_reason for c in body_chunks][-1] == "length"
        assert all(c.choices[0].finish_reason is None for c in body_chunks[:-1])
    plain = oai.chat.completions.create(model=MODEL, messages=USER, max_tokens=n)
    assert plain.usage is not None and plain.usage.prompt_tokens == last.usage.prompt_tokens


# ------------------------------------------------------------------------------------ Anthropic
def test_anthropic_validation_errors_use_anthropic_envelope(
    server: ServerHandle, claude: anthropic.Anthropic
) -> None:
    """vllm-project/vllm#57997: ``/v1/messages`` request-validation errors came back in OpenAI's
    shape with a Python repr as message. Here every 400 of both Messages routes is Anthropic's
    ``{"type": "error", "error": {"type": "invalid_request_error", "message"}}`` (the SDK's
    ``ErrorResponse`` type), the message naming the field."""
    from anthropic.types import ErrorResponse

    cases = [
        ("/v1/messages", {"model": MODEL, "max_tokens": "many", "messages": USER}, "max_tokens"),
        ("/v1/messages", {"model": MODEL, "max_tokens": 5, "messages": "Hello"}, "messages"),
        ("/v1/messages", {"model": MODEL, "messages": USER}, "max_tokens"),
        ("/v1/messages/count_tokens", {"model": MODEL, "messages": [{"role": "user"}]}, "messages.0.content"),
    ]
    for path, body, field in cases:
        r = requests.post(server.url + path, json=body, headers=server.headers(), timeout=30)
        assert r.status_code == 400, r.text
        err = ErrorResponse.model_validate(r.json())
        assert err.type == "error" and err.error.type == "invalid_request_error"
        assert err.error.message.startswith(field) and "{'" not in err.error.message, err.error.message
    with pytest.raises(anthropic.BadRequestError) as be:
        claude.messages.create(model=MODEL, max_tokens=5, messages=[])
    assert be.value.body["error"]["type"] == "invalid_request_error"


def test_anthropic_stop_sequence_reason(claude: anthropic.Anthropic) -> None:
    """vllm-project/vllm#45807: a matched stop string was reported ``end_turn``. Here
    ``stop_reason: "stop_sequence"`` with the matched string, the text the fake model's text up to
    it; streamed, the events come in Anthropic's order (``message_start``, content blocks,
    ``message_delta`` with the reason, ``message_stop``), each one the SDK's event type, and the
    stream helper's final message agrees."""
    want = FAKE_TEXT.split("fox")[0]
    kw: dict[str, Any] = {"model": MODEL, "max_tokens": 30, "messages": USER, "stop_sequences": ["fox"]}
    msg = claude.messages.create(**kw)
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "fox")
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == want
    with claude.messages.stream(**kw) as s:
        events = list(s)
        final = s.get_final_message()
    kinds = [e.type for e in events if e.type not in ("text", "ping")]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1] == "content_block_start" and kinds[-3] == "content_block_stop"
    adapter = TypeAdapter(RawMessageStreamEvent)
    for e in events:
        if e.type != "text":  # the helper's own text event
            adapter.validate_python(e.model_dump(mode="json"))
    delta = next(e for e in events if e.type == "message_delta")
    assert (delta.delta.stop_reason, delta.delta.stop_sequence) == ("stop_sequence", "fox")
    assert (final.stop_reason, final.stop_sequence, final.content[0].text) == ("stop_sequence", "fox", want)


def test_anthropic_claude_code_request_shapes(
    server: ServerHandle, oai: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    """sgl-project/sglang#28792: Claude Code's requests failed on SGLang's Messages route, among
    them ``system`` messages inside ``messages``, which the ``anthropic`` SDK types as
    ``SystemMessageParam`` (``role: "system"``, a string or text blocks). Such a request, with
    Claude Code's other fields (``system`` blocks with ``cache_control``, ``metadata``, tools with
    ``cache_control``, ``thinking``), is served; a system message sits at its place in the prompt,
    as DeepSeek's own Messages converter puts it (a user turn holding it in a
    ``<system-reminder>`` element): the input tokens are those of the chat-completions prompt of
    that conversation, and ``count_tokens`` agrees."""
    from anthropic.types import MessageParam

    system_param = [a for a in MessageParam.__args__ if "role" in a.__annotations__]  # type: ignore[attr-defined]
    assert any("system" in str(a.__annotations__["role"]) for a in system_param)
    messages: list[Any] = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hello", "cache_control": {"type": "ephemeral"}}],
        },
        {"role": "assistant", "content": "Hi."},
        {"role": "system", "content": [{"type": "text", "text": "Answer in one word."}]},
        {"role": "user", "content": "Why?"},
    ]
    kw: dict[str, Any] = {
        "model": MODEL,
        "system": [
            {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": messages,
        "tools": [
            {
                "name": "Bash",
                "description": "Run a command",
                "input_schema": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
                "cache_control": {"type": "ephemeral"},
            }
        ],
    }
    msg = claude.messages.create(max_tokens=3, metadata={"user_id": "u-1"}, **kw)
    counted = claude.messages.count_tokens(**kw)
    chat = oai.chat.completions.create(
        model=MODEL,
        max_tokens=1,
        messages=[
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "<system-reminder>\nAnswer in one word.\n</system-reminder>"},
            {"role": "user", "content": "Why?"},
        ],
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "Bash",
                    "description": "Run a command",
                    "parameters": kw["tools"][0]["input_schema"],
                },
            }
        ],
    )
    assert chat.usage is not None
    assert msg.usage.input_tokens == counted.input_tokens == chat.usage.prompt_tokens
    thinking = claude.messages.create(max_tokens=3, thinking={"type": "enabled", "budget_tokens": 1024}, **kw)
    assert thinking.content and thinking.stop_reason == "max_tokens"

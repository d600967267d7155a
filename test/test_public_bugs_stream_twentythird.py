"""A twenty-third set of public bug reports on server-sent-event streams, replayed on every
streaming route (``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses``, Anthropic's
``/v1/messages`` and SGLang's native ``/generate``) over in-process apps on fake tokenizer
managers.

Two were faults here, fixed in ``entrypoints/sse_response.py`` for every route at once:

* ggml-org/llama.cpp#24774 (and #20872, dstackai/dstack#4269 on vLLM and SGLang services): the
  streams carried no ``X-Accel-Buffering: no`` / ``Cache-Control: no-cache``, so NGINX, buffering
  proxied answers by default, delivered the events in bursts or all at the end.
* openai/openai-python#1230 (and modelcontextprotocol/typescript-sdk#1925,
  florimondmanca/httpx-sse#34): text holding U+2028, U+2029 or U+0085 went into the ``data:``
  lines raw (JSON allows it), and readers that split lines the way Python's ``str.splitlines()``
  does (``requests``' ``iter_lines(decode_unicode=True)``) cut the JSON there.

The other reports passed as they were and are kept as regression tests of behaviour clients rely
on: where a chat stream puts its finish reason, the Responses API's reasoning events, Anthropic's
thinking block closed before the text (also when ``max_tokens`` cuts the thinking) and its
in-stream ``error`` event.

Oracles: the ``openai`` and ``anthropic`` clients' own SSE decoders, stream event types and stream
accumulators; the same request not streamed; ``str.splitlines()`` with ``json.loads`` (a
``requests``-style reader); NGINX's documented meaning of ``X-Accel-Buffering``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import anthropic
import pytest
from anthropic_testutil import EVENTS as MESSAGE_EVENTS
from anthropic_testutil import make_clients
from fake_prompt_tm import MODEL, PromptTM, blocks
from openai.types.chat import ChatCompletionChunk
from responses_testutil import EVENTS as RESPONSE_EVENTS
from responses_testutil import sse
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.server_args import ServerArgs
from starlette.testclient import TestClient
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "Tell me about Paris."}]
REPLY = "Paris is the capital of France."
THOUGHT = "The user asks about Paris, so I recall what I know about it."
#: a reply with the three characters ``str.splitlines()`` breaks on and JSON leaves unescaped
SEPARATED = "First line\u2028second line\u2029third line\u0085end."
ROUTE_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"model": MODEL, "messages": USER, "max_tokens": 60}),
    ("/v1/completions", {"model": MODEL, "prompt": "About Paris:", "max_tokens": 60}),
    ("/v1/messages", {"model": MODEL, "messages": USER, "max_tokens": 60}),
    (
        "/v1/responses",
        {"model": MODEL, "input": "Tell me about Paris.", "max_output_tokens": 60, "store": False},
    ),
    ("/generate", {"text": "About Paris:", "sampling_params": {"max_new_tokens": 60}}),
]


class TextPromptTM(PromptTM):
    """:class:`PromptTM` that also takes a text prompt (``/v1/completions``, ``/generate``),
    tokenized first, and whose cumulative text holds back an incomplete UTF-8 character (a
    trailing U+FFFD while unfinished), as the real tokenizer manager and detokenizer do."""

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        if obj.input_ids is None:
            obj.input_ids = self.tokenizer.encode(obj.text)
        shown = ""
        async for out in super().generate_request(obj, request):
            if out["meta_info"]["finish_reason"] is None and out["text"].endswith("\ufffd"):
                out = {**out, "text": shown}
            shown = out["text"]
            yield out


def _app(tm: PromptTM, tmp_path: Any) -> TestClient:
    """A test client of the whole server app (``create_app``: the native, OpenAI and Anthropic
    routes) whose tokenizer manager is ``tm``."""
    from server_fixture import make_fake_model_dir
    from sglang_v4.entrypoints.http_server import create_app
    from sglang_v4.entrypoints.route_families import mount_openai

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    argv = [
        "--model-path",
        str(make_fake_model_dir(tmp_path)),
        "--device",
        "cpu",
        "--served-model-name",
        MODEL,
    ]
    sa = ServerArgs.from_cli_args(parser.parse_args(argv))
    app, state = create_app(sa, SimpleNamespace(scheduler_info={}, port_args=None))  # type: ignore[arg-type]
    state.tokenizer_manager = tm
    state.openai_serving = mount_openai(app, tm, sa)  # type: ignore[arg-type]
    return TestClient(app)


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return tmp_path_factory.mktemp("stream23")


# --------------------------------------------------------------------------- proxies and readers


@pytest.mark.parametrize(("path", "body"), ROUTE_BODIES)
def test_llamacpp_24774_every_stream_tells_proxies_not_to_buffer(
    tok: PreTrainedTokenizerFast, app_dir: Any, path: str, body: dict[str, Any]
) -> None:
    """ggml-org/llama.cpp#24774, #20872 and dstackai/dstack#4269 (a vLLM or SGLang service behind
    an NGINX gateway streamed nothing until 16 KB of events had piled up): NGINX buffers a proxied
    answer unless the upstream sends ``X-Accel-Buffering: no`` (NGINX's ``proxy_buffering``
    documentation), and an event stream is never a cacheable answer. Expected on every streaming
    route: ``text/event-stream`` with ``X-Accel-Buffering: no`` and ``Cache-Control: no-cache``; the
    events themselves are unchanged (the text rebuilt from them is the reply)."""
    tc = _app(TextPromptTM(tok, reply=REPLY), app_dir)
    r = tc.post(path, json={**body, "stream": True})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-accel-buffering"] == "no"
    assert r.headers["cache-control"] == "no-cache"
    assert _streamed_text(path, _data_lines_split_like_requests(r.text)) == REPLY


def _data_lines_split_like_requests(text: str) -> list[Any]:
    """The ``data:`` values of an SSE body read as ``requests``' ``iter_lines(decode_unicode=True)``
    reads it (``str.splitlines()``), each parsed as JSON (``[DONE]`` as the string)."""
    out: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def _streamed_text(path: str, events: list[Any]) -> str:
    """The reply a stream of ``path`` carries, from its ``data:`` values (each route's own shape:
    the last cumulative ``text`` of ``/generate``, the deltas joined on chat and completions and
    Messages, the completed response's text on Responses); the stream's end is checked too."""
    if path == "/generate":
        assert events[-1] == "[DONE]"
        return events[-2]["text"]
    if path == "/v1/chat/completions":
        assert events[-1] == "[DONE]"
        return "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    if path == "/v1/completions":
        assert events[-1] == "[DONE]"
        return "".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"])
    if path == "/v1/messages":
        assert events[-1]["type"] == "message_stop"
        return "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert events[-1]["type"] == "response.completed"
    return events[-1]["response"]["output"][0]["content"][0]["text"]


@pytest.mark.parametrize(("path", "body"), ROUTE_BODIES)
def test_openai_python_1230_unicode_line_separators_survive_every_reader(
    tok: PreTrainedTokenizerFast, app_dir: Any, path: str, body: dict[str, Any]
) -> None:
    """openai/openai-python#1230 (a generated U+2028 ended in ``JSONDecodeError`` with
    ``stream=True``), modelcontextprotocol/typescript-sdk#1925 and florimondmanca/httpx-sse#34 (a
    reader splitting at U+2028 / U+2029 cut a ``data:`` line mid-JSON). JSON may leave U+2028,
    U+2029 and U+0085 unescaped, and ``str.splitlines()`` breaks lines at all three. Expected on
    every route, for a reply holding each of them: no raw byte sequence of them in the body, every
    ``data:`` line of a ``str.splitlines()`` reader parses as JSON, and the text the events carry
    (last cumulative ``text`` of ``/generate``, the final message or response elsewhere) is the
    reply, characters and all."""
    tc = _app(TextPromptTM(tok, reply=SEPARATED), app_dir)
    r = tc.post(path, json={**body, "stream": True})
    assert r.status_code == 200, r.text
    for ch in ("\u2028", "\u2029", "\u0085"):
        assert ch.encode() not in r.content
    assert _streamed_text(path, _data_lines_split_like_requests(r.text)) == SEPARATED


def test_openai_python_1230_clients_rebuild_text_with_line_separators(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-python#1230 through the clients' own stream readers: the ``openai`` chat and
    Responses streams and the ``anthropic`` Messages stream accumulator give back the reply with its
    U+2028 / U+2029 / U+0085, the same as the request not streamed."""
    client, oa, _ = make_clients(TextPromptTM(tok, reply=SEPARATED))
    chat = "".join(
        c.choices[0].delta.content or ""
        for c in oa.chat.completions.create(model=MODEL, messages=USER, max_tokens=60, stream=True)
        if c.choices
    )
    assert (
        chat
        == SEPARATED
        == oa.chat.completions.create(model=MODEL, messages=USER, max_tokens=60).choices[0].message.content
    )
    with oa.responses.stream(model=MODEL, input="Tell me about Paris.", store=False) as s:
        assert s.get_final_response().output_text == SEPARATED
    with client.messages.stream(model=MODEL, max_tokens=60, messages=USER) as s:
        final = s.get_final_message()
    assert blocks(final) == blocks(client.messages.create(model=MODEL, max_tokens=60, messages=USER))
    assert final.content[0].text == SEPARATED


# --------------------------------------------------------------------------- finish reasons


def test_vllm_36944_chat_finish_chunk_has_an_empty_delta(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#36944 (vLLM put the last content token and ``finish_reason: length`` in
    one chunk; OpenAI's streams end with a chunk whose ``delta`` is empty), ollama/ollama#4357
    (``finish_reason: ""`` on the content chunks) and Oaklight/llm-rosetta#444 (the key left out).
    Expected, cut by ``max_tokens`` and ended naturally: every chunk parses as the ``openai``
    client's ``ChatCompletionChunk``; each one before the last has the key ``finish_reason`` with
    the value ``null``; the last carries the finish reason and no content; the contents joined are
    the non-streamed message's, with its finish reason."""
    _, _, tc = make_clients(PromptTM(tok, reply=REPLY))
    for max_tokens, reason in ((3, "length"), (60, "stop")):
        body = {"model": MODEL, "messages": USER, "max_tokens": max_tokens}
        r = tc.post("/v1/chat/completions", json={**body, "stream": True})
        chunks = _data_lines_split_like_requests(r.text)
        assert chunks[-1] == "[DONE]"
        chunks = chunks[:-1]
        for c in chunks:
            ChatCompletionChunk.model_validate(c)
        *content, last = chunks
        assert all(
            "finish_reason" in c["choices"][0] and c["choices"][0]["finish_reason"] is None for c in content
        )
        assert last["choices"][0]["finish_reason"] == reason
        assert not last["choices"][0]["delta"].get("content")
        whole = tc.post("/v1/chat/completions", json=body).json()["choices"][0]
        assert (
            "".join(c["choices"][0]["delta"].get("content") or "" for c in content)
            == whole["message"]["content"]
        )
        assert whole["finish_reason"] == reason


def test_ollama_4357_completion_chunks_before_the_last_have_null_finish_reason(
    tok: PreTrainedTokenizerFast,
) -> None:
    """ollama/ollama#4357 on the legacy completions stream: a finish reason that is ``""`` (not
    ``null``) on the chunks before the end reads as "finished" to clients that test for ``not
    None``. Expected: ``finish_reason`` is ``null`` on every chunk but the last, which carries the
    non-streamed answer's (``length`` when cut); the texts joined are its text."""
    tm = TextPromptTM(tok, reply=REPLY)
    _, _, tc = make_clients(tm)
    body = {"model": MODEL, "prompt": "About Paris:", "max_tokens": 4}
    events = _data_lines_split_like_requests(tc.post("/v1/completions", json={**body, "stream": True}).text)
    assert events[-1] == "[DONE]"
    *head, last = events[:-1]
    assert head and all(c["choices"][0]["finish_reason"] is None for c in head)
    whole = tc.post("/v1/completions", json=body).json()["choices"][0]
    assert last["choices"][0]["finish_reason"] == whole["finish_reason"] == "length"
    assert "".join(c["choices"][0]["text"] for c in [*head, last]) == whole["text"]


# --------------------------------------------------------------------------- reasoning and thinking


def _no_ids(x: Any) -> Any:
    """``x`` (a JSON value) with every ``id`` / ``item_id`` field and timestamp blanked, so a
    streamed and a non-streamed answer compare."""
    if isinstance(x, dict):
        return {
            k: ("" if k in ("id", "item_id") else 0 if k in ("created_at", "completed_at") else _no_ids(v))
            for k, v in x.items()
        }
    if isinstance(x, list):
        return [_no_ids(v) for v in x]
    return x


def test_vllm_35184_responses_reasoning_stream_has_its_part_events(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#35184 and #24938 (the Responses stream's reasoning item had no part
    events around its ``response.reasoning_text.delta`` events, so a client's state machine had no
    part to put them in). Expected with reasoning on: every event validates as the ``openai``
    client's ``ResponseStreamEvent`` and ``sequence_number`` counts 0, 1, 2, ...; the reasoning
    item is opened (``output_item.added``, ``content_part.added`` of a ``reasoning_text`` part),
    its deltas follow, then ``reasoning_text.done`` / ``content_part.done`` / ``output_item.done``
    with the joined text, all before the message item opens; the ``openai`` client's stream
    accumulator gives the non-streamed response's output."""
    client, oa, tc = make_clients(PromptTM(tok, reply=f"{THOUGHT}</think>{REPLY}"))
    body = {"model": MODEL, "input": "Tell me about Paris.", "reasoning": {"effort": "high"}, "store": False}
    events = sse(tc.post("/v1/responses", json={**body, "stream": True}).text)
    for e in events:
        RESPONSE_EVENTS.validate_python(e)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    reasoning = [e for e in events if e.get("output_index") == 0]
    assert [e["type"] for e in reasoning[:2]] == ["response.output_item.added", "response.content_part.added"]
    assert reasoning[0]["item"]["type"] == "reasoning" and reasoning[1]["part"]["type"] == "reasoning_text"
    assert [e["type"] for e in reasoning[-3:]] == [
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    deltas = [e["delta"] for e in reasoning if e["type"] == "response.reasoning_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == reasoning[-3]["text"] == THOUGHT
    assert kinds.index("response.output_text.delta") > events.index(reasoning[-1])
    whole = tc.post("/v1/responses", json=body).json()
    with oa.responses.stream(**body) as s:
        final = s.get_final_response()
    assert _no_ids(final.model_dump(mode="json", exclude_none=True)["output"]) == _no_ids(
        [{k: v for k, v in o.items() if v is not None} for o in whole["output"]]
    )
    assert final.output_text == REPLY


@pytest.mark.parametrize("max_tokens", [5, 60])
def test_qwen2api_121_thinking_block_closes_before_the_text_block(
    tok: PreTrainedTokenizerFast, max_tokens: int
) -> None:
    """Rfym21/Qwen2API#121 (an Anthropic Messages stream must carry the reasoning as its own
    ``thinking`` block, closed by ``content_block_stop`` before the ``text`` block starts).
    Expected, with the answer whole and with ``max_tokens`` cutting the thinking: every event
    validates as the ``anthropic`` client's ``RawMessageStreamEvent``; each block is started,
    given deltas of its own type and stopped before the next starts, at indexes 0, 1, ...; the
    ``anthropic`` client's stream accumulator gives the non-streamed message (blocks, stop reason
    ``end_turn`` / ``max_tokens``, output tokens)."""
    client, _, tc = make_clients(PromptTM(tok, reply=f"{THOUGHT}</think>{REPLY}"))
    kw: dict[str, Any] = dict(
        model=MODEL, max_tokens=max_tokens, messages=USER, thinking={"type": "enabled", "budget_tokens": 1024}
    )
    events = sse(tc.post("/v1/messages", json={**kw, "stream": True}).text)
    events = [e for e in events if e["type"] != "ping"]
    for e in events:
        MESSAGE_EVENTS.validate_python(e)
    open_block: int | None = None
    started = []
    for e in events:
        if e["type"] == "content_block_start":
            assert open_block is None
            open_block = e["index"]
            started.append(e["content_block"]["type"])
        elif e["type"] == "content_block_delta":
            assert e["index"] == open_block
            want = {"thinking": ("thinking_delta", "signature_delta"), "text": ("text_delta",)}[started[-1]]
            assert e["delta"]["type"] in want
        elif e["type"] == "content_block_stop":
            assert e["index"] == open_block == len(started) - 1
            open_block = None
    assert open_block is None and started == (["thinking", "text"] if max_tokens == 60 else ["thinking"])
    whole = client.messages.create(**kw)
    with client.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert blocks(final) == blocks(whole)
    assert final.stop_reason == whole.stop_reason == ("end_turn" if max_tokens == 60 else "max_tokens")
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_clicky_132_messages_error_event_ends_the_stream_and_raises(tok: PreTrainedTokenizerFast) -> None:
    """farzaa/clicky#132 (a client that skipped Anthropic's in-stream ``error`` event returned the
    partial text as a whole answer). Expected when the engine aborts a request after two tokens:
    the 200 stream sends those two text deltas, then an ``event: error`` whose data is Anthropic's
    error shape (``{"type": "error", "error": {"type", "message"}}``) and nothing after it (no
    ``message_delta`` / ``message_stop`` that would read as a normal end); the ``anthropic``
    client, reading the same stream, raises ``APIStatusError`` with the engine's message after
    yielding the partial text."""
    tm = PromptTM(tok, reply=REPLY, abort_after=2)
    client, _, tc = make_clients(tm)
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 60, "messages": USER, "stream": True})
    assert r.status_code == 200
    frames = [f for f in r.text.split("\n\n") if f.strip()]
    assert frames[-1].startswith("event: error\n")
    last = json.loads(frames[-1].split("data: ", 1)[1])
    assert last == {"type": "error", "error": {"type": "api_error", "message": "engine failure"}}
    events = sse(r.text)
    assert not {"message_delta", "message_stop"} & {e["type"] for e in events}
    partial = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert partial == tok.decode(tok.encode(REPLY, add_special_tokens=False)[:2])
    seen = ""
    with pytest.raises(anthropic.APIStatusError, match="engine failure"):
        with client.messages.stream(model=MODEL, max_tokens=60, messages=USER) as s:
            for text in s.text_stream:
                seen += text
    assert seen == partial


def test_vllm_40418_responses_failure_mid_stream_is_a_typed_failed_event(
    tok: PreTrainedTokenizerFast,
) -> None:
    """vllm-project/vllm#40418 and ollama/ollama#17531 (a generation failing after a Responses
    stream started ended as a chat-style ``{"error": ...}`` frame, or with no terminal event at all,
    so a client took the partial text for the answer). Expected when the engine aborts after two
    tokens: every event validates as the ``openai`` client's ``ResponseStreamEvent`` with
    ``sequence_number`` 0, 1, 2, ...; the last is ``response.failed`` whose response has ``status``
    ``failed`` and an ``error`` with the engine's message; no ``response.completed`` is sent; the
    text deltas before it are the two tokens' text."""
    _, _, tc = make_clients(PromptTM(tok, reply=REPLY, abort_after=2))
    body = {"model": MODEL, "input": "Tell me about Paris.", "store": False, "stream": True}
    r = tc.post("/v1/responses", json=body)
    assert r.status_code == 200
    events = sse(r.text)
    for e in events:
        RESPONSE_EVENTS.validate_python(e)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "response.failed" and "response.completed" not in kinds
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and "engine failure" in failed["error"]["message"]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == tok.decode(tok.encode(REPLY, add_special_tokens=False)[:2])

"""Shared pieces of the Anthropic Messages API tests: the weather tool in both API shapes, the API key, in-process Anthropic / OpenAI clients over a fake tokenizer manager, a raw POST helper, the served prompt of a request (``served_prompt``) and content blocks stripped of per-response fields (``comparable_content``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anthropic
import openai
from anthropic.types import Message, RawMessageStreamEvent
from fake_prompt_tm import MODEL, PromptTM
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from responses_testutil import sse
from sglang_v4.entrypoints.anthropic import create_anthropic_router
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.entrypoints.route_errors import install_route_error_handler

KEY = "s3cret"


WEATHER = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}


CHAT_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": WEATHER["input_schema"],
    },
}


EVENTS = TypeAdapter(RawMessageStreamEvent)
NO_THINK = {"type": "disabled"}


def make_clients(
    tm: PromptTM, api_key: str | None = None, cache_report: bool = False, auto_truncate: bool = False
) -> tuple[anthropic.Anthropic, openai.OpenAI, TestClient]:
    sa = SimpleNamespace(
        served_model_name=MODEL,
        model_path=None,
        api_key=api_key,
        enable_cache_report=cache_report,
        allow_auto_truncate=auto_truncate,
    )
    app = FastAPI()
    install_route_error_handler(app)  # as the server's app: unknown routes in the family's shape
    router = create_openai_router(tm, sa)
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    tc = TestClient(app)
    key = api_key or "x"
    client = anthropic.Anthropic(base_url="http://testserver", api_key=key, http_client=tc, max_retries=0)
    oa = openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=tc, max_retries=0)
    return client, oa, tc


def post(tc: TestClient, body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The message of ``body`` non-streamed and the events of it streamed, both validated
    against the ``anthropic`` client's types; the stream's event order is Anthropic's."""
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 100, **body})
    assert r.status_code == 200, r.text
    Message.model_validate(r.json())
    s = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 100, **body, "stream": True})
    assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
    events = sse(s.text)
    for ev in events:
        if ev["type"] != "ping":
            EVENTS.validate_python(ev)
    kinds = [e["type"] for e in events if e["type"] != "ping"]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    open_index = None
    for ev in events:  # one block open at a time, indices from 0 in order
        if ev["type"] == "content_block_start":
            assert open_index is None
            open_index = ev["index"]
        elif ev["type"] == "content_block_delta":
            assert ev["index"] == open_index
        elif ev["type"] == "content_block_stop":
            assert ev["index"] == open_index
            open_index = None
    assert open_index is None
    return r.json(), events


def _anthropic_client(tm: Any) -> anthropic.Anthropic:
    """The ``anthropic`` client over an app serving the OpenAI and Anthropic routes on ``tm``."""
    sa = SimpleNamespace(served_model_name="m", model_path=None, api_key=None, enable_cache_report=False)
    app = FastAPI()
    install_route_error_handler(app)  # as the server's app: unknown routes in the family's shape
    router = create_openai_router(tm, sa)
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    return anthropic.Anthropic(
        base_url="http://testserver", api_key="x", http_client=TestClient(app), max_retries=0
    )


def comparable_content(blocks_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Content blocks without their per-response fields (``id``, ``signature``) and unset ones."""
    return [{k: v for k, v in b.items() if v is not None and k not in ("id", "signature")} for b in blocks_]


def served_prompt(tok: Any, body: dict[str, Any]) -> tuple[str, int, int]:
    """The prompt text the Messages request ``body`` (thinking off) runs on, its token count, and
    the ``count_tokens`` answer for the same fields (one ``PromptTM`` replying "Sunny.")."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, _ = make_clients(tm)
    client.messages.create(model=MODEL, max_tokens=20, thinking=NO_THINK, **body)
    counted = client.messages.count_tokens(model=MODEL, thinking=NO_THINK, **body).input_tokens
    return tok.decode(tm.received[-1].input_ids), len(tm.received[-1].input_ids), counted


def stream_events(tc: TestClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of ``body`` posted to ``/v1/messages`` streamed (``max_tokens`` 200 unless
    ``body`` sets it; ``ping`` left out), each validated as the ``anthropic`` client's
    ``RawMessageStreamEvent``."""
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 200, **body, "stream": True})
    assert r.status_code == 200, r.text
    events = [e for e in sse(r.text) if e["type"] != "ping"]
    for e in events:
        EVENTS.validate_python(e)
    return events

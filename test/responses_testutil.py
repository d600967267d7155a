"""Helpers of the ``/v1/responses`` tests: the ``get_weather`` tool in the Responses and chat
shapes, an ``openai`` client over an in-process app of the OpenAI router, and the stream readers
(SSE events validated against the ``openai`` client's types, output items rebuilt from deltas).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import openai
from fake_prompt_tm import MODEL, WEATHER_SCHEMA, PromptTM
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openai.types.responses import Response as OpenAIResponse
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter
from sglang_v4.entrypoints.openai import create_openai_router

#: the ``get_weather`` tool in the Responses API's flat shape
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": WEATHER_SCHEMA,
}
#: the same tool in the chat completions shape
CHAT_WEATHER = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}
#: validator of one Responses stream event (the ``openai`` client's union type)
EVENTS = TypeAdapter(ResponseStreamEvent)


def make_client(tm: PromptTM) -> tuple[openai.OpenAI, TestClient]:
    """An ``openai`` client and a ``TestClient`` over an app serving the OpenAI router on ``tm``."""
    sa = SimpleNamespace(served_model_name=MODEL, model_path=None, api_key=None, enable_cache_report=False)
    app = FastAPI()
    app.include_router(create_openai_router(tm, sa))
    tc = TestClient(app)
    return openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=tc, max_retries=0), tc


def sse(text: str) -> list[dict[str, Any]]:
    """The events of a Responses or Messages stream; each ``event:`` line names its data's ``type``."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = json.loads(lines["data"])
        assert lines["event"] == data["type"], block
        events.append(data)
    return events


def post(tc: TestClient, body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The response body of ``body`` non-streamed and the events of it streamed, both validated
    against the ``openai`` client's types; sequence numbers count from 0 without gaps."""
    r = tc.post("/v1/responses", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    OpenAIResponse.model_validate(r.json())
    s = tc.post("/v1/responses", json={"model": MODEL, **body, "stream": True})
    assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
    events = sse(s.text)
    for ev in events:
        EVENTS.validate_python(ev)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return r.json(), events


def chat(client: openai.OpenAI, messages: list[dict[str, Any]], **kw: Any) -> Any:
    """A greedy (``temperature=0``) chat completion of ``messages``: the Responses tests' oracle."""
    return client.chat.completions.create(model=MODEL, messages=messages, temperature=0, **kw)


def streamed_items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The output items as the stream built them: added ... done, deltas folded in."""
    items: dict[int, dict[str, Any]] = {}
    for ev in events:
        t = ev["type"]
        if t == "response.output_item.added":
            items[ev["output_index"]] = dict(ev["item"], text="")
        elif t in ("response.output_text.delta", "response.reasoning_text.delta"):
            items[ev["output_index"]]["text"] += ev["delta"]
        elif t == "response.function_call_arguments.delta":
            items[ev["output_index"]]["arguments"] += ev["delta"]
        elif t == "response.output_item.done":
            done = ev["item"]
            got = items[ev["output_index"]]
            if done["type"] == "function_call":
                assert done["arguments"] == got["arguments"]
            else:
                assert done["content"][0]["text"] == got["text"]
            items[ev["output_index"]] = dict(done, text=got["text"])
    return [items[k] for k in sorted(items)]


def final_response(stream: Any) -> OpenAIResponse:
    """The response a ``client.responses.stream(...)`` ends with: that of its terminal event,
    ``response.completed`` or ``response.incomplete`` (a reply cut by ``max_output_tokens``, as
    OpenAI ends it; the client's ``get_final_response()`` reads ``response.completed`` only)."""
    last = None
    for ev in stream:
        if ev.type in ("response.completed", "response.incomplete"):
            last = ev.response
    assert last is not None, "the stream ended without response.completed / response.incomplete"
    return last


#: A Lark grammar of a custom tool's ``format`` (a ``*** Begin`` / ``*** End`` block of lower-case
#: lines) and inputs with whether its language holds them (read off the grammar by hand).
LARK = 'start: "*** Begin\\n" line+ "*** End"\nline: /[a-z ]+/ "\\n"\n'
LARK_CASES = [
    ("*** Begin\nab c\n*** End", True),
    ("*** Begin\nab\ncd\n*** End", True),
    ("*** Begin\n*** End", False),
    ("*** Begin\nAB\n*** End", False),
    ("ab c", False),
]

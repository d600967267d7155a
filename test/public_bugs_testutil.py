"""Helpers of the public-bug replay modules that share the ``more_bugs_server`` fixture
(``test_public_bugs_more``, ``test_public_bugs_more_outputs``): JSON posts, ``/generate``, SSE
streams, the served model's ``</think>`` id, a weather tool and call; the other server-backed replay modules use the
request helpers too."""

from __future__ import annotations

import json
from typing import Any

import requests
from server_fixture import ServerHandle

MODEL = "default"
USER = [{"role": "user", "content": "Hi"}]
THINK_END = "</think>"
#: An assistant ``tool_calls`` entry calling ``get_weather`` for Paris.
WEATHER_CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
#: The request's ``get_weather`` tool (one required string parameter ``city``).
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def post(server: ServerHandle, path: str, body: dict[str, Any]) -> requests.Response:
    """``POST path`` with the JSON ``body`` (120 s timeout)."""
    return requests.post(server.url + path, json=body, timeout=120)


def post_ok(server: ServerHandle, path: str, body: dict[str, Any]) -> Any:
    """The JSON answer of ``POST path``; asserts HTTP 200."""
    r = post(server, path, body)
    assert r.status_code == 200, r.text
    return r.json()


def generate(server: ServerHandle, body: dict[str, Any]) -> Any:
    """The JSON answer of ``POST /generate``; asserts HTTP 200."""
    return post_ok(server, "/generate", body)


def sse(server: ServerHandle, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON chunks of the streamed ``body`` (``stream: true`` added), ``[DONE]`` left out."""
    r = requests.post(server.url + path, json={**body, "stream": True}, stream=True, timeout=120)
    assert r.status_code == 200, r.text
    return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith(b"data: {")]


def think_end_id(mtok: Any) -> int:
    """The id of the ``</think>`` token in ``mtok`` (a single token that decodes to itself)."""
    tid = mtok.convert_tokens_to_ids(THINK_END)
    assert isinstance(tid, int) and mtok.decode([tid]) == THINK_END
    return tid

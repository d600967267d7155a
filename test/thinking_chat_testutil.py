"""Shared pieces of the thinking-mode chat test modules: the chat route driven in process over
``openai_fake_tm.FakeTM``, the weather tool and call they offer, and readers of what came back.

``chat_route_prompt`` is the prompt the route renders for a body; ``post_chat`` /
``chat_answer`` send one chat-completions body (``model`` ``MODEL``, 64 new tokens unless the body
says otherwise) and assert HTTP 200; ``prompt_of`` is the prompt text the engine received;
``reasoning_of`` reads the ``reasoning_content`` extension field the ``openai`` client keeps in
``model_extra``; ``messages_client`` is a ``FakeTM`` and a ``TestClient`` over the OpenAI and
Anthropic routers.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from openai.types.chat import ChatCompletion
from openai_fake_tm import FakeTM, app_client
from sglang_v4.entrypoints.anthropic import create_anthropic_router
from sglang_v4.entrypoints.openai import create_openai_router
from transformers import PreTrainedTokenizerFast

CHAT = "/v1/chat/completions"
MODEL = "dsv4-test"
#: A one-turn conversation.
HI = [{"role": "user", "content": "Hi"}]
THINK_END = "</think>"
#: An assistant ``tool_calls`` entry calling ``get_weather`` for Paris.
CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
#: The request's ``tools``: ``get_weather`` with one required string parameter ``city``.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def prompt_of(tok: PreTrainedTokenizerFast, tm: FakeTM) -> str:
    """The prompt text of the last engine request ``tm`` received."""
    got = tm.received[-1]
    return got.text if got.text is not None else tok.decode(got.input_ids)


def chat_route_prompt(tok: PreTrainedTokenizerFast, body: dict[str, Any], thinking: bool) -> str:
    """The prompt text the chat route hands the engine for ``body`` with thinking on or off
    (``chat_template_kwargs``; 2 new tokens), on a fresh ``FakeTM``; HTTP 200 asserted."""
    tm = FakeTM(tok)
    r = app_client(tm).post(
        CHAT, json={"model": MODEL, **body, "max_tokens": 2, "chat_template_kwargs": {"thinking": thinking}}
    )
    assert r.status_code == 200, r.text
    return prompt_of(tok, tm)


def post_chat(tm: FakeTM, body: dict[str, Any], **args: Any) -> Any:
    """POST ``body`` to the chat route over ``tm`` (``args`` set server arguments); the response,
    HTTP 200 asserted."""
    r = app_client(tm, **args).post(CHAT, json={"model": MODEL, "max_tokens": 64, **body})
    assert r.status_code == 200, r.text
    return r


def chat_answer(tm: FakeTM, body: dict[str, Any], **args: Any) -> ChatCompletion:
    """The non-streamed answer to ``body`` on ``tm``, as the client types it."""
    return ChatCompletion.model_validate(post_chat(tm, body, **args).json())


def reasoning_of(message: Any) -> str | None:
    """The ``reasoning_content`` of a client-typed message or delta (``None`` when absent)."""
    return (message.model_extra or {}).get("reasoning_content")


def messages_client(tok: PreTrainedTokenizerFast, reply: str) -> tuple[FakeTM, TestClient]:
    """A ``FakeTM`` writing ``reply`` and a ``TestClient`` over the OpenAI and Anthropic routers on
    it (served model ``MODEL``, no API key, no cache report)."""
    tm = FakeTM(tok, reply=reply)
    sa = SimpleNamespace(
        served_model_name=MODEL, model_path=None, api_key=None, enable_cache_report=False, context_length=None
    )
    app = FastAPI()
    router = create_openai_router(tm, sa)
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    return tm, TestClient(app)

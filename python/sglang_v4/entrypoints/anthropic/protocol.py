"""Pydantic models of Anthropic's Messages API (``POST /v1/messages``,
``POST /v1/messages/count_tokens``): the request bodies, the ``message`` object and its content
blocks, and the error body.

Field names and shapes follow Anthropic's API reference (the ``anthropic`` client's ``types``
parse them; the tests validate every body and stream event against those types). The request
models check the top-level types only (pydantic's strict mode, as on the OpenAI routes); the
content blocks are read, and checked field by field, by :mod:`.messages_content`. Unknown fields
(``cache_control``, ``container``...) are ignored, as on the other routes; ``service_tier`` is
checked and answered (:data:`MESSAGES_SERVICE_TIERS`).
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from sglang_v4.entrypoints.openai.protocol import _Req

__all__ = [
    "ANTHROPIC_ROUTES",
    "AnthropicMessage",
    "CountTokensRequest",
    "MessageParam",
    "MessagesRequest",
    "MESSAGES_SERVICE_TIERS",
    "MessagesUsage",
    "SERVED_MESSAGES_TIER",
    "StopReason",
    "TextBlock",
    "ThinkingBlock",
    "ToolUseBlock",
    "anthropic_error_body",
    "anthropic_error_type",
    "new_message_id",
    "thinking_signature",
]

#: The values of a Messages request's ``service_tier`` (Anthropic's API reference: ``auto`` may use
#: priority capacity, ``standard_only`` does not).
MESSAGES_SERVICE_TIERS = ("auto", "standard_only")
#: The tier every Messages request is served with, as a response's ``usage.service_tier`` names it
#: (Anthropic's values: ``standard``, ``priority``, ``batch``; this server has one tier).
SERVED_MESSAGES_TIER = "standard"

#: The paths of the Anthropic routes (their errors, the admission's included, use Anthropic's shape).
ANTHROPIC_ROUTES = frozenset({"/v1/messages", "/v1/messages/count_tokens"})

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]

#: Anthropic's error ``type`` of each HTTP status (its API reference, "Errors"); a 503 (the server
#: drains, or its backend died) is Anthropic's ``overloaded_error``.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error_type(status: int) -> str:
    """Anthropic's error ``type`` of an HTTP ``status``: other 4xx are ``invalid_request_error``,
    other 5xx ``api_error``."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def anthropic_error_body(message: str, status: int) -> dict[str, Any]:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}`` (the type from
    :func:`anthropic_error_type`)."""
    return {"type": "error", "error": {"type": anthropic_error_type(status), "message": message}}


def new_message_id() -> str:
    """A fresh message id in Anthropic's style: ``msg_`` + 32 hex digits."""
    return f"msg_{uuid.uuid4().hex}"


def thinking_signature(thinking: str) -> str:
    """The ``signature`` of a ``thinking`` block: an opaque string (the SHA-256 hex digest of its
    text). It is not checked when a client sends the block back: replayed thinking is used as
    given, as DeepSeek's own Anthropic-compatible API does."""
    return hashlib.sha256(thinking.encode("utf-8")).hexdigest()


class MessageParam(_Req):
    """One input message: ``role`` ``user``, ``assistant`` or ``system`` (the Anthropic SDK's
    ``SystemMessageParam``: an instruction at its place in the conversation, ``content`` a string
    or ``text`` blocks), ``content`` a string or a list of content blocks (read by
    :mod:`.messages_content`).

    ``role`` is compared case-sensitively: ``"User"`` or ``"ASSISTANT"`` is a 400 naming
    ``messages.N.role`` (``Input should be 'user', 'assistant' or 'system'``), unlike on
    ``/v1/chat/completions``, which lowercases roles as SGLang's chat route does
    (sgl-project/sglang#7499). Anthropic's API takes ``role`` as a lowercase enum and answers
    another spelling with that 400, the ``anthropic`` client's message types only hold the
    lowercase values, and SGLang's Messages route (a ``Literal`` role) and DeepSeek's own
    Messages converter (``deepseek-recipe``) refuse it too.
    """

    role: Literal["user", "assistant", "system"]
    content: str | list[Any]


class _MessagesBody(_Req):
    """Fields shared by ``/v1/messages`` and ``/v1/messages/count_tokens``: the conversation, the
    tools and the switches that change the prompt.

    ``model`` is required, as in Anthropic's API; an empty one (``""``) means the served model,
    as on the OpenAI routes (and vLLM's Anthropic route): it reads as ``"default"``, the name
    those routes give a request without a model (and echo).
    """

    model: str

    @field_validator("model", mode="before")
    @classmethod
    def _empty_model_is_served(cls, v: Any) -> Any:
        return "default" if v == "" else v

    messages: list[MessageParam]
    system: str | list[Any] | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    #: ``effort`` (the chat route's ``reasoning_effort``) and ``format`` (a JSON schema answer).
    output_config: dict[str, Any] | None = None


class MessagesRequest(_MessagesBody):
    """``POST /v1/messages`` body.

    ``max_tokens`` (required, at least 0, as Anthropic's API) bounds the generated tokens, reasoning
    included; ``0`` is Anthropic's cache pre-warm call: the prompt is prefilled (and its prefix
    cached) and the reply has no content and ``stop_reason: "max_tokens"``.
    ``stop_sequences`` are stop strings (not part of the text; the one matched is the response's
    ``stop_sequence``). ``temperature``, ``top_p``, ``top_k``: sampling (unset ones take the
    server's chat defaults, as on ``/v1/chat/completions``). ``metadata.user_id``: the chat route's
    ``user``. ``service_tier``: one of :data:`MESSAGES_SERVICE_TIERS` (another value is a 400);
    when set, the message's ``usage.service_tier`` names the tier used,
    :data:`SERVED_MESSAGES_TIER`. ``cache_salt`` (vLLM's Messages field) and ``extra_key``
    (SGLang's): the request's prefix-cache namespace, as on ``/v1/chat/completions`` (a request
    shares cached prompt blocks only with requests of the same namespace; an empty
    ``cache_salt`` is a 400 naming it).
    """

    max_tokens: int
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    metadata: dict[str, Any] | None = None
    service_tier: Any = None
    cache_salt: str | None = None
    extra_key: str | None = None


class CountTokensRequest(_MessagesBody):
    """``POST /v1/messages/count_tokens`` body: the prompt fields of a Messages request."""


class TextBlock(BaseModel):
    """A ``text`` content block."""

    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(BaseModel):
    """A ``thinking`` content block: the model's reasoning and an opaque ``signature``
    (:func:`thinking_signature`)."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str


class ToolUseBlock(BaseModel):
    """A ``tool_use`` content block: a call of one of the request's tools (``input``: its
    arguments, a JSON object)."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ContentBlock = TextBlock | ThinkingBlock | ToolUseBlock


class MessagesUsage(BaseModel):
    """Token counts of a message (tokens). ``input_tokens`` counts the prompt tokens not read
    from the prefix cache; with ``--enable-cache-report`` those are ``cache_read_input_tokens``
    (Anthropic's split: the prompt is their sum), otherwise ``input_tokens`` is the whole
    prompt. ``output_tokens`` counts every generated token, reasoning and tool-call markup
    included.

    Without ``--enable-cache-report`` the cache counts are unknown: the two cache keys are left
    out of every ``usage`` (the message, ``message_start``, ``message_delta``), never sent as
    ``null``, so each count a client reads is an integer and the three usages have the same keys.
    ``service_tier`` (the tier used, on the message and ``message_start`` only, as Anthropic's
    ``Usage``; ``message_delta``'s usage has no such key) is left out unless the request set it.
    """

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    service_tier: str | None = None

    @model_serializer(mode="wrap")
    def _unknown_counts_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class AnthropicMessage(BaseModel):
    """The ``message`` object: what ``POST /v1/messages`` returns and what a stream's
    ``message_start`` carries (there with empty ``content`` and no ``stop_reason``)."""

    id: str = Field(default_factory=new_message_id)
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock] = Field(default_factory=list)
    stop_reason: StopReason | None = None
    stop_sequence: str | None = None
    usage: MessagesUsage

"""Pydantic models of OpenAI's Responses API (``POST /v1/responses``): the request body, the
``response`` object and its output items.

Field names and shapes follow the OpenAI API reference (the ``openai`` client's
``types/responses`` parse them; the tests validate every body against those types). Request
fields that sglang-v4 does not serve are refused when set (:data:`UNSERVED_RESPONSES_FIELDS`)
rather than ignored, since the output would silently differ from what was asked; unknown fields
are ignored, as on the other OpenAI routes.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, computed_field, model_serializer

from sglang_v4.entrypoints.openai.protocol import _Req

__all__ = [
    "UNSERVED_RESPONSES_FIELDS",
    "ResponsesRequest",
    "ResponsesInputTokensRequest",
    "ResponsesInputTokens",
    "OutputText",
    "ReasoningText",
    "ResponseOutputMessage",
    "ResponseReasoningItem",
    "ResponseCustomToolCall",
    "ResponseFunctionToolCall",
    "ResponseUsage",
    "ResponseObject",
    "new_item_id",
]

ResponseStatus = Literal["completed", "incomplete", "in_progress", "failed"]


def new_item_id(prefix: str) -> str:
    """A fresh id in OpenAI's style: ``prefix`` (``resp``, ``msg``, ``rs``, ``fc``) + ``_`` + 32 hex
    digits."""
    return f"{prefix}_{uuid.uuid4().hex}"


#: OpenAI's ``ResponseIncludable`` (its API reference: the ``include`` parameter of ``POST /v1/responses``).
ResponseIncludable = Literal[
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
]


class ResponsesRequest(_Req):
    """``POST /v1/responses`` body.

    ``input``: a string (one user message) or a list of items (messages, ``reasoning``,
    ``function_call``, ``function_call_output``; read by :mod:`.responses_input`).
    ``instructions``: a system message put first (not carried over by ``previous_response_id``, as
    in OpenAI's API). ``max_output_tokens``: the bound on generated tokens, reasoning included.
    ``store`` (default true): keep the response in the server's in-memory store, for ``GET
    /v1/responses/{id}`` and ``previous_response_id``. SGLang's sampling extras (``top_k``,
    ``min_p``, ``repetition_penalty``, penalties, ``seed``) and ``chat_template_kwargs`` are
    accepted as on ``/v1/chat/completions``, and so is vLLM's ``cache_salt``.
    ``include: ["message.output_text.logprobs"]`` (with ``top_logprobs``) gives the message's
    ``output_text`` part the logprobs of the answer's tokens. ``include_reasoning`` (vLLM's field,
    as on ``/v1/chat/completions``; default true): false leaves the ``reasoning`` item out of the
    output, streamed and not (no ``reasoning_text`` events); the reasoning is still generated,
    counted in ``output_tokens_details.reasoning_tokens`` and kept with the stored conversation
    for ``previous_response_id``, as OpenAI keeps reasoning it does not return.
    ``thinking_token_budget`` (vLLM's chat and completions field) bounds the reasoning as on the
    chat route: vLLM's Responses route drops it unread, a fault its users report
    (vllm-project/vllm#43692), so it is honoured here rather than ignored.
    """

    model: str = "default"
    input: str | list[Any]
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    #: OpenAI's ``ResponseIncludable`` values (another value is a 400 naming ``include``, as
    #: OpenAI and vLLM answer); only the logprobs and ``reasoning.encrypted_content`` ones change
    #: an answer here (the others name outputs of tools this server does not run)
    include: list[ResponseIncludable] | None = None
    #: ``"auto"``: the oldest turns dropped until the prompt fits the context
    #: (:mod:`.responses_truncation`); ``"disabled"`` / unset: a prompt over it is a 400
    truncation: Literal["auto", "disabled"] | None = None
    # SGLang / vLLM sampling extras
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    seed: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    #: vLLM's switch: false returns no ``reasoning`` item (see the class docstring)
    include_reasoning: bool = True
    #: vLLM's bound on reasoning tokens, as on ``/v1/chat/completions`` (-1 / None: none): the
    #: reasoning item holds at most that many tokens (:mod:`sglang_v4.sampling.thinking_budget`)
    thinking_token_budget: int | None = None
    priority: int | None = None
    #: vLLM's prefix-cache namespace (as on the chat route: :func:`~.vllm_fields.cache_namespace`)
    cache_salt: str | None = None
    #: the chat completions field, sent here by chat clients: read as ``text.format``
    #: (:func:`~.responses_input.text_with_response_format`), not ignored
    response_format: Any = None
    # OpenAI fields of features not served here (refused when set: UNSERVED_RESPONSES_FIELDS)
    background: Any = None
    conversation: Any = None
    prompt: Any = None
    stop: Any = None
    #: OpenAI's cap on a response's calls of built-in tools (an integer >= 1, echoed): none is
    #: served here, so it limits nothing; function and custom tool calls are not counted
    max_tool_calls: Any = None
    #: top tokens per answer token with ``include: ["message.output_text.logprobs"]`` (OpenAI's
    #: 0..20, the chat route's bound); without that ``include`` no logprobs are returned (vLLM's rule)
    top_logprobs: int | None = None
    #: OpenAI's caching and abuse-tracking keys: read, not used (the prefix cache needs no key),
    #: and echoed on the response as OpenAI echoes them
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    #: OpenAI's processing tier: any of its values is served with ``default``, the one tier here,
    #: which the response names (:mod:`.service_tier`); another value is a 400
    service_tier: Any = None


class ResponsesInputTokensRequest(ResponsesRequest):
    """``POST /v1/responses/input_tokens`` body: the prompt fields of a Responses request
    (``input`` optional, as OpenAI's parameters have it: a request may count only a stored
    conversation, ``previous_response_id``); the generation fields are read and not used."""

    input: str | list[Any] = Field(default_factory=list)


class ResponsesInputTokens(BaseModel):
    """``POST /v1/responses/input_tokens`` answer (OpenAI's ``InputTokenCountResponse``)."""

    object: Literal["response.input_tokens"] = "response.input_tokens"
    input_tokens: int


#: Request fields refused when set (not ``null`` / ``false`` / ``0``), with the reason; ``stop`` is
#: not a Responses API field (OpenAI's API refuses it too), the others are features not served.
UNSERVED_RESPONSES_FIELDS = {
    "background": "background responses are not supported; use stream instead",
    "conversation": "conversations are not supported; use previous_response_id instead",
    "prompt": "prompt templates are not supported",
    "stop": "stop is not a field of the Responses API; use /v1/chat/completions for stop strings",
}


class OutputText(BaseModel):
    """An ``output_text`` content part of a message item."""

    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)


class ReasoningText(BaseModel):
    """A ``reasoning_text`` content part of a reasoning item."""

    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ResponseOutputMessage(BaseModel):
    """An assistant ``message`` output item (one ``output_text`` part). ``phase`` is OpenAI's
    label of the text: ``"commentary"`` when tool calls follow it in the same output,
    ``"final_answer"`` otherwise (DeepSeek's own Responses generator labels them so)."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    status: ResponseStatus = "completed"
    content: list[OutputText]
    phase: Literal["commentary", "final_answer"] = "final_answer"


class ResponseReasoningItem(BaseModel):
    """A ``reasoning`` output item: the model's whole reasoning as ``reasoning_text`` content
    (``summary`` empty: no summaries are written). ``encrypted_content`` (with ``include:
    ["reasoning.encrypted_content"]`` only; left out of the JSON otherwise) is the same text as
    a blob a stateless client replays (:mod:`.responses_reasoning_state`)."""

    id: str
    type: Literal["reasoning"] = "reasoning"
    summary: list[Any] = Field(default_factory=list)
    content: list[ReasoningText]
    encrypted_content: str | None = None
    status: ResponseStatus = "completed"

    @model_serializer(mode="wrap")
    def _drop_no_blob(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("encrypted_content") is None:
            data.pop("encrypted_content", None)
        return data


class _NamespacedCall(BaseModel):
    """A call item's ``namespace``: that of the ``namespace`` tool the called tool belongs to
    (OpenAI's call items carry the tool's bare ``name`` and its group beside it, which Codex
    routes on); left out of the JSON for a tool of no namespace."""

    namespace: str | None = None

    @model_serializer(mode="wrap")
    def _drop_no_namespace(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("namespace") is None:
            data.pop("namespace", None)
        return data


class ResponseFunctionToolCall(_NamespacedCall):
    """A ``function_call`` output item; ``call_id`` is what a ``function_call_output`` answers."""

    id: str
    type: Literal["function_call"] = "function_call"
    call_id: str
    name: str
    arguments: str
    status: ResponseStatus = "completed"


class ResponseCustomToolCall(_NamespacedCall):
    """A ``custom_tool_call`` output item (a call of a custom tool): ``input`` is the free-form
    text the model wrote; ``call_id`` is what a ``custom_tool_call_output`` answers. OpenAI's
    item has no ``status``."""

    id: str
    type: Literal["custom_tool_call"] = "custom_tool_call"
    call_id: str
    name: str
    input: str


OutputItem = ResponseOutputMessage | ResponseReasoningItem | ResponseFunctionToolCall | ResponseCustomToolCall


class InputTokensDetails(BaseModel):
    """``usage.input_tokens_details`` (tokens): prompt tokens served from the prefix cache."""

    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    """``usage.output_tokens_details`` (tokens): generated tokens of the reasoning block."""

    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    """Token accounting of a response (all counts in tokens; ``output_tokens`` includes the
    reasoning and tool-call markup).

    OpenAI's fields, plus ``prompt_tokens`` / ``completion_tokens`` (the same counts as
    ``input_tokens`` / ``output_tokens``): SGLang's Responses API reports its usage under the Chat
    Completions names, and clients written against it read them; OpenAI's clients ignore them."""

    input_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prompt_tokens(self) -> int:
        """SGLang's name of ``input_tokens``."""
        return self.input_tokens

    @computed_field  # type: ignore[prop-decorator]
    @property
    def completion_tokens(self) -> int:
        """SGLang's name of ``output_tokens``."""
        return self.output_tokens


class IncompleteDetails(BaseModel):
    """Why a response is ``incomplete``: ``max_output_tokens`` (the token limit, or the context,
    ended it)."""

    reason: Literal["max_output_tokens"] = "max_output_tokens"


class ResponseError(BaseModel):
    """``error`` of a ``failed`` response (a stream that ended with an engine error)."""

    code: str
    message: str


class ResponseObject(BaseModel):
    """The ``response`` object (``object: "response"``): what ``POST /v1/responses`` returns, what
    the stream's lifecycle events carry and what ``GET /v1/responses/{id}`` returns.

    ``created_at`` / ``completed_at``: Unix seconds; ``completed_at`` is set when the status is
    ``completed`` and ``null`` otherwise (OpenAI's rule: in progress, incomplete, failed).
    ``background`` (always false: background responses are refused), ``top_logprobs``,
    ``prompt_cache_key`` and ``safety_identifier`` echo the request, as OpenAI's response does;
    ``presence_penalty`` / ``frequency_penalty`` are the values sampled with (as ``temperature``
    and ``top_p``), ``max_tool_calls`` echoes the request and ``service_tier`` is
    ``default``: the tier that served the request, whatever tier it asked for, as OpenAI's
    reference defines the field (:mod:`.service_tier`). Every field the Open Responses specification requires of
    a response resource is present."""

    id: str
    object: Literal["response"] = "response"
    created_at: int = Field(default_factory=lambda: int(time.time()))
    completed_at: int | None = None
    background: bool = False
    status: ResponseStatus = "completed"
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] = Field(default_factory=dict)
    store: bool = True
    temperature: float | None = None
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: Any = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    top_p: float | None = None
    top_logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    max_tool_calls: int | None = None
    service_tier: Literal["default"] = "default"
    truncation: Literal["auto", "disabled"] = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

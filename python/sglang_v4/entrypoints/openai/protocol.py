"""Pydantic models of the OpenAI-compatible API, with SGLang 0.5.x's extra fields.

Field names, defaults and response shapes follow the OpenAI API reference and SGLang's
``srt/entrypoints/openai/protocol.py`` (read for behaviour; written independently). Unknown request
fields are ignored, as OpenAI-compatible servers (SGLang included) do.
"""

from __future__ import annotations

import time
import typing
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from sglang_v4.entrypoints.openai.protocol_vllm import PromptLogprob, VllmChatFields, VllmCompletionFields

__all__ = [
    "ErrorResponse",
    "error_body",
    "error_type_for_status",
    "StreamOptions",
    "PromptTokensDetails",
    "UsageInfo",
    "ModelCard",
    "ModelList",
    "CompletionRequest",
    "LogProbs",
    "CompletionResponseChoice",
    "CompletionResponse",
    "CompletionResponseStreamChoice",
    "CompletionStreamResponse",
    "ChatMessageParam",
    "ChatCompletionRequest",
    "TopLogprob",
    "ChatCompletionTokenLogprob",
    "ChoiceLogprobs",
    "FunctionCall",
    "ToolCall",
    "DeltaFunctionCall",
    "DeltaToolCall",
    "ChatMessage",
    "ChatCompletionResponseChoice",
    "ChatCompletionResponse",
    "DeltaMessage",
    "ChatCompletionResponseStreamChoice",
    "ChatCompletionStreamResponse",
    "TokenizeRequest",
    "TokenizeResponse",
    "UNSUPPORTED_OPENAI_FIELDS",
    "DetokenizeRequest",
    "DetokenizeResponse",
]

FinishReasonStr = Literal["stop", "length", "abort", "content_filter", "tool_calls"]


def _now() -> int:
    return int(time.time())


class _Req(BaseModel):
    """Base of the request bodies: unknown fields are ignored and an explicit ``null`` for an
    optional field means "not given" (its default applies), as vLLM's optional fields and the
    OpenAI API accept it; clients that serialise every parameter send ``"stream": null``,
    ``"logprobs": null``... A ``null`` for a required field (``messages``, ``prompt``, ``role``)
    stays an error."""

    model_config = ConfigDict(extra="ignore", protected_namespaces=())

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        if not isinstance(data, dict) or None not in data.values():
            return data
        fields = cls.model_fields
        return {
            k: v
            for k, v in data.items()
            if not (
                v is None
                and k in fields
                and not fields[k].is_required()
                and not _accepts_none(fields[k].annotation)
            )
        }


def _accepts_none(annotation: Any) -> bool:
    """Whether a field type takes ``None`` itself (``X | None``, ``Any``): there ``null`` keeps its
    own meaning (e.g. ``max_tokens: null`` is "no limit"), not the default."""
    return annotation is Any or annotation is None or type(None) in typing.get_args(annotation)


class ErrorResponse(BaseModel):
    """SGLang/OpenAI error body: ``{"object": "error", "message", "type", "param", "code"}``."""

    object: str = "error"
    message: str
    type: str
    param: str | None = None
    code: int


#: The error ``type`` of each HTTP status, the same on every route (OpenAI routes, the admission
#: middleware, native stream errors): client errors keep SGLang's names (the ``openai`` client's
#: exception classes), server errors OpenAI's (``server_error``; ``service_unavailable`` for 503,
#: e.g. while the server drains or after its backend died).
_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    409: "ConflictError",
    413: "RequestTooLargeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    499: "ClientClosedRequestError",
    503: "service_unavailable",
}


def error_type_for_status(status: int) -> str:
    """The error ``type`` of an HTTP ``status`` (see ``_ERROR_TYPES``): other 4xx are
    ``BadRequestError``, other 5xx ``server_error``."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "server_error" if status >= 500 else "BadRequestError"


def error_body(
    message: str, status: int, err_type: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """An OpenAI-route error body in both shapes clients read.

    SGLang's flat ``{"object": "error", "message", "type", "param", "code"}`` plus OpenAI's
    ``"error": {"message", "type", "param", "code"}`` with the same values (the ``openai`` client
    reads the nested one). ``err_type`` defaults to :func:`error_type_for_status`.
    """
    et = err_type or error_type_for_status(status)
    flat = ErrorResponse(message=message, type=et, param=param, code=status).model_dump()
    flat["error"] = {"message": message, "type": et, "param": param, "code": status}
    return flat


class StreamOptions(BaseModel):
    """``stream_options``; ``include_usage`` adds a final chunk with ``usage`` and no choices."""

    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class PromptTokensDetails(BaseModel):
    """``usage.prompt_tokens_details`` (only with ``--enable-cache-report``)."""

    cached_tokens: int = 0


class CompletionTokensDetails(BaseModel):
    """OpenAI's ``usage.completion_tokens_details`` (tokens)."""

    reasoning_tokens: int = 0


class UsageInfo(BaseModel):
    """Token accounting of one response (all counts in tokens).

    ``reasoning_tokens`` (SGLang's field) counts, in thinking mode, the generated tokens up to and
    including the first ``</think>`` (all of them without one); ``completion_tokens_details`` repeats
    it where OpenAI puts it, and is set only when there are some (as SGLang).
    """

    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: PromptTokensDetails | None = None
    reasoning_tokens: int | None = 0
    completion_tokens_details: CompletionTokensDetails | None = None


class ModelCard(BaseModel):
    """One entry of ``/v1/models``."""

    id: str
    object: str = "model"
    created: int = Field(default_factory=_now)
    owned_by: str = "sglang"
    root: str | None = None
    max_model_len: int | None = None


class ModelList(BaseModel):
    """``/v1/models`` body."""

    object: str = "list"
    data: list[ModelCard] = Field(default_factory=list)


# ----------------------------------------------------------------------------------- completions
class _SamplingExtras(_Req):
    """SGLang's extra sampling fields shared by both request kinds."""

    top_k: int | None = None
    min_p: float | None = None
    min_tokens: int | None = None
    repetition_penalty: float | None = None
    stop_token_ids: list[int] | None = None
    stop_regex: str | list[str] | None = None
    no_stop_trim: bool = False
    #: vLLM's name of ``no_stop_trim`` (either keeps the matched stop string in the output).
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    custom_params: dict[str, Any] | None = None
    rid: str | list[str] | None = None
    priority: int | None = None
    #: SGLang's prefix-cache namespace (with vLLM's ``cache_salt`` before it: :func:`~.vllm_fields.cache_namespace`).
    extra_key: str | None = None
    #: SGLang's: the generated token ids in each choice (``token_ids``) and the prompt's
    #: (``prompt_token_ids``; on /v1/chat/completions also ``return_prompt_token_ids``).
    return_token_ids: bool = False
    # SGLang request fields of features sglang-v4 lacks: a 400 naming the field when set (ignoring
    # them would silently change the results), as on /generate (UNSUPPORTED_OPENAI_FIELDS).
    lora_path: Any = None
    custom_logit_processor: Any = None
    session_params: Any = None
    return_hidden_states: Any = None
    return_routed_experts: Any = None
    bootstrap_host: Any = None
    bootstrap_port: Any = None
    bootstrap_room: Any = None


#: The request fields of :class:`_SamplingExtras` refused when set (not None / false).
UNSUPPORTED_OPENAI_FIELDS = (
    "lora_path",
    "custom_logit_processor",
    "session_params",
    "return_hidden_states",
    "return_routed_experts",
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
)


class _OmitNoneIds(BaseModel):
    """Responses / choices whose token-id fields (``*token_ids``) and vLLM's ``prompt_logprobs``
    are left out when None, so that a response without ``return_token_ids`` or
    ``prompt_logprobs`` keeps its usual shape (as SGLang's)."""

    @model_serializer(mode="wrap")
    def _drop_unset_ids(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        return {
            k: v
            for k, v in data.items()
            if not (v is None and (k.endswith("token_ids") or k == "prompt_logprobs"))
        }


class CompletionRequest(_SamplingExtras, VllmCompletionFields):
    """``POST /v1/completions`` body."""

    model: str = "default"
    prompt: str | list[str] | list[int] | list[list[int]]
    best_of: int | None = None
    echo: bool = False
    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None
    logprobs: int | None = None
    max_tokens: int | None = 16
    #: Chat's name of the output limit, accepted here too (clients and guides send it to
    #: /v1/completions): it wins over ``max_tokens`` when both are set, as on chat.
    max_completion_tokens: int | None = None
    n: int | None = 1
    presence_penalty: float | None = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    suffix: str | None = None
    temperature: float | None = 1.0
    top_p: float | None = 1.0
    user: str | None = None
    response_format: dict[str, Any] | None = None


class LogProbs(BaseModel):
    """Completions logprobs (legacy OpenAI format)."""

    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class CompletionResponseChoice(_OmitNoneIds):
    """One choice of a ``/v1/completions`` response (``matched_stop``, ``token_ids`` and
    ``prompt_token_ids`` are SGLang's extensions, the ids left out when not asked for)."""

    index: int
    text: str
    logprobs: LogProbs | None = None
    finish_reason: FinishReasonStr | None = None
    matched_stop: int | str | None = None
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    #: vLLM's ``prompt_logprobs`` of the choice's prompt (:mod:`.prompt_logprobs`)
    prompt_logprobs: list[dict[str, PromptLogprob] | None] | None = None


class CompletionResponse(BaseModel):
    """A non-streamed ``/v1/completions`` response (``object: "text_completion"``)."""

    id: str = Field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    object: str = "text_completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[CompletionResponseChoice]
    usage: UsageInfo


class CompletionResponseStreamChoice(_OmitNoneIds):
    """``token_ids``: the ids generated since the previous chunk; ``prompt_token_ids``: on the
    choice's first chunk (both with ``return_token_ids``)."""

    index: int
    text: str
    logprobs: LogProbs | None = None
    finish_reason: FinishReasonStr | None = None
    matched_stop: int | str | None = None
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None


class CompletionStreamResponse(BaseModel):
    """One SSE chunk of a streamed ``/v1/completions`` response; ``usage`` only on the usage chunk."""

    id: str
    object: str = "text_completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[CompletionResponseStreamChoice]
    usage: UsageInfo | None = None


# ----------------------------------------------------------------------------------- chat
class ChatMessageParam(_Req):
    """One input message. ``content`` is a string, ``None`` or a list of (text) content parts.

    An assistant turn's reasoning comes as ``reasoning_content`` (DeepSeek's and SGLang's name)
    or as ``reasoning`` (vLLM's name since it renamed the field; its clients echo it back): a
    ``reasoning`` alone fills ``reasoning_content``, so the prompt keeps it either way; when both
    are given ``reasoning_content`` wins. ``prefix: true`` on the final assistant message is
    DeepSeek's chat prefix completion: that message is continued (as ``continue_final_message``).
    """

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    prefix: bool = False

    @model_validator(mode="after")
    def _reasoning_alias(self) -> ChatMessageParam:
        if self.reasoning_content is None and self.reasoning is not None:
            self.reasoning_content = self.reasoning
        self.reasoning = None  # one field downstream: the encoders read reasoning_content
        return self


class ChatCompletionRequest(_SamplingExtras, VllmChatFields):
    """``POST /v1/chat/completions`` body.

    Tool calling: ``tools`` (OpenAI function tools), ``tool_choice`` (``"none"``, ``"auto"``,
    ``"required"`` or ``{"type": "function", "function": {"name": ...}}``), ``parallel_tool_calls``.
    Thinking mode: ``chat_template_kwargs`` ``{"thinking": true}`` (or ``enable_thinking``), or
    DeepSeek's ``thinking: {"type": "enabled"}``; ``add_generation_prompt: false`` (vLLM's
    extension) leaves out the assistant turn's opening (``continue_final_message`` wins over it);
    ``reasoning_effort`` one of none, minimal, low, medium, high, xhigh, max. ``response_format``: ``text``, ``json_object``, ``json_schema``
    (``{"json_schema": {"name", "schema", "strict"}}``) or SGLang's ``structural_tag``.
    """

    messages: list[ChatMessageParam]
    model: str = "default"
    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = 1
    presence_penalty: float | None = 0.0
    response_format: dict[str, Any] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = True
    reasoning_effort: str | None = None
    thinking: dict[str, Any] | bool | None = None
    continue_final_message: bool = False
    add_generation_prompt: bool = True
    separate_reasoning: bool = True
    stream_reasoning: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    #: SGLang's: the prompt's token ids, used as given instead of rendering ``messages`` (which
    #: still decide the tool-call and reasoning handling).
    input_ids: list[int] | None = None
    return_prompt_token_ids: bool = False


class TopLogprob(BaseModel):
    """One alternative of a chat token's ``top_logprobs``: its text, UTF-8 ``bytes`` and natural-log probability."""

    token: str
    bytes: list[int]
    logprob: float


class ChatCompletionTokenLogprob(BaseModel):
    """A chat output token's logprob entry: text, UTF-8 ``bytes``, natural-log probability and its
    ``top_logprobs``."""

    token: str
    bytes: list[int]
    logprob: float
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    """``choices[i].logprobs`` of a chat response: one entry per output token of ``content``."""

    content: list[ChatCompletionTokenLogprob]


class FunctionCall(BaseModel):
    """``tool_calls[i].function``: the tool's name and its arguments as a JSON object text."""

    name: str
    arguments: str


class ToolCall(BaseModel):
    """One entry of ``message.tool_calls``."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class _OmitNone(BaseModel):
    """A stream delta whose None fields are left out of the JSON, not sent as ``null``.

    OpenAI's deltas omit what a chunk does not carry, and the ``openai`` client's stream
    accumulator (``ChatCompletionStreamState``, behind ``client.chat.completions.stream``) copies a
    delta's ``type`` over the accumulated one: a later fragment's ``"type": null`` turned the call
    into an untyped one and the accumulator failed.
    """

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class DeltaFunctionCall(_OmitNone):
    """``delta.tool_calls[i].function``: the name on a call's first delta, then argument fragments
    (a key that a delta does not carry is absent)."""

    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(_OmitNone):
    """One entry of ``delta.tool_calls``: ``id``, ``type`` and ``function.name`` on a call's first
    delta only, absent (not ``null``) from the later ones."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall


class ChatMessage(BaseModel):
    """The assistant message of a chat choice (``reasoning_content``: the thinking-mode text, as SGLang
    and DeepSeek's API return it)."""

    role: str = "assistant"
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatCompletionResponseChoice(_OmitNoneIds):
    """``prompt_token_ids`` (``return_prompt_token_ids`` or ``return_token_ids``) and
    ``response_token_ids`` (``return_token_ids``: every generated id, reasoning and tool-call
    markup included), SGLang's names."""

    index: int
    message: ChatMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReasonStr | None = None
    matched_stop: int | str | None = None
    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None


class ChatCompletionResponse(_OmitNoneIds):
    """A non-streamed ``/v1/chat/completions`` response (``object: "chat.completion"``;
    ``prompt_logprobs``: vLLM's, of the prompt, :mod:`.prompt_logprobs`)."""

    id: str = Field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    object: str = "chat.completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatCompletionResponseChoice]
    usage: UsageInfo
    prompt_logprobs: list[dict[str, PromptLogprob] | None] | None = None


class DeltaMessage(BaseModel):
    """The part of the assistant message one stream chunk adds (role first, then content,
    reasoning or tool-call deltas)."""

    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatCompletionResponseStreamChoice(BaseModel):
    """One choice of a chat stream chunk; ``finish_reason`` is set on the choice's last chunk."""

    index: int
    delta: DeltaMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReasonStr | None = None
    matched_stop: int | str | None = None


class ChatCompletionStreamResponse(BaseModel):
    """One SSE chunk of a streamed ``/v1/chat/completions`` response
    (``object: "chat.completion.chunk"``); ``usage`` only on the usage chunk."""

    id: str
    object: str = "chat.completion.chunk"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatCompletionResponseStreamChoice]
    usage: UsageInfo | None = None


# ----------------------------------------------------------------------------------- (de)tokenize
class TokenizeRequest(_Req):
    """``POST /tokenize`` (and ``/v1/tokenize``) body: SGLang's and vLLM's tokenizer route.

    Exactly one of ``prompt`` (a text or a list of texts, encoded with ``add_special_tokens``: BOS /
    EOS as the tokenizer's config says) or ``messages`` (rendered and encoded exactly as
    ``/v1/chat/completions`` would, so ``count`` is that route's ``usage.prompt_tokens``; the chat
    fields that shape the prompt -- ``tools``, ``tool_choice``, ``chat_template_kwargs``,
    ``reasoning_effort``, ``thinking``, ``add_generation_prompt``, ``continue_final_message`` -- are
    read from the same body). Other fields are kept for the chat rendering (``extra="allow"``).
    """

    model_config = ConfigDict(extra="allow", protected_namespaces=())

    model: str = "default"
    prompt: str | list[str] | None = None
    messages: list[dict[str, Any]] | None = None
    add_special_tokens: bool = True
    #: vLLM's: also answer ``token_strs``, the tokenizer's token strings of the ids.
    return_token_strs: bool = False


class TokenizeResponse(BaseModel):
    """``/tokenize`` answer: ``tokens`` (token ids; one list per text of a list ``prompt``),
    ``count`` (their number; a list for a list ``prompt``), ``max_model_len`` (the served context
    length, tokens) and, with ``return_token_strs``, ``token_strs``: each id's token string as the
    tokenizer's ``convert_ids_to_tokens`` writes it (byte-level pieces such as ``"Ġworld"``, vLLM's
    field; shaped as ``tokens``); left out otherwise."""

    tokens: list[int] | list[list[int]]
    count: int | list[int]
    max_model_len: int | None = None
    token_strs: list[str] | list[list[str]] | None = None

    @model_serializer(mode="wrap")
    def _drop_unasked(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if data.get("token_strs") is None:
            data.pop("token_strs", None)
        return data


class DetokenizeRequest(_Req):
    """``POST /detokenize`` (and ``/v1/detokenize``) body: ``tokens`` (ids, or a list of id lists)
    and ``skip_special_tokens`` (default true, as SGLang)."""

    model: str = "default"
    tokens: list[int] | list[list[int]]
    skip_special_tokens: bool = True


class DetokenizeResponse(BaseModel):
    """``/detokenize`` answer: the text of ``tokens`` (a list of texts for a list of id lists)."""

    text: str | list[str]

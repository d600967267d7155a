"""``POST /v1/chat/completions`` models: the request and its messages, the (streamed) response,
the assistant message and its deltas, tool calls and the chat ``logprobs``.

Field names, defaults and shapes follow the OpenAI API reference (chat completions) and SGLang's
``srt/entrypoints/openai/protocol.py`` (read for behaviour; written independently); vLLM's extra
request fields come from :class:`~.protocol_vllm.VllmChatFields`.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_serializer,
    model_validator,
)

from sglang_v4.entrypoints.openai.protocol_base import (
    FinishReasonStr,
    StreamOptions,
    UsageInfo,
    _now,
    _OmitNoneIds,
    _Req,
    _SamplingExtras,
)
from sglang_v4.entrypoints.openai.protocol_vllm import PromptLogprob, VllmChatFields
from sglang_v4.entrypoints.openai.template_kwargs import check_template_kwargs

__all__ = [
    "ChatMessageParam",
    "ChatCompletionRequest",
    "TopLogprob",
    "ChatCompletionTokenLogprob",
    "ChoiceLogprobs",
    "FunctionCall",
    "CustomToolCall",
    "ToolCall",
    "DeltaFunctionCall",
    "DeltaToolCall",
    "ChatMessage",
    "ChatCompletionResponseChoice",
    "ChatCompletionResponse",
    "DeltaMessage",
    "ChatCompletionResponseStreamChoice",
    "ChatCompletionStreamResponse",
]


class ChatMessageParam(_Req):
    """One input message. ``content`` is a string, ``None`` or a list of (text) content parts.

    An assistant turn's reasoning comes as ``reasoning_content`` (DeepSeek's and SGLang's name)
    or as ``reasoning`` (vLLM's name since vllm-project/vllm#27752; its clients send their previous
    answer back with it): a ``reasoning`` alone fills ``reasoning_content``, so the prompt keeps it
    either way. Both given (not null) must be equal - a client echoing our answer, which carries
    both, sends them equal - else a ``ValueError`` naming both fields (HTTP 400). ``prefix: true``
    on the final assistant message is DeepSeek's chat prefix completion: that message is continued
    (as ``continue_final_message``).

    An assistant message's ``thinking`` / ``reasoning`` content parts (SGLang's thinking part,
    ``{"type": "thinking", "thinking": ...}`` or ``{..., "text": ...}``; Mistral's ``thinking``
    chunk with a list of text chunks) are its reasoning: read into ``reasoning_content`` (joined by
    a blank line) and taken out of ``content``; given beside a different ``reasoning_content``, a
    ``ValueError``. In other roles such a part is refused as any non-text part is.

    An assistant message's ``refusal`` (OpenAI's ``ChatCompletionAssistantMessageParam`` field; a
    client replaying a refused answer sends ``content: null`` with it) is the turn's text, as a
    ``refusal`` content part is: it follows the message's text content (after a blank line) or,
    alone, is the content. Dropped, the turn rendered empty and the model lost its own answer.

    ``role`` is read case-insensitively (``"SYSTEM"``, ``"Assistant"``, ``"USER"``: clients such as
    Spring AI send enum names), as SGLang reads it since sgl-project/sglang#7499; any other value is
    a 400 naming ``messages.N.role``. ``latest_reminder`` is DeepSeek's reminder role (its converter
    and SGLang's protocol take it), rendered as ``<｜latest_reminder｜>`` + text.
    """

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "developer", "tool", "latest_reminder"]
    content: str | list[dict[str, Any]] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    prefix: bool = False
    refusal: str | None = None

    @field_validator("role", mode="before")
    @classmethod
    def _role_case(cls, v: Any) -> Any:
        return v.lower() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _reasoning_alias(self) -> ChatMessageParam:
        if self.reasoning_content is None:
            self.reasoning_content = self.reasoning
        elif self.reasoning is not None and self.reasoning != self.reasoning_content:
            raise ValueError(
                "reasoning and reasoning_content of an assistant message differ: give one of them "
                "(reasoning is vLLM's name of reasoning_content), or both with the same text"
            )
        self.reasoning = None  # one field downstream: the encoders read reasoning_content
        return self

    @model_validator(mode="after")
    def _thinking_parts(self) -> ChatMessageParam:
        if self.role != "assistant" or not isinstance(self.content, list):
            return self  # elsewhere a thinking part is refused with the other non-text parts
        thoughts: list[str] = []
        rest: list[Any] = []
        for i, part in enumerate(self.content):
            if not (isinstance(part, dict) and part.get("type") in THINKING_PART_TYPES):
                rest.append(part)
                continue
            thoughts.append(_thinking_part_text(part, i))
        if not thoughts:
            return self
        text = "\n\n".join(thoughts)
        if self.reasoning_content is not None and self.reasoning_content != text:
            raise ValueError(
                "the thinking content parts and reasoning_content of an assistant message differ: "
                "give the reasoning once"
            )
        self.reasoning_content = text
        self.content = rest or None
        return self

    @model_validator(mode="after")
    def _refusal_text(self) -> ChatMessageParam:
        if self.role != "assistant" or not self.refusal:
            return self
        if not self.content:
            self.content = self.refusal
        elif isinstance(self.content, str):
            self.content = [
                {"type": "text", "text": self.content},
                {"type": "refusal", "refusal": self.refusal},
            ]
        else:
            self.content = [*self.content, {"type": "refusal", "refusal": self.refusal}]
        self.refusal = None  # read into content once (the model may be validated again)
        return self


#: The content part types of an assistant message's reasoning (SGLang's thinking part; Mistral's
#: ``thinking`` chunk), read into ``reasoning_content``.
THINKING_PART_TYPES = ("thinking", "reasoning")


def _thinking_part_text(part: dict[str, Any], i: int) -> str:
    """The text of thinking content part ``i``: its ``thinking`` or its ``text`` (exactly one, as
    SGLang reads the part), ``thinking`` a string or Mistral's list of text chunks (joined).

    Raises:
        ValueError: neither or both given, or not text; names the part.
    """
    where = f"content[{i}]"
    given = [k for k in ("thinking", "text") if part.get(k) is not None]
    if len(given) != 1:
        raise ValueError(f"{where}: a thinking part needs exactly one of 'thinking' or 'text'")
    value = part[given[0]]
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(
        isinstance(c, dict) and c.get("type", "text") == "text" and isinstance(c.get("text"), str)
        for c in value
    ):
        return "".join(c["text"] for c in value)
    raise ValueError(f"{where}.{given[0]} must be a string or a list of text chunks")


#: ``chat_template_kwargs`` keys that are also request fields shaping the prompt's end: read into
#: those fields (:meth:`ChatCompletionRequest._template_kwargs_prompt_switches`), never passed to a
#: template a second time
PROMPT_SWITCH_KWARGS = ("add_generation_prompt", "continue_final_message")


class ChatCompletionRequest(_SamplingExtras, VllmChatFields):
    """``POST /v1/chat/completions`` body.

    Tool calling: ``tools`` (OpenAI function tools), ``tool_choice`` (``"none"``, ``"auto"``,
    ``"required"`` or ``{"type": "function", "function": {"name": ...}}``), ``parallel_tool_calls``.
    Thinking mode: ``chat_template_kwargs`` ``{"thinking": true}`` (or ``enable_thinking``), or
    DeepSeek's ``thinking: {"type": "enabled"}``; ``add_generation_prompt: false`` (vLLM's
    extension) leaves out the assistant turn's opening (``continue_final_message`` wins over it);
    ``reasoning_effort`` one of none, minimal, low, medium, high, xhigh, max, ultra; where the request sets
    no thinking switch, an effort turns thinking on (``"none"``: off), as does OpenRouter's
    ``reasoning: {"enabled": true}`` (:mod:`.reasoning_request`). ``response_format``: ``text``, ``json_object``, ``json_schema``
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
    #: OpenAI's output types and audio-output settings: only ``["text"]`` is served, anything
    #: else is a 400 (:mod:`.output_modalities`)
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    #: OpenAI's processing tier: any of its values is served with ``default``, the one tier here,
    #: which the response names (:mod:`.service_tier`); another value is a 400
    service_tier: Any = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    #: OpenAI's deprecated forms of ``tools`` / ``tool_choice``: read only to refuse them (400).
    functions: Any = None
    function_call: Any = None
    parallel_tool_calls: bool | None = True
    reasoning_effort: str | None = None
    #: OpenRouter's / SGLang's reasoning controls (``enabled``, ``effort``, ``exclude``,
    #: ``max_tokens``) or a boolean switch; read by :mod:`.reasoning_request`
    reasoning: dict[str, Any] | bool | None = None
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
    #: Not a request field (set by the Responses route for its custom tools): tool name ->
    #: ``(parameter, xgrammar format)``, the one string parameter whose raw text the tool-call
    #: grammar constrains to that format (``tool_call_structural_tag``'s ``string_value_formats``).
    _string_value_formats: dict[str, tuple[str, dict[str, Any]]] = PrivateAttr(default_factory=dict)
    #: Not a request field: the names of the request's custom tools (``{"type": "custom"}``),
    #: served as function tools (:mod:`.chat_custom_tools`), whose calls are answered as custom
    #: tool calls.
    _custom_tools: frozenset[str] = PrivateAttr(default_factory=frozenset)
    #: Not a request field: whether ``response_format`` adds its "## Response Format" section to
    #: the prompt (:mod:`sglang_v4.entrypoints.chat_encoding_response_format`); the Messages route
    #: turns it off for ``output_config.format``, which DeepSeek's Messages converter leaves out of
    #: the prompt (the grammar still applies).
    _response_format_in_prompt: bool = PrivateAttr(default=True)

    @field_validator("chat_template_kwargs")
    @classmethod
    def _prompt_switch_kwargs_are_booleans(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        """Refuse a :data:`PROMPT_SWITCH_KWARGS` key of ``chat_template_kwargs`` that is neither a
        boolean nor ``null``, and a key naming the renderer's own arguments (``tools``,
        ``chat_template``...: :mod:`~sglang_v4.entrypoints.openai.template_kwargs`); a ValueError
        naming ``chat_template_kwargs.KEY``."""
        for key in PROMPT_SWITCH_KWARGS:
            value = (v or {}).get(key)
            if value is not None and not isinstance(value, bool):
                raise ValueError(f"chat_template_kwargs.{key} must be a boolean, got {value!r}")
        check_template_kwargs(v, "chat_template_kwargs")
        return v

    @model_validator(mode="after")
    def _template_kwargs_prompt_switches(self) -> ChatCompletionRequest:
        """``add_generation_prompt`` / ``continue_final_message`` given in ``chat_template_kwargs``
        set the request's own fields (vLLM passes those kwargs to the template after the fields,
        so they win over them); ``null`` there leaves the field as it is."""
        kwargs = self.chat_template_kwargs or {}
        for key in PROMPT_SWITCH_KWARGS:
            if kwargs.get(key) is not None:
                setattr(self, key, kwargs[key])
        return self


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


class CustomToolCall(_OmitNone):
    """``tool_calls[i].custom`` of a custom tool's call: the tool's name and its free-form
    ``input`` (OpenAI's ``ChatCompletionMessageCustomToolCall``); in a stream delta, the name on
    the call's first delta and the next ``input`` text (a key a delta does not carry is absent)."""

    name: str | None = None
    input: str | None = None


class ToolCall(_OmitNone):
    """One entry of ``message.tool_calls``: a function call (``type: "function"``, ``function``)
    or a custom tool's call (``type: "custom"``, ``custom``); the other key is absent."""

    id: str
    type: Literal["function", "custom"] = "function"
    function: FunctionCall | None = None
    custom: CustomToolCall | None = None


class DeltaFunctionCall(_OmitNone):
    """``delta.tool_calls[i].function``: the name on a call's first delta, then argument fragments
    (a key that a delta does not carry is absent)."""

    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(_OmitNone):
    """One entry of ``delta.tool_calls``: ``id``, ``type`` and ``function.name`` (a custom tool's
    call: ``custom.name``) on a call's first delta only, absent (not ``null``) from the later
    ones."""

    index: int
    id: str | None = None
    type: Literal["function", "custom"] | None = None
    function: DeltaFunctionCall | None = None
    custom: CustomToolCall | None = None


class _WithReasoningAlias(BaseModel):
    """A message (or delta) whose dump repeats ``reasoning_content`` as ``reasoning``, right after
    it, with the same value (``null`` included): SGLang's and DeepSeek's clients read
    ``reasoning_content``; vLLM's read ``reasoning``, the name vLLM moved to in
    vllm-project/vllm#27752 and kept alone after vllm-project/vllm#33402. The key is present
    exactly where ``reasoning_content`` is, so a choice's answer has the same shape for both."""

    @model_serializer(mode="wrap")
    def _add_reasoning(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if "reasoning_content" not in data:
            return data
        out: dict[str, Any] = {}
        for k, v in data.items():
            out[k] = v
            if k == "reasoning_content":
                out["reasoning"] = v
        return out


class ChatMessage(_WithReasoningAlias):
    """The assistant message of a chat choice (``reasoning_content``: the thinking-mode text, as SGLang
    and DeepSeek's API return it; dumped a second time as vLLM's ``reasoning``)."""

    role: str = "assistant"
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatCompletionResponseChoice(_OmitNoneIds):
    """``prompt_token_ids`` (``return_prompt_token_ids`` or ``return_token_ids``) and
    ``response_token_ids`` (``return_token_ids``: every generated id, reasoning and tool-call
    markup included), SGLang's names; with ``return_token_ids`` the generated ids also as
    ``token_ids``, vLLM's name."""

    index: int
    message: ChatMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReasonStr | None = None
    matched_stop: int | str | None = None
    #: vLLM's ``stop_reason`` (:func:`~.vllm_fields.stop_reason`)
    stop_reason: int | str | None = None
    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    token_ids: list[int] | None = None


class ChatCompletionResponse(_OmitNoneIds):
    """A non-streamed ``/v1/chat/completions`` response (``object: "chat.completion"``;
    ``prompt_logprobs``: vLLM's, of the prompt, :mod:`.prompt_logprobs`; ``prompt_token_ids``:
    vLLM's place of the prompt's ids with ``return_token_ids``, left out otherwise)."""

    id: str = Field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    object: str = "chat.completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatCompletionResponseChoice]
    usage: UsageInfo
    #: the tier that served the request when it set ``service_tier`` (:mod:`.service_tier`), left
    #: out otherwise
    service_tier: str | None = None
    #: OpenAI's backend-configuration fingerprint: always present, ``null`` (no fingerprint is
    #: kept), so that clients whose decoders require the key can read the object
    system_fingerprint: str | None = None
    prompt_logprobs: list[dict[str, PromptLogprob] | None] | None = None
    prompt_token_ids: list[int] | None = None


class DeltaMessage(_WithReasoningAlias):
    """The part of the assistant message one stream chunk adds (role first, then content,
    reasoning or tool-call deltas; ``reasoning_content`` dumped a second time as vLLM's
    ``reasoning``)."""

    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatCompletionResponseStreamChoice(_OmitNoneIds):
    """One choice of a chat stream chunk; ``finish_reason`` is set on the choice's last chunk.
    ``token_ids`` (vLLM's, with ``return_token_ids``): the generated ids this chunk adds, left out
    of chunks that add none; the concatenation over a choice's chunks is its whole output."""

    index: int
    delta: DeltaMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReasonStr | None = None
    matched_stop: int | str | None = None
    #: vLLM's ``stop_reason`` (:func:`~.vllm_fields.stop_reason`)
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None


class ChatCompletionStreamResponse(_OmitNoneIds):
    """One SSE chunk of a streamed ``/v1/chat/completions`` response
    (``object: "chat.completion.chunk"``); ``usage`` only on the usage chunk. ``prompt_token_ids``
    (vLLM's place, with ``return_token_ids`` or ``return_prompt_token_ids``): the prompt's ids, on
    each choice's first (role) chunk only, left out of the others."""

    id: str
    object: str = "chat.completion.chunk"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatCompletionResponseStreamChoice]
    usage: UsageInfo | None = None
    #: as on the non-streamed response: on every chunk when the request set ``service_tier``
    service_tier: str | None = None
    #: as on the non-streamed response: present on every chunk, ``null``
    system_fingerprint: str | None = None
    prompt_token_ids: list[int] | None = None

"""The shared pieces of the OpenAI-compatible API models (with SGLang 0.5.x's extra fields).

The request base (unknown fields ignored, ``null`` for an optional field meaning its default), the
error body of every route, ``stream_options``, ``usage``, ``/v1/models``, SGLang's extra sampling
fields of both request kinds, and the serializer that leaves unasked token ids out. Field names,
defaults and shapes follow the OpenAI API reference and SGLang's ``srt/entrypoints/openai/protocol.py``
(read for behaviour; written independently). The route models are in :mod:`.protocol_completions`,
:mod:`.protocol_chat` and :mod:`.protocol_tokenize`; :mod:`.protocol` re-exports them all.
"""

from __future__ import annotations

import time
import typing
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

__all__ = [
    "FinishReasonStr",
    "ErrorResponse",
    "error_body",
    "error_type_for_status",
    "StreamOptions",
    "PromptTokensDetails",
    "CompletionTokensDetails",
    "UsageInfo",
    "ModelCard",
    "ModelList",
    "ModelPermission",
    "UNSUPPORTED_OPENAI_FIELDS",
]

FinishReasonStr = Literal["stop", "length", "abort", "content_filter", "tool_calls"]


def _now() -> int:
    return int(time.time())


class _Req(BaseModel):
    """Base of the request bodies: unknown fields are ignored and an explicit ``null`` for an
    optional field means "not given" (its default applies), as vLLM's optional fields and the
    OpenAI API accept it; clients that serialise every parameter send ``"stream": null``,
    ``"logprobs": null``... A ``null`` for a required field (``messages``, ``prompt``, ``role``)
    stays an error. An empty ``model`` (``""``) is not given either where ``model`` is optional:
    the served model answers, as vLLM does for it (SGLang serves any name)."""

    model_config = ConfigDict(extra="ignore", protected_namespaces=())

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        if data.get("model") == "" and "model" in fields and not fields["model"].is_required():
            data = {k: v for k, v in data.items() if k != "model"}
        if None not in data.values():
            return data
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
    405: "MethodNotAllowedError",
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


#: The challenge every 401 carries in ``WWW-Authenticate``: RFC 9110 section 15.5.2 says a server
#: sending 401 MUST send that header with at least one challenge for the resource, and the key is a
#: bearer token (RFC 6750 section 3: scheme ``Bearer``; Anthropic's ``x-api-key`` is accepted too).
WWW_AUTHENTICATE_CHALLENGE = 'Bearer realm="sglang"'


def auth_challenge_headers(status: int) -> dict[str, str] | None:
    """The headers an error answer with HTTP ``status`` adds: ``{"WWW-Authenticate": ...}``
    (:data:`WWW_AUTHENTICATE_CHALLENGE`) for a 401, else None (no extra header)."""
    return {"WWW-Authenticate": WWW_AUTHENTICATE_CHALLENGE} if status == 401 else None


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


class ModelPermission(BaseModel):
    """vLLM's entry of a model card's ``permission`` list (OpenAI's retired model-permission
    object): sampling, log-probabilities and viewing allowed; engines, search indices and
    fine-tuning not."""

    id: str = Field(default_factory=lambda: f"modelperm-{uuid.uuid4().hex}")
    object: str = "model_permission"
    created: int = Field(default_factory=_now)
    allow_create_engine: bool = False
    allow_sampling: bool = True
    allow_logprobs: bool = True
    allow_search_indices: bool = False
    allow_view: bool = True
    allow_fine_tuning: bool = False
    organization: str = "*"
    group: str | None = None
    is_blocking: bool = False


class ModelCard(BaseModel):
    """One entry of ``/v1/models``: SGLang's fields (``parent``: the base model of a LoRA
    adapter's card, ``null`` for a base model's) plus vLLM's ``permission`` list."""

    id: str
    object: str = "model"
    created: int = Field(default_factory=_now)
    owned_by: str = "sglang"
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None
    permission: list[ModelPermission] = Field(default_factory=list)


class ModelList(BaseModel):
    """``/v1/models`` body."""

    object: str = "list"
    data: list[ModelCard] = Field(default_factory=list)


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
    #: SGLang's data-parallel rank pin (``routed_dp_rank`` its later name): ``0`` or a 400
    #: (:func:`~sglang_v4.entrypoints.native_api.check_dp_rank`).
    data_parallel_rank: Any = None
    routed_dp_rank: Any = None


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
    """Responses / choices whose token-id fields (``*token_ids``), vLLM's ``prompt_logprobs`` and
    OpenAI's ``service_tier`` are left out when None, so that a response without
    ``return_token_ids``, ``prompt_logprobs`` or ``service_tier`` keeps its usual shape (as
    SGLang's)."""

    @model_serializer(mode="wrap")
    def _drop_unset_ids(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        return {
            k: v
            for k, v in data.items()
            if not (v is None and (k.endswith("token_ids") or k in ("prompt_logprobs", "service_tier")))
        }

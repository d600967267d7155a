"""Pydantic models of the OpenAI-compatible API, with SGLang 0.5.x's extra fields: the import
surface of the models of the completions, chat and tokenizer routes.

The models live by route: the shared request base, error body, ``usage`` and ``/v1/models`` in
:mod:`.protocol_base`, ``/v1/completions`` in :mod:`.protocol_completions`,
``/v1/chat/completions`` in :mod:`.protocol_chat`, ``/tokenize`` / ``/detokenize`` in
:mod:`.protocol_tokenize`; this module re-exports them under their one import path. Field names,
defaults and response shapes follow the OpenAI API reference and SGLang's
``srt/entrypoints/openai/protocol.py`` (read for behaviour; written independently). Unknown request
fields are ignored, as OpenAI-compatible servers (SGLang included) do.
"""

from __future__ import annotations

from sglang_v4.entrypoints.openai.protocol_base import (
    UNSUPPORTED_OPENAI_FIELDS,
    WWW_AUTHENTICATE_CHALLENGE,
    CompletionTokensDetails,
    ErrorResponse,
    FinishReasonStr,
    ModelCard,
    ModelList,
    ModelPermission,
    PromptTokensDetails,
    StreamOptions,
    UsageInfo,
    auth_challenge_headers,
    error_body,
    error_type_for_status,
)
from sglang_v4.entrypoints.openai.protocol_base import _Req as _Req
from sglang_v4.entrypoints.openai.protocol_chat import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
    ChatCompletionTokenLogprob,
    ChatMessage,
    ChatMessageParam,
    ChoiceLogprobs,
    CustomToolCall,
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    FunctionCall,
    ToolCall,
    TopLogprob,
)
from sglang_v4.entrypoints.openai.protocol_completions import (
    CompletionRequest,
    CompletionResponse,
    CompletionResponseChoice,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
    LogProbs,
)
from sglang_v4.entrypoints.openai.protocol_tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)

__all__ = [
    "WWW_AUTHENTICATE_CHALLENGE",
    "auth_challenge_headers",
    "ErrorResponse",
    "error_body",
    "error_type_for_status",
    "FinishReasonStr",
    "StreamOptions",
    "PromptTokensDetails",
    "CompletionTokensDetails",
    "UsageInfo",
    "ModelCard",
    "ModelList",
    "ModelPermission",
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
    "TokenizeRequest",
    "TokenizeResponse",
    "UNSUPPORTED_OPENAI_FIELDS",
    "DetokenizeRequest",
    "DetokenizeResponse",
]

"""``POST /v1/completions`` models: the request and the (streamed) response, choice and legacy
``logprobs``.

Field names, defaults and shapes follow the OpenAI API reference (legacy completions) and SGLang's
``srt/entrypoints/openai/protocol.py`` (read for behaviour; written independently); vLLM's extra
request fields come from :class:`~.protocol_vllm.VllmCompletionFields`.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, Field, field_validator

from sglang_v4.entrypoints.openai.protocol_base import (
    FinishReasonStr,
    StreamOptions,
    UsageInfo,
    _now,
    _OmitNoneIds,
    _SamplingExtras,
)
from sglang_v4.entrypoints.openai.protocol_vllm import PromptLogprob, VllmCompletionFields

__all__ = [
    "CompletionRequest",
    "LogProbs",
    "CompletionResponseChoice",
    "CompletionResponse",
    "CompletionResponseStreamChoice",
    "CompletionStreamResponse",
]


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

    @field_validator("logprobs", mode="before")
    @classmethod
    def _logprobs_boolean(cls, v: Any) -> Any:
        """A boolean ``logprobs`` (chat's spelling, which clients and proxies send here too) is
        read as SGLang and vLLM read it: ``true`` is 1, ``false`` is 0 (their lax integer
        validation). Only this field: elsewhere a boolean for a number stays a 400
        (:func:`~.request_errors.validate_request`)."""
        return int(v) if isinstance(v, bool) else v


class LogProbs(BaseModel):
    """Completions logprobs (legacy OpenAI format)."""

    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class CompletionResponseChoice(_OmitNoneIds):
    """One choice of a ``/v1/completions`` response (``matched_stop``, ``token_ids`` and
    ``prompt_token_ids`` are SGLang's extensions, the ids left out when not asked for;
    ``stop_reason`` is vLLM's)."""

    index: int
    text: str
    logprobs: LogProbs | None = None
    finish_reason: FinishReasonStr | None = None
    matched_stop: int | str | None = None
    #: vLLM's ``stop_reason``: the stop string or requested stop token id that ended the
    #: choice, null for EOS and length (:func:`~.vllm_fields.stop_reason`)
    stop_reason: int | str | None = None
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
    #: OpenAI's backend-configuration fingerprint: always present, ``null`` (none is kept)
    system_fingerprint: str | None = None


class CompletionResponseStreamChoice(_OmitNoneIds):
    """``token_ids``: the ids generated since the previous chunk; ``prompt_token_ids``: on the
    choice's first chunk (both with ``return_token_ids``)."""

    index: int
    text: str
    logprobs: LogProbs | None = None
    finish_reason: FinishReasonStr | None = None
    matched_stop: int | str | None = None
    #: vLLM's ``stop_reason``: the stop string or requested stop token id that ended the
    #: choice, null for EOS and length (:func:`~.vllm_fields.stop_reason`)
    stop_reason: int | str | None = None
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
    #: as on the non-streamed response: present on every chunk, ``null``
    system_fingerprint: str | None = None

"""SGLang's and vLLM's tokenizer routes: ``POST /tokenize`` and ``POST /detokenize`` (also under
``/v1/``) request and answer models.

Field names follow SGLang's ``srt/entrypoints/openai/protocol.py`` and vLLM's tokenizer routes
(read for behaviour; written independently).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_serializer, model_validator

from sglang_v4.entrypoints.openai.protocol_base import _Req

__all__ = ["TokenizeRequest", "TokenizeResponse", "DetokenizeRequest", "DetokenizeResponse"]


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
    """``/detokenize`` answer: ``text``, the text of ``tokens`` (a list of texts for a list of id
    lists; SGLang's field), and ``prompt``, the same value under vLLM's name for it (vLLM's
    ``DetokenizeResponse`` answers ``{"prompt": ...}``), so clients of either server read it."""

    text: str | list[str]
    prompt: str | list[str] | None = None

    @model_validator(mode="after")
    def _prompt_is_text(self) -> DetokenizeResponse:
        self.prompt = self.text
        return self

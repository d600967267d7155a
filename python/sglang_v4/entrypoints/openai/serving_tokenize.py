"""``/tokenize`` and ``/detokenize`` (also under ``/v1/``): the tokenizer as a route.

SGLang serves both (``srt/entrypoints/openai/serving_tokenize.py``; behaviour read, not copied), as
does vLLM; clients use them to count a prompt's tokens before sending it, or to turn ids from
``/generate`` back into text. Shapes:

* ``POST /tokenize`` ``{"prompt": "text" | ["t1", "t2"], "add_special_tokens": true}`` ->
  ``{"tokens": [ids] | [[ids], [ids]], "count": n | [n1, n2], "max_model_len": context}``.
  ``add_special_tokens`` adds BOS / EOS as the tokenizer's config says (what ``/generate`` and
  ``/v1/completions`` do with a text prompt, so ``count`` is their ``prompt_tokens``).
* ``POST /tokenize`` ``{"messages": [...], ...chat fields}``: the prompt ``/v1/chat/completions``
  would build from the same body (tools, thinking, ``add_generation_prompt``...), so ``count``
  equals that route's ``usage.prompt_tokens``.
* ``"return_token_strs": true`` (vLLM's field) adds ``token_strs``, the tokenizer's token string of
  each id (``convert_ids_to_tokens``: byte-level pieces such as ``"Ġworld"``), shaped as ``tokens``.
* ``POST /detokenize`` ``{"tokens": [ids] | [[ids], ...], "skip_special_tokens": true}`` ->
  ``{"text": "..." | ["...", ...], "prompt": <the same>}`` (``text`` is SGLang's name, ``prompt``
  vLLM's).

Nothing is checked against the context length here (a client asks precisely to learn whether its
prompt fits); ids outside the vocabulary are a 400 naming ``tokens``.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from sglang_v4.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from sglang_v4.entrypoints.openai.request_errors import (
    check_token_ids_in_vocab,
    check_user_message_contents,
)
from sglang_v4.entrypoints.openai.serving_base import OpenAIServingBase, RequestError, validate_request
from sglang_v4.prompt_tokens import encode_with_plain_spans
from sglang_v4.utils import run_blocking

__all__ = ["TokenizeMixin", "TOKENIZE_IN_THREAD_CHARS"]

#: Texts longer than this (characters) are tokenized in a worker thread, off the event loop.
TOKENIZE_IN_THREAD_CHARS = 16384


class TokenizeMixin(OpenAIServingBase):
    """The ``/tokenize`` and ``/detokenize`` routes (mixed into
    :class:`~sglang_v4.entrypoints.openai.serving.OpenAIServing`, whose chat part provides
    ``_plan_chat``)."""

    _plan_chat: Any

    async def tokenize(self, request: Request) -> Response:
        """``POST /tokenize`` / ``/v1/tokenize``."""
        return await self._guard(request, self._tokenize)

    async def detokenize(self, request: Request) -> Response:
        """``POST /detokenize`` / ``/v1/detokenize``."""
        return await self._guard(request, self._detokenize)

    async def _encode(
        self, text: str, add_special_tokens: bool, plain_spans: tuple[tuple[int, int], ...] = ()
    ) -> list[int]:
        """Token ids of ``text``; long texts in a worker thread (GIL released where possible).
        ``plain_spans``: a chat prompt's request text, tokenized as plain text as the chat route does
        (:func:`~sglang_v4.prompt_tokens.encode_with_plain_spans`)."""
        tok = self.tokenizer
        if plain_spans:
            if len(text) <= TOKENIZE_IN_THREAD_CHARS:
                return encode_with_plain_spans(tok, text, plain_spans)
            return await run_blocking(encode_with_plain_spans, tok, text, plain_spans)
        if len(text) <= TOKENIZE_IN_THREAD_CHARS:
            return list(tok.encode(text, add_special_tokens=add_special_tokens))
        encode = getattr(tok, "encode_releasing_gil", None) or tok.encode
        return list(await run_blocking(encode, text, add_special_tokens=add_special_tokens))

    async def _tokenize(self, request: Request) -> Response:
        """Raises RequestError: 400 for neither / both of ``prompt`` and ``messages``, a bad field,
        or messages the chat route would refuse; 404 for an unknown ``model``."""
        req: TokenizeRequest = await self._parse(request, TokenizeRequest)
        self._check_model(req.model)
        if (req.prompt is None) == (req.messages is None):
            raise RequestError("Exactly one of prompt or messages must be given.", param="prompt")
        if req.messages is not None:
            # The chat route's own parsing and rendering: the same fields, errors and prompt.
            data = req.model_dump(exclude={"prompt", "add_special_tokens"}, exclude_none=True)
            chat: ChatCompletionRequest = validate_request(ChatCompletionRequest, data)
            check_user_message_contents(chat.messages)
            plan = self._plan_chat(chat)
            ids = await self._encode(plan.prompt, False, plan.plain_spans)
            resp = TokenizeResponse(tokens=ids, count=len(ids), max_model_len=self._context_len())
        elif isinstance(req.prompt, str):
            ids = await self._encode(req.prompt, req.add_special_tokens)
            resp = TokenizeResponse(tokens=ids, count=len(ids), max_model_len=self._context_len())
        else:
            batch = [await self._encode(p, req.add_special_tokens) for p in req.prompt or []]
            resp = TokenizeResponse(
                tokens=batch, count=[len(b) for b in batch], max_model_len=self._context_len()
            )
        if req.return_token_strs:
            to_strs = self.tokenizer.convert_ids_to_tokens
            if isinstance(req.prompt, list):
                resp.token_strs = [list(to_strs(list(ids))) for ids in resp.tokens]  # type: ignore[union-attr]
            else:
                resp.token_strs = list(to_strs(list(resp.tokens)))  # type: ignore[arg-type]
        return JSONResponse(resp.model_dump(mode="json"))

    async def _detokenize(self, request: Request) -> Response:
        """Raises RequestError: 400 naming ``tokens`` for an id outside ``[0, vocab_size)``; 404
        for an unknown ``model``."""
        req: DetokenizeRequest = await self._parse(request, DetokenizeRequest)
        self._check_model(req.model)
        batched = bool(req.tokens) and isinstance(req.tokens[0], list)
        seqs: list[list[int]] = list(req.tokens) if batched else [list(req.tokens)]  # type: ignore[arg-type]
        check_token_ids_in_vocab(seqs, batched, self._vocab_size(), "tokens")
        tok = self.tokenizer
        texts = [tok.decode(seq, skip_special_tokens=req.skip_special_tokens) for seq in seqs]
        resp = DetokenizeResponse(text=texts if batched else texts[0])
        return JSONResponse(resp.model_dump(mode="json"))

"""The OpenAI-compatible routes over a tokenizer manager: ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions``, ``/v1/responses`` (with ``/v1/responses/input_tokens``), ``/tokenize`` and ``/detokenize``, SGLang's parser
routes ``/separate_reasoning`` and ``/parse_function_call``, the Files and Batch APIs
``/v1/files`` and ``/v1/batches`` (:mod:`.serving_files`, :mod:`.serving_batch`), SageMaker's
``/invocations`` (a chat or completions request by its body) (shared handling in
:mod:`.serving_base`, the routes in :mod:`.serving_completions`, :mod:`.serving_chat`,
:mod:`.serving_responses`, :mod:`.serving_responses_tokens`, :mod:`.serving_tokenize` and :mod:`.serving_parsers`). ``/v1/embeddings``, ``/v1/classify`` and ``/v1/rerank`` answer SGLang's 400 for a
generation model."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from sglang_v4.entrypoints.native_api import NOT_AN_EMBEDDING_MODEL_MSG, NOT_AN_EMBEDDING_MODEL_ROUTE_MSG
from sglang_v4.entrypoints.openai.serving_base import (
    MAX_TOP_LOGPROBS,
    RequestError,
    error_response,
    read_json_object,
)
from sglang_v4.entrypoints.openai.serving_batch import BatchMixin
from sglang_v4.entrypoints.openai.serving_chat import ChatMixin
from sglang_v4.entrypoints.openai.serving_completions import CompletionsMixin
from sglang_v4.entrypoints.openai.serving_parsers import ParsersMixin
from sglang_v4.entrypoints.openai.serving_responses_tokens import ResponsesInputTokensMixin
from sglang_v4.entrypoints.openai.serving_tokenize import TokenizeMixin

__all__ = ["OpenAIServing", "RequestError", "error_response", "MAX_TOP_LOGPROBS"]


class OpenAIServing(
    ResponsesInputTokensMixin, ChatMixin, CompletionsMixin, TokenizeMixin, ParsersMixin, BatchMixin
):
    """The OpenAI routes (and SGLang's tokenizer routes) over a tokenizer manager.

    Args:
        tokenizer_manager: object with ``async generate_request(obj, request)`` (SGLang-shaped
            outputs) and, optionally, ``tokenizer`` (``encode``/``decode``), ``model_config``
            (``vocab_size``, ``context_len``), ``grammar_enabled`` attributes.
        server_args: object with ``served_model_name`` / ``resolved_served_model_name()``,
            ``model_path``, ``api_key``, ``enable_cache_report``, ``context_length`` and,
            optionally, ``tool_call_parser``, ``reasoning_parser``, ``chat_template``.

    Raises:
        ValueError: an unknown parser name; OSError: an unreadable ``chat_template`` file.
    """

    def __init__(self, tokenizer_manager: Any, server_args: Any) -> None:
        super().__init__(tokenizer_manager, server_args)
        self.load_chat_sampling_defaults()
        self._load_chat_template()

    async def embeddings_unsupported(self, request: Request, rerank: bool = False) -> Response:
        """``POST /v1/embeddings``, ``/v1/classify`` and ``/v1/rerank``: the model is a generation
        model, so (after the API key and a JSON-object body are checked) a 400 in the OpenAI error
        shape with SGLang's message for an embedding request to a generation model followed by a
        sentence saying that sglang-v4 does not support ``--is-embedding``
        (:data:`~sglang_v4.entrypoints.native_api.NOT_AN_EMBEDDING_MODEL_ROUTE_MSG`). SGLang's
        ``/v1/rerank`` (``rerank``) sends the query-document pairs to a cross-encoder as an
        embedding request, so a generation model refuses it with SGLang's message alone."""
        message = NOT_AN_EMBEDDING_MODEL_MSG if rerank else NOT_AN_EMBEDDING_MODEL_ROUTE_MSG

        async def refuse(req: Request) -> Response:
            await read_json_object(req)
            raise RequestError(message)

        return await self._guard(request, refuse)

    async def invocations(self, request: Request) -> Response:
        """``POST /invocations`` (SageMaker's inference route, as vLLM serves it): after the API
        key, a JSON object with ``messages`` is answered as ``/v1/chat/completions``, one with
        ``prompt`` as ``/v1/completions``; any other body is a 400 naming both fields."""

        async def dispatch(req: Request) -> Response:
            body = await read_json_object(req)  # the body is cached: the route reads it again
            if "messages" in body:
                return await self._chat(req)
            if "prompt" in body:
                return await self._completions(req)
            raise RequestError(
                "An /invocations body must hold 'messages' (a chat completion) or 'prompt' (a completion).",
                param="messages",
            )

        return await self._guard(request, dispatch)

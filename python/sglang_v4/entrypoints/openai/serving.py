"""The OpenAI-compatible routes over a tokenizer manager: ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions``, ``/tokenize`` and ``/detokenize`` (shared handling in :mod:`.serving_base`,
the routes in :mod:`.serving_completions`, :mod:`.serving_chat` and :mod:`.serving_tokenize`)."""

from __future__ import annotations

from typing import Any

from sglang_v4.entrypoints.openai.serving_base import MAX_TOP_LOGPROBS, RequestError, error_response
from sglang_v4.entrypoints.openai.serving_chat import ChatMixin
from sglang_v4.entrypoints.openai.serving_completions import CompletionsMixin
from sglang_v4.entrypoints.openai.serving_tokenize import TokenizeMixin

__all__ = ["OpenAIServing", "RequestError", "error_response", "MAX_TOP_LOGPROBS"]


class OpenAIServing(ChatMixin, CompletionsMixin, TokenizeMixin):
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
        self._load_chat_template()

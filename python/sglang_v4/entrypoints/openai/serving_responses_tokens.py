"""``POST /v1/responses/input_tokens``: OpenAI's input-token count of a Responses request.

The body takes the prompt fields of ``POST /v1/responses`` (``input``, ``instructions``,
``tools``, ``tool_choice``, ``text``, ``reasoning``, ``previous_response_id``, SGLang's
``chat_template_kwargs``), checked as that route checks them, and the answer is
``{"object": "response.input_tokens", "input_tokens": N}`` with N the token count of the prompt a
``/v1/responses`` call with those fields runs on: its ``usage.input_tokens`` (with ``truncation:
"auto"``, that of the conversation cut to fit the context, :mod:`.responses_truncation`). Nothing is generated
or stored. Errors are the Responses route's (400 naming the field, 404 for an unknown model or
``previous_response_id``).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from sglang_v4.entrypoints.openai.protocol import ChatCompletionRequest
from sglang_v4.entrypoints.openai.protocol_responses import ResponsesInputTokens, ResponsesInputTokensRequest
from sglang_v4.entrypoints.openai.responses_input import text_with_response_format
from sglang_v4.entrypoints.openai.responses_input_items import resolve_item_references
from sglang_v4.entrypoints.openai.responses_request_checks import check_responses_request
from sglang_v4.entrypoints.openai.responses_truncation import fit_to_context
from sglang_v4.entrypoints.openai.serving_base import RequestError, read_json_object, validate_request
from sglang_v4.entrypoints.openai.serving_responses import ResponsesMixin, _responses_error
from sglang_v4.prompt_tokens import encode_with_plain_spans
from sglang_v4.utils import run_blocking

__all__ = ["ResponsesInputTokensMixin"]


class ResponsesInputTokensMixin(ResponsesMixin):
    """The ``/v1/responses/input_tokens`` route (mixed into :class:`~.serving.OpenAIServing`)."""

    async def count_response_input_tokens(self, request: Request) -> Response:
        """``POST /v1/responses/input_tokens``."""
        return await self._guard(request, self._count_response_input_tokens)

    async def _count_response_input_tokens(self, request: Request) -> Response:
        req: ResponsesInputTokensRequest = validate_request(
            ResponsesInputTokensRequest, await read_json_object(request)
        )
        self._check_model(req.model)
        check_responses_request(req)
        req.input = resolve_item_references(req.input, self.responses_store.find_item)
        req.text = text_with_response_format(req.text, req.response_format)
        chat_req, messages = self._chat_request_of(req, self._history(req))

        async def encode(chat: ChatCompletionRequest) -> list[int]:
            plan = self._plan_chat(chat)
            return await run_blocking(encode_with_plain_spans, self.tokenizer, plan.prompt, plan.plain_spans)

        async def measure(kept: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
            ids = await encode(self._chat_request_of(req, [], kept)[0])
            return ids, ids

        try:
            if req.truncation == "auto":  # the count of the prompt the response would run on
                ids, _ = await fit_to_context(messages, measure, self._context_len(), req.max_output_tokens)
            else:
                ids = await encode(chat_req)
        except RequestError as e:
            raise _responses_error(e) from None
        return JSONResponse(ResponsesInputTokens(input_tokens=len(ids)).model_dump())

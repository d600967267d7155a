"""FastAPI router of Anthropic's Messages API (integration seam for the HTTP server)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from sglang_v4.entrypoints.anthropic.serving_messages import AnthropicServing

__all__ = ["create_anthropic_router"]


def create_anthropic_router(openai_serving: Any) -> APIRouter:
    """Build the router with ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

    Args:
        openai_serving: the server's :class:`~sglang_v4.entrypoints.openai.serving.OpenAIServing`
            (``router.serving`` of :func:`~sglang_v4.entrypoints.openai.api.create_openai_router`),
            whose chat path the Messages routes run on.

    Returns:
        An ``APIRouter``; mount with ``app.include_router(router)``. Each route checks the API key
        itself (``x-api-key`` or ``Authorization: Bearer``; 401 in Anthropic's error shape) and
        validates the body itself (400). The :class:`AnthropicServing` is ``router.serving``.
    """
    serving = AnthropicServing(openai_serving)
    router = APIRouter()

    @router.post("/v1/messages")
    async def v1_messages(request: Request) -> Response:
        return await serving.messages(request)

    @router.post("/v1/messages/count_tokens")
    async def v1_messages_count_tokens(request: Request) -> Response:
        return await serving.count_tokens(request)

    router.serving = serving  # type: ignore[attr-defined]
    return router

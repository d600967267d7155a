"""Anthropic's Messages API (``/v1/messages``, ``/v1/messages/count_tokens``) on the chat path of
the OpenAI-compatible routes: protocol models, request and output conversion, serving, router.

``create_anthropic_router`` is imported on first use, so that :mod:`.protocol` (read by the
admission middleware for its error shape) can be imported without the serving modules.
"""

from typing import Any

__all__ = ["create_anthropic_router"]


def __getattr__(name: str) -> Any:
    if name == "create_anthropic_router":
        from sglang_v4.entrypoints.anthropic.api import create_anthropic_router

        return create_anthropic_router
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""OpenAI-compatible API: protocol models, serving logic, router.

``create_openai_router`` is imported on first use, so that the light parser modules
(``tool_parser``, ``reasoning_parser``) can be imported without FastAPI.
"""

from typing import Any

__all__ = ["create_openai_router"]


def __getattr__(name: str) -> Any:
    if name == "create_openai_router":
        from sglang_v4.entrypoints.openai.api import create_openai_router

        return create_openai_router
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""OpenAI-compatible API: protocol models, serving logic, router."""

from sglang_v4.entrypoints.openai.api import create_openai_router

__all__ = ["create_openai_router"]

"""The optional route families of the HTTP server: the OpenAI-compatible router
(``entrypoints/openai``: ``/v1/*``, ``/tokenize``, ``/detokenize``), ``POST /v1/score`` and
Anthropic's Messages API on the chat path (``entrypoints/anthropic``), mounted on the app
(:func:`mount_openai`; the native API alone when the OpenAI package is absent), and their modules
imported ahead of time while the model loads (:func:`import_route_modules`).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI

from sglang_v4.managers.tokenizer_manager import TokenizerManager
from sglang_v4.server_args import ServerArgs

__all__ = ["import_route_modules", "mount_openai"]

logger = logging.getLogger(__name__)


def import_route_modules() -> None:
    """Import what :func:`mount_openai` and the first requests would import lazily: the OpenAI,
    score and Anthropic route modules, and ``pydantic.v1``, which FastAPI imports the first time
    it builds a route's body model (to tell pydantic v1 models apart). The launcher calls it while
    the scheduler process loads the model, when this process has nothing else to do."""
    import warnings

    import sglang_v4.entrypoints.anthropic.api  # noqa: F401 - the package imports it on first use
    import sglang_v4.entrypoints.openai.serving_score  # noqa: F401

    try:
        import sglang_v4.entrypoints.openai.api  # noqa: F401
    except ImportError:  # the native API only (see mount_openai)
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import pydantic.v1  # noqa: F401
        except ImportError:  # a pydantic without the v1 shim: FastAPI does not look for it either
            pass


def mount_openai(app: FastAPI, tm: TokenizerManager, server_args: ServerArgs) -> Any:
    """Mount ``entrypoints.openai.create_openai_router`` when that module exists, and the
    Anthropic Messages routes (``entrypoints.anthropic``) on its chat path; the router's
    ``OpenAIServing`` (None without the OpenAI routes)."""
    try:
        from sglang_v4.entrypoints.openai import create_openai_router  # type: ignore[attr-defined]
    except ImportError:
        logger.info("OpenAI router not available; serving the native API only.")
        return None
    router = create_openai_router(tm, server_args)
    app.include_router(router)
    from sglang_v4.entrypoints.openai.serving_score import create_score_router

    app.include_router(create_score_router(tm, server_args))  # POST /v1/score
    from sglang_v4.entrypoints.anthropic import create_anthropic_router

    app.include_router(create_anthropic_router(router.serving))  # type: ignore[attr-defined]
    return router.serving  # type: ignore[attr-defined]

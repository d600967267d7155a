"""The server's ``/openapi.json``: FastAPI's document of the routes, completed with what the route
signatures cannot tell it.

The OpenAI-compatible routes read their JSON body themselves (so that a bad body is a 400 in
OpenAI's / SGLang's error shape, not FastAPI's 422), so FastAPI sees no request model and documents
no body. :func:`install_openapi` adds:

* each such route's ``requestBody``: the JSON Schema of the pydantic model the route validates the
  body with (pydantic's validation-mode schema, the models' shared definitions under
  ``components.schemas``), as vLLM's and SGLang's documents have them (their routes take the model
  as a parameter);
* a ``default`` response on every operation: the error body (:data:`ERROR_SCHEMA`) that any route
  may answer with a 4xx / 5xx status (bad body, API key, draining, unknown id).

The document stays OpenAPI 3.1 (JSON Schema 2020-12 schemas), built once on first request.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

__all__ = ["ERROR_SCHEMA", "install_openapi", "request_body_models"]

#: The error bodies of the server: OpenAI's nested ``error`` object (with SGLang's flat keys beside
#: it on the OpenAI routes), SGLang's native ``{"error": ...}``, or FastAPI's ``detail``.
ERROR_SCHEMA: dict[str, Any] = {
    "title": "ErrorBody",
    "type": "object",
    "properties": {
        "error": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "message": {"type": "string"},
                        "type": {"type": "string"},
                        "param": {"type": ["string", "null"]},
                        "code": {"type": ["integer", "string", "null"]},
                    },
                    "required": ["message"],
                },
                {"type": "string"},
            ]
        },
        "object": {"type": "string"},
        "message": {"type": "string"},
        "detail": {},
    },
    "anyOf": [{"required": ["error"]}, {"required": ["message"]}, {"required": ["detail"]}],
}


def request_body_models() -> dict[tuple[str, str], list[type[BaseModel]]]:
    """The request models of the routes that read their body themselves, keyed by (lower-case
    method, path); a route with several models takes a body matching any of them (``/tokenize``:
    a prompt or a chat conversation). Empty when the OpenAI routes are not installed."""
    try:
        from sglang_v4.entrypoints.anthropic.protocol import CountTokensRequest, MessagesRequest
        from sglang_v4.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
        from sglang_v4.entrypoints.openai.protocol_responses import (
            ResponsesInputTokensRequest,
            ResponsesRequest,
        )
        from sglang_v4.entrypoints.openai.protocol_score import ScoringRequest
        from sglang_v4.entrypoints.openai.protocol_tokenize import DetokenizeRequest, TokenizeRequest
    except ImportError:
        return {}
    tokenize: list[type[BaseModel]] = [TokenizeRequest, ChatCompletionRequest]
    return {
        ("post", "/v1/chat/completions"): [ChatCompletionRequest],
        ("post", "/v1/completions"): [CompletionRequest],
        ("post", "/invocations"): [ChatCompletionRequest, CompletionRequest],
        ("post", "/v1/responses"): [ResponsesRequest],
        ("post", "/v1/responses/input_tokens"): [ResponsesInputTokensRequest],
        ("post", "/tokenize"): tokenize,
        ("post", "/v1/tokenize"): tokenize,
        ("post", "/detokenize"): [DetokenizeRequest],
        ("post", "/v1/detokenize"): [DetokenizeRequest],
        ("post", "/v1/score"): [ScoringRequest],
        ("post", "/v1/messages"): [MessagesRequest],
        ("post", "/v1/messages/count_tokens"): [CountTokensRequest],
    }


def _complete(doc: dict[str, Any], bodies: dict[tuple[str, str], list[type[BaseModel]]]) -> dict[str, Any]:
    """``doc`` (FastAPI's document) with the request bodies of ``bodies`` and the ``default`` error
    response added in place; returns ``doc``."""
    models = sorted({m for ms in bodies.values() for m in ms}, key=lambda m: m.__name__)
    refs, top = models_json_schema(
        [(m, "validation") for m in models], ref_template="#/components/schemas/{model}"
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(top.get("$defs", {}))
    schemas["ErrorBody"] = ERROR_SCHEMA
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            ms = bodies.get((method, path))
            if ms and "requestBody" not in op:
                alts = [refs[(m, "validation")] for m in ms]
                schema = alts[0] if len(alts) == 1 else {"anyOf": alts}
                op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
            op.setdefault("responses", {}).setdefault(
                "default",
                {
                    "description": "Error",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
                },
            )
    return doc


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (served at ``/openapi.json``) FastAPI's document completed by
    :func:`_complete` with :func:`request_body_models`; built on first call (after the routes
    mounted at start-up) and cached in ``app.openapi_schema`` as FastAPI does."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            app.openapi_schema = _complete(doc, request_body_models())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

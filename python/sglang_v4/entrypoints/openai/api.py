"""FastAPI router of the OpenAI-compatible API (integration seam for the HTTP server)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from sglang_v4.entrypoints.openai.serving import OpenAIServing

__all__ = ["create_openai_router"]


def create_openai_router(tokenizer_manager: Any, server_args: Any) -> APIRouter:
    """Build the router with ``GET /v1/models[/{model}]``, ``POST /v1/completions``, ``POST /v1/chat/completions``,
    ``POST /invocations`` (SageMaker's route: one of those two, by the body),
    ``POST /v1/responses`` with ``GET`` / ``DELETE /v1/responses/{id}`` (stored responses),
    ``GET /v1/responses/{id}/input_items`` (their input items) and
    ``POST /v1/responses/input_tokens`` (the input-token count of a Responses request),
    ``POST /tokenize`` and ``POST /detokenize`` (each also under ``/v1/``, as in SGLang), and
    ``POST /v1/embeddings`` / ``/v1/classify`` and ``POST`` / ``PUT /v1/rerank`` (a 400: the model
    is not an embedding or cross-encoder model), and
    SGLang's parser routes ``POST /separate_reasoning`` and ``POST /parse_function_call``, and
    OpenAI's Files and Batch APIs: ``POST`` / ``GET /v1/files``, ``GET`` / ``DELETE
    /v1/files/{id}``, ``GET /v1/files/{id}/content``, ``POST`` / ``GET /v1/batches``,
    ``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``.

    Args:
        tokenizer_manager: provides ``generate_request(obj: GenerateReqInput, request)`` (async
            generator of SGLang-shaped dicts) and ``tokenizer``; optionally ``model_config``.
        server_args: ``ServerArgs`` (``served_model_name``, ``api_key``, ``enable_cache_report``...).

    Returns:
        An ``APIRouter``; mount with ``app.include_router(router)``. Each route checks the API key
        itself (401 in SGLang's error shape), parses and validates the body itself (400), so no app
        exception handlers are needed. The :class:`OpenAIServing` instance is ``router.serving``.
    """
    serving = OpenAIServing(tokenizer_manager, server_args)
    router = APIRouter()

    # "/v1/models/" lists too: the catch-all below would read it as the model "" (a 404)
    @router.get("/v1/models/", include_in_schema=False)
    @router.get("/v1/models")
    async def v1_models(request: Request) -> Response:
        return await serving.models(request)

    @router.get("/v1/models/{model:path}")
    async def v1_retrieve_model(model: str, request: Request) -> Response:
        return await serving.retrieve_model(request, model)

    @router.post("/v1/completions")
    async def v1_completions(request: Request) -> Response:
        return await serving.completions(request)

    @router.post("/v1/chat/completions")
    async def v1_chat_completions(request: Request) -> Response:
        return await serving.chat_completions(request)

    @router.post("/invocations")
    async def invocations(request: Request) -> Response:
        return await serving.invocations(request)

    @router.post("/v1/responses")
    async def v1_responses(request: Request) -> Response:
        return await serving.create_response(request)

    @router.post("/v1/responses/input_tokens")
    async def v1_responses_input_tokens(request: Request) -> Response:
        return await serving.count_response_input_tokens(request)

    @router.get("/v1/responses/{response_id}")
    async def v1_retrieve_response(response_id: str, request: Request) -> Response:
        return await serving.retrieve_response(request, response_id)

    @router.get("/v1/responses/{response_id}/input_items")
    async def v1_response_input_items(response_id: str, request: Request) -> Response:
        return await serving.list_input_items(request, response_id)

    @router.post("/v1/responses/{response_id}/cancel")
    async def v1_cancel_response(response_id: str, request: Request) -> Response:
        return await serving.cancel_response(request, response_id)

    @router.delete("/v1/responses/{response_id}")
    async def v1_delete_response(response_id: str, request: Request) -> Response:
        return await serving.delete_response(request, response_id)

    @router.post("/v1/embeddings")
    @router.post("/v1/classify")
    async def v1_embeddings(request: Request) -> Response:
        return await serving.embeddings_unsupported(request)

    @router.post("/v1/rerank")
    @router.put("/v1/rerank")
    async def v1_rerank(request: Request) -> Response:
        return await serving.embeddings_unsupported(request, rerank=True)

    @router.post("/separate_reasoning")
    async def separate_reasoning(request: Request) -> Response:
        return await serving.separate_reasoning(request)

    @router.post("/parse_function_call")
    async def parse_function_call(request: Request) -> Response:
        return await serving.parse_function_call(request)

    @router.post("/v1/tokenize")
    @router.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        return await serving.tokenize(request)

    @router.post("/v1/detokenize")
    @router.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        return await serving.detokenize(request)

    @router.post("/v1/files")
    async def v1_create_file(request: Request) -> Response:
        return await serving.create_file(request)

    @router.get("/v1/files")
    async def v1_list_files(request: Request) -> Response:
        return await serving.list_files(request)

    @router.get("/v1/files/{file_id}")
    async def v1_retrieve_file(file_id: str, request: Request) -> Response:
        return await serving.retrieve_file(request, file_id)

    @router.get("/v1/files/{file_id}/content")
    async def v1_file_content(file_id: str, request: Request) -> Response:
        return await serving.file_content(request, file_id)

    @router.delete("/v1/files/{file_id}")
    async def v1_delete_file(file_id: str, request: Request) -> Response:
        return await serving.delete_file(request, file_id)

    @router.post("/v1/batches")
    async def v1_create_batch(request: Request) -> Response:
        return await serving.create_batch(request)

    @router.get("/v1/batches")
    async def v1_list_batches(request: Request) -> Response:
        return await serving.list_batches(request)

    @router.get("/v1/batches/{batch_id}")
    async def v1_retrieve_batch(batch_id: str, request: Request) -> Response:
        return await serving.retrieve_batch(request, batch_id)

    @router.post("/v1/batches/{batch_id}/cancel")
    async def v1_cancel_batch(batch_id: str, request: Request) -> Response:
        return await serving.cancel_batch(request, batch_id)

    router.serving = serving  # type: ignore[attr-defined]
    return router

"""``POST /v1/score``: SGLang's scoring API for a generation model.

For each item, the probabilities of ``label_token_ids`` as the next token after ``query + item``
(``item + query`` with ``item_first``), or their softmax over the labels (``apply_softmax``);
computed by ``TokenizerManager.score_request``
(:mod:`sglang_v4.managers.tokenizer_manager_score_mixin`, which holds the formula), all items sent
as one batch so that they share the query's KV pages in the prefix cache. SGLang serves the route
from ``srt/entrypoints/openai/serving_score.py`` (read, not copied). Shapes
(:mod:`.protocol_score`)::

    {"query": "text" | [ids], "items": "text" | ["text", ...] | [[ids], ...],
     "label_token_ids": [ids] | [[ids], ...], "apply_softmax": false, "item_first": false,
     "temperature": 1.0, "return_token_logprobs": false, "model": "default"}
    -> {"scores": [[p, ...], ...], "pooled_hidden_states": null, "token_logprobs": null | [[lp, ...]],
        "model": "default", "usage": {"prompt_tokens": n, "total_tokens": n, "completion_tokens": 0, ...},
        "object": "scoring"}

Errors are the OpenAI routes' (:mod:`.request_errors`): 401 without the API key, 400 naming the
field in ``param`` for bad input (empty ``items``, a label id outside the vocabulary, text mixed
with token ids, a wrongly typed ``query`` / ``items``...), and nothing is sent to the scheduler
then. ``model`` is echoed, not checked, as SGLang does. With ``--skip-tokenizer-init`` token-id
inputs are scored and text inputs are a 400.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from sglang_v4.entrypoints.openai.protocol import UsageInfo
from sglang_v4.entrypoints.openai.protocol_score import ScoringRequest, ScoringResponse
from sglang_v4.entrypoints.openai.request_errors import RequestError, _param_of, error_response
from sglang_v4.entrypoints.openai.serving_base import OpenAIServingBase

__all__ = ["OpenAIServingScore", "create_score_router"]


class OpenAIServingScore(OpenAIServingBase):
    """The ``/v1/score`` handler over a tokenizer manager that has ``score_request``
    (:class:`~sglang_v4.managers.tokenizer_manager_score_mixin.TokenizerManagerScoreMixin`)."""

    async def score(self, request: Request) -> Response:
        """``POST /v1/score``: the scores as JSON, or an error response (see the module docstring)."""
        denied = self.check_auth(request)
        if denied is not None:
            return denied
        try:
            return await self._score(request)
        except RequestError as e:
            return error_response(e.message, e.status, e.err_type, e.param)
        except ValueError as e:  # the tokenizer manager's RequestError / ScoreRequestError
            status = int(getattr(e, "status_code", 400) or 400)
            param = getattr(e, "param", None) or (_param_of(str(e)) if status == 400 else None)
            return error_response(str(e), status, param=param)

    async def _score(self, request: Request) -> Response:
        req: ScoringRequest = await self._parse(request, ScoringRequest)
        if req.score_extraction_token is not None:
            raise RequestError(
                "score_extraction_token is not supported by sglang-v4.", param="score_extraction_token"
            )
        result = await self.tm.score_request(
            query=req.query,
            items=req.items,
            label_token_ids=req.label_token_ids,
            apply_softmax=req.apply_softmax,
            item_first=req.item_first,
            embed_override_token_id=req.embed_override_token_id,
            query_embed_overrides=req.query_embed_overrides,
            item_embed_overrides=req.item_embed_overrides,
            request=request,
            return_pooled_hidden_states=req.return_pooled_hidden_states,
            temperature=req.temperature,
            return_token_logprobs=req.return_token_logprobs,
        )
        resp = ScoringResponse(
            scores=result.scores,
            token_logprobs=result.token_logprobs,
            model=req.model,
            usage=UsageInfo(prompt_tokens=result.prompt_tokens, total_tokens=result.prompt_tokens),
        )
        # orjson, as SGLang's ORJSONResponse: a -inf logprob is written as null, not refused
        return Response(content=orjson.dumps(resp.model_dump()), media_type="application/json")


def create_score_router(tokenizer_manager: Any, server_args: Any) -> APIRouter:
    """The router with ``POST /v1/score``; mount with ``app.include_router``.

    Args:
        tokenizer_manager: has ``score_request`` (the ``TokenizerManager``).
        server_args: ``ServerArgs`` (``api_key``, ``served_model_name``...).
    """
    serving = OpenAIServingScore(tokenizer_manager, server_args)
    router = APIRouter()

    @router.post("/v1/score")
    async def v1_score(request: Request) -> Response:
        return await serving.score(request)

    return router

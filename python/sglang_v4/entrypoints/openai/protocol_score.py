"""Pydantic models of SGLang's scoring route ``POST /v1/score``: the request and the response.

Field names, types and defaults are SGLang 0.5.x's ``ScoringRequest`` / ``ScoringResponse``
(``srt/entrypoints/openai/protocol.py``, read, not copied). Requests are validated in pydantic's
strict mode (:func:`~.request_errors.validate_request`), so a wrongly typed field, or ``items``
mixing texts and token-id lists, is a 400 naming the field.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from sglang_v4.entrypoints.openai.protocol import UsageInfo, _Req

__all__ = ["ScoringRequest", "ScoringResponse"]


class ScoringRequest(_Req):
    """``POST /v1/score`` body.

    ``query`` (text or token ids) and ``items`` (one text, texts, or token-id lists) form one
    prompt per item, ``query + item`` (``item + query`` with ``item_first``); ``label_token_ids``
    (one list, or one per item) are the scored next tokens. ``apply_softmax`` normalizes over the
    labels, after dividing the logprobs by ``temperature`` (> 0, other than 1 only with
    ``apply_softmax``); ``return_token_logprobs`` adds the labels' logprobs. The embedding
    overrides, ``score_extraction_token`` and ``return_pooled_hidden_states`` are SGLang features
    sglang-v4 lacks: a 400 when set. ``model`` is echoed in the response.
    """

    query: str | list[int] | None = None
    items: str | list[str] | list[list[int]] | None = None
    embed_override_token_id: int | None = None
    query_embed_overrides: list[list[float]] | None = None
    item_embed_overrides: list[list[list[float]] | None] | None = None
    label_token_ids: list[int] | list[list[int]] | None = None
    apply_softmax: bool = False
    temperature: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    return_token_logprobs: bool = False
    item_first: bool = False
    return_pooled_hidden_states: bool = False
    score_extraction_token: str | None = None
    model: str = "default"


class ScoringResponse(BaseModel):
    """``/v1/score`` answer: ``scores[i][j]`` for item ``i`` and label ``j``;
    ``token_logprobs`` (same shape) with ``return_token_logprobs``; ``usage.prompt_tokens`` (=
    ``total_tokens``) counts the prompt tokens of all items; ``object`` is ``"scoring"``."""

    scores: list[list[float]]
    pooled_hidden_states: list[list[float] | None] | None = None
    token_logprobs: list[list[float]] | None = None
    model: str
    usage: UsageInfo | None = None
    object: str = "scoring"

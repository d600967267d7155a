"""``Engine.score`` and ``Engine.async_score``: SGLang's scoring API without HTTP (SGLang's
``srt/entrypoints/engine_score_mixin.py`` signature), over
:meth:`~sglang_v4.managers.tokenizer_manager_score_mixin.TokenizerManagerScoreMixin.score_request`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any

from sglang_v4.entrypoints.engine_python_values import plain_python_values
from sglang_v4.managers.tokenizer_manager_score_mixin import ScoreResult

__all__ = ["EngineScoreMixin"]


class EngineScoreMixin:
    """The scoring methods of :class:`~sglang_v4.entrypoints.engine.Engine` (whose attributes
    below they use)."""

    tokenizer_manager: Any
    _check_open: Callable[[], None]
    _run: Callable[[Coroutine[Any, Any, Any]], Any]
    _submit: Callable[[Coroutine[Any, Any, Any]], concurrent.futures.Future[Any]]

    def score(
        self,
        query: str | list[int] | None = None,
        items: str | list[str] | list[list[int]] | None = None,
        label_token_ids: list[int] | list[list[int]] | None = None,
        apply_softmax: bool = False,
        item_first: bool = False,
        embed_override_token_id: int | None = None,
        query_embed_overrides: Any = None,
        item_embed_overrides: Any = None,
        return_pooled_hidden_states: bool = False,
        score_extraction_token_id: int | None = None,
        temperature: float = 1.0,
        return_token_logprobs: bool = False,
        stacked_query_item_embed_overrides: Any = None,
    ) -> ScoreResult:
        """The probability of each label token as the next token after ``query + item``.

        Typical use: ``query`` a question about a candidate, ``items`` the candidates, and
        ``label_token_ids`` the ids of the answer tokens (say "Yes" and "No"): ``scores[i][j]`` is
        the probability of answer ``j`` for candidate ``i``.

        Args:
            query: text or token ids shared by every item (a prefix, or a suffix with
                ``item_first``); ``None`` is empty.
            items: one text, a list of texts, or a list of token-id lists (the kind of ``query``).
            label_token_ids: the candidate next tokens, one list for all items or one per item.
            apply_softmax: ``softmax(logprob / temperature)`` over the labels instead of
                ``exp(logprob)`` (the logprob over the whole vocabulary).
            item_first: the prompt is ``item + query``.
            temperature: > 0; other than 1 only with ``apply_softmax``.
            return_token_logprobs: the result's ``token_logprobs`` holds the labels' logprobs.
            embed_override_token_id, query_embed_overrides, item_embed_overrides,
            stacked_query_item_embed_overrides, score_extraction_token_id,
            return_pooled_hidden_states: SGLang's; sglang-v4 has no such feature (a
                ``ValueError`` when set).

        Returns:
            :class:`~sglang_v4.managers.tokenizer_manager_score_mixin.ScoreResult`: ``scores``
            ``[num_items][num_labels]``, ``prompt_tokens`` (all items), ``token_logprobs``.

        Raises:
            ValueError: bad input, the message naming the field (as ``/v1/score``'s 400).
            RuntimeError: the engine is shut down, or its backend died.
        """
        self._check_open()
        return self._run(self.tokenizer_manager.score_request(**_score_kwargs(locals())))

    async def async_score(
        self,
        query: str | list[int] | None = None,
        items: str | list[str] | list[list[int]] | None = None,
        label_token_ids: list[int] | list[list[int]] | None = None,
        apply_softmax: bool = False,
        item_first: bool = False,
        embed_override_token_id: int | None = None,
        query_embed_overrides: Any = None,
        item_embed_overrides: Any = None,
        return_pooled_hidden_states: bool = False,
        score_extraction_token_id: int | None = None,
        temperature: float = 1.0,
        return_token_logprobs: bool = False,
        stacked_query_item_embed_overrides: Any = None,
    ) -> ScoreResult:
        """:meth:`score` for asyncio callers (any event loop): same parameters, result and errors."""
        self._check_open()
        coro = self.tokenizer_manager.score_request(**_score_kwargs(locals()))
        return await asyncio.wrap_future(self._submit(coro))


def _score_kwargs(args: dict[str, Any]) -> dict[str, Any]:
    """``score``'s arguments as ``score_request``'s keywords (no HTTP request); numpy / torch
    token ids and numbers as their Python values (:mod:`~sglang_v4.entrypoints.engine_python_values`)."""
    kwargs = {k: plain_python_values(v) for k, v in args.items() if k != "self"}
    kwargs["request"] = None
    return kwargs

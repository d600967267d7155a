"""Scoring on a generation model: SGLang's ``TokenizerManager.score_request`` (behind ``POST
/v1/score`` and ``Engine.score``).

For each item the prompt is ``query + item`` (``item + query`` with ``item_first``); its score is
read from the model's next-token distribution after the prompt's last token:

* ``apply_softmax=False``: ``p_i = exp(logprob_i)`` for each label id ``i``, where ``logprob`` is
  ``log_softmax`` over the whole vocabulary of the raw logits (temperature 1, no penalty);
* ``apply_softmax=True``: ``softmax(logprob / temperature)`` over the label ids only (the scores sum
  to 1; ``logprob`` and logit differ by one constant per prompt, so this is the softmax of the label
  logits).

SGLang's rules (``srt/managers/tokenizer_manager_score_mixin.py``, read, not copied): text
``query`` and ``items`` are joined as strings and tokenized together (special tokens added as the
tokenizer's config says, as a text ``/generate`` prompt); token-id inputs are concatenated as given;
``label_token_ids`` is one list for every item or one list per item, without duplicates; a
``temperature`` other than 1 needs ``apply_softmax``. The items go to the scheduler as one batch of
``/generate`` requests (``token_ids_logprob`` = the labels, one greedy token: a prefill only), so
they share the query's KV pages through the prefix cache.

Bad input raises :class:`ScoreRequestError` (a ``ValueError``, HTTP 400) naming the field in its
message and ``param``; nothing is sent then. As in SGLang, an empty ``items`` list returns no
scores (``label_token_ids`` is still required). Differences from SGLang: a prompt longer than the longest input is an error even with
``--allow-auto-truncate`` (a cut prompt would score another text); the features sglang-v4 lacks
(embedding overrides, setwise ``score_extraction_token_id``, pooled hidden states, which SGLang
refuses for a CausalLM model too) are a 400 when set.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sglang_v4.managers.control_struct import SchedulerReadyInfo
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.managers.tokenization import SKIP_TOKENIZER_TEXT_MSG, RequestError

__all__ = ["SCORE_SAMPLING_PARAMS", "ScoreRequestError", "ScoreResult", "TokenizerManagerScoreMixin"]

#: The sampling parameters of a scoring request: one greedy token (its logprobs are those of the
#: raw logits) with every parameter that changes the distribution set to its neutral value, so that
#: ``--preferred-sampling-params`` cannot change a score.
SCORE_SAMPLING_PARAMS: dict[str, Any] = {
    "max_new_tokens": 1,
    "temperature": 0.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_new_tokens": 0,
    "logit_bias": None,
    "allowed_token_ids": None,
    "bad_words_ids": None,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    "structural_tag": None,
}

#: SGLang ``score_request`` arguments of features sglang-v4 does not implement (refused when set).
_UNSUPPORTED_ARGS = (
    "embed_override_token_id",
    "query_embed_overrides",
    "item_embed_overrides",
    "stacked_query_item_embed_overrides",
    "score_extraction_token_id",
)


class ScoreRequestError(RequestError):
    """Bad scoring input (HTTP 400); ``param`` is the request field at fault."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message, 400)
        self.param = param


@dataclass(frozen=True, slots=True)
class ScoreResult:
    """What :meth:`TokenizerManagerScoreMixin.score_request` returns (SGLang's ``ScoreResult``).

    Attributes:
        scores: ``[num_items][num_labels]`` floats, item and label order kept (probabilities, or
            the softmax over the labels with ``apply_softmax``).
        prompt_tokens: the prompt tokens of all items together.
        pooled_hidden_states: always ``None`` (a generation model has no pooled head).
        token_logprobs: with ``return_token_logprobs``, ``[num_items][num_labels]`` natural-log
            probabilities over the whole vocabulary (no temperature); else ``None``.
    """

    scores: list[list[float]]
    prompt_tokens: int = 0
    pooled_hidden_states: list[Any] | None = None
    token_logprobs: list[list[float]] | None = None


def _is_id(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_id_list(x: object) -> bool:
    return isinstance(x, list) and all(_is_id(t) for t in x)


def label_scores(logprobs: Sequence[float], apply_softmax: bool, temperature: float) -> list[float]:
    """Scores of one item from its label logprobs (float64 arithmetic; see the module docstring).

    Args:
        logprobs: natural-log next-token probabilities of the labels, in label order.
        apply_softmax: softmax over the labels (after dividing by ``temperature``) instead of
            ``exp``.
        temperature: > 0; only read with ``apply_softmax``.
    """
    if not apply_softmax:
        return [math.exp(lp) if lp != -math.inf else 0.0 for lp in logprobs]
    top = max(logprobs)
    if top == -math.inf:  # no label is possible: no preference among them
        return [1.0 / len(logprobs)] * len(logprobs)
    weights = [math.exp((lp - top) / temperature) for lp in logprobs]
    total = sum(weights)
    return [w / total for w in weights]


def score_labels(label_token_ids: object, num_items: int, vocab_size: int) -> list[list[int]]:
    """``label_token_ids`` as one list per item, checked.

    Args:
        label_token_ids: one list of ids for every item, or one list per item.
        num_items: how many items are scored.
        vocab_size: ids must lie in ``[0, vocab_size)`` (0: not checked).

    Raises:
        ScoreRequestError: missing, empty, not ids, a per-item count other than ``num_items``,
            an empty or duplicated list entry, or an id outside the vocabulary.
    """
    field = "label_token_ids"
    if label_token_ids is None:
        raise ScoreRequestError(f"{field} is required for generation (CausalLM) models.", field)
    if not isinstance(label_token_ids, list) or not label_token_ids:
        raise ScoreRequestError(f"{field} must be a nonempty list of token ids.", field)
    if all(isinstance(x, list) for x in label_token_ids):
        if len(label_token_ids) != num_items:
            raise ScoreRequestError(
                f"{field} must have one list per item ({num_items} items, {len(label_token_ids)} lists).",
                field,
            )
        per_item: list[list[Any]] = list(label_token_ids)
    else:
        per_item = [label_token_ids] * num_items
    for labels in per_item:
        if not labels or not _is_id_list(labels):
            raise ScoreRequestError(
                f"{field} must be a nonempty list of integer token ids (or one such list per item).", field
            )
        for t in labels:
            if t < 0 or (vocab_size > 0 and t >= vocab_size):
                raise ScoreRequestError(
                    f"{field}: token id {t} is outside the vocabulary [0, {vocab_size}).", field
                )
        if len(set(labels)) != len(labels):
            raise ScoreRequestError(f"{field} must not contain duplicate token ids.", field)
    return [list(labels) for labels in per_item]


class TokenizerManagerScoreMixin:
    """``score_request`` for :class:`~sglang_v4.managers.tokenizer_manager.TokenizerManager`
    (whose attributes below it uses)."""

    tokenizer: Any
    vocab_size: int
    scheduler_info: SchedulerReadyInfo
    #: ``TokenizerManager.generate_request`` and ``TokenizationMixin.encode_text``
    generate_request: Callable[..., AsyncIterator[Any]]
    encode_text: Callable[..., Awaitable[list[int]]]

    async def score_request(
        self,
        query: str | list[int] | None = None,
        items: str | list[str] | list[list[int]] | None = None,
        label_token_ids: list[int] | list[list[int]] | None = None,
        apply_softmax: bool = False,
        item_first: bool = False,
        embed_override_token_id: int | None = None,
        query_embed_overrides: Any = None,
        item_embed_overrides: Any = None,
        stacked_query_item_embed_overrides: Any = None,
        request: Any = None,
        return_pooled_hidden_states: bool = False,
        score_extraction_token_id: int | None = None,
        temperature: float = 1.0,
        return_token_logprobs: bool = False,
    ) -> ScoreResult:
        """Score each item: the label tokens' probabilities as the next token (module docstring).

        Args:
            query: text or token ids shared by every item (``None``: empty).
            items: one text, texts, or token-id lists (all of one kind, the kind of ``query``).
            label_token_ids: the candidate next tokens: one list for all items or one per item.
            apply_softmax: normalize over the labels (softmax) instead of raw probabilities.
            item_first: the prompt is ``item + query``.
            request: the HTTP request (a disconnected client aborts the items), or ``None``.
            temperature: divides the logprobs before the softmax; other than 1 only with
                ``apply_softmax``.
            return_token_logprobs: also return the labels' logprobs.
            embed_override_token_id, query_embed_overrides, item_embed_overrides,
            stacked_query_item_embed_overrides, score_extraction_token_id,
            return_pooled_hidden_states: SGLang's; refused when set.

        Returns:
            A :class:`ScoreResult`.

        Raises:
            ScoreRequestError: bad input, naming the field (nothing was sent).
            RequestError: the prompts were refused by the scheduler or aborted, or the backend
                died (``status_code`` 503).
        """
        args = locals()
        for name in _UNSUPPORTED_ARGS:
            if args[name] is not None:
                raise ScoreRequestError(f"{name} is not supported by sglang-v4.", name)
        if return_pooled_hidden_states:
            raise ScoreRequestError(
                "return_pooled_hidden_states is not supported for CausalLM models.",
                "return_pooled_hidden_states",
            )
        for name in ("apply_softmax", "item_first", "return_token_logprobs"):
            if not isinstance(args[name], bool):
                raise ScoreRequestError(f"{name} must be a boolean (got {args[name]!r}).", name)
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not math.isfinite(temperature)
            or temperature <= 0
        ):
            raise ScoreRequestError(
                f"temperature must be finite and greater than zero (got {temperature!r}).", "temperature"
            )
        if temperature != 1.0 and not apply_softmax:
            raise ScoreRequestError("temperature requires apply_softmax=True.", "temperature")
        if items == []:
            if label_token_ids is None:
                raise ScoreRequestError(
                    "label_token_ids is required for a generative model.", "label_token_ids"
                )
            return ScoreResult(
                scores=[], prompt_tokens=0, token_logprobs=[] if return_token_logprobs else None
            )
        query, item_list, text = self._score_inputs(query, items)
        labels = score_labels(label_token_ids, len(item_list), self.vocab_size)
        input_ids = await self._score_input_ids(query, item_list, text, item_first)
        obj = GenerateReqInput(
            input_ids=input_ids,  # type: ignore[arg-type]
            sampling_params=dict(SCORE_SAMPLING_PARAMS),
            return_logprob=True,
            logprob_start_len=-1,
            token_ids_logprob=labels,  # type: ignore[arg-type]
        )
        agen = self.generate_request(obj, request)
        try:
            outs = await agen.__anext__()
        finally:
            await agen.aclose()  # type: ignore[attr-defined]
        scores, logprobs, prompt_tokens = [], [], 0
        for out, want in zip(outs, labels):
            meta = out["meta_info"]
            lps = _label_logprobs(meta, want)
            scores.append(label_scores(lps, apply_softmax, float(temperature)))
            logprobs.append(lps)
            prompt_tokens += int(meta.get("prompt_tokens", 0))
        return ScoreResult(
            scores=scores,
            prompt_tokens=prompt_tokens,
            token_logprobs=logprobs if return_token_logprobs else None,
        )

    def _score_inputs(self, query: object, items: object) -> tuple[Any, list[Any], bool]:
        """``(query, items as a list, whether they are text)``, their types and token ids checked
        (an omitted query is empty). Raises ScoreRequestError naming ``query`` / ``items``."""
        if items is None:
            raise ScoreRequestError("items must be provided.", "items")
        item_list: list[Any] = [items] if isinstance(items, str) else items  # type: ignore[assignment]
        if not isinstance(item_list, list) or not item_list:
            raise ScoreRequestError("items must be a string or a nonempty list.", "items")
        if all(isinstance(x, str) for x in item_list):
            text = True
        elif all(_is_id_list(x) for x in item_list):
            text = False
        else:
            raise ScoreRequestError(
                "items must be a string, a list of strings or a list of token-id lists (not a mix).", "items"
            )
        if query is None:
            query = "" if text else []
        if not isinstance(query, str) and not _is_id_list(query):
            raise ScoreRequestError("query must be a string or a list of token ids.", "query")
        if isinstance(query, str) != text:
            raise ScoreRequestError(
                "query and items must both be text or both be token ids "
                f"(query is {'text' if isinstance(query, str) else 'token ids'}).",
                "query",
            )
        if text and self.tokenizer is None:
            raise ScoreRequestError(f"query / items: {SKIP_TOKENIZER_TEXT_MSG}", "items")
        vocab = self.vocab_size
        if not text and vocab > 0:
            for name, seqs in (("query", [query]), ("items", item_list)):
                for seq in seqs:
                    bad = next((t for t in seq if not 0 <= t < vocab), None)  # type: ignore[union-attr]
                    if bad is not None:
                        raise ScoreRequestError(
                            f"{name}: token id {bad} is outside the vocabulary [0, {vocab}).", name
                        )
        return query, item_list, text

    async def _score_input_ids(
        self, query: Any, item_list: list[Any], text: bool, item_first: bool
    ) -> list[list[int]]:
        """The prompt ids of each item (from :meth:`_score_inputs`), checked like a ``/generate``
        prompt. Raises ScoreRequestError naming ``items`` (empty, or too long)."""
        prompts: list[list[int]] = []
        for i, item in enumerate(item_list):
            first, second = (item, query) if item_first else (query, item)
            try:
                ids = await self.encode_text(first + second) if text else list(first) + list(second)  # type: ignore[operator]
            except RequestError as e:
                raise ScoreRequestError(f"items[{i}]: {e}", "items") from None
            err = self.scheduler_info.check_input_ids(ids)
            if err is not None:
                raise ScoreRequestError(f"items[{i}]: {err}", "items")
            prompts.append(ids)
        return prompts


def _label_logprobs(meta: dict[str, Any], labels: list[int]) -> list[float]:
    """The labels' logprobs at the first output position of one finished item.

    Raises:
        RequestError: the item was aborted (its message and status, 400 when it has none), or
            its output carries no label logprobs (500).
    """
    reason = meta.get("finish_reason")
    if isinstance(reason, dict) and reason.get("type") == "abort":
        raise RequestError(str(reason.get("message") or "Aborted"), int(reason.get("status_code") or 400))
    entries = meta.get("output_token_ids_logprobs") or []
    first = entries[0] if entries else None
    if not first or [int(e[1]) for e in first] != labels:
        raise RequestError("The scoring request returned no label logprobs.", 500)
    return [float(e[0]) for e in first]

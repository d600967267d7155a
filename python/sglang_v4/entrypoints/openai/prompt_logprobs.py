"""vLLM's ``prompt_logprobs`` on ``/v1/completions`` and ``/v1/chat/completions``.

The request field (an integer, vLLM's ``SamplingParams.prompt_logprobs``) asks for the prompt's
own logprobs. The answer is vLLM's ``PromptLogprobs`` shape (vLLM's ``vllm/logprobs.py`` and
``append_logprobs_for_next_position``; its OpenAI server returns it per choice on
``/v1/completions``, ``CompletionResponseChoice.prompt_logprobs``, and once at the top of a
``/v1/chat/completions`` response, ``ChatCompletionResponse.prompt_logprobs``): one item per
prompt token, ``null`` for the first (nothing precedes it), then a JSON object keyed by token id
(as a string) whose values are ``{"logprob", "rank", "decoded_token"}``:

* first the prompt token itself, ``rank`` its rank among the whole vocabulary's logprobs (vLLM's
  count of logprobs at least the token's, :func:`~sglang_v4.sampling.sampler.token_ranks`);
* then the ``prompt_logprobs`` most likely tokens, ``rank`` 1, 2, ... in order. A prompt token
  that is among them keeps its first place in the object and takes the top list's rank (vLLM
  inserts it twice into one dict: the later value wins, the key keeps its place), so an object
  has ``prompt_logprobs`` or ``prompt_logprobs + 1`` entries; ``0`` gives the prompt token alone.

``logprob`` is the natural-log probability under the model's raw logits (no temperature or other
sampling parameter), ``-inf`` written as ``-9999.0`` (vLLM's ``clamp_prompt_logprobs``);
``decoded_token`` the token decoded alone (vLLM's ``convert_ids_list_to_tokens``; ``null``
without a tokenizer).

Checks, in vLLM's order and words (its request validators, then its engine's max-logprobs rule),
each a 400 naming ``prompt_logprobs``: a value other than 0 with ``stream: true`` (``0`` is
accepted and the stream carries no prompt logprobs), a value below -1, and a count above
``--max-logprobs`` (:mod:`.logprob_limits`; default 20; ``-1`` asks for the whole vocabulary, so
it is refused unless the server's bound is the vocabulary, ``--max-logprobs -1``).

The engine computes them on its prompt-logprob path (``logprob_start_len: 0``, so the whole prompt
is run: no prefix-cache hit skips the positions whose logits are needed) with the ranks asked for
(``return_input_token_ranks``); :func:`prompt_logprobs_engine_fields` gives those fields.
"""

from __future__ import annotations

import math
from typing import Any

from sglang_v4.entrypoints.openai.logprob_limits import DEFAULT_MAX_LOGPROBS, logprob_count
from sglang_v4.entrypoints.openai.protocol_vllm import PromptLogprob
from sglang_v4.entrypoints.openai.request_errors import RequestError

__all__ = ["check_prompt_logprobs", "prompt_logprobs_engine_fields", "vllm_prompt_logprobs"]

#: vLLM's ``clamp_prompt_logprobs`` value for ``-inf``.
_MIN_LOGPROB = -9999.0


def check_prompt_logprobs(
    req: Any, vocab_size: int | None, max_logprobs: int = DEFAULT_MAX_LOGPROBS
) -> int | None:
    """How many top tokens per prompt position the answer to ``req`` (a parsed chat or
    completions request) holds, or ``None`` when it carries no ``prompt_logprobs`` (not asked for,
    or ``0`` on a stream).

    Args:
        req: the request (``prompt_logprobs``, ``stream``).
        vocab_size: the model's vocabulary size (what ``-1`` stands for in the error message),
            or ``None`` when unknown.
        max_logprobs: the bound (``--max-logprobs`` resolved:
            :func:`~.logprob_limits.max_logprobs_of`).

    Raises:
        RequestError: 400 naming ``prompt_logprobs``: not 0 with ``stream: true``, below -1, or
            more than ``max_logprobs`` (``-1``: the whole vocabulary).
    """
    value = getattr(req, "prompt_logprobs", None)
    if value is None:
        return None
    if getattr(req, "stream", False) and (value > 0 or value == -1):
        raise RequestError("`prompt_logprobs` are not available when `stream=True`.", param="prompt_logprobs")
    if value < -1:
        raise RequestError(
            f"`prompt_logprobs` must be a positive value or -1 (got {value}).", param="prompt_logprobs"
        )
    if getattr(req, "stream", False):
        return None  # 0 on a stream: accepted, nothing returned
    return logprob_count(value, "prompt_logprobs", "prompt", max_logprobs, vocab_size)


def prompt_logprobs_engine_fields(count: int, top_logprobs_num: int) -> dict[str, Any]:
    """The ``GenerateReqInput`` fields that make the engine compute ``count`` prompt logprobs per
    position (:func:`check_prompt_logprobs`) next to a request's own ``top_logprobs_num`` (its
    output logprobs' top count, which the routes then cut back to the request's own): the
    prompt's logprobs from its first token, the larger top count, and the tokens' ranks."""
    return {
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": max(count, top_logprobs_num),
        "return_input_token_ranks": True,
    }


def _value(logprob: float | None) -> float:
    """A logprob as vLLM writes it: ``-inf`` (and NaN, which JSON cannot carry) as -9999.0."""
    if logprob is None or math.isnan(logprob) or logprob == -math.inf:
        return _MIN_LOGPROB
    return float(logprob)


def vllm_prompt_logprobs(meta: dict[str, Any], count: int) -> list[dict[str, PromptLogprob] | None]:
    """vLLM's ``prompt_logprobs`` of one answer from its engine output's ``meta_info`` (entries of
    a request made with :func:`prompt_logprobs_engine_fields`).

    Args:
        meta: ``input_token_logprobs`` (``[logprob, token_id, text]`` per prompt position, the
            first ``logprob`` ``None``), ``input_top_logprobs`` (per position the top entries,
            best first, or ``None``) and ``input_token_ranks`` (per position an int or ``None``).
        count: top tokens per position (``0 <= count``; the top lists may hold more).

    Returns:
        One item per prompt token: ``None`` for the first, else ``{str(token_id): PromptLogprob}``
        with the prompt token first (see the module docstring).
    """
    entries = list(meta.get("input_token_logprobs") or [])
    tops = list(meta.get("input_top_logprobs") or [])
    ranks = list(meta.get("input_token_ranks") or [])
    out: list[dict[str, PromptLogprob] | None] = []
    for i, entry in enumerate(entries):
        logprob, token_id = entry[0], int(entry[1])
        if logprob is None:
            out.append(None)
            continue
        text = entry[2] if len(entry) > 2 else None
        rank = ranks[i] if i < len(ranks) else None
        pos = {str(token_id): PromptLogprob(logprob=_value(logprob), rank=rank, decoded_token=text)}
        top = tops[i] if i < len(tops) else None
        for j, cand in enumerate((top or [])[:count]):
            ctext = cand[2] if len(cand) > 2 else None
            pos[str(int(cand[1]))] = PromptLogprob(logprob=_value(cand[0]), rank=j + 1, decoded_token=ctext)
        out.append(pos)
    return out

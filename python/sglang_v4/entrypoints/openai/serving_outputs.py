"""The engine's outputs as the OpenAI routes write them: SSE framing (``data: {...}\\n\\n`` ...
``data: [DONE]\\n\\n``), in-stream errors in SGLang's shape, the finish reason and abort of a
response dict's ``meta_info``, and logprob values as OpenAI's API writes them.

The outputs read here are those of ``tokenizer_manager.generate_request`` (SGLang-shaped dicts
``{"text", "output_ids", "meta_info", ["index"]}``, cumulative when streaming). Used by the routes
of :mod:`.serving_completions`, :mod:`.serving_chat`, :mod:`.serving_responses` and Anthropic's
Messages route; re-exported by :mod:`.serving_base`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from typing import Any

import orjson
from pydantic import BaseModel

from sglang_v4.entrypoints.openai.logprob_limits import DEFAULT_MAX_LOGPROBS
from sglang_v4.entrypoints.openai.protocol import error_type_for_status
from sglang_v4.entrypoints.openai.request_errors import RequestError, grammar_error_for
from sglang_v4.entrypoints.sse_keep_alive import resolve_first

__all__ = [
    "MAX_TOP_LOGPROBS",
    "NO_FINISH_MSG",
    "OPENAI_MIN_LOGPROB",
    "internal_stream_error",
    "openai_logprob",
    "stream_failure",
]

logger = logging.getLogger(__name__)

NO_FINISH_MSG = "The generation ended without a finish reason."
"""The error of a stream whose engine outputs ended before a choice had its finish reason: such
a stream did not complete, and must not end like one that did."""

MAX_TOP_LOGPROBS = DEFAULT_MAX_LOGPROBS
"""The default bound of ``top_logprobs`` (chat), ``logprobs`` (completions) and ``prompt_logprobs``:
vLLM's default ``--max-logprobs`` (:mod:`.logprob_limits`), OpenAI's chat maximum."""


def _sse(obj: BaseModel | dict[str, Any]) -> bytes:
    """One SSE event ``data: <json>\\n\\n`` of ``obj`` (a pydantic model dumped in JSON mode, or a
    JSON-able dict), UTF-8 bytes."""
    data = obj.model_dump(mode="json") if isinstance(obj, BaseModel) else obj
    return b"data: " + orjson.dumps(data) + b"\n\n"


_SSE_DONE = b"data: [DONE]\n\n"


def _sse_error(message: str, err_type: str | None, status: int, param: str | None = None) -> bytes:
    """An in-stream error event in SGLang's shape: ``data: {"error": {...}}``."""
    et = err_type or error_type_for_status(status)
    return _sse(
        {"error": {"object": "error", "message": message, "type": et, "param": param, "code": status}}
    )


def stream_failure(e: RequestError | ValueError, grammar_field: str | None) -> RequestError:
    """The error of a generation that failed after its first streamed output (an abort in its
    outputs, or a ``ValueError`` of the generator), named as the same request's non-streamed answer
    names it: a grammar error carries the request field the grammar was made from
    (:func:`~.request_errors.grammar_error_for`: ``response_format``, ``tools``...), in its message
    and its ``param``. The streamed answer used to name the engine's ``json_schema`` with no
    ``param`` where the non-streamed one named ``response_format``.

    Args:
        e: the abort (:func:`_abort_error`) or the generator's error (its ``status_code``, else 400).
        grammar_field: the request field of the request's grammar, if any.
    """
    if not isinstance(e, RequestError):
        e = RequestError(str(e), int(getattr(e, "status_code", 400) or 400))
    return grammar_error_for(e, grammar_field)


def internal_stream_error(e: Exception) -> RequestError:
    """The error of a stream whose generation raised something other than a request error after
    its first output (a bug, a timeout, a broken engine connection): HTTP 500
    (its error ``type`` that of the status), the exception's type and message. Logged with its traceback.

    The stream then ends with this error event and ``data: [DONE]``, as an in-stream failure of
    the tokenizer manager does, instead of being cut off mid-body (which clients read either as a
    transport error or, past a proxy, as a complete answer).
    """
    logger.error("Stream failed after its first output.", exc_info=e)
    text = str(e)
    return RequestError(f"{type(e).__name__}: {text}" if text else type(e).__name__, 500)


def _sse_failure(e: RequestError | ValueError, grammar_field: str | None) -> bytes:
    """:func:`_sse_error` of :func:`stream_failure`."""
    err = stream_failure(e, grammar_field)
    return _sse_error(err.message, err.err_type, err.status, err.param)


async def _engine_outputs(gen: AsyncIterator[Any], first: Any) -> AsyncIterator[Any]:
    """The outputs of a started generation (:meth:`~.serving_base.OpenAIServingBase._run_stream`): ``first``, the
    one already read (or read now: :func:`~sglang_v4.entrypoints.sse_keep_alive.resolve_first`),
    then the rest of ``gen``. Each is one response dict (``text``,
    ``output_ids``, ``meta_info``; cumulative) or, for a request of several choices, a list of
    them. Closing ``gen`` (which aborts an unfinished request) stays with the caller.

    Raises:
        ValueError: what ``gen`` raises (a scheduler-side error after the first output).
    """
    yield await resolve_first(first)
    async for item in gen:
        yield item


def _finish(meta: dict[str, Any]) -> tuple[str | None, Any]:
    """``(finish_reason string, matched_stop)`` from SGLang's ``meta_info["finish_reason"]``."""
    fr = meta.get("finish_reason")
    if not fr:
        return None, None
    if isinstance(fr, str):
        return fr, None
    return fr.get("type"), fr.get("matched")


def _abort_error(meta: dict[str, Any]) -> RequestError | None:
    """The error of an output that ended with an abort (``meta_info["finish_reason"]`` of type
    ``abort``: its message and ``status_code``, 400 when it gives none; or the bare string
    ``"abort"``), else ``None``. ``abort`` is no OpenAI finish reason: an aborted choice is an
    error, never a choice that finished (vllm-project/vllm#57082)."""
    fr = meta.get("finish_reason")
    if fr == "abort":  # the bare string form: an abort all the same, never a finish reason to send
        return RequestError("Aborted", 400)
    if isinstance(fr, dict) and fr.get("type") == "abort":
        status = int(fr.get("status_code") or 400)
        return RequestError(str(fr.get("message") or "Aborted"), status)
    return None


OPENAI_MIN_LOGPROB = -9999.0
"""The logprob OpenAI's API reports for a token that has no probability: its chat reference
documents -9999.0 for "very unlikely" tokens, and vLLM clamps to the same value. A constrained
(grammar, ``logit_bias``, ``min_tokens``) step gives ``-inf`` to the tokens it forbids, and those
appear among the ``top_logprobs`` when fewer tokens than asked for are allowed; JSON has no
``-Infinity``, so without this floor they would go out as ``null`` in a field typed as a number."""


def openai_logprob(lp: float) -> float:
    """``lp`` (a natural-log probability) as OpenAI's API writes it: at least
    :data:`OPENAI_MIN_LOGPROB` (``-inf`` and NaN become that value), otherwise unchanged."""
    if math.isnan(lp):
        return OPENAI_MIN_LOGPROB
    return max(float(lp), OPENAI_MIN_LOGPROB)


def _lp_entry(e: Any) -> tuple[float | None, int, str | None]:
    """One SGLang logprob entry ``(logprob, token_id, text|None)`` (tuple or list)."""
    lp, tid = e[0], e[1]
    text = e[2] if len(e) > 2 else None
    return (None if lp is None else float(lp)), int(tid), text

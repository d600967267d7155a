"""Finish reasons as SGLang reports them in ``meta_info["finish_reason"]`` (the JSON shapes of
SGLang's ``FINISH_MATCHED_*``, ``FINISH_LENGTH`` and ``FINISH_ABORT`` ``to_json()``), and SGLang's
abort messages. Carried in :class:`~.output_struct.BatchTokenIDOut` / :class:`~.output_struct.BatchStrOut`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ABORT_IN_QUEUE", "ABORT_RUNNING", "FinishReason", "finish_abort", "finish_length", "finish_stop"]

#: A finish reason as SGLang reports it in ``meta_info["finish_reason"]``:
#: ``{"type": "stop", "matched": <str | int | None>}`` (stop string, stop token / EOS),
#: ``{"type": "length", "length": <int>}`` (max_new_tokens or context limit) or
#: ``{"type": "abort", "message": <str>, "status_code": <int | None>, "err_type": <str | None>}``.
#: ``None`` while unfinished.
FinishReason = dict[str, Any]


def finish_stop(matched: str | int | None) -> FinishReason:
    """Finish reason for a matched stop string / stop token id / EOS (SGLang ``FINISH_MATCHED_*``)."""
    return {"type": "stop", "matched": matched}


def finish_length(length: int) -> FinishReason:
    """Finish reason for hitting ``max_new_tokens`` (``length`` = tokens generated)."""
    return {"type": "length", "length": length}


#: SGLang's abort messages (``srt/managers/schedule_batch.py`` ``FINISH_ABORT``'s default, the
#: tokenizer manager's for a request aborted while queued): RL clients match them to resend the
#: requests a weight update or ``/pause_generation`` aborted.
ABORT_RUNNING = "Aborted"
ABORT_IN_QUEUE = "Abort in waiting queue"


def finish_abort(message: str = ABORT_RUNNING, status_code: int | None = None) -> FinishReason:
    """Finish reason for an aborted / rejected request, SGLang's ``FINISH_ABORT.to_json()`` shape:
    ``{"type": "abort", "message", "status_code", "err_type"}``, every key present.
    ``status_code`` (None for an abort asked for, by ``/abort_request`` or a closed stream) is the
    HTTP status of a rejection (400: bad input, 503: no room); ``err_type`` is
    ``"InternalServerError"`` for a 500 (the request failed in the engine), else None."""
    err_type = "InternalServerError" if status_code == 500 else None
    return {"type": "abort", "message": message, "status_code": status_code, "err_type": err_type}

"""Control and lifecycle messages between the tokenizer manager and the scheduler process.

Names follow SGLang 0.5.x ``srt/managers/io_struct.py`` (``FlushCacheReqInput``,
``FlushCacheReqOutput``...); the request / output messages of generation are in
:mod:`sglang_v4.managers.io_struct`. Like those, these are plain dataclasses sent with pickle over
ZMQ IPC sockets (the ready info over the scheduler's ready pipe).

Data flow::

    TokenizerManager --FlushCacheReqInput/GetServerInfoReq/GetMetricsReq--> Scheduler
    Scheduler --FlushCacheReqOutput/GetServerInfoReqOutput/GetMetricsReqOutput--> TokenizerManager
    TokenizerManager --UpdateWeightFromDiskReqInput/GetWeightsByNameReqInput--> Scheduler (their outputs back)
    TokenizerManager --PauseGenerationReqInput/ContinueGenerationReqInput/ProfileReq/SetLogLevelReq--> Scheduler
    Scheduler --ControlAck--> TokenizerManager
    scheduler process --SchedulerReadyInfo (once) / SchedulerCrashed--> launcher, TokenizerManager
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def _new_id() -> str:
    return uuid.uuid4().hex


# ---------------------------------------------------------------------------------------------
# Control requests (tokenizer manager <-> scheduler). ``req_id`` pairs a reply with its request.
# ---------------------------------------------------------------------------------------------
@dataclass
class ControlReq:
    """Base of the control requests: ``req_id`` (a fresh uuid hex by default) pairs the reply."""

    req_id: str = field(default_factory=_new_id)


@dataclass
class ControlReqOutput:
    """Base of the control replies: ``req_id`` is the request's."""

    req_id: str


@dataclass
class FlushCacheReqInput(ControlReq):
    """Flush the radix cache (only succeeds when no request is running or queued)."""


@dataclass
class FlushCacheReqOutput(ControlReqOutput):
    """Reply to :class:`FlushCacheReqInput` and what ``Engine.flush_cache()`` returns (SGLang's
    ``FlushCacheReqOutput``): ``success`` and ``message`` (SGLang's: empty for a flush done or
    refused at once because requests hold KV; ``"Timed out waiting for idle state."`` after a
    ``timeout`` spent waiting). Its truth value is ``success``, so ``if engine.flush_cache():``
    reads as before."""

    success: bool
    message: str = ""

    def __bool__(self) -> bool:
        return bool(self.success)


@dataclass
class GetServerInfoReq(ControlReq):
    """Ask the scheduler for ``Scheduler.get_server_info()`` (kv_pool, radix_cache, ...)."""


@dataclass
class GetServerInfoReqOutput(ControlReqOutput):
    """Reply to :class:`GetServerInfoReq`: the ``get_server_info()`` dict."""

    info: dict[str, Any]


@dataclass
class GetMetricsReq(ControlReq):
    """Ask the scheduler for ``Scheduler.get_metrics()`` (gauges for /metrics)."""


@dataclass
class GetMetricsReqOutput(ControlReqOutput):
    """Reply to :class:`GetMetricsReq`: the ``get_metrics()`` dict."""

    metrics: dict[str, Any]


@dataclass
class UpdateWeightFromDiskReqInput(ControlReq):
    """Reload the weights from the checkpoint directory ``model_path`` (SGLang's message of
    ``/update_weights_from_disk``): same architecture, loaded in place, then the radix cache
    flushed. ``load_format``: ``None`` / ``"auto"`` (safetensors, as at start-up)."""

    model_path: str = ""
    load_format: str | None = None


@dataclass
class UpdateWeightFromDiskReqOutput(ControlReqOutput):
    """Reply to :class:`UpdateWeightFromDiskReqInput`: ``success``, SGLang's ``message`` and
    ``num_paused_requests`` (requests held while the weights changed; 0 here, as SGLang's disk
    path)."""

    success: bool
    message: str = ""
    num_paused_requests: int = 0


@dataclass
class GetWeightsByNameReqInput(ControlReq):
    """The first ``truncate_size`` rows of the parameter ``name`` (HF checkpoint name)."""

    name: str = ""
    truncate_size: int = 100


@dataclass
class GetWeightsByNameReqOutput(ControlReqOutput):
    """Reply to :class:`GetWeightsByNameReqInput`: the values as nested float lists
    (``parameter``), or ``None`` with ``message`` saying why (unknown name, ...)."""

    parameter: list[Any] | None
    message: str = ""


@dataclass
class PauseGenerationReqInput(ControlReq):
    """Stop running scheduler steps (``mode`` ``"in_place"``: requests keep their KV and resume
    on :class:`ContinueGenerationReqInput`; ``"retract"``: running requests go back to the queue,
    their KV pages released). ``"abort"`` never reaches the scheduler: the tokenizer manager
    aborts the requests itself."""

    mode: str = "in_place"


@dataclass
class ContinueGenerationReqInput(ControlReq):
    """Resume the scheduler steps stopped by :class:`PauseGenerationReqInput`."""


@dataclass
class ProfileReq(ControlReq):
    """Start (``action="start"``) or stop (``"stop"``) the torch profiler around scheduler steps.

    Attributes:
        output_dir: directory of the trace files.
        num_steps: stop by itself after this many steps (``None``: at ``"stop"``).
        activities: SGLang's names, ``"CPU"`` and / or ``"GPU"``.
        with_stack / record_shapes: ``torch.profiler.profile``'s options.
        profile_id: the trace file's name stem (``<profile_id>-TP-0.trace.json.gz``).
    """

    action: str = "start"
    output_dir: str | None = None
    num_steps: int | None = None
    activities: list[str] | None = None
    with_stack: bool = False
    record_shapes: bool = False
    profile_id: str = ""


@dataclass
class SetLogLevelReq(ControlReq):
    """Set the scheduler process's root log level (``/configure_logging``'s ``log_level``)."""

    level: str = "info"


@dataclass
class ControlAck(ControlReqOutput):
    """Reply to the pause / continue / profile / log-level messages: ``success`` and, when
    refused, why (``message``)."""

    success: bool = True
    message: str = ""


# ---------------------------------------------------------------------------------------------
# Scheduler process lifecycle
# ---------------------------------------------------------------------------------------------
@dataclass
class SchedulerReadyInfo:
    """Sent once by the scheduler process over its ready pipe after the model is loaded: the
    limits every request is validated against (:meth:`check_input_ids`).

    Attributes:
        status: ``"ready"`` or ``"error"`` (then ``error`` holds the traceback).
        max_total_num_tokens: KV pool size in tokens.
        max_req_input_len: longest prompt in tokens, ``min(context_len, max_total_num_tokens) - 1``
            (SGLang's bound: the prompt and one generated token must fit both).
        context_len: the model's context length in tokens.
        vocab_size: token ids must lie in ``[0, vocab_size)``.
        extra: ``load_time_s``, ``grammar_enabled`` (constrained decoding available).
    """

    status: str  # "ready" or "error"
    max_total_num_tokens: int = 0
    max_req_input_len: int = 0
    context_len: int = 0
    vocab_size: int = 0
    model_path: str = ""
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def check_input_ids(self, input_ids: Sequence[int]) -> str | None:
        """Why the prompt ``input_ids`` cannot be served under these limits, or ``None`` if it can.

        The one rule for prompts: the tokenizer manager rejects with it (HTTP 400 / ValueError),
        and the scheduler re-checks with it so that a request that slipped through is finished
        with a 400 abort instead of reaching the model. Checks, in order: not empty; every id in
        ``[0, vocab_size)`` (skipped when ``vocab_size`` is 0); at most ``max_req_input_len``
        tokens (the message names the context length or the KV pool, whichever bounds it).
        """
        n = len(input_ids)
        if n == 0:
            return "The input is empty: the prompt must contain at least one token."
        if self.vocab_size > 0 and (min(input_ids) < 0 or max(input_ids) >= self.vocab_size):
            pos, tok = next((p, t) for p, t in enumerate(input_ids) if not 0 <= t < self.vocab_size)
            return (
                f"Token id {tok} at position {pos} of input_ids is outside the vocabulary "
                f"[0, {self.vocab_size})."
            )
        if n > self.max_req_input_len:
            if self.max_req_input_len < self.context_len - 1:  # bounded by the KV pool, not the context
                return (
                    f"The input ({n} tokens) does not fit in the KV cache pool "
                    f"({self.max_total_num_tokens} tokens; at most {self.max_req_input_len} prompt tokens)."
                )
            return context_length_message(self.context_len, n, None)
        return None


def context_length_message(
    context_len: int, prompt_tokens: int, max_new_tokens: int | None, at_least: bool = False
) -> str:
    """The 400 message of a request that does not fit in the context: SGLang's opening sentence
    (``The input ... is longer than the model's context length`` for a prompt that leaves no room
    for a token, ``Requested token count exceeds the model's maximum context`` for a prompt plus
    ``max_new_tokens`` over it, the phrases clients and SGLang's own tests match), then OpenAI's /
    vLLM's ``This model's maximum context length is N tokens. However, ...`` with the counts.

    Args:
        context_len: the model's context length in tokens.
        prompt_tokens: the prompt's length in tokens (a lower bound when ``at_least``).
        max_new_tokens: the requested completion length, or ``None`` when not given (then the
            prompt alone is too long: it must leave room for one generated token).
        at_least: ``prompt_tokens`` is a lower bound (counted without tokenizing the whole text).
    """
    some = "at least " if at_least else ""
    if max_new_tokens is None:
        return (
            f"The input ({some}{prompt_tokens} tokens) is longer than the model's context length "
            f"({context_len} tokens). "
            f"This model's maximum context length is {context_len} tokens. However, your request has "
            f"{some}{prompt_tokens} input tokens (at most {context_len - 1} fit with the completion). "
            "Please reduce the length of the input messages."
        )
    return (
        f"Requested token count exceeds the model's maximum context length of {context_len} tokens. "
        f"This model's maximum context length is {context_len} tokens. However, you requested "
        f"{some}{prompt_tokens + max_new_tokens} tokens ({some}{prompt_tokens} in the messages, "
        f"{max_new_tokens} in the completion). Please reduce the length of the messages or completion."
    )


@dataclass
class SchedulerCrashed:
    """Sent by a dying scheduler process to the tokenizer manager with the formatted traceback."""

    traceback: str

"""Per-request stage timestamps (SGLang's request time stats: ``--enable-request-time-stats-logging``,
``sglang:queue_time_seconds`` and ``sglang:per_stage_req_latency_seconds`` under ``--enable-metrics``).

Each process stamps with ``time.perf_counter()`` converted to wall-clock seconds by one offset
taken when this module is imported (:func:`wall_clock`), so stamps taken in the tokenizer
manager, the scheduler and the detokenizer (one host) are comparable, as SGLang's
``convert_time_to_realtime`` does. The stages of one request, in order::

    received        the tokenizer manager took the request (``generate_request``)
    dispatched      tokenized and sent to the scheduler
    scheduler_recv  the scheduler queued it (``add_request``)
    forward_entry   admitted into a batch (its prefix-cache hit known: ``prefix_len``)
    launched        its first batch handed to the model worker (its first prompt chunk)
    result_ready    the result of the batch that produced its first token waited for (with the
                    overlap schedule: after the next batch was built and launched)
    first_token     the scheduler processed that result and sent the message with the token
    detokenizer     the detokenizer sent the message carrying that token
    first_output    the tokenizer manager received that message
    first_write     (streaming) the route came back for the next chunk: the first one was written
    finished        the tokenizer manager received the final output

The scheduler's stamps travel as :class:`SchedulerTimeStats` tuples in ``BatchTokenIDOut.time_stats``
(only while the scheduler records them: either flag on); the detokenizer adds one stamp per message
(``BatchStrOut.detokenizer_ts``). Nothing is stamped per token: the scheduler's first-token stamp
is one branch per output token.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

#: ``time.time() - time.perf_counter()`` of this process (wall clock = perf_counter + offset).
_WALL_OFFSET = time.time() - time.perf_counter()


def wall_clock() -> float:
    """Now, in wall-clock seconds (``perf_counter`` plus this process's offset; monotonic)."""
    return time.perf_counter() + _WALL_OFFSET


#: Stage names (the ``stage`` label of ``sglang:per_stage_req_latency_seconds`` and the keys of the
#: log line), each the interval between two stamps of the module docstring. SGLang's names where
#: it has the stage (``tokenize``, ``api_server_dispatch``, ``prefill_waiting``, ``prefill_forward``).
STAGES: tuple[tuple[str, str, str], ...] = (
    ("tokenize", "received", "dispatched"),
    ("api_server_dispatch", "dispatched", "scheduler_recv"),
    ("prefill_waiting", "scheduler_recv", "forward_entry"),
    ("batch_build", "forward_entry", "launched"),
    ("forward", "launched", "result_ready"),
    ("process_output", "result_ready", "first_token"),
    ("detokenize", "first_token", "detokenizer"),
    ("output_dispatch", "detokenizer", "first_output"),
    ("response_write", "first_output", "first_write"),
)
#: SGLang's ``prefill_forward`` (admission to the first token: ``batch_build + forward +
#: process_output``), observed in the metric beside the stages above but not in the log line.
PREFILL_FORWARD = ("prefill_forward", "forward_entry", "first_token")
STAGE_NAMES = (*(s[0] for s in STAGES), PREFILL_FORWARD[0])


class SchedulerTimeStats(NamedTuple):
    """The scheduler's stamps of one request (wall-clock seconds; 0.0: not reached yet) and the
    prompt tokens its admission found in the prefix cache."""

    scheduler_recv: float
    forward_entry: float
    launched: float
    result_ready: float
    first_token: float
    prefix_len: int


@dataclass(slots=True)
class ReqTimeStats:
    """Mutable stamps of one request in the scheduler (``Req.time_stats``)."""

    scheduler_recv: float = 0.0
    forward_entry: float = 0.0
    launched: float = 0.0
    result_ready: float = 0.0
    first_token: float = 0.0
    prefix_len: int = 0
    #: the stamps went out with the first token (they do not change after it)
    sent: bool = False

    def snapshot(self) -> SchedulerTimeStats:
        """The stamps as sent in ``BatchTokenIDOut.time_stats``."""
        return SchedulerTimeStats(
            self.scheduler_recv,
            self.forward_entry,
            self.launched,
            self.result_ready,
            self.first_token,
            self.prefix_len,
        )


@dataclass(slots=True)
class RequestTimeline:
    """Every stamp of one request as the tokenizer manager knows it (wall-clock seconds; 0.0:
    not reached or not known), read by :func:`stage_durations` and :func:`time_stats_line`."""

    received: float = 0.0
    dispatched: float = 0.0
    scheduler_recv: float = 0.0
    forward_entry: float = 0.0
    launched: float = 0.0
    result_ready: float = 0.0
    first_token: float = 0.0
    detokenizer: float = 0.0
    first_output: float = 0.0
    first_write: float = 0.0
    finished: float = 0.0
    prefix_len: int = 0

    def take_scheduler(self, stats: Any) -> None:
        """Copy a :class:`SchedulerTimeStats` (or a tuple of its fields) received from the
        scheduler; ``None`` leaves the stamps as they are."""
        if stats is not None:
            (
                self.scheduler_recv,
                self.forward_entry,
                self.launched,
                self.result_ready,
                self.first_token,
                self.prefix_len,
            ) = stats


def stage_durations(t: RequestTimeline, with_prefill_forward: bool = False) -> dict[str, float]:
    """Seconds of each stage of :data:`STAGES` whose two stamps are known (and SGLang's
    ``prefill_forward`` with ``with_prefill_forward``), plus ``ttft`` (received -> first output) and
    ``e2e`` (received -> finished) when known. A negative interval (clock offsets of two processes
    differ by a little) is reported as 0."""
    out: dict[str, float] = {}
    for name, a, b in (*STAGES, PREFILL_FORWARD) if with_prefill_forward else STAGES:
        ta, tb = getattr(t, a), getattr(t, b)
        if ta > 0.0 and tb > 0.0:
            out[name] = max(tb - ta, 0.0)
    if t.received > 0.0 and t.first_output > 0.0:
        out["ttft"] = max(t.first_output - t.received, 0.0)
    if t.received > 0.0 and t.finished > 0.0:
        out["e2e"] = max(t.finished - t.received, 0.0)
    return out


def time_stats_line(
    rid: str, input_len: int, cached_len: int, output_len: int, durations: dict[str, float], entry: float
) -> str:
    """The ``--enable-request-time-stats-logging`` line of a finished request, in SGLang's shape
    ``ReqTimeStats(rid=..., input_len=..., cached_input_len=..., output_len=..., type=unified):
    queue_duration=1.23ms, ...`` with the stage durations of :func:`stage_durations` in ms
    (``prefill_waiting`` written as SGLang's ``queue_duration``; ``prefill_forward``, the sum of
    three of them, left out), ``ttft`` / ``e2e`` in ms, and ``entry_time`` the wall-clock second the
    scheduler queued it."""
    parts = []
    for k, v in durations.items():
        if k == PREFILL_FORWARD[0]:
            continue
        key = "queue_duration" if k == "prefill_waiting" else k
        parts.append(f"{key}={v * 1e3:.2f}ms")
    parts.append(f"entry_time={entry:.3f}")
    head = (
        f"ReqTimeStats(rid={rid}, input_len={input_len}, cached_input_len={cached_len}, "
        f"output_len={output_len}, type=unified)"
    )
    return f"{head}: " + ", ".join(parts)


def output_meta_info(t: RequestTimeline, completion_tokens: int) -> dict[str, float]:
    """SGLang's ``meta_info`` time keys of a finished request under ``--enable-metrics``:
    ``queue_time`` (seconds queued), ``forward_entry_time``, ``request_received_ts``,
    ``api_server_dispatch_finish_ts``, ``request_finished_ts`` (wall-clock seconds),
    ``first_token_latency`` (seconds) and ``decode_throughput`` (tokens/s after the first)."""
    meta: dict[str, float] = {}
    if t.scheduler_recv > 0.0 and t.forward_entry > 0.0:
        meta["queue_time"] = max(t.forward_entry - t.scheduler_recv, 0.0)
    if t.forward_entry > 0.0:
        meta["forward_entry_time"] = t.forward_entry
    if t.received > 0.0:
        meta["request_received_ts"] = t.received
    if t.received > 0.0 and t.first_output > t.received:
        meta["first_token_latency"] = t.first_output - t.received
    if t.dispatched > 0.0:
        meta["api_server_dispatch_finish_ts"] = t.dispatched
    if t.finished > 0.0:
        meta["request_finished_ts"] = t.finished
        if completion_tokens > 1 and t.first_output > 0.0 and t.finished > t.first_output:
            meta["decode_throughput"] = (completion_tokens - 1) / (t.finished - t.first_output)
    return meta


def stamp_first_tokens(reqs: Sequence[Any]) -> list[SchedulerTimeStats | None] | None:
    """The ``BatchTokenIDOut.time_stats`` column of a message for scheduler requests ``reqs``,
    first stamping ``first_token`` (now, after the step's results were processed) on each request
    that has output tokens and no stamp yet. A request's stamps go out until the message that
    carries its first token (none changes after it); later messages and requests without stamps
    get ``None``, and a message with nothing to send gets ``None`` for the column: no work per
    token after the first. One clock read per message."""
    now = 0.0
    out: list[SchedulerTimeStats | None] = []
    any_sent = False
    for r in reqs:
        ts = r.time_stats
        if ts is None or ts.sent:
            out.append(None)
            continue
        if ts.first_token == 0.0 and r.output_ids:
            if now == 0.0:
                now = wall_clock()
            ts.first_token = now
        ts.sent = ts.first_token != 0.0
        out.append(ts.snapshot())
        any_sent = True
    return out if any_sent else None


def stamp_launched(reqs: Sequence[Any]) -> None:
    """Stamp ``launched`` on each request of a batch handed to the model worker now that has none
    (its first batch); requests without ``time_stats`` are skipped."""
    now = 0.0
    for r in reqs:
        ts = r.time_stats
        if ts is not None and ts.launched == 0.0:
            if now == 0.0:
                now = wall_clock()
            ts.launched = now


def stamp_result_ready(reqs: Sequence[Any]) -> None:
    """Stamp ``result_ready`` (now) on each request of a batch whose result was just waited for
    and that has no output token yet: the last such stamp before its first token is the result
    that produced it (earlier ones: earlier prompt chunks)."""
    now = 0.0
    for r in reqs:
        ts = r.time_stats
        if ts is not None and not r.output_ids:
            if now == 0.0:
                now = wall_clock()
            ts.result_ready = now

"""The tokenizer manager's side of the request stage stamps (:mod:`.req_time_stats`): the stamps
taken when a request is sent, when its outputs arrive, and what its end reports (the
``--enable-request-time-stats-logging`` line, the stage histograms, SGLang's ``meta_info`` time
keys under ``--enable-metrics``)."""

from __future__ import annotations

import logging
from typing import Any

from sglang_v4.managers.io_struct import BatchStrOut
from sglang_v4.managers.req_time_stats import (
    RequestTimeline,
    output_meta_info,
    stage_durations,
    time_stats_line,
    wall_clock,
)

logger = logging.getLogger(__name__)


def stamp_dispatch(states: list[Any], received: float) -> None:
    """Start the stage stamps of requests received at wall-clock ``received`` and sent to the
    scheduler now."""
    now = wall_clock()
    for state in states:
        state.timeline = RequestTimeline(received=received, dispatched=now)


class TokenizerTimeStatsMixin:
    """The stage-stamp methods of ``TokenizerManager`` (it provides ``server_args``, ``metrics``)."""

    server_args: Any
    metrics: Any

    def _time_stats_output(self, t: RequestTimeline, recv: BatchStrOut, i: int, wall: float) -> None:
        """Take the stamps of item ``i`` of ``recv`` (arrived at wall-clock ``wall``) into ``t``:
        the scheduler's, and the first output's arrival and detokenizer stamp."""
        if recv.time_stats:
            t.take_scheduler(recv.time_stats[i])
        if t.first_output == 0.0 and recv.completion_tokens[i] > 0:
            t.first_output = wall
            t.detokenizer = recv.detokenizer_ts

    def _time_stats_finished(
        self, rid: str, state: Any, recv: BatchStrOut, i: int, wall: float
    ) -> dict[str, float]:
        """The end of ``state``'s request (item ``i`` of ``recv``, arrived at wall-clock
        ``wall``): its stage durations into the metrics, its ``--enable-request-time-stats-logging``
        line, and the ``meta_info`` time keys (SGLang's, under ``--enable-metrics``; else none)."""
        t = state.timeline
        assert t is not None
        if t.finished == 0.0:
            t.finished = wall
        durations = stage_durations(t, with_prefill_forward=True)
        metrics = self.metrics if state.obj.log_metrics else None
        if metrics is not None:
            metrics.observe_stages(durations)
        if self.server_args.enable_request_time_stats_logging:
            logger.info(
                "%s",
                time_stats_line(
                    rid,
                    recv.prompt_tokens[i],
                    recv.cached_tokens[i],
                    recv.completion_tokens[i],
                    durations,
                    t.scheduler_recv,
                ),
            )
        if not self.server_args.enable_metrics:
            return {}
        return output_meta_info(t, recv.completion_tokens[i])

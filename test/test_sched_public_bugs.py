"""Public bug reports of peer servers on scheduling, replayed against the in-process scheduler.

* Priority preemption (sgl-project/sglang#8746, the feature; vllm-project/vllm#40004, the same
  priority inversion reported against vLLM): with ``--enable-priority-scheduling`` a queued
  request that cannot be admitted, because ``--max-running-requests`` are running or because
  the KV pool has no pages for it, waited behind running requests of much lower priority. As in
  SGLang it now preempts one whose priority it beats by more than
  ``--priority-scheduling-preemption-threshold`` (10); the victim goes back to the queue with its
  outputs kept. Oracle: each request's cold greedy run alone (identical tokens) and the finish
  order the priorities ask for.
* Requests without a priority under priority scheduling are the least preferred (SGLang's
  scheduler), unless ``--default-priority-value`` is set; ``--abort-on-priority-when-disabled``
  refuses a request that sends a priority to a server without priority scheduling (503).
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit
from sglang_v4.managers.scheduler import Scheduler
from sglang_v4.server_args import ServerArgs


@pytest.fixture(scope="module")
def cold(sched_model_dir: str):  # noqa: ANN201 - a caching closure
    """Cold greedy runs on a roomy scheduler, one request at a time: the oracle."""
    s = make_scheduler(sched_model_dir, max_total_tokens=32 * PAGE)
    memo: dict[tuple[tuple[int, ...], int], list[int]] = {}

    def run(ids: list[int], n: int) -> list[int]:
        key = (tuple(ids), n)
        if key not in memo:
            s.flush_cache()
            memo[key] = run_one(s, "cold", ids, n)["ids"]
        return memo[key]

    return run


def _finish_order(
    s: Scheduler, steps: int | None = None, seen: tuple[list[str], dict[str, list[int]]] | None = None
) -> tuple[list[str], dict[str, list[int]]]:
    """Step ``steps`` times (None: until idle), adding to ``seen``: the rids in the order they
    finished, and each one's output ids."""
    order, ids = seen if seen is not None else ([], {})
    for _ in range(steps if steps is not None else 5000):
        if not s.has_work():
            return order, ids
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            ids.setdefault(rid, []).extend(out.output_ids[i])
            if out.finished_reasons[i] is not None:
                order.append(rid)
    if steps is None:
        raise AssertionError("scheduler did not finish")
    return order, ids


def _start_low_then_send_high(
    s: Scheduler, low: list[int], high: list[int], high_priority: int
) -> tuple[list[str], dict[str, list[int]]]:
    submit(s, "low", low, 40, priority=0)
    seen = _finish_order(s, 4)  # low is decoding when high arrives
    assert [r.rid for r in s.running] == ["low"]
    submit(s, "high", high, 4, priority=high_priority)
    return _finish_order(s, seen=seen)


@pytest.mark.parametrize("overlap", [True, False])
def test_higher_priority_preempts_at_max_running_requests(
    sched_model_dir: str, cold: Any, overlap: bool
) -> None:
    """vllm-project/vllm#40004 / sgl-project/sglang#8746: the running-request cap is full of a
    low-priority request; a request of priority 20 (> 0 + threshold 10) preempts it, finishes
    first, and the preempted one resumes with its tokens unchanged."""
    low, high = random_ids(120, 1), random_ids(90, 2)
    s = make_scheduler(
        sched_model_dir,
        max_running_requests=1,
        enable_priority_scheduling=True,
        disable_overlap_schedule=not overlap,
    )
    order, ids = _start_low_then_send_high(s, low, high, 20)
    assert order == ["high", "low"]
    assert ids["high"] == cold(high, 4) and ids["low"] == cold(low, 40)
    assert s.num_retractions == 1
    assert_idle(s)


@pytest.mark.parametrize(
    ("high_priority", "kw"),
    [
        (10, {}),
        (20, {"disable_priority_preemption": True}),
        (20, {"priority_scheduling_preemption_threshold": 25}),
    ],
)
def test_no_preemption_within_the_threshold_or_when_disabled(
    sched_model_dir: str, cold: Any, high_priority: int, kw: dict[str, Any]
) -> None:
    """A priority better by only the threshold (10 > 0 + 10 is false), preemption disabled, or a
    larger threshold: the running request keeps its slot and finishes first."""
    low, high = random_ids(120, 1), random_ids(90, 2)
    s = make_scheduler(sched_model_dir, max_running_requests=1, enable_priority_scheduling=True, **kw)
    order, ids = _start_low_then_send_high(s, low, high, high_priority)
    assert order == ["low", "high"] and s.num_retractions == 0
    assert ids["high"] == cold(high, 4) and ids["low"] == cold(low, 40)


def test_higher_priority_preempts_when_the_pool_is_full(sched_model_dir: str, cold: Any) -> None:
    """The same with free slots but no KV pages: a 4-block pool holds the low-priority request
    (700 prompt tokens); the high-priority one (600) cannot get pages until it preempts it."""
    low, high = random_ids(700, 3), random_ids(600, 4)
    s = make_scheduler(
        sched_model_dir, max_total_tokens=4 * PAGE, chunked_prefill_size=PAGE, enable_priority_scheduling=True
    )
    submit(s, "low", low, 30, priority=-3)
    seen = _finish_order(s, 6)
    assert [r.rid for r in s.running] == ["low"] and s.running[0].output_ids
    submit(s, "high", high, 4, priority=9)
    order, ids = _finish_order(s, seen=seen)
    assert order == ["high", "low"] and s.num_retractions >= 1
    assert ids["high"] == cold(high, 4) and ids["low"] == cold(low, 30)
    assert_idle(s)


@pytest.mark.parametrize(
    ("kw", "first"),
    [
        ({}, "neg"),
        ({"schedule_low_priority_values_first": True}, "neg"),
        ({"default_priority_value": 0}, "none"),
    ],
)
def test_requests_without_priority_are_least_preferred(
    sched_model_dir: str, kw: dict[str, Any], first: str
) -> None:
    """SGLang gives a request without ``priority`` the least preferred value under priority
    scheduling (it ran as priority 0 here, ahead of a request that asked for -5);
    ``--default-priority-value 0`` makes it 0."""
    s = make_scheduler(sched_model_dir, max_running_requests=1, enable_priority_scheduling=True, **kw)
    submit(
        s,
        "busy",
        random_ids(50, 5),
        3,
        priority=-(1 << 62) if kw.get("schedule_low_priority_values_first") else 1 << 62,
    )
    s.step()
    submit(s, "none", random_ids(60, 6), 2)
    submit(
        s, "neg", random_ids(70, 7), 2, priority=-5 if not kw.get("schedule_low_priority_values_first") else 5
    )
    order, _ = _finish_order(s)
    assert order[0] == "busy" and order[1] == first
    assert_idle(s)


def test_abort_on_priority_when_disabled(sched_model_dir: str) -> None:
    """``--abort-on-priority-when-disabled``: a request with a priority is refused with 503 and
    changes nothing else; one without runs."""
    s = make_scheduler(sched_model_dir, abort_on_priority_when_disabled=True)
    submit(s, "prio", random_ids(40, 8), 3, priority=3)
    submit(s, "plain", random_ids(40, 9), 3)
    res = drain(s)
    assert res["prio"]["finish"]["type"] == "abort" and res["prio"]["finish"]["status_code"] == 503
    assert res["prio"]["ids"] == [] and len(res["plain"]["ids"]) == 3
    assert_idle(s)


def test_priority_flags_parse_with_sglang_spellings() -> None:
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    argv = "--enable-priority-scheduling --priority-scheduling-preemption-threshold 3 --disable-priority-preemption"
    argv += " --default-priority-value -7 --abort-on-priority-when-disabled --device cpu"
    sa = ServerArgs.from_cli_args(parser.parse_args(argv.split()))
    assert sa.priority_scheduling_preemption_threshold == 3 and sa.disable_priority_preemption
    assert sa.default_priority_value == -7 and sa.abort_on_priority_when_disabled
    with pytest.raises(ValueError, match="priority_scheduling_preemption_threshold"):
        ServerArgs(device="cpu", priority_scheduling_preemption_threshold=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="default_priority_value"):
        ServerArgs(device="cpu", default_priority_value=1 << 63)

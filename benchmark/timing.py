"""Timing of one call on the GPU (CUDA events) or the host, shared by the scripts of ``benchmark/``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def cuda_ms(fn: Callable[[], Any], reps: int, warm: int = 2) -> list[float]:
    """Milliseconds of each of ``reps`` calls of ``fn`` from CUDA events, after ``warm`` untimed
    calls (compiles, autotuning) and a device sync."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def median_ms(fn: Callable[[], Any], calls: int, dev: str) -> float:
    """Median milliseconds per call of ``fn`` over ``calls`` calls after one warm-up call (which
    compiles): CUDA events around each call on ``dev == "cuda"`` (:func:`cuda_ms`), else the host
    wall clock (the CPU dry runs, whose timings only check the plumbing)."""
    if dev == "cuda":
        return statistics.median(cuda_ms(fn, calls, warm=1))
    fn()
    ms = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def graph_us(calls: list[Callable[[], Any]], reps: int) -> float:
    """Median microseconds per call of ``calls`` captured back to back in one CUDA graph, over
    ``reps`` timed replays (CUDA events). Every call runs once first on a side stream (compiles,
    and allocates outside the capture); one untimed replay precedes the timed ones."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    graph.replay()
    torch.cuda.synchronize()
    return statistics.median(cuda_ms(graph.replay, reps, warm=0)) * 1e3 / len(calls)

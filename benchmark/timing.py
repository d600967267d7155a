"""Median wall time of one call, shared by the tile-sweep scripts of ``benchmark/``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def median_ms(fn: Callable[[], Any], calls: int, dev: str) -> float:
    """Median milliseconds per call of ``fn`` over ``calls`` calls after one warm-up call (which
    compiles): CUDA events around each call on ``dev == "cuda"``, else the host wall clock (the
    CPU dry runs, whose timings only check the plumbing)."""
    fn()
    ms = []
    for _ in range(calls):
        if dev == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)

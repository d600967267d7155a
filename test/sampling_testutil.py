"""Shared pieces of the sampling tests: the float64 temperature-scaling reference, non-finite rows and the closeness check."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

NAN, INF = float("nan"), float("inf")


V = 40


FLT_MAX = torch.finfo(torch.float32).max


def nonfinite_rows(v: int = V) -> list[list[float]]:
    """Rows of ``v >= 40`` logits with NaN, ``+inf``, ``-inf``, all ``-inf``, all NaN, huge finite
    values and ``-0.0``."""
    gen = torch.Generator().manual_seed(7)
    base = (torch.randn(v, generator=gen, dtype=torch.float64) * 4).tolist()
    rows = [list(base)]
    r = list(base)
    r[3] = r[17] = NAN
    rows.append(r)  # NaN entries
    r = list(base)
    r[5], r[30] = INF, INF
    r[6] = NAN
    rows.append(r)  # two +inf (and a NaN)
    r = list(base)
    r[0] = r[11] = r[-1] = -INF
    rows.append(r)  # -inf entries
    rows.append([-INF] * v)  # nothing above -inf
    rows.append([NAN] * v)  # nothing but NaN
    r = [-INF] * v
    r[8] = NAN
    r[9] = INF
    rows.append(r)  # one +inf among -inf / NaN
    r = list(base)
    r[2], r[4], r[7] = 3.0e38, -3.0e38, -0.0
    rows.append(r)  # huge finite logits (z / T overflows for a tiny T without the shift)
    r = [-0.0] * v
    r[1] = NAN
    rows.append(r)  # ties at -0.0
    return rows


def ref_scaled(row: list[float], t: float) -> list[float]:
    """Float64 ``finite_limit(row) / T`` shifted by the row maximum; a shifted value beyond
    float32's range is ``-inf`` (documented: its probability is below float32's range anyway)."""
    if any(x == INF for x in row):
        return [0.0 if x == INF else -INF for x in row]
    vals = [-INF if math.isnan(x) else x for x in row]
    m = max(vals)
    if m == -INF:
        return [-INF] * len(row)
    return [(x - m) / t if x - m >= -FLT_MAX else -INF for x in vals]


def close_to_ref(got: float, want: float, what: str) -> None:
    assert not math.isnan(got), what
    if want == -INF or want < -3.4e38:  # -inf, or beyond float32's range
        assert got == -INF, (what, got, want)
    else:
        assert got == pytest.approx(want, rel=1e-6, abs=1e-6), (what, got, want)


def sglang_sampling_params(**kwargs: Any) -> Any:
    """SGLang 0.5.23's own ``SamplingParams(**kwargs)`` (an oracle for field validation: call
    ``.verify(vocab_size)`` on it), imported when a test first needs it, so a module using it still
    collects where SGLang is not installed; the calling test is skipped there."""
    module = pytest.importorskip("sglang.srt.sampling.sampling_params")
    return module.SamplingParams(**kwargs)

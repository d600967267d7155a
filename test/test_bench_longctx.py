"""``benchmark/longctx.py``: the indexer's quadratic FLOP term against a direct sum."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmark"))

from longctx import indexer_pairs  # noqa: E402


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 255, 256, 1000, 4099])
@pytest.mark.parametrize("ratio", [4, 128])
def test_indexer_pairs_is_the_sum_of_visible_counts(n: int, ratio: int) -> None:
    assert indexer_pairs(n, ratio) == sum((t + 1) // ratio for t in range(n))


def test_indexer_pairs_is_about_n_squared_over_8_for_csa() -> None:
    n = 1 << 20
    assert abs(indexer_pairs(n, 4) / (n * n / 8) - 1) < 1e-5


class _FakeOut:
    def __init__(self, rids: list[str], n: int) -> None:
        self.rids = rids
        self.output_ids = [[7] * n for _ in rids]
        self.cached_tokens = [0 for _ in rids]


class _FakeScheduler:
    """Produces ``n`` tokens per request, one per step, but emits them every ``interval`` steps
    (as a scheduler does for non-streaming requests or a stream interval > 1); each step advances
    the fake clock by ``step_s``."""

    def __init__(self, clock: list[float], step_s: float, interval: int) -> None:
        self.clock, self.step_s, self.interval = clock, step_s, interval
        self.reqs: dict[str, int] = {}
        self.pending: dict[str, int] = {}
        self.steps = 0

    def add_request(self, r) -> None:  # noqa: ANN001 - the harness's TokenizedGenerateReqInput
        self.reqs[r.rid] = r.sampling_params.max_new_tokens
        self.pending[r.rid] = 0

    def has_work(self) -> bool:
        return any(v > 0 for v in self.reqs.values()) or any(v > 0 for v in self.pending.values())

    def step(self) -> _FakeOut | None:
        self.clock[0] += self.step_s
        self.steps += 1
        for rid in self.reqs:
            if self.reqs[rid] > 0:
                self.reqs[rid] -= 1
                self.pending[rid] += 1
        done = not any(v > 0 for v in self.reqs.values())
        if self.steps == 1 or self.steps % self.interval == 0 or done:
            rids = [r for r in self.pending if self.pending[r] > 0]
            n = self.pending[rids[0]] if rids else 0
            for r in rids:
                self.pending[r] = 0
            return _FakeOut(rids, n) if rids else None
        return None


@pytest.mark.parametrize("interval", [1, 5, 100])
def test_run_reqs_tpot_is_per_token_whatever_the_output_interval(monkeypatch, interval: int) -> None:
    """A step of 10 ms per token must read as a TPOT of 10 ms, whether the scheduler emits every
    step or every ``interval`` steps (a median gap between outputs reads interval x 10 ms)."""
    import longctx

    clock = [0.0]
    monkeypatch.setattr(longctx.time, "perf_counter", lambda: clock[0])
    s = _FakeScheduler(clock, 0.010, interval)
    r = longctx.run_reqs(s, {"a": [11] * 8, "b": [12] * 8}, 25)
    assert r["ttft_s"] == pytest.approx(0.010)
    assert r["tpot_ms"] == pytest.approx(10.0)

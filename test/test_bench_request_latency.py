"""benchmark/bench_request_latency.py: the stage table from stamps, and one run against the real
server on the stub runner (slow)."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmark"))

import bench_request_latency as brl  # noqa: E402


def test_stages_are_the_gaps_between_consecutive_stamps() -> None:
    # stamps 1 ms apart in the documented order, the last one (client's first chunk) 5 ms later
    order = [
        "c_send", "asgi", "h_enter", "tokenized", "sent", "s_recv", "s_added", "s_step", "s_batch",
        "s_launched", "f_start", "f_meta", "f_end", "s_processed", "s_out", "tm_recv", "tm_yield",
    ]  # fmt: skip
    st = {k: i * 1e-3 for i, k in enumerate(order)}
    st["c_first"] = st["tm_yield"] + 5e-3
    got = brl._stages(st)
    assert got.pop("ttft") == pytest.approx((len(order) - 1) + 5)
    assert got.pop("sse") == pytest.approx(5.0)
    # s_recv -> s_added is inside add_request, not a stage: queued starts at s_added
    assert got == pytest.approx({name: 1.0 for name, _, _ in brl.STAGES if name not in ("ttft", "sse")})
    assert "queued" in got and "http_in" in got


def test_missing_stamps_leave_their_stages_out() -> None:
    got = brl._stages({"c_send": 0.0, "c_first": 0.012})
    assert got == pytest.approx({"ttft": 12.0})


@pytest.mark.slow
def test_one_run_reports_every_stage_of_every_scenario() -> None:
    from bench_scheduler import model_dir

    mdir = model_dir()
    try:
        table = brl.run_mode(True, 0.0, 1, mdir)
    finally:
        shutil.rmtree(mdir, ignore_errors=True)
    assert set(table) == {
        "short alone",
        "2k cold alone",
        "2k hit alone",
        "16 hits at once",
        "hit, 16 streaming",
    }
    for name, stages in table.items():
        assert set(stages) == {s for s, _, _ in brl.STAGES}, name
        assert stages["ttft"]["median"] > 0

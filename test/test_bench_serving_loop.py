"""The serving-loop benchmarks: ``benchmark/bench_scheduler.py`` (stub runner) and
``benchmark/serving_overlap.py`` (its summary's verdicts on hand-made numbers; its CPU dry run).

Oracles: the numbers written into the hand-made results; for the scheduler benchmark, that every
request got all its tokens and that both modes produced the same ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmark"))


def test_bench_scheduler_quick(tmp_path: Path) -> None:
    import bench_scheduler

    out = tmp_path / "bs.json"
    assert (
        bench_scheduler.main(
            ["--batch-sizes", "1", "3", "--steps", "4", "--warmup-steps", "1", "--out", str(out)]
        )
        == 0
    )
    rows = json.loads(out.read_text())
    assert [(r["batch_size"], r["overlap"]) for r in rows] == [(1, False), (1, True), (3, False), (3, True)]
    for r in rows:
        assert r["finished"] and r["same_tokens_both_modes"] and r["steps"] == 4
        assert r["step_ms"] > 0 and r["sched_ms"] >= 0 and r["worker_ms"] > 0
        assert r["stub_vocab"] == bench_scheduler.STUB_VOCAB and 0 <= r["standin_ms"] <= r["worker_ms"]
        assert r["worker_host_ms"] <= r["worker_ms"]


def test_serving_overlap_summary_verdicts() -> None:
    import serving_overlap as so

    res = {
        "mode": "hand",
        "concurrency": [1, 16, 32],
        "runner": {"ms_step": {"1": 4.0, "16": 5.0, "32": 6.0}},
        "overlap_on": {
            "c1": {"mean_tpot_ms": 4.2, "median_tpot_ms": 4.2, "p99_tpot_ms": 4.5},
            "c16": {"mean_tpot_ms": 5.4, "median_tpot_ms": 5.4, "p99_tpot_ms": 6.0},
            "c32": {"mean_tpot_ms": 7.2, "median_tpot_ms": 7.0, "p99_tpot_ms": 8.0, "input_len": 1024},
            "long": {"input_len": 10000, "max_concurrency": 32, "median_tpot_ms": 12.0, "p99_tpot_ms": 17.0},
            "first16": {"mean_ttft_ms": 300.0, "max_concurrency": 16},
            "steady16": {"mean_ttft_ms": 250.0},
        },
        "overlap_off": {"c16": {"mean_tpot_ms": 7.5}},
        "prefix_cache": {
            "gsp": {
                "hit_rate_on": 0.9,
                "ttft_speedup_mean": 4.5,
                "ttft_speedup_median": 5.0,
                "throughput_ratio_total": 2.0,
            }
        },  # fmt: skip
    }
    md = so.summary(res)
    assert "TPOT at concurrency 16 within 10% of the runner step: 1.08x -> met" in md
    assert "TPOT at concurrency 32 within 10% of the runner step: 1.20x -> not met" in md
    assert "p99 TPOT long / short cell under 2x: 2.12x -> not met" in md
    assert "first-16 TTFT within 1.5x of steady state: 1.20x -> met" in md
    assert "shared-prompt mean TTFT speedup >= 4x without a warm-up pass: 4.50x -> met" in md
    assert "| 16 | 5.000 | 5.40 / 5.40 / 6.00 | 1.08 | 7.50 | 1.50 |" in md


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_serving_overlap_dry_run(tmp_path: Path) -> None:
    """The whole device benchmark on CPU with tiny sizes (prefix-cache phase skipped: its own
    tests cover it): every phase ran, the cells completed without failures."""
    out = tmp_path / "so"
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmark" / "serving_overlap.py"),
            "--dry",
            "--out",
            str(out),
            "--budget-s",
            "800",
            "--concurrency",
            "1",
            "2",
            "--skip",
            "prefix_cache",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=880,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert not res["errors"] and set(res["runner"]["ms_step"]) == {"1", "2"}
    on, off = res["overlap_on"], res["overlap_off"]
    for cell in ("first16", "c1", "c2", "long", "steady16"):
        assert on[cell]["completed"] > 0 and on[cell]["failed"] == 0, cell
    assert off["c2"]["completed"] > 0 and off["c2"]["failed"] == 0
    assert on["jit"] is not None and on["num_oom_errors"] == 0
    assert "Targets:" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_profile_decode_host_dry_run(tmp_path: Path) -> None:
    """``benchmark/profile_decode_host.py --dry`` (tiny preset, CPU): a row per batch size and
    overlap mode, each request decoded through the warm-up and measured steps (at least
    2 + 4 tokens out), the worker's parts timed with overlap off, and the cProfile tables."""
    import profile_decode_host

    assert profile_decode_host.main(["--dry", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "profile_decode_host.md").read_text()
    rows = [r.split("|")[1:-1] for r in text.splitlines() if r.startswith("| 1 |") or r.startswith("| 4 |")]
    assert sorted((r[0].strip(), r[1].strip()) for r in rows) == [
        ("1", "off"),
        ("1", "on"),
        ("4", "off"),
        ("4", "on"),
    ]
    header = next(r for r in text.splitlines() if r.startswith("| batch |")).split("|")[1:-1]
    col = {h.strip(): i for i, h in enumerate(header)}
    for r in rows:
        assert float(r[col["step ms"]]) > 0 and float(r[col["min tokens out"]]) >= 6
        assert (r[col["ModelRunner.forward"]].strip() == "-") == (r[1].strip() == "on")
    assert "functions by own host ms per step" in text and "functions by cumulative host ms per step" in text

"""benchmark/matrix.py: knee/cliff detection on planted synthetic data, plots, CSV, and a tiny
end-to-end matrix against the SGLang-shaped stub server."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from bench_stub_server import StubConfig, StubServer  # noqa: E402
from sglang_v4 import bench_serving as bs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmark" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


matrix = _load("matrix")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_gain_per_doubling_hand_values() -> None:
    # 1 -> 8 is three doublings; 8x throughput is +100% per doubling
    assert matrix.gain_per_doubling(1, 100, 8, 800) == pytest.approx(1.0)
    # 8 -> 32 is two doublings; +21% total is +10% per doubling
    assert matrix.gain_per_doubling(8, 100, 32, 121) == pytest.approx(0.10)
    assert matrix.gain_per_doubling(2, 0, 4, 5) == math.inf
    assert matrix.gain_per_doubling(2, 5, 4, 0) == -1.0
    with pytest.raises(ValueError, match="c0 < c1"):
        matrix.gain_per_doubling(4, 1, 4, 2)


def test_knee_found_where_planted() -> None:
    conc = [1, 2, 4, 8, 16, 32]
    thr = [100, 195, 380, 400, 410, 412]  # 4 -> 8 gains 5.3%: the knee is at 4
    k = matrix.find_knee(conc, thr)
    assert (k.concurrency, k.next_concurrency) == (4, 8)
    assert k.gain_per_doubling == pytest.approx(400 / 380 - 1)
    # shuffled input, same answer
    k2 = matrix.find_knee(conc[::-1], thr[::-1])
    assert (k2.concurrency, k2.next_concurrency) == (4, 8)
    # the default {1, 8, 32} sweep: 1->8 +91%/doubling, 8->32 +4.2%/doubling -> knee at 8
    k3 = matrix.find_knee([1, 8, 32], [100, 700, 760])
    assert k3.concurrency == 8 and k3.gain_per_doubling == pytest.approx((760 / 700) ** 0.5 - 1)
    # just above the threshold is not a knee
    assert matrix.find_knee([8, 32], [100, 121.5]) is None
    assert matrix.find_knee([1, 2, 4], [100, 200, 400]) is None
    assert matrix.find_knee([1], [100]) is None
    with pytest.raises(ValueError, match="same length"):
        matrix.find_knee([1, 2], [1.0])


def test_cliff_found_where_planted() -> None:
    xs = [1, 2, 4, 8, 16]
    ttft = [10, 12, 15, 40, 45]  # 15 -> 40 is x2.67
    tpot = [5, 5, 6, 7, 8]
    c = matrix.find_cliff(xs, ttft, tpot, [0] * 5)
    assert (c.x, c.prev_x) == (8, 4) and c.ratio == pytest.approx(40 / 15) and "TTFT" in c.reason
    c = matrix.find_cliff(xs, [10] * 5, [5, 6, 13, 14, 15], [0] * 5)
    assert (c.x, c.prev_x) == (4, 2) and "TPOT" in c.reason
    # exactly 2x is not "more than 2x"
    assert matrix.find_cliff(xs, [1, 2, 4, 8, 16], [1] * 5, [0] * 5) is None
    # a failure comes first even without a latency jump
    c = matrix.find_cliff(xs, ttft, tpot, [0, 0, 1, 0, 3])
    assert c.x == 4 and "1 failed" in c.reason
    c = matrix.find_cliff(xs, None, tpot, [2, 0, 0, 0, 0])
    assert c.x == 1 and c.prev_x is None


def _synthetic_rows() -> list[dict]:
    rows = []
    for inp in (1024, 10240):
        for b, thr, ttft, tpot, failed in (
            (1, 100, 50, 10, 0),
            (8, 700, 60, 11, 0),
            (32, 730, 200, 12, 0),  # knee at 8; TTFT x3.3 cliff at 32
        ):
            scale = inp / 1024
            rows.append(
                dict.fromkeys(matrix.COLUMNS, 0.0)
                | {
                    "input_len": inp,
                    "output_len": 128,
                    "concurrency": b,
                    "num_prompts": 2 * b,
                    "completed": 2 * b - failed,
                    "failed": failed,
                    "output_throughput": thr / scale,
                    "total_throughput": thr * 9 / scale,
                    "median_ttft_ms": ttft * scale * 0.8,
                    "p99_ttft_ms": ttft * scale,
                    "median_tpot_ms": tpot * 0.9,
                    "p99_tpot_ms": tpot * (3 if inp == 10240 and b == 32 else 1),
                    "error": "",
                }
            )
    return rows


def test_analyze_plot_csv_markdown(tmp_path: Path) -> None:
    rows = _synthetic_rows()
    res = matrix.analyze(rows)
    for inp in (1024, 10240):
        shape = res["by_shape"][(inp, 128)]
        assert shape["knee"].concurrency == 8
        assert shape["cliff"].x == 32 and "TTFT" in shape["cliff"].reason
    # over input length at bs=32: p99 TPOT 12 -> 36 is a cliff; bs=1 has none
    assert res["by_concurrency"][(32, 128)]["cliff"].x == 10240
    assert res["by_concurrency"][(1, 128)]["cliff"] is None
    total = matrix.analyze(rows, knee_metric="total_throughput")  # same ratios in the synthetic data
    assert total["by_shape"][(1024, 128)]["knee"].concurrency == 8
    with pytest.raises(ValueError, match="knee_metric"):
        matrix.analyze(rows, knee_metric="p99_ttft_ms")
    paths = matrix.plot(rows, tmp_path, res)
    assert {p.name for p in paths} == {"throughput_vs_concurrency.png", "p99_latency_vs_input.png"}
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000
    matrix.write_csv(rows, tmp_path / "m.csv")
    back = matrix.read_csv(tmp_path / "m.csv")
    assert len(back) == 6 and back[2]["p99_ttft_ms"] == pytest.approx(200.0) and back[2]["concurrency"] == 32
    md = matrix.render_markdown(back, matrix.analyze(back))
    assert "| 1024 | 128 | bs=8 (to bs=32: +2.1%/doubling) | bs=32 (after bs=8): p99 TTFT x3.33" in md
    assert "| 32 | 128 | input=10240 (after input=1024): p99 TPOT x3.00" in md


def test_matrix_end_to_end_against_stub(tmp_path: Path) -> None:
    tok = bs.get_tokenizer(None)
    with StubServer(StubConfig(ttft_s=0.01, chunk_s=0.002)) as srv:
        rows = matrix.run_matrix(srv.url, [1, 2], [16, 32], [4], tmp_path, tok=tok, prompts_per_concurrency=2)
        reqs = [b for p, b in srv.state.requests if p == "/generate"]
    assert len(rows) == 4 and all(r["failed"] == 0 and r["completed"] == 2 * r["concurrency"] for r in rows)
    # exact prompt lengths through token ids
    assert {len(b["input_ids"]) for b in reqs} == {16, 32}
    assert (tmp_path / "matrix.csv").exists() and len((tmp_path / "runs.jsonl").read_text().splitlines()) == 4
    # a server that rejects everything: each shape records one failed cell and skips larger batches
    with StubServer(StubConfig(fail_every=1)) as srv:
        rows = matrix.run_matrix(srv.url, [1, 2], [16, 32], [4], tmp_path / "bad", tok=tok)
    assert len(rows) == 2 and all(r["completed"] == 0 and r["failed"] == 2 for r in rows)
    assert "Warmup failed" in rows[0]["error"]
    res = matrix.analyze(rows)
    assert res["by_shape"][(16, 4)]["cliff"].x == 1


def test_cli_from_csv(tmp_path: Path) -> None:
    rows = _synthetic_rows()
    matrix.write_csv(rows[:3], tmp_path / "a.csv")  # input 1024
    matrix.write_csv(rows[3:], tmp_path / "b.csv")  # input 10240
    assert (
        matrix.main(
            ["--from-csv", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--out-dir", str(tmp_path / "o")]
        )
        == 0
    )
    assert len(matrix.read_csv(tmp_path / "o" / "matrix.csv")) == 6  # merged
    assert "| 10240 | 128 | bs=8" in (tmp_path / "o" / "summary.md").read_text()
    for name in ("summary.md", "analysis.json", "throughput_vs_concurrency.png", "p99_latency_vs_input.png"):
        assert (tmp_path / "o" / name).stat().st_size > 0

"""benchmark/prefix_cache.py against two SGLang-shaped stub servers (one reporting cache hits and
answering faster, one reporting none), with the ratios recomputed from the raw results."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from bench_stub_server import StubConfig, StubServer  # noqa: E402
from sglang_v4 import bench_serving as bs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_prefix_cache", ROOT / "benchmark" / "prefix_cache.py")
pc = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = pc
_spec.loader.exec_module(pc)


def test_compare_ratios() -> None:
    on = {"cache_hit_rate": 0.75, "mean_ttft_ms": 10.0, "median_ttft_ms": 8.0, "p99_ttft_ms": 20.0}
    on |= {"output_throughput": 300.0, "total_throughput": 3000.0}
    off = {"cache_hit_rate": 0.0, "mean_ttft_ms": 40.0, "median_ttft_ms": 32.0, "p99_ttft_ms": 50.0}
    off |= {"output_throughput": 100.0, "total_throughput": 1500.0}
    c = pc.compare(on, off)
    assert c == {
        "hit_rate_on": 0.75,
        "hit_rate_off": 0.0,
        "ttft_speedup_mean": 4.0,
        "ttft_speedup_median": 4.0,
        "ttft_speedup_p99": 2.5,
        "throughput_ratio_output": 3.0,
        "throughput_ratio_total": 2.0,
        "ttft_speedup_hits": None,  # no hit/miss split in ``on``
    }
    assert pc.compare(on, off | {"output_throughput": 0.0})["throughput_ratio_output"] is None
    assert pc.compare(on | {"mean_ttft_hits_ms": 5.0}, off)["ttft_speedup_hits"] == 8.0


def test_hit_split_by_cached_fraction() -> None:
    """Hits are requests with at least half their prompt cached; failed requests are left out."""
    res = {
        "ttfts": [0.300, 0.010, 0.020, 0.250, 0.900],
        "cached_tokens": [0, 2048, 1024, 1023, 2048],
        "input_lens": [2100, 2100, 2048, 2048, 2100],
        "successes": [True, True, True, True, False],
    }
    got = pc.hit_split(res)
    assert got["n_hits"] == 2 and got["n_misses"] == 2
    assert got["mean_ttft_hits_ms"] == pytest.approx((10.0 + 20.0) / 2)
    assert got["mean_ttft_misses_ms"] == pytest.approx((300.0 + 250.0) / 2)
    empty = pc.hit_split({"ttfts": [0.1], "cached_tokens": [0], "input_lens": [10], "successes": [True]})
    assert empty["n_hits"] == 0 and empty["mean_ttft_hits_ms"] is None


def test_prefix_cache_against_two_stubs(tmp_path: Path) -> None:
    tok = bs.get_tokenizer(None)
    cli = pc.argparse.Namespace(
        gsp_num_groups=2,
        gsp_prompts_per_group=3,
        gsp_system_prompt_len=40,
        gsp_question_len=8,
        gsp_output_len=4,
        mt_conversations=2,
        mt_turns=3,
        mt_system_len=30,
        mt_question_len=6,
        mt_output_len=3,
    )
    workloads = {w: pc.workload_args(w, cli) for w in pc.WORKLOADS}
    with (
        StubServer(StubConfig(ttft_s=0.01, chunk_s=0.002, cached_fraction=0.5)) as on,
        StubServer(StubConfig(ttft_s=0.05, chunk_s=0.002)) as off,
    ):
        res = pc.run_prefix_cache(on.url, off.url, workloads, tmp_path, tok=tok, max_concurrency=2)
        # identical requests went to both servers (same seeded workload)
        on_bodies = [b["text"] for p, b in on.state.requests]
        off_bodies = [b["text"] for p, b in off.state.requests]
    assert sorted(on_bodies) == sorted(off_bodies)
    assert res["gsp"]["on"]["completed"] == 6 and res["multiturn"]["on"]["completed"] == 6
    for name in pc.WORKLOADS:
        r = res[name]
        # the stub reports cached = int(prompt_tokens / 2); recompute the hit rate from the totals
        assert r["on"]["cache_hit_rate"] == pytest.approx(
            r["on"]["total_cached_tokens"] / r["on"]["total_input_tokens"]
        )
        assert 0.4 < r["on"]["cache_hit_rate"] <= 0.5 and r["off"]["cache_hit_rate"] == 0.0
        c = r["compare"]
        assert c["ttft_speedup_mean"] == pytest.approx(r["off"]["mean_ttft_ms"] / r["on"]["mean_ttft_ms"])
        assert c["ttft_speedup_median"] > 2.0  # stub TTFT 50 ms vs 10 ms
        assert c["throughput_ratio_output"] == pytest.approx(
            r["on"]["output_throughput"] / r["off"]["output_throughput"]
        )
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["gsp"]["compare"] == pytest.approx(res["gsp"]["compare"])
    reqs = saved["gsp"]["on"]["requests"]  # per request, in send order
    assert len(reqs) == 6 and all(r["ok"] for r in reqs)
    assert sum(r["ttft_ms"] for r in reqs) / 6 == pytest.approx(res["gsp"]["on"]["mean_ttft_ms"], abs=0.01)
    assert min(r["start_s"] for r in reqs) == 0.0
    md = pc.render_markdown(res)
    assert "| gsp | on | 6/0 |" in md and "| multiturn | off | 6/0 | 0.0% |" in md


def test_cli_needs_servers() -> None:
    with pytest.raises(SystemExit):
        pc.main([])
    with pytest.raises(ValueError, match="workload"):
        pc.workload_args("nope", pc.argparse.Namespace())


def test_jit_warmup_runs_other_prompts_first(tmp_path: Path) -> None:
    """``--jit-warmup``: each server first sees the workload on other prompts (seed + 1000), then
    the measured requests, which are the same as without the pre-pass; only those are recorded."""
    tok = bs.get_tokenizer(None)
    cli = pc.argparse.Namespace(
        gsp_num_groups=2,
        gsp_prompts_per_group=2,
        gsp_system_prompt_len=30,
        gsp_question_len=6,
        gsp_output_len=3,
    )
    workloads = {"gsp": pc.workload_args("gsp", cli)}
    runs = {}
    for jit in (False, True):
        with StubServer(StubConfig(ttft_s=0.001, chunk_s=0.001)) as on, StubServer(StubConfig()) as off:
            out = tmp_path / str(jit)
            res = pc.run_prefix_cache(
                on.url, off.url, workloads, out, tok=tok, max_concurrency=2, jit_warmup=jit
            )
            runs[jit] = [b["text"] for p, b in on.state.requests if p == "/generate"]
        assert res["gsp"]["on"]["completed"] == 4
        assert len((out / "runs.jsonl").read_text().splitlines()) == 2  # measured runs only
    plain, warmed = runs[False], runs[True]
    assert len(warmed) == len(plain) + 4
    assert sorted(warmed[-len(plain) :]) == sorted(plain)  # the measured requests are unchanged
    assert not set(warmed[:4]) & set(plain)  # the pre-pass used other prompts


def test_sigterm_stops_launched_servers(tmp_path: Path) -> None:
    """A ``--launch`` run terminated by SIGTERM (as ``timeout`` does) stops the server it started:
    the server runs in its own process group, and an orphan kept the GPU's memory from the next run
    of a device call. Checked with the process table: every descendant is gone afterwards. The
    server runs the model-free ``FakeScheduler`` (its processes are the real server's)."""
    import signal
    import subprocess
    import time

    from server_fixture import fake_env, make_fake_model_dir

    psutil = pytest.importorskip("psutil")
    env = fake_env({"PYTHONUNBUFFERED": "1"})
    model = make_fake_model_dir(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmark" / "prefix_cache.py"), "--launch", "--server-args",
         f"--model-path {model}", "--server-timeout", "120", "--out-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    log = tmp_path / "server_on.log"
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and "ready to roll" not in (
            log.read_text() if log.exists() else ""
        ):
            assert proc.poll() is None, "prefix_cache.py exited before its server was ready"
            time.sleep(0.5)
        assert "ready to roll" in log.read_text()
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "no server process found"
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, f"left running: {[p.pid for p in alive]}"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_stage_lines_of_the_server_log_summarised_by_class() -> None:
    """The server's own ``ReqTimeStats`` lines (``time_stats_line``, as the server logs them) read
    back and summarised: hits (half or more of the prompt cached) and misses apart, each stage's
    mean and median equal to ``statistics`` over the known durations; a line without a stage
    does not count in that stage."""
    import statistics

    from sglang_v4.managers.req_time_stats import time_stats_line

    rows = [  # (input_len, cached, durations in seconds)
        (800, 768, {"tokenize": 0.002, "prefill_waiting": 0.001, "forward": 0.030, "ttft": 0.040}),
        (800, 512, {"tokenize": 0.004, "prefill_waiting": 0.003, "forward": 0.010, "ttft": 0.020}),
        (800, 768, {"tokenize": 0.003, "prefill_waiting": 0.002, "forward": 0.020, "ttft": 0.030}),
        (800, 0, {"tokenize": 0.005, "prefill_waiting": 0.004, "forward": 0.500, "ttft": 0.600}),
        (900, 256, {"tokenize": 0.006, "forward": 0.700}),  # no queue stamp
    ]
    log = "\n".join(
        f"[2026-01-01 00:00:00] {time_stats_line(f'r{i}', n, c, 4, d, 1.0)}"
        for i, (n, c, d) in enumerate(rows)
    )
    log += "\n[2026-01-01 00:00:00] Finish: rid=r9 prompt_tokens=3\n"  # another line of the log
    lines = pc.parse_time_stats_lines(log)
    assert [ln["rid"] for ln in lines] == ["r0", "r1", "r2", "r3", "r4"]
    assert lines[4]["cached"] == 256 and lines[4]["input_len"] == 900 and lines[4]["output_len"] == 4
    got = pc.stage_summary(lines)
    assert got["hits"]["n"] == 3 and got["misses"]["n"] == 2
    hit_fwd = [30.0, 10.0, 20.0]
    assert got["hits"]["stages"]["forward"]["mean"] == pytest.approx(statistics.fmean(hit_fwd))
    assert got["hits"]["stages"]["forward"]["p50"] == pytest.approx(20.0)
    assert got["hits"]["stages"]["queue_duration"]["mean"] == pytest.approx(2.0)  # SGLang's name
    assert got["misses"]["stages"]["forward"]["p50"] == pytest.approx(600.0)
    assert got["misses"]["stages"]["queue_duration"]["mean"] == pytest.approx(4.0)  # one line has it
    md = "\n".join(pc.render_stage_tables({"gsp": {"on": {"stage_ms": got}, "off": {}}}))
    assert "hits n=3, misses n=2" in md
    assert "| forward | 20.00 | 20.00 | 600.00 | 600.00 |" in md

"""Per-request stage timestamps (SGLang's ``--enable-request-time-stats-logging``,
``sglang:queue_time_seconds`` / ``sglang:per_stage_req_latency_seconds`` and the ``meta_info`` time
keys under ``--enable-metrics``).

In-process scheduler: the stamps it sends lie between wall-clock readings (``time.time()``, the
oracle) taken around the calls, in stage order, a prefix-cache hit carries its cached-token count,
and nothing is stamped or sent with both flags off. Real server on the embedded model: the metric
counts equal the number of requests sent, one log line per finished request (read with Python's
``re``), stage durations non-negative and summing to no more than the latency the client measured
with ``time.perf_counter()``, and the second request of a shared prompt shows a prefix-cache hit.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from sglang_v4.managers.req_time_stats import STAGE_NAMES

#: Slack in seconds between two clocks read in different ways (time.time vs perf_counter + offset).
CLOCK_SLACK_S = 0.002

LINE_RE = re.compile(
    r"ReqTimeStats\(rid=(?P<rid>[^,]+), input_len=(?P<input>\d+), cached_input_len=(?P<cached>\d+), "
    r"output_len=(?P<output>\d+), type=unified\): (?P<rest>.*)$"
)
FIELD_RE = re.compile(r"(\w+)=([0-9.]+)ms")


def _collect(s: Any, out: dict[str, list[Any]]) -> None:
    """Step ``s`` until idle, keeping each rid's ``time_stats`` entries (one per message)."""
    for _ in range(10_000):
        if not s.has_work():
            return
        msg = s.step()
        if msg is None:
            continue
        assert msg.time_stats is None or len(msg.time_stats) in (0, len(msg.rids))
        for i, rid in enumerate(msg.rids):
            out.setdefault(rid, []).append(msg.time_stats[i] if msg.time_stats else None)
    raise AssertionError("scheduler did not finish")


@pytest.mark.parametrize("overlap", [True, False])
def test_scheduler_stamps_between_wall_clock_readings(sched_model_dir: str, overlap: bool) -> None:
    from scheduler_testutil import PAGE, make_scheduler, submit

    s = make_scheduler(
        sched_model_dir, enable_request_time_stats_logging=True, disable_overlap_schedule=not overlap
    )
    assert s.enable_overlap is overlap
    ids = [(7 * i) % 500 + 3 for i in range(2 * PAGE + 40)]
    got: dict[str, list[Any]] = {}
    t0 = time.time()
    submit(s, "cold", ids, 3)
    _collect(s, got)
    t1 = time.time()
    submit(s, "hit", ids, 3)
    _collect(s, got)
    t2 = time.time()
    for rid, lo, hi in (("cold", t0, t1), ("hit", t1, t2)):
        stats = got[rid]
        # the stamps go out until the message with the first token, then never again
        first = next(i for i, x in enumerate(stats) if x is not None and x.first_token > 0)
        assert all(x is not None for x in stats[: first + 1]) and all(x is None for x in stats[first + 1 :])
        assert len(stats) > first + 1  # the request's later messages carried none
        last = stats[first]
        assert lo - CLOCK_SLACK_S <= last.scheduler_recv <= last.forward_entry <= last.launched
        assert last.launched <= last.result_ready <= last.first_token
        assert last.first_token <= hi + CLOCK_SLACK_S
    sent = {rid: [x for x in v if x is not None][-1] for rid, v in got.items()}
    assert sent["cold"].prefix_len == 0
    assert sent["hit"].prefix_len >= PAGE  # whole pages of the shared prompt were cached


def test_scheduler_sends_no_stamps_when_off(sched_model_dir: str) -> None:
    from scheduler_testutil import make_scheduler, submit

    s = make_scheduler(sched_model_dir)
    assert not s.record_time_stats
    submit(s, "plain", [5, 6, 7, 8], 3)
    got: dict[str, list[Any]] = {}
    _collect(s, got)
    assert got["plain"] and all(x is None for x in got["plain"])


def _str_out(rids: list[str], completion: int, finished: bool, stats: list[Any], detok_ts: float) -> Any:
    from sglang_v4.managers.io_struct import BatchStrOut

    n = len(rids)
    return BatchStrOut(
        rids=rids,
        finished_reasons=[{"type": "length", "length": completion} if finished else None] * n,
        output_strs=["x"] * n,
        final_strs=[None] * n,
        output_ids=[[1]] * n,
        prompt_tokens=[300] * n,
        completion_tokens=[completion] * n,
        cached_tokens=[256] * n,
        time_stats=stats,
        detokenizer_ts=detok_ts,
    )


def test_tokenizer_side_metrics_line_and_meta(caplog: pytest.LogCaptureFixture) -> None:
    """The tokenizer manager's side on known stamps (seconds): the stage histograms count each
    finished request once, the log line holds the hand-computed durations and SGLang's
    ``meta_info`` keys come back under ``--enable-metrics`` (none with only the log flag)."""
    import logging
    from types import SimpleNamespace

    from sglang_v4.entrypoints.metrics import TokenizerMetrics
    from sglang_v4.managers.req_time_stats import RequestTimeline, SchedulerTimeStats
    from sglang_v4.managers.tokenizer_time_stats_mixin import TokenizerTimeStatsMixin

    class TM(TokenizerTimeStatsMixin):
        def __init__(self, metrics_on: bool) -> None:
            self.server_args = SimpleNamespace(
                enable_metrics=metrics_on, enable_request_time_stats_logging=True
            )
            self.metrics = TokenizerMetrics("m") if metrics_on else None

    tm = TM(True)
    sched = SchedulerTimeStats(100.010, 100.030, 100.031, 100.060, 100.061, 256)
    states = {}
    for rid in ("a", "b"):
        states[rid] = SimpleNamespace(
            timeline=RequestTimeline(received=100.000, dispatched=100.008),
            obj=SimpleNamespace(log_metrics=True),
        )
    first = _str_out(["a", "b"], 1, False, [sched, sched], 100.062)
    for i, rid in enumerate(first.rids):
        tm._time_stats_output(states[rid].timeline, first, i, 100.064)
    last = _str_out(["a", "b"], 3, True, [sched, sched], 100.090)
    metas = {}
    with caplog.at_level(logging.INFO, logger="sglang_v4.managers.tokenizer_time_stats_mixin"):
        for i, rid in enumerate(last.rids):
            tm._time_stats_output(states[rid].timeline, last, i, 100.100)
            metas[rid] = tm._time_stats_finished(rid, states[rid], last, i, 100.100)
    lines = [r.getMessage() for r in caplog.records if "ReqTimeStats" in r.getMessage()]
    assert len(lines) == 2
    m = LINE_RE.search(lines[0])
    assert m and m["rid"] == "a" and m["input"] == "300" and m["cached"] == "256" and m["output"] == "3"
    got = {k: float(v) for k, v in FIELD_RE.findall(m["rest"])}
    want = {  # ms, from the stamps above
        "tokenize": 8.0,
        "api_server_dispatch": 2.0,
        "queue_duration": 20.0,
        "batch_build": 1.0,
        "forward": 29.0,
        "process_output": 1.0,
        "detokenize": 1.0,
        "output_dispatch": 2.0,
        "ttft": 64.0,
        "e2e": 100.0,
    }
    assert got == pytest.approx(want, abs=0.011)
    assert metas["a"]["queue_time"] == pytest.approx(0.020)
    assert metas["a"]["first_token_latency"] == pytest.approx(0.064)
    assert metas["a"]["decode_throughput"] == pytest.approx(2 / 0.036)
    assert metas["a"]["request_received_ts"] == 100.000 and metas["a"]["request_finished_ts"] == 100.100
    samples = {
        (s.name, s.labels.get("stage")): s.value
        for fam in text_string_to_metric_families(tm.metrics.render().decode())
        for s in fam.samples
    }
    assert samples[("sglang:queue_time_seconds_count", None)] == 2
    assert samples[("sglang:queue_time_seconds_sum", None)] == pytest.approx(0.040)
    assert samples[("sglang:per_stage_req_latency_seconds_count", "prefill_forward")] == 2
    assert samples[("sglang:per_stage_req_latency_seconds_sum", "prefill_forward")] == pytest.approx(0.062)
    assert samples[("sglang:per_stage_req_latency_seconds_count", "response_write")] == 0

    only_log = TM(False)
    st = SimpleNamespace(timeline=RequestTimeline(received=100.0), obj=SimpleNamespace(log_metrics=True))
    assert only_log._time_stats_finished("c", st, last, 0, 100.1) == {}


@pytest.fixture(scope="module")
def timed_server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - lazy imports
    """``launch_server --device cpu --enable-metrics --enable-request-time-stats-logging`` on
    the embedded default model (real scheduler)."""
    from server_fixture import real_env, start_server

    root = tmp_path_factory.mktemp("time_stats_server")
    args = ["--device", "cpu", "--enable-metrics", "--enable-request-time-stats-logging"]
    h = start_server(args, real_env(), root / "server.log", timeout_s=300)
    yield h
    assert h.stop() == 0


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = requests.get(url + "/metrics", timeout=30).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            labels = {k: v for k, v in smp.labels.items() if k != "model_name"}
            out[(smp.name, tuple(sorted(labels.items())))] = smp.value
    return out


def _post(url: str, rid: str, text: str, stream: bool) -> tuple[float, dict[str, Any]]:
    """One ``/generate``; the client's latency (perf_counter, the oracle) and the final meta_info."""
    body = {
        "rid": rid,
        "text": text,
        "stream": stream,
        "sampling_params": {"max_new_tokens": 4, "ignore_eos": True},
    }
    t0 = time.perf_counter()
    with requests.post(url + "/generate", json=body, stream=stream, timeout=120) as r:
        assert r.status_code == 200, r.text
        if stream:
            events = [
                json.loads(x[5:]) for x in r.iter_lines() if x.startswith(b"data:") and x != b"data: [DONE]"
            ]
            meta = events[-1]["meta_info"]
        else:
            meta = r.json()["meta_info"]
    return time.perf_counter() - t0, meta


def _lines(log: str) -> dict[str, list[re.Match[str]]]:
    out: dict[str, list[re.Match[str]]] = {}
    for ln in log.splitlines():
        m = LINE_RE.search(ln)
        if m:
            out.setdefault(m["rid"], []).append(m)
    return out


@pytest.mark.slow  # a server of its own on the embedded model: ~25 s to start on CPU
def test_server_stage_lines_metrics_and_meta_info(timed_server: Any) -> None:
    url = timed_server.url
    before = _scrape(url)
    shared = "The quick brown fox jumps over the lazy dog. " * 80  # a few whole KV pages
    sent = [("ts-cold", shared, True), ("ts-hit", shared, True), ("ts-plain", "Hello there", False)]
    client: dict[str, float] = {}
    metas: dict[str, dict[str, Any]] = {}
    for rid, text, stream in sent:
        client[rid], metas[rid] = _post(url, rid, text, stream)

    after = _scrape(url)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("sglang:queue_time_seconds_count") == len(sent)
    every = [s for s in STAGE_NAMES if s != "response_write"]  # that one: streamed chunks only
    assert len(every) == len(STAGE_NAMES) - 1
    for stage in every:
        assert delta("sglang:per_stage_req_latency_seconds_count", stage=stage) == len(sent), stage

    deadline = time.time() + 10
    while not all(rid in _lines(timed_server.log()) for rid, _, _ in sent) and time.time() < deadline:
        time.sleep(0.1)  # the log line is flushed by the server process
    lines = _lines(timed_server.log())
    for rid, _, _ in sent:
        assert len(lines.get(rid, [])) == 1, (rid, lines.get(rid))
        m = lines[rid][0]
        fields = {k: float(v) / 1e3 for k, v in FIELD_RE.findall(m["rest"])}
        stages = {k: v for k, v in fields.items() if k not in ("ttft", "e2e")}
        assert {
            "tokenize",
            "api_server_dispatch",
            "queue_duration",
            "batch_build",
            "forward",
            "process_output",
            "detokenize",
            "output_dispatch",
        } <= set(stages), stages
        assert "prefill_forward" not in stages  # the sum of three of them: not in the line
        assert all(v >= 0 for v in fields.values()), fields
        assert sum(stages.values()) <= client[rid], (rid, stages, client[rid])
        assert fields["ttft"] <= fields["e2e"] <= client[rid]
        assert int(m["cached"]) == metas[rid]["cached_tokens"]
        assert int(m["output"]) == metas[rid]["completion_tokens"] == 4
        meta = metas[rid]
        assert 0 <= meta["queue_time"] <= client[rid]
        assert meta["request_received_ts"] <= meta["forward_entry_time"] <= meta["request_finished_ts"]
        assert 0 < meta["first_token_latency"] <= fields["e2e"] <= client[rid]
    assert int(lines["ts-cold"][0]["cached"]) == 0
    assert int(lines["ts-hit"][0]["cached"]) > 0  # the whole-page prefix of the shared prompt


def test_log_flag_is_sglangs() -> None:
    """The flag is SGLang 0.5.23's (a field of its ``Observability`` arguments, off by default) and
    parses to the same field here, off by default."""
    import argparse

    from sglang.srt.arg_groups.fields.observability import Observability
    from sglang_v4.server_args import ServerArgs
    from sglang_v4.server_args_cli import add_server_cli_args

    assert "enable_request_time_stats_logging" in Observability.__struct_fields__
    assert Observability().enable_request_time_stats_logging is False
    parser = argparse.ArgumentParser()
    add_server_cli_args(parser)
    on = ServerArgs.from_cli_args(
        parser.parse_args(["--enable-request-time-stats-logging", "--device", "cpu"])
    )
    off = ServerArgs.from_cli_args(parser.parse_args(["--device", "cpu"]))
    assert on.enable_request_time_stats_logging is True and off.enable_request_time_stats_logging is False

"""A twenty-seventh set of public bug reports, replayed against operating the server: the types and
names of the ``/metrics`` families (load gauges a router reads as gauges, retractions as a
monotonic counter, names a Prometheus server ingests), the KV usage gauge (pages held by requests,
not pages the radix cache keeps), the load gauges after every request is
aborted (back to 0 at once, with no further step), and SGLang's
``SGLANG_LOG_REQUEST_EXCEEDED_MS`` (only the finish lines of slow requests are logged). Each test
names its report.

Fault found here and fixed: ``SGLANG_LOG_REQUEST_EXCEEDED_MS`` was ignored, so with
``--log-requests`` every request wrote its finish line where SGLang writes only those of requests
at least that slow (and the start-up warning would have named it "set but not read").

Fixtures: an in-process ``TokenizerMetrics``, a CPU ``Scheduler`` on the ``sched_model_dir``
checkpoint, and ``TokenizerManager._log_finished`` called on a stand-in holding only the server
arguments it reads. Oracles: ``prometheus_client``'s text parser and its metric-name rule, the
allocators' own counters, the counts the test feeds in, and SGLang 0.5.23's own
``RequestLogger`` (its installed code run on the same latencies) for which finish lines are due.
"""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import assert_idle, make_scheduler, submit

pytestmark = pytest.mark.timeout(120)

MODEL = "fake-v4"


def _families(text: str) -> dict[str, Any]:
    """``prometheus_client``'s parse of an exposition: family name -> family."""
    from prometheus_client.parser import text_string_to_metric_families

    return {fam.name: fam for fam in text_string_to_metric_families(text)}


def _value(text: str, name: str) -> float:
    """The one sample ``name`` of the exposition ``text`` with ``model_name=MODEL``."""
    from prometheus_client.parser import text_string_to_metric_families

    got = [
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name and s.labels.get("model_name") == MODEL
    ]
    assert len(got) == 1, (name, got)
    return got[0]


# --------------------------------------------------------------------------- /metrics families


def test_load_gauges_are_exposed_as_gauges() -> None:
    """volcano-sh/kthena#975 (fixed by #976): a router read ``sglang:token_usage`` and
    ``sglang:num_queue_reqs`` with a counter accessor, and got 0 for every SGLang backend, because
    "according to SGLang's official Prometheus metrics documentation both of these are gauge
    metrics". Expected: the exposition declares ``# TYPE ... gauge`` for those two and for
    ``sglang:num_running_reqs``, and a value set from the scheduler reads back as set."""
    from sglang_v4.entrypoints.metrics import TokenizerMetrics

    m = TokenizerMetrics(MODEL)
    m.update_gauges({"token_usage": 0.25, "num_queue_reqs": 3, "num_running_reqs": 2})
    text = m.render().decode()
    fams = _families(text)
    for name in ("sglang:token_usage", "sglang:num_queue_reqs", "sglang:num_running_reqs"):
        assert fams[name].type == "gauge", (name, fams[name].type)
        assert f"# TYPE {name} gauge" in text
    assert _value(text, "sglang:token_usage") == 0.25
    assert _value(text, "sglang:num_queue_reqs") == 3.0
    assert _value(text, "sglang:num_running_reqs") == 2.0


def test_retractions_are_a_monotonic_counter() -> None:
    """sgl-project/sglang#10672 (and vllm-project/vllm#4647's review: a cumulative preemption
    count "could be a counter ... logging as a gauge is not best practices"): retractions were a gauge (``sglang:total_retracted_reqs``), so a
    retraction that rose and fell between two scrapes was never seen; the report asks for a
    counter like ``sglang:num_aborted_requests_total``. Expected: the family is a counter
    (``_total`` sample) that only goes up: fed the scheduler's cumulative retraction counts 0, 2,
    2, 5 (and a stale 4 after it) it reads 5, the total fed."""
    from sglang_v4.entrypoints.metrics import TokenizerMetrics

    m = TokenizerMetrics(MODEL)
    seen = []
    for cumulative in (0, 2, 2, 5, 4):
        m.update_gauges({"num_retractions": cumulative})
        seen.append(_value(m.render().decode(), "sglang:num_retracted_requests_total"))
    assert _families(m.render().decode())["sglang:num_retracted_requests"].type == "counter"
    assert seen == [0.0, 2.0, 2.0, 5.0, 5.0]


def test_every_metric_name_is_a_valid_prometheus_name() -> None:
    """kubernetes-sigs/inference-perf#600: SGLang's metrics carry a colon prefix
    (``sglang:e2e_request_latency_seconds``) and a client that queried another spelling read all
    zeros. Expected: every family and sample name of the exposition matches Prometheus' metric
    name rule ``[a-zA-Z_:][a-zA-Z0-9_:]*`` and keeps SGLang's ``sglang:`` prefix, and the latency
    and token families the report queries are present by those names."""
    from sglang_v4.entrypoints.metrics import TokenizerMetrics

    rule = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    fams = _families(TokenizerMetrics(MODEL).render().decode())
    for name, fam in fams.items():
        assert rule.match(name) and name.startswith("sglang:"), name
        for s in fam.samples:
            assert rule.match(s.name) and s.name.startswith("sglang:"), s.name
    for want in (
        "sglang:e2e_request_latency_seconds",
        "sglang:time_to_first_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:prompt_tokens",
        "sglang:generation_tokens",
    ):
        assert want in fams, want


# --------------------------------------------------------------------------- stale gauges


def test_load_gauges_return_to_zero_when_every_request_is_aborted(sched_model_dir: str) -> None:
    """vllm-project/vllm#29928 (and #22545): after every running request was cancelled at once,
    the load stats kept their last values (running requests, KV usage at 99 %) until another
    engine step ran, so a router never sent that server work again. Expected: right after
    aborting all (``rid == ""``), with no further step, the scheduler's gauges read 0 running,
    0 queued, 0 used tokens and 0 token usage, the exposition fed from them says the same, and
    the pool is whole."""
    from sglang_v4.entrypoints.metrics import TokenizerMetrics

    s = make_scheduler(sched_model_dir, max_running_requests=2)  # overlap on: a batch in flight
    for i in range(3):
        submit(s, f"r{i}", random_ids(300, 2770 + i), 200)
    for _ in range(4):
        s.step()
    busy = s.get_metrics()
    assert busy["num_running_reqs"] == 2 and busy["num_queue_reqs"] == 1 and busy["token_usage"] > 0
    s.abort_request("")
    now = s.get_metrics()
    assert (now["num_running_reqs"], now["num_queue_reqs"], now["num_used_tokens"]) == (0, 0, 0)
    assert now["token_usage"] == 0.0
    m = TokenizerMetrics(MODEL)
    m.update_gauges(busy)
    m.update_gauges(now)
    text = m.render().decode()
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"):
        assert _value(text, name) == 0.0, name
    for _ in range(3):  # what is still in flight ends without new work
        s.step()
    assert not s.has_work()
    assert_idle(s)


def test_token_usage_counts_pages_in_use_not_cached_pages(sched_model_dir: str) -> None:
    """vllm-project/vllm#20302: the KV-cache usage gauge read wrong under a steady load (it did
    not match the pages requests held). SGLang's ``token_usage`` is the pool's tokens held by
    requests over its size; pages the radix cache keeps after a request ends are evictable, not in
    use. Expected, hand-derived on a 32-page pool of 256-token pages: while a 300-token prompt
    decodes it holds 2 pages, so 512 used tokens and usage 2/32 = 0.0625; once it ends, 0 used and
    usage 0, with its one complete prompt block (256 tokens) evictable."""
    s = make_scheduler(sched_model_dir)
    submit(s, "a", random_ids(300, 2781), 4)
    s.step()
    s.step()
    m = s.get_metrics()
    assert m["max_total_num_tokens"] == 32 * 256
    assert (m["num_used_tokens"], m["token_usage"]) == (512, 2 / 32)
    for _ in range(20):
        if not s.has_work():
            break
        s.step()
    m = s.get_metrics()
    assert (m["num_used_tokens"], m["token_usage"], m["kv_evictable_tokens"]) == (0, 0.0, 256)
    assert_idle(s)


# --------------------------------------------------------------------------- request log


def _finish_logged(latency_s: float, caplog: pytest.LogCaptureFixture) -> bool:
    """Whether ``TokenizerManager._log_finished`` writes a line for a request of ``latency_s``
    end-to-end latency (``--log-requests`` on, level 0, text format)."""
    from sglang_v4.managers.tokenizer_manager import TokenizerManager

    stand_in = SimpleNamespace(
        server_args=SimpleNamespace(log_requests=True, log_requests_level=0, log_requests_format="text")
    )
    state = SimpleNamespace(obj=SimpleNamespace(sampling_params={"max_new_tokens": 4}), output_ids=[1, 2])
    meta = {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "finish_reason": {"type": "length"},
        "e2e_latency": latency_s,
    }
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sglang_v4.managers.tokenizer_manager"):
        TokenizerManager._log_finished(stand_in, "rid-1", state, meta, "hi")
    return any(r.getMessage().startswith("Finish: rid=rid-1") for r in caplog.records)


def _sglang_logs_finish(latency_s: float) -> bool:
    """Whether SGLang 0.5.23's own ``RequestLogger`` (installed) logs the finish of a request of
    ``latency_s`` end-to-end latency under the current ``SGLANG_LOG_REQUEST_EXCEEDED_MS``."""
    rl_mod = pytest.importorskip("sglang.srt.utils.request_logger")
    rl = rl_mod.RequestLogger(
        log_requests=True, log_requests_level=0, log_requests_format="text", log_requests_target=None
    )
    calls: list[str] = []
    rl._log = lambda msg, *a, **k: calls.append(str(msg))
    obj = SimpleNamespace(rid="rid-1")
    rl.log_finished_request(obj, {"meta_info": {"e2e_latency": latency_s}})
    return bool(calls)


@pytest.mark.parametrize(
    ("threshold", "latency_s"),
    [("500", 0.1), ("500", 0.75), ("500", 0.5), ("-1", 0.001), ("0", 0.001), (None, 0.001)],
)
def test_log_request_exceeded_ms_logs_only_slow_finishes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, threshold: str | None, latency_s: float
) -> None:
    """sgl-project/sglang#15759: ``SGLANG_LOG_REQUEST_EXCEEDED_MS`` (default -1, off) makes
    ``--log-requests`` log only the requests slower than that many milliseconds ("only slow
    requests are logged"), to find them among the rest. Expected: a request's finish line is
    logged exactly when SGLang 0.5.23's own request logger logs it under the same variable and
    latency: skipped under the threshold, logged at or over it, always logged when the variable is
    unset, -1 or 0."""
    if threshold is None:
        monkeypatch.delenv("SGLANG_LOG_REQUEST_EXCEEDED_MS", raising=False)
    else:
        monkeypatch.setenv("SGLANG_LOG_REQUEST_EXCEEDED_MS", threshold)
    want = _sglang_logs_finish(latency_s)
    assert want == (threshold != "500" or latency_s * 1000 >= 500)  # the oracle as the report states
    assert _finish_logged(latency_s, caplog) == want


def test_log_request_exceeded_ms_is_not_called_unread_at_start_up() -> None:
    """sgl-project/sglang#15759: ``SGLANG_LOG_REQUEST_EXCEEDED_MS`` is one of SGLang's logging
    variables; the start-up warning listing the SGLang variables set but not read must not name
    it now that it is read. Expected: only the kernel switch set beside it is called unread."""
    from sglang_v4.managers.request_log import LOG_EXCEEDED_MS_ENV
    from sglang_v4.server_args_compat import unread_sglang_env

    env = {LOG_EXCEEDED_MS_ENV: "1000", "SGLANG_ENABLE_SPEC_V2": "1"}
    assert LOG_EXCEEDED_MS_ENV == "SGLANG_LOG_REQUEST_EXCEEDED_MS"
    assert unread_sglang_env(env) == ["SGLANG_ENABLE_SPEC_V2"]

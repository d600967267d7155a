"""``/metrics`` exposition: SGLang's metric names and types, read back with prometheus_client's
own text parser (the oracle), and values that follow the observations made."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sglang_v4.entrypoints.metrics import TokenizerMetrics

#: SGLang's names (srt/metrics/collector.py and its production-metrics page) and Prometheus types.
EXPECTED = {
    "sglang:prompt_tokens": "counter",
    "sglang:generation_tokens": "counter",
    "sglang:cached_tokens": "counter",
    "sglang:num_requests": "counter",
    "sglang:num_aborted_requests": "counter",
    "sglang:num_running_reqs": "gauge",
    "sglang:num_queue_reqs": "gauge",
    "sglang:num_used_tokens": "gauge",
    "sglang:max_total_num_tokens": "gauge",
    "sglang:token_usage": "gauge",
    "sglang:kv_available_tokens": "gauge",
    "sglang:kv_evictable_tokens": "gauge",
    "sglang:kv_used_tokens": "gauge",
    "sglang:cache_hit_rate": "gauge",
    "sglang:gen_throughput": "gauge",
    "sglang:time_to_first_token_seconds": "histogram",
    "sglang:inter_token_latency_seconds": "histogram",
    "sglang:time_per_output_token_seconds": "histogram",
    "sglang:e2e_request_latency_seconds": "histogram",
}


def samples(m: TokenizerMetrics) -> tuple[dict[str, str], dict[tuple[str, str], float]]:
    types, values = {}, {}
    for fam in text_string_to_metric_families(m.render().decode()):
        types[fam.name] = fam.type
        for s in fam.samples:
            assert s.labels.get("model_name") == "dsv4"
            values[(s.name, s.labels.get("le", ""))] = s.value
    return types, values


def test_names_and_types() -> None:
    m = TokenizerMetrics("dsv4")
    m.update_gauges({g: 0 for g in TokenizerMetrics.GAUGES})
    m.observe_ttft(0.5)
    m.observe_itl(0.01)
    m.observe_finished(10, 3, 1.0, cached_tokens=4, decode_s=0.2)
    types, values = samples(m)
    for name, kind in EXPECTED.items():
        assert types.get(name) == kind, (name, types.get(name))
    # Counters are exposed with SGLang's ``_total`` names.
    assert values[("sglang:prompt_tokens_total", "")] == 10
    assert values[("sglang:generation_tokens_total", "")] == 3


def test_values_follow_requests() -> None:
    m = TokenizerMetrics("dsv4", bucket_time_to_first_token=[0.05, 1.0])
    m.update_gauges({"num_running_reqs": 2, "num_queue_reqs": 5, "num_used_tokens": 512, "max_total_num_tokens": 2048,
                     "token_usage": 0.25, "cache_hit_rate": 0.5, "gen_throughput": 7.0, "bogus": 1})  # fmt: skip
    m.observe_ttft(0.02)
    m.observe_ttft(0.5)
    m.observe_finished(100, 5, 2.0, cached_tokens=64, decode_s=0.4)
    m.observe_finished(7, 0, 0.1, aborted=True)  # aborted before its first token: no TPOT
    _, v = samples(m)
    assert v[("sglang:num_running_reqs", "")] == 2 and v[("sglang:num_queue_reqs", "")] == 5
    assert v[("sglang:num_used_tokens", "")] == 512 and v[("sglang:max_total_num_tokens", "")] == 2048
    assert v[("sglang:token_usage", "")] == 0.25 and v[("sglang:cache_hit_rate", "")] == 0.5
    assert v[("sglang:prompt_tokens_total", "")] == 107 and v[("sglang:generation_tokens_total", "")] == 5
    assert v[("sglang:cached_tokens_total", "")] == 64
    assert v[("sglang:num_requests_total", "")] == 2 and v[("sglang:num_aborted_requests_total", "")] == 1
    # The configured TTFT buckets: one observation <= 0.05 s, both <= 1 s.
    assert v[("sglang:time_to_first_token_seconds_bucket", "0.05")] == 1
    assert v[("sglang:time_to_first_token_seconds_bucket", "1.0")] == 2
    assert v[("sglang:time_to_first_token_seconds_count", "")] == 2
    # TPOT of the 5-token request: 0.4 s over the 4 tokens after the first.
    assert v[("sglang:time_per_output_token_seconds_count", "")] == 1
    assert v[("sglang:time_per_output_token_seconds_sum", "")] == pytest.approx(0.1)
    assert v[("sglang:e2e_request_latency_seconds_sum", "")] == pytest.approx(2.1)

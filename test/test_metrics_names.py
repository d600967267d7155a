"""``/metrics`` exposition: SGLang's metric names and types, read back with prometheus_client's
own text parser (the oracle), and values that follow the observations made."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sglang_v4.entrypoints.metrics import TokenizerMetrics, has_grammar

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
    "sglang:request_time_per_output_token_seconds": "histogram",
    "sglang:prompt_tokens_histogram": "histogram",
    "sglang:uncached_prompt_tokens_histogram": "histogram",
    "sglang:generation_tokens_histogram": "histogram",
    "sglang:num_so_requests": "counter",
    "sglang:num_retracted_requests": "counter",
    "sglang:page_size": "gauge",
    "sglang:num_pages": "gauge",
    "sglang:context_len": "gauge",
}

#: SGLang's label names beyond ``model_name`` (``le`` of histogram buckets aside).
EXTRA_LABELS = {
    "sglang:prompt_tokens_total": {"is_streaming"},
    "sglang:generation_tokens_total": {"is_streaming"},
    "sglang:num_requests_total": {"is_streaming"},
    "sglang:cached_tokens_total": {"cache_source"},
    "sglang:time_to_first_token_seconds_count": {"is_streaming"},
    "sglang:e2e_request_latency_seconds_count": {"is_streaming"},
    "sglang:request_time_per_output_token_seconds_count": {"is_streaming"},
    "sglang:inter_token_latency_seconds_count": set(),
    "sglang:num_aborted_requests_total": set(),
    "sglang:num_so_requests_total": set(),
    "sglang:prompt_tokens_histogram_count": set(),
}


def samples(m: TokenizerMetrics) -> tuple[dict[str, str], dict[tuple[str, str], float]]:
    """Family types, and sample values keyed by (name, ``le``) summed over the other labels."""
    types: dict[str, str] = {}
    values: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        types[fam.name] = fam.type
        for s in fam.samples:
            assert s.labels.get("model_name") == "dsv4"
            key = (s.name, s.labels.get("le", ""))
            values[key] = values.get(key, 0.0) + s.value
    return types, values


def labelled(m: TokenizerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample: (name, its labels but ``model_name``, sorted) -> value."""
    out = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            labels = {k: v for k, v in s.labels.items() if k != "model_name"}
            out[(s.name, tuple(sorted(labels.items())))] = s.value
    return out


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


def test_label_names_as_sglang() -> None:
    m = TokenizerMetrics("dsv4")
    m.observe_ttft(0.5, is_streaming=True)
    m.observe_itl(0.02, 2)
    m.observe_finished(10, 3, 1.0, cached_tokens=4, decode_s=0.2, is_streaming=True, grammar=True)
    m.observe_finished(5, 1, 0.3, aborted=True)
    seen: dict[str, set[str]] = {}
    for name, labels in labelled(m):
        seen.setdefault(name, set()).update(k for k, _ in labels if k != "le")
    for name, want in EXTRA_LABELS.items():
        assert seen.get(name) == want, (name, seen.get(name))


def test_is_streaming_splits_request_counts() -> None:
    m = TokenizerMetrics("dsv4")
    m.observe_finished(10, 3, 1.0, decode_s=0.2, is_streaming=True)
    m.observe_finished(20, 4, 2.0, decode_s=0.3, is_streaming=True)
    m.observe_finished(7, 2, 0.5, decode_s=0.1)
    v = labelled(m)
    t, f = (("is_streaming", "true"),), (("is_streaming", "false"),)
    assert v[("sglang:prompt_tokens_total", t)] == 30 and v[("sglang:prompt_tokens_total", f)] == 7
    assert v[("sglang:generation_tokens_total", t)] == 7 and v[("sglang:generation_tokens_total", f)] == 2
    assert v[("sglang:num_requests_total", t)] == 2 and v[("sglang:num_requests_total", f)] == 1
    assert v[("sglang:e2e_request_latency_seconds_count", t)] == 2
    assert v[("sglang:e2e_request_latency_seconds_sum", f)] == pytest.approx(0.5)


def test_inter_token_latency_counts_every_token() -> None:
    """An output with n new tokens after dt seconds is n gaps of dt / n (SGLang): the count is
    the number of tokens, the sum the elapsed time; before, one observation per output."""
    m = TokenizerMetrics("dsv4", bucket_inter_token_latency=[0.01, 0.1])
    m.observe_itl(0.04, 4)  # 4 gaps of 0.01 s
    m.observe_itl(0.05, 1)  # 1 gap of 0.05 s
    m.observe_itl(0.3, 0)  # no new token: nothing
    _, v = samples(m)
    assert v[("sglang:inter_token_latency_seconds_count", "")] == 5
    assert v[("sglang:inter_token_latency_seconds_sum", "")] == pytest.approx(0.09)
    assert v[("sglang:inter_token_latency_seconds_bucket", "0.01")] == 4
    assert v[("sglang:inter_token_latency_seconds_bucket", "0.1")] == 5


def test_aborted_request_has_no_tpot_and_token_histograms_follow() -> None:
    """SGLang observes TPOT only for requests that stopped or hit their length (an abort cuts
    the decode short); the prompt / uncached prompt / generation length histograms get every
    finished request."""
    m = TokenizerMetrics("dsv4")
    m.observe_finished(300, 9, 1.0, cached_tokens=200, decode_s=0.8, aborted=True)
    m.observe_finished(50, 5, 1.0, cached_tokens=0, decode_s=0.4)
    _, v = samples(m)
    assert v[("sglang:request_time_per_output_token_seconds_count", "")] == 1
    assert v[("sglang:request_time_per_output_token_seconds_sum", "")] == pytest.approx(0.1)
    assert v[("sglang:time_per_output_token_seconds_count", "")] == 1
    assert v[("sglang:prompt_tokens_histogram_sum", "")] == 350
    assert v[("sglang:prompt_tokens_histogram_bucket", "100.0")] == 1
    assert v[("sglang:uncached_prompt_tokens_histogram_sum", "")] == 150
    assert v[("sglang:uncached_prompt_tokens_histogram_bucket", "100.0")] == 2
    assert v[("sglang:generation_tokens_histogram_count", "")] == 2
    assert v[("sglang:cached_tokens_total", "")] == 200


def test_structured_output_requests_counted() -> None:
    assert has_grammar({"json_schema": "{}"}) and has_grammar({"regex": "a+"})
    assert has_grammar({"ebnf": "root ::= 'a'"}) and has_grammar({"structural_tag": "{}"})
    assert not has_grammar({"max_new_tokens": 3}) and not has_grammar(None)
    m = TokenizerMetrics("dsv4")
    m.observe_finished(5, 1, 0.1, grammar=True)
    m.observe_finished(5, 1, 0.1)
    _, v = samples(m)
    assert v[("sglang:num_so_requests_total", "")] == 1 and v[("sglang:num_requests_total", "")] == 2


def test_retractions_counter_follows_the_scheduler_total() -> None:
    m = TokenizerMetrics("dsv4")
    _, v = samples(m)
    assert v[("sglang:num_retracted_requests_total", "")] == 0  # present before any retraction
    for total in (2, 2, 5):
        m.update_gauges({"num_retractions": total})
    m.update_gauges({"page_size": 64, "num_pages": 10, "context_len": 4096})
    _, v = samples(m)
    assert v[("sglang:num_retracted_requests_total", "")] == 5
    assert (v[("sglang:page_size", "")], v[("sglang:num_pages", "")], v[("sglang:context_len", "")]) == (
        64,
        10,
        4096,
    )

"""Prometheus metrics of the HTTP server (``--enable-metrics``, served at ``GET /metrics``).

Names, types and labels follow SGLang's ``srt/metrics/collector.py`` (its production-metrics
documentation lists them), so its Grafana dashboard and alert rules work unchanged: every series
has the label ``model_name`` (the served model name).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Default histogram bucket bounds in seconds (SGLang's defaults for the same histograms).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400,
)  # fmt: skip


class TokenizerMetrics:
    """Prometheus metrics with SGLang's ``sglang:`` names, in a private registry.

    Gauges, refreshed from ``Scheduler.get_metrics()`` on each scrape: ``num_running_reqs``,
    ``num_queue_reqs``, ``num_used_tokens`` and ``max_total_num_tokens`` (KV pool tokens: block
    pages held by requests / in the pool x ``page_size``; radix-cache pages no request locks are
    evictable, not used, as in SGLang), ``token_usage`` (their ratio, 0..1),
    ``kv_available_tokens`` / ``kv_evictable_tokens`` / ``kv_used_tokens`` (the pool split into
    free, reclaimable cached and request-held tokens; they sum to ``max_total_num_tokens``),
    ``cache_hit_rate`` (prefix-cache hit tokens / prompt tokens since start, 0..1),
    ``gen_throughput`` (generated tokens/s over the last log interval).

    Counters (the exposition adds ``_total``): ``prompt_tokens``, ``generation_tokens``,
    ``cached_tokens`` (prompt tokens served from the prefix cache), ``num_requests`` (finished),
    ``num_aborted_requests`` (finished with an abort: client disconnect, ``/abort_request``, a
    request refused by the scheduler).

    Histograms (seconds): ``time_to_first_token_seconds`` (arrival to first generated token),
    ``inter_token_latency_seconds`` (between streamed outputs, per generated token),
    ``time_per_output_token_seconds`` (per finished request: (end - first token) /
    (completion tokens - 1), SGLang's older TPOT histogram), ``e2e_request_latency_seconds``.
    Every request with ``log_metrics`` set (the default) is counted.
    """

    GAUGES = (
        "num_running_reqs",
        "num_queue_reqs",
        "num_used_tokens",
        "max_total_num_tokens",
        "token_usage",
        "kv_available_tokens",
        "kv_evictable_tokens",
        "kv_used_tokens",
        "cache_hit_rate",
        "gen_throughput",
    )

    def __init__(
        self,
        model_name: str,
        bucket_time_to_first_token: Sequence[float] | None = None,
        bucket_inter_token_latency: Sequence[float] | None = None,
        bucket_e2e_request_latency: Sequence[float] | None = None,
    ) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.labels = {"model_name": model_name}
        lab = list(self.labels)
        reg = self.registry
        self.gauges = {
            g: Gauge(f"sglang:{g}", f"sglang {g.replace('_', ' ')}", lab, registry=reg) for g in self.GAUGES
        }
        ttft = tuple(bucket_time_to_first_token or TTFT_BUCKETS)
        itl = tuple(bucket_inter_token_latency or ITL_BUCKETS)
        e2e = tuple(bucket_e2e_request_latency or E2E_BUCKETS)
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            lab,
            buckets=ttft,
            registry=reg,
        )
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            lab,
            buckets=itl,
            registry=reg,
        )
        self.tpot = Histogram(
            "sglang:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            lab,
            buckets=itl,
            registry=reg,
        )
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            lab,
            buckets=e2e,
            registry=reg,
        )
        self.prompt_tokens = Counter(
            "sglang:prompt_tokens", "Number of prefill tokens processed.", lab, registry=reg
        )
        self.generation_tokens = Counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", lab, registry=reg
        )
        self.cached_tokens = Counter(
            "sglang:cached_tokens", "Number of cached prompt tokens.", lab, registry=reg
        )
        self.num_requests = Counter("sglang:num_requests", "Number of requests processed.", lab, registry=reg)
        self.num_aborted_requests = Counter(
            "sglang:num_aborted_requests", "Number of requests aborted.", lab, registry=reg
        )

    def observe_ttft(self, seconds: float) -> None:
        """A request's first generated token arrived ``seconds`` after the request."""
        self.ttft.labels(**self.labels).observe(seconds)

    def observe_itl(self, seconds: float) -> None:
        """``seconds`` per generated token between two outputs of one request."""
        self.itl.labels(**self.labels).observe(seconds)

    def observe_finished(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        e2e_s: float,
        cached_tokens: int = 0,
        aborted: bool = False,
        decode_s: float | None = None,
    ) -> None:
        """A request finished: its token counts, end-to-end latency ``e2e_s`` (seconds), whether it
        was aborted, and ``decode_s``, the seconds from its first generated token to its end
        (``None``: no token was generated; TPOT is observed only with two or more tokens)."""
        lab = self.labels
        self.e2e.labels(**lab).observe(e2e_s)
        self.prompt_tokens.labels(**lab).inc(prompt_tokens)
        self.generation_tokens.labels(**lab).inc(completion_tokens)
        self.cached_tokens.labels(**lab).inc(cached_tokens)
        self.num_requests.labels(**lab).inc()
        if aborted:
            self.num_aborted_requests.labels(**lab).inc()
        if decode_s is not None and completion_tokens > 1:
            self.tpot.labels(**lab).observe(decode_s / (completion_tokens - 1))

    def update_gauges(self, values: dict[str, Any]) -> None:
        """Set the gauges from ``Scheduler.get_metrics()`` (missing or non-numeric keys are kept)."""
        for name, g in self.gauges.items():
            v = values.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                g.labels(**self.labels).set(float(v))

    def render(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of every metric."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

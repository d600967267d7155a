"""Prometheus metrics of the HTTP server (``--enable-metrics``, served at ``GET /metrics``)."""

from __future__ import annotations

from typing import Any


class TokenizerMetrics:
    """Prometheus metrics with SGLang's ``sglang:`` names, in a private registry.

    Gauges (refreshed from ``Scheduler.get_metrics()`` on each scrape): ``num_running_reqs``,
    ``num_queue_reqs``, ``token_usage`` (fraction of the KV pool in use), ``cache_hit_rate``,
    ``gen_throughput`` (tokens/s). Histograms (seconds): ``time_to_first_token_seconds``,
    ``inter_token_latency_seconds``, ``e2e_request_latency_seconds``. Counters:
    ``prompt_tokens_total``, ``generation_tokens_total``, ``num_requests_total``.
    """

    GAUGES = ("num_running_reqs", "num_queue_reqs", "token_usage", "cache_hit_rate", "gen_throughput")

    def __init__(self, model_name: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.labels = {"model_name": model_name}
        lab = list(self.labels)
        self.gauges = {
            g: Gauge(f"sglang:{g}", f"sglang {g.replace('_', ' ')}", lab, registry=self.registry)
            for g in self.GAUGES
        }
        lat = (
            0.001,
            0.005,
            0.01,
            0.02,
            0.04,
            0.06,
            0.08,
            0.1,
            0.25,
            0.5,
            0.75,
            1,
            2.5,
            5,
            7.5,
            10,
            20,
            40,
            80,
        )
        e2e = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 60, 120, 240, 480, 960, 1920)
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Time to first token",
            lab,
            buckets=lat,
            registry=self.registry,
        )
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Inter-token latency",
            lab,
            buckets=lat,
            registry=self.registry,
        )
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "End-to-end latency",
            lab,
            buckets=e2e,
            registry=self.registry,
        )
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Prefill tokens", lab, registry=self.registry)
        self.generation_tokens = Counter(
            "sglang:generation_tokens", "Generated tokens", lab, registry=self.registry
        )
        self.num_requests = Counter("sglang:num_requests", "Finished requests", lab, registry=self.registry)

    def observe_ttft(self, seconds: float) -> None:
        self.ttft.labels(**self.labels).observe(seconds)

    def observe_itl(self, seconds: float) -> None:
        self.itl.labels(**self.labels).observe(seconds)

    def observe_finished(self, prompt_tokens: int, completion_tokens: int, e2e_s: float) -> None:
        self.e2e.labels(**self.labels).observe(e2e_s)
        self.prompt_tokens.labels(**self.labels).inc(prompt_tokens)
        self.generation_tokens.labels(**self.labels).inc(completion_tokens)
        self.num_requests.labels(**self.labels).inc()

    def update_gauges(self, values: dict[str, Any]) -> None:
        for name, g in self.gauges.items():
            v = values.get(name)
            if isinstance(v, (int, float)):
                g.labels(**self.labels).set(float(v))

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

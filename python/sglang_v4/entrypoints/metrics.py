"""Prometheus metrics of the HTTP server (``--enable-metrics``, served at ``GET /metrics``).

Names, types, labels and default buckets follow SGLang's tokenizer and scheduler metrics
collectors (its production-metrics documentation lists them), so its Grafana dashboard and alert
rules work unchanged: every series has the label ``model_name`` (the served model name); the
per-request families also carry SGLang's ``is_streaming`` (``"true"`` / ``"false"``) and
``cached_tokens_total`` its ``cache_source`` (``"device"``: the GPU radix cache is the only one).
SGLang's HTTP-level families (``sglang:http_requests_total`` ...) are
:mod:`~sglang_v4.entrypoints.http_request_metrics`'s, in the same registry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sglang_v4.entrypoints.http_request_metrics import HttpRequestMetrics
from sglang_v4.managers.req_time_stats import STAGE_NAMES

#: Default histogram bucket bounds in seconds (SGLang's defaults for the same histograms).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400,
)  # fmt: skip
#: Bucket bounds in tokens of the prompt / generation length histograms (SGLang's defaults).
TOKEN_LEN_BUCKETS = (
    100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12500,
    15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000, 200000,
    300000, 400000, 600000, 800000, 1000000, 1100000,
)  # fmt: skip
#: Bucket bounds in seconds of ``sglang:queue_time_seconds`` (SGLang's).
QUEUE_TIME_BUCKETS = (
    0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80,
    90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
)  # fmt: skip
#: Bucket bounds in seconds of ``sglang:per_stage_req_latency_seconds``: SGLang's exponential
#: series, 1 ms times 1.62**i for i in 0..29 (1 ms to about 20 minutes).
PER_STAGE_BUCKETS = tuple(0.001 * 1.62**i for i in range(30))
#: Longest wait, in seconds, of a ``/metrics`` scrape for the scheduler's gauges.
GAUGE_REFRESH_TIMEOUT_S = 2.0
#: The header in which Prometheus sends its scrape timeout (seconds) with each scrape.
SCRAPE_TIMEOUT_HEADER = "x-prometheus-scrape-timeout-seconds"
#: Sampling-parameter keys that make a request structured output (``num_so_requests``), as SGLang.
GRAMMAR_KEYS = ("json_schema", "regex", "ebnf", "structural_tag")


def has_grammar(sampling_params: Any) -> bool:
    """Whether a request's ``sampling_params`` (a dict, or anything else: False) constrain its
    output with a JSON schema, regex, EBNF grammar or structural tag."""
    return isinstance(sampling_params, dict) and any(sampling_params.get(k) for k in GRAMMAR_KEYS)


def gauge_refresh_timeout(scrape_timeout: str | None) -> float:
    """Seconds a scrape waits for the scheduler's gauges: :data:`GAUGE_REFRESH_TIMEOUT_S`, or half
    the scraper's own timeout (Prometheus' :data:`SCRAPE_TIMEOUT_HEADER`) when that is shorter; an
    absent or unreadable header counts as no limit of the scraper's."""
    try:
        limit = float(scrape_timeout) / 2 if scrape_timeout is not None else math.inf
    except ValueError:
        limit = math.inf
    if not math.isfinite(limit) or limit <= 0:
        limit = GAUGE_REFRESH_TIMEOUT_S
    return min(GAUGE_REFRESH_TIMEOUT_S, limit)


async def scrape(tm: Any, wait_s: float) -> bytes:
    """The ``/metrics`` body of the tokenizer manager ``tm`` (its :class:`TokenizerMetrics`): the
    gauges refreshed from ``Scheduler.get_metrics()`` when the scheduler answers within ``wait_s``
    seconds, else as last refreshed, so a scheduler busy with a long step (or gone) never holds a
    scrape past the scraper's timeout -- the counters and histograms, kept in this process, are
    served either way (SGLang's scrape never waits for its scheduler either: each process writes
    its own series)."""
    from sglang_v4.managers.tokenization import RequestError

    try:
        tm.metrics.update_gauges(await tm.get_scheduler_metrics(timeout_s=wait_s))
    except RequestError:
        pass
    return tm.metrics.render()


class TokenizerMetrics:
    """Prometheus metrics with SGLang's ``sglang:`` names, in a private registry.

    Gauges, refreshed from ``Scheduler.get_metrics()`` on each scrape: ``num_running_reqs``,
    ``num_queue_reqs``, ``num_used_tokens`` and ``max_total_num_tokens`` (KV pool tokens: block
    pages held by requests / in the pool x ``page_size``; radix-cache pages no request locks are
    evictable, not used, as in SGLang), ``token_usage`` (their ratio, 0..1),
    ``kv_available_tokens`` / ``kv_evictable_tokens`` / ``kv_used_tokens`` (the pool split into
    free, reclaimable cached and request-held tokens; they sum to ``max_total_num_tokens``),
    ``cache_hit_rate`` (prefix-cache hit tokens / prompt tokens of the last prefill batch, 0..1),
    ``gen_throughput`` (generated tokens/s over the last log interval), ``page_size``,
    ``num_pages`` (KV pool pages), ``context_len`` (tokens). Gauges that are always zero here,
    kept because SGLang's dashboards and its metrics test read them (:attr:`ZERO_GAUGES`):
    ``num_grammar_queue_reqs`` (grammars compile when the scheduler takes a request, there is
    no grammar queue), ``spec_accept_length`` and ``spec_accept_rate`` (no speculative decoding;
    SGLang reports 0 without it too).

    Counters (exposed with SGLang's ``_total`` names): ``prompt_tokens``, ``generation_tokens``,
    ``num_requests`` (finished; labels ``is_streaming``), ``cached_tokens`` (prompt tokens served
    from the prefix cache; label ``cache_source="device"``), ``num_so_requests`` (finished with a
    grammar: :data:`GRAMMAR_KEYS`), ``num_aborted_requests`` (finished with an abort: client
    disconnect, ``/abort_request``, a request refused by the scheduler), ``num_retracted_requests``
    (retractions of running requests back to the queue when KV ran short).

    Histograms: seconds -- ``time_to_first_token_seconds`` (arrival to first generated token; label
    ``is_streaming``), ``inter_token_latency_seconds`` (one observation per generated token after
    the first: an output carrying ``n`` new tokens after ``dt`` seconds adds ``n`` observations
    of ``dt / n`` and ``dt`` to the sum, as SGLang), ``request_time_per_output_token_seconds``
    (label ``is_streaming``) and its older unlabelled name ``time_per_output_token_seconds`` (per
    request that stopped or hit its length: (end - first token) / (completion tokens - 1)),
    ``e2e_request_latency_seconds`` (label ``is_streaming``), ``queue_time_seconds`` (scheduler
    receive to admission into a batch, one per admitted request) and
    ``per_stage_req_latency_seconds`` (label ``stage``: each stage of
    :data:`~sglang_v4.managers.req_time_stats.STAGES` a finished request went through); tokens -- ``prompt_tokens_histogram``,
    ``uncached_prompt_tokens_histogram`` (prompt minus cached), ``generation_tokens_histogram``.
    Every request with ``log_metrics`` set (the default) is counted. Every counter and histogram
    series is exposed from the start, at 0 (:meth:`_init_series`).
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
        "page_size",
        "num_pages",
        "context_len",
    )

    #: The gauges fixed at 0 (see the class docstring), set when the metrics are made.
    ZERO_GAUGES = ("num_grammar_queue_reqs", "spec_accept_length", "spec_accept_rate")

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
        slab = [*lab, "is_streaming"]
        reg = self.registry
        self.gauges = {
            g: Gauge(f"sglang:{g}", f"sglang {g.replace('_', ' ')}", lab, registry=reg)
            for g in (*self.GAUGES, *self.ZERO_GAUGES)
        }
        for g in self.ZERO_GAUGES:
            self.gauges[g].labels(**self.labels).set(0.0)
        ttft = tuple(bucket_time_to_first_token or TTFT_BUCKETS)
        itl = tuple(bucket_inter_token_latency or ITL_BUCKETS)
        e2e = tuple(bucket_e2e_request_latency or E2E_BUCKETS)
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            slab,
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
        self.request_tpot = Histogram(
            "sglang:request_time_per_output_token_seconds",
            "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
            slab,
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
            slab,
            buckets=e2e,
            registry=reg,
        )
        self.queue_time = Histogram(
            "sglang:queue_time_seconds",
            "Histogram of queueing time in seconds.",
            lab,
            buckets=QUEUE_TIME_BUCKETS,
            registry=reg,
        )
        self.per_stage = Histogram(
            "sglang:per_stage_req_latency_seconds",
            "The latency of each stage of requests.",
            [*lab, "stage"],
            buckets=PER_STAGE_BUCKETS,
            registry=reg,
        )
        self.prompt_tokens_histogram = Histogram(
            "sglang:prompt_tokens_histogram",
            "Histogram of prompt token length.",
            lab,
            buckets=TOKEN_LEN_BUCKETS,
            registry=reg,
        )
        self.uncached_prompt_tokens_histogram = Histogram(
            "sglang:uncached_prompt_tokens_histogram",
            "Histogram of uncached (compute) prompt token length.",
            lab,
            buckets=TOKEN_LEN_BUCKETS,
            registry=reg,
        )
        self.generation_tokens_histogram = Histogram(
            "sglang:generation_tokens_histogram",
            "Histogram of generation token length.",
            lab,
            buckets=TOKEN_LEN_BUCKETS,
            registry=reg,
        )
        self.prompt_tokens = Counter(
            "sglang:prompt_tokens", "Number of prefill tokens processed.", slab, registry=reg
        )
        self.generation_tokens = Counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", slab, registry=reg
        )
        self.cached_tokens = Counter(
            "sglang:cached_tokens",
            "Number of cached prompt tokens by source (device/host/storage).",
            [*lab, "cache_source"],
            registry=reg,
        )
        self.num_requests = Counter(
            "sglang:num_requests", "Number of requests processed.", slab, registry=reg
        )
        self.num_so_requests = Counter(
            "sglang:num_so_requests", "Number of structured output requests processed.", lab, registry=reg
        )
        self.num_aborted_requests = Counter(
            "sglang:num_aborted_requests", "Number of requests aborted.", lab, registry=reg
        )
        self.num_retracted_requests = Counter(
            "sglang:num_retracted_requests", "Total number of retracted requests.", lab, registry=reg
        )
        self._retractions_seen = 0
        self._init_series()
        #: SGLang's HTTP-level families (``sglang:http_requests_total`` ...).
        self.http = HttpRequestMetrics(reg, self.labels)

    def _init_series(self) -> None:
        """Create every counter and histogram series at 0 for each label set it can take
        (``is_streaming`` ``"false"`` and ``"true"``, ``cache_source="device"``), so the first
        scrape already shows them: a series that first appears with the value 1 hides that first
        increment from PromQL's ``rate()`` / ``increase()`` (Prometheus' instrumentation practice
        "avoid missing metrics")."""
        for metric in (
            self.itl,
            self.tpot,
            self.queue_time,
            self.prompt_tokens_histogram,
            self.uncached_prompt_tokens_histogram,
            self.generation_tokens_histogram,
            self.num_so_requests,
            self.num_aborted_requests,
            self.num_retracted_requests,
        ):
            metric.labels(**self.labels)
        self.cached_tokens.labels(**self.labels, cache_source="device")
        for stage in STAGE_NAMES:
            self.per_stage.labels(**self.labels, stage=stage)
        for streaming in (False, True):
            for metric in (
                self.ttft,
                self.request_tpot,
                self.e2e,
                self.prompt_tokens,
                self.generation_tokens,
                self.num_requests,
            ):
                metric.labels(**self.labels, is_streaming=self._stream(streaming))

    @staticmethod
    def _stream(is_streaming: bool) -> str:
        return "true" if is_streaming else "false"

    def observe_ttft(self, seconds: float, is_streaming: bool = False) -> None:
        """A request's first generated token arrived ``seconds`` after the request."""
        self.ttft.labels(**self.labels, is_streaming=self._stream(is_streaming)).observe(seconds)

    def observe_itl(self, interval_s: float, num_new_tokens: int = 1) -> None:
        """An output of one request brought ``num_new_tokens`` generated tokens ``interval_s``
        seconds after its previous output: ``num_new_tokens`` observations of
        ``interval_s / num_new_tokens`` (none when ``num_new_tokens <= 0``)."""
        if num_new_tokens <= 0:
            return
        h = self.itl.labels(**self.labels)
        per_token = interval_s / num_new_tokens
        for _ in range(num_new_tokens):
            h.observe(per_token)

    def observe_finished(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        e2e_s: float,
        cached_tokens: int = 0,
        aborted: bool = False,
        decode_s: float | None = None,
        is_streaming: bool = False,
        grammar: bool = False,
    ) -> None:
        """A request finished: its token counts, end-to-end latency ``e2e_s`` (seconds), whether it
        was aborted, ``decode_s`` (the seconds from its first generated token to its end;
        ``None``: no token was generated), whether it streamed and whether it had a grammar. TPOT
        is observed only for a request that was not aborted and generated two or more tokens
        (SGLang: an abort's decode period is truncated)."""
        lab = self.labels
        slab = {**lab, "is_streaming": self._stream(is_streaming)}
        self.e2e.labels(**slab).observe(e2e_s)
        self.prompt_tokens.labels(**slab).inc(prompt_tokens)
        self.generation_tokens.labels(**slab).inc(completion_tokens)
        self.cached_tokens.labels(**lab, cache_source="device").inc(cached_tokens)
        self.num_requests.labels(**slab).inc()
        if grammar:
            self.num_so_requests.labels(**lab).inc()
        if aborted:
            self.num_aborted_requests.labels(**lab).inc()
        self.prompt_tokens_histogram.labels(**lab).observe(prompt_tokens)
        self.uncached_prompt_tokens_histogram.labels(**lab).observe(prompt_tokens - cached_tokens)
        self.generation_tokens_histogram.labels(**lab).observe(completion_tokens)
        if decode_s is not None and completion_tokens > 1 and not aborted:
            tpot = decode_s / (completion_tokens - 1)
            self.tpot.labels(**lab).observe(tpot)
            self.request_tpot.labels(**slab).observe(tpot)

    def observe_stages(self, durations: dict[str, float]) -> None:
        """A finished request's stage durations in seconds
        (:func:`~sglang_v4.managers.req_time_stats.stage_durations`): each stage of
        :data:`~sglang_v4.managers.req_time_stats.STAGE_NAMES` it has into
        ``per_stage_req_latency_seconds``, and ``prefill_waiting`` also into ``queue_time_seconds``
        (SGLang's queue time: scheduler receive to the first admission)."""
        for stage in STAGE_NAMES:
            v = durations.get(stage)
            if v is not None:
                self.per_stage.labels(**self.labels, stage=stage).observe(v)
        q = durations.get("prefill_waiting")
        if q is not None:
            self.queue_time.labels(**self.labels).observe(q)

    def update_gauges(self, values: dict[str, Any]) -> None:
        """Set the gauges from ``Scheduler.get_metrics()`` (missing or non-numeric keys are kept),
        and advance ``num_retracted_requests`` to its cumulative ``num_retractions``."""
        for name, g in self.gauges.items():
            v = values.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                g.labels(**self.labels).set(float(v))
        r = values.get("num_retractions")
        if isinstance(r, int) and not isinstance(r, bool):
            if r > self._retractions_seen:
                self.num_retracted_requests.labels(**self.labels).inc(r - self._retractions_seen)
            self._retractions_seen = max(self._retractions_seen, r)

    def render(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of every metric."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

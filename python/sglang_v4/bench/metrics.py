"""Benchmark metrics: ``BenchmarkMetrics``, ``calculate_metrics`` and the printed summary block.

Definitions (TTFT, ITL, TPOT, concurrency, throughputs, cache hit rate) are in
``sglang_v4.bench_serving``'s docstring; field names and the summary layout follow SGLang's
``bench_serving`` so results are directly comparable.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from sglang_v4.bench.datasets import BenchTokenizer
from sglang_v4.bench.request_funcs import RequestFuncOutput


@dataclass
class BenchmarkMetrics:
    """Summary of a run (field names as SGLang's ``BenchmarkMetrics``; ``*_ms`` in milliseconds,
    throughputs per second of benchmark duration)."""

    completed: int
    failed: int
    total_input: int
    total_output: int
    total_output_retokenized: int
    total_cached: int
    cache_hit_rate: float
    request_throughput: float
    input_throughput: float
    output_throughput: float
    total_throughput: float
    mean_ttft_ms: float
    median_ttft_ms: float
    std_ttft_ms: float
    p90_ttft_ms: float
    p95_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    std_tpot_ms: float
    p90_tpot_ms: float
    p95_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    std_itl_ms: float
    p90_itl_ms: float
    p95_itl_ms: float
    p99_itl_ms: float
    max_itl_ms: float
    mean_e2e_latency_ms: float
    median_e2e_latency_ms: float
    std_e2e_latency_ms: float
    p90_e2e_latency_ms: float
    p95_e2e_latency_ms: float
    p99_e2e_latency_ms: float
    concurrency: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int


def _stats_ms(prefix: str, values: list[float], with_max: bool = False) -> dict[str, float]:
    """mean/median/std/p90/p95/p99 (numpy linear-interpolation percentiles) in ms; 0 if empty."""
    a = np.asarray(values, dtype=np.float64) if values else np.zeros(1)
    d = {
        f"mean_{prefix}_ms": float(a.mean() * 1000),
        f"median_{prefix}_ms": float(np.median(a) * 1000),
        f"std_{prefix}_ms": float(a.std() * 1000),
        f"p90_{prefix}_ms": float(np.percentile(a, 90) * 1000),
        f"p95_{prefix}_ms": float(np.percentile(a, 95) * 1000),
        f"p99_{prefix}_ms": float(np.percentile(a, 99) * 1000),
    }
    if with_max:
        d[f"max_{prefix}_ms"] = float(a.max() * 1000)
    return d


def _peaks(outputs: list[RequestFuncOutput]) -> tuple[float, int]:
    """(max output tokens in any 1-second bucket, max requests in flight in any bucket)."""
    ok = [o for o in outputs if o.success]
    if not ok:
        return 0.0, 0
    t0 = min(o.start_time for o in ok)
    n = int(np.ceil(max(o.start_time + o.latency for o in ok) - t0)) + 1
    toks = np.zeros(n)
    conc = np.zeros(n)
    for o in ok:
        times = o.start_time + o.ttft + np.concatenate([[0.0], np.cumsum(o.itl)])
        idx = np.clip((times - t0).astype(int), 0, n - 1)
        np.add.at(toks, idx, 1)
        conc[int(o.start_time - t0) : min(int(o.start_time + o.latency - t0) + 1, n)] += 1
    return float(toks.max()), int(conc.max())


def calculate_metrics(
    outputs: list[RequestFuncOutput], dur_s: float, tok: BenchTokenizer
) -> BenchmarkMetrics:
    """Summary of ``outputs`` over a run of ``dur_s`` seconds (definitions in the module docstring).
    Raises ``ValueError`` if ``dur_s <= 0``."""
    if dur_s <= 0:
        raise ValueError(f"duration must be > 0 (got {dur_s})")
    ok = [o for o in outputs if o.success]
    if outputs and not ok:
        warnings.warn("All requests failed; check the benchmark arguments and the server.", stacklevel=2)
    ttfts = [o.ttft for o in ok]
    e2e = [o.latency for o in ok]
    itls = [x for o in ok for x in o.itl]
    tpots = [(o.latency - o.ttft) / (o.output_len - 1) for o in ok if o.output_len > 1]
    total_in = sum(o.prompt_len for o in ok)
    total_out = sum(o.output_len for o in ok)
    special = tok.num_special_tokens
    retok = sum(max(len(tok.encode(o.generated_text)) - special, 0) for o in ok)
    cached = sum(o.cached_tokens for o in ok)
    peak_tok, peak_conc = _peaks(outputs)
    return BenchmarkMetrics(
        completed=len(ok),
        failed=len(outputs) - len(ok),
        total_input=total_in,
        total_output=total_out,
        total_output_retokenized=retok,
        total_cached=cached,
        cache_hit_rate=cached / total_in if total_in else 0.0,
        request_throughput=len(ok) / dur_s,
        input_throughput=total_in / dur_s,
        output_throughput=total_out / dur_s,
        total_throughput=(total_in + total_out) / dur_s,
        **_stats_ms("ttft", ttfts),
        **_stats_ms("tpot", tpots),
        **_stats_ms("itl", itls, with_max=True),
        **_stats_ms("e2e_latency", e2e),
        concurrency=sum(e2e) / dur_s,
        max_output_tokens_per_s=peak_tok,
        max_concurrent_requests=peak_conc,
    )


def format_summary(
    backend: str, request_rate: float, max_concurrency: int | None, m: BenchmarkMetrics, dur_s: float
) -> str:
    """The summary block, laid out as SGLang's ``bench_serving`` prints it."""
    lines: list[str] = []

    def row(label: str, value: Any, fmt: str = "") -> None:
        lines.append(f"{label:<40} {value:<10{fmt}}")

    def rule(title: str, ch: str = "-") -> None:
        lines.append(f"{title:{ch}^50}")

    lines.append("")
    rule(" Serving Benchmark Result ", "=")
    row("Backend:", backend)
    row("Traffic request rate:", str(request_rate))
    row("Max request concurrency:", max_concurrency if max_concurrency else "not set")
    row("Successful requests:", m.completed)
    row("Failed requests:", m.failed)
    row("Benchmark duration (s):", dur_s, ".2f")
    row("Total input tokens:", m.total_input)
    row("Total generated tokens:", m.total_output)
    row("Total generated tokens (retokenized):", m.total_output_retokenized)
    row("Request throughput (req/s):", m.request_throughput, ".2f")
    row("Input token throughput (tok/s):", m.input_throughput, ".2f")
    row("Output token throughput (tok/s):", m.output_throughput, ".2f")
    row("Peak output token throughput (tok/s):", m.max_output_tokens_per_s, ".2f")
    row("Peak concurrent requests:", m.max_concurrent_requests)
    row("Total token throughput (tok/s):", m.total_throughput, ".2f")
    row("Concurrency:", m.concurrency, ".2f")
    rule("End-to-End Latency")
    for k in ("Mean", "Median", "P90", "P95", "P99"):
        row(f"{k} E2E Latency (ms):", getattr(m, f"{k.lower()}_e2e_latency_ms"), ".2f")
    rule("Time to First Token")
    for k in ("Mean", "Median", "P90", "P95", "P99"):
        row(f"{k} TTFT (ms):", getattr(m, f"{k.lower()}_ttft_ms"), ".2f")
    rule("Time per Output Token (excl. 1st token)")
    for k in ("Mean", "Median", "P90", "P95", "P99"):
        row(f"{k} TPOT (ms):", getattr(m, f"{k.lower()}_tpot_ms"), ".2f")
    rule("Inter-Token Latency")
    for k in ("Mean", "Median", "P90", "P95", "P99", "Max"):
        row(f"{k} ITL (ms):", getattr(m, f"{k.lower()}_itl_ms"), ".2f")
    rule("Cache Hit Details")
    row("Total prompt tokens:", m.total_input)
    row("Total cached tokens:", m.total_cached)
    lines.append(f"{'Cache hit rate:':<40} {m.cache_hit_rate * 100:.1f}%")
    lines.append("=" * 50)
    return "\n".join(lines)

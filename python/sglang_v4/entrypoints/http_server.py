"""SGLang-native HTTP API (FastAPI on uvicorn + uvloop) and ``launch_server``.

Endpoints (SGLang 0.5.x names and shapes): ``/generate`` (single / batch, text / input_ids,
SSE streaming with cumulative ``text`` and a final ``data: [DONE]``), ``/health``,
``/health_generate``, ``/model_info`` + ``/get_model_info``, ``/server_info`` +
``/get_server_info``, ``/flush_cache``, ``/abort_request``, ``/metrics`` (with
``--enable-metrics``), plus the OpenAI router from ``entrypoints/openai`` when present.

Errors use SGLang's shape ``{"error": {"message": ...}}`` with HTTP 400 for bad input. Every
request first passes :mod:`sglang_v4.entrypoints.admission`: with ``--api-key`` every route except
``/health``, ``/health_generate`` and ``/metrics`` needs ``Authorization: Bearer KEY`` (401
``{"error": "Unauthorized"}`` otherwise, constant-time comparison); bodies are size-limited (413)
and must arrive in time (408); request heads too (the connection is closed).

Graceful drain: on SIGTERM or SIGINT the server stops admitting requests (503, ``/health`` 503),
lets the in-flight ones finish for up to ``--graceful-shutdown-timeout`` seconds, fails what is left
with a 503 (an error event on a stream), then exits with code 0. A second signal stops at once.
SGLang drains the same way (its tokenizer manager's ``sigterm_watchdog``) but without a time limit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from sglang_v4.entrypoints.admission import (
    H11_MAX_INCOMPLETE_EVENT_SIZE,
    AdmissionLimits,
    AdmissionMiddleware,
    DrainingServer,
    HeaderTimeoutH11Protocol,
    drain_in_flight,
)
from sglang_v4.entrypoints.engine import Subprocesses
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.managers.tokenizer_manager import RequestError, TokenizerManager
from sglang_v4.server_args import ServerArgs

logger = logging.getLogger(__name__)

#: Seconds /health keeps answering 503 after a backend crash before the server exits (code 1).
CRASH_EXIT_DELAY_S = float(os.environ.get("SGLANG_V4_CRASH_EXIT_DELAY", "2.0"))

# Top-level /generate fields: supported ones, and SGLang fields accepted only when null/false.
_GENERATE_FIELDS = {
    "text",
    "input_ids",
    "sampling_params",
    "rid",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "token_ids_logprob",
    "return_text_in_logprobs",
    "stream",
    "log_metrics",
    "priority",
}
_UNSUPPORTED_IF_SET = {
    "input_embeds",
    "image_data",
    "video_data",
    "audio_data",
    "modalities",
    "lora_path",
    "lora_id",
    "session_params",
    "custom_logit_processor",
    "return_hidden_states",
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
    "data_parallel_rank",
    "routed_dp_rank",
    "return_routed_experts",
    "return_bytes",
    "return_entropy",
}
# "model" and "no_logs": sglang-router forwards every /generate body with these SGLang fields set
_IGNORED_FIELDS = {
    "session_id",
    "conversation_id",
    "extra_key",
    "cache_salt",
    "background",
    "model",
    "no_logs",
}


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


@dataclass
class _State:
    server_args: ServerArgs
    procs: Subprocesses
    tokenizer_manager: TokenizerManager | None = None
    server: Any = None
    exit_code: int = 0
    draining: bool = False


_ORJSON_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def json_response(content: Any, status_code: int = 200) -> Response:
    """A JSON response serialized with orjson (numpy scalars/arrays and int keys allowed)."""
    return Response(
        content=orjson.dumps(content, option=_ORJSON_OPTS),
        status_code=status_code,
        media_type="application/json",
    )


def error_response(message: str, status_code: int = 400) -> Response:
    """SGLang's error shape: ``{"error": {"message": ...}}``."""
    return json_response({"error": {"message": message}}, status_code=status_code)


def _check_type(name: str, value: Any, ok: bool, expected: str) -> None:
    if not ok:
        raise RequestError(f"{name} must be {expected} (got {type(value).__name__}: {str(value)[:80]!r}).")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_generate_body(body: Any) -> GenerateReqInput:
    """Type-check a decoded ``/generate`` JSON body and build a :class:`GenerateReqInput`.

    Raises:
        RequestError: the body is not an object, has unknown fields, a supported field of the
            wrong type, or an unsupported SGLang field set to a non-null value.
    """
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    unknown = sorted(k for k in body if k not in _GENERATE_FIELDS | _UNSUPPORTED_IF_SET | _IGNORED_FIELDS)
    if unknown:
        raise RequestError(f"Unknown field(s) in the request: {', '.join(unknown)}.")
    for k in _UNSUPPORTED_IF_SET:
        if body.get(k) not in (None, False, [], {}):
            raise RequestError(f"{k} is not supported by sglang-v4.")
    text, ids = body.get("text"), body.get("input_ids")
    if text is not None:
        _check_type(
            "text",
            text,
            isinstance(text, str) or (isinstance(text, list) and all(isinstance(t, str) for t in text)),
            "a string or a list of strings",
        )
    if ids is not None:
        flat = isinstance(ids, list) and all(_is_int(t) for t in ids)
        nested = isinstance(ids, list) and all(
            isinstance(r, list) and all(_is_int(t) for t in r) for r in ids
        )
        _check_type("input_ids", ids, flat or nested, "a list of integers or a list of lists of integers")
        if nested and ids and any(len(r) == 0 for r in ids):
            raise RequestError("input_ids: every prompt must contain at least one token.")
    sp = body.get("sampling_params")
    if sp is not None:
        _check_type(
            "sampling_params",
            sp,
            isinstance(sp, dict) or (isinstance(sp, list) and all(isinstance(p, dict) for p in sp)),
            "an object or a list of objects",
        )
    rid = body.get("rid")
    if rid is not None:
        _check_type(
            "rid",
            rid,
            isinstance(rid, str) or (isinstance(rid, list) and all(isinstance(r, str) for r in rid)),
            "a string or a list of strings",
        )

    def scalar_or_list(name: str, pred: Any, expected: str) -> Any:
        v = body.get(name)
        if v is None:
            return None
        _check_type(name, v, pred(v) or (isinstance(v, list) and all(pred(x) for x in v)), expected)
        return v

    return_logprob = scalar_or_list("return_logprob", lambda v: isinstance(v, bool), "a boolean")
    lsl = scalar_or_list("logprob_start_len", _is_int, "an integer")
    tln = scalar_or_list("top_logprobs_num", _is_int, "an integer")
    prio = scalar_or_list("priority", _is_int, "an integer")
    for name in ("return_text_in_logprobs", "stream", "log_metrics"):
        v = body.get(name)
        if v is not None:
            _check_type(name, v, isinstance(v, bool), "a boolean")
    return GenerateReqInput(
        text=text,
        input_ids=ids,
        sampling_params=sp,
        rid=rid,
        return_logprob=return_logprob,
        logprob_start_len=lsl,
        top_logprobs_num=tln,
        token_ids_logprob=body.get("token_ids_logprob"),
        return_text_in_logprobs=bool(body.get("return_text_in_logprobs") or False),
        stream=bool(body.get("stream") or False),
        log_metrics=body.get("log_metrics") is not False,
        priority=prio,
    )


def _read_model_config(model_path: str) -> dict[str, Any]:
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def create_app(server_args: ServerArgs, procs: Subprocesses) -> tuple[FastAPI, _State]:
    """Build the FastAPI app for already-started backend processes.

    The ``TokenizerManager`` is created on uvicorn's loop at start-up; a warm-up generation
    runs before ``/health`` turns 200 (unless ``skip_warmup``). A dead child process turns
    ``/health`` to 503 and stops the server after ``CRASH_EXIT_DELAY_S`` with exit code 1.
    """
    state = _State(server_args=server_args, procs=procs)
    hf_config = _read_model_config(server_args.model_path or "")

    def crash(reason: str) -> None:
        tm = state.tokenizer_manager
        if tm is not None:
            tm.on_crash(reason)
        if state.exit_code == 0:
            state.exit_code = 1
            logger.error(
                "Backend failure: %s; exiting in %.1fs.", reason.strip().splitlines()[-1], CRASH_EXIT_DELAY_S
            )

            async def stop_later() -> None:
                await asyncio.sleep(CRASH_EXIT_DELAY_S)
                if state.server is not None:
                    state.server.should_exit = True

            asyncio.get_running_loop().create_task(stop_later())

    async def watch_children() -> None:
        while True:
            await asyncio.sleep(0.5)
            tm = state.tokenizer_manager
            if tm is not None and tm.crashed is not None:
                crash(tm.crashed)
                return
            dead = procs.dead_process()
            if dead is not None:
                logger.error("Backend process died: %s", dead)
                crash(dead)
                return

    async def warmup() -> None:
        tm = state.tokenizer_manager
        assert tm is not None
        if server_args.skip_warmup:
            tm.server_status = "Up"
            return
        t0 = time.perf_counter()
        obj = GenerateReqInput(
            text="The capital city of France is",
            sampling_params={"temperature": 0.0, "max_new_tokens": 8},
            log_metrics=False,
        )
        try:
            async for out in tm.generate_request(obj):
                logger.info(
                    "Warm-up done in %.2fs (%d tokens). The server is fired up and ready to roll!",
                    time.perf_counter() - t0,
                    out["meta_info"]["completion_tokens"],
                )
            tm.server_status = "Up"
        except Exception as e:  # noqa: BLE001
            logger.exception("Warm-up request failed")
            crash(f"warm-up request failed: {e}")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tm = TokenizerManager(server_args, procs.port_args, procs.scheduler_info)
        if server_args.enable_metrics:
            tm.metrics = TokenizerMetrics(tm.served_model_name)
        tm.start()
        state.tokenizer_manager = tm
        tasks = [asyncio.create_task(watch_children()), asyncio.create_task(warmup())]
        _mount_openai(app, tm, server_args)
        yield
        for t in tasks:
            t.cancel()
        tm.close()

    app = FastAPI(lifespan=lifespan)
    app.add_middleware(
        AdmissionMiddleware,
        api_key=server_args.api_key,
        limits=AdmissionLimits.from_env(),
        is_draining=lambda: state.draining,
    )

    def tm_or_503() -> TokenizerManager:
        tm = state.tokenizer_manager
        if tm is None:
            raise RequestError("The server is starting.", 503)
        return tm

    @app.get("/health")
    async def health() -> Response:
        tm = state.tokenizer_manager
        if tm is None or tm.crashed is not None or tm.server_status != "Up" or state.draining:
            return Response(status_code=503)
        return Response(status_code=200)

    @app.get("/health_generate")
    async def health_generate() -> Response:
        tm = state.tokenizer_manager
        if tm is None or tm.crashed is not None or tm.server_status != "Up" or state.draining:
            return Response(status_code=503)
        ok = await tm.health_generate()
        return Response(status_code=200 if ok else 503)

    @app.api_route("/generate", methods=["POST", "PUT"])
    async def generate(request: Request) -> Response:
        raw = await request.body()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            return error_response(f"Malformed JSON body: {e}")
        try:
            obj = parse_generate_body(body)
            tm = tm_or_503()
            agen = tm.generate_request(obj, request)
            first = await agen.__anext__()
        except RequestError as e:
            return error_response(str(e), e.status_code)
        except StopAsyncIteration:
            return error_response("No output was produced.", 500)
        if not obj.stream:
            return json_response(first)

        async def stream() -> AsyncIterator[bytes]:
            try:
                yield b"data: " + orjson.dumps(first, option=_ORJSON_OPTS) + b"\n\n"
                try:
                    async for out in agen:
                        yield b"data: " + orjson.dumps(out, option=_ORJSON_OPTS) + b"\n\n"
                except RequestError as e:
                    err = {
                        "error": {"message": str(e), "type": "invalid_request_error", "code": e.status_code}
                    }
                    yield b"data: " + orjson.dumps(err) + b"\n\n"
                yield b"data: [DONE]\n\n"
            finally:
                await agen.aclose()

        return StreamingResponse(stream(), media_type="text/event-stream")

    def model_info_dict() -> dict[str, Any]:
        tm = state.tokenizer_manager
        return {
            "model_path": server_args.model_path,
            "served_model_name": server_args.resolved_served_model_name(),
            "tokenizer_path": server_args.tokenizer_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": server_args.load_format,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": hf_config.get("model_type"),
            "architectures": hf_config.get("architectures"),
            "context_length": tm.context_len if tm is not None else procs.scheduler_info.context_len,
            "vocab_size": tm.vocab_size if tm is not None else procs.scheduler_info.vocab_size,
        }

    @app.get("/model_info")
    async def model_info() -> Response:
        return json_response(model_info_dict())

    @app.get("/get_model_info")
    async def get_model_info() -> Response:
        return json_response(model_info_dict())

    async def server_info_dict() -> dict[str, Any]:
        tm = tm_or_503()
        live = await tm.get_internal_state()
        info = procs.scheduler_info
        from sglang_v4.version import __version__

        return {
            **server_args.to_dict(),
            "max_total_num_tokens": info.max_total_num_tokens,
            "max_req_input_len": info.max_req_input_len,
            "context_len": info.context_len,
            **live,
            "internal_states": [live],
            "startup_time": tm.startup_time,
            "version": __version__,
        }

    @app.get("/get_load")
    async def get_load() -> Response:
        """Load report per data-parallel rank (SGLang's shape; sglang-router polls it)."""
        try:
            m = await tm_or_503().get_scheduler_metrics()
        except RequestError as e:
            return error_response(str(e), e.status_code)
        run, queue = int(m.get("num_running_reqs", 0)), int(m.get("num_queue_reqs", 0))
        tokens = round(float(m.get("token_usage", 0.0)) * procs.scheduler_info.max_total_num_tokens)
        load = {"dp_rank": 0, "num_reqs": run + queue, "num_waiting_reqs": queue, "num_tokens": tokens}
        return json_response([load])

    @app.get("/server_info")
    async def server_info() -> Response:
        try:
            return json_response(await server_info_dict())
        except RequestError as e:
            return error_response(str(e), e.status_code)

    @app.get("/get_server_info")
    async def get_server_info() -> Response:
        return await server_info()

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache() -> Response:
        try:
            ret = await tm_or_503().flush_cache()
        except RequestError as e:
            return error_response(str(e), e.status_code)
        if ret.success:
            return Response(
                content="Cache flushed.\nPlease check backend logs for more details. (When there are "
                "running or waiting requests, the operation will not be performed.)\n",
                status_code=200,
            )
        return Response(content=ret.message or "Flush cache failed.\n", status_code=400)

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        try:
            body = orjson.loads(await request.body() or b"{}")
        except orjson.JSONDecodeError as e:
            return error_response(f"Malformed JSON body: {e}")
        if not isinstance(body, dict):
            return error_response("The request body must be a JSON object.")
        rid, abort_all = body.get("rid", ""), body.get("abort_all", False)
        if not isinstance(rid, str) or not isinstance(abort_all, bool):
            return error_response("rid must be a string and abort_all a boolean.")
        try:
            tm_or_503().abort_request(rid=rid, abort_all=abort_all)
        except RequestError as e:
            return error_response(str(e), e.status_code)
        return Response(status_code=200)

    if server_args.enable_metrics:

        @app.get("/metrics")
        async def metrics() -> Response:
            tm = state.tokenizer_manager
            if tm is None or tm.metrics is None:
                return Response(status_code=503)
            try:
                tm.metrics.update_gauges(await tm.get_scheduler_metrics())
            except RequestError:
                pass  # serve the histograms/counters even when the scheduler is gone
            return Response(
                content=tm.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
            )

    return app, state


def _mount_openai(app: FastAPI, tm: TokenizerManager, server_args: ServerArgs) -> None:
    """Mount ``entrypoints.openai.create_openai_router`` when that module exists."""
    try:
        from sglang_v4.entrypoints.openai import create_openai_router  # type: ignore[attr-defined]
    except ImportError:
        logger.info("OpenAI router not available; serving the native API only.")
        return
    app.include_router(create_openai_router(tm, server_args))


def launch_server(server_args: ServerArgs) -> int:
    """Start the backend processes, serve HTTP until stopped; returns the exit code.

    Raises:
        RuntimeError: the port is taken or the scheduler failed to start.
    """
    import uvicorn

    from sglang_v4.entrypoints.engine import launch_subprocesses, resolve_model_path
    from sglang_v4.utils import is_port_available

    if not is_port_available(server_args.host, server_args.port):
        raise RuntimeError(f"port: {server_args.host}:{server_args.port} is already in use")
    resolve_model_path(server_args)
    t0 = time.perf_counter()
    procs = launch_subprocesses(server_args)
    logger.info(
        "Backend ready in %.1fs: max_total_num_tokens=%d, context_len=%d, max_req_input_len=%d",
        time.perf_counter() - t0,
        procs.scheduler_info.max_total_num_tokens,
        procs.scheduler_info.context_len,
        procs.scheduler_info.max_req_input_len,
    )
    try:
        app, state = create_app(server_args, procs)
        limits = AdmissionLimits.from_env()
        protocol = type(
            "HeaderTimeoutH11", (HeaderTimeoutH11Protocol,), {"header_timeout_s": limits.read_timeout_s}
        )
        config = uvicorn.Config(
            app,
            host=server_args.host,
            port=server_args.port,
            loop="uvloop",
            http=protocol,
            h11_max_incomplete_event_size=H11_MAX_INCOMPLETE_EVENT_SIZE,
            log_level=server_args.log_level if server_args.log_level != "info" else "warning",
            timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]
            timeout_graceful_shutdown=5,
            lifespan="on",
        )

        def set_draining() -> None:
            state.draining = True

        timeout_s = server_args.graceful_shutdown_timeout
        server = DrainingServer(
            config, lambda sig: drain_in_flight(lambda: state.tokenizer_manager, set_draining, sig, timeout_s)
        )
        state.server = server
        # DrainingServer handles SIGTERM / SIGINT while serving; no-op handlers afterwards let the
        # ``finally`` below still stop the children and return the exit code.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: None)
        logger.info("Serving on http://%s:%d", server_args.host, server_args.port)
        server.run()
        if not server.started and state.exit_code == 0:
            state.exit_code = 1
        return state.exit_code
    finally:
        procs.shutdown()

"""SGLang-native HTTP API (FastAPI on uvicorn + uvloop) and ``launch_server``.

Endpoints (SGLang 0.5.x names and shapes): ``/generate`` (single / batch, text / input_ids,
SSE streaming with cumulative ``text`` and ``output_ids`` and a final ``data: [DONE]``; with
``--skip-tokenizer-init`` input_ids only and no ``text``), ``/health``, ``/ready``,
``/health_generate``, ``/model_info`` + ``/get_model_info``, ``/server_info`` +
``/get_server_info``, ``/flush_cache``, ``/abort_request``, ``/metrics`` (with
``--enable-metrics``), ``/encode`` and ``/classify`` (SGLang's 400 for a generation model), the
runtime-control routes (``/update_weights_from_disk``, ``/get_weights_by_name``,
``/pause_generation``, ``/continue_generation``, ``/start_profile``, ``/stop_profile``,
``/configure_logging``, ``/get_weight_version``: :mod:`sglang_v4.entrypoints.control_api`), plus the OpenAI router from ``entrypoints/openai`` when present (``/v1/*``,
``/tokenize``, ``/detokenize``) and Anthropic's Messages API on its chat path
(``/v1/messages``, ``/v1/messages/count_tokens``, from ``entrypoints/anthropic``), mounted by
:mod:`sglang_v4.entrypoints.route_families`.

Behind a reverse proxy serving the API under a path prefix, ``--root-path /my-model`` (SGLang's
``--fastapi-root-path``) makes every route answer both ``/my-model/...`` and the bare path, the
open, admin and per-family rules unchanged (:mod:`sglang_v4.entrypoints.root_path`);
``/openapi.json`` names the prefix as its server.

Any origin may call the API from a browser (CORS, as SGLang: preflights answered, the headers on
every response). Every answer carries the request id as ``x-request-id`` and ``request-id`` (the
client's ``X-Request-Id`` echoed, else a fresh one: :mod:`sglang_v4.entrypoints.request_id`).
Errors use SGLang's shape ``{"error": {"message": ...}}`` (plus the status's ``type`` and ``code``)
with HTTP 400 for bad input. Bodies sent with ``Content-Encoding: gzip`` or ``deflate`` are
decoded for every route, other codings refused with 415 (:mod:`.request_encoding`). Every request
first passes :mod:`sglang_v4.entrypoints.admission`: with ``--api-key`` every route except
``/health``, ``/health_generate``, ``/ready`` and ``/metrics`` needs ``Authorization: Bearer KEY`` or ``x-api-key: KEY`` (401
``{"error": "Unauthorized"}`` otherwise, constant-time comparison); bodies are size-limited (413)
and must arrive in time (408); request heads too (the connection is closed).

Start-up: ``/health`` and ``/health_generate`` answer 503 (in the error shape above) until the
warm-up generation has finished, then 200 (the probes ``/health``, ``/health_generate``,
``/ready`` and ``/ping`` answer ``HEAD`` too: the same status, no body); ``/model_info``,
``/server_info`` and ``/v1/models`` answer meanwhile. A failed warm-up stops the server with exit code 1 and one line saying why.

Graceful drain: on SIGTERM or SIGINT the server stops admitting requests (503, ``/health`` 503),
cancels the running ``/v1/batches`` and stops a profile left open (its trace is written: see
:func:`~sglang_v4.entrypoints.lifecycle.stop_own_work`), lets the in-flight requests finish, all this within
``--graceful-shutdown-timeout`` seconds of the signal (at once while generation is paused: none
could), fails what is left with a 503 (an error event on a stream), then exits with code 0. A
second signal stops at once. The stop after the drain is bounded too: the failed requests' handlers
get up to ``admission.FAIL_GRACE_S`` to answer, open connections :data:`STOP_GRACE_S`, and the
children ``launcher.CHILD_STOP_TIMEOUT_S`` to exit after SIGTERM (then SIGKILL); a request that never
finishes (however large its ``max_tokens``, held at the pause gate, a prompt still being tokenized)
cannot hold the exit. An idle server is gone a few tenths of a second after the signal.
SGLang drains the same way (``sigterm_watchdog``) but without a time limit.
A signal during start-up (:mod:`sglang_v4.entrypoints.lifecycle`) stops the same way with code 0
(the warm-up request is drained like any other); a child process stopped by a signal (one sent
to the whole process group) is a stop too, not a crash: the in-flight requests get the 503
shutdown error and the exit code is 0.

The ``/generate`` body parser and the JSON response helpers are in
:mod:`sglang_v4.entrypoints.native_api`; the Prometheus metrics in
:mod:`sglang_v4.entrypoints.metrics`; the warm-up request in
:mod:`sglang_v4.entrypoints.startup_warmup`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import Response

from sglang_v4.entrypoints.admission import (
    H11_MAX_INCOMPLETE_EVENT_SIZE,
    AdmissionLimits,
    AdmissionMiddleware,
    DrainingServer,
    HeaderTimeoutH11Protocol,
    drain_in_flight,
)
from sglang_v4.entrypoints.control_api import create_control_router
from sglang_v4.entrypoints.dp_rank_header import DP_RANK_HEADER, header_overrides_body_pins
from sglang_v4.entrypoints.head_requests import HeadAsGetMiddleware
from sglang_v4.entrypoints.http_request_metrics import HttpRequestMetricsMiddleware, http_metrics_of
from sglang_v4.entrypoints.incremental_stream import IncrementalStreamSlicer
from sglang_v4.entrypoints.launcher import CHILD_CHECK_INTERVAL_S, Subprocesses
from sglang_v4.entrypoints.lifecycle import StopSignal, stop_own_work
from sglang_v4.entrypoints.loads_api import create_loads_router
from sglang_v4.entrypoints.metrics import SCRAPE_TIMEOUT_HEADER, TokenizerMetrics, gauge_refresh_timeout
from sglang_v4.entrypoints.metrics import scrape as scrape_metrics
from sglang_v4.entrypoints.native_api import (
    NOT_AN_EMBEDDING_MODEL_ROUTE_MSG,
    ORJSON_OPTS,
    error_response,
    flush_cache_within,
    json_response,
    name_batch_entry,
    parse_abort_body,
    parse_flush_timeout,
    parse_generate_body,
    request_error_response,
)
from sglang_v4.entrypoints.native_api import error_body as native_error_body
from sglang_v4.entrypoints.openai.request_errors import loads_json_body
from sglang_v4.entrypoints.openai.serving_outputs import internal_stream_error
from sglang_v4.entrypoints.openapi_docs import install_openapi
from sglang_v4.entrypoints.request_encoding import RequestDecodingMiddleware
from sglang_v4.entrypoints.request_id import RequestIdMiddleware
from sglang_v4.entrypoints.route_errors import install_route_error_handler
from sglang_v4.entrypoints.route_families import import_route_modules
from sglang_v4.entrypoints.route_families import mount_openai as _mount_openai
from sglang_v4.entrypoints.server_info import build_model_info, build_server_info, read_model_config
from sglang_v4.entrypoints.sse_keep_alive import (
    close_generation,
    first_output_within,
    request_keep_alive_interval,
    resolve_first,
)
from sglang_v4.entrypoints.sse_response import ClosingStreamingResponse
from sglang_v4.entrypoints.startup_warmup import warmup_request
from sglang_v4.managers.tokenizer_manager import RequestError, TokenizerManager
from sglang_v4.server_args import ServerArgs
from sglang_v4.version import __version__

logger = logging.getLogger(__name__)

#: Seconds /health keeps answering 503 after a backend crash before the server exits (code 1).
CRASH_EXIT_DELAY_S = float(os.environ.get("SGLANG_V4_CRASH_EXIT_DELAY", "2.0"))
#: Seconds uvicorn waits, once the drain is over, for the open connections' handlers to end
#: (uvicorn's ``timeout_graceful_shutdown``) and the stop waits for batches still running.
STOP_GRACE_S = 1.0


@dataclass
class _State:
    server_args: ServerArgs
    procs: Subprocesses
    tokenizer_manager: TokenizerManager | None = None
    server: Any = None
    exit_code: int = 0
    draining: bool = False
    #: The OpenAI routes' serving object (its batches are cancelled when the server stops).
    openai_serving: Any = None


def create_app(
    server_args: ServerArgs, procs: Subprocesses, stop: StopSignal | None = None, tokenizer: Any = None
) -> tuple[FastAPI, _State]:
    """Build the FastAPI app for already-started backend processes.

    The ``TokenizerManager`` is created on uvicorn's loop at start-up; a warm-up generation
    runs before ``/health`` turns 200 (unless ``skip_warmup``). A dead child process turns
    ``/health`` to 503 and stops the server after ``CRASH_EXIT_DELAY_S`` with exit code 1,
    unless it was stopped on request (:meth:`Subprocesses.dead_were_stopped`): then the server
    stops with exit code 0. ``stop``: the launcher's start-up signal record; a signal it holds
    when the app starts stops the server at once. ``tokenizer``: the one the start-up checks
    loaded (:func:`~sglang_v4.entrypoints.launcher.preflight_server`), handed to the
    ``TokenizerManager``; ``None``: it loads its own.
    """
    state = _State(server_args=server_args, procs=procs)
    hf_config = {**read_model_config(server_args.model_path or ""), **server_args.model_override_args()}

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

    def stop_server(reason: str) -> None:
        """A stop asked for from outside (a child stopped by a signal): fail what is in flight
        with the shutdown error, exit 0."""
        state.draining = True
        tm = state.tokenizer_manager
        if tm is not None:
            tm.stop_admitting("The server is shutting down.", 503)
        n = tm.fail_all("The server is shutting down.", 503) if tm is not None else 0
        logger.info("%s (stopped by a signal); shutting down, %d request(s) failed.", reason, n)
        if state.server is not None:
            state.server.should_exit = True

    async def watch_children() -> None:
        while True:
            await asyncio.sleep(CHILD_CHECK_INTERVAL_S)
            tm = state.tokenizer_manager
            if tm is not None and tm.crashed is not None:
                crash(tm.crashed)
                return
            dead = procs.dead_process()
            if dead is not None:
                if state.exit_code == 0 and procs.dead_were_stopped():
                    stop_server(dead)
                    return
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
        obj = warmup_request(tm)
        try:
            async for out in tm.generate_request(obj):
                logger.info(
                    "Warm-up done in %.2fs (%d tokens). The server is fired up and ready to roll!",
                    time.perf_counter() - t0,
                    out["meta_info"]["completion_tokens"],
                )
            tm.server_status = "Up"
        except Exception as e:  # noqa: BLE001
            if state.draining:  # stopped while warming up: a stop, not a failure
                return
            # one line: a crashed backend has logged its own traceback already
            logger.error("The server failed to start: the warm-up request failed: %s", e)
            tm.server_status = "UnHealthy"
            state.exit_code = 1
            if state.server is not None:
                state.server.should_exit = True

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tm = TokenizerManager(server_args, procs.port_args, procs.scheduler_info, tokenizer)
        if server_args.enable_metrics:
            tm.metrics = TokenizerMetrics(
                tm.served_model_name,
                server_args.bucket_time_to_first_token,
                server_args.bucket_inter_token_latency,
                server_args.bucket_e2e_request_latency,
            )
        tm.start()
        state.tokenizer_manager = tm
        state.openai_serving = _mount_openai(app, tm, server_args)
        tasks = [asyncio.create_task(watch_children())]
        if stop is not None and stop.signum is not None and state.server is not None:
            # signalled after the model loaded, before uvicorn took the signals over: no warm-up
            logger.info("%s received during start-up; stopping.", signal.Signals(stop.signum).name)
            state.draining = True
            state.server.should_exit = True
        else:
            tasks.append(asyncio.create_task(warmup()))
        yield
        for t in tasks:
            t.cancel()
        if state.openai_serving is not None:  # batches left running (a stop without a drain)
            await state.openai_serving.close_batches(wait_s=STOP_GRACE_S)
        tm.close()

    # --root-path: the routes answer with and without the proxy's prefix (root_path.py)
    app = FastAPI(lifespan=lifespan, root_path=server_args.root_path)
    install_openapi(app)  # /openapi.json with the routes' request bodies and error shape
    install_route_error_handler(app)  # unknown /v1/ path or method: 404 / 405 in the route's shape
    app.state.sse_keep_alive_interval = server_args.sse_keep_alive_interval  # sse_response.py
    # Innermost: HEAD is answered as GET without the body on every GET route (head_requests.py).
    app.add_middleware(HeadAsGetMiddleware)
    limits = AdmissionLimits.from_env()
    # gzip / deflate bodies decoded for every route, inside the admission's limits (request_encoding.py)
    app.add_middleware(RequestDecodingMiddleware, max_body_bytes=limits.max_body_bytes)
    app.add_middleware(
        AdmissionMiddleware,
        api_key=server_args.api_key,
        limits=limits,
        is_draining=lambda: state.draining,
        admin_api_key=server_args.admin_api_key,
    )
    # Outside the admission checks, so their errors name the request too (request_id.py).
    app.add_middleware(RequestIdMiddleware)
    if server_args.enable_metrics:  # every exchange, refused ones too (http_request_metrics.py)
        app.add_middleware(
            HttpRequestMetricsMiddleware,
            get_metrics=lambda: http_metrics_of(state.tokenizer_manager),
        )
    # Added last, so outermost (as SGLang's app, any origin): it answers browsers' preflights and
    # puts the CORS headers on every response, the admission's 401 / 413 / 503 errors included;
    # browsers may read the request-id headers.
    app.add_middleware(
        CORSMiddleware,
        allow_origins=["*"],
        allow_credentials=True,
        allow_methods=["*"],
        allow_headers=["*"],
        expose_headers=["x-request-id", "request-id"],
    )

    def tm_or_503() -> TokenizerManager:
        tm = state.tokenizer_manager
        if tm is None:
            raise RequestError("The server is starting.", 503)
        return tm

    def unhealthy() -> Response | None:
        """The 503 ``/health`` answers while the server is not serving, else None."""
        tm = state.tokenizer_manager
        if state.draining:
            return error_response("The server is shutting down.", 503)
        if tm is not None and tm.crashed is not None:
            return error_response("The backend crashed; the server is stopping.", 503)
        if tm is None or tm.server_status == "Starting":
            return error_response("The server is starting: the warm-up has not finished.", 503)
        if tm.server_status != "Up":
            return error_response("The server is unhealthy.", 503)
        return None

    # The probes answer HEAD as GET (RFC 9110 section 9.3.2; load balancers and uptime monitors
    # probe with HEAD): the same status, no body.
    @app.api_route("/ready", methods=["GET", "HEAD"])
    async def ready() -> Response:
        """SGLang's readiness probe (``TokenizerManager.is_ready``): 200 once the server serves
        (warm-up done) and generation is not paused (``/pause_generation`` until
        ``/continue_generation``: a load balancer sends new requests elsewhere), else 503."""
        tm = state.tokenizer_manager
        paused = tm is not None and tm.is_pause
        return Response(status_code=503 if paused or unhealthy() is not None else 200)

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> Response:
        return unhealthy() or Response(status_code=200)

    @app.api_route("/ping", methods=["GET", "HEAD", "POST"])
    async def ping() -> Response:
        """Amazon SageMaker's health route (SGLang's and vLLM's ``/ping``): as ``/health``."""
        return unhealthy() or Response(status_code=200)

    @app.api_route("/health_generate", methods=["GET", "HEAD"])
    async def health_generate() -> Response:
        bad = unhealthy()
        if bad is not None:
            return bad
        assert state.tokenizer_manager is not None
        if await state.tokenizer_manager.health_generate():
            return Response(status_code=200)
        return error_response("The health-check generation failed.", 503)

    @app.api_route("/generate", methods=["POST", "PUT"])
    async def generate(request: Request) -> Response:
        raw = await request.body()
        try:
            body = loads_json_body(raw)
        except orjson.JSONDecodeError as e:
            return error_response(f"Malformed JSON body: {e}")
        try:  # SGLang's X-Data-Parallel-Rank header: rank 0 here, overriding a body pin
            body = header_overrides_body_pins(body, request.headers.get(DP_RANK_HEADER))
        except ValueError as e:
            return error_response(str(e))
        try:
            obj = parse_generate_body(body)
            tm = tm_or_503()
            agen = tm.generate_request(obj, request)
            # streamed with the SSE keep-alive on: waited for at most one interval (sse_keep_alive.py)
            first = await first_output_within(agen, request_keep_alive_interval(request) if obj.stream else 0)
        except RequestError as e:
            return request_error_response(name_batch_entry(e, body))
        except StopAsyncIteration:
            return error_response("No output was produced.", 500)
        if not obj.stream:
            await agen.aclose()  # ended with its one output; closed now, not by the garbage collector
            return json_response(first)
        # --incremental-streaming-output: each chunk carries only what is new
        slicer = IncrementalStreamSlicer() if server_args.incremental_streaming_output else None

        async def stream() -> AsyncIterator[bytes]:
            try:
                try:
                    head = await resolve_first(first)
                    if slicer is not None:
                        head = slicer.slice(head)
                    yield b"data: " + orjson.dumps(head, option=ORJSON_OPTS) + b"\n\n"
                    async for out in agen:
                        if slicer is not None:
                            out = slicer.slice(out)
                        yield b"data: " + orjson.dumps(out, option=ORJSON_OPTS) + b"\n\n"
                except RequestError as e:
                    yield b"data: " + orjson.dumps(native_error_body(str(e), e.status_code)) + b"\n\n"
                except RuntimeError as e:  # a late first output that never came (resolve_first)
                    yield b"data: " + orjson.dumps(native_error_body(str(e), 500)) + b"\n\n"
                except Exception as e:  # noqa: BLE001 - any failure ends the stream with an error event
                    err = internal_stream_error(e)  # as the OpenAI and Anthropic streams end theirs
                    yield b"data: " + orjson.dumps(native_error_body(err.message, err.status)) + b"\n\n"
                yield b"data: [DONE]\n\n"
            finally:
                await agen.aclose()

        # a body closed before its first step never reaches the finally above
        return ClosingStreamingResponse(
            stream(), media_type="text/event-stream", on_close=partial(close_generation, agen, first)
        )

    @app.api_route("/encode", methods=["POST", "PUT"])
    @app.api_route("/classify", methods=["POST", "PUT"])
    async def encode() -> Response:
        """SGLang's embedding routes: a generation model answers them with SGLang's 400."""
        return error_response(NOT_AN_EMBEDDING_MODEL_ROUTE_MSG, 400)

    def model_info_dict() -> dict[str, Any]:
        tm = state.tokenizer_manager
        info = procs.scheduler_info if tm is None else tm
        return build_model_info(server_args, hf_config, info.context_len, info.vocab_size)

    @app.get("/model_info")
    async def model_info() -> Response:
        return json_response(model_info_dict())

    @app.get("/get_model_info")
    async def get_model_info() -> Response:
        return json_response(model_info_dict())

    async def server_info_dict() -> dict[str, Any]:
        return await build_server_info(server_args, procs.scheduler_info, tm_or_503())

    @app.get("/version")
    async def version() -> Response:
        """vLLM's ``GET /version``: ``{"version": the server's version}``."""
        return json_response({"version": __version__})

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
    async def flush_cache(request: Request) -> Response:
        """SGLang's ``/flush_cache[?timeout=T]``: 200 flushed, 400 busy (after ``T`` seconds)."""
        try:
            timeout_s = parse_flush_timeout(request.query_params.get("timeout"))
            ret = await flush_cache_within(tm_or_503(), timeout_s)
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
            body = loads_json_body(await request.body() or b"{}")
        except orjson.JSONDecodeError as e:
            return error_response(f"Malformed JSON body: {e}")
        try:
            tm_or_503().abort_request(*parse_abort_body(body))
        except RequestError as e:
            return error_response(str(e), e.status_code)
        return Response(status_code=200)

    # /update_weights_from_disk, /get_weights_by_name, /pause_generation, /start_profile, ...
    app.include_router(create_control_router(tm_or_503, server_args.device))
    app.include_router(create_loads_router(tm_or_503, server_args))  # /v1/loads

    if server_args.enable_metrics:
        # "/metrics/" too: SGLang's mount serves both, and scrape configs written for a
        # prometheus_client mount (which redirects "/metrics" there) ask for it
        @app.get("/metrics")
        @app.get("/metrics/")
        async def metrics(request: Request) -> Response:
            tm = state.tokenizer_manager
            if tm is None or tm.metrics is None:
                return Response(status_code=503)
            # the scheduler's gauges within the scraper's time; the counters / histograms always
            wait_s = gauge_refresh_timeout(request.headers.get(SCRAPE_TIMEOUT_HEADER))
            return Response(
                content=await scrape_metrics(tm, wait_s),
                media_type="text/plain; version=0.0.4; charset=utf-8",
            )

    return app, state


def launch_server(
    server_args: ServerArgs, stop: StopSignal | None = None, checked: bool = False, tokenizer: Any = None
) -> int:
    """Start the backend processes, serve HTTP until stopped; returns the exit code.

    ``stop``: the launcher's :class:`StopSignal` (installed before the model loads); a signal it
    records before the HTTP server handles signals stops the start-up cleanly. Without it, one is
    installed here. ``checked``: the caller has run
    :func:`~sglang_v4.entrypoints.launcher.preflight_server` on ``server_args`` (the port and model
    directory checks) and passes the tokenizer it returned as ``tokenizer`` (the main process then
    loads it once); otherwise they run here.

    Raises:
        RuntimeError: the port is taken, the host cannot be listened on, or the scheduler failed
            to start.
        StopRequested: a stop signal arrived before the HTTP server was up (children stopped).
    """
    import uvicorn

    from sglang_v4.entrypoints.launcher import launch_subprocesses, preflight_server

    if stop is None:
        stop = StopSignal().install()
    if not checked:
        tokenizer = preflight_server(server_args)
    stop.check()
    t0 = time.perf_counter()
    procs = launch_subprocesses(
        server_args, should_stop=lambda: stop.signum, while_loading=import_route_modules
    )
    logger.info(
        "Backend ready in %.1fs: max_total_num_tokens=%d, context_len=%d, max_req_input_len=%d",
        time.perf_counter() - t0,
        procs.scheduler_info.max_total_num_tokens,
        procs.scheduler_info.context_len,
        procs.scheduler_info.max_req_input_len,
    )
    try:
        app, state = create_app(server_args, procs, stop, tokenizer)
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
            timeout_graceful_shutdown=STOP_GRACE_S,
            lifespan="on",
            ssl_certfile=server_args.ssl_certfile,
            ssl_keyfile=server_args.ssl_keyfile,
            ssl_ca_certs=server_args.ssl_ca_certs,
            ssl_keyfile_password=server_args.ssl_keyfile_password,
        )

        def set_draining() -> None:
            state.draining = True

        timeout_s = server_args.graceful_shutdown_timeout
        server = DrainingServer(
            config,
            lambda sig, hurry: drain_in_flight(
                lambda: state.tokenizer_manager,
                set_draining,
                sig,
                timeout_s,
                hurry,
                stop_work=lambda: stop_own_work(state.openai_serving, state.tokenizer_manager),
            ),
        )
        state.server = server
        # DrainingServer handles SIGTERM / SIGINT while serving; ``stop``'s handlers (record only)
        # before and after let the ``finally`` below still stop the children and return the code.
        # url(): the loopback for a wildcard bind, so the bind address is logged beside it
        logger.info("Serving on %s (bound to %r)", server_args.url(), server_args.host)
        server.run()
        if not server.started and state.exit_code == 0:
            state.exit_code = 1
        return state.exit_code
    finally:
        procs.shutdown()

"""Scheduler process: wraps the in-process ``Scheduler`` core in a ZMQ event loop.

Loop (SGLang's ``event_loop_normal`` shape): drain every pending message without blocking,
run ``scheduler.step()`` while ``scheduler.has_work()`` (and generation is not paused:
``/pause_generation``) and send its ``BatchTokenIDOut`` to the
detokenizer (with ``--skip-tokenizer-init`` to the tokenizer manager); when idle, block on the input socket (1 s timeout). Control requests are answered
straight to the tokenizer manager. A SIGTERM stops the process (exit 0) after writing the trace of
a profile still recording. Any exception logs the traceback, sends
``SchedulerCrashed`` to the tokenizer manager and exits with code 1 (the server then exits
non-zero instead of hanging).

The scheduler class is ``sglang_v4.managers.scheduler:Scheduler``; the environment variable
``SGLANG_V4_SCHEDULER_CLASS=module:attr`` replaces it (used by tests with a fake scheduler). A
replacement provides what this loop uses: ``ready_info`` (a :class:`SchedulerReadyInfo`),
``add_request``, ``abort_request``, ``has_work``, ``step``, ``flush_cache``, ``get_server_info``
and ``get_metrics``; ``update_weights_from_disk``, ``get_weights_by_name`` and ``retract_all``
are optional (without them those control messages are refused). The torch profiler
(``/start_profile``) runs around the steps here (:mod:`.scheduler_profiler`).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import zmq

from sglang_v4.managers.control_struct import (
    ContinueGenerationReqInput,
    ControlAck,
    FlushCacheReqInput,
    FlushCacheReqOutput,
    GetMetricsReq,
    GetMetricsReqOutput,
    GetServerInfoReq,
    GetServerInfoReqOutput,
    GetWeightsByNameReqInput,
    GetWeightsByNameReqOutput,
    PauseGenerationReqInput,
    ProfileReq,
    SchedulerCrashed,
    SchedulerReadyInfo,
    SetLogLevelReq,
    UpdateWeightFromDiskReqInput,
    UpdateWeightFromDiskReqOutput,
)
from sglang_v4.managers.io_struct import AbortReq, BatchTokenIDOut, TokenizedGenerateReqInput, finish_abort
from sglang_v4.managers.req import Req
from sglang_v4.managers.scheduler_profiler import SchedulerProfiler
from sglang_v4.server_args import PortArgs, ServerArgs
from sglang_v4.utils import (
    configure_logging,
    exit_on_sigterm,
    exit_without_teardown,
    freeze_gc_after_startup,
    set_parent_death_signal,
    set_process_name,
    start_parent_watchdog,
)

logger = logging.getLogger(__name__)

SCHEDULER_CLASS_ENV = "SGLANG_V4_SCHEDULER_CLASS"
DEFAULT_SCHEDULER_CLASS = "sglang_v4.managers.scheduler:Scheduler"


def load_scheduler_class() -> type:
    """The scheduler class named by ``$SGLANG_V4_SCHEDULER_CLASS`` (default: the real one)."""
    spec = os.environ.get(SCHEDULER_CLASS_ENV) or DEFAULT_SCHEDULER_CLASS
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr or "Scheduler")


def _abort_output(recv: TokenizedGenerateReqInput, message: str) -> BatchTokenIDOut:
    """The message that fails ``recv`` with ``message`` (status 500) when the scheduler could not
    take it."""
    req = Req(rid=recv.rid, origin_input_ids=list(recv.input_ids), sampling_params=recv.sampling_params)
    req.finished_reason = finish_abort(message, 500)
    return BatchTokenIDOut.from_reqs([req])


class SchedulerLoop:
    """The ZMQ side of the scheduler process (separate from ``run_scheduler_process`` for tests)."""

    def __init__(self, scheduler: Any, port_args: PortArgs, skip_tokenizer_init: bool = False) -> None:
        self.scheduler = scheduler
        self.ctx = zmq.Context(2)
        self.recv = self.ctx.socket(zmq.PULL)
        self.recv.bind(port_args.scheduler_input_ipc_name)
        # the token outputs go to the detokenizer; with --skip-tokenizer-init there is nothing to
        # decode and they go straight to the tokenizer manager (as in SGLang)
        self.to_detok = self.ctx.socket(zmq.PUSH)
        self.to_detok.connect(
            port_args.tokenizer_ipc_name if skip_tokenizer_init else port_args.detokenizer_ipc_name
        )
        self.to_tok = self.ctx.socket(zmq.PUSH)
        self.to_tok.connect(port_args.tokenizer_ipc_name)
        self.poller = zmq.Poller()
        self.poller.register(self.recv, zmq.POLLIN)
        self.tokenizer_ipc_name = port_args.tokenizer_ipc_name
        #: ``time.monotonic()`` when the running ``step()`` began; 0.0 outside a step.
        self.step_started = 0.0
        #: ``/pause_generation`` (modes ``in_place`` / ``retract``): no step runs until continued.
        self.paused = False
        self.profiler = SchedulerProfiler()

    def start_watchdog(self, timeout_s: float) -> threading.Thread:
        """Kill the process (exit 1) when one ``step()`` runs longer than ``timeout_s`` seconds.

        Dumps every thread's stack to the log and sends ``SchedulerCrashed`` to the tokenizer
        manager first, so a hung forward turns into a visible crash instead of a silent hang.
        """

        def watch() -> None:
            while True:
                time.sleep(min(1.0, timeout_s / 4))
                started = self.step_started
                if started and time.monotonic() - started > timeout_s:
                    frames = sys._current_frames()
                    stacks = "".join(
                        f"Thread {tid}:\n{''.join(traceback.format_stack(f))}" for tid, f in frames.items()
                    )
                    msg = f"Scheduler watchdog: a step ran longer than {timeout_s:.0f}s; stacks:\n{stacks}"
                    logger.error(msg)
                    sock = self.ctx.socket(zmq.PUSH)
                    sock.connect(self.tokenizer_ipc_name)
                    sock.send_pyobj(SchedulerCrashed(traceback=msg))
                    sock.close(linger=2000)
                    os._exit(1)

        t = threading.Thread(target=watch, name="scheduler-watchdog", daemon=True)
        t.start()
        return t

    def handle(self, msg: Any) -> None:
        """Dispatch one incoming message."""
        s = self.scheduler
        if isinstance(msg, TokenizedGenerateReqInput):
            try:
                s.add_request(msg)
            except Exception as e:  # a scheduler bug must not take the server down for one request
                logger.error("add_request(%s) failed:\n%s", msg.rid, traceback.format_exc())
                self.to_detok.send_pyobj(_abort_output(msg, f"Internal error: {e}"))
        elif isinstance(msg, AbortReq):
            s.abort_request(msg.rid)
        elif isinstance(msg, FlushCacheReqInput):
            # SGLang's answer: a refused flush (requests hold KV) carries no message
            self.to_tok.send_pyobj(FlushCacheReqOutput(req_id=msg.req_id, success=bool(s.flush_cache())))
        elif isinstance(msg, GetServerInfoReq):
            self.to_tok.send_pyobj(GetServerInfoReqOutput(req_id=msg.req_id, info=s.get_server_info()))
        elif isinstance(msg, GetMetricsReq):
            self.to_tok.send_pyobj(GetMetricsReqOutput(req_id=msg.req_id, metrics=s.get_metrics()))
        else:
            self.to_tok.send_pyobj(self.handle_runtime_control(msg))

    def handle_runtime_control(self, msg: Any) -> Any:
        """The reply to a weight / pause / profile / log-level control message (a scheduler
        without a method the message needs, e.g. a test stand-in, refuses it)."""
        s = self.scheduler
        if isinstance(msg, UpdateWeightFromDiskReqInput):
            update = getattr(s, "update_weights_from_disk", None)
            ok, text = update(msg.model_path) if update else (False, "This scheduler cannot load weights.")
            return UpdateWeightFromDiskReqOutput(req_id=msg.req_id, success=ok, message=text)
        if isinstance(msg, GetWeightsByNameReqInput):
            read = getattr(s, "get_weights_by_name", None)
            values, text = (
                read(msg.name, msg.truncate_size) if read else (None, "This scheduler has no weights.")
            )
            return GetWeightsByNameReqOutput(req_id=msg.req_id, parameter=values, message=text)
        if isinstance(msg, PauseGenerationReqInput):
            if msg.mode == "retract":
                retract = getattr(s, "retract_all", None)
                if retract is None:
                    return ControlAck(
                        msg.req_id, False, "mode: 'retract' is not supported by this scheduler."
                    )
                self._send(retract())
            else:  # in_place: settle the batch in flight, so a paused scheduler holds none
                settle = getattr(s, "settle_in_flight", None)
                self._send(settle() if settle else None)
            self.paused = True
            return ControlAck(msg.req_id)
        if isinstance(msg, ContinueGenerationReqInput):
            self.paused = False
            return ControlAck(msg.req_id)
        if isinstance(msg, ProfileReq):
            ok, text = self.profiler.start(msg) if msg.action == "start" else self.profiler.stop()
            return ControlAck(msg.req_id, ok, text)
        if isinstance(msg, SetLogLevelReq):
            logging.getLogger().setLevel(msg.level.upper())
            return ControlAck(msg.req_id)
        logger.warning("Scheduler got an unknown message %r", type(msg).__name__)
        return ControlAck(getattr(msg, "req_id", ""), False, f"unknown message {type(msg).__name__}")

    def run_once(self, idle_timeout_ms: int = 1000) -> None:
        """One loop iteration: drain messages, then one step (or block while idle)."""
        while True:
            try:
                msg = self.recv.recv_pyobj(zmq.NOBLOCK)
            except zmq.Again:
                break
            self.handle(msg)
        if self.paused:  # no step runs; what control messages ended (aborts) is answered now
            flush = getattr(self.scheduler, "stream_output", None)
            self._send(flush() if flush else None)
        if not self.paused and self.scheduler.has_work():
            self.step_started = time.monotonic()
            with self.profiler.step_range():
                out = self.scheduler.step()
            self.step_started = 0.0
            if out is not None and len(out.rids) > 0:
                self.to_detok.send_pyobj(out)
            self.profiler.after_step()
        else:
            self.poller.poll(idle_timeout_ms)

    def _send(self, out: BatchTokenIDOut | None) -> None:
        """Send ``out`` to the detokenizer unless it carries no request."""
        if out is not None and len(out.rids) > 0:
            self.to_detok.send_pyobj(out)

    def stop_profile_on_exit(self) -> None:
        """The process stops (SIGTERM): stop a profile still recording and write its trace (the
        HTTP server's drain stops it first; this covers a signal sent to the whole process
        group and the ``Engine``'s shutdown). Never raises: a failure is logged."""
        if not self.profiler.active:
            return
        try:
            ok, text = self.profiler.stop()
        except Exception as e:  # noqa: BLE001 - the stop goes on
            ok, text = False, f"{type(e).__name__}: {e}"
        if ok:
            logger.info("Stopped the open profile at exit: %s", text)
        else:
            logger.warning("The open profile was not saved at exit: %s", text)

    def run_forever(self) -> None:
        """Run :meth:`run_once` until the process ends."""
        while True:
            self.run_once()


def run_scheduler_process(
    server_args: ServerArgs,
    port_args: PortArgs,
    ready_pipe: Connection,
    parent_pid: int | None = None,
) -> None:
    """Entry point of the scheduler process.

    Sends one :class:`SchedulerReadyInfo` through ``ready_pipe`` (``status="ready"`` with the
    model limits, or ``"error"`` with the traceback), then runs the loop until killed. Exits with
    code 1 on any error.
    """
    configure_logging(server_args.log_level, prefix=" Scheduler")
    set_process_name("sglang_v4::scheduler")
    set_parent_death_signal()
    exit_on_sigterm()
    if parent_pid is not None:
        start_parent_watchdog(parent_pid)
    try:
        t0 = time.perf_counter()
        scheduler = load_scheduler_class()(server_args)
        loop = SchedulerLoop(scheduler, port_args, bool(server_args.skip_tokenizer_init))
        ready: SchedulerReadyInfo = scheduler.ready_info
        info = dataclasses.replace(
            ready, extra={**ready.extra, "load_time_s": round(time.perf_counter() - t0, 3)}
        )
    except Exception:
        tb = traceback.format_exc()
        logger.error("Scheduler failed to start:\n%s", tb)
        ready_pipe.send(SchedulerReadyInfo(status="error", error=tb))
        os._exit(1)
    freeze_gc_after_startup()
    ready_pipe.send(info)
    loop.start_watchdog(server_args.watchdog_timeout)
    try:
        loop.run_forever()
    except SystemExit as e:  # SIGTERM (exit_on_sigterm): a normal stop
        loop.stop_profile_on_exit()
        stop_ranks = getattr(getattr(scheduler, "runner", None), "shutdown_tp_ranks", None)
        try:
            if stop_ranks is not None:
                stop_ranks()  # the other TP ranks exit 0 between steps
        except Exception as exc:  # the ranks are then stopped by signal, as before
            logger.warning("TP shutdown message not sent: %s: %s", type(exc).__name__, exc)
        exit_without_teardown(e.code if isinstance(e.code, int) else 0)
    except Exception:
        tb = traceback.format_exc()
        logger.error("Scheduler crashed:\n%s", tb)
        try:
            loop.to_tok.send_pyobj(SchedulerCrashed(traceback=tb))
            loop.to_tok.close(linger=2000)
        finally:
            os._exit(1)

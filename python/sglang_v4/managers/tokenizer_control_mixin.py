"""Runtime control of the tokenizer manager (SGLang's ``TokenizerControlMixin`` role): control
requests to the scheduler and their answers (``_control``: cache flush, internal state, metrics),
weight updates, parameter reads, pausing generation, the profiler and request logging, as RL
frameworks (verl, slime, OpenRLHF) and operators drive a running server.

Admission gate: a generate request, once tokenized, waits here before it is registered and sent
to the scheduler while generation is paused (``/pause_generation``) or a weight update is under
way (:meth:`TokenizerControlMixin.wait_for_admission`); requests already sent are not affected
by the gate. A weight update waits for the requests in flight to finish (SGLang's model-update
lock: they are its readers), or aborts them first with ``abort_all_requests``; while generation
is paused it runs at once (SGLang's rule).

Every method runs on the tokenizer manager's event loop; bad values raise
:class:`~sglang_v4.managers.tokenization.RequestError` (400) naming the field, and a dead backend
:class:`~sglang_v4.managers.tokenization.BackendDiedError` (503).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

from sglang_v4.managers.admitting_rids import AdmissionTicket, AdmittingRids
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
    SetLogLevelReq,
    UpdateWeightFromDiskReqInput,
    UpdateWeightFromDiskReqOutput,
)
from sglang_v4.managers.io_struct import HEALTH_CHECK_RID_PREFIX, GenerateReqInput
from sglang_v4.managers.tokenization import RequestError

if TYPE_CHECKING:
    from sglang_v4.managers.tokenizer_manager import TokenizerManager

logger = logging.getLogger(__name__)

#: Seconds between two looks at the requests in flight while a pause or an update waits for them.
IDLE_POLL_S = 0.01
#: Seconds the server's stop waits for an open profile's trace to be written.
PROFILE_STOP_TIMEOUT_S = 60.0
#: ``/pause_generation`` modes (SGLang's); ``abort`` is its default.
PAUSE_MODES = ("abort", "retract", "in_place")


#: ``/health_generate``'s default wait, seconds (SGLang's ``HEALTH_CHECK_TIMEOUT``).
DEFAULT_HEALTH_CHECK_TIMEOUT_S = 20.0


def health_check_timeout_s(environ: dict[str, str] | None = None) -> float:
    """Seconds ``/health_generate`` waits for its probe: ``SGLANG_HEALTH_CHECK_TIMEOUT`` (SGLang's
    variable, read as in its ``http_server.py``) from ``environ`` (default ``os.environ``), else
    :data:`DEFAULT_HEALTH_CHECK_TIMEOUT_S`. A value that is not a positive number is logged and
    the default used (a health probe must not fail on a typo in the environment)."""
    raw = (os.environ if environ is None else environ).get("SGLANG_HEALTH_CHECK_TIMEOUT")
    if raw is None:
        return DEFAULT_HEALTH_CHECK_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        logger.warning(
            "SGLANG_HEALTH_CHECK_TIMEOUT=%r is not a positive number of seconds; using %s.",
            raw,
            DEFAULT_HEALTH_CHECK_TIMEOUT_S,
        )
        return DEFAULT_HEALTH_CHECK_TIMEOUT_S
    return value


class TokenizerControlMixin:
    """Runtime control of :class:`~sglang_v4.managers.tokenizer_manager.TokenizerManager`
    (module docstring). :meth:`init_control` sets its state."""

    def init_control(self: TokenizerManager) -> None:
        """The control state: not paused, no update running, admission open."""
        #: ``/pause_generation`` was called and ``/continue_generation`` not yet (SGLang's ``is_pause``).
        self.is_pause = False
        self._weight_update_lock = asyncio.Lock()
        self._updating = False
        self._admission_open = asyncio.Event()
        self._admission_open.set()
        #: ``/start_profile`` succeeded and ``/stop_profile`` was not called since.
        self.profile_open = False
        #: Requests not yet sent to the scheduler (:mod:`~sglang_v4.managers.admitting_rids`).
        self.admitting = AdmittingRids()

    def _reopen_admission(self: TokenizerManager) -> None:
        if not self.is_pause and not self._updating:
            self._admission_open.set()
            self.admitting.wake_all()

    async def wait_for_admission(
        self: TokenizerManager, request: Any = None, ticket: AdmissionTicket | None = None
    ) -> None:
        """Return when requests may be sent to the scheduler (not paused, no weight update), or
        at once when every request of ``ticket`` was aborted meanwhile (they then end without
        being sent: :mod:`~sglang_v4.managers.admitting_rids`).

        Raises:
            RequestError: (499) the HTTP client ``request`` disconnected while waiting.
            BaseException: the error the request of ``ticket`` was failed with while it waited
                (the drain's 503).
        """
        while not self._admission_open.is_set():
            if ticket is not None:
                ticket.raise_if_failed()
                if ticket.all_aborted:
                    return
                ticket.wake.clear()
            wake = ticket.wake if ticket is not None else self._admission_open
            try:
                await asyncio.wait_for(wake.wait(), timeout=1.0)
            except asyncio.TimeoutError:
                if request is not None and await request.is_disconnected():
                    raise RequestError("Client disconnected while generation was paused.", 499) from None
        if ticket is not None:
            ticket.raise_if_failed()

    async def health_generate(self: TokenizerManager, timeout_s: float | None = None) -> bool:
        """Run a 1-token generation; True when the backend answers within ``timeout_s`` seconds
        (``None``: :func:`health_check_timeout_s`, SGLang's ``SGLANG_HEALTH_CHECK_TIMEOUT``). An idle
        scheduler runs it; a busy one answers it after its next processed batch (SGLang's rule: a
        server that keeps producing batches is healthy, however long its queue). While
        generation is paused or weights are loading, :meth:`paused_health` answers instead."""
        if self.crashed is not None:
            return False
        if timeout_s is None:
            timeout_s = health_check_timeout_s()
        held = await self.paused_health(timeout_s)
        if held is not None:
            return held
        obj = GenerateReqInput(
            input_ids=[0],
            sampling_params={"max_new_tokens": 1, "temperature": 0.0},
            rid=f"{HEALTH_CHECK_RID_PREFIX}_{uuid.uuid4().hex}",
            log_metrics=False,
            health_check=True,
        )

        async def run() -> None:
            async for _ in self.generate_request(obj):
                break

        try:
            await asyncio.wait_for(run(), timeout_s)
            return True
        except Exception:  # noqa: BLE001 - any failure means unhealthy
            return False

    async def paused_health(self: TokenizerManager, timeout_s: float) -> bool | None:
        """``/health_generate``'s answer while generation is held back on purpose, ``None`` when
        it is not (then the probe generates a token). Paused (``/pause_generation``): healthy when
        the scheduler answers a control message within ``timeout_s`` seconds (a paused scheduler
        still handles them), so a probe neither waits for ``/continue_generation`` nor reports a
        paused server as failed. A weight update under way: healthy (the scheduler is loading; a
        dead process is caught by the crash watch, a failed load by the update's own answer)."""
        if self._admission_open.is_set():
            return None
        if self._updating:
            return True
        try:
            await asyncio.wait_for(self.get_internal_state(), timeout_s)
        except Exception:  # noqa: BLE001 - any failure means unhealthy
            return False
        return True

    async def _wait_idle(self: TokenizerManager) -> None:
        """Wait until no request is in flight (answered or abandoned ones' final outputs in) and
        every request aborted before it was sent has ended (one still tokenizing ends once its
        prompt is tokenized); requests held at the closed gate are not waited for."""
        while self.rid_to_state or len(self.abandoned) or self.admitting.aborted_count:
            self._check_alive()
            await asyncio.sleep(IDLE_POLL_S)

    async def update_weights_from_disk(
        self: TokenizerManager,
        model_path: str,
        load_format: str | None = None,
        abort_all_requests: bool = False,
        weight_version: str | None = None,
    ) -> UpdateWeightFromDiskReqOutput:
        """Reload the weights from the checkpoint directory ``model_path`` (same architecture; see
        :mod:`sglang_v4.model_loader.weight_update`) and flush the radix cache.

        New requests wait meanwhile; running ones finish first (``abort_all_requests``: every
        request the server holds is aborted, those still tokenizing or held at the admission gate
        too, with SGLang's abort finish reason). On success ``weight_version`` (when given) becomes the server's
        ``weight_version`` (``/get_model_info``, every response's ``meta_info``) and
        ``model_path`` the reported model path; the served model name does not change.

        Returns:
            the scheduler's answer (``success``, ``message``, ``num_paused_requests``).
        """
        self._check_alive()
        async with self._weight_update_lock:
            if abort_all_requests:
                self.abort_request(abort_all=True)  # tokenizing and held ones too
            paused = self.is_pause
            # SGLang's writer lock: new requests wait (also past a /continue_generation sent
            # during the update), running ones finish
            self._updating = True
            self._admission_open.clear()
            try:
                if not paused:
                    await self._wait_idle()
                t0 = time.perf_counter()
                req = UpdateWeightFromDiskReqInput(model_path=model_path, load_format=load_format)
                out: UpdateWeightFromDiskReqOutput = await self._control(req, timeout_s=None)
            finally:
                self._updating = False
                self._reopen_admission()
        if out.success:
            sa = self.server_args
            sa.served_model_name = sa.resolved_served_model_name()  # the name clients send stays
            sa.model_path = self.model_path = model_path
            if weight_version is not None:
                sa.weight_version = weight_version
                out.message += f" Weight version updated to {weight_version}."
            logger.info("Weights updated from %s in %.2fs.", model_path, time.perf_counter() - t0)
        return out

    async def get_weights_by_name(self: TokenizerManager, name: str, truncate_size: int = 100) -> list[Any]:
        """The first ``truncate_size`` rows of parameter ``name`` (HF checkpoint name).

        Raises:
            RequestError: (400) no such parameter, or one split over TP ranks; the message says.
        """
        out: GetWeightsByNameReqOutput = await self._control(
            GetWeightsByNameReqInput(name=name, truncate_size=truncate_size)
        )
        if out.parameter is None:
            raise RequestError(out.message or f"name: no parameter {name!r}.")
        return out.parameter

    def num_in_flight(self: TokenizerManager) -> int:
        """Requests the server holds: sent to the scheduler and not ended (``rid_to_state``), or
        on their way to it (tokenizing, waiting at the admission gate: :attr:`admitting`)."""
        return len(self.rid_to_state) + self.admitting.count

    async def _control(self: TokenizerManager, req: Any, timeout_s: float | None = 60.0) -> Any:
        self._check_alive()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending_control[req.req_id] = fut
        self._send.send_pyobj(req)
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            raise RequestError(
                f"The scheduler did not answer {type(req).__name__} in {timeout_s}s.", 503
            ) from None
        finally:
            self.pending_control.pop(req.req_id, None)

    async def flush_cache(self: TokenizerManager) -> FlushCacheReqOutput:
        """Flush the radix cache (refused while requests run)."""
        return await self._control(FlushCacheReqInput())

    async def get_internal_state(self: TokenizerManager) -> dict[str, Any]:
        """``Scheduler.get_server_info()`` from the scheduler process."""
        out: GetServerInfoReqOutput = await self._control(GetServerInfoReq())
        return out.info

    async def get_scheduler_metrics(self: TokenizerManager, timeout_s: float | None = 60.0) -> dict[str, Any]:
        """``Scheduler.get_metrics()`` from the scheduler process.

        Raises:
            RequestError: (503) no answer within ``timeout_s`` seconds, or the backend is gone.
        """
        out: GetMetricsReqOutput = await self._control(GetMetricsReq(), timeout_s)
        return out.metrics

    def fail_control(self: TokenizerManager, message: str, status_code: int = 503) -> int:
        """Fail every control request still waiting for the scheduler's answer (a weight update
        under way when the drain ends) with ``RequestError(message, status_code)``; how many."""
        err = RequestError(message, status_code)
        waiting = [fut for fut in self.pending_control.values() if not fut.done()]
        for fut in waiting:
            fut.set_exception(err)
        return len(waiting)

    async def _ack(self: TokenizerManager, req: Any) -> None:
        ack: ControlAck = await self._control(req)
        if not ack.success:
            raise RequestError(ack.message)

    async def pause_generation(self: TokenizerManager, mode: str = "abort") -> None:
        """Stop generating (SGLang's modes): ``abort`` aborts every request the server holds
        (sent to the scheduler, tokenizing, or held at the admission gate by an earlier pause:
        :meth:`abort_request` with ``abort_all``) and returns once they have ended; ``in_place`` stops the scheduler's steps, requests keep their KV;
        ``retract`` stops them and sends running requests back to the queue, their KV released.
        Requests received while paused wait (:meth:`wait_for_admission`).

        Raises:
            RequestError: (400) a mode the scheduler does not support (nothing changes).
        """
        self._check_alive()
        was_paused = self.is_pause
        self.is_pause = True
        self._admission_open.clear()
        try:
            if mode == "abort":
                # every request held now, tokenizing or at the gate too; later ones wait
                self.abort_request(abort_all=True)
                await self._wait_idle()
            else:
                await self._ack(PauseGenerationReqInput(mode=mode))
        except RequestError:
            self.is_pause = was_paused
            self._reopen_admission()
            raise
        logger.info("Generation paused (mode %s).", mode)

    async def continue_generation(self: TokenizerManager) -> None:
        """Resume after :meth:`pause_generation`: the scheduler steps again and the requests that
        waited are sent."""
        self._check_alive()
        await self._ack(ContinueGenerationReqInput())
        self.is_pause = False
        self._reopen_admission()
        logger.info("Generation continued.")

    async def start_profile(self: TokenizerManager, req: ProfileReq) -> str:
        """Start the torch profiler around scheduler steps (:mod:`.scheduler_profiler`); its
        ``profile_id`` defaults to the time, as SGLang's. Returns the trace's profile id.

        Raises:
            RequestError: (400) a profile is already running, or ``output_dir`` is unusable.
        """
        req.action = "start"
        req.profile_id = req.profile_id or str(time.time())
        await self._ack(req)
        self.profile_open = True
        return req.profile_id

    async def stop_profile(self: TokenizerManager) -> None:
        """Stop the profiler and write its trace.

        Raises:
            RequestError: (400) no profile is running.
        """
        self.profile_open = False
        await self._ack(ProfileReq(action="stop"))

    async def stop_open_profile(self: TokenizerManager, timeout_s: float = PROFILE_STOP_TIMEOUT_S) -> bool:
        """The server stops: stop a profile that ``/start_profile`` opened and ``/stop_profile``
        did not close, so its trace is written (the scheduler process is then stopped by signal,
        which would lose it). Waits up to ``timeout_s`` seconds for the trace; whether a profile
        was stopped. Never raises: a failure is logged (a profile that ended by itself after its
        ``num_steps`` is no failure)."""
        if not self.profile_open or self.crashed is not None:
            return False
        self.profile_open = False
        try:
            ack: ControlAck = await self._control(ProfileReq(action="stop"), timeout_s)
        except RequestError as e:
            logger.warning("The open profile was not stopped: %s", e)
            return False
        if ack.success:
            logger.info("Stopped the open profile: %s", ack.message)
        return ack.success

    async def configure_logging(
        self: TokenizerManager,
        log_requests: bool | None = None,
        log_requests_level: int | None = None,
        log_requests_format: str | None = None,
        log_level: str | None = None,
    ) -> None:
        """Change ``--log-requests`` / ``--log-requests-level`` / ``--log-requests-format`` at
        runtime (``None``: unchanged), and ``log_level`` in this process and the scheduler's.
        Values are validated by the caller (:mod:`sglang_v4.entrypoints.control_api`)."""
        sa = self.server_args
        if log_requests is not None:
            sa.log_requests = log_requests
        if log_requests_level is not None:
            sa.log_requests_level = log_requests_level
        if log_requests_format is not None:
            sa.log_requests_format = log_requests_format
        if log_level is not None:
            logging.getLogger().setLevel(log_level.upper())
            await self._ack(SetLogLevelReq(level=log_level))
            sa.log_level = log_level.lower()
        logger.info(
            "Logging configured: log_requests=%s, log_requests_level=%s, log_requests_format=%s%s",
            sa.log_requests,
            sa.log_requests_level,
            sa.log_requests_format,
            f", log_level={log_level}" if log_level else "",
        )

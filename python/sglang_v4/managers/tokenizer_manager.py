"""TokenizerManager: the main-process side of the runtime (SGLang's ``tokenizer_manager.py`` role).

It validates and tokenizes requests, sends ``TokenizedGenerateReqInput`` to the scheduler over
ZMQ, receives ``BatchStrOut`` from the detokenizer, and turns them into SGLang-shaped outputs::

    {"text": str, "output_ids": list[int], "meta_info": {"id", "finish_reason", "prompt_tokens",
     "completion_tokens", "cached_tokens", "weight_version", "e2e_latency" (when finished),
     "input_token_logprobs", "output_token_logprobs", ... (with return_logprob),
     "queue_time", "first_token_latency", "request_received_ts", ... (finished, with
     --enable-metrics: SGLang's time keys, :mod:`.req_time_stats`)}}

Streaming outputs are cumulative (``text`` and ``output_ids`` are the whole output so far), as
SGLang's default. While streaming, a trailing piece of text that could still become a stop string is held back,
so that the finished text (with the stop string trimmed) always extends what was already sent.

With ``--skip-tokenizer-init`` (SGLang's flag) no tokenizer is loaded: prompts must be
``input_ids``, the scheduler's token outputs arrive here directly (no detokenizer on the way) and
every output is ``{"output_ids", "meta_info"}`` without a ``text`` key, as SGLang's; logprob
entries carry ``None`` for their text. Text prompts, stop strings / regexes and grammars are
refused with a 400 (they need the tokenizer); EOS and ``stop_token_ids`` still end generation.

All methods run on one asyncio event loop (uvicorn's, or the ``Engine``'s background loop).
Errors: bad input raises :class:`RequestError` (a ``ValueError``; ``status_code`` 400); once the
scheduler or the detokenizer process has died, every in-flight and later request raises
:class:`BackendDiedError` (``status_code`` 503, also a ``RuntimeError``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import zmq
import zmq.asyncio

from sglang_v4.entrypoints.metrics import has_grammar
from sglang_v4.managers.abandoned_rids import AbandonedRids
from sglang_v4.managers.control_struct import (
    ControlReqOutput,
    SchedulerCrashed,
    SchedulerReadyInfo,
)
from sglang_v4.managers.detokenizer_manager import str_out_from_token_out
from sglang_v4.managers.io_struct import (  # noqa: F401 - HEALTH_CHECK_RID_PREFIX re-exported
    HEALTH_CHECK_RID_PREFIX,
    BatchStrOut,
    BatchTokenIDOut,
    GenerateReqInput,
    TokenizedGenerateReqInput,
)
from sglang_v4.managers.reasoning_tokens import ReasoningTokenCounter, think_end_token_ids
from sglang_v4.managers.req_state import ReqState
from sglang_v4.managers.req_time_stats import wall_clock
from sglang_v4.managers.request_log import finish_line_due, finished_line, received_line
from sglang_v4.managers.tokenization import (  # noqa: F401 - re-exported
    TOKENIZE_IN_THREAD_CHARS,
    BackendDiedError,
    RequestError,
    TokenizationMixin,
)
from sglang_v4.managers.tokenizer_abort_mixin import TokenizerAbortMixin, parent_rid_groups
from sglang_v4.managers.tokenizer_control_mixin import TokenizerControlMixin
from sglang_v4.managers.tokenizer_manager_score_mixin import TokenizerManagerScoreMixin
from sglang_v4.managers.tokenizer_time_stats_mixin import TokenizerTimeStatsMixin, stamp_dispatch
from sglang_v4.sampling.stop_checker import stop_holdback
from sglang_v4.server_args import PortArgs, ServerArgs
from sglang_v4.utils import get_tokenizer

logger = logging.getLogger(__name__)


def crash_summary(reason: str) -> str:
    """One line out of a crash report: the last line of a traceback, else the first line."""
    lines = [ln.strip() for ln in reason.strip().splitlines() if ln.strip()]
    if not lines:
        return "a backend process died"
    return lines[-1] if lines[0].startswith("Traceback") else lines[0]


class TokenizerManager(
    TokenizationMixin,
    TokenizerControlMixin,
    TokenizerAbortMixin,
    TokenizerManagerScoreMixin,
    TokenizerTimeStatsMixin,
):
    """Validates, tokenizes, dispatches and collects generate requests (see module docstring).

    Args:
        server_args: resolved server arguments (``model_path`` set).
        port_args: the ZMQ endpoints of this server's processes.
        scheduler_info: what the scheduler reported when ready (limits, vocab size).
        tokenizer: the tokenizer already loaded from ``tokenizer_path`` by the launcher's check
            (:func:`~sglang_v4.entrypoints.launcher.resolve_model_path` returns it); ``None``:
            loaded here. Ignored with ``--skip-tokenizer-init``.
    """

    def __init__(
        self,
        server_args: ServerArgs,
        port_args: PortArgs,
        scheduler_info: SchedulerReadyInfo,
        tokenizer: Any = None,
    ) -> None:
        self.server_args = server_args
        self.port_args = port_args
        self.model_path = server_args.model_path or ""
        self.tokenizer_path = server_args.tokenizer_path or self.model_path
        self.served_model_name = server_args.resolved_served_model_name()
        #: ``--skip-tokenizer-init``: no tokenizer (``self.tokenizer is None``); see the module docstring.
        self.skip_tokenizer_init = bool(server_args.skip_tokenizer_init)
        if self.skip_tokenizer_init:
            self.tokenizer = None
        else:
            self.tokenizer = tokenizer if tokenizer is not None else get_tokenizer(self.tokenizer_path)
        #: ``</think>``'s ids for ``meta_info["reasoning_tokens"]`` (None: nothing counted)
        self.think_end_ids = think_end_token_ids(self.tokenizer, server_args.reasoning_parser)
        self.vocab_size = scheduler_info.vocab_size or (
            len(self.tokenizer) if self.tokenizer is not None else 0
        )
        self.context_len = scheduler_info.context_len
        self.max_req_input_len = scheduler_info.max_req_input_len or max(self.context_len - 1, 1)
        #: The limits every request is validated against (:meth:`_tokenize_one`).
        self.scheduler_info = dataclasses.replace(
            scheduler_info, vocab_size=self.vocab_size, max_req_input_len=self.max_req_input_len
        )
        self.is_generation = True
        #: Constrained decoding (json_schema / regex / ebnf) is accepted only when the scheduler
        #: applies grammars (it sets ``Scheduler.grammar_enabled = True``).
        self.grammar_enabled = bool(scheduler_info.extra.get("grammar_enabled", False))
        self.rid_to_state: dict[str, ReqState] = {}
        #: Requests given up unfinished whose final output is still due (a reused rid waits for it).
        self.abandoned = AbandonedRids()
        self.pending_control: dict[str, asyncio.Future[Any]] = {}
        self.crashed: str | None = None
        self.server_status = "Starting"
        self.last_receive_tstamp = 0.0
        self.startup_time = time.time()
        self.metrics: Any = None  # a TokenizerMetrics, set by the HTTP server with --enable-metrics
        #: Stamp each request's stages (:mod:`.req_time_stats`): ``--enable-metrics`` (SGLang's
        #: ``meta_info`` time keys, ``sglang:queue_time_seconds``) or
        #: ``--enable-request-time-stats-logging`` (one line per finished request).
        self.record_time_stats = bool(
            server_args.enable_metrics or server_args.enable_request_time_stats_logging
        )
        self._ctx = zmq.asyncio.Context(2)
        self._recv = self._ctx.socket(zmq.PULL)
        self._recv.bind(port_args.tokenizer_ipc_name)
        self._send = self._ctx.socket(zmq.PUSH)
        self._send.connect(port_args.scheduler_input_ipc_name)
        self._loop_task: asyncio.Task[None] | None = None
        self._closed = False
        self.init_control()  # pause / weight-update admission gate (tokenizer_control_mixin.py)
        self.init_abort()  # parent rids of batch / n > 1 requests (tokenizer_abort_mixin.py)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the receive loop on the running event loop (call from inside it)."""
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._handle_loop())

    def close(self) -> None:
        """Stop the receive loop and close the sockets (idempotent; later aborts are dropped)."""
        if self._closed:
            return
        self._closed = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            self._loop_task = None
        self._recv.close(linger=0)
        self._send.close(linger=0)
        self._ctx.term()

    def stop_admitting(self, message: str, status_code: int = 503) -> None:
        """Refuse every later request with ``RequestError(message, status_code)`` (the server is
        stopping: requests started inside it, such as a batch's, are refused too); the requests
        in flight go on."""
        self.admitting.stop(RequestError(message, status_code))

    def on_crash(self, traceback_text: str) -> None:
        """Mark the backend dead: fail all waiters; /health turns 503; new requests get 503."""
        if self.crashed is not None:
            return
        self.crashed = traceback_text or "a backend process died"
        self.server_status = "UnHealthy"
        logger.error("Backend crashed; failing %d in-flight request(s).", len(self.rid_to_state))
        err = self._crash_error()
        self.abandoned.release_all()
        self.admitting.fail_all(err)  # those held at the admission gate would wait forever
        self.admitting.stop(err)
        for state in self.rid_to_state.values():
            state.error = err
            state.event.set()
        for fut in self.pending_control.values():
            if not fut.done():
                fut.set_exception(err)

    # ------------------------------------------------------------------ receive loop
    async def _handle_loop(self) -> None:
        while True:
            msg = await self._recv.recv_pyobj()
            self.last_receive_tstamp = time.time()
            try:
                if isinstance(msg, BatchStrOut):
                    self._handle_batch_output(msg)
                elif isinstance(msg, BatchTokenIDOut):  # --skip-tokenizer-init: straight from the scheduler
                    self._handle_batch_output(str_out_from_token_out(msg))
                elif isinstance(msg, ControlReqOutput):
                    fut = self.pending_control.pop(msg.req_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
                elif isinstance(msg, SchedulerCrashed):
                    logger.error("Scheduler process crashed:\n%s", msg.traceback)
                    self.on_crash(msg.traceback)
                else:
                    logger.warning("TokenizerManager got unknown message %r", type(msg).__name__)
            except Exception:  # never let one bad message kill the loop
                logger.exception("Error while handling %s", type(msg).__name__)

    def _decode_logprob_tokens(self, vals: list[Any], idxs: list[int], with_text: bool) -> list[list[Any]]:
        texts: list[Any] = (
            self.tokenizer.batch_decode([[int(t)] for t in idxs])
            if with_text and idxs and self.tokenizer is not None
            else [None] * len(idxs)
        )
        return [[v, int(t), s] for v, t, s in zip(vals, idxs, texts)]

    def _decode_top(self, vals: list[Any], idxs: list[Any], with_text: bool) -> list[Any]:
        out: list[Any] = []
        for v, t in zip(vals, idxs):
            out.append(self._decode_logprob_tokens(v, t, with_text) if v else None)
        return out

    def _handle_batch_output(self, recv: BatchStrOut) -> None:
        now = time.perf_counter()
        wall = wall_clock() if self.record_time_stats else 0.0
        for i, rid in enumerate(recv.rids):
            state = self.rid_to_state.get(rid)
            reason = recv.finished_reasons[i]
            if state is None:  # given up (client gone) / health check already gone
                gone = self.abandoned.finished(rid) if reason is not None else None
                if gone is not None and self.metrics is not None and gone.obj.log_metrics:
                    self._observe_finished(gone, recv, i, now)
                if gone is not None and gone.timeline is not None:
                    self._time_stats_output(gone.timeline, recv, i, wall)
                    self._time_stats_finished(rid, gone, recv, i, wall)
                continue
            if state.timeline is not None:
                self._time_stats_output(state.timeline, recv, i, wall)
            state.text_raw += recv.output_strs[i]
            state.output_ids.extend(recv.output_ids[i])
            if state.obj.return_logprob:
                # Only the new positions are formatted (and detokenized) here: O(new) per message.
                with_text = bool(state.obj.return_text_in_logprobs)
                state.input_token_logprobs.extend(
                    self._decode_logprob_tokens(
                        recv.input_token_logprobs_val[i], recv.input_token_logprobs_idx[i], with_text
                    )
                )
                state.output_token_logprobs.extend(
                    self._decode_logprob_tokens(
                        recv.output_token_logprobs_val[i], recv.output_token_logprobs_idx[i], with_text
                    )
                )
                if (state.obj.top_logprobs_num or 0) > 0:
                    state.input_top_logprobs.extend(
                        self._decode_top(
                            recv.input_top_logprobs_val[i], recv.input_top_logprobs_idx[i], with_text
                        )
                    )
                    state.output_top_logprobs.extend(
                        self._decode_top(
                            recv.output_top_logprobs_val[i], recv.output_top_logprobs_idx[i], with_text
                        )
                    )
                tids = state.token_ids_logprob
                if tids is not None:
                    for dst, vals in (
                        (state.input_token_ids_logprobs, recv.input_token_ids_logprobs_val[i]),
                        (state.output_token_ids_logprobs, recv.output_token_ids_logprobs_val[i]),
                    ):
                        dst.extend(self._decode_top(vals, [tids] * len(vals), with_text))
                if state.obj.return_input_token_ranks:
                    state.input_token_ranks.extend(recv.input_token_ranks[i])
            completion = recv.completion_tokens[i]
            new_tokens = completion - state.last_completion_tokens
            if self.metrics is not None and state.obj.log_metrics and new_tokens > 0:
                # SGLang: an abort's output is no first token; an output of n new tokens dt
                # seconds after the previous token-carrying one is n inter-token gaps of dt / n.
                if state.first_token_time == 0.0:
                    if (reason or {}).get("type") != "abort":
                        self.metrics.observe_ttft(now - state.created_time, bool(state.obj.stream))
                elif state.last_time > 0.0:
                    self.metrics.observe_itl(now - state.last_time, new_tokens)
            if state.first_token_time == 0.0 and completion > 0:
                state.first_token_time = now
            if new_tokens > 0:  # the ITL clock runs from the last output that carried tokens
                state.last_time = now
                state.last_completion_tokens = completion
            if reason is None and not state.obj.stream:
                continue  # non-streaming: only the final output is built and delivered

            meta: dict[str, Any] = {
                "id": rid,
                "finish_reason": reason,
                "prompt_tokens": recv.prompt_tokens[i],
                "weight_version": self.server_args.weight_version,
                "reasoning_tokens": state.reasoning.update(state.output_ids) if state.reasoning else 0,
                "completion_tokens": completion,
                "cached_tokens": recv.cached_tokens[i],
            }
            if recv.retraction_counts:
                meta["num_retractions"] = recv.retraction_counts[i]
            if reason is not None:
                state.finished = True
                state.final_text = recv.final_strs[i] if recv.final_strs[i] is not None else state.text_raw
                meta["e2e_latency"] = now - state.created_time
                if state.timeline is not None:
                    meta.update(self._time_stats_finished(rid, state, recv, i, wall))
                code = reason.get("status_code") if reason.get("type") == "abort" else None
                if isinstance(code, int) and 400 <= code < 600:  # SGLang: the abort's HTTP status
                    state.error = RequestError(str(reason.get("message", "Bad request")), code)
                if self.metrics is not None and state.obj.log_metrics:
                    self._observe_finished(state, recv, i, now)
            if state.obj.return_logprob:
                meta["input_token_logprobs"] = list(state.input_token_logprobs)
                meta["output_token_logprobs"] = list(state.output_token_logprobs)
                if (state.obj.top_logprobs_num or 0) > 0:
                    meta["input_top_logprobs"] = list(state.input_top_logprobs)
                    meta["output_top_logprobs"] = list(state.output_top_logprobs)
                if state.token_ids_logprob is not None:
                    meta["input_token_ids_logprobs"] = list(state.input_token_ids_logprobs)
                    meta["output_token_ids_logprobs"] = list(state.output_token_ids_logprobs)
                if state.obj.return_input_token_ranks:
                    meta["input_token_ranks"] = list(state.input_token_ranks)
            if state.finished:
                text = state.final_text if state.final_text is not None else state.text_raw
            else:
                text = (
                    stop_holdback(state.text_raw, state.stop_strs)
                    if state.stop_strs and not state.no_stop_trim
                    else state.text_raw
                )
            if state.finished and self.server_args.log_requests:
                self._log_finished(rid, state, meta, None if self.skip_tokenizer_init else text)
            # outputs are cumulative and the reader takes the latest: an unread one is replaced, so
            # a reader that falls behind leaves one output here, not a copy per step (O(n^2))
            if self.skip_tokenizer_init:  # SGLang's shape without a tokenizer: no "text" key
                state.out_list = [{"output_ids": list(state.output_ids), "meta_info": meta}]
            else:
                state.out_list = [{"text": text, "output_ids": list(state.output_ids), "meta_info": meta}]
            state.event.set()

    def _observe_finished(self, state: ReqState, recv: BatchStrOut, i: int, now: float) -> None:
        """Count the end of ``state``'s request (item ``i`` of ``recv``, its final output) in the
        metrics; ``now`` is ``time.perf_counter()`` at its arrival."""
        first = state.first_token_time
        self.metrics.observe_finished(
            recv.prompt_tokens[i],
            recv.completion_tokens[i],
            now - state.created_time,
            cached_tokens=recv.cached_tokens[i],
            aborted=(recv.finished_reasons[i] or {}).get("type") == "abort",
            decode_s=(now - first) if first > 0.0 else None,
            is_streaming=bool(state.obj.stream),
            grammar=has_grammar(state.obj.sampling_params),
        )

    def _log_received(self, obj: GenerateReqInput, input_ids: list[int]) -> None:
        """``--log-requests``: the line of a received single request (:mod:`.request_log`)."""
        sa = self.server_args
        text = obj.text if isinstance(obj.text, str) else None
        sp = obj.sampling_params if isinstance(obj.sampling_params, dict) else None
        logger.info(
            "%s",
            received_line(str(obj.rid), input_ids, text, sp, sa.log_requests_level, sa.log_requests_format),
        )

    def _log_finished(self, rid: str, state: Any, meta: dict[str, Any], text: str | None) -> None:
        """``--log-requests``: the line of a finished request (:mod:`.request_log`); none for a
        request faster than ``SGLANG_LOG_REQUEST_EXCEEDED_MS`` when that is set."""
        if not finish_line_due(meta):
            return
        sa = self.server_args
        sp = state.obj.sampling_params if isinstance(state.obj.sampling_params, dict) else None
        line = finished_line(
            rid, meta, text, list(state.output_ids), sp, sa.log_requests_level, sa.log_requests_format
        )
        logger.info("%s", line)

    # ------------------------------------------------------------------ generate
    def _crash_error(self) -> BackendDiedError:
        return BackendDiedError(
            f"The backend crashed ({crash_summary(self.crashed or '')}); no request can be served any more."
        )

    def _check_alive(self) -> None:
        if self.crashed is not None:
            raise self._crash_error()

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        """Run one ``/generate`` request; an async generator of outputs.

        Non-streaming: yields once (a dict, or a list for a batch / ``n > 1``). Streaming: yields a
        cumulative dict per update (batch items carry an ``index``). ``request`` is the Starlette
        request (used to abort when the client disconnects), or ``None``.

        Raises:
            RequestError: bad input (400) or a dead backend (503).
        """
        self._check_alive()
        received = wall_clock() if self.record_time_stats else 0.0
        given_rid = obj.rid
        try:
            obj.normalize_batch_and_arguments()
        except ValueError as e:
            raise RequestError(str(e)) from None
        rids = [str(obj.rid)] if obj.is_single else [str(r) for r in obj.rid]  # type: ignore[union-attr]
        if obj.is_single:
            # until it is sent, /abort_request and the drain reach it through the ticket
            with self.admitting.hold(rids) as ticket:
                ids = (await ticket.unless_failed(self._encode_prompts([obj])))[0]
                tokenized = self._tokenize_each([obj], [ids])[0]  # a refusal names prompt 0
                self._check_logprob_volume([tokenized])
                await ticket.unless_failed(self.abandoned.wait(rids))
                await self.wait_for_admission(request, ticket)  # paused, or a weight update under way
                self._check_alive()  # the backend may have died while a long prompt was tokenized
                state = self._register(obj, tokenized)
                if received:
                    stamp_dispatch([state], received)
                self._send_admitted([tokenized], ticket)
            if self.server_args.log_requests:
                self._log_received(obj, tokenized.input_ids)
            responses = self._wait_one_response(state, request)
            try:
                async for out in responses:
                    yield out
            finally:
                await responses.aclose()  # unfinished: aborted now (the stream was closed), not by the GC
            return

        # Batch (or n > 1): validate everything first, so a bad item rejects the whole request.
        bs, n = obj.batch_size, obj.parallel_sample_num
        batch = self._generate_batch(obj, request, rids, received)
        with self.parent_rids.hold(parent_rid_groups(given_rid, rids, bs, n)):  # abort by parent rid
            try:
                async for out in batch:
                    yield out
            finally:
                await batch.aclose()  # its requests are aborted now if unfinished, not by the GC

    async def _generate_batch(
        self, obj: GenerateReqInput, request: Any, rids: list[str], received: float = 0.0
    ) -> AsyncIterator[Any]:
        """:meth:`generate_request` of a normalized batch (or ``n > 1``) request ``obj`` with
        request ids ``rids``, received at wall-clock ``received`` (0.0: stages not recorded)."""
        bs, n = obj.batch_size, obj.parallel_sample_num
        order = [k * bs + i for i in range(bs) for k in range(n)]  # SGLang: grouped by prompt
        subs = [obj[j] for j in order]
        with self.admitting.hold(rids) as ticket:
            try:
                text_ids = await ticket.unless_failed(self._encode_prompts(subs))
                tokenized_list = self._tokenize_each(subs, text_ids)
            except RequestError as e:  # the prompt's index as sent (subs are grouped by prompt, n > 1)
                e.batch_index = None if e.batch_index is None else order[e.batch_index] % bs
                raise
            self._check_logprob_volume(tokenized_list)
            await ticket.unless_failed(self.abandoned.wait([str(s.rid) for s in subs]))
            await self.wait_for_admission(request, ticket)
            self._check_alive()
            for s in subs:
                if s.rid in self.rid_to_state:
                    raise RequestError(f"Duplicate request id {s.rid!r}.")
            states = [self._register(s, t) for s, t in zip(subs, tokenized_list)]
            if received:
                stamp_dispatch(states, received)
            self._send_admitted(tokenized_list, ticket)
        for s, t in zip(subs, tokenized_list):
            if self.server_args.log_requests:
                self._log_received(s, t.input_ids)
        gens = [self._wait_one_response(st, request) for st in states]
        if not obj.stream:
            waits = [asyncio.ensure_future(g.__anext__()) for g in gens]
            try:
                outs = await asyncio.gather(*waits)
            finally:
                for t in waits:
                    t.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
                for g in gens:
                    await g.aclose()
            yield list(outs)
            return
        tasks: dict[asyncio.Task[Any], int] = {
            asyncio.ensure_future(g.__anext__()): idx for idx, g in enumerate(gens)
        }
        try:
            while tasks:
                done, _ = await asyncio.wait(tasks.keys(), return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    idx = tasks.pop(t)
                    try:
                        out = t.result()
                    except StopAsyncIteration:
                        continue
                    out = dict(out)
                    out["index"] = idx
                    yield out
                    tasks[asyncio.ensure_future(gens[idx].__anext__())] = idx
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for g in gens:
                await g.aclose()

    def _register(self, obj: GenerateReqInput, tokenized: TokenizedGenerateReqInput) -> ReqState:
        rid = str(obj.rid)
        if rid in self.rid_to_state:
            raise RequestError(f"Duplicate request id {rid!r}.")
        sp = tokenized.sampling_params
        state = ReqState(
            obj=obj,
            prompt_len=len(tokenized.input_ids),
            stop_strs=list(sp.stop_strs or []),
            no_stop_trim=bool(sp.no_stop_trim),
            token_ids_logprob=tokenized.token_ids_logprob,
        )
        if obj.require_reasoning and self.think_end_ids:
            state.reasoning = ReasoningTokenCounter(self.think_end_ids)
        self.rid_to_state[rid] = state
        return state

    async def _wait_one_response(self, state: ReqState, request: Any) -> AsyncIterator[dict[str, Any]]:
        rid = str(state.obj.rid)
        try:
            while True:
                # outputs already queued are taken at once: no task and timer per chunk
                if not state.event.is_set():
                    try:
                        await asyncio.wait_for(state.event.wait(), timeout=1.0)
                    except asyncio.TimeoutError:
                        if request is not None and await request.is_disconnected():
                            raise RequestError(f"Client disconnected; request {rid} aborted.", 499) from None
                        continue
                if state.error is not None:
                    raise state.error
                outs, state.out_list = state.out_list, []
                state.event.clear()
                if not outs:
                    continue
                out = outs[-1]
                if state.finished:
                    # the request is over: it leaves the in-flight table now, not when the caller
                    # closes this generator (an unclosed generator is only finalised by the garbage
                    # collector, and /pause_generation, the drain and flush wait on the table)
                    if self.rid_to_state.get(rid) is state:
                        del self.rid_to_state[rid]
                    yield out
                    return
                if state.obj.stream:
                    yield out
                    t = state.timeline  # the route asks again: it has written the chunk
                    if t is not None and t.first_write == 0.0:
                        t.first_write = wall_clock()
        finally:
            if not state.finished and self.crashed is None and not self._closed:
                self.abort_request(rid)
                self.abandoned.add(rid, state)  # until its final output arrives (see AbandonedRids)
            if self.rid_to_state.get(rid) is state:  # not a later request reusing the rid
                del self.rid_to_state[rid]

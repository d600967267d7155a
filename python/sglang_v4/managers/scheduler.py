"""The scheduler core: continuous batching over the paged tri-structured KV with the radix cache.

One :meth:`Scheduler.step` is one iteration of SGLang's event loop::

    batch = get_next_batch()              # decode part + prefill part, retraction
    launch(batch)                         # the model worker runs it: forward + sampling
    process_batch_result(batch, result)   # prompt logprobs, cache blocks, append tokens, finish
    return stream_output()                # one BatchTokenIDOut for the requests with news

With overlap scheduling (the default; ``--disable-overlap-schedule`` turns it off) the worker runs
in a thread and the loop is SGLang's ``event_loop_overlap``: a step builds and launches batch N + 1
while batch N still runs, then processes batch N's result; N + 1's decode inputs are N's tokens as
future ids resolved on the device (``tp_worker.py``, ``tp_worker_overlap_thread.py``). What that
changes, and why outputs stay the same:

* requests count what is in flight (``Req.num_inflight``, ``Req.num_future``); their KV is
  confirmed, cached in the radix tree and their stale windows freed only when the result arrives;
* a request that finishes at step N (stop token or string, abort) may already be in N + 1: that
  extra token is discarded (its pages were returned when it finished); a request whose budget is
  spent by N's token is not scheduled again (it finishes when N's result comes);
* a request retracted while its batch runs keeps the token that batch samples for it;
* a batch whose requests need their previous token's value on the host to sample (a grammar's
  mask, repetition / frequency / presence penalties) is built only after the previous result is
  processed: those steps do not overlap (``ScheduleBatch.needs_host_history``).

Greedy tokens are the same with and without overlap; logprobs are the same up to floating-point
reassociation when a step's batch differs (a finished request still in it, an admission one step
later), because the forward is not batch-invariant.

Each step builds a *mixed* batch (:class:`~sglang_v4.managers.schedule_batch.ScheduleBatch`):
every running request that is decoding contributes one token, and prefilling requests (ones in the
middle of a chunked prefill first, then new ones from the waiting queue) contribute chunks. The
prefill budget protects decoding: a step prefills at most ``--chunked-prefill-size`` prompt tokens
while requests are decoding, and up to ``max(--max-prefill-tokens, --chunked-prefill-size)`` when
none is; one request's chunk is at most ``--chunked-prefill-size``.

Pages come from the :class:`~sglang_v4.mem_cache.cache_manager.CacheManager` (prefix hit on
admission, pages before each forward with eviction, caching after it, release at the end). When
it cannot find pages even after eviction, a new prefill waits and a decoding request is
*retracted*: its pages are returned and it goes back to the front of the queue with its outputs
kept (it re-computes them later; never a crash, never lost output). While other requests run,
a queued request (a retracted one too) is admitted only when the block pages of its whole
sequence, and of its first decoded token, can be had (free or evictable), not just those of its
first chunk: else it would run out of pages a step or a chunk later and be retracted and readmitted
over and over while the others run. A device out-of-memory error
inside a forward retracts that batch's requests (failing one that hits it twice) and halves the
step's prefill budget (or the running-request cap, for a decode step); serving goes on.

Requests are validated by the tokenizer manager against the limits this scheduler reports at
start-up (:attr:`Scheduler.ready_info`); the scheduler re-checks them with the same rule and
finishes one that slipped through with a 400 abort before it reaches the model.

The process wrapper (ZMQ) is ``managers/scheduler_process.py``; this module is plain Python so that
tests and the in-process reference can drive it directly. Request intake (``add_request``,
``abort_request``, the grammar backend) lives in ``scheduler_intake_mixin.py``; processing results
(logprobs, tokens, finish checks, the outgoing message) in ``scheduler_output_processor.py``; the cache flush
and the runtime state / metrics reports in ``scheduler_metrics_mixin.py``; weight updates in
``scheduler_update_weights_mixin.py``.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from typing import Any

import torch

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.managers.control_struct import SchedulerReadyInfo
from sglang_v4.managers.io_struct import (
    BatchTokenIDOut,
    FinishReason,
    finish_abort,
)
from sglang_v4.managers.prefix_sharing import InflightPrefixIndex, prompt_still_prefilling
from sglang_v4.managers.reasoning_tokens import reasoning_marker_ids
from sglang_v4.managers.req import Req
from sglang_v4.managers.req_time_stats import stamp_launched, stamp_result_ready, wall_clock
from sglang_v4.managers.request_timeouts import abort_timed_out
from sglang_v4.managers.schedule_batch import FixedColumns, ScheduleBatch
from sglang_v4.managers.schedule_policy import (
    CACHE_AWARE_MAX_QUEUE,
    order_waiting,
    pages_left,
    priority_preemption,
)
from sglang_v4.managers.scheduler_intake_mixin import SchedulerIntakeMixin
from sglang_v4.managers.scheduler_metrics_mixin import SchedulerMetricsMixin
from sglang_v4.managers.scheduler_output_processor import SchedulerOutputProcessorMixin
from sglang_v4.managers.scheduler_update_weights_mixin import SchedulerUpdateWeightsMixin
from sglang_v4.managers.stop_tokens import stop_token_ids, warn_tokens_beyond_vocab
from sglang_v4.managers.tp_worker import FutureMap, TpModelWorker
from sglang_v4.managers.tp_worker_overlap_thread import make_worker_client
from sglang_v4.mem_cache.cache_manager import CacheManager
from sglang_v4.model_executor.model_runner import ModelRunner
from sglang_v4.server_args import ServerArgs

logger = logging.getLogger(__name__)

#: Above this many queued requests the longest-prefix-match ordering falls back to first come first
#: served (SGLang's limit: matching every queued prompt each step costs O(queue x prompt)).
LPM_FALLBACK_QUEUE_LEN = CACHE_AWARE_MAX_QUEUE


class Scheduler(
    SchedulerIntakeMixin, SchedulerOutputProcessorMixin, SchedulerMetricsMixin, SchedulerUpdateWeightsMixin
):
    """Continuous-batching scheduler (see module docstring).

    Args:
        server_args: a :class:`sglang_v4.server_args.ServerArgs` (``model_path`` already resolved;
            ``None`` means the embedded default model).
        model_runner: a runner to use instead of building one from ``server_args`` (a stub for the
            scheduler benchmark); it provides what :class:`ModelRunner` does to the worker.
    """

    def __init__(self, server_args: ServerArgs, model_runner: Any = None) -> None:
        self.server_args = sa = server_args
        model_path = sa.model_path
        if model_path is None:
            from sglang_v4.tools.default_model import ensure_default_model

            model_path = ensure_default_model()
        self.model_path = model_path
        if sa.random_seed is not None:
            torch.manual_seed(sa.random_seed)
        self.model_config = ModelConfig.from_pretrained(model_path, sa.model_override_args())
        mc = self.model_config
        self.page_size = int(sa.page_size)
        self.chunked_prefill_size = int(sa.chunked_prefill_size) if sa.chunked_prefill_size else 2048
        if self.chunked_prefill_size <= 0:
            self.chunked_prefill_size = 1 << 30
        self.max_prefill_tokens = int(sa.max_prefill_tokens)
        self.runner = model_runner if model_runner is not None else ModelRunner(mc, sa)
        # the runner lowers the chunk when its forward workspace does not fit the device
        runner_chunk = getattr(self.runner, "chunked_prefill_size", None)
        if runner_chunk:
            self.chunked_prefill_size = min(self.chunked_prefill_size, int(runner_chunk))
        # the runner resolves the defaults (context from the config, request slots per device)
        self.context_len = self.runner.context_len
        self.max_running_requests = self.runner.max_running_requests
        self.pool = self.runner.pool
        self.max_total_num_tokens = self.runner.max_total_tokens
        # a prompt must fit both the context and the KV pool (SGLang's bound), else it could only
        # fail after a prefill that evicts the whole cache
        self.max_req_input_len = min(self.context_len, self.max_total_num_tokens) - 1
        self.cache_manager = CacheManager(
            self.pool,
            self.page_size,
            mc.sliding_window,
            disable_radix_cache=bool(sa.disable_radix_cache),
            resume_interval=sa.resume_interval,
            defer_req_state_ops=True,
        )
        self.tree_cache = self.cache_manager.tree_cache
        from sglang_v4.utils import get_tokenizer

        # --skip-tokenizer-init: no tokenizer here either (SGLang's scheduler has none then); EOS
        # comes from the model config, and stop strings / grammars are refused by the tokenizer
        # manager (they need the vocabulary's text)
        skip_tok = bool(getattr(sa, "skip_tokenizer_init", False))
        self.tokenizer = None if skip_tok else get_tokenizer(sa.tokenizer_path or model_path)
        self.eos_ids = stop_token_ids(mc, self.tokenizer)
        #: ``<think>`` / ``</think>`` encoded (``thinking_token_budget``; empty without a tokenizer)
        self.think_start_ids, self.think_end_ids = reasoning_marker_ids(self.tokenizer)
        warn_tokens_beyond_vocab(mc, self.tokenizer, limit=8)
        self.grammar_backend = None
        if skip_tok:
            logger.info("--skip-tokenizer-init: constrained decoding disabled (grammars need the tokenizer)")
        else:
            self.grammar_backend = self._make_grammar_backend(sa.tokenizer_path or model_path)
        self.grammar_enabled = self.grammar_backend is not None
        # the model worker (one call per batch) and where its calls run
        self.future_map = FutureMap(self.max_running_requests, self.runner.device)
        self.tp_worker = TpModelWorker(self.runner, self.eos_ids, self.future_map)
        self.enable_overlap = not sa.disable_overlap_schedule
        self.worker_client = make_worker_client(self.tp_worker, self.enable_overlap)
        self.last_batch: ScheduleBatch | None = None
        if not sa.skip_warmup and model_runner is None:
            from sglang_v4.model_executor.warmup import warmup_kernels

            warmup_kernels(self.runner, sa)
        #: The limits requests are validated against (sent to the tokenizer manager at start-up).
        self.ready_info = SchedulerReadyInfo(
            status="ready",
            max_total_num_tokens=self.max_total_num_tokens,
            max_req_input_len=self.max_req_input_len,
            context_len=self.context_len,
            vocab_size=mc.vocab_size,
            model_path=str(sa.model_path or ""),
            extra={"grammar_enabled": self.grammar_enabled},
        )
        self.waiting: deque[Req] = deque()
        #: ``--schedule-policy random``'s generator, and ``hrrn``'s clock: prompt tokens put into
        #: batches so far (a request records it on arrival).
        self.policy_rng = random.Random(sa.random_seed)
        self.prefill_tokens_done = 0
        self.running: list[Req] = []
        self.pending_outputs: list[Req] = []
        self._pending_ids: set[int] = set()
        self.health_checks: list[Req] = []  # held /health_generate probes (output processor)
        self.stream_interval = sa.stream_interval
        #: Stamp each request's stages (:mod:`sglang_v4.managers.req_time_stats`) and send them
        #: with its outputs: ``--enable-metrics`` or ``--enable-request-time-stats-logging``.
        self.record_time_stats = bool(sa.enable_metrics or sa.enable_request_time_stats_logging)
        # stats
        self.num_retractions = 0
        self.num_oom_errors = 0
        self.forward_ct = 0
        self._tp_at: tuple[float, float] | None = None  # (time, forward seconds) of the last batch
        self._tp_window: deque[tuple[float, int]] = deque(maxlen=64)
        # the cache hit rate of the last processed batch that admitted requests
        self.recent_cache_hit_rate = 0.0
        self._poisoned: set[int] = set()
        self._prefilling: list[Req] = []  # running requests mid-prefill, found by _add_decode_reqs
        #: the queued request whose admission failed for KV pages last step (priority preemption)
        self._admission_blocked: Req | None = None
        self._refused_whole: tuple[Any, ...] | None = None  # _refusal_key of a refusal
        # fixed per-request columns of the last decode batch and of the last message
        self._sampling_columns = FixedColumns()
        self._output_columns = FixedColumns()

    def has_work(self) -> bool:
        """Something is queued, running, in flight, waiting to be sent, or a held health check."""
        return bool(
            self.waiting
            or self.running
            or self.pending_outputs
            or self.last_batch is not None
            or self.health_checks
        )

    def _queue_output(self, req: Req) -> None:
        """Send ``req``'s news with this step's message (once)."""
        if id(req) not in self._pending_ids:
            self._pending_ids.add(id(req))
            self.pending_outputs.append(req)

    # ------------------------------------------------------------------ the event loop
    def step(self) -> BatchTokenIDOut | None:
        """One loop iteration (module docstring); the outputs with news."""
        abort_timed_out(self)  # SGLANG_REQ_WAITING_TIMEOUT / SGLANG_REQ_RUNNING_TIMEOUT
        self._run_idle_health_checks()
        if self.enable_overlap:
            last = self.last_batch
            if last is not None and last.needs_host_history:
                self.last_batch = None
                self._resolve(last)  # this step cannot overlap: sampling needs last's tokens
                last = None
            batch = self.get_next_batch()
            if batch is not None:
                self._launch(batch)
            self.last_batch = batch
            if last is not None:
                self._resolve(last)
        else:
            batch = self.get_next_batch()
            if batch is not None:
                self._launch(batch)
                self._resolve(batch)
        return self.stream_output()

    def _launch(self, batch: ScheduleBatch) -> None:
        """Hand ``batch`` to the model worker (a thread with overlap, else inline)."""
        n = batch.sample_flags.count(True)
        slots = self.future_map.alloc(n) if n else []
        wb = batch.launch(self.cache_manager.take_req_state_ops(), slots, self._sampling_columns)
        batch.result_handle = self.worker_client.submit(wb)
        self.forward_ct += 1
        if self.record_time_stats:
            stamp_launched(batch.reqs)

    def _resolve(self, batch: ScheduleBatch) -> None:
        """Wait for ``batch``'s result and process it."""
        result = batch.result_handle.result()
        batch.result_handle = None
        result.wait()
        if self.record_time_stats:
            stamp_result_ready(batch.reqs)
        self.process_batch_result(batch, result)
        if self.health_checks and result.error is None:
            self._answer_health_checks()

    # ------------------------------------------------------------------ scheduling
    def get_next_batch(self) -> ScheduleBatch | None:
        """This step's batch: the decode part, then the prefill part; ``None`` if nothing can run.

        Never hangs: when nothing could get pages even after eviction (and no batch is in flight
        whose result would change that), the oldest running request proceeds alone next step (the
        others are retracted); if it is alone and still does not fit, it can never fit and is
        failed (likewise a waiting request with nothing running).
        """
        batch = ScheduleBatch()
        self._preempt_for_priority()
        self._add_decode_reqs(batch)
        self._add_prefill_reqs(batch)
        if len(batch) > 0:
            self.prefill_tokens_done += batch.num_extend_tokens
            return batch
        if self.last_batch is not None or any(r.num_future or r.num_inflight for r in self.running):
            return None  # a running batch's result comes first
        too_small = finish_abort("The KV cache pool is too small for this request.", 400)
        if len(self.running) > 1:
            for r in sorted(self.running, key=lambda r: r.arrival)[1:]:
                self._retract(r)
        elif self.running:
            self._finish(self.running[0], too_small)
        elif self.waiting and not self.waiting[0].num_future:
            self._finish(self.waiting[0], too_small)
        return None

    def _add_decode_reqs(self, batch: ScheduleBatch) -> None:
        """One token for every running request whose prompt is done and whose budget allows
        another token. When pages run out, retract the newest other request not yet in the batch,
        or this one if there is none.

        The per-request work is one pass over the running requests: the decode test, and for the
        common request whose pages are all there (same block, its window's spans held) nothing
        else; the batch takes the decoding requests in one :meth:`ScheduleBatch.add_decodes`.
        The running requests still prefilling are remembered for :meth:`_add_prefill_reqs`.
        """
        alloc = self.cache_manager.alloc_for_extend
        ps, W = self.page_size, self.cache_manager.window
        decoding: list[Req] = []
        prefix_lens: list[int] = []
        prefilling: list[Req] = []
        retracted = False
        for req in list(self.running):
            if retracted and req.req_pool_idx is None:  # retracted earlier in this loop
                continue
            n_out = len(req.output_ids) + req.num_future
            end = len(req.origin_input_ids) + n_out
            rem = end - req.num_computed - req.num_inflight
            if rem != 1:
                if rem > 1:
                    prefilling.append(req)
                continue
            if n_out >= req.max_new_tokens:
                continue
            start = end - 1
            wp = req.window_pages
            # alloc_for_extend's fast path inlined: the block of ``start`` and spans lo .. last held
            # (lo = max(0, (start - W + 1) // W) = (start + 1) // W - 1 past the first window)
            if not (
                len(req.block_pages) * ps >= end
                and start // W in wp
                and (start < W or (start + 1) // W - 1 in wp)
            ):
                while not alloc(req, end):
                    members = {id(r) for r in decoding}
                    victims = [
                        r for r in self.running if r is not req and r not in batch and id(r) not in members
                    ]
                    retracted = True
                    if victims:
                        self._retract(max(victims, key=lambda r: r.arrival))
                        continue
                    self._retract(req)
                    break
                else:
                    decoding.append(req)
                    prefix_lens.append(start)
                continue
            decoding.append(req)
            prefix_lens.append(start)
        if retracted:  # a retracted request may have been remembered before it was retracted
            decoding_ids = {id(r) for r in decoding}
            prefix_lens = [p for r, p in zip(decoding, prefix_lens) if r.req_pool_idx is not None]
            decoding = [r for r in decoding if r.req_pool_idx is not None]
            prefilling = [r for r in prefilling if r.req_pool_idx is not None and id(r) not in decoding_ids]
        batch.add_decodes(decoding, prefix_lens)
        self._prefilling = prefilling

    def _add_prefill_reqs(self, batch: ScheduleBatch) -> None:
        """Prompt chunks within the step's prefill budget (module docstring): running requests in
        the middle of a chunked prefill first, then new ones admitted from the queue (in policy
        order) while slots, pages and ``max_running_requests`` allow (with others running, only
        when the pages of its whole sequence can be had: :meth:`_fits_whole`). A queued request
        whose last token is still being sampled (retracted while its batch ran) waits for it."""
        chunk = self.chunked_prefill_size
        budget = min(chunk, self.max_prefill_tokens) if len(batch) else max(chunk, self.max_prefill_tokens)
        prefilling, self._prefilling = self._prefilling, []  # from _add_decode_reqs
        for req in prefilling:
            if budget <= 0:
                break
            end = req.scheduled_len + min(req.remaining, chunk, budget)
            if self.cache_manager.alloc_for_extend(req, end):
                budget -= end - req.scheduled_len
                batch.add(req, end)
            elif self._admission_blocked is None:
                self._admission_blocked = req
        if not self.waiting or budget <= 0 or len(self.running) >= self.max_running_requests:
            return
        self._sort_waiting()
        # in-batch prefix sharing (prefix_sharing.py): a queued request waits while a running
        # request still prefilling shares more prompt blocks with it than are cached yet
        inflight = None if self.tree_cache.disable else InflightPrefixIndex(self.running)
        ps = self.page_size
        deferred: list[Req] = []
        # block pages the running requests (and those admitted below) still need for their whole
        # sequence: what a queued request's whole sequence must leave them (_fits_whole)
        reserved = sum(pages_left(r, ps) for r in self.running)
        while self.waiting and budget > 0 and len(self.running) < self.max_running_requests:
            req = self.waiting[0]
            if req.num_future:
                break
            if inflight and inflight.holds(req, ps):
                deferred.append(self.waiting.popleft())
                continue
            if self.running and self._refused_whole == self._refusal_key(req, reserved):
                self._admission_blocked = req  # refused before and nothing has changed since
                break
            if not self.cache_manager.match_prefix(req):
                self._admission_blocked = req
                break
            end = req.num_computed + min(req.remaining, chunk, budget)
            if not self._fits_whole(req, reserved):
                self.cache_manager.release_req(req)
                self._refused_whole = self._refusal_key(req, reserved)
                self._admission_blocked = req
                break
            if not self.cache_manager.alloc_for_extend(req, end):
                self.cache_manager.release_req(req)
                self._admission_blocked = req
                break
            self._refused_whole = None
            reserved += pages_left(req, ps)
            if req.num_retractions == 0:
                self.cache_manager.record_hit(req)
                batch.admitted_hit_tokens += req.cached_tokens
                batch.admitted_prompt_tokens += len(req.origin_input_ids)
            self.waiting.popleft()
            self.running.append(req)
            ts = req.time_stats
            if ts is not None and ts.forward_entry == 0.0:  # its first admission
                ts.forward_entry = wall_clock()
                ts.prefix_len = req.cached_tokens
            budget -= end - req.num_computed
            batch.add(req, end)
            if inflight is not None and prompt_still_prefilling(req):
                inflight.add(req)
        self.waiting.extendleft(reversed(deferred))

    def _fits_whole(self, req: Req, reserved: int) -> bool:
        """Whether a queued request (its prefix matched) may be admitted while others run: the
        block pages for its whole sequence, and for its first decoded token when it will decode,
        can be had now beside the ``reserved`` pages the running requests still need for theirs
        (:func:`~.schedule_policy.pages_left`; SGLang's prefill admission counts the whole prompt
        and the running requests' remaining tokens, not the chunk). A request admitted for its first
        chunk only, or against pages another request is about to take, runs out of pages before
        its first decode step and is retracted, readmitted and retracted again while the others
        run, recomputing its chunk each time (vLLM's preemption thrash). Alone, a request is
        always admitted (its pages then come from eviction, or it can never fit)."""
        if not self.running:
            return True
        end = req.seq_len + (req.num_outputs + 1 < req.max_new_tokens)
        return self.cache_manager.can_hold(req, end, reserved)

    def _refusal_key(self, req: Req, reserved: int) -> tuple[Any, ...]:
        """What a :meth:`_fits_whole` refusal of ``req`` depends on: the request object itself (a
        request resent under an aborted one's rid is another), the free and evictable block pages,
        the number running, the ``reserved`` pages and the radix tree's size (blocks a running
        request inserts may lengthen ``req``'s hit). While unchanged, the head is not matched
        again (a long prompt would redo its O(prompt) prefix match every step)."""
        available, evictable, _ = self.cache_manager.kv_block_counts()
        return (req, available, evictable, len(self.running), reserved, self.tree_cache.total_pages())

    def _sort_waiting(self) -> None:
        """Order the queue by ``--schedule-policy`` (:mod:`sglang_v4.managers.schedule_policy`),
        by priority first with ``--enable-priority-scheduling`` (higher values first, lower with
        ``--schedule-low-priority-values-first``). Prefix matches do not refresh the tree's LRU
        stamps."""
        sa = self.server_args
        if len(self.waiting) < 2:
            return
        sign = None
        if sa.enable_priority_scheduling:
            sign = 1 if sa.schedule_low_priority_values_first else -1
        if sa.schedule_policy == "fcfs" and sign is None:
            return
        self.waiting = deque(
            order_waiting(
                sa.schedule_policy,
                self.waiting,
                radix_enabled=not self.tree_cache.disable,
                match_len=self.cache_manager.prefix_match_len,
                match_path=self.tree_cache.match_path,
                rng=self.policy_rng,
                prefill_tokens_done=self.prefill_tokens_done,
                priority_sign=sign,
            )
        )

    def _preempt_for_priority(self) -> None:
        """SGLang's priority preemption (``--enable-priority-scheduling`` without
        ``--disable-priority-preemption``; whom :func:`priority_preemption` says): the victim is
        retracted, keeping its outputs, and resumes when admitted again. One victim per step,
        and none when preempting every eligible one would still not make room."""
        sa = self.server_args
        blocked, self._admission_blocked = self._admission_blocked, None
        if not sa.enable_priority_scheduling or sa.disable_priority_preemption:
            return
        blocked, victims = priority_preemption(
            blocked, self.waiting, self.running, self.max_running_requests,
            priority_sign=1 if sa.schedule_low_priority_values_first else -1,
            threshold=sa.priority_scheduling_preemption_threshold, kv=self.cache_manager,
        )  # fmt: skip
        for victim in victims:
            assert blocked is not None
            self._retract(victim, f"for request {blocked.rid} of priority {blocked.priority}")

    def _retract(self, req: Req, why: str = "to free KV pages") -> None:
        """Send a running request back to the queue front, keeping its outputs (a token its last
        batch is still sampling is kept too; prompt logprobs not complete are recomputed)."""
        self.running.remove(req)
        self.cache_manager.release_req(req)
        req.num_retractions += 1  # keeps cached_tokens: the hit of its first admission
        if not req.input_logprobs_done:
            req.input_logprob_buffer = []
        self.num_retractions += 1
        self.waiting.appendleft(req)
        logger.info("Retracted request %s (%d tokens) %s", req.rid, req.seq_len, why)

    def _finish(self, req: Req, reason: FinishReason) -> None:
        """End ``req`` (queued or running): cache and release its pages, queue its last output."""
        req.finished_reason = reason
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.cache_manager.cache_finished_req(req)
        self._queue_output(req)

"""Processing a batch's result in the scheduler (SGLang's ``SchedulerOutputProcessorMixin``).

:meth:`SchedulerOutputProcessorMixin.process_batch_result` advances every request of a batch by
its extend range (KV confirmed, prompt logprobs recorded, completed blocks cached in the radix
tree, stale windows freed), then appends the sampled tokens, checks the stop conditions and queues
the requests whose news go out (:meth:`stream_output` builds the one ``BatchTokenIDOut`` of a step).
With overlap scheduling the result of batch N is processed after batch N + 1 was built; the rules
for requests that changed in between are in ``scheduler.py``'s docstring: finished ones are
skipped (their extra token discarded), retracted ones keep their token but no KV.

A failed batch (the device ran out of memory) is handled by :meth:`_process_batch_error`.

``/health_generate``'s probe (``Req.health_check``, set by the tokenizer manager only; a client's
request whose rid happens to start with :data:`~sglang_v4.managers.io_struct.HEALTH_CHECK_RID_PREFIX`
is an ordinary request) to a busy scheduler is not queued behind the work (a long queue would time it out and report a
healthy server dead): it is held and answered, with no token, once the next batch result has been
processed (:meth:`_defer_health_check`, :meth:`_answer_health_checks`); SGLang's scheduler does the
same. A probe still held when the scheduler falls idle runs as a normal request.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from sglang_v4.managers.io_struct import (
    BatchTokenIDOut,
    finish_abort,
    finish_length,
    finish_stop,
)
from sglang_v4.managers.model_worker_batch import GenerationBatchResult
from sglang_v4.managers.req import Req
from sglang_v4.managers.req_time_stats import stamp_first_tokens
from sglang_v4.managers.schedule_batch import ScheduleBatch
from sglang_v4.sampling.stop_checker import check_stop
from sglang_v4.sampling.token_masks import banned_next_tokens

if TYPE_CHECKING:
    from sglang_v4.managers.scheduler import Scheduler

logger = logging.getLogger(__name__)

#: Smallest prefill budget (tokens per step) the out-of-memory recovery shrinks to.
MIN_PREFILL_BUDGET = 64


class SchedulerOutputProcessorMixin:
    """Result processing of :class:`~sglang_v4.managers.scheduler.Scheduler` (module docstring)."""

    def _defer_health_check(self: Scheduler, req: Req) -> bool:
        """Hold ``req`` when it is a health probe and the scheduler is busy (module docstring)."""
        if not req.health_check:
            return False
        if not (self.running or self.waiting or self.last_batch is not None):
            return False
        self.health_checks.append(req)
        return True

    def _answer_health_checks(self: Scheduler) -> None:
        """A batch result was processed: answer every held probe (finished, no token)."""
        for req in self.health_checks:
            req.finished_reason = finish_length(0)
            self._queue_output(req)
        self.health_checks.clear()

    def _run_idle_health_checks(self: Scheduler) -> None:
        """Nothing is left to run: the held probes run as requests (an idle server proves its
        health by generating)."""
        if self.health_checks and not (self.running or self.waiting or self.last_batch is not None):
            self.waiting.extend(self.health_checks)
            self.health_checks.clear()

    def process_batch_result(self: Scheduler, batch: ScheduleBatch, result: GenerationBatchResult) -> None:
        """Advance the requests of ``batch`` with its ``result`` (module docstring). A request whose
        prompt is done but whose budget is spent (``max_new_tokens = 0``) ends without a token."""
        if result.error is not None:
            self._process_batch_error(batch)
            return
        discarded = batch.discarded
        cache_unfinished = self.cache_manager.cache_unfinished_req
        ps, W = self.page_size, self.cache_manager.window
        tree_off = self.tree_cache.disable
        # per request: 0 = void (finished, or its inputs were discarded), 1 = retracted since the
        # batch was built (keeps its token, not the KV), 2 = current
        state: list[int] = []
        firsts = batch.input_logprob_first
        ids = result.next_token_ids.tolist() if result.next_token_ids is not None else []
        if (
            result.next_token_logprobs is None
            and len(ids) == len(firsts)
            and firsts.count(None) == len(firsts)
            and batch.extend_lens.count(1) == len(firsts)
        ):
            self._process_decode_result(batch, ids)
            self._tp_window.append((time.monotonic(), len(ids)))
            self._log_batch(batch, result.forward_time)
            return
        if firsts.count(None) == len(firsts) and batch.extend_lens.count(1) == len(firsts):
            # one token per request, no prompt logprobs (a decode batch): the loop below, trimmed
            for req, e, p in zip(batch.reqs, batch.epochs, batch.prefix_lens):
                if req.finished_reason is not None or (discarded and id(req) in discarded):
                    state.append(0)
                elif req.num_retractions != e:
                    state.append(1)
                else:
                    state.append(2)
                    req.num_inflight -= 1
                    c = req.num_computed = p + 1
                    if (c + 1) % W == 0 or (c // ps > req.num_tree_blocks and not tree_off):
                        cache_unfinished(req)
            firsts = []  # the general loop has nothing left to do
        for i, (req, e, p, n, first) in enumerate(
            zip(batch.reqs, batch.epochs, batch.prefix_lens, batch.extend_lens, firsts)
        ):
            if req.finished_reason is not None or (discarded and id(req) in discarded):
                state.append(0)
                continue
            if req.num_retractions != e:
                state.append(1)
                continue
            state.append(2)
            req.num_inflight -= n
            c = req.num_computed = p + n
            if first is not None and not req.input_logprobs_done:
                lp = result.input_logprobs[i]
                vals: list[float] = [] if lp is None else lp[0].tolist()
                tops = None if lp is None or lp[1] is None else (lp[1].tolist(), lp[2].tolist())  # type: ignore[union-attr]
                id_vals = None if lp is None or lp[3] is None else lp[3].tolist()
                ranks = None if lp is None or lp[4] is None else lp[4].tolist()
                req.add_input_logprob_entries(first, batch.logits_counts[i], vals, tops, id_vals, ranks)
            # a one-token step completes a block or moves the window's first span only at these
            # positions (the cache manager re-checks); longer chunks always go through it
            if n != 1 or (c + 1) % W == 0 or (c // ps > req.num_tree_blocks and not tree_off):
                cache_unfinished(req)
        tok_lps = result.next_token_logprobs.tolist() if result.next_token_logprobs is not None else None
        tops_by_row: dict[int, tuple[list[float], list[int]]] = {}
        for rows, v, ix in result.next_top_logprobs.values():
            for r, a, b in zip(rows, v.tolist(), ix.tolist()):
                tops_by_row[r] = (a, b)
        id_lps = result.next_token_ids_logprobs
        append_token = self._append_token
        if tok_lps is None and len(ids) == len(state):  # every request sampled, no logprobs
            self._append_decode_tokens([(req, tok) for req, tok, st in zip(batch.reqs, ids, state) if st])
            self._tp_window.append((time.monotonic(), len(ids)))
            self._log_batch(batch, result.forward_time)
            return
        j = 0
        for req, samples, st in zip(batch.reqs, batch.sample_flags, state):
            if samples:
                if st and tok_lps is not None:
                    req.num_future -= 1
                    append_token(
                        req,
                        ids[j],
                        tok_lps[j],
                        tops_by_row.get(j),
                        None if id_lps is None or id_lps[j] is None else id_lps[j].tolist(),
                    )
                elif st:  # no logprobs: the decode path's append (plain requests inlined there)
                    self._append_decode_tokens([(req, ids[j])])
                j += 1
            elif st == 2 and req.num_computed == req.seq_len:
                self._finish(req, finish_length(len(req.output_ids)))
        self._tp_window.append((time.monotonic(), j))
        self._log_batch(batch, result.forward_time)

    def _process_decode_result(self: Scheduler, batch: ScheduleBatch, ids: list[int]) -> None:
        """:meth:`process_batch_result` for a decode batch whose every request sampled ``ids[i]``
        without logprobs, in one pass over the requests.

        The general path first advances every request's KV (confirm, cache completed blocks), then
        appends every token (finish or queue the output). Here each request does both in turn
        while its token neither finishes it nor needs the general finish check (grammar, stop
        strings); from the first one that does, the tokens of it and of the requests after it are
        appended after the pass, in batch order. So every cache call still comes before every
        finish, in the same order, and the outputs are queued in the same order."""
        discarded = batch.discarded
        cache_unfinished = self.cache_manager.cache_unfinished_req
        ps, W = self.page_size, self.cache_manager.window
        tree_off = self.tree_cache.disable
        every_token = self.stream_interval <= 1
        pending, pending_ids = self.pending_outputs, self._pending_ids
        # nothing queued yet this step: the batch's requests (each once in it) are not in the queue,
        # so this pass appends them without the set test and adds them to the set after it
        fresh = not pending
        deferred: list[tuple[Req, int]] | None = None
        for req, e, p, tok in zip(batch.reqs, batch.epochs, batch.prefix_lens, ids):
            if req.finished_reason is not None or (discarded and id(req) in discarded):
                continue  # void: finished, or its inputs were discarded
            if req.num_retractions == e:  # still owns the batch's KV (else it keeps only its token)
                req.num_inflight -= 1
                c = req.num_computed = p + 1
                # a one-token step completes a block or moves the window's first span only here
                if (c + 1) % W == 0 or (c // ps > req.num_tree_blocks and not tree_off):
                    cache_unfinished(req)
            if deferred is None:
                if req.plain_tokens:
                    out = req.output_ids
                    n_out = len(out) + 1
                    if not (
                        (tok in req.stop_token_set and n_out >= req.sampling_params.min_new_tokens)
                        or n_out >= req.max_new_tokens
                    ):
                        req.num_future -= 1
                        out.append(tok)
                        if req.stream_each and every_token:
                            if fresh:
                                pending.append(req)
                            elif id(req) not in pending_ids:
                                pending_ids.add(id(req))
                                pending.append(req)
                        elif self._due_output(req):
                            self._queue_output(req)
                        continue
                deferred = []
            deferred.append((req, tok))
        if fresh:
            pending_ids.update(map(id, pending))
        if deferred:
            self._append_decode_tokens(deferred)

    def _append_decode_tokens(self: Scheduler, items: list[tuple[Req, int]]) -> None:
        """Append each ``(request, sampled token)`` of a decode batch in turn: finish the request
        or queue its output (:meth:`_append_token`, inlined for a plain request)."""
        every_token = self.stream_interval <= 1
        pending, pending_ids = self.pending_outputs, self._pending_ids
        for req, tok in items:
            req.num_future -= 1
            if not req.plain_tokens:
                self._append_token(req, tok, None, None)
                continue
            out = req.output_ids
            out.append(tok)
            n_out = len(out)
            if tok in req.stop_token_set and n_out >= req.sampling_params.min_new_tokens:
                self._finish(req, finish_stop(tok))
            elif n_out >= req.max_new_tokens:
                self._finish(req, finish_length(n_out))
            elif req.stream_each and every_token:
                if id(req) not in pending_ids:
                    pending_ids.add(id(req))
                    pending.append(req)
            elif self._due_output(req):
                self._queue_output(req)

    def _process_batch_error(self: Scheduler, batch: ScheduleBatch) -> None:
        """The device ran out of memory in ``batch``: nothing it computed or sampled is used.

        Each request that still owned the batch's state is retracted (its pages returned; it
        recomputes later with its outputs kept) or, the second time this happens to it, finished
        with an abort (status 503); the tokens sampled for them by a batch already launched on top
        of this one are discarded. Then the step budget shrinks: the prefill budget halves (down
        to :data:`MIN_PREFILL_BUDGET`) after a batch with prompt chunks, the running-request cap
        halves after a decode-only batch.
        """
        self.num_oom_errors += 1
        nxt = self.last_batch if self.last_batch is not batch else None
        for req, epoch, samples in zip(batch.reqs, batch.epochs, batch.sample_flags):
            if req.finished or id(req) in batch.discarded:
                continue
            if req.num_retractions != epoch:  # retracted meanwhile: only its token is lost
                req.num_future -= int(samples)
                continue
            req.num_future = 0
            if nxt is not None:
                nxt.discarded.add(id(req))
            req.num_oom_errors += 1
            if req.num_oom_errors >= 2:
                msg = "Out of device memory while running this request (twice); try a shorter request."
                self._finish(req, finish_abort(msg, 503))
            elif req in self.running:
                self._retract(req)
        ext = batch.num_extend_tokens
        if ext > 0:
            new = max(MIN_PREFILL_BUDGET, min(self.chunked_prefill_size, ext) // 2)
            self.chunked_prefill_size = new
            self.max_prefill_tokens = min(self.max_prefill_tokens, new)
            what = f"prefill budget now {new} tokens per step"
        else:
            self.max_running_requests = max(1, min(self.max_running_requests, len(batch)) // 2)
            what = f"at most {self.max_running_requests} running requests now"
        logger.warning(
            "Out of device memory in a batch of %d requests (%d prompt tokens): retracted them, %s",
            len(batch),
            ext,
            what,
        )

    def _append_token(
        self: Scheduler,
        req: Req,
        tok: int,
        logprob: float | None,
        top: tuple[list[float], list[int]] | None,
        id_vals: list[float] | None = None,
    ) -> None:
        """Add a sampled token (and its logprobs: ``top`` values and ids, ``id_vals`` those of
        ``token_ids_logprob``) to ``req``; finish it or queue its output."""
        out = req.output_ids
        out.append(tok)
        if logprob is not None and req.return_logprob:
            tv, ti = top if top is not None else (None, None)
            req.pending_output_logprobs.append((logprob, tok, tv, ti, id_vals, None))
        n = len(out)
        if req.grammar is not None and not req.grammar.accept(tok):
            # A token the grammar forbids: every logit was masked (a dead end of the request's
            # grammar, or its allowlist / bad words leave none of the grammar's tokens) or the mask
            # and the matcher disagree. Aborted, as SGLang does.
            sp = req.sampling_params
            banned = banned_next_tokens(sp.bad_words_ids, out[:-1]) if sp.bad_words_ids else ()
            reason = req.grammar.rejection_reason(tok, sp.allowed_token_ids, banned)
        elif req.grammar is not None or req.has_text_stops:
            sp = req.sampling_params
            if req.stop_text_start < 0 and tok == sp.stop_str_after_token_id:
                req.stop_text_start = n  # stop strings match from the next token on
            reached = n >= req.max_new_tokens
            reason = check_stop(out, sp, self.eos_ids, self.tokenizer, reached, req.stop_text_start)
            if reason is None and req.grammar is not None and req.grammar.is_terminated():
                reason = finish_stop(tok)
        elif tok in req.stop_token_set and n >= req.sampling_params.min_new_tokens:
            reason = finish_stop(tok)  # check_stop's token rule (the request has no stop strings)
        else:
            reason = finish_length(n) if n >= req.max_new_tokens else None
        if reason is not None:
            self._finish(req, reason)
        elif req.stream and (self.stream_interval <= 1 and not req.sampling_params.stream_interval):
            if id(req) not in self._pending_ids:  # streaming at interval 1: every token goes out
                self._pending_ids.add(id(req))
                self.pending_outputs.append(req)
        elif self._due_output(req):
            self._queue_output(req)

    def _due_output(self: Scheduler, req: Req) -> bool:
        """Whether an unfinished request's new tokens go out this step. Streaming requests
        follow ``--stream-interval`` (or the request's ``stream_interval``): the first token at
        once, then every ``interval`` tokens (SGLang's rule); the held-back tokens and logprobs go
        out together, and a finished request always goes out (:meth:`_finish`). Non-streaming
        requests send their first token (time-to-first-token metrics) and then only the finish,
        with every token: nothing is detokenized for them in between."""
        n = len(req.output_ids)
        if not req.stream:
            return n == 1
        interval = req.sampling_params.stream_interval or self.stream_interval
        return interval <= 1 or (n - 1) % interval == 0

    def stream_output(self: Scheduler) -> BatchTokenIDOut | None:
        """The message for every request with news since the last call (``None`` if none)."""
        reqs, self.pending_outputs = self.pending_outputs, []
        self._pending_ids.clear()
        if not reqs:
            return None
        out = BatchTokenIDOut.from_reqs(reqs, self._output_columns)
        if self.record_time_stats:
            out.time_stats = stamp_first_tokens(reqs)
        return out

    @property
    def last_gen_throughput(self: Scheduler) -> float:
        """Generated tokens per second over the batches of the 5 s before the last batch was
        processed (its forward time when it is the only one); 0 before the first batch. Computed
        when read, from the window as it was then (only a processed batch changes it)."""
        if self._tp_at is None:
            return 0.0
        now, dt = self._tp_at
        recent = [x for x in self._tp_window if now - x[0] < 5.0]
        span = max(1e-3, now - recent[0][0]) if len(recent) > 1 else max(1e-3, dt)
        return sum(x[1] for x in recent) / span

    def _note_prefill_hits(self: Scheduler, batch: ScheduleBatch) -> None:
        """``batch``'s result was processed: ``recent_cache_hit_rate`` becomes the hit rate of
        the requests it admitted (SGLang's ``cache_hit_rate``: the batch's own prefill stats, its
        hit tokens / its prompt tokens, taken when the batch was scheduled); unchanged when it
        admitted none (a decode batch, a later chunk of a chunked prefill). Counted per batch, so
        that with the overlap schedule the batch scheduled while this one ran is not mixed in."""
        if batch.admitted_prompt_tokens > 0:
            self.recent_cache_hit_rate = batch.admitted_hit_tokens / batch.admitted_prompt_tokens

    def _log_batch(self: Scheduler, batch: ScheduleBatch, dt: float) -> None:
        n_prefill_tok = batch.num_extend_tokens
        self._tp_at = (time.monotonic(), dt)
        if not (n_prefill_tok or self.forward_ct % self.server_args.decode_log_interval == 0):
            return
        self._note_prefill_hits(batch)
        logger.info(
            "%s batch: #reqs %d (#decode %d), #prefill-tokens %d, cache hit rate %.1f%%, "
            "token usage %.2f, #running %d, #queue %d, gen throughput %.2f tok/s, %.1f ms",
            "Prefill" if n_prefill_tok else "Decode",
            len(batch),
            batch.num_decode_reqs,
            n_prefill_tok,
            100.0 * self.recent_cache_hit_rate,
            self.cache_manager.token_usage(),
            len(self.running),
            len(self.waiting),
            self.last_gen_throughput,
            dt * 1e3,
        )

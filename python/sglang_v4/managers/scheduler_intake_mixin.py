"""Request intake of the scheduler: what :meth:`add_request` and :meth:`abort_request` do inside
:class:`~sglang_v4.managers.scheduler.Scheduler` (a tokenized request checked against the limits,
its grammar compiled, its stop and priority settings resolved and queued; or finished with an
abort: 400 for a bad request, 503 for a full queue or a disabled priority), and the grammar
backend the scheduler builds at start-up.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sglang_v4.managers.io_struct import (
    ABORT_IN_QUEUE,
    ABORT_RUNNING,
    TokenizedGenerateReqInput,
    finish_abort,
)
from sglang_v4.managers.prefix_sharing import prompt_block_hashes
from sglang_v4.managers.req import Req
from sglang_v4.managers.req_time_stats import ReqTimeStats, wall_clock
from sglang_v4.managers.schedule_policy import PRIORITY_DISABLED_MSG, request_priority
from sglang_v4.sampling.seeded_generator import seeded_generator
from sglang_v4.sampling.stop_checker import stop_text_start
from sglang_v4.sampling.thinking_budget import ThinkingBudgetState

if TYPE_CHECKING:
    from sglang_v4.managers.scheduler import Scheduler

logger = logging.getLogger(__name__)


class SchedulerIntakeMixin:
    """Request intake of :class:`~sglang_v4.managers.scheduler.Scheduler` (module docstring)."""

    def _make_grammar_backend(self: Scheduler, tok_dir: str) -> Any:
        """The grammar backend over the tokenizer in ``tok_dir``, or ``None`` when constrained
        decoding is unavailable (no grammar library, no ``tokenizer.json``: a warning says why) or
        switched off (``--grammar-backend none``: requests with a grammar are refused)."""
        if self.server_args.grammar_backend == "none":
            logger.info("constrained decoding off (--grammar-backend none)")
            return None
        try:
            from sglang_v4.sampling.grammar import GrammarBackend, grammar_available

            if grammar_available():
                import os

                mc = self.model_config
                ws = self.server_args.constrained_json_max_whitespace_cnt
                kw = {} if ws is None else {"max_whitespace_cnt": ws}
                path = os.path.join(tok_dir, "tokenizer.json")
                return GrammarBackend.from_tokenizer_file(path, mc.vocab_size, sorted(self.eos_ids), **kw)
        except Exception as e:  # constrained decoding is optional
            logger.warning("constrained decoding disabled: %s", e)
        return None

    def add_request(self: Scheduler, recv: TokenizedGenerateReqInput) -> None:
        """Queue a tokenized request. One that fails the limits or the sampling-param checks (it
        should have been rejected by the tokenizer manager) or whose grammar does not compile is
        finished with a 400 abort; the other requests are not touched."""
        req = Req.from_tokenized(recv)
        if self.record_time_stats:
            req.time_stats = ReqTimeStats(scheduler_recv=wall_clock())
        sa = self.server_args
        req.priority = request_priority(
            recv.priority,
            enabled=sa.enable_priority_scheduling,
            low_values_first=sa.schedule_low_priority_values_first,
            default=sa.default_priority_value,
        )
        if (
            recv.priority is not None
            and sa.abort_on_priority_when_disabled
            and not sa.enable_priority_scheduling
        ):
            req.finished_reason = finish_abort(PRIORITY_DISABLED_MSG, 503)
            self._queue_output(req)
            return
        sp = req.sampling_params
        err = (
            self.ready_info.check_input_ids(req.origin_input_ids)
            or self._check_sampling_params(sp)
            or self._attach_grammar(req)
        )
        if (
            err is None
            and self.tokenizer is None
            and (sp.stop_strs or sp.stop or sp.stop_regex_strs or sp.stop_regex)
        ):
            err = "stop strings need the tokenizer, which this server does not load (--skip-tokenizer-init)"
        if err is None and sp.thinking_token_budget not in (None, -1):
            if not self.think_end_ids:
                err = "thinking_token_budget needs the tokenizer's </think> ids, which this server does not have"
            else:
                req.thinking_budget = ThinkingBudgetState.for_prompt(
                    req.origin_input_ids, sp.thinking_token_budget, self.think_start_ids, self.think_end_ids
                )
        if err is not None:
            req.finished_reason = finish_abort(err, 400)
            self._queue_output(req)
            return
        # a request can never hold more than the pool: stop there (finish length) like at the
        # context end, rather than fail once nothing is left to retract
        limit = min(self.context_len, self.max_total_num_tokens)
        req.max_new_tokens = sp.max_new_tokens_for(len(req.origin_input_ids), limit)
        if sp.sampling_seed is not None:
            req.generator = seeded_generator(int(sp.sampling_seed), self.runner.device)
        if req.logprob_start_len >= len(req.origin_input_ids):
            req.logprob_start_len = -1  # SGLang: a start at the prompt's end means no prompt logprobs
        if req.logprob_start_len < 0 or not req.return_logprob:
            req.input_logprobs_done = True
        if not sp.ignore_eos:
            req.stop_token_set = frozenset(self.eos_ids | set(sp.stop_token_ids or ()))
        req.has_text_stops = bool(sp.stop_strs or sp.stop or sp.stop_regex_strs or sp.stop_regex)
        req.stop_text_start = stop_text_start(req.output_ids, sp)
        req.plain_tokens = req.grammar is None and not req.has_text_stops
        req.stream_each = req.stream and not sp.stream_interval
        if not self.tree_cache.disable:
            req.block_hashes = prompt_block_hashes(req.origin_input_ids, self.page_size, req.extra_key)
        req.arrival_prefill_tokens = self.prefill_tokens_done
        if self._defer_health_check(req) or self._queue_full_refuses(req):
            return
        self.waiting.append(req)

    def _queue_full_refuses(self: Scheduler, req: Req) -> bool:
        """``--max-queued-requests`` (SGLang's rule): with the queue full, refuse ``req`` with a 503
        abort and return True; with priority scheduling, when ``req`` is strictly preferred to the
        least preferred queued request (the newest among equals), refuse that one instead."""
        sa = self.server_args
        limit = sa.max_queued_requests
        if limit is None or len(self.waiting) < limit:
            return False
        if sa.enable_priority_scheduling and self.waiting:
            sign = 1 if sa.schedule_low_priority_values_first else -1
            worst = max(self.waiting, key=lambda r: (sign * r.priority, r.arrival))
            if sign * req.priority < sign * worst.priority:
                self._finish(worst, finish_abort("The request is aborted by a higher priority request.", 503))
                return False
        req.finished_reason = finish_abort("The request queue is full.", 503)
        self._queue_output(req)
        return True

    def _check_sampling_params(self: Scheduler, sp: Any) -> str | None:
        """The error text of sampling params that fail ``SamplingParams.verify`` against the
        model's vocabulary (a ``logit_bias`` key, a stop id or an allowed id past it, a seed past
        the int64 range ...), else None. The tokenizer manager checks the same before sending; this
        keeps a request that reached the scheduler another way from failing a whole batch's step."""
        try:
            sp.verify(self.model_config.vocab_size, allow_grammar=True)
        except (TypeError, ValueError) as e:
            return f"Invalid sampling_params: {e}"  # the tokenizer manager's wording
        return None

    def _attach_grammar(self: Scheduler, req: Req) -> str | None:
        """Compile the request's grammar (json_schema / regex / ebnf); the error text, if any."""
        sp = req.sampling_params
        if self.grammar_backend is not None:
            try:
                req.grammar = self.grammar_backend.create(sp)
            except ValueError as e:
                return str(e)
        elif sp.json_schema is not None or sp.regex is not None or sp.ebnf is not None:
            return "constrained decoding (json_schema / regex / ebnf) is not available: install xgrammar"
        return None

    def abort_request(self: Scheduler, rid: str) -> None:
        """Abort a queued or running request (``rid == ""`` aborts all); pages are returned at once
        (a batch still running for it computes into pages nobody reads before it ends).

        The finish reason's message is SGLang's: ``"Abort in waiting queue"`` for a queued
        request, ``"Aborted"`` for a running one, with no ``status_code`` (RL clients read these
        to resend what a weight update or ``/pause_generation`` aborted)."""
        for q, message in ((list(self.waiting), ABORT_IN_QUEUE), (list(self.running), ABORT_RUNNING)):
            for req in q:
                if rid == "" or req.rid == rid:
                    self._finish(req, finish_abort(message, None))
        for req in [r for r in self.health_checks if rid == "" or r.rid == rid]:
            self.health_checks.remove(req)
            req.finished_reason = finish_abort(ABORT_RUNNING, None)
            self._queue_output(req)

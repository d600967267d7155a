"""The scheduler core: continuous batching over the paged tri-structured KV with the radix cache.

One :meth:`Scheduler.step` is one iteration of SGLang's event loop::

    batch = get_next_batch()              # decode part + prefill part, retraction
    result = run_batch(batch)             # model forward + sampling
    process_batch_result(batch, result)   # prompt logprobs, cache blocks, append tokens, finish
    return stream_output()                # one BatchTokenIDOut for the requests with news

Each step builds a *mixed* batch (:class:`~sglang_v4.managers.schedule_batch.ScheduleBatch`):
every running request that is decoding contributes one token, and prefilling requests (new ones
from the waiting queue, or ones in the middle of a chunked prefill) contribute chunks up to
``--chunked-prefill-size`` tokens in total.

Pages come from the :class:`~sglang_v4.mem_cache.cache_manager.CacheManager` (prefix hit on
admission, pages before each forward with eviction, caching after it, release at the end). When
it cannot find pages even after eviction, a new prefill waits and a decoding request is
*retracted*: its pages are returned and it goes back to the front of the queue with its outputs
kept (it re-computes them later; never a crash, never lost output).

Requests are validated by the tokenizer manager against the limits this scheduler reports at
start-up (:attr:`Scheduler.ready_info`); the scheduler re-checks them with the same rule and
finishes one that slipped through with a 400 abort before it reaches the model.

The process wrapper (ZMQ) is ``managers/scheduler_process.py``; this module is plain Python so that
tests and the in-process reference can drive it directly.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import torch

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.managers.io_struct import (
    BatchTokenIDOut,
    FinishReason,
    SchedulerReadyInfo,
    TokenizedGenerateReqInput,
    finish_abort,
    finish_length,
    finish_stop,
)
from sglang_v4.managers.schedule_batch import GenerationBatchResult, Req, ScheduleBatch
from sglang_v4.mem_cache.cache_manager import CacheManager
from sglang_v4.model_executor.model_runner import ModelRunner
from sglang_v4.sampling.sampler import sample, top_logprobs
from sglang_v4.sampling.stop_checker import check_stop
from sglang_v4.server_args import ServerArgs

logger = logging.getLogger(__name__)


class Scheduler:
    """Continuous-batching scheduler (see module docstring).

    Args:
        server_args: a :class:`sglang_v4.server_args.ServerArgs` (``model_path`` already resolved;
            ``None`` means the embedded default model).
    """

    def __init__(self, server_args: ServerArgs) -> None:
        self.server_args = sa = server_args
        model_path = sa.model_path
        if model_path is None:
            from sglang_v4.tools.default_model import ensure_default_model

            model_path = ensure_default_model()
        self.model_path = model_path
        if sa.random_seed is not None:
            torch.manual_seed(sa.random_seed)
        self.model_config = ModelConfig.from_pretrained(model_path)
        mc = self.model_config
        self.page_size = int(sa.page_size)
        self.chunked_prefill_size = int(sa.chunked_prefill_size) if sa.chunked_prefill_size else 2048
        if self.chunked_prefill_size <= 0:
            self.chunked_prefill_size = 1 << 30
        self.runner = ModelRunner(mc, sa)
        # the runner lowers the chunk when its forward workspace does not fit the device
        self.chunked_prefill_size = min(self.chunked_prefill_size, self.runner.chunked_prefill_size)
        # the runner resolves the defaults (context from the config, request slots per device)
        self.context_len = self.runner.context_len
        self.max_running_requests = self.runner.max_running_requests
        self.pool = self.runner.pool
        gr = self.runner.cuda_graph_runner
        warm_ctx = sa.cuda_graph_warmup_ctx
        if gr is not None and warm_ctx > 0 and not sa.skip_warmup:
            t0 = time.perf_counter()
            n = gr.capture_all()
            logger.info(
                "Captured %d decode CUDA graphs (every context up to %d) in %.1f s",
                n,
                self.context_len,
                time.perf_counter() - t0,
            )
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
        )
        self.tree_cache = self.cache_manager.tree_cache
        from sglang_v4.utils import get_tokenizer

        self.tokenizer = get_tokenizer(sa.tokenizer_path or model_path)
        self.eos_ids = set(mc.eos_token_ids)
        self.grammar_backend = None
        try:
            from sglang_v4.sampling.grammar import GrammarBackend, grammar_available

            if grammar_available():
                import os

                from transformers import PreTrainedTokenizerFast

                tok_dir = sa.tokenizer_path or model_path
                hf_tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(tok_dir, "tokenizer.json"))
                self.grammar_backend = GrammarBackend(hf_tok, mc.vocab_size, sorted(self.eos_ids))
        except Exception as e:  # constrained decoding is optional
            logger.warning("constrained decoding disabled: %s", e)
        self.grammar_enabled = self.grammar_backend is not None
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
        self.running: list[Req] = []
        self.pending_outputs: list[Req] = []
        self.stream_interval = sa.stream_interval
        # stats
        self.num_retractions = 0
        self.forward_ct = 0
        self.last_gen_throughput = 0.0
        self._tp_window: deque[tuple[float, int]] = deque(maxlen=64)

    # ------------------------------------------------------------------ request intake
    def add_request(self, recv: TokenizedGenerateReqInput) -> None:
        """Queue a tokenized request. One that fails the limits (it should have been rejected by
        the tokenizer manager) or whose grammar does not compile is finished with a 400 abort."""
        req = Req.from_tokenized(recv)
        err = self.ready_info.check_input_ids(req.origin_input_ids) or self._attach_grammar(req)
        if err is not None:
            req.finished_reason = finish_abort(err, 400)
            self.pending_outputs.append(req)
            return
        sp = req.sampling_params
        # a request can never hold more than the pool: stop there (finish length) like at the
        # context end, rather than fail once nothing is left to retract
        limit = min(self.context_len, self.max_total_num_tokens)
        req.max_new_tokens = sp.max_new_tokens_for(len(req.origin_input_ids), limit)
        if sp.sampling_seed is not None:
            req.generator = torch.Generator(device=self.runner.device).manual_seed(int(sp.sampling_seed))
        if req.logprob_start_len < 0 or not req.return_logprob:
            req.input_logprobs_done = True
        self.waiting.append(req)

    def _attach_grammar(self, req: Req) -> str | None:
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

    def abort_request(self, rid: str) -> None:
        """Abort a queued or running request (``rid == ""`` aborts all); pages are returned at once."""
        for q in (list(self.waiting), list(self.running)):
            for req in q:
                if rid == "" or req.rid == rid:
                    self._finish(req, finish_abort("Aborted by the client", None))

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.pending_outputs)

    # ------------------------------------------------------------------ the event loop
    def step(self) -> BatchTokenIDOut | None:
        """One loop iteration: schedule a batch, run it, process its result; the outputs with news."""
        batch = self.get_next_batch()
        if batch is not None:
            result = self.run_batch(batch)
            self.process_batch_result(batch, result)
        return self.stream_output()

    # ------------------------------------------------------------------ scheduling
    def get_next_batch(self) -> ScheduleBatch | None:
        """This step's batch: the decode part, then the prefill part; ``None`` if nothing can run.

        Never hangs: when nothing could get pages even after eviction, the oldest running request
        proceeds alone next step (the others are retracted); if it is alone and still does not
        fit, it can never fit and is failed (likewise a waiting request with nothing running).
        """
        batch = ScheduleBatch()
        self._add_decode_reqs(batch)
        self._add_prefill_reqs(batch)
        if len(batch) > 0:
            return batch
        too_small = finish_abort("The KV cache pool is too small for this request.", 400)
        if len(self.running) > 1:
            for r in sorted(self.running, key=lambda r: r.arrival)[1:]:
                self._retract(r)
        elif self.running:
            self._finish(self.running[0], too_small)
        elif self.waiting:
            self._finish(self.waiting[0], too_small)
        return None

    def _add_decode_reqs(self, batch: ScheduleBatch) -> None:
        """One token for every running request whose prompt is done. When pages run out, retract
        the newest other request not yet in the batch, or this one if there is none."""
        for req in [r for r in self.running if r.remaining == 1]:
            if req.req_pool_idx is None:  # retracted earlier in this loop
                continue
            while not self.cache_manager.alloc_for_extend(req, req.seq_len):
                victims = [r for r in self.running if r is not req and r not in batch]
                if victims:
                    self._retract(max(victims, key=lambda r: r.arrival))
                    continue
                self._retract(req)
                break
            else:
                batch.add(req, req.seq_len)

    def _add_prefill_reqs(self, batch: ScheduleBatch) -> None:
        """Prompt chunks within the chunked-prefill budget: running requests in the middle of a
        chunked prefill first, then new ones admitted from the queue (in policy order) while
        slots, pages and ``max_running_requests`` allow."""
        budget = self.chunked_prefill_size
        for req in [r for r in self.running if r.remaining > 1]:
            if budget <= 0:
                break
            end = req.num_computed + min(req.remaining, budget)
            if self.cache_manager.alloc_for_extend(req, end):
                batch.add(req, end)
                budget -= end - req.num_computed
        self._sort_waiting()
        while self.waiting and budget > 0 and len(self.running) < self.max_running_requests:
            req = self.waiting[0]
            if not self.cache_manager.match_prefix(req):
                break
            end = req.num_computed + min(req.remaining, budget)
            if not self.cache_manager.alloc_for_extend(req, end):
                self.cache_manager.release_req(req)
                break
            if req.num_retractions == 0:
                self.cache_manager.record_hit(req)
            self.waiting.popleft()
            self.running.append(req)
            batch.add(req, end)
            budget -= end - req.num_computed

    def _sort_waiting(self) -> None:
        """Order the queue: by priority (``--enable-priority-scheduling``), by longest cached
        prefix (``--schedule-policy lpm``), else first come first served."""
        sa = self.server_args
        reqs = list(self.waiting)
        if sa.enable_priority_scheduling:
            reqs.sort(key=lambda r: (-r.priority, r.arrival))
        elif sa.schedule_policy == "lpm" and not self.tree_cache.disable and len(reqs) > 1:
            lens = {id(r): self.cache_manager.prefix_match_len(r.token_ids(0, r.seq_len - 1)) for r in reqs}
            reqs.sort(key=lambda r: (-lens[id(r)], r.arrival))
        self.waiting = deque(reqs)

    def _retract(self, req: Req) -> None:
        """Send a running request back to the queue front, keeping its outputs."""
        self.running.remove(req)
        self.cache_manager.release_req(req)
        req.cached_tokens = 0
        req.num_retractions += 1
        self.num_retractions += 1
        self.waiting.appendleft(req)
        logger.info("Retracted request %s (%d tokens) to free KV pages", req.rid, req.seq_len)

    def _finish(self, req: Req, reason: FinishReason) -> None:
        """End ``req`` (queued or running): cache and release its pages, queue its last output."""
        req.finished_reason = reason
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.cache_manager.cache_finished_req(req)
        if req not in self.pending_outputs:
            self.pending_outputs.append(req)

    # ------------------------------------------------------------------ running a batch
    def run_batch(self, batch: ScheduleBatch) -> GenerationBatchResult:
        """Run the model on ``batch`` and sample the next token of every request that samples."""
        t0 = time.perf_counter()
        _, logits = self.runner.forward(batch.get_forward_inputs())
        self.forward_ct += 1
        rows, off = [], 0
        for c in batch.logits_counts:
            rows.append(logits[off : off + c])
            off += c
        reqs = [r for r, s in zip(batch.reqs, batch.sample_flags) if s]
        ids: list[int] = []
        lps = None
        if reqs:
            want_lp = any(r.return_logprob for r in reqs)
            out = sample(
                torch.stack([x[-1] for x, s in zip(rows, batch.sample_flags) if s]),
                [r.sampling_params for r in reqs],
                [r.output_ids for r in reqs],
                [r.origin_input_ids for r in reqs],
                [r.generator for r in reqs],
                eos_token_ids=self.eos_ids,
                return_logprobs=want_lp,
                grammars=[r.grammar for r in reqs] if any(r.grammar is not None for r in reqs) else None,
            )
            next_ids, lps = out if want_lp else (out, None)  # type: ignore[misc]
            ids = [int(t) for t in next_ids.tolist()]
        return GenerationBatchResult(rows, ids, lps, time.perf_counter() - t0)

    def process_batch_result(self, batch: ScheduleBatch, result: GenerationBatchResult) -> None:
        """Advance every request of ``batch`` by its extend range: record prompt logprobs, cache
        its completed blocks, then append the sampled tokens and finish the requests that stop.
        A request whose prompt is done but whose budget is spent (``max_new_tokens = 0``) ends
        without a token."""
        for req, p, n, rows in zip(batch.reqs, batch.prefix_lens, batch.extend_lens, result.logits):
            if req.wants_input_logprobs and rows.shape[0] > 0:
                req.add_input_logprobs(rows, p + n - rows.shape[0])
            req.num_computed = p + n
            self.cache_manager.cache_unfinished_req(req)
        j = 0
        for req, samples in zip(batch.reqs, batch.sample_flags):
            if samples:
                lp_row = result.next_token_logprobs[j] if result.next_token_logprobs is not None else None
                self._append_token(req, result.next_token_ids[j], lp_row)
                j += 1
            elif req.remaining == 0:
                self._finish(req, finish_length(len(req.output_ids)))
        self._tp_window.append((time.monotonic(), j))
        self._log_batch(batch, result.forward_time)

    def _append_token(self, req: Req, tok: int, lp_row: torch.Tensor | None) -> None:
        """Add a sampled token (and its logprobs) to ``req``; finish it or queue its output."""
        req.output_ids.append(tok)
        if req.return_logprob and lp_row is not None:
            tv = ti = None
            if req.top_logprobs_num > 0:
                v, ix = top_logprobs(lp_row[None], req.top_logprobs_num)
                tv, ti = v[0].tolist(), ix[0].tolist()
            req.pending_output_logprobs.append((float(lp_row[tok]), tok, tv, ti))
        if req.grammar is not None:
            req.grammar.accept(tok)
        reached = len(req.output_ids) >= req.max_new_tokens
        reason = check_stop(req.output_ids, req.sampling_params, self.eos_ids, self.tokenizer, reached)
        if reason is None and req.grammar is not None and req.grammar.is_terminated():
            reason = finish_stop(tok)
        if reason is not None:
            self._finish(req, reason)
        elif self._due_output(req) and req not in self.pending_outputs:
            self.pending_outputs.append(req)

    def _due_output(self, req: Req) -> bool:
        """Whether an unfinished request's new tokens go out this step. Streaming requests
        follow ``--stream-interval`` (or the request's ``stream_interval``): the first token at
        once, then every ``interval`` tokens (SGLang's rule); the held-back tokens and logprobs go
        out together, and a finished request always goes out (:meth:`_finish`). Non-streaming
        requests are sent every step (the tokenizer manager only answers at the end)."""
        if not req.stream:
            return True
        interval = req.sampling_params.stream_interval or self.stream_interval
        return interval <= 1 or (len(req.output_ids) - 1) % interval == 0

    def stream_output(self) -> BatchTokenIDOut | None:
        """The message for every request with news since the last call (``None`` if none)."""
        reqs, self.pending_outputs = self.pending_outputs, []
        return BatchTokenIDOut.from_reqs(reqs) if reqs else None

    # ------------------------------------------------------------------ logging / info
    def _log_batch(self, batch: ScheduleBatch, dt: float) -> None:
        n_prefill_tok = batch.num_extend_tokens
        stats = self.tree_cache.stats()
        hit = stats["hit_tokens"]
        tot = max(1, stats["prompt_tokens"])
        now = time.monotonic()
        window = [x for x in self._tp_window if now - x[0] < 5.0]
        span = max(1e-3, now - window[0][0]) if len(window) > 1 else max(1e-3, dt)
        self.last_gen_throughput = sum(x[1] for x in window) / span
        if n_prefill_tok or self.forward_ct % self.server_args.decode_log_interval == 0:
            logger.info(
                "%s batch: #reqs %d (#decode %d), #prefill-tokens %d, cache hit rate %.1f%%, "
                "token usage %.2f, #running %d, #queue %d, gen throughput %.2f tok/s, %.1f ms",
                "Prefill" if n_prefill_tok else "Decode",
                len(batch),
                batch.num_decode_reqs,
                n_prefill_tok,
                100.0 * hit / tot,
                self.cache_manager.token_usage(),
                len(self.running),
                len(self.waiting),
                self.last_gen_throughput,
                dt * 1e3,
            )

    def flush_cache(self) -> bool:
        """Empty the radix cache; refused (False) while requests are queued or running."""
        if self.waiting or self.running:
            return False
        return self.cache_manager.flush()

    def get_server_info(self) -> dict[str, Any]:
        """JSON-able runtime state: ``kv_pool`` pages per pool, ``radix_cache`` stats, limits."""
        sa = self.server_args
        return {
            "model_path": self.model_path,
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_running_requests": self.max_running_requests,
            "context_length": self.context_len,
            "page_size": self.page_size,
            "chunked_prefill_size": self.chunked_prefill_size,
            "device": str(self.runner.device),
            "dtype": str(self.runner.dtype).replace("torch.", ""),
            "kv_cache_dtype": sa.kv_cache_dtype,
            "disable_radix_cache": bool(sa.disable_radix_cache),
            "schedule_policy": sa.schedule_policy,
            "kv_pool": self.pool.stats(),
            "kv_pool_bytes": self.pool.memory_bytes(),
            "kv_plan": self.runner.kv_plan_info(),
            "radix_cache": self.tree_cache.stats(),
            "num_running_reqs": len(self.running),
            "num_queue_reqs": len(self.waiting),
            "num_retractions": self.num_retractions,
        }

    def get_metrics(self) -> dict[str, Any]:
        """Gauges for ``/metrics``: queue sizes, token usage, cache hit rate, throughput."""
        st = self.tree_cache.stats()
        hit, tot = st["hit_tokens"], st["prompt_tokens"]
        return {
            "num_running_reqs": len(self.running),
            "num_queue_reqs": len(self.waiting),
            "token_usage": self.cache_manager.token_usage(),
            "cache_hit_rate": (hit / tot) if tot else 0.0,
            "gen_throughput": self.last_gen_throughput,
            "num_retractions": self.num_retractions,
        }

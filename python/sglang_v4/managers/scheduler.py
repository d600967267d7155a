"""The scheduler core: continuous batching over the paged tri-structured KV with the radix cache.

One :meth:`Scheduler.step` = one scheduling decision + one model forward (SGLang's event loop
body). Each step builds a *mixed* batch: every running request that is decoding contributes one
token, and prefilling requests (new ones from the waiting queue, or ones in the middle of a
chunked prefill) contribute chunks up to ``--chunked-prefill-size`` tokens in total.

Memory: before a forward every request in the batch gets the block pages and window pages its
chunk needs. When the allocators run dry, the radix cache evicts (resume states first, then LRU
leaf blocks); if that is not enough a new prefill waits, and a decoding request is *retracted*:
its pages are returned and it goes back to the front of the queue with its outputs kept (it
re-computes them later; never a crash, never lost output). After the forward, completed 256-token
blocks are inserted into the radix cache (so a second request can hit a prefix while the first is
still prefilling or decoding), window pages that fell out of every request's sliding window are
freed, and finished requests release everything they own.

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
    TokenizedGenerateReqInput,
    finish_abort,
    finish_length,
)
from sglang_v4.managers.schedule_batch import Req
from sglang_v4.mem_cache.radix_cache import RadixCache
from sglang_v4.model_executor.forward_batch import ReqForwardInput
from sglang_v4.model_executor.model_runner import ModelRunner
from sglang_v4.sampling.sampler import compute_logprobs, sample, top_logprobs
from sglang_v4.sampling.stop_checker import check_stop

logger = logging.getLogger(__name__)


class Scheduler:
    """Continuous-batching scheduler (see module docstring).

    Args:
        server_args: a :class:`sglang_v4.server_args.ServerArgs` (``model_path`` already resolved;
            ``None`` means the embedded default model).
    """

    def __init__(self, server_args: Any) -> None:
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
        self.context_len = int(sa.context_length or mc.context_length)
        self.page_size = int(sa.page_size)
        self.window = mc.sliding_window
        self.max_running_requests = int(sa.max_running_requests or (256 if sa.device == "cuda" else 64))
        self.chunked_prefill_size = int(sa.chunked_prefill_size) if sa.chunked_prefill_size else 2048
        if self.chunked_prefill_size <= 0:
            self.chunked_prefill_size = 1 << 30
        self.runner = ModelRunner(
            mc,
            model_path,
            sa.device,
            sa.dtype,
            self.page_size,
            sa.max_total_tokens,
            self.max_running_requests,
            self.context_len,
            sa.load_format,
            getattr(sa, "mem_fraction_static", None),
            seed=sa.random_seed or 0,
            kv_cache_dtype=sa.kv_cache_dtype,
            fp4_indexer=sa.enable_fp4_indexer,
            resume_interval=int(getattr(sa, "resume_interval", 1) or 1),
            cuda_graph_max_bs=sa.cuda_graph_max_bs,
            disable_cuda_graph=bool(sa.disable_cuda_graph),
            indexer_stream_max_bs=sa.indexer_stream_max_bs,
        )
        self.pool = self.runner.pool
        gr = self.runner.cuda_graph_runner
        warm_ctx = sa.cuda_graph_warmup_ctx
        if gr is not None and warm_ctx > 0 and not sa.skip_warmup:
            t0 = time.perf_counter()
            n = gr.capture_all(min(warm_ctx, self.context_len))
            logger.info(
                "Captured %d decode CUDA graphs (ctx <= %d) in %.1f s", n, warm_ctx, time.perf_counter() - t0
            )
        self.max_total_num_tokens = self.runner.max_total_tokens
        # a prompt must fit both the context and the KV pool (SGLang's bound), else it could only
        # fail after a prefill that evicts the whole cache
        self.max_req_input_len = min(self.context_len, self.max_total_num_tokens) - 1
        self.tree = RadixCache(
            self.pool.block_alloc,
            self.pool.window_alloc,
            self.page_size,
            disable=bool(sa.disable_radix_cache),
            resume_interval=int(getattr(sa, "resume_interval", 1) or 1),
        )
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
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.pending_outputs: list[Req] = []
        self.stream_interval = sa.stream_interval
        self.aborted: set[str] = set()
        # stats
        self.num_generated = 0
        self.num_prompt_tokens = 0
        self.num_cached_tokens = 0
        self.num_retractions = 0
        self.forward_ct = 0
        self.last_gen_throughput = 0.0
        self._tp_window: deque[tuple[float, int]] = deque(maxlen=64)

    # ------------------------------------------------------------------ request intake
    def add_request(self, recv: TokenizedGenerateReqInput) -> None:
        """Queue a tokenized request. An invalid one is finished with an abort reason (status 400)."""
        sp = recv.sampling_params
        req = Req(
            rid=recv.rid,
            origin_input_ids=list(recv.input_ids),
            sampling_params=sp,
            return_logprob=bool(recv.return_logprob),
            logprob_start_len=int(recv.logprob_start_len if recv.logprob_start_len is not None else -1),
            top_logprobs_num=int(recv.top_logprobs_num or 0),
            stream=bool(recv.stream),
            priority=int(recv.priority or 0),
        )
        err = None
        n = len(req.origin_input_ids)
        if n == 0:
            err = "The input is empty (input_ids has no token)."
        elif n >= self.context_len:
            err = (
                f"The input ({n} tokens) is longer than the model's context length "
                f"({self.context_len} tokens)."
            )
        elif n > self.max_req_input_len:
            err = (
                f"The input ({n} tokens) does not fit in the KV cache pool "
                f"({self.max_total_num_tokens} tokens; at most {self.max_req_input_len} prompt tokens)."
            )
        elif any((t < 0 or t >= self.model_config.vocab_size) for t in req.origin_input_ids):
            err = f"input_ids: token id out of range [0, {self.model_config.vocab_size})."
        if err is None and self.grammar_backend is not None:
            try:
                req.grammar = self.grammar_backend.create(sp)
            except ValueError as e:
                err = str(e)
        elif err is None and any(getattr(sp, k, None) is not None for k in ("json_schema", "regex", "ebnf")):
            err = "constrained decoding (json_schema / regex / ebnf) is not available: install xgrammar"
        if err is not None:
            req.finished_reason = finish_abort(err, 400)
            self.pending_outputs.append(req)
            return
        if sp.sampling_seed is not None:
            req.generator = torch.Generator(device=self.runner.device).manual_seed(int(sp.sampling_seed))
        if req.logprob_start_len < 0 or not req.return_logprob:
            req.input_logprobs_done = True
        self.num_prompt_tokens += n
        self.waiting.append(req)

    def abort_request(self, rid: str) -> None:
        """Abort a queued or running request (``rid == ""`` aborts all); pages are returned at once."""
        for q in (list(self.waiting), list(self.running)):
            for req in q:
                if rid == "" or req.rid == rid:
                    self._finish(req, finish_abort("Aborted by the client", None))

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.pending_outputs)

    # ------------------------------------------------------------------ memory helpers
    def _alloc(self, n_blocks: int, n_windows: int) -> tuple[list[int], list[int]] | None:
        ba, wa = self.pool.block_alloc, self.pool.window_alloc
        if ba.available < n_blocks or wa.available < n_windows:
            self.tree.evict(max(0, n_blocks - ba.available), max(0, n_windows - wa.available))
            if wa.available < n_windows and ba.available >= n_blocks:
                # resume states alone were not enough: evicting leaf blocks frees theirs too
                self.tree.evict(max(1, n_windows - wa.available), 0)
        if ba.available < n_blocks or wa.available < n_windows:
            return None
        return ba.alloc_or_raise(n_blocks), wa.alloc_or_raise(n_windows)

    def _ensure_pages(self, req: Req, end: int) -> bool:
        """Give ``req`` the pages for computing positions ``num_computed .. end - 1``."""
        need_blocks = -(-end // self.page_size) - len(req.block_pages)
        lo = max(0, (req.num_computed - self.window + 1) // self.window)
        spans = [k for k in range(lo, (end - 1) // self.window + 1) if k not in req.window_pages]
        got = self._alloc(max(0, need_blocks), len(spans))
        if got is None:
            return False
        blocks, wins = got
        req.block_pages.extend(blocks)
        req.window_pages.update(zip(spans, wins))
        return True

    def _release(self, req: Req) -> None:
        """Return every page ``req`` owns, unlock its radix path, free its slot."""
        own_blocks = req.block_pages[req.num_tree_blocks :]
        if own_blocks:
            self.pool.block_alloc.free(own_blocks)
        own_wins = [p for k, p in req.window_pages.items() if k not in req.tree_window_spans]
        if own_wins:
            self.pool.window_alloc.free(own_wins)
        if req.last_node is not None:
            self.tree.dec_lock_ref(req.last_node)
        if req.req_pool_idx is not None:
            self.pool.req_slots.free(req.req_pool_idx)
        req.block_pages, req.window_pages, req.tree_window_spans = [], {}, set()
        req.num_tree_blocks, req.last_node, req.req_pool_idx, req.num_computed = 0, None, None, 0

    def _finish(self, req: Req, reason: dict) -> None:
        req.finished_reason = reason
        if req in self.running:
            self.running.remove(req)
        try:
            self.waiting.remove(req)
        except ValueError:
            pass
        self._release(req)
        if req not in self.pending_outputs:
            self.pending_outputs.append(req)

    def _retract(self, req: Req) -> None:
        """Send a running request back to the queue front, keeping its outputs."""
        self.running.remove(req)
        self._release(req)
        req.cached_tokens = 0
        req.num_retractions += 1
        self.num_retractions += 1
        self.waiting.appendleft(req)
        logger.info("Retracted request %s (%d tokens) to free KV pages", req.rid, req.seq_len)

    def _admit(self, req: Req) -> bool:
        """Give a waiting request a slot and its prefix-cache hit."""
        slot = self.pool.req_slots.alloc()
        if slot is None:
            return False
        req.req_pool_idx = slot
        self.pool.reset_req_state(slot)
        fill = req.fill_ids
        max_len = len(fill) - 1
        if req.return_logprob and not req.input_logprobs_done and req.logprob_start_len >= 0:
            # the logprob of prompt token s comes from the logits at s - 1: keep that one uncached
            max_len = min(max_len, max(0, req.logprob_start_len - 1))
        m = self.tree.match_prefix(fill[:max_len])
        if m.num_tokens > 0 and m.window_page is not None:
            self.tree.inc_lock_ref(m.last_node)
            req.last_node = m.last_node
            req.block_pages = list(m.block_pages)
            req.num_tree_blocks = len(m.block_pages)
            span = (m.num_tokens - 1) // self.window
            req.window_pages = {span: m.window_page}
            req.tree_window_spans = {span}
            self.pool.load_resume_state(slot, m.window_page)
            req.num_computed = m.num_tokens
        req.cached_tokens = req.num_computed
        if req.num_retractions == 0:
            self.num_cached_tokens += req.num_computed
            self.tree.record_hit(len(req.origin_input_ids), req.num_computed)
        return True

    def _after_forward(self, req: Req, end: int) -> None:
        """Advance ``num_computed``, insert completed blocks into the tree, drop stale window pages."""
        req.num_computed = end
        ps, W = self.page_size, self.window
        nb_done = end // ps
        if nb_done > req.num_tree_blocks and not self.tree.disable:
            interval = max(1, int(getattr(self.tree, "resume_interval", 1)))
            wins: list[int | None] = []
            for b in range(nb_done):
                span = ((b + 1) * ps - 1) // W
                keep = b >= req.num_tree_blocks and (b + 1) % interval == 0 and span in req.window_pages
                wins.append(req.window_pages[span] if keep else None)
            tokens = req.fill_ids[: nb_done * ps]
            tb, tw = self.tree.insert(tokens, req.block_pages[:nb_done], wins)
            for b in range(req.num_tree_blocks, nb_done):
                if tb[b] != req.block_pages[b]:
                    self.pool.block_alloc.free([req.block_pages[b]])
                    req.block_pages[b] = tb[b]
                if wins[b] is not None:
                    span = ((b + 1) * ps - 1) // W
                    if tw[b] is not None and tw[b] != wins[b]:
                        self.pool.window_alloc.free([wins[b]])
                        req.window_pages[span] = tw[b]
                    if tw[b] is not None:
                        req.tree_window_spans.add(span)
                    else:  # not kept by the tree: it freed the page
                        del req.window_pages[span]
            node, nblocks = self.tree.find_node(tokens)
            self.tree.inc_lock_ref(node)
            if req.last_node is not None:
                self.tree.dec_lock_ref(req.last_node)
            req.last_node = node
            req.num_tree_blocks = nblocks
        # free window pages no longer in the sliding window of the next position
        lo = max(0, (end - W + 1) // W)
        stale = [k for k in req.window_pages if k < lo]
        for k in stale:
            p = req.window_pages.pop(k)
            if k in req.tree_window_spans:
                req.tree_window_spans.discard(k)
            else:
                self.pool.window_alloc.free([p])

    # ------------------------------------------------------------------ the step
    def _sort_waiting(self) -> None:
        policy = getattr(self.server_args, "schedule_policy", "fcfs")
        reqs = list(self.waiting)
        if getattr(self.server_args, "enable_priority_scheduling", False):
            reqs.sort(key=lambda r: (-r.priority, r.arrival))
        elif policy == "lpm" and not self.tree.disable and len(reqs) > 1:
            lens = {id(r): self.tree.match_prefix(r.fill_ids[:-1]).num_tokens for r in reqs}
            reqs.sort(key=lambda r: (-lens[id(r)], r.arrival))
        self.waiting = deque(reqs)

    def step(self) -> BatchTokenIDOut | None:
        """Schedule one mixed batch, run it, sample, and return the outputs with news."""
        batch: list[tuple[Req, int]] = []  # (req, end)
        # 1. decode: every running request whose prompt is done
        decoding = [r for r in self.running if r.remaining == 1]
        for req in list(decoding):
            if req not in self.running:
                continue
            while not self._ensure_pages(req, req.seq_len):
                victims = [r for r in self.running if r is not req and r not in [b[0] for b in batch]]
                if victims:
                    self._retract(max(victims, key=lambda r: r.arrival))
                    continue
                self._retract(req)
                break
            else:
                batch.append((req, req.seq_len))
        # 2. prefill: chunks of in-progress requests, then new ones
        budget = self.chunked_prefill_size
        for req in [r for r in self.running if r.remaining > 1]:
            if budget <= 0:
                break
            end = req.num_computed + min(req.remaining, budget)
            if self._ensure_pages(req, end):
                batch.append((req, end))
                budget -= end - req.num_computed
        self._sort_waiting()
        while self.waiting and budget > 0 and len(self.running) < self.max_running_requests:
            req = self.waiting[0]
            if not self._admit(req):
                break
            end = req.num_computed + min(req.remaining, budget)
            if not self._ensure_pages(req, end):
                self._release(req)
                break
            self.waiting.popleft()
            self.running.append(req)
            batch.append((req, end))
            budget -= end - req.num_computed
        if not batch:
            # Nothing could get pages even after eviction. Never hang: let the oldest running
            # request proceed alone (retract the others); if it is alone and still does not fit,
            # it can never fit, so fail it (likewise a waiting request with nothing running).
            too_small = finish_abort("The KV cache pool is too small for this request.", 400)
            if len(self.running) > 1:
                for r in sorted(self.running, key=lambda r: r.arrival)[1:]:
                    self._retract(r)
            elif self.running:
                self._finish(self.running[0], too_small)
            elif self.waiting:
                self._finish(self.waiting[0], too_small)
            return self._collect_outputs()
        self._run_batch(batch)
        return self._collect_outputs()

    def _run_batch(self, batch: list[tuple[Req, int]]) -> None:
        t0 = time.perf_counter()
        inputs = []
        prompt_done_flags = []
        for req, end in batch:
            p = req.num_computed
            n = end - p
            samples = end == req.seq_len
            ls = n - 1 if samples else n
            if not req.input_logprobs_done:
                first = max(req.logprob_start_len - 1, p)
                ls = min(ls, max(0, first - p))
            prompt_done_flags.append(samples)
            assert req.req_pool_idx is not None
            inputs.append(
                ReqForwardInput(
                    req.req_pool_idx, req.fill_ids[p:end], p, req.block_pages, req.window_pages, ls
                )
            )
        fb, logits = self.runner.forward(inputs)
        self.forward_ct += 1
        # split logits per request
        offs = [0]
        for c in fb.logits_counts:
            offs.append(offs[-1] + c)
        sample_rows, sample_reqs, scored = [], [], []
        for i, (req, end) in enumerate(batch):
            rows = logits[offs[i] : offs[i + 1]]
            p = req.num_computed
            if not req.input_logprobs_done and rows.shape[0] > 0:
                self._collect_input_logprobs(req, rows, p + fb.extend_lens[i] - rows.shape[0])
            if prompt_done_flags[i] and req.sampling_params.max_new_tokens == 0:
                scored.append(req)  # prompt scoring (max_new_tokens=0): done after prefill, no token
            elif prompt_done_flags[i]:
                sample_rows.append(rows[-1])
                sample_reqs.append(req)
            self._after_forward(req, end)
        for req in scored:
            self._finish(req, finish_length(0))
        if sample_reqs:
            self._sample(sample_reqs, torch.stack(sample_rows))
        dt = time.perf_counter() - t0
        self._tp_window.append((time.monotonic(), len(sample_reqs)))
        self._log_batch(batch, fb, dt)

    def _collect_input_logprobs(self, req: Req, rows: torch.Tensor, first_pos: int) -> None:
        """Logprobs of prompt tokens ``first_pos + 1 ..`` from logits rows at ``first_pos ..``."""
        L = len(req.origin_input_ids)
        lps = max(0, req.logprob_start_len)
        if lps == 0 and not req.input_logprob_buffer:
            req.input_logprob_buffer.append((None, req.origin_input_ids[0], None, None))
        lp = compute_logprobs(rows)
        k = req.top_logprobs_num
        tv = ti = None
        if k > 0:
            tv, ti = top_logprobs(lp, k)
        for j in range(rows.shape[0]):
            pos = first_pos + j + 1  # token whose logprob this row gives
            if pos >= L:
                break
            if pos < lps:
                continue
            tok = req.origin_input_ids[pos]
            req.input_logprob_buffer.append(
                (
                    float(lp[j, tok]),
                    tok,
                    tv[j].tolist() if tv is not None else None,
                    ti[j].tolist() if ti is not None else None,
                )
            )
        if first_pos + rows.shape[0] >= L - 1:
            req.input_logprobs_done = True
            req.pending_input_logprobs = req.input_logprob_buffer
            req.input_logprob_buffer = []

    def _sample(self, reqs: list[Req], logits: torch.Tensor) -> None:
        params = [r.sampling_params for r in reqs]
        grammars = [r.grammar for r in reqs] if any(r.grammar is not None for r in reqs) else None
        want_lp = any(r.return_logprob for r in reqs)
        out = sample(
            logits,
            params,
            [r.output_ids for r in reqs],
            [r.origin_input_ids for r in reqs],
            [r.generator for r in reqs],
            eos_token_ids=self.eos_ids,
            return_logprobs=want_lp,
            grammars=grammars,
        )
        if want_lp:
            ids, lps = out  # type: ignore[misc]
        else:
            ids, lps = out, None  # type: ignore[assignment]
        ids_list = ids.tolist()
        for i, req in enumerate(reqs):
            tok = int(ids_list[i])
            req.output_ids.append(tok)
            self.num_generated += 1
            if req.return_logprob and lps is not None:
                tv = ti = None
                if req.top_logprobs_num > 0:
                    v, ix = top_logprobs(lps[i : i + 1], req.top_logprobs_num)
                    tv, ti = v[0].tolist(), ix[0].tolist()
                req.pending_output_logprobs.append((float(lps[i, tok]), tok, tv, ti))
            if req.grammar is not None:
                req.grammar.accept(tok)
            # a request can never hold more than the pool: stop there (finish length) like at the
            # context end, rather than fail once nothing is left to retract
            limit = min(self.context_len, self.max_total_num_tokens)
            max_new = req.sampling_params.max_new_tokens_for(len(req.origin_input_ids), limit)
            reached = len(req.output_ids) >= max_new or req.seq_len >= limit
            reason = check_stop(req.output_ids, req.sampling_params, self.eos_ids, self.tokenizer, reached)
            if reason is None and req.grammar is not None and req.grammar.is_terminated():
                reason = {"type": "stop", "matched": tok}
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

    def _collect_outputs(self) -> BatchTokenIDOut | None:
        reqs = self.pending_outputs
        self.pending_outputs = []
        if not reqs:
            return None
        out = BatchTokenIDOut(
            rids=[],
            finished_reasons=[],
            decode_ids=[],
            read_offsets=[],
            output_ids=[],
            skip_special_tokens=[],
            no_stop_trim=[],
            prompt_tokens=[],
            completion_tokens=[],
            cached_tokens=[],
        )
        for r in reqs:
            sp = r.sampling_params
            out.rids.append(r.rid)
            out.finished_reasons.append(r.finished_reason)
            out.decode_ids.append(list(r.output_ids))
            out.read_offsets.append(0)
            out.output_ids.append(r.output_ids[r.sent_output_len :])
            r.sent_output_len = len(r.output_ids)
            out.skip_special_tokens.append(bool(getattr(sp, "skip_special_tokens", True)))
            out.spaces_between_special_tokens.append(bool(getattr(sp, "spaces_between_special_tokens", True)))
            out.no_stop_trim.append(bool(getattr(sp, "no_stop_trim", False)))
            out.prompt_tokens.append(len(r.origin_input_ids))
            out.completion_tokens.append(len(r.output_ids))
            out.cached_tokens.append(r.cached_tokens)
            out.retraction_counts.append(r.num_retractions)
            ilp, r.pending_input_logprobs = r.pending_input_logprobs, []
            olp, r.pending_output_logprobs = r.pending_output_logprobs, []
            out.input_token_logprobs_val.append([x[0] for x in ilp])
            out.input_token_logprobs_idx.append([x[1] for x in ilp])
            out.input_top_logprobs_val.append([x[2] for x in ilp] if r.top_logprobs_num else [])
            out.input_top_logprobs_idx.append([x[3] for x in ilp] if r.top_logprobs_num else [])
            out.output_token_logprobs_val.append([x[0] for x in olp])
            out.output_token_logprobs_idx.append([x[1] for x in olp])
            out.output_top_logprobs_val.append([x[2] for x in olp] if r.top_logprobs_num else [])
            out.output_top_logprobs_idx.append([x[3] for x in olp] if r.top_logprobs_num else [])
        return out

    # ------------------------------------------------------------------ logging / info
    def _log_batch(self, batch: list[tuple[Req, int]], fb: Any, dt: float) -> None:
        n_decode = sum(1 for n in fb.extend_lens if n == 1)
        n_prefill_tok = sum(n for n in fb.extend_lens if n > 1)
        stats = self.tree.stats() if hasattr(self.tree, "stats") else {}
        hit = stats.get("hit_tokens", 0)
        tot = max(1, stats.get("prompt_tokens", 0))
        now = time.monotonic()
        window = [x for x in self._tp_window if now - x[0] < 5.0]
        span = max(1e-3, now - window[0][0]) if len(window) > 1 else max(1e-3, dt)
        self.last_gen_throughput = sum(x[1] for x in window) / span
        if (
            n_prefill_tok
            or self.forward_ct % max(1, getattr(self.server_args, "decode_log_interval", 40)) == 0
        ):
            logger.info(
                "%s batch: #reqs %d (#decode %d), #prefill-tokens %d, cache hit rate %.1f%%, "
                "token usage %.2f, #running %d, #queue %d, gen throughput %.2f tok/s, %.1f ms",
                "Prefill" if n_prefill_tok else "Decode",
                len(batch),
                n_decode,
                n_prefill_tok,
                100.0 * hit / tot,
                self._token_usage(),
                len(self.running),
                len(self.waiting),
                self.last_gen_throughput,
                dt * 1e3,
            )

    def _token_usage(self) -> float:
        ba = self.pool.block_alloc
        return ba.used / max(1, ba.num_pages)

    def flush_cache(self) -> bool:
        """Empty the radix cache; refused (False) while requests are queued or running."""
        if self.waiting or self.running:
            return False
        return bool(self.tree.flush())

    def get_server_info(self) -> dict:
        """JSON-able runtime state: ``kv_pool`` pages per pool, ``radix_cache`` stats, limits."""
        sa = self.server_args
        info: dict[str, Any] = {
            "model_path": self.model_path,
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_running_requests": self.max_running_requests,
            "context_length": self.context_len,
            "page_size": self.page_size,
            "chunked_prefill_size": self.chunked_prefill_size,
            "device": str(self.runner.device),
            "dtype": str(self.runner.dtype).replace("torch.", ""),
            "kv_cache_dtype": getattr(sa, "kv_cache_dtype", "auto"),
            "disable_radix_cache": bool(sa.disable_radix_cache),
            "schedule_policy": getattr(sa, "schedule_policy", "fcfs"),
            "kv_pool": self.pool.stats(),
            "kv_pool_bytes": self.pool.memory_bytes(),
            "kv_plan": self.runner.kv_plan_info(),
            "radix_cache": self.tree.stats(),
            "num_running_reqs": len(self.running),
            "num_queue_reqs": len(self.waiting),
            "num_retractions": self.num_retractions,
        }
        return info

    def get_metrics(self) -> dict:
        st = self.tree.stats()
        hit, tot = st.get("hit_tokens", 0), st.get("prompt_tokens", 0)
        return {
            "num_running_reqs": len(self.running),
            "num_queue_reqs": len(self.waiting),
            "token_usage": self._token_usage(),
            "cache_hit_rate": (hit / tot) if tot else 0.0,
            "gen_throughput": self.last_gen_throughput,
            "num_retractions": self.num_retractions,
        }

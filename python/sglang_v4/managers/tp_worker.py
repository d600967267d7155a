"""The model worker: one :class:`ModelWorkerBatch` in, one :class:`GenerationBatchResult` out.

:meth:`TpModelWorker.forward_batch_generation` is the single call that runs a scheduled batch on
the model (SGLang's ``TpModelWorker``): it applies the slot-state writes of newly admitted
requests, runs the forward (future token ids resolved on the device), computes the prompt
logprobs that were asked for, samples the next tokens, writes them into the :class:`FutureMap`,
and starts the copies of what the scheduler needs back to the host. Everything it reads is in the
batch, so the scheduler may change its requests while the call runs (overlap scheduling runs it
in a worker thread, ``tp_worker_overlap_thread.py``). With tensor parallelism the runner's forward
broadcasts the step (inputs, slot-state writes, resolved future ids) to the other ranks, which run
the same forward; sampling stays here, on rank 0 (``model_runner.py``, docs/PARALLELISM.md).

On CUDA the call does not wait for the device: the host copies are asynchronous (pinned memory)
and the result carries an event (:meth:`GenerationBatchResult.wait`). The exception is sampling
that must read device values on the host (a grammar's dead-row check, top-p with an unbounded
top-k), which synchronises as it did before.

A device out-of-memory error inside the call is caught: the allocator's cache is emptied and the
result says ``error="oom"``; the scheduler then retracts or fails that batch's requests
(``scheduler.py``). Nothing the batch computed is used.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Any

import torch

from sglang_v4.managers.model_worker_batch import GenerationBatchResult, ModelWorkerBatch
from sglang_v4.model_executor.model_runner import ModelRunner, resolve_future_token_ids
from sglang_v4.sampling.sampler import (
    compute_logprobs,
    sample,
    token_ranks,
    top_logprobs,
    unconstrained_logprobs,
)

logger = logging.getLogger(__name__)


class FutureMap:
    """Slots for tokens sampled by a batch that the next batch already uses as input.

    The device buffer ``token_ids[size]`` (int64) receives every sampled token at its slot; a
    request's next input is the placeholder ``-(slot + 1)`` (``ScheduleBatch.mark_in_flight``)
    until the host learns the value
    (:func:`sglang_v4.model_executor.model_runner.resolve_future_token_ids`). Slots are handed out
    round-robin; at most three batches' tokens are alive at once (the one being processed, the one
    running, the one being built), so ``size = 3 * max_running_requests + 3`` never overwrites a
    live slot.

    Args:
        max_running_requests: most requests in one batch.
        device: where the buffer lives.
    """

    def __init__(self, max_running_requests: int, device: torch.device) -> None:
        self.size = 3 * int(max_running_requests) + 3
        self.token_ids = torch.zeros(self.size, dtype=torch.int64, device=device)
        self._next = 0

    def write(self, slots: list[int], ids: torch.Tensor) -> None:
        """Store ``ids[i]`` (``[n]`` int64 on the map's device) at slot ``slots[i]``. Slots that
        run consecutively (a batch's :meth:`alloc` that did not wrap: every decode step) are one
        slice copy, other lists an indexed copy."""
        n = len(slots)
        if not n:
            return
        a = slots[0]
        if slots[-1] - a == n - 1 and a + n <= self.size and slots == list(range(a, a + n)):
            self.token_ids[a : a + n].copy_(ids)
            return
        idx = torch.tensor(slots, dtype=torch.int64)
        if self.token_ids.device.type == "cuda":
            idx = idx.pin_memory().to(self.token_ids.device, non_blocking=True)
        self.token_ids.index_copy_(0, idx, ids)

    def alloc(self, n: int) -> list[int]:
        """``n`` consecutive (mod ``size``) slots."""
        start = self._next
        self._next = (start + n) % self.size
        if start + n <= self.size:
            return list(range(start, start + n))
        return [(start + i) % self.size for i in range(n)]


def _to_host(t: torch.Tensor | None) -> torch.Tensor | None:
    """Start copying ``t`` to the host (asynchronous from CUDA into pinned memory)."""
    if t is None or t.device.type == "cpu":
        return t
    return t.to("cpu", non_blocking=True)


class TpModelWorker:
    """Runs scheduled batches on a :class:`ModelRunner` (see the module docstring).

    Args:
        runner: the model runner (model, KV pool, CUDA graphs).
        eos_token_ids: the model's EOS ids (masked before ``min_new_tokens``).
        future_map: where sampled tokens go on the device.
    """

    def __init__(self, runner: ModelRunner, eos_token_ids: set[int], future_map: FutureMap) -> None:
        self.runner = runner
        self.device = runner.device
        self.eos_ids = eos_token_ids
        self.future_map = future_map

    def _upload(self, values: list[int]) -> torch.Tensor:
        t = torch.tensor(values, dtype=torch.int64)
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t

    def _force_thinking_end(
        self, wb: ModelWorkerBatch, x: torch.Tensor, ids: torch.Tensor, lps: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``thinking_token_budget``'s overrides of the sampled ids (``[R]`` int64 ``ids``, from
        the ``[R, V]`` logits ``x``): the ids the host forces
        (:attr:`SamplingBatchInfo.forced_token_ids`) and the conditional ones decided here on the
        device (:attr:`SamplingBatchInfo.forced_if_previous`: each row's previous token is its last
        input id, a future id resolved from the future map), without a host synchronisation.

        A forced row's logprobs (``lps``, ``[R, V]`` float32, or ``None``) become
        :func:`~sglang_v4.sampling.sampler.unconstrained_logprobs` of its logits where the row has
        a vocabulary mask or a grammar (elsewhere, ``logit_bias`` included, they are the same
        values already)."""
        si = wb.sampling
        assert si is not None
        R = len(si.rows)
        maybe = [False] * R  # rows that may be forced
        hit: torch.Tensor | None = None  # [R] bool: the row is forced
        if si.forced_token_ids is not None:
            forced = self._upload(si.forced_token_ids)
            hit = forced >= 0
            ids = torch.where(hit, forced, ids)
            maybe = [t >= 0 for t in si.forced_token_ids]
        if si.forced_if_previous is not None:
            fi = si.forced_if_previous
            prev = [wb.forward_inputs[r].input_ids[-1] for r in si.rows]
            t = self._upload(prev + [c for c, _ in fi] + [f for _, f in fi]).view(3, R)
            resolve_future_token_ids(t[0], self.future_map.token_ids)
            chit = (t[1] >= 0) & (t[0] == t[1])
            ids = torch.where(chit, t[2], ids)
            hit = chit if hit is None else hit | chit
            maybe = [m or c >= 0 for m, (c, _) in zip(maybe, fi)]
        if lps is None or hit is None:
            return ids, lps
        grammars = si.grammars
        rows = [
            j
            for j, p in enumerate(si.params)
            if maybe[j]
            and (
                p.allowed_token_ids
                or p.bad_words_ids
                or p.min_new_tokens > 0
                or (grammars is not None and grammars[j] is not None)
            )
        ]
        if rows:
            ix = self._upload(rows)
            own = unconstrained_logprobs(
                x.index_select(0, ix),
                [si.params[j] for j in rows],
                [si.output_ids[j] for j in rows],
                [si.prompt_ids[j] for j in rows],
            )
            lps = lps.index_copy(
                0, ix, torch.where(hit.index_select(0, ix)[:, None], own, lps.index_select(0, ix))
            )
        return ids, lps

    def forward_batch_generation(self, wb: ModelWorkerBatch) -> GenerationBatchResult:
        """Run ``wb``: forward, prompt logprobs, sampling, future-map write, host copies started.

        Returns:
            the result (call :meth:`GenerationBatchResult.wait` before reading it); on a device
            out-of-memory error one with ``error="oom"`` and nothing else.

        Raises:
            ValueError: bad runner inputs (a scheduler bug).
        """
        t0 = time.perf_counter()
        try:
            with torch.inference_mode():
                return self._run(wb, t0)
        except torch.OutOfMemoryError as e:
            logger.error("Out of device memory in a %s batch of %d requests: %s", wb.forward_mode.value,
                         len(wb.forward_inputs), str(e).splitlines()[0] if str(e) else "")  # fmt: skip
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            return GenerationBatchResult(None, None, {}, [], time.perf_counter() - t0, error="oom")

    def _run(self, wb: ModelWorkerBatch, t0: float) -> GenerationBatchResult:
        pool = self.runner.pool
        for op in wb.req_state_ops:
            op.apply(pool)
        _, logits = self.runner.forward(wb.forward_inputs, future_token_ids=self.future_map.token_ids)
        counts = wb.logits_counts
        all_one = counts.count(1) == len(counts)  # decode: one logits row per request
        offs = list(range(len(counts) + 1)) if all_one else list(itertools.accumulate(counts, initial=0))
        input_lps: list[Any] = [None] * len(wb.input_logprobs)
        wants = wb.input_logprobs
        for i, want in enumerate(wants if wants.count(None) != len(wants) else ()):
            if want is None or not want[0]:
                continue
            targets, k, tid, with_ranks = want
            lp = compute_logprobs(logits[offs[i] : offs[i] + len(targets)])
            vals = lp.gather(1, self._upload(targets)[:, None])[:, 0]
            tv = ti = None
            if k > 0:
                tv, ti = top_logprobs(lp, k)
            idv = lp.index_select(1, self._upload(tid)) if tid else None
            ranks = token_ranks(lp, vals) if with_ranks else None
            input_lps[i] = (_to_host(vals), _to_host(tv), _to_host(ti), _to_host(idv), _to_host(ranks))
        ids_host = tok_lp = None
        id_lps: list[Any] | None = None
        tops: dict[int, tuple[list[int], torch.Tensor, torch.Tensor]] = {}
        si = wb.sampling
        if si is not None:
            if all_one and len(si.rows) == logits.shape[0]:
                x = logits  # every row samples from its only logits row
            else:
                x = logits.index_select(0, self._upload([offs[i + 1] - 1 for i in si.rows]))
            want_lp = max(si.top_logprobs_nums) >= 0
            out = sample(
                x,
                si.params,
                si.output_ids,
                si.prompt_ids,
                si.generators,
                eos_token_ids=self.eos_ids,
                return_logprobs=want_lp,
                grammars=si.grammars,
                output_lens=si.output_lens,
                plain_greedy=si.plain_greedy,
            )
            ids, lps = out if want_lp else (out, None)  # type: ignore[misc]
            if si.forced_token_ids is not None or si.forced_if_previous is not None:
                ids, lps = self._force_thinking_end(wb, x, ids, lps)
            self.future_map.write(si.future_slots, ids)
            ids_host = _to_host(ids)
            if lps is not None:
                tok_lp = _to_host(lps.gather(1, ids[:, None])[:, 0])
                for k in sorted({k for k in si.top_logprobs_nums if k > 0}):
                    rows = [j for j, kk in enumerate(si.top_logprobs_nums) if kk == k]
                    v, ix = top_logprobs(lps.index_select(0, self._upload(rows)), k)
                    tops[k] = (rows, _to_host(v), _to_host(ix))  # type: ignore[assignment]
                if si.token_ids_logprobs is not None:
                    id_lps = [
                        None if t is None else _to_host(lps[j].index_select(0, self._upload(t)))
                        for j, t in enumerate(si.token_ids_logprobs)
                    ]
        done = None
        if self.device.type == "cuda":
            done = torch.cuda.Event()
            done.record()
        return GenerationBatchResult(
            next_token_ids=ids_host,
            next_token_logprobs=tok_lp,
            next_top_logprobs=tops,
            input_logprobs=input_lps,
            forward_time=time.perf_counter() - t0,
            copy_done=done,
            next_token_ids_logprobs=id_lps,
        )

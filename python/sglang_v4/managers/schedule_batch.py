"""What the scheduler runs in one step: ``ScheduleBatch`` (SGLang's).

The batch holds its requests (:class:`~sglang_v4.managers.req.Req`), each one's extend
range ``[prefix_len, prefix_len + extend_len)`` of ``fill_ids``, whether it samples a token after
the forward, and the first chunk position whose logits are needed (prompt logprobs). The ranges
are fixed when the batch is built, so a batch stays valid while the next one is being scheduled.
:meth:`ScheduleBatch.get_model_worker_batch` turns it into the one object the model worker runs
(:class:`ModelWorkerBatch`: runner inputs, sampling inputs, logprob requests), and the worker
answers with a :class:`GenerationBatchResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sglang_v4.managers.model_worker_batch import (
    ForwardMode,
    ModelWorkerBatch,
    SamplingBatchInfo,
)
from sglang_v4.model_executor.forward_batch_info import ReqForwardInput
from sglang_v4.sampling.thinking_budget import NOT_FORCED

if TYPE_CHECKING:
    from sglang_v4.managers.req import Req
    from sglang_v4.mem_cache.cache_manager import ReqStateOp


def _forced_token_ids(
    reqs: Sequence[Req], lens: Sequence[int]
) -> tuple[list[int] | None, list[tuple[int, int]] | None]:
    """Per sampling request, the id ``thinking_token_budget`` forces at output index ``lens[i]``
    or ``-1`` (:class:`~sglang_v4.sampling.thinking_budget.ThinkingBudgetState`), and the
    conditional force ``(C, F)`` decided on the device when the token before is still in flight
    (:meth:`~sglang_v4.sampling.thinking_budget.ThinkingBudgetState.forced_if_previous`) or
    ``(-1, -1)``; each list is ``None`` when no row has one. A request keeps its budget state
    after a reasoning section ends (a later ``<think>`` opens another, as vLLM's budget re-arms).
    The request's grammar wins: a forced id that it does not allow next is not forced and drops
    the budget (a grammar applied from the first token, e.g. ``json_schema`` on ``/generate``,
    has no reasoning block to close; forcing the id would abort the request); a request with a
    grammar never has a token in flight when its batch is built, so it gets no conditional force.
    A batch without budgets costs one comprehension over its requests."""
    rows = [i for i, r in enumerate(reqs) if r.thinking_budget is not None]
    if not rows:
        return None, None
    forced: list[int] | None = None
    cond: list[tuple[int, int]] | None = None
    for i in rows:
        r = reqs[i]
        tb = r.thinking_budget
        assert tb is not None
        t = tb.forced_token(lens[i], r.output_ids)
        if t >= 0 and r.grammar is not None and not r.grammar.allows(t):
            r.thinking_budget, t = None, NOT_FORCED
        if t >= 0:
            if forced is None:
                forced = [-1] * len(reqs)
            forced[i] = t
        elif r.grammar is None and (c := tb.forced_if_previous(lens[i], r.output_ids)) is not None:
            if cond is None:
                cond = [(-1, -1)] * len(reqs)
            cond[i] = c
    return forced, cond


def _token_ids_logprobs(reqs: Sequence[Req]) -> list[list[int] | None] | None:
    """Each request's ``token_ids_logprob`` when it returns logprobs (else ``None``), or ``None``
    when no request asks for any (the common case)."""
    ids = [r.token_ids_logprob if r.return_logprob else None for r in reqs]
    return None if ids.count(None) == len(ids) else ids


class FixedColumns:
    """Columns of per-request fields that never change, kept for the last list of requests.

    A decode step's batch and its outgoing message usually hold the same requests in the same order
    as the step before; their fixed fields (``Req.sampling_static``, ``Req.output_static``) are then
    copied from the last step's columns instead of transposed again. Requests compare by identity,
    so the test is one C-level pass over the list.
    """

    __slots__ = ("reqs", "columns")

    def __init__(self) -> None:
        self.reqs: list[Req] = []
        self.columns: list[list[Any]] = []

    def get(self, reqs: list[Req], rows: Callable[[list[Req]], list[tuple[Any, ...]]]) -> list[list[Any]]:
        """The columns of ``rows(reqs)`` (one tuple per request, transposed; ``reqs`` non-empty),
        each a new list. ``rows`` must give the same tuple for a request every time it is called."""
        if reqs != self.reqs:
            self.columns = list(map(list, zip(*rows(reqs))))
            self.reqs = list(reqs)
        return [list(c) for c in self.columns]


def _sampling_rows(reqs: list[Req]) -> list[tuple[Any, ...]]:
    return [r.sampling_static or r.freeze_sampling() for r in reqs]


@dataclass
class ScheduleBatch:
    """One scheduler step's batch (see the module docstring). Build it with :meth:`add`.

    Attributes (one entry per request, in batch order):
        reqs: the requests.
        prefix_lens: ``scheduled_len`` of each request when it was added (tokens already in KV or
            scheduled in a batch still running).
        extend_lens: tokens computed in this forward (``>= 1``).
        sample_flags: whether the request samples its next token from this forward's logits
            (its chunk reaches the end of ``fill_ids`` and its budget allows another token).
        logits_starts: chunk-relative index of the first token whose logits are needed
            (``extend_len - 1``: only the last one, for sampling; ``extend_len``: none).
        epochs: each request's ``num_retractions`` when it was added; a request retracted since
            (its pages returned) no longer owns the KV this batch computes.
        input_logprob_first: per request the position of its first logits row when the request
            still collects prompt logprobs, else ``None``.
        future_slots: future-map slot of each sampled token (set when the batch is launched).
        result_handle: the launched batch's pending result (:class:`ModelWorkerBatch` answer).
        discarded: ``id()`` of requests whose results in this batch are void (the batch they
            depended on failed).

    Per batch:
        admitted_hit_tokens: prefix-cache hit tokens (``cached_tokens``) of the requests first
            admitted in this batch (SGLang's ``batch.prefill_stats.log_hit_tokens``).
        admitted_prompt_tokens: the prompt tokens of those requests; the batch's cache hit rate
            is ``admitted_hit_tokens / admitted_prompt_tokens``, reported when its result is
            processed, so that a batch scheduled meanwhile (overlap) is not counted in it.
    """

    reqs: list[Req] = field(default_factory=list)
    prefix_lens: list[int] = field(default_factory=list)
    extend_lens: list[int] = field(default_factory=list)
    sample_flags: list[bool] = field(default_factory=list)
    logits_starts: list[int] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    input_logprob_first: list[int | None] = field(default_factory=list)
    future_slots: list[int] = field(default_factory=list)
    result_handle: Any = None
    discarded: set[int] = field(default_factory=set)
    admitted_hit_tokens: int = 0
    admitted_prompt_tokens: int = 0
    _members: set[int] = field(default_factory=set, repr=False)  # ids of reqs[:_members_upto]
    _members_upto: int = field(default=0, repr=False)

    def add(self, req: Req, end: int) -> None:
        """Add ``req`` extending ``fill_ids[scheduled_len:end]`` (its pages must be allocated).
        The request itself is unchanged until the batch is launched (:meth:`mark_in_flight`)."""
        p = req.scheduled_len
        n = end - p
        if not 0 < n <= req.remaining:
            raise ValueError(f"extend range [{p}, {end}) of {req.rid} is empty or past its tokens")
        samples = end == req.seq_len and req.num_outputs < req.max_new_tokens
        logits_start = n - 1 if samples else n
        lp_first = None
        if req.wants_input_logprobs:
            first = max(req.logprob_start_len, p)  # logits at s give token s + 1 (s: None)
            logits_start = min(logits_start, max(0, first - p))
            if logits_start < n:
                lp_first = p + logits_start
        self.reqs.append(req)
        self.prefix_lens.append(p)
        self.extend_lens.append(n)
        self.sample_flags.append(samples)
        self.logits_starts.append(logits_start)
        self.epochs.append(req.num_retractions)
        self.input_logprob_first.append(lp_first)

    def mark_in_flight(self, future_slots: list[int]) -> None:
        """The batch is launched: its ranges are in flight (``Req.num_inflight``) and each token it
        samples is a future (``Req.num_future``, ``Req.future_id``) in ``future_slots`` (one per
        sampling request, in batch order)."""
        self.future_slots = future_slots
        if len(future_slots) == len(self.reqs):  # every request samples (decode)
            for req, n, slot in zip(self.reqs, self.extend_lens, future_slots):
                req.num_inflight += n
                req.num_future += 1
                req.future_id = -(slot + 1)
            return
        k = 0
        for req, n, s in zip(self.reqs, self.extend_lens, self.sample_flags):
            req.num_inflight += n
            if s:
                req.num_future += 1
                req.future_id = -(future_slots[k] + 1)
                k += 1

    def __len__(self) -> int:
        return len(self.reqs)

    def add_decode(self, req: Req) -> None:
        """:meth:`add` for a request adding its one last token and sampling the next (the caller
        checked ``remaining == 1`` and the budget)."""
        self.add_decodes([req], [len(req.origin_input_ids) + len(req.output_ids) + req.num_future - 1])

    def add_decodes(self, reqs: list[Req], prefix_lens: list[int]) -> None:
        """:meth:`add_decode` for many requests at once (``prefix_lens[i]``: ``seq_len - 1`` of
        ``reqs[i]``): the hot path of a decode step, a few list extends for the whole batch."""
        k = len(reqs)
        self.reqs += reqs
        self.prefix_lens += prefix_lens
        self.extend_lens += [1] * k
        self.sample_flags += [True] * k
        self.logits_starts += [0] * k
        self.epochs += [r.num_retractions for r in reqs]
        self.input_logprob_first += [None if r.input_logprobs_done else p for r, p in zip(reqs, prefix_lens)]

    def __contains__(self, req: object) -> bool:
        reqs = self.reqs
        if self._members_upto < len(reqs):  # the ids of the requests added since the last test
            self._members.update(map(id, reqs[self._members_upto :]))
            self._members_upto = len(reqs)
        return id(req) in self._members

    @property
    def forward_mode(self) -> ForwardMode:
        """DECODE when every request adds one token it then samples from, EXTEND when none does,
        MIXED otherwise."""
        if self.extend_lens.count(1) == len(self.extend_lens) and all(self.sample_flags):
            return ForwardMode.DECODE
        decode = [n == 1 and s for n, s in zip(self.extend_lens, self.sample_flags)]
        if all(decode):
            return ForwardMode.DECODE
        return ForwardMode.MIXED if any(decode) else ForwardMode.EXTEND

    @property
    def logits_counts(self) -> list[int]:
        """Logits rows the forward returns per request (``extend_len - logits_start``)."""
        return [n - s for n, s in zip(self.extend_lens, self.logits_starts)]

    @property
    def num_decode_reqs(self) -> int:
        """Requests that add one token in this batch."""
        return sum(1 for n in self.extend_lens if n == 1)

    @property
    def num_extend_tokens(self) -> int:
        """Prompt tokens computed in this batch (chunks longer than one token)."""
        lens = self.extend_lens
        return 0 if lens.count(1) == len(lens) else sum(n for n in lens if n > 1)

    @property
    def needs_host_history(self) -> bool:
        """A request that samples here needs its token values on the host to sample its next
        token (:attr:`Req.needs_host_history`): the next batch waits for this one's result."""
        return any(s and r.needs_host_history for r, s in zip(self.reqs, self.sample_flags))

    def get_forward_inputs(self) -> list[ReqForwardInput]:
        """The model runner's per-request inputs (SGLang: ``get_model_worker_batch``).

        Each input holds the request's block-page list and window-page dict themselves: the cache
        manager appends block pages in place but replaces the list for any other change, and
        replaces the window dict for every change, so a batch in flight keeps the pages it was
        built with."""
        reqs = self.reqs
        slots = [r.req_pool_idx for r in reqs]
        if None in slots:
            raise AssertionError(f"{reqs[slots.index(None)].rid} has no request slot")
        out = []
        for req, slot, p, n, ls in zip(reqs, slots, self.prefix_lens, self.extend_lens, self.logits_starts):
            if n == 1:
                k = p - len(req.origin_input_ids)
                n_out = len(req.output_ids)
                if k == n_out and req.num_future == 1:
                    ids = [req.future_id]  # decode of the token the previous batch is sampling
                elif 0 <= k < n_out:
                    ids = [req.output_ids[k]]  # decode of a token the host knows
                else:
                    ids = req.token_ids(p, p + 1)
            else:
                ids = req.token_ids(p, p + n)
            out.append(ReqForwardInput(slot, ids, p, req.block_pages, req.window_pages, ls))
        return out

    def launch(
        self,
        req_state_ops: list[ReqStateOp],
        future_slots: list[int],
        sampling_columns: FixedColumns | None = None,
    ) -> ModelWorkerBatch:
        """:meth:`get_model_worker_batch` then :meth:`mark_in_flight` (``future_slots``: one per
        sampling request, in batch order): what launching the batch does to it and its requests.

        A decode batch (every request adds one token and samples; the hot path of a step) does
        both in one pass over its requests: each request's forward input and output length are
        read before the same request is marked in flight, so the result is the same as the two
        calls in turn. Its fixed sampling inputs come from ``sampling_columns`` (the scheduler's,
        kept from the last decode batch) when given."""
        self.future_slots = future_slots
        reqs = self.reqs
        B = len(reqs)
        if not (
            B
            and len(future_slots) == B
            and self.extend_lens.count(1) == B
            and self.input_logprob_first.count(None) == B
        ):
            wb = self.get_model_worker_batch(req_state_ops)
            self.mark_in_flight(future_slots)
            return wb
        if sampling_columns is None:
            sampling_columns = FixedColumns()
        params, gens, prompts, grammars, tops, hist, plain = sampling_columns.get(reqs, _sampling_rows)
        lens: list[int] = []
        inputs: list[ReqForwardInput] = []
        add_len, add_input = lens.append, inputs.append
        for req, p, ls, slot in zip(reqs, self.prefix_lens, self.logits_starts, future_slots):
            slot_idx = req.req_pool_idx
            if slot_idx is None:
                raise AssertionError(f"{req.rid} has no request slot")
            out = req.output_ids
            n_out = len(out)
            nf = req.num_future
            k = p - len(req.origin_input_ids)
            if k == n_out and nf == 1:
                ids = [req.future_id]  # decode of the token the previous batch is sampling
            elif 0 <= k < n_out:
                ids = [out[k]]  # decode of a token the host knows
            else:
                ids = req.token_ids(p, p + 1)
            add_len(n_out + nf)
            add_input(ReqForwardInput(slot_idx, ids, p, req.block_pages, req.window_pages, ls))
            # mark_in_flight for this request
            req.num_inflight += 1
            req.num_future = nf + 1
            req.future_id = -(slot + 1)
        sampling = SamplingBatchInfo(
            rows=list(range(B)),
            params=params,
            generators=gens,
            prompt_ids=prompts,
            output_ids=hist,
            output_lens=lens,
            grammars=grammars if grammars.count(None) != B else None,
            top_logprobs_nums=tops,
            future_slots=list(future_slots),
            plain_greedy=plain.count(True) == B,
            token_ids_logprobs=_token_ids_logprobs(reqs),
        )
        sampling.forced_token_ids, sampling.forced_if_previous = _forced_token_ids(reqs, lens)
        return ModelWorkerBatch(
            forward_mode=ForwardMode.DECODE,
            forward_inputs=inputs,
            logits_counts=[1] * B,
            sampling=sampling,
            input_logprobs=[None] * B,
            req_state_ops=req_state_ops,
        )

    def get_model_worker_batch(self, req_state_ops: list[ReqStateOp]) -> ModelWorkerBatch:
        """Everything the model worker needs to run this batch, fixed now (the requests change
        while it runs): runner inputs, the sampling inputs of the rows that sample (with the future
        slots their tokens go to, ``future_slots``), and the prompt-logprob targets. Call it before
        :meth:`mark_in_flight`."""
        sampling = None
        flags = self.sample_flags
        if all(flags):
            rows, sreqs = list(range(len(flags))), self.reqs
        else:
            rows = [i for i, s in enumerate(flags) if s]
            sreqs = [self.reqs[i] for i in rows]
        if rows:
            # the fixed inputs of each row in one pass, transposed into the per-row lists
            params, gens, prompts, grammars, tops, hist, plain = map(
                list, zip(*[r.sampling_static or r.freeze_sampling() for r in sreqs])
            )
            lens = [len(r.output_ids) + r.num_future for r in sreqs]
            sampling = SamplingBatchInfo(
                rows=rows,
                params=params,
                generators=gens,
                prompt_ids=prompts,
                output_ids=hist,
                output_lens=lens,
                grammars=grammars if grammars.count(None) != len(grammars) else None,
                top_logprobs_nums=tops,
                future_slots=list(self.future_slots),
                plain_greedy=plain.count(True) == len(plain),
                token_ids_logprobs=_token_ids_logprobs(sreqs),
            )
            sampling.forced_token_ids, sampling.forced_if_previous = _forced_token_ids(sreqs, lens)
        firsts = self.input_logprob_first
        input_lp: list[tuple[list[int], int, list[int] | None, bool] | None] = [None] * len(self.reqs)
        if firsts.count(None) != len(firsts):
            for i, (req, first, c) in enumerate(zip(self.reqs, firsts, self.logits_counts)):
                if first is not None:
                    targets = req.input_logprob_targets(first, c)
                    input_lp[i] = (
                        (targets, req.top_logprobs_num, req.token_ids_logprob, req.return_input_token_ranks)
                        if targets
                        else None
                    )
        return ModelWorkerBatch(
            forward_mode=self.forward_mode,
            forward_inputs=self.get_forward_inputs(),
            logits_counts=self.logits_counts,
            sampling=sampling,
            input_logprobs=input_lp,
            req_state_ops=req_state_ops,
        )

"""One request's state in the scheduler: ``Req`` (SGLang's).

A request's token sequence is ``fill_ids = origin_input_ids + output_ids``. ``num_computed`` of
them have their KV in the pool; a forward extends that by a chunk, and whenever the chunk reaches
the end of ``fill_ids`` the last position's logits sample the next token. Decode is the case of a
one-token chunk; a retracted request restarts at ``num_computed = 0`` (or its cache hit) and
re-computes ``fill_ids`` (prompt and the outputs it already streamed) before it continues.

With overlap scheduling the next batch is built while the previous one still runs, so a request
also counts what is *in flight*: ``num_inflight`` tokens scheduled in a launched batch whose KV is
not yet confirmed (``scheduled_len = num_computed + num_inflight`` is where its next chunk starts)
and ``num_future`` sampled tokens whose values the host does not know yet. The last of those is
named by ``future_id`` (a negative placeholder, resolved on the device from the future map; see
``managers/tp_worker.py``), so ``seq_len`` and ``token_ids`` already include it. Without
overlap both counters are back to 0 before the next batch is built.

Pages: ``block_pages[b]`` is the block page of logical block ``b``; ``window_pages[k]`` the window
page of positions ``W*k .. W*k + W - 1`` (``W`` = the sliding window, 128). Blocks
``< num_tree_blocks`` and the window pages in ``tree_window_spans`` belong to the radix cache
(protected by the lock on ``last_node``); the rest belong to the request and are freed when it
ends or is retracted. Only :class:`~sglang_v4.mem_cache.cache_manager.CacheManager` changes them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sglang_v4.mem_cache.radix_node import RadixKey
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.thinking_budget import ThinkingBudgetState

if TYPE_CHECKING:  # torch is imported where a tensor is made: the HTTP process never needs it
    import torch

    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
    from sglang_v4.managers.req_time_stats import ReqTimeStats

#: One position's logprob entry: ``(logprob, token_id, top_values, top_token_ids, token_ids_values,
#: rank)``; the logprob is ``None`` for the first prompt token, the top lists ``None`` without
#: ``top_logprobs_num``, ``token_ids_values`` (the logprobs of the request's ``token_ids_logprob``,
#: in its order) ``None`` without ``token_ids_logprob`` and for the first prompt token; ``rank``
#: (:func:`~sglang_v4.sampling.sampler.token_ranks`) only for prompt tokens of a request with
#: ``return_input_token_ranks``, else ``None``.
LogprobEntry = tuple[float | None, int, list[float] | None, list[int] | None, list[float] | None, int | None]


@dataclass(eq=False, slots=True)
class Req:
    """Scheduler-side request state (see the module docstring). Compared by identity.

    ``max_new_tokens`` is the effective generation budget (the request's own limit capped by the
    room left in the context and the KV pool), set when the scheduler accepts the request.
    """

    rid: str
    origin_input_ids: list[int]
    sampling_params: SamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    #: Token ids whose logprobs every returned position also reports (SGLang's
    #: ``token_ids_logprob``), or ``None``.
    token_ids_logprob: list[int] | None = None
    #: Prompt logprob entries also carry the token's vocabulary rank (vLLM's ``Logprob.rank``).
    return_input_token_ranks: bool = False
    stream: bool = False
    priority: int = 0
    #: The prefix-cache namespace (vLLM's ``cache_salt``, SGLang's ``extra_key``): the request
    #: shares cached blocks only with requests of the same one (None: the shared namespace).
    extra_key: str | None = None
    #: ``/health_generate``'s probe (:attr:`TokenizedGenerateReqInput.health_check`).
    health_check: bool = False
    arrival: float = field(default_factory=time.monotonic)
    #: The scheduler's count of prompt tokens batched so far when this request was queued
    #: (``--schedule-policy hrrn``'s aging clock).
    arrival_prefill_tokens: int = 0
    #: ``time.monotonic()`` when a step first found it running (``SGLANG_REQ_RUNNING_TIMEOUT``'s
    #: clock, :mod:`~sglang_v4.managers.request_timeouts`; stamped only while that limit is set).
    running_since: float | None = None
    output_ids: list[int] = field(default_factory=list)
    max_new_tokens: int = 0
    #: Token ids that end the request (EOS and ``stop_token_ids``, none with ``ignore_eos``) and
    #: whether stop strings / regexes are set: the scheduler's per-token finish check reads these.
    stop_token_set: frozenset[int] = frozenset()
    has_text_stops: bool = False
    #: First output index stop strings may match in (``-1``: dormant until the sampling params'
    #: ``stop_str_after_token_id`` is generated; :func:`~sglang_v4.sampling.stop_checker.stop_text_start`).
    stop_text_start: int = 0
    #: Set by the scheduler on admission: the finish check needs only ``stop_token_set`` and the
    #: budget (no grammar, no stop strings), and the request streams every token unless the
    #: server's ``--stream-interval`` says otherwise. ``False`` takes the general path.
    plain_tokens: bool = False
    stream_each: bool = False
    # KV bookkeeping (owned by the cache manager)
    req_pool_idx: int | None = None
    num_computed: int = 0
    num_inflight: int = 0
    num_future: int = 0
    future_id: int = 0
    block_pages: list[int] = field(default_factory=list)
    window_pages: dict[int, int] = field(default_factory=dict)
    num_tree_blocks: int = 0
    tree_window_spans: set[int] = field(default_factory=set)
    last_node: Any = None
    cached_tokens: int = 0
    # outputs
    finished_reason: dict | None = None
    generator: torch.Generator | None = None
    grammar: Any = None
    #: ``thinking_token_budget``'s state (:mod:`sglang_v4.sampling.thinking_budget`), set on
    #: admission for a request with a budget; ``None`` when nothing is bounded.
    thinking_budget: ThinkingBudgetState | None = None
    num_retractions: int = 0
    num_oom_errors: int = 0
    #: Stage stamps (:mod:`sglang_v4.managers.req_time_stats`); ``None`` unless the server records
    #: them (``--enable-metrics`` or ``--enable-request-time-stats-logging``).
    time_stats: ReqTimeStats | None = None
    sent_output_len: int = 0
    input_logprobs_done: bool = False
    pending_input_logprobs: list[LogprobEntry] = field(default_factory=list)
    pending_output_logprobs: list[LogprobEntry] = field(default_factory=list)
    input_logprob_buffer: list[LogprobEntry] = field(default_factory=list)
    #: Chained hashes of the prompt's whole ``page_size`` blocks in its cache namespace (set by
    #: the scheduler on arrival when the radix cache is on; ``prefix_sharing.prompt_block_hashes``):
    #: the keys of in-batch prefix sharing (``Scheduler._add_prefill_reqs``).
    block_hashes: tuple[int, ...] = field(init=False, default=())
    #: Sampling reads the output history: repetition / frequency / presence penalties, or a bad
    #: word of two or more tokens (banned after its first tokens, ``sampling/token_masks.py``).
    penalised: bool = field(init=False, default=False)

    #: What every output message carries of the request and never changes:
    #: ``(rid, skip_special_tokens, spaces_between_special_tokens, no_stop_trim, prompt tokens,
    #: stop_str_after_token_id, min_new_tokens of a request with stop strings / regexes else 0)``.
    output_static: tuple[str, bool, bool, bool, int, int | None, int] = field(
        init=False, default=("", True, True, False, 0, None, 0)
    )
    #: The sampling inputs that never change once the request is queued, as
    #: :meth:`ScheduleBatch.get_model_worker_batch` reads them (:meth:`freeze_sampling`).
    sampling_static: tuple[Any, ...] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        sp = self.sampling_params
        self.penalised = (
            sp.repetition_penalty != 1.0
            or sp.frequency_penalty != 0.0
            or sp.presence_penalty != 0.0
            or any(len(seq) > 1 for seq in sp.bad_words_ids or ())
        )
        self.output_static = (
            self.rid,
            bool(sp.skip_special_tokens),
            bool(sp.spaces_between_special_tokens),
            bool(sp.no_stop_trim),
            len(self.origin_input_ids),
            sp.stop_str_after_token_id,
            sp.min_new_tokens if (sp.stop_strs or sp.stop or sp.stop_regex_strs or sp.stop_regex) else 0,
        )

    def freeze_sampling(self) -> tuple[Any, ...]:
        """``(sampling_params, generator, prompt ids, grammar, top_logprobs_num or -1, output
        history, plain greedy)``, computed at the request's first batch (the scheduler attaches the
        generator and the grammar when it queues the request, before) and kept in
        :attr:`sampling_static`. The history is ``output_ids`` itself (a list only ever appended
        to) when sampling reads it (penalties, grammar), else ``()``. *Plain greedy*: the sampler
        takes the argmax of the raw logits (greedy, no penalty, logit bias, vocabulary constraint,
        ``min_new_tokens`` or grammar; :attr:`SamplingBatchInfo.plain_greedy`)."""
        sp = self.sampling_params
        self.sampling_static = (
            sp,
            self.generator,
            self.origin_input_ids,
            self.grammar,
            self.top_logprobs_num if self.return_logprob else -1,
            self.output_ids if self.penalised or self.grammar is not None else (),
            sp.is_greedy
            and not self.penalised
            and not sp.logit_bias
            and not sp.allowed_token_ids
            and not sp.bad_words_ids
            and sp.min_new_tokens <= 0
            and self.grammar is None,
        )
        return self.sampling_static

    @classmethod
    def from_tokenized(cls, recv: TokenizedGenerateReqInput) -> Req:
        """The scheduler's state for a request from the tokenizer manager (nothing validated)."""
        return cls(
            rid=recv.rid,
            origin_input_ids=list(recv.input_ids),
            sampling_params=recv.sampling_params,
            return_logprob=bool(recv.return_logprob),
            logprob_start_len=int(recv.logprob_start_len if recv.logprob_start_len is not None else -1),
            top_logprobs_num=int(recv.top_logprobs_num or 0),
            token_ids_logprob=list(recv.token_ids_logprob) if recv.token_ids_logprob else None,
            return_input_token_ranks=bool(recv.return_input_token_ranks),
            stream=bool(recv.stream),
            priority=int(recv.priority or 0),
            extra_key=recv.extra_key or None,
            health_check=bool(recv.health_check),
        )

    @property
    def fill_ids(self) -> list[int]:
        """Prompt ids followed by the output ids (a new list)."""
        return self.origin_input_ids + self.output_ids

    def cache_key(self, end: int) -> list[int] | RadixKey:
        """The radix-cache key of ``token_ids(0, end)``: the ids, in the request's namespace
        (:class:`~sglang_v4.mem_cache.radix_node.RadixKey`) when it has an ``extra_key``."""
        ids = self.token_ids(0, end)
        return RadixKey(ids, self.extra_key) if self.extra_key else ids

    def token_ids(self, start: int, end: int) -> list[int]:
        """``fill_ids[start:end]`` without building the whole list (O(end - start)). A range that
        reaches the sampled token still in flight ends with its placeholder ``future_id``."""
        n = len(self.origin_input_ids)
        if end <= n:
            return self.origin_input_ids[start:end]
        known = n + len(self.output_ids)
        if end > known:
            if self.num_future != 1 or end != known + 1:
                raise ValueError(f"{self.rid}: tokens [{start}, {end}) are not known yet")
            return self.token_ids(start, known) + [self.future_id] if start < known else [self.future_id]
        if start >= n:
            return self.output_ids[start - n : end - n]
        return self.origin_input_ids[start:] + self.output_ids[: end - n]

    @property
    def seq_len(self) -> int:
        """Tokens of the sequence, the sampled ones still in flight included."""
        return len(self.origin_input_ids) + len(self.output_ids) + self.num_future

    @property
    def num_outputs(self) -> int:
        """Output tokens sampled so far (in flight included): what ``max_new_tokens`` bounds."""
        return len(self.output_ids) + self.num_future

    @property
    def scheduled_len(self) -> int:
        """Where the next chunk starts: computed tokens plus those scheduled in a running batch."""
        return self.num_computed + self.num_inflight

    @property
    def remaining(self) -> int:
        """Tokens of the sequence not yet computed nor scheduled."""
        return self.seq_len - self.num_computed - self.num_inflight

    @property
    def needs_host_history(self) -> bool:
        """Sampling this request needs the host values of its previous tokens (a grammar's mask,
        repetition / frequency / presence penalties, multi-token bad words, or the step before the
        first token ``thinking_token_budget`` may force): its step cannot overlap the one before."""
        if self.grammar is not None or self.penalised:
            return True
        tb = self.thinking_budget
        return tb is not None and tb.needs_host_history(
            len(self.output_ids) + self.num_future, self.output_ids
        )

    @property
    def finished(self) -> bool:
        """A finish reason is set (stop, length or abort)."""
        return self.finished_reason is not None

    @property
    def wants_input_logprobs(self) -> bool:
        """Prompt logprobs are asked for and not all computed yet."""
        return not self.input_logprobs_done

    def max_prefix_len(self) -> int:
        """How many leading tokens of ``fill_ids`` a prefix-cache hit may cover.

        At most ``seq_len - 1`` (the last token is always computed: its logits sample the next
        one); with prompt logprobs from ``logprob_start_len = s`` at most ``s`` (SGLang's
        ``Req._compute_max_prefix_len``): the logprobs returned are those of tokens ``s + 1 ..``,
        from the logits at positions ``s ..``; token ``s`` itself is reported with value ``None``.
        """
        max_len = self.seq_len - 1
        if self.return_logprob and not self.input_logprobs_done and self.logprob_start_len >= 0:
            max_len = min(max_len, self.logprob_start_len)
        return max_len

    def add_input_logprobs(self, rows: torch.Tensor, first_pos: int) -> None:
        """Record prompt logprobs from logits ``rows`` (``[k, vocab]`` float32) of positions
        ``first_pos .. first_pos + k - 1``: row ``j`` gives the logprob of prompt token
        ``first_pos + j + 1``. Positions before ``logprob_start_len`` are skipped; when the last
        prompt token is covered the entries move to ``pending_input_logprobs`` (sent once)."""
        import torch

        from sglang_v4.sampling.sampler import compute_logprobs, token_ranks, top_logprobs

        lp = compute_logprobs(rows)
        targets = self.input_logprob_targets(first_pos, rows.shape[0])
        idx = torch.tensor(targets, dtype=torch.long, device=lp.device)
        val_t = lp[: len(targets)].gather(1, idx[:, None])[:, 0]
        vals = val_t.tolist() if targets else []
        tops = None
        if self.top_logprobs_num > 0 and targets:
            tv, ti = top_logprobs(lp[: len(targets)], self.top_logprobs_num)
            tops = (tv.tolist(), ti.tolist())
        id_vals = None
        if self.token_ids_logprob and targets:
            id_vals = lp[: len(targets)][:, self.token_ids_logprob].tolist()
        ranks = None
        if self.return_input_token_ranks and targets:
            ranks = token_ranks(lp[: len(targets)], val_t).tolist()
        self.add_input_logprob_entries(first_pos, rows.shape[0], vals, tops, id_vals, ranks)

    def input_logprob_targets(self, first_pos: int, num_rows: int) -> list[int]:
        """Prompt tokens whose logprobs ``num_rows`` logits rows from position ``first_pos`` give
        (row ``j`` gives token ``first_pos + j + 1``; rows past the prompt give none)."""
        L = len(self.origin_input_ids)
        return self.origin_input_ids[first_pos + 1 : min(L, first_pos + 1 + num_rows)]

    def add_input_logprob_entries(
        self,
        first_pos: int,
        num_rows: int,
        vals: list[float],
        tops: tuple[list[list[float]], list[list[int]]] | None,
        id_vals: list[list[float]] | None = None,
        ranks: list[int] | None = None,
    ) -> None:
        """Record prompt logprobs computed by the model worker: ``vals[j]`` is the logprob of
        :meth:`input_logprob_targets` ``[j]`` (and ``tops`` its top-``top_logprobs_num`` values and
        ids; ``id_vals`` the logprobs of ``token_ids_logprob``; ``ranks`` its vocabulary rank, with
        ``return_input_token_ranks``).

        SGLang's shape (``SchedulerLogprobResultProcessor``: ``[None] + input_token_logprobs[:-1]``):
        with ``logprob_start_len = s`` there is one entry per prompt token ``s .. L - 1``, and the
        entry of token ``s`` has value ``None`` (and ``None`` top / token-id logprobs) for every
        ``s``, not only ``s == 0``: its logits at ``s - 1`` are not computed. Rows giving tokens at
        or before ``s`` are skipped; once the logits of ``num_rows`` rows from ``first_pos`` reach
        the last prompt token the entries move to ``pending_input_logprobs`` (sent once)."""
        L = len(self.origin_input_ids)
        lps = max(0, self.logprob_start_len)
        if not self.input_logprob_buffer:
            self.input_logprob_buffer.append((None, self.origin_input_ids[lps], None, None, None, None))
        for j, v in enumerate(vals):
            pos = first_pos + j + 1  # token whose logprob this row gives
            if pos <= lps:
                continue
            self.input_logprob_buffer.append(
                (
                    v,
                    self.origin_input_ids[pos],
                    tops[0][j] if tops is not None else None,
                    tops[1][j] if tops is not None else None,
                    id_vals[j] if id_vals is not None else None,
                    ranks[j] if ranks is not None else None,
                )
            )
        if first_pos + num_rows >= L - 1:
            self.input_logprobs_done = True
            self.pending_input_logprobs = self.input_logprob_buffer
            self.input_logprob_buffer = []

    def take_new_outputs(self) -> tuple[list[int], list[LogprobEntry], list[LogprobEntry]]:
        """Output ids, prompt logprob entries and output logprob entries not sent yet; marks
        them sent (the next call returns only what is produced after this one)."""
        new_ids = self.output_ids[self.sent_output_len :]
        self.sent_output_len = len(self.output_ids)
        ilp, self.pending_input_logprobs = self.pending_input_logprobs, []
        olp, self.pending_output_logprobs = self.pending_output_logprobs, []
        return new_ids, ilp, olp

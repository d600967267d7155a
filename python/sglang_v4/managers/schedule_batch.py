"""What the scheduler schedules: ``Req`` (one request's state) and ``ScheduleBatch`` (one step).

Req
---
A request's token sequence is ``fill_ids = origin_input_ids + output_ids``. ``num_computed`` of
them have their KV in the pool; a forward extends that by a chunk, and whenever the chunk reaches
the end of ``fill_ids`` the last position's logits sample the next token. Decode is the case of a
one-token chunk; a retracted request restarts at ``num_computed = 0`` (or its cache hit) and
re-computes ``fill_ids`` (prompt and the outputs it already streamed) before it continues.

Pages: ``block_pages[b]`` is the block page of logical block ``b``; ``window_pages[k]`` the window
page of positions ``W*k .. W*k + W - 1`` (``W`` = the sliding window, 128). Blocks
``< num_tree_blocks`` and the window pages in ``tree_window_spans`` belong to the radix cache
(protected by the lock on ``last_node``); the rest belong to the request and are freed when it
ends or is retracted. Only :class:`~sglang_v4.mem_cache.cache_manager.CacheManager` changes them.

ScheduleBatch
-------------
The batch one scheduler step runs (SGLang's ``ScheduleBatch``): its requests, each one's extend
range ``[prefix_len, prefix_len + extend_len)`` of ``fill_ids``, whether it samples a token after
the forward, and the first chunk position whose logits are needed (prompt logprobs). The ranges
are fixed when the batch is built, so a batch stays valid while the next one is being scheduled.
:meth:`ScheduleBatch.get_forward_inputs` turns it into the model runner's per-request inputs.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from sglang_v4.model_executor.forward_batch import ReqForwardInput
from sglang_v4.sampling.sampler import compute_logprobs, top_logprobs
from sglang_v4.sampling.sampling_params import SamplingParams

if TYPE_CHECKING:
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput

#: One position's logprob entry: ``(logprob, token_id, top_values, top_token_ids)``; the logprob
#: is ``None`` for the first prompt token, the top lists ``None`` without ``top_logprobs_num``.
LogprobEntry = tuple[float | None, int, list[float] | None, list[int] | None]


@dataclass(eq=False)
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
    stream: bool = False
    priority: int = 0
    arrival: float = field(default_factory=time.monotonic)
    output_ids: list[int] = field(default_factory=list)
    max_new_tokens: int = 0
    # KV bookkeeping (owned by the cache manager)
    req_pool_idx: int | None = None
    num_computed: int = 0
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
    num_retractions: int = 0
    sent_output_len: int = 0
    input_logprobs_done: bool = False
    pending_input_logprobs: list[LogprobEntry] = field(default_factory=list)
    pending_output_logprobs: list[LogprobEntry] = field(default_factory=list)
    input_logprob_buffer: list[LogprobEntry] = field(default_factory=list)

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
            stream=bool(recv.stream),
            priority=int(recv.priority or 0),
        )

    @property
    def fill_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    def token_ids(self, start: int, end: int) -> list[int]:
        """``fill_ids[start:end]`` without building the whole list (O(end - start))."""
        n = len(self.origin_input_ids)
        if end <= n:
            return self.origin_input_ids[start:end]
        if start >= n:
            return self.output_ids[start - n : end - n]
        return self.origin_input_ids[start:] + self.output_ids[: end - n]

    @property
    def seq_len(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def remaining(self) -> int:
        """Tokens of ``fill_ids`` whose KV is not yet computed."""
        return self.seq_len - self.num_computed

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    @property
    def wants_input_logprobs(self) -> bool:
        """Prompt logprobs are asked for and not all computed yet."""
        return not self.input_logprobs_done

    def max_prefix_len(self) -> int:
        """How many leading tokens of ``fill_ids`` a prefix-cache hit may cover.

        At most ``seq_len - 1`` (the last token is always computed: its logits sample the next
        one); with prompt logprobs from ``logprob_start_len = s`` at most ``s - 1``, because the
        logprob of prompt token ``s`` comes from the logits at position ``s - 1``.
        """
        max_len = self.seq_len - 1
        if self.return_logprob and not self.input_logprobs_done and self.logprob_start_len >= 0:
            max_len = min(max_len, max(0, self.logprob_start_len - 1))
        return max_len

    def add_input_logprobs(self, rows: torch.Tensor, first_pos: int) -> None:
        """Record prompt logprobs from logits ``rows`` (``[k, vocab]`` float32) of positions
        ``first_pos .. first_pos + k - 1``: row ``j`` gives the logprob of prompt token
        ``first_pos + j + 1``. Positions before ``logprob_start_len`` are skipped; when the last
        prompt token is covered the entries move to ``pending_input_logprobs`` (sent once)."""
        L = len(self.origin_input_ids)
        lps = max(0, self.logprob_start_len)
        if lps == 0 and not self.input_logprob_buffer:
            self.input_logprob_buffer.append((None, self.origin_input_ids[0], None, None))
        lp = compute_logprobs(rows)
        k = self.top_logprobs_num
        tv = ti = None
        if k > 0:
            tv, ti = top_logprobs(lp, k)
        for j in range(rows.shape[0]):
            pos = first_pos + j + 1  # token whose logprob this row gives
            if pos >= L:
                break
            if pos < lps:
                continue
            tok = self.origin_input_ids[pos]
            self.input_logprob_buffer.append(
                (
                    float(lp[j, tok]),
                    tok,
                    tv[j].tolist() if tv is not None else None,
                    ti[j].tolist() if ti is not None else None,
                )
            )
        if first_pos + rows.shape[0] >= L - 1:
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


class ForwardMode(enum.Enum):
    """What a batch computes (SGLang's ``ForwardMode`` names)."""

    EXTEND = "extend"  # prompt chunks only
    DECODE = "decode"  # one new token per request
    MIXED = "mixed"  # prompt chunks and decode tokens together


@dataclass
class ScheduleBatch:
    """One scheduler step's batch (see the module docstring). Build it with :meth:`add`.

    Attributes (one entry per request, in batch order):
        reqs: the requests.
        prefix_lens: ``num_computed`` of each request when it was added (tokens already in KV).
        extend_lens: tokens computed in this forward (``>= 1``).
        sample_flags: whether the request samples its next token from this forward's logits
            (its chunk reaches the end of ``fill_ids`` and its budget allows another token).
        logits_starts: chunk-relative index of the first token whose logits are needed
            (``extend_len - 1``: only the last one, for sampling; ``extend_len``: none).
    """

    reqs: list[Req] = field(default_factory=list)
    prefix_lens: list[int] = field(default_factory=list)
    extend_lens: list[int] = field(default_factory=list)
    sample_flags: list[bool] = field(default_factory=list)
    logits_starts: list[int] = field(default_factory=list)
    _members: set[int] = field(default_factory=set, repr=False)

    def add(self, req: Req, end: int) -> None:
        """Add ``req`` extending ``fill_ids[num_computed:end]`` (its pages must be allocated)."""
        p = req.num_computed
        n = end - p
        if not 0 < n <= req.remaining:
            raise ValueError(f"extend range [{p}, {end}) of {req.rid} is empty or past its tokens")
        samples = end == req.seq_len and len(req.output_ids) < req.max_new_tokens
        logits_start = n - 1 if samples else n
        if req.wants_input_logprobs:
            first = max(req.logprob_start_len - 1, p)
            logits_start = min(logits_start, max(0, first - p))
        self.reqs.append(req)
        self.prefix_lens.append(p)
        self.extend_lens.append(n)
        self.sample_flags.append(samples)
        self.logits_starts.append(logits_start)
        self._members.add(id(req))

    def __len__(self) -> int:
        return len(self.reqs)

    def __contains__(self, req: object) -> bool:
        return id(req) in self._members

    @property
    def forward_mode(self) -> ForwardMode:
        """DECODE when every request adds one token it then samples from, EXTEND when none does,
        MIXED otherwise."""
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
        return sum(1 for n in self.extend_lens if n == 1)

    @property
    def num_extend_tokens(self) -> int:
        """Prompt tokens computed in this batch (chunks longer than one token)."""
        return sum(n for n in self.extend_lens if n > 1)

    def get_forward_inputs(self) -> list[ReqForwardInput]:
        """The model runner's per-request inputs (SGLang: ``get_model_worker_batch``)."""
        out = []
        for req, p, n, ls in zip(self.reqs, self.prefix_lens, self.extend_lens, self.logits_starts):
            assert req.req_pool_idx is not None, f"{req.rid} has no request slot"
            out.append(
                ReqForwardInput(
                    req.req_pool_idx, req.token_ids(p, p + n), p, req.block_pages, req.window_pages, ls
                )
            )
        return out


@dataclass
class GenerationBatchResult:
    """What :meth:`Scheduler.run_batch` returns for a :class:`ScheduleBatch`.

    Attributes:
        logits: per request of the batch, its logits rows ``[logits_count, vocab]`` float32.
        next_token_ids: per request that samples (batch order), the sampled token id.
        next_token_logprobs: ``[num_sampled, vocab]`` float32 output logprobs of the sampled rows
            when a sampled request asked for logprobs, else ``None``.
        forward_time: seconds spent in forward and sampling.
    """

    logits: list[torch.Tensor]
    next_token_ids: list[int]
    next_token_logprobs: torch.Tensor | None
    forward_time: float

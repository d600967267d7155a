"""What the scheduler hands the model worker for one batch and what it gets back.

:class:`ModelWorkerBatch` (SGLang's name) is one batch as the model worker runs it, built by
:meth:`~sglang_v4.managers.schedule_batch.ScheduleBatch.get_model_worker_batch`: the runner's
per-request inputs, the sampling inputs (:class:`SamplingBatchInfo`) and the prompt-logprob
targets, fixed when it is built. The worker answers with a :class:`GenerationBatchResult`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from sglang_v4.mem_cache.cache_manager import ReqStateOp
    from sglang_v4.model_executor.forward_batch_info import ReqForwardInput
    from sglang_v4.sampling.sampling_params import SamplingParams


class ForwardMode(enum.Enum):
    """What a batch computes (SGLang's ``ForwardMode`` names)."""

    EXTEND = "extend"  # prompt chunks only
    DECODE = "decode"  # one new token per request
    MIXED = "mixed"  # prompt chunks and decode tokens together


@dataclass
class SamplingBatchInfo:
    """Sampling inputs of the requests that sample from a batch (SGLang's name), in batch order.

    Attributes:
        rows: their indices in the batch (whose last logits row they sample from).
        params / generators / grammars: per row, as :func:`sglang_v4.sampling.sampler.sample`.
        prompt_ids: prompt ids per row (repetition penalty).
        output_ids: the output history per row when its sampling reads it (penalties, grammar;
            those batches never overlap the previous one), else ``()``.
        output_lens: tokens generated before this one per row (``min_new_tokens``).
        top_logprobs_nums: ``-1``: no output logprob; ``0``: the token's logprob; ``k``: also the
            top ``k``.
        future_slots: future-map slot that receives each row's token.
        plain_greedy: every row is greedy without penalties, logit bias, vocabulary constraints,
            ``min_new_tokens`` or grammar (``Req.freeze_sampling``): the sampler takes the argmax of the raw logits
            without its per-row checks (:func:`sglang_v4.sampling.sampler.sample`); ``False``
            makes no claim.
        token_ids_logprobs: per row, the token ids whose logprobs it also returns
            (``token_ids_logprob``) or ``None``; ``None`` when no row asks.
        forced_token_ids: per row, the id that replaces the sampled one (the think-end token of
            ``thinking_token_budget``, :mod:`sglang_v4.sampling.thinking_budget`) or ``-1``;
            ``None`` when no row is forced. A forced row's logprobs are computed without the
            vocabulary masks (:func:`sglang_v4.sampling.sampler.unconstrained_logprobs`).
        forced_if_previous: per row ``(C, F)``: when the row's previous token (its last input id,
            resolved on the device from the future map) is ``C``, the sampled id becomes ``F``
            (``thinking_token_budget`` 0 outside a reasoning section, where the think-start that
            opens one may still be in flight:
            :meth:`~sglang_v4.sampling.thinking_budget.ThinkingBudgetState.forced_if_previous`);
            ``(-1, -1)`` for the other rows; ``None`` when no row has one. A row that it forces
            gets the forced row's logprobs.
    """

    rows: list[int]
    params: list[SamplingParams]
    generators: list[torch.Generator | None]
    prompt_ids: list[list[int]]
    output_ids: list[Sequence[int]]
    output_lens: list[int]
    grammars: list[Any] | None
    top_logprobs_nums: list[int]
    future_slots: list[int]
    plain_greedy: bool = False
    token_ids_logprobs: list[list[int] | None] | None = None
    forced_token_ids: list[int] | None = None
    forced_if_previous: list[tuple[int, int]] | None = None


@dataclass
class ModelWorkerBatch:
    """One batch as the model worker runs it, in a single call (SGLang's ``ModelWorkerBatch``):
    nothing in it changes after it is built.

    Attributes:
        forward_mode: extend / decode / mixed.
        forward_inputs: per request, the runner's :class:`ReqForwardInput`; a decode token that is
            still being sampled by the previous batch is a negative future id.
        logits_counts: logits rows per request (``forward_inputs`` order).
        sampling: the rows that sample, or ``None``.
        input_logprobs: per request ``(target token ids, top_logprobs_num, token_ids_logprob or
            None, return_input_token_ranks)`` when its first logits rows give prompt logprobs (row
            ``j`` for target ``j``), else ``None``.
        req_state_ops: compressor-state resets / resume-state loads of newly admitted request
            slots, applied before the forward (``mem_cache.cache_manager.ReqStateOp``).
    """

    forward_mode: ForwardMode
    forward_inputs: list[ReqForwardInput]
    logits_counts: list[int]
    sampling: SamplingBatchInfo | None
    input_logprobs: list[tuple[list[int], int, list[int] | None, bool] | None]
    req_state_ops: list[ReqStateOp]


@dataclass
class GenerationBatchResult:
    """The model worker's answer for a :class:`ModelWorkerBatch`, on the host once :meth:`wait`
    returns (the copies from the device may still be in flight before).

    Attributes:
        next_token_ids: ``[R]`` int64, the token sampled for each sampling row.
        next_token_logprobs: ``[R]`` float32 logprob of each sampled token, or ``None`` when no
            row asked for output logprobs.
        next_top_logprobs: ``k -> (rows, values [r, k] float32, ids [r, k] int64)`` for the
            sampling rows (indices into ``R``) that asked for the top ``k``.
        input_logprobs: per request ``(values [t] float32, top values [t, k] | None, top ids
            [t, k] | None, token-ids values [t, m] | None, ranks [t] int64 | None)`` for its
            prompt-logprob targets (the fourth: the logprobs of its ``m`` ``token_ids_logprob``;
            the last: each target's vocabulary rank, ``sampling.sampler.token_ranks``, when the
            request asked for ranks), else ``None``.
        forward_time: seconds the worker spent on the batch (forward, sampling, copies issued).
        error: ``None``, or why the batch failed (``"oom"``: the device ran out of memory; no KV
            was confirmed and no token sampled).
        copy_done: a CUDA event recorded after the device-to-host copies, or ``None``.
        next_token_ids_logprobs: per sampling row, the logprobs of its ``token_ids_logprob``
            (float32 ``[m]``) or ``None``; ``None`` when no row asks.
    """

    next_token_ids: torch.Tensor | None
    next_token_logprobs: torch.Tensor | None
    next_top_logprobs: dict[int, tuple[list[int], torch.Tensor, torch.Tensor]]
    input_logprobs: list[
        tuple[
            torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None
        ]
        | None
    ]
    forward_time: float
    error: str | None = None
    copy_done: Any = None
    next_token_ids_logprobs: list[torch.Tensor | None] | None = None

    def wait(self) -> None:
        """Block until the host copies are complete."""
        if self.copy_done is not None:
            self.copy_done.synchronize()
            self.copy_done = None

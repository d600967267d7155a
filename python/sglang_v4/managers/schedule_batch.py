"""Req: one generation request's state inside the scheduler (SGLang ``schedule_batch.Req``).

A request's token sequence is ``fill_ids = origin_input_ids + output_ids``. ``num_computed`` of
them have their KV in the pool; a forward extends that by a chunk, and whenever the chunk reaches
the end of ``fill_ids`` the last position's logits sample the next token. Decode is the case of a
one-token chunk; a retracted request restarts at ``num_computed = 0`` (or its cache hit) and
re-computes ``fill_ids`` (prompt and the outputs it already streamed) before it continues.

Pages: ``block_pages[b]`` is the block page of logical block ``b``; ``window_pages[k]`` the window
page of positions ``128k .. 128k + 127``. Blocks ``< num_tree_blocks`` and the window pages in
``tree_window_spans`` belong to the radix cache (protected by the lock on ``last_node``); the
rest belong to the request and are freed when it ends or is retracted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from sglang_v4.sampling.sampling_params import SamplingParams


@dataclass
class Req:
    """Scheduler-side request state (see module docstring)."""

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
    # KV bookkeeping
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
    pending_input_logprobs: list[tuple[float | None, int, list[float] | None, list[int] | None]] = field(
        default_factory=list
    )
    pending_output_logprobs: list[tuple[float, int, list[float] | None, list[int] | None]] = field(
        default_factory=list
    )
    input_logprob_buffer: list[tuple[float | None, int, list[float] | None, list[int] | None]] = field(
        default_factory=list
    )

    @property
    def fill_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

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

"""The tokenizer manager's book-keeping of one in-flight request (SGLang's ``ReqState`` of
``srt/managers/tokenizer_manager.py``): the request, its stop strings, the outputs queued for its
waiter and the event that wakes it, the text, ids and formatted logprobs so far, and its timing.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.managers.reasoning_tokens import ReasoningTokenCounter
from sglang_v4.managers.req_time_stats import RequestTimeline
from sglang_v4.managers.tokenization import RequestError

__all__ = ["ReqState"]


@dataclass
class ReqState:
    """Book-keeping of one in-flight single request."""

    obj: GenerateReqInput
    prompt_len: int
    stop_strs: list[str]
    no_stop_trim: bool
    event: asyncio.Event = field(default_factory=asyncio.Event)
    #: the latest output not read yet (at most one: outputs are cumulative, a newer one replaces it)
    out_list: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    error: RequestError | None = None
    text_raw: str = ""
    final_text: str | None = None
    output_ids: list[int] = field(default_factory=list)
    # Formatted logprobs so far: [logprob, token_id, text|None] entries (top: lists of them / None).
    input_token_logprobs: list[list[Any]] = field(default_factory=list)
    output_token_logprobs: list[list[Any]] = field(default_factory=list)
    input_top_logprobs: list[Any] = field(default_factory=list)
    output_top_logprobs: list[Any] = field(default_factory=list)
    #: ``token_ids_logprob`` of the request (``None``: not asked) and its formatted entries so far:
    #: per position a list of ``[logprob, token_id, text|None]`` in its order, or ``None``.
    token_ids_logprob: list[int] | None = None
    input_token_ids_logprobs: list[Any] = field(default_factory=list)
    output_token_ids_logprobs: list[Any] = field(default_factory=list)
    #: each prompt position's vocabulary rank so far (``return_input_token_ranks``; None first)
    input_token_ranks: list[int | None] = field(default_factory=list)
    created_time: float = field(default_factory=time.perf_counter)
    first_token_time: float = 0.0
    last_time: float = 0.0
    last_completion_tokens: int = 0
    #: counts ``meta_info["reasoning_tokens"]`` (``require_reasoning`` with a reasoning parser)
    reasoning: ReasoningTokenCounter | None = None
    #: the request's stage stamps (:mod:`.req_time_stats`); ``None`` unless recorded
    timeline: RequestTimeline | None = None

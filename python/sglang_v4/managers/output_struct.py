"""The per-step output messages of the scheduler: ``BatchTokenIDOut`` (scheduler -> detokenizer)
and ``BatchStrOut`` (detokenizer -> tokenizer manager).

Names and fields follow SGLang 0.5.x ``srt/managers/io_struct.py`` (``BatchTokenIDOutput`` ->
here ``BatchTokenIDOut``, ``BatchStrOutput`` -> ``BatchStrOut``); the request messages are in
:mod:`sglang_v4.managers.io_struct`, which re-exports these two under SGLang's module path.
Plain dataclasses sent with pickle over ZMQ IPC sockets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from sglang_v4.managers.finish_reason import FinishReason

if TYPE_CHECKING:  # imported lazily to keep this module dependency-free
    from sglang_v4.managers.req import Req
    from sglang_v4.managers.schedule_batch import FixedColumns

__all__ = ["BatchStrOut", "BatchTokenIDOut"]

_FINISHED_REASON = attrgetter("finished_reason")
_CACHED_TOKENS = attrgetter("cached_tokens")
_NUM_RETRACTIONS = attrgetter("num_retractions")


def _output_rows(reqs: Sequence[Req]) -> list[tuple[Any, ...]]:
    """Per request its fixed message fields (``Req.output_static``) and ``return_logprob``."""
    return [(*r.output_static, r.return_logprob) for r in reqs]


@dataclass
class BatchTokenIDOut:
    """Per-step outputs of the scheduler for the requests that have news (scheduler -> detokenizer).

    Every field is a list indexed like ``rids``. The message carries only what is new since the
    previous message for the request (O(new tokens) per step, not O(output length)); the
    detokenizer keeps each request's ids itself. Token-level fields:

    - ``finished_reasons[i]``: :data:`FinishReason` dict or ``None`` while running.
    - ``output_ids[i]``: output ids new since the last message for this request.
    - ``skip_special_tokens``, ``spaces_between_special_tokens``, ``no_stop_trim``,
      ``stop_str_after_token_id`` (``None`` when unset): from the request's sampling params.
    - ``stop_str_min_tokens``: the request's ``min_new_tokens`` when it has stop strings / regexes
      (else 0): a stop string is matched only where it ends after the text of that many output
      tokens (a stop regex only after that text), so the detokenizer cuts the final text at the
      first occurrence ending after it.
    - ``prompt_tokens``, ``completion_tokens`` (output tokens so far), ``cached_tokens`` (prompt
      tokens served from the radix cache).

    Logprob fields are INCREMENTAL (only the positions new in this message) and ``[]`` for
    requests without ``return_logprob``:

    - ``input_token_logprobs_val[i]`` / ``_idx[i]``: list[float] / list[int] for prompt positions
      from ``logprob_start_len`` (the first position of the prompt has logprob ``None``, as SGLang),
      sent once, in the first message of the request.
    - ``output_token_logprobs_val[i]`` / ``_idx[i]``: list[float] / list[int] for the new output tokens.
    - ``input_top_logprobs_val[i]`` / ``_idx[i]``, ``output_top_logprobs_val[i]`` / ``_idx[i]``:
      list (per position) of list (top ``top_logprobs_num``) of float / int.
    - ``input_token_ids_logprobs_val[i]`` / ``output_token_ids_logprobs_val[i]``: list (per position)
      of the logprobs of the request's ``token_ids_logprob`` in its order (``None`` for the first
      prompt position); ``[]`` without ``token_ids_logprob``.
    - ``input_token_ranks[i]``: list (per prompt position, as ``input_token_logprobs_val[i]``) of
      each token's vocabulary rank (:func:`~sglang_v4.sampling.sampler.token_ranks`; ``None`` for
      the first position); ``[]`` without ``return_input_token_ranks``.
    """

    rids: list[str]
    finished_reasons: list[FinishReason | None]
    output_ids: list[list[int]]
    skip_special_tokens: list[bool]
    no_stop_trim: list[bool]
    prompt_tokens: list[int]
    completion_tokens: list[int]
    cached_tokens: list[int]
    spaces_between_special_tokens: list[bool] = field(default_factory=list)
    stop_str_after_token_id: list[int | None] = field(default_factory=list)
    stop_str_min_tokens: list[int] = field(default_factory=list)
    input_token_logprobs_val: list[list[float | None]] = field(default_factory=list)
    input_token_logprobs_idx: list[list[int]] = field(default_factory=list)
    output_token_logprobs_val: list[list[float]] = field(default_factory=list)
    output_token_logprobs_idx: list[list[int]] = field(default_factory=list)
    input_top_logprobs_val: list[list[list[float] | None]] = field(default_factory=list)
    input_top_logprobs_idx: list[list[list[int] | None]] = field(default_factory=list)
    output_top_logprobs_val: list[list[list[float]]] = field(default_factory=list)
    output_top_logprobs_idx: list[list[list[int]]] = field(default_factory=list)
    input_token_ids_logprobs_val: list[list[list[float] | None]] = field(default_factory=list)
    output_token_ids_logprobs_val: list[list[list[float] | None]] = field(default_factory=list)
    input_token_ranks: list[list[int | None]] = field(default_factory=list)
    #: Per-request retraction counts (optional, SGLang ``num_retractions``).
    retraction_counts: list[int] = field(default_factory=list)
    #: Per request its stage stamps (:class:`~sglang_v4.managers.req_time_stats.SchedulerTimeStats`,
    #: ``None`` once sent) while the scheduler records them; ``[]`` / ``None`` otherwise.
    time_stats: list[Any] | None = field(default_factory=list)

    @classmethod
    def empty(cls) -> BatchTokenIDOut:
        """A message with no requests; fill it with :meth:`append`."""
        return cls([], [], [], [], [], [], [], [])

    @classmethod
    def from_reqs(cls, reqs: Sequence[Req], fixed_columns: FixedColumns | None = None) -> BatchTokenIDOut:
        """The message for scheduler requests with news (finished, or new tokens to stream).

        Every ``BatchTokenIDOut`` the scheduler sends is built here. Each request contributes its
        output ids and logprob entries not sent yet (``Req.take_new_outputs`` marks them sent) and
        its counts; logprob fields stay ``[]`` for a request without ``return_logprob`` and the
        top-logprob fields without ``top_logprobs_num``. Cost O(new tokens) per request.
        ``fixed_columns`` (the scheduler's) keeps the columns of the requests' fixed fields from
        the last message, reused when this one has the same requests in the same order.
        """
        n = len(reqs)
        out = cls.empty()
        if n == 0:
            return out
        ilv, ili, olv, oli = [], [], [], []
        itv, iti, otv, oti = [], [], [], []
        idv, odv, irk = [], [], []
        with_logprobs: Sequence[Req] = reqs
        # the fixed fields of each request (and whether it returns logprobs), as columns
        (
            out.rids,
            out.skip_special_tokens,
            out.spaces_between_special_tokens,
            out.no_stop_trim,
            out.prompt_tokens,
            out.stop_str_after_token_id,
            out.stop_str_min_tokens,
            return_logprob,
        ) = (
            fixed_columns.get(list(reqs), _output_rows)
            if fixed_columns is not None
            else list(map(list, zip(*_output_rows(reqs))))
        )  # type: ignore[assignment]
        if not any(return_logprob):  # the common message: ids only
            # Req.take_new_outputs inlined (logprob entries of such requests are never sent), and
            # the output counts in the same pass
            add_ids, add_count = out.output_ids.append, out.completion_tokens.append
            for r in reqs:
                ids = r.output_ids
                add_ids(ids[r.sent_output_len :])
                r.sent_output_len = k = len(ids)
                add_count(k)
                if r.pending_input_logprobs or r.pending_output_logprobs:
                    r.pending_input_logprobs, r.pending_output_logprobs = [], []
            ilv = ili = olv = oli = itv = iti = otv = oti = idv = odv = irk = [[]] * n  # shared, read-only
            with_logprobs = ()
        for r in with_logprobs:
            new_ids, ilp, olp = r.take_new_outputs()
            out.output_ids.append(new_ids)
            if not r.return_logprob:
                for col in (ilv, ili, olv, oli, itv, iti, otv, oti, idv, odv, irk):
                    col.append([])
                continue
            top = r.top_logprobs_num > 0
            ilv.append([x[0] for x in ilp])
            ili.append([x[1] for x in ilp])
            olv.append([x[0] for x in olp])
            oli.append([x[1] for x in olp])
            itv.append([x[2] for x in ilp] if top else [])
            iti.append([x[3] for x in ilp] if top else [])
            otv.append([x[2] for x in olp] if top else [])
            oti.append([x[3] for x in olp] if top else [])
            with_ids = r.token_ids_logprob is not None
            idv.append([x[4] for x in ilp] if with_ids else [])
            odv.append([x[4] for x in olp] if with_ids else [])
            irk.append([x[5] for x in ilp] if r.return_input_token_ranks else [])
        if with_logprobs:
            out.completion_tokens = [len(r.output_ids) for r in reqs]
        # the other fields that change
        out.finished_reasons = list(map(_FINISHED_REASON, reqs))
        out.cached_tokens = list(map(_CACHED_TOKENS, reqs))
        out.retraction_counts = list(map(_NUM_RETRACTIONS, reqs))
        out.input_token_logprobs_val, out.input_token_logprobs_idx = ilv, ili
        out.output_token_logprobs_val, out.output_token_logprobs_idx = olv, oli  # type: ignore[assignment]
        out.input_top_logprobs_val, out.input_top_logprobs_idx = itv, iti
        out.output_top_logprobs_val, out.output_top_logprobs_idx = otv, oti  # type: ignore[assignment]
        out.input_token_ids_logprobs_val, out.output_token_ids_logprobs_val = idv, odv
        out.input_token_ranks = irk
        return out

    def append(
        self,
        *,
        rid: str,
        finished_reason: FinishReason | None,
        output_ids: list[int],
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int = 0,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        no_stop_trim: bool = False,
        stop_str_after_token_id: int | None = None,
        stop_str_min_tokens: int = 0,
        input_token_logprobs: tuple[list[float | None], list[int]] | None = None,
        output_token_logprobs: tuple[list[float], list[int]] | None = None,
        input_top_logprobs: tuple[list[list[float] | None], list[list[int] | None]] | None = None,
        output_top_logprobs: tuple[list[list[float]], list[list[int]]] | None = None,
        retraction_count: int = 0,
        input_token_ids_logprobs: list[list[float] | None] | None = None,
        output_token_ids_logprobs: list[list[float] | None] | None = None,
        input_token_ranks: list[int | None] | None = None,
    ) -> None:
        """Add one request's news, keeping every per-request list aligned.

        ``*_logprobs`` are ``(values, token_ids)`` pairs for the positions new in this message
        (``None`` = nothing new); see the class docstring for their meaning.
        """
        self.rids.append(rid)
        self.finished_reasons.append(finished_reason)
        self.output_ids.append(list(output_ids))
        self.skip_special_tokens.append(skip_special_tokens)
        self.spaces_between_special_tokens.append(spaces_between_special_tokens)
        self.no_stop_trim.append(no_stop_trim)
        self.stop_str_after_token_id.append(stop_str_after_token_id)
        self.stop_str_min_tokens.append(stop_str_min_tokens)
        self.prompt_tokens.append(prompt_tokens)
        self.completion_tokens.append(completion_tokens)
        self.cached_tokens.append(cached_tokens)
        for vals, idxs, pair in (
            (self.input_token_logprobs_val, self.input_token_logprobs_idx, input_token_logprobs),
            (self.output_token_logprobs_val, self.output_token_logprobs_idx, output_token_logprobs),
            (self.input_top_logprobs_val, self.input_top_logprobs_idx, input_top_logprobs),
            (self.output_top_logprobs_val, self.output_top_logprobs_idx, output_top_logprobs),
        ):
            vals.append(list(pair[0]) if pair is not None else [])  # type: ignore[arg-type]
            idxs.append(list(pair[1]) if pair is not None else [])  # type: ignore[arg-type]
        self.input_token_ids_logprobs_val.append(list(input_token_ids_logprobs or []))
        self.output_token_ids_logprobs_val.append(list(output_token_ids_logprobs or []))
        self.input_token_ranks.append(list(input_token_ranks or []))
        self.retraction_counts.append(retraction_count)


@dataclass
class BatchStrOut:
    """``BatchTokenIDOut`` plus text (detokenizer -> tokenizer manager).

    ``output_strs[i]``: text new since the last message (incremental, SGLang semantics).
    ``final_strs[i]``: for a request finishing in this message the complete output text with a
    matched stop string / stop token trimmed (unless ``no_stop_trim``); ``None`` otherwise.
    The other fields are copied from the ``BatchTokenIDOut``.
    """

    rids: list[str]
    finished_reasons: list[FinishReason | None]
    output_strs: list[str]
    final_strs: list[str | None]
    output_ids: list[list[int]]
    prompt_tokens: list[int]
    completion_tokens: list[int]
    cached_tokens: list[int]
    input_token_logprobs_val: list[list[float | None]] = field(default_factory=list)
    input_token_logprobs_idx: list[list[int]] = field(default_factory=list)
    output_token_logprobs_val: list[list[float]] = field(default_factory=list)
    output_token_logprobs_idx: list[list[int]] = field(default_factory=list)
    input_top_logprobs_val: list[list[list[float] | None]] = field(default_factory=list)
    input_top_logprobs_idx: list[list[list[int] | None]] = field(default_factory=list)
    output_top_logprobs_val: list[list[list[float]]] = field(default_factory=list)
    output_top_logprobs_idx: list[list[list[int]]] = field(default_factory=list)
    retraction_counts: list[int] = field(default_factory=list)
    input_token_ids_logprobs_val: list[list[list[float] | None]] = field(default_factory=list)
    output_token_ids_logprobs_val: list[list[list[float] | None]] = field(default_factory=list)
    input_token_ranks: list[list[int | None]] = field(default_factory=list)
    #: ``BatchTokenIDOut.time_stats`` copied, and the wall-clock second the detokenizer sent this
    #: message (0.0: not stamped; only stamped when ``time_stats`` is filled).
    time_stats: list[Any] | None = field(default_factory=list)
    detokenizer_ts: float = 0.0

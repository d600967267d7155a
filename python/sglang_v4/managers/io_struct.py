"""Typed messages between the tokenizer manager, scheduler and detokenizer processes.

Names and fields follow SGLang 0.5.x ``srt/managers/io_struct.py`` (``GenerateReqInput``,
``TokenizedGenerateReqInput``, ``BatchTokenIDOutput`` -> here ``BatchTokenIDOut``,
``BatchStrOutput`` -> ``BatchStrOut``, ``AbortReq``...). All messages are plain dataclasses sent
with pickle over ZMQ IPC sockets. The control and lifecycle messages (``FlushCacheReqInput``,
``SchedulerReadyInfo``, ...) are in :mod:`sglang_v4.managers.control_struct`; the per-step output
messages (``BatchTokenIDOut``, ``BatchStrOut``) in :mod:`sglang_v4.managers.output_struct`,
re-exported here.

Data flow::

    TokenizerManager --TokenizedGenerateReqInput/AbortReq/control--> Scheduler
    Scheduler --BatchTokenIDOut--> Detokenizer --BatchStrOut--> TokenizerManager
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sglang_v4.managers.finish_reason import (  # noqa: F401 - re-exported
    ABORT_IN_QUEUE,
    ABORT_RUNNING,
    FinishReason,
    finish_abort,
    finish_length,
    finish_stop,
)
from sglang_v4.managers.output_struct import BatchStrOut, BatchTokenIDOut  # noqa: F401 - re-exported

if TYPE_CHECKING:  # imported lazily to keep this module dependency-free
    from sglang_v4.sampling.sampling_params import SamplingParams

#: The rid prefix of ``/health_generate``'s probe request (SGLang's). The scheduler tells a probe by
#: its ``health_check`` flag, not by this prefix: a client's rid may start with it too.
HEALTH_CHECK_RID_PREFIX = "HEALTH_CHECK"


# ---------------------------------------------------------------------------------------------
# User-facing request (HTTP /generate body, Engine.generate arguments)
# ---------------------------------------------------------------------------------------------
@dataclass
class GenerateReqInput:
    """A ``/generate`` request: one prompt or a batch, text or token ids.

    After :meth:`normalize_batch_and_arguments` a single request has scalar fields, and a batch
    (or a single prompt with ``n > 1``) has per-item lists of length
    ``batch_size * parallel_sample_num`` (prompts repeated ``n`` times, SGLang's order:
    ``[p0, p1, ..., p0, p1, ...]``). ``obj[i]`` is then the i-th single request. A seeded request
    (``sampling_seed``) with ``n > 1`` gives parallel sample ``k`` the seed ``seed + k``
    (:func:`sglang_v4.sampling.sampling_params.derive_choice_seed`).

    Raises:
        ValueError: neither/both of ``text`` and ``input_ids``, empty batch, inconsistent ``n``
            across a batch, mismatched list lengths, duplicate ``rid``.
    """

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None
    rid: str | list[str] | None = None
    return_logprob: bool | list[bool] | None = None
    logprob_start_len: int | list[int] | None = None
    top_logprobs_num: int | list[int] | None = None
    token_ids_logprob: list[int] | list[list[int] | None] | None = None
    return_text_in_logprobs: bool = False
    #: Also return each prompt token's rank among the vocabulary's logprobs
    #: (``meta_info["input_token_ranks"]``, next to ``input_token_logprobs``; vLLM's
    #: ``Logprob.rank`` of its ``prompt_logprobs``); set by the OpenAI routes, not a ``/generate``
    #: field. One value for a whole batch.
    return_input_token_ranks: bool = False
    stream: bool = False
    log_metrics: bool = True
    priority: int | list[int] | None = None
    #: SGLang's ``extra_key`` (the OpenAI routes put vLLM's ``cache_salt`` here, as SGLang
    #: does): the prefix-cache namespace; requests share cached prompt blocks only with requests
    #: of the same one (``None`` / ``""``: the shared namespace). One string, or one per prompt.
    extra_key: str | list[str] | None = None
    #: SGLang's ``require_reasoning``: the prompt opened the reasoning (thinking mode), so
    #: ``meta_info["reasoning_tokens"]`` counts the output up to and including ``</think>``
    #: (:mod:`sglang_v4.managers.reasoning_tokens`); one value for a whole batch, as SGLang's.
    require_reasoning: bool = False
    #: ``/health_generate``'s probe (set by the tokenizer manager only; no ``/generate`` field
    #: reaches it, so a client's request is never taken for a probe, whatever its ``rid``).
    health_check: bool = False
    # Filled by normalization.
    is_single: bool = True
    batch_size: int = 1
    parallel_sample_num: int = 1

    # ----------------------------------------------------------------- normalization
    def normalize_batch_and_arguments(self) -> None:
        """Resolve single vs batch, expand ``n`` parallel samples, fill defaults (SGLang's rules).

        An empty ``rid`` (``""``, also one item of a list) means no rid, as SGLang reads an empty
        ``extra_key`` / ``cache_salt``: the request gets a fresh one. Kept, concurrent requests of
        a client that always sends ``"rid": ""`` refused each other as duplicates, and such a
        request could not be aborted (an empty rid aborts nothing), so a client that went away
        left it running to its end."""
        if self.rid == "":
            self.rid = None
        elif isinstance(self.rid, list):
            self.rid = [uuid.uuid4().hex if r == "" else r for r in self.rid]
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("Either text or input_ids should be provided (exactly one of them).")
        if self.text is not None:
            if isinstance(self.text, str):
                self.is_single, self.batch_size = True, 1
            else:
                if len(self.text) == 0:
                    raise ValueError("text: an empty batch was given.")
                self.is_single, self.batch_size = False, len(self.text)
        else:
            ids = self.input_ids
            assert ids is not None
            if len(ids) == 0:
                raise ValueError("input_ids cannot be empty.")
            if isinstance(ids[0], list):
                self.is_single, self.batch_size = False, len(ids)
            else:
                self.is_single, self.batch_size = True, 1

        # Parallel sampling (n).
        sp = self.sampling_params
        if sp is None:
            self.parallel_sample_num = 1
        elif isinstance(sp, dict):
            self.parallel_sample_num = _get_n(sp)
        else:
            if len(sp) == 0:
                raise ValueError("sampling_params: an empty list was given.")
            self.parallel_sample_num = _get_n(sp[0])
            for p in sp:
                if _get_n(p) != self.parallel_sample_num:
                    raise ValueError(
                        "The parallel_sample_num should be the same for all samples in sample params."
                    )
        if self.parallel_sample_num > 1 and self.is_single:
            self.is_single = False
            if self.text is not None:
                self.text = [self.text]  # type: ignore[list-item]
            if self.input_ids is not None:
                self.input_ids = [self.input_ids]  # type: ignore[list-item]

        if self.is_single:
            if self.sampling_params is None:
                self.sampling_params = {}
            if isinstance(self.sampling_params, list):
                raise ValueError("sampling_params must be a dict for a single request.")
            if self.rid is None:
                self.rid = uuid.uuid4().hex
            if not isinstance(self.rid, str):
                raise ValueError("rid must be a string for a single request.")
            # a per-prompt list belongs to a batch (on one prompt [false] was truthy: logprobs on)
            for name, kind in _SINGLE_SCALARS:
                if isinstance(getattr(self, name), list):
                    raise ValueError(f"{name} must be {kind} for a single request.")
            if self.return_logprob is None:
                self.return_logprob = False
            # logprob_start_len stays None when not given: the tokenizer resolves it (it depends on
            # max_new_tokens, see TokenizerManager._tokenize_one)
            if self.top_logprobs_num is None:
                self.top_logprobs_num = 0
            return

        num = self.batch_size * self.parallel_sample_num
        n = self.parallel_sample_num
        if self.text is not None:
            self.text = list(self.text) * n
        else:
            assert self.input_ids is not None
            if not all(isinstance(x, list) for x in self.input_ids):
                raise ValueError("input_ids should be a list of lists for batch processing.")
            self.input_ids = list(self.input_ids) * n  # type: ignore[assignment]

        if self.rid is None:
            self.rid = [uuid.uuid4().hex for _ in range(num)]
        elif isinstance(self.rid, str):
            self.rid = [f"{self.rid}_{i}" for i in range(num)]
        elif isinstance(self.rid, list):
            if len(self.rid) != self.batch_size:
                raise ValueError(
                    "The specified rids length mismatch with the batch_size for batch processing."
                )
            if n > 1:
                self.rid = [f"{r}_{k}" for k in range(n) for r in self.rid]
        else:
            raise ValueError("The rid should be a string or a list of strings.")

        if self.sampling_params is None:
            self.sampling_params = [{} for _ in range(num)]
        elif isinstance(self.sampling_params, dict):
            self.sampling_params = [dict(self.sampling_params) for _ in range(num)]
        else:
            if len(self.sampling_params) != self.batch_size:
                raise ValueError(
                    "The length of sampling_params should be equal to the batch size "
                    f"({len(self.sampling_params)} != {self.batch_size})."
                )
            self.sampling_params = [dict(p) for _ in range(n) for p in self.sampling_params]
        if n > 1:
            # Parallel sample k of every prompt draws from its own seed (derive_choice_seed: seed + k),
            # so the n samples differ and the whole response is repeatable for the same seed.
            from sglang_v4.sampling.sampling_params import derive_choice_seed

            for j, p in enumerate(self.sampling_params):
                seed = p.get("sampling_seed")
                if isinstance(seed, float) and seed.is_integer():  # SamplingParams accepts 7.0 as 7
                    seed = int(seed)
                if isinstance(seed, int) and not isinstance(seed, bool) and -(2**63) <= seed < 2**63:
                    p["sampling_seed"] = derive_choice_seed(seed, j // self.batch_size)

        def per_item(value: Any, default: Any, name: str) -> list[Any]:
            if value is None:
                return [default] * num
            if not isinstance(value, list):
                return [value] * num
            if n > 1:
                raise ValueError(f"Cannot use list {name} with parallel_sample_num > 1")
            if len(value) != self.batch_size:
                raise ValueError(f"The length of {name} should be equal to the batch size.")
            return list(value)

        self.return_logprob = per_item(self.return_logprob, False, "return_logprob")
        self.logprob_start_len = per_item(self.logprob_start_len, None, "logprob_start_len")
        self.top_logprobs_num = per_item(self.top_logprobs_num, 0, "top_logprobs_num")
        self.priority = per_item(self.priority, None, "priority")
        self.extra_key = per_item(self.extra_key, None, "extra_key")
        if self.token_ids_logprob is not None:
            if not isinstance(self.token_ids_logprob, list):
                raise ValueError("token_ids_logprob must be a list of token ids (one list per prompt).")
            per_prompt = any(x is None or isinstance(x, list) for x in self.token_ids_logprob)
            if not per_prompt:  # one flat list of ids for every prompt
                self.token_ids_logprob = [list(self.token_ids_logprob) for _ in range(num)]  # type: ignore[arg-type]
            elif n > 1:
                raise ValueError("Cannot use list token_ids_logprob with parallel_sample_num > 1")
            elif len(self.token_ids_logprob) != self.batch_size:
                raise ValueError("The length of token_ids_logprob should be equal to the batch size.")
        if len(set(self.rid)) != len(self.rid):
            raise ValueError("Duplicate rid values in one batch request.")

    def __getitem__(self, i: int) -> GenerateReqInput:
        """The i-th single request of a normalized batch."""

        def pick(v: Any) -> Any:
            return v[i] if isinstance(v, list) else v

        return GenerateReqInput(
            text=self.text[i] if self.text is not None else None,  # type: ignore[index]
            input_ids=self.input_ids[i] if self.input_ids is not None else None,  # type: ignore[arg-type]
            sampling_params=self.sampling_params[i],  # type: ignore[index]
            rid=self.rid[i],  # type: ignore[index]
            return_logprob=pick(self.return_logprob),
            logprob_start_len=pick(self.logprob_start_len),
            top_logprobs_num=pick(self.top_logprobs_num),
            token_ids_logprob=(
                self.token_ids_logprob[i] if self.token_ids_logprob is not None else None  # type: ignore[arg-type]
            ),
            return_text_in_logprobs=self.return_text_in_logprobs,
            return_input_token_ranks=self.return_input_token_ranks,
            stream=self.stream,
            log_metrics=self.log_metrics,
            priority=pick(self.priority),
            extra_key=pick(self.extra_key),
            require_reasoning=self.require_reasoning,
            health_check=self.health_check,
            is_single=True,
            batch_size=1,
            parallel_sample_num=1,
        )


#: Fields a batch may give per prompt (a list) that a single request takes as one value.
_SINGLE_SCALARS = (
    ("return_logprob", "a boolean"),
    ("logprob_start_len", "an integer"),
    ("top_logprobs_num", "an integer"),
    ("priority", "an integer"),
    ("extra_key", "a string"),
)


def _get_n(params: Any) -> int:
    """``n`` of one ``sampling_params`` dict (``None``/absent: 1); an integral float (``2.0``) is
    that integer, as ``SamplingParams`` reads every integer field.

    Raises:
        ValueError: not a dict; ``n`` not an integer (``2.5``, ``"2"``, ``true``) or not in [1, MAX_N].
    """
    if not isinstance(params, dict):
        raise ValueError(f"sampling_params must be a JSON object (got {type(params).__name__}).")
    n = params.get("n", 1)
    if n is None:
        return 1
    from sglang_v4.sampling.sampling_params import MAX_N

    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"n must be an integer (sampling_params.n, got {type(n).__name__} {n!r}).")
    if not 1 <= n <= MAX_N:
        raise ValueError(f"n must be in [1, {MAX_N}] (sampling_params.n, got {n!r}).")
    return n


# ---------------------------------------------------------------------------------------------
# Tokenizer manager -> scheduler
# ---------------------------------------------------------------------------------------------
@dataclass
class TokenizedGenerateReqInput:
    """A validated, tokenized single request (tokenizer manager -> scheduler).

    ``input_ids``: prompt token ids (every id in ``[0, vocab_size)``, length >= 1 and
    ``< context_len``; the tokenizer manager checks this). ``sampling_params`` is normalized
    and verified (``SamplingParams.normalize(tokenizer)``, ``.verify(vocab_size)``).
    ``logprob_start_len``: first prompt position whose logprob is returned (-1: output only).
    """

    rid: str
    input_text: str | None
    input_ids: list[int]
    sampling_params: SamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    token_ids_logprob: list[int] | None = None
    stream: bool = False
    priority: int | None = None
    return_text_in_logprobs: bool = False
    #: :attr:`GenerateReqInput.return_input_token_ranks` (only with ``return_logprob``).
    return_input_token_ranks: bool = False
    #: The prefix-cache namespace (:attr:`GenerateReqInput.extra_key`; None: shared).
    extra_key: str | None = None
    #: ``/health_generate``'s probe (:attr:`GenerateReqInput.health_check`): a busy scheduler
    #: answers it after its next batch instead of queueing it.
    health_check: bool = False


@dataclass
class AbortReq:
    """Abort one request (``rid``) or all (``abort_all``); the scheduler frees its pages and
    emits a finished(abort) output for it on its next step."""

    rid: str = ""
    abort_all: bool = False

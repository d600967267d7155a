"""Request validation and tokenization of the :class:`~sglang_v4.managers.tokenizer_manager.TokenizerManager`
(the ``TokenizationMixin`` it inherits), and the request errors of the main process.

Tokenization runs on the event loop for short texts and in a worker thread (GIL released where
the tokenizer allows it) for long ones; a text whose token count provably exceeds the context is
refused before it is tokenized. Every limit is checked once here, for the Engine and HTTP alike.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from sglang_v4.managers.control_struct import SchedulerReadyInfo, context_length_message
from sglang_v4.managers.io_struct import GenerateReqInput, TokenizedGenerateReqInput
from sglang_v4.prompt_tokens import encode_with_plain_spans
from sglang_v4.sampling.preferred_params import with_preferred
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.utils import run_blocking

#: Why a text prompt is refused by a server started with ``--skip-tokenizer-init``.
SKIP_TOKENIZER_TEXT_MSG = (
    "A text prompt needs the tokenizer, which this server does not load (it was started with "
    "--skip-tokenizer-init / skip_tokenizer_init=True): pass the prompt as input_ids."
)

#: Texts longer than this (characters) are tokenized in a worker thread with the GIL released,
#: so that a huge prompt does not stall the event loop (other requests' streams, /health).
TOKENIZE_IN_THREAD_CHARS = 8192

#: The environment variable bounding the logprob values of one request that asks for more than
#: :data:`NARROW_LOGPROB_CANDIDATES` candidates per position (:meth:`TokenizationMixin._check_logprob_volume`),
#: and its default: 2**23 values, about 270 MB of JSON and a few GB of peak memory across the
#: server's processes (measured on the CPU: 4.2M values took 130 MB of JSON and 1.2 GB of RSS).
MAX_LOGPROB_ENTRIES_ENV = "SGLANG_V4_MAX_LOGPROB_ENTRIES"
DEFAULT_MAX_LOGPROB_ENTRIES = 1 << 23
#: Candidates per position (``top_logprobs_num + len(token_ids_logprob)``) up to which a request's
#: logprobs are not bounded beyond its tokens: OpenAI's ``top_logprobs`` maximum, so every request
#: of the OpenAI routes is. Its values are then at most 21 per token processed, no more than the
#: tokens themselves cost; only wider requests multiply a short request into 10^8 values.
NARROW_LOGPROB_CANDIDATES = 20


class RequestError(ValueError):
    """A request failed; ``status_code`` is the HTTP status (400 bad input, 503 server down).

    ``batch_index``: the index (in the batch as sent; 0 for a single prompt) of the prompt whose
    per-prompt check failed, else None; ``/generate`` names a batch's entry with it (``text[2]``),
    ``/v1/completions`` a list of prompts' (``prompt[2]``).
    """

    batch_index: int | None = None

    def __init__(self, message: str, status_code: int = 400) -> None:
        super().__init__(message)
        self.status_code = status_code


class LogprobVolumeError(RequestError):
    """The 400 of :meth:`TokenizationMixin._check_logprob_volume`, in ``/generate``'s words (SGLang's
    fields); the OpenAI routes re-word it with their own field
    (:func:`sglang_v4.entrypoints.openai.logprob_limits.logprob_volume_error`).

    Attributes:
        total: the logprob values the request asks for (:func:`logprob_entries`, summed).
        limit: the most that are served (``SGLANG_V4_MAX_LOGPROB_ENTRIES``).
    """

    def __init__(self, total: int, limit: int) -> None:
        self.total = total
        self.limit = limit
        super().__init__(
            f"The request asks for up to {total} logprob values (positions from logprob_start_len "
            "and max_new_tokens, times 1 + top_logprobs_num + len(token_ids_logprob), over its "
            f"prompts and samples with more than {NARROW_LOGPROB_CANDIDATES} candidates per "
            f"position); at most {limit} are served ({MAX_LOGPROB_ENTRIES_ENV}). Reduce "
            "top_logprobs_num, token_ids_logprob, the prompt span from logprob_start_len, "
            "max_new_tokens or the number of prompts."
        )


class BackendDiedError(RequestError, RuntimeError):
    """The scheduler or the detokenizer process died (crashed, was killed, hung past the
    watchdog): every in-flight and later request fails with it. HTTP status 503; ``Engine``
    callers can catch it as a ``RuntimeError``. The message names the process and its exit code or
    the last line of its traceback."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 503)


def check_tokenizer_free(sp: SamplingParams) -> None:
    """Refuse the sampling parameters that need the tokenizer, on a server started with
    ``--skip-tokenizer-init``: stop strings and stop regexes (matched on the decoded text) and
    grammars (compiled over the vocabulary's text). ``stop_token_ids``, EOS and
    ``min_new_tokens`` (the EOS ids come from the model config) need none. ``sp`` is normalized.

    Raises:
        ValueError: naming the field.
    """
    fields = {
        "stop": sp.stop_strs,
        "stop_regex": sp.stop_regex_strs,
        "json_schema": sp.json_schema,
        "regex": sp.regex,
        "ebnf": sp.ebnf,
        "structural_tag": sp.structural_tag,
    }
    for name, value in fields.items():
        if value:
            hint = "; use stop_token_ids to stop on tokens" if name.startswith("stop") else ""
            raise ValueError(
                f"{name} needs the tokenizer, which this server does not load (it was started with "
                f"--skip-tokenizer-init / skip_tokenizer_init=True){hint}."
            )


def logprob_entries(req: TokenizedGenerateReqInput, token_limit: int) -> int:
    """Upper bound on the logprob values the answer to ``req`` holds: positions x values per position.

    Positions: the prompt's from ``logprob_start_len`` (none when ``-1``) plus the output's (its
    ``max_new_tokens``, or the room ``token_limit - prompt`` when unbounded, as the scheduler caps
    it). Values per position: the token's own logprob, ``top_logprobs_num`` candidates and one per
    ``token_ids_logprob`` id. ``0`` without ``return_logprob``.

    Args:
        req: a validated request.
        token_limit: the most tokens a request may hold, ``min(context_len, KV pool)``.
    """
    if not req.return_logprob:
        return 0
    prompt = len(req.input_ids)
    positions = (prompt - req.logprob_start_len if req.logprob_start_len >= 0 else 0) + (
        req.sampling_params.max_new_tokens_for(prompt, token_limit)
    )
    return positions * (1 + req.top_logprobs_num + len(req.token_ids_logprob or ()))


class TokenizationMixin:
    """Validation and tokenization of generate requests; the attributes below are the
    :class:`~sglang_v4.managers.tokenizer_manager.TokenizerManager`'s."""

    tokenizer: Any
    context_len: int
    max_req_input_len: int
    vocab_size: int
    grammar_enabled: bool
    scheduler_info: SchedulerReadyInfo
    server_args: Any

    async def encode_text(
        self,
        text: str,
        add_special_tokens: bool = True,
        max_new_tokens: int | None = None,
        plain_spans: tuple[tuple[int, int], ...] = (),
    ) -> list[int]:
        """Token ids of ``text`` without blocking the event loop for long texts.

        A text longer than :data:`TOKENIZE_IN_THREAD_CHARS` is tokenized in a worker thread (with
        the GIL released where the tokenizer allows it). Before that, when the tokenizer bounds
        how many characters a token can cover, a text whose token count is provably above the
        longest prompt is rejected without tokenizing it.

        Args:
            text: the prompt text.
            add_special_tokens: add BOS/EOS as the tokenizer's config says.
            max_new_tokens: the requested completion length (for the error message), if any.
            plain_spans: character spans of a rendered chat prompt that hold the request's own
                text, tokenized as plain text (no BOS / EOS is added then:
                :func:`~sglang_v4.prompt_tokens.encode_with_plain_spans`).

        Raises:
            RequestError: the text cannot fit in the context (400).
        """

        def encode() -> list[int]:
            if plain_spans:
                return encode_with_plain_spans(self.tokenizer, text, plain_spans)
            if len(text) <= TOKENIZE_IN_THREAD_CHARS:
                return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))
            whole = getattr(self.tokenizer, "encode_releasing_gil", None) or self.tokenizer.encode
            return list(whole(text, add_special_tokens=add_special_tokens))

        if len(text) <= TOKENIZE_IN_THREAD_CHARS:
            return encode()
        per_token = getattr(self.tokenizer, "max_chars_per_token", None)
        if isinstance(per_token, int) and per_token > 0 and not self._auto_truncate():
            at_least = -(-len(text) // per_token)
            limit = self.max_req_input_len
            if max_new_tokens is not None:
                limit = min(limit, self.context_len - max_new_tokens)
            if at_least > limit:
                # a prompt that alone fills the context is refused as such (SGLang checks the
                # input before input + max_new_tokens)
                mnt = max_new_tokens if at_least < self.context_len else None
                raise RequestError(context_length_message(self.context_len, at_least, mnt, at_least=True))
        return await run_blocking(encode)

    async def _encode_prompts(self, objs: list[GenerateReqInput]) -> list[list[int] | None]:
        """Token ids of each single request's text prompt (``None`` for an ``input_ids`` prompt);
        a text shared by several requests (``n > 1``) is tokenized once. A refused text's
        :class:`RequestError` carries its position in ``objs`` as ``batch_index``."""
        done: dict[int, list[int]] = {}
        out: list[list[int] | None] = []
        for pos, o in enumerate(objs):
            if o.input_ids is not None or not isinstance(o.text, str) or self.tokenizer is None:
                out.append(None)  # (a text prompt without a tokenizer is refused by _tokenize_one)
                continue
            key = id(o.text)
            if key not in done:
                mnt = o.sampling_params.get("max_new_tokens") if isinstance(o.sampling_params, dict) else None
                try:
                    done[key] = await self.encode_text(
                        o.text,
                        max_new_tokens=mnt if isinstance(mnt, int) and not isinstance(mnt, bool) else None,
                    )
                except RequestError as e:
                    e.batch_index = pos  # the position in ``objs``; the batch path maps it to the prompt's
                    raise
            out.append(done[key])
        return out

    def _auto_truncate(self) -> bool:
        """``--allow-auto-truncate``: long prompts are cut, not refused (:meth:`_fit_to_context`)."""
        return bool(getattr(getattr(self, "server_args", None), "allow_auto_truncate", False))

    def _fit_to_context(self, input_ids: list[int], raw: Any) -> list[int]:
        """``--allow-auto-truncate`` (SGLang's ``TokenizerManager._validate_one_request`` and
        ``validate_input_length``): a prompt over ``max_req_input_len`` tokens keeps its first
        ``max_req_input_len``; a ``max_new_tokens`` the request sets (``raw``, its sampling-params
        dict, changed in place) is cut to what the context and the KV pool leave, at least 0.
        Both are logged as warnings. Returns the (possibly cut) prompt."""
        import logging

        log = logging.getLogger(__name__)
        if len(input_ids) > self.max_req_input_len:
            log.warning(
                "The input (%d tokens) is longer than the longest allowed (%d tokens, context length %d): "
                "keeping its first %d tokens (--allow-auto-truncate).",
                len(input_ids),
                self.max_req_input_len,
                self.context_len,
                self.max_req_input_len,
            )
            input_ids = input_ids[: self.max_req_input_len]
        mnt = raw.get("max_new_tokens") if isinstance(raw, dict) else None
        if isinstance(mnt, int) and not isinstance(mnt, bool):
            room = self.context_len - len(input_ids)
            pool = int(self.scheduler_info.max_total_num_tokens or 0)
            if 0 < pool < self.context_len:  # the scheduler's cap: prompt + completion <= pool
                room = min(room, pool - len(input_ids))
            if mnt > room:
                log.warning(
                    "Requested token count (%d input + %d new) exceeds what the context allows: "
                    "max_new_tokens cut to %d (--allow-auto-truncate).",
                    len(input_ids),
                    mnt,
                    max(0, room),
                )
                raw["max_new_tokens"] = max(0, room)
        return input_ids

    def _check_logprob_volume(self, reqs: Sequence[TokenizedGenerateReqInput]) -> None:
        """Refuse a request (all items and ``n`` samples of a batch together) whose items asking for
        more than :data:`NARROW_LOGPROB_CANDIDATES` candidates per position would return more than
        ``SGLANG_V4_MAX_LOGPROB_ENTRIES`` logprob values (:func:`logprob_entries`; an unbounded
        ``max_new_tokens`` counts the room the prompt leaves). Every value is held by the
        scheduler, the detokenizer and this process until the answer is sent, so a
        ``top_logprobs_num`` near the vocabulary over a long prompt (10^8 values) or a
        ``/v1/score`` of thousands of items with thousands of labels would exhaust the host's
        memory and kill the server.

        Raises:
            LogprobVolumeError: 400 naming the fields and the limit.
        """
        limit = int(os.environ.get(MAX_LOGPROB_ENTRIES_ENV, DEFAULT_MAX_LOGPROB_ENTRIES))
        pool = int(self.scheduler_info.max_total_num_tokens or 0)
        token_limit = min(self.context_len, pool) if pool > 0 else self.context_len
        wide = [
            r for r in reqs if r.top_logprobs_num + len(r.token_ids_logprob or ()) > NARROW_LOGPROB_CANDIDATES
        ]
        total = sum(logprob_entries(r, token_limit) for r in wide)
        if total > limit:
            raise LogprobVolumeError(total, limit)

    def _tokenize_each(
        self, objs: Sequence[GenerateReqInput], text_ids: Sequence[list[int] | None]
    ) -> list[TokenizedGenerateReqInput]:
        """:meth:`_tokenize_one` of each single request of a batch, or of one request (``text_ids``: from
        :meth:`_encode_prompts`); the first refusal is raised with its position in ``objs`` as
        ``batch_index``.

        Raises:
            RequestError: as :meth:`_tokenize_one`.
        """
        out = []
        for pos, (o, ids) in enumerate(zip(objs, text_ids)):
            try:
                out.append(self._tokenize_one(o, ids))
            except RequestError as e:
                e.batch_index = pos
                raise
        return out

    def _tokenize_one(
        self, obj: GenerateReqInput, text_ids: list[int] | None = None
    ) -> TokenizedGenerateReqInput:
        """Validate and tokenize one normalized single request.

        This is where requests are validated, once, for the Engine and HTTP alike: the
        prompt-plus-completion length against the context (accepted up to exactly
        ``context_len``; only a ``max_new_tokens`` the request sets: an omitted one is the default
        capped to the room the prompt leaves, as in SGLang), the prompt with
        :meth:`SchedulerReadyInfo.check_input_ids` (the limits the scheduler reported at start-up;
        the scheduler re-checks with the same rule only to defend itself), then the sampling
        parameters (grammars only when the scheduler has a grammar backend), the KV pool, and the
        logprob options. ``text_ids``: the ids of
        ``obj.text`` when already tokenized (:meth:`encode_text`). With ``--allow-auto-truncate``
        the prompt and ``max_new_tokens`` are first cut to fit (:meth:`_fit_to_context`); the
        ``--preferred-sampling-params`` fill the keys the request's ``sampling_params`` leave out.

        Raises:
            RequestError: empty prompt, ids outside the vocabulary, prompt too long for the
                context, bad sampling parameters or logprob options (status 400).
        """
        if obj.input_ids is not None:
            ids = obj.input_ids
            if not isinstance(ids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in ids
            ):
                raise RequestError("input_ids must be a list of integers (or a list of such lists).")
            input_ids: list[int] = list(ids)  # type: ignore[arg-type]
            input_text = None
        else:
            if not isinstance(obj.text, str):
                raise RequestError("text must be a string (or a list of strings).")
            if self.tokenizer is None:
                raise RequestError(SKIP_TOKENIZER_TEXT_MSG)
            input_text = obj.text
            input_ids = text_ids if text_ids is not None else list(self.tokenizer.encode(input_text))
        raw = obj.sampling_params if obj.sampling_params is not None else {}
        # An omitted max_new_tokens is the default (128) capped to the room the prompt leaves
        # (the scheduler's max_new_tokens_for), as SGLang's scheduler caps it: only a value the
        # request sets is checked against the context and the pool.
        explicit = isinstance(raw, dict) and "max_new_tokens" in raw
        if self._auto_truncate():
            raw = dict(raw) if isinstance(raw, dict) else raw
            input_ids = self._fit_to_context(input_ids, raw)
        preferred = getattr(getattr(self, "server_args", None), "preferred_sampling_params", None)
        if preferred and isinstance(raw, dict):  # --preferred-sampling-params: the request's keys win
            raw = with_preferred(raw, preferred)
        sp_error: str | None = None
        try:
            sp = SamplingParams.from_dict(dict(raw) if isinstance(raw, dict) else raw)  # type: ignore[arg-type]
            sp.normalize(self.tokenizer)
            if self.tokenizer is None:
                check_tokenizer_free(sp)
            sp.verify(self.vocab_size, allow_grammar=self.grammar_enabled)
        except (TypeError, ValueError) as e:
            sp_error = f"Invalid sampling_params: {e}"
        if (
            sp_error is None
            and explicit
            and input_ids
            and len(input_ids) < self.context_len  # else the input alone is refused (check_input_ids)
            and sp.max_new_tokens is not None
            and sp.max_new_tokens + len(input_ids) > self.context_len
        ):
            raise RequestError(context_length_message(self.context_len, len(input_ids), sp.max_new_tokens))
        err = self.scheduler_info.check_input_ids(input_ids)
        if err is not None:
            raise RequestError(err)
        if sp_error is not None:
            raise RequestError(sp_error)
        pool = int(self.scheduler_info.max_total_num_tokens or 0)
        total = (sp.max_new_tokens or 0) + len(input_ids)
        if explicit and sp.max_new_tokens is not None and 0 < pool < self.context_len and total > pool:
            # the KV pool, not the context, bounds this server's requests (max_req_input_len too):
            # admitting it would only fail mid-generation and lose the tokens made so far. Up to
            # exactly ``pool`` fits (the last sampled token is never written to the KV cache), as
            # the scheduler's cap of an omitted max_new_tokens (``min(context_len, pool)``) and
            # the context check (up to exactly ``context_len``) allow
            raise RequestError(
                f"Requested token count exceeds the KV cache pool of {pool} tokens. You requested a "
                f"total of {total} tokens: {len(input_ids)} tokens from the input and "
                f"{sp.max_new_tokens} tokens for the completion. Please reduce the number of tokens "
                "in the input or the completion (or start the server with a larger --max-total-tokens)."
            )
        lsl = resolve_logprob_start_len(
            obj.logprob_start_len,
            len(input_ids),
            return_logprob=bool(obj.return_logprob),
            max_new_tokens=sp.max_new_tokens,
        )
        # SGLang's scheduler ignores logprob_start_len / top_logprobs_num of a request that asks
        # for no logprobs (sglang#16240): their ranges are checked only when they are used.
        # token_ids_logprob is validated either way, as SGLang's tokenizer manager does
        tln = obj.top_logprobs_num if obj.top_logprobs_num is not None else 0
        if isinstance(tln, bool) or not isinstance(tln, int):
            raise RequestError(f"top_logprobs_num must be an integer (got {tln!r}).")
        if not obj.return_logprob:
            tln = 0
        elif not 0 <= tln <= self.vocab_size:
            raise RequestError(
                f"top_logprobs_num must be an integer in [0, {self.vocab_size}] (got {tln!r})."
            )
        tids = obj.token_ids_logprob
        if tids is not None:
            if not isinstance(tids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < self.vocab_size for t in tids
            ):
                raise RequestError(
                    f"token_ids_logprob must be a list of token ids in [0, {self.vocab_size}) (got {tids!r})."
                )
            tids = list(tids) or None
        prio = obj.priority
        if prio is not None and (
            isinstance(prio, bool) or not isinstance(prio, int) or not -(1 << 63) <= prio < (1 << 63)
        ):
            raise RequestError(f"priority must be a signed 64-bit integer (got {prio!r}).")
        return TokenizedGenerateReqInput(
            rid=str(obj.rid),
            input_text=input_text,
            input_ids=input_ids,
            sampling_params=sp,
            return_logprob=bool(obj.return_logprob),
            logprob_start_len=lsl,
            top_logprobs_num=tln,
            token_ids_logprob=tids if obj.return_logprob else None,
            stream=bool(obj.stream),
            priority=prio,  # type: ignore[arg-type]
            extra_key=obj.extra_key or None,  # type: ignore[arg-type]
            return_text_in_logprobs=bool(obj.return_text_in_logprobs),
            return_input_token_ranks=bool(obj.return_input_token_ranks and obj.return_logprob),
            health_check=bool(obj.health_check),
        )


def resolve_logprob_start_len(
    value: object, num_input_tokens: int, *, return_logprob: bool, max_new_tokens: int | None
) -> int:
    """The first prompt position whose logprob a request gets, ``-1`` for none.

    SGLang's rules (``Scheduler.handle_generate_request``): ``-1`` means output logprobs only;
    ``0 <= value < num_input_tokens`` returns prompt positions ``value ..`` (position 0's logprob is
    ``None``); ``value == num_input_tokens`` is accepted and returns no prompt logprobs (as ``-1``);
    a larger value is an error. Without ``return_logprob`` any integer is ignored (``-1``), as
    SGLang's scheduler resets it. One addition: when ``value`` is not given (``None``), the request
    asks for logprobs and generates nothing (``max_new_tokens == 0``), the prompt's logprobs from
    position 0 are returned, since output-only logprobs would be empty. The SGLang frontend relies
    on this: ``RuntimeEndpoint.select`` with ``unconditional_likelihood_normalized`` sends exactly
    such a request and reads ``input_token_logprobs`` from position 0 ("the first unconditional
    token logprob is assumed to be None").

    Args:
        value: the request's ``logprob_start_len`` (``None`` when not given).
        num_input_tokens: prompt length in tokens.
        return_logprob: whether the request asks for logprobs.
        max_new_tokens: the request's ``max_new_tokens`` (``None``: unbounded or invalid).

    Returns:
        ``-1`` (no prompt logprobs) or a position in ``[0, num_input_tokens)``.

    Raises:
        RequestError: ``value`` is not an integer, or (with ``return_logprob``) is below ``-1`` or
            exceeds ``num_input_tokens``.
    """
    if value is None:
        return 0 if return_logprob and max_new_tokens == 0 else -1
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"logprob_start_len must be an integer >= -1 (got {value!r}).")
    if not return_logprob:
        return -1  # SGLang ignores it without return_logprob (its scheduler sets -1; sglang#16240)
    if value < -1:
        raise RequestError(f"logprob_start_len must be an integer >= -1 (got {value!r}).")
    if value > num_input_tokens:
        raise RequestError(
            f"logprob_start_len ({value}) must not exceed the number of input tokens ({num_input_tokens})."
        )
    return -1 if value == num_input_tokens else value

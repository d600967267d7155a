"""``POST /v1/completions`` (OpenAI's legacy completions, SGLang's extra sampling fields).

A text or token-id prompt (or a batch of them), ``n`` samples each, ``echo``, legacy ``logprobs``,
``suffix`` (DeepSeek's fill-in-the-middle prompt, :mod:`sglang_v4.entrypoints.fim_prompt`),
``response_format`` (``json_object`` / ``json_schema``: constrained decoding), ``best_of`` (the best
``n`` of ``best_of`` candidates by mean token logprob; not streamable), streaming with
``stream_options.include_usage``, vLLM's ``prompt_logprobs`` per choice (:mod:`.prompt_logprobs`).
See :mod:`.serving_base` for the shared request handling.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from sglang_v4.entrypoints.fim_prompt import fim_token_ids, render_fim_prompt
from sglang_v4.entrypoints.openai.logprob_limits import (
    check_completion_logprobs,
    logprob_volume_error,
    logprob_volume_field,
)
from sglang_v4.entrypoints.openai.logprob_tokens import TokenPiece, TokenTextSplitter
from sglang_v4.entrypoints.openai.prompt_logprobs import (
    check_prompt_logprobs,
    prompt_logprobs_engine_fields,
    vllm_prompt_logprobs,
)
from sglang_v4.entrypoints.openai.protocol import (
    CompletionRequest,
    CompletionResponse,
    CompletionResponseChoice,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
    LogProbs,
)
from sglang_v4.entrypoints.openai.request_errors import check_token_ids_in_vocab
from sglang_v4.entrypoints.openai.request_sampling import unset_preferred_keys
from sglang_v4.entrypoints.openai.serving_base import (
    OpenAIServingBase,
    RequestError,
    grammar_error_for,
)
from sglang_v4.entrypoints.openai.serving_outputs import (
    _SSE_DONE,
    NO_FINISH_MSG,
    _abort_error,
    _engine_outputs,
    _finish,
    _lp_entry,
    _sse,
    _sse_failure,
    internal_stream_error,
    openai_logprob,
)
from sglang_v4.entrypoints.openai.vllm_fields import (
    cache_namespace,
    stop_reason,
    token_id_text,
    truncate_prompt_ids,
    vllm_grammar_field,
)
from sglang_v4.entrypoints.sse_keep_alive import close_generation
from sglang_v4.entrypoints.sse_response import ClosingStreamingResponse
from sglang_v4.managers.tokenization import LogprobVolumeError
from sglang_v4.sampling.sampling_params import MAX_N

__all__ = ["CompletionsMixin", "name_prompt_entry", "select_best_of"]


class CompletionsMixin(OpenAIServingBase):
    """The ``/v1/completions`` route (mixed into :class:`~.serving.OpenAIServing`)."""

    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions``."""
        return await self._guard(request, self._completions)

    async def _completions(self, request: Request) -> Response:
        from sglang_v4.managers.io_struct import GenerateReqInput

        req: CompletionRequest = await self._parse(request, CompletionRequest)
        self._check_model(req.model)
        bound = self._max_logprobs()
        # -1 ("every token") resolved to its count here, so every later use reads a count
        req.logprobs = check_completion_logprobs(req.logprobs, bound, self._vocab_size())
        prompt_lps = check_prompt_logprobs(req, self._vocab_size(), bound)
        # chat's max_completion_tokens is the same limit; it wins over max_tokens when both are set
        limit_field = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
        if limit_field == "max_completion_tokens":  # (an assignment marks max_tokens as sent)
            req.max_tokens = req.max_completion_tokens
        if req.max_tokens is not None and req.max_tokens < 0:
            raise RequestError(f"{limit_field} must be at least 0, got {req.max_tokens}.", param=limit_field)
        prompt = req.prompt
        # checked in the shape the client sent, so a batch of one (["x"], [[ids]]) is named as a
        # batch too: prompt[0] / prompt[0][j]
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):  # a batch
            empty = next((i for i, p in enumerate(prompt) if p in ("", [])), None)
            if empty is not None:
                raise RequestError(f"prompt[{empty}] must not be empty.", param="prompt")
            if isinstance(prompt[0], list):  # token-id lists
                check_token_ids_in_vocab(prompt, True, self._vocab_size(), "prompt")
        elif prompt == "" or prompt == []:
            raise RequestError("prompt must not be empty.", param="prompt")
        elif isinstance(prompt, list):  # one prompt of token ids
            check_token_ids_in_vocab([prompt], False, self._vocab_size(), "prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if req.suffix:
            prompt = self._fim_prompt(req, prompt)
        is_text = isinstance(prompt, str) or (isinstance(prompt, list) and isinstance(prompt[0], str))
        sp = self._sampling_params(req, req.max_tokens)
        n = req.n or 1
        best_of = _check_best_of(req, n)
        if best_of > n:
            sp["n"] = best_of  # generate best_of candidates per prompt, return the best n
        return_logprob = req.logprobs is not None
        kw: dict[str, Any] = dict(
            sampling_params=sp,
            return_logprob=return_logprob or best_of > n,  # candidates are ranked by logprob
            top_logprobs_num=req.logprobs or 0,
            logprob_start_len=0 if (req.echo and return_logprob) else -1,
            return_text_in_logprobs=True,
            stream=req.stream,
            rid=req.rid,
        )
        if prompt_lps is not None:
            kw.update(prompt_logprobs_engine_fields(prompt_lps, kw["top_logprobs_num"]))
        if req.priority is not None:
            kw["priority"] = req.priority
        kw["extra_key"] = cache_namespace(req)
        prompts = (
            [prompt] if (isinstance(prompt, str) or (prompt and isinstance(prompt[0], int))) else list(prompt)
        )
        prompt_ids: list[list[int]] | None = None
        truncate = req.truncate_prompt_tokens
        if req.return_token_ids or truncate is not None or not req.add_special_tokens:
            # the ids are needed here: tokenize text prompts as /generate would (BOS as vLLM's
            # add_special_tokens says), cut each to truncate_prompt_tokens (vLLM's truncation_side)
            ids = [await self._prompt_ids(req, p, i) for i, p in enumerate(prompts)]
            if truncate is not None:
                ctx = self._context_len()
                cut = [truncate_prompt_ids(x, truncate, req.truncation_side, ctx) for x in ids]
                # echo shows the prompt the model read: a truncated one is decoded from its ids
                prompts = [c if len(c) < len(x) else p for c, x, p in zip(cut, ids, prompts)]
                ids = cut
            prompt, is_text = (ids if len(prompts) > 1 else ids[0]), False
            prompt_ids = ids if req.return_token_ids else None
        obj = GenerateReqInput(text=prompt, **kw) if is_text else GenerateReqInput(input_ids=prompt, **kw)
        grammar_field = "response_format" if req.response_format else vllm_grammar_field(req)
        try:
            if req.stream:
                return await self._completions_stream(
                    req, obj, prompts, n, request, prompt_ids, grammar_field
                )
            rets = await self._collect(obj, request)
        except RequestError as e:
            raise name_prompt_entry(grammar_error_for(e, grammar_field), req.prompt) from None
        except LogprobVolumeError as e:
            raise logprob_volume_error(
                e, logprob_volume_field("logprobs", req.logprobs, prompt_lps)
            ) from None
        usage = self._usage(rets, best_of)  # every generated candidate counts
        if best_of > n:
            rets = select_best_of(rets, best_of, n)
        choices = []
        for idx, ret in enumerate(rets):
            meta = ret.get("meta_info", {})
            prefix = self._prompt_text(prompts, idx, n) if req.echo else ""
            lp = None
            if return_logprob:
                state = _ChoiceLogprobs(
                    output=self._logprob_splitter(req.skip_special_tokens),
                    as_ids=bool(req.return_tokens_as_token_ids),
                )
                lp = self._completion_logprobs(
                    meta, state, ret.get("text", ""), True, prefix if req.echo else None, req.logprobs
                )
            fr, matched = _finish(meta)
            choices.append(
                CompletionResponseChoice(
                    index=idx,
                    text=prefix + ret.get("text", ""),
                    logprobs=lp,
                    finish_reason=fr,
                    matched_stop=matched,
                    stop_reason=stop_reason(fr, matched, req.stop_token_ids),
                    token_ids=list(ret.get("output_ids") or []) if prompt_ids is not None else None,
                    prompt_token_ids=_nth_prompt(prompt_ids, idx, n),
                    prompt_logprobs=vllm_prompt_logprobs(meta, prompt_lps)
                    if prompt_lps is not None
                    else None,
                )
            )
        resp = CompletionResponse(
            id=f"cmpl-{req.request_id or uuid.uuid4().hex}", model=req.model, choices=choices, usage=usage
        )
        return JSONResponse(resp.model_dump(mode="json"))

    async def _prompt_ids(self, req: CompletionRequest, prompt: str | list[int], i: int) -> list[int]:
        """The token ids of prompt ``i`` (a text tokenized as ``/generate`` would, BOS as
        ``add_special_tokens`` says; token ids as given).

        Raises:
            RequestError: 400: the text provably cannot fit in the context, naming ``prompt[i]``
                where the client sent a list of prompts (:func:`name_prompt_entry`).
        """
        if not isinstance(prompt, str):
            return list(prompt)
        try:
            # a limit left to --preferred-sampling-params is capped to the room, as an omitted one
            preferred = getattr(self.args, "preferred_sampling_params", None)
            limit = None if "max_new_tokens" in unset_preferred_keys(req, preferred, {}) else req.max_tokens
            return await self._encode_prompt(prompt, limit, add_special_tokens=req.add_special_tokens)
        except ValueError as e:
            status = int(getattr(e, "status_code", 400) or 400)
            err = RequestError(str(e), status)
            err.batch_index = i
            raise name_prompt_entry(err, req.prompt) from None

    def _fim_prompt(self, req: CompletionRequest, prompt: str | list[Any]) -> str | list[str]:
        """The fill-in-the-middle prompt(s) of a request with ``suffix`` (:mod:`..fim_prompt`):
        each text prompt rendered around the gap before ``suffix``.

        Raises:
            RequestError: 400 naming ``suffix``: the tokenizer has no FIM tokens, a prompt is
                token ids (the text between the markers must be text), or ``echo`` is set (the
                answer is the middle; the FIM prompt is no prefix of it).
        """
        if fim_token_ids(self.tokenizer) is None:
            raise RequestError(
                "suffix is not supported: the tokenizer has no fill-in-the-middle tokens.", param="suffix"
            )
        if req.echo:
            raise RequestError("suffix cannot be combined with echo.", param="suffix")
        texts = [prompt] if isinstance(prompt, str) else list(prompt)
        if not all(isinstance(p, str) for p in texts):
            raise RequestError("suffix needs a text prompt, not token ids.", param="suffix")
        rendered = [render_fim_prompt(p, req.suffix or "") for p in texts]
        return rendered[0] if isinstance(prompt, str) else rendered

    def _prompt_text(self, prompts: list[Any], idx: int, n: int) -> str:
        # The tokenizer manager returns a batch with n samples grouped by prompt: [p0 x n, p1 x n, ...].
        p = prompts[min(idx // max(n, 1), len(prompts) - 1)]
        if isinstance(p, str):
            return p
        tok = self.tokenizer
        return tok.decode(list(p)) if tok is not None else ""

    def _logprob_splitter(self, skip_special_tokens: bool) -> TokenTextSplitter | None:
        tok = self.tokenizer
        return TokenTextSplitter(tok, skip_special_tokens) if tok is not None else None

    def _completion_logprobs(
        self,
        meta: dict[str, Any],
        state: _ChoiceLogprobs,
        out_text: str,
        final: bool,
        echo_text: str | None = None,
        num_top: int | None = None,
    ) -> LogProbs:
        """Legacy completions ``logprobs`` of one choice's new tokens: the prompt's tokens first
        when ``echo_text`` (the echoed prompt) is given, then the output tokens not yet sent
        (``state``, updated).

        ``tokens`` are each token's part of the choice's text (:mod:`.logprob_tokens`): joined,
        they are the echoed prompt plus ``out_text`` (the cumulative output text; ``final``: it is
        complete). ``text_offset`` is each token's character position in the choice's whole text,
        continuing over a stream's chunks as OpenAI's do. Streamed (``final`` false), an output
        token is sent with the first chunk whose text holds its text (:meth:`TokenTextSplitter.ready`):
        a token of text held back as a possible stop string, or of an incomplete character, waits
        (``state.held``), so the streamed ``tokens`` join to the streamed text and a trimmed stop
        string's tokens never carry its text (vllm-project/vllm#3574 for the logprobs). ``top_logprobs`` holds the
        ``logprobs`` most likely tokens *and* the sampled one (up to ``logprobs + 1`` entries),
        as OpenAI documents the field and vLLM returns it; a dict with only the sampled
        token for ``logprobs: 0``; ``None`` for the echoed prompt's first token (no logprob).
        ``num_top``: the request's ``logprobs``, where the engine's top lists may be longer (it
        computed more for ``prompt_logprobs``); ``None`` keeps them whole.
        """
        lp = LogProbs()
        segments: list[tuple[list[Any], list[Any], TokenTextSplitter | None, str, bool]] = []
        if echo_text is not None:
            ins = list(meta.get("input_token_logprobs") or [])
            itop = list(meta.get("input_top_logprobs") or [])
            segments.append((ins, itop, self._logprob_splitter(False), echo_text, True))
        outs = list(meta.get("output_token_logprobs") or [])[state.sent :]
        otop = list(meta.get("output_top_logprobs") or [])[state.sent :]
        state.sent += len(outs)
        segments.append((outs, otop, state.output, out_text, final))
        for seg, (entries, tops, splitter, text, done) in enumerate(segments):
            parsed = [_lp_entry(e) for e in entries]
            tops = tops + [None] * (len(parsed) - len(tops))
            cands = [[_lp_entry(c) for c in (top or [])[:num_top]] for top in tops]
            if splitter is not None:
                pieces = [splitter.add(tid, [c[1] for c in cs]) for (_, tid, _), cs in zip(parsed, cands)]
                rows = list(zip(parsed, cands, pieces))
                if seg == len(segments) - 1:  # the output: tokens whose text is not sent yet wait
                    rows = state.held + rows
                    keep = len(rows) if done else splitter.ready([r[2] for r in rows], text)
                    rows, state.held = rows[:keep], rows[keep:]
                pieces = splitter.finish([r[2] for r in rows], text, done)
                parsed, cands = [r[0] for r in rows], [r[1] for r in rows]
            else:
                pieces = [TokenPiece(tid, self._token_text(tid, t)) for _, tid, t in parsed]
            for (logprob, _, _), cs, piece in zip(parsed, cands, pieces):
                lp.tokens.append(token_id_text(piece.token_id) if state.as_ids else piece.text)
                # None only for the prompt's first token (echo): it has no logprob, as in OpenAI's API
                lp.token_logprobs.append(None if logprob is None else openai_logprob(logprob))
                lp.text_offset.append(state.offset)
                state.offset += len(piece.text)
                lp.top_logprobs.append(
                    None if logprob is None else self._top_dict(piece, logprob, cs, state.as_ids)
                )
        return lp

    def _top_dict(
        self,
        piece: TokenPiece,
        logprob: float,
        cands: list[tuple[float | None, int, str | None]],
        as_ids: bool = False,
    ) -> dict[str, float]:
        """One position's ``top_logprobs``: the candidates in rank order, then the sampled token
        when it is not among them. Keyed by token text, as OpenAI's legacy field is: candidates
        whose texts collide keep the best-ranked one's logprob (SGLang #32290: the last, lowest one
        overwrote it), except that the sampled token's text always maps to its own logprob."""
        if not any(ti == piece.token_id for _, ti, _ in cands):
            cands = [*cands, (logprob, piece.token_id, None)]
        d: dict[str, float] = {}
        for tl, ti, tt in cands:
            if tl is None:
                continue
            key = token_id_text(ti) if as_ids else piece.alternatives.get(ti)
            if key is None:
                key = self._token_text(ti, tt)
            if ti == piece.token_id:
                d[key] = openai_logprob(logprob)
            else:
                d.setdefault(key, openai_logprob(tl))
        return d

    async def _completions_stream(
        self,
        req: CompletionRequest,
        obj: Any,
        prompts: list[Any],
        n: int,
        raw: Request,
        prompt_ids: list[list[int]] | None = None,
        grammar_field: str | None = None,
    ) -> Response:
        """The SSE answer; ``prompt_ids`` (``return_token_ids``): each prompt's ids, sent with its
        choices' first chunks, the generated ids since the previous chunk in each chunk. A
        generation that fails after its first output ends the stream with an error event named
        as the non-streamed answer's error (:func:`~.serving_outputs.stream_failure`: a grammar error
        names ``grammar_field``); any other exception, or outputs that end before every choice has
        its finish reason, with a 500 error event (:func:`~.serving_outputs.internal_stream_error`,
        :data:`~.serving_outputs.NO_FINISH_MSG`): never like a completed stream."""
        gen, first = await self._run_stream(obj, raw)
        rid = f"cmpl-{req.request_id or uuid.uuid4().hex}"
        created = int(time.time())
        include_usage, continuous = self._stream_usage(req)

        async def stream() -> AsyncIterator[bytes]:
            sent_text: dict[int, int] = {}
            lp_states: dict[int, _ChoiceLogprobs] = {}  # logprob tokens sent (text_offset)
            sent_ids: dict[int, int] = {}  # generated ids sent (return_token_ids)
            finals: dict[int, dict[str, Any]] = {}
            try:
                async for item in _engine_outputs(gen, first):
                    for ret in item if isinstance(item, list) else [item]:
                        idx = int(ret.get("index", 0))
                        meta = ret.get("meta_info", {})
                        abort = _abort_error(meta)
                        if abort is not None:
                            yield _sse_failure(abort, grammar_field)
                            finals[idx] = ret
                            continue
                        text = ret.get("text", "")
                        prefix = ""
                        first_chunk = idx not in sent_text
                        if first_chunk:
                            sent_text[idx] = 0
                            lp_states[idx] = _ChoiceLogprobs(
                                output=self._logprob_splitter(req.skip_special_tokens),
                                as_ids=bool(req.return_tokens_as_token_ids),
                            )
                            if req.echo:
                                prefix = self._prompt_text(prompts, idx, n)
                        delta = text[sent_text[idx] :] if len(text) >= sent_text[idx] else ""
                        sent_text[idx] = max(sent_text[idx], len(text))
                        lp = None
                        fr, matched = _finish(meta)
                        if req.logprobs is not None:
                            lp = self._completion_logprobs(
                                meta,
                                lp_states[idx],
                                text,
                                fr is not None,
                                prefix if req.echo and first_chunk else None,
                            )
                        if fr is not None:
                            finals[idx] = ret
                        new_ids = None
                        if prompt_ids is not None:
                            out_ids = list(ret.get("output_ids") or [])
                            new_ids = out_ids[sent_ids.get(idx, 0) :]
                            sent_ids[idx] = max(sent_ids.get(idx, 0), len(out_ids))
                        if not (
                            prefix
                            or delta
                            or fr
                            or (lp and lp.tokens)
                            or new_ids
                            or (first_chunk and prompt_ids)
                        ):
                            continue
                        chunk = CompletionStreamResponse(
                            id=rid,
                            created=created,
                            model=req.model,
                            choices=[
                                CompletionResponseStreamChoice(
                                    index=idx,
                                    text=prefix + delta,
                                    logprobs=lp,
                                    finish_reason=fr,
                                    matched_stop=matched,
                                    stop_reason=stop_reason(fr, matched, req.stop_token_ids),
                                    token_ids=new_ids,
                                    prompt_token_ids=_nth_prompt(prompt_ids, idx, n) if first_chunk else None,
                                )
                            ],
                            usage=self._usage([ret], 1) if continuous else None,
                        )
                        yield _sse(chunk)
                if len(finals) < len(prompts) * n:
                    # the engine's outputs ended before every choice finished: not a completion
                    yield _sse_failure(RequestError(NO_FINISH_MSG, 500), None)
                elif include_usage:
                    rets = [finals[i] for i in sorted(finals)]
                    yield _sse(
                        CompletionStreamResponse(
                            id=rid, created=created, model=req.model, choices=[], usage=self._usage(rets, n)
                        )
                    )
            except ValueError as e:
                yield _sse_failure(e, grammar_field)
            except Exception as e:  # noqa: BLE001 - any failure ends the stream with an error event
                yield _sse_failure(internal_stream_error(e), None)
            finally:
                await gen.aclose()  # client gone or error: the tokenizer manager aborts the request
            yield _SSE_DONE

        # a body closed before its first step never reaches the finally above
        return ClosingStreamingResponse(
            stream(), media_type="text/event-stream", on_close=partial(close_generation, gen, first)
        )


@dataclass
class _ChoiceLogprobs:
    """What of one choice's legacy ``logprobs`` has been sent: the output entries (``sent``), the
    characters their tokens cover (``offset``: the next ``text_offset``) and the output's
    :class:`TokenTextSplitter` (``None`` without a tokenizer)."""

    output: TokenTextSplitter | None
    sent: int = 0
    offset: int = 0
    #: vLLM's ``return_tokens_as_token_ids``: ``tokens`` and ``top_logprobs`` keys written
    #: ``token_id:<id>`` (``text_offset`` still counts the choice's text)
    as_ids: bool = False
    #: output tokens received but not sent: a streamed token goes out once the streamed text
    #: holds its text (its parsed entry, its candidates, its piece)
    held: list[tuple[Any, Any, TokenPiece]] = field(default_factory=list)


def _nth_prompt(prompt_ids: list[list[int]] | None, idx: int, n: int) -> list[int] | None:
    """The prompt ids of choice ``idx`` (``n`` choices per prompt, prompt-major), or None."""
    if prompt_ids is None:
        return None
    return list(prompt_ids[min(idx // max(n, 1), len(prompt_ids) - 1)])


def _check_best_of(req: CompletionRequest, n: int) -> int:
    """The number of candidates generated per prompt: ``best_of`` (OpenAI's field) or ``n``.

    OpenAI documents that ``best_of`` generates that many completions server-side and returns the
    best ``n`` of them (the highest log probability per token), that it must be at least ``n`` and
    that such results cannot be streamed.

    Raises:
        RequestError: 400 naming ``best_of`` when it is below ``n`` or above ``MAX_N``, or when a
            streamed request asks for more candidates than it returns.
    """
    if req.best_of is None:
        return n
    if req.best_of < n:
        raise RequestError(
            f"best_of must be greater than or equal to n, got best_of={req.best_of} and n={n}.",
            param="best_of",
        )
    if req.best_of > MAX_N:
        raise RequestError(f"best_of must be at most {MAX_N}, got {req.best_of}.", param="best_of")
    if req.stream and req.best_of > n:
        raise RequestError("best_of greater than n cannot be used with stream: true.", param="best_of")
    return req.best_of


def name_prompt_entry(e: RequestError, sent: Any) -> RequestError:
    """``e`` with the prompt it is about appended to its message (``"... (batch entry
    prompt[2])"``, as ``/generate`` names ``text[2]``), where the tokenizer manager refused one
    prompt (``e.batch_index``) of a list of prompts (``sent``: the request's ``prompt`` as the
    client sent it; a list of one is named too, as the route's own checks do); else ``e``
    unchanged. The message keeps its text (clients match SGLang's / OpenAI's wording), the status
    and the type too; the param is ``prompt`` unless the message named another field."""
    i = e.batch_index
    batch = isinstance(sent, list) and bool(sent) and isinstance(sent[0], (str, list))
    if i is None or not batch or not 0 <= i < len(sent):
        return e
    named = RequestError(f"{e.message} (batch entry prompt[{i}])", e.status, e.err_type, e.param or "prompt")
    named.batch_index = i
    return named


def select_best_of(rets: list[dict[str, Any]], best_of: int, n: int) -> list[dict[str, Any]]:
    """The ``n`` best of every ``best_of`` consecutive candidates (one group per prompt).

    ``rets`` holds the tokenizer manager's outputs grouped by prompt (``[p0 x best_of, p1 x
    best_of, ...]``), each with ``meta_info.output_token_logprobs`` (entries ``(logprob, id,
    text)``, natural-log probabilities). A candidate's score is its mean output-token logprob
    (OpenAI: "the highest log probability per token"); one without output tokens scores 0 (its
    probability is 1). Within a group the best come first; ties keep generation order.
    """
    out: list[dict[str, Any]] = []
    for g in range(0, len(rets), best_of):
        group = rets[g : g + best_of]
        out += sorted(group, key=lambda r: -_mean_logprob(r))[:n]
    return out


def _mean_logprob(ret: dict[str, Any]) -> float:
    vals = [_lp_entry(e)[0] for e in (ret.get("meta_info", {}).get("output_token_logprobs") or [])]
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else 0.0

"""The streamed answer of ``POST /v1/chat/completions`` and the readers of a choice's output.

:class:`ChatStreamMixin` writes the SSE chunks of a chat run (:meth:`~ChatStreamMixin._chat_stream`:
the role chunk, reasoning / content / tool-call deltas, the finish chunk with its
``finish_reason`` and ``matched_stop``, the usage chunk, in-stream errors) and reads one engine
output of a streamed choice at a time (:meth:`~ChatStreamMixin._read_output`: the reasoning split
off, DSML tool calls parsed incrementally), which the Responses and Anthropic Messages streams
share. The chat ``logprobs`` and the reasoning-token count of an output are read here too, for the
non-streamed answer as well; streamed, a token's logprob record rides on the chunk that sends its
text (a token whose text the detokenizer holds back waits for it). The route, the request checks
and the non-streamed answer are in :mod:`.serving_chat`, whose docstring states the route's
behaviour (tool calls, reasoning, stops), streamed or not.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from sglang_v4.entrypoints.chat_encoding import DSML, EOS, THINK_END
from sglang_v4.entrypoints.openai.chat_prepare import ChatPlan, ChatPrepareMixin, ChatRun, chat_echo_text
from sglang_v4.entrypoints.openai.dsml_markup import DsmlAnswerReader, DsmlMarkupScrub
from sglang_v4.entrypoints.openai.logprob_tokens import TokenPiece, TokenTextSplitter
from sglang_v4.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
    ChatCompletionTokenLogprob,
    ChoiceLogprobs,
    CustomToolCall,
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    TopLogprob,
)
from sglang_v4.entrypoints.openai.reasoning_parser import ReasoningParser
from sglang_v4.entrypoints.openai.request_errors import RequestError
from sglang_v4.entrypoints.openai.responses_custom_tools import CustomInputStream
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
from sglang_v4.entrypoints.openai.tool_parser import TOOL_CALL_PARSERS, ToolCallDelta
from sglang_v4.entrypoints.openai.vllm_fields import stop_reason, token_id_text
from sglang_v4.entrypoints.sse_keep_alive import close_generation
from sglang_v4.entrypoints.sse_response import ClosingStreamingResponse

__all__ = ["ChatStreamMixin"]


@dataclass
class _ChoiceStream:
    """Per-choice state of a streamed chat response."""

    reasoning: ReasoningParser | None
    tools: DsmlAnswerReader | None
    sent_text: int = 0
    sent_lp: int = 0
    reasoning_text: str = ""  # the reasoning sent (DSML tags scrubbed)
    reasoning_raw: str = ""  # the reasoning as generated (DSML tags kept)
    reasoning_scrub: DsmlMarkupScrub = field(default_factory=DsmlMarkupScrub)
    started_calls: set[int] = field(default_factory=set)
    #: a custom tool's calls (by index): their ``input`` text read from the argument fragments
    custom_inputs: dict[int, CustomInputStream] = field(default_factory=dict)
    sent_ids: int = 0  # generated ids sent in chunks' ``token_ids`` (return_token_ids)
    #: the output tokens' pieces of the text (``logprobs``): a token's record waits in
    #: ``lp_held`` until the engine's text holds its piece (:meth:`ChatStreamMixin._logprobs_ready`)
    lp_split: TokenTextSplitter | None = None
    lp_held: list[TokenPiece] = field(default_factory=list)
    lp_added: int = 0  # the engine's logprob records given to ``lp_split``


class ChatStreamMixin(ChatPrepareMixin):
    """The streamed ``/v1/chat/completions`` answer and the output readers of a chat choice
    (mixed into :class:`~.serving_chat.ChatMixin`)."""

    def _reasoning_tokens(self, output_ids: list[int], reasoning: str | None) -> int:
        """Generated tokens of the reasoning block: up to and including the first ``</think>``;
        up to the DSML block when that ended it; all of them when it never ended; none when the
        output was the answer (``reasoning`` empty)."""
        if not reasoning:
            return 0
        tok = self.tokenizer
        for marker, extra in ((THINK_END, 1), (DSML, -1)):
            tid = tok.convert_tokens_to_ids(marker) if tok is not None else None
            if isinstance(tid, int) and tid in output_ids:
                return max(output_ids.index(tid) + extra, 0)
        return len(output_ids)

    def _logprobs_ready(
        self, st: _ChoiceStream, meta: dict[str, Any], text: str, final: bool, skip_special: bool
    ) -> int:
        """How many of the choice's output logprob records a streamed chunk may carry: those of
        the tokens whose text the engine's cumulative output ``text`` already holds (their pieces,
        :class:`~.logprob_tokens.TokenTextSplitter`), all of them once the output is ``final``.
        A token whose text the detokenizer holds back (a possible stop string, an incomplete
        character) waits for the chunk that sends its text, so a chunk's ``logprobs.content`` is
        the tokens of its own delta (vllm-project/vllm#31135), as the completions route's stream
        sends them. Without a tokenizer every record is ready."""
        records = meta.get("output_token_logprobs") or []
        tok = self.tokenizer
        if tok is None:
            return max(st.sent_lp, len(records))
        if st.lp_split is None:
            st.lp_split = TokenTextSplitter(tok, skip_special)
        for e in records[st.lp_added :]:
            st.lp_held.append(st.lp_split.add(_lp_entry(e)[1]))
        st.lp_added = max(st.lp_added, len(records))
        keep = len(st.lp_held) if final else st.lp_split.ready(st.lp_held, text)
        st.lp_split.finish(st.lp_held[:keep], text, final)
        st.lp_held = st.lp_held[keep:]
        return st.lp_added - len(st.lp_held)

    def _chat_logprobs(
        self,
        meta: dict[str, Any],
        start: int,
        as_ids: bool = False,
        num_top: int | None = None,
        end: int | None = None,
    ) -> ChoiceLogprobs:
        """Chat ``logprobs`` of the output tokens from ``start`` on; ``as_ids`` (vLLM's
        ``return_tokens_as_token_ids``): each ``token`` written ``token_id:<id>``, its ``bytes``
        those of that text, as vLLM writes them. ``num_top``: the request's ``top_logprobs``,
        where the engine's top lists may be longer (it computed more for ``prompt_logprobs``);
        ``None`` keeps them whole. ``end``: the records from ``end`` on are left out (not ready)."""
        outs = [_lp_entry(e) for e in (meta.get("output_token_logprobs") or [])][start:end]
        tops = [t[:num_top] if t else t for t in list(meta.get("output_top_logprobs") or [])[start:end]]
        tops += [None] * (len(outs) - len(tops))
        content = []
        for (logprob, tid, text), top in zip(outs, tops):
            tok = token_id_text(tid) if as_ids else self._token_text(tid, text)
            tl_list = []
            for e in top or []:
                tl, ti, tt = _lp_entry(e)
                ttok = token_id_text(ti) if as_ids else self._token_text(ti, tt)
                tl_list.append(
                    TopLogprob(
                        token=ttok,
                        bytes=list(ttok.encode()) if as_ids else self._token_bytes(ti, ttok),
                        logprob=openai_logprob(tl if tl is not None else float("-inf")),
                    )
                )
            content.append(
                ChatCompletionTokenLogprob(
                    token=tok,
                    bytes=list(tok.encode()) if as_ids else self._token_bytes(tid, tok),
                    logprob=openai_logprob(logprob if logprob is not None else float("-inf")),
                    top_logprobs=tl_list,
                )
            )
        return ChoiceLogprobs(content=content)

    async def _chat_stream(self, req: ChatCompletionRequest, run: ChatRun, raw: Request) -> Response:
        """The SSE answer of ``run``. A generation that fails after its first output ends the
        stream with an error event named as the non-streamed answer's error
        (:func:`~.serving_outputs.stream_failure`: a grammar error names ``run.grammar_field``);
        any other exception of the generation ends it with a 500 error event
        (:func:`~.serving_outputs.internal_stream_error`), and outputs that end before every
        choice has its finish reason with one too: a stream that did not complete never ends
        like one that did (vllm-project/vllm#57082: an aborted stream read as a finished one).

        Token ids go where vLLM streams them: with ``return_token_ids`` (or SGLang's
        ``return_prompt_token_ids``) each choice's role chunk has the prompt's ids as its top-level
        ``prompt_token_ids``; with ``return_token_ids`` the first chunk sent for an engine output
        has the ids generated since the last chunk as the choice's ``token_ids`` (EOS and
        reasoning / tool-call markup included), so that a choice's ``token_ids`` joined are its
        non-streamed ``token_ids``."""
        n, plan, separate = run.n, run.plan, run.separate
        gen, first = await self._run_stream(run.obj, raw)
        rid = f"chatcmpl-{req.request_id or uuid.uuid4().hex}"
        created = int(time.time())
        echo = chat_echo_text(req)
        include_usage, continuous = self._stream_usage(req)
        block = TOOL_CALL_PARSERS[self.tool_call_parser]
        want_prompt_ids = req.return_token_ids or req.return_prompt_token_ids
        prompt_ids = list(run.prompt_ids) if want_prompt_ids and run.prompt_ids is not None else None
        #: per choice: the generated ids not yet sent in a chunk (return_token_ids)
        pending_ids: dict[int, list[int]] = {}

        def chunk(
            idx: int,
            delta: DeltaMessage,
            meta: dict[str, Any] | None = None,
            first: bool = False,
            **kw: Any,
        ) -> bytes:
            ids = pending_ids.pop(idx, None) if req.return_token_ids and not first else None
            return _sse(
                ChatCompletionStreamResponse(
                    id=rid,
                    created=created,
                    model=req.model,
                    service_tier=req.service_tier,
                    choices=[
                        ChatCompletionResponseStreamChoice(
                            index=idx, delta=delta, token_ids=ids or None, **kw
                        )
                    ],
                    prompt_token_ids=prompt_ids if first else None,
                    usage=self._usage(
                        [{"meta_info": meta}], 1, [running_rt.get(idx, 0)] if separate else None
                    )
                    if continuous and meta is not None
                    else None,
                )
            )

        #: per choice: its generated tokens of the reasoning block so far (continuous usage stats
        #: count them as the final usage does)
        running_rt: dict[int, int] = {}

        def new_state() -> _ChoiceStream:
            rp = ReasoningParser.answer() if plan.reasoning.answer_only else None
            if separate:
                rp = ReasoningParser(
                    stream_reasoning=req.stream_reasoning,
                    implicit_end=plan.reasoning.implicit_end,
                    continued=plan.reasoning.continued,
                )
            return _ChoiceStream(rp, plan.tool_reader(block))

        async def stream() -> AsyncIterator[bytes]:
            states: dict[int, _ChoiceStream] = {}
            finals: dict[int, dict[str, Any]] = {}
            reasoning_tokens: dict[int, int] = {}
            try:
                async for item in _engine_outputs(gen, first):
                    for ret in item if isinstance(item, list) else [item]:
                        idx = int(ret.get("index", 0))
                        meta = ret.get("meta_info", {})
                        abort = _abort_error(meta)
                        if abort is not None:
                            yield _sse_failure(abort, run.grammar_field)
                            finals[idx] = ret
                            continue
                        if not states:
                            # every choice's role chunk first, in index order (as vLLM and
                            # OpenAI send them): the engine's outputs of n choices come in any
                            # order, and a client folding the stream by arrival (the openai
                            # client's ChatCompletionStreamState) needs choice 0 first and
                            # each new index next. With continuous usage stats every chunk
                            # carries usage, the role chunk too (nothing generated yet; the
                            # choices share their prompt).
                            for i in sorted({*range(n), idx}):
                                states[i] = new_state()
                                yield chunk(
                                    i,
                                    DeltaMessage(role="assistant", content=""),
                                    dict(meta, completion_tokens=0),
                                    first=True,
                                )
                                if echo:
                                    yield chunk(
                                        i, DeltaMessage(content=echo), dict(meta, completion_tokens=0)
                                    )
                        elif idx not in states:
                            states[idx] = new_state()
                        st = states[idx]
                        if req.return_token_ids:
                            out_ids = list(ret.get("output_ids") or [])
                            pending_ids.setdefault(idx, []).extend(out_ids[st.sent_ids :])
                            st.sent_ids = max(st.sent_ids, len(out_ids))
                        fr, matched, reasoning_d, content_d, tool_deltas = self._read_output(st, ret, plan)
                        if separate and continuous:
                            running_rt[idx] = self._reasoning_tokens(
                                ret.get("output_ids") or [], st.reasoning_raw or st.reasoning_text
                            )
                        lp = None
                        if req.logprobs:
                            ready = self._logprobs_ready(
                                st, meta, ret.get("text") or "", fr is not None, req.skip_special_tokens
                            )
                            lp = self._chat_logprobs(
                                meta, st.sent_lp, bool(req.return_tokens_as_token_ids), end=ready
                            )
                            # an output without logprob fields (an abort or finish chunk) sent
                            # none: the records already sent stay sent (sgl-project/sglang#33042)
                            st.sent_lp = max(st.sent_lp, ready)
                        # the step's log-probabilities ride on its first chunk, whatever it carries
                        # (reasoning, content or tool-call deltas), or on a chunk of their own
                        # when the step's tokens showed no text (a marker, an EOS)
                        step_lp = lp if lp is not None and lp.content else None
                        if reasoning_d and req.include_reasoning:
                            yield chunk(
                                idx, DeltaMessage(reasoning_content=reasoning_d), meta, logprobs=step_lp
                            )
                            step_lp = None
                        calls = self._delta_calls(st, tool_deltas, req._custom_tools, fr is not None)
                        if content_d or (step_lp is not None and not calls):
                            yield chunk(idx, DeltaMessage(content=content_d), meta, logprobs=step_lp)
                            step_lp = None
                        if calls:
                            yield chunk(idx, DeltaMessage(tool_calls=calls), meta, logprobs=step_lp)
                        if fr is not None:
                            finals[idx] = ret
                            if separate:
                                reasoning_tokens[idx] = self._reasoning_tokens(
                                    ret.get("output_ids") or [], st.reasoning_text
                                )
                            if st.tools is not None and st.tools.calls_whole and fr == "stop":
                                fr = "tool_calls"
                            stop = plan.matched_stop(matched, req.stop_token_ids)
                            yield chunk(
                                idx,
                                DeltaMessage(),
                                meta,
                                finish_reason=fr,
                                matched_stop=stop,
                                stop_reason=stop_reason(fr, stop, req.stop_token_ids),
                            )
                if len(finals) < n:
                    # the engine's outputs ended before every choice finished: not a completion
                    yield _sse_failure(RequestError(NO_FINISH_MSG, 500), None)
                elif include_usage:
                    order = sorted(finals)
                    rets = [finals[i] for i in order]
                    rt = [reasoning_tokens.get(i, 0) for i in order] if separate else None
                    yield _sse(
                        ChatCompletionStreamResponse(
                            id=rid,
                            created=created,
                            model=req.model,
                            service_tier=req.service_tier,
                            choices=[],
                            usage=self._usage(rets, n, rt),
                        )
                    )
            except ValueError as e:
                yield _sse_failure(e, run.grammar_field)
            except Exception as e:  # noqa: BLE001 - any failure ends the stream with an error event
                yield _sse_failure(internal_stream_error(e), None)
            finally:
                await gen.aclose()  # client gone or error: the tokenizer manager aborts the request
            yield _SSE_DONE

        # a body closed before its first step never reaches the finally above
        return ClosingStreamingResponse(
            stream(), media_type="text/event-stream", on_close=partial(close_generation, gen, first)
        )

    @classmethod
    def _read_output(
        cls, st: _ChoiceStream, ret: dict[str, Any], plan: ChatPlan
    ) -> tuple[str | None, Any, str, str, list[ToolCallDelta]]:
        """What one engine output of a streamed choice adds: ``(finish_reason, matched_stop,
        reasoning_delta, content_delta, tool_call_deltas)``. ``ret["text"]`` is the cumulative
        text (the EOS marker dropped); ``st.sent_text`` counts the characters already read. The
        reasoning parser splits the new text (:meth:`_split_delta`), then the tool-call parser
        takes the content; at the finish it closes its calls (``stopped``: the generation ended
        on a stop, so an open call is text). Shared by the chat, Responses and Messages streams."""
        meta = ret.get("meta_info", {})
        text = ret.get("text", "").replace(EOS, "")
        delta = text[st.sent_text :] if len(text) >= st.sent_text else ""
        st.sent_text = max(st.sent_text, len(text))
        fr, matched = _finish(meta)
        reasoning_d, content_d = cls._split_delta(st, delta, fr)
        tool_deltas: list[ToolCallDelta] = []
        if st.tools is not None:
            content_d, tool_deltas = st.tools.feed(content_d)
            if fr is not None:
                c2, t2 = st.tools.finish(stopped=fr == "stop")
                content_d, tool_deltas = content_d + c2, tool_deltas + t2
        return fr, matched, reasoning_d, content_d, tool_deltas

    @staticmethod
    def _split_delta(st: _ChoiceStream, delta: str, fr: str | None) -> tuple[str, str]:
        """``(reasoning_delta, content_delta)`` of a text delta (``fr``: the finish reason, if
        done). A reasoning never closed stays reasoning however the generation ended
        (:mod:`.reasoning_parser`), so each piece of text goes out once, in the field the
        non-streamed answer has it in."""
        if st.reasoning is None:
            return "", delta
        r, c = st.reasoning.feed(delta)
        if fr is not None:
            r2, c2 = st.reasoning.flush()
            r, c = r + r2, c + c2
        st.reasoning_raw += r
        sent = st.reasoning_scrub.feed(r)  # the reasoning's DSML tags dropped (.dsml_markup)
        if fr is not None or not st.reasoning.in_reasoning:
            sent += st.reasoning_scrub.finish()
        st.reasoning_text += sent
        return sent, c

    @staticmethod
    def _delta_calls(
        st: _ChoiceStream,
        deltas: list[ToolCallDelta],
        custom: frozenset[str] = frozenset(),
        finished: bool = False,
    ) -> list[DeltaToolCall]:
        """The ``delta.tool_calls`` entries of ``deltas``: ``id``, ``type`` and the name on a
        call's first delta only (``st.started_calls`` records the calls begun). A call of a tool
        named in ``custom`` is a custom tool's call: its entries carry ``custom`` (``name`` first,
        then the ``input`` text its argument fragments add: :class:`CustomInputStream`), and an
        entry that adds no text is left out (but for the call's first); at the choice's end
        (``finished``) the rest of each such input that was held back is sent."""
        out = []
        for d in deltas:
            first = d.index not in st.started_calls
            st.started_calls.add(d.index)
            if first and d.name in custom:
                st.custom_inputs[d.index] = CustomInputStream()
            reader = st.custom_inputs.get(d.index)
            if reader is None:
                out.append(
                    DeltaToolCall(
                        index=d.index,
                        id=d.id if first else None,
                        type="function" if first else None,
                        function=DeltaFunctionCall(name=d.name if first else None, arguments=d.arguments),
                    )
                )
                continue
            text = reader.feed(d.arguments or "")
            if first:
                part = CustomToolCall(name=d.name, input=text)
                out.append(DeltaToolCall(index=d.index, id=d.id, type="custom", custom=part))
            elif text:
                out.append(DeltaToolCall(index=d.index, custom=CustomToolCall(input=text)))
        if finished:
            for index, reader in st.custom_inputs.items():
                rest = reader.finish()[0]
                if rest:
                    out.append(DeltaToolCall(index=index, custom=CustomToolCall(input=rest)))
        return out

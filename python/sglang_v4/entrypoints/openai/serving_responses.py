"""``POST /v1/responses``: OpenAI's Responses API on the chat-completions path (the routes of
stored responses, ``GET`` / ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``
and ``POST /v1/responses/{id}/cancel``, are :mod:`.serving_responses_stored`'s).

A request is turned into a chat-completions request (:mod:`.responses_input`: ``input`` items ->
messages, ``instructions`` -> a first system message, flat tools -> chat tools, ``text.format`` ->
``response_format`` (a chat-shaped ``response_format`` sent here is read as ``text.format``), ``reasoning.effort`` -> the thinking switch, ``max_output_tokens`` ->
``max_completion_tokens``) and run as one: the same prompt rendering, sampling defaults, grammars,
reasoning split and DSML tool-call parsing (:meth:`~.serving_chat.ChatMixin._prepare_chat`,
:meth:`~.serving_chat.ChatMixin._read_choice`). The result becomes output items: ``reasoning``
(the whole reasoning as ``reasoning_text`` content; no summaries; with ``include:
["reasoning.encrypted_content"]`` the same text as the ``encrypted_content`` blob a stateless
client replays, :mod:`.responses_reasoning_state`; left out with vLLM's
``include_reasoning: false``, streamed and not), ``message`` (one
``output_text`` part; ``phase`` ``commentary`` before calls, else ``final_answer``; none for an
answer without text, so an output of nothing is empty, as DeepSeek's own Responses generator
answers) and one ``function_call`` per tool call (``call_id`` the chat call id), a
``custom_tool_call`` for a call of a custom tool (its ``input`` the free-form text:
:mod:`.responses_custom_tools`); a call of a tool that a ``namespace`` tool groups carries that
``namespace`` beside the tool's bare ``name`` (streamed items too).
``status`` is ``incomplete`` (``incomplete_details.reason: "max_output_tokens"``) when the token
limit ended the generation.

``previous_response_id`` continues a stored response: its conversation (input and output, without
its ``instructions``) comes before this request's input, so the prompt is that of the whole chat.
Responses are stored (``store``, default true) in a bounded in-memory store
(:mod:`.responses_store`), with their input items for ``GET /v1/responses/{id}/input_items``
(:mod:`.responses_input_items`); an unknown id is a 404 in OpenAI's error shape, a
``previous_response_id`` that is no response id (no ``resp_`` prefix) a 400. ``item_reference``
input items are read from that store first (:func:`~.responses_input_items.resolve_item_references`).
With ``truncation: "auto"`` a conversation longer than the context loses its oldest turns until the
prompt fits (:mod:`.responses_truncation`); the stored conversation stays whole.

Streaming (``stream: true``) sends OpenAI's event sequence as server-sent events (``event:`` and
``data:`` lines, no ``[DONE]``; the per-item events are written by :mod:`.responses_events`), each
event with a ``sequence_number`` from 0:
``response.created``, ``response.in_progress``; per output item ``response.output_item.added``,
then for a message ``response.content_part.added``, ``response.output_text.delta``...,
``response.output_text.done``, ``response.content_part.done``; for reasoning the same with
``reasoning_text`` parts and ``response.reasoning_text.delta`` / ``.done`` (the full-text events of
OpenAI's reasoning models, not the ``reasoning_summary_text`` ones: the text is the model's own
reasoning, not a summary); for a call ``response.function_call_arguments.delta``... and
``.done`` (a custom tool's: ``response.custom_tool_call_input.delta``... and ``.done``); then ``response.output_item.done``; at the end the whole response in
``response.completed``, or in ``response.incomplete`` when ``max_output_tokens`` cut it (status
``incomplete``, ``incomplete_details.reason: "max_output_tokens"``), as OpenAI ends such a stream
(its ``ResponseIncompleteEvent``; the ``openai`` client's ``get_final_response()`` reads
``response.completed`` only, so a client of a cut stream reads the terminal event's ``response``,
as against OpenAI's own server). An engine error mid-stream sends ``error`` and then
``response.failed``. A thinking-mode reply that ends without ever closing its reasoning is a
``reasoning`` item only, streamed or not (as on chat completions). A call whose
invoke turns out malformed, or is stopped inside, had its ``function_call`` item and argument
deltas streamed already: that item is closed ``incomplete``, its text follows in a message, and
the final response has no such item, as the non-streamed one. Client disconnects abort
the request, as on chat completions.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from sglang_v4.entrypoints.openai.allowed_tools import allowed_tools_of
from sglang_v4.entrypoints.openai.logprob_limits import check_chat_top_logprobs
from sglang_v4.entrypoints.openai.protocol import ChatCompletionRequest
from sglang_v4.entrypoints.openai.protocol_responses import (
    IncompleteDetails,
    InputTokensDetails,
    OutputItem,
    OutputText,
    OutputTokensDetails,
    ReasoningText,
    ResponseCustomToolCall,
    ResponseError,
    ResponseFunctionToolCall,
    ResponseObject,
    ResponseOutputMessage,
    ResponseReasoningItem,
    ResponsesRequest,
    ResponseUsage,
    new_item_id,
)
from sglang_v4.entrypoints.openai.reasoning_parser import ReasoningParser
from sglang_v4.entrypoints.openai.request_errors import name_grammar_tool
from sglang_v4.entrypoints.openai.request_sampling import sent_nulls
from sglang_v4.entrypoints.openai.responses_custom_tools import (
    CUSTOM_INPUT,
    custom_call_input,
    custom_tool_formats,
)
from sglang_v4.entrypoints.openai.responses_events import ResponsesEventWriter
from sglang_v4.entrypoints.openai.responses_input import (
    input_to_messages,
    reasoning_switch,
    responses_text_format,
    text_with_response_format,
)
from sglang_v4.entrypoints.openai.responses_input_items import resolve_item_references
from sglang_v4.entrypoints.openai.responses_reasoning_state import (
    ENCRYPTED_REASONING_INCLUDE,
    encode_reasoning,
)
from sglang_v4.entrypoints.openai.responses_request_checks import check_responses_request
from sglang_v4.entrypoints.openai.responses_tools import (
    request_tools,
    responses_tool_choice,
    responses_tools,
    tool_namespaces,
)
from sglang_v4.entrypoints.openai.responses_truncation import fit_to_context
from sglang_v4.entrypoints.openai.serving_base import (
    RequestError,
    dp_rank_header_pin,
    grammar_error_for,
    read_json_object,
    validate_request,
)
from sglang_v4.entrypoints.openai.serving_chat import ChatMixin, ChatRun, ChoiceOutput, _ChoiceStream
from sglang_v4.entrypoints.openai.serving_outputs import (
    _abort_error,
    _engine_outputs,
    internal_stream_error,
    stream_failure,
)
from sglang_v4.entrypoints.openai.serving_responses_stored import StoredResponsesMixin
from sglang_v4.entrypoints.openai.tool_parser import TOOL_CALL_PARSERS
from sglang_v4.entrypoints.sse_keep_alive import close_generation
from sglang_v4.entrypoints.sse_response import ClosingStreamingResponse
from sglang_v4.sampling.preferred_params import with_preferred

__all__ = ["ResponsesMixin"]

#: The Responses sampling fields and the chat request's fields they become (an explicit null kept).
_SAMPLING_FIELDS = {
    "max_output_tokens": "max_completion_tokens",
    **{k: k for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed")},
    **{k: k for k in ("frequency_penalty", "presence_penalty")},
}

#: Chat request fields whose errors name the Responses field the client sent instead.
_FIELD_NAMES = {
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "reasoning_effort": "reasoning.effort",
    "messages": "input",
}


def _responses_error(e: RequestError) -> RequestError:
    """``e`` (raised on the chat path) naming the Responses field (:data:`_FIELD_NAMES`): whole
    words only, and not the ``messages`` of vLLM's ``the input messages`` (else ``input input``)."""
    msg, param = e.message, e.param
    if param is not None and param.startswith("messages["):  # a chat message's path: not an input index
        param = "messages"
    for chat_name, name in _FIELD_NAMES.items():
        msg = re.sub(rf"(?<!input )\b{re.escape(chat_name)}\b", name, msg)
        if param == chat_name:
            param = name
    return RequestError(msg, e.status, e.err_type, param)


def _text_echo(text: dict[str, Any] | None) -> dict[str, Any]:
    """The response's ``text``: the request's ``format`` (``{"type": "text"}`` when unset) and its
    ``verbosity`` when given (OpenAI's ``ResponseTextConfig`` echoes both, either alone)."""
    text = text or {}
    echo: dict[str, Any] = {"format": text.get("format") or {"type": "text"}}
    if text.get("verbosity") is not None:
        echo["verbosity"] = text["verbosity"]
    return echo


def _wants_logprobs(req: ResponsesRequest) -> bool:
    """Whether ``req`` asks for the answer's logprobs (``include`` names
    ``message.output_text.logprobs``; ``top_logprobs`` alone does not, as in vLLM)."""
    return bool(req.include) and LOGPROBS_INCLUDE in (req.include or [])


def _wants_reasoning_blob(req: ResponsesRequest) -> bool:
    """Whether ``req`` asks for reasoning items' ``encrypted_content`` (``include`` names
    ``reasoning.encrypted_content``)."""
    return ENCRYPTED_REASONING_INCLUDE in (req.include or [])


#: The ``include`` value that asks for the message's logprobs (OpenAI's name).
LOGPROBS_INCLUDE = "message.output_text.logprobs"


@dataclass
class _Job:
    """One Responses request on its way: the chat run, the conversation it continues plus its
    input (chat messages) and the response fields known before generation."""

    req: ResponsesRequest
    run: ChatRun
    messages: list[dict[str, Any]]
    base: ResponseObject
    input_items: list[dict[str, Any]] = field(default_factory=list)
    custom: frozenset[str] = frozenset()  # the names of the request's custom tools
    namespaces: dict[str, str] = field(default_factory=dict)  # tool name -> its namespace


def _output_messages(items: list[OutputItem]) -> list[dict[str, Any]]:
    """The chat messages of a response's output items (one assistant turn), for the store."""
    return input_to_messages([item.model_dump(mode="json") for item in items], answered=False)


@dataclass
class _StreamRead:
    """What a stream has read so far (the parsers' state and the text sent by kind)."""

    st: _ChoiceStream
    content: str = ""
    done: dict[str, Any] = field(default_factory=dict)


class ResponsesMixin(StoredResponsesMixin, ChatMixin):
    """The ``/v1/responses`` routes (mixed into :class:`~.serving.OpenAIServing`)."""

    async def create_response(self, request: Request) -> Response:
        """``POST /v1/responses``."""
        return await self._guard(request, self._responses)

    # ------------------------------------------------------------------ request
    async def _responses(self, request: Request) -> Response:
        req: ResponsesRequest = validate_request(ResponsesRequest, await read_json_object(request))
        dp_rank_header_pin(request)  # SGLang's X-Data-Parallel-Rank: rank 0 or a 400
        self._check_model(req.model)
        check_responses_request(req)
        req.input = resolve_item_references(req.input, self.responses_store.find_item)
        if req.top_logprobs is not None:  # bounded as on the chat route, ``include`` or not (it is echoed)
            check_chat_top_logprobs(req.top_logprobs, True, self._max_logprobs(), self._vocab_size())
        req.text = text_with_response_format(req.text, req.response_format)
        chat_req, messages = self._chat_request_of(req, self._history(req))
        try:
            if req.truncation == "auto":  # the oldest turns dropped until the prompt fits
                run = await self._prepare_truncated(req, messages)
            else:
                run = await self._prepare_chat(chat_req)
        except RequestError as e:
            raise _responses_error(e) from None
        # the values sampled with: the route's, then --preferred-sampling-params under them
        sp = with_preferred(run.obj.sampling_params, getattr(self.args, "preferred_sampling_params", None))
        base = ResponseObject(
            id=new_item_id("resp"),
            status="in_progress",
            instructions=req.instructions,
            max_output_tokens=req.max_output_tokens,
            metadata=req.metadata or {},
            model=req.model,
            parallel_tool_calls=req.parallel_tool_calls,
            previous_response_id=req.previous_response_id,
            reasoning={"effort": (req.reasoning or {}).get("effort"), "summary": None},
            store=req.store,
            temperature=sp.get("temperature", 1.0),
            top_p=sp.get("top_p", 1.0),
            text=_text_echo(req.text),
            tool_choice=req.tool_choice if req.tool_choice is not None else "auto",
            tools=list(req.tools or []),
            top_logprobs=req.top_logprobs,
            presence_penalty=sp.get("presence_penalty") or 0.0,
            frequency_penalty=sp.get("frequency_penalty") or 0.0,
            user=req.user,
            prompt_cache_key=req.prompt_cache_key,
            safety_identifier=req.safety_identifier,
            max_tool_calls=req.max_tool_calls,
            truncation=req.truncation or "disabled",
        )
        custom = frozenset(custom_tool_formats(request_tools(req.tools, req.input)))
        namespaces = tool_namespaces(req.tools, req.input)
        job = _Job(req, run, messages, base, self._input_items(req), custom, namespaces)
        try:
            if req.stream:
                return await self._responses_stream(job, request)
            rets = await self._collect(run.obj, request)
        except RequestError as e:
            err = name_grammar_tool(
                grammar_error_for(e, run.grammar_field), run.plan.grammar_tools, "tools[{i}].parameters"
            )
            raise _responses_error(err) from None
        out = self._read_choice(rets[0], run.plan, run.separate)
        resp = self._finished_response(job, out, rets[0].get("meta_info", {}), {})
        return JSONResponse(resp)

    async def _prepare_truncated(self, req: ResponsesRequest, messages: list[dict[str, Any]]) -> ChatRun:
        """The engine request of ``req`` under ``truncation: "auto"``: its conversation
        ``messages`` less the fewest oldest turns that make the prompt fit in the context
        (:func:`~.responses_truncation.fit_to_context`)."""

        async def measure(kept: list[dict[str, Any]]) -> tuple[ChatRun, list[int] | None]:
            run = await self._prepare_chat(self._chat_request_of(req, [], kept)[0])
            return run, run.prompt_ids

        run, _ = await fit_to_context(messages, measure, self._context_len(), req.max_output_tokens)
        return run

    def _chat_request_of(
        self,
        req: ResponsesRequest,
        history: list[dict[str, Any]],
        conversation: list[dict[str, Any]] | None = None,
    ) -> tuple[ChatCompletionRequest, list[dict[str, Any]]]:
        """The chat request of ``req`` after ``history`` (a stored conversation), and the
        conversation it runs (history + input, without ``instructions``); ``conversation``, when
        given, is run instead (one already read from ``req``, cut by ``truncation: "auto"``).

        Raises:
            RequestError: 400 naming the Responses field.
        """
        prev = self.responses_store.get(req.previous_response_id) if req.previous_response_id else None
        unfinished = [  # the previous response's calls cut by max_output_tokens: no output due
            o.get("call_id")
            for o in (prev.response.get("output") or [] if prev is not None else [])
            if isinstance(o, dict) and o.get("status") == "incomplete"
        ]
        if conversation is None:
            conversation = list(history) + input_to_messages(req.input, history, unfinished=unfinished)
        if not conversation:
            raise RequestError("input must contain at least one item.", param="input")
        thinking, effort = reasoning_switch(req.reasoning, self.reasoning_effort_profile)
        tools = request_tools(req.tools, req.input)
        if tools:
            responses_tools(tools)  # every tool is checked, those that allowed_tools leaves out too
        tools, choice = allowed_tools_of(req.tool_choice, tools)
        kwargs = dict(req.chat_template_kwargs or {})
        if thinking is not None:
            kwargs.pop("enable_thinking", None)
            kwargs["thinking"] = thinking
        system = [{"role": "system", "content": req.instructions}] if req.instructions is not None else []
        data: dict[str, Any] = {
            "model": req.model,
            "messages": system + conversation,
            "tools": responses_tools(tools) if tools else None,
            "tool_choice": responses_tool_choice(choice),
            "parallel_tool_calls": req.parallel_tool_calls,
            "max_completion_tokens": req.max_output_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "response_format": responses_text_format(req.text),
            "reasoning_effort": effort,
            "chat_template_kwargs": kwargs or None,
            "stream": req.stream,
            "user": req.user,
        }
        for name in ("top_k", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty"):
            data[name] = getattr(req, name)
        data.update(seed=req.seed, priority=req.priority, cache_salt=req.cache_salt)
        data["thinking_token_budget"] = req.thinking_token_budget
        if _wants_logprobs(req):
            data.update(logprobs=True, top_logprobs=req.top_logprobs or 0)
        try:
            body = {k: v for k, v in data.items() if v is not None}
            # a sampling field sent as null keeps its null: the request's, not the preferred value
            body.update(sent_nulls(req, _SAMPLING_FIELDS))
            chat_req = ChatCompletionRequest.model_validate(body)
        except ValidationError as e:  # the fields were checked above; a 400, never a 500
            raise RequestError(f"Invalid request: {e.errors()[0].get('msg')}", param="input") from None
        chat_req._string_value_formats = {
            name: (CUSTOM_INPUT, fmt) for name, fmt in custom_tool_formats(tools).items() if fmt is not None
        }
        return chat_req, conversation

    # ------------------------------------------------------------------ response
    def _answer_logprobs(
        self, job: _Job, meta: dict[str, Any], start: int, end: int | None = None
    ) -> list[dict[str, Any]]:
        """The ``output_text`` logprobs of the answer: one ``{"token", "bytes", "logprob",
        "top_logprobs": [{"token", "bytes", "logprob"}]}`` per generated token from ``start`` on
        (the tokens after the reasoning block; OpenAI's ``Logprob`` shape, the chat route's
        entries), ``top_logprobs`` of them each, up to ``end`` (a stream's tokens whose text is
        sent); ``[]`` unless the request's ``include`` asks."""
        if not _wants_logprobs(job.req):
            return []
        lp = self._chat_logprobs(meta, start, False, job.run.top_logprobs, end=end)
        return [e.model_dump(mode="json") for e in lp.content]

    def _output_items(
        self,
        out: ChoiceOutput,
        ids: dict[Any, str],
        incomplete: bool,
        logprobs: list[Any] | None = None,
        custom: frozenset[str] = frozenset(),
        namespaces: dict[str, str] | None = None,
        encrypt: bool = False,
    ) -> list[OutputItem]:
        """Output items of a finished choice: reasoning, message (its ``output_text`` with
        ``logprobs``), function calls, and custom tool calls for the tools named in ``custom``
        (ids from a stream where it sent them), each call with the ``namespace`` of its tool in
        ``namespaces``; the reasoning item with its ``encrypted_content`` when ``encrypt``; the last
        item is ``incomplete`` when the response is (a custom tool call has no ``status``)."""
        items: list[OutputItem] = []
        if out.reasoning:
            items.append(
                ResponseReasoningItem(
                    id=ids.get("reasoning") or new_item_id("rs"),
                    content=[ReasoningText(text=out.reasoning)],
                    encrypted_content=encode_reasoning(out.reasoning) if encrypt else None,
                )
            )
        if out.content:  # no text, no message item (an output of nothing is empty, as DeepSeek's)
            items.append(
                ResponseOutputMessage(
                    id=ids.get("message") or new_item_id("msg"),
                    content=[OutputText(text=out.content, logprobs=logprobs or [])],
                    phase="commentary" if out.tool_calls else "final_answer",
                )
            )
        for c in out.tool_calls:
            if c.name in custom:
                items.append(
                    ResponseCustomToolCall(
                        id=ids.get(("call", c.index)) or new_item_id("ctc"),
                        call_id=c.id,
                        name=c.name,
                        input=custom_call_input(c.arguments),
                        namespace=(namespaces or {}).get(c.name),
                    )
                )
                continue
            items.append(
                ResponseFunctionToolCall(
                    id=ids.get(("call", c.index)) or new_item_id("fc"),
                    call_id=c.id,
                    name=c.name,
                    arguments=c.arguments,
                    status="incomplete" if c.partial else "completed",
                    namespace=(namespaces or {}).get(c.name),
                )
            )
        if incomplete and items and hasattr(items[-1], "status"):
            items[-1].status = "incomplete"
        return items

    def _finished_response(
        self, job: _Job, out: ChoiceOutput, meta: dict[str, Any], ids: dict[Any, str]
    ) -> dict[str, Any]:
        """The final response body (stored when ``store``): output items, status, usage."""
        incomplete = out.finish_reason == "length"
        logprobs = self._answer_logprobs(job, meta, out.reasoning_tokens)
        encrypt = _wants_reasoning_blob(job.req)
        kept = self._output_items(out, ids, incomplete, logprobs, job.custom, job.namespaces, encrypt)
        # include_reasoning false: the client gets no reasoning item; the store keeps it (kept)
        items = (
            kept
            if job.req.include_reasoning
            else self._output_items(
                replace(out, reasoning=None), ids, incomplete, logprobs, job.custom, job.namespaces
            )
        )
        prompt, completion = int(meta.get("prompt_tokens", 0)), int(meta.get("completion_tokens", 0))
        usage = ResponseUsage(
            input_tokens=prompt,
            input_tokens_details=InputTokensDetails(cached_tokens=int(meta.get("cached_tokens", 0) or 0)),
            output_tokens=completion,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=out.reasoning_tokens),
            total_tokens=prompt + completion,
        )
        resp = job.base.model_copy(
            update={
                "status": "incomplete" if incomplete else "completed",
                "completed_at": None if incomplete else int(time.time()),
                "incomplete_details": IncompleteDetails() if incomplete else None,
                "output": items,
                "usage": usage,
            }
        )
        body = resp.model_dump(mode="json")
        if job.req.store:
            self.responses_store.put(resp.id, body, job.messages + _output_messages(kept), job.input_items)
        return body

    # ------------------------------------------------------------------ streaming
    async def _responses_stream(self, job: _Job, raw: Request) -> Response:
        run = job.run
        gen, first = await self._run_stream(run.obj, raw)
        plan = run.plan
        rp = (
            ReasoningParser(implicit_end=plan.reasoning.implicit_end, continued=plan.reasoning.continued)
            if run.separate
            else (ReasoningParser.answer() if plan.reasoning.answer_only else None)
        )
        block = TOOL_CALL_PARSERS[self.tool_call_parser]
        tp = plan.tool_reader(block)
        read = _StreamRead(_ChoiceStream(rp, tp))
        w = ResponsesEventWriter(job.custom, job.namespaces, _wants_reasoning_blob(job.req))
        base = job.base.model_dump(mode="json")

        async def stream() -> AsyncIterator[bytes]:
            try:  # closed at any yield (the client gone), the request is aborted in the finally
                yield w.event("response.created", response=base)
                yield w.event("response.in_progress", response=base)
                async for item in _engine_outputs(gen, first):
                    ret = item[0] if isinstance(item, list) else item
                    abort = _abort_error(ret.get("meta_info", {}))
                    if abort is not None:
                        for ev in self._failed(w, job, self._stream_error(abort, run)):
                            yield ev
                        return
                    for ev in self._stream_step(w, read, job, ret):
                        yield ev
                    if read.done:
                        return
                for ev in self._failed(
                    w, job, RequestError("The generation ended without a finish reason.", 500)
                ):
                    yield ev
            except ValueError as e:
                for ev in self._failed(w, job, self._stream_error(e, run)):
                    yield ev
            except Exception as e:  # noqa: BLE001 - any failure ends the stream with response.failed
                for ev in self._failed(w, job, internal_stream_error(e)):
                    yield ev
            finally:
                # client gone or error: stop reading a first output that has not come (the frames
                # above went out before it), and the tokenizer manager aborts the request
                await close_generation(gen, first)

        return ClosingStreamingResponse(
            stream(), media_type="text/event-stream", on_close=partial(close_generation, gen, first)
        )

    def _stream_step(
        self, w: ResponsesEventWriter, read: _StreamRead, job: _Job, ret: dict[str, Any]
    ) -> list[bytes]:
        """The events of one engine output (cumulative text); at its finish the closing events
        and ``response.completed`` (``response.incomplete`` for a reply cut by the token limit)."""
        st, run = read.st, job.run
        plan = run.plan
        meta = ret.get("meta_info", {})
        fr, matched, reasoning_d, content_d, tool_deltas = self._read_output(st, ret, plan)
        read.content += content_d
        out = w.reasoning(reasoning_d) if job.req.include_reasoning else []
        dropped = st.tools.dropped_calls if st.tools is not None else set()
        lps = None
        if _wants_logprobs(job.req):
            # a token's record goes out with the delta that sends its text (vllm-project/vllm#31135)
            preferred = getattr(self.args, "preferred_sampling_params", None)
            skip = with_preferred(run.obj.sampling_params, preferred).get("skip_special_tokens", True)
            ready = self._logprobs_ready(st, meta, ret.get("text") or "", fr is not None, skip is not False)
            if content_d:
                done = self._reasoning_tokens(
                    ret.get("output_ids") or [], st.reasoning_raw or st.reasoning_text
                )
                lps = self._answer_logprobs(job, meta, max(st.sent_lp, done if run.separate else 0), ready)
                st.sent_lp = max(st.sent_lp, ready)
        out += w.text(content_d, lps)
        for d in tool_deltas:
            out += w.drop_call(dropped) + w.call(d)
        out += w.drop_call(dropped)
        if fr is None:
            return out
        calls = st.tools.calls if st.tools is not None else []
        content: str | None = read.content
        if calls:
            content = content or None
            if st.tools is not None and st.tools.calls_made and fr == "stop":
                fr = "tool_calls"
        reasoning = st.reasoning_text or None
        n_reasoning = self._reasoning_tokens(ret.get("output_ids") or [], reasoning) if run.separate else 0
        choice = ChoiceOutput(content, reasoning, calls, fr, matched, n_reasoning)
        status = "incomplete" if fr == "length" else "completed"
        out += w.finish(status)
        read.done = self._finished_response(job, choice, meta, w.ids)
        out.append(w.event(f"response.{status}", response=read.done))
        return out

    @staticmethod
    def _stream_error(e: RequestError | ValueError, run: ChatRun) -> RequestError:
        """A failure after the stream's first output, named as the non-streamed answer names it
        (:func:`~.serving_outputs.stream_failure`, then the Responses field: ``text.format`` for a
        ``response_format`` grammar)."""
        return _responses_error(stream_failure(e, run.grammar_field))

    def _failed(self, w: ResponsesEventWriter, job: _Job, err: RequestError) -> list[bytes]:
        """``error`` (``err``'s message and ``param``) then ``response.failed`` (open item closed
        ``incomplete``); nothing is stored."""
        message, status = err.message, err.status
        out = w.close("incomplete")
        code = "server_error" if status >= 500 else "invalid_prompt"
        out.append(w.event("error", code=code, message=message, param=err.param))
        failed = job.base.model_copy(
            update={"status": "failed", "error": ResponseError(code=code, message=message)}
        )
        out.append(w.event("response.failed", response=failed.model_dump(mode="json")))
        return out

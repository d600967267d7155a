"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: Anthropic's Messages API on the
chat-completions path.

A request is turned into a chat-completions request (:mod:`.messages_input`) and run as one: the
same prompt rendering, sampling defaults, grammars, reasoning split and DSML tool-call parsing
(:meth:`~sglang_v4.entrypoints.openai.serving_chat.ChatMixin._prepare_chat`,
:meth:`~sglang_v4.entrypoints.openai.serving_chat.ChatMixin._read_choice`); the result becomes a
``message`` (:mod:`.messages_output`), streamed as Anthropic's events with ``stream: true``.
``count_tokens`` renders the same prompt and answers ``{"input_tokens": N}``, N the token count of
the prompt a Messages request with those fields runs on.

Errors use Anthropic's body ``{"type": "error", "error": {"type", "message"}}``: 400
``invalid_request_error`` with a message that starts with the field (a prompt that does not fit
in the context: Anthropic's own ``prompt is too long: N tokens > M maximum`` / ``input length and
`max_tokens` exceed context limit: N + K > C, ...`` wording), 401 ``authentication_error``
without the server's API key (``x-api-key: KEY``, Anthropic's header, or ``Authorization: Bearer
KEY``), 404 ``not_found_error`` for another model name. A client that goes away aborts its
request, streamed or not, as on the chat route.

With ``thinking`` on, a generation that ends without closing its reasoning (no ``</think>``)
is a message with that reasoning as its ``thinking`` block and no ``text`` block, streamed or
not (DeepSeek's own Messages converter reads it so, as the chat route does).

With ``--sse-keep-alive-interval`` a silent stream sends Anthropic's ``ping`` event, not the SSE
comment of the other routes: Anthropic clients (Claude Code's stall watchdog) count events only.
A first output that comes within the interval gives the stream it gives without the keep-alive
(an early error is still a plain HTTP error); past the interval ``message_start`` (the prompt's
token count as ``usage``) and a ``ping`` are sent at once, and a later failure is an ``error``
event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from sglang_v4.entrypoints.anthropic.messages_input import (
    anthropic_field_error,
    chat_request_data,
    thinking_omitted,
)
from sglang_v4.entrypoints.anthropic.messages_output import (
    PING_EVENT,
    MessageEvents,
    error_event,
    message_content,
    message_usage,
    output_pieces,
    prompt_usage,
    stop_reason,
)
from sglang_v4.entrypoints.anthropic.protocol import (
    SERVED_MESSAGES_TIER,
    AnthropicMessage,
    CountTokensRequest,
    MessagesRequest,
    MessagesUsage,
    anthropic_error_body,
)
from sglang_v4.entrypoints.openai.protocol import ChatCompletionRequest, auth_challenge_headers
from sglang_v4.entrypoints.openai.reasoning_parser import ReasoningParser
from sglang_v4.entrypoints.openai.request_errors import name_grammar_tool
from sglang_v4.entrypoints.openai.serving_base import (
    SKIP_TOKENIZER_OPENAI_MSG,
    RequestError,
    grammar_error_for,
    read_json_object,
    validate_request,
)
from sglang_v4.entrypoints.openai.serving_chat import ChatRun, _ChoiceStream
from sglang_v4.entrypoints.openai.serving_outputs import (
    _abort_error,
    _engine_outputs,
    internal_stream_error,
    stream_failure,
)
from sglang_v4.entrypoints.openai.tool_parser import TOOL_CALL_PARSERS
from sglang_v4.entrypoints.sse_keep_alive import PendingFirst, close_generation, resolve_first
from sglang_v4.entrypoints.sse_response import ClosingStreamingResponse
from sglang_v4.prompt_tokens import encode_with_plain_spans
from sglang_v4.utils import run_blocking

__all__ = ["AnthropicServing", "anthropic_error_response", "context_overflow_message"]


def context_overflow_message(prompt_tokens: int, max_tokens: int, context_len: int) -> str | None:
    """Why a prompt of ``prompt_tokens`` tokens and ``max_tokens`` cannot run in a context of
    ``context_len`` tokens, worded as Anthropic's API words it (its two context errors, which
    Anthropic clients match to trigger compaction or a retry with a lower ``max_tokens``), or
    ``None`` when it fits. The prompt alone may take at most ``context_len - 1`` tokens (one is
    left for the answer)."""
    if prompt_tokens > context_len - 1:
        return f"prompt is too long: {prompt_tokens} tokens > {context_len - 1} maximum"
    if prompt_tokens + max_tokens > context_len:
        return (
            f"input length and `max_tokens` exceed context limit: {prompt_tokens} + {max_tokens} > "
            f"{context_len}, decrease input length or `max_tokens` and try again"
        )
    return None


def anthropic_error_response(message: str, status: int) -> JSONResponse:
    """Anthropic's error body (:func:`~.protocol.anthropic_error_body`) with HTTP ``status``; a
    401 carries ``WWW-Authenticate`` (:func:`~sglang_v4.entrypoints.openai.protocol.auth_challenge_headers`)."""
    return JSONResponse(
        anthropic_error_body(message, status), status_code=status, headers=auth_challenge_headers(status)
    )


async def _read_body(request: Request, cls: type[Any]) -> Any:
    """The body validated as ``cls`` (strict, :func:`~.serving_base.validate_request`); the error
    message starts with the failing field (``messages.0.role: ...``), as Anthropic's API words it.

    Raises:
        RequestError: 400, the body is not a JSON object or a field is invalid.
    """
    try:
        return validate_request(cls, await read_json_object(request))
    except RequestError as e:
        raise RequestError(
            e.message.removeprefix("Invalid request: "), e.status, e.err_type, e.param
        ) from None


def _tiered(usage: MessagesUsage, req: MessagesRequest) -> MessagesUsage:
    """``usage`` naming the tier that served ``req`` (:data:`~.protocol.SERVED_MESSAGES_TIER`)
    when the request set ``service_tier`` (checked already by the request converter); ``usage``
    unchanged otherwise. For the message and ``message_start`` only."""
    if req.service_tier is not None:
        usage.service_tier = SERVED_MESSAGES_TIER
    return usage


class AnthropicServing:
    """The Messages API routes over the chat path of the OpenAI routes.

    Args:
        chat: the server's :class:`~sglang_v4.entrypoints.openai.serving.OpenAIServing` (its
            tokenizer manager, API key, chat rendering and output reading are used as they are).
    """

    def __init__(self, chat: Any) -> None:
        self.chat = chat

    async def messages(self, request: Request) -> Response:
        """``POST /v1/messages``."""
        return await self._guard(request, self._messages)

    async def count_tokens(self, request: Request) -> Response:
        """``POST /v1/messages/count_tokens``."""
        return await self._guard(request, self._count_tokens)

    async def _guard(self, request: Request, handler: Any) -> Response:
        if self.chat.check_auth(request) is not None:
            return anthropic_error_response("Unauthorized: invalid or missing API key.", 401)
        if self.chat.skip_tokenizer_init:
            return anthropic_error_response(SKIP_TOKENIZER_OPENAI_MSG.format(path=request.url.path), 400)
        try:
            return await handler(request)
        except RequestError as e:
            return anthropic_error_response(e.message, e.status)
        except ValueError as e:
            return anthropic_error_response(str(e), int(getattr(e, "status_code", 400) or 400))

    # ------------------------------------------------------------------ request
    def _chat_request(self, req: MessagesRequest | CountTokensRequest) -> ChatCompletionRequest:
        """The chat request of ``req`` (:func:`~.messages_input.chat_request_data`).

        Raises:
            RequestError: 404 for another model name; 400 naming the Messages field.
        """
        self.chat._check_model(req.model)
        data = chat_request_data(req)
        try:
            chat_req = ChatCompletionRequest.model_validate(data)
        except ValidationError as e:  # the fields were checked above; a 400, never a 500
            err = e.errors()[0]
            field = ".".join(str(x) for x in err.get("loc", ()))
            raise RequestError(f"{field}: {err.get('msg')}", param=field) from None
        # output_config.format is a grammar only: DeepSeek's Messages converter renders no
        # "## Response Format" section for it
        chat_req._response_format_in_prompt = False
        return chat_req

    async def _prepare(self, chat_req: ChatCompletionRequest) -> ChatRun:
        """The chat run of ``chat_req`` (a reasoning never closed stays a ``thinking`` block,
        streamed or not, as on chat completions: :mod:`~..openai.reasoning_parser`).

        Raises:
            RequestError: 400 naming the Messages field.
        """
        try:
            run = await self.chat._prepare_chat(chat_req)
        except RequestError as e:
            raise anthropic_field_error(e) from None
        return run

    def _check_context(self, run: ChatRun, max_tokens: int) -> None:
        """Refuse a prompt that does not fit in the context with ``max_tokens``, in Anthropic's
        words (:func:`context_overflow_message`), which Anthropic clients read to compact the
        conversation or lower ``max_tokens`` and retry; the chat path's own check would word it as
        OpenAI does. Needs the prompt's token ids (a tokenizer is loaded). Skipped under
        ``--allow-auto-truncate``: the tokenizer manager cuts the prompt and ``max_tokens`` to fit
        instead, as on the other routes.

        Raises:
            RequestError: 400.
        """
        ctx = self.chat._context_len()
        if run.prompt_ids is None or ctx is None or getattr(self.chat.args, "allow_auto_truncate", False):
            return
        message = context_overflow_message(len(run.prompt_ids), max_tokens, ctx)
        if message is not None:
            raise RequestError(message, param="max_tokens")

    async def _messages(self, request: Request) -> Response:
        req: MessagesRequest = await _read_body(request, MessagesRequest)
        run = await self._prepare(self._chat_request(req))
        self._check_context(run, req.max_tokens)
        try:
            if req.stream:
                return await self._stream(req, run, request)
            rets = await self.chat._collect(run.obj, request)
        except RequestError as e:
            err = name_grammar_tool(
                grammar_error_for(e, run.grammar_field), run.plan.grammar_tools, "tools.{i}.input_schema"
            )
            raise anthropic_field_error(err) from None
        out = self.chat._read_choice(rets[0], run.plan, run.separate)
        meta = rets[0].get("meta_info", {})
        reason, sequence = stop_reason(
            out.finish_reason, run.plan.matched_stop(out.matched, None), req.stop_sequences
        )
        msg = AnthropicMessage(
            model=req.model,
            content=message_content(
                out, omit_thinking=thinking_omitted(req.thinking), thinking_mode=run.separate
            ),
            stop_reason=reason,
            stop_sequence=sequence,
            usage=_tiered(message_usage(meta, self.chat.enable_cache_report), req),
        )
        return JSONResponse(msg.model_dump(mode="json"))

    async def _count_tokens(self, request: Request) -> Response:
        req: CountTokensRequest = await _read_body(request, CountTokensRequest)
        chat_req = self._chat_request(req)
        try:
            plan = self.chat._plan_chat(chat_req)
        except RequestError as e:
            raise anthropic_field_error(e) from None
        tok = self.chat.tokenizer
        ids = await run_blocking(encode_with_plain_spans, tok, plan.prompt, plan.plain_spans)
        return JSONResponse({"input_tokens": len(ids)})

    def _prompt_tokens(self, run: ChatRun) -> int:
        """The prompt's token count before the first output reports it: the rendered prompt's ids,
        cut as ``--allow-auto-truncate`` cuts a prompt over ``max_req_input_len`` tokens."""
        ids = run.prompt_ids if run.prompt_ids is not None else getattr(run.obj, "input_ids", None)
        n = len(ids or ())
        limit = int(getattr(self.chat.tm, "max_req_input_len", 0) or 0)
        if getattr(self.chat.args, "allow_auto_truncate", False) and limit > 0:
            n = min(n, limit)
        return n

    # ------------------------------------------------------------------ streaming
    async def _stream(self, req: MessagesRequest, run: ChatRun, raw: Request) -> Response:
        gen, first = await self.chat._run_stream(run.obj, raw)
        plan = run.plan
        rp = (
            ReasoningParser(implicit_end=plan.reasoning.implicit_end, continued=plan.reasoning.continued)
            if run.separate
            else (ReasoningParser.answer() if plan.reasoning.answer_only else None)
        )
        st = _ChoiceStream(rp, plan.tool_reader(TOOL_CALL_PARSERS[self.chat.tool_call_parser]))
        cache_report = self.chat.enable_cache_report

        def step(events: MessageEvents, ret: dict[str, Any]) -> tuple[list[bytes], bool]:
            """The events of one engine output (cumulative text); ``True`` once it finished."""
            meta = ret.get("meta_info", {})
            out: list[bytes] = []
            # read piece by piece: the events keep the order the model wrote its blocks in when
            # one output holds text after a call (a whole reply in one scheduler step)
            for piece in output_pieces(ret, st.sent_text):
                fr, matched, reasoning_d, content_d, tool_deltas = self.chat._read_output(st, piece, plan)
                out += events.reasoning(reasoning_d) + events.text(content_d)
                for d in tool_deltas:
                    out += events.call(d)
            if fr is None:
                return out, False
            if st.tools is not None and st.tools.calls_whole and fr == "stop":
                fr = "tool_calls"
            reason, sequence = stop_reason(fr, plan.matched_stop(matched, None), req.stop_sequences)
            return out + events.finish(reason, sequence, message_usage(meta, cache_report)), True

        def _error_event(e: RequestError | ValueError) -> bytes:
            """A failure after the first output, named as the non-streamed answer names it
            (:func:`~sglang_v4.entrypoints.openai.serving_outputs.stream_failure`, then the Messages
            field: ``output_config.format`` for a grammar made from it)."""
            err = anthropic_field_error(stream_failure(e, run.grammar_field))
            return error_event(err.message, err.status)

        omit = thinking_omitted(req.thinking)
        # the SSE keep-alive interval passed with no output: the response starts now, and Anthropic's
        # clients read no event before message_start, so it goes out before the first ping
        early = (
            MessageEvents(
                AnthropicMessage(
                    model=req.model, usage=_tiered(prompt_usage(self._prompt_tokens(run), cache_report), req)
                ),
                omit_thinking=omit,
                thinking_mode=run.separate,
            )
            if isinstance(first, PendingFirst)
            else None
        )

        async def stream() -> AsyncIterator[bytes]:
            events = early
            try:
                if events is not None:
                    for ev in events.start():
                        yield ev
                # the first output (read now when the SSE keep-alive started the answer without it)
                head = await resolve_first(first)
                if events is None:
                    first_meta = (head[0] if isinstance(head, list) else head).get("meta_info", {})
                    start = AnthropicMessage(
                        model=req.model,
                        usage=_tiered(message_usage(first_meta, cache_report, output_tokens=0), req),
                    )
                    events = MessageEvents(start, omit_thinking=omit, thinking_mode=run.separate)
                    for ev in events.start():
                        yield ev
                async for item in _engine_outputs(gen, head):
                    ret = item[0] if isinstance(item, list) else item
                    abort = _abort_error(ret.get("meta_info", {}))
                    if abort is not None:
                        yield _error_event(abort)
                        return
                    out, done = step(events, ret)
                    for ev in out:
                        yield ev
                    if done:
                        return
                yield error_event("The generation ended without a finish reason.", 500)
            except ValueError as e:
                yield _error_event(e)
            except Exception as e:  # noqa: BLE001 - any failure ends the stream with an error event
                err = internal_stream_error(e)
                yield error_event(err.message, err.status)
            finally:
                # client gone or error (after an early message_start: stop reading the first output
                # too): the tokenizer manager aborts the request
                await close_generation(gen, first)

        # a silent interval is a ping event (never before message_start: the body's first step sends
        # it without waiting); a body closed before its first step never reaches the finally above
        return ClosingStreamingResponse(
            stream(),
            media_type="text/event-stream",
            keep_alive_frame=PING_EVENT,
            on_close=partial(close_generation, gen, first),
        )

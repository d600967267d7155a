"""Serving logic of ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions``.

Behaviour follows SGLang 0.5.x ``srt/entrypoints/openai/serving_{base,completions,chat}.py`` (read,
not copied): a request is converted into a :class:`GenerateReqInput` (SGLang sampling-parameter
names), sent through ``tokenizer_manager.generate_request(obj, raw_request)`` (an async generator
of SGLang-shaped dicts ``{"text", "output_ids", "meta_info", ["index"]}`` with *cumulative* text when
streaming; a list of dicts for a non-streamed batch), and the results are reshaped into OpenAI
responses / SSE chunks (``data: {...}\\n\\n`` ... ``data: [DONE]\\n\\n``).

Errors use SGLang's body ``{"object": "error", "message", "type", "param", "code"}``: 400
``BadRequestError`` for invalid input (including ``ValueError`` from the tokenizer manager),
401 for a missing/wrong API key, 404 ``NotFoundError`` for an unknown model name.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from sglang_v4.entrypoints.chat_encoding import encode_messages, message_text
from sglang_v4.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
    ChatCompletionTokenLogprob,
    ChatMessage,
    ChoiceLogprobs,
    CompletionRequest,
    CompletionResponse,
    CompletionResponseChoice,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
    CompletionTokensDetails,
    DeltaMessage,
    ErrorResponse,
    LogProbs,
    ModelCard,
    ModelList,
    PromptTokensDetails,
    TopLogprob,
    UsageInfo,
)
from sglang_v4.entrypoints.openai.reasoning_parser import THINK_END, ReasoningParser, split_reasoning
from sglang_v4.sampling.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

__all__ = ["OpenAIServing", "error_response", "MAX_TOP_LOGPROBS"]

MAX_TOP_LOGPROBS = 20
"""OpenAI's bound for ``top_logprobs`` (chat) and ``logprobs`` (completions: 5 in OpenAI; SGLang allows more)."""


class RequestError(Exception):
    """An error that becomes an HTTP error response (status, OpenAI/SGLang error type, param)."""

    def __init__(
        self, message: str, status: int = 400, err_type: str = "BadRequestError", param: str | None = None
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param


def error_response(
    message: str, status: int = 400, err_type: str = "BadRequestError", param: str | None = None
) -> JSONResponse:
    """SGLang's error body with HTTP ``status``."""
    body = ErrorResponse(message=message, type=err_type, param=param, code=status)
    return JSONResponse(body.model_dump(), status_code=status)


def _sse(obj: BaseModel | dict[str, Any]) -> bytes:
    data = obj.model_dump(mode="json") if isinstance(obj, BaseModel) else obj
    return b"data: " + orjson.dumps(data) + b"\n\n"


_SSE_DONE = b"data: [DONE]\n\n"


def _sse_error(message: str, err_type: str, status: int) -> bytes:
    """An in-stream error event in SGLang's shape: ``data: {"error": {...}}``."""
    return _sse({"error": ErrorResponse(message=message, type=err_type, code=status).model_dump()})


def _encode_ids(tokenizer: Any, text: str) -> list[int]:
    enc = tokenizer.encode(text, add_special_tokens=False)
    return list(getattr(enc, "ids", enc))


def _finish(meta: dict[str, Any]) -> tuple[str | None, Any]:
    """``(finish_reason string, matched_stop)`` from SGLang's ``meta_info["finish_reason"]``."""
    fr = meta.get("finish_reason")
    if not fr:
        return None, None
    if isinstance(fr, str):
        return fr, None
    return fr.get("type"), fr.get("matched")


def _abort_error(meta: dict[str, Any]) -> RequestError | None:
    fr = meta.get("finish_reason")
    if isinstance(fr, dict) and fr.get("type") == "abort":
        status = int(fr.get("status_code") or 400)
        et = "BadRequestError" if status == 400 else ("InternalServerError" if status >= 500 else "Error")
        return RequestError(str(fr.get("message") or "Aborted"), status, et)
    return None


def _lp_entry(e: Any) -> tuple[float | None, int, str | None]:
    """One SGLang logprob entry ``(logprob, token_id, text|None)`` (tuple or list)."""
    lp, tid = e[0], e[1]
    text = e[2] if len(e) > 2 else None
    return (None if lp is None else float(lp)), int(tid), text


class OpenAIServing:
    """The three OpenAI routes over a tokenizer manager.

    Args:
        tokenizer_manager: object with ``async generate_request(obj, request)`` (SGLang-shaped
            outputs) and, optionally, ``tokenizer`` (``encode``/``decode``), ``model_config``
            (``vocab_size``, ``context_len``) attributes.
        server_args: object with ``served_model_name`` / ``resolved_served_model_name()``,
            ``model_path``, ``api_key``, ``enable_cache_report``, ``context_length``.
    """

    def __init__(self, tokenizer_manager: Any, server_args: Any) -> None:
        self.tm = tokenizer_manager
        self.args = server_args
        name_fn = getattr(server_args, "resolved_served_model_name", None)
        if callable(name_fn):
            self.model_name = name_fn()
        else:
            self.model_name = getattr(server_args, "served_model_name", None) or getattr(
                server_args, "model_path", None
            )
            self.model_name = self.model_name or "default"
        self.enable_cache_report = bool(getattr(server_args, "enable_cache_report", False))
        self.api_key = getattr(server_args, "api_key", None)

    # ------------------------------------------------------------------ helpers
    @property
    def tokenizer(self) -> Any:
        return getattr(self.tm, "tokenizer", None)

    def _vocab_size(self) -> int | None:
        for holder in (self.tm, getattr(self.tm, "model_config", None)):
            v = getattr(holder, "vocab_size", None) if holder is not None else None
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        tok = self.tokenizer
        if tok is not None:
            try:
                return len(tok)  # HF tokenizers: includes added tokens (vocab_size does not)
            except TypeError:
                return None
        return None

    def _context_len(self) -> int | None:
        mc = getattr(self.tm, "model_config", None)
        for v in (
            getattr(self.tm, "context_len", None),
            getattr(mc, "context_len", None),
            getattr(self.args, "context_length", None),
        ):
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return None

    def check_auth(self, request: Request) -> JSONResponse | None:
        """401 unless ``Authorization: Bearer <api_key>`` matches (constant-time) when a key is set."""
        if not self.api_key:
            return None
        auth = request.headers.get("authorization", "")
        given = auth[7:] if auth.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(given.encode(), str(self.api_key).encode()):
            return error_response("Unauthorized: invalid or missing API key.", 401, "AuthenticationError")
        return None

    def _check_model(self, model: str | None) -> None:
        accepted = {self.model_name, "default"}
        mp = getattr(self.args, "model_path", None)
        if mp:
            accepted.add(str(mp))
        if model is not None and model not in accepted:
            raise RequestError(f"The model `{model}` does not exist.", 404, "NotFoundError", "model")

    async def _parse(self, request: Request, cls: type[BaseModel]) -> Any:
        """Decode the body as strict JSON (orjson: no NaN/Infinity, no lone surrogates, nesting
        bounded) and validate it in pydantic's strict mode (no ``"0.5"`` -> 0.5 or ``true`` -> 1.0
        coercions; integers are accepted for floats)."""
        body = await request.body()
        try:
            data = orjson.loads(body) if body else None
        except orjson.JSONDecodeError as e:
            raise RequestError(f"Invalid JSON body: {e}") from None
        if not isinstance(data, dict):
            raise RequestError("The request body must be a JSON object.")
        try:
            return cls.model_validate(data, strict=True)
        except ValidationError as e:
            errs = e.errors()
            first = errs[0] if errs else {}
            loc = ".".join(str(x) for x in first.get("loc", ()))
            msg = "; ".join(
                f"{'.'.join(str(x) for x in er.get('loc', ()))}: {er.get('msg')}" for er in errs[:5]
            )
            raise RequestError(f"Invalid request: {msg}", param=loc or None) from None

    def _sampling_params(
        self, req: CompletionRequest | ChatCompletionRequest, max_new_tokens: int | None
    ) -> dict:
        json_schema = req.json_schema
        rf = req.response_format
        if rf:
            rtype = rf.get("type")
            if rtype == "json_schema":
                js = rf.get("json_schema")
                if not isinstance(js, dict):
                    raise RequestError(
                        "response_format.json_schema must be an object with a 'schema'.",
                        param="response_format",
                    )
                json_schema = json.dumps(js.get("schema", js))
            elif rtype == "json_object":
                json_schema = '{"type": "object"}'
            elif rtype not in (None, "text"):
                raise RequestError(
                    f"response_format.type {rtype!r} is not supported.", param="response_format"
                )
        d: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "min_new_tokens": req.min_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "top_k": req.top_k,
            "min_p": req.min_p,
            "frequency_penalty": req.frequency_penalty,
            "presence_penalty": req.presence_penalty,
            "repetition_penalty": req.repetition_penalty,
            "stop": req.stop,
            "stop_token_ids": req.stop_token_ids,
            "stop_regex": req.stop_regex,
            "n": req.n,
            "ignore_eos": req.ignore_eos,
            "skip_special_tokens": req.skip_special_tokens,
            "no_stop_trim": req.no_stop_trim,
            "logit_bias": req.logit_bias,
            "sampling_seed": req.seed,
            "json_schema": json_schema,
            "regex": req.regex,
            "ebnf": req.ebnf,
            "custom_params": req.custom_params,
        }
        d = {k: v for k, v in d.items() if v is not None or k == "max_new_tokens"}
        _check_openai_ranges(req)
        # Validate now so that the client gets a 400 naming the field before anything is queued.
        try:
            sp = SamplingParams.from_dict(d)
            # Grammars are accepted only where the backend applies them (tokenizer_manager.grammar_enabled).
            sp.verify(self._vocab_size(), allow_grammar=bool(getattr(self.tm, "grammar_enabled", False)))
        except ValueError as e:
            msg = str(e)
            param = _param_of(msg)
            if param in _OPENAI_NAME:  # name the field the client sent
                msg, param = _OPENAI_NAME[param] + msg[len(param) :], _OPENAI_NAME[param]
            raise RequestError(msg, param=param) from None
        return d

    def _usage(self, rets: list[dict[str, Any]], n: int, thinking: bool = False) -> UsageInfo:
        metas = [r.get("meta_info", {}) for r in rets]
        prompt = sum(int(m.get("prompt_tokens", 0)) for m in metas[:: max(n, 1)])
        completion = sum(int(m.get("completion_tokens", 0)) for m in metas)
        usage = UsageInfo(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )
        if thinking:
            usage.reasoning_tokens = sum(self._reasoning_tokens(r.get("output_ids") or []) for r in rets)
            if usage.reasoning_tokens:
                usage.completion_tokens_details = CompletionTokensDetails(
                    reasoning_tokens=usage.reasoning_tokens
                )
        if self.enable_cache_report:
            cached = sum(int(m.get("cached_tokens", 0) or 0) for m in metas[:: max(n, 1)])
            usage.prompt_tokens_details = PromptTokensDetails(cached_tokens=cached)
        return usage

    def _reasoning_tokens(self, output_ids: list[int]) -> int:
        """Generated tokens of the reasoning block: up to and including the first ``</think>``."""
        tok = self.tokenizer
        end = tok.convert_tokens_to_ids(THINK_END) if tok is not None else None
        if isinstance(end, int) and end in output_ids:
            return output_ids.index(end) + 1
        return len(output_ids)

    def _token_text(self, tid: int, text: str | None) -> str:
        if text is not None:
            return text
        tok = self.tokenizer
        return tok.decode([tid]) if tok is not None else str(tid)

    async def _run(self, obj: Any, raw: Request | None) -> tuple[AsyncIterator[Any], Any]:
        """Start generation and get its first output (so input errors become a 400, not a broken stream)."""
        gen = self.tm.generate_request(obj, raw)
        try:
            first = await gen.__anext__()
        except StopAsyncIteration:
            raise RequestError("The request produced no output.", 500, "InternalServerError") from None
        except ValueError as e:
            status = int(getattr(e, "status_code", 400) or 400)
            et = (
                "BadRequestError"
                if status == 400
                else ("ServiceUnavailableError" if status == 503 else "Error")
            )
            raise RequestError(str(e), status, et, _param_of(str(e))) from None
        return gen, first

    async def _collect(self, obj: Any, raw: Request | None) -> list[dict[str, Any]]:
        gen, last = await self._run(obj, raw)
        try:
            async for item in gen:
                last = item
        except ValueError as e:
            status = int(getattr(e, "status_code", 400) or 400)
            raise RequestError(str(e), status, "BadRequestError" if status == 400 else "Error") from None
        finally:
            await gen.aclose()  # the tokenizer manager aborts unfinished requests on close
        rets = last if isinstance(last, list) else [last]
        for r in rets:
            err = _abort_error(r.get("meta_info", {}))
            if err is not None:
                raise err
        return rets

    async def _guard(self, request: Request, handler: Any) -> Response:
        denied = self.check_auth(request)
        if denied is not None:
            return denied
        try:
            return await handler(request)
        except RequestError as e:
            return error_response(e.message, e.status, e.err_type, e.param)
        except ValueError as e:
            return error_response(str(e), 400, "BadRequestError", _param_of(str(e)))

    # ------------------------------------------------------------------ /v1/models
    async def models(self, request: Request) -> Response:
        """``GET /v1/models``."""
        denied = self.check_auth(request)
        if denied is not None:
            return denied
        card = ModelCard(id=self.model_name, root=self.model_name, max_model_len=self._context_len())
        return JSONResponse(ModelList(data=[card]).model_dump())

    async def retrieve_model(self, request: Request, model: str) -> Response:
        """``GET /v1/models/{model}``: the model card for a name the API accepts, else 404 (as SGLang)."""
        denied = self.check_auth(request)
        if denied is not None:
            return denied
        try:
            self._check_model(model)
        except RequestError as e:
            return error_response(e.message, e.status, e.err_type, e.param)
        card = ModelCard(id=model, root=self.model_name, max_model_len=self._context_len())
        return JSONResponse(card.model_dump())

    # ------------------------------------------------------------------ /v1/completions
    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions``."""
        return await self._guard(request, self._completions)

    async def _completions(self, request: Request) -> Response:
        from sglang_v4.managers.io_struct import GenerateReqInput

        req: CompletionRequest = await self._parse(request, CompletionRequest)
        self._check_model(req.model)
        if req.suffix:
            raise RequestError("suffix is not supported.", param="suffix")
        if req.logprobs is not None and not 0 <= req.logprobs <= MAX_TOP_LOGPROBS:
            raise RequestError(
                f"logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {req.logprobs}.", param="logprobs"
            )
        if req.max_tokens is not None and req.max_tokens < 0:
            raise RequestError(f"max_tokens must be at least 0, got {req.max_tokens}.", param="max_tokens")
        prompt = req.prompt
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if prompt == "" or prompt == [] or (isinstance(prompt, list) and any(p in ("", []) for p in prompt)):
            raise RequestError("prompt must not be empty.", param="prompt")
        is_text = isinstance(prompt, str) or (isinstance(prompt, list) and isinstance(prompt[0], str))
        sp = self._sampling_params(req, req.max_tokens)
        n = req.n or 1
        return_logprob = req.logprobs is not None
        kw: dict[str, Any] = dict(
            sampling_params=sp,
            return_logprob=return_logprob,
            top_logprobs_num=req.logprobs or 0,
            logprob_start_len=0 if (req.echo and return_logprob) else -1,
            return_text_in_logprobs=True,
            stream=req.stream,
            rid=req.rid,
        )
        if req.priority is not None:
            kw["priority"] = req.priority
        obj = GenerateReqInput(text=prompt, **kw) if is_text else GenerateReqInput(input_ids=prompt, **kw)
        prompts = (
            [prompt] if (isinstance(prompt, str) or (prompt and isinstance(prompt[0], int))) else list(prompt)
        )
        if req.stream:
            return await self._completions_stream(req, obj, prompts, n, request)
        rets = await self._collect(obj, request)
        choices = []
        for idx, ret in enumerate(rets):
            meta = ret.get("meta_info", {})
            prefix = self._prompt_text(prompts, idx, n) if req.echo else ""
            lp = None
            if return_logprob:
                lp = self._completion_logprobs(meta, req.echo, 0)
            fr, matched = _finish(meta)
            choices.append(
                CompletionResponseChoice(
                    index=idx,
                    text=prefix + ret.get("text", ""),
                    logprobs=lp,
                    finish_reason=fr,
                    matched_stop=matched,
                )
            )
        resp = CompletionResponse(
            id=f"cmpl-{uuid.uuid4().hex}", model=req.model, choices=choices, usage=self._usage(rets, n)
        )
        return JSONResponse(resp.model_dump(mode="json"))

    def _prompt_text(self, prompts: list[Any], idx: int, n: int) -> str:
        # The tokenizer manager returns a batch with n samples grouped by prompt: [p0 x n, p1 x n, ...].
        p = prompts[min(idx // max(n, 1), len(prompts) - 1)]
        if isinstance(p, str):
            return p
        tok = self.tokenizer
        return tok.decode(list(p)) if tok is not None else ""

    def _completion_logprobs(
        self, meta: dict[str, Any], echo: bool, start: int, in_start: int = 0
    ) -> LogProbs:
        entries: list[tuple[float | None, int, str | None]] = []
        tops: list[Any] = []
        if echo:
            ins = [_lp_entry(e) for e in (meta.get("input_token_logprobs") or [])]
            entries += ins[in_start:]
            itop = list(meta.get("input_top_logprobs") or [])
            itop += [None] * (len(ins) - len(itop))
            tops += itop[in_start:]
        outs = [_lp_entry(e) for e in (meta.get("output_token_logprobs") or [])][start:]
        otop = list(meta.get("output_top_logprobs") or [])[start:]
        otop += [None] * (len(outs) - len(otop))
        entries += outs
        tops += otop
        lp = LogProbs()
        offset = 0
        for (logprob, tid, text), top in zip(entries, tops):
            tok = self._token_text(tid, text)
            lp.tokens.append(tok)
            lp.token_logprobs.append(logprob)
            lp.text_offset.append(offset)
            offset += len(tok)
            if top:
                d: dict[str, float] = {}
                for e in top:
                    tl, ti, tt = _lp_entry(e)
                    if tl is not None:
                        d[self._token_text(ti, tt)] = tl
                lp.top_logprobs.append(d)
            else:
                lp.top_logprobs.append(None)
        return lp

    async def _completions_stream(
        self, req: CompletionRequest, obj: Any, prompts: list[Any], n: int, raw: Request
    ) -> Response:
        gen, first = await self._run(obj, raw)
        err = _abort_error(first.get("meta_info", {})) if isinstance(first, dict) else None
        if err is not None:
            raise err
        rid = f"cmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        continuous = bool(req.stream_options and req.stream_options.continuous_usage_stats)

        async def stream() -> AsyncIterator[bytes]:
            sent_text: dict[int, int] = {}
            sent_lp: dict[int, int] = {}
            finals: dict[int, dict[str, Any]] = {}
            try:
                item: Any = first
                it = gen.__aiter__()
                while True:
                    for ret in item if isinstance(item, list) else [item]:
                        idx = int(ret.get("index", 0))
                        meta = ret.get("meta_info", {})
                        abort = _abort_error(meta)
                        if abort is not None:
                            yield _sse_error(abort.message, abort.err_type, abort.status)
                            finals[idx] = ret
                            continue
                        text = ret.get("text", "")
                        prefix = ""
                        if idx not in sent_text:
                            sent_text[idx] = 0
                            sent_lp[idx] = 0
                            if req.echo:
                                prefix = self._prompt_text(prompts, idx, n)
                        delta = text[sent_text[idx] :] if len(text) >= sent_text[idx] else ""
                        sent_text[idx] = max(sent_text[idx], len(text))
                        lp = None
                        if req.logprobs is not None:
                            outs = meta.get("output_token_logprobs") or []
                            lp = self._completion_logprobs(meta, req.echo and prefix != "", sent_lp[idx])
                            sent_lp[idx] = len(outs)
                        fr, matched = _finish(meta)
                        if fr is not None:
                            finals[idx] = ret
                        if not (prefix or delta or fr or (lp and lp.tokens)):
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
                                )
                            ],
                            usage=self._usage([ret], 1) if continuous else None,
                        )
                        yield _sse(chunk)
                    try:
                        item = await it.__anext__()
                    except StopAsyncIteration:
                        break
                if include_usage:
                    rets = [finals[i] for i in sorted(finals)]
                    yield _sse(
                        CompletionStreamResponse(
                            id=rid, created=created, model=req.model, choices=[], usage=self._usage(rets, n)
                        )
                    )
            except ValueError as e:
                status = int(getattr(e, "status_code", 400) or 400)
                yield _sse_error(str(e), "BadRequestError" if status == 400 else "Error", status)
            finally:
                await gen.aclose()  # client gone or error: the tokenizer manager aborts the request
            yield _SSE_DONE

        return StreamingResponse(stream(), media_type="text/event-stream")

    # ------------------------------------------------------------------ /v1/chat/completions
    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``."""
        return await self._guard(request, self._chat)

    def _render_chat(self, req: ChatCompletionRequest) -> tuple[str, bool]:
        kwargs = req.chat_template_kwargs or {}
        thinking = bool(kwargs.get("thinking", kwargs.get("enable_thinking", False)))
        effort = req.reasoning_effort or kwargs.get("reasoning_effort")
        if req.tools and req.tool_choice != "none":
            raise RequestError("tools / function calling is not supported yet.", param="tools")
        msgs = [m.model_dump(exclude_none=True) for m in req.messages]
        if not msgs:
            raise RequestError("messages must contain at least one message.", param="messages")
        if req.continue_final_message and msgs[-1].get("role") == "assistant":
            head = (
                encode_messages(msgs[:-1], thinking, True, reasoning_effort=effort) if len(msgs) > 1 else ""
            )
            return head + message_text(msgs[-1].get("content"), "messages[-1].content"), thinking
        return encode_messages(msgs, thinking, True, reasoning_effort=effort), thinking

    async def _chat(self, request: Request) -> Response:
        from sglang_v4.managers.io_struct import GenerateReqInput

        req: ChatCompletionRequest = await self._parse(request, ChatCompletionRequest)
        self._check_model(req.model)
        if req.top_logprobs is not None:
            if not req.logprobs:
                raise RequestError("top_logprobs requires logprobs to be true.", param="top_logprobs")
            if not 0 <= req.top_logprobs <= MAX_TOP_LOGPROBS:
                raise RequestError(
                    f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {req.top_logprobs}.",
                    param="top_logprobs",
                )
        max_new = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        if max_new is not None and max_new < 0:
            raise RequestError(f"max_tokens must be at least 0, got {max_new}.", param="max_tokens")
        try:
            prompt, thinking = self._render_chat(req)
        except ValueError as e:
            raise RequestError(str(e), param="messages") from None
        sp = self._sampling_params(req, max_new)
        n = req.n or 1
        kw: dict[str, Any] = dict(
            sampling_params=sp,
            return_logprob=req.logprobs,
            top_logprobs_num=req.top_logprobs or 0,
            return_text_in_logprobs=True,
            stream=req.stream,
            rid=req.rid,
        )
        if req.priority is not None:
            kw["priority"] = req.priority
        tok = self.tokenizer
        if tok is not None:
            obj = GenerateReqInput(input_ids=_encode_ids(tok, prompt), **kw)
        else:
            obj = GenerateReqInput(text=prompt, **kw)
        separate = thinking and req.separate_reasoning
        if req.stream:
            return await self._chat_stream(req, obj, n, separate, request)
        rets = await self._collect(obj, request)
        choices = []
        for idx, ret in enumerate(rets):
            meta = ret.get("meta_info", {})
            text = ret.get("text", "")
            reasoning = None
            if separate:
                reasoning, text = split_reasoning(text)
            fr, matched = _finish(meta)
            lp = self._chat_logprobs(meta, 0) if req.logprobs else None
            choices.append(
                ChatCompletionResponseChoice(
                    index=idx,
                    message=ChatMessage(content=text, reasoning_content=reasoning),
                    logprobs=lp,
                    finish_reason=fr,
                    matched_stop=matched,
                )
            )
        resp = ChatCompletionResponse(
            id=f"chatcmpl-{uuid.uuid4().hex}",
            model=req.model,
            choices=choices,
            usage=self._usage(rets, n, separate),
        )
        return JSONResponse(resp.model_dump(mode="json"))

    def _chat_logprobs(self, meta: dict[str, Any], start: int) -> ChoiceLogprobs:
        outs = [_lp_entry(e) for e in (meta.get("output_token_logprobs") or [])][start:]
        tops = list(meta.get("output_top_logprobs") or [])[start:]
        tops += [None] * (len(outs) - len(tops))
        content = []
        for (logprob, tid, text), top in zip(outs, tops):
            tok = self._token_text(tid, text)
            tl_list = []
            for e in top or []:
                tl, ti, tt = _lp_entry(e)
                ttok = self._token_text(ti, tt)
                tl_list.append(
                    TopLogprob(
                        token=ttok,
                        bytes=list(ttok.encode("utf-8")),
                        logprob=tl if tl is not None else float("-inf"),
                    )
                )
            content.append(
                ChatCompletionTokenLogprob(
                    token=tok,
                    bytes=list(tok.encode("utf-8")),
                    logprob=logprob if logprob is not None else float("-inf"),
                    top_logprobs=tl_list,
                )
            )
        return ChoiceLogprobs(content=content)

    async def _chat_stream(
        self, req: ChatCompletionRequest, obj: Any, n: int, separate: bool, raw: Request
    ) -> Response:
        gen, first = await self._run(obj, raw)
        err = _abort_error(first.get("meta_info", {})) if isinstance(first, dict) else None
        if err is not None:
            raise err
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        continuous = bool(req.stream_options and req.stream_options.continuous_usage_stats)

        def chunk(idx: int, delta: DeltaMessage, meta: dict[str, Any] | None = None, **kw: Any) -> bytes:
            return _sse(
                ChatCompletionStreamResponse(
                    id=rid,
                    created=created,
                    model=req.model,
                    choices=[ChatCompletionResponseStreamChoice(index=idx, delta=delta, **kw)],
                    usage=self._usage([{"meta_info": meta}], 1) if continuous and meta is not None else None,
                )
            )

        async def stream() -> AsyncIterator[bytes]:
            sent_text: dict[int, int] = {}
            sent_lp: dict[int, int] = {}
            parsers: dict[int, ReasoningParser] = {}
            finals: dict[int, dict[str, Any]] = {}
            try:
                item: Any = first
                it = gen.__aiter__()
                while True:
                    for ret in item if isinstance(item, list) else [item]:
                        idx = int(ret.get("index", 0))
                        meta = ret.get("meta_info", {})
                        abort = _abort_error(meta)
                        if abort is not None:
                            yield _sse_error(abort.message, abort.err_type, abort.status)
                            finals[idx] = ret
                            continue
                        if idx not in sent_text:
                            sent_text[idx] = 0
                            sent_lp[idx] = 0
                            if separate:
                                parsers[idx] = ReasoningParser(stream_reasoning=req.stream_reasoning)
                            yield chunk(idx, DeltaMessage(role="assistant", content=""))
                        text = ret.get("text", "")
                        delta = text[sent_text[idx] :] if len(text) >= sent_text[idx] else ""
                        sent_text[idx] = max(sent_text[idx], len(text))
                        fr, matched = _finish(meta)
                        reasoning_d, content_d = "", delta
                        if separate:
                            reasoning_d, content_d = parsers[idx].feed(delta)
                            if fr is not None:
                                r2, c2 = parsers[idx].flush()
                                reasoning_d += r2
                                content_d += c2
                        lp = None
                        if req.logprobs:
                            lp = self._chat_logprobs(meta, sent_lp[idx])
                            sent_lp[idx] = len(meta.get("output_token_logprobs") or [])
                        if reasoning_d:
                            yield chunk(idx, DeltaMessage(reasoning_content=reasoning_d), meta)
                        if content_d or (lp and lp.content):
                            yield chunk(idx, DeltaMessage(content=content_d), meta, logprobs=lp)
                        if fr is not None:
                            finals[idx] = ret
                            yield chunk(idx, DeltaMessage(), meta, finish_reason=fr, matched_stop=matched)
                    try:
                        item = await it.__anext__()
                    except StopAsyncIteration:
                        break
                if include_usage:
                    rets = [finals[i] for i in sorted(finals)]
                    yield _sse(
                        ChatCompletionStreamResponse(
                            id=rid,
                            created=created,
                            model=req.model,
                            choices=[],
                            usage=self._usage(rets, n, separate),
                        )
                    )
            except ValueError as e:
                status = int(getattr(e, "status_code", 400) or 400)
                yield _sse_error(str(e), "BadRequestError" if status == 400 else "Error", status)
            finally:
                await gen.aclose()  # client gone or error: the tokenizer manager aborts the request
            yield _SSE_DONE

        return StreamingResponse(stream(), media_type="text/event-stream")


#: OpenAI's documented bounds that are tighter than SGLang's native ones (the rest -- top_p in (0, 1],
#: penalties in [-2, 2], n >= 1, max_tokens >= 0, logit_bias in [-100, 100] and valid token ids --
#: are checked by ``SamplingParams.verify`` for both APIs).
OPENAI_MAX_TEMPERATURE = 2.0
OPENAI_MAX_STOP = 4

#: SGLang sampling-parameter names whose OpenAI request field is named differently.
_OPENAI_NAME = {"min_new_tokens": "min_tokens", "max_new_tokens": "max_tokens", "sampling_seed": "seed"}


def _check_openai_ranges(req: Any) -> None:
    """OpenAI-only ranges: ``temperature`` in [0, 2], at most 4 ``stop`` strings.

    Raises:
        RequestError: 400 naming the field (``param``).
    """
    t = req.temperature
    if t is not None and not 0.0 <= t <= OPENAI_MAX_TEMPERATURE:
        raise RequestError(
            f"temperature must be in [0, {OPENAI_MAX_TEMPERATURE:g}], got {t}.", param="temperature"
        )
    if isinstance(req.stop, list) and len(req.stop) > OPENAI_MAX_STOP:
        raise RequestError(
            f"stop: at most {OPENAI_MAX_STOP} stop sequences are allowed, got {len(req.stop)}.", param="stop"
        )


def _param_of(message: str) -> str | None:
    """Best-effort field name at the start of a ValueError message (``"top_p must be ..."`` -> ``top_p``)."""
    head = message.split(" ", 1)[0].rstrip(":,.")
    if head and head.replace("_", "").replace(".", "").isalnum() and head[0].islower():
        return head
    return None

"""Shared part of the OpenAI-compatible routes: request parsing and authentication, usage,
generation plumbing and ``/v1/models`` (the routes: :mod:`.serving_completions`,
:mod:`.serving_chat`; assembled in :mod:`.serving`).

Behaviour follows SGLang 0.5.x ``srt/entrypoints/openai/serving_{base,completions,chat}.py`` (read,
not copied): a request is converted into a :class:`GenerateReqInput` (SGLang sampling-parameter
names, :mod:`.request_sampling`), sent through ``tokenizer_manager.generate_request(obj,
raw_request)`` (an async generator of SGLang-shaped dicts ``{"text", "output_ids", "meta_info",
["index"]}`` with *cumulative* text when streaming; a list of dicts for a non-streamed batch), and
the results are reshaped into OpenAI responses / SSE chunks (:mod:`.serving_outputs`).

Errors (:mod:`.request_errors`, re-exported here) use SGLang's body ``{"object": "error",
"message", "type", "param", "code"}``: 400 ``BadRequestError`` for invalid input (including
``ValueError`` from the tokenizer manager), 401 for a missing/wrong API key, 404 ``NotFoundError``
for an unknown model name. A server
started with ``--skip-tokenizer-init`` answers both generation routes with a 400 (their prompts
and responses are text, or need a chat template; SGLang fails there without a clear error):
its clients use ``/generate`` with ``input_ids``. ``/v1/models`` still answers.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from sglang_v4.entrypoints.admission import api_key_matches
from sglang_v4.entrypoints.dp_rank_header import DP_RANK_HEADER, DP_RANK_HEADER_ROUTES, dp_rank_from_header
from sglang_v4.entrypoints.openai.logprob_limits import max_logprobs_of
from sglang_v4.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    CompletionTokensDetails,
    ModelCard,
    ModelList,
    ModelPermission,
    PromptTokensDetails,
    UsageInfo,
)
from sglang_v4.entrypoints.openai.reasoning_parser import canonical_reasoning_parser
from sglang_v4.entrypoints.openai.request_errors import (  # re-exported: the routes import them from here
    GRAMMAR_FIELDS,
    OPENAI_MAX_TEMPERATURE,
    RequestError,
    _check_stream_options,
    _check_unsupported,
    _param_of,
    check_user_message_contents,
    error_response,
    grammar_error_for,
    read_json_object,
    validate_request,
)
from sglang_v4.entrypoints.openai.request_sampling import build_sampling_params
from sglang_v4.entrypoints.openai.sampling_defaults import model_sampling_defaults
from sglang_v4.entrypoints.openai.serving_outputs import (  # re-exported: public names of the outputs
    MAX_TOP_LOGPROBS,
    OPENAI_MIN_LOGPROB,
    _abort_error,
    openai_logprob,
    stream_failure,
)
from sglang_v4.entrypoints.openai.tool_parser import canonical_tool_call_parser
from sglang_v4.entrypoints.openai.vllm_fields import check_refused_fields, check_vllm_fields
from sglang_v4.entrypoints.root_path import route_path
from sglang_v4.entrypoints.sse_keep_alive import first_output_within, request_keep_alive_interval
from sglang_v4.managers.tokenization import LogprobVolumeError
from sglang_v4.prompt_tokens import encode_with_plain_spans
from sglang_v4.utils import byte_level_token_bytes

logger = logging.getLogger(__name__)

__all__ = [
    "GRAMMAR_FIELDS",
    "MAX_TOP_LOGPROBS",
    "OPENAI_MAX_TEMPERATURE",
    "OPENAI_MIN_LOGPROB",
    "OpenAIServingBase",
    "RequestError",
    "dp_rank_header_pin",
    "error_response",
    "grammar_error_for",
    "openai_logprob",
    "read_json_object",
    "stream_failure",
    "validate_request",
]

#: The 400 of the generation routes on a server started with ``--skip-tokenizer-init``.
SKIP_TOKENIZER_OPENAI_MSG = (
    "{path} needs the tokenizer (text prompts and responses, the chat template), which this server "
    "does not load (it was started with --skip-tokenizer-init): use /generate with input_ids."
)


def dp_rank_header_pin(request: Request) -> bool:
    """Whether ``request`` (on a generation route, :data:`~sglang_v4.entrypoints.dp_rank_header.
    DP_RANK_HEADER_ROUTES`) carries SGLang's ``X-Data-Parallel-Rank`` header naming this server's
    one rank (0); the header overrides a body rank pin, as in SGLang.

    Raises:
        RequestError: 400: the header is not an integer (SGLang's message), or names another rank.
    """
    if route_path(request.scope) not in DP_RANK_HEADER_ROUTES:
        return False
    try:
        return dp_rank_from_header(request.headers.get(DP_RANK_HEADER)) is not None
    except ValueError as e:
        raise RequestError(str(e)) from None


def _strip_slash(name: str) -> str:
    """``name`` without trailing ``/`` (``"/"`` itself kept), for comparing model names."""
    return name.rstrip("/") or name


class OpenAIServingBase:
    """State and helpers shared by the OpenAI routes, over a tokenizer manager.

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
        names_fn = getattr(server_args, "served_model_names", None)
        #: every id the routes accept and ``/v1/models`` lists (``--served-model-name a b``)
        self.model_names: list[str] = list(names_fn()) if callable(names_fn) else [self.model_name]
        self.enable_cache_report = bool(getattr(server_args, "enable_cache_report", False))
        #: Sampling parameters a chat request leaves unset (``--sampling-defaults``); read (and
        #: logged) once, by the handler that serves chat (:meth:`load_chat_sampling_defaults`).
        self.chat_sampling_defaults: dict[str, Any] = {}
        self.skip_tokenizer_init = bool(getattr(server_args, "skip_tokenizer_init", False))
        self.api_key = getattr(server_args, "api_key", None)
        #: ``created`` of every ``/v1/models`` card (Unix seconds): the time the routes came up, the
        #: same in each answer, so a client that caches or sorts the list sees one model, not a new
        #: one per call.
        self.models_created = int(time.time())
        #: The cards' ``permission`` entry (vLLM's), one for the server's life like ``created``.
        self.model_permission = ModelPermission(created=self.models_created)
        # parsers of chat output (defaults: the DeepSeek-V4 ones)
        self.tool_call_parser = canonical_tool_call_parser(
            getattr(server_args, "tool_call_parser", None) or "deepseekv4"
        )
        self.reasoning_parser = canonical_reasoning_parser(
            getattr(server_args, "reasoning_parser", None) or "deepseek-v4"
        )

    def load_chat_sampling_defaults(self) -> None:
        """Read :attr:`chat_sampling_defaults` from the model directory as ``--sampling-defaults``
        says (:func:`~.sampling_defaults.model_sampling_defaults`, which logs them). Called by
        the chat routes' handler only, so that the server's other handlers (``/v1/score``) do
        not read and log them again."""
        self.chat_sampling_defaults = model_sampling_defaults(
            getattr(self.args, "model_path", None), getattr(self.args, "sampling_defaults", "model")
        )

    # ------------------------------------------------------------------ helpers
    @property
    def tokenizer(self) -> Any:
        """The tokenizer manager's tokenizer (``encode`` / ``decode``), or ``None`` without one."""
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

    def _max_logprobs(self) -> int:
        """The most top logprobs per position a request may ask for (``--max-logprobs``, ``-1``
        resolved to the vocabulary size: :func:`~.logprob_limits.max_logprobs_of`)."""
        return max_logprobs_of(self.args, self._vocab_size())

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
        """401 unless ``Authorization: Bearer <api_key>`` or ``x-api-key: <api_key>`` (Anthropic's
        header) matches when a key is set: the admission middleware's rule
        (:func:`~sglang_v4.entrypoints.admission.api_key_matches`)."""
        if not self.api_key:
            return None
        if not api_key_matches(request.scope.get("headers", ()), str(self.api_key).encode()):
            return error_response("Unauthorized: invalid or missing API key.", 401)
        return None

    def _check_model(self, model: str | None) -> None:
        """404 unless ``model`` is a served name, ``"default"`` or the model path (or omitted),
        trailing ``/`` ignored on both sides: ``/x/model/`` names a server launched with
        ``/x/model`` and the other way round. The message is vLLM's sentence followed by the served
        name (``--served-model-name``), or every served name when there are several (the ids
        ``/v1/models`` lists), so a request copied from a recipe that names another model id says
        what to send instead."""
        accepted = {self.model_name, *self.model_names, "default"}
        mp = getattr(self.args, "model_path", None)
        if mp:
            accepted |= {str(mp), os.path.normpath(str(mp))}
        if model is not None and _strip_slash(model) not in {_strip_slash(a) for a in accepted}:
            raise RequestError(
                f"The model `{model}` does not exist. {self._served_names_sentence()}", 404, param="model"
            )

    def _listed_name(self, model: str) -> str:
        """The id ``/v1/models`` lists for ``model``, a name :meth:`_check_model` accepts: the
        served name equal to it up to trailing ``/``, else (``"default"``, the model path) the
        first served name. ``GET /v1/models/{model}`` answers with this id, so a retrieved card
        is one of the listed cards and never an id the list lacks (``"default"``, ``"name/"``)."""
        names = self.model_names or [self.model_name]
        wanted = _strip_slash(model)
        return next((n for n in names if _strip_slash(n) == wanted), names[0])

    def _served_names_sentence(self) -> str:
        """The sentence of the model-not-found 404 that names what to send: the served name, or
        every served name (``--served-model-name a b``) in ``/v1/models``'s order."""
        names = list(dict.fromkeys([self.model_name, *self.model_names]))
        if len(names) == 1:
            return f"The served model name is `{names[0]}`."
        return "The served model names are " + ", ".join(f"`{n}`" for n in names) + "."

    async def _parse(self, request: Request, cls: type[BaseModel]) -> Any:
        """Decode the body as strict JSON (orjson: no NaN/Infinity, no lone surrogates, nesting
        bounded) and validate it in pydantic's strict mode (no ``"0.5"`` -> 0.5 or ``true`` -> 1.0
        coercions; integers are accepted for floats); a refused vLLM field set in the body is refused
        first (:func:`~.vllm_fields.check_refused_fields`); a chat user message without ``content``
        is a 400 naming it (:func:`~.request_errors.check_user_message_contents`). Cross-field rule checked here for both routes:
        ``stream_options`` needs ``stream: true`` (:func:`_check_stream_options`). On the generation
        routes SGLang's ``X-Data-Parallel-Rank`` header is read (:mod:`~sglang_v4.entrypoints.dp_rank_header`):
        rank 0 is served (and overrides a body rank pin), anything else is a 400."""
        data = await read_json_object(request)
        if cls in (ChatCompletionRequest, CompletionRequest):
            check_refused_fields(data, cls.model_fields)
        req = validate_request(cls, data)
        if cls is ChatCompletionRequest:
            check_user_message_contents(req.messages)
        _check_stream_options(req)
        _check_unsupported(req, dp_rank_from_header=dp_rank_header_pin(request))
        if isinstance(req, (ChatCompletionRequest, CompletionRequest)):
            check_vllm_fields(req)
        return req

    def _sampling_params(
        self,
        req: CompletionRequest | ChatCompletionRequest,
        max_new_tokens: int | None,
        structural_tag: str | None = None,
    ) -> dict[str, Any]:
        """SGLang sampling parameters of a request, validated (400 naming the field on error):
        :func:`~.request_sampling.build_sampling_params` with this server's tokenizer, vocabulary
        size, grammar backend, chat sampling defaults and ``--preferred-sampling-params``.

        Raises:
            RequestError: 400 naming the request's field.
        """
        return build_sampling_params(
            req,
            max_new_tokens,
            structural_tag,
            tokenizer=self.tokenizer,
            vocab_size=self._vocab_size(),
            # Grammars are accepted only where the backend applies them (tokenizer_manager.grammar_enabled).
            grammar_enabled=bool(getattr(self.tm, "grammar_enabled", False)),
            chat_defaults=self.chat_sampling_defaults,
            preferred=getattr(self.args, "preferred_sampling_params", None),
        )

    def _usage(
        self, rets: list[dict[str, Any]], n: int, reasoning_tokens: list[int] | None = None
    ) -> UsageInfo:
        """Token usage of ``rets`` (``n`` samples per prompt); ``reasoning_tokens``: per-ret
        counts of reasoning tokens (thinking mode), reported as SGLang and OpenAI do."""
        metas = [r.get("meta_info", {}) for r in rets]
        prompt = sum(int(m.get("prompt_tokens", 0)) for m in metas[:: max(n, 1)])
        completion = sum(int(m.get("completion_tokens", 0)) for m in metas)
        usage = UsageInfo(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )
        if reasoning_tokens is not None:
            usage.reasoning_tokens = sum(reasoning_tokens)
            if usage.reasoning_tokens:
                usage.completion_tokens_details = CompletionTokensDetails(
                    reasoning_tokens=usage.reasoning_tokens
                )
        if self.enable_cache_report:
            cached = sum(int(m.get("cached_tokens", 0) or 0) for m in metas[:: max(n, 1)])
            usage.prompt_tokens_details = PromptTokensDetails(cached_tokens=cached)
        return usage

    def _stream_usage(self, req: Any) -> tuple[bool, bool]:
        """``(include_usage, continuous)`` of a streamed chat or completions request (``req``: its
        parsed body): a final usage chunk when ``stream_options.include_usage`` asks for it or
        the server sends one by default (SGLang's ``--stream-response-default-include-usage``);
        usage on every chunk too with ``stream_options.continuous_usage_stats`` (vLLM's field), only
        when the final usage chunk is sent (vLLM's ``include_usage and continuous_usage_stats``).
        vLLM's ``--enable-force-include-usage`` gives ``(True, True)`` whatever the request says
        (vLLM's ``should_include_usage``)."""
        if getattr(self.args, "enable_force_include_usage", False):
            return True, True
        opts = req.stream_options
        include = bool(opts and opts.include_usage) or bool(
            getattr(self.args, "stream_response_default_include_usage", False)
        )
        return include, include and bool(opts and opts.continuous_usage_stats)

    async def _encode_prompt(
        self,
        text: str,
        max_new_tokens: int | None,
        add_special_tokens: bool = False,
        plain_spans: tuple[tuple[int, int], ...] = (),
    ) -> list[int]:
        """Token ids of a rendered prompt (no special tokens added unless ``add_special_tokens``:
        BOS / EOS as the tokenizer's config says, what the tokenizer manager does with a text
        prompt), off the event loop for long texts when the tokenizer manager offers ``encode_text``.
        ``plain_spans``: the spans of the request's own text in a chat prompt, tokenized as plain
        text (:func:`~sglang_v4.prompt_tokens.encode_with_plain_spans`).

        Raises:
            ValueError: the prompt provably cannot fit in the context (a 400).
        """
        encode = getattr(self.tm, "encode_text", None)
        if encode is not None:
            kw = {"plain_spans": plain_spans} if plain_spans else {}
            return list(
                await encode(text, add_special_tokens=add_special_tokens, max_new_tokens=max_new_tokens, **kw)
            )
        if plain_spans:
            return encode_with_plain_spans(self.tokenizer, text, plain_spans)
        enc = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return list(getattr(enc, "ids", enc))

    def _token_text(self, tid: int, text: str | None) -> str:
        if text is not None:
            return text
        tok = self.tokenizer
        return tok.decode([tid]) if tok is not None else str(tid)

    def _token_bytes(self, tid: int, text: str) -> list[int]:
        """The UTF-8 bytes of token ``tid`` for chat logprobs' ``bytes`` field (``text``: its
        decoded text).

        A token that holds part of a multi-byte character (byte-level BPE) decodes to U+FFFD;
        its ``bytes`` are then the token's own bytes (e.g. ``[240, 159]``), read from the byte-level
        vocabulary, so that the concatenated ``bytes`` of the tokens rebuild the text, as OpenAI
        documents the field. Other tokens: ``text`` encoded as UTF-8.
        """
        if "\ufffd" in text:
            raw = byte_level_token_bytes(self.tokenizer, tid)
            if raw is not None:
                return list(raw)
        return list(text.encode("utf-8"))

    async def _run(self, obj: Any, raw: Request | None, wait_s: float = 0) -> tuple[AsyncIterator[Any], Any]:
        """Start generation and get its first output (so input errors become a 400, not a broken
        stream); with ``wait_s > 0``, one that takes longer is a
        :class:`~sglang_v4.entrypoints.sse_keep_alive.PendingFirst` (the SSE keep-alive).

        Raises:
            RequestError: the tokenizer manager's ``ValueError`` (400 unless it names a status).
            LogprobVolumeError: unchanged, for the route to name its field
                (:func:`~.logprob_limits.logprob_volume_error`; a route that does not is answered
                400 by :meth:`_guard`).
        """
        gen = self.tm.generate_request(obj, raw)
        try:
            first = await first_output_within(gen, wait_s)
        except StopAsyncIteration:
            raise RequestError("The request produced no output.", 500) from None
        except LogprobVolumeError:
            raise  # the route names its own field (logprob_limits.logprob_volume_error)
        except ValueError as e:
            status = int(getattr(e, "status_code", 400) or 400)
            err = RequestError(str(e), status, param=_param_of(str(e)) if status == 400 else None)
            err.batch_index = getattr(e, "batch_index", None)
            raise err from None
        return gen, first

    async def _run_stream(self, obj: Any, raw: Request | None) -> tuple[AsyncIterator[Any], Any]:
        """:meth:`_run` for a streamed answer: a request that ended with an abort before its first
        output (queue full, ``/abort_request`` while queued, a scheduler-side 400) raises its
        error as a plain HTTP error, the generator closed first (an unclosed one keeps the request
        in the tokenizer manager's in-flight table until the garbage collector finalises it). With
        the SSE keep-alive on, the first output is awaited at most one interval; past that it is a
        :class:`~sglang_v4.entrypoints.sse_keep_alive.PendingFirst` that
        :func:`~.serving_outputs._engine_outputs` resolves inside the stream.

        Raises:
            RequestError: the abort's message and status, or what :meth:`_run` raises.
        """
        gen, first = await self._run(obj, raw, request_keep_alive_interval(raw))
        err = _abort_error(first.get("meta_info", {})) if isinstance(first, dict) else None
        if err is not None:
            await gen.aclose()
            raise err
        return gen, first

    async def _collect(self, obj: Any, raw: Request | None) -> list[dict[str, Any]]:
        gen, last = await self._run(obj, raw)
        try:
            async for item in gen:
                last = item
        except ValueError as e:
            status = int(getattr(e, "status_code", 400) or 400)
            raise RequestError(str(e), status) from None
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
        return await self._answer(request, handler)

    async def _answer(self, request: Request, handler: Any) -> Response:
        """``handler(request)`` with its request errors as error responses (what :meth:`_guard`
        does after the API key check; the batch runner calls it for each line of a batch, whose
        key was checked when the batch was created)."""
        if self.skip_tokenizer_init:
            return error_response(SKIP_TOKENIZER_OPENAI_MSG.format(path=request.url.path), 400)
        try:
            return await handler(request)
        except RequestError as e:
            return error_response(e.message, e.status, e.err_type, e.param)
        except ValueError as e:
            status = int(getattr(e, "status_code", 400) or 400)
            return error_response(str(e), status, param=_param_of(str(e)) if status == 400 else None)

    # ------------------------------------------------------------------ /v1/models
    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: OpenAI's list, or Anthropic's for a request carrying
        ``anthropic-version`` (:mod:`sglang_v4.entrypoints.anthropic.models`)."""
        from sglang_v4.entrypoints.anthropic import models as anthropic_models
        from sglang_v4.entrypoints.anthropic.serving_messages import anthropic_error_response

        anthropic = anthropic_models.is_anthropic_request(request)
        denied = self.check_auth(request)
        if denied is not None:
            return (
                anthropic_error_response("Unauthorized: invalid or missing API key.", 401)
                if anthropic
                else denied
            )
        if anthropic:
            infos = [anthropic_models.anthropic_model(n, self._context_len()) for n in self.model_names]
            try:
                return JSONResponse(anthropic_models.anthropic_model_list(infos, request.query_params))
            except RequestError as e:
                return anthropic_error_response(e.message, e.status)
        return JSONResponse(ModelList(data=[self._model_card(n) for n in self.model_names]).model_dump())

    def _model_card(self, name: str) -> ModelCard:
        """The ``/v1/models`` card of the served name ``name``: ``root`` the served model, no
        ``parent`` (no LoRA adapters), ``max_model_len`` the context length (tokens)."""
        return ModelCard(
            id=name,
            created=self.models_created,
            root=self.model_name,
            parent=None,
            max_model_len=self._context_len(),
            permission=[self.model_permission],
        )

    async def retrieve_model(self, request: Request, model: str) -> Response:
        """``GET /v1/models/{model}``: the listed model card (:meth:`_listed_name`) for a name the
        API accepts, else 404 (as SGLang);
        Anthropic's ``ModelInfo`` and error body for a request carrying ``anthropic-version``."""
        from sglang_v4.entrypoints.anthropic import models as anthropic_models
        from sglang_v4.entrypoints.anthropic.serving_messages import anthropic_error_response

        anthropic = anthropic_models.is_anthropic_request(request)
        denied = self.check_auth(request)
        if denied is not None:
            return (
                anthropic_error_response("Unauthorized: invalid or missing API key.", 401)
                if anthropic
                else denied
            )
        try:
            self._check_model(model)
        except RequestError as e:
            if anthropic:
                return anthropic_error_response(e.message, e.status)
            return error_response(e.message, e.status, e.err_type, e.param)
        listed = self._listed_name(model)
        if anthropic:
            return JSONResponse(anthropic_models.anthropic_model(listed, self._context_len()))
        return JSONResponse(self._model_card(listed).model_dump())

"""``POST /v1/chat/completions``: the DeepSeek-V4 chat encoding, reasoning and tool calls.

The prompt and the reading plan of a request (rendering, thinking mode, tool checks, grammars) come
from :mod:`.chat_prepare`; this module checks the request and builds the non-streamed response from
the engine output, :mod:`.serving_chat_stream` the stream (and the output readers both share).

Tools (``tools`` + ``tool_choice`` + ``parallel_tool_calls``):

* ``tool_choice`` ``"none"``: the tools are not shown to the model (the official DeepSeek API does
  the same) and the output is plain content; a DSML block the model writes anyway is no call and
  is cut off the content with all that follows it (:mod:`.dsml_withheld`, sgl-project/sglang#35736);
* ``"auto"`` (default with tools): the model may answer or call tools; DSML blocks in the output
  become ``message.tool_calls`` (:mod:`.tool_parser`). With a tool marked ``strict`` a call, once
  started, is constrained to the tool schemas (xgrammar structural tag); with
  ``parallel_tool_calls`` false a grammar allows at most one call and the answer keeps the first
  call only in any case (sgl-project/sglang#9696). Beside the request's own answer grammar
  (``response_format`` ...) the grammar is "that answer, or a block of calls"
  (vllm-project/vllm#39929: the answer grammar alone made the calls unreachable);
* ``"required"`` / ``{"type": "function", "function": {"name": ...}}``: decoding is constrained to
  a DSML block of one or more calls (exactly one call of that function when named, or when
  ``parallel_tool_calls`` is false) whose arguments validate against the tools' JSON schemas;
* ``{"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}``: the tools are cut to the
  allowed ones and ``mode`` (``"auto"`` / ``"required"``) is the choice (:mod:`.allowed_tools`).

Output: reasoning is split off first (:mod:`.reasoning_parser`), then the content goes through the
tool parser. ``finish_reason`` is ``"tool_calls"`` when the generation stopped after well-formed
calls (also inside a block left open after its last closed invoke: the model's EOS came before the
block's closing tag); a malformed block comes back as ``content`` with the engine's finish reason. A call cut by
``max_tokens`` is answered as OpenAI answers it: ``finish_reason`` ``"length"`` and the call in
``tool_calls`` with the arguments generated so far (once its name is known), no markup in
``content``, the same streamed and not (with ``"required"`` / a named function, a reply cut
before its block began has empty content: the grammar's separator newlines are not text). A
generation that *stopped* inside an invoke (EOS, a stop
token, or a ``stop`` string matching text of the call: stops apply everywhere in the answer, as in
SGLang and vLLM) made no such call: the unfinished invoke's text is ``content`` and the finish
reason ``"stop"`` (vllm-project/vllm#42210). Streamed, a call's id and name go out when its invoke
tag is complete and its arguments as they are generated (:mod:`.tool_parser`); the content deltas
and the final chunk's ``finish_reason`` are those of the non-streamed response, but the deltas of
a call whose invoke then turned out malformed or was stopped inside went out already: a client
folding the stream holds that call (arguments usually not JSON) where the non-streamed message has
none, as with vLLM. Check ``finish_reason`` (``"tool_calls"``) before running calls.
OpenAI's custom tools (``{"type": "custom", "custom": {...}}``, free-form ``input``) are served as
function tools of one string parameter and answered as custom calls (:mod:`.chat_custom_tools`).
The EOS token never appears in the text (even with ``skip_special_tokens: false``).

Answer grammars with reasoning: in thinking mode a ``response_format`` (or SGLang's ``json_schema``
/ ``regex`` / ``ebnf``) constrains the answer only: the reasoning up to ``</think>`` is free and
the grammar starts after it (a ``structural_tag``, as SGLang's reasoner grammar and vLLM's
structured outputs with a reasoning parser do). The tool-call grammar does the same.

Stop strings with reasoning (vLLM #14170, SGLang #40529): when the output starts inside reasoning,
``stop`` and ``stop_regex`` apply to the answer only. They stay dormant until the model writes
``</think>`` and then match only in the text after it (``stop_str_after_token_id``), so a stop
string that occurs in the reasoning (or is a piece of the tag, such as ``"</"``) neither cuts the
reasoning nor leaks a tag fragment into the content; this holds with ``separate_reasoning: false``
too (the raw text is cut at the same place). ``stop: "</think>"`` itself ends the generation with
its reasoning (sent as a stop token; ``matched_stop`` stays ``"</think>"``), as ``stop_token_ids``
with the ``</think>`` id does: the reasoning is then complete and the content empty. Token stops
and EOS are never dormant.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from sglang_v4.entrypoints.chat_encoding import EOS, THINK_END
from sglang_v4.entrypoints.openai.allowed_tools import chat_allowed_tools
from sglang_v4.entrypoints.openai.chat_custom_tools import lower_custom_tools
from sglang_v4.entrypoints.openai.chat_prepare import (
    ChatPlan,
    ChatRun,
    answer_grammar_kind,
    chat_echo_text,
    grammar_after_reasoning,
)
from sglang_v4.entrypoints.openai.chat_tool_pairing import check_tool_call_pairing
from sglang_v4.entrypoints.openai.dsml_markup import scrub_dsml
from sglang_v4.entrypoints.openai.logprob_limits import (
    check_chat_top_logprobs,
    logprob_volume_error,
    logprob_volume_field,
)
from sglang_v4.entrypoints.openai.output_modalities import check_output_modalities
from sglang_v4.entrypoints.openai.prompt_logprobs import (
    check_prompt_logprobs,
    prompt_logprobs_engine_fields,
    vllm_prompt_logprobs,
)
from sglang_v4.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatMessage,
    CustomToolCall,
    FunctionCall,
    ToolCall,
)
from sglang_v4.entrypoints.openai.reasoning_parser import (
    split_reasoning,
    stops_after_reasoning,
)
from sglang_v4.entrypoints.openai.request_errors import check_token_ids_in_vocab, name_grammar_tool
from sglang_v4.entrypoints.openai.responses_custom_tools import custom_call_input
from sglang_v4.entrypoints.openai.service_tier import CHAT_SERVICE_TIERS, served_service_tier
from sglang_v4.entrypoints.openai.serving_base import (
    RequestError,
    grammar_error_for,
)
from sglang_v4.entrypoints.openai.serving_chat_stream import ChatStreamMixin
from sglang_v4.entrypoints.openai.serving_chat_stream import _ChoiceStream as _ChoiceStream
from sglang_v4.entrypoints.openai.serving_outputs import (
    _finish,
)
from sglang_v4.entrypoints.openai.tool_parser import (
    TOOL_CALL_PARSERS,
    ParsedToolCall,
)
from sglang_v4.entrypoints.openai.vllm_fields import (
    cache_namespace,
    special_token_edges,
    stop_reason,
    truncate_prompt_ids,
    vllm_grammar_field,
)
from sglang_v4.managers.tokenization import LogprobVolumeError

__all__ = ["ChatMixin", "ChatPlan", "ChatRun", "ChoiceOutput"]

#: The start of a DSML tag (fullwidth or ASCII bars): where a tool-call block may begin.
_DSML_TAG = re.compile(r"<[|｜]DSML[|｜]")


@dataclass
class ChoiceOutput:
    """One finished choice read from the engine output (:meth:`ChatMixin._read_choice`).

    Attributes:
        content: the answer text without reasoning and tool-call markup (``None`` when calls
            were made and no text was written).
        reasoning: the reasoning text (``None`` when none, or not split off).
        tool_calls: the parsed calls (empty without tools or calls).
        finish_reason: OpenAI's finish reason (``"tool_calls"`` after whole calls).
        matched: the engine's matched stop (token id or string), if any.
        reasoning_tokens: generated tokens of the reasoning block.
        content_after_calls: the end of ``content`` that was written after the start of the
            first tool-call block (``""`` when none): a streamed reply sends it after the calls,
            and the Messages API keeps that order in its content blocks.
    """

    content: str | None
    reasoning: str | None
    tool_calls: list[ParsedToolCall]
    finish_reason: str | None
    matched: Any
    reasoning_tokens: int
    content_after_calls: str = ""


def answer_or_tool_calls(
    sp: dict[str, Any],
    kind: str,
    req: ChatCompletionRequest,
    thinking: bool,
    ws_kw: dict[str, int] | None = None,
) -> dict[str, Any] | None:
    """``sp`` with its ``kind`` answer grammar widened to "that answer, or a DSML block of calls
    of the request's tools" (:func:`~sglang_v4.sampling.grammar.answer_or_tool_calls_structural_tag`),
    after free reasoning in thinking mode: tools under ``tool_choice: "auto"`` beside the client's
    own answer grammar stay callable (vllm-project/vllm#39929). ``None`` where no tool is
    ``strict`` and a tool's schema cannot make a grammar (each is compiled alone first:
    :func:`~sglang_v4.sampling.structural_tag.first_unusable_tool_parameters`); the answer
    grammar alone then applies, as non-strict tools ask for no constraint.

    Raises:
        RequestError: 400 naming the answer grammar's field, or ``tools`` (a strict tool's
            schema cannot make a grammar).
    """
    from sglang_v4.sampling.grammar import answer_or_tool_calls_structural_tag
    from sglang_v4.sampling.structural_tag import first_unusable_tool_parameters

    functions = [t.get("function") or {} for t in req.tools or []]
    strict = any(fn.get("strict") for fn in functions)
    found = first_unusable_tool_parameters([fn.get("parameters") for fn in functions])
    if found is not None:
        if not strict:
            return None
        i, err = found
        raise RequestError(
            f"tools: invalid grammar: tools[{i}].function.parameters (function `{functions[i].get('name')}`): {err}",
            param="tools",
        )
    field_name = "response_format" if req.response_format else (vllm_grammar_field(req) or kind)
    try:
        tag = answer_or_tool_calls_structural_tag(
            kind,
            sp[kind],
            req.tools or [],
            thinking=thinking,
            parallel_tool_calls=req.parallel_tool_calls is not False,
            think_end=THINK_END,
            string_value_formats=req._string_value_formats,
            **(ws_kw or {}),
        )
    except ValueError as e:
        if str(e).startswith("tools:"):
            if not strict:
                return None
            raise RequestError(str(e), param="tools") from None
        raise RequestError(f"{field_name}: {str(e).partition(': ')[2] or e}", param=field_name) from None
    out = {k: v for k, v in sp.items() if k != kind}
    out["structural_tag"] = tag
    return out


class ChatMixin(ChatStreamMixin):
    """The ``/v1/chat/completions`` route (mixed into :class:`~.serving.OpenAIServing`)."""

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``."""
        return await self._guard(request, self._chat)

    # ------------------------------------------------------------------ non-streaming
    async def _chat(self, request: Request) -> Response:
        req: ChatCompletionRequest = await self._parse(request, ChatCompletionRequest)
        check_tool_call_pairing(
            [
                {"role": m.role, "tool_calls": m.tool_calls, "tool_call_id": m.tool_call_id}
                for m in req.messages
            ]
        )
        run = await self._prepare_chat(req)
        try:
            if req.stream:
                return await self._chat_stream(req, run, request)
            rets = await self._collect(run.obj, request)
        except RequestError as e:
            err = grammar_error_for(e, run.grammar_field)
            raise name_grammar_tool(err, run.plan.grammar_tools, "tools[{i}].function.parameters") from None
        except LogprobVolumeError as e:
            field = logprob_volume_field("top_logprobs", run.top_logprobs, run.prompt_logprobs)
            raise logprob_volume_error(e, field) from None
        ids, want_prompt_ids = run.prompt_ids, req.return_prompt_token_ids or req.return_token_ids
        echo = chat_echo_text(req)
        choices, reasoning_tokens = [], []
        for idx, ret in enumerate(rets):
            out = self._read_choice(ret, run.plan, run.separate)
            reasoning_tokens.append(out.reasoning_tokens)
            tool_calls = None
            if out.tool_calls:
                tool_calls = [
                    ToolCall(
                        id=c.id,
                        type="custom",
                        custom=CustomToolCall(name=c.name, input=custom_call_input(c.arguments)),
                    )
                    if c.name in req._custom_tools
                    else ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
                    for c in out.tool_calls
                ]
            lp = None
            if req.logprobs:
                lp = self._chat_logprobs(
                    ret.get("meta_info", {}), 0, bool(req.return_tokens_as_token_ids), run.top_logprobs
                )
            content = echo + (out.content or "") if echo else out.content
            reasoning = out.reasoning if req.include_reasoning else None
            stop = run.plan.matched_stop(out.matched, req.stop_token_ids)
            choices.append(
                ChatCompletionResponseChoice(
                    index=idx,
                    message=ChatMessage(content=content, reasoning_content=reasoning, tool_calls=tool_calls),
                    logprobs=lp,
                    finish_reason=out.finish_reason,
                    matched_stop=stop,
                    stop_reason=stop_reason(out.finish_reason, stop, req.stop_token_ids),
                    prompt_token_ids=list(ids) if want_prompt_ids and ids is not None else None,
                    response_token_ids=list(ret.get("output_ids") or []) if req.return_token_ids else None,
                    token_ids=list(ret.get("output_ids") or []) if req.return_token_ids else None,
                )
            )
        resp = ChatCompletionResponse(
            id=f"chatcmpl-{req.request_id or uuid.uuid4().hex}",
            model=req.model,
            choices=choices,
            usage=self._usage(rets, run.n, reasoning_tokens if run.separate else None),
            service_tier=req.service_tier,
            prompt_logprobs=(
                vllm_prompt_logprobs(rets[0].get("meta_info", {}), run.prompt_logprobs)
                if run.prompt_logprobs is not None and rets
                else None
            ),
            prompt_token_ids=list(ids) if req.return_token_ids and ids is not None else None,
        )
        return JSONResponse(resp.model_dump(mode="json"))

    async def _prepare_chat(self, req: ChatCompletionRequest) -> ChatRun:
        """Check a parsed chat request and build its engine request (:class:`ChatRun`): the model
        name, the logprob and token-limit fields, the prompt and reading plan
        (:meth:`~.chat_prepare.ChatPrepareMixin._plan_chat`), the sampling parameters (answer
        grammars moved after the reasoning in thinking mode) and the prompt's token ids.

        Raises:
            RequestError: 404 for an unknown model; 400 naming the field for invalid input (also
                a prompt that cannot fit in the context).
        """
        from sglang_v4.managers.io_struct import GenerateReqInput

        self._check_model(req.model)
        # any tier OpenAI names is served with the one tier here, which the answer names
        req.service_tier = served_service_tier(req.service_tier, CHAT_SERVICE_TIERS)
        check_output_modalities(req.modalities, req.audio)  # text is the one output type
        # OpenAI's allowed_tools choice: the tools cut to the allowed ones, its mode the choice
        req.tools, req.tool_choice = chat_allowed_tools(req.tool_choice, req.tools)
        req._custom_tools = lower_custom_tools(req)  # custom tools served as function tools
        bound = self._max_logprobs()
        top_num = check_chat_top_logprobs(req.top_logprobs, req.logprobs, bound, self._vocab_size())
        prompt_lps = check_prompt_logprobs(req, self._vocab_size(), bound)
        # OpenAI's max_completion_tokens replaces the deprecated max_tokens; it wins when both are set
        limit_field = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
        max_new = getattr(req, limit_field)
        if max_new is not None and max_new < 0:
            raise RequestError(f"{limit_field} must be at least 0, got {max_new}.", param=limit_field)
        plan = self._plan_chat(req)
        sp = self._sampling_params(req, max_new, plan.structural_tag)
        answer_grammar = None if plan.structural_tag is not None else answer_grammar_kind(sp)
        union = None
        if answer_grammar is not None and plan.tool_names is not None:
            # tools under "auto" beside the client's answer grammar: the answer, or calls
            union = answer_or_tool_calls(sp, answer_grammar, req, plan.thinking, self.json_whitespace_kw())
        if union is not None:
            sp = union
            if plan.continued and not plan.thinking:
                sp["grammar_prefix"] = plan.continued
        elif plan.thinking and answer_grammar is not None:
            sp = grammar_after_reasoning(sp, answer_grammar, req, self.json_whitespace_kw())
        elif answer_grammar is not None and plan.continued:
            # the answer is the continued message + the output: the grammar reads the message first
            sp["grammar_prefix"] = plan.continued
        if plan.thinking and plan.reasoning.separate:
            plan.think_end_id = self._think_end_id()
            if plan.think_end_id is not None:
                plan.stop_marker = stops_after_reasoning(sp, plan.think_end_id)
        kw: dict[str, Any] = dict(
            sampling_params=sp,
            return_logprob=req.logprobs,
            top_logprobs_num=top_num,
            return_text_in_logprobs=True,
            stream=req.stream,
            rid=req.rid,
        )
        if prompt_lps is not None:
            kw.update(prompt_logprobs_engine_fields(prompt_lps, kw["top_logprobs_num"]))
        if req.priority is not None:
            kw["priority"] = req.priority
        kw["extra_key"] = cache_namespace(req)
        if req.input_ids is not None and not req.input_ids:
            raise RequestError("input_ids must not be empty.", param="input_ids")
        if req.input_ids is not None:
            check_token_ids_in_vocab([req.input_ids], False, self._vocab_size(), "input_ids")
        ids = req.input_ids
        if ids is None and self.tokenizer is not None:
            ids = await self._encode_prompt(plan.prompt, max_new, plain_spans=plan.plain_spans)
            if req.add_special_tokens:  # vLLM's: the tokenizer's specials on top of the template's
                before, after = special_token_edges(self.tokenizer)
                ids = before + ids + after
        if ids is not None and req.truncate_prompt_tokens is not None:  # vLLM's, truncation_side's end
            ids = truncate_prompt_ids(
                ids, req.truncate_prompt_tokens, req.truncation_side, self._context_len()
            )
        obj = (
            GenerateReqInput(input_ids=ids, **kw)
            if ids is not None
            else GenerateReqInput(text=plan.prompt, **kw)
        )
        grammar_field = (
            "tools"
            if plan.structural_tag is not None
            else "response_format"
            if req.response_format
            else vllm_grammar_field(req) or answer_grammar
        )
        separate = plan.reasoning.separate and req.separate_reasoning
        return ChatRun(obj, plan, req.n or 1, separate, grammar_field, ids, prompt_lps, top_num)

    def _read_choice(self, ret: dict[str, Any], plan: ChatPlan, separate: bool) -> ChoiceOutput:
        """One finished choice of the engine output read as the plan says: the reasoning split
        off (``separate``), the DSML tool calls parsed out of the content, the finish reason
        (``"tool_calls"`` after whole calls)."""
        meta = ret.get("meta_info", {})
        fr, matched = _finish(meta)
        text = ret.get("text", "").replace(EOS, "")
        reasoning, reasoning_tokens = None, 0
        if separate:
            reasoning, text = split_reasoning(text, plan.reasoning.implicit_end, plan.reasoning.continued)
            reasoning = scrub_dsml(reasoning) if reasoning else reasoning  # no DSML tag in it
            reasoning_tokens = self._reasoning_tokens(ret.get("output_ids") or [], reasoning)
        elif plan.reasoning.answer_only:  # after the prompt's </think> (ReasoningParser.answer)
            text = text.lstrip("\n")
        calls: list[ParsedToolCall] = []
        content: str | None = text
        after = ""
        parser = plan.tool_reader(TOOL_CALL_PARSERS[self.tool_call_parser])
        if parser is not None:
            # fed as a stream may be: the text before the first DSML tag, then the rest cut after
            # each ">"; what comes out before the first call's delta (whitespace held in front of
            # the block) was written before the calls, the rest after them began
            tag = _DSML_TAG.search(text)
            cut = tag.start() if tag else len(text)
            before, _ = parser.feed(text[:cut])
            started = False
            for piece in re.split(r"(?<=>)", text[cut:]):
                c, deltas = parser.feed(piece)
                if started:
                    after += c
                else:
                    before += c
                    started = bool(deltas)
            after += parser.finish(stopped=fr == "stop")[0]
            content = before + after
            calls = parser.calls
            if calls:
                content = content or None
                if parser.calls_made and fr == "stop":
                    fr = "tool_calls"
            else:
                after = ""
        return ChoiceOutput(content, reasoning, calls, fr, matched, reasoning_tokens, after)

"""Chat request preparation for ``/v1/chat/completions``: the rendered prompt and how the output
is read (:class:`ChatPlan`), and the checked request ready to run (:class:`ChatRun`).

The messages are rendered with :func:`~sglang_v4.entrypoints.chat_encoding.render_messages`, the
request's own text marked to be tokenized as plain text (or, with ``--chat-template FILE``, with
transformers' ``apply_chat_template`` and that Jinja text, tokenized as a whole); a ``developer``
message is a system message there (:func:`developer_messages_as_system`, SGLang's rule) and a
system / developer / tool / assistant message whose ``content`` is ``null`` or absent is rendered
with empty text (SGLang's; a user one is refused when the request is parsed:
:func:`~.request_errors.check_user_message_contents`);
thinking mode comes from ``chat_template_kwargs`` (``{"thinking": true}``, or ``enable_thinking``,
as SGLang) or DeepSeek's ``thinking: {"type": "enabled"}``; ``reasoning_effort`` from the request,
rendered by the checkpoint's effort profile (:mod:`.reasoning_effort_profile`); where the
request sets no thinking switch itself, its effort (``"none"``: off, any other: on) or OpenRouter's
``reasoning`` object sets it, also over ``--default-chat-template-kwargs``
(:mod:`.reasoning_request`, SGLang's ``normalize_reasoning_inputs``);
``chat_template_kwargs`` ``{"drop_thinking": false}`` keeps the reasoning of the turns before the
last user turn in a thinking-mode prompt without tools (the reference encoder's argument, which
vLLM's DeepSeek-V4 chat encoding reads there; dropped by default).
``tools`` / ``tool_choice`` / ``parallel_tool_calls`` are checked here and, when decoding is
constrained, turned into the tool-call structural tag (``"required"``, a named function, a
``strict`` tool, or ``parallel_tool_calls: false``: at most one call, also under ``"auto"``, as
SGLang's tool grammar does; without a grammar backend or next to the client's own answer grammar
the answer's reader keeps the first call only, :attr:`ChatPlan.max_calls`); an answer grammar in
thinking mode is moved
after the reasoning. The response and stream builders are in :mod:`.serving_chat` and
:mod:`.serving_chat_stream`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from sglang_v4.entrypoints.chat_encoding import (
    DSML,
    THINK_END,
    RenderedPrompt,
    continues_reasoning,
    message_error_param,
    message_text,
    normalize_reasoning_effort,
    render_continuation,
    render_messages,
    validate_tools,
)
from sglang_v4.entrypoints.chat_template_messages import (
    ContentFormat,
    detect_content_format,
    messages_for_template,
)
from sglang_v4.entrypoints.openai.dsml_markup import DsmlAnswerReader
from sglang_v4.entrypoints.openai.dsml_withheld import DsmlWithheld
from sglang_v4.entrypoints.openai.protocol import ChatCompletionRequest
from sglang_v4.entrypoints.openai.protocol_chat import PROMPT_SWITCH_KWARGS
from sglang_v4.entrypoints.openai.reasoning_effort_profile import detect_reasoning_effort_profile
from sglang_v4.entrypoints.openai.reasoning_parser import ReasoningSpec, reasoning_spec
from sglang_v4.entrypoints.openai.reasoning_request import apply_reasoning_controls
from sglang_v4.entrypoints.openai.serving_base import OpenAIServingBase, RequestError
from sglang_v4.entrypoints.openai.thinking_switch import normalize_thinking_switches, thinking_field_value
from sglang_v4.entrypoints.openai.tool_parser import TOOL_CALL_PARSERS, DsmlToolParser
from sglang_v4.entrypoints.openai.vllm_fields import vllm_grammar_field
from sglang_v4.prompt_tokens import prepare_plain_encoding

__all__ = [
    "ChatPlan",
    "ChatPrepareMixin",
    "ChatRun",
    "answer_grammar_kind",
    "chat_echo_text",
    "detect_reasoning_effort_profile",
    "developer_messages_as_system",
    "grammar_after_reasoning",
]

logger = logging.getLogger(__name__)


@dataclass
class ChatPlan:
    """How one chat request is rendered and how its output is read.

    Attributes:
        prompt: the rendered prompt text.
        thinking: thinking mode (the prompt opens ``<think>``).
        reasoning: the reasoning split of the output (``separate`` False: no split).
        tool_names: the offered tools when tool calls are parsed (name -> ``parameters`` JSON
            schema, ``None`` where not given), else ``None``.
        structural_tag: the tool-call grammar (``None``: unconstrained).
        think_end_id: the ``</think>`` token id when the output starts inside reasoning, else
            ``None``; a generation stopped by that token ended its reasoning.
        stop_marker: the request's ``stop`` held ``"</think>"`` (sent as a stop token instead).
        continued: the text of the final assistant message the output continues
            (``continue_final_message`` / ``prefix``) as the prompt ends with it, else ``None``;
            an answer grammar reads it first (``grammar_prefix``).
        plain_spans: the character spans of ``prompt`` that hold the request's own text, to be
            tokenized as plain text (:class:`~sglang_v4.entrypoints.chat_encoding.RenderedPrompt`;
            ``()`` for a ``--chat-template`` prompt, tokenized as transformers does).
        tools_withheld: the request has tools but ``tool_choice`` ``"none"``: a DSML block the
            model writes anyway is cut off the answer (:mod:`.dsml_withheld`).
        max_calls: ``1`` with ``parallel_tool_calls: false``: the answer makes at most one call,
            whether or not a grammar bounded the decoding (:class:`.dsml_markup.DsmlAnswerReader`);
            ``None``: any number.
        calls_forced: ``tool_choice`` ``"required"`` or a named function under the tool-call
            grammar: the answer is a DSML block and nothing else, so newlines generated before a
            block that never came (a reply cut by ``max_tokens``) are its separator, not content.
        grammar_tools: ``(index in the request's tools, name, parameters)`` of each tool whose
            arguments the tool-call grammar constrains (all for ``"required"``, the named one for
            a named function, the ``strict`` ones under ``"auto"``), so that a grammar error can
            name the tool.
    """

    prompt: str
    thinking: bool
    reasoning: ReasoningSpec
    tool_names: dict[str, Any] | None = None
    structural_tag: str | None = None
    think_end_id: int | None = None
    stop_marker: bool = False
    continued: str | None = None
    plain_spans: tuple[tuple[int, int], ...] = ()
    tools_withheld: bool = False
    max_calls: int | None = None
    calls_forced: bool = False
    grammar_tools: tuple[tuple[int, str, Any], ...] = ()

    def tool_reader(self, block: str) -> DsmlAnswerReader | None:
        """A fresh reader of one choice's answer, the same for every route and ``tool_choice``:
        the DSML tool-call parser of the offered tools (``block``: the parser's block name), the
        cutter of markup when the tools were withheld, each with its content scrubbed of DSML tags
        (:mod:`.dsml_markup`); ``None`` without tools (the answer is read as it is)."""
        if self.tool_names is not None:
            return DsmlAnswerReader(
                DsmlToolParser(self.tool_names, block),
                max_calls=self.max_calls,
                calls_forced=self.calls_forced,
            )
        return DsmlAnswerReader(DsmlWithheld()) if self.tools_withheld else None

    def ended_by_marker(self, matched: Any) -> bool:
        """Whether the finish's ``matched`` stop is the ``</think>`` token."""
        return (
            self.think_end_id is not None and matched == self.think_end_id and not isinstance(matched, bool)
        )

    def matched_stop(self, matched: Any, stop_token_ids: list[int] | None) -> Any:
        """``matched_stop`` as the client gave it: ``"</think>"`` for its ``stop`` string."""
        if self.stop_marker and self.ended_by_marker(matched) and matched not in (stop_token_ids or ()):
            return THINK_END
        return matched


@dataclass
class ChatRun:
    """A checked chat request ready to run (:meth:`~.serving_chat.ChatMixin._prepare_chat`).

    Attributes:
        obj: the engine request (``GenerateReqInput``; prompt as token ids when a tokenizer is loaded).
        plan: how the prompt was rendered and how the output is read.
        n: samples per prompt.
        separate: the reasoning is split off the content.
        grammar_field: the request field a grammar error names (``tools``, ``response_format``...).
        prompt_ids: the prompt's token ids (``None`` without a tokenizer).
        prompt_logprobs: top tokens per position of vLLM's ``prompt_logprobs`` in the answer,
            ``None`` for none (:func:`~.prompt_logprobs.check_prompt_logprobs`).
        top_logprobs: top tokens per output position the choices' ``logprobs`` give (the
            request's ``top_logprobs`` resolved, ``-1`` to the vocabulary size:
            :func:`~.logprob_limits.check_chat_top_logprobs`); the engine's lists may be longer
            when ``prompt_logprobs`` asks for more.
    """

    obj: Any
    plan: ChatPlan
    n: int
    separate: bool
    grammar_field: str | None
    prompt_ids: list[int] | None
    prompt_logprobs: int | None = None
    top_logprobs: int = 0


def answer_grammar_kind(sp: dict[str, Any]) -> str | None:
    """The grammar field (``json_schema`` / ``regex`` / ``ebnf`` / ``structural_tag``) a chat
    request's sampling parameters constrain the answer with (``response_format`` becomes
    ``json_schema``, or ``structural_tag`` for SGLang's ``{"type": "structural_tag"}``), if any.
    Call it only where the request has no tool-call grammar (which is a ``structural_tag`` too)."""
    return next(
        (k for k in ("json_schema", "regex", "ebnf", "structural_tag") if sp.get(k) is not None), None
    )


def grammar_after_reasoning(
    sp: dict[str, Any], kind: str, req: ChatCompletionRequest, ws_kw: dict[str, int] | None = None
) -> dict[str, Any]:
    """``sp`` with its ``kind`` grammar moved after the reasoning (thinking mode): a
    ``structural_tag`` of free reasoning up to ``</think>``, then the grammar
    (:func:`~sglang_v4.sampling.grammar.after_reasoning_structural_tag`; ``ws_kw``: its
    ``max_whitespace_cnt``, from :meth:`ChatPrepareMixin.json_whitespace_kw`).

    Raises:
        RequestError: the grammar text is malformed (400 naming the field the client sent).
    """
    from sglang_v4.sampling.grammar import after_reasoning_structural_tag

    field_name = "response_format" if req.response_format else (vllm_grammar_field(req) or kind)
    try:
        tag = after_reasoning_structural_tag(kind, sp[kind], THINK_END, **(ws_kw or {}))
    except ValueError as e:
        raise RequestError(f"{field_name}: {str(e).partition(': ')[2] or e}", param=field_name) from None
    out = {k: v for k, v in sp.items() if k != kind}
    out["structural_tag"] = tag
    return out


def _has_answer_grammar(req: ChatCompletionRequest) -> bool:
    """The request constrains its answer itself (a non-text ``response_format``, vLLM's guided
    decoding fields, or SGLang's ``json_schema`` / ``regex`` / ``ebnf``)."""
    rf = req.response_format
    if (isinstance(rf, dict) and rf.get("type", "text") != "text") or vllm_grammar_field(req) is not None:
        return True
    return any(getattr(req, k, None) is not None for k in ("json_schema", "regex", "ebnf"))


def _continued_text(message: dict[str, Any], prompt: str) -> str | None:
    """The text of the assistant ``message`` a continuation request continues, as ``prompt``
    ends with it (a chat template may strip its edges), or ``None`` when the prompt does not end
    with it (e.g. its tool calls were rendered after it)."""
    try:
        content = message_text(message.get("content"))  # the parts joined as the prompt joins them
    except ValueError:
        return None
    if not content:
        return None
    for text in (content, content.rstrip(), content.strip()):
        if text and prompt.endswith(text):
            return text
    return None


def chat_echo_text(req: ChatCompletionRequest) -> str:
    """What vLLM's ``echo`` puts before each choice's content: the last message's text when its
    role is the answer's role ("assistant" after a generation prompt; the last message's own role
    when the prompt continues it: ``continue_final_message``, DeepSeek's ``prefix``, or
    ``add_generation_prompt: false``), else ``""`` (also without ``echo``)."""
    if not req.echo or not req.messages:
        return ""
    last = req.messages[-1]
    continued = req.continue_final_message or last.prefix or not req.add_generation_prompt
    if last.role != ("assistant" if not continued else last.role) or last.content is None:
        return ""
    try:
        return message_text(last.content)
    except ValueError:
        return ""


def developer_messages_as_system(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``msgs`` (chat message dicts) with each ``developer`` message turned into a ``system`` one.

    SGLang's DeepSeek-V4 chat path does this before DeepSeek's request converter
    (``deepseek-recipe``), whose Chat Completions API has no developer role: an OpenAI
    ``developer`` message is the client's instruction, i.e. a system message. DeepSeek's V4 encoder
    (``encoding_dsv4.py``) has a ``developer`` role of its own that thinking mode without tools
    drops before the last user turn, so handing the OpenAI role to it unchanged would lose an
    instruction given first.
    """
    return [dict(m, role="system") if m.get("role") == "developer" else m for m in msgs]


def _normalize_thinking_switches(req: ChatCompletionRequest) -> None:
    """Read the thinking switches of ``req.chat_template_kwargs`` and the request's ``thinking``
    field as booleans (:mod:`.thinking_switch`); ``req.thinking`` becomes ``True`` / ``False`` /
    ``None``.

    Raises:
        RequestError: a switch of no boolean spelling (400 naming ``chat_template_kwargs``), a
            ``thinking`` object of an unknown ``type`` (400 naming ``thinking.type``) or of
            another kind (``thinking``).
    """
    try:
        req.chat_template_kwargs = normalize_thinking_switches(
            req.chat_template_kwargs, "chat_template_kwargs"
        )
    except ValueError as e:
        raise RequestError(str(e), param="chat_template_kwargs") from None
    try:
        req.thinking = thinking_field_value(req.thinking)
    except ValueError as e:
        param = "thinking.type" if isinstance(req.thinking, dict) else "thinking"
        raise RequestError(str(e), param=param) from None


def _thinking_flag(req: ChatCompletionRequest) -> bool:
    kwargs = req.chat_template_kwargs or {}
    flag = kwargs.get("thinking", kwargs.get("enable_thinking"))
    if flag is None and req.thinking is not None:
        flag = thinking_field_value(req.thinking)
    return bool(flag)


def _tool_choice(req: ChatCompletionRequest, names: list[str]) -> Any:
    """The request's ``tool_choice`` checked against its tools: ``"none"``, ``"auto"``,
    ``"required"`` or ``{"type": "function", "function": {"name": NAME}}``.

    Raises:
        RequestError: 400 naming ``tool_choice.function.name`` when a named choice has no name (or
            an empty or non-string one), ``tool_choice`` for another bad choice, and
            ``functions`` / ``function_call`` when set: OpenAI's deprecated
            forms of ``tools`` / ``tool_choice`` are not read (served without them, the model would
            not see the functions; vLLM and SGLang drop them silently). ``function_call`` ``"none"``
            / ``"auto"`` without ``functions`` ask for nothing and pass.
    """
    for legacy, modern, harmless in (
        ("functions", "tools", (None, [], {})),
        ("function_call", "tool_choice", (None, [], {}, "none", "auto")),
    ):
        if getattr(req, legacy, None) not in harmless:
            raise RequestError(
                f"{legacy} (OpenAI's deprecated form of `{modern}`) is not supported: send `{modern}` "
                'instead (tools: [{"type": "function", "function": {...}}]).',
                param=legacy,
            )
    tc = req.tool_choice
    if not names:
        if tc not in (None, "none", "auto"):
            raise RequestError("tool_choice needs a non-empty `tools` list.", param="tool_choice")
        return "none"
    if tc is None:
        return "auto"
    if tc in ("none", "auto", "required"):
        return tc
    if isinstance(tc, dict) and tc.get("type") == "function" and isinstance(tc.get("function"), dict):
        name = tc["function"].get("name")
        if not isinstance(name, str) or not name:  # OpenAI's 400 for a nameless choice
            raise RequestError(
                "Missing required parameter: 'tool_choice.function.name' (a non-empty string naming "
                "one of `tools`).",
                param="tool_choice.function.name",
            )
        if name not in names:
            raise RequestError(
                f"tool_choice names the function {name!r}, which is not in `tools`.", param="tool_choice"
            )
        return {"type": "function", "function": {"name": name}}
    raise RequestError(
        'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}.',
        param="tool_choice",
    )


class ChatPrepareMixin(OpenAIServingBase):
    """Prompt rendering and the :class:`ChatPlan` of a chat request (mixed into
    :class:`~.serving_chat.ChatMixin`)."""

    chat_template: str | None = None
    #: how ``chat_template`` reads a message's content (``chat_template_messages``)
    chat_template_content_format: ContentFormat = "string"
    _hf_tokenizer: Any = None
    #: the served checkpoint's reasoning-effort profile (:func:`detect_reasoning_effort_profile`)
    reasoning_effort_profile: str = "preview"

    def _load_chat_template(self) -> None:
        """Read ``--chat-template`` (a file, an inline template or a name of the tokenizer's
        templates: :func:`~sglang_v4.entrypoints.chat_template.resolve_chat_template`) and load the
        transformers tokenizer that renders it; detect the checkpoint's reasoning-effort profile.

        Raises:
            ValueError: naming ``chat_template`` (what it names cannot be used) or
                ``tokenizer_path`` (transformers cannot load the tokenizer to render it).
        """
        self.reasoning_effort_profile = detect_reasoning_effort_profile(
            getattr(self.args, "model_path", None)
        )
        if self.reasoning_effort_profile != "preview":
            logger.info("Reasoning effort profile of the checkpoint: %s", self.reasoning_effort_profile)
        path = getattr(self.args, "chat_template", None)
        if not path and self.tokenizer is not None:
            prepare_plain_encoding(self.tokenizer)  # the request text's tokenizer, built aside
        if not path or getattr(self.args, "skip_tokenizer_init", False):
            return  # (without a tokenizer the chat route is refused: nothing to render)
        from sglang_v4.entrypoints.chat_template import load_template_renderer, resolve_chat_template

        tok_dir = getattr(self.args, "tokenizer_path", None) or getattr(self.args, "model_path", None)
        self.chat_template = resolve_chat_template(path, tok_dir)
        self.chat_template_content_format = detect_content_format(self.chat_template)
        self._hf_tokenizer = load_template_renderer(tok_dir)

    def _plan_chat(self, req: ChatCompletionRequest) -> ChatPlan:
        """Render the prompt and decide the reasoning split and the tool-call handling.

        Raises:
            RequestError: 400 naming the field (messages, tools, tool_choice, reasoning_effort).
        """
        _normalize_thinking_switches(req)
        # reasoning_effort / the reasoning object decide the switch where the request sets none
        # (e.g. "none" off, "high" on), also over --default-chat-template-kwargs
        apply_reasoning_controls(req)
        defaults = getattr(self.args, "default_chat_template_kwargs", None)
        if defaults:  # --default-chat-template-kwargs: under the request's own keys
            own = req.chat_template_kwargs or {}
            if req.thinking is not None or "thinking" in own or "enable_thinking" in own:
                # the request's own thinking switch, under either name, wins over the defaults'
                # (merged, a default ``thinking`` would be read before the request's ``enable_thinking``)
                defaults = {k: v for k, v in defaults.items() if k not in ("thinking", "enable_thinking")}
            req.chat_template_kwargs = {**defaults, **(req.chat_template_kwargs or {})}
            _normalize_thinking_switches(req)
        thinking = _thinking_flag(req)
        kwargs = dict(req.chat_template_kwargs or {})
        if kwargs.get("drop_thinking") is None:
            kwargs.pop("drop_thinking", None)
        elif not isinstance(kwargs["drop_thinking"], bool):
            raise RequestError(
                f"chat_template_kwargs.drop_thinking must be a boolean, got {kwargs['drop_thinking']!r}.",
                param="chat_template_kwargs",
            )
        try:
            # ``is None``, not falsiness: an empty string is a value (refused), not "unset"
            # (BerriAI/litellm#27050 lists ``""`` among the invalid efforts)
            sent = (
                req.reasoning_effort if req.reasoning_effort is not None else kwargs.get("reasoning_effort")
            )
            effort = normalize_reasoning_effort(sent, self.reasoning_effort_profile)
        except ValueError as e:
            raise RequestError(str(e), param="reasoning_effort") from None
        if req.tools is not None and not req.tools:
            # OpenAI refuses an empty array (code "empty_array"); served as "no tools" the model
            # would be told nothing while tool_choice "auto" pretends it may call one
            # (vllm-project/vllm#39741). ``null`` / a missing field is "no tools".
            raise RequestError(
                "Invalid 'tools': empty array. `tools` needs at least one tool; leave it out (or "
                "send null) for a request without tools.",
                param="tools",
            )
        try:
            functions = validate_tools(req.tools) if req.tools else []
        except ValueError as e:
            raise RequestError(str(e), param="tools") from None
        names = [fn["name"] for fn in functions]
        choice = _tool_choice(req, names)
        active = choice != "none"
        msgs = [m.model_dump(exclude_none=True) for m in req.messages]
        if not msgs:
            raise RequestError("messages must contain at least one message.", param="messages")
        for i, m in enumerate(msgs):  # DeepSeek's prefix completion: the final assistant turn only
            if m.pop("prefix", False) and (i != len(msgs) - 1 or m["role"] != "assistant"):
                raise RequestError(
                    f"messages[{i}].prefix: only the final message, an assistant one, can be a prefix.",
                    param="messages",
                )
        tools = req.tools if active else None
        try:
            rendered, thinking = self._render(msgs, req, thinking, tools, effort, kwargs)
        except ValueError as e:
            raise RequestError(str(e), param=message_error_param(str(e))) from None
        block = TOOL_CALL_PARSERS[self.tool_call_parser]
        # a block ends the reasoning with the tools withheld too (it is then cut off the answer)
        spec = reasoning_spec(self.reasoning_parser, thinking, f"<{DSML}{block}>" if functions else None)
        if spec.separate and (req.continue_final_message or req.messages[-1].prefix):
            # the output continues the final turn's open reasoning (_render): no fresh block
            spec = replace(spec, continued=msgs[-1].get("role") == "assistant")
        elif spec.answer_only and (req.continue_final_message or req.messages[-1].prefix):
            spec = replace(spec, answer_only=False)  # the output continues the final turn's text
        schemas = {fn["name"]: fn.get("parameters") for fn in functions}
        plan = ChatPlan(
            rendered.text,
            thinking,
            spec,
            schemas if active else None,
            plain_spans=rendered.plain_spans,
            tools_withheld=bool(functions) and not active,
            max_calls=1 if req.parallel_tool_calls is False else None,
        )
        if (req.continue_final_message or req.messages[-1].prefix) and msgs[-1].get("role") == "assistant":
            plan.continued = _continued_text(msgs[-1], rendered.text)
        # a strict tool beside the client's own answer grammar: the grammar of "answer or calls"
        # (answer_or_tool_calls) constrains the calls
        strict = any(bool(fn.get("strict")) for fn in functions) and not _has_answer_grammar(req)
        # parallel_tool_calls false under "auto": a grammar of at most one call, where one can
        # apply (a grammar backend; beside the client's answer grammar, answer_or_tool_calls does)
        single = (
            req.parallel_tool_calls is False
            and bool(getattr(self.tm, "grammar_enabled", False))
            and not _has_answer_grammar(req)
        )
        if active and (choice != "auto" or strict or single):
            from sglang_v4.sampling.grammar import tool_call_structural_tag

            try:
                plan.structural_tag = tool_call_structural_tag(
                    req.tools or [],
                    choice,
                    thinking=thinking,
                    parallel_tool_calls=req.parallel_tool_calls is not False,
                    enforce_schema=choice != "auto",
                    string_value_formats=req._string_value_formats,
                    **self.json_whitespace_kw(),
                )
            except ValueError as e:
                raise RequestError(str(e), param="tools") from None
            plan.calls_forced = choice != "auto"
            named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
            plan.grammar_tools = tuple(
                (i, fn["name"], fn.get("parameters"))
                for i, fn in enumerate(functions)
                if (fn["name"] == named if named is not None else choice != "auto" or fn.get("strict"))
            )
        return plan

    def json_whitespace_kw(self) -> dict[str, int]:
        """``{"max_whitespace_cnt": N}`` from ``--constrained-json-max-whitespace-cnt``, or ``{}``
        (the grammar module's default)."""
        n = getattr(self.args, "constrained_json_max_whitespace_cnt", None)
        return {} if n is None else {"max_whitespace_cnt": n}

    def _render(
        self,
        msgs: list[dict[str, Any]],
        req: ChatCompletionRequest,
        thinking: bool,
        tools: list[dict[str, Any]] | None,
        effort: str | None,
        kwargs: dict[str, Any],
    ) -> tuple[RenderedPrompt, bool]:
        """The prompt, and whether the output starts inside the reasoning (thinking mode, except
        when ``continue_final_message``, or DeepSeek's ``prefix: true`` on the final assistant
        message, continues the answer: :func:`encode_continuation`; a final message with only
        ``reasoning_content`` continues the reasoning, :func:`continues_reasoning`)."""
        prefix = req.messages[-1].prefix
        cont = (req.continue_final_message or prefix) and msgs[-1].get("role") == "assistant"
        if self.chat_template is not None:
            for key in PROMPT_SWITCH_KWARGS:  # already the request's fields (a second value: TypeError)
                kwargs.pop(key, None)
            kwargs.setdefault("thinking", thinking)
            kwargs.setdefault("enable_thinking", thinking)  # the switch's other name, as the parser reads it
            if req.reasoning_effort is not None:
                kwargs.setdefault("reasoning_effort", req.reasoning_effort)
            # content in the template's format, tool-call arguments as mappings (SGLang's and vLLM's
            # preparation of the messages for a Jinja template)
            msgs = messages_for_template(msgs, self.chat_template_content_format)
            try:
                prompt = self._hf_tokenizer.apply_chat_template(
                    msgs,
                    tools=tools,
                    chat_template=self.chat_template,
                    tokenize=False,
                    add_generation_prompt=req.add_generation_prompt and not cont,
                    continue_final_message=cont,
                    documents=req.documents,
                    **kwargs,
                )
            except Exception as e:  # noqa: BLE001 - Jinja raises many types; all are a bad request
                raise ValueError(f"the chat template failed on these messages: {e}") from None
            return RenderedPrompt(prompt), thinking
        profile = self.reasoning_effort_profile
        drop = kwargs.get("drop_thinking", True)
        msgs = developer_messages_as_system(msgs)
        if cont:  # answer text after the turn's closed reasoning, or the open reasoning itself
            rendered = render_continuation(
                msgs,
                thinking,
                tools=tools,
                reasoning_effort=effort,
                reasoning_effort_profile=profile,
                drop_thinking=drop,
                response_format=req.response_format if req._response_format_in_prompt else None,
            )
            return rendered, continues_reasoning(msgs, thinking)
        rendered = render_messages(
            msgs,
            thinking,
            req.add_generation_prompt,
            tools=tools,
            reasoning_effort=effort,
            reasoning_effort_profile=profile,
            drop_thinking=drop,
            response_format=req.response_format if req._response_format_in_prompt else None,
        )
        return rendered, thinking

    def _think_end_id(self) -> int | None:
        """The ``</think>`` token id (``None`` without a tokenizer or when it is not one token)."""
        tok = self.tokenizer
        if tok is None:
            return None
        tid = tok.convert_tokens_to_ids(THINK_END)
        if not isinstance(tid, int) or isinstance(tid, bool) or tok.decode([tid]) != THINK_END:
            return None
        return tid

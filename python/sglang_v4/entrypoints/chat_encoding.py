"""DeepSeek-V4 chat prompt encoding (V4 ships a Python encoder, ``encoding_dsv4.py``, not a Jinja
template; this module re-implements its format, tools included).

Format rules (each is checked by ``test/test_openai_chat_encoding.py`` against strings produced by
DeepSeek's published reference encoder):

* the prompt starts with BOS ``<｜begin▁of▁sentence｜>``; in thinking mode a reasoning-effort
  instruction paragraph may follow it, per the checkpoint's *effort profile*
  (:data:`REASONING_EFFORT_PROFILES`): ``"preview"`` (the first V4 checkpoints: only ``"max"``
  adds a paragraph, "Absolute maximum ...") or ``"official"`` (DeepSeek-V4-Flash-0731 and later:
  ``"low"`` adds none, ``"high"`` the "Absolute maximum" paragraph, ``"max"`` a stronger "Beyond
  maximum" one);
* ``system`` messages are raw content (no role token), all of them in one block at the front of
  the prompt wherever they stand in the conversation, the non-empty ones joined by ``"\\n\\n"``
  (DeepSeek's V4 encoder, the ``deepseek-recipe`` package; the first published
  ``encoding_dsv4.py`` wrote each one in place with no separator, so that two system prompts read
  as one run-together text and one after a user turn became part of that turn). When the request
  has ``tools`` they are rendered into that block (an empty one is put in front when the
  conversation has no system message) as ``"\\n\\n"`` + the "## Tools" section: the DSML usage
  instructions and one JSON line per function definition; a ``json_schema`` or ``json_object``
  ``response_format`` adds its "## Response Format" section after that
  (:mod:`sglang_v4.entrypoints.chat_encoding_response_format`);
* a ``user`` message is ``<｜User｜>`` + content; ``tool`` messages are merged into the user turn
  that follows the assistant's call as ``<tool_result>CONTENT</tool_result>`` blocks (ordered like
  the calls of the preceding assistant message, matched by ``tool_call_id``); consecutive user and
  tool messages (system messages between them moved to the front) form one user turn whose parts
  are joined by ``"\\n\\n"``;
* a ``developer`` message is ``<｜User｜>`` + content and is never merged (DeepSeek's reference
  encoder; its ``deepseek-recipe`` converter has no developer role on the Chat Completions API,
  and the chat route hands an OpenAI developer message over as a system one, as SGLang does:
  :func:`~sglang_v4.entrypoints.openai.chat_prepare.developer_messages_as_system`);
* a ``latest_reminder`` message (DeepSeek's reminder role; its converter, ``deepseek-recipe``,
  takes it on the Chat Completions API) is ``<｜latest_reminder｜>`` + content where it stands,
  never merged (a user message after it opens a new user turn) and never dropped; an assistant
  turn after it opens as after a user turn;
* an assistant turn that no user/developer/system turn precedes (one that starts the conversation
  or follows another assistant turn) opens with ``<｜Assistant｜>`` and its mode token itself
  (DeepSeek's ``deepseek-recipe`` encoder; the first ``encoding_dsv4.py`` glued it to the previous
  turn's EOS);
* after a user/developer turn that is followed by an assistant turn (or ends the conversation and
  a generation prompt is wanted) come ``<｜Assistant｜>`` and a mode token: ``<think>`` in thinking
  mode, ``</think>`` in chat mode. The same follows a system turn that an assistant turn follows
  or that ends the conversation, and an assistant turn that ends it when a generation prompt is
  wanted (a new assistant turn), so that a prompt never ends at bare system text or at EOS. In
  thinking mode *without* tools, earlier turns are "dropped thinking": only turns from the last
  user turn on open ``<think>``, only assistant turns after it keep their reasoning, and developer
  turns before it are left out; with a generation prompt every given assistant turn is a finished
  earlier one and none keeps its reasoning, and in a continuation only the continued final turn
  keeps it (DeepSeek's converter, ``deepseek-recipe``, as SGLang renders DeepSeek-V4 prompts; its
  ``prefix`` message). With tools every turn keeps its thinking, and so it does without
  tools when the caller turns the dropping off (the reference encoder's ``drop_thinking=False``,
  which vLLM's DeepSeek-V4 chat encoding takes from ``chat_template_kwargs``);
* an ``assistant`` message is ``[reasoning + "</think>"] + content + [tool calls] + EOS``; tool
  calls are a DSML block, ``"\\n\\n<｜DSML｜tool_calls>\\n"`` + invokes joined by ``"\\n"`` +
  ``"\\n</｜DSML｜tool_calls>"``, an invoke being ``<｜DSML｜invoke name="NAME">\\n`` + parameters
  joined by ``"\\n"`` + ``"\\n</｜DSML｜invoke>"`` and a parameter
  ``<｜DSML｜parameter name="KEY" string="true">RAW STRING</｜DSML｜parameter>`` (string values) or
  ``string="false"`` with the JSON text of any other value.

The request's own text (message content, reasoning, tool results, tool-call names and arguments,
tool schemas) is plain text: :func:`render_messages` gives its spans, and a special-token string in
one is tokenized as text, not as the control token (:mod:`sglang_v4.prompt_tokens`).

The tool sections (the OpenAI ``tools`` checked and rendered as the "## Tools" section, and the
DSML block of an assistant message's ``tool_calls``) are :mod:`sglang_v4.entrypoints.chat_encoding_tools`;
this module re-exports their public names.

``｜DSML｜`` is one token of the V4 tokenizer. Example (chat mode, one call)::

    <｜begin▁of▁sentence｜>SYS\\n\\n## Tools ...<｜User｜>Weather?<｜Assistant｜></think>\\n\\n<｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>18C</tool_result><｜Assistant｜></think>
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglang_v4.entrypoints.chat_encoding_response_format import response_format_segments
from sglang_v4.entrypoints.chat_encoding_tools import (
    DSML,
    MAX_TOOL_PARAMETERS_NESTING,
    THINK_END,
    THINK_START,
    TOOL_CALLS_END,
    TOOL_CALLS_START,
    Segment,
    encode_tool_calls,
    json_nesting_depth,
    render_tools,
    tool_call_segments,
    tools_segments,
    validate_tools,
)
from sglang_v4.entrypoints.reasoning_effort import (
    REASONING_EFFORT_PROFILES,
    normalize_reasoning_effort,
    reasoning_effort_prefix,
)

__all__ = [
    "BOS",
    "EOS",
    "USER",
    "ASSISTANT",
    "LATEST_REMINDER",
    "THINK_START",
    "THINK_END",
    "DSML",
    "TOOL_CALLS_START",
    "TOOL_CALLS_END",
    "PART_SEPARATOR",
    "MAX_TOOL_PARAMETERS_NESTING",
    "REASONING_EFFORT_PROFILES",
    "RenderedPrompt",
    "Segment",
    "continues_reasoning",
    "encode_continuation",
    "encode_messages",
    "encode_tool_calls",
    "message_error_param",
    "message_text",
    "normalize_reasoning_effort",
    "reasoning_effort_prefix",
    "render_continuation",
    "render_messages",
    "render_tools",
    "json_nesting_depth",
    "validate_tools",
]

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
#: DeepSeek's reminder role token (one token of the V4 tokenizer)
LATEST_REMINDER = "<｜latest_reminder｜>"
#: The visual-grounding markup (reference, box, point, polygon; open and close) that the model
#: writes in its answers. DeepSeek's encoder (``deepseek-recipe``, its ``SpecialToken`` kinds
#: ``Ref`` .. ``PolygonEnd``) replays these spellings in an assistant message's ``content`` and
#: ``reasoning_content`` as the special tokens themselves; everywhere else in the request they are
#: text.
GROUNDING_TOKENS = tuple(
    f"<｜{slash}{kind}｜>" for kind in ("ref", "box", "point", "polygon") for slash in ("", "/")
)
_GROUNDING_RE = re.compile("(" + "|".join(map(re.escape, GROUNDING_TOKENS)) + ")")

_ROLES = ("system", "user", "developer", "assistant", "tool", "latest_reminder")

#: Content part types that carry text, and the key holding it: Chat Completions' ``text`` and
#: (assistant) ``refusal`` parts, and the Responses API's ``input_text`` / ``output_text`` that
#: clients replay into chat messages (vLLM reads all four as text).
TEXT_PART_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}


#: What separates the text parts of one message: a blank line, as DeepSeek's own request converter
#: (the ``deepseek-recipe`` package, which SGLang's DeepSeek-V4 chat path renders through) joins
#: them on the Chat Completions, Responses and Messages APIs alike, and as the reference encoder
#: joins the parts of a tool result. Joined with nothing, ``["Hello", "world"]`` read "Helloworld".
PART_SEPARATOR = "\n\n"


def message_text(content: Any, field: str = "content", sep: str = PART_SEPARATOR) -> str:
    """The text of an OpenAI message ``content``: a string, ``None`` (empty) or a list of parts.

    Text parts (``{"type": "text", "text": ...}``, also ``input_text`` / ``output_text``, and
    ``{"type": "refusal", "refusal": ...}``: :data:`TEXT_PART_KEYS`; a part without ``type``
    is a text part) are joined with ``sep`` (default :data:`PART_SEPARATOR`) in order.

    Raises:
        ValueError: a non-text part (images, audio, files...) or a malformed value; names
            ``field``.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        out = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                out.append(part)
                continue
            if not isinstance(part, Mapping):
                raise ValueError(f"{field}[{i}] must be a content part object.")
            ptype = part.get("type", "text")
            key = TEXT_PART_KEYS.get(ptype) if isinstance(ptype, str) else None
            if key is None:
                raise ValueError(f"{field}[{i}]: content part type {ptype!r} is not supported (text only).")
            text = part.get(key)
            if not isinstance(text, str):
                raise ValueError(f"{field}[{i}].{key} must be a string.")
            out.append(text)
        return sep.join(out)
    raise ValueError(f"{field} must be a string or a list of content parts.")


_MESSAGE_PATH_RE = re.compile(r"messages(?:\[\d+\]|\.[A-Za-z_]\w*)*")


def message_error_param(error: str) -> str:
    """The OpenAI error ``param`` of a message-rendering error text: the path it opens with
    (``messages[0].content[1]``, as OpenAI names the failing message or part), else
    ``"messages"``."""
    m = _MESSAGE_PATH_RE.match(error)
    return m.group(0) if m else "messages"


def _assistant_content_segments(text: str) -> list[Segment]:
    """An assistant message's content as segments: its grounding markup (:data:`GROUNDING_TOKENS`)
    as template markup (special tokens, as DeepSeek's encoder replays them), the rest as the
    request's plain text."""
    return [(piece, i % 2 == 0) for i, piece in enumerate(_GROUNDING_RE.split(text)) if piece]


def _merge_turns(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Validate roles and group the messages into turns; each turn's text is a list of
    :data:`Segment` (``"segs"``).

    As DeepSeek's V4 encoder (``deepseek-recipe``) renders a conversation: every ``system``
    message, wherever it stands, goes into one system turn at the front, the non-empty ones
    joined by :data:`PART_SEPARATOR` in order; ``user`` and ``tool`` messages that follow each
    other (system messages between them taken out) form one user turn, their parts joined by
    :data:`PART_SEPARATOR` (an empty user message next to another one's text adds nothing). A
    ``developer`` or ``latest_reminder`` message is a turn of its own.

    Raises:
        ValueError: a bad role or content, a ``tool`` message that answers no assistant message
            with ``tool_calls``, or whose ``tool_call_id`` is none of that message's call ids
            (OpenAI's "not found in 'tool_calls' of previous message").
    """
    turns: list[dict[str, Any]] = []
    system_texts: list[str] = []
    has_system = False
    call_order: dict[str, int] = {}
    answering_calls = False  # the last assistant message made tool calls
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ValueError(f"messages[{i}] must be an object.")
        role = m.get("role")
        if role not in _ROLES:
            raise ValueError(f"messages[{i}].role must be one of {', '.join(_ROLES)}; got {role!r}.")
        field = f"messages[{i}].content"
        if role == "system":
            has_system = True
            text = message_text(m.get("content"), field)
            if text:
                system_texts.append(text)
            continue
        if role in ("user", "tool"):
            if role == "user":
                text = message_text(m.get("content"), field)
                last = turns[-1]["parts"][-1] if turns and turns[-1]["role"] == "user" else None
                if last is not None and last[0] == "text":
                    # consecutive user messages: an empty one adds no separator
                    if not text:
                        continue
                    if not last[1][0][0]:
                        turns[-1]["parts"].pop()
                part = ("text", [(text, True)], None)
            else:
                if not answering_calls:
                    raise ValueError(
                        f"messages[{i}]: a 'tool' message must answer an earlier assistant message "
                        "with tool_calls."
                    )
                call_id = m.get("tool_call_id")
                if isinstance(call_id, str) and call_order and call_id not in call_order:
                    # OpenAI's check and text: a result must name a call of the assistant
                    # message it answers (DeepSeek's converter rejects it too)
                    raise ValueError(
                        f"messages[{i}]: Invalid parameter: 'tool_call_id' of '{call_id}' not found "
                        "in 'tool_calls' of previous message."
                    )
                text = message_text(m.get("content"), field)
                segs = [("<tool_result>", False), (text, True), ("</tool_result>", False)]
                part = ("tool", segs, m.get("tool_call_id"))
            if turns and turns[-1]["role"] == "user":
                turns[-1]["parts"].append(part)
            else:
                turns.append({"role": "user", "parts": [part], "order": call_order})
            continue
        turn = dict(m)
        if role == "assistant":
            calls = m.get("tool_calls") or []
            answering_calls = bool(calls)
            if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)):
                raise ValueError(f"messages[{i}].tool_calls must be a list.")
            if calls:
                turn["dsml"] = tool_call_segments(calls, f"messages[{i}].tool_calls")
                call_order = {
                    c.get("id"): k for k, c in enumerate(calls) if isinstance(c, Mapping) and c.get("id")
                }
        text = message_text(m.get("content"), field)
        turn["segs"] = _assistant_content_segments(text) if role == "assistant" else [(text, True)]
        turns.append(turn)
    if has_system:
        segs_sys: list[Segment] = []
        for k, text in enumerate(system_texts):
            segs_sys += [(PART_SEPARATOR, False)] if k else []
            segs_sys.append((text, True))
        turns.insert(0, {"role": "system", "segs": segs_sys})
    for t in turns:
        if t["role"] == "user":
            parts = t.pop("parts")
            # tool results in the order of the calls of the last assistant message that made calls
            # (unknown ids sort first; stable), keeping text parts where they are
            order = t.pop("order")
            tools_sorted = iter(
                sorted((p for p in parts if p[0] == "tool"), key=lambda p: order.get(p[2], 0))
            )
            segs: list[Segment] = []
            for k, p in enumerate(parts):
                if k:
                    segs.append((PART_SEPARATOR, False))
                segs += (next(tools_sorted) if p[0] == "tool" else p)[1]
            t["segs"] = segs
    return turns


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered chat prompt and where in it the client's own text lies.

    Attributes:
        text: the prompt text (special tokens as text).
        plain_spans: ``(start, end)`` character ranges of ``text`` holding text the request gave
            (message content, reasoning, tool results, tool-call names and arguments, tool
            schemas), in order and disjoint. A special-token string inside one is text, not a
            control token: ``<｜User｜>`` in a user message must not open a user turn. DeepSeek's
            encoder (``deepseek-recipe``) tokenizes message text that way; the template's own
            markup (BOS, role tokens, ``<think>``, DSML) stays special. Tokenize with
            :func:`sglang_v4.utils.encode_with_plain_spans`.
    """

    text: str
    plain_spans: tuple[tuple[int, int], ...] = ()


def _assemble(segs: Sequence[Segment]) -> RenderedPrompt:
    """Join segments; the client's (``True``) ones become the plain spans (adjacent ones merged)."""
    pieces: list[str] = []
    spans: list[tuple[int, int]] = []
    at = 0
    for text, plain in segs:
        if not text:
            continue
        if plain:
            if spans and spans[-1][1] == at:
                spans[-1] = (spans[-1][0], at + len(text))
            else:
                spans.append((at, at + len(text)))
        pieces.append(text)
        at += len(text)
    return RenderedPrompt("".join(pieces), tuple(spans))


def encode_messages(
    messages: Sequence[Mapping[str, Any]],
    thinking: bool = False,
    add_generation_prompt: bool = True,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    reasoning_effort: str | None = None,
    add_bos: bool = True,
    reasoning_effort_profile: str = "preview",
    drop_thinking: bool = True,
    response_format: Mapping[str, Any] | None = None,
) -> str:
    """Render an OpenAI-style conversation into a DeepSeek-V4 prompt string (module docstring).

    Args:
        messages: ``[{"role": "system"|"user"|"developer"|"assistant"|"tool"|"latest_reminder", "content": str |
            parts | None, "reasoning_content": str (assistant), "tool_calls": [...] (assistant),
            "tool_call_id": str (tool)}, ...]``.
        thinking: thinking mode (``<think>`` opens the answer) vs chat mode (``</think>``).
        add_generation_prompt: append ``<｜Assistant｜>`` + mode token after a final user turn.
        tools: OpenAI ``tools`` to describe in the system part (``None``/empty: no tools section).
        reasoning_effort: an OpenAI value (see :func:`normalize_reasoning_effort`); its
            instruction (:func:`reasoning_effort_prefix`) follows BOS in thinking mode.
        add_bos: start with BOS.
        reasoning_effort_profile: the checkpoint's effort profile (:data:`REASONING_EFFORT_PROFILES`).
        drop_thinking: in thinking mode without tools, leave out the reasoning of the assistant
            turns before the last user turn (and developer turns before it), and with a
            generation prompt of every given assistant turn, as DeepSeek's encoders do by
            default; False keeps every turn's reasoning, as with tools.
        response_format: the request's OpenAI ``response_format``; ``json_schema`` and
            ``json_object`` add their "## Response Format" section to the system block
            (:mod:`sglang_v4.entrypoints.chat_encoding_response_format`).

    Returns:
        The prompt text; :func:`render_messages` adds where the request's own text lies.

    Raises:
        ValueError: empty conversation, unknown role, non-text content, bad tools or tool calls,
            bad ``reasoning_effort``; the message names the field.
    """
    return render_messages(
        messages,
        thinking,
        add_generation_prompt,
        tools=tools,
        reasoning_effort=reasoning_effort,
        add_bos=add_bos,
        reasoning_effort_profile=reasoning_effort_profile,
        drop_thinking=drop_thinking,
        response_format=response_format,
    ).text


def render_messages(
    messages: Sequence[Mapping[str, Any]],
    thinking: bool = False,
    add_generation_prompt: bool = True,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    reasoning_effort: str | None = None,
    add_bos: bool = True,
    reasoning_effort_profile: str = "preview",
    drop_thinking: bool = True,
    response_format: Mapping[str, Any] | None = None,
    continuing: bool = False,
) -> RenderedPrompt:
    """:func:`encode_messages` with the plain spans of the request's own text (:class:`RenderedPrompt`).

    ``continuing`` (with ``add_generation_prompt`` False): the final assistant turn is the one
    being continued (:func:`render_continuation`); under dropped thinking it alone keeps its
    reasoning, the assistant turns between the last user turn and it being finished earlier turns
    (DeepSeek's converter, ``deepseek-recipe``, renders a ``prefix`` message so).

    Raises:
        ValueError: as :func:`encode_messages`.
    """
    if not messages:
        raise ValueError("messages must contain at least one message.")
    effort_prefix = reasoning_effort_prefix(reasoning_effort, reasoning_effort_profile)
    functions = validate_tools(tools) if tools else []
    turns = _merge_turns(messages)
    format_segs = response_format_segments(response_format)
    if functions or format_segs:  # both sections go into the system block, tools first
        if turns[0]["role"] != "system":
            turns.insert(0, {"role": "system", "segs": []})
        tool_segs = [("\n\n", False), *tools_segments(functions)] if functions else []
        turns[0] = dict(turns[0], segs=[*turns[0]["segs"], *tool_segs, *format_segs])
    # "Dropped thinking" (thinking mode without tools, unless the caller keeps it): developer turns
    # before the last user turn are left out; only turns after it keep their reasoning.
    drop = thinking and drop_thinking and not functions

    def last_user_index() -> int:
        return max((i for i, t in enumerate(turns) if t["role"] in ("user", "developer")), default=-1)

    if drop:
        cut = last_user_index()
        turns = [t for i, t in enumerate(turns) if not (t["role"] == "developer" and i < cut)]
    last_user = last_user_index()

    def keeps_thinking(i: int) -> bool:
        # With a generation prompt, every given assistant turn is a finished earlier turn: under
        # dropped thinking none keeps its reasoning (DeepSeek's converter, ``deepseek-recipe``);
        # without one (the whole conversation), the turns after the last user turn are the current
        # one and keep it; in a continuation only the continued final turn is.
        if not thinking or not drop:
            return thinking
        if continuing:
            return i == n - 1
        return i > last_user and not add_generation_prompt

    n = len(turns)
    segs: list[Segment] = [(BOS, False)] if add_bos else []
    if thinking and effort_prefix:
        segs.append((effort_prefix, False))
    for i, t in enumerate(turns):
        role = t["role"]
        if role == "system":
            segs += t["segs"]
        elif role in ("user", "developer"):
            segs += [(USER, False), *t["segs"]]
        elif role == "latest_reminder":
            segs += [(LATEST_REMINDER, False), *t["segs"]]
        else:  # assistant
            keeps = keeps_thinking(i)
            if i == 0 or turns[i - 1]["role"] == "assistant":
                # no user / system turn opened this one (the conversation starts with it, or it
                # follows another assistant turn): it opens itself, as DeepSeek's encoder does
                segs.append((ASSISTANT + (THINK_START if keeps else THINK_END), False))
            if keeps:
                rc = t.get("reasoning_content")
                # grounding markup in it is replayed as the special tokens, as in the content
                segs += [*_assistant_content_segments(rc if isinstance(rc, str) else ""), (THINK_END, False)]
            segs += [*t["segs"], *t.get("dsml", []), (EOS, False)]
        # The assistant turn opens after a user / developer / system turn that an assistant turn
        # follows, and after the last turn (an assistant one too) when a generation prompt is
        # wanted: a prompt never ends at a bare system text or EOS.
        nxt = turns[i + 1]["role"] if i + 1 < n else None
        if nxt == "assistant" and role != "assistant":
            segs.append((ASSISTANT + (THINK_START if keeps_thinking(i + 1) else THINK_END), False))
        elif nxt is None and add_generation_prompt:
            segs.append((ASSISTANT + (THINK_START if thinking else THINK_END), False))
    return _assemble(segs)


def encode_continuation(
    messages: Sequence[Mapping[str, Any]],
    thinking: bool = False,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    reasoning_effort: str | None = None,
    reasoning_effort_profile: str = "preview",
    drop_thinking: bool = True,
    response_format: Mapping[str, Any] | None = None,
) -> str:
    """Render a conversation whose last message is a partial ``assistant`` turn to be continued
    (``continue_final_message``): :func:`encode_messages` of it without the final EOS (V4's
    "assistant turn without EOS"). In thinking mode the final turn keeps its ``reasoning_content``
    in the ``<think>`` block, closed before its ``content``: the continuation is answer text.
    A final turn with no content and no tool calls in thinking mode leaves that block open (no
    ``</think>``): the continuation is reasoning, after the turn's ``reasoning_content`` if it has
    one (:func:`continues_reasoning`; DeepSeek's prefix completion, as its ``deepseek-recipe``
    encoder renders a ``prefix`` assistant message with only ``reasoning_content``).

    Raises:
        ValueError: the last message is not an assistant message, or as :func:`encode_messages`.
    """
    return render_continuation(
        messages,
        thinking,
        tools=tools,
        reasoning_effort=reasoning_effort,
        reasoning_effort_profile=reasoning_effort_profile,
        drop_thinking=drop_thinking,
        response_format=response_format,
    ).text


def render_continuation(
    messages: Sequence[Mapping[str, Any]],
    thinking: bool = False,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    reasoning_effort: str | None = None,
    reasoning_effort_profile: str = "preview",
    drop_thinking: bool = True,
    response_format: Mapping[str, Any] | None = None,
) -> RenderedPrompt:
    """:func:`encode_continuation` with the plain spans of the request's own text.

    Raises:
        ValueError: as :func:`encode_continuation`.
    """
    if not messages or not isinstance(messages[-1], Mapping) or messages[-1].get("role") != "assistant":
        raise ValueError("messages[-1] must be an assistant message to continue it.")
    rendered = render_messages(
        messages,
        thinking,
        False,
        tools=tools,
        reasoning_effort=reasoning_effort,
        reasoning_effort_profile=reasoning_effort_profile,
        drop_thinking=drop_thinking,
        response_format=response_format,
        continuing=True,
    )
    # the final EOS (and an open reasoning block's THINK_END) is template markup, never inside a
    # plain span
    text = rendered.text.removesuffix(EOS)
    if continues_reasoning(messages, thinking):
        text = text.removesuffix(THINK_END)
    return RenderedPrompt(text, rendered.plain_spans)


def continues_reasoning(messages: Sequence[Mapping[str, Any]], thinking: bool) -> bool:
    """Whether continuing the final ``assistant`` message of ``messages`` continues its reasoning
    rather than its answer: thinking mode, and the message has no content text and no tool calls
    (its ``reasoning_content``, if any, is the start of the reasoning). DeepSeek's converter and
    V4 encoder (``deepseek-recipe``) render such a ``prefix`` message as ``<think>`` + reasoning
    with no ``</think>``, and its response parser then reads the output as reasoning up to
    ``</think>``.

    Raises:
        ValueError: the final message's content is not text (as :func:`message_text`).
    """
    if not thinking or not messages or not isinstance(messages[-1], Mapping):
        return False
    last = messages[-1]
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return False
    return message_text(last.get("content"), f"messages[{len(messages) - 1}].content") == ""

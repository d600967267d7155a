"""A Messages API request in chat-completions terms (``POST /v1/messages`` runs on the chat path,
:mod:`.serving_messages`).

* ``system`` (a string, or ``text`` blocks joined by a blank line) becomes a first ``system``
  message. A ``system`` message inside ``messages`` (the Anthropic SDK's ``SystemMessageParam``,
  which agents such as Claude Code send: ``content`` a string or ``text`` blocks) stays at its
  place in the conversation (:func:`system_reminder`): a user turn holding its text in a
  ``<system-reminder>`` element (joined to the user or tool turn next to it), as DeepSeek's own
  Messages converter renders it; an empty one adds nothing. It never moves to the top-level system prompt:
  a reminder an agent adds on a later turn leaves the prompt before it, and so its cached prefix,
  as it was.
* ``messages`` (:func:`messages_to_chat`): a ``user`` message's ``text`` blocks become a user
  message (joined by a blank line; an empty ``text`` block, which Claude Code sends, adds
  nothing, not even the blank line, as DeepSeek's own Messages converter reads it; a string
  content is one text); each ``tool_result`` block
  becomes a ``tool`` message answering the call of its ``tool_use_id``, which must be a
  ``tool_use`` of the preceding assistant message answered by no earlier block (Anthropic's 400
  ``each tool_use must have a single result``) (``content`` a string or ``text`` blocks, its
  text as is; ``tool_reference`` items of a client-side tool search add nothing; ``is_error``
  must be a boolean and adds nothing to the prompt, as DeepSeek's own Messages converter
  (``deepseek-recipe``), SGLang's and vLLM's Anthropic adapters render it; the tool's own error
  text tells the model the call failed). The blocks keep their order: ``[tool_result, tool_result, text]`` is two tool messages
  and then a user message. Each ``tool_use`` needs its ``tool_result`` in the very next message,
  the results before any ``text`` block of it (Anthropic's 400 ``messages.N: `tool_use` ids were found without `tool_result` blocks
  immediately after``, N that next message). An ``assistant`` message's ``text`` blocks are its content
  (empty blocks before its first text add nothing: :func:`_join_assistant_texts`; text written
  after its ``tool_use`` blocks renders before the calls, where the template writes a turn's text),
  ``thinking`` blocks its ``reasoning_content`` (the ``signature`` is not checked, nor required;
  ``redacted_thinking`` blocks are dropped: their data is another model's) and ``tool_use``
  blocks its ``tool_calls`` (``input``, required and a JSON object, as the JSON arguments, the
  block's ``id`` as the call id).
  A final assistant message is a *prefill*: the answer continues it (the chat route's
  ``continue_final_message``); it cannot hold ``tool_use`` blocks. Images and documents are a 400
  (the model reads text only).
* ``tools`` (:func:`tools_to_chat`: custom tools ``{"name", "description", "input_schema",
  "strict"}``) become chat function tools; server tools (``web_search_...``, ``bash_...``) are a
  400. ``tool_choice`` (:func:`tool_choice_to_chat`): ``auto`` / ``any`` (chat's ``"required"``)
  / ``tool`` with ``name`` (chat's named function) / ``none``; ``disable_parallel_tool_use: true``
  is chat's ``parallel_tool_calls: false``.
* ``thinking`` (:func:`thinking_switch`): ``enabled`` (with ``budget_tokens``) and ``adaptive``
  switch the chat template's thinking mode on, ``disabled`` off; without it
  ``output_config.effort`` decides as the chat route's ``reasoning_effort`` does (``"none"`` off,
  any other on, :mod:`~sglang_v4.entrypoints.openai.reasoning_request`), else the server's
  default applies. ``budget_tokens`` must be a positive integer; it does not bound the reasoning (the
  model has no reasoning budget; ``max_tokens`` bounds reasoning and answer together).
  ``display`` (:func:`thinking_omitted`): ``summarized`` (the default) returns the reasoning,
  ``omitted`` returns the thinking block with empty ``thinking`` and its ``signature`` only.
* ``output_config.effort`` is the chat route's ``reasoning_effort``; ``output_config.format``
  (``{"type": "json_schema", "schema": ...}``) its ``response_format`` (a grammar on the answer).
* ``temperature`` must be in [0, 1] and ``top_k`` at least 0 (Anthropic's ranges; a 400).
* ``service_tier`` must be one of ``auto`` / ``standard_only`` (another value is a 400).
* ``stop_sequences`` are ``stop``, ``metadata.user_id`` is ``user``; ``max_tokens`` is the chat
  route's (``0``, Anthropic's cache pre-warm call, prefills the prompt and generates nothing).

Every error is a :class:`~sglang_v4.entrypoints.openai.request_errors.RequestError` (400) whose
message starts with the field as the client sent it, dotted as Anthropic's API writes it
(``messages.2.content.0.tool_use_id``); errors of the chat path are renamed the same way
(:func:`anthropic_field_error`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sglang_v4.entrypoints.anthropic.protocol import (
    MESSAGES_SERVICE_TIERS,
    CountTokensRequest,
    MessagesRequest,
)
from sglang_v4.entrypoints.openai.request_sampling import sent_nulls
from sglang_v4.entrypoints.openai.serving_base import RequestError

__all__ = [
    "anthropic_field_error",
    "chat_request_data",
    "messages_to_chat",
    "system_reminder",
    "thinking_omitted",
    "thinking_switch",
    "tool_choice_to_chat",
    "tools_to_chat",
]

#: Chat request fields whose errors name the Messages field the client sent instead.
CHAT_FIELD_NAMES = {
    "stop": "stop_sequences",
    "reasoning_effort": "output_config.effort",
    "response_format": "output_config.format",
    "user": "metadata.user_id",
    "max_completion_tokens": "max_tokens",
}
#: Joins consecutive text blocks (of ``system``, of a message, of a tool result).
BLOCK_SEPARATOR = "\n\n"


def _error(field: str, why: str) -> RequestError:
    return RequestError(f"{field}: {why}", 400, param=field)


#: A chat tool's field (``tools[1].function.parameters``, ``tools[1].function.name``, ``tools[1]``).
_CHAT_TOOL_FIELD = re.compile(r"tools\[(\d+)\](\.function(\.parameters)?)?")
#: A message that names its field only in a closing parenthesis (``... (tools.1.input_schema).``).
_TRAILING_FIELD = re.compile(r"(?P<body>.+) \((?P<field>tools\.\d+(?:\.[\w.]+)?)\)\.", re.DOTALL)


def _messages_tool_field(m: re.Match[str]) -> str:
    """The Messages field of a chat tool field match: ``tools.N.input_schema`` for the function's
    ``parameters``, ``tools.N`` for the tool or its ``function`` (``.name`` etc. follow as sent)."""
    return f"tools.{m.group(1)}" + (".input_schema" if m.group(3) else "")


def anthropic_field_error(e: RequestError) -> RequestError:
    """``e`` (raised on the chat path) naming the Messages field (:data:`CHAT_FIELD_NAMES`): its
    ``param`` and the field at the start of its message. A chat tool field anywhere in the message
    (``tools[1].function.parameters``) is the client's tool field (``tools.1.input_schema``, the
    index into the request's ``tools`` as sent, dotted as Anthropic's API writes it); a message
    that named it only at its end (OpenAI's "Invalid schema for function" text) starts with it."""
    msg = _CHAT_TOOL_FIELD.sub(_messages_tool_field, e.message)
    param = None if e.param is None else _CHAT_TOOL_FIELD.sub(_messages_tool_field, e.param)
    trailing = _TRAILING_FIELD.fullmatch(msg)
    if trailing is not None and not msg.startswith("tools"):
        msg = f"{trailing['field']}: {trailing['body']}."
    if param is not None and param.startswith("messages["):  # the converted chat message's path
        param = "messages"
    for chat_name, name in CHAT_FIELD_NAMES.items():
        if param == chat_name:
            param = name
        if msg.startswith(chat_name) and not msg[len(chat_name) : len(chat_name) + 1].isidentifier():
            msg = name + msg[len(chat_name) :]
    return RequestError(msg, e.status, e.err_type, param)


def _content_blocks(blocks: Sequence[Any], field: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(where, block)`` for each block of the content list ``field`` (``where``: the block's
    dotted field, ``messages.2.content.0``), checked in order.

    Raises:
        RequestError: 400 naming the first entry that is not an object.
    """
    for j, b in enumerate(blocks):
        where = f"{field}.{j}"
        if not isinstance(b, Mapping):
            raise _error(where, "must be a content block object.")
        yield where, b


def _block_str(block: Mapping[str, Any], key: str, where: str, non_empty: bool = False) -> str:
    """``block[key]``, which must be a string (``non_empty``: and not ``""``).

    Raises:
        RequestError: 400 naming ``{where}.{key}``.
    """
    value = block.get(key)
    if not isinstance(value, str) or (non_empty and not value):
        raise _error(f"{where}.{key}", "must be a non-empty string." if non_empty else "must be a string.")
    return value


def _texts(blocks: Sequence[Any], field: str, what: str) -> str:
    """The text of ``text`` blocks (joined by :data:`BLOCK_SEPARATOR`); another block is a 400."""
    out = []
    for where, b in _content_blocks(blocks, field):
        if b.get("type") != "text":
            raise _error(f"{where}.type", f"{what} takes text blocks only; got {b.get('type')!r}.")
        out.append(_block_str(b, "text", where))
    return BLOCK_SEPARATOR.join(out)


def system_reminder(text: str) -> str:
    """The user-turn text of a ``system`` message inside ``messages``: ``text`` in a
    ``<system-reminder>`` element on lines of its own (DeepSeek's own Messages converter's
    rendering)."""
    return f"<system-reminder>\n{text}\n</system-reminder>"


def _system_text(system: str | Sequence[Any] | None) -> str | None:
    if system is None or isinstance(system, str):
        return system
    return _texts(system, "system", "system")


def _tool_result_text(block: Mapping[str, Any], field: str) -> str:
    """The text of a ``tool_result`` block: its ``content`` (a string or ``text`` blocks joined by
    :data:`BLOCK_SEPARATOR`) as is, whatever ``is_error`` says (module docstring).
    ``tool_reference`` items of the list (``{"type": "tool_reference", "tool_name": ...}``, what a
    client-side tool search returns to load a deferred tool's definition) add no text: every tool
    of the request's ``tools`` is in the prompt already (``defer_loading`` defers nothing here).

    Raises:
        RequestError: 400 naming ``{field}.content`` (not a string or a list of text and
            ``tool_reference`` blocks; an ``image`` or ``document`` item is refused as in a
            message: the model reads text only), a ``tool_reference`` without a non-empty
            ``tool_name``, or
            ``{field}.is_error`` (not a boolean).
    """
    content = block.get("content", "")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for where, b in _content_blocks(content, f"{field}.content"):
            if b.get("type") == "tool_reference":
                _block_str(b, "tool_name", where, non_empty=True)  # checked, adds no text
            elif b.get("type") == "text":
                texts.append(_block_str(b, "text", where))
            elif b.get("type") in _NON_TEXT_BLOCKS:
                raise _unsupported_block(b.get("type"), where, "user")
            else:
                raise _error(
                    f"{where}.type",
                    f"a tool_result takes text and tool_reference blocks only; got {b.get('type')!r}.",
                )
        text = BLOCK_SEPARATOR.join(texts)
    else:
        raise _error(f"{field}.content", "must be a string or a list of text and tool_reference blocks.")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise _error(f"{field}.is_error", "must be a boolean.")
    return text


#: Content blocks the model cannot read (it reads text only): refused by name wherever they come,
#: a message's content or a tool result's, never dropped from the prompt.
_NON_TEXT_BLOCKS = ("image", "document", "search_result", "container_upload")


def _unsupported_block(kind: Any, field: str, role: str) -> RequestError:
    if kind in _NON_TEXT_BLOCKS:
        return _error(f"{field}.type", f"{kind!r} blocks are not supported (the model reads text only).")
    allowed = "text, tool_result" if role == "user" else "text, thinking, redacted_thinking, tool_use"
    return _error(f"{field}.type", f"a {role} message takes {allowed} blocks; got {kind!r}.")


def _join_assistant_texts(texts: Sequence[str]) -> str:
    """The content of an assistant message's ``text`` blocks in order: each block after the first
    non-empty one follows a :data:`BLOCK_SEPARATOR`, so empty blocks before any text (Claude Code
    replays ``{"type": "text", "text": ""}`` ahead of its text and calls) add nothing, as DeepSeek's
    own Messages converter joins them; later empty blocks keep their separator, as there
    (``thinking`` blocks are joined by the separator throughout, as there too)."""
    out = ""
    for text in texts:
        out = out + BLOCK_SEPARATOR + text if out else text
    return out


def _assistant_message(blocks: Sequence[Any], field: str) -> dict[str, Any]:
    texts, thinking, calls = [], [], []
    for where, b in _content_blocks(blocks, field):
        kind = b.get("type")
        if kind == "text":
            texts.append(_block_str(b, "text", where))
        elif kind == "thinking":
            thinking.append(_block_str(b, "thinking", where))
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use":
            call_id = _block_str(b, "id", where, non_empty=True)
            name = _block_str(b, "name", where, non_empty=True)
            if "input" not in b:  # Anthropic's API and DeepSeek's Messages converter require it
                raise _error(f"{where}.input", "Field required (the call's arguments, a JSON object).")
            args = b["input"]
            if not isinstance(args, Mapping):
                raise _error(f"{where}.input", "must be a JSON object.")
            fn = {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}
            calls.append({"id": call_id, "type": "function", "function": fn})
        else:
            raise _unsupported_block(kind, where, "assistant")
    msg: dict[str, Any] = {"role": "assistant", "content": _join_assistant_texts(texts)}
    if thinking:
        msg["reasoning_content"] = BLOCK_SEPARATOR.join(thinking)
    if calls:
        msg["tool_calls"] = calls
    return msg


def _user_messages(blocks: Sequence[Any], field: str, answerable: set[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    run = False  # a run of text blocks is open (its empty blocks add no text, not even a separator)
    results: set[str] = set()  # the tool_use ids answered so far in this message

    def flush() -> None:
        nonlocal run
        if run:
            out.append({"role": "user", "content": BLOCK_SEPARATOR.join(texts)})
            texts.clear()
            run = False

    for where, b in _content_blocks(blocks, field):
        kind = b.get("type")
        if kind == "text":
            text = _block_str(b, "text", where)
            run = True
            if text:
                texts.append(text)
        elif kind == "tool_result":
            call_id = _block_str(b, "tool_use_id", where, non_empty=True)
            if call_id not in answerable:
                raise _error(
                    f"{where}.tool_use_id",
                    f"{call_id!r} answers no tool_use block of the preceding assistant message.",
                )
            if call_id in results:  # Anthropic's 400 (DeepSeek's Messages converter's words too)
                raise _error(
                    where,
                    "each tool_use must have a single result. Found multiple `tool_result` blocks "
                    f"with id: {call_id}",
                )
            results.add(call_id)
            flush()
            out.append({"role": "tool", "tool_call_id": call_id, "content": _tool_result_text(b, where)})
        else:
            raise _unsupported_block(kind, where, "user")
    flush()
    if not out:  # an empty block list: an empty user turn, as an empty string content is
        out.append({"role": "user", "content": ""})
    return out


def _check_tool_uses_answered(
    calls: Sequence[str], converted: Sequence[Mapping[str, Any]], index: int
) -> None:
    """The message right after an assistant message with ``tool_use`` blocks (``index``, converted
    to ``converted``) answers each of them with a ``tool_result`` block among the blocks it opens
    with: a result after a ``text`` block (an empty one too) does not count, since the results
    must come first and any text after them (Anthropic's tool-use guide).

    Anthropic's rule and words (DeepSeek's own Messages converter refuses it alike).

    Raises:
        RequestError: 400 ``messages.{index}: `tool_use` ids were found without `tool_result`
            blocks immediately after: <ids>. ...`` (``param`` ``messages.{index}``).
    """
    answered: set[Any] = set()
    for m in converted:  # the leading tool messages: the results before any text
        if m.get("role") != "tool":
            break
        answered.add(m.get("tool_call_id"))
    missing = [c for c in calls if c not in answered]
    if missing:
        raise _error(
            f"messages.{index}",
            f"`tool_use` ids were found without `tool_result` blocks immediately after: {', '.join(missing)}. "
            "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
        )


def messages_to_chat(messages: Sequence[Any]) -> tuple[list[dict[str, Any]], bool]:
    """The chat messages of a Messages ``messages`` list (module docstring), and whether the last
    one is an assistant prefill to continue.

    Args:
        messages: :class:`~.protocol.MessageParam` items (``role``, ``content``).

    A user or assistant message whose ``content`` is an empty block list (``[]``) is refused unless
    it is the final assistant message (an empty prefill), as Anthropic's API ("all messages must
    have non-empty content except for the optional final assistant message") and DeepSeek's own
    Messages converter (``deepseek-recipe``) refuse it; served, the turn rendered empty and the
    model answered a message nobody sent. An empty string is served, as DeepSeek's converter
    serves it.

    Raises:
        RequestError: 400 naming the field (``messages.1.content.0.tool_use_id`` ...).
    """
    if not messages:
        raise _error("messages", "must contain at least one message.")
    out: list[dict[str, Any]] = []
    calls: list[str] = []  # the tool_use ids of the preceding assistant message, in order
    for i, m in enumerate(messages):
        field = f"messages.{i}.content"
        content = m.content
        start = len(out)
        final_prefill = i == len(messages) - 1 and m.role == "assistant"
        if (
            m.role in ("user", "assistant")
            and isinstance(content, list)
            and not content
            and not final_prefill
        ):
            raise _error(
                f"messages.{i}",
                "all messages must have non-empty content except for the optional final assistant message.",
            )
        if m.role == "system":
            text = content if isinstance(content, str) else _texts(content, field, "system")
            if text:
                out.append({"role": "user", "content": system_reminder(text)})
        elif m.role == "assistant":
            msg = (
                {"role": "assistant", "content": content}
                if isinstance(content, str)
                else _assistant_message(content, field)
            )
            out.append(msg)
        else:
            out += (
                [{"role": "user", "content": content}]
                if isinstance(content, str)
                else _user_messages(content, field, set(calls))
            )
        _check_tool_uses_answered(calls, out[start:], i)
        # a tool_result must come right after its tool_use
        calls = [c["id"] for c in out[-1].get("tool_calls", [])] if m.role == "assistant" else []
    prefill = messages[-1].role == "assistant"
    if prefill and out[-1].get("tool_calls"):
        raise _error(
            f"messages.{len(messages) - 1}.content",
            "a final assistant message (a prefill, continued by the answer) cannot hold tool_use blocks.",
        )
    return out, prefill


def tools_to_chat(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """Custom tools as chat function tools (``input_schema`` -> ``parameters``).

    Raises:
        RequestError: 400 naming the tool field: a server tool (a ``type`` other than
            ``custom``), a missing or duplicate name, a missing or non-object ``input_schema``,
            a non-string ``description``, a non-boolean ``strict``.
    """
    out, seen = [], set()
    for i, tool in enumerate(tools):
        field = f"tools.{i}"
        if not isinstance(tool, Mapping):
            raise _error(field, "must be a tool object.")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise _error(
                f"{field}.type", f"server tools are not supported (custom tools only); got {kind!r}."
            )
        name = tool.get("name")
        if not isinstance(name, str) or not name or any(c in name for c in '"<>\n'):
            raise _error(f"{field}.name", "must be a non-empty string without quotes or angle brackets.")
        if name in seen:
            raise _error(f"{field}.name", f"{name!r} is defined twice.")
        seen.add(name)
        schema = tool.get("input_schema")
        if not isinstance(schema, Mapping):
            raise _error(f"{field}.input_schema", "is required: a JSON schema object.")
        fn: dict[str, Any] = {"name": name}  # OpenAI's key order: the rendered tool lines follow it
        if tool.get("description") is not None:
            if not isinstance(tool["description"], str):
                raise _error(f"{field}.description", "must be a string.")
            fn["description"] = tool["description"]
        fn["parameters"] = dict(schema)
        if tool.get("strict") is not None:
            if not isinstance(tool["strict"], bool):
                raise _error(f"{field}.strict", f"must be a boolean; got {tool['strict']!r}.")
            fn["strict"] = tool["strict"]
        out.append({"type": "function", "function": fn})
    return out


def tool_choice_to_chat(choice: Mapping[str, Any] | None) -> tuple[Any, bool | None]:
    """``(tool_choice, parallel_tool_calls)`` in chat terms of a Messages ``tool_choice``
    (``None``: the defaults, ``"auto"`` with tools).

    Raises:
        RequestError: 400 naming ``tool_choice.type`` / ``.name`` / ``.disable_parallel_tool_use``.
    """
    if choice is None:
        return None, None
    kind = choice.get("type")
    mapped: Any
    if kind == "auto":
        mapped = "auto"
    elif kind == "any":
        mapped = "required"
    elif kind == "none":
        mapped = "none"
    elif kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise _error("tool_choice.name", "must be a non-empty string (the tool to call).")
        mapped = {"type": "function", "function": {"name": name}}
    else:
        raise _error("tool_choice.type", f"must be one of auto, any, tool, none; got {kind!r}.")
    no_parallel = choice.get("disable_parallel_tool_use")
    if no_parallel is not None and not isinstance(no_parallel, bool):
        raise _error("tool_choice.disable_parallel_tool_use", "must be a boolean.")
    return mapped, (None if no_parallel is None else not no_parallel)


def thinking_switch(thinking: Mapping[str, Any] | None) -> bool | None:
    """The thinking mode of a Messages ``thinking`` field: ``True`` (``enabled``, ``adaptive``),
    ``False`` (``disabled``) or ``None`` (not given: the server's default).

    Raises:
        RequestError: 400 naming ``thinking.type`` or ``thinking.budget_tokens`` (``enabled``
            needs a positive integer).
    """
    if thinking is None:
        return None
    kind = thinking.get("type")
    if kind == "disabled":
        return False
    thinking_omitted(thinking)  # a bad ``display`` is refused before anything runs
    if kind == "adaptive":
        return True
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            raise _error("thinking.budget_tokens", f"must be a positive integer; got {budget!r}.")
        return True
    raise _error("thinking.type", f"must be one of enabled, adaptive, disabled; got {kind!r}.")


THINKING_DISPLAYS = ("summarized", "omitted")


def thinking_omitted(thinking: Mapping[str, Any] | None) -> bool:
    """Whether a Messages ``thinking`` field (``enabled`` / ``adaptive``) asks for its reasoning
    left out of the response: ``display: "omitted"``. Anthropic's reference: the thinking block
    then comes back with an empty ``thinking`` and its ``signature`` (streamed: no
    ``thinking_delta``, the ``signature_delta`` only); ``"summarized"`` or no ``display`` returns
    the reasoning.

    Raises:
        RequestError: 400 naming ``thinking.display`` (not one of :data:`THINKING_DISPLAYS`).
    """
    if thinking is None or thinking.get("type") == "disabled":
        return False
    display = thinking.get("display")
    if display is not None and display not in THINKING_DISPLAYS:
        raise _error("thinking.display", f"must be one of summarized, omitted; got {display!r}.")
    return display == "omitted"


def _output_config(cfg: Mapping[str, Any] | None) -> tuple[Any, dict[str, Any] | None]:
    """``(reasoning_effort, response_format)`` of ``output_config``."""
    if cfg is None:
        return None, None
    fmt = cfg.get("format")
    rf = None
    if fmt is not None:
        if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
            raise _error("output_config.format.type", "must be 'json_schema'.")
        schema = fmt.get("schema")
        if not isinstance(schema, Mapping):
            raise _error("output_config.format.schema", "must be a JSON schema object.")
        rf = {"type": "json_schema", "json_schema": {"name": "output", "schema": dict(schema)}}
    return cfg.get("effort"), rf


def chat_request_data(req: MessagesRequest | CountTokensRequest) -> dict[str, Any]:
    """The ``/v1/chat/completions`` request body of a Messages (or count-tokens) request (module
    docstring); ``None`` values left out (the chat defaults apply), except a ``temperature`` /
    ``top_p`` / ``top_k`` the client sent as ``null`` (kept, so that it wins over
    ``--preferred-sampling-params``).

    Raises:
        RequestError: 400 naming the Messages field.
    """
    messages, prefill = messages_to_chat(req.messages)
    system = _system_text(req.system)
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    tool_choice, parallel = tool_choice_to_chat(req.tool_choice)
    thinking = thinking_switch(req.thinking)
    effort, response_format = _output_config(req.output_config)
    data: dict[str, Any] = {
        "model": req.model,
        "messages": messages,
        "tools": tools_to_chat(req.tools) if req.tools else None,
        "tool_choice": tool_choice,
        "parallel_tool_calls": parallel,
        "thinking": None if thinking is None else {"type": "enabled" if thinking else "disabled"},
        "reasoning_effort": effort,
        "response_format": response_format,
        "continue_final_message": prefill or None,
    }
    if isinstance(req, MessagesRequest):
        user = (req.metadata or {}).get("user_id")
        if user is not None and not isinstance(user, str):
            raise _error("metadata.user_id", "must be a string.")
        # Anthropic's lower bound is 0: a request that only prefills (a cache pre-warm)
        if isinstance(req.max_tokens, int) and req.max_tokens < 0:
            raise _error("max_tokens", f"must be greater than or equal to 0; got {req.max_tokens}.")
        # Anthropic's API refuses a stop sequence of whitespace only (in its own words); an empty
        # one is refused by the chat path's stop check, renamed to this field
        if any(isinstance(s, str) and s and not s.strip() for s in req.stop_sequences or ()):
            raise _error("stop_sequences", "each stop sequence must contain non-whitespace")
        # Anthropic's documented ranges, narrower than the chat route's: temperature 0..1, top_k >= 0
        if req.temperature is not None and not 0.0 <= req.temperature <= 1.0:
            raise _error("temperature", f"must be in [0, 1]; got {req.temperature}.")
        if req.top_k is not None and req.top_k < 0:
            raise _error("top_k", f"must be greater than or equal to 0; got {req.top_k}.")
        if req.service_tier is not None and req.service_tier not in MESSAGES_SERVICE_TIERS:
            raise _error(
                "service_tier",
                f"must be one of {', '.join(MESSAGES_SERVICE_TIERS)}; got {req.service_tier!r}.",
            )
        data.update(
            max_tokens=req.max_tokens,
            stop=req.stop_sequences,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            stream=req.stream,
            user=user,
        )
    body = {k: v for k, v in data.items() if v is not None}
    if isinstance(req, MessagesRequest):  # a sampling field sent as null keeps it (not the preferred value)
        body.update(sent_nulls(req, {k: k for k in ("temperature", "top_p", "top_k")}))
    return body

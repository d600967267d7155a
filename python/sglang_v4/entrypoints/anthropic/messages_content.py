"""The ``messages`` list of a Messages API request as chat-completions messages (content blocks,
``tool_use`` / ``tool_result`` pairing); the request's other fields are :mod:`.messages_input`'s.

* A ``system`` message inside ``messages`` (the Anthropic SDK's ``SystemMessageParam``,
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

Every error is a :class:`~sglang_v4.entrypoints.openai.request_errors.RequestError` (400) whose
message starts with the field as the client sent it, dotted as Anthropic's API writes it
(``messages.2.content.0.tool_use_id``; :func:`field_error`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sglang_v4.entrypoints.openai.serving_base import RequestError

__all__ = [
    "BLOCK_SEPARATOR",
    "blocks_text",
    "field_error",
    "messages_to_chat",
    "system_reminder",
]

#: Joins consecutive text blocks (of ``system``, of a message, of a tool result).
BLOCK_SEPARATOR = "\n\n"


def field_error(field: str, why: str) -> RequestError:
    """A 400 :class:`RequestError` whose message is ``"{field}: {why}"`` and ``param`` ``field``
    (the dotted Messages field as the client sent it, ``messages.2.content.0``)."""
    return RequestError(f"{field}: {why}", 400, param=field)


def _content_blocks(blocks: Sequence[Any], field: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(where, block)`` for each block of the content list ``field`` (``where``: the block's
    dotted field, ``messages.2.content.0``), checked in order.

    Raises:
        RequestError: 400 naming the first entry that is not an object.
    """
    for j, b in enumerate(blocks):
        where = f"{field}.{j}"
        if not isinstance(b, Mapping):
            raise field_error(where, "must be a content block object.")
        yield where, b


def _block_str(block: Mapping[str, Any], key: str, where: str, non_empty: bool = False) -> str:
    """``block[key]``, which must be a string (``non_empty``: and not ``""``).

    Raises:
        RequestError: 400 naming ``{where}.{key}``.
    """
    value = block.get(key)
    if not isinstance(value, str) or (non_empty and not value):
        raise field_error(
            f"{where}.{key}", "must be a non-empty string." if non_empty else "must be a string."
        )
    return value


def blocks_text(blocks: Sequence[Any], field: str, what: str) -> str:
    """The text of the ``text`` blocks of the content list ``field`` (``what``: its name in the
    error), joined by :data:`BLOCK_SEPARATOR`.

    Raises:
        RequestError: 400 naming the first entry that is not a ``text`` block object
            (``{field}.N.type``, or ``{field}.N``), or a ``text`` that is not a string.
    """
    out = []
    for where, b in _content_blocks(blocks, field):
        if b.get("type") != "text":
            raise field_error(f"{where}.type", f"{what} takes text blocks only; got {b.get('type')!r}.")
        out.append(_block_str(b, "text", where))
    return BLOCK_SEPARATOR.join(out)


def system_reminder(text: str) -> str:
    """The user-turn text of a ``system`` message inside ``messages``: ``text`` in a
    ``<system-reminder>`` element on lines of its own (DeepSeek's own Messages converter's
    rendering)."""
    return f"<system-reminder>\n{text}\n</system-reminder>"


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
                raise field_error(
                    f"{where}.type",
                    f"a tool_result takes text and tool_reference blocks only; got {b.get('type')!r}.",
                )
        text = BLOCK_SEPARATOR.join(texts)
    else:
        raise field_error(f"{field}.content", "must be a string or a list of text and tool_reference blocks.")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise field_error(f"{field}.is_error", "must be a boolean.")
    return text


#: Content blocks the model cannot read (it reads text only): refused by name wherever they come,
#: a message's content or a tool result's, never dropped from the prompt.
_NON_TEXT_BLOCKS = ("image", "document", "search_result", "container_upload")


def _unsupported_block(kind: Any, field: str, role: str) -> RequestError:
    if kind in _NON_TEXT_BLOCKS:
        return field_error(f"{field}.type", f"{kind!r} blocks are not supported (the model reads text only).")
    allowed = "text, tool_result" if role == "user" else "text, thinking, redacted_thinking, tool_use"
    return field_error(f"{field}.type", f"a {role} message takes {allowed} blocks; got {kind!r}.")


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
                raise field_error(f"{where}.input", "Field required (the call's arguments, a JSON object).")
            args = b["input"]
            if not isinstance(args, Mapping):
                raise field_error(f"{where}.input", "must be a JSON object.")
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
                raise field_error(
                    f"{where}.tool_use_id",
                    f"{call_id!r} answers no tool_use block of the preceding assistant message.",
                )
            if call_id in results:  # Anthropic's 400 (DeepSeek's Messages converter's words too)
                raise field_error(
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
        raise field_error(
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
        raise field_error("messages", "must contain at least one message.")
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
            raise field_error(
                f"messages.{i}",
                "all messages must have non-empty content except for the optional final assistant message.",
            )
        if m.role == "system":
            text = content if isinstance(content, str) else blocks_text(content, field, "system")
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
        raise field_error(
            f"messages.{len(messages) - 1}.content",
            "a final assistant message (a prefill, continued by the answer) cannot hold tool_use blocks.",
        )
    return out, prefill

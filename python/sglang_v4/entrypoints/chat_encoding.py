"""DeepSeek-V4 chat prompt encoding (no Jinja template; V4 ships a Python encoder instead).

The format (from DeepSeek-V4's published ``encoding_dsv4.py``, re-implemented here):

* the prompt starts with BOS ``<｜begin▁of▁sentence｜>``;
* a ``system`` message is its raw content (no role token);
* a ``user`` (or ``developer``) message is ``<｜User｜>`` + content;
* after a user message that is followed by an assistant turn (or ends the conversation and a
  generation prompt is wanted) comes ``<｜Assistant｜>`` and a mode token: ``<think>`` in thinking
  mode for the *last* user message (the model then writes its reasoning, ``</think>``, the
  answer), ``</think>`` otherwise (chat mode, and every earlier turn in thinking mode);
* an ``assistant`` message is its content followed by EOS ``<｜end▁of▁sentence｜>``; in thinking
  mode an assistant message *after* the last user message also carries its reasoning:
  ``reasoning_content + "</think>" + content + EOS``; reasoning of earlier turns is dropped.
* with ``reasoning_effort="max"`` in thinking mode a fixed instruction paragraph is put in front of
  the first message.

Example (thinking mode)::

    <｜begin▁of▁sentence｜>SYS<｜User｜>hello<｜Assistant｜></think>Hi!<｜end▁of▁sentence｜><｜User｜>1+1=?<｜Assistant｜><think>

Tool calling (``tools``, ``tool`` messages, assistant ``tool_calls``) is not supported yet and is
rejected with ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "BOS",
    "EOS",
    "USER",
    "ASSISTANT",
    "THINK_START",
    "THINK_END",
    "encode_messages",
    "message_text",
]

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
THINK_START = "<think>"
THINK_END = "</think>"

# Instruction the V4 encoder prepends in thinking mode with reasoning_effort="max" (format fact,
# wording as published by DeepSeek).
REASONING_EFFORT_MAX_PREFIX = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve "
    "the root cause, rigorously stress-testing your logic against all potential paths, edge cases, "
    "and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n"
)

_ROLES = ("system", "user", "developer", "assistant")


def message_text(content: Any, field: str = "content") -> str:
    """The text of an OpenAI message ``content``: a string, ``None`` (empty) or a list of parts.

    Text parts (``{"type": "text", "text": ...}``) are concatenated in order.

    Raises:
        ValueError: a non-text part (images, audio...) or a malformed value; names ``field``.
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
            if ptype != "text":
                raise ValueError(f"{field}[{i}]: content part type {ptype!r} is not supported (text only).")
            text = part.get("text")
            if not isinstance(text, str):
                raise ValueError(f"{field}[{i}].text must be a string.")
            out.append(text)
        return "".join(out)
    raise ValueError(f"{field} must be a string or a list of content parts.")


def encode_messages(
    messages: Sequence[Mapping[str, Any]],
    thinking: bool = False,
    add_generation_prompt: bool = True,
    *,
    reasoning_effort: str | None = None,
    add_bos: bool = True,
) -> str:
    """Render an OpenAI-style conversation into a DeepSeek-V4 prompt string.

    Args:
        messages: ``[{"role": "system"|"user"|"developer"|"assistant", "content": str | parts | None,
            "reasoning_content": str (assistant, optional)}, ...]``.
        thinking: thinking mode (``<think>`` opens the answer) vs chat mode (``</think>``).
        add_generation_prompt: append ``<｜Assistant｜>`` + mode token after a final user message.
        reasoning_effort: ``None``, ``"high"`` or ``"max"`` (only ``"max"`` changes the prompt, in
            thinking mode).
        add_bos: start with BOS.

    Returns:
        The prompt text (special tokens as text; tokenize with ``add_special_tokens=False``).

    Raises:
        ValueError: empty conversation, unknown role, tool messages / tool calls, non-text content,
            bad ``reasoning_effort``.
    """
    if not messages:
        raise ValueError("messages must contain at least one message.")
    if reasoning_effort not in (None, "high", "max", "low", "medium"):
        raise ValueError(f"reasoning_effort must be one of low, medium, high, max; got {reasoning_effort!r}.")
    roles: list[str] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ValueError(f"messages[{i}] must be an object.")
        role = m.get("role")
        if role == "tool" or m.get("tool_calls"):
            raise ValueError(f"messages[{i}]: tool calling is not supported yet.")
        if role not in _ROLES:
            raise ValueError(f"messages[{i}].role must be one of {', '.join(_ROLES)}; got {role!r}.")
        roles.append(role)
    last_user = max((i for i, r in enumerate(roles) if r in ("user", "developer")), default=-1)

    parts: list[str] = [BOS] if add_bos else []
    if thinking and reasoning_effort == "max":
        parts.append(REASONING_EFFORT_MAX_PREFIX)
    n = len(messages)
    for i, m in enumerate(messages):
        role = roles[i]
        text = message_text(m.get("content"), f"messages[{i}].content")
        if role == "system":
            parts.append(text)
        elif role in ("user", "developer"):
            parts.append(USER + text)
            nxt = roles[i + 1] if i + 1 < n else None
            if nxt == "assistant" or (nxt is None and add_generation_prompt):
                opens_thinking = thinking and i == last_user
                parts.append(ASSISTANT + (THINK_START if opens_thinking else THINK_END))
        else:  # assistant
            reasoning = ""
            if thinking and i > last_user:
                rc = m.get("reasoning_content")
                reasoning = (rc if isinstance(rc, str) else "") + THINK_END
            parts.append(reasoning + text + EOS)
    return "".join(parts)

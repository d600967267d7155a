"""OpenAI's ``allowed_tools`` tool choice: the model may call only a subset of the request's
``tools``, at least once (``mode: "required"``) or if it wants (``mode: "auto"``).

Served by cutting the tools to the allowed ones (in their order) and passing ``mode`` on as the
tool choice, as SGLang's router does for the Responses API: the model is shown, and its
grammar lets it call, only those tools. Two shapes, one rule:

* Responses API (:func:`allowed_tools_of`): ``{"type": "allowed_tools", "mode": ..., "tools":
  [{"type": "function" | "custom", "name": N}, ...]}`` over flat tools (``{"type", "name", ...}``);
* Chat Completions (:func:`chat_allowed_tools`): ``{"type": "allowed_tools", "allowed_tools":
  {"mode": ..., "tools": [{"type": "function", "function": {"name": N}} | {"type": "custom",
  "custom": {"name": N}}, ...]}}`` over chat tools.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sglang_v4.entrypoints.openai.serving_base import RequestError

__all__ = ["allowed_tools_of", "chat_allowed_tools"]

#: Tool types an allowed-tools reference may name (built-in tools are not served).
REF_TYPES = ("function", "custom")


def _error(message: str, param: str) -> RequestError:
    return RequestError(message, 400, param=param)


def _cut(
    mode: Any,
    refs: Any,
    tools: Sequence[Any] | None,
    name_of: Callable[[Mapping[str, Any]], Any],
    field: str,
) -> tuple[list[Any], str]:
    """``tools`` cut to those ``refs`` name (by ``(type, name)``; ``name_of`` reads the name of a
    tool or a reference of the route's shape), and ``mode``.

    Raises:
        RequestError: 400 naming ``{field}.mode`` (not ``auto`` / ``required``), ``{field}.tools``
            (not a non-empty list) or ``{field}.tools[i]`` (not a function / custom tool
            reference, or one naming no tool of that type in ``tools``).
    """
    if mode not in ("auto", "required"):
        raise _error(f'{field}.mode must be "auto" or "required"; got {mode!r}.', f"{field}.mode")
    if not isinstance(refs, list) or not refs:
        raise _error(f"{field}.tools must be a non-empty list of tools.", f"{field}.tools")
    have = {(t.get("type"), name_of(t)) for t in tools or [] if isinstance(t, Mapping)}
    wanted = set()
    for i, ref in enumerate(refs):
        at = f"{field}.tools[{i}]"
        if not isinstance(ref, Mapping) or ref.get("type") not in REF_TYPES:
            raise _error(f"{at} must name a function or custom tool.", at)
        key = (ref["type"], name_of(ref))
        if not isinstance(key[1], str) or key not in have:
            raise _error(f"{at} names the {key[0]} tool {key[1]!r}, which is not in `tools`.", at)
        wanted.add(key)
    kept = [t for t in tools or [] if isinstance(t, Mapping) and (t.get("type"), name_of(t)) in wanted]
    return kept, mode


def allowed_tools_of(choice: Any, tools: Sequence[Any] | None) -> tuple[list[Any] | None, Any]:
    """The Responses tools a request may call and the ``tool_choice`` left: for an
    ``allowed_tools`` choice, ``tools`` (flat Responses tools) cut to the named ones and ``mode``;
    for another ``choice``, ``tools`` (``None`` when empty) and ``choice`` unchanged.

    Raises:
        RequestError: 400 naming ``tool_choice.mode`` / ``tool_choice.tools`` /
            ``tool_choice.tools[i]`` (:func:`_cut`).
    """
    if not isinstance(choice, Mapping) or choice.get("type") != "allowed_tools":
        return (list(tools) if tools else None), choice
    return _cut(choice.get("mode"), choice.get("tools"), tools, lambda t: t.get("name"), "tool_choice")


def _chat_name(tool: Mapping[str, Any]) -> Any:
    """The name of a chat tool or reference (``{"type": T, T: {"name": N}}``)."""
    body = tool.get(tool.get("type"))
    return body.get("name") if isinstance(body, Mapping) else None


def chat_allowed_tools(choice: Any, tools: list[Any] | None) -> tuple[list[Any] | None, Any]:
    """The chat tools a request may call and the ``tool_choice`` left: for an ``allowed_tools``
    choice, ``tools`` cut to those ``allowed_tools.tools`` names and ``allowed_tools.mode``; for
    another ``choice``, ``tools`` and ``choice`` as they are (the same objects).

    Raises:
        RequestError: 400 naming ``tool_choice.allowed_tools`` (not an object) or its ``mode`` /
            ``tools`` / ``tools[i]`` (:func:`_cut`).
    """
    if not isinstance(choice, Mapping) or choice.get("type") != "allowed_tools":
        return tools, choice
    spec = choice.get("allowed_tools")
    if not isinstance(spec, Mapping):
        raise _error(
            'tool_choice.allowed_tools must be an object {"mode": ..., "tools": [...]}.',
            "tool_choice.allowed_tools",
        )
    return _cut(spec.get("mode"), spec.get("tools"), tools, _chat_name, "tool_choice.allowed_tools")

"""The Responses API's ``tools`` and ``tool_choice`` in chat-completions terms (``POST
/v1/responses`` runs on the chat path, :mod:`.serving_responses`).

``tools`` (flat function tools, ``{"type": "function", "name", "description", "parameters",
"strict"}``, and custom tools, ``{"type": "custom", "name", "description", "format"}``) become chat
tools (:func:`responses_tools`), with those of ``additional_tools`` input items (Codex's Responses
Lite requests; the item is no turn) and the tools ``namespace`` tools group (:func:`request_tools`);
``tool_choice`` ``{"type": "function" | "custom", "name"}`` becomes chat's named choice
(:func:`responses_tool_choice`).

Every error is a :class:`~.request_errors.RequestError` (400) whose message and ``param`` name the
field as the client sent it, OpenAI's way (``tools[0].name``, ``input[2].tools``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sglang_v4.entrypoints.openai.responses_custom_tools import custom_tool_function
from sglang_v4.entrypoints.openai.serving_base import RequestError

__all__ = ["TOOL_TYPES", "request_tools", "responses_tool_choice", "responses_tools", "tool_namespaces"]

#: Tool types served in ``tools`` (built-in tools are refused: :func:`responses_tools`).
TOOL_TYPES = ("function", "custom")


def _error(message: str, param: str) -> RequestError:
    return RequestError(message, 400, param=param)


def request_tools(tools: Sequence[Any] | None, items: str | Sequence[Any]) -> list[Any] | None:
    """The tools a Responses request offers: its ``tools``, then the ``tools`` of each
    ``additional_tools`` input item (``{"type": "additional_tools", "role": "developer", "tools":
    [...]}``, where Codex's Responses Lite requests declare their tools, with no top-level
    ``tools``), in order; a ``namespace`` tool (``{"type": "namespace", "name", "tools"}``)
    stands for the function and custom tools it groups. The result is checked by
    :func:`responses_tools` (its errors count the tools in this order, as ``tools[i]``).

    Returns:
        The tools, or ``None`` when there are none (``tools`` absent or empty, or only empty
        namespaces).

    Raises:
        RequestError: 400 naming ``input[i].tools``: an ``additional_tools`` item whose ``tools``
            is not a list; ``input[i].tools[j].tools`` for a namespace whose ``tools`` is not one.
    """
    return [tool for tool, _ in _tool_entries(tools, items)] or None


def tool_namespaces(tools: Sequence[Any] | None, items: str | Sequence[Any]) -> dict[str, str]:
    """Tool name -> the name of the ``namespace`` tool that groups it, for the tools of
    :func:`request_tools` that one groups (the ``namespace`` of their call items)."""
    out: dict[str, str] = {}
    for tool, namespace in _tool_entries(tools, items):
        if namespace is not None and isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
            out[tool["name"]] = namespace
    return out


def _tool_entries(tools: Sequence[Any] | None, items: str | Sequence[Any]) -> list[tuple[Any, str | None]]:
    """``(tool, name of the namespace grouping it or None)`` of :func:`request_tools`."""
    merged: list[tuple[Any, str]] = [(t, f"tools[{j}]") for j, t in enumerate(tools or [])]
    for i, item in enumerate([] if isinstance(items, str) else items):
        if isinstance(item, Mapping) and item.get("type") == "additional_tools":
            more = item.get("tools")
            if not isinstance(more, list):
                raise _error(f"input[{i}].tools must be a list of tools.", f"input[{i}].tools")
            merged += [(t, f"input[{i}].tools[{j}]") for j, t in enumerate(more)]
    out: list[tuple[Any, str | None]] = []
    for tool, field in merged:
        if isinstance(tool, Mapping) and tool.get("type") == "namespace":
            name = tool.get("name")
            if not isinstance(name, str) or not name:
                raise _error(f"{field}.name must be a non-empty string.", f"{field}.name")
            if not isinstance(tool.get("tools"), list):
                raise _error(f"{field}.tools must be a list of tools.", f"{field}.tools")
            out += [(t, name) for t in tool["tools"]]
        else:
            out.append((tool, None))
    return out


def responses_tools(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """Flat Responses function tools, and custom tools, as chat tools (``{"type": "function",
    "function": {...}}``; a custom tool as :func:`~.responses_custom_tools.custom_tool_function`
    serves it).

    Raises:
        RequestError: 400 naming the tool field: a tool of another type (built-in tools such as
            ``web_search`` or ``file_search`` are not served; the message lists
            :data:`TOOL_TYPES`), a missing name, non-object ``parameters``, a duplicate name, a
            non-string ``description``, a non-boolean ``strict``, a custom tool's bad ``format``.
    """
    out, seen = [], set()
    for i, tool in enumerate(tools):
        field = f"tools[{i}]"
        if not isinstance(tool, Mapping):
            raise _error(f"{field} must be an object.", field)
        if tool.get("type") not in TOOL_TYPES:
            raise _error(
                f"{field}.type {tool.get('type')!r} is not supported; supported tool types: "
                f"{', '.join(TOOL_TYPES)}.",
                f"{field}.type",
            )
        name = tool.get("name")
        if not isinstance(name, str) or not name or any(c in name for c in '"<>\n'):
            raise _error(f"{field}.name must be a non-empty string without quotes.", f"{field}.name")
        if name in seen:
            raise _error(f"{field}.name {name!r} is defined twice.", f"{field}.name")
        seen.add(name)
        if tool["type"] == "custom":
            out.append(custom_tool_function(tool, field))
            continue
        params = tool.get("parameters")
        if params is not None and not isinstance(params, Mapping):
            raise _error(f"{field}.parameters must be a JSON schema object.", f"{field}.parameters")
        for key, kind, what in (("description", str, "a string"), ("strict", bool, "a boolean")):
            if tool.get(key) is not None and not isinstance(tool[key], kind):
                raise _error(f"{field}.{key} must be {what}; got {tool[key]!r}.", f"{field}.{key}")
        fn: dict[str, Any] = {"name": name}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                fn[key] = tool[key]
        out.append({"type": "function", "function": fn})
    return out


def responses_tool_choice(choice: Any) -> Any:
    """A Responses ``tool_choice`` in chat terms: ``"none"`` / ``"auto"`` / ``"required"`` as
    they are, ``{"type": "function", "name": N}`` (or a custom tool's ``{"type": "custom",
    "name": N}``) as ``{"type": "function", "function": {"name": N}}`` (the chat shape is accepted
    too); ``None`` stays ``None`` (the default).

    Raises:
        RequestError: 400 (param ``tool_choice.name``) for a function or custom choice without a
            non-empty name; (param ``tool_choice``) for another value (built-in tool types;
            ``allowed_tools`` is read first, by :func:`~.allowed_tools.allowed_tools_of`).
    """
    if choice is None or choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") in ("function", "custom"):
        name = choice.get("name")
        if name is None and isinstance(choice.get("function"), Mapping):
            name = choice["function"].get("name")
        if isinstance(name, str) and name:
            return {"type": "function", "function": {"name": name}}
        raise _error(
            "Missing required parameter: 'tool_choice.name' (a non-empty string naming one of `tools`).",
            "tool_choice.name",
        )
    raise _error(
        'tool_choice must be "none", "auto", "required", {"type": "function", "name": ...} or '
        '{"type": "custom", "name": ...}.',
        "tool_choice",
    )

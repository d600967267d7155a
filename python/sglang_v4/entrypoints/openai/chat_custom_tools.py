"""OpenAI's custom tools on ``/v1/chat/completions``: tools whose call carries one free-form
string ``input`` instead of JSON arguments (the ``openai`` client's
``ChatCompletionCustomToolParam``).

The chat shapes (``openai.types.chat``) nest the tool's fields under ``custom``:

- a tool ``{"type": "custom", "custom": {"name", "description", "format"}}``, ``format`` being
  ``{"type": "text"}`` or ``{"type": "grammar", "grammar": {"syntax": "lark" | "regex",
  "definition"}}``;
- ``tool_choice`` ``{"type": "custom", "custom": {"name"}}``;
- an assistant message's call ``{"type": "custom", "id", "custom": {"name", "input"}}``.

They are served as the Responses route serves its custom tools (:mod:`.responses_custom_tools`):
:func:`lower_custom_tools` rewrites the request in place before it is planned, each custom tool
becoming a function tool of one required string parameter ``input`` whose value a grammar
``format`` constrains (``tool_call_structural_tag``'s ``string_value_formats``), a named custom
``tool_choice`` the named function, and each custom call of the history the function call of
that parameter. The answer's calls of those tools come back as
``{"type": "custom", "id", "custom": {"name", "input"}}`` (non-streamed and streamed alike; a
streamed call's first delta carries ``id``, ``type`` and ``custom.name``, its later ones the
next ``custom.input`` text).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglang_v4.entrypoints.openai.request_errors import RequestError
from sglang_v4.entrypoints.openai.responses_custom_tools import (
    CUSTOM_INPUT,
    custom_call_arguments,
    custom_tool_function,
    input_value_format,
)

__all__ = ["lower_custom_tools"]


def _error(message: str, param: str) -> RequestError:
    return RequestError(message, 400, param=param)


def _flat_format(fmt: Any, field: str) -> Any:
    """A chat custom tool's ``format`` in the Responses shape (``{"type": "grammar", "syntax",
    "definition"}``) that :func:`~.responses_custom_tools.input_value_format` reads."""
    if not isinstance(fmt, Mapping) or fmt.get("type") != "grammar":
        return fmt
    grammar = fmt.get("grammar")
    if not isinstance(grammar, Mapping):
        raise _error(
            f"{field}.format.grammar must be an object {{'syntax', 'definition'}}.", f"{field}.format.grammar"
        )
    return {"type": "grammar", "syntax": grammar.get("syntax"), "definition": grammar.get("definition")}


def _with_chat_param(e: RequestError, field: str) -> RequestError:
    """``e`` (an error of the Responses shape's ``format.syntax`` / ``format.definition``) naming
    the chat shape's ``format.grammar.*`` field instead."""
    for key in ("syntax", "definition"):
        flat = f"{field}.format.{key}"
        if e.param == flat:
            nested = f"{field}.format.grammar.{key}"
            return RequestError(e.message.replace(flat, nested), e.status, param=nested)
    return e


def _custom_tool(tool: Mapping[str, Any], i: int) -> tuple[str, dict[str, Any], Any]:
    """``(name, function tool, input format)`` of the chat custom tool ``tools[i]``."""
    field = f"tools[{i}].custom"
    spec = tool.get("custom")
    if not isinstance(spec, Mapping):
        raise _error(f"{field} must be an object {{'name', 'description', 'format'}}.", field)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise _error(f"{field}.name must be a non-empty string.", f"{field}.name")
    flat = dict(spec, format=_flat_format(spec.get("format"), field))
    try:
        fn = custom_tool_function(flat, field)
        fmt = input_value_format(flat.get("format"), field)
    except RequestError as e:
        raise _with_chat_param(e, field) from None
    return name, fn, fmt


def _lower_call(call: Any, field: str) -> Any:
    """A history call ``{"type": "custom", "id", "custom": {"name", "input"}}`` as the function
    call of the tool's ``input`` parameter; other calls as they are."""
    if not isinstance(call, Mapping) or call.get("type") != "custom":
        return call
    spec = call.get("custom")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        raise _error(f"{field}.custom must be an object {{'name', 'input'}}.", f"{field}.custom")
    text = spec.get("input")
    if not isinstance(text, str):
        raise _error(f"{field}.custom.input must be a string; got {text!r}.", f"{field}.custom.input")
    out = {k: v for k, v in call.items() if k != "custom"}
    out.update(type="function", function={"name": spec["name"], "arguments": custom_call_arguments(text)})
    return out


def lower_custom_tools(req: Any) -> frozenset[str]:
    """Rewrite the custom tools of a :class:`~.protocol_chat.ChatCompletionRequest` ``req`` as
    function tools (module docstring): ``req.tools``, ``req.tool_choice``, the assistant
    messages' ``tool_calls`` and ``req._string_value_formats`` (the grammars of their inputs).

    Returns:
        The names of the request's custom tools (empty: nothing was changed).

    Raises:
        RequestError: 400 naming the field: a custom tool without an object ``custom`` or a name,
            a bad ``format`` (``tools[i].custom.format...``: an unknown type or syntax, an empty
            definition, one that does not compile), a custom ``tool_choice`` naming no custom
            tool, a custom call in ``messages`` without a string ``custom.name`` / ``custom.input``.
    """
    tools = req.tools
    custom: dict[str, Any] = {}
    if isinstance(tools, list) and any(isinstance(t, Mapping) and t.get("type") == "custom" for t in tools):
        lowered = []
        for i, tool in enumerate(tools):
            if isinstance(tool, Mapping) and tool.get("type") == "custom":
                name, fn, fmt = _custom_tool(tool, i)
                if name in custom:
                    raise _error(
                        f"tools[{i}].custom.name {name!r} is defined twice.", f"tools[{i}].custom.name"
                    )
                custom[name] = fmt
                lowered.append(fn)
            else:
                lowered.append(tool)
        req.tools = lowered
        req._string_value_formats = {
            **req._string_value_formats,
            **{name: (CUSTOM_INPUT, fmt) for name, fmt in custom.items() if fmt is not None},
        }
    tc = req.tool_choice
    if isinstance(tc, Mapping) and tc.get("type") == "custom":
        spec = tc.get("custom")
        name = spec.get("name") if isinstance(spec, Mapping) else None
        if name not in custom:
            raise _error(
                f"tool_choice names the custom tool {name!r}, which is not a custom tool of `tools`.",
                "tool_choice",
            )
        req.tool_choice = {"type": "function", "function": {"name": name}}
    for i, m in enumerate(req.messages):
        if m.tool_calls:
            m.tool_calls = [
                _lower_call(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(m.tool_calls)
            ]
    return frozenset(custom)

"""The tool sections of the DeepSeek-V4 chat prompt: the OpenAI ``tools`` checked and rendered as
the "## Tools" system section, and an assistant message's OpenAI ``tool_calls`` rendered as its
DSML block (formats as :mod:`sglang_v4.entrypoints.chat_encoding`'s docstring states them, checked
against DeepSeek's reference encoder by ``test/test_openai_chat_encoding.py``).

Both render as :data:`Segment` lists, so the request's own text in them (schemas, tool-call names,
parameter keys and values) stays plain text when the prompt is tokenized
(:class:`~sglang_v4.entrypoints.chat_encoding.RenderedPrompt`). The message -> prompt encoder that
places these sections is :func:`~sglang_v4.entrypoints.chat_encoding.render_messages`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sglang_v4.entrypoints.strict_json import loads_strict

__all__ = [
    "THINK_START",
    "THINK_END",
    "DSML",
    "TOOL_CALLS_START",
    "TOOL_CALLS_END",
    "MAX_TOOL_PARAMETERS_NESTING",
    "Segment",
    "encode_tool_calls",
    "json_nesting_depth",
    "prompt_function",
    "render_tools",
    "tool_call_segments",
    "tools_segments",
    "validate_tools",
]

#: The mode tokens (``<think>`` opens the reasoning, ``</think>`` closes it or, in chat mode,
#: stands for none), named by the tools section; and ``｜DSML｜``, one token of the V4 tokenizer
#: that every tool-call tag carries.
THINK_START = "<think>"
THINK_END = "</think>"
DSML = "｜DSML｜"
TOOL_CALLS_START = f"<{DSML}tool_calls>"
TOOL_CALLS_END = f"</{DSML}tool_calls>"

# The "## Tools" system section the model was trained with (format fact, wording as published by
# DeepSeek; ``{schemas}`` is one JSON object per line).
_TOOLS_SECTION = (
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by "
    f'writing a "{TOOL_CALLS_START}" block like the following:\n\n'
    f"{TOOL_CALLS_START}\n"
    f'<{DSML}invoke name="$TOOL_NAME">\n'
    f'<{DSML}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{DSML}parameter>\n'
    "...\n"
    f"</{DSML}invoke>\n"
    f'<{DSML}invoke name="$TOOL_NAME2">\n'
    "...\n"
    f"</{DSML}invoke>\n"
    f"{TOOL_CALLS_END}\n\n"
    'String parameters should be specified as is and set `string="true"`. For all other types '
    '(numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.\n\n'
    f"If thinking_mode is enabled (triggered by {THINK_START}), you MUST output your complete "
    f"reasoning inside {THINK_START}...{THINK_END} BEFORE any tool calls or final response.\n\n"
    f"Otherwise, output directly after {THINK_END} with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n"
    "{schemas}\n\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"
)

#: A piece of a prompt being rendered: ``(text, is the request's own text)``. The request's text
#: is tokenized as plain text (:class:`~sglang_v4.entrypoints.chat_encoding.RenderedPrompt`), the
#: rest as template markup.
Segment = tuple[str, bool]


#: Deepest JSON nesting (objects / arrays, the ``parameters`` object itself is level 1) a tool's
#: ``parameters`` may have. The tool-call grammar is xgrammar's structural tag, a pydantic model
#: that holds each schema about 10 levels down and whose serializer refuses values nested 255
#: levels deep ("Maximum serialization depth exceeded"); 240 keeps every tool within it.
MAX_TOOL_PARAMETERS_NESTING = 240


def json_nesting_depth(value: Any) -> int:
    """Nesting depth of a decoded JSON value: 0 for a scalar, 1 for a flat object / array, and one
    more per level of containers inside. Iterative: no Python recursion, whatever the depth."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((c, depth + 1) for c in children)
    return deepest


#: JSON schema's type names other than ``object`` (a name outside these is the grammar's to reject)
_NON_OBJECT_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "null"})


def _names_only_non_object_types(schema_type: Any) -> bool:
    """Whether a JSON schema ``type`` keyword (a name or a list of names) names only JSON types
    that are not ``object``: a schema no object satisfies."""
    names = [schema_type] if isinstance(schema_type, str) else schema_type
    return isinstance(names, list) and bool(names) and all(n in _NON_OBJECT_TYPES for n in names)


#: The characters a DSML tag's ``name="..."`` cannot carry: the closing quote and a line break
#: (DeepSeek's encoder writes names raw; its parser reads a name up to the next quote).
_UNCARRIED = '"\n'


def validate_tools(tools: Sequence[Any], field: str = "tools") -> list[dict[str, Any]]:
    """Check OpenAI ``tools`` (``[{"type": "function", "function": {"name", ...}}]``).

    Returns:
        The ``function`` objects, in order (as given: they are rendered verbatim).

    Raises:
        ValueError: naming the bad entry (``tools[i].function.name`` ...): a non-function tool, a
            missing, empty or non-string name or one holding a ``"`` or a line break (the DSML
            format cannot carry them; a parameter name likewise), non-object ``parameters`` or ``parameters`` whose top-level
            ``type`` does not admit an object (OpenAI's "Invalid schema for function" text), a
            duplicate name, a non-string
            ``description``, a non-boolean ``strict`` (``"false"`` would read as strict),
            ``parameters`` nested deeper than :data:`MAX_TOOL_PARAMETERS_NESTING`.
    """
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)):
        raise ValueError(f"{field} must be a list of tool objects.")
    functions: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise ValueError(f"{field}[{i}] must be an object.")
        if tool.get("type", "function") != "function":
            raise ValueError(f"{field}[{i}].type must be 'function'; got {tool.get('type')!r}.")
        fn = tool.get("function")
        if not isinstance(fn, Mapping):
            raise ValueError(f"{field}[{i}].function must be an object.")
        name = fn.get("name")
        if not isinstance(name, str) or not name or any(c in name for c in _UNCARRIED):
            raise ValueError(
                f"{field}[{i}].function.name must be a non-empty string without '\"' or a line break "
                "(the DSML tool-call format cannot carry them)."
            )
        if name in seen:
            raise ValueError(f"{field}[{i}].function.name {name!r} is defined twice.")
        seen.add(name)
        params = fn.get("parameters")
        if params is not None and not isinstance(params, Mapping):
            raise ValueError(f"{field}[{i}].function.parameters must be a JSON schema object.")
        top_type = params.get("type") if params is not None else None
        if _names_only_non_object_types(top_type):
            # OpenAI's own check and text; a DSML call's arguments are always named parameters
            raise ValueError(
                f"Invalid schema for function '{name}': schema must be a JSON Schema of "
                f"'type: \"object\"', got 'type: {json.dumps(top_type)}' "
                f"({field}[{i}].function.parameters)."
            )
        props = params.get("properties") if params is not None else None
        for key in props if isinstance(props, Mapping) else ():
            if any(c in str(key) for c in _UNCARRIED):
                raise ValueError(
                    f"{field}[{i}].function.parameters.properties: parameter {key!r} of tool "
                    f"{name!r} has a '\"' or a line break in its name, which the DSML tool-call "
                    'format cannot carry (a call\'s parameter tag is name="...").'
                )
        if params is not None and json_nesting_depth(params) > MAX_TOOL_PARAMETERS_NESTING:
            raise ValueError(
                f"{field}[{i}].function.parameters nests JSON objects / arrays more than "
                f"{MAX_TOOL_PARAMETERS_NESTING} levels deep (at most {MAX_TOOL_PARAMETERS_NESTING} "
                "are supported)."
            )
        for key, kind, what in (("description", str, "a string"), ("strict", bool, "a boolean")):
            if fn.get(key) is not None and not isinstance(fn[key], kind):
                raise ValueError(f"{field}[{i}].function.{key} must be {what}; got {fn[key]!r}.")
        functions.append(dict(fn))
    return functions


def render_tools(functions: Sequence[Mapping[str, Any]]) -> str:
    """The "## Tools" system-prompt section for these function definitions, in the text of
    DeepSeek's reference encoder (``encoding_dsv4.py``): one ``json.dumps(fn, ensure_ascii=False)``
    line per function (:func:`prompt_function`: as sent, less ``null`` fields), between the fixed
    head and tail.
    ``functions`` as :func:`validate_tools` returns them (not checked again); raises nothing."""
    return "".join(text for text, _ in tools_segments(functions))


def prompt_function(fn: Mapping[str, Any]) -> dict[str, Any]:
    """The function object a "## Tools" line shows the model: the object as the client sent it
    (its keys, their order and values, as DeepSeek's reference encoder writes it,
    sgl-project/sglang#33568), less the keys whose value is ``null``. OpenAI reads a ``null``
    optional field as an absent one, and clients that serialize every field of their own models
    send ``"description": null`` / ``"parameters": null`` / ``"strict": null`` for fields they
    never set (ai-dynamo/dynamo#10510, farion1231/cc-switch#5324): the model is shown the same
    line as for the request without them. ``fn`` as :func:`validate_tools` returns it; raises
    nothing."""
    return {k: v for k, v in fn.items() if v is not None}


def tools_segments(functions: Sequence[Mapping[str, Any]]) -> list[Segment]:
    """:func:`render_tools` as :data:`Segment` ``(text, is_request_text)`` pieces: the fixed head
    and tail ``False``, the function lines ``True`` (the client's text, tokenized as plain text)."""
    head, _, tail = _TOOLS_SECTION.partition("{schemas}")
    lines = "\n".join(_to_json(prompt_function(fn)) for fn in functions)
    return [(head, False), (lines, True), (tail, False)]


def _to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _call_arguments(call: Mapping[str, Any], field: str) -> tuple[str, dict[str, Any]]:
    """``(name, parameters)`` of one OpenAI tool call.

    ``function.arguments`` is a JSON object text (OpenAI) or an object. Any other text -- one that
    is not JSON (read strictly, :func:`~sglang_v4.entrypoints.strict_json.loads_strict`: no
    ``NaN`` / ``Infinity``, no lone surrogate escape), is JSON but not an object, is empty, or is
    nested deeper than Python decodes (a
    call cut by ``max_tokens`` as this server returns it) -- is one string parameter named
    ``arguments`` holding the text as sent, as DeepSeek's V4 converter (``deepseek-recipe``) renders
    it, so that a client echoing a cut call keeps the conversation going.

    Raises:
        ValueError: no ``function`` object, no name, or ``arguments`` neither a string nor an
            object (names ``field``).
    """
    fn = call.get("function")
    if not isinstance(fn, Mapping):
        raise ValueError(f"{field}.function must be an object.")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{field}.function.name must be a non-empty string.")
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            parsed = loads_strict(args)
        except (ValueError, RecursionError):
            parsed = None
        if not isinstance(parsed, dict):
            return name, {"arguments": args}
        args = parsed
    if not isinstance(args, Mapping):
        raise ValueError(f"{field}.function.arguments must be a JSON object or a string.")
    return name, dict(args)


def encode_tool_calls(tool_calls: Sequence[Mapping[str, Any]], field: str = "tool_calls") -> str:
    """The DSML block of an assistant message's OpenAI ``tool_calls`` (with its leading ``"\\n\\n"``).

    ``function.arguments`` may be a JSON string (OpenAI) or an object (:func:`_call_arguments`).
    String values become ``string="true"`` parameters (raw text), all others ``string="false"``
    (JSON text). A call without parameters is ``<invoke ...>\n</invoke>``, as DeepSeek's V4
    encoder writes it.

    Raises:
        ValueError: a call that is not an object, has no ``function`` object or name, or
            ``arguments`` neither a string nor an object (names ``field[j]``).
    """
    return "".join(text for text, _ in tool_call_segments(tool_calls, field))


def tool_call_segments(tool_calls: Sequence[Mapping[str, Any]], field: str) -> list[Segment]:
    """:func:`encode_tool_calls` as :data:`Segment` ``(text, is_request_text)`` pieces: the DSML
    tags ``False``; names, keys and values ``True`` (the client's text).

    Raises:
        ValueError: a call that is not an object, has no ``function`` object or name, or
            ``arguments`` neither a string nor an object (names ``field[j]``).
    """
    segs: list[Segment] = [("\n\n" + TOOL_CALLS_START + "\n", False)]
    for j, call in enumerate(tool_calls):
        if not isinstance(call, Mapping):
            raise ValueError(f"{field}[{j}] must be an object.")
        name, args = _call_arguments(call, f"{field}[{j}]")
        if j:
            segs.append(("\n", False))
        segs += [(f'<{DSML}invoke name="', False), (name, True), ('">\n', False)]
        for key, v in args.items():
            is_str = isinstance(v, str)
            segs += [
                (f'<{DSML}parameter name="', False),
                (key, True),
                (f'" string="{"true" if is_str else "false"}">', False),
                (v if is_str else _to_json(v), True),
                (f"</{DSML}parameter>\n", False),
            ]
        segs.append((f"</{DSML}invoke>", False))
    segs.append(("\n" + TOOL_CALLS_END, False))
    return segs

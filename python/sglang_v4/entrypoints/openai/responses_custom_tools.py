"""OpenAI's custom tools on ``/v1/responses``: tools whose call carries one free-form string
``input`` instead of JSON arguments (the ``openai`` client's ``CustomTool``; Codex's freeform
tools such as ``apply_patch``).

A custom tool ``{"type": "custom", "name", "description", "format"}`` is served as a function
tool of one string parameter, :data:`CUSTOM_INPUT` (:func:`custom_tool_function`): the model
writes its call as a DSML invoke with that one ``string="true"`` parameter, whose raw text is
the call's ``input``. ``format`` is ``{"type": "text"}`` (or absent: any text) or ``{"type":
"grammar", "syntax": "regex" | "lark", "definition"}``; a grammar is stated in the parameter's
description (the model reads it in the prompt's tool list) and constrains the decoding of the
value (:func:`input_value_format`: xgrammar's regex, or its Lark reader turned into EBNF; the
tool is then ``strict``, so its calls are constrained under ``tool_choice: "auto"`` too).

Such a call comes back as a ``custom_tool_call`` output item ``{"type": "custom_tool_call",
"id", "call_id", "name", "input"}`` (:func:`custom_call_input`), streamed as
``response.custom_tool_call_input.delta`` / ``.done`` events (:class:`CustomInputStream`). In
``input``, a ``custom_tool_call`` item is that call again (arguments :func:`custom_call_arguments`)
and a ``custom_tool_call_output`` item its tool result, as for function calls
(:mod:`.responses_input`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sglang_v4.entrypoints.openai.request_errors import RequestError

__all__ = [
    "CUSTOM_INPUT",
    "CustomInputStream",
    "custom_call_arguments",
    "custom_call_input",
    "custom_tool_formats",
    "custom_tool_function",
    "input_value_format",
]

#: The one string parameter a custom tool is served with (its value is the call's ``input``).
CUSTOM_INPUT = "input"
#: OpenAI's grammar syntaxes of a custom tool's ``format``.
GRAMMAR_SYNTAXES = ("lark", "regex")


def _error(message: str, param: str) -> RequestError:
    return RequestError(message, 400, param=param)


def input_value_format(fmt: Any, field: str) -> dict[str, Any] | None:
    """The xgrammar structural-tag format of a custom tool's input text, from its ``format``.

    Args:
        fmt: the tool's ``format`` (``None``, ``{"type": "text"}`` or ``{"type": "grammar",
            "syntax", "definition"}``).
        field: the tool's field as the client sent it (``tools[1]``), for errors.

    Returns:
        ``None`` for free text; ``{"type": "regex", "pattern": definition}`` for a regex;
        ``{"type": "grammar", "grammar": EBNF}`` for a Lark grammar (xgrammar's
        ``Grammar.from_lark`` read of it).

    Raises:
        RequestError: 400 naming ``{field}.format...``: an unknown ``type`` or ``syntax``, a
            non-string or empty ``definition``, or a definition xgrammar does not compile.
    """
    if fmt is None:
        return None
    if not isinstance(fmt, Mapping):
        raise _error(f"{field}.format must be an object.", f"{field}.format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind != "grammar":
        raise _error(
            f"{field}.format.type must be 'text' or 'grammar'; got {kind!r}.", f"{field}.format.type"
        )
    syntax, definition = fmt.get("syntax"), fmt.get("definition")
    if syntax not in GRAMMAR_SYNTAXES:
        raise _error(
            f"{field}.format.syntax must be one of {', '.join(GRAMMAR_SYNTAXES)}; got {syntax!r}.",
            f"{field}.format.syntax",
        )
    if not isinstance(definition, str) or not definition:
        raise _error(f"{field}.format.definition must be a non-empty string.", f"{field}.format.definition")
    import xgrammar as xgr

    from sglang_v4.sampling.structural_tag import clean_grammar_error

    try:
        if syntax == "regex":
            xgr.Grammar.from_regex(definition)
            return {"type": "regex", "pattern": definition}
        return {"type": "grammar", "grammar": str(xgr.Grammar.from_lark(definition))}
    except (RuntimeError, ValueError, TypeError) as e:
        raise _error(
            f"{field}.format.definition is not a valid {syntax} grammar: {clean_grammar_error(e)}",
            f"{field}.format.definition",
        ) from None


def custom_tool_function(tool: Mapping[str, Any], field: str) -> dict[str, Any]:
    """The chat function tool a custom tool is served as (module docstring).

    Returns:
        ``{"type": "function", "function": {"name", "description", "parameters", "strict"}}``:
        one required string parameter :data:`CUSTOM_INPUT`, whose description says the input is
        free-form text (and gives the grammar, when there is one); ``strict`` when the input has a
        grammar.

    Raises:
        RequestError: 400 naming the field: a non-string ``description``, a bad ``format``
            (:func:`input_value_format`). The name is checked by the caller.
    """
    desc = tool.get("description")
    if desc is not None and not isinstance(desc, str):
        raise _error(f"{field}.description must be a string; got {desc!r}.", f"{field}.description")
    fmt = tool.get("format")
    grammar = input_value_format(fmt, field)
    what = "The tool's whole input, as free-form text (not JSON)."
    if grammar is not None:
        what = (
            "The tool's whole input, as free-form text (not JSON) that matches this "
            f"{fmt['syntax']} grammar:\n{fmt['definition']}"
        )
    fn: dict[str, Any] = {"name": tool.get("name")}
    if desc:
        fn["description"] = desc
    fn["parameters"] = {
        "type": "object",
        "properties": {CUSTOM_INPUT: {"type": "string", "description": what}},
        "required": [CUSTOM_INPUT],
        "additionalProperties": False,
    }
    if grammar is not None:
        fn["strict"] = True
    return {"type": "function", "function": fn}


def custom_tool_formats(tools: Sequence[Any] | None) -> dict[str, dict[str, Any] | None]:
    """Name -> input format (:func:`input_value_format`) of each custom tool of a Responses
    ``tools`` list already checked by :func:`~.responses_tools.responses_tools`."""
    out: dict[str, dict[str, Any] | None] = {}
    for i, tool in enumerate(tools or []):
        if isinstance(tool, Mapping) and tool.get("type") == "custom":
            out[tool["name"]] = input_value_format(tool.get("format"), f"tools[{i}]")
    return out


def custom_call_input(arguments: str) -> str:
    """The ``input`` of a custom tool's call from its parsed arguments text: the string value of
    :data:`CUSTOM_INPUT`; a call written otherwise (other parameters, a non-string value, a call
    cut before the value) has its arguments text as its input, as written. A call cut inside the
    value (by the token limit) has the input written so far, as its streamed deltas gave it (an
    unfinished escape sequence at the end left out)."""
    from sglang_v4.entrypoints.openai.tool_calls import partial_json_object

    value = partial_json_object(arguments)
    if isinstance(value, dict) and CUSTOM_INPUT not in value:
        value = _cut_input_object(arguments) or value
    if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str) and len(value) == 1:
        return value[CUSTOM_INPUT]
    if value == {}:
        return ""
    return arguments


def _cut_input_object(arguments: str) -> dict[str, Any] | None:
    """The object of the beginning of a JSON object text ``arguments`` with its unfinished
    trailing string kept as written so far (jiter's ``trailing-strings`` mode, which
    :class:`CustomInputStream` streams from); an unfinished escape sequence at the end (up to the
    six characters of ``\\uXXXX``) is dropped. ``None`` when no such reading exists."""
    import jiter

    text = arguments.strip()
    for drop in range(min(len(text), 6) + 1):
        try:
            value = jiter.from_json(text[: len(text) - drop].encode("utf-8"), partial_mode="trailing-strings")
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


def custom_call_arguments(text: str) -> str:
    """The chat arguments (JSON object text) of a custom tool's call whose input is ``text``:
    the inverse of :func:`custom_call_input`."""
    return json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)


class CustomInputStream:
    """The ``input`` text of a streamed custom tool call, from its argument deltas (JSON text
    fragments of ``{"input": "..."}``): :meth:`feed` gives the input text that follows what it
    gave before (an unfinished escape sequence at the end is held back), :meth:`finish` the rest
    of the whole input (:func:`custom_call_input`) at the call's end."""

    def __init__(self) -> None:
        self.arguments = ""
        self.sent = ""

    def feed(self, fragment: str) -> str:
        """The input text that the arguments fragment ``fragment`` adds (may be ``""``)."""
        import jiter

        self.arguments += fragment
        try:
            value = jiter.from_json(self.arguments.encode("utf-8"), partial_mode="trailing-strings")
        except ValueError:
            return ""
        text = value.get(CUSTOM_INPUT) if isinstance(value, dict) else None
        if not isinstance(text, str) or not text.startswith(self.sent) or len(value) != 1:
            return ""
        delta, self.sent = text[len(self.sent) :], text
        return delta

    def finish(self) -> tuple[str, str]:
        """``(the rest of the input not yet given, the whole input)`` at the call's end."""
        whole = custom_call_input(self.arguments)
        rest = whole[len(self.sent) :] if whole.startswith(self.sent) else ""
        self.sent = whole
        return rest, whole

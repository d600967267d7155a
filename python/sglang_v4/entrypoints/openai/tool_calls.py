"""Tool-call data shared by the DSML parser (:mod:`.tool_parser`) and the serving routes: the
``--tool-call-parser`` names, call ids, parsed calls and their streamed deltas (OpenAI's shapes).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sglang_v4.entrypoints.strict_json import holds_non_json, is_json_object_prefix, loads_strict

__all__ = [
    "TOOL_CALL_PARSERS",
    "TOOL_CALL_PARSER_NAMES",
    "ParsedToolCall",
    "ToolCallDelta",
    "canonical_tool_call_parser",
    "make_tool_call_id",
    "partial_json_object",
]

#: ``--tool-call-parser`` names (SGLang's spelling) -> DSML block name: DeepSeek-V4 writes
#: ``<｜DSML｜tool_calls>`` (V3.2 used the same grammar inside ``function_calls``).
TOOL_CALL_PARSERS: dict[str, str] = {"deepseekv4": "tool_calls"}
#: Other spellings; SGLang's ``auto`` picks the parser of the model's architecture, which is
#: DeepSeek-V4's for every model sglang-v4 serves.
_ALIASES = {"deepseek_v4": "deepseekv4", "deepseek-v4": "deepseekv4", "auto": "deepseekv4"}
#: Every name :func:`canonical_tool_call_parser` accepts (the parsers and their other spellings).
TOOL_CALL_PARSER_NAMES = (*TOOL_CALL_PARSERS, *_ALIASES)
#: SGLang's parsers of other DeepSeek releases' tool-call formats (copied from their cookbooks):
#: refused, since a DeepSeek-V4 model's calls would never match them (tool calls would silently
#: stay in the content).
OTHER_DEEPSEEK_TOOL_PARSERS = {
    "deepseekv3": "DeepSeek-V3's <｜tool▁calls▁begin｜> blocks",
    "deepseekv31": "DeepSeek-V3.1's <｜tool▁calls▁begin｜> blocks",
    "deepseekv32": "DeepSeek-V3.2's <｜DSML｜function_calls> blocks",
    "deepseekv41": "DeepSeek-V4.1's DSML blocks",
}


def canonical_tool_call_parser(name: str) -> str:
    """The SGLang spelling of a ``--tool-call-parser`` name (aliases such as vLLM's ``deepseek_v4``).

    Raises:
        ValueError: an unknown parser name (lists the choices), or one of SGLang's parsers of
            another DeepSeek release's format (:data:`OTHER_DEEPSEEK_TOOL_PARSERS`, says what to use).
    """
    key = _ALIASES.get(name, name)
    if key in OTHER_DEEPSEEK_TOOL_PARSERS:
        raise ValueError(
            f"tool_call_parser {name!r} parses {OTHER_DEEPSEEK_TOOL_PARSERS[key]}; sglang-v4 serves "
            "DeepSeek-V4 models, whose tool calls are <｜DSML｜tool_calls> blocks: use "
            "--tool-call-parser deepseekv4 (the default) or auto"
        )
    if key not in TOOL_CALL_PARSERS:
        raise ValueError(f"tool_call_parser must be one of {sorted(TOOL_CALL_PARSERS)} (got {name!r})")
    return key


def make_tool_call_id() -> str:
    """A fresh OpenAI-style call id, ``call_`` + 24 hex digits."""
    return f"call_{uuid.uuid4().hex[:24]}"


def partial_json_object(text: str) -> dict[str, Any] | None:
    """The arguments object of a call's ``arguments`` text (:attr:`ParsedToolCall.arguments`).

    A whole JSON object text gives that object; the beginning of one (a call cut by the token
    limit) gives what parses so far, an unfinished trailing value left out (jiter's
    ``partial_mode``, as the ``openai`` and ``anthropic`` clients read cut argument streams);
    an empty or blank text gives ``{}``. Only a genuine beginning counts
    (:func:`~sglang_v4.entrypoints.strict_json.is_json_object_prefix`): jiter's partial mode also reads text that no
    continuation makes valid (``{"a": "x" "b"`` as ``{"a": "x"}``), which would drop what
    follows the error without a word. JSON is read strictly (:func:`~sglang_v4.entrypoints.strict_json.loads_strict`:
    no ``NaN`` / ``Infinity``, no lone surrogate escapes), as DeepSeek's converter reads it.

    Returns:
        The object, or ``None`` when ``text`` is neither a JSON object nor the beginning of one
        (another JSON value, trailing text after the object, not JSON, malformed JSON).
    """
    text = text.strip()
    if not text:
        return {}
    try:
        value, end = loads_strict(text), len(text)
    except (ValueError, RecursionError):  # not a whole value (the beginning of one, or not JSON),
        # or one nested deeper than Python's json decodes (jiter then refuses it too)
        import jiter  # imported here: only a cut call needs it

        if not is_json_object_prefix(text):
            return None
        try:
            value, end = jiter.from_json(text.encode("utf-8"), partial_mode=True), len(text)
        except ValueError:
            return None
        if holds_non_json(value):
            return None
    return value if isinstance(value, dict) and end == len(text) else None


@dataclass
class ToolCallDelta:
    """One streamed piece of a tool call (OpenAI ``delta.tool_calls[i]``).

    Attributes:
        index: position of the call in the message (0-based, across blocks).
        id: set on the first delta of a call only.
        name: ``function.name``, set on the first delta of a call only.
        arguments: the next fragment of ``function.arguments`` (may be ``""``).
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class ParsedToolCall:
    """A tool call.

    Attributes:
        index: position of the call in the message (0-based, across blocks).
        id: the call id (``call_`` + 24 hex digits).
        name: ``function.name``.
        arguments: a JSON object text (``json.loads`` gives a dict); for a ``partial`` call the
            argument text generated before the cut, a prefix of such a text.
        partial: the generation was cut inside this call (see :mod:`.tool_parser`).
    """

    index: int
    id: str
    name: str
    arguments: str
    partial: bool = False

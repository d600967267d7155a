"""SGLang's native parser routes: ``POST /separate_reasoning`` and ``POST /parse_function_call``.

They run the chat route's output parsers (:mod:`.reasoning_parser`, :mod:`.tool_parser`) on a text
the client already has, e.g. the ``text`` of a ``/generate`` answer. Shapes (SGLang's):

* ``/separate_reasoning`` ``{"text": str, "reasoning_parser": str, "return_blocks": false}`` ->
  ``{"reasoning_text": str, "text": str}``; with ``return_blocks`` also ``reasoning_blocks`` and
  ``text_blocks`` (lists of str) and ``blocks`` (``[{"type": "reasoning" | "text", "text": str}]``,
  in order). The text is read as the output of a thinking-mode prompt when it holds ``<think>`` or
  ``</think>`` (the reasoning ends at the first ``</think>``, or for ``deepseek-v4`` at a DSML
  tool-call block, which stays in ``text``; without either it is all reasoning, cut before its
  end), else as a chat-mode answer (all ``text``); ``deepseek-r1`` always starts inside
  the reasoning, as that model did.
* ``/parse_function_call`` ``{"text": str, "tools": [OpenAI tools], "tool_call_parser": str | null}``
  -> ``{"normal_text": str, "calls": [{"tool_index": int, "name": str, "parameters": str}]}``:
  ``tool_index`` is the tool's position in ``tools``, ``parameters`` the JSON arguments text.
  A malformed DSML block is dropped, and no DSML tag stays in ``normal_text``
  (:mod:`.dsml_markup`); a block cut before its end gives no call (an unfinished invoke is
  dropped). ``tool_call_parser`` null means the server's
  ``--tool-call-parser``.

Errors: a bad body, an unknown parser or bad ``tools`` is a 400 in SGLang's native shape
(``{"error": {"message": ...}}``) naming the field.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response

from sglang_v4.entrypoints.chat_encoding import DSML, THINK_END, THINK_START, validate_tools
from sglang_v4.entrypoints.native_api import error_response, json_response
from sglang_v4.entrypoints.openai.dsml_markup import scrub_dsml
from sglang_v4.entrypoints.openai.reasoning_parser import (
    canonical_reasoning_parser,
    reasoning_spec,
    split_reasoning,
)
from sglang_v4.entrypoints.openai.request_errors import loads_json_body
from sglang_v4.entrypoints.openai.serving_base import OpenAIServingBase
from sglang_v4.entrypoints.openai.tool_parser import (
    TOOL_CALL_PARSERS,
    canonical_tool_call_parser,
    parse_tool_calls,
)

__all__ = ["ParsersMixin", "separate_reasoning_body", "parse_function_call_body"]


def _object_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body.

    Raises:
        ValueError: not JSON, or not an object.
    """
    try:
        data = loads_json_body(raw) if raw else None
    except orjson.JSONDecodeError as e:
        raise ValueError(f"Malformed JSON body: {e}") from None
    if not isinstance(data, dict):
        raise ValueError("The request body must be a JSON object.")
    return data


def _text_field(body: dict[str, Any]) -> str:
    text = body.get("text")
    if not isinstance(text, str):
        raise ValueError("text must be a string.")
    return text


def separate_reasoning_body(body: dict[str, Any]) -> dict[str, Any]:
    """The ``/separate_reasoning`` answer for a decoded body (module docstring).

    Raises:
        ValueError: ``text`` not a string, ``reasoning_parser`` missing or unknown,
            ``return_blocks`` not a boolean (each message names the field).
    """
    text = _text_field(body)
    name = body.get("reasoning_parser")
    if not isinstance(name, str):
        raise ValueError("reasoning_parser must be a string naming the parser, such as 'deepseek-v4'.")
    parser = canonical_reasoning_parser(name)
    blocks_wanted = body.get("return_blocks", False)
    if not isinstance(blocks_wanted, bool):
        raise ValueError("return_blocks must be a boolean.")
    thinking = THINK_START in text or THINK_END in text
    spec = reasoning_spec(parser, thinking, f"<{DSML}{TOOL_CALL_PARSERS['deepseekv4']}>")
    if spec.separate:
        reasoning, content = split_reasoning(text, spec.implicit_end)
    else:
        reasoning, content = None, text
    out: dict[str, Any] = {"reasoning_text": reasoning or "", "text": content}
    if blocks_wanted:
        blocks = [{"type": "reasoning", "text": reasoning}] if reasoning else []
        blocks.append({"type": "text", "text": content})
        out["reasoning_blocks"] = [b["text"] for b in blocks if b["type"] == "reasoning"]
        out["text_blocks"] = [b["text"] for b in blocks if b["type"] == "text"]
        out["blocks"] = blocks
    return out


def parse_function_call_body(body: dict[str, Any], default_parser: str) -> dict[str, Any]:
    """The ``/parse_function_call`` answer for a decoded body (module docstring).

    Args:
        body: the decoded request body.
        default_parser: the server's ``--tool-call-parser`` (canonical name).

    Raises:
        ValueError: ``text`` not a string, bad ``tools`` (``tools[i]...``), an unknown
            ``tool_call_parser``.
    """
    text = _text_field(body)
    name = body.get("tool_call_parser")
    if name is not None and not isinstance(name, str):
        raise ValueError("tool_call_parser must be a string or null.")
    parser = canonical_tool_call_parser(name) if name is not None else default_parser
    functions = validate_tools(body.get("tools") or [])
    names = [fn["name"] for fn in functions]
    schemas = {fn["name"]: fn.get("parameters") for fn in functions}
    content, calls, _ = parse_tool_calls(text, schemas, TOOL_CALL_PARSERS[parser])
    return {
        "normal_text": scrub_dsml(content),
        "calls": [
            {"tool_index": names.index(c.name), "name": c.name, "parameters": c.arguments}
            for c in calls
            if not c.partial
        ],
    }


class ParsersMixin(OpenAIServingBase):
    """The ``/separate_reasoning`` and ``/parse_function_call`` routes (mixed into
    :class:`~sglang_v4.entrypoints.openai.serving.OpenAIServing`)."""

    async def separate_reasoning(self, request: Request) -> Response:
        """``POST /separate_reasoning``."""
        denied = self.check_auth(request)
        if denied is not None:
            return denied
        try:
            return json_response(separate_reasoning_body(_object_body(await request.body())))
        except ValueError as e:
            return error_response(str(e), 400)

    async def parse_function_call(self, request: Request) -> Response:
        """``POST /parse_function_call``."""
        denied = self.check_auth(request)
        if denied is not None:
            return denied
        try:
            body = _object_body(await request.body())
            return json_response(parse_function_call_body(body, self.tool_call_parser))
        except ValueError as e:
            return error_response(str(e), 400)

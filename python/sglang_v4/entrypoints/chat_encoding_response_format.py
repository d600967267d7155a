"""The "## Response Format" section of a DeepSeek-V4 prompt: what an OpenAI ``response_format``
puts into the system block, after the tools section (format fact of DeepSeek's V4 converter and
encoder, the ``deepseek-recipe`` package, which SGLang's DeepSeek-V4 chat path renders through):

* ``{"type": "json_schema", "json_schema": {"schema": S, ...}}``: ``"\\n\\n## Response Format:\\n\\n"``
  + ``"You MUST strictly adhere to the following schema to reply:\\n"`` + ``S`` as JSON text
  (``json.dumps`` with ``", "`` / ``": "`` separators, non-ASCII kept, keys in the client's order);
  the schema is the client's text (a plain span, :class:`~.chat_encoding.RenderedPrompt`);
* ``{"type": "json_object"}``: ``"\\n\\nYou are a helpful assistant designed to output JSON.\\n"``
  + ``"## Response Format:\\n\\nReply with JSON object ONLY."``;
* ``text``, ``structural_tag`` (the grammar alone enforces it, as SGLang hands it to the
  converter), a ``json_schema`` without a schema object, or none: nothing.

The section goes into the prompt whether thinking is on or off; the grammar that enforces the
format is separate (:mod:`sglang_v4.sampling.grammar`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sglang_v4.entrypoints.chat_encoding_tools import Segment

__all__ = ["JSON_OBJECT_SECTION", "JSON_SCHEMA_SECTION_HEAD", "response_format_segments"]

#: the head of a ``json_schema`` section; the schema's JSON text follows it
JSON_SCHEMA_SECTION_HEAD = (
    "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
)
#: the whole ``json_object`` section
JSON_OBJECT_SECTION = "\n\nYou are a helpful assistant designed to output JSON.\n## Response Format:\n\nReply with JSON object ONLY."


def response_format_segments(response_format: Mapping[str, Any] | None) -> list[Segment]:
    """The system-block segments ``(text, is_request_text)`` of an OpenAI ``response_format``
    (module docstring); ``[]`` when it adds no section. The caller has checked its shape."""
    if not isinstance(response_format, Mapping):
        return []
    kind = response_format.get("type")
    if kind == "json_object":
        return [(JSON_OBJECT_SECTION, False)]
    if kind != "json_schema":
        return []
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    if not isinstance(schema, Mapping):
        return []
    return [(JSON_SCHEMA_SECTION_HEAD, False), (json.dumps(schema, ensure_ascii=False), True)]

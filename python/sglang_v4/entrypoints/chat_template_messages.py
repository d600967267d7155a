"""Chat messages in the shape a ``--chat-template`` Jinja template reads them.

The OpenAI wire format and the templates models ship disagree in two places, and SGLang and vLLM
bridge both before rendering:

* **content format**. A message's ``content`` is a string or a list of content parts
  (``[{"type": "text", "text": ...}]``). A template that writes ``{{ message.content }}`` (the
  *string* format, most templates) would print a list of parts as its Python ``repr``; one that
  loops over the parts (``{% for part in message.content %}``, the *openai* format: Llama 4,
  GLM-4V...) would loop over a plain string's characters. :func:`detect_content_format` reads the
  template's Jinja syntax tree for such a loop (SGLang's and vLLM's detection), and
  :func:`messages_for_template` turns every message's content into that format: the text (and
  refusal) parts of a list joined by one space for a string-format template (SGLang's join), a
  plain string wrapped in one text part for an openai-format one (vLLM's), a refusal part read as
  a text part there. A ``null`` or absent content (an assistant turn of tool calls only) is empty
  content, ``""`` or ``[]``, never missing: templates concatenate ``message.content`` to the
  turn's opening (Qwen3's), which fails on an undefined value (vLLM's normalization).
* **tool-call arguments**. OpenAI sends an assistant message's ``tool_calls[i].function.arguments``
  as a JSON *string*; templates that rebuild the call from its parameters (Qwen3-Coder, GLM-4.5,
  ``arguments | items``) need a mapping. An argument string that decodes to a JSON object is handed
  over decoded (SGLang's and vLLM's rule); any other value is left as sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

ContentFormat = Literal["string", "openai"]


def _reads_content(node: Any) -> bool:
    """Whether the Jinja expression ``node`` is a ``content`` field of something (``m.content``,
    ``message['content']``), possibly under filters or a slice (``message.content | list``)."""
    from jinja2 import nodes

    while isinstance(node, (nodes.Filter, nodes.Test)) and node.node is not None:
        node = node.node
    if isinstance(node, nodes.Getattr):
        return node.attr == "content"
    if isinstance(node, nodes.Getitem):
        arg = node.arg
        if isinstance(arg, nodes.Const):
            return arg.value == "content"
        if isinstance(arg, nodes.Slice):  # message['content'][1:] -> the parts are still iterated
            return _reads_content(node.node)
    return False


def detect_content_format(template: str) -> ContentFormat:
    """``"openai"`` when the Jinja ``template`` loops over a message's ``content``
    (``{% for part in message['content'] %}``), else ``"string"``.

    A template Jinja cannot parse is ``"string"`` (the server checks templates at start-up, so this
    only guards the detection itself).
    """
    from jinja2 import TemplateSyntaxError, nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        tree = ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols"]).parse(template)
    except TemplateSyntaxError:
        return "string"
    for loop in tree.find_all(nodes.For):
        if _reads_content(loop.iter):
            return "openai"
    return "string"


def _part_text(part: Any) -> str | None:
    """The text of one content part: a text part's ``text``, a ``refusal`` part's refusal (vLLM
    reads it as text, as the DeepSeek-V4 encoding does); ``None`` for any other part."""
    if not isinstance(part, Mapping):
        return None
    key = "refusal" if part.get("type") == "refusal" else "text"
    value = part.get(key)
    return value if isinstance(value, str) else None


def _content_for(content: Any, content_format: ContentFormat) -> Any:
    """``content`` (a string, a list of parts or ``None``) in ``content_format``; ``None`` (an
    assistant tool-call turn's ``null`` or absent content) is empty content, ``""`` or ``[]``."""
    if content is None:
        return [] if content_format == "openai" else ""
    if content_format == "openai":
        if isinstance(content, str):
            return [{"type": "text", "text": content}]
        if isinstance(content, list):
            return [
                {"type": "text", "text": _part_text(p)}
                if isinstance(p, Mapping) and p.get("type") == "refusal" and _part_text(p) is not None
                else p
                for p in content
            ]
        return content
    if isinstance(content, list):
        return " ".join(t for t in map(_part_text, content) if t is not None)
    return content


def _decoded_arguments(call: Any) -> Any:
    """``call`` (one ``tool_calls`` entry) with a ``function.arguments`` JSON-object string
    decoded into a dict; anything else returned unchanged."""
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        return call
    args = call["function"].get("arguments")
    if not isinstance(args, str):
        return call
    try:
        value = json.loads(args)
    except ValueError:
        return call
    if not isinstance(value, dict):
        return call
    return {**call, "function": {**call["function"], "arguments": value}}


def messages_for_template(
    messages: Sequence[Mapping[str, Any]], content_format: ContentFormat
) -> list[dict[str, Any]]:
    """Copies of the chat ``messages`` (dicts as the request model dumps them) with each
    ``content`` in ``content_format`` (empty when ``null`` or absent) and each ``tool_calls[i].function.arguments`` that is a JSON
    object string decoded into a dict; the request's own dicts are not changed."""
    out: list[dict[str, Any]] = []
    for m in messages:
        msg = dict(m)
        msg["content"] = _content_for(msg.get("content"), content_format)
        if isinstance(msg.get("tool_calls"), list):
            msg["tool_calls"] = [_decoded_arguments(c) for c in msg["tool_calls"]]
        out.append(msg)
    return out

"""The DSML grammar of DeepSeek-V4 tool calls: the tag patterns and text helpers of the
streaming reader (:mod:`.tool_parser`); format of DeepSeek's ``encoding_dsv4.py``
(:mod:`sglang_v4.entrypoints.chat_encoding`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sglang_v4.entrypoints.chat_encoding import DSML

__all__ = [
    "ASCII_DSML",
    "DsmlBarNormalizer",
    "STATE_BLOCK",
    "STATE_INVOKE",
    "STATE_INVOKE_TAG",
    "STATE_JSON_ARGS",
    "STATE_PARAM_TAG",
    "STATE_RAW",
    "STATE_TEXT",
    "STATE_VALUE",
    "DSML_TAG_HEAD",
    "DSML_TAG_START",
    "STRUCTURAL_OPEN",
    "DSML_TAG_TAIL",
    "INVOKE_TAG",
    "MAX_TAG_CHARS",
    "PARAM_TAG",
    "tag_may_continue",
    "REPLACEMENT_CHAR",
    "WRAPPER_OPEN",
    "json_value",
    "partial_suffix",
    "reject_constant",
    "trailing_newlines",
    "trailing_ws",
    "unique_object",
]

#: The streaming parser's states: plain text; in a block between invokes; reading an invoke tag's
#: head; in an invoke between parameters; reading a parameter tag's head; in a parameter value; in
#: an invoke's JSON body; dropping the rest of a malformed block.
(
    STATE_TEXT,
    STATE_BLOCK,
    STATE_INVOKE_TAG,
    STATE_INVOKE,
    STATE_PARAM_TAG,
    STATE_VALUE,
    STATE_JSON_ARGS,
    STATE_RAW,
) = range(8)

#: The longest tag head (``name="..." string="..."``) waited for before a tag counts as malformed.
MAX_TAG_CHARS = 512

#: A DSML wrapper tag: ``<｜DSML｜tool_calls>``, or another name holding invokes (module docstring).
WRAPPER_OPEN = re.compile(rf"<{DSML}(\w+)>")
#: The start of any DSML tag, finished or not (in a value: held back until the value ends).
DSML_TAG_START = re.compile(rf"</?{DSML}")
#: A parameter or invoke opening tag (up to the whitespace before its attributes): in a value it
#: means the value's closing tag was left out (``DsmlToolParser._structural_tag_in``).
STRUCTURAL_OPEN = re.compile(rf"<{DSML}(?:parameter|invoke)\s")
#: An unfinished DSML tag at the end of a text (what follows decides what it is).
DSML_TAG_HEAD = re.compile(rf"<{DSML}\w*$")
#: A DSML tag, finished or not, that ends a text (whitespace after it).
DSML_TAG_TAIL = re.compile(rf"<{DSML}\w*>?\s*$")
#: The rest of an invoke tag after ``<｜DSML｜invoke``: the tool name, and a ``/`` when the tag
#: closes itself (``<｜DSML｜invoke name="f"/>``: a call without arguments, as SGLang's
#: DeepSeek-V4 detector reads it).
INVOKE_TAG = re.compile(r'\s+name="([^"\n]*)"\s*(/?)>')
#: The rest of a parameter tag after ``<｜DSML｜parameter``: its name and ``string`` flag. A name
#: runs to its closing quote, so ``<`` and ``>`` are name characters (``name="a<b"``), as
#: DeepSeek's response parser, SGLang's and vLLM's DeepSeek-V4 parsers read them; ``"`` and a line
#: break cannot be (the tools that declare such names are refused, :mod:`..chat_encoding_tools`).
PARAM_TAG = re.compile(r'\s+name="([^"\n]*)"\s+string="(true|false)"\s*>')
_TAG_NAME_DONE = re.compile(r'\s+name="[^"\n]*"')
_TAG_NAME_OPEN = re.compile(r'\s+name="[^"\n]*')
_TAG_HEAD_PREFIX = re.compile(r"\s*(?:n(?:a(?:m(?:e=?)?)?)?)?")


def tag_may_continue(rest: str) -> bool:
    """Whether ``rest``, the text after ``<｜DSML｜invoke`` / ``<｜DSML｜parameter`` that
    :data:`INVOKE_TAG` / :data:`PARAM_TAG` does not match (yet), may still become the tag: a
    prefix of its ``name="``, a name not closed yet (no line break), or a closed name with no
    ``>`` after it; never past :data:`MAX_TAG_CHARS`."""
    if len(rest) > MAX_TAG_CHARS:
        return False
    done = _TAG_NAME_DONE.match(rest)
    if done is not None:
        return ">" not in rest[done.end() :]
    opened = _TAG_NAME_OPEN.match(rest)
    if opened is not None:
        return opened.end() == len(rest)
    return _TAG_HEAD_PREFIX.fullmatch(rest) is not None


#: The legacy ASCII spelling of the ``｜DSML｜`` marker: DeepSeek-V4 at times writes its tags as
#: ``<|DSML|tool_calls>`` / ``</|DSML|invoke>`` (cline/cline#13348; local-inference-lab/vllm#417
#: reads both spellings). Read only right after ``"<"`` or ``"</"`` (:class:`DsmlBarNormalizer`).
ASCII_DSML = "|DSML|"
#: An ASCII-bar tag start, rewritten with the fullwidth marker.
_ASCII_TAG_START = re.compile(r"(</?)" + re.escape(ASCII_DSML))
#: The ASCII-bar tag starts whose proper prefixes end a text held back by the normaliser.
_ASCII_TAG_HEADS = (f"<{ASCII_DSML}", f"</{ASCII_DSML}")


@dataclass
class DsmlBarNormalizer:
    """Streaming rewrite of ASCII-bar DSML tag starts (``<|DSML|`` / ``</|DSML|``) into the
    fullwidth spelling (``<｜DSML｜`` / ``</｜DSML｜``) the DSML readers match: the one point where
    every reader (tool-call parser, reasoning parser's implicit end, markup scrub, withheld-tools
    cutter) accepts both spellings alike. Each tag is rewritten on its own, so a closing tag may use
    either spelling whatever its opening tag used. ``|DSML|`` not right after ``"<"`` / ``"</"`` is
    text (an ASCII ``|`` is an ordinary character, unlike the one-token ``｜DSML｜``); the server
    never writes the ASCII spelling into prompts.

    A tail that may still become an ASCII tag start (``"<"``, ``"</|DS"``) is held back until the
    next text decides, and released unchanged by :meth:`finish` (the DSML readers hold such a
    tail back themselves, so what a reader returns in all is the same).
    """

    _held: str = ""

    def feed(self, text: str) -> str:
        """Read the next text; returns the decided part, ASCII-bar tag starts rewritten."""
        buf = _ASCII_TAG_START.sub(rf"\1{DSML}", self._held + text)
        n = max(partial_suffix(buf, head) for head in _ASCII_TAG_HEADS)
        self._held = buf[len(buf) - n :]
        return buf[: len(buf) - n]

    def finish(self) -> str:
        """End of the text: the held-back tail, which was text."""
        out, self._held = self._held, ""
        return out


#: What the detokenizer writes for an incomplete UTF-8 sequence at the end of a text.
REPLACEMENT_CHAR = "\ufffd"


def partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``.

    A U+FFFD that ends ``text`` counts as the first bytes of a non-ASCII character of ``marker``
    (``"｜"`` of ``"</｜DSML｜parameter>"``): a byte-level detokenizer writes it for an incomplete
    UTF-8 sequence, which is what the end of an output cut by ``max_tokens`` in the middle of the
    ``｜`` (3 bytes, often 3 tokens) decodes to (``"</\ufffd"``: a tag being written, not text).
    An ASCII character of ``marker`` is never matched by it (an incomplete sequence is never ASCII).
    """
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        tail = text[-n:]
        if marker.startswith(tail):
            return n
        if tail[-1] == REPLACEMENT_CHAR and ord(marker[n - 1]) > 0x7F and marker.startswith(tail[:-1]):
            return n
    return 0


def trailing_ws(text: str, end: int) -> int:
    """Number of whitespace characters right before position ``end``."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    return end - i


def trailing_newlines(text: str, end: int) -> int:
    """Number of ``"\\n"`` characters right before position ``end``: the separator in front of a
    DSML block. DeepSeek's encoder writes ``"\\n\\n"`` there and its response parser
    (``deepseek-recipe``) trims the newlines in front of a block, and only them: a space or tab the
    model wrote before them is text of the answer, which the next turn's prompt renders back in
    place (trimmed, the prompt would diverge from the generated tokens there and the prefix cache
    would lose the rest of the turn)."""
    i = end
    while i > 0 and text[i - 1] == "\n":
        i -= 1
    return end - i


def json_value(text: str) -> bool:
    """Whether ``text`` is one JSON value (``NaN`` / ``Infinity`` and an object naming a key
    twice refused: :func:`unique_object`)."""
    try:
        json.loads(text, parse_constant=reject_constant, object_pairs_hook=unique_object)
    except (ValueError, RecursionError):  # nested deeper than Python's json decodes: not a value here
        return False
    return True


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of :func:`json.loads` refusing an object that names a key twice:
    which value a client reads is then undefined (RFC 8259 section 4), as with a parameter written
    twice, which makes a DSML block malformed; SGLang's strict DeepSeek-V4 detector refuses both.

    Raises:
        ValueError: a key appears twice.
    """
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return obj


def reject_constant(name: str) -> None:
    """``parse_constant`` hook of :func:`json.loads` refusing ``NaN`` and ``Infinity``.

    Raises:
        ValueError: always.
    """
    raise ValueError(f"{name} is not JSON")

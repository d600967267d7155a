"""Tool-call ``arguments`` texts read as strict JSON (RFC 8259), as DeepSeek's own converter reads
them: whole texts (:func:`loads_strict`) and beginnings of a JSON object
(:func:`is_json_object_prefix`, or piece by piece :class:`JsonObjectPrefixReader`).

Python's :mod:`json` is lenient where the grammar is not: it reads ``NaN``, ``Infinity`` and
``-Infinity`` as numbers, ``1e999`` as infinity, and ``\\ud800`` escapes as strings holding a lone surrogate (which no
UTF-8 text, hence no prompt, can hold). :func:`loads_strict` refuses both, so such a text is "not
JSON", rendered as one ``arguments`` string parameter as DeepSeek's converter renders it.

A call cut by the token limit has as its ``arguments`` the beginning of a JSON object text; the
members written so far are then read with jiter's ``partial_mode`` (:func:`~.tool_calls.
partial_json_object`). That mode also reads texts that no continuation could make valid JSON
(``{"a": "x" "b"`` reads as ``{"a": "x"}``, ``{"a": [1 2`` as ``{"a": [1]}``): it stops at the
first error and keeps what came before. :func:`is_json_object_prefix` tells the two apart: a
text is a *genuine* prefix when some text appended to it makes one JSON object (RFC 8259's
grammar: strings without raw control characters, the escapes ``\\" \\\\ \\/ \\b \\f \\n \\r \\t
\\uXXXX``, numbers ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?``, the literals ``true``
``false`` ``null``), whitespace after the object allowed.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["JsonObjectPrefixReader", "holds_non_json", "is_json_object_prefix", "loads_strict"]

_WS = " \t\n\r"
_ESCAPES = '"\\/bfnrtu'
_HEX = "0123456789abcdefABCDEF"
_DIGITS = "0123456789"
_LITERALS = {"t": "true", "f": "false", "n": "null"}
_SURROGATE = re.compile("[\ud800-\udfff]")

# where a number stands after its last character; the complete ones may end there
_NUM_COMPLETE = frozenset({"zero", "int", "frac", "exp"})


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is out of the range of a double")
    return value


def holds_non_json(value: Any) -> bool:
    """Whether a decoded value holds what no strict JSON text decodes to: a string (a key or a
    value, at any depth) with a lone surrogate code point (what a ``\\ud800`` escape without its
    pair decodes to in Python; a valid pair decodes to one code point), or a float that is not
    finite (``NaN``, ``Infinity``, ``1e999``)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                return True
        elif isinstance(v, float):
            if not math.isfinite(v):
                return True
        elif isinstance(v, dict):
            stack.extend(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def loads_strict(text: str) -> Any:
    """``json.loads(text)`` under RFC 8259: a whole JSON text, whitespace around it allowed.

    Raises:
        ValueError: not JSON, ``NaN`` / ``Infinity`` / ``-Infinity``, a number beyond a double's
            range (``1e999``, which Python reads as infinity), or a string with a lone surrogate
            (module docstring).
        RecursionError: nested deeper than Python decodes.
    """
    value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    if holds_non_json(value):
        raise ValueError("a lone surrogate escape is not a character (RFC 8259)")
    return value


def _number_step(state: str, ch: str) -> str | None:
    """The next number state after ``ch`` (``None``: ``ch`` does not continue the number)."""
    if state == "minus":
        return "zero" if ch == "0" else "int" if ch in _DIGITS else None
    if state in ("zero", "int"):
        if state == "int" and ch in _DIGITS:
            return "int"
        return "dot" if ch == "." else "e" if ch in "eE" else None
    if state in ("dot", "frac"):
        if ch in _DIGITS:
            return "frac"
        return "e" if state == "frac" and ch in "eE" else None
    if state == "e":
        return "esign" if ch in "+-" else "exp" if ch in _DIGITS else None
    if state in ("esign", "exp"):
        return "exp" if ch in _DIGITS else None
    raise AssertionError(state)


def is_json_object_prefix(text: str) -> bool:
    """Whether ``text`` is the beginning of a JSON object text (module docstring).

    True for a whole object (whitespace around it allowed) and for any beginning of one that some
    continuation completes (``{"a": "x`` ``{"a": 1.`` ``{"a": tr``); false for an empty or blank
    text, another JSON value, text after the object, and any text that no continuation makes
    valid (``{"a": "x" "b"`` ``{"a": [1 2`` ``{"a": 01`` ``{"a": 1,}``). Runs in time linear in
    ``len(text)``, at any nesting depth.
    """
    reader = JsonObjectPrefixReader()
    return reader.feed(text) and reader.started


class JsonObjectPrefixReader:
    """:func:`is_json_object_prefix` read piece by piece: :meth:`feed` takes the next piece of the
    text and says whether the text so far can still begin a JSON object, in time linear in the
    piece (a streamed ``arguments`` text is checked fragment by fragment without re-reading it).

    Once a piece makes the text invalid, the reader stays invalid (no continuation helps).
    """

    def __init__(self) -> None:
        self.ok = True
        self._stack: list[str] = []  # "{" / "[" of the open containers
        # what comes next: "start" (the first "{"), "value", "key" (a member's key string),
        # "key_or_end" (after "{"), "value_or_end" (after "["), "colon", "comma_or_end", "done"
        self._expect = "start"
        self._string: str | None = None  # inside a string: "key" or "value"; else None
        self._escape = -1  # inside a string: -1 none, 0 after "\\", 1..4 hex digits of \\u due
        self._number: str | None = None  # inside a number: its state (see _number_step)
        self._literal = ""  # inside true/false/null: the letters still due

    @property
    def started(self) -> bool:
        """Whether the object's ``{`` has been read (a blank text begins no object yet)."""
        return self._expect != "start"

    def feed(self, text: str) -> bool:
        """Read ``text``, the next piece; whether the whole text read so far is still the
        beginning of a JSON object (or blank: nothing but whitespace read yet)."""
        if self.ok:
            self.ok = self._read(text)
        return self.ok

    def _read(self, text: str) -> bool:
        stack = self._stack
        expect, string, escape = self._expect, self._string, self._escape
        number, literal = self._number, self._literal
        try:
            for ch in text:
                if string is not None:
                    if escape == 0:
                        if ch not in _ESCAPES:
                            return False
                        escape = 4 if ch == "u" else -1
                    elif escape > 0:
                        if ch not in _HEX:
                            return False
                        escape = escape - 1 if escape > 1 else -1
                    elif ch == "\\":
                        escape = 0
                    elif ch == '"':
                        expect, string = ("colon" if string == "key" else "comma_or_end"), None
                    elif ch < " ":
                        return False
                    continue
                if literal:
                    if ch != literal[0]:
                        return False
                    literal = literal[1:]
                    if not literal:
                        expect = "comma_or_end"
                    continue
                if number is not None:
                    step = _number_step(number, ch)
                    if step is not None:
                        number = step
                        continue
                    if number not in _NUM_COMPLETE:
                        return False
                    number, expect = None, "comma_or_end"  # ``ch`` is read again below
                if ch in _WS:
                    continue
                if expect == "start":
                    if ch != "{":
                        return False
                    stack.append("{")
                    expect = "key_or_end"
                elif expect in ("key", "key_or_end"):
                    if ch == '"':
                        string = "key"
                    elif ch == "}" and expect == "key_or_end":
                        expect = _close(stack)
                    else:
                        return False
                elif expect == "colon":
                    if ch != ":":
                        return False
                    expect = "value"
                elif expect == "comma_or_end":
                    if ch == ",":
                        expect = "key" if stack[-1] == "{" else "value"
                    elif ch == ("}" if stack[-1] == "{" else "]"):
                        expect = _close(stack)
                    else:
                        return False
                elif expect in ("value", "value_or_end"):
                    if ch == "]" and expect == "value_or_end":
                        expect = _close(stack)
                    elif ch in "{[":
                        stack.append(ch)
                        expect = "key_or_end" if ch == "{" else "value_or_end"
                    elif ch == '"':
                        string = "value"
                    elif ch in _LITERALS:
                        literal = _LITERALS[ch][1:]
                    elif ch == "-" or ch in _DIGITS:
                        number = _number_step("minus", ch) if ch != "-" else "minus"
                    else:
                        return False
                else:  # "done": only whitespace after the object
                    return False
            return True
        finally:
            self._expect, self._string, self._escape = expect, string, escape
            self._number, self._literal = number, literal


def _close(stack: list[str]) -> str:
    """Pop the innermost container; what is expected after it."""
    stack.pop()
    return "comma_or_end" if stack else "done"

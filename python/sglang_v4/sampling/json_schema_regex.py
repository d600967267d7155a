"""A JSON-schema regex (``pattern``, a ``patternProperties`` key) written for xgrammar's
full-match reading.

JSON Schema (Draft 2020-12, Validation section 6.3.3 and Core section 6.4) reads a regex
unanchored, as ECMA-262's ``RegExp.test``: ``"pattern": "cat"`` takes ``"concatenate"``, ``"^a"``
takes every string that starts with ``a``. xgrammar (0.2.x) compiles it as a full match
(``"cat"`` took ``"cat"`` alone, ``"^a"`` took ``"a"`` alone; mlc-ai/xgrammar#838): a field the
model could only fill with the regex's shortest reading, or with nothing at all. The missing
anchors are written out instead: ``X`` becomes ``[\\s\\S]*(?:X)[\\s\\S]*``, ``^X`` becomes
``(?:X)[\\s\\S]*``, ``X$`` becomes ``[\\s\\S]*(?:X)``; ``^X$`` is left as it is. A ``$``
anywhere else (``(a$|b)c``, ``^a|b$``: xgrammar ignored it, so ``"ac"`` passed) is an assertion
that the input ends there: the regex is written with the end anchors taken out
(:func:`~sglang_v4.sampling.regex_end_anchor.eliminate_end_anchors`, ``$`` as ECMA-262 reads it
without the multi-line flag). A ``^`` anywhere else, or anchors on some branches of a top-level
alternation only (``^ab|c$``: starts with ``ab`` or ends with ``c``), are written out as well,
start anchors read backwards as end anchors.
"""

from __future__ import annotations

import re

from sglang_v4.sampling.regex_end_anchor import eliminate_end_anchors, reverse_regex

__all__ = ["search_as_full_match"]

_ANY = r"[\s\S]*"


def _scan(pattern: str) -> tuple[bool, bool, bool, bool, bool]:
    """``(leading ^, trailing $, a top-level |, a ^ anywhere else, a $ anywhere else)`` of
    ``pattern``, outside escapes and character classes."""
    start = end = alternation = inner = inner_end = False
    depth, in_class, i, n = 0, False, 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]":  # "[]...]": the first "]" is a literal
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            alternation = True
        elif c == "^":
            if i == 0:
                start = True
            else:
                inner = True
        elif c == "$":
            if i == n - 1:
                end = True
            else:
                inner_end = True
        i += 1
    return start, end, alternation, inner, inner_end


def search_as_full_match(pattern: str, field: str = "pattern") -> str:
    """``pattern`` (JSON Schema's unanchored reading) as a regex whose full matches are the
    same strings (module docstring); ``pattern`` itself where it is anchored at both ends or
    the rewrite would not mean the same.

    Args:
        pattern: an ECMA-262 regex from a schema.
        field: the schema field it came from, named in errors.

    Returns:
        The regex for xgrammar.

    Raises:
        ValueError: no string matches ``pattern`` (text after ``$`` on every path).
    """
    start, end, alternation, inner, inner_end = _scan(pattern)
    if inner_end and not inner and not alternation:
        body = pattern[1:] if start else pattern
        written = eliminate_end_anchors(("" if start else _ANY) + f"(?:{body}){_ANY}", strict_dollar=True)
        if written is None:
            raise ValueError(
                f"{field}: no string matches the regex {pattern!r} (text after '$' on every path)"
            )
        return written
    if inner or inner_end or (alternation and (start or end)):
        return _anchors_written_out(pattern, field)
    if start and end:
        return pattern
    body = pattern[1 if start else 0 : len(pattern) - 1 if end else len(pattern)]
    if not body:
        return _ANY
    return ("" if start else _ANY) + f"(?:{body})" + ("" if end else _ANY)


def _anchors_written_out(pattern: str, field: str) -> str:
    """``pattern`` with anchors inside it or on some top-level branches only (``^ab|c$``,
    ``(^a|b)c``, ``x|^y``): the search ``[\\s\\S]*(?:P)[\\s\\S]*`` written without its
    anchors. The end anchors go first, with each ``^`` read as a letter (a path where a ``^``
    follows a ``$`` has text after the end: dropped), then the start anchors, read backwards as
    end anchors. A dropped path that matches has no text at all: the empty string, put back
    where the pattern takes it (Python's ``re.search`` on ``""``, where its ``$`` and ECMA-262's
    agree). ``pattern`` itself where Python cannot compile it.

    Raises:
        ValueError: no string matches ``pattern``.
    """
    try:
        takes_empty = re.search(pattern, "") is not None
    except re.error:
        return pattern
    ends_free = eliminate_end_anchors(f"{_ANY}(?:{pattern}){_ANY}", strict_dollar=True)
    backwards = None if ends_free is None else eliminate_end_anchors(reverse_regex(ends_free, {"^": "\\Z"}))
    written = None if backwards is None else reverse_regex(backwards)
    if written is None or written == "":
        if not takes_empty:
            raise ValueError(
                f"{field}: no string matches the regex {pattern!r} (no path satisfies its anchors)"
            )
        return ""
    return f"(?:{written}|)" if takes_empty else written

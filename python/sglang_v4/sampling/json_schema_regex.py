"""A JSON-schema regex (``pattern``, a ``patternProperties`` key) written for xgrammar's
full-match reading.

JSON Schema (Draft 2020-12, Validation section 6.3.3 and Core section 6.4) reads a regex
unanchored, as ECMA-262's ``RegExp.test``: ``"pattern": "cat"`` takes ``"concatenate"``, ``"^a"``
takes every string that starts with ``a``. xgrammar (0.2.x) compiles it as a full match
(``"cat"`` took ``"cat"`` alone, ``"^a"`` took ``"a"`` alone; mlc-ai/xgrammar#838): a field the
model could only fill with the regex's shortest reading, or with nothing at all. The missing
anchors are written out instead: ``X`` becomes ``[\\s\\S]*(?:X)[\\s\\S]*``, ``^X`` becomes
``(?:X)[\\s\\S]*``, ``X$`` becomes ``[\\s\\S]*(?:X)``; ``^X$`` is left as it is. A regex with an
anchor anywhere else (``a^b``, ``^a|b$``) is left as it is: the rewrite would not mean the same.
"""

from __future__ import annotations

__all__ = ["search_as_full_match"]

_ANY = r"[\s\S]*"


def _scan(pattern: str) -> tuple[bool, bool, bool, bool]:
    """``(leading ^, trailing $, a top-level |, an anchor anywhere else)`` of ``pattern``,
    outside escapes and character classes."""
    start = end = alternation = inner = False
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
                inner = True
        i += 1
    return start, end, alternation, inner


def search_as_full_match(pattern: str) -> str:
    """``pattern`` (JSON Schema's unanchored reading) as a regex whose full matches are the
    same strings (module docstring); ``pattern`` itself where it is anchored at both ends or
    the rewrite would not mean the same.

    Args:
        pattern: an ECMA-262 regex from a schema.

    Returns:
        The regex for xgrammar.
    """
    start, end, alternation, inner = _scan(pattern)
    if inner or (start and end and not alternation) or (alternation and (start or end)):
        return pattern
    body = pattern[1 if start else 0 : len(pattern) - 1 if end else len(pattern)]
    if not body:
        return _ANY
    return ("" if start else _ANY) + f"(?:{body})" + ("" if end else _ANY)

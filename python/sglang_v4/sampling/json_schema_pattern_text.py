"""A ``pattern`` (a regex over the decoded string) written as a regex over the string's JSON text.

JSON Schema applies ``pattern`` to the string value (Validation section 6.3.3), and a value may
hold any character: ``^[a"]$`` takes the string ``"`` (the JSON text ``"\\""``), ``^\\n$`` a
newline (``"\\n"``). xgrammar (0.2.9) reads the regex as one over the JSON text between the
quotes with ``"``, ``\\`` and the control characters U+0000-U+001F taken out of every character
match, so no escape can be written: ``^[a"]$`` gave ``"a"`` only, ``\\S+`` no string with a quote,
and a regex left with no match at all (``^\\n$``, ``^"$``) fell back to a reading that wrote the
character raw (a newline between the quotes, or three quotes in a row), which is not JSON (RFC 8259 section 7) -- a
request then got text that no JSON parser reads.

:func:`pattern_over_json_text` rewrites the regex so that each character match (a literal, a
class, ``.``, ``\\s`` / ``\\S`` / ``\\D`` / ``\\W``) that can match one of those characters takes
its JSON escapes instead: the two-character escape (``\\"`` ``\\\\`` ``\\b`` ``\\f`` ``\\n``
``\\r`` ``\\t``) and the ``\\u00XX`` one, in either hex case; a character that needs no escape
is matched as itself (its ``\\uXXXX`` spelling is left out: narrower, still the same values).
The rewritten regex starts with ``[U+001F]{0}`` (matches the empty text, the character written
as itself): xgrammar reads a regex holding a character outside printable ASCII with its general
compiler, which keeps the escapes, rather than the JSON-string one.

A class rewritten so writes a ``^`` last (``[\\^\\n]``'s safe part is ``[\\^]``, which xgrammar
reads as ``[^]``, any character).

Supported: literals and escaped punctuation, classes with ranges and ``\\d \\w \\s \\D \\W \\S``
(a class mixing a negated escape with other items only as ``[\\s\\S]``, ``[\\d\\D]``,
``[\\w\\W]``), ``.``, the escapes ``\\n \\r \\t \\f \\v \\0 \\xHH \\uHHHH``, groups ``( )``
``(?: )``, ``|``, quantifiers and anchors. A regex with anything else (look-arounds, named
groups, back-references, ``\\b``, ``\\p{..}``) or that matches none of those characters is left
as it is (xgrammar's narrower reading: its texts are JSON).
"""

from __future__ import annotations

__all__ = ["pattern_over_json_text"]

_QUOTE, _BACKSLASH = 0x22, 0x5C
#: The characters a JSON string must escape (RFC 8259 section 7).
_SPECIAL = frozenset([*range(0x20), _QUOTE, _BACKSLASH])
_SHORT = {0x22: '"', 0x5C: "\\\\", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
#: ECMA-262 ``\s`` (WhiteSpace and LineTerminator) beyond the control characters and the space.
_WIDE_SPACES = (0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF)
_SPACE_SET = frozenset([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, *_WIDE_SPACES])
_DIGITS = frozenset(range(0x30, 0x3A))
_WORD = frozenset([*_DIGITS, *range(0x41, 0x5B), *range(0x61, 0x7B), 0x5F])
#: ``.`` matches every character but the line terminators.
_LINE_ENDS = frozenset([0x0A, 0x0D, 0x2028, 0x2029])
_SIMPLE_ESCAPES = {"n": 0x0A, "r": 0x0D, "t": 0x09, "f": 0x0C, "v": 0x0B, "0": 0x00}
_FORCE_GENERAL = "(?:[\x1f]{0})"
_SAFE_EXCLUDED = '"\\\\\\x00-\x1f'


class _Unsupported(Exception):
    pass


def _encodings(chars: set[int]) -> list[str]:
    """The JSON escapes (as regex text) of the special characters ``chars``."""
    out = []
    for c in sorted(chars):
        if c in _SHORT:
            out.append("\\\\" + ("\\\\" if c == _BACKSLASH else _SHORT[c]))
        hi, lo = f"{c:04x}"[2], f"{c:04x}"[3]
        lo_cls = f"[{lo}{lo.upper()}]" if lo.isalpha() else lo
        out.append(f"\\\\u00{hi}{lo_cls}")
    return out


def _atom(safe: str | None, specials: set[int]) -> str:
    """A group matching ``safe`` (a regex of unescaped characters, or ``None``) or any JSON
    escape of ``specials``."""
    alts = ([safe] if safe else []) + _encodings(specials)
    if not alts:
        raise _Unsupported  # matches nothing
    return alts[0] if len(alts) == 1 and not specials else "(?:" + "|".join(alts) + ")"


def _read_escape(p: str, i: int, in_class: bool) -> tuple[tuple[str, int], int]:
    """The escape at ``p[i] == "\\"``: ``(("char", code) | ("set", letter), next index)``."""
    if i + 1 >= len(p):
        raise _Unsupported
    e = p[i + 1]
    if e in "dDwWsS":
        return ("set", ord(e)), i + 2
    if e in _SIMPLE_ESCAPES and not (e == "0" and p[i + 2 : i + 3].isdigit()):
        return ("char", _SIMPLE_ESCAPES[e]), i + 2
    if e == "b" and in_class:
        return ("char", 0x08), i + 2
    if e in "xu":
        n = 2 if e == "x" else 4
        digits = p[i + 2 : i + 2 + n]
        if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise _Unsupported
        return ("char", int(digits, 16)), i + 2 + n
    if e.isalnum():
        raise _Unsupported  # \b \B \c \p \k back-references...
    return ("char", ord(e)), i + 2


def _class_members(items: list[tuple[str, int, int]]) -> tuple[set[int], set[str]]:
    """The special characters among ``items`` and the class escapes they use."""
    specials: set[int] = set()
    sets: set[str] = set()
    for kind, lo, hi in items:
        if kind == "set":
            sets.add(chr(lo))
        else:
            specials |= {c for c in _SPECIAL if lo <= c <= hi}
    for s in sets:
        base = {"d": _DIGITS, "w": _WORD, "s": _SPACE_SET}[s.lower()]
        specials |= {c for c in _SPECIAL if (c in base) != s.isupper()}
    return specials, sets


def _char_text(c: int) -> str:
    """``c`` written inside a class (no special character reaches here)."""
    return "\\" + chr(c) if chr(c) in "]^-[" else chr(c)


def _class(p: str, i: int) -> tuple[str, int, bool]:
    """The class at ``p[i] == "["`` rewritten: ``(text, next index, changed)``."""
    j = i + 1
    negated = p[j : j + 1] == "^"
    j += negated
    body_start = j
    items: list[tuple[str, int, int]] = []
    if p[j : j + 1] == "]":
        raise _Unsupported  # [] / [^]
    while j < len(p) and p[j] != "]":
        if p[j] == "\\":
            (kind, v), j = _read_escape(p, j, True)
        else:
            kind, v, j = "char", ord(p[j]), j + 1
        if kind == "char" and p[j : j + 1] == "-" and p[j + 1 : j + 2] not in ("]", ""):
            if p[j + 1] == "\\":
                (k2, hi), j = _read_escape(p, j + 1, True)
                if k2 != "char":
                    raise _Unsupported
            else:
                hi, j = ord(p[j + 1]), j + 2
            items.append(("char", v, hi))
        else:
            items.append((kind, v, v))
    if j >= len(p):
        raise _Unsupported
    body, end = p[body_start:j], j + 1
    specials, sets = _class_members(items)
    if negated:
        specials = _SPECIAL - specials
        if not specials:
            return p[i:end], end, False
        return _atom(f"[^{_SAFE_EXCLUDED}{body}]", specials), end, True
    if not specials:
        return p[i:end], end, False
    negated_sets = {s for s in sets if s.isupper()}
    if negated_sets:
        if not any(s.lower() in sets for s in negated_sets):
            raise _Unsupported  # e.g. [a\S]: the complement does not split simply
        return _atom(f"[^{_SAFE_EXCLUDED}]", set(_SPECIAL)), end, True
    safe = []
    caret = False  # a "^" is written last: xgrammar reads a first "\\^" as the class's negation
    for kind, lo, hi in items:
        if kind == "set":
            safe.append("\\" + chr(lo) if chr(lo) != "s" else " " + "".join(map(_char_text, _WIDE_SPACES)))
            continue
        for a, b in ((max(lo, 0x20), min(hi, 0x21)), (max(lo, 0x23), min(hi, 0x5B)), (max(lo, 0x5D), hi)):
            if a <= 0x5E <= b:
                caret = True
                safe += [_char_text(a) + ("" if a == 0x5D else "-" + _char_text(0x5D))] if a < 0x5E else []
                a = 0x5F
            if a <= b:
                safe.append(_char_text(a) + ("" if a == b else "-" + _char_text(b)))
    if caret:
        safe.append("\\^")
    if safe == ["\\^"]:
        return _atom("\\^", specials), end, True
    return _atom("[" + "".join(safe) + "]" if safe else None, specials), end, True


def _translate(p: str) -> tuple[str, bool]:
    out: list[str] = []
    changed = False
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "[":
            text, i, ch = _class(p, i)
            out.append(text)
            changed |= ch
            continue
        if c == "(":
            if p[i + 1 : i + 2] == "?":
                if p[i + 2 : i + 3] != ":":
                    raise _Unsupported  # look-arounds, named groups
                out.append("(?:")
                i += 3
            else:
                out.append("(")
                i += 1
            continue
        if c == "{":  # a quantifier's bounds: copied to the closing brace
            k = p.find("}", i)
            if k < 0:
                raise _Unsupported
            out.append(p[i : k + 1])
            i = k + 1
            continue
        if c in ")|*+?^$":
            out.append(c)
            i += 1
            continue
        if c == ".":
            out.append(_atom(f"[^{_SAFE_EXCLUDED}\u2028\u2029]", set(_SPECIAL - _LINE_ENDS)))
            changed, i = True, i + 1
            continue
        if c == "\\":
            (kind, v), j = _read_escape(p, i, False)
            if kind == "set":
                letter = chr(v)
                if letter in "dw":
                    out.append(p[i:j])
                elif letter == "s":
                    safe = "[ " + "".join(map(_char_text, _WIDE_SPACES)) + "]"
                    out.append(_atom(safe, set(_SPACE_SET & _SPECIAL)))
                    changed = True
                else:
                    base = {"D": _DIGITS, "W": _WORD, "S": _SPACE_SET}[letter]
                    out.append(_atom(f"[^{_SAFE_EXCLUDED}\\{letter.lower()}]", set(_SPECIAL - base)))
                    changed = True
            elif v in _SPECIAL:
                out.append(_atom(None, {v}))
                changed = True
            else:
                out.append(p[i:j])
            i = j
            continue
        if ord(c) in _SPECIAL:
            out.append(_atom(None, {ord(c)}))
            changed = True
        else:
            out.append(c)
        i += 1
    return "".join(out), changed


def pattern_over_json_text(pattern: str) -> str:
    """``pattern`` (ECMA-262, over the decoded string) as a regex over the JSON text of the
    string between its quotes (module docstring).

    Args:
        pattern: a ``pattern`` as xgrammar reads it (a full match: anchors already written out).

    Returns:
        The rewritten regex, or ``pattern`` itself where it matches no character that JSON
        escapes or uses a construct this rewrite does not support.
    """
    try:
        text, changed = _translate(pattern)
    except _Unsupported:
        return pattern
    if not changed:
        return pattern
    if text.startswith("^"):
        return "^" + _FORCE_GENERAL + text[1:]
    return _FORCE_GENERAL + text

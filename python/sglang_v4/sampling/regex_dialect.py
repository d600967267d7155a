"""A request's regex written in the dialect xgrammar compiles, or refused naming the construct.

xgrammar (0.2.9) compiles a regex as a full match over ECMA-262-like syntax. Constructs that
users write (Python's ``re`` / the ``regex`` package, PCRE) and that xgrammar rejects or misreads:

* Unicode properties ``\\p{L}`` ``\\P{Lu}`` ``\\pN`` (general categories, scripts, binary
  properties: whatever the ``regex`` package knows) were refused ("Unicode character class escape
  sequence is not supported yet"), and inside a class (``[\\p{L}]``) read as the letters ``p{L}``:
  they are written as explicit character ranges;
* inline flags ``(?i)`` (the whole regex, at its start) and ``(?i:...)`` (a group) were refused:
  case-insensitivity is written out, each letter and class taking its case variants (Python's
  Unicode simple case folding, read from the ``regex`` package: ``(?i)k`` takes ``k``, ``K`` and
  the Kelvin sign); ``(?s)`` lets ``.`` match a newline; ``(?m)`` / ``(?x)`` / ``(?L)`` are
  refused;
* ``\\d \\w \\s`` (and ``\\D \\W \\S``) were read as ECMA-262 does (ASCII digits and word
  characters, ECMA-262 white space, whatever flag was set): for the ``regex`` parameter they are
  Python's reading under ``re.ASCII`` by default (``\\d`` is ``[0-9]``, ``\\s`` is
  ``[ \\t\\n\\r\\f\\v]``: what SGLang's and vLLM's grammar backends give, so a ``\\d{4}`` never
  lets the model write other scripts' digits), and Python's Unicode reading under ``(?u)``
  (``(?a)`` / ``(?a:...)`` as Python), written as explicit ranges
  (:mod:`sglang_v4.sampling.regex_class_escapes`); a JSON-schema pattern keeps ECMA-262's;
* ``.`` matched a newline (in Python's ``re`` and ECMA-262 it does not): for the ``regex``
  parameter it is ``[^\\n]`` (Python's reading) unless ``(?s)`` is set;
* anchors: ``^`` / ``\\A`` at the start and ``$`` / ``\\Z`` / ``\\z`` at the end are dropped (a
  full match is anchored already); elsewhere xgrammar ignored ``^`` / ``$`` (``a^b`` took
  ``"ab"``, which no engine matches) and read ``\\A`` / ``\\Z`` / ``\\z`` as the letters: an end
  anchor with text after it, or a start anchor with text before it, is written out of the regex
  as Python reads it (:mod:`sglang_v4.sampling.regex_end_anchor`: ``(a$|b)c`` is ``bc``,
  ``a(^b|c)`` is ``ac``, ``x?(^a|b)(c$|d)e?`` is ``(xb|a|b)(c|de?)``: end anchors first, then start
  anchors), refused where no text can match;
* an unknown letter escape (``\\Q``, ``\\G``, ``\\h``...) was read as the letter; back-references
  (``\\1``, ``\\k<n>``, ``(?P=n)``), look-arounds, atomic groups, possessive quantifiers
  (``a*+``), conditionals and ``\\b`` / ``\\B`` are refused by name; ``(?P<n>...)`` is a
  group, ``(?#...)`` a comment;
* a NUL character (literal or escaped with ``\\``) was refused by xgrammar ("must not contain
  null characters"): it is written ``\\u0000``;
* ``\\xHH`` was read with every hex digit that follows (``\\x41b`` as U+041B, not ``Ab``): it is
  written ``\\u00HH``; in a class, a first escaped ``^`` (``[\\^a]``, ``[\\x5e]``) was read as the
  negation, and a control character (``\\x01``, ``\\u0085``, ``\\a``) took the hex digits after
  it (``[\\x01b]`` was ESC, ``[\\x01\\d]`` took ``-``): such a class is written out explicitly,
  the ``^`` and the control characters last (:func:`_class_body`);
* a counted repeat above :data:`MAX_REGEX_REPEAT` is refused (xgrammar stores counts as 32-bit
  ints: ``a{4294967297}`` became ``a{1}``); ``{,n}`` is ``{0,n}`` and a ``{`` that starts no
  repeat is a literal (both Python's reading).

:func:`translate_regex` does this for the ``regex`` sampling parameter (vLLM's
``structured_outputs.regex`` / ``guided_regex``) and, in ``schema`` mode, for a JSON-schema
``pattern`` / ``patternProperties`` key (there ``.`` and the anchors keep their ECMA-262 reading,
handled later by :mod:`sglang_v4.sampling.json_schema_regex` and
:mod:`sglang_v4.sampling.json_schema_pattern_text`).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from sglang_v4.sampling.regex_class_escapes import char_set as _char_set
from sglang_v4.sampling.regex_class_escapes import (
    class_escape_intervals,
    complement_intervals,
    union_intervals,
)
from sglang_v4.sampling.regex_end_anchor import eliminate_end_anchors, reverse_regex

__all__ = ["MAX_REGEX_REPEAT", "regex_format_checker", "translate_regex"]

#: The largest bound of a counted repeat ``{m,n}`` (larger ones are refused).
MAX_REGEX_REPEAT = 100_000

_CLASS_ESCAPES = frozenset("dDwWsS")
#: Letter escapes that mean one character (xgrammar and Python read them alike).
_CHAR_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v", "a": "\a"}
_REPEAT = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
#: The escapes of ``^`` (as :func:`_read_escape` returns them), which xgrammar reads as the
#: negation when first in a class.
_CARET_ESCAPES = frozenset({"\\^", "\\u005e", "\\u005E", "\\U0000005e", "\\U0000005E"})
#: The end anchors ``$`` / ``\\Z`` as written in the translation (outside the schema mode).
_END_ANCHORS = ("$", "\\Z")


class _Refused(Exception):
    def __init__(self, what: str, pos: int) -> None:
        super().__init__(what)
        self.what, self.pos = what, pos


@functools.lru_cache(maxsize=1)
def _char_text(c: int) -> str:
    """``c`` written inside a class: a control character as ``\\u`` and four hex digits (see
    :func:`_class_body` for where it may stand)."""
    if chr(c) in "\\]^-[":
        return "\\" + chr(c)
    if c < 0x20 or 0x7F <= c < 0xA0:
        return f"\\u{c:04x}"
    return chr(c)


def _class_body(ivs: tuple[tuple[int, int], ...], sets: list[str]) -> str:
    """The intervals ``ivs`` and the class escapes ``sets`` (``\\d``...) written as a class body
    that xgrammar reads back as the same set. Two misreadings are avoided:

    * xgrammar writes a control character of a class (``\\u0001``, ``\\x85``) as ``\\xHH`` and
      then reads every hex digit that follows into it (``[\\u0001b]`` was ESC, ``[\\u0001\\d]``
      took ``\\x10`` and ``-9``): intervals that start with one come last, after the sets and
      the other intervals, so only a backslash or the closing ``]`` follows them;
    * a first ``\\^`` is read as the class's negation (``[\\^a]`` took everything but ``a``): a
      ``^`` that would come first is written last instead.
    """
    caret = ord("^")
    plain: list[str] = []
    control: list[str] = []
    tail_caret = False
    for lo, hi in ivs:
        if lo == caret and not sets and not plain:
            tail_caret = True  # the "^" goes last; the rest of its interval stays
            lo += 1
            if lo > hi:
                continue
        if lo == hi:
            text = _char_text(lo)
        elif hi == lo + 1:
            text = _char_text(lo) + _char_text(hi)
        else:
            text = f"{_char_text(lo)}-{_char_text(hi)}"
        (control if text.startswith("\\u") else plain).append(text)
    body = "".join(sets) + "".join(plain) + "".join(control)
    if tail_caret:
        return body + "\\^" if body else "\\^"
    return body


def _property_end(p: str, i: int) -> int:
    """The end of the ``\\p`` / ``\\P`` escape at ``p[i]``."""
    if p[i + 2 : i + 3] == "{":
        k = p.find("}", i + 3)
        if k < 0:
            raise _Refused("an unclosed Unicode property escape", i)
        return k + 1
    if i + 2 >= len(p):
        raise _Refused("an incomplete Unicode property escape", i)
    return i + 3


@functools.lru_cache(maxsize=256)
def _property_known(text: str) -> bool:
    import regex

    try:
        regex.compile(text)
    except regex.error:
        return False
    return True


def _check_property(text: str, pos: int) -> None:
    if not _property_known(text):
        raise _Refused(f"an unknown Unicode property '{text}'", pos)


def _read_escape(p: str, i: int, in_class: bool, schema: bool) -> tuple[str, str, int]:
    """The escape at ``p[i] == "\\"``: ``(kind, text, end)``, kind one of ``"prop"`` (a
    Unicode property), ``"set"`` (``\\d``...), ``"char"`` (one character), ``"anchor_start"``,
    ``"anchor_end"``."""
    if i + 1 >= len(p):
        raise _Refused("a trailing backslash", i)
    e = p[i + 1]
    if e in "pP":
        end = _property_end(p, i)
        _check_property(p[i:end], i)
        return "prop", p[i:end], end
    if e in _CLASS_ESCAPES:
        return "set", p[i : i + 2], i + 2
    if e in "xuU":
        n = {"x": 2, "u": 4, "U": 8}[e]
        digits = p[i + 2 : i + 2 + n]
        if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise _Refused(f"an incomplete escape '\\{e}' (it takes {n} hex digits)", i)
        if e == "x":  # xgrammar reads "\x" with every hex digit that follows: "\x41b" is U+041B
            return "char", f"\\u00{digits}", i + 4
        return "char", p[i : i + 2 + n], i + 2 + n
    if e == "0":
        j = i + 2
        while j < min(len(p), i + 4) and p[j] in "01234567":
            j += 1
        return "char", p[i:j], j
    if e.isdigit() or e == "k":
        raise _Refused(f"a back-reference '\\{e}'", i)
    if e == "b" and in_class:
        return "char", "\\x08", i + 2
    if e in "bB":
        raise _Refused(f"a word boundary '\\{e}'", i)
    if e == "A" and not in_class:  # schema mode: written as "^" / "$" for the anchor rewrite
        return "anchor_start", "^", i + 2
    if e in "Zz" and not in_class:
        return "anchor_end", "$" if schema else "\\Z", i + 2
    if e in _CHAR_ESCAPES or e in "ec":
        end = i + 3 if e == "c" else i + 2
        return "char", p[i:end], end
    if e.isalnum():
        raise _Refused(f"an unknown escape '\\{e}'", i)
    if e == "\x00":  # an escaped NUL: xgrammar refuses the character itself, not its escape
        return "char", "\\u0000", i + 2
    return "char", p[i : i + 2], i + 2


def _class(p: str, i: int, ignore_case: bool, schema: bool, ascii_only: bool = False) -> tuple[str, int]:
    """The class at ``p[i] == "["`` in xgrammar's dialect: ``(text, end)``; outside the schema
    mode a ``\\d``-like member takes Python's set (ASCII when ``ascii_only``)."""
    j = i + 1
    negated = p[j : j + 1] == "^"
    j += negated
    sets: list[str] = []
    rest: list[str] = []  # chars, ranges and properties, as regex-package text
    translate = ignore_case
    python_sets: list[tuple[tuple[int, int], ...]] = []  # "\\d"-like members: Python's sets
    if p[j : j + 1] == "]":  # "[]...]": the first "]" is a literal (xgrammar reads "[]" as empty)
        rest.append("\\]")
        translate = True
        j += 1
    # "[\\^a]" / "[\\x5ea]": a first escaped "^" is read by xgrammar as the class's negation
    caret_first = not negated and p[j : j + 1] == "\\"
    while j < len(p) and p[j] != "]":
        if p[j] == "\\":
            kind, text, j = _read_escape(p, j, True, schema)
            if kind == "set" and schema:
                sets.append(text)
                continue
            if kind == "set":  # Python's set, as explicit ranges
                if len(rest) + len(python_sets) >= 2 and rest[-1:] == [
                    "-"
                ]:  # "[a-\\d]": Python's "bad character range"
                    raise _Refused(f"a range ending in a class escape '{text}'", j - 2)
                python_sets.append(class_escape_intervals(text[1], ascii_only))
                translate = True
                continue
            translate |= kind == "prop" or text == "\\u0000"  # a NUL is written \u0000
            translate |= caret_first and not rest and not sets and text in _CARET_ESCAPES
            # a character escape other than a letter one ("\\x01", "\\u00e9", "\\0"...) may name a
            # control character, which xgrammar misreads before a hex digit (see _class_body)
            translate |= kind == "char" and text[1:2] in ("x", "u", "U", "0", "a", "e", "c")
            rest.append(text)
        elif p[j] == "[" and p[j + 1 : j + 2] == ":" and p.find(":]", j + 2) > 0:
            k = p.find(":]", j + 2)  # a POSIX class, [:alpha:] (read by the regex package)
            rest.append(p[j : k + 2])
            translate = True
            j = k + 2
        else:
            # "[^^a]": a caret member is escaped, or the members re-read as a class (_char_set)
            # would take a first one as a second negation
            rest.append("\\" + p[j] if p[j] in "[]^" else p[j])
            translate |= ord(p[j]) < 0x20 or 0x7F <= ord(p[j]) < 0xA0  # a NUL or control character
            j += 1
    if j >= len(p):
        raise _Refused("an unclosed '['", i)
    end = j + 1
    if not translate:
        return p[i:end], end
    body = "".join(rest)
    if python_sets:  # the sets joined here, and the negation taken (xgrammar's "[^...]" of
        # every character takes something)
        ivs = union_intervals(_char_set(f"[{body}]", ignore_case) if body else (), *python_sets)
        ivs = complement_intervals(ivs) if negated else ivs
        negated = False
    else:
        ivs = _char_set(f"[{body}]", ignore_case) if body else ()
    inner = _class_body(ivs, sets)
    if not inner:
        # [] matches nothing and [^] everything; neither has an xgrammar spelling but these
        return ("[\\s\\S]" if negated else "[^\\s\\S]"), end
    if inner == "\\^" and not negated:  # "[\\^]" would be read as "[^]": the escaped atom
        return "\\^", end
    return ("[^" if negated else "[") + inner + "]", end


def _atom_set(text: str, ignore_case: bool) -> str:
    """A one-character atom (a literal, a ``\\p`` escape) as an explicit class."""
    ivs = _char_set(text, ignore_case)
    if not ivs:
        return "[^\\s\\S]"
    body = _class_body(ivs, [])
    return body if body == "\\^" else "[" + body + "]"


_FLAGS_GROUP = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?(:|\))")


def _flags(on: str, off: str, pos: int, ci: bool, dotall: bool, ascii_only: bool) -> tuple[bool, bool, bool]:
    """The case, dot-all and ASCII flags after the flag group ``(?on-off...)`` at ``pos``."""
    for f in on + off:
        if f not in "isau":
            name = {"m": "multi-line", "x": "verbose", "L": "locale"}.get(f, "unknown")
            raise _Refused(f"the {name} flag '(?{f})'", pos)
    if "i" in on:
        ci = True
    if "i" in off:
        ci = False
    if "s" in on:
        dotall = True
    if "s" in off:
        dotall = False
    if "a" in off or "u" in off:  # Python: "cannot turn off flags 'a', 'u' and 'L'"
        raise _Refused("turning off the flag '(?-a)' / '(?-u)'", pos)
    if "a" in on and "u" in on:  # Python: "bad inline flags: flags 'a', 'u' and 'L' are incompatible"
        raise _Refused("the flags '(?a)' and '(?u)' together", pos)
    if "a" in on:
        ascii_only = True
    if "u" in on:
        ascii_only = False
    return ci, dotall, ascii_only


def _strip_edge_anchors(out: list[str]) -> list[str]:
    """``out`` (the translation's pieces) without the start anchors that open and the end anchors
    that close a top-level alternative: a full match is anchored there already."""
    branches: list[list[str]] = [[]]
    depth = 0
    for t in out:
        if t == "|" and depth == 0:
            branches.append([])
            continue
        depth += t in ("(", "(?:")
        depth -= t == ")"
        branches[-1].append(t)
    kept: list[str] = []
    for k, b in enumerate(branches):
        lo, hi = 0, len(b)
        while lo < hi and b[lo] == "^":
            lo += 1
        while hi > lo and b[hi - 1] in _END_ANCHORS:
            hi -= 1
        kept += (["|"] if k else []) + b[lo:hi]
    return kept


def _translate(p: str, schema: bool) -> str:
    out: list[str] = []
    ci = dotall = False
    ascii_only = True  # re.ASCII by default; "(?u)" for Unicode (module docstring)
    # per open group: [case flag, dot-all flag, ASCII flag, at-start on entry]
    stack: list[list[bool]] = []
    at_start = True  # nothing that consumes text yet on this path
    first_end = -1  # the position of the first end anchor ("$", "\\Z")
    first_start = -1  # the position of the first start anchor ("^", "\\A") that may follow text
    i, n = 0, len(p)

    while i < n:
        c = p[i]
        if c == "(":
            if p.startswith("(?#", i):
                k = p.find(")", i)
                if k < 0:
                    raise _Refused("an unclosed comment group", i)
                i = k + 1
                continue
            m = _FLAGS_GROUP.match(p, i)
            if m and (m.group(1) or m.group(2) is not None):
                new_ci, new_dot, new_ascii = _flags(m.group(1), m.group(2) or "", i, ci, dotall, ascii_only)
                if m.group(3) == ")":  # global flags: only at the start, as Python requires
                    if any(t not in ("^", "") for t in out) or stack:
                        raise _Refused("global flags not at the start of the regex", i)
                    ci, dotall, ascii_only = new_ci, new_dot, new_ascii
                else:
                    stack.append([ci, dotall, ascii_only, at_start])
                    ci, dotall, ascii_only = new_ci, new_dot, new_ascii
                    out.append("(?:")
                i = m.end()
                continue
            for prefix, what in (
                ("(?=", "a look-ahead"),
                ("(?!", "a look-ahead"),
                ("(?<=", "a look-behind"),
                ("(?<!", "a look-behind"),
                ("(?>", "an atomic group"),
                ("(?(", "a conditional group"),
                ("(?P=", "a back-reference"),
            ):
                if p.startswith(prefix, i):
                    raise _Refused(f"{what} '{prefix}...)'", i)
            stack.append([ci, dotall, ascii_only, at_start])
            if p.startswith("(?:", i):
                out.append("(?:")
                i += 3
            elif p.startswith("(?P<", i) or p.startswith("(?<", i):
                k = p.find(">", i)
                if k < 0:
                    raise _Refused("an unclosed group name", i)
                out.append("(")
                i = k + 1
            elif p.startswith("(?", i):
                raise _Refused(f"an unknown group '{p[i : i + 3]}'", i)
            else:
                out.append("(")
                i += 1
            continue
        if c == ")":
            if not stack:  # xgrammar reports it
                out.append(")")
                i += 1
                continue
            ci, dotall, ascii_only, _ = stack.pop()
            out.append(")")
            i += 1
            continue
        if c == "|":
            at_start = stack[-1][3] if stack else True
            out.append("|")
            i += 1
            continue
        if c == "^":
            if not at_start and not schema:
                first_start = i if first_start < 0 else first_start
            out.append("^")
            i += 1
            continue
        if c == "$":  # written out of the regex at the end (regex_end_anchor.py)
            out.append("$")
            first_end = i if first_end < 0 else first_end
            i += 1
            continue
        if c in "*+?":
            if c == "+" and out and (out[-1] in ("*", "+", "?") or out[-1][:1] == "{"):
                # Python 3.11's possessive "a*+": it gives nothing back, "a*+a" matches nothing
                raise _Refused(f"a possessive quantifier '{out[-1]}+'", i - len(out[-1]))
            out.append(c)
            i += 1
            continue
        if c == "{":
            m = _REPEAT.match(p, i)
            if m is None or (m.group(1) == "" and m.group(2) is None) or not out:
                out.append("\\{")  # a literal, as Python reads it
                at_start = False
                i += 1
                continue
            lo = int(m.group(1) or 0)
            if m.group(2) is None:
                hi: int | None = lo
            else:
                hi = int(m.group(3)) if m.group(3) else None
            if max(lo, hi or 0) > MAX_REGEX_REPEAT:
                raise _Refused(f"a repeat count above {MAX_REGEX_REPEAT} '{m.group(0)}'", i)
            if hi is not None and hi < lo:
                raise _Refused(f"a repeat with min > max '{m.group(0)}'", i)
            if m.group(2) is None:
                out.append(f"{{{lo}}}")
            else:
                out.append(f"{{{lo},{'' if hi is None else hi}}}")
            i = m.end()
            continue
        if c == "\\":
            kind, text, j = _read_escape(p, i, False, schema)
            if kind == "anchor_start":
                if not at_start and not schema:
                    first_start = i if first_start < 0 else first_start
            elif kind == "anchor_end":
                first_end = i if first_end < 0 else first_end
            else:
                at_start = False
            if kind == "set" and not schema:  # Python's set, as explicit ranges
                out.append("[" + _class_body(class_escape_intervals(text[1], ascii_only), []) + "]")
            elif kind == "prop" or (kind == "char" and ci):
                out.append(_atom_set(text, ci))
            else:
                out.append(text)
            i = j
            continue
        at_start = False
        if c == "[":
            text, i = _class(p, i, ci, schema, ascii_only)
            out.append(text)
            continue
        if c == ".":
            out.append("." if schema else ("[\\s\\S]" if dotall else "[^\\n]"))
            i += 1
            continue
        if c == "\x00":  # a literal NUL (Python reads it as itself; xgrammar refuses it)
            out.append("\\u0000")
        else:
            out.append(_atom_set(re.escape(c), True) if ci and c.lower() != c.upper() else c)
        i += 1
    if schema:
        return "".join(out)  # an unclosed "(" is reported by xgrammar
    out = _strip_edge_anchors(out)
    has_end, has_start = any(t in _END_ANCHORS for t in out), "^" in out
    written: str | None = "".join(out)
    if has_end and has_start:
        return _eliminate_both_anchors(written, first_start, first_end)
    if has_end:
        written = eliminate_end_anchors(written)
    elif has_start:
        written = _eliminate_start_anchors(written)
    if written is None:
        what = "text after an end anchor '$' / '\\Z'" if has_end else "text before a start anchor '^' / '\\A'"
        raise _Refused(
            f"{what} on every path (no text can match)", first_end if has_end else max(first_start, 0)
        )
    return written


def _eliminate_start_anchors(written: str) -> str | None:
    """``written`` (no end anchors) without its start anchors ``^``: read backwards, a ``^`` is
    an end anchor ``\\Z`` (None: no text can match)."""
    backwards = eliminate_end_anchors(reverse_regex(written, {"^": "\\Z"}))
    return None if backwards is None else reverse_regex(backwards)


def _eliminate_both_anchors(written: str, first_start: int, first_end: int) -> str:
    """``written`` with start anchors and end anchors inside, written without either.

    A match is a path through the regex whose start anchors have no text before them and whose
    end anchors have only ``""`` (or, for ``$``, ``"\\n"``) after them; the two conditions bear on
    different anchors. The end anchors are written out first with each ``^`` read as a letter
    that is neither ``""`` nor ``"\\n"``: that keeps every path on which no ``^`` follows an end
    anchor, with its ``^`` in place, and drops the others. The start anchors of the result are
    then written out backwards (:func:`_eliminate_start_anchors`). A dropped path that matches
    has no text before its ``^`` and so none before the end anchor that precedes it: it matches
    ``""`` or ``"\\n"`` only, and those two are put back where Python's ``re.fullmatch`` takes them.

    Raises:
        _Refused: no text can match.
    """
    ends_free = eliminate_end_anchors(written)
    result = None if ends_free is None else _eliminate_start_anchors(ends_free)
    try:
        short = re.compile(written)
    except re.error:
        raise _Refused("a start anchor and an end anchor both inside the regex", first_end) from None
    takes_empty = short.fullmatch("") is not None or result == ""
    parts = [] if result in (None, "") else [result]
    if short.fullmatch("\n") is not None:
        parts.append("\\n")
    if not parts and not takes_empty:
        raise _Refused(
            "text before a start anchor or after an end anchor on every path (no text can match)",
            min(k for k in (first_start, first_end) if k >= 0),
        )
    body = "|".join(parts)
    if takes_empty:
        body = f"(?:{body})?" if body else ""
    return body


def translate_regex(pattern: str, field: str, schema: bool = False) -> str:
    """``pattern`` in the dialect xgrammar compiles with the same meaning (module docstring).

    Args:
        pattern: the regex a request sent.
        field: the request field it came from, named in errors (``"regex"``, a schema path).
        schema: a JSON-schema ``pattern`` / ``patternProperties`` key (ECMA-262 ``.`` and
            anchors, left for the schema rewrites) rather than the ``regex`` parameter.

    Returns:
        The regex to compile (``pattern`` itself when nothing needed writing).

    Raises:
        ValueError: ``"<field>: ... is not supported in a regex ..."`` naming the construct and
            its position (0-based, in ``pattern``).
    """
    try:
        return _translate(pattern, schema)
    except _Refused as e:
        raise ValueError(
            f"{field}: {e.what} at position {e.pos} of the regex {_shown(pattern)} is not supported "
            "in constrained decoding."
        ) from None
    except ValueError as e:
        raise ValueError(f"{field}: invalid regex {_shown(pattern)}: {e}.") from None


def _shown(pattern: Any) -> str:
    text = str(pattern)
    return repr(text if len(text) <= 80 else text[:77] + "...")


def regex_format_checker(cls: Any) -> Any:
    """The meta-schema's format checker of the draft ``cls``, with ``format: "regex"`` (a
    ``pattern``, a ``patternProperties`` key) read by the ``regex`` package: ECMA-262 Unicode
    property escapes (``\\p{L}``) are valid there, which Python's ``re`` refuses (the regex is
    translated for xgrammar later, :func:`translate_regex`).

    Args:
        cls: a ``jsonschema`` validator class (``Draft202012Validator``...).

    Returns:
        A ``jsonschema.FormatChecker`` for ``cls.check_schema(..., format_checker=...)``.
    """
    import regex
    from jsonschema import FormatChecker

    checker = FormatChecker(formats=())
    checker.checkers = dict(cls.FORMAT_CHECKER.checkers)

    def is_regex(instance: Any) -> bool:
        if isinstance(instance, str):
            regex.compile(instance)
        return True

    checker.checkers["regex"] = (is_regex, regex.error)
    return checker

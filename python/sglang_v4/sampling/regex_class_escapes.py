"""Python's reading of the class escapes ``\\d \\D \\w \\W \\s \\S`` for the ``regex`` parameter.

xgrammar reads these escapes as ECMA-262 does: ``\\d`` / ``\\w`` ASCII only, ``\\s`` ECMA-262 white
space (which takes U+FEFF and not U+001C..U+001F or U+0085). The ``regex`` parameter reads them
as Python's ``re`` does (Python 3 ``re`` documentation, "Regular Expression Syntax"), with
``re.ASCII`` by default (:mod:`sglang_v4.sampling.regex_dialect`; ``(?a)`` states it: ``[0-9]``,
``[a-zA-Z0-9_]``, ``[ \\t\\n\\r\\f\\v]``) and Python's Unicode reading under ``(?u)``
(``\\d`` any decimal digit, ``\\w`` any character of ``str.isalnum`` and ``_``, ``\\s`` the
characters of ``str.isspace``). Each escape is
written as the explicit code point intervals Python's ``re`` matches, read from ``re`` itself;
:func:`char_set` reads the intervals of any one-character regex from the ``regex`` package.
"""

from __future__ import annotations

import functools
import re

__all__ = ["all_chars", "char_set", "class_escape_intervals", "complement_intervals", "union_intervals"]


def all_chars() -> str:
    """Every code point but the surrogates, in order (the text the ``regex`` package scans)."""
    return "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, 0x110000)))


@functools.lru_cache(maxsize=256)
def char_set(regex_class: str, ignore_case: bool) -> tuple[tuple[int, int], ...]:
    """The code point intervals that the one-character regex ``regex_class`` (``regex`` package
    syntax) matches, case-insensitively when ``ignore_case``.

    Raises ValueError (the ``regex`` package's message) when ``regex_class`` does not compile."""
    import regex

    flags = regex.V0 | (regex.IGNORECASE if ignore_case else 0)
    try:
        compiled = regex.compile(f"(?:{regex_class})+", flags)
    except regex.error as e:
        raise ValueError(str(e)) from None
    text, out = all_chars(), []
    for m in compiled.finditer(text):
        lo, hi = ord(text[m.start()]), ord(text[m.end() - 1])
        if lo < 0xD800 < hi:  # the run crosses the removed surrogates
            out += [(lo, 0xD7FF), (0xE000, hi)]
        else:
            out.append((lo, hi))
    return tuple(out)


@functools.lru_cache(maxsize=16)
def class_escape_intervals(letter: str, ascii_only: bool) -> tuple[tuple[int, int], ...]:
    """The code point intervals (inclusive ``(lo, hi)`` pairs, ascending) that Python's ``re``
    matches with the class escape ``\\<letter>`` (``letter`` one of ``dDwWsS``), with ``re.ASCII``
    when ``ascii_only``. Surrogates (U+D800..U+DFFF) are left out: they are no text.

    Raises ValueError when ``letter`` is not a class escape letter."""
    if letter not in "dDwWsS" or len(letter) != 1:
        raise ValueError(f"letter: not a class escape letter: {letter!r}")
    if letter.isupper():  # the complement of the lower-case escape
        return complement_intervals(class_escape_intervals(letter.lower(), ascii_only))
    compiled = re.compile(f"\\{letter}+", re.ASCII if ascii_only else 0)
    out: list[tuple[int, int]] = []
    for lo, hi in ((0, 0xD7FF), (0xE000, 0x10FFFF)):
        text = "".join(map(chr, range(lo, hi + 1)))
        for m in compiled.finditer(text):
            out.append((lo + m.start(), lo + m.end() - 1))
    return tuple(out)


def union_intervals(*sets: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """The union of code point interval sets (inclusive ``(lo, hi)`` pairs), ascending and merged
    (adjacent intervals joined)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(iv for ivs in sets for iv in ivs):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def complement_intervals(ivs: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Every code point but the surrogates (U+D800..U+DFFF) that ``ivs`` (ascending, disjoint,
    inclusive ``(lo, hi)`` pairs) leaves out, as intervals."""
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in (*ivs, (0x110000, 0x110000)):
        for a, b in ((nxt, min(lo - 1, 0xD7FF)), (max(nxt, 0xE000), lo - 1)):
            if a <= b:
                out.append((a, b))
        nxt = hi + 1
    return tuple(out)

"""End anchors (``$``, ``\\Z``) inside a full-match regex, written out of it.

xgrammar matches a regex as a whole and has no end anchor: it ignored a ``$`` that text follows,
so ``(a$|b)c`` took ``"ac"``. Python's ``re.fullmatch`` reads ``$`` as "the rest of the input is
empty or one newline" and ``\\Z`` as "the rest is empty", so ``(a$|b)c`` matches only ``"bc"``
(the ``a$`` branch is dead), ``(a$|b)\\n?`` matches ``"a"``, ``"a\\n"``, ``"b"`` and ``"b\\n"``,
and ``(a$)*`` matches ``""`` and ``"a"`` only; in a JSON-schema ``pattern`` (ECMA-262) ``$`` is
``\\Z``. :func:`eliminate_end_anchors` writes such a regex without anchors, in the same language.

Each part ``N`` of the regex is read as three anchor-free languages:

* ``F``: what ``N`` matches on paths without an anchor;
* ``A0``: what ``N`` matches on paths with a ``$`` and only ``$`` after it inside ``N``: the rest
  of the input after ``N`` must be ``""`` or ``"\\n"``;
* ``A1``: what ``N`` matches on paths whose anchors need the rest after ``N`` to be ``""``.

A sequence ``N M`` combines them (``eps(M)``: ``M`` can match ``""``; ``nl(M)``: ``"\\n"``)::

    F  = F_N F_M
    A0 = A0_N [eps without \\Z (M)]  |  F_N A0_M
    A1 = A0_N "\\n" [nl(M)]  |  A0_N [eps(M) only through \\Z]  |  A1_N [eps(M)]  |  F_N A1_M

an alternation takes the union of each, and a repeat ``N{lo,hi}`` is free iterations, then one
anchored iteration, then iterations that match ``""`` (and one ``"\\n"``). The whole regex is
``F | A0 | A1`` (the input ends after it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["eliminate_end_anchors", "reverse_regex"]


@dataclass(frozen=True)
class _Lang:
    """An anchor-free language: its regex text (``None``: empty set; ``""``: only ``""``),
    whether it holds ``""`` and whether it holds ``"\\n"``."""

    text: str | None
    eps: bool = False
    nl: bool = False


_EMPTY = _Lang(None)
_EPS = _Lang("", eps=True)
_NL = _Lang("\\n", nl=True)


def _wrap(text: str) -> str:
    return text if _is_atom(text) else f"(?:{text})"


def _is_atom(text: str) -> bool:
    """``text`` is one character, escape, class or group (a repeat applies to all of it)."""
    if len(text) == 1 or (len(text) == 2 and text[0] == "\\"):
        return True
    if text.startswith("(?:") and text.endswith(")"):
        toks = _tokens(text)
        depth = 0
        for k, ch in enumerate(toks):
            depth += ch.startswith("(")
            depth -= ch == ")"
            if depth == 0 and k < len(toks) - 1:
                return False
        return True
    return text.startswith("[") and _class_end(text, 0) == len(text)


def _has_top_alt(text: str) -> bool:
    """``text`` has a ``|`` outside its groups (it needs a group to be concatenated)."""
    depth = 0
    for ch in _tokens(text):
        depth += ch.startswith("(")
        depth -= ch == ")"
        if ch == "|" and depth == 0:
            return True
    return False


def _cat(*parts: _Lang) -> _Lang:
    if any(p.text is None for p in parts):
        return _EMPTY
    text = "".join(_wrap(p.text) if _has_top_alt(p.text) else p.text for p in parts if p.text)
    eps = all(p.eps for p in parts)
    nl = any(p.nl and all(q.eps for j, q in enumerate(parts) if j != i) for i, p in enumerate(parts))
    return _Lang(text, eps, nl)


def _union(*parts: _Lang) -> _Lang:
    live = [p for p in parts if p.text is not None]
    if not live:
        return _EMPTY
    texts: list[str] = []
    for p in live:
        if p.text and p.text not in texts:
            texts.append(p.text)
    eps = any(p.eps for p in live)
    nl = any(p.nl for p in live)
    if not texts:
        return _Lang("", eps, nl)
    body = texts[0] if len(texts) == 1 else "(?:" + "|".join(texts) + ")"
    if any(p.text == "" for p in live):
        body = _wrap(body) + "?"
    return _Lang(body, eps, nl)


def _repeat(x: _Lang, lo: int, hi: int | None) -> _Lang:
    """``x{lo,hi}`` (``hi`` None: unbounded)."""
    if hi is not None and (hi < lo or hi == 0):
        return _EPS if hi == 0 else _EMPTY
    if x.text is None:
        return _EPS if lo == 0 else _EMPTY
    if x.text == "":
        return _EPS
    if (lo, hi) == (1, 1):
        return x
    q = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
    if q is None:
        q = f"{{{lo}}}" if lo == hi else f"{{{lo},{'' if hi is None else hi}}}"
    eps = lo == 0 or x.eps
    nl = x.nl and (lo <= 1 or x.eps)
    return _Lang(_wrap(x.text) + q, eps, nl)


@dataclass(frozen=True)
class _Node:
    """A regex part as ``(F, A0, A1)`` (module docstring)."""

    f: _Lang
    a0: _Lang = _EMPTY
    a1: _Lang = _EMPTY

    def eps_loose(self) -> bool:
        return self.f.eps or self.a0.eps

    def eps_any(self) -> bool:
        return self.eps_loose() or self.a1.eps

    def nl(self) -> bool:
        return self.f.nl or self.a0.nl or self.a1.nl


def _flag(b: bool) -> _Lang:
    return _EPS if b else _EMPTY


def _seq(n: _Node, m: _Node) -> _Node:
    f = _cat(n.f, m.f)
    a0 = _union(_cat(n.a0, _flag(m.eps_loose())), _cat(n.f, m.a0))
    a1 = _union(
        _cat(n.a0, _NL, _flag(m.nl())),
        _cat(n.a0, _flag(m.eps_any() and not m.eps_loose())),
        _cat(n.a1, _flag(m.eps_any())),
        _cat(n.f, m.a1),
    )
    return _Node(f, a0, a1)


def _alt(nodes: list[_Node]) -> _Node:
    return _Node(
        _union(*(x.f for x in nodes)), _union(*(x.a0 for x in nodes)), _union(*(x.a1 for x in nodes))
    )


def _span(lo: int, hi: int | None) -> tuple[int, int | None] | None:
    """``(lo, hi)`` clipped at 0, or None when empty."""
    lo = max(lo, 0)
    if hi is not None and hi < lo:
        return None
    return lo, hi


def _free(n: _Node, lo: int, hi: int | None) -> _Lang:
    s = _span(lo, hi)
    return _EMPTY if s is None else _repeat(n.f, *s)


def _rep(n: _Node, lo: int, hi: int | None) -> _Node:
    """``n{lo,hi}``: ``k`` free iterations, one anchored one (or an anchored one and one taking
    ``"\\n"``), then iterations matching ``""``."""
    f = _repeat(n.f, lo, hi)

    def upto(used: int) -> int | None:
        return None if hi is None else hi - used

    fill_loose, fill_any = n.eps_loose(), n.eps_any()
    kmin_l = 0 if fill_loose else lo - 1
    kmin_a = 0 if fill_any else lo - 1
    kmin_a2 = 0 if fill_any else lo - 2
    a0 = _cat(_free(n, kmin_l, upto(1)), n.a0)
    a1 = _union(
        _cat(_free(n, kmin_a, upto(1)), n.a1),
        _cat(_free(n, kmin_a2, upto(2)), n.a0, _NL, _flag(n.nl())),
        _cat(_free(n, 0, upto(2)), n.a0, _flag(fill_any and not fill_loose)),
    )
    return _Node(f, a0, a1)


# ---------------------------------------------------------------- reading the regex


def _class_end(p: str, i: int) -> int:
    """The end of the class at ``p[i] == "["``."""
    j = i + 1
    if p[j : j + 1] == "^":
        j += 1
    if p[j : j + 1] == "]":
        j += 1
    while j < len(p) and p[j] != "]":
        j += 2 if p[j] == "\\" else 1
    return j + 1


def _escape_end(p: str, i: int) -> int:
    e = p[i + 1 : i + 2]
    if e in ("x", "u", "U"):
        return i + 2 + {"x": 2, "u": 4, "U": 8}[e]
    if e == "0":
        j = i + 2
        while j < min(len(p), i + 4) and p[j] in "01234567":
            j += 1
        return j
    if e == "c":
        return i + 3
    return i + 2


def _tokens(p: str) -> list[str]:
    out, i = [], 0
    while i < len(p):
        if p.startswith("(?:", i):
            out.append("(?:")
            i += 3
        elif p[i] == "\\":
            j = _escape_end(p, i)
            out.append(p[i:j])
            i = j
        elif p[i] == "[":
            j = _class_end(p, i)
            out.append(p[i:j])
            i = j
        elif p[i] == "{" and (m := _REPEAT.match(p, i)):
            out.append(m.group(0))
            i = m.end()
        else:
            out.append(p[i])
            i += 1
    return out


_REPEAT = re.compile(r"\{(\d+)(?:(,)(\d*))?\}")
_CONTROL = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v", "a": "\a", "e": "\x1b"}


def _matches_newline(tok: str) -> bool:
    """Whether the one-character token ``tok`` (a literal, escape or class) matches ``"\\n"``."""
    if tok == "\n":
        return True
    if tok.startswith("\\") and len(tok) >= 2 and tok[1] in _CONTROL:
        return _CONTROL[tok[1]] == "\n"
    if tok.startswith("\\c"):
        return tok[2:3].upper() == "J"
    try:
        return re.fullmatch(tok, "\n") is not None
    except re.error:
        return False


class _Reader:
    def __init__(self, p: str, strict_dollar: bool) -> None:
        self.toks = _tokens(p)
        self.i = 0
        self.strict_dollar = strict_dollar

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def alt(self) -> _Node:
        branches = [self.seq()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.seq())
        return branches[0] if len(branches) == 1 else _alt(branches)

    def seq(self) -> _Node:
        node = _Node(_EPS)
        while self.peek() not in (None, "|", ")"):
            node = _seq(node, self.item())
        return node

    def item(self) -> _Node:
        node = self.atom()
        while True:
            t = self.peek()
            if t in ("*", "+", "?"):
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[t]
            elif t is not None and (m := _REPEAT.fullmatch(t)):
                lo = int(m.group(1))
                hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
            else:
                return node
            self.i += 1
            if self.peek() == "?":  # a lazy quantifier: the same language
                self.i += 1
            node = _rep(node, lo, hi)

    def atom(self) -> _Node:
        t = self.toks[self.i]
        self.i += 1
        if t in ("(", "(?:"):
            node = self.alt()
            if self.peek() != ")":
                raise ValueError("an unclosed '('")
            self.i += 1
            return node
        if t == "$" and not self.strict_dollar:
            return _Node(_EMPTY, _EPS, _EMPTY)
        if t == "$":
            return _Node(_EMPTY, _EMPTY, _EPS)
        if t == "\\Z":
            return _Node(_EMPTY, _EMPTY, _EPS)
        return _Node(_Lang(t, False, _matches_newline(t)))


def eliminate_end_anchors(p: str, strict_dollar: bool = False) -> str | None:
    """``p`` (xgrammar's dialect, with ``$`` and ``\\Z`` as end anchors, any ``^`` already
    dropped) written without them, matching the same texts as a whole as Python's
    ``re.fullmatch`` does (module docstring).

    Args:
        p: the regex; a ``$`` outside a class and unescaped is an anchor, ``\\Z`` too.
        strict_dollar: read ``$`` as ``\\Z`` (the end of the input only: ECMA-262 without the
            multi-line flag, a JSON-schema ``pattern``) rather than Python's "the end, or before
            a final newline".

    Returns:
        The anchor-free regex; None when no text can match (text follows an anchor on every
        path).

    Raises:
        ValueError: unbalanced parentheses.
    """
    reader = _Reader(p, strict_dollar)
    node = reader.alt()
    if reader.peek() is not None:
        raise ValueError("an unmatched ')'")
    whole = _union(node.f, node.a0, node.a1)
    return whole.text


def reverse_regex(p: str, swap: dict[str, str] | None = None) -> str:
    """``p`` (xgrammar's dialect) read backwards: a regex whose texts are ``p``'s reversed (each
    sequence in reverse order, groups reversed inside, repeats kept on their atom; capturing
    groups become non-capturing, lazy repeats greedy: the language is what counts).

    A start anchor ``^`` in ``p`` is an end anchor of the reversed regex: with ``swap={"^":
    "\\\\Z"}``, :func:`eliminate_end_anchors` writes start anchors out too.

    Args:
        p: the regex.
        swap: tokens written as others (an anchor for another), or None.

    Raises:
        ValueError: unbalanced parentheses.
    """
    toks, pos = _tokens(p), 0
    swap = swap or {}

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    def alt() -> str:
        nonlocal pos
        branches = [seq()]
        while peek() == "|":
            pos += 1
            branches.append(seq())
        return "|".join(branches)

    def seq() -> str:
        items = []
        while peek() not in (None, "|", ")"):
            items.append(item())
        return "".join(reversed(items))

    def item() -> str:
        nonlocal pos
        t = toks[pos]
        pos += 1
        if t in ("(", "(?:"):
            inner = alt()
            if peek() != ")":
                raise ValueError("an unclosed '('")
            pos += 1
            atom = f"(?:{inner})"
        else:
            atom = swap.get(t, t)
        while (q := peek()) is not None and (q in ("*", "+", "?") or _REPEAT.fullmatch(q)):
            atom += q
            pos += 1
            if peek() == "?":  # a lazy repeat: the same language
                pos += 1
        return atom

    out = alt()
    if peek() is not None:
        raise ValueError("an unmatched ')'")
    return out

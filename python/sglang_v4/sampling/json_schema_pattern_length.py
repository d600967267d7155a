"""A ``pattern`` beside ``minLength`` / ``maxLength`` read as one constraint where the two meet.

JSON Schema applies a string node's ``pattern`` and its length bounds together (Validation
sections 6.3.1-6.3.3). xgrammar (0.2.x) compiles only the ``pattern`` and drops the bounds
(mlc-ai/xgrammar#749, #895), and two regexes cannot in general be joined into one without the
look-arounds its regex subset lacks, so such a node is refused by name
(:mod:`sglang_v4.sampling.json_schema_support`). A fully anchored pattern (``^...$``, no top-level
alternation) has a known span of match lengths (Python's regex parser: each match has between
``wmin`` and ``wmax`` characters, code points as JSON Schema counts them), and two common shapes
meet the bounds exactly:

* every match's length already lies within the bounds (``^\\d{3}-\\d{4}$`` with
  ``maxLength: 8``): the bounds say nothing more and are dropped;
* the body is one repetition of an element whose matches all have one length ``k``, between
  parts of fixed width (``^[a-z]+$``, ``^(?:ab|cd){2,}$``, ``^[A-Z][a-z]*$``; pydantic's
  ``constr(pattern=..., max_length=...)``): ``P E{a,b} S`` within ``lo..hi`` characters, ``f``
  of them in ``P`` and ``S``, is ``P E{max(a, ceil((lo-f)/k)), min(b, floor((hi-f)/k))} S``.

Every other combination is left as it is (and refused later). One of the rewrites of
:func:`~sglang_v4.sampling.json_schema_rewrite.normalize_json_schema`, applied to the pattern as
the client wrote it, before its translation into xgrammar's dialect.
"""

from __future__ import annotations

import re
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

__all__ = ["pattern_within_length_bounds"]

#: the quantifier ending a repetition body, lazy or not (``{,n}`` is not one in ECMA 262)
_QUANTIFIER = re.compile(r"(?:\*|\+|\?|\{\d+\}|\{\d+,\}|\{\d+,\d+\})\??\Z")


def _bound(node: dict[str, Any], key: str) -> int | None:
    v = node.get(key)
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    return None


def _anchored_body(pattern: str) -> tuple[str, Any] | None:
    """The text and parsed items between a leading ``^`` and a trailing ``$`` of ``pattern``,
    or ``None`` where it is not of that form (or Python's parser refuses it)."""
    if "{," in pattern or not pattern.startswith("^") or not pattern.endswith("$"):
        return None
    body = pattern[1:-1]
    if body.endswith("\\") and (len(body) - len(body.rstrip("\\"))) % 2 == 1:
        return None  # the ``$`` is escaped: a literal dollar, no anchor
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, OverflowError, RecursionError):
        return None
    items = list(parsed)
    at = sre_constants.AT
    if (
        len(items) < 2
        or items[0] != (at, sre_constants.AT_BEGINNING)
        or items[-1] != (at, sre_constants.AT_END)
    ):
        return None
    inner = items[1:-1]
    if any(op == at for op, _ in inner) or re.search(r"\\[1-9k]", body):
        return None  # inner anchors or back-references: no plain reading of lengths
    sub = sre_parse.SubPattern(parsed.state, inner)
    return body, sub


#: the longest body searched for a repetition between fixed-width parts (quadratic in its length)
_MAX_SPLIT_BODY = 96


def _shape(value: Any) -> Any:
    """Parsed regex items as plain nested tuples (Python's ``SubPattern`` compares by identity)."""
    if isinstance(value, sre_parse.SubPattern):
        return ("sub", tuple(_shape(v) for v in value.data))
    if isinstance(value, (list, tuple)):
        return tuple(_shape(v) for v in value)
    return value


def _fixed_width(text: str) -> tuple[list[Any], int] | None:
    """The parsed items of ``text`` and its one match width, or ``None`` where it does not parse
    or its matches have several widths."""
    try:
        items = list(sre_parse.parse(text))
    except (re.error, OverflowError, RecursionError):
        return None
    lo, hi = sre_parse.SubPattern(sre_parse.State(), items).getwidth()
    return (items, lo) if lo == hi else None


def _is_repeat(text: str, a: int, b: int) -> bool:
    """Whether ``text`` parses to one repetition of ``a`` to ``b`` copies."""
    try:
        items = list(sre_parse.parse(text))
    except (re.error, OverflowError, RecursionError):
        return False
    repeat = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT)
    return len(items) == 1 and items[0][0] in repeat and items[0][1][:2] == (a, b)


def _one_repetition(body: str, sub: Any) -> tuple[str, str, int, int, int, str, int] | None:
    """``body`` as ``P E{a,b} S``: fixed-width texts ``P`` and ``S`` around one repetition of a
    fixed-width element ``E`` (width ``k`` >= 1), split where the three texts parse to the very
    items of the whole (so no split cuts an escape, class or group). Returns ``(P, E, a, b, k, S,
    width of P and S)``, or ``None`` where the body has no such form."""
    whole = list(sub)
    repeats = [
        i for i, (op, _) in enumerate(whole) if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT)
    ]
    if len(body) > _MAX_SPLIT_BODY or not repeats:
        return None
    for r in repeats:
        a, b, element = whole[r][1]
        k, k_max = element.getwidth()
        if k != k_max or k < 1:
            continue
        for i in range(len(body) + 1):
            prefix = _fixed_width(body[:i])
            if prefix is None or _shape(prefix[0]) != _shape(whole[:r]):
                continue
            for j in range(i + 1, len(body) + 1):
                quantifier = _QUANTIFIER.search(body, i, j)
                suffix = _fixed_width(body[j:])
                if quantifier is None or suffix is None or _shape(suffix[0]) != _shape(whole[r + 1 :]):
                    continue
                elem = _fixed_width(body[i : quantifier.start()])
                if elem is None or elem[1] != k or not elem[0] or not _is_repeat(body[i:j], a, b):
                    continue
                return body[:i], body[i : quantifier.start()], a, b, k, body[j:], prefix[1] + suffix[1]
    return None


def pattern_within_length_bounds(node: dict[str, Any]) -> None:
    """Fold, in place, the ``minLength`` / ``maxLength`` of a string node into its ``pattern``
    where the two meet exactly (module docstring): the bounds are dropped when every match of the
    anchored pattern already has a length within them, or the pattern's one repetition gets the
    intersected count. Other nodes (no string type, a ``format``, bounds that are no
    non-negative integers, an unanchored or other pattern) are left as they are.
    """
    t, pattern = node.get("type"), node.get("pattern")
    if not (t == "string" or (isinstance(t, list) and "string" in t)) or not isinstance(pattern, str):
        return
    if "format" in node or not any(k in node for k in ("minLength", "maxLength")):
        return
    lo, hi = _bound(node, "minLength") if "minLength" in node else 0, _bound(node, "maxLength")
    if lo is None or ("maxLength" in node and (hi is None or hi < lo)):
        return
    found = _anchored_body(pattern)
    if found is None:
        return
    body, sub = found
    wmin, wmax = sub.getwidth()
    if lo <= wmin and (hi is None or (wmax < sre_constants.MAXREPEAT and wmax <= hi)):
        node.pop("minLength", None)
        node.pop("maxLength", None)
        return
    split = _one_repetition(body, sub)
    if split is None:
        return
    prefix, elem_text, a, b, k, suffix, fixed = split
    lo, hi = max(0, lo - fixed), None if hi is None else hi - fixed
    if hi is not None and hi < 0:
        return  # shorter than the fixed parts: the node admits no string (left to the later checks)
    new_lo = max(a, -(-lo // k))
    new_hi = hi // k if hi is not None else None
    if b < sre_constants.MAXREPEAT:
        new_hi = b if new_hi is None else min(b, new_hi)
    if new_hi is not None and new_hi < new_lo:
        return  # no count fits: the node admits no string (left to the later checks)
    node.pop("minLength", None)
    node.pop("maxLength", None)
    count = f"{{{new_lo},{'' if new_hi is None else new_hi}}}"
    node["pattern"] = f"^{prefix}(?:{elem_text}){count}{suffix}$"

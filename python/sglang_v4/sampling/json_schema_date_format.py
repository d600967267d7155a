"""``format: "date"`` / ``"date-time"`` / ``"time"`` written as an exact RFC 3339 ``pattern``.

A ``string`` node's ``format`` of these becomes a ``pattern`` admitting exactly the calendar dates
RFC 3339 (section 5.6, ``date-mday`` "based on month/year") allows: xgrammar's built-in format
regexes take any day ``01``-``31`` in every month (``"2023-02-31"``, ``"2661-11-31"``), which JSON
Schema's ``date`` format, pydantic and Python's ``datetime`` reject. The pattern keeps a subset
every common parser reads: years ``0001``-``9999`` (Python's ``date`` has no year 0), Gregorian
leap years for February 29th, seconds ``00``-``59`` (RFC 3339's leap second ``60`` is refused by
pydantic and ``datetime``), ``T`` / ``Z`` in upper case, an offset ``Z`` or ``+hh:mm`` /
``-hh:mm``. A node that also sets ``pattern``, or length bounds that do not fold into the
format's pattern, is left alone (those are refused by name later:
:mod:`sglang_v4.sampling.json_schema_support`).

One of the rewrites of :func:`~sglang_v4.sampling.json_schema_rewrite.normalize_json_schema`.
"""

from __future__ import annotations

from typing import Any

from sglang_v4.sampling.json_schema_pattern_length import pattern_within_length_bounds

__all__ = ["DATE_FORMAT_PATTERNS", "exact_date_format", "exact_format"]

# RFC 3339 section 5.6 (``full-date``, ``full-time``), written without look-arounds or
# non-capturing groups (xgrammar's regex subset). Years 0001-9999.
_YEAR = r"([1-9]\d{3}|0[1-9]\d{2}|00[1-9]\d|000[1-9])"
# Every month's days but February 29th; then February 29th of Gregorian leap years (divisible by 4
# and not by 100, or divisible by 400; 0000 left out).
_DATE = (
    rf"({_YEAR}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8]))"
    r"|(\d{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)-02-29)"
)
# The fraction is ``(\.\d+|)``: xgrammar 0.2.9 compiles ``(\.\d+)?`` inside a pattern to a regex
# that also takes the digits without the dot (``12:00:001234Z``).
_TIME = r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+|)(Z|[+-]([01]\d|2[0-3]):[0-5]\d)"
#: The ``pattern`` each rewritten ``format`` becomes (module docstring).
DATE_FORMAT_PATTERNS = {
    "date": f"^{_DATE}$",
    "date-time": f"^{_DATE}T{_TIME}$",
    "time": f"^{_TIME}$",
}


def exact_format(node: dict[str, Any], patterns: dict[str, str]) -> None:
    """Replace, in place, a ``string`` node's ``format`` that ``patterns`` names by its exact
    ``pattern`` (``patterns[format]``); a node that is no string, has another format, also sets
    ``pattern``, or sets ``minLength`` / ``maxLength`` that do not fold into the format's pattern
    (:mod:`sglang_v4.sampling.json_schema_pattern_length`: the date's ten characters within the
    bounds) is left as it is (those are refused by name later:
    :mod:`sglang_v4.sampling.json_schema_support`)."""
    fmt, t = node.get("format"), node.get("type")
    is_string = t == "string" or (isinstance(t, list) and "string" in t)
    if not isinstance(fmt, str) or fmt not in patterns or not is_string:
        return
    if "pattern" in node:
        return
    exact = {k: v for k, v in node.items() if k != "format"}
    exact["pattern"] = patterns[fmt]
    pattern_within_length_bounds(exact)
    if any(k in exact for k in ("minLength", "maxLength")):
        return  # bounds that do not fold into the format's pattern
    node.clear()
    node.update(exact)


def exact_date_format(node: dict[str, Any]) -> None:
    """Replace, in place, a ``string`` node's ``format`` of :data:`DATE_FORMAT_PATTERNS` by its
    exact ``pattern`` (module docstring); other nodes are left as they are."""
    exact_format(node, DATE_FORMAT_PATTERNS)

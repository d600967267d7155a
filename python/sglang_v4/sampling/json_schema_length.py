"""``minLength`` / ``maxLength`` written as a regex over the JSON text of the string.

JSON Schema counts a string's length in decoded characters (Unicode code points; Validation
section 6.3.1): ``"\\n\\n"`` (six JSON characters) has length 2 and fits ``"maxLength": 2``.
xgrammar (0.2.9) compiles a length-bounded ``string`` to ``"`` then ``{m,n}`` copies of
``[^"\\\\\\r\\n]`` then ``"``: no escape sequence at all (``"\\n\\n"``, ``"\\""``, ``"\\u00e9"``
were refused), while the raw control characters U+0000-U+001F but CR / LF were taken, which no
JSON parser reads (RFC 8259 section 7: they must be escaped).

:func:`length_bounds_as_pattern` replaces the two keywords of a ``string`` node by a ``pattern``
whose text is the regex of the JSON string body: ``m`` to ``n`` of (a character that needs no
escape | a two-character escape ``\\"`` ``\\\\`` ``\\/`` ``\\b`` ``\\f`` ``\\n`` ``\\r``
``\\t`` | a ``\\uXXXX`` escape of a code point outside the surrogates U+D800-U+DFFF). Each
alternative decodes to exactly one code point, so the count is the decoded length. A surrogate
pair escape (one code point in twelve JSON characters) is left out: the character can still be
written as itself in UTF-8.

The regex ends its class of control characters with U+001F written as itself (not as ``\\x1f``): xgrammar
reads a ``pattern`` holding a character outside printable ASCII with its general regex
compiler, which keeps the escapes, instead of its JSON-string one, which strips ``"`` and ``\\``
from every character match (and the escape alternatives with them: the grammar would then be
the narrower escape-free one, still valid JSON).
"""

from __future__ import annotations

from typing import Any

__all__ = ["JSON_STRING_CHAR", "length_bounds_as_pattern"]

#: One decoded character of a JSON string body, as JSON text (module docstring). The class's
#: range of control characters is ``\x00`` to a raw U+001F (xgrammar refuses a raw NUL, and a
#: raw newline in a class).
JSON_STRING_CHAR = (
    '(?:[^"\\\\\\x00-\x1f]|\\\\["\\\\/bfnrt]|\\\\u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))'
)


def _is_string_type(t: Any) -> bool:
    return t == "string" or (isinstance(t, list) and "string" in t)


def length_bounds_as_pattern(node: dict[str, Any]) -> None:
    """Replace, in place, the ``minLength`` / ``maxLength`` of a node whose ``type`` is
    or lists ``"string"`` (and that sets no ``pattern`` / ``format``, refused beside them later) by the
    equivalent ``pattern`` ``^(JSON_STRING_CHAR){m,n}$`` (module docstring). Bounds that are not
    non-negative integers are left for the schema check to report.
    """
    if not _is_string_type(node.get("type")) or any(k in node for k in ("pattern", "format")):
        return
    lo, hi = node.get("minLength", 0), node.get("maxLength")
    if not isinstance(lo, int) or isinstance(lo, bool) or lo < 0:
        return
    if hi is not None and (not isinstance(hi, int) or isinstance(hi, bool) or hi < lo):
        return
    if "minLength" not in node and "maxLength" not in node:
        return
    node.pop("minLength", None)
    node.pop("maxLength", None)
    node["pattern"] = f"^{JSON_STRING_CHAR}{{{lo},{'' if hi is None else hi}}}$"

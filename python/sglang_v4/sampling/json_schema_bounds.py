"""Numeric bounds of a JSON schema node written the way xgrammar compiles them.

Two spellings of a bound are valid JSON Schema but were refused by xgrammar (0.2.x) at compile
time, so a request carrying them got a 400 for a schema the grammar can enforce:

* Draft 4's boolean ``exclusiveMinimum`` / ``exclusiveMaximum`` (``{"minimum": 0,
  "exclusiveMinimum": true}``: "greater than 0"; OpenAPI 3.0 writes bounds so) -- xgrammar: "Value
  must be a number". From Draft 6 on the keyword holds the bound itself, so ``true`` becomes
  ``"exclusiveMinimum": <minimum>`` (the ``minimum`` dropped) and ``false`` is dropped (it only
  says the ``minimum`` is inclusive, which it is anyway). A boolean keyword reaches here only
  when the schema names Draft 4 (or 3) in ``$schema``: under the default Draft 2020-12 the
  meta-schema check refuses it first.
* A bound with a fractional part on an ``integer`` node (``{"type": "integer", "minimum": 0.5}``,
  which means ``>= 1``) -- xgrammar: "Integer constraint must be a whole number". It becomes the
  nearest whole bound with the same set of integers: ``minimum`` rounds up, ``maximum`` down,
  ``exclusiveMinimum: x`` becomes ``minimum: floor(x) + 1`` and ``exclusiveMaximum: x``
  becomes ``maximum: ceil(x) - 1`` (a tighter existing bound is kept). Whole-number bounds
  (``3`` or ``3.0``) are left as they are.
* A bound outside the signed 64-bit range on an ``integer`` node (``{"type": "integer",
  "maximum": 1e32}``; protobuf's ``int64`` schemas write ``"exclusiveMaximum":
  9223372036854776000``, uint64 ones ``"maximum": 18446744073709551615``) -- xgrammar: "Integer
  exceeds maximum limit", so a valid schema got a 400. xgrammar writes integer ranges over
  int64 only; such a bound is clamped to the int64 edge (``maximum: 2**63 - 1`` /
  ``minimum: -2**63``), which every integer the grammar can write satisfies: the answer is still
  valid, only integers past int64 are not offered. A bound that leaves no int64 value
  (``minimum: 2**63``) is left as it is and refused.

Both integer rewrites apply to ``"type": "integer"`` and to a type list that admits integers but
not ``number`` (``["integer", "null"]``: the bounds constrain only its integers, which xgrammar
compiles the same way); beside ``number`` a bound keeps its meaning for non-integers and is left
alone. A type list naming both ``integer`` and ``number`` (``["integer", "number"]``: every
integer is a number, so the list means ``number``) is written without ``integer``: xgrammar
applied the integer rules to its bounds and refused ``"minimum": 0.5`` there.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["rewrite_numeric_bounds"]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _draft4_exclusive(node: dict[str, Any], exclusive: str, inclusive: str) -> None:
    flag = node.get(exclusive)
    if not isinstance(flag, bool):
        return
    del node[exclusive]
    if flag and _number(node.get(inclusive)):
        node[exclusive] = node.pop(inclusive)


def _whole_integer_bounds(node: dict[str, Any]) -> None:
    def fractional(key: str) -> bool:
        v = node.get(key)
        return isinstance(v, float) and math.isfinite(v) and not v.is_integer()

    low: list[int] = []
    high: list[int] = []
    if fractional("minimum"):
        low.append(math.ceil(node.pop("minimum")))
    if fractional("exclusiveMinimum"):
        low.append(math.floor(node.pop("exclusiveMinimum")) + 1)
    if fractional("maximum"):
        high.append(math.floor(node.pop("maximum")))
    if fractional("exclusiveMaximum"):
        high.append(math.ceil(node.pop("exclusiveMaximum")) - 1)
    if low:
        if _number(node.get("minimum")):
            low.append(math.ceil(node["minimum"]))
        node["minimum"] = max(low)
    if high:
        if _number(node.get("maximum")):
            high.append(math.floor(node["maximum"]))
        node["maximum"] = min(high)


#: the int64 range xgrammar's integer grammar is written over
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _int64_integer_bounds(node: dict[str, Any]) -> None:
    def whole(key: str) -> int | None:
        v = node.get(key)
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            return int(v)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    for key in ("maximum", "exclusiveMaximum"):
        v = whole(key)
        if v is not None and v > _INT64_MAX:
            del node[key]
            if whole("maximum") is None and whole("exclusiveMaximum") is None:
                node["maximum"] = _INT64_MAX
    for key in ("minimum", "exclusiveMinimum"):
        v = whole(key)
        if v is not None and v < _INT64_MIN:
            del node[key]
            if whole("minimum") is None and whole("exclusiveMinimum") is None:
                node["minimum"] = _INT64_MIN


def _integer_node(node: dict[str, Any]) -> bool:
    t = node.get("type")
    if isinstance(t, list):
        return "integer" in t and "number" not in t
    return t == "integer"


def rewrite_numeric_bounds(node: dict[str, Any]) -> None:
    """Rewrite ``node``'s own numeric bounds in place, as the module docstring describes (its
    subschemas are not visited).

    Args:
        node: one schema node (a ``dict`` the caller owns: a copy of the request's).
    """
    _draft4_exclusive(node, "exclusiveMinimum", "minimum")
    _draft4_exclusive(node, "exclusiveMaximum", "maximum")
    t = node.get("type")
    if isinstance(t, list) and "integer" in t and "number" in t:
        rest = [x for x in t if x != "integer"]
        node["type"] = rest[0] if len(rest) == 1 else rest
    if _integer_node(node):
        _whole_integer_bounds(node)
        _int64_integer_bounds(node)

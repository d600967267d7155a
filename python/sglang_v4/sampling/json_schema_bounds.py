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


def rewrite_numeric_bounds(node: dict[str, Any]) -> None:
    """Rewrite ``node``'s own numeric bounds in place, as the module docstring describes (its
    subschemas are not visited).

    Args:
        node: one schema node (a ``dict`` the caller owns: a copy of the request's).
    """
    _draft4_exclusive(node, "exclusiveMinimum", "minimum")
    _draft4_exclusive(node, "exclusiveMaximum", "maximum")
    if node.get("type") == "integer":
        _whole_integer_bounds(node)

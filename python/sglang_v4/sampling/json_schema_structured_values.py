"""``const`` / ``enum`` values that are objects or arrays, written as the schemas of those values.

JSON Schema compares ``const`` / ``enum`` values as JSON values (Draft 2020-12 Validation,
sections 6.1.2 and 6.1.3; RFC 8259 section 2: whitespace around structural characters is
insignificant), so ``{"const": {"a": [1, 2]}}`` admits the text ``{"a": [1, 2]}`` as well as
``{"a":[1,2]}``. xgrammar (0.2.x) compiles such a value to one literal text, its compact
serialization: the grammar refused the spaced form that it takes everywhere else in the same
answer (``{"x": {"a": 1}}`` for ``{"x": 1}``-shaped siblings), so a model writing JSON in its
usual style was steered off its text at the first space inside the value.

:func:`enum_values_as_schemas` first keeps, in each ``enum``, the values its node's other keywords
accept (:func:`~sglang_v4.sampling.json_schema_enum.filter_enum_values`; a ``const`` they refuse
is a named ``ValueError``), so such a node admits exactly its values and is then written as the
schemas of those values alone (an object: each key ``required`` with its value's schema, nothing
else; an array: ``prefixItems`` of its items' schemas, exactly that many; several values: an
``anyOf``, the scalar ones together as one ``enum``), which xgrammar compiles with the JSON
whitespace it allows elsewhere. An object's keys are taken in the order written (a subset of
the JSON texts of the value; never a text of another value).
"""

from __future__ import annotations

import copy
from typing import Any

from sglang_v4.sampling.json_schema_enum import filter_enum_values
from sglang_v4.sampling.json_schema_rewrite import _subschema_slots, normalize_json_schema

__all__ = ["enum_values_as_schemas", "value_schema"]

#: Values nested deeper than this stay literal values (xgrammar's compact text): the schema of a
#: value is as deep as the value, and subschemas are compiled recursively.
MAX_VALUE_DEPTH = 32


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0); iterative."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def value_schema(value: Any) -> dict[str, Any]:
    """The schema admitting exactly the JSON value ``value`` (keys of an object in their order).

    Args:
        value: a JSON value (``dict`` / ``list`` / ``str`` / number / ``bool`` / ``None``).

    Returns:
        ``{"const": value}`` for a scalar; for an object ``{"type": "object", "properties":
        {key: value_schema(v)}, "required": [keys], "additionalProperties": false}``; for an array
        ``{"type": "array", "prefixItems": [value_schema(x)], "items": false, "minItems": n,
        "maxItems": n}``.
    """
    if isinstance(value, dict):
        return {
            "type": "object",
            "properties": {k: value_schema(v) for k, v in value.items()},
            "required": list(value),
            "additionalProperties": False,
        }
    if isinstance(value, list):
        n = len(value)
        out: dict[str, Any] = {"type": "array", "items": False, "minItems": n, "maxItems": n}
        if value:
            out["prefixItems"] = [value_schema(x) for x in value]
        return out
    return {"const": value}


def _structured(value: Any) -> bool:
    return isinstance(value, (dict, list)) and _depth(value) <= MAX_VALUE_DEPTH


def _as_schemas(node: dict[str, Any]) -> dict[str, Any] | None:
    """The schemas of ``node``'s object / array ``const`` / ``enum`` values (an ``anyOf`` where
    several), or ``None`` where it carries none (or both keywords)."""
    if "const" in node and "enum" in node:
        return None
    if "const" in node:
        values = [node["const"]]
    elif isinstance(node.get("enum"), list):
        values = node["enum"]
    else:
        return None
    if not any(_structured(v) for v in values):
        return None
    scalars = [v for v in values if not _structured(v)]
    branches = [value_schema(v) for v in values if _structured(v)]
    if scalars:
        branches.insert(0, {"enum": scalars})
    return normalize_json_schema(branches[0] if len(branches) == 1 else {"anyOf": branches})


def enum_values_as_schemas(schema: Any, path: str = "schema") -> Any:
    """``schema`` (as compiled: after ``normalize_json_schema``) with its ``enum`` values filtered
    by their nodes' other keywords, and every node carrying an object / array ``const`` / ``enum``
    value replaced by the schemas of its values (module docstring); a copy where anything
    changes, the input unchanged.

    Raises:
        ValueError: as :func:`~sglang_v4.sampling.json_schema_enum.filter_enum_values` (a node no
            value satisfies; the message names it by ``path``).
    """
    schema = filter_enum_values(schema, path)
    if not isinstance(schema, dict):
        return schema
    replaced = _as_schemas(schema)
    if replaced is not None:
        return replaced
    found: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    stack: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((), schema)]
    while stack:
        where, node = stack.pop()
        for slot, sub in _subschema_slots(node):
            new = _as_schemas(sub)
            if new is not None:
                found.append((where + slot, new))
            else:
                stack.append((where + slot, sub))
    if not found:
        return schema
    out = copy.deepcopy(schema)
    for where, new in found:
        parent = out
        for p in where[:-1]:
            parent = parent[p]
        parent[where[-1]] = new
    return out

"""``const`` / ``enum`` values that are objects or arrays, written as the schemas of those values.

JSON Schema compares ``const`` / ``enum`` values as JSON values (Draft 2020-12 Validation,
sections 6.1.2 and 6.1.3; RFC 8259 section 2: whitespace around structural characters is
insignificant), so ``{"const": {"a": [1, 2]}}`` admits the text ``{"a": [1, 2]}`` as well as
``{"a":[1,2]}``. xgrammar (0.2.x) compiles such a value to one literal text, its compact
serialization: the grammar refused the spaced form that it takes everywhere else in the same
answer (``{"x": {"a": 1}}`` for ``{"x": 1}``-shaped siblings), so a model writing JSON in its
usual style was steered off its text at the first space inside the value.

:func:`structured_values_as_schemas` writes each object or array value as the schema admitting
exactly that value (an object: each key ``required`` with its value's schema, nothing else; an
array: ``prefixItems`` of its items' schemas, exactly that many), which xgrammar compiles with the
JSON whitespace it allows elsewhere; scalar values stay ``const`` / ``enum`` values. An object's
keys are taken in the order written (a subset of the JSON texts of the value; never a text of
another value).
"""

from __future__ import annotations

from typing import Any

__all__ = ["structured_values_as_schemas", "value_schema"]

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


def _json_types(value: Any) -> set[str]:
    """The JSON Schema ``type`` names ``value`` is an instance of (an integral number is both
    ``integer`` and ``number``; Draft 2020-12 Validation, section 6.1.1)."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"integer", "number"} if value.is_integer() else {"number"}
    if isinstance(value, str):
        return {"string"}
    return {"array"} if isinstance(value, list) else {"object"}


def _type_admits(node: dict[str, Any], value: Any) -> bool:
    """Whether ``node``'s ``type`` (absent, a name or a list of names) admits ``value``."""
    t = node.get("type")
    if t is None:
        return True
    names = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else set()
    return bool(names & _json_types(value))


def structured_values_as_schemas(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` (one schema object) with its object / array ``const`` or ``enum`` values written as
    schemas (:func:`value_schema`), the same meaning; ``node`` itself where nothing changes.

    A node carrying only ``const`` becomes the value's schema; otherwise the values become the
    branches of an ``anyOf`` (the scalar ``enum`` values together as one ``enum`` branch) beside
    the node's other keywords, which JSON Schema applies to every value as before (a value the
    node's ``type`` refuses is left out: no instance can be it). A node that
    already has ``anyOf`` / ``oneOf``, or carries both ``const`` and ``enum``, is left as written.
    """
    if "anyOf" in node or "oneOf" in node or ("const" in node and "enum" in node):
        return node
    if "const" in node:
        values = [node["const"]]
    elif isinstance(node.get("enum"), list):
        values = node["enum"]
    else:
        return node
    if not any(_structured(v) for v in values):
        return node
    admitted = [v for v in values if _type_admits(node, v)]
    if not admitted:
        return node  # no value has the node's type: refused by name downstream
    values = admitted
    rest = {k: v for k, v in node.items() if k not in ("const", "enum")}
    scalars = [v for v in values if not _structured(v)]
    branches = [value_schema(v) for v in values if _structured(v)]
    if scalars:
        branches.insert(0, {"enum": scalars})
    if len(branches) == 1 and not rest:
        return branches[0]
    return {**rest, "anyOf": branches}

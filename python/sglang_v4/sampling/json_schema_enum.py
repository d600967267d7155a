"""``enum`` / ``const`` values read together with the other keywords of their node.

JSON Schema applies every keyword of a node: ``{"type": "string", "enum": [1, "a"]}`` admits
``"a"`` only, ``{"type": "integer", "enum": [1, 2, 3], "minimum": 2}`` admits ``2`` and ``3``,
and ``{"type": "integer", "const": "x"}`` admits nothing (Draft 2020-12 Validation, sections 6.1.2
and 6.1.3: ``enum`` / ``const`` are assertions like any other). xgrammar (0.2.x) compiles a node
carrying ``enum`` or ``const`` to exactly those values and ignores its other keywords, so the
grammar wrote ``1`` for the string node and ``"x"`` for the integer one: output that fails the
schema it was constrained by (the same fault json-schema-faker/json-schema-faker#224 reports of
a generator: "all other constraints are ignored if enum is present").

:func:`filter_enum_values` keeps, in each such node, only the values the node's other keywords
accept (checked with the ``jsonschema`` validator of the schema's draft, local ``$ref`` resolved
against the root), so the grammar's values are the schema's; a node none of whose values passes
matches nothing, which is refused (``ValueError``, an HTTP 400 naming the node).
"""

from __future__ import annotations

import copy
from typing import Any

from sglang_v4.sampling.json_schema_rewrite import _subschema_slots

__all__ = ["filter_enum_values"]


def _nodes_with_values(schema: dict[str, Any]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every subschema of ``schema`` (the root included) carrying ``enum`` or ``const``, with its
    path of keys from the root. Iterative: no Python recursion, whatever the depth."""
    found: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    stack: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((), schema)]
    while stack:
        path, node = stack.pop()
        if "enum" in node or "const" in node:
            found.append((path, node))
        stack.extend((path + slot, sub) for slot, sub in _subschema_slots(node))
    return found


def _where(root_name: str, path: tuple[Any, ...]) -> str:
    return root_name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def filter_enum_values(schema: Any, path: str = "schema") -> Any:
    """``schema`` with every ``enum`` reduced to the values its node's other keywords accept (a
    copy where anything changes; the input is not changed).

    Args:
        schema: a JSON schema as it is compiled (after ``merge_all_of`` / ``normalize_json_schema``);
            a non-``dict`` is returned as it is.
        path: how error messages name the root.

    Returns:
        The schema, each ``enum`` holding its values in their order minus those the node's other
        keywords (``type``, ``minimum``, ``pattern``, ``const``, ``$ref``...) reject.

    Raises:
        ValueError: a ``const`` that its node's other keywords reject, or an ``enum`` none of whose
            values they accept (no JSON value satisfies the node); the message names the node.
    """
    if not isinstance(schema, dict):
        return schema
    from jsonschema import Draft202012Validator
    from jsonschema.validators import validator_for

    nodes = [(p, n) for p, n in _nodes_with_values(schema) if set(n) - {"enum", "const"}]
    if not nodes:
        return schema
    base = validator_for(schema, default=Draft202012Validator)(schema)
    keep: dict[tuple[Any, ...], list[Any]] = {}
    for where, node in nodes:
        if "const" in node:
            rest = {k: v for k, v in node.items() if k != "const"}
            if not base.evolve(schema=rest).is_valid(node["const"]):
                raise ValueError(
                    f"{_where(path, where)}: 'const' {node['const']!r} fails the node's other keywords, "
                    "so no value satisfies it."
                )
        values = node.get("enum")
        if not isinstance(values, list):
            continue
        check = base.evolve(schema={k: v for k, v in node.items() if k != "enum"})
        ok = [v for v in values if check.is_valid(v)]
        if not ok:
            raise ValueError(
                f"{_where(path, where)}: no value of 'enum' {values!r} passes the node's other keywords, "
                "so no value satisfies it."
            )
        if len(ok) < len(values):
            keep[where] = ok
    if not keep:
        return schema
    out = copy.deepcopy(schema)
    for where, ok in keep.items():
        node = out
        for p in where:
            node = node[p]
        node["enum"] = ok
    return out

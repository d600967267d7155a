"""Draft 4 - 2019-09 tuple arrays (``"items": [...]``) written in the Draft 2020-12 form.

Before Draft 2020-12 a tuple array is ``{"items": [S0, S1, ...], "additionalItems": A}``: item
``i`` matches ``Si``, the items after the list match ``A`` (any value when ``additionalItems`` is
absent). Draft 2020-12 writes the same as ``{"prefixItems": [S0, S1, ...], "items": A}``
(Core, section 10.3.1.1 and 10.3.1.2). pydantic v1 and other generators still emit the older
form, with or without ``"$schema": ".../draft-07/schema#"``; xgrammar reads only the 2020-12 one
and refused the older as "items must be a boolean or an object", and the Draft 2020-12
meta-schema rejects it too. :func:`tuple_items_as_prefix_items` rewrites every such node of a
schema that names no ``$schema`` or an older draft; a schema that names Draft 2020-12 keeps
its list ``items`` (there it is malformed, and is reported as such).

``additionalItems`` beside an ``items`` that is one schema (not a list) has no effect in those
drafts (Validation draft-07 section 6.4.2) and is dropped.

:func:`prefix_items_within_max_items` drops the ``prefixItems`` entries at positions no array
can reach (``maxItems`` below their number): such a schema is satisfiable (``prefixItems`` does
not require its positions, ``[]`` and ``[1]`` are valid for ``{"prefixItems": [int, str],
"maxItems": 1}``), and xgrammar refused it ("maxItems is less than the number of prefixItems");
a ``false`` entry (no item may sit there: the array ends before it) was refused as "prefixItems
contains false" and becomes a ``maxItems``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["names_draft_2020_12", "prefix_items_within_max_items", "tuple_items_as_prefix_items"]


def names_draft_2020_12(schema: Any) -> bool:
    """Whether ``schema``'s ``$schema`` names Draft 2020-12 (or a later draft that keeps its
    array keywords)."""
    draft = schema.get("$schema") if isinstance(schema, dict) else None
    return isinstance(draft, str) and "2020-12" in draft


_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_LISTS = ("items", "anyOf", "oneOf", "allOf", "prefixItems")
_DATA = ("const", "enum", "default", "examples", "dependentRequired", "$vocabulary")


def tuple_items_as_prefix_items(schema: Any) -> Any:
    """``schema`` with each node ``{"items": [...], "additionalItems": A}`` written as
    ``{"prefixItems": [...], "items": A}`` (``"items": {}`` without ``additionalItems``), and
    each ``additionalItems`` beside a one-schema ``items`` dropped (module docstring).

    Args:
        schema: a JSON schema (``dict``; other values are returned as they are).

    Returns:
        A copy with the rewrite applied (the input is not changed); ``schema`` itself when it
        names Draft 2020-12 in ``$schema``. Iterative: no Python recursion, whatever the
        nesting depth.
    """
    if not isinstance(schema, dict) or names_draft_2020_12(schema):
        return schema
    root = dict(schema)
    stack: list[dict[str, Any]] = [root]
    while stack:
        node = stack.pop()
        items = node.get("items")
        if isinstance(items, list) and "prefixItems" not in node:
            node["prefixItems"] = items
            node["items"] = node.pop("additionalItems", {})
        elif "additionalItems" in node and "items" in node:
            del node["additionalItems"]  # no effect beside a one-schema `items`
        for k, v in node.items():
            if k in _DATA:
                continue
            if isinstance(v, dict) and k in _MAPS:
                v = node[k] = dict(v)
                for name, sub in v.items():
                    if isinstance(sub, dict):
                        v[name] = dict(sub)
                        stack.append(v[name])
            elif isinstance(v, dict):
                node[k] = dict(v)
                stack.append(node[k])
            elif isinstance(v, list) and k in _LISTS:
                node[k] = [dict(s) if isinstance(s, dict) else s for s in v]
                stack.extend(s for s in node[k] if isinstance(s, dict))
    return root


def prefix_items_within_max_items(node: dict[str, Any]) -> None:
    """Drop, in place, the ``prefixItems`` entries of ``node`` that no valid array reaches: those
    past its ``maxItems``, and from the first ``false`` entry on (no array has an item there, so
    ``maxItems`` becomes that position); the whole keyword when none is left. The same arrays
    validate (module docstring). Other nodes are left as they are."""
    prefix, most = node.get("prefixItems"), node.get("maxItems")
    if not isinstance(prefix, list):
        return
    if not isinstance(most, int) or isinstance(most, bool) or most < 0:
        most = None
    first_false = next((i for i, sub in enumerate(prefix) if sub is False), None)
    if first_false is not None and (most is None or first_false < most):
        most = node["maxItems"] = first_false
    if most is not None and most < len(prefix):
        if most == 0:
            del node["prefixItems"]
        else:
            node["prefixItems"] = prefix[:most]

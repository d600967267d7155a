"""Recursive schemas with no way to end: refused, instead of a grammar with no finite text.

A local ``$ref`` can make a schema recursive (``{"properties": {"child": {"$ref": "#"}}}``, a
tree). Where every value must hold another value of the same definition -- the recursive
property is ``required``, or an array of it has ``minItems`` >= 1, with no alternative -- no finite
JSON value satisfies the schema: ``{"type": "object", "properties": {"next": {"$ref": "#"}},
"required": ["next"]}``. xgrammar compiles it without complaint to a grammar whose every text
goes on forever, so the request runs to ``max_tokens`` writing ``{"next": {"next": ...`` and
answers JSON that never closes. vllm-project/vllm#57725 reports the plain form (``{"$ref":
"#/$defs/n", "$defs": {"n": {"$ref": "#/$defs/n"}}}``, refused by name before this module runs)
being admitted and failing mid-generation; the fix asked for is a 400 at admission.

:func:`check_schema_has_finite_value` decides it as a least fixpoint over the local ``$ref``
targets (every target is assumed to have no finite value until one is shown, from the targets
already shown, to have one), then refuses the schema (``ValueError``, an HTTP 400 naming the
definitions) when its root has none. A node has a finite value unless: it is ``false``; it is a
``$ref`` to a target not shown; every branch of its ``anyOf`` / ``oneOf`` has none, or any of
its ``allOf``; or each type its ``type`` admits has none -- an object type when a ``required``
property's schema has none, an array type when one of its first ``minItems`` items' schema has
none. Nodes without ``type`` and nodes with ``const`` / ``enum`` have one (a conservative reading:
only what surely cannot end is refused).
"""

from __future__ import annotations

from typing import Any

from sglang_v4.sampling.json_schema_support import _local_ref

__all__ = ["check_schema_has_finite_value"]


def _refs(schema: Any) -> set[str]:
    """Every local ``$ref`` string of ``schema`` (``#`` and ``#/...``), found iteratively."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
                found.add(ref)
            stack.extend(v for k, v in node.items() if k not in ("const", "enum", "default", "examples"))
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _finite(node: Any, shown: set[str]) -> bool:
    """``node`` has a finite value, given the ``$ref`` targets in ``shown`` have one."""
    if node is False:
        return False
    if not isinstance(node, dict):
        return True
    ref = node.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")) and ref not in shown:
        return False
    if "const" in node or "enum" in node:
        return True
    for k in ("anyOf", "oneOf"):
        if isinstance(node.get(k), list) and node[k] and not any(_finite(s, shown) for s in node[k]):
            return False
    if isinstance(node.get("allOf"), list) and not all(_finite(s, shown) for s in node["allOf"]):
        return False
    t = node.get("type")
    types = [t] if isinstance(t, str) else t if isinstance(t, list) else None
    if not types:
        return True
    return any(_type_finite(node, name, shown) for name in types)


def _type_finite(node: dict[str, Any], name: str, shown: set[str]) -> bool:
    if name == "object":
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        extra = node.get("additionalProperties", True)
        for n in node.get("required") or []:
            if not _finite(props.get(n, extra), shown):
                return False
        return True
    if name == "array":
        need = node.get("minItems", 0)
        prefix = node.get("prefixItems") if isinstance(node.get("prefixItems"), list) else []
        items = node.get("items", True)
        if not isinstance(need, int) or need <= 0:
            return True
        return all(
            _finite(prefix[i] if i < len(prefix) else items, shown) for i in range(min(need, len(prefix) + 1))
        )
    return True


def check_schema_has_finite_value(schema: Any, path: str = "schema") -> None:
    """Check that some finite JSON value can satisfy ``schema`` where its local ``$ref`` recurse
    (module docstring); schemas without ``$ref`` are not examined.

    Raises:
        ValueError: the root has no finite value; the message names the ``$ref`` targets that
            cannot end, e.g. ``schema: '#' can never end: ...``.
    """
    if not isinstance(schema, dict):
        return
    refs = _refs(schema)
    if not refs:
        return
    targets = {r: (schema if r == "#" else _local_ref(schema, r)) for r in refs}
    shown = {r for r, t in targets.items() if t is None}  # unresolved: not this module's concern
    changed = True
    while changed:
        changed = False
        for r, t in targets.items():
            if r not in shown and _finite(t, shown):
                shown.add(r)
                changed = True
    if not _finite(schema, shown):
        stuck = ", ".join(repr(r) for r in sorted(set(refs) - shown))
        raise ValueError(
            f"{path}: {stuck} can never end: every value of it must hold another one (a required "
            "property or minItems recursing into it with no alternative), so no finite JSON value "
            "satisfies the schema."
        )

"""``oneOf`` in an answer schema: enforced where its branches are disjoint, refused elsewhere.

``oneOf`` admits a value that matches exactly one branch (Draft 2020-12 Core, section 10.2.1.3).
A grammar can only take the union of the branches, which is ``anyOf``: xgrammar (0.2.x) compiles
``oneOf`` so, and ``{"oneOf": [{"type": "integer"}, {"type": "number"}]}`` then lets the model
write ``1``, which matches both branches and fails the schema (mlc-ai/xgrammar#672; the same
fault in ohdearquant/lattice#1077; llguidance refuses ``oneOf`` unless told to read it as
``anyOf``, guidance-ai/llguidance#71). The union is exact when no value matches two branches.

:func:`check_one_of_disjoint` proves that of every pair of branches, conservatively, and refuses
the schema (``ValueError``, an HTTP 400 naming the node and the two branches) where it cannot.
Two branches are disjoint when (after following local ``$ref``):

* either is ``false``;
* their JSON types cannot meet (``type``, or the types of their ``const`` / ``enum`` values;
  ``integer`` lies within ``number``);
* one lists its values (``const`` / ``enum``) and none of them passes the other branch (checked
  with the ``jsonschema`` validator of the schema's draft);
* each alternative of one branch's own ``anyOf`` / ``oneOf`` is disjoint from the other branch;
* both are objects only and a property both require has disjoint schemas in them (a
  discriminator: ``{"kind": {"const": "cat"}}`` against ``{"kind": {"const": "dog"}}``, as
  pydantic writes a tagged union), or one requires a property that the other forbids
  (``additionalProperties: false`` without that name nor a ``patternProperties`` entry), as
  OpenAI's strict schemas write alternatives.
"""

from __future__ import annotations

from typing import Any

from sglang_v4.sampling.json_schema_rewrite import _subschema_slots
from sglang_v4.sampling.json_schema_support import _local_ref

__all__ = ["check_one_of_disjoint"]

#: The JSON types a ``type`` name covers (``number``: integers and the other numbers).
_TYPES = {
    "null": {"null"},
    "boolean": {"boolean"},
    "object": {"object"},
    "array": {"array"},
    "string": {"string"},
    "integer": {"integer"},
    "number": {"integer", "fraction"},
}
#: How deep the proof follows ``$ref`` and nested properties before it gives up (not disjoint).
_MAX_PROOF_DEPTH = 8


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "fraction"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _deref(node: Any, root: Any) -> Any:
    """``node`` with a chain of local ``$ref`` followed (keywords beside a ``$ref`` only narrow
    it, so a proof on the target holds for the node); ``None`` for one that does not resolve."""
    for _ in range(_MAX_PROOF_DEPTH):
        if not (isinstance(node, dict) and "$ref" in node):
            return node
        ref = node["$ref"]
        node = root if ref == "#" else _local_ref(root, ref)
    return None


def _values(node: dict[str, Any]) -> list[Any] | None:
    if "const" in node:
        return [node["const"]]
    return node["enum"] if isinstance(node.get("enum"), list) else None


def _types(node: dict[str, Any]) -> set[str] | None:
    """The JSON types the node admits, or ``None`` when it does not say."""
    values = _values(node)
    if values is not None:
        return {_json_type(v) for v in values}
    t = node.get("type")
    names = [t] if isinstance(t, str) else t if isinstance(t, list) else None
    if names is None:
        return None
    return set().union(*(_TYPES.get(n, set()) for n in names))


def _forbids(node: dict[str, Any], name: str) -> bool:
    """An object of ``node`` cannot hold the key ``name``."""
    props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    if name in props:
        return props[name] is False
    return node.get("additionalProperties") is False and not node.get("patternProperties")


def _disjoint(a: Any, b: Any, root: Any, check: Any, depth: int = 0) -> bool:
    """No JSON value matches both ``a`` and ``b`` (proved as the module docstring lists; ``False``
    where it cannot be proved)."""
    if depth > _MAX_PROOF_DEPTH:
        return False
    a, b = _deref(a, root), _deref(b, root)
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    for x, y in ((a, b), (b, a)):
        values = _values(x)
        if values is not None and not any(check.evolve(schema=y).is_valid(v) for v in values):
            return True
    ta, tb = _types(a), _types(b)
    if ta is not None and tb is not None and not ta & tb:
        return True
    for x, y in ((a, b), (b, a)):
        for k in ("anyOf", "oneOf"):
            alts = x.get(k)
            if isinstance(alts, list) and alts and all(_disjoint(s, y, root, check, depth + 1) for s in alts):
                return True
    if ta != {"object"} or tb != {"object"}:
        return False
    ra = {n for n in a.get("required", []) if isinstance(n, str)}
    rb = {n for n in b.get("required", []) if isinstance(n, str)}
    if any(_forbids(b, n) for n in ra - rb) or any(_forbids(a, n) for n in rb - ra):
        return True
    pa, pb = a.get("properties") or {}, b.get("properties") or {}
    return any(
        n in pa and n in pb and _disjoint(pa[n], pb[n], root, check, depth + 1) for n in sorted(ra & rb)
    )


def check_one_of_disjoint(schema: Any, path: str = "schema") -> None:
    """Check that every ``oneOf`` of ``schema`` (as it is compiled, after ``merge_all_of`` /
    ``normalize_json_schema``) has branches that no value matches twice (module docstring).

    Raises:
        ValueError: a ``oneOf`` with two branches not proved disjoint; the message names the node
            and the branches, e.g. ``schema.oneOf: branches 0 and 1 may both match one value...``.
    """
    if not isinstance(schema, dict):
        return
    from jsonschema import Draft202012Validator
    from jsonschema.validators import validator_for

    check = None
    stack: list[tuple[str, dict[str, Any]]] = [(path, schema)]
    while stack:
        where, node = stack.pop()
        branches = node.get("oneOf")
        if isinstance(branches, list) and len(branches) > 1:
            check = check or validator_for(schema, default=Draft202012Validator)(schema)
            for i in range(len(branches)):
                for j in range(i + 1, len(branches)):
                    if not _disjoint(branches[i], branches[j], schema, check):
                        raise ValueError(
                            f"{where}.oneOf: branches {i} and {j} may both match one value; constrained "
                            "decoding enforces 'oneOf' (exactly one branch) only where its branches are "
                            "disjoint (different types, const / enum values, or a required property with "
                            "disjoint values). Use 'anyOf' where a value may match several."
                        )
        for slot, sub in _subschema_slots(node):
            stack.append((where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in slot), sub))

"""The keywords beside an ``anyOf`` / ``oneOf`` read into each of its branches.

JSON Schema applies every keyword of a node (JSON Schema Core, "Keyword Independence"): ``{"type":
"integer", "anyOf": [{"minimum": 5}, {"maximum": -5}]}`` matches integers only. xgrammar compiles a
node with an ``anyOf`` / ``oneOf`` from its branches alone and drops the other keywords of the
node, so the schema above let the string ``"x"`` through (mlc-ai/xgrammar#858). Since ``S and (B1
or B2)`` is ``(S and B1) or (S and B2)``, each branch is given the node's ``type`` (the
intersection with its own; a branch left with no type matches nothing and is dropped) and the
node's string / number / array keywords it does not set itself. Object keywords are merged by
:mod:`sglang_v4.sampling.json_schema_rewrite`.
"""

from __future__ import annotations

from typing import Any

#: Keywords of a node copied into a branch that does not set them (JSON Schema Validation 6.2-6.4).
SCALAR_KEYWORDS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minItems",
    "maxItems",
    "items",
    "prefixItems",
)

_ALL_TYPES = ("null", "boolean", "object", "array", "number", "string", "integer")


def _types(t: Any) -> set[str] | None:
    """The set of type names of a ``type`` value, or None when it is absent or malformed."""
    if isinstance(t, str):
        return {t}
    if isinstance(t, list) and all(isinstance(x, str) for x in t):
        return set(t)
    return None


def _type_intersection(a: set[str], b: set[str]) -> set[str]:
    """The types both ``a`` and ``b`` admit (an ``integer`` is a ``number``)."""
    out = a & b
    if "integer" in a and "number" in b or "integer" in b and "number" in a:
        out.add("integer")
    return out


def with_node_keywords(node: dict[str, Any], branch: Any) -> Any:
    """``branch`` (of ``node``'s ``anyOf`` / ``oneOf``) with ``node``'s ``type`` and scalar
    keywords (:data:`SCALAR_KEYWORDS`) applied to it, or ``False`` when the two types share no
    value (the branch then matches nothing). A branch that is not a schema object, or one with a
    ``$ref``, is returned as it is; so is every branch of a node with none of those keywords.

    Args:
        node: the schema object that holds the ``anyOf`` / ``oneOf``.
        branch: one of its branches (any JSON value).
    """
    if not isinstance(branch, dict) or "$ref" in branch:
        return branch
    out = dict(branch)
    node_types = _types(node.get("type"))
    if node_types is not None:
        own = _types(out.get("type"))
        both = node_types if own is None else _type_intersection(node_types, own)
        if not both:
            return False
        names = [t for t in _ALL_TYPES if t in both]
        out["type"] = names[0] if len(names) == 1 else names
    for k in SCALAR_KEYWORDS:
        if k in node and k not in out:
            out[k] = node[k]
    return out

"""JSON-schema keywords the constrained decoder cannot enforce: merged away where an equivalent
schema exists, refused otherwise.

xgrammar (0.2.x) compiles some JSON Schema keywords to a grammar that does not enforce them, with
no error (a log warning at most): a request would get an answer that fails the very schema it
sent, with nothing to tell it so. As SGLang's schema pre-validation for the xgrammar backend and
vLLM's ``has_xgrammar_unsupported_json_features`` (where it falls back to another backend) do,
an answer grammar (``response_format`` / ``json_schema`` / vLLM's ``guided_json``) that uses one
is refused (a ``ValueError``, HTTP 400, naming the keyword and the node by its path) instead of
being generated against a weaker grammar. Measured against xgrammar 0.2.9 (a text the schema
rejects that the compiled grammar accepts):

* ``allOf`` with more than one branch (compiled to "any JSON value"; vllm-project/vllm#56556);
* ``not`` (also ``not: {}`` / ``not: true``, which match nothing: compiled to "any JSON value";
  ggml-org/llama.cpp#17572), ``if`` / ``then`` / ``else``, ``dependentRequired``,
  ``dependentSchemas``;
* a ``$ref`` that is not ``#`` or a local JSON pointer (``#/$defs/Name``): a remote URL, another
  file, an ``$anchor`` / ``$id`` name (``#item``) compiled to "any JSON value"; ``$dynamicRef``
  and ``$recursiveRef`` likewise;
* ``propertyNames`` beside ``patternProperties``: keys that match a ``patternProperties`` regex
  (and, beside ``properties`` too, every other key) were not checked against it
  (mlc-ai/xgrammar#841);
* ``additionalProperties`` other than ``false`` (a schema, ``true``, ``{}``) beside
  ``patternProperties``: with ``properties`` too, a key matching a regex could take the
  ``additionalProperties`` schema instead (``{"age": "s"}`` under ``"^age$": integer`` and
  ``additionalProperties: {"type": "string"}``), and under ``true`` a declared name took any
  value; without ``properties`` the object was closed to every key no regex matches
  (sourcemeta/learnjsonschema.com#130's example);
* a ``patternProperties`` regex that matches a name ``properties`` declares: the key got only the
  ``properties`` subschema and could come twice, the second time through the pattern
  (guidance-ai/llguidance#265's schema gave ``{"score": 5, ..., "score": 632}``);
* ``uniqueItems: true``, ``contains`` (with ``minContains`` / ``maxContains``);
* ``multipleOf`` on anything but an ``integer``;
* ``pattern`` with ``minLength`` / ``maxLength``, ``format`` with any of the three (xgrammar
  keeps only ``format``, else ``pattern``), where the bounds did not fold into the pattern
  (:mod:`sglang_v4.sampling.json_schema_pattern_length`);
* a node without ``type`` (and without ``enum`` / ``const``) carrying string, number or bounded
  array keywords (``pattern``, ``maxLength``, ``minimum``, ``maxItems``...): JSON Schema applies
  them to values of that type, xgrammar ignores them (vllm-project/vllm#57550).

A ``$ref`` beside keywords that constrain the value (``{"$ref": "#/$defs/Base", "required":
["b"]}``; from Draft 2019-09 on both apply, before it the siblings are ignored) was compiled from
the ``$ref`` alone; :func:`merge_all_of` reads such a node as ``allOf: [{"$ref": ...}, {the
siblings}]`` (unless the schema names an older draft in ``$schema``) and merges it like any other;
one that does not merge is refused.

:func:`merge_all_of` first rewrites the common multi-branch ``allOf`` that has an equivalent
single schema: object branches (pydantic's and OpenAPI's inheritance, ``allOf: [{"$ref":
"#/$defs/Base"}, {...}]``) whose keywords do not depend on each other's siblings are merged into
one node (``properties`` joined, ``required`` united, a property both declare merged the same
way, other keywords kept where only one branch sets them or both set the same value; the node's
``unevaluatedProperties`` becomes the merged node's ``additionalProperties``, which then means
the same).

The tool-call grammars are left as they are: a tool's parameter schema constrains the call as
far as the grammar can, and a request is not refused for a schema it did not write as an answer
format.
"""

from __future__ import annotations

import re
from typing import Any

# the keywords whose values are subschemas (one / a list / a map), as the rewrite walks them
from sglang_v4.sampling.json_schema_rewrite import _ONE_SCHEMA, _SCHEMA_LISTS, _SCHEMA_MAPS

__all__ = ["check_enforceable_schema", "merge_all_of"]

#: Keywords that only annotate a schema (a merge keeps the first branch's).
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}
)
#: Keywords whose meaning depends on sibling keywords of the same node, or that reference other
#: schemas: a branch carrying one is merged only in the cases :func:`_merge_branches` handles.
_SIBLING_DEPENDENT = frozenset(
    {
        "additionalProperties",
        "patternProperties",
        "unevaluatedProperties",
        "additionalItems",
        "unevaluatedItems",
        "prefixItems",
        "if",
        "then",
        "else",
        "$ref",
        "$dynamicRef",
        "$defs",
        "definitions",
        "$id",
        "$anchor",
        "$schema",
    }
)
_STRING_KEYWORDS = ("pattern", "minLength", "maxLength", "format")
_NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_ARRAY_BOUNDS = ("minItems", "maxItems")


def _local_ref(root: Any, ref: Any) -> Any:
    """The subschema of ``root`` a local ``$ref`` (``#/$defs/Name``, ``#/definitions/Name``, any
    ``#/...`` JSON pointer, RFC 6901 escapes) points to, or ``None``."""
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return None
    node = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


class _Walk:
    """One :func:`merge_all_of` call's state: the schema (for local ``$ref``) and each node's
    merged form by ``id`` (the node kept alive beside it), so a subschema reached many times (a
    ``$ref`` that several branches name, a branch met again by its parent's merge) is merged once:
    the work stays linear in the schema's size where re-merging would double it per ``$ref``
    level. A node met again while its own merge is under way (a ``$ref`` cycle through ``allOf``)
    is left unmerged. A property both branches declare is merged into a new node each time (its
    result is inlined, not shared): at most :data:`_MAX_PROPERTY_JOINS` such merges are made, so
    branches whose ``$ref`` definitions nest pairwise cannot make the work or the merged schema
    grow exponentially; past it the ``allOf`` is left unmerged (and refused)."""

    __slots__ = ("joins_left", "memo", "ref_siblings_apply", "root")

    def __init__(self, root: Any) -> None:
        self.root = root
        self.memo: dict[int, tuple[Any, Any]] = {}
        self.joins_left = _MAX_PROPERTY_JOINS
        draft = root.get("$schema") if isinstance(root, dict) else None
        # before Draft 2019-09 a $ref's siblings are ignored; from it on they apply as well
        self.ref_siblings_apply = not (isinstance(draft, str) and any(d in draft for d in _OLD_DRAFTS))


#: ``$schema`` names of the drafts where keywords beside ``$ref`` are ignored.
_OLD_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")
#: Keywords beside a ``$ref`` that say nothing about the value (kept on the node itself).
_REF_NEUTRAL = _ANNOTATIONS | {"$defs", "definitions", "$schema", "$id", "$anchor"}


def _ref_siblings_as_all_of(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` (``$ref`` beside keywords that constrain the value) as ``allOf: [{"$ref": ...},
    {the other keywords}]``, which Draft 2020-12 means by it; xgrammar applied the ``$ref``
    alone (``{"$ref": "#/$defs/Name", "required": ["b"]}`` dropped ``required``)."""
    siblings = {k: v for k, v in node.items() if k not in _REF_NEUTRAL and k not in ("$ref", "allOf")}
    if not siblings:
        return node
    out = {k: v for k, v in node.items() if k in _REF_NEUTRAL}
    rest = node["allOf"] if isinstance(node.get("allOf"), list) else []
    out["allOf"] = [{"$ref": node["$ref"]}, siblings, *rest]
    return out


#: The most property schemas one :func:`merge_all_of` call merges (a pydantic or OpenAPI schema
#: needs a handful: only a property that two branches both declare, differently, is merged).
_MAX_PROPERTY_JOINS = 4096


def _merge_two(a: dict[str, Any], b: dict[str, Any], root: _Walk, depth: int) -> dict[str, Any] | None:
    """One schema meaning ``a`` and ``b`` together (both already free of sibling-dependent
    keywords but ``additionalProperties: false`` handled by the caller), or ``None`` when their
    keywords clash in a way this merge does not resolve."""
    out = dict(a)
    for k, v in b.items():
        if k not in out or k in _ANNOTATIONS:
            out.setdefault(k, v)
        elif k == "required" and isinstance(v, list) and isinstance(out[k], list):
            out[k] = list(dict.fromkeys([*out[k], *v]))
        elif k == "properties" and isinstance(v, dict) and isinstance(out[k], dict):
            props = dict(out[k])
            for name, sub in v.items():
                if name not in props or props[name] == sub or props[name] in (True, {}):
                    props[name] = sub
                elif sub in (True, {}):
                    continue
                else:
                    root.joins_left -= 1
                    if root.joins_left < 0:
                        return None
                    joined = _merge_node({"allOf": [props[name], sub]}, root, depth + 1)
                    if isinstance(joined, dict) and isinstance(joined.get("allOf"), list):
                        return None
                    props[name] = joined
            out[k] = props
        elif out[k] != v:
            return None
    return out


def _merge_branches(node: dict[str, Any], root: _Walk, depth: int) -> dict[str, Any] | None:
    """``node`` with its ``allOf`` merged into it, or ``None`` (left to the caller as it is)."""
    branches = []
    for b in node["allOf"]:
        if isinstance(b, dict) and set(b) == {"$ref"}:
            b = _local_ref(root.root, b["$ref"])
        if b is True:
            continue
        if not isinstance(b, dict):
            return None
        branches.append(b)
    rest = {k: v for k, v in node.items() if k not in ("allOf", "unevaluatedProperties")}
    if any(k in _SIBLING_DEPENDENT - {"$defs", "definitions"} for k in rest):
        return None
    closed: list[set[str]] = []  # property names of the branches with additionalProperties false
    parts = [rest]
    for b in branches:
        if isinstance(b.get("allOf"), list):
            b = _merge_node(b, root, depth + 1)
            if isinstance(b.get("allOf"), list):
                return None
        extra = set(b) & _SIBLING_DEPENDENT
        if extra - {"additionalProperties", "$defs", "definitions"}:
            return None
        if "additionalProperties" in b:
            if b["additionalProperties"] is True:
                b = {k: v for k, v in b.items() if k != "additionalProperties"}
            elif b["additionalProperties"] is False and isinstance(b.get("properties", {}), dict):
                closed.append(set(b.get("properties", {})))
                b = {k: v for k, v in b.items() if k != "additionalProperties"}
            else:
                return None
        parts.append({k: v for k, v in b.items() if k not in ("$defs", "definitions")})
    merged: dict[str, Any] = {}
    for p in parts:
        joined = _merge_two(merged, p, root, depth)
        if joined is None:
            return None
        merged = joined
    if closed:
        names = set(merged.get("properties", {}))
        if any(not names <= c for c in closed):
            return None  # a closed branch forbids a key another branch declares
        merged["additionalProperties"] = False
    if "unevaluatedProperties" in node:
        # every key the branches evaluated is now one of the node's own ``properties``: the
        # keys left unevaluated are exactly the undeclared ones (no other applicator remains)
        if any(k in merged for k in ("anyOf", "oneOf", "not", "dependentSchemas")):
            return None
        if merged.get("additionalProperties") is not False:
            merged["additionalProperties"] = node["unevaluatedProperties"]
    return merged


def _merge_node(node: Any, root: _Walk, depth: int) -> Any:
    if not isinstance(node, dict) or depth > 512:
        return node
    seen = root.memo.get(id(node))
    if seen is not None:
        return seen[1]
    root.memo[id(node)] = (node, node)  # until merged: a cycle back here sees it unmerged
    out = _merge_fresh(node, root, depth)
    root.memo[id(node)] = (node, out)
    root.memo[id(out)] = (out, out)  # a merged node merges to itself
    return out


def _merge_fresh(node: dict[str, Any], root: _Walk, depth: int) -> Any:
    out = dict(node)
    for k in _ONE_SCHEMA:
        if isinstance(out.get(k), dict):
            out[k] = _merge_node(out[k], root, depth + 1)
    for k in (*_SCHEMA_LISTS, "items"):
        if isinstance(out.get(k), list):
            out[k] = [_merge_node(s, root, depth + 1) for s in out[k]]
    for k in _SCHEMA_MAPS:
        if isinstance(out.get(k), dict):
            out[k] = {n: _merge_node(s, root, depth + 1) for n, s in out[k].items()}
    if root.ref_siblings_apply and isinstance(out.get("$ref"), str):
        joined = _ref_siblings_as_all_of(out)
        if joined is not out:
            merged = _merge_branches(joined, root, depth)
            # unmerged, the node is left as it was (an answer schema's is refused by the check)
            return out if merged is None else merged
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) > 1:
        merged = _merge_branches(out, root, depth)
        if merged is not None:
            return merged
    return out


def merge_all_of(schema: Any) -> Any:
    """``schema`` with each multi-branch ``allOf`` that has an equivalent single schema merged
    into its node (module docstring); a copy, the input is not changed. Branches that are a
    local ``$ref`` (``{"$ref": "#/$defs/Base"}``) are read from the schema's own definitions.

    Args:
        schema: a JSON schema (``dict``; other values are returned as they are).

    Returns:
        The schema; an ``allOf`` this merge cannot resolve is left as it was (and
        :func:`check_enforceable_schema` then refuses it).
    """
    return _merge_node(schema, _Walk(schema), 0)


def _declared_key_matching_a_pattern(node: dict[str, Any]) -> tuple[str, str] | None:
    """The first ``(name, regex)`` where a ``properties`` name matches a ``patternProperties``
    regex (Python's ``re.search``; a regex it cannot read is skipped) and the two subschemas
    differ, or ``None``. JSON Schema applies both subschemas to that key; xgrammar applies only
    the ``properties`` one and lets the key come a second time through the pattern (``{"score":
    5, "score": 632}``). A name declared with the pattern's own subschema (as
    ``normalize_json_schema`` declares a ``required`` name that only a pattern covers) passes."""
    props, patterns = node.get("properties"), node.get("patternProperties")
    if not isinstance(props, dict) or not isinstance(patterns, dict):
        return None
    for regex in patterns:
        try:
            compiled = re.compile(regex)
        except (re.error, TypeError):
            continue
        for name, sub in props.items():
            if compiled.search(name) and sub != patterns[regex]:
                return name, regex
    return None


def _node_problem(node: dict[str, Any], ref_siblings_apply: bool = True) -> str | None:
    """Why the grammar would not enforce ``node``'s own keywords, or ``None``."""
    ref = node.get("$ref")
    if isinstance(ref, str) and ref != "#" and not ref.startswith("#/"):
        return f"'$ref' to {ref!r} (only '#' and local JSON pointers such as '#/$defs/Name' are resolved)"
    if "$ref" in node:
        beside = sorted(k for k in node if k not in _REF_NEUTRAL and k != "$ref")
        if not ref_siblings_apply:
            return None  # Draft 7 and older: the keywords beside a $ref are ignored, as xgrammar does
        if beside:
            return f"'$ref' beside {beside[0]!r} (they do not merge into one schema)"
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) > 1:
        return "'allOf' with several branches (they do not merge into one schema)"
    if "not" in node:  # ``not: {}`` / ``not: true`` match nothing: refused as much as any other
        return "'not'"
    if "if" in node and (node["if"] != {} or "then" in node or "else" in node):
        return "'if'"
    for k in ("dependentRequired", "dependentSchemas"):
        if k in node and node[k] != {}:
            return f"{k!r}"
    for k in ("$dynamicRef", "$recursiveRef"):
        if k in node:
            return f"{k!r}"
    if node.get("propertyNames") not in (None, {}, True) and node.get("patternProperties"):
        return "'propertyNames' together with 'patternProperties' (keys matching a pattern escape it)"
    if node.get("patternProperties") and node.get("additionalProperties", False) is not False:
        return (
            "'additionalProperties' other than false together with 'patternProperties' (a key"
            " matching a pattern could take the additionalProperties schema instead)"
        )
    clash = _declared_key_matching_a_pattern(node)
    if clash is not None:
        return f"'patternProperties' regex {clash[1]!r} matching the declared property {clash[0]!r}"
    if node.get("uniqueItems") is True:
        return "'uniqueItems'"
    if "contains" in node:
        return "'contains'"
    types = node.get("type")
    typed = isinstance(types, (str, list))
    if "multipleOf" in node and types != "integer":
        return "'multipleOf' (supported on 'type': 'integer' only)"
    if "format" in node and any(k in node for k in ("pattern", "minLength", "maxLength")):
        return "'format' together with 'pattern' / 'minLength' / 'maxLength'"
    if "pattern" in node and any(k in node for k in ("minLength", "maxLength")):
        return "'pattern' together with 'minLength' / 'maxLength'"
    if not typed and "enum" not in node and "const" not in node:
        shaped = any(k in node for k in ("items", "prefixItems"))
        for family, keys in (
            ("string", _STRING_KEYWORDS),
            ("number", _NUMBER_KEYWORDS),
            ("array", () if shaped else _ARRAY_BOUNDS),
        ):
            used = [k for k in keys if k in node]
            if used:
                return f'{used[0]!r} on a node without \'type\' (add "type": "{family}")'
    return None


def check_enforceable_schema(schema: Any, path: str = "schema") -> None:
    """Check that the grammar compiled from ``schema`` (after :func:`merge_all_of` and
    ``normalize_json_schema``) enforces every keyword of every subschema (module docstring).
    ``const`` / ``enum`` / ``default`` / ``examples`` values are data and are not walked.

    Args:
        schema: the JSON schema (``dict``; other values pass).
        path: how the message names the root.

    Raises:
        ValueError: a keyword the grammar would silently not enforce, e.g. ``schema.properties.tags:
            constrained decoding cannot enforce 'uniqueItems'; remove it (or validate the answer
            yourself).``
    """
    siblings_apply = _Walk(schema).ref_siblings_apply
    stack: list[tuple[Any, str]] = [(schema, path)]
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict):
            continue
        problem = _node_problem(node, siblings_apply)
        if problem is not None:
            raise ValueError(
                f"{where}: constrained decoding cannot enforce {problem}; remove it "
                "(or validate the answer yourself)."
            )
        for k in _ONE_SCHEMA:
            if isinstance(node.get(k), dict):
                stack.append((node[k], f"{where}.{k}"))
        for k in (*_SCHEMA_LISTS, "items"):
            if isinstance(node.get(k), list):
                stack.extend((s, f"{where}.{k}[{i}]") for i, s in enumerate(node[k]))
        for k in _SCHEMA_MAPS:
            if isinstance(node.get(k), dict):
                stack.extend((s, f"{where}.{k}.{n}") for n, s in node[k].items())

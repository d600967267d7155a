"""JSON-schema rewrites that make xgrammar's grammar accept what JSON Schema means.

xgrammar compiles a JSON schema to a grammar in its "strict" reading (OpenAI's structured-outputs
one: an object accepts the keys of ``properties`` only, in their declared order). Some schemas it
then compiles to a grammar whose texts the schema itself rejects, or whose only value is an empty
container, with no error; a request would get output that fails the schema it sent, or a model
could never fill a field. :func:`normalize_json_schema` rewrites those nodes before compilation
(every ``json_schema`` grammar: ``response_format``, SGLang's ``json_schema`` sampling parameter,
the schemas of a ``structural_tag``, tool-call arguments), where the JSON Schema reading
(Draft 2020-12, "Validation" and "Core" vocabularies) is honoured within the strict one:

* an array without ``items`` / ``prefixItems`` / ``unevaluatedItems`` means "any items": xgrammar
  compiled one carrying any other keyword (``description``, ``maxItems``...) to ``[]`` only
  (xgrammar issue 833);
* an object without ``properties`` / ``patternProperties`` / ``additionalProperties`` /
  ``unevaluatedProperties`` means "any keys": xgrammar compiled one carrying another keyword
  (``required``, ``maxProperties``, ``dependentRequired``...) to ``{}`` only (xgrammar issue 104);
  ``unevaluatedItems`` / ``unevaluatedProperties`` bound the other items / keys, which xgrammar
  honours, so a node with one is left as it is;
* the branches of an object's ``anyOf`` / ``oneOf`` are read together with the object (JSON
  Schema applies both; xgrammar compiled each branch alone, so ``{"properties": {"email": {"type":
  "string"}}, "anyOf": [{"required": ["email"]}, ...]}`` lost the type of ``email``): the object's
  ``properties``, ``required``, ``additionalProperties`` and ``patternProperties`` are merged into
  each branch that is an object schema of its own;
* a ``required`` name that ``properties`` does not declare must still be present: xgrammar dropped
  it (``{"properties": {"a": ...}, "required": ["b"]}`` gave ``{"a": 1}``, and ``{"type":
  "object", "required": ["a"]}`` gave ``{}``). The name is added to ``properties`` with the schema
  the object gives undeclared keys (the first ``patternProperties`` entry whose regex matches it,
  else ``additionalProperties``, else -- on a node with no subschema that could declare the key
  (``allOf``, ``anyOf``, ``oneOf``, ``$ref``, ``if``, ``dependentSchemas``) --
  ``unevaluatedProperties``, else any value); under ``false`` there no object can satisfy the
  schema, which is a ``ValueError``.
* a Draft 4 - 2019-09 tuple array is written in the 2020-12 form
  (:mod:`sglang_v4.sampling.json_schema_tuple`);
* a ``false`` subschema (it matches nothing) that xgrammar refuses to compile: an ``anyOf`` /
  ``oneOf`` branch ``false`` is dropped (the others mean the same without it), and a property
  ``false`` (the key must be absent) is dropped from ``properties`` where nothing else lets the
  key in; ``required`` as well, it is a ``ValueError``.
* a ``propertyNames`` subschema without ``type`` (``{"propertyNames": {"pattern": "^[a-z]+$"}}``,
  the usual way to write it: an object's keys are always strings) gets ``"type": "string"``, the
  same meaning: elsewhere xgrammar ignores ``pattern`` / ``minLength`` / ``maxLength`` on an
  untyped node, and answer schemas carrying them there are refused
  (:func:`~sglang_v4.sampling.json_schema_support.check_enforceable_schema`), which made the
  plain ``propertyNames`` idiom a 400 although xgrammar enforces it on keys.

* JSON escapes in strings: a ``pattern`` that can match ``"``, ``\\`` or a control character
  takes their escapes (:mod:`sglang_v4.sampling.json_schema_pattern_text`); ``minLength`` /
  ``maxLength`` become a ``pattern`` counting decoded characters
  (:mod:`sglang_v4.sampling.json_schema_length`).

* numeric bounds xgrammar refuses although they are valid: Draft 4's boolean
  ``exclusiveMinimum`` / ``exclusiveMaximum``, a fractional bound on an ``integer``
  (:mod:`sglang_v4.sampling.json_schema_bounds`).

* a ``string`` node's ``format: "date"`` / ``"date-time"`` / ``"time"`` becomes a ``pattern``
  admitting exactly the dates and times RFC 3339 allows
  (:mod:`sglang_v4.sampling.json_schema_date_format`); ``format: "ipv4"`` / ``"ipv6"`` one
  admitting exactly RFC 3986's address text (:mod:`sglang_v4.sampling.json_schema_ip_format`).
* a ``pattern``'s optional group ``(X)?`` (or lazy ``(X)??``) becomes ``(X|)``, the same language:
  xgrammar 0.2.9 compiles a ``pattern`` (its JSON-string regex mode) whose optional group holds a
  repetition to a grammar that also takes the group's tail without its head
  (``^a(\\.\\d+)?$`` took ``"a1"``, ``^\\d{2}(\\.\\d+)?Z$`` took ``"123Z"``); the alternation
  form compiles exactly.
  Every regex of the schema that reaches xgrammar is rewritten so, and its missing anchors
  written out (JSON Schema reads a regex unanchored, xgrammar as a full match:
  :mod:`sglang_v4.sampling.json_schema_regex`): a ``pattern`` (which covers
  ``propertyNames``' ``pattern``, a subschema like any other) and the keys of
  ``patternProperties`` (xgrammar compiles them to the grammar of the object's key strings, where
  ``^a(\\.\\d+)?$`` took the key ``"a1"`` too).

:func:`check_json_schema` checks a schema against its JSON Schema meta-schema first (``jsonschema``):
xgrammar compiles some malformed schemas (``{"anyOf": []}`` to a grammar whose only text is empty,
not JSON at all; a ``type`` list with repeats) and reports others only as a C++ type-check failure.
"""

from __future__ import annotations

import re
from typing import Any

from sglang_v4.sampling import json_schema_false as jsf
from sglang_v4.sampling.json_schema_alternatives import with_node_keywords
from sglang_v4.sampling.json_schema_bounds import rewrite_numeric_bounds
from sglang_v4.sampling.json_schema_date_format import exact_date_format
from sglang_v4.sampling.json_schema_ip_format import exact_ip_format
from sglang_v4.sampling.json_schema_length import length_bounds_as_pattern
from sglang_v4.sampling.json_schema_pattern_length import pattern_within_length_bounds
from sglang_v4.sampling.json_schema_pattern_text import pattern_over_json_text
from sglang_v4.sampling.json_schema_regex import search_as_full_match
from sglang_v4.sampling.json_schema_tuple import prefix_items_within_max_items, tuple_items_as_prefix_items
from sglang_v4.sampling.regex_dialect import regex_format_checker, translate_regex

__all__ = [
    "MAX_SCHEMA_DEPTH",
    "check_json_schema",
    "check_schema_depth",
    "normalize_json_schema",
    "open_arrays",
    "optional_groups_as_alternations",
]

#: Keywords whose value is one subschema.
_ONE_SCHEMA = (
    "items",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
)
#: Keywords whose value is a list of subschemas.
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
#: Keywords whose value maps names to subschemas.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _is_type(node: dict[str, Any], name: str) -> bool:
    t = node.get("type")
    return t == name or (isinstance(t, list) and name in t)


def _is_object_node(node: dict[str, Any]) -> bool:
    """The node constrains objects: ``"type": "object"`` (alone or in a list), or no ``type`` and
    an object keyword (``properties``, ``required``...)."""
    if "type" in node:
        return _is_type(node, "object")
    return any(k in node for k in ("properties", "required", "additionalProperties", "patternProperties"))


#: Keywords through which subschemas of a node may evaluate its keys (``unevaluatedProperties``
#: then applies only to the keys none of them evaluated).
_IN_PLACE_APPLICATORS = ("allOf", "anyOf", "oneOf", "$ref", "$dynamicRef", "if", "dependentSchemas")


def _undeclared_key_schema(node: dict[str, Any], name: str, path: str) -> Any:
    """The schema a key ``name`` that ``properties`` does not declare takes in ``node``.

    Raises:
        ValueError: ``additionalProperties`` (or, without it and without in-place applicators,
            ``unevaluatedProperties``) is ``false`` and no ``patternProperties`` regex matches ``name``.
    """
    patterns = node.get("patternProperties")
    if isinstance(patterns, dict):
        for pattern, sub in patterns.items():
            try:
                if re.search(pattern, name):
                    return sub
            except re.error:
                continue  # xgrammar reports a pattern it cannot read
    keyword = "additionalProperties"
    if keyword not in node and not any(k in node for k in _IN_PLACE_APPLICATORS):
        keyword = "unevaluatedProperties"
    extra = node.get(keyword, True)
    if extra is False:
        raise ValueError(
            f"{path}: required property {name!r} is not in 'properties' and {keyword!r} "
            "is false, so no object satisfies the schema."
        )
    return {} if extra is True else extra


def _rewrite_object(node: dict[str, Any], path: str) -> None:
    """Apply the object rewrites of the module docstring to ``node`` (in place; its subschemas
    were rewritten already)."""
    open_keys = not any(
        k in node
        for k in ("properties", "patternProperties", "additionalProperties", "unevaluatedProperties")
    )
    required = node.get("required")
    jsf.drop_false_properties(node, required if isinstance(required, list) else [], path)
    if isinstance(required, list):
        props = node.get("properties")
        if props is None:
            props = {}
        if isinstance(props, dict):
            missing = [n for n in dict.fromkeys(required) if isinstance(n, str) and n not in props]
            if missing:
                props = dict(props)
                for name in missing:
                    props[name] = _undeclared_key_schema(node, name, path)
                node["properties"] = props
    if open_keys:
        node["additionalProperties"] = {}


#: Keywords that only annotate a schema (a merge keeps the branch's).
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated"})


def _both(a: Any, b: Any) -> Any:
    """One schema meaning ``a`` and ``b`` together where their keywords do not clash (their
    union: xgrammar does not compile ``allOf``); else ``b`` (the narrower, a branch's own)."""
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        if all(a[k] == b[k] for k in a.keys() & b.keys() if k not in _ANNOTATIONS):
            return {**a, **b}
    return b


def _with_parent_keys(parent: dict[str, Any], branch: Any) -> Any:
    """``branch`` of the ``anyOf`` / ``oneOf`` of the object schema ``parent`` with the parent's
    object keywords merged in, where the branch is an object schema of its own (no ``type``, or
    ``"object"``; no ``$ref``): the parent's ``properties`` it does not declare (unless its own
    ``additionalProperties`` is false); for a key both declare, or one only the branch declares,
    the branch's schema joined with what the parent gives that key (:func:`_both`; a key the
    parent forbids, under its ``"additionalProperties": false``, is left out); the parent's
    ``required`` names, and the parent's ``additionalProperties`` / ``patternProperties`` where
    it sets none. JSON Schema applies the parent and the branch together; xgrammar compiles the
    branch alone."""
    if not isinstance(branch, dict) or "$ref" in branch or branch.get("type", "object") != "object":
        return branch
    if not _is_object_node(branch) and "type" not in branch:
        return branch
    out = dict(branch, type="object")
    parent_props = parent.get("properties")
    own_props = out.get("properties")
    declared = isinstance(parent_props, dict) or isinstance(own_props, dict)
    if (
        declared
        and isinstance(parent_props, (dict, type(None)))
        and isinstance(own_props, (dict, type(None)))
    ):
        parent_props, own = parent_props or {}, own_props or {}
        props = {}
        if out.get("additionalProperties") is not False:
            props = {n: v for n, v in parent_props.items() if n not in own}
        for n, v in own.items():
            if n in parent_props:
                props[n] = _both(parent_props[n], v)
                continue
            try:
                props[n] = _both(_undeclared_key_schema(parent, n, "schema"), v)
            except ValueError:
                pass  # the parent allows no such key: the branch cannot have it
        out["properties"] = props
    parent_req, own_req = parent.get("required"), out.get("required")
    if isinstance(parent_req, list) and (own_req is None or isinstance(own_req, list)):
        out["required"] = list(dict.fromkeys([*parent_req, *(own_req or [])]))
    for k in ("additionalProperties", "patternProperties"):
        if k in parent and k not in out:
            out[k] = parent[k]
    return out


def _rewrite_alternatives(parent: dict[str, Any], key: str, path: str) -> list[Any]:
    """The rewritten ``anyOf`` / ``oneOf`` list of ``parent``: its ``type`` and scalar keywords
    applied to each branch (:func:`with_node_keywords`), its object keywords merged into the
    object branches when ``parent`` is an object schema (:func:`_with_parent_keys`). A branch no
    value satisfies is dropped (the others may still match).

    Raises:
        ValueError: no branch can be satisfied.
    """
    merge = parent.get("type") == "object"
    kept, error = [], None
    for i, branch in enumerate(parent[key]):
        narrowed = with_node_keywords(parent, branch)
        if narrowed is False and branch is not False:
            error = error or ValueError(
                f"{path}.{key}[{i}]: its 'type' shares no value with the node's 'type'."
            )
            continue
        branch = narrowed
        if branch is False:  # matches nothing: the other branches mean the same without it
            error = error or ValueError(f"{path}.{key}[{i}]: the schema false matches no value.")
            continue
        try:
            kept.append(
                _rewrite(_with_parent_keys(parent, branch) if merge else branch, f"{path}.{key}[{i}]")
            )
        except ValueError as e:
            error = error or e
    if not kept and error is not None:
        raise error
    return kept


def _rewrite(schema: Any, path: str) -> Any:
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    jsf.type_untyped_key_keywords(out)
    for k in _ONE_SCHEMA:
        if k in out and isinstance(out[k], dict):
            out[k] = _rewrite(out[k], f"{path}.{k}")
    if isinstance(out.get("items"), list):  # Draft 4-2019 tuple form
        out["items"] = [_rewrite(s, f"{path}.items[{i}]") for i, s in enumerate(out["items"])]
    for k in _SCHEMA_LISTS:
        if not isinstance(out.get(k), list):
            continue
        if k in ("anyOf", "oneOf"):
            out[k] = _rewrite_alternatives(out, k, path)
        else:
            out[k] = [_rewrite(s, f"{path}.{k}[{i}]") for i, s in enumerate(out[k])]
    if _is_object_node(out):  # the regexes as sent (search semantics)
        jsf.drop_false_pattern_properties(out, out.get("required"), path)
    if isinstance(out.get("patternProperties"), dict):  # joined as sent, then rewritten
        out["patternProperties"] = _rewrite_key_patterns(
            out["patternProperties"], f"{path}.patternProperties"
        )
    for k in _SCHEMA_MAPS:
        if isinstance(out.get(k), dict):
            out[k] = {name: _rewrite(s, f"{path}.{k}.{name}") for name, s in out[k].items()}
    names = out.get("propertyNames")
    if isinstance(names, dict) and not any(k in names for k in ("type", "enum", "const", "$ref")):
        out["propertyNames"] = {**names, "type": "string"}  # every key is a string: same meaning
    if _is_type(out, "array") and not any(k in out for k in ("items", "prefixItems", "unevaluatedItems")):
        out["items"] = {}
    if _is_object_node(out):
        _rewrite_object(out, path)
    if isinstance(out.get("patternProperties"), dict):  # keys are JSON text too (after the lookups)
        out["patternProperties"] = {
            pattern_over_json_text(k) if isinstance(k, str) else k: v
            for k, v in out["patternProperties"].items()
        }
    rewrite_numeric_bounds(out)
    prefix_items_within_max_items(out)
    exact_date_format(out)
    exact_ip_format(out)
    pattern_within_length_bounds(out)
    if isinstance(out.get("pattern"), str):
        regex = translate_regex(out["pattern"], f"{path}.pattern", schema=True)
        full = search_as_full_match(optional_groups_as_alternations(regex), f"{path}.pattern")
        out["pattern"] = pattern_over_json_text(full)
    length_bounds_as_pattern(out)
    return out


def _rewrite_key_patterns(patterns: dict[str, Any], path: str) -> dict[str, Any]:
    """``patternProperties`` with each key regex's optional groups written as alternations
    (:func:`optional_groups_as_alternations`): xgrammar compiles the keys in the same regex mode
    as a ``pattern``, with the same fault. Two keys that become one text have one match set, so
    JSON Schema applies both subschemas to the same names: they are joined (:func:`_join_all_of`).

    Raises:
        ValueError: naming ``path`` and both keys, where their subschemas cannot be joined.
    """
    out: dict[str, Any] = {}
    first: dict[str, str] = {}
    for key, sub in patterns.items():
        new = key
        if isinstance(key, str):
            regex = translate_regex(key, f"{path}[{key!r}]", schema=True)
            new = search_as_full_match(optional_groups_as_alternations(regex), f"{path}[{key!r}]")
        if new in out:
            out[new] = _join_all_of(out[new], sub, f"{path}: keys {first[new]!r} and {key!r} (both {new!r})")
        else:
            out[new], first[new] = sub, key
    return out


#: Bounds whose join keeps the larger (lower bounds) or the smaller (upper bounds) value.
_LOWER_BOUNDS = frozenset(
    {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"}
)
_UPPER_BOUNDS = frozenset(
    {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"}
)


def _types(t: Any) -> list[str]:
    return [t] if isinstance(t, str) else list(t)


def _join_all_of(a: Any, b: Any, where: str) -> Any:
    """One schema whose instances are those of both ``a`` and ``b`` (JSON Schema's ``allOf`` of
    the two, written out: xgrammar does not compile ``allOf``). Keywords only one side sets are
    kept; on a keyword both set with different values: the tighter bound (``minimum`` /
    ``maxLength``... :data:`_LOWER_BOUNDS`, :data:`_UPPER_BOUNDS`), the common ``type`` names
    (``integer`` within ``number``) and ``enum`` values in ``a``'s order, the union of
    ``required``, ``b``'s annotation. A ``false`` side gives ``false``.

    Raises:
        ValueError: naming ``where`` and the keyword, for any other clash (two ``pattern`` /
            ``const`` / ``properties``... values, or types / enums with nothing in common).
    """
    if a is False or b is False:
        return False
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if not isinstance(a, dict) or not isinstance(b, dict):
        raise ValueError(f"{where}: subschemas {a!r} and {b!r} cannot be joined")
    out = dict(a)
    for k, v in b.items():
        if k not in out or out[k] == v or k in _ANNOTATIONS:
            out[k] = v
            continue
        u = out[k]
        num = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (u, v))
        if k in _LOWER_BOUNDS and num:
            out[k] = max(u, v)
        elif k in _UPPER_BOUNDS and num:
            out[k] = min(u, v)
        elif k == "required" and isinstance(u, list) and isinstance(v, list):
            out[k] = list(dict.fromkeys([*u, *v]))
        elif k == "type" and isinstance(u, (str, list)) and isinstance(v, (str, list)):
            tu, tv = _types(u), _types(v)
            both = [t for t in tu if t in tv or (t == "integer" and "number" in tv)]
            both += [t for t in tv if t == "integer" and "number" in tu and t not in both]
            if not both:
                raise ValueError(f"{where}: 'type' {u!r} and {v!r} have no type in common")
            out[k] = both[0] if len(both) == 1 else both
        elif k == "enum" and isinstance(u, list) and isinstance(v, list):
            both = [x for x in u if x in v]
            if not both:
                raise ValueError(f"{where}: 'enum' {u!r} and {v!r} have no value in common")
            out[k] = both
        else:
            raise ValueError(f"{where}: {k!r} is {u!r} in one subschema and {v!r} in the other")
    return out


def optional_groups_as_alternations(pattern: str) -> str:
    """``pattern`` (ECMA-262 regex text) with each group's greedy or lazy ``?`` quantifier,
    ``(X)?`` / ``(X)??``, written ``(X|)`` (module docstring). Escapes and character classes are
    skipped as they are; the match set is unchanged.

    Args:
        pattern: a JSON Schema ``pattern`` string.

    Returns:
        The rewritten pattern (the input itself when it has no such group).
    """
    if ")?" not in pattern:
        return pattern
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == ")" and pattern[i + 1 : i + 2] == "?" and pattern[i + 2 : i + 3] != "+":
            out.append("|)")
            i += 3 if pattern[i + 2 : i + 3] == "?" else 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


#: Deepest subschema nesting a schema may have (the root is level 0). The rewrite recurses a few
#: Python frames per level, as does the standard library's ``json`` that decodes a grammar's
#: text; a deeper schema is refused by name instead of failing with Python's internal
#: "maximum recursion depth exceeded". 256 levels keeps the 150-level schemas that xgrammar
#: compiles (``test_sampling_grammar_deep_schema``) with room to spare.
MAX_SCHEMA_DEPTH = 256


def check_schema_depth(schema: Any, path: str = "schema", limit: int = MAX_SCHEMA_DEPTH) -> None:
    """Check that no subschema of ``schema`` is nested more than ``limit`` levels below the root.

    A level is one step through a keyword applying subschemas (``properties``, ``items``,
    ``anyOf``...: :func:`_subschema_slots`, JSON Schema Core "Keywords for Applying Subschemas");
    ``const`` / ``enum`` / ``default`` values are data and do not count. Iterative: no Python
    recursion, whatever the depth.

    Raises:
        ValueError: a subschema deeper than ``limit``; the message names ``path`` and the limit.
    """
    if not isinstance(schema, dict):
        return
    stack: list[tuple[dict[str, Any], int]] = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        for _, sub in _subschema_slots(node):
            if depth + 1 > limit:
                raise ValueError(
                    f"{path}: the schema nests subschemas more than {limit} levels deep "
                    f"(at most {limit} are supported)."
                )
            stack.append((sub, depth + 1))


def normalize_json_schema(schema: Any, path: str = "schema") -> Any:
    """``schema`` rewritten as the module docstring describes (a copy; the input is not changed).

    Args:
        schema: a JSON schema (a ``dict``; ``bool`` and other values are returned as they are).
        path: how error messages name the schema's root (e.g. ``"json_schema"``).

    Returns:
        The rewritten schema: the same JSON Schema meaning, with no node xgrammar would compile to
        a grammar that contradicts it in the ways listed above. ``const`` / ``enum`` / ``default``
        / ``examples`` values are data and are never rewritten (object / array ``const`` /
        ``enum`` values: :mod:`sglang_v4.sampling.json_schema_structured_values`, after).

    Raises:
        ValueError: a ``required`` property that ``"additionalProperties": false`` forbids (no
            object satisfies the schema); the message names the node by its path. A schema
            nested deeper than :data:`MAX_SCHEMA_DEPTH` (:func:`check_schema_depth`).
    """
    check_schema_depth(schema, path)
    return _rewrite(tuple_items_as_prefix_items(schema), path)


#: Subschemas nested deeper than this (in subschemas) are meta-checked as schemas of their own:
#: ``jsonschema``'s check recurses about eight Python frames per level, so a whole 150-level
#: schema exceeded Python's recursion limit although it is valid (xgrammar compiles it).
_CHECK_CHUNK_DEPTH = 24


def _subschema_slots(node: dict[str, Any]) -> list[tuple[tuple[Any, ...], Any]]:
    """The subschemas of ``node`` (a schema object) as ``(path from node, subschema)`` pairs:
    the values of the keywords in ``_ONE_SCHEMA`` / ``_SCHEMA_LISTS`` / ``_SCHEMA_MAPS`` and the
    tuple form of ``items`` (JSON Schema Core/Validation, "Keywords for Applying Subschemas")."""
    slots: list[tuple[tuple[Any, ...], Any]] = []
    for k in _ONE_SCHEMA:
        if isinstance(node.get(k), dict):
            slots.append(((k,), node[k]))
    for k in (*_SCHEMA_LISTS, "items"):
        if isinstance(node.get(k), list):
            slots.extend(((k, i), s) for i, s in enumerate(node[k]) if isinstance(s, dict))
    for k in _SCHEMA_MAPS:
        if isinstance(node.get(k), dict):
            slots.extend(((k, n), s) for n, s in node[k].items() if isinstance(s, dict))
    return slots


def _cut_deep(schema: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[tuple[Any, ...], Any]]]:
    """``schema`` with every subschema ``_CHECK_CHUNK_DEPTH`` levels down replaced by ``{}`` (a
    schema valid in every draft), and the cut subschemas with their paths from ``schema``.
    Iterative: no Python recursion, whatever the depth."""
    root = dict(schema)
    cut: list[tuple[tuple[Any, ...], Any]] = []
    stack: list[tuple[dict[str, Any], tuple[Any, ...], int]] = [(root, (), 0)]
    while stack:
        node, path, depth = stack.pop()
        for slot, sub in _subschema_slots(node):
            copy = dict(sub)
            if depth + 1 >= _CHECK_CHUNK_DEPTH:
                cut.append((path + slot, sub))
                copy = {}
            else:
                stack.append((copy, path + slot, depth + 1))
            parent = node
            for key in slot[:-1]:
                parent[key] = parent[key].copy()  # a fresh list / dict: the input is not changed
                parent = parent[key]
            parent[slot[-1]] = copy
    return root, cut


def check_json_schema(schema: Any) -> None:
    """Check ``schema`` against the meta-schema of the draft it names in ``$schema`` (Draft
    2020-12, OpenAI's and pydantic's, when it names none or one ``jsonschema`` does not know;
    when it names none, older tuple arrays are read in their 2020-12 form first,
    :func:`~sglang_v4.sampling.json_schema_tuple.tuple_items_as_prefix_items`).

    A schema of any nesting depth is checked: subschemas ``_CHECK_CHUNK_DEPTH`` levels down are
    checked as schemas of their own (the meta-schema checks each subschema on its own; its
    ``$ref`` / ``$dynamicRef`` point into the meta-schema, never into the checked schema), so
    the check needs no Python recursion deeper than that.

    Raises:
        ValueError: the schema is malformed; the message names the offending keyword by its path
            (e.g. ``invalid JSON schema at 'properties/a/anyOf': [] should be non-empty``).
    """
    from jsonschema import Draft202012Validator, SchemaError
    from jsonschema.validators import validator_for

    cls = Draft202012Validator
    if isinstance(schema, dict) and isinstance(schema.get("$schema"), str):
        cls = validator_for(schema, default=Draft202012Validator)
    elif isinstance(schema, dict):
        # no draft named: a Draft 4 - 2019-09 tuple array is read in its 2020-12 form
        schema = tuple_items_as_prefix_items(schema)
    pending: list[tuple[tuple[Any, ...], Any]] = [((), schema)]
    while pending:
        prefix, part = pending.pop()
        if isinstance(part, dict):
            part, deeper = _cut_deep(part)
            pending.extend((prefix + p, s) for p, s in deeper)
        try:
            cls.check_schema(part, format_checker=regex_format_checker(cls))
        except SchemaError as e:
            where = "/".join(str(p) for p in (*prefix, *e.absolute_path)) or "the root"
            raise ValueError(f"invalid JSON schema at {where!r}: {e.message}") from None


def open_arrays(schema: Any) -> Any:
    """:func:`normalize_json_schema` (kept under the name of its first rewrite, the arrays)."""
    return normalize_json_schema(schema)

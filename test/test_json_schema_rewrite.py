"""``normalize_json_schema`` keeps a schema's JSON Schema meaning: xgrammar's grammar of the
rewritten schema accepts a JSON text exactly when ``jsonschema`` (the independent oracle) finds
the instance valid under the original schema (texts in declared key order, xgrammar's strict
reading)."""

from __future__ import annotations

import json
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")

from sglang_v4.sampling.json_schema_rewrite import normalize_json_schema  # noqa: E402

CASES: list[tuple[dict[str, Any], list[Any]]] = [
    # unevaluatedProperties / unevaluatedItems bound the other keys / items (xgrammar honours them)
    ({"type": "object", "unevaluatedProperties": False}, [{}, {"a": 1}]),
    ({"type": "object", "unevaluatedProperties": {"type": "integer"}}, [{}, {"a": 1}, {"a": "x"}]),
    ({"type": "array", "unevaluatedItems": False}, [[], [1]]),
    ({"type": "array", "unevaluatedItems": {"type": "integer"}}, [[], [1], ["x"]]),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "required": ["b"],
            "unevaluatedProperties": {"type": "string"},
        },
        [{"a": 1}, {"a": 1, "b": "x"}, {"a": 1, "b": 2}, {"b": "x"}],
    ),
    # the rewrites the module exists for
    ({"type": "array", "maxItems": 2}, [[], [1, "x"], [1, 2, 3]]),
    ({"type": "object", "required": ["a"]}, [{}, {"a": 1}]),
    (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["b"]},
        [{"a": 1}, {"a": 1, "b": 2}],
    ),
]


def _accepts(schema: Any, instance: Any) -> bool:
    from xgrammar.testing import _is_grammar_accept_string

    grammar = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False)
    return bool(_is_grammar_accept_string(grammar, json.dumps(instance)))


@pytest.mark.parametrize(("schema", "instances"), CASES, ids=[json.dumps(s) for s, _ in CASES])
def test_rewritten_grammar_accepts_what_the_schema_accepts(
    schema: dict[str, Any], instances: list[Any]
) -> None:
    rewritten = normalize_json_schema(schema)
    for instance in instances:
        valid = jsonschema.Draft202012Validator(schema).is_valid(instance)
        assert _accepts(rewritten, instance) == valid, (instance, valid, rewritten)


def test_required_key_that_unevaluated_properties_forbids_is_unsatisfiable() -> None:
    schema = {"type": "object", "properties": {"a": {}}, "required": ["b"], "unevaluatedProperties": False}
    assert not any(
        jsonschema.Draft202012Validator(schema).is_valid(x) for x in ({"a": 1, "b": 2}, {"b": 2}, {})
    )
    with pytest.raises(ValueError, match="'b'.*'unevaluatedProperties' is false"):
        normalize_json_schema(schema)


#: An object's anyOf / oneOf branches are read with the object (JSON Schema applies both).
BRANCH_CASES: list[tuple[dict[str, Any], list[Any]]] = [
    (
        {
            "type": "object",
            "properties": {"email": {"type": "string"}, "phone": {"type": "string"}},
            "anyOf": [{"required": ["email"]}, {"required": ["phone"]}],
        },
        [{"email": "a"}, {"phone": "b"}, {"email": 1}, {}],
    ),
    # a key both declare: both schemas apply
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "anyOf": [{"properties": {"a": {"minimum": 5}}}],
        },
        [{"a": 1}, {"a": 6}, {"a": "x"}],
    ),
    # a key only the branch declares, which the parent's "additionalProperties": false forbids
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "additionalProperties": False,
            "anyOf": [{"properties": {"b": {"type": "string"}}}],
        },
        [{"a": 1}, {"a": 1, "b": "x"}, {}],
    ),
    # ... or gives a schema
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "additionalProperties": {"type": "integer"},
            "anyOf": [{"properties": {"b": {"maximum": 3}}}],
        },
        [{"a": 1, "b": 2}, {"a": 1, "b": 4}, {"a": 1, "b": "x"}],
    ),
]


@pytest.mark.parametrize(("schema", "instances"), BRANCH_CASES, ids=[json.dumps(s) for s, _ in BRANCH_CASES])
def test_branches_are_read_with_their_object(schema: dict[str, Any], instances: list[Any]) -> None:
    test_rewritten_grammar_accepts_what_the_schema_accepts(schema, instances)


def _nested(levels: int, wrap) -> dict:
    s: dict = {"type": "integer"}
    for _ in range(levels):
        s = wrap(s)
    return s


_WRAPS = {
    "properties": lambda s: {"type": "object", "properties": {"a": s}, "required": ["a"]},
    "items": lambda s: {"type": "array", "items": s},
    "anyOf": lambda s: {"anyOf": [s, {"type": "null"}]},  # no node type: every level satisfiable
}


@pytest.mark.parametrize("kind", list(_WRAPS))
def test_schema_past_the_depth_limit_is_refused_by_name(kind: str) -> None:
    # Found in a new-user trial: ~1000 levels failed with Python's "maximum recursion depth
    # exceeded". Oracle: the depth the schema was built with, against the stated limit.
    from sglang_v4.sampling.json_schema_rewrite import MAX_SCHEMA_DEPTH

    with pytest.raises(ValueError) as e:
        normalize_json_schema(_nested(1000, _WRAPS[kind]), "json_schema")
    msg = str(e.value)
    assert msg.startswith("json_schema: ") and str(MAX_SCHEMA_DEPTH) in msg, msg
    assert "recursion" not in msg, msg
    with pytest.raises(ValueError):
        normalize_json_schema(_nested(MAX_SCHEMA_DEPTH + 1, _WRAPS[kind]))
    out = normalize_json_schema(_nested(MAX_SCHEMA_DEPTH, _WRAPS[kind]))  # the limit itself is served
    for _ in range(MAX_SCHEMA_DEPTH):  # every level kept
        out = (
            out["properties"]["a"]
            if kind == "properties"
            else out["items"]
            if kind == "items"
            else out["anyOf"][0]
        )
    assert out == {"type": "integer"}

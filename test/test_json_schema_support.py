"""``sampling/json_schema_support.py``: multi-branch ``allOf`` merged into an equivalent schema,
and the keywords xgrammar would compile without enforcing refused by name.

Oracles: ``jsonschema`` (what the original schema accepts) against xgrammar's own acceptance of
the same texts under the rewritten schema; the keyword lists of the module's public reports
(vllm-project/vllm#56556, vllm-project/vllm#57550, sgl-project/sglang#37839).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")

from sglang_v4.sampling.json_schema_rewrite import normalize_json_schema  # noqa: E402
from sglang_v4.sampling.json_schema_support import check_enforceable_schema, merge_all_of  # noqa: E402


def _accepts(schema: dict[str, Any], text: str) -> bool:
    from xgrammar.testing import _is_grammar_accept_string

    return _is_grammar_accept_string(xgr.Grammar.from_json_schema(json.dumps(schema)), text)


def _schema_accepts(schema: dict[str, Any], text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except jsonschema.ValidationError:
        return False
    return True


MERGEABLE = [
    (
        {  # pydantic inheritance: a $ref'd base and the subclass's own fields
            "$defs": {
                "Base": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
            },
            "allOf": [
                {"$ref": "#/$defs/Base"},
                {"properties": {"y": {"type": "boolean"}}, "required": ["y"]},
            ],
        },
        ['{"x": 1, "y": true}', '{"x": 1}', '{"y": true}', "7", '{"x": "a", "y": true}'],
    ),
    (
        {  # the same property bounded by two branches
            "type": "object",
            "allOf": [
                {"properties": {"a": {"type": "integer", "minimum": 0}}, "required": ["a"]},
                {"properties": {"a": {"maximum": 5}}},
            ],
        },
        ['{"a": 3}', '{"a": 9}', '{"a": -1}', "{}"],
    ),
    (
        {  # unevaluatedProperties: false over the merged branches
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
            ],
            "unevaluatedProperties": False,
        },
        ['{"a": 1, "b": 2}', '{"a": 1, "b": 2, "c": 3}', '{"a": 1}'],
    ),
]


@pytest.mark.parametrize(("schema", "texts"), MERGEABLE)
def test_merged_all_of_accepts_what_the_schema_accepts(schema: dict[str, Any], texts: list[str]) -> None:
    """The rewritten schema has no multi-branch ``allOf`` left, passes the enforceability check,
    and xgrammar's grammar of it accepts exactly the texts ``jsonschema`` accepts under the
    original (texts in declared key order, the order xgrammar writes)."""
    merged = normalize_json_schema(merge_all_of(schema))
    assert "allOf" not in json.dumps(merged)
    check_enforceable_schema(merged)
    for text in texts:
        assert _accepts(merged, text) == _schema_accepts(schema, text), text
    assert merge_all_of(schema) is not schema and "allOf" in schema  # the input is not changed


@pytest.mark.parametrize(
    ("schema", "keyword", "bad_text"),
    [
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems", "[1, 1]"),
        ({"type": "array", "items": {"type": "integer"}, "contains": {"const": 3}}, "contains", "[1]"),
        ({"type": "number", "multipleOf": 0.5}, "multipleOf", "0.3"),
        ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}, "pattern", '"abcdef"'),
        ({"type": "string", "format": "date", "maxLength": 3}, "format", '"2020-01-01"'),
        ({"type": "integer", "not": {"const": 3}}, "not", "3"),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "if": {"required": ["a"]},
                "then": {"required": ["b"]},
            },
            "if",
            '{"a": 1}',
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {}},
                "dependentRequired": {"a": ["b"]},
            },
            "dependentRequired",
            '{"a": 1}',
        ),
        (
            {"type": "object", "properties": {"c": {"maxLength": 2}}, "required": ["c"]},
            "maxLength",
            '{"c": "abc"}',
        ),
        ({"type": "object", "properties": {"c": {"minimum": 3}}, "required": ["c"]}, "minimum", '{"c": 1}'),
        ({"allOf": [{"type": "integer"}, {"minimum": 3}, {"type": "string"}]}, "allOf", '"x"'),
    ],
)
def test_unenforced_keywords_are_refused(schema: dict[str, Any], keyword: str, bad_text: str) -> None:
    """Each case's ``bad_text`` fails the schema (``jsonschema``) yet xgrammar's grammar accepts
    it: the check refuses the schema with a ``ValueError`` naming the keyword and the node."""
    normalized = normalize_json_schema(merge_all_of(schema))
    assert not _schema_accepts(schema, bad_text)
    assert _accepts(normalized, bad_text)  # what the refusal prevents
    with pytest.raises(ValueError, match=keyword) as e:
        check_enforceable_schema(normalized, "json_schema")
    assert str(e.value).startswith("json_schema")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "multipleOf": 5, "minimum": 0},
        {"type": "string", "maxLength": 3},
        {"type": "string", "pattern": "^a+$"},
        {"type": "string", "format": "date"},
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
        {"enum": ["a", "b"], "maxLength": 5},
        {"allOf": [{"type": "integer", "minimum": 1}]},
        {"oneOf": [{"type": "integer"}, {"type": "string"}]},
    ],
)
def test_enforced_keywords_pass(schema: dict[str, Any]) -> None:
    """Schemas whose keywords the grammar enforces are not refused."""
    check_enforceable_schema(normalize_json_schema(merge_all_of(schema)))

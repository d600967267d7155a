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
        ({"type": "string", "pattern": "^[a-z]+x+$", "maxLength": 3}, "pattern", '"abcdefx"'),
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


def _doubling_refs(levels: int) -> dict[str, Any]:
    """``D{i}`` is ``allOf`` of two ``$ref`` to ``D{i-1}``: a schema of ``levels`` short
    definitions that a merge re-reading every ``$ref`` walks ``2**levels`` times."""
    defs: dict[str, Any] = {
        "D0": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    }
    for i in range(1, levels + 1):
        defs[f"D{i}"] = {"allOf": [{"$ref": f"#/$defs/D{i - 1}"}, {"$ref": f"#/$defs/D{i - 1}"}]}
    return {"$defs": defs, "$ref": f"#/$defs/D{levels}"}


def _pairwise_refs(levels: int) -> dict[str, Any]:
    """An ``allOf`` of ``A{levels}`` and ``B{levels}``, each declaring properties ``p`` and ``q``
    as the previous level: merged property by property, the pairs double per level."""
    defs: dict[str, Any] = {
        "A0": {"type": "object", "properties": {"x": {"type": "integer"}}},
        "B0": {"type": "object", "properties": {"y": {"type": "integer"}}},
    }
    for i in range(1, levels + 1):
        for n in "AB":
            ref = {"$ref": f"#/$defs/{n}{i - 1}"}
            defs[f"{n}{i}"] = {"type": "object", "properties": {"p": ref, "q": dict(ref)}}
    return {"$defs": defs, "allOf": [{"$ref": f"#/$defs/A{levels}"}, {"$ref": f"#/$defs/B{levels}"}]}


def test_all_of_merge_is_not_exponential_in_ref_levels() -> None:
    """A few kilobytes of ``$ref`` definitions must not take exponential time (a request's
    schema is merged before its grammar compiles); the merged result keeps the meaning
    (``jsonschema`` on the original as the oracle) or leaves the ``allOf`` to be refused."""
    import time

    t0 = time.perf_counter()
    merged = merge_all_of(_doubling_refs(40))  # 2**40 walks without sharing: never finishes
    pairs = merge_all_of(_pairwise_refs(40))
    # ~0.2 s on one core; the bound catches the exponential walk (it never ends), so it is
    # generous for a loaded machine
    assert time.perf_counter() - t0 < 10.0
    top = merged["$defs"]["D40"]
    assert "allOf" not in top and top["required"] == ["a"]
    small = _doubling_refs(6)  # the oracle walks every $ref: a small copy of the same shape
    for text in ('{"a": 1}', '{"a": "x"}', "{}", "[]"):
        assert _schema_accepts(merge_all_of(small), text) == _schema_accepts(small, text)
    assert len(json.dumps(pairs)) < 10_000_000  # bounded: merged in part or left to the refusal
    with pytest.raises(ValueError, match="allOf"):
        check_enforceable_schema(normalize_json_schema(pairs))


def test_all_of_ref_cycle_terminates() -> None:
    """An ``allOf`` that names itself through ``$ref`` terminates, left unmerged (refused)."""
    schema = {
        "$defs": {"N": {"allOf": [{"$ref": "#/$defs/N"}, {"type": "object", "required": ["a"]}]}},
        "$ref": "#/$defs/N",
    }
    out = merge_all_of(schema)
    assert out["$defs"]["N"]["allOf"]

"""A twenty-sixth set of public bug reports in constrained decoding: ``patternProperties`` (on a
node without ``type``, with a ``false`` entry, several regexes beside ``additionalProperties:
false``), nullable fields, ``anyOf`` of scalars, and ``pattern`` beside ``maxLength``.

Faults found here and fixed:

* on a node without ``type``, xgrammar ignored ``patternProperties`` / ``propertyNames`` (it
  reads ``properties`` / ``required`` there as an object node, but not these): ``{"patternProperties":
  {"^[0-9]$": {"type": "boolean"}}}`` took ``{"1": "x"}``. Such a node is now an object node
  (``sampling/json_schema_rewrite.py``);
* a ``patternProperties`` entry ``false`` (keys matching it must be absent) was a 400 from
  xgrammar ("Schema 'false' cannot accept any value") for a valid schema; in an object that lets
  no other key in it is now dropped with the ``properties`` it matches, and refused by name where
  another regex may match the same keys or ``additionalProperties`` admits them
  (``sampling/json_schema_false.py``).

Oracles: the ``jsonschema`` package's validator (the draft the schema names); the report's stated
expected behaviour.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("tokenizers")

from grammar_backend_testutil import accepts, ds_grammar_backend, schema_grammar, schema_validator  # noqa: E402
from sglang_v4.sampling.grammar import Grammar, GrammarBackend  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend()


def _validator(schema: Any) -> Any:
    return schema_validator(schema, check_formats=True)


def _sound(backend: GrammarBackend, schema: Any, values: list[Any], offered: list[Any]) -> Grammar:
    """The grammar of ``schema`` takes no value of ``values`` that ``jsonschema`` refuses, and
    takes each of ``offered`` (which ``jsonschema`` must find valid)."""
    g = schema_grammar(backend, schema)
    validator = _validator(schema)
    for v in values:
        if not validator.is_valid(v):
            assert not accepts(g, json.dumps(v)), v
    for v in offered:
        assert validator.is_valid(v), v
        assert accepts(g, json.dumps(v)), v
    return g


def _refused(backend: GrammarBackend, schema: Any, *words: str) -> str:
    with pytest.raises(ValueError) as e:
        schema_grammar(backend, schema)
    msg = str(e.value)
    for w in words:
        assert w in msg, msg
    return msg


@pytest.mark.parametrize(
    "schema, values, offered",
    [
        # java-json-tools/json-schema-validator#239's schema as written (Draft 4, no "type")
        (
            {
                "$schema": "http://json-schema.org/draft-04/schema#",
                "definitions": {},
                "patternProperties": {"^[0-9]$": {"type": "boolean"}},
            },
            [{"1": "x"}, {"9": 0}, {"1": True, "2": None}, {"1": True}],
            [{"1": True}, {"9": False}],
        ),
        # the same fault with propertyNames / minProperties on a node without "type"
        ({"propertyNames": {"pattern": "^a"}}, [{"b": 1}, {"ab": 1}, {"a": 1, "zz": 2}], [{"a": 1}]),
        ({"minProperties": 1, "additionalProperties": {"type": "integer"}}, [{}, {"a": 1}], [{"a": 1}]),
    ],
)
def test_pattern_properties_without_type_are_enforced(
    backend: GrammarBackend, schema: dict[str, Any], values: list[Any], offered: list[Any]
) -> None:
    """java-json-tools/json-schema-validator#239: ``patternProperties`` on a schema without
    ``"type"``; keys matching ``^[0-9]$`` must hold booleans (``{"1": true}`` / ``{"9": false}``
    valid). Old code here: ``{"1": "x"}`` was taken (the regexes were ignored on an untyped
    node). Now no value ``jsonschema`` refuses is taken."""
    _sound(backend, schema, values, offered)


def test_pattern_properties_with_additional_properties_false(backend: GrammarBackend) -> None:
    """netmail-open/wjelement#66: with ``patternProperties`` ``^string[0-9]+$`` and
    ``additionalProperties: false``, ``{"foo": "bar"}`` must fail (the key matches no pattern);
    the grammar never takes it, and takes ``{"string1": "x"}``."""
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "patternProperties": {"^string[0-9]+$": {"type": "string"}},
        "additionalProperties": False,
    }
    values = [{"foo": "bar"}, {"string1": 1}, {"string1": "x", "foo": "y"}, {"string12": "a"}, {}]
    _sound(backend, schema, values, [{"string1": "x"}, {}])


def test_two_pattern_regexes_and_a_property_beside_additional_false(backend: GrammarBackend) -> None:
    """colinhacks/zod#6259 (review): with ``^S_`` and ``^N_`` regexes, a declared ``id`` and
    ``additionalProperties: false``, ``{"S_a": "a", "N_b": 1}`` and ``{"id": 1, "S_a": "a"}``
    stay valid (one regex must not shut out the other's keys, nor the declared ones) and
    ``{"x": 1}`` is refused."""
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "patternProperties": {"^S_": {"type": "string"}, "^N_": {"type": "number"}},
        "additionalProperties": False,
    }
    values = [{"x": 1}, {"S_a": 1}, {"N_b": "n"}, {"id": "x"}, {"id": 1, "x": 2}]
    _sound(backend, schema, values, [{"S_a": "a", "N_b": 1}, {"id": 1, "S_a": "a"}])


def test_false_pattern_entry_beside_a_disjoint_regex(backend: GrammarBackend) -> None:
    """python-jsonschema/jsonschema#1404: ``additionalProperties: false`` written inside
    ``patternProperties`` is a regex ``additionalProperties`` with the schema ``false`` (keys
    containing it must be absent); ``{"a": 0, "bc": 1}`` is valid by the spec. Old code here: a
    400 from xgrammar ("Schema 'false' cannot accept any value") for that valid schema. Now it
    compiles, never takes a key the false entry matches, and takes ``{"a": 0}``."""
    schema = {
        "type": "object",
        "patternProperties": {"^[a-z]$": {"type": "integer"}, "additionalProperties": False},
    }
    values = [{"additionalProperties": 1}, {"a": "x"}, {"a": 0, "b": 1}]
    _sound(backend, schema, values, [{"a": 0}, {"a": 0, "b": 1}, {}])


def test_false_pattern_entry_in_a_closed_object(backend: GrammarBackend) -> None:
    """python-jsonschema/jsonschema#1404 (the ``false`` subschema under ``patternProperties``):
    in an object closed by ``additionalProperties: false``, ``"^x_": false`` forbids ``x_``
    keys, a declared ``x_old`` included; the rest of the object is unchanged."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "x_old": {"type": "integer"}},
        "patternProperties": {"^x_": False},
        "additionalProperties": False,
    }
    values = [{"x_old": 1}, {"a": 1, "x_new": 2}, {"a": "s"}, {"b": 1}]
    g = _sound(backend, schema, values, [{"a": 1}, {}])
    assert not accepts(g, '{"x_old": 1}')


@pytest.mark.parametrize(
    "schema, words",
    [
        # a required key the false entry forbids: no object satisfies the schema
        (
            {
                "type": "object",
                "patternProperties": {"^x_": False},
                "required": ["x_a"],
                "additionalProperties": False,
            },
            ["'x_a'", "no object satisfies"],
        ),
        # additionalProperties lets x_ keys in, which constrained decoding cannot keep out
        (
            {
                "type": "object",
                "patternProperties": {"^x_": False},
                "additionalProperties": {"type": "integer"},
            },
            ["patternProperties", "'^x_'"],
        ),
        # another regex may match the same keys
        (
            {"type": "object", "patternProperties": {"^x": False, "_id$": {"type": "integer"}}},
            ["patternProperties", "'_id$'"],
        ),
    ],
)
def test_false_pattern_entry_that_cannot_be_enforced_is_a_named_400(
    backend: GrammarBackend, schema: dict[str, Any], words: list[str]
) -> None:
    """python-jsonschema/jsonschema#1404 (``false`` under ``patternProperties``): where the
    ``false`` entry cannot be kept by dropping it, the request is a ``ValueError`` (HTTP 400)
    naming the keyword, not xgrammar's bare "Schema 'false' cannot accept any value"."""
    msg = _refused(backend, schema, *words)
    assert "Schema 'false'" not in msg


def test_any_of_null_or_boolean_is_one_value(backend: GrammarBackend) -> None:
    """dottxt-ai/outlines#497: ``anyOf`` of ``null`` and ``boolean`` was compiled to a regex that
    also matched ``nulltrue``; the right grammar takes ``null`` / ``true`` / ``false`` only."""
    schema = {
        "properties": {"foo": {"anyOf": [{"type": "null"}, {"type": "boolean"}]}},
        "required": ["foo"],
        "type": "object",
    }
    g = _sound(backend, schema, [{"foo": 1}, {"foo": "null"}, {}], [{"foo": None}, {"foo": True}])
    for text in ('{ "foo" : nulltrue }', '{"foo": truenull}', '{"foo": nullfalse}'):
        assert not accepts(g, text), text


def test_nullable_string_fields_from_the_ai_sdk(backend: GrammarBackend) -> None:
    """vllm-project/vllm#11415: the AI SDK's ``generateObject`` schema with nullable strings
    (``"type": ["string", "null"]``, Draft 7) was a 400 in v0.6.5; it must compile and offer
    both ``null`` and a string, and nothing ``jsonschema`` refuses."""
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "name": {"type": ["string", "null"]},
            "age": {"type": ["number", "null"]},
            "tags": {"type": ["array", "null"], "items": {"type": "string"}},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": False,
    }
    values = [{"name": 1, "age": None, "tags": None}, {"name": "a", "age": "3", "tags": []}]
    values += [{"name": "a", "age": 3}, {"name": "a", "age": 3, "tags": [1]}]
    offered = [{"name": None, "age": None, "tags": None}, {"name": "a", "age": 3.5, "tags": ["x"]}]
    _sound(backend, schema, values, offered)


def test_pattern_beside_max_length_on_array_items(backend: GrammarBackend) -> None:
    """vllm-project/vllm#45592: a ``pattern`` on string items made ``maxLength`` ignored (longer
    strings came out). The right behaviour: no string over ``maxLength`` is ever taken -- or the
    schema is refused by name (vllm-project/vllm#45599's fail-closed fix)."""
    schema = {
        "type": "object",
        "properties": {
            "codes": {"type": "array", "items": {"type": "string", "pattern": "^[A-Z]+$", "maxLength": 3}}
        },
        "required": ["codes"],
    }
    try:
        g = schema_grammar(backend, schema)
    except ValueError as e:
        assert "maxLength" in str(e) and "pattern" in str(e), e
        return
    validator = _validator(schema)
    for codes in (["ABCD"], ["AB", "ABCDEFG"], ["ab"], ["ABC"], ["A", "BC"]):
        value = {"codes": codes}
        assert accepts(g, json.dumps(value)) == validator.is_valid(value), value

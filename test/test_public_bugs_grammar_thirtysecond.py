"""A thirty-second set of public bug reports in constrained decoding: ``additionalProperties``
beside ``patternProperties`` (a fault here, now refused by name), ``minProperties`` /
``maxProperties`` over declared and undeclared keys, ``propertyNames`` with a ``pattern``,
``multipleOf`` on a non-integer node and ``uniqueItems`` on an array of objects (refused by name),
a non-ASCII ``enum`` inside a ``$ref``'d definition, one-sided and negative integer bounds, leading
zeros under a ``minimum``, and ``pattern`` beside ``"type": "integer"`` (ignored by the spec).

Fault found and fixed: xgrammar 0.2.9 compiles an object carrying ``patternProperties`` and an
``additionalProperties`` other than ``false`` to a grammar that does not mean the schema: beside
``properties`` a key matching a regex could take the ``additionalProperties`` schema instead
(``{"age": "s"}`` under ``"^[Aa]ge$": integer`` and ``additionalProperties: string``), and under
``additionalProperties: true`` a declared key took any value; without ``properties`` every key no
regex matches was shut out. Such a schema is now a request error naming both keywords.

Fixture: the grammar backend over DeepSeek-V4's real tokenizer (``ds_grammar_backend``); a
request's ``json_schema`` field checked as the server checks it (``grammar_for`` /
``schema_grammar``); xgrammar's own matcher tells whether a text is a whole answer (``accepts``).

Oracles: the ``jsonschema`` package's validator (Draft 2020-12) for what a schema admits (a
grammar must take no value the validator refuses, and must take the listed valid values);
``json.loads`` of an accepted text; the reports' stated expected behaviour (a schema the decoder
cannot enforce is a ``ValueError`` -- HTTP 400 -- naming the node and the keyword).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("tokenizers")

from grammar_backend_testutil import (  # noqa: E402
    accepts,
    check_schema_verdicts,
    ds_grammar_backend,
    grammar_for,
    schema_grammar,
)
from sglang_v4.sampling.grammar import GrammarBackend  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend()


def _sound(backend: GrammarBackend, schema: dict[str, Any], invalid: list[Any], valid: list[Any]) -> None:
    """The grammar of ``schema`` takes none of ``invalid`` and all of ``valid`` (each written as
    ``json.dumps`` writes it, non-ASCII left as it is); ``jsonschema`` confirms each list."""
    g = schema_grammar(backend, schema)
    validator = jsonschema.Draft202012Validator(schema)
    for v in invalid:
        assert not validator.is_valid(v), v
        assert not accepts(g, json.dumps(v, ensure_ascii=False)), v
    for v in valid:
        assert validator.is_valid(v), v
        assert accepts(g, json.dumps(v, ensure_ascii=False)), v


# --------------------------------------------------------------------------- patternProperties


_AGE = {"^[Aa]ge$": {"type": "integer"}}


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "patternProperties": _AGE,
            "additionalProperties": {"type": "string"},
            "minProperties": 2,
        },
        {"type": "object", "patternProperties": _AGE, "additionalProperties": {"type": "string"}},
        {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "patternProperties": _AGE,
            "additionalProperties": {"type": "string"},
        },
        {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "patternProperties": _AGE,
            "additionalProperties": True,
        },
        {"type": "object", "patternProperties": _AGE, "additionalProperties": {}},
    ],
)
def test_learnjsonschema_130_additional_properties_beside_pattern_properties_is_refused(
    backend: GrammarBackend, schema: dict[str, Any]
) -> None:
    """sourcemeta/learnjsonschema.com#130: the ``minProperties`` example ``{"patternProperties":
    {"^[Aa]ge$": {"type": "integer"}}, "additionalProperties": {"type": "string"},
    "minProperties": 2}``, where ``{"age": 1, "x": "y"}`` and two keys no regex matches are valid.
    Old code here: the grammar refused both (the ``additionalProperties`` schema was dropped), and
    with ``properties`` beside it took ``{"age": "s"}`` (a key matching the regex took the
    ``additionalProperties`` schema) or, under ``true``, ``{"name": 1}``. Expected: a request
    error naming both keywords, not a grammar that disagrees with the schema."""
    with pytest.raises(
        ValueError, match=r"'additionalProperties' other than false together with 'patternProperties'"
    ):
        schema_grammar(backend, schema)


def test_learnjsonschema_130_pattern_properties_with_additional_false_still_compile(
    backend: GrammarBackend,
) -> None:
    """sourcemeta/learnjsonschema.com#130's object, closed (``additionalProperties: false``):
    the refusal above is for non-``false`` values only. Expected: it compiles, a key matching the
    regex takes integers only, no other key is taken, and ``minProperties: 1`` refuses ``{}``."""
    schema = {"type": "object", "patternProperties": _AGE, "additionalProperties": False, "minProperties": 1}
    _sound(
        backend,
        schema,
        [{"age": "s"}, {"x": "y"}, {}, {"age": 1, "x": 2}],
        [{"age": 1}, {"Age": 2, "age": 3}],
    )


# --------------------------------------------------------------------------- min/maxProperties


def test_json_schema_46_max_properties_counts_undeclared_keys(backend: GrammarBackend) -> None:
    """jsonrainbow/json-schema#46: ``{"properties": {"a": {"type": "boolean"}}, "maxProperties":
    1}`` must refuse ``{"a": true, "junk_field": 2}`` (the extra key exceeds the bound).
    Expected: the grammar never takes it, and takes ``{"a": true}``."""
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}}, "maxProperties": 1}
    _sound(backend, schema, [{"a": True, "junk_field": 2}, {"a": "x"}], [{"a": True}, {}])


def test_llguidance_168_min_properties_over_optional_properties(backend: GrammarBackend) -> None:
    """guidance-ai/llguidance#168: ``minProperties`` / ``maxProperties`` over a closed object
    whose properties are all optional. Expected (jsonschema): ``{}`` refused under
    ``minProperties: 1``; one or both keys taken."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "minProperties": 1,
        "additionalProperties": False,
    }
    check_schema_verdicts(backend, schema, [{}, {"a": 1}, {"b": 2}, {"a": 1, "b": 2}, {"c": 1}])


def test_validictory_45_exactly_one_of_two_optional_properties(backend: GrammarBackend) -> None:
    """jpmckinney/validictory#45: ``minProperties: 1`` and ``maxProperties: 1`` over properties
    ``a`` and ``b`` means "exactly one of them": ``{"a": ...}`` / ``{"b": ...}`` valid, ``{}`` and
    ``{"a": ..., "b": ...}`` invalid. Expected: the grammar's verdicts are the validator's."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "minProperties": 1,
        "maxProperties": 1,
    }
    check_schema_verdicts(backend, schema, [{"a": 1}, {"b": 2}, {}, {"a": 1, "b": 2}])


def test_json_validator_29_min_properties_refuses_the_empty_object(backend: GrammarBackend) -> None:
    """jhthorsen/json-validator#29: ``{"properties": {"bar": {"type": "integer"}},
    "minProperties": 1}`` must refuse ``{}``. Expected: ``{}`` is not a whole answer of the
    grammar; ``{"bar": 1}`` is."""
    schema = {"type": "object", "properties": {"bar": {"type": "integer"}}, "minProperties": 1}
    _sound(backend, schema, [{}, {"bar": "1"}], [{"bar": 1}])


# --------------------------------------------------------------------------- propertyNames


def test_njsonschema_1915_property_names_pattern_is_enforced(backend: GrammarBackend) -> None:
    """RicoSuter/NJsonSchema#1915: ``{"propertyNames": {"type": "string", "pattern":
    "^urn:.*$"}}`` did not refuse ``{"urn:test": {}, "http:test": {}}``. Expected: the grammar
    never takes a key that does not start with ``urn:``; ``{"urn:test": {}}`` is taken."""
    schema = {"type": "object", "propertyNames": {"type": "string", "pattern": "^urn:.*$"}}
    _sound(
        backend,
        schema,
        [{"urn:test": {}, "http:test": {}}, {"http:test": {}}, {"xurn:a": 1}],
        [{"urn:test": {}}, {"urn:a": 1, "urn:b": "c"}, {}],
    )


# --------------------------------------------------------------------------- refused keywords


def test_networknt_161_multiple_of_on_an_untyped_property_is_a_named_error(backend: GrammarBackend) -> None:
    """networknt/json-schema-validator#161: ``{"properties": {"int": {"multipleOf": 0.1}}}``
    (``{"int": 1}`` valid, ``{"int": 0.01}`` not). The grammar cannot count decimal multiples.
    Expected: a ``ValueError`` naming the node ``schema.properties.int`` and ``multipleOf``; on an
    integer the keyword is enforced (verdicts equal the validator's)."""
    with pytest.raises(ValueError, match=r"schema\.properties\.int: .*'multipleOf'"):
        schema_grammar(backend, {"type": "object", "properties": {"int": {"multipleOf": 0.1}}})
    check_schema_verdicts(backend, {"type": "integer", "multipleOf": 3}, [3, 4, 0, -6, 7])


def test_njsonschema_165_unique_items_of_objects_is_a_named_error(backend: GrammarBackend) -> None:
    """RicoSuter/NJsonSchema#165: ``uniqueItems: true`` over an array of key/value objects must
    refuse two equal objects. A grammar cannot compare items. Expected: a ``ValueError`` naming
    ``uniqueItems``, not a grammar that takes ``[{"key": "a"}, {"key": "a"}]``."""
    schema = {
        "type": "array",
        "uniqueItems": True,
        "items": {"type": "object", "properties": {"key": {"type": "string", "minLength": 1}}},
    }
    with pytest.raises(ValueError, match=r"schema: .*'uniqueItems'"):
        schema_grammar(backend, schema)


# --------------------------------------------------------------------------- non-ASCII enum


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_manatee_json_45_non_ascii_enum_in_a_referenced_schema(
    backend: GrammarBackend, ensure_ascii: bool
) -> None:
    """gregsdennis/Manatee.Json#45: an ``enum`` holding ``"ændring"`` inside a referenced schema
    refused ``{"prop3": "ændring"}``. Expected: with the schema sent either way (``\\u00e6``
    escapes or raw UTF-8), the grammar takes ``"ændring"`` as UTF-8 text under both the direct and
    the ``$ref``'d property, the text reads back (``json.loads``) as a valid value, and a near
    miss (``"andring"``, ``"?ndring"``) is refused."""
    schema = {
        "type": "object",
        "properties": {
            "prop1": {"enum": ["ændring", "test"], "type": "string"},
            "prop2": {"$ref": "#/$defs/p"},
        },
        "$defs": {
            "p": {"type": "object", "properties": {"prop3": {"enum": ["ændring", "test"], "type": "string"}}}
        },
    }
    g = grammar_for(backend, json_schema=json.dumps(schema, ensure_ascii=ensure_ascii))
    validator = jsonschema.Draft202012Validator(schema)
    text = '{"prop1": "ændring", "prop2": {"prop3": "ændring"}}'
    assert accepts(g, text) and validator.is_valid(json.loads(text))
    for bad in [{"prop1": "andring"}, {"prop2": {"prop3": "?ndring"}}]:
        assert not validator.is_valid(bad) and not accepts(g, json.dumps(bad, ensure_ascii=False)), bad


# --------------------------------------------------------------------------- integer bounds


def _integer_verdicts(backend: GrammarBackend, schema: dict[str, Any], lo: int, hi: int) -> None:
    """Every integer in ``[lo, hi]`` is a whole answer of the grammar exactly when ``jsonschema``
    finds it valid (the range must hold both kinds)."""
    g = schema_grammar(backend, schema)
    validator = jsonschema.Draft202012Validator(schema)
    verdicts = {n: validator.is_valid(n) for n in range(lo, hi + 1)}
    assert any(verdicts.values()) and not all(verdicts.values())
    assert {n: accepts(g, str(n)) for n in verdicts} == verdicts


def test_sglang_34778_one_sided_negative_minimum(backend: GrammarBackend) -> None:
    """sgl-project/sglang#34778: ``{"type": "integer", "minimum": -N}`` (no upper bound) took the
    incomplete literal ``"-"`` and refused every valid negative integer. Expected: ``"-"`` is not
    a whole answer; each integer near the bound is taken exactly when it is ``>= -N``."""
    schema = {"type": "integer", "minimum": -17}
    assert not accepts(schema_grammar(backend, schema), "-")
    _integer_verdicts(backend, schema, -40, 25)


def test_json_schema_faker_45_negative_range_up_to_zero(backend: GrammarBackend) -> None:
    """json-schema-faker/json-schema-faker#45: ``{"type": "integer", "minimum": -100, "maximum":
    0}`` produced no negative integer. Expected: every integer in ``[-100, 0]`` is taken, none
    outside it."""
    _integer_verdicts(backend, {"type": "integer", "minimum": -100, "maximum": 0}, -110, 10)


def test_llama_cpp_7797_no_leading_zeros_under_bounds(backend: GrammarBackend) -> None:
    """ggml-org/llama.cpp#7797 (review): the grammar of ``{"type": "integer", "minimum": 3}``
    matched ``01`` (not JSON, and below the bound). Expected: texts with a leading zero are
    refused under ``minimum: 3`` and under ``[-123, 42]``, and the integers of ``[-123, 42]`` are
    taken exactly."""
    g = schema_grammar(backend, {"type": "integer", "minimum": 3})
    for text in ["01", "03", "007", "-0"]:
        assert not accepts(g, text), text
    assert accepts(g, "3") and accepts(g, "10")
    bounded = {"type": "integer", "minimum": -123, "maximum": 42}
    g2 = schema_grammar(backend, bounded)
    for text in ["-09", "042", "00"]:
        assert not accepts(g2, text), text
    _integer_verdicts(backend, bounded, -130, 50)


def test_json_schema_461_pattern_beside_integer_type_is_ignored(backend: GrammarBackend) -> None:
    """jsonrainbow/json-schema#461: ``{"type": "integer", "pattern": "^15[0-9]{8}$"}``; the
    maintainers' reading (the spec): ``pattern`` applies to strings only, so ``-34245`` is a valid
    value. Expected: the grammar takes ``{"created": -34245}`` and refuses the string
    ``"1500000000"`` (not an integer)."""
    schema = {"type": "object", "properties": {"created": {"type": "integer", "pattern": "^15[0-9]{8}$"}}}
    _sound(backend, schema, [{"created": "1500000000"}], [{"created": -34245}, {"created": 1500000000}])

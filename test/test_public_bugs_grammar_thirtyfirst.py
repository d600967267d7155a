"""A thirty-first set of public bug reports in constrained decoding: scalar ``const`` values and
boolean / numeric ``enum`` lists (their JSON spelling, not a host language's), ``oneOf`` between a
string and ``null``, a ``oneOf`` whose branches overlap (refused by name; the chat route forwards
it unchanged), arrays with no ``minItems`` / ``maxItems`` (any length, the empty array included),
JSON string escapes inside a schema's strings, backslashes in a ``pattern`` (a character class that
excludes ``\\`` and ``"``, ``\\w`` / ``\\s`` / ``\\/``), ECMA-262 named groups in a ``pattern``,
``required`` keys outside ``properties`` (checked against ``additionalProperties``; unsatisfiable
when that is ``false``: refused by name), a closed empty object, and exclusive numeric bounds
beside inclusive ones.

No fault was found here: each test stands as a regression guard of the report's expected
behaviour.

Oracles: the ``jsonschema`` package's validator (Draft 2020-12) for what a schema admits (a
grammar must take no value the validator refuses, and must take the value as ``json.dumps``
writes it when the validator admits it); ``json.loads`` for what a JSON string escape means;
Python's ``re`` (named groups written ``(?P<name>...)``) for an ECMA-262 pattern; the report's
stated expected behaviour (an unrepresentable schema is a request error naming the field and the
keyword; the chat route forwards the schema unchanged, as ``json.loads`` reads it).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("tokenizers")

from chat_tools_testutil import _grammar_of, client_for, grammar_chunk_tm  # noqa: E402
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


_check = check_schema_verdicts


# --------------------------------------------------------------------------- const / enum


@pytest.mark.parametrize(
    "schema, values",
    [
        ({"const": 42}, [42, 43, "42", 4.2]),
        ({"const": True}, [True, False, "True", 1]),
        ({"const": None}, [None, "null", 0, False]),
        ({"type": "boolean", "enum": [True]}, [True, False, "true"]),
        (
            {
                "type": "object",
                "properties": {"c": {"const": None}, "n": {"const": 7}},
                "required": ["c", "n"],
                "additionalProperties": False,
            },
            [{"c": None, "n": 7}, {"c": 0, "n": 7}, {"c": None, "n": 8}, {"c": "None", "n": 7}],
        ),
    ],
)
def test_lm_format_enforcer_183_scalar_const_and_boolean_enum(
    backend: GrammarBackend, schema: dict[str, Any], values: list[Any]
) -> None:
    """noamgat/lm-format-enforcer#183: ``{"const": 42}``, ``{"const": true}`` and
    ``{"const": null}`` crashed (the value was treated as a string), and ``{"type": "boolean",
    "enum": [true]}`` allowed Python's ``True`` instead of JSON's ``true``. Expected: a scalar
    constant takes exactly its JSON text, nested in an object as well, and a boolean enum takes
    the JSON literal only."""
    _check(backend, schema, values)
    g = schema_grammar(backend, schema)
    assert not accepts(g, "True") and not accepts(g, "None")


@pytest.mark.parametrize(
    "schema, values",
    [
        ({"type": "integer", "enum": [1, 2]}, [1, 2, 3, "1"]),
        ({"type": "number", "const": 2.5}, [2.5, 3, "2.5"]),
        ({"enum": [1, "a", None, False]}, [1, "a", None, False, "1", 0, True]),
    ],
)
def test_sim_7558_enum_and_const_stay_constraints(
    backend: GrammarBackend, schema: dict[str, Any], values: list[Any]
) -> None:
    """simstudioai/sim#7558: ``enum`` and ``const`` on number, integer and boolean fields were
    turned into prose, so an out-of-enum value came back. Expected: the grammar takes each listed
    value and nothing else -- mixed-type enums included."""
    _check(backend, schema, values)


# --------------------------------------------------------------------------- oneOf


def test_jsonschema_196_one_of_string_or_null(backend: GrammarBackend) -> None:
    """tdegrunt/jsonschema#196: ``{"id": {"oneOf": [{"type": "string", "minLength": 1},
    {"type": "null"}]}}`` refused ``{"id": "not-null"}``. Expected: a non-empty string and
    ``null`` are taken; the empty string (no branch) and a number are refused."""
    schema = {
        "type": "object",
        "properties": {"id": {"oneOf": [{"type": "string", "minLength": 1}, {"type": "null"}]}},
    }
    _check(backend, schema, [{"id": "not-null"}, {"id": None}, {"id": ""}, {"id": 1}, {}])


OVERLAPPING = {
    "type": "object",
    "properties": {"v": {"oneOf": [{}, {"type": "null"}]}},
    "required": ["v"],
}


def test_drf_spectacular_1534_overlapping_one_of_is_refused_by_name(backend: GrammarBackend) -> None:
    """tfranzel/drf-spectacular#1534: ``{"oneOf": [{}, {"type": "null"}]}`` -- ``null`` matches
    both branches, so by JSON Schema's ``oneOf`` (exactly one) it is invalid, which the schema's
    author never meant. Expected here: a grammar may not quietly read ``oneOf`` as ``anyOf`` and
    produce ``null`` (the validator refuses it); the schema is a ``ValueError`` naming the
    ``json_schema`` field and the ``oneOf`` keyword."""
    assert not jsonschema.Draft202012Validator(OVERLAPPING).is_valid({"v": None})
    with pytest.raises(ValueError, match=r"^json_schema: .*oneOf"):
        schema_grammar(backend, OVERLAPPING)


def test_drf_spectacular_1534_overlapping_one_of_on_the_chat_route(tok: Any, backend: GrammarBackend) -> None:
    """tfranzel/drf-spectacular#1534 on the chat route: the route hands a ``response_format``'s
    schema to the engine as it was sent (``json.loads`` of the forwarded ``json_schema`` equals
    the request's schema, ``oneOf`` kept, not rewritten to ``anyOf``), so the engine's compile
    refuses it by name; the same schema with ``anyOf`` is forwarded and takes ``null``."""
    tm = grammar_chunk_tm(tok, '{"v": null}')
    _, tc = client_for(tm, allow_auto_truncate=False)
    any_of = {**OVERLAPPING, "properties": {"v": {"anyOf": [{}, {"type": "null"}]}}}
    for schema in (OVERLAPPING, any_of):
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "v"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": schema}},
        }
        r = tc.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert json.loads(tm.received[-1].sampling_params["json_schema"]) == schema
    with pytest.raises(ValueError, match=r"^json_schema: .*oneOf"):
        grammar_for(backend, json_schema=tm.received[0].sampling_params["json_schema"])
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([f"<t{i}>" for i in range(8)])).compile_grammar(
        _grammar_of(tm.received[1].sampling_params)
    )
    m = xgr.GrammarMatcher(compiled)
    assert m.accept_string('{"v": null}') and m.is_completed()


# --------------------------------------------------------------------------- arrays


def test_any_language_model_160_unbounded_array_takes_any_length(backend: GrammarBackend) -> None:
    """huggingface/AnyLanguageModel#160: an ``array`` with no ``minItems`` / ``maxItems`` was
    forced to a fixed item count (never empty, padded with invented items). Expected: the empty
    array, one item and many items (17) are all taken; a wrong item type is refused."""
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["tags"],
    }
    values = [{"tags": []}, {"tags": ["a"]}, {"tags": [f"t{i}" for i in range(17)]}, {"tags": [1]}]
    _check(backend, schema, values)


# --------------------------------------------------------------------------- escapes and patterns


def test_outlines_991_escaped_quote_and_backslash_in_a_string(backend: GrammarBackend) -> None:
    """dottxt-ai/outlines#991: a schema's string took ``\\\\`` but not ``\\"``, so a value
    holding a quote could not be written. Expected: every escape JSON defines (``\\"``,
    ``\\\\``, ``\\/``, ``\\n``, ``\\u00e9``) is taken, as ``json.loads`` reads it; an escape JSON
    does not define (``\\q``) and a raw control character are refused."""
    schema = {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}
    g = schema_grammar(backend, schema)
    for text in ['{"s": "a\\"b"}', '{"s": "a\\\\b"}', '{"s": "a\\/b"}', '{"s": "a\\nb"}', '{"s": "\\u00e9"}']:
        json.loads(text)  # the oracle: valid JSON
        assert accepts(g, text), text
    for text in ['{"s": "a\\qb"}', '{"s": "a\x01b"}']:
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)
        assert not accepts(g, text), text


def test_ajv_1085_pattern_class_excluding_backslash_and_quote(backend: GrammarBackend) -> None:
    """ajv-validator/ajv#1085: ``"pattern": "^[^\\\\\\\\\\"]+$"`` (a class excluding ``\\`` and
    ``"``) let ``an invalid\\ string`` through. Expected: a value holding a backslash or a quote
    is refused, a plain one taken."""
    schema = {
        "type": "object",
        "properties": {"foo": {"type": "string", "pattern": '^[^\\\\"]+$'}},
        "required": ["foo"],
    }
    values = [{"foo": "an invalid\\ string"}, {"foo": 'an invalid" string'}, {"foo": "ok"}]
    _check(backend, schema, values)


def test_valico_73_backslash_escapes_in_a_pattern(backend: GrammarBackend) -> None:
    """s-panferov/valico#73: ``"pattern": "\\\\w+:(\\\\/?\\\\/?)[^\\\\s]+"`` was refused as an
    unrecognised escape. Expected: the schema compiles; ``\\w``, ``\\/`` and ``\\s`` keep their
    regular-expression meaning (an anchored copy, so the whole value is checked)."""
    schema = {"type": "string", "pattern": "^\\w+:(\\/?\\/?)[^\\s]+$"}
    _check(backend, schema, ["http://example", "a:b", "no", "a:b c", ":x"])


def test_json_schema_validator_413_named_groups_in_a_pattern(backend: GrammarBackend) -> None:
    """java-json-tools/json-schema-validator#413: an ECMA-262 pattern with named groups
    ``(?<OrgOID>...)`` was refused as invalid. Expected: the schema compiles and takes what the
    pattern matches (``FFFF.12645``), checked with Python's ``re`` writing the groups
    ``(?P<name>...)``."""
    ecma = "^((?<OrgOID>[^,. ]+)\\s*\\.\\s*(?<AOID>[^,. ]+))(?:\\s*,\\s*)?$"
    python = re.compile(ecma.replace("(?<", "(?P<"))
    g = schema_grammar(backend, {"type": "string", "pattern": ecma})
    cases = ["FFFF.12645", "FFFF.12645,", "x", "a.b.c", "a . b"]
    verdicts = [python.fullmatch(s) is not None for s in cases]
    assert any(verdicts) and not all(verdicts)
    assert [accepts(g, json.dumps(s)) for s in cases] == verdicts


# --------------------------------------------------------------------------- required keys


def _sound(backend: GrammarBackend, schema: Any, valid: list[Any], invalid: list[Any]) -> None:
    """The grammar of ``schema`` takes every value of ``valid`` (written by ``json.dumps`` in the
    order the schema lists its keys) and none of ``invalid``; ``jsonschema`` agrees on both lists.
    A grammar may fix the key order, so only that order is asked of it."""
    g = schema_grammar(backend, schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert all(validator.is_valid(v) for v in valid)
    assert not any(validator.is_valid(v) for v in invalid)
    assert all(accepts(g, json.dumps(v)) for v in valid)
    assert not any(accepts(g, json.dumps(v)) for v in invalid)


def test_fast_json_stringify_225_required_key_outside_properties(backend: GrammarBackend) -> None:
    """fastify/fast-json-stringify#225 (also guidance-ai/guidance#1029): a key in ``required``
    but not in ``properties`` was not required. Expected (Draft 2020-12): it must be present, and
    its value is checked against ``additionalProperties`` (any value when that is ``true``, a
    string when it is ``{"type": "string"}``)."""
    open_schema = {
        "type": "object",
        "properties": {"num": {"type": "integer"}},
        "additionalProperties": True,
        "required": ["str"],
    }
    _sound(backend, open_schema, [{"str": "x"}, {"num": 2, "str": 1}], [{}, {"num": 1}])
    typed = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
        "required": ["a", "b"],
    }
    _sound(backend, typed, [{"a": 1, "b": "x"}], [{"a": 1, "b": 2}, {"a": 1}, {"b": "x"}])


def test_jsonschema_85_missing_required_key_is_refused(backend: GrammarBackend) -> None:
    """tdegrunt/jsonschema#85: with ``required: ["a", "z"]`` and ``additionalProperties: false``,
    ``{"a": "hello"}`` was accepted. Expected: the object without ``z`` is refused, one with both
    keys taken."""
    schema = {
        "properties": {"a": {"type": "string"}, "z": {"type": "string"}},
        "additionalProperties": False,
        "required": ["a", "z"],
    }
    _sound(backend, schema, [{"a": "h", "z": "y"}], [{"a": "hello"}, {"z": "y"}, {}])


def test_json_schema_faker_338_empty_closed_object(backend: GrammarBackend) -> None:
    """json-schema-faker/json-schema-faker#338: ``{"type": "object", "properties": {},
    "required": [], "additionalProperties": false}`` raised "missing properties". Expected: the
    schema compiles and takes exactly ``{}``."""
    schema = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    _sound(backend, schema, [{}], [{"a": 1}, []])


def test_schemathesis_3224_unsatisfiable_required_key_is_a_named_error(backend: GrammarBackend) -> None:
    """schemathesis/schemathesis#3224: ``required`` naming a key that is neither in
    ``properties`` nor allowed by ``additionalProperties: false`` -- no object satisfies the
    schema (``jsonschema`` refuses every candidate). Expected: a ``ValueError`` naming the
    ``json_schema`` field and the key, not a grammar that cannot finish; the next schema compiles."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": False,
        "required": ["a", "b"],
    }
    validator = jsonschema.Draft202012Validator(schema)
    assert not any(validator.is_valid(v) for v in [{"a": 1}, {"a": 1, "b": 2}, {}])
    with pytest.raises(ValueError, match=r"^json_schema: .*'b'"):
        schema_grammar(backend, schema)
    _sound(backend, {**schema, "required": ["a"]}, [{"a": 1}], [{"a": 1, "b": 2}])


# --------------------------------------------------------------------------- numeric bounds


@pytest.mark.parametrize(
    "schema, values",
    [
        (
            {"type": "integer", "exclusiveMinimum": 60, "exclusiveMaximum": 1209600},
            [60, 61, 1209599, 1209600, 0],
        ),
        ({"type": "number", "minimum": 0, "exclusiveMinimum": 0}, [0, 0.5, -1]),
        ({"type": "integer", "minimum": 1, "exclusiveMaximum": 3}, [0, 1, 2, 3]),
    ],
)
def test_fastjsonschema_47_exclusive_bounds(
    backend: GrammarBackend, schema: dict[str, Any], values: list[Any]
) -> None:
    """horejsek/python-fastjsonschema#47 and ComposioHQ/composio#4316: an integer's exclusive
    bounds were mis-generated, and a numeric ``exclusiveMinimum`` beside ``minimum`` was dropped.
    Expected (Draft 2020-12, both keywords apply): the bound itself is refused, values strictly
    inside are taken."""
    _check(backend, schema, values)

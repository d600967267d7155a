"""A twenty-eighth set of public bug reports in constrained decoding: ``minLength`` /
``maxLength`` on a property, ``patternProperties`` without ``properties`` (and string bounds inside
a pattern's subschema), ``format: "uuid"`` and ``format`` beside ``pattern``, objects used as maps
(``additionalProperties`` holding a schema), recursive schemas (``$ref`` to ``#`` and to a
``$defs`` entry that refers to itself, also through the chat route), and malformed EBNF grammars.

No fault was found here: each test stands as a regression guard of the report's expected
behaviour.

Oracles: the ``jsonschema`` package's validator (Draft 2020-12) for what a schema admits; RFC 4122's
textual form of a UUID (8-4-4-4-12 hexadecimal digits); xgrammar's own matcher over the grammar
the chat route sent; the report's stated expected behaviour (an invalid grammar is a request error
that leaves the server serving).
"""

from __future__ import annotations

import json
import uuid
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


# --------------------------------------------------------------------------- string bounds


def test_jsen_24_min_and_max_length_bound_a_property(backend: GrammarBackend) -> None:
    """bugventure/jsen#24: ``{"prop1": {"type": "string", "minLength": 1, "maxLength": 4}}``
    let ``"12345"`` through. Expected (JSON Schema validation, section 6.3): a string of 5
    characters and the empty string are refused, 1 to 4 characters taken -- counted as decoded
    characters, so ``"é"`` and an escaped ``"\\n"`` count one each."""
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["prop1"],
        "properties": {"prop1": {"type": "string", "minLength": 1, "maxLength": 4}},
    }
    values = [{"prop1": s} for s in ["12345", "", "1", "1234", "éééé", "\n\n\n\n", "ééééé"]]
    _check(backend, schema, values)


# --------------------------------------------------------------------------- patternProperties


def test_zod_from_json_schema_39_pattern_properties_alone_are_enforced(backend: GrammarBackend) -> None:
    """glideapps/zod-from-json-schema#39: ``{"type": "object", "patternProperties": {"^x_":
    {"type": "number"}}}`` (no ``properties``, no ``required``) was not enforced: ``{"x_bad":
    "no"}`` passed. Expected: a key matching the pattern takes only a number; nothing the schema
    refuses is produced."""
    schema = {"type": "object", "patternProperties": {"^x_": {"type": "number"}}}
    g = schema_grammar(backend, schema)
    validator = jsonschema.Draft202012Validator(schema)
    for v in [{"x_bad": "no"}, {"x_a": 1, "x_b": "2"}, {"x_a": [1]}]:
        assert not validator.is_valid(v) and not accepts(g, json.dumps(v)), v
    for v in [{"x_a": 1}, {"x_a": 1.5, "x_b": -2}, {}]:
        assert validator.is_valid(v) and accepts(g, json.dumps(v)), v


def test_json_schema_584_bounds_inside_a_pattern_properties_subschema(backend: GrammarBackend) -> None:
    """jsonrainbow/json-schema#584: ``patternProperties`` ``{"^[A-Z]{2}$": {"type": "array",
    "items": {"type": "string", "minLength": 2, "maxLength": 2}}}``. The maintainers' reading: the
    pattern's subschema applies to every key the regex matches. Expected: under the key ``"AB"``
    an item of 3 characters, or 1, is refused, items of 2 are taken; a key of 3 capitals is not the
    pattern's and the grammar does not give it the pattern's values."""
    schema = {
        "type": "object",
        "patternProperties": {
            "^[A-Z]{2}$": {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 2}}
        },
    }
    g = schema_grammar(backend, schema)
    validator = jsonschema.Draft202012Validator(schema)
    for v in [{"AB": ["aaa"]}, {"AB": ["a"]}, {"AB": ["aa", "bbb"]}]:
        assert not validator.is_valid(v) and not accepts(g, json.dumps(v)), v
    for v in [{"AB": ["aa", "bb"]}, {"AB": []}, {"AB": ["aa"], "CD": ["cc"]}]:
        assert validator.is_valid(v) and accepts(g, json.dumps(v)), v


# --------------------------------------------------------------------------- format


def test_json_schema_spec_542_uuid_format_is_the_rfc_4122_text(backend: GrammarBackend) -> None:
    """json-schema-org/json-schema-spec#542: ``format: "uuid"`` is RFC 4122's text form
    (``^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$``, hex digits in either
    case). Expected: Python's ``uuid`` strings (and their upper-case form) are taken; a string
    one digit short, with a non-hex digit, or without dashes is refused."""
    g = schema_grammar(backend, {"type": "string", "format": "uuid"})
    u = str(uuid.UUID("123e4567-e89b-12d3-a456-426614174000"))
    for text in [u, u.upper(), str(uuid.uuid5(uuid.NAMESPACE_DNS, "example.org"))]:
        assert accepts(g, json.dumps(text)), text
    for text in [u[:-1], u.replace("e", "g", 1), u.replace("-", ""), "not-a-uuid"]:
        assert not accepts(g, json.dumps(text)), text


def test_json_schema_spec_542_format_beside_pattern_is_a_named_400(backend: GrammarBackend) -> None:
    """json-schema-org/json-schema-spec#542 (the maintainers' idiom ``{"format": "uri",
    "pattern": "^urn:uuid:"}``, both applying). A grammar holding only one of the two would
    produce strings the schema refuses. Expected: the schema is refused (``ValueError``, HTTP 400)
    naming ``format`` and ``pattern``, not compiled to the weaker grammar."""
    with pytest.raises(ValueError, match=r"'format' together with 'pattern'"):
        schema_grammar(backend, {"type": "string", "format": "uri", "pattern": "^urn:uuid:"})


# --------------------------------------------------------------------------- maps


@pytest.mark.parametrize(
    "schema, values",
    [
        (  # FasterXML/jackson-module-jsonSchema#24: Map<String, Boolean>
            {
                "type": "object",
                "properties": {
                    "mapOfBooleans": {"type": "object", "additionalProperties": {"type": "boolean"}}
                },
                "required": ["mapOfBooleans"],
            },
            [
                {"mapOfBooleans": {"a": True, "b": False}},
                {"mapOfBooleans": {}},
                {"mapOfBooleans": {"a": 1}},
                {"mapOfBooleans": {"a": True, "b": "false"}},
                {},
            ],
        ),
        (  # inspera/jsonschema-typed#4: Dict[str, item] with an object item schema
            {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {"x": {"type": "integer"}},
                    "required": ["x"],
                    "additionalProperties": False,
                },
            },
            [{"k": {"x": 1}, "j": {"x": -2}}, {}, {"k": {"x": "1"}}, {"k": {}}, {"k": {"x": 1, "y": 2}}],
        ),
    ],
)
def test_additional_properties_schema_is_a_map(
    backend: GrammarBackend, schema: dict[str, Any], values: list[Any]
) -> None:
    """FasterXML/jackson-module-jsonSchema#24, inspera/jsonschema-typed#4 and jbowes/oag#10: an
    object whose only keyword is ``additionalProperties: {schema}`` is a map -- any string key,
    each value of that schema. Expected: any key is taken with a valid value, a value the item
    schema refuses is refused under any key."""
    _check(backend, schema, values)


# --------------------------------------------------------------------------- recursion

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["name", "children"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}
LIST = {
    "type": "object",
    "properties": {"value": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
    "required": ["value", "next"],
    "additionalProperties": False,
}


def _leaf(name: Any) -> dict[str, Any]:
    return {"name": name, "children": []}


@pytest.mark.parametrize(
    "schema, values",
    [
        (
            TREE,
            [
                _leaf("a"),
                {"name": "a", "children": [{"name": "b", "children": [_leaf("c")]}, _leaf("d")]},
                {"name": "a", "children": [_leaf(1)]},
                {"name": "a", "children": [{"name": "b"}]},
                {"name": "a", "children": [{"name": "b", "children": [{"name": "c", "children": [None]}]}]},
            ],
        ),
        (
            LIST,
            [
                {"value": 1, "next": None},
                {"value": 1, "next": {"value": 2, "next": {"value": 3, "next": None}}},
                {"value": 1, "next": {"value": "2", "next": None}},
                {"value": 1, "next": {"value": 2}},
            ],
        ),
    ],
)
def test_sglang_7639_recursive_schema_compiles_and_nests(
    backend: GrammarBackend, schema: dict[str, Any], values: list[Any]
) -> None:
    """sgl-project/sglang#7639: a recursive grammar in structured outputs took the deployment
    down. Expected: a schema referring to itself (through ``$defs`` and through ``#``) compiles,
    takes nested values at any depth and refuses a wrong value at the innermost level."""
    _check(backend, schema, values)


def test_sglang_7639_recursive_response_format_through_the_chat_route(tok: Any) -> None:
    """sgl-project/sglang#7639 on the chat route: a ``response_format`` holding the recursive
    schema is answered (200), the grammar sent to the engine takes a nested tree and refuses a
    wrong leaf (xgrammar's own matcher over it), and the next request is served as well."""
    tm = grammar_chunk_tm(tok, '{"name": "a", "children": []}')
    _, tc = client_for(tm, allow_auto_truncate=False)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "tree"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "tree", "schema": TREE}},
    }
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([f"<t{i}>" for i in range(8)])).compile_grammar(
        _grammar_of(tm.received[0].sampling_params)
    )

    def takes(value: Any) -> bool:
        m = xgr.GrammarMatcher(compiled)
        return bool(m.accept_string(json.dumps(value))) and bool(m.is_completed())

    assert takes({"name": "a", "children": [{"name": "b", "children": [_leaf("c")]}]})
    assert not takes({"name": "a", "children": [_leaf(1)]})
    r2 = tc.post("/v1/chat/completions", json={**body, "response_format": {"type": "json_object"}})
    assert r2.status_code == 200, r2.text


# --------------------------------------------------------------------------- malformed EBNF


@pytest.mark.parametrize(
    "ebnf, problem",
    [
        ('Root ::= [^\\n]+ "\\n#"', 'root rule with name "root" is not found'),
        ('root ::= "a" other', 'Rule "other" is not defined'),
        ('root ::= ("a" | )', "Expect element"),
    ],
)
def test_llama_cpp_3878_malformed_ebnf_is_a_request_error(
    backend: GrammarBackend, ebnf: str, problem: str
) -> None:
    """ggml-org/llama.cpp#3878 and #4492 (also acon96/home-llm#70, sgl-project/sglang#2023): a
    malformed grammar -- the root rule spelled ``Root``, a rule used but never defined, an empty
    alternative -- crashed the server. Expected: a ``ValueError`` (HTTP 400) naming the ``ebnf``
    field and the parser's reason; the backend then compiles the next, valid grammar as before."""
    with pytest.raises(ValueError, match=r"^ebnf: invalid grammar: .*") as e:
        grammar_for(backend, ebnf=ebnf)
    assert problem in str(e.value)
    g = grammar_for(backend, ebnf='root ::= "yes" | "no"')
    assert accepts(g, "yes") and accepts(g, "no") and not accepts(g, "maybe")

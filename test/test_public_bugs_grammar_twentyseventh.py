"""A twenty-seventh set of public bug reports in constrained decoding: ``const`` / ``enum`` values
that are objects or arrays, ``$ref`` into ``properties`` and through chains of references,
``minItems`` / ``maxItems`` (alone, on a root array of objects, beside a ``type`` list), a
``regex`` written with ``^`` / ``$`` anchors, and ``\\d`` / ``\\w`` / ``\\s`` (and negations) inside
bracket classes and under counted quantifiers, as a ``regex`` and as a ``pattern``.

Fault found here and fixed: a ``const`` / ``enum`` value that is an object or an array compiled
(xgrammar 0.2.x) to one literal text, its compact serialization, so ``{"const": {"a": [1, 2]}}``
refused ``{"a": [1, 2]}`` -- the same JSON value, written with the whitespace the grammar takes
everywhere else -- and steered a model off its usual style inside the value; the same in a
``strict`` tool's parameters. Such values are now written as the schema of the value
(``sampling/json_schema_structured_values.py``). The other reports found no fault and stand as
regression guards.

Oracles: the ``jsonschema`` package's validator (the draft the schema names) and its reference
resolution; Python's ``re.fullmatch``; xgrammar's own matcher over the grammar the chat route
sent; the report's stated expected behaviour.
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
from dsml_testutil import dsml_block, dsml_invoke, dsml_param  # noqa: E402
from grammar_backend_testutil import (  # noqa: E402
    accepts,
    ds_grammar_backend,
    grammar_for,
    schema_grammar,
    schema_validator,
)
from sglang_v4.sampling.grammar import Grammar, GrammarBackend  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend()


def _validator(schema: Any) -> Any:
    return schema_validator(schema)


def _sound(backend: GrammarBackend, schema: Any, values: list[Any], offered: list[Any]) -> Grammar:
    """The grammar of ``schema`` takes no value of ``values`` that ``jsonschema`` refuses, and
    takes each of ``offered`` (which ``jsonschema`` must find valid), written as ``json.dumps``
    writes it (``", "`` / ``": "`` separators) and compactly."""
    g = schema_grammar(backend, schema)
    validator = _validator(schema)
    for v in values:
        if not validator.is_valid(v):
            assert not accepts(g, json.dumps(v)), v
            assert not accepts(g, json.dumps(v, separators=(",", ":"))), v
    for v in offered:
        assert validator.is_valid(v), v
        assert accepts(g, json.dumps(v)), v
        assert accepts(g, json.dumps(v, separators=(",", ":"))), v
    return g


# --------------------------------------------------------------------------- structured const / enum


@pytest.mark.parametrize(
    "schema, values, offered",
    [
        (
            {"const": {"a": [1, 2]}},
            [{"a": [1]}, {"a": [1, 2, 3]}, {"a": [2, 1]}, {"a": [1, 2], "b": 0}, {}],
            None,
        ),
        ({"const": [1, {"k": "v"}, []]}, [[1, {"k": "v"}], [1, {"k": "w"}, []], [1, {"k": "v"}, [0]]], None),
        ({"enum": [{"a": 1}, 3, "x", [], {}]}, [{"a": 2}, 4, "y", [0], {"b": 1}, None], None),
        (
            {
                "type": "object",
                "properties": {"unit": {"enum": [{"name": "celsius", "symbol": "C"}, None]}},
                "required": ["unit"],
            },
            [{"unit": {"name": "celsius"}}, {"unit": "C"}, {"unit": {"name": "celsius", "symbol": "F"}}],
            [{"unit": {"name": "celsius", "symbol": "C"}}, {"unit": None}],
        ),
        # the node's other keywords still apply: the string value is not an object, the
        # one-key object is too small, the "x" value fails the referenced schema
        ({"type": "object", "enum": [{"a": 1}, "x"]}, ["x", {"a": 2}], [{"a": 1}]),
        ({"minProperties": 2, "enum": [{"a": 1}, {"a": 1, "b": 2}]}, [{"a": 1}], [{"a": 1, "b": 2}]),
        (
            {
                "$defs": {"p": {"type": "object", "properties": {"a": {"type": "integer"}}}},
                "$ref": "#/$defs/p",
                "enum": [{"a": 1}, {"a": "x"}],
            },
            [{"a": "x"}, {"a": 2}],
            [{"a": 1}],
        ),
    ],
)
def test_object_and_array_const_take_any_json_whitespace(
    backend: GrammarBackend, schema: dict[str, Any], values: list[Any], offered: list[Any] | None
) -> None:
    """guidance-ai/llguidance#59: ``const`` / ``enum`` values are best compiled as the schemas of
    those values ("arrays with specific prefixItems", objects of their properties), not as one
    literal text. JSON Schema compares them as JSON values, where whitespace between tokens is
    insignificant (RFC 8259, section 2). Old code here: ``{"const": {"a": [1, 2]}}`` took only
    ``{"a":[1,2]}``, not ``{"a": [1, 2]}``. Now every value is taken written either way, and
    nothing ``jsonschema`` refuses is taken."""
    if offered is None:
        offered = [schema["const"]] if "const" in schema else list(schema["enum"])
    _sound(backend, schema, values, offered)


def test_object_const_that_its_type_refuses_is_a_named_400(backend: GrammarBackend) -> None:
    """guidance-ai/llguidance#59 (the ``const`` rewrite keeps the node's other keywords):
    ``{"type": "string", "const": {"a": 1}}`` admits no value; it stays a ``ValueError`` (HTTP
    400) naming ``const`` and saying no value satisfies it, and ``jsonschema`` agrees that the
    object fails the schema."""
    schema = {"type": "string", "const": {"a": 1}}
    assert not _validator(schema).is_valid({"a": 1})
    with pytest.raises(ValueError, match="'const'.*no value satisfies"):
        schema_grammar(backend, schema)


def test_strict_tool_enum_of_objects_takes_spaced_json(tok: Any) -> None:
    """guidance-ai/llguidance#59 in a ``strict`` tool's parameters (the tool-call grammar, built
    from the same schema rewrite): a parameter ``enum`` holding an object took it only compactly.
    Expected: the DSML call with ``{"a": 1}`` and with ``{"a":1}`` are both whole answers of the
    grammar the route sent, ``{"a": 2}`` is not. Oracle: xgrammar's own matcher."""
    tool = {
        "type": "function",
        "function": {
            "name": "pick",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"opt": {"enum": [{"a": 1}, [1, 2]]}},
                "required": ["opt"],
                "additionalProperties": False,
            },
        },
    }
    tm = grammar_chunk_tm(tok, "Hi")
    _, tc = client_for(tm, allow_auto_truncate=False)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [tool],
        "tool_choice": "required",
    }
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([f"<t{i}>" for i in range(8)])).compile_grammar(
        _grammar_of(tm.received[0].sampling_params)
    )

    def takes(value: str) -> bool:
        m = xgr.GrammarMatcher(compiled)
        return bool(
            m.accept_string(dsml_block(dsml_invoke("pick", dsml_param("opt", False, value))))
        ) and bool(m.is_completed())

    assert takes('{"a": 1}') and takes('{"a":1}') and takes("[1, 2]") and takes("[1,2]")
    assert not takes('{"a": 2}') and not takes("[2, 1]") and not takes('{"a": 1, "b": 2}')


# --------------------------------------------------------------------------- $ref


def test_ref_to_a_sibling_property(backend: GrammarBackend) -> None:
    """dottxt-ai/outlines#310: a ``$ref`` to ``#/properties/test`` (what ``zodToJsonSchema``
    writes for a reused schema) was not resolved, only ``#/definitions/...`` was. Expected:
    ``test2`` is an integer like ``test``."""
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"test": {"type": "integer"}, "test2": {"$ref": "#/properties/test"}},
    }
    _sound(
        backend, schema, [{"test2": "x"}, {"test": 1, "test2": 1.5}], [{"test": 1, "test2": 2}, {"test2": 2}]
    )


def test_chain_of_references_resolves(backend: GrammarBackend) -> None:
    """rjsf-team/react-jsonschema-form#556 (first schema): ``foo`` -> ``#/definitions/bar``, itself
    a ``$ref`` to ``#/definitions/qux`` (a string). Expected: ``foo`` must be a string."""
    schema = {
        "definitions": {"bar": {"$ref": "#/definitions/qux"}, "qux": {"type": "string"}},
        "type": "object",
        "properties": {"foo": {"$ref": "#/definitions/bar"}},
    }
    _sound(backend, schema, [{"foo": 1}, {"foo": None}], [{"foo": "a"}, {}])


def test_pointer_through_a_reference_is_a_named_400(backend: GrammarBackend) -> None:
    """rjsf-team/react-jsonschema-form#556 (second schema): ``#/definitions/testdef/properties/qux``
    where ``testdef`` is only ``{"$ref": ...}``. A JSON Pointer walks the document as written
    (RFC 6901), so it points nowhere; ``jsonschema``'s resolver refuses it too. Expected: a
    ``ValueError`` (HTTP 400) naming the pointer, not a crash or a grammar that ignores it."""
    schema = {
        "definitions": {
            "testdef": {"$ref": "#/definitions/bar"},
            "bar": {"type": "object", "properties": {"qux": {"type": "string"}}},
        },
        "type": "object",
        "properties": {"foo": {"$ref": "#/definitions/testdef/properties/qux"}},
    }
    with pytest.raises(Exception, match="testdef/properties/qux"):
        _validator(schema).is_valid({"foo": 1})
    with pytest.raises(ValueError, match="#/definitions/testdef/properties/qux"):
        schema_grammar(backend, schema)


# --------------------------------------------------------------------------- array lengths


def test_min_and_max_items_bound_a_property_array(backend: GrammarBackend) -> None:
    """cwacek/python-jsonschema-objects#76: ``rules`` with ``minItems: 2`` / ``maxItems: 3`` took
    one and four items. Expected: two and three items valid, one and four refused."""
    schema = {
        "title": "mintest",
        "type": "object",
        "properties": {"rules": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3}},
        "required": ["rules"],
    }
    rules = [["fred"], ["fred", "wilma"], ["fred", "wilma", "pebbles"], ["fred", "wilma", "pebbles", "dino"]]
    g = _sound(backend, schema, [{"rules": r} for r in rules], [{"rules": r} for r in rules[1:3]])
    assert not accepts(g, json.dumps({"rules": rules[0]})) and not accepts(g, json.dumps({"rules": rules[3]}))


def test_min_items_on_a_root_array_of_objects(backend: GrammarBackend) -> None:
    """gcanti/tcomb-json-schema#18: ``minItems: 2`` on a root array of objects had no effect.
    Expected: zero or one item refused, two items (each with ``name`` and ``surname``) taken."""
    person = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "surname": {"type": "string"}},
        "required": ["name", "surname"],
    }
    schema = {"type": "array", "minItems": 2, "items": person}
    one = {"name": "a", "surname": "b"}
    _sound(backend, schema, [[], [one], [one, {"name": "c"}]], [[one, one], [one, one, one]])


def test_min_items_beside_a_type_list_and_required(backend: GrammarBackend) -> None:
    """mafintosh/is-my-json-valid#65: with ``type: ["array", "object"]``, ``minItems: 1`` and
    ``required: ["foo"]``, ``[]`` validated; so did ``[]`` and ``[1, 2]`` under ``minItems`` =
    ``maxItems`` = 1 with ``required: []``. Expected: array keywords bind the array branch,
    object keywords the object branch."""
    schema = {
        "type": ["array", "object"],
        "items": {"type": "string"},
        "minItems": 1,
        "properties": {"foo": {"type": "number"}},
        "required": ["foo"],
    }
    _sound(backend, schema, [[], [1], {}, {"foo": "x"}], [["a"], {"foo": 1}])
    single = {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 1, "required": []}
    _sound(backend, single, [[], ["a", "b"], [1]], [["a"]])


# --------------------------------------------------------------------------- regex anchors


@pytest.mark.parametrize(
    "regex, texts",
    [
        ("^[0-9]{3}$", ["221", "22", "2214", "^221$", "abc"]),
        ("^ZZZ[0-9]$", ["ZZZ7", "ZZZ", "ZZZ77", "xZZZ7"]),
        ("^(yes|no)$", ["yes", "no", "yesno", "maybe", ""]),
    ],
)
def test_regex_edge_anchors_are_honoured(backend: GrammarBackend, regex: str, texts: list[str]) -> None:
    """kekzl/imp#1255: a ``regex`` written with ``^`` / ``$`` (the natural way) was refused and the
    answer left unconstrained (free prose with a 200). Expected: the anchors state what the
    whole-answer match already means; the grammar takes exactly the texts Python's
    ``re.fullmatch`` matches."""
    g = grammar_for(backend, regex=regex)
    for t in texts:
        assert accepts(g, t) == bool(re.fullmatch(regex, t)), t


# --------------------------------------------------------------------------- shorthand classes

SHORTHANDS = [
    (r"([\d]+)", ["22", "2", "a", "", "2a"]),  # rapidsai/custrings#50
    (r"[\S\s]+", ["a b", "\n", "", "x"]),  # qntm/greenery#35
    (r"[\Wdef]+", ["d!", "a", "_", "e-"]),  # qntm/greenery#35
    (r"[a-f\d]+", ["a1f", "g", "9", "a-1"]),  # erlang/otp#4592
    (r"\d{2,3}", ["1", "12", "123", "1234"]),  # cs-au-dk/dk.brics.automaton#26
    (r"foo\S\d", ["fooa1", "foo 1", "foo11", "fooa"]),  # sepinf-inc/IPED#2987
    (r"a\Sb", ["axb", "a b", "ab"]),  # sepinf-inc/IPED#2987
]


@pytest.mark.parametrize("regex, texts", SHORTHANDS)
def test_shorthand_classes_in_brackets_and_quantifiers(
    backend: GrammarBackend, regex: str, texts: list[str]
) -> None:
    """rapidsai/custrings#50 (``[\\d]+`` matched nothing), qntm/greenery#35 (``[\\S\\s]`` and
    ``[\\Wdef]`` refused), erlang/otp#4592 (``[a-f\\d]`` refused), cs-au-dk/dk.brics.automaton#26
    (``\\d{2,3}`` refused) and sepinf-inc/IPED#2987 (``\\S`` expanded without its closing ``]``,
    so ``foo\\S\\d`` compiled to another language): ``\\d`` / ``\\w`` / ``\\s`` and their
    negations inside a bracket class or under a counted quantifier. Expected, as a ``regex``
    answer: exactly the (ASCII) texts Python's ``re.fullmatch`` matches; as a JSON-schema
    ``pattern``: exactly the strings ``jsonschema`` finds valid."""
    g = grammar_for(backend, regex=regex)
    for t in texts:
        assert accepts(g, t) == bool(re.fullmatch(regex, t)), t
    schema = {"type": "string", "pattern": f"^(?:{regex})$"}
    gs = schema_grammar(backend, schema)
    validator = _validator(schema)
    for t in texts:
        assert accepts(gs, json.dumps(t)) == validator.is_valid(t), t

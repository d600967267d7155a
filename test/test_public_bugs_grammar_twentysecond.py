"""A twenty-second set of public bug reports in constrained decoding with JSON schemas (SGLang's
``json_schema`` sampling parameter, as ``response_format`` / ``guided_json`` send it): regex
``pattern`` anchors, enums behind ``$ref``, and patterns that no string matches.

Fault found here and fixed: a ``$`` inside a ``pattern`` (``(a$|b)c``) was ignored by xgrammar
(its warning: "Anchor '$' in the middle of regex is ignored"), so ``"ac"`` passed and
``"xbc"`` (which JSON Schema's unanchored search takes) did not; the end anchors are now written
out of the regex (``sampling/json_schema_regex.py`` with ``sampling/regex_end_anchor.py``), and a
pattern no string matches (``a$b``) is a 400 naming the schema field. The other reports passed
as-is and are kept as regression tests.

Oracles: the ``jsonschema`` package's validator (Draft 2020-12) on the schema as sent, over every
short string of a small alphabet (no newline, where Python's ``re`` and ECMA-262 agree on
``$``); xgrammar's own matcher on the grammar the backend built.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")

from grammar_backend_testutil import VOCAB, ds_grammar_backend  # noqa: E402
from grammar_backend_testutil import accepts as _accepts  # noqa: E402
from sglang_v4.sampling.grammar import Grammar, GrammarBackend  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402

pytestmark = pytest.mark.timeout(180)

#: every string of up to three characters over ``a b c`` and a space
STRINGS = [""] + ["".join(t) for n in range(1, 4) for t in itertools.product("abc ", repeat=n)]


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend()


def _grammar(backend: GrammarBackend, schema: Any) -> Grammar:
    """The answer grammar of ``schema`` as a request sends it, checked as the server checks it."""
    sp = SamplingParams(json_schema=json.dumps(schema))
    sp.verify(VOCAB, allow_grammar=True)
    g = backend.create(sp)
    assert g is not None
    return g


def _check_pattern(backend: GrammarBackend, pattern: str, strings: list[str] = STRINGS) -> None:
    """A ``string`` schema with ``pattern`` takes exactly the strings ``jsonschema`` finds valid."""
    schema = {"type": "string", "pattern": pattern}
    g = _grammar(backend, schema)
    validator = jsonschema.Draft202012Validator(schema)
    valid = 0
    for s in strings:
        expected = validator.is_valid(s)
        valid += expected
        assert _accepts(g, json.dumps(s)) == expected, (pattern, s, expected)
    assert 0 < valid < len(strings)  # the oracle tells strings apart: the check is not vacuous


@pytest.mark.parametrize("pattern", [r"(a$|b)c", r"^(a$|b)c", r"(a$)*b", r"a$|b", r"^(ab$|c)+"])
def test_end_anchor_inside_a_pattern_is_an_assertion(backend: GrammarBackend, pattern: str) -> None:
    """json-schema-org/json-schema-spec#1478: a ``pattern`` is an ECMA-262 regex, matched
    unanchored (a search). A ``$`` inside it asserts the end of the string. Old code: xgrammar
    ignored it ("Anchor '$' in the middle of regex is ignored"), so ``(a$|b)c`` took ``"ac"`` and
    refused ``"xbc"``. Oracle: ``jsonschema`` over every short string."""
    _check_pattern(backend, pattern)


def test_pattern_no_string_matches_is_refused(backend: GrammarBackend) -> None:
    """json-schema-org/json-schema-spec#1478 (the same reading): ``a$b`` matches no string, so the
    schema has no valid string value; a 400 naming the schema field, not a grammar that
    dead-ends mid-answer. Oracle: ``jsonschema`` finds no short string valid."""
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": "a$b"}}, "required": ["v"]}
    assert not any(
        jsonschema.Draft202012Validator(schema).is_valid({"v": s}) for s in STRINGS + ["ab", "a\nb"]
    )
    with pytest.raises(ValueError, match=r"^json_schema: invalid grammar: .*pattern.*no string matches"):
        _grammar(backend, schema)


def test_unanchored_pattern_is_a_search(backend: GrammarBackend) -> None:
    """ggml-org/llama.cpp#26930: ``{"type": "string", "pattern": "\\\\S"}`` ("contains a
    non-whitespace character") was refused because it is not anchored with ``^`` and ``$``.
    Oracle: ``jsonschema``."""
    _check_pattern(backend, r"\S")
    _check_pattern(backend, r"b c")


def test_half_anchored_patterns(backend: GrammarBackend) -> None:
    """ggml-org/llama.cpp#26931: ``"^abc"`` is "starts with", ``"abc$"`` is "ends with" (the
    missing side is free). Oracle: ``jsonschema``."""
    for pattern in (r"^ab", r"ab$", r"^a", r"c$"):
        _check_pattern(backend, pattern)


def test_fully_anchored_nonblank_patterns(backend: GrammarBackend) -> None:
    """openclaw/openclaw#107939: the fully anchored forms clients switch to, ``^[\\\\s\\\\S]*\\\\S
    [\\\\s\\\\S]*$`` and ``^session:.+$``, mean the same as their unanchored originals. Oracle:
    ``jsonschema``."""
    _check_pattern(backend, r"^[\s\S]*\S[\s\S]*$")
    _check_pattern(backend, r"^b:.+$", STRINGS + ["b:", "b:a", "b:ab", "xb:a"])
    _check_pattern(backend, r"^b:.+", STRINGS + ["b:", "b:a", "b:ab", "xb:a"])


def test_anchored_pattern_in_a_property_is_enforced(backend: GrammarBackend) -> None:
    """everit-org/json-schema#60: ``"pattern": "^a*$"`` on a property was not applied inside an
    object, so ``{"aish": "abc"}`` passed. Oracle: ``jsonschema``."""
    schema = {
        "type": "object",
        "properties": {"aish": {"type": "string", "pattern": "^a*$"}},
        "required": ["aish"],
    }
    g = _grammar(backend, schema)
    for value in ("", "aaa", "abc", "ba"):
        text = json.dumps({"aish": value})
        assert _accepts(g, text) == jsonschema.Draft202012Validator(schema).is_valid({"aish": value}), value


def test_anchors_in_pattern_strings_are_accepted(backend: GrammarBackend) -> None:
    """outlines-dev/outlines#931 (fixed by dottxt-ai/outlines#995): a pattern string with ``^`` /
    ``$`` was refused (``Unsupported: '^'``). Oracle: ``jsonschema``, on an email-like pattern."""
    _check_pattern(backend, r"^.+@.+$", ["@", "a@b", "bear", "a@", "@b", "ab@cd"])


def test_enum_behind_ref_in_defs(backend: GrammarBackend) -> None:
    """vllm-project/vllm#15236 (fixed by vllm-project/vllm#15594): a Pydantic ``Enum`` field is a
    ``$ref`` to a ``$defs`` entry with ``enum``, and ``list[Literal[...]]`` an array of an
    ``enum``; the schema was refused by the xgrammar backend. Oracle: ``jsonschema``."""
    schema = {
        "$defs": {
            "CarType": {"enum": ["sedan", "SUV", "Truck", "Coupe"], "title": "CarType", "type": "string"}
        },
        "properties": {
            "brand": {"title": "Brand", "type": "string"},
            "car_type": {"$ref": "#/$defs/CarType"},
            "car_type2": {"items": {"enum": ["sedan", "suv"], "type": "string"}, "type": "array"},
        },
        "required": ["brand", "car_type", "car_type2"],
        "title": "CarDescription",
        "type": "object",
    }
    g = _grammar(backend, schema)
    for value in (
        {"brand": "Toyota", "car_type": "sedan", "car_type2": ["suv"]},
        {"brand": "Toyota", "car_type": "SUV", "car_type2": []},
        {"brand": "Toyota", "car_type": "suv", "car_type2": []},
        {"brand": "Toyota", "car_type": "sedan", "car_type2": ["SUV"]},
        {"brand": "Toyota", "car_type": "Van", "car_type2": ["sedan"]},
    ):
        expected = jsonschema.Draft202012Validator(schema).is_valid(value)
        assert _accepts(g, json.dumps(value)) == expected, value

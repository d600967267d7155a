"""A twenty-fifth set of public bug reports in constrained decoding: integer bounds past the int64
range, nullable integers, top-level alternations in ``pattern``, ``$ref`` schemas, grammar
exclusivity, out-of-range token ids, and regex / EBNF character handling at the token level.

Faults found here and fixed:

* an ``integer`` node with a bound past the signed 64-bit range (protobuf's ``int64`` schemas write
  ``"exclusiveMaximum": 9223372036854776000``, uint64 ones ``"maximum":
  18446744073709551615``, a hand-written one ``"maximum": 1e32``) was a 400 from xgrammar
  ("Integer exceeds maximum limit") for a valid schema; the bound is now clamped to the int64
  edge, so every integer the grammar writes satisfies the schema
  (``sampling/json_schema_bounds.py``);
* the integer-bound rewrites (a fractional bound rounded to the same set of integers, the int64
  clamp) applied to ``"type": "integer"`` only: a nullable integer (``"type": ["integer",
  "null"], "minimum": 0.5``) was still a 400 ("Integer constraint must be a whole number"); a
  type list that admits integers but not ``number`` now gets the same rewrites, and one naming
  both ``integer`` and ``number`` is read as ``number`` (the same values).
* in a ``regex`` or a schema ``pattern``, an escaped ``^`` first in a character class
  (``[\\^a]``, ``[\\x5e]``) reached xgrammar, which drops the escape and read it as the
  negation; and a ``\\xHH`` escape took every hex digit after it (``\\x41b`` was U+041B), as did
  a control character in a class (``[\\x01b]`` was ESC): such classes are written out
  explicitly with the ``^`` and the control characters last, ``\\xHH`` as ``\\u00HH``
  (``sampling/regex_dialect.py``, ``sampling/json_schema_pattern_text.py``).

The other reports passed as-is and are kept as regression tests.

Oracles: the ``jsonschema`` package's validator (the draft the schema names); Python's ``re``;
the tokenizer's own encoding and decoding of a text; the report's stated expected behaviour.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")
tokenizers = pytest.importorskip("tokenizers")

from grammar_backend_testutil import VOCAB, ds_grammar_backend, schema_validator, tokenizer_json_path  # noqa: E402
from grammar_backend_testutil import accepts as _accepts  # noqa: E402
from sglang_v4.sampling.grammar import Grammar, GrammarBackend  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402

pytestmark = pytest.mark.timeout(180)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend()


def _grammar(backend: GrammarBackend, **field: str) -> Grammar:
    """The grammar of one request field (``json_schema=`` / ``regex=`` / ``ebnf=``), checked as
    the server checks it."""
    sp = SamplingParams(**field)
    sp.verify(VOCAB, allow_grammar=True)
    g = backend.create(sp)
    assert g is not None
    return g


def _schema_grammar(backend: GrammarBackend, schema: Any) -> Grammar:
    return _grammar(backend, json_schema=json.dumps(schema))


def _validator(schema: Any) -> Any:
    return schema_validator(schema, check_formats=True)


def _never_invalid(backend: GrammarBackend, schema: Any, values: list[Any]) -> Grammar:
    """The grammar of ``schema`` takes no value of ``values`` that ``jsonschema`` refuses, and
    takes every one of them that is valid and an int64 where a number (the grammar's reach)."""
    g = _schema_grammar(backend, schema)
    validator = _validator(schema)
    for v in values:
        text = json.dumps(v)
        valid = validator.is_valid(v)
        if not valid:
            assert not _accepts(g, text), v
        elif not isinstance(v, int) or isinstance(v, bool) or INT64_MIN <= v <= INT64_MAX:
            assert _accepts(g, text), v
    return g


#: integers around the int64 edges, small ones, and non-integers
NUMBERS: list[Any] = [0, 1, -1, 7, 10**18, INT64_MAX, INT64_MAX + 1, INT64_MIN, INT64_MIN - 1]
NUMBERS += [10**20, -(10**20), 2**64 - 1, 2**64, 0.5, -2.5, None, "1", True]


@pytest.mark.parametrize(
    "schema",
    [
        # sourcemeta/jsonschema#235: protobuf's int64 bounds (the double nearest 2**63, exclusive)
        {"type": "integer", "exclusiveMaximum": 9223372036854776000, "minimum": -9223372036854775808},
        # JamesNK/Newtonsoft.Json.Schema#263: uint64's maximum, from the JSON Schema Test Suite
        {"type": "integer", "minimum": 0, "maximum": 18446744073709551615},
        # networknt/json-schema-validator#160: ``"maximum": 1e+32`` on an integer
        {"type": "integer", "maximum": 1e32},
        {"type": "integer", "minimum": -1e32, "maximum": 1e32},
        {"type": "integer", "exclusiveMinimum": -1e30, "exclusiveMaximum": 1e30},
    ],
)
def test_integer_bounds_past_int64(backend: GrammarBackend, schema: dict[str, Any]) -> None:
    """sourcemeta/jsonschema#235, JamesNK/Newtonsoft.Json.Schema#263,
    networknt/json-schema-validator#160: tools failed on valid schemas whose integer bounds lie
    past 64 bits. Old code here: a 400 from xgrammar ("Integer exceeds maximum limit"). Now the
    schema compiles, every value it takes is valid (``jsonschema``), and every valid int64 is
    offered."""
    _never_invalid(backend, schema, NUMBERS)


def test_integer_bounds_past_int64_inside_a_protobuf_object(backend: GrammarBackend) -> None:
    """sourcemeta/jsonschema#235's whole ``count`` property: an int64 written as an integer with
    protobuf's bounds or as a digit string. Both branches take what ``jsonschema`` takes (an
    int64 value or a numeric string) and refuse the rest."""
    schema = {
        "type": "object",
        "properties": {
            "count": {
                "anyOf": [
                    {
                        "exclusiveMaximum": 9223372036854776000,
                        "minimum": -9223372036854775808,
                        "type": "integer",
                    },
                    {"pattern": "^-?[0-9]+$", "type": "string"},
                ]
            }
        },
        "required": ["count"],
        "additionalProperties": False,
    }
    values = [{"count": v} for v in (0, -5, INT64_MAX, "123", "-9", "12a", "", 1.5, None)]
    _never_invalid(backend, schema, values)


def test_bound_that_leaves_no_int64_is_a_400(backend: GrammarBackend) -> None:
    """The other side of the clamp: ``minimum: 2**63`` leaves no integer the grammar can write, so
    the request is refused (a ``ValueError``, HTTP 400), never compiled to a grammar that writes a
    smaller integer (``jsonschema`` refuses ``INT64_MAX`` there)."""
    schema = {"type": "integer", "minimum": 2**63}
    assert not _validator(schema).is_valid(INT64_MAX)
    with pytest.raises(ValueError):
        _schema_grammar(backend, schema)


@pytest.mark.parametrize(
    "schema",
    [
        # mafintosh/is-my-json-valid#123: ``minimum`` beside a nullable integer
        {"type": ["integer", "null"], "minimum": 1},
        # networknt/json-schema-validator#1226: a nullable integer with bounds, exclusive too
        {"type": ["integer", "null"], "minimum": 0.5, "exclusiveMaximum": 7.5},
        {"type": ["null", "integer"], "exclusiveMinimum": -0.5, "maximum": 18446744073709551615},
        {"type": ["integer", "string"], "minimum": 0.5},
        {"type": ["integer", "number", "null"], "minimum": 0.5, "maximum": 3},
    ],
)
def test_nullable_integer_bounds(backend: GrammarBackend, schema: dict[str, Any]) -> None:
    """mafintosh/is-my-json-valid#123, networknt/json-schema-validator#1226: a nullable integer
    with bounds was misread (``null`` refused) or crashed schema loading. The bounds apply to the
    integers only: ``null`` stays valid. Old code here: a fractional or past-int64 bound on a type
    list was a 400 from xgrammar ("Integer constraint must be a whole number"), and so was one
    beside ``number`` (which already holds every integer). Oracle: ``jsonschema``."""
    g = _never_invalid(backend, schema, NUMBERS + ["a"])
    if "null" in schema["type"]:
        assert _accepts(g, "null")


def test_draft4_nullable_integer_with_boolean_exclusive_minimum(backend: GrammarBackend) -> None:
    """acornejo/jjv#41: Draft 4's ``{"type": ["null", "integer"], "minimum": 0,
    "exclusiveMinimum": true}`` under a ``$ref`` refused ``{"id": null}``; the report expects it
    valid, and ``0`` invalid. Oracle: ``jsonschema``'s Draft 4 validator."""
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"id": {"$ref": "#/definitions/id"}},
        "definitions": {"id": {"type": ["null", "integer"], "minimum": 0, "exclusiveMinimum": True}},
        "required": ["id"],
    }
    g = _never_invalid(backend, schema, [{"id": v} for v in (None, 0, 1, 2, -1, 0.5, "1")])
    assert _accepts(g, '{"id": null}') and not _accepts(g, '{"id": 0}')


#: short strings around the words the alternation patterns name
WORDS = ["cat", "dog", "xcatx", "adog", "dogx", "cat}", "", "c", "A", "B", "D", "xAx", "Dx", "xD", "E"]
WORDS += ["{ab}", "ab-c", "{a", "a b", "{a-b}x"]


@pytest.mark.parametrize("pattern", ["cat|dog", "^cat|dog$", "^A|B|C|D$", "^(\\{[\\w\\-]+\\})|([\\w\\-]+)$"])
def test_pattern_top_level_alternation_stays_inside_quotes(backend: GrammarBackend, pattern: str) -> None:
    """dottxt-ai/outlines-core#267, ggml-org/llama.cpp#9903: a ``pattern`` with a top-level
    alternation was pasted between the JSON quotes ungrouped, so ``"cat|dog"`` became ``"cat`` OR
    ``dog"``: valid values refused, unparseable ones taken. (The last pattern is
    mlc-ai/xgrammar#207's, which crashed the converter.) The grammar of the property takes
    exactly the strings ``jsonschema`` (``re.search``) takes."""
    schema = {
        "type": "object",
        "properties": {"v": {"type": "string", "pattern": pattern}},
        "required": ["v"],
        "additionalProperties": False,
    }
    g = _schema_grammar(backend, schema)
    validator = _validator(schema)
    verdicts = []
    for w in WORDS:
        expected = validator.is_valid({"v": w})
        verdicts.append(expected)
        assert _accepts(g, json.dumps({"v": w})) == expected, (pattern, w)
    assert any(verdicts) and not all(verdicts)
    assert not _accepts(g, '{"v": "cat}') and not _accepts(g, '{"v": dog"}')


def test_xgrammar_segv_schema_with_recursive_defs(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#207: the API Gateway schema (patterns, a ``definitions`` pair that refer to
    each other) crashed xgrammar's JSON Schema converter. It compiles here, and its grammar takes
    the documents ``jsonschema`` takes and refuses the ones it refuses."""
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "required": ["ParentId", "RestApiId", "ChildResources"],
        "properties": {
            "ParentId": {"type": "string", "pattern": "^[a-z0-9]+$"},
            "RestApiId": {"type": "string", "pattern": "^[a-z0-9]{10}$"},
            "ChildResources": {"$ref": "#/definitions/childresources"},
        },
        "additionalProperties": False,
        "definitions": {
            "childresources": {"type": "array", "items": {"$ref": "#/definitions/childresource"}},
            "childresource": {
                "required": ["PathPart"],
                "additionalProperties": False,
                "type": "object",
                "properties": {
                    "PathPart": {"type": "string", "pattern": "^(\\{[\\w\\-]+\\})|([\\w\\-]+)$"},
                    "ChildResources": {"$ref": "#/definitions/childresources"},
                },
            },
        },
    }
    base = {"ParentId": "abc1", "RestApiId": "0123456789"}
    docs = [
        {**base, "ChildResources": []},
        {**base, "ChildResources": [{"PathPart": "{id}"}]},
        {**base, "ChildResources": [{"PathPart": "users", "ChildResources": [{"PathPart": "{uid}"}]}]},
        {**base, "ChildResources": [{"PathPart": "$$"}]},
        {**base, "ChildResources": [{}]},
        {**base, "RestApiId": "short", "ChildResources": []},
        {**base, "ParentId": "ABC", "ChildResources": []},
        {**base},
    ]
    g = _schema_grammar(backend, schema)
    validator = _validator(schema)
    verdicts = [validator.is_valid(d) for d in docs]
    assert [_accepts(g, json.dumps(d)) for d in docs] == verdicts
    assert any(verdicts) and not all(verdicts)


def test_openai_math_reasoning_schema_with_refs(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#122: OpenAI's chain-of-thought example (``MathReasoning`` holding a list of
    ``Step`` through ``$defs``) produced empty output with xgrammar. Its grammar takes a full
    answer and refuses a step missing a field. Oracle: ``jsonschema``."""
    schema = {
        "$defs": {
            "Step": {
                "properties": {"explanation": {"type": "string"}, "output": {"type": "string"}},
                "required": ["explanation", "output"],
                "type": "object",
                "additionalProperties": False,
            }
        },
        "properties": {
            "steps": {"items": {"$ref": "#/$defs/Step"}, "type": "array"},
            "final_answer": {"type": "string"},
        },
        "required": ["steps", "final_answer"],
        "type": "object",
        "additionalProperties": False,
    }
    good = {"steps": [{"explanation": "subtract 7", "output": "8x = -30"}], "final_answer": "x = -3.75"}
    bad = {"steps": [{"explanation": "subtract 7"}], "final_answer": "x = -3.75"}
    validator = _validator(schema)
    assert validator.is_valid(good) and not validator.is_valid(bad)
    g = _schema_grammar(backend, schema)
    assert _accepts(g, json.dumps(good)) and not _accepts(g, json.dumps(bad))
    assert not _accepts(g, "")


def test_type_object_schema_compiles(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#256: ``{"type": "object"}`` (the schema asking for "any JSON object")
    failed to compile. It compiles, takes objects and refuses other JSON values. Oracle:
    ``jsonschema``."""
    schema = {"type": "object"}
    values: list[Any] = [{}, {"a": 1, "b": [1, {"c": None}]}, [], 1, "x", None]
    g = _schema_grammar(backend, schema)
    validator = _validator(schema)
    assert [_accepts(g, json.dumps(v)) for v in values] == [validator.is_valid(v) for v in values]


@pytest.mark.parametrize(
    "other",
    [{"json_schema": '{"type": "object"}'}, {"regex": "a+"}, {"ebnf": 'root ::= "a"'}],
)
def test_structural_tag_beside_another_grammar_is_a_400(other: dict[str, str]) -> None:
    """sgl-project/sglang#31690 (fixing #31680): ``SamplingParams.verify`` accepted
    ``structural_tag`` beside another grammar field and one was silently ignored. The right
    behaviour: a ``ValueError`` (HTTP 400) naming the fields."""
    tag = json.dumps({"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}})
    sp = SamplingParams(structural_tag=tag, **other)
    with pytest.raises(ValueError, match="structural_tag"):
        sp.verify(VOCAB, allow_grammar=True)


def test_token_ids_outside_the_vocabulary_are_refused(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#611: JSON mode crashed the matcher with "Invalid token id 151757" (an id past
    the vocabulary). Here an id outside ``[0, vocab_size)`` is never allowed and never accepted
    (no exception), and the grammar state is unchanged: ``{}`` still parses afterwards."""
    g = _grammar(backend, json_schema='{"type": "object"}')
    mask = g.allowed_next_tokens()
    assert mask.shape == (VOCAB,) and bool(mask.any())
    for t in (VOCAB, VOCAB + 7, -1):
        assert not g.allows(t)
        assert g.accept(t) is False
    tok = tokenizers.Tokenizer.from_file(tokenizer_json_path())
    ids = tok.encode("{}", add_special_tokens=False).ids
    assert all(g.accept(i) for i in ids)
    assert set(g.end_tokens()) and all(g.allows(t) for t in g.end_tokens())


def test_regex_back_reference_is_a_400(backend: GrammarBackend) -> None:
    """guidance-ai/guidance#617: the regex ``([a-z]) \\1`` produced ``q 1`` (the back-reference
    read as a literal), which ``re.match`` refuses. A back-reference cannot be enforced by a
    token mask, so the request is refused naming it, never compiled to another language."""
    assert re.fullmatch(r"([a-z]) \1", "a a") and not re.fullmatch(r"([a-z]) \1", "q 1")
    with pytest.raises(ValueError, match="back-reference"):
        _grammar(backend, regex=r"([a-z]) \1")


def test_regex_space_reaches_through_real_tokens(backend: GrammarBackend) -> None:
    """google-ai-edge/LiteRT-LM#3510: with a token table of raw SentencePiece pieces, a regex that
    needs a space (``[a-z]+ [a-z]+``) never finished: no token could write the space. Here the
    tokenizer's own encoding of ``"cat dog"`` (whose decoding is the text, and which
    ``re.fullmatch`` takes) is accepted token by token and may end there; ``catdog`` is not."""
    pattern = "[a-z]+ [a-z]+"
    tok = tokenizers.Tokenizer.from_file(tokenizer_json_path())
    ids = tok.encode("cat dog", add_special_tokens=False).ids
    assert tok.decode(ids) == "cat dog" and re.fullmatch(pattern, "cat dog")
    g = _grammar(backend, regex=pattern)
    assert all(g.accept(i) for i in ids)
    assert any(g.allows(t) for t in g.end_tokens())
    assert not _accepts(g, "catdog")


@pytest.mark.parametrize(
    ("char_class", "texts"),
    [
        ("[a-zA-Zà-ÿÀ-ß0-9 ]+", ["école", "ÿ", "Öl 9", "é", "ā", "x", "日本", ""]),
        ("[é]", ["é", "e", "ée"]),
        ("[^\\-<]+", ["ab", "-", "<", "a-b", "é"]),
    ],
)
def test_ebnf_unicode_character_class(backend: GrammarBackend, char_class: str, texts: list[str]) -> None:
    """mlc-ai/xgrammar#138: ``root ::= [é]`` refused ``"é"`` (the class matched bytes, not
    characters), so accented letters could not be written. The EBNF class takes exactly the
    texts Python's ``re.fullmatch`` takes with the same class."""
    g = _grammar(backend, ebnf=f"root ::= {char_class}")
    verdicts = [bool(re.fullmatch(char_class, t)) for t in texts]
    assert [_accepts(g, t) for t in texts] == verdicts
    assert any(verdicts) and not all(verdicts)


#: texts around a caret, hex digits and control characters
CLASS_TEXTS = ["", "^", "a", "b", "1", "0", "-", "_", "A", "Ab", "^a", "a^", "^^", "z", "]", "Ab1", "AA"]
CLASS_TEXTS += [
    "\u041b",
    "\x01",
    "\x1b",
    "\x10",
    "\x01b",
    "\x85",
    "\u085a",
    "\u0e9f",
    "\u00e9",
    "f",
    "\x07",
    "Z",
]
CLASS_TEXTS += ["\x05", "\x7f", "\u07fa", " ", "\t", "a\x01", "^\x01"]


def _regex_agrees(backend: GrammarBackend, pattern: str) -> None:
    """The ``regex`` field and a schema ``pattern`` holding ``pattern`` take exactly the texts
    (strings) Python's ``re`` takes (``fullmatch`` / ``search``), over :data:`CLASS_TEXTS`."""
    g = _grammar(backend, regex=pattern)
    verdicts = [bool(re.fullmatch(pattern, t)) for t in CLASS_TEXTS]
    assert [_accepts(g, t) for t in CLASS_TEXTS] == verdicts, pattern
    assert any(verdicts) and not all(verdicts)
    gs = _schema_grammar(backend, {"type": "string", "pattern": pattern})
    found = [bool(re.search(pattern, t)) for t in CLASS_TEXTS]
    assert [_accepts(gs, json.dumps(t, ensure_ascii=False)) for t in CLASS_TEXTS] == found, pattern


@pytest.mark.parametrize(
    "pattern",
    [r"[\^a]", r"[\^]", r"[\^]+", r"[\^-a]", r"[\^\d]", r"[\^\da]+", r"[\x5ea]", r"[\x5e]", r"[\u005e]"]
    + [r"[\^_]", r"a?[\^]?b", r"[\x5e-\x61]+", r"(?i)[\^a]", r"[\^\]]", r"[\x01\^]", r"[\^\x01]", r"[\^\n]"],
)
def test_escaped_caret_first_in_a_class_is_a_literal(backend: GrammarBackend, pattern: str) -> None:
    """MikeMirzayanov/testlib#111, amageed/Regextra#10: a ``^`` first in a character class was read
    as the class's negation although escaped (or written ``\\x5e``); the reports' right reading is
    a literal caret. Old code here: ``[\\^a]`` took everything but ``a`` (xgrammar drops the
    escape) and ``[\\^]`` any character, in the ``regex`` field and a schema ``pattern`` alike.
    Oracle: Python's ``re``."""
    _regex_agrees(backend, pattern)


@pytest.mark.parametrize(
    "pattern",
    [
        r"\x41b",
        r"[\x41b]+",
        r"\x41\x62",
        r"[\x01b]",
        r"[\u0001b]+",
        r"[\x01\d]",
        r"[\x01-\x05a]",
        r"[\u00e9f]",
    ]
    + [r"[\x85a]", r"[\x7fa]", "[\x01b]", r"[\ab]", r"[\x01\x1b]+", r"[^\x01a]", r"[\x01-b]", r"(?i)[\x01b]"]
    + [r"[\t\d]", r"[\x05-\x7f]"],
)
def test_hex_escape_takes_two_digits(backend: GrammarBackend, pattern: str) -> None:
    """onetrueawk/awk#164, Kampfkarren/selene#293: a ``\\xHH`` escape (or a control character)
    read more hex digits than its own; ``\\x`` takes exactly two (Python's ``re``, ECMA-262). Old
    code here: ``\\x41b`` was U+041B instead of ``Ab``, ``[\\x01b]`` was ESC (xgrammar writes the
    class's control character as ``\\x01`` and reads the ``b`` into it), ``[\\x01\\d]`` took
    ``-``. Oracle: Python's ``re``."""
    _regex_agrees(backend, pattern)


@pytest.mark.parametrize(
    "pattern", [r"[^^\x41]", r"[^^\x01]+", r"[^^\u00e9]", r"[^^\x41b]", r"[^^\p{Lu}]", r"[^^-a\x01]"]
)
def test_literal_caret_first_in_a_translated_negated_class(backend: GrammarBackend, pattern: str) -> None:
    """A negated class whose first member is a literal ``^`` (``[^^...]``: the second caret is a
    member, Python's ``re`` and ECMA-262) and that is written out explicitly (a ``\\x`` escape, a
    control character, a property): the members were re-read as ``[^...]``, so the literal caret
    turned into a second negation (``[^^\\x41]`` took only ``A``-less text minus ``^`` inverted:
    ``1`` was refused, ``^`` taken). Oracle: Python's ``re`` (the ``regex`` package for
    ``\\p{Lu}``)."""
    import regex as regex_pkg  # the regex package reads \p{...}; same reading as re otherwise

    g = _grammar(backend, regex=pattern)
    verdicts = [bool(regex_pkg.fullmatch(pattern, t)) for t in CLASS_TEXTS]
    assert [_accepts(g, t) for t in CLASS_TEXTS] == verdicts, pattern
    assert any(verdicts) and not all(verdicts)

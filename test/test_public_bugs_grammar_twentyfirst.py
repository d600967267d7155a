"""A twenty-first set of public bug reports in constrained decoding (SGLang's ``json_schema``
sampling parameter, as ``response_format`` sends it): keywords beside an ``anyOf`` / ``oneOf``,
string length bounds, and malformed schemas.

Bug found here and fixed: the keywords of a node beside its ``anyOf`` / ``oneOf`` (``type``,
``minimum``, ``maxLength``...) were dropped by xgrammar, so ``{"type": "integer", "anyOf":
[{"type": "integer"}, {"type": "string"}]}`` let ``"x"`` through (mlc-ai/xgrammar#858) -- they
are now applied to each branch (``sampling/json_schema_alternatives.py``). The other reports
passed as-is and are kept as regression tests.

Oracles: the ``jsonschema`` package's validator (Draft 2020-12) on the schema as sent; xgrammar's
own compiler and matcher used directly, with no code under test (to show what the raw grammar
accepted).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")

from grammar_backend_testutil import (  # noqa: E402
    EOS,
    VOCAB,
    accepts,
    raw_schema_accepts,
    schema_grammar,
    tokenizer_json_path,
)
from sglang_v4.sampling.grammar import GrammarBackend  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def tokenizer_json() -> str:
    return tokenizer_json_path()


@pytest.fixture(scope="module")
def backend(tokenizer_json: str) -> GrammarBackend:
    return GrammarBackend.from_tokenizer_file(tokenizer_json, VOCAB, [EOS])


def _refused(backend: GrammarBackend, schema_text: str) -> str:
    """The ``ValueError`` message (an HTTP 400) for the schema text; fails if it compiles."""
    with pytest.raises(ValueError) as e:
        sp = SamplingParams(json_schema=schema_text)
        sp.verify(backend.vocab_size, allow_grammar=True)
        backend.create(sp)
    return str(e.value)


def _valid(schema: Any, text: str) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))


ANY_OF_SIBLINGS = [
    # (schema, text the schema rejects, text it accepts)
    ({"type": "integer", "anyOf": [{"type": "integer"}, {"type": "string"}]}, '"x"', "3"),
    ({"type": "integer", "anyOf": [{"minimum": 5}, {"maximum": -5}]}, '"x"', "7"),
    ({"type": "integer", "anyOf": [{"minimum": 5}, {"maximum": -5}]}, "0", "-9"),
    (
        {"type": "object", "anyOf": [{"type": "string"}, {"properties": {"a": {"type": "integer"}}}]},
        '"s"',
        '{"a": 1}',
    ),
    ({"type": "number", "oneOf": [{"type": "integer", "minimum": 3}, {"type": "string"}]}, '"s"', "4"),
]


@pytest.mark.parametrize(("schema", "bad", "good"), ANY_OF_SIBLINGS)
def test_keywords_beside_any_of_apply_to_every_branch(backend: GrammarBackend, schema, bad, good) -> None:
    # mlc-ai/xgrammar#858: a node's keywords beside its anyOf / oneOf were dropped by the
    # converter, so the grammar accepted values the node's own `type` / bounds forbid.
    assert not _valid(schema, bad) and _valid(schema, good)  # the oracle
    g = schema_grammar(backend, schema)
    assert not accepts(g, bad)
    assert accepts(g, good)


def test_raw_converter_drops_keywords_beside_any_of() -> None:
    # mlc-ai/xgrammar#858: the raw xgrammar grammar (what the server compiled before) takes a
    # string for an integer node, so the rewrite above is what enforces the node's `type`.
    schema = {"type": "integer", "anyOf": [{"type": "integer"}, {"type": "string"}]}
    if not raw_schema_accepts(schema, '"x"'):
        pytest.skip("this xgrammar applies the keywords beside anyOf itself")
    assert not _valid(schema, '"x"')


def test_branch_whose_type_clashes_with_the_node_matches_nothing(backend: GrammarBackend) -> None:
    # mlc-ai/xgrammar#858: {"type": "string", "oneOf": [{"type": "integer"}]} has no valid
    # value; it is a 400 naming the branch, not a grammar that writes an integer.
    schema = {"type": "string", "oneOf": [{"type": "integer"}]}
    assert not _valid(schema, "1") and not _valid(schema, '"a"')
    msg = _refused(backend, json.dumps(schema))
    assert "oneOf[0]" in msg and "type" in msg


def test_max_length_is_enforced(backend: GrammarBackend) -> None:
    # mlc-ai/xgrammar#131: maxLength was not respected (a 400-character string for maxLength 40).
    schema = {"type": "object", "properties": {"id": {"type": "string", "maxLength": 4}}, "required": ["id"]}
    g = schema_grammar(backend, schema)
    for text in ('{"id": "abcd"}', '{"id": "abcde"}', '{"id": ""}'):
        assert accepts(g, text) == _valid(schema, text), text


def test_max_length_counts_code_points(backend: GrammarBackend) -> None:
    # mlc-ai/xgrammar#131: JSON Schema counts a string's length in Unicode code points
    # (Validation 6.3.1), so two accented letters or one emoji fit their bounds.
    g2 = schema_grammar(backend, {"type": "string", "maxLength": 2})
    g1 = schema_grammar(backend, {"type": "string", "maxLength": 1})
    assert _valid({"type": "string", "maxLength": 2}, '"\u00e9\u00e9"')
    assert accepts(g2, '"\u00e9\u00e9"')
    assert not accepts(g2, '"\u00e9\u00e9\u00e9"')
    assert accepts(g1, '"\U0001f600"')


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^a+b+$", "maxLength": 2},
        {"type": "string", "pattern": "^[a-z]+x+$", "minLength": 3},
        {"type": "string", "format": "date", "maxLength": 5},
    ],
)
def test_pattern_or_format_with_length_bound_is_refused(backend: GrammarBackend, schema) -> None:
    # mlc-ai/xgrammar#749, mlc-ai/xgrammar#895: xgrammar compiles `pattern` / `format` and drops
    # minLength / maxLength beside them; a bound that cannot be enforced (one that does not fold
    # into the pattern) is a 400 naming it, not a grammar that writes strings out of bounds.
    msg = _refused(backend, json.dumps({"type": "object", "properties": {"k": schema}, "required": ["k"]}))
    assert "Length" in msg


@pytest.mark.parametrize("text", ["{", '{"type": "object", "properties": ', "[1, 2", ""])
def test_malformed_json_schema_is_a_client_error(backend: GrammarBackend, text: str) -> None:
    # sgl-project/sglang#4574: an invalid json_schema crashed the scheduler; it is a
    # ValueError (HTTP 400) naming the field, and the backend keeps serving.
    msg = _refused(backend, text)
    assert "json_schema" in msg
    assert accepts(schema_grammar(backend, {"type": "integer"}), "12")

"""A twenty-fourth set of public bug reports in constrained decoding: a ``pattern`` or ``format``
beside length bounds, empty and complex enums, ``const`` values, pydantic models' schemas, and a
token-level check of a JSON string.

Faults found here and fixed:

* a string node with a ``pattern`` and ``minLength`` / ``maxLength`` was always a 400 (xgrammar
  drops the bounds, mlc-ai/xgrammar#683, sgl-project/sglang#37707), even where the two meet in
  one regex: an anchored pattern whose matches all fit the bounds (``^\\d{3}-\\d{4}$`` beside
  ``maxLength: 8``) or whose body is one repetition of a fixed-width element between fixed-width
  parts (``^[a-z]+$``, ``^[A-Z][a-z]*$``, pydantic's ``constr(pattern=..., max_length=...)``);
  those are now folded into the pattern
  (``sampling/json_schema_pattern_length.py``);
* ``format: "date"`` (and the other formats written as exact patterns) beside length bounds was a
  400 for the same reason, though ``maxLength: 10`` says nothing about a date; bounds that fold into
  the format's pattern are now accepted (mlc-ai/xgrammar#796).

The other reports passed as-is and are kept as regression tests.

Oracles: the ``jsonschema`` package's validator (formats asserted); pydantic's own validation of
the model a schema came from; Python's ``json`` parser and ``re``; xgrammar's own grammar of a
schema and its own EBNF / Lark readers.
"""

from __future__ import annotations

import enum
import itertools
import json
import re
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")
pydantic = pytest.importorskip("pydantic")

from grammar_backend_testutil import VOCAB, ds_grammar_backend, tokenizer_json_path  # noqa: E402
from grammar_backend_testutil import accepts as _accepts  # noqa: E402
from sglang_v4.sampling.grammar import Grammar, GrammarBackend  # noqa: E402
from sglang_v4.sampling.json_schema_pattern_length import pattern_within_length_bounds  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402

pytestmark = pytest.mark.timeout(180)

FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend()


def _schema_grammar(backend: GrammarBackend, schema: Any) -> Grammar:
    """The grammar of a ``json_schema`` request field, checked as the server checks it."""
    sp = SamplingParams(json_schema=json.dumps(schema))
    sp.verify(VOCAB, allow_grammar=True)
    g = backend.create(sp)
    assert g is not None
    return g


def _text(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


def _check_values(backend: GrammarBackend, schema: dict[str, Any], values: list[Any]) -> None:
    """The grammar of ``schema`` takes exactly the values ``jsonschema`` (formats asserted) finds
    valid, and the oracle tells them apart (the check is not vacuous)."""
    g = _schema_grammar(backend, schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)
    verdicts = []
    for v in values:
        expected = validator.is_valid(v)
        verdicts.append(expected)
        assert _accepts(g, _text(v)) == expected, (v, expected)
    assert any(verdicts) and not all(verdicts)


def _raw_schema_accepts(schema: Any, text: str) -> bool:
    """Whether xgrammar's own grammar of ``schema`` (no code under test) accepts ``text`` whole."""
    g = xgr.Grammar.from_json_schema(json.dumps(schema))
    m = xgr.GrammarMatcher(
        xgr.GrammarCompiler(xgr.TokenizerInfo([f"<t{i}>" for i in range(8)])).compile_grammar(g)
    )
    return bool(m.accept_string(text)) and bool(m.is_completed())


#: every string of up to five characters over ``a b 1``, and some JSON-escaped ones
STRINGS = [""] + ["".join(t) for n in range(1, 6) for t in itertools.product("ab1", repeat=n)]
STRINGS += ['a"b', "a\\b", "é", "a\nb", "$"]


@pytest.mark.parametrize(
    "bounds",
    [{"maxLength": 3}, {"minLength": 3}, {"minLength": 2, "maxLength": 4}, {"minLength": 1, "maxLength": 1}],
)
def test_pattern_with_length_bounds_is_enforced(backend: GrammarBackend, bounds: dict[str, int]) -> None:
    """mlc-ai/xgrammar#683: ``{"pattern": "^[a-z]+$", "maxLength": 3}`` took ``"abcd"`` (the
    bound dropped). Old code here: a 400 for the satisfiable schema. Now both hold. Oracle:
    ``jsonschema``; xgrammar's own grammar of the schema still takes ``"abab"`` (the bound
    really is dropped there)."""
    schema = {"type": "string", "pattern": "^[ab]+$", **bounds}
    if bounds.get("maxLength") == 3:
        assert _raw_schema_accepts(schema, '"abab"')
    _check_values(backend, schema, STRINGS)


@pytest.mark.parametrize(
    "pattern",
    [
        "^(?:ab|ba){1,}$",
        "^(ab)*$",
        "^[ab]{2,5}$",
        "^a+?$",
        "^.{1,4}$",
        "^(a|b)+$",
        "^[a\\-b]*$",
        "^1?$",
        "^a*b$",
        "^1[ab]*$",
        "^(a)b{0,3}1$",
        "^1{2}[ab]+$",
    ],
)
def test_pattern_repetition_meets_length_bounds(backend: GrammarBackend, pattern: str) -> None:
    """sgl-project/sglang#37707: ``pattern`` + ``minLength`` lost the length bound under
    xgrammar. A pattern that is one repetition of a fixed-width element (one or two characters
    here), alone or between fixed-width parts, meets every bound in one count range. Oracle: ``jsonschema`` over all short strings,
    for several bound pairs."""
    checked = 0
    for lo, hi in ((0, 3), (2, 4), (3, None), (1, 1)):
        schema: dict[str, Any] = {"type": "string", "pattern": pattern, "minLength": lo}
        if hi is not None:
            schema["maxLength"] = hi
        validator = jsonschema.Draft202012Validator(schema)
        if not any(validator.is_valid(s) for s in STRINGS):
            continue  # no string fits: a 400 (checked in the next test)
        _check_values(backend, schema, STRINGS)
        checked += 1
    assert checked >= 2


def test_pattern_and_bounds_that_do_not_meet(backend: GrammarBackend) -> None:
    """sgl-project/sglang#37707 (the other side): where no string matches the pattern within the
    bounds, or the pattern has two repetitions (``^a*b+$``), the node is still a 400 naming
    both keywords, never compiled with the bounds dropped. Oracle: ``jsonschema`` (no short
    string is valid for the first; ``"aaab"`` passes the pattern and fails ``maxLength``)."""
    dead = {"type": "string", "pattern": "^(ab)*$", "minLength": 5, "maxLength": 5}
    assert not any(jsonschema.Draft202012Validator(dead).is_valid(s) for s in STRINGS)
    mixed = {"type": "string", "pattern": "^a*b+$", "maxLength": 3}
    assert not jsonschema.Draft202012Validator(mixed).is_valid("aaab")
    for schema in (dead, mixed, {"type": "string", "pattern": "a", "maxLength": 3}):
        with pytest.raises(ValueError, match=r"'pattern' together with 'minLength' / 'maxLength'"):
            _schema_grammar(backend, schema)


class _Phone(pydantic.BaseModel):
    number: str = pydantic.Field(pattern=r"^\d{3}-\d{4}$", max_length=8)
    code: str = pydantic.Field(pattern=r"^[A-Z]+$", min_length=2, max_length=3)


def test_pydantic_constrained_strings(backend: GrammarBackend) -> None:
    """sgl-project/sglang#37707 (a pydantic model's ``Field(pattern=..., max_length=...)``): a
    fixed-width pattern whose length fits the bound, and a repetition with both bounds. Oracle:
    pydantic's own validation of the model."""
    g = _schema_grammar(backend, _Phone.model_json_schema())
    numbers = ["555-1234", "555-12345", "55-1234", "5551234"]
    codes = ["AB", "ABC", "A", "ABCD", "ab"]
    verdicts = []
    for number, code in itertools.product(numbers, codes):
        text = json.dumps({"number": number, "code": code})
        try:
            _Phone.model_validate_json(text)
            ok = True
        except pydantic.ValidationError:
            ok = False
        verdicts.append(ok)
        assert _accepts(g, text) == ok, text
    assert any(verdicts) and not all(verdicts)


def test_pattern_length_rewrite_leaves_other_nodes() -> None:
    """mlc-ai/xgrammar#683 (scope): only an anchored pattern of a string node is folded; an
    unanchored search, a ``format``, a non-string node and a backreference are left as written
    (and refused later). Oracle: the nodes as sent."""
    for node in (
        {"type": "string", "pattern": "[a-z]+", "maxLength": 3},
        {"type": "string", "pattern": "^[a-z]+$", "format": "email", "maxLength": 3},
        {"type": "integer", "pattern": "^[a-z]+$", "maxLength": 3},
        {"type": "string", "pattern": "^(a)\\1*$", "maxLength": 3},
        {"type": "string", "pattern": "^a{,3}$", "maxLength": 3},
        {"type": "string", "pattern": "^[a-z]+\\$", "maxLength": 3},
    ):
        before = dict(node)
        pattern_within_length_bounds(node)
        assert node == before


DATES = ["2024-02-29", "2023-02-29", "2024-01-31", "2024-1-31", "2024-01-310", "x"]


def test_date_format_with_length_bounds(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#796: ``format`` beside ``minLength`` / ``maxLength`` compiled with the
    bounds dropped. A date is always ten characters, so ``maxLength: 10`` or ``minLength: 8``
    adds nothing: the format alone is enforced. Old code: a 400. Oracle: ``jsonschema`` with its
    ``date`` format check."""
    for bounds in ({"maxLength": 10}, {"minLength": 8, "maxLength": 12}):
        _check_values(backend, {"type": "string", "format": "date", **bounds}, DATES)


def test_ipv4_format_with_a_cutting_bound_is_a_400(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#796 (the other side): ``ipv4`` with ``maxLength: 9`` cuts the format's
    7-15 characters, which no single regex here expresses: still a 400 naming ``format``, not a
    grammar with the bound dropped. Oracle: ``jsonschema`` refuses ``"10.10.10.10"`` (a valid
    address over the bound)."""
    schema = {"type": "string", "format": "ipv4", "maxLength": 9}
    validator = jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)
    assert validator.is_valid("1.2.3.4") and not validator.is_valid("10.10.10.10")
    with pytest.raises(ValueError, match=r"'format' together with"):
        _schema_grammar(backend, schema)
    _check_values(backend, {"type": "string", "format": "ipv4", "maxLength": 15}, ["10.10.10.10", "1.2.3.04"])


def test_empty_enum_is_a_400(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#639: ``"enum": []`` compiled to a rule matching the empty text, so the
    model wrote ``{"x": }``. Here the schema (no value satisfies ``x``) is a 400 naming ``enum``.
    Oracle: ``jsonschema`` finds no value valid."""
    schema = {"type": "object", "properties": {"x": {"type": "string", "enum": []}}, "required": ["x"]}
    validator = jsonschema.Draft202012Validator(schema)
    assert not any(validator.is_valid(v) for v in ({"x": ""}, {"x": "a"}, {}, {"x": None}))
    with pytest.raises(ValueError, match=r"^json_schema: invalid grammar: .*'enum' \[\]"):
        _schema_grammar(backend, schema)


def test_empty_object_schema_and_large_max_length(backend: GrammarBackend) -> None:
    """ggml-org/llama.cpp#25923: an empty-object schema (``"properties": {}``) and a large
    ``maxLength`` each produced a grammar that was refused, breaking the whole request. Here both
    compile: an object without ``properties`` takes any keys, one with ``"properties": {}`` is
    read strictly (declared keys only, OpenAI's structured-outputs reading) and takes ``{}``.
    Oracle: ``jsonschema`` (with ``additionalProperties: false`` written out for the strict
    reading)."""
    _check_values(
        backend,
        {"type": "object", "properties": {"opts": {"type": "object"}}, "required": ["opts"]},
        [{"opts": {}}, {"opts": {"k": [1, "v"]}}, {"opts": []}, {}],
    )
    g = _schema_grammar(
        backend, {"type": "object", "properties": {"opts": {"type": "object", "properties": {}}}}
    )
    strict = {"type": "object", "properties": {"opts": {"type": "object", "additionalProperties": False}}}
    for v in ({"opts": {}}, {"opts": {"k": 1}}, {}, {"opts": []}):
        assert _accepts(g, _text(v)) == jsonschema.Draft202012Validator(strict).is_valid(v), v
    _check_values(
        backend,
        {"type": "object", "properties": {}, "additionalProperties": False},
        [{}, {"a": 1}],
    )
    _check_values(backend, {"type": "string", "maxLength": 5000}, ["a" * 5000, "a" * 5001, "é" * 5000])


def test_additional_properties_boolean_and_schema(backend: GrammarBackend) -> None:
    """noamgat/lm-format-enforcer#69: ``additionalProperties`` as a boolean raised
    (``'bool' object has no attribute 'get'``); as a schema it must type the extra keys. Oracle:
    ``jsonschema``."""
    props = {"number": {"type": "number"}, "street_type": {"enum": ["Street", "Avenue", "Boulevard"]}}
    values = [
        {"number": 1600, "street_type": "Avenue"},
        {"number": 1600, "street_type": "Avenue", "direction": "NW"},
        {"number": 1600, "direction": 7},
        {"street_type": "Road"},
    ]
    for extra in (False, True, {"type": "string"}):
        _check_values(backend, {"type": "object", "properties": props, "additionalProperties": extra}, values)


class _Names(pydantic.BaseModel):
    names: list[str] = pydantic.Field(min_length=2, max_length=2)


def test_pydantic_list_length_bounds(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#160: ``minItems`` / ``maxItems`` of a pydantic ``list[str]`` field
    (``Field(min_length=2, max_length=2)``) were not enforced: four names came back. Oracle:
    pydantic's own validation of the model."""
    g = _schema_grammar(backend, _Names.model_json_schema())
    for n in range(5):
        text = json.dumps({"names": [f"n{i}" for i in range(n)]})
        try:
            _Names.model_validate_json(text)
            ok = True
        except pydantic.ValidationError:
            ok = False
        assert _accepts(g, text) == ok, text
        assert ok == (n == 2)


class _CarType(str, enum.Enum):
    sedan = "sedan"
    suv = "SUV"
    truck = "Truck"
    coupe = "Coupe"


class _CarDescription(pydantic.BaseModel):
    brand: str
    model: str
    car_type: _CarType


def test_pydantic_enum_through_defs(backend: GrammarBackend) -> None:
    """vllm-project/vllm#13683: the ``CarDescription`` model of vLLM's structured-output example
    (a ``str`` enum reached through ``$defs`` / ``$ref``) gave malformed output (``{{``
    repeated). Here the grammar takes exactly the model's valid documents. Oracle: pydantic's own
    validation of the model."""
    g = _schema_grammar(backend, _CarDescription.model_json_schema())
    verdicts = []
    for car_type in ("SUV", "suv", "Coupe", "Truck ", "sedan"):
        for doc in (
            {"brand": "Toyota", "model": "Supra", "car_type": car_type},
            {"brand": "Toyota", "car_type": car_type},
        ):
            text = json.dumps(doc)
            try:
                _CarDescription.model_validate_json(text)
                ok = True
            except pydantic.ValidationError:
                ok = False
            verdicts.append(ok)
            assert _accepts(g, text) == ok, text
    assert any(verdicts) and not all(verdicts)
    assert not _accepts(g, "{{")


def test_complex_enum_of_objects(backend: GrammarBackend) -> None:
    """pydantic/pydantic#6953: enum values are whole JSON documents, objects and arrays included,
    and an ``enum`` nested under another applies too: ``[{"A": "test", "B": 4}]`` is invalid.
    Oracle: ``jsonschema`` (the report's own example) on the values' compact texts."""
    schema = {
        "type": "array",
        "items": {
            "type": ["object"],
            "properties": {"A": {"type": "string"}, "B": {"type": "integer"}},
            "enum": [{"A": "test", "B": 5}, {"A": "test", "B": 4}],
        },
        "enum": [[{"A": "test", "B": 5}]],
    }
    g = _schema_grammar(backend, schema)
    validator = jsonschema.Draft202012Validator(schema)
    for v in ([{"A": "test", "B": 5}], [{"A": "test", "B": 4}], [], [{"A": "test", "B": 6}]):
        assert _accepts(g, json.dumps(v, separators=(",", ":"))) == validator.is_valid(v), v


@pytest.mark.parametrize(
    "const", [1, "fixed", [1, "two", None], {"kind": "point", "xy": [0, 1]}, None, False]
)
def test_const_of_every_type(backend: GrammarBackend, const: Any) -> None:
    """guidance-ai/guidance#886: ``const`` of any JSON type (integers, strings, arrays, complex
    objects), alone, with a matching ``type``, and as an object's property. Every text the
    grammar takes must parse to the constant (a compact spelling is taken), and other values are
    refused. Oracle: ``jsonschema`` and Python's ``json``."""
    type_name = {
        int: "integer",
        str: "string",
        list: "array",
        dict: "object",
        type(None): "null",
        bool: "boolean",
    }
    compact = json.dumps(const, separators=(",", ":"))
    others = [2, "other", [1], {"kind": "point"}, True, 0]
    for schema in ({"const": const}, {"type": type_name[type(const)], "const": const}):
        g = _schema_grammar(backend, schema)
        validator = jsonschema.Draft202012Validator(schema)
        assert _accepts(g, compact) and validator.is_valid(json.loads(compact))
        for v in others:
            if v != const or type(v) is not type(const):
                assert not validator.is_valid(v) and not _accepts(g, json.dumps(v)), v
    wrapped = {"type": "object", "properties": {"c": {"const": const}}, "required": ["c"]}
    g = _schema_grammar(backend, wrapped)
    assert _accepts(g, '{"c":' + compact + "}")
    assert not _accepts(g, '{"c":' + json.dumps("not-it") + "}")


def test_const_failing_its_type_is_a_400(backend: GrammarBackend) -> None:
    """guidance-ai/guidance#886 (review: ``{"type": "integer", "const": "1"}`` is a schema no
    value satisfies): a 400 naming ``const``, not a grammar of ``"1"``. Oracle: ``jsonschema``
    refuses both the string and the integer."""
    schema = {"type": "integer", "const": "1"}
    validator = jsonschema.Draft202012Validator(schema)
    assert not validator.is_valid("1") and not validator.is_valid(1)
    with pytest.raises(ValueError, match=r"'const'"):
        _schema_grammar(backend, schema)


QUERIES = {
    "type": "object",
    "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
    "required": ["queries"],
}


def test_token_path_cannot_leave_a_string_open(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#737: the matcher took ``{"queries":["hello","]}`` (the second string
    never closed) when fed token by token, as a model writes it. Here the tokens of DeepSeek-V4's
    tokenizer are fed one at a time: the broken text is refused before it completes, the
    closed one is taken whole. Oracle: Python's ``json`` parser and ``jsonschema``."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_json_path())
    validator = jsonschema.Draft202012Validator(QUERIES)
    for text in ('{"queries":["hello","]}', '{"queries":["hello",""]}', '{"queries":["a\\"]"]}'):
        try:
            valid = validator.is_valid(json.loads(text))
        except json.JSONDecodeError:
            valid = False
        g = _schema_grammar(backend, QUERIES)
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
        m = g.fresh_copy().matcher
        taken = all(bool(m.accept_token(i)) for i in ids) and bool(m.is_completed())
        assert taken == valid, text


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_ebnf_is_a_400(backend: GrammarBackend, text: str) -> None:
    """vllm-project/vllm#23215: an empty ``guided_grammar`` string crashed the grammar backend
    at compilation. Here it is a ``ValueError`` naming ``ebnf`` (a 400) before or at creation,
    and the backend compiles the next grammar. Oracle: xgrammar's own EBNF parser refuses the
    text (it has no ``root`` rule)."""
    with pytest.raises(RuntimeError):
        xgr.Grammar.from_ebnf(text)
    with pytest.raises(ValueError, match=r"ebnf"):
        sp = SamplingParams(ebnf=text)
        sp.verify(VOCAB, allow_grammar=True)
        backend.create(sp)
    sp = SamplingParams(ebnf='root ::= "ok"')
    sp.verify(VOCAB, allow_grammar=True)
    assert _accepts(backend.create(sp), "ok")


ARITH_EBNF = """root ::= (expr "=" term)+
expr  ::= term ([-+*/] term)*
term  ::= num | "(" expr ")"
num   ::= [0-9]+
"""


def test_ebnf_with_alternation_is_read_as_ebnf(backend: GrammarBackend) -> None:
    """vllm-project/vllm#11118: a valid EBNF grammar holding ``|`` was taken for Lark and
    converted, so it did not mean what it said. Here the ``ebnf`` field is always EBNF. Oracle:
    Python's ``re`` for the grammar's language without parentheses
    (``((num([-+*/]num)*)=num)+``), and two parenthesised texts read by hand."""
    sp = SamplingParams(ebnf=ARITH_EBNF)
    sp.verify(VOCAB, allow_grammar=True)
    g = backend.create(sp)
    flat = re.compile(r"(?:[0-9]+(?:[-+*/][0-9]+)*=[0-9]+)+")
    probes = ["1+2=3", "12*3=36", "1=2", "1+2=3=4", "1+2", "=3", "1++2=3", "1=2+3", "10-4=6 ", ""]
    verdicts = [bool(flat.fullmatch(p)) for p in probes]
    assert any(verdicts) and not all(verdicts)
    for p, ok in zip(probes, verdicts):
        assert _accepts(g, p) == ok, p
    assert _accepts(g, "(1+2)*3=9") and _accepts(g, "2=(3)")
    assert not _accepts(g, "(1+2=3") and not _accepts(g, "1=(2")


def test_malformed_lark_custom_tool_is_a_400() -> None:
    """guidance-ai/llguidance#228: a malformed Lark grammar (``start: / "test"``, an unclosed
    terminal) made the grammar library panic. Here a Responses custom tool with that grammar is a
    400 naming ``format.definition``; a well-formed one compiles. Oracle: xgrammar's own Lark
    reader refuses the text."""
    from sglang_v4.entrypoints.openai.request_errors import RequestError
    from sglang_v4.entrypoints.openai.responses_custom_tools import input_value_format

    bad = 'start: / "test"\n'
    with pytest.raises(RuntimeError):
        xgr.Grammar.from_lark(bad)
    with pytest.raises(RequestError) as e:
        input_value_format({"type": "grammar", "syntax": "lark", "definition": bad}, "tools[0]")
    assert e.value.status == 400 and e.value.param == "tools[0].format.definition"
    good = input_value_format(
        {"type": "grammar", "syntax": "lark", "definition": 'start: "test"\n'}, "tools[0]"
    )
    assert good is not None and good["type"] == "grammar"

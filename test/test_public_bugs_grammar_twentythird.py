"""A twenty-third set of public bug reports in constrained decoding: JSON Schema string formats,
malformed EBNF grammars, character classes, array bounds, Draft 7 tuples, and grammars beside
reasoning and tools.

Faults found here and fixed:

* a schema ``pattern`` (or ``patternProperties`` key) with anchors on some branches of a
  top-level alternation only, or a ``^`` inside a group (``^ab|c$``, ``(^a|b)c``, ``^a$|b``),
  reached xgrammar as a full match or lost the search around a branch, so ``^ab|c$`` refused
  ``"ac"`` (mlc-ai/xgrammar#826's second defect, met in the rewrite): the anchors are now
  written out of the search (``sampling/json_schema_regex.py``);
* xgrammar's built-in ``format: "ipv4"`` took octets with a leading zero (``"01.2.3.4"``,
  refused by the JSON Schema Test Suite as octal-looking), and its ``"ipv6"`` refused valid
  addresses ending in an IPv4 address (``"1:2:3:4:5:6:1.2.3.4"``, ``"1::2:1.2.3.4"``) while
  taking an embedded IPv4 address with a leading zero (``"::ffff:01.2.3.4"``); both formats are
  now written as exact RFC 3986 patterns (``sampling/json_schema_ip_format.py``);
* a ``]`` first in a character class (``[]a]``, ``[^]]``) went to xgrammar as written, which
  reads ``[]`` as an empty class: ``[]a]`` was refused and ``[^]]+`` took only ``"]"``
  strings, in the ``regex`` field and in a schema ``pattern`` alike; such a class is now
  rewritten with the ``]`` escaped (``sampling/regex_dialect.py``);
* ``maxItems`` below the number of ``prefixItems``, or a ``false`` entry in ``prefixItems``
  (satisfiable schemas: the positions are not required) were a 400 from xgrammar; the
  unreachable entries are now dropped, a ``false`` one ending the array
  (``sampling/json_schema_tuple.py``).

The other reports passed as-is and are kept as regression tests.

Oracles: the ``jsonschema`` package's validator with its format checker (its ``ipv4`` / ``ipv6``
checks are Python's ``ipaddress``); xgrammar's own EBNF parser used directly; Python's ``re``.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")

from dsml_testutil import dsml_block, dsml_invoke, dsml_param  # noqa: E402
from grammar_backend_testutil import accepts as _accepts  # noqa: E402
from grammar_backend_testutil import ds_grammar_backend, grammar_for, schema_grammar  # noqa: E402
from sglang_v4.sampling.grammar import GrammarBackend  # noqa: E402
from sglang_v4.sampling.structural_tag import (  # noqa: E402
    after_reasoning_structural_tag,
    answer_or_tool_calls_structural_tag,
    tool_call_structural_tag,
)

pytestmark = pytest.mark.timeout(180)

FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend()


def _check_values(backend: GrammarBackend, schema: dict[str, Any], values: list[Any]) -> None:
    """The grammar of ``schema`` takes exactly the values ``jsonschema`` (formats asserted) finds
    valid, and the oracle tells them apart (the check is not vacuous)."""
    g = schema_grammar(backend, schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)
    verdicts = []
    for v in values:
        expected = validator.is_valid(v)
        verdicts.append(expected)
        assert _accepts(g, json.dumps(v)) == expected, (v, expected)
    assert any(verdicts) and not all(verdicts)


#: dotted quads over octets with and without leading zeros, in every position
_OCTETS = ["0", "00", "01", "9", "09", "10", "099", "199", "255", "256"]
IPV4_STRINGS = [
    ".".join(q)
    for q in itertools.product(_OCTETS, repeat=4)
    if sum(o in ("00", "01", "09", "099", "256") for o in q) <= 1
][::7] + ["1.2.3", "1.2.3.4.5", "087.10.0.1", "0.0.0.0", "1.2.3.04", "00.1.2.3", " 1.2.3.4"]


def test_ipv4_two_digit_leading_zero_is_refused(backend: GrammarBackend) -> None:
    """horejsek/python-fastjsonschema#207: the ``ipv4`` format took octets with a leading zero
    (``"01.2.3.4"``, ``"1.2.3.04"``, ``"00.1.2.3"``). Old code: xgrammar's built-in ``ipv4``
    regex took them too. Oracle: ``jsonschema``'s ``ipv4`` check (Python's ``ipaddress``)."""
    _check_values(backend, {"type": "string", "format": "ipv4"}, IPV4_STRINGS)


def test_ipv4_leading_zero_refused_in_every_length(backend: GrammarBackend) -> None:
    """dottxt-ai/outlines#1904: the ``ipv4`` regex refused ``"010.1.1.1"`` but took
    ``"01.1.1.1"`` and ``"1.1.1.09"``: leading zeros must be refused in every form, a lone
    ``0`` kept. Oracle: ``jsonschema``'s ``ipv4`` check."""
    values = ["01.1.1.1", "00.0.0.0", "1.1.1.09", "010.1.1.1", "0.0.0.0", "10.1.1.1", "1.1.1.90"]
    _check_values(backend, {"type": "string", "format": "ipv4"}, values)


def test_ipv4_format_inside_an_object_and_a_type_list(backend: GrammarBackend) -> None:
    """json-schema-org/JSON-Schema-Test-Suite#469: "invalid leading zeroes, as they are treated as
    octals" applies wherever the format sits: a property of an object, a ``["string", "null"]``
    node. Oracle: ``jsonschema``'s ``ipv4`` check."""
    schema = {
        "type": "object",
        "properties": {"host": {"type": ["string", "null"], "format": "ipv4"}},
        "required": ["host"],
        "additionalProperties": False,
    }
    values = [{"host": h} for h in ("087.10.0.1", "87.10.0.1", "192.168.0.01", "192.168.0.1")]
    _check_values(backend, schema, values + [{"host": None}])
    # a strict tool's argument of that format, in the DSML call block
    tools = [{"type": "function", "function": {"name": "ping", "parameters": schema, "strict": True}}]
    tag = tool_call_structural_tag(
        tools, "required", thinking=False, parallel_tool_calls=False, enforce_schema=True
    )
    g = grammar_for(backend, structural_tag=tag)
    validator = jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)
    for v in values:
        call = dsml_block(dsml_invoke("ping", dsml_param("host", True, v["host"])))
        assert _accepts(g, call) == validator.is_valid(v), v


def test_ipv6_embedded_ipv4_and_rfc_forms(backend: GrammarBackend) -> None:
    """json-schema-org/JSON-Schema-Test-Suite#1064: an IPv4 address ending an IPv6 one is a
    ``dec-octet`` quad (RFC 3986 section 3.2.2), so ``"::ffff:192.168.0.01"`` is invalid. Old
    code: xgrammar's ``ipv6`` took it, and refused the valid ``"1:2:3:4:5:6:1.2.3.4"`` and
    ``"1::2:1.2.3.4"``. Oracle: ``jsonschema``'s ``ipv6`` check (Python's ``ipaddress``)."""
    values = [
        "::ffff:192.168.0.01",
        "::ffff:192.168.0.1",
        "::ffff:01.2.3.4",
        "1:2:3:4:5:6:1.2.3.4",
        "1::2:1.2.3.4",
        "1:2:3:4:5:6:7:1.2.3.4",
        "1::2::3",
        "::",
        "::1",
        "1::",
        "fe80::1%eth0",
        "1:2:3:4:5:6:7:8",
        "1:2:3:4:5:6:7:8:9",
        "1:2:3:4:5:6:7::",
        "::2:3:4:5:6:7:8",
        "0001:2:3:4:5:6:7:8",
        "00001::1",
        "ABCD:ef01::",
        "12345::1",
        "1:2:3:4::1.2.3.4",
        "1:2:3:4:5::1.2.3.4",
        "1:2:3:4:5:6::1.2.3.4",
        "1::2:3:4:5:6:7",
        "1.2.3.4",
    ]
    _check_values(backend, {"type": "string", "format": "ipv6"}, values)


def _xgrammar_refuses_ebnf(text: str) -> bool:
    """Whether xgrammar's own EBNF parser (no code under test) refuses ``text``."""
    try:
        xgr.Grammar.from_ebnf(text)
    except Exception:  # noqa: BLE001 - any parse error is a refusal
        return True
    return False


def test_duplicate_root_rule_is_a_400(backend: GrammarBackend) -> None:
    """vllm-project/vllm#44401: an EBNF grammar defining ``root`` twice passed admission and
    then killed the engine (HTTP 500, then no server). Here: a ``ValueError`` naming the field
    (a 400) at creation, and the backend still compiles the next grammar. Oracle: xgrammar's own
    EBNF parser refuses the text."""
    text = 'root ::= "a" | "b"\nroot ::= "c"'
    assert _xgrammar_refuses_ebnf(text)
    with pytest.raises(ValueError, match=r"^ebnf: invalid grammar: .*root"):
        grammar_for(backend, ebnf=text)
    g = grammar_for(backend, ebnf='root ::= "a" | "b"')
    assert _accepts(g, "a") and not _accepts(g, "c")


@pytest.mark.parametrize(
    "text",
    ['root ::= "yes" | "no', 'Root ::= [^\\n]+ "\\n#"', 'root ::= ( "a" ', "root ::= undefined_rule"],
)
def test_invalid_ebnf_is_refused_not_ignored(backend: GrammarBackend, text: str) -> None:
    """ggml-org/llama.cpp#24144: an invalid grammar was logged and dropped, the request answered
    200 with unconstrained text. Here it is a ``ValueError`` naming ``ebnf`` (a 400). Oracle:
    xgrammar's own EBNF parser refuses each text."""
    assert _xgrammar_refuses_ebnf(text)
    with pytest.raises(ValueError, match=r"^ebnf: invalid grammar: "):
        grammar_for(backend, ebnf=text)


def test_escaped_hyphen_in_character_class(backend: GrammarBackend) -> None:
    """ggml-org/llama.cpp#27597: ``[a\\-z]`` (an escaped hyphen: the three characters ``a``,
    ``-``, ``z``) was refused by the grammar parser. Here it compiles, as a ``regex`` and in an
    EBNF rule, meaning the three characters, not the range. Oracle: Python's ``re``."""
    probes = ["a", "-", "z", "b", "a-z", "zz-a", "", "A"]
    for g in (grammar_for(backend, regex=r"[a\-z]+"), grammar_for(backend, ebnf=r"root ::= [a\-z]+")):
        for s in probes:
            assert _accepts(g, s) == bool(re.fullmatch(r"[a\-z]+", s)), s


def test_min_max_items_on_an_array_of_objects(backend: GrammarBackend) -> None:
    """Dan-wanna-M/formatron#31: ``minItems`` / ``maxItems`` (both 5) on an array of objects
    under a property made the grammar engine fail ("nonterminal ... is not defined"). Here it
    compiles and takes exactly five items. Oracle: ``jsonschema``."""
    item = {
        "type": "object",
        "properties": {"id": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["id", "tags"],
        "additionalProperties": False,
    }
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"settings": {"minItems": 5, "maxItems": 5, "type": "array", "items": item}},
        "required": ["settings"],
        "additionalProperties": False,
    }
    values = [{"settings": [{"id": str(i), "tags": ["t"] * (i % 2)} for i in range(n)]} for n in range(8)]
    _check_values(backend, schema, values)


def test_draft7_tuple_items_compile(backend: GrammarBackend) -> None:
    """vllm-project/vllm#30346: a Draft 7 tuple array (``items`` a list) crashed the server
    through xgrammar. Here it compiles with Draft 7's meaning: the listed positions typed, extra
    items free unless ``additionalItems`` says otherwise. Oracle: ``jsonschema``'s Draft 7
    validator."""
    for extra in ({}, {"additionalItems": False}, {"additionalItems": {"type": "boolean"}}):
        schema = {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "array",
            "items": [{"type": "string"}, {"type": "integer"}],
            **extra,
        }
        g = schema_grammar(backend, schema)
        validator = jsonschema.Draft7Validator(schema)
        values = [[], ["a"], ["a", 1], [1, "a"], ["a", 1, True], ["a", 1, "x"], ["a", 1, True, 2]]
        verdicts = [validator.is_valid(v) for v in values]
        assert any(verdicts) and not all(verdicts)
        for v, expected in zip(values, verdicts):
            assert _accepts(g, json.dumps(v)) == expected, (extra, v)


PLANET = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "moons": {"type": "integer"}, "fun_fact": {"type": "string"}},
    "required": ["name", "moons", "fun_fact"],
}


def test_schema_answer_follows_free_reasoning(backend: GrammarBackend) -> None:
    """ddalcu/mlx-serve#331 (and ggml-org/llama.cpp#12276): with thinking on, the JSON grammar
    applied from the first token kept the model from closing its reasoning, so the JSON landed in
    ``reasoning_content``. Here the reasoning is free up to ``</think>`` and only the answer
    after it is held to the schema. Oracle: ``jsonschema`` on the text after ``</think>``."""
    g = grammar_for(backend, structural_tag=after_reasoning_structural_tag("json_schema", json.dumps(PLANET)))
    validator = jsonschema.Draft202012Validator(PLANET)
    good = {"name": "Saturn", "moons": 146, "fun_fact": "It would float."}
    reasoning = "Saturn: 146 moons, {not json} here.\n"
    for answer in (good, {"name": "Saturn", "moons": "many", "fun_fact": "x"}, {"name": "Saturn"}):
        assert _accepts(g, reasoning + "</think>" + json.dumps(answer)) == validator.is_valid(answer)
    assert not _accepts(g, json.dumps(good))  # the reasoning block must be closed first
    assert not _accepts(g, reasoning + "</think>Saturn has 146 moons.")


def test_tools_auto_with_thinking_accepts_reasoning_then_calls(backend: GrammarBackend) -> None:
    """sgl-project/sglang-jax#1273: a tool-call structural tag under ``tool_choice: "auto"``
    broke when thinking was on (the reasoning markers were outside the grammar). Here the
    reasoning comes first, then free text or a DSML block whose strict arguments follow the
    schema. Oracle: ``jsonschema`` on the arguments."""
    params = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    tools = [{"type": "function", "function": {"name": "forecast", "parameters": params, "strict": True}}]
    tag = tool_call_structural_tag(
        tools, "auto", thinking=True, parallel_tool_calls=True, enforce_schema=False
    )
    g = grammar_for(backend, structural_tag=tag)
    validator = jsonschema.Draft202012Validator(params)
    for days in ("3", '"three"'):
        args = {"city": "Oslo", "days": json.loads(days)}
        call = dsml_block(
            dsml_invoke("forecast", dsml_param("city", True, "Oslo"), dsml_param("days", False, days))
        )
        assert _accepts(g, "I should look it up.</think>" + call) == validator.is_valid(args), days
    assert _accepts(g, "No tool needed.</think>It is sunny.")


def test_response_format_beside_auto_tools_allows_either(backend: GrammarBackend) -> None:
    """vllm-project/vllm#56086 (sgl-project/sglang#25777): with ``response_format`` and tools under
    ``tool_choice: "auto"`` the answer grammar alone made tool calls impossible; the model must
    be free to call a tool or to answer in the format. Oracle: ``jsonschema`` on the answer."""
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    tag = answer_or_tool_calls_structural_tag(
        "json_schema", json.dumps(PLANET), tools, thinking=False, parallel_tool_calls=False
    )
    g = grammar_for(backend, structural_tag=tag)
    validator = jsonschema.Draft202012Validator(PLANET)
    for answer in (
        {"name": "Mars", "moons": 2, "fun_fact": "Red."},
        {"name": "Mars", "moons": 2.5, "fun_fact": ""},
    ):
        assert _accepts(g, json.dumps(answer)) == validator.is_valid(answer)
    assert _accepts(g, dsml_block(dsml_invoke("lookup", dsml_param("q", True, "Mars"))))
    assert not _accepts(g, "Mars has two moons.")


def _raw_schema_accepts(schema: Any, text: str) -> bool:
    """Whether xgrammar's own grammar of ``schema`` (no code under test) accepts ``text`` whole."""
    g = xgr.Grammar.from_json_schema(json.dumps(schema))
    m = xgr.GrammarMatcher(
        xgr.GrammarCompiler(xgr.TokenizerInfo([f"<t{i}>" for i in range(8)])).compile_grammar(g)
    )
    return bool(m.accept_string(text)) and bool(m.is_completed())


@pytest.mark.parametrize("fmt", ["email", "ipv4", "date", "uuid"])
def test_format_with_length_bound_is_a_400(backend: GrammarBackend, fmt: str) -> None:
    """vllm-project/vllm#49996: ``format`` beside ``minLength`` / ``maxLength`` compiled with the
    bound silently dropped, so strings over ``maxLength`` came back. Here the combination is a
    400 naming ``format``. Oracle: ``jsonschema`` refuses a string over the bound that xgrammar's
    own grammar of ``format: "email"`` still takes (the bound really is dropped)."""
    schema = {"type": "string", "format": fmt, "maxLength": 6}
    if fmt == "email":
        long = "abcdefgh@example.com"
        assert not jsonschema.Draft202012Validator(schema).is_valid(long)
        assert _raw_schema_accepts(schema, json.dumps(long))
    with pytest.raises(ValueError, match=r"^json_schema: invalid grammar: .*'format'.*'maxLength'"):
        schema_grammar(backend, schema)


VALUE = {
    "type": "object",
    "properties": {"n": {"type": "number"}},
    "required": ["n"],
    "additionalProperties": False,
}


def test_property_names_keeps_the_additional_properties_schema(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#826 (first defect): ``propertyNames`` beside an ``additionalProperties``
    schema dropped that value schema, so ``{"a": "plain"}`` passed. Oracle: ``jsonschema``."""
    _check_values(
        backend,
        {"type": "object", "propertyNames": {"type": "string"}, "additionalProperties": VALUE},
        [{"a": "plain"}, {"a": {"n": 1}}, {}, {"a": {"n": "x"}}],
    )
    _check_values(
        backend,
        {"type": "object", "propertyNames": {"pattern": "^x"}, "additionalProperties": VALUE},
        [{"xa": "plain"}, {"xa": {"n": 1}}, {"a": {"n": 1}}],
    )


@pytest.mark.parametrize(
    "pattern",
    [
        "^a$|^b$",
        "a|b",
        "^(a|b)$",
        "^ab|c$",
        "^a|b",
        "a|b$",
        "^a$|b",
        "(^ab|c$)",
        "a(^ab|c$)",
        "(^a|b)c",
        "(^a|b)(c$|a)",
        "^$|b",
        "(^|a)b",
        "(^a)*b",
        "b|^a*$",
        "^a?$|c",
        "(a$|b)c",
    ],
)
def test_top_level_alternation_in_a_pattern(backend: GrammarBackend, pattern: str) -> None:
    """mlc-ai/xgrammar#826 (second defect): a ``pattern`` whose top level is an alternation
    compiled to a grammar that does not mean the pattern. Old code here: an alternation with an
    anchor on some branches only (``^ab|c$``: "starts with ab or ends with c"), or a ``^``
    inside a group (``(^a|b)c``), went to xgrammar as it was and was read as a full match
    (``"ac"`` refused); ``^a$|b`` lost the search before ``b``. Oracle: ``jsonschema`` over
    every short string of ``a b c``."""
    strings = [""] + ["".join(t) for n in range(1, 4) for t in itertools.product("abc", repeat=n)]
    _check_values(backend, {"type": "string", "pattern": pattern}, strings)


def test_pattern_properties_key_with_branch_anchors(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#826 (the same reading for keys): a ``patternProperties`` key regex is a
    search too, so ``^x|y$`` takes keys starting with ``x`` or ending with ``y``. Oracle:
    ``jsonschema``."""
    schema = {
        "type": "object",
        "patternProperties": {"^x|y$": {"type": "integer"}},
        "additionalProperties": False,
    }
    values = [{k: 1} for k in ("x", "xa", "ay", "y", "a", "ya", "axa")] + [{"xa": "s"}]
    _check_values(backend, schema, values)


LLAMA_JSON_EBNF = r"""
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
item ::= "{" space item-name-kv "," space item-age-kv "}" space
item-age ::= ([0-9] | ([1-8] [0-9] | [9] [0-9]) | "1" ([0-4] [0-9] | [5] "0")) space
item-age-kv ::= "\"age\"" space ":" space item-age
item-name ::= "\"" char{1,100} "\"" space
item-name-kv ::= "\"name\"" space ":" space item-name
root ::= "[" space item ("," space item){9,99} "]" space
space ::= "" | " " | "\n" [ \t]{0,20}
"""


def test_llama_cpp_readme_grammar_with_bounded_repeats(backend: GrammarBackend) -> None:
    """mlc-ai/xgrammar#137: the JSON grammar of llama.cpp's grammar README (``char{1,100}``,
    ``{9,99}``, ``\\x7F`` escapes) failed to parse ("Invalid escape sequence"). Here it compiles
    (its empty alternative ``space ::= | ...`` spelled ``""``, as xgrammar's EBNF writes it)
    and its bounds hold: 10 to 100 items, names of 1 to 100 characters, ages 0 to 150. Oracle:
    the grammar's text read by hand (repeat bounds, the age alternatives)."""
    g = grammar_for(backend, ebnf=LLAMA_JSON_EBNF)

    def array(n: int, name: str = "Ann", age: int = 30) -> str:
        return (
            "["
            + ",".join(json.dumps({"name": name, "age": age}, separators=(",", ":")) for _ in range(n))
            + "]"
        )

    assert _accepts(g, array(10)) and _accepts(g, array(100))
    assert not _accepts(g, array(9)) and not _accepts(g, array(101))
    assert _accepts(g, array(10, name="x" * 100)) and not _accepts(g, array(10, name="x" * 101))
    assert _accepts(g, array(10, name='a\\"b'))  # an escaped quote is one ``char``
    assert _accepts(g, array(10, age=150)) and not _accepts(g, array(10, age=151))
    assert not _accepts(g, array(10, name=""))


#: every string of up to three characters over ``a ] ^ [ - \``
BRACKET_STRINGS = [""] + ["".join(t) for n in range(1, 4) for t in itertools.product("a]^[-\\", repeat=n)]


@pytest.mark.parametrize("regex", [r"[]]", r"[^]]+", r"x*[^]]*", r"[^]\\]+"])
def test_leading_bracket_is_a_literal_in_a_class(backend: GrammarBackend, regex: str) -> None:
    """google/fancy-regex#28: ``[]]`` and ``[^]]`` are valid, the same as ``[\\]]`` and
    ``[^\\]]``: a ``]`` right after ``[`` or ``[^`` is a member. Old code: ``[]]`` was refused
    ("Empty character class") and ``[^]]+`` took only ``"]"`` strings. Oracle: Python's
    ``re.fullmatch`` for the ``regex`` field and a structural tag's ``regex`` format;
    ``jsonschema`` (Python's ``re.search``) for the same class in a ``pattern``."""
    tag = json.dumps({"type": "structural_tag", "format": {"type": "regex", "pattern": regex}})
    for g in (grammar_for(backend, regex=regex), grammar_for(backend, structural_tag=tag)):
        for s in BRACKET_STRINGS:
            assert _accepts(g, s) == bool(re.fullmatch(regex, s)), s
    _check_values(backend, {"type": "string", "pattern": f"^(?:{regex})$"}, BRACKET_STRINGS)


@pytest.mark.parametrize("regex", [r"[]abc]+", r"[^]abc]+", r"[]-a]+", r"[]^]+"])
def test_bracket_first_in_a_longer_class(backend: GrammarBackend, regex: str) -> None:
    """gskinner/regexr#550: ``]`` first in a bracket expression (after ``^`` if present) is a
    member, ``[]abc]`` and ``[^]abc]``; so is the range ``[]-a]`` (``]`` to ``a``). Old code:
    refused as an empty class, or ``]`` dropped from a negated class. Oracle: Python's
    ``re.fullmatch``."""
    g = grammar_for(backend, regex=regex)
    for s in BRACKET_STRINGS:
        assert _accepts(g, s) == bool(re.fullmatch(regex, s)), s


TUPLE = [{"type": "integer"}, {"type": "string"}, {"type": "boolean"}]
ARRAYS = [[], [1], [1, "a"], [1, "a", True], [1, "a", True, 2], ["a"], [1, 2], [1, "a", 3]]


@pytest.mark.parametrize(
    "bounds", [{"maxItems": 2}, {"maxItems": 1}, {"maxItems": 0}, {"minItems": 1, "maxItems": 2}]
)
def test_max_items_below_the_prefix_items_length(backend: GrammarBackend, bounds: dict[str, int]) -> None:
    """oasdiff/oasdiff#1181: ``maxItems`` below the number of ``prefixItems`` is a dead
    constraint on the trailing entries, not a contradiction: the schema is satisfiable. Old
    code: a 400 ("maxItems is less than the number of prefixItems: 2 < 3"). Oracle:
    ``jsonschema``."""
    _check_values(backend, {"type": "array", "prefixItems": TUPLE, **bounds}, ARRAYS)


def test_prefix_items_with_max_items_and_trailing_items(backend: GrammarBackend) -> None:
    """Effect-TS/effect#7060: ``prefixItems`` with ``maxItems`` must keep both meanings: a bound
    shorter than the prefix cuts the tuple, a longer one admits trailing ``items`` up to it.
    Oracle: ``jsonschema`` (Draft 2020-12), and its Draft 7 validator for the same tuple written
    with a list ``items``."""
    for most in (1, 2, 4):
        schema = {"type": "array", "prefixItems": TUPLE, "items": {"type": "integer"}, "maxItems": most}
        _check_values(backend, schema, ARRAYS)
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "array",
        "items": TUPLE,
        "additionalItems": False,
        "maxItems": 1,
    }
    g = schema_grammar(backend, draft7)
    validator = jsonschema.Draft7Validator(draft7)
    for v in ARRAYS:
        assert _accepts(g, json.dumps(v)) == validator.is_valid(v), v


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "prefixItems": [{"type": "integer"}, False]},
        {"type": "array", "prefixItems": [{"type": "integer"}, False, {"type": "string"}], "maxItems": 3},
        {"type": "array", "prefixItems": [False], "items": {"type": "integer"}},
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}, False], "minItems": 1},
    ],
)
def test_false_prefix_item_ends_the_array(backend: GrammarBackend, schema: dict[str, Any]) -> None:
    """datamodel-code-generator/datamodel-code-generator#3191: a ``false`` entry in
    ``prefixItems`` means no array reaches that position (the array ends before it), a valid
    and satisfiable schema. Old code: a 400 ("prefixItems contains false"). Oracle:
    ``jsonschema``."""
    _check_values(backend, schema, ARRAYS)

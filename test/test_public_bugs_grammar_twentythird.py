"""A twenty-third set of public bug reports in constrained decoding: JSON Schema string formats,
malformed EBNF grammars, character classes, array bounds, Draft 7 tuples, and grammars beside
reasoning and tools.

Fault found here and fixed: xgrammar's built-in ``format: "ipv4"`` took octets with a leading
zero (``"01.2.3.4"``, refused by the JSON Schema Test Suite as octal-looking), and its ``"ipv6"``
refused valid addresses ending in an IPv4 address (``"1:2:3:4:5:6:1.2.3.4"``, ``"1::2:1.2.3.4"``)
while taking an embedded IPv4 address with a leading zero (``"::ffff:01.2.3.4"``); both formats
are now written as exact RFC 3986 patterns (``sampling/json_schema_ip_format.py``). The other
reports passed as-is and are kept as regression tests.

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
from grammar_backend_testutil import VOCAB, ds_grammar_backend  # noqa: E402
from grammar_backend_testutil import accepts as _accepts  # noqa: E402
from sglang_v4.sampling.grammar import Grammar, GrammarBackend  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402
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


def _grammar(backend: GrammarBackend, **fields: Any) -> Grammar:
    """The grammar of one request's grammar field, checked as the server checks it."""
    sp = SamplingParams(**fields)
    sp.verify(VOCAB, allow_grammar=True)
    g = backend.create(sp)
    assert g is not None
    return g


def _schema_grammar(backend: GrammarBackend, schema: Any) -> Grammar:
    return _grammar(backend, json_schema=json.dumps(schema))


def _check_values(backend: GrammarBackend, schema: dict[str, Any], values: list[Any]) -> None:
    """The grammar of ``schema`` takes exactly the values ``jsonschema`` (formats asserted) finds
    valid, and the oracle tells them apart (the check is not vacuous)."""
    g = _schema_grammar(backend, schema)
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
    g = _grammar(backend, structural_tag=tag)
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
        _grammar(backend, ebnf=text)
    g = _grammar(backend, ebnf='root ::= "a" | "b"')
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
        _grammar(backend, ebnf=text)


def test_escaped_hyphen_in_character_class(backend: GrammarBackend) -> None:
    """ggml-org/llama.cpp#27597: ``[a\\-z]`` (an escaped hyphen: the three characters ``a``,
    ``-``, ``z``) was refused by the grammar parser. Here it compiles, as a ``regex`` and in an
    EBNF rule, meaning the three characters, not the range. Oracle: Python's ``re``."""
    probes = ["a", "-", "z", "b", "a-z", "zz-a", "", "A"]
    for g in (_grammar(backend, regex=r"[a\-z]+"), _grammar(backend, ebnf=r"root ::= [a\-z]+")):
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
        g = _schema_grammar(backend, schema)
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
    g = _grammar(backend, structural_tag=after_reasoning_structural_tag("json_schema", json.dumps(PLANET)))
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
    g = _grammar(backend, structural_tag=tag)
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
    g = _grammar(backend, structural_tag=tag)
    validator = jsonschema.Draft202012Validator(PLANET)
    for answer in (
        {"name": "Mars", "moons": 2, "fun_fact": "Red."},
        {"name": "Mars", "moons": 2.5, "fun_fact": ""},
    ):
        assert _accepts(g, json.dumps(answer)) == validator.is_valid(answer)
    assert _accepts(g, dsml_block(dsml_invoke("lookup", dsml_param("q", True, "Mars"))))
    assert not _accepts(g, "Mars has two moons.")

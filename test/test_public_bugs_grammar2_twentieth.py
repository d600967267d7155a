"""A twentieth set of public bug reports, in constrained decoding (``response_format`` /
SGLang's ``json_schema`` / ``regex`` sampling parameters): JSON-schema keywords read together,
``oneOf``, recursive schemas, the JSON the grammar lets through, when the grammar lets the output
end, and grammars in a running batch.

Bugs found here and fixed: an ``enum`` / ``const`` beside other keywords of its node was compiled
alone, so ``{"type": "integer", "enum": [1, 2, 3], "minimum": 2}`` wrote ``1`` and ``{"type":
"integer", "const": "x"}`` wrote ``"x"`` (json-schema-faker/json-schema-faker#224 -- the values are
now filtered by the node's other keywords, a node left with none is a 400); ``oneOf`` was compiled
as ``anyOf``, letting a value match two branches (mlc-ai/xgrammar#672, ohdearquant/lattice#1077 --
now enforced where the branches are disjoint and a 400 elsewhere); a recursive schema whose every
value must hold another one (a ``required`` self-reference) compiled to a grammar with no finite
text, so the request ran to ``max_tokens`` (vllm-project/vllm#57725's second half, generalised --
now a 400 at intake). The other reports passed as-is and are kept as regression tests.

Oracles: the ``jsonschema`` package's validator (of the draft the schema names; Draft 2020-12 by
default) on the schema as sent; Python's ``json`` (RFC 8259); ``re.fullmatch``; xgrammar's own
matcher built here from the schema with no code under test (the raw compile, to show what the
unfixed grammar accepted, and the prefix check of a cut output); a cold run of the same request.
The in-process ``Scheduler`` runs on the random test checkpoint (greedy; its outputs are arbitrary
but must satisfy their grammar).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from grammar_backend_testutil import schema_validator
from scheduler_testutil import assert_idle, drain, make_scheduler, submit

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")

from sglang_v4.sampling.grammar import Grammar, GrammarBackend  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402

pytestmark = pytest.mark.timeout(120)

PROMPT = [11, 12, 13, 14]


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    s = make_scheduler(sched_model_dir, constrained_json_max_whitespace_cnt=2)  # short answers
    if not s.grammar_enabled:
        pytest.skip("no grammar backend")
    return s


@pytest.fixture(scope="module")
def backend(sched: Any) -> GrammarBackend:
    return sched.grammar_backend


@pytest.fixture(scope="module")
def eos(sched: Any) -> int:
    (tid,) = sched.eos_ids
    return tid


def _grammar(backend: GrammarBackend, schema: Any) -> Grammar:
    """The answer grammar of ``schema`` as a request sends it, checked as the server checks it."""
    sp = SamplingParams(json_schema=json.dumps(schema))
    sp.verify(backend.vocab_size, allow_grammar=True)
    g = backend.create(sp)
    assert g is not None
    return g


def _refused(backend: GrammarBackend, schema: Any) -> str:
    """The ``ValueError`` message (an HTTP 400) for ``schema``; fails if it compiles."""
    sp = SamplingParams(json_schema=json.dumps(schema))
    with pytest.raises(ValueError) as e:
        sp.verify(backend.vocab_size, allow_grammar=True)
        backend.create(sp)
    return str(e.value)


def _accepts(g: Grammar, text: str) -> bool:
    """Whether ``text`` is a whole answer of ``g`` (a fresh matcher; ``g`` is unchanged)."""
    m = g.fresh_copy().matcher
    return bool(m.accept_string(text)) and bool(m.is_completed())


def _validator(schema: Any) -> Any:
    return schema_validator(schema)


def _agrees_with_jsonschema(g: Grammar, schema: Any, valid: list[str], invalid: list[str]) -> None:
    """The oracle says ``valid`` texts are valid and ``invalid`` ones are not; the grammar takes
    every valid one and none of the invalid ones."""
    check = _validator(schema)
    for text in valid:
        assert check.is_valid(json.loads(text)), text
        assert _accepts(g, text), text
    for text in invalid:
        assert not check.is_valid(json.loads(text)), text
        assert not _accepts(g, text), text


def _raw_xgrammar_accepts(schema: Any, text: str) -> bool:
    """Whether xgrammar's own grammar of ``schema`` (compiled as it stands, none of the server's
    checks) takes ``text`` whole."""
    from xgrammar.testing import _is_grammar_accept_string

    return bool(_is_grammar_accept_string(xgr.Grammar.from_json_schema(json.dumps(schema)), text))


# --- enum / const beside other keywords ---------------------------------------------------------


def test_enum_values_other_keywords_reject_are_never_generated(backend: GrammarBackend) -> None:
    # json-schema-faker/json-schema-faker#224: with "enum" present, every other constraint of the
    # node was ignored ({"type": "number", "enum": [1..8], "minimum": 3.5} gave 1, 2, 3). JSON
    # Schema applies all of a node's keywords: only the enum values the rest admits are valid.
    schema = {"type": "integer", "enum": [1, 2, 3, 4], "minimum": 3}
    assert _raw_xgrammar_accepts(schema, "1")  # what the grammar used to write
    _agrees_with_jsonschema(_grammar(backend, schema), schema, ["3", "4"], ["1", "2"])

    typed = {
        "type": "object",
        "$defs": {"Small": {"type": "integer", "maximum": 2}},
        "properties": {
            "label": {"type": "string", "enum": ["a", 1, "b", None]},
            "size": {"$ref": "#/$defs/Small", "enum": [1, 2, 3]},
        },
        "required": ["label", "size"],
        "additionalProperties": False,
    }
    valid = ['{"label": "a", "size": 1}', '{"label": "b", "size": 2}']
    invalid = ['{"label": 1, "size": 1}', '{"label": null, "size": 2}', '{"label": "a", "size": 3}']
    _agrees_with_jsonschema(_grammar(backend, typed), typed, valid, invalid)

    # a node whose values its other keywords all reject matches nothing: a 400 naming the node
    for bad, values, where in (
        ({"type": "integer", "const": "x"}, ["x", 1], "schema:"),
        (
            {"type": "object", "properties": {"c": {"type": "string", "enum": [1, 2]}}},
            [{"c": 1}, {"c": "1"}],
            "schema.properties.c:",
        ),
    ):
        assert not any(_validator(bad).is_valid(v) for v in values)
        msg = _refused(backend, bad)
        assert msg.startswith("json_schema:") and where in msg, msg
        assert ("'const'" in msg) or ("'enum'" in msg), msg


# --- oneOf --------------------------------------------------------------------------------------


def test_overlapping_one_of_is_a_400_not_an_any_of(backend: GrammarBackend) -> None:
    # mlc-ai/xgrammar#672: oneOf compiled as anyOf, so {"oneOf": [integer, number]} accepted 1,
    # which matches both branches and fails the schema. Where exclusivity cannot be proved the
    # schema is refused (fail closed), naming the node and the branches.
    schema = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert not _validator(schema).is_valid(1)  # 1 matches two branches: invalid
    assert _raw_xgrammar_accepts(schema, "1")  # ... yet the plain grammar writes it
    msg = _refused(backend, schema)
    assert msg.startswith("json_schema:") and "oneOf" in msg and "branches 0 and 1" in msg, msg
    nested = {
        "type": "object",
        "properties": {"v": {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "string"}]}},
    }
    assert "schema.properties.v.oneOf" in _refused(backend, nested)


def test_one_of_object_branches_that_can_both_match_are_refused(backend: GrammarBackend) -> None:
    # ohdearquant/lattice#1077: oneOf routed through the anyOf compiler, so a value satisfying
    # two branches was accepted. Object branches that differ only in what they require overlap
    # (an object holding both keys matches both).
    schema = {
        "type": "object",
        "properties": {"email": {"type": "string"}, "phone": {"type": "string"}},
        "oneOf": [{"required": ["email"]}, {"required": ["phone"]}],
    }
    assert not _validator(schema).is_valid({"email": "a", "phone": "b"})
    assert _raw_xgrammar_accepts(schema, '{"email": "a", "phone": "b"}')
    assert "oneOf" in _refused(backend, schema)


def test_disjoint_one_of_is_compiled_and_enforced(backend: GrammarBackend) -> None:
    # guidance-ai/llguidance#71 stopped reading oneOf as anyOf by default; the union is exact
    # (and kept) where no value matches two branches: a pydantic tagged union ($ref branches, a
    # required const discriminator), closed OpenAI-strict objects with different required keys,
    # branches of different types.
    cat = {
        "type": "object",
        "properties": {"pet": {"const": "cat"}, "lives": {"type": "integer"}},
        "required": ["pet", "lives"],
    }
    dog = {
        "type": "object",
        "properties": {"pet": {"const": "dog"}, "bark": {"type": "string"}},
        "required": ["pet", "bark"],
    }
    tagged = {"$defs": {"Cat": cat, "Dog": dog}, "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}
    _agrees_with_jsonschema(
        _grammar(backend, tagged),
        tagged,
        ['{"pet": "cat", "lives": 9}', '{"pet": "dog", "bark": "woof"}'],
        ['{"pet": "cat", "bark": "woof"}', '{"pet": "bird", "lives": 1}'],
    )
    closed = {
        "oneOf": [
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "required": ["a"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {"b": {"type": "integer"}},
                "required": ["b"],
                "additionalProperties": False,
            },
        ]
    }
    _agrees_with_jsonschema(
        _grammar(backend, closed), closed, ['{"a": 1}', '{"b": 2}'], ['{"a": 1, "b": 2}', "{}"]
    )
    typed = {"oneOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]}
    _agrees_with_jsonschema(_grammar(backend, typed), typed, ["1", '"x"', "null"], ["1.5", "true"])


# --- recursive schemas ----------------------------------------------------------------------------

#: schemas with no finite instance: every value must hold another one
NEVER_ENDING = [
    {"$ref": "#/$defs/n", "$defs": {"n": {"$ref": "#/$defs/n"}}},
    {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
    {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]},
    {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "minItems": 1}},
                "required": ["kids"],
            }
        },
        "$ref": "#/$defs/Node",
    },
]


def test_schema_with_no_finite_value_is_a_400_at_intake(sched: Any) -> None:
    # vllm-project/vllm#57725: a self-referential $ref passed validation and then killed the
    # request mid-generation, and malformed specifications came back as a 500 with an empty
    # message. Each is refused at intake with a 400 whose message names the field and the cause,
    # before any page is taken; the request beside them is served.
    malformed = ['{"type": "not-a-type"}', '{"type": "string", "pattern": "(unclosed"}', '{"type": ']
    specs = [json.dumps(s) for s in NEVER_ENDING] + malformed
    for i, spec in enumerate(specs):
        submit(sched, f"bad{i}", PROMPT, 16, ignore_eos=False, sampling={"json_schema": spec})
    submit(sched, "ok", PROMPT, 48, ignore_eos=False, sampling={"regex": "(yes|no)"})
    res = drain(sched)
    for i, spec in enumerate(specs):
        fin = res[f"bad{i}"]["finish"]
        assert fin["type"] == "abort" and fin["status_code"] == 400, (spec, fin)
        assert fin["message"].startswith("json_schema:") and len(fin["message"]) > 30, (spec, fin)
        assert not res[f"bad{i}"]["ids"], spec
    for i in range(len(NEVER_ENDING)):
        assert (
            "never end" in res[f"bad{i}"]["finish"]["message"]
            or "Circular" in res[f"bad{i}"]["finish"]["message"]
        )
    assert re.fullmatch("yes|no", sched.tokenizer.decode(res["ok"]["ids"], skip_special_tokens=True))
    assert_idle(sched)


def test_recursive_schemas_with_a_way_to_end_still_compile(backend: GrammarBackend) -> None:
    # vllm-project/vllm#57788 rejects only $ref cycles with no base case, "deliberately narrow"
    # so that real recursive schemas (trees, linked lists) keep working: each is enforced.
    tree = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["name", "kids"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/Node",
    }
    _agrees_with_jsonschema(
        _grammar(backend, tree),
        tree,
        ['{"name": "a", "kids": []}', '{"name": "a", "kids": [{"name": "b", "kids": []}]}'],
        ['{"name": "a"}', '{"name": "a", "kids": [{"name": "b"}]}'],
    )
    linked = {
        "type": "object",
        "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
        "required": ["v", "next"],
        "additionalProperties": False,
    }
    _agrees_with_jsonschema(
        _grammar(backend, linked),
        linked,
        ['{"v": 1, "next": null}', '{"v": 1, "next": {"v": 2, "next": null}}'],
        ['{"v": 1}', '{"v": 1, "next": {"v": 2}}'],
    )


def test_nullable_fields_take_json_null_not_the_string(backend: GrammarBackend) -> None:
    # tanchongmin/strictjson#11: an optional field came back as the string "null" where null was
    # meant. pydantic's Optional (anyOf with {"type": "null"}) and the type list ["string",
    # "null"] take the JSON literal null, which pydantic reads as None; the string "null" stays a
    # string, and a number is refused (pydantic's own validation is the oracle).
    from pydantic import BaseModel, ValidationError

    class Entity(BaseModel):
        name: str
        location: str | None
        age: int | None = None

    schema = Entity.model_json_schema()
    g = _grammar(backend, schema)
    for text, location in (
        ('{"name": "J", "location": null}', None),
        ('{"name": "J", "location": "null"}', "null"),
    ):
        assert _accepts(g, text), text
        assert Entity.model_validate_json(text).location == location
    for text in ('{"name": "J", "location": 5}', '{"name": "J"}'):
        with pytest.raises(ValidationError):
            Entity.model_validate_json(text)
        assert not _accepts(g, text), text
    listed = {"type": "object", "properties": {"v": {"type": ["integer", "null"]}}, "required": ["v"]}
    _agrees_with_jsonschema(
        _grammar(backend, listed), listed, ['{"v": null}', '{"v": 3}'], ['{"v": "null"}', "{}"]
    )


# --- the JSON text the grammar lets through -------------------------------------------------------

_NUMBER_SCHEMA = {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_numbers_are_rfc8259_numbers(backend: GrammarBackend) -> None:
    # kekzl/imp#1105: once a number started, '.', 'e', '+', '-' were admitted with no memory
    # ("3.5.5.5..." was legal and the model never left the number), and whitespace spliced digits
    # ("1.  1  1"). The grammar takes a number text exactly when Python's json reads it.
    g = _grammar(backend, _NUMBER_SCHEMA)
    for num in (
        "1.5",
        "-0",
        "1e5",
        "2E-3",
        "0.25",
        "1.5.5",
        "01",
        "-",
        "1.",
        ".5",
        "1e",
        "1 1",
        "+1",
        "--1",
        "1e+",
    ):
        text = '{"x": ' + num + "}"
        assert _accepts(g, text) == _is_json(text), text


def test_raw_control_characters_in_strings_are_refused(backend: GrammarBackend) -> None:
    # mlc-ai/xgrammar#286: a grammar compiled from a JSON schema accepted a raw tab inside a
    # string, which RFC 8259 forbids (U+0000-U+001F must be escaped); the escaped form is fine.
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    g = _grammar(backend, schema)
    for ch in ("\t", "\n", "\x00", "\x1f"):
        text = '{"text": "a' + ch + 'b"}'
        assert not _is_json(text) and not _accepts(g, text), repr(text)
    for text in ('{"text": "a\\tb"}', '{"text": "a\\u0000b"}', '{"text": "a\\nb"}'):
        assert _is_json(text) and _accepts(g, text), text


def test_invalid_string_escapes_are_refused(backend: GrammarBackend) -> None:
    # noamgat/lm-format-enforcer#41: the JSON-schema parser allowed the invalid escape \' (and
    # then stopped on it). Only JSON's escapes pass; the grammar agrees with Python's json.
    g = _grammar(
        backend, {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    )
    for esc in ("\\'", "\\x41", "\\a", "\\u12", "\\U0001F600", '\\"', "\\\\", "\\/", "\\b", "\\u00e9"):
        text = '{"answer": "I' + esc + 'm"}'
        assert _accepts(g, text) == _is_json(text), text


def test_punctuation_inside_string_values_does_not_end_the_answer(backend: GrammarBackend, eos: int) -> None:
    # openvinotoolkit/model_server#4439: with a JSON schema, a '#' inside a string value ended the
    # generation mid-string with finish_reason "stop". Any JSON string content (comment-like
    # '#' / '//', braces, quotes escaped, non-ASCII) is taken inside a value, and the end token is
    # not allowed until the document closes.
    schema = {
        "type": "object",
        "properties": {"note": {"type": "string"}},
        "required": ["note"],
        "additionalProperties": False,
    }
    g = _grammar(backend, schema)
    for value in (
        "#1",
        "a # b",
        "// c",
        "/* d */",
        "{x}",
        "[y]",
        'say \\"hi\\"',
        "caf\\u00e9 \u00e9 \u2014 \u201c\u201d",
        "<|end|>",
    ):
        text = '{"note": "' + value + '"}'
        assert _validator(schema).is_valid(json.loads(text)), text
        assert _accepts(g, text), text
        state = g.fresh_copy()  # cut right after the value's first character
        assert state.matcher.accept_string(text[:11]) and not state.allows(eos), text[:11]


# --- when the output may end ----------------------------------------------------------------------


def test_eos_is_allowed_only_once_the_document_is_complete(backend: GrammarBackend, eos: int) -> None:
    # kekzl/imp#1199: json_schema finished with "stop" while the document was still open (EOS was
    # not masked inside a string). At every prefix of a valid answer the end token is allowed
    # exactly when the text so far is a whole JSON document (Python's json).
    schema = {
        "type": "object",
        "properties": {"satz": {"type": "string"}, "n": {"type": "array", "items": {"type": "integer"}}},
        "required": ["satz", "n"],
    }
    g = _grammar(backend, schema)
    doc = '{"satz": "Die B\\u00e4ren }", "n": [1, 22]}'
    assert _validator(schema).is_valid(json.loads(doc))
    for k in range(1, len(doc) + 1):
        state = g.fresh_copy()
        assert state.matcher.accept_string(doc[:k]), doc[:k]
        assert state.allows(eos) == _is_json(doc[:k]), doc[:k]


def test_only_the_end_token_may_follow_the_closing_brace(backend: GrammarBackend, eos: int) -> None:
    # tetherto/qvac#3225: generation did not stop at the end of the constrained object; grammar-
    # legal tokens ran on until the context overflowed. Once the object closes, the end token is
    # the only one allowed, and after it none.
    schema = {
        "type": "object",
        "properties": {"bet": {"type": "integer"}},
        "required": ["bet"],
        "additionalProperties": False,
    }
    state = _grammar(backend, schema)
    assert state.matcher.accept_string('{"bet": 5}')
    allowed = state.allowed_next_tokens().nonzero().flatten().tolist()
    assert allowed == [eos], allowed
    assert state.accept(eos) and state.is_terminated() and not state.allows_any_token()


# --- grammars in the running batch ----------------------------------------------------------------

_COLOR = {
    "type": "object",
    "properties": {"c": {"enum": ["red", "blue"]}},
    "required": ["c"],
    "additionalProperties": False,
}
_DIGIT = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["n"],
    "additionalProperties": False,
}


def _text(sched: Any, r: dict[str, Any]) -> str:
    return sched.tokenizer.decode(r["ids"], skip_special_tokens=True)


def test_mixed_batch_keeps_each_request_on_its_own_grammar(sched: Any) -> None:
    # jundot/omlx#1823: a plain request decoding beside constrained ones misaligned the batch
    # rows; the json_schema answers came back as prose. Two schemas, a regex and a plain request
    # in one batch: each constrained answer satisfies its own schema / regex, and the plain one is
    # the text it writes alone (a cold run).
    solo = drain_one(sched, "solo", {})
    submit(sched, "plain", PROMPT, 8)
    submit(
        sched, "color", [11, 12, 13, 15], 64, ignore_eos=False, sampling={"json_schema": json.dumps(_COLOR)}
    )
    submit(
        sched, "digit", [11, 12, 13, 16], 64, ignore_eos=False, sampling={"json_schema": json.dumps(_DIGIT)}
    )
    submit(sched, "yn", [11, 12, 13, 17], 64, ignore_eos=False, sampling={"regex": "(yes|no)"})
    res = drain(sched)
    assert res["plain"]["ids"] == solo["ids"]
    for rid, schema in (("color", _COLOR), ("digit", _DIGIT)):
        assert res[rid]["finish"]["type"] == "stop", res[rid]
        jsonschema.validate(json.loads(_text(sched, res[rid])), schema)
    assert re.fullmatch("yes|no", _text(sched, res["yn"]))
    assert_idle(sched)


def drain_one(sched: Any, rid: str, sampling: dict[str, Any], n: int = 8) -> dict[str, Any]:
    """One request run alone (a cold run to compare with)."""
    submit(sched, rid, PROMPT, n, sampling=sampling)
    return drain(sched)[rid]


def test_answer_cut_by_max_tokens_finishes_length_and_is_a_prefix(sched: Any) -> None:
    # mastra-ai/mastra#24442: a structured answer the token limit truncated was handed on as if
    # complete. The server's side: the cut answer finishes "length" (never "stop"), is not claimed
    # to be JSON, and is a prefix of a text the schema's grammar (xgrammar's own, built here)
    # accepts.
    submit(sched, "cut", PROMPT, 3, ignore_eos=False, sampling={"json_schema": json.dumps(_COLOR)})
    r = drain(sched)["cut"]
    assert r["finish"] == {"type": "length", "length": 3}, r
    text = _text(sched, r)
    assert not _is_json(text), text
    matcher = xgr.GrammarMatcher(
        xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_json_schema(json.dumps(_COLOR))
    )
    assert matcher.accept_string(text) and not matcher.is_completed(), text


def test_schema_that_fails_to_compile_after_a_valid_one_fails_only_itself(sched: Any) -> None:
    # vllm-project/vllm#43920 (fixed by #44401): a grammar the backend rejected at compile time,
    # arriving after a valid one had been compiled, escaped the scheduler loop and killed every
    # in-flight request. The bad request alone gets a 400; the running one finishes valid.
    submit(sched, "valid", PROMPT, 64, ignore_eos=False, sampling={"json_schema": json.dumps(_DIGIT)})
    sched.step()
    bad = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}}
    submit(sched, "bad", PROMPT, 16, ignore_eos=False, sampling={"json_schema": json.dumps(bad)})
    res = drain(sched)
    assert res["bad"]["finish"]["type"] == "abort" and res["bad"]["finish"]["status_code"] == 400
    assert res["bad"]["finish"]["message"].startswith("json_schema:")
    assert res["valid"]["finish"]["type"] == "stop"
    jsonschema.validate(json.loads(_text(sched, res["valid"])), _DIGIT)
    assert_idle(sched)


def test_cached_schema_starts_every_request_from_a_fresh_state(sched: Any) -> None:
    # sgl-project/sglang#27017: with the schema's grammar cached, the next request inherited the
    # last state of the previous one. The same schema twice in a row, then twice in one batch (as
    # n > 1 sends it): each answer equals the first, cold one, and satisfies the schema.
    body = {"json_schema": json.dumps(_COLOR)}
    submit(sched, "cold", PROMPT, 64, ignore_eos=False, sampling=body)
    cold = drain(sched)["cold"]
    jsonschema.validate(json.loads(_text(sched, cold)), _COLOR)
    submit(sched, "again", PROMPT, 64, ignore_eos=False, sampling=body)
    assert drain(sched)["again"]["ids"] == cold["ids"]
    submit(sched, "n0", PROMPT, 64, ignore_eos=False, sampling=body)
    submit(sched, "n1", PROMPT, 64, ignore_eos=False, sampling=body)
    res = drain(sched)
    assert res["n0"]["ids"] == cold["ids"] and res["n1"]["ids"] == cold["ids"]
    assert_idle(sched)

"""A third twenty-first set of public reports in constrained decoding: older-draft tuple arrays,
JSON escapes under ``pattern`` / ``minLength`` / ``maxLength``, integer spellings, and a
request's stop tokens and ``min_tokens`` against its grammar.

Faults found here and fixed:

* a Draft 4 - 2019-09 tuple array (``"items": [...]``, ``additionalItems``) was refused ("items
  must be a boolean or an object"; mlc-ai/xgrammar#840): it is now read in its 2020-12 form
  (``sampling/json_schema_tuple.py``);
* a length-bounded string could hold no escape (``"\\n\\n"`` for ``maxLength: 2``) and took raw
  control characters, which is not JSON (mlc-ai/xgrammar#800, mlc-ai/xgrammar#828): the bounds are
  now a regex over the JSON text counting decoded characters (``sampling/json_schema_length.py``);
* a ``pattern`` that matches ``"``, ``\\`` or a control character could not write them escaped,
  and one that only matches them wrote them raw (guidance-ai/guidance#1008 quotes such a regex
  over the JSON text): the pattern is rewritten over the JSON text
  (``sampling/json_schema_pattern_text.py``);
* a request's own ``stop_token_ids`` were ordinary tokens to its grammar, so one could end the
  output in the middle of a JSON value (vllm-project/vllm#42403): they are now stop tokens of the
  grammar, masked until the value is complete (``sampling/grammar.py``).

Reports that showed no fault here (regression guards): only canonical integers for ``integer``
(python-jsonschema/hypothesis-jsonschema#60), ``min_tokens`` against a complete grammar
(vllm-project/vllm#53665), a grammar request with ``ignore_eos`` ending at its grammar's end
(vllm-project/vllm#42619).

Oracles: the ``jsonschema`` package's validators (Draft 7 for the tuple arrays, Draft 4 and
2020-12 for integers) on the decoded JSON, Python's ``json`` parser (strict: raw control
characters are refused), xgrammar's own compiler and matcher used without the code under test.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

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
from sglang_v4.sampling.sampler import sample  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def tokenizer_json() -> str:
    return tokenizer_json_path()


@pytest.fixture(scope="module")
def tok(tokenizer_json: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=tokenizer_json)


@pytest.fixture(scope="module")
def backend(tokenizer_json: str) -> GrammarBackend:
    return GrammarBackend.from_tokenizer_file(tokenizer_json, VOCAB, [EOS])


def _json(text: str) -> tuple[bool, Any]:
    """``(parses, value)`` under Python's strict JSON parser (RFC 8259)."""
    try:
        return True, json.loads(text)
    except json.JSONDecodeError:
        return False, None


# --------------------------------------------------------------------------- tuple arrays

DRAFT7 = "http://json-schema.org/draft-07/schema#"
TUPLES = [
    # (schema, texts): each text's acceptance must equal Draft 7's verdict on it
    (
        {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]},
        ["[]", "[1]", '[1, "a"]', '[1, "a", true]', '["a"]', "[1, 2]"],
    ),
    (
        {"$schema": DRAFT7, "type": "array", "items": [{"type": "integer"}], "additionalItems": False},
        ["[1]", "[1, 2]", '["x"]'],
    ),
    (
        {"type": "array", "items": [{"type": "integer"}], "additionalItems": {"type": "string"}},
        ['[1, "x"]', '[1, "x", "y"]', "[1, 2]"],
    ),
    (  # pydantic v1's Tuple[int, str] field
        {
            "title": "M",
            "type": "object",
            "properties": {
                "pair": {
                    "type": "array",
                    "items": [{"type": "integer"}, {"type": "string"}],
                    "minItems": 2,
                    "maxItems": 2,
                }
            },
            "required": ["pair"],
        },
        ['{"pair": [1, "a"]}', '{"pair": [1]}', '{"pair": ["a", 1]}', '{"pair": [1, "a", "b"]}'],
    ),
]


@pytest.mark.parametrize(("schema", "texts"), TUPLES)
def test_draft7_tuple_items_are_compiled_as_the_validator_reads_them(
    backend: GrammarBackend, schema: Any, texts: list[str]
) -> None:
    # mlc-ai/xgrammar#840: the positional `items` list of Draft 4-7 (and `additionalItems`) was
    # refused with "items must be a boolean or an object"; older pydantic emits it.
    jsonschema.Draft7Validator.check_schema(schema)
    g = schema_grammar(backend, schema)
    v = jsonschema.Draft7Validator(schema)
    for text in texts:
        assert accepts(g, text) == v.is_valid(json.loads(text)), text


def test_tuple_items_under_draft_2020_12_stay_malformed(backend: GrammarBackend) -> None:
    # mlc-ai/xgrammar#840: the rewrite applies to the drafts that define the list form; a schema
    # that names Draft 2020-12 with a list `items` is malformed there (the meta-schema says so)
    # and is a 400 naming `items`.
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "array",
        "items": [{"type": "integer"}],
    }
    with pytest.raises(jsonschema.SchemaError):
        jsonschema.Draft202012Validator.check_schema(schema)
    with pytest.raises(ValueError, match="items"):
        schema_grammar(backend, schema)


# --------------------------------------------------------------------------- lengths

LENGTHS = [
    ({"type": "string", "maxLength": 2}, ['"\\n\\n"', '"\\"\\\\"', '"\\u00e9\\u00e9"', '"ab"', '"abc"']),
    ({"type": "string", "minLength": 2}, ['"\\n"', '"\\n\\t"', '"a\\""', '"\\ud83d\\ude00"']),
    ({"type": ["string", "null"], "maxLength": 1}, ['"\\n"', "null", '"ab"']),
    (
        {"type": "object", "properties": {"s": {"type": "string", "minLength": 1, "maxLength": 3}}},
        ['{"s": "a\\nb"}', '{"s": "\\"\\"\\"\\""}', '{"s": ""}'],
    ),
]


@pytest.mark.parametrize(("schema", "texts"), LENGTHS)
def test_length_bounds_count_decoded_characters_and_allow_escapes(
    backend: GrammarBackend, schema: Any, texts: list[str]
) -> None:
    # mlc-ai/xgrammar#800: under minLength / maxLength no JSON escape could be written
    # ("\n\n" refused for maxLength 2). A text the grammar takes must be valid (a surrogate pair
    # escape may be left out: narrower), and every other text is judged as the validator does.
    g = schema_grammar(backend, schema)
    v = jsonschema.Draft202012Validator(schema)
    for text in texts:
        valid = v.is_valid(json.loads(text))
        if "\\ud83d" in text:
            assert not accepts(g, text) or valid, text
        else:
            assert accepts(g, text) == valid, text
    if schema.get("maxLength") == 2:
        assert not raw_schema_accepts(schema, texts[0])  # what the raw grammar did


@pytest.mark.parametrize("schema", [{"type": "string", "maxLength": 3}, {"type": "string", "minLength": 1}])
def test_length_bounded_string_takes_no_raw_control_character(backend: GrammarBackend, schema: Any) -> None:
    # mlc-ai/xgrammar#828: the length-bounded class admitted U+0000-U+001F unescaped, which RFC
    # 8259 forbids: the text is not JSON (Python's strict parser refuses it).
    g = schema_grammar(backend, schema)
    for raw in ('"a\tb"', '"\x01"', '"\x1f"'):
        assert not _json(raw)[0]
        assert not accepts(g, raw), repr(raw)
    assert accepts(g, '"a\\tb"')


# --------------------------------------------------------------------------- patterns

PATTERNS = [
    # (pattern, texts): acceptance equals the validator's verdict on each text
    ('^[a"]$', ['"a"', '"\\""', '"\\u0022"', '"b"']),
    ("^[a\\\\]$", ['"a"', '"\\\\"', '"b"']),
    ("^\\n$", ['"\\n"', '"\\u000a"', '"n"']),
    ('^"$', ['"\\""', '"a"']),
    ("^\\S+$", ['"a\\"b"', '"\\\\"', '"ab"', '"a b"', '"a\\tb"']),
    ("^[^a]$", ['"\\""', '"\\n"', '"b"', '"a"']),
    ("^[ -~]+$", ['"a\\"b"', '"a\\\\b"', '"a\\nb"']),
    ('^(a|")+$', ['"a\\"a"', '"aa"', '"ab"']),
    ("cat", ['"concatenate"', '"c\\"cat\\n"', '"dog"']),
    ("^[a-z]+$", ['"abc"', '"a\\"b"']),
]


@pytest.mark.parametrize(("pattern", "texts"), PATTERNS)
def test_pattern_allowing_quote_backslash_or_newline_writes_them_escaped(
    backend: GrammarBackend, pattern: str, texts: list[str]
) -> None:
    # guidance-ai/guidance#1008: a pattern applies to the decoded string, so /[a-z"]+/ must be
    # read over the JSON text as ([a-z]|\")+. xgrammar wrote no escape (`^[a"]$` refused the
    # string `"`) and, for a pattern only a raw character could match (`^\n$`), wrote it raw.
    schema = {"type": "string", "pattern": pattern}
    g = schema_grammar(backend, schema)
    v = jsonschema.Draft202012Validator(schema)
    for text in texts:
        assert accepts(g, text) == v.is_valid(json.loads(text)), text
    if pattern == "^\\n$":
        assert raw_schema_accepts(schema, '"\n"') and not _json('"\n"')[0]  # raw grammar: not JSON


# --------------------------------------------------------------------------- integers


def _generate(backend: GrammarBackend, sp: SamplingParams, favour: list[int], seed: int) -> list[int]:
    """Sampled ids of ``sp``'s grammar under random logits that push ``favour`` (+40) and EOS."""
    g = backend.create(sp)
    assert g is not None
    rng = torch.Generator().manual_seed(seed)
    # the sampler's own draws seeded too, so the run does not depend on the tests run before it
    # in this process (the global RNG)
    draws = [torch.Generator().manual_seed(10_000 + seed)]
    out: list[int] = []
    for _ in range(60):
        logits = torch.randn(1, VOCAB, generator=rng) * 4.0
        logits[0, favour] += 40.0
        logits[0, EOS] += 8.0 + len(out)
        t = int(sample(logits, [sp], [out], None, draws, eos_token_ids={EOS}, grammars=[g]).item())
        assert g.accept(t), t
        out.append(t)
        if g.is_terminated():
            return out
    raise AssertionError("the grammar did not end")


def test_integer_answers_are_integers_under_every_draft(tok: Any, backend: GrammarBackend) -> None:
    # python-jsonschema/hypothesis-jsonschema#60: 1.0 is an integer from Draft 6 on, not in
    # Draft 4; a generator keeps to canonical integers to be valid under both. The grammar takes
    # no fraction or exponent, and sampled answers (tokens "." "e" "E" "+" "0" pushed) validate.
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    g = schema_grammar(backend, schema)
    for text in ('{"n": 1.0}', '{"n": 1e2}', '{"n": 10.5}'):
        assert not accepts(g, text), text
    assert accepts(g, '{"n": -12}')
    vocab = tok.get_vocab()
    favour = [vocab[s] for s in (".", "e", "E", "+", "0") if s in vocab]
    assert len(favour) == 5
    sp = SamplingParams(json_schema=json.dumps(schema), temperature=1.0)
    sp.verify(VOCAB, allow_grammar=True)
    for seed in range(3):
        ids = _generate(backend, sp, favour, seed)
        ok, value = _json(tok.decode(ids[:-1]))
        assert ok, tok.decode(ids)
        assert jsonschema.Draft4Validator(schema).is_valid(value), value
        assert jsonschema.Draft202012Validator(schema).is_valid(value), value


# --------------------------------------------------------------------------- stop tokens


def test_request_stop_token_ids_wait_for_the_grammar_to_complete(tok: Any, backend: GrammarBackend) -> None:
    # vllm-project/vllm#42403: a request's stop token (beyond the tokenizer's EOS) escaped the
    # grammar's mask mid-object, so sampling it cut the JSON short. As a stop token of the
    # grammar it is masked until the value is complete, then allowed and ends the grammar.
    a = tok.encode("a", add_special_tokens=False)
    quote = tok.encode('"', add_special_tokens=False)
    assert len(a) == 1 and len(quote) == 1
    g = schema_grammar(backend, {"type": "string"}, stop_token_ids=[a[0]])
    assert not g.allows(a[0])
    assert g.accept(quote[0])
    assert not g.allows(a[0])  # inside the string: the stop token is not the letter here
    assert g.accept(tok.encode("b", add_special_tokens=False)[0]) and g.accept(quote[0])
    assert g.allows(a[0]) and g.allows(EOS)  # the value is complete: either stop token ends it
    assert g.accept(a[0]) and g.is_terminated()
    plain = schema_grammar(backend, {"type": "string"})
    assert plain.accept(quote[0]) and plain.allows(a[0])  # without stop_token_ids: a letter


def test_min_tokens_never_forces_a_token_outside_a_complete_grammar(
    tok: Any, backend: GrammarBackend
) -> None:
    # vllm-project/vllm#53665: {"type": "boolean"} with min_tokens 64: once the value is written
    # only EOS is allowed, min_tokens masks it, and the empty row gave token 0 (HTTP 500).
    sp = SamplingParams(json_schema=json.dumps({"type": "boolean"}), min_new_tokens=64, temperature=0)
    sp.verify(VOCAB, allow_grammar=True)
    g = backend.create(sp)
    true = tok.encode("true", add_special_tokens=False)
    for t in true:
        assert g.accept(t)
    logits = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(3))
    t = int(sample(logits, [sp], [true], None, None, eos_token_ids={EOS}, grammars=[g]).item())
    assert g.allows(t) and g.accept(t) and g.is_terminated(), t


def test_grammar_request_with_ignore_eos_ends_at_the_grammar_end(sched_model_dir: str) -> None:
    # vllm-project/vllm#42619: a terminated matcher was advanced again on the next step (strict
    # JSON with ignore_eos gave an HTTP 500). Here the request finishes when its grammar ends,
    # and the text is the JSON value its schema asks for.
    from scheduler_testutil import drain, make_scheduler, submit

    s = make_scheduler(sched_model_dir)
    if not s.grammar_enabled:
        pytest.skip("no grammar backend")
    schema = {"type": "boolean"}
    submit(s, "b", [11, 12, 13, 14], 20, ignore_eos=True, sampling={"json_schema": json.dumps(schema)})
    r = drain(s)["b"]
    assert r["finish"]["type"] == "stop", r["finish"]
    text = s.tokenizer.decode(r["ids"], skip_special_tokens=True)
    ok, value = _json(text)
    assert ok and jsonschema.Draft202012Validator(schema).is_valid(value), text
    assert len(r["ids"]) < 20

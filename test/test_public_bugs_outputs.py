"""Public bug reports on structured outputs, logprobs, streaming usage and sampling fields,
replayed against sglang-v4 (the faults found; the reports that did not reproduce are covered by
the modules of their area).

* JSON schemas that xgrammar compiles to a grammar contradicting JSON Schema (mlc-ai/xgrammar#104:
  an object with ``required`` but no ``properties`` only accepted ``{}``; a ``required`` name
  missing from ``properties`` was dropped), malformed schemas (``anyOf: []`` answered ``""``), and
  a ``structural_tag``'s JSON without the whitespace bound. Oracle: the ``jsonschema`` validator's
  verdict on each text (and on the schema), against xgrammar's matchers over every grammar the
  server builds from a schema (``json_schema`` / ``response_format``, the answer after reasoning,
  ``structural_tag`` in both of SGLang's forms, tool-call arguments).
* An assistant prefill continued under an answer grammar, and ``response_format``
  ``structural_tag`` in thinking mode: the grammar restarted after the prefill / applied inside
  the reasoning. Oracle: ``json.loads`` + ``jsonschema`` on prefill + continuation; the tag's
  definition.
* Legacy completions ``top_logprobs`` whose candidates share a text (SGLang #32290), and a
  ``token_ids_logprob`` batch with ``null`` for a prompt (SGLang #30188). Oracle: the engine's own
  candidate list; the fake model's logprob formula.

The ``slow`` tests replay the reports end to end on a real server (embedded model, CPU).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")

from sglang_v4.sampling.grammar import (  # noqa: E402
    MAX_JSON_WHITESPACE,
    GrammarBackend,
    after_reasoning_structural_tag,
    tool_call_structural_tag,
)
from xgrammar.testing import _is_grammar_accept_string  # noqa: E402

VOCAB = 129280
EOS = 1
DSML = "｜DSML｜"


@pytest.fixture(scope="module")
def backend(tok: Any) -> GrammarBackend:
    return GrammarBackend(tok, VOCAB, [EOS])


def _accepts(compiled: Any, text: str) -> bool:
    m = xgr.GrammarMatcher(compiled)
    return bool(m.accept_string(text)) and bool(m.accept_token(EOS))


#: (schema, texts): schemas whose ``required`` names ``properties`` does not declare, or whose
#: object node has no ``properties`` but other keywords.
_REQUIRED_CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({"type": "object", "required": ["a"]}, ['{"a":1}', "{}", '{"a":1,"b":[2]}', '{"b":2}']),
    (
        {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["b"]},
        ['{"b":1}', '{"x":1}', '{"x":1,"b":"s"}', "{}"],
    ),
    (
        {"type": "object", "additionalProperties": {"type": "integer"}, "required": ["a"]},
        ['{"a":1}', '{"a":"s"}', "{}"],
    ),
    ({"type": ["object", "null"], "required": ["a"]}, ['{"a":1}', "null", "{}"]),
    ({"type": "object", "maxProperties": 1}, ['{"a":1}', '{"a":1,"b":2}', "{}"]),
    (
        {"anyOf": [{"type": "object", "required": ["a"]}, {"type": "string"}]},
        ['{"a":1}', "{}", '"s"'],
    ),
    (
        {
            "$defs": {"Item": {"type": "object", "required": ["q"], "description": "an item"}},
            "type": "array",
            "items": {"$ref": "#/$defs/Item"},
        },
        ['[{"q":1}]', "[{}]", '[{"q":1},{"q":[]}]'],
    ),
    (
        {"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "required": ["xa"]},
        ['{"xa":1}', '{"xa":"s"}', "{}"],
    ),
    (  # "at least one of": the branches keep the object's property types
        {
            "type": "object",
            "properties": {"email": {"type": "string"}, "phone": {"type": "string"}},
            "anyOf": [{"required": ["email"]}, {"required": ["phone"]}],
        },
        ['{"email":"a"}', '{"phone":"1"}', "{}", '{"email":1}', '{"email":"a","phone":"1"}'],
    ),
    (  # a branch no object satisfies is dropped, the others stay
        {
            "anyOf": [
                {"type": "object", "properties": {}, "additionalProperties": False, "required": ["x"]},
                {"type": "string"},
            ]
        },
        ['"s"', "{}", '{"x":1}'],
    ),
]


@pytest.mark.parametrize(
    "schema,texts", _REQUIRED_CASES, ids=[json.dumps(c[0])[:50] for c in _REQUIRED_CASES]
)
def test_json_schema_grammars_follow_required(
    backend: GrammarBackend, schema: dict, texts: list[str]
) -> None:
    """Every grammar built from a schema accepts a text exactly when ``jsonschema`` validates it
    (xgrammar alone accepted ``{}`` for ``{"type": "object", "required": ["a"]}``)."""
    expected = [jsonschema.Draft202012Validator(schema).is_valid(json.loads(t)) for t in texts]
    assert any(expected) and not all(expected)  # the case tells grammars apart
    spec = json.dumps(schema)

    compiled = backend._compile("json_schema", spec)
    assert [_accepts(compiled, t) for t in texts] == expected

    g = xgr.Grammar.from_structural_tag(after_reasoning_structural_tag("json_schema", spec))
    assert [_is_grammar_accept_string(g, "hm</think>" + t) for t in texts] == expected

    tag = {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": schema}}
    compiled = backend._compile("structural_tag", json.dumps(tag))
    assert [_accepts(compiled, t) for t in texts] == expected

    legacy = {"type": "structural_tag", "structures": [{"begin": "<f>", "schema": schema, "end": "</f>"}]}
    legacy["triggers"] = ["<f>"]
    compiled = backend._compile("structural_tag", json.dumps(legacy))
    assert [_accepts(compiled, f"<f>{t}</f>") for t in texts] == expected


def test_tool_arguments_follow_required() -> None:
    """A tool whose ``required`` names a parameter ``properties`` does not declare: the call must
    carry it (xgrammar's DSML grammar dropped it); a bare ``{"type": "object"}`` takes any."""

    def call(params: list[tuple[str, str, str]]) -> str:
        body = "\n".join(
            f'<{DSML}parameter name="{k}" string="{s}">{v}</{DSML}parameter>' for k, s, v in params
        )
        return (
            f'\n\n<{DSML}tool_calls>\n<{DSML}invoke name="f">\n{body}\n</{DSML}invoke>\n</{DSML}tool_calls>'
        )

    calls = [
        [],
        [("city", "true", "Paris")],
        [("x", "false", "1"), ("y", "true", "s")],
        [("x", "false", "1")],
    ]
    as_json = [{}, {"city": "Paris"}, {"x": 1, "y": "s"}, {"x": 1}]
    for params in (
        {"type": "object"},
        {"type": "object", "required": ["city"]},
        {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x", "y"]},
    ):
        tools = [{"type": "function", "function": {"name": "f", "parameters": params}}]
        tag = tool_call_structural_tag(
            tools, "required", thinking=False, parallel_tool_calls=False, enforce_schema=True
        )
        g = xgr.Grammar.from_structural_tag(tag)
        expected = [jsonschema.Draft202012Validator(params).is_valid(a) for a in as_json]
        assert [_is_grammar_accept_string(g, call(c)) for c in calls] == expected, params


def test_unsatisfiable_required_is_a_clear_error(backend: GrammarBackend) -> None:
    """``required`` naming a key that ``"additionalProperties": false`` forbids: no object
    satisfies the schema (``jsonschema`` rejects every candidate), so the grammar is refused with
    the property named, on every path (xgrammar compiled it and produced schema-invalid output)."""
    schema = {"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": False}
    v = jsonschema.Draft202012Validator(schema)
    assert not any(v.is_valid(x) for x in ({}, {"a": 1}, {"b": 1}, {"a": 1, "b": 1}))
    with pytest.raises(ValueError, match=r"json_schema: invalid grammar: .*'b'.*additionalProperties"):
        backend._compile("json_schema", json.dumps(schema))
    with pytest.raises(ValueError, match=r"'b'"):
        after_reasoning_structural_tag("json_schema", json.dumps(schema))
    with pytest.raises(ValueError, match=r"structural_tag: invalid grammar: .*'b'"):
        tag = {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": schema}}
        backend._compile("structural_tag", json.dumps(tag))
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    with pytest.raises(ValueError, match=r"^tools: .*f\.parameters.*'b'"):
        tool_call_structural_tag(
            tools, "required", thinking=False, parallel_tool_calls=False, enforce_schema=True
        )


def test_structural_tag_json_has_the_whitespace_bound(backend: GrammarBackend) -> None:
    """A ``structural_tag`` with a JSON-schema format had no whitespace bound (the model spent its
    budget on whitespace, as an unbounded ``json_schema`` did before its bound): its grammar now
    accepts the same whitespace runs as the ``json_schema`` grammar of the same schema."""
    schema = {"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"]}
    texts = ["{" + " " * n + '"k":1}' for n in (0, MAX_JSON_WHITESPACE, MAX_JSON_WHITESPACE + 1, 200)]
    reference = backend._compile("json_schema", json.dumps(schema))
    expected = [_accepts(reference, t) for t in texts]
    assert expected == [True, True, False, False]
    tag = {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": schema}}
    compiled = backend._compile("structural_tag", json.dumps(tag))
    assert [_accepts(compiled, t) for t in texts] == expected
    legacy = {
        "type": "structural_tag",
        "structures": [{"begin": "<f>", "schema": schema, "end": "</f>"}],
        "triggers": ["<f>"],
    }
    compiled = backend._compile("structural_tag", json.dumps(legacy))
    assert [_accepts(compiled, f"<f>{t}</f>") for t in texts] == expected


#: Schemas the JSON Schema specification (Draft 2020-12 meta-schema) calls malformed, the keyword
#: path at fault: xgrammar compiled the first ones (``{"anyOf": []}`` to a grammar whose only
#: text is empty, so the "JSON" answer was ``""``) and reported the last ones as a C++
#: type-check failure that names no keyword.
_MALFORMED = [
    ({"anyOf": []}, "anyOf"),
    ({"type": "object", "properties": {"a": {"oneOf": []}}}, "properties/a/oneOf"),
    ({"type": ["string", "string"]}, "type"),
    ({"$defs": []}, "$defs"),
    ({"type": "string", "pattern": 5}, "pattern"),
    ({"type": "object", "properties": {"a": {}}, "required": [1]}, "required/0"),
]


@pytest.mark.parametrize("schema,where", _MALFORMED, ids=[w for _, w in _MALFORMED])
def test_malformed_schema_is_refused_naming_the_keyword(
    backend: GrammarBackend, schema: dict, where: str
) -> None:
    """A malformed ``json_schema`` / ``response_format`` schema is refused (a 400 on the routes)
    with the keyword's path, with reasoning on and off."""
    with pytest.raises(jsonschema.SchemaError):
        jsonschema.Draft202012Validator.check_schema(schema)
    want = rf"json_schema: invalid grammar: invalid JSON schema at '{re.escape(where)}'"
    with pytest.raises(ValueError, match=want):
        backend._compile("json_schema", json.dumps(schema))
    with pytest.raises(ValueError, match=want):
        after_reasoning_structural_tag("json_schema", json.dumps(schema))


_WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Tokyo"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}


def test_grammar_reads_the_continued_text_first(backend: GrammarBackend) -> None:
    """An assistant prefill continued under ``response_format`` (``continue_final_message`` /
    DeepSeek's ``prefix``): the answer is the prefill + the output, so the grammar starts after the
    prefill (it restarted, and ``{"city": "Paris", "days": `` was continued with a whole new
    object). Oracle: ``json.loads`` + ``jsonschema`` on prefill + continuation, against the matcher
    of the grammar built with ``grammar_prefix``, before and after a ``reset`` (retraction)."""
    from sglang_v4.sampling.sampling_params import SamplingParams

    prefix = '{"city": "Paris", "days": '
    continuations = ["5}", " 7 }", '{"city": "Paris", "days": 5}', "9}", '5, "x": 1}']

    def valid(text: str) -> bool:
        try:
            return jsonschema.Draft202012Validator(_WEATHER).is_valid(json.loads(text))
        except json.JSONDecodeError:
            return False

    expected = [valid(prefix + c) for c in continuations]
    assert expected == [True, True, False, False, False]
    sp = SamplingParams(json_schema=json.dumps(_WEATHER), grammar_prefix=prefix)
    sp.verify(allow_grammar=True)
    for reset in (False, True):
        got = []
        for c in continuations:
            g = backend.create(sp)
            assert g is not None
            if reset:
                assert g.matcher.accept_string("5")
                g.reset()
            got.append(bool(g.matcher.accept_string(c)) and bool(g.matcher.accept_token(EOS)))
        assert got == expected

    bad = SamplingParams(json_schema=json.dumps(_WEATHER), grammar_prefix='["no')
    with pytest.raises(ValueError, match=r"json_schema: the continued text .* does not match the grammar"):
        backend.create(bad)
    with pytest.raises(ValueError, match="grammar_prefix needs one of"):
        SamplingParams(grammar_prefix="x").verify(allow_grammar=True)
    with pytest.raises(ValueError, match="grammar_prefix must be a string"):
        SamplingParams(regex="a", grammar_prefix=5).verify(allow_grammar=True)  # type: ignore[arg-type]


def test_structural_tag_answer_follows_the_reasoning(backend: GrammarBackend) -> None:
    """SGLang's ``response_format: {"type": "structural_tag"}`` in thinking mode: as every answer
    grammar (SGLang's reasoner grammar), the tag applies after ``</think>`` (it applied from the
    first token, so the model wrote the format as its reasoning and could never close it). Both of
    SGLang's forms; oracle: the tag's own definition (the constant text; the triggered JSON
    object's schema checked by ``jsonschema``)."""
    const = {"type": "structural_tag", "format": {"type": "const_string", "value": "hello"}}
    g = xgr.Grammar.from_structural_tag(after_reasoning_structural_tag("structural_tag", json.dumps(const)))
    cases = {
        "I think.</think>hello": True,
        "</think>hello": True,
        "hello": False,
        "I think.</think>bye": False,
    }
    assert {t: _is_grammar_accept_string(g, t) for t in cases} == cases

    inner = {"type": "object", "required": ["k"], "additionalProperties": {"type": "integer"}}
    legacy = {
        "type": "structural_tag",
        "structures": [{"begin": "<f>", "schema": inner, "end": "</f>"}],
        "triggers": ["<f>"],
    }
    tag = after_reasoning_structural_tag("structural_tag", json.dumps(legacy))
    compiled = backend._compile("structural_tag", tag)
    for obj in ({"k": 1}, {}, {"k": "s"}):
        text = "hm <f> in the reasoning is free</think>Sure: <f>" + json.dumps(obj) + "</f>"
        assert _accepts(compiled, text) == jsonschema.Draft202012Validator(inner).is_valid(obj), obj
    with pytest.raises(ValueError, match="structural_tag"):
        after_reasoning_structural_tag("structural_tag", '{"type": "structural_tag"}')


def test_completion_top_logprobs_keep_the_best_of_colliding_texts() -> None:
    """SGLang #32290: legacy completions key ``top_logprobs`` by token text, and byte-fragment
    tokens all decode to U+FFFD; the dict kept the last (lowest-ranked) candidate's logprob, so
    the sampled token's entry disagreed with its own ``token_logprobs`` value. Oracle: the
    engine's candidate list (the best logprob per text, read directly)."""
    from types import SimpleNamespace

    from sglang_v4.entrypoints.openai.serving_completions import CompletionsMixin, _ChoiceLogprobs

    cands = [(-0.006, 100, "\ufffd"), (-5.1, 101, "\ufffd"), (-10.4, 102, "\ufffd"), (-24.9, 7, "ab")]
    meta = {"output_token_logprobs": [(-0.006, 100, "\ufffd")], "output_top_logprobs": [cands]}
    serving = CompletionsMixin.__new__(CompletionsMixin)  # no tokenizer: the engine's token texts
    serving.tm = SimpleNamespace(tokenizer=None)
    lp = serving._completion_logprobs(meta, _ChoiceLogprobs(output=None), "\ufffd", True)
    best: dict[str, float] = {}
    for logprob, _, text in cands:
        best[text] = max(best.get(text, float("-inf")), logprob)
    assert lp.top_logprobs == [best]
    assert lp.top_logprobs[0][lp.tokens[0]] == lp.token_logprobs[0]


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The real server on the embedded default model (CPU), for the end-to-end replays."""
    import os

    from server_fixture import start_server

    log = tmp_path_factory.mktemp("public_bugs_outputs") / "server.log"
    h = start_server(["--device", "cpu", "--served-model-name", "m"], dict(os.environ), log, timeout_s=240)
    yield h
    h.stop()


@pytest.mark.slow
def test_replayed_schema_reports_end_to_end(real_server: Any) -> None:
    """The replayed reports through the routes of a real server: ``response_format`` answers with
    a ``required`` key outside ``properties`` validate (``json.loads`` + ``jsonschema``), for every
    choice of ``n = 2`` and after the reasoning; malformed and unsatisfiable schemas are a 400
    naming ``response_format`` with thinking on and off, and ``json_schema`` on ``/generate``;
    the server serves on."""
    import requests

    url = real_server.url
    msgs = [{"role": "user", "content": "Give me a name."}]
    digit = {"type": "integer", "minimum": 0, "maximum": 9}
    schema = {"type": "object", "required": ["name"], "additionalProperties": digit, "maxProperties": 1}
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}
    think_end = 128822  # "</think>": a bias that makes the tiny model close its reasoning at once
    for extra in (
        {"n": 2, "temperature": 1.0, "seed": 5},
        {"chat_template_kwargs": {"thinking": True}, "logit_bias": {str(think_end): 100}},
    ):
        body = {"model": "m", "messages": msgs, "max_tokens": 200, "response_format": rf, **extra}
        r = requests.post(url + "/v1/chat/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        for choice in r.json()["choices"]:
            assert choice["finish_reason"] == "stop", choice
            jsonschema.validate(json.loads(choice["message"]["content"]), schema)

    bad = [
        ({"anyOf": []}, "'anyOf'"),
        (
            {"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": False},
            "'b'",
        ),
    ]
    for bad_schema, named in bad:
        for extra in ({}, {"chat_template_kwargs": {"thinking": True}}):
            rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": bad_schema}}
            body = {"model": "m", "messages": msgs, "max_tokens": 4, "response_format": rf, **extra}
            r = requests.post(url + "/v1/chat/completions", json=body, timeout=120)
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["param"] == "response_format" and named in err["message"], err
        sp = {"max_new_tokens": 4, "json_schema": json.dumps(bad_schema)}
        r = requests.post(url + "/generate", json={"text": "hi", "sampling_params": sp}, timeout=120)
        assert r.status_code == 400 and named in r.json()["error"]["message"], r.text
    r = requests.post(
        url + "/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 2}}, timeout=120
    )
    assert r.status_code == 200, r.text


@pytest.mark.slow
def test_continued_assistant_message_follows_response_format(real_server: Any) -> None:
    """``continue_final_message`` and DeepSeek's ``prefix: true`` with ``response_format``, thinking
    off and on: the prefill + the returned content validate against the schema (``json.loads`` +
    ``jsonschema``); a prefill the schema cannot continue is a 400 naming ``response_format``."""
    import requests

    url = real_server.url + "/v1/chat/completions"
    prefix = '{"city": "Paris", "days": '
    rf = {"type": "json_schema", "json_schema": {"name": "weather", "schema": _WEATHER}}
    for how in ({"continue_final_message": True}, {"prefix": True}):
        for thinking in (False, True):
            last = {"role": "assistant", "content": prefix, "reasoning_content": "Paris it is."}
            if "prefix" in how:
                last["prefix"] = True
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": "Weather in Paris?"}, last],
                "max_tokens": 100,
                "temperature": 0,
                "response_format": rf,
                "chat_template_kwargs": {"thinking": thinking},
                "continue_final_message": "continue_final_message" in how,
            }
            r = requests.post(url, json=body, timeout=300)
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            assert choice["finish_reason"] == "stop", choice
            jsonschema.validate(json.loads(prefix + choice["message"]["content"]), _WEATHER)
    body["messages"][-1]["content"] = '["not an object'
    r = requests.post(url, json=body, timeout=120)
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format", r.text


@pytest.mark.slow
def test_structural_tag_response_format_after_reasoning_end_to_end(real_server: Any) -> None:
    """Thinking mode with ``response_format`` ``structural_tag``: without a push to close the
    reasoning the tiny model reasons freely (no format text in it); with one, the answer is the
    format's constant."""
    import requests

    url = real_server.url + "/v1/chat/completions"
    rf = {"type": "structural_tag", "format": {"type": "const_string", "value": "hello"}}
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 12,
        "temperature": 0,
        "response_format": rf,
        "chat_template_kwargs": {"thinking": True},
    }
    r = requests.post(url, json=body, timeout=120)
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    assert msg["reasoning_content"] and msg["reasoning_content"] != "hello" and not msg["content"], msg
    r = requests.post(url, json=dict(body, logit_bias={"128822": 100}), timeout=120)  # "</think>"
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"]) == ("hello", "stop"), choice


@pytest.mark.slow
def test_completion_top_logprobs_collisions_end_to_end(real_server: Any, tok: Any) -> None:
    """Three byte-fragment tokens pushed to the top by ``logit_bias``: the completions
    ``top_logprobs`` entry for their common text is the best one's logprob as ``/generate``
    reports the candidates, and equals the sampled token's ``token_logprobs`` value."""
    import requests

    ids = [i for i in range(100, 5000) if tok.decode([i]) == "\ufffd"][:3]
    assert len(ids) == 3
    bias = {str(ids[0]): 30, str(ids[1]): 25, str(ids[2]): 20}
    sp = {"max_new_tokens": 1, "temperature": 0, "logit_bias": bias}
    g = requests.post(
        real_server.url + "/generate",
        json={"text": "Hello", "sampling_params": sp, "return_logprob": True, "top_logprobs_num": 5},
        timeout=120,
    ).json()
    cands = g["meta_info"]["output_top_logprobs"][0]
    want = max(lp for lp, tid, _ in cands if tid in ids)
    body = {
        "model": "m",
        "prompt": "Hello",
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": 5,
        "logit_bias": bias,
    }
    lp = requests.post(real_server.url + "/v1/completions", json=body, timeout=120).json()["choices"][0][
        "logprobs"
    ]
    assert lp["tokens"] == ["\ufffd"]
    assert lp["top_logprobs"][0]["\ufffd"] == pytest.approx(want, abs=1e-4)
    assert lp["top_logprobs"][0]["\ufffd"] == lp["token_logprobs"][0]


def test_token_ids_logprob_per_prompt_may_be_null(plain_fake_server: Any) -> None:
    """SGLang #30188: a batch whose prompts ask for token-id logprobs and one that does not
    (``token_ids_logprob: [[5, 6], null, [7]]``, SGLang's per-prompt form; it was a 400 here and
    crashed SGLang's prefill). Each prompt gets its own ids' logprobs (the fake model gives id
    ``t`` the logprob ``-1 - 0.001 t``), the ``null`` one none; a flat list still applies to every
    prompt."""
    import requests

    url = plain_fake_server.url + "/generate"
    body = {
        "text": ["Hello", "World", "x"],
        "sampling_params": {"max_new_tokens": 2},
        "return_logprob": True,
        "token_ids_logprob": [[5, 6], None, [7]],
    }
    r = requests.post(url, json=body, timeout=60)
    assert r.status_code == 200, r.text
    got = [item["meta_info"].get("output_token_ids_logprobs") or [] for item in r.json()]
    want = [[5, 6], [], [7]]
    for positions, ids in zip(got, want):
        for entries in positions:
            assert [e[1] for e in entries] == ids
            assert [e[0] for e in entries] == pytest.approx([-1 - 0.001 * t for t in ids])
    assert [len(p) for p in got] == [2, 0, 2]
    r = requests.post(url, json=dict(body, token_ids_logprob=[9]), timeout=60)
    assert r.status_code == 200, r.text
    assert all(
        e[1] == 9 for item in r.json() for pos in item["meta_info"]["output_token_ids_logprobs"] for e in pos
    )
    r = requests.post(url, json=dict(body, token_ids_logprob=[[5], "x", None]), timeout=60)
    assert r.status_code == 400 and "token_ids_logprob" in r.json()["error"]["message"], r.text

"""Public bug reports of OpenAI-compatible servers' ``/v1/responses`` (vLLM, SGLang, agent SDKs in
front of them), replayed on an in-process app of the OpenAI router over a fake engine (each test
names its report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: DeepSeek's own
Responses converter and V4 encoder (``deepseek-recipe``), xgrammar's own matcher of JSON objects
(which texts some continuation makes valid JSON), the ``openai`` client's types, and a cold run
of the same conversation.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import deepseek_recipe as recipe
import pytest
from fake_prompt_tm import MODEL, PromptTM
from responses_testutil import WEATHER, make_client
from sglang_v4.entrypoints.openai.json_prefix import is_json_object_prefix
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)


def _prompt(tok: PreTrainedTokenizerFast, tm: PromptTM) -> str:
    """The text of the engine's latest prompt."""
    return tok.decode(tm.received[-1].input_ids)


def _recipe_prompt(body: dict[str, Any]) -> str:
    """DeepSeek's own prompt text of a Responses body (its ``deepseek-recipe`` Responses converter
    and V4 encoder, thinking off)."""
    req = recipe.ResponsesRequest({**copy.deepcopy(body), "model": "DeepSeek-V4-Pro"})
    return (
        recipe.DeepseekV4Encoding()
        .render_conversation(req.convert(recipe.ConversionOptions(default_thinking_mode=False)).conversation)
        .prompt
    )


def _xgrammar_object_prefix() -> Any:
    """A predicate: xgrammar's own matcher of the JSON-object grammar accepts the text as a
    beginning (leading whitespace, and whitespace after a whole object, allowed)."""
    xgr = pytest.importorskip("xgrammar")
    grammar = xgr.Grammar.from_json_schema('{"type": "object"}', any_whitespace=True)
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([f"<t{i}>" for i in range(8)])).compile_grammar(grammar)

    def accepts(text: str) -> bool:
        body = text.lstrip()
        matcher = xgr.GrammarMatcher(compiled)
        if matcher.accept_string(body):
            return bool(body)
        tail = body.rstrip()  # whitespace after a whole object
        matcher = xgr.GrammarMatcher(compiled)
        return bool(tail) and tail != body and bool(matcher.accept_string(tail)) and matcher.is_completed()

    return accepts


# --------------------------------------------------------------------------- replayed call arguments


def _call_body(arguments: str) -> dict[str, Any]:
    """A Responses body replaying one ``function_call`` with ``arguments`` and its output."""
    return {
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": arguments,
                "status": "incomplete",
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
        "tools": [WEATHER],
    }


#: replayed arguments that are the start of a JSON object but no beginning of any valid one
#: (an unescaped quote, a missing comma, a bad literal, a leading zero, a trailing comma)
_MALFORMED = [
    '{"a": "x" "b"',
    '{"command": "echo "hi',
    '{"city": "Paris" "unit": "c"',
    '{"days": [1 2',
    '{"city": "Paris", "ok": tru}',
    '{"n": 01',
    '{"city": "Paris",}',
]


@pytest.mark.parametrize("arguments", _MALFORMED)
def test_malformed_call_arguments_are_replayed_as_written(
    tok: PreTrainedTokenizerFast, arguments: str
) -> None:
    """vllm-project/vllm#43995: a call whose arguments hold an unescaped quote is not JSON; read
    with a lenient partial parser it silently lost what came after the error. Here a replayed
    ``function_call`` whose ``arguments`` begin like a JSON object but are no beginning of any
    valid one (xgrammar's JSON-object matcher refuses them) was replayed with only the members
    jiter's partial mode read before the error (``{"a": "x" "b"`` as ``{"a": "x"}``). Expected:
    the arguments are kept as written, rendered as DeepSeek's own Responses converter and V4
    encoder render non-JSON arguments (one ``arguments`` string parameter): the prompt is theirs."""
    assert not _xgrammar_object_prefix()(arguments)
    tm = PromptTM(tok, reply="Sunny.")
    _, tc = make_client(tm)
    body = _call_body(arguments)
    r = tc.post("/v1/responses", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    want = _recipe_prompt(body)
    assert arguments in want
    assert _prompt(tok, tm) == want


def test_genuine_prefix_is_still_replayed_with_its_complete_members(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#43995's control: arguments that are a true beginning of a JSON object
    (xgrammar's matcher accepts them: a call cut by ``max_output_tokens``) keep the members that
    are complete, an unfinished trailing value left out: the prompt is DeepSeek's prompt of the
    same call with those members as whole JSON arguments."""
    accepts = _xgrammar_object_prefix()
    tm = PromptTM(tok, reply="Sunny.")
    _, tc = make_client(tm)
    for cut, members in (
        ('{"city": "Paris", "unit": "c', {"city": "Paris"}),
        ('{"city": "Paris", "days": [1, 2', {"city": "Paris", "days": [1, 2]}),
        ('{"city": "Paris", "ok": tr', {"city": "Paris"}),
    ):
        assert accepts(cut)
        r = tc.post("/v1/responses", json={"model": MODEL, **_call_body(cut)})
        assert r.status_code == 200, r.text
        assert _prompt(tok, tm) == _recipe_prompt(_call_body(json.dumps(members))), cut


def test_json_object_prefix_agrees_with_xgrammar() -> None:
    """vllm-project/vllm#43995's kind: which argument texts some continuation makes one JSON
    object. Oracle: xgrammar's own matcher of the JSON-object grammar, on every beginning of
    several object texts (all escapes, numbers, literals, nesting, whitespace) and on texts with
    one character inserted or removed (seeded, so the cases are the same on every run)."""
    accepts = _xgrammar_object_prefix()
    rng = random.Random(23)
    docs = [
        json.dumps({"a": "x", "b": [1, -2.5e3, True, None, {"c": 'd"\\\u00e9\n'}], "\u00e9": {}}),
        '{ "k" : [ 0 , 1.0E+2 , false, -0.5e-1 ] , "z" : null, "u": "\\u00E9\\/" }',
        '{"a":[[],{}]}',
    ]
    alphabet = list('{}[]":,-+.0123456789eEtrufalsn\\u abAF\n\x01\u00e9')
    cases: set[str] = {"", " ", "[]", '"x"', "1", "{} {}", "{}x"}
    for doc in docs:
        for i in range(len(doc) + 1):
            p = doc[:i]
            cases.add(p)
            cases.update(
                p[:j] + rng.choice(alphabet) + p[j:] for j in rng.sample(range(i + 1), min(i + 1, 3))
            )
            cases.update(p[:j] + p[j + 1 :] for j in rng.sample(range(i), min(i, 3)))
    for _ in range(1500):
        cases.add("{" + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))))
    wrong = [c for c in sorted(cases) if is_json_object_prefix(c) != accepts(c)]
    assert not wrong, wrong[:10]
    assert (
        sum(map(is_json_object_prefix, cases)) > 200
        and sum(not is_json_object_prefix(c) for c in cases) > 200
    )

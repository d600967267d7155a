"""A thirty-second set of public reports on vLLM's extra request fields of ``/v1/chat/completions``
and ``/v1/completions``, replayed on the OpenAI routes: an empty ``choice`` refused with a 400
naming the field the client sent (``structured_outputs`` too, not only ``guided_choice``);
degenerate ``structured_outputs`` objects (``{}``, ``json_object: false``, an empty ``json`` or
``structural_tag``) refused as vLLM refuses them; a regex of whitespace honoured as the pattern it
is; ``prompt_logprobs: -1`` read as the whole vocabulary and bounded; ``min_tokens`` equal to
``max_tokens``; ``echo`` with ``max_tokens: 0``; ``prompt_logprobs: 10``; and the edge of the
vocabulary for ``allowed_token_ids``. Each test names its report.

Faults found and fixed: ``structured_outputs.choice: []`` was refused under the name
``guided_choice`` (a field the client never sent), and an invalid ``structured_outputs.json`` was
reported as "structured_outputs is not valid JSON"; ``structured_outputs`` setting no constraint
(``{}``, ``{"json_object": false}``) ran unconstrained instead of the 400 vLLM gives; a regex of
only whitespace (``" "``, ``"\\n"``) was refused as empty although its language is that
whitespace.

Fixture: ``openai_fake_tm.FakeTM`` (the DeepSeek tokenizer ``tok``, a fixed reply) behind the
in-process OpenAI router (``app_client``); it records each request's ``sampling_params``. The
regex grammar is compiled with the real xgrammar backend (``grammar_backend_testutil``).
Oracles: vLLM's documented rules quoted in the reports, Python's ``re.fullmatch`` for the regex
language, and the independent tokenizer ``tok`` for vocabulary size and prompt tokens.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from grammar_backend_testutil import accepts, ds_grammar_backend, grammar_for
from openai_fake_tm import FakeTM, app_client
from transformers import PreTrainedTokenizerFast

MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def tm(tok: PreTrainedTokenizerFast) -> FakeTM:
    fake = FakeTM(tok)
    fake.grammar_enabled = True  # type: ignore[attr-defined]
    return fake


@pytest.fixture(scope="module")
def client(tm: FakeTM) -> Any:
    return app_client(tm)


def _post(client: Any, tm: FakeTM, path: str, **kw: Any) -> tuple[Any, dict[str, Any] | None]:
    """POST a chat (``path`` containing ``chat``) or completions request with ``kw`` added; the
    response and the ``sampling_params`` the tokenizer manager received (None if none arrived)."""
    body: dict[str, Any] = {"model": "dsv4-test", "max_tokens": 8, **kw}
    body.setdefault("messages" if "chat" in path else "prompt", MESSAGES if "chat" in path else "Hi")
    n = len(tm.received)
    r = client.post(path, json=body)
    return r, (tm.received[n].sampling_params if len(tm.received) > n else None)


def _assert_400(r: Any, param: str, starts: str) -> None:
    """A 400 in OpenAI's error shape whose ``param`` is ``param`` and whose message starts with
    ``starts`` (the request path the client sent)."""
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert err["message"].startswith(starts), err


ROUTES = ["/v1/chat/completions", "/v1/completions"]


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(
    "extra,param,starts",
    [
        ({"guided_choice": []}, "guided_choice", "guided_choice"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs", "structured_outputs.choice"),
        ({"structured_outputs": {"choice": ["yes", ""]}}, "structured_outputs", "structured_outputs.choice"),
    ],
)
def test_vllm_20195_empty_choice_is_a_400_naming_the_sent_field(
    client: Any, tm: FakeTM, path: str, extra: dict[str, Any], param: str, starts: str
) -> None:
    """vllm-project/vllm#20195: ``guided_choice: []`` crashed vLLM's engine; the fix refuses an
    empty choice list at validation. Here both spellings are a 400, and the error names the field
    the client sent: old code called ``structured_outputs.choice`` "guided_choice" with
    ``param: "guided_choice"``. The server still answers the next request."""
    r, _ = _post(client, tm, path, **extra)
    _assert_400(r, param, starts)
    if param != "guided_choice":
        assert "guided_choice" not in r.json()["error"]["message"]
    ok, sp = _post(client, tm, path, structured_outputs={"choice": ["yes", "no"]})
    assert ok.status_code == 200, ok.text
    assert sp is not None and sp["ebnf"] == 'root ::= "yes" | "no"'


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(
    "so,starts",
    [
        ({"json_object": False}, "structured_outputs"),
        ({}, "structured_outputs"),
        ({"json": None, "regex": None, "choice": None, "disable_fallback": False}, "structured_outputs"),
        ({"json": ""}, "structured_outputs.json"),
        ({"json": "   "}, "structured_outputs.json"),
        ({"structural_tag": ""}, "structured_outputs.structural_tag"),
    ],
)
def test_vllm_45346_degenerate_structured_outputs_are_refused(
    client: Any, tm: FakeTM, path: str, so: dict[str, Any], starts: str
) -> None:
    """vllm-project/vllm#45346 (and #47450 for ``structural_tag``; gonka-ai/gonka#1215 saw vLLM
    refuse ``structured_outputs: {}``): ``{"json_object": false}`` and ``{"json": ""}`` killed
    vLLM's engine; the fix refuses both at validation, ``json_object`` being a flag only ``true``
    turns on. Here every ``structured_outputs`` that names no constraint is a 400 naming
    ``structured_outputs`` (old code ran it unconstrained), and an empty JSON text is a 400 whose
    message names ``structured_outputs.json`` (old code: "structured_outputs is not valid JSON").
    Nothing reaches the tokenizer manager."""
    r, sp = _post(client, tm, path, structured_outputs=so)
    _assert_400(r, "structured_outputs", starts)
    assert sp is None
    ok, sp = _post(client, tm, path, structured_outputs={"json_object": True})
    assert ok.status_code == 200, ok.text
    assert sp is not None and sp["json_schema"] == '{"type": "object"}'


@pytest.fixture(scope="module")
def backend() -> Any:
    return ds_grammar_backend()


@pytest.mark.parametrize("pattern", [" ", "\n", " +", "\t?"])
def test_vllm_47450_a_whitespace_regex_is_a_pattern(
    client: Any, tm: FakeTM, backend: Any, pattern: str
) -> None:
    """vllm-project/vllm#47450: refusing empty grammar texts, the maintainers left ``regex`` out on
    purpose: ``" "`` or ``"\\n"`` is a valid pattern whose language is that whitespace. Old code
    refused any whitespace-only regex as empty (400). Here it reaches the sampling parameters as
    sent (both spellings, both routes) and its grammar takes exactly what ``re.fullmatch`` takes;
    the empty regex stays a 400 (its language is only the empty string)."""
    for path in ROUTES:
        for extra in ({"guided_regex": pattern}, {"structured_outputs": {"regex": pattern}}):
            r, sp = _post(client, tm, path, **extra)
            assert r.status_code == 200, r.text
            assert sp is not None and sp["regex"] == pattern
    g = grammar_for(backend, regex=pattern)
    for s in ("", " ", "  ", "\n", "\t", "a", " \n"):
        assert accepts(g, s) == (re.fullmatch(pattern, s) is not None), (pattern, s)
    r, _ = _post(client, tm, ROUTES[0], guided_regex="")
    _assert_400(r, "guided_regex", "guided_regex")


@pytest.mark.parametrize("path", ROUTES)
def test_vllm_24948_prompt_logprobs_minus_one_is_the_whole_vocabulary(
    client: Any, tm: FakeTM, tok: PreTrainedTokenizerFast, path: str
) -> None:
    """vllm-project/vllm#24948: ``prompt_logprobs: -1`` ("return all vocab_size log
    probabilities", vLLM's documentation) was refused as "must be a positive value";
    local-inference-lab/vllm#266: honouring it without a bound allocated prompt x vocabulary and
    killed the engine. Here -1 is read as the vocabulary size (``len(tok)``) and refused by the
    server's logprob bound with a 400 naming ``prompt_logprobs`` (not "must be positive"); -2 is a
    400 naming it too; the server still answers."""
    r, sp = _post(client, tm, path, prompt_logprobs=-1)
    _assert_400(r, "prompt_logprobs", "")
    assert str(len(tok)) in r.json()["error"]["message"]
    assert "positive" not in r.json()["error"]["message"]
    assert sp is None
    r, _ = _post(client, tm, path, prompt_logprobs=-2)
    _assert_400(r, "prompt_logprobs", "")
    ok, _ = _post(client, tm, path, prompt_logprobs=1)
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("path", ROUTES)
def test_vllm_4365_min_tokens_with_max_tokens(client: Any, tm: FakeTM, path: str) -> None:
    """vllm-project/vllm#4365: ``max_tokens`` and ``min_tokens`` sent together failed in vLLM's
    min-tokens penalty; replicate/cog-triton#47: equal values must not be an error. Here equal
    values reach the sampling parameters as sent, and ``min_tokens`` above ``max_tokens`` (vLLM:
    "min_tokens must be less than or equal to max_tokens") is a 400 naming ``min_tokens``."""
    r, sp = _post(client, tm, path, min_tokens=8, max_tokens=8)
    assert r.status_code == 200, r.text
    assert sp is not None and sp["min_new_tokens"] == sp["max_new_tokens"] == 8
    r, sp = _post(client, tm, path, min_tokens=9, max_tokens=8)
    _assert_400(r, "min_tokens", "min_tokens")
    assert sp is None


def test_vllm_6521_echo_with_max_tokens_zero_scores_the_prompt(
    client: Any, tm: FakeTM, tok: PreTrainedTokenizerFast
) -> None:
    """vllm-project/vllm#6521: ``echo: true``, ``logprobs: 1``, ``max_tokens: 0`` (scoring the
    prompt's last token) crashed vLLM's server. Here the answer is the prompt itself with one
    logprob entry per prompt token (``tok``'s tokens of the prompt, the first one's logprob null,
    as OpenAI's echo), ``finish_reason`` ``length``."""
    prompt = "Your answer: Yes"
    r, sp = _post(client, tm, "/v1/completions", prompt=prompt, echo=True, logprobs=1, max_tokens=0)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] == prompt
    assert choice["finish_reason"] == "length"
    lp = choice["logprobs"]
    ids = tok.encode(prompt, add_special_tokens=False)
    assert lp["tokens"] == [tok.decode([i]) for i in ids]
    assert lp["token_logprobs"][0] is None
    assert all(isinstance(x, float) for x in lp["token_logprobs"][1:])
    assert len(lp["text_offset"]) == len(ids)
    assert sp is not None and sp["max_new_tokens"] == 0


def test_vllm_16836_prompt_logprobs_ten_on_completions(
    client: Any, tm: FakeTM, tok: PreTrainedTokenizerFast
) -> None:
    """vllm-project/vllm#16836: ``/v1/completions`` with ``prompt_logprobs: 10`` failed while 1-9
    worked. Here 10 (below the server's bound of 20) is answered with vLLM's shape: one entry per
    prompt token, ``null`` for the first, then a map holding the prompt's own token id (``tok``'s
    ids of the prompt) with its ``decoded_token``."""
    prompt = "The cat sat"
    r, _ = _post(client, tm, "/v1/completions", prompt=prompt, prompt_logprobs=10, max_tokens=2)
    assert r.status_code == 200, r.text
    plp = r.json()["choices"][0]["prompt_logprobs"]
    ids = tok.encode(prompt, add_special_tokens=False)
    assert len(plp) == len(ids) and plp[0] is None
    for entry, tid in zip(plp[1:], ids[1:], strict=True):
        assert str(tid) in entry and len(entry) <= 11, entry
        assert entry[str(tid)]["decoded_token"] == tok.decode([tid])


@pytest.mark.parametrize("path", ROUTES)
def test_vllm_ascend_16714_allowed_token_ids_at_the_vocabulary_edge(
    client: Any, tm: FakeTM, tok: PreTrainedTokenizerFast, path: str
) -> None:
    """vllm-project/vllm-ascend#16714: unchecked ``allowed_token_ids`` / ``stop_token_ids`` reached
    a device-side index and killed the engine; the fix refuses ids outside the vocabulary at
    validation. Here the last id (``len(tok) - 1``) is allowed and passed on, and ``len(tok)``
    (one past the end) is a 400 naming ``allowed_token_ids`` that never reaches the engine."""
    last = len(tok) - 1
    r, sp = _post(client, tm, path, allowed_token_ids=[last])
    assert r.status_code == 200, r.text
    assert sp is not None and sp["allowed_token_ids"] == [last]
    r, sp = _post(client, tm, path, allowed_token_ids=[0, last + 1])
    _assert_400(r, "allowed_token_ids", "allowed_token_ids")
    assert sp is None

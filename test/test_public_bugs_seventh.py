"""A seventh set of public bug reports of SGLang and vLLM servers, replayed on the session's
servers: structured outputs (concurrent grammars, ``n > 1``, streaming, a cut structure, EBNF,
``json_object``, thinking mode, schema keywords the grammar cannot enforce, invalid schemas,
unbounded regexes) and sampling limits (``min_tokens``, ``ignore_eos``, the default temperature)
on the embedded DeepSeek-V4 model's ``more_bugs_server``; stream finish chunks and stop lists
in thinking mode on the model-free ``plain_fake_server``; batched ``async_generate`` with
logprobs on the ``shared_fake_engine``. Each test names its report.

Reports that showed a fault here: a multi-branch ``allOf`` (pydantic's inheritance through
``$ref``) was compiled to "any JSON value", so the answer failed its schema
(vllm-project/vllm#56556); keywords xgrammar compiles without enforcing (``uniqueItems``,
``contains``, ``multipleOf`` on numbers, ``not``, ``pattern`` or ``format`` with a length
bound) were accepted and the answer could fail the schema (sgl-project/sglang#37839), as were
``pattern`` / ``maxLength`` / ``minimum`` on a node without ``type`` (vllm-project/vllm#57550).
An ``allOf`` with an equivalent single schema is now merged and enforced; the rest are a 400
naming the keyword and node (``sampling/json_schema_support.py``).

Reports replayed that showed no fault here (the tests keep them so): grammar requests beside a
plain one (sgl-project/sglang#2414); a grammar for every one of ``n`` choices
(vllm-project/vllm#11312); streamed guided decoding (vllm-project/vllm#10376); a JSON answer cut
by ``max_tokens`` says ``"length"`` (vllm-project/vllm#8350); EBNF on every route
(sgl-project/sglang#2376); JSON mode (vllm-project/vllm#4070); thinking kept beside a JSON
answer (vllm-project/vllm#47027); an invalid schema is a 400, not a crash
(sgl-project/sglang#4574); an unbounded regex stops at ``max_new_tokens``
(sgl-project/sglang#414); ``min_tokens`` holds back EOS (vllm-project/vllm#15967); ``ignore_eos``
reaches ``max_tokens`` (vllm-project/vllm#18687); the default temperature is 1
(sgl-project/sglang#9418); one finish chunk per streamed choice (vllm-project/vllm#2266); a stop
list leaves streamed reasoning whole (vllm-project/vllm#14170); ``async_generate`` of a batch
with per-prompt logprob flags (sgl-project/sglang#4085).

Oracles: ``jsonschema`` and Python's ``re`` (the grammar's language), the same request run alone,
unstreamed or uncut, the served model's tokenizer and ``generation_config.json`` (EOS id), the
fake model's fixed text and script, OpenAI's API reference (one ``finish_reason`` per choice;
default ``temperature`` 1), the reports' stated expectations.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from public_bugs_testutil import MODEL, USER, generate, post, sse
from server_fixture import FAKE_ANSWER, FAKE_REASONING, FAKE_SCRIPT_TAG, FAKE_TEXT, ServerHandle

jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name
SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "n": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["ok", "n"],
    "additionalProperties": False,
}
OTHER_SCHEMA = {
    "type": "object",
    "properties": {"color": {"type": "string", "enum": ["red", "green", "blue"]}},
    "required": ["color"],
    "additionalProperties": False,
}


def _rf(schema: dict[str, Any], name: str = "answer") -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def _chat(server: ServerHandle, body: dict[str, Any]) -> dict[str, Any]:
    r = post(server, CHAT, {"model": MODEL, "messages": USER, **body})
    assert r.status_code == 200, r.text
    return r.json()


def _valid(text: str | None, schema: dict[str, Any] = SCHEMA) -> Any:
    value = json.loads(text or "")
    jsonschema.validate(value, schema)
    return value


def _eos_id(default_model_dir: str) -> int:
    """The EOS id of the served model (its ``generation_config.json``)."""
    cfg = json.loads((Path(default_model_dir) / "generation_config.json").read_text())
    eos = cfg["eos_token_id"]
    return eos if isinstance(eos, int) else eos[0]


# --------------------------------------------------------------------------- structured outputs


def test_sglang_2414_grammar_requests_beside_a_plain_one(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#2414: with xgrammar, a chat request with a JSON schema running beside
    one without made the plain one write gibberish, and of two schema requests one was cut off.
    Run together, the plain request's output is the one it gives alone (greedy) and each schema
    request's answer validates against its own schema."""
    plain = {"text": "Once upon a time", "sampling_params": {"max_new_tokens": 12, "temperature": 0}}
    alone = generate(more_bugs_server, plain)["output_ids"]
    results: dict[str, Any] = {}

    def run(key: str, fn: Any) -> None:
        results[key] = fn()

    jobs = {
        "plain": lambda: generate(more_bugs_server, plain),
        "a": lambda: _chat(
            more_bugs_server, {"max_tokens": 60, "temperature": 0, "response_format": _rf(SCHEMA)}
        ),
        "b": lambda: _chat(
            more_bugs_server, {"max_tokens": 60, "temperature": 0, "response_format": _rf(OTHER_SCHEMA, "c")}
        ),
    }
    threads = [threading.Thread(target=run, args=(k, f)) for k, f in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert results["plain"]["output_ids"] == alone, results["plain"]
    for key, schema in (("a", SCHEMA), ("b", OTHER_SCHEMA)):
        choice = results[key]["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        _valid(choice["message"]["content"], schema)


def test_vllm_11312_grammar_holds_for_every_one_of_n_choices(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#11312: a chat request with ``n > 1`` broke xgrammar's guided decoding
    (only one sequence was constrained). Every one of the ``n`` sampled choices is schema-valid
    JSON (the forced tool call's arguments: the slow test below)."""
    r = _chat(
        more_bugs_server,
        {"max_tokens": 60, "temperature": 1.0, "seed": 11, "n": 3, "response_format": _rf(SCHEMA)},
    )
    assert [c["index"] for c in r["choices"]] == [0, 1, 2], r
    for choice in r["choices"]:
        assert choice["finish_reason"] == "stop", choice
        _valid(choice["message"]["content"])


@pytest.mark.slow
def test_vllm_11312_tool_call_grammar_for_every_one_of_n_choices(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#11312 (the report's case: a forced tool call with ``n > 1``): every
    choice holds a call whose arguments validate against the tool's schema (about 150 tokens a
    choice on the random-weight model: slow tier)."""
    tool = {"type": "function", "function": {"name": "pick", "parameters": OTHER_SCHEMA}}
    r = _chat(
        more_bugs_server,
        {
            "max_tokens": 200,
            "temperature": 1.0,
            "seed": 5,
            "n": 2,
            "tools": [tool],
            "tool_choice": "required",
        },
    )
    assert len(r["choices"]) == 2, r
    for choice in r["choices"]:
        calls = choice["message"]["tool_calls"]
        assert choice["finish_reason"] == "tool_calls" and len(calls) >= 1, choice
        for call in calls:
            assert call["function"]["name"] == "pick"
            _valid(call["function"]["arguments"], OTHER_SCHEMA)


def test_vllm_10376_guided_decoding_streamed(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#10376: guided decoding was broken in streaming mode. The streamed
    deltas fold to the non-streamed answer (greedy), schema-valid JSON in chat and a regex match
    in completions, and the stream ends with ``"stop"``."""
    body = {
        "model": MODEL,
        "messages": USER,
        "max_tokens": 60,
        "temperature": 0,
        "response_format": _rf(SCHEMA),
    }
    whole = post(more_bugs_server, CHAT, body).json()["choices"][0]["message"]["content"]
    chunks = sse(more_bugs_server, CHAT, body)
    folded = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    reasons = [
        c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]
    ]
    assert folded == whole and reasons == ["stop"], (folded, whole, reasons)
    _valid(folded)
    pattern = "(cat|dog)-[0-9]{2}"
    cbody = {"model": MODEL, "prompt": "Pet id:", "max_tokens": 12, "temperature": 0, "regex": pattern}
    text = post(more_bugs_server, COMPLETIONS, cbody).json()["choices"][0]["text"]
    streamed = "".join(
        c["choices"][0]["text"] for c in sse(more_bugs_server, COMPLETIONS, cbody) if c["choices"]
    )
    assert re.fullmatch(pattern, text) and streamed == text, (text, streamed)


def test_vllm_8350_json_cut_by_max_tokens_says_length(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#8350: guided generation cannot close its structure when ``max_tokens``
    runs out first; the answer is an unterminated prefix. The client must be able to tell: the
    cut answer is the uncut one's prefix (greedy), ``finish_reason`` is ``"length"``, and its
    ``completion_tokens`` is the limit; the uncut answer validates and says ``"stop"``."""
    body = {"max_tokens": 80, "temperature": 0, "response_format": _rf(SCHEMA)}
    full = _chat(more_bugs_server, body)
    text = full["choices"][0]["message"]["content"]
    assert full["choices"][0]["finish_reason"] == "stop"
    _valid(text)
    limit = full["usage"]["completion_tokens"] // 2
    assert limit >= 2, full
    cut = _chat(more_bugs_server, {**body, "max_tokens": limit})
    choice = cut["choices"][0]
    assert choice["finish_reason"] == "length" and cut["usage"]["completion_tokens"] == limit, cut
    part = choice["message"]["content"]
    assert part and text.startswith(part) and part != text, (part, text)
    with pytest.raises(json.JSONDecodeError):
        json.loads(part)


def test_sglang_2376_ebnf_grammar_on_every_route(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#2376 (the ``ebnf`` sampling parameter of the xgrammar backend, treated
    like ``regex`` and ``json_schema``; asked for on the OpenAI API too): an EBNF grammar
    constrains ``/generate`` (``sampling_params.ebnf``), chat and completions (``ebnf``); each
    answer is a sentence of the grammar (the same language as a Python regex) and ends with
    ``"stop"``."""
    ebnf = 'root ::= answer " " digit\nanswer ::= "yes" | "no" | "maybe"\ndigit ::= [0-9]'
    language = re.compile("(yes|no|maybe) [0-9]")
    sp = {"max_new_tokens": 10, "temperature": 0, "ebnf": ebnf}
    g = generate(more_bugs_server, {"text": "Answer:", "sampling_params": sp})
    assert language.fullmatch(g["text"]) and g["meta_info"]["finish_reason"]["type"] == "stop", g
    c = _chat(more_bugs_server, {"max_tokens": 10, "temperature": 0, "ebnf": ebnf})["choices"][0]
    assert language.fullmatch(c["message"]["content"]) and c["finish_reason"] == "stop", c
    body = {"model": MODEL, "prompt": "Answer:", "max_tokens": 10, "temperature": 0, "ebnf": ebnf}
    t = post(more_bugs_server, COMPLETIONS, body).json()["choices"][0]
    assert language.fullmatch(t["text"]) and t["finish_reason"] == "stop", t


def test_vllm_4070_json_object_answer_is_a_json_object(
    more_bugs_server: ServerHandle, mtok: Any, default_model_dir: str
) -> None:
    """vllm-project/vllm#4070: ``response_format: {"type": "json_object"}`` corrupted the
    answer. OpenAI's JSON mode: the answer is a JSON object. The random-weight model's object
    would run past any budget (its first key is an endless string), so ``logit_bias`` makes
    ``}`` and EOS its favourite tokens: the grammar must still open an object first, close it,
    and let EOS end the answer, ``"{}"`` then, on chat and completions (the grammar's mask wins
    over the bias: no bare ``}``, no empty answer)."""
    close = mtok.encode("}", add_special_tokens=False)
    assert len(close) == 1
    bias = {str(close[0]): 100, str(_eos_id(default_model_dir)): 100}
    rf = {"type": "json_object"}
    base = {"max_tokens": 40, "temperature": 0, "response_format": rf, "logit_bias": bias}
    c = _chat(more_bugs_server, base)["choices"][0]
    assert c["finish_reason"] == "stop", c
    assert json.loads(c["message"]["content"]) == {}, c
    body = {"model": MODEL, "prompt": "JSON:", **base}
    t = post(more_bugs_server, COMPLETIONS, body).json()["choices"][0]
    assert t["finish_reason"] == "stop" and json.loads(t["text"]) == {}, t
    free = _chat(more_bugs_server, {**base, "logit_bias": {}, "max_tokens": 8})["choices"][0]
    assert free["message"]["content"].lstrip().startswith("{"), free


def test_vllm_47027_thinking_kept_beside_a_json_answer(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#47027: with thinking on and a JSON ``response_format``, thinking was
    disabled (the grammar applied from the first token). The reasoning is written freely, then
    ended (``thinking_token_budget``, vLLM's field), and only the answer after ``</think>`` is
    constrained: ``reasoning_content`` is there and ``content`` validates, streamed or not."""
    body = {
        "max_tokens": 80,
        "temperature": 0,
        "response_format": _rf(SCHEMA),
        "chat_template_kwargs": {"thinking": True},
        "thinking_token_budget": 4,
    }
    r = _chat(more_bugs_server, body)
    msg = r["choices"][0]["message"]
    assert msg.get("reasoning_content") and r["choices"][0]["finish_reason"] == "stop", r
    _valid(msg["content"])
    chunks = sse(more_bugs_server, CHAT, {"model": MODEL, "messages": USER, **body})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    assert reasoning == msg["reasoning_content"] and content == msg["content"], (reasoning, content)


BASE_AND_EXTRA = {
    "$defs": {
        "Base": {
            "type": "object",
            "properties": {"x": {"type": "integer", "minimum": 10, "maximum": 99}},
            "required": ["x"],
        }
    },
    "allOf": [
        {"$ref": "#/$defs/Base"},
        {"type": "object", "properties": {"y": {"type": "string", "enum": ["a", "b"]}}, "required": ["y"]},
    ],
    "unevaluatedProperties": False,
}


def test_vllm_56556_multi_branch_all_of_is_enforced(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#56556: a schema whose ``allOf`` has several branches (pydantic's model
    inheritance, ``allOf: [{"$ref": "#/$defs/Base"}, {...}]``) was silently ignored by xgrammar:
    the model could write JSON that fails the schema and no error was reported. The answer
    validates against the schema (``jsonschema``), on chat and ``/generate``, greedy and
    sampled, thinking off and on."""
    rf = _rf(BASE_AND_EXTRA)
    for extra in ({"temperature": 0}, {"temperature": 1, "seed": 3}):
        c = _chat(more_bugs_server, {"max_tokens": 60, "response_format": rf, **extra})["choices"][0]
        assert c["finish_reason"] == "stop", c
        _valid(c["message"]["content"], BASE_AND_EXTRA)
    thinking = {"chat_template_kwargs": {"thinking": True}, "thinking_token_budget": 2}
    c = _chat(more_bugs_server, {"max_tokens": 80, "temperature": 0, "response_format": rf, **thinking})
    _valid(c["choices"][0]["message"]["content"], BASE_AND_EXTRA)
    sp = {"max_new_tokens": 60, "temperature": 0, "json_schema": json.dumps(BASE_AND_EXTRA)}
    _valid(generate(more_bugs_server, {"text": "JSON:", "sampling_params": sp})["text"], BASE_AND_EXTRA)


@pytest.mark.parametrize(
    ("report", "schema", "keyword"),
    [
        # sgl-project/sglang#37839: keywords xgrammar compiles but does not enforce
        ("sglang#37839", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
        (
            "sglang#37839",
            {"type": "array", "items": {"type": "integer"}, "contains": {"const": 3}},
            "contains",
        ),
        ("sglang#37839", {"type": "number", "multipleOf": 0.5}, "multipleOf"),
        ("sglang#37839", {"type": "string", "pattern": "^[a-z]+x+$", "maxLength": 3}, "pattern"),
        ("sglang#37839", {"type": "string", "format": "date", "maxLength": 3}, "format"),
        ("sglang#37839", {"type": "integer", "not": {"const": 3}}, "not"),
        # vllm-project/vllm#57550: type-specific keywords on a node without "type"
        (
            "vllm#57550",
            {"type": "object", "properties": {"code": {"pattern": "^[a-z]+$"}}, "required": ["code"]},
            "pattern",
        ),
        # vllm-project/vllm#56556: an allOf whose branches clash cannot be merged
        ("vllm#56556", {"allOf": [{"type": "integer"}, {"type": "string"}]}, "allOf"),
    ],
)
def test_unenforceable_schema_keywords_are_a_400(
    more_bugs_server: ServerHandle, report: str, schema: dict[str, Any], keyword: str
) -> None:
    """sgl-project/sglang#37839 (merged: the xgrammar backend refuses, as a 400, JSON-schema
    keywords and combinations it would compile without enforcing), vllm-project/vllm#57550
    (``pattern`` / ``maxLength`` on a node without ``type`` were not enforced) and
    vllm-project/vllm#56556 (an unmergeable ``allOf``): a text the schema rejects would be
    accepted by the grammar, so the request is refused with a 400 naming the keyword and the
    route's field, on chat (also in thinking mode) and ``/generate``; the server keeps serving."""
    for extra in ({}, {"chat_template_kwargs": {"thinking": True}}):
        body = {"model": MODEL, "messages": USER, "max_tokens": 8, "response_format": _rf(schema), **extra}
        r = post(more_bugs_server, CHAT, body)
        assert r.status_code == 400, (report, r.text)
        err = r.json()["error"]
        assert keyword in err["message"] and err.get("param") == "response_format", (report, err)
    sp = {"max_new_tokens": 8, "json_schema": json.dumps(schema)}
    r = post(more_bugs_server, "/generate", {"text": "Hi", "sampling_params": sp})
    assert r.status_code == 400 and keyword in r.json()["error"]["message"], (report, r.text)
    ok = generate(more_bugs_server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2}})
    assert ok["meta_info"]["completion_tokens"] == 2


def test_sglang_4574_invalid_json_schema_is_a_400_not_a_crash(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#4574: an invalid ``json_schema`` crashed the scheduler. Malformed JSON
    text and schemas the JSON Schema meta-schema rejects are each a 400 naming the field, on
    ``/generate`` and chat; the server then answers the next request as before."""
    plain = {"text": "Hi", "sampling_params": {"max_new_tokens": 3, "temperature": 0}}
    before = generate(more_bugs_server, plain)["output_ids"]
    for bad in ("{not json", json.dumps({"type": "strnig"}), json.dumps({"properties": {"a": {"type": 3}}})):
        sp = {"max_new_tokens": 3, "json_schema": bad}
        r = post(more_bugs_server, "/generate", {"text": "Hi", "sampling_params": sp})
        assert r.status_code == 400 and "json_schema" in r.json()["error"]["message"], r.text
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "required": "a"}}}
    r = post(
        more_bugs_server, CHAT, {"model": MODEL, "messages": USER, "max_tokens": 3, "response_format": rf}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format", r.text
    assert generate(more_bugs_server, plain)["output_ids"] == before


def test_sglang_414_regex_generation_stops_at_max_new_tokens(
    more_bugs_server: ServerHandle, mtok: Any
) -> None:
    """sgl-project/sglang#414: a regex with unbounded repetition kept generating past
    ``max_tokens`` (and crashed the server). Generation ends at ``max_new_tokens`` with
    ``"length"``; the text, re-tokenized, is that many tokens at most and is a prefix of a match
    of the regex (each line so far matches the line pattern)."""
    pattern = '(- "[a-z]+"\n)+'
    sp = {"max_new_tokens": 24, "temperature": 0, "regex": pattern}
    g = generate(more_bugs_server, {"text": "Strings:\n", "sampling_params": sp})
    meta = g["meta_info"]
    assert meta["finish_reason"]["type"] == "length" and meta["completion_tokens"] == 24, meta
    lines = g["text"].split("\n")
    assert all(re.fullmatch('- "[a-z]+"', line) for line in lines[:-1]), g["text"]
    assert re.fullmatch('(- ("[a-z]*("?)?)?)?', lines[-1]), g["text"]


# --------------------------------------------------------------------------- sampling limits


def test_vllm_15967_min_tokens_holds_back_eos(more_bugs_server: ServerHandle, default_model_dir: str) -> None:
    """vllm-project/vllm#15967: ``min_tokens`` was sometimes not respected (EOS came first).
    With EOS made the model's certain choice (``logit_bias`` +100), generation still runs to
    ``min_tokens`` before it stops, on chat and completions, streamed or not."""
    bias = {str(_eos_id(default_model_dir)): 100}
    base = {"max_tokens": 20, "temperature": 0, "logit_bias": bias}
    eos_now = _chat(more_bugs_server, base)
    assert eos_now["usage"]["completion_tokens"] <= 1, eos_now  # the bias works: EOS at once
    c = _chat(more_bugs_server, {**base, "min_tokens": 6})
    assert c["choices"][0]["finish_reason"] == "stop" and c["usage"]["completion_tokens"] >= 6, c
    body = {"model": MODEL, "prompt": "Hello", **base, "min_tokens": 6}
    t = post(more_bugs_server, COMPLETIONS, body).json()
    assert t["choices"][0]["finish_reason"] == "stop" and t["usage"]["completion_tokens"] >= 6, t
    chunks = sse(more_bugs_server, COMPLETIONS, {**body, "stream_options": {"include_usage": True}})
    assert chunks[-1]["usage"]["completion_tokens"] >= 6, chunks[-1]


def test_vllm_18687_ignore_eos_reaches_max_tokens(
    more_bugs_server: ServerHandle, default_model_dir: str
) -> None:
    """vllm-project/vllm#18687: with ``ignore_eos`` the requested output length was not reached.
    Even with EOS the model's certain choice, ``ignore_eos`` generates exactly ``max_tokens``
    tokens and finishes with ``"length"`` (chat and ``/generate``)."""
    bias = {str(_eos_id(default_model_dir)): 100}
    c = _chat(more_bugs_server, {"max_tokens": 9, "temperature": 0, "logit_bias": bias, "ignore_eos": True})
    assert c["choices"][0]["finish_reason"] == "length" and c["usage"]["completion_tokens"] == 9, c
    sp = {"max_new_tokens": 9, "temperature": 0, "ignore_eos": True, "logit_bias": bias}
    g = generate(more_bugs_server, {"text": "Hello", "sampling_params": sp})
    assert g["meta_info"]["completion_tokens"] == 9 and g["meta_info"]["finish_reason"]["type"] == "length", g


def test_sglang_9418_default_temperature_is_one(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#9418: the OpenAI routes' default temperature was 0.7 where OpenAI's API
    reference gives 1. A seeded request without ``temperature`` samples exactly as the same
    request with ``temperature: 1`` (chat and completions)."""
    chat = {"max_tokens": 12, "seed": 1234}
    assert (
        _chat(more_bugs_server, chat)["choices"][0]["message"]["content"]
        == _chat(more_bugs_server, {**chat, "temperature": 1})["choices"][0]["message"]["content"]
    )
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 12, "seed": 1234}
    a = post(more_bugs_server, COMPLETIONS, body).json()["choices"][0]["text"]
    b = post(more_bugs_server, COMPLETIONS, {**body, "temperature": 1}).json()["choices"][0]["text"]
    assert a == b, (a, b)


# --------------------------------------------------------------------------- streams and the Engine


def test_vllm_2266_one_finish_chunk_per_choice(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#2266: a stream returned two chunks with a ``finish_reason``. Each
    choice of a streamed completion or chat answer (``n: 2``) has exactly one chunk with a
    ``finish_reason``, and it is that choice's last chunk."""
    for path, extra in (
        (COMPLETIONS, {"prompt": "Hi"}),
        (CHAT, {"messages": [{"role": "user", "content": "Hi"}]}),
    ):
        body = {"model": FAKE_MODEL, "max_tokens": 5, "n": 2, **extra}
        chunks = [c for c in sse(plain_fake_server, path, body) if c.get("choices")]
        for index in (0, 1):
            mine = [ch for c in chunks for ch in c["choices"] if ch["index"] == index]
            finishes = [ch["finish_reason"] for ch in mine if ch.get("finish_reason")]
            assert finishes == ["length"], (path, index, finishes)
            assert mine[-1].get("finish_reason") == "length", (path, index, mine[-1])


def test_vllm_14170_stop_list_keeps_streamed_reasoning_whole(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#14170: with a ``stop`` list in a streamed thinking-mode request,
    ``reasoning_content`` was cut and ``content`` showed ``/think>``. Stop strings the output
    never contains change nothing: the streamed reasoning and content deltas fold to the fake
    model's scripted reasoning and answer, as the unstreamed reply's, with ``"stop"`` (EOS)."""
    body = {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": f"{FAKE_SCRIPT_TAG} What is 6*7?"}],
        "max_tokens": 200,
        "stop": ["\u273fRESULT\u273f", "\u273fRETURN\u273f"],
        "chat_template_kwargs": {"thinking": True},
    }
    whole = post(plain_fake_server, CHAT, body).json()["choices"][0]
    assert whole["message"]["reasoning_content"] == FAKE_REASONING, whole
    assert whole["message"]["content"] == FAKE_ANSWER and whole["finish_reason"] == "stop", whole
    deltas = [c["choices"][0] for c in sse(plain_fake_server, CHAT, body) if c.get("choices")]
    reasoning = "".join(d["delta"].get("reasoning_content") or "" for d in deltas)
    content = "".join(d["delta"].get("content") or "" for d in deltas)
    assert (reasoning, content) == (FAKE_REASONING, FAKE_ANSWER), (reasoning, content)
    assert [d["finish_reason"] for d in deltas if d.get("finish_reason")] == ["stop"]


def test_sglang_4085_async_generate_batch_with_per_prompt_logprob_flags(shared_fake_engine: Any) -> None:
    """sgl-project/sglang#4085: ``Engine.async_generate(prompts, ..., return_logprob=[True] *
    len(prompts))`` (and ``return_logprob=True`` for a batch) raised. Both return one dict per
    prompt, in order, with one output-token logprob entry per generated token, each naming the
    token it belongs to."""
    from transformers import AutoTokenizer

    prompts = ["Hello", "How are you?"]
    sp = {"max_new_tokens": 4, "temperature": 0}
    tok = AutoTokenizer.from_pretrained(shared_fake_engine.server_args.model_path)
    expected = tok.encode(FAKE_TEXT)[:4]  # the fake model's fixed output

    async def both() -> tuple[Any, Any]:
        a = await shared_fake_engine.async_generate(prompts, sp, return_logprob=[True] * len(prompts))
        b = await shared_fake_engine.async_generate(prompts, sp, return_logprob=True)
        return a, b

    for outs in asyncio.run(both()):
        assert isinstance(outs, list) and len(outs) == len(prompts), outs
        for out in outs:
            assert out["output_ids"] == expected, out
            lps = out["meta_info"]["output_token_logprobs"]
            assert [e[1] for e in lps] == expected, lps
            assert all(isinstance(e[0], float) for e in lps), lps

"""A request whose grammar dead-ends after its first tokens, streamed and not, on every route that
takes a grammar: the error names the same request field, with the same message and ``param``.

The engine aborts such a request with a 400 naming its grammar's kind (``json_schema: the grammar
allows no token after ...``, :meth:`~sglang_v4.sampling.grammar.Grammar.rejection_reason`; the
dead end itself is ``test_grammar_dead_end.py``'s). A chat request's ``response_format`` reaches
the engine as a ``json_schema``, so the non-streamed answer renames the error to the field the
client sent (``response_format``; ``text.format`` on ``/v1/responses``, ``output_config.format``
on ``/v1/messages``). The streamed answer used to send the engine's text as is (``json_schema:
...``) with ``param: null``. Here the abort is the real grammar's (xgrammar on a four-token
vocabulary, the schema's pattern ``a`` then nothing), replayed by the fake tokenizer manager after
two tokens of reply. Oracles: the field the client sent (OpenAI's ``param`` names it), and the
non-streamed answer of the same request for the message.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from fake_prompt_tm import MODEL, PromptTM
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sglang_v4.entrypoints.anthropic import create_anthropic_router
from sglang_v4.entrypoints.openai import create_openai_router
from transformers import PreTrainedTokenizerFast

xgr = pytest.importorskip("xgrammar")

#: a JSON string schema whose only texts would be ``"a`` followed by a character that cannot exist
SCHEMA = {"type": "string", "pattern": "a[^\\s\\S]"}
USER = [{"role": "user", "content": "Say a."}]


@pytest.fixture(scope="module")
def dead_end() -> dict[str, Any]:
    """The engine's abort of a ``json_schema`` request at its dead end (``"`` and ``a`` accepted)."""
    from sglang_v4.sampling.grammar import Grammar

    info = xgr.TokenizerInfo(['"', "a", "b", "<eos>"], stop_token_ids=[3])
    compiled = xgr.GrammarCompiler(info, max_threads=1).compile_json_schema(json.dumps(SCHEMA))
    g = Grammar(compiled, "json_schema", 4)
    assert g.accept(0) and g.accept(1) and not g.allows_any_token()
    reason = g.rejection_reason(2)
    assert reason["status_code"] == 400 and reason["message"].startswith("json_schema: ")
    return reason


def _client(tm: PromptTM) -> TestClient:
    sa = SimpleNamespace(served_model_name=MODEL, model_path=None, api_key=None, enable_cache_report=False)
    app = FastAPI()
    router = create_openai_router(tm, sa)
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    return TestClient(app)


def _sse_payloads(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: {")]


# (path, body, the field the error names, how to read the non-streamed error, the streamed one)
ROUTES = [
    (
        "/v1/chat/completions",
        {
            "messages": USER,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}},
        },
        "response_format",
    ),
    (
        "/v1/completions",
        {
            "prompt": [100, 101, 102],
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}},
        },
        "response_format",
    ),
    (
        "/v1/responses",
        {"input": "Say a.", "text": {"format": {"type": "json_schema", "name": "s", "schema": SCHEMA}}},
        "text.format",
    ),
    (
        "/v1/messages",
        {"messages": USER, "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
        "output_config.format",
    ),
]


def _non_streamed_error(path: str, r: Any) -> tuple[str, str | None]:
    body = r.json()
    if path == "/v1/messages":  # Anthropic's error body has no param
        return body["error"]["message"], None
    return body["error"]["message"], body["error"]["param"]


def _streamed_error(path: str, text: str) -> tuple[str, str | None]:
    events = _sse_payloads(text)
    if path == "/v1/messages":
        (err,) = [e for e in events if e.get("type") == "error"]
        return err["error"]["message"], None
    if path == "/v1/responses":
        (err,) = [e for e in events if e.get("type") == "error"]
        return err["message"], err["param"]
    (err,) = [e["error"] for e in events if "error" in e]
    return err["message"], err["param"]


@pytest.mark.parametrize("path,body,field", ROUTES, ids=[r[0] for r in ROUTES])
def test_streamed_grammar_error_names_the_field_the_non_streamed_one_names(
    tok: PreTrainedTokenizerFast, dead_end: dict[str, Any], path: str, body: dict[str, Any], field: str
) -> None:
    tm = PromptTM(tok, reply="alpha beta gamma", abort_after=2, abort_reason=dead_end)
    tc = _client(tm)
    body = {"model": MODEL, "max_tokens": 20, **body}
    r = tc.post(path, json=body)
    assert r.status_code == 400, r.text
    message, param = _non_streamed_error(path, r)
    assert message.startswith(f"{field}: the grammar allows no token"), message
    assert "json_schema" not in message
    if path != "/v1/messages":
        assert param == field
    s = tc.post(path, json={**body, "stream": True})
    assert s.status_code == 200, s.text  # the error comes after the first tokens were sent
    # old code: "json_schema: the grammar allows no token ..." with param null
    assert _streamed_error(path, s.text) == (message, param)


def test_streamed_engine_failure_is_named_as_the_non_streamed_one(tok: PreTrainedTokenizerFast) -> None:
    """An engine failure (500) after the first tokens is no grammar error: nothing is renamed and
    neither answer names a field."""
    tm = PromptTM(tok, reply="alpha beta gamma", abort_after=2)
    tc = _client(tm)
    body = {"model": MODEL, "max_tokens": 20, "messages": USER, "response_format": {"type": "json_object"}}
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 500 and r.json()["error"]["param"] is None
    s = tc.post("/v1/chat/completions", json={**body, "stream": True})
    assert _streamed_error("/v1/chat/completions", s.text) == (r.json()["error"]["message"], None)

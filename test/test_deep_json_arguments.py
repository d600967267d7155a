"""Tool-call arguments nested deeper than Python's ``json`` decodes (it raises ``RecursionError``,
not ``ValueError``): a client's replayed call is rendered (not a 500), on the Responses API and on
chat completions, as any text that is no JSON object is, one ``arguments`` string parameter (as
DeepSeek's converters render it: see test_public_bugs_text and
test_public_bugs_tools_twentythird); a generated DSML block holding such a value is a malformed
block returned as text, streamed and not (not an exception out of the parser).

Oracle: ``json.loads`` itself fails on these texts (checked first), so no route can accept them
as JSON objects; the parser's answer for an undecodable value is the one it gives every other
malformed block, ``(text, [], False)``.
"""

from __future__ import annotations

import json

import pytest
from fake_prompt_tm import MODEL, PromptTM
from fastapi.testclient import TestClient
from responses_testutil import make_client
from sglang_v4.entrypoints.openai.tool_parser import parse_tool_calls
from tool_parser_testutil import TOOLS, D, block, invoke, run_stream
from transformers import PreTrainedTokenizerFast

DEEP_OPEN = "[" * 100_000  # the beginning of an array nested 100,000 deep
DEEP_WHOLE = '{"a": ' * 3000 + "1" + "}" * 3000  # a whole object nested 3,000 deep
DEEP_ARRAY = "[" * 5000 + "]" * 5000
DEEP_SHORT = "[" * 1100 + "]" * 1100  # deeper than json decodes, and ~1.1k tokens: fits the context


@pytest.mark.parametrize("text", [DEEP_OPEN, DEEP_WHOLE, DEEP_ARRAY, DEEP_SHORT])
def test_python_json_cannot_decode_the_inputs(text: str) -> None:
    with pytest.raises(RecursionError):
        json.loads(text)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("args", [DEEP_OPEN, DEEP_WHOLE], ids=["open", "whole"])
def test_replayed_call_with_deep_arguments(tok: PreTrainedTokenizerFast, stream: bool, args: str) -> None:
    tm = PromptTM(tok)
    _, tc = make_client(tm)
    tc = TestClient(tc.app, raise_server_exceptions=False)
    r = tc.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "stream": stream,
            "input": [
                {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": args},
                {"type": "function_call_output", "call_id": "c", "output": "sunny"},
            ],
        },
    )
    assert r.status_code == 200, r.text[:300]
    prompt = tok.decode(tm.received[-1].input_ids)
    assert '<｜DSML｜parameter name="arguments" string="true">' + args + "</｜DSML｜parameter>" in prompt
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": DEEP_SHORT}}
    r = tc.post(
        "/v1/chat/completions",
        json={
            "model": MODEL,
            "stream": stream,
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c", "content": "sunny"},
            ],
        },
    )
    assert r.status_code == 200, r.text[:300]
    prompt = tok.decode(tm.received[-1].input_ids)
    assert (
        '<｜DSML｜parameter name="arguments" string="true">' + DEEP_SHORT + "</｜DSML｜parameter>" in prompt
    )
    ok = tc.post("/v1/responses", json={"model": MODEL, "input": "hello"})  # the route still serves
    assert ok.status_code == 200 and ok.json()["status"] == "completed", ok.text[:300]


@pytest.mark.parametrize(
    "text",
    [
        block(invoke("get_weather", ("city", "true", "Paris"), ("days", "false", DEEP_ARRAY))),
        block(f'<{D}invoke name="get_weather">\n{{"city": {DEEP_ARRAY}}}\n</{D}invoke>'),
    ],
    ids=["parameter", "json-body"],
)
def test_generated_deep_value_is_a_malformed_block(text: str) -> None:
    assert parse_tool_calls(text, TOOLS) == ("", [], False)  # the malformed block is dropped
    for chunks in ([text], [text[:40], text[40:9000], text[9000:]]):
        content, _, p = run_stream(chunks)
        assert content == "", chunks
        assert p.malformed and not p.complete

"""A tool whose ``parameters`` nest past the supported depth is a 400 naming ``tools`` and the limit.

Found in a new-user trial: a 300-level nested ``parameters`` schema got a 400 quoting pydantic's
internal "Maximum serialization depth exceeded" (xgrammar's structural tag is a pydantic model).
Oracle: the nesting depth counted here from the request itself, and a tool just within the limit
is served with its tool-call grammar built (``tool_choice: "required"``).
"""

from __future__ import annotations

import pytest
from chat_tools_testutil import ScriptedTM, client_for
from sglang_v4.entrypoints.chat_encoding import MAX_TOOL_PARAMETERS_NESTING
from transformers import PreTrainedTokenizerFast


def _objects(levels: int) -> dict:
    """``levels`` nested object schemas: 2 JSON levels each (``{"properties": {"a": ...}}``)."""
    s: dict = {"type": "string"}
    for _ in range(levels):
        s = {"type": "object", "properties": {"a": s}, "required": ["a"]}
    return s


def _tools(parameters: dict) -> list[dict]:
    return [{"type": "function", "function": {"name": "deep", "parameters": parameters}}]


def test_too_deep_tool_parameters_get_a_400_naming_tools(tok: PreTrainedTokenizerFast) -> None:
    tm = ScriptedTM(tok, "ok", grammar_enabled=True)
    _, tc = client_for(tm)
    msgs = [{"role": "user", "content": "x"}]
    r = tc.post("/v1/chat/completions", json={"messages": msgs, "tools": _tools(_objects(300))})
    assert r.status_code == 400, r.text
    j = r.json()
    assert j["param"] == "tools", j
    assert str(MAX_TOOL_PARAMETERS_NESTING) in j["message"] and "serializ" not in j["message"], j
    assert not tm.received


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_tool_parameters_within_the_limit_are_served(tok: PreTrainedTokenizerFast, choice: str) -> None:
    # 2 JSON levels per object schema, 1 for the leaf {"type": "string"}: the limit exactly.
    levels = (MAX_TOOL_PARAMETERS_NESTING - 1) // 2
    tm = ScriptedTM(tok, "ok", grammar_enabled=True)
    _, tc = client_for(tm)
    body = {"messages": [{"role": "user", "content": "x"}], "tools": _tools(_objects(levels))}
    r = tc.post("/v1/chat/completions", json={**body, "tool_choice": choice})
    assert r.status_code != 400 or "tools" != r.json().get("param"), r.text
    assert "serializ" not in r.text, r.text
    assert tm.received

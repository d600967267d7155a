"""Seeded random ``POST /v1/responses`` requests must reach the engine with the prompt text that
DeepSeek's own Responses converter and V4 encoder (``deepseek-recipe``, the renderer SGLang serves
DeepSeek-V4 with) give for the same body, character for character.

The ``input`` lists mix user and system messages (string or ``input_text`` parts), assistant
``message`` items (``output_text`` parts, some empty), ``reasoning`` items (``reasoning_text``
content, or a summary only), ``function_call`` items answered by ``function_call_output`` items
(string or parts), with ``instructions``, function ``tools``, ``tool_choice`` ``auto`` / ``none``
and ``reasoning.effort`` (none, or off and every tier on). The server reads its effort tiers from
an ``"official"`` checkpoint (the converter's tiers). Left out of the set, on purpose:

* ``tool_choice`` ``"required"`` or a named function: this server forces the call with the
  tool-call grammar, as SGLang does, where the converter prefills the DSML block into the prompt
  (and refuses a forced choice in thinking mode);
* an assistant message between a turn's calls and their outputs: this server reads it as that
  turn's text (clients replay a response's text after its calls, :mod:`.responses_input`); the
  converter refuses the request;
* ``developer`` messages: read as system messages, as on the chat route (the converter's
  oracle for them is its ``system`` role; ``test_public_bugs_responses_twentyeighth``);
* an ``input`` of nothing but summary-only reasoning items (no turn to run): a 400 here.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_responses_prompt  # noqa: E402
from fake_prompt_tm import MODEL, PromptTM  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sglang_v4.entrypoints.openai import create_openai_router  # noqa: E402

pytestmark = pytest.mark.timeout(120)

EFFORTS = [None, None, "none", "low", "medium", "high", "xhigh"]


def _tool(i: int) -> dict[str, Any]:
    params = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    return {"type": "function", "name": f"f{i}", "description": f"Tool {i}.", "parameters": params}


def _text(rng: random.Random, kind: str, choices: list[str]) -> Any:
    s = rng.choice(choices)
    if kind == "output_text":
        return [{"type": kind, "text": s, "annotations": []}]
    if rng.random() < 0.5:
        return s
    return [{"type": kind, "text": s}] + ([{"type": kind, "text": "more"}] if rng.random() < 0.3 else [])


def _reasoning(rng: random.Random, n: int, summary_only: bool = False) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": f"rs_{n}"}
    if summary_only:
        return {**item, "summary": [{"type": "summary_text", "text": "sum"}]}
    return {**item, "summary": [], "content": [{"type": "reasoning_text", "text": rng.choice(["r", "why"])}]}


def _body(rng: random.Random) -> dict[str, Any]:
    """One request body; every call answered right after its turn."""
    tools = [_tool(i) for i in range(rng.randint(0, 2))]
    items: list[dict[str, Any]] = []
    if rng.random() < 0.2:
        items.append({"role": "system", "content": _text(rng, "input_text", ["Be brief."])})
    n = 0
    for _ in range(rng.randint(1, 5)):
        kind = rng.choice(["user", "assistant", "reasoning"] + (["call"] if tools else []))
        n += 1
        if kind == "user":
            items.append(
                {"type": "message", "role": "user", "content": _text(rng, "input_text", ["hi", "x y"])}
            )
        elif kind == "reasoning":
            items.append(_reasoning(rng, n, summary_only=rng.random() < 0.3))
        elif kind == "assistant":
            if rng.random() < 0.4:
                items.append(_reasoning(rng, n))
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": _text(rng, "output_text", ["a", "b c", ""]),
                }
            )
        else:
            if rng.random() < 0.4:
                items.append(_reasoning(rng, n))
            if rng.random() < 0.3:
                items.append(
                    {"type": "message", "role": "assistant", "content": _text(rng, "output_text", ["pre"])}
                )
            ids = [f"call_{n}_{k}" for k in range(rng.randint(1, 2))]
            for cid in ids:
                args = json.dumps({"x": rng.choice(["v", "w z"])})
                items.append(
                    {
                        "type": "function_call",
                        "call_id": cid,
                        "name": rng.choice(tools)["name"],
                        "arguments": args,
                    }
                )
            for cid in ids:
                out = rng.choice(
                    ["res", [{"type": "input_text", "text": "p1"}, {"type": "input_text", "text": "p2"}]]
                )
                items.append({"type": "function_call_output", "call_id": cid, "output": out})
    if all(i.get("type") == "reasoning" and "content" not in i for i in items):
        items.append({"role": "user", "content": "u"})  # a summary-only input runs no turn (docstring)
    body: dict[str, Any] = {"input": rng.choice(["hello", items]) if rng.random() < 0.1 else items}
    if tools:
        body["tools"] = tools
        if rng.random() < 0.3:
            body["tool_choice"] = rng.choice(["auto", "none"])
    if rng.random() < 0.3:
        body["instructions"] = "Answer in French."
    effort = rng.choice(EFFORTS)
    if effort is not None:
        body["reasoning"] = {"effort": effort}
    return body


@pytest.fixture(scope="module")
def served(tok: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[PromptTM, TestClient]:
    """The OpenAI router on a fake engine, serving a checkpoint of the ``official`` effort profile."""
    d: Path = tmp_path_factory.mktemp("ckpt")
    (d / "config.json").write_text(json.dumps({"dsv4_reasoning_effort_profile": "official"}))
    tm = PromptTM(tok, reply="ok")
    sa = SimpleNamespace(served_model_name=MODEL, model_path=str(d), api_key=None, enable_cache_report=False)
    app = FastAPI()
    app.include_router(create_openai_router(tm, sa))
    return tm, TestClient(app)


def _served_prompt(served: tuple[PromptTM, TestClient], body: dict[str, Any]) -> str:
    tm, tc = served
    r = tc.post("/v1/responses", json={"model": MODEL, **body})
    assert r.status_code == 200, (body, r.text)
    return tm.tokenizer.decode(tm.received[-1].input_ids)


@pytest.mark.parametrize("seed", range(4))
def test_random_inputs_render_as_deepseek_recipe(served: tuple[PromptTM, TestClient], seed: int) -> None:
    """60 bodies per seed: the served prompt equals the converter's."""
    rng = random.Random(seed)
    for _ in range(60):
        body = _body(rng)
        assert _served_prompt(served, body) == recipe_responses_prompt(body), body


def test_consecutive_assistant_messages_are_one_turn(served: tuple[PromptTM, TestClient]) -> None:
    """The case the random set first found: two assistant ``message`` items in a row (a client
    replaying a response with two text parts as two items, or its own notes) are one assistant
    turn whose texts are joined by a blank line, an empty one skipped, the turn's calls after
    them, as DeepSeek's Responses converter renders it (it was two turns, each with its EOS)."""

    def said(text: str) -> dict[str, Any]:
        return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}

    call = {"type": "function_call", "call_id": "c1", "name": "f0", "arguments": '{"x": "v"}'}
    body = {
        "input": [
            {"role": "user", "content": "q"},
            said("a"),
            said(""),
            said("b"),
            call,
            {"type": "function_call_output", "call_id": "c1", "output": "res"},
        ],
        "tools": [_tool(0)],
    }
    want = recipe_responses_prompt(body)
    assert "<｜Assistant｜></think>a\n\nb\n\n<｜DSML｜tool_calls>" in want
    assert _served_prompt(served, body) == want

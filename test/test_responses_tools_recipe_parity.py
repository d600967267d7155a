"""Tool calling on ``POST /v1/responses`` against DeepSeek's own Responses converter, V4 encoder and
Responses generator (``deepseek-recipe``, what SGLang serves DeepSeek-V4 with), over the shapes the
random sets of ``test_responses_recipe_parity`` and ``test_responses_output_recipe_parity`` leave
out.

The prompt set: one to three function tools whose ``parameters`` are empty, flat or nested
(arrays, objects, typed members with descriptions), descriptions empty or of several lines;
turns of one to three parallel ``function_call`` items (optional ``id`` and ``status``) whose
``arguments`` hold nested objects, arrays, floats, booleans, ``null``, newlines and non-ASCII
text, escaped or not, answered in order by ``function_call_output`` items whose ``output`` is a
string (empty or JSON-looking) or a list of one or two ``input_text`` parts; several calling
turns in a row, reasoning items (text or summary only) before a turn's calls, the final answer
after, ``instructions``, ``tool_choice`` ``auto`` / ``none``, ``parallel_tool_calls`` and
``reasoning.effort`` (none, off, ``low``, ``high``, ``xhigh``). The reply set: DSML blocks of one
to three invokes of tools with typed parameters, with no ``parameters`` at all and with an empty
parameter list, invokes with no parameter,
``string="false"`` values of every JSON kind and ``string="true"`` values where the schema
allows a string; the ``function_call`` items' ``arguments`` text is compared exactly (the JSON a
client parses is the converter's, spacing and escapes included), non-streamed and streamed.

Left out, each a documented difference of this server or a converter quirk:

* tool definitions as sent (sgl-project/sglang#33568: no ``"description": ""`` or
  ``"parameters": {}`` added, ``strict`` shown as sent rather than turned into
  ``additionalProperties: false`` and an all-required list), and a custom ``apply_patch`` tool
  shown with its own description (the converter swaps in its own text; other custom tools it
  refuses);
* ``input_image`` / ``input_file`` parts in a ``function_call_output``: a 400 here (the model
  reads text only), ``[Unsupported Image]`` text in the converter;
* ``arguments: ""`` is a call with no parameter here (:func:`~.tool_calls.partial_json_object`),
  one empty ``arguments`` string parameter in the converter;
* a reasoning item between a turn's calls (one turn's reasoning here; the converter refuses
  the request) and integers past a double's precision in ``arguments`` (kept digit for digit
  here; the converter renders them as floats);
* ``tool_choice`` ``"required"`` or a named function and ``developer`` messages (as in
  ``test_responses_recipe_parity``), ``allowed_tools`` (the converter knows no such choice),
  calls without outputs and outputs without calls (both refuse them, in words of their own);
* replies under ``tool_choice: "none"`` (DSML cut off here, :mod:`.dsml_withheld`), invokes of
  tools the request does not have (a malformed block, dropped, :mod:`.tool_parser`),
  ``string="true"`` values of non-string parameters (:mod:`.tool_args_repair`), and the
  ``status`` the converter adds to a ``custom_tool_call`` item (OpenAI's item has none), and the
  ``input`` ``"{}"`` it gives an ``apply_patch`` invoke of no parameter (``""`` here).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from chat_tools_testutil import CharTM, client_for  # noqa: E402
from deepseek_recipe_testutil import recipe_responses_prompt, recipe_responses_reply  # noqa: E402
from dsml_testutil import dsml_block, dsml_invoke, dsml_param  # noqa: E402
from fake_prompt_tm import MODEL, PromptTM  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from responses_testutil import sse  # noqa: E402
from sglang_v4.entrypoints.openai import create_openai_router  # noqa: E402

pytestmark = pytest.mark.timeout(120)

PARAMS: list[dict[str, Any]] = [
    {"type": "object", "properties": {}},
    {
        "type": "object",
        "properties": {"x": {"type": "string"}, "n": {"type": "integer", "description": "num"}},
        "required": ["x"],
    },
    {
        "type": "object",
        "properties": {
            "o": {"type": "object", "properties": {"a": {"type": "string"}}},
            "l": {"type": "array", "items": {"type": "number"}},
        },
    },
]
ARGS: list[dict[str, Any]] = [
    {},
    {"x": "v"},
    {"x": "a b", "n": 3},
    {"o": {"a": "q"}, "l": [1, 2.5]},
    {"x": "line\nnext"},
    {"b": True, "z": None},
    {"x": "é中", "y": 1e5, "w": 1.0},
    {"x": {"k": 'v"q'}},
]
OUTPUTS: list[Any] = [
    "res",
    "",
    '{"ok": true}',
    [{"type": "input_text", "text": "p1"}],
    [{"type": "input_text", "text": "p1"}, {"type": "input_text", "text": "p2"}],
]


def _tools(rng: random.Random) -> list[dict[str, Any]]:
    """Function tools in the converter's key order (module docstring)."""
    return [
        {
            "type": "function",
            "name": f"f{i}",
            "description": rng.choice(["Tool.", "d\nmulti", ""]),
            "parameters": rng.choice(PARAMS),
        }
        for i in range(rng.randint(1, 3))
    ]


def _calling_turn(rng: random.Random, tools: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """One assistant turn of parallel calls (reasoning first at times) and their outputs."""
    items: list[dict[str, Any]] = []
    if rng.random() < 0.4:
        reasoning: dict[str, Any] = {"type": "reasoning", "id": f"rs_{n}", "summary": []}
        if rng.random() < 0.7:
            reasoning["content"] = [{"type": "reasoning_text", "text": rng.choice(["think", "a\nb"])}]
        else:
            reasoning["summary"] = [{"type": "summary_text", "text": "s"}]
        items.append(reasoning)
    ids = [f"call_{n}_{k}" for k in range(rng.randint(1, 3))]
    for cid in ids:
        args = json.dumps(rng.choice(ARGS), ensure_ascii=rng.random() < 0.5)
        call = {"type": "function_call", "call_id": cid, "name": rng.choice(tools)["name"], "arguments": args}
        if rng.random() < 0.3:
            call["id"] = f"fc_{cid}"
        if rng.random() < 0.3:
            call["status"] = "completed"
        items.append(call)
    items += [{"type": "function_call_output", "call_id": c, "output": rng.choice(OUTPUTS)} for c in ids]
    return items


def _body(rng: random.Random) -> dict[str, Any]:
    """One request body with tools; every call answered right after its turn."""
    tools = _tools(rng)
    items: list[dict[str, Any]] = []
    if rng.random() < 0.3:
        items.append({"role": "system", "content": "Sys."})
    n = 0
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.5:
            items.append({"role": "user", "content": rng.choice(["q", "x y"])})
        else:
            items.append(
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}
            )
        for _ in range(rng.randint(0, 2)):
            n += 1
            items += _calling_turn(rng, tools, n)
        if rng.random() < 0.4:
            answer = [{"type": "output_text", "text": "done", "annotations": []}]
            items.append({"type": "message", "role": "assistant", "content": answer})
    body: dict[str, Any] = {"input": items, "tools": tools}
    if rng.random() < 0.4:
        body["instructions"] = rng.choice(["Answer in French.", "Use tools.\nAlways."])
    if rng.random() < 0.3:
        body["tool_choice"] = rng.choice(["auto", "none"])
    if rng.random() < 0.2:
        body["parallel_tool_calls"] = rng.choice([True, False])
    effort = rng.choice([None, None, "none", "low", "high", "xhigh"])
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


@pytest.mark.parametrize("seed", range(3))
def test_random_tool_histories_render_as_deepseek_recipe(
    served: tuple[PromptTM, TestClient], seed: int
) -> None:
    """40 bodies per seed: the served prompt equals the converter's, character for character."""
    rng = random.Random(seed)
    for _ in range(40):
        body = _body(rng)
        assert _served_prompt(served, body) == recipe_responses_prompt(body), body


# --- replies -------------------------------------------------------------------------------

TYPED = {
    "city": {"type": "string"},
    "days": {"type": "integer"},
    "obj": {"type": "object"},
    "flag": {"type": "boolean"},
    "l": {"type": "array"},
    "n": {"type": ["number", "null"]},
    "any": {},
}
STRING_OK = ["city", "any"]  # keys whose schema allows a string
STRING_VALUES = ["Paris", "a b", "x\ny", '{"q":1}', "", " sp ", "é中", "\\n", "3"]
JSON_VALUES = ["3", "true", "null", '{"a": [1, {"b": null}]}', "1.5", "[1,2]", '"s"', "-0", "1e5", "[ ]"]


def _reply_tools(rng: random.Random) -> list[dict[str, Any]]:
    """``typed`` (the schema above), ``free`` (no ``parameters`` at times), ``noargs``."""
    free: dict[str, Any] = {"type": "function", "name": "free", "description": "d"}
    if rng.random() < 0.5:
        free["parameters"] = {"type": "object", "properties": TYPED}
    noargs: dict[str, Any] = {"type": "function", "name": "noargs", "description": "d"}
    if rng.random() < 0.5:
        noargs["parameters"] = {"type": "object", "properties": {}}
    typed = {
        "type": "function",
        "name": "typed",
        "description": "d",
        "parameters": {"type": "object", "properties": TYPED},
    }
    return [typed, free, noargs]


def _reply_invoke(rng: random.Random) -> str:
    name = rng.choice(["typed", "free", "noargs"])
    params, seen = [], set()
    for _ in range(0 if name == "noargs" else rng.randint(0, 3)):
        key = rng.choice(list(TYPED))
        if key in seen:
            continue
        seen.add(key)
        string = key in STRING_OK and rng.random() < 0.6
        params.append(dsml_param(key, string, rng.choice(STRING_VALUES if string else JSON_VALUES)))
    return dsml_invoke(name, *params)


def _items(resp: dict[str, Any]) -> tuple[Any, ...]:
    """Status and output items of a response, ids left out; ``arguments`` as text."""
    out: list[tuple[Any, ...]] = []
    for it in resp["output"]:
        if it["type"] == "function_call":
            out.append((it["type"], it["status"], it["name"], it["arguments"]))
        elif it["type"] == "custom_tool_call":
            out.append((it["type"], it["name"], it["input"]))
        else:
            out.append((it["type"], it["status"], it.get("phase"), [c["text"] for c in it["content"]]))
    return resp["status"], out


def _done_arguments(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """``(output_index, arguments)`` of each ``response.function_call_arguments.done`` event."""
    done = "response.function_call_arguments.done"
    return [(e["output_index"], e["arguments"]) for e in events if e["type"] == done]


def _streamed_arguments(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """``(output_index, arguments)`` of each call, its ``arguments.delta`` events joined."""
    joined: dict[int, str] = {}
    for e in events:
        if e["type"] == "response.function_call_arguments.delta":
            joined[e["output_index"]] = joined.get(e["output_index"], "") + e["delta"]
    return sorted(joined.items())


def _ours(tok: Any, body: dict[str, Any], reply: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The non-streamed response and the stream events of the route for an engine writing
    ``reply`` (one character a chunk, ended by EOS)."""
    _, tc = client_for(CharTM(tok, reply, "stop"), allow_auto_truncate=False)
    body = {"model": "m", **body}
    r = tc.post("/v1/responses", json=body)
    s = tc.post("/v1/responses", json={**body, "stream": True})
    assert r.status_code == 200 and s.status_code == 200, (r.text, s.text)
    return r.json(), sse(s.text)


@pytest.mark.parametrize("seed", range(2))
def test_random_tool_replies_answer_as_deepseek_recipe(tok: Any, seed: int) -> None:
    """15 replies per seed: the output items (``arguments`` text exactly), non-streamed and as
    the stream's final response, and the streamed arguments (deltas joined, and the ``done``
    events) equal DeepSeek's generator's."""
    rng = random.Random(seed)
    calls = 0
    for _ in range(15):
        thinking = rng.random() < 0.4
        body: dict[str, Any] = {"input": "hi", "tools": _reply_tools(rng)}
        body["reasoning"] = {"effort": "high" if thinking else "none"}
        if rng.random() < 0.3:
            body["tool_choice"] = "auto"
        if rng.random() < 0.3:
            body["instructions"] = "Use tools."
        reply = ("hmm</think>" if thinking else "") + rng.choice(["", "Sure.", "x\n"])
        reply += dsml_block(*(_reply_invoke(rng) for _ in range(rng.randint(1, 3))))
        want, want_events = recipe_responses_reply(body, reply)
        got, got_events = _ours(tok, body, reply)
        assert _items(got) == _items(want), reply
        assert _items(got_events[-1]["response"]) == _items(want), reply
        assert _done_arguments(got_events) == _done_arguments(want_events), reply
        assert _streamed_arguments(got_events) == _streamed_arguments(want_events), reply
        calls += len(_done_arguments(want_events))
    assert calls >= 15  # the set does call: every reply holds a block of one to three invokes


def test_apply_patch_call_answers_as_deepseek_recipe(tok: Any) -> None:
    """A custom ``apply_patch`` tool (the one custom tool the converter serves) called beside a
    function tool: a ``custom_tool_call`` item whose ``input`` is the patch text as written,
    then the ``function_call``, as DeepSeek's generator answers."""
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    fn = {"type": "function", "name": "f", "description": "d", "parameters": PARAMS[1]}
    body = {
        "input": "hi",
        "tools": [{"type": "custom", "name": "apply_patch", "description": "Patch."}, fn],
        "reasoning": {"effort": "none"},
    }
    reply = "Doing." + dsml_block(
        dsml_invoke("apply_patch", dsml_param("input", True, patch)),
        dsml_invoke("f", dsml_param("x", True, "v")),
    )
    want, want_events = recipe_responses_reply(body, reply)
    assert [it["type"] for it in want["output"]] == ["message", "custom_tool_call", "function_call"]
    got, got_events = _ours(tok, body, reply)
    assert _items(got) == _items(want)
    assert _items(got_events[-1]["response"]) == _items(want)
    assert (
        _custom_input_events(got_events)
        == _custom_input_events(want_events)
        == [
            ("response.custom_tool_call_input.delta", 1, patch),
            ("response.custom_tool_call_input.done", 1, patch),
        ]
    )


def _custom_input_events(events: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    """The ``custom_tool_call_input`` events as ``(type, output_index, text)``, each run of
    deltas folded into one."""
    out: list[tuple[str, int, str]] = []
    for e in events:
        t = e["type"]
        if t == "response.custom_tool_call_input.delta":
            if out and out[-1][0] == t:
                out[-1] = (t, e["output_index"], out[-1][2] + e["delta"])
            else:
                out.append((t, e["output_index"], e["delta"]))
        elif t == "response.custom_tool_call_input.done":
            out.append((t, e["output_index"], e["input"]))
    return out

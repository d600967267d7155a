"""Seeded random tool-use Messages requests served by ``/v1/messages`` (an in-process app over a
fake tokenizer manager) and run through DeepSeek's own Messages converter, V4 encoder and
response generator (``deepseek-recipe``) must agree: the same prompt text, the same content
blocks (``tool_use`` inputs, text and thinking around them) and ``stop_reason``, non-streamed,
streamed as raw ``input_json_delta`` events and read by the ``anthropic`` client's stream.

This covers what ``test_anthropic_recipe_parity`` leaves out: tool definitions of many schema
shapes (enums, arrays, nested objects, ``anyOf``, ``$defs``, ``additionalProperties``, no
``properties`` at all, an empty one), ``cache_control`` on tools, on ``system`` blocks and on
``tool_result`` blocks, ``tool_choice`` ``auto`` / ``none`` with ``disable_parallel_tool_use``,
up to three parallel calls per turn whose ``input`` holds every JSON kind (floats such as
``1e20``, long integers, ``null``, empty arrays and objects, quotes, DSML-looking and non-ASCII
strings), ``tool_result`` content as a string, text blocks (empty ones too), empty or absent,
``is_error`` either way, thinking blocks between calls; replies with one to three calls whose
parameters are typed (``string="false"``: numbers, booleans, arrays, objects, ``null``) or
strings (newlines, emoji, CJK, tag-like text).

Left out of the random sets, each a documented difference of this server:

* a tool without ``description``: shown as sent (no ``"description": ""`` added; see
  ``test_responses_tools_recipe_parity``, sgl-project/sglang#33568);
* text after an assistant turn's ``tool_use`` blocks: rendered before the calls here
  (:mod:`sglang_v4.entrypoints.anthropic.messages_input`); the converter refuses the request;
* ``tool_choice`` ``any`` / ``tool``: forced by the tool-call grammar here, as SGLang does, with
  every tool shown; the converter keeps only the named tool and prefills the DSML block (see
  ``test_responses_recipe_parity``); with thinking on the converter refuses them;
* ``disable_parallel_tool_use: true`` with several calls written: one call here, as every route
  answers ``parallel_tool_calls: false`` (docs/RELIABILITY.md, SGLang #9696); the converter
  returns them all. The replies are compared up to the first call.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from anthropic_testutil import comparable_content, make_clients, stream_events  # noqa: E402
from deepseek_recipe_testutil import recipe_messages_prompt, recipe_messages_response  # noqa: E402
from fake_prompt_tm import MODEL, PromptTM  # noqa: E402

BOS = "<｜begin▁of▁sentence｜>"
D = "｜DSML｜"
TEXTS = ["hi", "a b", "x\n\ny", " sp "]
THINKING_ON = {"type": "enabled", "budget_tokens": 1024}
THINKING_OFF = {"type": "disabled"}

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"x": {"type": "string"}}},
    {
        "type": "object",
        "properties": {"x": {"type": "string", "enum": ["a", "b"]}, "n": {"type": "integer", "minimum": 0}},
        "required": ["x"],
    },
    {
        "type": "object",
        "properties": {
            "xs": {"type": "array", "items": {"type": "number"}},
            "o": {"type": "object", "properties": {"k": {"type": "boolean"}}},
        },
    },
    {"type": "object"},
    {"type": "object", "properties": {}},
    {
        "type": "object",
        "properties": {"u": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "$defs": {"A": {"type": "string"}},
        "additionalProperties": False,
    },
    {"type": "object", "properties": {"d": {"type": "string", "description": 'ünï "q"'}}},
]

INPUTS: list[dict[str, Any]] = [
    {},
    {"x": "v"},
    {"xs": [1, 2.5], "o": {"k": True}},
    {"n": -3, "x": 'a"b<c>'},
    {"u": None},
    {"d": "ü\n"},
    {"f": 1.0},
    {"f": 1e20},
    {"f": 0.1},
    {"s": f"</{D}parameter>"},
    {"s": "<tool_result>"},
    {"": 1},
    {"e": [], "o": {}},
    {"t": True, "z": False},
    {"k": "  "},
    {"x": "中文", "emo": "\U0001f600"},
    {"n": 12345678901234},
]

RESULTS: list[Any] = [
    "res",
    "",
    [],
    [{"type": "text", "text": "r1"}],
    [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"}],
    [{"type": "text", "text": ""}, {"type": "text", "text": "r"}],
    None,  # no ``content`` at all
    '{"a": 1}',
    "\n x \n",
    "</tool_result>",
]


def _after_effort(prompt: str) -> str:
    """``prompt`` without the reasoning-effort paragraph after BOS (the converter writes the top
    tier's, this server the checkpoint profile's; see ``test_anthropic_recipe_parity``)."""
    if prompt.startswith(BOS + "Reasoning Effort:"):
        return BOS + prompt[len(BOS) :].split("\n\n", 1)[1]
    return prompt


def _cached(rng: random.Random, block: dict[str, Any]) -> dict[str, Any]:
    """``block`` with an ephemeral ``cache_control`` three times in ten."""
    return {**block, "cache_control": {"type": "ephemeral"}} if rng.random() < 0.3 else block


def _tools(rng: random.Random) -> list[dict[str, Any]]:
    return [
        _cached(
            rng,
            {
                "name": f"f{i}",
                "description": rng.choice(["Tool.", "", "multi\nline", "ü"]),
                "input_schema": rng.choice(SCHEMAS),
            },
        )
        for i in range(rng.randint(1, 3))
    ]


def _tool_choice(rng: random.Random) -> dict[str, Any] | None:
    if rng.random() < 0.3:
        return None
    choice: dict[str, Any] = {"type": rng.choice(["auto", "none"])}
    if choice["type"] == "auto" and rng.random() < 0.5:
        choice["disable_parallel_tool_use"] = rng.random() < 0.5
    return choice


def _history(rng: random.Random) -> tuple[dict[str, Any], bool]:
    """``(body, thinking)``: a random tool-use conversation ending at a user turn."""
    tools = _tools(rng)
    body: dict[str, Any] = {}
    if rng.random() < 0.5:
        blocks = [{"type": "text", "text": rng.choice(TEXTS)} for _ in range(rng.randint(1, 2))]
        body["system"] = [_cached(rng, b) for b in blocks]
    msgs: list[dict[str, Any]] = [{"role": "user", "content": rng.choice(TEXTS)}]
    n_calls = 0
    for _ in range(rng.randint(0, 3)):
        blocks = []
        if rng.random() < 0.5:
            blocks.append({"type": "thinking", "thinking": rng.choice(["r", "plan"]), "signature": "s"})
        if rng.random() < 0.5:
            blocks.append({"type": "text", "text": rng.choice(TEXTS)})
        ids = []
        for _ in range(rng.randint(1, 3)):
            n_calls += 1
            ids.append(f"toolu_{n_calls}")
            name = rng.choice(tools)["name"]
            blocks.append({"type": "tool_use", "id": ids[-1], "name": name, "input": rng.choice(INPUTS)})
            if rng.random() < 0.2:
                blocks.append({"type": "thinking", "thinking": "mid", "signature": "s"})
        msgs.append({"role": "assistant", "content": blocks})
        results = []
        for i in ids:
            res: dict[str, Any] = {"type": "tool_result", "tool_use_id": i}
            content = rng.choice(RESULTS)
            if content is not None:
                res["content"] = content
            if rng.random() < 0.3:
                res["is_error"] = rng.random() < 0.7
            results.append(_cached(rng, res))
        if rng.random() < 0.3:
            results.append({"type": "text", "text": rng.choice(TEXTS)})
        msgs.append({"role": "user", "content": results})
    body["messages"] = msgs
    body["tools"] = tools
    choice = _tool_choice(rng)
    if choice is not None:
        body["tool_choice"] = choice
    return body, rng.random() < 0.5


@pytest.mark.parametrize("seed", range(2))
def test_random_tool_histories_render_as_deepseek_recipe(tok: Any, seed: int) -> None:
    """60 tool-use conversations per seed: the served prompt equals the converter's (after the
    effort paragraph): tool schemas as JSON in the system prompt, ``cache_control`` and
    ``is_error`` adding nothing, each turn's calls as DSML with their inputs typed, results in
    ``<tool_result>`` elements, thinking kept or dropped as the converter does."""
    tm = PromptTM(tok, reply="ok")
    _, _, tc = make_clients(tm)
    rng = random.Random(seed)
    for _ in range(60):
        body, thinking = _history(rng)
        want = recipe_messages_prompt(body, thinking)
        think = THINKING_ON if thinking else THINKING_OFF
        r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 5, **body, "thinking": think})
        assert r.status_code == 200, (body, r.text)
        got = tok.decode(tm.received[-1].input_ids)
        assert _after_effort(got) == _after_effort(want), (body, thinking)


class HeldTM(PromptTM):
    """:class:`PromptTM` whose streamed outputs never end inside a character: an output whose
    text ends in U+FFFD (a multi-byte character split across byte-level tokens) is held until
    the character completes, as the detokenizer's commit rule holds it
    (``managers/detokenizer_manager.py``)."""

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        async for out in super().generate_request(obj, request):
            if out["meta_info"]["finish_reason"] is None and out["text"].endswith("\ufffd"):
                continue
            yield out


PARAMS = {
    "s": {"type": "string"},
    "n": {"type": "integer"},
    "f": {"type": "number"},
    "b": {"type": "boolean"},
    "a": {"type": "array", "items": {"type": "integer"}},
    "o": {"type": "object"},
    "u": {"type": ["string", "null"]},
}
STRINGS = ["v", "a b", "<x>", "", "ü\n", '"q"', "{}", "\n lead", "trail \n", "a\\b", "中文", "\U0001f600"]
STRINGS += ["</tool_calls>", "x</", "line1\nline2\n\n"]
VALUES: dict[str, list[tuple[str, str]]] = {
    "s": [("true", v) for v in STRINGS],
    "n": [("false", v) for v in ["1", "-2", "0"]],
    "f": [("false", v) for v in ["1.5", "2", "-0.25", "1.0", "1e20", "1E-3", "0.1", " 3 ", "12345678901234"]],
    "b": [("false", v) for v in ["true", "false"]],
    "a": [("false", v) for v in ["[1, 2]", "[]"]],
    "o": [
        ("false", v) for v in ['{"k": "v"}', "{}", '{"k": [1, {"z": null}]}', '{"u": "\\u00fc", "e": "\\n"}']
    ],
    "u": [("false", "null"), ("true", "x")],
}


def _invoke(rng: random.Random, tools: list[dict[str, Any]]) -> str:
    params = []
    for key in rng.sample(list(PARAMS), rng.randint(0, 4)):
        string, value = rng.choice(VALUES[key])
        params.append(f'<{D}parameter name="{key}" string="{string}">{value}</{D}parameter>\n')
    return f'<{D}invoke name="{rng.choice(tools)["name"]}">\n' + "".join(params) + f"</{D}invoke>\n"


def _reply(rng: random.Random) -> tuple[dict[str, Any], bool, str]:
    """``(body, thinking, reply)``: a one-turn request and a reply with one to three calls."""
    tools = []
    for i in range(rng.randint(1, 3)):
        tool: dict[str, Any] = {"name": f"f{i}", "input_schema": {"type": "object", "properties": PARAMS}}
        tools.append({**tool, "description": "d"} if rng.random() < 0.5 else tool)
    thinking = rng.random() < 0.5
    reply = rng.choice(["", "plan", "think\n"]) + "</think>" if thinking else ""
    reply += rng.choice(["", "Sure.", "a\n\nb", " x "])
    block = "".join(_invoke(rng, tools) for _ in range(rng.randint(1, 3)))
    reply += rng.choice(["\n\n", "", "\n"]) + f"<{D}tool_calls>\n{block}</{D}tool_calls>"
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "q"}], "tools": tools}
    if rng.random() < 0.5:
        choice: dict[str, Any] = {"type": "auto"}
        if rng.random() < 0.5:
            choice["disable_parallel_tool_use"] = rng.random() < 0.5
        body["tool_choice"] = choice
    return body, thinking, reply


def _streamed_blocks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The content blocks a client rebuilds from raw stream ``events``: text and thinking
    deltas joined, each ``tool_use`` block's ``input_json_delta`` pieces joined and parsed as
    JSON (no piece: ``{}``, the start event's ``input``)."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for ev in events:
        if ev["type"] == "content_block_start":
            blocks[ev["index"]] = dict(ev["content_block"])
        elif ev["type"] == "content_block_delta":
            delta, block = ev["delta"], blocks[ev["index"]]
            if delta["type"] == "input_json_delta":
                partial[ev["index"]] = partial.get(ev["index"], "") + delta["partial_json"]
            elif delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
    for i, text in partial.items():
        blocks[i]["input"] = json.loads(text)
    return [blocks[i] for i in sorted(blocks)]


@pytest.mark.parametrize("seed", range(2))
def test_random_tool_replies_read_as_deepseek_recipe(tok: Any, seed: int) -> None:
    """25 replies with calls per seed: the content blocks (``id`` and ``signature`` aside) and
    ``stop_reason`` equal the converter's non-streamed, rebuilt from the raw
    ``input_json_delta`` events, and read by the ``anthropic`` client's stream; the calls'
    ids are distinct ``toolu_`` ids, as many in the client's stream as in the message.
    Under ``disable_parallel_tool_use: true`` the converter's blocks up to its first call."""
    tm = HeldTM(tok, reply="ok")
    client, _, tc = make_clients(tm)
    rng = random.Random(seed)
    for _ in range(25):
        body, thinking, reply = _reply(rng)
        tm.reply = reply
        want = recipe_messages_response(body, reply, thinking)
        blocks = comparable_content(want["content"])
        if body.get("tool_choice", {}).get("disable_parallel_tool_use"):
            first = next(i for i, b in enumerate(blocks) if b["type"] == "tool_use")
            blocks = blocks[: first + 1]
        kw = {
            "model": MODEL,
            "max_tokens": 1000,
            **body,
            "thinking": THINKING_ON if thinking else THINKING_OFF,
        }
        r = tc.post("/v1/messages", json=kw)
        assert r.status_code == 200, r.text
        msg = r.json()
        assert comparable_content(msg["content"]) == blocks, reply
        assert msg["stop_reason"] == want["stop_reason"] == "tool_use", reply
        ids = [b["id"] for b in msg["content"] if b["type"] == "tool_use"]
        assert len(set(ids)) == len(ids) and all(i.startswith("toolu_") for i in ids), ids
        events = stream_events(tc, kw)
        assert comparable_content(_streamed_blocks(events)) == blocks, reply
        assert events[-2]["delta"]["stop_reason"] == "tool_use", reply
        with client.messages.stream(**kw) as s:
            final = s.get_final_message().model_dump(mode="json")
        assert comparable_content(final["content"]) == blocks, reply
        streamed_ids = [b["id"] for b in final["content"] if b["type"] == "tool_use"]
        assert len(set(streamed_ids)) == len(streamed_ids) == len(ids), streamed_ids

"""Seeded random generated replies answered by ``POST /v1/responses`` (non-streamed, and streamed
one character a chunk) and by DeepSeek's own Responses generator (``deepseek-recipe``'s
``ResponsesChunkGenerator`` and ``ResponsesResponse``, what SGLang serves DeepSeek-V4 with) must
give the same output items (``reasoning``, ``message`` with its ``phase``, ``function_call``:
kind, status, text, name, arguments), the same response status and ``incomplete_details``, and
the same stream events once each run of deltas is folded into one.

The replies mix thinking on and off, reasoning with and without ``</think>``, answers that are
empty, whitespace or newlines only, a DSML block of one to three invokes after the text, and a
finish by EOS or by ``max_output_tokens`` (a cut DSML block ends after one of its invokes).
Compared loosely, each a documented difference of this server or a value of no meaning here:

* ids (``id``, ``call_id``, ``item_id``), ``sequence_number``, ``usage`` and the echoed request
  settings;
* the reasoning item's ``encrypted_content``: sent only with ``include:
  ["reasoning.encrypted_content"]`` here (:mod:`.responses_reasoning_state`), always there;
* the ``name`` beside ``response.function_call_arguments.done``'s arguments
  (:mod:`.responses_events`, MacPaw/OpenAI#409).

Left out of the set, as in ``test_chat_reply_recipe_parity`` (the same reply reader): a stray
``<think>``, a ``</think>`` in the answer, ``string="true"`` values of non-string parameters,
text after the block and cuts inside DSML markup.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from chat_tools_testutil import CharTM, client_for  # noqa: E402
from deepseek_recipe_testutil import recipe_responses_reply  # noqa: E402
from dsml_testutil import DSML, dsml_block, dsml_invoke, dsml_param  # noqa: E402
from responses_testutil import sse  # noqa: E402


def _tool(name: str, props: dict[str, Any]) -> dict[str, Any]:
    params = {"type": "object", "properties": props}
    return {"type": "function", "name": name, "description": "d", "parameters": params}


TOOLS = [
    _tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}),
    _tool("put", {"obj": {"type": "object"}, "flag": {"type": "boolean"}, "s": {"type": "string"}}),
]
STRING_PARAMS = ["city", "s"]
JSON_PARAMS = ["days", "obj", "flag"]
STRING_VALUES = ["Paris", "a b", "x\ny", '{"q":1}', "", " sp "]
JSON_VALUES = ["3", "true", "null", '{"a": [1, {"b": null}]}', "1.5"]
REASONING = ["hmm", "let me think\n", "", " r ", "\nstep"]
ANSWERS = ["", "", "Sure.", "ans\n", "  ", "\nok", "\n\n"]
DELTAS = (
    "response.output_text.delta",
    "response.reasoning_text.delta",
    "response.function_call_arguments.delta",
)
ENDS = ("response.created", "response.in_progress", "response.completed", "response.incomplete")


def _invoke(rng: random.Random) -> str:
    params, seen = [], set()
    for _ in range(rng.randint(0, 2)):
        string = rng.random() < 0.5
        key = rng.choice(STRING_PARAMS if string else JSON_PARAMS)
        if key not in seen:
            seen.add(key)
            params.append(dsml_param(key, string, rng.choice(STRING_VALUES if string else JSON_VALUES)))
    return dsml_invoke(rng.choice(["get_weather", "put"]), *params)


def _reply(rng: random.Random, thinking: bool, tools: bool, finish: str) -> str:
    text = ""
    if thinking:
        text += rng.choice(REASONING) + ("</think>" if rng.random() < 0.8 else "")
    text += rng.choice(ANSWERS)
    if tools and rng.random() < 0.6:
        block = dsml_block(*(_invoke(rng) for _ in range(rng.randint(1, 2))))
        if finish == "length" and rng.random() < 0.5:  # cut after one of its invokes
            end = f"</{DSML}invoke>"
            block = block[: rng.choice([i + len(end) for i in range(len(block)) if block.startswith(end, i)])]
        text += block
    return text


def _items(resp: dict[str, Any]) -> tuple[Any, ...]:
    """Status, ``incomplete_details`` and the output items of a response, ids left out."""
    out: list[tuple[Any, ...]] = []
    for it in resp["output"]:
        if it["type"] == "function_call":
            out.append((it["type"], it["status"], it["name"], json.loads(it["arguments"])))
        else:
            texts = [c["text"] for c in it["content"]]
            out.append((it["type"], it["status"], it.get("phase"), texts))
    return resp["status"], resp["incomplete_details"], out


def _folded(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The stream ``events`` with each run of deltas folded into one, ids, sequence numbers and
    the differences named in the module docstring left out."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        t = e["type"]
        if t in DELTAS:
            if out and out[-1][0] == t:
                out[-1] = (t, e["output_index"], out[-1][2] + e["delta"])
            else:
                out.append((t, e["output_index"], e["delta"]))
        elif t in ENDS:
            out.append((t, *_items(e["response"])))
        elif t.startswith("response.output_item."):
            it = {k: v for k, v in e["item"].items() if k not in ("id", "call_id", "encrypted_content")}
            if it.get("arguments"):
                it["arguments"] = json.loads(it["arguments"])
            out.append((t, e["output_index"], json.dumps(it, sort_keys=True)))
        else:
            rest = {k: v for k, v in e.items() if k not in ("sequence_number", "item_id", "name")}
            if "arguments" in rest:
                rest["arguments"] = json.loads(rest["arguments"])
            out.append((t, json.dumps(rest, sort_keys=True)))
    return out


def _ours(tok: Any, body: dict[str, Any], reply: str, finish: str) -> tuple[dict[str, Any], list[Any]]:
    """The non-streamed response and the stream events of the route for an engine writing
    ``reply`` (``max_output_tokens`` its length)."""
    _, tc = client_for(CharTM(tok, reply, finish), allow_auto_truncate=False)
    body = {"model": "m", **body, "max_output_tokens": len(reply)}
    r = tc.post("/v1/responses", json=body)
    s = tc.post("/v1/responses", json={**body, "stream": True})
    assert r.status_code == 200 and s.status_code == 200, (r.text, s.text)
    return r.json(), sse(s.text)


def _body(thinking: bool, tools: bool) -> dict[str, Any]:
    effort = {"effort": "high" if thinking else "none"}
    return {"input": "hi", "reasoning": effort, **({"tools": TOOLS} if tools else {})}


@pytest.mark.parametrize("seed", range(2))
def test_random_replies_answer_as_deepseek_recipe(tok: Any, seed: int) -> None:
    """12 replies per seed: output items and folded stream events equal DeepSeek's."""
    rng = random.Random(seed)
    for _ in range(12):
        thinking, tools = rng.random() < 0.5, rng.random() < 0.8
        finish = rng.choice(["stop", "stop", "length"])
        reply = _reply(rng, thinking, tools, finish)
        if not reply:
            continue
        want, want_events = recipe_responses_reply(_body(thinking, tools), reply, finish)
        got, got_events = _ours(tok, _body(thinking, tools), reply, finish)
        assert _items(got) == _items(want), (reply, finish)
        assert _items(got_events[-1]["response"]) == _items(want), (reply, finish)
        assert _folded(got_events) == _folded(want_events), (reply, finish)


@pytest.mark.parametrize(
    ("thinking", "reply", "finish"),
    [(False, "\n\n", "stop"), (True, "</think>", "stop"), (False, "\n", "length")],
)
def test_an_answer_of_nothing_has_no_items(tok: Any, thinking: bool, reply: str, finish: str) -> None:
    """Found by the random set: a reply with no reasoning, text or call (chat mode's leading
    newlines leave the answer) has an empty ``output``, streamed too, as DeepSeek's generator
    answers; no empty ``message`` item."""
    want, want_events = recipe_responses_reply(_body(thinking, False), reply, finish)
    assert want["output"] == []
    got, got_events = _ours(tok, _body(thinking, False), reply, finish)
    assert got["output"] == [] and got_events[-1]["response"]["output"] == []
    assert _folded(got_events) == _folded(want_events)


@pytest.mark.parametrize("calls", [0, 1])
def test_message_phase_says_whether_calls_follow(tok: Any, calls: int) -> None:
    """Found by the random set: the ``message`` item's ``phase`` is ``"commentary"`` when tool
    calls follow its text, ``"final_answer"`` otherwise (streamed: opened as ``final_answer``,
    closed as ``commentary`` when a call opens after it), as DeepSeek's generator labels it."""
    reply = "Let me check." + (
        dsml_block(dsml_invoke("get_weather", dsml_param("city", True, "Paris"))) if calls else ""
    )
    want, want_events = recipe_responses_reply(_body(False, True), reply)
    assert [it.get("phase") for it in want["output"] if it["type"] == "message"] == [
        "commentary" if calls else "final_answer"
    ]
    got, got_events = _ours(tok, _body(False, True), reply, "stop")
    assert _items(got) == _items(want)
    assert _folded(got_events) == _folded(want_events)

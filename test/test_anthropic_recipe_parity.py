"""Seeded random Anthropic Messages requests served by ``/v1/messages`` (an in-process app over a
fake tokenizer manager) and run through DeepSeek's own Messages converter, V4 encoder and
response generator (``deepseek-recipe``, what SGLang serves DeepSeek-V4 with) must agree: the
same prompt text, the same refusals, the same content blocks and ``stop_reason``.

Requests mix ``system`` (a string or text blocks), user turns (a string or text blocks, empty
ones too), ``system`` messages inside ``messages``, assistant turns (a string, or ``thinking`` /
``text`` / ``tool_use`` blocks, thinking between calls too) answered by ``tool_result`` blocks
(a string, text blocks or empty; a user's text before or after the results), thinking on and
off, zero to two tools. Replies mix reasoning (closed or not), text, DSML calls, a stop by EOS
or by ``max_tokens``.

Left out of the random sets, each a documented choice of this server:

* ``redacted_thinking`` blocks: dropped from the prompt (their data is another model's); the
  converter refuses them.
* a final assistant message: a prefill the answer continues (Anthropic's documented prefill);
  the converter renders it as a finished turn and opens a new one.
* a conversation of empty ``system`` messages only: refused here (no turn to answer); the
  converter renders an empty conversation.
* the reasoning-effort paragraph after BOS in thinking mode: the converter always writes the
  top tier's, this server the checkpoint profile's (compared after it).
* replies with text after the calls (kept as a ``text`` block after them, where a stream sends
  it; the converter drops it), a call cut by ``max_tokens`` (its arguments that parse so far,
  as Anthropic's client reads a cut stream; the converter's ``input`` is ``{}``), and a reply
  opening with a newline without thinking (the converter drops the leading newlines; this
  server's answer reader, shared with chat completions, keeps them).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from anthropic_testutil import comparable_content, make_clients  # noqa: E402
from deepseek_recipe_testutil import recipe_messages_prompt, recipe_messages_response  # noqa: E402
from fake_prompt_tm import MODEL, PromptTM  # noqa: E402

BOS = "<｜begin▁of▁sentence｜>"
D = "｜DSML｜"
TEXTS = ["hi", "", "a b", "x\n\ny", " sp "]


def _after_effort(prompt: str) -> str:
    """``prompt`` without the reasoning-effort paragraph after BOS (module docstring)."""
    if prompt.startswith(BOS + "Reasoning Effort:"):
        return BOS + prompt[len(BOS) :].split("\n\n", 1)[1]
    return prompt


def _tool(i: int) -> dict[str, Any]:
    props = {"x": {"type": "string"}, "n": {"type": "integer"}}
    return {
        "name": f"f{i}",
        "description": f"Tool {i}.",
        "input_schema": {"type": "object", "properties": props},
    }


def _texts(rng: random.Random) -> list[dict[str, Any]]:
    return [{"type": "text", "text": rng.choice(TEXTS)} for _ in range(rng.randint(1, 3))]


def _results(rng: random.Random, ids: list[str]) -> list[dict[str, Any]]:
    """The user message answering ``ids``: sometimes with a text before the results, which the
    converter (and Anthropic's API) refuses, the results having to come first."""
    contents: list[Any] = ["res", "", [], [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"}]]
    blocks = [{"type": "tool_result", "tool_use_id": c, "content": rng.choice(contents)} for c in ids]
    if rng.random() < 0.3:
        blocks.append({"type": "text", "text": rng.choice(TEXTS)})
    if rng.random() < 0.2:
        blocks.insert(rng.randint(0, len(blocks) - 1), {"type": "text", "text": rng.choice(["pre", ""])})
    return blocks


def _request(rng: random.Random) -> tuple[dict[str, Any], bool]:
    """``(body, thinking)`` of a random Messages request ending at a user turn."""
    tools = [_tool(i) for i in range(rng.randint(0, 2))]
    body: dict[str, Any] = {}
    if rng.random() < 0.4:
        body["system"] = rng.choice(["Be brief.", "", _texts(rng)])
    msgs: list[dict[str, Any]] = []
    n_calls = 0
    for _ in range(rng.randint(1, 5)):
        kind = rng.choice(["user", "system", "assistant"] + (["call"] if tools else []))
        if kind == "user":
            msgs.append({"role": "user", "content": rng.choice([rng.choice(TEXTS), _texts(rng)])})
        elif kind == "system":
            msgs.append({"role": "system", "content": rng.choice(["remind", "", _texts(rng)])})
        elif kind == "assistant" and rng.random() < 0.3:
            msgs.append({"role": "assistant", "content": rng.choice(TEXTS)})
        else:
            blocks: list[dict[str, Any]] = []
            if rng.random() < 0.5:
                blocks.append(
                    {"type": "thinking", "thinking": rng.choice(["r", "let me see", ""]), "signature": "s"}
                )
            if kind == "assistant" or rng.random() < 0.7:
                blocks += _texts(rng)
            ids = []
            for _ in range(rng.randint(1, 2) if kind == "call" else 0):
                n_calls += 1
                ids.append(f"toolu_{n_calls}")
                args = rng.choice([{"x": "v"}, {}, {"x": 'a"b', "n": 1}])
                blocks.append(
                    {"type": "tool_use", "id": ids[-1], "name": rng.choice(tools)["name"], "input": args}
                )
                if rng.random() < 0.2:
                    blocks.append({"type": "thinking", "thinking": "mid", "signature": "s"})
            msgs.append({"role": "assistant", "content": blocks})
            if ids:
                msgs.append({"role": "user", "content": _results(rng, ids)})
    if msgs[-1]["role"] == "assistant":
        msgs.append({"role": "user", "content": "next"})
    if all(m["role"] == "system" and not m["content"] for m in msgs):
        msgs.append({"role": "user", "content": "q"})
    body["messages"] = msgs
    if tools:
        body["tools"] = tools
    return body, rng.random() < 0.5


def _thinking(on: bool) -> dict[str, Any]:
    return {"type": "enabled", "budget_tokens": 1024} if on else {"type": "disabled"}


@pytest.mark.parametrize("seed", range(2))
def test_random_requests_render_or_refuse_as_deepseek_recipe(tok: Any, seed: int) -> None:
    """40 requests per seed: the served prompt equals the converter's (after the effort
    paragraph), and a request the converter refuses (results after a user's text) is a 400
    naming the same message."""
    tm = PromptTM(tok, reply="ok")
    _, _, tc = make_clients(tm)
    rng = random.Random(seed)
    for _ in range(40):
        body, thinking = _request(rng)
        r = tc.post(
            "/v1/messages", json={"model": MODEL, "max_tokens": 5, **body, "thinking": _thinking(thinking)}
        )
        try:
            want = recipe_messages_prompt(body, thinking)
        except Exception as e:  # noqa: BLE001 - the converter's refusal, compared below
            assert r.status_code == 400, (body, str(e))
            where = str(e).split(":", 1)[0]
            assert r.json()["error"]["message"].startswith(where + ":"), (r.json(), str(e))
            continue
        assert r.status_code == 200, (body, r.text)
        got = tok.decode(tm.received[-1].input_ids)
        assert _after_effort(got) == _after_effort(want), (body, thinking)


def _call(rng: random.Random, tools: list[dict[str, Any]]) -> str:
    params = []
    if rng.random() < 0.8:
        x = rng.choice(["v", "a b", "<x>", ""])
        params.append(f'<{D}parameter name="x" string="true">{x}</{D}parameter>\n')
    if rng.random() < 0.5:
        params.append(f'<{D}parameter name="n" string="false">{rng.choice(["1", "-2"])}</{D}parameter>\n')
    return f'<{D}invoke name="{rng.choice(tools)["name"]}">\n' + "".join(params) + f"</{D}invoke>\n"


def _reply(rng: random.Random) -> tuple[dict[str, Any], bool, str, bool]:
    """``(body, thinking, reply, calls)``: a one-turn request and the model's reply text."""
    tools = [_tool(i) for i in range(rng.randint(0, 2))]
    thinking = rng.random() < 0.5
    reply = ""
    if thinking:
        reply += rng.choice(["", "r", "let me think.\n", " spaced "]) + (
            "</think>" if rng.random() < 0.9 else ""
        )
    reply += rng.choice(["", "Hello.", "a\n\nb", " x ", " x \n", "a\n \n"] + (["\nlead"] if thinking else []))
    calls = bool(tools) and rng.random() < 0.6
    if calls:
        block = "".join(_call(rng, tools) for _ in range(rng.randint(1, 2)))
        reply += rng.choice(["\n\n", "", "\n"]) + f"<{D}tool_calls>\n{block}</{D}tool_calls>"
    body = {"messages": [{"role": "user", "content": "q"}], **({"tools": tools} if tools else {})}
    return body, thinking, reply, calls


@pytest.mark.parametrize("seed", range(2))
def test_random_replies_read_as_deepseek_recipe(tok: Any, seed: int) -> None:
    """25 replies per seed, streamed and not: the content blocks (``id`` and ``signature`` aside)
    and ``stop_reason`` equal the converter's, including an empty ``thinking`` block for a
    reasoning closed at once and the whitespace before a call block (``" x \\n"`` + calls keeps
    ``" x "``). A ``max_tokens`` cut (replies without calls) hands the converter the text of
    the tokens generated."""
    tm = PromptTM(tok, reply="ok")
    client, _, tc = make_clients(tm)
    rng = random.Random(seed)
    for _ in range(25):
        body, thinking, reply, calls = _reply(rng)
        ids = tok.encode(reply, add_special_tokens=False)
        max_tokens, finish, text = 1000, "stop", reply
        if not calls and len(ids) > 1 and rng.random() < 0.4:
            max_tokens, finish = rng.randint(1, len(ids) - 1), "length"
            text = tok.decode(ids[:max_tokens])
        tm.reply = reply
        want = recipe_messages_response(body, text, thinking, finish)
        kw = {"model": MODEL, "max_tokens": max_tokens, **body, "thinking": _thinking(thinking)}
        r = tc.post("/v1/messages", json=kw)
        assert r.status_code == 200, r.text
        msg = r.json()
        case = (reply, finish)
        assert comparable_content(msg["content"]) == comparable_content(want["content"]), case
        assert msg["stop_reason"] == want["stop_reason"], case
        with client.messages.stream(**kw) as s:
            final = s.get_final_message().model_dump(mode="json")
        assert comparable_content(final["content"]) == comparable_content(want["content"]), case
        assert final["stop_reason"] == want["stop_reason"], case

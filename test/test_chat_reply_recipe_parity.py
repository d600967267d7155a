"""Seeded random generated replies split by the chat completions route (non-streamed, and streamed
one character a chunk, folded by the ``openai`` client) and by DeepSeek's own response parser
(``deepseek-recipe``, the parser SGLang serves DeepSeek-V4 with) must give the same
``content``, ``reasoning_content`` and ``tool_calls``.

The replies mix thinking on and off, reasoning with and without ``</think>`` (whitespace-only
reasoning and reasoning that starts with the first characters of ``<think>`` included), text
before a DSML block of one to three invokes, ``string="true"`` and ``string="false"`` parameters
(nested JSON included), and a finish by EOS or by ``max_tokens``. Left out, each a documented
difference of this server:

* a stray ``<think>`` at the start of the reasoning is dropped here (SGLang's DeepSeek detectors);
* a ``</think>`` in the answer stays text here: the tokenizer marks it non-special, DeepSeek's
  parser drops it as a special token;
* a ``string="true"`` value of a parameter whose schema allows no string is read as the JSON
  value it spells (:mod:`~sglang_v4.entrypoints.openai.tool_args_repair`, vllm-project/vllm#30797);
* a parameter written twice makes the invoke malformed (SGLang's strict DeepSeek-V4 detector);
* text after the block stays content (vllm-project/vllm#56184);
* a reply cut by ``max_tokens`` inside DSML markup: no markup fragment reaches ``content`` or
  ``arguments`` here (:mod:`~sglang_v4.entrypoints.openai.tool_parser`), so the cuts are at the
  end of an invoke.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from chat_tools_testutil import CharTM, client_for, fold_chat_stream  # noqa: E402
from deepseek_recipe_testutil import recipe_message  # noqa: E402
from dsml_testutil import DSML, dsml_block, dsml_invoke, dsml_param  # noqa: E402


def _tool(name: str, props: dict[str, Any]) -> dict[str, Any]:
    params = {"type": "object", "properties": props}
    return {"type": "function", "function": {"name": name, "description": "d", "parameters": params}}


TOOLS = [
    _tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}),
    _tool("put", {"obj": {"type": "object"}, "flag": {"type": "boolean"}, "s": {"type": "string"}}),
]
STRING_PARAMS = ["city", "s"]
JSON_PARAMS = ["days", "obj", "flag", "city", "s"]
STRING_VALUES = ["Paris", "a b", "x\ny", '{"q":1}', "3", "", " sp "]
JSON_VALUES = ["3", "true", "null", '{"a": [1, {"b": null}]}', "[1,2]", "1.5", '"q"']
REASONING = ["hmm", "let me think\n", "", " r ", "  ", " \t", "  <", " <th", "\nstep"]
ANSWERS = ["", "Sure.", "ans\n", "  ", " \nok", "\nok", "\n\n"]


def _invoke(rng: random.Random) -> str:
    params, seen = [], set()
    for _ in range(rng.randint(0, 3)):
        if rng.random() < 0.5:
            key = rng.choice(STRING_PARAMS)
            p = dsml_param(key, True, rng.choice(STRING_VALUES))
        else:
            key = rng.choice(JSON_PARAMS)
            p = dsml_param(key, False, rng.choice(JSON_VALUES))
        if key not in seen:
            seen.add(key)
            params.append(p)
    return dsml_invoke(rng.choice(["get_weather", "put"]), *params)


def _reply(rng: random.Random, thinking: bool, tools: bool, finish: str) -> str:
    text = ""
    if thinking:
        text += rng.choice(REASONING)
        if rng.random() < 0.8:
            text += "</think>"
    text += rng.choice(ANSWERS)
    if tools and rng.random() < 0.7:
        block = dsml_block(*(_invoke(rng) for _ in range(rng.randint(1, 3))))
        if finish == "length" and rng.random() < 0.5:  # cut after one of its invokes
            ends = [
                i + len(f"</{DSML}invoke>")
                for i in range(len(block))
                if block.startswith(f"</{DSML}invoke>", i)
            ]
            block = block[: rng.choice(ends)]
        text += block
    return text


def _ours(tok: Any, body: dict[str, Any], reply: str, stream: bool, finish: str) -> dict[str, Any]:
    """``choices[0].message`` (as a dict) of the route for an engine writing ``reply``."""
    _, tc = client_for(CharTM(tok, reply, finish), allow_auto_truncate=False)
    r = tc.post(
        "/v1/chat/completions", json={"model": "m", **body, "max_tokens": len(reply), "stream": stream}
    )
    assert r.status_code == 200, r.text
    if not stream:
        return r.json()["choices"][0]["message"]
    msg = fold_chat_stream(r.text).choices[0].message
    return {**msg.model_dump(), "reasoning_content": (msg.model_extra or {}).get("reasoning_content")}


def _split(m: dict[str, Any]) -> tuple[str, str, list[tuple[str, Any]]]:
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or []
    ]
    return m.get("content") or "", m.get("reasoning_content") or "", calls


@pytest.mark.parametrize("seed", range(2))
def test_random_replies_split_as_deepseek_recipe(tok: Any, seed: int) -> None:
    """15 replies per seed: content, reasoning and calls equal DeepSeek's parse of the same text,
    non-streamed and folded from the stream."""
    rng = random.Random(seed)
    for _ in range(15):
        thinking, tools = rng.random() < 0.5, rng.random() < 0.8
        finish = rng.choice(["stop", "stop", "length"])
        reply = _reply(rng, thinking, tools, finish)
        if not reply:
            continue
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"thinking": thinking},
            **({"tools": TOOLS} if tools else {}),
        }
        want = _split(recipe_message(body, reply, thinking, finish))
        for stream in (False, True):
            assert _split(_ours(tok, body, reply, stream, finish)) == want, (reply, thinking, finish, stream)


@pytest.mark.parametrize("reply", ["  ", " <th"])
def test_reasoning_that_starts_with_whitespace_keeps_it(tok: Any, reply: str) -> None:
    """The case the random set first found: a reasoning cut (or stopped) without ``</think>``
    that is whitespace only, or whitespace then the first characters of ``<think>``, keeps its
    whitespace, as DeepSeek's parser reads it; only a whole stray ``<think>`` is dropped."""
    body = {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"thinking": True}}
    for finish in ("stop", "length"):
        want = recipe_message(body, reply, True, finish)["reasoning_content"]
        assert want == reply
        for stream in (False, True):
            assert _ours(tok, body, reply, stream, finish)["reasoning_content"] == want, (finish, stream)


@pytest.mark.parametrize("reply", ["\nAnswer.", "\n\n \nA", "\n\n"])
@pytest.mark.parametrize("tools", [False, True])
def test_chat_mode_answer_drops_its_leading_newlines(tok: Any, reply: str, tools: bool) -> None:
    """Found by the random set: in chat mode the prompt ends with ``</think>``, and the newlines
    the answer starts with leave the content, as after a ``</think>`` the model writes in
    thinking mode; DeepSeek's parser reads the answer so."""
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "hi"}],
        "chat_template_kwargs": {"thinking": False},
        **({"tools": TOOLS} if tools else {}),
    }
    want = recipe_message(body, reply, False)["content"] or ""
    assert want == reply.lstrip("\n")
    for stream in (False, True):
        assert (_ours(tok, body, reply, stream, "stop")["content"] or "") == want, stream

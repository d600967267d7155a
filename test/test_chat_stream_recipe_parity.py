"""Seeded random generated replies streamed by the chat completions route and by DeepSeek's own
chunk generator (``deepseek-recipe``'s ``ChatCompletionRequest.chunk_generator`` driven by its
``StreamProcessor``, one character a chunk) must have the chunk sequence an OpenAI client relies
on in common, and fold (``openai``'s ``ChatCompletionStreamState``) to the same message:

* the role chunk first, once; every tool call opened by one delta carrying ``index``, ``id``,
  ``type: "function"`` and the name, indices counting from 0 in order;
* ``finish_reason`` once, on the last chunk with a choice; the folded content, reasoning, calls
  (arguments as JSON) and finish reason equal.

Left out, each a documented difference of this server:

* usage: DeepSeek's generator puts it on the finish chunk of every stream; this route follows
  OpenAI's ``stream_options.include_usage`` (a last chunk with ``choices: []``, only when asked);
* thinking mode with empty reasoning (the reply starts with ``</think>``): DeepSeek's role chunk
  carries ``reasoning_content: ""``, so its fold is ``""`` where this route's is ``null``;
* the differences listed in ``test_chat_reply_recipe_parity.py`` (the replies come from the same
  kind of generator, without the cases it excludes).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

import deepseek_recipe as recipe  # noqa: E402
from chat_tools_testutil import CharTM, client_for, sse_chunks  # noqa: E402
from deepseek_recipe_testutil import recipe_body  # noqa: E402
from dsml_testutil import dsml_block, dsml_invoke, dsml_param  # noqa: E402
from openai.lib.streaming.chat._completions import ChatCompletionStreamState  # noqa: E402
from openai.types.chat import ChatCompletionChunk  # noqa: E402


def _tool(name: str, props: dict[str, Any]) -> dict[str, Any]:
    params = {"type": "object", "properties": props}
    return {"type": "function", "function": {"name": name, "description": "d", "parameters": params}}


TOOLS = [
    _tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}),
    _tool("put", {"obj": {"type": "object"}, "s": {"type": "string"}}),
]


def _reply(rng: random.Random, thinking: bool, tools: bool) -> str:
    text = ""
    if thinking:  # non-empty reasoning (empty reasoning is a documented difference)
        text += rng.choice(["hmm", "let me think\n", " r ", "a\nb"]) + "</think>"
    text += rng.choice(["", "Sure.", "ans\n", "ok ok"])
    if tools and rng.random() < 0.8:
        invokes = []
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.5:
                p = [dsml_param("city", True, rng.choice(["Paris", "a b", "x\ny"]))]
                p += [dsml_param("days", False, "3")] if rng.random() < 0.5 else []
                invokes.append(dsml_invoke("get_weather", *p))
            else:
                invokes.append(dsml_invoke("put", dsml_param("obj", False, '{"a": [1, null]}')))
        text += dsml_block(*invokes)
    return text


def _recipe_chunks(body: dict[str, Any], reply: str, thinking: bool) -> list[dict[str, Any]]:
    req = recipe.ChatCompletionRequest({**recipe_body(body, thinking), "stream": True})
    conv = req.convert(recipe.ConversionOptions())
    gen = recipe.ChatCompletionRequest.chunk_generator(conv, "id", "m")
    proc = recipe.StreamProcessor(gen, conv.parsing_options)
    out = proc.push(recipe.InferenceChunk.ready(prompt_usage=recipe.PromptUsage(prompt_tokens=3)))
    for ch in reply:
        out += proc.push(recipe.InferenceChunk.text(ch, 1))
    out += proc.push(recipe.InferenceChunk.finish(recipe.InferenceFinishReason.Stop))
    out += proc.finish()
    return [json.loads(c.to_json()) for c in out]


def _our_chunks(tok: Any, body: dict[str, Any], reply: str) -> list[dict[str, Any]]:
    _, tc = client_for(CharTM(tok, reply, "stop"), allow_auto_truncate=False)
    r = tc.post("/v1/chat/completions", json={"model": "m", **body, "max_tokens": len(reply), "stream": True})
    assert r.status_code == 200, r.text
    return sse_chunks(r.text)


def _shape(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client relies on: where the role and finish reason come, how calls open."""
    with_choice = [i for i, c in enumerate(chunks) if c["choices"]]
    deltas = [(i, c["choices"][0]) for i, c in enumerate(chunks) if c["choices"]]
    heads = [
        (t["index"], t.get("type"), t["function"].get("name"))
        for _, ch in deltas
        for t in ch["delta"].get("tool_calls") or []
        if t.get("id")
    ]
    return {
        "role": [i for i, ch in deltas if ch["delta"].get("role")] == [with_choice[0]],
        "finish": [i for i, ch in deltas if ch.get("finish_reason")] == [with_choice[-1]],
        "heads": heads,
    }


def _fold(chunks: list[dict[str, Any]]) -> tuple[Any, ...]:
    state = ChatCompletionStreamState()
    for c in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(c))
    choice = state.current_completion_snapshot.choices[0]
    msg = choice.message
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]
    reasoning = (msg.model_extra or {}).get("reasoning_content")
    return msg.content or "", reasoning, calls, choice.finish_reason


@pytest.mark.parametrize("seed", range(2))
def test_random_streams_match_deepseek_chunk_generator(tok: Any, seed: int) -> None:
    """8 replies per seed: chunk-sequence shape and folded message equal DeepSeek's."""
    rng = random.Random(seed)
    for _ in range(8):
        thinking, tools = rng.random() < 0.5, rng.random() < 0.8
        reply = _reply(rng, thinking, tools)
        if not reply:
            continue
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"thinking": thinking},
            **({"tools": TOOLS} if tools else {}),
        }
        want, ours = _recipe_chunks(body, reply, thinking), _our_chunks(tok, body, reply)
        assert _shape(want)["role"] and _shape(want)["finish"], want
        assert _shape(ours) == _shape(want), (reply, thinking)
        assert _fold(ours) == _fold(want), (reply, thinking)

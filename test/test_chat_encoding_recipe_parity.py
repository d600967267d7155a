"""Seeded random conversations rendered by :func:`~sglang_v4.entrypoints.chat_encoding.encode_messages`
and by DeepSeek's own converter and V4 encoder (``deepseek-recipe``, the renderer SGLang serves
DeepSeek-V4 with) must give the same prompt text, character for character.

The conversations mix system, user and assistant turns (with and without ``reasoning_content``),
assistant tool-call turns answered by tool results, thinking on and off, with and without tools.
Tool definitions are written in the key order DeepSeek's converter normalises them to (``name``,
``description``, ``parameters``): this server renders a definition as the client sent it
(sgl-project/sglang#33568), which the converter does not, so that difference is outside this set.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_prompt  # noqa: E402
from sglang_v4.entrypoints.chat_encoding import encode_messages  # noqa: E402


def _tool(i: int) -> dict[str, Any]:
    params = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    return {
        "type": "function",
        "function": {"name": f"f{i}", "description": f"Tool {i}.", "parameters": params},
    }


def _conversation(rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    """``(messages, tools, thinking)``: every tool call answered by its result before the next
    turn, the conversation ending at a user, assistant or tool turn."""
    tools = [_tool(i) for i in range(rng.randint(0, 2))]
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}] if rng.random() < 0.3 else []
    n_calls = 0
    for _ in range(rng.randint(1, 5)):
        kind = rng.choice(["user", "assistant", "call"] if tools else ["user", "assistant"])
        if kind == "user":
            msgs.append({"role": "user", "content": rng.choice(["hi", "and then?", "x y"])})
            continue
        m: dict[str, Any] = {"role": "assistant", "content": rng.choice(["a", "b c"])}
        if rng.random() < 0.5:
            m["reasoning_content"] = rng.choice(["r", "let me see"])
        if kind == "call":
            n_calls += 1
            cid = f"call_{n_calls}"
            m["content"] = rng.choice([None, "", "pre"])
            m["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": "f0", "arguments": '{"x": "v"}'}}
            ]
            msgs += [m, {"role": "tool", "tool_call_id": cid, "content": "res"}]
        else:
            msgs.append(m)
    return msgs, tools, rng.random() < 0.6


@pytest.mark.parametrize("seed", range(4))
def test_random_conversations_render_as_deepseek_recipe(seed: int) -> None:
    """60 conversations per seed: the prompt text equals DeepSeek's converter's, including an
    assistant turn that follows the last user turn and is followed by the generation prompt (in
    thinking mode without tools it is a finished earlier turn, its reasoning dropped:
    ``<｜Assistant｜></think>a``)."""
    rng = random.Random(seed)
    for _ in range(60):
        msgs, tools, thinking = _conversation(rng)
        body: dict[str, Any] = {"messages": msgs, **({"tools": tools} if tools else {})}
        want = recipe_prompt(body, thinking)
        got = encode_messages(msgs, thinking=thinking, tools=tools or None)
        assert got == want, (msgs, tools, thinking)


def test_trailing_assistant_turn_drops_its_reasoning_before_a_new_turn() -> None:
    """The case the random set first found: ``user, assistant(reasoning)`` with a generation
    prompt, thinking on, no tools. DeepSeek's converter renders the assistant turn as a finished
    earlier turn, ``<｜Assistant｜></think>a<｜end▁of▁sentence｜>``, then opens the new turn with
    ``<think>``; with tools the reasoning stays."""
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "r"}]
    want = recipe_prompt({"messages": msgs}, True)
    assert want.endswith("<｜Assistant｜></think>a<｜end▁of▁sentence｜><｜Assistant｜><think>")
    assert encode_messages(msgs, thinking=True) == want
    tools = [_tool(0)]
    with_tools = recipe_prompt({"messages": msgs, "tools": tools}, True)
    assert "<think>r</think>a" in with_tools
    assert encode_messages(msgs, thinking=True, tools=tools) == with_tools

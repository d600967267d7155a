"""A thirty-first set of public bug reports, replayed against the thinking side of
``POST /v1/chat/completions``: an answer written with thinking off (no ``<think>`` / ``</think>``
in the output, plain or under ``response_format``) kept as ``content``; a reply cut by
``max_tokens`` while still reasoning at the ``max`` effort; the outer ``reasoning_effort`` values
(``minimal``, ``xhigh``) normalized as DeepSeek's converter does; the Qwen3 spelling
``enable_thinking: false`` streamed, also over a server default of thinking on; and the reasoning
of an earlier tool-call turn passed back, as ``reasoning_content`` or as vLLM's ``reasoning``.

Every report passed as-is; the tests are regression guards.

The route runs in process over the fake tokenizer manager of ``openai_fake_tm`` (fast tier); the
prompt a request renders is read back from the engine request the fake receives. Oracles:
DeepSeek's own request converter, V4 encoder and response parser (``deepseek-recipe``), the
DeepSeek tokenizer (``tok``) for the truncated text, ``json.loads``, the ``openai`` client's types,
and the reports' stated expected values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from transformers import PreTrainedTokenizerFast

pytest.importorskip("deepseek_recipe")
pytest.importorskip("openai")

from deepseek_recipe_testutil import recipe_message, recipe_prompt  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from thinking_chat_testutil import CALL, THINK_END, TOOLS, post_chat, prompt_of, reasoning_of  # noqa: E402

ON = {"chat_template_kwargs": {"thinking": True}}
OFF = {"chat_template_kwargs": {"thinking": False}}


def _tm(tok: PreTrainedTokenizerFast, reply: str) -> FakeTM:
    """A ``FakeTM`` writing ``reply`` that reports constrained decoding available (a
    ``response_format`` grammar is accepted; the fake writes ``reply`` regardless)."""
    tm = FakeTM(tok, reply=reply)
    tm.grammar_enabled = True  # type: ignore[attr-defined]
    return tm


def _streamed(r: Any) -> tuple[str, str, str | None]:
    """The joined ``reasoning_content`` and ``content`` of a streamed response's choice 0 and its
    last ``finish_reason`` (chunks typed by the ``openai`` client; ``[DONE]`` asserted last)."""
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    reasoning, content, finish = "", "", None
    for e in events[:-1]:
        for ch in ChatCompletionChunk.model_validate(e).choices:
            reasoning += reasoning_of(ch.delta) or ""
            content += ch.delta.content or ""
            finish = ch.finish_reason or finish
    return reasoning, content, finish


@pytest.mark.parametrize("response_format", [None, {"type": "json_object"}], ids=["plain", "json_object"])
def test_sglang_4539_answer_without_think_tags_is_content(
    tok: PreTrainedTokenizerFast, response_format: dict[str, Any] | None
) -> None:
    """sgl-project/sglang#4539 (an output with neither ``<think>`` nor ``</think>`` -- the model
    skipped thinking, e.g. under structured outputs -- was put whole into ``reasoning_content``
    and ``content`` came back empty): with thinking off the whole answer is ``content`` and there
    is no ``reasoning_content``, streamed and not, as DeepSeek's response parser reads the same
    text; the JSON answer parses. Oracle: ``deepseek-recipe``'s response parser; ``json.loads``;
    the ``openai`` client's types."""
    reply = '{"answer": 4}'
    messages = [{"role": "user", "content": "2+2 as JSON"}]
    body: dict[str, Any] = {"messages": messages, **OFF}
    if response_format is not None:
        body["response_format"] = response_format
    expected = recipe_message({"messages": messages}, reply, thinking=False)
    assert expected["content"] == reply and not expected.get("reasoning_content")

    msg = ChatCompletion.model_validate(post_chat(_tm(tok, reply), body).json()).choices[0].message
    assert msg.content == reply
    assert json.loads(msg.content) == {"answer": 4}
    assert not reasoning_of(msg)

    reasoning, content, finish = _streamed(post_chat(_tm(tok, reply), {**body, "stream": True}))
    assert (reasoning, content, finish) == ("", reply, "stop")


def test_dsv4_dspark_56_max_effort_cut_while_thinking_is_all_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#56 (with ``reasoning_effort: "max"`` the
    reasoning often does not end within ``max_tokens``; the reply then comes back
    ``finish_reason: "length"`` with ``content: null`` and everything generated in the reasoning
    field): the cut reply is answered that way -- ``finish_reason`` ``"length"``, no content, the
    generated tokens' text whole in ``reasoning_content`` (nothing lost, no ``</think>`` fragment)
    -- streamed and not, as DeepSeek's response parser reads the same cut text. Oracle: the
    DeepSeek tokenizer's decode of the first ``max_tokens`` ids; ``deepseek-recipe``'s response
    parser (finish ``length``); the ``openai`` client's types."""
    reply = "First I add two and two, then I check the sum twice" + THINK_END + "4"
    limit = 6
    cut = tok.decode(tok.encode(reply, add_special_tokens=False)[:limit])
    assert THINK_END not in cut
    messages = [{"role": "user", "content": "2+2?"}]
    expected = recipe_message({"messages": messages}, cut, thinking=True, finish="length")
    assert expected["reasoning_content"] == cut and not expected.get("content")

    body = {"messages": messages, **ON, "reasoning_effort": "max", "max_tokens": limit}
    answer = ChatCompletion.model_validate(post_chat(_tm(tok, reply), body).json())
    assert answer.choices[0].finish_reason == "length"
    assert not answer.choices[0].message.content
    assert reasoning_of(answer.choices[0].message) == cut

    reasoning, content, finish = _streamed(post_chat(_tm(tok, reply), {**body, "stream": True}))
    assert (reasoning, content, finish) == (cut, "", "length")


def test_qwen_code_3724_tool_turn_reasoning_passed_back_is_rendered(tok: PreTrainedTokenizerFast) -> None:
    """QwenLM/qwen-code#3724 (a long thinking-mode session with tool calls: DeepSeek's API
    answered 400 "The reasoning_content in the thinking mode must be passed back to the API" once
    a client dropped an earlier assistant turn's ``reasoning_content``): a client that does pass
    the tool-call turn's reasoning back is served, and the prompt the route renders keeps that
    reasoning exactly where DeepSeek's own converter and V4 encoder put it (the turn is part of the
    current tool-use exchange). Oracle: ``deepseek-recipe``'s converter and encoder
    (``recipe_prompt``)."""
    thought = "I need the weather tool for Paris"
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": thought, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": CALL["id"], "content": '{"temp_c": 18}'},
    ]
    body = {"messages": messages, "tools": TOOLS}
    tm = FakeTM(tok, reply="Done" + THINK_END + "18 C in Paris.")
    post_chat(tm, {**body, **ON, "max_tokens": 2})
    got = prompt_of(tok, tm)
    assert got == recipe_prompt(body, thinking=True)
    assert thought in got


def _official_dir(tmp_path: Path) -> str:
    """A model directory whose ``config.json`` names the official reasoning-effort profile
    (DeepSeek-V4-Flash-0731's tiers)."""
    d = tmp_path / "official"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"dsv4_reasoning_effort_profile": "official"}))
    return str(d)


@pytest.mark.parametrize("effort", ["minimal", "xhigh"])
def test_vllm_54198_outer_effort_values_normalized_as_deepseek_does(
    tok: PreTrainedTokenizerFast, tmp_path: Path, effort: str
) -> None:
    """vllm-project/vllm#54198 (DeepSeek-V4's ``reasoning_effort`` is normalized to the encoder's
    tiers before rendering; the values outside ``low`` / ``high`` / ``max`` -- ``minimal`` and
    ``xhigh`` -- were undocumented and rendered inconsistently across servers, cf.
    xLLM-AI/xllm#2126): each is accepted and renders the prompt DeepSeek's own converter and V4
    encoder render for it (thinking on, the official profile), never a 400 and never the raw
    value. Oracle: ``deepseek-recipe``'s converter and encoder (``recipe_prompt`` with that
    effort)."""
    body = {"messages": [{"role": "user", "content": "Hi"}], **ON, "reasoning_effort": effort}
    tm = FakeTM(tok)
    post_chat(tm, {**body, "max_tokens": 2}, model_path=_official_dir(tmp_path))
    assert prompt_of(tok, tm) == recipe_prompt({"messages": body["messages"]}, thinking=True, effort=effort)


@pytest.mark.parametrize("server_default", [None, {"thinking": True}], ids=["no-default", "default-on"])
def test_sglang_5874_enable_thinking_false_streams_content(
    tok: PreTrainedTokenizerFast, server_default: dict[str, Any] | None
) -> None:
    """sgl-project/sglang#5874 and vllm-project/vllm#19839 (``chat_template_kwargs:
    {"enable_thinking": false}``, the Qwen3 spelling of the switch: the streamed answer came in
    ``reasoning_content`` deltas and ``content`` stayed null), with xorbitsai/inference#3647 (the
    same switch still let ``<think>`` tags through): the request renders DeepSeek's chat-mode
    prompt (also over a server default of thinking on: the request's own switch wins), and the
    answer is ``content`` only -- streamed and not, no ``reasoning_content``, no think tag.
    Oracle: ``deepseek-recipe``'s converter and encoder in chat mode and its response parser;
    the ``openai`` client's types."""
    reply = "I am a DeepSeek model."
    messages = [{"role": "user", "content": "Who are you?"}]
    body = {"messages": messages, "chat_template_kwargs": {"enable_thinking": False}}
    args = {} if server_default is None else {"default_chat_template_kwargs": server_default}
    expected = recipe_message({"messages": messages}, reply, thinking=False)
    assert expected["content"] == reply and not expected.get("reasoning_content")

    tm = FakeTM(tok, reply=reply)
    msg = ChatCompletion.model_validate(post_chat(tm, body, **args).json()).choices[0].message
    assert prompt_of(tok, tm) == recipe_prompt({"messages": messages}, thinking=False)
    assert (msg.content, reasoning_of(msg)) == (reply, None)

    tm = FakeTM(tok, reply=reply)
    reasoning, content, finish = _streamed(post_chat(tm, {**body, "stream": True}, **args))
    assert prompt_of(tok, tm) == recipe_prompt({"messages": messages}, thinking=False)
    assert (reasoning, content, finish) == ("", reply, "stop")
    assert "<think>" not in content and THINK_END not in content


def test_openai_agents_js_1669_reasoning_field_in_history_is_the_turns_reasoning(
    tok: PreTrainedTokenizerFast,
) -> None:
    """openai/openai-agents-js#1669 (a provider that returns the assistant's thought as
    ``reasoning`` -- vLLM's name for ``reasoning_content`` -- gets it replayed as ``reasoning`` on
    that same assistant message; cf. cloudflare/ai#451, where the field was smeared into
    ``content`` instead): a tool-call turn replayed with ``reasoning`` renders exactly the prompt
    of the same turn replayed with ``reasoning_content`` -- the thought in the turn's thinking
    block, not in its text and not lost -- which is DeepSeek's own converter and V4 encoder's
    prompt for ``reasoning_content``. Oracle: ``deepseek-recipe``'s converter and encoder
    (``recipe_prompt``)."""
    thought = "Paris needs the weather tool"
    tail = [{"role": "tool", "tool_call_id": CALL["id"], "content": '{"temp_c": 18}'}]
    ask = {"role": "user", "content": "Weather in Paris?"}

    def turn(field: str) -> list[dict[str, Any]]:
        return [ask, {"role": "assistant", "content": "", field: thought, "tool_calls": [CALL]}, *tail]

    want = recipe_prompt({"messages": turn("reasoning_content"), "tools": TOOLS}, thinking=True)
    assert thought in want
    tm = FakeTM(tok)
    post_chat(tm, {"messages": turn("reasoning"), "tools": TOOLS, **ON, "max_tokens": 2})
    assert prompt_of(tok, tm) == want

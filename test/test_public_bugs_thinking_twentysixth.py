"""A twenty-sixth set of public bug reports, replayed against the thinking side of the chat route
and SGLang's ``/separate_reasoning``: ``chat_template_kwargs`` ``enable_thinking`` in both
directions, a chat-mode answer never routed into ``reasoning_content``, a reasoning cut by the
token limit, ``separate_reasoning: false``, an empty reasoning, a ``<`` that is not a tag, tool
calls after the reasoning and tool-call syntax inside it, a ``<think>`` in the middle of a chat-mode
answer, and ``response_format`` with and without thinking.

Every report passed as-is; the tests are regression guards.

The routes run in process over the fake tokenizer manager of ``openai_fake_tm`` (fast tier).
Oracles: DeepSeek's own converter, V4 encoder and response parser (``deepseek-recipe``), the
reports' stated expected values, OpenAI's ``finish_reason`` definition, xgrammar's own matcher,
and the ``openai`` client's types.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _client
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")
openai = pytest.importorskip("openai")
xgr = pytest.importorskip("xgrammar")

from deepseek_recipe_testutil import recipe_message, recipe_prompt  # noqa: E402
from openai.types.chat import ChatCompletionChunk  # noqa: E402
from thinking_chat_testutil import (  # noqa: E402
    HI,
    THINK_END,
    TOOLS,
    chat_answer,
    post_chat,
    prompt_of,
    reasoning_of,
)

ON = {"chat_template_kwargs": {"thinking": True}}
OFF = {"chat_template_kwargs": {"thinking": False}}
#: a DSML tool-call block calling ``get_weather`` for Paris, as DeepSeek-V4 writes it
CALL_BLOCK = (
    "<｜DSML｜tool_calls>\n"
    '<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>"
)


def _chunks(tm: FakeTM, body: dict[str, Any], **args: Any) -> list[ChatCompletionChunk]:
    """The streamed answer's chunks, each typed by the client; ``[DONE]`` asserted."""
    events = sse_data_events(post_chat(tm, {**body, "stream": True}, **args))
    assert events and events[-1] == "[DONE]", events[-3:]
    return [ChatCompletionChunk.model_validate(e) for e in events[:-1]]


def _streamed(tm: FakeTM, body: dict[str, Any], **args: Any) -> tuple[str, str, str | None, int]:
    """``(reasoning, content, finish_reason, tool-call deltas)`` of the streamed answer, joined."""
    reasoning = content = ""
    finish: str | None = None
    calls = 0
    for ch in _chunks(tm, body, **args):
        for c in ch.choices:
            reasoning += reasoning_of(c.delta) or ""
            content += c.delta.content or ""
            finish = c.finish_reason or finish
            calls += len(c.delta.tool_calls or [])
    return reasoning, content, finish, calls


# --------------------------------------------------------------------------- the thinking switch


@pytest.mark.parametrize("enable", [False, True])
def test_mlx_omni_115_enable_thinking_reaches_the_template_both_ways(
    tok: PreTrainedTokenizerFast, enable: bool
) -> None:
    """madroidmaq/mlx-omni-server#115 (``enable_thinking: false`` was dropped before the template
    ran, so the prompt was still primed with ``<think>`` and the model reasoned): Qwen's spelling
    ``chat_template_kwargs.enable_thinking`` must switch V4's thinking mode either way, the
    prompt ending ``</think>`` when off and ``<think>`` when on. Oracle: DeepSeek's converter
    and V4 encoder for the same turn in that mode."""
    tm = FakeTM(tok, reply="Fine.")
    post_chat(tm, {"messages": HI, "chat_template_kwargs": {"enable_thinking": enable}})
    assert prompt_of(tok, tm) == recipe_prompt({"messages": HI}, enable)


@pytest.mark.parametrize("max_tokens", [64, 3])
def test_qwisp_100_chat_mode_answer_is_never_routed_into_reasoning(
    tok: PreTrainedTokenizerFast, max_tokens: int
) -> None:
    """penta2himajin/qwisp#100 (with ``enable_thinking: false`` the prompt pre-closes the
    reasoning, the output never holds ``</think>``, and a split reading "no end tag, all
    reasoning" put the whole answer in ``reasoning_content``, ``content`` empty): with thinking
    off the answer is ``content`` -- also when cut by ``max_tokens`` -- streamed and not.
    Oracle: DeepSeek's response parser in chat mode with the same finish."""
    reply = "Paris is the capital of France."
    body = {"messages": HI, "chat_template_kwargs": {"enable_thinking": False}, "max_tokens": max_tokens}
    finish = "stop" if max_tokens == 64 else "length"
    cut = tok.decode(tok.encode(reply, add_special_tokens=False)[:max_tokens])
    want = recipe_message({"messages": HI}, cut, False, finish)
    choice = chat_answer(FakeTM(tok, reply=reply), body).choices[0]
    assert (reasoning_of(choice.message), choice.message.content) == (None, want["content"])
    assert choice.finish_reason == finish
    assert _streamed(FakeTM(tok, reply=reply), body) == ("", want["content"], finish, 0)


def test_lmstudio_1602_reasoning_cut_by_the_limit_says_length(tok: PreTrainedTokenizerFast) -> None:
    """lmstudio-ai/lmstudio-bug-tracker#1602 (a reply with thousands of reasoning tokens and an
    empty ``content`` came back with ``finish_reason: "stop"``, so every client took it as a
    finished answer): a thinking-mode reply cut by ``max_tokens`` before ``</think>`` must say
    ``"length"`` (OpenAI: "the maximum number of tokens specified in the request was reached"),
    its text the reasoning, streamed and not, with ``completion_tokens`` the limit. Oracle:
    OpenAI's ``finish_reason`` definition; DeepSeek's response parser for the cut text."""
    reply = "First, 6 times 7 is 42, which I should double check before answering."
    n = 5
    cut = tok.decode(tok.encode(reply, add_special_tokens=False)[:n])
    want = recipe_message({"messages": HI}, cut, True, "length")
    ans = chat_answer(FakeTM(tok, reply=reply), {**ON, "messages": HI, "max_tokens": n})
    choice = ans.choices[0]
    assert choice.finish_reason == "length"
    assert (reasoning_of(choice.message), choice.message.content or "") == (want["reasoning_content"], "")
    assert ans.usage is not None and ans.usage.completion_tokens == n
    got = _streamed(FakeTM(tok, reply=reply), {**ON, "messages": HI, "max_tokens": n})
    assert got == (want["reasoning_content"], "", "length", 0)


def test_vllm_33915_include_reasoning_false_drops_only_the_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#33915 (``include_reasoning: false``, OpenRouter's and OpenAI's filter,
    was honoured for gpt-oss only): the reasoning still runs but is left out of the answer,
    streamed and not, the answer untouched and ``usage`` still counting every generated token.
    Oracle: DeepSeek's response parser for the answer; the tokenizer's count of the reply."""
    reply = "Let me think about the greeting.</think>Hello!"
    want = recipe_message({"messages": HI}, reply, True)
    body = {**ON, "messages": HI, "include_reasoning": False}
    ans = chat_answer(FakeTM(tok, reply=reply), body)
    msg = ans.choices[0].message
    assert (reasoning_of(msg), msg.content) == (None, want["content"])
    assert ans.usage is not None
    assert ans.usage.completion_tokens == len(tok.encode(reply, add_special_tokens=False))
    assert _streamed(FakeTM(tok, reply=reply), body) == ("", want["content"], "stop", 0)


def test_omniroute_13620_reasoning_streams_live_before_the_answer(tok: PreTrainedTokenizerFast) -> None:
    """diegosouzapw/OmniRoute#13620 (reasoning-only chunks were held back until the first
    ``content`` delta, so a long reasoning showed nothing for a minute): the reasoning goes out
    as it is generated -- in several deltas, every one before the first ``content`` delta -- and
    ``stream_reasoning: false`` (SGLang's switch) sends it as one delta instead. Oracle: the
    DeepSeek-V4 tokenizer's count of the reasoning's tokens; DeepSeek's response parser for the
    text."""
    reply = "First the greeting, then a short friendly answer.</think>Hello!"
    want = recipe_message({"messages": HI}, reply, True)
    n_reasoning = len(tok.encode(want["reasoning_content"], add_special_tokens=False))
    for live in (True, False):
        chunks = _chunks(FakeTM(tok, reply=reply), {**ON, "messages": HI, "stream_reasoning": live})
        kinds = [
            ("r" if reasoning_of(c.delta) else "c")
            for ch in chunks
            for c in ch.choices
            if reasoning_of(c.delta) or c.delta.content
        ]
        joined = "".join(reasoning_of(c.delta) or "" for ch in chunks for c in ch.choices)
        assert joined == want["reasoning_content"]
        assert kinds == sorted(kinds, key="rc".index), kinds  # all reasoning before the answer
        assert kinds.count("r") == (n_reasoning if live else 1), (live, kinds)


# --------------------------------------------------------------------------- the split itself


def test_sglang_3202_separate_reasoning_false_keeps_the_raw_text(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#3202 (the ``separate_reasoning`` request field: a request that sets it
    ``false`` must not have its reasoning separated, whatever the server's parser): the answer is
    the generated text as written, ``</think>`` included, with no ``reasoning_content``, streamed
    and not. Oracle: the generated text (the tokenizer's decoding of the reply's ids)."""
    reply = "Six sevens.</think>It is 42."
    raw = tok.decode(tok.encode(reply, add_special_tokens=False))
    body = {**ON, "messages": HI, "separate_reasoning": False}
    msg = chat_answer(FakeTM(tok, reply=reply), body).choices[0].message
    assert (reasoning_of(msg), msg.content) == (None, raw)
    assert _streamed(FakeTM(tok, reply=reply), body) == ("", raw, "stop", 0)
    # and the default (true) does separate the same text
    msg = chat_answer(FakeTM(tok, reply=reply), {**ON, "messages": HI}).choices[0].message
    assert (reasoning_of(msg), msg.content) == ("Six sevens.", "It is 42.")


def test_langchain_36194_empty_reasoning_is_no_reasoning_block(tok: PreTrainedTokenizerFast) -> None:
    """langchain-ai/langchain#36194 (a server sent ``reasoning_content: ""`` for a turn with no
    reasoning, and clients built an empty reasoning block from it): a thinking-mode reply that
    closes its reasoning at once (``</think>Answer.``) has no reasoning -- no non-empty
    ``reasoning_content`` and no stream chunk carrying an empty-string one -- and the answer is
    DeepSeek's. Oracle: DeepSeek's response parser (``reasoning_content`` empty, the content)."""
    reply = "</think>Answer."
    want = recipe_message({"messages": HI}, reply, True)
    assert want["reasoning_content"] == ""
    msg = chat_answer(FakeTM(tok, reply=reply), {**ON, "messages": HI}).choices[0].message
    assert not reasoning_of(msg) and msg.content == want["content"]
    chunks = _chunks(FakeTM(tok, reply=reply), {**ON, "messages": HI})
    deltas = [c.delta for ch in chunks for c in ch.choices]
    assert all(reasoning_of(d) != "" for d in deltas), deltas
    assert "".join(d.content or "" for d in deltas) == want["content"]


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_sglang_8099_a_lt_that_is_not_a_tag_is_released_at_once(size: int) -> None:
    """sgl-project/sglang#8099 (the streaming detector kept buffering any text that began with
    ``<`` though it could no longer become ``<think>``, so ``<Direct answer without thinking``
    came out late): once the characters read rule out a tag, they come out with that very feed,
    and the text joined is the whole text, for every chunk size. Oracle: the report's stated
    behaviour and input; ``str.startswith`` for what can still be a tag."""
    from sglang_v4.entrypoints.openai.reasoning_parser import ReasoningParser

    text = "<Direct answer without thinking"
    p = ReasoningParser()
    out = ""
    for i in range(0, len(text), size):
        r, c = p.feed(text[i : i + size])
        out += r + c
        seen = text[: i + size]
        # all that can no longer start "<think>" or "</think>" has been released
        if not any(tag.startswith(seen) for tag in ("<think>", THINK_END)):
            assert out == seen, (seen, out)
    r, c = p.flush()
    assert out + r + c == text


def test_renderers_152_text_before_a_mid_answer_think_stays_content(tok: PreTrainedTokenizerFast) -> None:
    """PrimeIntellect-ai/renderers#152 (a DeepSeek-V4 parser took every token before a later
    ``</think>`` as reasoning, folding the answer's text written before a mid-stream ``<think>``
    into ``reasoning_content``): in chat mode the whole reply is the answer -- the text before the
    ``<think>`` included -- the same streamed and not. Oracle: DeepSeek's response parser in chat
    mode (it drops the ``</think>`` special token it reads; the tokenizer marks the tag
    non-special, so the text keeps it)."""
    reply = "Sure. <think>draft</think> Done."
    want = recipe_message({"messages": HI}, reply, False)
    msg = chat_answer(FakeTM(tok, reply=reply), {**OFF, "messages": HI}).choices[0].message
    assert reasoning_of(msg) is None and want.get("reasoning_content") is None
    assert msg.content is not None and msg.content.replace(THINK_END, "") == want["content"]
    assert msg.content.startswith("Sure. ")
    assert _streamed(FakeTM(tok, reply=reply), {**OFF, "messages": HI}) == ("", msg.content, "stop", 0)


# --------------------------------------------------------------------------- tools


def test_vllm_51679_tool_parser_does_not_take_the_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#51679 (the tool parser consumed ``</think>`` and merged the reasoning
    into ``content``, with no way to split it again): with tools offered, a reasoning, then
    ``</think>`` and a DSML call, gives the reasoning in ``reasoning_content``, the call in
    ``tool_calls`` and no text in ``content``, streamed and not. Oracle: DeepSeek's response
    parser (reasoning, content, the call's name and arguments)."""
    reply = "Paris weather needs the tool.</think>\n\n" + CALL_BLOCK
    body = {**ON, "messages": HI, "tools": TOOLS}
    want = recipe_message(body, reply, True)
    choice = chat_answer(FakeTM(tok, reply=reply), body).choices[0]
    msg = choice.message
    assert reasoning_of(msg) == want["reasoning_content"]
    assert (msg.content or "") == want["content"]
    got = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]
    assert got == [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in want["tool_calls"]
    ]
    assert choice.finish_reason == "tool_calls"
    reasoning, content, finish, calls = _streamed(FakeTM(tok, reply=reply), body)
    assert (reasoning, content, finish) == (want["reasoning_content"], want["content"], "tool_calls")
    assert calls >= 1


def test_lmstudio_1592_tool_syntax_in_reasoning_prose_is_no_call(tok: PreTrainedTokenizerFast) -> None:
    """lmstudio-ai/lmstudio-bug-tracker#1592 (the tool-call parser scanned inside the reasoning
    and took prose about call syntax -- ``<tool_call>``, ``<function=...>`` -- as call attempts):
    a reasoning that talks about calls in other formats, then a plain answer, gives no call:
    ``finish_reason`` ``stop``, the reasoning and answer DeepSeek's, streamed and not. Oracle:
    DeepSeek's response parser (no ``tool_calls``)."""
    reply = (
        'Other models write <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "</tool_call> or <function=get_weather>; I already know it is sunny.</think>It is sunny in Paris."
    )
    body = {**ON, "messages": HI, "tools": TOOLS}
    want = recipe_message(body, reply, True)
    assert not want.get("tool_calls")
    choice = chat_answer(FakeTM(tok, reply=reply), body).choices[0]
    assert not choice.message.tool_calls and choice.finish_reason == "stop"
    assert (reasoning_of(choice.message), choice.message.content) == (
        want["reasoning_content"],
        want["content"],
    )
    assert _streamed(FakeTM(tok, reply=reply), body) == (
        want["reasoning_content"],
        want["content"],
        "stop",
        0,
    )


# --------------------------------------------------------------------------- response_format


def _grammar_of(tok: PreTrainedTokenizerFast, thinking: bool, response_format: dict[str, Any]) -> Any:
    """xgrammar's own compiled grammar of what the chat route asks the engine for (the
    ``structural_tag`` or ``json_schema`` of its sampling parameters), over an 8-token toy
    vocabulary (the matcher works on strings)."""
    tm = FakeTM(tok, reply="x")
    tm.grammar_enabled = True  # a server with a grammar backend
    post_chat(
        tm,
        {"messages": HI, "chat_template_kwargs": {"thinking": thinking}, "response_format": response_format},
    )
    sp = tm.received[-1].sampling_params
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([f"<t{i}>" for i in range(8)]))
    if "structural_tag" in sp:
        return compiler.compile_structural_tag(sp["structural_tag"])
    return compiler.compile_json_schema(sp["json_schema"])


def _takes(grammar: Any, text: str) -> bool:
    """Whether xgrammar's matcher of ``grammar`` takes ``text`` as a whole answer."""
    m = xgr.GrammarMatcher(grammar)
    return bool(m.accept_string(text)) and bool(m.is_completed())


def test_sglang_12551_json_mode_with_thinking_leaves_the_reasoning_free(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#12551 (structured output with a reasoning parser only worked once the
    model wrote the think-end token: the grammar must leave the reasoning free and constrain the
    answer after it): in thinking mode a ``json_object`` answer grammar takes free reasoning,
    ``</think>`` and then JSON, and no ending without both. Oracle: xgrammar's own matcher of the
    grammar the route sends."""
    g = _grammar_of(tok, True, {"type": "json_object"})
    assert _takes(g, 'Any text, even {"not": closed.</think>{"a": 1}')
    assert not _takes(g, '{"a": 1}')  # the JSON alone would stay in the reasoning
    assert not _takes(g, "Reasoning only.")
    assert not _takes(g, "Reasoning.</think>not json")


def test_dynamo_11203_json_answer_is_content_not_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """ai-dynamo/dynamo#11203 (with ``response_format: json_object`` and a reasoning parser the
    whole JSON answer was trapped in ``reasoning_content`` and ``content`` was null): the JSON
    after ``</think>`` is ``content`` -- it parses -- and the reasoning is ``reasoning_content``,
    streamed and not. Oracle: DeepSeek's response parser and ``json.loads``."""
    reply = 'The user wants fruits.</think>{"fruits": ["apple", "banana"]}'
    body = {**ON, "messages": HI, "response_format": {"type": "json_object"}}
    want = recipe_message({"messages": HI}, reply, True)
    tm = FakeTM(tok, reply=reply)
    tm.grammar_enabled = True
    msg = chat_answer(tm, body).choices[0].message
    assert (reasoning_of(msg), msg.content) == (want["reasoning_content"], want["content"])
    assert json.loads(msg.content or "null") == {"fruits": ["apple", "banana"]}
    tm = FakeTM(tok, reply=reply)
    tm.grammar_enabled = True
    assert _streamed(tm, body) == (want["reasoning_content"], want["content"], "stop", 0)


def test_maclocal_api_44_chat_mode_json_schema_is_plain_json(tok: PreTrainedTokenizerFast) -> None:
    """scouzi1966/maclocal-api#44 (a ``json_schema`` answer of a thinking-capable model came
    wrapped in ``<think>`` tags and was moved into ``reasoning_content``, ``content`` empty): with
    thinking off, the answer grammar is the schema alone -- no think tags can be written -- and the
    JSON answer is ``content``. Oracle: xgrammar's own matcher; ``json.loads``."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    rf = {"type": "json_schema", "json_schema": {"name": "planet", "schema": schema}}
    g = _grammar_of(tok, False, rf)
    assert _takes(g, '{"name": "Saturn"}')
    assert not _takes(g, '<think>x</think>{"name": "Saturn"}')
    tm = FakeTM(tok, reply='{"name": "Saturn"}')
    tm.grammar_enabled = True
    msg = chat_answer(tm, {**OFF, "messages": HI, "response_format": rf}).choices[0].message
    assert reasoning_of(msg) is None and json.loads(msg.content or "null") == {"name": "Saturn"}


# --------------------------------------------------------------------------- /separate_reasoning


def test_sglang_4000_separate_reasoning_route_splits_as_the_chat_route(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#4000 (the reasoning parser for SGLang's native API: a text from
    ``/generate`` is split by ``POST /separate_reasoning``): the route gives the split DeepSeek's
    parser gives the same text, and an unknown ``reasoning_parser`` is a 400 naming the field.
    Oracle: DeepSeek's response parser; SGLang's native error shape."""
    text = "Six sevens.</think>It is 42."
    want = recipe_message({"messages": HI}, text, True)
    client = _client(FakeTM(tok))
    r = client.post("/separate_reasoning", json={"text": text, "reasoning_parser": "deepseek-v4"})
    assert r.status_code == 200, r.text
    assert r.json() == {"reasoning_text": want["reasoning_content"], "text": want["content"]}
    bad = client.post("/separate_reasoning", json={"text": text, "reasoning_parser": "no-such"})
    assert bad.status_code == 400 and "reasoning_parser" in bad.json()["error"]["message"]
    # a bad request changes nothing: the next one answers as before
    assert (
        client.post("/separate_reasoning", json={"text": text, "reasoning_parser": "deepseek-v4"}).json()
        == r.json()
    )

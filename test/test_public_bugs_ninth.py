"""A ninth set of public bug reports of DeepSeek-V4 serving (vLLM, SGLang, DeepSeek's API),
replayed on the in-process OpenAI routes over :class:`~fake_prompt_tm.PromptTM` (the model's
reply is scripted; the DSML tool-call parser, the reasoning parser, the chat encoding and the
Responses input are ours), and one on the model math (HF transformers' DeepSeek-V4 as oracle).
Each test names its report.

Two reports showed faults here, fixed with their tests: a ``string="true"`` parameter whose schema
allows no string (an ``array`` written as the text ``[{...}]``, an ``["integer", "null"]`` one
written ``"5"``) came back as a JSON string, not the value (vllm-project/vllm#30797, also met by
vllm-project/vllm#33703's test): the tool parser now holds such a value to its end and sends the
JSON value it spells when it has an allowed type; and a bare ``<｜DSML｜invoke name=...>`` started
before ``</think>`` did not end the reasoning (sgl-project/sglang#32539): the text before it went
to ``content`` (stopped) or the whole call stayed in the reasoning (cut); it now ends the reasoning
as a ``<｜DSML｜tool_calls>`` block start does. The others passed and are kept: an ``arguments``
wrapper unwrapped (vllm-project/vllm#40959); no call made up from an invoke whose JSON body is
not an object (sgl-project/sglang#39434); no DSML markup in streamed content and ``{}`` for a
call without parameters (vllm-project/vllm#40801); ``tool_choice`` ``required`` and named with
thinking on (deepseek-ai/DeepSeek-V3#1376), and the Messages API's ``tool`` / ``any``
(deepseek-ai/awesome-deepseek-integration#598); a Responses ``function_call`` and its
``function_call_output`` paired (deepseek-ai/DeepSeek-V3#1611), with a developer message between
them too (deepseek-ai/DeepSeek-V3#1588); a reply without ``</think>`` is the answer
(vllm-project/vllm#48645: streamed or not, it stays the reasoning); prompt lengths 3 mod 4 decode as HF does (vllm-project/vllm#55927).

Oracles: the ``openai`` client's own types and stream accumulation, the tools' JSON schemas (a
value must validate: ``jsonschema``), the reports' stated expectations, the chat route on the same
fake for the Responses API's prompt, HF transformers (fp32, tiny random weights) for the model.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from anthropic_testutil import WEATHER as MESSAGES_WEATHER
from anthropic_testutil import make_clients as make_messages_clients
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM
from fake_prompt_tm import D as DSML
from responses_testutil import CHAT_WEATHER, WEATHER
from responses_testutil import make_client as make_responses_client
from responses_testutil import post as post_responses
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(300)

USER = {"role": "user", "content": "Plan my day."}


def _tool(name: str, props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        params["required"] = required
    return {"type": "function", "function": {"name": name, "parameters": params}}


def _block(name: str, *params: tuple[str, str, str]) -> str:
    """One DSML tool-call block of one invoke; ``params`` are ``(name, string flag, value)``."""
    body = "\n".join(f'<{DSML}parameter name="{k}" string="{s}">{v}</{DSML}parameter>' for k, s, v in params)
    return (
        f'\n\n<{DSML}tool_calls>\n<{DSML}invoke name="{name}">\n{body}\n</{DSML}invoke>\n</{DSML}tool_calls>'
    )


def _calls(tok: PreTrainedTokenizerFast, reply: str, tools: list[dict[str, Any]], **kw: Any) -> list[Any]:
    """The tool calls of ``reply`` non-streamed and, accumulated by hand from the ``openai``
    client's stream chunks, streamed; asserts both agree and returns the non-streamed ones."""
    client, _ = make_responses_client(PromptTM(tok, reply=reply))
    msgs: Any = [USER]
    whole = client.chat.completions.create(model=MODEL, messages=msgs, tools=tools, **kw)  # type: ignore[arg-type]
    calls = whole.choices[0].message.tool_calls or []
    streamed: dict[int, dict[str, str]] = {}
    content = ""
    for chunk in client.chat.completions.create(model=MODEL, messages=msgs, tools=tools, stream=True, **kw):  # type: ignore[arg-type]
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for d in ch.delta.tool_calls or []:
                s = streamed.setdefault(d.index, {"name": "", "arguments": ""})
                if d.function and d.function.name:
                    s["name"] += d.function.name
                if d.function and d.function.arguments:
                    s["arguments"] += d.function.arguments
    assert DSML not in content and DSML not in (whole.choices[0].message.content or "")
    assert [(s["name"], json.loads(s["arguments"])) for _, s in sorted(streamed.items())] == [
        (c.function.name, json.loads(c.function.arguments)) for c in calls
    ]
    return calls


def _no_constant(name: str) -> None:
    raise AssertionError(f"{name} in arguments: not JSON")


def _schema(tool: dict[str, Any]) -> dict[str, Any]:
    return tool["function"]["parameters"]


# --------------------------------------------------------------------------- parameter types

TODO = _tool(
    "todo_write",
    {
        "todos": {"type": "array", "items": {"type": "object", "properties": {"task": {"type": "string"}}}},
        "meta": {"type": "object"},
        "priority": {"type": "integer"},
        "note": {"type": "string"},
    },
    ["todos"],
)


def test_vllm_30797_array_and_object_parameters_written_as_strings_are_json(
    tok: PreTrainedTokenizerFast,
) -> None:
    """vllm-project/vllm#30797: the DeepSeek DSML parser returned array and object parameters as
    escaped strings (``"todos": "[{...}]"``), which Claude Code's strict validation rejects.
    Expected: a parameter whose schema type is ``array`` / ``object`` / ``integer`` comes back as
    that JSON value even when the model flagged it ``string="true"``, streamed and not; a
    ``string`` parameter keeps its text (``"[1]"`` stays a string); the arguments validate."""
    reply = "Planning." + _block(
        "todo_write",
        ("todos", "true", '[{"task": "write"}, {"task": "test"}]'),
        ("meta", "true", ' {"by": "me"} '),
        ("priority", "true", "2"),
        ("note", "true", "[1]"),
    )
    (call,) = _calls(tok, reply, [TODO])
    args = json.loads(call.function.arguments)
    assert args == {
        "todos": [{"task": "write"}, {"task": "test"}],
        "meta": {"by": "me"},
        "priority": 2,
        "note": "[1]",
    }
    jsonschema.validate(args, _schema(TODO))


def test_vllm_30797_a_value_that_is_not_json_stays_the_written_string(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#30797 (the repair's limit): a ``string="true"`` value of an ``array``
    parameter that does not parse as an array (free text, or a JSON value of another type) is
    left as the string the model wrote, not dropped or mangled; the other parameters are kept."""
    reply = _block("todo_write", ("todos", "true", "write, then test"), ("priority", "true", "2.5"))
    (call,) = _calls(tok, reply, [TODO])
    assert json.loads(call.function.arguments) == {"todos": "write, then test", "priority": "2.5"}
    # a number too large for a float, NaN: no JSON value (the arguments must stay valid JSON)
    big = _tool("scale", {"x": {"type": "number"}, "y": {"type": "number"}})
    (call,) = _calls(tok, _block("scale", ("x", "true", "1e999"), ("y", "true", "NaN")), [big])
    assert json.loads(call.function.arguments, parse_constant=_no_constant) == {"x": "1e999", "y": "NaN"}


def test_vllm_33703_multi_type_parameters_render_and_parse(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#33703: a tool whose parameter has a list ``type`` (``["string",
    "null"]``, as Kilo Code sends) crashed the DeepSeek DSML path. Expected: 200; the schema is
    in the prompt; a string value stays a string (a string is allowed), ``null`` is null, and an
    ``["integer", "null"]`` parameter written ``string="true"`` is the integer."""
    tool = _tool("search", {"q": {"type": ["string", "null"]}, "limit": {"type": ["integer", "null"]}})
    tm = PromptTM(tok, reply=_block("search", ("q", "true", "42"), ("limit", "true", "5")))
    client, _ = make_responses_client(tm)
    out = client.chat.completions.create(model=MODEL, messages=[USER], tools=[tool])  # type: ignore[arg-type, list-item]
    assert '"integer", "null"' in tok.decode(tm.received[0].input_ids).replace("'", '"')
    args = json.loads(out.choices[0].message.tool_calls[0].function.arguments)  # type: ignore[index, union-attr]
    assert args == {"q": "42", "limit": 5}
    jsonschema.validate(args, _schema(tool))
    (call,) = _calls(tok, _block("search", ("q", "false", "null")), [tool])
    assert json.loads(call.function.arguments) == {"q": None}


def test_vllm_30797_pydantic_optional_and_ref_parameters_written_as_strings_are_json(
    tok: PreTrainedTokenizerFast,
) -> None:
    """vllm-project/vllm#30797 for the schemas the ``openai`` client builds from pydantic models
    (``openai.pydantic_function_tool``): ``Optional[int]`` is ``{"anyOf": [{"type": "integer"},
    {"type": "null"}]}``, an enum field a ``$ref`` into ``$defs``, ``Literal[1, 2]`` an ``enum``.
    Expected, as for a plain ``type``: a ``string="true"`` value spelling an allowed non-string
    JSON value comes back as that value, streamed and not, and the arguments validate against the
    client's schema (``jsonschema``); an ``Optional[str]`` keeps its text."""
    import enum

    import openai
    from pydantic import BaseModel

    class Unit(int, enum.Enum):
        one = 1
        two = 2

    class Pick(BaseModel):
        ids: list[int] | None = None
        limit: int | None = None
        unit: Unit | None = None
        note: str | None = None

    tool = openai.pydantic_function_tool(Pick, name="pick")
    schema = dict(tool["function"]["parameters"])
    reply = _block(
        "pick",
        ("ids", "true", "[1, 2]"),
        ("limit", "true", "5"),
        ("unit", "true", "2"),
        ("note", "true", "7"),
    )
    (call,) = _calls(tok, reply, [tool])  # type: ignore[list-item]
    args = json.loads(call.function.arguments)
    assert args == {"ids": [1, 2], "limit": 5, "unit": 2, "note": "7"}
    jsonschema.validate(args, schema)
    Pick.model_validate_json(call.function.arguments, strict=True)


def test_vllm_30797_repair_stops_where_the_schema_allows_a_string_or_is_unknown(
    tok: PreTrainedTokenizerFast,
) -> None:
    """The limits of the repair above: a value stays the string the model wrote when a branch
    allows a string (``anyOf`` with ``string``, an ``enum`` holding a string), when a ``$ref`` is
    remote, dangling or cyclic (no infinite recursion), or when a branch has no type."""
    tool = _tool(
        "mixed",
        {
            "a": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "b": {"enum": [1, "two"]},
            "c": {"$ref": "https://example.com/x.json"},
            "d": {"$ref": "#/$defs/Loop"},
            "e": {"anyOf": [{"type": "integer"}, {}]},
            "f": {"$ref": "#/$defs/Missing"},
            "g": {"const": 3},
        },
    )
    tool["function"]["parameters"]["$defs"] = {"Loop": {"$ref": "#/$defs/Loop"}}
    reply = _block("mixed", *((k, "true", "1") for k in "abcdefg"))
    (call,) = _calls(tok, reply, [tool])
    assert json.loads(call.function.arguments) == {**{k: "1" for k in "abcdef"}, "g": 1}


def test_vllm_40959_nested_arguments_wrapper_is_unwrapped(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#40959: DeepSeek-V4 wrapped a call's parameters in one ``arguments``
    parameter (``{"arguments": {"path": ..., "content": ...}}``), which fails the tool's schema.
    Expected: the call's arguments are the wrapped object, streamed and not; a tool that does
    declare an ``arguments`` parameter keeps it."""
    write = _tool("write", {"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"])
    wrapped = '{"path": "/tmp/t.txt", "content": "hello"}'
    (call,) = _calls(tok, _block("write", ("arguments", "false", wrapped)), [write])
    assert json.loads(call.function.arguments) == {"path": "/tmp/t.txt", "content": "hello"}
    run = _tool("run", {"arguments": {"type": "object"}})
    (call,) = _calls(tok, _block("run", ("arguments", "false", wrapped)), [run])
    assert json.loads(call.function.arguments) == {"arguments": json.loads(wrapped)}


def test_vllm_40801_streamed_auto_tool_call_leaks_no_dsml(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#40801: with ``tool_choice="auto"`` and streaming, DeepSeek-V4's DSML
    fragments leaked into ``content`` and the call came back with ``arguments == "{}"``.
    Expected: the text before the block is the content, no DSML markup in any content delta, and
    the streamed call (name, arguments) is the non-streamed one, with the model's arguments."""
    reply = "Thinking it over.</think>Let me check." + CALL + _block("get_weather", ("city", "true", "Lima"))
    calls = _calls(
        tok,
        reply,
        [CHAT_WEATHER],
        tool_choice="auto",
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", ARGS),
        ("get_weather", {"city": "Lima"}),
    ]


def test_vllm_40801_empty_parameter_list_is_an_empty_object(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#40801 (its ``arguments`` symptom, the other way round): an invoke of a
    tool without parameters must give ``arguments == "{}"`` (valid JSON, an object), streamed and
    not, and ``finish_reason`` ``tool_calls``."""
    now = _tool("get_time", {})
    reply = f'\n\n<{DSML}tool_calls>\n<{DSML}invoke name="get_time">\n</{DSML}invoke>\n</{DSML}tool_calls>'
    (call,) = _calls(tok, reply, [now])
    assert call.function.name == "get_time" and json.loads(call.function.arguments) == {}


@pytest.mark.parametrize("body", ['"Haifa"', "[1]", "null", "42", "true"])
def test_sglang_39434_non_object_invoke_body_is_no_empty_call(
    tok: PreTrainedTokenizerFast, body: str
) -> None:
    """sgl-project/sglang#39434: an invoke whose JSON body is a scalar or an array
    (``<｜DSML｜invoke name="get_weather">"Haifa"</｜DSML｜invoke>``) came back as an executable
    call with ``arguments == "{}"`` (finish ``tool_calls``), or its markup as content. Expected
    (the report): no call with made-up arguments, no DSML in the content and a finish reason
    other than ``tool_calls``, with ``tool_choice`` ``required`` as with ``auto``, streamed too
    (a streamed call's name, sent once its tag was complete, is not taken back: the parser's
    documented limit, as in vLLM; it never gets ``{}`` arguments); an object body is the call's
    arguments."""
    reply = (
        f'\n\n<{DSML}tool_calls>\n<{DSML}invoke name="get_weather">{body}</{DSML}invoke>\n</{DSML}tool_calls>'
    )
    client, _ = make_responses_client(PromptTM(tok, reply=reply))
    for choice in ("required", "auto"):
        kw: Any = {"model": MODEL, "messages": [USER], "tools": [CHAT_WEATHER], "tool_choice": choice}
        ch = client.chat.completions.create(**kw).choices[0]
        assert not ch.message.tool_calls and ch.finish_reason == "stop"
        assert DSML not in (ch.message.content or "")
        content, args, finish = "", "", None
        for chunk in client.chat.completions.create(stream=True, **kw):
            for c in chunk.choices:
                content += c.delta.content or ""
                args += "".join((d.function and d.function.arguments) or "" for d in c.delta.tool_calls or [])
                finish = c.finish_reason or finish
        assert DSML not in content and finish == "stop" and args == ""
    good = reply.replace(f">{body}<", '>{"city": "Haifa"}<')
    (call,) = _calls(tok, good, [CHAT_WEATHER], tool_choice="required")
    assert json.loads(call.function.arguments) == {"city": "Haifa"}


# --------------------------------------------------------------------------- tool_choice


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_deepseek_v3_1376_forced_tool_choice_works_with_thinking_on(
    tok: PreTrainedTokenizerFast, choice: Any
) -> None:
    """deepseek-ai/DeepSeek-V3#1376: DeepSeek's V4 API answered ``tool_choice="required"`` or a
    named function with 400 "Thinking mode does not support this tool_choice", which breaks
    every framework's structured output. Expected (the OpenAI Chat Completions reference): 200
    with thinking on, the reasoning in ``reasoning_content``, the call in ``tool_calls``, and
    ``finish_reason`` ``tool_calls``."""
    tm = PromptTM(tok, reply="The user wants weather.</think>" + CALL)
    client, _ = make_responses_client(tm)
    out = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[CHAT_WEATHER],  # type: ignore[list-item]
        tool_choice=choice,
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    ch = out.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.reasoning_content == "The user wants weather."  # type: ignore[attr-defined]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls or []] == [
        ("get_weather", ARGS)
    ]
    assert tok.decode(tm.received[0].input_ids).endswith("<think>")


def test_deepseek_integration_598_messages_tool_choice_tool_with_thinking(
    tok: PreTrainedTokenizerFast,
) -> None:
    """deepseek-ai/awesome-deepseek-integration#598: DeepSeek's Anthropic-compatible
    ``/v1/messages`` answered ``tool_choice {"type": "tool", "name": ...}`` (documented as
    supported) with 400 "does not support this tool_choice" for V4 models. Expected (the Messages
    API reference): 200 with thinking enabled, for ``tool`` and ``any``; the reply is a
    ``thinking`` block then the ``tool_use`` block with the model's input, ``stop_reason``
    ``tool_use`` (the ``anthropic`` client's own types)."""
    tm = PromptTM(tok, reply="The user wants weather.</think>" + CALL)
    client, _, _ = make_messages_clients(tm)
    for choice in ({"type": "tool", "name": "get_weather"}, {"type": "any"}):
        m = client.messages.create(
            model=MODEL,
            max_tokens=200,
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[MESSAGES_WEATHER],  # type: ignore[list-item]
            tool_choice=choice,  # type: ignore[arg-type]
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
        assert m.stop_reason == "tool_use"
        assert [b.type for b in m.content] == ["thinking", "tool_use"]
        assert m.content[0].thinking == "The user wants weather."  # type: ignore[union-attr]
        assert m.content[1].name == "get_weather" and m.content[1].input == ARGS  # type: ignore[union-attr]
        assert tok.decode(tm.received[-1].input_ids).endswith("<think>")


# --------------------------------------------------------------------------- Responses API


def _tool_turn(between: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "type": "function_call",
            "call_id": "call_w1",
            "name": "get_weather",
            "arguments": json.dumps(ARGS),
        },
        *between,
        {"type": "function_call_output", "call_id": "call_w1", "output": "Sunny, 21C"},
    ]


def test_deepseek_v3_1611_function_call_output_pairs_with_its_call(tok: PreTrainedTokenizerFast) -> None:
    """deepseek-ai/DeepSeek-V3#1611: a Responses ``input`` holding a ``function_call`` and its
    ``function_call_output`` (as Cherry Studio / the Vercel AI SDK send) failed with "No tool call
    found for tool output with call_id". Expected (the Responses API reference): 200, and the
    prompt is the chat route's prompt of the same conversation (the call, then its result)."""
    tm = PromptTM(tok, reply="It is sunny.")
    client, tc = make_responses_client(tm)
    body, _ = post_responses(tc, {"input": _tool_turn([]), "tools": [WEATHER]})
    assert body["status"] == "completed"
    text = tok.decode(tm.received[0].input_ids)
    assert 0 <= text.index("Paris") < text.index('invoke name="get_weather"') < text.index("Sunny, 21C")
    call = {
        "id": "call_w1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps(ARGS)},
    }
    hist: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_w1", "content": "Sunny, 21C"},
    ]
    client.chat.completions.create(model=MODEL, messages=hist, tools=[CHAT_WEATHER])  # type: ignore[list-item]
    assert list(tm.received[0].input_ids) == list(tm.received[-1].input_ids)


def test_deepseek_v3_1588_developer_message_between_call_and_output(tok: PreTrainedTokenizerFast) -> None:
    """deepseek-ai/DeepSeek-V3#1588: a developer message (a Codex hook's additional context)
    between a ``function_call`` and its ``function_call_output`` made ``/responses`` answer 400
    "No tool output found for tool call". Expected: 200; the prompt has the developer text as an
    instruction (the Responses route reads a developer item as a system message, as SGLang's
    Responses route does, and DeepSeek's V4 encoder puts system text in the system turn before the
    first user turn), then the call, then the result, streamed and not."""
    tm = PromptTM(tok, reply="It is sunny.")
    _, tc = make_responses_client(tm)
    extra = [{"role": "developer", "content": "Answer in one line."}]
    body, _ = post_responses(tc, {"input": _tool_turn(extra), "tools": [WEATHER]})
    assert body["status"] == "completed"
    assert body["output"][-1]["content"][0]["text"] == "It is sunny."
    for got in tm.received:
        text = tok.decode(got.input_ids)
        assert (
            0
            <= text.index("Answer in one line.")
            < text.index("<｜User｜>")
            < text.index('invoke name="get_weather"')
            < text.index("Sunny")
        )


# --------------------------------------------------------------------------- reasoning


def _split(tok: PreTrainedTokenizerFast, reply: str, **kw: Any) -> tuple[Any, str, str, list[Any]]:
    """The non-streamed choice of ``reply`` in thinking mode with the weather tool offered, and
    the streamed reply's ``reasoning_content`` and ``content`` joined from the ``openai``
    client's chunks, with its accumulated tool calls as ``(name, arguments)``."""
    client, _ = make_responses_client(PromptTM(tok, reply=reply))
    kw = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [CHAT_WEATHER],
        "extra_body": {"chat_template_kwargs": {"thinking": True}},
        **kw,
    }
    whole = client.chat.completions.create(**kw).choices[0]
    reasoning = content = ""
    calls: dict[int, list[str]] = {}
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            reasoning += getattr(ch.delta, "reasoning_content", None) or ""
            content += ch.delta.content or ""
            for d in ch.delta.tool_calls or []:
                c = calls.setdefault(d.index, ["", ""])
                c[0] += (d.function and d.function.name) or ""
                c[1] += (d.function and d.function.arguments) or ""
    return whole, reasoning, content, [(n, json.loads(a)) for _, (n, a) in sorted(calls.items())]


def test_vllm_48645_reply_without_think_end_has_no_eos_text(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#48645: in thinking mode, a reply that never wrote ``</think>`` had its
    whole answer in ``reasoning_content`` (``content`` empty) and the EOS text left at its end.
    Expected: no EOS text in either field (the report). Its other ask, the text as ``content``,
    is not followed: a stream has sent the text as reasoning deltas before the finish says the
    generation stopped, so reading it as the answer made the stream carry it twice; the text
    stays ``reasoning_content`` (vLLM's default, its fix vllm-project/vllm#50753 being opt-in),
    once, the same streamed and not."""
    answer = "Good morning! How can I help you today?"
    whole, reasoning, content, calls = _split(tok, answer + "<｜end▁of▁sentence｜>")
    assert whole.message.reasoning_content == reasoning == answer  # type: ignore[attr-defined]
    assert not whole.message.content and content == ""
    assert whole.finish_reason == "stop" and not whole.message.tool_calls and not calls


@pytest.mark.parametrize("wrapped", [True, False], ids=["block", "bare_invoke"])
def test_sglang_32539_dsml_call_before_think_end_ends_the_reasoning(
    tok: PreTrainedTokenizerFast, wrapped: bool
) -> None:
    """sgl-project/sglang#32539: DeepSeek-V4 can start its DSML tool call (``<｜DSML｜tool_calls>``,
    or a bare ``<｜DSML｜invoke name=...>``) before closing ``<think>``; the call's markup was then
    counted or streamed as reasoning. Expected (the report): the DSML start ends the reasoning
    (the text before it is ``reasoning_content``, with no markup), the call is parsed, streamed
    and not, and ``finish_reason`` is ``tool_calls``; cut by ``max_tokens`` after the invoke
    closed, the call is still parsed and the reasoning is only the text before it."""
    bare = (
        f'\n\n<{DSML}invoke name="get_weather">\n<{DSML}parameter name="city" string="true">Paris'
        f'</{DSML}parameter>\n<{DSML}parameter name="days" string="false">3</{DSML}parameter>\n</{DSML}invoke>'
    )
    whole, reasoning, content, calls = _split(tok, "I should look it up." + (CALL if wrapped else bare))
    assert whole.finish_reason == "tool_calls"
    assert whole.message.reasoning_content == reasoning == "I should look it up."  # type: ignore[attr-defined]
    assert not whole.message.content and not content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in whole.message.tool_calls or []] == [
        ("get_weather", ARGS)
    ]
    assert calls == [("get_weather", ARGS)]
    # cut by max_tokens after the invoke closed: the call is still a call, not reasoning text
    reply = "I should look it up." + (CALL if wrapped else bare) + " Then I answer."
    cut = len(tok.encode(reply, add_special_tokens=False)) - 2
    whole, reasoning, _, calls = _split(tok, reply, max_tokens=cut)
    assert whole.finish_reason == "length"
    assert whole.message.reasoning_content == reasoning == "I should look it up."  # type: ignore[attr-defined]
    assert calls == [("get_weather", ARGS)]


# --------------------------------------------------------------------------- model math


@pytest.mark.parametrize("name", ["sliding_first", "hca_first_yarn"])
def test_vllm_55927_prompt_lengths_3_mod_4_decode_like_hf(name: str) -> None:
    """vllm-project/vllm#55927: DeepSeek-V4-Flash returned a deterministic wrong token (a needle's
    last digit) whenever the prompt length was 3 mod 4 (one token short of a C4 compress
    boundary), with the needle past the sliding window; other lengths were right. Expected: HF's
    log-probabilities at every prompt position and HF's greedy continuation (the first decode
    step completes the C4 group) for prompt lengths 3 mod 4 past the window and near the HCA
    boundary."""
    from dsv4_testutil import Driver, hf_greedy, hf_logprobs, make_twin, random_ids

    twin = make_twin(name, seed=55)
    full = random_ids(262, seed=927)
    drv = Driver(twin)
    for n in (131, 255, 259):  # past the window; 255 and 259 around the HCA boundary (128 * 2)
        ids = full[:n]
        err = (drv.run_chunked(ids, 64) - hf_logprobs(twin, ids)).abs().max().item()
        assert err <= 1e-3, (name, n, err)
        assert drv.greedy(ids, 3) == hf_greedy(twin, ids, 3), (name, n)

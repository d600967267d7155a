"""vLLM's DeepSeek-V4 / V3.2 tool-parser and reasoning-parser unit tests, their model-independent
expectations replayed on sglang-v4's DSML parser (``parse_tool_calls``, ``DsmlToolParser``) and
reasoning parser.

Sources (each test names its own): vllm-project/vllm:tests/tool_parsers/test_deepseekv4_tool_parser.py,
vllm-project/vllm:tests/tool_parsers/test_deepseekv32_tool_parser.py,
vllm-project/vllm:tests/tool_parsers/test_streamed_args_bounds.py and
vllm-project/vllm:tests/reasoning/test_deepseekv4_reasoning_parser.py.
(vllm-project/vllm:tests/tool_parsers/test_deepseek_streaming_state.py checks vLLM's token-id
bookkeeping only: no model-independent expectation to port.)

Faults found and fixed here:

* a spurious ``arguments`` wrapper was unwrapped even when the wrapped object's keys are no
  parameters of the tool (vLLM keeps such a wrapper as written);
* a ``string="true"`` value of a parameter typed by a composed schema (``anyOf`` / ``oneOf`` /
  ``allOf`` alternatives that allow no string) stayed a string instead of the JSON value it spells;
* a ``string="false"`` value that is no JSON (``hello``) of a parameter whose schema allows a
  string made the whole block malformed (the call was dropped); it is now that string.

Deliberately not matched (our module docstrings give the reasons): a DSML wrapper of another name
holding invokes (``<｜DSML｜function_calls>`` for the V4 parser) is a block
(vllm-project/vllm#51914), where vLLM keeps it as text; a bare invoke of an unknown tool is a
malformed block, dropped (sgl-project/sglang#40236), where vLLM keeps it as text; a
``string="false"`` value that is no JSON for a parameter that allows no string is malformed, where
vLLM passes the text; ``null`` / ``5.0`` written ``string="false"`` stay the JSON written (vLLM
re-types them by the schema). The newlines around a block are the block's: the content after a
block is left-stripped and the reasoning before an implicit block start ends before its
newlines, where vLLM keeps them.

Oracles: the values each test writes into the DSML text (``json.loads`` of what was written), and
the non-streamed parse for every streamed chunking.
"""

from __future__ import annotations

import json

import pytest
from sglang_v4.entrypoints.openai.reasoning_parser import ReasoningParser, reasoning_spec, split_reasoning
from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser, ToolCallDelta, parse_tool_calls

TC_START = "<｜DSML｜tool_calls>"
TC_END = "</｜DSML｜tool_calls>"
FC_START = "<｜DSML｜function_calls>"
FC_END = "</｜DSML｜function_calls>"
INV = '<｜DSML｜invoke name="'
INV_END = "</｜DSML｜invoke>"
PS = '<｜DSML｜parameter name="'
PE = "</｜DSML｜parameter>"
V4 = "vllm-project/vllm:tests/tool_parsers/test_deepseekv4_tool_parser.py"
V32 = "vllm-project/vllm:tests/tool_parsers/test_deepseekv32_tool_parser.py"


def obj(**props: dict) -> dict:
    return {"type": "object", "properties": props}


def build(name: str, params: dict[str, str], start: str = TC_START, end: str = TC_END) -> str:
    body = "".join(f'{PS}{k}" string="true">{v}{PE}\n' for k, v in params.items())
    return f'{start}\n{INV}{name}">\n{body}{INV_END}\n{end}'


def stream(text: str, tools=None, width: int = 7, block: str = "tool_calls", stopped: bool = True):
    """``(content, deltas, parser)`` of ``text`` fed in pieces of ``width`` characters."""
    p = DsmlToolParser(tools, block)
    content, deltas = [], []
    for i in range(0, len(text), width):
        c, d = p.feed(text[i : i + width])
        content.append(c)
        deltas += d
    c, d = p.finish(stopped)
    return "".join(content) + c, deltas + d, p


def args_of(deltas: list[ToolCallDelta], index: int = 0) -> str:
    return "".join(d.arguments or "" for d in deltas if d.index == index)


def names_of(deltas: list[ToolCallDelta]) -> list[str]:
    return [d.name for d in deltas if d.name]


def whole(text: str, tools=None, block: str = "tool_calls") -> tuple[str, list[tuple[str, dict]]]:
    content, calls, _ = parse_tool_calls(text, tools, block, stopped=True)
    return content, [(c.name, json.loads(c.arguments)) for c in calls]


def agree(text: str, tools=None, block: str = "tool_calls", widths=(1, 3, 7, 10_000)) -> tuple[str, list]:
    """The whole parse, checked against the stream at every width (content and each call)."""
    content, calls = whole(text, tools, block)
    for w in widths:
        c, d, _ = stream(text, tools, w, block)
        assert c == content, w
        assert names_of(d) == [n for n, _ in calls], w
        assert [json.loads(args_of(d, i)) for i in range(len(calls))] == [a for _, a in calls], w
    return content, calls


# ------------------------------------------------------------------------------------- V4 parser
def test_extract_tool_calls() -> None:
    """V4 ::test_extract_tool_calls: the text before the block is content, the call parsed."""
    text = "Let me check. " + build("get_weather", {"location": "Beijing", "unit": "celsius"})
    assert agree(text) == ("Let me check. ", [("get_weather", {"location": "Beijing", "unit": "celsius"})])


def test_function_calls_wrapper_is_a_block_here() -> None:
    """V4 ::test_function_calls_block_is_not_accepted and ::test_foreign_wrapper_is_preserved_as_content:
    vLLM keeps a ``function_calls`` wrapper as text; ours reads a wrapper of another name holding
    invokes as a block (deliberate: vllm-project/vllm#51914), and no markup reaches the content."""
    text = build("search", {"query": "vllm"}, FC_START, FC_END)
    assert agree(text) == ("", [("search", {"query": "vllm"})])


def test_streaming_extracts_complete_invokes() -> None:
    """V4 ::test_streaming_extracts_complete_invokes: 5-character deltas give one name, the args."""
    _, deltas, _ = stream(build("search", {"query": "deepseek v4"}), width=5)
    assert names_of(deltas) == ["search"]
    assert json.loads(args_of(deltas)) == {"query": "deepseek v4"}


@pytest.mark.parametrize("width", [1, 4, 17])
def test_streaming_emits_incremental_argument_chunks(width: int) -> None:
    """V4 ::test_streaming_emits_incremental_argument_chunks: the arguments arrive in several
    fragments (not at the end), join to the values written, no DSML in the content."""
    tools = {
        "plan_trip": obj(
            days={"type": "integer"},
            flexible={"type": "boolean"},
            cities={"type": "array", "items": {"type": "string"}},
            notes={"type": "string"},
        )
    }
    text = (
        f'{TC_START}\n{INV}plan_trip">\n{PS}days" string="false">3{PE}\n'
        f'{PS}flexible" string="false">false{PE}\n'
        f'{PS}cities" string="false">["Beijing","Shanghai","Tokyo","New York"]{PE}\n'
        f'{PS}notes" string="true">靠窗座位{PE}\n{INV_END}\n{TC_END}'
    )
    content, deltas, p = stream(text, tools, width)
    assert len([d for d in deltas if d.arguments]) > 2
    assert json.loads(args_of(deltas)) == {
        "days": 3,
        "flexible": False,
        "cities": ["Beijing", "Shanghai", "Tokyo", "New York"],
        "notes": "靠窗座位",
    }
    assert "DSML" not in content and p.complete


def test_arguments_wrapper_is_unwrapped() -> None:
    """V4 ::test_extract_tool_calls_arguments_wrapper and V32 ::test_arguments_wrapper_repaired /
    ::test_input_wrapper_repaired: a lone undeclared ``arguments`` / ``input`` parameter holding
    the tool's own parameters is unwrapped."""
    tools = {"get_weather": obj(location={"type": "string"})}
    for key, flag in (("arguments", "false"), ("input", "true")):
        text = f'{TC_START}{INV}get_weather">{PS}{key}" string="{flag}">{{"location":"Beijing"}}{PE}{INV_END}{TC_END}'
        assert agree(text, tools) == ("", [("get_weather", {"location": "Beijing"})]), key


def test_string_attribute_and_declared_wrapper_name() -> None:
    """V4 ::test_string_attribute_and_guarded_wrapper_semantics: ``007`` written as a string stays
    the string (not the integer its schema asks for: it is no integer's JSON), ``7`` written as
    JSON is 7, and an ``arguments`` parameter the tool declares is a parameter, not a wrapper."""
    tools = {
        "record_values": obj(
            literal={"type": "integer"}, coerced={"type": "integer"}, arguments={"type": "object"}
        )
    }
    text = (
        f'{TC_START}{INV}record_values">{PS}literal" string="true">007{PE}'
        f'{PS}coerced" string="false">7{PE}'
        f'{PS}arguments" string="false">{{"nested":{{"enabled":true}}}}{PE}{INV_END}{TC_END}'
    )
    expected = {"literal": "007", "coerced": 7, "arguments": {"nested": {"enabled": True}}}
    assert agree(text, tools) == ("", [("record_values", expected)])


def test_wrapper_of_unknown_keys_is_left_as_written() -> None:
    """V4 ::test_guarded_artificial_wrapper_rejects_unknown_inner_keys: an ``arguments`` wrapper
    whose object holds no parameter of the tool is not unwrapped (ours unwrapped it to
    ``{"unknown": "Beijing"}``, a call the tool's schema does not describe)."""
    tools = {"get_weather": obj(location={"type": "string"})}
    text = f'{TC_START}{INV}get_weather">{PS}arguments" string="false">{{"unknown":"Beijing"}}{PE}{INV_END}{TC_END}'
    assert agree(text, tools) == ("", [("get_weather", {"arguments": {"unknown": "Beijing"}})])


IMAGE_TOOLS = {"image_generate": obj(prompt={"type": "string"}, options={"type": "object"})}
IMAGE_INVOKE = (
    f'{INV}image_generate">{PS}prompt" string="true">draw a copper owl{PE}'
    f'{PS}options" string="false">{{"size":{{"width":1024,"height":768}},"seed":731}}{PE}{INV_END}'
)
IMAGE_ARGS = {"prompt": "draw a copper owl", "options": {"size": {"width": 1024, "height": 768}, "seed": 731}}


def test_orphan_invoke_is_a_call() -> None:
    """V4 ::test_orphan_invoke_recovers_declared_nested_image_tool_non_streaming and
    ::test_orphan_invoke_streams_without_control_text_leakage: an invoke of a declared tool
    without its opening wrapper, then the wrapper's orphan closing tag and text, is the call; the
    text after it is content (left-stripped here: the newline after a block is the block's)."""
    content, calls = agree(IMAGE_INVOKE + TC_END + "\nImage queued.", IMAGE_TOOLS)
    assert (content, calls) == ("Image queued.", [("image_generate", IMAGE_ARGS)])
    content, deltas, p = stream(IMAGE_INVOKE + TC_END, IMAGE_TOOLS, 1)
    assert names_of(deltas) == ["image_generate"] and json.loads(args_of(deltas)) == IMAGE_ARGS
    assert content == "" and p.complete


def test_orphan_invoke_of_unknown_tool_is_no_call() -> None:
    """V4 ::test_false_orphan_invoke_stays_content[unknown] and its streaming twin: an invoke of
    a tool the request does not offer makes no call, streamed or not. (vLLM keeps its text as
    content; ours drops it as a malformed block, deliberately: no DSML markup in the content.)"""
    text = IMAGE_INVOKE.replace("image_generate", "unknown_image_tool", 1)
    for width in (1, 3, 10_000):
        content, deltas, p = stream(text, IMAGE_TOOLS, width)
        assert (content, deltas, p.calls) == ("", [], []), width
    assert whole(text, IMAGE_TOOLS) == ("", [])


def test_quoted_marker_then_real_wrapped_call() -> None:
    """V4 ::test_quoted_marker_then_real_wrapped_terminal_call: prose quoting an invoke tag's
    start is content, the block after it the call, streamed character by character alike."""
    tools = {"terminal_exec": obj(command={"type": "string"}, environment={"type": "object"})}
    quoted = f"Documentation quotes {INV} literally. "
    invoke = (
        f'{INV}terminal_exec">{PS}command" string="true">printf ready{PE}'
        f'{PS}environment" string="false">{{"MODE":"safe","FLAGS":{{"trace":false}}}}{PE}{INV_END}'
    )
    content, calls = agree(quoted + TC_START + invoke + TC_END, tools)
    assert content == quoted
    assert calls == [
        (
            "terminal_exec",
            {"command": "printf ready", "environment": {"MODE": "safe", "FLAGS": {"trace": False}}},
        )
    ]


def test_declared_names_do_not_leak_between_requests() -> None:
    """V4 ::test_declared_names_do_not_leak_between_streams: a parser for a request without that
    tool makes no call of it after a request that had it."""
    assert whole(IMAGE_INVOKE, IMAGE_TOOLS)[1] == [("image_generate", IMAGE_ARGS)]
    assert whole(IMAGE_INVOKE, {})[1] == []


def test_composed_schema_values() -> None:
    """V4 / V32 ::test_composed_schema_converts_object_and_array_params and V32
    ::test_string_attr_true_coerced_by_composed_schema: JSON values of ``anyOf`` / ``allOf`` /
    ``oneOf`` parameters are objects and arrays; a ``string="true"`` object text of an
    ``anyOf [object, null]`` parameter is the object (ours kept the string)."""
    wait = {"type": "for", "minutes": 2880}
    patches = [{"op": "replace", "path": "/schedule", "value": "quiet"}]
    for combinator in ("allOf", "oneOf"):
        items = [{"type": "array", "items": {"type": "object"}}] + (
            [{"type": "null"}] if combinator == "oneOf" else []
        )
        tools = {
            "set_timer": obj(
                wait={"anyOf": [{"type": "object"}, {"type": "null"}]}, patches={combinator: items}
            )
        }
        text = (
            f'{TC_START}\n{INV}set_timer">\n{PS}wait" string="false">{json.dumps(wait)}{PE}\n'
            f'{PS}patches" string="false">{json.dumps(patches)}{PE}\n{INV_END}\n{TC_END}'
        )
        assert agree(text, tools) == ("", [("set_timer", {"wait": wait, "patches": patches})]), combinator
    tools = {"set_timer": obj(wait={"anyOf": [{"type": "object"}, {"type": "null"}]})}
    text = f'{TC_START}\n{INV}set_timer">\n{PS}wait" string="true">{{"type":"for","minutes":2880}}{PE}\n{INV_END}\n{TC_END}'
    assert agree(text, tools) == ("", [("set_timer", {"wait": wait})])


# ---------------------------------------------------------------------------------- V3.2 parser
def fc(name: str, body: str) -> str:
    return f'{FC_START}\n{INV}{name}">\n{body}{INV_END}\n{FC_END}'


def p32(key: str, flag: str, value: str) -> str:
    return f'{PS}{key}" string="{flag}">{value}{PE}\n'


def test_v32_plain_shapes() -> None:
    """V32 ::test_no_tool_call, ::test_single_tool_no_params, ::test_single_tool_with_params,
    ::test_content_before_tool_call, ::test_no_content_prefix_returns_none, ::test_multiple_tools,
    ::test_no_schema_parses_json and the streaming twins (::test_single_tool_streaming,
    ::test_multiple_tools_streaming, ::test_empty_arguments_streaming, ::test_streaming_matches_non_streaming)."""
    fcb = "function_calls"
    assert agree("just some text", None, fcb) == ("just some text", [])
    assert agree(fc("get_time", ""), None, fcb) == ("", [("get_time", {})])
    assert agree(
        build("get_weather", {"location": "SF", "date": "2024-01-16"}, FC_START, FC_END), None, fcb
    ) == (
        "",
        [("get_weather", {"location": "SF", "date": "2024-01-16"})],
    )
    text = "Sure, let me check! " + build("get_weather", {"location": "NYC"}, FC_START, FC_END)
    assert agree(text, None, fcb) == ("Sure, let me check! ", [("get_weather", {"location": "NYC"})])
    two = f'{FC_START}\n{INV}func_a">\n{p32("p", "true", "v1")}{INV_END}\n{INV}func_b">\n{p32("q", "true", "v2")}{INV_END}\n{FC_END}'
    assert agree(two, None, fcb) == ("", [("func_a", {"p": "v1"}), ("func_b", {"q": "v2"})])
    text = fc("unknown_fn", p32("count", "false", "42") + p32("flag", "false", "true"))
    assert agree(text, None, fcb) == ("", [("unknown_fn", {"count": 42, "flag": True})])


def test_v32_schema_typed_values() -> None:
    """V32 ::test_type_conversion_in_non_streaming, ::test_string_attr_true_coerced_by_schema,
    ::test_string_attr_false_allows_schema_conversion, ::test_object_and_array_params,
    ::test_number_param, ::test_multi_typed_schema, ::test_multi_typed_null_value and their
    streaming twins. ``label`` is ``string="false"`` text that is no JSON for a parameter that
    allows a string: that string (ours dropped the block)."""
    cases = [
        (
            {"toggle": obj(enabled={"type": "boolean"}, count={"type": "integer"})},
            fc("toggle", p32("enabled", "false", "true") + p32("count", "false", "42")),
            {"enabled": True, "count": 42},
        ),
        ({"score": obj(value={"type": "integer"})}, fc("score", p32("value", "true", "42")), {"value": 42}),
        ({"score": obj(value={"type": "integer"})}, fc("score", p32("value", "false", "42")), {"value": 42}),
        (
            {"update": obj(tags={"type": "array"}, meta={"type": "object"})},
            fc("update", p32("tags", "false", '["a", "b"]') + p32("meta", "false", '{"k": 1}')),
            {"tags": ["a", "b"], "meta": {"k": 1}},
        ),
        (
            {"measure": obj(ratio={"type": "number"}, whole={"type": "number"})},
            fc("measure", p32("ratio", "false", "3.14") + p32("whole", "false", "5.0")),
            {"ratio": 3.14, "whole": 5},
        ),
        (
            {"set_val": obj(count={"type": ["integer", "null"]}, label={"type": ["string", "null"]})},
            fc("set_val", p32("count", "false", "42") + p32("label", "false", "hello")),
            {"count": 42, "label": "hello"},
        ),
        (
            {"clear": obj(value={"type": ["integer", "null"]})},
            fc("clear", p32("value", "false", "null")),
            {"value": None},
        ),
    ]
    for tools, text, expected in cases:
        content, calls = agree(text, tools, "function_calls")
        assert content == "" and calls == [(next(iter(tools)), expected)], text
        assert all(type(v) is type(expected[k]) for k, v in calls[0][1].items() if k != "whole"), text


def test_v32_conversion_fallbacks() -> None:
    """V32 ::test_streaming_matches_non_streaming_conversion_fallbacks: ``hello`` written
    ``string="false"`` for a ``["null", "string"]`` parameter is the string, ``null`` for it is
    null, ``3.0`` for a number is 3, streamed as parsed whole. (vLLM also passes ``abc`` for an
    integer parameter as text and re-types ``null`` for a string parameter as ``"null"``; ours
    drops a block with a value that is no JSON for a parameter allowing no string, and keeps a
    JSON ``null`` as written: below.)"""
    tools = {
        "coerce": obj(
            union_value={"type": ["null", "string"]},
            nullable_string={"type": ["null", "string"]},
            whole_number={"type": "number"},
            null_string={"type": "string"},
            bad_int={"type": "integer"},
        )
    }
    body = p32("union_value", "false", "hello") + p32("nullable_string", "false", "null")
    body += p32("whole_number", "false", "3.0")
    content, calls = agree(fc("coerce", body), tools, "function_calls")
    assert calls == [("coerce", {"union_value": "hello", "nullable_string": None, "whole_number": 3})]
    assert agree(fc("coerce", p32("null_string", "false", "null")), tools, "function_calls")[1] == [
        ("coerce", {"null_string": None})
    ]
    bad = fc("coerce", p32("bad_int", "false", "abc"))
    assert whole(bad, tools, "function_calls") == ("", [])
    content, _, p = stream(bad, tools, 3, "function_calls")  # what went out is not taken back
    assert (content, p.calls, p.malformed) == ("", [], True)


def test_v32_streaming_ids_and_early_arguments() -> None:
    """V32 ::test_unique_tool_call_ids, ::test_emits_arguments_before_invoke_completes and
    ::test_long_string_argument_streams_before_close: parallel calls get distinct ids; a
    value's arguments go out before its invoke closes, a long string value in many fragments."""
    two = f'{FC_START}\n{INV}fn_a">\n{p32("x", "true", "1")}{INV_END}\n{INV}fn_b">\n{p32("y", "true", "2")}{INV_END}\n{FC_END}'
    _, deltas, _ = stream(two, None, 5, "function_calls")
    ids = [d.id for d in deltas if d.id]
    assert len(ids) == 2 and ids[0] != ids[1]
    p = DsmlToolParser(None, "function_calls")
    _, d = p.feed(f'{FC_START}\n{INV}fn">\n{PS}k" string="true">val{PE}\n')
    assert args_of(d).startswith('{"k"')
    p = DsmlToolParser({"emit": obj(text={"type": "string"})}, "function_calls")
    body = "A" * 4096
    chunks = [
        f'{FC_START}\n{INV}emit">\n{PS}text" string="true">',
        *(body[i : i + 32] for i in range(0, 4096, 32)),
    ]
    per_chunk = [args_of(p.feed(c)[1]) for c in chunks]
    per_chunk.append(args_of(p.feed(f"{PE}\n{INV_END}\n{FC_END}")[1]) + args_of(p.finish(True)[1]))
    assert sum(1 for a in per_chunk[1:-1] if a) > 1
    assert json.loads("".join(per_chunk)) == {"text": body}


def test_v32_no_marker_leak() -> None:
    """V32 ::test_no_marker_leak_chunked, ::test_no_marker_leak_with_prefix_chunked,
    ::test_no_marker_leak_char_by_char, ::test_no_marker_leak_all_split_points (vLLM #40801) and
    ::test_false_partial_marker_emitted: no fragment of a block start reaches the content at any
    width; text that merely starts like one is content."""
    text = build("fn", {"k": "v"}, FC_START, FC_END)
    for width in range(1, len(FC_START) + 2):
        content, deltas, _ = stream(text, None, width, "function_calls")
        assert content == "" and json.loads(args_of(deltas)) == {"k": "v"}, width
    content, deltas, _ = stream(
        "Hello!" + build("fn", {"a": "b"}, FC_START, FC_END), None, 5, "function_calls"
    )
    assert content == "Hello!" and json.loads(args_of(deltas)) == {"a": "b"}
    assert stream("<｜DSM some regular text", None, 3, "function_calls")[0] == "<｜DSM some regular text"


# ------------------------------------------------------------------------- streamed args bounds
@pytest.mark.parametrize("stopped", [True, False])
def test_streamed_arguments_are_the_calls_arguments(stopped: bool) -> None:
    """vllm-project/vllm:tests/tool_parsers/test_streamed_args_bounds.py (vLLM #33916: the final
    "remaining arguments" delta indexed past the streamed ones): with several calls, and with the
    last one cut by ``max_tokens``, every call's streamed fragments join to exactly its parsed
    arguments, at every width."""
    text = (
        build("a", {"x": "1"}).replace(TC_END, "")
        + f'{INV}b">\n{PS}y" string="false">{{"z": [1, 2]}}{PE}\n{INV_END}'
    )
    if stopped:
        text += f"\n{TC_END}"
    else:
        text += f'\n{INV}c">\n{PS}w" string="true">cut her'
    for width in (1, 2, 5, 10_000):
        _, deltas, p = stream(text, None, width, stopped=stopped)
        assert [c.arguments for c in p.calls] == [args_of(deltas, c.index) for c in p.calls], width
        assert [c.name for c in p.calls] == (["a", "b"] if stopped else ["a", "b", "c"])
        assert p.calls_whole is stopped


# ------------------------------------------------------------------------------ reasoning parser
def test_tool_block_ends_unterminated_reasoning() -> None:
    """vllm-project/vllm:tests/reasoning/test_deepseekv4_reasoning_parser.py::
    test_tool_call_start_implicitly_ends_reasoning and ::test_implicit_content_is_parseable_as_tool_call,
    and V4 ::test_tool_call_without_think_close_is_recovered (and its streaming twin): in thinking
    mode with tools, a block written without ``</think>`` ends the reasoning; the block is content
    and parses to the call; no DSML in the reasoning, streamed at every width alike."""
    block = (
        f'{TC_START}\n{INV}read_file">\n{PS}path" string="true">/tmp/example.lean{PE}\n{INV_END}\n{TC_END}'
    )
    text = f"Let me search.\n\n{block}"
    spec = reasoning_spec("deepseek-v4", thinking=True, tool_block_start=TC_START)
    reasoning, content = split_reasoning(text, spec.implicit_end)
    assert reasoning is not None and reasoning.rstrip("\n") == "Let me search." and TC_START not in reasoning
    assert content.lstrip("\n") == block
    assert whole(content, {"read_file": obj(path={"type": "string"})}) == (
        "",
        [("read_file", {"path": "/tmp/example.lean"})],
    )
    for width in (1, 5, 10_000):
        p = ReasoningParser(implicit_end=spec.implicit_end)
        parts = [p.feed(text[i : i + width]) for i in range(0, len(text), width)] + [p.flush()]
        assert ("".join(r for r, _ in parts), "".join(c for _, c in parts)) == (reasoning, content), width


@pytest.mark.parametrize("thinking", [True, False])
def test_deepseek_v3_parser_selection(thinking: bool) -> None:
    """vllm-project/vllm:tests/reasoning/test_deepseekv3_reasoning_parser.py::test_parser_selection,
    ::test_identity_reasoning_parser_basic and ::test_deepseek_v4_reasoning_parser_alias: the
    V3 parser splits reasoning (R1-style) in thinking mode only, and outside it the whole text is
    content; ``deepseek_v4`` names the V4 parser. (vLLM's ``count_reasoning_tokens`` counts the
    tokens between ``<think>`` and ``</think>``; ours follows SGLang's ``reasoning_tokens`` rule,
    :mod:`sglang_v4.managers.reasoning_tokens`.)"""
    from sglang_v4.entrypoints.openai.reasoning_parser import canonical_reasoning_parser

    assert canonical_reasoning_parser("deepseek_v4") == "deepseek-v4"
    spec = reasoning_spec("deepseek-v3", thinking=thinking)
    assert spec.separate is thinking
    if thinking:
        assert split_reasoning("plan</think>answer", spec.implicit_end) == ("plan", "answer")
        assert split_reasoning("all reasoning", spec.implicit_end) == ("all reasoning", "")

"""Public reports on DeepSeek's tool-call output parsers (SGLang's ``DeepSeekV32Detector`` /
DeepSeek-V4 detector, vLLM's ``deepseek_v32`` / ``deepseek_v4`` / ``deepseek_v3`` parsers, their
Rust ports) replayed on sglang-v4's DSML parser (``parse_tool_calls``, ``DsmlToolParser``).

Oracles: the values each test writes into the DSML text (``json.loads`` of what was written, or
the Python value itself), the JSON spec (every streamed ``arguments`` concatenation must be one
JSON object), and the non-streamed parse for every split of the text down to single characters.
"""

from __future__ import annotations

import json

import pytest
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from sglang_v4.entrypoints.openai.tool_calls import canonical_tool_call_parser
from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser, parse_tool_calls

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
TODO = {"type": "object", "properties": {"todos": {"type": "array"}}}
TOOLS = {"get_weather": WEATHER, "todo_write": TODO}


def stream(text: str, tools=TOOLS, width: int = 1, stopped: bool = True):
    """``(content, {index: name}, {index: arguments})`` of ``text`` fed ``width`` characters at a time."""
    p = DsmlToolParser(tools)
    content, deltas = [], []
    for i in range(0, len(text), width):
        c, d = p.feed(text[i : i + width])
        content.append(c)
        deltas += d
    c, d = p.finish(stopped)
    content.append(c)
    deltas += d
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    for d in deltas:
        if d.name:
            names[d.index] = d.name
        args[d.index] = args.get(d.index, "") + (d.arguments or "")
    return "".join(content), names, args


def calls_of(text: str, tools=TOOLS, stopped: bool = True):
    content, calls, complete = parse_tool_calls(text, tools, stopped=stopped)
    return content, [(c.name, json.loads(c.arguments)) for c in calls], complete


def test_streamed_nested_array_arguments_are_one_valid_json_object_at_every_split() -> None:
    # vllm-project/vllm#26897: DeepSeek-V3.2 tool calls came back with unbalanced braces
    # ("{{xxx}" with no closing "}"); sgl-project/sglang#19662's payload (a todo list of objects
    # with CJK text) is the shape used here.
    todos = [
        {
            "content": "查询行业同行平均花费和ROI基准数据",
            "status": "pending",
            "n": 1.5,
            "done": False,
            "x": None,
        },
        {"content": 'quote " and back\\slash', "status": "in_progress", "tags": ["a", {"b": [1, 2]}]},
    ]
    text = dsml_block(
        dsml_invoke("todo_write", dsml_param("todos", False, json.dumps(todos, ensure_ascii=False)))
    )
    for width in (1, 2, 3, 7, len(text)):
        content, names, args = stream(text, width=width)
        assert content == "" and names == {0: "todo_write"}, width
        assert json.loads(args[0]) == {"todos": todos}, width


def test_bare_invokes_without_wrapper_parse_in_both_paths() -> None:
    # sgl-project/sglang#24199 (and sgl-project/sglang#21176): under tool_choice="required" the
    # model writes bare <｜DSML｜invoke> blocks with no wrapper; the non-streaming path returned
    # 0 calls while the streaming path found them.
    inv = dsml_invoke("get_weather", dsml_param("city", True, "Tokyo"))
    text = inv + "\n" + dsml_invoke("get_weather", dsml_param("city", True, "Paris"))
    expected = [("get_weather", {"city": "Tokyo"}), ("get_weather", {"city": "Paris"})]
    content, calls, _ = calls_of(text)
    assert (content, calls) == ("", expected)
    for width in (1, 4):
        s_content, names, args = stream(text, width=width)
        assert s_content == "" and [(names[i], json.loads(args[i])) for i in sorted(args)] == expected


@pytest.mark.parametrize(
    ("raw", "value", "schema"),
    [
        ("123", 123, {"type": "integer"}),
        ("true", True, {"type": "boolean"}),
        ("null", None, {"type": "null"}),
        ("[1, 2]", [1, 2], {"type": "array"}),
        ('{"a": {"b": "x"}}', {"a": {"b": "x"}}, {"type": "object"}),
    ],
)
def test_final_value_arriving_with_the_closing_tags_is_not_truncated(raw: str, value, schema: dict) -> None:
    # vllm-project/vllm#48342 (fix vllm-project/vllm#48343): when the last characters of the
    # arguments arrive in the same delta as the end markers, a '"}' heuristic dropped a final
    # number/boolean/null/array and cut a nested object at its inner '"}'.
    tools = {"f": {"type": "object", "properties": {"code": schema}}}
    text = dsml_block(dsml_invoke("f", dsml_param("code", False, raw)))
    cut = text.index(raw) + 1  # the first character of the value, then everything else at once
    p = DsmlToolParser(tools)
    d1 = p.feed(text[:cut])[1]
    d2 = p.feed(text[cut:])[1]
    d3 = p.finish(True)[1]
    args = "".join(d.arguments or "" for d in d1 + d2 + d3)
    assert json.loads(args) == {"code": value}
    assert p.complete


def test_wrapper_with_no_complete_call_is_no_call_and_no_markup_in_content() -> None:
    # vllm-project/vllm#48367: output holding the tool-call start marker but no complete call
    # returned tools_called=True with an empty list; here: no call, not complete, no DSML
    # markup in the content.
    text = 'Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\nnot a parameter\n'
    text += "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
    content, calls, complete = calls_of(text)
    assert calls == [] and complete is False
    assert "DSML" not in content and content.startswith("Let me check.")


def test_arguments_stream_before_the_invoke_closes() -> None:
    # vllm-project/vllm#42879: DSML streaming buffered the whole invoke and sent the arguments
    # in one piece at its end; the name must go out with the invoke tag and the value's text
    # while it is generated.
    long = "x" * 200
    text = dsml_block(dsml_invoke("get_weather", dsml_param("city", True, long)))
    p = DsmlToolParser(TOOLS)
    head = text[: text.index(long) + 100]
    deltas = p.feed(head)[1]
    assert [d.name for d in deltas if d.name] == ["get_weather"]
    sent = "".join(d.arguments or "" for d in deltas)
    assert sent.startswith('{"city": "') and sent.count("x") == 100
    rest = p.feed(text[len(head) :])[1] + p.finish(True)[1]
    assert json.loads(sent + "".join(d.arguments or "" for d in rest)) == {"city": long}


def test_cut_wrapper_keeps_its_complete_calls() -> None:
    # ai-dynamo/dynamo#9813: with the outer wrapper truncated (no final end marker) the complete
    # individual calls are recovered; the cut one is marked partial and the block is not complete.
    text = dsml_block(
        dsml_invoke("get_weather", dsml_param("city", True, "上海"), dsml_param("days", False, "3")),
        dsml_invoke("get_weather", dsml_param("city", True, "Berlin")),
    )
    cut = text[: text.index("Berlin") + 3]
    content, calls, complete = parse_tool_calls(cut, TOOLS, stopped=False)
    assert content == "" and complete is False
    assert [(c.name, c.partial) for c in calls] == [("get_weather", False), ("get_weather", True)]
    assert json.loads(calls[0].arguments) == {"city": "上海", "days": 3}
    assert calls[1].arguments == '{"city": "Ber'
    s_content, names, args = stream(cut, stopped=False)
    assert s_content == "" and args == {0: calls[0].arguments, 1: calls[1].arguments}


def test_parallel_calls_with_text_before_and_after() -> None:
    # smg-project/smg#1030 (DeepSeek-V3.2/V4 DSML parser port): two tools called in parallel in
    # one block, text before it is content; and text after a closed block is content again.
    block = dsml_block(
        dsml_invoke("get_weather", dsml_param("city", True, "Tokyo")),
        dsml_invoke("todo_write", dsml_param("todos", False, '["Tokyo travel guide"]')),
    )
    text = "Calling both." + block + "\n\nDone."
    expected = [("get_weather", {"city": "Tokyo"}), ("todo_write", {"todos": ["Tokyo travel guide"]})]
    content, calls, complete = calls_of(text)
    assert calls == expected and complete
    assert content.startswith("Calling both.") and content.endswith("Done.") and "DSML" not in content
    for width in (1, 3):
        s_content, names, args = stream(text, width=width)
        assert s_content == content
        assert [(names[i], json.loads(args[i])) for i in sorted(args)] == expected


@pytest.mark.parametrize(
    "value",
    [
        "a < b",
        "close </div> here",
        "ends with <",
        "</",
        "héllo 世界 🎉",
        'say "hi" \\n \t',
        "C:\\path",
        "a｜b",
        "",
    ],
)
def test_string_values_with_markup_lookalikes_and_escapes_round_trip(value: str) -> None:
    # sgl-project/sglang#18236: DeepSeek V3.1 streamed arguments came back as {} while the
    # non-streaming answer held {"city": "上海"}; the streamed and whole parses must agree, at
    # every split, for values with "<", "</", non-ASCII and escape characters.
    text = "Pre" + dsml_block(dsml_invoke("get_weather", dsml_param("city", True, value)))
    assert calls_of(text) == ("Pre", [("get_weather", {"city": value})], True)
    for width in (1, 2, 5):
        content, names, args = stream(text, width=width)
        assert content == "Pre" and json.loads(args[0]) == {"city": value}, width


def test_other_deepseek_parser_names_are_refused_with_the_one_to_use() -> None:
    # sgl-project/sglang#14690: users were unsure whether DeepSeek-V3.2 takes the deepseekv31
    # parser; a parser of another release's format would silently leave every call in the
    # content, so such a name is refused naming the parser to use.
    for name in ("deepseekv31", "deepseekv3", "deepseekv32"):
        with pytest.raises(ValueError, match="deepseekv4"):
            canonical_tool_call_parser(name)
    assert canonical_tool_call_parser("deepseek_v4") == "deepseekv4"

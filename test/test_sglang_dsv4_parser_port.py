"""SGLang's DeepSeek-V4 function-call detector robustness tests, their model-independent
expectations replayed on sglang-v4's DSML parser (``parse_tool_calls``, ``DsmlToolParser``).

Sources: sgl-project/sglang:test/registered/unit/function_call/test_deepseekv4_streaming_robustness.py,
sgl-project/sglang:test/registered/unit/function_call/test_deepseekv32_detector.py (both its V3.2
and V4 classes: ``function_calls`` and ``tool_calls`` blocks) and
sgl-project/sglang:test/registered/unit/function_call/test_deepseekv32_strict_dsml.py (each test
names its classes). Its tokenizer-split cases are covered by the real-tokenizer
chunkings of ``test_openai_tool_parser``; its serving-code cases (``has_tool_calls`` state) by the
finish-reason checks of ``test_chat_tool_stream_agreement``. The detector tests of
``test_deepseekv4_detector.py`` already ported live in ``test_sglang_suite_port_engine``.

Faults found and fixed here: a self-closing invoke tag (``<｜DSML｜invoke name="submit"/>``, a call
without arguments, which SGLang's detector reads as the call ``{}``) made its block malformed:
the block's calls were dropped; a JSON body or value naming a key twice was passed through as a
call whose arguments mean different values to different clients (a parameter written twice was
already malformed).

Deliberately not matched: SGLang's opt-in strict mode returns a turn with a malformed invoke as
text; ours drops the malformed block (the documented rule: no DSML markup in the content). A ``string="false"`` value that is no JSON is text in SGLang's detector
whatever the schema; ours reads it as text only for a parameter whose schema allows a string (a
malformed block otherwise, as the module docstring of ``tool_parser`` says). Where SGLang's
detector keeps text that starts like a marker buffered (``"Hello <"`` then no marker), ours
releases it as content: the documented better behaviour the tests' notes ask for.

Oracles: the values written into the DSML text, and the non-streamed parse for every chunking.
"""

from __future__ import annotations

import json

import pytest
from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser, ToolCallDelta, parse_tool_calls

SRC = "sgl-project/sglang:test/registered/unit/function_call/test_deepseekv4_streaming_robustness.py"
OPEN = "<｜DSML｜tool_calls>"
CLOSE = "</｜DSML｜tool_calls>"
TOOLS = {
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
    "search": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "topn": {"type": "integer", "default": 10}},
        "required": ["query"],
    },
    "submit": {"type": "object", "properties": {}},
}


def param(key: str, flag: str, value: str) -> str:
    return f'<｜DSML｜parameter name="{key}" string="{flag}">{value}</｜DSML｜parameter>'


def invoke(name: str, params: str = "", self_closing: bool = False) -> str:
    if self_closing:
        return f'<｜DSML｜invoke name="{name}"/>'
    return f'<｜DSML｜invoke name="{name}">\n{params}\n</｜DSML｜invoke>'


def wrapped(inner: str) -> str:
    return f"{OPEN}\n{inner}\n{CLOSE}"


def feed(
    chunks: list[str], tools=TOOLS, stopped: bool = True
) -> tuple[str, list[ToolCallDelta], DsmlToolParser]:
    p = DsmlToolParser(tools)
    content, deltas = [], []
    for chunk in chunks:
        c, d = p.feed(chunk)
        content.append(c)
        deltas += d
    c, d = p.finish(stopped)
    return "".join(content) + c, deltas + d, p


def by_index(deltas: list[ToolCallDelta]) -> dict[int, tuple[str, str]]:
    out: dict[int, list[str]] = {}
    for d in deltas:
        slot = out.setdefault(d.index, ["", ""])
        slot[0] += d.name or ""
        slot[1] += d.arguments or ""
    return {i: (n, a) for i, (n, a) in out.items()}


def whole(text: str, tools=TOOLS) -> tuple[str, list[tuple[str, dict]]]:
    content, calls, _ = parse_tool_calls(text, tools, stopped=True)
    return content, [(c.name, json.loads(c.arguments)) for c in calls]


PROSE = "Let me check the weather for you.\n\n"
CALL = invoke("get_weather", param("city", "true", "SF"))


@pytest.mark.parametrize("text", [PROSE + wrapped(CALL), PROSE + CALL], ids=["wrapped", "bare"])
def test_preamble_survives_every_split(text: str) -> None:
    """TestPreamblePreservation (::test_prose_and_tool_call_one_delta_wrapped, _bare,
    ::test_prose_and_tool_call_separate_deltas, ::test_boundary_sweep_wrapped,
    ::test_fixed_size_chunking) and TestPreambleLossRegression: the prose before a call is
    content and the call is found, whether the prose and the call share a delta, come in two at
    any split position, or in fixed-size chunks; streamed content equals the parse of the whole."""
    content, calls = whole(text)
    assert content == "Let me check the weather for you." and calls == [("get_weather", {"city": "SF"})]
    splits = [[text[:k], text[k:]] for k in range(1, len(text))]
    splits += [[text[i : i + w] for i in range(0, len(text), w)] for w in (1, 3, 7)] + [[text]]
    for chunks in splits:
        c, deltas, _ = feed(chunks)
        assert c == content, chunks
        assert {i: (n, json.loads(a)) for i, (n, a) in by_index(deltas).items()} == {
            0: ("get_weather", {"city": "SF"})
        }


def test_literal_less_than_is_content() -> None:
    """TestPreamblePreservation::test_literal_less_than_not_swallowed and
    ::test_literal_less_than_before_tool_call: a ``<`` in prose is content, before a call too."""
    p = DsmlToolParser(TOOLS)
    assert p.feed("Is 3 < 5? Yes.\n")[0] == "Is 3 < 5? Yes."  # the newline may be a block's separator
    assert p.finish(True)[0] == "\n"
    text = "Compare 3 < 5.\n" + wrapped(CALL)
    k = len("Compare 3 < 5.\n")
    first = DsmlToolParser(TOOLS).feed(text[:k])[0]
    assert "3 < 5" in first
    assert feed([text[:k], text[k:]])[0] == "Compare 3 < 5."


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("true", "42", "42"),
        ("false", "10", 10),
        ("false", "true", True),
        ("false", "[1, 2, 3]", [1, 2, 3]),
        ("false", '{"name": "John", "age": 30}', {"name": "John", "age": 30}),
        ("false", "null", None),
    ],
)
def test_parameter_values(flag: str, value: str, expected: object) -> None:
    """TestParameterTypeConversion (::test_string_true_is_string, ::test_string_false_int,
    ::test_string_false_bool, ::test_string_false_array, ::test_string_false_nested_object,
    ::test_anyof_null_accepts_null): ``string="true"`` is the text, ``string="false"`` its JSON,
    streamed as parsed whole."""
    text = wrapped(invoke("search", param("query", flag, value)))
    assert whole(text, None) == ("", [("search", {"query": expected})])
    for w in (1, 4):
        _, deltas, _ = feed([text[i : i + w] for i in range(0, len(text), w)], None)
        assert json.loads(by_index(deltas)[0][1]) == {"query": expected}


def test_direct_json_body() -> None:
    """TestParameterTypeConversion::test_direct_json_body: an invoke whose body is a JSON object."""
    text = wrapped('<｜DSML｜invoke name="search">\n{"city": "SF", "topn": 5}\n</｜DSML｜invoke>')
    assert whole(text, None) == ("", [("search", {"city": "SF", "topn": 5})])


def test_malformed_json_value() -> None:
    """TestParameterTypeConversion::test_malformed_json_fallback: a ``string="false"`` value that
    is no JSON. For a parameter whose schema allows a string it is that string (as SGLang reads
    it); for one whose schema does not, or an undeclared one, the block is malformed here
    (deliberate difference, module docstring)."""
    bad = '{"key": "val'
    tools = {"f": {"type": "object", "properties": {"bad": {"type": ["string", "null"]}}}}
    text = wrapped(invoke("f", param("bad", "false", bad)))
    assert whole(text, tools) == ("", [("f", {"bad": bad})])
    for w in (1, 3, 10_000):
        _, deltas, p = feed([text[i : i + w] for i in range(0, len(text), w)], tools)
        assert json.loads(by_index(deltas)[0][1]) == {"bad": bad} and p.complete
    assert whole(text, None) == ("", [])


def test_sequential_invokes() -> None:
    """TestMultipleSequentialCalls::test_two_sequential_invokes_distinct_tool_index and
    ::test_name_delta_before_arg_deltas: two invokes are two calls of distinct indexes; streamed
    in 3-character chunks each call's name comes before its arguments."""
    text = wrapped(CALL + "\n" + invoke("search", param("query", "true", "weather SF")))
    assert whole(text)[1] == [("get_weather", {"city": "SF"}), ("search", {"query": "weather SF"})]
    _, deltas, _ = feed([text[i : i + 3] for i in range(0, len(text), 3)])
    for index in (0, 1):
        mine = [d for d in deltas if d.index == index]
        assert mine[0].name and mine[0].id and not any(d.name for d in mine[1:])
    assert [n for n, _ in by_index(deltas).values()] == ["get_weather", "search"]


WEATHER_SF = ("get_weather", {"city": "SF"})


@pytest.mark.parametrize(
    ("text", "content", "expected"),
    [
        (wrapped(CALL + "\n" + invoke("submit", self_closing=True)), "", [WEATHER_SF, ("submit", {})]),
        (wrapped(invoke("submit", self_closing=True) + "\n" + CALL), "", [("submit", {}), WEATHER_SF]),
        ("Done.\n\n" + invoke("submit", self_closing=True), "Done.", [("submit", {})]),
    ],
    ids=["after-long-form", "before-long-form", "bare"],
)
def test_self_closing_invoke(text: str, content: str, expected: list) -> None:
    """TestMultipleSequentialCalls::test_self_closing_and_long_form_mix: a self-closing invoke
    tag is a call with the arguments ``{}`` (ours dropped the block), streamed as parsed whole."""
    assert whole(text) == (content, expected)
    for w in (1, 2, 5, 10_000):
        c, deltas, p = feed([text[i : i + w] for i in range(0, len(text), w)])
        assert c == content and p.complete, w
        assert [(n, json.loads(a)) for n, a in by_index(deltas).values()] == expected, w


@pytest.mark.parametrize(
    "chunks",
    [
        ["Hello <", "｜DSML｜test more text"],
        ["<｜DSML｜", "random> stuff here"],
        ["Text < ", "｜DSML｜", " not_invoke text"],
    ],
)
def test_dsml_looking_text_is_no_call(chunks: list[str]) -> None:
    """TestFalsePositiveDSMLDetection: ``<`` and ``｜DSML｜`` with no invoke or block after them
    make no call; the text comes out as content once the next characters decide (SGLang's
    detector keeps it buffered)."""
    content, deltas, p = feed(chunks)
    assert deltas == [] and p.calls == []
    assert content == "".join(chunks)


@pytest.mark.parametrize("stopped", [True, False])
def test_stream_ends_inside_an_invoke_opener(stopped: bool) -> None:
    """TestStreamEndPartialOpener, TestUnstreamedToolArgsRecovery, TestOpenerTruncationMidOpener
    and TestFullPipelineProductionBugReproduction: prose then an invoke opener cut at any
    position (in three deltas, or in one) is no call; the prose is content, no markup is."""
    content, deltas, p = feed(
        ["Let me check the weather.\n", "<｜DSML｜invoke", ' name="ba'], stopped=stopped
    )
    assert (content, deltas, p.calls) == ("Let me check the weather.", [], [])
    opener = '<｜DSML｜invoke name="get_weather">'
    for k in range(1, len(opener)):
        content, deltas, p = feed(["Prose.\n" + opener[:k]], stopped=stopped)
        assert deltas == [] and p.calls == [], k
        assert content.startswith("Prose.") and "｜DSML｜" not in content, k


def test_cut_after_the_name_is_a_partial_call() -> None:
    """TestFinishReasonViaRealCodePath::test_truncated_tool_call_has_tool_calls_true (SGLang
    #30527): output cut by ``max_tokens`` inside an invoke whose name went out is that call, cut
    (not a whole call: the finish reason stays ``"length"``); with its name streamed first."""
    text = OPEN + "\n" + '<｜DSML｜invoke name="get_weather">' + "\n" + param("city", "true", "SF")
    _, deltas, p = feed([text[i : i + 5] for i in range(0, len(text), 5)], stopped=False)
    assert deltas[0].name == "get_weather"
    assert [c.name for c in p.calls] == ["get_weather"] and p.calls[0].partial
    assert p.truncated and not p.calls_whole


# --------------------------------------------------------------- V3.2 / V4 detectors: preamble
V32_SRC = "sgl-project/sglang:test/registered/unit/function_call/test_deepseekv32_detector.py"
PREAMBLE = "Let me look up the weather in Beijing for you."
CITY_TOOLS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
}


def city_invoke(city: str) -> str:
    return f'<｜DSML｜invoke name="get_weather">{param("city", "true", city)}</｜DSML｜invoke>'


def city_block(block: str, *cities: str) -> str:
    return f"<｜DSML｜{block}>" + "".join(city_invoke(c) for c in cities) + f"</｜DSML｜{block}>"


def feed_block(chunks: list[str], block: str) -> tuple[str, list[tuple[str, dict]]]:
    p = DsmlToolParser(CITY_TOOLS, block)
    content, deltas = "", []
    for chunk in chunks:
        c, d = p.feed(chunk)
        content += c
        deltas += d
    c, d = p.finish(True)
    return content + c, [(n, json.loads(a)) for n, a in by_index(deltas + d).values()]


@pytest.mark.parametrize("block", ["tool_calls", "function_calls"])
def test_preamble_in_the_opener_delta(block: str) -> None:
    """V3.2 / V4 detector tests (both classes of the source): ::test_prose_and_wrapped_opener_in_one_delta,
    ::test_prose_and_bare_invoke_in_one_delta, ::test_prose_emitted_once_at_every_split_point,
    ::test_bare_invoke_prose_at_every_split_point, ::test_fixed_size_chunkings,
    ::test_multiple_invokes_after_prose and ::test_streaming_matches_detect_and_parse: prose
    written right before the opener (no separator) is content exactly once, at every split."""
    one = [("get_weather", {"city": "Beijing"})]
    for text, calls in (
        (PREAMBLE + city_block(block, "Beijing"), one),
        (PREAMBLE + city_invoke("Beijing"), one),
        (PREAMBLE + city_block(block, "Beijing", "Tokyo"), one + [("get_weather", {"city": "Tokyo"})]),
    ):
        content, parsed, _ = parse_tool_calls(text, CITY_TOOLS, block, stopped=True)
        assert (content, [(c.name, json.loads(c.arguments)) for c in parsed]) == (PREAMBLE, calls)
        chunkings = [[text]] + [[text[:k], text[k:]] for k in range(1, len(text))]
        chunkings += [[text[i : i + w] for i in range(0, len(text), w)] for w in (1, 3, 7, 8)]
        for chunks in chunkings:
            assert feed_block(chunks, block) == (PREAMBLE, calls), chunks


@pytest.mark.parametrize("block", ["tool_calls", "function_calls"])
def test_partial_tag_prefix_and_literal_angle_brackets(block: str) -> None:
    """V3.2 / V4 detector tests ::test_partial_tag_prefix_held_back,
    ::test_literal_angle_bracket_without_tool_call and ::test_literal_angle_bracket_before_tool_call:
    a delta ending in ``<`` / ``<｜`` gives the prose before it at once and holds back only the
    prefix; a literal ``<`` in prose is content, before a call too."""
    call = city_block(block, "Beijing")
    for prefix in ("<", "<｜"):
        p = DsmlToolParser(CITY_TOOLS, block)
        assert p.feed(PREAMBLE + prefix)[0] == PREAMBLE
        assert p.feed(call[len(prefix) :])[0] == "" and p.finish(True)[0] == ""
        assert [(c.name, json.loads(c.arguments)) for c in p.calls] == [("get_weather", {"city": "Beijing"})]
    assert feed_block(["The check 3 <", " 5 held, done."], block) == ("The check 3 < 5 held, done.", [])
    prose = "Since 3 < 5 holds, calling the tool. "
    assert feed_block([prose + call], block) == (prose, [("get_weather", {"city": "Beijing"})])


# ------------------------------------------------------------- V3.2 / V4 detectors: strict DSML
STRICT_SRC = "sgl-project/sglang:test/registered/unit/function_call/test_deepseekv32_strict_dsml.py"
STRICT_TOOLS = {
    "set_flag": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
    "lookup_fixture": {"type": "object", "properties": {"key": {"type": "string"}}},
    "search": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "topn": {"type": "integer"}, "ratio": {"type": "number"}},
    },
    "submit": {"type": "object", "properties": {}},
}
D = "｜DSML｜"
MALFORMED_BODIES = {
    "param_missing_dsml_marker_and_string_attr": f'\n<parameter name="key">alpha</{D}parameter>\n',
    "param_missing_string_attr_only": f'<{D}parameter name="key">alpha</{D}parameter>',
    "param_missing_dsml_marker_only": f'<parameter name="key" string="true">alpha</{D}parameter>',
    "unterminated_param_tag": f'<{D}parameter name="key" string="true">alpha',
    "truncated_json_body": '{"key": "alpha"',
    "invalid_json_body": '{"key": alpha}',
    "non_object_json_body": '["alpha"]',
    "good_param_then_stray_tag": param("key", "true", "alpha") + f'\n<parameter name="x">1</{D}parameter>',
    "prose_in_body": "\nenable it please\n",
}


def strict_block(block: str, *invokes: str, preamble: str = "") -> str:
    return f"{preamble}<{D}{block}>\n" + "\n".join(invokes) + f"\n</{D}{block}>"


def strict_invoke(name: str, body: str) -> str:
    return f'<{D}invoke name="{name}">{body}</{D}invoke>'


@pytest.mark.parametrize("block", ["tool_calls", "function_calls"])
@pytest.mark.parametrize("shape", sorted(MALFORMED_BODIES))
def test_malformed_invoke_body_is_no_call(block: str, shape: str) -> None:
    """TestMalformedBodiesAreDropped::test_every_malformed_body_in_every_flavour and
    TestStrictStreaming::test_malformed_turn_streams_no_call_and_tracks_nothing: a complete
    invoke whose body is not well-formed is never a call (not ``{}`` arguments either), streamed
    or not. (SGLang's strict mode returns the turn as text; ours drops the block, keeping the
    preamble: the documented rule for malformed blocks.)"""
    text = strict_block(block, strict_invoke("lookup_fixture", MALFORMED_BODIES[shape]), preamble="Sure.\n\n")
    content, calls, complete = parse_tool_calls(text, STRICT_TOOLS, block, stopped=True)
    assert (content, calls, complete) == ("Sure.", [], False)
    for w in (1, 2, 3, 5, 7, 11, 23, 1000):
        p = DsmlToolParser(STRICT_TOOLS, block)
        c = "".join(p.feed(text[i : i + w])[0] for i in range(0, len(text), w)) + p.finish(True)[0]
        assert (c, p.calls, p.malformed) == ("Sure.", [], True), w


def test_good_call_before_a_malformed_one_stays() -> None:
    """TestStrictStreaming::test_good_call_before_a_malformed_one_survives_alone: the call that
    closed before the malformed invoke is the one call, streamed at every width."""
    text = strict_block(
        "tool_calls",
        strict_invoke("lookup_fixture", param("key", "true", "alpha")),
        strict_invoke("set_flag", f'<parameter name="enabled">true</{D}parameter>'),
        preamble="Before.\n\n",
    )
    content, calls, _ = parse_tool_calls(text, STRICT_TOOLS, stopped=True)
    assert content == "Before." and [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("lookup_fixture", {"key": "alpha"})
    ]
    for w in (1, 2, 3, 5, 7, 11, 23, 1000):
        p = DsmlToolParser(STRICT_TOOLS)
        c = "".join(p.feed(text[i : i + w])[0] for i in range(0, len(text), w)) + p.finish(True)[0]
        assert c == "Before." and [json.loads(x.arguments) for x in p.calls] == [{"key": "alpha"}], w


@pytest.mark.parametrize("block", ["tool_calls", "function_calls"])
def test_well_formed_bodies(block: str) -> None:
    """TestWellFormedBodiesUnchanged::test_parameter_shapes, ::test_zero_argument_forms and
    ::test_json_body_and_several_blocks: well-formed invokes parse to the values written,
    an empty (or blank) body and a self-closing tag to ``{}``."""
    cases = [
        ("lookup_fixture", [("key", "true", "alpha")], {"key": "alpha"}),
        ("search", [("query", "true", "a b"), ("topn", "false", "3")], {"query": "a b", "topn": 3}),
        ("search", [("topn", "false", "10"), ("ratio", "false", "3.5")], {"topn": 10, "ratio": 3.5}),
        ("set_flag", [("enabled", "false", "true")], {"enabled": True}),
        ("set_flag", [("enabled", "false", "false")], {"enabled": False}),
        (
            "search",
            [
                ("query", "true", 'He said "hi" <b>&</b>\nnext'),
                ("topn", "false", '{"name": "John", "age": 30}'),
            ],
            {"query": 'He said "hi" <b>&</b>\nnext', "topn": {"name": "John", "age": 30}},
        ),
        ("lookup_fixture", [("key", "true", "")], {"key": ""}),
    ]
    for name, params, expected in cases:
        body = "\n" + "\n".join(param(*p) for p in params) + "\n"
        text = strict_block(block, strict_invoke(name, body), preamble="Let me look.\n\n")
        content, calls, _ = parse_tool_calls(text, STRICT_TOOLS, block, stopped=True)
        assert (content, [(c.name, json.loads(c.arguments)) for c in calls]) == (
            "Let me look.",
            [(name, expected)],
        )
    for body in ("", "\n   \n"):
        text = strict_block(block, strict_invoke("submit", body))
        assert [
            json.loads(c.arguments) for c in parse_tool_calls(text, STRICT_TOOLS, block, stopped=True)[1]
        ] == [{}]
    text = strict_block(block, f'<{D}invoke name="submit"/>')
    assert [(c.name, c.arguments) for c in parse_tool_calls(text, STRICT_TOOLS, block, stopped=True)[1]] == [
        ("submit", "{}")
    ]
    two = strict_block(block, strict_invoke("lookup_fixture", '\n{"key": "a"}\n')) + "\n"
    two += strict_block(block, strict_invoke("lookup_fixture", param("key", "true", "b")))
    calls = parse_tool_calls(two, STRICT_TOOLS, block, stopped=True)[1]
    assert [json.loads(c.arguments) for c in calls] == [{"key": "a"}, {"key": "b"}]
    unknown = strict_block(block, strict_invoke("nope", param("key", "true", "a")))
    assert parse_tool_calls(unknown, STRICT_TOOLS, block, stopped=True)[1] == []


@pytest.mark.parametrize(
    "body",
    [
        '{"city": "SF", "city": "NY"}',
        '{"city": NaN}',
        '{"city": Infinity}',
        '{"city": {"value": 1, "value": 2}}',
        param("city", "true", "SF") + param("city", "true", "NY"),
        param("extra", "false", '{"v": 1, "v": 2}'),
    ],
)
def test_duplicate_keys_and_non_json_constants_are_no_call(body: str) -> None:
    """sgl-project/sglang:test/registered/unit/function_call/test_deepseekv4_detector.py::
    test_strict_direct_json_rejects_duplicates_and_non_json_constants and
    ::test_strict_rejects_duplicate_xml_parameters_and_invalid_string_flags: arguments naming a
    key twice (a JSON body's key, a nested object's, or a parameter written twice) or holding
    ``NaN`` / ``Infinity`` are no call, streamed or not (ours passed duplicate JSON keys through:
    which value a client reads is undefined)."""
    text = wrapped(invoke("get_weather", body))
    assert whole(text) == ("", [])
    for w in (1, 5, 10_000):
        content, _, p = feed([text[i : i + w] for i in range(0, len(text), w)])
        assert (content, p.calls, p.malformed) == ("", [], True), w

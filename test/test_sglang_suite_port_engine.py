"""SGLang's public test suite, its model-independent assertions on the offline ``Engine``, the
runtime-control routes and the DeepSeek-V4 tool-call detector, replayed on sglang-v4.

Each test names the SGLang test it comes from (``sgl-project/sglang:path::test_name``). The
assertions of ``test_srt_engine.py`` (generate single / batch / streamed / async, ``input_ids``
giving the prompt's own output, ``shutdown``), ``test_update_weights_from_disk.py`` (a missing
checkpoint answers ``success: false`` and changes nothing), ``test_get_weights_by_name.py``
(``truncate_size`` rows, unknown names refused) and ``test_continuous_usage_stats.py`` already had
tests here (``test_engine_api``, ``test_engine_public_bugs``, ``test_server_control_routes``,
``test_server_update_weights``, ``test_openai_api``); they are not repeated.

Fault found and fixed: a string parameter whose value held DSML-looking text that is no tag of
the invoke (a quoted ``<｜DSML｜tool_calls>``, a ``</｜DSML｜parameter |`` that is no closing tag,
as a shell heredoc or a ``print`` of the marker has) made the whole block malformed: the call was
dropped. Only the invoke's own markup (a parameter or invoke tag, the block's closing tag) now
means a closing tag was left out; other text is the value's, as SGLang's detector keeps it.

Deliberately not matched: a DSML block quoted in a Markdown code fence or backticks *before* the
real call is parsed as a call here (SGLang's newest detector leaves quoted DSML in the content);
damaged wrapper text in front of a call (``<｜DSML｜toolcalls>`` followed by a proper block)
stays in the content; a ``string="false"`` value is streamed as written (``12345e-3``), not
re-serialised (``12.345``): both parse to the same JSON.

Oracles: the text each test writes (the value it put in the parameter, ``json.loads``), and the
non-streamed parse for every streamed chunking.
"""

from __future__ import annotations

import json

import pytest
from sglang_v4.entrypoints.chat_encoding import DSML
from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser, parse_tool_calls

TOOLS = {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
WIDTHS = (1, 2, 3, 7, 13, 10_000)


def _block(*invokes: str) -> str:
    body = "\n".join(invokes)
    return f"<{DSML}tool_calls>\n{body}\n</{DSML}tool_calls>"


def _invoke(name: str, params: str) -> str:
    return f'<{DSML}invoke name="{name}">\n{params}\n</{DSML}invoke>'


def _param(name: str, is_string: str, value: str) -> str:
    return f'<{DSML}parameter name="{name}" string="{is_string}">{value}</{DSML}parameter>'


def _weather(city: str) -> str:
    return _block(_invoke("get_weather", _param("city", "true", city)))


def _stream(text: str, width: int) -> tuple[str, list[str], list[dict]]:
    """Feed ``text`` in ``width``-character chunks; (content, call names, parsed arguments)."""
    p = DsmlToolParser(TOOLS)
    content, names, args = "", [], {}
    pieces = [p.feed(text[i : i + width]) for i in range(0, len(text), width)] + [p.finish(True)]
    for c, deltas in pieces:
        content += c
        for d in deltas:
            if d.name:
                names.append(d.name)
            args[d.index] = args.get(d.index, "") + d.arguments
    return content, names, [json.loads(a) for a in args.values()]


def _check(text: str, content: str, arguments: list[dict]) -> None:
    for width in WIDTHS:
        got = _stream(text, width)
        assert (got[0].strip(), got[1], got[2]) == (content, ["get_weather"] * len(arguments), arguments), (
            width
        )
    c, calls, complete = parse_tool_calls(text, TOOLS, stopped=True)
    assert complete and c.strip() == content
    assert [json.loads(x.arguments) for x in calls] == arguments


MARKER = f"</{DSML}parameter |"


@pytest.mark.parametrize(
    "value",
    [
        f'print("{MARKER}")',
        f"Example: `{MARKER}`",
        f"```xml\n{MARKER}\n```",
        f"cat <<'EOF'\n{MARKER}\nEOF",
        f"cat <<-EOF\n\t{MARKER}\n\tEOF",
        f"echo \\{MARKER}",
        f'echo "created"{MARKER}\nprintf done',
        f"Echo `<{DSML}tool_calls>` without interpreting it",
        f"<{DSML}",
        f"a <{DSML}parameterless word",
    ],
)
def test_dsml_looking_literals_in_a_string_value_are_kept(value: str) -> None:
    """sgl-project/sglang:test/registered/unit/function_call/test_deepseekv4_detector.py::
    test_string_parameter_preserves_quoted_heredoc_and_escaped_marker_literals and
    ::test_new_parameter_guard_does_not_change_non_strict_behavior: a string value holding
    DSML-looking text that is no tag of the invoke is one call whose arguments hold the value as
    written, streamed at every chunking as parsed whole. (Ours dropped the call.)"""
    _check(_weather(value), "", [{"city": value}])


def test_indented_calls_with_a_quoted_wrapper_in_a_value() -> None:
    """sgl-project/sglang:test/registered/unit/function_call/test_deepseekv4_detector.py::
    test_indented_native_calls_and_parameter_literals_are_preserved: two indented blocks after a
    preamble, the first value quoting ``<｜DSML｜tool_calls>``: both calls, values as written."""
    literal = f"Echo `<{DSML}tool_calls>` without interpreting it"
    lines = (_weather(literal) + "\n" + _weather("NY")).splitlines()
    text = "Checking.\n" + "\n".join("        " + line for line in lines)
    _check(text, "Checking.", [{"city": literal}, {"city": "NY"}])


def test_a_left_out_closing_tag_still_drops_the_invoke() -> None:
    """The other side of the rule above (vllm-project/vllm#53227): a value running into the next
    parameter's or the invoke's own tag lost its closing tag; no call is made of it."""
    for body in (
        f'<{DSML}parameter name="city" string="true">Oslo\n<{DSML}parameter name="x" string="true">1'
        f"</{DSML}parameter>",
        f'<{DSML}parameter name="city" string="true">Oslo</{DSML}invoke>',
    ):
        text = f'<{DSML}tool_calls>\n<{DSML}invoke name="get_weather">\n{body}\n</{DSML}invoke>\n</{DSML}tool_calls>'
        for width in WIDTHS:
            p = DsmlToolParser(TOOLS)
            pieces = [p.feed(text[i : i + width]) for i in range(0, len(text), width)] + [p.finish(True)]
            assert p.calls == [] and p.malformed, (body, width)
            # the name may have gone out; no markup did
            assert all(DSML not in d.arguments for _, deltas in pieces for d in deltas), (body, width)
        assert parse_tool_calls(text, TOOLS, stopped=True)[1] == []


@pytest.mark.parametrize(
    ("text", "content", "arguments"),
    [
        ("Let me check.\n" + _weather("SF"), "Let me check.", [{"city": "SF"}]),
        ("Checking.\n" + _invoke("get_weather", _param("city", "true", "SF")), "Checking.", [{"city": "SF"}]),
        (_weather("SF") + "\n" + _weather("NY"), "", [{"city": "SF"}, {"city": "NY"}]),
        (_block(_invoke("get_weather", '{"city": "SF"}')), "", [{"city": "SF"}]),
        (_block(_invoke("get_weather", _param("city", "false", "12345e-3"))), "", [{"city": 12.345}]),
    ],
    ids=["preamble-same-delta", "bare-invoke", "two-blocks", "json-body", "non-string-exponent"],
)
def test_deepseekv4_detector_shapes(text: str, content: str, arguments: list[dict]) -> None:
    """sgl-project/sglang:test/registered/unit/function_call/test_deepseekv4_detector.py::
    test_preamble_in_same_delta_as_tool_call, ::test_preamble_before_bare_invoke_without_wrapper,
    ::test_non_streaming_parses_every_tool_calls_section, ::test_no_dsml_markers_leak_into_normal_text
    and ::test_non_string_parameter_is_not_rewritten_after_streaming: the preamble is content
    (streamed as parsed whole), a bare invoke and every block of a turn are calls, no DSML in the
    content, a non-string value parses to its JSON."""
    _check(text, content, arguments)
    assert all(DSML not in _stream(text, w)[0] for w in WIDTHS)

"""DSML markup written with ASCII bars (``<|DSML|tool_calls>``, ``</|DSML|invoke>``): the legacy
spelling DeepSeek-V4 writes at times (cline/cline#13348: fullwidth and ASCII variants both seen
leaking into content; local-inference-lab/vllm#417 reads both spellings, wrapped and bare, with the
markers split across streamed deltas).

Oracle: the same text with fullwidth bars, read by the same readers (the answer reader of every
route, with the reasoning parser in thinking mode), itself checked against the calls, content and
reasoning written by hand; whole, and streamed one character at a time (every split point of
every marker) and in chunks of 2 and 3 characters.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from dsml_testutil import DSML
from dsml_testutil import dsml_block as _block
from dsml_testutil import dsml_invoke as _invoke
from dsml_testutil import dsml_param as _param
from sglang_v4.entrypoints.openai.dsml_markup import DsmlAnswerReader, DsmlMarkupScrub
from sglang_v4.entrypoints.openai.dsml_withheld import DsmlWithheld
from sglang_v4.entrypoints.openai.reasoning_parser import BARE_INVOKE_START, ReasoningParser
from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser, parse_tool_calls

FW = DSML
ASCII = "|DSML|"
TOOLS = {"get_weather", "get_time"}


PARIS = _invoke("get_weather", _param("city", True, "Paris"), _param("days", False, "3"))
TOKYO = _invoke("get_time", _param("zone", True, "Asia/Tokyo"))

#: (id, fullwidth text, thinking, expected reasoning, expected content, expected calls, malformed)
SHAPES: list[tuple[str, str, bool, str, str, list[tuple[str, Any]], bool]] = [
    (
        "wrapped_one_call",
        "Let me check." + _block(PARIS),
        False,
        "",
        "Let me check.",
        [("get_weather", {"city": "Paris", "days": 3})],
        False,
    ),
    (
        "two_calls",
        "Both." + _block(PARIS, TOKYO),
        False,
        "",
        "Both.",
        [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"zone": "Asia/Tokyo"})],
        False,
    ),
    (
        "bare_invoke",
        "Checking.\n\n" + PARIS,
        False,
        "",
        "Checking.",
        [("get_weather", {"city": "Paris", "days": 3})],
        False,
    ),
    (
        "json_body",
        "On it." + f'\n\n<{FW}tool_calls>\n<{FW}invoke name="get_weather">{{"city": "Lima", "days": 2}}'
        f"</{FW}invoke>\n</{FW}tool_calls>",
        False,
        "",
        "On it.",
        [("get_weather", {"city": "Lima", "days": 2})],
        False,
    ),
    (
        "string_false_values",
        _block(
            _invoke(
                "get_weather",
                _param("city", True, "Oslo"),
                _param("days", False, "7"),
                _param("opts", False, '{"units": ["C", "F"], "hourly": true}'),
                _param("ratio", False, "0.5"),
            )
        ),
        False,
        "",
        "",
        [
            (
                "get_weather",
                {"city": "Oslo", "days": 7, "opts": {"units": ["C", "F"], "hourly": True}, "ratio": 0.5},
            )
        ],
        False,
    ),
    (
        "malformed_block_dropped",
        "Sure."
        + _block(_invoke("get_weather", f'<{FW}parameter name="city">Paris</{FW}parameter>'))
        + "\nBye.",
        False,
        "",
        "Sure.\nBye.",
        [],
        True,
    ),
    (
        "thinking_block_ends_reasoning",
        "I should look it up." + _block(PARIS),
        True,
        "I should look it up.",
        "",
        [("get_weather", {"city": "Paris", "days": 3})],
        False,
    ),
    (
        "thinking_bare_invoke_ends_reasoning",
        "I should look it up.\n\n" + PARIS,
        True,
        "I should look it up.",
        "",
        [("get_weather", {"city": "Paris", "days": 3})],
        False,
    ),
    (
        "thinking_then_block",
        "Plan: call it.</think>Calling." + _block(TOKYO),
        True,
        "Plan: call it.",
        "Calling.",
        [("get_time", {"zone": "Asia/Tokyo"})],
        False,
    ),
]


def _ascii(text: str) -> str:
    return text.replace(FW, ASCII)


def _read(text: str, thinking: bool, step: int | None) -> tuple[str, str, list[tuple[str, Any]], bool]:
    """What a route reads from ``text`` (the generation stopped): the reasoning parser (thinking
    mode, tools offered), the reasoning scrubbed, the answer through the tool-call reader.
    ``step``: streamed in deltas of that many characters; ``None``: whole (one feed).
    Returns ``(reasoning, content, calls as (name, arguments), malformed)``; the calls are folded
    from the streamed deltas when streamed, else the parser's calls."""
    rp = ReasoningParser(implicit_end=(f"<{FW}tool_calls>", BARE_INVOKE_START)) if thinking else None
    scrub = DsmlMarkupScrub()
    reader = DsmlAnswerReader(DsmlToolParser(TOOLS))
    reasoning, content = "", ""
    folded: dict[int, list[str]] = {}

    def answer(piece: str, last: bool) -> None:
        nonlocal content
        c, deltas = reader.finish(stopped=True) if last else reader.feed(piece)
        content += c
        for d in deltas:
            f = folded.setdefault(d.index, ["", ""])
            f[0] += d.name or ""
            f[1] += d.arguments

    pieces = [text] if step is None else [text[i : i + step] for i in range(0, len(text), step)]
    for piece in pieces:
        if rp is None:
            answer(piece, False)
            continue
        r, c = rp.feed(piece)
        reasoning += scrub.feed(r)
        answer(c, False)
    if rp is not None:
        r, c = rp.flush()  # stopped without an end: the text stays reasoning
        reasoning += scrub.feed(r) + scrub.finish()
        answer(c, False)
    answer("", True)
    if step is None:
        calls = [(c.name, json.loads(c.arguments)) for c in reader.calls]
    else:  # a failing call's first deltas went out streamed (the documented difference): not JSON
        calls = [(n, json.loads(a)) for _, (n, a) in sorted(folded.items())[: len(reader.calls)]]
    return reasoning, content, calls, reader.malformed


@pytest.mark.parametrize("step", [None, 1, 2, 3], ids=["whole", "chars1", "chars2", "chars3"])
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_ascii_bars_read_as_fullwidth(shape: tuple[Any, ...], step: int | None) -> None:
    """The ASCII-bar text reads to the fullwidth text's reasoning, content, calls and malformed
    flag; the fullwidth reading is the hand-written expectation."""
    _, text, thinking, reasoning, content, calls, malformed = shape
    oracle = _read(text, thinking, step)
    assert oracle == (reasoning, content, calls, malformed)
    assert _ascii(text) != text
    assert _read(_ascii(text), thinking, step) == oracle


ANSWER_SHAPES = [s for s in SHAPES if not s[2]]


@pytest.mark.parametrize("shape", ANSWER_SHAPES, ids=[s[0] for s in ANSWER_SHAPES])
def test_parse_tool_calls_whole_ascii_bars(shape: tuple[Any, ...]) -> None:
    """The non-streamed parser (``/parse_function_call``) agrees with the fullwidth reading."""
    text = shape[1]
    want_content, want_calls, want_complete = parse_tool_calls(text, TOOLS, stopped=True)
    content, calls, complete = parse_tool_calls(_ascii(text), TOOLS, stopped=True)
    assert (content, complete) == (want_content, want_complete)
    assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in want_calls]


@pytest.mark.parametrize("closing", ["ascii_open_fullwidth_close", "fullwidth_open_ascii_close"])
def test_mixed_spellings_in_one_block(closing: str) -> None:
    """Each tag is read on its own: a block whose opening tags use one spelling and closing tags
    the other makes the same call."""
    text = "Let me check." + _block(PARIS)
    opens, closes = ("<" + ASCII, "</" + FW) if closing.startswith("ascii") else ("<" + FW, "</" + ASCII)
    mixed = text.replace("</" + FW, "\0").replace("<" + FW, opens).replace("\0", closes)
    assert FW in mixed and ASCII in mixed
    for step in (None, 1):
        assert _read(mixed, False, step) == (
            "",
            "Let me check.",
            [("get_weather", {"city": "Paris", "days": 3})],
            False,
        )


@pytest.mark.parametrize("step", [None, 1])
def test_prose_mentioning_ascii_marker_stays_content(step: int | None) -> None:
    """Prose that mentions ``<|DSML|`` without forming a block makes no call and reads as the
    same prose with the fullwidth marker does (the marker itself dropped as markup);
    ``|DSML|`` not after ``<`` and an unfinished ASCII marker are plain text, kept as written."""
    prose = f"Write <{FW} before the tag name, then more text."
    oracle = _read(prose, False, step)
    assert oracle == ("", "Write before the tag name, then more text.", [], False)
    assert _read(_ascii(prose), False, step) == oracle
    for text in ("| a |DSML| b |", "Done. <|DSML", "Done. </|DSM", "a <| b", "x <|DSML b"):
        assert _read(text, False, step) == ("", text, [], False)
        # thinking, stopped without an end: the reasoning, kept as written
        assert _read(text, True, step) == (text, "", [], False)


@pytest.mark.parametrize("step", [None, 1])
def test_tools_withheld_cut_at_ascii_block(step: int | None) -> None:
    """``tool_choice: "none"``: an ASCII-bar block is cut off as a fullwidth one is."""
    text = "No tools needed." + _block(PARIS) + " trailing"

    def cut(t: str) -> str:
        reader = DsmlAnswerReader(DsmlWithheld())
        pieces = [t] if step is None else list(t)
        out = "".join(reader.feed(p)[0] for p in pieces)
        return out + reader.finish(stopped=True)[0]

    assert cut(text) == "No tools needed."
    assert cut(_ascii(text)) == "No tools needed."


@pytest.mark.parametrize("step", [None, 1])
def test_reasoning_scrub_drops_ascii_tags(step: int | None) -> None:
    """DSML closers left in reasoning or content are dropped in either spelling."""
    text = f"Thinking.\n</{FW}parameter>\n</{FW}invoke> more."
    for t in (text, _ascii(text)):
        s = DsmlMarkupScrub()
        pieces = [t] if step is None else list(t)
        assert "".join(s.feed(p) for p in pieces) + s.finish() == "Thinking. more."


# --------------------------------------------------------------------------- the server routes


def _chat(tok: Any, reply: str, thinking: bool) -> tuple[Any, ...]:
    """``reply`` scripted as the model's output, read by ``/v1/chat/completions`` through the
    ``openai`` client: the non-streamed message's (reasoning, content, calls, finish reason) and
    the same folded from the client's stream chunks."""
    from fake_prompt_tm import PromptTM
    from responses_testutil import CHAT_WEATHER, make_client

    client, _ = make_client(PromptTM(tok, reply=reply))
    kw: Any = {
        "model": "dsv4-test",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [CHAT_WEATHER],
        "extra_body": {"chat_template_kwargs": {"thinking": thinking}},
    }
    whole = client.chat.completions.create(**kw).choices[0]
    msg = whole.message
    got_whole = (
        getattr(msg, "reasoning_content", None) or "",
        msg.content or "",
        [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []],
        whole.finish_reason,
    )
    reasoning = content = ""
    calls: dict[int, list[str]] = {}
    finish = None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            reasoning += getattr(ch.delta, "reasoning_content", None) or ""
            content += ch.delta.content or ""
            finish = ch.finish_reason or finish
            for d in ch.delta.tool_calls or []:
                c = calls.setdefault(d.index, ["", ""])
                c[0] += (d.function and d.function.name) or ""
                c[1] += (d.function and d.function.arguments) or ""
    got_stream = (reasoning, content, [(n, json.loads(a)) for _, (n, a) in sorted(calls.items())], finish)
    return got_whole, got_stream


@pytest.mark.parametrize("thinking", [False, True], ids=["chat", "thinking"])
@pytest.mark.parametrize("bare", [False, True], ids=["wrapped", "bare_invoke"])
def test_chat_route_reads_ascii_bar_calls(tok: Any, thinking: bool, bare: bool) -> None:
    """cline/cline#13348: an ASCII-bar block came back as ``content`` with no ``tool_calls``.
    Expected: the call the fullwidth reply makes (``finish_reason`` ``tool_calls``, no markup in
    ``content`` or ``reasoning_content``), streamed and not."""
    call = "\n\n" + PARIS if bare else _block(PARIS)
    reply = ("I should look it up." if thinking else "Let me check.") + call
    want = (
        "I should look it up." if thinking else "",
        "" if thinking else "Let me check.",
        [("get_weather", {"city": "Paris", "days": 3})],
        "tool_calls",
    )
    oracle = _chat(tok, reply, thinking)
    assert oracle == (want, want)
    assert _chat(tok, _ascii(reply), thinking) == oracle


def test_messages_and_responses_routes_read_ascii_bar_calls(tok: Any) -> None:
    """The Anthropic Messages and Responses routes make the fullwidth reply's call of an
    ASCII-bar reply (``tool_use`` / ``function_call`` with the arguments written)."""
    from anthropic_testutil import WEATHER as MESSAGES_WEATHER
    from anthropic_testutil import make_clients
    from fake_prompt_tm import PromptTM
    from responses_testutil import WEATHER, post

    def read(reply: str) -> tuple[Any, Any, Any]:
        client, _, tc = make_clients(PromptTM(tok, reply=reply))
        msg = client.messages.create(
            model="dsv4-test",
            max_tokens=256,
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[MESSAGES_WEATHER],  # type: ignore[list-item]
        )
        blocks = [
            (b.type, getattr(b, "text", None), getattr(b, "name", None), getattr(b, "input", None))
            for b in msg.content
        ]
        body, _ = post(tc, {"input": "Weather in Paris?", "tools": [WEATHER]})
        items = [
            (
                i["type"],
                i.get("name"),
                json.loads(i["arguments"]) if i["type"] == "function_call" else i.get("content"),
            )
            for i in body["output"]
        ]
        return blocks, msg.stop_reason, items

    reply = "Let me check." + _block(PARIS)
    oracle = read(reply)
    assert ("tool_use", None, "get_weather", {"city": "Paris", "days": 3}) in oracle[0]
    assert oracle[1] == "tool_use"
    assert ("function_call", "get_weather", {"city": "Paris", "days": 3}) in oracle[2]
    assert read(_ascii(reply)) == oracle

"""DSML tool-call parser: hand-written DeepSeek-V4 outputs with the calls written out by hand (the
oracle), parsed whole and streamed in every chunking: a split at every character position (text
deltas are whole characters: the detokenizer holds back incomplete UTF-8), one character at a
time, random 5-way splits, and the real tokenizer's token pieces."""

from __future__ import annotations

import json
import random
import re

import pytest
from sglang_v4.entrypoints.openai.tool_parser import (
    DsmlToolParser,
    canonical_tool_call_parser,
    parse_tool_calls,
)
from tool_parser_testutil import TOOLS, D, block, chunkings, invoke, run_stream, token_pieces

# (model output, expected content, expected [(name, arguments as a dict)])
GOOD = [
    (
        block(invoke("get_weather", ("city", "true", "Paris"), ("days", "false", "3"))),
        "",
        [("get_weather", {"city": "Paris", "days": 3})],
    ),
    (
        "Let me check both.  "
        + block(
            invoke("get_weather", ("city", "true", '東京 "centre"\n\\ <b>')),
            invoke(
                "book",
                ("to", "true", "Lima"),
                ("pax", "false", " 2 "),
                ("flex", "false", "true"),
                ("legs", "false", '["a", {"b": null}]'),
                ("meta", "false", '{"x": 1.5, "y": "</"}'),
            ),
        ),
        "Let me check both.  ",  # the newlines are the separator; the spaces are text (recipe)
        [
            ("get_weather", {"city": '東京 "centre"\n\\ <b>'}),
            (
                "book",
                {
                    "to": "Lima",
                    "pax": 2,
                    "flex": True,
                    "legs": ["a", {"b": None}],
                    "meta": {"x": 1.5, "y": "</"},
                },
            ),
        ],
    ),
    (block(f'<{D}invoke name="noop">\n\n</{D}invoke>'), "", [("noop", {})]),
    (  # an invoke whose body is a JSON object, and text after the block
        block(f'<{D}invoke name="get_weather">\n{{"city": "Rome", "days": [1, 2]}}\n</{D}invoke>')
        + "\nDone.",
        "Done.",
        [("get_weather", {"city": "Rome", "days": [1, 2]})],
    ),
    ("Plain answer with <b>tags</b> and a < sign.\n", "Plain answer with <b>tags</b> and a < sign.\n", []),
    # a misspelled wrapper (vllm-project/vllm#51914: V4-Flash-0731 wrote "toolcalls") holding
    # invokes is a block
    (
        f"On it.\n\n<{D}toolcalls>\n" + invoke("noop") + f"\n</{D}toolcalls>\nDone.",
        "On it.\nDone.",
        [("noop", {})],
    ),
    # bare blocks: invokes without the <tool_calls> wrapper (sgl-project/sglang#40236,
    # vllm-project/vllm#48931): up to the end of the output, to an orphan closing tag, or to text
    (
        "Checking.\n\n" + invoke("get_weather", ("city", "true", "Oslo")),
        "Checking.",
        [("get_weather", {"city": "Oslo"})],
    ),
    (
        "\n\n"
        + invoke("get_weather", ("city", "true", "Oslo"))
        + "\n"
        + invoke("noop")
        + f"\n</{D}tool_calls>",
        "",
        [("get_weather", {"city": "Oslo"}), ("noop", {})],
    ),
    (
        invoke("book", ("pax", "false", "2")) + "\n\nBooked <b>now</b>.",
        "Booked <b>now</b>.",
        [("book", {"pax": 2})],
    ),
]

BAD = [
    block(invoke("launch_missiles", ("x", "true", "1"))),  # not one of the request's tools
    block(invoke("get_weather", ("days", "false", "three"))),  # not JSON
    block(invoke("get_weather", ("city", "true", "a"), ("city", "true", "b"))),  # duplicate parameter
    block(invoke("get_weather", ("city", "maybe", "a"))),  # bad string flag
    f"\n\n<{D}tool_calls>\nhello\n</{D}tool_calls>",  # text between tags
    f"\n\n<{D}tool_calls>\n</{D}tool_calls>",  # empty block
    block(f'<{D}invoke name="get_weather">\n["not", "an", "object"]\n</{D}invoke>'),
    # a closing tag left out: the value would run over the next parameter's markup
    # (vllm-project/vllm#53227)
    block(
        f'<{D}invoke name="get_weather">\n<{D}parameter name="city" string="true">Oslo\n'
        f'<{D}parameter name="days" string="false">2</{D}parameter>\n</{D}invoke>'
    ),
    "\n\n" + invoke("launch_missiles", ("x", "true", "1")),  # bare, not one of the request's tools
    "See " + invoke("get_weather", ("days", "false", "three")) + " here",  # bare, not JSON
]
#: The content of each BAD text: the text around the dropped block, the newlines in front of the
#: block going with it (as for a well-formed block; a space there is text), the whitespace after it
#: dropped.
BAD_CONTENT = [""] * (len(BAD) - 1) + ["See here"]


@pytest.mark.parametrize("text,content,expected", GOOD, ids=[str(i) for i in range(len(GOOD))])
def test_well_formed_calls_every_chunking(text: str, content: str, expected: list) -> None:
    got_content, calls, complete = parse_tool_calls(text, TOOLS)
    assert got_content == content
    assert [(c.name, json.loads(c.arguments)) for c in calls] == expected
    assert complete == bool(expected)
    for chunks in chunkings(text):
        s_content, s_calls, p = run_stream(chunks)
        assert s_content == content, chunks
        assert [(c["name"], json.loads(c["arguments"])) for c in s_calls.values()] == expected, chunks
        # the streamed argument text is exactly the non-streamed one, and no markup leaks
        assert [c["arguments"] for c in s_calls.values()] == [c.arguments for c in calls]
        for c in s_calls.values():
            assert "DSML" not in c["arguments"] and "｜" not in c["arguments"]
        assert "DSML" not in s_content and "｜" not in s_content
        assert p.complete == bool(expected)


@pytest.mark.parametrize(
    "text,want", list(zip(BAD, BAD_CONTENT, strict=True)), ids=[str(i) for i in range(len(BAD))]
)
def test_malformed_block_is_dropped(text: str, want: str) -> None:
    """A malformed block is no call and is dropped from the content (no DSML markup in it), the
    same in every chunking."""
    content, calls, complete = parse_tool_calls(text, TOOLS)
    assert (content, calls, complete) == (want, [], False)
    for chunks in chunkings(text):
        s_content, _, p = run_stream(chunks)
        assert s_content == want, chunks
        assert p.malformed and not p.complete


def test_arguments_stream_while_generated() -> None:
    """Argument fragments come out as the value is generated, not when the call ends; the
    closing tag's first characters are held back and never appear in the arguments."""
    text = block(invoke("get_weather", ("city", "true", "Paris la belle"), ("days", "false", "12")))
    p = DsmlToolParser(TOOLS)
    args = ""
    cut = text.index("la belle") + 2
    for ch in text[:cut]:
        args += "".join(d.arguments for d in p.feed(ch)[1])
    assert args == '{"city": "Paris la'
    for piece in (" belle<", "", "/", D, "param"):
        args += "".join(d.arguments for d in p.feed(piece)[1])
        assert args == '{"city": "Paris la belle', piece
    rest = text[text.index("eter>", cut) :]
    args += "".join(d.arguments for d in p.feed(rest[: rest.index("12") + 1])[1])
    assert args == '{"city": "Paris la belle", "days": 1'
    for d in p.feed(rest[rest.index("12") + 1 :])[1] + p.finish()[1]:
        args += d.arguments
    assert json.loads(args) == {"city": "Paris la belle", "days": 12}


def _timed_deltas(text: str, start: int) -> list[tuple[int, int, str | None, str]]:
    """Feed ``text`` one character at a time: each tool-call delta as ``(characters fed, counted
    from ``start``; call index; name when the delta carries one (with an id); arguments)``."""
    p = DsmlToolParser(TOOLS)
    out = []
    for i, ch in enumerate(text):
        for d in p.feed(ch)[1]:
            assert (d.id is None) == (d.name is None), d
            out.append((i + 1 - start, d.index, d.name, d.arguments))
    out += [(len(text) + 1 - start, d.index, d.name, d.arguments) for d in p.finish()[1]]
    return out


def _argument_timeline(deltas: list[tuple[int, int, str | None, str]]) -> list[tuple[int, int, str]]:
    """``(offset, call index, argument text)`` of timed deltas, the text that went out at one
    offset for one call joined (however it was split into deltas)."""
    out: list[tuple[int, int, str]] = []
    for t, i, _, a in deltas:
        if out and out[-1][:2] == (t, i):
            out[-1] = (t, i, out[-1][2] + a)
        elif a:
            out.append((t, i, a))
    return out


BARE_STREAMED = [
    invoke("get_weather", ("city", "true", "Oslo la belle"), ("days", "false", "12")),
    invoke("book", ("pax", "false", "2")) + "\n" + invoke("get_weather", ("city", "true", "Rome")),
    f'<{D}invoke name="book">{{"to": "Lima", "pax": 2}}</{D}invoke>',
]


@pytest.mark.parametrize("body", BARE_STREAMED, ids=[str(i) for i in range(len(BARE_STREAMED))])
def test_bare_block_streams_its_arguments_as_a_wrapped_one(body: str) -> None:
    """A bare block (no ``<｜DSML｜tool_calls>`` wrapper) streams as a wrapped one does: the call's
    ``id`` and ``name`` first, then its arguments while they are generated, before the invoke
    closes (it came whole at the close). Oracles: the non-streamed parse (the concatenated
    deltas are its arguments, ``json.loads`` equal) and the same invokes in a wrapped block fed
    the same way (the same argument text at the same offsets from the first invoke tag)."""
    bare = "Checking.\n\n" + body
    wrapped = "Checking." + block(body)
    _, calls, complete = parse_tool_calls(bare, TOOLS)
    assert complete and calls
    got = _timed_deltas(bare, bare.index(f"<{D}invoke"))
    want = _timed_deltas(wrapped, wrapped.index(f"<{D}invoke"))
    # the same argument text at the same offsets, the same names in the same order; a bare
    # call's id and name wait for its structure (its first parameter tag, JSON body or closing
    # tag), a wrapped one's not; a bare JSON body's ``{`` waits for the character that shows it
    # opens an object (``"`` or ``}``)
    tg, tw = _argument_timeline(got), _argument_timeline(want)
    for t in sorted({x[0] for x in tg + tw}):
        for i in {x[1] for x in tg + tw}:
            b = "".join(a for u, j, a in tg if u <= t and j == i)
            w = "".join(a for u, j, a in tw if u <= t and j == i)
            assert b == w or (w.startswith(b) and w[len(b) :] == "{" and b == ""), (t, i, b, w)
    assert [(i, n) for _, i, n, _ in got if n] == [(i, n) for _, i, n, _ in want if n]
    args: dict[int, str] = {}
    for _, index, name, fragment in got:
        assert (name is not None) == (index not in args), got  # id and name first, once
        args[index] = args.get(index, "") + fragment
    assert list(args.values()) == [c.arguments for c in calls]
    assert [json.loads(a) for a in args.values()] == [json.loads(c.arguments) for c in calls]
    # the first call's id, name and first argument fragments go out before its invoke closes
    close = body.index(f"</{D}invoke>")
    early = [d for d in got if d[1] == 0 and d[0] <= close]
    assert early and early[0][2] == calls[0].name, got
    sent = "".join(d[3] for d in early)
    assert calls[0].arguments.startswith(sent) and len(sent) >= len(calls[0].arguments) - 1, got


def test_arguments_text_has_the_reference_decoder_shape() -> None:
    # DeepSeek's decoder joins '"key": value' pairs with ", " inside braces; string="false" values
    # are their JSON text without the whitespace around it
    text = block(
        invoke("book", ("to", "true", 'A "b"'), ("pax", "false", " 2\n"), ("legs", "false", '["x",  1]'))
    )
    assert parse_tool_calls(text, TOOLS)[1][0].arguments == '{"to": "A \\"b\\"", "pax": 2, "legs": ["x",  1]}'


def test_unknown_tool_names_accepted_without_a_tool_list() -> None:
    text = block(invoke("anything", ("a", "true", "b")))
    _, calls, complete = parse_tool_calls(text, None)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("anything", {"a": "b"})] and complete


def test_dsml_tag_of_another_name_before_text_is_text() -> None:
    text = f"See <{D}note> here and <{D}x>."
    for chunks in chunkings(text):
        s_content, s_calls, p = run_stream(chunks)
        assert (s_content, s_calls, p.malformed) == (text, {}, False), chunks


def test_other_block_names_and_parser_names() -> None:
    text = f"\n\n<{D}function_calls>\n" + invoke("noop") + f"\n</{D}function_calls>"
    assert parse_tool_calls(text, TOOLS, block="function_calls")[1][0].name == "noop"
    # another wrapper name holding invokes (V3.2's, or V4-Flash-0731's "toolcalls" slip,
    # vllm-project/vllm#51914) is a block too: the invoke grammar is the same
    content, calls, complete = parse_tool_calls(text, TOOLS)
    assert (content, [c.name for c in calls], complete) == ("", ["noop"], True)
    assert canonical_tool_call_parser("deepseekv4") == "deepseekv4"
    assert canonical_tool_call_parser("deepseek_v4") == "deepseekv4"
    for bad in ("hermes", "deepseekv32"):
        with pytest.raises(ValueError, match="tool_call_parser"):
            canonical_tool_call_parser(bad)


def test_call_ids_unique_and_indices_continue_across_blocks() -> None:
    text = block(invoke("noop")) + "\n" + block(invoke("noop"), invoke("noop"))
    _, calls, complete = parse_tool_calls(text, TOOLS)
    assert [c.index for c in calls] == [0, 1, 2] and len({c.id for c in calls}) == 3 and complete


def test_round_trip_of_reference_encoded_calls() -> None:
    """Every DSML block that DeepSeek's reference encoder wrote into the fixture prompts parses back
    into the assistant message's original tool calls (names and argument objects)."""
    from pathlib import Path

    cases = json.loads((Path(__file__).parent / "fixtures" / "dsv4_chat_encoding.json").read_text())["cases"]
    n = 0
    for case in cases:
        want = [
            [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m["tool_calls"]]
            for m in case["messages"]
            if m["role"] == "assistant" and m.get("tool_calls")
        ]
        turns = case["expected"].split("<｜User｜>", 1)[1]  # after the system part (its tools section)
        blocks = re.findall(f"\n\n<{D}tool_calls>.*?</{D}tool_calls>", turns, flags=re.S)
        assert len(blocks) == len(want), case["name"]
        for text, calls in zip(blocks, want):
            content, got, complete = parse_tool_calls(text, None)
            assert content == "" and complete
            assert [(c.name, json.loads(c.arguments)) for c in got] == calls
            n += 1
    assert n >= 5


# ---------------------------------------------------------------------- generations cut short
# (known model output, the calls written out by hand): every prefix of the text is a generation
# cut there (max_tokens, or a stop inside the block)
CUT = [
    (GOOD[1][0], GOOD[1][2]),
    (GOOD[3][0], GOOD[3][2]),
    (
        block(invoke("noop"))
        + "\n"
        + block(invoke("get_weather", ("city", "true", "Rio"), ("days", "false", "7"))),
        [("noop", {}), ("get_weather", {"city": "Rio", "days": 7})],
    ),
]


def cut_oracle(text: str, k: int, expected: list) -> tuple[str, list[tuple[str, str, bool]], bool, bool]:
    """What a generation cut after ``text[:k]`` answers, from the positions of the markers in the
    hand-written text: ``(content, [(name, arguments, partial)], complete, cut inside a block)``. A call exists once
    its invoke tag is complete; its arguments are the full JSON text once its invoke is closed,
    else (partial) a prefix of it, checked by the caller. Content is the text outside blocks (the
    newlines before a block dropped, text after one left-stripped), up to the cut; a cut inside a
    block (its first ``"<"`` included) ends the content before the block's newlines."""
    starts = [m.start() for m in re.finditer(f"<{D}tool_calls>", text)]
    ends = [m.end() for m in re.finditer(f"</{D}tool_calls>", text)]
    blocks = [(lt - (len(text[:lt]) - len(text[:lt].rstrip("\n"))), lt, end) for lt, end in zip(starts, ends)]
    tags = [m.end() for m in re.finditer(f'<{D}invoke name="[^"]*">', text)]
    closes = [m.end() for m in re.finditer(f"</{D}invoke>", text)]
    full = [json.dumps(args, ensure_ascii=False) for _, args in expected]
    calls = [
        (name, full[i], False) if closes[i] <= k else (name, None, True)
        for i, (name, _) in enumerate(expected)
        if tags[i] <= k
    ]
    content, pos, after = "", 0, False
    for ws, lt, end in blocks:
        if k <= lt:
            break
        seg = text[pos:ws]
        content += seg.lstrip() if after else seg
        if k < end:
            return content, calls, False, True
        pos, after = end, True
    seg = text[pos:k]
    content += seg.lstrip() if after else seg
    return content, calls, any(end <= k for _, _, end in blocks), False


@pytest.mark.parametrize("text,expected", CUT, ids=[str(i) for i in range(len(CUT))])
def test_every_cut_point_streamed_equals_non_streamed(text: str, expected: list) -> None:
    """A generation cut at each character: the concatenated stream deltas and the non-streamed
    parse give the same content and calls, both equal to the oracle: the partial call carries its
    name and a prefix of its final arguments, no markup ever reaches content or arguments, and
    :attr:`complete` (the finish reason ``"tool_calls"``) holds only after the block closed."""
    full = [json.dumps(args, ensure_ascii=False) for _, args in expected]
    pieces = token_pieces(text)
    rng = random.Random(1)
    prev_args: list[str] = []
    for k in range(len(text) + 1):
        want_content, want_calls, want_complete, want_cut = cut_oracle(text, k, expected)
        content, calls, complete = parse_tool_calls(text[:k], TOOLS)
        got = [(c.name, c.arguments, c.partial) for c in calls]
        assert content == want_content and complete == want_complete, k
        assert [(n, p) for n, _, p in got] == [(n, p) for n, _, p in want_calls], k
        for i, (_, args, partial) in enumerate(got):
            assert full[i].startswith(args) and (partial or args == full[i]), (k, args)
            # arguments only grow as the generation goes on
            assert i >= len(prev_args) or args.startswith(prev_args[i]), (k, args, prev_args[i])
            assert "｜" not in args and "DSML" not in args
        assert "｜" not in content and "DSML" not in content
        prev_args = [a for _, a, _ in got]
        # the same cut streamed in several chunkings: token pieces (the last one cut), characters,
        # one chunk, a random 3-way split
        toks, n = [], 0
        for piece in pieces:
            if n >= k:
                break
            toks.append(piece[: k - n])
            n += len(toks[-1])
        streams = [toks, list(text[:k]), [text[:k]]]
        if k > 2:
            a, b = sorted(rng.sample(range(1, k), 2))
            streams.append([text[:a], text[a:b], text[b:k]])
        for chunks in streams:
            s_content, s_calls, p = run_stream(chunks)
            assert s_content == content, (k, chunks)
            assert [(c["name"], c["arguments"]) for c in s_calls.values()] == [(n, a) for n, a, _ in got], k
            assert p.complete == complete and p.truncated == want_cut and not p.malformed, k


def test_cut_calls_hand_checked() -> None:
    """Exact partial arguments at a few cut points (the held-back start of a closing tag, or a
    ``"<"`` that may be one, is not part of them)."""
    text = GOOD[1][0]
    city = '東京 "centre"\n\\ <b>'

    def at(marker: str, extra: int = 0) -> tuple[str, list[tuple[str, str, bool]], bool]:
        k = text.index(marker) + len(marker) + extra
        content, calls, complete = parse_tool_calls(text[:k], TOOLS)
        return content, [(c.name, c.arguments, c.partial) for c in calls], complete

    assert at(f"<{D}invoke") == ("Let me check both.  ", [], False)  # name unknown yet: no call
    assert at('name="get_weather"') == ("Let me check both.  ", [], False)
    assert at('name="get_weather">') == ("Let me check both.  ", [("get_weather", "", True)], False)
    assert at("東京") == ("Let me check both.  ", [("get_weather", '{"city": "東京', True)], False)
    head = '{"city": ' + json.dumps(city[: city.index("<")], ensure_ascii=False)[:-1]
    assert at("\\ <") == ("Let me check both.  ", [("get_weather", head, True)], False)
    assert at("\\ <b>") == ("Let me check both.  ", [("get_weather", head + "<b>", True)], False)
    first = ("get_weather", json.dumps({"city": city}, ensure_ascii=False), False)
    assert at(f"</{D}invoke>")[1] == [first]
    assert at('"pax" string="false">', 2)[1] == [first, ("book", '{"to": "Lima", "pax": 2', True)]
    # the output ends with the first characters of a block start: dropped with the newlines
    # before it (the separator), the spaces before those are text
    for tail in ("<", f"<{D}", f"<{D}tool_calls"):
        assert parse_tool_calls("Sure.  \n\n" + tail, TOOLS) == ("Sure.  ", [], False)
    assert parse_tool_calls("Sure.  \n", TOOLS) == ("Sure.  \n", [], False)


@pytest.mark.parametrize("text,expected", CUT, ids=[str(i) for i in range(len(CUT))])
def test_cut_inside_the_bar_of_a_tag_reads_as_the_tag_start(text: str, expected: list) -> None:
    """A generation cut between the bytes of a DSML tag's ``｜`` (3 bytes, often 3 tokens) ends
    with a U+FFFD, the detokenizer's text for the incomplete character (streamed, it comes with
    the final chunk). It reads as that ``｜``: content, calls and the cut flag are those of the
    output cut right after the whole ``｜`` (checked against the oracle by
    :func:`test_every_cut_point_streamed_equals_non_streamed`), streamed and not; before, the
    output's ``"</"`` + U+FFFD went into the arguments (vllm-project/vllm#47903)."""
    del expected
    bars = [m.start() for m in re.finditer(re.escape(D), text)] + [
        m.end() - 1 for m in re.finditer(re.escape(D), text)
    ]
    assert bars
    for k in bars:
        want_content, want_calls, want_complete = parse_tool_calls(text[: k + 1], TOOLS)
        want = [(c.name, c.arguments, c.partial) for c in want_calls]
        content, calls, complete = parse_tool_calls(text[:k] + "\ufffd", TOOLS)
        assert (content, [(c.name, c.arguments, c.partial) for c in calls], complete) == (
            want_content,
            want,
            want_complete,
        ), k
        s_content, s_calls, _ = run_stream([text[:k], "\ufffd"])
        assert s_content == content and [(c["name"], c["arguments"]) for c in s_calls.values()] == [
            (n, a) for n, a, _ in want
        ], k


def test_cut_inside_a_value_character_stays_value_text() -> None:
    """A U+FFFD that cannot be a tag's ``｜`` (after a value's text) is the value's text, as an
    incomplete last character is in a plain answer."""
    text = block(invoke("get_weather", ("city", "true", "東京")))
    k = text.index("東")
    _, calls, _ = parse_tool_calls(text[:k] + "東\ufffd", TOOLS)
    assert [(c.name, c.arguments, c.partial) for c in calls] == [("get_weather", '{"city": "東\ufffd', True)]


@pytest.mark.parametrize(
    "after", ["{city} to call it.", "{ city: 'Oslo' } to call it.", "{\n  (braces) here"]
)
def test_bare_invoke_tag_then_brace_prose_is_no_call(after: str) -> None:
    """vllm-project/vllm#48931 (prose that mentions an invoke tag must not become a phantom call):
    an invoke tag followed by a ``{`` that opens no JSON object (no key, no ``}``) is prose. The
    text is the content, there is no call, and in no chunking does any tool-call delta go out (a
    delta cannot be taken back)."""
    text = f'Write <{D}invoke name="get_weather">{after}'
    assert parse_tool_calls(text, TOOLS)[:2] == (text, [])
    for chunks in chunkings(text):
        s_content, s_calls, p = run_stream(chunks)
        assert (s_content, s_calls) == (text, {}), chunks
        assert not p.malformed

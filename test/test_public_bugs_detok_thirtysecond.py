"""A thirty-second set of public bug reports, on detokenization: ids beyond the tokenizer's
vocabulary (a padded embedding) in the output, DeepSeek-V4's non-special added tokens (``<think>``,
``</think>``, the DSML marker, the fill-in-the-middle markers) kept by ``skip_special_tokens``
while BOS / EOS vanish, no space invented after a special token, runs of tokens that decode to
nothing or to stray bytes not growing the decode window, the decode cost of a step independent of
the output length, characters spelt byte by byte (CJK, emoji split eight-plus-one) never dropped
or shown half-made, an output cut by the length inside a character, streamed chunks never
replaying text, one request's odd ids or abort not disturbing the others of its message, and the
``skip_tokenizer_init`` forwarding of the ids. Each test names its report.

Fixtures: the detokenizer (``DetokenizerManager`` on the runtime's ``FastTokenizer``) fed
scheduler messages by hand (``detokenizer_testutil``). Oracles: ``transformers``' decode of the
whole id sequence on the same tokenizer files (ids outside its vocabulary removed first, as its
``convert_ids_to_tokens`` gives them no token), its ``all_special_ids``, the original input string,
and the scheduler message's own ids.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from detokenizer_testutil import byte_token, encode_plain, feed_each_token, stream_detok
from sglang_v4.managers.detokenizer_manager import DetokenizerManager, str_out_from_token_out
from sglang_v4.managers.io_struct import BatchTokenIDOut, finish_abort, finish_length

pytestmark = pytest.mark.timeout(240)

FFFD = "\ufffd"
MARKERS = ["<think>", "</think>", "｜DSML｜", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"]
BOS_TEXT, EOS_TEXT = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
#: A decode window no output length may push past: UTF-8 needs at most 4 byte tokens a character;
#: the bound leaves room for the detokenizer's held tail and its surrounding context.
WINDOW_BOUND = 32


def hf_text(hf: Any, ids: list[int], skip: bool = True) -> str:
    """``transformers``' decode of ``ids`` with the ids it has no token for removed."""
    return hf.decode([t for t in ids if 0 <= t < len(hf)], skip_special_tokens=skip)


def utf8_byte_ids(hf: Any, text: str) -> list[int]:
    """``text`` spelt entirely with single-byte vocabulary tokens, one per UTF-8 byte."""
    return [byte_token(hf, b) for b in text.encode()]


class CountingTokenizer:
    """Wraps a tokenizer and records the number of ids of every ``decode`` call."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sizes: list[int] = []

    def __len__(self) -> int:
        """The wrapped tokenizer's vocabulary size."""
        return len(self.inner)

    def decode(self, ids: list[int], **kw: Any) -> str:
        """The wrapped tokenizer's decode of ``ids``, after recording ``len(ids)``."""
        self.sizes.append(len(ids))
        return self.inner.decode(ids, **kw)


def message(rows: list[tuple[str, list[int], Any, int]], skip: bool = True) -> BatchTokenIDOut:
    """A scheduler message with one ``(rid, new ids, finish reason, completion tokens)`` row a
    request."""
    m = BatchTokenIDOut.empty()
    for rid, ids, reason, k in rows:
        m.append(
            rid=rid,
            finished_reason=reason,
            output_ids=ids,
            prompt_tokens=3,
            completion_tokens=k,
            skip_special_tokens=skip,
        )
    return m


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("per_message", [1, 3])
def test_trtllm_10106_ids_beyond_the_tokenizer_are_dropped(
    fast: Any, hf: Any, skip: bool, per_message: int
) -> None:
    """NVIDIA/TensorRT-LLM#10106: on DeepSeek-V3.2 the model's padded vocabulary yields ids the
    tokenizer has no token for; ``convert_ids_to_tokens`` gave ``None`` and the incremental
    detokenizer crashed. Expected: those ids add no text and break nothing around them; the
    streamed chunks and the final text equal ``transformers``' decode of the in-vocabulary ids."""
    n = len(hf)
    ids = encode_plain(hf, "hello 中文")
    ids += [n, n + 7, *encode_plain(hf, "<think> ok"), n + 1000, *encode_plain(hf, " 🦜 end"), n + 3]
    chunks, final = stream_detok(fast, ids, per_message=per_message, skip=skip)
    assert final == "".join(chunks) == hf_text(hf, ids, skip) == "hello 中文<think> ok 🦜 end"


@pytest.mark.parametrize("per_message", [1, 2, 5])
def test_lattice_430_non_special_added_tokens_survive_skip_special_tokens(
    fast: Any, hf: Any, per_message: int
) -> None:
    """ohdearquant/lattice#430: the detokenizer dropped the added tokens that are not special
    (``</think>`` vanished from the output), treating every added token like BOS / EOS.
    Expected: with ``skip_special_tokens`` the DeepSeek-V4 markers that ``transformers`` does not
    list as special (``<think>``, ``</think>``, DSML, the fill-in-the-middle markers) stay in the
    text, BOS and EOS vanish, and the text equals ``transformers``' decode."""
    special = set(hf.all_special_ids)
    assert all(encode_plain(hf, m)[0] not in special for m in MARKERS)
    text = (
        f"{BOS_TEXT}<think>plan</think>Answer<｜fim▁begin｜>a<｜fim▁hole｜>b<｜fim▁end｜> ｜DSML｜x{EOS_TEXT}"
    )
    ids = encode_plain(hf, text)
    chunks, final = stream_detok(fast, ids, per_message=per_message, skip=True)
    assert final == "".join(chunks) == hf.decode(ids, skip_special_tokens=True)
    assert all(m in final for m in MARKERS)
    assert BOS_TEXT not in final and EOS_TEXT not in final


@pytest.mark.parametrize("spaces", [True, False])
@pytest.mark.parametrize("skip", [True, False])
def test_llama_cpp_24008_no_space_invented_after_special_tokens(
    fast: Any, hf: Any, spaces: bool, skip: bool
) -> None:
    """ggml-org/llama.cpp#24008: a space appeared after control tokens (``<|channel|> analysis``
    instead of ``<|channel|>analysis``) in both the full and the streaming decode. Expected: the
    text after each special or added token is exactly what the ids spell, whatever
    ``spaces_between_special_tokens`` and ``skip_special_tokens`` say, equal to ``transformers``'
    decode with the same flags."""
    text = f"{BOS_TEXT}<｜Assistant｜>analysis</think>final<｜User｜>next{EOS_TEXT}"
    ids = encode_plain(hf, text)
    chunks, final = stream_detok(fast, ids, skip=skip, spaces_between_special_tokens=spaces)
    expected = hf.decode(ids, skip_special_tokens=skip, spaces_between_special_tokens=spaces)
    assert final == "".join(chunks) == expected
    assert "<｜Assistant｜>analysis</think>final<｜User｜>next" in final


@pytest.mark.parametrize("skip", [True, False])
def test_sglang_13275_ids_that_decode_to_nothing_keep_the_window_bounded(
    fast: Any, hf: Any, skip: bool
) -> None:
    """sgl-project/sglang#13275 (its issue #8031): a token decoding to an empty string never
    advanced the surrounding offset, so every step re-decoded an ever-growing id list (Kimi-K2
    slowed to a crawl). Expected: hundreds of ids that add no text (beyond the vocabulary, and
    EOS under ``skip_special_tokens``) keep the decode window small, and the text is
    ``transformers``' decode of the whole list."""
    words = encode_plain(hf, " word")
    empty = [len(hf) + 1, hf.eos_token_id] if skip else [len(hf) + 1]
    ids = [t for i in range(400) for t in ([words[0]] if i % 100 == 99 else [empty[i % len(empty)]])]
    steps = feed_each_token(DetokenizerManager(fast), ids, skip=skip)
    assert max(w for *_, w in steps if w is not None) <= WINDOW_BOUND
    assert steps[-1][1] == hf_text(hf, ids, skip) == " word" * 4


@pytest.mark.parametrize("n", [300, 3000])
def test_sglang_jax_1295_step_cost_does_not_grow_with_the_output(fast: Any, hf: Any, n: int) -> None:
    """sgl-project/sglang-jax#1295 (also ml-explore/mlx-examples#651, linear whatever the longest
    line): each step rebuilt and re-decoded the whole id list, O(output length) per step.
    Expected: on a single long line the largest ``decode`` call of any step has the same small
    bound for 300 and 3000 output tokens, and the text is ``transformers``' decode."""
    unit = encode_plain(hf, "abc中文🦜")
    ids = (unit * (n // len(unit) + 1))[:n]
    tok = CountingTokenizer(fast)
    dm = DetokenizerManager(tok)
    tok.sizes.clear()
    steps = feed_each_token(dm, ids)
    assert max(tok.sizes) <= WINDOW_BOUND
    assert steps[-1][1] == hf.decode(ids)


def test_smg_696_stray_byte_runs_do_not_grow_the_window(fast: Any, hf: Any) -> None:
    """smg-project/smg#696: the incremental decode kept re-decoding a growing window while the
    output stalled on incomplete UTF-8 / byte-fallback runs, O(N^2) on long generations.
    Expected: 500 lone continuation bytes (which never form a character) mixed with text keep the
    decode window bounded, and the streamed text is ``transformers``' decode of the whole list."""
    rng = random.Random(7)
    stray = [byte_token(hf, b) for b in (0x80, 0x9F, 0xBF)]
    word = encode_plain(hf, " ok")
    ids = [rng.choice(stray) if rng.random() < 0.9 else word[0] for _ in range(500)]
    steps = feed_each_token(DetokenizerManager(fast), ids)
    assert max(w for *_, w in steps if w is not None) <= WINDOW_BOUND
    assert steps[-1][1] == hf.decode(ids)


@pytest.mark.parametrize("per_message", [1, 2, 4])
def test_smg_710_cjk_spelt_with_byte_tokens_is_not_dropped(fast: Any, hf: Any, per_message: int) -> None:
    """smg-project/smg#710: the byte-fallback incremental decode advanced its read offset even
    when it emitted nothing, so CJK characters spelt with byte tokens went missing. Expected:
    ``客单价中文`` fed one UTF-8 byte token at a time comes out whole, with no replacement
    character in any chunk."""
    text = "客单价中文"
    ids = utf8_byte_ids(hf, text)
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    assert hf.decode(ids) == text
    assert final == "".join(chunks) == text
    assert all(FFFD not in c for c in chunks)


@pytest.mark.parametrize("per_message", [1, 3, 8, 9])
def test_dynamo_12688_emoji_split_eight_plus_one_is_never_half_shown(
    fast: Any, hf: Any, per_message: int
) -> None:
    """ai-dynamo/dynamo#12688: a fixed lookback could restart the decode inside a multi-token
    UTF-8 character, so ``🙂🙂`` spelt with eight byte tokens plus one more token streamed
    U+FFFD. Expected: no chunk holds a replacement character and the text is the input string."""
    ids = utf8_byte_ids(hf, "🙂🙂") + encode_plain(hf, "!")
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    assert final == "".join(chunks) == hf.decode(ids) == "🙂🙂!"
    assert all(FFFD not in c for c in chunks)


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_camelid_288_length_cut_inside_a_character_is_not_an_error(fast: Any, hf: Any, cut: int) -> None:
    """timtoole02/Camelid#288: when ``max_tokens`` ended the output inside an emoji, the strict
    UTF-8 decode failed and the request got a 503. Expected: the request finishes with
    ``transformers``' decode of the ids it has (a trailing U+FFFD for the incomplete
    character), the streamed chunks add up to it, and its decode state is dropped."""
    ids = encode_plain(hf, "ok ") + utf8_byte_ids(hf, "😊")[:cut]
    chunks, final = stream_detok(fast, ids)
    assert final == "".join(chunks) == hf.decode(ids)
    assert final.startswith("ok ") and final.endswith(FFFD)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sparkinfer_744_chunks_never_replay_sent_text(fast: Any, hf: Any, seed: int) -> None:
    """gittensor-ai-lab/sparkinfer#744: when a decode was not a prefix of the next one (an
    incomplete character turning into a complete one, a BPE rewrite) the streamer re-sent the
    whole string so far. Expected: over CJK text mixed with split byte tokens, the chunks' total
    length is the final text's length (nothing sent twice) and they concatenate to
    ``transformers``' decode."""
    rng = random.Random(seed)
    pieces = [
        encode_plain(hf, "客单价 "),
        utf8_byte_ids(hf, "世界"),
        encode_plain(hf, "a b"),
        utf8_byte_ids(hf, "🙂"),
    ]
    ids = [t for _ in range(12) for t in rng.choice(pieces)]
    chunks, final = stream_detok(fast, ids, per_message=1 + seed)
    assert sum(map(len, chunks)) == len(final)
    assert "".join(chunks) == final == hf.decode(ids)


def test_lightllm_1299_one_odd_request_leaves_the_others_alone(fast: Any, hf: Any) -> None:
    """ModelTC/LightLLM#1299: a failure while detokenizing one request left the whole message
    unanswered and the other requests hanging. Expected: in messages mixing running, finished and
    aborted requests, one with ids outside the vocabulary (negative, past the end) and one
    aborted inside a character, every request gets ``transformers``' decode of its own ids, and
    exactly the finished requests' decode states are dropped."""
    dm = DetokenizerManager(fast)
    good = encode_plain(hf, "alpha beta gamma delta")
    odd = [-5, *encode_plain(hf, "x y"), len(hf) + 9]
    half = encode_plain(hf, "ab ") + utf8_byte_ids(hf, "界")[:2]
    sent: dict[str, str] = {"g": "", "o": "", "h": ""}
    first = dm.handle_batch_token_id_out(
        message([("g", good[:2], None, 2), ("o", odd[:2], None, 2), ("h", half[:-1], None, len(half) - 1)])
    )
    for rid, text in zip(first.rids, first.output_strs, strict=True):
        sent[rid] += text
    second = dm.handle_batch_token_id_out(
        message(
            [
                ("o", odd[2:], finish_length(len(odd)), len(odd)),
                ("g", good[2:3], None, 3),
                ("h", half[-1:], finish_abort(), len(half)),
            ]
        )
    )
    finals = dict(zip(second.rids, second.final_strs, strict=True))
    for rid, text in zip(second.rids, second.output_strs, strict=True):
        sent[rid] += text
    assert set(dm.decode_status) == {"g"}
    assert finals["o"] == sent["o"] == hf_text(hf, odd) == "x y"
    assert finals["h"] == sent["h"] == hf.decode(half)
    assert finals["g"] is None
    last = dm.handle_batch_token_id_out(message([("g", good[3:], finish_length(len(good)), len(good))]))
    assert last.final_strs[0] == sent["g"] + last.output_strs[0] == hf.decode(good)
    assert not dm.decode_status


def test_sglang_1798_skip_tokenizer_init_forwards_the_ids_unchanged() -> None:
    """sgl-project/sglang#1798: with ``--skip-tokenizer-init`` the server returned wrong tokens.
    Expected: the message the detokenizer process forwards without a tokenizer carries every
    request's ids, finish reason and token counts exactly as the scheduler sent them, with no
    text."""
    rows = [("a", [5, 6, 7], None, 3), ("b", [129279, 1], finish_length(2), 2), ("c", [], finish_abort(), 0)]
    out = str_out_from_token_out(message(rows))
    assert out.rids == ["a", "b", "c"]
    assert out.output_ids == [r[1] for r in rows]
    assert out.finished_reasons == [r[2] for r in rows]
    assert out.completion_tokens == [r[3] for r in rows]
    assert out.output_strs == ["", "", ""] and out.final_strs == [None, None, None]

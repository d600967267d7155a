"""Tokenizer wrapper and incremental detokenization, against ``transformers`` as the oracle."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

import pytest
from sglang_v4.managers.detokenizer_manager import DetokenizerManager, trim_matched_stop
from sglang_v4.managers.io_struct import BatchTokenIDOut, finish_length, finish_stop
from sglang_v4.managers.tokenizer_manager import RequestError, TokenizerManager, stop_holdback

SAMPLES = [
    "Hello world",
    " leading space",
    "你好，世界！ emoji 😀🚀 mixed ünïcödé",
    "<｜begin▁of▁sentence｜>system<｜User｜>hi<｜Assistant｜></think>ok<｜end▁of▁sentence｜>",
    "",
    "tabs\tand\nnewlines\n\n  ",
    "def f(x):\n    return x ** 2  # comment",
]


def test_fast_tokenizer_matches_transformers(hf, fast):
    assert len(fast) == len(hf) and fast.vocab_size == hf.vocab_size
    assert (fast.bos_token_id, fast.eos_token_id) == (hf.bos_token_id, hf.eos_token_id)
    assert fast.all_special_ids == sorted(hf.all_special_ids)
    rng = random.Random(0)
    samples = list(SAMPLES) + ["".join(chr(rng.randrange(32, 0x3000)) for _ in range(40)) for _ in range(5)]
    for s in samples:
        for add in (True, False):
            assert fast.encode(s, add_special_tokens=add) == hf.encode(s, add_special_tokens=add), s
        ids = hf.encode(s)
        for skip in (True, False):
            assert fast.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip), s
    ids = [hf.encode(s) for s in SAMPLES]
    assert fast.batch_decode(ids) == hf.batch_decode(ids)
    assert fast.convert_ids_to_tokens(ids[0]) == hf.convert_ids_to_tokens(ids[0])


def _msg(rid: str, ids: list[int], new: list[int], reason=None, no_trim=False, skip=True) -> BatchTokenIDOut:
    return BatchTokenIDOut(
        rids=[rid],
        finished_reasons=[reason],
        output_ids=[list(new)],
        skip_special_tokens=[skip],
        no_stop_trim=[no_trim],
        prompt_tokens=[1],
        completion_tokens=[len(ids)],
        cached_tokens=[0],
    )


@pytest.mark.parametrize("text", SAMPLES[:4] + ["😀😀😀 many multibyte 🚀🚀 中文字符测试"])
def test_incremental_detokenization_equals_full_decode(hf, fast, text):
    ids = hf.encode(text, add_special_tokens=False)
    if not ids:
        return
    dm = DetokenizerManager(fast)
    pieces: list[str] = []
    for k in range(1, len(ids) + 1):
        reason = finish_length(k) if k == len(ids) else None
        out = dm.handle_batch_token_id_out(_msg("r", ids[:k], ids[k - 1 : k], reason))
        assert "\ufffd" not in out.output_strs[0]
        pieces.append(out.output_strs[0])
    full = hf.decode(ids, skip_special_tokens=True)
    assert "".join(pieces) == full
    assert out.final_strs[0] == full
    assert "r" not in dm.decode_status  # state freed on finish


def test_stop_trimming(hf, fast):
    ids = hf.encode(" one two three four", add_special_tokens=False)
    dm = DetokenizerManager(fast)
    out = dm.handle_batch_token_id_out(_msg("a", ids, ids, finish_stop("three")))
    assert out.final_strs[0] == " one two "
    out = dm.handle_batch_token_id_out(_msg("b", ids, ids, finish_stop("three"), no_trim=True))
    assert out.final_strs[0] == " one two three"
    # A matched stop token id is dropped from the text unless no_stop_trim.
    out = dm.handle_batch_token_id_out(_msg("c", ids, ids, finish_stop(ids[-1])))
    assert out.final_strs[0] == hf.decode(ids[:-1])
    out = dm.handle_batch_token_id_out(_msg("d", ids, ids, finish_stop(ids[-1]), no_trim=True))
    assert out.final_strs[0] == hf.decode(ids)
    assert trim_matched_stop("abc", None, False) == "abc"


def test_stop_holdback():
    assert stop_holdback("Hello wo", ["world"]) == "Hello "
    assert stop_holdback("Hello", ["world"]) == "Hello"
    assert stop_holdback("abcab", ["abd", "b"]) == "abc"
    assert stop_holdback("x</", ["</s>", "<"]) == "x"
    assert stop_holdback("", ["a"]) == ""


def test_encode_releasing_gil_gives_the_same_ids(hf, fast):
    for text in SAMPLES + ["x" * 20000]:
        for special in (True, False):
            want = hf.encode(text, add_special_tokens=special)
            assert fast.encode_releasing_gil(text, add_special_tokens=special) == want, (text[:40], special)


def test_max_chars_per_token_is_a_lower_bound_on_the_token_count(hf, fast):
    # ceil(chars / max_chars_per_token) tokens at least, for the texts that pack the most
    # characters into a token: the longest vocabulary entries (runs of dots / spaces) and the
    # special tokens. Oracle: transformers' token count.
    per = fast.max_chars_per_token
    assert isinstance(per, int) and per >= 36  # at least the longest special token
    vocab = hf.get_vocab()
    longest = sorted(vocab, key=len)[-20:]
    texts = SAMPLES + [hf.convert_tokens_to_string([t]) * 50 for t in longest]
    texts += ["." * 10_000, " " * 10_000, "<｜begin▁of▁sentence｜>" * 300, "a" * 5000]
    for text in texts:
        n = len(hf.encode(text, add_special_tokens=False))
        assert n >= -(-len(text) // per), (text[:30], n, len(text))


def _encode_text_host(tokenizer, context_len: int) -> SimpleNamespace:
    return SimpleNamespace(
        tokenizer=tokenizer,
        context_len=context_len,
        max_req_input_len=context_len - 1,
        _auto_truncate=lambda: False,  # the server's --allow-auto-truncate (off)
    )


def test_encode_text_leaves_the_event_loop_free(fast):
    # A prompt of millions of characters takes seconds to tokenize; meanwhile the event loop must
    # keep serving (other requests' streams, /health). Counted as loop turns, not as a time.
    text = "hello world " * 200_000  # 2.4M characters, 400k tokens: not provably too long below
    host = _encode_text_host(fast, context_len=10**6)

    async def main() -> tuple[list[int], int]:
        turns = 0
        task = asyncio.ensure_future(TokenizerManager.encode_text(host, text))  # type: ignore[arg-type]
        while not task.done():
            await asyncio.sleep(0.001)
            turns += 1
        return task.result(), turns

    ids, turns = asyncio.run(main())
    assert ids == fast.encode(text)
    assert turns >= 5, turns


def test_encode_text_rejects_a_provably_too_long_prompt_without_tokenizing(fast):
    class NoEncode:
        max_chars_per_token = fast.max_chars_per_token

        def encode(self, *a, **k):
            raise AssertionError("tokenized")

        encode_releasing_gil = encode

    text = "y" * (NoEncode.max_chars_per_token * 600 + 1)  # at least 601 tokens
    host = _encode_text_host(NoEncode(), context_len=512)
    with pytest.raises(RequestError) as e:
        asyncio.run(TokenizerManager.encode_text(host, text, max_new_tokens=8))  # type: ignore[arg-type]
    msg = str(e.value)
    assert e.value.status_code == 400
    # the prompt alone fills the context: SGLang's input wording (it checks the input before
    # input + max_new_tokens), whatever max_new_tokens is
    assert msg.startswith("The input (at least 601 tokens) is longer than the model's context length (512"), (
        msg
    )
    assert "maximum context length is 512 tokens" in msg, msg
    assert len(fast.encode(text, add_special_tokens=False)) >= 601  # the bound was right

"""Tokenizer wrapper and incremental detokenization, against ``transformers`` as the oracle."""

from __future__ import annotations

import random

import pytest
from server_fixture import tokenizer_source_dir
from sglang_v4.managers.detokenizer_manager import DetokenizerManager, trim_matched_stop
from sglang_v4.managers.io_struct import BatchTokenIDOut, finish_length, finish_stop
from sglang_v4.managers.tokenizer_manager import stop_holdback
from sglang_v4.utils import FastTokenizer

SAMPLES = [
    "Hello world",
    " leading space",
    "你好，世界！ emoji 😀🚀 mixed ünïcödé",
    "<｜begin▁of▁sentence｜>system<｜User｜>hi<｜Assistant｜></think>ok<｜end▁of▁sentence｜>",
    "",
    "tabs\tand\nnewlines\n\n  ",
    "def f(x):\n    return x ** 2  # comment",
]


@pytest.fixture(scope="module")
def hf():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_source_dir())


@pytest.fixture(scope="module")
def fast():
    return FastTokenizer(tokenizer_source_dir())


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

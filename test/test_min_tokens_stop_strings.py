"""``min_tokens`` / ``min_new_tokens`` with stop strings (vllm-project/vllm#21987): a stop string
in the text of the first ``min_new_tokens`` output tokens does not end the request, and the final
text is cut at the first occurrence after that text, not at the earlier one.

Below the HTTP layer, with the real DeepSeek-V4 tokenizer: the scheduler's per-token finish check
(``_append_token``), the scheduler -> detokenizer message (``BatchTokenIDOut.from_reqs``) and the
detokenizer's final text. The expected texts come from plain string operations on the decoded
script (the oracle), not from the code under test.
"""

from __future__ import annotations

import pytest
from server_fixture import FAKE_EOS, hf_auto_tokenizer
from sglang_v4.managers.io_struct import BatchTokenIDOut
from sglang_v4.managers.req import Req
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import check_stop
from stop_strings_testutil import SCRIPT, generate_with_stops


@pytest.fixture(scope="module")
def tok():
    return hf_auto_tokenizer()


def _tokens_before(tok, ids: list[int], text: str) -> int:
    """The fewest leading tokens of ``ids`` whose text contains ``text``."""
    for k in range(1, len(ids) + 1):
        if text in tok.decode(ids[:k]):
            return k
    raise AssertionError(text)


@pytest.mark.parametrize("min_tokens", [0, 3])
def test_stop_string_waits_for_min_tokens(tok, min_tokens: int) -> None:
    """vllm-project/vllm#21987: ``min_tokens`` with a stop string that the model produces early."""
    ids = tok.encode(SCRIPT, add_special_tokens=False)
    first = _tokens_before(tok, ids, "Stop")
    assert first < 3 < len(ids)  # the first "Stop" lies inside the first 3 tokens
    req, final = generate_with_stops(tok, SamplingParams(stop="Stop", min_new_tokens=min_tokens), ids)
    assert req.finished_reason == {"type": "stop", "matched": "Stop"}
    if min_tokens == 0:
        assert len(req.output_ids) == first and final == ""
    else:
        head = tok.decode(ids[:min_tokens])
        second = SCRIPT.index("Stop", len(head))
        assert len(req.output_ids) == _tokens_before(tok, ids, SCRIPT[: second + 4])
        assert final == SCRIPT[:second]  # cut at the second "Stop", not at the first


def test_stop_string_straddling_min_tokens_and_no_stop_trim(tok) -> None:
    """The stop string is matched only in the text after the first ``min_new_tokens`` tokens;
    ``no_stop_trim`` keeps it, up to that (second) occurrence."""
    ids = tok.encode(SCRIPT, add_special_tokens=False)
    req, final = generate_with_stops(
        tok, SamplingParams(stop=["again", "Stop"], min_new_tokens=2, no_stop_trim=True), ids
    )
    head = tok.decode(ids[:2])
    second = SCRIPT.index("Stop", len(head))
    assert req.finished_reason == {"type": "stop", "matched": "Stop"}
    assert final == SCRIPT[: second + len("Stop")]


def test_check_stop_regex_and_message_column(tok) -> None:
    """``check_stop`` on its own (regex too), and the message column the detokenizer reads: the
    request's ``min_new_tokens`` when it has stop strings, 0 without (nothing to trim)."""
    ids = tok.encode(SCRIPT, add_special_tokens=False)
    first = _tokens_before(tok, ids, "Stop")
    sp = SamplingParams(stop_regex=r"S\w+p", min_new_tokens=first)
    sp.normalize(tok)
    assert check_stop(ids[:first], sp, {FAKE_EOS}, tok, False) is None
    sp0 = SamplingParams(stop_regex=r"S\w+p")
    sp0.normalize(tok)
    assert check_stop(ids[:first], sp0, {FAKE_EOS}, tok, False) == {"type": "stop", "matched": r"S\w+p"}
    with_stop = Req(rid="a", origin_input_ids=[1], sampling_params=sp)
    plain = SamplingParams(min_new_tokens=4)
    plain.normalize(tok)
    without = Req(rid="b", origin_input_ids=[1], sampling_params=plain)
    assert BatchTokenIDOut.from_reqs([with_stop, without]).stop_str_min_tokens == [first, 0]

"""Stop strings that apply to the answer only (``stop_str_after_token_id``), below the HTTP layer:
the scheduler's finish check token by token, the detokenizer's trim, and the chat route's rewrite of
the sampling parameters. The fake-server tests (``test_openai_fake_server.py``) cover the same
through the ``openai`` client. Expected texts are computed here with plain string operations on the
decoded script."""

from __future__ import annotations

from typing import Any

import pytest
from scheduler_testutil import OutputProcessorStub
from server_fixture import FAKE_EOS, FAKE_SCRIPT, hf_auto_tokenizer
from sglang_v4.entrypoints.openai.reasoning_parser import stops_after_reasoning
from sglang_v4.managers.detokenizer_manager import trim_matched_stop
from sglang_v4.managers.req import Req
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import check_stop, stop_text_start

THINK_END = "</think>"


@pytest.fixture(scope="module")
def tok():
    return hf_auto_tokenizer()


def _run(tok, sp: SamplingParams, ids: list[int]) -> Req:
    """Feed ``ids`` to the scheduler's ``_append_token`` until the request finishes."""
    sp.normalize(tok)
    req = Req(rid="r", origin_input_ids=[5, 6], sampling_params=sp)
    req.max_new_tokens = len(ids)
    req.has_text_stops = True
    req.stop_text_start = stop_text_start(req.output_ids, sp)  # as the scheduler on admission
    s = OutputProcessorStub(tok)
    for t in ids:
        s._append_token(req, t, None, None)
        if req.finished_reason is not None:
            break
    return req


@pytest.mark.parametrize("stop", ["42", "</", "<", "Stop", "/think", "think>\n\nThe", "Hmm"])
def test_scheduler_matches_stop_strings_after_the_marker_only(tok, stop: str) -> None:
    ids = tok.encode(FAKE_SCRIPT, add_special_tokens=False) + [FAKE_EOS]
    think = tok.convert_tokens_to_ids(THINK_END)
    k = ids.index(think) + 1
    req = _run(tok, SamplingParams(stop=stop, stop_str_after_token_id=think), ids)
    # oracle: the first n such that the answer text decoded from ids[k:n] holds the stop string
    want = next((n for n in range(k + 1, len(ids) + 1) if stop in tok.decode(ids[k:n])), None)
    if want is None:
        assert req.finished_reason == {"type": "stop", "matched": FAKE_EOS} and req.output_ids == ids
    else:
        assert req.finished_reason == {"type": "stop", "matched": stop} and len(req.output_ids) == want
    # without the marker set, the same stop string fires in the reasoning where it occurs there
    plain = _run(tok, SamplingParams(stop=stop), ids)
    first = next(n for n in range(1, len(ids) + 1) if stop in tok.decode(ids[:n]) or n == len(ids))
    assert len(plain.output_ids) == first


def test_stop_text_start_and_check_stop(tok) -> None:
    sp = SamplingParams(stop="a", stop_str_after_token_id=7)
    assert stop_text_start([1, 2, 3], sp) == -1
    assert stop_text_start([1, 7, 3, 7], sp) == 2
    assert stop_text_start([1, 2], SamplingParams(stop="a")) == 0
    ids = tok.encode("a b", add_special_tokens=False)
    sp.normalize(tok)
    assert check_stop(ids, sp, None, tok, False, text_start=-1) is None  # dormant
    assert check_stop(ids, sp, None, tok, False, text_start=len(ids)) is None  # marker just came
    assert check_stop(ids, sp, None, tok, False, text_start=0) == {"type": "stop", "matched": "a"}
    assert check_stop(ids, sp, None, tok, True, text_start=-1) == {"type": "length", "length": len(ids)}
    with pytest.raises(ValueError, match="stop_str_after_token_id"):
        SamplingParams(stop_str_after_token_id=-1).verify()
    with pytest.raises(ValueError, match="stop_str_after_token_id"):
        SamplingParams(stop_str_after_token_id=10).verify(vocab_size=10)


def test_detokenizer_trims_after_the_marker() -> None:
    text = "x 42 y</think>\n\nz 42 w"
    fr = {"type": "stop", "matched": "42"}
    assert trim_matched_stop(text, fr, False, THINK_END) == text[: text.rindex("42")]
    assert trim_matched_stop(text, fr, True, THINK_END) == text[: text.rindex("42") + 2]
    assert trim_matched_stop(text, fr, False) == "x "  # without a marker: the first occurrence
    assert trim_matched_stop("x 42", fr, False, THINK_END) == "x "  # marker absent: from the start


def test_chat_sampling_params_rewrite() -> None:
    sp: dict[str, Any] = {"stop": ["</think>", "42"], "stop_token_ids": [3]}
    assert stops_after_reasoning(sp, 99) is True
    assert sp == {"stop": ["42"], "stop_token_ids": [3, 99], "stop_str_after_token_id": 99}
    sp = {"stop": "</think>"}
    assert stops_after_reasoning(sp, 99) is True and sp == {"stop_token_ids": [99]}
    sp = {"stop_regex": "x+"}
    assert stops_after_reasoning(sp, 99) is False and sp["stop_str_after_token_id"] == 99
    sp = {"max_new_tokens": 4}
    assert stops_after_reasoning(sp, 99) is False and sp == {"max_new_tokens": 4}
    SamplingParams.from_dict({"stop": "42", "stop_str_after_token_id": 99}).verify(vocab_size=100)

"""A twenty-ninth set of public bug reports on output text: characters split over several byte
tokens (a 4-byte CJK ideograph, a 3-byte one built from single-byte tokens) streamed without
U+FFFD, a U+FFFD the model really writes kept in the text, the request's ``skip_special_tokens``
in the streaming detokenizer when the ids come one a message, and a stop string ending inside a
token cutting the text at the stop string without the rest of that token.

Every report passed as-is; the tests are regression guards.

Fixtures: the detokenizer fed by hand (``detokenizer_testutil.stream_detok``) and the scheduler's
finish check with the detokenizer one token a step (``stop_strings_testutil``). Oracles: the
DeepSeek-V4 tokenizer loaded by ``transformers`` on its own (``hf``: ids, single-byte tokens and
``decode`` with and without ``skip_special_tokens``), the UTF-8 bytes of the characters, string
slicing of the scripted text, and the reports' stated expected values.
"""

from __future__ import annotations

from typing import Any

import pytest
from detokenizer_testutil import byte_token, encode_plain, stream_detok
from sglang_v4.sampling.sampling_params import SamplingParams
from stop_strings_testutil import generate_with_stops

EOS = "<｜end▁of▁sentence｜>"


@pytest.mark.parametrize("per_message", [1, 2])
def test_tensorrt_llm_2595_ideograph_over_byte_tokens_streams_whole(hf: Any, per_message: int) -> None:
    """NVIDIA/TensorRT-LLM#2595, anthropics/claude-code#59804 and Emanuele-web04/remodex#45: a CJK
    character spread over several tokens was sent as U+FFFD pieces while streaming. Expected (the
    reports: buffer a character's bytes until it is whole): no chunk holds U+FFFD and the chunks
    join to ``transformers``' ``decode``, for a 4-byte ideograph the tokenizer writes as byte
    tokens and for 聪 spelled with one single-byte token per UTF-8 byte."""
    built = [byte_token(hf, b) for b in "聪".encode()]
    ids = encode_plain(hf, "你有点") + encode_plain(hf, "𠀋 ok") + built + encode_plain(hf, "明")
    assert len(encode_plain(hf, "𠀋")) > 1  # the premise: the ideograph spans tokens
    chunks, final = stream_detok(hf, ids, per_message=per_message)
    assert all("\ufffd" not in c for c in chunks), chunks
    assert "".join(chunks) == final == hf.decode(ids) == "你有点𠀋 ok聪明"


@pytest.mark.parametrize("per_message", [1, 3])
def test_fastchat_1190_real_replacement_character_is_kept(hf: Any, per_message: int) -> None:
    """lm-sys/FastChat#1190 (its last comment): filtering every U+FFFD out of streamed text, to hide
    half-decoded characters, also removed the ones the model really wrote. Expected: a U+FFFD that
    is a whole token of the output reaches the text, the chunks joining to ``transformers``'
    ``decode`` of the ids."""
    ids = encode_plain(hf, "ok \ufffd done \ufffd")
    chunks, final = stream_detok(hf, ids, per_message=per_message)
    assert "".join(chunks) == final == hf.decode(ids) == "ok \ufffd done \ufffd"


@pytest.mark.parametrize("skip", [True, False])
def test_vllm_1044_streamed_special_token_follows_skip_special_tokens(hf: Any, skip: bool) -> None:
    """vllm-project/vllm#1044 and tenstorrent/tt-inference-server#2570: ``skip_special_tokens`` was
    not respected when the detokenizer converted one id at a time, and was not taken from the
    request. Expected: ids streamed one a message with an EOS between two words give the
    request's choice: ``transformers``' ``decode`` with the same ``skip_special_tokens``."""
    ids = encode_plain(hf, "a b") + [hf.convert_tokens_to_ids(EOS)] + encode_plain(hf, " c")
    chunks, final = stream_detok(hf, ids, per_message=1, skip=skip)
    assert "".join(chunks) == final == hf.decode(ids, skip_special_tokens=skip)
    assert (EOS in final) is (not skip)


@pytest.mark.parametrize(("stop", "expected"), [("ere, th", "Stop h"), ("her", "Stop "), ("p h", "Sto")])
def test_rtp_llm_458_no_text_after_the_stop_string(tok: Any, stop: str, expected: str) -> None:
    """alibaba/rtp-llm#458: when a stop string ended inside a token, the rest of that token (and
    tokens after it) reached the output. Expected (OpenAI's rule: the text ends right before the
    stop string, which is not returned): the final text is the scripted text cut at the stop
    string's first occurrence, also when the string spans token boundaries."""
    script = "Stop here, then go on."
    assert script.index(stop) == len(expected)  # the oracle: plain string slicing
    ids = tok.encode(script, add_special_tokens=False)
    req, final = generate_with_stops(tok, SamplingParams(stop=stop), ids)
    assert req.finished_reason is not None
    assert final == expected

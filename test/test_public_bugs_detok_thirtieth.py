"""A thirtieth set of public bug reports, on detokenization: runs of spaces streamed token by
token, characters the vocabulary spells with byte tokens (Korean, rare CJK, emoji) reassembled
and never shown as byte pieces, the concatenation property of the streamed chunks on arbitrary
(even invalid UTF-8) id sequences, an invalid byte run followed by a complete character, a
non-special stop token id dropped from the text (kept with ``no_stop_trim``), a special stop
token id kept out of the text when special tokens are shown, ``spaces_between_special_tokens``
and ``skip_special_tokens`` taken from the OpenAI routes' requests, ``skip_special_tokens``
honoured on every decode, the space after a special token kept, and several stop strings of
different lengths. Each test names its report.

Fixtures: the detokenizer (``DetokenizerManager`` on the runtime's ``FastTokenizer``) fed
scheduler messages by hand, the scheduler's ``check_stop``, and the OpenAI router in-process over
``openai_fake_tm.FakeTM`` (which records the requests it receives). Oracles: ``transformers``'
decode and encode of the whole id sequence on the same tokenizer files, the original input
string, Python's ``str.find``, and the request's own JSON fields.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from detokenizer_testutil import byte_token, encode_plain, stream_detok
from openai_fake_tm import FakeTM, app_client
from sglang_v4.managers.io_struct import finish_stop
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import check_stop

pytestmark = pytest.mark.timeout(240)

FFFD = "\ufffd"
USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"
EOS_TEXT = "<｜end▁of▁sentence｜>"


@pytest.mark.parametrize("text", ["a    b", "x        y\t\t z", "def f():\n        return  1"])
@pytest.mark.parametrize("per_message", [1, 3])
def test_lmdeploy_992_space_runs_survive_incremental_decode(
    fast: Any, hf: Any, text: str, per_message: int
) -> None:
    """InternLM/lmdeploy#992: with many whitespace tokens in a row, the incremental decode
    swallowed the prefix space (``"a    b"`` came back with a space missing). Expected: the
    streamed chunks add up to the input string, which is also ``transformers``' decode of the
    whole id sequence."""
    ids = encode_plain(hf, text)
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    assert hf.decode(ids) == text
    assert final == "".join(chunks) == text


@pytest.mark.parametrize("text", ["잠 깰 수 있는 영상 틀어 줄래?", "Zażółć gęślą jaźń", "龘靐齉 🦜🫠"])
@pytest.mark.parametrize("per_message", [1, 2])
def test_cactus_684_characters_spelt_with_byte_tokens_are_reassembled(
    fast: Any, hf: Any, text: str, per_message: int
) -> None:
    """cactus-compute/cactus#684 (fixed by its #810; also ollama/ollama#15232): characters the
    vocabulary lacks are spelt with byte tokens, and the detokenizer put the byte pieces
    (``<0xEA><0xB9><0xB0>``) into the text instead of reassembling them ("잠 깰 수 있는 ...").
    Expected: the text round-trips (encode then streamed decode gives the input string back),
    with no byte piece, no replacement character in any chunk, and nothing dropped."""
    ids = encode_plain(hf, text)
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    assert final == "".join(chunks) == text
    assert all(FFFD not in c and "<0x" not in c for c in chunks)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_halogen_13_streamed_chunks_concatenate_to_the_whole_decode(fast: Any, hf: Any, seed: int) -> None:
    """peonist-ai/halogen-flash-server#13: the streaming detokenizer re-decoded the whole output
    each step; the fix rests on the concatenation property -- the chunks of the windowed decode
    add up to the decode of the whole id list -- checked there over random ids and byte-heavy
    text. Expected: for random ids of the vocabulary (byte tokens included, so invalid UTF-8 in the
    middle), the streamed chunks concatenate to the final text, which is ``transformers``' decode
    of the whole list."""
    rng = random.Random(seed)
    special = set(hf.all_special_ids) | {t for t in range(len(hf)) if t >= hf.vocab_size}
    pool = [t for t in range(min(hf.vocab_size, 128000)) if t not in special]
    byte_ids = encode_plain(hf, "é中🦜")  # a few multi-byte pieces to break characters with
    ids = [rng.choice(byte_ids) if rng.random() < 0.3 else rng.choice(pool) for _ in range(40)]
    chunks, final = stream_detok(fast, ids, per_message=1 + seed % 3)
    assert "".join(chunks) == final == hf.decode(ids)


@pytest.mark.parametrize("no_stop_trim", [False, True])
@pytest.mark.parametrize("per_message", [1, 100])
def test_vllm_14624_non_special_stop_token_id_is_dropped_from_the_text(
    fast: Any, hf: Any, no_stop_trim: bool, per_message: int
) -> None:
    """vllm-project/vllm#14624: a ``stop_token_ids`` entry that is not a special token was kept
    in the output text (only a skipped special EOS vanished). Expected: the text ends before the
    stop token's text (``transformers``' decode of the ids before it), or includes it when the
    stop is kept (``no_stop_trim``, vLLM's ``include_stop_str_in_output``), in the streamed
    chunks and the final text alike."""
    ids = encode_plain(hf, "The answer is 42. Done")
    stop_id = next(t for t in ids if hf.decode([t]) == ".")
    ids = ids[: ids.index(stop_id) + 1]
    chunks, final = stream_detok(
        fast, ids, finish_stop(stop_id), per_message=per_message, no_stop_trim=no_stop_trim
    )
    expected = hf.decode(ids if no_stop_trim else ids[:-1])
    assert final == "".join(chunks) == expected
    assert final.endswith(".") == no_stop_trim


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("per_message", [1, 4])
def test_vllm_56211_skip_special_tokens_is_honoured_on_every_decode(
    fast: Any, hf: Any, skip: bool, per_message: int
) -> None:
    """vllm-project/vllm#56211: one decoding path ignored the request's ``skip_special_tokens``
    and always kept (or always dropped) special tokens. Expected: with it on, the special tokens
    in the middle of the output vanish from the streamed and final text; with it off they are
    there; both equal ``transformers``' decode with the same flag."""
    ids = encode_plain(hf, f"Hi{USER}there{ASSISTANT} ok{EOS_TEXT}more")
    special = set(hf.all_special_ids)
    assert sum(t in special for t in ids) >= 1
    chunks, final = stream_detok(fast, ids, per_message=per_message, skip=skip)
    assert final == "".join(chunks) == hf.decode(ids, skip_special_tokens=skip)
    assert (EOS_TEXT in final) != skip


@pytest.mark.parametrize("per_message", [1, 2])
def test_keras_hub_2779_space_after_a_special_token_is_kept(fast: Any, hf: Any, per_message: int) -> None:
    """keras-team/keras-hub#2779: decoding text chunk by chunk between special tokens lost the
    space that follows a special token. Expected: with special tokens kept, the text after
    ``<｜User｜>`` keeps its leading space (" Hello world"), as ``transformers``' decode of the
    whole sequence has it; with them skipped, the same text minus the special tokens."""
    text = f"{USER} Hello world{ASSISTANT}  two spaces"
    ids = encode_plain(hf, text)
    for skip in (False, True):
        chunks, final = stream_detok(fast, ids, per_message=per_message, skip=skip)
        assert final == "".join(chunks) == hf.decode(ids, skip_special_tokens=skip)
    _, kept = stream_detok(fast, ids, per_message=per_message, skip=False)
    assert kept == text


def test_openvino_genai_1676_shorter_stop_string_after_an_unmatched_longer_one(fast: Any, hf: Any) -> None:
    """openvinotoolkit/openvino.genai#1676: with several stop strings of different lengths, a
    check made for the first (longer, unmatched) one left the text it compared in a state where
    the second one, present in the output, stayed in the text. Expected: the request stops at the
    first token whose text holds "ionized" (``str.find`` on ``transformers``' decode of each
    prefix), and the final text ends right before it (the detokenizer's streamed chunks may still
    hold the start of a stop string; the tokenizer manager holds those back)."""
    text = "These atoms are highly ionized and hot"
    stops = ["atoms with a large number of 11 protons", "ionized"]
    ids = encode_plain(hf, text)
    sp = SamplingParams(stop=stops)
    sp.normalize(hf)
    first = next(k for k in range(1, len(ids) + 1) if "ionized" in hf.decode(ids[:k]))
    for k in range(1, first):
        assert check_stop(ids[:k], sp, set(), hf, False) is None
    reason = check_stop(ids[:first], sp, set(), hf, False)
    assert reason == {"type": "stop", "matched": "ionized"}
    _, final = stream_detok(fast, ids[:first], reason)
    whole = hf.decode(ids[:first])
    assert final == whole[: whole.find("ionized")] == "These atoms are highly "


@pytest.mark.parametrize("no_stop_trim", [False, True])
def test_vllm_2611_special_stop_token_id_stays_out_of_text_that_shows_special_tokens(
    fast: Any, hf: Any, no_stop_trim: bool
) -> None:
    """vllm-project/vllm#2611 (the fix of vllm-project/vllm#2538's kind, ``<|observation|>`` at the
    end of the output): a special token given in ``stop_token_ids`` was left at the end of the
    text whenever special tokens were not skipped. Expected: with ``skip_special_tokens`` false
    the special tokens before it stay, the stop token's own text is dropped (kept with
    ``no_stop_trim``); both equal ``transformers``' decode of the ids with special tokens."""
    user = hf.convert_tokens_to_ids(USER)
    ids = [*encode_plain(hf, f"call the tool{ASSISTANT} result"), user]
    chunks, final = stream_detok(fast, ids, finish_stop(user), skip=False, no_stop_trim=no_stop_trim)
    expected = hf.decode(ids if no_stop_trim else ids[:-1], skip_special_tokens=False)
    assert final == "".join(chunks) == expected
    assert ASSISTANT in final and final.endswith(USER) == no_stop_trim


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_lmdeploy_2991_spaces_between_special_tokens_reaches_the_request(tok: Any, route: str) -> None:
    """InternLM/lmdeploy#2991 (also ModelTC/LightLLM#221, its ``no_spaces_between_special_tokens``
    argument): ``spaces_between_special_tokens`` was not exposed to API requests, so a client could
    not turn it off. Expected: the OpenAI ``/v1/completions`` and ``/v1/chat/completions`` routes
    take ``spaces_between_special_tokens`` and ``skip_special_tokens`` (vLLM's extra request
    fields) and hand each request's own values to the runtime's sampling parameters; a request
    that leaves them out gets the defaults (true, true)."""
    tm = FakeTM(tok)
    client = app_client(tm)
    if route == "completions":
        url, body = "/v1/completions", {"model": "dsv4-test", "prompt": "Hi", "max_tokens": 4}
    else:
        url = "/v1/chat/completions"
        body = {"model": "dsv4-test", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    for flags in ({"spaces_between_special_tokens": False, "skip_special_tokens": False}, {}):
        r = client.post(url, json={**body, **flags})
        assert r.status_code == 200, r.text
        sp = tm.received[-1].sampling_params
        assert sp["spaces_between_special_tokens"] is flags.get("spaces_between_special_tokens", True)
        assert sp["skip_special_tokens"] is flags.get("skip_special_tokens", True)


@pytest.mark.parametrize("per_message", [1, 2, 100])
def test_vllm_24159_invalid_byte_run_then_a_character_streams_without_error(
    fast: Any, hf: Any, per_message: int
) -> None:
    """vllm-project/vllm#24159: an incremental decode step raised ("Invalid prefix encountered
    while decoding stream ... '\ufffd\ufffd\ufffd\u00bb'") when the bytes of an unfinished
    character were followed by a token that completes no character but starts a new one ("»").
    Expected: no error; the invalid bytes become replacement characters exactly as
    ``transformers``' decode of the whole list has them, the text after them is kept, and the
    streamed chunks add up to the final text."""
    ids = [
        *encode_plain(hf, "Quote:"),
        byte_token(hf, 0xF0),
        byte_token(hf, 0x9F),
        byte_token(hf, 0x98),
        *encode_plain(hf, "» fin"),
    ]
    want = hf.decode(ids)
    assert want.startswith("Quote:" + FFFD) and want.endswith("» fin")
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    assert "".join(chunks) == final == want

"""A twenty-seventh set of public bug reports on output text: streamed text of combining
sequences (variation selectors, zero-width joiners, combining accents, flags, skin tones), text
held back as a possible stop-string prefix and released when no stop string completes, a stop
string spelled as a special token while special tokens are kept, the end-of-sentence token's text
with ``skip_special_tokens`` off, per-request ``stop_token_ids``, and vLLM's
``include_stop_str_in_output`` on the OpenAI routes.

Every report passed as-is; the tests are regression guards.

Fixtures: conftest's ``shared_fake_engine`` (the real tokenizer manager and detokenizer processes
over ``server_fixture.FakeScheduler``; a prompt holding ``FAKE_SCRIPT_TAG`` makes it write
``FAKE_SCRIPT`` then EOS with the scheduler's real stop check), the detokenizer fed by hand
(``detokenizer_testutil.stream_detok``) and the OpenAI routes in process over
``openai_fake_tm.FakeTM``. Oracles: the DeepSeek-V4 tokenizer loaded by ``transformers`` on its
own (``hf``: ids and ``decode`` with and without ``skip_special_tokens``), the scripted text
itself, and the reports' stated expected values.
"""

from __future__ import annotations

from typing import Any

import pytest
from detokenizer_testutil import encode_plain, stream_detok
from openai_fake_tm import FakeTM, app_client
from server_fixture import FAKE_REASONING, FAKE_SCRIPT, FAKE_SCRIPT_TAG

pytestmark = pytest.mark.timeout(240)

PROMPT = f"{FAKE_SCRIPT_TAG} Tell me"
EOS = "<｜end▁of▁sentence｜>"


def _script_ids(hf: Any) -> list[int]:
    """The ids the fake model writes for a scripted prompt: ``FAKE_SCRIPT`` then EOS."""
    return hf.encode(FAKE_SCRIPT, add_special_tokens=False) + [hf.convert_tokens_to_ids(EOS)]


def _run(engine: Any, sp: dict[str, Any], stream: bool) -> tuple[dict[str, Any], list[str]]:
    """One scripted generation with sampling params ``sp``; returns the final output and the texts
    of every output (one, or each streamed chunk's cumulative text)."""
    if stream:
        outs = list(engine.generate(PROMPT, sp, stream=True))
        return outs[-1], [o["text"] for o in outs]
    out = engine.generate(PROMPT, sp)
    return out, [out["text"]]


# --------------------------------------------------------------------------- incremental detokenization


@pytest.mark.parametrize(
    "text",
    [
        "flag 🏳️\u200d🌈 done",  # white flag + VS16 + ZWJ + rainbow
        "e\u0301x and cafe\u0301",  # combining acute accents
        "ok 👍🏽 yes",  # skin-tone modifier
        "family 👨\u200d👩\u200d👧 home",  # ZWJ sequence
        "key 1\ufe0f\u20e3 and ❤️",  # keycap, heart + VS16
        "🇫🇷🇩🇪 flags",  # regional indicator pairs
    ],
)
@pytest.mark.parametrize("per_message", [1, 2])
def test_mlx_swift_lm_612_combining_scalars_are_not_repeated(hf: Any, text: str, per_message: int) -> None:
    """ml-explore/mlx-swift-lm#612: a streaming detokenizer that diffed text by grapheme clusters
    re-sent the previous character whenever a token appended a combining scalar (variation
    selector U+FE0F, zero-width joiner, combining accent): ``🏳️‍🌈`` arrived as
    ``🏳🏳️🏳️🏳️‍🌈`` and ``e`` + U+0301 as ``eé``. Expected, fed one or two tokens a message: the
    chunks sent join to exactly ``transformers``' decode of all ids (no character repeated, no
    U+FFFD), and the final text is that decode too."""
    ids = encode_plain(hf, text)
    assert hf.decode(ids) == text
    chunks, final = stream_detok(hf, ids, per_message=per_message)
    assert "".join(chunks) == text, chunks
    assert final == text
    assert all("\ufffd" not in c for c in chunks)


# --------------------------------------------------------------------------- stop strings


@pytest.mark.parametrize("stop", ["Done.!", " Done. And"])
@pytest.mark.parametrize("stream", [False, True])
def test_swiftlm_132_held_stop_prefix_is_released_at_the_end(
    shared_fake_engine: Any, hf: Any, stop: str, stream: bool
) -> None:
    """SharpAI/SwiftLM#132: text that could still grow into a stop string is withheld until the
    next chunk settles it, and released at the end of generation when it turns out to be ordinary
    text (the fix's stated contract: costs a chunk of latency, drops nothing). Here the script
    ends with ``" Done."``, a prefix of each stop string that never completes. Expected, streamed
    or not: the request ends on EOS (``matched`` its id), the text is the whole script
    (``transformers``' decode of its ids, special tokens skipped) with the held tail in it, and
    every streamed text is a prefix of the final one."""
    ids = _script_ids(hf)
    want = hf.decode(ids, skip_special_tokens=True)
    assert want.endswith(" Done.") and stop not in want
    out, texts = _run(shared_fake_engine, {"max_new_tokens": 64, "stop": [stop], "temperature": 0}, stream)
    assert out["text"] == want
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": ids[-1]}
    assert all(want.startswith(t) for t in texts), texts


@pytest.mark.parametrize("stream", [False, True])
def test_dynamo_12562_special_token_stop_string_is_suppressed_with_special_tokens_kept(
    shared_fake_engine: Any, hf: Any, stream: bool
) -> None:
    """ai-dynamo/dynamo#12562: with special tokens kept in the text (``skip_special_tokens``
    false, so reasoning / tool parsers see their markers) a stop string that is a special token's
    text (``</think>``) surfaced in the output, and a multi-chunk marker leaked its prefix to a
    stream. Expected, streamed or not: the text is the reasoning before ``</think>``
    (``transformers``' decode of the ids before that token, special tokens kept), ``matched`` is
    ``"</think>"``, and no streamed text holds ``</think>`` or goes past the final text."""
    ids = _script_ids(hf)
    cut = ids.index(hf.convert_tokens_to_ids("</think>"))
    want = hf.decode(ids[:cut], skip_special_tokens=False)
    assert want == FAKE_REASONING
    sp = {"max_new_tokens": 64, "stop": ["</think>"], "skip_special_tokens": False, "temperature": 0}
    out, texts = _run(shared_fake_engine, sp, stream)
    assert out["text"] == want
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": "</think>"}
    assert all(want.startswith(t) and "</think>" not in t for t in texts), texts


def test_euroeval_1006_eos_text_not_in_output_with_special_tokens_kept(
    shared_fake_engine: Any, hf: Any
) -> None:
    """EuroEval/EuroEval#1006 and NVIDIA/TensorRT-LLM#545: the EOS token that ended generation
    appeared at the end of the text (``<｜end▁of▁sentence｜>``), corrupting evaluations, once
    special tokens were not skipped. SGLang drops the matched stop token before decoding unless
    ``no_stop_trim`` asks to keep it. Expected: with ``skip_special_tokens`` false the text is the
    script without the EOS text (``transformers``' decode of the ids before EOS); with
    ``no_stop_trim`` too it is the decode of all ids, ending with the EOS text."""
    ids = _script_ids(hf)
    base = {"max_new_tokens": 64, "skip_special_tokens": False, "temperature": 0}
    out = shared_fake_engine.generate(PROMPT, base)
    assert out["text"] == hf.decode(ids[:-1], skip_special_tokens=False)
    assert EOS not in out["text"]
    kept = shared_fake_engine.generate(PROMPT, {**base, "no_stop_trim": True})
    assert kept["text"] == hf.decode(ids, skip_special_tokens=False)
    assert kept["text"].endswith(EOS)


def test_tt_inference_server_3689_per_request_stop_token_ids(shared_fake_engine: Any, hf: Any) -> None:
    """tenstorrent/tt-inference-server#3689: the stop-token set was fixed at start-up from the
    model's own stop tokens, so a request's ``stop_token_ids`` neither ended it nor reached its
    finish reason. Expected: a request whose ``stop_token_ids`` names the id of the script's
    ``" answer"`` token ends there, ``finish_reason`` ``{"type": "stop", "matched": <that id>}``
    and the text the decode of the ids before it (SGLang drops the matched token); the next
    request without the field is not affected (the whole script, ending on EOS)."""
    ids = _script_ids(hf)
    answer = hf.encode(" answer", add_special_tokens=False)
    assert len(answer) == 1 and answer[0] in ids
    at = ids.index(answer[0])
    sp = {"max_new_tokens": 64, "temperature": 0}
    out = shared_fake_engine.generate(PROMPT, {**sp, "stop_token_ids": answer})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": answer[0]}
    assert out["text"] == hf.decode(ids[:at], skip_special_tokens=True)
    plain = shared_fake_engine.generate(PROMPT, sp)
    assert plain["text"] == hf.decode(ids, skip_special_tokens=True)
    assert plain["meta_info"]["finish_reason"] == {"type": "stop", "matched": ids[-1]}


@pytest.mark.parametrize("stream", [False, True])
def test_vllm_57052_include_stop_str_in_output_keeps_the_stop_string(
    shared_fake_engine: Any, hf: Any, stream: bool
) -> None:
    """vllm-project/vllm#57052: ``include_stop_str_in_output`` was ignored on one serving path, so
    the stop text was dropped (or leaked) regardless of the flag. Expected (vLLM's documented
    meaning: the stop string is part of the returned text): the OpenAI routes hand the flag to the
    engine as SGLang's ``no_stop_trim`` (and leave it off by default), and a generation with it
    ends right after the first ``"Stop"`` of the script, the stop string kept; without it right
    before."""
    if stream:  # the routes' hand-over, once
        tm = FakeTM(hf)
        client = app_client(tm)
        for path, body in (
            ("/v1/completions", {"prompt": "Hi"}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
        ):
            for flag in (True, False, None):
                extra = {} if flag is None else {"include_stop_str_in_output": flag}
                r = client.post(
                    path, json={"model": "dsv4-test", "max_tokens": 4, "stop": ["x"], **body, **extra}
                )
                assert r.status_code == 200, r.text
                assert tm.received[-1].sampling_params["no_stop_trim"] is bool(flag), (path, flag)
    text = hf.decode(_script_ids(hf), skip_special_tokens=True)
    end = text.index("Stop")
    sp = {"max_new_tokens": 64, "stop": ["Stop"], "temperature": 0}
    kept, texts = _run(shared_fake_engine, {**sp, "no_stop_trim": True}, stream)
    assert kept["text"] == text[: end + len("Stop")]
    assert all(kept["text"].startswith(t) for t in texts)
    cut, _ = _run(shared_fake_engine, sp, stream)
    assert cut["text"] == text[:end]

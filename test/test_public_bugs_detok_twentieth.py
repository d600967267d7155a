"""A twentieth set of public bug reports, on incremental detokenization and streamed text: an
incomplete UTF-8 tail when a request ends on EOS, several requests decoded in the same messages,
whitespace runs before punctuation, a decoder whose output is not append-only
(``clean_up_tokenization_spaces``), the first token's leading space, spaces between words in
streamed chunks, long grapheme clusters and byte runs longer than the held window, text after a
matched stop string in the finishing message, and a held-back stop-string prefix flushed when the
request ends without the stop string (on ``/generate``, and through the chat route's reasoning
parser). Each test names its report; all passed as-is and are kept as
regression tests.

Fixtures: the detokenizer (``DetokenizerManager`` on the runtime's ``FastTokenizer``) fed scheduler
messages by hand; the OpenAI router in-process over ``openai_fake_tm.FakeTM``; conftest's
``shared_fake_engine`` (the real tokenizer manager and detokenizer over
``server_fixture.FakeScheduler``, which writes ``FAKE_TEXT``) and ``plain_fake_server`` (the same
over HTTP, whose ``[script]`` prompts write ``FAKE_SCRIPT``). Oracles: ``transformers``'
``decode`` of the whole id sequence on the same tokenizer files, ``FAKE_TEXT``, the same request
unstreamed, and the OpenAI client's own stream parser.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from detokenizer_testutil import byte_token, encode_plain, stream_detok
from openai_fake_tm import FakeTM, app_client, oai_client
from public_bugs_testutil import post, sse
from server_fixture import (
    FAKE_ANSWER,
    FAKE_REASONING,
    FAKE_SCRIPT,
    FAKE_SCRIPT_TAG,
    FAKE_TEXT,
    ServerHandle,
    hf_auto_tokenizer,
)
from sglang_v4.hf_transformers_utils import get_tokenizer
from sglang_v4.managers.detokenizer_manager import MAX_HELD_TOKENS, DetokenizerManager
from sglang_v4.managers.io_struct import BatchTokenIDOut, finish_length, finish_stop

pytestmark = pytest.mark.timeout(240)

FFFD = "\ufffd"
CHAT = "/v1/chat/completions"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name


# --------------------------------------------------------------------------- the end of a request


@pytest.mark.parametrize("per_message", [1, 2, 100])
def test_lattice_751_eos_after_an_incomplete_character_keeps_its_tail(fast, hf, per_message: int) -> None:
    """ohdearquant/lattice#751: when EOS ended a request whose last text token left a UTF-8
    character incomplete, the unstreamed text dropped the undecided tail (only a stop *string*
    had cut the text), while the stream sent it. Expected: the final text is ``transformers``'
    decode of the ids before EOS -- the lone lead bytes decode to U+FFFD, nothing is lost -- in
    any message sizes, and the streamed chunks join to it."""
    eos = hf.convert_tokens_to_ids(hf.eos_token)
    ids = [*encode_plain(hf, "Rocket: 🚀 then"), byte_token(hf, 0xF0), byte_token(hf, 0x9F), eos]
    want = hf.decode(ids[:-1])
    assert want == "Rocket: 🚀 then" + FFFD
    chunks, final = stream_detok(fast, ids, finish_stop(eos), per_message)
    assert "".join(chunks) == final == want


def test_llamacpp_15007_held_stop_prefix_is_flushed_when_the_request_ends(shared_fake_engine: Any) -> None:
    """ggml-org/llama.cpp#15007: while streaming, text that could be the start of a stop string
    was held back, and when generation ended without the stop string (EOS, the length) the held
    text was never sent ("UNO DUE TRE" with stop ``"TRE\\nAAAA"`` streamed as "UNO DUE"). Here
    the fake model's output ends with "Done." at the length limit and the stop string starts with
    "Done." but never completes. Expected: every streamed text is a prefix of ``FAKE_TEXT``, the
    last one is all of it, and it equals the unstreamed answer; the finish is the length."""
    n = len(hf_auto_tokenizer().encode(FAKE_TEXT))
    sp = {"max_new_tokens": n, "stop": ["Done. Never"], "temperature": 0}
    outs = list(shared_fake_engine.generate("Tell me", sp, stream=True))
    assert FAKE_TEXT.endswith("Done.")
    for o in outs:
        assert FAKE_TEXT.startswith(o["text"]), o["text"]
    # while it could still open the stop string, "Done" / "Done." was held back
    assert not any(o["text"].endswith(("Done", "Done.")) for o in outs[:-1])
    assert outs[-1]["text"] == FAKE_TEXT
    assert outs[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert shared_fake_engine.generate("Tell me", sp)["text"] == FAKE_TEXT


@pytest.mark.parametrize("cut", ["think_end", "eos"])
def test_smg_2203_held_stop_prefix_flushed_at_the_end_goes_through_the_reasoning_parser(
    plain_fake_server: ServerHandle, cut: str
) -> None:
    """smg-project/smg#2203: text held back as a possible stop-string start was flushed at the end
    of the stream straight into ``content``, past the reasoning (and tool) parsers, so a piece of
    a control token (``ep|>``) reached the client as answer text. Here stop strings that start
    with the end of the output never match, so the end is held until the request finishes: the
    ``</think>`` token when ``max_tokens`` ends the output right after it, or the answer's last
    word when EOS ends it. Expected: the streamed ``reasoning_content`` / ``content`` join to the
    unstreamed message's, which are the fake model's reasoning and its answer (none after a cut
    at ``</think>``), and no ``</think>`` reaches either."""
    hf = hf_auto_tokenizer()
    script = hf.encode(FAKE_SCRIPT, add_special_tokens=False)
    if cut == "think_end":
        max_tokens, stop, answer = script.index(hf.convert_tokens_to_ids("</think>")) + 1, "</think>Never", ""
    else:
        max_tokens, stop, answer = len(script) + 5, "Done. Never", FAKE_ANSWER
    body = {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": f"{FAKE_SCRIPT_TAG} What is 6*7?"}],
        "max_tokens": max_tokens,
        "stop": [stop],
        "chat_template_kwargs": {"thinking": True},
    }
    r = post(plain_fake_server, CHAT, body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == ("length" if cut == "think_end" else "stop"), choice
    msg = choice["message"]
    assert msg["reasoning_content"] == FAKE_REASONING, msg
    assert (msg["content"] or "") == answer, msg
    deltas = [c["delta"] for k in sse(plain_fake_server, CHAT, body) for c in k["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == FAKE_REASONING
    assert "".join(d.get("content") or "" for d in deltas) == answer


@pytest.mark.parametrize("no_stop_trim", [False, True])
def test_vmlx_swift_109_text_after_the_matched_stop_never_leaks(fast, hf, no_stop_trim: bool) -> None:
    """osaurus-ai/vmlx-swift#109: the tokens decoded after a matched stop string (the engine
    decodes a few more before the stop lands) were flushed at the end of the stream, so
    ``stop: ["five"]`` answered "one, two, three, four,  six, ". Here the finishing message
    carries tokens past the stop string (one message for the whole output, or several).
    Expected: the final text is the one-shot decode cut before the stop string (through it with
    ``no_stop_trim``), the chunks join to it, and no chunk holds text after the stop."""
    ids = encode_plain(hf, "one, two, three, four, five, six, seven")
    full = hf.decode(ids)
    cut = full.index("five") + (len("five") if no_stop_trim else 0)
    want = full[:cut]
    for per_message in (1, 4, 100):
        dm_ids = ids if per_message == 100 else ids[: len(encode_plain(hf, "one, two, three, four, five"))]
        chunks, final = stream_detok(
            fast, dm_ids, finish_stop("five"), per_message, no_stop_trim=no_stop_trim
        )
        assert final == want, (per_message, final)
        assert "".join(chunks) == want and "six" not in "".join(chunks)


# --------------------------------------------------------------------------- several requests


def test_mlx_lm_1873_requests_in_one_message_keep_their_own_decode_state(fast, hf) -> None:
    """ml-explore/mlx-lm#1873 (review): one streaming detokenizer shared by two concurrent
    requests mixed their pending bytes and offsets, so each got pieces of the other's text.
    Expected: two requests whose tokens arrive interleaved in the same scheduler messages --
    both with characters split across tokens -- each stream exactly their own one-shot decode,
    with no U+FFFD in any chunk."""
    a = encode_plain(hf, "over 40 years 😀 ok")
    b = encode_plain(hf, "disengage, allowing now 你好🇯🇵")
    dm = DetokenizerManager(fast)
    got: dict[str, list[str]] = {"a": [], "b": []}
    finals: dict[str, str] = {}
    for k in range(max(len(a), len(b))):
        m = BatchTokenIDOut.empty()
        for rid, ids in (("a", a), ("b", b)):
            if k < len(ids):
                last = k == len(ids) - 1
                m.append(
                    rid=rid,
                    finished_reason=finish_length(k + 1) if last else None,
                    output_ids=ids[k : k + 1],
                    prompt_tokens=1,
                    completion_tokens=k + 1,
                )
        out = dm.handle_batch_token_id_out(m)
        for i, rid in enumerate(out.rids):
            got[rid].append(out.output_strs[i])
            if out.final_strs[i] is not None:
                finals[rid] = out.final_strs[i]
    for rid, ids in (("a", a), ("b", b)):
        assert "".join(got[rid]) == finals[rid] == hf.decode(ids)
        assert not any(FFFD in c for c in got[rid]), got[rid]
    assert not dm.decode_status


# --------------------------------------------------------------------------- spaces


@pytest.mark.parametrize("text", ["    .", "\n\n  ,x", "a    .  ;", '{\n    "k": 1,\n  }\n', "\t\t} ;"])
def test_turbo_fieldfare_118_whitespace_run_then_punctuation_is_not_lost(fast, hf, text: str) -> None:
    """drumih/turbo-fieldfare#118: a whitespace run followed by punctuation (indented markdown,
    code) lost the punctuation from the stream: ids ``["▁▁▁▁", "."]`` decoded to "   ." in one
    shot but streamed as "    ". Expected: such texts, streamed one token per message and two
    per message, join to the one-shot decode, which is the text itself."""
    ids = encode_plain(hf, text)
    assert hf.decode(ids) == text
    for per_message in (1, 2):
        chunks, final = stream_detok(fast, ids, per_message=per_message)
        assert "".join(chunks) == final == text


def test_mlx_swift_lm_465_cleanup_tokenizer_streams_every_comma(tmp_path: Path) -> None:
    """ml-explore/mlx-swift-lm#465: with a decode that is not append-only (a cleanup pass that
    rewrites spaces before punctuation), the streaming detokenizer took a character-count
    difference and dropped the new character -- a structural JSON comma -- so guided JSON came
    out invalid. Expected: with ``clean_up_tokenization_spaces: true`` in
    ``tokenizer_config.json``, indented JSON written one token per message streams as
    ``transformers``' decode of the whole ids on the same files (the text itself: no cleanup on a
    byte-level BPE, huggingface/transformers#44915), and parses as JSON."""
    from tokenizer_testutil import BOS, EOS, PAD, tiny_tokenizer_json, transformers_tokenizer

    tiny_tokenizer_json(tmp_path / "tokenizer.json")
    cfg = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "clean_up_tokenization_spaces": True}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    ours, oracle = get_tokenizer(str(tmp_path)), transformers_tokenizer(tmp_path)
    text = '{\n  "a": 1 ,\n  "b" : [2 , 3] ,\n  "c": "x . y ?"\n}'
    ids = oracle.encode(text, add_special_tokens=False)
    want = oracle.decode(ids)
    assert want == text
    chunks, final = stream_detok(ours, ids)
    assert "".join(chunks) == final == want
    assert json.loads(final) == {"a": 1, "b": [2, 3], "c": "x . y ?"}


def test_tokenizers_1141_first_token_keeps_its_leading_space(fast, hf) -> None:
    """huggingface/tokenizers#1141: decoding each generated token on its own ran the whole
    decoder pipeline per token, whose leading-space strip removed every space ("Iamtestingout...").
    Expected: an output whose first token starts with a space streams that space in the first
    chunk, every word keeps its space, and the chunks join to the one-shot decode."""
    text = " I am testing out prompt tokenization and would like to know"
    ids = encode_plain(hf, text)
    assert hf.decode(ids) == text
    chunks, final = stream_detok(fast, ids)
    assert chunks[0] == hf.decode(ids[:1]) == " I"
    assert "".join(chunks) == final == text
    assert sum(c.startswith(" ") for c in chunks) == text.count(" ")


def test_vllm_984_space_after_a_full_stop_survives_incremental_decode(fast, hf) -> None:
    """vllm-project/vllm#984: the incremental detokenizer lost the space after a full stop
    ("...for LLMs.It is designed"), which the one-shot decode has. Expected: sentences streamed
    one token per message join to the one-shot decode, ". It" included."""
    text = "vLLM is a high-throughput engine for LLMs. It is designed for production. 它很快。 Yes."
    ids = encode_plain(hf, text)
    chunks, final = stream_detok(fast, ids)
    assert "".join(chunks) == final == hf.decode(ids) == text
    assert "LLMs. It" in final


def test_mistralrs_63_streamed_chat_deltas_keep_their_whitespace(tok: Any) -> None:
    """EricLBuehler/mistral.rs#63: streamed chat deltas came without their whitespace ("Themeaning
    oflifeis..."), the unstreamed answer had it. Expected: over the OpenAI route, the content
    deltas the ``openai`` client reads join to the unstreamed message content, which is the
    model's reply word for word (leading space and newlines included)."""
    reply = " The meaning of life is\n  a question;   people differ. 意味 🙂 end."
    client = oai_client(app_client(FakeTM(tok, reply=reply)))
    msgs = [{"role": "user", "content": "hi"}]
    whole = client.chat.completions.create(model="dsv4-test", messages=msgs)
    assert whole.choices[0].message.content == reply
    deltas = [
        c.choices[0].delta.content
        for c in client.chat.completions.create(model="dsv4-test", messages=msgs, stream=True)
        if c.choices and c.choices[0].delta.content
    ]
    assert len(deltas) > 5 and "".join(deltas) == reply


# --------------------------------------------------------------------------- long characters


def test_dynamo_2413_window_holds_long_clusters_and_byte_runs(fast, hf) -> None:
    """ai-dynamo/dynamo#2413 (review: the sliding-window incremental decode "can break
    de-tokenization in some scenarios"): a bounded window of recent tokens must not cut text
    that spans more tokens than the window. Expected: long ZWJ emoji families and combining-mark
    runs, and a run of lone continuation bytes longer than :data:`MAX_HELD_TOKENS`, stream (one
    token per message) to the one-shot decode, with no U+FFFD in any chunk where the one-shot
    text has none."""
    text = "A 👨‍👩‍👧‍👦👩🏽‍💻🏳️‍🌈 e\u0301\u0302\u0303\u0304 ok"
    ids = encode_plain(hf, text)
    assert len(ids) > 2 * MAX_HELD_TOKENS
    chunks, final = stream_detok(fast, ids)
    assert "".join(chunks) == final == hf.decode(ids) == text
    assert not any(FFFD in c for c in chunks)
    stray = [
        *encode_plain(hf, "x"),
        *([byte_token(hf, 0x80)] * (MAX_HELD_TOKENS + 3)),
        *encode_plain(hf, "中y"),
    ]
    chunks, final = stream_detok(fast, stray)
    assert "".join(chunks) == final == hf.decode(stray)
    assert final.endswith("中y")

"""A twenty-sixth set of public bug reports on server-sent-event streams: multi-byte characters
split across tokens in the detokenizer's incremental text (emoji, CJK, byte-fallback punctuation,
at the start, middle and end of an answer, one or several tokens a message), real U+FFFD
characters (tokens of their own) that must not be held back for good, a stop token's text that
never reaches a stream, ``/v1/completions`` streams whose stop string straddles two chunks while
their ``logprobs`` ride along, the usage chunk after the finish chunk on both text routes,
streamed chat ``logprobs`` with the reasoning split on and their ``bytes`` rebuilding a split
character, and held-back tag starts (``<``, ``</thi``, DSML's) flushed at the end of a stream.
Each passed as it was, and is kept as a regression test of behaviour clients rely on.

Fixtures: the detokenizer (``DetokenizerManager`` on the runtime's ``FastTokenizer``) fed
scheduler messages by hand, and the OpenAI router in-process over fake tokenizer managers
(``chat_tools_testutil.ChunkTM``: several tokens an output, stop strings held back as the engine
holds them; ``openai_fake_tm.FakeTM``: logprob records; ``chat_tools_testutil._ByteFragmentTM``:
split characters held back, logprob records).
Oracles: ``transformers``' decode of the whole id sequence and Python's UTF-8 codec, the same
request not streamed, ``str.find`` on the scripted reply, the ``openai`` client's chunk types, and
OpenAI's API reference for ``stream_options`` and chat ``logprobs`` (``bytes``: the token's UTF-8).
"""

from __future__ import annotations

from typing import Any

import pytest
from chat_tools_testutil import WEATHER, ChunkTM, _ByteFragmentTM, accumulate, client_for
from detokenizer_testutil import byte_token, encode_plain, stream_detok
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events
from sglang_v4.managers.io_struct import finish_length
from transformers import PreTrainedTokenizerFast

FFFD = "\ufffd"
MODEL = "dsv4-test"
USER = [{"role": "user", "content": "Hi"}]


def _bytes_ids(hf: Any, text: str) -> list[int]:
    """The ids of ``text`` spelled one byte-level token per UTF-8 byte (byte fallback)."""
    return [byte_token(hf, b) for b in text.encode()]


def _check_stream(chunks: list[str], final: str, want: str) -> None:
    """Every chunk is free of U+FFFD, the chunks join to the final text, which is ``want``."""
    assert all(FFFD not in c for c in chunks), chunks
    assert "".join(chunks) == final == want, (chunks, final)


# --------------------------------------------------------------------------- split characters


@pytest.mark.parametrize("per_message", [1, 2, 3])
def test_mlx_vlm_1076_byte_fallback_emoji_streams_whole(fast: Any, hf: Any, per_message: int) -> None:
    """Blaizzy/mlx-vlm#1076 (also mudler/LocalAI#677: an emoji streamed as one U+FFFD a message):
    a character written as several byte-fallback tokens was decoded before its bytes were all
    there and sent as U+FFFD. Expected: no chunk holds U+FFFD and the chunks join to
    ``transformers``' decode of all ids, which is the text the bytes spell (UTF-8 codec)."""
    text = "Fire: 🔥 hot 🦜!"
    ids = encode_plain(hf, "Fire: ") + _bytes_ids(hf, "🔥") + encode_plain(hf, " hot ")
    ids += _bytes_ids(hf, "🦜") + encode_plain(hf, "!")
    assert hf.decode(ids) == text
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    _check_stream(chunks, final, text)


def test_qwisp_134_text_keeps_flowing_after_a_split_character(fast: Any, hf: Any) -> None:
    """penta2himajin/qwisp#134: after a CJK character split across two tokens, the server sent a
    trailing U+FFFD, and once the character completed the text no longer extended what was sent,
    so every later delta was suppressed (the stream froze). Expected: after each token the text
    sent so far is exactly ``transformers``' decode of the ids so far less its unfinished trailing
    character, so every token after the split sends its own text at once."""
    head, tail = "ローカル開発者の", " is on macOS now, and it works."
    ids = encode_plain(hf, head) + _bytes_ids(hf, "マ") + encode_plain(hf, tail)
    assert hf.decode(ids) == head + "マ" + tail
    chunks, final = stream_detok(fast, ids, per_message=1)
    _check_stream(chunks, final, head + "マ" + tail)
    for k in range(1, len(ids) + 1):
        assert "".join(chunks[:k]) == hf.decode(ids[:k]).rstrip(FFFD), k
    split_end = len(encode_plain(hf, head)) + 3
    assert all(chunks[k] for k in range(split_end, len(ids))), chunks  # none stalls


@pytest.mark.parametrize("per_message", [1, 2])
def test_ferrox_125_emoji_at_the_very_end_is_not_two_replacement_characters(
    fast: Any, hf: Any, per_message: int
) -> None:
    """antonellof/ferrox#125: a DeepSeek answer ending in an emoji whose bytes span two tokens
    came back as ``today? ��``, streamed and not. Expected: the last chunk (the finish) completes
    the emoji; no chunk holds U+FFFD; the final text is ``transformers``' decode of all ids,
    which ends with the emoji (the tokenizer splits it across tokens on its own)."""
    text = "Hello! How can I assist you today? 😊"
    ids = encode_plain(hf, text)
    assert FFFD in hf.decode(ids[-1:])  # the emoji straddles the last two tokens
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    _check_stream(chunks, final, text)
    assert chunks[-1].endswith("😊")


@pytest.mark.parametrize("per_message", [1, 2, 3])
def test_mere_run_438_byte_fallback_punctuation_mid_text(fast: Any, hf: Any, per_message: int) -> None:
    """sawfwair/mere-run#438: a non-breaking hyphen (U+2011, three UTF-8 bytes) written as
    byte-fallback tokens showed as U+FFFD in a stream whose whole decode was right. Expected: the
    chunks, one to three tokens a message, join to ``transformers``' decode with no U+FFFD."""
    ids = encode_plain(hf, "A state") + _bytes_ids(hf, "\u2011") + encode_plain(hf, "of\u2011the art model")
    want = "A state\u2011of\u2011the art model"
    assert hf.decode(ids) == want
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    _check_stream(chunks, final, want)


@pytest.mark.parametrize("per_message", [1, 3])
def test_vllm_931_streamed_chinese_equals_the_unstreamed_text(fast: Any, hf: Any, per_message: int) -> None:
    """vllm-project/vllm#931 (also triton-inference-server/tensorrtllm_backend#606: streamed output
    garbled where the non-streamed one was right): Chinese output streamed with U+FFFD in place
    of characters whose bytes span tokens. Expected: the chunks join to the text of one decode of
    all ids (the non-streamed answer), some characters of it spelled as byte tokens."""
    text = "你好，我是一个人工智能助手，我可以帮助你完成各种任务。"
    ids = encode_plain(hf, "你好，") + _bytes_ids(hf, "我") + encode_plain(hf, "是一个人工智能助手，我可以帮")
    ids += _bytes_ids(hf, "助你") + encode_plain(hf, "完成各种任务。")
    assert hf.decode(ids) == text
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    _check_stream(chunks, final, text)


@pytest.mark.parametrize("per_message", [1, 2])
def test_tgi_1254_stop_token_text_never_reaches_the_stream(fast: Any, hf: Any, per_message: int) -> None:
    """huggingface/text-generation-inference#1254: the end-of-sequence string came out in a
    stream, split over two chunks, before generation stopped. Expected: with special tokens kept
    in the text (``skip_special_tokens`` false) a generation stopped by the EOS id streams no piece
    of the EOS token's text; the chunks join to the decode of the ids before it."""
    eos_id, eos_text = hf.eos_token_id, hf.eos_token
    assert isinstance(eos_id, int) and eos_text
    body = encode_plain(hf, "The answer is 42.")
    ids = [*body, eos_id]
    reason = {"type": "stop", "matched": eos_id}
    chunks, final = stream_detok(fast, ids, reason, per_message=per_message, skip=False)
    want = hf.decode(body, skip_special_tokens=False)
    assert "".join(chunks) == final == want
    assert eos_text not in "".join(chunks)
    assert all(not c or not eos_text.startswith(c.strip()) or c.strip() in want for c in chunks)
    # the same stream cut by the length keeps the EOS text: the trim is the stop's, not blanket
    chunks, final = stream_detok(fast, ids, finish_length(len(ids)), per_message=per_message, skip=False)
    assert final == hf.decode(ids, skip_special_tokens=False) and final.endswith(eos_text)


def test_deepseek_recipe_16_a_real_replacement_character_is_streamed_not_dropped(fast: Any, hf: Any) -> None:
    """deepseek-ai/deepseek-recipe#16: a decoder that holds back any text ending in U+FFFD (taking
    it for half a character) held a *real* replacement character (the tokenizer has a token for
    it; mojibake output writes it) forever and dropped it at the end of the stream. Expected: the
    chunks join to ``transformers``' decode, U+FFFD characters included, whether one ends the
    answer or more text follows, and once a token follows them they have all been sent."""
    for text in ["a\ufffd", "mojibake \ufffd\ufffd here, and more text follows."]:
        ids = encode_plain(hf, text)
        assert hf.decode(ids) == text
        assert any(hf.decode([t]).strip() in (FFFD, FFFD * 2) for t in ids)  # tokens of their own
        chunks, final = stream_detok(fast, ids, {"type": "stop", "matched": 1})
        assert "".join(chunks) == final == text, chunks
        for k in range(1, len(ids)):
            if not hf.decode(ids[:k]).endswith(FFFD):
                assert "".join(chunks[:k]) == hf.decode(ids[:k]), k


def test_gittensor_1732_streamed_logprob_bytes_rebuild_the_text(tok: PreTrainedTokenizerFast) -> None:
    """entrius/gittensor#1732: a multi-byte character split across two tokens reached the client as
    U+FFFD, while the tokens' ``bytes`` joined were right. Expected, per OpenAI's ``bytes`` field
    (the token's UTF-8 bytes, to be joined when a character spans tokens): the streamed content
    has no U+FFFD, the streamed ``logprobs.content`` records' ``bytes`` joined decode (UTF-8) to
    that content, and the records are the non-streamed ones."""
    reply = "between **\u2308m/2\u2309** and **m** children 🌳"
    oa, _ = client_for(_ByteFragmentTM(tok, reply, cand_ids=[]))
    body: dict[str, Any] = {"model": "m", "messages": USER, "logprobs": True}
    whole = oa.chat.completions.create(**body).choices[0]
    content, raw, records = "", b"", []
    for ch in oa.chat.completions.create(**body, stream=True):
        for c in ch.choices:
            content += c.delta.content or ""
            for e in (c.logprobs.content if c.logprobs else None) or []:
                raw += bytes(e.bytes)
                records.append((e.token, e.logprob, e.bytes))
    assert content == whole.message.content == reply
    assert raw.decode("utf-8") == reply
    assert records == [(e.token, e.logprob, e.bytes) for e in whole.logprobs.content]


@pytest.mark.parametrize("tools", [False, True], ids=["plain", "tools"])
@pytest.mark.parametrize("thinking", [False, True], ids=["chat", "thinking"])
@pytest.mark.parametrize("end", ["<", "</thi", "<\uff5c"])
def test_mlx_vlm_1845_a_held_back_tag_start_is_flushed_at_the_end(
    tok: PreTrainedTokenizerFast, end: str, thinking: bool, tools: bool
) -> None:
    """Blaizzy/mlx-vlm#1845: an answer ending in ``<`` or ``</thi`` lost those characters when
    streamed: they were held back in case a ``<think>`` / ``</think>`` tag followed, and nothing
    sent them when the stream ended. Expected: the streamed content (folded as OpenAI's clients
    fold it) is the non-streamed content, which ends with those characters, as the model wrote
    them; with thinking on and with tools offered (whose DSML markup starts ``<\uff5c``) too."""
    reply = ("I think it over.</think>" if thinking else "") + "The answer is x " + end
    oa, _ = client_for(ChunkTM(tok, reply))
    body: dict[str, Any] = {
        "model": "m",
        "messages": USER,
        "extra_body": {"chat_template_kwargs": {"thinking": thinking}},
    }
    if tools:
        body["tools"] = [WEATHER]
    whole = oa.chat.completions.create(**body).choices[0]
    s = accumulate(oa.chat.completions.create(**body, stream=True))
    assert whole.message.content == "The answer is x " + end
    assert (s["content"], s["finish"]) == (whole.message.content, whole.finish_reason)
    assert s["reasoning"] == ((whole.message.model_extra or {}).get("reasoning_content") or "")


# --------------------------------------------------------------------------- completions + stop


class _LogprobChunkTM(ChunkTM):
    """``ChunkTM`` whose outputs carry one ``output_token_logprobs`` record a generated token
    (``-0.1 * position``, the token's own text left for the route to read), as the engine's
    ``return_logprob`` outputs do."""

    async def generate_request(self, obj: Any, request: Any = None):  # noqa: ANN201 - an async generator
        async for out in super().generate_request(obj, request):
            if obj.return_logprob:
                ids = out["output_ids"]
                out["meta_info"]["output_token_logprobs"] = [
                    [-0.1 * (i + 1), t, None] for i, t in enumerate(ids)
                ]
            yield out


STOP_REPLY = "The quick brown fox jumps over the lazy dog. Then it sleeps."


@pytest.mark.parametrize("per_chunk", [1, 2, 3])
@pytest.mark.parametrize("stop", ["own fox", "lazy dog."])
def test_swiftlm_133_completions_stream_stop_straddling_chunks(
    tok: PreTrainedTokenizerFast, per_chunk: int, stop: str
) -> None:
    """SharpAI/SwiftLM#133: the legacy ``/v1/completions`` stream leaked the first part of a stop
    string that spans two chunks (the chat route had been fixed alone). Expected: the streamed
    texts join to the reply cut right before the stop string (``str.find``), equal to the
    non-streamed text; the finish reason is ``stop``; the ``logprobs.tokens`` streamed so far
    spell no more than the text sent so far (the record of a token the stop cut rides on the
    finish chunk), and the streamed records (tokens, offsets) are the non-streamed ones,
    spelling the cut text."""
    ids = tok.encode(STOP_REPLY, add_special_tokens=False)
    assert not any(stop in tok.decode([t]) for t in ids)  # the stop straddles tokens
    want = STOP_REPLY[: STOP_REPLY.find(stop)]
    _, tc = client_for(_LogprobChunkTM(tok, STOP_REPLY, per_chunk=per_chunk))
    body = {"model": "m", "prompt": "Say it", "stop": [stop], "logprobs": 0, "max_tokens": 64}
    whole = tc.post("/v1/completions", json=body).json()["choices"][0]
    assert whole["text"] == want and whole["finish_reason"] == "stop"
    r = tc.post("/v1/completions", json={**body, "stream": True})
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    choices = [c for e in events[:-1] for c in e["choices"]]
    assert "".join(c["text"] for c in choices) == want
    assert [c["finish_reason"] for c in choices if c["finish_reason"]] == ["stop"]
    tokens: list[str] = []
    offsets: list[int] = []
    text = ""
    for c in choices:
        lp = c.get("logprobs") or {"tokens": [], "text_offset": []}
        text += c["text"]
        tokens += lp["tokens"]
        offsets += lp["text_offset"]
        assert text.startswith("".join(tokens)), (text, tokens)  # records never run ahead
    assert (tokens, offsets) == (whole["logprobs"]["tokens"], whole["logprobs"]["text_offset"])
    assert "".join(tokens) == want


# --------------------------------------------------------------------------- usage chunk


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_private_ai_gateway_80_usage_chunk_follows_the_finish_on_both_routes(
    tok: PreTrainedTokenizerFast, route: str
) -> None:
    """Dstack-TEE/private-ai-gateway#80 (``include_usage`` on ``/v1/completions`` gave no usage
    frame) and web-infra-dev/midscene#3117 (a client that stopped at the ``finish_reason`` chunk
    missed the usage chunk that follows it). Expected, per OpenAI's ``stream_options``: on both
    routes exactly one chunk carries ``usage``; it comes after every choice's finish chunk and
    right before ``[DONE]``, with ``choices: []``, and its counts are the non-streamed answer's
    (``total_tokens`` their sum); every other chunk's ``usage`` is null or absent."""
    tc = app_client(FakeTM(tok))
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 64}
    body.update({"messages": USER} if route.endswith("chat/completions") else {"prompt": "Hi"})
    whole = tc.post(route, json=body).json()["usage"]
    r = tc.post(route, json={**body, "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    with_usage = [i for i, e in enumerate(chunks) if e.get("usage")]
    assert with_usage == [len(chunks) - 1], with_usage
    last = chunks[-1]
    assert last["choices"] == []
    finishes = [i for i, e in enumerate(chunks) for c in e["choices"] if c.get("finish_reason")]
    assert len(finishes) == 1 and finishes[0] < len(chunks) - 1
    u = last["usage"]
    assert (u["prompt_tokens"], u["completion_tokens"]) == (
        whole["prompt_tokens"],
        whole["completion_tokens"],
    )
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert u["completion_tokens"] == len(tok.encode(FakeTM(tok).reply, add_special_tokens=False))


# --------------------------------------------------------------------------- logprobs + reasoning


@pytest.mark.parametrize("stream_reasoning", [True, False])
def test_sglang_28601_streamed_logprobs_survive_the_reasoning_split(
    tok: PreTrainedTokenizerFast, stream_reasoning: bool
) -> None:
    """sgl-project/sglang#28601 (on #28456; also fw-ai/benchmark#12: a chunk may carry several
    tokens' records): streamed chat ``logprobs`` disappeared once the reasoning parser was on,
    while the non-streamed answer kept them. Expected: with thinking on, the streamed
    ``logprobs.content`` records, joined over the chunks, are the non-streamed answer's (token,
    logprob and ``bytes``, each ``bytes`` the token's UTF-8), and the reasoning and content both
    arrive."""
    reply = "The user greets me, so I greet back.</think>Hello! How can I help, my friend?"
    oa = oai_client(app_client(FakeTM(tok, reply)))
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": USER,
        "logprobs": True,
        "extra_body": {"chat_template_kwargs": {"thinking": True}, "stream_reasoning": stream_reasoning},
    }
    whole = oa.chat.completions.create(**body).choices[0]
    want = [(e.token, e.logprob, e.bytes) for e in whole.logprobs.content]
    assert want
    got, reasoning, content = [], "", ""
    for ch in oa.chat.completions.create(**body, stream=True):
        for c in ch.choices:
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
            content += c.delta.content or ""
            got += [(e.token, e.logprob, e.bytes) for e in (c.logprobs.content if c.logprobs else None) or []]
    assert got == want
    assert (reasoning, content) == (
        (whole.message.model_extra or {}).get("reasoning_content"),
        whole.message.content,
    )
    assert reasoning and content.endswith("my friend?")
    for token, _, raw in got:
        assert bytes(raw) == token.encode(), token

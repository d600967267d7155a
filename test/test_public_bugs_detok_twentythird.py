"""A twenty-third set of public bug reports, on detokenization and output text: an emoji or a
Korean syllable split across tokens at the end of an answer or at message boundaries, a stop
string inside one token, a special stop token trimmed with its text length, DeepSeek-V4 special
tokens streamed as soon as they are generated (and skipped when asked), held text contained in a
stop string flushed at EOS, ``/tokenize`` and ``/detokenize`` round-trips (leading whitespace,
long space runs, batches, ``add_special_tokens``), and streamed chat deltas of multi-byte text.
Each test names its report.

Fixtures: the detokenizer (``DetokenizerManager`` on the runtime's ``FastTokenizer``) fed
scheduler messages by hand; the OpenAI router in-process over ``openai_fake_tm.FakeTM``; conftest's
``shared_fake_engine`` (the real tokenizer manager and detokenizer over
``server_fixture.FakeScheduler``, which writes ``FAKE_TEXT``). Oracles: ``transformers``' decode
and encode of the whole id sequence on the same tokenizer files, Python's ``str.find``,
``FAKE_TEXT``, and the same request unstreamed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from detokenizer_testutil import encode_plain, stream_detok
from openai_fake_tm import FakeTM, app_client, oai_client
from server_fixture import FAKE_TEXT, hf_auto_tokenizer
from sglang_v4.hf_transformers_utils import get_tokenizer
from sglang_v4.managers.detokenizer_manager import DetokenizerManager
from sglang_v4.managers.io_struct import BatchTokenIDOut, finish_length, finish_stop

pytestmark = pytest.mark.timeout(240)

FFFD = "\ufffd"
EOS_TEXT = "<｜end▁of▁sentence｜>"


# --------------------------------------------------------------------------- split characters


@pytest.mark.parametrize("per_message", [1, 2, 100])
def test_ferrox_124_emoji_ending_an_answer_is_not_two_replacement_characters(
    fast: Any, hf: Any, per_message: int
) -> None:
    """antonellof/ferrox#124: a DeepSeek answer ending in an emoji whose UTF-8 bytes span two
    tokens came out as "��", streamed and unstreamed (each token decoded on its own). Expected:
    the answer, ended by EOS, streamed one token a message, two, or all at once, gives the
    one-shot ``transformers`` decode -- the emoji whole -- and no chunk holds U+FFFD."""
    text = "Hello! How can I assist you today? 😊"
    ids = encode_plain(hf, text)
    assert FFFD in hf.decode(ids[-1:]) and FFFD in hf.decode(ids[-2:-1])  # the emoji is split
    eos = hf.convert_tokens_to_ids(hf.eos_token)
    chunks, final = stream_detok(fast, [*ids, eos], finish_stop(eos), per_message)
    assert "".join(chunks) == final == hf.decode(ids) == text
    assert not any(FFFD in c for c in chunks), chunks


@pytest.mark.parametrize("per_message", [1, 2, 3, 5])
def test_dynamo_12630_korean_at_message_boundaries_keeps_every_syllable(
    fast: Any, hf: Any, per_message: int
) -> None:
    """ai-dynamo/dynamo#12630: a streaming detokenizer that re-decoded a small look-back window
    and sliced by decoded length replaced Korean syllables split across message boundaries with
    U+FFFD and dropped completed ones ("삼겹살" -> "삼겹�"). Expected: Korean whose syllables span
    two or three byte tokens, streamed in several message sizes, joins to the one-shot decode,
    and no chunk holds U+FFFD."""
    text = "삼겹살 맛집을 추천해 주세요. 겹겹이 쌓인 삼겹살!"
    ids = encode_plain(hf, text)
    assert sum(FFFD in hf.decode([t]) for t in ids) >= 4
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    assert "".join(chunks) == final == hf.decode(ids) == text
    assert not any(FFFD in c for c in chunks), chunks


def test_mlx_swift_examples_252_chinese_streamed_token_by_token_is_not_garbled(fast: Any, hf: Any) -> None:
    """ml-explore/mlx-swift-examples#252: "Swift 社区非常活跃" decoded in one call was right, while
    the streaming detokenizer printed "Swift �区非常活跃" (a character whose bytes started in the
    space token was lost). Expected: the same text, and a variant whose CJK characters are
    split into byte tokens, stream one token a message to the one-shot decode with no U+FFFD."""
    for text in ("Swift 社区非常活跃", "Swift 社区非常活跃，龘靐齉。"):
        ids = encode_plain(hf, text)
        chunks, final = stream_detok(fast, ids)
        assert "".join(chunks) == final == hf.decode(ids) == text
        assert not any(FFFD in c for c in chunks), chunks


# --------------------------------------------------------------------------- stops


@pytest.mark.parametrize("no_stop_trim", [False, True])
@pytest.mark.parametrize("per_message", [1, 100])
def test_skyrl_778_stop_string_inside_one_token_cuts_the_text_not_the_token(
    fast: Any, hf: Any, no_stop_trim: bool, per_message: int
) -> None:
    """NovaSky-AI/SkyRL#778 (review): with stop ``".."`` and "..." a single token, the text was
    cut at the token ("Hello...") instead of at the stop string. Expected: the final text is
    the one-shot decode cut where Python's ``str.find`` finds the stop (through it with
    ``no_stop_trim``): "Hello" / "Hello.."; the streamed chunks join to it."""
    ids = encode_plain(hf, "Hello... world")
    assert hf.decode(ids[1:2]) == "..."
    full = hf.decode(ids[:2])
    at = full.find("..")
    want = full[: at + 2] if no_stop_trim else full[:at]
    chunks, final = stream_detok(fast, ids[:2], finish_stop(".."), per_message, no_stop_trim=no_stop_trim)
    assert final == want == ("Hello.." if no_stop_trim else "Hello")
    assert "".join(chunks) == final


@pytest.mark.parametrize("per_message", [1, 100])
def test_vllm_3672_special_stop_token_does_not_cut_the_text_by_its_length(
    fast: Any, hf: Any, per_message: int
) -> None:
    """vllm-project/vllm#3672 (fixing vllm-project/vllm#3026's kind): with a special token
    (``</s>``) as a stop token id and ``skip_special_tokens`` on, the output text was cut by the
    special token's length ("... harm or inj" for "... harm or injury."). Expected: with EOS as
    the matched stop token, the final text is the one-shot decode of the ids before it, whole;
    with ``no_stop_trim`` and special tokens kept, the decode of every id (EOS text included)."""
    text = "A thumb war is a game between two people and is not typically associated with harm or injury."
    ids = encode_plain(hf, text)
    eos = hf.convert_tokens_to_ids(hf.eos_token)
    chunks, final = stream_detok(fast, [*ids, eos], finish_stop(eos), per_message)
    assert "".join(chunks) == final == hf.decode(ids) == text
    chunks, final = stream_detok(
        fast, [*ids, eos], finish_stop(eos), per_message, skip=False, no_stop_trim=True
    )
    assert "".join(chunks) == final == hf.decode([*ids, eos], skip_special_tokens=False) == text + EOS_TEXT


def test_koboldcpp_1031_text_contained_in_a_stop_string_is_flushed_at_eos(shared_fake_engine: Any) -> None:
    """LostRuins/koboldcpp#1031: a token contained in a stop sequence (not its start: "as" inside
    "<|eot_id|>...assistant") was held back while streaming and discarded when EOS came next, so
    the answer lost its penultimate token. Here the stop strings hold the fake model's last
    words in their middle ("Done." inside "xDone.y", "here. Done." inside "Stop here. Done.!")
    and never match. Expected: every streamed text is a prefix of ``FAKE_TEXT``, the last is all
    of it, and the unstreamed answer equals it; the finish is the length."""
    n = len(hf_auto_tokenizer().encode(FAKE_TEXT))
    for stop in ("xDone.y", "Stop here. Done.!"):
        sp = {"max_new_tokens": n, "stop": [stop], "temperature": 0}
        outs = list(shared_fake_engine.generate("Tell me", sp, stream=True))
        for o in outs:
            assert FAKE_TEXT.startswith(o["text"]), o["text"]
        assert outs[-1]["text"] == FAKE_TEXT
        assert outs[-1]["meta_info"]["finish_reason"]["type"] == "length"
        assert shared_fake_engine.generate("Tell me", sp)["text"] == FAKE_TEXT


@pytest.mark.parametrize("skip", [True, False])
def test_pegainfer_584_eos_as_the_first_token_gives_empty_text(fast: Any, hf: Any, skip: bool) -> None:
    """pegainfer-project/pegainfer#584: when the first generated token was EOS (suppressed, zero
    tokens emitted) the answer's text was the whole prompt, flushed from a detokenizer primed with
    the prompt's ids. Expected: a request whose only output token is the matched EOS gets empty
    text, streamed and final, special tokens skipped or kept (the stop token is trimmed) -- the
    ``transformers`` decode of no ids."""
    eos = hf.convert_tokens_to_ids(hf.eos_token)
    chunks, final = stream_detok(fast, [eos], finish_stop(eos), skip=skip)
    assert chunks == [""] and final == hf.decode([]) == ""


@pytest.mark.parametrize("interval", [2, 3, 7])
def test_rapid_mlx_209_stream_interval_keeps_every_token(fast: Any, hf: Any, interval: int) -> None:
    """raullenchai/Rapid-MLX#209 (also vllm-project/vllm#41691 and vllm-project/vllm#30099): with a
    stream interval above 1 the tokens of the skipped steps were dropped from the stream (or the
    last few never sent), so the streamed text was garbled or short of the unstreamed one.
    Here the detokenizer gets the scheduler's messages at ``--stream-interval`` 2, 3 or 7
    (SGLang's rule: the first token at once, then every ``interval`` tokens, then the rest with the
    finish), over text with CJK, emoji and Korean split across tokens. Expected: the chunks join
    to the final text, which is ``transformers``' decode of all the ids, no chunk holds U+FFFD,
    and every message with new complete text sends some."""
    text = "Streaming 你好，世界！ with 😊🎉 and 삼겹살 at every interval. Done."
    ids = encode_plain(hf, text)
    dm = DetokenizerManager(fast)
    cuts = [1, *range(1 + interval, len(ids), interval), len(ids)]
    chunks: list[str] = []
    final = None
    prev = 0
    for k in cuts:
        m = BatchTokenIDOut.empty()
        m.append(
            rid="r",
            finished_reason=finish_length(k) if k == len(ids) else None,
            output_ids=ids[prev:k],
            prompt_tokens=1,
            completion_tokens=k,
        )
        out = dm.handle_batch_token_id_out(m)
        chunks.append(out.output_strs[0])
        final = out.final_strs[0]
        prev = k
    assert "".join(chunks) == final == hf.decode(ids) == text
    assert not any(FFFD in c for c in chunks), chunks
    assert sum(1 for c in chunks if c) >= len(cuts) - 2, chunks


# --------------------------------------------------------------------------- special tokens


def test_transformers_js_1520_special_tokens_stream_when_generated(fast: Any, hf: Any) -> None:
    """huggingface/transformers.js#1520 (also ggml-org/llama.cpp#7106, special tokens streamed as
    empty strings): with ``skip_special_tokens: false`` the streamer held text
    until a word boundary, so control tokens (``<|channel|>``, ``<|message|>``) came out late,
    fused with the following text. Expected: DeepSeek-V4 special tokens (``</think>``, EOS,
    DSML-style markers) in a stream with special tokens kept are sent in the chunk of the
    message that carried them, and the chunks join to ``transformers``' decode with special
    tokens kept."""
    think_end = hf.convert_tokens_to_ids("</think>")
    eos = hf.convert_tokens_to_ids(hf.eos_token)
    bos = hf.convert_tokens_to_ids(hf.bos_token)
    ids = [
        *encode_plain(hf, "We need to think"),
        think_end,
        *encode_plain(hf, "Answer"),
        bos,
        *encode_plain(hf, " 你好"),
        eos,
    ]
    chunks, final = stream_detok(fast, ids, skip=False)
    assert "".join(chunks) == final == hf.decode(ids, skip_special_tokens=False)
    for k, t in enumerate(ids):
        if t in (think_end, bos, eos):
            assert chunks[k].endswith(hf.decode([t], skip_special_tokens=False)), (k, chunks[k])


@pytest.mark.parametrize("per_message", [1, 3])
def test_tt_inference_server_2559_eos_text_never_reaches_the_content(
    fast: Any, hf: Any, per_message: int
) -> None:
    """tenstorrent/tt-inference-server#2559 (issue #2148): ``<｜end▁of▁sentence｜>`` was streamed as
    content text, special tokens decoded although they should be skipped. Expected: with
    ``skip_special_tokens`` on, DeepSeek-V4's BOS / EOS / pad tokens anywhere in the output (not
    only as the stop token) are absent from every chunk and from the final text, which is
    ``transformers``' decode with special tokens skipped."""
    eos = hf.convert_tokens_to_ids(hf.eos_token)
    bos = hf.convert_tokens_to_ids(hf.bos_token)
    pad = hf.convert_tokens_to_ids("<｜▁pad▁｜>")
    ids = [*encode_plain(hf, "Hi"), eos, *encode_plain(hf, " there 😊"), bos, pad, *encode_plain(hf, "!")]
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    want = hf.decode(ids, skip_special_tokens=True)
    assert "".join(chunks) == final == want == "Hi there 😊!"
    assert not any("｜" in c for c in chunks)


# --------------------------------------------------------------------------- /tokenize, /detokenize


@pytest.mark.parametrize(
    "text",
    [
        "   leading spaces",
        "    indented_line",
        "\t\tdef f():\n        return 1",
        " " * 100 + "x",
        "Hello:World",
    ],
)
def test_transformers_47487_tokenize_detokenize_round_trips_leading_whitespace(
    fast: Any, hf: Any, text: str
) -> None:
    """huggingface/transformers#47487 (also abetlen/llama-cpp-python#2362 and
    ggml-org/llama.cpp#3287): encode then decode lost a leading space, long whitespace tokens
    decoded to nothing, and ``/tokenize`` then ``/detokenize`` turned "Hello:World" into
    " Hello:World". Expected: ``/tokenize`` gives ``transformers``' ids of the text, and
    ``/detokenize`` of them gives the text back, unchanged."""
    c = app_client(FakeTM(fast))
    ids = c.post("/tokenize", json={"prompt": text, "add_special_tokens": False}).json()["tokens"]
    assert ids == encode_plain(hf, text)
    r = c.post("/detokenize", json={"tokens": ids})
    assert r.status_code == 200 and r.json()["text"] == hf.decode(ids) == text


def test_llamacpp_3287_batched_tokenize_inserts_no_space_per_item(fast: Any, hf: Any) -> None:
    """ggml-org/llama.cpp#3287: the array form of ``/tokenize`` inserted a space before each
    substring. Expected: each item of a batched ``/tokenize`` has the ids ``transformers`` gives
    for it alone, and a batched ``/detokenize`` of them gives each text back."""
    texts = ["Hello:World", "世界", " x", "\n", "😊ok"]
    c = app_client(FakeTM(fast))
    body = c.post("/tokenize", json={"prompt": texts, "add_special_tokens": False}).json()
    assert body["tokens"] == [encode_plain(hf, t) for t in texts]
    assert body["count"] == [len(encode_plain(hf, t)) for t in texts]
    back = c.post("/detokenize", json={"tokens": body["tokens"]}).json()["text"]
    assert back == texts


def test_llamacpp_7059_tokenize_add_special_tokens_adds_the_bos_of_the_post_processor(tmp_path: Path) -> None:
    """ggml-org/llama.cpp#7059: ``/tokenize`` gained an ``add_special`` option, since a client
    tokenizing part of a text wants no BOS, while the whole prompt gets one. Expected: on a
    DeepSeek-V4-kind tokenizer whose ``tokenizer.json`` post-processor adds BOS,
    ``add_special_tokens`` true gives ``transformers``' ids with special tokens (BOS first), false
    its ids without (no BOS), and ``/detokenize`` with ``skip_special_tokens`` false gives the
    BOS text back while the default drops it."""
    from tokenizer_testutil import BOS, EOS, PAD, tiny_tokenizer_json, transformers_tokenizer
    from tokenizers import Tokenizer, processors

    tiny_tokenizer_json(tmp_path / "tokenizer.json")
    raw = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    bos_id = raw.token_to_id(BOS)
    raw.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    raw.save(str(tmp_path / "tokenizer.json"))
    cfg = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    ours, oracle = get_tokenizer(str(tmp_path)), transformers_tokenizer(tmp_path)
    c = app_client(FakeTM(ours))
    text = "Hello world"
    with_sp = c.post("/tokenize", json={"prompt": text, "add_special_tokens": True}).json()["tokens"]
    without = c.post("/tokenize", json={"prompt": text, "add_special_tokens": False}).json()["tokens"]
    assert with_sp == oracle.encode(text, add_special_tokens=True) == [bos_id, *without]
    assert without == oracle.encode(text, add_special_tokens=False)
    kept = c.post("/detokenize", json={"tokens": with_sp, "skip_special_tokens": False}).json()["text"]
    assert kept == oracle.decode(with_sp, skip_special_tokens=False) == BOS + text
    assert c.post("/detokenize", json={"tokens": with_sp}).json()["text"] == text


# --------------------------------------------------------------------------- chat route


class _DetokenizedFakeTM(FakeTM):
    """``FakeTM`` whose streamed cumulative texts are those the runtime's detokenizer sends (one
    token a message, joined), not the decode of each id prefix (which holds U+FFFD mid-character
    and which the tokenizer manager never sends)."""

    def __init__(self, tokenizer: Any, detok_tokenizer: Any, reply: str) -> None:
        super().__init__(tokenizer, reply=reply)
        self.detok_tokenizer = detok_tokenizer

    def _output(self, sub: Any, k: int) -> list[dict[str, Any]]:
        outs = super()._output(sub, k)
        chunks, final = stream_detok(self.detok_tokenizer, outs[-1]["output_ids"])
        for j, o in enumerate(outs):
            o["text"] = "".join(chunks[: j + 1])
        assert outs[-1]["text"] == final
        return outs


@pytest.mark.parametrize(
    "reply",
    [
        "안녕하세요, 삼겹살 좋아해요?",
        "Nice 😊🎉 emoji 👨‍👩‍👧",
        "混合 CJK 한국어 and English",
        "café naïve résumé",
    ],
)
def test_mlxcel_713_streamed_chat_equals_the_unstreamed_answer(tok: Any, fast: Any, reply: str) -> None:
    """lablup/mlxcel#713 (its end-to-end check): the streamed deltas must be byte-identical to
    the unstreamed response for Korean, emoji, mixed CJK / Korean / English and accented text.
    Here the fake tokenizer manager's streamed texts are those the detokenizer sends, one token a
    message. Expected: over the OpenAI chat route, the content deltas the ``openai`` client reads join
    to the unstreamed message content, which is the reply; no delta holds U+FFFD."""
    client = oai_client(app_client(_DetokenizedFakeTM(tok, fast, reply=reply)))
    msgs = [{"role": "user", "content": "hi"}]
    whole = client.chat.completions.create(model="dsv4-test", messages=msgs)
    assert whole.choices[0].message.content == reply
    deltas = [
        c.choices[0].delta.content
        for c in client.chat.completions.create(model="dsv4-test", messages=msgs, stream=True)
        if c.choices and c.choices[0].delta.content
    ]
    assert "".join(deltas) == reply
    assert not any(FFFD in d for d in deltas), deltas

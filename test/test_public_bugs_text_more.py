"""More public reports on text in and out, replayed: incremental detokenization, stop strings in
streams, logprob token strings, ``/tokenize`` / ``/detokenize``, BOS and prompt token counts,
chat messages whose ``content`` is null or empty.

Each test names the report it replays; the oracle is independent of the code under test: the
tokenizer's own decode / encode (``transformers`` on the served ``tokenizer.json``), DeepSeek's
request converter and V4 encoder (``deepseek-recipe``) for rendered chat prompts, the text the
fake model is known to emit (``server_fixture.FAKE_TEXT``), or the report's stated expectation.

The detokenizer is tested in process where it is the unit reported (``DetokenizerManager`` fed
one scheduler message at a time); the routes on the session's fake-model server
(``plain_fake_server``: the real tokenizer manager, detokenizer and HTTP layer, outputs known in
advance).

Found faulty here: streamed ``/v1/completions`` ``logprobs`` with a stop string
(vllm-project/vllm#3574's rule applied to the logprobs): a chunk's ``tokens`` carried the text of
tokens the stream was holding back as a possible stop string, and, once the stop string was
trimmed, text the stream never sent; the streamed ``tokens`` no longer joined to the streamed
text and their ``text_offset`` ran past it, unlike the non-streamed answer. The other reports
replayed here passed as they are.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import requests
from public_bugs_testutil import USER, WEATHER_CALL, WEATHER_TOOL
from server_fixture import FAKE_TEXT, fake_output_ids, tokenizer_source_dir
from sglang_v4.managers.detokenizer_manager import DetokenizerManager
from sglang_v4.managers.io_struct import BatchTokenIDOut, finish_length, finish_stop
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import check_stop

try:  # DeepSeek's request converter and V4 encoder (the test extra's deepseek-recipe): the oracle
    import deepseek_recipe as recipe
except ImportError:  # the tests that need it skip (recipe_encoding)
    recipe = None

pytestmark = pytest.mark.timeout(180)

FFFD = "\ufffd"
BOS_ID = 0
MODEL = "default"


# ---------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def server(plain_fake_server):  # noqa: ANN201 - a server_fixture.ServerHandle
    """The session's fake-model server (conftest ``plain_fake_server``)."""
    return plain_fake_server


@pytest.fixture(scope="module")
def recipe_encoding():  # noqa: ANN201 - a deepseek_recipe.DeepseekV4Encoding
    """DeepSeek's V4 encoding with the served ``tokenizer.json``."""
    if recipe is None:
        pytest.skip("deepseek-recipe (DeepSeek's request converter, in the test extra) is the oracle")
    path = os.path.join(tokenizer_source_dir(), "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        tokenizer = recipe.Tokenizer.from_str(f.read())
    return recipe.DeepseekV4Encoding().with_tokenizer(tokenizer)


# ----------------------------------------------------------------------------------------- helpers
def _recipe_conversation(body: dict[str, Any]) -> Any:
    from deepseek_recipe_testutil import ids_in_written_order

    b = ids_in_written_order(body)
    b["model"] = "DeepSeek-V4-Pro"  # the recipe's V4 model name (its V4 encoding)
    b["thinking"] = {"type": "disabled"}
    return recipe.ChatCompletionRequest(b).convert(recipe.ConversionOptions()).conversation


def _recipe_ids(encoding: Any, body: dict[str, Any]) -> list[int]:
    """Prompt ids DeepSeek's converter + encoder give a Chat Completions body (chat mode)."""
    return list(encoding.encode(_recipe_conversation(body)))


def _post(server: Any, path: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(server.url + path, json=body, timeout=120)


def _ok(server: Any, path: str, body: dict[str, Any]) -> Any:
    r = _post(server, path, body)
    assert r.status_code == 200, r.text
    return r.json()


def _sse(server: Any, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON chunks of the streamed ``body`` (``[DONE]`` left out)."""
    r = requests.post(server.url + path, json={**body, "stream": True}, stream=True, timeout=120)
    assert r.status_code == 200, r.text
    return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith(b"data: {")]


def _chat_deltas(chunks: list[dict[str, Any]]) -> list[str | None]:
    return [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]


def _fake_text(hf: Any, n: int) -> str:
    """What the fake model's first ``n`` output tokens decode to (the tokenizer's own decode)."""
    return hf.decode(fake_output_ids(hf, n), skip_special_tokens=True)


def _before_stop(stop: str) -> str:
    """The fake model's output text up to the first occurrence of ``stop`` (not included)."""
    assert stop in FAKE_TEXT
    return FAKE_TEXT[: FAKE_TEXT.index(stop)]


def _detok_stream(
    tok: Any, ids: list[int], finish_at_end: bool = True, skip: bool = True
) -> tuple[list[str], str | None]:
    """Feed ``ids`` to a :class:`DetokenizerManager` one token per scheduler message (the last one
    finishing the request by length when ``finish_at_end``); returns the text chunks sent and the
    final text (``None`` when not finished)."""
    dm = DetokenizerManager(tok)
    chunks: list[str] = []
    final = None
    for k in range(len(ids)):
        m = BatchTokenIDOut.empty()
        last = finish_at_end and k == len(ids) - 1
        m.append(
            rid="r",
            finished_reason=finish_length(k + 1) if last else None,
            output_ids=[ids[k]],
            prompt_tokens=1,
            completion_tokens=k + 1,
            skip_special_tokens=skip,
        )
        out = dm.handle_batch_token_id_out(m)
        chunks.append(out.output_strs[0])
        final = out.final_strs[0]
    return chunks, final


# --------------------------------------------------------------- incremental detokenization (unit)
def test_emoji_pieces_stream_without_replacement_chars(fast, hf) -> None:
    """replicate/cog-llama-template#75: an emoji is several byte-level tokens; streamed one token
    at a time a client saw U+FFFD for each piece. No chunk may hold U+FFFD (the text has none) and
    the chunks join to the tokenizer's decode of the ids."""
    text = "Fire 🔥🫠 and 𓀀 then 😀!"
    ids = hf.encode(text, add_special_tokens=False)
    assert any(FFFD in hf.decode([t]) for t in ids)  # the emoji really are split into byte tokens
    chunks, final = _detok_stream(fast, ids)
    assert not any(FFFD in c for c in chunks), chunks
    assert "".join(chunks) == final == hf.decode(ids) == text


def test_sent_text_never_retreats_over_cjk_and_partial_bytes(fast, hf) -> None:
    """sgl-project/sglang#31598: across steps whose text ends in an incomplete character, the sent
    offset moved back and a CJK character was streamed twice ("A 世世ab"). Stray and incomplete
    bytes between CJK and ASCII: the chunks join to the full decode, each character once."""
    lead = hf.encode("🫠", add_special_tokens=False)[0]  # the first two bytes of a 4-byte character
    ids = [*hf.encode("A 世", add_special_tokens=False), lead]
    ids += [*hf.encode("a", add_special_tokens=False), lead, *hf.encode("b 界", add_special_tokens=False)]
    want = hf.decode(ids)
    assert want.count("世") == 1 and FFFD in want
    chunks, final = _detok_stream(fast, ids)
    assert "".join(chunks) == final == want
    assert "".join(chunks).count("世") == 1


def test_rare_cjk_split_across_tokens_streams_intact(fast, hf) -> None:
    """NVIDIA/TensorRT-LLM#2488 (also FreedomIntelligence/LLMZoo#40): a Chinese character spread
    over several tokens came out garbled when each token was decoded on its own. Rare characters
    the vocabulary splits into bytes stream whole."""
    text = "他说：龘靐齉爩，好。"
    ids = hf.encode(text, add_special_tokens=False)
    assert len(ids) > len(text)  # some characters take more than one token
    chunks, final = _detok_stream(fast, ids)
    assert not any(FFFD in c for c in chunks), chunks
    assert "".join(chunks) == final == text


def test_pending_bytes_are_flushed_when_the_output_ends(fast, hf) -> None:
    """Blaizzy/mlx-vlm#1129: a stream that ends (length) inside a multi-byte character must flush
    the held bytes, not drop them: the final text is the tokenizer's decode of all the ids (with
    its U+FFFD for the incomplete character), and the chunks join to it."""
    ids = hf.encode("ok 😀", add_special_tokens=False)[:-1]  # cut inside the emoji
    want = hf.decode(ids)
    assert want.endswith(FFFD)
    chunks, final = _detok_stream(fast, ids)
    assert "".join(chunks) == final == want
    chunks, final = _detok_stream(fast, ids, finish_at_end=False)  # still running: held back
    assert final is None and "".join(chunks) == want.rstrip(FFFD)


def test_emoji_then_eos_streams_the_emoji_once(fast, hf) -> None:
    """tenstorrent/tt-inference-server#2594: the DeepSeek-vocabulary ids ``3574, 252, 242`` (the
    bytes of 🛑) then EOS (id 1) streamed ``" \\ufffd"`` chunks. Here EOS is the matched stop
    token: no chunk holds U+FFFD, and the text is the tokenizer's decode without the EOS."""
    ids = [3574, 252, 242, 1]
    dm = DetokenizerManager(fast)
    chunks = []
    for k, tid in enumerate(ids):
        m = BatchTokenIDOut.empty()
        m.append(
            rid="r",
            finished_reason=finish_stop(1) if k == len(ids) - 1 else None,
            output_ids=[tid],
            prompt_tokens=1,
            completion_tokens=k + 1,
            skip_special_tokens=False,  # the EOS is trimmed as the matched stop, not as special
        )
        out = dm.handle_batch_token_id_out(m)
        chunks.append(out.output_strs[0])
    assert not any(FFFD in c for c in chunks), chunks
    assert "".join(chunks) == out.final_strs[0] == hf.decode(ids[:-1]) == "🛑"


@pytest.mark.parametrize("text", ["Hi 𓀀 there", "x 🔥y", "说 你好"])
def test_space_led_token_with_an_incomplete_tail_is_not_flushed(fast, hf, text: str) -> None:
    """Blaizzy/mlx-vlm#1771 (fixed by #1778): a token starting with a space flushed the pending
    bytes even when they ended inside a multi-byte character, which came out as U+FFFD. Byte-level
    tokens such as ``" \\xf0"`` (a space and the lead byte of 𓀀) stream without U+FFFD, and the
    chunks join to the text."""
    ids = hf.encode(text, add_special_tokens=False)
    chunks, final = _detok_stream(fast, ids)
    assert not any(FFFD in c for c in chunks), chunks
    assert "".join(chunks) == final == text


# -------------------------------------------------------------------- stop strings in streams
@pytest.mark.parametrize("stop", ["Stop here", "fox jumps over", "界！"])
def test_stream_never_emits_text_of_a_trimmed_stop(server, stop: str) -> None:
    """vllm-project/vllm#3574: while streaming, tokens that may be the start of a stop sequence
    were sent, then the stop matched and the text was trimmed: the client held text the answer
    does not have. Every cumulative streamed content is a prefix of the non-streamed content,
    which is the fake model's text before the stop string."""
    body = {"model": MODEL, "messages": USER, "max_tokens": 40, "stop": [stop]}
    whole = _ok(server, "/v1/chat/completions", body)["choices"][0]
    assert whole["finish_reason"] == "stop"
    assert whole["message"]["content"] == _before_stop(stop)
    sent = ""
    for d in _chat_deltas(_sse(server, "/v1/chat/completions", body)):
        sent += d or ""
        assert whole["message"]["content"].startswith(sent), (sent, whole)
    assert sent == whole["message"]["content"]


def test_long_stop_sequence_streams_like_the_non_streamed_answer(server) -> None:
    """vllm-project/vllm#2577: a stop sequence of several tokens worked without streaming but not
    with it. ``/v1/completions``, streamed and not: the same text, cut before the stop sequence,
    and ``finish_reason`` ``stop`` with the sequence as ``matched_stop``."""
    stop = "the lazy dog. 你好"
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 40, "stop": [stop]}
    whole = _ok(server, "/v1/completions", body)["choices"][0]
    chunks = [c["choices"][0] for c in _sse(server, "/v1/completions", body) if c["choices"]]
    assert whole["text"] == "".join(c["text"] for c in chunks) == _before_stop(stop)
    assert whole["finish_reason"] == chunks[-1]["finish_reason"] == "stop"
    assert whole["matched_stop"] == chunks[-1]["matched_stop"] == stop


@pytest.mark.parametrize("stop", [".", "！"])
def test_text_before_a_one_character_stop_is_not_lost_in_the_stream(server, stop: str) -> None:
    """ggml-org/llama.cpp#9867: streaming with a stop string, the end of the text before it never
    reached the client. The streamed text is all of the text before the stop."""
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 40, "stop": [stop]}
    chunks = [c["choices"][0] for c in _sse(server, "/v1/completions", body) if c["choices"]]
    assert "".join(c["text"] for c in chunks) == _before_stop(stop)
    assert chunks[-1]["finish_reason"] == "stop"


def test_stop_that_never_matches_changes_nothing(server, hf) -> None:
    """vllm-project/vllm#11089: with ``stop`` set the answer came back empty. A stop string the
    output never holds leaves the text as without it (the fake model's text), streamed or not."""
    n = 12
    for stop in (["never-there"], ["\n\n", "###"]):
        body = {"model": MODEL, "messages": USER, "max_tokens": n, "stop": stop}
        whole = _ok(server, "/v1/chat/completions", body)["choices"][0]
        assert whole["message"]["content"] == _fake_text(hf, n)
        assert whole["finish_reason"] == "length"
        streamed = "".join(d or "" for d in _chat_deltas(_sse(server, "/v1/chat/completions", body)))
        assert streamed == _fake_text(hf, n)


def test_stop_string_spelling_a_special_token_stops_with_special_tokens_skipped(fast, hf) -> None:
    """vllm-project/vllm#2123 (also LostRuins/koboldcpp#791): a stop string that is a special
    token's text never matched with ``skip_special_tokens`` on, because the text it was searched
    in had the token skipped. The scheduler's stop check ends the output at the special token and
    the detokenizer's final text is the tokenizer's decode of the ids before it (skipped: no
    special text, nothing else cut)."""
    special = 128005
    assert hf.added_tokens_decoder[special].special  # skipped by a skip_special_tokens decode
    stop = hf.convert_ids_to_tokens(special)
    ids = [
        *hf.encode("Hello there", add_special_tokens=False),
        special,
        *hf.encode(" more", add_special_tokens=False),
    ]
    sp = SamplingParams(stop=[stop], skip_special_tokens=True)
    sp.normalize(fast)
    reasons = [check_stop(ids[:n], sp, {1}, fast, False) for n in range(1, len(ids) + 1)]
    first = next(n for n, r in enumerate(reasons, 1) if r is not None)
    assert first == ids.index(special) + 1 and reasons[first - 1] == {"type": "stop", "matched": stop}
    dm = DetokenizerManager(fast)
    m = BatchTokenIDOut.empty()
    m.append(
        rid="r",
        finished_reason=reasons[first - 1],
        output_ids=ids[:first],
        prompt_tokens=1,
        completion_tokens=first,
        skip_special_tokens=True,
    )
    out = dm.handle_batch_token_id_out(m)
    assert out.final_strs[0] == out.output_strs[0] == hf.decode(ids[: first - 1]) == "Hello there"


def test_no_empty_content_chunks_while_a_stop_prefix_is_held(server) -> None:
    """vllm-project/vllm#13087: with ``stop`` set the stream sent chunks with empty content. After
    the role chunk, every chunk carries text or the finish reason."""
    body = {"model": MODEL, "messages": USER, "max_tokens": 40, "stop": ["fox jumps over"]}
    choices = [c["choices"][0] for c in _sse(server, "/v1/chat/completions", body) if c["choices"]]
    assert choices[0]["delta"].get("role") == "assistant"
    for ch in choices[1:]:
        assert ch["delta"].get("content") or ch["finish_reason"], choices


def test_anthropic_stream_reports_the_matched_stop_sequence(server) -> None:
    """vllm-project/vllm#55324: ``/v1/messages`` streamed left ``stop_sequence`` out of
    ``message_delta``. Streamed, it is the sequence that matched, as in the non-streamed message,
    and the text deltas join to the message's text (the fake text before the sequence)."""
    stop = "界！"
    body = {"model": MODEL, "max_tokens": 40, "messages": USER, "stop_sequences": ["zzz", stop]}
    whole = _ok(server, "/v1/messages", body)
    assert whole["stop_reason"] == "stop_sequence" and whole["stop_sequence"] == stop
    r = requests.post(server.url + "/v1/messages", json={**body, "stream": True}, stream=True, timeout=120)
    events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith(b"data: {")]
    text = "".join(e["delta"].get("text", "") for e in events if e.get("type") == "content_block_delta")
    assert text == "".join(b.get("text", "") for b in whole["content"]) == _before_stop(stop)
    delta = [e for e in events if e.get("type") == "message_delta"][-1]["delta"]
    assert delta["stop_reason"] == "stop_sequence" and delta["stop_sequence"] == stop


# ------------------------------------------------------------------------ special tokens in output
def test_skip_special_tokens_false_keeps_the_special_token_in_content(server, hf) -> None:
    """ai-dynamo/dynamo#14602: ``skip_special_tokens: false`` on a chat request had no effect; a
    generated ``<｜begin▁of▁sentence｜>`` was dropped from ``content``. The fake model emits the
    request's stop token id as its 4th token; kept (``include_stop_str_in_output``), the content is
    the tokenizer's decode of the four ids with or without special tokens, streamed or not."""
    ids = [*fake_output_ids(hf, 3), BOS_ID]
    for skip in (False, True):
        body = {
            "model": MODEL,
            "messages": USER,
            "max_tokens": 8,
            "stop_token_ids": [BOS_ID],
            "include_stop_str_in_output": True,
            "skip_special_tokens": skip,
        }
        want = hf.decode(ids, skip_special_tokens=skip)
        assert ("<｜begin▁of▁sentence｜>" in want) is not skip
        whole = _ok(server, "/v1/chat/completions", body)["choices"][0]["message"]["content"]
        streamed = "".join(d or "" for d in _chat_deltas(_sse(server, "/v1/chat/completions", body)))
        assert whole == streamed == want


# ------------------------------------------------------------------------------------ logprobs
def test_streamed_logprob_tokens_never_run_ahead_of_the_streamed_text(server) -> None:
    """vllm-project/vllm#3574 for ``logprobs``: streamed with a stop string, a chunk's
    ``logprobs.tokens`` carried the text of tokens the stream held back as a possible stop (and
    later trimmed): the tokens did not join to the streamed text and their ``text_offset`` ran
    past it. At every chunk the streamed tokens join to a prefix of the streamed text, each
    ``text[text_offset[i]:]`` starts with ``tokens[i]``, and the whole equals the non-streamed
    ``logprobs``."""
    for stop in (["Stop here"], ["界！"], ["brown fox"]):
        body = {"model": MODEL, "prompt": "Hi", "max_tokens": 40, "logprobs": 1, "stop": stop}
        whole = _ok(server, "/v1/completions", body)["choices"][0]
        text, tokens, offsets = "", [], []
        for c in _sse(server, "/v1/completions", body):
            if not c["choices"]:
                continue
            ch = c["choices"][0]
            text += ch["text"]
            if ch.get("logprobs"):
                tokens += ch["logprobs"]["tokens"]
                offsets += ch["logprobs"]["text_offset"]
            assert text.startswith("".join(tokens)), (stop, text, tokens)
        assert text == whole["text"] == "".join(tokens)
        assert all(text[o:].startswith(t) for o, t in zip(offsets, tokens))
        assert tokens == whole["logprobs"]["tokens"] and offsets == whole["logprobs"]["text_offset"]


def test_echo_logprobs_of_byte_tokens_are_text(server, hf) -> None:
    """vllm-project/vllm#2706: ``echo`` with ``logprobs`` on a prompt of byte-level tokens gave
    ``bytes`` token strings and a response that could not be serialized. The prompt as token ids
    of emoji split into bytes: a JSON answer whose ``tokens`` are strings joining to the text,
    which is the tokenizer's decode of the prompt followed by the fake model's output."""
    prompt = hf.encode("Hi 𓀀🫠 ok", add_special_tokens=False)
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 3, "echo": True, "logprobs": 2}
    ch = _ok(server, "/v1/completions", body)["choices"][0]
    assert ch["text"] == hf.decode(prompt) + _fake_text(hf, 3)
    lp = ch["logprobs"]
    assert all(isinstance(t, str) for t in lp["tokens"])
    assert "".join(lp["tokens"]) == ch["text"]
    assert all(ch["text"][o:].startswith(t) for o, t in zip(lp["text_offset"], lp["tokens"]))


def test_twenty_top_logprobs_have_byte_lists(server) -> None:
    """vllm-project/vllm#16540: a high ``top_logprobs`` count on chat failed with a 400 because the
    byte tokens' entries did not validate. ``top_logprobs: 20``: 200, twenty alternatives per
    token, and every ``bytes`` a list of byte values whose UTF-8 text is the entry's ``token``."""
    body = {"model": MODEL, "messages": USER, "max_tokens": 4, "logprobs": True, "top_logprobs": 20}
    content = _ok(server, "/v1/chat/completions", body)["choices"][0]["logprobs"]["content"]
    assert len(content) == 4
    for e in content:
        assert len(e["top_logprobs"]) == 20
        for entry in [e, *e["top_logprobs"]]:
            assert all(isinstance(b, int) and 0 <= b < 256 for b in entry["bytes"])
            assert bytes(entry["bytes"]).decode("utf-8") == entry["token"]


# ---------------------------------------------------------------- prompts in: chat and completions
def test_tool_call_turn_with_null_content_tokenizes(server, recipe_encoding) -> None:
    """mistralai/mistral-common#324: ``/v1/tokenize`` (and the chat route) rejected an assistant
    tool-call message with ``content: null``, a valid OpenAI request shape. Accepted, and rendered
    as DeepSeek's encoder renders it."""
    body = {
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
        ],
        "tools": [WEATHER_TOOL],
    }
    got = _ok(server, "/tokenize", {"model": MODEL, **body})
    assert got["tokens"] == _recipe_ids(recipe_encoding, body)


def test_null_content_tool_call_is_counted_not_dropped(server, recipe_encoding) -> None:
    """cubist38/mlx-openai-server#205: an assistant message with ``content: null`` and tool calls
    was skipped, so the tool result that follows had no call. ``usage.prompt_tokens`` is the
    count of DeepSeek's encoding of the whole conversation, the call included."""
    call = {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]}
    body = {
        "messages": [{"role": "user", "content": "Weather?"}, call, {"role": "tool", "content": "Sunny"}],
        "tools": [WEATHER_TOOL],
    }
    body["messages"][2]["tool_call_id"] = "c1"
    usage = _ok(server, "/v1/chat/completions", {"model": MODEL, **body, "max_tokens": 1})["usage"]
    assert usage["prompt_tokens"] == len(_recipe_ids(recipe_encoding, body))


def test_empty_and_null_content_of_a_tool_call_turn_render_alike(server, recipe_encoding) -> None:
    """ollama/ollama#14181: ``content: ""`` on an assistant tool-call message rendered unlike
    ``content: null`` (OpenAI's API treats both as no text). ``""``, ``null`` and a missing
    ``content`` give the same prompt ids, DeepSeek's encoding of the call."""
    seen = []
    for content in ("", None, "missing"):
        call: dict[str, Any] = {"role": "assistant", "tool_calls": [WEATHER_CALL]}
        if content != "missing":
            call["content"] = content
        body = {
            "messages": [
                {"role": "user", "content": "Weather?"},
                call,
                {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
            ],
            "tools": [WEATHER_TOOL],
        }
        seen.append(_ok(server, "/tokenize", {"model": MODEL, **body})["tokens"])
    assert seen[0] == seen[1] == seen[2] == _recipe_ids(recipe_encoding, body)


def test_chat_prompt_has_one_bos(server, recipe_encoding) -> None:
    """sgl-project/sglang#888: the chat template rendered to text and encoded again got a second
    BOS. The chat prompt starts with exactly one ``<｜begin▁of▁sentence｜>`` and is DeepSeek's
    encoding; ``usage.prompt_tokens`` counts it."""
    body = {"messages": [{"role": "system", "content": "Be brief."}, *USER]}
    ids = _ok(server, "/tokenize", {"model": MODEL, **body})["tokens"]
    want = _recipe_ids(recipe_encoding, body)
    assert ids == want and ids[0] == BOS_ID and ids.count(BOS_ID) == 1
    usage = _ok(server, "/v1/chat/completions", {"model": MODEL, **body, "max_tokens": 1})["usage"]
    assert usage["prompt_tokens"] == len(want)


def test_rendered_prompt_sent_as_text_gets_no_second_bos(server, recipe_encoding) -> None:
    """MakazhanAlpamys/Soup#890 (LiveCodeBench/LiveCodeBench#146 for vLLM): a prompt rendered by
    the chat template, BOS included, and sent as text got another BOS from the tokenizer. Sent to
    ``/v1/completions`` and ``/generate``, DeepSeek's rendered prompt string counts as many tokens
    as DeepSeek's encoding of the conversation."""
    body = {"messages": [{"role": "system", "content": "Be brief."}, *USER]}
    conv = _recipe_conversation(body)
    text = recipe_encoding.render_conversation(conv).prompt
    want = list(recipe_encoding.encode(conv))
    assert text.startswith("<｜begin▁of▁sentence｜>")
    usage = _ok(server, "/v1/completions", {"model": MODEL, "prompt": text, "max_tokens": 1})["usage"]
    assert usage["prompt_tokens"] == len(want)
    meta = _ok(server, "/generate", {"text": text, "sampling_params": {"max_new_tokens": 1}})["meta_info"]
    assert meta["prompt_tokens"] == len(want)
    assert _ok(server, "/tokenize", {"model": MODEL, "prompt": text})["tokens"] == want


@pytest.mark.parametrize(
    "prompt", ["what is you name", "你好，世界 🔥 and <｜User｜>hi", "  spaced\n\ttext  "]
)
def test_completion_prompt_tokens_are_the_tokenizers_count(server, hf, prompt: str) -> None:
    """vllm-project/vllm#13256: ``usage.prompt_tokens`` differed from the count of
    ``AutoTokenizer``. For ``/v1/completions`` it is ``len(tokenizer(prompt).input_ids)``, as
    ``/tokenize`` says."""
    want = hf(prompt).input_ids
    usage = _ok(server, "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 1})["usage"]
    assert usage["prompt_tokens"] == len(want)
    assert _ok(server, "/tokenize", {"model": MODEL, "prompt": prompt})["tokens"] == want


@pytest.mark.parametrize(
    "text", ["Hello  world\n\t end ", "你好 🔥 𓀀 ✓ café", "<｜User｜>hi<｜Assistant｜></think>", " "]
)
def test_tokenize_detokenize_round_trip(server, hf, text: str) -> None:
    """huggingface/transformers#27857: decoding ids and encoding the text again did not give the
    ids back. ``/tokenize`` then ``/detokenize`` (special tokens kept) gives the text back, and the
    ids are the tokenizer's."""
    ids = _ok(server, "/tokenize", {"model": MODEL, "prompt": text})["tokens"]
    assert ids == hf(text).input_ids
    back = _ok(server, "/detokenize", {"model": MODEL, "tokens": ids, "skip_special_tokens": False})
    assert back["text"] == text


# ------------------------------------------------------------------- prompts ending mid-character
def test_prompt_ending_in_an_incomplete_character_is_not_streamed_back(server, hf) -> None:
    """vllm-project/vllm#48853: a token-id prompt ending inside a multi-byte character made the
    first streamed delta repeat the whole prompt text. Streamed and not, the text is the fake
    model's output only; with ``echo``, the tokenizer's decode of the prompt once, then it."""
    prompt = hf.encode("Hello world 🌶", add_special_tokens=False)[:-1]
    assert hf.decode(prompt).endswith(FFFD)
    n = 6
    for echo in (False, True):
        body = {"model": MODEL, "prompt": prompt, "max_tokens": n, "echo": echo}
        want = (hf.decode(prompt) if echo else "") + _fake_text(hf, n)
        whole = _ok(server, "/v1/completions", body)["choices"][0]["text"]
        chunks = [c["choices"][0]["text"] for c in _sse(server, "/v1/completions", body) if c["choices"]]
        assert whole == "".join(chunks) == want
        if not echo:
            assert "Hello" not in chunks[0]

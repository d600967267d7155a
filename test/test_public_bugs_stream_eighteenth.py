"""An eighteenth set of public bug reports, on streaming and SGLang's native API: the SSE framing
of ``/v1/completions``, ``/v1/chat/completions`` and ``/generate`` streams (one ``data:`` line per
event, one id per stream, ``usage: null`` until the usage chunk, cumulative per-chunk usage,
in-stream errors the ``openai`` client raises, one finish chunk per choice, the opening role
chunk of a thinking stream), logprob records of tokens that show no text yet,
stop strings that straddle chunks, cumulative ``/generate`` chunks and ``sampling_params`` of the
wrong type, and the ``param`` of an error (the SGLang frontend's reports:
``test_public_bugs_stream_eighteenth_frontend``). Each test
names its report. Two were faults here: the ``n > 1`` chat stream folded by the ``openai``
client's own accumulator (openai/openai-python#1833; a choice's role chunk was sent when its
first output arrived, so a stream could begin with choice 1) and an engine error's ``param``
(ray-project/ray#64833; the message's first word, ``"the"`` or ``"batch"``, was taken for a
field); the other reports passed as-is and are kept as regression tests of behaviour a client
relies on.

Fixtures: ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model writes
``FAKE_TEXT`` over and over, fake log-probabilities; ``--served-model-name qa-model``) and, in
process, the OpenAI router over a tokenizer manager written here (the model's text and
log-probabilities written by hand). Oracles: ``FAKE_TEXT`` through the DeepSeek-V4 tokenizer
(``tokenizer.json`` as a ``transformers`` fast tokenizer), UTF-8, the same request not streamed,
the ``openai`` client's own SSE decoder, stream reader and types, and the OpenAI reference's field
meanings.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import requests
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events
from public_bugs_testutil import post, sse
from server_fixture import ServerHandle, fake_output_ids, fake_output_text

openai = pytest.importorskip("openai")

from chat_tools_testutil import _ByteFragmentTM  # noqa: E402
from openai._streaming import SSEDecoder  # noqa: E402
from openai.types.chat import ChatCompletionChunk  # noqa: E402

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name
HI = [{"role": "user", "content": "Hi"}]


def _ok(server: ServerHandle, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON answer of ``POST path``; asserts HTTP 200."""
    r = post(server, path, body)
    assert r.status_code == 200, r.text
    return r.json()


def _raw_stream(server: ServerHandle, path: str, body: dict[str, Any]) -> bytes:
    """The raw bytes of the streamed answer to ``body`` (``stream: true`` added)."""
    r = requests.post(server.url + path, json={**body, "stream": True}, timeout=120)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream"), r.headers
    return r.content


# --------------------------------------------------------------------------- usage in streams


def test_openapi_240_usage_is_null_until_the_usage_chunk_after_the_finish(
    plain_fake_server: ServerHandle,
) -> None:
    """openai/openai-openapi#240 (``stream_options.include_usage`` as specified): an extra chunk
    comes before ``data: [DONE]`` with the usage of the whole request and an empty ``choices``;
    every other chunk has a ``usage`` field whose value is ``null``. Expected, on the chat route:
    ``usage`` present and ``null`` on every chunk but the last JSON one, that one after the
    finishing chunk with ``choices: []`` and the usage of the same request not streamed; each
    chunk parses as the ``openai`` client's ``ChatCompletionChunk``."""
    body = {"model": FAKE_MODEL, "messages": HI, "max_tokens": 5, "temperature": 0}
    chunks = sse(plain_fake_server, CHAT, {**body, "stream_options": {"include_usage": True}})
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    *content, last = chunks
    assert all("usage" in c and c["usage"] is None for c in content), content
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert last["choices"] == []
    whole = _ok(plain_fake_server, CHAT, body)
    assert {k: last["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == {
        k: whole["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    }
    assert last["usage"]["completion_tokens"] == 5
    raw = _raw_stream(plain_fake_server, CHAT, {**body, "stream_options": {"include_usage": True}})
    assert raw.endswith(b"data: [DONE]\n\n") and raw.count(b"[DONE]") == 1


def test_vllm_4967_stream_options_on_completions_counts_every_prompt_and_choice(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#4967 (``stream_options`` was honoured on chat only; the legacy
    completions route sent no usage chunk, fixed by PR #5319). Expected on ``/v1/completions``
    with two prompts and ``n=2``: one final usage chunk (``choices: []``) whose counts equal the
    non-streamed answer's: every prompt counted once, ``completion_tokens`` the sum over the four
    choices (4 x ``max_tokens``), ``total_tokens`` their sum; the four choices' streamed texts are
    the fake model's (tokenizer oracle)."""
    body = {"model": FAKE_MODEL, "prompt": ["Hi", "Hello there"], "n": 2, "max_tokens": 3}
    chunks = sse(plain_fake_server, COMPLETIONS, {**body, "stream_options": {"include_usage": True}})
    usage_chunks = [c for c in chunks if c.get("usage")]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1] and chunks[-1]["choices"] == []
    usage = chunks[-1]["usage"]
    whole = _ok(plain_fake_server, COMPLETIONS, body)["usage"]
    assert usage["prompt_tokens"] == whole["prompt_tokens"]
    assert usage["completion_tokens"] == whole["completion_tokens"] == 4 * 3
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    texts: dict[int, str] = {}
    for c in chunks[:-1]:
        for ch in c["choices"]:
            texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
    assert texts == {i: fake_output_text(tok, 3) for i in range(4)}


def test_pydantic_ai_7913_continuous_usage_is_cumulative_and_on_every_chunk(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """pydantic/pydantic-ai#7913 (with ``continuous_usage_stats`` a client replaces its running
    usage by each chunk's, so a chunk without usage reads as zero tokens and a per-chunk delta
    would undercount). Expected on both routes: every chunk carries ``usage`` (the role chunk
    too), ``completion_tokens`` is cumulative (the tokens of the text streamed so far, by the
    tokenizer) and never decreases, and the last chunk's usage is the final usage."""
    so = {"include_usage": True, "continuous_usage_stats": True}
    for path, body in (
        (CHAT, {"model": FAKE_MODEL, "messages": HI, "max_tokens": 6}),
        (COMPLETIONS, {"model": FAKE_MODEL, "prompt": "Hi", "max_tokens": 6}),
    ):
        chunks = sse(plain_fake_server, path, {**body, "stream_options": so})
        assert all(c.get("usage") for c in chunks), (path, chunks)
        seen = [c["usage"]["completion_tokens"] for c in chunks]
        assert seen == sorted(seen), (path, seen)
        text = ""
        for c in chunks[:-1]:
            for ch in c["choices"]:
                piece = ch["delta"].get("content") if path == CHAT else ch["text"]
                text += piece or ""
            done = len(tok.encode(text, add_special_tokens=False)) if text else 0
            assert c["usage"]["completion_tokens"] == done, (path, text, c["usage"])
        assert text == fake_output_text(tok, 6)
        assert chunks[-1]["usage"]["completion_tokens"] == 6
        assert chunks[-1]["usage"]["total_tokens"] == chunks[-1]["usage"]["prompt_tokens"] + 6


# --------------------------------------------------------------------------- SSE framing


def test_llamacpp_5876_chat_stream_chunks_share_one_id(plain_fake_server: ServerHandle) -> None:
    """ggml-org/llama.cpp#5876 (each chat stream chunk had its own ``chatcmpl-`` id; OpenAI's
    reference: "Each chunk has the same ID"). Expected: every chunk of one chat stream (role,
    content, finish and usage chunks, both choices of ``n=2``) has the same non-empty
    ``chatcmpl-`` id, ``created``, ``model`` and ``object: chat.completion.chunk``; a second
    request gets another id."""
    body = {"model": FAKE_MODEL, "messages": HI, "max_tokens": 3, "n": 2}
    so = {"stream_options": {"include_usage": True}}
    chunks = sse(plain_fake_server, CHAT, {**body, **so})
    assert len(chunks) >= 7  # 2 x (role, content, finish) + usage
    assert {c["id"] for c in chunks} == {chunks[0]["id"]} and chunks[0]["id"].startswith("chatcmpl-")
    assert {(c["created"], c["model"], c["object"]) for c in chunks} == {
        (chunks[0]["created"], FAKE_MODEL, "chat.completion.chunk")
    }
    assert sse(plain_fake_server, CHAT, body)[0]["id"] != chunks[0]["id"]


def test_rapid_mlx_752_completion_stream_chunks_share_one_id(plain_fake_server: ServerHandle) -> None:
    """raullenchai/Rapid-MLX#752 (every legacy ``/v1/completions`` stream chunk minted a fresh
    ``cmpl-`` id and ``created``, so clients keying on ``id`` could not join the chunks).
    Expected: one ``cmpl-`` id and one ``created`` across all chunks of a stream of two prompts
    and ``n=2``, the usage chunk included, each chunk ``object: text_completion``; all four
    choice indices appear."""
    body = {"model": FAKE_MODEL, "prompt": ["a", "b"], "n": 2, "max_tokens": 2}
    chunks = sse(plain_fake_server, COMPLETIONS, {**body, "stream_options": {"include_usage": True}})
    assert {c["id"] for c in chunks} == {chunks[0]["id"]} and chunks[0]["id"].startswith("cmpl-")
    assert {(c["created"], c["object"]) for c in chunks} == {(chunks[0]["created"], "text_completion")}
    assert {ch["index"] for c in chunks for ch in c["choices"]} == {0, 1, 2, 3}


def test_openai_python_2722_every_sse_event_carries_one_data_line(plain_fake_server: ServerHandle) -> None:
    """openai/openai-python#2722 (an SSE event without data -- a ``retry:`` or ``id:`` line
    alone -- made the client's ``sse.json()`` raise ``JSONDecodeError``). Expected of every
    stream (chat, completions, ``/generate``): events separated by a blank line, each exactly one
    ``data: `` line (no ``event:``, ``id:``, ``retry:`` or comment lines), JSON objects and then
    one ``[DONE]``; the ``openai`` client's own ``SSEDecoder`` reads them all, none empty."""
    streams = {
        CHAT: {
            "model": FAKE_MODEL,
            "messages": HI,
            "max_tokens": 3,
            "stream_options": {"include_usage": True},
        },
        COMPLETIONS: {"model": FAKE_MODEL, "prompt": "Hi", "max_tokens": 3, "logprobs": 1},
        "/generate": {"text": "Hi", "sampling_params": {"max_new_tokens": 3}, "return_logprob": True},
    }
    for path, body in streams.items():
        raw = _raw_stream(plain_fake_server, path, body)
        assert raw.endswith(b"\n\n"), (path, raw[-50:])
        events = raw.decode().split("\n\n")[:-1]
        assert all(e.startswith("data: ") and "\n" not in e for e in events), (path, events)
        payloads = [e[len("data: ") :] for e in events]
        assert payloads[-1] == "[DONE]" and "[DONE]" not in payloads[:-1], path
        assert all(isinstance(json.loads(p), dict) for p in payloads[:-1]), path
        decoded = list(SSEDecoder().iter_bytes(iter([raw])))
        assert [s.data for s in decoded] == payloads and all(s.event is None for s in decoded), path


def test_openai_python_2796_an_error_after_the_first_chunk_raises_in_the_client(tok: Any) -> None:
    """openai/openai-python#2796 (the client's check for a mid-stream error sat where it never
    ran, so an error event read as an empty chunk). The client raises ``APIError`` for a stream
    event whose JSON has an ``error`` key. Expected of both routes, when the scheduler fails after
    the first output: the chunks sent before it read normally, then the client raises
    ``openai.APIError`` with the engine's message; the raw stream has the error event, then
    ``[DONE]``."""
    tm = _ByteFragmentTM(tok, "Hello there, general Kenobi.", [], fail_after=2)
    tc = app_client(tm)
    client = oai_client(tc)
    got: list[str] = []
    with pytest.raises(openai.APIError, match="injected"):
        for chunk in client.chat.completions.create(model="dsv4-test", messages=HI, stream=True):
            got.append(chunk.choices[0].delta.content or "")
    assert "".join(got) == tok.decode(tok.encode(tm.reply, add_special_tokens=False)[:2])
    got = []
    with pytest.raises(openai.APIError, match="injected"):
        for chunk in client.completions.create(model="dsv4-test", prompt="Hi", stream=True):
            got.append(chunk.choices[0].text)
    assert "".join(got) == tok.decode(tok.encode(tm.reply, add_special_tokens=False)[:2])
    events = sse_data_events(tc.post(CHAT, json={"model": "dsv4-test", "messages": HI, "stream": True}))
    assert events[-1] == "[DONE]" and "injected" in events[-2]["error"]["message"], events[-3:]


# --------------------------------------------------------------------------- logprobs in streams


def test_sglang_40115_logprob_records_of_tokens_that_show_no_text_are_streamed(tok: Any) -> None:
    """sgl-project/sglang#40115 (fixes #39842: the chat stream skipped the logprob records of
    tokens that added no visible text -- the byte-fallback pieces of a character not yet whole --
    and collapsed top candidates that decode to the same text). Expected: the streamed records,
    joined, are the non-streamed ``logprobs.content``, one per generated token; their ``bytes``
    joined are the UTF-8 bytes of the answer (the oracle); each position keeps all three top
    candidates asked for, two of which decode to the same U+FFFD text, with different bytes."""
    reply = "🦙 ok"
    ids = tok.encode(reply, add_special_tokens=False)
    frag = [i for i in ids if tok.decode([i]) == "\ufffd"]
    assert len(frag) >= 2 and len(set(frag[:2])) == 2, ids  # byte-fallback pieces of the emoji
    tm = _ByteFragmentTM(tok, reply, cand_ids=frag[:2])
    tc = app_client(tm)
    body = {"model": "dsv4-test", "messages": HI, "logprobs": True, "top_logprobs": 3}
    events = sse_data_events(tc.post(CHAT, json={**body, "stream": True}))
    assert events[-1] == "[DONE]"
    records, text = [], ""
    for e in events[:-1]:
        ch = e["choices"][0]
        text += ch["delta"].get("content") or ""
        records += (ch.get("logprobs") or {}).get("content") or []
    whole = tc.post(CHAT, json=body).json()["choices"][0]
    assert text == whole["message"]["content"] == reply
    assert records == whole["logprobs"]["content"] and len(records) == len(ids)
    assert bytes(b for r in records for b in r["bytes"]) == reply.encode()
    for r in records:
        assert len(r["top_logprobs"]) == 3, r
        same = r["top_logprobs"][1:]
        assert [t["token"] for t in same] == ["\ufffd", "\ufffd"] and same[0]["bytes"] != same[1]["bytes"]
        assert [t["logprob"] for t in same] == [-5.0, -6.0]


# --------------------------------------------------------------------------- stops and /generate


def test_sglang_35157_a_stop_string_across_chunks_gives_the_same_text_streamed_and_not(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#35157 (a stop string whose first part went out in an earlier output:
    the part already sent stayed in the client's text, so streamed and non-streamed answers
    differed). The stop ``"Done. The"`` spans two of the fake model's tokens and its cycle
    boundary. Expected on ``/generate`` and ``/v1/completions``: the streamed text (last
    cumulative chunk / joined deltas) equals the non-streamed text, which is the fake text up to
    the stop (tokenizer oracle), finish reason stop; with ``max_new_tokens`` ending inside the
    stop string the held-back part is sent (finish reason length)."""
    full = fake_output_text(tok, 60)
    want = full[: full.index("Done. The")]
    gen = {"text": "Hi", "sampling_params": {"max_new_tokens": 60, "stop": ["Done. The"]}}
    chunks = sse(plain_fake_server, "/generate", gen)
    whole = _ok(plain_fake_server, "/generate", gen)
    assert chunks[-1]["text"] == whole["text"] == want
    assert whole["meta_info"]["finish_reason"] == {"type": "stop", "matched": "Done. The"}
    comp = {"model": FAKE_MODEL, "prompt": "Hi", "max_tokens": 60, "stop": ["Done. The"]}
    streamed = sse(plain_fake_server, COMPLETIONS, comp)
    assert "".join(c["choices"][0]["text"] for c in streamed) == want
    assert streamed[-1]["choices"][0]["finish_reason"] == "stop"
    assert _ok(plain_fake_server, COMPLETIONS, comp)["choices"][0]["text"] == want
    # cut by the length at "Done." (the first token of the stop string): nothing is held back
    k = next(j for j in range(1, 60) if fake_output_text(tok, j).endswith("Done."))
    cut = sse(plain_fake_server, COMPLETIONS, {**comp, "max_tokens": k})
    assert "".join(c["choices"][0]["text"] for c in cut) == fake_output_text(tok, k)
    assert cut[-1]["choices"][0]["finish_reason"] == "length"


def test_sglang_215_generate_stream_chunks_advance_token_by_token(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#215 (with ``--stream-interval 1`` the ``/generate`` stream repeated its
    first chunk instead of moving on). Expected (SGLang's cumulative chunks): each chunk's
    ``text`` and ``output_ids`` extend the previous chunk's, ``completion_tokens`` equals the
    length of ``output_ids`` and grows, the request id stays the same, and the last chunk is the
    fake model's answer (tokenizer oracle), for a single request and for each index of ``n=2``."""
    for body, n in (
        ({"text": "Hi", "sampling_params": {"max_new_tokens": 6}}, 1),
        ({"text": "Hi", "sampling_params": {"max_new_tokens": 6, "n": 2}}, 2),
    ):
        per: dict[int, list[dict[str, Any]]] = {}
        for c in sse(plain_fake_server, "/generate", body):
            per.setdefault(int(c.get("index", 0)), []).append(c)
        assert sorted(per) == list(range(n))
        for chunks in per.values():
            assert len(chunks) >= 2 and len({c["meta_info"]["id"] for c in chunks}) == 1
            for a, b in zip(chunks, chunks[1:]):
                assert b["text"].startswith(a["text"]) and len(b["output_ids"]) > len(a["output_ids"])
                assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
            assert all(c["meta_info"]["completion_tokens"] == len(c["output_ids"]) for c in chunks)
            assert chunks[-1]["output_ids"] == fake_output_ids(tok, 6)
            assert chunks[-1]["text"] == fake_output_text(tok, 6)


@pytest.mark.parametrize("sp", ["max_new_tokens=4", 4, True, [1, 2], [{"max_new_tokens": 1}, "x"]], ids=repr)
def test_sglang_21261_non_dict_sampling_params_is_a_400(plain_fake_server: ServerHandle, sp: Any) -> None:
    """sgl-project/sglang#21261 (``sampling_params`` is a dict, or a list of dicts for a batch;
    anything else reached the scheduler and failed there). Expected: HTTP 400 in SGLang's error
    shape naming ``sampling_params``, streamed or not (before any SSE), for a single prompt and a
    batch of two; the server goes on serving."""
    for text in ("Hi", ["Hi", "Yo"]):
        for stream in (False, True):
            r = post(plain_fake_server, "/generate", {"text": text, "sampling_params": sp, "stream": stream})
            assert r.status_code == 400, (text, stream, r.text)
            assert r.headers["content-type"].startswith("application/json")
            err = r.json()["error"]
            assert err["code"] == 400 and "sampling_params" in err["message"], err
    ok = _ok(plain_fake_server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 2}})
    assert ok["meta_info"]["completion_tokens"] == 2


def test_sglang_600_streamed_chat_deltas_through_cjk_text_rebuild_the_answer(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#600 (the printable part of the decoded text did not grow monotonically
    around CJK characters and spaces, so the OpenAI adapter's deltas lost or repeated text).
    The fake model writes ``... dog. 你好，世界！ Stop here. Done.``. Expected: the chat and
    completions deltas joined are the non-streamed text and the tokenizer's decoding of the fake
    ids (the oracle), no delta holds U+FFFD, for an answer cut inside and after the CJK part."""
    for n in (13, 22):
        want = fake_output_text(tok, n)
        body = {"model": FAKE_MODEL, "messages": HI, "max_tokens": n}
        deltas = [
            c["choices"][0]["delta"].get("content") or ""
            for c in sse(plain_fake_server, CHAT, body)
            if c["choices"]
        ]
        assert (
            "".join(deltas) == want == _ok(plain_fake_server, CHAT, body)["choices"][0]["message"]["content"]
        )
        assert not any("\ufffd" in d for d in deltas), deltas
        comp = {"model": FAKE_MODEL, "prompt": "Hi", "max_tokens": n}
        texts = [c["choices"][0]["text"] for c in sse(plain_fake_server, COMPLETIONS, comp)]
        assert "".join(texts) == want and not any("\ufffd" in t for t in texts)
    assert "你好" in fake_output_text(tok, 13)


class _LastChoiceFirstTM(FakeTM):
    """``FakeTM`` whose streamed ``n > 1`` outputs come choice by choice, the last choice first
    (an order the engine may produce: choices run independently)."""

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        items = [o async for o in super().generate_request(obj, request)]
        if obj.stream and items and "index" in items[0]:
            items.sort(key=lambda o: -o["index"])  # stable: each choice's outputs keep their order
        for o in items:
            yield o


def test_openai_python_1833_the_clients_stream_state_rebuilds_the_unstreamed_answer(
    tok: Any, plain_fake_server: ServerHandle
) -> None:
    """openai/openai-python#1833 (the client's ``ChatCompletionStreamState`` recombines streamed
    chunks into a ``ChatCompletion``; it takes the first chunk's choice as choice 0 and appends
    each new index after the last). Was a fault here: the role chunk of each choice was sent when
    that choice's first output arrived, so an ``n=2`` stream whose choice 1 came first began with
    index 1 and the client's fold failed (``IndexError``) or mixed the choices. Expected: the role
    chunks of all choices come first, in index order; the client's own accumulator, fed the
    chunks of an ``n=2`` stream with logprobs and the usage chunk, gives per choice the content,
    finish reason and logprob records of the same request not streamed, and its usage -- on the
    in-process router with choice 1 generated first, and on the server."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    body = {"model": "dsv4-test", "messages": HI, "n": 2, "logprobs": True, "top_logprobs": 2}
    tc = app_client(_LastChoiceFirstTM(tok))
    events = sse_data_events(tc.post(CHAT, json={**body, "stream": True}))
    roles = [(e["choices"][0]["index"], e["choices"][0]["delta"].get("role")) for e in events[:2]]
    assert roles == [(0, "assistant"), (1, "assistant")], events[:3]
    server_client = openai.OpenAI(base_url=plain_fake_server.url + "/v1", api_key="none", max_retries=0)
    for client, extra in (
        (oai_client(tc), {}),
        (server_client, {"model": FAKE_MODEL, "max_tokens": 5}),
    ):
        req = {**body, **extra}
        state = ChatCompletionStreamState()
        for chunk in client.chat.completions.create(
            **req, stream=True, stream_options={"include_usage": True}
        ):
            state.handle_chunk(chunk)
        folded = state.current_completion_snapshot  # get_final_completion refuses a length finish
        whole = client.chat.completions.create(**req)
        assert [c.index for c in folded.choices] == [0, 1] and len(whole.choices) == 2
        for got, want in zip(folded.choices, whole.choices):
            assert got.message.content == want.message.content and got.message.role == "assistant"
            assert got.finish_reason == want.finish_reason
            assert [t.model_dump() for t in got.logprobs.content] == [
                t.model_dump() for t in want.logprobs.content
            ]
            assert got.logprobs.content
        assert folded.usage is not None and folded.usage.completion_tokens == whole.usage.completion_tokens


class _FailingTM(FakeTM):
    """``FakeTM`` whose generation fails before any output with ``message`` (a scheduler-side
    ``ValueError``, HTTP 400)."""

    def __init__(self, tokenizer: Any, message: str) -> None:
        super().__init__(tokenizer)
        self.message = message

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        raise ValueError(self.message)
        yield  # an async generator


@pytest.mark.parametrize(
    "message, param",
    [
        ("the scheduler refused the request (injected)", None),
        ("batch item 1 failed (injected)", None),
        ("constrained decoding failed (injected)", None),
        ("temperature must be at most 2 (injected)", "temperature"),
        ("stop_token_ids must be token ids (injected)", "stop_token_ids"),
    ],
)
def test_ray_64833_error_param_names_a_request_parameter_or_is_null(
    tok: Any, message: str, param: Any
) -> None:
    """ray-project/ray#64833 (an OpenAI-compatible server's error envelope must follow OpenAI's:
    ``param`` is the request parameter the error is about, else ``null``). Was a fault here for
    engine errors: ``param`` was the first word of the message whenever it was lower case, so
    ``"the scheduler ..."`` answered ``param: "the"``. Expected, streamed or not, on both routes:
    HTTP 400 with the engine's message, ``param`` the field the message names (``temperature``,
    ``stop_token_ids``) or ``null``; the ``openai`` client's ``BadRequestError`` carries it."""
    tc = app_client(_FailingTM(tok, message))
    for path, body in (
        (CHAT, {"model": "dsv4-test", "messages": HI}),
        (COMPLETIONS, {"model": "dsv4-test", "prompt": "Hi"}),
    ):
        for stream in (False, True):
            r = tc.post(path, json={**body, "stream": stream})
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["message"] == message and err["param"] == param, (path, stream, err)
    with pytest.raises(openai.BadRequestError) as got:
        oai_client(tc).chat.completions.create(model="dsv4-test", messages=HI)
    assert got.value.param == param


def test_sglang_8417_each_choice_finishes_once_in_an_empty_last_chunk(
    plain_fake_server: ServerHandle,
) -> None:
    """sgl-project/sglang#8417 (a streamed choice got two ``finish_reason`` chunks -- one on its
    last content chunk, one after -- and with ``n > 1`` only the last index got one). Expected for
    ``n=3``, cut by ``max_tokens`` and ended by a stop string: each index has exactly one chunk
    with a ``finish_reason``, it is that index's last chunk, its delta carries no text, and the
    reason is the non-streamed answer's."""
    for extra in ({"max_tokens": 4}, {"max_tokens": 40, "stop": ["fox"]}):
        body = {"model": FAKE_MODEL, "messages": HI, "n": 3, **extra}
        per: dict[int, list[dict[str, Any]]] = {}
        for c in sse(plain_fake_server, CHAT, body):
            for ch in c["choices"]:
                per.setdefault(ch["index"], []).append(ch)
        whole = _ok(plain_fake_server, CHAT, body)
        assert sorted(per) == [0, 1, 2]
        for idx, chs in per.items():
            finishing = [ch for ch in chs if ch["finish_reason"] is not None]
            assert len(finishing) == 1 and finishing[0] is chs[-1], (idx, chs)
            assert not chs[-1]["delta"].get("content"), chs[-1]
            assert chs[-1]["finish_reason"] == whole["choices"][idx]["finish_reason"], extra


def test_sglang_18335_a_thinking_stream_opens_with_the_role_and_no_empty_delta(
    plain_fake_server: ServerHandle,
) -> None:
    """sgl-project/sglang#18335 (while the model reasoned, the stream sent chunks whose delta was
    ``role: null, content: null`` and nothing else, and no opening role chunk: OpenAI-compatible
    clients broke). The fake model's ``[script]`` answer reasons, writes ``</think>``, then
    answers. Expected with thinking on: the first chunk is the role chunk (``role: assistant``,
    ``content: ""``), every later chunk but the finishing one carries reasoning or content, the
    reasoning joined and the content joined are the non-streamed message's."""
    body = {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": "[script] What is 6*7?"}],
        "max_tokens": 200,
        "chat_template_kwargs": {"thinking": True},
    }
    chunks = sse(plain_fake_server, CHAT, body)
    first = chunks[0]["choices"][0]["delta"]
    assert first["role"] == "assistant" and first["content"] == ""
    reasoning = content = ""
    for c in chunks[1:-1]:
        d = c["choices"][0]["delta"]
        assert d.get("reasoning_content") or d.get("content"), c
        reasoning += d.get("reasoning_content") or ""
        content += d.get("content") or ""
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    msg = _ok(plain_fake_server, CHAT, body)["choices"][0]["message"]
    assert reasoning == msg["reasoning_content"] and reasoning
    assert content == msg["content"] and content

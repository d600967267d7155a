"""A twenty-third set of public bug reports, replayed against ``POST /v1/chat/completions`` and
``POST /v1/completions``: chat ``logprobs`` (``true`` alone, with ``top_logprobs``, the streamed
records aligned with the text they belong to, every ``top_logprobs`` entry complete), the
usage-only chunk's ``choices: []``, a flush output that adds no token, a ``json_schema`` response
format without its schema on the completions route, ``finish_reason`` of a stream cut by
``max_tokens``, a stop list on the completions route, and ``top_logprobs`` without ``logprobs``.

Fixed here: the streamed chat answer sent each engine step's logprob records with that step's
chunk, so a token whose text the detokenizer held back (a possible stop string, an incomplete
character) had its record sent on a chunk without its text, one chunk early. A record now waits
for the chunk that sends its token's text, as the completions route's stream already did
(vllm-project/vllm#31135); the Responses stream, which reads the same records, had the same fault
in its ``output_text`` deltas and is fixed the same way. The other reports passed as-is; their
tests are regression guards.

The routes run in process over the fake tokenizer manager of ``openai_fake_tm`` (fast tier).
Oracles: the ``openai`` client (its response and chunk types, its streaming reader), the
DeepSeek-V4 tokenizer's own ids and decodes, the UTF-8 encoding of the text, OpenAI's documented
field rules, and a cold run of the same request without the option under test.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator
from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from transformers import PreTrainedTokenizerFast

openai = pytest.importorskip("openai")

from openai.types import Completion  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MODEL = "dsv4-test"
HI = [{"role": "user", "content": "Hi"}]
REPLY = "Hello there, general Kenobi."  # FakeTM's default reply (choice k > 0 appends " #k")
#: a reply whose characters take several byte-level tokens each (U+13000, U+13001)
SPLIT_CHARS = "a \U00013000\U00013001 b"


class _HeldTextTM(FakeTM):
    """A detokenizer that holds back each new token's text until the next output (as it does for
    a possible stop string), and an incomplete character's text until it completes: every output
    carries the new ids with the previous output's text (without a trailing U+FFFD), and a last
    output with the same ids sends the held text and the finish."""

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        outs = [o async for o in super().generate_request(obj, request)]
        text = ""
        for o in outs:
            held = dict(o, text=text, meta_info=dict(o["meta_info"], finish_reason=None))
            yield held
            text = o["text"].rstrip("\ufffd")
        yield outs[-1]


class _FlushTM(FakeTM):
    """A stream with a flush output before the finish: the previous output again (no new token,
    no new text), as the detokenizer sends when it releases nothing new."""

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        prev = None
        async for o in super().generate_request(obj, request):
            if prev is not None and o["meta_info"]["finish_reason"] is not None:
                yield dict(prev)
            yield o
            prev = o


def _post(tm: FakeTM, path: str, body: dict[str, Any]) -> Any:
    return _client(tm).post(path, json={"model": MODEL, **body})


def _events(tm: FakeTM, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The streamed JSON events of ``body`` (``stream: true`` added); the stream must end with
    ``[DONE]``."""
    r = _post(tm, path, {**body, "stream": True})
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events and events[-1] == "[DONE]", events[-3:]
    return events[:-1]


def _chat_chunks(tm: FakeTM, body: dict[str, Any]) -> list[ChatCompletionChunk]:
    return [ChatCompletionChunk.model_validate(e) for e in _events(tm, CHAT, body)]


def _chat(tm: FakeTM, body: dict[str, Any]) -> ChatCompletion:
    r = _post(tm, CHAT, body)
    assert r.status_code == 200, r.text
    return ChatCompletion.model_validate(r.json())


def _ids(tok: PreTrainedTokenizerFast, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


# --------------------------------------------------------------------------- chat logprobs


@pytest.mark.parametrize("reply", [REPLY, SPLIT_CHARS])
def test_vllm_31135_streamed_logprobs_ride_with_their_text(tok: PreTrainedTokenizerFast, reply: str) -> None:
    """vllm-project/vllm#31135: with text held back by the detokenizer, a streamed chunk's
    ``logprobs.content`` did not hold the tokens of its own delta (the records of a step went
    out with that step's chunk, before their text). Oracle: each chunk's tokens, their ``bytes``
    joined and UTF-8 decoded, are exactly its ``delta.content`` (``openai`` chunk types), and the
    stream's records are the non-streamed answer's (a cold run), one per generated id."""
    body = {"messages": HI, "logprobs": True, "top_logprobs": 1, "max_tokens": 64}
    cold = _chat(FakeTM(tok, reply=reply), body).choices[0].logprobs
    assert cold is not None and cold.content is not None
    assert len(cold.content) == len(_ids(tok, reply))

    chunks = _chat_chunks(_HeldTextTM(tok, reply=reply), body)
    streamed = []
    utf8 = codecs.getincrementaldecoder("utf-8")()
    for ch in chunks:
        for c in ch.choices:
            records = (c.logprobs.content or []) if c.logprobs is not None else []
            # a chunk's tokens spell its delta: their bytes, read on from the stream's earlier
            # tokens (an incomplete character's first bytes wait for the byte that completes it)
            spelled = utf8.decode(b"".join(bytes(e.bytes or []) for e in records))
            assert spelled == (c.delta.content or ""), (spelled, c.delta.content)
            streamed.extend(records)
    assert utf8.decode(b"", final=True) == ""
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in cold.content]
    assert "".join(c.delta.content or "" for ch in chunks for c in ch.choices) == reply


def test_vllm_31135_thinking_stream_keeps_every_record_once(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#31135 in thinking mode: with the text held back, the reasoning and
    answer chunks together still carry every generated token's record once, in order, and no
    record before its text. Oracle: the non-streamed answer's records (a cold run) and the
    tokenizer's ids."""
    reply = "Let me think.</think>The answer."
    body = {
        "messages": HI,
        "logprobs": True,
        "max_tokens": 64,
        "chat_template_kwargs": {"thinking": True},
    }
    cold = _chat(FakeTM(tok, reply=reply), body).choices[0].logprobs
    assert cold is not None and cold.content is not None and len(cold.content) == len(_ids(tok, reply))
    chunks = _chat_chunks(_HeldTextTM(tok, reply=reply), body)
    streamed = [e for ch in chunks for c in ch.choices if c.logprobs for e in c.logprobs.content or []]
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in cold.content]
    sent = ""
    for ch in chunks:
        for c in ch.choices:
            extra = c.delta.model_extra or {}
            sent += (extra.get("reasoning_content") or "") + (c.delta.content or "")
            for e in (c.logprobs.content or []) if c.logprobs else []:
                assert e.token == "</think>" or e.token in sent, (e.token, sent)


def test_vllm_31135_responses_stream_logprobs_ride_with_their_text(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#31135 on ``POST /v1/responses`` (the Responses stream reads the chat run's
    records): each ``response.output_text.delta`` carries the logprobs of the tokens its ``delta``
    spells, with the detokenizer holding text back. Oracle: the ``openai`` event types
    (``ResponseTextDeltaEvent``), each event's tokens joined are its delta, and the stream's
    records are those of the finished response's ``output_text`` (``response.completed``)."""
    from openai.types.responses import ResponseCompletedEvent, ResponseTextDeltaEvent

    body = {"model": MODEL, "input": "Hi", "stream": True, "include": ["message.output_text.logprobs"]}
    r = _client(_HeldTextTM(tok)).post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    events = [e for e in sse_data_events(r) if isinstance(e, dict)]
    deltas = [
        ResponseTextDeltaEvent.model_validate(e) for e in events if e["type"] == "response.output_text.delta"
    ]
    assert deltas
    for d in deltas:
        assert "".join(lp.token for lp in d.logprobs) == d.delta, d
    (done,) = [ResponseCompletedEvent.model_validate(e) for e in events if e["type"] == "response.completed"]
    (part,) = [c for item in done.response.output if item.type == "message" for c in item.content]
    assert part.type == "output_text" and part.text == REPLY
    assert [lp.token for d in deltas for lp in d.logprobs] == [lp.token for lp in part.logprobs or []]
    assert len(part.logprobs or []) == len(_ids(tok, REPLY))


@pytest.mark.parametrize("stream", [False, True])
def test_sglang_4440_logprobs_true_alone(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """sgl-project/sglang#4440 (``logprobs: true`` without ``top_logprobs`` was a 500, a
    ``KeyError``) and huggingface/text-generation-inference#1682 (no alternatives asked: the
    records came back empty): each generated token has its record, with ``top_logprobs: []``.
    Oracle: the ``openai`` types and the tokenizer's ids of the reply."""
    body = {"messages": HI, "logprobs": True, "max_tokens": 16}
    if stream:
        chunks = _chat_chunks(FakeTM(tok), body)
        records = [e for ch in chunks for c in ch.choices if c.logprobs for e in c.logprobs.content or []]
    else:
        lp = _chat(FakeTM(tok), body).choices[0].logprobs
        assert lp is not None
        records = lp.content or []
    want = [tok.decode([t]) for t in _ids(tok, REPLY)]
    assert [e.token for e in records] == want
    assert all(e.top_logprobs == [] for e in records)
    assert all(e.logprob <= 0 for e in records)


def test_sglang_839_one_token_with_two_alternatives(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#839: ``logprobs: true, top_logprobs: 2, max_tokens: 1`` answered
    ``logprobs: null``. Oracle: OpenAI's documented shape (one record per generated token, up to
    ``top_logprobs`` alternatives, sorted by logprob) and the tokenizer's first reply token."""
    resp = _chat(FakeTM(tok), {"messages": HI, "logprobs": True, "top_logprobs": 2, "max_tokens": 1})
    (choice,) = resp.choices
    assert choice.finish_reason == "length"
    assert choice.logprobs is not None and choice.logprobs.content is not None
    (rec,) = choice.logprobs.content
    assert rec.token == tok.decode(_ids(tok, REPLY)[:1]) == choice.message.content
    assert len(rec.top_logprobs) == 2
    assert [t.logprob for t in rec.top_logprobs] == sorted(
        (t.logprob for t in rec.top_logprobs), reverse=True
    )
    assert rec.top_logprobs[0].token == rec.token and rec.top_logprobs[0].logprob == rec.logprob


def test_openai_openapi_146_every_top_logprob_has_token_logprob_and_bytes(
    tok: PreTrainedTokenizerFast,
) -> None:
    """openai/openai-openapi#146: ``token``, ``logprob`` and ``bytes`` of a ``top_logprobs``
    entry are required, not optional. Oracle: the raw JSON keys of every entry, and the records'
    ``bytes`` joined are the UTF-8 of the content, for a reply whose characters each span several
    tokens (a token's ``bytes`` are its own bytes, not those of U+FFFD)."""
    r = _post(FakeTM(tok, reply=SPLIT_CHARS), CHAT, {"messages": HI, "logprobs": True, "top_logprobs": 2})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    for rec in choice["logprobs"]["content"]:
        assert {"token", "logprob", "bytes", "top_logprobs"} <= rec.keys()
        for alt in rec["top_logprobs"]:
            assert {"token", "logprob", "bytes"} <= alt.keys(), alt
            assert isinstance(alt["bytes"], list)
    joined = b"".join(bytes(rec["bytes"]) for rec in choice["logprobs"]["content"])
    assert joined == choice["message"]["content"].encode("utf-8") == SPLIT_CHARS.encode("utf-8")


@pytest.mark.parametrize("extra", [{}, {"logprobs": False}])
def test_openrag_574_top_logprobs_needs_logprobs_true(tok: PreTrainedTokenizerFast, extra: dict) -> None:
    """linagora/openrag#574: OpenAI's reference makes ``top_logprobs`` valid only with
    ``logprobs: true``; sent without it, the request is a 400 naming ``top_logprobs`` in OpenAI's
    error shape (``openai.BadRequestError``), and nothing reaches the engine."""
    tm = FakeTM(tok)
    with pytest.raises(openai.BadRequestError) as err:
        _oai(_client(tm)).chat.completions.create(model=MODEL, messages=HI, top_logprobs=2, **extra)
    assert err.value.status_code == 400
    assert (err.value.body or {}).get("param") == "top_logprobs"
    assert tm.received == []


# --------------------------------------------------------------------------- stream shape


@pytest.mark.parametrize("path", [CHAT, COMP])
def test_atom_1711_usage_chunk_has_empty_choices(tok: PreTrainedTokenizerFast, path: str) -> None:
    """ROCm/ATOM#1711: the usage-only chunk of ``stream_options.include_usage`` left out
    ``choices``, which OpenAI's chunk types require. Oracle: the raw JSON (``choices`` present and
    ``[]``), the ``openai`` chunk / completion types, and the usage of the non-streamed answer (a
    cold run)."""
    base = {"messages": HI} if path == CHAT else {"prompt": "Hi"}
    body = {**base, "max_tokens": 5}
    events = _events(FakeTM(tok), path, {**body, "stream_options": {"include_usage": True}})
    last = events[-1]
    assert "choices" in last and last["choices"] == [] and last["usage"] is not None
    assert all(e.get("usage") is None for e in events[:-1])
    # the openai client types a legacy completions chunk as a Completion (choices need a finish)
    parsed = (
        [ChatCompletionChunk.model_validate(e) for e in events]
        if path == CHAT
        else [Completion.model_validate(last)]
    )
    cold = _post(FakeTM(tok), path, body)
    assert cold.status_code == 200, cold.text
    assert parsed[-1].usage is not None
    assert (
        parsed[-1].usage.model_dump()
        == type(parsed[-1].usage).model_validate(cold.json()["usage"]).model_dump()
    )


@pytest.mark.parametrize("path", [CHAT, COMP])
def test_sglang_19611_flush_output_sends_no_empty_logprobs(tok: PreTrainedTokenizerFast, path: str) -> None:
    """sgl-project/sglang#19611: an output that adds no token (the detokenizer's flush) was sent
    as a chunk whose ``logprobs`` had empty lists, and a client reading ``tokens[0]`` failed.
    Oracle: no chunk carries an empty logprobs object, and the streamed tokens are the cold
    non-streamed run's (``openai`` types)."""
    chat = path == CHAT
    body: dict[str, Any] = (
        {"messages": HI, "logprobs": True, "max_tokens": 4}
        if chat
        else {"prompt": "Hi", "logprobs": 1, "max_tokens": 4}
    )
    events = _events(_FlushTM(tok), path, body)
    cold = _post(FakeTM(tok), path, body)
    assert cold.status_code == 200, cold.text
    streamed: list[str] = []
    for e in events:
        for c in e["choices"]:
            lp = c.get("logprobs")
            if lp is None:
                continue
            toks = [r["token"] for r in lp["content"]] if chat else lp["tokens"]
            assert toks, e
            streamed += toks
    if chat:
        want = [r.token for r in ChatCompletion.model_validate(cold.json()).choices[0].logprobs.content]
    else:
        want = Completion.model_validate(cold.json()).choices[0].logprobs.tokens
    assert streamed == want == [tok.decode([t]) for t in _ids(tok, REPLY)[:4]]


@pytest.mark.parametrize("path", [CHAT, COMP])
def test_inference_sim_29_cut_by_max_tokens_finishes_with_length(
    tok: PreTrainedTokenizerFast, path: str
) -> None:
    """llm-d/llm-d-inference-sim#29: an answer cut by ``max_tokens`` said ``finish_reason:
    "stop"``, and the stream's last chunk lost the last part of the text. Oracle: the tokenizer's
    decode of the reply's first ``max_tokens`` ids, streamed and not, with ``"length"``."""
    limit = 3
    want = tok.decode(_ids(tok, REPLY)[:limit])
    base = {"messages": HI} if path == CHAT else {"prompt": "Hi"}
    r = _post(FakeTM(tok), path, {**base, "max_tokens": limit})
    assert r.status_code == 200, r.text
    if path == CHAT:
        (choice,) = ChatCompletion.model_validate(r.json()).choices
        assert (choice.message.content, choice.finish_reason) == (want, "length")
    else:
        (cchoice,) = Completion.model_validate(r.json()).choices
        assert (cchoice.text, cchoice.finish_reason) == (want, "length")
    events = _events(FakeTM(tok), path, {**base, "max_tokens": limit})
    text = "".join(
        (c.get("delta") or {}).get("content") or "" if path == CHAT else c.get("text") or ""
        for e in events
        for c in e["choices"]
    )
    finishes = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    assert (text, finishes) == (want, ["length"])


def test_openai_dotnet_358_each_streamed_choice_finishes_once(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-dotnet#358: every streamed update's ``FinishReason`` was null. With ``n: 2``
    and ``max_tokens``, the ``openai`` client's own stream reader sees each choice finish exactly
    once, with ``"length"``, on that choice's last chunk, and the choices' texts are the
    non-streamed answer's (a cold run)."""
    client = _oai(_client(FakeTM(tok)))
    cold = client.chat.completions.create(model=MODEL, messages=HI, n=2, max_tokens=4)
    seen: dict[int, list[Any]] = {}
    texts: dict[int, str] = {}
    with client.chat.completions.create(model=MODEL, messages=HI, n=2, max_tokens=4, stream=True) as stream:
        for ch in stream:
            for c in ch.choices:
                seen.setdefault(c.index, []).append(c.finish_reason)
                texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
    assert sorted(seen) == [0, 1]
    for reasons in seen.values():
        assert [r for r in reasons if r] == ["length"] and reasons[-1] == "length", reasons
    assert texts == {c.index: c.message.content for c in cold.choices}
    assert all(c.finish_reason == "length" for c in cold.choices)


class _RefusingTM(FakeTM):
    """Refuses the request before any output, as the tokenizer manager does for a prompt over the
    context length."""

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        self.received.append(obj)
        raise ValueError("The input (9000 tokens) is longer than the model's context length (4096 tokens).")
        yield  # an async generator


def test_atom_1710_role_chunk_waits_for_the_first_output(tok: PreTrainedTokenizerFast) -> None:
    """ROCm/ATOM#1710: the streamed chat answer sent its ``role`` chunk as soon as the request was
    accepted, before the engine produced anything, so a request the engine then refused came back
    as a 200 stream. Oracle: the ``openai`` client's streaming call raises
    ``openai.BadRequestError`` (an HTTP 400 in OpenAI's error shape, no stream opened)."""
    tm = _RefusingTM(tok)
    with pytest.raises(openai.BadRequestError) as err:
        _oai(_client(tm)).chat.completions.create(model=MODEL, messages=HI, stream=True)
    assert err.value.status_code == 400
    assert "context length" in str((err.value.body or {}).get("message"))
    assert len(tm.received) == 1


def test_ollama_7626_role_only_on_each_choices_first_chunk(tok: PreTrainedTokenizerFast) -> None:
    """ollama/ollama#7626 (every delta repeated ``role: "assistant"``) and ModelTC/LightLLM#1262
    (the stream's shape): per choice, ``role`` is on its first chunk only, a role chunk with
    ``content: ""``, then reasoning and content deltas without it, a finish chunk with an empty
    delta, the usage chunk, and ``[DONE]`` last. Oracle: OpenAI's documented stream (raw JSON)
    and the ``openai`` client's ``ChatCompletionStreamState``, which folds it into one assistant
    message per choice."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    reply = "Let me think.</think>The answer."
    body = {
        "messages": HI,
        "n": 2,
        "chat_template_kwargs": {"thinking": True},
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r = _post(FakeTM(tok, reply=reply), CHAT, body)
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    per: dict[int, list[dict[str, Any]]] = {}
    for e in events[:-2]:
        for c in e["choices"]:
            per.setdefault(c["index"], []).append(c)
    assert sorted(per) == [0, 1]
    for choices in per.values():
        assert choices[0]["delta"].get("role") == "assistant" and choices[0]["delta"].get("content") == ""
        assert all(not c["delta"].get("role") for c in choices[1:])
        assert choices[-1]["finish_reason"] == "stop"
        assert not any(choices[-1]["delta"].get(k) for k in ("content", "reasoning_content", "tool_calls"))
    assert events[-2]["choices"] == [] and events[-2]["usage"] is not None
    state = ChatCompletionStreamState()
    for e in events[:-1]:
        state.handle_chunk(ChatCompletionChunk.model_validate(e))
    final = state.get_final_completion()
    assert [c.message.role for c in final.choices] == ["assistant", "assistant"]
    assert [c.message.content for c in final.choices] == ["The answer.", "The answer. #1"]


# --------------------------------------------------------------------------- completions fields


def test_ollama_5545_completions_accepts_a_stop_list(tok: PreTrainedTokenizerFast) -> None:
    """ollama/ollama#5545: ``client.completions.create(stop=["User:", "Assistant:"])`` was a 400
    ("invalid type for 'stop' field"). OpenAI's reference takes a string or a list of up to 4
    strings; the ``openai`` client's call succeeds and the engine gets the list as sent, streamed
    or not."""
    stop = ["User:", "Assistant:"]
    prompt = "User: Hello,\nAssistant: Hi, how can I help you?\nUser: How's it going?\nAssistant:"
    tm = FakeTM(tok)
    client = _oai(_client(tm))
    resp = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, stop=stop)
    assert resp.choices[0].text == tok.decode(_ids(tok, REPLY)[:8])
    assert tm.received[-1].sampling_params["stop"] == stop
    text = "".join(
        c.text
        for ch in client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, stop=stop, stream=True)
        for c in ch.choices
    )
    assert text == resp.choices[0].text
    assert tm.received[-1].sampling_params["stop"] == stop


def test_sglang_28090_completions_json_schema_without_schema_is_a_400(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#28090: ``/v1/completions`` with ``response_format: {"type":
    "json_schema"}`` and no ``json_schema`` was a 500 (``AttributeError``) where the chat route
    answered a 400. Oracle: the chat route's own answer to the same field (same status, ``param``
    and message), OpenAI's error shape (``openai.BadRequestError``), nothing sent to the engine,
    and the next request on the same app served."""
    rf = {"type": "json_schema"}
    tm = FakeTM(tok)
    app = _client(tm)
    comp = app.post(COMP, json={"model": MODEL, "prompt": "Hi", "response_format": rf})
    chat = app.post(CHAT, json={"model": MODEL, "messages": HI, "response_format": rf})
    assert comp.status_code == chat.status_code == 400, (comp.text, chat.text)
    assert comp.json()["error"]["param"] == chat.json()["error"]["param"] == "response_format"
    assert comp.json()["error"]["message"] == chat.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError):
        _oai(app).completions.create(model=MODEL, prompt="Hi", extra_body={"response_format": rf})
    assert tm.received == []
    ok = _oai(app).completions.create(model=MODEL, prompt="Hi", max_tokens=2)
    assert ok.choices[0].text == tok.decode(_ids(tok, REPLY)[:2])

"""A twenty-fourth set of public bug reports on server-sent-event streams: the role chunk of a
chat stream (before tool calls, before reasoning, never an empty role), choice indexes and ids
that stay put, the usage chunk (present once and last when asked for, absent everywhere when
not, its option a boolean), ``n > 1`` streams folded per choice, streamed chat ``logprobs``
accumulated by a client, tool-call chunks with one entry per index, outputs of several tokens
sent as their new text only, held-back stop-string prefixes at the end of the reasoning, every
chunk's ``delta`` object, in-stream errors as the ``openai`` client reads them, and multi-byte
characters split across tokens in the detokenizer's incremental text. Each passed as it was, and
is kept as a regression test of behaviour clients rely on.

Fixtures: the OpenAI and Anthropic routers in-process over fake tokenizer managers
(``fake_prompt_tm.PromptTM``, ``openai_fake_tm.FakeTM``, ``chat_tools_testutil.ChunkTM``: several
tokens an output, stop strings held back), and the detokenizer
(``DetokenizerManager`` on the runtime's ``FastTokenizer``) fed scheduler messages by hand.
Oracles: the ``openai`` client's chunk and event types and its chat stream accumulator
(``ChatCompletionStreamState`` through ``chat.completions.stream``), the same request not
streamed, OpenAI's API reference for ``stream_options`` (openai/openai-openapi#240), and
``transformers``' decode of the whole id sequence.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from anthropic_testutil import make_clients
from chat_tools_testutil import WEATHER, ChunkTM, client_for
from detokenizer_testutil import stream_detok
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from fake_prompt_tm import MODEL, PromptTM
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseErrorEvent
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events
from responses_testutil import sse
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "Tell me about Paris."}]
REPLY = "Paris is the capital of France."
THOUGHT = "The user asks about Paris, so I recall what I know about it."
CALL = dsml_block(
    dsml_invoke("get_weather", dsml_param("city", True, "Paris"), dsml_param("days", False, "3"))
)
FAKE_MODEL = "dsv4-test"


def _chunks(r: Any) -> list[dict[str, Any]]:
    """The JSON chunks of a chat / completions SSE response, checked to end with ``[DONE]``."""
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events and events[-1] == "[DONE]"
    return events[:-1]


# --------------------------------------------------------------------------- the role chunk


def test_tensorzero_1265_role_comes_before_the_first_tool_call_delta(tok: PreTrainedTokenizerFast) -> None:
    """tensorzero/tensorzero#1265 (an OpenAI-compatible stream whose answer was a tool call sent
    no chunk with ``delta.role``; OpenAI's first chunk carries ``role: "assistant"`` even when the
    first delta is a tool call) and foundation-model-stack/fms-guardrails-orchestrator#429 (the
    role missing from a chat stream). Expected for a reply that is a DSML tool call: every chunk
    validates as the ``openai`` client's ``ChatCompletionChunk``; the first chunk of the choice has
    ``role: "assistant"`` and comes before any ``tool_calls`` delta; the ``openai`` client's stream
    accumulator gives the non-streamed message (role, no content, the same call and arguments)."""
    _, oa, tc = make_clients(PromptTM(tok, reply=CALL))
    body = {"model": MODEL, "messages": USER, "tools": [WEATHER], "max_tokens": 200}
    chunks = _chunks(tc.post("/v1/chat/completions", json={**body, "stream": True}))
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    first_call = next(i for i, d in enumerate(deltas) if d.get("tool_calls"))
    roles = [i for i, d in enumerate(deltas) if d.get("role")]
    assert roles and roles[0] == 0 < first_call and deltas[0]["role"] == "assistant"
    whole = oa.chat.completions.create(**body).choices[0]
    with oa.chat.completions.stream(**body) as s:
        final = s.get_final_completion().choices[0]
    assert final.message.role == whole.message.role == "assistant"
    assert not final.message.content and not whole.message.content
    got = [(t.function.name, json.loads(t.function.arguments)) for t in final.message.tool_calls or []]
    want = [(t.function.name, json.loads(t.function.arguments)) for t in whole.message.tool_calls or []]
    assert got == want == [("get_weather", {"city": "Paris", "days": 3})]
    assert final.finish_reason == whole.finish_reason == "tool_calls"


@pytest.mark.parametrize("include_usage", [False, True])
def test_lemonade_350_role_is_assistant_before_the_reasoning_and_never_empty(
    tok: PreTrainedTokenizerFast, include_usage: bool
) -> None:
    """lemonade-sdk/lemonade#350 (a thinking model's stream put ``role: null`` on its reasoning
    chunks and never sent ``"assistant"``), MiniMax-AI/MiniMax-M2.5#2 (``"role": ""`` on delta
    chunks failed the Vercel AI SDK's validation) and BerriAI/litellm#24354 (with
    ``include_usage`` no chunk kept ``role: "assistant"``). Expected, with and without
    ``stream_options.include_usage``, for a reply with reasoning: the first chunk has ``role:
    "assistant"`` before any ``reasoning_content`` delta; every other chunk's role is ``null`` or
    absent, never another value (every chunk validates as the ``openai`` client's
    ``ChatCompletionChunk``, whose ``role`` admits no ``""``); the reasoning and the content joined
    are the non-streamed message's."""
    _, _, tc = make_clients(PromptTM(tok, reply=f"{THOUGHT}</think>{REPLY}"))
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": USER,
        "max_tokens": 200,
        "chat_template_kwargs": {"thinking": True},
    }
    so = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = _chunks(tc.post("/v1/chat/completions", json={**body, **so, "stream": True}))
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0]["role"] == "assistant"
    assert all(d.get("role") is None for d in deltas[1:])
    first_reasoning = next(i for i, d in enumerate(deltas) if d.get("reasoning_content"))
    assert first_reasoning > 0
    whole = tc.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == whole["reasoning_content"] == THOUGHT
    assert "".join(d.get("content") or "" for d in deltas) == whole["content"] == REPLY


# --------------------------------------------------------------------------- indexes and ids


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_foundry_local_263_one_choice_keeps_index_zero_and_one_id(
    tok: PreTrainedTokenizerFast, path: str
) -> None:
    """microsoft/foundry-local#263 (each chunk of an ``n=1`` stream carried a new ``choices[].index``,
    0, 1, 2, ..., so clients folding by index built one choice per chunk). Expected on chat and
    completions: every chunk's choices have ``index`` 0, and every chunk shares the first chunk's
    ``id``, ``created`` and ``model``; folded by index, the stream gives one choice whose text is
    the non-streamed answer's."""
    _, _, tc = make_clients(PromptTM(tok, reply=REPLY))
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 60}
    body |= {"messages": USER} if path.endswith("chat/completions") else {"prompt": [5, 6, 7]}
    chunks = _chunks(tc.post(path, json={**body, "stream": True}))
    assert len(chunks) > 3
    assert {c["choices"][0]["index"] for c in chunks} == {0}
    assert {(c["id"], c["created"], c["model"]) for c in chunks} == {
        (chunks[0]["id"], chunks[0]["created"], MODEL)
    }
    whole = tc.post(path, json=body).json()["choices"]
    if path.endswith("chat/completions"):
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        assert [whole[0]["message"]["content"]] == [text] == [REPLY]
    else:
        assert [whole[0]["text"]] == ["".join(c["choices"][0]["text"] for c in chunks)] == [REPLY]


def test_litellm_38185_n_choices_stream_folds_into_the_unstreamed_choices(
    tok: PreTrainedTokenizerFast,
) -> None:
    """BerriAI/litellm#38185 (a streamed ``n=2`` answer was rebuilt as one message, the choices'
    texts concatenated) and BerriAI/litellm#3276 (``index`` of the chunks of ``n >= 2`` streams).
    Expected for ``n=3`` choices of different lengths: the ``openai`` client's stream accumulator
    gives three choices, indexes 0, 1, 2, each with the non-streamed choice's role, content and
    finish reason; every choice's role chunk comes before any of its content."""
    oa = oai_client(app_client(FakeTM(tok, reply=REPLY)))
    body: dict[str, Any] = {"model": FAKE_MODEL, "messages": USER, "n": 3}
    whole = oa.chat.completions.create(**body).choices
    with oa.chat.completions.stream(**body) as s:
        chunks = [e.chunk for e in s if e.type == "chunk"]
        final = s.get_final_completion().choices
    assert [c.index for c in final] == [c.index for c in whole] == [0, 1, 2]
    for got, want in zip(final, whole, strict=True):
        assert (got.message.role, got.message.content, got.finish_reason) == (
            want.message.role,
            want.message.content,
            want.finish_reason,
        )
    assert len({c.message.content for c in final}) == 3
    for i in range(3):
        mine = [c.choices[0].delta for c in chunks if c.choices and c.choices[0].index == i]
        assert mine[0].role == "assistant" and not mine[0].content


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("per_chunk", [1, 3, 7])
def test_trtllm_3280_multi_token_chunks_send_only_their_new_text(
    tok: PreTrainedTokenizerFast, path: str, per_chunk: int
) -> None:
    """NVIDIA/TensorRT-LLM#3280 (when one streamed output held several tokens, some chunks carried
    the whole answer so far instead of the delta). Expected with outputs of 1, 3 and 7 tokens each
    (the engine's cumulative text, as with a stream interval above one): every chunk's text is
    only what its output added, so the texts joined are the non-streamed answer exactly, and
    each text is the difference of consecutive cumulative outputs."""
    tm = ChunkTM(tok, REPLY, per_chunk=per_chunk)
    _, tc = client_for(tm)
    chat = path.endswith("chat/completions")
    body: dict[str, Any] = {"model": "m", "max_tokens": 60}
    body |= {"messages": USER} if chat else {"prompt": [5, 6, 7]}
    chunks = _chunks(tc.post(path, json={**body, "stream": True}))
    texts = [
        (c["choices"][0]["delta"].get("content") if chat else c["choices"][0]["text"]) or "" for c in chunks
    ]
    texts = [t for t in texts if t]
    ids = tok.encode(REPLY, add_special_tokens=False)
    ends = [*range(per_chunk, len(ids), per_chunk), len(ids)]
    cumulative = [tok.decode(ids[:k]) for k in ends]
    want = [b[len(a) :] for a, b in zip(["", *cumulative], cumulative, strict=False)]
    assert texts == [w for w in want if w]
    whole = tc.post(path, json=body).json()["choices"][0]
    assert "".join(texts) == (whole["message"]["content"] if chat else whole["text"]) == REPLY


@pytest.mark.parametrize("per_chunk", [1, 2, 5])
@pytest.mark.parametrize("stop", [["</s>"], ["<｜end"], ["</thinking>"]])
def test_llama_box_47_held_back_stop_prefixes_keep_the_reasoning_split(
    tok: PreTrainedTokenizerFast, per_chunk: int, stop: list[str]
) -> None:
    """gpustack/llama-box#47 (with ``stop`` set, a thinking model's stream put ``<`` and
    ``think>`` in ``content``: the held-back prefix of a stop string cut the reasoning tag in two
    and the split no longer recognized it). Expected with stop strings whose prefixes the engine
    holds back at ``</think>`` (``</s>``, ``</thinking>``: never matched, as the engine matches stop
    strings only after the reasoning), one to five tokens an output: the streamed ``reasoning_content`` and ``content`` joined are the non-streamed
    message's, no delta holds any part of the ``</think>`` tag, and the finish reasons agree."""
    reply = f"{THOUGHT}</think>{REPLY}"
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    body: dict[str, Any] = {
        "model": "m",
        "messages": USER,
        "max_tokens": 300,
        "stop": stop,
        "chat_template_kwargs": {"thinking": True},
    }
    chunks = _chunks(tc.post("/v1/chat/completions", json={**body, "stream": True}))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    whole = tc.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert (reasoning, content) == (whole["message"]["reasoning_content"], whole["message"]["content"])
    assert (reasoning, content) == (THOUGHT, REPLY)
    for d in deltas:
        for text in (d.get("reasoning_content") or "", d.get("content") or ""):
            assert "think" not in text and "</" not in text
    finishes = [
        c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]
    ]
    assert finishes == [whole["finish_reason"]] == ["stop"]


def test_open_webui_8973_every_chunk_has_a_delta_object(tok: PreTrainedTokenizerFast) -> None:
    """open-webui/open-webui#8973 (the last chunk of a chat stream had no ``delta`` object; OpenAI's
    chunk reference makes it required) and BerriAI/litellm#12417 (the last chunk's delta must add
    no text). Expected for text, ``n=2`` and tool-call answers: every chunk that has choices gives
    each one a ``delta`` object; each finish chunk's delta has no content, reasoning or tool
    calls."""
    cases: list[tuple[Any, dict[str, Any]]] = [
        (make_clients(PromptTM(tok, reply=REPLY))[2], {"model": MODEL}),
        (app_client(FakeTM(tok, reply=REPLY)), {"model": FAKE_MODEL, "n": 2}),
        (make_clients(PromptTM(tok, reply=CALL))[2], {"model": MODEL, "tools": [WEATHER]}),
    ]
    for tc, extra in cases:
        body = {"messages": USER, "max_tokens": 200, "stream": True, **extra}
        chunks = _chunks(tc.post("/v1/chat/completions", json=body))
        finishes = 0
        for c in chunks:
            for ch in c["choices"]:
                assert isinstance(ch.get("delta"), dict)
                if ch["finish_reason"] is not None:
                    finishes += 1
                    d = ch["delta"]
                    assert not d.get("content") and not d.get("reasoning_content") and not d.get("tool_calls")
        assert finishes == extra.get("n", 1)


# --------------------------------------------------------------------------- the usage chunk


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_rtp_llm_1040_staggered_choices_get_one_usage_chunk_at_the_end(
    tok: PreTrainedTokenizerFast, path: str
) -> None:
    """alibaba/rtp-llm#1040 (with ``n >= 2`` choices finishing at different steps the trailing usage
    could be sent once per finish) and run-llama/llama_index#22337 (a usage-only final chunk read
    as repeating the last text: it must carry no choice). Expected with ``include_usage`` and ``n=3`` choices of different
    lengths, on chat and completions: exactly one chunk has a non-null ``usage``; it has
    ``choices: []``, comes after every choice's finish chunk and right before ``[DONE]``; its
    counts are the non-streamed answer's (prompt counted once, completion tokens summed over the
    choices); every other chunk has ``usage: null``."""
    tc = app_client(FakeTM(tok, reply=REPLY))
    body: dict[str, Any] = {"model": FAKE_MODEL, "n": 3}
    body |= {"messages": USER} if path.endswith("chat/completions") else {"prompt": "About Paris:"}
    chunks = _chunks(tc.post(path, json={**body, "stream": True, "stream_options": {"include_usage": True}}))
    with_usage = [i for i, c in enumerate(chunks) if c.get("usage") is not None]
    assert with_usage == [len(chunks) - 1]
    assert chunks[-1]["choices"] == []
    finishes = [c["choices"][0]["index"] for c in chunks[:-1] if c["choices"][0]["finish_reason"] is not None]
    assert sorted(finishes) == [0, 1, 2]
    whole = tc.post(path, json=body).json()["usage"]
    usage = chunks[-1]["usage"]
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert [usage[k] for k in keys] == [whole[k] for k in keys]
    per_choice = [
        len(tok.encode(REPLY + (f" #{k}" if k else ""), add_special_tokens=False)) for k in range(3)
    ]
    assert usage["completion_tokens"] == sum(per_choice)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize(
    "options",
    [None, {"include_usage": False}, {"continuous_usage_stats": True}, {"include_usage": None}],
)
def test_rapid_mlx_792_no_usage_anywhere_unless_asked(
    tok: PreTrainedTokenizerFast, path: str, options: dict[str, Any] | None
) -> None:
    """raullenchai/Rapid-MLX#792 and nguyenphutrong/quotio#460 (usage sent on the finish chunk or
    as a trailing chunk when ``stream_options.include_usage`` was false or absent; stream parsers
    then counted it twice). OpenAI's reference: the usage chunk only when ``include_usage`` is
    true; vLLM sends continuous usage only together with it. Expected on chat and completions with
    no ``stream_options``, ``include_usage: false`` / ``null``, or ``continuous_usage_stats``
    alone: ``usage`` is null on every chunk, and no chunk has empty ``choices``."""
    tc = app_client(FakeTM(tok, reply=REPLY))
    body: dict[str, Any] = {"model": FAKE_MODEL, "stream": True}
    body |= {"messages": USER} if path.endswith("chat/completions") else {"prompt": "About Paris:"}
    if options is not None:
        body["stream_options"] = options
    chunks = _chunks(tc.post(path, json=body))
    assert all(c.get("usage") is None for c in chunks)
    assert all(c["choices"] for c in chunks)


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"include_usage": "yes"}, "stream_options.include_usage"),
        ({"include_usage": 2}, "stream_options.include_usage"),
        ({"continuous_usage_stats": "always"}, "stream_options.continuous_usage_stats"),
        ("include_usage", "stream_options"),
    ],
)
def test_switchyard_797_a_non_boolean_usage_option_is_a_400(
    tok: PreTrainedTokenizerFast, options: Any, param: str
) -> None:
    """NVIDIA-NeMo/Switchyard#797 (a non-boolean ``include_usage`` was read as an opt-in).
    OpenAI's schema (openai/openai-openapi#240) types ``stream_options`` as an object and
    ``include_usage`` as a boolean. Expected: a 400 before any stream starts, in OpenAI's error
    shape (the ``openai`` client raises ``BadRequestError``) naming the field, and the engine
    receives no request."""
    tm = FakeTM(tok, reply=REPLY)
    tc = app_client(tm)
    body = {"model": FAKE_MODEL, "messages": USER, "stream": True, "stream_options": options}
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    with pytest.raises(openai.BadRequestError):
        oai_client(tc).chat.completions.create(**body)
    assert tm.received == []


# --------------------------------------------------------------------------- logprobs


def test_autogen_7967_streamed_logprobs_accumulate_to_the_unstreamed_ones(
    tok: PreTrainedTokenizerFast,
) -> None:
    """microsoft/autogen#7967 and Menci/Floway#481 (a client kept only the last chunk's
    ``logprobs``, or skipped them on content chunks; the server must put each token's record on
    the chunk that sends its text, once). Expected for ``logprobs`` with ``top_logprobs=1``: the
    ``openai`` client's stream accumulator (which extends ``logprobs.content`` chunk by chunk)
    gives the non-streamed choice's ``logprobs.content`` exactly; every record is on a chunk whose
    ``delta.content`` is a string, and the records' tokens joined are the content."""
    oa = oai_client(app_client(FakeTM(tok, reply=REPLY)))
    body: dict[str, Any] = {"model": FAKE_MODEL, "messages": USER, "logprobs": True, "top_logprobs": 1}
    whole = oa.chat.completions.create(**body).choices[0]
    with oa.chat.completions.stream(**body) as s:
        chunks = [e.chunk for e in s if e.type == "chunk"]
        final = s.get_final_completion().choices[0]
    assert final.logprobs is not None and whole.logprobs is not None
    got = [r.model_dump() for r in final.logprobs.content or []]
    assert got == [r.model_dump() for r in whole.logprobs.content or []]
    assert len(got) == len(tok.encode(REPLY, add_special_tokens=False))
    for c in chunks:
        if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content:
            assert isinstance(c.choices[0].delta.content, str)
    assert "".join(r["token"] for r in got) == final.message.content == REPLY


# --------------------------------------------------------------------------- tool-call chunks


def test_dynamo_15054_a_chunk_has_one_entry_per_choice_and_call_index(tok: PreTrainedTokenizerFast) -> None:
    """ai-dynamo/dynamo#15054 (a streamed tool call came out with two ``choices`` entries of the same
    index in one chunk, or two ``tool_calls`` entries of the same call index, which clients keeping
    one entry per index corrupted). Expected for a reply of two DSML calls, one token per output
    and all at once: no chunk repeats a choice index or a call index; the calls' ids and names
    come once each, on their first delta; folded by call index the arguments are the non-streamed
    calls'."""
    two = dsml_block(
        dsml_invoke("get_weather", dsml_param("city", True, "Paris"), dsml_param("days", False, "3")),
        dsml_invoke("get_weather", dsml_param("city", True, "Lyon")),
    )
    _, oa, tc = make_clients(PromptTM(tok, reply=two))
    body = {"model": MODEL, "messages": USER, "tools": [WEATHER], "max_tokens": 300}
    chunks = _chunks(tc.post("/v1/chat/completions", json={**body, "stream": True}))
    folded: dict[int, dict[str, Any]] = {}
    for c in chunks:
        indexes = [ch["index"] for ch in c["choices"]]
        assert len(indexes) == len(set(indexes))
        for ch in c["choices"]:
            calls = ch["delta"].get("tool_calls") or []
            call_indexes = [t["index"] for t in calls]
            assert len(call_indexes) == len(set(call_indexes))
            for t in calls:
                fn = t.get("function") or {}
                if t["index"] not in folded:
                    assert t.get("id") and fn.get("name") == "get_weather"
                    folded[t["index"]] = {"id": t["id"], "arguments": ""}
                else:
                    assert not t.get("id") and not fn.get("name")
                folded[t["index"]]["arguments"] += fn.get("arguments") or ""
    whole = oa.chat.completions.create(**body).choices[0].message.tool_calls or []
    assert sorted(folded) == [0, 1]
    assert [json.loads(folded[i]["arguments"]) for i in (0, 1)] == [
        json.loads(t.function.arguments) for t in whole
    ]
    assert [json.loads(folded[i]["arguments"]) for i in (0, 1)] == [
        {"city": "Paris", "days": 3},
        {"city": "Lyon"},
    ]


# --------------------------------------------------------------------------- errors mid-stream


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_llamacpp_16109_a_mid_stream_failure_is_a_data_line_the_client_raises(
    tok: PreTrainedTokenizerFast, path: str
) -> None:
    """ggml-org/llama.cpp#16109 (an error sent as an SSE ``event: error`` line, which the
    ``openai`` client skips, so the failure read as an empty message), aaif-goose/goose#8027 and
    mozilla-ai/any-llm#847 (a mid-stream failure must be a ``data:`` frame holding an ``error``
    object, as OpenAI, vLLM and SGLang send it). Expected when the engine aborts after two tokens:
    the 200 stream's two text chunks, then one ``data:`` frame (no ``event:`` line anywhere) whose
    JSON is ``{"error": {...}}`` with the engine's message, then ``[DONE]``; the ``openai`` client
    yields the two chunks' text, then raises ``APIError`` with that message."""
    _, oa, tc = make_clients(PromptTM(tok, reply=REPLY, abort_after=2))
    chat = path.endswith("chat/completions")
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 60}
    body |= {"messages": USER} if chat else {"prompt": [5, 6, 7]}
    r = tc.post(path, json={**body, "stream": True})
    assert r.status_code == 200
    assert not any(line.startswith("event:") for line in r.text.split("\n"))
    events = _chunks(r)
    errors = [e for e in events if "error" in e]
    assert len(errors) == 1 and errors[0]["error"]["message"] == "engine failure"
    before = events[: events.index(errors[0])]
    partial = tok.decode(tok.encode(REPLY, add_special_tokens=False)[:2])
    if chat:
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in before) == partial
    else:
        assert "".join(c["choices"][0]["text"] for c in before) == partial
    seen = ""
    with pytest.raises(openai.APIError, match="engine failure"):
        if chat:
            for c in oa.chat.completions.create(**body, stream=True):
                seen += (c.choices[0].delta.content or "") if c.choices else ""
        else:
            for c in oa.completions.create(**body, stream=True):
                seen += c.choices[0].text if c.choices else ""
    assert seen == partial


def test_ogx_5224_responses_mid_stream_error_is_a_typed_error_event(tok: PreTrainedTokenizerFast) -> None:
    """ogx-ai/ogx#5224 (a Responses stream failing mid-way sent the HTTP error body
    ``{"error": {...}}`` as an event; OpenAI's stream has a ``type: "error"`` event). Expected
    when the engine aborts after two tokens: one event of type ``error`` that validates as the
    ``openai`` client's ``ResponseErrorEvent`` with the engine's message and the next
    ``sequence_number``; no event is an ``{"error": ...}`` body without a ``type``."""
    _, _, tc = make_clients(PromptTM(tok, reply=REPLY, abort_after=2))
    r = tc.post(
        "/v1/responses",
        json={"model": MODEL, "input": "Tell me about Paris.", "store": False, "stream": True},
    )
    assert r.status_code == 200
    events = sse(r.text)
    assert all("type" in e for e in events)
    errors = [e for e in events if e["type"] == "error"]
    assert len(errors) == 1
    err = ResponseErrorEvent.model_validate(errors[0])
    assert err.message == "engine failure"
    i = events.index(errors[0])
    assert err.sequence_number == events[i - 1]["sequence_number"] + 1


# --------------------------------------------------------------------------- multi-byte characters


@pytest.mark.parametrize(
    "text",
    [
        "Čeština: ďábelské ódy",  # Czech: two-byte characters of byte-level tokens
        "Fête 🎉 done 👨‍👩‍👧 family",  # four-byte emoji and a ZWJ sequence
        "日本語のテキスト、한국어 텍스트",  # CJK and Hangul
        "Flags 🇫🇷🇩🇪 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",  # regional indicators and astral letters
    ],
)
@pytest.mark.parametrize("per_message", [1, 2])
def test_lucebox_641_split_characters_stream_whole(fast: Any, hf: Any, text: str, per_message: int) -> None:
    """Luce-Org/lucebox#641 (each half of an emoji split across two tokens went out as U+FFFD),
    mattn/tensai#110 (Japanese over byte-fallback tokens) and waybarrios/vllm-mlx#109 (Czech
    ``ď`` streamed as two replacement characters). Expected, one and two tokens a step: no chunk
    the detokenizer sends holds U+FFFD, every chunk is whole characters (valid UTF-8 on its own),
    and the chunks joined, like the final text, are ``transformers``' decode of all the ids."""
    ids = hf.encode(text, add_special_tokens=False)
    want = hf.decode(ids)
    assert want == text
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    assert not any("\ufffd" in c for c in chunks)
    for c in chunks:
        assert c.encode("utf-8").decode("utf-8") == c
    assert "".join(chunks) == final == want

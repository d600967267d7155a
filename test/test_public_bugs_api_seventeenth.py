"""A seventeenth set of public bug reports of OpenAI-compatible servers and their clients, replayed
against the OpenAI-compatible routes: an empty ``tools`` array, ``tool_choice`` without tools,
``null`` optional objects, a misplaced ``json_schema``, an assistant turn with ``tool_calls: []``,
``n > 1`` streams (the finishing chunk's index, per-choice log-probabilities), per-chunk usage
(``continuous_usage_stats``), ``max_completion_tokens``, the ``/v1/models`` objects and an
oversized streamed prompt. Each test names its report; the empty ``tools`` array
(vllm-project/vllm#39741) was a fault here, the other reports passed as-is and are kept as
regression tests.

Fixtures: ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model writes
``FAKE_TEXT`` over and over, fake log-probabilities; context length ``FAKE_CONTEXT_LEN``;
``--served-model-name qa-model``) and, in-process, the routers over ``ChunkTM`` (the model's text
written by hand, generated token by token). Oracles: ``FAKE_TEXT``, the DeepSeek-V4 tokenizer
(``tokenizer.json`` as a ``transformers`` fast tokenizer), the ``openai`` client's types and stream accumulator, the same request
unstreamed, and the OpenAI reference's field meanings.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from chat_tools_testutil import WEATHER, ChunkTM, client_for
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from openai_fake_tm import FakeTM, app_client, oai_client
from public_bugs_testutil import post, post_ok, sse
from responses_testutil import sse as typed_sse
from server_fixture import (
    FAKE_CONTEXT_LEN,
    FAKE_EOS,
    FAKE_REASONING,
    FAKE_SCRIPT,
    FAKE_TEXT,
    ServerHandle,
)

openai = pytest.importorskip("openai")

from openai.types import Model  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from openai.types.responses import Response, ResponseStreamEvent  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name
HI = [{"role": "user", "content": "Hi"}]
SCRIPT_Q = "[script] What is 6*7?"  # FakeScheduler writes FAKE_SCRIPT then EOS


def _fake_tokens(tok: Any, n: int) -> list[str]:
    """The first ``n`` tokens of ``FAKE_TEXT`` (the fake model's output), each decoded alone."""
    ids = tok.encode(FAKE_TEXT, add_special_tokens=False)[:n]
    return [tok.decode([i]) for i in ids]


# --------------------------------------------------------------------------- tools and formats


@pytest.mark.parametrize("stream", [False, True])
def test_vllm_39741_empty_tools_array_is_a_400(tok: Any, stream: bool) -> None:
    """vllm-project/vllm#39741 (fix PR #39780): ``tools: []`` was served with HTTP 200 as if no
    tools had been sent, where OpenAI answers 400 (``Invalid 'tools': empty array``). Expected: a
    400 in OpenAI's error shape naming ``tools``, streamed or not (before any SSE), whatever the
    ``tool_choice``; the scheduler is never asked; ``tools: null`` and a missing ``tools`` are no
    tools and are served."""
    tm = ChunkTM(tok, "Hello.")
    client, tc = client_for(tm)
    for choice in ({}, {"tool_choice": "none"}, {"tool_choice": "auto"}):
        r = tc.post(CHAT, json={"model": "m", "messages": HI, "tools": [], "stream": stream, **choice})
        assert r.status_code == 400, (choice, r.status_code, r.text)
        assert r.headers["content-type"].startswith("application/json"), r.headers
        err = r.json()["error"]
        assert err["param"] == "tools" and "empty" in err["message"], err
    assert tm.received == []
    for extra in ({"tools": None}, {}):
        r = tc.post(CHAT, json={"model": "m", "messages": HI, **extra})
        assert r.status_code == 200, r.text
        assert ChatCompletion.model_validate(r.json()).choices[0].message.content == "Hello."


@pytest.mark.parametrize("stream", [False, True])
def test_vllm_21052_forced_tool_choice_without_tools_is_a_400_before_the_stream(
    tok: Any, stream: bool
) -> None:
    """vllm-project/vllm#21052: ``tool_choice: "required"`` with no tools to call failed late, in
    the grammar backend, and streamed it came as an error event after an HTTP 200. Expected
    (OpenAI): an HTTP 400 JSON error naming the field before anything is generated, streamed or
    not, for ``"required"`` and for a named function, with ``tools`` missing or ``null``."""
    tm = ChunkTM(tok, "Hello.")
    _, tc = client_for(tm)
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice in ("required", named):
        for tools in ({}, {"tools": None}):
            body = {"model": "m", "messages": HI, "tool_choice": choice, "stream": stream, **tools}
            r = tc.post(CHAT, json=body)
            assert r.status_code == 400, (body, r.text)
            assert r.headers["content-type"].startswith("application/json"), r.headers
            assert r.json()["error"]["param"] == "tool_choice", r.text
    assert tm.received == []


def test_camel_1585_null_tool_choice_without_tools_is_served(tok: Any) -> None:
    """camel-ai/camel#1585: a client that always sends ``tool_choice`` (``null`` when it has no
    tools) got a 400 "When using `tool_choice`, `tools` must be set". Expected (OpenAI: ``null`` is
    the field's default): served as if the field were left out, the same answer."""
    client, _ = client_for(ChunkTM(tok, "Hello there."))
    got = client.chat.completions.create(model="m", messages=HI, extra_body={"tool_choice": None})
    want = client.chat.completions.create(model="m", messages=HI)
    assert got.choices[0].message.content == want.choices[0].message.content == "Hello there."
    assert got.choices[0].finish_reason == "stop"


def test_sglang_4589_null_response_format_is_served(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#4589: ``response_format: null`` (what many clients send by default)
    crashed the request with a 500. Expected: ``null`` is the field's default (no format), so the
    answer is the one without the field: the fake model's text, finish ``length``."""
    body = {"model": FAKE_MODEL, "messages": HI, "max_tokens": 4}
    got = ChatCompletion.model_validate(post_ok(plain_fake_server, CHAT, {**body, "response_format": None}))
    want = ChatCompletion.model_validate(post_ok(plain_fake_server, CHAT, body))
    assert got.choices[0].message.content == want.choices[0].message.content
    assert FAKE_TEXT.startswith(got.choices[0].message.content) and got.choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    "fmt",
    [
        # the schema where the report put it: beside ``type``, not inside ``json_schema``
        {"type": "json_schema", "schema": {"type": "object", "properties": {"label": {"type": "integer"}}}},
        {"type": "json_schema", "json_schema": None},
        {"type": "json_schema", "json_schema": "not an object"},
    ],
    ids=["schema-beside-type", "null-json_schema", "string-json_schema"],
)
@pytest.mark.parametrize("stream", [False, True])
def test_sglang_9461_json_schema_format_without_its_schema_is_a_400(
    plain_fake_server: ServerHandle, fmt: dict[str, Any], stream: bool
) -> None:
    """sgl-project/sglang#9461: ``response_format`` ``{"type": "json_schema"}`` without its
    ``json_schema`` object (the schema put beside ``type``) failed with a 500 ('NoneType' object
    has no attribute 'schema_'). Expected (OpenAI's ``response_format``: ``json_schema`` is an
    object holding ``name`` and ``schema``): a 400 in OpenAI's shape naming the field, streamed or
    not, and the server goes on serving."""
    body = {"model": FAKE_MODEL, "messages": HI, "max_tokens": 4, "response_format": fmt, "stream": stream}
    r = post(plain_fake_server, CHAT, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"].startswith("response_format") and "json_schema" in err["message"], err
    post_ok(plain_fake_server, CHAT, {"model": FAKE_MODEL, "messages": HI, "max_tokens": 2})


def test_vllm_12937_assistant_turn_with_empty_tool_calls_is_served(tok: Any) -> None:
    """vllm-project/vllm#12937: an agent's history with an assistant turn holding
    ``tool_calls: []`` (no call made) failed in the chat template. Expected: ``[]`` is no calls,
    so the prompt is the one of the same history without the key (the scheduler gets the same
    token ids) and the request is served."""
    tm = ChunkTM(tok, "Fine.")
    client, _ = client_for(tm)
    history = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "How are you?"},
    ]
    with_empty = [history[0], {**history[1], "tool_calls": []}, history[2]]
    for msgs in (with_empty, history):
        got = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER])
        assert got.choices[0].message.content == "Fine." and got.choices[0].message.tool_calls is None
    assert len(tm.received) == 2
    assert tm.received[0].input_ids == tm.received[1].input_ids and tm.received[0].input_ids


# --------------------------------------------------------------------------- n > 1 streams


def _by_choice(chunks: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The streamed choices of ``chunks`` grouped by their ``index``, in order."""
    out: dict[int, list[dict[str, Any]]] = {}
    for c in chunks:
        for ch in c["choices"]:
            out.setdefault(ch["index"], []).append(ch)
    return out


def test_llamacpp_20226_each_streamed_choice_finishes_under_its_own_index(
    plain_fake_server: ServerHandle,
) -> None:
    """ggml-org/llama.cpp#20226: streamed with ``n > 1``, the chunk carrying a choice's
    ``finish_reason`` always said ``index: 0``, so a client could not tell which choice ended.
    Expected (OpenAI's ``chat.completion.chunk``: ``index`` is the choice's): indices 0..n-1 each
    finish exactly once, in their own chunk, after all their text; each choice's text is the
    unstreamed choice's; chat and completions alike."""
    n = 3
    for path, body, text_of in (
        (CHAT, {"messages": HI}, lambda ch: ch["delta"].get("content") or ""),
        (COMPLETIONS, {"prompt": "Hi"}, lambda ch: ch.get("text") or ""),
    ):
        body = {"model": FAKE_MODEL, "max_tokens": 5, "n": n, **body}
        full = post_ok(plain_fake_server, path, body)["choices"]
        want = {c["index"]: (c.get("message") or {}).get("content", c.get("text")) for c in full}
        chunks = sse(plain_fake_server, path, body)
        if path == CHAT:  # each chunk is read by the client's own type
            for c in chunks:
                ChatCompletionChunk.model_validate(c)
        groups = _by_choice(chunks)
        assert sorted(groups) == list(range(n)), sorted(groups)
        for i, chs in groups.items():
            reasons = [ch["finish_reason"] for ch in chs]
            assert reasons[-1] == "length" and set(reasons[:-1]) <= {None}, (i, reasons)
            assert "".join(text_of(ch) for ch in chs) == want[i], (path, i)


def test_litellm_3276_streamed_logprobs_of_n_choices_stay_with_their_choice(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """BerriAI/litellm#3276: streamed with ``n: 2`` and ``logprobs``, the chunks' choice ``index``
    was wrong, so the per-token log-probabilities of two choices were folded into one. Expected
    (OpenAI): every chunk's logprobs belong to the choice of its ``index``; folded per index they
    are that choice's unstreamed ``logprobs.content`` -- one entry per generated token (the fake
    model's tokens, as the tokenizer decodes them), in order, with ``top_logprobs`` entries."""
    body = {"model": FAKE_MODEL, "messages": HI, "max_tokens": 4, "n": 2, "logprobs": True, "top_logprobs": 2}
    full = ChatCompletion.model_validate(post_ok(plain_fake_server, CHAT, body))
    want = {c.index: [(e.token, e.logprob) for e in c.logprobs.content] for c in full.choices}
    assert set(want) == {0, 1}
    for toks in want.values():
        assert [t for t, _ in toks] == _fake_tokens(tok, 4)
    folded: dict[int, list[tuple[str, float]]] = {0: [], 1: []}
    for c in sse(plain_fake_server, CHAT, body):
        for ch in ChatCompletionChunk.model_validate(c).choices:
            for e in (ch.logprobs.content or []) if ch.logprobs else []:
                assert len(e.top_logprobs) == 2, e
                folded[ch.index].append((e.token, e.logprob))
    assert folded == want


# --------------------------------------------------------------------------- usage and limits


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_sglang_12241_continuous_usage_stats_on_every_chunk(
    plain_fake_server: ServerHandle, path: str
) -> None:
    """sgl-project/sglang#12241: ``stream_options.continuous_usage_stats`` (vLLM's extension) was
    ignored: usage came only in the last chunk. Expected (vLLM's meaning, which clients such as
    pydantic-ai read as running totals, not increments): with ``include_usage`` every chunk has a
    ``usage``; ``prompt_tokens`` is constant, ``completion_tokens`` never decreases and
    ``total_tokens`` is their sum; the trailing usage chunk (no choices) equals the unstreamed
    request's usage. Without ``include_usage`` no chunk has one (OpenAI's ``stream_options``)."""
    body = {"model": FAKE_MODEL, "max_tokens": 6}
    body.update({"messages": HI} if path == CHAT else {"prompt": "Hi"})
    want = post_ok(plain_fake_server, path, body)["usage"]
    opts = {"include_usage": True, "continuous_usage_stats": True}
    chunks = sse(plain_fake_server, path, {**body, "stream_options": opts})
    usages = [c["usage"] for c in chunks]
    assert all(u is not None for u in usages), usages
    assert {u["prompt_tokens"] for u in usages} == {want["prompt_tokens"]}
    done = [u["completion_tokens"] for u in usages]
    assert done == sorted(done) and done[-1] == want["completion_tokens"] == 6, done
    assert all(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] for u in usages)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == want
    quiet = sse(
        plain_fake_server,
        path,
        {**body, "stream_options": {"include_usage": False, "continuous_usage_stats": True}},
    )
    assert all(c.get("usage") is None for c in quiet) and all(c["choices"] for c in quiet)


@pytest.mark.parametrize("stream", [False, True])
def test_tgi_2925_max_completion_tokens_bounds_the_answer(
    plain_fake_server: ServerHandle, stream: bool
) -> None:
    """huggingface/text-generation-inference#2925: ``max_completion_tokens`` (OpenAI's current name
    of ``max_tokens`` on chat) was ignored, the answer ran to the server's default length.
    Expected: the answer has exactly that many tokens, finish ``length``, the same as with
    ``max_tokens``; streamed, the folded text is the unstreamed one."""
    base = {"model": FAKE_MODEL, "messages": HI}
    for k in (1, 3):
        got = post_ok(plain_fake_server, CHAT, {**base, "max_completion_tokens": k})
        same = post_ok(plain_fake_server, CHAT, {**base, "max_tokens": k})
        assert got["usage"]["completion_tokens"] == same["usage"]["completion_tokens"] == k
        assert got["choices"][0]["finish_reason"] == "length"
        text = got["choices"][0]["message"]["content"]
        assert text == same["choices"][0]["message"]["content"] and FAKE_TEXT.startswith(text)
        if stream:
            chunks = sse(plain_fake_server, CHAT, {**base, "max_completion_tokens": k})
            assert (
                "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == text
            )
            assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"


def test_transformers_46006_models_objects_parse_with_string_owner(plain_fake_server: ServerHandle) -> None:
    """huggingface/transformers#46006: ``GET /v1/models`` gave ``owned_by`` as a list, which
    OpenAI-compatible clients cannot read. Expected (OpenAI's ``Model`` object: ``id``,
    ``object: "model"``, ``created`` an integer, ``owned_by`` a string): every entry of the list
    and the model fetched by id are such objects, read by the ``openai`` client's own ``Model``
    type and ``models.list()`` / ``models.retrieve()``; the id is the served model name."""
    listing = requests.get(plain_fake_server.url + "/v1/models", timeout=30).json()
    assert listing["object"] == "list" and listing["data"]
    for raw in listing["data"]:
        m = Model.model_validate(raw)
        assert isinstance(raw["owned_by"], str) and raw["owned_by"]
        assert isinstance(raw["created"], int) and not isinstance(raw["created"], bool)
        assert m.object == "model"
    client = openai.OpenAI(base_url=plain_fake_server.url + "/v1", api_key="x", max_retries=0)
    assert [m.id for m in client.models.list()] == [FAKE_MODEL]
    one = client.models.retrieve(FAKE_MODEL)
    assert (one.id, one.object, isinstance(one.owned_by, str)) == (FAKE_MODEL, "model", True)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_sglang_12081_oversized_streamed_prompt_is_an_http_400(
    plain_fake_server: ServerHandle, path: str
) -> None:
    """sgl-project/sglang#12081 (fix PR #21900): a streamed request whose prompt is longer than
    the context got HTTP 200 and an SSE error event (code 400 in the body), where the unstreamed
    one got HTTP 400. Expected (vLLM and OpenAI): HTTP 400 with a JSON error body before any SSE,
    the same status and message as unstreamed."""
    long_text = "word " * (FAKE_CONTEXT_LEN * 4)
    body = {"model": FAKE_MODEL, "max_tokens": 4}
    body.update(
        {"messages": [{"role": "user", "content": long_text}]} if path == CHAT else {"prompt": long_text}
    )
    flat = post(plain_fake_server, path, body)
    r = requests.post(plain_fake_server.url + path, json={**body, "stream": True}, timeout=60)
    assert flat.status_code == r.status_code == 400, (flat.text, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    assert not r.text.startswith("data:")
    assert r.json()["error"]["message"] == flat.json()["error"]["message"]
    assert "context length" in r.json()["error"]["message"]
    json.dumps(r.json())  # a plain JSON object, as OpenAI clients read errors


# --------------------------------------------------------------------------- reasoning


def test_sglang_9457_thinking_disabled_leaves_reasoning_content_empty(
    plain_fake_server: ServerHandle,
) -> None:
    """sgl-project/sglang#9457: with ``chat_template_kwargs: {"thinking": false}`` the reasoning
    parser still read the start of the answer as reasoning (the prompt had closed the thinking
    block), so ``content`` came back null and the answer sat in ``reasoning_content``. Expected:
    thinking off, nothing is reasoning -- ``reasoning_content`` is null, ``content`` is the text the
    model wrote (``FAKE_SCRIPT``, unsplit), streamed and not, and no reasoning tokens are counted;
    thinking on, the same output splits at ``</think>`` (the contrast)."""
    msgs = [{"role": "user", "content": SCRIPT_Q}]
    off = {
        "model": FAKE_MODEL,
        "messages": msgs,
        "max_tokens": 200,
        "chat_template_kwargs": {"thinking": False},
    }
    full = ChatCompletion.model_validate(post_ok(plain_fake_server, CHAT, off))
    msg = full.choices[0].message
    assert (msg.model_extra or {}).get("reasoning_content") is None and msg.content == FAKE_SCRIPT
    assert not (
        full.usage.completion_tokens_details and full.usage.completion_tokens_details.reasoning_tokens
    )
    chunks = sse(plain_fake_server, CHAT, off)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert not any(d.get("reasoning_content") for d in deltas)
    assert "".join(d.get("content") or "" for d in deltas) == FAKE_SCRIPT
    on = {**off, "chat_template_kwargs": {"thinking": True}}
    split = post_ok(plain_fake_server, CHAT, on)["choices"][0]["message"]
    assert split["reasoning_content"] == FAKE_REASONING and split["content"] != FAKE_SCRIPT


_EVENTS = TypeAdapter(ResponseStreamEvent)


def test_omlx_2817_responses_cut_in_reasoning_are_incomplete(plain_fake_server: ServerHandle) -> None:
    """jundot/omlx#2817: a Responses request whose ``max_output_tokens`` ran out while the model was
    still reasoning came back ``status: "completed"`` with an empty message item, so agents took the
    empty answer as final. Expected (OpenAI's ``Response``): ``status: "incomplete"`` with
    ``incomplete_details.reason: "max_output_tokens"``, the reasoning item holding the reasoning
    generated so far (a prefix of ``FAKE_REASONING``) and no empty message; streamed, the last event
    is ``response.incomplete`` carrying that same response; every event reads as the ``openai``
    client's event type. With room to finish the same request is ``completed``."""
    body = {"model": FAKE_MODEL, "input": SCRIPT_Q, "max_output_tokens": 5, "reasoning": {"effort": "high"}}
    body["chat_template_kwargs"] = {"thinking": True}
    for stream in (False, True):
        if stream:
            r = requests.post(
                plain_fake_server.url + "/v1/responses", json={**body, "stream": True}, timeout=60
            )
            assert r.status_code == 200, r.text
            events = typed_sse(r.text)
            for e in events:
                _EVENTS.validate_python(e)
            assert events[-1]["type"] == "response.incomplete", [e["type"] for e in events]
            got = Response.model_validate(events[-1]["response"])
        else:
            got = Response.model_validate(post_ok(plain_fake_server, "/v1/responses", body))
        assert got.status == "incomplete" and got.incomplete_details.reason == "max_output_tokens", got
        assert [o.type for o in got.output] == ["reasoning"], got.output
        text = "".join(c.text for c in got.output[0].content or [])
        assert text and FAKE_REASONING.startswith(text), text
        assert got.usage.output_tokens == 5 == got.usage.output_tokens_details.reasoning_tokens
    done = Response.model_validate(
        post_ok(plain_fake_server, "/v1/responses", {**body, "max_output_tokens": 200})
    )
    assert done.status == "completed" and done.incomplete_details is None
    assert [o.type for o in done.output] == ["reasoning", "message"]


def test_sglang_30556_every_choice_of_n_gets_its_reasoning_and_tool_calls(tok: Any) -> None:
    """sgl-project/sglang#30556: with ``n > 1`` and both a reasoning and a tool-call parser, no
    choice had its reasoning separated or its tool calls parsed (``finish_reason: "stop"``), where
    ``n: 1`` worked. Expected: each of the ``n`` choices is parsed on its own -- its reasoning in
    ``reasoning_content``, the hand-written calls as ``tool_calls`` with ids of their own, finish
    ``tool_calls`` -- unstreamed and, folded per choice index by the ``openai`` client's stream
    accumulator, streamed alike."""
    calls = dsml_block(
        dsml_invoke("get_weather", dsml_param("city", True, "Oslo")),
        dsml_invoke("get_weather", dsml_param("city", True, "Rome")),
    )
    tc = app_client(FakeTM(tok, "Think hard.</think>Sure." + calls))  # choice k > 0 adds " #k"
    client = oai_client(tc)
    kw = {
        "model": "dsv4-test",
        "messages": [{"role": "user", "content": "Weather in Oslo and Rome?"}],
        "tools": [WEATHER],
        "n": 3,
        "extra_body": {"chat_template_kwargs": {"thinking": True}},
    }
    full = client.chat.completions.create(**kw)
    with client.chat.completions.stream(**kw) as stream:
        folded = stream.get_final_completion()
    for got in (full, folded):
        assert [c.index for c in got.choices] == [0, 1, 2]
        ids = set()
        for c in got.choices:
            assert c.finish_reason == "tool_calls", c
            assert (c.message.model_extra or {}).get("reasoning_content") == "Think hard.", c.message
            assert c.message.content.startswith("Sure."), c.message
            assert [json.loads(t.function.arguments) for t in c.message.tool_calls] == [
                {"city": "Oslo"},
                {"city": "Rome"},
            ]
            ids.update(t.id for t in c.message.tool_calls)
        assert len(ids) == 6, ids


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_sglang_1609_matched_stop_tells_eos_stop_token_and_stop_string_apart(
    plain_fake_server: ServerHandle, tok: Any, path: str
) -> None:
    """sgl-project/sglang#1609 (fix PR #1684): every stop came back as ``finish_reason: "stop"``
    alone, so a client could not tell the EOS token from one of its ``stop_token_ids`` or a
    ``stop`` string (all are trimmed from the text). Expected (SGLang's ``matched_stop``, vLLM's
    ``stop_reason``): the EOS id for a natural end, the token id for a stop token, the string for a
    stop string, null for ``length``; the streamed finishing chunk says the same."""
    brown = tok.encode(" brown", add_special_tokens=False)
    assert len(brown) == 1  # a single token of FAKE_TEXT (" The quick brown ...")
    base = {"model": FAKE_MODEL, "max_tokens": 200}
    if path == CHAT:
        plain, script = {"messages": HI}, {"messages": [{"role": "user", "content": SCRIPT_Q}]}
    else:
        plain, script = {"prompt": "Hi"}, {"prompt": SCRIPT_Q}
    cases = [
        ({**script}, "stop", FAKE_EOS),
        ({**plain, "stop_token_ids": brown}, "stop", brown[0]),
        ({**plain, "stop": ["quick"]}, "stop", "quick"),
        ({**plain, "max_tokens": 2}, "length", None),
    ]
    for extra, reason, matched in cases:
        body = {**base, **extra}
        ch = post_ok(plain_fake_server, path, body)["choices"][0]
        assert (ch["finish_reason"], ch["matched_stop"]) == (reason, matched), (extra, ch)
        last = [c["choices"][0] for c in sse(plain_fake_server, path, body) if c["choices"]][-1]
        assert (last["finish_reason"], last["matched_stop"]) == (reason, matched), (extra, last)


def test_exo_1885_responses_usage_has_its_token_details_streamed_and_not(tok: Any) -> None:
    """exo-explore/exo#1885: the Responses API's ``usage`` lacked ``input_tokens_details`` and
    ``output_tokens_details`` (chat completions had them), and clients reading the streamed
    ``response.completed`` found no usage (diegosouzapw/OmniRoute#6906). Expected (OpenAI's
    ``ResponseUsage``): ``input_tokens`` the prompt's token count, ``input_tokens_details.
    cached_tokens`` the engine's cached count, ``output_tokens`` the generated tokens (the reply as
    the tokenizer encodes it), ``output_tokens_details.reasoning_tokens`` 0 without reasoning and
    ``total_tokens`` the sum -- the same on the streamed terminal event as unstreamed."""
    reply = "It is sunny in Oslo."
    tm = FakeTM(tok, reply)  # every output reports cached_tokens = 3
    tc = app_client(tm)
    body = {"model": "dsv4-test", "input": "Weather in Oslo?"}
    full = Response.model_validate(tc.post("/v1/responses", json=body).json())
    prompt_len = len(tm.received[-1].input_ids)
    events = typed_sse(tc.post("/v1/responses", json={**body, "stream": True}).text)
    for e in events:
        _EVENTS.validate_python(e)
    assert events[-1]["type"] == "response.completed"
    streamed = Response.model_validate(events[-1]["response"])
    want_out = len(tok.encode(reply, add_special_tokens=False))
    for got in (full, streamed):
        u = got.usage
        assert u is not None, got
        assert (u.input_tokens, u.input_tokens_details.cached_tokens) == (prompt_len, 3), u
        assert (u.output_tokens, u.output_tokens_details.reasoning_tokens) == (want_out, 0), u
        assert u.total_tokens == u.input_tokens + u.output_tokens
        assert got.output[-1].content[0].text == reply

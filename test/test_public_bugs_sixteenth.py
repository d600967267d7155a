"""A sixteenth set of public bug reports of OpenAI-compatible servers and their clients, replayed
here, and the naming of a bad entry of a ``/v1/completions`` list of prompts: streamed reasoning
log-probabilities, parallel tool calls streamed (chat, Messages) and after reasoning (Responses),
``finish_reason`` keys and ``tool_choice: "required"``, the completions usage chunk, one id per
stream, special tokens among top log-probabilities, 400s for unknown roles, null user content and
``stream_options`` without ``stream``, a tool-call history turn with null content, the Responses
completed event and the Messages ``stop_sequence`` field. Each test names its report; the
streamed reasoning log-probabilities (sgl-project/sglang#26778) and the prompt naming were faults
here, the other reports passed as-is and are kept as regression tests.

Fixtures: ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model writes
``FAKE_TEXT`` over and over, fake log-probabilities whose alternatives are ids 0..k-1; a
``[script]`` prompt makes it write ``FAKE_SCRIPT`` then EOS through the real stop checker; context
length ``FAKE_CONTEXT_LEN``) and, in-process, the routers over ``ChunkTM`` (the model's text written
by hand, DSML tool calls included, generated token by token). Oracles: ``FAKE_TEXT`` /
``FAKE_SCRIPT``, the hand-written calls, the DeepSeek-V4 tokenizer as ``transformers`` loads it,
the ``openai`` client's types and stream accumulator, the same request unstreamed, the request as
the client sent it, and the OpenAI / Anthropic references' field meanings.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import requests
from chat_tools_testutil import WEATHER, ChunkTM, client_for, routes_client, sse_chunks
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from public_bugs_testutil import post, post_ok, sse
from responses_testutil import sse as typed_sse
from server_fixture import (
    FAKE_ANSWER,
    FAKE_CONTEXT_LEN,
    FAKE_REASONING,
    FAKE_SCRIPT,
    FAKE_TEXT,
    ServerHandle,
    hf_auto_tokenizer,
)

openai = pytest.importorskip("openai")

from openai.types import Completion  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name
HI = [{"role": "user", "content": "Hi"}]
SCRIPT = [{"role": "user", "content": "[script] What is 6*7?"}]
THINK = {"chat_template_kwargs": {"thinking": True}}
WEATHER_Q = [{"role": "user", "content": "Weather in Oslo and Rome?"}]
LONG_TEXT = "word " * 4000  # far more tokens than FAKE_CONTEXT_LEN


# --------------------------------------------------------------------------- a bad prompt of a list

#: ``/v1/completions`` bodies whose one prompt is refused by the engine's checks, each with the
#: entry as the client sent it (the oracle: its index in ``prompt``) and a phrase the message kept.
BAD_PROMPT_ENTRIES = [
    ({"prompt": ["a", LONG_TEXT, "c"]}, "prompt[1]", "context length"),
    ({"prompt": [[1, 2], [3], [1] * (FAKE_CONTEXT_LEN + 10)]}, "prompt[2]", "context length"),
    # the route tokenizes the prompts itself (return_token_ids / truncation / no BOS)
    ({"prompt": ["a", LONG_TEXT], "return_token_ids": True}, "prompt[1]", "context length"),
    # n > 1 and best_of: the engine's requests are grouped by prompt; the name is the prompt's
    ({"prompt": ["a", "b", LONG_TEXT], "n": 2}, "prompt[2]", "context length"),
    ({"prompt": [[1], [1] * (FAKE_CONTEXT_LEN + 10)], "best_of": 2}, "prompt[1]", "context length"),
    # a list of one prompt is a list too (as the route's own prompt[0] checks name it)
    ({"prompt": [LONG_TEXT]}, "prompt[0]", "context length"),
    ({"prompt": [[1] * (FAKE_CONTEXT_LEN + 10)]}, "prompt[0]", "context length"),
]  # fmt: skip


@pytest.mark.parametrize(
    "body,entry,kept", BAD_PROMPT_ENTRIES, ids=[str(i) for i in range(len(BAD_PROMPT_ENTRIES))]
)
def test_bad_prompt_of_a_list_is_named(plain_fake_server: ServerHandle, body, entry, kept) -> None:
    """A ``/v1/completions`` list of prompts whose one entry is too long: the 400 names that entry
    (``prompt[2]``), streamed or not, as ``/generate`` names ``text[2]``, so a client with many
    prompts can find it; the message keeps what it said before and its status, and ``param`` is
    ``prompt``. A single prompt (not a list) is not called a batch entry."""
    for stream in (False, True) if "best_of" not in body else (False,):  # best_of is not streamed
        r = post(
            plain_fake_server, COMPLETIONS, {"model": FAKE_MODEL, "max_tokens": 4, **body, "stream": stream}
        )
        assert r.status_code == 400, (body, r.status_code, r.text)
        err = r.json()["error"]
        assert re.search(re.escape(entry) + r"(?![\[\d])", err["message"]), err
        assert kept in err["message"] and err["param"] == "prompt", err
    for single in (LONG_TEXT, [1] * (FAKE_CONTEXT_LEN + 10)):
        r = post(plain_fake_server, COMPLETIONS, {"model": FAKE_MODEL, "max_tokens": 4, "prompt": single})
        assert r.status_code == 400 and "batch entry" not in r.json()["error"]["message"], r.text


# --------------------------------------------------------------------------- chat stream shapes


def test_sglang_26778_streamed_reasoning_chunks_carry_their_logprobs(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#26778 (fix PR #28601): streamed with a reasoning parser and
    ``logprobs: true``, the chunks carrying ``delta.reasoning_content`` had ``logprobs: null``; the
    step's log-probabilities came in another chunk (or not at all). Expected (OpenAI's chunk: the
    ``logprobs`` of the tokens of that chunk): every chunk with reasoning or answer text carries the
    log-probabilities of its tokens, a token without text (``</think>``, EOS) rides a chunk of its
    own, and the streamed entries, folded, are the unstreamed ones -- every generated token of
    ``FAKE_SCRIPT`` and the EOS, once each, in order."""
    body = {"model": FAKE_MODEL, "messages": SCRIPT, "max_tokens": 200, "logprobs": True, **THINK}
    full = ChatCompletion.model_validate(post_ok(plain_fake_server, CHAT, body)).choices[0]
    assert (full.message.model_extra or {}).get("reasoning_content") == FAKE_REASONING
    assert full.message.content == FAKE_ANSWER
    streamed: list[str] = []
    reasoning = ""
    for raw in sse(plain_fake_server, CHAT, body):
        for ch in ChatCompletionChunk.model_validate(raw).choices:
            lp = [e.token for e in (ch.logprobs.content or [])] if ch.logprobs is not None else []
            text = ((ch.delta.model_extra or {}).get("reasoning_content") or "") + (ch.delta.content or "")
            reasoning += (ch.delta.model_extra or {}).get("reasoning_content") or ""
            if text:
                assert lp, raw  # the text's own tokens came with it
            streamed += lp
    assert reasoning == FAKE_REASONING
    assert streamed == [e.token for e in full.logprobs.content]
    tok = hf_auto_tokenizer()
    script_ids = tok.encode(FAKE_SCRIPT, add_special_tokens=False)
    assert len(streamed) == len(script_ids) + 1  # and the EOS


def _raw_chunks(tc: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON chunks of the streamed ``body`` read off the raw SSE text, ``[DONE]`` left out."""
    r = tc.post(CHAT, json={**body, "stream": True})
    assert r.status_code == 200, r.text
    return sse_chunks(r.text)


TWO_CALLS = dsml_block(
    dsml_invoke("get_weather", dsml_param("city", True, "Oslo")),
    dsml_invoke("get_weather", dsml_param("city", True, "Rome"), dsml_param("days", False, "2")),
)


def test_dynamo_4723_parallel_tool_calls_stream_with_their_own_index(tok: Any) -> None:
    """ai-dynamo/dynamo#4723: two tool calls in one answer were streamed with ``index: 0`` both,
    so a client folding deltas by index (as the ``openai`` client's accumulator does) merged them
    into one call with concatenated arguments. Expected (OpenAI's streamed ``tool_calls``): the
    calls get indices 0 and 1, each with its own id and name in its first delta; folded by the
    client's own accumulator they are the two calls of the unstreamed answer, arguments as
    written (``json.loads``)."""
    client, tc = client_for(ChunkTM(tok, TWO_CALLS, per_chunk=3))
    kw = {"model": "m", "messages": WEATHER_Q, "tools": [WEATHER]}
    first: dict[int, tuple[str, str]] = {}
    for c in _raw_chunks(tc, kw):
        for ch in c["choices"]:
            for d in ch["delta"].get("tool_calls") or []:
                if d["index"] not in first:
                    first[d["index"]] = (d["id"], d["function"]["name"])
                else:
                    assert d.get("id") is None and (d.get("function") or {}).get("name") is None, d
    assert sorted(first) == [0, 1] and first[0][0] != first[1][0], first
    with client.chat.completions.stream(**kw) as stream:
        folded = stream.get_final_completion().choices[0]
    full = client.chat.completions.create(**kw).choices[0]
    want = [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome", "days": 2})]
    for ch in (folded, full):
        assert ch.finish_reason == "tool_calls"
        assert [(t.function.name, json.loads(t.function.arguments)) for t in ch.message.tool_calls] == want


def test_vllm_19662_every_streamed_chat_choice_has_a_finish_reason_key(tok: Any) -> None:
    """vllm-project/vllm#19662: streamed chat chunks left ``finish_reason`` out (tool-call deltas
    among them) where OpenAI writes ``"finish_reason": null``; strict clients read the missing key
    as a malformed chunk. Expected (OpenAI's ``chat.completion.chunk``): every choice of every chunk
    has the key, null until the one last chunk of the choice names ``tool_calls``; and the
    ``openai`` client's chunk type reads every chunk."""
    _, tc = client_for(ChunkTM(tok, "Looking." + TWO_CALLS))
    chunks = _raw_chunks(tc, {"model": "m", "messages": WEATHER_Q, "tools": [WEATHER]})
    reasons = []
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
        for ch in c["choices"]:
            assert "finish_reason" in ch, c
            reasons.append(ch["finish_reason"])
    assert any(ch["delta"].get("tool_calls") for c in chunks for ch in c["choices"])
    assert reasons[-1] == "tool_calls" and set(reasons[:-1]) == {None}, reasons


def _grammar_client(tok: Any, reply: str) -> tuple[Any, Any]:
    """``client_for`` over a ``ChunkTM`` writing ``reply`` that says the scheduler has a grammar
    backend (``tool_choice`` ``"required"`` is then served; the scripted model ignores the grammar,
    so the reply is what a model writes)."""
    tm = ChunkTM(tok, reply)
    tm.grammar_enabled = True  # type: ignore[attr-defined]
    return client_for(tm)


def test_vllm_53255_required_tool_choice_without_a_call_is_not_tool_calls(tok: Any) -> None:
    """vllm-project/vllm#53255: with ``tool_choice: "required"`` the finish reason was rewritten to
    ``"tool_calls"`` without checking that a call was parsed, so a reply with no call came back
    as ``finish_reason: "tool_calls"`` with no ``tool_calls``, and clients took the tool branch
    with nothing to run. Expected: ``"tool_calls"`` only next to parsed calls -- a reply without
    one is ``"stop"`` with its text as content, streamed and not."""
    client, tc = _grammar_client(tok, "Hello, I am fine.")
    body = {"model": "m", "messages": HI, "tools": [WEATHER], "tool_choice": "required"}
    ch = client.chat.completions.create(**body).choices[0]
    assert (ch.finish_reason, ch.message.content, ch.message.tool_calls) == (
        "stop",
        "Hello, I am fine.",
        None,
    )
    chunks = _raw_chunks(tc, body)
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert reasons[-1] == "stop"
    assert not any(c["choices"][0]["delta"].get("tool_calls") for c in chunks if c["choices"])


def test_vllm_25054_required_tool_choice_finishes_with_tool_calls(tok: Any) -> None:
    """vllm-project/vllm#25054: with ``tool_choice: "required"`` vLLM answered
    ``finish_reason: "stop"`` unstreamed but ``"tool_calls"`` streamed; OpenAI answers
    ``"tool_calls"`` for both. Expected: ``"tool_calls"`` streamed and not, with the same calls
    (the client's accumulator folds the stream)."""
    client, _ = _grammar_client(tok, TWO_CALLS)
    body = {"model": "m", "messages": WEATHER_Q, "tools": [WEATHER], "tool_choice": "required"}
    full = client.chat.completions.create(**body).choices[0]
    with client.chat.completions.stream(**body) as stream:
        folded = stream.get_final_completion().choices[0]
    for ch in (full, folded):
        assert ch.finish_reason == "tool_calls"
        assert [json.loads(t.function.arguments)["city"] for t in ch.message.tool_calls] == ["Oslo", "Rome"]


# --------------------------------------------------------------------------- usage, ids, logprobs


def test_ogx_6541_completions_usage_chunk_has_empty_choices(plain_fake_server: ServerHandle) -> None:
    """ogx-ai/ogx#6541: the trailing usage chunk of a streamed ``/v1/completions`` request with
    ``stream_options.include_usage`` (``choices: []`` next to ``usage``) could not be read as a
    completion, so clients dropped the usage. Expected (OpenAI's streaming usage): every other
    chunk has ``usage: null``; one last chunk has no choices and the usage, which the ``openai``
    client's ``Completion`` type reads and which equals the unstreamed request's usage (two
    prompts, ``n: 2``)."""
    body = {"model": FAKE_MODEL, "prompt": ["one", "two three"], "n": 2, "max_tokens": 5}
    want = Completion.model_validate(post_ok(plain_fake_server, COMPLETIONS, body)).usage
    chunks = sse(plain_fake_server, COMPLETIONS, {**body, "stream_options": {"include_usage": True}})
    *head, last = chunks
    assert all(c["usage"] is None and c["choices"] for c in head)
    last = Completion.model_validate(last)
    assert last.choices == [] and last.usage is not None
    got = last.usage
    assert (got.prompt_tokens, got.completion_tokens, got.total_tokens) == (
        want.prompt_tokens,
        want.completion_tokens,
        want.total_tokens,
    )
    assert got.completion_tokens == 4 * 5


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
def test_rapid_mlx_461_streamed_chunks_share_one_id(plain_fake_server: ServerHandle, path: str) -> None:
    """raullenchai/Rapid-MLX#461 (item 3): every SSE chunk of one streamed completion got a fresh
    id, so clients that key chunks on ``id`` could not put the answer together. Expected (OpenAI's
    streaming reference: each chunk has the same id, and the same ``created``): one id, with the
    route's prefix, and one ``created`` across all chunks, the usage chunk included; a second
    request gets another id."""
    body: dict[str, Any] = {"model": FAKE_MODEL, "max_tokens": 6, "stream_options": {"include_usage": True}}
    body.update({"prompt": "Hi"} if path == COMPLETIONS else {"messages": HI})
    runs = [sse(plain_fake_server, path, body) for _ in range(2)]
    ids = [{c["id"] for c in chunks} for chunks in runs]
    assert all(len(x) == 1 for x in ids) and ids[0] != ids[1], ids
    assert all(len({c["created"] for c in chunks}) == 1 for chunks in runs)
    prefix = "cmpl-" if path == COMPLETIONS else "chatcmpl-"
    assert all(next(iter(x)).startswith(prefix) for x in ids), ids


def test_vllm_17421_special_tokens_among_top_logprobs(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#17421 (fix PR #17637): a special token among the top log-probabilities
    made the chat route fail (``KeyError``) where it looked the token's text up. Expected: the
    alternatives are served; each special token is named as the tokenizer names it (the fake
    model's alternatives are ids 0, 1, 2: BOS, EOS and the pad token, added tokens), its ``bytes`` are the UTF-8
    bytes of that name, streamed and not; ``/v1/completions`` names them the same in its
    ``top_logprobs`` maps. Oracle: the tokenizer as ``transformers`` loads it."""
    tok = hf_auto_tokenizer()
    names = tok.convert_ids_to_tokens([0, 1, 2])
    assert all(n in tok.get_added_vocab() for n in names), names  # not byte-level text
    body = {"model": FAKE_MODEL, "messages": HI, "max_tokens": 3, "logprobs": True, "top_logprobs": 3}
    entries = (
        ChatCompletion.model_validate(post_ok(plain_fake_server, CHAT, body)).choices[0].logprobs.content
    )
    for raw in sse(plain_fake_server, CHAT, body):
        for ch in ChatCompletionChunk.model_validate(raw).choices:
            entries += ch.logprobs.content if ch.logprobs is not None and ch.logprobs.content else []
    assert len(entries) == 6
    for e in entries:
        assert [t.token for t in e.top_logprobs] == names
        assert [t.bytes for t in e.top_logprobs] == [list(n.encode()) for n in names]
    body = {"model": FAKE_MODEL, "prompt": "Hi", "max_tokens": 3, "logprobs": 3}
    lp = post_ok(plain_fake_server, COMPLETIONS, body)["choices"][0]["logprobs"]
    for token, top in zip(lp["tokens"], lp["top_logprobs"]):
        assert set(top) - {token} == set(names), top


# --------------------------------------------------------------------------- request errors


def test_vllm_53071_unknown_chat_role_is_a_400(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#53071: a message with an unknown role (``"SYSTEM"``, upper case) reached
    the DeepSeek-V4 encoder, which raised ``NotImplementedError``, answered 501. Expected: an
    unknown role is an invalid client request, a 400 ``BadRequestError`` naming the role, streamed
    or not, and the server keeps serving. A known role in another case (``"SYSTEM"``,
    ``"Assistant"``) is read as that role on the chat route, as SGLang 0.5.23 reads it
    (sgl-project/sglang#7499; ``test_public_bugs_chat_twentyfourth.py`` checks the prompt): a 200."""
    for role in ("SYSTEM", "Assistant"):
        msgs = [{"role": role, "content": "Be brief."}, *HI]
        post_ok(plain_fake_server, CHAT, {"model": FAKE_MODEL, "messages": msgs, "max_tokens": 2})
    for role in ("bot", "narrator"):
        for stream in (False, True):
            msgs = [{"role": role, "content": "Be brief."}, *HI]
            r = post(plain_fake_server, CHAT, {"model": FAKE_MODEL, "messages": msgs, "stream": stream})
            assert r.status_code == 400, (role, r.status_code, r.text)
            err = r.json()["error"]
            assert err["type"] == "BadRequestError" and "role" in err["message"], err
    assert post_ok(plain_fake_server, CHAT, {"model": FAKE_MODEL, "messages": HI, "max_tokens": 2})["choices"]


def test_openai_python_1571_null_user_content_names_the_message(plain_fake_server: ServerHandle) -> None:
    """openai/openai-python#1571: a ``content: null`` user message (a framework's empty turn) got
    OpenAI's 400 ``Invalid value for 'content': expected a string, got null`` with ``param``
    naming the message (``messages.[2].content``). Expected here too: a 400 (not a 500, not a
    silently empty turn) whose ``param`` names ``messages[2].content``, the message's index as
    sent."""
    msgs = [{"role": "system", "content": "Be brief."}, *HI, {"role": "user", "content": None}]
    r = post(plain_fake_server, CHAT, {"model": FAKE_MODEL, "messages": msgs})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "messages[2].content" and "null" in err["message"], err


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
def test_sglang_16068_stream_options_need_stream(plain_fake_server: ServerHandle, path: str) -> None:
    """sgl-project/sglang#16068: ``stream_options`` on a request that is not streamed was served
    where OpenAI answers 400 (``The 'stream_options' parameter is only allowed when 'stream' is
    enabled``, litellm's BerriAI/litellm#5803 quotes it). Expected: a 400 whose ``param`` is
    ``stream_options`` for ``stream`` false or left out, on both routes; with ``stream: true`` the
    same body streams."""
    body: dict[str, Any] = {"model": FAKE_MODEL, "max_tokens": 2, "stream_options": {"include_usage": True}}
    body.update({"prompt": "Hi"} if path == COMPLETIONS else {"messages": HI})
    for extra in ({"stream": False}, {}):
        r = post(plain_fake_server, path, {**body, **extra})
        assert r.status_code == 400 and r.json()["error"]["param"] == "stream_options", r.text
    assert sse(plain_fake_server, path, body)[-1]["usage"]["completion_tokens"] == 2


def test_sglang_4236_assistant_tool_call_turn_with_null_content(tok: Any) -> None:
    """sgl-project/sglang#4236 (danny-avila/LibreChat#6256): an agent's history holds the
    assistant turn that called a tool as ``content: null`` with ``tool_calls``; SGLang refused the
    whole request (pydantic: ``content`` must be a string). Expected (OpenAI's assistant message:
    ``content`` is optional when ``tool_calls`` is given): served, and the prompt the model reads
    holds the call (its name and argument) and the tool's result."""
    tm = ChunkTM(tok, "It is sunny in Oslo.")
    client, _ = client_for(tm)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    msgs = [
        *WEATHER_Q[:1],
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
    ]
    ch = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER]).choices[0]
    assert ch.message.content == "It is sunny in Oslo."
    prompt = tok.decode(tm.received[-1].input_ids)
    assert 'invoke name="get_weather"' in prompt and ">Oslo<" in prompt and "sunny, 21C" in prompt, prompt


# --------------------------------------------------------------------------- Responses and Messages


def test_vllm_30223_streamed_response_completed_holds_the_output(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#30223: a streamed ``/v1/responses`` answer sent the text deltas, but its
    ``response.completed`` event had ``output: []`` (only the last delta was kept); ogx-ai/ogx#5309:
    ``response.output_text.done`` was never sent. Expected (OpenAI's Responses streaming events):
    ``output_text.done`` holds the whole text, and the completed response's message is that text,
    the deltas joined, and the unstreamed response's text; the ``openai`` client's ``Response``
    reads it."""
    from openai.types.responses import Response

    body = {"model": FAKE_MODEL, "input": "Hi", "max_output_tokens": 12}
    full = Response.model_validate(post_ok(plain_fake_server, "/v1/responses", body))
    r = requests.post(plain_fake_server.url + "/v1/responses", json={**body, "stream": True}, timeout=120)
    assert r.status_code == 200, r.text
    events = typed_sse(r.text)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    (done,) = [e["text"] for e in events if e["type"] == "response.output_text.done"]
    final = [e for e in events if e["type"] in ("response.completed", "response.incomplete")]
    assert len(final) == 1 and final[0] is events[-1]
    got = Response.model_validate(final[0]["response"])
    assert deltas == done == got.output_text == full.output_text == FAKE_TEXT[: len(deltas)] != ""
    assert got.status == full.status and got.usage.output_tokens == full.usage.output_tokens == 12


def test_ogx_5521_messages_always_have_a_stop_sequence_field(plain_fake_server: ServerHandle) -> None:
    """ogx-ai/ogx#5521: ``/v1/messages`` answers left ``stop_sequence`` out, and Anthropic's
    clients (Claude Code) refused them. Expected (Anthropic's ``Message``: ``stop_sequence`` is
    always there, null unless a stop sequence ended the turn): the key is in the message, in the
    streamed ``message_start`` message and in the ``message_delta`` delta -- null at
    ``max_tokens``, the matched string when one of ``stop_sequences`` matched."""
    base = {"model": FAKE_MODEL, "max_tokens": 4, "messages": HI}
    for extra, reason, seq in (
        ({}, "max_tokens", None),
        ({"max_tokens": 50, "stop_sequences": ["fox"]}, "stop_sequence", "fox"),
    ):
        body = {**base, **extra}
        m = post_ok(plain_fake_server, "/v1/messages", body)
        assert "stop_sequence" in m and (m["stop_reason"], m["stop_sequence"]) == (reason, seq), m
        r = requests.post(plain_fake_server.url + "/v1/messages", json={**body, "stream": True}, timeout=120)
        events = typed_sse(r.text)
        start = next(e for e in events if e["type"] == "message_start")["message"]
        delta = next(e for e in events if e["type"] == "message_delta")["delta"]
        assert "stop_sequence" in start and start["stop_sequence"] is None, start
        assert "stop_sequence" in delta and (delta["stop_reason"], delta["stop_sequence"]) == (reason, seq), (
            delta
        )


def test_sglang_39782_streamed_messages_keep_one_tool_use_block_per_call(tok: Any) -> None:
    """sgl-project/sglang#39782: ``/v1/messages`` streamed the arguments of several tool calls into
    the first ``tool_use`` block (one block, concatenated JSON objects), where the unstreamed
    answer and the OpenAI routes had one call each. Expected (Anthropic's streaming: one
    ``content_block_start`` per ``tool_use`` block, its ``input_json_delta`` pieces at that block's
    index): after the text block, one block per call with its own id and name, whose joined
    ``partial_json`` is that call's input, equal to the unstreamed message's blocks;
    ``stop_reason`` ``tool_use`` both ways."""
    tc = routes_client(ChunkTM(tok, "Checking." + TWO_CALLS, per_chunk=2))
    tools = [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}]
    body = {"model": "m", "max_tokens": 300, "messages": WEATHER_Q, "tools": tools}
    full = tc.post("/v1/messages", json=body).json()
    want = [{"city": "Oslo"}, {"city": "Rome", "days": 2}]
    assert full["stop_reason"] == "tool_use"
    assert [b["input"] for b in full["content"] if b["type"] == "tool_use"] == want
    events = typed_sse(tc.post("/v1/messages", json={**body, "stream": True}).text)
    blocks: dict[int, list[Any]] = {}
    for e in events:
        if e["type"] == "content_block_start":
            blocks[e["index"]] = [e["content_block"], ""]
        elif e["type"] == "content_block_delta":
            d = e["delta"]
            blocks[e["index"]][1] += d.get("partial_json") or d.get("text") or ""
    assert [b["type"] for b, _ in blocks.values()] == ["text", "tool_use", "tool_use"]
    calls = [(b["id"], b["name"], json.loads(j)) for b, j in list(blocks.values())[1:]]
    assert [c[2] for c in calls] == want and calls[0][0] != calls[1][0]
    assert {c[1] for c in calls} == {"get_weather"}
    delta = next(e for e in events if e["type"] == "message_delta")["delta"]
    assert delta["stop_reason"] == "tool_use"


def test_vllm_36435_streamed_response_tool_calls_after_reasoning(tok: Any) -> None:
    """vllm-project/vllm#36435: a streamed ``/v1/responses`` answer of a model that reasons and
    then calls tools sent the calls' markup as ``response.output_text.delta`` text (the tool
    parser never ran after the reasoning parser) instead of function-call items. Expected (the
    Responses streaming events; the unstreamed response as the oracle): a reasoning item with
    the reasoning, then one ``function_call`` item per call with its
    ``response.function_call_arguments.done`` arguments, no output text at all, and the completed
    response's output equal to the unstreamed one (types, names and arguments)."""
    tm = ChunkTM(tok, "Two cities, two calls.</think>" + TWO_CALLS, per_chunk=2)
    client, tc = client_for(tm)
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}]
    body = {
        "model": "m",
        "input": "Weather in Oslo and Rome?",
        "tools": tools,
        "reasoning": {"effort": "high"},
    }

    def shape(output: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(o["type"], o.get("name"), o.get("arguments")) for o in output]

    full = tc.post("/v1/responses", json=body).json()
    want = [
        ("reasoning", None, None),
        ("function_call", "get_weather", '{"city": "Oslo"}'),
        ("function_call", "get_weather", '{"city": "Rome", "days": 2}'),
    ]
    assert shape(full["output"]) == want
    assert [c["text"] for c in full["output"][0]["content"]] == ["Two cities, two calls."]
    events = typed_sse(tc.post("/v1/responses", json={**body, "stream": True}).text)
    assert not [e for e in events if e["type"].startswith("response.output_text")]
    done = [e["arguments"] for e in events if e["type"] == "response.function_call_arguments.done"]
    assert done == [w[2] for w in want[1:]]
    assert events[-1]["type"] == "response.completed" and shape(events[-1]["response"]["output"]) == want

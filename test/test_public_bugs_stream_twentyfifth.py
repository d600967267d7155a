"""A twenty-fifth set of public bug reports on server-sent-event streams and the reasoning split:
what a stream sends must add up to the answer of the same request not streamed.

Fixed here: a thinking-mode generation that ended while its reasoning was still open (no
``</think>``) and *stopped* (EOS, a stop token) had its text streamed twice, first as
``reasoning_content`` deltas and then again, whole, as ``content`` at the finish (the Responses
stream likewise: reasoning deltas, then the same text as a message), while the non-streamed answer
had it as ``content`` only. A stream cannot take back what it sent, so such a reasoning now stays
reasoning everywhere, streamed or not (chat, Responses and Messages alike), as DeepSeek's own
response parser and SGLang's and vLLM's DeepSeek detectors read it; one cut by ``max_tokens``
already did. The other reports passed as they were; their tests are regression guards.

Fixtures: the OpenAI and Anthropic routers in process over fake tokenizer managers
(``chat_tools_testutil.ChunkTM``: several tokens an output, EOS / ``max_tokens`` finishes;
``CharTM``: one character an output).
Oracles: the same request not streamed, DeepSeek's response parser (``deepseek-recipe``), the
tokenizer's decode, the ``openai`` client's chunk types and stream accumulator, and the
reports' stated expected values.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from anthropic_testutil import make_clients
from anthropic_testutil import post as messages_post
from chat_tools_testutil import WEATHER, CharTM, ChunkTM, accumulate
from deepseek_recipe_testutil import recipe_message
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from fake_prompt_tm import MODEL
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai_fake_tm import sse_data_events
from responses_testutil import post as responses_post
from transformers import PreTrainedTokenizerFast

HI = [{"role": "user", "content": "Hi"}]
ON = {"chat_template_kwargs": {"thinking": True}}
#: a thinking-mode reply that never writes ``</think>``; its last characters could start one
OPEN = "I will answer directly. Hello there, friend </"


REASONING = "The user greets me, so I reply in kind."
ANSWER = "Hello! How can I help you today?"
CLOSED = REASONING + "</think>" + ANSWER
CALL = dsml_block(dsml_invoke("get_weather", dsml_param("city", True, "Paris")))


def _msg(m: Any) -> tuple[str, str]:
    """``(reasoning_content, content)`` of a non-streamed chat message, ``""`` for a missing one."""
    return (m.model_extra or {}).get("reasoning_content") or "", m.content or ""


def _chunks(tc: Any, body: dict[str, Any], path: str = "/v1/chat/completions") -> list[dict[str, Any]]:
    """The JSON chunks of a streamed request (checked to end with ``[DONE]``)."""
    r = tc.post(path, json={**body, "stream": True})
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events and events[-1] == "[DONE]"
    return events[:-1]


def _recipe(reply: str, finish: str = "stop", **body: Any) -> tuple[str, str]:
    """DeepSeek's response parser's ``(reasoning_content, content)`` of a thinking-mode ``reply``."""
    m = recipe_message({"messages": HI, **body}, reply, True, finish)
    return m.get("reasoning_content") or "", m.get("content") or ""


def _overlap(a: str, b: str) -> bool:
    """Whether the two texts share a piece of text of 4+ characters (the same text sent twice)."""
    a, b = a.strip(), b.strip()
    return bool(a and b) and any(a[i : i + 4] in b for i in range(max(len(a) - 3, 1)))


# --------------------------------------------------------------------------- unclosed reasoning


@pytest.mark.parametrize("per_chunk", [1, 3])
@pytest.mark.parametrize("stream_reasoning", [True, False])
@pytest.mark.parametrize("cut", [None, 5], ids=["eos", "max_tokens"])
def test_unclosed_reasoning_chat_stream_adds_up_to_the_whole_answer(
    tok: PreTrainedTokenizerFast, per_chunk: int, stream_reasoning: bool, cut: int | None
) -> None:
    """vllm-project/vllm#50753 (its streamed fallback re-emits an unterminated reasoning as
    content at a ``stop`` finish, after streaming it as reasoning) on vllm-project/vllm#48645.
    Expected: the chat stream's ``reasoning_content`` deltas joined and ``content`` deltas joined
    equal the non-streamed message's ``reasoning_content`` and ``content``, and no text is in
    both, whether the generation stopped (EOS) or was cut by ``max_tokens``."""
    _, oa, _ = make_clients(ChunkTM(tok, OPEN, per_chunk=per_chunk))
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": HI,
        "extra_body": dict(ON, stream_reasoning=stream_reasoning),
    }
    if cut is not None:
        body["max_tokens"] = cut
    whole = oa.chat.completions.create(**body).choices[0]
    want_r = (whole.message.model_extra or {}).get("reasoning_content") or ""
    want_c = whole.message.content or ""
    s = accumulate(oa.chat.completions.create(**body, stream=True))
    assert (s["reasoning"], s["content"]) == (want_r, want_c)
    assert s["finish"] == whole.finish_reason == ("length" if cut else "stop")
    assert not _overlap(s["reasoning"], s["content"])
    assert want_r and not want_c  # never closed: reasoning only (the text once)
    # DeepSeek's own response parser reads the generated text the same way
    sent = tok.decode(tok.encode(OPEN, add_special_tokens=False)[:cut])
    assert (want_r, want_c) == _recipe(sent, "length" if cut else "stop")


@pytest.mark.parametrize("cut", [None, 5], ids=["eos", "max_tokens"])
def test_unclosed_reasoning_responses_stream_adds_up(tok: PreTrainedTokenizerFast, cut: int | None) -> None:
    """The same on ``/v1/responses``: the stream's reasoning and output text deltas joined equal
    the non-streamed response's reasoning item and message text, with no text in both (the
    stream used to send the reasoning deltas and then the same text as a message)."""
    _, _, tc = make_clients(ChunkTM(tok, OPEN))
    body: dict[str, Any] = {"input": "Hi", "reasoning": {"effort": "high"}}
    if cut is not None:
        body["max_output_tokens"] = cut
    whole, events = responses_post(tc, body)
    texts = {"reasoning": "", "message": ""}
    for item in whole["output"]:
        for part in item.get("content") or []:
            texts[item["type"]] += part["text"]
    got_r = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    got_c = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert (got_r, got_c) == (texts["reasoning"], texts["message"])
    assert got_r and not _overlap(got_r, got_c)
    final = next(e for e in events if e["type"] in ("response.completed", "response.incomplete"))
    assert [o["type"] for o in final["response"]["output"]] == [o["type"] for o in whole["output"]]


@pytest.mark.parametrize("cut", [None, 5], ids=["eos", "max_tokens"])
def test_unclosed_reasoning_messages_stream_adds_up(tok: PreTrainedTokenizerFast, cut: int | None) -> None:
    """The same on ``/v1/messages``: the streamed ``thinking_delta`` and ``text_delta`` texts
    joined equal the non-streamed message's ``thinking`` and ``text`` blocks, no text in both."""
    _, _, tc = make_clients(ChunkTM(tok, OPEN))
    body: dict[str, Any] = {"messages": HI, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    if cut is not None:
        body["max_tokens"] = cut
    whole, events = messages_post(tc, body)
    want = {"thinking": "", "text": ""}
    for b in whole["content"]:
        want[b["type"]] += b.get("thinking", b.get("text", ""))
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    got_t = "".join(d.get("thinking", "") for d in deltas if d["type"] == "thinking_delta")
    got_c = "".join(d.get("text", "") for d in deltas if d["type"] == "text_delta")
    assert (got_t, got_c) == (want["thinking"], want["text"])
    assert got_t and not _overlap(got_t, got_c)


# --------------------------------------------------------------------------- the reasoning split


@pytest.mark.parametrize("per_chunk", [1, 4, 1000])
def test_omlx_2043_prompt_opened_thinking_streams_as_reasoning(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """jundot/omlx#2043 (a chat template whose prompt already opens ``<think>`` had the first
    reasoning tokens streamed as ``delta.content`` until ``</think>``) and
    raullenchai/Rapid-MLX#219 (one delta holding the end of the thought, the marker and the start
    of the answer was put whole on one side; ``per_chunk`` 1000 sends the reply in one output).
    DeepSeek-V4's thinking prompt ends with ``<think>``. Expected: every ``reasoning_content``
    delta comes before the first ``content`` delta, the joined fields are DeepSeek's response
    parser's split of the reply, the same as the non-streamed message, and no tag is in either."""
    _, oa, tc = make_clients(ChunkTM(tok, CLOSED, per_chunk=per_chunk))
    body: dict[str, Any] = {"model": MODEL, "messages": HI, **ON}
    chunks = _chunks(tc, body)
    kinds = [
        k
        for c in chunks
        for k in ("reasoning_content", "content")
        if c["choices"] and c["choices"][0]["delta"].get(k)
    ]
    assert kinds and kinds == sorted(kinds, key=lambda k: k == "content")
    joined = tuple(
        "".join(c["choices"][0]["delta"].get(k) or "" for c in chunks if c["choices"])
        for k in ("reasoning_content", "content")
    )
    assert joined == _recipe(CLOSED) == (REASONING, ANSWER)
    whole = oa.chat.completions.create(model=MODEL, messages=HI, extra_body=ON).choices[0].message
    assert _msg(whole) == joined
    assert not any("think>" in t for t in joined)


@pytest.mark.parametrize("tools", [False, True], ids=["no_tools", "tools"])
def test_xinfer_332_reasoning_split_without_tools_too(tok: PreTrainedTokenizerFast, tools: bool) -> None:
    """guoqingbao/xinfer#332 (the reasoning was split off only when tools were offered: a plain
    chat kept ``<think>…</think>`` in ``content``) and antirez/ds4#13 (DeepSeek-V4's chat stream
    put the thinking in ``content`` when no tools were requested). Expected, with and without
    tools, streamed and not: ``reasoning_content`` and ``content`` are DeepSeek's response
    parser's split, and no ``</think>`` is in the content."""
    _, oa, _ = make_clients(ChunkTM(tok, CLOSED, per_chunk=2))
    body: dict[str, Any] = {"model": MODEL, "messages": HI, "extra_body": ON}
    if tools:
        body["tools"] = [WEATHER]
    whole = oa.chat.completions.create(**body).choices[0].message
    s = accumulate(oa.chat.completions.create(**body, stream=True))
    assert _msg(whole) == (s["reasoning"], s["content"]) == _recipe(CLOSED) == (REASONING, ANSWER)


def test_omlx_569_non_streamed_reasoning_is_filled(tok: PreTrainedTokenizerFast) -> None:
    """jundot/omlx#569 (``reasoning_content`` was null in non-streamed chat completions while
    the stream carried it). Expected: the non-streamed message's ``reasoning_content`` is the
    streamed ``reasoning_content`` deltas joined, not null; the non-streamed Responses answer's
    reasoning item is the streamed ``response.reasoning_text.delta`` texts joined."""
    _, oa, tc = make_clients(ChunkTM(tok, CLOSED))
    whole = oa.chat.completions.create(model=MODEL, messages=HI, extra_body=ON).choices[0].message
    s = accumulate(oa.chat.completions.create(model=MODEL, messages=HI, extra_body=ON, stream=True))
    assert (whole.model_extra or {}).get("reasoning_content") == s["reasoning"] == REASONING
    r, events = responses_post(tc, {"input": "Hi", "reasoning": {"effort": "high"}})
    item = next(o for o in r["output"] if o["type"] == "reasoning")
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert item["content"][0]["text"] == streamed == REASONING


@pytest.mark.parametrize("cut", [3, 7])
def test_tt_inference_2574_reasoning_cut_by_max_tokens_is_returned(
    tok: PreTrainedTokenizerFast, cut: int
) -> None:
    """tenstorrent/tt-inference-server#2574 (a non-streamed answer cut by ``max_tokens`` before
    ``</think>`` came back with empty ``content`` and no reasoning at all). Expected: the
    ``reasoning_content`` is the text of the ``cut`` tokens generated (the tokenizer's decode),
    ``content`` empty, ``finish_reason`` ``"length"``, ``reasoning_tokens`` ``cut``; streamed the same."""
    _, oa, _ = make_clients(ChunkTM(tok, CLOSED))
    body: dict[str, Any] = {"model": MODEL, "messages": HI, "extra_body": ON, "max_tokens": cut}
    r = oa.chat.completions.create(**body)
    want = tok.decode(tok.encode(CLOSED, add_special_tokens=False)[:cut])
    assert _msg(r.choices[0].message) == (want, "") and r.choices[0].finish_reason == "length"
    assert r.usage is not None and (r.usage.model_extra or {}).get("reasoning_tokens") == cut
    s = accumulate(oa.chat.completions.create(**body, stream=True))
    assert (s["reasoning"], s["content"], s["finish"]) == (want, "", "length")


@pytest.mark.parametrize(
    "reply",
    ["weighing it</think>Answer.", "<think>weighing it</think>Answer.", "a <my-tag> b</think><x>c</x> <"],
    ids=["plain", "leading_think", "xml_tags"],
)
def test_split_think_tag_across_deltas_is_never_leaked(tok: PreTrainedTokenizerFast, reply: str) -> None:
    """waybarrios/vllm-mlx#677 (``weighing it</think>Answer.`` streamed five characters at a
    time gave reasoning ``weighing it</thi`` and content ``nk>Answer.``), NVIDIA/TensorRT-LLM#17369
    (``<think>`` / ``</think>`` split across chunks; one-shot and chunked parses must agree) and
    sgl-project/sglang#8606 (xml-like text held as a possible tag start came out scrambled,
    ``"<", "my-tag", ">"`` as ``"my-tag>"``). Expected, the reply streamed one character an
    output: the joined ``reasoning_content`` / ``content`` are DeepSeek's response parser's split
    (a leading ``<think>`` dropped, as in SGLang's detectors), equal to the non-streamed message."""
    tm = CharTM(tok, reply, "stop")
    _, oa, _ = make_clients(tm)
    body: dict[str, Any] = {"model": MODEL, "messages": HI, "extra_body": ON, "max_tokens": len(reply)}
    whole = _msg(oa.chat.completions.create(**body).choices[0].message)
    s = accumulate(oa.chat.completions.create(**body, stream=True))
    want = _recipe(reply.removeprefix("<think>"))
    assert (s["reasoning"], s["content"]) == whole == want
    assert not any(f in s["reasoning"] + s["content"] for f in ("</thi", "nk>", "<think>"))


def test_cc_switch_6319_responses_stream_keeps_reasoning_out_of_the_text(
    tok: PreTrainedTokenizerFast,
) -> None:
    """farion1231/cc-switch#6319 (a chat-to-Responses stream leaked reasoning and fragments of
    the think tags into ``response.output_text.delta`` and sent text twice). Expected, the reply
    streamed one character an output on ``/v1/responses``: the reasoning deltas join to the
    reasoning and the output text deltas to the answer (DeepSeek's response parser's split), no
    delta holds a piece of a tag, and the final response has the same two items."""
    tm = CharTM(tok, CLOSED, "stop")
    _, _, tc = make_clients(tm)
    whole, events = responses_post(
        tc, {"input": "Hi", "reasoning": {"effort": "high"}, "max_output_tokens": len(CLOSED)}
    )
    rs = [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"]
    ts = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert ("".join(rs), "".join(ts)) == _recipe(CLOSED)
    assert not any(("<" in d or ">" in d) for d in rs + ts)
    final = events[-1]["response"]
    texts = [(o["type"], o["content"][0]["text"]) for o in final["output"]]
    assert texts == [(o["type"], o["content"][0]["text"]) for o in whole["output"]]
    assert texts == [("reasoning", REASONING), ("message", ANSWER)]


# --------------------------------------------------------------------------- the stream's chunks


def test_optillm_329_stream_carries_reasoning_calls_and_usage(tok: PreTrainedTokenizerFast) -> None:
    """algorithmicsuperintelligence/optillm#329 (a streamed answer kept only ``message.content``:
    a tool call or a reasoning came back as a bare ``[DONE]``). Expected for a thinking-mode reply
    that reasons and then calls a tool, streamed with ``include_usage``: reasoning deltas, a
    ``tool_calls`` delta with its ``index``, and a last chunk with ``usage`` and no choices; the
    ``openai`` client's stream accumulator gives the non-streamed message (reasoning, call,
    arguments, ``finish_reason``)."""
    reply = REASONING + "</think>" + CALL
    _, oa, tc = make_clients(ChunkTM(tok, reply, per_chunk=2))
    body: dict[str, Any] = {"model": MODEL, "messages": HI, "tools": [WEATHER], **ON}
    chunks = _chunks(tc, {**body, "stream_options": {"include_usage": True}})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert any(d.get("reasoning_content") for d in deltas)
    calls = [tc_ for d in deltas for tc_ in d.get("tool_calls") or []]
    assert calls and all(c["index"] == 0 for c in calls)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert all(c.get("usage") is None for c in chunks[:-1])
    state = ChatCompletionStreamState()
    for c in chunks:
        state.handle_chunk(openai.types.chat.ChatCompletionChunk.model_validate(c))
    got = state.get_final_completion().choices[0]
    whole = oa.chat.completions.create(model=MODEL, messages=HI, tools=[WEATHER], extra_body=ON).choices[0]
    assert got.finish_reason == whole.finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in got.message.tool_calls or []] == [
        (c.function.name, c.function.arguments) for c in whole.message.tool_calls or []
    ]
    assert (got.message.model_extra or {}).get("reasoning_content") == _msg(whole.message)[0] == REASONING


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_mellea_618_last_chunk_does_not_repeat_the_text(tok: PreTrainedTokenizerFast, path: str) -> None:
    """generative-computing/mellea#618 (a stream sent its pieces and then, as its last chunk,
    the whole generated text again) and tashfeenahmed/freellmapi#1007 (chunks carrying the
    accumulated text instead of the new suffix). Expected: each chunk's text is new text only
    (the text joined so far is always a prefix of the whole answer), no chunk carries the
    whole answer, and the joined text is the non-streamed answer."""
    _, _, tc = make_clients(ChunkTM(tok, ANSWER, per_chunk=2))
    chat = path.endswith("chat/completions")
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 50}
    body.update({"messages": HI} if chat else {"prompt": "Hi"})
    r = tc.post(path, json=body)
    assert r.status_code == 200, r.text
    whole = r.json()["choices"][0]["message"]["content"] if chat else r.json()["choices"][0]["text"]
    assert whole == ANSWER
    pieces = [
        (c["choices"][0]["delta"].get("content") if chat else c["choices"][0].get("text")) or ""
        for c in _chunks(tc, body, path)
        if c["choices"]
    ]
    joined = ""
    for p in pieces:
        joined += p
        assert ANSWER.startswith(joined)
    assert joined == ANSWER and ANSWER not in pieces and sum(1 for p in pieces if p) > 2


def test_memos_2234_reasoning_only_stream_ends_like_any_other(tok: PreTrainedTokenizerFast) -> None:
    """MemTensor/MemOS#2234 (a reasoning-only stream, no content chunk at all, was read as an
    empty or broken stream by a client that took the answer from the last delta). Expected for a
    reply cut by ``max_tokens`` inside its reasoning: a role chunk first, ``reasoning_content``
    deltas, no ``content`` text, one finish chunk with ``finish_reason`` ``"length"``, then
    ``[DONE]``; the ``openai`` client's accumulated snapshot is the non-streamed message."""
    _, oa, tc = make_clients(ChunkTM(tok, CLOSED))
    body: dict[str, Any] = {"model": MODEL, "messages": HI, "max_tokens": 5, **ON}
    chunks = _chunks(tc, body)
    choices = [c["choices"][0] for c in chunks]
    assert choices[0]["delta"].get("role") == "assistant"
    assert not "".join(c["delta"].get("content") or "" for c in choices)
    assert [c["finish_reason"] for c in choices if c["finish_reason"]] == ["length"]
    assert choices[-1]["finish_reason"] == "length"
    state = ChatCompletionStreamState()
    for c in chunks:
        state.handle_chunk(openai.types.chat.ChatCompletionChunk.model_validate(c))
    # its snapshot: get_final_completion() raises on a "length" finish (LengthFinishReasonError)
    got = state.current_completion_snapshot.choices[0].message
    whole = oa.chat.completions.create(model=MODEL, messages=HI, max_tokens=5, extra_body=ON).choices[0]
    assert _msg(got) == _msg(whole.message) and _msg(got)[0]


def test_dynamo_11251_stream_reasoning_false_sends_the_reasoning_whole(tok: PreTrainedTokenizerFast) -> None:
    """ai-dynamo/dynamo#11251 (a stream cannot take back a ``reasoning_content`` delta it has
    sent; neither the reasoning text nor ``</think>`` may land in ``content``). Expected with
    SGLang's ``stream_reasoning: false``: the reasoning comes in one ``reasoning_content`` delta
    once it ends, before any content; the content deltas join to the answer; both as DeepSeek's
    response parser splits the reply, and as the non-streamed message."""
    _, oa, tc = make_clients(ChunkTM(tok, CLOSED))
    body: dict[str, Any] = {"model": MODEL, "messages": HI, **ON, "stream_reasoning": False}
    deltas = [c["choices"][0]["delta"] for c in _chunks(tc, body) if c["choices"]]
    rs = [d["reasoning_content"] for d in deltas if d.get("reasoning_content")]
    first_content = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert (
        len(rs) == 1 and deltas.index(next(d for d in deltas if d.get("reasoning_content"))) < first_content
    )
    joined = (rs[0], "".join(d.get("content") or "" for d in deltas))
    assert (
        joined
        == _recipe(CLOSED)
        == _msg(oa.chat.completions.create(model=MODEL, messages=HI, extra_body=ON).choices[0].message)
    )

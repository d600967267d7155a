"""A twenty-eighth set of public bug reports on the OpenAI routes' server-sent-event streams: the
role-carrying opening delta of every choice (``n: 2`` included) and no role on later deltas, the
stream rebuilt into a whole message by the ``openai`` client's own accumulator, cumulative usage on
every chunk with ``stream_options.continuous_usage_stats`` (chat and legacy completions), one
finish chunk per choice whatever ended it, and a generation that fails after its first output
ending the stream with an error event and ``[DONE]`` that the ``openai`` client raises.

Fixture: the OpenAI router in-process over ``openai_fake_tm.FakeTM`` (a fixed reply written one
token per output, its ``meta_info`` counting prompt and completion tokens as the real manager
does), subclassed where a report needs the generation to fail mid-stream.
Oracles: the ``openai`` client's ``ChatCompletionChunk`` / ``Completion`` types, its
``ChatCompletionStreamState`` accumulator and its ``Stream`` reader (which raises ``APIError`` on
an ``error`` event), the DeepSeek-V4 tokenizer loaded by ``transformers`` (token counts of the
reply), and OpenAI's API reference (a chat stream opens each choice with ``delta.role``; with
``include_usage`` one extra chunk of ``choices: []`` precedes ``[DONE]``), vLLM's documented
``continuous_usage_stats`` (cumulative usage on every chunk, only with ``include_usage``).

Every report passed as it was; the tests are regression guards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events

MODEL = "dsv4-test"
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
USER = [{"role": "user", "content": "Hi"}]


def _chunks(tm: FakeTM, body: dict[str, Any]) -> list[ChatCompletionChunk]:
    """The chat stream of ``body`` on ``tm``, each event parsed as the client's chunk type."""
    r = app_client(tm).post(CHAT, json={"model": MODEL, "stream": True, **body})
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    return [ChatCompletionChunk.model_validate(e) for e in events[:-1]]


def _reply_ids(tok: Any, k: int = 0) -> list[int]:
    """The ids of ``FakeTM``'s default reply for choice ``k`` (``transformers``' encoding)."""
    return tok.encode("Hello there, general Kenobi." + (f" #{k}" if k else ""), add_special_tokens=False)


# --------------------------------------------------------------------------- role delta


@pytest.mark.parametrize("n", [1, 2])
def test_langwatch_6196_each_choice_opens_with_a_role_delta_and_only_once(tok: Any, n: int) -> None:
    """langwatch/langwatch#6196 and langwatch/langwatch#6214 (a chat stream whose first chunk was a
    bare content delta broke client accumulators keyed on the opening ``role`` delta; the fix adds
    the role per choice index, on the first delta only). Expected (OpenAI's stream): for every
    choice index ``0 .. n-1`` the first chunk of that index carries ``delta.role == "assistant"``
    before any of its content, and no later chunk of that index carries a role."""
    chunks = _chunks(FakeTM(tok), {"messages": USER, "max_tokens": 4, "n": n})
    seen: dict[int, list[Any]] = {}
    for c in chunks:
        for ch in c.choices:
            seen.setdefault(ch.index, []).append(ch.delta)
    assert sorted(seen) == list(range(n))
    for deltas in seen.values():
        assert deltas[0].role == "assistant"
        assert not deltas[0].content  # the opener carries no text of the answer
        assert [d.role for d in deltas[1:]] == [None] * (len(deltas) - 1)
        assert "".join(d.content or "" for d in deltas)  # content follows the opener


def test_bifrost_6541_client_accumulator_rebuilds_the_assistant_message(tok: Any) -> None:
    """maximhq/bifrost#6541 (the role-only opening delta was dropped, so SDKs that assemble a
    stream from its first delta built no assistant message) and EricLBuehler/mistral.rs#2294
    (streamed ``delta.content`` stayed null while the unstreamed answer had text). Expected: the ``openai`` client's own
    ``ChatCompletionStreamState`` fed every chunk gives one choice whose message role is
    ``assistant``, whose content is the unstreamed answer's content and whose finish reason is
    the unstreamed one's (``stop``: the accumulator refuses a ``length`` ending)."""
    tm = FakeTM(tok)
    whole = oai_client(app_client(tm)).chat.completions.create(model=MODEL, messages=USER, max_tokens=64)
    state = ChatCompletionStreamState()
    for c in _chunks(tm, {"messages": USER, "max_tokens": 64}):
        state.handle_chunk(c)
    (choice,) = state.get_final_completion().choices
    assert choice.message.role == "assistant"
    assert choice.message.content == whole.choices[0].message.content == tok.decode(_reply_ids(tok))
    assert choice.finish_reason == whole.choices[0].finish_reason == "stop"


# --------------------------------------------------------------------------- continuous usage


def test_pydantic_ai_4056_continuous_usage_is_cumulative_and_ends_at_the_total(tok: Any) -> None:
    """pydantic/pydantic-ai#4056 and vllm-project/vllm#6540 / vllm-project/vllm#6652 (with
    ``continuous_usage_stats`` every chat chunk carries usage, and that usage is cumulative, so a
    client must take the last value, not the sum). Expected: every chunk before the usage chunk
    carries usage; ``prompt_tokens`` is the same on all of them; ``completion_tokens`` starts at 0
    on the role chunk, never decreases and grows by one per content token; ``total_tokens`` is
    their sum; the last chunk's usage equals the final usage chunk's, whose completion count is
    ``max_tokens``."""
    k = 4
    body = {
        "messages": USER,
        "max_tokens": k,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    chunks = _chunks(FakeTM(tok), body)
    *body_chunks, final = chunks
    assert final.choices == [] and final.usage is not None
    assert final.usage.completion_tokens == k
    usages = [c.usage for c in body_chunks]
    assert all(u is not None for u in usages)
    assert {u.prompt_tokens for u in usages} == {final.usage.prompt_tokens}
    counts = [u.completion_tokens for u in usages]
    assert counts[0] == 0 and counts == sorted(counts)
    assert all(u.total_tokens == u.prompt_tokens + u.completion_tokens for u in usages)
    tokens_so_far = 0
    for c, u in zip(body_chunks, usages, strict=True):
        if c.choices and c.choices[0].delta.content:
            tokens_so_far += 1
        assert u.completion_tokens == tokens_so_far
    assert usages[-1].model_dump() == final.usage.model_dump()


def test_vllm_6540_continuous_usage_needs_include_usage(tok: Any) -> None:
    """vllm-project/vllm#6540 (usage on each chat chunk is an option of ``stream_options``):
    vLLM's rule is that ``continuous_usage_stats`` adds usage to every chunk only together with
    ``include_usage``. Expected: with ``continuous_usage_stats`` alone, no chunk carries usage and
    no usage chunk is sent (chat and legacy completions alike)."""
    opts = {"continuous_usage_stats": True}
    chunks = _chunks(FakeTM(tok), {"messages": USER, "max_tokens": 2, "stream_options": opts})
    assert all(c.usage is None and c.choices for c in chunks)
    r = app_client(FakeTM(tok)).post(
        COMPLETIONS,
        json={"model": MODEL, "prompt": "Hi", "max_tokens": 2, "stream": True, "stream_options": opts},
    )
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    assert all(e.get("usage") is None and e["choices"] for e in events[:-1])


def test_vllm_6652_completions_continuous_usage_per_prompt_of_a_batch(tok: Any) -> None:
    """vllm-project/vllm#6652 (the completions stream's per-chunk usage, made the same for chat):
    each chunk's usage counts its own prompt and its own choice's tokens so far. Expected on a
    batch of two token-id prompts (3 and 2 ids) with ``n: 2``: every content chunk of indexes 0
    and 1 says ``prompt_tokens`` 3, of indexes 2 and 3 says 2; each choice's
    ``completion_tokens`` runs 1, 2; the final usage chunk counts each prompt once (5) and every
    choice's tokens (8)."""
    body = {
        "model": MODEL,
        "prompt": [[1, 2, 3], [4, 5]],
        "max_tokens": 2,
        "n": 2,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    events = sse_data_events(app_client(FakeTM(tok)).post(COMPLETIONS, json=body))
    assert events[-1] == "[DONE]"
    # the client types streamed legacy chunks with ``construct`` (a ``finish_reason`` of null is
    # not one of ``Completion``'s literals), so they are read as JSON here
    *chunks, final = events[:-1]
    per: dict[int, list[tuple[int, int]]] = {}
    for c in chunks:
        (ch,) = c["choices"]
        u = CompletionUsage.model_validate(c["usage"])
        assert u.total_tokens == u.prompt_tokens + u.completion_tokens
        per.setdefault(ch["index"], []).append((u.prompt_tokens, u.completion_tokens))
    assert per == {0: [(3, 1), (3, 2)], 1: [(3, 1), (3, 2)], 2: [(2, 1), (2, 2)], 3: [(2, 1), (2, 2)]}
    assert final["choices"] == []
    usage = CompletionUsage.model_validate(final["usage"])
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (5, 8, 13)


# --------------------------------------------------------------------------- finish chunk


@pytest.mark.parametrize(("max_tokens", "reason"), [(3, "length"), (64, "stop")])
@pytest.mark.parametrize("n", [1, 2])
def test_fms_guardrails_431_one_finish_chunk_per_choice(
    tok: Any, max_tokens: int, reason: str, n: int
) -> None:
    """foundation-model-stack/fms-guardrails-orchestrator#431 (the chat chunk carrying
    ``finish_reason`` was not sent in all cases). Expected, whether the answer ends at
    ``max_tokens`` (``length``) or at its end of sequence (``stop``): each choice index gets
    exactly one chunk with a ``finish_reason``, that reason, and it is the index's last chunk;
    the joined content is the reply's tokens up to the limit."""
    chunks = _chunks(FakeTM(tok), {"messages": USER, "max_tokens": max_tokens, "n": n})
    for i in range(n):
        mine = [ch for c in chunks for ch in c.choices if ch.index == i]
        reasons = [ch.finish_reason for ch in mine]
        assert reasons[-1] == reason and reasons[:-1] == [None] * (len(mine) - 1), reasons
        want = tok.decode(_reply_ids(tok, i)[:max_tokens])
        assert "".join(ch.delta.content or "" for ch in mine) == want


# --------------------------------------------------------------------------- empty deltas


class _HeldTM(FakeTM):
    """``FakeTM`` whose second output repeats the first one's text, as the detokenizer does while
    a character's bytes are incomplete (the token is counted and has its logprob, no new text)."""

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        """``FakeTM``'s stream with the second output's text held back to the first's."""
        outs = [out async for out in super().generate_request(obj, request)]
        outs[1] = dict(outs[1], text=outs[0]["text"])
        for out in outs:
            yield out


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
def test_dynamo_8036_held_back_text_sends_no_empty_chunk_and_keeps_logprobs(tok: Any, route: str) -> None:
    """ai-dynamo/dynamo#8036 and agentgateway/agentgateway#2148 (a token whose bytes did not yet
    make a character produced a chunk with no content, no finish reason and no usage, which
    clients rendered or choked on). Expected: apart from the chat stream's role opener, no chunk
    is empty (each carries text, a finish reason or usage); the joined text is the reply's first
    ``k`` tokens; and the streamed logprobs still name every one of the ``k`` tokens in order (the
    held token's entry travels with the next text)."""
    k = 4
    ids = _reply_ids(tok)[:k]
    if route == CHAT:
        prompt: dict[str, Any] = {"messages": USER, "logprobs": True}
    else:
        prompt = {"prompt": "Hi", "logprobs": 1}
    body = {"model": MODEL, "stream": True, "max_tokens": k, **prompt}
    events = sse_data_events(app_client(_HeldTM(tok)).post(route, json=body))
    assert events[-1] == "[DONE]"
    text, tokens = "", []
    for i, e in enumerate(events[:-1]):
        (ch,) = e["choices"]
        piece = ch["delta"]["content"] if route == CHAT else ch["text"]
        if route == CHAT and i == 0:
            assert ch["delta"]["role"] == "assistant"
            continue
        assert piece or ch["finish_reason"], e
        text += piece or ""
        lp = ch["logprobs"]
        if lp is not None:
            tokens += [t["token"] for t in lp["content"]] if route == CHAT else lp["tokens"]
    assert text == tok.decode(ids)
    assert tokens == [tok.decode([t]) for t in ids]


# --------------------------------------------------------------------------- error mid-stream


class _FailingTM(FakeTM):
    """``FakeTM`` whose generation raises ``RuntimeError`` after its second output."""

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        """The first two outputs of ``FakeTM``'s stream, then ``RuntimeError("engine died")``."""
        sent = 0
        async for out in super().generate_request(obj, request):
            yield out
            sent += 1
            if sent == 2:
                raise RuntimeError("engine died")


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
def test_mastra_22097_mid_stream_failure_ends_with_error_event_and_done(tok: Any, route: str) -> None:
    """mastra-ai/mastra#22097, modelship-ai/modelship#187, preloop/preloop#117 and
    lobehub/lobehub#13199 (a stream whose source failed after chunks were sent was cut off with
    no error and no ``[DONE]``, indistinguishable from a clean end). Expected: the chunks sent
    before the failure, then one ``data: {"error": {...}}`` event (message naming the failure,
    code 500), then ``data: [DONE]``; and the ``openai`` client's stream reader, having yielded
    the earlier chunks, raises ``APIError`` with that message."""
    prompt = {"messages": USER} if route == CHAT else {"prompt": "Hi"}
    r = app_client(_FailingTM(tok)).post(
        route, json={"model": MODEL, "stream": True, "max_tokens": 5, **prompt}
    )
    assert r.status_code == 200
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    err = events[-2]["error"]
    assert "engine died" in err["message"] and err["code"] == 500
    assert all("error" not in e for e in events[:-2]) and len(events) >= 4
    client = oai_client(app_client(_FailingTM(tok)))
    got: list[Any] = []
    with pytest.raises(openai.APIError) as ei:
        if route == CHAT:
            for c in client.chat.completions.create(model=MODEL, messages=USER, max_tokens=5, stream=True):
                got.append(c)
        else:
            for c in client.completions.create(model=MODEL, prompt="Hi", max_tokens=5, stream=True):
                got.append(c)
    assert "engine died" in ei.value.message
    assert len(got) == len(events) - 2

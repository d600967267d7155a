"""A thirty-second set of public bug reports, replayed against ``POST /v1/chat/completions``: the
``role`` and ``index`` of each choice's first streamed chunk and the one ``finish_reason`` per
choice that a client's stream assembler needs, ``finish_reason`` on non-streamed answers,
``max_completion_tokens`` honoured (alone or sent beside an equal ``max_tokens``),
``usage.prompt_tokens_details.cached_tokens`` with the cache report on, the usage-only chunk sent
only on request and only last, an empty system message and an empty text part in history, and an
assistant ``prefix`` allowed only on the final assistant message.

The route runs in process over the fake tokenizer manager of ``openai_fake_tm`` (fixed reply
``"Hello there, general Kenobi."``; its choice ``k`` > 0 writes ``" #k"`` after it; it reports
3 cached prompt tokens). Oracles: the ``openai`` client's types and its own stream assembler
(``client.chat.completions.stream``), the ``transformers`` tokenizer of ``tok`` for token counts
and truncated texts, the prompt of an equivalent request without the empty part, and OpenAI's
documented chat completion / chunk objects.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events
from transformers import PreTrainedTokenizerFast

openai = pytest.importorskip("openai")

from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

CHAT = "/v1/chat/completions"
MODEL = "dsv4-test"
HI = [{"role": "user", "content": "Hi"}]
REPLY = "Hello there, general Kenobi."


def _post(tm: FakeTM, body: dict[str, Any], **server: Any) -> Any:
    """The raw response to ``body`` (``model`` and ``messages`` ``HI`` unless set)."""
    return app_client(tm, **server).post(CHAT, json={"model": MODEL, "messages": HI, **body})


def _chunks(tm: FakeTM, body: dict[str, Any], **server: Any) -> list[dict[str, Any]]:
    """The decoded ``data:`` events of a streamed answer to ``body``; asserts it ends with ``[DONE]``
    and drops that."""
    r = _post(tm, {**body, "stream": True}, **server)
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events and events[-1] == "[DONE]"
    return events[:-1]


def _prompt(tm: FakeTM, tok: PreTrainedTokenizerFast) -> str:
    """The prompt text of the last request ``tm`` received."""
    sub = tm.received[-1]
    return sub.text if sub.text is not None else tok.decode(sub.input_ids)


def _reply_ids(tok: PreTrainedTokenizerFast, k: int = 0) -> list[int]:
    """The token ids of choice ``k``'s reply, as the independent tokenizer encodes it."""
    return tok.encode(REPLY + (f" #{k}" if k else ""), add_special_tokens=False)


def test_one_api_1037_first_chunk_of_each_choice_names_index_and_role(tok: PreTrainedTokenizerFast) -> None:
    """songquanpeng/one-api#1037: stream chunks without ``index`` and a first delta without
    ``role: "assistant"`` made the official client fail ('missing role for choice 0'). Expected
    (OpenAI's chunk object): with ``n`` = 2, each choice's first chunk carries its ``index`` and
    ``role`` ``"assistant"``, no later chunk of that choice names another role, and every chunk
    parses as the client's ``ChatCompletionChunk``."""
    events = _chunks(FakeTM(tok), {"n": 2})
    seen: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        ChatCompletionChunk.model_validate(e)
        for ch in e["choices"]:
            seen.setdefault(ch["index"], []).append(ch)
    assert sorted(seen) == [0, 1]
    for chs in seen.values():
        assert chs[0]["delta"].get("role") == "assistant"
        assert all(c["delta"].get("role") in (None, "assistant") for c in chs[1:])


def test_openai_node_499_stream_assembler_finds_a_finish_reason_per_choice(
    tok: PreTrainedTokenizerFast,
) -> None:
    """openai/openai-node#499: the client's stream assembler raised 'missing finish_reason for
    choice' when the server's chunks left it out. Expected: the ``openai`` client's own assembler
    (``chat.completions.stream``) ends an ``n`` = 2 stream with ``finish_reason`` ``"stop"`` and
    role ``assistant`` on both choices, and each text is the reply the independent tokenizer
    decodes from its ids."""
    client = oai_client(app_client(FakeTM(tok)))
    with client.chat.completions.stream(model=MODEL, messages=HI, n=2) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    assert [c.index for c in final.choices] == [0, 1]
    for c in final.choices:
        assert c.finish_reason == "stop"
        assert c.message.role == "assistant"
        assert c.message.content == tok.decode(_reply_ids(tok, c.index))


def test_lightllm_130_each_choice_has_one_finish_reason_on_its_last_chunk(
    tok: PreTrainedTokenizerFast,
) -> None:
    """ModelTC/LightLLM#130: every streamed chunk had ``finish_reason`` ``null`` (the end was never
    marked) and ``stop`` was refused. Expected: with ``stop`` given, the request is served, the stop
    strings reach the sampler, and each choice has exactly one chunk with a ``finish_reason``, its
    last, ``"stop"`` for a reply that ended by itself."""
    tm = FakeTM(tok)
    events = _chunks(tm, {"n": 2, "stop": ["Obi-Wan"]})
    sp = tm.received[-1].sampling_params
    assert all(p["stop"] == ["Obi-Wan"] for p in (sp if isinstance(sp, list) else [sp]))
    per: dict[int, list[Any]] = {}
    for e in events:
        for ch in e["choices"]:
            per.setdefault(ch["index"], []).append(ch["finish_reason"])
    assert sorted(per) == [0, 1]
    for reasons in per.values():
        assert reasons[-1] == "stop"
        assert all(r is None for r in reasons[:-1])


def test_localai_788_non_streamed_choice_carries_index_and_finish_reason(
    tok: PreTrainedTokenizerFast,
) -> None:
    """mudler/LocalAI#788: a non-streamed ``chat.completion`` left out ``finish_reason`` (and
    ``index``). Expected (OpenAI's chat completion object): each choice has its ``index`` and
    ``finish_reason`` ``"stop"`` for a reply that ended by itself, ``"length"`` for one cut by
    ``max_tokens``; the body parses as the client's ``ChatCompletion``."""
    for body, want in (({}, "stop"), ({"max_tokens": 2}, "length")):
        r = _post(FakeTM(tok), {**body, "n": 2})
        assert r.status_code == 200, r.text
        choices = r.json()["choices"]
        assert [c["index"] for c in choices] == [0, 1]
        assert [c["finish_reason"] for c in choices] == [want, want]
        ChatCompletion.model_validate(r.json())


@pytest.mark.parametrize("stream", [False, True])
def test_llama_cpp_python_1907_max_completion_tokens_caps_the_answer(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """abetlen/llama-cpp-python#1907 (``max_completion_tokens`` ignored) and
    ikawrakow/ik_llama.cpp#2321 (the cap dropped, and ``finish_reason`` ``stop`` where it hit).
    Expected: ``max_completion_tokens`` 3 alone caps the answer at 3 tokens, its text the reply's
    first 3 tokens as the independent tokenizer decodes them, ``finish_reason`` ``"length"`` and
    ``usage.completion_tokens`` 3, streamed or not."""
    body = {"max_completion_tokens": 3}
    want = tok.decode(_reply_ids(tok)[:3])
    if stream:
        events = _chunks(FakeTM(tok), {**body, "stream_options": {"include_usage": True}})
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
        finish = [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1]
        usage = events[-1]["usage"]
    else:
        r = _post(FakeTM(tok), body)
        assert r.status_code == 200, r.text
        typed = ChatCompletion.model_validate(r.json())
        text, finish = typed.choices[0].message.content, typed.choices[0].finish_reason
        usage = r.json()["usage"]
    assert text == want
    assert finish == "length"
    assert usage["completion_tokens"] == 3


def test_nanobot_2468_equal_max_tokens_and_max_completion_tokens_are_served(
    tok: PreTrainedTokenizerFast,
) -> None:
    """HKUDS/nanobot#2468: a client sends ``max_tokens`` and ``max_completion_tokens`` together with
    the same value so that old and new servers both read a cap. Expected: served (200), the cap
    applies once: 4 completion tokens, ``finish_reason`` ``"length"``."""
    tm = FakeTM(tok)
    r = _post(tm, {"max_tokens": 4, "max_completion_tokens": 4})
    assert r.status_code == 200, r.text
    sp = tm.received[-1].sampling_params
    assert (sp[0] if isinstance(sp, list) else sp)["max_new_tokens"] == 4
    assert r.json()["usage"]["completion_tokens"] == 4
    assert r.json()["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("stream", [False, True])
def test_aibrix_1607_cached_tokens_in_prompt_tokens_details(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """vllm-project/aibrix#1607: ``/chat/completions`` stopped returning
    ``usage.prompt_tokens_details.cached_tokens``. Expected with the cache report on: the usage
    (the non-streamed body's, or the streamed usage chunk's) carries the engine's cached count
    (3) under ``prompt_tokens_details.cached_tokens``, counted once for an ``n`` = 2 request as
    its prompt is, and the client's ``CompletionUsage`` reads it."""
    tm = FakeTM(tok)
    if stream:
        events = _chunks(tm, {"n": 2, "stream_options": {"include_usage": True}}, enable_cache_report=True)
        usage = ChatCompletionChunk.model_validate(events[-1]).usage
    else:
        r = _post(tm, {"n": 2}, enable_cache_report=True)
        assert r.status_code == 200, r.text
        usage = ChatCompletion.model_validate(r.json()).usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 3
    ids = tm.received[-1].input_ids
    assert usage.prompt_tokens == len(ids[0] if isinstance(ids[0], list) else ids)
    assert usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens


def test_gittensor_1750_usage_chunk_only_when_requested(tok: PreTrainedTokenizerFast) -> None:
    """entrius/gittensor#1750: a server sent the usage-only chunk (``choices: []``) on every stream,
    and strict parsers that expect a choice in each chunk failed. Expected (OpenAI's
    ``stream_options`` reference): without ``include_usage`` no chunk has empty ``choices`` and no
    chunk carries a usage object."""
    events = _chunks(FakeTM(tok), {"n": 2})
    assert events
    for e in events:
        assert e["choices"], e
        assert e.get("usage") is None


def test_partial_stream_22_usage_chunk_is_the_only_empty_one_and_last(tok: PreTrainedTokenizerFast) -> None:
    """st3w4r/openai-partial-stream#22: with ``include_usage`` the final chunk has no choices and a
    reader that indexed ``choices[0]`` failed on it. Expected (OpenAI's reference): exactly one
    chunk with ``choices == []``, the last before ``[DONE]``, whose usage totals the answer: prompt
    plus the completion tokens of the reply as the independent tokenizer counts them."""
    tm = FakeTM(tok)
    events = _chunks(tm, {"stream_options": {"include_usage": True}})
    empty = [i for i, e in enumerate(events) if e["choices"] == []]
    assert empty == [len(events) - 1]
    usage = ChatCompletionChunk.model_validate(events[-1]).usage
    assert usage is not None
    assert usage.completion_tokens == len(_reply_ids(tok))
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_lmstudio_2_empty_system_message_is_served(tok: PreTrainedTokenizerFast) -> None:
    """lmstudio-ai/lmstudio-bug-tracker#2: a request whose system message had ``content: ""`` was
    refused ('content field that is not empty'). Expected (OpenAI accepts it): served, and the
    prompt is the one the same request renders without the empty system message."""
    bare = FakeTM(tok)
    assert _post(bare, {}).status_code == 200
    tm = FakeTM(tok)
    r = _post(tm, {"messages": [{"role": "system", "content": ""}, *HI]})
    assert r.status_code == 200, r.text
    assert _prompt(tm, tok) == _prompt(bare, tok)


def test_nanobot_748_empty_text_part_in_assistant_history_is_served(tok: PreTrainedTokenizerFast) -> None:
    """HKUDS/nanobot#748: an assistant history turn sent as ``[{"type": "text", "text": ""}]`` was
    refused by a server ('text content blocks must be non-empty'). Expected (OpenAI accepts it):
    served, with the prompt of the same history whose assistant content is the string ``""``."""

    def history(content: Any) -> list[dict[str, Any]]:
        return [*HI, {"role": "assistant", "content": content}, {"role": "user", "content": "And?"}]

    as_str = FakeTM(tok)
    assert _post(as_str, {"messages": history("")}).status_code == 200
    tm = FakeTM(tok)
    r = _post(tm, {"messages": history([{"type": "text", "text": ""}])})
    assert r.status_code == 200, r.text
    assert _prompt(tm, tok) == _prompt(as_str, tok)


@pytest.mark.parametrize("role", ["user", "system"])
def test_mistral_common_246_prefix_on_a_trailing_non_assistant_message_is_refused(
    tok: PreTrainedTokenizerFast, role: str
) -> None:
    """mistralai/mistral-common#246: a trailing non-assistant message marked ``prefix`` slipped
    through validation. Expected: a 400 in OpenAI's error shape naming ``messages[i].prefix``, and
    nothing reaches the engine."""
    tm = FakeTM(tok)
    msgs = [{"role": "user", "content": "Hi"}, {"role": role, "content": "Go", "prefix": True}]
    r = _post(tm, {"messages": msgs})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert "messages[1].prefix" in err["message"]
    assert err["type"] == "BadRequestError"
    assert tm.received == []

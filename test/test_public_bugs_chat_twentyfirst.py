"""A twenty-first set of public bug reports, replayed against ``POST /v1/chat/completions``:
multi-part text content on system and assistant messages, a conversation of one assistant
message, ``echo`` (only an assistant turn being continued is echoed, and only that turn), the
streamed usage (no usage chunk unless asked for, ``continuous_usage_stats`` only under
``include_usage`` and counted per choice, the prompt counted once for ``n > 1``), reasoning cut
off by ``max_tokens``, ``continue_final_message`` in thinking mode, ``n > 1`` streams folded by the
client, and a non-text content part refused by name.

Fixed here: the 400 for a content part the route cannot take named ``param: "messages"``; it now
names the part (``messages[i].content[j]``), as the 400 for a null user ``content`` already named
the message. The other reports passed as-is; their tests are regression guards.

The route runs in process over the fake tokenizer manager of ``openai_fake_tm`` (fast tier).
Oracles: the prompt DeepSeek's own converter and V4 encoder (``deepseek-recipe``) render for the
same request, the DeepSeek-V4 tokenizer's own counts, a cold run of the same request without the
option under test, and the ``openai`` client's own chunk types.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _client
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")
openai = pytest.importorskip("openai")

from deepseek_recipe_testutil import recipe_prompt  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from thinking_chat_testutil import chat_route_prompt  # noqa: E402

CHAT = "/v1/chat/completions"
MODEL = "dsv4-test"
HI = [{"role": "user", "content": "Hi"}]
REPLY = "Hello there, general Kenobi."  # FakeTM's default reply (choice k > 0 appends " #k")


def _post(tok: PreTrainedTokenizerFast, body: dict[str, Any], reply: str = REPLY) -> Any:
    """The response of the chat route on a fresh fake tokenizer manager replying ``reply``."""
    return _client(FakeTM(tok, reply=reply)).post(CHAT, json={"model": MODEL, "max_tokens": 32, **body})


def _chunks(
    tok: PreTrainedTokenizerFast, body: dict[str, Any], reply: str = REPLY
) -> list[ChatCompletionChunk]:
    """The streamed chunks of ``body`` (``stream: true`` added) as the ``openai`` client types them;
    the stream must end with ``[DONE]``."""
    r = _post(tok, {**body, "stream": True}, reply)
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events and events[-1] == "[DONE]", events[-3:]
    return [ChatCompletionChunk.model_validate(e) for e in events[:-1]]


def _streamed_texts(chunks: list[ChatCompletionChunk]) -> tuple[dict[int, str], dict[int, str]]:
    """``(content, reasoning)`` per choice index, each the concatenation of its deltas."""
    content: dict[int, str] = {}
    reasoning: dict[int, str] = {}
    for ch in chunks:
        for c in ch.choices:
            content[c.index] = content.get(c.index, "") + (c.delta.content or "")
            extra = c.delta.model_extra or {}
            reasoning[c.index] = reasoning.get(c.index, "") + (extra.get("reasoning_content") or "")
    return content, reasoning


# --------------------------------------------------------------------------- message shapes


_MULTI_PART = {
    "system": [
        {
            "role": "system",
            "content": [{"type": "text", "text": "You are "}, {"type": "text", "text": "helpful."}],
        },
        {"role": "user", "content": "Hi"},
    ],
    "assistant": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo."}]},
        {"role": "user", "content": "Again"},
    ],
    "system_and_user": [
        {
            "role": "system",
            "content": [{"type": "text", "text": "Be terse."}, {"type": "text", "text": "Use bullets."}],
        },
        {"role": "user", "content": [{"type": "text", "text": "One"}, {"type": "text", "text": "Two"}]},
    ],
}


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("case", sorted(_MULTI_PART))
def test_sglang_37845_multi_part_text_on_system_and_assistant_messages(
    tok: PreTrainedTokenizerFast, case: str, thinking: bool
) -> None:
    """sgl-project/sglang#37845: ``content`` as a list of several text parts was accepted for a
    user message but answered 400 for a system or assistant message (the same text as one string
    worked). Expected: HTTP 200, and the prompt DeepSeek's own encoder renders for the same
    request (every part's text reaches the prompt, joined as DeepSeek joins them)."""
    body = {"messages": _MULTI_PART[case]}
    got = chat_route_prompt(tok, body, thinking)
    assert got == recipe_prompt(body, thinking, effort="low" if thinking else None)
    for m in _MULTI_PART[case]:
        if isinstance(m["content"], list):
            assert all(p["text"].strip() in got for p in m["content"])
    assert "'type'" not in got and "[{" not in got  # no Python/JSON rendering of the parts


@pytest.mark.parametrize("thinking", [False, True])
def test_sglang_3579_conversation_of_one_assistant_message(
    tok: PreTrainedTokenizerFast, thinking: bool
) -> None:
    """sgl-project/sglang#3579: ``messages`` holding only an assistant message was a 500 (the
    chat template raised). Expected: HTTP 200 and the answer; in chat mode the prompt DeepSeek's
    own encoder renders for it (the assistant turn opened and closed, then a new assistant turn
    opened for the answer; in thinking mode the fake reply, which never closes its reasoning, is the
    ``reasoning_content``). In thinking mode only the turn's text and the generation prompt are
    checked: the reference encoder keeps the reasoning of an assistant turn after the last user
    turn (there is none here), which the ``deepseek-recipe`` converter drops."""
    body = {"messages": [{"role": "assistant", "content": "Hello, who are you?"}]}
    got = chat_route_prompt(tok, body, thinking)
    if thinking:
        assert "Hello, who are you?<｜end▁of▁sentence｜>" in got and got.endswith("<｜Assistant｜><think>")
    else:
        assert got == recipe_prompt(body, thinking, effort="low" if thinking else None)
    r = _post(tok, {**body, "chat_template_kwargs": {"thinking": thinking}})
    assert r.status_code == 200, r.text
    msg = ChatCompletion.model_validate(r.json()).choices[0].message
    # the fake reply writes no ``</think>``: in thinking mode all of it is the reasoning
    got_text = (msg.model_extra or {}).get("reasoning_content") if thinking else msg.content
    assert got_text == REPLY


# --------------------------------------------------------------------------- echo


@pytest.mark.parametrize("stream", [False, True])
def test_vllm_52529_echo_does_not_prepend_a_trailing_user_turn(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """vllm-project/vllm#52529: with ``echo: true`` and the default ``add_generation_prompt``,
    the batched chat path prepended the last message (the user's own prompt) to the answer.
    Only an assistant turn being continued is echoed. Expected: the answer of a cold run of the
    same request without ``echo``, streamed or not."""
    msgs = [{"role": "user", "content": "USER PROMPT"}]
    cold = _post(tok, {"messages": msgs}).json()["choices"][0]["message"]["content"]
    if stream:
        got = _streamed_texts(_chunks(tok, {"messages": msgs, "echo": True}))[0][0]
    else:
        r = _post(tok, {"messages": msgs, "echo": True})
        assert r.status_code == 200, r.text
        got = r.json()["choices"][0]["message"]["content"]
    assert got == cold == REPLY
    assert "USER PROMPT" not in got


@pytest.mark.parametrize("stream", [False, True])
def test_llm_d_inference_sim_361_echo_is_the_last_message_only(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """llm-d/llm-d-inference-sim#361: an echoed chat request returned the text of every message
    of the conversation instead of the latest one. Expected (``echo`` with
    ``continue_final_message``): each choice's content is the final assistant message's text
    followed by that choice's answer of a cold run without ``echo``; no earlier message's text."""
    msgs = [
        {"role": "user", "content": "This is a test."},
        {"role": "assistant", "content": "This is an answer."},
        {"role": "user", "content": "This is a test 2."},
        {"role": "assistant", "content": "Partial"},
    ]
    base = {"messages": msgs, "n": 2, "continue_final_message": True, "add_generation_prompt": False}
    cold = [c["message"]["content"] for c in _post(tok, base).json()["choices"]]
    if stream:
        texts = _streamed_texts(_chunks(tok, {**base, "echo": True}))[0]
        got = [texts[i] for i in range(2)]
    else:
        r = _post(tok, {**base, "echo": True})
        assert r.status_code == 200, r.text
        got = [c["message"]["content"] for c in r.json()["choices"]]
    assert got == ["Partial" + c for c in cold]
    assert not any(m["content"] in g for g in got for m in msgs[:3])


# --------------------------------------------------------------------------- streamed usage


@pytest.mark.parametrize("options", [None, {"include_usage": False}])
def test_apfel_100_no_usage_chunk_unless_include_usage(
    tok: PreTrainedTokenizerFast, options: dict[str, Any] | None
) -> None:
    """Arthur-Ficial/apfel#100: a streamed chat completion ended with a ``choices: []`` usage
    chunk although ``stream_options.include_usage`` was not set, breaking clients that read
    ``chunk.choices[0]``. The usage chunk is opt-in (OpenAI's ``stream_options`` spec).
    Expected: every chunk has a choice and ``usage`` null, for ``n`` 1 and 2."""
    for n in (1, 2):
        body: dict[str, Any] = {"messages": HI, "n": n}
        if options is not None:
            body["stream_options"] = options
        chunks = _chunks(tok, body)
        assert chunks and all(ch.choices and ch.usage is None for ch in chunks), n
        assert sorted({c.index for ch in chunks for c in ch.choices}) == list(range(n))


def test_dynamo_11708_continuous_usage_needs_include_usage_and_counts_each_choice(
    tok: PreTrainedTokenizerFast,
) -> None:
    """ai-dynamo/dynamo#11708 (review): ``continuous_usage_stats`` is a sub-option of
    ``include_usage`` (ignored without it, as vLLM gates it), and with ``n > 1`` each chunk's
    running usage is its own choice's completion tokens, not the request-wide sum. Expected:
    without ``include_usage`` no chunk carries usage; with it, every choice chunk's
    ``completion_tokens`` is the token count of that choice's text so far (the tokenizer's
    count), ``prompt_tokens`` is constant, and the final usage chunk sums the choices."""
    chunks = _chunks(tok, {"messages": HI, "n": 2, "stream_options": {"continuous_usage_stats": True}})
    assert all(ch.usage is None for ch in chunks)

    opts = {"include_usage": True, "continuous_usage_stats": True}
    chunks = _chunks(tok, {"messages": HI, "n": 2, "stream_options": opts})
    *body, last = chunks
    texts: dict[int, str] = {0: "", 1: ""}
    prompt = {ch.usage.prompt_tokens for ch in chunks if ch.usage is not None}
    assert len(prompt) == 1
    for ch in body:
        (c,) = ch.choices
        texts[c.index] += c.delta.content or ""
        assert ch.usage is not None
        want = len(tok.encode(texts[c.index], add_special_tokens=False))
        assert ch.usage.completion_tokens == want, (c.index, texts[c.index])
        assert ch.usage.total_tokens == ch.usage.prompt_tokens + want
    assert texts == {0: REPLY, 1: REPLY + " #1"}
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == sum(
        len(tok.encode(t, add_special_tokens=False)) for t in texts.values()
    )


@pytest.mark.parametrize("stream", [False, True])
def test_openai_python_155_n_does_not_multiply_prompt_tokens(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """openai/openai-python#155 (confirmed there: prompt tokens do not scale with ``n``;
    inflating them by ``n`` is the bug of inclusionAI/AReno#460): ``usage.prompt_tokens`` of an
    ``n: 3`` request is the prompt counted once. Expected: the DeepSeek-V4 tokenizer's count of
    the prompt DeepSeek's encoder renders, equal to a cold ``n: 1`` run's; ``completion_tokens``
    is the sum over the choices."""
    want_prompt = len(
        tok.encode(recipe_prompt({"messages": HI}, False, effort=None), add_special_tokens=False)
    )
    cold = _post(tok, {"messages": HI}).json()["usage"]
    assert cold["prompt_tokens"] == want_prompt
    if stream:
        chunks = _chunks(tok, {"messages": HI, "n": 3, "stream_options": {"include_usage": True}})
        usage = chunks[-1].usage
        assert usage is not None and chunks[-1].choices == []
        texts = _streamed_texts(chunks)[0]
    else:
        r = _post(tok, {"messages": HI, "n": 3})
        assert r.status_code == 200, r.text
        resp = ChatCompletion.model_validate(r.json())
        usage = resp.usage
        texts = {c.index: c.message.content or "" for c in resp.choices}
    assert usage is not None and usage.prompt_tokens == want_prompt
    assert sorted(texts) == [0, 1, 2]
    assert usage.completion_tokens == sum(
        len(tok.encode(t, add_special_tokens=False)) for t in texts.values()
    )
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


# --------------------------------------------------------------------------- reasoning


def test_vllm_35221_reasoning_cut_by_max_tokens_stays_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#35221 (fixed by vllm-project/vllm#35296): in thinking mode, a
    generation cut by ``max_completion_tokens`` before ``</think>`` came back as ``content`` with
    ``reasoning_content`` null. Expected (streamed and not): ``finish_reason: "length"``, the
    reasoning is the generated text (the tokenizer's decode of the first ``max_tokens`` tokens of
    the reply), no content, and ``reasoning_tokens`` counts every generated token."""
    reply = "Let me think about the weather in Paris.</think>Sunny."
    limit = 4
    want = tok.decode(tok.encode(reply, add_special_tokens=False)[:limit])
    assert "</think>" not in want
    body = {"messages": HI, "max_completion_tokens": limit, "chat_template_kwargs": {"thinking": True}}
    r = _post(tok, {**body, "max_tokens": None}, reply=reply)
    assert r.status_code == 200, r.text
    resp = ChatCompletion.model_validate(r.json())
    (choice,) = resp.choices
    assert choice.finish_reason == "length"
    assert (choice.message.model_extra or {}).get("reasoning_content") == want
    assert not choice.message.content
    assert resp.usage is not None and resp.usage.completion_tokens == limit
    assert resp.usage.completion_tokens_details.reasoning_tokens == limit

    chunks = _chunks(
        tok, {**body, "max_tokens": None, "stream_options": {"include_usage": True}}, reply=reply
    )
    content, reasoning = _streamed_texts(chunks)
    assert reasoning == {0: want} and content == {0: ""}
    assert [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason] == ["length"]
    assert (
        chunks[-1].usage is not None and chunks[-1].usage.completion_tokens_details.reasoning_tokens == limit
    )


# --------------------------------------------------------------------------- continue_final_message

EOS = "<｜end▁of▁sentence｜>"
Q = {"role": "user", "content": "What is 17*23? Answer in JSON."}
CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}


def _continued(
    tok: PreTrainedTokenizerFast, body: dict[str, Any], reply: str
) -> list[tuple[str, str | None]]:
    """``(content, reasoning_content)`` of ``body`` answered with ``reply``, not streamed and
    streamed (each the concatenation of the deltas; ``None`` for no reasoning)."""
    r = _post(tok, body, reply)
    assert r.status_code == 200, r.text
    msg = ChatCompletion.model_validate(r.json()).choices[0].message
    content, reasoning = _streamed_texts(_chunks(tok, body, reply))
    return [
        (msg.content or "", (msg.model_extra or {}).get("reasoning_content")),
        (content[0], reasoning[0] or None),
    ]


def test_sglang_26176_continued_answer_prefix_renders_after_the_thinking_block(
    tok: PreTrainedTokenizerFast,
) -> None:
    """sgl-project/sglang#26176: with ``continue_final_message`` the DeepSeek-V4 path appended
    the final assistant message's ``content`` after ``<｜Assistant｜><think>``, inside an open
    thinking block, so a JSON answer prefix like ``{"answer":`` was continued as reasoning; and a
    reasoning-only prefill (``content: null``) crashed. Expected: in chat mode the prompt is
    DeepSeek's own rendering of the conversation without its final EOS; in thinking mode the
    prefix follows the closed ``<think>reasoning</think>`` block (the reference encoder's
    assistant turn without EOS); the continuation is ``content`` (streamed or not); a
    ``content: null`` prefill is answered (HTTP 200), its reasoning block left open."""
    prefix = {"role": "assistant", "content": '{"answer":', "reasoning_content": "340 + 51 = 391."}
    body = {"messages": [Q, prefix], **CONTINUE}
    full = recipe_prompt({"messages": [Q, prefix]}, False, effort=None)
    assert chat_route_prompt(tok, body, False) == full[: full.rindex(EOS)]
    got = chat_route_prompt(tok, body, True)
    assert got.endswith('<｜Assistant｜><think>340 + 51 = 391.</think>{"answer":')
    think = {**body, "chat_template_kwargs": {"thinking": True}}
    assert _continued(tok, think, " 391}") == [(" 391}", None)] * 2

    null = {**body, "messages": [Q, {"role": "assistant", "content": None, "reasoning_content": "Hmm."}]}
    null["chat_template_kwargs"] = {"thinking": True}
    # a reasoning-only prefill continues its open reasoning (DeepSeek's prefix completion)
    assert chat_route_prompt(tok, null, True).endswith("<｜Assistant｜><think>Hmm.")
    assert _continued(tok, null, " Yes.</think>391") == [("391", " Yes.")] * 2


def test_ds4_897_prefill_ending_in_think_end_continues_as_content(tok: PreTrainedTokenizerFast) -> None:
    """antirez/ds4#897: in thinking mode an assistant prefill whose text already closes the
    thinking block (``<think>...</think>`` written into ``content``) had its continuation filed
    under ``reasoning_content``; the prompt had closed the block, so it is the answer. Expected:
    the continuation is ``content`` and there is no reasoning, streamed or not."""
    prefill = {
        "role": "assistant",
        "content": "<think>17*23 = 340 + 51 = 391. I will answer directly.</think>",
    }
    body = {"messages": [Q, prefill], **CONTINUE, "chat_template_kwargs": {"thinking": True}}
    assert chat_route_prompt(tok, body, True).endswith(prefill["content"])
    assert _continued(tok, body, "17 x 23 = 391.") == [("17 x 23 = 391.", None)] * 2


# --------------------------------------------------------------------------- n > 1 streams


def test_openai_python_3709_n_stream_folds_in_the_clients_own_accumulator(
    tok: PreTrainedTokenizerFast,
) -> None:
    """openai/openai-python#3709: the client's ``ChatCompletionStreamState`` uses each streamed
    ``choice.index`` as a list position, so a stream whose first chunk of choice ``k`` comes
    before any chunk of a lower choice raised ``IndexError`` (and BerriAI/litellm#3276: ``index``
    must be the choice's index, not a token counter). Expected: with ``n: 3`` the choices first
    appear in index order, and the client's own accumulator folds the stream into the choices,
    finish reasons and usage of a cold non-streamed run of the same request."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    body = {"messages": HI, "n": 3}
    chunks = _chunks(tok, {**body, "stream_options": {"include_usage": True}})
    first_seen = list(dict.fromkeys(c.index for ch in chunks for c in ch.choices))
    assert first_seen == [0, 1, 2]
    state = ChatCompletionStreamState()
    for ch in chunks:
        state.handle_chunk(ch)
    folded = state.get_final_completion()
    cold = ChatCompletion.model_validate(_post(tok, body).json())
    assert [(c.index, c.message.content, c.finish_reason) for c in folded.choices] == [
        (c.index, c.message.content, c.finish_reason) for c in cold.choices
    ]
    assert folded.usage is not None and cold.usage is not None
    assert (folded.usage.prompt_tokens, folded.usage.completion_tokens) == (
        cold.usage.prompt_tokens,
        cold.usage.completion_tokens,
    )


# --------------------------------------------------------------------------- bad messages


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("role", ["user", "system", "assistant"])
def test_swiftlet_38_non_text_part_is_refused_by_name(
    tok: PreTrainedTokenizerFast, role: str, stream: bool
) -> None:
    """leonickson1/Swiftlet#38 (and 8monkey-ai/hebo-gateway#91, where the same request was a
    500): a text-only server silently dropped an ``image_url`` part and answered the text
    beside it as if the image had never been sent. Expected: a 400 in OpenAI's error shape whose
    message names the part's type and whose ``param`` names the part as OpenAI names a failing
    message (``messages[i].content[j]``, the indices as sent); the text beside it does not rescue
    the request, and nothing reaches the engine, streamed or not."""
    parts = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": "u"}},
    ]
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Hi"}, {"role": role, "content": parts}]
    if role != "user":
        msgs.append({"role": "user", "content": "Describe it."})
    tm = FakeTM(tok)
    r = _client(tm).post(CHAT, json={"model": MODEL, "messages": msgs, "stream": stream})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and "image_url" in err["message"], err
    assert err["param"] == "messages[1].content[1]", err
    assert tm.received == []

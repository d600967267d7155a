"""Chat request fields of OpenAI-compatible servers (``continue_final_message``,
``max_completion_tokens``) through FastAPI's TestClient and the fake tokenizer manager of
``test_openai_api``, read back with the ``openai`` client's own parsers. Expected prompts are
written out in the DeepSeek-V4 format and tokenized with the tokenizer itself."""

from __future__ import annotations

import openai
import pytest
from openai_fake_tm import A, B, E, FakeTM, U
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from transformers import PreTrainedTokenizerFast


def test_continue_final_message_keeps_bos_and_continues_the_answer(tok: PreTrainedTokenizerFast) -> None:
    """``continue_final_message``: the prompt is the whole conversation without the final
    end-of-sentence (BOS first, also when the partial assistant turn is the only message); in
    thinking mode the prefix goes after the turn's reasoning and ``</think>``, so the
    continuation is answer text (``content``), not reasoning; a turn with reasoning only keeps its
    block open and the continuation is reasoning (DeepSeek's prefix completion). Expected prompts
    written out in the V4 format (assistant turn without EOS)."""
    tm = FakeTM(tok)
    client = _oai(_client(tm))
    think = {"chat_template_kwargs": {"thinking": True}}
    user, prefill = {"role": "user", "content": "Q"}, {"role": "assistant", "content": '{"a":'}
    cases = [
        # a lone assistant turn opens itself, as DeepSeek's encoder (deepseek-recipe) renders it
        ([{"role": "assistant", "content": "Sure:"}], {}, B + A + "</think>Sure:"),
        ([user, prefill], {}, B + U + "Q" + A + '</think>{"a":'),
        ([user, prefill], think, B + U + "Q" + A + '<think></think>{"a":'),
        ([user, dict(prefill, reasoning_content="R")], think, B + U + "Q" + A + '<think>R</think>{"a":'),
        # a turn with reasoning only continues its reasoning (DeepSeek's prefix completion):
        # the block stays open, and the output cut by max_tokens is reasoning
        ([user, {"role": "assistant", "content": None, "reasoning_content": "R"}], think, B + U + "Q" + A + "<think>R"),
    ]  # fmt: skip
    want = tok.decode(tok.encode("Hello there, general Kenobi.", add_special_tokens=False)[:3])
    for msgs, extra, prompt in cases:
        body = {**extra, "continue_final_message": True, "add_generation_prompt": False}
        out = client.chat.completions.create(model="dsv4-test", messages=msgs, max_tokens=3, extra_body=body)
        assert tm.received[-1].input_ids == tok.encode(prompt, add_special_tokens=False)
        in_reasoning = not prompt.endswith(("</think>", ":"))
        split = ("", want) if in_reasoning else (want, None)
        msg = out.choices[0].message
        assert (msg.content or "", msg.model_extra.get("reasoning_content")) == split, prompt
        stream = client.chat.completions.create(
            model="dsv4-test", messages=msgs, max_tokens=3, extra_body=body, stream=True
        )
        content, reasoning = "", ""
        for chunk in stream:
            for ch in chunk.choices:
                content += ch.delta.content or ""
                reasoning += (ch.delta.model_extra or {}).get("reasoning_content") or ""
        assert (content, reasoning) == ((split[0], split[1]) if in_reasoning else (want, "")), prompt


def test_max_completion_tokens_wins_and_is_named_in_errors(tok: PreTrainedTokenizerFast) -> None:
    """``max_completion_tokens`` (OpenAI's replacement of ``max_tokens``) bounds the completion
    when both are sent, and a negative value is a 400 naming ``max_completion_tokens`` (the field
    the client sent), not ``max_tokens``."""
    tm = FakeTM(tok)
    client = _oai(_client(tm))
    msgs = [{"role": "user", "content": "Hi"}]
    out = client.chat.completions.create(
        model="dsv4-test", messages=msgs, max_completion_tokens=2, max_tokens=9
    )
    assert tm.received[-1].sampling_params["max_new_tokens"] == 2 and out.usage.completion_tokens == 2
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="dsv4-test", messages=msgs, max_completion_tokens=-1)
    assert ei.value.body["param"] == "max_completion_tokens" and "max_completion_tokens" in ei.value.message
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="dsv4-test", messages=msgs, max_tokens=-1)
    assert ei.value.body["param"] == "max_tokens"


def test_text_like_content_parts_are_text(tok: PreTrainedTokenizerFast) -> None:
    """Content parts that carry text in other OpenAI shapes -- the Responses API's ``input_text``
    / ``output_text`` (replayed into chat messages by agent frameworks) and an assistant
    ``refusal`` part -- render as their text; a ``file`` or ``image_url`` part stays a 400 naming
    the part. Expected prompt written out in the V4 format."""
    tm = FakeTM(tok)
    client = _oai(_client(tm))
    msgs = [
        {"role": "system", "content": [{"type": "input_text", "text": "S"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Q1"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "A1"}]},
        {"role": "user", "content": [{"type": "text", "text": "Q2"}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
        {"role": "user", "content": "Q3"},
    ]
    client.chat.completions.create(model="dsv4-test", messages=msgs, max_tokens=2)
    want = (
        B
        + "S"
        + U
        + "Q1"
        + A
        + "</think>A1"
        + E
        + U
        + "Q2"
        + A
        + "</think>No."
        + E
        + U
        + "Q3"
        + A
        + "</think>"
    )
    assert tm.received[-1].input_ids == tok.encode(want, add_special_tokens=False)
    for part in (
        {"type": "file", "file": {"file_id": "f"}},
        {"type": "image_url", "image_url": {"url": "u"}},
    ):
        with pytest.raises(openai.BadRequestError) as ei:
            client.chat.completions.create(model="dsv4-test", messages=[{"role": "user", "content": [part]}])
        assert "messages[0].content[0]" in ei.value.message and part["type"] in ei.value.message


def test_continuous_usage_stats_on_every_chunk(tok: PreTrainedTokenizerFast) -> None:
    """``stream_options.continuous_usage_stats`` (vLLM's extension): every chunk carries usage,
    the first (role) chunk included with 0 completion tokens, and the completion count grows by
    one token per content chunk (the fake engine emits one token per output)."""
    client = _oai(_client(FakeTM(tok)))
    stream = client.chat.completions.create(
        model="dsv4-test",
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},  # type: ignore[typeddict-unknown-key]
    )
    chunks = list(stream)
    prompt = len(tok.encode(B + U + "Hi" + A + "</think>", add_special_tokens=False))
    assert all(c.usage is not None and c.usage.prompt_tokens == prompt for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].usage.completion_tokens == 0
    content = [c.usage.completion_tokens for c in chunks if c.choices and c.choices[0].delta.content]
    assert content == [1, 2, 3, 4] and chunks[-1].usage.completion_tokens == 4


def test_grammar_on_a_server_without_xgrammar_names_the_field_sent(tok: PreTrainedTokenizerFast) -> None:
    """Without a grammar backend, a grammar request is a 400 whose ``param`` is the field the
    client sent (``response_format``, ``tool_choice``, SGLang's ``regex``), not the first word of
    the message ("constrained") nor the internal grammar kind (``json_schema``,
    ``structural_tag``)."""
    tm = FakeTM(tok)  # no grammar_enabled attribute: no grammar backend
    client = _oai(_client(tm))
    msgs = [{"role": "user", "content": "Hi"}]
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    cases = [
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tools": [tool], "tool_choice": "required"}, "tool_choice"),
        ({"extra_body": {"regex": "a+"}}, "regex"),
    ]
    for kw, param in cases:
        with pytest.raises(openai.BadRequestError) as ei:
            client.chat.completions.create(model="dsv4-test", messages=msgs, **kw)
        assert ei.value.body["param"] == param and f"({param})" in ei.value.message, ei.value.body
        assert "xgrammar" in ei.value.message
    assert tm.received == []


def test_continued_message_of_text_parts_is_the_grammar_prefix(tok: PreTrainedTokenizerFast) -> None:
    """A continued assistant message given as text parts: the answer grammar reads the text the
    prompt ends with (the parts as the prompt joins them, a blank line apart), not the parts
    glued together, which the prompt does not end with (the grammar then restarted)."""
    tm = FakeTM(tok)
    tm.grammar_enabled = True  # type: ignore[attr-defined]
    client = _oai(_client(tm))
    parts = [{"type": "text", "text": '{"a": "x'}, {"type": "text", "text": 'y", "b":'}]
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    client.chat.completions.create(
        model="dsv4-test",
        messages=[{"role": "user", "content": "Q"}, {"role": "assistant", "content": parts}],  # type: ignore[list-item]
        max_tokens=3,
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    prompt = tok.decode(tm.received[-1].input_ids)
    want = '{"a": "x\n\ny", "b":'
    assert prompt.endswith(want)  # the case under test: the parts joined as the prompt joins them
    assert tm.received[-1].sampling_params["grammar_prefix"] == want


def _gold_cases() -> dict[str, dict]:
    """DeepSeek's reference encoder's prompts (``fixtures/dsv4_chat_encoding.json``) by case name."""
    import json
    from pathlib import Path

    cases = json.loads((Path(__file__).parent / "fixtures" / "dsv4_chat_encoding.json").read_text())["cases"]
    return {c["name"]: c for c in cases}


def test_reasoning_effort_none_turns_thinking_off(tok: PreTrainedTokenizerFast) -> None:
    """``reasoning_effort: "none"`` renders the chat-mode prompt where the request does not set
    thinking itself, also when ``--default-chat-template-kwargs`` turns thinking on (SGLang's
    ``normalize_reasoning_inputs`` defaults ``thinking`` / ``enable_thinking`` to false for it;
    vLLM's DeepSeek-V4 tokenizer renders ``thinking_mode="chat"`` for it). A request that sets
    ``thinking`` itself keeps it (SGLang's ``setdefault``). Oracle: prompts of DeepSeek's reference
    encoder (``fixtures/dsv4_chat_encoding.json``)."""
    gold = _gold_cases()
    chat_case = gold["chat_consecutive_user_messages_merge"]  # chat mode, no tools
    assert not chat_case["thinking"]
    # the route renders a developer message as a system one (SGLang's rule); the reference renders
    # that turn as "<｜User｜>dev note", so leaving it out removes exactly that text
    msgs = [m for m in chat_case["messages"] if m["role"] != "developer"]
    chat_prompt = chat_case["expected"].replace(U + "dev note", "", 1)
    think_case = gold["thinking_high_effort_no_prefix"]  # thinking mode, effort "high", no prefix
    tm = FakeTM(tok)
    client = _oai(_client(tm, default_chat_template_kwargs={"thinking": True}))

    def prompt_of(messages: list[dict], **kw: object) -> list[int]:
        client.chat.completions.create(model="dsv4-test", messages=messages, max_tokens=1, **kw)
        return tm.received[-1].input_ids

    assert prompt_of(msgs, reasoning_effort="none") == tok.encode(chat_prompt, add_special_tokens=False)
    assert prompt_of(msgs, extra_body={"chat_template_kwargs": {"reasoning_effort": "none"}}) == tok.encode(
        chat_prompt, add_special_tokens=False
    )
    want_think = tok.encode(think_case["expected"], add_special_tokens=False)
    assert prompt_of(think_case["messages"], reasoning_effort="high") == want_think  # the default's thinking
    # the request's own thinking switch wins over "none"
    own = {"chat_template_kwargs": {"thinking": True}}
    assert prompt_of(think_case["messages"], reasoning_effort="none", extra_body=own) == want_think


def test_request_switch_under_either_name_wins_over_default_thinking(tok: PreTrainedTokenizerFast) -> None:
    """A request's own thinking switch wins over ``--default-chat-template-kwargs`` under either
    of SGLang's names: ``chat_template_kwargs: {"enable_thinking": false}`` against a server
    default ``{"thinking": true}`` renders chat mode (merged key by key, the default's
    ``thinking`` would be read first and win), as ``{"thinking": false}`` against a default
    ``{"enable_thinking": true}`` does. Oracle: DeepSeek's reference encoder's chat-mode prompt
    (``fixtures/dsv4_chat_encoding.json``) and the same request on a server without defaults."""
    gold = _gold_cases()
    case = gold["chat_consecutive_user_messages_merge"]  # chat mode, no tools
    assert not case["thinking"]
    msgs = [m for m in case["messages"] if m["role"] != "developer"]  # as in the test above
    want = tok.encode(case["expected"].replace(U + "dev note", "", 1), add_special_tokens=False)
    for default, own in (
        ({"thinking": True}, {"enable_thinking": False}),
        ({"enable_thinking": True}, {"thinking": False}),
    ):
        for defaults in (default, None):
            tm = FakeTM(tok)
            client = _oai(_client(tm, default_chat_template_kwargs=defaults))
            out = client.chat.completions.create(
                model="dsv4-test", messages=msgs, max_tokens=2, extra_body={"chat_template_kwargs": own}
            )
            assert tm.received[-1].input_ids == want, (default, own, defaults)
            assert out.choices[0].message.content  # read as answer text, not reasoning


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_spaces_between_special_tokens_reaches_the_engine(tok: PreTrainedTokenizerFast, route: str) -> None:
    """Found by hand: ``spaces_between_special_tokens`` (an extra field of SGLang's and vLLM's
    OpenAI requests, default true) was accepted and dropped, so the detokenizer always decoded
    with the default. Expected: the engine request's sampling parameters carry the value sent
    (SGLang's native ``sampling_params`` key), and the default when it is not sent."""
    tm = FakeTM(tok)
    client = _oai(_client(tm))

    def send(**extra: bool) -> None:
        if route == "chat":
            msgs = [{"role": "user", "content": "Hi"}]
            client.chat.completions.create(model="dsv4-test", messages=msgs, max_tokens=2, extra_body=extra)
        else:
            client.completions.create(model="dsv4-test", prompt="Hi", max_tokens=2, extra_body=extra)

    for sent in (False, True):
        send(spaces_between_special_tokens=sent)
        assert tm.received[-1].sampling_params["spaces_between_special_tokens"] is sent
    send()
    assert tm.received[-1].sampling_params.get("spaces_between_special_tokens", True) is True

"""Chat request fields of OpenAI-compatible servers (``continue_final_message``,
``max_completion_tokens``) through FastAPI's TestClient and the fake tokenizer manager of
``test_openai_api``, read back with the ``openai`` client's own parsers. Expected prompts are
written out in the DeepSeek-V4 format and tokenized with the tokenizer itself."""

from __future__ import annotations

import openai
import pytest
from test_openai_api import A, B, FakeTM, U, _client, _oai
from transformers import PreTrainedTokenizerFast


def test_continue_final_message_keeps_bos_and_continues_the_answer(tok: PreTrainedTokenizerFast) -> None:
    """``continue_final_message``: the prompt is the whole conversation without the final
    end-of-sentence (BOS first, also when the partial assistant turn is the only message); in
    thinking mode the prefix goes after the turn's reasoning and ``</think>``, so the
    continuation is answer text (``content``), not reasoning. A final turn with reasoning but no
    content continues the reasoning. Expected prompts written out in the V4 format."""
    tm = FakeTM(tok)
    client = _oai(_client(tm))
    think = {"chat_template_kwargs": {"thinking": True}}
    cases = [
        ([{"role": "assistant", "content": "Sure:"}], {}, B + "Sure:", "content"),
        (
            [{"role": "user", "content": "Q"}, {"role": "assistant", "content": '{"a":'}],
            think,
            B + U + "Q" + A + '<think></think>{"a":',
            "content",
        ),
        (
            [
                {"role": "user", "content": "Q"},
                {"role": "assistant", "content": "A1", "reasoning_content": "R"},
            ],
            think,
            B + U + "Q" + A + "<think>R</think>A1",
            "content",
        ),
        (
            [
                {"role": "user", "content": "Q"},
                {"role": "assistant", "content": "", "reasoning_content": "R"},
            ],
            think,
            B + U + "Q" + A + "<think>R",
            "reasoning_content",
        ),
    ]
    want = tok.decode(tok.encode("Hello there, general Kenobi.", add_special_tokens=False)[:3])
    for msgs, extra, prompt, field in cases:
        body = {**extra, "continue_final_message": True, "add_generation_prompt": False}
        out = client.chat.completions.create(model="dsv4-test", messages=msgs, max_tokens=3, extra_body=body)
        assert tm.received[-1].input_ids == tok.encode(prompt, add_special_tokens=False)
        msg = out.choices[0].message
        got = {"content": msg.content or None, "reasoning_content": msg.model_extra.get("reasoning_content")}
        assert got == {"content": None, "reasoning_content": None, field: want}, (prompt, got)
        stream = client.chat.completions.create(
            model="dsv4-test", messages=msgs, max_tokens=3, extra_body=body, stream=True
        )
        streamed = {"content": "", "reasoning_content": ""}
        for chunk in stream:
            for ch in chunk.choices:
                streamed["content"] += ch.delta.content or ""
                streamed["reasoning_content"] += (ch.delta.model_extra or {}).get("reasoning_content") or ""
        other = "reasoning_content" if field == "content" else "content"
        assert streamed[field] == want and not streamed[other], (prompt, streamed)


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

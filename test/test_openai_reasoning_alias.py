"""vLLM's ``reasoning`` beside SGLang's ``reasoning_content`` in chat answers and chat input.

vLLM renamed the assistant message's reasoning field to ``reasoning`` (vllm-project/vllm#27752,
discussed in vllm-project/vllm#27755) and later dropped ``reasoning_content`` altogether
(vllm-project/vllm#33402), so clients written for vLLM read ``message.reasoning`` /
``delta.reasoning`` and send their previous answer back with ``reasoning``. vLLM's non-streamed
message carries ``"reasoning": null`` when there is none (its ``ChatMessage`` dumps every field).

Oracles: the fake model's scripted thinking-mode output (``FAKE_REASONING`` / ``FAKE_ANSWER`` of
``server_fixture``), read through the ``openai`` client's own parse (``model_extra``), and the
``anthropic`` / ``openai`` clients' own types for the Messages and Responses routes (a key they do
not know lands in ``model_extra``).
"""

from __future__ import annotations

from typing import Any

import pytest
import requests
from server_fixture import FAKE_ANSWER, FAKE_REASONING, FAKE_SCRIPT_TAG, ServerHandle

openai = pytest.importorskip("openai")

MODEL = "qa-model"
THINK = {"chat_template_kwargs": {"thinking": True}}
ASK = [{"role": "user", "content": f"{FAKE_SCRIPT_TAG} What is 6*7?"}]


def _client(server: ServerHandle) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)


def _chat(server: ServerHandle, body: dict[str, Any]) -> requests.Response:
    return requests.post(server.url + "/v1/chat/completions", json={"model": MODEL, **body}, timeout=60)


def test_message_carries_reasoning_beside_reasoning_content(plain_fake_server: ServerHandle) -> None:
    """Non-streamed, n = 2: each choice's message has ``reasoning`` equal to
    ``reasoning_content`` (the scripted reasoning), read by the openai client; the answer is
    untouched."""
    r = _client(plain_fake_server).chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=100, n=2, extra_body=THINK
    )
    assert len(r.choices) == 2
    for ch in r.choices:
        extra = ch.message.model_extra or {}
        assert (extra.get("reasoning"), extra.get("reasoning_content")) == (FAKE_REASONING, FAKE_REASONING)
        assert ch.message.content == FAKE_ANSWER


def test_message_without_reasoning_has_null_reasoning(plain_fake_server: ServerHandle) -> None:
    """No thinking: ``reasoning`` is present and ``null``, as vLLM's non-streamed message has it
    and as ``reasoning_content`` is, so ``message.reasoning`` reads ``None`` (not an
    ``AttributeError``) in the openai client."""
    r = _client(plain_fake_server).chat.completions.create(model=MODEL, messages=ASK, max_tokens=100)
    msg = r.choices[0].message
    assert msg.reasoning is None and msg.reasoning_content is None  # type: ignore[attr-defined]
    raw = _chat(plain_fake_server, {"messages": ASK, "max_tokens": 100}).json()["choices"][0]["message"]
    assert "reasoning" in raw and raw["reasoning"] is None and raw["reasoning_content"] is None, raw


def test_stream_deltas_carry_reasoning(plain_fake_server: ServerHandle) -> None:
    """Streamed, n = 2: every delta's ``reasoning`` equals its ``reasoning_content``; per choice the
    ``reasoning`` deltas join to the scripted reasoning and the content deltas to the answer."""
    stream = _client(plain_fake_server).chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=100, n=2, stream=True, extra_body=THINK
    )
    reasoning = {0: "", 1: ""}
    content = {0: "", 1: ""}
    seen = 0
    for chunk in stream:
        for c in chunk.choices:
            extra = c.delta.model_extra or {}
            assert extra.get("reasoning") == extra.get("reasoning_content"), c.delta
            seen += bool(extra.get("reasoning"))
            reasoning[c.index] += extra.get("reasoning") or ""
            content[c.index] += c.delta.content or ""
    assert seen >= 2
    assert reasoning == {0: FAKE_REASONING, 1: FAKE_REASONING}
    assert content == {0: FAKE_ANSWER, 1: FAKE_ANSWER}


def _prompt_text(server: ServerHandle, turn: dict[str, Any]) -> str:
    """The rendered prompt (``/tokenize``, decoded by the HF tokenizer) of the question followed
    by ``turn`` continued as DeepSeek's chat prefix completion (``prefix: true``): in thinking
    mode that final assistant turn keeps its reasoning in the prompt."""
    from server_fixture import hf_auto_tokenizer

    body = {"model": MODEL, "messages": [*ASK, {**turn, "prefix": True}], **THINK}
    r = requests.post(server.url + "/tokenize", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return hf_auto_tokenizer().decode(r.json()["tokens"])


def test_multi_turn_reasoning_either_name_and_both_differing_is_400(plain_fake_server: ServerHandle) -> None:
    """vLLM clients send the previous answer back as the openai client dumps it (both names, same
    text) or with ``reasoning`` alone: the prompt is the one of ``reasoning_content`` alone, and it
    holds the reasoning (the one without reasoning does not). Both given and different: a 400
    naming both fields, and the server still answers."""
    first = _client(plain_fake_server).chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=100, extra_body=THINK
    )
    echoed = first.choices[0].message.model_dump(exclude_none=True)
    assert echoed["reasoning"] == echoed["reasoning_content"] == FAKE_REASONING
    base = {"role": "assistant", "content": FAKE_ANSWER}
    with_rc = _prompt_text(plain_fake_server, {**base, "reasoning_content": FAKE_REASONING})
    assert FAKE_REASONING in with_rc and FAKE_REASONING not in _prompt_text(plain_fake_server, base)
    assert _prompt_text(plain_fake_server, echoed) == with_rc
    assert _prompt_text(plain_fake_server, {**base, "reasoning": FAKE_REASONING}) == with_rc
    bad = {**base, "reasoning_content": FAKE_REASONING, "reasoning": "Something else."}
    for path in ("/v1/chat/completions", "/tokenize"):
        r = requests.post(
            plain_fake_server.url + path,
            json={"model": MODEL, "messages": [*ASK, bad, {"role": "user", "content": "And?"}], **THINK},
            timeout=60,
        )
        assert r.status_code == 400, r.text
        err = r.json()
        text = err.get("message") or err.get("error", {}).get("message", "")
        assert "reasoning_content" in text and "reasoning " in text, err
    again = _client(plain_fake_server).chat.completions.create(model=MODEL, messages=ASK, max_tokens=100)
    assert again.choices[0].finish_reason in ("stop", "length")


def test_anthropic_and_responses_routes_have_no_reasoning_alias(plain_fake_server: ServerHandle) -> None:
    """The Messages and Responses answers keep their own shapes: the anthropic client's blocks and
    the openai client's Responses output items hold no key their types do not know."""
    anthropic = pytest.importorskip("anthropic")
    ac = anthropic.Anthropic(base_url=plain_fake_server.url, api_key="x", max_retries=0, timeout=60)
    m = ac.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=ASK,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert (m.content[0].thinking, m.content[1].text) == (FAKE_REASONING, FAKE_ANSWER)
    assert all(not (b.model_extra or {}) for b in m.content), m.content
    rt = _client(plain_fake_server).responses.create(
        model=MODEL, input=ASK[0]["content"], max_output_tokens=100, reasoning={"effort": "high"}
    )
    kinds = [o.type for o in rt.output]
    assert kinds == ["reasoning", "message"], kinds
    assert rt.output[0].content[0].text == FAKE_REASONING and rt.output_text == FAKE_ANSWER
    assert all(not (o.model_extra or {}) for o in rt.output), rt.output

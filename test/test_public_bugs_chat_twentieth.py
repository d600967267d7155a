"""A twentieth set of public bug reports, replayed against ``POST /v1/chat/completions`` (message
shapes and the streamed usage): consecutive assistant messages and an assistant message that opens
the conversation (the second assistant turn was glued to the first one's EOS with no
``<｜Assistant｜>`` marker: fixed), an empty ``messages`` list, an empty assistant ``content``, an
assistant tool-call turn with ``content: null``, and ``include_usage`` without
``continuous_usage_stats``. The reports other than the first passed as-is; their tests are
regression guards.

The route runs in process over the fake tokenizer manager of ``openai_fake_tm`` (fast tier).
Oracles: the prompt DeepSeek's own converter and V4 encoder (``deepseek-recipe``) render for the
same request, and the ``openai`` client's own types for the streamed chunks.
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
from openai.types.chat import ChatCompletionChunk  # noqa: E402
from thinking_chat_testutil import chat_route_prompt  # noqa: E402

CHAT = "/v1/chat/completions"
X = {"role": "user", "content": "What is the weather in Paris?"}
Z = {"role": "user", "content": "Thanks."}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


# --------------------------------------------------------------------------- message shapes

_ASSISTANT_RUNS = {
    "two_answers_in_a_row": [
        X,
        {"role": "assistant", "content": "Let me see."},
        {"role": "assistant", "content": "Sunny."},
        Z,
    ],
    "preamble_then_call": [
        X,
        {"role": "assistant", "content": "Let me check."},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
    ],
    "conversation_opens_with_assistant": [{"role": "assistant", "content": "Hello, how can I help?"}, X],
    "system_then_assistant": [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": "Hi."},
        X,
    ],
}


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("case", sorted(_ASSISTANT_RUNS))
def test_vllm_50686_consecutive_assistant_messages_each_open_a_turn(
    tok: PreTrainedTokenizerFast, case: str, thinking: bool
) -> None:
    """vllm-project/vllm#50686: agent gateways replay one assistant turn as two consecutive
    assistant messages (a text preamble, then the tool calls); DeepSeek-V4's encoder only opened an
    assistant turn after a user/developer message, so the second message was glued onto the
    first one's EOS with no ``<｜Assistant｜>`` marker (and likewise an assistant message that opens
    the conversation). Expected: the prompt DeepSeek's own encoder renders, in which every
    assistant turn opens with ``<｜Assistant｜>`` and its mode token."""
    body: dict[str, Any] = {"messages": _ASSISTANT_RUNS[case]}
    if case == "preamble_then_call":
        body["tools"] = [WEATHER]
    assert chat_route_prompt(tok, body, thinking) == recipe_prompt(
        body, thinking, effort="low" if thinking else None
    )


def test_llm_d_inference_sim_666_empty_messages_is_400(tok: PreTrainedTokenizerFast) -> None:
    """llm-d/llm-d-inference-sim#666: ``"messages": []`` was answered with 200 and a completion
    generated from an empty prompt; vLLM (and OpenAI) answer 400. Expected: 400 in the OpenAI
    error shape naming ``messages``, and nothing reaches the engine."""
    tm = FakeTM(tok)
    r = _client(tm).post(CHAT, json={"model": "dsv4-test", "messages": [], "max_tokens": 2})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "messages" and err["code"] == 400 and "messages" in err["message"]
    assert tm.received == []


@pytest.mark.parametrize("thinking", [False, True])
def test_vllm_21089_empty_assistant_content_is_accepted(tok: PreTrainedTokenizerFast, thinking: bool) -> None:
    """vllm-project/vllm#21089: an assistant message with ``content: ""`` in the history (OpenAI
    accepts it) was refused as an invalid assistant message. Expected: accepted and rendered as
    DeepSeek's own encoder renders it (an empty finished turn)."""
    body = {"messages": [X, {"role": "assistant", "content": ""}, Z]}
    assert chat_route_prompt(tok, body, thinking) == recipe_prompt(
        body, thinking, effort="low" if thinking else None
    )


def test_sglang_4236_assistant_call_with_null_content_is_accepted(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#4236: a client replaying an assistant tool-call turn with
    ``content: null`` (the OpenAI shape) got a 500 from request validation. Expected: accepted,
    and rendered as DeepSeek's own encoder renders the same turn."""
    body = {
        "tools": [WEATHER],
        "messages": [
            X,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        ],
    }
    assert chat_route_prompt(tok, body, False) == recipe_prompt(body, False, effort=None)


# --------------------------------------------------------------------------- streamed usage


def test_vllm_7262_include_usage_only_in_the_final_chunk(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#7262: with ``stream_options: {"include_usage": true}`` alone, usage was
    sent on every chunk. Expected (OpenAI's reference): every chunk that carries choices has
    ``usage`` null; one last chunk has no choices and the totals (prompt + completion), parsed by
    the ``openai`` client's own chunk type."""
    tm = FakeTM(tok)
    body = {"model": "dsv4-test", "messages": [X], "max_tokens": 4, "stream": True}
    r = _client(tm).post(CHAT, json={**body, "stream_options": {"include_usage": True}})
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
    assert all(c.usage is None for c in chunks if c.choices), chunks
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    n_prompt = len(tm.received[-1].input_ids) if tm.received[-1].input_ids is not None else None
    n_completion = len(tok.encode(tm.reply, add_special_tokens=False)[:4])
    assert last.usage.completion_tokens == n_completion
    if n_prompt is not None:
        assert last.usage.prompt_tokens == n_prompt
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert sum(c.usage is not None for c in chunks) == 1

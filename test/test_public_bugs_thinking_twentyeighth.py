"""A twenty-eighth set of public bug reports, replayed against the thinking side of
``POST /v1/chat/completions`` and ``POST /v1/messages``: the reasoning split kept when
``tool_choice`` forces a tool call, a thinking-mode tool call that wrote no reasoning, the
``completion_tokens_details.reasoning_tokens`` usage of a reasoned answer (streamed and not),
the reasoning of an earlier tool-call turn (present or empty) passed back in the prompt, a
Messages thinking block followed by a ``tool_use`` block, and a reply whose ``<think>`` the prompt
opened, streamed with ``</think>`` inside a chunk.

Every report passed as-is; the tests are regression guards.

The routes run in process over the fake tokenizer managers of ``openai_fake_tm`` and
``fake_prompt_tm`` (fast tier); the prompt a request renders is read back from the engine request
the fake receives. Oracles: DeepSeek's own request converters, V4 encoder and response parser
(``deepseek-recipe``), the DeepSeek tokenizer (``tok``) for token counts, the ``openai`` /
``anthropic`` clients' types, and the reports' stated expected values.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_tools_testutil import ChunkTM
from openai_fake_tm import FakeTM, app_client, sse_data_events
from transformers import PreTrainedTokenizerFast

pytest.importorskip("deepseek_recipe")
pytest.importorskip("openai")
xgrammar = pytest.importorskip("xgrammar")

from anthropic_testutil import make_clients  # noqa: E402
from deepseek_recipe_testutil import recipe_message, recipe_messages_prompt, recipe_prompt  # noqa: E402
from fake_prompt_tm import ARGS, WEATHER_SCHEMA, PromptTM  # noqa: E402
from fake_prompt_tm import CALL as DSML_CALL  # noqa: E402
from fake_prompt_tm import MODEL as MESSAGES_MODEL  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from thinking_chat_testutil import CALL, THINK_END, TOOLS, post_chat, prompt_of, reasoning_of  # noqa: E402
from xgrammar.testing import _is_grammar_accept_string  # noqa: E402

THOUGHT = "The user wants the weather, so I call the tool"
ASK = [{"role": "user", "content": "Weather in Paris for 3 days?"}]
WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city.",
            "parameters": WEATHER_SCHEMA,
        },
    }
]
THINK_ON = {"thinking": {"type": "enabled"}}


def _grammar_tm(tok: PreTrainedTokenizerFast, reply: str) -> FakeTM:
    """A ``FakeTM`` writing ``reply`` that reports constrained decoding available (the forced
    ``tool_choice`` grammar is accepted; the fake writes ``reply`` regardless)."""
    tm = FakeTM(tok, reply=reply)
    tm.grammar_enabled = True  # type: ignore[attr-defined]
    return tm


def _chunks(r: Any) -> list[ChatCompletionChunk]:
    """The streamed response's chunks, typed by the ``openai`` client (``[DONE]`` asserted last)."""
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    return [ChatCompletionChunk.model_validate(e) for e in events[:-1]]


def _streamed(chunks: list[ChatCompletionChunk]) -> tuple[str, str, dict[int, dict[str, str]]]:
    """The joined ``reasoning_content``, joined ``content`` and the tool calls (by index: name and
    joined arguments) of the streamed chunks of choice 0."""
    reasoning, content, calls = "", "", {}
    for c in chunks:
        for ch in c.choices:
            reasoning += reasoning_of(ch.delta) or ""
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                if tc.function and tc.function.name:
                    slot["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
    return reasoning, content, calls


# --------------------------------------------------------------------------- forced tool choice


@pytest.mark.parametrize(
    "tool_choice",
    ["required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["required", "named"],
)
def test_vllm_19846_reasoning_kept_when_tool_choice_forces_a_call(
    tok: PreTrainedTokenizerFast, tool_choice: Any
) -> None:
    """vllm-project/vllm#19846 and its fix vllm-project/vllm#20662 (with thinking on,
    ``tool_choice: "auto"`` returned the reasoning but ``"required"`` or a named function came
    back with ``reasoning_content=None``, the thought lost; XiaomiMiMo/MiMo-Code#2069 shows a
    hosted endpoint refusing the pair outright): here the pair is served, and the thought before
    ``</think>`` is ``reasoning_content`` beside the forced ``get_weather`` call, non-streamed and
    streamed alike, as DeepSeek's own response parser reads the same text; the call's arguments
    parse to the model's. The grammar the forced choice sends (a structural tag) admits the
    thought before the call and refuses an answer without one. Oracle: ``deepseek-recipe``'s
    response parser (``recipe_message``); xgrammar's own matcher on the sent grammar;
    ``json.loads``; the ``openai`` client's types."""
    reply = THOUGHT + THINK_END + DSML_CALL
    body = {
        "messages": ASK,
        "tools": WEATHER_TOOLS,
        "tool_choice": tool_choice,
        **THINK_ON,
        "max_tokens": 200,
    }
    expected = recipe_message({"messages": ASK, "tools": WEATHER_TOOLS}, reply, thinking=True)
    assert expected["reasoning_content"] == THOUGHT

    tm = _grammar_tm(tok, reply)
    done = ChatCompletion.model_validate(post_chat(tm, body).json())
    tag = tm.received[-1].sampling_params.get("structural_tag")
    assert tag is not None  # the forced choice is a grammar on the generation
    grammar = xgrammar.Grammar.from_structural_tag(tag)
    assert _is_grammar_accept_string(grammar, reply)  # room for the thought before the call
    assert not _is_grammar_accept_string(grammar, THOUGHT + THINK_END + "No call.")
    msg = done.choices[0].message
    assert reasoning_of(msg) == THOUGHT
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []] == [
        ("get_weather", ARGS)
    ]
    assert done.choices[0].finish_reason == "tool_calls"

    chunks = _chunks(post_chat(_grammar_tm(tok, reply), {**body, "stream": True}))
    reasoning, content, calls = _streamed(chunks)
    assert reasoning == THOUGHT and not content.strip()
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [("get_weather", ARGS)]


# --------------------------------------------------------------------------- a call without reasoning


def test_reasonix_7254_thinking_tool_call_without_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """esengine/DeepSeek-Reasonix#7254 (in thinking mode DeepSeek-V4 may call a tool at once,
    writing no reasoning: the API returns the call with ``usage.reasoning_tokens == 0``, and a
    client must not take that for lost reasoning): a reply that closes the thinking block at once
    (``</think>`` then the DSML call) is the call, with no (or an empty) ``reasoning_content``,
    ``finish_reason`` ``tool_calls``, and ``completion_tokens_details.reasoning_tokens`` 0 when
    reported; the reasoned reply's count is the tokens of the thought and its ``</think>``.
    Oracle: DeepSeek's own response parser on the same text; the DeepSeek tokenizer for the
    reasoned count."""
    body = {"messages": ASK, "tools": WEATHER_TOOLS, **THINK_ON, "max_tokens": 200}
    bare = THINK_END + DSML_CALL
    expected = recipe_message({"messages": ASK, "tools": WEATHER_TOOLS}, bare, thinking=True)
    assert not expected.get("reasoning_content")

    done = ChatCompletion.model_validate(post_chat(FakeTM(tok, reply=bare), body).json())
    msg = done.choices[0].message
    assert not reasoning_of(msg) and not (msg.content or "").strip()
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []] == [
        ("get_weather", ARGS)
    ]
    assert done.choices[0].finish_reason == "tool_calls"
    details = done.usage.completion_tokens_details if done.usage else None
    assert details is None or not details.reasoning_tokens

    reasoned = ChatCompletion.model_validate(post_chat(FakeTM(tok, reply=THOUGHT + bare), body).json())
    assert reasoning_of(reasoned.choices[0].message) == THOUGHT
    want = len(tok.encode(THOUGHT + THINK_END, add_special_tokens=False))
    assert reasoned.usage is not None and reasoned.usage.completion_tokens_details is not None
    assert reasoned.usage.completion_tokens_details.reasoning_tokens == want


# --------------------------------------------------------------------------- reasoning tokens


def test_litellm_41849_reasoning_tokens_reported_streamed_and_not(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#41849 (a reasoning model's chat answer came with ``reasoning_content`` but
    ``completion_tokens_details`` null, so nothing split thinking from answering; also
    ai-dynamo/dynamo#11081 and vllm-project/vllm#24181, which add
    ``completion_tokens_details.reasoning_tokens``): the non-streamed usage and the streamed
    usage chunk (``stream_options.include_usage``) both carry ``reasoning_tokens`` equal to the
    tokens of the thought and its ``</think>``, no more than ``completion_tokens``, which counts
    the whole reply. Oracle: the DeepSeek tokenizer on the reply text; the ``openai`` client's
    ``CompletionUsage`` type."""
    answer = "Take an umbrella."
    reply = THOUGHT + THINK_END + answer
    want = len(tok.encode(THOUGHT + THINK_END, add_special_tokens=False))
    total = len(tok.encode(reply, add_special_tokens=False))
    body = {"messages": ASK, **THINK_ON, "max_tokens": 200}

    done = ChatCompletion.model_validate(post_chat(FakeTM(tok, reply=reply), body).json())
    assert done.choices[0].message.content == answer
    assert done.usage is not None and done.usage.completion_tokens == total
    assert done.usage.completion_tokens_details is not None
    assert done.usage.completion_tokens_details.reasoning_tokens == want

    chunks = _chunks(
        post_chat(
            FakeTM(tok, reply=reply), {**body, "stream": True, "stream_options": {"include_usage": True}}
        )
    )
    usage = [c.usage for c in chunks if c.usage is not None]
    assert usage and usage[-1].completion_tokens == total
    assert usage[-1].completion_tokens_details is not None
    assert usage[-1].completion_tokens_details.reasoning_tokens == want


# --------------------------------------------------------------------------- reasoning passed back


@pytest.mark.parametrize("passed_back", [THOUGHT, ""], ids=["reasoning", "empty"])
def test_autoglm_396_tool_turn_reasoning_passed_back_renders(
    tok: PreTrainedTokenizerFast, passed_back: str
) -> None:
    """suyiiyii/AutoGLM-GUI#396 (in thinking mode the client did not pass an assistant tool-call
    turn's ``reasoning_content`` back, and DeepSeek's API refused the next request: "The
    reasoning_content in the thinking mode must be passed back to the API"; and
    esengine/DeepSeek-Reasonix#6259: an empty ``reasoning_content`` on such a turn is accepted):
    a history whose assistant ``tool_calls`` turn carries its reasoning, or an empty one, is
    served, and the prompt the engine receives is the one DeepSeek's own converter and V4
    encoder render for the same body in thinking mode. Oracle: ``deepseek-recipe``."""
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": passed_back, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny."},
    ]
    body = {"messages": history, "tools": TOOLS}
    tm = FakeTM(tok, reply=THOUGHT + THINK_END + "It is sunny.")
    done = ChatCompletion.model_validate(post_chat(tm, {**body, **THINK_ON}).json())
    assert done.choices[0].message.content == "It is sunny."
    assert prompt_of(tok, tm) == recipe_prompt(body, thinking=True)


# --------------------------------------------------------------------------- Messages: thinking then tool_use


def test_messages_thinking_then_tool_use_blocks(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#20662 on the Messages route (with thinking on, a tool call must keep the
    reasoning before it): ``/v1/messages`` with ``thinking`` enabled and a tool answers a
    reasoned call with a ``thinking`` block holding the thought (signed) and then a ``tool_use``
    block with the call's input, ``stop_reason`` ``tool_use``; replayed with its
    ``tool_result``, the history renders the prompt DeepSeek's own Messages converter renders.
    Oracle: Anthropic's reference (block order, ``stop_reason``); the ``anthropic`` client's
    types; ``deepseek-recipe``."""
    tool = {"name": "get_weather", "description": "Weather of a city.", "input_schema": WEATHER_SCHEMA}
    tm = PromptTM(tok, reply=THOUGHT + THINK_END + DSML_CALL)
    client, _, _ = make_clients(tm)
    think = {"type": "enabled", "budget_tokens": 1024}
    msg = client.messages.create(
        model=MESSAGES_MODEL,
        max_tokens=300,
        messages=ASK,
        tools=[tool],
        thinking=think,  # type: ignore[arg-type,list-item]
    )
    assert [b.type for b in msg.content] == ["thinking", "tool_use"]
    assert msg.content[0].thinking == THOUGHT and msg.content[0].signature
    use = msg.content[1]
    assert (use.name, use.input) == ("get_weather", ARGS) and msg.stop_reason == "tool_use"

    history = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny."}]},
    ]
    low = {"output_config": {"effort": "low"}}
    client.messages.create(
        model=MESSAGES_MODEL,
        max_tokens=300,
        messages=history,
        tools=[tool],
        thinking=think,
        extra_body=low,  # type: ignore[arg-type,list-item]
    )
    got = tm.tokenizer.decode(tm.received[-1].input_ids)
    assert got == recipe_messages_prompt({"messages": history, "tools": [tool], **low}, thinking=True)


# --------------------------------------------------------------------------- prefilled <think>


@pytest.mark.parametrize("per_chunk", [1, 3, 7])
def test_localai_11790_prefilled_think_tag_splits_the_reply(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """mudler/LocalAI#11790 (the chat template puts the opening ``<think>`` in the prompt, so
    the model writes only the reasoning and the closing ``</think>``; a parser keyed on the
    opening tag returned everything, ``</think>`` included, as ``content``) and
    nbramia/LifeOS#568 (a closing-only ``</think>`` split across stream chunks leaked the
    reasoning and a stray tag into the answer; also modelscope/ms-swift#9881: reasoning-only
    chunks carry no answer text): the thinking prompt ends with ``<think>`` as DeepSeek's own
    encoder renders it; the reply, streamed one, three or seven tokens a chunk so that
    ``</think>`` falls inside a chunk, comes back as ``reasoning_content`` equal to the thought
    and ``content`` equal to the answer, with no ``</think>`` in either, and no chunk carries
    answer text before the reasoning ends. Oracle: ``deepseek-recipe``'s encoder and response
    parser on the same text; the ``openai`` client's chunk type."""
    answer = "Take an umbrella."
    reply = THOUGHT + THINK_END + answer
    expected = recipe_message({"messages": ASK}, reply, thinking=True)
    assert (expected["reasoning_content"], expected["content"]) == (THOUGHT, answer)
    tm = ChunkTM(tok, reply=reply, per_chunk=per_chunk)
    r = app_client(tm).post(  # type: ignore[arg-type]
        "/v1/chat/completions",
        json={"model": "dsv4-test", "messages": ASK, **THINK_ON, "max_tokens": 200, "stream": True},
    )
    assert r.status_code == 200, r.text
    assert tok.decode(tm.received[-1].input_ids) == recipe_prompt({"messages": ASK}, thinking=True)
    assert tok.decode(tm.received[-1].input_ids).endswith("<think>")
    chunks = _chunks(r)
    reasoning, content, calls = _streamed(chunks)
    assert (reasoning, content, calls) == (THOUGHT, answer, {})
    seen_content = False
    for c in chunks:
        for ch in c.choices:
            if ch.delta.content:
                seen_content = True
            assert not (seen_content and reasoning_of(ch.delta)), "reasoning after the answer began"

"""A twenty-third set of public bug reports, replayed against the thinking side of the chat,
Responses and Messages routes: prefix completion / ``continue_final_message`` of a turn that holds
only reasoning, thinking off (or not asked for) with a JSON ``response_format``, the grammar that
waits for ``</think>`` in thinking mode, reasoning cut by the token limit, the reasoning token
count (chat, ``n``, Responses), ``reasoning.effort`` on ``/v1/responses``, an explicit thinking
switch over the server's default, multi-turn histories that carry ``reasoning_content``, and
signed (or summary-less) Anthropic ``thinking`` blocks replayed in a Messages history.

Fixed here: a final assistant message with ``reasoning_content`` and no content, continued
(DeepSeek's ``prefix: true`` or ``continue_final_message``) in thinking mode, was rendered with its
reasoning closed (``<think>R</think>``), so the model had to answer at once, and its output was
read as all answer (SillyTavern/SillyTavern#3634: continuing a partial reasoning with empty
content). Such a turn now leaves the reasoning block open, as DeepSeek's converter and V4 encoder
render it, and the output is split at ``</think>``. The other reports passed as-is; their tests
are regression guards.

The routes run in process over the fake tokenizer manager of ``openai_fake_tm`` (fast tier).
Oracles: DeepSeek's own converter, V4 encoder and response parser (``deepseek-recipe``), the
DeepSeek-V4 tokenizer's ids, xgrammar's own matcher, ``jsonschema``, and the ``openai`` /
``anthropic`` clients' own types.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _client
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

from deepseek_recipe_testutil import ids_in_written_order, recipe_message, recipe_prompt  # noqa: E402
from openai.types.chat import ChatCompletionChunk  # noqa: E402
from thinking_chat_testutil import (  # noqa: E402
    CALL,
    HI,
    MODEL,
    THINK_END,
    TOOLS,
    chat_answer,
    messages_client,
    post_chat,
    prompt_of,
    reasoning_of,
)

ON = {"chat_template_kwargs": {"thinking": True}}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
JSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "out", "schema": SCHEMA}}


def _streamed(tm: FakeTM, body: dict[str, Any], **args: Any) -> tuple[str, str, Any]:
    """``(reasoning, content, usage)`` of the streamed answer to ``body`` (choice 0's deltas
    joined; the usage of the final chunk), each chunk typed by the client; ``[DONE]`` asserted."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    events = sse_data_events(post_chat(tm, body, **args))
    assert events and events[-1] == "[DONE]", events[-3:]
    chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
    reasoning = content = ""
    for ch in chunks:
        for c in ch.choices:
            content += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
    return reasoning, content, chunks[-1].usage


def _details(usage: Any) -> int | None:
    d = usage.completion_tokens_details
    return None if d is None else d.reasoning_tokens


# --------------------------------------------------------------------------- fixed: prefix reasoning


@pytest.mark.parametrize("switch", ["prefix", "continue_final_message"])
@pytest.mark.parametrize(
    "last",
    [
        {"role": "assistant", "content": "", "reasoning_content": "Let me see: 6*7"},
        {"role": "assistant", "content": "", "reasoning_content": "Let me "},
        {"role": "assistant", "content": [], "reasoning_content": "Let me see"},
        {"role": "assistant", "content": ""},
    ],
)
def test_sillytavern_3634_prefix_with_only_reasoning_continues_the_reasoning(
    tok: PreTrainedTokenizerFast, switch: str, last: dict[str, Any]
) -> None:
    """SillyTavern/SillyTavern#3634 (continuing from a partial reasoning with empty content): a
    final assistant message with ``reasoning_content`` and no content, continued in thinking mode,
    was rendered ``<think>R</think>`` -- the reasoning closed, the model made to answer at once --
    and the output was all ``content``. DeepSeek's prefix completion leaves the block open
    (``<think>R``) and reads the output as reasoning up to ``</think>``; an empty final message
    opens an empty block. Same with ``continue_final_message``, streamed or not, over earlier
    turns too. Oracle: DeepSeek's converter and V4 encoder for the prompt (the request with
    ``prefix: true``), its response parser for the split."""
    reply = " so 42.</think>\n\nThe answer is 42."
    for history in (
        HI,
        [*HI, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "6*7?"}],
    ):
        oracle = {"messages": [*history, {**last, "prefix": True}]}
        body = {**ON, "max_tokens": 64}
        if switch == "prefix":
            body["messages"] = oracle["messages"]
        else:
            body.update(messages=[*history, last], continue_final_message=True, add_generation_prompt=False)
        want_prompt = recipe_prompt(oracle, True)
        assert not want_prompt.endswith(THINK_END)
        tm = FakeTM(tok, reply=reply)
        msg = chat_answer(tm, body).choices[0].message
        assert prompt_of(tok, tm) == want_prompt
        want = recipe_message(oracle, reply, True)
        assert want["reasoning_content"] == " so 42."
        assert (reasoning_of(msg), msg.content) == (want["reasoning_content"], want["content"])
        reasoning, content, _ = _streamed(FakeTM(tok, reply=reply), body)
        assert (reasoning, content) == (want["reasoning_content"], want["content"])


def test_sillytavern_3634_chat_mode_and_content_prefixes_continue_the_answer(
    tok: PreTrainedTokenizerFast,
) -> None:
    """SillyTavern/SillyTavern#3634, the other sides: in chat mode the same message continues the
    answer (the reasoning is not rendered, the output is content), and a continued message with
    content in thinking mode continues the answer after the closed reasoning. Oracle: DeepSeek's
    converter, V4 encoder and response parser for the same ``prefix`` requests."""
    cases = [
        ({"role": "assistant", "content": "", "reasoning_content": "Let me", "prefix": True}, False),
        ({"role": "assistant", "content": "The answer", "reasoning_content": "6*7.", "prefix": True}, True),
        ({"role": "assistant", "content": "The answer", "prefix": True}, True),
    ]
    for last, thinking in cases:
        body = {"messages": [*HI, last], "chat_template_kwargs": {"thinking": thinking}}
        want_prompt = recipe_prompt(body, thinking)
        assert want_prompt.endswith(last["content"] or THINK_END)
        tm = FakeTM(tok, reply=" is 42.")
        msg = chat_answer(tm, body).choices[0].message
        assert prompt_of(tok, tm) == want_prompt
        want = recipe_message(body, " is 42.", thinking)
        assert (reasoning_of(msg), msg.content) == (want.get("reasoning_content"), want["content"])


def test_sillytavern_3634_prefix_reasoning_then_json_grammar_waits_for_think_end(
    tok: PreTrainedTokenizerFast,
) -> None:
    """SillyTavern/SillyTavern#3634 with a ``response_format``: the continued reasoning is still
    open, so the answer grammar must come after ``</think>`` (a grammar from the first token would
    force JSON into the reasoning). Oracle: the engine request's own grammar field -- a structural
    tag whose first element ends at ``</think>`` and whose second is the client's schema."""
    tm = FakeTM(tok, reply=' ok.</think>{"a": 1}')
    tm.grammar_enabled = True  # type: ignore[attr-defined]
    last = {"role": "assistant", "content": "", "reasoning_content": "Give json", "prefix": True}
    chat_answer(tm, {**ON, "messages": [*HI, last], "response_format": JSON_FORMAT})
    sp = tm.received[-1].sampling_params
    assert "json_schema" not in sp
    tag = json.loads(sp["structural_tag"])
    first, second = tag["format"]["elements"]
    assert first["end"] == THINK_END and second["json_schema"] == SCHEMA


# --------------------------------------------------------------------------- thinking and JSON


@pytest.mark.parametrize(
    ("extra", "args"),
    [
        ({"chat_template_kwargs": {"enable_thinking": False}}, {}),
        ({"chat_template_kwargs": {"thinking": False}}, {"default_chat_template_kwargs": {"thinking": True}}),
        ({}, {}),
    ],
)
def test_vllm_19222_thinking_off_json_answer_is_content(
    tok: PreTrainedTokenizerFast, extra: dict[str, Any], args: dict[str, Any]
) -> None:
    """vllm-project/vllm#19222 (and vllm-project/vllm#52430, sgl-project/sglang#20586): with
    thinking off -- asked for under either name, over a server default of thinking on, or not
    asked for (the parser's start state must agree with the template's) -- and a JSON
    ``response_format``, ``content`` came back empty and the JSON landed in
    ``reasoning_content``. Expected: the chat-mode prompt, the schema applied from the first
    token (no reasoning element before it), and the JSON as ``content``. Oracles: DeepSeek's
    encoder in chat mode, ``jsonschema`` on the content, DeepSeek's parser for the split."""
    jsonschema = pytest.importorskip("jsonschema")
    body = {
        "messages": [{"role": "user", "content": "Reply in json."}],
        "response_format": JSON_FORMAT,
        **extra,
    }
    tm = FakeTM(tok, reply='{"a": 1}')
    tm.grammar_enabled = True  # type: ignore[attr-defined]
    msg = chat_answer(tm, body, **args).choices[0].message
    assert prompt_of(tok, tm) == recipe_prompt(body, False)
    sp = tm.received[-1].sampling_params
    assert "structural_tag" not in sp and json.loads(sp["json_schema"]) == SCHEMA
    jsonschema.validate(json.loads(msg.content), SCHEMA)
    want = recipe_message(body, '{"a": 1}', False)
    assert (reasoning_of(msg), msg.content) == (want.get("reasoning_content"), want["content"])


def test_vllm_19222_thinking_on_json_grammar_takes_reasoning_then_the_schema(
    tok: PreTrainedTokenizerFast,
) -> None:
    """vllm-project/vllm#19222, thinking on: the JSON grammar must let the reasoning run to
    ``</think>`` and then hold the answer to the schema, and the split gives the JSON as
    ``content``. Oracles: xgrammar's own matcher of the engine request's grammar (it takes
    reasoning + ``</think>`` + a valid object, not the object alone, nor an object the schema
    refuses, as ``jsonschema`` says), DeepSeek's parser for the split."""
    pytest.importorskip("xgrammar")
    jsonschema = pytest.importorskip("jsonschema")
    from grammar_backend_testutil import VOCAB, accepts, ds_grammar_backend
    from sglang_v4.sampling.sampling_params import SamplingParams

    reply = 'The user wants json.</think>{"a": 1}'
    body = {**ON, "messages": [{"role": "user", "content": "Reply in json."}], "response_format": JSON_FORMAT}
    tm = FakeTM(tok, reply=reply)
    tm.grammar_enabled = True  # type: ignore[attr-defined]
    msg = chat_answer(tm, body).choices[0].message
    sp = SamplingParams(structural_tag=tm.received[-1].sampling_params["structural_tag"])
    sp.verify(VOCAB, allow_grammar=True)
    grammar = ds_grammar_backend().create(sp)
    assert grammar is not None
    bad = '{"a": "one"}'
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(bad), SCHEMA)
    assert accepts(grammar, reply)
    assert not accepts(grammar, '{"a": 1}')
    assert not accepts(grammar, "The user wants json.</think>" + bad)
    want = recipe_message(body, reply, True)
    assert (reasoning_of(msg), msg.content) == (want["reasoning_content"], want["content"])


@pytest.mark.parametrize(
    "response_format",
    [
        JSON_FORMAT,
        {
            "type": "json_schema",
            "json_schema": {
                "name": "out",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {"é": {"type": "string", "description": "café <｜User｜>"}},
                },
            },
        },
        {"type": "json_object"},
        {"type": "text"},
    ],
)
@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("system", [True, False])
def test_agno_8357_json_mode_prompt_carries_deepseeks_response_format_section(
    tok: PreTrainedTokenizerFast, response_format: dict[str, Any], thinking: bool, system: bool
) -> None:
    """agno-agi/agno#8357 (DeepSeek JSON mode: a prompt that never tells the model to write JSON,
    nor the expected shape). DeepSeek's own converter puts a "## Response Format" section into the
    system block for ``json_schema`` (the schema) and ``json_object`` (the JSON-only
    instruction), after the tools section, thinking on or off; the chat route rendered none, so the
    prompt differed from DeepSeek's (and SGLang's, which renders V4 through that converter) and
    the model only met the format through the grammar. Also on ``/v1/responses``
    (``text.format``). Oracles: DeepSeek's Chat Completions and Responses converters and V4
    encoder for the same bodies; the DeepSeek-V4 tokenizer's ids (the schema is the client's
    text: a special-token string in it stays text)."""
    msgs = [{"role": "user", "content": "Reply in json."}]
    if system:
        msgs.insert(0, {"role": "system", "content": "Be brief."})
    for tools in (None, TOOLS):
        body: dict[str, Any] = {"messages": msgs, "response_format": response_format}
        if tools:
            body["tools"] = tools
        tm = FakeTM(tok, reply='{"a": 1}')
        tm.grammar_enabled = True  # type: ignore[attr-defined]
        chat_answer(tm, {**body, "chat_template_kwargs": {"thinking": thinking}})
        want = recipe_prompt(body, thinking)
        assert prompt_of(tok, tm) == want
        if response_format["type"] != "text":
            assert "## Response Format:" in want
    if "<｜User｜>" in json.dumps(response_format, ensure_ascii=False):
        ids = list(tm.received[-1].input_ids)
        assert ids.count(tok.convert_tokens_to_ids("<｜User｜>")) == 1  # the turn's own token only
    fmt = response_format
    if response_format["type"] == "json_schema":  # the Responses API's flat spelling
        fmt = {"type": "json_schema", **response_format["json_schema"]}
    body = {"model": MODEL, "input": "Reply in json.", "text": {"format": fmt}}
    tm = FakeTM(tok, reply='{"a": 1}')
    tm.grammar_enabled = True  # type: ignore[attr-defined]
    r = _client(tm).post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    conv = recipe.ResponsesRequest({**copy.deepcopy(body), "model": "DeepSeek-V4-Pro"}).convert(
        recipe.ConversionOptions(default_thinking_mode=False)
    )
    assert prompt_of(tok, tm) == recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt


def test_agno_8357_messages_output_format_stays_out_of_the_prompt(tok: PreTrainedTokenizerFast) -> None:
    """agno-agi/agno#8357, the Messages side: DeepSeek's Messages converter renders no section for
    ``output_config.format`` (the grammar alone holds the answer to the schema), so the prompt
    stays as DeepSeek renders it while the engine request still carries the schema. Oracles:
    DeepSeek's Messages converter and V4 encoder; the engine request's grammar field."""
    body = {
        "model": MODEL, "max_tokens": 30, "messages": [{"role": "user", "content": "Reply in json."}],
        "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
    }  # fmt: skip
    tm, client = messages_client(tok, '{"a": 1}')
    tm.grammar_enabled = True  # type: ignore[attr-defined]
    r = client.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    conv = recipe.MessagesRequest({**copy.deepcopy(body), "model": "DeepSeek-V4-Pro"}).convert(
        recipe.ConversionOptions(default_thinking_mode=False)
    )
    assert prompt_of(tok, tm) == recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt
    assert json.loads(tm.received[-1].sampling_params["json_schema"]) == SCHEMA


# --------------------------------------------------------------------------- truncated reasoning


@pytest.mark.parametrize("max_tokens", [3, 6])
def test_omlx_3796_reasoning_cut_by_the_token_limit_stays_reasoning(
    tok: PreTrainedTokenizerFast, max_tokens: int
) -> None:
    """jundot/omlx#3796 (and jundot/omlx#2457, vllm-project/vllm#56850): a thinking turn cut by
    ``max_tokens`` before ``</think>`` returned its chain of thought as ``content`` (streamed: the
    reasoning re-sent as one content delta at the end). Expected: the cut text is
    ``reasoning_content``, ``content`` is empty, streamed and not alike, ``finish_reason`` is
    ``length``, and every completion token is a reasoning token. Oracles: DeepSeek's parser with a
    length finish; the DeepSeek-V4 tokenizer's count of the cut text."""
    reply = "The user greets me, so I should greet back politely.</think>Hello!"
    ids = tok.encode(reply, add_special_tokens=False)
    cut = tok.decode(ids[:max_tokens])
    assert THINK_END not in cut
    body = {**ON, "messages": HI, "max_tokens": max_tokens}
    answer = chat_answer(FakeTM(tok, reply=reply), body)
    want = recipe_message({"messages": HI}, cut, True, finish="length")
    msg = answer.choices[0].message
    assert answer.choices[0].finish_reason == "length"
    assert (reasoning_of(msg), msg.content or "") == (want["reasoning_content"], want["content"])
    assert _details(answer.usage) == answer.usage.completion_tokens == max_tokens
    reasoning, content, usage = _streamed(FakeTM(tok, reply=reply), body)
    assert (reasoning, content) == (want["reasoning_content"], want["content"])
    assert _details(usage) == max_tokens


# --------------------------------------------------------------------------- reasoning tokens


def test_lightllm_1490_reasoning_tokens_per_choice_and_summed(tok: PreTrainedTokenizerFast) -> None:
    """ModelTC/LightLLM#1490 (and sgl-project/sglang#15660): ``completion_tokens_details.
    reasoning_tokens`` was 0 for reasoning models, streamed or with ``n`` choices. Expected: the
    reasoning tokens of each choice summed over the ``n`` choices, streamed and not alike, counted
    as SGLang 0.5.23's scheduler counts them (every output token up to and including the
    ``</think>`` that ends the reasoning). Oracle: the DeepSeek-V4 tokenizer's ids of each
    choice's reply (the fake engine's choice ``k`` appends ``" #k"`` to the answer)."""
    reply = "Two plus two is four.</think>Four."
    ids = tok.encode(reply, add_special_tokens=False)
    per_choice = ids.index(tok.convert_tokens_to_ids(THINK_END)) + 1
    assert 1 < per_choice < len(ids)
    body = {**ON, "messages": HI, "n": 2}
    answer = chat_answer(FakeTM(tok, reply=reply), body)
    assert _details(answer.usage) == 2 * per_choice
    assert [reasoning_of(c.message) for c in answer.choices] == ["Two plus two is four."] * 2
    _, _, usage = _streamed(FakeTM(tok, reply=reply), body)
    assert _details(usage) == 2 * per_choice
    chat_mode = chat_answer(FakeTM(tok, reply="Four."), {"messages": HI})
    assert not _details(chat_mode.usage)


def test_vllm_33512_responses_reasoning_tokens_and_effort_turns_thinking_on(
    tok: PreTrainedTokenizerFast, tmp_path: Any
) -> None:
    """vllm-project/vllm#33512 (``output_tokens_details.reasoning_tokens`` stayed 0 on
    ``/v1/responses`` for text-tag reasoning models) and sgl-project/sglang#33529
    (``reasoning.effort`` on ``/v1/responses`` rendered the thinking prompt but the parser never
    started inside the reasoning: no reasoning item, the transcript and ``</think>`` as the answer).
    Expected: the prompt DeepSeek renders for the same Responses request (the official effort
    profile), a reasoning item then a message, and the reasoning tokens counted as on the chat
    route; ``effort: "none"`` is chat mode. Oracles: DeepSeek's Responses converter and V4 encoder,
    its chat parser for the split, the tokenizer's ids, the ``openai`` client's ``Response`` type."""
    from openai.types.responses import Response

    model = tmp_path / "official"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"dsv4_reasoning_effort_profile": "official"}))
    reply = "Two plus two.</think>Four."
    ids = tok.encode(reply, add_special_tokens=False)
    n_reasoning = ids.index(tok.convert_tokens_to_ids(THINK_END)) + 1
    for effort, thinking in (("high", True), ("low", True), ("none", False)):
        body = {"model": MODEL, "input": "Hi", "reasoning": {"effort": effort}}
        tm = FakeTM(tok, reply=reply)
        r = _client(tm, model_path=str(model)).post("/v1/responses", json=body)
        assert r.status_code == 200, r.text
        conv = recipe.ResponsesRequest({**copy.deepcopy(body), "model": "DeepSeek-V4-Pro"}).convert(
            recipe.ConversionOptions(default_thinking_mode=False)
        )
        assert prompt_of(tok, tm) == recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt
        resp = Response.model_validate(r.json())
        kinds = [o.type for o in resp.output]
        assert resp.usage is not None
        if thinking:
            want = recipe_message({"messages": HI}, reply, True)
            assert kinds == ["reasoning", "message"]
            texts = [c.text for c in resp.output[0].content or []]
            assert texts == [want["reasoning_content"]]
            assert resp.output_text == want["content"]
            assert resp.usage.output_tokens_details.reasoning_tokens == n_reasoning
        else:
            assert kinds == ["message"] and resp.output_text == reply
            assert resp.usage.output_tokens_details.reasoning_tokens == 0


# --------------------------------------------------------------------------- switches and history


def test_sglang_20586_explicit_thinking_off_beats_the_server_default(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#20586 (and NVIDIA/TensorRT-LLM#14502): with thinking on by the server's
    default (the template forcing reasoning), a request's ``enable_thinking: false`` still had
    its answer parsed as reasoning -- ``content`` empty, the answer in ``reasoning_content``.
    Expected: the request's switch wins for the prompt and the parser alike, streamed and not;
    without the switch the server default (thinking) holds. Oracle: DeepSeek's encoder and parser
    with thinking off / on."""
    default_on = {"default_chat_template_kwargs": {"thinking": True}}
    for name in ("enable_thinking", "thinking"):
        body = {"messages": HI, "chat_template_kwargs": {name: False}}
        tm = FakeTM(tok, reply="Hello there!")
        msg = chat_answer(tm, body, **default_on).choices[0].message
        assert prompt_of(tok, tm) == recipe_prompt(body, False)
        assert (reasoning_of(msg), msg.content) == (None, "Hello there!")
        reasoning, content, _ = _streamed(FakeTM(tok, reply="Hello there!"), body, **default_on)
        assert (reasoning, content) == ("", "Hello there!")
    tm = FakeTM(tok, reply="Greet.</think>Hello there!")
    msg = chat_answer(tm, {"messages": HI}, **default_on).choices[0].message
    assert prompt_of(tok, tm) == recipe_prompt({"messages": HI}, True)
    assert (reasoning_of(msg), msg.content) == ("Greet.", "Hello there!")


HISTORIES = {
    "answer then question": [
        *HI,
        {"role": "assistant", "reasoning_content": "Greet.", "content": "Hello!"},
        {"role": "user", "content": "2+2?"},
    ],
    "tool loop": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "reasoning_content": "Need the tool.", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
    ],
    "tool loop, content null": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "reasoning_content": "Need the tool.", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
    ],
    "tool loop then a new question": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "reasoning_content": "Need the tool.", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
        {"role": "assistant", "reasoning_content": "Sunny it is.", "content": "It is sunny."},
        {"role": "user", "content": "Thanks!"},
    ],
    "calls with no reasoning echoed": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
    ],
}


@pytest.mark.parametrize("history", list(HISTORIES))
@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("tools", [True, False])
def test_vercel_ai_14740_reasoning_history_kept_or_dropped_as_deepseek_renders_it(
    tok: PreTrainedTokenizerFast, history: str, thinking: bool, tools: bool
) -> None:
    """vercel/ai#14740 (and langchain-ai/langchain#37713, openclaw/openclaw#71050): DeepSeek-V4
    thinking mode needs the ``reasoning_content`` of earlier assistant turns passed back --
    kept in a tool loop, dropped before the last user turn without tools, left out when thinking
    is off -- and clients that stripped or replayed it the wrong way broke the conversation.
    Expected: a history carrying ``reasoning_content`` renders exactly as DeepSeek's converter
    and V4 encoder render it, with and without tools, thinking on and off. Oracle: DeepSeek's
    converter and V4 encoder for the same body."""
    body: dict[str, Any] = {"messages": HISTORIES[history], "chat_template_kwargs": {"thinking": thinking}}
    if tools:
        body["tools"] = TOOLS
    tm = FakeTM(tok, reply="Done.")
    chat_answer(tm, body)
    assert prompt_of(tok, tm) == recipe_prompt(body, thinking)


# --------------------------------------------------------------------------- Anthropic thinking blocks


ANTHROPIC_TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather of a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
USE = {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Sunny"}]}


@pytest.mark.parametrize(
    "blocks",
    [
        [{"type": "thinking", "thinking": "", "signature": "sig-omitted"}, USE],
        [{"type": "thinking", "thinking": "Need the tool.", "signature": "s1"}, USE],
        [
            {"type": "thinking", "thinking": "First.", "signature": "s1"},
            {"type": "thinking", "thinking": "Second.", "signature": "s2"},
            USE,
        ],
        [
            {"type": "thinking", "thinking": "Need the tool.", "signature": "s1"},
            {"type": "text", "text": "Checking."},
            USE,
        ],
    ],
)
@pytest.mark.parametrize("thinking", [{"type": "enabled", "budget_tokens": 2048}, {"type": "disabled"}])
def test_goai_142_signed_thinking_blocks_replayed_in_a_messages_history(
    tok: PreTrainedTokenizerFast, blocks: list[dict[str, Any]], thinking: dict[str, Any]
) -> None:
    """zendev-sh/goai#142 (and open-webui/open-webui#29860): a ``thinking`` block with an empty
    ``thinking`` and a signature (``display: "omitted"``), or several signed blocks in one turn,
    must be replayed with the turn; gateways dropped them or failed on them. Expected: the
    history is taken (200) and renders as DeepSeek's own Messages converter and V4 encoder render
    it, thinking on and off, and the answer's thinking block comes back signed (the ``anthropic``
    client's ``Message`` type). Oracle: DeepSeek's Messages converter and encoder."""
    from anthropic.types import Message

    msgs = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": blocks},
        RESULT,
    ]
    body = {
        "model": MODEL, "max_tokens": 64, "messages": msgs, "tools": ANTHROPIC_TOOLS,
        "thinking": thinking, "output_config": {"effort": "low"},
    }  # fmt: skip
    tm, client = messages_client(tok, "It is sunny.</think>Sunny in Paris.")
    r = client.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    conv = recipe.MessagesRequest(
        {**ids_in_written_order(body, "toolu_"), "model": "DeepSeek-V4-Pro"}
    ).convert(recipe.ConversionOptions(default_thinking_mode=False))
    assert prompt_of(tok, tm) == recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt
    out = Message.model_validate(r.json())
    if thinking["type"] == "enabled":
        first = out.content[0]
        assert first.type == "thinking" and first.thinking == "It is sunny." and first.signature
        assert [b.type for b in out.content] == ["thinking", "text"]
    else:
        assert [b.type for b in out.content] == ["text"]


def test_open_webui_29860_streamed_thinking_signature_accumulates_to_the_message(
    tok: PreTrainedTokenizerFast,
) -> None:
    """open-webui/open-webui#29860 (and tensorzero/tensorzero#1413): a streamed thinking block
    must carry its ``signature_delta`` before the block stops, so that a client that rebuilds the
    message from the events holds the same signed block as the non-streamed answer. Oracle: the
    ``anthropic`` client's own stream accumulator (``MessageStream``) over the SSE body, and the
    non-streamed ``Message``."""
    from anthropic.lib.streaming import MessageStream
    from anthropic.types import Message

    body = {
        "model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}],
        "thinking": {"type": "adaptive"},
    }  # fmt: skip
    _, client = messages_client(tok, "Greet back.</think>Hello!")
    plain = Message.model_validate(client.post("/v1/messages", json=body).json())
    http = anthropic.Anthropic(
        base_url="http://testserver", api_key="none", http_client=client, max_retries=0
    )
    with http.messages.stream(**body) as stream:
        assert isinstance(stream, MessageStream)
        built = stream.get_final_message()
    assert [b.type for b in built.content] == [b.type for b in plain.content] == ["thinking", "text"]
    assert built.content[0].thinking == plain.content[0].thinking == "Greet back."
    assert built.content[0].signature and built.content[0].signature == plain.content[0].signature
    assert built.content[1].text == plain.content[1].text == "Hello!"

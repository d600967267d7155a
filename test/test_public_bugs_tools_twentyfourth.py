"""A twenty-fourth set of public reports on tool calling (DeepSeek-V4 DSML calls, ``tool_choice``,
streamed call deltas, call ids, arguments JSON) on ``/v1/chat/completions``, ``/v1/responses``
and ``/v1/messages``, in process.

Fixed here: the text a reply wrote after a DSML block (a call block, an empty block, a
malformed one) lost its leading whitespace, so ``"Checking." <block> " Then ..."`` came back as
``"Checking.Then ..."``; the whitespace after a block is now held and kept as the separator
when text follows (dropped when the reply ends there, or when nothing, or whitespace, came
before the block). The other reports found no fault and stand as regression tests of the
behaviour each asked for. The model's text is written by hand
(:class:`~chat_tools_testutil.ChunkTM`, ``n`` tokens per streamed chunk). Oracles: DeepSeek's own
converters, V4 encoder and response parsers (``deepseek-recipe``), the ``openai`` and
``anthropic`` clients' types and stream accumulators, ``json.loads``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from chat_tools_testutil import (
    WEATHER,
    WEATHER_FLAT,
    ChunkTM,
    fold_chat_stream,
    grammar_chunk_tm,
    routes_client,
    sse_chunks,
)
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import Response as OpenAIResponse
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_message as _recipe_message  # noqa: E402
from deepseek_recipe_testutil import recipe_messages_response as _recipe_messages_response  # noqa: E402
from deepseek_recipe_testutil import recipe_prompt as _recipe_prompt  # noqa: E402

CHAT = "/v1/chat/completions"
RESP = "/v1/responses"
MSGS_PATH = "/v1/messages"
MSGS = [{"role": "user", "content": "Weather in Paris?"}]
ANTHROPIC_WEATHER = {
    "name": "get_weather",
    "description": WEATHER["function"]["description"],
    "input_schema": WEATHER["function"]["parameters"],
}
NOARG = {
    "type": "function",
    "function": {"name": "list_tasks", "parameters": {"type": "object", "properties": {}}},
}
CALL_PARIS = dsml_block(
    dsml_invoke("get_weather", dsml_param("city", True, "Paris"), dsml_param("days", False, "3"))
)
CALL_TWO = dsml_block(
    dsml_invoke("get_weather", dsml_param("city", True, "Rome")),
    dsml_invoke("get_weather", dsml_param("city", True, "Oslo"), dsml_param("days", False, "2")),
)
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _recipe_calls(body: dict[str, Any], reply: str, finish: str = "stop") -> list[tuple[str, str]]:
    """``[(name, arguments text)]`` of DeepSeek's response parser for ``reply``."""
    msg = _recipe_message(body, reply, finish=finish)
    return [(c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls") or []]


def _calls(message: Any) -> list[tuple[str, str]]:
    """``[(name, arguments text)]`` of an ``openai`` message object."""
    return [(c.function.name, c.function.arguments) for c in message.tool_calls or []]


# --------------------------------------------------------------------------- cut calls


def test_call_cut_by_max_tokens_reports_length_on_every_route(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#58228, ai-dynamo/dynamo#13791 and
    MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#55 (a DeepSeek-V4 tool call cut by
    ``max_tokens`` reported ``finish_reason: "tool_calls"``, so clients executed a half-written
    call), and NousResearch/hermes-agent#7693 (clients had to guess the cut from the arguments).
    Expected: the cut is the finish reason the client sees on every route: chat ``length``
    (streamed and not), Responses ``incomplete`` / ``max_output_tokens``, Messages
    ``max_tokens``; the cut call's arguments (chat) and input (Messages) as DeepSeek's own parsers
    give them. Oracles: ``deepseek-recipe`` (chat and Messages parsers, cut by ``length``), the
    ``openai`` client's types and stream accumulator, OpenAI's finish-reason semantics."""
    ids = tok.encode(CALL_PARIS, add_special_tokens=False)
    # cut inside the first parameter's value, so the cut arguments are a JSON object's beginning
    limit = next(n for n in range(len(ids)) if tok.decode(ids[:n]).endswith('string="true">Paris'))
    cut_text = tok.decode(ids[:limit])
    body = {"messages": MSGS, "tools": [WEATHER], "max_tokens": limit}
    want = _recipe_calls(body, cut_text, finish="length")
    full = _recipe_calls(body, CALL_PARIS)
    assert want[0][1] and full[0][1].startswith(want[0][1]) and want != full
    tc = routes_client(grammar_chunk_tm(tok, CALL_PARIS))
    r = tc.post(CHAT, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    ch = openai.types.chat.ChatCompletion.model_validate(r.json()).choices[0]
    assert ch.finish_reason == "length"
    assert _calls(ch.message) == want
    s = tc.post(CHAT, json={"model": "m", **body, "stream": True})
    folded = fold_chat_stream(s.text).choices[0]
    assert folded.finish_reason == "length"
    assert _calls(folded.message) == want

    r = tc.post(
        RESP,
        json={
            "model": "m",
            "input": "Weather in Paris?",
            "tools": [WEATHER_FLAT],
            "max_output_tokens": limit,
        },
    )
    assert r.status_code == 200, r.text
    resp = OpenAIResponse.model_validate(r.json())
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None and resp.incomplete_details.reason == "max_output_tokens"

    mbody = {"messages": MSGS, "tools": [ANTHROPIC_WEATHER], "max_tokens": limit}
    oracle = _recipe_messages_response(mbody, cut_text, False, finish="length")
    r = tc.post(MSGS_PATH, json={"model": "m", **mbody})
    assert r.status_code == 200, r.text
    msg = anthropic.types.Message.model_validate(r.json())
    assert msg.stop_reason == oracle["stop_reason"] == "max_tokens"
    got = [(b.name, b.input) for b in msg.content if b.type == "tool_use"]
    assert got == [(b["name"], b["input"]) for b in oracle["content"] if b["type"] == "tool_use"]


# --------------------------------------------------------------------------- text that only looks like a call


#: tool-call-shaped text that is no DSML: other models' markup, and DSML's tags without its tokens
NOT_DSML = [
    'Write it as <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call> then.',
    '[get_weather(city="Paris")] is the call you would make.',
    '<invoke name="get_weather">\n<parameter name="city" string="true">Paris</parameter>\n</invoke>',
    '<tool_call id="call_00_x" name="get_weather">\n{"city": "Paris"}\n</tool_call>',
]


@pytest.mark.parametrize("text", NOT_DSML)
@pytest.mark.parametrize("tools", ["absent", "none", "auto"])
def test_tool_shaped_text_that_is_no_dsml_stays_content(
    tok: PreTrainedTokenizerFast, text: str, tools: str
) -> None:
    """vllm-project/vllm#55080 and vllm-project/vllm#55089 (with no tools, or ``tool_choice:
    "none"``, a tool parser still consumed tool-call-shaped text, answering ``content: null``),
    raullenchai/Rapid-MLX#1761 (a phantom call promoted from text under ``"none"``),
    anomalyco/opencode#34676 (a DeepSeek-V4 reply of ``<invoke>`` / ``<parameter>`` tags
    without the DSML tokens) and felinics/Memoh#435 / felinics/Memoh#436 (a DeepSeek-V4 reply
    of ``<tool_call id=.. name=..>`` text). Expected: text that is no DSML block is the answer's content,
    verbatim, with no tool call, whether tools are absent, withheld or offered, streamed or not,
    as DeepSeek's own parser reads it. Oracle: ``deepseek-recipe``'s response parser."""
    body: dict[str, Any] = {"messages": MSGS}
    if tools != "absent":
        body |= {"tools": [WEATHER], "tool_choice": tools}
    oracle = _recipe_message(body, text)
    assert oracle["content"] == text and not oracle.get("tool_calls")
    tc = routes_client(grammar_chunk_tm(tok, text))
    r = tc.post(CHAT, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    ch = openai.types.chat.ChatCompletion.model_validate(r.json()).choices[0]
    assert (ch.message.content, ch.message.tool_calls, ch.finish_reason) == (text, None, "stop")
    folded = fold_chat_stream(tc.post(CHAT, json={"model": "m", **body, "stream": True}).text).choices[0]
    assert (folded.message.content, folded.message.tool_calls, folded.finish_reason) == (text, None, "stop")


# --------------------------------------------------------------------------- n > 1


class _NChoiceTM(ChunkTM):
    """Generates ``replies[i]`` as choice ``i`` of one request (``n`` choices), the choices'
    streamed outputs interleaved token by token, as the engine's parallel samples arrive."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        super().__init__(tokenizer, replies[0])
        self.replies = replies
        self.grammar_enabled = True

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        self.received.append(obj)
        per_choice: list[list[dict[str, Any]]] = []
        for i, reply in enumerate(self.replies):
            outs = [o async for o in ChunkTM(self.tokenizer, reply).generate_request(obj)]
            per_choice.append([{**o, "index": i} for o in outs])
        if not obj.stream:
            yield [outs[-1] for outs in per_choice]
            return
        for k in range(max(map(len, per_choice))):
            for outs in per_choice:
                if k < len(outs):
                    yield outs[k]


def test_n_choices_keep_their_own_calls_and_distinct_ids(tok: PreTrainedTokenizerFast) -> None:
    """ai-dynamo/dynamo#12680: with ``n > 1`` two choices' tool calls were keyed by call id
    alone, so one choice's call was dropped as a duplicate of the other's. Expected: each
    choice's calls are its own reply's (streamed, folded per choice index, and not), and every
    call id of the answer is distinct across the choices. Oracles: ``deepseek-recipe``'s parser
    per reply, the ``openai`` client's stream accumulator."""
    replies = [CALL_PARIS, CALL_TWO]
    body = {"messages": MSGS, "tools": [WEATHER], "n": 2}
    # DeepSeek's converter serves n = 1 only: each reply read on its own
    want = [_recipe_calls({"messages": MSGS, "tools": [WEATHER]}, r) for r in replies]
    tc = routes_client(_NChoiceTM(tok, replies))
    r = tc.post(CHAT, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    plain = openai.types.chat.ChatCompletion.model_validate(r.json()).choices
    folded = fold_chat_stream(tc.post(CHAT, json={"model": "m", **body, "stream": True}).text).choices
    for choices in (plain, folded):
        assert [c.index for c in choices] == [0, 1]
        assert [_calls(c.message) for c in choices] == want
        assert [c.finish_reason for c in choices] == ["tool_calls", "tool_calls"]
        ids = [t.id for c in choices for t in c.message.tool_calls or []]
        assert len(ids) == 3 and len(set(ids)) == 3, ids


# --------------------------------------------------------------------------- streamed deltas


@pytest.mark.parametrize("per_chunk", [1, 7, 100000])
def test_chat_call_deltas_carry_index_and_open_with_id_and_name(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """vllm-project/vllm#31438 (a call's last delta lost its ``id`` / ``type`` / ``name`` when
    the whole call arrived in one engine step), aaif-goose/goose#11511 (continuation deltas
    without ``index`` were dropped) and Zoo-Code-Org/Zoo-Code#695 (argument bytes before the
    call's ``id`` were dropped). Expected, however the engine groups tokens: every tool-call
    delta has its ``index``; a call's first delta has its ``id``, ``type`` and name, and no
    delta of it comes earlier; the deltas folded are the calls DeepSeek's parser reads. Oracles:
    ``deepseek-recipe``, the ``openai`` client's chunk types and accumulator."""
    reply = "Checking both." + CALL_TWO
    body = {"messages": MSGS, "tools": [WEATHER]}
    r = routes_client(grammar_chunk_tm(tok, reply, per_chunk)).post(
        CHAT, json={"model": "m", **body, "stream": True}
    )
    assert r.status_code == 200, r.text
    seen: set[int] = set()
    for raw in sse_chunks(r.text):
        chunk = ChatCompletionChunk.model_validate(raw)
        for c in chunk.choices:
            for i, d in enumerate(raw["choices"][0]["delta"].get("tool_calls") or []):
                assert isinstance(d.get("index"), int), d
                t = c.delta.tool_calls[i]  # type: ignore[index]
                if t.index not in seen:
                    assert t.id and t.type == "function" and t.function and t.function.name, d
                    seen.add(t.index)
    assert seen == {0, 1}
    folded = fold_chat_stream(r.text).choices[0]
    oracle = _recipe_message(body, reply)
    assert folded.message.content == oracle["content"] == "Checking both."
    assert _calls(folded.message) == _recipe_calls(body, reply)


def test_responses_call_in_one_engine_step_streams_its_whole_arguments(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#42683: when a call's name and its first argument text came in one
    engine step, the Responses stream dropped that argument text, so ``done.arguments`` was no
    JSON. Expected, with the whole answer (text, then two calls) in one engine step: each
    ``function_call`` item's argument deltas joined are its ``arguments.done`` text, its
    ``output_item.done`` item's and the final response's, and they are the calls DeepSeek's
    parser reads. Oracles: ``deepseek-recipe``, the ``openai`` client's event and response
    types, ``json.loads``."""
    reply = "Checking both." + CALL_TWO
    r = routes_client(grammar_chunk_tm(tok, reply, per_chunk=100000)).post(
        RESP,
        json={"model": "m", "input": "Weather in Rome and Oslo?", "tools": [WEATHER_FLAT], "stream": True},
    )
    assert r.status_code == 200, r.text
    events = [EVENTS.validate_python(e) for e in sse_chunks(r.text)]
    deltas: dict[str, str] = {}
    done: dict[str, str] = {}
    items: dict[str, str] = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            deltas[e.item_id] = deltas.get(e.item_id, "") + e.delta
        elif e.type == "response.function_call_arguments.done":
            done[e.item_id] = e.arguments
        elif e.type == "response.output_item.done" and e.item.type == "function_call":
            items[e.item.id] = e.item.arguments  # type: ignore[union-attr]
    final = next(e.response for e in events if e.type == "response.completed")
    final_args = {o.id: o.arguments for o in final.output if o.type == "function_call"}
    assert deltas == done == items == final_args
    want = _recipe_calls({"messages": MSGS, "tools": [WEATHER]}, reply)
    got = [(o.name, o.arguments) for o in final.output if o.type == "function_call"]
    assert [(n, json.loads(a)) for n, a in got] == [(n, json.loads(a)) for n, a in want]


# --------------------------------------------------------------------------- tool_choice


def test_named_choice_of_a_tool_without_parameters_is_forced(tok: PreTrainedTokenizerFast) -> None:
    """ggml-org/llama.cpp#26849: a named ``tool_choice`` object was read as ``"auto"``, so a
    call of a tool with empty arguments was not forced and stayed in the reasoning. Expected:
    the engine request carries a constraint that opens the named tool's DSML invoke (no other
    tool's), and the call comes back with ``{}`` arguments, ``finish_reason: "tool_calls"``, as
    DeepSeek's parser reads it. Oracles: ``deepseek-recipe``, the structural tag's own text (the
    DSML invoke tag of the named tool), the ``openai`` client's types."""
    reply = dsml_block(dsml_invoke("list_tasks"))
    body = {
        "messages": [{"role": "user", "content": "What is on my list?"}],
        "tools": [WEATHER, NOARG],
        "tool_choice": {"type": "function", "function": {"name": "list_tasks"}},
    }
    tm = grammar_chunk_tm(tok, reply)
    r = routes_client(tm).post(CHAT, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    ch = openai.types.chat.ChatCompletion.model_validate(r.json()).choices[0]
    assert _calls(ch.message) == _recipe_calls(body, reply) == [("list_tasks", "{}")]
    assert ch.finish_reason == "tool_calls"
    tag = (tm.received[0].sampling_params or {}).get("structural_tag")
    assert isinstance(tag, str), tm.received[0].sampling_params
    assert 'invoke name=\\"list_tasks\\"' in tag and "get_weather" not in tag


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, {"messages": MSGS, "tool_choice": "required"}),
        (CHAT, {"messages": MSGS, "tool_choice": "required", "tools": None}),
        (RESP, {"input": "Weather in Paris?", "tool_choice": "required"}),
        (RESP, {"input": "Weather in Paris?", "tool_choice": "required", "tools": []}),
    ],
)
def test_required_choice_without_tools_is_a_400(
    tok: PreTrainedTokenizerFast, path: str, body: dict[str, Any]
) -> None:
    """raullenchai/Rapid-MLX#744: ``tool_choice: "required"`` with ``tools`` absent or empty
    was a 200 in which the model just chatted, though the request can never be satisfied.
    Expected: a 400 in OpenAI's error shape naming ``tool_choice`` (or ``tools``), and no
    engine request. Oracle: the ``openai`` client's ``BadRequestError`` and error body."""
    tm = grammar_chunk_tm(tok, "Hello.")
    tc = routes_client(tm)
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=tc, max_retries=0)
    with pytest.raises(openai.BadRequestError) as ei:
        client.post(path.removeprefix("/v1"), body={"model": "m", **body}, cast_to=object)
    err = ei.value.body
    assert isinstance(err, dict) and err.get("param") in ("tool_choice", "tools"), err
    assert tm.received == []


# --------------------------------------------------------------------------- history and arguments


def test_null_content_call_answered_by_an_empty_tool_result_is_served(tok: PreTrainedTokenizerFast) -> None:
    """can1357/oh-my-pi#1586: replaying an assistant tool-call turn with ``content: null``
    followed by an empty tool result crashed a server that joined the content as a string.
    Expected: served, the prompt the one DeepSeek's own converter and V4 encoder render for the
    same messages. Oracle: ``deepseek-recipe``."""
    messages = [
        {"role": "user", "content": "Run the subagent."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": ""},
    ]
    body = {"messages": messages, "tools": [WEATHER]}
    tm = grammar_chunk_tm(tok, "Done.")
    r = routes_client(tm).post(CHAT, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    want = tok.encode(_recipe_prompt(body, False), add_special_tokens=False)
    assert list(tm.received[0].input_ids) == want


@pytest.mark.parametrize("per_chunk", [1, 100000])
def test_non_ascii_arguments_are_literal_utf8(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """Yeachan-Heo/gajae-code#4352, langchain-ai/langchain#37746 and pipecat-ai/pipecat#3536:
    non-ASCII argument values (Hangul, CJK, emoji) serialised as ``\\uXXXX`` escapes, which
    clients displayed or even corrupted. Expected: chat (streamed and not) and Responses
    ``arguments`` carry the characters literally, the very text DeepSeek's parser gives, and
    decode to the values the model wrote. Oracles: ``deepseek-recipe``, ``json.loads``."""
    city = "병목 北京 🚀"
    reply = dsml_block(dsml_invoke("get_weather", dsml_param("city", True, city)))
    body = {"messages": MSGS, "tools": [WEATHER]}
    want = _recipe_calls(body, reply)
    assert json.loads(want[0][1]) == {"city": city}
    tc = routes_client(grammar_chunk_tm(tok, reply, per_chunk))
    r = tc.post(CHAT, json={"model": "m", **body})
    plain = _calls(openai.types.chat.ChatCompletion.model_validate(r.json()).choices[0].message)
    folded = _calls(
        fold_chat_stream(tc.post(CHAT, json={"model": "m", **body, "stream": True}).text).choices[0].message
    )
    r = tc.post(RESP, json={"model": "m", "input": "Weather?", "tools": [WEATHER_FLAT]})
    resp = OpenAIResponse.model_validate(r.json())
    responses = [(o.name, o.arguments) for o in resp.output if o.type == "function_call"]
    for got in (plain, folded, responses):
        assert got == want
        assert "\\u" not in got[0][1] and city in got[0][1]


# --------------------------------------------------------------------------- parameter values and block shapes

EDIT = {
    "type": "function",
    "function": {
        "name": "edit",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "count": {"type": "integer"}},
        },
    },
}

#: ``(string value, JSON text of count)``: values whose whitespace is data, and a padded number
WHITESPACE = [
    ("  café\n", " 42 "),
    ("\n\tif x:\n\t\treturn 1\n\n", "1"),
    ("   ", "0"),
    ("", "7"),
    ("null", "\n3\n"),
]


@pytest.mark.parametrize(("text", "count"), WHITESPACE)
@pytest.mark.parametrize("per_chunk", [1, 100000])
def test_string_values_keep_their_whitespace(
    tok: PreTrainedTokenizerFast, text: str, count: str, per_chunk: int
) -> None:
    """ai-dynamo/frontend-crates#247 and vllm-project/vllm#48846: a DSML parser stripped every
    parameter value, so ``string="true"`` values lost their indentation and trailing newlines
    (breaking exact-match edit tools), whitespace-only values became empty. Expected: a
    ``string="true"`` value is the string verbatim (``"null"`` stays a string); a
    ``string="false"`` value padded with whitespace is its JSON value; streamed and not, the
    arguments are the object DeepSeek's parser gives. Oracles: ``deepseek-recipe``,
    ``json.loads``."""
    reply = dsml_block(dsml_invoke("edit", dsml_param("text", True, text), dsml_param("count", False, count)))
    body = {"messages": MSGS, "tools": [WEATHER, EDIT]}
    want = [(n, json.loads(a)) for n, a in _recipe_calls(body, reply)]
    assert want == [("edit", {"text": text, "count": json.loads(count)})]
    tc = routes_client(grammar_chunk_tm(tok, reply, per_chunk))
    r = tc.post(CHAT, json={"model": "m", **body})
    plain = openai.types.chat.ChatCompletion.model_validate(r.json()).choices[0].message
    folded = (
        fold_chat_stream(tc.post(CHAT, json={"model": "m", **body, "stream": True}).text).choices[0].message
    )
    for msg in (plain, folded):
        assert [(n, json.loads(a)) for n, a in _calls(msg)] == want


@pytest.mark.parametrize("gap", ["\n", "", " "])
def test_block_without_the_blank_line_before_it_is_still_a_call(
    tok: PreTrainedTokenizerFast, gap: str
) -> None:
    """PrimeIntellect-ai/renderers#140: a DeepSeek-V4 parser read a DSML block as a call only
    after the format's exact ``"\\n\\n"``, so a block after one newline (or none) came back as
    content. Expected: the block is the call and the text before it the content, streamed and
    not, as DeepSeek's parser reads it. Oracles: ``deepseek-recipe``, the ``openai`` client's
    accumulator."""
    block = dsml_block(dsml_invoke("get_weather", dsml_param("city", True, "Paris")))
    reply = "Let me check." + gap + block.removeprefix("\n\n")
    body = {"messages": MSGS, "tools": [WEATHER]}
    oracle = _recipe_message(body, reply)
    want = _recipe_calls(body, reply)
    assert want and oracle["content"].strip() == "Let me check."
    tc = routes_client(grammar_chunk_tm(tok, reply))
    r = tc.post(CHAT, json={"model": "m", **body})
    plain = openai.types.chat.ChatCompletion.model_validate(r.json()).choices[0]
    folded = fold_chat_stream(tc.post(CHAT, json={"model": "m", **body, "stream": True}).text).choices[0]
    for ch in (plain, folded):
        assert (ch.message.content or "").strip() == oracle["content"].strip()
        assert _calls(ch.message) == want
        assert ch.finish_reason == "tool_calls"


DSML = "\uff5cDSML\uff5c"

#: ``(reply, content)``: degenerate DSML fragments (an empty block between texts, stray closers
#: after an answer) and the reply with its tags, and the format's blank line before the block, cut
FRAGMENTS = [
    (f"Before.\n\n<{DSML}tool_calls>\n</{DSML}tool_calls>\nAfter.", "Before.\nAfter."),
    (f"Before.<{DSML}tool_calls></{DSML}tool_calls> After.", "Before. After."),
    (f"Done.</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}tool_calls>", "Done."),
]


@pytest.mark.parametrize(("reply", "want"), FRAGMENTS)
@pytest.mark.parametrize("per_chunk", [1, 100000])
def test_empty_block_and_stray_closers_leave_the_text_and_no_markup(
    tok: PreTrainedTokenizerFast, reply: str, want: str, per_chunk: int
) -> None:
    """vllm-project/vllm#56184: DeepSeek-V4's degenerate DSML fragments, an empty
    ``tool_calls`` block (its parser then swallowed every word after it) and stray closers with
    no open block (leaked as visible text). Known gap here: the whitespace after the empty
    block was dropped, joining the words around it (``"Before.After."``). Expected: no call,
    finish ``stop``, the content the reply's text with the DSML tags cut out (streamed and not),
    its words as Python's ``str.split`` reads the reply with the tags replaced by spaces.
    Oracles: the hand-cut text, Python ``re``, the ``openai`` client's accumulator."""
    assert re.sub(rf"</?{DSML}\w+>", " ", reply).split() == want.split()
    tc = routes_client(grammar_chunk_tm(tok, reply, per_chunk))
    body = {"messages": MSGS, "tools": [WEATHER]}
    r = tc.post(CHAT, json={"model": "m", **body})
    plain = openai.types.chat.ChatCompletion.model_validate(r.json()).choices[0]
    folded = fold_chat_stream(tc.post(CHAT, json={"model": "m", **body, "stream": True}).text).choices[0]
    for ch in (plain, folded):
        assert (ch.message.content, ch.message.tool_calls, ch.finish_reason) == (want, None, "stop")


#: ``(text after the block, content)``: the reply's text after a call block keeps its separator
AFTER_BLOCK = [
    (" Then I will summarise.", "Checking. Then I will summarise."),
    ("\nThen I will summarise.", "Checking.\nThen I will summarise."),
    ("\n", "Checking."),
    ("\n\n", "Checking."),
]


@pytest.mark.parametrize(("after", "want"), AFTER_BLOCK)
@pytest.mark.parametrize("per_chunk", [1, 3, 100000])
def test_text_after_a_call_block_keeps_its_word_boundary(
    tok: PreTrainedTokenizerFast, after: str, want: str, per_chunk: int
) -> None:
    """vllm-project/vllm#56184 (the text around DSML markup is to be surfaced normally), on a
    block that holds a call. Known gap here:
    the text after a call block lost its leading whitespace, so ``"Checking." <block> " Then
    ..."`` came back as ``"Checking.Then ..."``, two sentences run together. Expected: the block
    becomes the call; the content is the text before it and, when text follows, the text after
    it with its separating whitespace (trailing whitespace after the block alone is no
    content), streamed in every chunking and not; on ``/v1/messages`` that text is a ``text``
    block after the ``tool_use`` one; the call is the one DeepSeek's parser reads. Oracles: the
    hand-written text, ``deepseek-recipe`` (the call), the ``openai`` and ``anthropic`` clients'
    types and accumulator."""
    reply = "Checking." + dsml_block(dsml_invoke("get_weather", dsml_param("city", True, "Paris"))) + after
    body = {"messages": MSGS, "tools": [WEATHER]}
    calls = _recipe_calls(body, reply)
    tc = routes_client(grammar_chunk_tm(tok, reply, per_chunk))
    r = tc.post(CHAT, json={"model": "m", **body})
    plain = openai.types.chat.ChatCompletion.model_validate(r.json()).choices[0].message
    folded = (
        fold_chat_stream(tc.post(CHAT, json={"model": "m", **body, "stream": True}).text).choices[0].message
    )
    for msg in (plain, folded):
        assert (msg.content, _calls(msg)) == (want, calls)
    # the Messages API keeps the text after the calls in a block of its own (the block boundary
    # its separator)
    r = tc.post(
        MSGS_PATH, json={"model": "m", "max_tokens": 500, "messages": MSGS, "tools": [ANTHROPIC_WEATHER]}
    )
    blocks = [
        (b.type, getattr(b, "text", None)) for b in anthropic.types.Message.model_validate(r.json()).content
    ]
    tail = [("text", after.strip())] if after.strip() else []
    assert blocks == [("text", "Checking."), ("tool_use", None), *tail]

"""Public bug reports of peer servers', gateways' and clients' Anthropic Messages API handling
(``/v1/messages``, ``/v1/messages/count_tokens``): usage on ``message_delta`` (cumulative, never
null, cache split), stop sequences through the real stop-string path, ``tool_use`` /
``tool_result`` pairing errors, ``tool_choice`` (``none``, ``disable_parallel_tool_use``),
``stop_reason`` on every finished message, and ``count_tokens`` on a whole Messages body.

Replayed through the in-process routes on a fake tokenizer manager (no server, no model).
Oracles: Anthropic's API reference and the reports' stated expected values; the ``anthropic``
client's own types and stream accumulator; DeepSeek's own Messages converter
(``deepseek-recipe``) for the prompt a request renders, tokenized by the DeepSeek tokenizer
(``tok``) for token counts; plain string operations for the text a stop sequence leaves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest
from anthropic.types import MessageDeltaUsage
from anthropic_testutil import NO_THINK, WEATHER, make_clients
from anthropic_testutil import stream_events as _stream
from fake_prompt_tm import CALL, MODEL, D, PromptTM
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import stop_holdback
from stop_strings_testutil import generate_with_stops
from transformers import PreTrainedTokenizerFast

pytest.importorskip("deepseek_recipe")
from deepseek_recipe_testutil import recipe_messages_prompt  # noqa: E402

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
#: two ``get_weather`` calls in one DSML block (Paris, then Rome)
TWO_CALLS = (
    f'\n\n<{D}tool_calls>\n<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="city" string="true">Paris</{D}parameter>\n</{D}invoke>\n'
    f'<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="city" string="true">Rome</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
)


def _n_tokens(tok: PreTrainedTokenizerFast, text: str) -> int:
    """Tokens of ``text`` as the DeepSeek tokenizer reads it (special tokens in the text count)."""
    return len(tok.encode(text, add_special_tokens=False))


def _prompt_tokens(tok: PreTrainedTokenizerFast, body: dict[str, Any]) -> int:
    """Tokens of the prompt DeepSeek's own Messages converter renders for ``body`` (thinking off)."""
    return _n_tokens(tok, recipe_messages_prompt(body, thinking=False))


# ----------------------------------------------------------------------------- usage
def test_message_delta_repeats_the_input_side_usage(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#33419 (SGLang's Messages stream ended with ``message_delta.usage`` holding
    only ``output_tokens``; the reference API repeats the input-side counts there, cumulatively):
    ``message_delta.usage.input_tokens`` equals ``message_start``'s, and both are the prompt's
    token count (DeepSeek's own converter's prompt, tokenized)."""
    body = {"messages": USER, "thinking": NO_THINK}
    _, _, tc = make_clients(PromptTM(tok, reply="Sunny and mild."))
    events = _stream(tc, body)
    start = events[0]["message"]["usage"]
    delta = events[-2]["usage"]
    want = _prompt_tokens(tok, body)
    assert start["input_tokens"] == want
    assert delta["input_tokens"] == want
    assert delta["output_tokens"] == _n_tokens(tok, "Sunny and mild.")


def test_cache_split_sums_to_the_prompt_on_every_usage(tok: PreTrainedTokenizerFast) -> None:
    """ithtelab/workbuddy-manager#39 and QuantumNous/new-api#2881 (``message_delta`` lacked the input
    and cache counts; mapping a backend's prompt count straight to ``input_tokens`` next to
    ``cache_read_input_tokens`` double-counted the cached part): with ``--enable-cache-report``
    ``input_tokens`` is the uncached part, so ``input_tokens + cache_read_input_tokens`` is the whole
    prompt, on the message, ``message_start`` and ``message_delta`` alike (the fake engine reports 2
    cached tokens)."""
    body = {"messages": USER, "thinking": NO_THINK}
    client, _, tc = make_clients(PromptTM(tok, reply="Sunny."), cache_report=True)
    prompt = _prompt_tokens(tok, body)
    msg = client.messages.create(model=MODEL, max_tokens=50, **body)
    events = _stream(tc, body)
    for usage in (msg.usage.model_dump(), events[0]["message"]["usage"], events[-2]["usage"]):
        assert usage["cache_read_input_tokens"] == 2
        assert usage["input_tokens"] + usage["cache_read_input_tokens"] == prompt


@pytest.mark.parametrize(
    ("reply", "max_tokens", "tools", "reason"),
    [
        ("Sunny and mild.", 200, None, "end_turn"),
        ("Sunny and mild in Paris all week long.", 3, None, "max_tokens"),
        ("Let me check." + CALL, 200, [WEATHER], "tool_use"),
        ("Sunny.", 0, None, "max_tokens"),
    ],
    ids=["end_turn", "max_tokens", "tool_use", "prewarm"],
)
def test_message_delta_usage_is_present_with_integer_counts(
    tok: PreTrainedTokenizerFast, reply: str, max_tokens: int, tools: Any, reason: str
) -> None:
    """earendil-works/pi#6567 (a client crashed reading ``event.usage.input_tokens`` when a server's
    ``message_delta`` had no ``usage``) and karthink/gptel#1331 (``null`` token fields in
    ``message_delta`` broke a client): every stream's ``message_delta`` carries a ``usage`` object,
    valid as the ``anthropic`` client's ``MessageDeltaUsage``, every count an integer (no
    ``null``), ``output_tokens`` the generated tokens (the reply's tokens, or ``max_tokens`` when it
    cut them), ``stop_reason`` as the finish says."""
    body: dict[str, Any] = {"messages": USER, "thinking": NO_THINK, "max_tokens": max_tokens}
    if tools:
        body["tools"] = tools
    _, _, tc = make_clients(PromptTM(tok, reply=reply))
    delta = _stream(tc, body)[-2]
    assert delta["type"] == "message_delta" and delta["delta"]["stop_reason"] == reason
    usage = delta["usage"]
    MessageDeltaUsage.model_validate(usage)
    assert usage and all(isinstance(v, int) and not isinstance(v, bool) for v in usage.values())
    assert usage["output_tokens"] == min(max_tokens, _n_tokens(tok, reply))


def test_streamed_usage_folds_to_the_non_streamed_usage(tok: PreTrainedTokenizerFast) -> None:
    """envoyproxy/ai-gateway#2239 (a gateway double-counted a stream's usage by adding
    ``message_start``'s and ``message_delta``'s counts): ``message_delta``'s counts are cumulative,
    so the ``anthropic`` client's stream accumulator (which takes them as the totals) ends with
    the same usage as the non-streamed message, and that output count is the reply's tokens."""
    reply = "Sunny and mild, around twenty degrees."
    client, _, _ = make_clients(PromptTM(tok, reply=reply))
    kw = {"model": MODEL, "max_tokens": 100, "messages": USER, "thinking": NO_THINK}
    whole = client.messages.create(**kw)
    with client.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert final.usage.model_dump() == whole.usage.model_dump()
    assert final.usage.output_tokens == _n_tokens(tok, reply)
    assert final.usage.input_tokens == _prompt_tokens(tok, {"messages": USER})


# ----------------------------------------------------------------------------- stop sequences
class StopStringTM(PromptTM):
    """:class:`PromptTM` whose outputs go through the real stop-string path: each step's text is
    what the scheduler's finish check and the detokenizer give for the tokens so far
    (:func:`generate_with_stops`), less a trailing piece that could still become a stop string
    (the tokenizer manager's :func:`stop_holdback`); the finish and its ``matched`` string are the
    scheduler's."""

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        self.received.append(obj)
        sp = dict(obj.sampling_params or {})
        stops = list(sp.get("stop") or [])
        ids = self.tokenizer.encode(str(self.reply), add_special_tokens=False)
        outs = []
        for j in range(1, len(ids) + 1):
            params = SamplingParams(stop=stops, max_new_tokens=sp.get("max_new_tokens"))
            req, text = generate_with_stops(self.tokenizer, params, ids[:j])
            fr = req.finished_reason
            done = fr is not None and fr["type"] == "stop"
            finish = fr if done else ({"type": "stop", "matched": 1} if j == len(ids) else None)
            meta = {
                "id": "r",
                "finish_reason": finish,
                "prompt_tokens": len(obj.input_ids),
                "completion_tokens": len(req.output_ids),
                "cached_tokens": 0,
            }
            shown = text if finish is not None else stop_holdback(text, stops)
            outs.append({"text": shown, "output_ids": list(req.output_ids), "meta_info": meta})
            if finish is not None:
                break
        for o in outs if obj.stream else outs[-1:]:
            yield o


def test_multi_token_stop_sequence_is_reported_and_never_leaks(tok: PreTrainedTokenizerFast) -> None:
    """exo-explore/exo#2122 (a Messages route reported ``stop_reason: "end_turn"`` and
    ``stop_sequence: null`` for a matched stop sequence, and a stop sequence spanning several
    tokens leaked its leading part into the output): a stop sequence of five tokens gives
    ``stop_reason: "stop_sequence"`` with the sequence echoed, the text before it and nothing of
    it, non-streamed and streamed (no ``text_delta`` ever carries a piece of it; the
    ``anthropic`` client's accumulator folds the same message)."""
    stop = "<<FINISHED>>"
    reply = "The alphabet: ABCDEFGHIJKLMNOPQRSTUVWXYZ<<FINISHED>> and more text after."
    assert _n_tokens(tok, stop) > 1
    want = reply.split(stop)[0]
    client, _, tc = make_clients(StopStringTM(tok, reply=reply))
    kw: dict[str, Any] = {"messages": USER, "thinking": NO_THINK, "stop_sequences": ["END", stop]}
    msg = client.messages.create(model=MODEL, max_tokens=100, **kw)
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop
    assert [(b.type, getattr(b, "text", None)) for b in msg.content] == [("text", want)]
    events = _stream(tc, kw)
    pieces = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(pieces) == want and "<" not in "".join(pieces)
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": stop}
    with client.messages.stream(model=MODEL, max_tokens=100, **kw) as s:
        final = s.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
    assert final.content[0].text == want  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- tool pairing
def test_tool_use_without_result_is_anthropic_400_and_generates_nothing(
    tok: PreTrainedTokenizerFast,
) -> None:
    """anthropics/claude-code#7929 (Claude Code's history kept a ``tool_use`` whose ``tool_result``
    was missing; the API answered ``400 invalid_request_error`` "messages.N: `tool_use` ids were
    found without `tool_result` blocks immediately after: ID. Each `tool_use` block must have a
    corresponding `tool_result` block in the next message."): the same history here is that 400
    (the message the report quotes, N the message after the call), raised by the ``anthropic``
    client as ``BadRequestError``, on ``count_tokens`` too, and no generation is started."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)
    call = {"type": "tool_use", "id": "toolu_0149kv", "name": "get_weather", "input": {"city": "Paris"}}
    messages = [*USER, {"role": "assistant", "content": [call]}, {"role": "user", "content": "go on"}]
    want = (
        "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_0149kv. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message."
    )
    for path, extra in (("/v1/messages", {"max_tokens": 50}), ("/v1/messages/count_tokens", {})):
        r = tc.post(path, json={"model": MODEL, "messages": messages, "tools": [WEATHER], **extra})
        assert r.status_code == 400
        assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": want}}
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=50, messages=messages, tools=[WEATHER])  # type: ignore[arg-type]
    assert e.value.status_code == 400 and want in str(e.value)
    assert tm.received == []
    # the same history with its result answers, and the route still serves
    fixed = [
        *messages[:2],
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_0149kv", "content": "18C"}],
        },
    ]
    assert client.messages.create(model=MODEL, max_tokens=50, messages=fixed, tools=[WEATHER]).content  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- tool_choice
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_disable_parallel_tool_use_gives_at_most_one_tool_use(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """tghamm/Anthropic.SDK#169 (a client could not send ``disable_parallel_tool_use``; Anthropic's
    reference: with it ``true`` the model uses at most one tool): a reply that writes two calls
    answers with only the first as a ``tool_use`` block when ``tool_choice`` disables parallel
    use, and with both when it does not; the ``anthropic`` client reads both shapes."""
    client, _, _ = make_clients(PromptTM(tok, reply=TWO_CALLS))
    got = {}
    for off in (True, False):
        kw: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 200,
            "messages": USER,
            "thinking": NO_THINK,
            "tools": [WEATHER],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": off},
        }
        if stream:
            with client.messages.stream(**kw) as s:
                msg = s.get_final_message()
        else:
            msg = client.messages.create(**kw)
        assert msg.stop_reason == "tool_use"
        got[off] = [(b.name, b.input) for b in msg.content if b.type == "tool_use"]
    assert got[True] == [("get_weather", {"city": "Paris"})]
    assert got[False] == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]


def test_tool_choice_none_renders_no_tools_and_answers_in_text(tok: PreTrainedTokenizerFast) -> None:
    """xemantic/anthropic-sdk-kotlin#142 (``tool_choice: {"type": "none"}`` was missing; Anthropic's
    reference: it prevents the model from using any tool): with ``none`` the served prompt is the
    one DeepSeek's own converter renders for that request (no tool schemas in it), the reply is a
    ``text`` block with ``stop_reason: "end_turn"``, and ``count_tokens`` counts that prompt."""
    tm = PromptTM(tok, reply="It is sunny.")
    client, _, _ = make_clients(tm)
    body: dict[str, Any] = {"messages": USER, "tools": [WEATHER], "tool_choice": {"type": "none"}}
    msg = client.messages.create(model=MODEL, max_tokens=50, thinking=NO_THINK, **body)
    want = recipe_messages_prompt(body, thinking=False)
    assert "get_weather" not in want
    assert tok.decode(tm.received[-1].input_ids) == want
    assert [(b.type, b.text) for b in msg.content] == [("text", "It is sunny.")]  # type: ignore[union-attr]
    assert msg.stop_reason == "end_turn"
    counted = client.messages.count_tokens(model=MODEL, thinking=NO_THINK, **body).input_tokens
    assert counted == msg.usage.input_tokens == _n_tokens(tok, want)


# ----------------------------------------------------------------------------- stop_reason
@pytest.mark.parametrize(
    ("reply", "max_tokens", "thinking", "want"),
    [
        ("Let me debug this step by step.</think>Done.", 200, True, "end_turn"),
        ("Let me debug this step by step and then some more", 4, True, "max_tokens"),
        ("Let me debug this.</think>" + CALL, 200, True, "tool_use"),
        ("Done.", 200, False, "end_turn"),
    ],
    ids=["answer", "cut-in-thinking", "call", "no-thinking"],
)
def test_every_finished_message_has_a_stop_reason(
    tok: PreTrainedTokenizerFast, reply: str, max_tokens: int, thinking: bool, want: str
) -> None:
    """anthropics/claude-code#20222 (every assistant entry of a session had ``stop_reason: null``,
    and one ended silently after a lone thinking block): a finished message always names why it
    stopped, non-streamed and in the stream's ``message_delta``: ``end_turn``, ``max_tokens``
    (also when the cut falls inside the reasoning, the message then a ``thinking`` block only),
    ``tool_use``; the ``anthropic`` client's accumulator reads the same."""
    client, _, tc = make_clients(PromptTM(tok, reply=reply))
    th = {"type": "enabled", "budget_tokens": 1024} if thinking else NO_THINK
    kw: dict[str, Any] = {"messages": USER, "thinking": th, "tools": [WEATHER]}
    msg = client.messages.create(model=MODEL, max_tokens=max_tokens, **kw)
    assert msg.stop_reason == want
    if want == "max_tokens":
        assert [b.type for b in msg.content] == ["thinking"]
    assert _stream(tc, {**kw, "max_tokens": max_tokens})[-2]["delta"]["stop_reason"] == want
    with client.messages.stream(model=MODEL, max_tokens=max_tokens, **kw) as s:
        assert s.get_final_message().stop_reason == want


# ----------------------------------------------------------------------------- count_tokens
def test_count_tokens_takes_a_whole_messages_body_and_runs_nothing(tok: PreTrainedTokenizerFast) -> None:
    """antirez/ds4#90 (``count_tokens`` takes the ``/v1/messages`` request shape and answers only
    ``{"input_tokens": N}``, rendering and tokenizing the prompt as a generation would, without
    running inference): a whole Messages body (system blocks, tools, a tool round, sampling and
    stream fields a client copies along) counts exactly the tokens DeepSeek's own converter
    renders for it, the body is nothing but ``input_tokens``, no generation starts, and the
    same body sent to ``/v1/messages`` reports that many ``input_tokens``."""
    tm = PromptTM(tok, reply="Sunny.")
    _, _, tc = make_clients(tm)
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]}
    body: dict[str, Any] = {
        "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        "messages": [*USER, {"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}],
        "tools": [WEATHER],
        "thinking": NO_THINK,
    }
    extras = {"max_tokens": 64, "stream": True, "temperature": 0.5, "stop_sequences": ["END"]}
    r = tc.post("/v1/messages/count_tokens", json={"model": MODEL, **body, **extras})
    assert r.status_code == 200, r.text
    want = _prompt_tokens(tok, body)
    assert r.json() == {"input_tokens": want}
    assert tm.received == []
    r = tc.post("/v1/messages", json={"model": MODEL, **body, "max_tokens": 64})
    assert r.status_code == 200 and r.json()["usage"]["input_tokens"] == want


# ----------------------------------------------------------------------------- tool schema errors
@pytest.mark.parametrize(
    ("schema", "field", "why"),
    [
        ({"type": "string"}, "tools.1.input_schema", "Invalid schema for function 'lookup'"),
        ({"type": ["string", "null"]}, "tools.1.input_schema", "Invalid schema for function 'lookup'"),
        (
            {"type": "object", "properties": {'a"b': {"type": "string"}}},
            "tools.1.input_schema.properties",
            "parameter 'a\"b' of tool 'lookup'",
        ),
    ],
    ids=["string-type", "type-list", "quote-in-parameter"],
)
def test_tool_schema_error_names_the_clients_tool_field(
    tok: PreTrainedTokenizerFast, schema: dict[str, Any], field: str, why: str
) -> None:
    """anthropics/claude-code#5973 and kintone/mcp-server#547 (Anthropic answers a bad tool schema
    with ``400 invalid_request_error`` "tools.21.custom.input_schema: ...": the message starts with
    the tool's index in the request's ``tools`` and its ``input_schema`` field, the only way to
    find which of many MCP tools broke the request): a schema the DSML prompt cannot carry (a
    non-object top-level ``type``, a ``"`` in a parameter name) is a 400 whose message starts with
    ``tools.1.input_schema`` (Anthropic's dotted path of the field the client sent), not the chat
    route's ``tools[1].function.parameters``, on ``/v1/messages`` and ``count_tokens`` alike, and
    nothing is generated. (It named the converted chat field, at the end of the message.)"""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)
    tools = [WEATHER, {"name": "lookup", "description": "Look up", "input_schema": schema}]
    for path, extra in (("/v1/messages", {"max_tokens": 50}), ("/v1/messages/count_tokens", {})):
        r = tc.post(path, json={"model": MODEL, "messages": USER, "tools": tools, **extra})
        assert r.status_code == 400, r.text
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
        msg = err["error"]["message"]
        assert msg.startswith(f"{field}: ") and why in msg
        assert "function.parameters" not in msg and "tools[" not in msg
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=50, messages=USER, tools=tools)  # type: ignore[arg-type]
    assert f"{field}: " in str(e.value)
    assert tm.received == []


def test_chat_tool_fields_in_grammar_errors_read_as_messages_fields() -> None:
    """anthropics/claude-code#5973 (as above): the tool-call grammar's error, raised by the chat
    path with the chat field (``tools[0].function.parameters``), reads on the Messages route with
    the field the client sent (``tools.0.input_schema``), as the non-streamed grammar error already
    does; a tool's name or the tool itself likewise (``tools.2.name``, ``tools.3``); other fields
    (``stop`` -> ``stop_sequences``) keep their renaming."""
    from sglang_v4.entrypoints.anthropic.messages_input import anthropic_field_error
    from sglang_v4.entrypoints.openai.serving_base import RequestError

    cases = {
        "tools: invalid grammar: tools[0].function.parameters (function `f`): Unsupported type": (
            "tools: invalid grammar: tools.0.input_schema (function `f`): Unsupported type"
        ),
        "tools[2].function.name 'f' is defined twice.": "tools.2.name 'f' is defined twice.",
        "tools[3] must be an object.": "tools.3 must be an object.",
        "stop: at most 32 stop strings are allowed, got 40.": (
            "stop_sequences: at most 32 stop strings are allowed, got 40."
        ),
    }
    for chat_msg, want in cases.items():
        out = anthropic_field_error(RequestError(chat_msg, 400, param="tools"))
        assert out.message == want and out.status == 400


@pytest.mark.parametrize("stops", [["\n"], ["END", " \t"], ["\n\n"]])
@pytest.mark.parametrize("stream", [False, True])
def test_whitespace_only_stop_sequence_is_a_400(
    tok: PreTrainedTokenizerFast, stops: list[str], stream: bool
) -> None:
    """BerriAI/litellm#3286 (with litellm#7484): Anthropic's API answers a stop sequence of
    whitespace only with 400 ``invalid_request_error`` "stop_sequences: each stop sequence must
    contain non-whitespace" (the body quoted in the report). Here the same message in Anthropic's
    error shape, nothing reaches the engine, and the ``anthropic`` client raises its
    ``BadRequestError``; a stop sequence with text around its whitespace (``"\\nEND"``) is served."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)
    body = {"model": MODEL, "max_tokens": 20, "messages": USER, "stop_sequences": stops, "stream": stream}
    r = tc.post("/v1/messages", json=body)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"] == "stop_sequences: each stop sequence must contain non-whitespace"
    assert tm.received == []
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=20, messages=USER, stop_sequences=stops)
    ok = tc.post("/v1/messages", json=dict(body, stream=False, stop_sequences=["\nEND"]))
    assert ok.status_code == 200, ok.text
    assert ok.json()["content"][0]["text"] == "Sunny."

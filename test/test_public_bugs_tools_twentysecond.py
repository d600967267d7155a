"""A twenty-second set of public reports on DeepSeek-V4 DSML tool calls and the thinking split,
replayed against ``POST /v1/chat/completions`` in process.

Fixed here: a completion holding one whole call and one malformed invoke answered the finish
reason ``"stop"`` and dropped every invoke after the malformed one; SGLang's and vLLM's DeepSeek
parsers drop only the malformed invoke and answer ``"tool_calls"`` when any call was parsed
(a stream that already sent the broken call's deltas still answers ``"stop"``). A ``</think>``
right after a tool-call block reached ``content`` in chat mode; DeepSeek's parser drops it.
Parameter names holding ``<`` or ``>`` made the whole block malformed; they are read as
DeepSeek's parser reads them, and a parameter name holding ``"`` (which the format cannot carry:
DeepSeek's own encoder and parser give back invalid JSON) is refused at request time with a 400
naming the tool. Tool names: empty or missing is a 400 naming ``tools[i].function.name``; other
names are accepted as SGLang accepts them.

The model's text is written by hand (:class:`~test_chat_tool_stream_agreement.ChunkTM`, ``n``
tokens per streamed chunk). Oracles: DeepSeek's own converter, V4 encoder and response parser
(``deepseek-recipe``), ``json.loads``, the ``openai`` client's chunk types and stream
accumulator, and the request's own tool list.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_tools_testutil import WEATHER, ChunkTM, client_for
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_body as _recipe_body  # noqa: E402
from deepseek_recipe_testutil import recipe_message as _recipe_message  # noqa: E402

D = "｜DSML｜"
CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
CALL_PARIS = dsml_invoke("get_weather", dsml_param("city", True, "Paris"), dsml_param("days", False, "3"))
CALL_OSLO = dsml_invoke("get_weather", dsml_param("city", True, "Oslo"))


def _recipe_prompt(body: dict[str, Any]) -> str:
    """DeepSeek's prompt text of a Chat Completions body (its converter, then its V4 encoder)."""
    req = recipe.ChatCompletionRequest(_recipe_body(body, False)).convert(recipe.ConversionOptions())
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def _json_object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object (``json.loads``, no ``NaN`` / ``Infinity``), else None."""
    try:
        value = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _made_calls(recipe_msg: dict[str, Any], tool_names: set[str]) -> list[tuple[str, Any]]:
    """The calls a server makes of DeepSeek's parse: those of an offered tool whose arguments are
    a JSON object holding no DSML markup (SGLang's ``parse_base_json`` skips unknown tools; its
    and vLLM's DeepSeek parsers drop an invoke they cannot read, and SGLang's one whose value
    swallowed a DSML tag: a parameter's closing tag left out)."""
    out = []
    for c in recipe_msg.get("tool_calls") or []:
        args = _json_object(c["function"]["arguments"])
        if c["function"]["name"] in tool_names and args is not None and D not in c["function"]["arguments"]:
            out.append((c["function"]["name"], args))
    return out


def _calls(message: Any) -> list[tuple[str, Any]]:
    """``[(name, parsed arguments)]`` of an ``openai`` message object."""
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def _post(tc: Any, body: dict[str, Any]) -> ChatCompletion:
    r = tc.post(CHAT, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    return ChatCompletion.model_validate(r.json())


def _folded(tc: Any, body: dict[str, Any]) -> Any:
    """The streamed answer as the ``openai`` client folds it: its final choice."""
    r = tc.post(CHAT, json={"model": "m", **body, "stream": True})
    assert r.status_code == 200, r.text
    state = ChatCompletionStreamState()
    for line in r.text.split("\n"):
        if line.startswith("data: {"):
            state.handle_chunk(ChatCompletionChunk.model_validate(json.loads(line[6:])))
    return state.get_final_completion().choices[0]


# --------------------------------------------------------------------------- malformed beside whole


MALFORMED = {
    # a string="false" value that is no JSON
    "bad value": dsml_invoke(
        "get_weather", dsml_param("city", True, "Rome"), dsml_param("days", False, "{x")
    ),
    # a call of a tool the request did not offer
    "unknown tool": dsml_invoke("get_time", dsml_param("zone", True, "CET")),
    # a parameter whose closing tag was left out: its value would swallow the invoke's markup
    "unclosed value": f'<{D}invoke name="get_weather">\n<{D}parameter name="city" string="true">Rome'
    f'\n<{D}parameter name="days" string="false">2</{D}parameter>\n</{D}invoke>',
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_whole_call_beside_a_malformed_invoke_finishes_tool_calls(
    tok: PreTrainedTokenizerFast, kind: str
) -> None:
    """Known gap (and sgl-project/sglang#39632: an invoke that could not be parsed came back as
    raw DSML content beside dropped calls): with one whole call before and one after a malformed
    invoke, the message held only the first and answered ``"stop"``; the content is never markup. SGLang's DeepSeek-V4 detector (``detect_and_parse``: a malformed invoke is
    skipped, ``continue``) and vLLM's DeepSeek-V3.2/V4 parser (``extract_tool_calls``: only
    invokes it reads are calls, ``tools_called`` when any) keep both whole calls and answer
    ``"tool_calls"``. Oracle: DeepSeek's own parser of the same text, read as those servers make
    calls (an offered tool, arguments a JSON object: :func:`_made_calls`)."""
    reply = "Checking." + dsml_block(CALL_PARIS, MALFORMED[kind], CALL_OSLO)
    body = {"messages": MSGS, "tools": [WEATHER]}
    want = _made_calls(_recipe_message(body, reply), {"get_weather"})
    assert want == [("get_weather", {"city": "Paris", "days": 3}), ("get_weather", {"city": "Oslo"})]
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=2))
    ch = _post(tc, body).choices[0]
    assert (_calls(ch.message), ch.finish_reason, ch.message.content) == (want, "tool_calls", "Checking.")
    # streamed: the whole calls are folded too; "tool_calls" only where no broken call went out
    folded = _folded(tc, body)
    got = [(c.function.name, _json_object(c.function.arguments)) for c in folded.message.tool_calls]
    assert [g for g in got if g[1] is not None] == want
    broken = [g for g in got if g[1] is None]
    assert folded.finish_reason == ("stop" if broken else "tool_calls"), got
    assert kind != "unknown tool" or not broken  # its name was never sent


def test_malformed_invoke_alone_is_still_no_call(tok: PreTrainedTokenizerFast) -> None:
    """Guard of the rule above: when the only invoke is malformed no call is made, and the finish
    reason stays ``"stop"`` (``"tool_calls"`` needs a call). Oracle: DeepSeek's parser gives one
    call whose arguments ``json.loads`` rejects."""
    reply = dsml_block(MALFORMED["bad value"])
    body = {"messages": MSGS, "tools": [WEATHER]}
    assert _made_calls(_recipe_message(body, reply), {"get_weather"}) == []
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=3))
    ch = _post(tc, body).choices[0]
    assert (ch.message.tool_calls, ch.finish_reason) == (None, "stop")


# --------------------------------------------------------------------------- </think> after a block


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("tail", ["</think>", "\n</think>", "\n</think>\n"])
def test_think_end_after_a_tool_block_is_no_content(
    tok: PreTrainedTokenizerFast, thinking: bool, tail: str
) -> None:
    """Known gap: DeepSeek-V4-Flash writes ``</think>`` after its tool block at times; in chat
    mode the stray marker came back as ``content`` (thinking mode already dropped it).
    DeepSeek's parser drops it in both modes: the content is what came before the block.
    Streamed token by token and not. Oracle: DeepSeek's response parser of the same text."""
    pre = "Let me check." if not thinking else "I need the weather."
    reply = pre + dsml_block(CALL_OSLO) + tail
    body: dict[str, Any] = {"messages": MSGS, "tools": [WEATHER]}
    want = _recipe_message(body, reply, thinking)
    want_content = want["content"] or None
    assert want_content == (None if thinking else pre)
    if thinking:
        body["chat_template_kwargs"] = {"thinking": True}
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=1))
    ch = _post(tc, body).choices[0]
    assert (ch.message.content or None, ch.finish_reason) == (want_content, "tool_calls")
    assert _calls(ch.message) == [("get_weather", {"city": "Oslo"})]
    assert (ch.message.model_extra or {}).get("reasoning_content") == want.get("reasoning_content")
    folded = _folded(tc, body)
    assert (folded.message.content or None, folded.finish_reason) == (want_content, "tool_calls")


def test_think_end_after_a_block_streams_nothing_of_it(tok: PreTrainedTokenizerFast) -> None:
    """Known gap, streamed: the stray marker after a block, with text after it, sends no
    ``</think>`` piece in any content delta; the text after it is content, streamed and not (the
    server's rule for text after a block). Oracle: the non-streamed message."""
    reply = "Sure." + dsml_block(CALL_OSLO) + "</think>Done."
    body = {"messages": MSGS, "tools": [WEATHER]}
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=2))
    ch = _post(tc, body).choices[0]
    assert ch.message.content == "Sure.Done."
    folded = _folded(tc, body)
    assert folded.message.content == ch.message.content and "</think" not in folded.message.content


# --------------------------------------------------------------------------- parameter names


ODD = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"a<b": {"type": "string"}, "x>y": {"type": "integer"}, "<>": {"type": "string"}},
        },
    },
}


@pytest.mark.parametrize("per_chunk", [1, 4, 10_000])
def test_parameter_names_with_angle_brackets_are_read(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """Known gap: parameter names holding ``<`` or ``>`` (JSON Schema allows any property name)
    made the whole block malformed. A name runs to its closing quote, as DeepSeek's parser, SGLang's
    (``name="([^"]+)"``) and vLLM's DeepSeek parsers read it. Every chunking, streamed and not.
    Oracle: DeepSeek's response parser of the same text."""
    reply = dsml_block(
        dsml_invoke(
            "lookup",
            dsml_param("a<b", True, "v1"),
            dsml_param("x>y", False, "7"),
            dsml_param("<>", True, ">"),
        )
    )
    body = {"messages": MSGS, "tools": [ODD]}
    want = _made_calls(_recipe_message(body, reply), {"lookup"})
    assert want == [("lookup", {"a<b": "v1", "x>y": 7, "<>": ">"})]
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    ch = _post(tc, body).choices[0]
    assert (_calls(ch.message), ch.finish_reason) == (want, "tool_calls")
    folded = _folded(tc, body)
    assert (_calls(folded.message), folded.finish_reason) == (want, "tool_calls")


def test_parameter_name_with_a_quote_is_refused_naming_the_tool(tok: PreTrainedTokenizerFast) -> None:
    """A parameter name holding ``"`` cannot travel in DSML: DeepSeek's encoder writes the tag
    ``name="c"d"`` and its parser reads back arguments that are no JSON. Such a tool is refused
    before anything runs: a 400 in OpenAI's error shape naming the tool, the field and the
    parameter. Oracle: DeepSeek's encoder and parser (the round trip fails ``json.loads``)."""
    tool = {
        "type": "function",
        "function": {
            "name": "quoted",
            "parameters": {"type": "object", "properties": {'c"d': {"type": "string"}}},
        },
    }
    history = {
        "messages": MSGS
        + [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "quoted", "arguments": json.dumps({'c"d': "v"})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
        "tools": [tool],
    }
    assert f'<{D}parameter name="c"d" string="true">v' in _recipe_prompt(history)
    back = _recipe_message(
        {"messages": MSGS, "tools": [tool]}, dsml_block(dsml_invoke("quoted", dsml_param('c"d', True, "v")))
    )
    assert _json_object(back["tool_calls"][0]["function"]["arguments"]) is None
    tm = ChunkTM(tok, "unused")
    _, tc = client_for(tm)
    r = tc.post(CHAT, json={"model": "m", "messages": MSGS, "tools": [tool]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and err["param"] == "tools"
    assert all(s in err["message"] for s in ("tools[0].function.parameters", "quoted", 'c"d')), err
    assert tm.received == []  # nothing ran


# --------------------------------------------------------------------------- tool names


@pytest.mark.parametrize(
    "fn", [{}, {"name": ""}, {"name": None}, {"name": 7}], ids=["missing", "empty", "null", "int"]
)
def test_empty_or_missing_tool_name_is_a_400_naming_the_field(
    tok: PreTrainedTokenizerFast, fn: dict[str, Any]
) -> None:
    """raullenchai/Rapid-MLX#748: an empty function name was answered 200 (and its calls leaked as
    text). OpenAI's schema requires a name (``^[a-zA-Z0-9_-]{1,64}$``; DeepSeek's own converter
    refuses an empty one the same way): a 400 in OpenAI's error shape naming
    ``tools[0].function.name``, nothing run. Oracle: DeepSeek's converter refuses the same tool."""
    tool = {"type": "function", "function": {**fn, "parameters": {"type": "object", "properties": {}}}}
    with pytest.raises(Exception, match="name|expected a string"):
        recipe.ChatCompletionRequest(_recipe_body({"messages": MSGS, "tools": [tool]}, False)).convert(
            recipe.ConversionOptions()
        )
    tm = ChunkTM(tok, "unused")
    _, tc = client_for(tm)
    r = tc.post(CHAT, json={"model": "m", "messages": MSGS, "tools": [tool]})
    assert r.status_code == 400, r.text
    assert "tools[0].function.name" in r.json()["error"]["message"]
    assert tm.received == []


@pytest.mark.parametrize("name", ["mcp.files:read", "search web", "a<b>", "天气"])
def test_tool_names_beyond_openais_pattern_are_served_as_sglang_serves_them(
    tok: PreTrainedTokenizerFast, name: str
) -> None:
    """raullenchai/Rapid-MLX#748, the other half: that server chose OpenAI's pattern and now
    refuses dotted, spaced and non-ASCII names. SGLang's ``Function`` model takes any string
    (``name: str``), so agents' MCP names (``mcp.files:read``) work there; served the same here,
    but for what DSML cannot carry (``"``, a line break): the request is accepted and a call of
    that tool is parsed with its name. Oracle: the request's own tool list and ``json.loads``."""
    tool = {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
    }
    reply = dsml_block(dsml_invoke(name, dsml_param("q", True, "x")))
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=2))
    body = {"messages": MSGS, "tools": [tool]}
    ch = _post(tc, body).choices[0]
    assert (_calls(ch.message), ch.finish_reason) == ([(name, {"q": "x"})], "tool_calls")
    folded = _folded(tc, body)
    assert _calls(folded.message) == [(name, {"q": "x"})]


# --------------------------------------------------------------------------- split </think>


@pytest.mark.parametrize("tools", [False, True])
def test_think_end_split_across_chunks_never_leaks(tools: bool) -> None:
    """sgl-project/sglang#31009: a ``</think>`` split over two stream chunks (``"reasoning<"``,
    ``"/think>answer"``) leaked into the reasoning and the answer went with it; the same fault in
    mozilla-ai/any-llm#1242 (``"reasoning</th"`` + ``"ink>answer"``) and InternLM/lmdeploy#4754
    (``"</th"``, ``"ink>"``). Every two-chunk
    split of DeepSeek-V4 thinking output (with and without the tools' implicit end) gives the
    reasoning and content DeepSeek's response parser gives the whole text."""
    from sglang_v4.entrypoints.openai.reasoning_parser import ReasoningParser, reasoning_spec

    text = "I should answer.</think>\n\nThe answer is 4."
    body: dict[str, Any] = {"messages": MSGS, **({"tools": [WEATHER]} if tools else {})}
    want = _recipe_message(body, text, thinking=True)
    spec = reasoning_spec("deepseek-v4", True, f"<{D}tool_calls>" if tools else None)
    for k in range(len(text) + 1):
        p = ReasoningParser(implicit_end=spec.implicit_end)
        parts = [p.feed(text[:k]), p.feed(text[k:]), p.flush()]
        reasoning, content = "".join(r for r, _ in parts), "".join(c for _, c in parts)
        assert (reasoning, content) == (want["reasoning_content"], want["content"]), k


# --------------------------------------------------------------------------- more guards


def test_orphan_think_end_opening_a_tool_continuation_turn(tok: PreTrainedTokenizerFast) -> None:
    """aula-id/koma#63: on a turn after a tool result, a reasoning model left a bare ``</think>``
    at the start of its answer and it leaked into the visible text. In thinking mode the reply
    ``"</think>It is sunny."`` ends an empty reasoning: the content is the sentence, no reasoning
    text, streamed and not. Oracle: DeepSeek's response parser of the same turn."""
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    msgs = MSGS + [
        {"role": "assistant", "content": "", "reasoning_content": "Need it.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    reply = "</think>It is sunny."
    body: dict[str, Any] = {"messages": msgs, "tools": [WEATHER]}
    want = _recipe_message(body, reply, thinking=True)
    body["chat_template_kwargs"] = {"thinking": True}
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=1))
    ch = _post(tc, body).choices[0]
    assert ch.message.content == want["content"] == "It is sunny."
    assert not (ch.message.model_extra or {}).get("reasoning_content") and not want["reasoning_content"]
    assert _folded(tc, body).message.content == want["content"]


def test_parallel_tool_calls_false_answers_one_call(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#22218: with ``parallel_tool_calls: false`` a model that writes two calls
    must still answer at most one (OpenAI's definition of the flag). The first call is kept,
    streamed and not, with finish reason ``"tool_calls"``. Oracle: DeepSeek's parser for the
    first call, the ``openai`` client's accumulator."""
    reply = dsml_block(CALL_PARIS, CALL_OSLO)
    body = {"messages": MSGS, "tools": [WEATHER], "parallel_tool_calls": False}
    first = _made_calls(_recipe_message({"messages": MSGS, "tools": [WEATHER]}, reply), {"get_weather"})[:1]
    assert first == [("get_weather", {"city": "Paris", "days": 3})]
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=3))
    ch = _post(tc, body).choices[0]
    assert (_calls(ch.message), ch.finish_reason) == (first, "tool_calls")
    folded = _folded(tc, body)
    assert (_calls(folded.message), folded.finish_reason) == (first, "tool_calls")


def test_cut_by_max_tokens_inside_a_block_is_length_not_tool_calls(tok: PreTrainedTokenizerFast) -> None:
    """ROCm/FastFlowLM#728: a generation cut by the token limit was reported as a complete tool
    call. Cut at every fifth token inside a two-call block (the first call whole or not), the finish
    reason is ``"length"``, never ``"tool_calls"``, streamed and not; the new rule that a whole
    call beside a dropped invoke finishes ``"tool_calls"`` applies to a generation that stopped
    only. Oracle: OpenAI's finish reasons (``"length"`` when ``max_tokens`` ended it) and the
    DeepSeek-V4 tokenizer's count of the reply."""
    reply = "Sure." + dsml_block(CALL_PARIS, CALL_OSLO)
    ids = tok.encode(reply, add_special_tokens=False)
    start = len(tok.encode("Sure.", add_special_tokens=False))
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=4))
    for k in range(start + 1, len(ids), 5):
        body = {"messages": MSGS, "tools": [WEATHER], "max_tokens": k}
        assert _post(tc, body).choices[0].finish_reason == "length", k
        r = tc.post(CHAT, json={"model": "m", **body, "stream": True})
        chunks = [
            ChatCompletionChunk.model_validate_json(x[6:])
            for x in r.text.split("\n")
            if x.startswith("data: {")
        ]
        assert [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason] == ["length"], k

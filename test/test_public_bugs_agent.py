"""Public bug reports of what agents send to peer servers' OpenAI routes, replayed through
``/v1/chat/completions`` and ``/v1/responses`` (each test names its report).

The model's text is written by hand and generated token by token by the scripted tokenizer
managers of the tool tests (:class:`~test_chat_tool_stream_agreement.ChunkTM`, and
:class:`~fake_prompt_tm.PromptTM` whose reply is a function of the prompt ids). Oracles: the
hand-written text, ``json.loads``, the ``openai`` client's parsers and stream accumulator, the
behaviour the report states as expected, and, for requests that must render the same prompt as
another spelling of the same conversation, the prompt ids of that other spelling.
"""

from __future__ import annotations

import json
from typing import Any

import deepseek_recipe as recipe
import pytest
from chat_tools_testutil import WEATHER as CHAT_TOOL
from chat_tools_testutil import ChunkTM, _both, _folded, _message, client_for
from deepseek_recipe_testutil import ids_in_written_order
from dsml_testutil import dsml_block as _block
from dsml_testutil import dsml_invoke as _invoke
from dsml_testutil import dsml_param as _param
from fake_prompt_tm import CALL, MODEL, PromptTM
from responses_testutil import WEATHER, final_response, make_client, post
from transformers import PreTrainedTokenizerFast

D = "｜DSML｜"
MSGS = [{"role": "user", "content": "Go."}]
THINK = {"chat_template_kwargs": {"thinking": True}}


def _sse(tc: Any, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The stream's chunks (JSON objects, ``[DONE]`` left out) and its raw SSE text."""
    r = tc.post("/v1/chat/completions", json={**body, "stream": True})
    assert r.status_code == 200, r.text
    chunks = [
        json.loads(line[6:])
        for line in r.text.split("\n")
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    return chunks, r.text


def recipe_prompt(body: dict[str, Any], kind: Any = recipe.ChatCompletionRequest) -> str:
    """DeepSeek's own prompt text (the ``deepseek-recipe`` converter and V4 encoder, thinking off)
    of a Chat Completions or Responses request body."""
    b = {**ids_in_written_order(body), "model": "DeepSeek-V4-Pro"}
    for k in ("max_tokens", "max_output_tokens", "temperature", "stream"):
        b.pop(k, None)
    if kind is recipe.ChatCompletionRequest:
        b["thinking"] = {"type": "disabled"}
    req = kind(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def _call(name: str, arguments: str, cid: str = "call_1") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


# --- chat completions: tool calls in the request history -------------------------------------


@pytest.mark.parametrize("empty", ["", "  ", "\n"])
def test_vllm_19419_history_call_with_empty_arguments(tok: PreTrainedTokenizerFast, empty: str) -> None:
    """vllm-project/vllm#19419: an assistant turn in the history whose call had ``arguments: ""``
    (a tool without parameters, as several clients send it) failed with a JSON decode error.
    Expected: accepted, and rendered as DeepSeek's own converter renders that turn."""
    tm = ChunkTM(tok, "Done.")
    client, _ = client_for(tm)
    noargs = {
        "type": "function",
        "function": {"name": "list_files", "description": "Files here", "parameters": {"type": "object"}},
    }
    body = {
        "model": "m",
        "tools": [noargs],
        "messages": [
            {"role": "user", "content": "List."},
            {"role": "assistant", "content": None, "tool_calls": [_call("list_files", empty)]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        ],
    }
    for stream in (False, True):
        content, calls, finish = (_folded if stream else _message)(client, **body)
        assert (content, calls, finish) == ("Done.", [], "stop")
        assert tok.decode(tm.received[-1].input_ids) == recipe_prompt(body)


def test_vllm_25001_tool_result_as_text_parts(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#25001: a ``tool`` message whose ``content`` was a list of text parts
    (``[{"type": "text", "text": "18 degrees"}]``, as OpenAI's API accepts) was rejected while the
    same text as a string worked. Expected: the same prompt as the string."""
    tm = ChunkTM(tok, "Mild.")
    client, _ = client_for(tm)

    def convo(result: Any) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {"role": "assistant", "tool_calls": [_call("get_weather", '{"city": "Paris"}')]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ]

    client.chat.completions.create(model="m", messages=convo("18 degrees"), tools=[CHAT_TOOL])
    want = tm.received[-1].input_ids
    r = client.chat.completions.create(
        model="m", messages=convo([{"type": "text", "text": "18 degrees"}]), tools=[CHAT_TOOL]
    )
    assert r.choices[0].message.content == "Mild." and tm.received[-1].input_ids == want


def test_rig_1362_assistant_call_turn_with_empty_content_list(tok: PreTrainedTokenizerFast) -> None:
    """0xPlaygrounds/rig#1362 (against vLLM): the second request of a tool loop, whose assistant
    turn carried ``"content": []`` next to its ``tool_calls``, was a 400. Expected: the same
    prompt as that turn with no content."""
    tm = ChunkTM(tok, "8")
    client, _ = client_for(tm)
    calc = {"type": "function", "function": {"name": "calculate", "parameters": {"type": "object"}}}

    def convo(content: Any) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": [{"type": "text", "text": "Use the tools."}]},
            {"role": "user", "content": [{"type": "text", "text": "Calculate 5 + 3"}]},
            {"role": "assistant", "content": content, "tool_calls": [_call("calculate", '{"x": 5, "y": 3}')]},
            {"role": "tool", "tool_call_id": "call_1", "content": "8"},
        ]

    client.chat.completions.create(model="m", messages=convo(None), tools=[calc])
    want = tm.received[-1].input_ids
    r = client.chat.completions.create(model="m", messages=convo([]), tools=[calc])
    assert r.choices[0].message.content == "8" and tm.received[-1].input_ids == want


def test_sglang_33568_tool_definitions_render_as_sent(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#33568: the tool definitions in a DeepSeek prompt were serialized with
    the server's defaults filled in (``"strict": false`` for a tool that never said it), unlike
    DeepSeek's reference encoder, which writes each function object as sent. Expected: one
    ``json.dumps`` line per function, exactly the client's keys (``strict`` only where sent)."""
    tm = ChunkTM(tok, "ok")
    tm.grammar_enabled = True  # a strict tool constrains the calls (the fake engine ignores it)
    client, _ = client_for(tm)
    plain = {"name": "lookup", "description": "Look up.", "parameters": {"type": "object"}}
    strict = {
        "name": "store",
        "parameters": {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]},
        "strict": True,
    }
    tools = [{"type": "function", "function": plain}, {"type": "function", "function": strict}]
    client.chat.completions.create(model="m", messages=MSGS, tools=tools)
    prompt = tok.decode(tm.received[-1].input_ids)
    lines = [json.dumps(plain, ensure_ascii=False), json.dumps(strict, ensure_ascii=False)]
    assert "\n".join(lines) + "\n" in prompt and prompt.count('"strict"') == 1


# --- chat completions: tool_choice ------------------------------------------------------------


def test_vllm_9426_tool_choice_none_without_tools(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#9426 (fix PR #10000): ``tool_choice: "none"`` without ``tools`` (what
    Semantic Kernel always sends) was a 400 ("When using `tool_choice`, `tools` must be set").
    Expected: an ordinary answer, with the prompt of the request without ``tool_choice``."""
    tm = ChunkTM(tok, "A poem.")
    client, _ = client_for(tm)
    client.chat.completions.create(model="m", messages=MSGS)
    want = tm.received[-1].input_ids
    for stream in (False, True):
        content, calls, finish = (_folded if stream else _message)(
            client, model="m", messages=MSGS, tool_choice="none"
        )
        assert (content, calls, finish) == ("A poem.", [], "stop")
        assert tm.received[-1].input_ids == want


@pytest.mark.parametrize("per_chunk", [1, 3])
def test_sglang_30925_tool_choice_none_never_returns_call_markup(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """sgl-project/sglang#30925: with ``tool_choice: "none"`` and ``tools`` given, the model's
    tool-call markup written anyway reached ``message.content`` verbatim. Expected: a clean
    answer (no markup, no ``tool_calls``), the same streamed and not, and on ``/v1/responses``."""
    reply = "It is sunny in Dublin." + _block(_invoke("get_weather", _param("city", True, "Dublin")))
    client, _ = client_for(ChunkTM(tok, reply, per_chunk))
    kw = dict(model="m", messages=MSGS, tools=[CHAT_TOOL], tool_choice="none")
    content, calls, finish = _message(client, **kw)
    assert (content, calls, finish) == ("It is sunny in Dublin.", [], "stop")
    assert _folded(client, **kw) == (content, calls, finish)
    _, tc = make_client(PromptTM(tok, reply=reply))
    body, events = post(tc, {"input": "Go.", "tools": [WEATHER], "tool_choice": "none"})
    assert [o["type"] for o in body["output"]] == ["message"]
    assert body["output"][0]["content"][0]["text"] == content
    assert not any(e["type"].startswith("response.function_call") for e in events)


# --- chat completions: streamed tool calls ----------------------------------------------------


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_vllm_24509_required_streamed_arguments_are_not_doubled(
    tok: PreTrainedTokenizerFast, choice: Any
) -> None:
    """vllm-project/vllm#24509: streamed with ``tool_choice: "required"``, each text delta was
    added twice to the parser's previous text, so the call's arguments came out garbled. Expected:
    the arguments the model wrote, once, as the non-streamed message has them."""
    reply = _block(_invoke("get_weather", _param("city", True, "Lyon"), _param("days", False, "2")))
    tm = ChunkTM(tok, reply)
    tm.grammar_enabled = True  # (the fake engine ignores the grammar; the reply is its output)
    client, _ = client_for(tm)
    content, calls, finish = _both(client, model="m", messages=MSGS, tools=[CHAT_TOOL], tool_choice=choice)
    assert content == "" and (finish == "tool_calls" or choice != "required")
    assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", {"city": "Lyon", "days": 2})]


def test_vllm_37937_streamed_call_cut_by_max_tokens_ends_cleanly(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#37937: a streamed call cut by ``max_tokens`` inside its arguments raised
    an ``IndexError`` mid-stream (a 500 after the 200) instead of ending the stream. Expected: a
    well-formed stream ending with ``finish_reason: "length"`` and ``[DONE]``, no error event."""
    reply = _block(_invoke("get_weather", _param("city", True, "San Francisco, California")))
    n = len(tok.encode(reply, add_special_tokens=False))
    client, tc = client_for(ChunkTM(tok, reply))
    for cut in range(n - 12, n - 1, 3):
        chunks, raw = _sse(tc, {"model": "m", "messages": MSGS, "tools": [CHAT_TOOL], "max_tokens": cut})
        assert raw.rstrip().endswith("data: [DONE]") and not any("error" in c for c in chunks)
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
        assert [f for f in finishes if f] == ["length"]
        r = client.chat.completions.create(model="m", messages=MSGS, tools=[CHAT_TOOL], max_tokens=cut)
        assert r.choices[0].finish_reason == "length"


def test_vllm_46924_nested_object_argument_under_a_ref_schema(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#46924: an object-valued argument whose schema was a ``$ref`` into
    ``$defs`` came back as a JSON *string* (``"{\\"kind\\": ...}"``), so the tool rejected it.
    Expected: the nested object itself (and a nested array of objects), streamed and not."""
    schema = {
        "$defs": {
            "PeriodKind": {"enum": ["today", "last_n_days"], "type": "string"},
            "PeriodSpec": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"kind": {"$ref": "#/$defs/PeriodKind"}, "days": {"type": "integer"}},
            },
        },
        "type": "object",
        "properties": {
            "period": {"$ref": "#/$defs/PeriodSpec"},
            "filters": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["period"],
    }
    tool = {"type": "function", "function": {"name": "report", "parameters": schema}}
    period = {"kind": "last_n_days", "days": 7}
    filters = [{"field": "city", "in": ["Oslo", "Bergen"]}, {"nested": {"deep": [1, {"x": None}]}}]
    reply = _block(
        _invoke(
            "report",
            _param("period", False, json.dumps(period)),
            _param("filters", False, json.dumps(filters)),
        )
    )
    client, _ = client_for(ChunkTM(tok, reply, 2))
    _, calls, finish = _both(client, model="m", messages=MSGS, tools=[tool])
    assert finish == "tool_calls" and [json.loads(a) for _, a in calls] == [
        {"period": period, "filters": filters}
    ]


@pytest.mark.parametrize("text", ["Is 3 < 4? Yes: 3 <", "x <｜", "Done.\n\n<", "a <｜DS"])
def test_sglang_9657_unused_tools_never_cut_the_answer(tok: PreTrainedTokenizerFast, text: str) -> None:
    """sgl-project/sglang#9657: with tools in the request but none called, streamed content was
    dropped by the tool parser. Here the answer's last characters could begin a DSML block
    (``"<"``, ``"<｜"``) and the generation stopped there, so no block was opened. Expected: the
    answer the same request without tools gets, streamed and not, through the chat and Responses
    routes (DeepSeek's response parser, ``deepseek-recipe``, reads these texts so too)."""
    client, _ = client_for(ChunkTM(tok, text))
    assert _both(client, model="m", messages=MSGS)[0] == text  # the oracle: no tool parser at all
    kw = dict(model="m", messages=MSGS, tools=[CHAT_TOOL])
    assert _message(client, **kw) == _folded(client, **kw) == (text, [], "stop")
    tm = PromptTM(tok, reply=text)
    _, tc = make_client(tm)
    body, events = post(tc, {"input": "Go.", "tools": [WEATHER]})
    assert body["output"][0]["content"][0]["text"] == text
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == text


# --- reasoning --------------------------------------------------------------------------------


@pytest.mark.parametrize("per_chunk", [1, 2])
def test_sglang_8569_partial_tag_text_in_the_answer_is_kept(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """sgl-project/sglang#8569: streamed, answer text that began like a reasoning tag (``</``,
    ``<thi``) was held back as a possible tag and then dropped when the next delta showed it was
    not one. Expected: every character of the answer, as the non-streamed message has it."""
    answer = "Use </div> to close, <b>bold</b>, and a </thin> or <think-ish> token; x</"
    reply = "Plan it.</think>" + answer
    client, _ = client_for(ChunkTM(tok, reply, per_chunk))
    kw = dict(model="m", messages=MSGS, extra_body=THINK)
    ns = client.chat.completions.create(**kw).choices[0].message
    assert (ns.content, ns.model_extra["reasoning_content"]) == (answer, "Plan it.")
    content = reasoning = ""
    for ch in client.chat.completions.create(**kw, stream=True):
        for c in ch.choices:
            content += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
    assert (content, reasoning) == (answer, "Plan it.")
    # thinking off: the same text is all answer
    client, _ = client_for(ChunkTM(tok, answer, per_chunk))
    assert _both(client, model="m", messages=MSGS)[0] == answer


def test_spring_ai_5898_thinking_tool_loop_without_reasoning_content(tok: PreTrainedTokenizerFast) -> None:
    """spring-projects/spring-ai#5898 (and langchain-ai/langchain#39370): in thinking mode, a tool
    loop whose assistant call turn came back without its ``reasoning_content`` (clients that fold
    the stream drop it) was a 400 ("reasoning_content is missing in assistant tool call message").
    Expected, as DeepSeek's own converter does by default: accepted, the missing reasoning an
    empty one, and the prompt that converter renders."""
    tm = ChunkTM(tok, "Checked.</think>It is 18C.")
    client, _ = client_for(tm)
    body = {
        "model": "m",
        "tools": [CHAT_TOOL],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", '{"city": "Paris"}')]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        ],
    }
    r = client.chat.completions.create(**body, extra_body=THINK)
    assert r.choices[0].message.content == "It is 18C."
    assert r.choices[0].message.model_extra["reasoning_content"] == "Checked."
    b = {**ids_in_written_order(body), "model": "DeepSeek-V4-Pro", "thinking": {"type": "enabled"}}
    req = recipe.ChatCompletionRequest(b).convert(recipe.ConversionOptions())
    want = recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt
    # (the converter's default effort paragraph, absent from a request without reasoning_effort)
    bos = "<｜begin▁of▁sentence｜>"
    want = bos + want[want.index("\n\n## Tools") :]
    assert tok.decode(tm.received[-1].input_ids) == want


# --- Responses API ----------------------------------------------------------------------------


def test_vllm_45273_codex_history_items_are_accepted(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#45273 (also openai/codex#12669): Codex's second request replays its
    history as Responses items: assistant ``message`` items without ``id`` / ``status``, one with
    ``content: []``, a ``reasoning`` item (``summary``, ``encrypted_content``), the
    ``function_call`` and its ``function_call_output``. They were 400s (``Field required:
    status``) or 500s (``IndexError``). Expected: accepted, and the prompt DeepSeek's own
    Responses converter renders for them."""
    tm = PromptTM(tok, reply="Done.")
    _, tc = make_client(tm)
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Need the tool."}],
            "encrypted_content": "opaque",
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {
            "type": "function_call",
            "call_id": "call_9",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_9", "output": "18C"},
        {"type": "message", "role": "assistant", "content": []},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks"}]},
    ]
    req = {"input": items, "tools": [WEATHER], "max_output_tokens": 20, "temperature": 0}
    body, _ = post(tc, req)
    assert body["status"] == "completed" and body["output"][-1]["content"][0]["text"] == "Done."
    assert tok.decode(tm.received[-1].input_ids) == recipe_prompt(req, recipe.ResponsesRequest)


def test_vllm_pr_40314_responses_without_tools_make_no_calls(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#40314: ``/v1/responses`` defaulted ``tool_choice`` to ``"auto"`` even
    when the request had no tools, so the model was told about tool calling. Expected: the same
    prompt as with the tools left out of a chat request, and a text answer."""
    tm = PromptTM(tok)
    client, tc = make_client(tm)
    for tools in (None, []):
        extra = {} if tools is None else {"tools": tools}
        body, _ = post(tc, {"input": "Hello", "max_output_tokens": 12, "temperature": 0, **extra})
        assert [o["type"] for o in body["output"]] == ["message"]
        got = tm.received[-1].input_ids
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hello"}], max_tokens=12, temperature=0
        )
        assert tm.received[-1].input_ids == got
    tm.reply = "Sure." + CALL  # markup written without tools is never a function_call
    body, _ = post(tc, {"input": "Hello", "max_output_tokens": 200})
    assert "function_call" not in [o["type"] for o in body["output"]]


def test_vllm_29725_responses_stream_call_as_function_call_events(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#29725 (and vllm-project/vllm#24076): streamed on ``/v1/responses``, a
    tool call came out as ``response.output_text.delta`` events carrying the model's call markup
    (or, with reasoning, as reasoning only). Expected, as OpenAI streams one: a ``reasoning``
    item, then a ``function_call`` item whose arguments arrive as
    ``response.function_call_arguments.delta`` events; no text item; the ``openai`` client's
    final response the non-streamed one."""
    reply = "Need the weather.</think>" + CALL
    tm = PromptTM(tok, reply=reply)
    client, tc = make_client(tm)
    req = {"input": "Weather in Paris?", "tools": [WEATHER], "reasoning": {"effort": "max"}}
    body, events = post(tc, req)
    kinds = [o["type"] for o in body["output"]]
    assert kinds == ["reasoning", "function_call"]
    assert json.loads(body["output"][1]["arguments"]) == {"city": "Paris", "days": 3}
    types = [e["type"] for e in events]
    assert "response.output_text.delta" not in types
    args = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    assert args == body["output"][1]["arguments"]
    with client.responses.stream(model=MODEL, **req) as s:
        final = final_response(s)
    assert [o.type for o in final.output] == kinds and final.output[1].arguments == args


@pytest.mark.parametrize("effort", [None, "max"])
def test_sglang_40082_responses_developer_instructions_reach_the_model(
    tok: PreTrainedTokenizerFast, effort: str | None
) -> None:
    """sgl-project/sglang#40082 (and ollama/ollama#18305 on ``/v1/responses``): ``developer``
    messages were accepted and then silently left out of the prompt (Codex sends its
    instructions that way, with a reasoning effort). Expected: the instruction reaches the model,
    thinking or not, as an instruction (a system message), as SGLang's DeepSeek-V4 path renders a
    developer message: its ``pre_normalize`` (developer -> system), then DeepSeek's own Chat
    Completions converter and V4 encoder (``deepseek-recipe``) on the same conversation."""
    renderer = pytest.importorskip("sglang.srt.parser.deepseek_recipe_renderer")
    tm = PromptTM(tok, reply="BANANA")
    _, tc = make_client(tm)
    items = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Say BANANA."}]},
        {"role": "user", "content": "What now?"},
    ]
    req: dict[str, Any] = {"input": items, "max_output_tokens": 20}
    if effort:
        req["reasoning"] = {"effort": effort}
    body, _ = post(tc, req)
    assert body["status"] == "completed"
    prompt = tok.decode(tm.received[-1].input_ids)
    assert "Say BANANA." in prompt
    chat = [
        {"role": m["role"], "content": m["content"] if m.get("type") is None else "Say BANANA."}
        for m in items
    ]
    wire = renderer.pre_normalize({"messages": chat, "thinking": bool(effort)})
    conv = recipe.ChatCompletionRequest({**wire, "model": "DeepSeek-V4-Pro"}).convert(
        recipe.ConversionOptions(default_thinking_mode=bool(effort))
    )
    want = recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt
    if effort:  # (the effort paragraph depends on the checkpoint's profile)
        prompt, want = prompt[prompt.index("<｜User｜>") :], want[want.index("<｜User｜>") :]
    assert prompt == want


DEVELOPER_CONVERSATIONS = [
    [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hi"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "developer", "content": "Say BANANA."},
        {"role": "user", "content": "What now?"},
    ],
    [{"role": "user", "content": "Hi"}, {"role": "developer", "content": "Reply in one word."}],
]


@pytest.mark.parametrize("tools", [False, True])
@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("messages", DEVELOPER_CONVERSATIONS)
def test_chat_developer_messages_render_as_sglang_renders_them(
    tok: PreTrainedTokenizerFast, messages: list[dict[str, Any]], thinking: bool, tools: bool
) -> None:
    """sgl-project/sglang#40082's kind on ``/v1/chat/completions``: a ``developer`` message before
    the last user turn was left out of the prompt in thinking mode without tools (DeepSeek's
    ``encoding_dsv4.py`` drops its own developer role there), so an instruction given first never
    reached the model. Expected: SGLang's DeepSeek-V4 chat path, which makes it a system message
    before DeepSeek's converter (``pre_normalize`` in SGLang's ``deepseek_recipe_renderer``).
    Oracle: that function from the installed ``sglang`` package, then DeepSeek's own Chat
    Completions converter and V4 encoder (``deepseek-recipe``) on the same request."""
    renderer = pytest.importorskip("sglang.srt.parser.deepseek_recipe_renderer")
    tm = PromptTM(tok, reply="OK")
    _, tc = make_client(tm)
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "max_tokens": 5}
    if thinking:
        body["chat_template_kwargs"] = {"thinking": True}
    if tools:
        body["tools"] = [CHAT_TOOL]
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    prompt = tok.decode(tm.received[-1].input_ids)
    wire: dict[str, Any] = {**ids_in_written_order({"messages": messages}), "thinking": thinking}
    if tools:
        wire["tools"] = [CHAT_TOOL]
    if thinking:  # the lowest effort: no effort paragraph, as the chat route without an effort
        wire["reasoning_effort"] = "low"
    req = {**renderer.pre_normalize(wire), "model": "DeepSeek-V4-Pro"}
    conv = recipe.ChatCompletionRequest(req).convert(recipe.ConversionOptions(default_thinking_mode=thinking))
    want = recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt
    assert prompt == want
    for m in messages:
        if m["role"] == "developer":
            assert m["content"] in prompt

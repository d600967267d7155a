"""A twenty-third set of public reports on tool calling (DeepSeek-V4 DSML calls, ``tool_choice``,
streamed call deltas, replayed calls) on ``/v1/chat/completions`` and ``/v1/responses``, in process.

Fixed here: a ``/v1/responses`` history replaying a ``function_call`` whose ``arguments`` were
neither a JSON object nor the beginning of one (``[]``, ``null``, ``42``, text that is no JSON)
was a 400, so the malformed call made every later request of the conversation fail; DeepSeek's
own Responses converter renders such text as one ``arguments`` string parameter, as this server's
chat route already did, and so does the Responses route now. A named ``tool_choice`` without a
function name was a 400 reading "names the function None"; it now names the missing
``tool_choice.function.name`` (``tool_choice.name`` on ``/v1/responses``). A ``tool`` message
without a ``tool_call_id`` got the unanswered-call 400 blaming the assistant message; it now gets
OpenAI's ``Missing parameter 'tool_call_id'`` naming ``messages[i].tool_call_id``.

The model's text is written by hand (:class:`~chat_tools_testutil.ChunkTM`, ``n`` tokens per
streamed chunk). Oracles: DeepSeek's own converters, V4 encoder and response parser
(``deepseek-recipe``), the ``openai`` client's types and chat stream accumulator, ``json.loads``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_tools_testutil import WEATHER, WEATHER_FLAT, ChunkTM, client_for, sse_chunks
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response as OpenAIResponse
from openai.types.responses import ResponseFunctionToolCall, ResponseStreamEvent
from pydantic import TypeAdapter
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import ids_in_written_order  # noqa: E402
from deepseek_recipe_testutil import recipe_body as _recipe_body  # noqa: E402
from deepseek_recipe_testutil import recipe_message as _recipe_message  # noqa: E402

CHAT = "/v1/chat/completions"
RESP = "/v1/responses"
MSGS = [{"role": "user", "content": "Weather in Paris?"}]
CALL_PARIS = dsml_invoke("get_weather", dsml_param("city", True, "Paris"), dsml_param("days", False, "3"))
NOARG = {
    "type": "function",
    "function": {"name": "list_tasks", "parameters": {"type": "object", "properties": {}}},
}
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _grammar_tm(tok: PreTrainedTokenizerFast, reply: str, per_chunk: int = 1) -> ChunkTM:
    """A :class:`ChunkTM` that reports a grammar backend (``tool_choice`` forcing is served)."""
    tm = ChunkTM(tok, reply, per_chunk=per_chunk)
    tm.grammar_enabled = True  # type: ignore[attr-defined]
    return tm


def _chat_recipe_ids(tok: PreTrainedTokenizerFast, body: dict[str, Any]) -> list[int]:
    """Token ids of DeepSeek's prompt of a Chat Completions body (its converter and V4 encoder)."""
    req = recipe.ChatCompletionRequest(_recipe_body(body, False)).convert(recipe.ConversionOptions())
    text = recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt
    return tok.encode(text, add_special_tokens=False)


def _responses_recipe_ids(tok: PreTrainedTokenizerFast, body: dict[str, Any]) -> list[int]:
    """Token ids of DeepSeek's prompt of a Responses body (its Responses converter, V4 encoder,
    thinking off)."""
    req = recipe.ResponsesRequest({**ids_in_written_order(body), "model": "DeepSeek-V4-Pro"})
    conv = req.convert(recipe.ConversionOptions(default_thinking_mode=False)).conversation
    return tok.encode(recipe.DeepseekV4Encoding().render_conversation(conv).prompt, add_special_tokens=False)


def _folded(tc: Any, body: dict[str, Any]) -> Any:
    """The streamed chat answer as the ``openai`` client folds it: its final choice."""
    r = tc.post(CHAT, json={"model": "m", **body, "stream": True})
    assert r.status_code == 200, r.text
    state = ChatCompletionStreamState()
    for c in sse_chunks(r.text):
        state.handle_chunk(ChatCompletionChunk.model_validate(c))
    return state.get_final_completion().choices[0]


def _calls(message: Any) -> list[tuple[str, Any]]:
    """``[(name, parsed arguments)]`` of an ``openai`` message object."""
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def _events(tc: Any, body: dict[str, Any]) -> list[Any]:
    """The typed events of a streamed ``/v1/responses`` answer (``openai``'s event union)."""
    r = tc.post(RESP, json={"model": "m", **body, "stream": True})
    assert r.status_code == 200, r.text
    return [EVENTS.validate_python(e) for e in sse_chunks(r.text)]


# --------------------------------------------------------------------------- malformed history

#: ``arguments`` texts that are no JSON object and no beginning of one.
NOT_AN_OBJECT = ["[]", "null", "42", '"x"', "{bad", "not json at all"]


@pytest.mark.parametrize("args", NOT_AN_OBJECT)
def test_responses_history_with_malformed_arguments_renders_as_deepseek(
    tok: PreTrainedTokenizerFast, args: str
) -> None:
    """local-inference-lab/vllm#684 (and vllm-project/vllm#48922, vllm-project/vllm#50861): a
    replayed ``function_call`` whose ``arguments`` were no JSON object made ``/v1/responses`` a
    400 (or a 500), so one malformed call poisoned every later request of the conversation.
    Known gap here: the Responses route refused these texts with a 400 naming
    ``input[1].arguments``. Expected: served, the prompt the one DeepSeek's own Responses
    converter and V4 encoder render for the same body (the text as one ``arguments`` string
    parameter). Oracle: ``deepseek-recipe``."""
    items = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_bad", "name": "get_weather", "arguments": args},
        {"type": "function_call_output", "call_id": "call_bad", "output": "invalid arguments"},
        {"role": "user", "content": "Continue."},
    ]
    body = {"input": items, "tools": [WEATHER_FLAT]}
    tm = ChunkTM(tok, "Retrying.")
    _, tc = client_for(tm)
    r = tc.post(RESP, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    assert OpenAIResponse.model_validate(r.json()).output_text == "Retrying."
    assert list(tm.received[-1].input_ids) == _responses_recipe_ids(tok, body)


def test_responses_history_with_a_cut_call_is_served(tok: PreTrainedTokenizerFast) -> None:
    """local-inference-lab/vllm#684, the report's own input: a call cut inside its arguments
    (``{"value": ``) replayed with its output and a new user turn was a 400. Expected: 200, and
    the call, its output and the new turn reach the prompt (the cut call is replayed with the
    members that parse, none here). Oracle: the response's own ``openai`` type and the prompt
    text decoded by an independent tokenizer."""
    tool = {
        "type": "function",
        "name": "diagnostic_noop",
        "description": "No-op",
        "parameters": {"type": "object"},
    }
    items = [
        {
            "type": "function_call",
            "call_id": "call_incomplete",
            "name": "diagnostic_noop",
            "arguments": '{"value": ',
        },
        {
            "type": "function_call_output",
            "call_id": "call_incomplete",
            "output": "not executed: bad arguments",
        },
        {"role": "user", "content": "Continue."},
    ]
    tm = ChunkTM(tok, "OK.")
    _, tc = client_for(tm)
    r = tc.post(RESP, json={"model": "m", "input": items, "tools": [tool]})
    assert r.status_code == 200, r.text
    assert OpenAIResponse.model_validate(r.json()).status == "completed"
    prompt = tok.decode(tm.received[-1].input_ids)
    for piece in ('invoke name="diagnostic_noop"', "not executed: bad arguments", "Continue."):
        assert piece in prompt


@pytest.mark.parametrize(
    "args",
    [
        # vllm-project/vllm#43995: unescaped quotes inside a string value
        '{"filePath": "/tmp/test.txt", "newString": "He said "hello" and left", "oldString": "old"}',
        *NOT_AN_OBJECT[:3],  # vllm-project/vllm#50861: JSON, but no object
    ],
)
def test_chat_history_with_malformed_arguments_renders_as_deepseek(
    tok: PreTrainedTokenizerFast, args: str
) -> None:
    """vllm-project/vllm#43995 (unescaped quotes in a replayed call's ``arguments``: a 400
    ``Expecting ',' delimiter``) and vllm-project/vllm#50861 (``"[]"`` / ``"null"`` / ``"42"``:
    a 500): a malformed call in the history must not fail the next request. Expected: served, and
    the prompt is DeepSeek's for the same messages (the text as one ``arguments`` string
    parameter, nothing dropped). Oracle: DeepSeek's own converter and V4 encoder."""
    call = {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": args}}
    msgs = MSGS + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "error: bad arguments"},
        {"role": "user", "content": "Continue"},
    ]
    body = {"messages": msgs, "tools": [WEATHER]}
    tm = ChunkTM(tok, "Fine.")
    _, tc = client_for(tm)
    r = tc.post(CHAT, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    assert list(tm.received[-1].input_ids) == _chat_recipe_ids(tok, body)


# --------------------------------------------------------------------------- Responses call items


def test_function_call_item_has_an_fc_id_and_a_call_id_and_replays(tok: PreTrainedTokenizerFast) -> None:
    """ggml-org/llama.cpp#24882 (a ``function_call`` output item without its item ``id`` broke
    Rig's parser), nodetool-ai/nodetool#4252 (OpenAI refuses a replayed item ``id`` that does not
    begin with ``fc``) and anomalyco/opencode#45081 (a call replayed without its item ``id`` must
    still pair with its output by ``call_id``). Expected: the item carries an ``id`` beginning
    ``fc`` and a distinct ``call_id``; replayed as returned, or without ``id``, the history is
    served and renders DeepSeek's prompt. Oracle: ``openai``'s ``ResponseFunctionToolCall`` and
    DeepSeek's Responses converter."""
    _, tc = client_for(ChunkTM(tok, "Checking." + dsml_block(CALL_PARIS)))
    r = tc.post(RESP, json={"model": "m", "input": "Weather in Paris?", "tools": [WEATHER_FLAT]})
    assert r.status_code == 200, r.text
    calls = [o for o in OpenAIResponse.model_validate(r.json()).output if o.type == "function_call"]
    assert len(calls) == 1
    call = ResponseFunctionToolCall.model_validate(calls[0].model_dump())
    assert call.id and call.id.startswith("fc") and call.call_id and call.call_id != call.id
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris", "days": 3})
    item = call.model_dump(exclude_none=True)
    for replayed in (item, {k: v for k, v in item.items() if k not in ("id", "status")}):
        items = [
            {"role": "user", "content": "Weather in Paris?"},
            replayed,
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ]
        tm = ChunkTM(tok, "Sunny.")
        _, tc2 = client_for(tm)
        r2 = tc2.post(RESP, json={"model": "m", "input": items, "tools": [WEATHER_FLAT]})
        assert r2.status_code == 200, r2.text
        assert list(tm.received[-1].input_ids) == _responses_recipe_ids(
            tok, {"input": items, "tools": [WEATHER_FLAT]}
        )


@pytest.mark.parametrize("per_chunk", [1, 4])
def test_streamed_function_call_item_is_closed_before_completed(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """sgl-project/sglang#12652 (and router-for-me/CLIProxyAPI#1004): a streamed Responses answer
    went from ``response.function_call_arguments.done`` straight to ``response.completed`` (no
    ``response.output_item.done``), and the completed response's output lost the call (a bare
    message, or an empty ``name``). Expected: every event is one of ``openai``'s stream event
    types; the call's ``output_item.done`` comes after its ``arguments.done`` and before
    ``response.completed``, whose output equals the non-streamed one (ids aside). Oracle:
    ``openai``'s event types and the non-streamed response."""
    _, tc = client_for(ChunkTM(tok, "Let me look." + dsml_block(CALL_PARIS), per_chunk=per_chunk))
    body = {"input": "Weather in Paris?", "tools": [WEATHER_FLAT]}
    events = _events(tc, body)
    kinds = [e.type for e in events]
    args_done = kinds.index("response.function_call_arguments.done")
    item_done = [
        i
        for i, e in enumerate(events)
        if e.type == "response.output_item.done" and e.item.type == "function_call"
    ]
    assert len(item_done) == 1 and args_done < item_done[0] < kinds.index("response.completed")
    assert kinds[-1] == "response.completed"
    done_item = events[item_done[0]].item
    assert (done_item.name, json.loads(done_item.arguments)) == ("get_weather", {"city": "Paris", "days": 3})

    def shape(out: list[Any]) -> list[tuple[Any, ...]]:
        return [
            (o.type, getattr(o, "name", None), getattr(o, "arguments", None), getattr(o, "status", None))
            for o in out
        ]

    plain = OpenAIResponse.model_validate(tc.post(RESP, json={"model": "m", **body}).json())
    assert shape(events[-1].response.output) == shape(plain.output)
    assert events[-1].response.output[-1].call_id == done_item.call_id


# --------------------------------------------------------------------------- streamed arguments


@pytest.mark.parametrize("per_chunk", [1, 3])
def test_streamed_call_of_a_tool_without_parameters_folds_to_an_empty_object(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """QwenLM/qwen-code#6249 (and vllm-project/vllm#37098): a streamed call of a tool that takes
    no parameters came with ``arguments: ""`` and no later fragment, and the client dropped the
    call (or failed ``json.loads("")``). Expected: the folded streamed call's ``arguments`` parse
    to ``{}``, as the non-streamed call's do, and the finish reason is ``"tool_calls"``. Oracle:
    DeepSeek's response parser of the same text and ``openai``'s stream accumulator."""
    reply = dsml_block(dsml_invoke("list_tasks"))
    body = {"messages": [{"role": "user", "content": "List my tasks."}], "tools": [NOARG]}
    want = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in _recipe_message(body, reply)["tool_calls"]
    ]
    assert want == [("list_tasks", {})]
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    ch = ChatCompletion.model_validate(tc.post(CHAT, json={"model": "m", **body}).json()).choices[0]
    assert (_calls(ch.message), ch.finish_reason) == (want, "tool_calls")
    folded = _folded(tc, body)
    assert (_calls(folded.message), folded.finish_reason) == (want, "tool_calls")


FORCED = {
    "required": "required",
    "named": {"type": "function", "function": {"name": "get_weather"}},
}


@pytest.mark.parametrize("per_chunk", [1, 3, 50])
@pytest.mark.parametrize("choice", sorted(FORCED))
def test_forced_tool_choice_streams_the_whole_arguments(
    tok: PreTrainedTokenizerFast, choice: str, per_chunk: int
) -> None:
    """anthropics/anthropic-sdk-python#658: with streaming on and the tool forced
    (``tool_choice`` any / a named tool) the call came back with empty arguments, while the
    non-streamed answer had them. Expected, on chat completions with ``"required"`` and a named
    choice: the folded stream's call equals the non-streamed one and DeepSeek's parse of the
    same text, whatever the chunking. Oracle: DeepSeek's response parser and ``openai``'s stream
    accumulator."""
    reply = dsml_block(CALL_PARIS)
    body = {"messages": MSGS, "tools": [WEATHER], "tool_choice": FORCED[choice]}
    want = [("get_weather", {"city": "Paris", "days": 3})]
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in _recipe_message({"messages": MSGS, "tools": [WEATHER]}, reply)["tool_calls"]
    ] == want
    _, tc = client_for(_grammar_tm(tok, reply, per_chunk))
    plain = tc.post(CHAT, json={"model": "m", **body})
    assert plain.status_code == 200, plain.text
    ch = ChatCompletion.model_validate(plain.json()).choices[0]
    assert _calls(ch.message) == want
    folded = _folded(tc, body)
    assert _calls(folded.message) == want and folded.finish_reason == ch.finish_reason == "tool_calls"


def test_forced_tool_choice_on_responses_streams_the_whole_arguments(tok: PreTrainedTokenizerFast) -> None:
    """anthropics/anthropic-sdk-python#658 on ``/v1/responses``: with ``tool_choice: "required"``
    and streaming, the ``function_call_arguments`` deltas join to the arguments of the
    ``arguments.done`` event and of the completed item, which parse to DeepSeek's arguments.
    Oracle: DeepSeek's response parser and ``openai``'s event types."""
    reply = dsml_block(CALL_PARIS)
    _, tc = client_for(_grammar_tm(tok, reply, per_chunk=2))
    events = _events(tc, {"input": "Weather in Paris?", "tools": [WEATHER_FLAT], "tool_choice": "required"})
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    final = [o for o in events[-1].response.output if o.type == "function_call"]
    want = json.loads(
        _recipe_message({"messages": MSGS, "tools": [WEATHER]}, reply)["tool_calls"][0]["function"][
            "arguments"
        ]
    )
    assert done == [deltas] and [o.arguments for o in final] == [deltas]
    assert json.loads(deltas) == want == {"city": "Paris", "days": 3}


# --------------------------------------------------------------------------- request errors


@pytest.mark.parametrize("function", [{}, {"name": ""}, {"name": None}])
def test_nameless_named_tool_choice_is_a_400_naming_the_name(
    tok: PreTrainedTokenizerFast, function: dict[str, Any]
) -> None:
    """vllm-project/vllm#19237 (fixed by vllm-project/vllm#19239; and sgl-project/sglang#28862): a
    named ``tool_choice`` without a function name got an error that did not say what was wrong
    (or a 500). Known gap here: the 400 read "tool_choice names the function None, which is not
    in `tools`". Expected: a 400 in OpenAI's shape naming ``tool_choice.function.name`` as
    missing, nothing run; on ``/v1/responses`` (flat ``{"type": "function"}``) the same naming
    ``tool_choice.name``. Oracle: ``openai``'s request param types, which refuse the nameless
    choice (``name`` is required)."""
    from openai.types.chat import ChatCompletionToolChoiceOptionParam
    from openai.types.responses import ToolChoiceFunctionParam

    with pytest.raises(ValueError):
        TypeAdapter(ChatCompletionToolChoiceOptionParam).validate_python({"type": "function", "function": {}})
    with pytest.raises(ValueError):
        TypeAdapter(ToolChoiceFunctionParam).validate_python({"type": "function"})
    tm = _grammar_tm(tok, dsml_block(CALL_PARIS))
    _, tc = client_for(tm)
    choice = {"type": "function", "function": function}
    r = tc.post(CHAT, json={"model": "m", "messages": MSGS, "tools": [WEATHER], "tool_choice": choice})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "tool_choice.function.name" and "tool_choice.function.name" in err["message"]
    flat = {"type": "function", **({"name": function["name"]} if "name" in function else {})}
    r = tc.post(RESP, json={"model": "m", "input": "Weather?", "tools": [WEATHER_FLAT], "tool_choice": flat})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "tool_choice.name" and "tool_choice.name" in err["message"]
    assert tm.received == []
    ok = tc.post(
        CHAT,
        json={
            "model": "m",
            "messages": MSGS,
            "tools": [WEATHER],
            "tool_choice": {**choice, "function": {"name": "get_weather"}},
        },
    )
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("tool_call_id", ["absent", None, ""])
def test_tool_message_without_tool_call_id_is_a_400_naming_it(
    tok: PreTrainedTokenizerFast, tool_call_id: str | None
) -> None:
    """MadcowD/ell#325: a ``tool`` message sent without its ``tool_call_id`` gets OpenAI's 400
    ``Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'``
    (``param`` naming that message's field). Known gap here: the 400 blamed the assistant message
    instead ("did not have response messages: call_1"), pointing the client at the wrong message.
    Expected: a 400 whose ``param`` is ``messages[2].tool_call_id``, nothing run. Oracle:
    DeepSeek's own converter refuses the same body for the missing field, and ``openai``'s
    ``ChatCompletionToolMessageParam`` requires it."""
    from openai.types.chat import ChatCompletionToolMessageParam

    with pytest.raises(ValueError):
        TypeAdapter(ChatCompletionToolMessageParam).validate_python({"role": "tool", "content": "x"})
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    result: dict[str, Any] = {"role": "tool", "content": "sunny"}
    if tool_call_id != "absent":
        result["tool_call_id"] = tool_call_id
    body = {
        "messages": MSGS + [{"role": "assistant", "content": None, "tool_calls": [call]}, result],
        "tools": [WEATHER],
    }
    with pytest.raises((ValueError, recipe.ConversionError)):
        recipe.ChatCompletionRequest(_recipe_body(body, False)).convert(recipe.ConversionOptions())
    tm = ChunkTM(tok, "Sunny.")
    _, tc = client_for(tm)
    r = tc.post(CHAT, json={"model": "m", **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "messages[2].tool_call_id" and "tool_call_id" in err["message"], err
    assert tm.received == []


# --------------------------------------------------------------------------- prompt and delta shape


def test_non_ascii_tool_schemas_and_calls_reach_the_prompt_unescaped(tok: PreTrainedTokenizerFast) -> None:
    """theroyallab/tabbyAPI#459: tool definitions with Chinese descriptions were rendered with
    ``\\uXXXX`` escapes (``tojson`` with ``ensure_ascii``), doubling the prompt's tokens and
    hiding the text from the model. Expected: the tool section and a replayed call's arguments
    keep the characters, and the prompt is DeepSeek's for the same body. Oracle: DeepSeek's own
    converter and V4 encoder, and the prompt text (no ``\\u`` escape in it)."""
    tool = {
        "type": "function",
        "function": {
            "name": "query_weather",
            "description": "查询城市的天气预报（摄氏度）",
            "parameters": {
                "type": "object",
                "properties": {"城市": {"type": "string", "description": "城市名称，例如：北京"}},
                "required": ["城市"],
            },
        },
    }
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "query_weather", "arguments": json.dumps({"城市": "北京"})},  # escaped JSON text
    }
    msgs = [
        {"role": "user", "content": "北京天气？"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "晴，25°C"},
    ]
    body = {"messages": msgs, "tools": [tool]}
    tm = ChunkTM(tok, "晴天。")
    _, tc = client_for(tm)
    r = tc.post(CHAT, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    ids = list(tm.received[-1].input_ids)
    assert ids == _chat_recipe_ids(tok, body)
    prompt = tok.decode(ids)
    assert "\\u" not in prompt and "城市名称，例如：北京" in prompt and ">北京</" in prompt


def test_only_a_calls_first_delta_carries_its_id_type_and_name(tok: PreTrainedTokenizerFast) -> None:
    """SillyTavern/SillyTavern#5811 and ag2ai/ag2#2451: servers that repeat ``type`` (or ``id``)
    on every streamed ``tool_calls`` delta made accumulating clients concatenate them into
    ``"functionfunction..."`` and drop the call. OpenAI's stream sends ``id``, ``type`` and
    ``function.name`` once, in a call's first delta. Expected: for each call index exactly one
    delta carries each of them, and it is the first of that index; the folded call is whole.
    Oracle: ``openai``'s chunk types and stream accumulator."""
    oslo = dsml_invoke("get_weather", dsml_param("city", True, "Oslo"))
    body = {"messages": MSGS, "tools": [WEATHER], "stream": True}
    for per_chunk in (1, 5):
        _, tc = client_for(ChunkTM(tok, "Sure." + dsml_block(CALL_PARIS, oslo), per_chunk=per_chunk))
        r = tc.post(CHAT, json={"model": "m", **body})
        chunks = [ChatCompletionChunk.model_validate(c) for c in sse_chunks(r.text)]
        deltas: dict[int, list[Any]] = {}
        for c in chunks:
            for ch in c.choices:
                for d in ch.delta.tool_calls or []:
                    deltas.setdefault(d.index, []).append(d)
        assert sorted(deltas) == [0, 1]
        for ds in deltas.values():
            assert [d.id is not None for d in ds] == [True] + [False] * (len(ds) - 1)
            assert [d.type is not None for d in ds] == [True] + [False] * (len(ds) - 1)
            assert [bool(d.function and d.function.name) for d in ds] == [True] + [False] * (len(ds) - 1)
        state = ChatCompletionStreamState()
        for c in chunks:
            state.handle_chunk(c)
        got = state.get_final_completion().choices[0].message
        assert _calls(got) == [
            ("get_weather", {"city": "Paris", "days": 3}),
            ("get_weather", {"city": "Oslo"}),
        ]
        assert [c.type for c in got.tool_calls] == ["function", "function"]


@pytest.mark.parametrize("parallel", [True, False])
def test_responses_parallel_tool_calls_streamed_and_not(tok: PreTrainedTokenizerFast, parallel: bool) -> None:
    """ogx-ai/ogx#4123 (``parallel_tool_calls`` not implemented on a Responses server: OpenAI gives
    one ``function_call`` item per call, and only the first call with ``false``) and
    SciSharp/BotSharp#1420 (a streamed answer's second call overwrote the first). Expected: with
    the default every call DeepSeek's parser reads is its own ``function_call`` item (distinct
    ``id`` and ``call_id``), streamed and not alike; with ``false`` only the first. Oracle:
    DeepSeek's response parser of the same text and ``openai``'s types."""
    oslo = dsml_invoke("get_weather", dsml_param("city", True, "Oslo"))
    reply = "Both." + dsml_block(CALL_PARIS, oslo)
    want = [
        ("get_weather", json.loads(c["function"]["arguments"]))
        for c in _recipe_message({"messages": MSGS, "tools": [WEATHER]}, reply)["tool_calls"]
    ]
    assert len(want) == 2
    want = want if parallel else want[:1]
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=3))
    body = {"input": "Weather in Paris and Oslo?", "tools": [WEATHER_FLAT], "parallel_tool_calls": parallel}
    plain = OpenAIResponse.model_validate(tc.post(RESP, json={"model": "m", **body}).json())
    streamed = _events(tc, body)[-1].response
    for resp in (plain, streamed):
        calls = [o for o in resp.output if o.type == "function_call"]
        assert [(c.name, json.loads(c.arguments)) for c in calls] == want
        assert len({c.id for c in calls}) == len({c.call_id for c in calls}) == len(calls)
        assert resp.parallel_tool_calls is parallel


TYPED = {
    "type": "function",
    "function": {
        "name": "configure",
        "description": "Set options",
        "parameters": {
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "enabled": {"type": "boolean"},
                "ratio": {"type": "number"},
                "ids": {"type": "array", "items": {"type": "integer"}},
                "extra": {"type": "object"},
                "note": {"type": ["string", "null"]},
            },
        },
    },
}


@pytest.mark.parametrize("per_chunk", [1, 4])
def test_string_attribute_decides_each_parameters_type(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """xorbitsai/inference#5372: a DeepSeek-V4 parser ignored the parameter tag's ``string``
    attribute, so numbers, booleans, null, arrays and objects came back as strings (and
    ``string="true"`` text that looks like a number was decoded). Expected: ``string="true"``
    values verbatim (``"007"`` stays a string), ``string="false"`` values JSON-decoded, streamed
    and not. Oracle: DeepSeek's own response parser of the same text."""
    inv = dsml_invoke(
        "configure",
        dsml_param("code", True, "007"),
        dsml_param("enabled", False, "true"),
        dsml_param("ratio", False, "-3.5e-1"),
        dsml_param("ids", False, "[1, 2, 3]"),
        dsml_param("extra", False, '{"a": {"b": null}}'),
        dsml_param("note", False, "null"),
    )
    reply = dsml_block(inv)
    body = {"messages": [{"role": "user", "content": "Configure it."}], "tools": [TYPED]}
    want = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in _recipe_message(body, reply)["tool_calls"]
    ]
    assert want == [
        (
            "configure",
            {
                "code": "007",
                "enabled": True,
                "ratio": -0.35,
                "ids": [1, 2, 3],
                "extra": {"a": {"b": None}},
                "note": None,
            },
        )
    ]
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    ch = ChatCompletion.model_validate(tc.post(CHAT, json={"model": "m", **body}).json()).choices[0]
    assert _calls(ch.message) == want
    assert _calls(_folded(tc, body).message) == want

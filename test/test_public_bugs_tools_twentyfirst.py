"""Public reports on OpenAI-style function calling replayed on sglang-v4's DSML tool calls (each
test names its report): the streamed ``delta.tool_calls`` as clients fold them (one chunk holding
a whole call or several calls, the ``index`` of the first call after text, the arguments of a
call without parameters), a call the model writes inside its reasoning, the ``/v1/responses``
stream of a call that turns out malformed, and the assistant and tool turns of an agent's
history (empty, ``null`` or list content) as the next prompt renders them.

The model's text is written by hand (:class:`~test_chat_tool_stream_agreement.ChunkTM`, several
tokens per streamed chunk), so the expected calls are known. Oracles: DeepSeek's own response
parser and V4 prompt encoder (the ``deepseek-recipe`` package), the ``openai`` client's chunk
types and its stream accumulator (``ChatCompletionStreamState``), and ``json.loads``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_tools_testutil import WEATHER, ChunkTM, client_for, sse_chunks, stream_chunks
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_body as _recipe_body  # noqa: E402
from deepseek_recipe_testutil import recipe_message as _recipe_message  # noqa: E402

D = "｜DSML｜"
MSGS = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
CALL_A = dsml_invoke("get_weather", dsml_param("city", True, "Paris"), dsml_param("days", False, "3"))
CALL_B = dsml_invoke("get_weather", dsml_param("city", True, "Oslo"))
WANT_AB = [("get_weather", {"city": "Paris", "days": 3}), ("get_weather", {"city": "Oslo"})]
PING = {"type": "function", "function": {"name": "ping", "description": "Ping the service."}}


def _recipe_prompt(body: dict[str, Any], thinking: bool = False) -> str:
    """DeepSeek's prompt text of a Chat Completions body (its converter, then its V4 encoder)."""
    req = recipe.ChatCompletionRequest(_recipe_body(body, thinking)).convert(recipe.ConversionOptions())
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def _calls(message: Any) -> list[tuple[str, Any]]:
    """``[(name, parsed arguments)]`` of a message (a dict or an ``openai`` object)."""
    calls = message["tool_calls"] if isinstance(message, dict) else message.tool_calls
    out = []
    for c in calls or []:
        fn = c["function"] if isinstance(c, dict) else c.function
        name, args = (fn["name"], fn["arguments"]) if isinstance(fn, dict) else (fn.name, fn.arguments)
        out.append((name, json.loads(args)))
    return out


def _folded(chunks: list[dict[str, Any]]) -> Any:
    """The ``openai`` client's own accumulation of the chunks: its final choice."""
    state = ChatCompletionStreamState()
    for c in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(c))
    return state.get_final_completion().choices[0]


def _tool_deltas(chunks: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The ``delta.tool_calls`` lists of the chunks that carry one."""
    return [d["tool_calls"] for c in chunks for ch in c["choices"] if (d := ch["delta"]).get("tool_calls")]


# --------------------------------------------------------------------------- streamed deltas


@pytest.mark.parametrize("per_chunk", [1, 3, 8, 10_000])
def test_multi_token_deltas_keep_every_calls_arguments(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """vllm-project/vllm#55082: a streaming tool parser returned the right name but *empty*
    arguments unless every token came in its own delta (``--stream-interval``, speculative
    decoding and batching all give multi-token deltas). Here the reply goes out 1, 3, 8 tokens
    per chunk and all in one chunk. Oracle: DeepSeek's own response parser of the same text; the
    ``openai`` client folds the stream."""
    reply = "Checking both." + dsml_block(CALL_A, CALL_B)
    body = {"messages": MSGS, "tools": [WEATHER]}
    want = _recipe_message(body, reply)
    assert _calls(want) == WANT_AB and want["content"] == "Checking both."
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    choice = _folded(stream_chunks(tc, body))
    assert _calls(choice.message) == _calls(want)
    assert choice.message.content == want["content"] and choice.finish_reason == "tool_calls"


def test_calls_sharing_one_chunk_have_distinct_indexes(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-python#3201: a first chunk whose ``delta.tool_calls`` held two entries with
    the same ``index`` was folded into one call. When the whole reply (two calls) arrives in one
    chunk, each entry of that chunk is a different call: distinct indexes 0 and 1, each with its
    own id, ``type`` and name. Oracle: the OpenAI chunk schema (``index`` is the call's position
    in ``message.tool_calls``) and DeepSeek's parser for the folded calls."""
    reply = dsml_block(CALL_A, CALL_B)
    body = {"messages": MSGS, "tools": [WEATHER]}
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=10_000))
    chunks = stream_chunks(tc, body)
    deltas = _tool_deltas(chunks)
    assert len(deltas) == 1, deltas  # one chunk of text: one chunk of calls
    assert [d["index"] for d in deltas[0]] == [0, 1]
    assert all(
        d["id"] and d["type"] == "function" and d["function"]["name"] == "get_weather" for d in deltas[0]
    )
    assert deltas[0][0]["id"] != deltas[0][1]["id"]
    assert _calls(_folded(chunks).message) == _calls(_recipe_message(body, reply)) == WANT_AB


@pytest.mark.parametrize("per_chunk", [1, 5])
def test_first_call_after_text_streams_with_index_zero(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """pipecat-ai/pipecat#4987: a provider streamed the first tool call with ``index`` 1 when text
    came before it, and an accumulator that assumed dense indexes from 0 flushed an empty phantom
    call. The ``index`` of a streamed call is its position in the message's ``tool_calls``: the
    first call after content is 0, the next 1, in order, whatever the chunking. Oracle: the
    non-streamed message's list (and DeepSeek's parser for its calls)."""
    reply = "Let me look that up for you." + dsml_block(CALL_A, CALL_B)
    body = {"messages": MSGS, "tools": [WEATHER]}
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    chunks = stream_chunks(tc, body)
    firsts = [d["index"] for ds in _tool_deltas(chunks) for d in ds if d.get("id")]
    assert firsts == [0, 1], firsts
    r = tc.post("/v1/chat/completions", json={"model": "m", **body})
    message = r.json()["choices"][0]["message"]
    assert _calls(message) == _calls(_recipe_message(body, reply)) == WANT_AB
    # the text before the first call streamed before it, as content
    first_call = next(
        i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["delta"].get("tool_calls")
    )
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:first_call] if c["choices"])
    assert text == message["content"] == "Let me look that up for you."


def test_every_streamed_call_entry_carries_an_integer_index(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-python#2806: a provider streamed ``delta.tool_calls`` entries without
    ``index`` and the client's accumulator died (``list indices must be integers ... not
    NoneType``). Every entry, the opening one and every arguments fragment, carries an integer
    ``index`` naming its call; the fragments of one call keep their call's index. Oracle: the
    OpenAI chunk schema and the client's accumulator (which needs them)."""
    reply = dsml_block(CALL_A, CALL_B)
    body = {"messages": MSGS, "tools": [WEATHER]}
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=2))
    chunks = stream_chunks(tc, body)
    entries = [d for ds in _tool_deltas(chunks) for d in ds]
    assert len(entries) > 4 and all(type(d.get("index")) is int for d in entries), entries
    args: dict[int, str] = {}
    for d in entries:
        args[d["index"]] = args.get(d["index"], "") + (d.get("function") or {}).get("arguments", "")
    assert [json.loads(args[i]) for i in sorted(args)] == [a for _, a in WANT_AB]
    assert _calls(_folded(chunks).message) == WANT_AB


@pytest.mark.parametrize("stream", [False, True])
def test_call_of_a_tool_without_parameters_has_empty_object_arguments(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """Vivswan/litellm-vscode-chat#281: a tool call whose ``arguments`` were an empty string (the
    tool takes no parameters) failed a client's turn as invalid JSON (1jehuang/jcode#225 had
    ``null``). A call with no parameters has ``arguments`` ``"{}"``, streamed (folded) and not.
    Oracle: ``json.loads`` and DeepSeek's parser of the same text."""
    reply = dsml_block(dsml_invoke("ping"))
    body = {"messages": [{"role": "user", "content": "Ping it."}], "tools": [PING]}
    assert _calls(_recipe_message(body, reply)) == [("ping", {})]
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=3))
    if stream:
        choice = _folded(stream_chunks(tc, body))
        arguments, finish = choice.message.tool_calls[0].function.arguments, choice.finish_reason
    else:
        ch = tc.post("/v1/chat/completions", json={"model": "m", **body}).json()["choices"][0]
        arguments, finish = ch["message"]["tool_calls"][0]["function"]["arguments"], ch["finish_reason"]
    assert arguments == "{}" and json.loads(arguments) == {} and finish == "tool_calls"


# --------------------------------------------------------------------------- reasoning


@pytest.mark.parametrize("stream", [False, True])
def test_call_written_inside_the_reasoning_is_a_call(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """sgl-project/sglang#11764 (and vllm-project/vllm#39056): a DeepSeek model in thinking mode
    wrote its tool-call block inside the reasoning (no ``</think>`` before it) and then EOS: the
    call was lost in ``reasoning_content``, no ``tool_calls``, an agent got nothing to run. The
    reasoning is the text before the block, the block's call is the tool call, finish reason
    ``"tool_calls"``, streamed and not. Oracle: DeepSeek's own response parser of the same text."""
    reply = "The user wants Paris weather; call the tool." + dsml_block(CALL_A)
    body = {"messages": MSGS, "tools": [WEATHER], "chat_template_kwargs": {"thinking": True}}
    want = _recipe_message(body, reply, thinking=True)
    assert _calls(want) == WANT_AB[:1]
    _, tc = client_for(ChunkTM(tok, reply, per_chunk=4))
    if stream:
        chunks = stream_chunks(tc, body)
        choice = _folded(chunks)
        msg = {
            "reasoning_content": "".join(
                c["choices"][0]["delta"].get("reasoning_content") or "" for c in chunks if c["choices"]
            ),
            "content": choice.message.content,
            "tool_calls": [c.model_dump() for c in choice.message.tool_calls or []],
        }
        finish = choice.finish_reason
    else:
        ch = tc.post("/v1/chat/completions", json={"model": "m", **body}).json()["choices"][0]
        msg, finish = ch["message"], ch["finish_reason"]
    assert msg["reasoning_content"] == want["reasoning_content"]
    assert not msg["content"] and not want["content"]
    assert _calls(msg) == _calls(want) and finish == "tool_calls"


# --------------------------------------------------------------------------- /v1/responses


def test_responses_stream_of_a_malformed_call_completes_without_it(tok: PreTrainedTokenizerFast) -> None:
    """raullenchai/Rapid-MLX#1559: a streamed ``/v1/responses`` function call with arguments
    ``"12"`` (not an object; the tool needs ``city``) was closed as a good call and the response
    ``completed`` with it, while the non-streamed path refused it. A call whose invoke turns out
    malformed (a body that is JSON but no object, a value that is no JSON) is no call: the
    non-streamed response has no ``function_call`` item; the stream, whose item was already
    opened, closes it ``incomplete`` and its ``response.completed`` output has no such item
    either. Oracle: ``json.loads`` (no call's arguments fail it) and the non-streamed response."""
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    bodies = [
        "12",
        "[1, 2]",
        dsml_param("city", True, "Paris") + "\n" + dsml_param("days", False, "NaN"),
    ]
    for body in bodies:
        reply = "Ok." + dsml_block(f'<{D}invoke name="get_weather">\n{body}\n</{D}invoke>')
        _, tc = client_for(ChunkTM(tok, reply, per_chunk=2))
        req = {"model": "m", "input": "Weather in Paris?", "tools": [tool]}
        plain = tc.post("/v1/responses", json=req).json()
        assert [o["type"] for o in plain["output"]] == ["message"], (body, plain["output"])
        r = tc.post("/v1/responses", json={**req, "stream": True})
        events = sse_chunks(r.text)
        assert events[-1]["type"] == "response.completed", events[-1]
        assert [o["type"] for o in events[-1]["response"]["output"]] == ["message"], body
        done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        for item in done:
            if item["type"] == "function_call":
                assert item["status"] == "incomplete", item
        assert any(item["type"] == "function_call" for item in done), body  # it was opened


# --------------------------------------------------------------------------- agent history

HISTORY_CALL = [
    {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
]
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"}


def _prompt_ids(tok: PreTrainedTokenizerFast, messages: list[dict[str, Any]]) -> list[int]:
    """The token ids the scheduler gets for ``messages`` (with the weather tool); asserts 200."""
    tm = ChunkTM(tok, "Fine.")
    _, tc = client_for(tm)
    r = tc.post("/v1/chat/completions", json={"model": "m", "messages": messages, "tools": [WEATHER]})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "Fine."
    return list(tm.received[0].input_ids)


def _recipe_ids(tok: PreTrainedTokenizerFast, messages: list[dict[str, Any]]) -> list[int]:
    return tok.encode(_recipe_prompt({"messages": messages, "tools": [WEATHER]}), add_special_tokens=False)


def test_call_turn_with_an_empty_content_list_is_served(tok: PreTrainedTokenizerFast) -> None:
    """0xPlaygrounds/rig#1362: an agent's second request, whose assistant turn had
    ``"content": []`` (no parts) next to its ``tool_calls``, got a 400 pydantic validation error
    from vLLM. It is a call turn without text: served, and the prompt is DeepSeek's for it.
    Oracle: DeepSeek's own converter and V4 encoder."""
    msgs = MSGS + [{"role": "assistant", "content": [], "tool_calls": HISTORY_CALL}, RESULT]
    assert _prompt_ids(tok, msgs) == _recipe_ids(tok, msgs)


def test_null_and_empty_text_of_a_call_turn_render_alike(tok: PreTrainedTokenizerFast) -> None:
    """co-l/openfox#117: some chat templates rendered an assistant tool-call turn with
    ``"content": null`` differently from ``""``, and after a failed tool result the model went
    silent; clients had to send ``""``. The call turn's text is empty either way (``null``,
    ``""``, no ``content`` key, an empty list): one prompt, DeepSeek's. Oracle: DeepSeek's own
    converter and V4 encoder (for ``null`` and ``""``)."""
    got = []
    for content in (None, "", "absent", []):
        turn: dict[str, Any] = {"role": "assistant", "tool_calls": HISTORY_CALL}
        if content != "absent":
            turn["content"] = content
        got.append(_prompt_ids(tok, MSGS + [turn, RESULT]))
    for content in (None, ""):
        want = _recipe_ids(
            tok, MSGS + [{"role": "assistant", "content": content, "tool_calls": HISTORY_CALL}, RESULT]
        )
        assert got[0] == want
    assert all(g == got[0] for g in got)


def test_call_turn_and_its_result_reach_the_next_prompt(tok: PreTrainedTokenizerFast) -> None:
    """waybarrios/vllm-mlx#608: a server rebuilt the messages as ``{role, content}`` and dropped
    an assistant turn with ``content: null`` + ``tool_calls`` (and an empty tool result), so the
    continuation prompt was byte-identical to the first one and the agent re-issued the same
    call forever. The call turn and its result, an empty one too, are in the next prompt, which
    is DeepSeek's and differs from the first turn's. Oracle: DeepSeek's own converter and V4
    encoder, and the tokenizer (the call's and the result's text are in the prompt)."""
    first = _prompt_ids(tok, MSGS)
    for result in ("Sunny, 21 C", ""):
        msgs = MSGS + [
            {"role": "assistant", "content": None, "tool_calls": HISTORY_CALL},
            {**RESULT, "content": result},
        ]
        ids = _prompt_ids(tok, msgs)
        assert ids == _recipe_ids(tok, msgs) and ids != first
        text = tok.decode(ids)
        assert f'<{D}invoke name="get_weather">' in text and f"<tool_result>{result}</tool_result>" in text


def test_assistant_turn_with_neither_text_nor_calls_is_served(tok: PreTrainedTokenizerFast) -> None:
    """defilantech/LLMKube#935: a model answered once with no text and no calls; the agent kept
    that empty assistant turn in its history and every later request got a 400 ("Assistant
    message must contain either 'content' or 'tool_calls'!"), the task lost after 40 turns. Such
    a turn (``content`` null or absent) is served as the empty answer it was: the prompt is
    DeepSeek's for the same turn with ``content: ""``. Oracle: DeepSeek's own converter and V4
    encoder (which takes the ``""`` spelling)."""
    follow = {"role": "user", "content": "Please try again."}
    want = _recipe_ids(tok, MSGS + [{"role": "assistant", "content": ""}, follow])
    for turn in (
        {"role": "assistant", "content": None},
        {"role": "assistant"},
        {"role": "assistant", "content": ""},
    ):
        assert _prompt_ids(tok, MSGS + [turn, follow]) == want, turn


def _strict_object(text: str) -> dict[str, Any]:
    """``text`` parsed as RFC 8259 JSON (no ``NaN`` / ``Infinity``) that must be an object."""

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    value = json.loads(text, parse_constant=no_constant)
    assert isinstance(value, dict), text
    return value


@pytest.mark.parametrize("per_chunk", [1, 4, 10_000])
def test_finish_reason_tool_calls_only_with_object_arguments(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """earendil-works/pi#5964: a client had to validate streamed tool calls itself -- strict
    ``JSON.parse`` of the final arguments, a JSON object, and no calls under a finish reason
    other than the tool one -- because providers closed calls with broken arguments. Whatever
    the model writes (good calls; a ``NaN``, ``True`` or a JSON body that is no object; a
    duplicate key), every call of the non-streamed message has arguments that are a strict JSON
    object (a malformed invoke is no call; its valid siblings stay calls), and a response whose
    finish reason is ``"tool_calls"`` -- streamed (folded by the client) or not -- holds only
    such calls. A stream that sent a broken call's deltas before the failure was known answers
    ``"stop"``: the finish reason is the signal not to run them. Oracle:
    ``json.loads`` without constants, and DeepSeek's parser for the good replies."""

    def weather(*params: str) -> str:
        return dsml_invoke("get_weather", dsml_param("city", True, "Paris"), *params)

    replies = {
        "good": (dsml_block(CALL_A, CALL_B), WANT_AB),
        "nan": (dsml_block(weather(dsml_param("days", False, "NaN"))), []),
        "python bool": (dsml_block(weather(dsml_param("days", False, "True"))), []),
        "duplicate key": (dsml_block(weather(dsml_param("days", False, '{"a": 1, "a": 2}'))), []),
        "body not an object": (dsml_block(f'<{D}invoke name="get_weather">\n12\n</{D}invoke>'), []),
        "good then bad": (dsml_block(CALL_B, weather(dsml_param("days", False, "Infinity"))), WANT_AB[1:]),
    }
    body = {"messages": MSGS, "tools": [WEATHER]}
    for what, (reply, want) in replies.items():
        _, tc = client_for(ChunkTM(tok, "Sure." + reply, per_chunk=per_chunk))
        ch = tc.post("/v1/chat/completions", json={"model": "m", **body}).json()["choices"][0]
        calls = ch["message"].get("tool_calls") or []
        assert [(c["function"]["name"], _strict_object(c["function"]["arguments"])) for c in calls] == want, (
            what
        )
        # "tool_calls" after whole calls: a malformed invoke is no call and its valid siblings
        # are (SGLang's and vLLM's DeepSeek parsers); the stream, which sent the broken call's
        # deltas already, answers "stop" (below)
        assert ch["finish_reason"] == ("tool_calls" if want else "stop"), what
        if what == "good":
            assert _calls(_recipe_message(body, "Sure." + reply)) == want
        folded = _folded(stream_chunks(tc, body))
        if folded.finish_reason == "tool_calls":
            got = [(c.function.name, _strict_object(c.function.arguments)) for c in folded.message.tool_calls]
            assert got == want, what
        else:
            assert what != "good" and folded.finish_reason == "stop", what

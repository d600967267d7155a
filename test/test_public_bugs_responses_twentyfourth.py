"""Public bug reports of OpenAI-compatible servers' ``/v1/responses`` (gateways, SDKs and
servers in front of Responses models), replayed on an in-process app of the OpenAI router over a
fake engine (each test names its report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: the ``openai``
client's own types (which fields a Response, an output item and a stream event require) and its
stream helper, DeepSeek's own Responses converter and V4 encoder (``deepseek-recipe``), the
DeepSeek-V4 tokenizer as ``transformers`` loads it (token counts), and the non-streamed response
of the same request.
"""

from __future__ import annotations

import json
from typing import Any

import deepseek_recipe as recipe
import pytest
from deepseek_recipe_testutil import ids_in_written_order
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM
from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseReasoningItem,
)
from pydantic import BaseModel
from responses_testutil import WEATHER, make_client, post, sse, streamed_items
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

#: A reply with reasoning, a text answer and one ``get_weather`` call (thinking on).
THINK_CALL = "Need the weather.</think>Let me check." + CALL
#: The output item type of each ``type`` value (the ``openai`` client's models).
ITEM_MODELS: dict[str, type[BaseModel]] = {
    "message": ResponseOutputMessage,
    "function_call": ResponseFunctionToolCall,
    "reasoning": ResponseReasoningItem,
}


def _required(model: type[BaseModel]) -> set[str]:
    """The fields the ``openai`` client's ``model`` requires (no default): what a strict decoder
    of the same schema rejects a payload without."""
    return {name for name, f in model.model_fields.items() if f.is_required()}


def _recipe_prompt(body: dict[str, Any], thinking: bool) -> str:
    """DeepSeek's own prompt text of a Responses body (its ``deepseek-recipe`` Responses converter
    and V4 encoder)."""
    req = recipe.ResponsesRequest({**ids_in_written_order(body), "model": "DeepSeek-V4-Pro"})
    opts = recipe.ConversionOptions(default_thinking_mode=thinking)
    return recipe.DeepseekV4Encoding().render_conversation(req.convert(opts).conversation).prompt


def _prompt(tok: PreTrainedTokenizerFast, tm: PromptTM) -> str:
    """The text of the engine's latest prompt."""
    return tok.decode(tm.received[-1].input_ids)


def _stream(tc: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of ``body`` streamed (raw JSON, not validated)."""
    r = tc.post("/v1/responses", json={"model": MODEL, **body, "stream": True})
    assert r.status_code == 200, r.text
    return sse(r.text)


# --------------------------------------------------------------------------- stream event shape


def test_stream_events_carry_every_field_the_schema_requires(tok: PreTrainedTokenizerFast) -> None:
    """diegosouzapw/OmniRoute#13964: strict decoders of the Responses schema failed mid-stream on
    ``missing field output`` (``response.in_progress`` without ``output`` / ``background`` /
    ``error``), ``missing field status`` (items of ``output_item.added`` / ``.done``) and
    ``missing field sequence_number``. Oracle: the ``openai`` client's models, read for the
    fields they require. Expected: every event has a ``sequence_number`` (0, 1, 2, ...); the
    ``response`` of ``response.created`` / ``response.in_progress`` has every field ``Response``
    requires, ``output: []``, ``background: false``, ``error: null``; every added and done item
    (reasoning, message, function call) has every field its model requires and a ``status``,
    ``in_progress`` when added and ``completed`` when done."""
    tm = PromptTM(tok, reply=THINK_CALL)
    _, tc = make_client(tm)
    events = _stream(tc, {"input": "Weather in Paris?", "tools": [WEATHER], "reasoning": {"effort": "low"}})
    assert [e.get("sequence_number") for e in events] == list(range(len(events)))
    for ev in events[:2]:
        assert ev["type"] in ("response.created", "response.in_progress")
        resp = ev["response"]
        assert _required(Response) <= set(resp), _required(Response) - set(resp)
        assert resp["output"] == [] and resp["background"] is False and resp["error"] is None
        assert resp["status"] == "in_progress"
    kinds = []
    for ev in events:
        if ev["type"] not in ("response.output_item.added", "response.output_item.done"):
            continue
        item = ev["item"]
        model = ITEM_MODELS[item["type"]]
        assert _required(model) <= set(item), (item["type"], _required(model) - set(item))
        want = "in_progress" if ev["type"].endswith("added") else "completed"
        assert item.get("status") == want, (ev["type"], item)
        model.model_validate(item)
        kinds.append(item["type"])
    assert kinds == ["reasoning", "reasoning", "message", "message", "function_call", "function_call"]


def test_completed_at_is_set_on_the_finished_response_only(tok: PreTrainedTokenizerFast) -> None:
    """Azure/azure-sdk-for-js#37144: the ``response`` of a streamed ``response.completed`` had no
    ``completed_at`` (``created_at`` was set). Oracle: the ``openai`` client's ``Response``
    (``completed_at``: when the response finished, unix seconds). Expected: ``null`` on
    ``response.created`` and ``response.in_progress``; a number no earlier than ``created_at`` on
    ``response.completed``, on the non-streamed response and on the stored one ``GET`` returns."""
    tm = PromptTM(tok, reply="Hello.")
    client, tc = make_client(tm)
    body, events = post(tc, {"input": "hi"})
    for ev in events[:2]:
        assert ev["response"]["completed_at"] is None
    done = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    for resp in (done, body, client.responses.retrieve(done["id"]).model_dump()):
        assert isinstance(resp["completed_at"], (int, float)), resp
        assert resp["completed_at"] >= resp["created_at"] > 0


def test_completed_event_output_holds_every_streamed_item(tok: PreTrainedTokenizerFast) -> None:
    """jeremychone/rust-genai#236 (a ``response.completed`` without ``output``: the streamed
    tool call was lost) and BerriAI/litellm#32724 (``response.completed.output: []`` after items
    had streamed). Oracle: the ``openai`` client's own stream helper (``responses.stream``,
    which accumulates the response from the events) and the non-streamed response. Expected: the
    terminal ``response.output`` lists exactly the items of the ``output_item.done`` events, in
    order and equal; the client's accumulated final response has the same items (types, text,
    call name and arguments) as the non-streamed one."""
    tm = PromptTM(tok, reply=THINK_CALL)
    client, tc = make_client(tm)
    body = {"input": "Weather in Paris?", "tools": [WEATHER], "reasoning": {"effort": "low"}}
    plain, events = post(tc, body)
    done_items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert events[-1]["response"]["output"] == done_items
    assert [i["type"] for i in done_items] == ["reasoning", "message", "function_call"]
    with client.responses.stream(model=MODEL, **body) as s:
        final = s.get_final_response()

    def shape(items: list[Any]) -> list[tuple[Any, ...]]:
        out = []
        for i in items:
            i = i if isinstance(i, dict) else i.model_dump()
            if i["type"] == "function_call":
                out.append((i["type"], i["name"], json.loads(i["arguments"])))
            else:
                out.append((i["type"], [c.get("text") for c in i["content"] or []]))
        return out

    assert shape(final.output) == shape(plain["output"]) == shape(done_items)
    assert shape(done_items)[2] == ("function_call", "get_weather", ARGS)


def test_function_call_name_and_call_id_come_before_its_arguments(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-python#2723 and 64bit/async-openai#472: ``response.function_call_arguments.done``
    carries no ``name`` (OpenAI's own stream omits it), so a client that reads the call's name
    there could not tell which function to run. Oracle: OpenAI's stream contract, as the
    ``openai`` client's models read it: the name and ``call_id`` are on the ``function_call``
    item of ``response.output_item.added``. Expected: that item has the name and a ``call_id``
    before the first argument delta; every delta and the ``.done`` event name the item by its
    ``item_id``; the ``.done`` arguments equal the folded deltas and the done item's arguments;
    the ``call_id`` stays the same from added to done to the final response."""
    tm = PromptTM(tok, reply="Let me check." + CALL)
    _, tc = make_client(tm)
    events = _stream(tc, {"input": "Weather in Paris?", "tools": [WEATHER]})
    types = [e["type"] for e in events]
    added_at = next(
        k
        for k, e in enumerate(events)
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    )
    added = events[added_at]["item"]
    assert added["name"] == "get_weather" and added["call_id"] and added["arguments"] == ""
    assert types.index("response.function_call_arguments.delta") > added_at
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    (args_done,) = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert {e["item_id"] for e in deltas} == {args_done["item_id"]} == {added["id"]}
    assert "".join(e["delta"] for e in deltas) == args_done["arguments"]
    (done,) = [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
    ]
    assert done["arguments"] == args_done["arguments"] and json.loads(done["arguments"]) == ARGS
    final = [i for i in events[-1]["response"]["output"] if i["type"] == "function_call"]
    assert added["call_id"] == done["call_id"] == final[0]["call_id"]
    assert streamed_items(events)[-1]["arguments"] == args_done["arguments"]


# --------------------------------------------------------------------------- terminal event and usage


def test_truncated_stream_ends_with_response_incomplete(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#45386: a stream cut by ``max_output_tokens`` built an ``incomplete``
    response but ended it with ``response.completed``. Oracle: OpenAI's streaming reference, as
    the ``openai`` client's event types name it (``response.incomplete``), and the non-streamed
    response. Expected: the last event is ``response.incomplete``, no ``response.completed`` is
    sent, its response has ``status: incomplete`` and ``incomplete_details.reason:
    max_output_tokens`` as the non-streamed one does, and the text cut at the same place."""
    tm = PromptTM(tok, reply="One two three four five six seven eight nine ten.")
    _, tc = make_client(tm)
    plain, events = post(tc, {"input": "Count.", "max_output_tokens": 3})
    assert plain["status"] == "incomplete"
    assert plain["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-1]["type"] == "response.incomplete"
    assert "response.completed" not in [e["type"] for e in events]
    last = events[-1]["response"]
    assert last["status"] == plain["status"] and last["incomplete_details"] == plain["incomplete_details"]
    text = tok.decode(
        tok.encode("One two three four five six seven eight nine ten.", add_special_tokens=False)[:3]
    )
    assert streamed_items(events)[0]["text"] == plain["output"][0]["content"][0]["text"] == text


def test_completed_event_carries_the_usage_of_the_whole_response(tok: PreTrainedTokenizerFast) -> None:
    """router-for-me/CLIProxyAPI#2531 (``response.completed`` sent before the usage arrived, so
    its ``usage`` was missing) and jlcodes99/cockpit-tools#701 (no ``response.completed``, so no
    usage). Oracle: the DeepSeek-V4 tokenizer as ``transformers`` loads it (tokens of the
    reply), the prompt the engine received, and the non-streamed response. Expected: the stream
    ends with ``response.completed`` whose ``usage`` equals the non-streamed response's:
    ``input_tokens`` the prompt's length, ``output_tokens`` the reply's token count, their sum
    ``total_tokens``; no earlier event carries a usage."""
    reply = "Paris is sunny today."
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    plain, events = post(tc, {"input": "Weather in Paris?"})
    assert events[-1]["type"] == "response.completed"
    usage = events[-1]["response"]["usage"]
    assert usage == plain["usage"]
    assert usage["input_tokens"] == len(tm.received[-1].input_ids)
    assert usage["output_tokens"] == len(tok.encode(reply, add_special_tokens=False))
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert all(e["response"]["usage"] is None for e in events[:-1] if "response" in e)


# --------------------------------------------------------------------------- reasoning items replayed


WEATHER_TURN: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": json.dumps(ARGS)},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
]


def test_reasoning_content_is_replayed_before_its_summary(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#36516: a replayed ``reasoning`` item fed its ``summary`` back to the model
    even when it carried the reasoning itself in ``content`` (the summary is a digest for people,
    not the model's reasoning). Oracle: DeepSeek's own Responses converter and V4 encoder.
    Expected: in a tool loop with thinking on (the turn whose reasoning the V4 prompt keeps), the
    prompt is DeepSeek's: it holds the ``content`` text and not the summary's; a summary-only item
    replays as DeepSeek's converter replays it too."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _ = make_client(tm)
    both = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "SUMMARY-TEXT"}],
        "content": [{"type": "reasoning_text", "text": "CONTENT-TEXT"}],
    }
    summary_only = {k: v for k, v in both.items() if k != "content"}
    for item in (both, summary_only):
        body = {
            "input": [WEATHER_TURN[0], item, *WEATHER_TURN[1:]],
            "tools": [WEATHER],
            "reasoning": {"effort": "low"},
        }
        client.responses.create(model=MODEL, **body)
        assert _prompt(tok, tm) == _recipe_prompt(body, thinking=True)
    body["input"][1] = both
    client.responses.create(model=MODEL, **body)
    assert "CONTENT-TEXT" in _prompt(tok, tm) and "SUMMARY-TEXT" not in _prompt(tok, tm)


def test_reasoning_item_with_an_empty_summary_is_replayed(tok: PreTrainedTokenizerFast) -> None:
    """newo-ether/Agora#141 and AAswordman/Operit#809: follow-up turns failed once a reasoning
    item was replayed; the reasoning item's ``summary`` is required and ``[]`` is its value when
    there is no summary text. Oracle: the ``openai`` client's ``ResponseReasoningItem`` (reads
    the item the server returned) and DeepSeek's own converter and V4 encoder. Expected: the
    reasoning item of a real first turn, passed back as the client serialises it (``summary:
    []``, ``content``, ``status``) with the call and its output, is accepted, and the prompt is
    DeepSeek's for the same conversation."""
    tm = PromptTM(tok, reply=THINK_CALL)
    client, _ = make_client(tm)
    body = {"input": "Weather in Paris?", "tools": [WEATHER], "reasoning": {"effort": "low"}, "store": False}
    first = client.responses.create(model=MODEL, **body)
    rs = [o for o in first.output if o.type == "reasoning"]
    assert len(rs) == 1 and rs[0].summary == []
    replay = [o.model_dump(exclude_none=True) for o in first.output]
    assert replay[0]["summary"] == []
    call = next(o for o in first.output if o.type == "function_call")
    tm.reply = "</think>Sunny."  # the answer after an empty reasoning
    body2 = {
        **body,
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            *replay,
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ],
    }
    second = client.responses.create(model=MODEL, **body2)
    assert second.status == "completed" and second.output_text == "Sunny."
    assert "Need the weather." in _prompt(tok, tm)
    assert _prompt(tok, tm) == _recipe_prompt(body2, thinking=True)


def test_previous_response_id_tool_loop_keeps_the_turns_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """huggingface/responses.js#54 (Codex on DeepSeek V4 Flash: the tool loop failed on
    continuation until reasoning items were replayed before their function calls and each call
    paired with its result) and TanStack/ai#1212 (a ``function_call`` continued without its
    ``reasoning`` item). Oracle: DeepSeek's own converter and V4 encoder, and a cold run of the
    conversation sent whole (turn 1's output items as the ``openai`` client serialises them).
    Expected: the continuation by ``previous_response_id`` with only the ``function_call_output``
    renders DeepSeek's prompt of the whole tool loop, turn 1's reasoning text in it, the same
    prompt as the cold run; a first turn read from the stream continues the same way."""
    tm = PromptTM(tok)
    client, _ = make_client(tm)
    body = {"input": "Weather in Paris?", "tools": [WEATHER], "reasoning": {"effort": "low"}}
    for stream in (False, True):
        tm.reply = THINK_CALL
        if stream:
            with client.responses.stream(model=MODEL, **body) as s:
                first = s.get_final_response()
        else:
            first = client.responses.create(model=MODEL, **body)
        call = next(o for o in first.output if o.type == "function_call")
        result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        tm.reply = "Sunny."
        client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[result],
            tools=[WEATHER],
            reasoning={"effort": "low"},
        )
        continued = _prompt(tok, tm)
        whole = {
            **body,
            "input": [
                {"role": "user", "content": "Weather in Paris?"},
                *[o.model_dump(exclude_none=True) for o in first.output],
                result,
            ],
        }
        client.responses.create(model=MODEL, **whole, store=False)
        assert _prompt(tok, tm) == continued
        assert continued == _recipe_prompt(whole, thinking=True)
        assert "Need the weather." in continued


def test_stateless_encrypted_reasoning_is_replayed_inline(tok: PreTrainedTokenizerFast) -> None:
    """Significant-Gravitas/AutoGPT#13438: with ``store: false`` a reasoning item replayed by its
    id alone could not be found (nothing was stored); ``include: ["reasoning.encrypted_content"]``
    is how the item travels inline instead, as Codex replays it (``id``, ``summary: []``,
    ``encrypted_content``, no ``content``). Oracle: DeepSeek's own converter and V4 encoder, given
    the same conversation with the reasoning as its plain ``reasoning_text``. Expected: the first
    turn's reasoning item carries an ``encrypted_content`` string; replayed with only that blob
    (and the call and its output), the prompt is DeepSeek's with the reasoning text in it."""
    tm = PromptTM(tok, reply=THINK_CALL)
    client, _ = make_client(tm)
    body = {
        "tools": [WEATHER],
        "reasoning": {"effort": "low"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    first = client.responses.create(model=MODEL, input="Weather in Paris?", **body)
    rs = next(o for o in first.output if o.type == "reasoning")
    assert isinstance(rs.encrypted_content, str) and rs.encrypted_content
    call = next(o for o in first.output if o.type == "function_call")
    msg = next(o for o in first.output if o.type == "message")
    tail = [
        msg.model_dump(exclude_none=True),
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]
    user = {"role": "user", "content": "Weather in Paris?"}
    blob_only = {"type": "reasoning", "id": rs.id, "summary": [], "encrypted_content": rs.encrypted_content}
    tm.reply = "Sunny."
    client.responses.create(model=MODEL, input=[user, blob_only, *tail], **body)
    plain = {
        "type": "reasoning",
        "id": rs.id,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Need the weather."}],
    }
    oracle = {"tools": [WEATHER], "reasoning": {"effort": "low"}, "input": [user, plain, *tail]}
    assert _prompt(tok, tm) == _recipe_prompt(oracle, thinking=True)
    assert "Need the weather." in _prompt(tok, tm)


# --------------------------------------------------------------------------- instructions and system items


def test_instructions_reach_the_prompt(tok: PreTrainedTokenizerFast) -> None:
    """Layr-Labs/d-inference#731: the top-level ``instructions`` were accepted and never reached
    the model (system items inside ``input`` were honoured). Oracle: DeepSeek's own converter and
    V4 encoder. Expected: the prompt of ``instructions`` plus a user message (content parts, as
    the report sends them) is DeepSeek's, the instructions in it as the system prompt, and the
    response echoes ``instructions``; the same text sent as a ``system`` item renders the same
    prompt."""
    tm = PromptTM(tok, reply="XYZZY, bonjour.")
    client, _ = make_client(tm)
    text = "Begin every reply with the word XYZZY and answer only in French."
    user = {"role": "user", "content": [{"type": "input_text", "text": "hi! what can you help me with?"}]}
    body = {"instructions": text, "input": [user], "store": False}
    out = client.responses.create(model=MODEL, **body)
    assert out.instructions == text
    prompt = _prompt(tok, tm)
    assert prompt == _recipe_prompt(body, thinking=False)
    assert text in prompt and prompt.index(text) < prompt.index("hi! what can you help me with?")
    client.responses.create(model=MODEL, input=[{"role": "system", "content": text}, user], store=False)
    assert _prompt(tok, tm) == prompt


def test_system_items_in_input_are_accepted_beside_instructions(tok: PreTrainedTokenizerFast) -> None:
    """CaddyGlow/ccproxy-api#53: clients (langchain-openai's Responses mode) send their system
    prompt as a ``system`` message inside ``input``, which a backend refused with a 400
    ("System messages are not allowed"). Oracle: DeepSeek's own converter and V4 encoder.
    Expected: a ``system`` item, alone or after top-level ``instructions``, is accepted and the
    prompt is DeepSeek's: the instructions first, then the system item's text, as one system
    prompt before the user turn."""
    tm = PromptTM(tok, reply="Arr.")
    client, _ = make_client(tm)
    system = {"role": "system", "content": "You are a pirate."}
    user = {"role": "user", "content": "Describe your job."}
    for body in ({"input": [system, user]}, {"instructions": "Be brief.", "input": [system, user]}):
        assert client.responses.create(model=MODEL, **body).status == "completed"
        assert _prompt(tok, tm) == _recipe_prompt(body, thinking=False)
    assert _prompt(tok, tm).index("Be brief.") < _prompt(tok, tm).index("You are a pirate.")


def test_stream_events_carry_their_output_and_content_index(tok: PreTrainedTokenizerFast) -> None:
    """lemonade-sdk/lemonade#3607: streamed events lacked ``output_index`` (item events) and
    ``content_index`` (part and text events), so clients could not place deltas in their item
    and part. Oracle: the ``openai`` client's event models (which require both) and the final
    response. Expected: every item event has the ``output_index`` of its item in the final
    ``output`` (same ``id``); every part / text / reasoning-text event also has ``content_index``
    0 (one part per item here) and names its item by ``item_id``; indices never go back."""
    tm = PromptTM(tok, reply=THINK_CALL)
    _, tc = make_client(tm)
    events = _stream(tc, {"input": "Weather in Paris?", "tools": [WEATHER], "reasoning": {"effort": "low"}})
    ids = [i["id"] for i in events[-1]["response"]["output"]]
    seen = []
    for ev in events:
        t = ev["type"]
        if t in ("response.created", "response.in_progress", "response.completed"):
            continue
        assert isinstance(ev.get("output_index"), int), ev
        item_id = ev["item"]["id"] if t.startswith("response.output_item.") else ev["item_id"]
        assert ids[ev["output_index"]] == item_id, ev
        if t.startswith(("response.content_part.", "response.output_text.", "response.reasoning_text.")):
            assert ev.get("content_index") == 0, ev
        seen.append(ev["output_index"])
    assert seen == sorted(seen) and set(seen) == {0, 1, 2}

"""Public bug reports of OpenAI-compatible servers' ``/v1/responses`` and ``/v1/chat/completions``
(OpenAI's own API as agent SDKs meet it, gateways, Ollama, vLLM, SGLang), replayed on an
in-process app of the OpenAI router over a fake engine (each test names its report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: OpenAI's own
error bodies as the reports quote them, the ``openai`` client's types and documentation,
SGLang's DeepSeek-V4 chat path (``pre_normalize`` of the installed ``sglang``) with DeepSeek's
converter and V4 encoder (``deepseek-recipe``), and a cold run of the same conversation.
"""

from __future__ import annotations

import typing
from typing import Any

import deepseek_recipe as recipe
import openai
import pytest
from deepseek_recipe_testutil import ids_in_written_order
from fake_prompt_tm import CALL, MODEL, PromptTM
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response as OpenAIResponse
from responses_testutil import WEATHER, make_client, post
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)


def _prompt(tok: PreTrainedTokenizerFast, tm: PromptTM) -> str:
    """The text of the engine's latest prompt."""
    return tok.decode(tm.received[-1].input_ids)


def _sglang_prompt(messages: list[dict[str, Any]], thinking: bool) -> str:
    """SGLang's DeepSeek-V4 prompt of chat ``messages`` (no tools): its ``pre_normalize``, then
    DeepSeek's Chat Completions converter and V4 encoder."""
    renderer = pytest.importorskip("sglang.srt.parser.deepseek_recipe_renderer")
    wire: dict[str, Any] = {**ids_in_written_order({"messages": messages}), "thinking": thinking}
    if thinking:  # the lowest effort: no effort paragraph, as a request that names none
        wire["reasoning_effort"] = "low"
    req = {**renderer.pre_normalize(wire), "model": "DeepSeek-V4-Pro"}
    conv = recipe.ChatCompletionRequest(req).convert(recipe.ConversionOptions(default_thinking_mode=thinking))
    return recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt


def _error(r: Any) -> dict[str, Any]:
    """The ``error`` object of an error answer (OpenAI's shape)."""
    body = r.json()
    assert set(body) >= {"error"}, body
    return body["error"]


# --------------------------------------------------------------------------- developer items


@pytest.mark.parametrize("thinking", [False, True])
def test_developer_item_is_an_instruction_not_user_text(tok: PreTrainedTokenizerFast, thinking: bool) -> None:
    """decolua/9router#2432: a ``developer`` message (OpenAI's instruction role, what Codex-style
    clients send) lost its instruction standing on the way to the model. Here a Responses
    ``developer`` item was joined to the user's turn as user text. Expected: a system instruction,
    as SGLang's Responses route makes it (developer -> system) and as this server's chat route
    reads a chat ``developer`` message: the prompt is SGLang's DeepSeek-V4 prompt of the same
    conversation with the item as a ``developer`` chat message (``pre_normalize`` + DeepSeek's
    converter and encoder), thinking or not, first in the input or between turns; the item's text
    is not inside a user turn."""
    tm = PromptTM(tok, reply="Bonjour.")
    _, tc = make_client(tm)
    cases = [
        [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hi"}],
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "Say BANANA."}],
            },
            {"role": "user", "content": "What now?"},
        ],
    ]
    for items in cases:
        body: dict[str, Any] = {"input": items, "instructions": "Be brief.", "max_output_tokens": 8}
        if thinking:
            body["chat_template_kwargs"] = {"thinking": True}
        r = tc.post("/v1/responses", json={"model": MODEL, **body})
        assert r.status_code == 200, r.text
        got = _prompt(tok, tm)
        chat = [{"role": "system", "content": "Be brief."}] + [
            {
                "role": m["role"],
                "content": m["content"] if isinstance(m["content"], str) else m["content"][0]["text"],
            }
            for m in items
        ]
        assert got == _sglang_prompt(chat, thinking)
        dev = next(m for m in chat if m["role"] == "developer")["content"]
        assert dev in got and f"<｜User｜>{dev}" not in got


# --------------------------------------------------------------------------- unanswered calls


def test_previous_response_call_without_output_is_openais_400(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-agents-python#1061 (and #673): a run continued with ``previous_response_id``
    after a response that ended in a ``function_call``, without sending that call's
    ``function_call_output``, is refused by OpenAI: ``400 {'message': 'No tool output found for
    function call call_....', 'type': 'invalid_request_error', 'param': 'input'}``. Here it was
    accepted and run as if the call had finished. Expected: OpenAI's error (message and param;
    the ``openai`` client's ``BadRequestError``), streamed or not, the engine never asked;
    with the output sent, the same continuation runs."""
    tm = PromptTM(tok, reply=CALL)
    client, tc = make_client(tm)
    first = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER])
    call = first.output[-1]
    assert call.type == "function_call" and first.status == "completed"
    sent = len(tm.received)
    for stream in (False, True):
        r = tc.post(
            "/v1/responses",
            json={"model": MODEL, "previous_response_id": first.id, "input": "Thanks!", "stream": stream},
        )
        assert r.status_code == 400, r.text
        err = _error(r)
        assert err["message"] == f"No tool output found for function call {call.call_id}."
        assert err["param"] == "input" and err["code"] == 400  # (``type``: SGLang's name of a 400)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(
            model=MODEL, previous_response_id=first.id, input=[{"role": "user", "content": "x"}]
        )
    assert len(tm.received) == sent
    tm.reply = "Sunny."
    out = {"type": "function_call_output", "call_id": call.call_id, "output": "18C"}
    ok = client.responses.create(model=MODEL, previous_response_id=first.id, input=[out])
    assert ok.output_text == "Sunny." and len(tm.received) == sent + 1


def test_interrupted_call_in_a_stateless_input_is_openais_400(tok: PreTrainedTokenizerFast) -> None:
    """livekit/agents#5092: a user interrupting during a tool call left a ``function_call`` item in
    the replayed input with a user message after it and no ``function_call_output``; OpenAI
    answers ``400 No tool output found for function call <call_id>.``, and DeepSeek's own
    Responses converter (``deepseek-recipe``) refuses such an input too. Expected: the same 400
    (``param: "input"``) for a call left unanswered anywhere in the input (last item, or followed
    by a user message; a ``custom_tool_call`` says so), and one answered call of two does not
    cover the other; every call answered, the request runs. A call cut by ``max_output_tokens``
    (``status: "incomplete"``) was never a call to run and needs no output."""
    tm = PromptTM(tok, reply="OK.")
    client, tc = make_client(tm)
    user = {"role": "user", "content": "Weather in Paris and Rome?"}

    def fc(cid: str, city: str, **kw: Any) -> dict[str, Any]:
        return {
            "type": "function_call",
            "call_id": cid,
            "name": "get_weather",
            "arguments": f'{{"city": "{city}"}}',
            **kw,
        }

    def out(cid: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": cid, "output": "18C"}

    custom = {"name": "shell", "type": "custom", "description": "Run a command"}
    bad = {
        "call_a": ([user, fc("call_a", "Paris")], [WEATHER]),
        "call_b": (
            [user, fc("call_b", "Paris"), {"role": "user", "content": "Stop, never mind."}],
            [WEATHER],
        ),
        "call_d": ([user, fc("call_c", "Paris"), fc("call_d", "Rome"), out("call_c")], [WEATHER]),
    }
    sent = len(tm.received)
    for cid, (items, tools) in bad.items():
        with pytest.raises(recipe.ConversionError):  # DeepSeek's own converter refuses it too
            recipe.ResponsesRequest({"model": "DeepSeek-V4-Pro", "input": items, "tools": tools}).convert(
                recipe.ConversionOptions(default_thinking_mode=False)
            )
        r = tc.post("/v1/responses", json={"model": MODEL, "input": items, "tools": tools})
        assert r.status_code == 400, r.text
        assert _error(r)["message"] == f"No tool output found for function call {cid}."
        assert _error(r)["param"] == "input"
    r = tc.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "tools": [custom],
            "input": [
                user,
                {"type": "custom_tool_call", "call_id": "call_x", "name": "shell", "input": "ls"},
            ],
        },
    )
    assert (
        r.status_code == 400 and _error(r)["message"] == "No tool output found for custom tool call call_x."
    )
    assert len(tm.received) == sent
    good = [user, fc("call_c", "Paris"), fc("call_d", "Rome"), out("call_d"), out("call_c")]
    assert client.responses.create(model=MODEL, input=good, tools=[WEATHER]).output_text == "OK."
    cut = [user, fc("call_e", "Par", status="incomplete"), {"role": "user", "content": "Go on."}]
    cut[1]["arguments"] = '{"city": "Par'
    assert client.responses.create(model=MODEL, input=cut, tools=[WEATHER]).status == "completed"


def test_output_for_a_call_previous_response_id_points_past_is_openais_400(
    tok: PreTrainedTokenizerFast,
) -> None:
    """openai/openai-agents-js#1435: after two tool rounds chained by ``previous_response_id``, the
    client sent the first round's ``function_call_output`` again; OpenAI answers ``400 No tool call
    found for function call output with call_id <id>.`` (the call is not the latest turn's).
    Expected: that message (then this server's own words, naming ``input[0].call_id``), and
    nothing run."""
    tm = PromptTM(tok, reply=CALL)
    client, tc = make_client(tm)
    r1 = client.responses.create(model=MODEL, input="Weather?", tools=[WEATHER])
    c1 = r1.output[-1].call_id
    r2 = client.responses.create(
        model=MODEL,
        previous_response_id=r1.id,
        input=[{"type": "function_call_output", "call_id": c1, "output": "18C"}],
        tools=[WEATHER],
    )
    c2 = r2.output[-1].call_id
    assert c2 != c1
    sent = len(tm.received)
    again = [
        {"type": "function_call_output", "call_id": c1, "output": "18C"},
        {"type": "function_call_output", "call_id": c2, "output": "19C"},
    ]
    r = tc.post("/v1/responses", json={"model": MODEL, "previous_response_id": r2.id, "input": again})
    assert r.status_code == 400
    err = _error(r)
    assert err["message"].startswith(f"No tool call found for function call output with call_id {c1}.")
    assert err["param"] == "input[0].call_id" and len(tm.received) == sent


# --------------------------------------------------------------------------- service_tier

#: the tiers the ``openai`` client's types list for each route's request field
RESPONSES_TIERS = typing.get_args(OpenAIResponse.model_fields["service_tier"].annotation)[0]
CHAT_TIERS = typing.get_args(ChatCompletion.model_fields["service_tier"].annotation)[0]


def test_responses_service_tier_names_the_tier_that_served(tok: PreTrainedTokenizerFast) -> None:
    """theopenco/llmgateway#2991 (and BerriAI/litellm#13257): ``service_tier`` on ``/v1/responses``
    was dropped unread and the response always said ``default``, whatever tier was asked, and no
    tier was checked. OpenAI's reference (the ``openai`` client's ``ResponseCreateParams``): "the
    response body will include the ``service_tier`` value based on the processing mode actually
    used to serve the request", which may differ from the one asked. This server has one mode,
    ``default``. Expected: each tier the client's type lists is accepted and the response (the
    stream's too, and the stored copy) names ``default``, the tier used, not the one asked; a
    value outside the list is a 400 naming ``service_tier``, as OpenAI, SGLang and vLLM answer an
    invalid enum value."""
    tm = PromptTM(tok, reply="Hi.")
    client, tc = make_client(tm)
    tiers = typing.get_args(RESPONSES_TIERS)
    assert {"auto", "default", "flex", "priority"} <= set(tiers)
    for tier in tiers:
        body, events = post(tc, {"input": "hi", "service_tier": tier})
        for got in (body, events[-1]["response"], tc.get(f"/v1/responses/{body['id']}").json()):
            assert OpenAIResponse.model_validate(got).service_tier == "default", tier
    for bad in ("turbo", "PRIORITY", 3, ["flex"]):
        r = tc.post("/v1/responses", json={"model": MODEL, "input": "hi", "service_tier": bad})
        assert r.status_code == 400, (bad, r.text)
        assert _error(r)["param"] == "service_tier"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="hi", extra_body={"service_tier": "warp"})


def test_chat_service_tier_is_named_when_asked_and_checked(tok: PreTrainedTokenizerFast) -> None:
    """theopenco/llmgateway#2991's chat side: a ``service_tier`` sent to ``/v1/chat/completions``
    was ignored unread, so a typo was accepted and the answer never said which tier served it.
    OpenAI's reference (the ``openai`` client's ``CompletionCreateParams``): when the field is
    set, the response includes the tier actually used. Expected: each tier the client's type
    lists is served and the completion (and every stream chunk, read by the client's
    ``ChatCompletionChunk``) names ``default``; without the field the answer keeps its usual
    shape (no ``service_tier`` key); another value is a 400 naming ``service_tier``."""
    tm = PromptTM(tok, reply="Hi.")
    client, tc = make_client(tm)
    msgs = [{"role": "user", "content": "hi"}]
    for tier in typing.get_args(CHAT_TIERS):
        c = client.chat.completions.create(model=MODEL, messages=msgs, service_tier=tier)
        assert c.service_tier == "default" and c.choices[0].message.content == "Hi."
        s = tc.post(
            "/v1/chat/completions",
            json={
                "model": MODEL,
                "messages": msgs,
                "service_tier": tier,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        chunks = [
            ChatCompletionChunk.model_validate_json(line[6:])
            for line in s.text.split("\n")
            if line.startswith("data: {")
        ]
        assert chunks and all(ch.service_tier == "default" for ch in chunks)
    plain = tc.post("/v1/chat/completions", json={"model": MODEL, "messages": msgs}).json()
    assert "service_tier" not in plain
    r = tc.post("/v1/chat/completions", json={"model": MODEL, "messages": msgs, "service_tier": "ultra"})
    assert r.status_code == 400 and _error(r)["param"] == "service_tier"


# --------------------------------------------------------------------------- replayed content parts


def _recipe_prompt(body: dict[str, Any]) -> str:
    """DeepSeek's own prompt text of a Responses body (its ``deepseek-recipe`` Responses converter
    and V4 encoder, thinking off)."""
    req = recipe.ResponsesRequest({**ids_in_written_order(body), "model": "DeepSeek-V4-Pro"})
    return (
        recipe.DeepseekV4Encoding()
        .render_conversation(req.convert(recipe.ConversionOptions(default_thinking_mode=False)).conversation)
        .prompt
    )


def test_list_form_function_call_output_renders_as_deepseek_renders_it(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#54786 (and ogx-ai/ogx#4978): a ``function_call_output`` whose ``output``
    is a list of ``input_text`` parts (OpenAI's ``ResponseFunctionCallOutputItemListParam``, what
    MCP tool adapters send) was a 400 or lost its text. Expected: accepted, and the prompt is the
    one DeepSeek's own Responses converter and V4 encoder render for the same body; the string
    form of the same text renders DeepSeek's prompt of that form too."""
    tm = PromptTM(tok, reply="Sunny.")
    _, tc = make_client(tm)
    call = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    for output in (
        [{"type": "input_text", "text": "18C"}, {"type": "input_text", "text": "light wind"}],
        "18C, light wind",
    ):
        items = [
            {"role": "user", "content": "Weather in Paris?"},
            call,
            {"type": "function_call_output", "call_id": "call_1", "output": output},
        ]
        r = tc.post("/v1/responses", json={"model": MODEL, "input": items, "tools": [WEATHER]})
        assert r.status_code == 200, r.text
        assert _prompt(tok, tm) == _recipe_prompt({"input": items, "tools": [WEATHER]})


def test_replayed_refusal_part_keeps_its_text(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#55479: an assistant ``message`` item replayed with a ``refusal`` content
    part (``{"type": "refusal", "refusal": ...}``, OpenAI's ``ResponseOutputRefusal``) became an
    empty turn, as the part's text was read from a ``text`` key it does not have. Expected: the
    refusal's text is the assistant turn's text: the prompt is the one DeepSeek's own Responses
    converter and V4 encoder render for the same turn as an ``output_text`` part (their converter
    has no refusal part)."""
    tm = PromptTM(tok, reply="OK.")
    _, tc = make_client(tm)
    said = "I can't help with that."

    def body(part: dict[str, Any]) -> dict[str, Any]:
        return {
            "input": [
                {"role": "user", "content": "Do the bad thing."},
                {"type": "message", "role": "assistant", "content": [part]},
                {"role": "user", "content": "Then something else."},
            ]
        }

    want = _recipe_prompt(body({"type": "output_text", "text": said}))
    assert said in want
    for part in ({"type": "refusal", "refusal": said}, {"type": "output_text", "text": said}):
        r = tc.post("/v1/responses", json={"model": MODEL, **body(part)})
        assert r.status_code == 200, r.text
        assert _prompt(tok, tm) == want, part

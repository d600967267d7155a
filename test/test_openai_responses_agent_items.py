"""``/v1/responses`` input items an agent loop sends back: items repeated under
``previous_response_id`` and reasoning-only turns, on an in-process app of the OpenAI router over
``fake_prompt_tm.PromptTM``.

Oracles: OpenAI's documented answer to a repeated item (HTTP 400, ``param: "input"``, "Duplicate
item found with id ...", as quoted in MacPaw/OpenAI#432 and openai/openai-agents-python#1789),
read through the ``openai`` client's own error parser; a cold run of the same conversation sent
whole with ``store: false``; DeepSeek's own Responses converter (``deepseek_recipe``).
"""

from __future__ import annotations

from typing import Any

import deepseek_recipe as recipe
import openai
import pytest
from deepseek_recipe_testutil import ids_in_written_order
from fake_prompt_tm import CALL, MODEL, PromptTM
from responses_testutil import WEATHER, make_client
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

USER = {"role": "user", "content": "what's the weather in Paris?"}


def _prompt(tm: PromptTM) -> str:
    return tm.tokenizer.decode(tm.received[-1].input_ids)


def _recipe_prompt(items: list[dict[str, Any]]) -> str:
    """DeepSeek's own prompt text of a Responses ``input``, thinking disabled."""
    b = {
        "model": "DeepSeek-V4-Pro",
        "input": ids_in_written_order({"input": items})["input"],
        "reasoning": {"effort": "none"},
    }
    req = recipe.ResponsesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


# --------------------------------------------------------------------------- duplicate items


def _first_turn(tok: PreTrainedTokenizerFast) -> tuple[PromptTM, openai.OpenAI, Any, Any]:
    tm = PromptTM(tok, reply="Checking." + CALL)
    client, _ = make_client(tm)
    first = client.responses.create(model=MODEL, input=[USER], tools=[WEATHER])
    call = next(o for o in first.output if o.type == "function_call")
    tm.reply = "Sunny in Paris."
    return tm, client, first, call


@pytest.mark.parametrize("stream", [False, True])
def test_resent_function_call_under_previous_response_id_is_a_400(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """MacPaw/OpenAI#432: a client resends the ``function_call`` item (its ``id`` that of the
    stored response's output item) with its ``function_call_output`` and
    ``previous_response_id``. OpenAI answers 400, ``param: "input"``, "Duplicate item found with
    id fc_..."; the call was taken twice into the prompt. Nothing is generated or stored."""
    tm, client, first, call = _first_turn(tok)
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    n = len(tm.received)
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(
            model=MODEL,
            input=[call.model_dump(mode="json", exclude_none=True), output],
            previous_response_id=first.id,
            tools=[WEATHER],
            stream=stream,
        )
    assert ei.value.status_code == 400 and ei.value.body["param"] == "input"
    assert ei.value.body["message"].startswith(f"Duplicate item found with id {call.id}.")
    assert len(tm.received) == n
    # without the repeated item: the prompt of the whole conversation sent cold
    second = client.responses.create(
        model=MODEL, input=[output], previous_response_id=first.id, tools=[WEATHER]
    )
    assert second.output_text == "Sunny in Paris."
    continued = _prompt(tm)
    whole = [USER] + [o.model_dump(mode="json", exclude_none=True) for o in first.output] + [output]
    client.responses.create(model=MODEL, input=whole, tools=[WEATHER], store=False)
    assert continued == _prompt(tm)


def test_resent_message_items_deep_in_the_chain_and_within_input(tok: PreTrainedTokenizerFast) -> None:
    """A message item whose ``id`` is that of an input item two responses back (the chain's
    stored items keep the client's ids), the assistant message of the previous output, and an id
    used twice in one ``input`` are each a 400 naming ``input``; the same items without ``id``
    are no duplicates (200), and so is the same id sent again with ``store: false`` and no
    ``previous_response_id`` (a new context)."""
    tm = PromptTM(tok, reply="Fine.")
    client, tc = make_client(tm)
    mine = {"type": "message", "role": "user", "content": "hello", "id": "msg_client_1"}
    r1 = client.responses.create(model=MODEL, input=[mine])
    r2 = client.responses.create(model=MODEL, input="more", previous_response_id=r1.id)
    answer = r2.output[-1].model_dump(mode="json", exclude_none=True)
    again = {"type": "message", "role": "user", "content": "again", "id": "msg_client_2"}
    for items, dup in (([mine], "msg_client_1"), ([answer], answer["id"]), ([again, again], "msg_client_2")):
        r = tc.post("/v1/responses", json={"model": MODEL, "input": items, "previous_response_id": r2.id})
        assert r.status_code == 400, items
        err = r.json()["error"]
        assert err["param"] == "input" and f"Duplicate item found with id {dup}." in err["message"]
        r = tc.post(
            "/v1/responses/input_tokens", json={"model": MODEL, "input": items, "previous_response_id": r2.id}
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "input"
    no_ids = [{k: v for k, v in i.items() if k != "id"} for i in (mine, answer, again, again)]
    r = tc.post("/v1/responses", json={"model": MODEL, "input": no_ids, "previous_response_id": r2.id})
    assert r.status_code == 200, r.text
    r = tc.post("/v1/responses", json={"model": MODEL, "input": [mine], "store": False})
    assert r.status_code == 200, r.text


# --------------------------------------------------------------------------- reasoning-only turns


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _reasoning(text: str, where: str = "content") -> dict[str, Any]:
    kind = "reasoning_text" if where == "content" else "summary_text"
    other = "summary" if where == "content" else "content"
    return {"type": "reasoning", "id": f"rs_{text}", where: [{"type": kind, "text": text}], other: []}


ANSWER = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ans"}]}


@pytest.mark.parametrize(
    "items",
    [
        [_user("hi"), _reasoning("think"), _user("again")],
        [_user("hi"), _reasoning("think", "summary"), _user("again")],
        [_user("hi"), _reasoning("think", "summary")],
        [_user("hi"), _reasoning("a"), _reasoning("b"), _user("again")],
        [_user("hi"), _reasoning("a"), _reasoning("b", "summary"), ANSWER, _user("again")],
        [_user("hi"), _reasoning("a", "summary"), _reasoning("b"), ANSWER, _user("again")],
    ],
    ids=[
        "text-then-user",
        "summary-then-user",
        "summary-last",
        "two-then-user",
        "two-then-answer",
        "summary-then-text",
    ],
)
def test_reasoning_only_turns_render_as_deepseeks_converter(
    tok: PreTrainedTokenizerFast, items: list[dict[str, Any]]
) -> None:
    """A reasoning item with text followed directly by a user message: DeepSeek's converter keeps
    one empty assistant turn for reasoning text (``reasoning_text`` content), however many
    reasoning items in a row, and none for a summary (it does not replay summaries). We rendered
    one empty turn per item, and one for a summary too (an extra ``<｜end▁of▁sentence｜>``)."""
    tm = PromptTM(tok, reply="Done.")
    _, tc = make_client(tm)
    body = {"model": MODEL, "input": items, "reasoning": {"effort": "none"}, "max_output_tokens": 8}
    r = tc.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    assert _prompt(tm) == _recipe_prompt(items)


# --------------------------------------------------------------------------- built-in tools


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "web_search"},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
    ],
)
def test_builtin_tool_is_a_400_naming_the_field_and_the_served_types(
    tok: PreTrainedTokenizerFast, tool: dict[str, Any]
) -> None:
    """OpenAI's built-in tools are not served: the 400 (read by the ``openai`` client) names
    ``tools[i].type``, says the type is not supported and lists the served types (function and
    custom: custom tools are served, test_openai_responses_custom_tools.py); nothing is
    generated."""
    tm = PromptTM(tok, reply="Done.")
    client, _ = make_client(tm)
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(model=MODEL, input="hi", tools=[WEATHER, tool])
    assert ei.value.body["param"] == "tools[1].type"
    msg = ei.value.body["message"]
    assert f"{tool['type']!r} is not supported" in msg and "supported tool types: function, custom" in msg
    assert tm.received == []

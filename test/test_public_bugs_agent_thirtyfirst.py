"""Public reports of agent loops replaying their history to an OpenAI- or Anthropic-shaped server
(round 31): an assistant tool-call turn echoed with ``content`` absent, ``null`` or ``""``, or with
prose and calls together; explicit ``null`` for ``tool_calls`` / ``tools`` / ``tool_choice`` /
``parallel_tool_calls`` in a resumed session; a follow-up user turn after a finished tool chain;
a pure tool-call answer's ``content`` left ``null`` (non-streamed); streamed parallel calls each opening with its
own id; Anthropic ``tool_result`` blocks paired by ``tool_use_id``. Each history is replayed on an
in-process app over a fake tokenizer manager that records the prompt ids it is given.

Oracles: DeepSeek's own request converters and V4 encoder (the ``deepseek-recipe`` package) for
the prompt a history must render; the ``openai`` / ``anthropic`` clients' own parsers (and the
``openai`` stream accumulator) for what a turn returns; ``json.loads`` for call arguments.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from anthropic_testutil import WEATHER as MESSAGES_WEATHER  # noqa: E402
from anthropic_testutil import make_clients  # noqa: E402
from chat_tools_testutil import fold_chat_stream, sse_chunks  # noqa: E402
from deepseek_recipe_testutil import recipe_messages_prompt, recipe_prompt  # noqa: E402
from fake_prompt_tm import CALL, MODEL, PromptTM  # noqa: E402
from responses_testutil import CHAT_WEATHER, make_client  # noqa: E402

pytestmark = pytest.mark.timeout(120)

D = "｜DSML｜"
EOS = "<｜end▁of▁sentence｜>"
USER = {"role": "user", "content": "Weather in Paris?"}
CALL_MSG = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'},
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "Paris: sunny"}


def _served(tok: Any, body: dict[str, Any], reply: str = "Sunny.") -> tuple[int, str, str]:
    """POST ``body`` to ``/v1/chat/completions``; the status, the prompt text served, the reply."""
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    r = tc.post("/v1/chat/completions", json={"model": MODEL, **body})
    prompt = tok.decode(tm.received[0].input_ids) if tm.received else ""
    return r.status_code, prompt, r.text


@pytest.mark.parametrize("content", ["absent", "null", "empty"])
def test_agents_sdk_2238_tool_call_turn_content_absent_null_or_empty(tok: Any, content: str) -> None:
    """openai/openai-agents-python#2237 (fixed by #2238): assistant tool-call turns were sent
    back without a ``content`` key; graniet/llm#134, odysseus-dev/odysseus#837 and
    SAIL-Research-Lab/cheetahclaws#72: servers refused ``content`` missing, ``""`` or ``null`` on
    such a turn with a 400, killing every tool loop at its second request. The OpenAI spec makes
    ``content`` optional when ``tool_calls`` is present. Expected: 200 for all three echoes and the
    prompt DeepSeek's encoder renders for the same history (the call kept, no empty text)."""
    assistant: dict[str, Any] = {"role": "assistant", "tool_calls": [CALL_MSG]}
    if content != "absent":
        assistant["content"] = None if content == "null" else ""
    body = {"messages": [USER, assistant, RESULT], "tools": [CHAT_WEATHER]}
    status, prompt, text = _served(tok, body)
    assert status == 200, text
    assert prompt == recipe_prompt(body, False)
    assert f'<{D}invoke name="get_weather">' in prompt


def test_freellmapi_232_resumed_session_with_explicit_nulls(tok: Any) -> None:
    """tashfeenahmed/freellmapi#232: a resumed agent session replayed every assistant echo with an
    explicit ``"tool_calls": null`` (and top-level ``tools`` / ``tool_choice`` /
    ``parallel_tool_calls`` as ``null``) and the server answered 400 ``messages.2: Invalid
    input``. The OpenAI schema makes these fields nullable; ``null`` means absent. Expected: 200
    and the same prompt as the history with those fields left out (DeepSeek's encoder's prompt)."""
    history = [
        {"role": "user", "content": "ciao"},
        {"role": "assistant", "content": "Ciao! Come posso aiutarti?", "tool_calls": None},
        {"role": "user", "content": "Che modello sei?"},
    ]
    body = {"messages": history, "tools": None, "tool_choice": None, "parallel_tool_calls": None}
    status, prompt, text = _served(tok, body)
    assert status == 200, text
    clean = {"messages": [{k: v for k, v in m.items() if v is not None} for m in history]}
    assert prompt == recipe_prompt(clean, False)


def test_agent_framework_694_prose_and_calls_in_one_turn_stay_one_turn(tok: Any) -> None:
    """microsoft/agent-framework#694: an assistant answer with both prose and tool calls was
    replayed as two assistant messages (calls first, then the prose as a JSON string of text
    parts) and the model API answered 400. Expected here: the turn as generated (prose, then the
    DSML call) comes back from the ``openai`` client as one message with ``content`` and one call;
    replaying it unchanged with the result is 200, renders as DeepSeek's encoder renders it, and
    starts with turn 1's prompt, the generated text and the end-of-turn token (no JSON of parts)."""
    prose = "I will check the weather."
    tm = PromptTM(tok, reply=prose + CALL)
    client, _ = make_client(tm)
    first = client.chat.completions.create(model=MODEL, messages=[USER], tools=[CHAT_WEATHER])
    msg = first.choices[0].message
    assert msg.content == prose
    assert [json.loads(c.function.arguments) for c in msg.tool_calls] == [{"city": "Paris", "days": 3}]
    result = {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "Paris: sunny"}
    body = {"messages": [USER, msg.model_dump(exclude_none=True), result], "tools": [CHAT_WEATHER]}
    tm.reply = "Sunny."
    client.chat.completions.create(model=MODEL, **body)
    before, now = tok.decode(tm.received[0].input_ids), tok.decode(tm.received[1].input_ids)
    assert now == recipe_prompt(body, False)
    assert now.startswith(before + prose + CALL + EOS)
    assert '"type": "text"' not in now


def test_jan_8503_follow_up_user_turn_after_a_tool_chain(tok: Any) -> None:
    """janhq/jan#8503: after an agent run that used tools, every follow-up message failed with
    ``Each message must include 'content' as a string or array``: the replayed history held an
    assistant turn with ``content: null`` and ``tool_calls``, and a ``tool`` result. Expected:
    the follow-up (history + final answer + new user message) is 200 and renders as DeepSeek's
    encoder renders it, the call and its result kept in place."""
    body = {
        "messages": [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CALL_MSG]},
            RESULT,
            {"role": "assistant", "content": "It is sunny in Paris."},
            {"role": "user", "content": "Open the file."},
        ],
        "tools": [CHAT_WEATHER],
    }
    status, prompt, text = _served(tok, body)
    assert status == 200, text
    assert prompt == recipe_prompt(body, False)
    assert prompt.index("get_weather") < prompt.index("Paris: sunny") < prompt.index("Open the file.")


def test_nemo_evaluator_1150_pure_call_answer_has_null_content(tok: Any) -> None:
    """NVIDIA-NeMo/Evaluator#1150: ``content: null`` on a pure tool-call answer was rewritten to
    ``""``, and harnesses that replay the message then sent an empty text turn. The OpenAI shape
    of a turn that only calls a tool is ``content: null`` with ``tool_calls``. Expected here: the
    answer's ``content`` is JSON ``null``, finish ``tool_calls``, one call with the generated
    arguments (``json.loads``), and the message replayed as returned renders as DeepSeek's encoder
    renders it."""
    tm = PromptTM(tok, reply=CALL)
    _, tc = make_client(tm)
    r = tc.post("/v1/chat/completions", json={"model": MODEL, "messages": [USER], "tools": [CHAT_WEATHER]})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    message = choice["message"]
    assert "content" in message and message["content"] is None
    assert choice["finish_reason"] == "tool_calls"
    calls = message["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"city": "Paris", "days": 3}]
    result = {"role": "tool", "tool_call_id": calls[0]["id"], "content": "Paris: sunny"}
    body = {"messages": [USER, message, result], "tools": [CHAT_WEATHER]}
    status, prompt, text = _served(tok, body)
    assert status == 200, text
    assert prompt == recipe_prompt(body, False)


def _invoke(city: str) -> str:
    return (
        f'<{D}invoke name="get_weather">\n'
        f'<{D}parameter name="city" string="true">{city}</{D}parameter>\n</{D}invoke>\n'
    )


def test_litellm_11407_each_streamed_parallel_call_opens_with_its_id(tok: Any) -> None:
    """BerriAI/litellm#11407: in a stream of parallel tool calls only the first call carried an
    ``id``, so a client could not pair the second call with its result. OpenAI's stream shape:
    the first delta of every call (each ``index``) carries its ``id``, ``type`` and name; later
    deltas of a call carry no new id. Expected: two calls, indices 0 and 1, each opening with a
    distinct id, and the ``openai`` accumulator folds Paris then Rome under those ids."""
    reply = f"\n\n<{D}tool_calls>\n" + _invoke("Paris") + _invoke("Rome") + f"</{D}tool_calls>"
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    body = {"model": MODEL, "messages": [USER], "tools": [CHAT_WEATHER], "stream": True}
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    first: dict[int, dict[str, Any]] = {}
    ids: dict[int, set[str]] = {}
    for chunk in sse_chunks(r.text):
        for choice in chunk.get("choices", []):
            for d in (choice.get("delta") or {}).get("tool_calls") or []:
                first.setdefault(d["index"], d)
                if d.get("id"):
                    ids.setdefault(d["index"], set()).add(d["id"])
    assert sorted(first) == [0, 1]
    assert all(first[i].get("id") and first[i]["function"].get("name") == "get_weather" for i in first)
    assert all(len(ids[i]) == 1 for i in first) and ids[0] != ids[1]
    calls = fold_chat_stream(r.text).choices[0].message.tool_calls
    assert [c.id for c in calls] == [first[0]["id"], first[1]["id"]]
    assert [json.loads(c.function.arguments)["city"] for c in calls] == ["Paris", "Rome"]


def test_vllm_34745_messages_tool_result_pairs_by_tool_use_id(tok: Any) -> None:
    """vllm-project/vllm#34745: ``tool_use_id`` of a Messages ``tool_result`` block was dropped by
    the request model, the converted tool message got an empty ``tool_call_id`` and the next
    turn failed. Expected here: a two-turn loop through the ``anthropic`` client (turn 1 answers a
    ``tool_use``; turn 2 replays it and a ``tool_result`` naming its id) is served, and turn 2's
    prompt is DeepSeek's Messages converter's prompt for the history, starting with turn 1's
    prompt, the generated call and the end-of-turn token."""
    tm = PromptTM(tok, reply=CALL)
    client, _, _ = make_clients(tm)
    first = client.messages.create(model=MODEL, max_tokens=200, messages=[USER], tools=[MESSAGES_WEATHER])
    uses = [b for b in first.content if b.type == "tool_use"]
    assert first.stop_reason == "tool_use" and [u.input for u in uses] == [{"city": "Paris", "days": 3}]
    messages = [
        USER,
        {"role": "assistant", "content": [u.model_dump() for u in uses]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "Paris: sunny"}],
        },
    ]
    tm.reply = "Sunny."
    second = client.messages.create(model=MODEL, max_tokens=50, messages=messages, tools=[MESSAGES_WEATHER])
    assert second.content[0].text == "Sunny."
    before, now = tok.decode(tm.received[0].input_ids), tok.decode(tm.received[1].input_ids)
    assert now == recipe_messages_prompt({"messages": messages, "tools": [MESSAGES_WEATHER]})
    assert now.startswith(before + CALL + EOS)


def test_langsmith_2537_streamed_tool_use_input_reaches_the_final_message(tok: Any) -> None:
    """langchain-ai/langsmith-sdk#2537: a wrapper folding an Anthropic stream dropped tool inputs,
    which arrive only as ``input_json_delta`` events. Anthropic's streaming spec: a ``tool_use``
    block starts with ``input: {}`` and its input is the concatenation of its ``partial_json``.
    Expected: the ``anthropic`` client's own stream accumulator ends with one ``tool_use`` block
    whose input is the generated arguments, ``stop_reason`` ``tool_use``; the same input is
    ``json.loads`` of the joined ``partial_json`` strings."""
    tm = PromptTM(tok, reply=CALL)
    client, _, _ = make_clients(tm)
    with client.messages.stream(model=MODEL, max_tokens=200, messages=[USER], tools=[MESSAGES_WEATHER]) as s:
        events = list(s)
        final = s.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("get_weather", {"city": "Paris", "days": 3})]
    assert final.stop_reason == "tool_use"
    joined = "".join(
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    assert json.loads(joined) == {"city": "Paris", "days": 3}


@pytest.mark.parametrize("lead", ["empty_text", "no_text"])
def test_inspect_ai_2772_empty_text_before_tool_use_adds_nothing(tok: Any, lead: str) -> None:
    """UKGovernmentBEIS/inspect_ai#2772 and run-llama/llama_index#17278: an assistant tool-use turn
    without prose was replayed with a blank text block (or a placeholder text), which servers
    refused or the model then saw as text. Expected here: a Messages history whose assistant turn
    is ``[{"type": "text", "text": ""}, tool_use]`` is 200 and renders exactly as the same turn
    without the empty block (DeepSeek's Messages converter's prompt for that history): no
    placeholder, no blank line."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris", "days": 3}}
    lead_blocks = [{"type": "text", "text": ""}] if lead == "empty_text" else []
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Paris: sunny"}

    def body(blocks: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "messages": [
                USER,
                {"role": "assistant", "content": blocks},
                {"role": "user", "content": [result]},
            ],
            "tools": [MESSAGES_WEATHER],
        }

    tm = PromptTM(tok, reply="Sunny.")
    _, _, tc = make_clients(tm)
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 50, **body([*lead_blocks, use])})
    assert r.status_code == 200, r.text
    assert tok.decode(tm.received[0].input_ids) == recipe_messages_prompt(body([use]))

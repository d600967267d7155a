"""Public reports of agent frameworks driving a server through long tool loops: histories with
``content: null`` calls, reasoning kept, dropped or blanked by the client, empty tool results,
odd argument JSON, interleaved and empty thinking blocks, mid-conversation system reminders,
Responses items with foreign ids or unstored reasoning, and the model name Claude Code matches
before it replays thinking. Each history is replayed through ``/v1/chat/completions``,
``/v1/messages`` or ``/v1/responses`` on an in-process app over a fake tokenizer manager that
records the prompt ids it is given.

Oracles: DeepSeek's own request converters and V4 encoder (the ``deepseek-recipe`` package) for
the prompt a history must render; the DeepSeek tokenizer's count of that prompt for usage; the
``openai`` / ``anthropic`` clients' own types and the report's stated expected value otherwise.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from anthropic_testutil import WEATHER as MESSAGES_WEATHER  # noqa: E402
from anthropic_testutil import make_clients  # noqa: E402
from anthropic_testutil import post as messages_post  # noqa: E402
from deepseek_recipe_testutil import (  # noqa: E402
    recipe_messages_prompt,
    recipe_prompt,
    recipe_responses_prompt,
)
from fake_prompt_tm import CALL, MODEL, PromptTM  # noqa: E402
from responses_testutil import CHAT_WEATHER, WEATHER, make_client  # noqa: E402

pytestmark = pytest.mark.timeout(120)

BOS = "<｜begin▁of▁sentence｜>"
#: Messages thinking switch of Claude Code (``budget_tokens`` is advisory on this server)
THINK_ON = {"type": "enabled", "budget_tokens": 4096}
THINK_OFF = {"type": "disabled"}


def after_effort(prompt: str) -> str:
    """``prompt`` without the reasoning-effort paragraph that may follow BOS. DeepSeek's Messages
    and Responses converters always put the top-tier paragraph there when thinking is on, while
    the server's paragraph depends on the checkpoint's effort profile (tested on its own
    elsewhere), so histories rendered with thinking on are compared after it."""
    if prompt.startswith(BOS + "Reasoning Effort:"):
        return BOS + prompt[len(BOS) :].split("\n\n", 1)[1]
    return prompt


def served(tm: PromptTM, k: int = -1) -> str:
    """The prompt text of the ``k``-th engine request ``tm`` received."""
    return tm.tokenizer.decode(tm.received[k].input_ids)


def chat_call(i: int, args: Any = '{"city": "Paris"}') -> dict[str, Any]:
    """An OpenAI ``tool_calls`` entry ``c{i}`` calling ``get_weather`` with ``args``."""
    return {"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": args}}


def chat_prompt(tok: Any, body: dict[str, Any]) -> str:
    """The prompt ``/v1/chat/completions`` renders for ``body`` (asserting a 200)."""
    tm = PromptTM(tok, reply="ok")
    _, tc = make_client(tm)
    r = tc.post("/v1/chat/completions", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return served(tm)


def messages_prompt(tok: Any, body: dict[str, Any]) -> str:
    """The prompt ``/v1/messages`` renders for ``body`` (asserting a 200)."""
    tm = PromptTM(tok, reply="ok")
    _, _, tc = make_clients(tm)
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 50, **body})
    assert r.status_code == 200, r.text
    return served(tm)


def responses_prompt(tok: Any, body: dict[str, Any]) -> str:
    """The prompt ``/v1/responses`` renders for ``body`` (asserting a 200)."""
    tm = PromptTM(tok, reply="ok")
    _, tc = make_client(tm)
    r = tc.post("/v1/responses", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return served(tm)


USER = {"role": "user", "content": "Weather in Paris?"}


# --------------------------------------------------------------------------- chat completions


@pytest.mark.parametrize("thinking", [False, True])
def test_vllm_54337_null_content_calls_over_a_long_session(tok: Any, thinking: bool) -> None:
    """vllm-project/vllm#54337: assistant turns sent as ``content: null`` + ``tool_calls`` rendered
    a literal ``None`` per turn, and long agent sessions degenerated as those turns piled up.
    Twenty-four such rounds (reasoning on each when thinking) render as DeepSeek's encoder renders
    them, with no ``None`` text anywhere."""
    msgs: list[dict[str, Any]] = [USER]
    for i in range(24):
        turn: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [chat_call(i)]}
        if thinking:
            turn["reasoning_content"] = f"Step {i}: check again."
        msgs += [turn, {"role": "tool", "tool_call_id": f"c{i}", "content": f"Sunny {i}"}]
    body = {"messages": msgs, "tools": [CHAT_WEATHER], "chat_template_kwargs": {"thinking": thinking}}
    prompt = chat_prompt(tok, body)
    assert prompt == recipe_prompt(body, thinking)
    assert "None" not in prompt


#: a two-question history, reasoning on every assistant turn: a plain answer, a finished tool
#: chain, then the current chain (its call made, its result in)
STITCHED = [
    USER,
    {"role": "assistant", "content": "Which day?", "reasoning_content": "OLD-PLAIN"},
    {"role": "user", "content": "Today."},
    {"role": "assistant", "content": None, "reasoning_content": "OLD-CHAIN", "tool_calls": [chat_call(1)]},
    {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
    {"role": "assistant", "content": "Sunny.", "reasoning_content": "OLD-ANSWER"},
    {"role": "user", "content": "And Rome?"},
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "NEW-CHAIN",
        "tool_calls": [chat_call(2, '{"city": "Rome"}')],
    },
    {"role": "tool", "tool_call_id": "c2", "content": "Rain"},
]


@pytest.mark.parametrize("tools", ["declared", "dropped"])
def test_laravel_ai_533_reasoning_stitching_follows_deepseeks_encoder(tok: Any, tools: str) -> None:
    """laravel/ai#533: clients must know which turns' ``reasoning_content`` DeepSeek keeps; the
    report reads the guide as "drop it across user turns, keep it within a tool chain", and
    clients that got this wrong broke multi-turn tool use. A client sending reasoning on every
    turn gets what DeepSeek's encoder renders: with ``tools`` declared every turn's reasoning
    stays (the current chain's included); with the tool list dropped (as agents do on a final
    summarising turn) the encoder drops the reasoning of every turn before the last user or tool
    message, and so does the server."""
    body: dict[str, Any] = {"messages": STITCHED, "chat_template_kwargs": {"thinking": True}}
    if tools == "declared":
        body["tools"] = [CHAT_WEATHER]
    prompt = chat_prompt(tok, body)
    assert prompt == recipe_prompt(body, True)
    kept = [s for s in ("OLD-PLAIN", "OLD-CHAIN", "OLD-ANSWER", "NEW-CHAIN") if s in prompt]
    assert kept == (["OLD-PLAIN", "OLD-CHAIN", "OLD-ANSWER", "NEW-CHAIN"] if tools == "declared" else [])


@pytest.mark.parametrize("replayed", ["omitted", "blank"])
def test_langchain_34166_tool_turn_without_its_reasoning(tok: Any, replayed: str) -> None:
    """langchain-ai/langchain#34166 (``langchain-deepseek`` sent the tool-call turn without its
    ``reasoning_content``: DeepSeek's API answered 400) and anomalyco/opencode#25058 (the fix
    injects ``reasoning_content: ""``): a thinking-mode history of either shape is served (200)
    and renders as DeepSeek's encoder renders it."""
    turn: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [chat_call(1)]}
    if replayed == "blank":
        turn["reasoning_content"] = ""
    msgs = [USER, turn, {"role": "tool", "tool_call_id": "c1", "content": "Sunny"}]
    body = {"messages": msgs, "tools": [CHAT_WEATHER], "chat_template_kwargs": {"thinking": True}}
    assert chat_prompt(tok, body) == recipe_prompt(body, True)


def test_vllm_mlx_611_empty_tool_result_keeps_the_round(tok: Any) -> None:
    """waybarrios/vllm-mlx#611: a ``content: null`` call turn and an empty tool result were
    dropped, so the continuation prompt was byte-identical to the fresh one and the agent looped
    on the same call. The round renders (the prompt grows past the fresh one) as DeepSeek's
    encoder renders it."""
    fresh = {"messages": [USER], "tools": [CHAT_WEATHER], "chat_template_kwargs": {"thinking": False}}
    msgs = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [chat_call(1)]},
        {"role": "tool", "tool_call_id": "c1", "content": ""},
    ]
    body = {**fresh, "messages": msgs}
    first, cont = chat_prompt(tok, fresh), chat_prompt(tok, body)
    assert cont == recipe_prompt(body, False)
    assert cont != first and "get_weather" in cont[len(first) - len("</think>") :]


@pytest.mark.parametrize("args", ['"Paris"', '["Paris"]', "{}", ""])
def test_sglang_28035_non_object_history_arguments_render_not_crash(tok: Any, args: str) -> None:
    """sgl-project/sglang#28035: a history call whose ``arguments`` is valid JSON but no object
    (a string, a list) crashed the chat template (``'str object' has no attribute 'items'``,
    a 500). The request is served and the call renders as DeepSeek's encoder renders it."""
    msgs = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [chat_call(1, args)]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
    ]
    body = {"messages": msgs, "tools": [CHAT_WEATHER], "chat_template_kwargs": {"thinking": False}}
    assert chat_prompt(tok, body) == recipe_prompt(body, False)


def test_agents_sdk_1943_appended_message_keeps_reasoning_and_counts_it(tok: Any) -> None:
    """openai/openai-agents-python#1943: reasoning returned with an intermediate tool call was
    missing from the next turn's input. The ``openai`` client's own message object appended to
    the history (as the Agents SDK and the cookbook do) keeps its reasoning in the next prompt,
    which is DeepSeek's encoding of the history the client sent, and ``usage.prompt_tokens`` is
    the tokenizer's count of that prompt."""
    tm = PromptTM(tok, reply="Need the weather for Paris.</think>" + CALL)
    client, _ = make_client(tm)
    extra = {"chat_template_kwargs": {"thinking": True}}
    msgs: list[Any] = [USER]
    first = client.chat.completions.create(model=MODEL, messages=msgs, tools=[CHAT_WEATHER], extra_body=extra)
    m = first.choices[0].message
    msgs += [m, {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "Sunny"}]
    tm.reply = "Sunny in Paris."
    second = client.chat.completions.create(
        model=MODEL, messages=msgs, tools=[CHAT_WEATHER], extra_body=extra
    )
    sent = [USER, m.model_dump(exclude_unset=True), msgs[2]]
    want = recipe_prompt({"messages": sent, "tools": [CHAT_WEATHER]}, True)
    assert served(tm) == want and "Need the weather for Paris." in want
    assert second.usage.prompt_tokens == len(tok.encode(want, add_special_tokens=False))


# --------------------------------------------------------------------------- Messages (Claude Code)


def tool_use(i: int, city: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather", "input": {"city": city}}


def tool_result(i: int, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": text}


def test_inspect_ai_4922_interleaved_thinking_blocks_render_in_place(tok: Any) -> None:
    """UKGovernmentBEIS/inspect_ai#4922 and NousResearch/hermes-agent#35975: an assistant turn
    ``[thinking, tool_use, thinking, tool_use]`` (interleaved thinking) was rebuilt as all thinking
    first, then all calls. Replayed as sent, with its results, it renders as DeepSeek's own
    Messages converter renders it, both thoughts in their order."""
    body = {
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "FIRST-THOUGHT", "signature": "s1"},
                    tool_use(1, "Paris"),
                    {"type": "thinking", "thinking": "SECOND-THOUGHT", "signature": "s2"},
                    tool_use(2, "Rome"),
                ],
            },
            {"role": "user", "content": [tool_result(1, "Sunny"), tool_result(2, "Rain")]},
        ],
        "tools": [MESSAGES_WEATHER],
    }
    prompt = messages_prompt(tok, {**body, "thinking": THINK_ON})
    assert after_effort(prompt) == after_effort(recipe_messages_prompt(body, thinking=True))
    assert prompt.index("FIRST-THOUGHT") < prompt.index("SECOND-THOUGHT")


def test_cc_switch_3930_resumed_session_with_empty_and_foreign_thinking(tok: Any) -> None:
    """farion1231/cc-switch#3930: resuming a Claude Code session replays thinking blocks with
    another provider's signature or no text, and the upstream refused them (400 "Invalid
    signature" / "each thinking block must contain thinking"). Such blocks are served and the
    history renders as DeepSeek's own Messages converter renders it."""
    body = {
        "messages": [
            USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "", "signature": "EqQBCkYIBxgCKkD-foreign"},
                    tool_use(1, "Paris"),
                ],
            },
            {"role": "user", "content": [tool_result(1, "Sunny")]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Report it.", "signature": "not-ours"},
                    {"type": "text", "text": "Sunny."},
                ],
            },
            {"role": "user", "content": "Thanks. Rome?"},
        ],
        "tools": [MESSAGES_WEATHER],
    }
    prompt = messages_prompt(tok, {**body, "thinking": THINK_ON})
    assert after_effort(prompt) == after_effort(recipe_messages_prompt(body, thinking=True))


def test_claude_code_router_1629_message_model_echoes_the_request(tok: Any) -> None:
    """musistudio/claude-code-router#1629: Claude Code replays history thinking blocks only when
    the reply's ``message.model`` equals the model it asked for; a server answering with another
    name (its own) made it strip every thinking block from the third request on. Asked for under
    an alias the server accepts (``default``), both the message and the stream's
    ``message_start`` name ``default``, as the report expects."""
    tm = PromptTM(tok, reply="Thinking.</think>Sunny.")
    _, _, tc = make_clients(tm)
    body = {"model": "default", "messages": [USER], "thinking": THINK_ON}
    message, events = messages_post(tc, body)
    assert message["model"] == "default"
    (start,) = [e for e in events if e["type"] == "message_start"]
    assert start["message"]["model"] == "default"


# --------------------------------------------------------------------------- mid-conversation system


def test_rapid_mlx_1543_mid_conversation_system_message_on_every_route(tok: Any) -> None:
    """raullenchai/Rapid-MLX#1543 and ggml-org/llama.cpp#27367: a ``system`` message after the
    conversation started (agent reminders, compaction summaries) was refused with "System
    message must be at the beginning" (400 / 500). Chat, Messages and Responses all serve it and
    render it as DeepSeek's converter for that route renders it."""
    msgs = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "system", "content": "From now on answer only BLUE."},
        {"role": "user", "content": "What colour is the sky?"},
    ]
    chat = {"messages": msgs, "chat_template_kwargs": {"thinking": False}}
    assert chat_prompt(tok, chat) == recipe_prompt(chat, False)
    messages = {"system": "You are terse.", "messages": msgs[1:]}
    assert messages_prompt(tok, {**messages, "thinking": THINK_OFF}) == recipe_messages_prompt(messages)
    responses = {"instructions": "You are terse.", "input": msgs[1:], "reasoning": {"effort": "none"}}
    assert responses_prompt(tok, responses) == recipe_responses_prompt(responses)
    assert "BLUE" in chat_prompt(tok, chat)


# --------------------------------------------------------------------------- Responses (Agents SDK, Codex)


FC = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
    "status": "completed",
}
FCO = {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"}


def test_siyuan_19782_history_message_id_without_msg_prefix(tok: Any) -> None:
    """siyuan-note/siyuan#19782: an agent replaying an assistant message item whose ``id`` is a
    UUID (no ``msg_`` prefix) was refused ("message id must be a string starting with 'msg_'").
    The item is served and renders as DeepSeek's Responses converter renders it."""
    items = [
        USER,
        {
            "type": "message",
            "id": "773d328c-6ddd-432e-a9d9-15395fbf67b2",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}],
        },
        FC,
        FCO,
    ]
    body = {"input": items, "tools": [WEATHER], "reasoning": {"effort": "none"}}
    prompt = responses_prompt(tok, body)
    assert prompt == recipe_responses_prompt(body) and "Let me check." in prompt


@pytest.mark.parametrize("store", [False, True])
def test_agents_sdk_919_unstored_reasoning_items_in_input(tok: Any, store: bool) -> None:
    """openai/openai-agents-python#919 and OpenHands/software-agent-sdk#2178 (reasoning items
    echoed under ``store: false`` answered 404 "Item with id 'rs_...' not found") and
    openai/openai-agents-python#2020 (an empty reasoning item, ``summary: []``, replayed turns
    later, also 404): reasoning items the server never stored are served as given, and the
    history renders as DeepSeek's Responses converter renders it, thinking on."""
    items = [
        {"role": "user", "content": "Hi"},
        {"type": "reasoning", "id": "rs_0ed518991eb0c6d5", "summary": []},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
        },
        USER,
        {
            "type": "reasoning",
            "id": "rs_3c4caff36e34c099",
            "summary": [{"type": "summary_text", "text": "Need the weather."}],
        },
        FC,
        FCO,
    ]
    body = {"input": items, "tools": [WEATHER], "reasoning": {"effort": "high"}, "store": store}
    prompt = responses_prompt(tok, body)
    assert after_effort(prompt) == after_effort(recipe_responses_prompt(body, thinking=True))


def test_agents_sdk_chat_loop_streamed_calls_replay_as_generated(tok: Any) -> None:
    """openai/openai-agents-python#1943 (second half: the streamed turn's reasoning and call must
    come back intact in the next input): a streamed thinking turn, rebuilt from its deltas the way
    an agent does (ids, names and argument fragments by ``index``), replays to the same prompt as
    the non-streamed message of the same turn."""
    tm = PromptTM(tok, reply="Need the weather for Paris.</think>" + CALL)
    client, _ = make_client(tm)
    extra = {"chat_template_kwargs": {"thinking": True}}
    kw: dict[str, Any] = dict(model=MODEL, messages=[USER], tools=[CHAT_WEATHER], extra_body=extra)
    whole = client.chat.completions.create(**kw).choices[0].message
    reasoning, calls = "", {}
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            reasoning += getattr(ch.delta, "reasoning_content", None) or ""
            for d in ch.delta.tool_calls or []:
                c = calls.setdefault(
                    d.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                c["id"] += d.id or ""
                c["function"]["name"] += (d.function and d.function.name) or ""
                c["function"]["arguments"] += (d.function and d.function.arguments) or ""
    assert reasoning == whole.reasoning_content == "Need the weather for Paris."
    streamed = {
        "role": "assistant",
        "content": None,
        "reasoning_content": reasoning,
        "tool_calls": list(calls.values()),
    }
    assert [json.loads(c["function"]["arguments"]) for c in streamed["tool_calls"]] == [
        {"city": "Paris", "days": 3}
    ]
    tm.reply = "Sunny."
    prompts = []
    for turn in (whole.model_dump(exclude_none=True), streamed):
        call_id = turn["tool_calls"][0]["id"]
        msgs = [USER, turn, {"role": "tool", "tool_call_id": call_id, "content": "Sunny"}]
        client.chat.completions.create(**{**kw, "messages": msgs})
        prompts.append(served(tm))
        assert prompts[-1] == recipe_prompt({"messages": msgs, "tools": [CHAT_WEATHER]}, True)
    assert prompts[0] == prompts[1]


def test_crush_3408_cancelled_call_resent_without_its_result_is_a_400(tok: Any) -> None:
    """charmbracelet/crush#3408: an agent request cancelled mid-tool leaves a call with no result
    in the history; the resend must be refused in OpenAI's words, naming the unanswered id
    ("An assistant message with 'tool_calls' must be followed by tool messages responding to
    each 'tool_call_id'. The following tool_call_ids did not have response messages: ..."; on
    Responses "No tool output found for function call <id>."), and nothing reaches the engine."""
    tm = PromptTM(tok, reply="ok")
    _, tc = make_client(tm)
    msgs = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [chat_call(1), chat_call(2)]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
        {"role": "user", "content": "Go on."},
    ]
    r = tc.post("/v1/chat/completions", json={"model": MODEL, "messages": msgs, "tools": [CHAT_WEATHER]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "BadRequestError" and err["code"] == 400
    assert (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        "'tool_call_id'. The following tool_call_ids did not have response messages: c2"
    ) in err["message"]
    items = [USER, FC, {"role": "user", "content": "Go on."}]
    r = tc.post("/v1/responses", json={"model": MODEL, "input": items, "tools": [WEATHER]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == "No tool output found for function call call_1."
    assert tm.received == []


def test_nakama_333_streamed_tool_use_replays_with_its_input(tok: Any) -> None:
    """ahmadrosid/nakama#333: a streamed ``tool_use`` block's ``input_json_delta`` fragments were
    lost, so the call was replayed with ``input: {}``. The ``anthropic`` client's own stream
    accumulator rebuilds this server's streamed thinking + text + ``tool_use`` turn with its whole
    input, and that turn replayed renders to the same prompt as the non-streamed one, a prompt
    that starts with the first turn's prompt followed by the text the model wrote."""
    reply = "Need the weather.</think>Checking now." + CALL
    tm = PromptTM(tok, reply=reply)
    client, _, _ = make_clients(tm)
    kw: dict[str, Any] = dict(model=MODEL, max_tokens=300, tools=[MESSAGES_WEATHER], thinking=THINK_ON)
    msgs: list[dict[str, Any]] = [USER]
    whole = client.messages.create(messages=msgs, **kw)
    with client.messages.stream(messages=msgs, **kw) as s:
        streamed = s.get_final_message()
    first = served(tm)
    prompts = []
    for m in (whole, streamed):
        blocks = [b.model_dump(exclude_none=True) for b in m.content]
        assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
        assert blocks[2]["input"] == {"city": "Paris", "days": 3}
        result = {"type": "tool_result", "tool_use_id": blocks[2]["id"], "content": "Sunny"}
        turn = [{"role": "assistant", "content": blocks}, {"role": "user", "content": [result]}]
        client.messages.create(messages=msgs + turn, **kw)
        prompts.append(served(tm))
    assert prompts[0] == prompts[1] and prompts[0].startswith(first + reply)

"""Public reports of agent loops replaying tool histories to an OpenAI-, Anthropic- or
Responses-shaped server (round 32): parallel tool results sent back in completion order rather
than call order (chat ``tool`` messages, Anthropic ``tool_result`` blocks, Responses
``function_call_output`` items); a no-argument tool call, streamed and not, whose arguments must
reach the client as a JSON object; an assistant tool-call turn replayed with its text as content
parts (an empty text part, a text part); a partial assistant turn continued with
``continue_final_message``. Each request runs on an in-process app over a fake tokenizer manager
that records the prompt ids it is given (``fake_prompt_tm.PromptTM``), with the ``tok`` fixture.

Oracles: DeepSeek's own request converters and V4 encoder (the ``deepseek-recipe`` package, via
``deepseek_recipe_testutil``) for the prompt a history must render and for the message a reply
parses to; the ``openai`` and ``anthropic`` clients' own parsers and the ``openai`` stream
accumulator for what a turn returns; ``json.loads`` for call arguments.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from anthropic_testutil import WEATHER as MESSAGES_WEATHER  # noqa: E402
from anthropic_testutil import make_clients  # noqa: E402
from deepseek_recipe_testutil import (  # noqa: E402
    recipe_message,
    recipe_messages_prompt,
    recipe_messages_response,
    recipe_prompt,
    recipe_responses_prompt,
)
from fake_prompt_tm import MODEL, PromptTM  # noqa: E402
from responses_testutil import CHAT_WEATHER, WEATHER, make_client  # noqa: E402

pytestmark = pytest.mark.timeout(120)

D = "｜DSML｜"
EOS = "<｜end▁of▁sentence｜>"
CHAT_TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CHAT_NOW = {
    "type": "function",
    "function": {
        "name": "now",
        "description": "Current UTC time",
        "parameters": {"type": "object", "properties": {}},
    },
}
#: a call to the no-argument ``now`` tool in DSML (an invoke without parameters)
NOW_CALL = f'\n\n<{D}tool_calls>\n<{D}invoke name="now">\n</{D}invoke>\n</{D}tool_calls>'


def _fn(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "arguments": json.dumps(args)}


PARALLEL_CALLS = [
    {"id": "call_W", "type": "function", "function": _fn("get_weather", {"city": "Paris"})},
    {"id": "call_T", "type": "function", "function": _fn("get_time", {"city": "Paris"})},
]


def _prompt(tok: Any, tm: PromptTM, k: int = -1) -> str:
    return tok.decode(tm.received[k].input_ids)


def _chat(tok: Any, body: dict[str, Any], reply: str = "Done.") -> tuple[int, str, str]:
    """POST ``body`` to ``/v1/chat/completions``; the status, the prompt text served, the body."""
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    r = tc.post("/v1/chat/completions", json={"model": MODEL, **body})
    return r.status_code, (_prompt(tok, tm) if tm.received else ""), r.text


def test_colibri_118_chat_parallel_results_out_of_order_pair_by_id(tok: Any) -> None:
    """JustVugg/colibri#118 (and MiaAI-Lab/Qwen3.8-27B-DFlash2-EXL3-5.0bpw#10): tool results were
    rendered in the order the client sent them, so results of parallel calls returned in
    completion order (``call_T`` before ``call_W``) answered the wrong calls. OpenAI binds a result
    by ``tool_call_id``, not by position. Expected: the reversed history is 200 and renders exactly
    as the in-order one, which is DeepSeek's encoder's prompt (results in call order)."""
    user = {"role": "user", "content": "Weather and time in Paris?"}
    asst = {"role": "assistant", "content": None, "tool_calls": PARALLEL_CALLS}
    res_w = {"role": "tool", "tool_call_id": "call_W", "content": "22C, sunny"}
    res_t = {"role": "tool", "tool_call_id": "call_T", "content": "14:05"}
    tools = [CHAT_WEATHER, CHAT_TIME]
    in_order = {"messages": [user, asst, res_w, res_t], "tools": tools}
    reversed_ = {"messages": [user, asst, res_t, res_w], "tools": tools}
    s1, p1, t1 = _chat(tok, in_order)
    s2, p2, t2 = _chat(tok, reversed_)
    assert (s1, s2) == (200, 200), (t1, t2)
    assert p1 == recipe_prompt(in_order, False)
    assert p2 == p1
    assert p2.index("22C, sunny") < p2.index("14:05")


def test_cliproxyapi_5199_messages_permuted_tool_results(tok: Any) -> None:
    """router-for-me/CLIProxyAPI#5199: Claude Code returned the ``tool_result`` blocks of six
    parallel ``Read`` calls permuted; the proxy paired results with calls by position and the
    upstream refused the history (``functionResponse.id does not match functionCall.id``).
    Anthropic pairs a ``tool_result`` with its ``tool_use`` by ``tool_use_id``. Expected: the
    permuted Messages history is 200 through the ``anthropic`` client and renders as DeepSeek's
    Messages converter renders it, the same prompt as the results sent in call order."""
    ids = [f"toolu_{c}" for c in "abcdef"]
    uses = [
        {"type": "tool_use", "id": i, "name": "get_weather", "input": {"city": f"City{n}"}}
        for n, i in enumerate(ids)
    ]
    results = {
        i: {"type": "tool_result", "tool_use_id": i, "content": f"{n * 3}C"} for n, i in enumerate(ids)
    }
    permuted = [ids[2], ids[0], ids[3], ids[4], ids[5], ids[1]]

    def body(order: list[str]) -> dict[str, Any]:
        return {
            "tools": [MESSAGES_WEATHER],
            "messages": [
                {"role": "user", "content": "Weather in six cities?"},
                {"role": "assistant", "content": copy.deepcopy(uses)},
                {"role": "user", "content": [results[i] for i in order]},
            ],
        }

    tm = PromptTM(tok, reply="All sunny.")
    client, _, _ = make_clients(tm)
    for order in (ids, permuted):
        m = client.messages.create(model=MODEL, max_tokens=20, thinking={"type": "disabled"}, **body(order))
        assert [b.text for b in m.content if b.type == "text"] == ["All sunny."]
    assert _prompt(tok, tm, 0) == recipe_messages_prompt(body(ids))
    assert _prompt(tok, tm, 1) == _prompt(tok, tm, 0)


def test_drifox_82_responses_function_call_outputs_out_of_order(tok: Any) -> None:
    """martin98-afk/DriFox#82: concurrently run tools returned their results in a different order
    than the calls, and the API refused the history or the results were misread. In the
    Responses API each ``function_call_output`` names its ``call_id``. Expected: the outputs sent
    in reverse order are 200 and render as DeepSeek's Responses converter renders them, the same
    prompt as the outputs in call order."""
    calls = [
        {
            "type": "function_call",
            "call_id": c["id"],
            "name": c["function"]["name"],
            "arguments": c["function"]["arguments"],
        }
        for c in PARALLEL_CALLS
    ]
    outs = {
        "call_W": {"type": "function_call_output", "call_id": "call_W", "output": "22C, sunny"},
        "call_T": {"type": "function_call_output", "call_id": "call_T", "output": "14:05"},
    }
    time_tool = {"type": "function", **CHAT_TIME["function"]}
    user = {"role": "user", "content": "Weather and time in Paris?"}

    def body(order: list[str]) -> dict[str, Any]:
        return {"input": [user, *calls, *(outs[i] for i in order)], "tools": [WEATHER, time_tool]}

    tm = PromptTM(tok, reply="Sunny, 14:05.")
    client, _ = make_client(tm)
    for order in (["call_W", "call_T"], ["call_T", "call_W"]):
        r = client.responses.create(model=MODEL, **body(order))
        assert r.output_text == "Sunny, 14:05."
    assert _prompt(tok, tm, 0) == recipe_responses_prompt(body(["call_W", "call_T"]))
    assert _prompt(tok, tm, 1) == _prompt(tok, tm, 0)


@pytest.mark.parametrize("stream", [False, True])
def test_rust_genai_127_no_argument_call_arguments_are_a_json_object(tok: Any, stream: bool) -> None:
    """jeremychone/rust-genai#127 (deepseek-chat streamed a ``Bash`` call with ``arguments: ""``),
    open-webui/open-webui#22189 and vercel/ai#10283: a call to a tool without parameters reached
    the client with an empty ``arguments`` string, which ``json.loads`` refuses, so the call was
    dropped or failed. Expected: the model's parameterless DSML invoke comes back, streamed (the
    ``openai`` stream accumulator) and not, as one ``now`` call whose arguments ``json.loads`` to
    ``{}``, as DeepSeek's response parser reads the same reply, with finish ``tool_calls``."""
    body = {"messages": [{"role": "user", "content": "What time is it?"}], "tools": [CHAT_NOW]}
    oracle = recipe_message(body, NOW_CALL)
    want = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in oracle["tool_calls"]]
    assert want == [("now", {})]
    tm = PromptTM(tok, reply=NOW_CALL)
    client, _ = make_client(tm)
    if stream:
        with client.chat.completions.stream(model=MODEL, **body) as s:
            for _ in s:
                pass
            done = s.get_final_completion()
    else:
        done = client.chat.completions.create(model=MODEL, **body)
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls"
    got = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    assert got == want
    assert not choice.message.content


@pytest.mark.parametrize(
    ("report", "parts", "as_string"),
    [
        ("litellm_22977", [{"type": "text", "text": ""}], None),
        ("lmstudio_20", [{"type": "text", "text": "Let me check."}], "Let me check."),
    ],
)
def test_tool_call_turn_with_text_parts(
    tok: Any, report: str, parts: list[dict[str, Any]], as_string: str | None
) -> None:
    """BerriAI/litellm#22977: a Responses-to-chat bridge replayed an assistant tool-call turn with
    ``content: [{"type": "text", "text": ""}]`` and strict servers refused it;
    lmstudio-ai/lmstudio-python#20: an assistant turn holding a text part beside its tool calls was
    refused (``'assistant' role does not support multi-part message content``). The OpenAI schema
    allows text parts on an assistant message. Expected: 200 and the prompt DeepSeek's encoder
    renders for the same turn with its text as a plain string (no text for the empty part)."""
    user = {"role": "user", "content": "Weather in Paris?"}
    call = [{"id": "call_1", "type": "function", "function": _fn("get_weather", {"city": "Paris"})}]
    result = {"role": "tool", "tool_call_id": "call_1", "content": "Paris: sunny"}
    body = {
        "messages": [user, {"role": "assistant", "content": parts, "tool_calls": call}, result],
        "tools": [CHAT_WEATHER],
    }
    plain: dict[str, Any] = {"role": "assistant", "tool_calls": call}
    if as_string is not None:
        plain["content"] = as_string
    status, prompt, text = _chat(tok, body)
    assert status == 200, text
    assert prompt == recipe_prompt({"messages": [user, plain, result], "tools": [CHAT_WEATHER]}, False)
    assert '"type": "text"' not in prompt


def test_sonar_1163_continue_final_message_resumes_the_partial_turn(tok: Any) -> None:
    """dphnAI/sonar#1163: with ``continue_final_message`` the final assistant message is a prefix
    the model continues (no end-of-turn token after it, no new assistant turn); an interrupted
    agent turn resumed this way otherwise restarts the answer. Expected: the prompt is DeepSeek's
    encoder's prompt of the history before that message (ending with the opened assistant turn)
    followed by the partial text verbatim, and the reply is the continuation only."""
    history = [{"role": "user", "content": "Greek name for the Sun? (A) Sol (B) Helios"}]
    partial = "The best answer is ("
    body = {
        "messages": [*history, {"role": "assistant", "content": partial}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    status, prompt, text = _chat(tok, body, reply="B) Helios")
    assert status == 200, text
    assert prompt == recipe_prompt({"messages": history}, False) + partial
    assert json.loads(text)["choices"][0]["message"]["content"] == "B) Helios"


def test_req_llm_763_messages_streamed_no_argument_tool_use_input_is_empty_object(tok: Any) -> None:
    """agentjido/req_llm#763: an Anthropic-style stream of a tool without parameters sent no (or
    empty) ``input_json_delta`` fragments and the client reported the call's arguments lost.
    Expected: the model's parameterless DSML invoke streamed on ``/v1/messages`` comes back through
    the ``anthropic`` client's stream accumulator as one ``tool_use`` block named ``now`` with
    ``input`` ``{}``, as DeepSeek's Messages response reads the same reply, stop reason
    ``tool_use``; the non-streamed message says the same."""
    now = {
        "name": "now",
        "description": "Current UTC time",
        "input_schema": {"type": "object", "properties": {}},
    }
    body = {"messages": [{"role": "user", "content": "What time is it?"}], "tools": [now]}
    oracle = recipe_messages_response(body, NOW_CALL, thinking=False)
    want = [(b["name"], b["input"]) for b in oracle["content"] if b["type"] == "tool_use"]
    assert want == [("now", {})] and oracle["stop_reason"] == "tool_use"
    client, _, _ = make_clients(PromptTM(tok, reply=NOW_CALL))
    kw = {"model": MODEL, "max_tokens": 50, "thinking": {"type": "disabled"}, **body}
    with client.messages.stream(**kw) as s:
        streamed = s.get_final_message()
    plain = client.messages.create(**kw)
    for m in (streamed, plain):
        assert [(b.name, b.input) for b in m.content if b.type == "tool_use"] == want
        assert m.stop_reason == "tool_use"


def test_vercel_ai_10283_responses_no_argument_function_call_arguments(tok: Any) -> None:
    """vercel/ai#10283: OpenAI-compatible providers sent ``arguments: ""`` for a tool without
    parameters; the client's ``isParsableJson("")`` check failed and the call was silently never
    run. Expected: on ``/v1/responses``, streamed (the ``openai`` client's final response of the
    stream) and not, the parameterless DSML invoke is one ``function_call`` item named ``now``
    whose ``arguments`` ``json.loads`` to ``{}``."""
    now = {"type": "function", **CHAT_NOW["function"]}
    body = {"input": "What time is it?", "tools": [now]}
    client, _ = make_client(PromptTM(tok, reply=NOW_CALL))
    with client.responses.stream(model=MODEL, **body) as s:
        streamed = s.get_final_response()
    plain = client.responses.create(model=MODEL, **body)
    for r in (streamed, plain):
        calls = [(o.name, json.loads(o.arguments)) for o in r.output if o.type == "function_call"]
        assert calls == [("now", {})]


@pytest.mark.parametrize("prefill", ["The weather in Paris is", "The weather in Paris is "])
def test_opencode_1295_messages_prefill_is_continued(tok: Any, prefill: str) -> None:
    """anomalyco/opencode#1295, tailcallhq/forgecode#1872 and aaif-goose/goose#5967: agents that
    end a Messages history with an assistant turn (Anthropic's documented prefill) failed on
    ``final assistant content cannot end with trailing whitespace``. A prefill is the start of the
    answer: the model continues it and the returned content is the continuation only. Expected:
    200 (trailing whitespace too), the prompt is DeepSeek's Messages converter's prompt of the
    history before the prefill (ending with the opened assistant turn) followed by the prefill
    verbatim, and the ``anthropic`` client reads the continuation alone."""
    history = [{"role": "user", "content": "Weather in Paris?"}]
    tm = PromptTM(tok, reply="sunny.")
    client, _, _ = make_clients(tm)
    m = client.messages.create(
        model=MODEL,
        max_tokens=20,
        thinking={"type": "disabled"},
        messages=[*history, {"role": "assistant", "content": prefill}],
    )
    assert [b.text for b in m.content if b.type == "text"] == ["sunny."]
    assert _prompt(tok, tm) == recipe_messages_prompt({"messages": history}) + prefill


@pytest.mark.parametrize("layout", ["grouped", "interleaved"])
def test_litellm_21154_responses_parallel_function_calls_stay_one_turn(tok: Any, layout: str) -> None:
    """BerriAI/litellm#21154: a Responses-to-chat conversion turned each ``function_call`` input
    item into its own assistant message, so the parallel calls of one model turn became several
    turns and the next model refused the tool results (``Missing corresponding tool call``).
    Consecutive ``function_call`` items are one assistant turn. Expected: the two calls, echoed
    grouped (both calls, then both outputs, as the OpenAI guide's loop appends them) or each
    followed by its output, are 200 and render as DeepSeek's Responses converter renders the same
    items; grouped, the prompt holds both invokes in one DSML block closed by one end-of-turn."""
    user = {"role": "user", "content": "Weather in Paris and Rome?"}
    calls = [
        {
            "type": "function_call",
            "call_id": f"call_{c}",
            "name": "get_weather",
            "arguments": json.dumps({"city": c}),
        }
        for c in ("Paris", "Rome")
    ]
    outs = [
        {"type": "function_call_output", "call_id": f"call_{c}", "output": f"{c}: {w}"}
        for c, w in (("Paris", "sunny"), ("Rome", "rainy"))
    ]
    items = [*calls, *outs] if layout == "grouped" else [calls[0], outs[0], calls[1], outs[1]]
    body = {"input": [user, *items], "tools": [WEATHER]}
    tm = PromptTM(tok, reply="Sunny and rainy.")
    client, _ = make_client(tm)
    assert client.responses.create(model=MODEL, **body).output_text == "Sunny and rainy."
    prompt = _prompt(tok, tm)
    assert prompt == recipe_responses_prompt(body)
    if layout == "grouped":
        turns = prompt.split("<｜User｜>", 1)[1]  # the conversation, after the tools' instructions
        assert turns.count(f"<{D}tool_calls>") == 1 and turns.count(f'<{D}invoke name="get_weather">') == 2
        assert turns.count(EOS) == 1

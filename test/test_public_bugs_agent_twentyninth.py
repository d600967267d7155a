"""Public reports of agent loops with parallel tool calls (round 29): a turn that asks for two
calls at once, then the next request carrying both calls and both results (in call order, or in
the order the tools finished), on ``/v1/chat/completions`` and Anthropic's ``/v1/messages``
(both ``tool_result`` blocks in one user message); and a tool result of several text parts (a
client's reminder part before the tool's output). Each history is replayed on an in-process app
over a fake tokenizer manager that records the prompt ids it is given.

Oracles: DeepSeek's own request converters and V4 encoder (the ``deepseek-recipe`` package) for
the prompt a history must render; the earlier turn's own prompt and generated text for what the
next turn must start with (the prefix cache reaches through it); the ``openai`` client's parsed
answer for the calls a turn returns.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from anthropic_testutil import WEATHER as MESSAGES_WEATHER  # noqa: E402
from anthropic_testutil import make_clients  # noqa: E402
from deepseek_recipe_testutil import recipe_messages_prompt, recipe_prompt  # noqa: E402
from fake_prompt_tm import MODEL, PromptTM  # noqa: E402
from responses_testutil import CHAT_WEATHER  # noqa: E402

pytestmark = pytest.mark.timeout(120)

D = "｜DSML｜"
EOS = "<｜end▁of▁sentence｜>"
CITIES = ("Paris", "Rome")


def _invoke(city: str) -> str:
    return (
        f'<{D}invoke name="get_weather">\n'
        f'<{D}parameter name="city" string="true">{city}</{D}parameter>\n</{D}invoke>\n'
    )


#: two ``get_weather`` calls in one DSML block (what the model writes for a parallel step)
TWO_CALLS = f"\n\n<{D}tool_calls>\n" + "".join(_invoke(c) for c in CITIES) + f"</{D}tool_calls>"
USER = {"role": "user", "content": "Weather in Paris and Rome?"}


@pytest.mark.parametrize("results", ["call_order", "completion_order"])
def test_eino_1242_parallel_results_keep_the_turn_as_the_next_prefix(tok: Any, results: str) -> None:
    """cloudwego/eino#1242: parallel tool results were replayed in completion order, and
    changing the history's order between turns invalidated the reusable prompt-cache prefix;
    can1357/oh-my-pi#11179: results sent in completion order were paired with the wrong calls by
    a positional reader. Expected here: turn 1 answers both calls (the ``openai`` client parses
    two ``get_weather`` calls, Paris then Rome); turn 2, replaying that message and both results
    by ``tool_call_id``, is 200 and its prompt starts with turn 1's prompt, the text generated
    for it and the end-of-turn token, and equals DeepSeek's encoder's prompt for the history as
    sent (each result stays with its own ``tool_call_id``'s content)."""
    from responses_testutil import make_client

    tm = PromptTM(tok, reply=TWO_CALLS)
    client, _ = make_client(tm)
    first = client.chat.completions.create(model=MODEL, messages=[USER], tools=[CHAT_WEATHER])
    calls = first.choices[0].message.tool_calls
    assert [json.loads(c.function.arguments)["city"] for c in calls] == list(CITIES)
    assert first.choices[0].finish_reason == "tool_calls"
    tool_msgs = [
        {"role": "tool", "tool_call_id": c.id, "content": f"{city}: sunny"} for c, city in zip(calls, CITIES)
    ]
    if results == "completion_order":
        tool_msgs.reverse()
    assistant = first.choices[0].message.model_dump(exclude_none=True)
    body = {"messages": [USER, assistant, *tool_msgs], "tools": [CHAT_WEATHER]}
    tm.reply = "Both are sunny."
    second = client.chat.completions.create(model=MODEL, **body)
    assert second.choices[0].message.content == "Both are sunny."
    before, now = tok.decode(tm.received[0].input_ids), tok.decode(tm.received[1].input_ids)
    assert now.startswith(before + TWO_CALLS + EOS)
    assert now == recipe_prompt(body, False)


def test_omniroute_4882_messages_parallel_tool_results_in_one_user_turn(tok: Any) -> None:
    """diegosouzapw/OmniRoute#4882: a Messages history of an assistant turn with two parallel
    ``tool_use`` blocks was mistranslated (results regrouped, a placeholder result invented).
    Anthropic's tool-use guide: all results of a parallel step go back together in one user
    message. Expected here: 200, the prompt DeepSeek's Messages converter renders for the same
    history (both results, each with its own call), which starts with the prompt of the turn
    that generated the two calls followed by the calls and the end-of-turn token."""
    tm = PromptTM(tok, reply=TWO_CALLS)
    _, _, tc = make_clients(tm)
    r = tc.post(
        "/v1/messages",
        json={"model": MODEL, "max_tokens": 200, "messages": [USER], "tools": [MESSAGES_WEATHER]},
    )
    assert r.status_code == 200, r.text
    uses = [b for b in r.json()["content"] if b["type"] == "tool_use"]
    assert [u["input"] for u in uses] == [{"city": c} for c in CITIES]
    assert r.json()["stop_reason"] == "tool_use"
    results = [
        {"type": "tool_result", "tool_use_id": u["id"], "content": f"{c}: sunny"}
        for u, c in zip(uses, CITIES)
    ]
    body = {
        "messages": [USER, {"role": "assistant", "content": uses}, {"role": "user", "content": results}],
        "tools": [MESSAGES_WEATHER],
    }
    tm.reply = "Both are sunny."
    r2 = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 50, **body})
    assert r2.status_code == 200, r2.text
    before, now = tok.decode(tm.received[0].input_ids), tok.decode(tm.received[1].input_ids)
    assert now == recipe_messages_prompt(body)
    assert now.startswith(before + TWO_CALLS + EOS)


def test_kimi_cli_1762_reminder_and_output_parts_of_a_tool_result(tok: Any) -> None:
    """MoonshotAI/kimi-cli#1762 (fixed by #1771): a tool result of two text parts (a
    system-reminder part, then the tool's output) was sent as an array and a server refused it
    (``invalid type: sequence, expected a string``). The OpenAI spec allows a text-part array as
    tool ``content``. Expected: 200 and the prompt DeepSeek's encoder renders for the same parts
    (both texts kept, reminder first), with no JSON of the parts in the tool result."""
    from responses_testutil import make_client

    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    parts = [
        {"type": "text", "text": "<system-reminder>Answer briefly.</system-reminder>"},
        {"type": "text", "text": "Paris: sunny"},
    ]
    body = {
        "messages": [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": parts},
        ],
        "tools": [CHAT_WEATHER],
    }
    tm = PromptTM(tok, reply="Sunny.")
    _, tc = make_client(tm)
    r = tc.post("/v1/chat/completions", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    prompt = tok.decode(tm.received[-1].input_ids)
    assert prompt == recipe_prompt(body, False)
    tail = prompt.rsplit("<｜User｜>", 1)[1]
    assert tail.index("Answer briefly.") < tail.index("Paris: sunny")
    assert '"type": "text"' not in tail and '"type":"text"' not in tail

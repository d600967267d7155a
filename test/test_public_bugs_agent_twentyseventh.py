"""Public reports of agent loops feeding tool results back to a server: tool results sent as
content-part arrays (several text parts, ``null``, an image), a Responses loop whose client
replays each step's text after its calls (and the prefix each turn must keep for the cache to
reach through the previous assistant turn), a Messages step with its text after the
``tool_use`` block, a thinking-mode tool turn replayed without its reasoning, and a session that
keeps a hook's developer message between a call and its output. Each history is replayed through
``/v1/chat/completions``, ``/v1/messages`` or ``/v1/responses`` on an in-process app over a fake
tokenizer manager that records the prompt ids it is given.

Oracles: DeepSeek's own request converters and V4 encoder (the ``deepseek-recipe`` package) for
the prompt a history must render (on the order the model wrote a step in: reasoning, text,
calls); the earlier turn's own prompt and generated text for what a later turn must start with;
the ``openai`` client's errors and the reports' stated expected values otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from anthropic_testutil import WEATHER as MESSAGES_WEATHER  # noqa: E402
from anthropic_testutil import make_clients  # noqa: E402
from deepseek_recipe_testutil import recipe_messages_prompt, recipe_prompt  # noqa: E402
from fake_prompt_tm import CALL, MODEL, PromptTM  # noqa: E402
from responses_testutil import CHAT_WEATHER, WEATHER, make_client  # noqa: E402

pytestmark = pytest.mark.timeout(120)

EOS = "<｜end▁of▁sentence｜>"
USER = {"role": "user", "content": "Weather in Paris?"}
CHAT_CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


def _chat_history(result: Any) -> dict[str, Any]:
    """A chat body: the question, the ``get_weather`` call, and ``result`` as the tool content."""
    return {
        "messages": [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": result},
        ],
        "tools": [CHAT_WEATHER],
    }


def _chat(tok: Any, body: dict[str, Any]) -> tuple[Any, PromptTM]:
    """The ``/v1/chat/completions`` answer to ``body`` and the fake engine that served it."""
    tm = PromptTM(tok, reply="It is sunny.")
    _, tc = make_client(tm)
    return tc.post("/v1/chat/completions", json={"model": MODEL, **body}), tm


def _chat_prompt(tok: Any, body: dict[str, Any]) -> str:
    """The prompt ``/v1/chat/completions`` renders for ``body`` (asserting a 200)."""
    r, tm = _chat(tok, body)
    assert r.status_code == 200, r.text
    return tok.decode(tm.received[-1].input_ids)


# --------------------------------------------------------------------------- tool results


def test_insforge_1787_tool_result_parts_are_their_text(tok: Any) -> None:
    """InsForge/InsForge#1787: a tool result sent as content parts reached the model as the raw
    JSON of the parts (``[{"type":"text",...}]``) and a ``null`` result as the word ``null``.
    Expected (the report's fix): the parts' text, and an absent result an empty one: the prompt
    DeepSeek's encoder renders for the text (``""`` for ``null``), with no JSON of the parts."""
    parts = [{"type": "text", "text": '{"temp": 20, "condition": "sunny"}'}]
    prompt = _chat_prompt(tok, _chat_history(parts))
    assert prompt == recipe_prompt(_chat_history(parts), False)
    assert prompt == _chat_prompt(tok, _chat_history(parts[0]["text"]))
    assert '"type"' not in prompt.split("<｜User｜>", 1)[1]  # the tool list's schema has its own
    none = _chat_prompt(tok, _chat_history(None))
    assert none == recipe_prompt(_chat_history(""), False)
    assert "<tool_result></tool_result>" in none and "null" not in none.split("<｜User｜>", 1)[1]


def test_insforge_1787_image_part_in_a_tool_result_is_a_400(tok: Any) -> None:
    """InsForge/InsForge#1787: a tool message cannot carry an ``image_url`` part on this path; the
    fix rejects it with a 400 rather than dropping it. Expected: a 400 naming the part
    (``messages[2].content[0]``) and nothing sent to the engine."""
    image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
    r, tm = _chat(tok, _chat_history(image))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "messages[2].content[0]"
    assert not tm.received


def test_vllm_25593_every_text_part_of_a_tool_result_is_kept(tok: Any) -> None:
    """vllm-project/vllm#25593: a tool message's content array was read from its first text
    part only, losing the rest. Expected: every part's text, in order (DeepSeek's encoder on the
    same body)."""
    parts = [{"type": "text", "text": t} for t in ("Paris: sunny.", "Rome: rain.", "Oslo: snow.")]
    prompt = _chat_prompt(tok, _chat_history(parts))
    assert prompt == recipe_prompt(_chat_history(parts), False)
    assert 0 < prompt.index("Paris: sunny.") < prompt.index("Rome: rain.") < prompt.index("Oslo: snow.")


def test_everywhere_287_text_then_call_without_reasoning_in_thinking_mode(tok: Any) -> None:
    """Sylinko/Everywhere#287: in thinking mode, a step of text then a tool call, replayed without
    ``reasoning_content``, was answered 400 "Missing reasoning_content". Expected on this server:
    200 and DeepSeek's encoder's prompt of the same history in thinking mode."""
    body = {
        "messages": [
            {"role": "user", "content": "Say something, then check the weather."},
            {"role": "assistant", "content": "Sure, checking.", "tool_calls": [CHAT_CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
        ],
        "tools": [CHAT_WEATHER],
        "chat_template_kwargs": {"thinking": True},
    }
    prompt = _chat_prompt(tok, body)
    assert prompt == recipe_prompt(body, True)
    assert "Sure, checking." in prompt


# --------------------------------------------------------------------------- Responses loops


@pytest.mark.parametrize("order", ["as_generated", "text_after_calls"])
def test_lucebox_614_responses_loop_keeps_each_turn_as_the_next_prefix(tok: Any, order: str) -> None:
    """Luce-Org/lucebox#614: an agent's next request re-sends the assistant tool-call turn just
    generated, then the result; for the prefix cache to reach through that turn, the server must
    render it as it was generated. yetone/alma-releases#81 and kolega-ai/kolega-code#403: clients
    replay a step's text after its ``function_call`` items (a DeepSeek server refused every later
    turn of such a session). Expected, for four turns of a Responses loop whose client appends
    ``response.output`` (as generated, or the text moved after the calls) and the call's output:
    every turn 200, and each prompt starts with the previous prompt, the text generated for it
    and the end-of-turn token."""
    reply = "Let me check." + CALL
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    items: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris, every day?"}]
    for turn in range(4):
        r = tc.post(
            "/v1/responses", json={"model": MODEL, "input": items, "tools": [WEATHER], "store": False}
        )
        assert r.status_code == 200, (turn, r.text)
        if turn:
            before, now = tok.decode(tm.received[-2].input_ids), tok.decode(tm.received[-1].input_ids)
            assert now.startswith(before + reply + EOS), turn
        output = [{k: v for k, v in o.items() if k != "status"} for o in r.json()["output"]]
        if order == "text_after_calls":
            output.sort(key=lambda o: o["type"] == "message")
        assert [o["type"] for o in output][-1] == (
            "message" if order == "text_after_calls" else "function_call"
        )
        call = next(o for o in output if o["type"] == "function_call")
        items += [
            *output,
            {"type": "function_call_output", "call_id": call["call_id"], "output": f"Day {turn}: sunny"},
        ]


def test_dscodex_9_hook_message_between_call_and_output_stays_servable(tok: Any) -> None:
    """fish2lab/DSCodex#9: once Codex put a PostToolUse hook's ``developer`` message between a
    ``function_call`` and its ``function_call_output``, every later request of the session
    failed ("No tool output found for tool call"), new user messages and resumes included.
    Expected: the turn with the message between and each later turn that keeps it in the history
    are 200, with the call, then its result, in every prompt."""
    tm = PromptTM(tok, reply="It is sunny.")
    _, tc = make_client(tm)
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    hook = {"type": "message", "role": "developer", "content": "Context guard: 12% of the window used."}
    items: list[dict[str, Any]] = [
        USER,
        call,
        hook,
        {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
    ]
    for turn in range(3):
        r = tc.post(
            "/v1/responses", json={"model": MODEL, "input": items, "tools": [WEATHER], "store": False}
        )
        assert r.status_code == 200, (turn, r.text)
        prompt = tok.decode(tm.received[-1].input_ids)
        assert (
            0 < prompt.index('invoke name="get_weather"') < prompt.index("<tool_result>Sunny</tool_result>")
        )
        items += [*r.json()["output"], {"role": "user", "content": f"And tomorrow {turn}?"}]


# --------------------------------------------------------------------------- Messages


def test_alma_81_messages_text_after_tool_use_renders_in_written_order(tok: Any) -> None:
    """yetone/alma-releases#81: a step holding a tool call and text was serialised with the text
    after the call, which a DeepSeek server refused. The same step on Anthropic's Messages route
    (an assistant message of ``tool_use`` then ``text``, its ``tool_result`` next) is one
    assistant turn. Expected: 200, the prompt DeepSeek's converter renders for the step in the
    order the model writes it (text, then the call)."""
    use = {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}
    text = {"type": "text", "text": "Let me check."}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Sunny"}]}

    def body(content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": content},
                result,
            ],
            "tools": [MESSAGES_WEATHER],
        }

    tm = PromptTM(tok, reply="It is sunny.")
    _, _, tc = make_clients(tm)
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 50, **body([use, text])})
    assert r.status_code == 200, r.text
    prompt = tok.decode(tm.received[-1].input_ids)
    assert prompt == recipe_messages_prompt(body([text, use]))
    assert r.json()["content"][0]["text"] == "It is sunny."

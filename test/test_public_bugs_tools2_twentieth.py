"""Public reports on OpenAI-style function calling (``tools`` / ``tool_choice`` /
``parallel_tool_calls`` on ``/v1/chat/completions``) replayed on sglang-v4's DSML tool calls
(each test names its report): tool schemas the grammar and the prompt must take as given or
refuse the way OpenAI does, call ids and streamed deltas as the ``openai`` client folds them, and
the tool results of a multi-turn loop.

The model's text is written by hand (:class:`~test_openai_tools.ScriptedTM`, which ignores any
grammar, so a text the grammar would forbid still reaches the parser). Oracles: the ``openai``
client's types and its stream accumulator, ``json.loads``, ``jsonschema`` validation against the
request's own schema, xgrammar's matcher over the grammar sent with the request, DeepSeek's own
converter and V4 encoder (the ``deepseek-recipe`` package), and OpenAI's error texts quoted in
the reports.
"""

from __future__ import annotations

import json
import re
from typing import Any

import deepseek_recipe as recipe
import jsonschema
import pytest
from chat_tools_testutil import WEATHER, ChunkTM, ScriptedTM, _both, client_for, stream_chunks
from deepseek_recipe_testutil import ids_in_written_order
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from openai.types.chat import ChatCompletion
from transformers import PreTrainedTokenizerFast

MSGS = [{"role": "user", "content": "Go."}]
#: the id format of the calls of a non-streamed response (``call_`` + 24 hex digits)
CALL_ID = re.compile(r"call_[0-9a-f]{24}")


def _fn(name: str, params: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name, **extra}
    if params is not None:
        fn["parameters"] = params
    return {"type": "function", "function": fn}


def _call_deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for c in chunks for ch in c["choices"] for d in ch["delta"].get("tool_calls") or []]


def _recipe_prompt(body: dict[str, Any]) -> str:
    """DeepSeek's own prompt text of a chat request body (its converter, then its V4 encoder),
    thinking disabled; raises ``recipe.ConversionError`` where DeepSeek's converter refuses it."""
    b = {**ids_in_written_order(body), "model": "DeepSeek-V4-Pro"}
    req = recipe.ChatCompletionRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def test_parameters_whose_type_is_not_object_are_refused_as_openai_does(tok: PreTrainedTokenizerFast) -> None:
    """alibaba/spring-ai-alibaba#4576: OpenAI answers a function whose ``parameters`` has a
    non-object ``type`` with 400 "Invalid schema for function 'sendEmailTool': schema must be a
    JSON Schema of 'type: "object"', got 'type: "string"'." A DSML call's arguments are always
    named parameters: before, such a tool was served, and under ``tool_choice`` "required" its
    grammar admitted no call at all (a model that can never finish). Oracle: the report's text."""
    client, tc = client_for(ScriptedTM(tok, "ok", grammar_enabled=True))
    for params, got in (({"type": "string"}, '"string"'), ({"type": ["array", "null"]}, '["array", "null"]')):
        tools = [WEATHER, _fn("sendEmailTool", params)]
        for choice in ("auto", "required"):
            r = tc.post(
                "/v1/chat/completions",
                json={"model": "m", "messages": MSGS, "tools": tools, "tool_choice": choice},
            )
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["param"] == "tools" and err["message"].startswith(
                "Invalid schema for function 'sendEmailTool': schema must be a JSON Schema of "
                f"'type: \"object\"', got 'type: {got}'"
            ), err
            assert "tools[1].function.parameters" in err["message"], err
    # the Responses API's flat tool shape is refused the same way
    flat = {"type": "function", "name": "sendEmailTool", "parameters": {"type": "string"}}
    r = tc.post("/v1/responses", json={"model": "m", "input": "Go.", "tools": [flat]})
    assert r.status_code == 400 and "Invalid schema for function 'sendEmailTool'" in r.text, r.text
    # an object schema (also one allowing null, or one with no "type") is served
    for params in (
        {"type": ["object", "null"], "properties": {}},
        {"properties": {"a": {"type": "integer"}}},
    ):
        r = client.chat.completions.create(model="m", messages=MSGS, tools=[_fn("f", params)])
        assert r.choices[0].message.content == "ok"


def test_tool_result_naming_an_unknown_call_id_is_refused(tok: PreTrainedTokenizerFast) -> None:
    """ollama/ollama#12395 (a 400 "mismatch between tool calls and tool results"): a ``tool``
    message whose ``tool_call_id`` is none of the ids of the assistant message it answers (a
    stale id of an older call, or a typo) was rendered as a result of some call. Oracle:
    DeepSeek's own converter, which refuses exactly these conversations and accepts the good
    one; the error text is OpenAI's."""
    _, tc = client_for(ScriptedTM(tok, "ok"))

    def call(cid: str, city: str) -> dict[str, Any]:
        return {
            "id": cid,
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
        }

    def ask(*calls: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": None, "tool_calls": list(calls)}

    def result(cid: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": cid, "content": "sunny"}

    good = MSGS + [ask(call("call_1", "A"), call("call_2", "B")), result("call_2"), result("call_1")]
    bad = {  # the unknown id: the conversation, the index of the message naming it
        "call_9": (MSGS + [ask(call("call_1", "A")), result("call_9")], 2),
        "call_7": (
            MSGS + [ask(call("call_1", "A"), call("call_2", "B")), result("call_7"), result("call_1")],
            2,
        ),
        "call_0": (
            MSGS + [ask(call("call_0", "A")), result("call_0"), ask(call("call_3", "B")), result("call_0")],
            4,
        ),
    }
    _recipe_prompt({"messages": good, "tools": [WEATHER]})
    r = tc.post("/v1/chat/completions", json={"model": "m", "messages": good, "tools": [WEATHER]})
    assert r.status_code == 200, r.text
    for cid, (msgs, at) in bad.items():
        with pytest.raises(recipe.ConversionError):
            _recipe_prompt({"messages": msgs, "tools": [WEATHER]})
        r = tc.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": [WEATHER]})
        assert r.status_code == 400, r.text
        msg = r.json()["error"]["message"]
        assert (
            f"Invalid parameter: 'tool_call_id' of '{cid}' not found in 'tool_calls' of previous message"
            in msg
        )
        assert msg.startswith(f"messages[{at}]"), msg


def test_ref_and_defs_constrain_required_and_named_calls(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#20470 (fix vllm-project/vllm#20629) and sgl-project/sglang#31692: a
    tool whose ``parameters`` use ``$defs`` / ``$ref`` (every Pydantic model with a nested model)
    broke ``tool_choice`` "required" / named, the composed grammar's ``#/$defs/...`` pointing
    nowhere; ml-explore/mlx-swift-lm#434: two tools with a same-named ``$defs`` entry must each
    keep their own. Oracle: ``jsonschema`` validation of each candidate call's arguments against
    its tool's schema decides whether xgrammar's matcher over the request's grammar accepts it."""
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string

    def item(props: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}

    def tool(name: str, props: dict[str, Any]) -> dict[str, Any]:
        return _fn(name, {
            "type": "object", "$defs": {"Item": item(props)},
            "properties": {"it": {"$ref": "#/$defs/Item"}}, "required": ["it"],
        })  # fmt: skip

    tools = [
        tool("a.make", {"x": {"type": "integer"}}),
        tool("b-make", {"y": {"type": "string", "enum": ["p", "q"]}}),
        _fn("c", {"type": "object", "definitions": {"P": {"type": "integer", "minimum": 0}},
                  "properties": {"p": {"$ref": "#/definitions/P"}}, "required": ["p"]}),
    ]  # fmt: skip
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    candidates = [
        ("a.make", "it", '{"x": 1}'), ("a.make", "it", '{"y": "p"}'), ("b-make", "it", '{"y": "q"}'),
        ("b-make", "it", '{"y": "r"}'), ("b-make", "it", '{"x": 1}'), ("c", "p", "3"), ("c", "p", "-1"),
    ]  # fmt: skip
    tm = ScriptedTM(tok, "x", grammar_enabled=True)
    client, _ = client_for(tm)
    for choice in ["required"] + [{"type": "function", "function": {"name": n}} for n in schemas]:
        client.chat.completions.create(model="m", messages=MSGS, tools=tools, tool_choice=choice)
        grammar = xgr.Grammar.from_structural_tag(tm.received[-1].sampling_params["structural_tag"])
        for name, key, value in candidates:
            args = {key: json.loads(value)}
            valid = jsonschema.Draft202012Validator(schemas[name]).is_valid(args)
            allowed = valid and (choice == "required" or choice["function"]["name"] == name)
            text = dsml_block(dsml_invoke(name, dsml_param(key, False, value)))
            assert _is_grammar_accept_string(grammar, text) == allowed, (choice, name, value)


def test_streamed_call_ids_index_and_type_are_set_once_per_call(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#18412 (``tool_calls.id`` missing when streamed), InternLM/lmdeploy#3412
    (two calls both at index 0, ids ``'0'``/``'1'`` repeated in every delta, or ``''`` later)
    and xorbitsai/inference#4237 (every call of a response had the same id): each call's first
    delta carries its own index, a fresh id of the non-streamed format, ``type`` "function" and
    the name; its later deltas carry neither id nor name. Oracle: the raw SSE chunks, validated
    by the ``openai`` client's chunk type, and the non-streamed response's ids."""
    text = "Two." + dsml_block(
        dsml_invoke("get_weather", dsml_param("city", True, "Oslo"))
        + "\n"
        + dsml_invoke("get_weather", dsml_param("city", True, "Rome"), dsml_param("days", False, "2"))
    )
    client, tc = client_for(ScriptedTM(tok, text))
    ns = client.chat.completions.create(model="m", messages=MSGS, tools=[WEATHER])
    ns_ids = [c.id for c in ns.choices[0].message.tool_calls]
    assert len(set(ns_ids)) == 2 and all(CALL_ID.fullmatch(i) for i in ns_ids), ns_ids
    deltas = _call_deltas(stream_chunks(tc, {"messages": MSGS, "tools": [WEATHER]}))
    firsts: dict[int, dict[str, Any]] = {}
    for d in deltas:
        if d["index"] not in firsts:
            firsts[d["index"]] = d
            assert d["type"] == "function" and d["function"]["name"] == "get_weather", d
            assert isinstance(d["id"], str) and CALL_ID.fullmatch(d["id"]), d
        else:
            assert d.get("id") is None and d["function"].get("name") is None, d
    assert sorted(firsts) == [0, 1]
    stream_ids = [firsts[0]["id"], firsts[1]["id"]]
    assert len(set(stream_ids + ns_ids)) == 4  # fresh per call and per response


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_choice_streams_the_same_call_shape_as_auto(tok: PreTrainedTokenizerFast, choice: Any) -> None:
    """vllm-project/vllm#47734 (``tool_choice`` "required" + streaming made ids of another format
    than the other paths) and vllm-project/vllm#16340 (the first streamed delta of a named
    ``tool_choice`` lacked ``"type": "function"``): under a forced choice the stream's first delta
    has the id format, ``type`` and name of the non-streamed call, and the deltas fold (the
    ``openai`` client's accumulator) to the non-streamed message. Oracle: the non-streamed
    response parsed by ``openai.types.chat.ChatCompletion``."""
    text = dsml_block(dsml_invoke("get_weather", dsml_param("city", True, "Lima")))
    client, tc = client_for(ScriptedTM(tok, text, grammar_enabled=True))
    body = {"messages": MSGS, "tools": [WEATHER], "tool_choice": choice}
    r = tc.post("/v1/chat/completions", json={"model": "m", **body})
    ns = ChatCompletion.model_validate(r.json()).choices[0]
    assert ns.finish_reason == "tool_calls" and CALL_ID.fullmatch(ns.message.tool_calls[0].id)
    first = _call_deltas(stream_chunks(tc, body))[0]
    assert first["type"] == "function" and first["function"]["name"] == "get_weather", first
    assert CALL_ID.fullmatch(first["id"]), first
    with client.chat.completions.stream(model="m", **body) as s:
        folded = s.get_final_completion().choices[0]
    assert folded.finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in folded.message.tool_calls] == [
        (c.function.name, json.loads(c.function.arguments)) for c in ns.message.tool_calls
    ]


@pytest.mark.parametrize("per_chunk", [1, 5])
def test_streamed_arguments_fold_to_the_non_streamed_ones(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """vllm-project/vllm#9693: streamed, a call came back with its name but ``arguments`` None,
    while the same request non-streamed had them. Here: enums, nested objects, arrays, a tool
    without parameters and one with ``strict``; the folded stream (the ``openai`` client's own
    accumulator) equals the non-streamed message, every ``arguments`` is one JSON object, and it
    validates against the request's schema of its tool (``jsonschema``)."""
    search = {
        "type": "object",
        "properties": {
            "q": {"type": "string"},
            "mode": {"enum": ["fast", "deep", None]},
            "filters": {
                "type": "object",
                "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
            },
        },
        "required": ["q"],
    }
    tools = [
        _fn("docs.search", search, strict=True),
        _fn("ping"),
        _fn("noop", {"type": "object", "properties": {}}),
    ]
    text = "Looking." + dsml_block(
        "\n".join([
            dsml_invoke("docs.search", dsml_param("q", True, 'a "b"\n\\c'), dsml_param("mode", False, "null"),
                        dsml_param("filters", False, '{"tags": ["x", "y"]}')),
            dsml_invoke("ping"),
            dsml_invoke("noop"),
        ])
    )  # fmt: skip
    tm = ChunkTM(tok, text, per_chunk=per_chunk)
    tm.grammar_enabled = True  # a strict tool gets a grammar (not run by this fake)
    client, _ = client_for(tm)
    content, calls, finish = _both(client, model="m", messages=MSGS, tools=tools)
    assert (content, finish) == ("Looking.", "tool_calls")
    got = [(n, json.loads(a)) for n, a in calls]
    assert got == [
        ("docs.search", {"q": 'a "b"\n\\c', "mode": None, "filters": {"tags": ["x", "y"]}}),
        ("ping", {}),
        ("noop", {}),
    ]
    schemas = {t["function"]["name"]: t["function"].get("parameters", {"type": "object"}) for t in tools}
    for name, args in got:
        jsonschema.validate(args, schemas[name])


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_parallel_tool_calls_false_returns_one_call_in_both_paths(
    tok: PreTrainedTokenizerFast, choice: str
) -> None:
    """vllm-project/vllm#9451 (fix vllm-project/vllm#26233: drop the calls after the first) and
    QwenLM/Qwen3#1092 (``parallel_tool_calls`` had no effect, streamed or not): with
    ``parallel_tool_calls`` false, a model that writes two calls anyway (the grammar is not run
    here) yields only its first call, non-streamed and streamed alike. Oracle: the hand-written
    text and the ``openai`` client's stream accumulator."""
    text = dsml_block(
        dsml_invoke("get_weather", dsml_param("city", True, "Xi'an"))
        + "\n"
        + dsml_invoke("get_weather", dsml_param("city", True, "Beijing"))
    )
    client, tc = client_for(ScriptedTM(tok, text, grammar_enabled=True))
    kw = {
        "model": "m",
        "messages": MSGS,
        "tools": [WEATHER],
        "tool_choice": choice,
        "parallel_tool_calls": False,
    }
    content, calls, finish = _both(client, **kw)
    assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", {"city": "Xi'an"})]
    assert finish == "tool_calls"
    body = {k: v for k, v in kw.items() if k != "model"}
    assert {d["index"] for d in _call_deltas(stream_chunks(tc, body))} == {0}
    kw["parallel_tool_calls"] = True
    assert len(_both(client, **kw)[1]) == 2


def test_tool_result_content_parts_render_as_their_text(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#22595, Neroued/ninfer#57 and InsForge/InsForge#1788: a ``tool``
    message's ``content`` may be a list of text parts (OpenAI), as agent clients send it; servers
    refused it, or rendered the list's JSON. Non-text parts have no place in a tool result (400).
    Oracle: DeepSeek's own converter and V4 encoder render the same prompt."""
    tm = ScriptedTM(tok, "ok")
    _, tc = client_for(tm)
    ask = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}  # fmt: skip
    for content in (
        [{"type": "text", "text": "4°C"}],
        [{"type": "text", "text": "4°C"}, {"type": "text", "text": "and rain"}],
    ):
        body = {
            "messages": MSGS + [ask, {"role": "tool", "tool_call_id": "call_1", "content": content}],
            "tools": [WEATHER],
        }
        r = tc.post("/v1/chat/completions", json={"model": "m", **body})
        assert r.status_code == 200, r.text
        prompt = tok.decode(tm.received[-1].input_ids)
        assert prompt == _recipe_prompt(body)
        assert '"type"' not in prompt.split("<tool_result>")[1]
    image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    body = {
        "messages": MSGS + [ask, {"role": "tool", "tool_call_id": "call_1", "content": image}],
        "tools": [WEATHER],
    }
    r = tc.post("/v1/chat/completions", json={"model": "m", **body})
    assert r.status_code == 400 and "messages[2].content[0]" in r.text, r.text


def test_numbers_written_as_strings_follow_the_schema(tok: PreTrainedTokenizerFast) -> None:
    """NousResearch/hermes-agent#100926: DeepSeek-V4-Flash served by vLLM returned numeric tool
    arguments as strings (``{"limit": "50"}``) and the tool crashed comparing ``str`` with
    ``int``. A ``string="true"`` value of an integer / number / boolean parameter that spells
    one is that JSON value; a string parameter keeps its text. Oracle: ``jsonschema``
    validation against the request's schema, and the values written."""
    schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string"},
            "limit": {"type": "integer"},
            "ratio": {"type": "number"},
            "hidden": {"type": "boolean"},
            "code": {"type": "string"},
        },
        "required": ["pattern", "limit"],
    }
    text = dsml_block(dsml_invoke(
        "search_files", dsml_param("pattern", True, "foo"), dsml_param("limit", True, "50"),
        dsml_param("ratio", True, "0.5"), dsml_param("hidden", True, "false"), dsml_param("code", True, "007"),
    ))  # fmt: skip
    for per_chunk in (1, 3):
        client, _ = client_for(ChunkTM(tok, text, per_chunk=per_chunk))
        _, calls, _ = _both(client, model="m", messages=MSGS, tools=[_fn("search_files", schema)])
        args = json.loads(calls[0][1])
        jsonschema.validate(args, schema)
        assert args == {"pattern": "foo", "limit": 50, "ratio": 0.5, "hidden": False, "code": "007"}


def test_dotted_and_dashed_names_round_trip_through_a_tool_loop(tok: PreTrainedTokenizerFast) -> None:
    """openai/codex#8174 and github/copilot-sdk#743: MCP tool names with dots (``drive.search``)
    and dashes (``resolve-library-id``), which the MCP spec allows, were refused or mangled. Here
    they are served: the calls parse under their exact names (streamed and not, the name also
    forced by a named ``tool_choice``), and the next turn's prompt, the calls and their results
    echoed back, is DeepSeek's own rendering. Oracles: the written names, ``deepseek-recipe``."""
    names = ["drive.search", "resolve-library-id", "mcp__ctx7__query-docs"]
    tools = [
        _fn(n, {"type": "object", "properties": {"q": {"type": "string"}}}, description=n) for n in names
    ]
    text = dsml_block("\n".join(dsml_invoke(n, dsml_param("q", True, n[::-1])) for n in names))
    client, _ = client_for(ChunkTM(tok, text))
    _, calls, finish = _both(client, model="m", messages=MSGS, tools=tools)
    assert [(n, json.loads(a)) for n, a in calls] == [
        (n, {"q": n[::-1]}) for n in names
    ] and finish == "tool_calls"
    tm = ScriptedTM(tok, text, grammar_enabled=True)
    client, tc = client_for(tm)
    named = {"type": "function", "function": {"name": "resolve-library-id"}}
    r = client.chat.completions.create(model="m", messages=MSGS, tools=tools, tool_choice=named)
    assert r.choices[0].message.tool_calls[0].function.name in names
    loop = (
        MSGS
        + [r.choices[0].message.model_dump(exclude_none=True)]
        + [
            {"role": "tool", "tool_call_id": c.id, "content": f"result of {c.function.name}"}
            for c in r.choices[0].message.tool_calls
        ]
    )
    # DeepSeek's converter lays calls out in the order of their ids (its own ids count up), so the
    # ids echoed back get a counting prefix; the prompt has no ids
    text = json.dumps({"messages": loop, "tools": tools})
    for k, c in enumerate(r.choices[0].message.tool_calls):
        text = text.replace(c.id, f"call_{k:02d}_{c.id[5:]}")
    body = json.loads(text)
    assert tc.post("/v1/chat/completions", json={"model": "m", **body}).status_code == 200
    # DeepSeek's converter takes OpenAI's name pattern (no dots), so it renders the body with the
    # dots spelled out; the rendering does not depend on the names' characters
    dotless = json.loads(json.dumps(body).replace(".", "_DOT_"))
    assert tok.decode(tm.received[-1].input_ids) == _recipe_prompt(dotless).replace("_DOT_", ".")


def test_a_hundred_large_tools_are_all_listed_and_all_callable(tok: PreTrainedTokenizerFast) -> None:
    """ggml-org/llama.cpp#25895: past a cumulative tool-schema size of about 100 kB (58 tools
    there) the tool-call grammar failed to build and every request got a 400. Here 120 tools of
    about 1 kB each under ``tool_choice`` "required": the request is served, the prompt lists
    every tool, and the grammar admits a schema-valid call of the last tool while refusing an
    unknown name and a value outside an enum. Oracles: the request's own tool list (each
    function's JSON line, ``json.loads``) and xgrammar's matcher over the grammar sent."""
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string

    def schema(k: int) -> dict[str, Any]:
        props: dict[str, Any] = {
            f"field_{j}": {"type": "string", "description": f"Field {j} of tool {k}: " + "x" * 400}
            for j in range(2)
        }
        props["unit"] = {"type": "string", "enum": ["metric", "imperial"]}
        props["count"] = {"type": "integer", "minimum": 0}
        return {"type": "object", "properties": props, "required": ["unit"]}

    tools = [_fn(f"mcp__server__tool_{k}", schema(k), description=f"Tool number {k}.") for k in range(120)]
    assert len(json.dumps(tools)) > 100_000
    tm = ScriptedTM(tok, "x", grammar_enabled=True)
    client, _ = client_for(tm)
    client.chat.completions.create(model="m", messages=MSGS, tools=tools, tool_choice="required")
    prompt = tok.decode(tm.received[-1].input_ids)
    listed = [json.loads(x) for x in prompt.split("\n") if x.startswith('{"name": "mcp__server__tool_')]
    assert listed == [t["function"] for t in tools]
    grammar = xgr.Grammar.from_structural_tag(tm.received[-1].sampling_params["structural_tag"])

    def call(name: str, unit: str) -> str:
        return dsml_block(dsml_invoke(name, dsml_param("unit", True, unit), dsml_param("count", False, "2")))

    assert _is_grammar_accept_string(grammar, call("mcp__server__tool_119", "metric"))
    assert not _is_grammar_accept_string(grammar, call("mcp__server__tool_120", "metric"))
    assert not _is_grammar_accept_string(grammar, call("mcp__server__tool_119", "kelvin"))

"""Public bug reports of OpenAI-compatible servers' ``/v1/responses`` (vLLM, SGLang, agent SDKs in
front of them), replayed on an in-process app of the OpenAI router over a fake engine (each test
names its report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: DeepSeek's own
Responses converter and V4 encoder (``deepseek-recipe``), xgrammar's own matcher of JSON objects
(which texts some continuation makes valid JSON), the ``openai`` client's types, and a cold run
of the same conversation.
"""

from __future__ import annotations

import json
import random
from typing import Any

import deepseek_recipe as recipe
import openai
import pytest
from deepseek_recipe_testutil import ids_in_written_order
from fake_prompt_tm import MODEL, PromptTM
from responses_testutil import CHAT_WEATHER, WEATHER, make_client, sse
from sglang_v4.entrypoints.strict_json import is_json_object_prefix
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)


def _prompt(tok: PreTrainedTokenizerFast, tm: PromptTM) -> str:
    """The text of the engine's latest prompt."""
    return tok.decode(tm.received[-1].input_ids)


def _recipe_prompt(body: dict[str, Any]) -> str:
    """DeepSeek's own prompt text of a Responses body (its ``deepseek-recipe`` Responses converter
    and V4 encoder, thinking off)."""
    req = recipe.ResponsesRequest({**ids_in_written_order(body), "model": "DeepSeek-V4-Pro"})
    return (
        recipe.DeepseekV4Encoding()
        .render_conversation(req.convert(recipe.ConversionOptions(default_thinking_mode=False)).conversation)
        .prompt
    )


def _xgrammar_object_prefix() -> Any:
    """A predicate: xgrammar's own matcher of the JSON-object grammar accepts the text as a
    beginning (leading whitespace, and whitespace after a whole object, allowed)."""
    xgr = pytest.importorskip("xgrammar")
    grammar = xgr.Grammar.from_json_schema('{"type": "object"}', any_whitespace=True)
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([f"<t{i}>" for i in range(8)])).compile_grammar(grammar)

    def accepts(text: str) -> bool:
        body = text.lstrip()
        matcher = xgr.GrammarMatcher(compiled)
        if matcher.accept_string(body):
            return bool(body)
        tail = body.rstrip()  # whitespace after a whole object
        matcher = xgr.GrammarMatcher(compiled)
        return bool(tail) and tail != body and bool(matcher.accept_string(tail)) and matcher.is_completed()

    return accepts


# --------------------------------------------------------------------------- replayed call arguments


def _call_body(arguments: str) -> dict[str, Any]:
    """A Responses body replaying one ``function_call`` with ``arguments`` and its output."""
    return {
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": arguments,
                "status": "incomplete",
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
        "tools": [WEATHER],
    }


#: replayed arguments that are the start of a JSON object but no beginning of any valid one
#: (an unescaped quote, a missing comma, a bad literal, a leading zero, a trailing comma)
_MALFORMED = [
    '{"a": "x" "b"',
    '{"command": "echo "hi',
    '{"city": "Paris" "unit": "c"',
    '{"days": [1 2',
    '{"city": "Paris", "ok": tru}',
    '{"n": 01',
    '{"city": "Paris",}',
]


@pytest.mark.parametrize("arguments", _MALFORMED)
def test_malformed_call_arguments_are_replayed_as_written(
    tok: PreTrainedTokenizerFast, arguments: str
) -> None:
    """vllm-project/vllm#43995: a call whose arguments hold an unescaped quote is not JSON; read
    with a lenient partial parser it silently lost what came after the error. Here a replayed
    ``function_call`` whose ``arguments`` begin like a JSON object but are no beginning of any
    valid one (xgrammar's JSON-object matcher refuses them) was replayed with only the members
    jiter's partial mode read before the error (``{"a": "x" "b"`` as ``{"a": "x"}``). Expected:
    the arguments are kept as written, rendered as DeepSeek's own Responses converter and V4
    encoder render non-JSON arguments (one ``arguments`` string parameter): the prompt is theirs."""
    assert not _xgrammar_object_prefix()(arguments)
    tm = PromptTM(tok, reply="Sunny.")
    _, tc = make_client(tm)
    body = _call_body(arguments)
    r = tc.post("/v1/responses", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    want = _recipe_prompt(body)
    assert arguments in want
    assert _prompt(tok, tm) == want


def test_genuine_prefix_is_still_replayed_with_its_complete_members(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#43995's control: arguments that are a true beginning of a JSON object
    (xgrammar's matcher accepts them: a call cut by ``max_output_tokens``) keep the members that
    are complete, an unfinished trailing value left out: the prompt is DeepSeek's prompt of the
    same call with those members as whole JSON arguments."""
    accepts = _xgrammar_object_prefix()
    tm = PromptTM(tok, reply="Sunny.")
    _, tc = make_client(tm)
    for cut, members in (
        ('{"city": "Paris", "unit": "c', {"city": "Paris"}),
        ('{"city": "Paris", "days": [1, 2', {"city": "Paris", "days": [1, 2]}),
        ('{"city": "Paris", "ok": tr', {"city": "Paris"}),
    ):
        assert accepts(cut)
        r = tc.post("/v1/responses", json={"model": MODEL, **_call_body(cut)})
        assert r.status_code == 200, r.text
        assert _prompt(tok, tm) == _recipe_prompt(_call_body(json.dumps(members))), cut


def test_json_object_prefix_agrees_with_xgrammar() -> None:
    """vllm-project/vllm#43995's kind: which argument texts some continuation makes one JSON
    object. Oracle: xgrammar's own matcher of the JSON-object grammar, on every beginning of
    several object texts (all escapes, numbers, literals, nesting, whitespace) and on texts with
    one character inserted or removed (seeded, so the cases are the same on every run)."""
    accepts = _xgrammar_object_prefix()
    rng = random.Random(23)
    docs = [
        json.dumps({"a": "x", "b": [1, -2.5e3, True, None, {"c": 'd"\\\u00e9\n'}], "\u00e9": {}}),
        '{ "k" : [ 0 , 1.0E+2 , false, -0.5e-1 ] , "z" : null, "u": "\\u00E9\\/" }',
        '{"a":[[],{}]}',
    ]
    alphabet = list('{}[]":,-+.0123456789eEtrufalsn\\u abAF\n\x01\u00e9')
    cases: set[str] = {"", " ", "[]", '"x"', "1", "{} {}", "{}x"}
    for doc in docs:
        for i in range(len(doc) + 1):
            p = doc[:i]
            cases.add(p)
            cases.update(
                p[:j] + rng.choice(alphabet) + p[j:] for j in rng.sample(range(i + 1), min(i + 1, 3))
            )
            cases.update(p[:j] + p[j + 1 :] for j in rng.sample(range(i), min(i, 3)))
    for _ in range(1500):
        cases.add("{" + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))))
    wrong = [c for c in sorted(cases) if is_json_object_prefix(c) != accepts(c)]
    assert not wrong, wrong[:10]
    assert (
        sum(map(is_json_object_prefix, cases)) > 200
        and sum(not is_json_object_prefix(c) for c in cases) > 200
    )


#: argument texts Python's ``json`` reads but RFC 8259 (and DeepSeek's converter) does not:
#: non-finite numbers, a number beyond a double, lone surrogate escapes (in a value, in a key)
_LENIENT = [
    '{"a": NaN}',
    '{"a": Infinity}',
    '{"city": "Paris", "t": -Infinity}',
    '{"a": 1e999}',
    '{"a": "\\ud800"}',
    '{"\\udc00": 1}',
    '{"city": "Paris", "t": NaN, "u": "c',
]


@pytest.mark.parametrize("arguments", _LENIENT)
def test_arguments_python_alone_reads_as_json_are_replayed_as_written(
    tok: PreTrainedTokenizerFast, arguments: str
) -> None:
    """python/cpython#121189 (``json.loads`` accepts ``NaN`` / ``Infinity``, which are not JSON)
    and frenck/probatio#76 (reject them on the standard-library path, as strict parsers do): a
    replayed call whose ``arguments`` hold such values was read as an object (``NaN`` written
    into the prompt as a parameter value); one with a lone ``\\ud800`` escape was a 500 (the
    decoded string cannot be encoded as UTF-8). Expected, on ``/v1/responses`` and on
    ``/v1/chat/completions``: 200 and the prompt DeepSeek's own converter and V4 encoder render
    for the same body (such text is not JSON to them: one ``arguments`` string parameter)."""
    tm = PromptTM(tok, reply="Sunny.")
    _, tc = make_client(tm)
    body = _call_body(arguments)
    r = tc.post("/v1/responses", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    assert _prompt(tok, tm) == _recipe_prompt(body)
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    chat = {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "tools": [CHAT_WEATHER],
    }
    r = tc.post("/v1/chat/completions", json={"model": MODEL, **chat})
    assert r.status_code == 200, r.text
    wire = {**ids_in_written_order(chat), "model": "DeepSeek-V4-Pro", "thinking": {"type": "disabled"}}
    conv = recipe.ChatCompletionRequest(wire).convert(recipe.ConversionOptions(default_thinking_mode=False))
    assert _prompt(tok, tm) == recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt


# --------------------------------------------------------------------------- stored responses


def test_cancelling_a_foreground_response_is_a_400_that_changes_nothing(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#38002: ``POST /v1/responses/{id}/cancel`` on a stored response created
    without ``background`` answered 200 with the response. OpenAI's reference: only responses
    created with ``background=true`` can be cancelled. Expected: the ``openai`` client's
    ``BadRequestError`` (a 400 in OpenAI's error shape), the stored response unchanged (``GET``
    gives the same object, status ``completed``), no engine request; an unknown id is a 404."""
    tm = PromptTM(tok, reply="Hello.")
    client, tc = make_client(tm)
    created = client.responses.create(model=MODEL, input="hi")
    sent = len(tm.received)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.cancel(created.id)
    assert e.value.status_code == 400 and isinstance(e.value.body, dict) and e.value.body.get("message")
    after = client.responses.retrieve(created.id)
    assert after.status == "completed" and after.model_dump() == created.model_dump()
    assert len(tm.received) == sent
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_" + "0" * 32)


def test_previous_response_id_replays_the_stored_conversation(tok: PreTrainedTokenizerFast) -> None:
    """Blaizzy/mlx-vlm#1046 (``previous_response_id`` accepted and ignored) and
    digitalocean/gradient-python#96 (a ``store: true`` id neither retrievable nor continuable).
    Expected: the stored response is retrievable (the ``openai`` client's ``retrieve`` gives the
    created object), and a request continuing it renders the prompt DeepSeek's own Responses
    converter and V4 encoder render for the whole conversation sent at once (two turns deep)."""
    tm = PromptTM(tok, reply="Noted.")
    client, tc = make_client(tm)
    first = client.responses.create(model=MODEL, input="The secret word is purple-marmot-42. Reply OK.")
    assert client.responses.retrieve(first.id).model_dump() == first.model_dump()
    second = client.responses.create(
        model=MODEL, input="What is the secret word?", previous_response_id=first.id
    )
    third = client.responses.create(model=MODEL, input="Spell it.", previous_response_id=second.id)
    assert third.previous_response_id == second.id
    whole = {
        "input": [
            {"role": "user", "content": "The secret word is purple-marmot-42. Reply OK."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "What is the secret word?"},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "Spell it."},
        ]
    }
    assert _prompt(tok, tm) == _recipe_prompt(whole)


def test_input_items_of_id_less_input_page_to_the_end(tok: PreTrainedTokenizerFast) -> None:
    """praxis-proxy/ai#548: ``GET /v1/responses/{id}/input_items`` over an ``input`` of items sent
    without ``id`` answered ``has_more: true`` with ``last_id: null``, so a client had no
    ``after`` to go on with. Expected: every page with more after it names a ``last_id``; the
    ``openai`` client's cursor pagination (which follows ``last_id`` as ``after``) walks all
    seven items in the order sent (``asc``) and reversed (``desc``, the default)."""
    tm = PromptTM(tok, reply="Fine.")
    client, tc = make_client(tm)
    texts = [f"turn {i}" for i in range(7)]
    items = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]
    rid = client.responses.create(model=MODEL, input=items).id
    page = tc.get(f"/v1/responses/{rid}/input_items", params={"limit": 2, "order": "asc"}).json()
    assert page["has_more"] is True and isinstance(page["last_id"], str) and page["last_id"]

    def walk(**kw: Any) -> list[str]:
        return [item.content[0].text for item in client.responses.input_items.list(rid, limit=2, **kw)]

    assert walk(order="asc") == texts
    assert walk() == texts[::-1]


# --------------------------------------------------------------------------- request fields


def test_truncation_disabled_is_accepted_and_keeps_the_whole_conversation(
    tok: PreTrainedTokenizerFast,
) -> None:
    """stdapi-ai/stdapi.ai#160: ``truncation: "disabled"`` (OpenAI's default, what LlamaIndex's
    ``OpenAIResponses`` sends on every request) was a 400; Arthur-Ficial/apfel#391: with it the
    history was trimmed anyway. Expected: accepted and echoed (the ``openai`` client's
    ``Response.truncation``), the prompt DeepSeek's converter and encoder render for the whole
    conversation, the same as the request without the field."""
    tm = PromptTM(tok, reply="Sure.")
    client, tc = make_client(tm)
    convo = [
        {"role": "user", "content": "One."},
        {"role": "assistant", "content": "Two."},
        {"role": "user", "content": "Three."},
    ]
    r = client.responses.create(model=MODEL, input=convo, truncation="disabled")
    assert r.truncation == "disabled" and r.status == "completed"
    with_field = _prompt(tok, tm)
    client.responses.create(model=MODEL, input=convo)
    assert with_field == _prompt(tok, tm) == _recipe_prompt({"input": convo})


@pytest.mark.parametrize("schema", ["x", 5, [], None])
def test_non_object_text_format_schema_is_a_400(tok: PreTrainedTokenizerFast, schema: Any) -> None:
    """smg-project/smg#2562: a ``json_schema`` format whose ``schema`` is no object (the string
    ``"x"`` of Kimi's vendor verifier) reached the grammar compiler and came back as a 500.
    Expected on ``text.format``: the ``openai`` client's ``BadRequestError`` naming
    ``text.format.schema``, no engine request; ``{}`` (any JSON) stays valid."""
    tm = PromptTM(tok, reply="{}")
    client, tc = make_client(tm)
    fmt = {"type": "json_schema", "name": "n", "schema": schema}
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", text={"format": fmt})  # type: ignore[typeddict-item]
    assert e.value.body["param"] == "text.format.schema" and not tm.received
    ok = client.responses.create(model=MODEL, input="hi", text={"format": {**fmt, "schema": {}}})
    assert ok.status == "completed" and json.loads(ok.output_text) == {}


def test_image_in_a_tool_output_is_refused_like_a_user_image_not_sent_as_text(
    tok: PreTrainedTokenizerFast,
) -> None:
    """CommandCodeAI/command-code#902 (an ``input_image`` inside ``function_call_output.output``
    flattened into base64 text, billed and unseen) and router-for-me/CLIProxyAPI#5039 (the same
    image silently dropped). On a text-only model the honest answer is the one a user message's
    image gets: a 400 naming the part (``input[2].output[1]``), no engine request, and never the
    data URL as prompt text. The body is a valid ``openai`` ``ResponseInputParam`` (its
    ``function_call_output`` list form), so the refusal is about the image, not the shape."""
    from openai.types.responses import ResponseInputItemParam
    from pydantic import TypeAdapter

    tm = PromptTM(tok, reply="IMAGE_SEEN")
    _, tc = make_client(tm)
    data_url = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    parts = [
        {"type": "input_text", "text": "Read image file [image/png]"},
        {"type": "input_image", "detail": "auto", "image_url": data_url},
    ]
    read = {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "Reply IMAGE_SEEN or IMAGE_NOT_SEEN."}]},
        {"type": "function_call", "id": "fc_test", "call_id": "call_test", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_test", "output": parts},
    ]
    for item in items:
        TypeAdapter(ResponseInputItemParam).validate_python(item)
    r = tc.post("/v1/responses", json={"model": MODEL, "input": items, "tools": [read]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[2].output[1]"
    as_user = [{"role": "user", "content": parts}]
    u = tc.post("/v1/responses", json={"model": MODEL, "input": as_user})
    assert u.status_code == 400 and u.json()["error"]["param"] == "input[0].content[1]"
    assert not tm.received


# --------------------------------------------------------------------------- streamed calls

_D = "｜DSML｜"
#: two ``get_weather`` calls in one DSML block, the second with a quote in its value
_TWO_CALLS = (
    f'\n\n<{_D}tool_calls>\n<{_D}invoke name="get_weather">\n'
    f'<{_D}parameter name="city" string="true">Paris</{_D}parameter>\n</{_D}invoke>\n'
    f'<{_D}invoke name="get_weather">\n<{_D}parameter name="city" string="true">Rome "old" town</{_D}parameter>\n'
    f'<{_D}parameter name="days" string="false">2</{_D}parameter>\n</{_D}invoke>\n</{_D}tool_calls>'
)


def test_parallel_call_argument_deltas_name_their_own_item(tok: PreTrainedTokenizerFast) -> None:
    """can1357/oh-my-pi#2619: with two function calls open in one streamed response, argument
    deltas were attached to the wrong call (a client routing them by one "current" item; the
    stream must let it route by ``item_id`` / ``output_index``). Expected: every
    ``response.function_call_arguments.delta`` names the ``item_id`` of the item its
    ``output_index`` added; the deltas of each item join to its ``arguments.done`` text, which
    ``json.loads`` reads as the call's own arguments; the ``openai`` client's stream helper
    builds the same output items as the non-streamed response. voocel/litellm#4 and
    Oaklight/llm-rosetta#86 (a call's name and ids missing where clients read them): each
    ``function_call`` item is announced by ``response.output_item.added`` with its ``name``,
    ``call_id`` and ``id`` already set, those of the finished item."""
    tm = PromptTM(tok, reply="Both." + _TWO_CALLS)
    client, tc = make_client(tm)
    s = tc.post("/v1/responses", json={"model": MODEL, "input": "W?", "tools": [WEATHER], "stream": True})
    events = sse(s.text)
    added = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.added"}
    joined: dict[str, str] = {}
    for e in events:
        if e["type"] == "response.function_call_arguments.delta":
            assert added[e["output_index"]]["id"] == e["item_id"], e
            joined[e["item_id"]] = joined.get(e["item_id"], "") + e["delta"]
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [json.loads(e["arguments"]) for e in done] == [
        {"city": "Paris"},
        {"city": 'Rome "old" town', "days": 2},
    ]
    assert all(joined[e["item_id"]] == e["arguments"] for e in done)
    assert [added[e["output_index"]]["id"] for e in done] == [e["item_id"] for e in done]
    finished = {e["item"]["id"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    for e in done:
        first, last = added[e["output_index"]], finished[e["item_id"]]
        assert first["type"] == "function_call" and first["name"] == last["name"] == "get_weather"
        assert first["call_id"] == last["call_id"] and first["call_id"].startswith("call_")
    plain = client.responses.create(model=MODEL, input="W?", tools=[WEATHER])
    with client.responses.stream(model=MODEL, input="W?", tools=[WEATHER]) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()

    def calls(r: Any) -> list[tuple[str, str]]:
        return [(o.name, o.arguments) for o in r.output if o.type == "function_call"]

    assert calls(final) == calls(plain) == [(e.get("name", "get_weather"), e["arguments"]) for e in done]

"""Seeded random chat requests, served in process by ``POST /v1/chat/completions``, must constrain
the decoding as DeepSeek's own converter (``deepseek-recipe``, what SGLang serves DeepSeek-V4
with) says they should: its ``ConversationRequest.inference_options.output_constraint`` (kind
``json`` / ``regex`` / ``tool_call`` / ``tool_call_required`` and its schema text) against the
grammar the route hands the engine (``json_schema`` / ``regex``, or the ``structural_tag`` that
puts either after the reasoning, or the DSML tool-call tag), and the same requests refused.

Requests mix ``response_format`` (``text``, ``json_object``, ``json_schema`` strict or not,
DeepSeek's ``regex``), zero to two tools (``strict`` or not, ``defer_loading``), ``tool_choice``
(unset, ``none``, ``auto``, ``required``, a named function) and thinking on and off. Differences
left out of the set or read through, each a documented choice of this server:

* ``json_object``: the converter's constraint is "any JSON value" (an empty schema); this server
  constrains the answer to a JSON object, as OpenAI defines the format;
* tools under ``auto``: the converter names every tool's schema; this server constrains the
  arguments of ``strict`` tools only (OpenAI's reading of ``strict``, ``structural_tag.py``), so
  with no strict tool and no answer grammar it builds no grammar;
* ``tool_choice`` ``required`` / a named function in thinking mode: the converter refuses them,
  this server forces the call after the reasoning;
* ``tool_choice`` ``required`` / a named function beside a ``response_format`` grammar: the
  converter keeps the call constraint only, this server refuses the pair (400 naming
  ``tool_choice``, ``request_sampling.py``);
* strict and non-strict tools in one request: the converter refuses the mix, this server reads
  ``strict`` per function as OpenAI does; the set's tools share one ``strict`` value;
* strict tools beside any ``response_format`` (``text`` too): the converter refuses them, this
  server constrains "an answer in the format, or calls" (``answer_or_tool_calls``); beside non-strict
  tools the converter's constraint is the calls' alone, this server's the same "answer or calls";
* strict schemas whose ``required`` leaves out a property: the converter refuses them (OpenAI's
  strict-mode rule), this server reads them as JSON Schema does; the set's schemas are closed
  with every property required, which both readings keep as sent.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

import deepseek_recipe as recipe  # noqa: E402
from deepseek_recipe_testutil import recipe_body  # noqa: E402
from openai_fake_tm import FakeTM  # noqa: E402
from openai_fake_tm import app_client as _client  # noqa: E402

CHAT = "/v1/chat/completions"
SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["x", "y"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "p": {
                "type": "object",
                "properties": {"q": {"type": "boolean"}},
                "required": ["q"],
                "additionalProperties": False,
            }
        },
        "required": ["p"],
        "additionalProperties": False,
    },
]
REGEXES = ["[ab]+", "(yes|no)", r"\d{3}-\d{4}"]


def _request(rng: random.Random) -> tuple[dict[str, Any], bool]:
    """``(body, thinking)``: a chat body in OpenAI's terms within the module docstring's set."""
    thinking = rng.random() < 0.5
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Answer in JSON, please."}]}
    kind = rng.choice([None, "text", "json_object", "json_schema", "json_schema", "regex"])
    if kind == "text":
        body["response_format"] = {"type": "text"}
    elif kind == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif kind == "json_schema":
        spec: dict[str, Any] = {"name": "n", "schema": rng.choice(SCHEMAS)}
        if (strict := rng.choice([None, True, False])) is not None:
            spec["strict"] = strict
        body["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif kind == "regex":
        body["response_format"] = {"type": "regex", "regex": rng.choice(REGEXES)}
    tools = []
    # one strict value for all tools, true only without a response_format (module docstring)
    strict_tools = rng.choice([None, True, False] if kind is None else [None, False])
    for i in range(rng.choice([0, 0, 1, 2])):
        fn: dict[str, Any] = {"name": f"f{i}", "description": f"Tool {i}.", "parameters": rng.choice(SCHEMAS)}
        if strict_tools is not None:
            fn["strict"] = strict_tools
        tool: dict[str, Any] = {"type": "function", "function": fn}
        if rng.random() < 0.2:
            tool["defer_loading"] = True
        tools.append(tool)
    if tools:
        body["tools"] = tools
        forcing = not thinking and kind in (None, "text")
        choices: list[Any] = [None, "none", "auto"] + (["required", "named"] if forcing else [])
        choice = rng.choice(choices)
        if choice == "named":
            choice = {"type": "function", "function": {"name": rng.choice(tools)["function"]["name"]}}
        if choice is not None:
            body["tool_choice"] = choice
    return body, thinking


def _recipe_constraint(body: dict[str, Any], thinking: bool) -> tuple[str | None, str]:
    """The converter's ``(kind, schema)`` of ``body`` (``(None, "")``: none)."""
    req = recipe.ChatCompletionRequest(recipe_body(body, thinking)).convert(recipe.ConversionOptions())
    c = req.inference_options.output_constraint
    return (None, "") if c is None else (c.kind, c.schema)


def _nodes(x: Any) -> list[dict[str, Any]]:
    """Every JSON object inside ``x``, depth first."""
    if isinstance(x, dict):
        return [x] + [n for v in x.values() for n in _nodes(v)]
    if isinstance(x, list):
        return [n for v in x for n in _nodes(v)]
    return []


def _invokes(tag: dict[str, Any]) -> dict[str, Any]:
    """Tool name -> the argument schema (``None``: free arguments, also as ``true`` / ``{}``) of each
    DSML invoke of ``tag``."""
    out = {}
    for n in _nodes(tag):
        begin = n.get("begin")
        if n.get("type") == "tag" and isinstance(begin, str) and "invoke name=" in begin:
            content = n.get("content") or {}
            schema = content.get("json_schema") if content.get("type") == "json_schema" else None
            out[begin.split('"')[1]] = None if schema in (None, True, {}) else schema
    return out


def _answer_grammar(sp: dict[str, Any]) -> tuple[str, Any] | None:
    """The answer grammar of the engine request's sampling parameters: ``("json", schema)`` or
    ``("regex", pattern)``, whether sent bare or after the reasoning inside a structural tag."""
    if sp.get("json_schema") is not None:
        return "json", json.loads(sp["json_schema"])
    if sp.get("regex") is not None:
        return "regex", sp["regex"]
    if sp.get("structural_tag") is None:
        return None
    tag = json.loads(sp["structural_tag"])
    skip = {
        id(n)
        for t in _nodes(tag)
        if t.get("type") == "tag" and "invoke" in str(t.get("begin"))
        for n in _nodes(t)
    }
    for n in _nodes(tag):
        if id(n) in skip:
            continue
        if n.get("type") == "json_schema":
            return "json", n["json_schema"]
        if n.get("type") == "regex":
            return "regex", n["pattern"]
    return None


@pytest.fixture(scope="module")
def served(tok: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``served(body, thinking)``: the HTTP status and the engine request's sampling parameters."""
    d: Path = tmp_path_factory.mktemp("ckpt")
    tm = FakeTM(tok, reply="ok")
    tm.grammar_enabled = True
    client = _client(tm, model_path=str(d))

    def run(body: dict[str, Any], thinking: bool) -> tuple[int, dict[str, Any]]:
        tm.received.clear()
        kw = {"model": "dsv4-test", "max_tokens": 4, **body, "chat_template_kwargs": {"thinking": thinking}}
        r = client.post(CHAT, json=kw)
        return r.status_code, (tm.received[0].sampling_params if r.status_code == 200 else r.json())

    return run


def _check(served: Any, body: dict[str, Any], thinking: bool) -> None:
    kind, schema = _recipe_constraint(body, thinking)
    status, sp = served(body, thinking)
    assert status == 200, (body, sp)
    tag = json.loads(sp["structural_tag"]) if sp.get("structural_tag") else {}
    calls = _invokes(tag)
    rf = body.get("response_format") or {}
    if kind == "json":
        want = {"type": "object"} if rf.get("type") == "json_object" and schema == "" else json.loads(schema)
        got = _answer_grammar(sp)
        assert got is not None and got[0] == "json", (body, sp)
        # ``additionalProperties: {}`` (any other keys) is JSON Schema's default, written out or not
        got_schema = {k: v for k, v in got[1].items() if (k, v) != ("additionalProperties", {})}
        assert got_schema == want, (body, sp)
    elif kind == "regex":
        assert _answer_grammar(sp) == ("regex", schema), (body, sp)
    elif kind == "tool_call_required":
        want_calls = {t["function"]["name"]: t["function"]["parameters"] for t in json.loads(schema)}
        assert calls == want_calls, (body, sp)
        assert _answer_grammar(sp) is None, (body, sp)
    elif kind == "tool_call":
        names = {t["function"]["name"] for t in json.loads(schema)}
        grammar = _answer_grammar(sp)
        strict = {
            t["function"]["name"]: t["function"]["parameters"]
            for t in body["tools"]
            if t["function"].get("strict")
        }
        if not strict and rf.get("type") in (None, "text"):
            assert not calls and grammar is None, (body, sp)
        else:  # every offered tool callable, a strict one's arguments under its schema
            assert set(calls) == names, (body, sp)
            assert {n: s for n, s in calls.items() if s is not None} == strict, (body, sp)
    else:
        assert kind is None
        assert not calls and _answer_grammar(sp) is None, (body, sp)


@pytest.mark.parametrize("seed", range(4))
def test_random_requests_constrain_as_deepseek_recipe(served: Any, seed: int) -> None:
    """40 requests per seed: the route's grammar is the converter's output constraint."""
    rng = random.Random(seed)
    for _ in range(40):
        _check(served, *_request(rng))


@pytest.mark.parametrize("thinking", [False, True])
def test_regex_response_format_constrains_the_answer(served: Any, thinking: bool) -> None:
    """DeepSeek's ``{"type": "regex", "regex": R}`` format: the converter constrains the answer to
    ``R`` (adding nothing to the prompt); the route refused the type with a 400."""
    body = {
        "messages": [{"role": "user", "content": "Yes or no?"}],
        "response_format": {"type": "regex", "regex": "(yes|no)"},
    }
    assert _recipe_constraint(body, thinking) == ("regex", "(yes|no)")
    _check(served, body, thinking)


@pytest.mark.parametrize("regex", [None, 5, ["a"]])
def test_regex_response_format_without_a_string_is_refused(served: Any, regex: Any) -> None:
    """A ``regex`` format without a string pattern: the converter refuses the body, and so does
    the route (400 naming ``response_format``, nothing queued)."""
    rf: dict[str, Any] = {"type": "regex"} if regex is None else {"type": "regex", "regex": regex}
    body = {"messages": [{"role": "user", "content": "hi"}], "response_format": rf}
    with pytest.raises(Exception, match="regex|expected a string"):
        _recipe_constraint(body, False)
    status, err = served(body, False)
    assert status == 400 and err["error"]["param"] == "response_format", err

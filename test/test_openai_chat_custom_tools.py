"""``/v1/chat/completions`` custom tools (``{"type": "custom", "custom": {"name", "description",
"format"}}``, the ``openai`` client's ``ChatCompletionCustomToolParam``): the call comes back as
``{"type": "custom", "id", "custom": {"name", "input"}}`` with the free-form input, streamed as
``custom`` deltas; a custom call in the history replays as the model's own call; a ``format``
grammar (regex, Lark) constrains the decoding of the input; ``tool_choice`` ``{"type": "custom",
"custom": {"name"}}`` forces the tool. In-process app of the OpenAI router over
``fake_prompt_tm.PromptTM``.

Oracles: the ``openai`` client's own types (``ChatCompletion.model_validate``,
``ChatCompletionMessageCustomToolCall``, the chunks as the client's stream reads them); the text
the model wrote (the fake's scripted reply); the prompt of the same conversation through
``/v1/responses`` custom tool items; ``re.fullmatch`` for a regex format and hand-listed strings
of a Lark grammar's language, read through xgrammar's matcher of the request's tool-call grammar.
"""

from __future__ import annotations

import json
import re
from typing import Any

import openai
import pytest
from fake_prompt_tm import CALL, MODEL, PromptTM
from openai.types.chat import ChatCompletion, ChatCompletionMessageCustomToolCall
from responses_testutil import CHAT_WEATHER, LARK, LARK_CASES, make_client
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

D = "｜DSML｜"
PATCH = '*** Begin Patch\n*** Add File: a.py\n+print("hi \\\\ there")\n*** End Patch'
APPLY_PATCH = {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch to files"}}
USER = {"role": "user", "content": "add a.py"}
REGEX = r"(add|remove) [a-z]+\.py"


def _custom_call(name: str, text: str) -> str:
    """A DSML call of a custom tool as the model writes it: one ``string="true"`` parameter."""
    return (
        f'\n\n<{D}tool_calls>\n<{D}invoke name="{name}">\n'
        f'<{D}parameter name="input" string="true">{text}</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
    )


def _tool(name: str, fmt: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "custom", "custom": {"name": name, **({"format": fmt} if fmt else {})}}


def _grammar_accepts(tm: PromptTM, text: str) -> bool:
    """Whether the tool-call grammar of the last request accepts ``text`` as the whole output."""
    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string

    st = tm.received[-1].sampling_params["structural_tag"]
    return _is_grammar_accept_string(xgr.Grammar.from_structural_tag(st), text)


def _chunks(tc: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The data of each chunk of the streamed answer of ``body``."""
    s = tc.post("/v1/chat/completions", json={"model": MODEL, **body, "stream": True})
    assert s.status_code == 200, s.text
    out = []
    for line in s.text.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[len("data: ") :]))
    return out


@pytest.mark.parametrize("fmt", [None, {"type": "text"}])
def test_custom_tool_call_is_a_custom_tool_call_with_the_raw_input(
    tok: PreTrainedTokenizerFast, fmt: dict[str, Any] | None
) -> None:
    """The model's call of a custom tool is a ``ChatCompletionMessageCustomToolCall`` (the
    ``openai`` client's parse of the message) whose ``input`` is the text the model wrote, quotes,
    backslashes and newlines as written; a function tool's call beside it keeps its kind. The tool
    is offered to the model with its description (before: a 400)."""
    tm = PromptTM(tok, reply="Patching." + _custom_call("apply_patch", PATCH))
    client, tc = make_client(tm)
    tool = {"type": "custom", "custom": dict(APPLY_PATCH["custom"], **({"format": fmt} if fmt else {}))}
    r = client.chat.completions.create(model=MODEL, messages=[USER], tools=[tool, CHAT_WEATHER])
    (call,) = r.choices[0].message.tool_calls
    assert isinstance(call, ChatCompletionMessageCustomToolCall)
    assert call.custom.input == PATCH and call.custom.name == "apply_patch" and call.id
    assert r.choices[0].message.content == "Patching." and r.choices[0].finish_reason == "tool_calls"
    prompt = tok.decode(tm.received[-1].input_ids)
    assert '"name": "apply_patch"' in prompt and "Apply a patch to files" in prompt
    raw = tc.post("/v1/chat/completions", json={"model": MODEL, "messages": [USER], "tools": [tool]}).json()
    ChatCompletion.model_validate(raw)
    assert raw["choices"][0]["message"]["tool_calls"][0].keys() == {"id", "type", "custom"}


def test_function_and_custom_calls_in_one_turn_keep_their_kinds(tok: PreTrainedTokenizerFast) -> None:
    """A turn calling a function tool and a custom tool: a function call (JSON arguments) then a
    custom call (raw input), in the order written."""
    both = CALL.replace(f"</{D}tool_calls>", "") + _custom_call("apply_patch", "x").replace(
        f"\n\n<{D}tool_calls>\n", "\n"
    )
    tm = PromptTM(tok, reply=both)
    client, _ = make_client(tm)
    r = client.chat.completions.create(model=MODEL, messages=[USER], tools=[CHAT_WEATHER, APPLY_PATCH])
    calls = r.choices[0].message.tool_calls
    assert [c.type for c in calls] == ["function", "custom"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris", "days": 3}
    assert calls[1].custom.input == "x"


def test_streamed_custom_tool_call_sends_custom_input_deltas(tok: PreTrainedTokenizerFast) -> None:
    """Streamed, the call's first delta carries ``id``, ``type: "custom"`` and ``custom.name``,
    the later ones ``custom.input`` texts joining to the input; no ``function`` key; the call
    folded from the deltas is a ``ChatCompletionMessageCustomToolCall``; the chunks read through
    the ``openai`` client's own stream carry the same."""
    tm = PromptTM(tok, reply=_custom_call("apply_patch", PATCH))
    client, tc = make_client(tm)
    chunks = _chunks(tc, {"messages": [USER], "tools": [APPLY_PATCH]})
    deltas = [tcall for c in chunks for ch in c["choices"] for tcall in ch["delta"].get("tool_calls") or []]
    assert len(deltas) > 2 and all("function" not in d for d in deltas)
    first = deltas[0]
    assert first["type"] == "custom" and first["id"] and first["custom"]["name"] == "apply_patch"
    assert all(set(d) == {"index", "custom"} and set(d["custom"]) == {"input"} for d in deltas[1:])
    text = "".join(d["custom"].get("input", "") for d in deltas)
    assert text == PATCH
    folded = {"id": first["id"], "type": "custom", "custom": {"name": "apply_patch", "input": text}}
    ChatCompletionMessageCustomToolCall.model_validate(folded)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    streamed = []
    for chunk in client.chat.completions.create(
        model=MODEL, messages=[USER], tools=[APPLY_PATCH], stream=True
    ):
        for d in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            streamed.append(d.model_dump()["custom"]["input"])
    assert "".join(streamed) == PATCH


def test_custom_call_in_history_replays_as_the_models_own_call(tok: PreTrainedTokenizerFast) -> None:
    """An assistant message's custom call (``{"type": "custom", "custom": {"name", "input"}}``)
    and its tool result: the prompt holds the call as the model wrote it (the DSML of the reply)
    and is the prompt of the same conversation sent to ``/v1/responses`` as custom tool items."""
    reply = _custom_call("apply_patch", PATCH)
    tm = PromptTM(tok, reply=reply)
    client, _ = make_client(tm)
    first = client.chat.completions.create(model=MODEL, messages=[USER], tools=[APPLY_PATCH])
    call = first.choices[0].message.tool_calls[0]
    tm.reply = "Added a.py."
    history = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(mode="json")]},
        {"role": "tool", "tool_call_id": call.id, "content": "Done: a.py"},
    ]
    second = client.chat.completions.create(model=MODEL, messages=history, tools=[APPLY_PATCH])
    assert second.choices[0].message.content == "Added a.py."
    chat_prompt = tok.decode(tm.received[-1].input_ids)
    assert reply.strip() in chat_prompt and "Done: a.py" in chat_prompt
    items = [
        USER,
        {"type": "custom_tool_call", "call_id": call.id, "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": call.id, "output": "Done: a.py"},
    ]
    client.responses.create(
        model=MODEL, input=items, store=False, tools=[{"type": "custom", **APPLY_PATCH["custom"]}]
    )
    assert tok.decode(tm.received[-1].input_ids) == chat_prompt


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "custom", "custom": {"name": "edit"}}])
def test_regex_format_constrains_the_input(tok: PreTrainedTokenizerFast, choice: Any) -> None:
    """A ``format: {"type": "grammar", "grammar": {"syntax": "regex"}}`` custom tool: the
    request's tool-call grammar accepts a call of it exactly when the input matches the regex
    (``re.fullmatch``), under ``tool_choice`` auto, required and the named custom tool."""
    tool = _tool("edit", {"type": "grammar", "grammar": {"syntax": "regex", "definition": REGEX}})
    tm = PromptTM(tok, reply="ok")
    client, _ = make_client(tm)
    client.chat.completions.create(model=MODEL, messages=[USER], tools=[tool], tool_choice=choice)
    for text in ["add a.py", "remove xyz.py", "add A.py", "add a.py\n", "delete a.py", ""]:
        want = re.fullmatch(REGEX, text) is not None
        assert _grammar_accepts(tm, _custom_call("edit", text)) is want, text


def test_lark_format_constrains_the_input_and_leaves_a_function_free(tok: PreTrainedTokenizerFast) -> None:
    """A Lark ``format``: the tool-call grammar accepts the inputs of the grammar's language and
    no other; a function tool beside it is free; a text format asks for no grammar."""
    tool = _tool("edit", {"type": "grammar", "grammar": {"syntax": "lark", "definition": LARK}})
    tm = PromptTM(tok, reply="ok")
    client, _ = make_client(tm)
    client.chat.completions.create(model=MODEL, messages=[USER], tools=[tool, CHAT_WEATHER])
    for text, want in LARK_CASES:
        assert _grammar_accepts(tm, _custom_call("edit", text)) is want, text
    assert _grammar_accepts(tm, "Sunny." + CALL)
    client.chat.completions.create(model=MODEL, messages=[USER], tools=[_tool("edit", {"type": "text"})])
    assert tm.received[-1].sampling_params.get("structural_tag") is None


@pytest.mark.parametrize(
    ("tools", "choice", "param"),
    [
        ([_tool("t", {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: ("}})], None,
         "tools[0].custom.format.grammar.definition"),
        ([_tool("t", {"type": "grammar", "grammar": {"syntax": "ebnf", "definition": "root ::= 'a'"}})], None,
         "tools[0].custom.format.grammar.syntax"),
        ([_tool("t", {"type": "grammar", "syntax": "regex", "definition": "a"})], None,
         "tools[0].custom.format.grammar"),
        ([_tool("t", {"type": "json"})], None, "tools[0].custom.format.type"),
        ([{"type": "custom", "name": "t"}], None, "tools[0].custom"),
        ([_tool("t"), _tool("t")], None, "tools[1].custom.name"),
        ([_tool("t"), CHAT_WEATHER], {"type": "custom", "custom": {"name": "get_weather"}}, "tool_choice"),
    ],
)  # fmt: skip
def test_bad_custom_tool_is_a_400_naming_the_field(
    tok: PreTrainedTokenizerFast, tools: list[dict[str, Any]], choice: Any, param: str
) -> None:
    """A custom tool that is not OpenAI's chat shape (a flat ``format``, no ``custom`` object, a
    name given twice), a grammar of an unknown syntax or that does not compile, a custom
    ``tool_choice`` naming no custom tool: a 400 (read by the ``openai`` client) naming the
    field; nothing is generated."""
    tm = PromptTM(tok, reply="ok")
    client, _ = make_client(tm)
    kw = {"tool_choice": choice} if choice is not None else {}
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL, messages=[USER], tools=tools, **kw)
    assert ei.value.body["param"] == param
    assert tm.received == []


def test_custom_call_in_history_without_input_is_a_400(tok: PreTrainedTokenizerFast) -> None:
    """An assistant message's custom call without a string ``custom.input``: a 400 naming it."""
    tm = PromptTM(tok, reply="ok")
    client, _ = make_client(tm)
    bad = {"id": "call_1", "type": "custom", "custom": {"name": "apply_patch", "input": 3}}
    history = [
        USER,
        {"role": "assistant", "tool_calls": [bad]},
        {"role": "tool", "tool_call_id": "call_1", "content": "x"},
    ]
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL, messages=history, tools=[APPLY_PATCH])
    assert ei.value.body["param"] == "messages[1].tool_calls[0].custom.input"
    assert tm.received == []


def test_custom_tool_call_cut_by_max_tokens_keeps_the_input_written(tok: PreTrainedTokenizerFast) -> None:
    """A custom call cut by ``max_tokens`` inside its input: ``finish_reason: "length"`` and
    ``custom.input`` the input text written so far (as a cut function call keeps its arguments
    so far), equal to the streamed ``custom.input`` deltas joined. Oracle: the text the fake
    model wrote (the cut is a prefix of ``PATCH``) and the ``openai`` client's ``ChatCompletion``."""
    reply = _custom_call("apply_patch", PATCH)
    cut = len(tok.encode(reply.split("*** Add File")[0], add_special_tokens=False)) + 2
    tm = PromptTM(tok, reply=reply)
    client, tc = make_client(tm)
    r = client.chat.completions.create(model=MODEL, messages=[USER], tools=[APPLY_PATCH], max_tokens=cut)
    assert isinstance(r, ChatCompletion) and r.choices[0].finish_reason == "length"
    (call,) = r.choices[0].message.tool_calls
    assert call.custom.input.startswith("*** Begin Patch\n*** Add") and PATCH.startswith(call.custom.input)
    chunks = _chunks(tc, {"messages": [USER], "tools": [APPLY_PATCH], "max_tokens": cut})
    deltas = [tcall for c in chunks for ch in c["choices"] for tcall in ch["delta"].get("tool_calls") or []]
    assert "".join(d["custom"].get("input", "") for d in deltas) == call.custom.input

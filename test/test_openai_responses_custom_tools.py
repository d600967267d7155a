"""``/v1/responses`` custom tools (``{"type": "custom", "name", "description", "format"}``, as
Codex sends its freeform tools): the call comes back as a ``custom_tool_call`` item with a
free-form ``input``, streamed as ``response.custom_tool_call_input.delta`` / ``.done``; the call
and its ``custom_tool_call_output`` replay into the prompt; a ``format`` grammar (regex, Lark)
constrains the decoding of the input. In-process app of the OpenAI router over
``fake_prompt_tm.PromptTM``.

Oracles: the ``openai`` client's own types (``openai.types.responses``: ``Response``,
``ResponseCustomToolCall``, the stream-event union, ``ResponseItem``); the text the model wrote
(the fake's scripted reply); a cold run of the whole conversation (``store: false``); Python's
``re.fullmatch`` for a regex format and the grammar's own language (hand-listed strings) for a
Lark format, read through xgrammar's matcher of the request's tool-call grammar.
"""

from __future__ import annotations

import json
import re
from typing import Any

import openai
import pytest
from fake_prompt_tm import CALL, MODEL, PromptTM
from openai.types.responses import ResponseCustomToolCall, ResponseItem
from pydantic import TypeAdapter
from responses_testutil import LARK, LARK_CASES, WEATHER, make_client, post
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

D = "｜DSML｜"
PATCH = '*** Begin Patch\n*** Add File: a.py\n+print("hi \\\\ there")\n*** End Patch'
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch to files"}
USER = {"role": "user", "content": "add a.py"}


def _custom_call(name: str, text: str) -> str:
    """A DSML call of a custom tool as the model writes it: one ``string="true"`` parameter."""
    return (
        f'\n\n<{D}tool_calls>\n<{D}invoke name="{name}">\n'
        f'<{D}parameter name="input" string="true">{text}</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
    )


def _grammar_accepts(tm: PromptTM, text: str) -> bool:
    """Whether the tool-call grammar of the last request accepts ``text`` as the whole output."""
    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string

    st = tm.received[-1].sampling_params["structural_tag"]
    return _is_grammar_accept_string(xgr.Grammar.from_structural_tag(st), text)


@pytest.mark.parametrize("fmt", [None, {"type": "text"}])
def test_custom_tool_call_is_a_custom_tool_call_item_with_the_raw_input(
    tok: PreTrainedTokenizerFast, fmt: dict[str, Any] | None
) -> None:
    """The model's call of a custom tool is one ``custom_tool_call`` output item (read by the
    ``openai`` client's ``Response`` type) whose ``input`` is the text the model wrote, quotes,
    backslashes and newlines as written; not a ``function_call`` with JSON arguments."""
    tool = dict(APPLY_PATCH, **({"format": fmt} if fmt else {}))
    tm = PromptTM(tok, reply="Patching." + _custom_call("apply_patch", PATCH))
    client, _ = make_client(tm)
    r = client.responses.create(model=MODEL, input=[USER], tools=[tool, WEATHER])
    assert [o.type for o in r.output] == ["message", "custom_tool_call"]
    call = r.output[1]
    assert isinstance(call, ResponseCustomToolCall)
    assert call.input == PATCH and call.name == "apply_patch" and call.call_id and call.id
    assert r.output[0].content[0].text == "Patching."
    # the tool is offered to the model, with its description and a free-text input parameter
    prompt = tok.decode(tm.received[-1].input_ids)
    assert '"name": "apply_patch"' in prompt and "Apply a patch to files" in prompt


def test_function_and_custom_calls_in_one_turn_keep_their_kinds(tok: PreTrainedTokenizerFast) -> None:
    """A turn calling a function tool and a custom tool: a ``function_call`` (JSON arguments) then
    a ``custom_tool_call`` (raw input), in the order written."""
    both = CALL.replace(f"</{D}tool_calls>", "") + _custom_call("apply_patch", "x").replace(
        f"\n\n<{D}tool_calls>\n", "\n"
    )
    tm = PromptTM(tok, reply=both)
    client, _ = make_client(tm)
    r = client.responses.create(model=MODEL, input=[USER], tools=[WEATHER, APPLY_PATCH])
    assert [o.type for o in r.output] == ["function_call", "custom_tool_call"]
    assert json.loads(r.output[0].arguments) == {"city": "Paris", "days": 3}
    assert r.output[1].input == "x"


def test_streamed_custom_tool_call_sends_input_deltas_and_done(tok: PreTrainedTokenizerFast) -> None:
    """Streamed, the call is a ``custom_tool_call`` item: ``output_item.added`` (empty input),
    ``response.custom_tool_call_input.delta`` events whose deltas join to the input, ``.done``
    with the whole input, ``output_item.done``; every event is one of the ``openai`` client's
    stream events, and the final response's item is the non-streamed one (same id)."""
    tm = PromptTM(tok, reply=_custom_call("apply_patch", PATCH))
    _, tc = make_client(tm)
    body, events = post(tc, {"input": [USER], "tools": [APPLY_PATCH]})
    assert [o["type"] for o in body["output"]] == ["custom_tool_call"]
    assert body["output"][0]["input"] == PATCH
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in kinds
    deltas = [e for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert len(deltas) > 1 and "".join(e["delta"] for e in deltas) == PATCH
    (done,) = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert done["input"] == PATCH
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "custom_tool_call" and added["item"]["input"] == ""
    item_done = next(e for e in events if e["type"] == "response.output_item.done")
    assert item_done["item"]["input"] == PATCH and item_done["item"]["id"] == added["item"]["id"]
    final = events[-1]
    assert final["type"] == "response.completed"
    assert final["response"]["output"] == [item_done["item"]]


def test_custom_tool_call_and_output_replay_as_the_models_own_call(tok: PreTrainedTokenizerFast) -> None:
    """The ``custom_tool_call`` item sent back with its ``custom_tool_call_output``: the prompt
    holds the call as the model wrote it (the DSML of the first reply) and the output as the tool
    result; continuing with ``previous_response_id`` renders the prompt of the whole conversation
    sent cold. The stored input items are the client's ``ResponseItem``s."""
    reply = _custom_call("apply_patch", PATCH)
    tm = PromptTM(tok, reply=reply)
    client, _ = make_client(tm)
    first = client.responses.create(model=MODEL, input=[USER], tools=[APPLY_PATCH])
    call = first.output[0]
    out = {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done: a.py"}
    tm.reply = "Added a.py."
    second = client.responses.create(
        model=MODEL, input=[out], previous_response_id=first.id, tools=[APPLY_PATCH]
    )
    assert second.output_text == "Added a.py."
    continued = tok.decode(tm.received[-1].input_ids)
    assert reply.strip() in continued and "Done: a.py" in continued
    whole = [USER, call.model_dump(mode="json", exclude_none=True), out]
    client.responses.create(model=MODEL, input=whole, tools=[APPLY_PATCH], store=False)
    assert tok.decode(tm.received[-1].input_ids) == continued
    items = client.responses.input_items.list(second.id, order="asc").data
    assert [i.type for i in items] == ["message", "custom_tool_call", "custom_tool_call_output"]
    adapter = TypeAdapter(ResponseItem)
    for i in items:
        adapter.validate_python(i.model_dump(mode="json"))


def test_custom_tool_call_output_must_answer_a_call(tok: PreTrainedTokenizerFast) -> None:
    """A ``custom_tool_call_output`` whose ``call_id`` answers no call of the latest assistant
    turn is a 400 naming ``input[i].call_id``; nothing is generated."""
    tm = PromptTM(tok, reply="x")
    client, _ = make_client(tm)
    out = {"type": "custom_tool_call_output", "call_id": "call_nope", "output": "ok"}
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(model=MODEL, input=[USER, out], tools=[APPLY_PATCH])
    assert ei.value.body["param"] == "input[1].call_id"
    assert tm.received == []


REGEX = r"(add|remove) [a-z]+\.py"


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "custom", "name": "edit"}])
def test_regex_format_constrains_the_input(tok: PreTrainedTokenizerFast, choice: Any) -> None:
    """A ``format: {"type": "grammar", "syntax": "regex"}`` custom tool: the request's tool-call
    grammar accepts a call of it exactly when the input matches the regex (``re.fullmatch``),
    under ``tool_choice`` auto, required and the named custom tool."""
    tool = {
        "type": "custom",
        "name": "edit",
        "format": {"type": "grammar", "syntax": "regex", "definition": REGEX},
    }
    tm = PromptTM(tok, reply="ok")
    client, _ = make_client(tm)
    client.responses.create(model=MODEL, input=[USER], tools=[tool], tool_choice=choice)
    for text in ["add a.py", "remove xyz.py", "add A.py", "add a.py\n", "delete a.py", ""]:
        want = re.fullmatch(REGEX, text) is not None
        assert _grammar_accepts(tm, _custom_call("edit", text)) is want, text


def test_lark_format_constrains_the_input(tok: PreTrainedTokenizerFast) -> None:
    """A Lark ``format`` (the syntax of Codex's ``apply_patch``): the tool-call grammar accepts
    the inputs of the grammar's language and no other; a function tool beside it is free."""
    tool = {
        "type": "custom",
        "name": "edit",
        "format": {"type": "grammar", "syntax": "lark", "definition": LARK},
    }
    tm = PromptTM(tok, reply="ok")
    client, _ = make_client(tm)
    client.responses.create(model=MODEL, input=[USER], tools=[tool, WEATHER])
    for text, want in LARK_CASES:
        assert _grammar_accepts(tm, _custom_call("edit", text)) is want, text
    assert _grammar_accepts(tm, "Sunny." + CALL)


@pytest.mark.parametrize(
    ("fmt", "param"),
    [
        ({"type": "grammar", "syntax": "lark", "definition": "start: ("}, "tools[0].format.definition"),
        ({"type": "grammar", "syntax": "regex", "definition": "a(b"}, "tools[0].format.definition"),
        ({"type": "grammar", "syntax": "ebnf", "definition": "root ::= 'a'"}, "tools[0].format.syntax"),
        ({"type": "grammar", "syntax": "regex", "definition": ""}, "tools[0].format.definition"),
        ({"type": "json"}, "tools[0].format.type"),
    ],
)
def test_bad_custom_tool_format_is_a_400_naming_the_field(
    tok: PreTrainedTokenizerFast, fmt: dict[str, Any], param: str
) -> None:
    """A custom tool's ``format`` that is not OpenAI's (an unknown type or syntax, an empty
    definition) or does not compile is a 400 (read by the ``openai`` client) naming the field;
    nothing is generated."""
    tm = PromptTM(tok, reply="ok")
    client, _ = make_client(tm)
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(
            model=MODEL, input="hi", tools=[{"type": "custom", "name": "t", "format": fmt}]
        )
    assert ei.value.body["param"] == param
    assert tm.received == []


def test_openai_stream_helper_reads_the_custom_tool_call(tok: PreTrainedTokenizerFast) -> None:
    """The ``openai`` client's own stream helper (``client.responses.stream``) folds the custom
    tool call's events into its final response: the ``custom_tool_call`` with the whole input,
    its deltas the ones it yielded."""
    tm = PromptTM(tok, reply="Hi." + _custom_call("apply_patch", PATCH))
    client, _ = make_client(tm)
    deltas = []
    with client.responses.stream(model=MODEL, input=[USER], tools=[APPLY_PATCH]) as stream:
        for ev in stream:
            if ev.type == "response.custom_tool_call_input.delta":
                deltas.append(ev.delta)
        final = stream.get_final_response()
    assert [o.type for o in final.output] == ["message", "custom_tool_call"]
    assert final.output[1].input == PATCH == "".join(deltas)


def test_text_format_leaves_decoding_free_under_auto(tok: PreTrainedTokenizerFast) -> None:
    """A custom tool of free text (``format: {"type": "text"}``) under ``tool_choice: "auto"``
    asks for no grammar (as a non-strict function tool); a grammar format does."""
    tm = PromptTM(tok, reply="ok")
    client, _ = make_client(tm)
    client.responses.create(model=MODEL, input=[USER], tools=[dict(APPLY_PATCH, format={"type": "text"})])
    assert tm.received[-1].sampling_params.get("structural_tag") is None
    fmt = {"type": "grammar", "syntax": "regex", "definition": REGEX}
    client.responses.create(model=MODEL, input=[USER], tools=[dict(APPLY_PATCH, format=fmt)])
    assert tm.received[-1].sampling_params.get("structural_tag") is not None


def test_custom_tool_call_cut_by_max_output_tokens_keeps_the_input_written(
    tok: PreTrainedTokenizerFast,
) -> None:
    """A custom call cut by ``max_output_tokens`` inside its input: the ``custom_tool_call``'s
    ``input`` is the input text written so far (as a cut function call keeps its arguments so
    far), non-streamed and streamed alike; the streamed deltas join to the ``.done`` input.
    Oracle: the text the fake model wrote (the cut is a prefix of ``PATCH``)."""
    reply = _custom_call("apply_patch", PATCH)
    cut = len(tok.encode(reply.split("*** Add File")[0], add_special_tokens=False)) + 2
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    body, events = post(tc, {"input": [USER], "tools": [APPLY_PATCH], "max_output_tokens": cut})
    assert body["status"] == "incomplete"
    (call,) = body["output"]
    assert call["type"] == "custom_tool_call"
    assert call["input"].startswith("*** Begin Patch\n*** Add") and PATCH.startswith(call["input"])
    deltas = [e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    (done,) = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert "".join(deltas) == done["input"] == call["input"]

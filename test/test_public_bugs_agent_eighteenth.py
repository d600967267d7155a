"""Public bug reports of agent-facing APIs (the OpenAI Responses API as Codex CLI and the OpenAI
Agents SDK drive it), replayed through ``/v1/responses`` on an in-process app (each test names its
report). Most are about Codex's freeform tools (``{"type": "custom"}``, such as ``apply_patch``
with a Lark grammar), which gateways and servers dropped, served as empty-schema functions, or
answered with a ``function_call`` carrying JSON-wrapped input.

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: the ``openai``
client's own types (``openai.types.responses``), DeepSeek's own Responses converter and V4 encoder
(the ``deepseek-recipe`` package) for the prompt of a conversation with a custom tool call, and
the text the model wrote.
"""

from __future__ import annotations

import json
from typing import Any

import deepseek_recipe as recipe
import openai
import pytest
from deepseek_recipe_testutil import ids_in_written_order
from fake_prompt_tm import CALL, MODEL, PromptTM
from openai.types.responses import Response as OpenAIResponse
from openai.types.responses import ResponseCustomToolCall, ResponseFunctionToolCall
from responses_testutil import WEATHER, make_client, post
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

D = "｜DSML｜"
#: Codex's freeform ``apply_patch`` as it declares it (a Lark grammar; the definition shortened)
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files. This is a FREEFORM tool.",
    "format": {
        "type": "grammar",
        "syntax": "lark",
        "definition": 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'
        'end_patch: "*** End Patch" LF?\nhunk: add_hunk\nadd_hunk: "*** Add File: " filename LF add_line+\n'
        'filename: /(.+)/\nadd_line: "+" /(.*)/ LF -> line\n%import common.LF\n',
    },
}
PATCH = '*** Begin Patch\n*** Add File: hello.txt\n+say "hi" \\ bye\n*** End Patch'
USER = {"role": "user", "content": "Create hello.txt"}
#: Codex's other tools beside it (function tools)
SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Run a shell command",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}},
    },
}


def _custom_call(name: str, text: str) -> str:
    """A DSML call of a custom tool as DeepSeek-V4 writes it: one ``string="true"`` ``input``."""
    return (
        f'\n\n<{D}tool_calls>\n<{D}invoke name="{name}">\n'
        f'<{D}parameter name="input" string="true">{text}</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
    )


def _prompt(tm: PromptTM) -> str:
    return tm.tokenizer.decode(tm.received[-1].input_ids)


def _recipe_prompt(body: dict[str, Any]) -> str:
    """DeepSeek's own prompt text of a Responses request body, thinking disabled."""
    b = {**ids_in_written_order(body), "model": "DeepSeek-V4-Pro", "reasoning": {"effort": "none"}}
    req = recipe.ResponsesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def _tool_line(prompt: str, name: str) -> dict[str, Any]:
    """The JSON line of tool ``name`` in a prompt's tool list."""
    line = next(x for x in prompt.split("\n") if x.startswith(f'{{"name": "{name}"'))
    return json.loads(line)


def _without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    return node


def test_ds4_745_custom_tool_call_is_a_custom_tool_call_not_a_function_call(
    tok: PreTrainedTokenizerFast,
) -> None:
    """antirez/ds4#745: a DeepSeek-V4 server answered Codex's freeform ``apply_patch`` with a
    ``function_call`` (``arguments: "{\\"patch\\": ...}"``); Codex aborted with "invoked with
    incompatible payload". Expected: a ``custom_tool_call`` item (the ``openai`` client's
    ``ResponseCustomToolCall``) whose ``input`` is the raw patch text the model wrote."""
    tm = PromptTM(tok, reply=_custom_call("apply_patch", PATCH))
    client, _ = make_client(tm)
    r = client.responses.create(model=MODEL, input=[USER], tools=[SHELL, APPLY_PATCH])
    (call,) = r.output
    assert isinstance(call, ResponseCustomToolCall)
    assert (call.name, call.input) == ("apply_patch", PATCH)


def test_9router_1007_custom_tool_is_offered_with_a_required_string_input(
    tok: PreTrainedTokenizerFast,
) -> None:
    """decolua/9router#1007: a custom tool became a function with an empty parameter schema, so
    the model called ``apply_patch`` with ``{}`` ("missing field `input`"). Expected: the tool
    the model reads takes one required string ``input`` and nothing else, the parameter schema
    DeepSeek's own Responses converter gives ``apply_patch`` (descriptions aside)."""
    tm = PromptTM(tok, reply="ok")
    client, _ = make_client(tm)
    body = {"input": [USER], "tools": [APPLY_PATCH]}
    client.responses.create(model=MODEL, **body)
    ours = _tool_line(_prompt(tm), "apply_patch")["parameters"]
    deepseek = _tool_line(_recipe_prompt(body), "apply_patch")["parameters"]
    assert _without_descriptions(ours) == _without_descriptions(deepseek)
    assert ours["required"] == ["input"] and ours["properties"]["input"]["type"] == "string"


def test_copilot_api_242_streamed_custom_input_is_raw_text_not_json(tok: PreTrainedTokenizerFast) -> None:
    """caozhiyuan/copilot-api#242: the freeform tool's input reached Codex JSON-wrapped
    (``{"input": "*** Begin Patch..."}``) and the patch failed to parse. Expected, streamed: the
    ``response.custom_tool_call_input.delta`` events join to the raw patch, the ``.done`` event
    and the final item hold it, and no event carries function-call arguments."""
    tm = PromptTM(tok, reply=_custom_call("apply_patch", PATCH))
    _, tc = make_client(tm)
    body, events = post(tc, {"input": [USER], "tools": [APPLY_PATCH]})
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta")
    done = [e["input"] for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert deltas == PATCH and done == [PATCH]
    assert not any(e["type"].startswith("response.function_call_arguments") for e in events)
    final = OpenAIResponse.model_validate(events[-1]["response"])
    assert [(o.type, o.input) for o in final.output] == [("custom_tool_call", PATCH)]
    assert body["output"][0]["input"] == PATCH


def test_workbuddy2api_12_freeform_call_is_not_answer_text(tok: PreTrainedTokenizerFast) -> None:
    """ardeyouxipianyi/workbuddy2api-intl#12: the custom tool's declaration was dropped, so the
    model's patch came back as ``output_text`` deltas and no tool call reached Codex (HTTP 200,
    nothing written). Expected: the text before the call is the message, the patch is a
    ``custom_tool_call`` item and never ``output_text``."""
    tm = PromptTM(tok, reply="I'll add it." + _custom_call("apply_patch", PATCH))
    _, tc = make_client(tm)
    _, events = post(tc, {"input": [USER], "tools": [APPLY_PATCH], "tool_choice": "auto"})
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "I'll add it."
    items = [e["item"]["type"] for e in events if e["type"] == "response.output_item.done"]
    assert items == ["message", "custom_tool_call"]


def test_omniroute_4862_custom_call_and_output_replay_as_deepseek_renders_them(
    tok: PreTrainedTokenizerFast,
) -> None:
    """diegosouzapw/OmniRoute#4862: ``custom_tool_call`` / ``custom_tool_call_output`` input
    items must map onto the assistant's tool call and the tool result. Expected: the conversation
    part of the prompt (from the first user turn on) is the one DeepSeek's own Responses
    converter renders: the call as one ``string="true"`` ``input`` parameter, the output as
    the tool result."""
    items = [
        USER,
        {"type": "custom_tool_call", "call_id": "call_1", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "call_1", "output": "Success. Updated hello.txt"},
    ]
    body = {"input": items, "tools": [APPLY_PATCH]}
    tm = PromptTM(tok, reply="Done.")
    client, _ = make_client(tm)
    client.responses.create(model=MODEL, **body, reasoning={"effort": "none"})
    ours, deepseek = _prompt(tm), _recipe_prompt(body)
    user = "<｜User｜>"
    assert ours[ours.index(user) :] == deepseek[deepseek.index(user) :]


def test_sub2api_3390_codex_tool_list_with_a_custom_tool_is_served(tok: PreTrainedTokenizerFast) -> None:
    """Wei-Shaw/sub2api#3390: Codex's real requests, a ``custom`` ``apply_patch`` among function
    tools, failed before the model ran (``tools.N.custom.input_schema`` error) while text-only
    requests passed. Expected: served (the ``openai`` client reads the response, its ``tools``
    the ones sent, the custom tool included); a function call stays a ``function_call``."""
    tm = PromptTM(tok, reply=CALL)
    client, _ = make_client(tm)
    r = client.responses.create(model=MODEL, input=[USER], tools=[SHELL, WEATHER, APPLY_PATCH])
    assert [t.type for t in r.tools] == ["function", "function", "custom"]
    assert r.tools[2].format.syntax == "lark"
    (call,) = r.output
    assert isinstance(call, ResponseFunctionToolCall) and json.loads(call.arguments) == {
        "city": "Paris",
        "days": 3,
    }


def test_codex_relay_37_function_declared_apply_patch_stays_a_function_call(
    tok: PreTrainedTokenizerFast,
) -> None:
    """MetaFARS/codex-relay#37: a relay guessed "custom" from the tool's name; Codex also
    declares ``apply_patch`` as a plain function (``{"input": string}``) for models without
    freeform support, and then expects a ``function_call``. Expected: the call's kind follows the
    declared type, not the name: a ``function_call`` with JSON ``arguments``."""
    fn = {
        "type": "function",
        "name": "apply_patch",
        "description": "Apply a patch",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]},
    }
    tm = PromptTM(tok, reply=_custom_call("apply_patch", PATCH))
    client, _ = make_client(tm)
    (call,) = client.responses.create(model=MODEL, input=[USER], tools=[fn]).output
    assert isinstance(call, ResponseFunctionToolCall)
    assert json.loads(call.arguments) == {"input": PATCH}


def test_cliproxyapi_1004_streamed_call_item_done_keeps_its_name(tok: PreTrainedTokenizerFast) -> None:
    """router-for-me/CLIProxyAPI#1004: ``response.output_item.done`` of a streamed
    ``function_call`` had an empty ``name`` while ``output_item.added`` had it (the Vercel AI SDK
    then failed). Expected: the done item has the same ``name`` and ``call_id`` as the added one,
    for a function call and a custom tool call alike."""
    reply = CALL.replace(f"</{D}tool_calls>", "") + _custom_call("apply_patch", "x").replace(
        f"\n\n<{D}tool_calls>\n", "\n"
    )
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    _, events = post(tc, {"input": [USER], "tools": [WEATHER, APPLY_PATCH]})
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [(i["type"], i["name"]) for i in done] == [
        ("function_call", "get_weather"),
        ("custom_tool_call", "apply_patch"),
    ]
    assert [(i["name"], i["call_id"]) for i in done] == [(i["name"], i["call_id"]) for i in added]


# --------------------------------------------------------------------------- Responses Lite tools


def test_vllm_55659_additional_tools_item_declares_the_tools(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#55659: Codex's Responses Lite requests declare their tools in an
    ``additional_tools`` input item (``role: "developer"``) and send no top-level ``tools``; vLLM
    crashed on the item. Expected: the item's tools are the request's tools and the item is no
    turn of its own: the prompt is that of the same request with the tools at the top level (a
    cold run), and the model's call of one is a ``function_call``."""
    item = {"type": "additional_tools", "role": "developer", "id": "at_1", "tools": [WEATHER]}
    tm = PromptTM(tok, reply=CALL)
    client, _ = make_client(tm)
    r = client.responses.create(model=MODEL, input=[item, USER])
    lite = _prompt(tm)
    client.responses.create(model=MODEL, input=[USER], tools=[WEATHER])
    assert lite == _prompt(tm)
    (call,) = r.output
    assert isinstance(call, ResponseFunctionToolCall) and call.name == "get_weather"


def test_cc_switch_466_namespaced_additional_tools_are_offered_flat(tok: PreTrainedTokenizerFast) -> None:
    """SaladDay/cc-switch-cli#466 (also HEXUXIU/M365-Copilot2API#8): Codex's ``additional_tools``
    group the tools in ``namespace`` tools (``functions`` holding the custom ``exec`` and the
    function ``wait``, an empty ``collaboration``); the proxy dropped them and the model said it
    had no tools. Expected: the grouped tools are offered as if declared one by one at the top
    level (a cold run's prompt), and a call of the custom ``exec`` is a ``custom_tool_call``."""
    exec_tool = {"type": "custom", "name": "exec", "description": "Run code"}
    wait = {"type": "function", "name": "wait", "description": "Wait", "parameters": {"type": "object"}}
    item = {
        "type": "additional_tools",
        "role": "developer",
        "tools": [
            {"type": "namespace", "name": "functions", "description": "Tools", "tools": [exec_tool, wait]},
            {"type": "namespace", "name": "collaboration", "description": "Agents", "tools": []},
        ],
    }
    tm = PromptTM(tok, reply=_custom_call("exec", "print(1)"))
    client, _ = make_client(tm)
    r = client.responses.create(model=MODEL, input=[item, USER])
    lite = _prompt(tm)
    client.responses.create(model=MODEL, input=[USER], tools=[exec_tool, wait])
    assert lite == _prompt(tm)
    (call,) = r.output
    assert isinstance(call, ResponseCustomToolCall) and (call.name, call.input) == ("exec", "print(1)")


def test_chatgpt_codex_proxy_9_additional_tools_item_is_no_message(tok: PreTrainedTokenizerFast) -> None:
    """10/chatgpt-codex-proxy#9: the ``additional_tools`` item went down the message path and was
    refused ("Missing required parameter: 'input[0].content'"). Expected: served, and, with no
    tools in it, the prompt is that of the request without the item (a cold run); a malformed
    item (``tools`` not a list) is a 400 naming ``input[0].tools``."""
    tm = PromptTM(tok, reply="ok")
    client, _ = make_client(tm)
    client.responses.create(
        model=MODEL, input=[{"type": "additional_tools", "role": "developer", "tools": []}, USER]
    )
    with_item = _prompt(tm)
    client.responses.create(model=MODEL, input=[USER])
    assert with_item == _prompt(tm)
    n = len(tm.received)
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(
            model=MODEL, input=[{"type": "additional_tools", "role": "developer", "tools": {}}, USER]
        )
    assert ei.value.body["param"] == "input[0].tools"
    assert len(tm.received) == n


# --------------------------------------------------------------------------- namespace tools


@pytest.mark.parametrize("where", ["tools", "additional_tools"])
def test_cliproxyapi_4255_namespaced_call_keeps_its_namespace(
    tok: PreTrainedTokenizerFast, where: str
) -> None:
    """router-for-me/CLIProxyAPI#4255 (also raullenchai/Rapid-MLX#2130): Codex declares MCP
    tools in ``namespace`` tools (``mcp__codegraph`` holding ``codegraph_search``); the call came
    back as a bare ``function_call`` with no ``namespace`` and Codex answered "unsupported call".
    Expected: the tool's bare ``name`` with ``namespace: "mcp__codegraph"`` beside it (the
    ``openai`` client's ``ResponseFunctionToolCall.namespace``), streamed and not, in the added
    and done items; a tool of no namespace has none."""
    search = {
        "type": "function",
        "name": "codegraph_search",
        "description": "Search code",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    }
    ns = {"type": "namespace", "name": "mcp__codegraph", "description": "CodeGraph MCP", "tools": [search]}
    reply = (
        f'\n\n<{D}tool_calls>\n<{D}invoke name="codegraph_search">\n'
        f'<{D}parameter name="query" string="true">MCP</{D}parameter>\n</{D}invoke>\n'
        + CALL.split(f"<{D}tool_calls>\n", 1)[1]
    )
    if where == "tools":
        body: dict[str, Any] = {"input": [USER], "tools": [ns, WEATHER]}
    else:
        item = {"type": "additional_tools", "role": "developer", "tools": [ns, WEATHER]}
        body = {"input": [item, USER]}
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    resp, events = post(tc, body)
    calls = OpenAIResponse.model_validate(resp).output
    assert [(c.name, c.namespace) for c in calls] == [
        ("codegraph_search", "mcp__codegraph"),
        ("get_weather", None),
    ]
    assert "namespace" not in resp["output"][1]
    for kind in ("response.output_item.added", "response.output_item.done"):
        items = [e["item"] for e in events if e["type"] == kind]
        assert [i.get("namespace") for i in items] == ["mcp__codegraph", None]
    assert [c.get("namespace") for c in events[-1]["response"]["output"]] == ["mcp__codegraph", None]


def test_cliproxyapi_4219_lite_history_of_custom_calls_with_part_outputs(
    tok: PreTrainedTokenizerFast,
) -> None:
    """router-for-me/CLIProxyAPI#4219: a Codex Responses Lite history (tools in an
    ``additional_tools`` item, ``custom_tool_call`` items of ``apply_patch``,
    ``custom_tool_call_output`` whose ``output`` is a list of ``input_text`` parts) was dropped
    item by item, leaving plain chat with no tools. Expected: the conversation renders as DeepSeek's own Responses converter
    renders it (from the first user turn on): each call, each output's text, in order."""
    items = [
        {"type": "additional_tools", "role": "developer", "tools": [APPLY_PATCH]},
        USER,
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": PATCH},
        {
            "type": "custom_tool_call_output",
            "call_id": "c1",
            "output": [{"type": "input_text", "text": "a.py"}, {"type": "input_text", "text": "b.py"}],
        },
        {
            "type": "custom_tool_call",
            "call_id": "c2",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** End Patch",
        },
        {
            "type": "custom_tool_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "x = 1"}],
        },
    ]
    tm = PromptTM(tok, reply="Done.")
    client, _ = make_client(tm)
    client.responses.create(model=MODEL, input=items, reasoning={"effort": "none"})
    ours, deepseek = _prompt(tm), _recipe_prompt({"input": items, "tools": [APPLY_PATCH]})
    user = "<｜User｜>"
    assert ours[ours.index(user) :] == deepseek[deepseek.index(user) :]
    assert '"name": "apply_patch"' in ours[: ours.index(user)]

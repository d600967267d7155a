"""An eighteenth set of public bug reports, in constrained decoding and tool calling on
``/v1/chat/completions``: streamed tool-call deltas when an engine output carries a whole call (or
a call and the text before it, or several calls) at once, as speculative decoding or a coarse
``stream_interval`` delivers them; the ids and indexes of parallel calls; ``tool_choice``
required / named / none with a reasoning model; answer grammars after the reasoning, streamed;
and OpenAI's custom (freeform) tools on the chat route.

Bugs found here and fixed: tools under ``tool_choice: "auto"`` beside a ``response_format``
could not be called (the answer grammar alone constrained the output; a strict tool made it a
400) -- the grammar is now "the answer, or calls" (vllm-project/vllm#39929); custom tools
(``{"type": "custom", "custom": {...}}``) were refused with a 400 on the chat route
(openai/openai-python#2530 asks for their streamed deltas); they are now served
(:mod:`sglang_v4.entrypoints.openai.chat_custom_tools`). The other reports passed as-is and are
kept as regression tests.

Oracles: the ``openai`` client's own parsers (``ChatCompletion.model_validate``, its streaming
accumulator ``client.chat.completions.stream``, ``ChatCompletionMessageCustomToolCall``); the
text the scripted fake model wrote (``fake_prompt_tm``) and the arguments it holds (``ARGS``);
the non-streamed answer of the same request (a cold run); Python's ``json``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM
from openai.types.chat import ChatCompletion, ChatCompletionMessageCustomToolCall
from responses_testutil import CHAT_WEATHER, make_client
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

D = "｜DSML｜"
USER = {"role": "user", "content": "Weather in Paris?"}
THINK = {"chat_template_kwargs": {"thinking": True}}
#: two calls in one block, as the model writes parallel calls
TWO_CALLS = CALL.replace(
    f"</{D}invoke>\n</{D}tool_calls>",
    f'</{D}invoke>\n<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="city" string="true">Rome</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>',
)


class BurstTM(PromptTM):
    """:class:`PromptTM` whose stream sends only the outputs after the given token counts (and
    the last one): the engine outputs of speculative decoding or a large ``stream_interval``,
    each carrying many tokens. ``cuts=()``: the whole answer in one output."""

    def __init__(self, tokenizer: Any, reply: str, cuts: tuple[int, ...] = ()) -> None:
        super().__init__(tokenizer, reply=reply)
        self.cuts = cuts

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        outs = [o async for o in super().generate_request(obj, request)]
        if not obj.stream:
            yield outs[-1]
            return
        for j, o in enumerate(outs, start=1):
            if j in self.cuts or j == len(outs):
                yield o


def _body(**kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [USER], "tools": [CHAT_WEATHER], **kw}


def _stream(tc: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of ``body`` streamed (``[DONE]`` left out)."""
    r = tc.post("/v1/chat/completions", json={**body, "stream": True})
    assert r.status_code == 200, r.text
    return [json.loads(line[6:]) for line in r.text.split("\n") if line.startswith("data: {")]


def _fold(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Choice 0's message folded from the chunks as OpenAI's clients fold them: content joined,
    tool calls keyed by ``index`` (``id`` / ``type`` / name from the first delta of a call, then
    argument fragments appended); the finish reason."""
    content, reasoning, calls, finish = "", "", {}, None
    for c in chunks:
        for ch in c["choices"]:
            if ch["index"] != 0:
                continue
            d = ch["delta"]
            content += d.get("content") or ""
            reasoning += d.get("reasoning_content") or ""
            for t in d.get("tool_calls") or []:
                call = calls.setdefault(t["index"], {"id": None, "type": None, "name": "", "arguments": ""})
                call["id"] = call["id"] or t.get("id")
                call["type"] = call["type"] or t.get("type")
                fn = t.get("function") or {}
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
            finish = ch.get("finish_reason") or finish
    return {
        "content": content,
        "reasoning": reasoning,
        "calls": [calls[i] for i in sorted(calls)],
        "finish": finish,
    }


def _message(tc: Any, body: dict[str, Any]) -> dict[str, Any]:
    """Choice 0 of ``body`` non-streamed, checked by the ``openai`` client's own parser."""
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    ChatCompletion.model_validate(r.json())
    return r.json()["choices"][0]


@pytest.mark.parametrize("cuts", [(), (1,)], ids=["one-output", "role-then-rest"])
def test_whole_call_in_the_final_output_streams_its_arguments(
    tok: PreTrainedTokenizerFast, cuts: tuple[int, ...]
) -> None:
    # sgl-project/sglang#32167: a complete tool call landing in the final streamed delta (EAGLE
    # emits many tokens a step) came out with its name and permanently empty arguments; the
    # folded stream must hold the call the model wrote, as the non-streamed answer does
    tm = BurstTM(tok, CALL, cuts)
    _, tc = make_client(tm)
    folded = _fold(_stream(tc, _body()))
    assert [(c["name"], json.loads(c["arguments"])) for c in folded["calls"]] == [("get_weather", ARGS)]
    assert folded["finish"] == "tool_calls" and folded["calls"][0]["type"] == "function"
    cold = _message(tc, _body())
    assert json.loads(cold["message"]["tool_calls"][0]["function"]["arguments"]) == ARGS


def test_call_split_over_two_outputs_keeps_every_argument(tok: PreTrainedTokenizerFast) -> None:
    # vllm-project/vllm#39615: a call arriving in one or two deltas had its arguments blanked
    # ("" sent) by the finish-time "remaining arguments" step; cut mid-arguments here
    n = len(tok.encode(CALL, add_special_tokens=False))
    for cut in (n // 2, n - 2):
        tm = BurstTM(tok, CALL, (cut,))
        _, tc = make_client(tm)
        folded = _fold(_stream(tc, _body()))
        assert [json.loads(c["arguments"]) for c in folded["calls"]] == [ARGS], cut


def test_text_and_whole_call_in_one_output_keep_both(tok: PreTrainedTokenizerFast) -> None:
    # vllm-project/vllm#48347: content before a complete call in the same delta made the parser
    # return the content and drop the whole call; both must come through, as non-streamed
    tm = BurstTM(tok, "Sure, let me check." + CALL)
    _, tc = make_client(tm)
    folded = _fold(_stream(tc, _body()))
    assert folded["content"] == "Sure, let me check."
    assert [json.loads(c["arguments"]) for c in folded["calls"]] == [ARGS]
    cold = _message(tc, _body())["message"]
    assert cold["content"] == folded["content"]


@pytest.mark.parametrize("cuts", [(), None], ids=["one-output", "token-by-token"])
def test_parallel_calls_get_distinct_indexes_and_ids(tok: PreTrainedTokenizerFast, cuts: Any) -> None:
    # earendil-works/pi#8861 (and mcowger/plexus#691): two parallel calls sent under one
    # `index` are merged or dropped by index-keyed clients; each call must have its own index
    # (0, 1, in order) and its own id, also when both arrive in one engine output
    tm = BurstTM(tok, TWO_CALLS, cuts) if cuts is not None else PromptTM(tok, reply=TWO_CALLS)
    _, tc = make_client(tm)
    chunks = _stream(tc, _body())
    firsts = [
        t for c in chunks for ch in c["choices"] for t in ch["delta"].get("tool_calls") or [] if "id" in t
    ]
    assert [t["index"] for t in firsts] == [0, 1]
    folded = _fold(chunks)
    assert [json.loads(c["arguments"]) for c in folded["calls"]] == [ARGS, {"city": "Rome"}]
    assert len({c["id"] for c in folded["calls"]}) == 2


def test_parallel_call_ids_are_unique_across_calls_and_requests(tok: PreTrainedTokenizerFast) -> None:
    # HKUDS/nanobot#3943: a server reusing one tool_call_id for parallel calls gets the next
    # request refused ("Duplicate value for 'tool_call_id'"); ids are unique over the calls of
    # a message, and a second request's calls get new ones
    tm = PromptTM(tok, reply=TWO_CALLS)
    _, tc = make_client(tm)
    ids = [t["id"] for _ in range(2) for t in _message(tc, _body())["message"]["tool_calls"]]
    assert len(ids) == 4 and len(set(ids)) == 4


def test_continuation_deltas_carry_the_index_and_the_client_accumulates_them(
    tok: PreTrainedTokenizerFast,
) -> None:
    # BerriAI/litellm#20711: in OpenAI's stream format only a call's first delta has its `id`;
    # the later ones carry `index` alone (a consumer that skipped id-less deltas lost the
    # arguments). The openai client's own accumulator (client.chat.completions.stream) folds
    # our deltas into the non-streamed call
    tm = PromptTM(tok, reply=CALL)
    client, tc = make_client(tm)
    deltas = [
        t for c in _stream(tc, _body()) for ch in c["choices"] for t in ch["delta"].get("tool_calls") or []
    ]
    assert len(deltas) > 2 and "id" in deltas[0]
    assert all("id" not in t and "type" not in t and t["index"] == 0 for t in deltas[1:])
    with client.chat.completions.stream(model=MODEL, messages=[USER], tools=[CHAT_WEATHER]) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    (call,) = final.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == ARGS
    assert final.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_choice_answers_tool_calls_not_content(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    # vllm-project/vllm#14424: a named tool_choice came back with the call's arguments as
    # `content`; the named function's call must be in `tool_calls`, content empty, the decoding
    # constrained to that function
    tm = PromptTM(tok, reply=CALL)
    _, tc = make_client(tm)
    body = _body(tool_choice={"type": "function", "function": {"name": "get_weather"}})
    if stream:
        folded = _fold(_stream(tc, body))
        content, calls = folded["content"], [(c["name"], c["arguments"]) for c in folded["calls"]]
    else:
        msg = _message(tc, body)["message"]
        content = msg["content"]
        calls = [(t["function"]["name"], t["function"]["arguments"]) for t in msg["tool_calls"]]
    assert not content
    assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", ARGS)]
    assert tm.received[-1].sampling_params.get("structural_tag") is not None


@pytest.mark.parametrize("stream", [False, True])
def test_finish_reason_is_tool_calls_after_a_call(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    # sgl-project/sglang#2877: a reply that called a tool finished with "stop"; OpenAI answers
    # "tool_calls" (the client's ChatCompletion type lists it)
    tm = PromptTM(tok, reply="Checking." + CALL)
    _, tc = make_client(tm)
    fr = _fold(_stream(tc, _body()))["finish"] if stream else _message(tc, _body())["finish_reason"]
    assert fr == "tool_calls"


def test_required_tool_choice_keeps_the_reasoning_in_a_multi_turn_chat(tok: PreTrainedTokenizerFast) -> None:
    # sgl-project/sglang#15169: tool_choice "required" lost reasoning_content from the second
    # turn of a conversation on; the reasoning written before the call is returned (streamed
    # and not) and the call is made
    reasoning = "The user wants the weather again."
    tm = PromptTM(tok, reply=reasoning + "</think>" + CALL)
    _, tc = make_client(tm)
    history = [
        USER,
        {
            "role": "assistant",
            "reasoning_content": "Look it up.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps(ARGS)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        {"role": "user", "content": "And again?"},
    ]
    body = _body(messages=history, tool_choice="required", **THINK)
    msg = _message(tc, body)["message"]
    assert msg["reasoning_content"] == reasoning
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == ARGS
    folded = _fold(_stream(tc, body))
    assert folded["reasoning"] == reasoning and [json.loads(c["arguments"]) for c in folded["calls"]] == [
        ARGS
    ]


@pytest.mark.parametrize(
    "fmt",
    [
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}},
    ],
)
def test_streamed_json_answer_after_reasoning_has_no_think_tag(
    tok: PreTrainedTokenizerFast, fmt: Any
) -> None:
    # tenstorrent/tt-inference-server#4386 (items 1, 2): streamed, a json_object / json_schema
    # answer of a reasoning model carried "</think>" and reasoning text in `content`, invalid
    # JSON; the streamed content is the non-streamed one, valid JSON, the reasoning apart
    answer = '{"city": "Paris"}'
    tm = PromptTM(tok, reply="Think about it.</think>" + answer)
    _, tc = make_client(tm)
    body = {"model": MODEL, "messages": [USER], "response_format": fmt, **THINK}
    folded = _fold(_stream(tc, body))
    assert json.loads(folded["content"]) == json.loads(answer) and "think" not in folded["content"]
    assert folded["reasoning"] == "Think about it."
    assert _message(tc, body)["message"]["content"] == folded["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_tool_choice_none_answers_no_call_and_no_markup(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    # tenstorrent/tt-inference-server#4386 (item 3): with tool_choice "none" the raw tool-call
    # markup came back in `content`; no call is made and no DSML reaches the content
    tm = PromptTM(tok, reply="It is sunny." + CALL)
    _, tc = make_client(tm)
    body = _body(tool_choice="none")
    if stream:
        folded = _fold(_stream(tc, body))
        content, calls = folded["content"], folded["calls"]
    else:
        msg = _message(tc, body)["message"]
        content, calls = msg["content"], msg.get("tool_calls") or []
    assert calls == [] and content == "It is sunny."
    assert "get_weather" not in tok.decode(tm.received[-1].input_ids)


PATCH = '*** Begin Patch\n+print("a \\\\ b")\n*** End Patch'
APPLY_PATCH = {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch"}}


def _custom_call(name: str, text: str) -> str:
    return (
        f'\n\n<{D}tool_calls>\n<{D}invoke name="{name}">\n'
        f'<{D}parameter name="input" string="true">{text}</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
    )


@pytest.mark.parametrize("cuts", [(), None], ids=["one-output", "token-by-token"])
def test_streamed_custom_tool_call_deltas_carry_the_custom_discriminator(
    tok: PreTrainedTokenizerFast, cuts: Any
) -> None:
    # openai/openai-python#2530 (openai/openai-openapi#576 gives the shape): a streamed custom
    # tool call's deltas are {"index", "id", "type": "custom", "custom": {"name", "input"}},
    # later ones {"index", "custom": {"input"}}; folded they are the non-streamed call, a
    # ChatCompletionMessageCustomToolCall (the chat route refused custom tools with a 400)
    reply = _custom_call("apply_patch", PATCH)
    tm = BurstTM(tok, reply, cuts) if cuts is not None else PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    body = {"model": MODEL, "messages": [USER], "tools": [APPLY_PATCH, CHAT_WEATHER]}
    deltas = [
        t for c in _stream(tc, body) for ch in c["choices"] for t in ch["delta"].get("tool_calls") or []
    ]
    first = deltas[0]
    assert first["type"] == "custom" and first["custom"]["name"] == "apply_patch" and first["id"]
    assert all("function" not in t and t["index"] == 0 for t in deltas)
    text = "".join(t["custom"].get("input", "") for t in deltas)
    ChatCompletionMessageCustomToolCall.model_validate(
        {"id": first["id"], "type": "custom", "custom": {"name": "apply_patch", "input": text}}
    )
    (cold,) = _message(tc, body)["message"]["tool_calls"]
    assert (
        cold["type"] == "custom"
        and cold["custom"] == {"name": "apply_patch", "input": text}
        and text == PATCH
    )


def _accepts(tag: str, text: str) -> bool:
    """Whether the structural tag ``tag`` accepts ``text`` as the whole output (xgrammar)."""
    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string

    return _is_grammar_accept_string(xgr.Grammar.from_structural_tag(tag), text)


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["yes", "no", "maybe"]}},
    "required": ["verdict"],
    "additionalProperties": False,
}
RF = {"type": "json_schema", "json_schema": {"name": "verdict", "strict": True, "schema": ANSWER_SCHEMA}}


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("strict", [False, True])
def test_tools_beside_response_format_stay_callable(
    tok: PreTrainedTokenizerFast, thinking: bool, strict: bool
) -> None:
    # vllm-project/vllm#39929: tools under tool_choice "auto" with a response_format: the answer
    # grammar alone constrained the whole output, the tool-call block could not be written and
    # the calls were silently lost (a strict tool made the request a 400 here). The grammar is
    # now "the answer or calls": it accepts the schema's answer and the model's call, not text
    # nor a call whose arguments break a strict tool's schema; the call comes back as a call
    tool = (
        {"type": "function", "function": dict(CHAT_WEATHER["function"], strict=True)}
        if strict
        else CHAT_WEATHER
    )
    pre = "Consider.</think>" if thinking else ""
    tm = PromptTM(tok, reply=pre + CALL)
    _, tc = make_client(tm)
    body = _body(tools=[tool], response_format=RF, **(THINK if thinking else {}))
    choice = _message(tc, body)
    assert choice["finish_reason"] == "tool_calls"
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == ARGS
    sp = tm.received[-1].sampling_params
    assert "json_schema" not in sp
    tag = sp["structural_tag"]
    assert _accepts(tag, pre + '{"verdict": "yes"}') and _accepts(tag, pre + CALL)
    assert not _accepts(tag, pre + "Sunny.") and not _accepts(tag, pre + '{"verdict": "sunny"}')
    bad_call = CALL.replace('string="false">3<', 'string="false">"x"<')
    assert not _accepts(tag, pre + bad_call)


def test_strict_enum_answer_is_not_complete_before_its_closing_brace(tok: PreTrainedTokenizerFast) -> None:
    # ardanlabs/kronk#819 (item 2): a strict json_schema with an `enum` property ended right after
    # the enum value ('{\n  "verdict": "yes"', unparseable, finish "stop"); the answer grammar
    # accepts exactly the JSON texts json.loads reads as the schema's objects
    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string

    tm = PromptTM(tok, reply='{"verdict": "yes"}')
    _, tc = make_client(tm)
    _message(tc, {"model": MODEL, "messages": [USER], "response_format": RF})
    g = xgr.Grammar.from_json_schema(tm.received[-1].sampling_params["json_schema"])
    for text in [
        '{\n  "verdict": "yes"',
        '{"verdict": "yes"',
        '{"verdict": "yes"}',
        '{\n  "verdict": "maybe"\n}',
    ]:
        try:
            valid = json.loads(text)["verdict"] in ("yes", "no", "maybe")
        except json.JSONDecodeError:
            valid = False
        assert _is_grammar_accept_string(g, text) is valid, text


@pytest.mark.parametrize("stream", [False, True])
def test_json_answer_cut_by_max_tokens_finishes_with_length(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    # 567-labs/instructor#276: a json_object answer cut by max_tokens must say so: finish_reason
    # "length" (the client's signal that the JSON is incomplete), not "stop"
    tm = PromptTM(tok, reply='{"city": "Paris", "days": 3, "unit": "celsius"}')
    _, tc = make_client(tm)
    body = {"model": MODEL, "messages": [USER], "response_format": {"type": "json_object"}, "max_tokens": 4}
    if stream:
        folded = _fold(_stream(tc, body))
        fr, content = folded["finish"], folded["content"]
    else:
        choice = _message(tc, body)
        fr, content = choice["finish_reason"], choice["message"]["content"]
    assert fr == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)


def test_unusable_tool_schema_beside_response_format_keeps_the_answer_grammar(
    tok: PreTrainedTokenizerFast,
) -> None:
    # vllm-project/vllm#39929's grammar of "the answer or calls" needs each tool's schema: a
    # non-strict tool whose schema xgrammar cannot compile leaves the request served with the
    # answer grammar alone (non-strict tools ask for no constraint), a strict one is a 400
    # naming the tool; nothing is generated for the 400
    bad = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "nope"}}}
    tm = PromptTM(tok, reply='{"verdict": "no"}')
    _, tc = make_client(tm)
    body = _body(tools=[CHAT_WEATHER, bad], response_format=RF)
    assert _message(tc, body)["message"]["content"] == '{"verdict": "no"}'
    assert json.loads(tm.received[-1].sampling_params["json_schema"]) == ANSWER_SCHEMA
    strict = {"type": "function", "function": dict(bad["function"], strict=True)}
    n = len(tm.received)
    r = tc.post("/v1/chat/completions", json=_body(tools=[CHAT_WEATHER, strict], response_format=RF))
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
    assert "tools[1].function.parameters" in r.json()["error"]["message"] and len(tm.received) == n


@pytest.mark.parametrize("cuts", [(), None], ids=["one-output", "token-by-token"])
def test_streamed_non_ascii_arguments_are_literal_and_sent_once(
    tok: PreTrainedTokenizerFast, cuts: Any
) -> None:
    # vllm-project/vllm#13826: streamed arguments with non-ASCII text ("São Paulo") went out as
    # \uXXXX escapes and then once more, literal, at the end of the stream (the folded arguments
    # were two JSON texts); they are one JSON text, literal UTF-8, equal to the non-streamed one
    reply = CALL.replace(">Paris<", ">São Paulo 北京<")
    tm = BurstTM(tok, reply, cuts) if cuts is not None else PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    (call,) = _fold(_stream(tc, _body()))["calls"]
    assert json.loads(call["arguments"]) == dict(ARGS, city="São Paulo 北京")
    assert "\\u" not in call["arguments"] and "São Paulo 北京" in call["arguments"]
    cold = _message(tc, _body())["message"]["tool_calls"][0]["function"]["arguments"]
    assert call["arguments"] == cold

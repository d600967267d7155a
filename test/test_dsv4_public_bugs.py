"""DeepSeek-V4 bug reports of peer servers (vLLM's "DSv4" label, SGLang's DeepSeek-V4 issues),
replayed against the OpenAI, Responses and Anthropic routes (each test names its report).

The model's text is written by hand and generated token by token by the fake engine
(:class:`~test_chat_tool_stream_agreement.ChunkTM`); oracles: the hand-written text, the
``openai`` client's parser and stream accumulator, ``json.loads``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic_testutil import _anthropic_client
from chat_tools_testutil import WEATHER, ChunkTM, _folded, _message, accumulate, client_for
from dsml_testutil import dsml_block as _block
from dsml_testutil import dsml_invoke as _invoke
from dsml_testutil import dsml_param as _param
from transformers import PreTrainedTokenizerFast

D = "｜DSML｜"
MSGS = [{"role": "user", "content": "Weather in Oslo?"}]
#: A conversation that already holds a call and its result: the model has seen DSML written.
HISTORY = [
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "4C, rain"},
    {"role": "user", "content": "And in Bergen?"},
]
CALL = _block(_invoke("get_weather", _param("city", True, "Bergen")))


def _no_markup(*texts: str | None) -> None:
    for t in texts:
        assert not t or ("DSML" not in t and "｜" not in t), t


# sgl-project/sglang#35736: with tools and ``tool_choice: "none"`` the model still wrote a DSML
# block (7/7, streamed and not, with and without reasoning_effort) and it came back raw in
# ``content`` with finish reason "stop". The official API returns neither markup nor a call.
# Every shape of such output: a block after text, a block alone, a bare invoke, a closing tag
# alone, a malformed block, text after the block, and the block cut by max_tokens.
NONE_REPLIES = {
    "after_text": ("Let me look that up." + CALL, "Let me look that up."),
    "alone": (CALL, ""),
    "bare_invoke": ("Checking.\n\n" + _invoke("get_weather", _param("city", True, "Bergen")), "Checking."),
    "orphan_close": (f"Done.\n</{D}tool_calls>", "Done."),
    "malformed": (f'Sure.\n\n<{D}tool_calls>\n<{D}invoke name="nope">\n<{D}parameter oops', "Sure."),
    "text_after": ("Hmm." + CALL + "\n\nIt is 5C.", "Hmm."),
    "partial_marker_is_text": ("a < b and x<y", "a < b and x<y"),
}


@pytest.mark.parametrize("case", sorted(NONE_REPLIES))
@pytest.mark.parametrize("per_chunk", [1, 3])
def test_sglang_35736_tool_choice_none_never_returns_dsml(
    tok: PreTrainedTokenizerFast, case: str, per_chunk: int
) -> None:
    reply, content = NONE_REPLIES[case]
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    kw: dict[str, Any] = dict(model="m", messages=HISTORY, tools=[WEATHER], tool_choice="none")
    for got in (_message(client, **kw), _folded(client, **kw)):
        assert got == (content, [], "stop")
    # cut by the token limit inside the block: the text before it, finish reason "length"
    if CALL in reply:
        limit = len(tok.encode(reply[: reply.index(CALL) + len(CALL) // 2], add_special_tokens=False))
        assert _message(client, **kw, max_tokens=limit) == (content, [], "length")
        s = accumulate(client.chat.completions.create(**kw, max_tokens=limit, stream=True))
        assert (s["content"], s["calls"], s["finish"]) == (content, {}, "length")


def test_sglang_35736_tool_choice_none_in_thinking_mode(tok: PreTrainedTokenizerFast) -> None:
    """A block that ends the reasoning (no ``</think>`` first) with the tools withheld: the reasoning
    is the text before it, nothing of the block in either field."""
    client, _ = client_for(ChunkTM(tok, "I should call the tool." + CALL))
    kw: dict[str, Any] = dict(
        model="m",
        messages=HISTORY,
        tools=[WEATHER],
        tool_choice="none",
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    msg = client.chat.completions.create(**kw).choices[0].message
    reasoning = (msg.model_extra or {}).get("reasoning_content")
    assert (reasoning, msg.content or "", msg.tool_calls) == ("I should call the tool.", "", None)
    with client.chat.completions.stream(**kw) as stream:
        folded = stream.get_final_completion().choices[0]
    assert (folded.message.content or "", folded.message.tool_calls, folded.finish_reason) == (
        "",
        None,
        "stop",
    )
    _no_markup(folded.message.content)


def test_sglang_35736_tool_choice_none_on_responses_and_messages(tok: PreTrainedTokenizerFast) -> None:
    """The Responses (``tool_choice: "none"``) and Anthropic Messages (``{"type": "none"}``) routes
    read the answer the same way: the text before the block, no call, no markup."""
    _, tc = client_for(ChunkTM(tok, "Let me look that up." + CALL))
    fn = WEATHER["function"]
    body = {
        "model": "m",
        "input": "Weather in Oslo?",
        "tools": [{"type": "function", "name": fn["name"], "parameters": fn["parameters"]}],
        "tool_choice": "none",
    }
    for stream in (False, True):
        r = tc.post("/v1/responses", json={**body, "stream": stream})
        assert r.status_code == 200, r.text
        _no_markup(r.text)
        assert "function_call" not in r.text and "Let me look that up." in r.text
    client = _anthropic_client(ChunkTM(tok, "Let me look that up." + CALL))
    mkw: dict[str, Any] = dict(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[{"name": fn["name"], "input_schema": fn["parameters"]}],
        tool_choice={"type": "none"},
    )
    msg = client.messages.create(**mkw)
    with client.messages.stream(**mkw) as stream:
        folded = stream.get_final_message()
    for m in (msg, folded):
        assert [(b.type, getattr(b, "text", None)) for b in m.content] == [("text", "Let me look that up.")]
        assert m.stop_reason == "end_turn"


def test_sglang_35736_auto_still_parses_the_same_reply(tok: PreTrainedTokenizerFast) -> None:
    """The control: the same reply under ``tool_choice: "auto"`` is a call."""
    client, _ = client_for(ChunkTM(tok, "Let me look that up." + CALL))
    kw: dict[str, Any] = dict(model="m", messages=HISTORY, tools=[WEATHER])
    assert _message(client, **kw) == (
        "Let me look that up.",
        [("get_weather", '{"city": "Bergen"}')],
        "tool_calls",
    )


# vllm-project/vllm#54686 and the reports it cites (vllm-project/vllm#51914's orphan closing tail
# after a successful call; can1357/oh-my-pi#10556's closer shells with no opener; a block never
# closed before EOS, vllm-project/vllm-ascend#14511; the ｜DSML｜ token without its "<"; DSML
# written while reasoning): no DSML markup in content, reasoning or arguments, under every
# tool_choice, on every route, streamed == not. Each shape: (reply, content, calls, finish) under
# a tool_choice that parses calls; under "none" the answer is the text before the first tag.
GOOD_CALL = [("get_weather", '{"city": "Bergen"}')]
OPEN_BLOCK = (
    f'\n\n<{D}tool_calls>\n<{D}invoke name="get_weather">\n<{D}parameter name="city" string="true">Ber'
)
SHAPES: dict[str, tuple[str, str, list[tuple[str, str]], str]] = {
    "orphan_closers_after_block": (
        "Looking." + CALL + f"</{D}invoke>\n</{D}tool_calls>",
        "Looking.",
        GOOD_CALL,
        "tool_calls",
    ),
    "closers_without_opener": (
        f"Reading the file.\n\n</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>",
        "Reading the file.",
        [],
        "stop",
    ),
    "closer_between_words": (f"a </{D}invoke> b", "a b", [], "stop"),
    "opener_never_closed": ("Sure." + OPEN_BLOCK, "Sure.", [], "stop"),
    "bare_token_without_lt": (
        f"Plan: {D}tool_calls>\n"
        + _invoke("get_weather", _param("city", True, "Bergen"))
        + f"\n</{D}tool_calls>",
        "Plan:",
        GOOD_CALL,
        "tool_calls",
    ),
}
CHOICES: dict[str, Any] = {
    "auto": "auto",
    "required": "required",
    "named": {"type": "function", "function": {"name": "get_weather"}},
    "none": "none",
}


def _before_first_tag(reply: str) -> str:
    """The text before the first DSML tag of ``reply`` (its "<" / "</" and whitespace dropped)."""
    head = reply[: reply.index(D)]
    return head.removesuffix("</").removesuffix("<").rstrip()


@pytest.mark.parametrize("choice", sorted(CHOICES))
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("thinking", [False, True])
def test_vllm_54686_no_dsml_markup_on_chat(
    tok: PreTrainedTokenizerFast, shape: str, choice: str, thinking: bool
) -> None:
    reply, content, calls, finish = SHAPES[shape]
    if choice == "none":
        content, calls, finish = _before_first_tag(reply), [], "stop"
    reasoning = f"Maybe </{D}invoke> or {D}parameter> here."  # DSML written while reasoning
    text = (reasoning + "</think>" + reply) if thinking else reply
    tm = ChunkTM(tok, text)
    tm.grammar_enabled = True  # type: ignore[attr-defined]  # required / named: a tool grammar is sent
    client, _ = client_for(tm)
    kw: dict[str, Any] = dict(model="m", messages=HISTORY, tools=[WEATHER], tool_choice=CHOICES[choice])
    if thinking:
        kw["extra_body"] = {"chat_template_kwargs": {"thinking": True}}
    msg = client.chat.completions.create(**kw).choices[0]
    with client.chat.completions.stream(**kw) as stream:
        folded = stream.get_final_completion().choices[0]
    for m in (msg, folded):
        got_reasoning = (m.message.model_extra or {}).get("reasoning_content")
        _no_markup(
            m.message.content, got_reasoning, *[c.function.arguments for c in m.message.tool_calls or []]
        )
        assert (m.message.content or "", m.finish_reason) == (content, finish), shape
        assert got_reasoning == ("Maybe or here." if thinking else None)
    assert [(c.function.name, c.function.arguments) for c in msg.message.tool_calls or []] == calls
    if shape != "opener_never_closed":  # streamed, that call's name went out before the stop
        assert [(c.function.name, c.function.arguments) for c in folded.message.tool_calls or []] == calls


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("choice", ["auto", "none"])
def test_vllm_54686_no_dsml_markup_on_responses_and_messages(
    tok: PreTrainedTokenizerFast, shape: str, choice: str
) -> None:
    reply, content, calls, _ = SHAPES[shape]
    if choice == "none":
        content, calls = _before_first_tag(reply), []
    fn = WEATHER["function"]
    client, _ = client_for(ChunkTM(tok, reply))
    rkw: dict[str, Any] = dict(
        model="m",
        input="Weather in Bergen?",
        tools=[{"type": "function", "name": fn["name"], "parameters": fn["parameters"]}],
        tool_choice=choice,
    )
    done = client.responses.create(**rkw)
    with client.responses.stream(**rkw) as stream:
        folded = stream.get_final_response()
    for r in (done, folded):
        assert r.output_text == content, shape
        got = [(o.name, o.arguments) for o in r.output if o.type == "function_call"]
        if shape != "opener_never_closed":
            assert got == calls
        _no_markup(r.output_text, *[a for _, a in got])
    aclient = _anthropic_client(ChunkTM(tok, reply))
    mkw: dict[str, Any] = dict(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": "Weather in Bergen?"}],
        tools=[{"name": fn["name"], "input_schema": fn["parameters"]}],
        tool_choice={"type": choice},
    )
    msg = aclient.messages.create(**mkw)
    with aclient.messages.stream(**mkw) as mstream:
        mfolded = mstream.get_final_message()
    for m in (msg, mfolded):
        texts = "".join(b.text for b in m.content if b.type == "text")
        assert texts == content, shape
        uses = [(b.name, b.input) for b in m.content if b.type == "tool_use"]
        if shape != "opener_never_closed":
            assert uses == [(n, json.loads(a)) for n, a in calls]
        _no_markup(texts, *[json.dumps(i, ensure_ascii=False) for _, i in uses])


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("withheld", [False, True])
def test_vllm_54686_every_split_position_reads_as_the_whole(shape: str, withheld: bool) -> None:
    """Each shape split in two at every character position (and fed one character at a time)
    reads exactly as the whole text does: the same content, the same calls, no markup."""
    from sglang_v4.entrypoints.openai.dsml_markup import DsmlAnswerReader
    from sglang_v4.entrypoints.openai.dsml_withheld import DsmlWithheld
    from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser

    reply, content, calls, _ = SHAPES[shape]
    if withheld:
        content, calls = _before_first_tag(reply), []

    def read(pieces: list[str]) -> tuple[str, list[tuple[str, str]]]:
        r = DsmlAnswerReader(DsmlWithheld() if withheld else DsmlToolParser({"get_weather": None}))
        out = "".join(r.feed(p)[0] for p in pieces) + r.finish(stopped=True)[0]
        return out, [(c.name, c.arguments) for c in r.calls]

    for pieces in [[reply], list(reply), *([reply[:i], reply[i:]] for i in range(1, len(reply)))]:
        assert read(pieces) == (content, calls), pieces

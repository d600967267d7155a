"""A twenty-fifth set of public reports on tool calling on ``/v1/chat/completions`` (``tool_choice``
validation, tool-call history replay, tool results in the prompt, call ids of parallel calls,
DSML cut by ``max_tokens``), in process.

Fixed here: a tool definition's ``null`` fields (``"description": null``, ``"parameters":
null``, ``"strict": null``) were shown to the model; the "## Tools" line now leaves them out, as
for a tool sent without them. The other reports found no fault and stand as regression guards of the
behaviour each asked for. The model's text is written by hand (:class:`~chat_tools_testutil.ChunkTM`).
Oracles: the ``openai`` client (its error classes, response types and stream accumulator),
DeepSeek's own converter, V4 encoder and response parser (``deepseek-recipe``), OpenAI's
documented request rules.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from chat_tools_testutil import WEATHER, client_for, fold_chat_stream, grammar_chunk_tm, sse_chunks
from dsml_testutil import DSML, dsml_block, dsml_invoke, dsml_param
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_message as _recipe_message  # noqa: E402
from deepseek_recipe_testutil import recipe_prompt as _recipe_prompt  # noqa: E402

CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "Weather in Paris?"}]
GET_TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
CALL_TWO = dsml_block(
    dsml_invoke("get_weather", dsml_param("city", True, "Rome")),
    dsml_invoke("get_weather", dsml_param("city", True, "Oslo"), dsml_param("days", False, "2")),
)


def _call(i: int, args: str = '{"city": "Paris"}', name: str = "get_weather") -> dict[str, Any]:
    """An OpenAI assistant ``tool_calls`` entry with the id ``call_<i>``."""
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


def _prompt_ids(tok: PreTrainedTokenizerFast, body: dict[str, Any]) -> tuple[int, list[int]]:
    """(HTTP status, prompt token ids the engine received) of ``body`` on the chat route."""
    tm = grammar_chunk_tm(tok, "Done.")
    _, tc = client_for(tm, allow_auto_truncate=False)
    r = tc.post(CHAT, json={"model": "m", **body})
    return r.status_code, list(tm.received[0].input_ids) if tm.received else []


# --------------------------------------------------------------------------- tool_choice validation


@pytest.mark.parametrize(
    ("tools", "choice", "param"),
    [
        # kekzl/imp#1265: a named function that does not exist was answered with another tool's call
        ([WEATHER, GET_TIME], {"type": "function", "function": {"name": "nonexistent"}}, "tool_choice"),
        # kekzl/imp#1265: "required" with no tools was answered as an ordinary turn
        (None, "required", "tool_choice"),
        # vllm-project/vllm#10567: tool_choice {} was a 500 (KeyError)
        ([WEATHER], {}, "tool_choice"),
        # experientiallabs/experiential#278: a function-shaped but nameless choice slipped through
        ([WEATHER], {"type": "function", "function": {}}, "tool_choice.function.name"),
        ([WEATHER], {"type": "function", "function": {"name": ""}}, "tool_choice.function.name"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_unsatisfiable_or_malformed_tool_choice_is_a_400(
    tok: PreTrainedTokenizerFast, tools: Any, choice: Any, param: str, stream: bool
) -> None:
    """kekzl/imp#1265 (a named ``tool_choice`` of an undeclared function got a 200 with a call to
    another tool; ``"required"`` without tools got an ordinary turn), vllm-project/vllm#10567
    (``tool_choice: {}`` was a 500) and experientiallabs/experiential#278 (a function-shaped
    ``tool_choice`` with no name was accepted). Expected: a 400 before any generation, streamed
    or not, in OpenAI's error shape naming the field, and nothing reaches the engine. Oracle: the
    ``openai`` client's own error class and parsed error body; OpenAI's documented
    ``tool_choice`` forms."""
    tm = grammar_chunk_tm(tok, "Hello.")
    client, _ = client_for(tm, allow_auto_truncate=False)
    kw: dict[str, Any] = {"model": "m", "messages": MSGS, "tool_choice": choice, "stream": stream}
    if tools is not None:
        kw["tools"] = tools
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(**kw)
    assert err.value.status_code == 400
    body = err.value.body
    assert isinstance(body, dict) and body.get("param") == param, body
    assert isinstance(body.get("message"), str) and body["message"]
    assert tm.received == []


def test_duplicate_tool_names_are_rejected_even_under_a_named_choice(tok: PreTrainedTokenizerFast) -> None:
    """anthropics/anthropic-sdk-python#1535 (two tools of one name: the second silently replaced
    the first) and microsoft/foundry-local#1087 (a forced ``tool_choice`` narrowed the tool list
    before the duplicate check, so the duplicate went through and the first description won).
    Expected: a 400 naming ``tools`` whether ``tool_choice`` is ``"auto"``, ``"required"`` or
    names the duplicated tool; nothing reaches the engine. Oracle: the ``openai`` client's error
    class; the report's expected behaviour (names are unique over the whole declared list)."""
    other = {"type": "function", "function": {**WEATHER["function"], "description": "Another weather tool"}}
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice in ("auto", "required", named):
        tm = grammar_chunk_tm(tok, "Hello.")
        client, _ = client_for(tm, allow_auto_truncate=False)
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(
                model="m", messages=MSGS, tools=[WEATHER, GET_TIME, other], tool_choice=choice
            )
        assert err.value.status_code == 400
        assert isinstance(err.value.body, dict) and err.value.body.get("param") == "tools", err.value.body
        assert tm.received == []


@pytest.mark.parametrize("stream", [False, True])
def test_required_choice_answered_with_prose_is_not_a_tool_calls_finish(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """vllm-project/vllm#53363: with ``tool_choice: "required"`` a prose-only reply came back
    with ``finish_reason: "tool_calls"`` and an empty ``tool_calls``, so clients took the
    tool-execution branch and found nothing to run. Expected: no call is invented and the
    finish reason is not ``"tool_calls"`` (OpenAI's ``"tool_calls"`` means the model called a
    tool); the reply reads as DeepSeek's own parser reads it (no tool call). Oracles: the
    ``openai`` client's types and stream accumulator, ``deepseek-recipe``'s response parser."""
    reply = "I cannot look that up."
    body = {"messages": MSGS, "tools": [WEATHER], "tool_choice": "required"}
    assert not _recipe_message(body, reply).get("tool_calls")
    _, tc = client_for(grammar_chunk_tm(tok, reply), allow_auto_truncate=False)
    r = tc.post(CHAT, json={"model": "m", **body, "stream": stream})
    assert r.status_code == 200, r.text
    ch = (fold_chat_stream(r.text) if stream else ChatCompletion.model_validate(r.json())).choices[0]
    assert not ch.message.tool_calls
    assert ch.finish_reason != "tool_calls"
    assert ch.message.content == reply


# --------------------------------------------------------------------------- history replay


@pytest.mark.parametrize("omit", [False, True])
def test_assistant_tool_call_turn_with_null_or_omitted_content_is_served(
    tok: PreTrainedTokenizerFast, omit: bool
) -> None:
    """lmstudio-ai/lmstudio-bug-tracker#261 and can1357/oh-my-pi#5121 (an assistant tool-call
    turn replayed with ``content: null`` was rejected), abetlen/llama-cpp-python#1805 and
    InsForge/InsForge#1749 (the same turn with ``content`` left out raised an error). Expected:
    both shapes are served, the prompt the one DeepSeek's own converter and V4 encoder render for
    the ``content: null`` turn. Oracle: ``deepseek-recipe``."""
    asst: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [_call(1)]}
    if omit:
        del asst["content"]
    msgs = [*MSGS, asst, {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"}]
    status, ids = _prompt_ids(tok, {"messages": msgs, "tools": [WEATHER]})
    assert status == 200
    want_msgs = [*MSGS, {**asst, "content": None}, msgs[-1]]
    want = _recipe_prompt({"messages": want_msgs, "tools": [WEATHER]}, False)
    assert ids == tok.encode(want, add_special_tokens=False)


def test_null_user_content_is_a_400_and_null_system_or_tool_content_is_empty_text(
    tok: PreTrainedTokenizerFast,
) -> None:
    """deltawi/deltallm#297 and TQZHR/grok2api#41: ``content: null`` next to ``tool_calls`` is
    valid on an assistant turn only; a user message must carry its content (OpenAI answers 400),
    and a null that reached the template as ``None`` broke the render. Expected: a null user
    content is a 400 naming ``messages[i].content`` and nothing reaches the engine; a null
    system or tool content (taken as SGLang takes it) renders exactly as empty text does, the
    prompt DeepSeek's own converter and V4 encoder give for ``""``. Oracles: the ``openai``
    client's error class, OpenAI's message schema, ``deepseek-recipe``."""
    asst = {"role": "assistant", "content": None, "tool_calls": [_call(1)]}
    tm = grammar_chunk_tm(tok, "Hello.")
    client, _ = client_for(tm, allow_auto_truncate=False)
    msgs = [
        *MSGS,
        asst,
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        {"role": "user", "content": None},
    ]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER])
    assert err.value.status_code == 400 and isinstance(err.value.body, dict)
    assert err.value.body.get("param") == "messages[3].content", err.value.body
    assert tm.received == []

    for null_at in (0, 3):
        msgs = [
            {"role": "system", "content": "Be brief."},
            *MSGS,
            asst,
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        ]
        msgs[null_at] = {**msgs[null_at], "content": None}
        status, ids = _prompt_ids(tok, {"messages": msgs, "tools": [WEATHER]})
        assert status == 200
        empty = [dict(m) for m in msgs]
        empty[null_at]["content"] = ""
        want = _recipe_prompt({"messages": empty, "tools": [WEATHER]}, False)
        assert ids == tok.encode(want, add_special_tokens=False), null_at


# --------------------------------------------------------------------------- tool results in the prompt


def test_tool_result_as_content_parts_renders_as_the_string_form(tok: PreTrainedTokenizerFast) -> None:
    """ollama/ollama#17414: a tool result sent as an array of text parts lost its tool call id
    and name in the prompt (only the string form kept them), so the model could not tell which
    call was answered; both encodings mean the same thing. Expected: for two parallel calls
    answered out of order, a one-text-part result gives the very prompt the string result gives,
    and every form (string, one part, two parts) gives DeepSeek's own converter's and V4
    encoder's prompt. Oracle: ``deepseek-recipe``;
    OpenAI's tool-message schema (string or text-part array)."""
    asst = {"role": "assistant", "content": None, "tool_calls": [_call(1), _call(2, '{"city": "Rome"}')]}
    strings = [
        {"role": "tool", "tool_call_id": "call_2", "content": "Rome: rain"},
        {"role": "tool", "tool_call_id": "call_1", "content": "Paris: sun"},
    ]
    parts = [{**m, "content": [{"type": "text", "text": m["content"]}]} for m in strings]
    split = [
        {
            **m,
            "content": [
                {"type": "text", "text": m["content"][:5]},
                {"type": "text", "text": m["content"][5:]},
            ],
        }
        for m in strings
    ]
    got = {}
    for name, results in (("strings", strings), ("parts", parts), ("split", split)):
        body = {"messages": [*MSGS, asst, *results], "tools": [WEATHER]}
        status, ids = _prompt_ids(tok, body)
        assert status == 200, name
        assert ids == tok.encode(_recipe_prompt(body, False), add_special_tokens=False), name
        got[name] = ids
    assert got["parts"] == got["strings"]


def test_non_ascii_tool_results_reach_the_prompt_as_literal_text(tok: PreTrainedTokenizerFast) -> None:
    """lmstudio-ai/lmstudio-python#79: non-ASCII characters of tool outputs were sent to the model
    as ``\\uXXXX`` escapes (``json.dumps`` with ``ensure_ascii``), which small models cannot read.
    Expected: the tool result's text and the replayed call's non-ASCII argument are in the prompt
    literally (no ``\\u`` escape), the prompt being DeepSeek's own converter's and V4 encoder's.
    Oracle: ``deepseek-recipe``; the report's expected text."""
    result = "Umeå: 晴れ ☀, −3 °C"
    asst = {"role": "assistant", "content": None, "tool_calls": [_call(1, '{"city": "Ume\\u00e5"}')]}
    msgs = [*MSGS, asst, {"role": "tool", "tool_call_id": "call_1", "content": result}]
    status, ids = _prompt_ids(tok, {"messages": msgs, "tools": [WEATHER]})
    assert status == 200
    want = _recipe_prompt({"messages": msgs, "tools": [WEATHER]}, False)
    assert ids == tok.encode(want, add_special_tokens=False)
    text = tok.decode(ids)
    assert result in text and "Umeå</" in text and "\\u00e5" not in text


PARAMS = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


@pytest.mark.parametrize(
    "fn",
    [
        {"name": "search", "description": None, "parameters": PARAMS},
        {"name": "search", "description": "Find pages", "parameters": None},
        {"name": "search", "description": "Find pages", "parameters": PARAMS, "strict": None},
        {"parameters": None, "name": "search", "strict": None, "description": None},
    ],
)
def test_null_fields_of_a_tool_definition_render_as_absent(
    tok: PreTrainedTokenizerFast, fn: dict[str, Any]
) -> None:
    """ai-dynamo/dynamo#10510 (a tool whose ``description`` was missing or ``null`` broke the
    prompt render) and farion1231/cc-switch#5324 / farion1231/cc-switch#5315 (Codex declares
    tools with ``parameters: null``; servers had to read it as no schema). Fixed here: the
    "## Tools" line showed such a function with ``"description": null`` / ``"parameters": null``
    / ``"strict": null``, so the same tool told with and without its unset fields gave the model
    two different prompts. Expected: served, and the prompt is the one of the request without
    the ``null`` fields, whose tool line is ``json.dumps`` of the function as sent (DeepSeek's
    reference encoder's rule, sgl-project/sglang#33568). Oracles: OpenAI's reading of a ``null``
    optional field as absent, ``json.dumps`` of the client's object."""
    absent = {k: v for k, v in fn.items() if v is not None}
    status, ids = _prompt_ids(tok, {"messages": MSGS, "tools": [{"type": "function", "function": fn}]})
    status_absent, ids_absent = _prompt_ids(
        tok, {"messages": MSGS, "tools": [{"type": "function", "function": absent}]}
    )
    assert (status, status_absent) == (200, 200)
    assert ids == ids_absent
    text = tok.decode(ids)
    assert "\n" + json.dumps(absent, ensure_ascii=False) + "\n" in text
    assert "null" not in text


# --------------------------------------------------------------------------- call ids


def test_parallel_call_ids_are_unique_within_and_across_turns(tok: PreTrainedTokenizerFast) -> None:
    """fw-ai/fireconnect#16 (ids were ``{tool}:{position}``, restarting every turn, so the same id
    recurred with other arguments), NVIDIA-NeMo/Switchyard#502 (a backend reused ``call_0``
    across responses), tontinton/maki#991 (index-based placeholder ids collided across turns),
    OpenRouterTeam/ai-sdk-provider#471 and brainlid/langchain#620 (parallel calls shared an id or
    merged while streaming), anthropics/anthropic-sdk-csharp#53 (streamed calls were
    accumulated twice over, ``[t1, t1, t2]``, and refused as duplicate ids). Expected: every call of every answer, streamed or not, has its own
    non-empty id (``tool_call_id`` is the only link from a result back to its call), and a
    stream's parallel calls fold into separate calls with the arguments DeepSeek's parser gives.
    Oracles: the ``openai`` client's types and stream accumulator, ``deepseek-recipe``."""
    body = {"messages": MSGS, "tools": [WEATHER]}
    want = [
        (c["function"]["name"], c["function"]["arguments"])
        for c in _recipe_message(body, CALL_TWO).get("tool_calls") or []
    ]
    assert len(want) == 2
    ids: list[str] = []
    for stream in (False, True, False, True):
        _, tc = client_for(grammar_chunk_tm(tok, CALL_TWO), allow_auto_truncate=False)
        r = tc.post(CHAT, json={"model": "m", **body, "stream": stream})
        assert r.status_code == 200, r.text
        ch = (fold_chat_stream(r.text) if stream else ChatCompletion.model_validate(r.json())).choices[0]
        assert ch.finish_reason == "tool_calls"
        assert [(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []] == want
        ids += [c.id for c in ch.message.tool_calls or []]
    assert all(isinstance(i, str) and i for i in ids)
    assert len(set(ids)) == len(ids) == 8, ids


@pytest.mark.parametrize("per_chunk", [1, 3, 100000])
def test_every_streamed_call_delta_carries_its_index_and_the_first_its_id(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """openai/openai-python#3246 and SamSaffron/term-llm#314 (OpenAI-compatible servers omitted
    ``delta.tool_calls[].index``: the client's accumulator crashed or merged parallel calls into
    one), continuedev/continue#13225 (a first call delta without ``id``: the call was dropped)
    and dirac-run/dirac#215 (argument deltas under another call's index were lost). Expected: in
    the raw stream every tool-call delta has an integer ``index``; the first delta of each index
    has its ``id``, ``type: "function"`` and name, later ones neither ``id`` nor name; indexes
    count 0, 1, ... in order; concatenating each index's argument fragments gives DeepSeek's own
    parser's arguments, however many tokens come per chunk. Oracles: the ``openai`` client's
    ``ChatCompletionChunk`` type (each chunk validated), ``deepseek-recipe``'s response parser."""
    body = {"messages": MSGS, "tools": [WEATHER], "stream": True}
    want = [
        (c["function"]["name"], c["function"]["arguments"])
        for c in _recipe_message(body, CALL_TWO).get("tool_calls") or []
    ]
    _, tc = client_for(grammar_chunk_tm(tok, CALL_TWO, per_chunk), allow_auto_truncate=False)
    r = tc.post(CHAT, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    calls: dict[int, list[str]] = {}
    for raw in sse_chunks(r.text):
        chunk = ChatCompletionChunk.model_validate(raw)
        for choice in chunk.choices:
            for i, d in enumerate(choice.delta.tool_calls or []):
                assert isinstance(raw["choices"][0]["delta"]["tool_calls"][i].get("index"), int), raw
                if d.index not in calls:
                    assert d.index == len(calls), (d.index, list(calls))
                    assert d.id and d.type == "function" and d.function and d.function.name, d
                    calls[d.index] = [d.function.name, d.function.arguments or ""]
                else:
                    assert d.id is None and (d.function is None or d.function.name is None), d
                    calls[d.index][1] += (d.function.arguments if d.function else None) or ""
    assert [(n, a) for n, a in calls.values()] == want


# --------------------------------------------------------------------------- DSML cut by max_tokens


#: a reply whose DSML wrapper tag is cut by the token limit right after its marker
REPLY_CUT = f'Let me check.\n\n<{DSML}tool_calls>\n<{DSML}invoke name="get_weather">'
#: the whole reply the cuts are taken from
REPLY_WHOLE = "Let me check." + dsml_block(dsml_invoke("get_weather", dsml_param("city", True, "Paris")))


@pytest.mark.parametrize("stream", [False, True])
def test_dsml_markup_cut_by_max_tokens_never_leaks_into_content(
    tok: PreTrainedTokenizerFast, stream: bool
) -> None:
    """JustVugg/colibri#948 (DeepSeek-V4 tool calling: a reply cut by the token limit must be
    cut at the first DSML marker, so raw DSML syntax never reaches the answer) and
    ROCm/ATOM#1428 (DeepSeek-V4 DSML calls surfaced as text without a DSML parser). Expected:
    for every cut inside the block's opening markup, ``content`` is the text before the block
    (no ``DSML`` and no ``<`` of its tags: the report's rule, stricter than DeepSeek's parser,
    which leaves a lone ``"<"`` cut right after the separator), the finish reason is
    ``"length"``, and the calls are DeepSeek's own parser's calls for the same cut text.
    Oracles: ``deepseek-recipe``'s response parser (finish ``length``), the ``openai`` client's
    types and stream accumulator."""
    full = tok.encode(REPLY_WHOLE, add_special_tokens=False)
    assert tok.decode(full).startswith(REPLY_CUT)
    head = len(tok.encode("Let me check.", add_special_tokens=False))
    body = {"messages": MSGS, "tools": [WEATHER]}
    for limit in range(head + 1, len(tok.encode(REPLY_CUT, add_special_tokens=False)) + 1):
        cut = tok.decode(full[:limit])
        oracle = _recipe_message({**body, "max_tokens": limit}, cut, finish="length")
        want_calls = [
            (c["function"]["name"], c["function"]["arguments"]) for c in oracle.get("tool_calls") or []
        ]
        _, tc = client_for(grammar_chunk_tm(tok, REPLY_WHOLE), allow_auto_truncate=False)
        r = tc.post(CHAT, json={"model": "m", **body, "max_tokens": limit, "stream": stream})
        assert r.status_code == 200, r.text
        ch = (fold_chat_stream(r.text) if stream else ChatCompletion.model_validate(r.json())).choices[0]
        content = ch.message.content or ""
        assert ch.finish_reason == "length", (limit, cut)
        assert "DSML" not in content and "<" not in content, (limit, cut, content)
        assert content.rstrip() == "Let me check.", (limit, cut, content)
        assert [(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []] == want_calls, (
            limit,
            cut,
        )

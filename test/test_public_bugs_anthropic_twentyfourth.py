"""Public bug reports of peer servers', gateways' and clients' Anthropic Messages API handling
(``/v1/messages``, ``/v1/messages/count_tokens``), replayed through the in-process routes (each
test names its report).

The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: DeepSeek's own
Messages converter, V4 encoder and Messages response generator (the ``deepseek-recipe`` package)
for the prompt a conversation renders and the content blocks a reply reads as; the DeepSeek
tokenizer (``tok``) for token counts; the ``anthropic`` client's types (every body and event
validated by ``post``), its errors and its stream accumulator (``client.messages.stream``).
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest
from anthropic_testutil import NO_THINK, WEATHER, comparable_content, make_clients, post, served_prompt
from deepseek_recipe_testutil import recipe_messages_prompt, recipe_messages_response
from fake_prompt_tm import ARGS, CALL, MODEL, D, PromptTM, blocks
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
THINK = {"type": "enabled", "budget_tokens": 1024}
REASONING = "The user asks about the weather, so I should look it up before answering"
CALL_USE = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 25C"}


def _text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def _tool_turn(assistant: list[dict[str, Any]]) -> dict[str, Any]:
    """A tool loop whose assistant turn holds ``assistant`` (its call answered by ``RESULT``)."""
    return {
        "tools": [WEATHER],
        "messages": [
            *USER,
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": [RESULT]},
        ],
    }


@pytest.mark.parametrize(
    "assistant",
    [
        pytest.param([_text(""), _text("Let me check."), CALL_USE], id="empty-then-text-then-call"),
        pytest.param([_text(""), _text(""), _text("Let me check."), CALL_USE], id="two-empty-then-text"),
        pytest.param([_text(""), CALL_USE], id="empty-then-call"),
        pytest.param([_text("Let me check."), _text(""), CALL_USE], id="text-then-empty-then-call"),
        pytest.param([_text("\n"), CALL_USE], id="whitespace-then-call"),
    ],
)
def test_empty_text_blocks_beside_tool_use_render_the_recipe_prompt(
    tok: PreTrainedTokenizerFast, assistant: list[dict[str, Any]]
) -> None:
    """BerriAI/litellm#22930 (PR #22979: Claude's own replies carry ``{"type": "text", "text": ""}``
    next to ``tool_use`` blocks, and replaying them through ``/v1/messages`` failed; also
    anthropics/claude-code#23440 and aaif-goose/goose#7343 for whitespace-only blocks): such a
    replayed assistant turn is served and renders the prompt DeepSeek's own Messages converter
    renders; an empty block before the text adds no blank line in front of it (it added
    ``"\\n\\n"`` here before), and ``count_tokens`` counts that prompt."""
    body = _tool_turn(assistant)
    prompt, n, counted = served_prompt(tok, body)
    assert prompt == recipe_messages_prompt(body)
    assert counted == n


def test_empty_text_block_before_a_prefill_adds_nothing(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#22930 for a final assistant message (a prefill, continued by the answer):
    a leading empty ``text`` block must not put a blank line in front of the prefilled text. The
    served prompt ends with the prefill exactly as a string content renders it, and the non-final
    rendering of the same turn is DeepSeek's own Messages converter's."""
    as_string, _, _ = served_prompt(tok, {"messages": [*USER, {"role": "assistant", "content": "It is"}]})
    as_blocks, n, counted = served_prompt(
        tok, {"messages": [*USER, {"role": "assistant", "content": [_text(""), _text("It is")]}]}
    )
    assert as_blocks == as_string and as_blocks.endswith("</think>It is")
    assert counted == n
    later = {
        "messages": [
            *USER,
            {"role": "assistant", "content": [_text(""), _text("It is sunny.")]},
            {"role": "user", "content": "And tomorrow?"},
        ]
    }
    assert served_prompt(tok, later)[0] == recipe_messages_prompt(later)


@pytest.mark.parametrize(
    "after", [[_text("Checking now.")], [_text(""), _text("Checking now.")]], ids=["text", "empty-and-text"]
)
def test_text_after_tool_use_in_an_assistant_turn_is_served(
    tok: PreTrainedTokenizerFast, after: list[dict[str, Any]]
) -> None:
    """Alishahryar1/free-claude-code#206: a Claude Code transcript whose assistant turn holds
    ``tool_use`` followed by text (valid Anthropic content, and what this server's own replies
    hold when the model writes text after its calls) was refused by the OpenAI-side conversion,
    and every later request of the session failed. It is served here; the turn renders as DeepSeek's
    own Messages converter renders the same blocks with the text first (the V4 template writes an
    assistant turn's text before its calls, and the converter itself refuses the text-after form),
    and ``count_tokens`` agrees."""
    served, n, counted = served_prompt(tok, _tool_turn([_text("Let me check."), CALL_USE, *after]))
    text_first = _tool_turn([_text("Let me check."), *after, CALL_USE])
    assert served == recipe_messages_prompt(text_first)
    assert counted == n


@pytest.mark.parametrize(
    "thinking",
    [
        pytest.param({"type": "thinking", "thinking": "Look it up."}, id="no-signature"),
        pytest.param({"type": "thinking", "thinking": "Look it up.", "signature": ""}, id="empty-signature"),
    ],
)
def test_replayed_thinking_without_a_signature_is_served(
    tok: PreTrainedTokenizerFast, thinking: dict[str, Any]
) -> None:
    """QwenLM/qwen-code#11772: a history produced elsewhere replays ``thinking`` blocks without a
    ``signature`` (or with ``""``), and SGLang's ``/v1/messages`` refused the request with a 400
    ("did not match any variant"). Signatures are opaque here and never checked: both shapes are
    served and render the same prompt as a signed block, which is DeepSeek's own Messages
    converter's prompt."""
    signed = _tool_turn([{**thinking, "signature": "sig"}, CALL_USE])
    body = _tool_turn([thinking, CALL_USE])
    prompt, n, counted = served_prompt(tok, body)
    assert prompt == served_prompt(tok, signed)[0] == recipe_messages_prompt(signed)
    assert counted == n


def test_thinking_block_signature_is_sent_streamed_and_not(tok: PreTrainedTokenizerFast) -> None:
    """kekzl/imp#1555 (``thinking`` blocks carried no ``signature`` and no ``signature_delta`` was
    ever sent) and dwgx/WindsurfAPI#228 (a placeholder ``signature: ""`` is refused by strict
    clients): a thinking block has a non-empty string ``signature``; streamed, the thinking block
    opens with the ``anthropic`` client's ``ThinkingBlock`` shape and its one ``signature_delta``
    comes after the ``thinking_delta`` events and right before its ``content_block_stop``. The
    client's accumulation of the stream has the non-streamed message's signature, and the blocks
    are DeepSeek's own Messages response generator's."""
    reply = REASONING + ".</think>Sunny."
    tm = PromptTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    body, events = post(tc, {"messages": USER, "thinking": THINK, "max_tokens": 200})
    sig = body["content"][0]["signature"]
    assert isinstance(sig, str) and sig
    block = [e for e in events if e.get("index") == 0]
    assert block[0]["type"] == "content_block_start"
    assert block[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    deltas = [e["delta"]["type"] for e in block[1:-1]]
    assert deltas[-1] == "signature_delta" and set(deltas[:-1]) == {"thinking_delta"}
    assert block[-2]["delta"]["signature"] == sig and block[-1]["type"] == "content_block_stop"
    with client.messages.stream(model=MODEL, max_tokens=200, messages=USER, thinking=THINK) as s:
        final = s.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].signature == sig
    want = recipe_messages_response({"messages": USER}, reply, thinking=True)["content"]
    assert (
        comparable_content(blocks(final)) == comparable_content(body["content"]) == comparable_content(want)
    )


def test_tool_choice_none_is_served_with_the_recipe_prompt(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#24443: ``tool_choice: {"type": "none"}`` (Anthropic's documented choice to
    offer tools but forbid calls) made the ``/v1/messages`` proxy answer a 500 ("Incompatible tool
    choice param"). Here it is served, streamed or not (the ``anthropic`` client's types accept
    both), the prompt is DeepSeek's own Messages converter's for it, a text reply is one ``text``
    block with ``end_turn``, and ``count_tokens`` takes it too."""
    tm = PromptTM(tok, reply="I would look it up, but I will not.")
    client, _, tc = make_clients(tm)
    req = {"messages": USER, "tools": [WEATHER], "tool_choice": {"type": "none"}, "thinking": NO_THINK}
    body, _ = post(tc, req)
    assert tok.decode(tm.received[-1].input_ids) == recipe_messages_prompt(req)
    assert [b["type"] for b in body["content"]] == ["text"] and body["stop_reason"] == "end_turn"
    counted = client.messages.count_tokens(model=MODEL, **req).input_tokens  # type: ignore[arg-type]
    assert counted == len(tm.received[-1].input_ids)


@pytest.mark.parametrize("stream", [False, True])
def test_cached_tokens_are_not_counted_twice(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """MAXeaglet/commandcode-proxy#25: the proxy reported the upstream's whole prompt as
    ``input_tokens`` and the cache hit again as ``cache_read_input_tokens``, so Claude Code (which
    adds them, as the ``anthropic`` client's ``Usage`` documents: the total input is the sum of
    ``input_tokens``, ``cache_creation_input_tokens`` and ``cache_read_input_tokens``) showed twice
    the real context. With ``--enable-cache-report`` the three sum to the prompt's token count (the
    DeepSeek tokenizer's count of DeepSeek's own converter's prompt) in the non-streamed message
    and in the stream's ``message_start`` and final usage alike."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, _ = make_clients(tm, cache_report=True)
    n = len(tok.encode(recipe_messages_prompt({"messages": USER}), add_special_tokens=False))
    kw: dict[str, Any] = {"model": MODEL, "max_tokens": 20, "messages": USER, "thinking": NO_THINK}
    usages = []
    if stream:
        with client.messages.stream(**kw) as s:
            usages += [ev.message.usage for ev in s if ev.type == "message_start"]
            usages.append(s.get_final_message().usage)
    else:
        usages.append(client.messages.create(**kw).usage)
    for u in usages:
        total = u.input_tokens + (u.cache_creation_input_tokens or 0) + (u.cache_read_input_tokens or 0)
        assert total == n
    assert usages[-1].cache_read_input_tokens and usages[-1].input_tokens < n


@pytest.mark.parametrize(
    ("reply", "tools", "max_tokens"),
    [
        pytest.param("Sunny and warm in Paris today.", None, 100, id="text"),
        pytest.param("Let me check." + CALL, [WEATHER], 300, id="tool-use"),
        pytest.param("Sunny and warm in Paris today.", None, 3, id="max-tokens"),
    ],
)
def test_nothing_follows_message_stop(
    tok: PreTrainedTokenizerFast, reply: str, tools: list[dict[str, Any]] | None, max_tokens: int
) -> None:
    """anthropics/claude-code#67809: a provider sent deltas after ``message_stop`` and Claude Code
    applied them to the closed message (stale tool calls, extra requests). This server's streams
    end with ``message_delta`` then ``message_stop`` and nothing after it, for a text answer, a
    tool call and a ``max_tokens`` cut; the stream is Anthropic's event grammar (``post``)."""
    tm = PromptTM(tok, reply=reply)
    _, _, tc = make_clients(tm)
    req: dict[str, Any] = {"messages": USER, "thinking": NO_THINK, "max_tokens": max_tokens}
    if tools:
        req["tools"] = tools
    body, events = post(tc, req)
    assert [e["type"] for e in events][-2:] == ["message_delta", "message_stop"]
    assert [e["type"] for e in events].count("message_stop") == 1
    assert events[-2]["delta"]["stop_reason"] == body["stop_reason"]


@pytest.mark.parametrize("cut", [4, 12, 20], ids=["in-text", "in-call-head", "in-arguments"])
def test_cut_stream_closes_its_open_block_before_message_delta(
    tok: PreTrainedTokenizerFast, cut: int
) -> None:
    """router-for-me/CLIProxyAPI#3133 (review: an incomplete generation emitted ``message_delta``
    and ``message_stop`` without first closing the open text or tool block): ``max_tokens``
    cutting the answer in its text, in the call's markup or in its arguments leaves every started
    block stopped before ``message_delta`` (``post`` checks the block grammar), a ``max_tokens``
    stop, and the ``anthropic`` client's accumulated message equals the non-streamed one."""
    reply = "Let me check." + CALL
    assert len(tok.encode(reply, add_special_tokens=False)) > cut
    tm = PromptTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    req = {"messages": USER, "tools": [WEATHER], "thinking": NO_THINK, "max_tokens": cut}
    body, events = post(tc, req)
    kinds = [e["type"] for e in events]
    started = kinds.count("content_block_start")
    assert kinds.count("content_block_stop") == started
    last_stop = max((i for i, k in enumerate(kinds) if k == "content_block_stop"), default=-1)
    assert last_stop < kinds.index("message_delta")
    assert body["stop_reason"] == events[-2]["delta"]["stop_reason"] == "max_tokens"
    with client.messages.stream(model=MODEL, **req) as s:  # type: ignore[arg-type]
        final = s.get_final_message()
    assert comparable_content(blocks(final)) == comparable_content(body["content"])


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_over_the_context_is_a_400_not_a_500(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """sgl-project/sglang#22030: a request whose prompt exceeds the context came back from SGLang's
    ``/v1/messages`` as HTTP 500 ``Internal processing error`` (the chat layer's 400 swallowed).
    Here it is a 400 in Anthropic's error body, ``invalid_request_error`` with Anthropic's
    ``prompt is too long`` words, streamed or not, before any event and before the engine; the
    ``anthropic`` client raises its ``BadRequestError`` (not a retried ``InternalServerError``)."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)
    long = [{"role": "user", "content": "weather " * (tm.context_len + 100)}]
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 20, "messages": long, "stream": stream})
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"].startswith("prompt is too long:")
    assert tm.received == []
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=20, messages=long)  # type: ignore[arg-type]
    assert e.value.status_code == 400


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_system_only_request_is_a_400_naming_messages(tok: PreTrainedTokenizerFast, path: str) -> None:
    """braintrustdata/lingua#228 (a request with a ``system`` prompt and no messages needed a
    clear error, not a converter failure): ``messages: []`` with a ``system`` prompt is Anthropic's
    400 ``invalid_request_error`` whose message names ``messages``, on both routes, and nothing
    reaches the engine; the ``anthropic`` client raises ``BadRequestError``."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)
    body: dict[str, Any] = {"model": MODEL, "system": "You are a weather bot.", "messages": []}
    if path == "/v1/messages":
        body["max_tokens"] = 20
    r = tc.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"].startswith("messages")
    assert tm.received == []
    with pytest.raises(anthropic.BadRequestError):
        if path == "/v1/messages":
            client.messages.create(model=MODEL, max_tokens=20, system="x", messages=[])
        else:
            client.messages.count_tokens(model=MODEL, system="x", messages=[])


def test_streamed_tool_input_arrives_as_input_json_deltas(tok: PreTrainedTokenizerFast) -> None:
    """jyjeanne/crustly#38 and theopenco/llmgateway#2468 (a ``tool_use`` block starts with
    ``input: {}`` and its arguments come as ``input_json_delta`` fragments; consumers that kept
    the start block's ``{}`` or skipped fragments lost the arguments): the block starts with an
    empty ``input``, every fragment is a string, their concatenation is a JSON object equal to
    the non-streamed block's ``input``, DeepSeek's own response generator's arguments, and the
    ``anthropic`` client's accumulator reads the same."""
    reply = "Let me check." + CALL
    tm = PromptTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    req = {"messages": USER, "tools": [WEATHER], "thinking": NO_THINK, "max_tokens": 300}
    body, events = post(tc, req)
    start = next(
        e for e in events if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
    )
    assert start["content_block"]["input"] == {}
    frags = [
        e["delta"]["partial_json"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
    ]
    assert frags and all(isinstance(f, str) for f in frags)
    want = recipe_messages_response({"messages": USER, "tools": [WEATHER]}, reply, thinking=False)["content"]
    assert json.loads("".join(frags)) == body["content"][-1]["input"] == want[-1]["input"] == ARGS
    with client.messages.stream(model=MODEL, **req) as s:  # type: ignore[arg-type]
        final = s.get_final_message()
    assert final.content[-1].type == "tool_use" and final.content[-1].input == ARGS


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"input": [1]}, id="list"),
        pytest.param({"input": '{"city": "Paris"}'}, id="json-string"),
        pytest.param({"input": None}, id="null"),
        pytest.param({"input": None, "drop": True}, id="missing"),
    ],
)
def test_tool_use_input_that_is_not_an_object_is_a_400_naming_it(
    tok: PreTrainedTokenizerFast, bad: dict[str, Any]
) -> None:
    """anthropics/claude-code#6695: a replayed ``tool_use`` whose ``input`` was not an object got
    Anthropic's 400 ``messages.1.content.0.tool_use.input: Input should be a valid dictionary``
    (a missing one: ``Field required``; DeepSeek's own Messages converter refuses a missing
    ``input`` too, ``missing field `input```). Here each is a 400 ``invalid_request_error`` whose
    message starts with ``messages.1.content.0.input``, on both routes and before the engine (a
    missing ``input`` was read as ``{}`` before); the ``anthropic`` client raises
    ``BadRequestError``."""
    call = {k: v for k, v in CALL_USE.items() if k != "input"}
    if not bad.get("drop"):
        call["input"] = bad["input"]
    body = _tool_turn([call])
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)
    for path, extra in (("/v1/messages", {"max_tokens": 20}), ("/v1/messages/count_tokens", {})):
        r = tc.post(path, json={"model": MODEL, **body, **extra})
        assert r.status_code == 400, r.text
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
        assert err["error"]["message"].startswith("messages.1.content.0.input:")
    assert tm.received == []
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=20, **body)
    if bad.get("drop"):
        with pytest.raises(ValueError, match="input"):
            recipe_messages_prompt(body)


@pytest.mark.parametrize("max_tokens", ["missing", None, "100"])
@pytest.mark.parametrize("stream", [False, True])
def test_bad_max_tokens_is_an_anthropic_400_not_a_422_or_500(
    tok: PreTrainedTokenizerFast, max_tokens: Any, stream: bool
) -> None:
    """JohnnyZ93/oai-compatible-copilot#161 (a Messages server answered a request without
    ``max_tokens`` with FastAPI's 422 ``{"detail": [...]}``, which Anthropic clients cannot read)
    and waybarrios/vllm-mlx#376 (the streamed path crashed with a 500 without it): ``max_tokens``
    is required by Anthropic's API; a missing, null or string one is a 400 in Anthropic's error
    body (``invalid_request_error``, the message starting with ``max_tokens``) streamed or not,
    which the ``anthropic`` client's error type reads, and nothing reaches the engine."""
    tm = PromptTM(tok, reply="Sunny.")
    _, _, tc = make_clients(tm)
    body: dict[str, Any] = {"model": MODEL, "messages": USER, "stream": stream}
    if max_tokens != "missing":
        body["max_tokens"] = max_tokens
    r = tc.post("/v1/messages", json=body)
    assert r.status_code == 400, r.text
    err = anthropic.types.ErrorResponse.model_validate(r.json())
    assert err.error.type == "invalid_request_error"
    assert err.error.message.startswith("max_tokens")
    assert tm.received == []


def _malformed_call(value: str, city: bool) -> str:
    """A DSML ``get_weather`` call whose ``days`` (``string="false"``) is ``value``, not JSON."""
    head = f'<{D}parameter name="city" string="true">Paris</{D}parameter>\n' if city else ""
    return (
        f'Let me check.\n\n<{D}tool_calls>\n<{D}invoke name="get_weather">\n{head}'
        f'<{D}parameter name="days" string="false">{value}</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
    )


@pytest.mark.parametrize(
    ("value", "city"),
    [("three", False), ("three", True), ("3 days", True), ("[1, 2", True)],
    ids=["word", "word-after-city", "number-and-word", "unclosed-array"],
)
def test_malformed_call_never_streams_input_json_the_client_cannot_parse(
    tok: PreTrainedTokenizerFast, value: str, city: bool
) -> None:
    """anthropics/anthropic-sdk-python#1265 (also bojieli/ai-agent-book#194): the ``anthropic``
    client parses a ``tool_use`` block's accumulated ``partial_json`` after every
    ``input_json_delta`` (jiter's partial mode) and raises ``ValueError: Unable to parse tool
    parameter JSON from model`` on text no continuation makes JSON, ending the whole stream. A
    model that spells a ``string="false"`` value as no JSON (``"days": three``) made this
    server stream exactly that (the call's first deltas go out before its value is read), and
    ``client.messages.stream`` raised. Now every block's accumulated ``partial_json`` stays the
    beginning of a JSON object after each delta (checked with jiter, the client's parser), the
    client accumulates the stream without an error, and the text before the call is the
    non-streamed message's text."""
    import jiter

    reply = _malformed_call(value, city)
    tm = PromptTM(tok, reply=reply)
    client, _, tc = make_clients(tm)
    req = {"messages": USER, "tools": [WEATHER], "thinking": NO_THINK, "max_tokens": 300}
    body, events = post(tc, req)
    buf: dict[int, str] = {}
    for e in events:
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta":
            buf[e["index"]] = buf.get(e["index"], "") + e["delta"]["partial_json"]
            jiter.from_json(buf[e["index"]].encode(), partial_mode=True)  # raises as the client would
    with client.messages.stream(model=MODEL, **req) as s:  # type: ignore[arg-type]
        final = s.get_final_message()
    assert (
        [b.text for b in final.content if b.type == "text"]
        == [b["text"] for b in body["content"] if b["type"] == "text"]
        == ["Let me check."]
    )
    if city:  # the arguments that parsed before the malformed value reach the client
        assert [b.input["city"] for b in final.content if b.type == "tool_use"] == ["Paris"]


def test_omlx_3667_continued_thinking_streams_as_it_answers(tok: PreTrainedTokenizerFast) -> None:
    """jundot/omlx#3667 on the Messages route's prefill: a final assistant turn holding only a
    ``thinking`` block is continued (the output goes on inside that reasoning), so the newlines
    the model writes first are the reasoning's own text and are kept (DeepSeek's parser drops
    only a fresh reasoning's leading newlines). Expected (oracle: the same request not streamed,
    as the anthropic client reads both): the streamed thinking equals the whole message's, leading
    newlines included (the stream dropped them), and so does the answer text."""
    tm = PromptTM(tok, reply="\n\nso it is 4.</think>4")
    _client, _oa, tc = make_clients(tm)
    body = {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "Adding two and two", "signature": "x"}],
            },
        ],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    msg, events = post(tc, body)
    whole = [b["thinking"] for b in msg["content"] if b["type"] == "thinking"]
    assert whole == ["\n\nso it is 4."], msg["content"]
    streamed = "".join(
        e["delta"].get("thinking", "")
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "thinking_delta"
    )
    assert streamed == whole[0]
    text = "".join(
        e["delta"].get("text", "")
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    )
    assert text == "".join(b["text"] for b in msg["content"] if b["type"] == "text")

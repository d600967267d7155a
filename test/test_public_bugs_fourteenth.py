"""A fourteenth set of public bug reports of OpenAI / Anthropic-compatible servers, replayed here:
stop sequences in a stream (no partial stop leaked) and in the Messages API (``stop_reason`` /
``stop_sequence``, an empty stop sequence refused with a 400), streamed chat log-probabilities
(every token's entry, ``finish_reason`` kept), streamed usage with ``n > 1``, the Completions
API's own log-probability shape (unstreamed and streamed, ``logprobs: 0``, every ``echo`` x
``logprobs`` combination, ``n``), a ``tool`` message after an assistant tool call, streamed
content written before a DSML call, and, on the embedded DeepSeek-V4 model, streamed forced tool
calls (``tool_choice: "required"`` with their log-probabilities, a named function) and a strict
``json_schema`` answer. Each test names its report; every report passed as-is and is kept as a
regression test.

Fixtures: ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model writes
``FAKE_TEXT`` over and over, fake log-probabilities), ``more_bugs_server`` (the embedded model,
random weights, greedy) and the in-process chat route over ``ChunkTM`` (a hand-written reply
generated token by token). Oracles: the ``openai`` / ``anthropic`` clients' own types and
stream accumulators, the same request unstreamed, ``FAKE_TEXT`` (what the fake model writes),
the hand-written reply, ``json`` / ``jsonschema`` and the OpenAI / Anthropic API references'
field shapes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_tools_testutil import ChunkTM, client_for
from dsml_testutil import dsml_block, dsml_invoke, dsml_param
from public_bugs_testutil import MODEL, post, sse
from server_fixture import FAKE_TEXT, ServerHandle

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
jsonschema = pytest.importorskip("jsonschema")

from openai.types import Completion  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name
HI = [{"role": "user", "content": "Hi"}]
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "enum": ["Paris", "Tokyo"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city", "days"],
            },
        },
    }
]


def _chunks(server: ServerHandle, path: str, body: dict[str, Any]) -> list[Any]:
    """The streamed chat ``body``'s chunks validated as the ``openai`` client's
    ``ChatCompletionChunk`` (completion chunks are read as JSON: the client builds them without
    validation, a running chunk's ``finish_reason`` being null)."""
    assert path == CHAT
    return [ChatCompletionChunk.model_validate(c) for c in sse(server, path, body)]


def _fold_calls(chunks: list[ChatCompletionChunk]) -> tuple[str, list[dict[str, str]], list[str]]:
    """A streamed chat answer folded as a client does: ``(content, calls, finish_reasons)``."""
    content, calls, reasons = "", [], []
    for c in chunks:
        for ch in c.choices:
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                while len(calls) <= tc.index:
                    calls.append({"name": "", "arguments": ""})
                fn = tc.function
                if fn is not None:
                    calls[tc.index]["name"] += fn.name or ""
                    calls[tc.index]["arguments"] += fn.arguments or ""
            if ch.finish_reason:
                reasons.append(ch.finish_reason)
    return content, calls, reasons


# --------------------------------------------------------------------------- stop sequences


def test_sglang_6997_streamed_stop_leaks_no_part_of_the_stop(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#6997: with ``stop: ["Observation"]`` and ``stream: true`` the streamed
    content ended with the first characters of the stop sequence (held back nowhere). The fake
    model writes :data:`FAKE_TEXT`; a stop sequence of several tokens (``"Stop here"``): the
    streamed content, folded, equals the unstreamed one, which is the text before the stop, and no
    chunk carries any of its characters; ``finish_reason`` is ``"stop"`` both ways."""
    stop = "Stop here"
    body = {"model": FAKE_MODEL, "messages": HI, "max_tokens": 60, "stop": [stop]}
    want = FAKE_TEXT[: FAKE_TEXT.index(stop)]
    full = ChatCompletion.model_validate(post(plain_fake_server, CHAT, body).json())
    assert full.choices[0].message.content == want and full.choices[0].finish_reason == "stop"
    content, _, reasons = _fold_calls(_chunks(plain_fake_server, CHAT, body))
    assert content == want and reasons == ["stop"]
    assert not any(content.endswith(stop[:k]) for k in range(1, len(stop)))


def test_rapid_mlx_469_messages_stop_sequences_enforced_and_reported(plain_fake_server: ServerHandle) -> None:
    """raullenchai/Rapid-MLX#469 (and sgl-project/sglang#33153, SGLang's Anthropic adapter): the
    Messages API accepted ``stop_sequences`` but went on past them, or mapped the stop to
    ``stop_reason: "end_turn"``, ``stop_sequence: null``. Expected (Anthropic's
    API reference): the text ends before the sequence, ``stop_reason`` is ``"stop_sequence"`` and
    ``stop_sequence`` the one matched, unstreamed and in the streamed ``message_delta``."""
    client = anthropic.Anthropic(base_url=plain_fake_server.url, api_key="x", max_retries=0, timeout=60)
    kw = {"model": FAKE_MODEL, "max_tokens": 50, "messages": HI, "stop_sequences": ["STOP", "lazy"]}
    msg = client.messages.create(**kw)
    want = FAKE_TEXT[: FAKE_TEXT.index("lazy")]
    assert "".join(b.text for b in msg.content if b.type == "text") == want
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "lazy"
    with client.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert "".join(b.text for b in final.content if b.type == "text") == want
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "lazy"


def test_mcp_web_ui_5_empty_stop_sequence_is_a_400(plain_fake_server: ServerHandle) -> None:
    """MegaGrindStone/mcp-web-ui#5: Anthropic's API answers ``stop_sequences: ["", "\\n"]`` with a
    400 ``invalid_request_error`` (an empty stop sequence would match everywhere). Expected: the
    ``anthropic`` client raises ``BadRequestError`` whose body is Anthropic's error shape naming
    ``stop_sequences``; the same ``stop`` on the chat route is OpenAI's 400 naming ``stop``; a
    list without the empty string is served."""
    client = anthropic.Anthropic(base_url=plain_fake_server.url, api_key="x", max_retries=0, timeout=60)
    kw = {"model": FAKE_MODEL, "max_tokens": 20, "messages": HI}
    for stops in (["", "\n"], [""]):
        with pytest.raises(anthropic.BadRequestError) as e:
            client.messages.create(**kw, stop_sequences=stops)
        body = e.value.response.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert "stop_sequences" in body["error"]["message"]
        r = post(
            plain_fake_server, CHAT, {"model": FAKE_MODEL, "messages": HI, "max_tokens": 5, "stop": stops}
        )
        assert r.status_code == 400 and r.json()["param"] == "stop", r.text
    # a whitespace-only sequence is refused too (Anthropic's API, BerriAI/litellm#3286): text around it
    msg = client.messages.create(**kw, stop_sequences=["\nEND"])
    assert msg.stop_reason == "max_tokens" and msg.content[0].text == FAKE_TEXT[: len(msg.content[0].text)]


def test_dial_140_streamed_usage_with_n_choices(plain_fake_server: ServerHandle) -> None:
    """epam/ai-dial-adapter-openai#140: with ``n > 1`` a stream has one ``finish_reason`` chunk
    per choice, so usage attached to "the last finish chunk" was wrong; OpenAI sends it, with
    ``stream_options.include_usage``, in one chunk of its own with empty ``choices``. Expected:
    each of the ``n`` choices finishes once, no choice chunk carries usage, and one last chunk
    with ``choices: []`` has the usage of the unstreamed request (both choices' tokens), for chat
    and for completions."""
    for path, body in (
        (CHAT, {"model": FAKE_MODEL, "messages": HI}),
        (COMPLETIONS, {"model": FAKE_MODEL, "prompt": "Hi"}),
    ):
        body = {**body, "max_tokens": 3, "n": 2}
        want = post(plain_fake_server, path, body).json()["usage"]
        assert want["completion_tokens"] == 6
        chunks = sse(plain_fake_server, path, {**body, "stream_options": {"include_usage": True}})
        finishes = sorted(ch["index"] for c in chunks for ch in c["choices"] if ch.get("finish_reason"))
        assert finishes == [0, 1], path
        assert all(c.get("usage") is None for c in chunks[:-1]) and chunks[-1]["choices"] == []
        got = chunks[-1]["usage"]
        assert {k: got[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == {
            k: want[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")
        }, path


# --------------------------------------------------------------------------- chat log-probabilities


def test_mlx_lm_1630_streamed_chat_logprobs_are_not_dropped(plain_fake_server: ServerHandle) -> None:
    """ml-explore/mlx-lm#1630: ``logprobs: true, top_logprobs: 3`` gave each token's entry
    unstreamed, none at all with ``stream: true`` (a 200 saying nothing). Expected: the streamed
    entries, folded, are the unstreamed ones (token, logprob, 3 alternatives each), one per
    generated token, and their tokens spell the content."""
    body = {"model": FAKE_MODEL, "messages": HI, "max_tokens": 8, "logprobs": True, "top_logprobs": 3}
    full = ChatCompletion.model_validate(post(plain_fake_server, CHAT, body).json())
    want = full.choices[0].logprobs.content
    assert len(want) == full.usage.completion_tokens == 8
    got = []
    for c in _chunks(plain_fake_server, CHAT, body):
        for ch in c.choices:
            if ch.logprobs is not None and ch.logprobs.content:
                got.extend(ch.logprobs.content)
    assert [e.model_dump() for e in got] == [e.model_dump() for e in want]
    assert all(len(e.top_logprobs) == 3 for e in got)
    assert "".join(e.token for e in got) == full.choices[0].message.content


def test_litellm_10686_finish_reason_kept_with_streamed_logprobs(plain_fake_server: ServerHandle) -> None:
    """BerriAI/litellm#10686: with ``logprobs: true`` and ``stream: true`` the last chunk lost its
    ``finish_reason``. Expected: exactly one choice chunk carries ``finish_reason`` (``"length"``
    at ``max_tokens``, ``"stop"`` at a stop string), as without log-probabilities."""
    for extra, reason in (({"max_tokens": 5}, "length"), ({"max_tokens": 40, "stop": ["fox"]}, "stop")):
        for lp in (True, False):
            body = {"model": FAKE_MODEL, "messages": HI, "logprobs": lp, "top_logprobs": 1 if lp else None}
            _, _, reasons = _fold_calls(_chunks(plain_fake_server, CHAT, {**body, **extra}))
            assert reasons == [reason], (extra, lp)


# --------------------------------------------------------------------------- completions log-probabilities


def _check_completion_logprobs(lp: Any, text: str, k: int | None) -> None:
    """OpenAI's Completions shape: four parallel lists; tokens spell ``text``; offsets count
    characters; ``k`` alternatives per entry (``None``: not checked)."""
    assert lp is not None
    n = len(lp.tokens)
    assert len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n > 0
    assert "".join(lp.tokens) == text
    offs = [len("".join(lp.tokens[:i])) for i in range(n)]
    assert [o - lp.text_offset[0] for o in lp.text_offset] == offs
    if k is not None:  # OpenAI: "up to logprobs+1 elements", the sampled token always included
        for tok, top in zip(lp.tokens, lp.top_logprobs):
            assert isinstance(top, dict) and tok in top and len(top) in (k, k + 1), top


def test_mistralrs_1876_completions_logprobs_shape(plain_fake_server: ServerHandle) -> None:
    """EricLBuehler/mistral.rs#1876: ``/v1/completions`` with ``logprobs: 2`` answered
    ``choices[0].logprobs: null``. Expected (OpenAI's legacy reference): an object of ``tokens``,
    ``token_logprobs``, ``top_logprobs`` (2 alternatives, and the sampled token) and ``text_offset``, one entry per
    generated token, the tokens spelling the text."""
    body = {"model": FAKE_MODEL, "prompt": "Say hello then stop.", "max_tokens": 8, "logprobs": 2}
    c = Completion.model_validate(post(plain_fake_server, COMPLETIONS, body).json())
    _check_completion_logprobs(c.choices[0].logprobs, c.choices[0].text, 2)
    assert len(c.choices[0].logprobs.tokens) == c.usage.completion_tokens == 8
    assert c.choices[0].text == FAKE_TEXT[: len(c.choices[0].text)]


def test_imp_1589_streamed_completions_logprobs_have_the_completions_shape(
    plain_fake_server: ServerHandle,
) -> None:
    """kekzl/imp#1589: ``/v1/completions`` answered the Chat logprobs object (``{"content": [...]}``)
    and, streamed, no log-probabilities at all. Expected: each streamed chunk with text carries the
    Completions shape for its tokens (no ``content`` key); folded, the entries equal the unstreamed
    ones and the text offsets run on across chunks."""
    body = {"model": FAKE_MODEL, "prompt": "Hi", "max_tokens": 6, "logprobs": 1}
    full = Completion.model_validate(post(plain_fake_server, COMPLETIONS, body).json())
    assert "content" not in post(plain_fake_server, COMPLETIONS, body).json()["choices"][0]["logprobs"]
    text, tokens, lps, tops, offs = "", [], [], [], []
    for raw in sse(plain_fake_server, COMPLETIONS, body):
        for ch in raw["choices"]:
            if ch["text"]:
                assert ch["logprobs"] is not None and "content" not in ch["logprobs"], raw
            text += ch["text"]
            if ch.get("logprobs"):
                tokens += ch["logprobs"]["tokens"]
                lps += ch["logprobs"]["token_logprobs"]
                tops += ch["logprobs"]["top_logprobs"]
                offs += ch["logprobs"]["text_offset"]
    want = full.choices[0].logprobs
    assert text == full.choices[0].text
    assert (tokens, lps, tops, offs) == (
        want.tokens,
        want.token_logprobs,
        want.top_logprobs,
        want.text_offset,
    )


def test_sglang_2301_completions_logprobs_zero_is_accepted(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#2301: ``logprobs: 0`` on ``/v1/completions`` was refused or treated as
    "no log-probabilities"; OpenAI accepts 0 (the chosen tokens' log-probabilities, no
    alternatives). Expected: 200, one ``token_logprobs`` entry per generated token, no
    alternatives beyond the chosen token, streamed as unstreamed."""
    body = {"model": FAKE_MODEL, "prompt": "Hi", "max_tokens": 5, "logprobs": 0}
    c = Completion.model_validate(post(plain_fake_server, COMPLETIONS, body).json())
    lp = c.choices[0].logprobs
    _check_completion_logprobs(lp, c.choices[0].text, None)
    assert len(lp.token_logprobs) == 5 and all(isinstance(x, float) for x in lp.token_logprobs)
    for tok, top in zip(lp.tokens, lp.top_logprobs):
        assert not top or set(top) <= {tok}, top
    streamed = [
        x for ch in sse(plain_fake_server, COMPLETIONS, body) for x in ch["choices"] if x.get("logprobs")
    ]
    assert [v for x in streamed for v in x["logprobs"]["token_logprobs"]] == lp.token_logprobs


@pytest.mark.parametrize("echo", [False, True])
@pytest.mark.parametrize("logprobs", [None, 1])
def test_vllm_1967_every_echo_and_logprobs_combination_streams(
    plain_fake_server: ServerHandle, echo: bool, logprobs: int | None
) -> None:
    """vllm-project/vllm#1967 (fixed by vllm-project/vllm#1992): a streamed ``/v1/completions``
    with ``echo`` failed unless ``logprobs`` was set, the echo path assuming log-probabilities.
    Expected for all four ``echo`` x ``logprobs`` combinations: 200; the streamed text, folded,
    equals the unstreamed text, which starts with the prompt exactly when ``echo`` is on and
    then holds what the fake model writes; log-probabilities come exactly when asked."""
    prompt = "Who won the world series in 2020?"
    body = {"model": FAKE_MODEL, "prompt": prompt, "max_tokens": 6, "echo": echo, "logprobs": logprobs}
    raw = post(plain_fake_server, COMPLETIONS, body).json()
    full = Completion.model_validate(raw) if not (echo and logprobs) else Completion.model_construct(**raw)
    text = raw["choices"][0]["text"]
    gen = text[len(prompt) :] if echo else text
    assert text.startswith(prompt) == echo and gen == FAKE_TEXT[: len(gen)] and gen
    assert (raw["choices"][0]["logprobs"] is not None) == (logprobs is not None)
    assert full.usage is not None
    chunks = sse(plain_fake_server, COMPLETIONS, body)
    assert "".join(x["text"] for ch in chunks for x in ch["choices"]) == text
    assert any(x.get("logprobs") for ch in chunks for x in ch["choices"]) == (logprobs is not None)


def test_rapid_mlx_733_completions_n_echo_and_integer_logprobs(plain_fake_server: ServerHandle) -> None:
    """raullenchai/Rapid-MLX#733: ``/v1/completions`` took ``n``, ``echo`` and ``logprobs`` and
    ignored them (one choice, no prompt, no log-probabilities), and refused the integer
    ``logprobs: 5`` of OpenAI's legacy reference. Expected: ``n: 2`` gives choices 0 and 1,
    ``echo`` puts the prompt before each, ``logprobs: 5`` gives 5 alternatives per generated
    token; usage counts both choices' tokens."""
    prompt = "Hello"
    body = {"model": FAKE_MODEL, "prompt": prompt, "max_tokens": 4, "n": 2, "echo": True, "logprobs": 5}
    c = post(plain_fake_server, COMPLETIONS, body).json()
    assert sorted(ch["index"] for ch in c["choices"]) == [0, 1]
    for ch in c["choices"]:
        text, lp = ch["text"], ch["logprobs"]
        assert text.startswith(prompt) and text[len(prompt) :] == FAKE_TEXT[: len(text) - len(prompt)]
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None  # the first prompt token
        assert "".join(lp["tokens"]) == text
        for tok, top in zip(lp["tokens"][-4:], lp["top_logprobs"][-4:]):
            assert len(top) in (5, 6) and (len(top) == 5 or tok in top), top
    assert c["usage"]["completion_tokens"] == 8


# --------------------------------------------------------------------------- tool messages


def test_sglang_5815_tool_result_message_is_not_a_server_error(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#5815: a conversation with an assistant tool call and its ``role:
    "tool"`` result (DeepSeek-V3-0324's tool parser) answered 500 Internal Server Error. Expected:
    200 and an answer, unstreamed and streamed, for a tool result given as a string and as a list
    of text parts."""
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 7, "b": 22}'}}
    for result in ("29", [{"type": "text", "text": "29"}]):
        messages = [
            {"role": "user", "content": "Add these numbers: 7 and 22."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ]
        tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
        body = {"model": FAKE_MODEL, "messages": messages, "tools": tools, "max_tokens": 5}
        r = post(plain_fake_server, CHAT, body)
        assert r.status_code == 200, r.text
        assert ChatCompletion.model_validate(r.json()).choices[0].message.content
        content, _, reasons = _fold_calls(_chunks(plain_fake_server, CHAT, body))
        assert content and reasons == ["length"]


# --------------------------------------------------------------------------- forced tool calls, streamed


def test_sglang_jax_1275_streamed_forced_call_comes_as_tool_calls(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang-jax#1275: with ``tool_choice: "required"`` (or a named function, see
    the next test) and ``stream: true``, the constrained call came back as ``content`` text
    deltas, not ``tool_calls`` (unstreamed was right). Expected: the streamed answer, folded, is
    the unstreamed one: ``get_weather`` calls with the same JSON arguments, no content,
    ``finish_reason`` ``"tool_calls"``.

    With ``logprobs: true`` on the same requests, vllm-project/vllm#37737 (a streamed chunk that
    held only tool-call markup tokens was dropped with its log-probabilities): the streamed
    entries, folded, are the unstreamed ones (same tokens, log-probabilities to 1e-3), one per
    generated token (usage's ``completion_tokens``)."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": WEATHER,
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 400,
        "logprobs": True,
        "top_logprobs": 1,
    }
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as ex:  # sent together: greedy outputs do not depend on the batch
        whole = ex.submit(post, more_bugs_server, CHAT, body)
        chunks = _chunks(more_bugs_server, CHAT, body)
        full = ChatCompletion.model_validate(whole.result().json())
    msg = full.choices[0].message
    assert msg.tool_calls and not (msg.content or "").strip()
    content, calls, reasons = _fold_calls(chunks)
    entries = [e for c in chunks for ch in c.choices if ch.logprobs for e in ch.logprobs.content or []]
    assert len(full.choices[0].logprobs.content) == full.usage.completion_tokens
    want = full.choices[0].logprobs.content
    assert [e.token for e in entries] == [e.token for e in want]
    # batched with the other request: float noise, not another distribution
    assert max(abs(a.logprob - b.logprob) for a, b in zip(entries, want)) < 1e-3
    assert not content.strip()
    want = [{"name": c.function.name, "arguments": c.function.arguments} for c in msg.tool_calls]
    assert calls == want and all(c["name"] == "get_weather" for c in calls)
    assert reasons == [full.choices[0].finish_reason] == ["tool_calls"]


@pytest.mark.slow
def test_sglang_18236_streamed_call_arguments_are_not_empty(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#18236 (DeepSeek V3.1): streamed tool calls came with ``arguments:
    "{}"`` although the model wrote parameters (unstreamed was right). Expected: the streamed
    arguments, joined, parse as JSON holding the schema's required keys and equal the unstreamed
    arguments, and the name comes once, in the call's first delta; ``tool_calls`` deltas, no
    content (sgl-project/sglang-jax#1275's named-function case), ``finish_reason`` ``"tool_calls"``."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "今天巴黎天气怎么样"}],
        "tools": WEATHER,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 0,
        "max_tokens": 400,
    }
    want = ChatCompletion.model_validate(post(more_bugs_server, CHAT, body).json()).choices[0].message
    chunks = _chunks(more_bugs_server, CHAT, body)
    content, calls, reasons = _fold_calls(chunks)
    assert not content.strip() and reasons == ["tool_calls"]
    assert len(calls) == 1 and calls[0]["arguments"] == want.tool_calls[0].function.arguments
    args = json.loads(calls[0]["arguments"])
    assert set(args) >= {"city", "days"} and args["city"] in ("Paris", "Tokyo")
    names = [
        tc.function.name
        for c in chunks
        for ch in c.choices
        for tc in ch.delta.tool_calls or []
        if tc.function
    ]
    assert [n for n in names if n] == ["get_weather"]


# --------------------------------------------------------------------------- structured output


def test_omlx_1241_strict_json_schema_is_enforced(more_bugs_server: ServerHandle) -> None:
    """jundot/omlx#1241: ``response_format: {"type": "json_schema", "strict": true}`` was accepted
    and not enforced (a field the schema forbids, a required one missing). Expected: the content
    is JSON valid under the schema (``jsonschema``), unstreamed and streamed alike, with a
    random-weight model that would not write it by chance."""
    schema = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 2,
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "string", "enum": ["1", "2"]}, "dst": {"type": "boolean"}},
                    "required": ["id", "dst"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["items"],
        "additionalProperties": False,
    }
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": 'Translate {"items":[{"id":"1","src":"Hello."}]}'}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "t", "schema": schema, "strict": True},
        },
        "temperature": 0,
        "max_tokens": 200,
    }
    full = ChatCompletion.model_validate(post(more_bugs_server, CHAT, body).json())
    assert full.choices[0].finish_reason == "stop", full.choices[0].message.content
    jsonschema.validate(json.loads(full.choices[0].message.content), schema)
    content, _, _ = _fold_calls(_chunks(more_bugs_server, CHAT, body))
    assert content == full.choices[0].message.content


# --------------------------------------------------------------------------- content before a call, streamed


@pytest.mark.parametrize("per_chunk", [1, 5])
@pytest.mark.parametrize("eos_chunk", [False, True])
@pytest.mark.parametrize(
    "content",
    [
        "I'll read the project files first, then check the weather in both cities for you.",
        "Comparing: a < b and b > c; 天气很好。 Next, the call:",
        "Line one.\n\nLine two ends with a tag-like <b>bold</b> word",
    ],
    ids=["plain", "angle-cjk", "html"],
)
def test_sglang_34214_streamed_content_before_a_call_is_whole(
    tok: Any, per_chunk: int, eos_chunk: bool, content: str
) -> None:
    """sgl-project/sglang#34214: a streamed answer holding both content and tool calls lost the
    end of its content (what was held back as possible call markup was never sent once the call
    began). The model writes text then a DSML call, token by token (``ChunkTM``, one or five
    tokens per chunk, the finish alone in a last chunk or not). Expected: the content the
    ``openai`` client folds from the stream is the non-streamed content, which is the written
    text (trailing whitespace aside), and the call is the same both ways."""
    call = dsml_block(
        dsml_invoke("get_weather", dsml_param("city", True, "Paris"), dsml_param("days", False, "2"))
    )
    client, _ = client_for(ChunkTM(tok, content + "\n\n" + call, per_chunk, eos_chunk=eos_chunk))
    kw: dict[str, Any] = dict(model="m", messages=HI, tools=WEATHER)
    msg = client.chat.completions.create(**kw).choices[0]
    with client.chat.completions.stream(**kw) as stream:
        folded = stream.get_final_completion().choices[0]
    assert (msg.message.content or "").rstrip() == content
    assert folded.message.content == msg.message.content
    want = [("get_weather", json.dumps({"city": "Paris", "days": 2}))]
    for ch in (msg, folded):
        assert [(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []] == want
        assert ch.finish_reason == "tool_calls"

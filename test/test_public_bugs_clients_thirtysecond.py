"""Public reports of third-party clients and proxies (LangChain, Semantic Kernel, LiteLLM, Open
WebUI, LM Studio clients, the Vercel AI SDK, instructor, kimi-cli, TaskWeaver) talking to an
OpenAI-compatible server: the defaults they always send (``logit_bias: {}``,
``response_format: {"type": "text"}``, ``reasoning_effort: null``, ``user: ""``, ``metadata``,
``store``, ``modalities: ["text"]``, ``audio`` / ``prediction`` / ``web_search_options``:
``null``), ``stream_options`` on a non-streamed call, ``top_p: 0``, the usage-only chunk, the
first delta of a streamed tool call, and ``usage.completion_tokens_details``. Each request goes
to an in-process app serving the OpenAI router over a fake tokenizer manager that records the
``GenerateReqInput`` it is given (``fake_prompt_tm.PromptTM``).

Oracles: DeepSeek's own request converter and V4 encoder (``deepseek-recipe``) for the prompt a
request must render; the same request without the client's default field (a cold run: a
documented no-op must leave the prompt and sampling parameters unchanged); the ``openai``
client's own types, error classes and stream accumulator for what comes back; the AI SDK's
documented streaming rule for a tool call's first delta; the DeepSeek-V4 tokenizer for token
counts; OpenAI's documented refusals for ``stream_options`` without ``stream``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

import openai  # noqa: E402
from chat_tools_testutil import fold_chat_stream, sse_chunks  # noqa: E402
from deepseek_recipe_testutil import recipe_prompt  # noqa: E402
from fake_prompt_tm import CALL, MODEL, PromptTM  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from responses_testutil import CHAT_WEATHER, make_client  # noqa: E402

pytestmark = pytest.mark.timeout(120)

USER = [{"role": "user", "content": "Weather in Paris?"}]
REPLY = "Sunny and warm."
ON = {"chat_template_kwargs": {"thinking": True}}


def _run(tok: Any, body: dict[str, Any], reply: str = REPLY) -> tuple[Any, PromptTM, Any]:
    """POST ``{"model": MODEL, "messages": USER, **body}`` to ``/v1/chat/completions``: the
    response, the fake tokenizer manager (its ``received`` requests) and the ``openai`` client."""
    tm = PromptTM(tok, reply=reply)
    client, tc = make_client(tm)
    r = tc.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, **body})
    return r, tm, client


def _served(tok: Any, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The prompt text and sampling parameters the route handed the engine for ``body`` (asserts
    HTTP 200 and a body the ``openai`` client's ``ChatCompletion`` accepts)."""
    r, tm, _ = _run(tok, body)
    assert r.status_code == 200, r.text
    ChatCompletion.model_validate(r.json())
    assert len(tm.received) == 1
    obj = tm.received[0]
    return tok.decode(obj.input_ids), dict(obj.sampling_params or {})


@pytest.mark.parametrize("bias", [{}, None], ids=["empty", "null"])
def test_langchain_28460_empty_logit_bias_is_no_bias(tok: Any, bias: dict[str, Any] | None) -> None:
    """langchain-ai/langchain#28460 (and microsoft/semantic-kernel#2005): ChatOpenAI and
    Semantic Kernel put ``logit_bias: {}`` (or ``null``) on every request, and servers that
    refused any ``logit_bias`` broke them. An empty map biases nothing. Expected: 200, DeepSeek's
    own prompt for the messages, and the same sampling parameters as the request without the
    field, less an empty ``logit_bias`` (no bias reaches the sampler)."""
    prompt, params = _served(tok, {"logit_bias": bias})
    cold_prompt, cold_params = _served(tok, {})
    assert prompt == cold_prompt == recipe_prompt({"messages": USER}, False)
    assert not params.get("logit_bias")  # empty or absent: the sampler applies no bias
    assert {k: v for k, v in params.items() if k != "logit_bias"} == cold_params


def test_lmstudio_307_response_format_text_is_unconstrained(tok: Any) -> None:
    """lmstudio-ai/lmstudio-bug-tracker#307: a client that sends OpenAI's default
    ``response_format: {"type": "text"}`` got 400 "'response_format.type' must be 'json_schema'".
    ``text`` is OpenAI's documented default format. Expected: 200, the same prompt and sampling
    parameters as without the field (no grammar: no ``json_schema`` / ``regex`` / ``ebnf``), and
    the reply as plain ``content`` through the ``openai`` client."""
    prompt, params = _served(tok, {"response_format": {"type": "text"}})
    cold_prompt, cold_params = _served(tok, {})
    assert prompt == cold_prompt and params == cold_params
    assert not any(params.get(k) for k in ("json_schema", "regex", "ebnf", "structural_tag"))
    _, _, client = _run(tok, {})
    out = client.chat.completions.create(model=MODEL, messages=USER, response_format={"type": "text"})  # type: ignore[arg-type]
    assert out.choices[0].message.content == REPLY


CLIENT_DEFAULTS: dict[str, dict[str, Any]] = {
    "user-empty": {"user": ""},
    "metadata": {"metadata": {"chat_id": "c1", "session": "s1"}},
    "store-false": {"store": False},
    "modalities-text": {"modalities": ["text"]},
    "audio-null": {"audio": None},
    "prediction-null": {"prediction": None},
    "web-search-null": {"web_search_options": None},
    "service-tier-null": {"service_tier": None},
    "seed-stop-null": {"seed": None, "stop": None},
    "all": {
        "user": "",
        "metadata": {"a": "b"},
        "store": False,
        "modalities": ["text"],
        "audio": None,
        "prediction": None,
        "parallel_tool_calls": None,
        "tool_choice": None,
        "stream_options": None,
    },
}


@pytest.mark.parametrize("extra", list(CLIENT_DEFAULTS.values()), ids=list(CLIENT_DEFAULTS))
def test_open_webui_2455_client_default_fields_are_no_ops(tok: Any, extra: dict[str, Any]) -> None:
    """open-webui/open-webui#2455: Open WebUI forwarded fields a third-party OpenAI-style server
    did not know (``user``, ``metadata``...), and the server failed the request. These fields are
    in OpenAI's chat schema and change nothing about the text generated (``null`` is absent).
    Expected: 200, DeepSeek's own prompt, and the sampling parameters of the request without
    them."""
    prompt, params = _served(tok, extra)
    cold_prompt, cold_params = _served(tok, {})
    assert prompt == recipe_prompt({"messages": USER}, False) == cold_prompt
    assert params == cold_params


@pytest.mark.parametrize("thinking", [False, True], ids=["chat", "thinking"])
def test_kimi_cli_2465_reasoning_effort_null_is_absent(tok: Any, thinking: bool) -> None:
    """MoonshotAI/kimi-cli#2465: a client put ``"reasoning_effort": null`` on the wire; strict
    servers answered 400 and lenient ones read it as some effort of their own. In OpenAI's schema
    the field is nullable and ``null`` means not set. Expected: 200 and exactly the prompt of the
    request without the field, which is DeepSeek's own prompt at the default effort, thinking on
    and off."""
    mode = {"chat_template_kwargs": {"thinking": thinking}}
    prompt, params = _served(tok, {**mode, "reasoning_effort": None})
    cold_prompt, cold_params = _served(tok, mode)
    assert prompt == cold_prompt == recipe_prompt({"messages": USER}, thinking)
    assert params == cold_params


def test_litellm_29431_stream_options_without_stream_is_a_named_400(tok: Any) -> None:
    """BerriAI/litellm#29431: LiteLLM sent ``stream_options: {"include_usage": true}`` on
    non-streamed calls and vLLM answered 400. OpenAI documents the field as set only with
    ``stream: true`` and refuses it otherwise. Expected: that refusal in OpenAI's error shape,
    which the ``openai`` client raises as ``BadRequestError`` naming ``stream_options``, nothing
    queued; ``stream_options: null`` on the same call is absent (200)."""
    r, tm, client = _run(tok, {"stream_options": {"include_usage": True}})
    assert r.status_code == 400 and tm.received == []
    assert r.json()["error"]["param"] == "stream_options"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=USER, stream_options={"include_usage": True})  # type: ignore[call-overload]
    assert "stream_options" in str(e.value)
    ok, tm2, _ = _run(tok, {"stream_options": None})
    assert ok.status_code == 200 and len(tm2.received) == 1


def test_taskweaver_231_top_p_zero_is_a_named_400(tok: Any) -> None:
    """microsoft/TaskWeaver#231: a client's default ``top_p: 0`` met a server whose range is
    ``(0, 1]`` (SGLang's and vLLM's); the answer must then be a clean refusal naming the field,
    not a 500 or a dropped connection. Expected: 400 in OpenAI's error shape with ``param``
    ``top_p``, raised by the ``openai`` client as ``BadRequestError``, nothing queued; and a
    following ``top_p: 1`` request served normally."""
    r, tm, client = _run(tok, {"top_p": 0})
    assert r.status_code == 400 and tm.received == []
    err = r.json()["error"]
    assert err["param"] == "top_p" and "top_p" in err["message"]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=USER, top_p=0)  # type: ignore[call-overload]
    ok = client.chat.completions.create(model=MODEL, messages=USER, top_p=1)  # type: ignore[call-overload]
    assert ok.choices[0].message.content == REPLY


@pytest.mark.parametrize("so", [None, {"include_usage": False}, {"include_usage": True}])
def test_spoon_core_179_usage_only_chunk_only_when_asked(tok: Any, so: dict[str, Any] | None) -> None:
    """XSpoonAi/spoon-core#179 (and digitalocean/langchain-gradient#27): clients that read
    ``chunk.choices[0]`` crashed with IndexError on a usage-only chunk (``choices: []``). OpenAI
    sends that chunk only when ``stream_options.include_usage`` is true, as the last chunk before
    ``[DONE]``. Expected: without it (absent or ``false``) every chunk has a choice and ``usage``
    null; with it exactly one usage-only chunk, last, whose counts are the DeepSeek tokenizer's
    for the prompt served and the reply; every chunk a valid ``ChatCompletionChunk``."""
    body: dict[str, Any] = {"stream": True} if so is None else {"stream": True, "stream_options": so}
    r, tm, _ = _run(tok, body)
    assert r.status_code == 200, r.text
    assert r.text.rstrip().endswith("data: [DONE]")
    chunks = [ChatCompletionChunk.model_validate(c) for c in sse_chunks(r.text)]
    empty = [i for i, c in enumerate(chunks) if not c.choices]
    if not (so or {}).get("include_usage"):
        assert empty == [] and all(c.usage is None for c in chunks)
        return
    assert empty == [len(chunks) - 1]
    usage = chunks[-1].usage
    assert usage is not None and all(c.usage is None for c in chunks[:-1])
    assert usage.prompt_tokens == len(
        tok.encode(recipe_prompt({"messages": USER}, False), add_special_tokens=False)
    )
    assert usage.completion_tokens == len(tok.encode(REPLY, add_special_tokens=False))
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert tm.received[0].input_ids is not None


def test_netcatty_1007_streamed_tool_call_first_delta_has_id_type_and_name(tok: Any) -> None:
    """binaricat/Netcatty#1007 (and diegosouzapw/OmniRoute#8316): the Vercel AI SDK's
    OpenAI-compatible provider stops a chat with "Expected 'id' to be a string." when the first
    streamed delta of a new tool-call index lacks a string ``id`` (it also requires
    ``function.name`` there, and ``type`` ``function`` when given). Expected, for two parallel
    calls: each index's first delta carries a string ``id``, ``type: "function"`` and the name;
    the ids differ; later deltas of that index carry no other id or name; and the ``openai``
    stream accumulator folds them to the non-streamed answer's calls (arguments equal as JSON)."""
    reply = "Checking." + CALL + CALL.replace("Paris", "Rome")
    body = {"tools": [CHAT_WEATHER], "stream": True}
    r, _, _ = _run(tok, body, reply)
    assert r.status_code == 200, r.text
    first: dict[int, Any] = {}
    for c in sse_chunks(r.text):
        for ch in c.get("choices", []):
            for d in ch["delta"].get("tool_calls") or []:
                if d["index"] not in first:
                    first[d["index"]] = d
                    assert isinstance(d.get("id"), str) and d["id"]
                    assert d.get("type") == "function"
                    assert d["function"]["name"] == "get_weather"
                else:
                    assert d.get("id") in (None, first[d["index"]]["id"])
                    assert (d.get("function") or {}).get("name") in (None, "get_weather")
    assert sorted(first) == [0, 1] and first[0]["id"] != first[1]["id"]
    folded = fold_chat_stream(r.text).choices[0]
    assert folded.finish_reason == "tool_calls"
    plain, _, _ = _run(tok, {"tools": [CHAT_WEATHER]}, reply)
    calls = ChatCompletion.model_validate(plain.json()).choices[0].message.tool_calls or []
    got = [(c.function.name, json.loads(c.function.arguments)) for c in folded.message.tool_calls or []]
    assert got == [(c.function.name, json.loads(c.function.arguments)) for c in calls]
    assert [a["city"] for _, a in got] == ["Paris", "Rome"]


def test_instructor_1104_completion_tokens_details_carries_reasoning(tok: Any) -> None:
    """567-labs/instructor#1104: ``usage.completion_tokens_details`` came back ``null`` from an
    OpenAI-style endpoint, so clients reading ``completion_tokens_details.reasoning_tokens`` got
    nothing. A thinking-mode answer has reasoning tokens. Expected, non-streamed and in the
    streamed usage chunk: the ``openai`` client's ``CompletionUsage`` with
    ``completion_tokens_details.reasoning_tokens`` equal to the DeepSeek tokenizer's count of the
    generated text up to and including ``</think>``, ``completion_tokens`` its count of the whole
    reply, and the reasoning split off ``content``."""
    think, answer = "The user wants the weather.", "Sunny."
    reply = f"{think}</think>{answer}"
    ids = tok.encode(reply, add_special_tokens=False)
    end = tok.convert_tokens_to_ids("</think>")
    assert end in ids
    want_reasoning = ids.index(end) + 1
    r, _, _ = _run(tok, ON, reply)
    assert r.status_code == 200, r.text
    out = ChatCompletion.model_validate(r.json())
    assert out.choices[0].message.content == answer
    assert out.usage is not None and out.usage.completion_tokens == len(ids)
    assert out.usage.completion_tokens_details is not None
    assert out.usage.completion_tokens_details.reasoning_tokens == want_reasoning
    s, _, _ = _run(tok, {**ON, "stream": True, "stream_options": {"include_usage": True}}, reply)
    last = ChatCompletionChunk.model_validate(sse_chunks(s.text)[-1])
    assert last.usage is not None and last.usage.completion_tokens_details is not None
    assert last.usage.completion_tokens_details.reasoning_tokens == want_reasoning
    assert last.usage.completion_tokens == len(ids)

"""A twenty-first set of public bug reports, replayed against the thinking controls of
``POST /v1/chat/completions``: ``reasoning_effort`` and OpenRouter's ``reasoning`` object as
thinking switches, the reasoning split of DeepSeek-V4 output (no leading ``<think>``, text around
a stray ``<think>`` in every chunking, ``</think>`` in the middle of a streamed chunk, the reply
after a tool result, the ``deepseek-v3`` parser), the
reasoning token count, a client echoing the assistant message it got, and the switch reaching a
``--chat-template``.

Fixed here: ``reasoning_effort`` alone (no thinking switch in the request) rendered the chat-mode
prompt; an effort now turns thinking on (``"none"`` still off), as SGLang and vLLM read it
(sgl-project/sglang#28860, vllm-project/vllm#43401) and as DeepSeek's own converter renders it.
The ``reasoning`` object (``{"enabled": true}``, ``{"effort": ...}``, ``exclude``,
``max_tokens``; sgl-project/sglang#23951, ggml-org/llama.cpp#20088) was ignored on the chat route;
it is now read, and a malformed one is refused (400 naming it). The other reports passed as-is;
their tests are regression guards.

The route runs in process over the fake tokenizer manager of ``openai_fake_tm`` (fast tier).
Oracles: DeepSeek's own converter, V4 encoder and response parser (``deepseek-recipe``) for the
same request and reply, the DeepSeek-V4 tokenizer's ids, transformers' ``apply_chat_template``,
and the ``openai`` client's own types.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _client
from server_fixture import tokenizer_source_dir
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")
from deepseek_recipe_testutil import ids_in_written_order  # noqa: E402

openai = pytest.importorskip("openai")

from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from thinking_chat_testutil import CHAT, HI, MODEL, THINK_END, TOOLS, reasoning_of  # noqa: E402

REPLY = "Let me think it over.</think>\n\nThe answer is four."
D = "｜DSML｜"
CALL_TEXT = (
    f'\n\n<{D}tool_calls>\n<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="city" string="true">Paris</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
)


def _official_dir(tmp_path: Path) -> str:
    """A model directory naming the official reasoning-effort profile (DeepSeek-V4-Flash-0731's,
    the tiers DeepSeek's converter renders)."""
    d = tmp_path / "official"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({"dsv4_reasoning_effort_profile": "official"}))
    return str(d)


def _recipe_request(body: dict[str, Any], thinking: bool, effort: str | None) -> Any:
    b = {k: v for k, v in ids_in_written_order(body).items() if k not in ("chat_template_kwargs", "stream")}
    b.update(model="DeepSeek-V4-Pro", thinking={"type": "enabled" if thinking else "disabled"})
    if effort is not None:
        b["reasoning_effort"] = effort
    return recipe.ChatCompletionRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))


def _recipe_prompt(body: dict[str, Any], thinking: bool, effort: str | None = "low") -> str:
    """DeepSeek's own prompt text for ``body`` (its converter, then its V4 encoder); effort
    ``low`` adds no instruction (the preview profile's default)."""
    req = _recipe_request(body, thinking, effort)
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def _recipe_message(body: dict[str, Any], reply: str, thinking: bool) -> dict[str, Any]:
    """DeepSeek's response parser's message for the generated ``reply`` (stopped by EOS)."""
    req = _recipe_request(body, thinking, "low" if thinking else None)
    proc = recipe.StreamProcessor(
        recipe.ChatCompletionRequest.chunk_generator(req, "id", "m"), req.parsing_options
    )
    chunks = proc.push(recipe.InferenceChunk.ready(prompt_usage=recipe.PromptUsage(prompt_tokens=1)))
    chunks += proc.push(recipe.InferenceChunk.text(reply, 1))
    chunks += proc.push(recipe.InferenceChunk.finish(recipe.InferenceFinishReason.Stop))
    chunks += proc.finish()
    resp = recipe.ChatCompletionResponse("id", "m", 0, 1, 0)
    for c in chunks:
        resp.accumulate(c)
    return json.loads(resp.to_json())["choices"][0]["message"]


def _prompt(tok: PreTrainedTokenizerFast, body: dict[str, Any], **args: Any) -> str:
    """The prompt text the chat route hands the engine for ``body`` (HTTP 200 asserted)."""
    tm = FakeTM(tok)
    r = _client(tm, **args).post(CHAT, json={"model": MODEL, "max_tokens": 2, **body})
    assert r.status_code == 200, r.text
    got = tm.received[-1]
    return got.text if got.text is not None else tok.decode(got.input_ids)


def _answer(
    tok: PreTrainedTokenizerFast, body: dict[str, Any], reply: str = REPLY, **args: Any
) -> ChatCompletion:
    """The non-streamed answer to ``body`` for the generated ``reply``, as the client types it."""
    r = _client(FakeTM(tok, reply=reply), **args).post(CHAT, json={"model": MODEL, "max_tokens": 64, **body})
    assert r.status_code == 200, r.text
    return ChatCompletion.model_validate(r.json())


class CoarseTM(FakeTM):
    """A fake tokenizer manager whose stream steps carry ``stride`` tokens each (the last step
    what is left), as a detokenizer with a stream interval or a speculative step sends them."""

    def __init__(self, tokenizer: Any, reply: str, stride: int) -> None:
        super().__init__(tokenizer, reply=reply)
        self.stride = stride

    def _output(self, sub: Any, k: int) -> list[dict[str, Any]]:
        outs = super()._output(sub, k)
        return [o for j, o in enumerate(outs, 1) if j % self.stride == 0 or j == len(outs)]


def _chunks(tm: FakeTM, body: dict[str, Any], **args: Any) -> list[ChatCompletionChunk]:
    """The streamed chunks of ``body`` on ``tm`` as the client types them (``[DONE]`` asserted)."""
    r = _client(tm, **args).post(CHAT, json={"model": MODEL, "max_tokens": 64, **body, "stream": True})
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events and events[-1] == "[DONE]", events[-3:]
    return [ChatCompletionChunk.model_validate(e) for e in events[:-1]]


def _joined(chunks: list[ChatCompletionChunk]) -> tuple[str, str]:
    """``(reasoning, content)`` of choice 0: the concatenation of its deltas."""
    reasoning = content = ""
    for ch in chunks:
        for c in ch.choices:
            content += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
    return reasoning, content


# --------------------------------------------------------------------------- fixed: effort


@pytest.mark.parametrize("effort", ["low", "medium", "high", "max"])
def test_vllm_43401_reasoning_effort_alone_turns_thinking_on(
    tok: PreTrainedTokenizerFast, tmp_path: Path, effort: str
) -> None:
    """vllm-project/vllm#43401 (ported to SGLang as sgl-project/sglang#28860): a request with a
    ``reasoning_effort`` but no thinking switch was rendered in chat mode, so the effort asked
    for reasoning the model never did. An effort other than ``"none"`` turns thinking on where
    the request sets no switch, also over ``--default-chat-template-kwargs {"thinking": false}``;
    the request's own switch still wins. Oracle: DeepSeek's converter and V4 encoder (the
    official profile's tiers) with thinking enabled / disabled, and its response parser."""
    model = _official_dir(tmp_path)
    body = {"messages": HI, "reasoning_effort": effort}
    want_thinking = _recipe_prompt(body, True, effort)
    assert want_thinking.endswith("<think>")
    assert _prompt(tok, body, model_path=model) == want_thinking
    off = {"thinking": False, "enable_thinking": False}
    assert _prompt(tok, body, model_path=model, default_chat_template_kwargs=off) == want_thinking
    own_off = {**body, "chat_template_kwargs": {"thinking": False}}
    assert _prompt(tok, own_off, model_path=model) == _recipe_prompt(body, False, effort)
    msg = _answer(tok, body, model_path=model).choices[0].message
    want = _recipe_message(body, REPLY, True)
    assert (reasoning_of(msg), msg.content) == (want["reasoning_content"], want["content"])


def test_vllm_43401_reasoning_effort_none_keeps_chat_mode(
    tok: PreTrainedTokenizerFast, tmp_path: Path
) -> None:
    """vllm-project/vllm#43401, the other side: ``reasoning_effort: "none"`` maps to thinking
    off, also over a server default of thinking on. Oracle: DeepSeek's converter and encoder in
    chat mode; the reply is all content (no ``</think>`` in it)."""
    model = _official_dir(tmp_path)
    body = {"messages": HI, "reasoning_effort": "none"}
    want = _recipe_prompt({"messages": HI}, False, None)
    assert want.endswith(THINK_END)
    on = {"thinking": True}
    assert _prompt(tok, body, model_path=model, default_chat_template_kwargs=on) == want
    msg = _answer(tok, body, reply="Four.", model_path=model).choices[0].message
    assert (reasoning_of(msg), msg.content) == (None, "Four.")


@pytest.mark.parametrize("effort", ["low", "high", "max"])
def test_vllm_43401_messages_effort_without_thinking_field_thinks(
    tok: PreTrainedTokenizerFast, tmp_path: Path, effort: str
) -> None:
    """vllm-project/vllm#43401 on ``POST /v1/messages``: its ``output_config.effort`` is the chat
    route's ``reasoning_effort``, so a request with an effort and no ``thinking`` block renders
    in thinking mode, and the reply's reasoning comes back as a ``thinking`` block. Oracle:
    DeepSeek's own Messages converter and V4 encoder for the same body; the reply's text."""
    from types import SimpleNamespace

    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from sglang_v4.entrypoints.anthropic import create_anthropic_router
    from sglang_v4.entrypoints.openai import create_openai_router

    tm = FakeTM(tok, reply="Two plus two.</think>\n\nFour.")
    sa = SimpleNamespace(
        served_model_name=MODEL, model_path=_official_dir(tmp_path), api_key=None,
        enable_cache_report=False, context_length=None,
    )  # fmt: skip
    app = FastAPI()
    router = create_openai_router(tm, sa)
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    body = {"model": MODEL, "max_tokens": 30, "messages": HI, "output_config": {"effort": effort}}
    r = TestClient(app).post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    req = recipe.MessagesRequest({**copy.deepcopy(body), "model": "DeepSeek-V4-Pro"}).convert(
        recipe.ConversionOptions(default_thinking_mode=False)
    )
    want = recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt
    assert want.endswith("<think>")
    got = tm.received[-1]
    assert (got.text if got.text is not None else tok.decode(got.input_ids)) == want
    blocks = [(b["type"], b.get("thinking", b.get("text"))) for b in r.json()["content"]]
    assert blocks == [("thinking", "Two plus two."), ("text", "Four.")]


# --------------------------------------------------------------------------- fixed: reasoning object


@pytest.mark.parametrize(
    ("reasoning", "thinking"),
    [
        ({"enabled": True}, True),
        ({"enabled": "true"}, True),
        ({"enable": True}, True),
        ({"enabled": True, "effort": "none"}, False),
        ({"enabled": False}, False),
        ({"effort": "high"}, True),
    ],
)
def test_sglang_23951_reasoning_enabled_object_switches_thinking(
    tok: PreTrainedTokenizerFast, tmp_path: Path, reasoning: dict[str, Any], thinking: bool
) -> None:
    """sgl-project/sglang#23951 (and sgl-project/sglang#9715): ``reasoning: {"enabled": true}``
    (OpenRouter's shape) is the thinking switch, read under both of its names; its ``effort`` is
    ``reasoning_effort`` and decides the switch over ``enabled``. The chat route ignored the
    object: every case rendered chat mode. Oracle: DeepSeek's converter and encoder with the same
    switch and effort; the reply split by DeepSeek's response parser."""
    model = _official_dir(tmp_path)
    body = {"messages": HI, "reasoning": reasoning}
    effort = reasoning.get("effort", "low")
    assert _prompt(tok, body, model_path=model) == _recipe_prompt({"messages": HI}, thinking, effort)
    msg = _answer(tok, body, model_path=model).choices[0].message
    if thinking:
        want = _recipe_message({"messages": HI}, REPLY, True)
        assert (reasoning_of(msg), msg.content) == (want["reasoning_content"], want["content"])
    else:
        assert (reasoning_of(msg), msg.content) == (None, REPLY)


def test_llama_cpp_20088_reasoning_boolean_and_exclude(tok: PreTrainedTokenizerFast) -> None:
    """ggml-org/llama.cpp#20088 (an OpenRouter-compatible ``reasoning`` field on a server):
    ``reasoning: true`` / ``false`` is the switch alone; ``reasoning: {"exclude": true}`` keeps
    the reasoning out of the answer (streamed and not) while the content is the same;
    ``reasoning.max_tokens`` is the reasoning budget handed to the engine (vLLM's
    ``thinking_token_budget``). Oracle: DeepSeek's encoder for the prompts and its parser for the
    content; the engine request's own sampling parameters."""
    assert _prompt(tok, {"messages": HI, "reasoning": True}) == _recipe_prompt({"messages": HI}, True)
    assert _prompt(tok, {"messages": HI, "reasoning": False}) == _recipe_prompt({"messages": HI}, False)
    want = _recipe_message({"messages": HI}, REPLY, True)
    body = {"messages": HI, "reasoning": {"enabled": True, "exclude": True}}
    msg = _answer(tok, body).choices[0].message
    assert (reasoning_of(msg), msg.content) == (None, want["content"])
    reasoning, content = _joined(_chunks(FakeTM(tok, reply=REPLY), body))
    assert (reasoning, content) == ("", want["content"])
    tm = FakeTM(tok, reply=REPLY)
    r = _client(tm).post(
        CHAT, json={"model": MODEL, "messages": HI, "reasoning": {"enabled": True, "max_tokens": 7}}
    )
    assert r.status_code == 200, r.text
    assert tm.received[-1].sampling_params["thinking_token_budget"] == 7


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"reasoning": "high"}, "reasoning"),
        ({"reasoning": {"effort": "high", "budget": 3}}, "reasoning"),
        ({"reasoning": {"enabled": "maybe"}}, "reasoning.enabled"),
        ({"reasoning": {"effort": "high"}, "reasoning_effort": "low"}, "reasoning.effort"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning_effort"),
        ({"reasoning": {"exclude": "yes"}}, "reasoning.exclude"),
        ({"reasoning": {"max_tokens": -1}}, "reasoning.max_tokens"),
        ({"reasoning": {"max_tokens": 5}, "thinking_token_budget": 9}, "reasoning.max_tokens"),
    ],
)
def test_sglang_23951_malformed_reasoning_object_is_refused(
    tok: PreTrainedTokenizerFast, extra: dict[str, Any], param: str
) -> None:
    """sgl-project/sglang#23951, bad input: a ``reasoning`` the route cannot read (another shape,
    an unknown key, a switch of no boolean spelling, two different efforts or budgets) is a 400
    in OpenAI's error shape naming the field, and nothing reaches the engine (the ``openai``
    client raises ``BadRequestError``)."""
    tm = FakeTM(tok)
    r = _client(tm).post(CHAT, json={"model": MODEL, "messages": HI, **extra})
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["param"] == param, err
    assert tm.received == []


# --------------------------------------------------------------------------- the reasoning split


def test_vllm_12999_reasoning_split_without_a_leading_think_tag(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#12999 (and vllm-project/vllm#13125): the model's output had ``</think>``
    but no ``<think>`` (the prompt opens the block), and the parser found no reasoning. In V4
    thinking mode the prompt ends with ``<think>``; the reply's text up to ``</think>`` is the
    reasoning, streamed and not. Oracle: DeepSeek's encoder (the prompt's end) and response
    parser."""
    body = {"messages": HI, "chat_template_kwargs": {"thinking": True}}
    assert _prompt(tok, body) == _recipe_prompt(body, True)
    assert not REPLY.startswith("<think>")
    want = _recipe_message(body, REPLY, True)
    assert want["reasoning_content"] and want["content"]
    msg = _answer(tok, body).choices[0].message
    assert (reasoning_of(msg), msg.content) == (want["reasoning_content"], want["content"])
    assert _joined(_chunks(FakeTM(tok, reply=REPLY), body)) == (want["reasoning_content"], want["content"])


@pytest.mark.parametrize("stride", [3, 100])
def test_litellm_27492_think_end_inside_a_chunk_loses_no_answer_text(
    tok: PreTrainedTokenizerFast, stride: int
) -> None:
    """BerriAI/litellm#27492: when ``</think>`` and the first answer tokens arrive in the same
    engine step, vLLM sent one delta carrying both ``reasoning`` and ``content`` and clients that
    read one field per delta lost the start of the answer. Here such a step gives a reasoning
    delta and a content delta of their own (no chunk carries both), and the joined deltas are the
    non-streamed split. Oracle: DeepSeek's response parser; the ``openai`` client's chunk types."""
    body = {"messages": HI, "chat_template_kwargs": {"thinking": True}}
    ids = tok.encode(REPLY, add_special_tokens=False)
    end = ids.index(tok.convert_tokens_to_ids(THINK_END))
    assert end % stride != stride - 1 or stride > len(ids)  # the marker is inside a step
    chunks = _chunks(CoarseTM(tok, REPLY, stride), body)
    for ch in chunks:
        for c in ch.choices:
            assert not (c.delta.content and (c.delta.model_extra or {}).get("reasoning_content")), ch
    want = _recipe_message(body, REPLY, True)
    assert _joined(chunks) == (want["reasoning_content"], want["content"])


@pytest.mark.parametrize(
    ("reply", "want"),
    [
        ("<think>Hmm.</think>Four.", ("Hmm.", "Four.")),
        (" <think>Hmm.</think>Four.", ("Hmm.", "Four.")),
        ("\n<think>Hmm.</think>Four.", ("Hmm.", "Four.")),
        ("Sure.<think>Hmm.</think>Four.", ("Sure.<think>Hmm.", "Four.")),
    ],
)
def test_sglang_35083_text_around_an_opening_think_is_split_the_same_in_every_chunking(
    tok: PreTrainedTokenizerFast, reply: str, want: tuple[str, str]
) -> None:
    """sgl-project/sglang#35083: text in front of an opening ``<think>`` (a space, a newline,
    words) was routed four different ways depending on how the stream was chunked, and the
    non-streamed answer kept the literal marker. Here a redundant opening marker the model writes
    first (after whitespace) is dropped, one written after text is the reasoning's own text (the
    prompt already opened the block), and every chunking of the stream joins to the non-streamed
    split. Oracle: the non-streamed answer (a cold run of the same reply) and the reply's text."""
    body = {"messages": HI, "chat_template_kwargs": {"thinking": True}}
    msg = _answer(tok, body, reply=reply).choices[0].message
    assert (reasoning_of(msg), msg.content) == want
    for stride in (1, 2, 3, 100):
        assert _joined(_chunks(CoarseTM(tok, reply, stride), body)) == want, stride


def test_sglang_17551_reply_after_a_tool_result_is_content(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#17551 (DeepSeek-V3.2): after a tool call and its result in thinking
    mode, all of the next output came back as ``reasoning_content``. The prompt after the result
    opens a new reasoning block (the loop's earlier reasoning kept), and the reply's text after
    ``</think>`` is the content. Oracle: DeepSeek's converter and encoder for the prompt, its
    response parser for the split."""
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    msgs = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "reasoning_content": "I need the tool.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    body = {"messages": msgs, "tools": TOOLS, "chat_template_kwargs": {"thinking": True}}
    want_prompt = _recipe_prompt(body, True)
    assert "I need the tool." in want_prompt and want_prompt.endswith("<think>")
    assert _prompt(tok, body) == want_prompt
    reply = "The tool says sunny.</think>\n\nIt is sunny in Paris."
    want = _recipe_message(body, reply, True)
    msg = _answer(tok, body, reply=reply).choices[0].message
    assert (reasoning_of(msg), msg.content, msg.tool_calls) == (
        want["reasoning_content"],
        want["content"],
        None,
    )


def test_vllm_25589_deepseek_v3_parser_follows_the_thinking_switch(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#25589 (and vllm-project/vllm#23437): the DeepSeek-V3.1 parser must split
    only in thinking mode; with ``--reasoning-parser deepseek-v3`` and thinking off the whole
    reply is content, with thinking on the text before ``</think>`` is reasoning. The report's
    own request (an assistant turn written ``<think>Hmm</think>`` in history) renders as
    DeepSeek's encoder renders it. Oracle: DeepSeek's encoder and response parser."""
    off = {"messages": HI, "chat_template_kwargs": {"thinking": False}}
    msg = _answer(tok, off, reply="No reasoning here.", reasoning_parser="deepseek-v3").choices[0].message
    assert (reasoning_of(msg), msg.content) == (None, "No reasoning here.")
    on = {"messages": HI, "chat_template_kwargs": {"thinking": True}}
    want = _recipe_message(on, REPLY, True)
    msg = _answer(tok, on, reasoning_parser="deepseek-v3").choices[0].message
    assert (reasoning_of(msg), msg.content) == (want["reasoning_content"], want["content"])
    history = {
        "messages": [
            {"role": "assistant", "content": "<think>Hmm</think>"},
            {"role": "user", "content": "9.11 and 9.8, which is greater?"},
        ],
        "chat_template_kwargs": {"thinking": True},
    }
    assert _prompt(tok, history, reasoning_parser="deepseek-v3") == _recipe_prompt(history, True)


# --------------------------------------------------------------------------- reasoning tokens


def test_vllm_44398_reasoning_tokens_counted_when_the_prompt_opens_think(
    tok: PreTrainedTokenizerFast,
) -> None:
    """vllm-project/vllm#44398: ``reasoning_tokens`` was 0 for models whose prompt opens
    ``<think>`` (the output has no start marker to count from). Here the count is the generated
    tokens up to and including ``</think>`` (SGLang's rule), per choice and summed over ``n = 2``,
    streamed in coarse steps and not. Oracle: the tokenizer's ids of the reply."""
    ids = tok.encode(REPLY, add_special_tokens=False)
    per_choice = ids.index(tok.convert_tokens_to_ids(THINK_END)) + 1
    body = {"messages": HI, "n": 2, "chat_template_kwargs": {"thinking": True}}
    usage = _answer(tok, body).usage
    assert usage.completion_tokens_details.reasoning_tokens == 2 * per_choice
    streamed = _chunks(CoarseTM(tok, REPLY, 4), {**body, "stream_options": {"include_usage": True}})
    assert streamed[-1].usage.completion_tokens_details.reasoning_tokens == 2 * per_choice


def test_vllm_ascend_13070_reasoning_tokens_with_a_tool_call(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm-ascend#13070: with thinking on and a tool called, the answer had its
    reasoning but ``reasoning_tokens`` stayed 0. Here the reasoning before a DSML call block is
    counted (up to and including ``</think>``), and the call is parsed, streamed and not. Oracle:
    the tokenizer's ids; DeepSeek's response parser for the reasoning and the call."""
    reply = "I should call the tool." + THINK_END + CALL_TEXT
    body = {"messages": HI, "tools": TOOLS, "chat_template_kwargs": {"thinking": True}}
    ids = tok.encode(reply, add_special_tokens=False)
    want_rt = ids.index(tok.convert_tokens_to_ids(THINK_END)) + 1
    want = _recipe_message(body, reply, True)
    resp = _answer(tok, body, reply=reply)
    msg = resp.choices[0].message
    assert reasoning_of(msg) == want["reasoning_content"]
    got_calls = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]
    want_calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in want["tool_calls"]]
    assert got_calls == want_calls == [("get_weather", {"city": "Paris"})]
    assert resp.usage.completion_tokens_details.reasoning_tokens == want_rt
    streamed = _chunks(FakeTM(tok, reply=reply), {**body, "stream_options": {"include_usage": True}})
    assert streamed[-1].usage.completion_tokens_details.reasoning_tokens == want_rt


# --------------------------------------------------------------------------- multi-turn history


def test_vllm_42664_echoed_assistant_message_keeps_its_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#42664: clients send back the assistant message they got, under
    ``reasoning_content`` or vLLM's ``reasoning``; the server must read either so a tool loop's
    reasoning stays in the prompt. The message this route answered (both names, as the
    ``openai`` client dumps it) sent back with the tool's result renders as DeepSeek's encoder
    renders the same turn written with ``reasoning_content``."""
    reply = "I should call the tool." + THINK_END + CALL_TEXT
    first = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
    first["chat_template_kwargs"] = {"thinking": True}
    msg = _answer(tok, first, reply=reply).choices[0].message
    echoed = msg.model_dump(exclude_none=True)
    assert echoed["reasoning_content"] == echoed["reasoning"] == "I should call the tool."
    call_id = msg.tool_calls[0].id
    tool_turn = {"role": "tool", "tool_call_id": call_id, "content": "sunny"}
    body = {**first, "messages": [*first["messages"], echoed, tool_turn]}
    plain = {k: v for k, v in echoed.items() if k != "reasoning"}
    want = _recipe_prompt({**first, "messages": [*first["messages"], plain, tool_turn]}, True)
    assert "I should call the tool." in want
    assert _prompt(tok, body) == want
    only_vllm = {k: v for k, v in echoed.items() if k != "reasoning_content"}
    assert _prompt(tok, {**first, "messages": [*first["messages"], only_vllm, tool_turn]}) == want


# --------------------------------------------------------------------------- --chat-template


def test_sglang_19729_thinking_switch_reaches_a_chat_template(fast: Any, tmp_path: Path) -> None:
    """sgl-project/sglang#19729 (and sgl-project/sglang#15294): with ``--chat-template`` the
    thinking switch of the request did not change the prompt. The switch reaches a Jinja
    template under both of its names, whether the request sets it in ``chat_template_kwargs``,
    with DeepSeek's ``thinking`` field or through its ``reasoning_effort`` (that last case failed
    here before an effort turned thinking on). Oracle: transformers' ``apply_chat_template`` of
    the same template with the switch given."""
    from transformers import AutoTokenizer

    d = tmp_path / "m"
    d.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(tokenizer_source_dir()) / name, d / name)
    template = (
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<A>{% if thinking %}<think>{% else %}</think>{% endif %}"
        "{% if enable_thinking %}[on]{% endif %}{% endif %}"
    )
    ref = AutoTokenizer.from_pretrained(str(d))
    cases = [
        ({"chat_template_kwargs": {"thinking": True}}, True),
        ({"chat_template_kwargs": {"enable_thinking": True}}, True),
        ({"thinking": {"type": "enabled"}}, True),
        ({"reasoning_effort": "high"}, True),
        ({"chat_template_kwargs": {"thinking": False}}, False),
        ({}, False),
    ]
    tm = FakeTM(fast, "x")
    c = _client(tm, chat_template=template, tokenizer_path=str(d), model_path=str(d))
    for extra, flag in cases:
        r = c.post(CHAT, json={"messages": HI, "max_tokens": 2, **extra})
        assert r.status_code == 200, r.text
        kw = {"thinking": flag, "enable_thinking": flag}
        want = ref.apply_chat_template(
            HI, chat_template=template, tokenize=False, add_generation_prompt=True, **kw
        )
        assert want.endswith("<think>[on]" if flag else "</think>")
        assert list(tm.received[-1].input_ids) == ref.encode(want, add_special_tokens=False), extra

"""A twenty-fourth set of public bug reports, replayed against the thinking side of the chat,
Responses and Messages routes: newlines around the reasoning, ``</think>`` split across stream
chunks, interleaved ``n > 1`` streams, stop strings met inside the reasoning, ``reasoning_effort``
``none`` / ``minimal``, reasoning tokens in ``usage`` (chat and Responses), a literal ``<think>``
in an answer, and the reasoning of tool rounds replayed in a later request.

Fixed here: a reasoning that starts with newlines (or ends with them before ``</think>``) kept
them in ``reasoning_content`` (jundot/omlx#3667: clients show an empty first line), where
DeepSeek's response parser drops them; the reasoning parser (streamed or not, chat, Responses and
Messages alike) now trims them, holding a trailing run of newlines back until the next character
decides; output that continues a reasoning the prompt began (prefix completion) keeps its leading
newlines, as DeepSeek's parser does. The other reports passed as-is; their tests are regression guards.

The routes run in process over the fake tokenizer manager of ``openai_fake_tm`` (fast tier).
Oracles: DeepSeek's own converter, V4 encoder and response parsers (``deepseek-recipe``), the
DeepSeek-V4 tokenizer's ids, Python's ``str.find``, and the ``openai`` / ``anthropic`` clients'
own types.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _client
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

from deepseek_recipe_testutil import (  # noqa: E402
    recipe_message,
    recipe_messages_response,
    recipe_prompt,
)
from openai.types.chat import ChatCompletionChunk  # noqa: E402
from thinking_chat_testutil import (  # noqa: E402
    CALL,
    HI,
    MODEL,
    THINK_END,
    TOOLS,
    chat_answer,
    messages_client,
    post_chat,
    prompt_of,
    reasoning_of,
)

ON = {"chat_template_kwargs": {"thinking": True}}
OFF = {"chat_template_kwargs": {"thinking": False}}


class ChoicesTM(FakeTM):
    """A fake tokenizer manager whose ``n`` choices generate different replies (choice ``k``
    writes ``replies[k]``), streamed interleaved token by token as the engine sends them."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        super().__init__(tokenizer, replies[0])
        self.replies = replies

    def _output(self, sub: Any, k: int) -> list[dict[str, Any]]:
        self.reply = self.replies[k]
        return super()._output(sub, 0)


def _stream_chunks(tm: FakeTM, body: dict[str, Any]) -> list[ChatCompletionChunk]:
    """The streamed answer's chunks (usage asked for), each typed by the client; ``[DONE]``
    asserted."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    events = sse_data_events(post_chat(tm, body))
    assert events and events[-1] == "[DONE]", events[-3:]
    return [ChatCompletionChunk.model_validate(e) for e in events[:-1]]


def _streamed(tm: FakeTM, body: dict[str, Any]) -> dict[int, tuple[str, str, str | None]]:
    """``{index: (reasoning, content, finish_reason)}`` of the streamed answer, deltas joined."""
    out: dict[int, list[Any]] = {}
    for ch in _stream_chunks(tm, body):
        for c in ch.choices:
            acc = out.setdefault(c.index, ["", "", None])
            acc[0] += (c.delta.model_extra or {}).get("reasoning_content") or ""
            acc[1] += c.delta.content or ""
            acc[2] = c.finish_reason or acc[2]
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def _cut(tok: PreTrainedTokenizerFast, text: str, n: int) -> str:
    """The text of the first ``n`` tokens of ``text`` (what a ``max_tokens = n`` cut leaves)."""
    return tok.decode(tok.encode(text, add_special_tokens=False)[:n])


def _reasoning_token_count(tok: PreTrainedTokenizerFast, text: str) -> int:
    """Tokens of ``text`` up to and including its first ``</think>`` (all of them without one:
    a reasoning cut by the limit)."""
    ids = tok.encode(text, add_special_tokens=False)
    end = tok.convert_tokens_to_ids(THINK_END)
    return ids.index(end) + 1 if end in ids else len(ids)


def _feed_in_pieces(text: str, cuts: tuple[int, ...], stream_reasoning: bool = True) -> tuple[str, str]:
    """``(reasoning, content)`` of the streaming reasoning parser fed ``text`` cut at ``cuts``."""
    from sglang_v4.entrypoints.openai.reasoning_parser import ReasoningParser

    p = ReasoningParser(stream_reasoning=stream_reasoning)
    reasoning = content = ""
    bounds = (0, *cuts, len(text))
    for a, b in zip(bounds, bounds[1:]):
        r, c = p.feed(text[a:b])
        reasoning, content = reasoning + r, content + c
    r, c = p.flush()
    return reasoning + r, content + c


# --------------------------------------------------------------------------- fixed: newlines


NEWLINE_REPLIES = [
    "\n\nThe user says hi.\n\n</think>\n\nHello!",
    "\nLet me think.\nOK.\n</think>Hello!",
    "\n R \n</think> A",
    "Plan:\n\n1. greet\n\n\n</think>Hello!\n\n",
    "\n\n</think>Hello!",
]


@pytest.mark.parametrize("reply", NEWLINE_REPLIES)
def test_omlx_3667_reasoning_newlines_trimmed_as_deepseek_reads_them(
    tok: PreTrainedTokenizerFast, reply: str
) -> None:
    """jundot/omlx#3667 (``reasoning_content`` starts with the model's leading newline, so clients
    show an empty first line): DeepSeek's response parser drops the newlines at the start of the
    reasoning and right before ``</think>`` (spaces and tabs stay, as do the reasoning's inner
    newlines); ``reasoning_content`` kept them. Streamed and not, the split must be DeepSeek's.
    Oracle: DeepSeek's response parser for the same reply."""
    want = recipe_message({"messages": HI}, reply, True)
    msg = chat_answer(FakeTM(tok, reply=reply), {**ON, "messages": HI}).choices[0].message
    assert (reasoning_of(msg) or "", msg.content) == (want.get("reasoning_content") or "", want["content"])
    reasoning, content, finish = _streamed(FakeTM(tok, reply=reply), {**ON, "messages": HI})[0]
    assert (reasoning, content, finish) == (want.get("reasoning_content") or "", want["content"], "stop")


@pytest.mark.parametrize("reply", ["\n\nStill thinking\n\nabout it\n\n", "\nA\n\nB"])
def test_omlx_3667_reasoning_cut_by_the_limit_keeps_its_trailing_newlines(
    tok: PreTrainedTokenizerFast, reply: str
) -> None:
    """jundot/omlx#3667, the cut side: a reasoning cut by ``max_tokens`` loses its leading
    newlines but keeps its trailing ones (nothing says they were the last), streamed or not.
    Oracle: DeepSeek's response parser on the cut text with a ``length`` finish."""
    n = len(tok.encode(reply, add_special_tokens=False))
    body = {**ON, "messages": HI, "max_tokens": n}
    want = recipe_message(body, reply, True, "length")
    assert want["reasoning_content"].endswith("\n") == reply.endswith("\n")
    choice = chat_answer(FakeTM(tok, reply=reply + " and more"), body).choices[0]
    assert (reasoning_of(choice.message), choice.message.content or "", choice.finish_reason) == (
        want["reasoning_content"],
        want["content"],
        "length",
    )
    got = _streamed(FakeTM(tok, reply=reply + " and more"), body)[0]
    assert got == (want["reasoning_content"], want["content"], "length")


@pytest.mark.parametrize("switch", ["prefix", "continue_final_message"])
def test_omlx_3667_continued_reasoning_keeps_its_leading_newline(
    tok: PreTrainedTokenizerFast, switch: str
) -> None:
    """jundot/omlx#3667, the prefix side: output that continues a reasoning the prompt already
    began (DeepSeek's prefix completion of a turn holding only ``reasoning_content``, or
    ``continue_final_message``) does not start a block, so a newline it starts with is the
    reasoning's own text and stays; the newlines before ``</think>`` still go. Streamed and not.
    Oracle: DeepSeek's converter and V4 encoder for the prompt, its response parser for the
    same ``prefix: true`` request."""
    reply = "\n6*7 = 42\n</think>\n\nIt is 42."
    last = {"role": "assistant", "content": "", "reasoning_content": "Let me see:"}
    oracle = {"messages": [*HI, {**last, "prefix": True}]}
    body: dict[str, Any] = {**ON}
    if switch == "prefix":
        body["messages"] = oracle["messages"]
    else:
        body.update(messages=[*HI, last], continue_final_message=True, add_generation_prompt=False)
    want = recipe_message(oracle, reply, True)
    assert want["reasoning_content"].startswith("\n")
    tm = FakeTM(tok, reply=reply)
    msg = chat_answer(tm, body).choices[0].message
    assert prompt_of(tok, tm) == recipe_prompt(oracle, True)
    assert (reasoning_of(msg), msg.content) == (want["reasoning_content"], want["content"])
    got = _streamed(FakeTM(tok, reply=reply), body)[0]
    assert got == (want["reasoning_content"], want["content"], "stop")


@pytest.mark.parametrize("stream_reasoning", [True, False])
def test_omlx_3667_newline_trim_holds_in_every_chunking(stream_reasoning: bool) -> None:
    """jundot/omlx#3667 for the streaming parser: the newlines come in pieces of their own, so
    the trim must not depend on where a chunk ends (a run of newlines held back, then dropped at
    ``</think>`` or given back when more reasoning follows), with reasoning streamed or held
    (``stream_reasoning: false``). Oracle: DeepSeek's response parser on the whole text, for
    every split of the text into three pieces."""
    for text in ("\n\nR\n\nS\n\n</think>\n\nA", "\n R\n</think>A\n", "\n\n</think>A"):
        want = recipe_message({"messages": HI}, text, True)
        pair = (want.get("reasoning_content") or "", want["content"])
        for i in range(len(text) + 1):
            for j in range(i, len(text) + 1):
                assert _feed_in_pieces(text, (i, j), stream_reasoning) == pair, (text, i, j)


def test_omlx_3667_messages_thinking_block_trimmed_too(tok: PreTrainedTokenizerFast) -> None:
    """jundot/omlx#3667 on ``/v1/messages``: the ``thinking`` block of a reasoning written between
    newlines is DeepSeek's (trimmed), streamed or not. Oracles: DeepSeek's Messages response
    generator for the blocks; the ``anthropic`` client's ``Message`` type."""
    reply = "\n\nThe user greets.\n\n</think>\n\nHello!"
    body = {"messages": HI, "max_tokens": 64, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    _, client = messages_client(tok, reply)
    r = client.post("/v1/messages", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    got = anthropic.types.Message.model_validate(r.json())
    want = recipe_messages_response(body, reply, True)
    blocks = [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in got.content]
    assert blocks == [(b["type"], b.get("thinking") or b.get("text")) for b in want["content"]]
    s = client.post("/v1/messages", json={"model": MODEL, **body, "stream": True})
    thinking = "".join(
        e["delta"].get("thinking", "")
        for e in sse_data_events(s)
        if isinstance(e, dict) and e.get("type") == "content_block_delta"
    )
    assert thinking == want["content"][0]["thinking"]


# --------------------------------------------------------------------------- streams and chunks


def test_smg_1751_think_end_split_across_chunks_in_every_position() -> None:
    """smg-project/smg#1751 (also smg-project/smg#1678, InternLM/lmdeploy#4754,
    newo-ether/Agora#61): a ``</think>`` that reaches the streaming parser in pieces (``"</th"``
    then ``"ink>"``, after reasoning text in the same chunk) leaked into the reasoning and left
    the answer classified as reasoning; one that arrives with the answer's first word in the same
    chunk must split at the tag. Oracle: DeepSeek's response parser on the whole text, for every
    split of it into three pieces, reasoning streamed or held."""
    for text in ("weighing it</think>Answer.", "a<b</think>c", "x</thin</think>y", "déjà vu</think>Ça va"):
        want = recipe_message({"messages": HI}, text, True)
        pair = (want["reasoning_content"], want["content"])
        for stream_reasoning in (True, False):
            for i in range(len(text) + 1):
                for j in range(i, len(text) + 1):
                    assert _feed_in_pieces(text, (i, j), stream_reasoning) == pair, (text, i, j)


@pytest.mark.parametrize("max_tokens", [64, 8])
def test_dynamo_11997_interleaved_choices_keep_their_own_reasoning_split(
    tok: PreTrainedTokenizerFast, max_tokens: int
) -> None:
    """ai-dynamo/dynamo#11997 (fixed by ai-dynamo/dynamo#11563): with ``n > 1`` the choices stream
    interleaved, and one reasoning parser shared by them let one choice's ``</think>`` turn the
    other's later reasoning into ``content``. Each choice must split as its own reply does, the
    streamed deltas must add up to the non-streamed message, and ``reasoning_tokens`` sums the
    choices' reasoning (a choice cut by the limit: all its tokens). Oracles: DeepSeek's response
    parser per reply (``length`` finish for a cut one), the DeepSeek-V4 tokenizer's counts."""
    replies = [
        "Short.</think>Yes.",
        "Much longer reasoning that goes on and on.</think>No, the other one.",
        "\nMid-length reasoning here.</think>Maybe.",
    ]
    body = {**ON, "messages": HI, "n": 3, "max_tokens": max_tokens}
    wants = []
    for reply in replies:
        cut = _cut(tok, reply, max_tokens)
        finish = "stop" if cut == reply else "length"
        m = recipe_message({"messages": HI}, cut, True, finish)
        wants.append((m.get("reasoning_content") or "", m["content"], finish))
    got = chat_answer(ChoicesTM(tok, replies), body)
    assert [
        (reasoning_of(c.message) or "", c.message.content or "", c.finish_reason) for c in got.choices
    ] == wants
    assert _streamed(ChoicesTM(tok, replies), body) == dict(enumerate(wants))
    count = sum(_reasoning_token_count(tok, _cut(tok, r, max_tokens)) for r in replies)
    assert got.usage is not None and got.usage.completion_tokens_details is not None
    assert got.usage.completion_tokens_details.reasoning_tokens == count
    last = _stream_chunks(ChoicesTM(tok, replies), body)[-1].usage
    assert last is not None and last.completion_tokens_details is not None
    assert last.completion_tokens_details.reasoning_tokens == count


@pytest.mark.parametrize(
    ("stops", "reasoning", "answer"),
    [
        (["Question:"], "Restating the Question: what is 2+2?", "The answer is 4. Question: next"),
        (["四"], "用户询问元曲四大家有谁", "元曲四大家是关汉卿"),
        (["4"], "2+2 is 4, clearly", "It is 4."),
    ],
)
def test_vllm_52393_stop_strings_stay_dormant_inside_the_reasoning(
    tok: PreTrainedTokenizerFast, stops: list[str], reasoning: str, answer: str
) -> None:
    """vllm-project/vllm#52393 (DeepSeek-V4: a stop string met while thinking cut the reasoning,
    ``content`` came back ``None``; also vllm-project/vllm#38499, a stop ``"四"`` met in Kimi's
    reasoning, and vllm-project/vllm#52486): stop strings must match only after ``</think>``.
    The chat route marks a thinking-mode request's stop strings as starting after the
    ``</think>`` token (not a chat-mode one), and the stop checker, fed the output token by token
    as the scheduler does (the text start set at that token), stops at the first stop string in
    the answer. Oracles: Python's ``str.find`` on the answer text, the tokenizer's ids."""
    from sglang_v4.sampling.sampling_params import SamplingParams
    from sglang_v4.sampling.stop_checker import check_stop

    think_end = tok.convert_tokens_to_ids(THINK_END)
    tm = FakeTM(tok, reply="x")
    chat_answer(tm, {**ON, "messages": HI, "stop": stops})
    sp_on = tm.received[-1].sampling_params
    assert sp_on["stop_str_after_token_id"] == think_end
    chat_answer(tm, {**OFF, "messages": HI, "stop": stops})
    assert "stop_str_after_token_id" not in tm.received[-1].sampling_params

    sp = SamplingParams(stop=stops, stop_str_after_token_id=think_end)
    ids = tok.encode(reasoning + THINK_END + answer, add_special_tokens=False)
    assert any(s in reasoning for s in stops)
    start, matched_at = -1, None
    for n in range(1, len(ids) + 1):
        if start < 0 and ids[n - 1] == think_end:
            start = n
        reason = check_stop(ids[:n], sp, None, tok, False, start)
        if reason is not None:
            matched_at = (n, reason["matched"])
            break
    assert matched_at is not None
    n, matched = matched_at
    first = min((answer.find(s), s) for s in stops if answer.find(s) >= 0)
    assert matched == first[1]
    text = tok.decode(ids[start:n])  # the answer text generated when the stop fired
    assert text.find(matched) == first[0] and matched not in tok.decode(ids[start : n - 1])


# --------------------------------------------------------------------------- effort and usage


@pytest.mark.parametrize("effort", ["none", "minimal", "low", "xhigh"])
def test_smg_1876_reasoning_effort_none_is_chat_mode_and_others_think(
    tok: PreTrainedTokenizerFast, effort: str
) -> None:
    """smg-project/smg#1876 (``reasoning_effort`` ``"none"`` / ``"minimal"`` ignored by templates
    that gate thinking on a switch; also docker/model-runner#1028, mudler/LocalAI#10072: OpenAI's
    ``reasoning_effort: "none"`` must disable thinking): alone on a request, the effort decides
    the mode -- the prompt is the one DeepSeek's converter renders for it (``none``: chat mode;
    ``minimal`` and up: thinking) and the reply splits accordingly, streamed or not. An explicit
    ``chat_template_kwargs`` switch still wins over ``none``. Oracles: DeepSeek's converter and V4
    encoder (the request with ``reasoning_effort`` and no ``thinking`` field), its parser."""
    reply = "Weighing it.</think>Hello!"
    body = {"messages": HI, "reasoning_effort": effort}
    conv = recipe.ChatCompletionRequest({**body, "model": "DeepSeek-V4-Pro"}).convert(
        recipe.ConversionOptions(default_thinking_mode=False)
    )
    thinking = conv.conversation.thinking_mode
    assert thinking == (effort != "none")
    tm = FakeTM(tok, reply=reply)
    msg = chat_answer(tm, body).choices[0].message
    assert prompt_of(tok, tm) == recipe.DeepseekV4Encoding().render_conversation(conv.conversation).prompt
    if thinking:
        want = recipe_message({"messages": HI}, reply, True)
        assert (reasoning_of(msg), msg.content) == (want["reasoning_content"], want["content"])
        assert _streamed(FakeTM(tok, reply=reply), body)[0][:2] == (
            want["reasoning_content"],
            want["content"],
        )
    else:
        assert reasoning_of(msg) is None and msg.content is not None and "Hello!" in msg.content
    tm = FakeTM(tok, reply=reply)
    chat_answer(tm, {**body, **ON, "reasoning_effort": "none"})
    assert prompt_of(tok, tm) == recipe_prompt({"messages": HI}, True)


@pytest.mark.parametrize("thinking", [True, False])
def test_codexplusplus_1908_responses_usage_always_carries_reasoning_tokens(
    tok: PreTrainedTokenizerFast, thinking: bool
) -> None:
    """BigPizzaV3/CodexPlusPlus#1908 (a Responses client failed with ``missing field
    'reasoning_tokens'`` when the upstream left ``output_tokens_details`` out of a reply without
    reasoning; also QwenLM/qwen-code#7239): ``usage.output_tokens_details.reasoning_tokens`` is
    there in every Responses reply -- 0 without thinking, the reasoning's tokens with it -- in the
    body and in the streamed ``response.completed``. Oracles: the ``openai`` client's ``Response``
    type (``output_tokens_details`` and ``reasoning_tokens`` required), the tokenizer's counts."""
    from openai.types.responses import Response

    reply = "Weighing it.</think>Hello!" if thinking else "Hello!"
    extra = {"reasoning": {"effort": "high"}} if thinking else {}
    want = _reasoning_token_count(tok, reply) if thinking else 0
    client = _client(FakeTM(tok, reply=reply))
    r = client.post("/v1/responses", json={"model": MODEL, "input": "Hi", **extra})
    assert r.status_code == 200, r.text
    usage = Response.model_validate(r.json()).usage
    assert usage is not None and usage.output_tokens_details.reasoning_tokens == want
    assert usage.output_tokens == len(tok.encode(reply, add_special_tokens=False))
    s = client.post("/v1/responses", json={"model": MODEL, "input": "Hi", "stream": True, **extra})
    done = [e for e in sse_data_events(s) if isinstance(e, dict) and e.get("type") == "response.completed"]
    assert len(done) == 1
    usage = Response.model_validate(done[0]["response"]).usage
    assert usage is not None and usage.output_tokens_details.reasoning_tokens == want


def test_litellm_10691_completion_tokens_include_the_reasoning_tokens(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#10691 (reasoning tokens counted apart from the completion: completion
    tokens should be a superset of reasoning tokens): ``completion_tokens`` counts every generated
    token, reasoning included, ``reasoning_tokens`` the reasoning's share, and ``total_tokens`` is
    prompt + completion, streamed or not. Oracles: the ``openai`` client's ``CompletionUsage``
    type, the DeepSeek-V4 tokenizer's counts of the reply and of the rendered prompt."""
    reply = "Let me add: 2+2=4.</think>It is 4."
    body = {**ON, "messages": [{"role": "user", "content": "2+2?"}]}
    tm = FakeTM(tok, reply=reply)
    usage = chat_answer(tm, body).usage
    prompt_tokens = len(tok.encode(recipe_prompt(body, True), add_special_tokens=False))
    n_out = len(tok.encode(reply, add_special_tokens=False))
    want = (prompt_tokens, n_out, prompt_tokens + n_out, _reasoning_token_count(tok, reply))
    assert want[3] < n_out
    for u in (usage, _stream_chunks(FakeTM(tok, reply=reply), body)[-1].usage):
        assert u is not None and u.completion_tokens_details is not None
        got = (
            u.prompt_tokens,
            u.completion_tokens,
            u.total_tokens,
            u.completion_tokens_details.reasoning_tokens,
        )
        assert got == want


# --------------------------------------------------------------------------- literal tags, history


@pytest.mark.parametrize(
    "reply",
    ["BEGIN <think> AFTER END", "BEGIN `<think>` AFTER END", "Use <think>draft as the example tag."],
)
def test_rapid_mlx_1778_literal_think_in_a_chat_mode_answer_is_kept(
    tok: PreTrainedTokenizerFast, reply: str
) -> None:
    """raullenchai/Rapid-MLX#1778 (a literal ``<think>`` in ordinary prose truncated the
    non-streamed answer -- part of it read as reasoning -- while the stream kept it): in chat mode
    the whole reply is the answer, the same streamed and not. Oracle: DeepSeek's response parser
    in chat mode."""
    want = recipe_message({"messages": HI}, reply, False)
    msg = chat_answer(FakeTM(tok, reply=reply), {**OFF, "messages": HI}).choices[0].message
    assert (reasoning_of(msg), msg.content) == (want.get("reasoning_content"), want["content"])
    assert _streamed(FakeTM(tok, reply=reply), {**OFF, "messages": HI})[0][:2] == ("", want["content"])


@pytest.mark.parametrize("reply", ["R</think>A<think>B", "First pass.</think>Answer. <think>again</think>"])
def test_kekzl_imp_793_think_reopened_after_the_answer_splits_the_same_streamed_or_not(
    tok: PreTrainedTokenizerFast, reply: str
) -> None:
    """kekzl/imp#793 (a model that re-deliberates after its first ``</think>`` had that second
    pass split differently streamed and not -- first vs last ``</think>``): the first
    ``</think>`` ends the reasoning and what follows is the answer, the same streamed and not.
    Oracle: DeepSeek's response parser for the reasoning and the answer's text up to its own
    reading of a later ``</think>`` tag (it drops that tag as a special token; the tokenizer
    marks ``</think>`` non-special, so the text keeps it)."""
    want = recipe_message({"messages": HI}, reply, True)
    msg = chat_answer(FakeTM(tok, reply=reply), {**ON, "messages": HI}).choices[0].message
    assert reasoning_of(msg) == want["reasoning_content"]
    assert msg.content is not None and msg.content.replace(THINK_END, "") == want["content"]
    got = _streamed(FakeTM(tok, reply=reply), {**ON, "messages": HI})[0]
    assert got == (want["reasoning_content"], msg.content, "stop")


def test_langbot_2223_reasoning_of_tool_rounds_replayed_as_deepseek_renders_it(
    tok: PreTrainedTokenizerFast,
) -> None:
    """langbot-app/LangBot#2223 (also openclaw/openclaw#71435: DeepSeek-V4 in thinking mode needs
    the ``reasoning_content`` of tool-call turns passed back): a history of two tool rounds, each
    assistant turn with its reasoning, then the tool results -- and the same history closed by a
    new user turn -- must render as DeepSeek's encoder renders it (the reasoning kept while the
    tool loop runs, dropped once a new user turn begins), thinking on or off, the reasoning given
    as ``reasoning_content`` or as vLLM's ``reasoning``. Oracle: DeepSeek's converter and V4
    encoder."""
    rounds = [
        {"role": "user", "content": "Weather in Paris, then Rome?"},
        {"role": "assistant", "content": None, "reasoning_content": "Paris first.", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
        {
            "role": "assistant",
            "content": "Paris is sunny.",
            "reasoning_content": "Now Rome.",
            "tool_calls": [
                {**CALL, "id": "c2", "function": {**CALL["function"], "arguments": '{"city": "Rome"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "Rain"},
    ]
    closed = [*rounds, {"role": "assistant", "content": "Sunny, then rain.", "reasoning_content": "Done."}]
    for history in (rounds, [*closed, {"role": "user", "content": "And tomorrow?"}]):
        for thinking in (True, False):
            body = {"messages": history, "tools": TOOLS}
            want = recipe_prompt(body, thinking)
            tm = FakeTM(tok, reply="x")
            chat_answer(tm, {**body, "chat_template_kwargs": {"thinking": thinking}})
            assert prompt_of(tok, tm) == want
            renamed = [
                {("reasoning" if k == "reasoning_content" else k): v for k, v in m.items()} for m in history
            ]
            chat_answer(tm, {**body, "messages": renamed, "chat_template_kwargs": {"thinking": thinking}})
            assert prompt_of(tok, tm) == want
    assert "Paris first." in recipe_prompt({"messages": rounds, "tools": TOOLS}, True)

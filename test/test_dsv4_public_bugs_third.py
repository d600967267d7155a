"""A third set of DeepSeek-V4 public reports of peer servers (vLLM's ``DSv4`` / ``deepseek`` labels,
SGLang's and Dynamo's DeepSeek-V4 parser reports), replayed against the OpenAI chat route (each
test names its report).

The model's text is written by hand and generated token by token by the fake engine
(:class:`~test_chat_tool_stream_agreement.ChunkTM`, ``per_chunk`` tokens a chunk: a speculative
decoder's multi-token steps); oracles: the hand-written text, ``json.loads``, the ``openai``
client's parser and stream accumulator, xgrammar's string matcher over the grammar the route sent,
and the chunk-size invariance each report states (the non-streamed message is the stream folded).
Two model-side reports close the module: HF transformers' log-probabilities at every prompt length
modulo the CSA rate (slow tier) and prefix-cache hits of short repeated prompts against their cold
runs (an in-process scheduler).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_tools_testutil import WEATHER, ChunkTM, _folded, _message, accumulate, client_for
from dsml_testutil import dsml_block as _block
from dsml_testutil import dsml_invoke as _invoke
from dsml_testutil import dsml_param as _param
from dsv4_testutil import random_ids
from transformers import PreTrainedTokenizerFast

D = "｜DSML｜"
MSGS = [{"role": "user", "content": "Weather in Bergen?"}]
CALL = _block(_invoke("get_weather", _param("city", True, "Bergen")))
WANT = [("get_weather", {"city": "Bergen"})]
THINK = {"thinking": True}
_GRAMMAR_FIELDS = ("structural_tag", "json_schema", "regex", "ebnf")


def _no_markup(*texts: str | None) -> None:
    for t in texts:
        assert not t or ("DSML" not in t and "｜" not in t and "</think>" not in t), t


def _streamed(client: Any, **kw: Any) -> dict[str, Any]:
    """The stream folded by :func:`test_openai_tools.accumulate` (reasoning included)."""
    return accumulate(client.chat.completions.create(stream=True, **kw))


def _calls(calls: list[tuple[str, str]]) -> list[tuple[str, Any]]:
    return [(n, json.loads(a)) for n, a in calls]


# ---------------------------------------------------------------------------------------------
# tool_choice="auto" at a deep reasoning effort (vllm-project/vllm#53831)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("effort", ["xhigh", "max"])
@pytest.mark.parametrize("closed", [True, False], ids=["think-closed", "think-open"])
@pytest.mark.parametrize("per_chunk", [1, 4])
def test_vllm_53831_auto_tool_choice_at_deep_reasoning_effort_keeps_the_call(
    tok: PreTrainedTokenizerFast, effort: str, closed: bool, per_chunk: int
) -> None:
    """vllm-project/vllm#53831 (``tool_choice="auto"`` with ``reasoning_effort`` ``xhigh`` /
    ``max``: ``finish_reason="stop"``, empty ``content`` and no ``tool_calls`` after the model
    reasoned about the call) and ai-dynamo/dynamo#10646 (the same loss when the model opens the
    call without closing its reasoning): the reasoning is ``reasoning_content``, the call is a
    tool call, ``finish_reason`` is ``"tool_calls"``, no markup anywhere; streamed and not."""
    reasoning = "The user wants the weather in Bergen, so I call get_weather."
    reply = reasoning + ("</think>" if closed else "") + CALL
    tm = ChunkTM(tok, reply, per_chunk=per_chunk)
    client, _ = client_for(tm)
    kw: dict[str, Any] = dict(
        model="m",
        messages=MSGS,
        tools=[WEATHER],
        tool_choice="auto",
        reasoning_effort=effort,
        extra_body={"chat_template_kwargs": THINK},
    )
    ch = client.chat.completions.create(**kw).choices[0]
    calls = [(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []]
    assert _calls(calls) == WANT and ch.finish_reason == "tool_calls"
    assert (ch.message.model_extra or {}).get("reasoning_content") == reasoning
    assert not (ch.message.content or "").strip()
    s = _streamed(client, **kw)
    assert [(c["name"], json.loads(c["arguments"])) for c in s["calls"].values()] == WANT
    assert s["finish"] == "tool_calls" and s["reasoning"] == reasoning and not s["content"].strip()
    _no_markup(ch.message.content, s["content"], s["reasoning"])
    # the prompt offered the tools and the effort's instruction; "auto" adds no grammar that
    # would hold from the first (reasoning) token
    prompt = tok.decode(tm.received[-1].input_ids)
    assert "## Tools" in prompt and "Reasoning Effort:" in prompt and prompt.endswith("<think>")
    sp = tm.received[-1].sampling_params or {}
    assert all(sp.get(f) is None for f in _GRAMMAR_FIELDS), sp


# ---------------------------------------------------------------------------------------------
# response_format json_object with thinking (vllm-project/vllm#41132, PR vllm-project/vllm#41199)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("effort", [None, "max"])
@pytest.mark.parametrize("per_chunk", [1, 3])
def test_vllm_41132_json_object_with_thinking_answers_in_content(
    tok: PreTrainedTokenizerFast, effort: str | None, per_chunk: int
) -> None:
    """vllm-project/vllm#41132 (``response_format: json_object`` with thinking on: the JSON landed
    in the ``reasoning`` field; fixed by vllm-project/vllm#41199): the reasoning is
    ``reasoning_content``, the JSON object is ``content`` (``json.loads``), streamed and not; the
    grammar the route sent accepts the free reasoning then the object and refuses the object
    written without the reasoning's end."""
    from chat_tools_testutil import _grammar_of
    from xgrammar.testing import _is_grammar_accept_string

    obj = {"location": "Oslo", "temperature": 4, "conditions": "rainy", "unit": "celsius"}
    reasoning = "Minified JSON with exactly four keys; Oslo is rainy at 4 degrees."
    answer = json.dumps(obj, separators=(",", ":"))
    reply = reasoning + "</think>" + answer
    tm = ChunkTM(tok, reply, per_chunk=per_chunk)
    tm.grammar_enabled = True
    client, _ = client_for(tm)
    kw: dict[str, Any] = dict(
        model="m",
        messages=[{"role": "user", "content": "Return ONLY a minified JSON object."}],
        response_format={"type": "json_object"},
        extra_body={"chat_template_kwargs": THINK},
    )
    if effort:
        kw["reasoning_effort"] = effort
    m = client.chat.completions.create(**kw).choices[0].message
    assert (m.model_extra or {}).get("reasoning_content") == reasoning
    assert json.loads(m.content) == obj
    s = _streamed(client, **kw)
    assert s["reasoning"] == reasoning and json.loads(s["content"]) == obj
    grammar = _grammar_of(tm.received[-1].sampling_params)
    assert _is_grammar_accept_string(grammar, reply)
    assert not _is_grammar_accept_string(grammar, reasoning + answer)


# ---------------------------------------------------------------------------------------------
# tool-call arguments keep every token (sgl-project/sglang#28414)
# ---------------------------------------------------------------------------------------------

#: A shell command of the report's shape, with multi-byte characters whose tokens decode to an
#: incomplete UTF-8 sequence until the next one arrives.
COMMAND = "cd /path/to/sglang/benchmark && python3 bench_serving.py --tag 基准测试 --note 'ok ✓ 🚀'"


@pytest.mark.parametrize("per_chunk", [1, 2, 5])
@pytest.mark.parametrize("eos_chunk", [False, True])
def test_sglang_28414_tool_arguments_keep_every_generated_token(
    tok: PreTrainedTokenizerFast, per_chunk: int, eos_chunk: bool
) -> None:
    """sgl-project/sglang#28414 (tool-call arguments came back with tokens missing,
    ``cd /path/to/slang/benc_mark`` for ``sglang`` / ``benchmark``): of the report, what a server
    adds between the sampled tokens and the client (detokenization, the tool parser's streaming)
    drops nothing: the arguments are the written command, streamed in any chunking and not."""
    bash = {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
    preamble = "Running the benchmark — 先进入目录。"
    reply = preamble + _block(_invoke("bash", _param("command", True, COMMAND)))
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk, eos_chunk=eos_chunk))
    kw: dict[str, Any] = dict(model="m", messages=MSGS, tools=[bash])
    for content, calls, finish in (_message(client, **kw), _folded(client, **kw)):
        assert content == preamble and finish == "tool_calls"
        assert _calls(calls) == [("bash", {"command": COMMAND})]


# ---------------------------------------------------------------------------------------------
# the start wrapper left out (vllm-project/vllm#49117, its over-triggering in vllm-project/vllm#48931)
# ---------------------------------------------------------------------------------------------


def _orphan(name: str, *params: str) -> str:
    """An invoke without the start wrapper, then the wrapper's closing tag (vllm#48931's shape)."""
    return "\n\n" + _invoke(name, *params) + f"\n</{D}tool_calls>"


@pytest.mark.parametrize("per_chunk", [1, 3, 1000])
def test_vllm_49117_orphan_invoke_is_recovered_as_the_call(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """vllm-project/vllm#49117 (recovery of an invoke whose ``<｜DSML｜tool_calls>`` start was left
    out, the closing tag written): the call commits with its arguments intact, streamed (one
    chunk holding the whole text too) and not; the text before it is the content."""
    reply = "Checking." + _orphan("get_weather", _param("city", True, "Bergen"))
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    kw: dict[str, Any] = dict(model="m", messages=MSGS, tools=[WEATHER])
    for content, calls, finish in (_message(client, **kw), _folded(client, **kw)):
        assert (content, finish) == ("Checking.", "tool_calls")
        assert _calls(calls) == WANT


def test_vllm_49117_requests_without_tools_keep_quoted_markup_as_content(
    tok: PreTrainedTokenizerFast,
) -> None:
    """vllm-project/vllm#48931 (field report on vllm-project/vllm#49117's recovery: "Requests that
    declare no tools still enter tool parsing, and a completion quoting DSML markup is consumed —
    the client gets empty content"): without ``tools`` the text is the content, byte for byte,
    streamed and not, and there are no tool calls."""
    reply = "The format is:" + CALL + "\nThat is how a call looks."
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=2))
    kw: dict[str, Any] = dict(model="m", messages=[{"role": "user", "content": "Show the DSML format."}])
    for content, calls, finish in (_message(client, **kw), _folded(client, **kw)):
        assert (content, calls, finish) == (reply, [], "stop")


def test_vllm_49117_prose_mentioning_an_invoke_is_no_phantom_call(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#48931 (on vllm-project/vllm#49117's recovery: "Assistant prose that merely
    *mentions* an ``<｜DSML｜invoke …>`` marker ... is recovered into a phantom tool call. A
    recovered call must be required to **close** before it commits"): an invoke start that never
    closes, followed by more prose and a stop, makes no call, streamed or not, ``finish_reason`` is
    ``"stop"`` and the prose is the content (the tag itself dropped with the space before it, as
    no DSML reaches ``content``); a call written after such prose is still a call."""
    prose = f'Use <{D}invoke name="get_weather"> to call a tool, then wait for its result.'
    for reply, calls_want, finish_want in ((prose, [], "stop"), (prose + CALL, WANT, "tool_calls")):
        for per_chunk in (1, 4):
            client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
            kw: dict[str, Any] = dict(model="m", messages=MSGS, tools=[WEATHER])
            for content, calls, finish in (_message(client, **kw), _folded(client, **kw)):
                assert content == "Use to call a tool, then wait for its result."
                assert (_calls(calls), finish) == (calls_want, finish_want)


# ---------------------------------------------------------------------------------------------
# the reasoning / tool boundary (sgl-project/sglang#34178 and its replacement #34280)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("per_chunk", [1, 2, 3, 7, 1000])
def test_sglang_34280_preamble_bytes_do_not_depend_on_chunking(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """sgl-project/sglang#34280 ("Preamble bytes must be preserved exactly"; stripping newlines
    only when the preamble and the block start share a chunk made the content depend on the
    chunking) and sgl-project/sglang#33813 (a preamble in the same delta as the block start was
    dropped): the content before a call is the same in every chunking, one chunk holding all the
    text included, and equal to the non-streamed content; the call is parsed in each."""
    preamble = "Let me check that for you.\nFirst the weather:"
    reply = preamble + CALL
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    kw: dict[str, Any] = dict(model="m", messages=MSGS, tools=[WEATHER])
    whole = _message(client, **kw)
    assert whole[0] == preamble and _calls(whole[1]) == WANT
    s = _streamed(client, **kw)
    assert s["content"] == whole[0]
    assert [(c["name"], json.loads(c["arguments"])) for c in s["calls"].values()] == WANT


@pytest.mark.parametrize("per_chunk", [1, 4])
def test_sglang_34280_think_tags_after_the_reasoning_end_are_content(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """sgl-project/sglang#34280 (problem 1 of sgl-project/sglang#34178: "After the reasoning close
    token, the remainder belongs to the final answer"): ``A</think>one<think>B</think>two`` has
    reasoning ``A`` and content ``one<think>B</think>two``, streamed and not."""
    reply = "A</think>one<think>B</think>two"
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    kw: dict[str, Any] = dict(model="m", messages=MSGS, extra_body={"chat_template_kwargs": THINK})
    m = client.chat.completions.create(**kw).choices[0].message
    assert ((m.model_extra or {}).get("reasoning_content"), m.content) == ("A", "one<think>B</think>two")
    s = _streamed(client, **kw)
    assert (s["reasoning"], s["content"]) == ("A", "one<think>B</think>two")


@pytest.mark.parametrize("per_chunk", [1, 5])
def test_sglang_34280_only_the_block_start_ends_the_reasoning(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """sgl-project/sglang#34280 (problem 2: "Using ``<｜DSML｜`` as ``tool_start_token`` also
    matches non-tool DSML tags such as parameters. Only ``<｜DSML｜tool_calls>`` should move output
    from the reasoning parser to the tool parser"): reasoning that mentions a parameter tag stays
    reasoning (its tag dropped, as no DSML reaches ``reasoning_content``: vllm-project/vllm#54686;
    the tag takes the space before it); the answer after ``</think>`` is the content."""
    written = f'I will pass <{D}parameter name="city"> as a string.'
    reasoning = "I will pass as a string."
    reply = written + "</think>It is 4C in Bergen."
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    kw: dict[str, Any] = dict(
        model="m", messages=MSGS, tools=[WEATHER], extra_body={"chat_template_kwargs": THINK}
    )
    m = client.chat.completions.create(**kw).choices[0]
    assert (m.message.model_extra or {}).get("reasoning_content") == reasoning
    assert (m.message.content, m.message.tool_calls, m.finish_reason) == ("It is 4C in Bergen.", None, "stop")
    s = _streamed(client, **kw)
    assert (s["reasoning"], s["content"], s["calls"], s["finish"]) == (
        reasoning,
        "It is 4C in Bergen.",
        {},
        "stop",
    )


# ---------------------------------------------------------------------------------------------
# streaming details (vllm-project/vllm#41241, vllm-project/vllm#52846)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reply", ["2 <", "Is 1 < 2? Yes: 1 <", "a <｜", "x </"])
@pytest.mark.parametrize("per_chunk", [1, 2])
def test_vllm_41241_text_that_only_looked_like_a_marker_is_flushed(
    tok: PreTrainedTokenizerFast, reply: str, per_chunk: int
) -> None:
    """vllm-project/vllm#41241 ("flush held plain text at the end of streaming when it only looked
    like the start of a DSML marker, such as ``2 <``"): an answer ending in the first characters
    of a marker is the whole content, streamed and not."""
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    kw: dict[str, Any] = dict(model="m", messages=MSGS, tools=[WEATHER])
    for content, calls, finish in (_message(client, **kw), _folded(client, **kw)):
        assert (content, calls, finish) == (reply, [], "stop")


def test_vllm_41241_a_real_parameter_named_arguments_is_kept(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#41241 ("escape real tool parameters named ``arguments``": a tool whose
    schema has an ``arguments`` property must not be unwrapped as if the model had wrapped the
    call's arguments): the call's arguments are ``{"arguments": ...}`` as written, streamed and
    not, also when the value is itself a JSON object text."""
    run = {
        "type": "function",
        "function": {
            "name": "run",
            "parameters": {"type": "object", "properties": {"arguments": {"type": "string"}}},
        },
    }
    for value in ["--verbose --dry-run", '{"path": "/tmp"}']:
        reply = _block(_invoke("run", _param("arguments", True, value)))
        client, _ = client_for(ChunkTM(tok, reply, per_chunk=2))
        kw: dict[str, Any] = dict(model="m", messages=MSGS, tools=[run])
        for _content, calls, finish in (_message(client, **kw), _folded(client, **kw)):
            assert _calls(calls) == [("run", {"arguments": value})] and finish == "tool_calls"


def test_vllm_52846_long_string_argument_streams_before_its_closing_tag(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#52846 (a long string parameter's body was held until
    ``</｜DSML｜parameter>`` and sent as one fragment): the value's text arrives in many argument
    deltas while the parameter is still open, and the fragments join to the value."""
    body = "\n".join(f"line {i}: print('hello world {i}')" for i in range(60))
    write = {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            },
        },
    }
    reply = _block(_invoke("write_file", _param("path", True, "a.py"), _param("content", True, body)))
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=1))
    fragments: list[str] = []
    for ch in client.chat.completions.create(model="m", messages=MSGS, tools=[write], stream=True):
        for c in ch.choices:
            for tc in c.delta.tool_calls or []:
                if tc.function and tc.function.arguments:
                    fragments.append(tc.function.arguments)
    assert json.loads("".join(fragments)) == {"path": "a.py", "content": body}
    # the body is streamed: no single fragment holds more than a tenth of it
    assert len(fragments) > 50 and max(len(f) for f in fragments) < len(body) // 10


# ---------------------------------------------------------------------------------------------
# a repeated closing tag (local-inference-lab/vllm#296)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("per_chunk", [1, 3])
def test_vllm_fork_296_repeated_block_closer_is_no_content(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """local-inference-lab/vllm#296 (DeepSeek-V4 wrote ``</｜DSML｜tool_calls>`` twice after a
    call; the second reached ``content``): the call is parsed and no DSML reaches the content,
    streamed and not."""
    reply = CALL + f"</{D}tool_calls>"
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    kw: dict[str, Any] = dict(model="m", messages=MSGS, tools=[WEATHER])
    for content, calls, _finish in (_message(client, **kw), _folded(client, **kw)):
        assert _calls(calls) == WANT
        _no_markup(content)


# ---------------------------------------------------------------------------------------------
# the answer at every prompt length modulo the compress rate (vllm-project/vllm#55927)
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow  # about 4 s on two cores (a twin and four HF forwards)
def test_vllm_55927_next_token_at_every_prompt_length_mod_4_matches_hf() -> None:
    """vllm-project/vllm#55927 (DeepSeek-V4-Flash, reasoning off: the token after a long prompt was
    wrong whenever the prompt length was 3 modulo 4, the CSA compress rate, and right at the other
    lengths): one prompt cut at four consecutive lengths (every remainder modulo 4, past the HCA
    rate of 128 and the 128-token window: 132 to 135 tokens), prefilled then extended by its last
    token as a decode step, gives HF transformers' log-probabilities (fp32, tiny random weights) at
    the last two positions and HF's greedy next token."""
    import copy

    import torch
    from dsv4_testutil import Driver, hf_logprobs, make_twin
    from public_bug_configs_testutil import REPORT_CFG

    twin = make_twin("report_cfg_55927", seed=3, cfg=copy.deepcopy(REPORT_CFG))
    full = random_ids(135, seed=55927)
    for n in range(132, 136):
        ids = full[:n]
        ours = Driver(twin).run_chunked(ids, n - 1)[-2:]
        want = hf_logprobs(twin, ids)[-2:]
        assert (ours - want).abs().max().item() <= 1e-3, (n, n % 4)
        assert int(ours[-1].argmax()) == int(want[-1].argmax()), n
        assert torch.isfinite(ours).all()


# ---------------------------------------------------------------------------------------------
# prefix-cache hits of short prompts (vllm-project/vllm-ascend#16270, #10710)
# ---------------------------------------------------------------------------------------------


def test_vllm_ascend_16270_short_identical_prompts_hit_whole_blocks(sched_model_dir: str) -> None:
    """vllm-project/vllm-ascend#16270 and #10710 (DeepSeek-V4: identical serial requests shorter
    than 4096 tokens never hit the prefix cache, the hit granularity being the least common
    multiple of the cache groups' block sizes): the cache here is keyed on 256-token blocks
    (README), so a repeated 600-token prompt reuses its two whole blocks (512 tokens; the last
    token is always computed) and a 300-token one its first block, and the warm greedy tokens are
    the cold run's."""
    from scheduler_testutil import PAGE, assert_idle, make_scheduler, run_one

    s = make_scheduler(sched_model_dir, max_total_tokens=8 * PAGE)
    for n, hit in ((600, 2 * PAGE), (300, PAGE)):
        ids = random_ids(n, seed=16270 + n)
        cold = run_one(s, f"cold{n}", ids, 4)
        assert cold["cached"] == 0
        warm = run_one(s, f"warm{n}", ids, 4)
        assert (warm["cached"], warm["ids"]) == (hit, cold["ids"])
        assert s.flush_cache()
    assert_idle(s)

"""More DeepSeek-V4 / V3.2 public reports of peer servers, replayed against this runtime (each test
names its report).

* Chat encoding: ``chat_template_kwargs`` ``{"drop_thinking": false}`` (the reference encoder's
  argument, which vLLM's DeepSeek-V4 chat encoding reads there and SGLang's V4 template PR
  documents) keeps the reasoning of earlier turns. Oracle: the reference encoder's prompts of
  ``fixtures/dsv4_chat_encoding.json`` (with tools every turn keeps its reasoning; the same
  conversation without the tools section is what ``drop_thinking=False`` must give) and the
  format written out by hand.
* Tool-call streaming: values whose last characters are letters of a DSML tag, a block start split
  at every position, a shell redirect at the end of a value under thinking mode, consecutive
  requests on one server. Oracles: the hand-written text, ``json.loads`` and the ``openai``
  client's stream accumulator.
* Model math against HF transformers' ``DeepseekV4ForCausalLM`` (fp32, tiny random weights) and
  float64 formulas: the clamped SwiGLU of the shared expert and the per-layer rope choice.
* The prefix cache: a prefix another request left in the radix tree gives the cold run's tokens.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from chat_tools_testutil import ChunkTM, ScriptedTM, _folded, _message, accumulate, client_for
from dsml_testutil import dsml_block as _block
from dsml_testutil import dsml_invoke as _invoke
from dsml_testutil import dsml_param as _param
from dsv4_testutil import Driver, hf_logprobs, make_twin, random_ids
from public_bug_configs_testutil import REPORT_CFG, YARN
from sglang_v4.entrypoints.chat_encoding import BOS, EOS, encode_messages
from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser, parse_tool_calls
from transformers import PreTrainedTokenizerFast

D = "｜DSML｜"
THINK = {"chat_template_kwargs": {"thinking": True}}
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
_FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "dsv4_chat_encoding.json").read_text())["cases"]

# ---------------------------------------------------------------------------------------------
# chat encoding: drop_thinking
# ---------------------------------------------------------------------------------------------

#: A thinking-mode conversation without tools whose first answer carried reasoning.
TWO_TURNS = [
    {"role": "user", "content": "Q1"},
    {"role": "assistant", "reasoning_content": "R1", "content": "A1"},
    {"role": "user", "content": "Q2"},
]


def test_sglang_23623_drop_thinking_false_keeps_earlier_reasoning() -> None:
    """sgl-project/sglang#23623 (the V4 template's ``{"drop_thinking": false}``: "preserves
    reasoning_content from earlier assistant turns (encoder default true)"). The format written out
    by hand: dropped, the earlier answer opens with ``</think>`` and has no reasoning; kept, it
    opens ``<think>`` and carries ``R1</think>``."""
    dropped = f"{BOS}<｜User｜>Q1<｜Assistant｜></think>A1{EOS}<｜User｜>Q2<｜Assistant｜><think>"
    kept = f"{BOS}<｜User｜>Q1<｜Assistant｜><think>R1</think>A1{EOS}<｜User｜>Q2<｜Assistant｜><think>"
    assert encode_messages(TWO_TURNS, thinking=True) == dropped
    assert encode_messages(TWO_TURNS, thinking=True, drop_thinking=True) == dropped
    assert encode_messages(TWO_TURNS, thinking=True, drop_thinking=False) == kept
    # chat mode has no reasoning to keep: the flag changes nothing there
    chat = f"{BOS}<｜User｜>Q1<｜Assistant｜></think>A1{EOS}<｜User｜>Q2<｜Assistant｜></think>"
    assert encode_messages(TWO_TURNS, thinking=False, drop_thinking=False) == chat


def _without_tools_section(expected: str) -> str:
    """A reference prompt with the "## Tools" section (and the blank line before it) cut out."""
    start = expected.index("\n\n## Tools")
    return expected[:start] + expected[expected.index("<｜User｜>", start) :]


@pytest.mark.parametrize(
    "case", [c for c in _FIXTURES if c["thinking"] and c["tools"]], ids=lambda c: c["name"]
)
def test_sglang_23623_drop_thinking_false_is_the_reference_keep_rendering(case: dict[str, Any]) -> None:
    """The reference encoder keeps every turn's reasoning when the request has tools; its prompt
    without the tools section is the one ``drop_thinking=False`` renders for the conversation
    without tools (and dropping is the default, which differs on these multi-turn cases)."""
    expected = _without_tools_section(case["expected"])
    # a conversation ending with an assistant turn is a finished one there: no generation prompt
    gen = case["messages"][-1]["role"] != "assistant"
    kept = encode_messages(case["messages"], thinking=True, add_generation_prompt=gen, drop_thinking=False)
    assert kept == expected
    if any(m["role"] == "assistant" and m.get("reasoning_content") for m in case["messages"][:-1]):
        assert encode_messages(case["messages"], thinking=True, add_generation_prompt=gen) != expected


def test_sglang_23623_drop_thinking_through_chat_template_kwargs(tok: PreTrainedTokenizerFast) -> None:
    """The chat route reads ``chat_template_kwargs.drop_thinking`` (default true); a value that is
    not a boolean is a 400 naming the field, and nothing is generated for it."""
    tm = ScriptedTM(tok, "ok")
    client, tc = client_for(tm)
    for kwargs, reasoning_kept in (
        ({}, False),
        ({"drop_thinking": True}, False),
        ({"drop_thinking": False}, True),
    ):
        client.chat.completions.create(
            model="m", messages=TWO_TURNS, extra_body={"chat_template_kwargs": {"thinking": True, **kwargs}}
        )
        prompt = tok.decode(tm.received[-1].input_ids)
        assert ("<think>R1</think>A1" in prompt) is reasoning_kept, prompt
        assert prompt.endswith("<｜User｜>Q2<｜Assistant｜><think>")
    n = len(tm.received)
    body = {
        "model": "m",
        "messages": TWO_TURNS,
        "chat_template_kwargs": {"thinking": True, "drop_thinking": "no"},
    }
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert "drop_thinking" in r.json()["error"]["message"]
    assert len(tm.received) == n


# ---------------------------------------------------------------------------------------------
# tool-call streaming
# ---------------------------------------------------------------------------------------------

#: Values that end with characters of a DSML tag (``str.rstrip("parameter")`` ate "find /tmp" down
#: to "find /"), with a lone ``<`` or ``</`` (the first characters of a closing tag), or with a
#: shell redirect.
TAG_LETTER_VALUES = ["find /tmp", "repeat", "parameter", "mkdir -p tmp", "ls 2>&1", "x </", "a <", "<"]


@pytest.mark.parametrize("value", TAG_LETTER_VALUES)
@pytest.mark.parametrize("per_chunk", [1, 3])
def test_sglang_34600_values_ending_in_tag_letters_stream_whole(
    tok: PreTrainedTokenizerFast, value: str, per_chunk: int
) -> None:
    """sgl-project/sglang#34600 (bug 2: ``rstrip(token)`` strips a *set of characters*, so a
    streamed ``"find /tmp"`` became ``"find /"``): the streamed arguments of a value ending in tag
    letters or in a partial closing tag are the value, as the non-streamed ones are."""
    reply = "Running it." + _block(_invoke("bash", _param("command", True, value)))
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    kw = dict(model="m", messages=[{"role": "user", "content": "go"}], tools=[BASH])
    for content, calls, finish in (_folded(client, **kw), _message(client, **kw)):
        assert content == "Running it."
        assert [(n, json.loads(a)) for n, a in calls] == [("bash", {"command": value})]
        assert finish == "tool_calls"


def _call_args(deltas: list[Any]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for d in deltas:
        slot = out.setdefault(d.index, ["", ""])
        slot[0] += d.name or ""
        slot[1] += d.arguments or ""
    return out


def test_vllm_40800_block_start_split_at_every_position() -> None:
    """vllm-project/vllm#40800 / #40801 (DSML fragments leaked in auto + streaming mode; the
    reporters' regression list: "start marker split across chunks at multiple boundaries", "mixed
    plain-text prefix followed by tool call block"): the text cut into two chunks anywhere gives
    the prefix as content, no markup, and the one call."""
    prefix = "Let me check <the> weather."
    text = prefix + _block(_invoke("get_weather", _param("city", True, "Oslo"), _param("days", False, "2")))
    want = {"city": "Oslo", "days": 2}
    whole_content, whole_calls, complete = parse_tool_calls(text, stopped=True)
    assert complete and whole_content == prefix and json.loads(whole_calls[0].arguments) == want
    for cut in range(len(text) + 1):
        p = DsmlToolParser()
        c1, d1 = p.feed(text[:cut])
        c2, d2 = p.feed(text[cut:])
        c3, d3 = p.finish(stopped=True)
        assert c1 + c2 + c3 == prefix, cut
        calls = _call_args(d1 + d2 + d3)
        assert [(n, json.loads(a)) for n, a in calls.values()] == [("get_weather", want)], cut


def test_vllm_53405_output_cut_inside_the_closing_tag_leaks_no_markup() -> None:
    """vllm-project/vllm#53405 (the fix of vllm-project/vllm#53227 found that a value cut at
    ``y</｜DSM``, any position inside the parameter's closing tag, still leaked with a regex that
    waits for the whole ``｜DSML｜``): output cut by ``max_tokens`` at every position of the closing
    tags is a call whose arguments are a prefix of ``{"location": "Paris"}`` holding the whole
    value, streamed and not, and the content is the text before the block."""
    head = "Look." + _block(_invoke("get_weather", _param("location", True, "Paris")))
    cut_at = head.index(f"</{D}parameter>")
    full = json.dumps({"location": "Paris"})
    for end in range(cut_at, len(head) + 1):
        text = head[:end]
        content, calls, _ = parse_tool_calls(text, stopped=False)
        p = DsmlToolParser()
        deltas, streamed = [], ""
        for ch in text:
            c, d = p.feed(ch)
            streamed, deltas = streamed + c, deltas + d
        c, d = p.finish(stopped=False)
        streamed, deltas = streamed + c, deltas + d
        for got_content, args in ((content, calls[0].arguments), (streamed, _call_args(deltas)[0][1])):
            assert got_content == "Look.", (end, got_content)
            assert args.startswith('{"location": "Paris') and full.startswith(args), (end, args)


def test_vllm_40800_state_does_not_carry_into_the_next_request(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#40800 ("multi-turn requests to verify state reset"): a request cut by
    ``max_tokens`` inside a block, then a plain answer and a call on the same server: each is
    read on its own."""
    call = _block(_invoke("bash", _param("command", True, "pwd")))
    tm = ChunkTM(tok, "Checking." + call)
    client, _ = client_for(tm)
    kw = dict(model="m", messages=[{"role": "user", "content": "go"}], tools=[BASH], stream=True)
    cut = accumulate(client.chat.completions.create(**kw, max_tokens=8))
    assert cut["finish"] == "length" and "DSML" not in cut["content"]
    tm.reply = "Nothing to run: the directory is /home."
    plain = accumulate(client.chat.completions.create(**kw))
    assert (plain["content"], plain["calls"], plain["finish"]) == (tm.reply, {}, "stop")
    tm.reply = "Again." + call
    again = accumulate(client.chat.completions.create(**kw))
    assert again["content"] == "Again." and again["finish"] == "tool_calls"
    assert [json.loads(c["arguments"]) for c in again["calls"].values()] == [{"command": "pwd"}]


SQL = {
    "type": "function",
    "function": {
        "name": "run_sql",
        "description": "Run a read-only SELECT.",
        "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]},
    },
}


@pytest.mark.parametrize("thinking", [False, True], ids=["chat", "thinking"])
def test_vllm_ascend_10182_forced_tool_choice_reads_the_call_as_auto_does(
    tok: PreTrainedTokenizerFast, thinking: bool
) -> None:
    """vllm-project/vllm-ascend#10182 (DeepSeek-V4 with a named ``tool_choice``: arguments empty
    now and then, DSML in the content), vllm-project/vllm#40800 ("auto+stream vs required+stream
    comparison") and deepseek-ai/DeepSeek-V3#1376 (DeepSeek's API refuses ``"required"`` and named
    choices in thinking mode, which every agent framework sends): the same generated call is
    accepted and read the same under ``auto``, ``required`` and a named choice, streamed and not,
    with thinking on and off."""
    query = "SELECT log_id, time FROM t ORDER BY time DESC LIMIT 10"
    call = _block(_invoke("run_sql", _param("sql", True, query)))
    reply = ("The user wants rows.</think>" if thinking else "") + call
    tm = ChunkTM(tok, reply, per_chunk=2)
    tm.grammar_enabled = True  # a server with a grammar backend: forced choices are constrained
    client, _ = client_for(tm)
    extra = THINK if thinking else {"chat_template_kwargs": {"thinking": False}}
    named = {"type": "function", "function": {"name": "run_sql"}}
    for choice in ("auto", "required", named):
        kw = dict(
            model="m",
            messages=[{"role": "user", "content": "latest rows of t"}],
            tools=[BASH, SQL],
            tool_choice=choice,
            extra_body=extra,
        )
        for content, calls, finish in (_message(client, **kw), _folded(client, **kw)):
            assert ("structural_tag" in tm.received[-1].sampling_params) is (choice != "auto"), choice
            assert content == "", choice
            assert [(n, json.loads(a)) for n, a in calls] == [("run_sql", {"sql": query})], choice
            assert finish == "tool_calls", choice


@pytest.mark.parametrize("per_chunk", [1, 2, 5])
def test_vllm_45877_redirect_at_the_end_of_a_command_under_thinking(
    tok: PreTrainedTokenizerFast, per_chunk: int
) -> None:
    """vllm-project/vllm#45877 (a comment there: under streaming + thinking, a ``bash`` command
    ending in ``2>&1`` came back with ``</｜DSML｜parameter`` glued to it and the arguments JSON
    unterminated): the reasoning, the arguments and the finish reason are the generated ones."""
    command = "cd /srv/app && make test 2>&1"
    reply = "I should run the tests.</think>" + _block(_invoke("bash", _param("command", True, command)))
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    s = accumulate(
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "test it"}],
            tools=[BASH],
            extra_body=THINK,
            stream=True,
        )
    )
    assert s["reasoning"] == "I should run the tests." and s["content"] == ""
    assert [json.loads(c["arguments"]) for c in s["calls"].values()] == [{"command": command}]
    assert s["finish"] == "tool_calls"


def test_sglang_15155_dsml_markers_survive_skip_special_tokens() -> None:
    """sgl-project/sglang#15155 (DeepSeek V3.2 function calls need ``skip_special_tokens=False``:
    the DSML markers "are encoded as special tokens and must not be stripped during decoding") and
    vllm-project/vllm#30541 (the ``｜DSML｜`` token missing from V3.2's tool-call output):
    in the V4 tokenizer the detokenizer loads, ``｜DSML｜``, ``<think>`` and ``</think>`` survive a
    ``skip_special_tokens`` decode (the default of every request), while BOS and EOS do not."""
    from sglang_v4.hf_transformers_utils import get_tokenizer
    from sglang_v4.tools.make_checkpoint import tokenizer_dir

    t = get_tokenizer(tokenizer_dir())
    body = "Hi<think>r</think>" + _block(_invoke("f", _param("x", False, "1")))
    ids = t.encode(BOS + body + EOS, add_special_tokens=False)
    assert t.decode(ids, skip_special_tokens=True) == body
    assert t.decode(ids, skip_special_tokens=False) == BOS + body + EOS


# ---------------------------------------------------------------------------------------------
# model math: HF transformers and float64 oracles
# ---------------------------------------------------------------------------------------------


@functools.cache
def _twin():  # noqa: ANN202 - a dsv4_testutil.Twin
    return make_twin("report_cfg", seed=11, cfg=copy.deepcopy(REPORT_CFG))


@functools.cache
def _parity_err() -> float:
    """Max |dlogprob| of 200 teacher-forced tokens (prefill of 130, then chunks of 35) against HF."""
    twin = _twin()
    ids = random_ids(200, seed=5)
    out = Driver(twin).run_chunked(ids, 130)
    return (out - hf_logprobs(twin, ids)).abs().max().item()


def _swiglu_f64(gate: torch.Tensor, up: torch.Tensor, limit: float) -> torch.Tensor:
    """DeepSeek-V4's ``Expert.forward`` activation in float64: ``silu(min(gate, limit)) *
    clamp(up, -limit, limit)`` (the gate is clamped from above only)."""
    g, u = gate.double().clamp(max=limit), up.double().clamp(-limit, limit)
    return g * torch.sigmoid(g) * u


def test_sglang_23752_shared_expert_swiglu_is_clamped() -> None:
    """sgl-project/sglang#23752 (fixed by sgl-project/sglang#23776: the shared expert's SwiGLU
    missed ``swiglu_limit``, and DeepSeek-V4 wrote stray numbers such as "16" into its answers):
    the shared expert's output is ``down(silu(min(gate, L)) * clamp(up, -L, L))`` in float64 on
    inputs whose pre-activations are far beyond ``L``, and the whole model agrees with HF's (whose
    shared expert clamps too) with a limit that bites."""
    torch.manual_seed(0)
    shared = _twin().ours.model.layers[1].mlp.shared_experts
    limit = shared.limit
    assert limit == REPORT_CFG["swiglu_limit"]
    x = torch.randn(16, REPORT_CFG["hidden_size"]) * 40.0
    gate = x.double() @ shared.gate_proj.weight.double().T
    up = x.double() @ shared.up_proj.weight.double().T
    assert (gate.abs() > 10 * limit).float().mean() > 0.5 and (up.abs() > 10 * limit).float().mean() > 0.5
    want = _swiglu_f64(gate, up, limit) @ shared.down_proj.weight.double().T
    got = shared(x).double()
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (got - want).abs().max()
    assert _parity_err() <= 1e-3


def test_transformers_46018_gate_is_clamped_from_above_only() -> None:
    """huggingface/transformers#46018 (the shared expert's SwiGLU was not clamped; DeepSeek's
    reference ``Expert.forward`` clamps ``up`` to ``[-L, L]`` and ``gate`` only from above): the
    fused op on gate/up values below, inside and above the bounds, against the float64 formula; a
    gate far below ``-L`` is not lifted to ``-L``."""
    from sgl_kernel_v4 import ops

    limit = 7.0
    vals = torch.tensor([-1000.0, -50.0, -7.5, -7.0, -3.0, 0.0, 2.5, 7.0, 7.25, 60.0, 1e4])
    gate, up = torch.meshgrid(vals, vals, indexing="ij")
    gate, up = gate.reshape(1, -1), up.reshape(1, -1)
    got = ops.swiglu_clamped(torch.cat([gate, up], dim=-1), limit).double()
    want = _swiglu_f64(gate, up, limit)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-9), (got - want).abs().max()
    # silu(-50) * 7 is about -1e-20, not silu(-7) * 7 (about -0.045)
    assert got[0, vals.numel() * 1 + vals.numel() - 1].abs() < 1e-15


def test_sglang_34788_sliding_layers_use_the_unscaled_main_rope() -> None:
    """sgl-project/sglang#34788 (YaRN made unconditional reached the pure sliding-window layers):
    DeepSeek-V4 picks the rope per layer. The main table (sliding layers) is plain RoPE at
    ``rope_theta`` even when the config carries YaRN, ``1 / theta ** (2i / d)`` in closed form; the
    compress table (CSA / HCA layers: queries, window keys, compressors, indexer) is YaRN at
    ``compress_rope_theta`` with no attention scaling; and the model with sliding, CSA and HCA
    layers agrees with HF's."""
    twin = _twin()
    rope = twin.ours.rope
    d = int(REPORT_CFG["head_dim"] * REPORT_CFG["partial_rotary_factor"])
    plain = 1.0 / (REPORT_CFG["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    assert torch.allclose(rope.inv_freq["main"].double(), plain, rtol=1e-6, atol=0)
    assert rope.scaling["main"] == 1.0 and rope.scaling["compress"] == 1.0
    base = 1.0 / (REPORT_CFG["compress_rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    comp = rope.inv_freq["compress"].double()
    # YaRN: the highest frequencies kept, the lowest divided by the factor
    assert math.isclose(comp[0].item(), base[0].item(), rel_tol=1e-6)
    assert math.isclose(comp[-1].item(), base[-1].item() / YARN["factor"], rel_tol=1e-6)
    assert _parity_err() <= 1e-3


# ---------------------------------------------------------------------------------------------
# prefix cache
# ---------------------------------------------------------------------------------------------


def test_vllm_54490_prefix_left_by_another_request_gives_the_cold_tokens(sched_model_dir: str) -> None:
    """vllm-project/vllm#54490 (enabling prefix caching changed deterministic repeated output) and
    ROCm/ATOM#1417 (DeepSeek-V4: a cross-request prefix hit read the sliding window from a stale
    per-request ring): request B shares 300 tokens with request A that ran before it; B's greedy
    tokens with the 256-token hit (a whole block: the window and the compressors' state come from
    it) are those of B run cold, and so are A's when it comes again."""
    from scheduler_testutil import PAGE, assert_idle, make_scheduler, run_one

    s = make_scheduler(sched_model_dir, max_total_tokens=8 * PAGE)
    shared = random_ids(300, 61)
    a, b = shared + random_ids(20, 62), shared + random_ids(35, 63)
    run_one(s, "a", a, 2)
    warm_b = run_one(s, "b", b, 6)
    assert warm_b["cached"] == PAGE
    warm_a = run_one(s, "a2", a, 6)
    assert warm_a["cached"] == PAGE
    assert s.flush_cache()
    assert run_one(s, "b-cold", b, 6)["ids"] == warm_b["ids"]
    assert s.flush_cache()
    assert run_one(s, "a-cold", a, 6)["ids"] == warm_a["ids"]
    assert_idle(s)

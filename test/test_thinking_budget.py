"""vLLM's ``thinking_token_budget`` enforced: after ``budget`` reasoning tokens the next token is
``</think>`` (``sampling/thinking_budget.py``, the scheduler's sampling inputs, the worker's
override of the sampled id).

Oracles: vLLM's stated semantics (``ThinkingTokenBudgetLogitsProcessor`` and
vllm-project/vllm:tests/v1/logits_processors' budget cases: the reasoning holds at most ``budget``
tokens, then the think-end ids follow; a model-written end before that is left alone; budget 0
puts the end first), the tokenizer's own ids of ``<think>`` / ``</think>``, and the same request
without a budget (greedy: the tokens before the forced one are unchanged).

The in-process scheduler runs the embedded model (its vocabulary holds the markers) with overlap
on and off; the chat route's parse is tested on the shared server (``test_thinking_budget_chat``).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from scheduler_testutil import assert_idle, drain, make_scheduler, submit
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.thinking_budget import NOT_FORCED, ThinkingBudgetState, last_sequence_index

pytestmark = pytest.mark.timeout(300)

S, E = [7], [9]  # one-token markers for the state tests


def test_last_sequence_index() -> None:
    assert last_sequence_index([1, 2, 3, 1, 2], [1, 2]) == 3
    assert last_sequence_index([1, 2, 3], [3, 4]) == -1
    assert last_sequence_index([1, 2], []) == -1
    assert last_sequence_index((1, 1, 1), [1, 1]) == 1  # overlapping, any sequence type


def test_last_sequence_index_vs_brute_force() -> None:
    """Random short id lists over a 3-token alphabet (many partial and overlapping matches)
    against the definition written as a plain scan of every start from the end."""
    import random

    def brute(ids: list[int], seq: list[int]) -> int:
        starts = [i for i in range(len(ids) - len(seq) + 1) if seq and ids[i : i + len(seq)] == seq]
        return starts[-1] if starts else -1

    rng = random.Random(0)
    for _ in range(3000):
        ids = [rng.randrange(3) for _ in range(rng.randrange(12))]
        seq = [rng.randrange(3) for _ in range(rng.randrange(4))]
        assert last_sequence_index(ids, seq) == brute(ids, seq), (ids, seq)


@pytest.mark.parametrize(
    ("prompt", "budget", "start"),
    [
        ([1, 7], 5, 5),  # the prompt ends with <think>: the whole budget is left
        ([1, 7, 3, 4], 5, 3),  # two reasoning tokens already in the prompt
        ([1, 7, 3, 4], 1, 0),  # the prompt's reasoning is over budget: the end comes first
        ([1, 7], 0, 0),
    ],
)
def test_state_starts_where_the_budget_runs_out(prompt: list[int], budget: int, start: int) -> None:
    st = ThinkingBudgetState.for_prompt(prompt, budget, S, E)
    assert st is not None and st.start == start
    outs = [5] * start
    assert [st.forced_token(i, outs[:i]) for i in range(start)] == [NOT_FORCED] * start
    assert st.forced_token(start, outs) == 9
    assert st.forced_token(start + 1, outs + [9]) == NOT_FORCED and st.ended
    assert st.forced_token(start + 2, outs + [9, 5]) == NOT_FORCED  # no new <think>: nothing


@pytest.mark.parametrize(("prompt", "budget"), [([7, 3], None), ([7, 3], -1)])
def test_nothing_bounded(prompt: list[int], budget: int | None) -> None:
    """No budget or -1: no state."""
    assert ThinkingBudgetState.for_prompt(prompt, budget, S, E) is None


@pytest.mark.parametrize("prompt", [[1, 2], [7, 3, 9, 4]])
def test_prompt_outside_the_reasoning_waits_for_a_think_start(prompt: list[int]) -> None:
    """No ``<think>`` in the prompt, or a closed one: nothing is forced until the model writes a
    ``<think>``; then that section is bounded like the prompt's (vLLM's processor creates its
    state for every request with a budget and enters the reasoning at an output think-start)."""
    st = ThinkingBudgetState.for_prompt(prompt, 2, S, E)
    assert st is not None
    outs = [5, 5, 5, 7, 5, 5, 5]
    forced = [st.forced_token(i, outs[:i]) for i in range(4)]
    assert forced == [NOT_FORCED] * 4  # up to and including the <think> itself
    assert st.forced_token(4, outs[:4]) == NOT_FORCED  # budget 2: two reasoning tokens first
    assert st.forced_token(5, outs[:5]) == NOT_FORCED
    assert st.forced_token(6, outs[:6]) == 9


def test_budget_rearms_for_every_reasoning_section() -> None:
    """vLLM's ``ThinkingTokenBudgetLogitsProcessor`` re-enters the reasoning (count 0) when the
    output ends with the think-start ids, after a forced or a model-written end: each section
    holds at most ``budget`` tokens. Oracle: a direct simulation of that rule (count the tokens
    since the last think-start while inside; the end ids follow when the count reaches the
    budget)."""
    budget = 2
    st = ThinkingBudgetState.for_prompt([1, 7], budget, S, E)
    assert st is not None
    # the "model" writes 5s, a <think> (7) whenever it may, and once ends a section itself (9)
    wants = [5, 5, 5, 5, 7, 5, 9, 5, 7, 5, 5, 5, 5, 7, 5, 5]
    outs: list[int] = []
    for i, w in enumerate(wants):
        t = st.forced_token(i, outs)
        outs.append(w if t == NOT_FORCED else t)
    # the oracle: sections and their lengths
    inside, count, expect = True, 0, []
    for w in wants:
        if inside and count == budget:
            expect.append(9)
            inside, count = False, 0
            continue
        expect.append(w)
        if w == 7:
            inside, count = True, 0
        elif w == 9 and inside:
            inside, count = False, 0
        elif inside:
            count += 1
    assert outs == expect, (outs, expect)
    assert outs.count(9) == 3 and outs[2] == outs[11] == 9  # two forced ends, the model's own


def test_zero_budget_outside_a_section_is_decided_on_the_device() -> None:
    """With budget 0 a ``<think>`` just sampled forces the very next token (vLLM's processor
    re-arms at an output think-start with count 0). Outside a section the host does not wait for
    that token: it arms the conditional force "previous token ``<think>`` -> ``</think>``" when
    exactly the previous token is in flight; a known ``<think>`` is forced by the host."""
    st = ThinkingBudgetState.for_prompt([1, 7], 0, S, E)
    assert st is not None and st.forced_token(0, []) == 9
    assert not st.needs_host_history(1, [9]) and not st.needs_host_history(2, [9])
    assert st.forced_token(2, [9]) == NOT_FORCED and st.forced_if_previous(2, [9]) == (7, 9)
    assert st.forced_if_previous(2, [9, 7]) is None  # the previous token is known: the host's
    assert st.forced_token(2, [9, 7]) == 9  # re-armed by the output's <think>
    assert st.forced_if_previous(3, [9, 7]) is None  # the section is open: nothing conditional
    off = ThinkingBudgetState.for_prompt([1, 2], 0, S, E)  # thinking off: no section yet
    assert off is not None and off.forced_if_previous(1, []) == (7, 9)
    assert not any(off.needs_host_history(n, [5] * (n - 1)) for n in range(1, 6))
    two = ThinkingBudgetState.for_prompt([1, 7], 2, S, E)
    assert two is not None and two.forced_token(2, [5, 5]) == 9
    assert two.forced_if_previous(4, [5, 5, 9]) is None  # budget 2: a <think> at 3 cannot force 4
    assert not two.needs_host_history(4, [5, 5, 9])
    assert not two.needs_host_history(5, [5, 5, 9, 7])  # the <think> at 3: start is 6
    assert two.needs_host_history(6, [5, 5, 9, 7, 5])  # index 5 may be the model's own end
    # a two-token think-start: armed only when its first id ends the known outputs
    multi = ThinkingBudgetState.for_prompt([1, 2], 0, [7, 8], [9, 10])
    assert multi is not None
    assert multi.forced_if_previous(3, [5, 7]) == (8, 9)
    assert multi.forced_if_previous(3, [5, 5]) is None and multi.forced_if_previous(1, []) is None
    # the conditional force then fired: the host knows the section and forces the second end id
    assert multi.forced_token(4, [5, 7, 8]) == 10


def test_model_written_end_is_left_alone() -> None:
    st = ThinkingBudgetState.for_prompt([1, 7], 3, S, E)
    assert st is not None
    assert st.forced_token(3, [5, 9, 5]) == NOT_FORCED and st.ended
    assert st.forced_token(4, [5, 9, 5, 5]) == NOT_FORCED


def test_multi_token_end_is_forced_in_order() -> None:
    st = ThinkingBudgetState.for_prompt([1, 7, 8], 2, [7, 8], [9, 10, 11])
    assert st is not None and st.start == 2
    assert [st.forced_token(i, [5, 5, 9, 10][:i]) for i in range(2, 5)] == [9, 10, 11]
    assert st.forced_token(5, [5, 5, 9, 10, 11]) == NOT_FORCED


def test_host_waits_only_before_the_first_forced_token() -> None:
    st = ThinkingBudgetState.for_prompt([1, 7], 4, S, E)
    assert st is not None
    assert [st.needs_host_history(n) for n in range(7)] == [False] * 4 + [True] + [False] * 2
    zero = ThinkingBudgetState.for_prompt([1, 7], 0, S, E)
    assert zero is not None and not zero.needs_host_history(0)


def test_sampling_params_field() -> None:
    assert SamplingParams.from_dict({"thinking_token_budget": 3}).thinking_token_budget == 3
    with pytest.raises(ValueError, match="thinking_token_budget"):
        SamplingParams.from_dict({"thinking_token_budget": -2}).verify()
    with pytest.raises(ValueError, match="thinking_token_budget"):
        SamplingParams.from_dict({"thinking_token_budget": 1.5})


@pytest.fixture(scope="module")
def markers(mtok: Any) -> tuple[int, int]:
    s = mtok.encode("<think>", add_special_tokens=False)
    e = mtok.encode("</think>", add_special_tokens=False)
    assert len(s) == len(e) == 1
    return s[0], e[0]


@pytest.mark.parametrize("overlap", [True, False])
def test_scheduler_forces_think_end(
    default_model_dir: str, mtok: Any, markers: tuple[int, int], overlap: bool
) -> None:
    """Concurrent requests (two prompts, budgets 0, 1, 5, one past ``max_new_tokens`` and none,
    ``n``-style duplicates, a prompt with reasoning already in it and one with a closed
    reasoning): each output is the unbounded output up to the budget, then ``</think>``; the
    forced token counts against ``max_new_tokens``; nothing leaks."""
    start, end = markers
    s = make_scheduler(default_model_dir, disable_overlap_schedule=not overlap)
    p1 = mtok.encode("Why is the sky blue?", add_special_tokens=False) + [start]
    p2 = (
        mtok.encode("Count to ten.", add_special_tokens=False)
        + [start]
        + mtok.encode(" one two", add_special_tokens=False)
    )
    closed = mtok.encode("Hi", add_special_tokens=False) + [start, end]
    n = 8
    cases = {
        "p1-free": (p1, None),
        "p1-0": (p1, 0),
        "p1-1": (p1, 1),
        "p1-5": (p1, 5),
        "p1-5b": (p1, 5),
        "p1-big": (p1, 50),
        "p2-free": (p2, None),
        "p2-5": (p2, 5),
        "closed-free": (closed, None),
        "closed-2": (closed, 2),
    }
    for rid, (ids, budget) in cases.items():
        submit(s, rid, ids, n, sampling=None if budget is None else {"thinking_token_budget": budget})
    res = drain(s)
    in_p2 = len(p2) - (p2.index(start) + 1)
    for rid, (ids, budget) in cases.items():
        out = res[rid]["ids"]
        assert len(out) == n and res[rid]["completion"] == n, (rid, out)
        free = res[rid.split("-")[0] + "-free"]["ids"]
        if budget is None or ids is closed or budget >= n:
            if end not in free[: n if budget is None else budget]:
                assert out == free, rid  # nothing forced (no budget, closed reasoning, over max)
            continue
        k = max(0, budget - (in_p2 if ids is p2 else 0))
        if end in free[:k]:
            assert out == free, rid  # the model ended its reasoning itself
            continue
        assert out[:k] == free[:k] and out[k] == end, (rid, out, free)
    assert res["p1-5"]["ids"] == res["p1-5b"]["ids"]
    assert_idle(s)


def test_scheduler_budget_with_prefix_cache(
    default_model_dir: str, mtok: Any, markers: tuple[int, int]
) -> None:
    """The same prompt twice in turn (the second is a prefix-cache hit) and with ``max_new_tokens``
    equal to the budget + 1: the forced token is the last output both times."""
    start, end = markers
    s = make_scheduler(default_model_dir)
    p = mtok.encode("A long question about caches. " * 60, add_special_tokens=False) + [start]
    for rid in ("a", "b"):
        submit(s, rid, p, 4, sampling={"thinking_token_budget": 3})
        r = drain(s)[rid]
        assert r["ids"][3] == end and len(r["ids"]) == 4, r
    assert r["cached"] > 0
    assert_idle(s)


def test_overlap_decides_with_the_previous_token_known(
    default_model_dir: str, mtok: Any, markers: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With overlap on, the batch that samples the first token the budget may force is built
    after the previous token is on the host (a model-written ``</think>`` just before it must
    cancel the forcing): every decision at ``start`` sees all ``start`` earlier outputs."""
    start, end = markers
    seen: list[tuple[int, int, int]] = []
    real = ThinkingBudgetState.forced_token

    def spy(self: ThinkingBudgetState, index: int, output_ids: Any) -> int:
        seen.append((self.start, index, len(output_ids)))
        return real(self, index, output_ids)

    monkeypatch.setattr(ThinkingBudgetState, "forced_token", spy)
    s = make_scheduler(default_model_dir)
    p = mtok.encode("Why is the sky blue?", add_special_tokens=False) + [start]
    for i, budget in enumerate((1, 2, 4)):
        submit(s, f"r{i}", p, 6, sampling={"thinking_token_budget": budget})
    res = drain(s)
    at_start = [(st, i, k) for st, i, k in seen if i == st]
    assert len(at_start) >= 3 and all(k == i for _, i, k in at_start), seen
    assert all(res[f"r{i}"]["ids"][b] == end for i, b in enumerate((1, 2, 4)))


@pytest.mark.parametrize("overlap", [True, False])
def test_grammar_wins_over_the_forced_end(
    default_model_dir: str, mtok: Any, markers: tuple[int, int], overlap: bool
) -> None:
    """A grammar applied from the first token (``/generate`` with a ``regex`` on a prompt that
    ends with ``<think>``) never allows ``</think>``: the budget must not force it (it would abort
    the request with the grammar's 500); the output follows the grammar. A grammar that allows
    the end still gets it forced. Oracle: the regex itself (Python's ``re``) and the tokenizer's
    ids."""
    import re

    start, end = markers
    s = make_scheduler(default_model_dir, disable_overlap_schedule=not overlap)
    if s.grammar_backend is None:
        pytest.skip("constrained decoding unavailable")
    p = mtok.encode("Why is the sky blue?", add_special_tokens=False) + [start]
    regex = "[a-z]{4,12}"
    submit(s, "strict", p, 8, ignore_eos=False, sampling={"regex": regex, "thinking_token_budget": 1})
    free = "(.|\\n)*"  # any text: </think> included
    submit(s, "free", p, 4, sampling={"regex": free, "thinking_token_budget": 1})
    res = drain(s)
    strict = res["strict"]
    assert strict["finish"]["type"] != "abort", strict["finish"]
    assert end not in strict["ids"]
    text = mtok.decode([t for t in strict["ids"] if t not in s.eos_ids])
    assert re.fullmatch(regex, text), text
    assert res["free"]["ids"][1] == end, res["free"]
    assert_idle(s)


def test_forced_end_wins_over_vocabulary_constraints(
    default_model_dir: str, mtok: Any, markers: tuple[int, int]
) -> None:
    """``allowed_token_ids`` without ``</think>``, ``</think>`` as a bad word, or a -100 bias on
    it: the budget still forces it, as vLLM's sampler does (it masks the allowed ids and the bad
    words, then its ``ThinkingTokenBudgetLogitsProcessor`` sets every logit of the row but the
    forced id's to -inf). The other tokens keep the constraint. Oracle: vLLM's stated order and
    the tokenizer's ids of the markers."""
    start, end = markers
    s = make_scheduler(default_model_dir)
    p = mtok.encode("Why is the sky blue?", add_special_tokens=False) + [start]
    submit(s, "free", p, 6)
    allowed = sorted(set(drain(s)["free"]["ids"]) - {end})
    cases = {
        "allowed": {"allowed_token_ids": allowed},
        "bad": {"bad_words_ids": [[end]]},
        "bias": {"logit_bias": {str(end): -100.0}},
    }
    for rid, extra in cases.items():
        submit(s, rid, p, 6, sampling={"thinking_token_budget": 2, **extra}, return_logprob=True)
    res = drain(s)
    for rid in cases:
        ids = res[rid]["ids"]
        assert ids[2] == end and end not in ids[:2], (rid, ids)
    assert set(res["allowed"]["ids"]) - {end} <= set(allowed)
    # the forced token's logprob is the model's, not the masked -inf: a cold run's prompt logprob
    # of </think> after the same tokens (the prefill's own log-softmax); the finite bias stays in
    # it, as in every sampled token's: log_softmax of z with z[end] - 100, from that logprob q
    # (float64: q - 100 - log(1 - e^q + e^(q - 100)))
    ids = res["allowed"]["ids"]
    submit(s, "cold", p + ids[:3], 1, return_logprob=True, logprob_start_len=0)
    want = drain(s)["cold"]["in_lp"][-1]
    biased = want - 100.0 - math.log1p(-math.exp(want) + math.exp(want - 100.0))
    for rid in cases:
        w = biased if rid == "bias" else want
        assert res[rid]["lp"][2] == pytest.approx(w, abs=1e-4), (rid, res[rid]["lp"])
    assert_idle(s)


def _write_think_at(monkeypatch: pytest.MonkeyPatch, start: int, end: int, at: set[int]) -> None:
    """The model worker's sampler, with a model that writes ``<think>`` at output indices ``at``
    (the rows of requests with ``thinking_token_budget`` 0) and, for requests without a budget,
    the expected result of vLLM's rule written by hand: ``<think>`` at ``at`` and ``</think>``
    right after each. Every other id is the real sampler's."""
    import sglang_v4.managers.tp_worker as tp_worker

    real = tp_worker.sample

    def fake(*args: Any, **kw: Any) -> Any:
        out = real(*args, **kw)
        ids = (out[0] if isinstance(out, tuple) else out).clone()
        for j, (p, n) in enumerate(zip(args[1], kw["output_lens"])):
            if p.thinking_token_budget == 0 and n in at:
                ids[j] = start
            elif p.thinking_token_budget is None and (n in at or n - 1 in at):
                ids[j] = start if n in at else end
        return (ids, out[1]) if isinstance(out, tuple) else ids

    monkeypatch.setattr(tp_worker, "sample", fake)


@pytest.mark.parametrize("overlap", [True, False])
def test_zero_budget_after_the_reasoning_keeps_overlap(
    default_model_dir: str,
    mtok: Any,
    markers: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
    overlap: bool,
) -> None:
    """Budget 0 on prompts whose reasoning is closed or absent, with a model that writes
    ``<think>`` mid-answer (output indices 3 and 7): each is followed by a forced ``</think>``,
    and no step waits for the previous result (``ScheduleBatch.needs_host_history`` stays False
    for every batch: the ``<think>`` is still in flight when the next batch is built, so with
    overlap the forcing is decided on the device). Oracle: the same prompts without a budget,
    with vLLM's rule (``</think>`` right after each ``<think>`` under budget 0) applied by hand;
    the outputs are the same with overlap on and off."""
    from sglang_v4.managers.scheduler import Scheduler

    start, end = markers
    at = {3, 7}
    _write_think_at(monkeypatch, start, end, at)
    waits: list[bool] = []
    real_launch = Scheduler._launch

    def launch(self: Scheduler, batch: Any) -> None:
        real_launch(self, batch)
        waits.append(batch.needs_host_history)

    monkeypatch.setattr(Scheduler, "_launch", launch)
    s = make_scheduler(default_model_dir, disable_overlap_schedule=not overlap)
    closed = mtok.encode("Hi", add_special_tokens=False) + [start, end]
    plain = mtok.encode("Tell me a story.", add_special_tokens=False)
    n = 10
    for name, ids in (("closed", closed), ("plain", plain)):
        submit(s, f"{name}-0", ids, n, sampling={"thinking_token_budget": 0})
        submit(s, f"{name}-want", ids, n)
    res = drain(s)
    assert waits and not any(waits), waits
    for name in ("closed", "plain"):
        got, want = res[f"{name}-0"]["ids"], res[f"{name}-want"]["ids"]
        assert [i for i, t in enumerate(want) if t == start] == [3, 7], want  # the model's own
        assert [i for i, t in enumerate(want) if t == end] == [4, 8], want
        assert got == want, (name, got, want)
    if overlap:  # the same outputs without overlap (outputs only: the batches are the same)
        s2 = make_scheduler(default_model_dir, disable_overlap_schedule=True)
        for name, ids in (("closed", closed), ("plain", plain)):
            submit(s2, f"{name}-0", ids, n, sampling={"thinking_token_budget": 0})
        res2 = drain(s2)
        assert all(res2[f"{k}-0"]["ids"] == res[f"{k}-0"]["ids"] for k in ("closed", "plain"))
        assert_idle(s2)
    assert_idle(s)


def test_forced_logprob_uses_the_request_temperature(
    default_model_dir: str,
    mtok: Any,
    markers: tuple[int, int],
    hf_default_model: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At temperature 0.5 a forced ``</think>``'s logprob follows the rule of the other tokens of
    the same response (SGLang's output logprobs: ``log_softmax((logits + logit_bias) / T)``): the
    finite ``logit_bias`` of -100 on ``</think>`` is in it (it was dropped with the masks before),
    forced by the host (budget 2 in the prompt's reasoning) and on the device (budget 0, a
    ``<think>`` written at index 3 with overlap on). Oracle: HF transformers' float32 logits of the
    same checkpoint after the same tokens, biased and ``log_softmax``-ed in float64, for every
    token of each response (forced or sampled)."""
    import torch

    start, end = markers
    _write_think_at(monkeypatch, start, end, {3})
    s = make_scheduler(default_model_dir)
    p = mtok.encode("Why is the sky blue?", add_special_tokens=False) + [start]
    closed = mtok.encode("Hi", add_special_tokens=False) + [start, end]
    T = 0.5
    common = {"temperature": T, "sampling_seed": 11, "logit_bias": {str(end): -100.0}}
    submit(s, "host", p, 4, sampling={"thinking_token_budget": 2, **common}, return_logprob=True)
    submit(s, "device", closed, 6, sampling={"thinking_token_budget": 0, **common}, return_logprob=True)
    res = drain(s)
    for rid, prompt, k in (("host", p, 2), ("device", closed, 4)):
        ids, lp = res[rid]["ids"], res[rid]["lp"]
        assert ids[k] == end, (rid, ids)
        with torch.no_grad():
            zs = hf_default_model(torch.tensor([prompt + ids])).logits[0].double()
        for i, tok in enumerate(ids):
            z = zs[len(prompt) + i - 1].clone()
            z[end] -= 100.0
            want = torch.log_softmax(z / T, dim=-1)[tok].item()
            assert lp[i] == pytest.approx(want, abs=2e-4), (rid, i, lp[i], want)
        assert lp[k] < -150.0  # the bias is in the forced token's logprob
    assert_idle(s)


def test_unconstrained_logprobs_vs_float64_reference() -> None:
    """A forced row's logprobs: the repetition penalty (CTRL's rule: ``z / r`` where ``z > 0``,
    ``z * r`` elsewhere, on tokens of the prompt and output), the finite logit bias and the
    temperature apply, as for a sampled token; the allowlist, bad words and ``min_new_tokens``
    masks do not. Oracle: that formula written in float64; and :func:`sample`'s own logprobs for
    the same row without the masks (bias kept)."""
    import torch
    from sglang_v4.sampling.sampler import sample, unconstrained_logprobs

    g = torch.Generator().manual_seed(0)
    z = torch.randn(2, 16, generator=g)
    base = {"temperature": 0.5, "repetition_penalty": 1.3}
    masks = {
        "allowed_token_ids": [1, 2],
        "bad_words_ids": [[3]],
        "logit_bias": {"4": -100.0},
        "min_new_tokens": 5,
    }
    params = [SamplingParams.from_dict({**base, **masks}), SamplingParams.from_dict({"temperature": 0})]
    for p in params:
        p.normalize(None)
    outs, prompts = [[3, 5], [6]], [[4], [7]]
    got = unconstrained_logprobs(z, params, outs, prompts)
    zz = z.double().clone()
    seen = sorted(set(outs[0] + prompts[0]))
    zz[0, seen] = torch.where(zz[0, seen] > 0, zz[0, seen] / 1.3, zz[0, seen] * 1.3)
    zz[0, 4] -= 100.0
    want = torch.stack([torch.log_softmax(zz[0] / 0.5, -1), torch.log_softmax(zz[1], -1)])
    assert torch.allclose(got.double(), want, atol=1e-5)
    plain = [SamplingParams.from_dict({**base, "logit_bias": masks["logit_bias"]}), params[1]]
    plain[0].normalize(None)
    _, lps = sample(z, plain, outs, prompts, eos_token_ids=[0], return_logprobs=True)
    assert torch.equal(got, lps)

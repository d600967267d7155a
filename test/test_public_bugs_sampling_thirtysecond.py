"""A thirty-second set of public reports on sampling parameters, replayed on the in-process
``Scheduler``: ``logit_bias`` of +100 on two tokens confining sampling to them, and one request's
bias leaving its batch neighbours alone; frequency / presence penalties steering greedy decoding
(counted over output tokens only); the repetition penalty seeing the whole prompt when part of
it comes from the prefix cache or from several prefill chunks; seeded sampling on a prefix-cache
hit; greedy rows batched with sampled ones; a tiny temperature as the greedy limit; and
``temperature: 0`` reporting untempered logprobs. Each test names its report. All pass on the
current code: no fault was found in these scenarios.

Fixture: the in-process ``Scheduler`` on the random test checkpoint (``sched_model_dir``,
vocabulary 1000, 256-token pages), one built with 128-token prefill chunks. Oracles: the OpenAI
definition of the penalties written as the ``logit_bias`` a client would send for each single
step (one-token greedy runs over each teacher-forced prefix), cold runs on a flushed cache, the prompt logprobs of a cold
run over prompt plus output (``log_softmax`` of the raw logits), and the ranges the reports state.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

PROMPT = random_ids(40, seed=3202)
LONG = random_ids(300, seed=3203)  # a full page plus a tail: a prefix-cache hit of 256 tokens


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir)


@pytest.fixture(scope="module")
def chunked(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir, chunked_prefill_size=128)


def _run(
    s: Scheduler, rid: str, ids: list[int], n: int, sampling: dict[str, Any] | None = None, **kw: Any
) -> dict:
    submit(s, rid, ids, n, sampling=sampling, **kw)
    return drain(s)[rid]


def _cold(
    s: Scheduler, rid: str, ids: list[int], n: int, sampling: dict[str, Any] | None = None
) -> list[int]:
    """``ids`` alone on a flushed cache (``n`` new tokens, greedy unless ``sampling`` says)."""
    assert s.flush_cache()
    out = _run(s, rid, ids, n, sampling)["ids"]
    assert s.flush_cache()
    return out


# --------------------------------------------------------------------------- logit_bias


def test_gpt_prompt_engineer_14_plus_100_on_two_tokens_confines_sampling_to_them(sched: Scheduler) -> None:
    """mshumer/gpt-prompt-engineer#14: ``logit_bias`` of +100 on the tokens of 'A' and 'B' was
    thought to make the choice random; per the OpenAI reference a bias of 100 makes a token all
    but certain, so sampling at ``temperature: 1`` keeps to exactly those two tokens (the random
    model's logits span a few units, far below 100), and the two share the mass as the model's
    own logits say (both are drawn over 24 seeded tokens)."""
    a, b = 17, 803
    out = _run(
        sched,
        "ab",
        PROMPT,
        24,
        {"temperature": 1.0, "logit_bias": {str(a): 100, str(b): 100}, "sampling_seed": 14},
    )
    assert set(out["ids"]) == {a, b}, out["ids"]
    assert len(out["ids"]) == 24


def test_sglang_3187_one_requests_bias_leaves_its_batch_neighbour_alone(sched: Scheduler) -> None:
    """sgl-project/sglang#3187 (adding ``logit_bias``; the review asked that one request's bias
    never reach another request of the same batch): a request biased to -100 on its own greedy
    tokens and an unbiased one run together; the unbiased one equals its cold run, the biased one
    never emits a banned token."""
    other = random_ids(40, seed=3187)
    plain = _cold(sched, "plain", other, 6)
    banned = _cold(sched, "mine", PROMPT, 6)
    bias = {str(t): -100 for t in banned}
    submit(sched, "biased", PROMPT, 6, sampling={"logit_bias": bias})
    submit(sched, "neighbour", other, 6)
    res = drain(sched)
    assert res["neighbour"]["ids"] == plain
    assert not set(res["biased"]["ids"]) & set(banned), res["biased"]["ids"]
    assert sched.flush_cache()


# --------------------------------------------------------------------------- penalties under greedy


def test_tensai_244_and_lmdeploy_4852_penalties_steer_greedy_over_output_tokens(sched: Scheduler) -> None:
    """mattn/tensai#244 (the OpenAI frequency / presence penalties must act before sampling, so
    greedy decoding is steered too) and InternLM/lmdeploy#4852 (they count generated tokens
    only, never the prompt). Oracle: step ``k`` of the penalised greedy run equals a cold
    one-token greedy run over the prompt plus the first ``k`` outputs (all steps in one batch)
    carrying the penalty as the
    ``logit_bias`` a client would send, ``-(f * count(t) + p)`` for each token already
    generated (prompt tokens unbiased)."""
    f, p = 0.8, 1.2
    n = 16  # the unpenalised greedy output repeats two tokens at steps 14 and 15
    got = _run(sched, f"pen{f}{p}", PROMPT, n, {"frequency_penalty": f, "presence_penalty": p})["ids"]
    assert sched.flush_cache()
    for k in range(n):  # teacher-forced: every step is one independent cold request
        bias = {str(t): -(f * c + p) for t, c in Counter(got[:k]).items()}
        submit(sched, f"step{k}", PROMPT + got[:k], 1, sampling={"logit_bias": bias} if bias else None)
    steps = drain(sched)
    assert sched.flush_cache()
    assert got == [steps[f"step{k}"]["ids"][0] for k in range(n)]
    assert _cold(sched, "unpenalised", PROMPT, n) != got  # the penalty changes this output


# --------------------------------------------------------------------------- prefix cache / chunks


def test_llama_cpp_8971_repetition_penalty_sees_the_cached_prompt(chunked: Scheduler) -> None:
    """ggml-org/llama.cpp#8971 (with prompt caching, only the uncached part of the prompt and the
    new tokens were penalised) and lmstudio-ai/mlx-engine#147 / jundot/omlx#960 (the penalty
    state was not restored from the cached prefix). A 300-token prompt whose first 256 tokens
    come from the prefix cache and the rest prefilled in 128-token chunks
    gives the same ``repetition_penalty`` output as a cold run on a flushed cache; the penalty
    changes that output (checked against an unpenalised cold run)."""
    s = chunked
    pen = {"repetition_penalty": 2.0}
    cold = _cold(s, "cold", LONG, 8, pen)
    assert cold != _cold(s, "plain", LONG, 8)
    _run(s, "warm", LONG, 1)  # fills the prefix cache
    hit = _run(s, "hit", LONG, 8, pen)
    assert hit["cached"] == 256
    assert hit["ids"] == cold
    assert s.flush_cache()


def test_vllm_5543_seeded_sampling_on_a_prefix_cache_hit_equals_the_cold_run(chunked: Scheduler) -> None:
    """vllm-project/vllm#5543 (prefix caching gave inconsistent completions) and kekzl/imp#536
    (a prefix-cache hit diverged from a fresh prefill): a seeded ``temperature: 1`` request with
    ``top_p`` / ``min_p`` on a 256-token cache hit, prefilled in chunks, draws the same tokens as
    the same request cold."""
    sampling = {"temperature": 1.0, "top_p": 0.9, "min_p": 0.02, "sampling_seed": 5543}
    cold = _cold(chunked, "cold", LONG, 12, sampling)
    _run(chunked, "warm", LONG, 1)
    hit = _run(chunked, "hit", LONG, 12, sampling)
    assert hit["cached"] == 256
    assert hit["ids"] == cold
    assert chunked.flush_cache()


# --------------------------------------------------------------------------- temperature 0 / tiny


def test_sglang_23296_greedy_rows_in_a_sampled_batch_stay_greedy(sched: Scheduler) -> None:
    """sgl-project/sglang#23296: in a batch that was not all greedy, rows with ``temperature: 0``
    were divided by 0 (NaN) instead of taking the greedy path. A greedy request batched with two
    seeded ``temperature: 1.5`` requests equals its cold greedy run, and each seeded request
    equals its own cold run alone (the batch changes no row)."""
    sampled = {"temperature": 1.5, "top_k": 50}
    seeds = {"s1": 231, "s2": 232}
    cold_greedy = _cold(sched, "g", PROMPT, 8)
    cold_sampled = {k: _cold(sched, k, PROMPT, 8, {**sampled, "sampling_seed": v}) for k, v in seeds.items()}
    submit(sched, "greedy", PROMPT, 8)
    for k, v in seeds.items():
        submit(sched, k, PROMPT, 8, sampling={**sampled, "sampling_seed": v})
    res = drain(sched)
    assert sched.flush_cache()
    assert res["greedy"]["ids"] == cold_greedy
    for k in seeds:
        assert res[k]["ids"] == cold_sampled[k], k
    assert cold_sampled["s1"] != cold_greedy  # the sampled rows really are sampled


def test_nano_vllm_249_a_tiny_temperature_is_the_greedy_limit(sched: Scheduler) -> None:
    """GeeeekExplorer/nano-vllm#249 and guidance-ai/guidance#1335 (a temperature near 0 must act
    as the ``T -> 0`` limit of sampling, greedy argmax, never overflow to NaN / token 0): a seeded
    request at ``temperature: 1e-5`` (above the greedy cut, so it is sampled) gives the
    greedy output; the random model's top-two logit gaps are far above ``T * 40``, where the
    runner-up's probability falls below ``e**-40``."""
    temperature = 1e-5
    greedy = _cold(sched, "greedy", PROMPT, 8)
    tiny = _cold(sched, "tiny", PROMPT, 8, {"temperature": temperature, "sampling_seed": 249})
    assert tiny == greedy


def test_slime_2197_temperature_zero_reports_untempered_logprobs(sched: Scheduler) -> None:
    """THUDM/slime#2197: ``temperature: 0`` is greedy selection whose logprobs are the model's
    untempered ``log_softmax`` (SGLang's behaviour; dividing by 0 is not defined). Oracle: the
    prompt logprobs of a cold run over prompt plus the greedy output are those same values,
    position by position."""
    out = _run(sched, "t0", PROMPT, 5, return_logprob=True)
    assert sched.flush_cache()
    ids = out["ids"]
    ref = _run(sched, "ref", PROMPT + ids, 1, return_logprob=True, logprob_start_len=0)
    assert sched.flush_cache()
    # in_lp[i] is the logprob of token i given the tokens before it (None for token 0)
    assert len(ref["in_lp"]) == len(PROMPT) + len(ids) and ref["in_lp"][0] is None
    want = ref["in_lp"][len(PROMPT) :]
    assert len(want) == len(ids) == len(out["lp"])
    for got, w in zip(out["lp"], want):
        assert got == pytest.approx(w, abs=1e-4)
        assert got < 0.0

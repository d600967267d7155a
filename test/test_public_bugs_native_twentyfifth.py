"""The twenty-fifth set of public bug reports on SGLang's native ``/generate`` sampling parameters
(repetition / frequency / presence penalties, the order of temperature against ``top_p`` and
``min_p``, ``min_new_tokens`` against every stop id, one logprob per output token, ``n`` with a
seed), replayed against sglang-v4. Each test names its report.

Fixtures: the in-process ``Scheduler`` on the random test checkpoint (``sched_model_dir``,
vocabulary 1000, EOS id 1) and direct calls of ``apply_penalties`` / ``sample``. Oracles: float64
references of the OpenAI / CTRL penalty formulas, transformers' ``RepetitionPenaltyLogitsProcessor``,
``TemperatureLogitsWarper``, ``TopPLogitsWarper`` and ``MinPLogitsWarper``, an unpenalised run of
the same request (whose full-vocabulary logprobs the float64 reference penalises), SGLang
0.5.23's own torch top-k / top-p filter (compiled from the installed source by
``sglang_source_testutil``), the documented SGLang / vLLM rules, and cold single requests. Every
report here showed no fault in sglang-v4; the tests are kept as regression guards.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from scheduler_testutil import drain, make_scheduler, submit
from sglang_source_testutil import sglang_function
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.managers.scheduler import Scheduler
from sglang_v4.sampling.penalties import apply_penalties
from sglang_v4.sampling.sampler import sample
from sglang_v4.sampling.sampling_params import SamplingParams
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

pytestmark = pytest.mark.timeout(300)
PROMPT = [5, 17, 256, 99, 42, 311, 7, 64]
VOCAB = 1000  # the test checkpoint's vocabulary
EOS = 1  # the test checkpoint's eos_token_id
FORCED = 123  # a token forced with a large logit bias (not EOS, not in PROMPT)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    """An in-process CPU scheduler on the random test checkpoint."""
    return make_scheduler(sched_model_dir)


def _params(**kw: Any) -> SamplingParams:
    """Normalised ``SamplingParams`` of ``kw``."""
    p = SamplingParams(**kw)
    p.normalize(None)
    return p


def _log_softmax64(row: list[float]) -> list[float]:
    """Float64 ``log_softmax`` of a row (``-inf`` entries allowed, at least one finite)."""
    m = max(row)
    s = math.fsum(math.exp(x - m) for x in row if x != -math.inf)
    return [x - m - math.log(s) for x in row]


def _run_full_logprobs(s: Scheduler, reqs: dict[str, dict[str, Any]], n: int) -> dict[str, dict[str, Any]]:
    """Run greedy requests (``rid -> sampling params``) on ``PROMPT`` in one batch with the
    logprobs of the whole vocabulary at every step; per rid ``ids`` and ``full`` (one ``[V]``
    list per step, indexed by token id)."""
    for rid, sp in reqs.items():
        submit(s, rid, PROMPT, n, sampling=sp, return_logprob=True, top_logprobs_num=VOCAB)
    res: dict[str, dict[str, Any]] = {}
    while s.has_work():
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            r = res.setdefault(rid, {"ids": [], "full": []})
            r["ids"] += out.output_ids[i]
            for vals, idx in zip(out.output_top_logprobs_val[i], out.output_top_logprobs_idx[i]):
                row = [math.nan] * VOCAB
                for v, t in zip(vals, idx):
                    row[t] = v
                assert not any(math.isnan(x) for x in row)
                r["full"].append(row)
    return res


# --------------------------------------------------------------------------- penalties
@pytest.mark.parametrize(("freq", "pres"), [(1.5, 0.0), (0.0, 0.75), (0.6, 0.4), (-0.5, -0.25)])
def test_rapid_mlx_470_frequency_and_presence_penalties_act_once_per_step(
    sched: Scheduler, freq: float, pres: float
) -> None:
    """raullenchai/Rapid-MLX#470 (``frequency_penalty: 2.0`` had no observable effect: the
    parameter was accepted but never reached the sampler) and EricLBuehler/mistral.rs#158
    (presence / frequency penalty broken). Expected, OpenAI's definition: at step ``k`` of a
    request that emitted token ``X`` ``k`` times, ``X``'s logit drops by exactly
    ``freq * k + pres * [k > 0]`` and nothing else changes (prompt tokens are not counted). Oracle:
    the unpenalised run of the same request in the same batch (both emit the forced ``X`` every
    step, so the raw logits agree), penalised in float64 and renormalised, against the penalised
    request's full-vocabulary logprobs."""
    bias = {str(FORCED): 60.0}
    res = _run_full_logprobs(
        sched,
        {
            "plain": {"logit_bias": bias},
            "pen": {"logit_bias": bias, "frequency_penalty": freq, "presence_penalty": pres},
        },
        5,
    )
    assert res["plain"]["ids"] == res["pen"]["ids"] == [FORCED] * 5
    for k, (raw, got) in enumerate(zip(res["plain"]["full"], res["pen"]["full"])):
        cut = freq * k + (pres if k > 0 else 0.0)
        want = _log_softmax64([x - (cut if t == FORCED else 0.0) for t, x in enumerate(raw)])
        assert got == pytest.approx(want, abs=2e-4), k


def _ref_penalties(
    row: list[float], prompt: list[int], output: list[int], rep: float, freq: float, pres: float
) -> list[float]:
    """Float64 reference: CTRL repetition over the distinct prompt+output ids (``z / r`` for
    ``z > 0``, else ``z * r``; once per id whatever its count), then OpenAI's
    ``z -= freq * count_out + pres * [count_out > 0]`` over the output ids only."""
    z = list(row)
    for t in set(prompt) | set(output):
        z[t] = z[t] / rep if z[t] > 0 else z[t] * rep
    for t in set(output):
        z[t] -= freq * output.count(t) + pres
    return z


def test_xllm_449_presence_frequency_count_output_only_repetition_counts_nothing() -> None:
    """xLLM-AI/xllm#449: ``presence_penalty`` and ``frequency_penalty`` apply to the generated
    tokens only, with their occurrence counts, while ``repetition_penalty`` covers prompt and
    generated tokens and ignores how often they occur. Expected: ``apply_penalties`` on rows of
    mixed-sign logits equals the float64 reference of those rules, for a token seen only in the
    prompt, only in the output (once and three times), in both, and for a row with no penalty in
    the same batch."""
    g = torch.Generator().manual_seed(25)
    logits = (torch.randn(3, 40, generator=g, dtype=torch.float64) * 3).to(torch.float32)
    prompt = [[2, 5, 5, 9, 11], [3, 4, 30], [2, 5]]
    output = [[9, 9, 9, 14, 20], [4, 4, 31, 31, 31, 39], [9]]
    params = [
        _params(repetition_penalty=1.3, frequency_penalty=0.7, presence_penalty=0.4),
        _params(repetition_penalty=0.8, frequency_penalty=-0.3, presence_penalty=1.1),
        _params(),
    ]
    rows = logits.double().tolist()
    got = apply_penalties(logits.clone(), params, output, prompt).double().tolist()
    for i, p in enumerate(params):
        want = _ref_penalties(
            rows[i], prompt[i], output[i], p.repetition_penalty, p.frequency_penalty, p.presence_penalty
        )
        assert got[i] == pytest.approx(want, rel=1e-6, abs=1e-5), i


@pytest.mark.parametrize("penalty", [1.5, 0.7])
def test_higgs_32_repetition_penalty_pushes_negative_logits_down(penalty: float) -> None:
    """panbanda/higgs#32: the repetition penalty divided every seen token's logit by the penalty,
    so a negative logit moved towards 0 and the seen token became *more* likely. Expected:
    ``apply_penalties`` equals transformers' ``RepetitionPenaltyLogitsProcessor`` over the
    prompt+output ids (divide a positive logit, multiply a negative one; a penalty below 1
    rewards), and every seen token's probability drops for ``penalty > 1``."""
    z = torch.tensor([[2.0, -1.5, 0.0, -3.0, 0.5, 1.0, -0.25, 4.0]])
    prompt, output = [1, 3], [0, 6, 1]
    seen = sorted(set(prompt) | set(output))
    want = RepetitionPenaltyLogitsProcessor(penalty)(torch.tensor([prompt + output]), z.clone())
    got = apply_penalties(z.clone(), [_params(repetition_penalty=penalty)], [output], [prompt])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    for t in seen:
        if z[0, t] != 0:
            assert (got[0, t] < z[0, t]) == (penalty > 1), t


def test_sglang_omni_1360_repetition_penalty_is_applied_once() -> None:
    """sgl-project/sglang-omni#1360: ``repetition_penalty`` was applied twice (once by the model
    runner, once by the penaliser), squaring the effective penalty. Expected: the greedy token and
    the returned logprobs of ``sample`` equal ``log_softmax`` of transformers'
    ``RepetitionPenaltyLogitsProcessor`` applied once; a double application (the report's fault)
    gives a different token on this row."""
    z = torch.tensor([[3.0, 2.4, 1.0, -0.5, 2.0]])
    hist = [0, 1]
    once = RepetitionPenaltyLogitsProcessor(1.3)(torch.tensor([hist]), z.clone())
    twice = RepetitionPenaltyLogitsProcessor(1.3)(torch.tensor([hist]), once.clone())
    assert int(once.argmax()) != int(twice.argmax())  # the row tells the two apart
    ids, lps = sample(
        z, [_params(temperature=0.0, repetition_penalty=1.3)], [[1]], [[0]], return_logprobs=True
    )
    assert ids.tolist() == [int(once.argmax())]
    want = _log_softmax64(once[0].double().tolist())
    assert lps[0].double().tolist() == pytest.approx(want, abs=1e-6)


# --------------------------------------------------------------------------- temperature order
def _hf_kept(row: list[float], temperature: float, warper: Any) -> set[int]:
    """Token ids left finite by transformers' temperature warper followed by ``warper``."""
    scores = TemperatureLogitsWarper(temperature)(None, torch.tensor([row], dtype=torch.float64))
    out = warper(None, scores)
    return {i for i, v in enumerate(out[0].tolist()) if v != -math.inf}


def _drawn(row: list[float], p: SamplingParams, draws: int) -> set[int]:
    """The tokens ``sample`` draws from ``row`` over ``draws`` seeded draws."""
    logits = torch.tensor([row])
    return {
        int(sample(logits, [p], [[]], generators=[torch.Generator().manual_seed(s)])[0]) for s in range(draws)
    }


@pytest.mark.parametrize(("temperature", "top_p"), [(0.5, 0.8), (1.0, 0.8), (2.0, 0.8), (0.5, 0.95)])
def test_camelid_534_temperature_scales_before_top_p(temperature: float, top_p: float) -> None:
    """timtoole02/Camelid#534 and lablup/mlxcel#1379: the order of temperature against the
    top-p cut decides which tokens may be drawn (llama.cpp applies temperature last; for logits
    ``[3, 2, 1]``, ``T = 0.5``, ``top_p = 0.8`` the orders keep ``{0}`` or ``{0, 1}``).
    SGLang's rule, like transformers' and vLLM's, divides by the temperature first and cuts the
    tempered distribution. Expected: over 300 seeded draws the drawn set equals what
    transformers' ``TemperatureLogitsWarper`` + ``TopPLogitsWarper`` keep."""
    row = [3.0, 2.0, 1.0]
    want = _hf_kept(row, temperature, TopPLogitsWarper(top_p))
    assert _drawn(row, _params(temperature=temperature, top_p=top_p), 300) == want


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_vllm_metal_728_min_p_cuts_the_tempered_distribution(temperature: float) -> None:
    """vllm-project/vllm-metal#728 (``min_p`` applied to the raw logits before the sampler, so a
    request with ``temperature != 1`` drew from the wrong candidate set; vLLM applies it after the
    temperature). Expected: over 300 seeded draws the drawn set equals what transformers'
    ``TemperatureLogitsWarper`` + ``MinPLogitsWarper`` keep: ``{0}``, ``{0, 1}`` and
    ``{0, 1, 2}`` for ``T = 0.5, 1, 2`` on this row with ``min_p = 0.3``."""
    row = [2.0, 1.0, 0.0, -0.5]
    want = _hf_kept(row, temperature, MinPLogitsWarper(0.3))
    assert len(want) == {0.5: 1, 1.0: 2, 2.0: 3}[temperature]  # the three temperatures differ
    assert _drawn(row, _params(temperature=temperature, min_p=0.3), 300) == want


def test_koboldcpp_2138_min_p_never_draws_below_its_threshold() -> None:
    """LostRuins/koboldcpp#2138: with ``min_p = 0.2`` (all else off) tokens far below 0.2x the top
    token's probability were drawn. Expected: over 400 seeded draws from a 64-token row every
    drawn token has float64 probability ``>= 0.2 * p_max``, and the drawn set is exactly the
    tokens above that threshold."""
    g = torch.Generator().manual_seed(2138)
    row = (torch.randn(64, generator=g, dtype=torch.float64) * 1.5).tolist()
    m = max(row)
    p = [math.exp(x - m) for x in row]
    kept = {i for i, x in enumerate(p) if x >= 0.2 * max(p)}
    assert 2 <= len(kept) < 64
    assert _drawn(row, _params(temperature=1.0, min_p=0.2), 400) == kept


def _sglang_kept(probs: list[float], top_k: int, top_p: float) -> set[int]:
    """The tokens SGLang 0.5.23's own torch filter (``top_k_top_p_min_p_sampling_from_probs_torch``
    of ``srt/layers/sampler.py``, compiled from the installed source) keeps."""
    fn = sglang_function(
        "srt/layers/sampler.py",
        "top_k_top_p_min_p_sampling_from_probs_torch",
        {"torch": torch, "Optional": Any},
    )
    t = torch.tensor([probs], dtype=torch.float32)
    ks, tps, mps = torch.tensor([top_k]), torch.tensor([top_p]), torch.tensor([0.0])
    _, kept, idx, _ = fn(t, ks, tps, mps, False, None, None, return_filtered_probs=True)
    row = torch.zeros_like(t).scatter_(1, idx.long(), kept)[0]
    return {i for i, v in enumerate(row.tolist()) if v > 0}


@pytest.mark.parametrize(
    ("top_k", "top_p", "want"), [(3, 0.75, {0, 1, 2}), (3, 0.65, {0, 1}), (2, 0.95, {0, 1})]
)
def test_gpt_neox_1250_top_p_measures_the_mass_before_top_k(top_k: int, top_p: float, want: set[int]) -> None:
    """EleutherAI/gpt-neox#1250: with both filters on, top-p was measured on the top-k tokens
    renormalised, so a large ``top_p`` beside a small ``top_k`` still dropped tokens; the report
    expects top-p to read the probabilities before top-k (a large ``top_p`` then has no effect),
    which is SGLang's rule (the exclusive running sum of the unfiltered sorted probabilities).
    Expected, on probabilities ``[0.4, 0.3, 0.2, 0.1]``: ``top_k=3, top_p=0.75`` keeps the three
    (renormalised, token 2's preceding mass is 0.78 and it would go); 300 seeded draws give
    exactly the set that SGLang's own filter keeps, and the report's expectation."""
    probs = [0.4, 0.3, 0.2, 0.1]
    assert _sglang_kept(probs, top_k, top_p) == want
    row = [math.log(x) for x in probs]
    assert _drawn(row, _params(temperature=1.0, top_k=top_k, top_p=top_p), 300) == want


# --------------------------------------------------------------------------- stops and lengths
@pytest.mark.parametrize("stronger", [EOS, 77])
def test_vllm_21610_min_new_tokens_holds_back_eos_and_stop_token_ids(sched: Scheduler, stronger: int) -> None:
    """vllm-project/vllm#21610 (``all_stop_token_ids``: the union of ``stop_token_ids`` and the
    EOS id is what the minimum-length rule masks). Expected: with EOS and stop token ``77`` both
    pushed up by a logit bias, ``min_new_tokens=3`` keeps either out of the first three tokens;
    the fourth is the stronger of the two and ends the request with ``matched`` naming it."""
    bias = {str(EOS): 40.0 if stronger == 77 else 50.0, "77": 50.0 if stronger == 77 else 40.0}
    sp = {"logit_bias": bias, "stop_token_ids": [77], "min_new_tokens": 3}
    submit(sched, f"min-{stronger}", PROMPT, 8, ignore_eos=False, sampling=sp)
    r = drain(sched)[f"min-{stronger}"]
    assert len(r["ids"]) == 4 and not set(r["ids"][:3]) & {EOS, 77}, r["ids"]
    assert r["ids"][3] == stronger
    assert r["finish"]["type"] == "stop" and r["finish"]["matched"] == stronger


def test_sglang_20799_one_logprob_per_output_token_whatever_ends_it(sched: Scheduler, tok: Any) -> None:
    """sgl-project/sglang#20799 (``len(logprobs)`` could exceed ``len(output_ids)`` when the
    request ended on its length limit). Expected: for a request ended by ``max_new_tokens``, by a
    stop token, by a stop string and by EOS, ``output_token_logprobs`` has one entry per output
    id, each finite and ``<= 0``."""
    text = tok.decode([FORCED])
    assert text.strip()
    force = {"logit_bias": {str(FORCED): 60.0}}
    cases = {
        "len": ({}, True),
        "stop-id": ({**force, "stop_token_ids": [FORCED]}, False),
        "stop-str": ({**force, "stop": [text * 2]}, False),
        "eos": ({"logit_bias": {str(EOS): 60.0}}, False),
    }
    for rid, (sp, ignore_eos) in cases.items():
        submit(sched, rid, PROMPT, 5, ignore_eos=ignore_eos, sampling=sp, return_logprob=True)
    res = drain(sched)
    want_len = {"len": 5, "stop-id": 1, "stop-str": 2, "eos": 1}
    for rid, n in want_len.items():
        r = res[rid]
        assert len(r["ids"]) == n and len(r["lp"]) == n, (rid, r["ids"], r["lp"])
        assert all(math.isfinite(x) and x <= 0 for x in r["lp"]), rid


# --------------------------------------------------------------------------- n with a seed
def test_together_py_214_seed_with_n_gives_repeatable_distinct_samples(sched_model_dir: str) -> None:
    """togethercomputer/together-py#214 (``seed`` with ``n > 1`` was refused, though a client wants
    the same ``n`` completions again for the same seed) and oobabooga/textgen#7425 (one seed per
    completion, the seed incremented for each). Expected: ``/generate``'s parallel sample ``k``
    of a request seeded ``s`` is seeded ``s + k`` (vLLM's rule for ``n > 1``), so each sample
    equals a cold single request with that seed and the samples are not all the same."""
    obj = GenerateReqInput(
        input_ids=PROMPT, sampling_params={"n": 3, "sampling_seed": 40, "temperature": 1.5}
    )
    obj.normalize_batch_and_arguments()
    assert [p["sampling_seed"] for p in obj.sampling_params] == [40, 41, 42]  # type: ignore[union-attr]
    s = make_scheduler(sched_model_dir)
    for k in range(3):  # the n samples of the request, in one batch
        sp = {key: v for key, v in obj[k].sampling_params.items() if key != "n"}  # type: ignore[union-attr]
        submit(s, f"n{k}", PROMPT, 6, sampling=sp)
    batch = drain(s)
    outs = []
    for k in range(3):  # each alone, seeded s + k
        submit(s, f"cold{k}", PROMPT, 6, sampling={"temperature": 1.5, "sampling_seed": 40 + k})
        cold = drain(s)[f"cold{k}"]["ids"]
        assert batch[f"n{k}"]["ids"] == cold, k
        outs.append(tuple(cold))
    assert len(set(outs)) > 1

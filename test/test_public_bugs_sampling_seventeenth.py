"""Public reports on sampling numerics and parameters (non-finite logits, temperature extremes,
the order of temperature / top-p / min-p, the logprobs returned, penalties, top-k bounds, the
order of top logprobs), replayed on the in-process sampler. Each test names its report.

Faults found here, fixed:

* One NaN or ``+inf`` logit made the softmax NaN: every sampled row emitted token 0, greedy
  rows picked the NaN token, and every returned logprob was NaN (JustVugg/colibri#369). Now a NaN
  logit has probability 0 and ``+inf`` logits share all of it (the limit of the softmax)
  (``sampling/logprobs.py:finite_limit``).
* ``z / T`` overflowed to ``+inf`` for a tiny temperature and a large finite logit, with the same
  NaN result (vllm-project/vllm#22180). Rows are now shifted by their maximum before the division
  (``scale_by_temperature``).

Oracles: a float64 reference computed here from the same logits (``math`` on Python floats), the
documented formulas (OpenAI's penalties, CTRL's repetition penalty, SGLang's top-p / min-p rule),
Python's ``sorted``.
"""

from __future__ import annotations

import math

import pytest
import torch
from sglang_v4.sampling.penalties import apply_penalties
from sglang_v4.sampling.sampler import sample, top_logprobs
from sglang_v4.sampling.sampling_params import SamplingParams

NAN, INF = float("nan"), float("inf")


def _ref_logprobs(row: list[float], temperature: float = 1.0) -> list[float]:
    """Float64 ``log_softmax(row / T)`` with NaN entries at probability 0 and, where ``+inf``
    entries exist, all probability spread evenly over them (the softmax limit)."""
    n_inf = sum(1 for x in row if x == INF)
    if n_inf:
        return [-math.log(n_inf) if x == INF else -INF for x in row]
    vals = [x / temperature if not math.isnan(x) else -INF for x in row]
    m = max(vals)
    lse = m + math.log(sum(math.exp(v - m) for v in vals))
    return [v - lse for v in vals]


def _draws(row: list[float], params: SamplingParams, n: int = 300, seed: int = 0) -> list[int]:
    """``n`` seeded samples of one row (one generator per copy: independent draws)."""
    logits = torch.tensor([row] * n, dtype=torch.float32)
    gens = [torch.Generator().manual_seed(seed + i) for i in range(n)]
    return sample(logits, [params] * n, [[]] * n, generators=gens).tolist()


def _assert_logprobs(got: torch.Tensor, want: list[float]) -> None:
    assert not torch.isnan(got).any(), got
    for g, w in zip(got.tolist(), want):
        if w < -1e30:  # -inf, or beyond float32's range
            assert g < -1e30, (got, want)
        else:
            assert g == pytest.approx(w, abs=1e-5), (got, want)


# --------------------------------------------------------------------------- non-finite logits


@pytest.mark.parametrize("bad", [NAN, INF])
@pytest.mark.parametrize("pos", [0, 3, 7])
def test_nan_or_inf_logit_does_not_make_every_sample_token_zero(bad: float, pos: int) -> None:
    """JustVugg/colibri#369: a single NaN / +Inf logit made the distribution NaN and the sampler
    emit token 0 forever. A NaN logit has probability 0 (never picked, greedy or sampled); +inf
    logits hold all the probability; the logprobs carry no NaN. Oracle: float64 reference."""
    row = [0.5, 1.0, -0.5, 2.0, 0.0, 1.5, -1.0, 0.25]
    row[pos] = bad
    want = _ref_logprobs(row, 0.8)
    support = {i for i, w in enumerate(want) if w > -INF}
    for p in (SamplingParams(temperature=0.8), SamplingParams(temperature=0.8, top_p=0.9, top_k=4)):
        got = set(_draws(row, p, n=200))
        assert got <= support, (bad, pos, got)
        if bad == INF:
            assert got == {pos}
    _, lp = sample(torch.tensor([row]), [SamplingParams(temperature=0.8)], [[]], return_logprobs=True)
    _assert_logprobs(lp[0], want)
    greedy, glp = sample(torch.tensor([row]), [SamplingParams(temperature=0)], [[]], return_logprobs=True)
    ref_greedy = _ref_logprobs(row, 1.0)
    assert greedy.item() == max(range(len(row)), key=lambda i: (ref_greedy[i], -i))
    _assert_logprobs(glp[0], ref_greedy)
    plain = sample(torch.tensor([row]), [SamplingParams(temperature=0)], [[]], plain_greedy=True)
    assert plain.item() == greedy.item()


def test_tiny_temperature_does_not_overflow_into_nan() -> None:
    """vllm-project/vllm#22180: dividing the logits by a tiny temperature overflowed to inf and
    left NaN probabilities. Logits within float32's range divided by ``T = 1e-6`` (the smallest
    non-greedy temperature) exceed it; the float64 reference is a certain top token."""
    row = [1e33, 5e32, 0.0, -1e33, 2e32]
    for t in (1e-6, 3e-6):
        want = _ref_logprobs(row, t)
        assert want[0] == 0.0
        assert set(_draws(row, SamplingParams(temperature=t), n=50)) == {0}
        _, lp = sample(torch.tensor([row]), [SamplingParams(temperature=t)], [[]], return_logprobs=True)
        _assert_logprobs(lp[0], want)


def test_half_precision_logits_with_small_temperature_sample_the_argmax() -> None:
    """vllm-project/vllm#890: fp16 logits divided by ``T = 1e-5`` became inf in fp16 and the
    multinomial failed. The sampler works in float32: the clear winner is always drawn and the
    logprobs equal the float64 reference of the same (fp16-rounded) logits."""
    row16 = torch.tensor([[2.875, 2.9551, 11.0625, -2.4473, -1.5439, -1.9463]], dtype=torch.float16)
    row = row16.float()[0].tolist()
    draws = sample(
        row16.repeat(20, 1),
        [SamplingParams(temperature=1e-5)] * 20,
        [[]] * 20,
        generators=[torch.Generator().manual_seed(i) for i in range(20)],
    )
    assert set(draws.tolist()) == {2}
    _, lp = sample(row16, [SamplingParams(temperature=1e-4)], [[]], return_logprobs=True)
    _assert_logprobs(lp[0], _ref_logprobs(row, 1e-4))


def test_temperature_below_epsilon_is_greedy_without_dividing() -> None:
    """NVIDIA/TensorRT-LLM#15716: a tiny non-zero temperature (1e-12) overflowed; such a value
    means near-deterministic output. Below 1e-6 it is greedy (SGLang's and vLLM's epsilon): the
    argmax, with temperature-1 logprobs; no NaN. Oracle: float64 argmax / log_softmax."""
    row = [3.0, 7.5, -1.0, 7.25, 0.0]
    p = SamplingParams(temperature=1e-12)
    assert p.is_greedy
    ids, lp = sample(torch.tensor([row] * 3), [p] * 3, [[]] * 3, return_logprobs=True)
    assert ids.tolist() == [1, 1, 1]
    _assert_logprobs(lp[0], _ref_logprobs(row, 1.0))


def test_nan_or_infinite_temperature_is_rejected_naming_the_field() -> None:
    """ohdearquant/lattice#295: a NaN / infinite temperature silently corrupted sampling. Such a
    value is a ValueError naming ``temperature``; 0 is greedy."""
    for t in (NAN, INF, -INF, -0.5):
        with pytest.raises(ValueError, match="temperature"):
            SamplingParams(temperature=t).verify()
    assert SamplingParams(temperature=0.0).is_greedy


# --------------------------------------------------------------------------- order of the steps


def test_logprobs_follow_the_temperature_and_are_not_renormalised_by_top_k() -> None:
    """thinking-machines-lab/tinker-feedback#148: returned logprobs ignored the temperature, so
    RL on them went off policy. SGLang's output logprobs are ``log_softmax(z / T)`` of the
    penalized logits, before top-k / top-p truncation (a token cut by top-k keeps its finite
    value). Oracle: float64 reference."""
    row = [1.0, 2.0, 0.5, -1.0, 1.5]
    for t in (0.3, 1.0, 2.5):
        _, lp = sample(
            torch.tensor([row]),
            [SamplingParams(temperature=t, top_k=2, top_p=0.7)],
            [[]],
            return_logprobs=True,
        )
        _assert_logprobs(lp[0], _ref_logprobs(row, t))
    _, lp = sample(torch.tensor([row]), [SamplingParams(temperature=0.05)], [[]], return_logprobs=True)
    assert lp[0, 1].item() == pytest.approx(0.0, abs=1e-4)  # near-greedy: top logprob near 0


def _tempered(row: list[float], t: float) -> list[float]:
    return [math.exp(v) for v in _ref_logprobs(row, t)]


def test_min_p_is_applied_to_the_tempered_distribution() -> None:
    """ggml-org/llama.cpp#7498: with temperature applied after min-p, a 1% token was drawn
    despite ``min_p = 0.05``. SGLang and vLLM apply min-p to ``softmax(z / T)``: the drawn set is
    ``{p_T >= min_p * max p_T}`` computed in float64 here."""
    row = [math.log(x) for x in (0.5, 0.3, 0.12, 0.05, 0.03)]
    for t, min_p in ((0.7, 0.1), (1.5, 0.2), (0.4, 0.05)):
        p = _tempered(row, t)
        want = {i for i, x in enumerate(p) if x >= min_p * max(p)}
        assert set(_draws(row, SamplingParams(temperature=t, min_p=min_p), n=400)) == want, (t, min_p)


def test_min_p_compares_probabilities_not_logits() -> None:
    """state-spaces/mamba#1010: min-p compared raw logits with ``min_p * max``. The threshold is
    on probabilities: logits ``[2, 1]`` give ``p1 / p0 = e^-1 = 0.37``, dropped by ``min_p = 0.5``
    although ``1 >= 0.5 * 2``; ``[2, 1.5]`` (ratio 0.61) keeps both."""
    assert set(_draws([2.0, 1.0, -5.0], SamplingParams(min_p=0.5), n=300)) == {0}
    assert set(_draws([2.0, 1.5, -5.0], SamplingParams(min_p=0.5), n=300)) == {0, 1}


def test_top_p_nucleus_is_taken_over_the_tempered_distribution() -> None:
    """fishaudio/fish-speech#1150: top-p filtered the untempered distribution. The nucleus is
    taken over ``softmax(z / T)`` (SGLang: a token is dropped when the mass ranked before it
    exceeds ``top_p``). Oracle: float64 nucleus here."""
    row = [math.log(x) for x in (0.4, 0.25, 0.15, 0.1, 0.06, 0.04)]
    for t in (0.5, 1.0, 2.0):
        p = _tempered(row, t)
        order = sorted(range(len(p)), key=lambda i: (-p[i], i))
        want, before = set(), 0.0
        for i in order:
            if before <= 0.7:
                want.add(i)
            before += p[i]
        assert set(_draws(row, SamplingParams(temperature=t, top_p=0.7), n=400)) == want, t


# --------------------------------------------------------------------------- penalties, top-k


def test_presence_and_frequency_count_output_only_repetition_counts_the_prompt() -> None:
    """NVIDIA/TensorRT-LLM#5623: presence / frequency penalties counted prompt tokens. OpenAI's
    (and vLLM's) definition counts the generated tokens only; the repetition penalty (CTRL,
    vLLM, HF) covers prompt and output. Oracle: the formulas on float64 values."""
    row = [1.0, -2.0, 0.5, 3.0, -0.25, 0.0]
    prompt, output = [0, 1, 1], [3, 3, 4]
    cases = [
        (SamplingParams(frequency_penalty=0.5, presence_penalty=0.25), {3: -1.25, 4: -0.75}),
        (SamplingParams(presence_penalty=-1.0), {3: 1.0, 4: 1.0}),
    ]
    for p, delta in cases:
        z = torch.tensor([row])
        apply_penalties(z, [p], [output], [prompt])
        want = [row[i] + delta.get(i, 0.0) for i in range(len(row))]
        assert z[0].tolist() == pytest.approx(want, abs=1e-6)
    z = torch.tensor([row])
    apply_penalties(z, [SamplingParams(repetition_penalty=2.0)], [output], [prompt])
    seen = set(prompt) | set(output)
    want = [(x / 2 if x > 0 else x * 2) if i in seen else x for i, x in enumerate(row)]
    assert z[0].tolist() == pytest.approx(want, abs=1e-6)


def test_top_k_beyond_the_vocabulary_means_the_whole_vocabulary() -> None:
    """TransformerLensOrg/TransformerLens#1347: ``top_k`` above the vocabulary size raised
    ``selected index k out of range``. It keeps every token (HF's ``min(top_k, V)``): the same
    seeded draws as ``top_k = -1``."""
    row = [0.1, 0.4, -0.3, 0.2, 0.0, -0.1, 0.3]
    ref = _draws(row, SamplingParams(top_k=-1), n=100, seed=7)
    assert len(set(ref)) > 3
    for k in (len(row), len(row) + 5, 10**9):
        p = SamplingParams(top_k=k)
        p.verify(vocab_size=len(row))
        assert _draws(row, p, n=100, seed=7) == ref, k


def test_top_k_zero_or_below_minus_one_is_a_value_error_naming_top_k() -> None:
    """google-deepmind/gemma#789: ``k = 0`` or a negative ``k`` failed deep inside the sampler.
    On SGLang's ``sampling_params`` they are a ValueError naming ``top_k`` (-1 disables top-k);
    1 is greedy."""
    for k in (0, -2, -100):
        with pytest.raises(ValueError, match="top_k"):
            SamplingParams(top_k=k).verify()
    SamplingParams(top_k=-1).verify()
    assert SamplingParams(top_k=1, temperature=1.3).is_greedy


def test_top_logprobs_are_sorted_descending_with_ties_by_token_id() -> None:
    """artefactory/artefactual#188: top logprobs arrived out of order. They are sorted by
    descending logprob, equal values by ascending token id, and the first is the greedy pick.
    Oracle: Python's ``sorted`` over the float64 reference."""
    row = [0.5, 2.0, 1.0, 2.0, -1.0, 1.0, 2.0, 0.0]
    ids, lp = sample(torch.tensor([row]), [SamplingParams(temperature=0)], [[]], return_logprobs=True)
    ref = _ref_logprobs(row)
    want = sorted(range(len(row)), key=lambda i: (-ref[i], i))[:5]
    vals, top_ids = top_logprobs(lp, 5)
    assert top_ids[0].tolist() == want and top_ids[0, 0].item() == ids.item()
    assert vals[0].tolist() == pytest.approx([ref[i] for i in want], abs=1e-6)


# --------------------------------------------------------------------------- seeds, min_new_tokens


def _seeded_run(seed: int, steps: int, others: int = 0) -> list[int]:
    """``steps`` draws of one seeded row over a flat 64-token distribution, batched after
    ``others`` unseeded rows (a fresh generator per run, as the scheduler makes one per request)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        logits = torch.zeros(others + 1, 64)
        ids = sample(
            logits, [SamplingParams()] * (others + 1), [[]] * (others + 1), generators=[None] * others + [g]
        )
        out.append(int(ids[-1]))
    return out


def test_parallel_samples_with_one_seed_differ_and_each_equals_its_single_request() -> None:
    """vllm-project/vllm#11898: with ``n > 1`` and a seed, the seed was copied to every
    completion, so all ``n`` were the same. Sample ``k`` draws from ``seed + k`` (vLLM's rule):
    the ``n`` streams differ, and each equals a lone request with that seed (oracle: the cold
    single-request run), whatever else shares its batch."""
    from sglang_v4.managers.io_struct import GenerateReqInput

    req = GenerateReqInput(text="x", sampling_params={"n": 4, "sampling_seed": 5})
    req.normalize_batch_and_arguments()
    seeds = [p["sampling_seed"] for p in req.sampling_params]
    assert seeds == [5, 6, 7, 8]
    runs = [_seeded_run(s, 6, others=3) for s in seeds]
    assert len({tuple(r) for r in runs}) == 4
    assert runs == [_seeded_run(s, 6) for s in seeds]


def test_min_new_tokens_masks_every_eos_id_of_the_generation_config() -> None:
    """vllm-project/vllm#5849: with several EOS ids (``generation_config.json``'s list) only the
    primary one was held back by ``min_tokens``. Every EOS id and every ``stop_token_ids`` entry
    gets ``-inf`` while fewer than ``min_new_tokens`` tokens exist; the rest of the row is as given."""
    row = [0.0, 5.0, 6.0, 1.0, 7.0, 2.0]
    p = SamplingParams(min_new_tokens=3, stop_token_ids=[4])
    z = torch.tensor([row])
    apply_penalties(z, [p], [[0, 3]], None, eos_token_ids=[1, 2])
    assert z[0].tolist() == [0.0, -INF, -INF, 1.0, -INF, 2.0]
    ids = sample(
        torch.tensor([row]), [SamplingParams(temperature=0, min_new_tokens=3)], [[0]], eos_token_ids=[1, 2, 4]
    )
    assert ids.item() == 5


def test_min_new_tokens_outranks_stop_token_ids_until_reached() -> None:
    """NVIDIA/TensorRT-LLM#4776: ``stop_token_ids`` took precedence over ``min_tokens``. A stop
    token cannot be drawn before ``min_new_tokens`` outputs exist, and is free from then on
    (output count == ``min_new_tokens``). Oracle: the greedy argmax of the given logits."""
    row = [0.0, 1.0, 9.0, 3.0]  # stop token 2 is the argmax
    p = SamplingParams(temperature=0, min_new_tokens=2, stop_token_ids=[2])
    picks = [sample(torch.tensor([row]), [p], [[3] * n])[0].item() for n in range(4)]
    assert picks == [3, 3, 2, 2]

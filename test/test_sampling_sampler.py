"""Sampler tests against independent references (float64 brute force, hand formulas, chi-square)."""

from __future__ import annotations

import math

import pytest
import torch
from sglang_v4.sampling.sampler import (
    PenaltyCache,
    apply_penalties,
    compute_logprobs,
    filter_probs,
    logprobs_for_tokens,
    sample,
    token_logprobs,
    top_logprobs,
)
from sglang_v4.sampling.sampling_params import SamplingParams


def _brute_force_keep(p: list[float], top_k: int, top_p: float, min_p: float) -> set[int]:
    """Float64, pure-python reference of which tokens survive top-k / top-p / min-p."""
    order = sorted(range(len(p)), key=lambda i: (-p[i], i))
    keep = set()
    before = 0.0
    for rank, t in enumerate(order):
        ok = (top_k == -1 or rank < top_k) and before <= top_p
        if ok:
            keep.add(t)
        before += p[t]
    pmax = max(p)
    return {t for t in keep if p[t] >= min_p * pmax}


@pytest.mark.parametrize("temperature", [0.0, 1e-8])
def test_greedy_is_argmax(temperature: float) -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 97, generator=g)
    params = [SamplingParams(temperature=temperature) for _ in range(6)]
    out = sample(logits, params, [[] for _ in range(6)])
    assert out.dtype == torch.int64
    assert out.tolist() == [int(max(range(97), key=lambda j: logits[i, j].item())) for i in range(6)]
    # top_k=1 with any temperature is greedy too
    out2 = sample(
        logits, [SamplingParams(top_k=1, temperature=3.0) for _ in range(6)], [[] for _ in range(6)]
    )
    assert out2.tolist() == out.tolist()


def test_filter_probs_matches_bruteforce() -> None:
    g = torch.Generator().manual_seed(1)
    combos = [
        (-1, 1.0, 0.0),
        (5, 1.0, 0.0),
        (-1, 0.6, 0.0),
        (-1, 1.0, 0.3),
        (7, 0.8, 0.05),
        (1, 0.5, 0.5),
        (40, 0.95, 0.1),
    ]
    for _trial in range(10):
        logits = torch.randn(len(combos), 40, generator=g, dtype=torch.float64) * 2.0
        probs64 = torch.softmax(logits, dim=-1)
        params = [SamplingParams(top_k=k, top_p=tp, min_p=mp) for k, tp, mp in combos]
        w = filter_probs(probs64.to(torch.float32), params)
        for r, (k, tp, mp) in enumerate(combos):
            ref = _brute_force_keep(probs64[r].tolist(), k, tp, mp)
            got = {i for i in range(40) if w[r, i] > 0}
            assert got == ref, (r, k, tp, mp)
            for i in got:  # surviving weights are the untouched probabilities
                assert math.isclose(w[r, i].item(), probs64[r, i].item(), rel_tol=1e-5)


def test_filter_probs_partial_sort_path_matches_bruteforce() -> None:
    """Vocabulary larger than the partial-sort cap: peaked rows take the top-k fast path, a flat row
    (top-cap mass below top_p) falls back to the full sort; both must equal the brute force."""
    g = torch.Generator().manual_seed(11)
    vocab = 3000
    logits = torch.randn(5, vocab, generator=g, dtype=torch.float64) * 6.0
    logits[4] = torch.randn(vocab, generator=g, dtype=torch.float64) * 0.01  # nearly uniform
    combos = [(50, 1.0, 0.0), (-1, 0.9, 0.0), (2000, 0.95, 0.0), (-1, 0.5, 0.02), (-1, 0.99, 0.0)]
    probs64 = torch.softmax(logits, dim=-1)
    params = [SamplingParams(top_k=k, top_p=tp, min_p=mp) for k, tp, mp in combos]
    w = filter_probs(probs64.to(torch.float32), params)
    for r, (k, tp, mp) in enumerate(combos):
        ref = _brute_force_keep(probs64[r].tolist(), k, tp, mp)
        got = {i for i in range(vocab) if w[r, i] > 0}
        assert got == ref, (r, len(got), len(ref))
    assert len({i for i in range(vocab) if w[4, i] > 0}) > 1024  # the flat row really used the full sort


def test_sampled_tokens_stay_in_support() -> None:
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(1, 30, generator=g)
    p = torch.softmax(logits.double(), -1)[0].tolist()
    sp = SamplingParams(top_k=6, top_p=0.7, temperature=1.0)
    allowed = _brute_force_keep(p, 6, 0.7, 0.0)
    big = logits.repeat(2000, 1)
    torch.manual_seed(3)
    out = sample(big, [sp] * 2000, [[] for _ in range(2000)])
    assert set(out.tolist()) <= allowed
    assert len(set(out.tolist())) == len(allowed)  # every kept token gets drawn at these masses


def test_penalties_hand_formula() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0, 1.0]])
    prompt = [[0, 4]]
    output = [[1, 3, 3, 1, 1]]
    sp = SamplingParams(repetition_penalty=1.5, frequency_penalty=0.25, presence_penalty=0.5)
    got = apply_penalties(logits.clone(), [sp], output, prompt)[0].tolist()
    # repetition over prompt+output {0,4,1,3}: z>0 -> z/1.5, z<=0 -> z*1.5
    rep = [2.0 / 1.5, -1.0 * 1.5, 0.5, 3.0 / 1.5, -2.0 * 1.5, 1.0]
    counts = [0, 3, 0, 2, 0, 0]  # output only
    exp = [rep[i] - 0.25 * counts[i] - (0.5 if counts[i] else 0.0) for i in range(6)]
    assert got == pytest.approx(exp, abs=1e-6)


def test_penalty_changes_greedy_choice_and_logit_bias() -> None:
    logits = torch.tensor([[1.0, 0.9, 0.0]])
    assert sample(logits, [SamplingParams(temperature=0)], [[0]]).item() == 0
    assert sample(logits, [SamplingParams(temperature=0, presence_penalty=0.2)], [[0]]).item() == 1
    assert sample(logits, [SamplingParams(temperature=0, logit_bias={"2": 5.0})], [[]]).item() == 2


def test_min_new_tokens_masks_eos_and_stop_ids() -> None:
    logits = torch.tensor([[0.0, 10.0, 9.0, 1.0]])  # eos=1 best, stop id 2 next
    sp = SamplingParams(temperature=0, min_new_tokens=3, stop_token_ids=[2])
    assert sample(logits, [sp], [[3, 3]], eos_token_ids={1}).item() == 3
    assert sample(logits, [sp], [[3, 3, 3]], eos_token_ids={1}).item() == 1


def test_seeded_determinism_and_batch_invariance() -> None:
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(5, 64, generator=g)
    params = [SamplingParams(temperature=1.3, top_p=0.95, sampling_seed=s) for s in range(5)]

    def gens() -> list[torch.Generator]:
        return [torch.Generator().manual_seed(1000 + s) for s in range(5)]

    seqs = []
    for _ in range(2):
        gs = gens()
        seqs.append([sample(logits, params, [[] for _ in range(5)], None, gs).tolist() for _ in range(20)])
    assert seqs[0] == seqs[1]
    # row 3 alone, with a fresh generator of the same seed, draws the same sequence as in the batch
    g3 = torch.Generator().manual_seed(1003)
    alone = [sample(logits[3:4], params[3:4], [[]], None, [g3]).item() for _ in range(20)]
    assert alone == [step[3] for step in seqs[0]]
    # the draws are not all identical (the seed really drives sampling)
    assert len({step[3] for step in seqs[0]}) > 1


def test_temperature_sampling_chi_square() -> None:
    z = torch.tensor([1.0, 0.2, -0.5, 0.7, 0.0])
    temp = 0.7
    p = torch.softmax(z.double() / temp, -1).tolist()
    n = 20000
    torch.manual_seed(5)
    out = sample(z.repeat(n, 1), [SamplingParams(temperature=temp)] * n, [[] for _ in range(n)])
    counts = torch.bincount(out, minlength=5).tolist()
    chi2 = sum((counts[i] - n * p[i]) ** 2 / (n * p[i]) for i in range(5))
    assert chi2 < 25.0, (counts, [n * x for x in p])  # df=4: p(chi2>25) ~ 5e-5


def test_logprob_helpers() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, float("-inf")]])
    lp = compute_logprobs(logits)
    ref0 = [x - math.log(math.exp(1) + math.exp(2) + math.exp(3)) for x in (1.0, 2.0, 3.0)]
    assert lp[0].tolist() == pytest.approx(ref0, abs=1e-6)
    assert lp[1, 0].item() == pytest.approx(math.log(0.5)) and lp[1, 2].item() == float("-inf")
    vals, ids = top_logprobs(lp, 2)
    assert ids.tolist() == [[2, 1], [0, 1]] or ids.tolist() == [[2, 1], [1, 0]]
    assert vals[0].tolist() == pytest.approx([ref0[2], ref0[1]], abs=1e-6)
    assert token_logprobs(lp, torch.tensor([0, 1])).tolist() == pytest.approx(
        [ref0[0], math.log(0.5)], abs=1e-6
    )


def test_return_logprobs_uses_temperature() -> None:
    z = torch.tensor([[1.0, 2.0, 0.5]])
    _, lp = sample(z, [SamplingParams(temperature=2.0)], [[]], return_logprobs=True)
    ref = torch.log_softmax(z.double() / 2.0, -1)[0].tolist()
    assert lp[0].tolist() == pytest.approx(ref, abs=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_greedy_and_seeded() -> None:
    g = torch.Generator().manual_seed(6)
    logits = torch.randn(8, 1000, generator=g)
    params = [SamplingParams(temperature=0)] * 8
    assert sample(logits.cuda(), params, [[]] * 8).cpu().tolist() == sample(logits, params, [[]] * 8).tolist()
    sp = [SamplingParams(temperature=0.8, top_k=50, top_p=0.9, min_p=0.01)] * 8
    a = sample(
        logits.cuda(), sp, [[]] * 8, None, [torch.Generator(device="cuda").manual_seed(i) for i in range(8)]
    )
    b = sample(
        logits.cuda(), sp, [[]] * 8, None, [torch.Generator(device="cuda").manual_seed(i) for i in range(8)]
    )
    assert a.tolist() == b.tolist()
    # penalties on CUDA == on CPU
    pen = [SamplingParams(repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=-0.2)] * 8
    outs = [[i, i + 1, i + 1, 999] for i in range(8)]
    prompts = [[7, 8, i] for i in range(8)]
    cpu = apply_penalties(logits.clone(), pen, outs, prompts)
    gpu = apply_penalties(logits.clone().cuda(), pen, outs, prompts)
    assert torch.allclose(cpu, gpu.cpu(), atol=1e-6)
    cached = apply_penalties(
        logits.clone().cuda(), pen, outs, prompts, penalty_cache=PenaltyCache(), rids=list(range(8))
    )
    assert torch.allclose(cpu, cached.cpu(), atol=1e-6)


def test_logprobs_for_tokens_chunked_vs_float64() -> None:
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(37, 50, generator=g) * 3
    ids = torch.randint(0, 50, (37,), generator=g)
    vals, tv, ti = logprobs_for_tokens(logits, ids, top_k=4, chunk_size=8)
    ref = torch.log_softmax(logits.double(), -1)
    assert vals.tolist() == pytest.approx(ref.gather(1, ids.view(-1, 1)).squeeze(1).tolist(), abs=1e-5)
    rv, ri = torch.sort(ref, dim=-1, descending=True)
    assert torch.allclose(tv.double(), rv[:, :4], atol=1e-5)
    assert ti.tolist() == ri[:, :4].tolist()
    v0, t0, i0 = logprobs_for_tokens(logits, ids)
    assert t0 is None and i0 is None and torch.equal(v0, vals)


def test_penalty_cache_equals_uncached_over_steps() -> None:
    """The device-side PenaltyCache gives exactly the uncached result while requests grow, the batch
    changes composition and order, and a request's output shrinks (retraction)."""
    g = torch.Generator().manual_seed(12)
    vocab = 64
    prompts = {f"r{i}": torch.randint(0, vocab, (5 + i,), generator=g).tolist() for i in range(4)}
    outs: dict[str, list[int]] = {k: [] for k in prompts}
    params = {
        "r0": SamplingParams(repetition_penalty=1.4),
        "r1": SamplingParams(frequency_penalty=0.7, presence_penalty=0.3),
        "r2": SamplingParams(repetition_penalty=0.8, frequency_penalty=-0.5, presence_penalty=1.0),
        "r3": SamplingParams(),
    }
    cache = PenaltyCache()
    batches = [["r0", "r1", "r2", "r3"], ["r2", "r0"], ["r3", "r1", "r2"], ["r0", "r1", "r2", "r3"]] * 3
    for step, batch in enumerate(batches):
        if step == 7:
            outs["r2"] = outs["r2"][:2]  # retraction: output shrinks
        logits = torch.randn(len(batch), vocab, generator=g) * 3
        args = ([params[r] for r in batch], [outs[r] for r in batch], [prompts[r] for r in batch])
        ref = apply_penalties(logits.clone(), *args)
        got = apply_penalties(logits.clone(), *args, penalty_cache=cache, rids=batch)
        assert torch.allclose(got, ref, atol=1e-5), step
        for r in batch:
            outs[r].append(int(torch.randint(0, vocab, (1,), generator=g)))
    cache.release("r0")
    assert len(cache) == 2  # r1, r2 only (r3 has no penalties, r0 released)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_plain_greedy_fast_path_equals_general_path(dtype: torch.dtype) -> None:
    """``plain_greedy=True`` (the scheduler's claim that no row has a penalty, bias, min_new_tokens
    or grammar) gives the general path's ids and logprobs, bit for bit, ties included, and leaves
    the logits unchanged."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randint(-4, 4, (37, 50), generator=g).to(dtype)  # many ties
    before = logits.clone()
    params = [SamplingParams(temperature=0.0) for _ in range(37)]
    for p in params:
        p.normalize(None)
    outs = [[[]] * 37, [[5, 6]] * 37]
    ref = sample(logits, params, outs[0], return_logprobs=True)
    fast = sample(logits, params, outs[1], return_logprobs=True, plain_greedy=True, grammars=[None] * 37)
    assert torch.equal(ref[0], fast[0]) and ref[0].dtype == fast[0].dtype == torch.int64
    assert torch.equal(ref[1], fast[1])
    assert torch.equal(sample(logits, params, outs[0]), sample(logits, params, outs[0], plain_greedy=True))
    assert torch.equal(logits, before)

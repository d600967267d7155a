"""A sixteenth set of public reports, sampling, logprobs and MoE routing: tied values in the top-k
filter and in the top logprobs, the order of temperature / top-k / top-p / min-p, a nucleus
emptied by top-k, the sign rule of the repetition penalty, which tokens frequency / presence
count, ``top_k = 1`` on a tied maximum, and the router's correction bias (each test names its
report; checkpoint formats are in ``test_public_bugs_model_sixteenth_loading``).

Oracles: float64 references written here from the documented semantics (SGLang's torch sampler
``top_k_top_p_min_p_sampling_from_probs_torch``; CTRL's repetition penalty; OpenAI's frequency /
presence definition; DeepSeek-V3's technical report and HF ``DeepseekV4TopKRouter`` for the
router), a stable descending sort (ties by token id, as ``torch.argmax`` picks the first
maximum), and the runtime's own full-sort path for its partial-sort fast path.
"""

from __future__ import annotations

import pytest
import torch
from sgl_kernel_v4 import ops
from sglang_v4.sampling.logprobs import logprobs_for_tokens, top_logprobs
from sglang_v4.sampling.penalties import apply_penalties
from sglang_v4.sampling.sampler import filter_probs, sample
from sglang_v4.sampling.sampling_params import SamplingParams


def _ref_filter64(probs: torch.Tensor, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """float64 SGLang torch-sampler filter of one row ``[V]``: stable descending sort (ties by id),
    drop rank ``>= top_k`` (``-1``: none), drop where the exclusive cumulative mass of the
    unfiltered sorted row exceeds ``top_p``, drop ``p < min_p * max(p)``; dropped entries are 0."""
    p = probs.double()
    order = sorted(range(p.numel()), key=lambda i: (-p[i].item(), i))
    out = torch.zeros_like(p)
    cum = 0.0
    for rank, i in enumerate(order):
        v = p[i].item()
        if (top_k == -1 or rank < top_k) and cum <= top_p and v >= min_p * p.max().item():
            out[i] = v
        cum += v
    return out


# ---------------------------------------------------------------------------------------------
# ties: lower token id first, on every path (ohdearquant/lattice#386, apple/axlearn#1022)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab", [512, 4096])
def test_lattice_386_axlearn_1022_top_k_keeps_the_lowest_ids_of_a_tie(vocab: int) -> None:
    """ohdearquant/lattice#386 and apple/axlearn#1022 (a top-k / greedy pick among tied values must
    follow one rule, the lowest index, as ``torch.argmax`` does; an unspecified tie order made the
    same request choose differently by path): ten tokens share the top probability and
    ``top_k = 3`` keeps ids 0, 1, 2 of them (the stable descending sort's first three), on a
    vocabulary the full sort handles (512) and on one the partial-sort fast path handles (4096;
    ``torch.topk`` there returned e.g. ids 0, 1, 9); ``top_p`` then cuts the tie in id order too."""
    probs = torch.zeros(2, vocab)
    tied = torch.arange(30, 300, 27)  # 10 ids, not the first ones
    probs[:, tied] = 0.1
    for params, keep in (
        (SamplingParams(top_k=3), tied[:3]),
        (SamplingParams(top_k=6, top_p=0.35), tied[:4]),  # exclusive mass 0, .1, .2, .3 <= .35
    ):
        out = filter_probs(probs.clone(), [params, params])
        for row in out:
            assert row.nonzero().flatten().tolist() == keep.tolist()
            ref = _ref_filter64(probs[0], params.top_k, params.top_p, params.min_p)
            assert torch.equal(row.double(), ref.float().double())


def test_lattice_386_top_logprobs_list_ties_by_id_and_lead_with_the_greedy_token() -> None:
    """ohdearquant/lattice#386 (the greedy token must be the first of tied maxima everywhere): on
    rows with tied log-probabilities the top logprobs (output and prompt paths) come in
    descending value with ties by ascending token id (a stable sort's order), so the first entry
    is the token the greedy sampler returns (before, ``torch.topk`` listed e.g. ids 1, 3, 0, 2)."""
    lp = torch.log_softmax(torch.zeros(3, 5000), dim=-1)
    lp[1, 4000:4010] = -0.5  # ten tied maxima past the start
    levels = torch.randint(0, 4, (5000,), generator=torch.Generator().manual_seed(386))
    lp[2] = torch.log_softmax(levels.float(), -1)  # four levels, ~1250 ties each
    vals, ids = top_logprobs(lp, 20)
    want_v, want_i = lp.sort(dim=-1, descending=True, stable=True)
    assert torch.equal(ids, want_i[:, :20]) and torch.equal(vals, want_v[:, :20])
    greedy = sample(lp, [SamplingParams(temperature=0.0)] * 3, [[], [], []])
    assert greedy.tolist() == ids[:, 0].tolist() == [0, 4000, int(want_i[2, 0])]
    _, tv, ti = logprobs_for_tokens(lp, torch.zeros(3, dtype=torch.long), top_k=20, chunk_size=2)
    assert torch.equal(ti, want_i[:, :20])  # log_softmax of a log_softmax keeps the ties
    assert torch.equal(tv, torch.log_softmax(lp, -1).gather(1, ti))


# ---------------------------------------------------------------------------------------------
# temperature first, top-k on the unrenormalised row, min-p in probability space
# (sgl-project/sglang-jax#1563)
# ---------------------------------------------------------------------------------------------


def test_sglang_jax_1563_filter_order_and_spaces_match_sglangs_sampler() -> None:
    """sgl-project/sglang-jax#1563 (a mask path applied temperature after the masks, measured top-p
    on the top-k-renormalised distribution, and applied min-p's probability formula to logits):
    on random rows (both the full-sort and the fast path), the runtime's kept set and weights
    equal the float64 reference of SGLang's torch sampler applied to ``softmax(z / T)``, and
    they differ from the same reference applied before the temperature."""
    g = torch.Generator().manual_seed(1563)
    for vocab in (300, 2048):
        z = torch.randn(4, vocab, generator=g) * 3
        cases = [(0.7, 40, 0.8, 0.0), (1.5, -1, 0.9, 0.05), (0.5, 7, 1.0, 0.2), (2.0, 300, 0.6, 0.01)]
        for row, (temp, k, p, mp) in enumerate(cases):
            params = SamplingParams(temperature=temp, top_k=k, top_p=p, min_p=mp)
            probs = torch.softmax(z[row : row + 1] / temp, dim=-1)
            got = filter_probs(probs, [params])[0].double()
            want = _ref_filter64(probs[0], k, p, mp)
            assert torch.equal(got != 0, want != 0), (vocab, row)
            assert (got - want).abs().max().item() <= 1e-7
            late = _ref_filter64(torch.softmax(z[row].double(), -1), k, p, mp)  # temperature last
            assert not torch.equal(got != 0, late != 0), (vocab, row)


def test_mlx_lm_388_top_p_after_a_small_top_k_never_empties_the_row() -> None:
    """ml-explore/mlx-lm#388 (with ``top_k`` small, top-p assumed the kept mass summed to 1 and
    could mask every token, e.g. ``--top-k 1 --top-p 0.8``): with ``top_k`` 1 or 2 and a
    ``top_p`` far below the top token's probability, plus ``min_p = 1``, the top token stays the
    one candidate and every seeded draw returns it."""
    z = torch.tensor([[0.0, 2.0, 1.9, -1.0] + [-3.0] * 60])
    for top_k in (1, 2):
        params = SamplingParams(temperature=0.9, top_k=top_k, top_p=0.01, min_p=1.0)
        kept = filter_probs(torch.softmax(z / 0.9, -1), [params])[0]
        assert kept.nonzero().flatten().tolist() == [1]
        for seed in range(8):
            gen = torch.Generator().manual_seed(seed)
            assert sample(z, [params], [[]], generators=[gen]).item() == 1


# ---------------------------------------------------------------------------------------------
# penalties (huggingface/transformers#2302, NVIDIA/TensorRT-LLM#5623)
# ---------------------------------------------------------------------------------------------


def test_transformers_2302_repetition_penalty_pushes_negative_logits_down() -> None:
    """huggingface/transformers#2302 (dividing a negative logit by the penalty raised it, so a
    penalty > 1 made repeats *more* likely): with ``repetition_penalty = 1.5`` a seen token's
    positive logit is divided by 1.5 and its negative logit multiplied by 1.5 (CTRL's rule, the
    float64 reference), an unseen token is untouched, and the seen negative token's probability
    falls; a penalty below 1 does the reverse."""
    z0 = torch.tensor([[2.0, -2.0, 0.5, -0.5, 1.0, 0.0]])
    for r in (1.5, 0.8):
        z = z0.clone()
        apply_penalties(z, [SamplingParams(repetition_penalty=r)], [[1]], [[0, 3]])
        want = z0.double().clone()
        for t in (0, 1, 3):
            want[0, t] = want[0, t] / r if want[0, t] > 0 else want[0, t] * r
        assert torch.equal(z.double(), want.float().double())
        before, after = torch.softmax(z0, -1)[0, 1], torch.softmax(z, -1)[0, 1]
        assert (after < before) if r > 1 else (after > before)


def test_trtllm_5623_frequency_and_presence_count_output_tokens_only() -> None:
    """NVIDIA/TensorRT-LLM#5623 and osaurus-ai/vmlx-swift#295 (presence / frequency penalties
    counted prompt tokens; by OpenAI's definition, as vLLM computes them, they count the
    generated tokens only, while the repetition penalty also covers the prompt): the logits
    after the penalties equal ``z - f * count_out(t) - p * [count_out(t) > 0]`` (float64), with
    prompt occurrences ignored, and only adding the repetition penalty touches prompt-only ids."""
    z0 = torch.linspace(-2, 2, 12).unsqueeze(0)
    prompt, out = [0, 0, 0, 5, 7], [5, 5, 9, 3]
    z = z0.clone()
    apply_penalties(z, [SamplingParams(frequency_penalty=0.4, presence_penalty=0.3)], [out], [prompt])
    want = z0.double().clone()
    for t in set(out):
        want[0, t] -= 0.4 * out.count(t) + 0.3
    assert (z.double() - want).abs().max().item() <= 1e-6
    assert torch.equal(z[0, [0, 7]], z0[0, [0, 7]])  # prompt-only ids
    zr = z0.clone()
    apply_penalties(zr, [SamplingParams(repetition_penalty=1.3)], [out], [prompt])
    assert not torch.equal(zr[0, [0, 7]], z0[0, [0, 7]])


# ---------------------------------------------------------------------------------------------
# top_k = 1 on a tied maximum (vllm-project/tpu-inference#3580)
# ---------------------------------------------------------------------------------------------


def test_tpu_inference_3580_top_k_one_on_tied_maxima_is_the_argmax() -> None:
    """vllm-project/tpu-inference#3580 (``top_k = 1`` kept every token tied with the maximum, so
    two bf16-tied logits were sampled at random and repeated runs disagreed): with two bf16
    logits exactly tied at the top, ``top_k = 1`` at temperatures 0.3 / 1 / 1.7 and any seed
    returns the first of them, the id ``torch.argmax`` (and temperature 0) gives."""
    z = torch.full((1, 50), -1.0, dtype=torch.bfloat16)
    z[0, 17] = z[0, 31] = 21.375
    assert int(torch.argmax(z.float())) == 17
    picks = {
        int(
            sample(
                z,
                [SamplingParams(temperature=t, top_k=1)],
                [[]],
                generators=[torch.Generator().manual_seed(s)],
            )
        )
        for t in (0.3, 1.0, 1.7)
        for s in range(6)
    }
    assert picks == {17}
    assert int(sample(z, [SamplingParams(temperature=0.0)], [[]])) == 17


# ---------------------------------------------------------------------------------------------
# the router's correction bias selects but does not weight (vllm-project/vllm#12002,
# huggingface/transformers#41647, flashinfer-ai/flashinfer#3875)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("score_func", ["sigmoid", "sqrtsoftplus"])
def test_vllm_12002_flashinfer_3875_bias_selects_experts_weights_come_from_raw_scores(
    score_func: str,
) -> None:
    """vllm-project/vllm#12002 and huggingface/transformers#41647 (the gating weights were taken
    from ``scores + e_score_correction_bias``; DeepSeek-V3's report: the bias is only used for
    routing) and flashinfer-ai/flashinfer#3875 (a kernel recovered the weight as
    ``selected_key - bias``: with scores ~1e-8 and biases ~12, fp32 rounds the key back to the
    bias and every weight became 0): with tiny raw scores and a bias of 12 on three experts, the
    router selects those three and weights them by the raw scores, renormalised and times
    ``routed_scaling_factor = 2.5`` (float64 reference), summing to 2.5."""
    n_exp, k = 16, 3
    g = torch.Generator().manual_seed(12002)
    logits = torch.randn(5, n_exp, generator=g, dtype=torch.float64) - 18.0  # sigmoid ~1e-8
    bias = torch.zeros(n_exp)
    favoured = [2, 9, 13]
    bias[favoured] = 12.0
    ids, w = ops.moe_route(logits.float(), bias, None, None, k, 2.5, score_func)
    assert sorted(ids[0].tolist()) == favoured and all(sorted(r) == favoured for r in ids.tolist())
    lf = logits.float().double()
    raw = torch.sigmoid(lf) if score_func == "sigmoid" else torch.nn.functional.softplus(lf).sqrt()
    sel = raw.gather(1, ids)
    want = sel / sel.sum(-1, keepdim=True) * 2.5
    assert (w.double() - want).abs().max().item() <= 1e-5
    assert (w.double().sum(-1) - 2.5).abs().max().item() <= 1e-5
    biased = raw + bias.double()
    wrong = biased.gather(1, ids) / biased.gather(1, ids).sum(-1, keepdim=True) * 2.5
    assert (w.double() - wrong).abs().max().item() > 1e-2  # the bias-weighted reading differs

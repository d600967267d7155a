"""A twenty-seventh set of public reports on token log probabilities, checked on the engine's own
values: the top list of a sampled token that is not among the top (no duplicate, no insertion),
the logprob of a caller-named token outside the top list, the greedy token as the first entry,
logprobs that reflect ``logit_bias`` and the presence penalty (processed logprobs), values that
are never positive, prompt logprobs that are real values (equal to a cold run's next-token
logprob), and each parallel choice keeping its own logprobs. Each test names its report. All passed
as-is and are kept as regression tests.

Fixtures: an in-process CPU ``Scheduler`` on conftest's ``sched_model_dir`` (random test model,
vocabulary 1000). Oracles: a float64 ``log_softmax`` of a greedy run's full-vocabulary logprobs
with the bias / penalty added by hand (OpenAI's formula), cold runs of each prompt prefix and of
each request alone, and the definition of a log probability (``<= 0``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from dsv4_testutil import random_ids
from scheduler_testutil import make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

pytestmark = pytest.mark.timeout(240)

VOCAB = 1000  # the scheduler test model's vocabulary
EOS = 1
TOP = 60  # wide enough that some sampled tokens fall inside the top list, some outside


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir)


_KEYS = {
    "ids": "output_ids",
    "lp": "output_token_logprobs_val",
    "tv": "output_top_logprobs_val",
    "ti": "output_top_logprobs_idx",
    "tid": "output_token_ids_logprobs_val",
    "in_lp": "input_token_logprobs_val",
    "in_tid": "input_token_ids_logprobs_val",
}


def _drain_all(s: Scheduler) -> dict[str, dict[str, list[Any]]]:
    """Step until idle; per rid, every logprob field of ``_KEYS`` concatenated over messages."""
    res: dict[str, dict[str, list[Any]]] = {}
    for _ in range(2000):
        if not s.has_work():
            return res
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            r = res.setdefault(rid, {k: [] for k in _KEYS})
            for k, field in _KEYS.items():
                vals = getattr(out, field)
                if vals:
                    r[k] += vals[i]
    raise AssertionError("scheduler did not finish")


def _run(
    s: Scheduler,
    rid: str,
    ids: list[int],
    n: int,
    sampling: dict[str, Any] | None = None,
    top: int = 0,
    **kw: Any,
) -> dict[str, list[Any]]:
    submit(s, rid, ids, n, sampling=sampling or {}, return_logprob=True, top_logprobs_num=top, **kw)
    return _drain_all(s)[rid]


def _full_row(values: list[float], idx: list[int]) -> torch.Tensor:
    row = torch.full((VOCAB,), float("nan"), dtype=torch.float64)
    row[torch.tensor(idx)] = torch.tensor(values, dtype=torch.float64)
    assert not torch.isnan(row).any(), "the top list does not cover the vocabulary"
    return row


def test_vllm_36746_sampled_token_outside_the_top_list_is_not_inserted(sched: Scheduler) -> None:
    """vllm-project/vllm#36746: the sampled token was prepended to the top-k list without a
    check, so ``top_logprobs`` held it twice (or held k+1 entries). Expected: at every position of
    a hot sampled run exactly ``top_logprobs`` distinct entries in descending order; where the
    sampled token is among them its entry is its logprob, and where it is not its logprob is below
    every entry (it was not inserted). The run must contain both kinds of position."""
    r = _run(sched, "hot", random_ids(30, 7), 24, {"temperature": 1.0, "sampling_seed": 5}, top=TOP)
    assert len(r["ids"]) == len(r["tv"]) == 24
    outside = 0
    for tid, lp, vals, idx in zip(r["ids"], r["lp"], r["tv"], r["ti"]):
        assert len(idx) == len(set(idx)) == TOP
        assert vals == sorted(vals, reverse=True)
        if tid in idx:
            assert vals[idx.index(tid)] == pytest.approx(lp, abs=1e-6)
        else:
            outside += 1
            assert lp <= min(vals)
    assert 0 < outside < 24


def test_ollama_18579_named_token_logprob_outside_the_top_list(sched: Scheduler) -> None:
    """ollama/ollama#18579: the logprob of a specific token could only be read when it ranked in
    ``top_logprobs``. Expected (SGLang's ``token_ids_logprob``): at every output and prompt
    position the requested tokens' logprobs in request order, equal to their entries of the
    full-vocabulary row of the same greedy request, wherever they rank."""
    ids = random_ids(20, 11)
    named = [999, EOS, 500]
    full = _run(sched, "full", ids, 3, top=VOCAB)
    r = _run(sched, "named", ids, 3, top=2, token_ids_logprob=named, logprob_start_len=0)
    assert r["ids"] == full["ids"]
    assert len(r["tid"]) == 3
    for got, vals, idx in zip(r["tid"], full["tv"], full["ti"]):
        row = _full_row(vals, idx)
        assert got == pytest.approx([row[t].item() for t in named], abs=1e-5)
    assert r["in_tid"][0] is None and len(r["in_tid"]) == len(ids)
    assert all(v is not None and len(v) == 3 for v in r["in_tid"][1:])


def test_llama_cpp_4166_greedy_token_heads_its_top_list(sched: Scheduler) -> None:
    """ggml-org/llama.cpp#4166: produced tokens did not always match the first entry of their
    ``top_logprobs``. Expected: under greedy decoding, with and without a ``logit_bias`` that
    moves the argmax, every produced token is the first entry of its top list and its logprob is
    that entry's value."""
    ids = random_ids(25, 13)
    plain = _run(sched, "plain", ids, 5, top=4)
    boosted = plain["ti"][0][3]  # the 4th-ranked token of the first step
    biased = _run(sched, "biased", ids, 5, {"logit_bias": {str(boosted): 30.0}}, top=4)
    assert biased["ids"][0] == boosted
    for r in (plain, biased):
        for tid, lp, vals, idx in zip(r["ids"], r["lp"], r["tv"], r["ti"]):
            assert idx[0] == tid
            assert vals[0] == pytest.approx(lp, abs=1e-6)


@pytest.mark.parametrize("bias", [3.0, -2.5])
def test_trtllm_9302_logprobs_reflect_logit_bias(sched: Scheduler, bias: float) -> None:
    """NVIDIA/TensorRT-LLM#9302 and huggingface/trl#4163 (processed logprobs: the distribution
    the token was drawn from): SGLang's logprobs come from the logits after ``logit_bias``.
    Expected: the biased greedy request's full row is the float64 ``log_softmax`` of the
    unbiased row with the bias added to its token."""
    ids = random_ids(30, 17)
    base = _run(sched, "base", ids, 1, top=VOCAB)
    row = _full_row(base["tv"][0], base["ti"][0])
    token = base["ti"][0][2]
    r = _run(sched, "bias", ids, 1, {"logit_bias": {str(token): bias}}, top=VOCAB)
    got = _full_row(r["tv"][0], r["ti"][0])
    shifted = row.clone()
    shifted[token] += bias
    oracle = torch.log_softmax(shifted, 0)
    assert (got - oracle).abs().max().item() < 1e-5


def test_trl_4163_logprobs_reflect_the_presence_penalty(sched: Scheduler) -> None:
    """huggingface/trl#4163 (logprobs of the sampling distribution, with the penalties applied):
    Expected: at the second step of a greedy request with ``presence_penalty`` p, the full row is
    the float64 ``log_softmax`` of the unpenalised second-step row minus p on the first output
    token (OpenAI's formula; the first step has no output yet and is unchanged)."""
    ids = random_ids(30, 19)
    base = _run(sched, "nopen", ids, 2, top=VOCAB)
    r = _run(sched, "pen", ids, 2, {"presence_penalty": 1.5}, top=VOCAB)
    first = base["ids"][0]
    assert r["ids"][0] == first
    step0 = _full_row(base["tv"][0], base["ti"][0])
    assert (_full_row(r["tv"][0], r["ti"][0]) - step0).abs().max().item() < 1e-5
    shifted = _full_row(base["tv"][1], base["ti"][1])
    shifted[first] -= 1.5
    oracle = torch.log_softmax(shifted, 0)
    assert (_full_row(r["tv"][1], r["ti"][1]) - oracle).abs().max().item() < 1e-5


def test_together_openapi_5_logprobs_are_never_positive(sched: Scheduler) -> None:
    """togethercomputer/openapi#5: the first ``token_logprobs`` entry of each response was a
    positive number. Expected: every output, top-list, named-token and prompt logprob of a
    sampled request is finite and ``<= 0`` (a log of a probability)."""
    ids = random_ids(20, 23)
    r = _run(
        sched,
        "signs",
        ids,
        6,
        {"temperature": 0.7, "sampling_seed": 9},
        top=5,
        token_ids_logprob=[EOS, 7],
        logprob_start_len=0,
    )
    values = list(r["lp"]) + [v for vals in r["tv"] for v in vals] + [v for vals in r["tid"] for v in vals]
    values += [v for v in r["in_lp"] if v is not None]
    assert len(values) == 6 + 30 + 12 + len(ids) - 1
    assert all(torch.isfinite(torch.tensor(v)) and v <= 0.0 for v in values)


def test_pegainfer_64_prompt_logprobs_are_real_values(sched: Scheduler) -> None:
    """pegainfer-project/pegainfer#64 (echoed prompt logprobs came back ``null``) and
    dphnAI/sonar#162 (echo and prompt logprobs): expected, OpenAI's echo semantics: the first
    prompt token has no logprob, and every later prompt token's logprob is the model's
    next-token logprob of it after the prefix before it, which equals a cold greedy request on
    that prefix asked for that token (``token_ids_logprob``)."""
    ids = random_ids(9, 29)
    r = _run(sched, "echo", ids, 1, logprob_start_len=0)
    assert len(r["in_lp"]) == len(ids) and r["in_lp"][0] is None
    for i in range(1, len(ids)):
        cold = _run(sched, f"prefix{i}", ids[:i], 1, token_ids_logprob=[ids[i]])
        assert r["in_lp"][i] == pytest.approx(cold["tid"][0][0], abs=1e-4)


def test_sglang_388_each_choice_keeps_its_own_logprobs(sched: Scheduler) -> None:
    """sgl-project/sglang#388: the logprobs of all choices of one request were nearly the same.
    Expected: two seeded sampled choices of one prompt batched together each carry the logprobs
    of their own tokens (each equal to the choice's entry in its own full row), their tokens
    differ, and each equals the same choice run alone."""
    ids = random_ids(24, 31)
    sampling = [{"temperature": 1.5, "sampling_seed": s} for s in (40, 41)]
    for k, sp in enumerate(sampling):
        submit(sched, f"c{k}", ids, 6, sampling=sp, return_logprob=True, top_logprobs_num=VOCAB)
    both = _drain_all(sched)
    assert both["c0"]["ids"] != both["c1"]["ids"]
    for k, sp in enumerate(sampling):
        r = both[f"c{k}"]
        for tid, lp, vals, idx in zip(r["ids"], r["lp"], r["tv"], r["ti"]):
            assert lp == pytest.approx(_full_row(vals, idx)[tid].item(), abs=1e-6)
        alone = _run(sched, f"alone{k}", ids, 6, sp)
        assert alone["ids"] == r["ids"]
        assert alone["lp"] == pytest.approx(r["lp"], abs=1e-5)

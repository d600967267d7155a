"""A twenty-seventh set of public reports on sampling parameters: the ``min_new_tokens`` floor
against EOS, ``stop_token_ids`` and ``max_new_tokens``; frequency and presence penalties kept
apart and additive on negative logits; the repetition penalty on negative logits; seeded
``n > 1`` requests (distinct choices, repeatable response); and unseeded requests that must not
share a fixed default seed. Each test names its report. All passed
as-is and are kept as regression tests.

Fixtures: the in-process ``Scheduler`` on the random test checkpoint (``sched_model_dir``,
vocabulary 1000, EOS id 1), ``GenerateReqInput`` normalization and the OpenAI routes over the
fake tokenizer manager (``openai_fake_tm``). Oracles: hand-derived token
positions (a ``+100`` bias forces a token; the floor says where it may first appear), float64
references of OpenAI's frequency / presence formula, transformers' own
``RepetitionPenaltyLogitsProcessor``, cold single-request runs of each derived seed, and
pairwise comparison of runs.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from openai_fake_tm import FakeTM, app_client
from scheduler_testutil import drain, make_scheduler, submit
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.managers.scheduler import Scheduler
from sglang_v4.sampling.penalties import apply_penalties
from sglang_v4.sampling.sampling_params import SamplingParams
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

PROMPT = [5, 17, 256, 99, 42, 311, 7, 64]
EOS = 1  # the test checkpoint's eos_token_id
FORCED = 123  # a non-EOS token forced with a +100 bias
VOCAB = 1000


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir)


def _params(**kw: Any) -> SamplingParams:
    sp = SamplingParams.from_dict(kw)
    sp.normalize(None)
    return sp


# --------------------------------------------------------------------------- min_new_tokens


@pytest.mark.parametrize("floor", [0, 1, 2, 4])
def test_dynamo_14276_eos_is_accepted_only_after_the_floor(sched: Scheduler, floor: int) -> None:
    """ai-dynamo/dynamo#14276: with ``min_tokens=2`` and a model that wants ``[HI, EOS]``, the
    frontend accepted EOS as the second token, so the caller got one content token; SGLang's
    ``min_new_tokens=2`` masks EOS until two output tokens already exist. Expected (EOS forced by
    a ``+100`` bias, ``ignore_eos`` off): exactly ``floor`` non-EOS tokens, then EOS, and the
    request ends there with a ``stop`` finish on EOS."""
    submit(
        sched,
        f"floor{floor}",
        PROMPT,
        10,
        ignore_eos=False,
        sampling={"logit_bias": {str(EOS): 100.0}, "min_new_tokens": floor},
    )
    r = drain(sched)[f"floor{floor}"]
    assert len(r["ids"]) == floor + 1, r["ids"]
    assert EOS not in r["ids"][:floor]
    assert r["ids"][floor] == EOS
    assert r["finish"]["type"] == "stop"


def test_dynamo_14276_stop_token_ids_wait_for_the_floor(sched: Scheduler) -> None:
    """ai-dynamo/dynamo#14276 (the same floor for a request's own stop token): a
    ``stop_token_ids`` token forced by a ``+100`` bias may not end the request before
    ``min_new_tokens`` tokens exist. Expected: 3 tokens that are not the stop token, then the stop
    token, finish ``stop`` matching it."""
    submit(
        sched,
        "stopfloor",
        PROMPT,
        10,
        ignore_eos=False,
        sampling={"logit_bias": {str(FORCED): 100.0}, "stop_token_ids": [FORCED], "min_new_tokens": 3},
    )
    r = drain(sched)["stopfloor"]
    assert len(r["ids"]) == 4, r["ids"]
    assert FORCED not in r["ids"][:3]
    assert r["ids"][3] == FORCED
    assert r["finish"] == {"type": "stop", "matched": FORCED}


def test_llama_cpp_python_1333_min_tokens_does_not_outlast_max_tokens(sched: Scheduler) -> None:
    """abetlen/llama-cpp-python#1333: ``min_tokens`` only removes EOS until the floor; it does not
    stop another condition such as ``max_tokens`` from ending generation. Expected: with the floor
    equal to ``max_new_tokens`` and EOS forced, the request ends on length after exactly
    ``max_new_tokens`` tokens, none of them EOS; a floor above ``max_new_tokens`` is refused (a
    ``ValueError`` naming ``min_new_tokens``, SGLang's ``[0, max_new_tokens]`` range)."""
    submit(
        sched,
        "atmax",
        PROMPT,
        3,
        ignore_eos=False,
        sampling={"logit_bias": {str(EOS): 100.0}, "min_new_tokens": 3},
    )
    r = drain(sched)["atmax"]
    assert len(r["ids"]) == 3 and EOS not in r["ids"]
    assert r["finish"]["type"] == "length"
    with pytest.raises(ValueError, match="min_new_tokens"):
        SamplingParams.from_dict({"max_new_tokens": 3, "min_new_tokens": 4}).verify(VOCAB)


# --------------------------------------------------------------------------- penalties


def _openai_penalized(row: list[float], output: list[int], f: float, p: float) -> list[float]:
    """OpenAI's definition in float64: ``z[t] - f * count(t) - p * [count(t) > 0]`` over the
    output tokens only."""
    out = []
    for t, z in enumerate(row):
        c = output.count(t)
        out.append(z - f * c - p * (1.0 if c > 0 else 0.0))
    return out


@pytest.mark.parametrize(("f", "p"), [(0.7, 0.0), (0.0, 0.7), (0.5, 1.25), (-0.4, 0.3)])
def test_mlc_llm_1693_frequency_and_presence_penalties_stay_apart(f: float, p: float) -> None:
    """mlc-ai/mlc-llm#1693: the presence penalty was passed for both the frequency and the
    presence argument; predibase/lorax#672 (from TGI's fix): the frequency / presence penalties
    were not the additive OpenAI formula. Expected: each logit becomes
    ``z - f * count_out(t) - p * [count_out(t) > 0]`` (float64 reference), on negative and
    positive logits alike, with prompt tokens not counted and a token seen three times penalised
    three times by ``f`` but once by ``p``."""
    g = torch.Generator().manual_seed(3)
    row = (torch.randn(16, generator=g, dtype=torch.float64) * 3).tolist()
    output = [2, 2, 2, 5, 9, 9]
    prompt = [3, 4, 11]  # not generated: no frequency / presence penalty
    sp = _params(frequency_penalty=f, presence_penalty=p)
    got = apply_penalties(torch.tensor([row], dtype=torch.float32), [sp], [output], [prompt])
    want = torch.tensor(_openai_penalized(row, output, f, p), dtype=torch.float64)
    assert (got[0].double() - want).abs().max().item() < 1e-5


@pytest.mark.parametrize("penalty", [1.3, 0.8])
def test_sglang_3139_repetition_penalty_on_negative_logits(penalty: float) -> None:
    """sgl-project/sglang#3139 ("Fix repetition penalty") and IEIT-Yuan/Yuan-2.0#111: a seen
    token with a negative logit was divided by the penalty, which makes it *more* likely for a
    penalty above 1. Expected: transformers' ``RepetitionPenaltyLogitsProcessor`` over prompt and
    output tokens (a positive logit divided by the penalty, a negative one multiplied), unseen
    tokens unchanged."""
    g = torch.Generator().manual_seed(11)
    row = torch.randn(1, 24, generator=g) * 4
    prompt = [1, 3, 7]
    output = [7, 12, 20, 20]
    want = RepetitionPenaltyLogitsProcessor(penalty)(torch.tensor([prompt + output]), row.clone())
    got = apply_penalties(row.clone(), [_params(repetition_penalty=penalty)], [output], [prompt])
    assert torch.allclose(got, want, atol=1e-6)
    seen = sorted(set(prompt + output))
    assert any(row[0, t] < 0 for t in seen) and any(row[0, t] > 0 for t in seen)


# --------------------------------------------------------------------------- seeds


def _sampled(sched: Scheduler, rid: str, seed: int | None, n: int = 8) -> list[int]:
    sampling: dict[str, Any] = {"temperature": 1.5}
    if seed is not None:
        sampling["sampling_seed"] = seed
    submit(sched, rid, PROMPT, n, sampling=sampling)
    return drain(sched)[rid]["ids"]


def test_web_llm_335_seeded_n_gives_distinct_repeatable_choices(sched: Scheduler) -> None:
    """mlc-ai/web-llm#335: a seeded request with ``n > 1`` seeds per request, not per choice: its
    choices still differ from each other, while two requests with the same seed and ``n`` give
    identical choices. Expected: ``n=3`` with seed 7 gives the three choices the seeds
    ``7, 8, 9`` (vLLM's ``seed + index``; choice 0 equals the ``n=1`` request), the three runs
    differ pairwise, and each repeats its cold single run."""
    req = GenerateReqInput(input_ids=PROMPT, sampling_params={"n": 3, "sampling_seed": 7, "temperature": 1.5})
    req.normalize_batch_and_arguments()
    seeds = [req[i].sampling_params["sampling_seed"] for i in range(3)]
    assert seeds == [7, 8, 9]
    runs = [_sampled(sched, f"choice{s}", s) for s in seeds]
    assert len({tuple(r) for r in runs}) == 3
    again = [_sampled(sched, f"again{s}", s) for s in seeds]
    assert again == runs
    single = GenerateReqInput(input_ids=PROMPT, sampling_params={"sampling_seed": 7})
    single.normalize_batch_and_arguments()
    assert single.sampling_params["sampling_seed"] == seeds[0]


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_web_llm_335_openai_n_with_seed_reaches_each_choice(tok: Any, route: str) -> None:
    """mlc-ai/web-llm#335 on the OpenAI routes: ``seed`` with ``n: 3`` must not give the three
    choices one seed (identical choices). Expected: the engine receives three sampling parameter
    sets whose seeds are ``seed, seed + 1, seed + 2`` (vLLM's per-choice rule)."""
    body: dict[str, Any] = {"model": "dsv4-test", "n": 3, "seed": 3, "max_tokens": 2}
    if route.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "Hi"}]
    else:
        body["prompt"] = "Hi"
    tm = FakeTM(tok)
    r = app_client(tm).post(route, json=body)
    assert r.status_code == 200, r.text
    sent = tm.received[-1].sampling_params
    assert isinstance(sent, list) and [p["sampling_seed"] for p in sent] == [3, 4, 5]
    assert len(r.json()["choices"]) == 3


def test_mlx_vlm_1818_unseeded_requests_are_not_a_fixed_seed(sched: Scheduler) -> None:
    """Blaizzy/mlx-vlm#1818: chat completions were identical across requests unless a ``seed``
    was sent (the server used a fixed default seed). Expected: three unseeded temperature-1.5
    requests for the same prompt are not all the same 8 tokens, while a seeded request repeats
    itself (so the comparison can tell the two apart)."""
    runs = {tuple(_sampled(sched, f"free{i}", None)) for i in range(3)}
    assert len(runs) > 1
    assert _sampled(sched, "s1", 1234) == _sampled(sched, "s2", 1234)

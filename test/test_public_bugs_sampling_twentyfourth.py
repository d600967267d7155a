"""A twenty-fourth set of public reports on sampling parameters: ``logit_bias`` under greedy
decoding and as a ban, ``top_k`` at 0 and past the vocabulary, ``top_p = 1`` beside a large
``top_k``, seeds beside other rows, ``ignore_eos`` against ``stop_token_ids``, and the logprob of
the token that ends a request. Each test names its report.

Fault found here, fixed:

* A row with ``top_k`` set and the default ``top_p = 1`` went through the nucleus cut as well,
  and on a large vocabulary the float32 running sum of its sorted probabilities rounds past 1.0
  before the last tokens (a peaked row over 32k tokens: from rank ~30.7k on), so ``top_k=31999``
  kept only ~30.7k tokens (BlinkDL/ChatRWKV#170, guoqingbao/attention.rs#9). ``filter_probs``
  now applies the nucleus cut only for a ``top_p`` below 1 in float32 (``1 - 1e-8`` is 1.0
  there and failed the same way; ``sampling/sampler.py``), which keeps exactly what
  transformers' ``TopKLogitsWarper`` + ``TopPLogitsWarper(top_p=1.0)`` keep.

Reports that showed no fault here (their tests are regression guards): the ``top_p`` boundary
(a token is dropped when the mass ranked before it exceeds ``top_p``) and the whole top-k /
top-p / min-p filter are SGLang's own (huggingface/transformers#18976); a seeded row draws the
same token beside a filtering or greedy batchmate (sgl-project/sglang#35697); seeded ``top_k`` /
``min_p`` copies in one batch repeat their cold run (vllm-project/vllm#16945) and ``seed``
reaches the engine from both OpenAI routes (sgl-project/sglang#15481); ``logit_bias`` is applied
before the greedy argmax (cactus-compute/cactus#507) and reaches the engine from the chat route
(openai/openai-python#451); a ``-100`` bias bans its token from sampled output
(ggml-org/llama.cpp#19699); ``top_k: 0`` never means greedy: on the OpenAI routes it is vLLM's
"disabled" (vllm-project/vllm#17773, abetlen/llama-cpp-python#220, SillyTavern/SillyTavern#1823,
ggml-org/llama.cpp#13171) and in ``/generate``'s own parameters SGLang's 400, while a ``top_k``
past the vocabulary keeps every token; ``ignore_eos`` disables ``stop_token_ids`` and the model's
EOS alike, SGLang's rule (tenstorrent/vllm#349, xLLM-AI/xllm#1804) and the chat route carries it
(sgl-project/sglang#1645); the token that ends a request keeps its logprob
(ikawrakow/ik_llama.cpp#998, InternLM/lmdeploy#4000).

Fixtures: the in-process ``Scheduler`` on the random test checkpoint (``sched_model_dir``,
vocabulary 1000, EOS id 1) and the OpenAI routes over the fake tokenizer manager. Oracles:
float64 references of the argmax / top-k / top-p / min-p rules, transformers' top-k and top-p
warpers, SGLang 0.5.23's own ``SamplingParams.verify``, ``Req._check_token_based_finish`` and
torch top-k / top-p / min-p filter (the last two compiled from the installed source,
``sglang_source_testutil``), cold runs of the same request, the forced token's position.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from openai_fake_tm import FakeTM, app_client
from sampling_testutil import sglang_sampling_params
from scheduler_testutil import drain, make_scheduler, submit
from sglang_source_testutil import sglang_function
from sglang_v4.managers.scheduler import Scheduler
from sglang_v4.sampling.sampler import filter_probs, sample
from sglang_v4.sampling.sampling_params import SamplingParams
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

PROMPT = [5, 17, 256, 99, 42, 311, 7, 64]
EOS = 1  # the test checkpoint's eos_token_id
FORCED = 123  # a token forced with a +100 bias (not EOS)
ROW = [2.0, 1.9, 1.2, 0.5, 0.4, 0.0, -1.0, 1.0]
CHAT = {"model": "dsv4-test", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
COMPLETION = {"model": "dsv4-test", "prompt": "Hi", "max_tokens": 4}


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir)


def _softmax64(row: list[float]) -> list[float]:
    m = max(row)
    e = [math.exp(x - m) for x in row]
    s = sum(e)
    return [x / s for x in e]


def _sent(tok: Any, route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None, str]:
    """POST ``body`` to ``route`` over the fake tokenizer manager: the status, the sampling
    params the engine received (``None`` when nothing was sent) and the response text."""
    tm = FakeTM(tok)
    r = app_client(tm).post(route, json=body)
    sp = tm.received[-1].sampling_params if tm.received else None
    if isinstance(sp, list):
        sp = sp[0]
    return r.status_code, sp, r.text


# --------------------------------------------------------------------------- logit_bias


@pytest.mark.parametrize(("token", "bias"), [(3, 5.0), (6, 3.5), (0, -0.2), (1, -100.0)])
def test_cactus_507_logit_bias_applies_before_greedy(token: int, bias: float) -> None:
    """cactus-compute/cactus#507: greedy sampling (temperature 0) returned the argmax of the raw
    logits, skipping ``logit_bias``. Expected: the greedy row's token is the argmax of the biased
    logits (float64 reference, ties to the lower id), beside a sampled row and an unbiased greedy
    row in the same batch (which keeps the raw argmax)."""
    biased = [x + (bias if i == token else 0.0) for i, x in enumerate(ROW)]
    want = max(range(len(biased)), key=lambda i: (biased[i], -i))
    sp = SamplingParams(temperature=0.0, logit_bias={str(token): bias})
    plain = SamplingParams(temperature=0.0)
    hot = SamplingParams(temperature=1.0)
    for p in (sp, plain, hot):
        p.normalize(None)
    gens = [None, None, torch.Generator().manual_seed(0)]
    ids = sample(torch.tensor([ROW, ROW, ROW]), [sp, plain, hot], [[], [], []], generators=gens)
    assert ids[0].item() == want
    assert ids[1].item() == 0


def test_cactus_507_greedy_request_follows_its_bias_in_the_scheduler(sched: Scheduler) -> None:
    """cactus-compute/cactus#507 through the scheduler (the all-greedy batch takes a plain argmax
    fast path that must not be used for a biased row). Expected: a temperature-0 request with
    ``+100`` on one token gives that token every step; with ``-100`` on each token of the cold
    unbiased run's output, none of them comes back; the unbiased request batched beside them
    repeats the cold run."""
    submit(sched, "cold", PROMPT, 6)
    cold = drain(sched)["cold"]["ids"]
    assert len(cold) == 6
    submit(sched, "plus", PROMPT, 6, sampling={"logit_bias": {str(FORCED): 100.0}})
    submit(sched, "minus", PROMPT, 6, sampling={"logit_bias": {str(t): -100.0 for t in set(cold)}})
    submit(sched, "plain", PROMPT, 6)
    res = drain(sched)
    assert res["plus"]["ids"] == [FORCED] * 6
    assert len(res["minus"]["ids"]) == 6 and not set(res["minus"]["ids"]) & set(cold)
    assert res["plain"]["ids"] == cold


def test_llama_cpp_19699_negative_bias_bans_tokens_from_sampled_output(sched: Scheduler) -> None:
    """ggml-org/llama.cpp#19699: a ``-100`` logit bias had no effect, the banned token was still
    generated. Expected: a seeded temperature-1 request whose cold run drew tokens ``S``, rerun
    with ``-100`` on every token of ``S``, draws none of them (the bias leaves their probability
    ``exp(-100)`` smaller), while the unbiased seeded rerun repeats the cold run."""
    sampling = {"temperature": 1.0, "sampling_seed": 77}
    submit(sched, "cold", PROMPT, 8, sampling=sampling)
    cold = drain(sched)["cold"]["ids"]
    banned = {str(t): -100.0 for t in set(cold)}
    submit(sched, "ban", PROMPT, 8, sampling={**sampling, "logit_bias": banned})
    submit(sched, "again", PROMPT, 8, sampling=sampling)
    res = drain(sched)
    assert len(res["ban"]["ids"]) == 8 and not set(res["ban"]["ids"]) & set(cold)
    assert res["again"]["ids"] == cold


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_openai_python_451_logit_bias_reaches_the_engine(tok: Any, route: str) -> None:
    """openai/openai-python#451: ``logit_bias`` had an effect on the completions endpoint but not
    on chat. Expected: both routes send the request's bias to the engine, keyed by token id, with
    its values (``-100`` bans, ``+5`` favours)."""
    base = CHAT if "chat" in route else COMPLETION
    status, sp, text = _sent(tok, route, {**base, "temperature": 0, "logit_bias": {"7738": -100, "445": 5}})
    assert status == 200, text
    assert sp is not None
    assert {int(k): v for k, v in sp["logit_bias"].items()} == {7738: -100, 445: 5}


# --------------------------------------------------------------------------- top_k


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_vllm_17773_top_k_zero_on_the_openai_routes_is_disabled(tok: Any, route: str) -> None:
    """abetlen/llama-cpp-python#220, SillyTavern/SillyTavern#1823, ggml-org/llama.cpp#13171:
    ``top_k: 0``, meant as "disabled", acted as ``top_k: 1`` (greedy) or slowed sampling down.
    vLLM reads 0 as disabled since vllm-project/vllm#17773 (as Hugging Face does). Expected: the
    OpenAI routes send ``top_k: 0`` to the engine as SGLang's "whole vocabulary" (-1), exactly as
    ``top_k: -1``, never 1; a positive ``top_k`` is sent as it is."""
    base = CHAT if "chat" in route else COMPLETION
    got = {}
    for k in (0, -1, 1, 40):
        status, sp, text = _sent(tok, route, {**base, "top_k": k})
        assert status == 200, text
        assert sp is not None
        got[k] = sp.get("top_k", -1)
    assert got == {0: -1, -1: -1, 1: 1, 40: 40}


def test_top_k_zero_in_generate_params_is_refused_as_sglang() -> None:
    """The same reports for ``/generate``'s own sampling parameters, which follow SGLang: there
    ``top_k: 0`` is no value (SGLang 0.5.23's ``verify`` refuses it, naming ``top_k``), so it is
    refused rather than silently turned into greedy decoding; -1 and 1 are accepted by both."""
    with pytest.raises(ValueError, match="top_k"):
        sglang_sampling_params(top_k=0).verify(1000)
    with pytest.raises(ValueError, match="top_k"):
        SamplingParams(top_k=0).verify(1000)
    for k in (-1, 1):
        sglang_sampling_params(top_k=k).verify(1000)
        SamplingParams(top_k=k).verify(1000)
    assert not SamplingParams(top_k=-1).is_greedy


@pytest.mark.parametrize("top_k", [len(ROW), len(ROW) + 1, 10**9])
def test_vllm_17773_top_k_past_the_vocabulary_keeps_every_token(top_k: int) -> None:
    """vllm-project/vllm#17773's review: a ``top_k`` at or past the vocabulary size truncates
    nothing (vLLM then disables top-k). Expected: ``filter_probs`` leaves the softmax of the row
    whole (float64 reference), as ``top_k=-1`` does, and the OpenAI-sized value is accepted."""
    p = _softmax64(ROW)
    sp = SamplingParams(top_k=top_k)
    sp.verify(len(ROW))
    got = filter_probs(torch.tensor([p], dtype=torch.float32), [sp])
    assert got[0].tolist() == pytest.approx(p, abs=1e-7)
    whole = filter_probs(torch.tensor([p], dtype=torch.float32), [SamplingParams(top_k=-1)])
    assert torch.equal(got, whole)


@pytest.mark.parametrize("top_p", [1.0, 1.0 - 1e-8])
@pytest.mark.parametrize(("vocab", "top_k"), [(32000, 31999), (32000, 31500), (129280, 120000)])
def test_chatrwkv_170_top_p_one_keeps_what_top_k_keeps(vocab: int, top_k: int, top_p: float) -> None:
    """BlinkDL/ChatRWKV#170 (``top_p = 1`` did not keep the whole distribution) and
    guoqingbao/attention.rs#9 (the float32 running sum of top-p rounds on a large vocabulary):
    with ``top_k`` set, a row with the default ``top_p = 1`` went through the nucleus cut too,
    and where the float32 running sum of its sorted probabilities rounded past 1.0 (a peaked row
    over 32k+ tokens) every later token was dropped, well inside ``top_k``; so did a ``top_p``
    that float32 stores as 1.0 (``1 - 1e-8``). Expected: exactly the tokens transformers' own
    ``TopKLogitsWarper`` + ``TopPLogitsWarper(top_p=1.0)`` keep (the ``top_k`` largest), with
    their probabilities unchanged."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(1, vocab, generator=g) * 3.0
    probs = torch.softmax(z, dim=-1)
    ps = probs.sort(dim=-1, descending=True).values
    assert float((torch.cumsum(ps, dim=-1) - ps)[0, top_k - 1]) > 1.0, "case does not round past 1"
    hf = TopPLogitsWarper(top_p=1.0)(None, TopKLogitsWarper(top_k=top_k)(None, z.clone()))
    want = torch.isfinite(hf[0])
    assert int(want.sum()) == top_k
    assert torch.tensor(top_p, dtype=torch.float32).item() == 1.0
    got = filter_probs(probs.clone(), [SamplingParams(top_k=top_k, top_p=top_p)])
    assert torch.equal(got[0] > 0, want)
    assert torch.equal(got[0][want], probs[0][want])


def _sglang_filtered(probs: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """SGLang 0.5.23's own torch top-k / top-p / min-p filter
    (``top_k_top_p_min_p_sampling_from_probs_torch`` with ``return_filtered_probs``), its kept
    weights put back in token order (``[R, V]``, dropped tokens 0)."""
    fn = sglang_function(
        "srt/layers/sampler.py",
        "top_k_top_p_min_p_sampling_from_probs_torch",
        {"torch": torch, "Optional": Any},
    )
    vocab = probs.shape[-1]
    ks = torch.tensor([p.top_k if 0 < p.top_k < vocab else vocab for p in params])
    tps = torch.tensor([p.top_p for p in params], dtype=torch.float32)
    mps = torch.tensor([p.min_p for p in params], dtype=torch.float32)
    need_min_p = any(p.min_p > 0 for p in params)
    _, kept, idx, _ = fn(probs.clone(), ks, tps, mps, need_min_p, None, None, return_filtered_probs=True)
    return torch.zeros_like(probs).scatter_(1, idx.long(), kept)


def test_transformers_18976_top_p_boundary_follows_sglang() -> None:
    """huggingface/transformers#18976: with probabilities ``[0.3, 0.1, 0.1, 0.5]`` and
    ``top_p=0.8`` transformers kept a third token although the first two sum to exactly 0.8
    (transformers then moved to keeping the smallest set reaching ``top_p``). The project follows
    SGLang's rule instead (a token is dropped when the mass ranked before it *exceeds*
    ``top_p``). Expected: the kept tokens and weights are SGLang 0.5.23's own torch filter's, on
    the report's row and on random rows under mixed ``top_k`` / ``top_p`` / ``min_p``; for the
    report's row that is 0.5, 0.3 and one 0.1 (the lower id of the tie)."""
    row = torch.tensor([[0.3, 0.1, 0.1, 0.5]])
    sp = SamplingParams(top_p=0.8)
    got = filter_probs(row.clone(), [sp])
    want = _sglang_filtered(row, [sp])
    assert sorted(got[0].tolist()) == sorted(want[0].tolist())
    assert got[0].tolist() == pytest.approx([0.3, 0.1, 0.0, 0.5])
    g = torch.Generator().manual_seed(5)
    probs = torch.softmax(torch.randn(6, 2000, generator=g) * 2.5, dim=-1)
    params = [
        SamplingParams(top_p=0.5),
        SamplingParams(top_k=40, top_p=0.9),
        SamplingParams(top_k=1500),
        SamplingParams(min_p=0.05),
        SamplingParams(top_k=200, top_p=0.95, min_p=0.01),
        SamplingParams(),
    ]
    got = filter_probs(probs.clone(), params)
    want = _sglang_filtered(probs, params)
    assert torch.equal(got > 0, want > 0)
    assert torch.equal(got, want)


# --------------------------------------------------------------------------- seeds


@pytest.mark.parametrize(
    "mate",
    [
        {"temperature": 0.0},
        {"top_k": 5},
        {"top_p": 0.3},
        {"min_p": 0.2},
        {"top_k": 2000, "top_p": 0.9},
    ],
)
def test_sglang_35697_seeded_row_ignores_a_filtering_batchmate(mate: dict[str, Any]) -> None:
    """sgl-project/sglang#35697: a seeded row's token changed when another request in its batch
    enabled top-k / top-p / min-p (or was greedy): the batch then switched every row onto the
    sorted path, whose seeded noise was indexed by rank, not token id. Expected: for 16 seeds a
    seeded temperature-1 row over a 4096-token vocabulary draws the same token alone and beside
    each kind of batchmate (the cold single-row draw is the oracle), and the batchmate's own
    token obeys its filter (float64 reference of its kept set)."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 4096, generator=g) * 2.0
    row = SamplingParams(temperature=1.0)
    other = SamplingParams(**{"temperature": 1.0, **mate})
    for p in (row, other):
        p.normalize(None)
    p64 = torch.softmax(logits[1].double() / other.temperature, dim=-1)
    order = sorted(range(4096), key=lambda i: (-float(p64[i]), i))
    excl, kept = 0.0, set()
    for rank, i in enumerate(order):
        if rank >= (other.top_k if other.top_k > 0 else 4096) or excl > other.top_p:
            break
        if float(p64[i]) >= other.min_p * float(p64[order[0]]):
            kept.add(i)
        excl += float(p64[i])
    for seed in range(16):
        alone = sample(logits[:1], [row], [[]], generators=[torch.Generator().manual_seed(seed)])
        both = sample(logits, [row, other], [[], []], generators=[torch.Generator().manual_seed(seed), None])
        assert both[0].item() == alone[0].item(), seed
        assert both[1].item() in kept


def test_vllm_16945_seeded_top_k_min_p_requests_repeat_in_one_batch(sched_model_dir: str) -> None:
    """vllm-project/vllm#16945: ten copies of one prompt with ``temperature=0.1, min_p=0.8,
    top_k=12`` in one batch gave different outputs (there without a seed); with ``seed`` set,
    sgl-project/sglang#15481 found it had no effect on one route. Expected: four copies of one
    request with the same ``sampling_seed`` in one batch produce identical outputs, equal to a
    cold run of the request alone on a fresh scheduler; a copy with another seed at
    temperature 1 is repeatable too (its own cold run)."""
    sp = {"temperature": 0.1, "min_p": 0.8, "top_k": 12, "sampling_seed": 7}
    hot = {"temperature": 1.0, "top_k": 12, "sampling_seed": 8}
    s = make_scheduler(sched_model_dir)
    submit(s, "cold", PROMPT, 8, sampling=sp)
    submit(s, "cold_hot", PROMPT, 8, sampling=hot)
    cold = drain(s)
    s = make_scheduler(sched_model_dir)
    for k in range(4):
        submit(s, f"c{k}", PROMPT, 8, sampling=sp)
    submit(s, "hot", PROMPT, 8, sampling=hot)
    res = drain(s)
    assert len(cold["cold"]["ids"]) == 8
    assert all(res[f"c{k}"]["ids"] == cold["cold"]["ids"] for k in range(4))
    assert res["hot"]["ids"] == cold["cold_hot"]["ids"]


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_sglang_15481_openai_seed_reaches_the_engine(tok: Any, route: str) -> None:
    """sgl-project/sglang#15481: ``seed`` on ``/v1/completions`` had no effect while
    ``sampling_seed`` on ``/generate`` did. Expected: both OpenAI routes send ``seed`` to the
    engine as ``sampling_seed`` (the field the scheduler seeds the request's generator from)."""
    base = CHAT if "chat" in route else COMPLETION
    for seed in (0, 42, 2**40):
        status, sp, text = _sent(tok, route, {**base, "temperature": 1, "seed": seed})
        assert status == 200, text
        assert sp is not None and sp["sampling_seed"] == seed


# --------------------------------------------------------------------------- ignore_eos


def _sglang_token_finish(token: int, stop_token_ids: set[int] | None, ignore_eos: bool) -> bool:
    """SGLang 0.5.23's own token-stop rule for one new token, the model's EOS being ``EOS``: the
    source of ``Req._check_token_based_finish`` in the installed ``schedule_batch.py``, run on a
    stand-in request (the module itself imports vision packages this environment lacks)."""
    finish = sglang_function(
        "srt/managers/schedule_batch.py",
        "_check_token_based_finish",
        {"List": list, "FINISH_MATCHED_TOKEN": lambda matched: {"matched": matched}},
        class_name="Req",
    )
    fake = SimpleNamespace(
        sampling_params=SimpleNamespace(ignore_eos=ignore_eos, stop_token_ids=stop_token_ids),
        eos_token_ids={EOS},
        tokenizer=None,
        output_ids=[token],
        finished_reason=None,
        finished_len=None,
    )
    return bool(finish(fake, [token]))


@pytest.mark.parametrize("ignore_eos", [False, True])
@pytest.mark.parametrize("forced", [FORCED, EOS])
def test_tenstorrent_vllm_349_ignore_eos_disables_stop_token_ids(
    sched: Scheduler, ignore_eos: bool, forced: int
) -> None:
    """tenstorrent/vllm#349 and xLLM-AI/xllm#1804: with ``ignore_eos`` the EOS check was skipped
    but ``stop_token_ids`` (and other built-in stop tokens) still ended the request, so
    benchmarks meant to run to the length limit stopped early. Expected, SGLang 0.5.23's rule
    (its ``_check_token_based_finish`` is the oracle): with ``ignore_eos`` neither a forced
    ``stop_token_ids`` token nor the forced model EOS ends the request (it runs to
    ``max_new_tokens``, finish ``length``); without it the first token ends it."""
    stops = {FORCED}
    stopped = _sglang_token_finish(forced, stops, ignore_eos)
    sampling = {"logit_bias": {str(forced): 100.0}, "stop_token_ids": sorted(stops), "ignore_eos": ignore_eos}
    submit(sched, "r", PROMPT, 5, ignore_eos=ignore_eos, sampling=sampling)
    r = drain(sched)["r"]
    if stopped:
        assert r["ids"] == [forced]
        assert r["finish"] == {"type": "stop", "matched": forced}
    else:
        assert r["ids"] == [forced] * 5
        assert r["finish"] == {"type": "length", "length": 5}
    assert stopped is not ignore_eos


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_sglang_1645_chat_route_carries_ignore_eos(tok: Any, ignore_eos: bool) -> None:
    """sgl-project/sglang#1645: ``ignore_eos`` sent to the chat completions route was lost on the
    way to the engine. Expected: the engine receives the request's value on both routes, with its
    ``stop_token_ids`` unchanged."""
    for route, base in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
        status, sp, text = _sent(tok, route, {**base, "ignore_eos": ignore_eos, "stop_token_ids": [5]})
        assert status == 200, text
        assert sp is not None
        assert sp["ignore_eos"] is ignore_eos
        assert sp["stop_token_ids"] == [5]


# --------------------------------------------------------------------------- logprob of the last token


@pytest.mark.parametrize("how", ["eos", "stop_token_ids"])
def test_ik_llama_998_the_ending_token_keeps_its_logprob(sched: Scheduler, how: str) -> None:
    """ikawrakow/ik_llama.cpp#998 and InternLM/lmdeploy#4000: the logprob of the token that ended
    the request (EOS, a stop token) was dropped, so the logprobs were one shorter than the output
    tokens. Expected: the request ends on its third token (EOS or the stop token, forced and held
    back by ``min_new_tokens=2``), returns three ids and three finite logprobs, the last one that
    of the ending token, near 0 under its ``+100`` bias."""
    stop = EOS if how == "eos" else FORCED
    sampling: dict[str, Any] = {"logit_bias": {str(stop): 100.0}, "min_new_tokens": 2}
    if how == "stop_token_ids":
        sampling["stop_token_ids"] = [FORCED]
    submit(sched, "r", PROMPT, 8, ignore_eos=False, sampling=sampling, return_logprob=True)
    r = drain(sched)["r"]
    assert r["finish"] == {"type": "stop", "matched": stop}
    assert len(r["ids"]) == 3 and r["ids"][-1] == stop and stop not in r["ids"][:2]
    assert len(r["lp"]) == 3 and all(math.isfinite(v) for v in r["lp"])
    assert r["lp"][-1] == pytest.approx(0.0, abs=1e-3)

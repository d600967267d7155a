"""A twenty-first set of public reports on sampling parameters: per-request seeds, ``seed: -1``,
``min_new_tokens`` at its boundary (with and without a tokenizer) and ``min_p`` in a mixed batch.
Each test names its report.

Faults found here, fixed:

* A request's ``sampling_seed`` seeded the CPU generator with ``manual_seed``, whose Mersenne
  Twister reads only the low 32 bits of the seed: seeds ``0``, ``2**32`` and ``-2**63`` drew one
  stream, ``-1`` and ``2**63 - 1`` another (numpy/numpy#4676, Lightning-AI/pytorch-lightning#21399).
  A seed outside ``[0, 2**32)`` now fills the state with the reference ``init_by_array`` of its two
  halves (``sampling/seeded_generator.py``); seeds in ``[0, 2**32)`` keep their streams.
* ``seed: -1`` on the OpenAI routes seeded the request with -1; vLLM (vllm-project/vllm#4531), like
  llama.cpp's server, reads it as "no seed" (clients that cannot leave the field out send it). It
  now leaves the request unseeded (``openai/request_sampling.py:RANDOM_SEED``).

Reports that showed no fault here (their tests are regression guards): ``min_tokens=N`` lets EOS
through at the ``N+1``-th token, not one later (vllm-project/vllm#46243); ``min_new_tokens`` masks
EOS with ``--skip-tokenizer-init`` too (sgl-project/sglang#9039); a ``min_p`` row batched with
plain rows (sgl-project/sglang#3284); a penalised row leaves its batch neighbours alone
(huggingface/text-generation-inference#1810); a penalised request joining a running penalised
batch (sgl-project/sglang#1001); frequency / presence penalties count the whole output, not a
recent window (raullenchai/Rapid-MLX#510).

Fixtures: the in-process ``Scheduler`` on the random test checkpoint (``sched_model_dir``,
vocabulary 1000, EOS id 1); the OpenAI routes' sampling builder and the engine request's ``n``
fan-out for ``seed``. Oracles: numpy's MT19937 (``RandomState``'s array seeding),
``torch.Generator.manual_seed``, cold runs of the same request, the forced token's position,
float64 references of the min-p rule and of OpenAI's penalty formula, vLLM's documented ``seed``
rule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from scheduler_testutil import drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler
from sglang_v4.sampling.sampler import sample
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.seeded_generator import mt19937_init_by_array, seeded_generator

PROMPT = [5, 17, 256, 99, 42, 311, 7, 64]
EOS = 1  # the test checkpoint's eos_token_id


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir)


def _sampled_runs(s: Scheduler, seeds: dict[str, int], n: int = 8) -> dict[str, list[int]]:
    """Output ids of one batch of temperature-1 requests, one per ``rid: seed``."""
    for rid, seed in seeds.items():
        submit(s, rid, PROMPT, n, sampling={"temperature": 1.0, "sampling_seed": seed})
    res = drain(s)
    return {rid: res[rid]["ids"] for rid in seeds}


# --------------------------------------------------------------------------- 64-bit seeds


def test_init_by_array_is_the_reference_mt19937_seeding() -> None:
    """numpy/numpy#4676: numpy's ``RandomState`` truncated seeds to 32 bits, so 1 and 1 + 2**40
    drew one stream; its fix seeds from an array of 32-bit words with the reference
    ``init_by_array``. The state words built here for a 64-bit seed's two halves equal numpy's
    for the same array (the independent oracle), and the ones of two seeds 2**32 apart differ."""
    for seed in (2**32, 1 + 2**40, 2**63 - 1, 2**64 - 1, 12345678901234567):
        key = [seed & 0xFFFFFFFF, seed >> 32]
        want = np.random.RandomState(np.array(key, dtype=np.uint32)).get_state()[1].tolist()
        assert mt19937_init_by_array(key) == want, seed
    assert mt19937_init_by_array([1, 0]) != mt19937_init_by_array([1, 1 << 8])
    with pytest.raises(ValueError, match="32-bit"):
        mt19937_init_by_array([2**32])


def test_seeds_that_share_their_low_32_bits_draw_different_streams(sched: Scheduler) -> None:
    """Lightning-AI/pytorch-lightning#21399: ``torch.manual_seed`` on CPU reads only the low 32
    bits, so seeds built by shifting a small seed left by 32 all drew one stream. Here seeds 0,
    2**32 and -2**63 (low bits 0) gave one output and -1 and 2**63 - 1 (low bits all ones)
    another. Expected: five different outputs, each the same on a second (cold) run; a seed
    below 2**32 keeps the stream ``manual_seed`` gives it (the generator's state is torch's)."""
    seeds = {"zero": 0, "two32": 2**32, "min64": -(2**63), "minus1": -1, "max64": 2**63 - 1}
    first = _sampled_runs(sched, seeds)
    assert len({tuple(v) for v in first.values()}) == len(seeds), first
    again = _sampled_runs(sched, {f"{k}2": v for k, v in seeds.items()})
    assert {k[:-1]: v for k, v in again.items()} == first
    for seed in (0, 7, 2**32 - 1):
        ours, torchs = seeded_generator(seed, "cpu"), torch.Generator().manual_seed(seed)
        assert torch.equal(ours.get_state(), torchs.get_state())
    assert seeded_generator(2**32 + 7, "cpu").initial_seed() == 2**32 + 7
    assert seeded_generator(-1, "cpu").initial_seed() == 2**64 - 1


def test_seeded_generator_refuses_seeds_outside_64_bits() -> None:
    """The seed range is the one ``sampling_seed`` accepts, read as 64-bit two's complement;
    anything wider is a ``ValueError`` naming the seed, never a silent wrap."""
    for bad in (2**64, -(2**63) - 1):
        with pytest.raises(ValueError, match="seed must be in"):
            seeded_generator(bad, "cpu")


# --------------------------------------------------------------------------- seed: -1 (OpenAI)


def _seeds_sent(route: str, body: dict[str, Any]) -> list[Any]:
    """The ``sampling_seed`` of every sampling-parameter set a completions / chat request with
    ``body`` reaches the engine with: the route's sampling builder, then the engine request's
    fan-out of ``n`` (``GenerateReqInput.normalize_batch_and_arguments``)."""
    from sglang_v4.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
    from sglang_v4.entrypoints.openai.request_sampling import build_sampling_params
    from sglang_v4.managers.io_struct import GenerateReqInput

    if route == "chat":
        req: Any = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Hi"}], **body)
    else:
        req = CompletionRequest(model="m", prompt="Hi", **body)
    sp = build_sampling_params(
        req, 3, tokenizer=None, vocab_size=None, grammar_enabled=False, chat_defaults={}
    )
    obj = GenerateReqInput(text="Hi", sampling_params=sp)
    obj.normalize_batch_and_arguments()
    sps = obj.sampling_params
    return [p.get("sampling_seed") for p in (sps if isinstance(sps, list) else [sps])]


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_seed_minus_one_asks_for_a_random_draw(route: str) -> None:
    """vllm-project/vllm#4531: clients that cannot leave ``seed`` out send ``-1`` for "random"
    (llama.cpp's server reads it so, and vLLM since this report). Expected: ``seed: -1`` reaches
    the engine unseeded, alone and with ``n=2``; ``-2`` and ``0`` stay seeds (``n=2``: seed + k)."""
    assert _seeds_sent(route, {"seed": -1}) == [None]
    assert _seeds_sent(route, {"seed": -1, "n": 2}) == [None, None]
    assert _seeds_sent(route, {"seed": -2, "n": 2}) == [-2, -1]
    assert _seeds_sent(route, {"seed": 0}) == [0]


# --------------------------------------------------------------------------- min_new_tokens


def test_min_tokens_lets_eos_through_at_the_next_token(sched: Scheduler) -> None:
    """vllm-project/vllm#46243: with EOS forced (``logit_bias`` +100), ``min_tokens=N`` must give
    ``N`` other tokens then EOS (``N + 1`` in all); vLLM's V2 sampler released EOS one step late
    (``N + 2``). Expected here for N = 0..3: exactly ``N + 1`` tokens, the last one EOS, finish
    ``stop`` matching EOS."""
    bias = {"logit_bias": {str(EOS): 100.0}}
    for n in range(4):
        submit(sched, f"min{n}", PROMPT, 10, ignore_eos=False, sampling={**bias, "min_new_tokens": n})
    res = drain(sched)
    for n in range(4):
        r = res[f"min{n}"]
        assert len(r["ids"]) == n + 1 and r["ids"][-1] == EOS and EOS not in r["ids"][:-1], (n, r["ids"])
        assert r["finish"] == {"type": "stop", "matched": EOS}


def test_min_new_tokens_masks_eos_without_a_tokenizer(sched_model_dir: str, sched: Scheduler) -> None:
    """sgl-project/sglang#9039: with ``skip_tokenizer_init`` a ``min_new_tokens`` request broke
    the batch (the penalizer looked EOS up through the missing tokenizer). Expected: the request
    runs, EOS (forced) is held back for 3 tokens, and the ids equal the tokenizer-backed run's
    (the cold run on the same checkpoint)."""
    s = make_scheduler(sched_model_dir, skip_tokenizer_init=True)
    sp = {"logit_bias": {str(EOS): 100.0}, "min_new_tokens": 3}
    submit(s, "no_tok", PROMPT, 10, ignore_eos=False, sampling=sp)
    got = drain(s)["no_tok"]
    submit(sched, "tok", PROMPT, 10, ignore_eos=False, sampling=sp)
    want = drain(sched)["tok"]
    assert got["ids"] == want["ids"] and len(got["ids"]) == 4 and got["ids"][-1] == EOS
    assert got["finish"] == {"type": "stop", "matched": EOS}


# --------------------------------------------------------------------------- min_p


def test_min_p_row_in_a_mixed_batch_keeps_only_its_candidates() -> None:
    """sgl-project/sglang#3284: a request with ``min_p`` crashed the sampler (the min-p kernel
    was called with the wrong arguments) when batched. Expected: a batch of a ``min_p=0.3`` row,
    a plain row and a greedy row samples; the min-p row only ever picks tokens with
    ``p >= 0.3 * max p`` (float64 softmax of the row), the greedy row the argmax, and the plain
    row reaches tokens outside the min-p set."""
    row = [2.0, 1.9, 1.2, 0.5, 0.4, 0.0, -1.0, 1.0]
    ref = [math.exp(x) for x in row]
    allowed = {i for i, p in enumerate(ref) if p >= 0.3 * max(ref)}
    assert allowed == {0, 1, 2, 7}
    params = [SamplingParams(min_p=0.3), SamplingParams(), SamplingParams(temperature=0)]
    seen: list[set[int]] = [set(), set(), set()]
    for k in range(300):
        gens = [torch.Generator().manual_seed(3 * k + j) for j in range(3)]
        ids = sample(torch.tensor([row] * 3), params, [[]] * 3, generators=gens).tolist()
        for j, t in enumerate(ids):
            seen[j].add(t)
    assert seen[0] <= allowed and len(seen[0]) > 1, seen[0]
    assert seen[2] == {0}
    assert seen[1] - allowed, seen[1]


# --------------------------------------------------------------------------- penalties


def _cold(s: Scheduler, rid: str, prompt: list[int], n: int, sampling: dict[str, Any]) -> list[int]:
    """The output ids of ``sampling`` run alone (greedy unless ``sampling`` says otherwise)."""
    submit(s, rid, prompt, n, sampling=sampling)
    return drain(s)[rid]["ids"]


def test_frequency_penalty_row_leaves_its_batch_neighbours_alone(sched: Scheduler) -> None:
    """huggingface/text-generation-inference#1810: one request with ``frequency_penalty`` in a
    batch corrupted every generation of the batch. Expected: a greedy batch of a plain request,
    a ``frequency_penalty=-2`` one and a ``presence_penalty=-2, repetition_penalty=1.5`` one
    gives each the ids of its own cold run, and the penalised runs differ from the plain one
    (the penalties act)."""
    other = [9, 8, 7, 6, 5, 4, 3, 2]
    cases = {
        "plain": {},
        "freq": {"frequency_penalty": -2.0},
        "pres_rep": {"presence_penalty": -2.0, "repetition_penalty": 1.5},
    }
    cold = {rid: _cold(sched, f"cold_{rid}", other, 10, sp) for rid, sp in cases.items()}
    assert cold["freq"] != cold["plain"] and cold["pres_rep"] != cold["plain"], cold
    for rid, sp in cases.items():
        submit(sched, rid, other, 10, sampling=sp)
    res = drain(sched)
    assert {rid: res[rid]["ids"] for rid in cases} == cold


def test_penalised_request_joining_a_running_penalised_batch(sched: Scheduler) -> None:
    """sgl-project/sglang#1001: a request with penalties that joined a running batch whose
    requests also had penalties broke the penalty merge (the batch's requests were extended
    before the penalty state). Expected: the first request runs 3 steps alone, the second joins;
    both finish with the ids of their cold runs."""
    a_sp, b_sp = {"frequency_penalty": -2.0}, {"presence_penalty": -2.0, "frequency_penalty": 0.5}
    a_prompt, b_prompt = [11, 12, 13, 14, 15, 16], [21, 22, 23, 24, 25]
    cold_a = _cold(sched, "cold_a", a_prompt, 10, a_sp)
    cold_b = _cold(sched, "cold_b", b_prompt, 10, b_sp)
    submit(sched, "a", a_prompt, 10, sampling=a_sp)
    got: dict[str, list[int]] = {"a": [], "b": []}
    for _ in range(3):
        out = sched.step()
        for i, rid in enumerate(out.rids if out else []):
            got[rid] += out.output_ids[i]
    assert 0 < len(got["a"]) < 10
    submit(sched, "b", b_prompt, 10, sampling=b_sp)
    res = drain(sched)
    assert (got["a"] + res["a"]["ids"], res["b"]["ids"]) == (cold_a, cold_b)


def test_frequency_penalty_counts_the_whole_output_not_a_recent_window() -> None:
    """raullenchai/Rapid-MLX#510: ``frequency_penalty`` / ``presence_penalty`` only saw the last
    20 generated tokens, while OpenAI's definition counts every output token. Expected, with 60
    output tokens where token 3 appears only among the first 5 (twice) and token 4 only in the
    last 20 (once): ``z[t] -= f * count(t) + p * [count(t) > 0]`` over the whole output (float64
    reference), the prompt's tokens uncounted."""
    from sglang_v4.sampling.penalties import apply_penalties

    out = [3, 10, 3, 11, 12] + [20 + (i % 30) for i in range(35)] + [4] + [50 + i for i in range(19)]
    assert len(out) == 60
    f, p = 0.7, 0.4
    row = [0.1 * i for i in range(80)]
    z = torch.tensor([row], dtype=torch.float32)
    apply_penalties(z, [SamplingParams(frequency_penalty=f, presence_penalty=p)], [out], [[5, 6, 3]])
    want = [x - (f * out.count(t) + p if t in out else 0.0) for t, x in enumerate(row)]
    assert z[0].tolist() == pytest.approx(want, abs=1e-5)
    assert want[3] == pytest.approx(0.3 - 2 * f - p) and want[5] == pytest.approx(0.5)

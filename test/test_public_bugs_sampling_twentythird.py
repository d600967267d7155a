"""A twenty-third set of public reports on sampling parameters: stop strings at the
``min_tokens`` boundary and one character long, output logprobs under ``temperature`` and
``top_p``, ``top_logprobs`` counts, and the validation of ``repetition_penalty`` and
``logit_bias`` keys. Each test names its report.

Faults found here, fixed:

* A stop string that begins in the text of the first ``min_new_tokens`` tokens and ends after it
  never ended the request: the stop checker searched only the text of the tokens after the first
  ``min_new_tokens``, so ``"Stop here"`` with ``min_tokens`` covering ``"Stop"`` ran on to the
  length limit. vLLM, whose ``min_tokens`` rule the check follows (vllm-project/vllm#22014), moves
  its search offset past the first ``min_tokens`` tokens' text and searches from
  ``len(stop) - 1`` characters before it, so such a string matches; SGLang 0.5.23 (no
  ``min_new_tokens`` rule for stop strings) matches it too. ``check_stop`` now takes a stop string
  that ends after that text wherever it begins (``sampling/stop_checker.py``), and the
  detokenizer cuts the final text at that occurrence (``managers/detokenizer_manager.py``).
* ``logit_bias`` keys naming one token id (``"5"`` and ``"05"``) were all added: ``+100`` and
  ``-100`` cancelled, two ``+60`` made ``+120`` (vllm-project/vllm#10741, a vectorised bias add).
  SGLang 0.5.23 and vLLM read the object as a dict keyed by ``int(key)``, the last key's value
  winning; the sampler now does too (``sampling/penalties.py``).

Reports that showed no fault here (their tests are regression guards): one-character stop
strings (huggingface/transformers#31435); output logprobs follow the temperature, temperature 0
giving the model's own distribution (standardcompletions/rfcs#11, ggml-org/llama.cpp#7197);
``top_p`` leaves ``top_logprobs`` whole (huggingface/text-generation-inference#2108); exactly
``k`` distinct ``top_logprobs`` entries (vllm-project/vllm#36660, InternLM/lmdeploy#1548); the
``repetition_penalty`` range is SGLang's (vllm-project/vllm#16403); a ``logit_bias`` key that is
no token id is a 400 (InternLM/lmdeploy#2370, sashabaranov/go-openai#129); seeded parallel samples
differ and repeat (thinking-machines-lab/tinker-feedback#79); a temperature just above the greedy
cut still samples (dphnAI/sonar#709).

Oracles: vLLM's incremental stop-string search (its ``update`` / ``check_stop_strings`` rule,
re-stated below), transformers' ``StopStringCriteria``, float64 ``log_softmax`` references, SGLang
0.5.23's own ``SamplingParams.verify`` and bias reading, the OpenAI error shape, cold runs.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from openai_fake_tm import FakeTM, app_client
from sampling_testutil import sglang_sampling_params
from scheduler_testutil import drain, make_scheduler, submit
from server_fixture import FAKE_EOS
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.sampling.logprobs import top_logprobs
from sglang_v4.sampling.penalties import apply_penalties
from sglang_v4.sampling.sampler import sample
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import check_stop
from stop_strings_testutil import SCRIPT, generate_with_stops
from transformers import StopStringCriteria

# --------------------------------------------------------------------------- helpers


def _vllm_stop(tok: Any, ids: list[int], stop: str, min_tokens: int) -> tuple[int, str] | None:
    """vLLM's stop-string rule, one token a step: the search offset moves past the text of the
    first ``min_tokens`` tokens, no search until more tokens exist, and each search starts
    ``len(stop) - 1`` characters before the new text (``output_text.find(stop, 1 -
    new_char_count - len(stop))``). Returns (tokens generated, text cut before the stop)."""
    text = ""
    for n in range(1, len(ids) + 1):
        offset = len(text)
        # an incremental detokenizer emits a character once all its bytes are there
        text = tok.decode(ids[:n]).rstrip("\ufffd")
        if n <= min_tokens:
            offset = len(text)
            continue
        new_chars = len(text) - offset
        if not new_chars:
            continue
        at = text.find(stop, 1 - new_chars - len(stop))
        if at >= 0:
            return n, text[:at]
    return None


# --------------------------------------------------------------------------- stop strings


@pytest.mark.parametrize(
    ("stop", "min_tokens"),
    [
        ("Stop here", 1),  # "Stop" is the head, " here" follows: matched (the fault)
        ("p here", 1),
        ("here, then", 2),  # begins in the 2-token head, ends after it
        ("Stop", 1),  # wholly inside the head: the second "Stop" is the match
        ("Stop again", 8),
        ("again at last", 9),
        ("on. Stop", 6),
        ("Stop here", 0),
    ],
)
def test_vllm_22014_stop_string_across_the_min_tokens_boundary(tok: Any, stop: str, min_tokens: int) -> None:
    """vllm-project/vllm#22014: ``min_tokens`` with stop strings; the fix moved vLLM's stop
    search offset past the text of the first ``min_tokens`` tokens, searching from ``len(stop) -
    1`` characters before it. Expected: the request ends at the token vLLM's rule ends it at (a
    stop string that begins in the first ``min_tokens`` tokens' text and ends after it is a
    match; one wholly inside that text is not) and its final text is vLLM's, cut before that
    occurrence. It used to run on to the length limit when the straddling occurrence was the
    only one."""
    ids = tok.encode(SCRIPT, add_special_tokens=False)
    want = _vllm_stop(tok, ids, stop, min_tokens)
    assert want is not None
    assert min_tokens == 0 or SCRIPT.find(stop) < len(tok.decode(ids[:min_tokens])), "case not at the head"
    req, final = generate_with_stops(tok, SamplingParams(stop=stop, min_new_tokens=min_tokens), ids)
    assert req.finished_reason == {"type": "stop", "matched": stop}
    assert (len(req.output_ids), final) == want
    # no_stop_trim keeps the stop string: the same occurrence, through its end
    req, final = generate_with_stops(
        tok, SamplingParams(stop=stop, min_new_tokens=min_tokens, no_stop_trim=True), ids
    )
    assert final == want[1] + stop


@pytest.mark.parametrize(
    ("text", "stop", "min_tokens"), [("ab😀cd", "😀", 2), ("ab🦜cd", "🦜c", 3), ("ab🦜cd", "b🦜", 2)]
)
def test_vllm_22014_stop_string_after_a_character_split_at_the_boundary(
    tok: Any, text: str, stop: str, min_tokens: int
) -> None:
    """vllm-project/vllm#22014 with a character whose UTF-8 bytes the first ``min_tokens``
    tokens only begin: vLLM's incremental detokenizer emits that character with the token that
    completes it, after the ``min_tokens`` boundary, so a stop string starting there ends the
    request. Expected: the token and final text of vLLM's rule (the character is not counted as
    text of the first ``min_tokens`` tokens)."""
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids[:min_tokens]).endswith("\ufffd")
    want = _vllm_stop(tok, ids, stop, min_tokens)
    assert want is not None
    req, final = generate_with_stops(tok, SamplingParams(stop=stop, min_new_tokens=min_tokens), ids)
    assert req.finished_reason == {"type": "stop", "matched": stop}
    assert (len(req.output_ids), final) == want


def test_vllm_22014_stop_string_inside_the_head_only_does_not_stop(tok: Any) -> None:
    """vllm-project/vllm#22014's other side: a stop string that occurs only inside the text of
    the first ``min_tokens`` tokens never ends the request (vLLM's rule finds nothing), whatever
    is generated after it; a token stop and the length limit still end it."""
    ids = tok.encode(SCRIPT, add_special_tokens=False)
    head = len(tok.encode("Stop here,", add_special_tokens=False))
    assert _vllm_stop(tok, ids, "here,", head) is None
    req, final = generate_with_stops(tok, SamplingParams(stop="here,", min_new_tokens=head), ids)
    assert req.finished_reason == {"type": "length", "length": len(ids)}
    assert final == SCRIPT


@pytest.mark.parametrize(
    ("text", "stops"),
    [
        ("Hello there, general Kenobi. Done.", ["e"]),
        ("Hello there, general Kenobi. Done.", [","]),
        ("Hello there, general Kenobi. Done.", ["x", "."]),
        ("abc def ghi, jkl.", ["f"]),
        ("One two three four.", [" "]),
        ("One two three four.", ["e f"]),
    ],
)
def test_transformers_31435_single_letter_stop_strings(tok: Any, text: str, stops: list[str]) -> None:
    """huggingface/transformers#31435: stop strings all one character long broke the stopping
    criterion. Expected: the request stops at the first token whose text completes a stop string,
    the step at which transformers' own ``StopStringCriteria`` first says stop, with that string
    as the match; the final text ends right before it."""
    ids = tok.encode(text, add_special_tokens=False)
    hf = StopStringCriteria(tok, stops)
    want = next(n for n in range(1, len(ids) + 1) if bool(hf(torch.tensor([ids[:n]]), None)[0]))
    sp = SamplingParams(stop=stops)
    sp.normalize(tok)
    got = next(n for n in range(1, len(ids) + 1) if check_stop(ids[:n], sp, {FAKE_EOS}, tok, False))
    assert got == want
    reason = check_stop(ids[:got], sp, {FAKE_EOS}, tok, False)
    assert reason is not None and reason["matched"] in stops
    req, final = generate_with_stops(tok, SamplingParams(stop=stops), ids)
    assert len(req.output_ids) == want
    assert final == text[: text.find(reason["matched"])]


# --------------------------------------------------------------------------- output logprobs

ROW = [2.0, 1.9, 1.2, 0.5, 0.4, 0.0, -1.0, 1.0, -3.5, 0.9]


def _log_softmax64(row: list[float], t: float) -> list[float]:
    m = max(row)
    s = math.fsum(math.exp((x - m) / t) for x in row)
    return [(x - m) / t - math.log(s) for x in row]


@pytest.mark.parametrize("temperature", [0.0, 1e-7, 1e-3, 0.5, 1.0, 1.7])
def test_rfcs_11_logprobs_follow_temperature(temperature: float) -> None:
    """standardcompletions/rfcs#11: providers disagree on whether logprobs move with the
    temperature; ggml-org/llama.cpp#7197: at temperature 0 the top tokens came back with
    probabilities 1 and 0. Expected (SGLang 0.5.23's sampler, whose logprobs are the
    ``log_softmax`` of the logits divided by the temperature, a greedy row at temperature 1):
    every token's output logprob equals the float64 ``log_softmax(z / T)``, with ``T = 1`` for
    temperature 0 and for temperatures below 1e-6 (greedy), so a greedy request reports the
    model's own distribution, not 0 and ``-inf``."""
    sp = SamplingParams(temperature=temperature)
    t_eff = 1.0 if sp.is_greedy else temperature
    want = _log_softmax64(ROW, t_eff)
    gen = torch.Generator().manual_seed(0)
    ids, lp = sample(torch.tensor([ROW]), [sp], [[]], generators=[gen], return_logprobs=True)
    for i, w in enumerate(want):
        got = lp[0, i].item()
        if w < -80:  # below float32's range after the shift: -inf or a huge negative value
            assert got < -80 or got == -math.inf
        else:
            assert got == pytest.approx(w, rel=1e-5, abs=1e-5), (i, got, w)
    if sp.is_greedy:
        assert ids.tolist() == [0]
        p_top = math.exp(lp[0, 0].item())
        assert p_top == pytest.approx(math.exp(want[0]), rel=1e-5) and p_top < 0.5


@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.5])
def test_tgi_2108_top_p_leaves_top_logprobs_whole(top_p: float) -> None:
    """huggingface/text-generation-inference#2108: with ``top_p=0.5`` only the sampled token
    came back in ``top_logprobs``, with logprob 0. Expected (SGLang's logprobs come before the
    top-p / top-k / min-p filters): ``top_logprobs`` holds the ``k`` requested entries, values
    the float64 ``log_softmax(z / T)`` of the unfiltered row, and the sampled token (always in
    the nucleus) keeps its unfiltered logprob rather than 0."""
    t = 0.8
    sp = SamplingParams(temperature=t, top_p=top_p, top_k=5, min_p=0.1)
    want = _log_softmax64(ROW, t)
    gen = torch.Generator().manual_seed(3)
    ids, lp = sample(torch.tensor([ROW]), [sp], [[]], generators=[gen], return_logprobs=True)
    vals, tids = top_logprobs(lp, 3)
    order = sorted(range(len(ROW)), key=lambda i: (-want[i], i))[:3]
    assert tids[0].tolist() == order
    assert vals[0].tolist() == pytest.approx([want[i] for i in order], abs=1e-5)
    picked = ids.item()
    assert lp[0, picked].item() == pytest.approx(want[picked], abs=1e-5) and want[picked] < -0.1


@pytest.mark.parametrize("k", [1, 3, 5, 10])
def test_vllm_36660_lmdeploy_1548_top_logprobs_count_and_uniqueness(k: int) -> None:
    """vllm-project/vllm#36660: the sampled token was listed twice in ``top_logprobs``;
    InternLM/lmdeploy#1548: ``top_logprobs: 5`` gave 4 entries. Expected: exactly ``k`` distinct
    token ids, in the float64 reference's order (ties by token id), including entries a ban made
    ``-inf`` when ``k`` reaches past the allowed tokens, and a greedy row's sampled token first
    and once."""
    row = [1.0, 3.0, 3.0, -2.0, 0.5, 3.0, 0.0, -1.0, 2.0, 1.5]
    bias = {"1": -100.0, "4": -100.0}
    sp = SamplingParams(temperature=0.0, logit_bias=bias)
    ids, lp = sample(torch.tensor([row]), [sp], [[]], return_logprobs=True)
    vals, tids = top_logprobs(lp, k)
    biased = [x + bias.get(str(i), 0.0) for i, x in enumerate(row)]
    want = _log_softmax64(biased, 1.0)
    order = sorted(range(len(row)), key=lambda i: (-want[i], i))[:k]
    got_ids = tids[0].tolist()
    assert len(got_ids) == k == len(set(got_ids))
    assert got_ids == order
    assert vals[0].tolist() == pytest.approx([want[i] for i in order], abs=1e-4)
    assert got_ids[0] == ids.item() == 2 and got_ids.count(ids.item()) == 1


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("penalty", [0.0, 1e-9, 0.5, 1.0, 2.0, 2.0000001, 2.5, 10.0, -1.0])
def test_vllm_16403_repetition_penalty_range_is_sglangs(tok: Any, penalty: float) -> None:
    """vllm-project/vllm#16403: vLLM dropped its upper bound on ``repetition_penalty``
    (transformers accepts any positive value) while SGLang keeps ``(0, 2]``. Expected: a value is
    accepted exactly where SGLang 0.5.23's own ``SamplingParams.verify`` accepts it, on
    ``SamplingParams`` and on the chat route (an OpenAI-shaped 400 naming the field, nothing sent
    to the scheduler), and an accepted one reaches the scheduler unchanged."""
    try:
        sglang_sampling_params(repetition_penalty=penalty).verify(1000)
        sglang_ok = True
    except ValueError:
        sglang_ok = False
    if sglang_ok:
        SamplingParams(repetition_penalty=penalty).verify(1000)
    else:
        with pytest.raises(ValueError, match="repetition_penalty"):
            SamplingParams(repetition_penalty=penalty).verify(1000)
    tm = FakeTM(tok)
    r = app_client(tm).post(
        "/v1/chat/completions",
        json={
            "model": "dsv4-test",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
            "repetition_penalty": penalty,
        },
    )
    if sglang_ok:
        assert r.status_code == 200, r.text
        assert tm.received[-1].sampling_params["repetition_penalty"] == penalty
    else:
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert "repetition_penalty" in err["message"] and err["code"] == 400
        assert tm.received == []


@pytest.mark.parametrize(
    ("report", "bias"),
    [
        ("InternLM/lmdeploy#2370", {"additionalProp1": 0, "additionalProp2": 0}),
        ("sashabaranov/go-openai#129", {" You": 6}),
        ("sashabaranov/go-openai#129", {"12.5": 1}),
    ],
)
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_lmdeploy_2370_go_openai_129_logit_bias_keys_must_be_token_ids(
    tok: Any, report: str, bias: dict[str, Any], route: str
) -> None:
    """InternLM/lmdeploy#2370 (Swagger's placeholder keys ``additionalProp1``) and
    sashabaranov/go-openai#129 (a word, ``" You"``, as the key): ``logit_bias`` keys must be
    token ids. Expected: SGLang 0.5.23's ``verify`` refuses the same keys (``int(key)`` fails),
    and the route answers an OpenAI-shaped 400 naming ``logit_bias`` and the bad key (OpenAI's
    "Invalid key in 'logit_bias'") with nothing sent to the scheduler, not a 500 or a crash."""
    with pytest.raises(ValueError):
        sglang_sampling_params(logit_bias=bias).verify(len(tok))
    tm = FakeTM(tok)
    body: dict[str, Any] = {"model": "dsv4-test", "max_tokens": 2, "logit_bias": bias}
    if route.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    r = app_client(tm).post(route, json=body)
    assert r.status_code == 400, (report, r.text)
    err = r.json()["error"]
    assert "logit_bias" in err["message"] and err["code"] == 400 and err["type"]
    assert any(repr(k) in err["message"] or k in err["message"] for k in bias), err["message"]
    assert tm.received == []


@pytest.mark.parametrize(
    "bias",
    [
        {"5": 100.0, "05": -100.0},  # the last key naming id 5 bans it
        {"05": -100.0, "5": 100.0},  # ... or forces it
        {"3": 60.0, "003": 60.0, "7": -1.5},  # not 120 on id 3
    ],
)
def test_vllm_10741_vectorised_logit_bias_keeps_one_bias_per_token(bias: dict[str, float]) -> None:
    """vllm-project/vllm#10741: the per-token ``logit_bias`` loop was replaced by one vectorised
    add over the request's entries. Keys are decimal strings, so ``"5"`` and ``"05"`` name one
    token; the vectorised add summed both (``+100`` and ``-100`` cancelled, two ``+60`` made
    ``+120``, past the documented ``[-100, 100]``). Expected: one bias per token id, the last
    key's, as SGLang 0.5.23 builds its bias row (a dict keyed by ``int(key)``, its comment: "1"
    and "01" collide) and vLLM reads the object (``{int(token): bias}``): the biased row equals the
    float64 ``z + bias`` of that reading, the sampled greedy token follows it, and ``verify``
    accepts the request (each value lies in the range)."""
    row = [1.0, 3.0, 2.5, -2.0, 0.5, 2.0, 0.0, -1.0, 2.9, 1.5]
    last = {int(k): v for k, v in bias.items()}  # SGLang's / vLLM's reading
    want = [x + last.get(i, 0.0) for i, x in enumerate(row)]
    sp = SamplingParams(temperature=0.0, logit_bias=bias)
    sp.verify(len(row))
    z = torch.tensor([row])
    apply_penalties(z, [sp], [[]])
    assert z[0].tolist() == pytest.approx(want, abs=1e-5)
    ids, lp = sample(torch.tensor([row]), [sp], [[]], return_logprobs=True)
    assert ids.item() == max(range(len(row)), key=lambda i: (want[i], -i))
    assert lp[0].tolist() == pytest.approx(_log_softmax64(want, 1.0), abs=1e-4)


# --------------------------------------------------------------------------- seeds and n


def test_tinker_79_seeded_parallel_samples_are_distinct_and_repeatable(sched_model_dir: str) -> None:
    """thinking-machines-lab/tinker-feedback#79: with ``seed`` set and 32 samples requested,
    many samples came back token-identical (every sample drew from the one seed). Expected
    (vLLM's rule for ``n`` with a seed, sample ``k`` seeded ``seed + k``): the fan-out of one
    request gives each sample its own seed, the samples' temperature-1 outputs on the test model
    are pairwise different, and a cold rerun of the whole request (a fresh scheduler) repeats
    every sample token for token."""
    n, seed = 8, 1234
    req = GenerateReqInput(
        input_ids=[5, 17, 256, 99, 42, 311, 7, 64],
        sampling_params={"n": n, "sampling_seed": seed, "temperature": 1.0, "max_new_tokens": 10},
    )
    req.normalize_batch_and_arguments()
    seeds = [p["sampling_seed"] for p in req.sampling_params]
    assert seeds == [seed + k for k in range(n)]

    def run() -> list[list[int]]:
        s = make_scheduler(sched_model_dir)
        for k, sd in enumerate(seeds):
            submit(s, f"r{k}", list(req.input_ids[k]), 10, sampling={"temperature": 1.0, "sampling_seed": sd})
        res = drain(s)
        return [res[f"r{k}"]["ids"] for k in range(n)]

    first = run()
    assert all(len(o) == 10 for o in first)
    assert len({tuple(o) for o in first}) == n
    assert run() == first


@pytest.mark.parametrize("temperature", [1e-6, 1e-5, 1e-3, 1e-2])
def test_sonar_709_tiny_temperature_still_samples_the_top_token(temperature: float) -> None:
    """dphnAI/sonar#709: a temperature just above 0 left the sampler with nothing to draw from
    (``z / T`` overflowed, the softmax gave NaN) and the output came back empty. Expected: a
    temperature at or above the greedy cut (1e-6, SGLang's ``_SAMPLING_EPS``) is sampled, not
    greedy, and with the argmax 1.1 above the next logit its float64 distribution puts all but
    about ``9 exp(-1.1 / T)`` on the argmax, so every seed draws the argmax, from large logits too, beside a greedy row in the
    batch; the returned logprobs are finite for the argmax and never NaN."""
    sp = SamplingParams(temperature=temperature)
    assert not sp.is_greedy
    base = [x + 1.0 if i == 0 else x for i, x in enumerate(ROW)]  # the argmax leads by 1.1
    rows = [base, [x * 1e4 for x in base], [x - 3e4 for x in base]]
    top = 0
    for seed in range(20):
        gens = [torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 100), None, None]
        logits = torch.tensor([*rows, base], dtype=torch.float32)
        ids, lp = sample(
            logits,
            [sp, sp, sp, SamplingParams(temperature=0.0)],
            [[]] * 4,
            generators=gens,
            return_logprobs=True,
        )
        assert ids.tolist() == [top] * 4
        assert not bool(torch.isnan(lp).any())
        assert all(math.isfinite(lp[r, top].item()) for r in range(4))

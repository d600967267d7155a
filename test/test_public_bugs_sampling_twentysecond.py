"""A twenty-second set of public reports on sampling parameters: ``top_p`` at its edges, the
repetition penalty against transformers' own processor, and ``logit_bias`` ids outside the
vocabulary. Each test names its report.

Reports that showed no fault here (their tests are regression guards): a tiny ``top_p`` keeps the
top token rather than leaving nothing (huggingface/transformers#19839); the accepted ``top_p``
range is SGLang's ``(0, 1]`` (huggingface/text-generation-inference#2231); the repetition penalty
multiplies negative logits (NVIDIA-NeMo/Speech#8194) and applies once per token however often it
repeats (huggingface/transformers.js#1062); an out-of-vocabulary ``logit_bias`` id is a 400, not
an engine crash (vllm-project/vllm#16529).

Oracles: float64 references of the nucleus rule, SGLang 0.5.23's own ``SamplingParams.verify``,
transformers' ``RepetitionPenaltyLogitsProcessor``, the OpenAI error shape.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from openai_fake_tm import FakeTM, app_client
from sampling_testutil import sglang_sampling_params
from sglang_v4.sampling.penalties import apply_penalties
from sglang_v4.sampling.sampler import filter_probs, sample
from sglang_v4.sampling.sampling_params import SamplingParams
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

ROW = [2.0, 1.9, 1.2, 0.5, 0.4, 0.0, -1.0, 1.0]


def _softmax64(row: list[float], t: float = 1.0) -> list[float]:
    m = max(row)
    e = [math.exp((x - m) / t) for x in row]
    s = sum(e)
    return [x / s for x in e]


# --------------------------------------------------------------------------- top_p


@pytest.mark.parametrize("top_p", [1e-12, 1e-6, 0.05])
def test_transformers_19839_tiny_top_p_keeps_the_top_token(top_p: float) -> None:
    """huggingface/transformers#19839: with a top_p near 0 every logit was set to ``-inf`` and the
    softmax gave NaN. Expected: a ``top_p`` below the top token's probability keeps exactly that
    token (the float64 argmax; the nucleus rule never drops rank 0), its weight finite, and
    sampling with it returns the argmax for every seed."""
    p64 = _softmax64(ROW)
    top = max(range(len(ROW)), key=lambda i: p64[i])
    assert top_p < p64[top]
    probs = torch.tensor([p64], dtype=torch.float32)
    kept = filter_probs(probs, [SamplingParams(top_p=top_p)])
    assert bool(torch.isfinite(kept).all())
    assert kept[0].nonzero().flatten().tolist() == [top]
    params = [SamplingParams(top_p=top_p)]
    for seed in range(40):
        gen = torch.Generator().manual_seed(seed)
        assert sample(torch.tensor([ROW]), params, [[]], generators=[gen]).tolist() == [top]


@pytest.mark.parametrize("top_p", [0.0, -0.5, 1e-12, 0.5, 1.0, 1.0000001, 2.0])
def test_tgi_2231_top_p_range_is_sglangs(top_p: float) -> None:
    """huggingface/text-generation-inference#2231: the server refused ``top_p`` values the client
    API accepts (``1.0``) while the edges' meaning was unclear. Expected: a ``top_p`` is accepted
    exactly when SGLang 0.5.23's own ``SamplingParams.verify`` accepts it (``(0, 1]``), and a
    refusal names ``top_p``; ``top_p=1.0`` keeps every token (float64 probabilities all > 0)."""
    try:
        sglang_sampling_params(top_p=top_p).verify(1000)
        sglang_ok = True
    except ValueError:
        sglang_ok = False
    sp = SamplingParams(top_p=top_p)
    if sglang_ok:
        sp.verify(1000)
    else:
        with pytest.raises(ValueError, match="top_p"):
            sp.verify(1000)
    if top_p == 1.0:
        kept = filter_probs(torch.tensor([_softmax64(ROW)]), [sp])
        assert kept[0].count_nonzero().item() == len(ROW)


# --------------------------------------------------------------------------- repetition penalty


def _hf_repetition(row: list[float], seen: list[int], penalty: float) -> list[float]:
    proc = RepetitionPenaltyLogitsProcessor(penalty=penalty)
    out = proc(torch.tensor([seen]), torch.tensor([row], dtype=torch.float32))
    return out[0].tolist()


def test_nemo_8194_repetition_penalty_multiplies_negative_logits() -> None:
    """NVIDIA-NeMo/Speech#8194: the repetition penalty divided every seen token's logit by the
    penalty, so a negative logit moved toward 0 (the token became more likely). Expected: the
    penalised row equals transformers' ``RepetitionPenaltyLogitsProcessor`` (``z / r`` for
    ``z > 0``, ``z * r`` otherwise) over the prompt and output tokens, and every seen token's
    logit went down."""
    row = [1.5, -0.5, 2.0, -3.0, 0.0, 0.7, -1.2, 4.0]
    prompt, output = [1, 3], [0, 6]
    r = 1.7
    z = torch.tensor([row], dtype=torch.float32)
    apply_penalties(z, [SamplingParams(repetition_penalty=r)], [output], [prompt])
    want = _hf_repetition(row, prompt + output, r)
    assert z[0].tolist() == pytest.approx(want, abs=1e-6)
    for t in prompt + output:
        assert z[0, t].item() < row[t] or row[t] == 0.0, t
    assert z[0, 3].item() == pytest.approx(-3.0 * r)


def test_transformers_js_1062_repetition_penalty_applies_once_per_token() -> None:
    """huggingface/transformers.js#1062: a token seen ``k`` times was penalised ``k`` times
    (``z / r**k``). Expected: with token 2 seen five times and token 4 once, both get the one
    penalty transformers' ``RepetitionPenaltyLogitsProcessor`` gives (which applies it at most
    once per token)."""
    row = [0.3, -0.2, 3.0, 1.0, -2.0, 0.5]
    output = [2, 2, 4, 2, 2, 2]
    r = 1.3
    z = torch.tensor([row], dtype=torch.float32)
    apply_penalties(z, [SamplingParams(repetition_penalty=r)], [output], [[]])
    want = _hf_repetition(row, output, r)
    assert z[0].tolist() == pytest.approx(want, abs=1e-6)
    assert z[0, 2].item() == pytest.approx(3.0 / r) and z[0, 4].item() == pytest.approx(-2.0 * r)


# --------------------------------------------------------------------------- logit_bias


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_vllm_16529_out_of_vocab_logit_bias_is_a_400(tok: Any, route: str) -> None:
    """vllm-project/vllm#16529: a ``logit_bias`` holding a token id outside the vocabulary
    (``"191222": -100`` beside an in-vocabulary ``"99999": 5``) crashed the engine. Expected: an
    OpenAI-shaped 400 naming ``logit_bias``, as SGLang 0.5.23's ``verify`` refuses the same id
    for this vocabulary, and nothing reaches the scheduler; the in-vocabulary key alone is
    accepted and sent."""
    vocab = len(tok)
    bad = {"191222": -100, "99999": 5}
    assert 191222 >= vocab > 99999
    with pytest.raises(ValueError, match="logit_bias"):
        sglang_sampling_params(logit_bias=bad).verify(vocab)
    tm = FakeTM(tok)
    client = app_client(tm)
    body: dict[str, Any] = {"model": "dsv4-test", "max_tokens": 4}
    if route.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "Hello, tell me about a nice dog."}]
    else:
        body["prompt"] = "Hello, tell me about a nice dog."
    r = client.post(route, json={**body, "logit_bias": bad})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert "logit_bias" in err["message"] and err["type"] and err["code"] == 400
    assert tm.received == []
    r = client.post(route, json={**body, "logit_bias": {"99999": 5}})
    assert r.status_code == 200, r.text
    assert {int(k): v for k, v in tm.received[-1].sampling_params["logit_bias"].items()} == {99999: 5}

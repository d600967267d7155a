"""SGLang frontend ``select`` and ``/generate`` logprob edges on the real server (embedded default
model) against HF transformers' logprobs of the same tokens (float64 log-softmax).

``RuntimeEndpoint.select`` sends the prompt alone (``max_new_tokens=0``), then the prompt plus each
choice with ``logprob_start_len = max(prompt_tokens - 2, 0)``, and for
``unconditional_likelihood_normalized`` the scored ids alone with no ``logprob_start_len``. The
oracle recomputes every logprob the frontend reads from those requests.
"""

from __future__ import annotations

import pytest
import requests
from server_fixture import real_env, start_server

sgl = pytest.importorskip("sglang")
pytest.importorskip("sglang_v4.managers.scheduler")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PROMPT = "The answer is"
CHOICES = ["yes", "no", " yes sir"]
TOL = 2e-3


@pytest.fixture(scope="module")
def server(default_model_dir: str, tmp_path_factory: pytest.TempPathFactory):
    env = real_env()
    h = start_server([], env, tmp_path_factory.mktemp("front") / "server.log", timeout_s=300)
    yield h
    assert h.stop() == 0, h.log()[-3000:]


@pytest.fixture(scope="module")
def oracle(default_model_dir: str):
    """``ids -> [logprob of ids[k] given ids[:k] for k >= 1]`` (HF, float64 log-softmax)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()

    def lps(ids: list[int]) -> list[float]:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].double()
        lp = torch.log_softmax(logits, dim=-1)
        return [lp[k - 1, ids[k]].item() for k in range(1, len(ids))]

    return lps


def _ids(server, text: str) -> list[int]:
    r = requests.post(
        server.url + "/generate",
        json={"text": text, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return [e[1] for e in r.json()["meta_info"]["input_token_logprobs"]]


def test_logprob_start_len_edges(server, oracle):
    ids = _ids(server, PROMPT + " yes")  # no logprob_start_len + max_new_tokens=0: from position 0
    ref = oracle(ids)
    L = len(ids)
    url = server.url + "/generate"
    for start in (0, 1, L - 1, L, -1):
        body = {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": start,
        }
        r = requests.post(url, json=body, timeout=120)
        assert r.status_code == 200, (start, r.text)
        got = r.json()["meta_info"]["input_token_logprobs"]
        first = start if 0 <= start < L else L
        assert [e[1] for e in got] == ids[first:], start
        for k, (val, _, _) in zip(range(first, L), got, strict=True):
            if k == 0:
                assert val is None
            else:
                assert val == pytest.approx(ref[k - 1], abs=TOL), (start, k)
    r = requests.post(
        url, json={"input_ids": ids, "return_logprob": True, "logprob_start_len": L + 1}, timeout=60
    )
    assert r.status_code == 400


@pytest.mark.parametrize("method", ["token_length_normalized", "unconditional_likelihood_normalized"])
def test_select_matches_hf(server, oracle, method: str):
    choices_method = getattr(sgl, method)

    @sgl.function
    def pick(s):
        s += PROMPT
        s += sgl.select("x", choices=CHOICES, choices_method=choices_method)

    state = pick.run(backend=sgl.RuntimeEndpoint(server.url))
    meta = state.get_meta_info("x")
    prompt_len = len(_ids(server, PROMPT))
    start = max(prompt_len - 2, 0)
    scores = []
    for c, got, norm in zip(
        CHOICES, meta["input_token_logprobs"], meta["normalized_prompt_logprobs"], strict=True
    ):
        ids = _ids(server, PROMPT + c)
        ref = oracle(ids)
        assert [e[1] for e in got] == ids[start:], c
        assert [e[0] for e in got] == pytest.approx(ref[start - 1 :], abs=TOL), c
        assert norm == pytest.approx(sum(ref[start - 1 :]) / (len(ids) - start), abs=TOL), c
        if method == "token_length_normalized":
            scores.append(sum(ref[start - 1 :]) / (len(ids) - start))
        else:
            uncond = [0.0] + oracle(ids[start:])  # the first unconditional token: None -> 0
            cond = ref[start - 1 :]
            got_u = [e[0] for e in meta["unconditional_token_logprobs"][len(scores)]]
            assert got_u[0] is None and got_u[1:] == pytest.approx(uncond[1:], abs=TOL), c
            scores.append(sum(a - b for a, b in zip(cond, uncond, strict=True)) / len(cond))
    ranked = sorted(scores, reverse=True)
    if ranked[0] - ranked[1] > 4 * TOL:  # a clear winner: the decision must be the oracle's
        assert state["x"] == CHOICES[scores.index(ranked[0])], (scores, state["x"])

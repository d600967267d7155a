"""SGLang frontend ``select`` and ``/generate`` logprob edges on the real server (embedded default
model) against HF transformers' logprobs of the same tokens (float64 log-softmax).

``RuntimeEndpoint.select`` sends the prompt alone (``max_new_tokens=0``), then the prompt plus each
choice with ``logprob_start_len = max(prompt_tokens - 2, 0)``, and for
``unconditional_likelihood_normalized`` the scored ids alone with no ``logprob_start_len``. The
oracle recomputes every logprob the frontend reads from those requests.

SGLang's shape of prompt logprobs from ``logprob_start_len = s``: one entry per prompt token
``s .. L - 1``, the first one's value ``None`` for every ``s`` (its logits at ``s - 1`` are not
computed). ``compute_normalized_prompt_logprobs`` skips that ``None``; the choice methods that
average the raw entries (``unconditional_likelihood_normalized``, ``greedy_token_selection``)
then fail inside the frontend with a ``TypeError``, as they do against SGLang 0.5.23 itself.
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
            if k == first:
                assert val is None, (start, k)
            else:
                assert val == pytest.approx(ref[k - 1], abs=TOL), (start, k)
    r = requests.post(
        url, json={"input_ids": ids, "return_logprob": True, "logprob_start_len": L + 1}, timeout=60
    )
    assert r.status_code == 400


def test_select_matches_hf(server, oracle):
    """``token_length_normalized`` (the default): each choice's normalized logprob is the mean of
    the logprobs of tokens ``start + 1 ..`` (the ``None`` of token ``start`` skipped)."""

    @sgl.function
    def pick(s):
        s += PROMPT
        s += sgl.select("x", choices=CHOICES, choices_method=sgl.token_length_normalized)

    state = pick.run(backend=sgl.RuntimeEndpoint(server.url))
    meta = state.get_meta_info("x")
    prompt_len = len(_ids(server, PROMPT))
    start = max(prompt_len - 2, 0)
    scores = []
    for c, got, norm in zip(
        CHOICES, meta["input_token_logprobs"], meta["normalized_prompt_logprobs"], strict=True
    ):
        ids = _ids(server, PROMPT + c)
        ref = oracle(ids)[start:]  # tokens start + 1 .. L - 1
        assert [e[1] for e in got] == ids[start:], c
        assert got[0][0] is None, c
        assert [e[0] for e in got[1:]] == pytest.approx(ref, abs=TOL), c
        assert norm == pytest.approx(sum(ref) / len(ref), abs=TOL), c
        scores.append(sum(ref) / len(ref))
    ranked = sorted(scores, reverse=True)
    if ranked[0] - ranked[1] > 4 * TOL:  # a clear winner: the decision must be the oracle's
        assert state["x"] == CHOICES[scores.index(ranked[0])], (scores, state["x"])


@pytest.mark.parametrize("method", ["unconditional_likelihood_normalized", "greedy_token_selection"])
def test_select_methods_averaging_raw_entries_fail_as_against_sglang(server, method: str):
    """These choice methods average the raw entries, ``None`` included: the frontend raises the
    ``TypeError`` SGLang 0.5.23's own server gives it (the first entry is ``None`` for every
    ``logprob_start_len``), and the server stays healthy."""

    @sgl.function
    def pick(s):
        s += PROMPT
        s += sgl.select("x", choices=CHOICES, choices_method=getattr(sgl, method))

    state = pick.run(backend=sgl.RuntimeEndpoint(server.url))
    assert isinstance(state.error(), TypeError), state.error()
    assert requests.get(server.url + "/health", timeout=30).status_code == 200

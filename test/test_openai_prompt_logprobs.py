"""vLLM's ``prompt_logprobs`` on ``/v1/completions`` (per choice) and ``/v1/chat/completions``
(top level), on the embedded tiny model (CPU, real forward), against independent oracles:

* HF transformers' ``DeepseekV4ForCausalLM`` on the same checkpoint: ``log_softmax`` of its
  logits in float64 gives each prompt token's logprob, its rank (vLLM's: the count of vocabulary
  logprobs at least the token's; checked inside the band the float32/float64 tolerance allows) and
  the top tokens; the tokenizer decoding each id alone gives ``decoded_token``;
* the ``openai`` client's own parsing of the body (the field as a client reads it);
* vLLM's shape rules, written out by hand: ``null`` first, then per position the prompt token
  first, the top ``N`` after it with ranks ``1..N``, a prompt token among them keeping its first
  place with its top rank; ``-inf`` as ``-9999.0``;
* a cold run (cache flushed) for the same request with the prompt's blocks in the prefix cache;
* vLLM's request rules for the 400s (stream, below -1, above its default max of 20, ``-1``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import openai
import pytest
import requests
import torch
from chat_tools_testutil import sse_chunks
from sglang_v4.entrypoints.openai.prompt_logprobs import vllm_prompt_logprobs
from sglang_v4.sampling.sampler import token_ranks

pytestmark = pytest.mark.timeout(300)

#: the server's float32 forward against HF's float64 logprobs (they agree to about 1e-6 on this
#: model; near -14 about 2 vocabulary logprobs fall in a 2e-5 band, so ranks are checked to ~2)
TOL = 2e-5
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def url(embedded_model_server) -> str:  # noqa: ANN001 - a server_fixture.ServerHandle
    return embedded_model_server.url


@pytest.fixture(scope="module")
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="EMPTY", max_retries=0)


@pytest.fixture(scope="module")
def hf_model(hf_default_model: Any) -> Any:
    """conftest's HF transformers model on the embedded checkpoint (float32, eval mode)."""
    return hf_default_model


def _hf_logprobs(hf_model: Any, ids: list[int]) -> torch.Tensor:
    """``[len(ids) - 1, V]`` float64: row ``k`` the log-probabilities of token ``k + 1``."""
    with torch.no_grad():
        logits = hf_model(torch.tensor([ids])).logits[0, :-1].double()
    return torch.log_softmax(logits, dim=-1)


def _check_against_hf(plp: list[Any], ids: list[int], lp: torch.Tensor, count: int, tok: Any) -> None:
    assert len(plp) == len(ids) and plp[0] is None
    for k in range(1, len(ids)):
        pos, row, tid = plp[k], lp[k - 1], ids[k]
        items = [(int(key), e) for key, e in pos.items()]
        assert items[0][0] == tid  # the prompt token first
        in_top = len(items) == count  # else count + 1: the prompt token, then the top
        assert in_top or len(items) == count + 1
        v = row[tid].item()
        for t, e in items:
            assert e["logprob"] == pytest.approx(row[t].item(), abs=TOL)
            assert e["decoded_token"] == tok.decode([t])
        tops = items if in_top else items[1:]
        # the top tokens: the count best of HF's row (up to the tolerance), best first, ranks 1..count
        kth = row.topk(count).values[-1].item()
        assert all(row[t].item() >= kth - TOL for t, _ in tops)
        assert [e["logprob"] for _, e in items[1:]] == sorted(
            (e["logprob"] for _, e in items[1:]), reverse=True
        )
        if in_top:  # the prompt token's entry holds its top rank; the others follow in rank order
            assert sorted(e["rank"] for _, e in tops) == list(range(1, count + 1))
            assert [e["rank"] for _, e in items[1:]] == sorted(e["rank"] for _, e in items[1:])
        else:
            assert [e["rank"] for _, e in tops] == list(range(1, count + 1))
            # vLLM's rank: the count of vocabulary logprobs >= the token's, inside the tolerance band
            lo, hi = int((row > v + TOL).sum()) + 1, int((row >= v - TOL).sum())
            assert lo <= items[0][1]["rank"] <= hi, (k, lo, items[0][1]["rank"], hi)


def test_completions_prompt_logprobs_match_hf(client: openai.OpenAI, hf_model: Any, tok: Any) -> None:
    r = client.completions.create(
        model="default",
        prompt=PROMPT,
        max_tokens=1,
        temperature=0,
        extra_body={"prompt_logprobs": 3, "return_token_ids": True},
    )
    choice = r.choices[0]
    ids = choice.prompt_token_ids  # type: ignore[attr-defined]
    assert r.usage is not None and len(ids) == r.usage.prompt_tokens
    plp = choice.prompt_logprobs  # type: ignore[attr-defined]  # the client keeps vLLM's extra field
    _check_against_hf(plp, ids, _hf_logprobs(hf_model, ids), 3, tok)
    # ranks of tokens outside the top: larger than the top count
    assert any(e["rank"] > 3 for p in plp[1:] for e in list(p.values())[:1])
    # 0: the prompt token alone
    r0 = client.completions.create(
        model="default", prompt=PROMPT, max_tokens=1, temperature=0, extra_body={"prompt_logprobs": 0}
    )
    p0 = r0.choices[0].prompt_logprobs  # type: ignore[attr-defined]
    assert p0[0] is None and [list(p) for p in p0[1:]] == [[str(t)] for t in ids[1:]]
    for p, q, t in zip(p0[1:], plp[1:], ids[1:]):
        assert p[str(t)]["logprob"] == pytest.approx(q[str(t)]["logprob"], abs=1e-6)
        if len(q) == 4:  # not among the top 3 there: the same vocabulary rank
            assert p[str(t)]["rank"] == q[str(t)]["rank"]


def test_chat_prompt_logprobs_top_level_match_hf(client: openai.OpenAI, hf_model: Any, tok: Any) -> None:
    r = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=2,
        temperature=0,
        logprobs=True,
        top_logprobs=1,
        extra_body={"prompt_logprobs": 2, "return_prompt_token_ids": True},
    )
    ids = r.choices[0].prompt_token_ids  # type: ignore[attr-defined]
    plp = r.prompt_logprobs  # type: ignore[attr-defined]  # top level on chat, as vLLM's
    assert r.usage is not None and len(plp) == r.usage.prompt_tokens == len(ids)
    assert "prompt_logprobs" not in r.choices[0].model_extra  # type: ignore[operator]
    _check_against_hf(plp, ids, _hf_logprobs(hf_model, ids), 2, tok)
    # the output's top_logprobs keep the request's own count, not prompt_logprobs'
    assert r.choices[0].logprobs is not None and r.choices[0].logprobs.content
    assert all(len(c.top_logprobs) == 1 for c in r.choices[0].logprobs.content)


def test_completions_top_logprobs_keep_their_count(url: str) -> None:
    body = {"prompt": PROMPT, "max_tokens": 2, "temperature": 0, "logprobs": 1, "echo": True}
    r = requests.post(url + "/v1/completions", json={**body, "prompt_logprobs": 4}, timeout=120).json()
    plain = requests.post(url + "/v1/completions", json=body, timeout=120).json()
    # echo's and the output's top_logprobs: the logprobs + 1 rule (OpenAI's), as without prompt_logprobs
    assert r["choices"][0]["logprobs"] == plain["choices"][0]["logprobs"]
    assert "prompt_logprobs" not in plain["choices"][0]
    assert all(p is None or len(p) in (4, 5) for p in r["choices"][0]["prompt_logprobs"])


def test_prompt_logprobs_with_a_warm_prefix_cache_equal_a_cold_run(url: str) -> None:
    """The prompt's blocks in the radix cache (a plain request first) must not cost the prompt
    positions before the hit their logprobs (vllm-project/vllm#8268 for vLLM's version of it)."""
    prompt = " ".join(f"w{i}" for i in range(140))  # 280 tokens: one whole 256-token block cached
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 2}
    assert requests.post(url + "/flush_cache", timeout=60).status_code == 200
    cold = requests.post(url + "/v1/completions", json=body, timeout=120).json()
    gen = {"text": prompt, "sampling_params": {"max_new_tokens": 1}}
    requests.post(url + "/generate", json=gen, timeout=120).raise_for_status()
    cached = requests.post(url + "/generate", json=gen, timeout=120).json()["meta_info"]["cached_tokens"]
    assert cached >= 256  # the prompt's blocks are in the cache
    for _ in range(2):
        warm = requests.post(url + "/v1/completions", json=body, timeout=120).json()
        assert warm["choices"][0]["prompt_logprobs"] == cold["choices"][0]["prompt_logprobs"]
    plp = cold["choices"][0]["prompt_logprobs"]
    assert len(plp) == cold["usage"]["prompt_tokens"] > 256
    assert plp[0] is None and all(p is not None for p in plp[1:])


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_prompt_logprobs_refusals_name_the_field(url: str, path: str) -> None:
    base: dict[str, Any] = {"max_tokens": 1, "temperature": 0}
    base.update({"prompt": PROMPT} if path.endswith("/completions") and "chat" not in path else {})
    if "chat" in path:
        base["messages"] = [{"role": "user", "content": "hi"}]
    cases = [
        ({"prompt_logprobs": 1, "stream": True}, "not available when `stream=True`"),
        ({"prompt_logprobs": -1, "stream": True}, "not available when `stream=True`"),
        ({"prompt_logprobs": -2}, "must be a positive value or -1"),
        ({"prompt_logprobs": 21}, "Requested prompt logprobs of 21, which is greater than max allowed: 20"),
        ({"prompt_logprobs": -1}, "Requested prompt logprobs of 129280"),
        ({"prompt_logprobs": "2"}, ""),
    ]
    for extra, words in cases:
        r = requests.post(url + path, json={**base, **extra}, timeout=60)
        assert r.status_code == 400, (extra, r.text)
        err = r.json()
        assert err["error"]["param"] == "prompt_logprobs" and words in err["message"], (extra, err)
    # 0 with a stream: accepted (vLLM's rule), and no chunk carries prompt logprobs
    with requests.post(url + path, json={**base, "prompt_logprobs": 0, "stream": True}, timeout=60) as r:
        assert r.status_code == 200
        chunks = sse_chunks(r.text)
    assert chunks and not any("prompt_logprobs" in json.dumps(c) for c in chunks)
    ok = requests.post(url + path, json={**base, "prompt_logprobs": 20}, timeout=60)  # the bound itself
    assert ok.status_code == 200, ok.text


def test_vllm_shape_rules_on_engine_entries() -> None:
    """The dict of a position as vLLM builds it (``append_logprobs_for_next_position``): the prompt
    token first with its own rank, then the top ``N`` with ranks ``1..N``; a prompt token among
    them keeps its place and takes its top rank; ``-inf`` is written -9999.0."""
    meta = {
        "input_token_logprobs": [[None, 5, "a"], [-0.5, 7, "b"], [-30.0, 9, "c"], [-math.inf, 4, "d"]],
        "input_top_logprobs": [
            None,
            [[-0.2, 8, "x"], [-0.5, 7, "b"], [-0.9, 2, "y"]],
            [[-0.1, 3, "z"], [-0.4, 8, "x"], [-0.7, 2, "y"]],
            [[-0.1, 3, "z"], [-0.4, 8, "x"], [-0.7, 2, "y"]],
        ],
        "input_token_ranks": [None, 3, 40_000, 129_280],
    }
    got = [
        None if p is None else {k: v.model_dump() for k, v in p.items()}
        for p in vllm_prompt_logprobs(meta, 2)
    ]
    e = lambda lp, rank, text: {"logprob": lp, "rank": rank, "decoded_token": text}  # noqa: E731
    assert got == [
        None,
        {"7": e(-0.5, 2, "b"), "8": e(-0.2, 1, "x")},  # 7 is the 2nd best: its top rank, first place
        {"9": e(-30.0, 40_000, "c"), "3": e(-0.1, 1, "z"), "8": e(-0.4, 2, "x")},
        {"4": e(-9999.0, 129_280, "d"), "3": e(-0.1, 1, "z"), "8": e(-0.4, 2, "x")},
    ]
    assert list(got[1]) == ["7", "8"]
    only = vllm_prompt_logprobs(meta, 0)
    assert [None if p is None else list(p) for p in only] == [None, ["7"], ["9"], ["4"]]


def test_token_ranks_count_ties_as_vllm() -> None:
    """vLLM's rank is the count of vocabulary logprobs at least the token's: a token tied with
    another gets the tie's last rank."""
    lp = torch.tensor([[-1.0, -2.0, -1.0, -3.0], [-4.0, -0.5, -2.0, -2.0]])
    vals = torch.tensor([-1.0, -2.0])  # tied with another token at rank 1 / 2
    assert token_ranks(lp, vals).tolist() == [2, 3]
    assert token_ranks(lp, torch.tensor([-3.0, -0.5])).tolist() == [4, 1]

"""A twenty-ninth set of public reports on sampling parameters: ``top_p`` at and past its
bounds (a negative value, ``0``, ``1`` and above ``1``) on both OpenAI routes; Anthropic's own
narrower ranges on ``/v1/messages`` (``temperature`` 0..1, ``top_k`` at least 0);
``temperature: 0`` as greedy argmax (never a fall-back to temperature 1, whatever the seed) and
``top_k: 1`` as the same argmax; an unset ``top_k`` that must not force greedy sampling; and
``max_tokens: 0`` (no token generated). Each test names its report. One fault was found and
fixed: ``/v1/messages`` took the chat route's ranges, so ``temperature: 1.5`` and ``top_k: -1``
were served although Anthropic's API refuses them.

Fixtures: the OpenAI routes over the fake tokenizer manager (``openai_fake_tm``), the Messages
route over ``fake_prompt_tm`` (``anthropic_testutil``), and the in-process ``Scheduler`` on the
random test checkpoint (``sched_model_dir``, vocabulary 1000). Oracles: the ranges the reports
and the OpenAI / Anthropic API references state, the ``openai`` and ``anthropic`` SDKs' own
error classes, the argmax of the float64 full-vocabulary logprob row, and pairwise comparison of
runs.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
import torch
from anthropic_testutil import make_clients
from dsv4_testutil import random_ids
from fake_prompt_tm import MODEL, PromptTM
from openai_fake_tm import FakeTM, app_client, oai_client
from scheduler_testutil import drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

VOCAB = 1000  # the scheduler test model's vocabulary
ROUTES = ["/v1/chat/completions", "/v1/completions"]


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir)


def _body(route: str, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "dsv4-test", "max_tokens": 3, **kw}
    if route.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "Hi"}]
    else:
        body["prompt"] = "Hi"
    return body


# --------------------------------------------------------------------------- top_p bounds


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("top_p", [-0.1, 1.1, 1.5])
def test_gemma_790_top_p_outside_the_unit_interval_is_refused(tok: Any, route: str, top_p: float) -> None:
    """google-deepmind/gemma#790 and NVIDIA-NeMo/RL#1938: a ``top_p`` below 0 silently collapsed
    to top-1 and one above 1 silently skipped nucleus filtering; ``top_p > 1`` passed a check
    that only refused ``<= 0``. Expected: a 400 in OpenAI's error shape naming ``top_p`` (the
    ``openai`` SDK raises ``BadRequestError``), nothing reaches the engine, and the next request
    is served."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    r = tc.post(route, json=_body(route, top_p=top_p))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "top_p"
    assert "top_p" in r.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError):
        oai_client(tc).completions.create(model="dsv4-test", prompt="Hi", max_tokens=2, top_p=top_p)
    assert tm.received == []
    assert tc.post(route, json=_body(route)).status_code == 200


@pytest.mark.parametrize("route", ROUTES)
def test_llamafactory_10710_top_p_zero_is_not_rewritten_to_one(tok: Any, route: str) -> None:
    """hiyouga/LlamaFactory#10710: the SGLang and vLLM request paths used ``top_p or 1.0``, so
    ``top_p=0.0`` (falsy) was served as the opposite end of the range. Expected (SGLang's and
    vLLM's range is ``(0, 1]``): ``top_p: 0`` is a 400 naming ``top_p``, never a request
    sampled with ``top_p`` 1 (nothing reaches the engine)."""
    tm = FakeTM(tok)
    r = app_client(tm).post(route, json=_body(route, top_p=0.0))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "top_p"
    assert tm.received == []


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("top_p", [1.0, 1])
def test_distilabel_239_top_p_of_one_is_accepted(tok: Any, route: str, top_p: float) -> None:
    """argilla-io/distilabel#239: ``top_p=1.0`` was refused ("must be > 0.0 and < 1.0") although
    1 is the documented upper bound (no nucleus filtering). Expected: a 200, and the engine
    receives ``top_p`` equal to 1."""
    tm = FakeTM(tok)
    r = app_client(tm).post(route, json=_body(route, top_p=top_p))
    assert r.status_code == 200, r.text
    assert tm.received[-1].sampling_params["top_p"] == 1.0


# --------------------------------------------------------------------------- Anthropic ranges


@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", 1.5), ("temperature", -0.2), ("top_k", -1), ("top_p", 1.5)],
)
def test_anthropic_sdk_1136_messages_sampling_ranges(tok: Any, field: str, value: float) -> None:
    """anthropics/anthropic-sdk-python#1136: the Messages API takes ``temperature`` in 0..1,
    ``top_p`` in 0..1 and ``top_k`` of at least 0 (narrower than OpenAI's ``temperature`` 0..2
    and SGLang's ``top_k: -1``). Expected on ``/v1/messages``: a value outside those ranges is a
    400 ``invalid_request_error`` whose message starts with the field (the ``anthropic`` SDK
    raises ``BadRequestError``) and nothing reaches the engine; the bounds themselves
    (``temperature`` 0 and 1, ``top_k`` 0) are served."""
    tm = PromptTM(tok)
    client, _, _ = make_clients(tm)
    msgs = [{"role": "user", "content": "q"}]
    with pytest.raises(anthropic.BadRequestError) as ei:
        client.messages.create(model=MODEL, max_tokens=4, messages=msgs, extra_body={field: value})
    assert ei.value.body["error"]["type"] == "invalid_request_error"
    assert ei.value.body["error"]["message"].startswith(field)
    assert tm.received == []
    for ok in ({"temperature": 0.0}, {"temperature": 1.0}, {"top_k": 0}):
        assert client.messages.create(model=MODEL, max_tokens=4, messages=msgs, extra_body=ok).content


# --------------------------------------------------------------------------- greedy semantics


def _greedy_rows(s: Scheduler, rid: str, ids: list[int], n: int) -> tuple[list[int], list[int]]:
    """The greedy tokens of ``ids`` and, per step, the argmax of the full float64 logprob row."""
    submit(s, rid, ids, n, return_logprob=True, top_logprobs_num=VOCAB)
    argmax: list[int] = []
    out: list[int] = []
    while s.has_work():
        o = s.step()
        for i, r in enumerate(o.rids if o else []):
            if r != rid:
                continue
            out += o.output_ids[i]
            for vals, idx in zip(o.output_top_logprobs_val[i], o.output_top_logprobs_idx[i]):
                row = torch.full((VOCAB,), float("-inf"), dtype=torch.float64)
                row[torch.tensor(idx)] = torch.tensor(vals, dtype=torch.float64)
                argmax.append(int(row.argmax()))
    return out, argmax


def _tokens(s: Scheduler, rid: str, ids: list[int], n: int, sampling: dict[str, Any]) -> list[int]:
    submit(s, rid, ids, n, sampling=sampling)
    return drain(s)[rid]["ids"]


def test_tinker_198_temperature_zero_is_argmax_whatever_the_seed(sched: Scheduler) -> None:
    """thinking-machines-lab/tinker-cookbook#198, karpathy/nanoGPT#739 and inclusionAI/LLaDA2.X#6:
    ``temperature=0`` fell back to temperature 1 (samples varied) or divided by zero. Expected:
    each token of a ``temperature: 0`` request is the argmax of its step's full logprob row, and
    requests with different seeds (and with ``top_p``/``top_k`` set, which greedy ignores) give
    the same tokens."""
    ids = random_ids(24, 41)
    greedy, argmax = _greedy_rows(sched, "g", ids, 8)
    assert greedy == argmax and len(greedy) == 8
    for seed in (1, 2, 3):
        extra = {"sampling_seed": seed, "top_p": 0.7, "top_k": 50}
        assert _tokens(sched, f"t0s{seed}", ids, 8, {"temperature": 0.0, **extra}) == greedy


def test_fastdeploy_6748_top_k_one_is_greedy(sched: Scheduler) -> None:
    """PaddlePaddle/FastDeploy#6748: greedy decoding must pick the top-1 token; ``top_k: 1`` is
    the way that guarantees it at any temperature. Expected: ``top_k: 1`` at temperature 1.0 with
    three different seeds gives the greedy tokens (the argmax of each step's full row)."""
    ids = random_ids(24, 43)
    greedy, argmax = _greedy_rows(sched, "g1", ids, 8)
    assert greedy == argmax
    for seed in (4, 5, 6):
        got = _tokens(sched, f"k1s{seed}", ids, 8, {"temperature": 1.0, "top_k": 1, "sampling_seed": seed})
        assert got == greedy


def test_tpu_inference_1386_unset_top_k_does_not_force_greedy(sched: Scheduler, tok: Any) -> None:
    """vllm-project/tpu-inference#1386: a default ``top_k`` forced greedy sampling, so
    ``temperature`` was ignored. Expected: a chat request without ``top_k`` sends the engine no
    limit (``top_k`` absent, or -1 / 0 = disabled), and at temperature 1.5 without ``top_k`` the
    tokens of three seeds are not all the same (while the greedy run is one sequence)."""
    tm = FakeTM(tok)
    r = app_client(tm).post("/v1/chat/completions", json=_body("/v1/chat/completions", temperature=1.5))
    assert r.status_code == 200, r.text
    assert tm.received[-1].sampling_params.get("top_k", -1) in (-1, 0)
    ids = random_ids(24, 47)
    runs = {
        tuple(_tokens(sched, f"hot{s}", ids, 8, {"temperature": 1.5, "sampling_seed": s})) for s in (1, 2, 3)
    }
    assert len(runs) > 1


# --------------------------------------------------------------------------- max_tokens 0


def test_dp_few_shot_23_max_tokens_zero_generates_nothing(sched: Scheduler, tok: Any) -> None:
    """microsoft/dp-few-shot-generation#23: a ``max_tokens=0`` request (used to score a prompt)
    failed on a server that needed a length of at least 1. Expected (SGLang's
    ``max_new_tokens: 0``, a prefill only): no token is generated, the finish is ``length`` 0,
    and on both OpenAI routes the reply is a 200 with empty text, ``finish_reason`` ``length``
    and ``usage.completion_tokens`` 0 (read through the ``openai`` SDK's types)."""
    submit(sched, "zero", random_ids(12, 53), 0)
    r = drain(sched)["zero"]
    assert r["ids"] == [] and r["completion"] == 0
    assert r["finish"] == {"type": "length", "length": 0}
    client = oai_client(app_client(FakeTM(tok)))
    c = client.completions.create(model="dsv4-test", prompt="Hi", max_tokens=0)
    assert c.choices[0].text == "" and c.choices[0].finish_reason == "length"
    assert c.usage is not None and c.usage.completion_tokens == 0
    ch = client.chat.completions.create(
        model="dsv4-test", messages=[{"role": "user", "content": "Hi"}], max_tokens=0
    )
    assert not ch.choices[0].message.content and ch.choices[0].finish_reason == "length"
    assert ch.usage is not None and ch.usage.completion_tokens == 0

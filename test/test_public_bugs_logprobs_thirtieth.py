"""A thirtieth set of public reports on logprobs: non-finite (``-inf``, NaN) logprobs out of a
constrained step reaching the OpenAI routes (completions and chat, streamed and not); streamed
chat logprobs that must add up to the non-streamed ones (per choice with ``n: 2``); the
``logprobs`` / ``top_logprobs`` request matrix that must not be refused, and the one case that
must (``top_logprobs`` without ``logprobs``); echoed prompt logprobs with ``max_tokens: 1`` (one entry
per prompt token plus one) and a streamed echo that carries the prompt once; and the scheduler's
greedy logprobs (each chosen token first in its top list, every value a log-probability <= 0,
top lists in descending order). Each test names its report. All passed as-is and are kept as
regression tests.

Fixtures: the OpenAI routes over the fake tokenizer manager (``openai_fake_tm``; a subclass here
puts ``-inf`` / NaN into its logprob entries) and the in-process ``Scheduler`` on the random test
checkpoint (``sched_model_dir``). Oracles: strict JSON parsing (``json.loads`` refusing
``Infinity`` / ``NaN``), the ``openai`` SDK's own response types, the OpenAI reference's floor
for impossible tokens (-9999.0), string concatenation of tokens and of streamed deltas, the
non-streamed response of the same request, and the float64 full-vocabulary rows of the same
request (``top_logprobs_num`` = vocabulary) with their ``logsumexp``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import openai
import pytest
import torch
from dsv4_testutil import random_ids
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events
from scheduler_testutil import make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

VOCAB = 1000  # the scheduler test model's vocabulary
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FLOOR = -9999.0  # the OpenAI chat reference's logprob for a token of no probability


class NonFiniteTM(FakeTM):
    """The fake manager, with the second alternative of every top list at ``bad`` (``-inf`` or
    NaN, what a grammar / ``logit_bias`` step gives a forbidden token) and, for NaN, the sampled
    token's own ``output_token_logprobs`` value at ``bad`` too (its top-list copy stays finite)."""

    def __init__(self, tokenizer: Any, bad: float) -> None:
        super().__init__(tokenizer)
        self.bad = bad

    def _output(self, sub: Any, k: int) -> list[dict[str, Any]]:
        outs = super()._output(sub, k)
        for o in outs:
            meta = o["meta_info"]
            for top in meta.get("output_top_logprobs", []):
                if len(top) > 1:
                    top[1][0] = self.bad
            if math.isnan(self.bad):
                for e in meta.get("output_token_logprobs", []):
                    e[0] = self.bad
        return outs


def _strict(text: str) -> Any:
    """``text`` parsed as RFC 8259 JSON: ``Infinity``, ``-Infinity`` and ``NaN`` are refused."""

    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _numbers(obj: Any) -> list[float]:
    """Every float in a parsed JSON value."""
    if isinstance(obj, float):
        return [obj]
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _numbers(v)]
    return []


# --------------------------------------------------------------------------- non-finite values


@pytest.mark.parametrize("stream", [False, True])
def test_sonar_183_minus_inf_top_logprob_on_completions_is_valid_json(tok: Any, stream: bool) -> None:
    """dphnAI/sonar#183 (fixed by dphnAI/sonar#219) and madroidmaq/mlx-omni-server#56: a ``-inf``
    among a completion's ``top_logprobs`` made the JSON encoder raise ("Out of range float values
    are not JSON compliant") and the request a 500. Expected: a 200 whose body (each SSE event,
    streamed) is strict JSON; every logprob a finite number no lower than OpenAI's -9999.0, the
    ``-inf`` alternative reported at that floor, and the response read by the ``openai`` SDK."""
    tc = app_client(NonFiniteTM(tok, float("-inf")))
    body = {"model": "dsv4-test", "prompt": "Hi", "max_tokens": 3, "logprobs": 2, "stream": stream}
    r = tc.post(COMPLETIONS, json=body)
    assert r.status_code == 200, r.text
    if stream:
        events = [line[len("data: ") :] for line in r.text.split("\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        docs = [_strict(e) for e in events[:-1]]
    else:
        docs = [_strict(r.text)]
    tops: list[dict[str, float]] = []
    if not stream:
        Completion.model_validate(docs[0])
    for d in docs:
        for ch in d["choices"]:
            if ch.get("logprobs"):
                tops += [t for t in ch["logprobs"]["top_logprobs"] if t]
    assert len(tops) == 3
    for t in tops:
        assert len(t) == 2 and FLOOR in t.values()
    assert all(math.isfinite(x) and x >= FLOOR for d in docs for x in _numbers(d.get("choices")))


@pytest.mark.parametrize("stream", [False, True])
def test_prime_rl_1646_nan_logprob_on_chat_is_valid_json(tok: Any, stream: bool) -> None:
    """PrimeIntellect-ai/prime-rl#1646: a NaN logprob in a chat completion made the response fail
    to serialise ("Out of range float values are not JSON compliant: nan"). Expected: a 200 of
    strict JSON, every ``logprob`` (chosen and alternatives) a finite number no lower than
    -9999.0, parsed by the ``openai`` SDK's ``ChatCompletion`` / ``ChatCompletionChunk``."""
    tc = app_client(NonFiniteTM(tok, float("nan")))
    body = {
        "model": "dsv4-test",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 3,
        "logprobs": True,
        "top_logprobs": 2,
        "stream": stream,
    }
    r = tc.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    if stream:
        events = [line[len("data: ") :] for line in r.text.split("\n") if line.startswith("data: ")]
        docs = [_strict(e) for e in events if e != "[DONE]"]
        for d in docs:
            ChatCompletionChunk.model_validate(d)
    else:
        docs = [_strict(r.text)]
        ChatCompletion.model_validate(docs[0])
    entries = [
        e for d in docs for ch in d["choices"] if ch.get("logprobs") for e in ch["logprobs"]["content"]
    ]
    assert len(entries) == 3
    for e in entries:
        assert e["logprob"] == FLOOR
        first, second = (t["logprob"] for t in e["top_logprobs"])
        assert math.isfinite(first) and first <= 0.0 and second == FLOOR


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("n", [1, 2])
def test_pydantic_ai_8642_streamed_chat_logprobs_add_up_to_the_whole(tok: Any, n: int) -> None:
    """pydantic/pydantic-ai#8642 and agentjido/req_llm#645: a streamed chat completion carries
    each chunk's logprobs with that chunk, so a client that appends them gets one entry per
    output token. Expected, with ``n`` 1 and 2: each choice's ``logprobs.content`` entries of all
    chunks, in order, equal that choice's entries in the non-streamed response (token, logprob,
    bytes, alternatives) for the same request, and their tokens concatenate to that choice's
    streamed content."""
    tc = app_client(FakeTM(tok))
    body = {
        "model": "dsv4-test",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 6,
        "logprobs": True,
        "top_logprobs": 2,
        "n": n,
    }
    whole = {c["index"]: c["logprobs"]["content"] for c in tc.post(CHAT, json=body).json()["choices"]}
    parts: dict[int, list[dict[str, Any]]] = {i: [] for i in range(n)}
    text = dict.fromkeys(range(n), "")
    for ev in sse_data_events(tc.post(CHAT, json={**body, "stream": True})):
        if ev == "[DONE]":
            continue
        ChatCompletionChunk.model_validate(ev)
        for ch in ev["choices"]:
            text[ch["index"]] += ch["delta"].get("content") or ""
            if ch.get("logprobs"):
                parts[ch["index"]] += ch["logprobs"]["content"]
    assert sorted(whole) == list(range(n))
    for i in range(n):
        assert len(whole[i]) == 6
        assert parts[i] == whole[i]
        assert "".join(e["token"] for e in parts[i]) == text[i]


# --------------------------------------------------------------------------- request matrix


@pytest.mark.parametrize(
    "route,extra,want",
    [
        (CHAT, {"logprobs": True, "top_logprobs": 0}, 0),
        (CHAT, {"logprobs": True, "top_logprobs": 3}, 2),
        (CHAT, {"logprobs": False, "top_logprobs": 0}, None),
        (CHAT, {"logprobs": False}, None),
        (COMPLETIONS, {"logprobs": 0}, 0),
        (COMPLETIONS, {"logprobs": 2}, 2),
    ],
)
def test_lmdeploy_4121_logprob_request_matrix_is_not_refused(
    tok: Any, route: str, extra: dict[str, Any], want: int | None
) -> None:
    """InternLM/lmdeploy#4121 (valid ``logprobs`` / ``top_logprobs`` combinations judged a bad
    request) and deepseek-ai/DeepSeek-V2#9 (``top_logprobs`` is valid with ``logprobs: true``):
    Expected, for chat ``logprobs`` true with ``top_logprobs`` 0 or 3, ``logprobs`` false with
    ``top_logprobs`` 0 or absent, and completions ``logprobs`` 0 or 2: a 200; ``logprobs`` null
    when not asked for; otherwise one entry per output token, each with as many alternatives as
    asked (capped by the two the fake manager has: ``min(asked, 2)``)."""
    tc = app_client(FakeTM(tok))
    if route == CHAT:
        body: dict[str, Any] = {"model": "dsv4-test", "messages": [{"role": "user", "content": "Hi"}]}
    else:
        body = {"model": "dsv4-test", "prompt": "Hi"}
    r = tc.post(route, json={**body, "max_tokens": 2, **extra})
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    if want is None:
        assert lp is None
        return
    if route == CHAT:
        ChatCompletion.model_validate(r.json())
        assert len(lp["content"]) == 2
        assert all(len(e["top_logprobs"]) == want for e in lp["content"])
    else:
        Completion.model_validate(r.json())
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == 2
        assert all(isinstance(v, float) for v in lp["token_logprobs"])
        if want:
            assert all(len(t) == want for t in lp["top_logprobs"])


def test_deepseek_v2_9_top_logprobs_without_logprobs_is_a_400(tok: Any) -> None:
    """deepseek-ai/DeepSeek-V2#9: "Invalid top_logprobs and logprobs value"; the maintainers'
    answer is that ``top_logprobs`` needs ``logprobs: true`` (the OpenAI reference says the
    same). Expected for chat ``top_logprobs: 2`` with ``logprobs`` absent: a 400 in OpenAI's
    error shape (``error.message`` naming ``logprobs``), raised by the ``openai`` SDK as
    ``BadRequestError``; the same request with ``logprobs: true`` is then a 200 (nothing left
    behind by the refusal)."""
    client = oai_client(app_client(FakeTM(tok)))
    msgs = [{"role": "user", "content": "Hi"}]
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="dsv4-test", messages=msgs, max_tokens=2, top_logprobs=2)
    body = exc.value.body
    assert isinstance(body, dict) and "logprobs" in str(body.get("message", body))
    ok = client.chat.completions.create(
        model="dsv4-test", messages=msgs, max_tokens=2, top_logprobs=2, logprobs=True
    )
    assert ok.choices[0].logprobs is not None and len(ok.choices[0].logprobs.content or []) == 2


# --------------------------------------------------------------------------- echo


def test_vllm_6508_echo_with_one_new_token_scores_every_prompt_token(tok: Any) -> None:
    """vllm-project/vllm#6508 and huggingface/text-generation-inference#1069: the prompt's
    logprobs are read with ``echo: true``, ``logprobs: 1``, ``max_tokens: 1``. Expected: one
    logprob entry per prompt token plus one for the new token, the first ``None`` (nothing
    predicts it) and the rest floats, ``tokens`` concatenating to the returned text, which is the
    prompt followed by the one new token's text (the ``openai`` SDK's ``Completion``)."""
    prompt = "Score each of these words"
    n_prompt = len(tok.encode(prompt, add_special_tokens=False))
    client = oai_client(app_client(FakeTM(tok)))
    c = client.completions.create(model="dsv4-test", prompt=prompt, max_tokens=1, echo=True, logprobs=1)
    ch = c.choices[0]
    assert ch.logprobs is not None and ch.text.startswith(prompt) and len(ch.text) > len(prompt)
    tokens, lps = ch.logprobs.tokens or [], ch.logprobs.token_logprobs or []
    assert c.usage is not None and c.usage.completion_tokens == 1
    assert len(tokens) == len(lps) == c.usage.prompt_tokens + 1
    assert c.usage.prompt_tokens >= n_prompt
    assert "".join(tokens) == ch.text
    assert lps[0] is None and all(isinstance(v, float) for v in lps[1:])


def test_dynamo_3823_streamed_echo_carries_the_prompt_once(tok: Any) -> None:
    """ai-dynamo/dynamo#3823: a streamed ``echo`` prepended the prompt again whenever a chunk
    carried no new token, duplicating it. Expected for ``stream: true``, ``echo: true``,
    ``logprobs: 1``: the streamed texts concatenate to the prompt followed by the completion of
    the same non-streamed request (the prompt appears once), and the streamed logprob tokens
    concatenate to that same text."""
    prompt = "Echo me once"
    tc = app_client(FakeTM(tok))
    body = {"model": "dsv4-test", "prompt": prompt, "max_tokens": 4, "echo": True, "logprobs": 1}
    whole = tc.post(COMPLETIONS, json=body).json()["choices"][0]["text"]
    assert whole.startswith(prompt)
    text, tokens = "", []
    for ev in sse_data_events(tc.post(COMPLETIONS, json={**body, "stream": True})):
        if ev == "[DONE]":
            continue
        for ch in ev["choices"]:
            text += ch["text"]
            if ch.get("logprobs"):
                tokens += ch["logprobs"]["tokens"]
    assert text == whole
    assert text.count(prompt) == 1
    assert "".join(tokens) == whole


# --------------------------------------------------------------------------- scheduler values


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir)


def _run(s: Scheduler, rid: str, ids: list[int], n: int, **kw: Any) -> dict[str, list[Any]]:
    """Submit one request and step until idle; its output ids, logprobs and top lists."""
    submit(s, rid, ids, n, return_logprob=True, **kw)
    r: dict[str, list[Any]] = {"ids": [], "lp": [], "tv": [], "ti": []}
    fields = {
        "ids": "output_ids",
        "lp": "output_token_logprobs_val",
        "tv": "output_top_logprobs_val",
        "ti": "output_top_logprobs_idx",
    }
    while s.has_work():
        out = s.step()
        for i, got in enumerate(out.rids if out else []):
            if got == rid:
                for k, field in fields.items():
                    vals = getattr(out, field)
                    if vals:
                        r[k] += vals[i]
    return r


def test_camelid_334_greedy_token_heads_its_top_list(sched: Scheduler) -> None:
    """timtoole02/Camelid#334 (greedy invariant: the chosen token is ``top_logprobs[0]`` at every
    step, all logprobs <= 0, alternatives in descending order) and guidance-ai/guidance#82
    (logprobs came back as large positive raw logits). Expected for a greedy request with
    ``top_logprobs_num`` 5: each output token is the first of its top list with the same
    logprob, the lists are in descending order, every value is <= 0, and the first value equals
    the maximum of the step's float64 full row, whose ``logsumexp`` is 0 (a same-request run with
    ``top_logprobs_num`` = vocabulary)."""
    ids = random_ids(18, 83)
    r = _run(sched, "greedy5", ids, 5, sampling={"temperature": 0.0}, top_logprobs_num=5)
    assert len(r["ids"]) == len(r["lp"]) == len(r["tv"]) == 5
    for tid, lp, vals, idx in zip(r["ids"], r["lp"], r["tv"], r["ti"]):
        assert idx[0] == tid and lp == pytest.approx(vals[0], abs=1e-6)
        assert vals == sorted(vals, reverse=True) and all(v <= 0.0 for v in vals)
    full = _run(sched, "greedyV", ids, 5, sampling={"temperature": 0.0}, top_logprobs_num=VOCAB)
    assert full["ids"] == r["ids"]
    for lp, vals, idx in zip(r["lp"], full["tv"], full["ti"]):
        row = torch.full((VOCAB,), float("nan"), dtype=torch.float64)
        row[torch.tensor(idx)] = torch.tensor(vals, dtype=torch.float64)
        assert not torch.isnan(row).any()
        assert abs(torch.logsumexp(row, 0).item()) < 1e-6
        assert lp == pytest.approx(row.max().item(), abs=1e-5)

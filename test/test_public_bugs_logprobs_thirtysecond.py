"""A thirty-second set of public reports on logprobs, replayed on the in-process scheduler:
output logprobs and top lists that must not change with the requested ``top_logprobs_num``;
SGLang's temperature rule for reported logprobs (``log_softmax(logits / T)``, greedy rows at
temperature 1) and its independence from the ``top_p`` / ``top_k`` truncation; streamed output
under a ``stream_interval`` above 1 carrying one logprob per token, equal to the non-streamed
ones; prompt logprobs from ``logprob_start_len`` (one per prompt token from that position, each
the model's own next-token logprob); and a stop string ending the output, whose logprobs stay
one per returned token and equal to the unstopped run's. Each test names its report.

Fixture: the in-process ``Scheduler`` on the random test checkpoint (``sched_model_dir``, vocabulary
1000, CPU float32). Oracles: float64 full-vocabulary rows of a cold run of the same prefix
(``top_logprobs_num`` = vocabulary at the first output step, where every sampling setting sees the
same logits), their ``log_softmax`` after scaling by ``1 / T``, ``logsumexp`` = 0, the run with
the largest top list, the non-streamed run of the same request, and the unstopped run's tokens
decoded with the tokenizer (the stop string's first occurrence).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from dsv4_testutil import random_ids
from openai_fake_tm import FakeTM, app_client
from scheduler_testutil import make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

VOCAB = 1000  # the scheduler test model's vocabulary

FIELDS = {
    "ids": "output_ids",
    "lp": "output_token_logprobs_val",
    "tv": "output_top_logprobs_val",
    "ti": "output_top_logprobs_idx",
    "in_lp": "input_token_logprobs_val",
    "in_idx": "input_token_logprobs_idx",
}


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir)


def _run(s: Scheduler, rid: str, ids: list[int], n: int, **kw: Any) -> dict[str, Any]:
    """Submit one request with ``return_logprob`` and step until idle: its fields of ``FIELDS``
    concatenated over its messages, ``msgs`` (per message: output ids and output logprobs) and
    ``finish`` (the last message's finish reason)."""
    submit(s, rid, ids, n, return_logprob=True, **kw)
    r: dict[str, Any] = {k: [] for k in FIELDS}
    r["msgs"] = []
    while s.has_work():
        out = s.step()
        for i, got in enumerate(out.rids if out else []):
            if got != rid:
                continue
            for k, field in FIELDS.items():
                vals = getattr(out, field)
                if vals and vals[i]:
                    r[k] += vals[i]
            r["msgs"].append((list(out.output_ids[i]), list(out.output_token_logprobs_val[i] or [])))
            r["finish"] = out.finished_reasons[i]
    return r


def _row(vals: list[float], idx: list[int]) -> torch.Tensor:
    """A full float64 vocabulary row from a top list of the whole vocabulary."""
    row = torch.full((VOCAB,), float("nan"), dtype=torch.float64)
    row[torch.tensor(idx)] = torch.tensor(vals, dtype=torch.float64)
    assert not torch.isnan(row).any(), "the top list did not cover the vocabulary"
    return row


def _first_row(
    s: Scheduler, rid: str, ids: list[int], sampling: dict[str, Any]
) -> tuple[torch.Tensor, int, float]:
    """The first output step of ``ids`` under ``sampling``: its reported full row, the sampled id
    and that id's reported logprob."""
    r = _run(s, rid, ids, 1, sampling=sampling, top_logprobs_num=VOCAB)
    assert len(r["ids"]) == len(r["lp"]) == len(r["tv"]) == 1
    return _row(r["tv"][0], r["ti"][0]), r["ids"][0], r["lp"][0]


# --------------------------------------------------------------------------- top list size


def test_vllm_44319_logprobs_do_not_change_with_requested_count(sched: Scheduler) -> None:
    """vllm-project/vllm#44319 (fixed by vllm-project/vllm#44504): asking for ``logprobs=N``
    returned fewer than N entries, and a token's logprob seemed to change as N changed. Expected:
    for N = 1, 3 and 7 the same greedy output, exactly N alternatives per step, each sampled
    token's logprob the same, and every shorter top list (ids and values) the first N entries of
    the 7-entry list."""
    ids = random_ids(16, 3201)
    runs = {k: _run(sched, f"n{k}", ids, 6, top_logprobs_num=k) for k in (7, 3, 1)}
    ref = runs[7]
    assert len(ref["ids"]) == 6
    for k, r in runs.items():
        assert r["ids"] == ref["ids"]
        assert r["lp"] == pytest.approx(ref["lp"], abs=1e-6)
        assert len(r["tv"]) == len(r["ti"]) == 6
        for vals, idx, rv, ri in zip(r["tv"], r["ti"], ref["tv"], ref["ti"]):
            assert len(vals) == len(idx) == k and len(set(idx)) == k
            assert idx == ri[:k]
            assert vals == pytest.approx(rv[:k], abs=1e-6)


# --------------------------------------------------------------------------- temperature


def test_miles_68_reported_logprobs_follow_the_temperature(sched: Scheduler) -> None:
    """radixark/miles#68 and THUDM/slime#557 ("logprob does not handle temperature"), and
    PrimeIntellect-ai/prime-rl#697 (dividing logprobs by T instead of the logits is wrong):
    with SGLang's rule the reported logprobs are ``log_softmax(logits / T)`` and a greedy request
    reports temperature 1. Expected at the first output step, where every setting sees the same
    logits: the greedy row equals the T = 1 row; the T = 0.5 and T = 1.7 rows equal the float64
    ``log_softmax`` of the T = 1 row times ``1 / T`` (not that row divided by T), each with
    ``logsumexp`` 0; the sampled token's own logprob is its row's entry."""
    ids = random_ids(14, 3202)
    base, tok1, lp1 = _first_row(sched, "t1", ids, {"temperature": 1.0, "sampling_seed": 7})
    greedy, _, _ = _first_row(sched, "t0", ids, {"temperature": 0.0})
    assert torch.allclose(greedy, base, atol=1e-5)
    assert lp1 == pytest.approx(base[tok1].item(), abs=1e-6)
    for t in (0.5, 1.7):
        got, tok, lp = _first_row(sched, f"t{t}", ids, {"temperature": t, "sampling_seed": 7})
        want = torch.log_softmax(base / t, dim=0)
        assert abs(torch.logsumexp(got, 0).item()) < 1e-5
        assert torch.allclose(got, want, atol=2e-5), (got - want).abs().max()
        assert not torch.allclose(got, base / t, atol=1e-3)
        assert lp == pytest.approx(got[tok].item(), abs=1e-6)


def test_vime_69_top_p_and_top_k_do_not_truncate_the_reported_row(sched: Scheduler) -> None:
    """vllm-project/vime#69: processed logprobs differ between engines once ``top_p`` / ``top_k``
    truncate the distribution (vLLM renormalises after the filter, SGLang reports the logprobs
    before it). Expected with SGLang's rule, at T = 0.8 with ``top_p`` 0.3 and ``top_k`` 3: the
    full reported row is finite and equals the float64 ``log_softmax`` of the T = 1 row divided
    by 0.8 (the truncated tokens keep their logprobs), and the sampled token is one of the three
    most likely."""
    ids = random_ids(15, 3203)
    base, _, _ = _first_row(sched, "p1", ids, {"temperature": 1.0, "sampling_seed": 3})
    got, tok, lp = _first_row(
        sched, "p2", ids, {"temperature": 0.8, "top_p": 0.3, "top_k": 3, "sampling_seed": 3}
    )
    assert torch.isfinite(got).all()
    assert torch.allclose(got, torch.log_softmax(base / 0.8, dim=0), atol=2e-5)
    assert tok in torch.topk(base, 3).indices.tolist()
    assert lp == pytest.approx(got[tok].item(), abs=1e-6)


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("interval", [2, 3])
def test_rapid_mlx_220_stream_interval_keeps_one_logprob_per_token(sched: Scheduler, interval: int) -> None:
    """raullenchai/Rapid-MLX#220 (fixed by raullenchai/Rapid-MLX#243): under ``stream_interval``
    above 1 a streamed message merging several steps carried one logprob entry instead of one per
    token, and its top lists mixed the steps' distributions. Expected for a streamed request with
    the request's ``stream_interval`` 2 and 3: every message has as many logprobs (and top lists)
    as new tokens, some message has more than one token, and the concatenation equals the
    non-streamed run of the same request (ids, logprobs and top lists)."""
    ids = random_ids(13, 3204)
    whole = _run(sched, f"whole{interval}", ids, 7, top_logprobs_num=3)
    streamed = _run(
        sched,
        f"stream{interval}",
        ids,
        7,
        top_logprobs_num=3,
        stream=True,
        sampling={"stream_interval": interval},
    )
    assert len(whole["ids"]) == 7
    for out_ids, out_lp in streamed["msgs"]:
        assert len(out_lp) == len(out_ids)
    assert max(len(m[0]) for m in streamed["msgs"]) > 1
    assert streamed["ids"] == whole["ids"]
    assert streamed["lp"] == pytest.approx(whole["lp"], abs=1e-6)
    assert streamed["ti"] == whole["ti"]
    for a, b in zip(streamed["tv"], whole["tv"]):
        assert a == pytest.approx(b, abs=1e-6)


# --------------------------------------------------------------------------- prompt logprobs


def test_weborganizer_2_prompt_logprobs_start_at_logprob_start_len(sched: Scheduler) -> None:
    """CodeCreator/WebOrganizer#2: ``input_token_logprobs`` did not hold the entries a client
    expected from ``logprob_start_len`` (the first entry was the answer token). Expected with
    ``logprob_start_len`` = 9 on a 13-token prompt, in SGLang's shape (``[None]`` then the
    computed logprobs, the first position having no logits before it in the run): four entries,
    for prompt positions 9..12 with those token ids, the first ``None`` and each other value the
    logprob of its token in the float64 full row of a cold run of the prompt prefix before it
    (its first output step, greedy, so temperature 1)."""
    ids = random_ids(13, 3205)
    start = 9
    r = _run(sched, "plp", ids, 1, logprob_start_len=start)
    assert r["in_idx"] == ids[start:]
    assert len(r["in_lp"]) == len(ids) - start
    assert r["in_lp"][0] is None
    for j, got in zip(range(start + 1, len(ids)), r["in_lp"][1:]):
        row, _, _ = _first_row(sched, f"plp-cold{j}", ids[:j], {"temperature": 0.0})
        assert got == pytest.approx(row[ids[j]].item(), abs=1e-5)


# --------------------------------------------------------------------------- stop strings


def test_vllm_47616_stop_string_keeps_logprobs_aligned(sched: Scheduler) -> None:
    """vllm-project/vllm#47616: when a stop string completed inside a step, the text was trimmed
    but the token ids and logprobs generated past the stop were still returned. Expected: with a
    stop string made of two middle tokens of the unstopped greedy output, the output ends at the
    first token whose decoded prefix contains the stop (the tokenizer's decode of the unstopped
    ids), the finish reason is a stop, and there is one logprob per returned token, equal to the
    unstopped run's."""
    tok = sched.tokenizer
    ids = random_ids(12, 3206)
    full = _run(sched, "nostop", ids, 10, top_logprobs_num=2)
    out = full["ids"]
    assert len(out) == 10
    stop = tok.decode(out[4:6])
    assert stop.strip(), "the stop string must be visible text"
    k = next(i for i in range(1, len(out) + 1) if stop in tok.decode(out[:i]))
    assert k < len(out)
    r = _run(sched, "stopped", ids, 10, top_logprobs_num=2, sampling={"stop": [stop]})
    assert r["finish"] is not None and r["finish"].get("type") == "stop"
    assert r["ids"] == out[:k]
    assert len(r["lp"]) == len(r["tv"]) == k
    assert r["lp"] == pytest.approx(full["lp"][:k], abs=1e-6)
    assert r["ti"] == full["ti"][:k]


# --------------------------------------------------------------------------- Responses API


def _sse_json(text: str) -> list[dict[str, Any]]:
    """The JSON ``data:`` payloads of an SSE body."""
    return [json.loads(line[len("data: ") :]) for line in text.split("\n") if line.startswith("data: {")]


def test_sglang_34127_responses_stream_logprobs_align_with_deltas(tok: Any) -> None:
    """sgl-project/sglang#34127 (review): streamed Responses logprobs pinned one token's logprob
    to a delta that could span several tokens, so a delta's logprobs did not match its text, and
    sparse top lists were misaligned. Expected with ``include`` of
    ``message.output_text.logprobs`` and ``top_logprobs`` 2: each ``response.output_text.delta``
    has logprob tokens that join to its own ``delta`` text, each with two alternatives (the
    sampled token first, equal values); the deltas' logprobs in order equal the
    ``response.output_text.done`` event's and the non-streamed response's (token, logprob, top
    lists); and the token ids the manager reported, decoded, give the reply."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    body = {
        "model": "dsv4-test",
        "input": "Hi",
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 2,
    }
    r = tc.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    parts = [c for o in r.json()["output"] if o["type"] == "message" for c in o["content"]]
    assert len(parts) == 1 and parts[0]["text"] == tm.reply
    whole = parts[0]["logprobs"]
    want_tokens = [tok.decode([t]) for t in tok.encode(tm.reply, add_special_tokens=False)]
    assert [e["token"] for e in whole] == want_tokens

    r = tc.post("/v1/responses", json={**body, "stream": True})
    assert r.status_code == 200, r.text
    events = _sse_json(r.text)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    done = [e for e in events if e["type"] == "response.output_text.done"]
    assert deltas and len(done) == 1
    streamed = []
    for d in deltas:
        lps = d.get("logprobs") or []
        assert "".join(e["token"] for e in lps) == d["delta"]
        for e in lps:
            assert len(e["top_logprobs"]) == 2
            assert e["top_logprobs"][0]["token"] == e["token"]
            assert e["top_logprobs"][0]["logprob"] == pytest.approx(e["logprob"])
        streamed += lps
    assert "".join(d["delta"] for d in deltas) == tm.reply

    def key(es: list[dict[str, Any]]) -> list[Any]:
        return [
            (
                e["token"],
                round(e["logprob"], 9),
                [(t["token"], round(t["logprob"], 9)) for t in e["top_logprobs"]],
            )
            for e in es
        ]

    assert key(streamed) == key(whole)
    assert key(done[0].get("logprobs") or []) == key(whole)


# --------------------------------------------------------------------------- chat with reasoning


def test_sglang_26782_streamed_reasoning_logprobs_split_per_chunk(tok: Any) -> None:
    """sgl-project/sglang#26782: with a reasoning parser on, streamed chat logprobs were bundled
    per step instead of following the chunk that carried their text, so ``logprobs.content`` did
    not line up with ``reasoning_content`` / ``content`` (a train/inference mismatch in RL
    rollouts). Expected for a thinking-mode chat whose reply is reasoning, ``</think>``, answer:
    each chunk's logprob tokens, the ``</think>`` marker aside, join to the text that chunk
    carries; the reasoning chunks' tokens join to the non-streamed ``reasoning_content``, the
    content chunks' to its ``content``; the marker's logprob is sent once; and all the streamed
    entries in order equal the non-streamed ``logprobs.content`` (token and logprob), which holds
    one entry per reply token (the tokenizer's own encoding of the reply)."""
    reasoning, answer = "Let me think about it.", "The answer is 4."
    tm = FakeTM(tok, reply=f"{reasoning}</think>{answer}")
    tc = app_client(tm)
    body = {
        "model": "dsv4-test",
        "messages": [{"role": "user", "content": "2+2?"}],
        "logprobs": True,
        "top_logprobs": 1,
        "chat_template_kwargs": {"thinking": True},
    }
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["reasoning_content"] == reasoning
    assert choice["message"]["content"] == answer
    whole = choice["logprobs"]["content"]
    reply_ids = tok.encode(tm.reply, add_special_tokens=False)
    assert [e["token"] for e in whole] == [tok.decode([t]) for t in reply_ids]

    r = tc.post("/v1/chat/completions", json={**body, "stream": True})
    assert r.status_code == 200, r.text
    streamed: list[dict[str, Any]] = []
    in_reasoning: list[str] = []
    in_content: list[str] = []
    for ev in _sse_json(r.text):
        for ch in ev["choices"]:
            delta = ch["delta"]
            lps = (ch.get("logprobs") or {}).get("content") or []
            texts = "".join(e["token"] for e in lps if e["token"] != "</think>")
            assert texts == (delta.get("reasoning_content") or "") + (delta.get("content") or "")
            (in_reasoning if delta.get("reasoning_content") else in_content).append(texts)
            streamed += lps
    assert "".join(in_reasoning) == reasoning
    assert "".join(in_content) == answer
    assert [e["token"] for e in streamed].count("</think>") == 1
    assert [(e["token"], round(e["logprob"], 9)) for e in streamed] == [
        (e["token"], round(e["logprob"], 9)) for e in whole
    ]

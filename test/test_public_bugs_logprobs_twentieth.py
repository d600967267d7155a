"""A twentieth set of public bug reports, on token log probabilities: ``-inf`` / NaN logprobs in
chat, streamed chat, echoed prompts and ``/generate`` bodies (never an invalid JSON number), a
streamed ``n: 2`` chat folded by the OpenAI client, engine outputs that carry several tokens at
once (streamed legacy completions and chat), logprobs on a stream that has stop strings, the
``token_ids`` / ``logprobs`` lengths of a choice, and the engine's values: exactly
``top_logprobs_num`` entries per position, a normalized ``log_softmax`` whose sampled entry is the
token's own logprob, scaled by the temperature (SGLang's rule) and left alone by top-p / top-k /
min-p. Each test names its report; all passed as-is and are kept as regression tests.

Fixtures: the OpenAI router in-process over ``openai_fake_tm.FakeTM`` (subclassed to write
non-finite values or to coalesce outputs), and an in-process CPU ``Scheduler`` on conftest's
``sched_model_dir``. Oracles: strict JSON parsing (no ``Infinity`` / ``NaN`` constants), OpenAI's
documented floor of -9999.0, the ``openai`` client's own parser and stream accumulator, the same
request unstreamed, and a float64 ``log_softmax`` of the greedy run's full-vocabulary logprobs.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import torch
from dsv4_testutil import random_ids
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events
from scheduler_testutil import make_scheduler, submit
from sglang_v4.entrypoints.native_api import json_response
from sglang_v4.managers.scheduler import Scheduler

pytestmark = pytest.mark.timeout(240)

MODEL = "dsv4-test"
USER = [{"role": "user", "content": "Hi"}]
#: OpenAI's logprob of a token with no probability (its chat reference; vLLM clamps to it)
OPENAI_FLOOR = -9999.0
VOCAB = 1000  # the scheduler test model's vocabulary


def _strict(text: str) -> Any:
    """``json.loads`` that refuses ``Infinity``, ``-Infinity`` and ``NaN`` (not JSON numbers)."""

    def bad(name: str) -> Any:
        raise ValueError(f"non-JSON constant {name}")

    return json.loads(text, parse_constant=bad)


class _NonFiniteTM(FakeTM):
    """A FakeTM whose top lists end with a ``-inf`` and a NaN candidate (a constrained or
    top-p-cut step, where the engine's top-k reaches tokens of probability 0), whose prompt
    positions after the first have such top lists too, and whose first sampled token's logprob is
    ``-inf``."""

    def _output(self, sub: Any, k: int) -> list[dict[str, Any]]:
        outs = super()._output(sub, k)
        for o in outs:
            m = o["meta_info"]
            if "output_token_logprobs" not in m:
                continue
            m["output_token_logprobs"][0][0] = float("-inf")
            if "output_top_logprobs" in m:
                m["output_top_logprobs"] = [
                    [list(e) for e in row] + [[float("-inf"), 7, None], [float("nan"), 8, None]]
                    for row in m["output_top_logprobs"]
                ]
                m["input_top_logprobs"] = [
                    None if i == 0 else [[-1.0, t, None], [float("-inf"), 9, None]]
                    for i, (_, t, _) in enumerate(m["input_token_logprobs"])
                ]
        return outs


def test_minus_inf_top_logprobs_are_json_numbers_on_chat(tok: Any) -> None:
    # sgl-project/sglang#2955: a chat answer whose top_logprobs held -inf failed to serialize
    # (or went out as an invalid JSON constant). OpenAI writes -9999.0 for such tokens.
    c = app_client(_NonFiniteTM(tok))
    body = {"model": MODEL, "messages": USER, "logprobs": True, "top_logprobs": 4}
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    d = _strict(r.text)
    content = d["choices"][0]["logprobs"]["content"]
    assert content[0]["logprob"] == OPENAI_FLOOR
    for entry in content:
        assert [t["logprob"] for t in entry["top_logprobs"]][-2:] == [OPENAI_FLOOR, OPENAI_FLOOR]
        assert all(math.isfinite(t["logprob"]) for t in entry["top_logprobs"])
    # the openai client's own parser takes the body (typed floats, no None)
    parsed = oai_client(c).chat.completions.create(**body)
    assert all(isinstance(t.logprob, float) for t in parsed.choices[0].logprobs.content[1].top_logprobs)


def test_streamed_minus_inf_logprobs_are_json_numbers(tok: Any) -> None:
    # sgl-project/sglang#5984: top_p=0.3 with logprobs gave -inf top entries and a 500; every
    # streamed chunk must be valid JSON with finite logprobs.
    c = app_client(_NonFiniteTM(tok))
    body = {"model": MODEL, "messages": USER, "logprobs": True, "top_logprobs": 4, "stream": True}
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    chunks = [_strict(line[6:]) for line in r.text.split("\n") if line.startswith("data: {")]
    entries = [
        e for ch in chunks for c_ in ch["choices"] for e in ((c_.get("logprobs") or {}).get("content") or [])
    ]
    assert entries, "no logprobs streamed"
    assert entries[0]["logprob"] == OPENAI_FLOOR
    assert all(math.isfinite(t["logprob"]) for e in entries for t in e["top_logprobs"])


def test_echoed_prompt_minus_inf_top_logprobs_are_clamped(tok: Any) -> None:
    # vllm-project/vllm#10234: echo + logprobs with top_k sampling made the prompt's top logprobs
    # -inf and the completions answer a 500 (fixed by clamping to -9999.0, vllm-project/vllm#11073).
    c = app_client(_NonFiniteTM(tok))
    body = {"model": MODEL, "prompt": "correct horse battery staple", "echo": True, "logprobs": 2, "top_k": 1}
    r = c.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    lp = _strict(r.text)["choices"][0]["logprobs"]
    n_prompt = len(tok.encode(body["prompt"], add_special_tokens=False))
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    for top in lp["top_logprobs"][1:]:
        assert all(math.isfinite(v) for v in top.values())
    assert OPENAI_FLOOR in lp["top_logprobs"][1].values()  # a prompt position's -inf candidate
    assert lp["token_logprobs"][n_prompt] == OPENAI_FLOOR  # the first sampled token's -inf
    top_k = body.pop("top_k")
    parsed = oai_client(c).completions.create(**body, extra_body={"top_k": top_k})
    assert parsed.choices[0].logprobs.token_logprobs[n_prompt] == OPENAI_FLOOR


def test_generate_body_with_minus_inf_logprobs_is_valid_json() -> None:
    # sgl-project/sglang#4097: /generate's JSON response broke on -inf top logprobs. The native
    # routes' writer gives JSON's null for non-finite floats, never an invalid constant.
    meta = {"output_top_logprobs": [[[-0.37, 87575, None], [float("-inf"), 9642, None]]], "x": float("nan")}
    body = _strict(json_response({"text": "Yes", "meta_info": meta}).body.decode())
    assert body["meta_info"]["output_top_logprobs"][0][1][0] is None
    assert body["meta_info"]["output_top_logprobs"][0][0][0] == -0.37
    assert body["meta_info"]["x"] is None


def _lp_tokens(choice: Any) -> list[tuple[str, float, list[tuple[str, float]]]]:
    return [
        (e.token, e.logprob, [(t.token, t.logprob) for t in e.top_logprobs]) for e in choice.logprobs.content
    ]


def test_n2_stream_folds_to_the_unstreamed_logprobs(tok: Any) -> None:
    # openai/openai-ruby#564: the client's stream helper duplicated the logprobs of a choice that
    # first appeared after the stream's first chunk (n: 2). Here the server side: folded by the
    # openai client's own accumulator, each streamed choice's logprobs are the unstreamed ones,
    # once each, and their tokens join to the choice's content.
    c = oai_client(app_client(FakeTM(tok)))
    kw = {"model": MODEL, "messages": USER, "logprobs": True, "top_logprobs": 2, "n": 2}
    plain = c.chat.completions.create(**kw)
    with c.chat.completions.stream(**kw) as stream:
        folded = stream.get_final_completion()
    assert len(folded.choices) == 2
    for fc, pc in zip(sorted(folded.choices, key=lambda x: x.index), plain.choices):
        assert _lp_tokens(fc) == _lp_tokens(pc)
        assert "".join(e.token for e in fc.logprobs.content) == fc.message.content == pc.message.content
    assert plain.choices[0].message.content != plain.choices[1].message.content


class _CoalescingTM(FakeTM):
    """A FakeTM that streams only every third engine output (and the last): each output it sends
    carries up to three new tokens, as with ``stream_interval`` above 1 or speculative decoding."""

    async def generate_request(self, obj: Any, request: Any = None) -> Any:
        items = [o async for o in super().generate_request(obj, request)]
        for i, o in enumerate(items):
            if not obj.stream or i % 3 == 2 or i == len(items) - 1:
                yield o


def test_multi_token_completion_chunks_keep_every_token(tok: Any) -> None:
    # theroyallab/tabbyAPI#141: when one streamed output held several tokens, the legacy `tokens`
    # array lost tokens and `top_logprobs` merged two positions into one dict. The streamed
    # logprobs joined must be the unstreamed ones, position by position.
    c = app_client(_CoalescingTM(tok))
    body = {"model": MODEL, "prompt": "Say hello!", "logprobs": 2, "max_tokens": 20}
    plain = c.post("/v1/completions", json=body).json()["choices"][0]["logprobs"]
    events = [
        e for e in sse_data_events(c.post("/v1/completions", json={**body, "stream": True})) if e != "[DONE]"
    ]
    joined: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    per_chunk = []
    for ev in events:
        for ch in ev["choices"]:
            if ch.get("logprobs"):
                per_chunk.append(len(ch["logprobs"]["tokens"]))
                for k in joined:
                    joined[k] += ch["logprobs"][k]
    assert max(per_chunk) > 1  # the case of the report: several tokens in one chunk
    assert joined == {k: plain[k] for k in joined}


def test_multi_token_chat_chunks_fold_to_the_unstreamed_logprobs(tok: Any) -> None:
    # Menci/Floway#481: streamed chat logprobs must accumulate across chunks (each chunk holds its
    # own tokens' entries), so that the folded stream has every token, not the last chunk's.
    c = oai_client(app_client(_CoalescingTM(tok)))
    kw = {"model": MODEL, "messages": USER, "logprobs": True, "top_logprobs": 2}
    plain = c.chat.completions.create(**kw)
    with c.chat.completions.stream(**kw) as stream:
        folded = stream.get_final_completion()
    assert _lp_tokens(folded.choices[0]) == _lp_tokens(plain.choices[0])
    assert len(plain.choices[0].logprobs.content) == len(
        tok.encode(FakeTM(tok).reply, add_special_tokens=False)
    )


def test_stream_with_stop_strings_still_carries_logprobs(tok: Any) -> None:
    # kekzl/imp#1588: a streamed chat request with any `stop` sequence went out through a path
    # that wrote no logprobs at all. Each content chunk carries the logprobs of its own text.
    c = app_client(FakeTM(tok))
    body = {"model": MODEL, "messages": USER, "logprobs": True, "stop": ["zzz", "\n\n"], "stream": True}
    events = [e for e in sse_data_events(c.post("/v1/chat/completions", json=body)) if e != "[DONE]"]
    content, tokens = "", ""
    for ev in events:
        for ch in ev["choices"]:
            piece = (ch.get("delta") or {}).get("content") or ""
            lp = (ch.get("logprobs") or {}).get("content") or []
            if piece:
                assert lp, f"content chunk {piece!r} without logprobs"
            content += piece
            tokens += "".join(e["token"] for e in lp)
    assert content and tokens == content


def test_token_ids_and_logprobs_have_one_entry_per_token(tok: Any) -> None:
    # NVIDIA/TensorRT-LLM#18190: a choice's token ids and its logprobs came out with different
    # lengths (stop tokens trimmed from one only), and zipping them failed. vLLM's
    # `return_token_ids` and the logprobs of a choice describe the same tokens, in order.
    c = app_client(FakeTM(tok))
    body = {"model": MODEL, "messages": USER, "logprobs": True, "return_token_ids": True, "n": 2}
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    for ch in r.json()["choices"]:
        ids = ch["token_ids"]
        entries = ch["logprobs"]["content"]
        assert len(ids) == len(entries)
        assert [e["token"] for e in entries] == [tok.decode([i]) for i in ids]


# ---- the engine's values: in-process scheduler on the random test model (vocabulary 1000) ----


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir)


def _run_top(s: Scheduler, rid: str, ids: list[int], n: int, top: int, sampling: dict[str, Any]) -> dict:
    """Run one request with ``top`` top logprobs; its ``ids``, ``lp`` and per-position ``tv``/``ti``."""
    submit(s, rid, ids, n, sampling=sampling, return_logprob=True, top_logprobs_num=top)
    res: dict[str, list[Any]] = {"ids": [], "lp": [], "tv": [], "ti": []}
    for _ in range(1000):
        if not s.has_work():
            return res
        out = s.step()
        for i, r in enumerate(out.rids if out else []):
            if r == rid:
                res["ids"] += out.output_ids[i]
                res["lp"] += out.output_token_logprobs_val[i]
                res["tv"] += out.output_top_logprobs_val[i]
                res["ti"] += out.output_top_logprobs_idx[i]
    raise AssertionError("scheduler did not finish")


def _full_row(values: list[float], idx: list[int]) -> torch.Tensor:
    row = torch.full((VOCAB,), float("nan"), dtype=torch.float64)
    row[torch.tensor(idx)] = torch.tensor(values, dtype=torch.float64)
    assert not torch.isnan(row).any(), "the top list does not cover the vocabulary"
    return row


def test_top_logprobs_count_is_exactly_the_request(sched: Scheduler) -> None:
    # InternLM/lmdeploy#1548: top_logprobs=5 returned 4 entries per token. Every position has
    # exactly top_logprobs_num entries, distinct, in descending order, the greedy token first.
    r = _run_top(sched, "top5", random_ids(30, 5), 4, 5, {})
    assert len(r["tv"]) == len(r["ids"]) == 4
    for ids, vals, tid in zip(r["ti"], r["tv"], r["ids"]):
        assert len(ids) == len(set(ids)) == 5
        assert vals == sorted(vals, reverse=True)
        assert ids[0] == tid


def test_logprobs_are_a_normalized_log_softmax(sched: Scheduler) -> None:
    # vllm-project/vllm#499 ("is it log_softmax(logits)?"): the full-vocabulary top list of a
    # greedy step is a log-distribution (logsumexp 0 in float64), and the sampled token's logprob
    # is its entry there.
    r = _run_top(sched, "full", random_ids(40, 3), 3, VOCAB, {})
    for vals, idx, tid, lp in zip(r["tv"], r["ti"], r["ids"], r["lp"]):
        row = _full_row(vals, idx)
        assert abs(torch.logsumexp(row, 0).item()) < 1e-5
        assert lp == pytest.approx(row[tid].item(), abs=1e-6)
        assert row[tid].item() == row.max().item()  # greedy


@pytest.mark.parametrize(
    "sampling",
    [
        {"temperature": 1.0, "top_p": 0.3, "sampling_seed": 1},
        {"temperature": 2.0, "top_p": 0.3, "top_k": 5, "sampling_seed": 1},
        {"temperature": 0.5, "min_p": 0.2, "sampling_seed": 2},
    ],
    ids=["top_p", "temperature_top_k", "min_p"],
)
def test_logprobs_follow_the_temperature_not_the_truncation(
    sched: Scheduler, sampling: dict[str, Any]
) -> None:
    # ollama/ollama#16196 (logprobs should reflect the temperature) and sgl-project/sglang#5984
    # (top_p=0.3 gave -inf logprobs): SGLang reports log_softmax(logits / temperature), with no
    # top-p / top-k / min-p cut. Oracle: float64 log_softmax of the greedy run's full row / T.
    ids = random_ids(40, 3)
    greedy = _run_top(sched, "greedy", ids, 1, VOCAB, {})
    base = _full_row(greedy["tv"][0], greedy["ti"][0])
    r = _run_top(sched, "sampled", ids, 1, VOCAB, sampling)
    got = _full_row(r["tv"][0], r["ti"][0])
    oracle = torch.log_softmax(base / sampling["temperature"], 0)
    assert torch.isfinite(got).all()
    assert (got - oracle).abs().max().item() < 1e-5
    assert r["lp"][0] == pytest.approx(oracle[r["ids"][0]].item(), abs=1e-5)

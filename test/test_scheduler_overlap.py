"""Overlap scheduling in-process: the same workload with and without ``--disable-overlap-schedule``.

Oracle: the scheduler without overlap (every step schedules, runs and processes one batch before
the next; tied to HF transformers by the parity tests). With overlap the next batch is built while
the previous one runs, so the tokens must be identical; logprobs are compared at 1e-4 (the forward
is not batch-invariant, and a request that finished may still sit in the next batch). Every step
the page ownership invariant is checked (``CacheManager.check_integrity``), and at the end every
page and slot is free. Covered: chunked prefill, prefix hits, prompt and output logprobs (top-k),
n > 1, stop tokens and stop strings (the extra token scheduled after the stop is discarded),
a seeded sampled request, grammar and penalty requests (those steps do not overlap), retraction
under a tight pool, aborts, and a device out-of-memory error injected into one forward.
"""

from __future__ import annotations

from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import assert_idle, drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

LP = dict(return_logprob=True, logprob_start_len=250, top_logprobs_num=3)


def _checked_drain(s: Scheduler, res: dict | None = None) -> dict[str, dict]:
    """:func:`drain` with the page-ownership invariant checked after every step."""
    res = {} if res is None else res
    while s.has_work():
        step_res = drain_one(s)
        for rid, r in step_res.items():
            acc = res.setdefault(rid, {"ids": [], "lp": [], "in_lp": [], "top": []})
            for k in ("ids", "lp", "in_lp", "top"):
                acc[k] += r[k]
            acc["finish"], acc["cached"] = r["finish"], r["cached"]
        s.cache_manager.check_integrity(list(s.running) + list(s.waiting))
    return res


def drain_one(s: Scheduler) -> dict[str, dict]:
    out = s.step()
    got: dict[str, dict] = {}
    for i, rid in enumerate(out.rids if out else []):
        got[rid] = {
            "ids": list(out.output_ids[i]),
            "lp": list(out.output_token_logprobs_val[i]),
            "in_lp": list(out.input_token_logprobs_val[i]),
            "top": list(out.output_top_logprobs_idx[i]),
            "finish": out.finished_reasons[i],
            "cached": out.cached_tokens[i],
        }
    return got


def _same(a: dict[str, dict], b: dict[str, dict]) -> None:
    assert sorted(a) == sorted(b)
    for rid in a:
        x, y = a[rid], b[rid]
        assert x["ids"] == y["ids"], rid
        assert x["finish"] == y["finish"], rid
        assert x["top"] == y["top"], rid
        assert x["cached"] == y["cached"], rid
        assert len(x["lp"]) == len(y["lp"]) and len(x["in_lp"]) == len(y["in_lp"]), rid
        assert x["lp"] == pytest.approx(y["lp"], abs=1e-4), rid
        assert [v for v in x["in_lp"] if v is not None] == pytest.approx(
            [v for v in y["in_lp"] if v is not None], abs=1e-4
        ), rid


def _workload(s: Scheduler, stops: dict[str, Any]) -> dict[str, dict]:
    """Two phases: requests that fill the radix cache, then ones that hit it, with everything
    else mixed in. ``stops``: the stop token and stop string picked from a first run."""
    shared = random_ids(512, seed=90)
    submit(s, "a", shared + random_ids(40, seed=91), 10, **LP)
    submit(s, "long", random_ids(700, seed=92), 6)  # chunked (chunk 256)
    submit(s, "n0", random_ids(120, seed=93), 9)
    submit(s, "n1", random_ids(120, seed=93), 9)  # n > 1: the same prompt twice
    submit(s, "seeded", random_ids(60, seed=94), 8, sampling={"temperature": 0.9, "sampling_seed": 7})
    res = _checked_drain(s)
    submit(s, "hit", shared + random_ids(30, seed=95), 8, **(LP | {"logprob_start_len": 520}))  # hits 512
    submit(
        s,
        "stop_tok",
        random_ids(80, seed=96),
        12,
        ignore_eos=False,
        sampling={"stop_token_ids": [stops["tok"]]},
    )
    submit(s, "stop_str", random_ids(90, seed=97), 12, sampling={"stop": [stops["str"]]})
    submit(s, "pen", random_ids(70, seed=98), 8, sampling={"frequency_penalty": 0.8, "presence_penalty": 0.3})
    if s.grammar_enabled:
        submit(s, "regex", random_ids(50, seed=99), 8, sampling={"regex": "[a-z]{2,5}"})
    submit(s, "plain", random_ids(40, seed=100), 11, return_logprob=True)
    return _checked_drain(s, res)


@pytest.fixture(scope="module")
def stops(sched_model_dir: str) -> dict[str, Any]:
    """A stop token (the 4th output token) and a stop string (the text of the 5th and 6th output
    tokens) of the two stop requests, from a run without stops."""
    s = make_scheduler(sched_model_dir, disable_overlap_schedule=True)
    submit(s, "t", random_ids(80, seed=96), 12)
    submit(s, "s", random_ids(90, seed=97), 12)
    out = drain(s)
    text = s.tokenizer.decode(out["s"]["ids"][4:6])
    assert text.strip() and "\ufffd" not in text
    return {"tok": out["t"]["ids"][3], "str": text}


def test_overlap_matches_normal_mixed_workload(sched_model_dir: str, stops: dict[str, Any]) -> None:
    results = {}
    for overlap in (False, True):
        s = make_scheduler(sched_model_dir, chunked_prefill_size=256, disable_overlap_schedule=not overlap)
        assert s.enable_overlap is overlap
        results[overlap] = _workload(s, stops)
        assert_idle(s)
    _same(results[True], results[False])
    r = results[True]
    assert r["hit"]["cached"] == 512
    assert r["stop_tok"]["finish"] == {"type": "stop", "matched": stops["tok"]}
    assert r["stop_tok"]["ids"][-1] == stops["tok"] and len(r["stop_tok"]["ids"]) <= 4
    assert r["stop_str"]["finish"] == {"type": "stop", "matched": stops["str"]}
    assert r["n0"]["ids"] == r["n1"]["ids"]
    for rid, n in (("a", 552 - 250), ("hit", 542 - 520)):
        assert len(r[rid]["in_lp"]) == n
        assert all(len(t) == 3 for t in r[rid]["top"])


def test_overlap_exact_when_batches_match(sched_model_dir: str) -> None:
    """Requests of equal length without stops: every step's batch is the same in both modes, so
    the logprobs are bit-identical too."""
    results = {}
    for overlap in (False, True):
        s = make_scheduler(sched_model_dir, disable_overlap_schedule=not overlap)
        for i in range(3):
            submit(s, f"r{i}", random_ids(100, seed=200 + i), 10, return_logprob=True)
        results[overlap] = _checked_drain(s)
    for rid in results[False]:
        assert results[True][rid]["ids"] == results[False][rid]["ids"]
        assert results[True][rid]["lp"] == results[False][rid]["lp"]


@pytest.mark.slow
def test_overlap_retraction_tight_pool(sched_model_dir: str) -> None:
    """Three requests growing to 3 blocks each on a 5-block pool: retraction in both modes, and the
    same tokens as each request run alone on a roomy pool."""
    prompts = [random_ids(300, seed=40 + i) for i in range(3)]
    roomy = make_scheduler(sched_model_dir, disable_overlap_schedule=True)
    alone = {}
    for i, p in enumerate(prompts):
        submit(roomy, f"r{i}", p, 240)
        alone.update(drain(roomy))
    for overlap in (False, True):
        tight = make_scheduler(
            sched_model_dir, max_total_tokens=5 * 256, disable_overlap_schedule=not overlap
        )
        for i, p in enumerate(prompts):
            submit(tight, f"r{i}", p, 240)
        got = _checked_drain(tight)
        assert tight.num_retractions > 0
        for rid in alone:
            assert got[rid]["ids"] == alone[rid]["ids"], (overlap, rid)
        assert_idle(tight)


def test_overlap_abort_while_in_flight(sched_model_dir: str) -> None:
    """An abort arriving while the request's next batch is already running: the request ends with
    an abort and a prefix of its full output (the in-flight token is discarded), its pages are
    returned, and the request batched with it is unaffected."""
    ref = make_scheduler(sched_model_dir, disable_overlap_schedule=True)
    submit(ref, "x", random_ids(150, seed=300), 12)
    submit(ref, "y", random_ids(130, seed=301), 12)
    full = drain(ref)
    s = make_scheduler(sched_model_dir)
    submit(s, "x", random_ids(150, seed=300), 12)
    submit(s, "y", random_ids(130, seed=301), 12)
    res: dict[str, dict] = {}
    for _ in range(5):
        for rid, r in drain_one(s).items():
            res.setdefault(rid, {"ids": []})["ids"] += r["ids"]
    assert s.last_batch is not None and any(r.rid == "x" for r in s.last_batch.reqs)
    s.abort_request("x")
    got = _checked_drain(s, {k: {"ids": v["ids"], "lp": [], "in_lp": [], "top": []} for k, v in res.items()})
    assert got["x"]["finish"]["type"] == "abort"
    assert 0 < len(got["x"]["ids"]) < 12 and got["x"]["ids"] == full["x"]["ids"][: len(got["x"]["ids"])]
    assert got["y"]["ids"] == full["y"]["ids"]
    assert_idle(s)


@pytest.mark.parametrize("overlap", [False, True])
def test_injected_oom_retracts_and_recovers(sched_model_dir: str, overlap: bool) -> None:
    """A device out-of-memory error in one forward (a decode step here) does not stop serving:
    the batch's requests are retracted and finish with the tokens of a clean run, the
    running-request cap is halved, nothing leaks. A second error hitting the same request fails
    it with a 503 abort while the other request completes."""
    prompts = {"p": random_ids(200, seed=400), "q": random_ids(170, seed=401)}
    clean = make_scheduler(sched_model_dir, disable_overlap_schedule=True)
    for rid, p in prompts.items():
        submit(clean, rid, p, 10)
    ref = drain(clean)

    s = make_scheduler(sched_model_dir, disable_overlap_schedule=not overlap)
    s.runner.inject_oom_forwards = {3}  # forward 1 prefills both, 2 and 3 decode
    for rid, p in prompts.items():
        submit(s, rid, p, 10)
    got = _checked_drain(s)
    assert s.num_oom_errors == 1
    assert s.max_running_requests == 1
    for rid in prompts:
        assert got[rid]["finish"]["type"] == "length" and got[rid]["ids"] == ref[rid]["ids"], rid
    assert_idle(s)

    # p's prefill fails twice: forwards 1 and 2 (with overlap 1 and 3: forward 2 is p's first
    # decode, launched on top of the failed prefill and discarded)
    s = make_scheduler(sched_model_dir, disable_overlap_schedule=not overlap, max_running_requests=1)
    submit(s, "p", prompts["p"], 10)
    s.runner.inject_oom_forwards = {1, 3} if overlap else {1, 2}
    submit(s, "q", prompts["q"], 4)
    got = _checked_drain(s)
    assert got["p"]["finish"]["type"] == "abort" and got["p"]["finish"]["status_code"] == 503
    assert got["q"]["ids"] == ref["q"]["ids"][:4]
    assert_idle(s)

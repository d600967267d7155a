"""Scheduler core behaviour in-process: retraction under KV pressure, abort, priority, limits.

The oracle for outputs is the same request run alone on a roomy pool (greedy decoding is
deterministic), which the parity tests tie to HF transformers.
"""

from __future__ import annotations

import time

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import assert_idle, drain, make_scheduler, run_one, submit


def test_retraction_keeps_outputs_exact(sched_model_dir):
    # prompts just under two 256-token blocks, so that few decode steps reach the third block
    prompts = [random_ids(490, seed=40 + i) for i in range(3)]
    roomy = make_scheduler(sched_model_dir)
    alone = {}
    for i, p in enumerate(prompts):
        submit(roomy, f"r{i}", p, 40)
        alone.update(drain(roomy))
    # 5 block pages for three requests that each grow to 530 tokens (3 blocks): must retract
    tight = make_scheduler(sched_model_dir, max_total_tokens=5 * 256)
    for i, p in enumerate(prompts):
        submit(tight, f"r{i}", p, 40)
    got = drain(tight)
    assert tight.num_retractions > 0
    for rid in alone:
        assert got[rid]["finish"]["type"] == "length"
        assert got[rid]["ids"] == alone[rid]["ids"], rid
    assert_idle(tight)


def test_abort_running_and_queued_returns_pages(sched_model_dir):
    s = make_scheduler(sched_model_dir, max_running_requests=1)
    submit(s, "a", random_ids(400, 1), 50)
    submit(s, "b", random_ids(400, 2), 50)
    s.step()
    s.step()
    assert [r.rid for r in s.running] == ["a"] and [r.rid for r in s.waiting] == ["b"]
    s.abort_request("a")
    s.abort_request("b")
    res = drain(s)
    # SGLang's finish reasons (FINISH_ABORT's default message; the tokenizer manager's for a
    # queued request), with no status_code: RL clients match them to resend what a weight update
    # or /pause_generation aborted
    assert res["a"]["finish"] == {
        "type": "abort",
        "message": "Aborted",
        "status_code": None,
        "err_type": None,
    }
    assert res["b"]["finish"] == {
        "type": "abort",
        "message": "Abort in waiting queue",
        "status_code": None,
        "err_type": None,
    }
    assert_idle(s)


def test_abort_all_gives_sglang_messages(sched_model_dir):
    """``abort_request("")`` (``/pause_generation``, ``abort_all_requests``): the same messages as
    aborting each request by its id."""
    s = make_scheduler(sched_model_dir, max_running_requests=1)
    submit(s, "a", random_ids(300, 5), 50)
    submit(s, "b", random_ids(300, 6), 50)
    s.step()
    s.step()
    assert [r.rid for r in s.running] == ["a"] and [r.rid for r in s.waiting] == ["b"]
    s.abort_request("")
    res = drain(s)
    assert res["a"]["finish"] == {
        "type": "abort",
        "message": "Aborted",
        "status_code": None,
        "err_type": None,
    }
    assert res["b"]["finish"] == {
        "type": "abort",
        "message": "Abort in waiting queue",
        "status_code": None,
        "err_type": None,
    }
    assert_idle(s)


def test_priority_scheduling(sched_model_dir):
    s = make_scheduler(sched_model_dir, max_running_requests=1, enable_priority_scheduling=True)
    submit(s, "low", random_ids(100, 3), 2, priority=0)
    submit(s, "high", random_ids(100, 4), 2, priority=10)
    s.step()
    assert [r.rid for r in s.running] == ["high"]
    drain(s)
    assert_idle(s)


def test_priority_scheduling_low_values_first(sched_model_dir):
    """SGLang's ``--schedule-low-priority-values-first``: the lower value runs first (equal values:
    arrival order)."""
    s = make_scheduler(
        sched_model_dir,
        max_running_requests=1,
        enable_priority_scheduling=True,
        schedule_low_priority_values_first=True,
    )
    submit(s, "high", random_ids(100, 4), 2, priority=10)
    submit(s, "low", random_ids(100, 3), 2, priority=0)
    submit(s, "low2", random_ids(100, 5), 2, priority=0)
    s.step()
    assert [r.rid for r in s.running] == ["low"]
    assert [r.rid for r in s.waiting] == ["low2", "high"]
    drain(s)
    assert_idle(s)


def test_invalid_requests_finish_with_400(sched_model_dir):
    s = make_scheduler(sched_model_dir, context_length=600)
    submit(s, "long", random_ids(700, 5), 4)
    submit(s, "vocab", [1, 2, 10**6], 4)
    res = drain(s)
    for rid in ("long", "vocab"):
        assert res[rid]["finish"]["type"] == "abort"
        assert res[rid]["finish"].get("status_code") == 400
    assert_idle(s)


def test_request_slipping_past_validation_is_defended(sched_model_dir):
    """The scheduler re-checks what the tokenizer manager validates: an empty prompt or a
    negative id that reaches it is finished with a 400 abort (never a crash); others run."""
    s = make_scheduler(sched_model_dir)
    submit(s, "empty", [], 4)
    submit(s, "negative", [5, -1, 7], 4)
    submit(s, "fine", random_ids(20, 12), 2)
    res = drain(s)
    for rid in ("empty", "negative"):
        assert res[rid]["finish"]["type"] == "abort" and res[rid]["finish"].get("status_code") == 400
        assert res[rid]["ids"] == []
    assert res["fine"]["finish"]["type"] == "length" and len(res["fine"]["ids"]) == 2
    assert_idle(s)


def test_max_new_tokens_zero_prefills_without_a_token(sched_model_dir):
    """``max_new_tokens: 0`` generates nothing: the prompt is prefilled (in chunks here), its
    logprobs from ``logprob_start_len=0`` equal those of a cold, independent run with
    ``max_new_tokens=1``, and it finishes with reason length 0, no output id and 0 completion
    tokens, while a request batched with it is unaffected. Its blocks are cached (a resend hits)."""
    ids = random_ids(600, seed=71)
    other = random_ids(50, seed=72)
    lp_kw = dict(return_logprob=True, logprob_start_len=0)
    cold = make_scheduler(sched_model_dir, chunked_prefill_size=256)
    submit(cold, "ref", ids, 1, **lp_kw)
    ref = drain(cold)["ref"]
    submit(cold, "other", other, 4)
    ref_other = drain(cold)["other"]

    s = make_scheduler(sched_model_dir, chunked_prefill_size=256)
    submit(s, "zero", ids, 0, **lp_kw)
    submit(s, "other", other, 4)
    got = drain(s)
    zero = got["zero"]
    assert zero["finish"] == {"type": "length", "length": 0}
    assert zero["ids"] == [] and zero["completion"] == 0
    assert zero["chunks"] == [[]]  # one message: the finish, without tokens
    assert len(zero["in_lp"]) == len(ref["in_lp"]) == len(ids)
    assert zero["in_lp"][0] is None and ref["in_lp"][0] is None
    assert zero["in_lp"][1:] == pytest.approx(ref["in_lp"][1:], abs=1e-5)
    assert got["other"]["ids"] == ref_other["ids"] and len(ref_other["ids"]) == 4
    # the prefilled prompt was cached: a resend without logprobs hits its first two blocks
    assert run_one(s, "again", ids, 0)["cached"] == 512
    assert_idle(s)


def test_generation_stops_at_context_length(sched_model_dir):
    s = make_scheduler(sched_model_dir, context_length=520)
    submit(s, "a", random_ids(500, 6), 100)
    res = drain(s)
    assert res["a"]["finish"]["type"] == "length"
    assert len(res["a"]["ids"]) == 20
    assert_idle(s)


def test_request_larger_than_pool_fails_cleanly_and_others_proceed(sched_model_dir):
    """A prompt that cannot fit the pool is failed with 400; a small one still completes."""
    s = make_scheduler(sched_model_dir, max_total_tokens=2 * 256, chunked_prefill_size=256)
    submit(s, "huge", random_ids(900, 8), 4)
    submit(s, "small", random_ids(100, 9), 4)
    res = drain(s)
    assert res["huge"]["finish"]["type"] == "abort" and res["huge"]["finish"].get("status_code") == 400
    assert res["small"]["finish"]["type"] == "length" and len(res["small"]["ids"]) == 4
    assert_idle(s)


def test_concurrent_chunked_prefills_under_pressure_do_not_hang(sched_model_dir):
    """Several chunked prefills that together exceed the pool: all finish, outputs exact."""
    prompts = [random_ids(600, seed=60 + i) for i in range(3)]
    roomy = make_scheduler(sched_model_dir)
    alone = {}
    for i, p in enumerate(prompts):
        submit(roomy, f"c{i}", p, 3)
        alone.update(drain(roomy))
    tight = make_scheduler(sched_model_dir, max_total_tokens=4 * 256, chunked_prefill_size=200)
    for i, p in enumerate(prompts):
        submit(tight, f"c{i}", p, 3)
    got = drain(tight)
    for rid in alone:
        assert got[rid]["ids"] == alone[rid]["ids"], rid
    assert_idle(tight)


def test_stream_interval_batches_stream_chunks(sched_model_dir):
    """``--stream-interval 4``: a streaming request's tokens go out at the 1st, 5th, 9th token and
    at the finish (SGLang's rule), with every token and logprob exactly once and in order; a
    request's own ``stream_interval`` (3) overrides the server's; interval 1 sends every step.
    Non-streaming requests send their first token and then everything at the finish, whatever the
    interval (they are not detokenized in between). Tokens equal a run with interval 1."""
    ids = random_ids(40, seed=11)

    def run(interval: int, **sp_extra) -> dict[str, list]:
        s = make_scheduler(sched_model_dir, stream_interval=interval)
        for rid, stream in (("s", True), ("n", False)):
            submit(s, rid, ids, 10, sampling=sp_extra, stream=stream, return_logprob=True)
        chunks: dict[str, list] = {"s": [], "n": []}
        lps: dict[str, list] = {"s": [], "n": []}
        while s.has_work():
            out = s.step()
            for i, rid in enumerate(out.rids if out else []):
                if out.output_ids[i] or out.finished_reasons[i] is not None:
                    chunks[rid].append(list(out.output_ids[i]))
                lps[rid] += out.output_token_logprobs_idx[i]
        return {"chunks": chunks, "lps": lps}

    base, four, three = run(1), run(4), run(4, stream_interval=3)
    flat = [t for c in base["chunks"]["s"] for t in c]
    assert [len(c) for c in base["chunks"]["s"]] == [1] * 10
    assert [len(c) for c in base["chunks"]["n"]] == [1, 9]  # non-streaming: first token, then the rest
    assert [t for c in base["chunks"]["n"] for t in c] == flat
    assert [len(c) for c in four["chunks"]["s"]] == [1, 4, 4, 1]  # tokens 1 | 2-5 | 6-9 | 10
    assert [len(c) for c in three["chunks"]["s"]] == [1, 3, 3, 3]  # tokens 1 | 2-4 | 5-7 | 8-10
    for r in (four, three):
        assert [t for c in r["chunks"]["s"] for t in c] == flat
        assert r["lps"]["s"] == flat  # logprob token ids: each once, in order
        assert r["chunks"]["n"] == base["chunks"]["n"]  # non-streaming: unaffected by the interval


def test_token_usage_counts_request_pages_not_the_evictable_cache(sched_model_dir):
    """``/metrics`` ``token_usage`` / ``num_used_tokens`` count KV held by requests; pages the
    radix cache keeps after a request ends are evictable, not used (SGLang's semantics: an idle
    server reports 0, and the pool splits into ``kv_available_tokens`` + ``kv_evictable_tokens``
    + ``kv_used_tokens``). They used to include the cache, so a finished or disconnected
    request looked like KV that was never given back."""
    s = make_scheduler(sched_model_dir, max_total_tokens=8 * 256)
    total = 8 * 256
    prompt = random_ids(600, seed=61)  # two whole 256-token pages stay cached
    submit(s, "a", prompt, 30)
    s.step()
    running = s.get_metrics()
    assert running["num_used_tokens"] > 0 and running["token_usage"] > 0
    drain(s)
    m = s.get_metrics()
    assert m["num_used_tokens"] == 0 and m["token_usage"] == 0.0 and m["kv_used_tokens"] == 0
    assert m["kv_evictable_tokens"] == (len(prompt) // 256) * 256
    assert m["kv_available_tokens"] + m["kv_evictable_tokens"] + m["kv_used_tokens"] == total
    assert m["max_total_num_tokens"] == total
    assert_idle(s)


def test_cache_hit_rate_is_the_last_prefill_batchs(sched_model_dir):
    """``/metrics`` ``cache_hit_rate`` is SGLang's: hit tokens / prompt tokens of the last
    prefill batch, so a repeated prompt reads as its own ``cached_tokens`` / prompt length (the
    oracle: the request's output message); it used to be the rate since start, which a cold first
    request kept at about half. A fresh prompt after it brings the gauge back to 0."""
    s = make_scheduler(sched_model_dir, max_total_tokens=8 * 256)
    assert s.get_metrics()["cache_hit_rate"] == 0.0
    prompt = random_ids(600, seed=71)
    first = run_one(s, "a", prompt, 4)
    assert first["cached"] == 0 and s.get_metrics()["cache_hit_rate"] == 0.0
    again = run_one(s, "b", prompt, 4)
    assert again["cached"] > 0
    assert s.get_metrics()["cache_hit_rate"] == pytest.approx(again["cached"] / len(prompt))
    other = run_one(s, "c", random_ids(300, seed=72), 4)
    assert other["cached"] == 0 and s.get_metrics()["cache_hit_rate"] == 0.0
    assert_idle(s)


def test_gauges_return_to_idle_values(sched_model_dir, monkeypatch):
    """After the last request: ``num_running_reqs`` / ``num_queue_reqs`` read 0 at once, and
    ``gen_throughput`` decays to 0 once no batch ran for ``GEN_THROUGHPUT_STALE_S`` (SGLang's
    staleness rule, sgl-project/sglang#4244); it used to hold the last value forever."""
    from sglang_v4.managers import scheduler_metrics_mixin as mm

    s = make_scheduler(sched_model_dir, max_total_tokens=8 * 256)
    run_one(s, "a", random_ids(100, seed=73), 6)
    m = s.get_metrics()
    assert (m["num_running_reqs"], m["num_queue_reqs"]) == (0, 0)
    assert m["gen_throughput"] > 0
    info = s.get_server_info()  # SGLang's internal-state keys, as its bench_serving reads them
    assert info["last_gen_throughput"] > 0
    assert info["effective_max_running_requests_per_dp"] == info["max_running_requests"] > 0
    later = time.monotonic() + mm.GEN_THROUGHPUT_STALE_S + 1
    monkeypatch.setattr(mm.time, "monotonic", lambda: later)
    assert s.get_metrics()["gen_throughput"] == 0.0 and s.get_server_info()["last_gen_throughput"] == 0.0

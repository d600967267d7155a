"""Radix prefix cache end to end in the scheduler: cache hits are exact.

For prompt pairs sharing a prefix, the second request's greedy tokens and output logprobs must
equal (fp32, <= 1e-4) those of the same request computed cold (after ``flush_cache``), and
``cached_tokens`` must equal the shared length rounded down to 256 — also while the first request
is still decoding, with chunked-prefill sizes that are not multiples of 256, and after evictions
forced by a small pool. The oracle is the same runtime without the cache, which the model-parity
tests tie to HF transformers.
"""

from __future__ import annotations

from functools import partial

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import assert_idle, drain, write_sched_model
from scheduler_testutil import make_scheduler as _make_scheduler
from scheduler_testutil import run_one as _run_one
from scheduler_testutil import submit as _submit

TOL = 1e-4

make_sched = partial(_make_scheduler, max_total_tokens=64 * 256, chunked_prefill_size=2048)
submit = partial(_submit, return_logprob=True, logprob_start_len=-1)
run_one = partial(_run_one, return_logprob=True, logprob_start_len=-1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_sched_model(tmp_path_factory, seed=3, name="radix_model")


def assert_same(hit: dict, cold: dict) -> None:
    assert hit["ids"] == cold["ids"]
    assert max(abs(a - b) for a, b in zip(hit["lp"], cold["lp"])) <= TOL


@pytest.fixture(scope="module")
def sched(model_dir):
    return make_sched(model_dir)


# a 3,000-token prefix (longer than a 2,048-token prefill chunk) and the 4,097-token one below are in
# the slow tier; a hit longer than a prefill chunk stays in the fast tier with small chunks
# (test_chunked_prefill_not_multiple_of_256 and test_public_bugs_cache_twentysixth.py)
@pytest.mark.parametrize(
    "shared", [1, 255, 256, 257, 511, 512, 1000, pytest.param(3000, marks=pytest.mark.slow)]
)
def test_shared_prefix_hit_is_exact(sched, shared):
    base = random_ids(shared, seed=shared)
    a = base + random_ids(40, seed=shared + 1)
    b = base + random_ids(37, seed=shared + 2)
    assert b[shared] != a[shared] or shared == 0
    run_one(sched, "a", a, n=1)  # only fills the cache: its tokens are not compared
    hit = run_one(sched, "b", b)
    assert hit["cached"] == (shared // 256) * 256
    assert sched.flush_cache()
    cold = run_one(sched, "b-cold", b)
    assert cold["cached"] == 0
    assert_same(hit, cold)
    assert_idle(sched)


@pytest.mark.slow
def test_shared_prefix_4097(sched):
    base = random_ids(4097, seed=99)
    run_one(sched, "a", base + [1, 2, 3], n=1)  # only fills the cache
    hit = run_one(sched, "b", base + [4, 5], n=4)
    assert hit["cached"] == 4096
    assert sched.flush_cache()
    assert_same(hit, run_one(sched, "b-cold", base + [4, 5], n=4))
    assert_idle(sched)


def test_resent_prompt_of_300_hits_256(sched):
    ids = random_ids(300, seed=5)
    first = run_one(sched, "x1", ids)
    again = run_one(sched, "x2", ids)
    assert first["cached"] == 0 and again["cached"] == 256
    assert_same(again, first)
    assert_idle(sched)


def test_hit_while_first_request_still_decoding(sched):
    base = random_ids(700, seed=11)
    a, b = base + random_ids(20, 12), base + random_ids(20, 13)
    submit(sched, "a", a, n=30)
    res: dict = {}
    for _ in range(6):  # a prefills and decodes a few tokens
        out = sched.step()
        for i, rid in enumerate(out.rids if out else []):
            res.setdefault(rid, {"ids": [], "lp": []})
            res[rid]["ids"] += out.output_ids[i]
            res[rid]["lp"] += out.output_token_logprobs_val[i]
    assert sched.running, "first request should still be running"
    submit(sched, "b", b)
    drain(sched, res)
    assert res["b"]["cached"] == 512
    assert sched.flush_cache()
    assert_same(res["b"], run_one(sched, "b-cold", b))
    assert_idle(sched)


@pytest.mark.parametrize("chunk", [100, 300])
def test_chunked_prefill_not_multiple_of_256(model_dir, chunk):
    s = make_sched(model_dir, chunked_prefill_size=chunk)
    base = random_ids(900, seed=chunk)
    a, b = base + random_ids(30, 1), base + random_ids(30, 2)
    # both submitted together: b can hit blocks a inserted while a was still prefilling
    submit(s, "a", a)
    res = drain(s, {})
    submit(s, "b", b)
    drain(s, res)
    assert res["b"]["cached"] == 768
    assert s.flush_cache()
    assert_same(res["b"], run_one(s, "b-cold", b))
    assert_idle(s)


def test_exact_after_forced_evictions(model_dir):
    """A pool of 12 blocks: caching many prompts forces evictions; hits stay exact."""
    s = make_sched(model_dir, max_total_tokens=12 * 256, max_running_requests=4)
    prompts = [random_ids(700, seed=100 + i) for i in range(6)]
    for i, p in enumerate(prompts):
        run_one(s, f"p{i}", p, n=3)
    st = s.get_server_info()["radix_cache"]
    assert st["evicted_blocks"] + st["evicted_resume_states"] > 0
    last = prompts[-1][:600] + random_ids(10, 7)
    hit = run_one(s, "hit", last, n=4)
    assert hit["cached"] == 512
    assert s.flush_cache()
    assert_same(hit, run_one(s, "cold", last, n=4))
    assert_idle(s)


def test_disable_radix_cache(model_dir):
    s = make_sched(model_dir, disable_radix_cache=True)
    ids = random_ids(600, seed=21)
    run_one(s, "a", ids)
    assert run_one(s, "b", ids)["cached"] == 0
    info = s.get_server_info()
    assert info["radix_cache"]["cached_blocks"] == 0
    assert_idle(s)


def test_lpm_orders_queue_by_prefix_match(model_dir):
    s = make_sched(model_dir, schedule_policy="lpm", chunked_prefill_size=300, max_running_requests=1)
    shared = random_ids(600, seed=31)
    run_one(s, "warm", shared + [1], n=1)
    submit(s, "cold", random_ids(500, seed=32), n=3)
    submit(s, "hot", shared + [2, 3], n=3)
    s.step()  # one admission (max_running_requests=1): LPM picks the cached one
    assert [r.rid for r in s.running] == ["hot"]
    drain(s, {})
    assert_idle(s)

"""Public bug reports on KV pages leaking or held too long: one page per request never returned
across a run of sequential requests, pages of requests aborted mid-prefill or in the queue while
others decode, retracted requests whose request slot is reused by a newcomer, pages returned on
every finish path (stop token, length, abort), and requests that together fit the pool exactly
being run together rather than queued.

In-process schedulers on the ``sched_model_dir`` checkpoint (fp32, 256-token pages). Oracles: the
page arithmetic (a request of ``L`` tokens holds ``ceil(L / page_size)`` block pages), the
allocators' and the radix tree's own counts, the documented gauges (``kv_used_tokens`` is the KV
held by requests, 0 when idle) and the cold run of each request alone.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, cold_output_ids, drain, make_scheduler, step_outputs, submit

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """A 4-page pool with 256-token prefill chunks."""
    return make_scheduler(sched_model_dir, max_total_tokens=4 * PAGE, chunked_prefill_size=PAGE)


def _held_tokens(s: Any) -> int:
    return int(s.get_metrics()["kv_used_tokens"])


def test_sequential_requests_return_every_page_not_one_short(sched: Any) -> None:
    """kekzl/imp#1115 (exactly one KV block per request was never returned: after a run of
    sequential requests the used-block gauge grew by one per request and never drained): after
    each of a run of requests whose prompt ends one short of, on and one past a page boundary
    (and whose output crosses one), the KV held by requests is 0, every request slot is free, and
    every used block page is a page the radix tree holds (nothing outside the tree); a flush then
    leaves no page used."""
    assert sched.flush_cache()
    pool, n_new = sched.pool, 4
    for k, length in enumerate((PAGE - 1, PAGE, PAGE + 1, 2 * PAGE - 2)):
        submit(sched, f"seq{k}", random_ids(length, seed=3000 + 10 * k + n_new), n_new)
        res = drain(sched)[f"seq{k}"]
        assert len(res["ids"]) == n_new and res["finish"]["type"] == "length"
        assert _held_tokens(sched) == 0, (k, length)
        assert pool.req_slots.available == pool.req_slots.size
        assert pool.block_alloc.used == sched.tree_cache.total_pages()[0], (k, length)
        sched.cache_manager.check_integrity([])
    assert_idle(sched)


def test_aborts_mid_prefill_and_in_queue_free_pages_at_once(sched: Any) -> None:
    """sgl-project/sglang#8177 / sgl-project/sglang#8352 (requests aborted while in flight kept their
    KV: ``token_usage`` crept towards 1.0 under repeated aborts until allocation failed) and
    vllm-project/vllm#46283 (an aborted request's KV blocks were held until a completion signal
    that might never come): while ``b`` decodes, ``a`` (a two-chunk prompt) is aborted after its
    first chunk and ``c`` while still queued; right after the abort the KV held by requests is
    ``b``'s own pages again (``ceil(len(b) / page_size)`` pages by hand), both aborted requests end
    with ``abort`` and no output, ``b``'s output is its cold run's, and nothing is left held."""
    b_ids = random_ids(200, seed=3101)
    want_b = cold_output_ids(sched, "cb", b_ids, 8)
    for _round in range(2):  # a repeated abort leaks nothing either
        submit(sched, "b", b_ids, 8)
        got = step_outputs(sched, 2)
        assert _held_tokens(sched) == math.ceil((200 + 2) / PAGE) * PAGE
        submit(sched, "a", random_ids(2 * PAGE - 10, seed=3102 + _round), 4)
        for rid, r in step_outputs(sched, 1).items():
            got.setdefault(rid, {"ids": []})["ids"] += r["ids"]
            got[rid]["finish"] = r.get("finish")
        assert "a" in {r.rid for r in list(sched.running) + list(sched.waiting)}, "a finished early"
        assert _held_tokens(sched) > PAGE  # a holds its first chunk's page
        submit(sched, "c", random_ids(PAGE + 5, seed=3104 + _round), 4)
        sched.abort_request("a")
        sched.abort_request("c")
        assert _held_tokens(sched) == PAGE  # only b's page
        rest = drain(sched)
        for rid in ("a", "c"):
            assert rest[rid]["finish"]["type"] == "abort", rest[rid]
            assert got.get(rid, {"ids": []})["ids"] + rest[rid]["ids"] == []
        assert got["b"]["ids"] + rest["b"]["ids"] == want_b
        assert _held_tokens(sched) == 0
        sched.cache_manager.check_integrity([])
    assert_idle(sched)


def test_retracted_requests_and_a_newcomer_on_their_slots_match_cold_runs(sched: Any) -> None:
    """sgl-project/sglang#38179 (a retracted request's state outlived its request slot, and the
    next request given that slot had its KV overwritten by the retracted one): in a 4-page pool,
    three requests that each grow past one page (``PAGE - 6`` prompt tokens, 12 new) cannot all
    decode, so some are retracted; a fourth
    request arriving after the retraction takes a freed slot. Every request's output is its cold
    run's, at least one retraction happened, and every page and slot comes back."""
    s = sched
    assert s.max_total_num_tokens == 4 * PAGE
    prompts = {f"r{k}": random_ids(PAGE - 6, seed=3200 + k) for k in range(3)}
    late = random_ids(PAGE - 40, seed=3210)
    want = {rid: cold_output_ids(s, "c" + rid, ids, 12) for rid, ids in prompts.items()}
    want["late"] = cold_output_ids(s, "clate", late, 4)
    for rid, ids in prompts.items():
        submit(s, rid, ids, 12)
    got: dict[str, dict] = {}
    steps = 0
    while s.num_retractions == 0:
        for rid, r in step_outputs(s, 1).items():
            got.setdefault(rid, {"ids": []})["ids"] += r["ids"]
        steps += 1
        assert steps < 200, "no retraction in a pool too small for all three"
    submit(s, "late", late, 4)
    rest = drain(s)
    for rid, ids in want.items():
        assert got.get(rid, {"ids": []})["ids"] + rest.get(rid, {"ids": []})["ids"] == ids, rid
    assert_idle(s)


def test_requests_that_fit_the_pool_together_all_run_together(sched: Any) -> None:
    """sgl-project/sglang#1947 (four concurrent requests whose tokens together fit the KV budget were
    not run together: three ran and the fourth waited in the queue, its time to first token
    several times the others'): four requests of ``page_size - 8`` prompt tokens and 8 new tokens
    (one page each, four pages in all: exactly the 4-page pool) are all admitted in the first
    step and all stay running, none waits and none is retracted; every output is its cold run's
    and every page comes back."""
    prompts = {f"q{k}": random_ids(PAGE - 8, seed=3300 + k) for k in range(4)}
    want = {rid: cold_output_ids(sched, "c" + rid, ids, 8) for rid, ids in prompts.items()}
    retractions = sched.num_retractions
    for rid, ids in prompts.items():
        submit(sched, rid, ids, 8)
    got = step_outputs(sched, 1)
    assert sorted(r.rid for r in sched.running) == sorted(prompts) and not sched.waiting
    rest = drain(sched)
    assert sched.num_retractions == retractions
    for rid, ids in want.items():
        assert got.get(rid, {"ids": []})["ids"] + rest[rid]["ids"] == ids, rid
    assert_idle(sched)


def test_every_finish_path_returns_the_pages_of_concurrent_requests(sched: Any) -> None:
    """nod-ai/amd-shark-ai#1261 (a sequence was cleared from the KV cache when it ended on EOS but
    not when it hit ``max_completion_tokens``: a run of requests then exhausted the cache) and
    sgl-project/sglang#140 (``KV cache pool leak detected`` under a batch of requests): three
    concurrent requests end on three paths in the same batch (a stop token id, the length cap,
    an abort), the stopped one at the token a cold run gives; afterwards the KV held by requests
    is 0, every request slot is free and the only used pages are the radix tree's."""
    stop_prompt = random_ids(PAGE + 30, seed=3400)
    cold = cold_output_ids(sched, "cstop", stop_prompt, 4)
    stop_id = cold[2]
    want_stop = cold[: cold.index(stop_id) + 1]
    # SGLang checks ``stop_token_ids`` with the EOS ids, so only when ``ignore_eos`` is off
    submit(sched, "stop", stop_prompt, 4, ignore_eos=False, sampling={"stop_token_ids": [stop_id]})
    submit(sched, "len", random_ids(60, seed=3401), 4)
    submit(sched, "ab", random_ids(PAGE - 20, seed=3402), 40)
    got = step_outputs(sched, 2)
    sched.abort_request("ab")
    rest = drain(sched)
    res = {rid: got.get(rid, {"ids": []})["ids"] + rest.get(rid, {"ids": []})["ids"] for rid in rest}
    assert rest["stop"]["finish"]["type"] == "stop" and res["stop"] == want_stop
    assert rest["len"]["finish"]["type"] == "length" and len(res["len"]) == 4
    assert rest["ab"]["finish"]["type"] == "abort"
    pool = sched.pool
    assert _held_tokens(sched) == 0
    assert pool.req_slots.available == pool.req_slots.size
    assert pool.block_alloc.used == sched.tree_cache.total_pages()[0]
    sched.cache_manager.check_integrity([])
    assert_idle(sched)

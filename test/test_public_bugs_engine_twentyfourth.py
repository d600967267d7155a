"""Public bug reports (round twenty-four) of the scheduler under load and faults, the paged radix
prefix cache and the offline Engine API, replayed against sglang-v4.

The scheduler tests drive in-process schedulers on the ``sched_model_dir`` checkpoint
(``scheduler_testutil``). Oracles: the cold run of the same request alone on an empty radix cache
(flushed before and after) for output tokens; ``--max-running-requests`` itself for the running
set; the pool size (``--max-total-tokens``) for the longest admissible prompt; the allocators'
counts after a flush (``assert_idle``) for leaks. The Engine tests run the real processes on the
model-free ``FakeScheduler`` (conftest's ``shared_fake_engine``): expected texts come from
``transformers.AutoTokenizer`` on the same tokenizer files (``fake_output_text``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dsv4_testutil import random_ids
from engine_testutil import _assert_released, engine_fixture, expected_fixture  # noqa: F401 - fixtures
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit

pytestmark = pytest.mark.timeout(300)


def _cold(s: Any, rid: str, ids: list[int], n: int, **kw: Any) -> list[int]:
    """The output ids of ``ids`` run alone on an empty radix cache (the oracle); flushed after."""
    assert s.flush_cache()
    res = run_one(s, rid, ids, n, **kw)
    assert res["cached"] == 0
    assert s.flush_cache()
    return res["ids"]


def _step_collect(s: Any, res: dict[str, dict]) -> Any:
    """One scheduler step; each output's ids appended to ``res[rid]["ids"]``, its finish kept."""
    out = s.step()
    for i, rid in enumerate(out.rids if out else []):
        r = res.setdefault(rid, {"ids": []})
        r["ids"] += out.output_ids[i]
        r["finish"] = out.finished_reasons[i]
    return out


@pytest.fixture(scope="module")
def capped(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """A 16-block pool, prefill chunked at 256 tokens, at most 2 running requests."""
    return make_scheduler(
        sched_model_dir, max_total_tokens=16 * PAGE, chunked_prefill_size=PAGE, max_running_requests=2
    )


@pytest.fixture(scope="module")
def tiny(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """A 3-block pool (two 200-token requests decoding past 256 tokens outrun it: retraction)."""
    return make_scheduler(sched_model_dir, max_total_tokens=3 * PAGE, chunked_prefill_size=PAGE)


# --- max_running_requests ------------------------------------------------------------------------


def test_max_running_requests_counts_requests_already_running(capped: Any) -> None:
    """GeeeekExplorer/nano-vllm#265 (the prefill admission loop counted only the requests picked
    in this step, not those already running, so a full running set still admitted more): five
    300-token prompts (two 256-token chunks each) queued together under
    ``--max-running-requests 2`` never have more than 2 running at any step (the flag is the
    oracle), and each gives its cold tokens."""
    prompts = [random_ids(300, seed=2400 + i) for i in range(5)]
    cold = [_cold(capped, f"c{i}", p, 4) for i, p in enumerate(prompts)]
    for i, p in enumerate(prompts):
        submit(capped, f"r{i}", p, 4)
    res: dict[str, dict] = {}
    most = 0
    for _ in range(2000):
        if not capped.has_work():
            break
        _step_collect(capped, res)
        most = max(most, len(capped.running))
    assert most == 2
    assert [res[f"r{i}"]["ids"] for i in range(5)] == cold
    assert_idle(capped)


# --- admission limits ----------------------------------------------------------------------------


@pytest.mark.slow
def test_prompt_one_token_over_the_limit_is_refused_and_the_next_runs(capped: Any) -> None:
    """vllm-project/vllm#42381 (a prompt one token over the limit was refused, then the scheduler
    deadlocked) and sgl-project/sglang#9599 (a prompt one token short of the limit crashed the
    server): with a 4096-token pool the longest prompt is 4095 tokens (pool - 1, SGLang's bound).
    A 4096-token prompt ends with a 400 abort naming the sizes and holds no page; a 4095-token one
    runs (one token: the pool is then full, finish ``length``); a short request after both gives
    its cold tokens."""
    limit = 16 * PAGE - 1
    assert capped.max_req_input_len == limit
    short = random_ids(40, seed=2410)
    cold = _cold(capped, "cold", short, 5)
    submit(capped, "over", random_ids(limit + 1, seed=2411), 3)
    res = drain(capped)
    over = res["over"]["finish"]
    assert over["type"] == "abort" and over["status_code"] == 400
    assert str(limit + 1) in over["message"] and res["over"]["ids"] == []
    assert capped.pool.block_alloc.used == 0
    submit(capped, "edge", random_ids(limit, seed=2412), 3000)
    submit(capped, "short", short, 5)
    res = drain(capped)
    assert res["edge"]["finish"]["type"] == "length" and res["edge"]["completion"] == 1
    assert res["short"]["ids"] == cold
    assert_idle(capped)


@pytest.mark.slow
def test_request_that_can_never_fit_does_not_block_the_queue(capped: Any) -> None:
    """sgl-project/sglang#25126 (a near-full request was accepted but could never pass prefill
    admission, blocking the FCFS queue until the health check failed), m87-labs/kestrel#135 and
    vllm-project/vllm#54348 (an unschedulable head of the queue stopped the scheduler): a 4000-token
    prompt asking for 3000 new tokens on a 4096-token pool, with a short request queued behind it:
    both end (the big one with at most the pool's tokens in all, finish ``length``), the short one
    with its cold tokens, and nothing leaks."""
    short = random_ids(60, seed=2420)
    cold = _cold(capped, "cold", short, 6)
    big = random_ids(4000, seed=2421)
    submit(capped, "big", big, 3000)
    submit(capped, "short", short, 6)
    res = drain(capped, max_steps=3000)
    assert res["big"]["finish"]["type"] == "length"
    assert len(big) + res["big"]["completion"] <= 16 * PAGE
    assert res["short"]["ids"] == cold
    assert_idle(capped)


# --- same-step prefix sharing ----------------------------------------------------------------------


def test_requests_sharing_a_prefix_in_one_step_give_the_cold_tokens(capped: Any) -> None:
    """vllm-project/vllm#37152 (blocks registered in the prefix cache in the step that computes
    them were hit by another request of that step, which read KV not yet written) and
    vllm-project/vllm#7414 (identical new prompts arriving together, nothing cached): three
    prompts sharing a 522-token prefix with distinct tails and two identical prompts, queued in one
    go, each give their cold tokens, and no hit is larger than the whole blocks of the prefix."""
    shared = random_ids(2 * PAGE + 10, seed=2430)
    prompts = [shared + random_ids(20 + i, seed=2431 + i) for i in range(3)] + [shared + [7] * 5] * 2
    cold = [_cold(capped, f"c{i}", p, 5) for i, p in enumerate(prompts)]
    for i, p in enumerate(prompts):
        submit(capped, f"r{i}", p, 5)
    res = drain(capped)
    assert [res[f"r{i}"]["ids"] for i in range(5)] == cold
    assert all(res[f"r{i}"]["cached"] <= 2 * PAGE for i in range(5))
    assert_idle(capped)


# --- retraction ----------------------------------------------------------------------------------


def test_retracted_request_is_not_readmitted_until_it_can_decode(sched_model_dir: str) -> None:
    """vllm-project/vllm#21793 (a request admitted with the pages for one prefill chunk only ran
    out of pages a few steps later and was preempted, readmitted and preempted again in a loop,
    recomputing its prefix each time) and vllm-project/vllm#25538 (preemption thrash): two
    240-token prompts decoding 40 tokens on a 3-block pool. Both cross the 256-token block
    boundary while together they hold 3 blocks, so the newer is retracted once; the pool can hold
    it again only when the older finishes, so it is readmitted then, and retracted once in all
    (before the fix: readmitted for its 256 tokens or its one cached chunk, retracted at its next
    step, some twenty times, with overlap scheduling). Both give their cold tokens and nothing
    leaks."""
    s = make_scheduler(sched_model_dir, max_total_tokens=3 * PAGE, chunked_prefill_size=PAGE)
    a, b = random_ids(240, seed=2460), random_ids(240, seed=2461)
    cold_a, cold_b = _cold(s, "cold_a", a, 40), _cold(s, "cold_b", b, 40)
    submit(s, "a", a, 40)
    submit(s, "b", b, 40)
    res = drain(s)
    assert s.num_retractions == 1
    assert res["a"]["ids"] == cold_a and res["b"]["ids"] == cold_b
    assert_idle(s)


def test_queued_request_waits_for_the_pages_of_its_whole_prompt(sched_model_dir: str) -> None:
    """vllm-project/vllm#21793, for a new request: a 600-token prompt (three 256-token chunks)
    queued while a 300-token request decodes on a 4-block pool. The pool cannot hold both
    sequences, so the queued one is not admitted for its first chunk (which would run out of
    pages mid-prefill) but waits until the first finishes; no request is retracted and both give
    their cold tokens."""
    s = make_scheduler(sched_model_dir, max_total_tokens=4 * PAGE, chunked_prefill_size=PAGE)
    first, second = random_ids(300, seed=2470), random_ids(600, seed=2471)
    cold_first, cold_second = _cold(s, "c1", first, 12), _cold(s, "c2", second, 3)
    submit(s, "first", first, 12)
    res: dict[str, dict] = {}
    _step_collect(s, res)
    submit(s, "second", second, 3)
    while s.has_work():
        _step_collect(s, res)
        if any(r.rid == "second" for r in s.running):
            assert "first" in res and "finish" in res["first"] and res["first"]["finish"] is not None
    assert s.num_retractions == 0
    assert res["first"]["ids"] == cold_first and res["second"]["ids"] == cold_second
    assert_idle(s)


@pytest.mark.parametrize("overlap", [False, True])
def test_queued_request_leaves_the_pages_a_running_prefill_still_needs(
    sched_model_dir: str, overlap: bool
) -> None:
    """vllm-project/vllm#21793, two requests queued together: B (600 prompt tokens, 200 new) and
    C (600 + 4) on a 5-block pool with 256-token chunks. B is admitted first for its first chunk;
    C's whole sequence (3 blocks) fits the pages free at that moment only if B's remaining two
    prompt blocks are not counted, so C must wait for B (SGLang's prefill admission reserves the
    running requests' remaining tokens). Admitting both at once ran out of pages and retracted
    one. Expected: no retraction, C first runs after B is done, both give their cold tokens."""
    s = make_scheduler(
        sched_model_dir,
        max_total_tokens=5 * PAGE,
        chunked_prefill_size=PAGE,
        max_prefill_tokens=4096,
        disable_overlap_schedule=not overlap,
    )
    b, c = random_ids(600, seed=2480), random_ids(600, seed=2481)
    cold_b, cold_c = _cold(s, "cb", b, 200), _cold(s, "cc", c, 4)
    submit(s, "B", b, 200)
    submit(s, "C", c, 4)
    res: dict[str, dict] = {}
    while s.has_work():
        _step_collect(s, res)
        if any(r.rid == "C" for r in s.running):
            assert "B" in res and res["B"].get("finish") is not None
    assert s.num_retractions == 0
    assert res["B"]["ids"] == cold_b and res["C"]["ids"] == cold_c
    assert_idle(s)


def test_refused_queue_head_is_not_matched_again_every_step(sched_model_dir: str) -> None:
    """The cost side of whole-sequence admission (SGLang marks its batch full on a refusal and
    skips prefill admission until a running request leaves): a 600-token prompt that cannot fit
    beside a 300-token request decoding 100 tokens on a 4-block pool waits at the queue head. Its
    prefix match (O(prompt): the key, the radix walk, the slot's state writes) is not redone every
    decode step while nothing it depends on (:meth:`Scheduler._refusal_key`: free and evictable
    pages, the running count, the tree's size) has changed: at most a few matches over ~100
    steps, instead of one per step. Both requests give their cold tokens, the waiting one after
    the first finishes."""
    s = make_scheduler(sched_model_dir, max_total_tokens=4 * PAGE, chunked_prefill_size=PAGE)
    first, second = random_ids(300, seed=2490), random_ids(600, seed=2491)
    cold_first, cold_second = _cold(s, "c1", first, 100), _cold(s, "c2", second, 3)
    calls: list[str] = []
    real = s.cache_manager.match_prefix

    def counting(req: Any) -> Any:
        calls.append(req.rid)
        return real(req)

    s.cache_manager.match_prefix = counting
    submit(s, "first", first, 100)
    res: dict[str, dict] = {}
    _step_collect(s, res)
    submit(s, "second", second, 3)
    steps = 0
    while s.has_work():
        _step_collect(s, res)
        steps += 1
    assert steps > 90 and calls.count("second") <= 4, (steps, calls.count("second"))
    assert res["first"]["ids"] == cold_first and res["second"]["ids"] == cold_second
    assert_idle(s)


# --- aborts --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_retracted_request_aborted_in_the_queue_is_stamped_abort(tiny: Any) -> None:
    """sgl-project/sglang#40251 (a request popped from the waiting or retracted queue by an abort
    was reported as a normal finish and its slot stayed pinned): two 200-token requests decoding
    120 tokens on a 3-block pool; the newer is retracted to the queue, then aborted there. It ends
    with an abort finish carrying SGLang's ``"Abort in waiting queue"`` and the tokens it had (the
    first tokens of its cold run), the
    other request runs to its 120 tokens (its cold tokens), and every page and slot is free."""
    a, b = random_ids(200, seed=2440), random_ids(200, seed=2441)
    cold_a = _cold(tiny, "cold_a", a, 120)
    cold_b = _cold(tiny, "cold_b", b, 120)
    submit(tiny, "a", a, 120)
    submit(tiny, "b", b, 120)
    res: dict[str, dict] = {}
    before = tiny.num_retractions
    for _ in range(3000):
        _step_collect(tiny, res)
        if tiny.num_retractions > before:
            break
    assert tiny.num_retractions == before + 1
    assert [r.rid for r in tiny.waiting] == ["b"] and [r.rid for r in tiny.running] == ["a"]
    tiny.abort_request("b")
    while tiny.has_work():
        _step_collect(tiny, res)
    assert res["b"]["finish"] == {
        "type": "abort",
        "message": "Abort in waiting queue",
        "status_code": None,
        "err_type": None,
    }
    kept = res["b"]["ids"]
    assert 0 < len(kept) < 120 and kept == cold_b[: len(kept)]
    assert res["a"]["ids"] == cold_a
    assert_idle(tiny)


def test_sequential_aborts_at_every_stage_leave_no_slot_pinned(capped: Any) -> None:
    """vllm-project/vllm-omni#3774 (sixteen sequential aborts at concurrency 1 each left a request
    slot pinned, until the engine stalled): a 700-token prompt (three chunks) submitted and aborted
    after 0 .. 15 scheduler steps (queued, mid-prefill, decoding), one at a time; after each abort
    the queue and the running set are empty, and after all of them every slot and page is free and
    the prompt gives its cold tokens."""
    ids = random_ids(700, seed=2450)
    cold = _cold(capped, "cold", ids, 12)
    for k in range(16):
        submit(capped, f"a{k}", ids, 12)
        res: dict[str, dict] = {}
        for _ in range(k):
            _step_collect(capped, res)
        capped.abort_request(f"a{k}")
        while capped.has_work():
            _step_collect(capped, res)
        assert not capped.waiting and not capped.running
        assert res[f"a{k}"]["finish"]["type"] in ("abort", "length")
    p = capped.pool
    assert p.req_slots.available == p.req_slots.size
    assert run_one(capped, "again", ids, 12)["ids"] == cold
    assert_idle(capped)


# --- the offline Engine --------------------------------------------------------------------------


def test_one_async_generate_frees_its_pages(engine: Any, expected: Any) -> None:
    """sgl-project/sglang-jax#982 (one plain ``Engine.async_generate`` of 200 tokens double-freed
    its last decode slot, and the idle memory check failed): one ``async_generate`` of 200 tokens
    gives the fake model's 200-token text (``transformers`` decodes the oracle), finish
    ``length``; then no page is used and the request table is empty."""

    async def one() -> dict:
        return await engine.async_generate(prompt="hello", sampling_params={"max_new_tokens": 200})

    out = asyncio.run(one())
    assert out["text"] == expected(200)
    assert out["meta_info"]["finish_reason"]["type"] == "length"
    _assert_released(engine, expected)


def test_concurrent_duplicate_rid_refused_without_harming_the_first(engine: Any, expected: Any) -> None:
    """vllm-project/vllm#10583 (two concurrent requests with the same caller-chosen id broke the
    engine's per-request state): while a request with ``rid="dup"`` is running, a second with the
    same rid is refused with an error naming it; the first is then aborted and ends, and the
    engine's pages and request table are empty."""

    async def scenario() -> tuple[Any, BaseException | None]:
        first = asyncio.ensure_future(
            engine.async_generate(prompt="[hold] one", sampling_params={"max_new_tokens": 450}, rid="dup")
        )
        for _ in range(200):
            if "dup" in engine.tokenizer_manager.rid_to_state:
                break
            await asyncio.sleep(0.02)
        err = None
        try:
            await engine.async_generate(prompt="two", sampling_params={"max_new_tokens": 3}, rid="dup")
        except Exception as e:  # noqa: BLE001 - the refusal is the expected outcome
            err = e
        engine.tokenizer_manager.abort_request("dup")
        return await asyncio.wait_for(first, 30), err

    first, err = asyncio.run(scenario())
    assert err is not None and "dup" in str(err)
    assert first["meta_info"]["finish_reason"]["type"] == "abort"
    _assert_released(engine, expected)

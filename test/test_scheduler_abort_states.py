"""Abort in every request state, against page accounting (in-process scheduler, CPU).

A victim request is aborted at every step of its life next to other requests: while queued, in
its first prefill chunk and in later chunks of a chunked prefill, decoding, decoding under a
grammar (a regex), as one of two ``n = 2``-like siblings sharing a prompt, retracted for KV pages
(a pool of 5 pages for three requests that grow past it), and in the same step as a stop string
ends it. Overlap scheduling on and off (with overlap a request is in the next batch before the
abort reaches it). After every step the page-ownership invariant holds
(``CacheManager.check_integrity``, which re-derives the counts from the radix tree and the
requests); the victim ends exactly once (one finished output); at the end the pools are back to
their value at start after a flush, and every other request's greedy output equals a cold run of
it alone (greedy decoding is deterministic; the parity tests tie it to HF transformers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

pytestmark = pytest.mark.timeout(600)

OTHERS = {"o1": (300, 11), "o2": (200, 12)}
N_OTHER = 12


def _pools(s: Scheduler) -> tuple[int, int, int]:
    p = s.pool
    return p.block_alloc.used, p.window_alloc.used, p.req_slots.available


def _run(
    s: Scheduler, abort: Callable[[int, Scheduler], str | None], max_steps: int = 5000
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Step until idle; before step ``k`` call ``abort(k, s)`` and abort the rid it returns.
    Returns every rid's ``ids``, ``finish`` and ``ends`` (finished outputs), and the aborted rids."""
    res: dict[str, dict[str, Any]] = {}
    aborted: list[str] = []
    for k in range(max_steps):
        if not s.has_work():
            return res, aborted
        rid = abort(k, s)
        if rid is not None:
            s.abort_request(rid)
            aborted.append(rid)
            s.cache_manager.check_integrity(list(s.running) + list(s.waiting))
        out = s.step()
        s.cache_manager.check_integrity(list(s.running) + list(s.waiting))
        for i, r in enumerate(out.rids if out else []):
            e = res.setdefault(r, {"ids": [], "finish": None, "ends": 0})
            e["ids"] += out.output_ids[i]
            if out.finished_reasons[i] is not None:
                e["finish"] = out.finished_reasons[i]
                e["ends"] += 1
    raise AssertionError("the scheduler did not finish")


def _cold(s: Scheduler, prompts: dict[str, list[int]], n: int, **sampling: Any) -> dict[str, list[int]]:
    out = {}
    for rid, p in prompts.items():
        submit(s, rid, p, n, sampling=sampling or None)
        out[rid] = _run(s, lambda k, s: None)[0][rid]["ids"]
    assert s.flush_cache()
    return out


@pytest.fixture(
    scope="module", params=[True, pytest.param(False, marks=pytest.mark.slow)], ids=["overlap", "no_overlap"]
)
def sched(request: pytest.FixtureRequest, sched_model_dir: str) -> Scheduler:
    return make_scheduler(
        sched_model_dir, chunked_prefill_size=256, disable_overlap_schedule=not request.param
    )


@pytest.fixture(scope="module")
def others() -> dict[str, list[int]]:
    return {rid: random_ids(n, seed) for rid, (n, seed) in OTHERS.items()}


@pytest.fixture(scope="module")
def cold(sched: Scheduler, others: dict[str, list[int]]) -> dict[str, list[int]]:
    return _cold(sched, others, N_OTHER)


def _scenario(
    s: Scheduler,
    others: dict[str, list[int]],
    cold: dict[str, list[int]],
    victim: list[int],
    n: int,
    abort_at: int,
    sampling: dict[str, Any] | None = None,
) -> dict[str, Any]:
    assert s.flush_cache()
    start = _pools(s)
    for rid, p in others.items():
        submit(s, rid, p, N_OTHER)
    submit(s, "v", victim, n, sampling=sampling)
    res, _ = _run(s, lambda k, s: "v" if k == abort_at else None)
    for rid in others:
        assert res[rid]["ids"] == cold[rid], (rid, abort_at)
        assert res[rid]["ends"] == 1 and res[rid]["finish"]["type"] == "length"
    assert res["v"]["ends"] == 1, res["v"]
    assert s.flush_cache() and _pools(s) == start
    return res["v"]


@pytest.mark.parametrize("abort_at", range(6))
def test_abort_queued_prefilling_or_decoding(sched: Scheduler, others: Any, cold: Any, abort_at: int) -> None:
    v = _scenario(sched, others, cold, random_ids(100, 21), 30, abort_at)
    assert v["finish"]["type"] == "abort"
    # SGLang's messages: queued before the first step, running after
    assert v["finish"]["message"] == ("Abort in waiting queue" if abort_at == 0 else "Aborted")


@pytest.mark.parametrize("abort_at", range(1, 5))
def test_abort_during_chunked_prefill(sched: Scheduler, others: Any, cold: Any, abort_at: int) -> None:
    victim = random_ids(1100, 22)  # 5 chunks of 256
    s = sched
    v = _scenario(s, others, cold, victim, 10, abort_at)
    # SGLang's FINISH_ABORT.to_json(): status_code and err_type always present (None: abort asked for)
    aborted = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    assert v["finish"] == aborted and v["ids"] == []


@pytest.mark.slow
@pytest.mark.parametrize("abort_at", range(1, 6))
def test_abort_grammar_constrained(sched: Scheduler, others: Any, cold: Any, abort_at: int) -> None:
    assert sched.grammar_backend is not None  # xgrammar is a dependency
    v = _scenario(sched, others, cold, random_ids(50, 23), 30, abort_at, sampling={"regex": "[a-z]{20,40}"})
    assert v["finish"]["type"] == "abort"
    text = sched.tokenizer.decode(v["ids"])
    assert text == "" or text.isalpha() and text.islower(), text  # the grammar held until the abort


@pytest.mark.slow
@pytest.mark.parametrize("abort_at", [2, 4, 7])
def test_abort_one_of_two_siblings_sharing_a_prompt(
    sched: Scheduler, others: Any, cold: Any, abort_at: int
) -> None:
    """Two samples of one prompt (what ``n = 2`` sends: the same prompt twice, the second hitting
    the first one's cached blocks); aborting one leaves the other's output and every page right."""
    prompt = random_ids(600, 24)
    alone = _cold(sched, {"sib": prompt}, 20)["sib"]
    start = _pools(sched)
    for rid, p in others.items():
        submit(sched, rid, p, N_OTHER)
    submit(sched, "v_0", prompt, 20)
    submit(sched, "v_1", prompt, 20)
    res, _ = _run(sched, lambda k, s: "v_1" if k == abort_at else None)
    assert res["v_0"]["ids"] == alone and res["v_0"]["ends"] == 1
    assert res["v_1"]["ends"] == 1 and res["v_1"]["finish"]["type"] == "abort"
    for rid in others:
        assert res[rid]["ids"] == cold[rid]
    assert sched.flush_cache() and _pools(sched) == start


@pytest.mark.slow
def test_abort_at_every_step_around_a_stop_string(sched: Scheduler, others: Any, cold: Any) -> None:
    """The victim stops on a stop string at its 6th token; aborted at each step before, at and after
    that one it ends once: with an abort and a prefix of the stopped output, or with the stop."""
    victim = random_ids(60, 31)
    free_run = _cold(sched, {"v": victim}, 12)["v"]
    stop = sched.tokenizer.decode(free_run[4:6])
    stopped = _cold(sched, {"v": victim}, 12, stop=[stop])["v"]
    assert stopped == free_run[:6]
    kinds = set()
    for abort_at in range(10):
        v = _scenario(sched, others, cold, victim, 12, abort_at, sampling={"stop": [stop]})
        kinds.add(v["finish"]["type"])
        if v["finish"]["type"] == "abort":
            assert v["ids"] == stopped[: len(v["ids"])], (abort_at, v)
        else:
            assert v["finish"] == {"type": "stop", "matched": stop} and v["ids"] == stopped, (abort_at, v)
    assert kinds == {"abort", "stop"}


@pytest.mark.slow
@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "no_overlap"])
def test_abort_retracted_requests(sched_model_dir: str, overlap: bool) -> None:
    """Three requests that grow past a pool of 5 block pages: one is retracted; it is aborted while
    back in the queue (at the step it was retracted, or later), or another is aborted meanwhile."""
    prompts = {f"r{i}": random_ids(490, seed=40 + i) for i in range(3)}
    roomy = make_scheduler(sched_model_dir, disable_overlap_schedule=not overlap)
    alone = _cold(roomy, prompts, 40)
    tight = make_scheduler(sched_model_dir, max_total_tokens=5 * 256, disable_overlap_schedule=not overlap)
    start = _pools(tight)
    seen_retracted = False
    for when in ("on_retract", "retracted_later", "other_while_retracted"):
        state: dict[str, Any] = {}

        def abort(k: int, s: Scheduler, when: str = when, state: dict[str, Any] = state) -> str | None:
            back = [r for r in s.waiting if r.num_retractions > 0]
            if not back or "done" in state:
                return None
            state.setdefault("first", k)
            if when == "retracted_later" and k < state["first"] + 3:
                return None
            state["done"] = True
            if when == "other_while_retracted":
                state["victim"] = next(r.rid for r in s.running)
            else:
                state["victim"] = back[0].rid
            return state["victim"]

        for rid, p in prompts.items():
            submit(tight, rid, p, 40)
        res, aborted = _run(tight, abort)
        assert tight.num_retractions > 0
        victim = state.get("victim")
        if victim is None:  # the retracted one was re-admitted before this point: nothing aborted
            assert not aborted
        else:
            seen_retracted = True
            assert res[victim]["finish"]["type"] == "abort" and res[victim]["ends"] == 1
            assert res[victim]["ids"] == alone[victim][: len(res[victim]["ids"])]
        for rid in prompts:
            if rid != victim:
                assert res[rid]["ids"] == alone[rid] and res[rid]["ends"] == 1, (when, rid)
        assert tight.flush_cache() and _pools(tight) == start
    assert seen_retracted

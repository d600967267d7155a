"""A seeded randomized test of the scheduler's admission over small KV pools: whole-sequence
admission while others run (``Scheduler._fits_whole`` with ``pages_left`` reserved for the running
requests, ``CacheManager.can_hold``), its refusal memo (``Scheduler._refusal_key``) and priority
preemption only when it can make room (``preemption_makes_room``).

Each seed draws a scheduler (128-token pages, a pool of 3 or 4 pages; per seed a different mix of
prefill chunk (64, 96, 160 tokens or none), running-request cap (2 to 4), overlap on or off,
``fcfs`` / ``lpm`` / ``lof`` policy, and ``--enable-priority-scheduling`` with preemption at any
priority gap) and a timeline of arrivals: prompts near the pool's size, one that only fits when
the pool is empty (``len(prompt) + max_new_tokens`` = the pool), cuts of two shared prefixes
(radix hits), short ones, one asking for more tokens than the pool leaves (it stops at the pool,
finish ``length``), random ``max_new_tokens`` and priorities, aborts at random steps, and a prompt
longer than the pool can ever hold. Each seed refuses whole-sequence admissions while others run;
the priority seeds preempt.

Asserted for every seed:

* termination: the scheduler is idle within a step bound computed from the timeline (every request
  served one at a time, each retraction recomputing its sequence), so no livelock or deadlock,
  the request that needs the whole pool included;
* outputs: every request finishes exactly once; one not aborted has the greedy tokens and finish
  reason of its cold solo run (a fresh roomy scheduler, no radix cache, no chunking, no overlap),
  an aborted one a prefix of them (a request asking past the pool: the cold run of the tokens
  the pool leaves room for); the oversized prompt is refused at once with a 400 abort
  naming the KV cache pool, and no other request changes;
* pages: the cache manager's ownership invariant holds after every step
  (``CacheManager.check_integrity``: allocator counts against the tree's and the requests' pages,
  no page held twice, no slot leaked) and after a flush of the idle scheduler nothing is in use.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from scheduler_testutil import assert_idle, drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

#: Tokens per block page (the smallest the embedded model allows: its sliding window).
PS = 128
MAX_NEW = 5

_rng = random.Random(7)
PREFIXES = [[_rng.randrange(100, 20000) for _ in range(600)] for _ in range(2)]


@dataclass
class Arrival:
    """One request of a timeline: queued at ``step`` (and aborted at ``abort_at`` if set)."""

    rid: str
    step: int
    ids: list[int]
    n: int
    priority: int | None = None
    abort_at: int | None = None
    oversized: bool = False


@dataclass
class Scenario:
    """A scheduler's settings and its timeline of arrivals."""

    pool_pages: int
    kw: dict[str, Any]
    arrivals: list[Arrival] = field(default_factory=list)


def tokens(r: random.Random, n: int) -> list[int]:
    """``n`` random token ids."""
    return [r.randrange(100, 20000) for _ in range(n)]


#: The scheduler flags of seed ``k`` are ``FLAGS[k % len(FLAGS)]``: each seed covers a different
#: mix of chunking, running-request cap, overlap, policy and priority preemption.
FLAGS: list[dict[str, Any]] = [
    {"chunked_prefill_size": 96, "max_running_requests": 4, "schedule_policy": "fcfs"},
    {
        "chunked_prefill_size": 64, "max_running_requests": 3, "schedule_policy": "fcfs",
        "disable_overlap_schedule": True, "enable_priority_scheduling": True,
        "priority_scheduling_preemption_threshold": 0,
    },
    {"chunked_prefill_size": -1, "max_running_requests": 2, "schedule_policy": "lpm"},
    {
        "chunked_prefill_size": 160, "max_running_requests": 4, "schedule_policy": "lof",
        "enable_priority_scheduling": True, "priority_scheduling_preemption_threshold": 0,
        "schedule_low_priority_values_first": True,
    },
]  # fmt: skip


def make_scenario(seed: int) -> Scenario:
    """The scheduler and timeline of ``seed`` (module docstring). Kinds of request: ``near`` (most
    of the pool), ``exact`` (prompt plus ``max_new_tokens`` = the pool: fits only when it is
    empty), ``prefix`` (a cut of a shared prefix: radix hits), ``short``, ``capped`` (asks for
    more tokens than the pool leaves: stops at the pool, finish ``length``) and ``oversized``
    (a prompt longer than the pool: refused)."""
    r = random.Random(seed)
    pool_pages = r.choice([3, 4])
    pool = pool_pages * PS
    kw = dict(FLAGS[seed % len(FLAGS)])
    sc = Scenario(pool_pages, kw)
    kinds = ["near", "exact", "prefix", "prefix", "short", "capped", "oversized"]
    r.shuffle(kinds)
    priority = bool(kw.get("enable_priority_scheduling"))
    for i, kind in enumerate(kinds):
        n = r.randint(1, MAX_NEW)
        if kind == "near":
            ids = tokens(r, r.randint(pool - PS - 40, pool - n))
        elif kind == "exact":
            ids = tokens(r, pool - n)
        elif kind == "prefix":
            cut = min(r.choice([PS - 1, PS, PS + 1, 2 * PS, 2 * PS + 30]), pool - n - 20)
            ids = PREFIXES[r.randrange(2)][:cut] + tokens(r, r.randint(1, 20))
        elif kind == "short":
            ids = tokens(r, r.randint(1, 100))
        elif kind == "capped":
            ids = tokens(r, pool - r.randint(1, 3))
            n = pool - len(ids) + r.randint(1, 3)
        else:
            ids = tokens(r, pool + r.randint(0, 50))
        step = r.randint(0, 20)
        abort_at = step + r.randint(0, 20) if kind != "oversized" and r.random() < 0.25 else None
        prio = r.choice([None, 0, 1, 2, 5]) if priority else None
        sc.arrivals.append(Arrival(f"r{i}-{kind}", step, ids, n, prio, abort_at, kind == "oversized"))
    return sc


def step_bound(sc: Scenario) -> int:
    """Steps within which a scheduler that never livelocks is idle: the last arrival, then every
    request served alone (its prefill chunks and decode steps), each allowed a few retractions
    that recompute its sequence, plus slack for overlap's one-step lag per batch."""
    chunk = sc.kw["chunked_prefill_size"]
    chunk = chunk if chunk > 0 else 1 << 30
    last = max(a.step for a in sc.arrivals)
    per = [-(-(len(a.ids) + a.n) // min(chunk, 64)) + a.n + 4 for a in sc.arrivals]
    return last + 4 * sum(per) + 50


class ColdRuns:
    """Each (prompt, ``max_new_tokens``) run alone on a fresh roomy scheduler (256-token pages, no
    radix cache, no chunking, no overlap), memoised: the oracle of the outputs."""

    def __init__(self, model_dir: str) -> None:
        self.s = make_scheduler(
            model_dir, max_total_tokens=16 * 256, chunked_prefill_size=-1, disable_radix_cache=True,
            disable_overlap_schedule=True,
        )  # fmt: skip
        self.memo: dict[tuple, tuple[list[int], Any]] = {}

    def __call__(self, ids: list[int], n: int) -> tuple[list[int], Any]:
        key = (tuple(ids), n)
        if key not in self.memo:
            submit(self.s, "cold", ids, n)
            got: list[int] = []
            finish = None
            for _ in range(1000):
                if not self.s.has_work():
                    break
                out = self.s.step()
                for i in range(len(out.rids) if out else 0):
                    got += out.output_ids[i]
                    finish = out.finished_reasons[i] or finish
            assert not self.s.has_work()
            self.memo[key] = (got, finish)
        return self.memo[key]


@pytest.fixture(scope="module")
def cold(default_model_dir: str) -> ColdRuns:
    return ColdRuns(default_model_dir)


def run_scenario(
    model_dir: str, sc: Scenario, trace: list[tuple[str, ...]] | None = None, memo: bool = True
) -> tuple[Scheduler, dict[str, dict]]:
    """Drive a scheduler through ``sc``'s timeline until idle, checking the page invariant after
    every step; the scheduler and per rid its ``ids``, ``finish`` and ``finishes``. ``trace``
    gets the running rids after each step; ``memo=False`` turns the admission refusal memo off
    (every refusal key is new: the queue head is matched again every step)."""
    s = make_scheduler(model_dir, max_total_tokens=sc.pool_pages * PS, page_size=PS, **sc.kw)
    if not memo:
        s._refusal_key = lambda *args: object()  # type: ignore[method-assign]
    match = s.cache_manager.match_prefix
    matches = [0]

    def counted_match(req: Any) -> bool:
        matches[0] += 1
        return match(req)

    s.cache_manager.match_prefix = counted_match  # type: ignore[method-assign]
    s.num_prefix_matches = matches  # type: ignore[attr-defined]
    assert s.max_total_num_tokens == sc.pool_pages * PS
    res: dict[str, dict] = {a.rid: {"ids": [], "finish": None, "finishes": 0} for a in sc.arrivals}
    bound = step_bound(sc)
    last_arrival = max(a.step for a in sc.arrivals)
    for t in range(bound):
        for a in sc.arrivals:
            if a.step == t:
                kw = {} if a.priority is None else {"priority": a.priority}
                submit(s, a.rid, a.ids, a.n, **kw)
            if a.abort_at == t:
                s.abort_request(a.rid)
        if t > last_arrival and not s.has_work():
            return s, res
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            got = res[rid]
            assert got["finishes"] == 0, f"{rid}: output after its finish"
            got["ids"] += out.output_ids[i]
            if out.finished_reasons[i] is not None:
                got["finish"] = out.finished_reasons[i]
                got["finishes"] += 1
        s.cache_manager.check_integrity(list(s.running) + list(s.waiting))
        if trace is not None:
            trace.append(tuple(r.rid for r in s.running))
    live = [(r.rid, r.seq_len, len(r.block_pages)) for r in list(s.running) + list(s.waiting)]
    raise AssertionError(f"not idle after {bound} steps (livelock?): running + waiting {live}")


def check_results(sc: Scenario, s: Scheduler, res: dict[str, dict], cold: ColdRuns) -> None:
    """Outputs against the cold runs, the oversized refusal, and nothing left after a flush."""
    pool = sc.pool_pages * PS
    for a in sc.arrivals:
        got = res[a.rid]
        assert got["finishes"] == 1, f"{a.rid}: {got['finishes']} finishes"
        if a.oversized:
            f = got["finish"]
            assert f["type"] == "abort" and f["status_code"] == 400, (a.rid, f)
            assert "KV cache pool" in f["message"] and f"{pool} tokens" in f["message"], f["message"]
            assert got["ids"] == []
            continue
        n = min(a.n, pool - len(a.ids))  # the pool bounds the sequence (finish length there)
        want_ids, want_finish = cold(a.ids, n)
        assert len(want_ids) == n
        if got["finish"]["type"] == "abort":
            assert a.abort_at is not None, f"{a.rid} aborted unasked: {got['finish']}"
            assert got["ids"] == want_ids[: len(got["ids"])], f"{a.rid}: aborted output not a prefix"
        else:
            assert got["ids"] == want_ids, f"{a.rid} ({len(a.ids)} prompt tokens): tokens differ"
            assert got["finish"] == want_finish, (a.rid, got["finish"], want_finish)
    assert_idle(s)


@pytest.mark.parametrize("seed", range(1, 4))
def test_admission_fuzz(default_model_dir: str, cold: ColdRuns, seed: int) -> None:
    """Every request of ``seed``'s timeline finishes within the step bound with its cold tokens
    (module docstring); no page or slot leaks. Seed 0 runs in
    :func:`test_refusal_memo_changes_no_admission`."""
    sc = make_scenario(seed)
    s, res = run_scenario(default_model_dir, sc)
    check_results(sc, s, res, cold)


def test_refusal_memo_changes_no_admission(default_model_dir: str, cold: ColdRuns) -> None:
    """Seed 0's timeline (module docstring's checks) with the refusal memo on and off: the memo
    only skips prefix matches that would be refused again, so with it off (the queue head matched
    and checked every step) the same requests run at every step; and with it on it did skip
    matches (seed 0 refuses whole-sequence admissions while others run)."""
    sc = make_scenario(0)
    runs = []
    for memo in (True, False):
        trace: list[tuple[str, ...]] = []
        s, res = run_scenario(default_model_dir, sc, trace, memo=memo)
        check_results(sc, s, res, cold)
        runs.append((trace, s.num_prefix_matches[0]))  # type: ignore[attr-defined]
    assert runs[0][0] == runs[1][0], "the memo changed which requests ran"
    assert runs[0][1] < runs[1][1], f"the memo skipped no prefix match ({runs[0][1]} vs {runs[1][1]})"


def test_resent_rid_is_not_held_by_the_refusal_memo(default_model_dir: str, cold: ColdRuns) -> None:
    """A queued request refused while another runs, aborted and resent under the same rid with a
    prompt that fits, is admitted on the step a request with a new rid is (the memo of the first
    refusal belongs to the aborted request, not to its rid), with its cold tokens. Before the memo
    was keyed on the request it waited until the running request took its next page (25 steps)."""
    r = random.Random(3)
    long_decode, too_big, fits = tokens(r, 100), tokens(r, 300), tokens(r, 50)
    admitted_at = {}
    for rid in ("x", "y"):
        s = make_scheduler(
            default_model_dir, max_total_tokens=3 * PS, page_size=PS, chunked_prefill_size=-1,
            disable_overlap_schedule=True,
        )  # fmt: skip
        submit(s, "a", long_decode, 40)
        s.step()
        submit(s, "x", too_big, 5)  # its whole sequence needs the pool: refused beside "a"
        s.step()
        s.step()
        assert [q.rid for q in s.waiting] == ["x"] and [q.rid for q in s.running] == ["a"]
        s.abort_request("x")
        s.step()
        submit(s, rid, fits, 2)
        ids: list[int] = []
        for t in range(60):
            out = s.step()
            ids += [x for i, q in enumerate(out.rids if out else []) if q == rid for x in out.output_ids[i]]
            if any(q.rid == rid for q in s.running) or not s.waiting:
                admitted_at[rid] = t
                break
        ids += drain(s).get(rid, {}).get("ids", [])
        assert ids == cold(fits, 2)[0]
        assert_idle(s)
    assert admitted_at == {"x": 0, "y": 0}

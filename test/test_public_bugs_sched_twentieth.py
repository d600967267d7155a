"""Scheduler and KV-cache regressions from public SGLang / vLLM reports (twentieth round).

Every test drives an in-process :class:`~sglang_v4.managers.scheduler.Scheduler` on the shared
random checkpoint (``sched_model_dir``). The oracles are cold runs (the same prompt alone on a
roomy scheduler with the default chunking and a fresh cache), the pool sizes set in the test's own
arguments, and the allocators' own counters after a flush.
"""

from __future__ import annotations

from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

#: prompt lengths (tokens) and seeds of the requests the tests replay
PROMPTS = {
    "short": (40, 201),
    "a": (250, 203),
    "b": (250, 204),
    "c": (600, 205),
    "d": (600, 206),
}
N = 6


def _prompt(rid: str) -> list[int]:
    n, seed = PROMPTS[rid]
    return random_ids(n, seed)


@pytest.fixture(scope="module")
def roomy(sched_model_dir: str) -> Scheduler:
    """The default chunking and a 32-page pool: the cold-run scheduler."""
    return make_scheduler(sched_model_dir)


_COLD: dict[tuple[str, int], list[int]] = {}


def cold(roomy: Scheduler, rid: str, n: int = N, ids: list[int] | None = None) -> list[int]:
    """Greedy output ids of the prompt ``rid`` run alone on a flushed roomy scheduler."""
    key = (rid, n)
    if key not in _COLD:
        assert roomy.flush_cache()
        submit(roomy, rid, ids if ids is not None else _prompt(rid), n)
        _COLD[key] = drain(roomy)[rid]["ids"]
        assert roomy.flush_cache()
    return _COLD[key]


def _long_prompt_next_to_a_decode(s: Scheduler) -> dict[str, dict]:
    """``short`` decodes; ``c`` (600 tokens) arrives two steps later; both run to the end."""
    submit(s, "short", _prompt("short"), 12)
    res: dict[str, dict] = {}
    for _ in range(2):
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            res.setdefault(rid, {"ids": []})["ids"] += out.output_ids[i]
    submit(s, "c", _prompt("c"), N)
    rest = drain(s)
    for rid, r in rest.items():
        res.setdefault(rid, {"ids": []})["ids"] += r["ids"]
        res[rid]["finish"] = r["finish"]
    return res


def test_unchunked_prefill_longer_than_max_prefill_tokens_completes(
    sched_model_dir: str, roomy: Scheduler
) -> None:
    # sgl-project/sglang#9142: --chunked-prefill-size -1 with a prompt longer than
    # --max-prefill-tokens crashed the server. Chunking off with a 256-token prefill budget: a
    # 600-token prompt arriving next to a decoding request is still served, with the cold outputs.
    s = make_scheduler(sched_model_dir, chunked_prefill_size=-1, max_prefill_tokens=PAGE)
    res = _long_prompt_next_to_a_decode(s)
    assert res["c"]["ids"] == cold(roomy, "c")
    assert res["short"]["ids"] == cold(roomy, "short", 12)
    assert res["c"]["finish"]["type"] == res["short"]["finish"]["type"] == "length"
    assert_idle(s)


def test_chunk_larger_than_max_prefill_tokens_is_served(sched_model_dir: str, roomy: Scheduler) -> None:
    # sgl-project/sglang-jax#1551: --chunked-prefill-size 4096 over --max-prefill-tokens 2048
    # made a chunk no prefill bucket held and killed the scheduler on the first long prompt. Here a
    # 512-token chunk over a 256-token prefill budget: the long prompt is served, outputs cold.
    s = make_scheduler(sched_model_dir, chunked_prefill_size=2 * PAGE, max_prefill_tokens=PAGE)
    res = _long_prompt_next_to_a_decode(s)
    assert res["c"]["ids"] == cold(roomy, "c")
    assert res["short"]["ids"] == cold(roomy, "short", 12)
    assert_idle(s)


def test_max_new_tokens_past_the_pool_ends_at_the_pool(sched_model_dir: str) -> None:
    # sgl-project/sglang#29249: a request admitted although prompt + max_new_tokens could never fit
    # the KV pool sat in the queue forever and hung the scheduler. A 2-page pool and a prompt 20
    # tokens short of it asking for 500 tokens: it ends with "length" when the pool is full
    # (prompt + completion == the pool), never hangs, and leaks nothing.
    pool = 2 * PAGE
    s = make_scheduler(sched_model_dir, max_total_tokens=pool, context_length=4096)
    prompt = random_ids(pool - 20, 7)
    submit(s, "big", prompt, 500)
    res = drain(s, max_steps=200)["big"]
    assert res["finish"]["type"] == "length", res["finish"]
    assert len(prompt) + len(res["ids"]) == pool
    assert res["completion"] == 20
    assert_idle(s)


def test_prompt_shorter_than_a_page_caches_nothing_and_counts_pages(sched_model_dir: str) -> None:
    # sgl-project/sglang#10637: with page_size > 1 a key shorter than one page was cut to nothing
    # and the radix tree's evictable size was counted in key length rather than pages. A 200-token
    # prompt (under one 256-token page) hits nothing on its second run; a 300-token prompt caches
    # exactly one block, which is evictable once the request ends and is counted as one page.
    s = make_scheduler(sched_model_dir)
    short = random_ids(200, 11)
    for _ in range(2):
        submit(s, "s", short, 2)
        assert drain(s)["s"]["cached"] == 0
    assert s.tree_cache.stats()["cached_blocks"] == 0
    longer = random_ids(300, 12)
    submit(s, "l1", longer, 2)
    drain(s)
    stats = s.tree_cache.stats()
    assert stats["cached_blocks"] == stats["evictable_blocks"] == 1
    assert stats["cached_tokens"] == PAGE
    assert s.cache_manager.token_usage() == 0.0
    submit(s, "l2", longer, 2)
    assert drain(s)["l2"]["cached"] == PAGE
    assert_idle(s)


def test_running_request_keeps_its_matched_prefix_under_eviction(
    sched_model_dir: str, roomy: Scheduler
) -> None:
    # sgl-project/mini-sglang#52: locking a match skipped the matched node itself, so eviction
    # could free the pages a running request was reading. After "a"'s first block is cached, "hit"
    # (that block + its own tokens) is admitted on it; evicting everything evictable then must
    # leave its matched node alive, and its output equals the cold one.
    s = make_scheduler(sched_model_dir, disable_overlap_schedule=True)
    base = random_ids(300, 21)
    submit(s, "seed", base, 2)
    drain(s)
    hit_prompt = base[:PAGE] + random_ids(100, 22)
    submit(s, "hit", hit_prompt, N)
    first = s.step()  # the prefill: it samples the first token
    assert first is not None and first.rids == ["hit"]
    req = next(r for r in s.running if r.rid == "hit")
    node = req.last_node
    assert node is not None and req.cached_tokens == PAGE
    s.tree_cache.evict(10_000, 10_000)
    assert node.alive and node.lock_ref > 0
    res = drain(s)["hit"]
    assert first.output_ids[0] + res["ids"] == cold(roomy, "hit-prompt", N, hit_prompt)
    assert_idle(s)


def test_pool_usage_returns_to_zero_after_many_requests(sched_model_dir: str) -> None:
    # sgl-project/sglang#11970: "token_to_kv_pool_allocator memory leak detected" after a long
    # benchmark (many concurrent requests, paged KV). A mix of 14 requests (shared prefixes, page
    # boundaries, aborts queued / mid-prefill / decoding, max_running_requests 3, chunked prefill):
    # once idle the requests hold nothing (token usage 0), the tree owns every used page, and a
    # flush returns every page and request slot.
    s = make_scheduler(sched_model_dir, max_running_requests=3, chunked_prefill_size=PAGE)
    shared = random_ids(PAGE, 31)
    lengths = [1, 255, 256, 257, 511, 512, 513, 40, 300, 420, 90, 130, 380, 12]
    for i, n in enumerate(lengths):
        ids = (shared + random_ids(n, 100 + i)) if i % 3 == 0 else random_ids(n, 100 + i)
        submit(s, f"r{i}", ids, 2 + i % 3)
    aborted: set[str] = set()
    for step in range(20_000):
        if not s.has_work():
            break
        for rid, at in (("r4", 1), ("r9", 3), ("r12", 6), ("r13", 9)):
            if step == at:
                s.abort_request(rid)
                aborted.add(rid)
        s.step()
    assert not s.has_work()
    assert aborted == {"r4", "r9", "r12", "r13"}
    assert s.cache_manager.token_usage() == 0.0
    s.cache_manager.check_integrity([])
    avail, evictable, used = s.cache_manager.kv_block_counts()
    assert used == 0 and avail + evictable == s.pool.block_alloc.num_pages
    assert_idle(s)


RETRACT_PROMPTS = {"a": ("a", None), "b": ("b", None), "c2": (None, (250, 207))}
RETRACT_N = 12


def _retract_prompt(rid: str) -> list[int]:
    name, spec = RETRACT_PROMPTS[rid]
    return _prompt(name) if name else random_ids(*spec)


def _cold_with_logprobs(roomy: Scheduler, rid: str, ids: list[int], n: int) -> dict:
    key = (f"{rid}-lp", n)
    if key not in _COLD_LP:
        assert roomy.flush_cache()
        submit(roomy, rid, ids, n, return_logprob=True, stream=True)
        _COLD_LP[key] = drain(roomy)[rid]
        assert roomy.flush_cache()
    return _COLD_LP[key]


_COLD_LP: dict[tuple[str, int], dict] = {}


@pytest.fixture(scope="module")
def retraction_run(
    sched_model_dir: str,
) -> tuple[Scheduler, dict[str, dict], list[tuple[str, list, list, Any]]]:
    """Three 250-token prompts, each growing past a page, in a 4-page pool (overlap on), with
    output logprobs and streaming: one is retracted and resumed; a request submitted at the first
    retraction takes the freed slot. Returns the scheduler, the results per rid (:func:`drain`'s
    fields) and every message as ``(rid, ids, logprobs, finish)``."""
    s = make_scheduler(sched_model_dir, max_total_tokens=4 * PAGE)
    for rid in RETRACT_PROMPTS:
        submit(s, rid, _retract_prompt(rid), RETRACT_N, return_logprob=True, stream=True)
    res: dict[str, dict] = {}
    msgs: list[tuple[str, list, list, Any]] = []
    late = False
    for _ in range(5000):
        if not s.has_work():
            break
        if s.num_retractions and not late:
            submit(s, "late", _prompt("short"), 8, return_logprob=True, stream=True)
            late = True
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            msgs.append(
                (
                    rid,
                    list(out.output_ids[i]),
                    list(out.output_token_logprobs_val[i]),
                    out.finished_reasons[i],
                )
            )
            r = res.setdefault(rid, {"ids": [], "lp": []})
            r["ids"] += out.output_ids[i]
            r["lp"] += out.output_token_logprobs_val[i]
            r["finish"] = out.finished_reasons[i]
    assert late and s.num_retractions > 0
    return s, res, msgs


def test_retracted_request_resumes_with_cold_outputs(roomy: Scheduler, retraction_run: Any) -> None:
    # sgl-project/sglang#33547: a retracted request's unsynced decode state was flushed into a
    # request slot reused by another request, corrupting it. Every output of the retraction run
    # (the retracted request, the others, the one that took the freed slot) equals its cold run,
    # and nothing leaks.
    s, res, _ = retraction_run
    for rid in RETRACT_PROMPTS:
        assert res[rid]["ids"] == _cold_with_logprobs(roomy, rid, _retract_prompt(rid), RETRACT_N)["ids"], rid
        assert res[rid]["finish"]["type"] == "length"
    assert res["late"]["ids"] == cold(roomy, "short", 8)
    assert_idle(s)


def test_retracted_request_keeps_one_logprob_per_token(roomy: Scheduler, retraction_run: Any) -> None:
    # sgl-project/sglang#20724: after a retraction the per-token accumulators (output logprobs)
    # kept entries of the discarded trajectory: K + N logprobs for N tokens, silently wrong for RL.
    # In the retraction run every request has exactly one output logprob per output token, and
    # they are the cold run's (up to float reassociation: the batches differ).
    _, res, _ = retraction_run
    for rid in RETRACT_PROMPTS:
        ref = _cold_with_logprobs(roomy, rid, _retract_prompt(rid), RETRACT_N)
        assert len(res[rid]["lp"]) == len(res[rid]["ids"]) == RETRACT_N, rid
        assert res[rid]["lp"] == pytest.approx(ref["lp"], abs=2e-3), rid


def test_retracted_request_streams_each_token_once(roomy: Scheduler, retraction_run: Any) -> None:
    # sgl-project/sglang#23154: a retracted request reached the output path with missing
    # (None) logprobs and the tokenizer side raised TypeError. Streamed through the retraction,
    # every message holds as many logprobs as new ids, all numbers, only the last message of a
    # request carries a finish, and the messages put together are the cold output.
    _, _, msgs = retraction_run
    for rid in [*RETRACT_PROMPTS, "late"]:
        mine = [m for m in msgs if m[0] == rid]
        assert all(len(ids) == len(lp) for _, ids, lp, _ in mine), rid
        assert all(isinstance(x, float) for _, _, lp, _ in mine for x in lp), rid
        finishes = [i for i, m in enumerate(mine) if m[3]]
        assert finishes == [len(mine) - 1], rid
        streamed = [t for _, ids, _, _ in mine for t in ids]
        want = (
            cold(roomy, "short", 8)
            if rid == "late"
            else _cold_with_logprobs(roomy, rid, _retract_prompt(rid), RETRACT_N)["ids"]
        )
        assert streamed == want, rid


def test_aborted_request_stops_generating(sched_model_dir: str) -> None:
    # sgl-project/mini-sglang#15: a cancelled request kept generating to max_tokens. A request for
    # 400 tokens aborted after its third step: it sends one more message (the abort) and no
    # forward runs after the one already in flight.
    s = make_scheduler(sched_model_dir)
    submit(s, "x", random_ids(50, 41), 400)
    for _ in range(3):
        s.step()
    s.abort_request("x")
    forwards = s.forward_ct
    msgs = []
    for _ in range(10):
        if not s.has_work():
            break
        out = s.step()
        if out and "x" in out.rids:
            msgs.append(out.finished_reasons[out.rids.index("x")])
    assert not s.has_work()
    assert [m["type"] for m in msgs if m] == ["abort"]
    assert s.forward_ct == forwards
    assert_idle(s)


def test_several_long_prompts_prefill_in_the_same_step(sched_model_dir: str, roomy: Scheduler) -> None:
    # sgl-project/sglang#34623: only one request could be mid-prefill at a time, so one long prompt
    # held every other prompt back for all its chunks. Two 600-token prompts with 256-token chunks
    # and a 1024-token step budget: both get a chunk in the first step, and outputs stay cold.
    s = make_scheduler(
        sched_model_dir, chunked_prefill_size=PAGE, max_prefill_tokens=4 * PAGE, disable_overlap_schedule=True
    )
    submit(s, "c", _prompt("c"), N)
    submit(s, "d", _prompt("d"), N)
    s.step()
    assert sorted(r.num_computed for r in s.running) == [PAGE, PAGE]
    res = drain(s)
    assert res["c"]["ids"] == cold(roomy, "c")
    assert res["d"]["ids"] == cold(roomy, "d")
    assert_idle(s)


def test_chunked_prefills_park_when_the_pool_is_exhausted(sched_model_dir: str, roomy: Scheduler) -> None:
    # sgl-project/sglang#30743: when the KV pool was full and nothing evictable, a chunked prefill
    # was admitted anyway and its allocation failure killed the server. Two 600-token prompts
    # (3 pages each) in a 4-page pool with 256-token chunks: they cannot both be resident; one
    # waits (or is retracted) and both finish with their cold outputs.
    s = make_scheduler(sched_model_dir, max_total_tokens=4 * PAGE, chunked_prefill_size=PAGE)
    submit(s, "c", _prompt("c"), N)
    submit(s, "d", _prompt("d"), N)
    res = drain(s, max_steps=500)
    assert res["c"]["ids"] == cold(roomy, "c")
    assert res["d"]["ids"] == cold(roomy, "d")
    assert res["c"]["finish"]["type"] == res["d"]["finish"]["type"] == "length"
    assert_idle(s)


def test_unbalanced_unlock_is_refused_and_counts_stay(sched_model_dir: str) -> None:
    # UbiquitousLearning/mllm#656: dec_lock_ref on an unlocked radix node drove lock_ref to -1,
    # after which the evictable / protected sizes never added up again. Unlocking a node no
    # request holds raises ValueError and leaves the counters as they were; a balanced
    # lock / unlock still moves the node's block out of and back into the evictable count.
    s = make_scheduler(sched_model_dir)
    ids = random_ids(300, 51)
    submit(s, "p", ids, 2)
    drain(s)
    tree = s.tree_cache
    node, nblocks = tree.find_node(ids[:PAGE])
    assert nblocks == 1 and node.lock_ref == 0
    before = tree.stats()
    with pytest.raises(ValueError, match="not locked"):
        tree.dec_lock_ref(node)
    assert node.lock_ref == 0 and tree.stats() == before
    tree.inc_lock_ref(node)
    assert tree.evictable_sizes()[0] == before["evictable_blocks"] - 1
    assert not s.flush_cache()  # a held lock refuses a flush
    tree.dec_lock_ref(node)
    assert tree.stats() == before
    assert_idle(s)


def _priority_pressure(
    sched_model_dir: str, overlap: bool
) -> tuple[Scheduler, dict[str, list[int]], list, list]:
    """Three priority-0 requests (100-token prompts, 16 tokens each) fill ``max_running_requests``
    3 in a 4-page pool; a priority-20 request (300 tokens, 6 new) arrives at step 3 and must
    preempt one. Returns the scheduler, ids per rid, the finish order and, per step without
    overlap, the running decoding requests that got no token although not retracted."""
    s = make_scheduler(
        sched_model_dir,
        max_total_tokens=4 * PAGE,
        max_running_requests=3,
        enable_priority_scheduling=True,
        disable_overlap_schedule=not overlap,
    )
    for i in range(3):
        submit(s, f"l{i}", random_ids(100, 60 + i), 16, priority=0)
    ids: dict[str, list[int]] = {}
    order: list[str] = []
    skipped: list = []
    for step in range(5000):
        if not s.has_work():
            break
        if step == 3:
            submit(s, "hi", random_ids(300, 70), 6, priority=20)
        before = {
            id(r): (r, len(r.output_ids))
            for r in s.running
            if r.output_ids and len(r.origin_input_ids) + len(r.output_ids) - r.num_computed == 1
        }
        out = s.step()
        assert len(s.running) <= 3
        for i, rid in enumerate(out.rids if out else []):
            ids.setdefault(rid, []).extend(out.output_ids[i])
            if out.finished_reasons[i]:
                order.append(rid)
        if not overlap:
            skipped += [
                r.rid
                for r, n in before.values()
                if r in s.running and r.num_retractions == 0 and len(r.output_ids) == n
            ]
    return s, ids, order, skipped


def test_priority_preemption_under_kv_pressure_keeps_outputs(sched_model_dir: str, roomy: Scheduler) -> None:
    # vllm-project/vllm#23347: priority scheduling crashed when a request was preempted for a
    # higher-priority one while KV blocks were short (the step's scheduled and running lists
    # disagreed). Three low-priority requests fill the running cap and the pool; a high-priority
    # one preempts one of them: it finishes first, nobody crashes, the cap holds at every step,
    # and every output equals its cold run.
    s, ids, order, _ = _priority_pressure(sched_model_dir, overlap=True)
    assert order[0] == "hi" and s.num_retractions >= 1
    for i in range(3):
        assert ids[f"l{i}"] == cold(roomy, f"l{i}-16", 16, random_ids(100, 60 + i)), i
    assert ids["hi"] == cold(roomy, "hi-6", 6, random_ids(300, 70))
    assert_idle(s)


def test_priority_preemption_skips_no_running_request(sched_model_dir: str, roomy: Scheduler) -> None:
    # vllm-project/vllm#49097: when the preemption victim sat earlier in the running list than the
    # scheduling cursor, the next running request was silently skipped for a whole step. Without
    # overlap, every decoding request that is still running after a step and was not retracted
    # got exactly one token in it.
    s, ids, order, skipped = _priority_pressure(sched_model_dir, overlap=False)
    assert order[0] == "hi" and s.num_retractions >= 1
    assert skipped == []
    assert ids["hi"] == cold(roomy, "hi-6", 6, random_ids(300, 70))
    assert_idle(s)

"""Scheduler regressions from public SGLang / vLLM serving reports (thirty-second round): the
running-request cap filled by chunk-prefilled prompts, a cap-sized batch of one-token requests
followed by more, prompt logprobs when the last prompt chunk is a single token, a retraction step
that must still decode the other requests, a prompt exactly as large as the KV pool, the
re-admission order of a retracted request under priority scheduling, and a prefill step's
chunk budget filled across queued requests.

Every test drives an in-process :class:`~sglang_v4.managers.scheduler.Scheduler` on the shared
random checkpoint (``sched_model_dir``, CPU, float32, 256-token pages, greedy). Oracles: cold runs
(each prompt alone on a flushed scheduler that prefills it in one piece), the meaning SGLang's
documentation gives ``--max-running-requests``, ``--chunked-prefill-size`` and
``--max-prefill-tokens``, the pool size arithmetic (pages times page size), and the allocators'
counters after a flush.
"""

from __future__ import annotations

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, collect_outputs, drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def whole(sched_model_dir: str) -> Scheduler:
    """Prompts prefilled in one piece on a 32-page pool: the cold-run scheduler."""
    return make_scheduler(
        sched_model_dir,
        max_total_tokens=32 * PAGE,
        chunked_prefill_size=16 * PAGE,
        disable_overlap_schedule=True,
    )


#: the first prompt seed of the retraction tests (they share prompts, so their cold runs)
RETRACT_SEED = 26765

_COLD: dict[tuple[int, int, int, bool], dict] = {}


def cold(whole: Scheduler, n_prompt: int, seed: int, n: int, logprobs: bool = False) -> dict:
    """The result (:func:`drain`'s) of greedy ``random_ids(n_prompt, seed)`` for ``n`` tokens alone
    on a flushed ``whole``; with ``logprobs`` the prompt logprobs from position 0 too."""
    key = (n_prompt, seed, n, logprobs)
    if key not in _COLD:
        assert whole.flush_cache()
        kw = dict(return_logprob=True, logprob_start_len=0) if logprobs else {}
        submit(whole, "cold", random_ids(n_prompt, seed), n, **kw)
        _COLD[key] = drain(whole)["cold"]
        assert whole.flush_cache()
    return _COLD[key]


def test_sglang_35537_running_cap_filled_by_chunk_prefilled_prompts(
    sched_model_dir: str, whole: Scheduler
) -> None:
    """sgl-project/sglang#35537 (with ``--max-running-requests 4`` and chunked prefill, four cold
    prompts ran only three at a time: a "batch full" flag latched during the last prefill chunk
    kept the fourth queued until a request finished). Four 300-token prompts on 256-token chunks (256 prompt tokens
    a step, so they are admitted over several steps) and ``max_running_requests=4``: all four are running together before any finishes, never
    more than four, and each one's tokens equal its cold run."""
    s = make_scheduler(
        sched_model_dir,
        max_total_tokens=32 * PAGE,
        chunked_prefill_size=PAGE,
        max_prefill_tokens=PAGE,
        max_running_requests=4,
        disable_overlap_schedule=True,
    )
    for i in range(4):
        submit(s, f"r{i}", random_ids(300, 35537 + i), 8)
    res: dict[str, dict] = {}
    four_before_finish = False
    for _ in range(500):
        if not s.has_work():
            break
        collect_outputs(s.step(), res)
        assert len(s.running) <= 4
        finished = any(r["finish"] for r in res.values())
        if len(s.running) == 4 and not finished:
            four_before_finish = True
    assert not s.has_work()
    assert four_before_finish
    for i in range(4):
        assert res[f"r{i}"]["finish"]["type"] == "length"
        assert res[f"r{i}"]["ids"] == cold(whole, 300, 35537 + i, 8)["ids"], i
    assert_idle(s)


def test_sglang_22518_cap_sized_batch_of_one_token_requests_then_more(
    sched_model_dir: str, whole: Scheduler
) -> None:
    """sgl-project/sglang#22518 (with ``--max-running-requests 2`` and the overlap scheduler, a
    server whose requests finish at their prefill deadlocked after the first full batch: a stale
    "batch full" flag blocked every later request) and sgl-project/sglang#23138 (an empty batch
    left marked full hung queued prefill-only requests). Three one-token requests on a cap of
    two (overlap scheduling on), then three more after the first wave finished: all six finish with their cold-run token
    in a bounded number of steps, and nothing is left in use."""
    s = make_scheduler(
        sched_model_dir,
        max_total_tokens=16 * PAGE,
        max_running_requests=2,
    )
    res: dict[str, dict] = {}
    for wave in range(2):
        for i in range(3):
            submit(s, f"w{wave}r{i}", random_ids(80, 22518 + 3 * wave + i), 1)
        for _ in range(50):
            if not s.has_work():
                break
            collect_outputs(s.step(), res)
            assert len(s.running) <= 2
        assert not s.has_work(), f"wave {wave} did not finish"
    for wave in range(2):
        for i in range(3):
            r = res[f"w{wave}r{i}"]
            assert r["finish"] == {"type": "length", "length": 1}
            assert r["ids"] == cold(whole, 80, 22518 + 3 * wave + i, 1)["ids"]
    assert_idle(s)


@pytest.mark.parametrize("n_prompt", [PAGE + 1])
def test_vllm_50795_prompt_logprobs_when_the_last_chunk_is_one_token(
    sched_model_dir: str, whole: Scheduler, n_prompt: int
) -> None:
    """vllm-project/vllm#50795 (prompt logprobs were dropped, or the request crashed, when the
    chunks before the last had computed exactly ``prompt_len - 1`` tokens, leaving a last chunk of
    one token). A prompt of ``k * 256 + 1`` tokens on 256-token chunks: one logprob entry per
    prompt token (the first ``None``), each equal to the cold one-piece run's within 1e-4, and the
    same output tokens."""
    s = make_scheduler(
        sched_model_dir, max_total_tokens=16 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )
    submit(s, "lp", random_ids(n_prompt, 50795), 3, return_logprob=True, logprob_start_len=0)
    got = drain(s)["lp"]
    ref = cold(whole, n_prompt, 50795, 3, logprobs=True)
    assert len(got["in_lp"]) == len(ref["in_lp"]) == n_prompt
    assert got["in_lp"][0] is None and ref["in_lp"][0] is None
    assert all(v is not None for v in got["in_lp"][1:])
    assert got["in_lp"][1:] == pytest.approx(ref["in_lp"][1:], abs=1e-4)
    assert got["ids"] == ref["ids"]
    assert got["lp"] == pytest.approx(ref["lp"], abs=1e-4)
    assert_idle(s)


def test_vllm_26765_a_retraction_step_still_decodes_the_other_requests(
    sched_model_dir: str, whole: Scheduler
) -> None:
    """vllm-project/vllm#26765 (when a preemption happened while scheduling the running requests,
    the scheduler stopped there and the running requests after the preempted one got no token
    that step) and sgl-project/sglang#14939 (decode ran out of memory right after a retraction,
    its page count mis-estimated). Three 250-token prompts that grow past their first block (12 new
    tokens each) in a 4-block pool (overlap off): in every step, each request that was decoding and is still
    running afterwards (not retracted) got exactly one token; retraction happens; every output
    equals its cold run."""
    s = make_scheduler(sched_model_dir, max_total_tokens=4 * PAGE, disable_overlap_schedule=True)
    for i in range(3):
        submit(s, f"r{i}", random_ids(250, RETRACT_SEED + i), 12)
    res: dict[str, dict] = {}
    skipped: list[str] = []
    for _ in range(2000):
        if not s.has_work():
            break
        decoding = {
            id(r): (r, len(r.output_ids), r.num_retractions)
            for r in s.running
            if r.output_ids and len(r.origin_input_ids) + len(r.output_ids) - r.num_computed == 1
        }
        collect_outputs(s.step(), res)
        for r, n, k in decoding.values():
            if r in s.running and r.num_retractions == k and r.finished_reason is None:
                if len(r.output_ids) != n + 1:
                    skipped.append(r.rid)
    assert not s.has_work()
    assert s.num_retractions > 0
    assert skipped == []
    for i in range(3):
        assert res[f"r{i}"]["finish"]["type"] == "length"
        assert res[f"r{i}"]["ids"] == cold(whole, 250, RETRACT_SEED + i, 12)["ids"], i
    assert_idle(s)


def test_vllm_2163_prompt_exactly_as_large_as_the_pool(sched_model_dir: str, whole: Scheduler) -> None:
    """vllm-project/vllm#2163 (a sequence longer than the whole KV cache hung the engine instead of
    failing) and vllm-project/vllm#40002 (requests whose context approached the KV cache size hung
    the server). A 2-page pool (512 tokens): a 511-token prompt for one new token fits exactly
    and finishes with its cold-run token; a 512-token prompt for two new tokens needs 513
    tokens of KV and is failed with a 400 abort, never left queued; nothing leaks."""
    s = make_scheduler(
        sched_model_dir, max_total_tokens=2 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )
    submit(s, "fits", random_ids(2 * PAGE - 1, 2163), 1)
    got = drain(s, max_steps=100)["fits"]
    assert got["finish"] == {"type": "length", "length": 1}
    assert got["ids"] == cold(whole, 2 * PAGE - 1, 2163, 1)["ids"]
    submit(s, "over", random_ids(2 * PAGE, 40002), 2)
    over = drain(s, max_steps=100)["over"]
    assert over["finish"]["type"] == "abort" and over["finish"].get("status_code") == 400
    assert over["ids"] == []
    assert_idle(s)


def test_vllm_56843_retracted_request_readmitted_before_a_later_one(
    sched_model_dir: str, whole: Scheduler
) -> None:
    """vllm-project/vllm#56843 (under priority scheduling a request preempted for KV pages went
    back into the queue behind newer requests of the same priority, wasting its computed work and
    risking starvation). Priority scheduling, equal priorities, three 250-token prompts growing past
    their first block in a 4-block pool: once one is retracted, a new request of the same priority arrives; the
    retracted request is running again no later than the newcomer is admitted, and every output
    equals its cold run."""
    s = make_scheduler(
        sched_model_dir,
        max_total_tokens=4 * PAGE,
        enable_priority_scheduling=True,
        disable_overlap_schedule=True,
    )
    for i in range(3):
        submit(s, f"r{i}", random_ids(250, RETRACT_SEED + i), 12, priority=5)
    res: dict[str, dict] = {}
    retracted = None
    for _ in range(2000):
        collect_outputs(s.step(), res)
        retracted = next((r for r in s.waiting if r.num_retractions), None)
        if retracted is not None:
            break
    assert retracted is not None, "no retraction"
    submit(s, "late", random_ids(250, RETRACT_SEED + 9), 4, priority=5)
    late = s.waiting[-1]
    assert late.rid == "late"
    for _ in range(2000):
        collect_outputs(s.step(), res)
        if late in s.running or res.get("late", {}).get("finish"):
            assert retracted in s.running or retracted.finished_reason is not None
            break
    else:
        raise AssertionError("the newcomer was never admitted")
    for _ in range(4000):
        if not s.has_work():
            break
        collect_outputs(s.step(), res)
    assert not s.has_work()
    for i in range(3):
        assert res[f"r{i}"]["ids"] == cold(whole, 250, RETRACT_SEED + i, 12)["ids"], i
    assert res["late"]["ids"] == cold(whole, 250, RETRACT_SEED + 9, 4)["ids"]
    assert_idle(s)


def test_sglang_25741_a_prefill_step_fills_its_chunk_across_requests(
    sched_model_dir: str, whole: Scheduler
) -> None:
    """sgl-project/sglang#25741 (a prefill step with chunked prefill did not fill its chunk budget:
    after a short request, the next queued prompt was not chunked into the room left). With
    ``--chunked-prefill-size`` and ``--max-prefill-tokens`` 256 and nothing decoding, a 100-token
    prompt and a 300-token prompt queued together: the first step prefills the short one whole
    and the first 156 tokens of the long one (256 in all), and both outputs equal their cold
    runs."""
    s = make_scheduler(
        sched_model_dir,
        max_total_tokens=16 * PAGE,
        chunked_prefill_size=PAGE,
        max_prefill_tokens=PAGE,
        disable_overlap_schedule=True,
    )
    submit(s, "short", random_ids(100, 25741), 4)
    submit(s, "long", random_ids(300, 25742), 4)
    res: dict[str, dict] = {}
    collect_outputs(s.step(), res)
    computed = {r.rid: r.num_computed for r in s.running}
    assert computed == {"short": 100, "long": PAGE - 100}
    drain(s, res)
    assert res["short"]["ids"] == cold(whole, 100, 25741, 4)["ids"]
    assert res["long"]["ids"] == cold(whole, 300, 25742, 4)["ids"]
    assert_idle(s)

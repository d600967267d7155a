"""A prompt that can never fit in the KV pool is rejected up front, before any forward.

Found by hand: ``--max-total-tokens 2048`` with a 2100-token prompt ran a 2048-token prefill
(3.5 s on CPU, evicting the whole radix cache) and only then failed with "The KV cache pool is
too small for this request."; ``/server_info`` advertised ``max_req_input_len=65535``. SGLang
bounds the prompt by both limits: ``max_req_input_len = min(context_len, max_total_num_tokens) - 1``.
The oracle here is that formula and the pool size set on the command line.
"""

from __future__ import annotations

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, make_scheduler, submit
from sglang_v4.server_args import ServerArgs


def test_prompt_larger_than_pool_rejected_without_forward(sched_model_dir: str) -> None:
    s = make_scheduler(sched_model_dir, max_total_tokens=2 * PAGE, context_length=4096)
    assert s.max_total_num_tokens == 2 * PAGE
    # the advertised prompt limit takes the pool into account (SGLang's formula)
    assert s.max_req_input_len == min(s.context_len, s.max_total_num_tokens) - 1 == 2 * PAGE - 1
    submit(s, "big", random_ids(2 * PAGE + 50, 1), 4)
    out = s.step()
    assert s.forward_ct == 0, "the request was prefilled before being rejected"
    assert out is not None and out.rids == ["big"]
    fin = out.finished_reasons[0]
    assert fin["type"] == "abort" and fin.get("status_code") == 400
    assert "KV" in fin["message"] and str(2 * PAGE) in fin["message"]
    assert not s.has_work()
    # the largest prompt that fits still runs to completion
    submit(s, "fits", random_ids(2 * PAGE - 1, 2), 1)
    res_fin = None
    for _ in range(100):
        if not s.has_work():
            break
        o = s.step()
        if o is not None and o.rids:
            res_fin = o.finished_reasons[-1]
    assert res_fin is not None and res_fin["type"] == "length"


def test_max_total_tokens_rounds_down_to_whole_pages(sched_model_dir: str) -> None:
    """``--max-total-tokens`` not a page multiple: the pool is the whole pages below it, as SGLang
    rounds its token budget (``max_total_num_tokens // page_size * page_size``); before, the pool
    was rounded up to the next page (a pool larger than the flag). A value below one page is a
    start-up error naming the flag."""
    for given in (2 * PAGE + 1, 3 * PAGE - 1):
        s = make_scheduler(sched_model_dir, max_total_tokens=given)
        assert s.max_total_num_tokens == given // PAGE * PAGE == 2 * PAGE
        assert s.get_metrics()["max_total_num_tokens"] == 2 * PAGE
        assert s.max_req_input_len == 2 * PAGE - 1
    with pytest.raises(ValueError, match=r"max_total_tokens \(--max-total-tokens\).*one page"):
        ServerArgs(device="cpu", max_total_tokens=PAGE - 1)


def test_mem_fraction_static_on_cpu_is_said_to_be_unused(sched_model_dir: str, caplog) -> None:  # type: ignore[no-untyped-def]
    """``--mem-fraction-static`` sizes the pool from free GPU memory (SGLang's meaning); on the CPU
    the pool is ``--max-total-tokens`` whatever it says, and the start-up log says so."""
    import logging

    with caplog.at_level(logging.WARNING, logger="sglang_v4.model_executor.model_runner"):
        s = make_scheduler(sched_model_dir, max_total_tokens=2 * PAGE, mem_fraction_static=0.3)
    assert s.max_total_num_tokens == 2 * PAGE
    msgs = [r.getMessage() for r in caplog.records]
    assert any(
        "--mem-fraction-static 0.3 is not used on cpu" in m and "--max-total-tokens" in m for m in msgs
    ), msgs


def test_requests_that_fit_one_at_a_time_queue_and_all_complete(sched_model_dir: str) -> None:
    """``--max-total-tokens 512`` (two pages) with three requests of 300 + 20 tokens (two pages
    each) and ``--chunked-prefill-size 100`` (not a multiple of the page): none is refused, they
    take turns, and each one's greedy output equals its cold run alone on a large pool."""
    from scheduler_testutil import drain, run_one

    prompts = {f"r{i}": random_ids(300, 60 + i) for i in range(3)}
    s = make_scheduler(sched_model_dir, max_total_tokens=2 * PAGE, chunked_prefill_size=100)
    for rid, ids in prompts.items():
        submit(s, rid, ids, 20)
    got = drain(s)
    cold_sched = make_scheduler(sched_model_dir, disable_radix_cache=True)
    for rid, ids in prompts.items():
        assert got[rid]["finish"] == {"type": "length", "length": 20}, got[rid]["finish"]
        assert got[rid]["ids"] == run_one(cold_sched, rid, ids, 20)["ids"], rid


def test_max_queued_requests_refuses_with_503(sched_model_dir: str) -> None:
    """SGLang's ``--max-queued-requests N``: a request arriving when N wait is aborted with 503 "The
    request queue is full."; with priority scheduling a strictly preferred arrival pushes out the
    least preferred queued request (the newest of equals) instead. The others complete."""
    from scheduler_testutil import drain

    s = make_scheduler(sched_model_dir, max_queued_requests=2, max_running_requests=1)
    for i in range(4):
        submit(s, f"r{i}", random_ids(20, 70 + i), 2)
    got = drain(s)
    full = {"type": "abort", "message": "The request queue is full.", "status_code": 503, "err_type": None}
    assert got["r2"]["finish"] == full and got["r3"]["finish"] == full
    assert got["r0"]["finish"]["type"] == got["r1"]["finish"]["type"] == "length"
    s = make_scheduler(
        sched_model_dir, max_queued_requests=2, max_running_requests=1, enable_priority_scheduling=True
    )
    for rid, prio in (("low-old", 1), ("low-new", 1), ("high", 5), ("equal", 1)):
        submit(s, rid, random_ids(20, 80), 2, priority=prio)
    got = drain(s)
    assert got["low-new"]["finish"]["message"] == "The request is aborted by a higher priority request."
    assert got["equal"]["finish"] == full  # not strictly preferred to what waits: refused itself
    assert got["high"]["finish"]["type"] == got["low-old"]["finish"]["type"] == "length"
    with pytest.raises(ValueError, match="max_queued_requests"):
        ServerArgs(device="cpu", max_queued_requests=0)


def test_health_probe_to_a_busy_scheduler_is_answered_by_its_next_batch(sched_model_dir: str) -> None:
    """``/health_generate``'s probe reaching a busy scheduler (here ``--max-running-requests 1``,
    one long request running) is answered, without a token, once the next batch result is
    processed, not queued behind the work: a long queue must not make a healthy server look dead
    (SGLang's scheduler answers it the same way). The running request is untouched (its greedy
    tokens equal its cold run), and an idle scheduler runs the probe as a request (one token).
    Before, the probe waited for the long request and ``/health_generate`` timed out with 503."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import drain, run_one
    from sglang_v4.managers.io_struct import HEALTH_CHECK_RID_PREFIX

    ids = random_ids(40, 7)
    cold = run_one(make_scheduler(sched_model_dir), "long", ids, 30)["ids"]
    s = make_scheduler(sched_model_dir, max_running_requests=1)
    submit(s, "long", ids, 30)
    s.step()
    probe = f"{HEALTH_CHECK_RID_PREFIX}_busy"
    submit(s, probe, [0], 1, health_check=True)
    res: dict[str, dict] = {}
    for _ in range(3):
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            res.setdefault(rid, []).append((list(out.output_ids[i]), out.finished_reasons[i]))
    assert probe in res, "the probe was not answered while the scheduler was busy"
    assert res[probe][-1][1] is not None and sum(len(o) for o, _ in res[probe]) == 0
    assert res.get("long", [([], None)])[-1][1] is None  # still running
    rest = drain(s)
    assert sum((o for o, _ in res.get("long", [])), []) + rest["long"]["ids"] == cold
    idle = run_one(s, f"{HEALTH_CHECK_RID_PREFIX}_idle", [0], 1, health_check=True)
    assert len(idle["ids"]) == 1 and idle["finish"]["type"] == "length"

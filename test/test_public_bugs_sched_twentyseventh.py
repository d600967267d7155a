"""Scheduler regressions from public SGLang / vLLM reports (twenty-seventh round): priority
preemption (the preempted request resumes with its cold output; one blocked request preempts only
as many running requests as it needs), ``lpm`` against ``fcfs`` admission order, a decoding request beside a chunked long prompt (one token
every step, no step lost to the prefill), prompts just over one chunk with the radix cache off,
retraction on a tight pool with the radix cache off, and SGLang's deprecated millisecond names of
the request timeouts.

Every test drives an in-process :class:`~sglang_v4.managers.scheduler.Scheduler` on the shared
random checkpoint (``sched_model_dir``). Oracles: cold runs (each prompt alone on a roomy scheduler
with a fresh cache), the pool sizes and priorities set in the test's own arguments, the allocators'
counters after a flush, and the millisecond-to-second conversion the report states.

Fault found here and fixed: SGLang's earlier names of the request timeouts,
``SGLANG_QUEUED_TIMEOUT_MS`` / ``SGLANG_FORWARD_TIMEOUT_MS`` (milliseconds), which SGLang still
honours after the rename with a deprecation warning, were ignored: a deployment that set them got
no timeout at all; and the start-up warning about SGLang variables "set but not read" named the
timeout variables the scheduler does read (``SGLANG_REQ_WAITING_TIMEOUT`` /
``SGLANG_REQ_RUNNING_TIMEOUT``).
"""

from __future__ import annotations

import logging

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, submit
from sglang_v4.managers.request_timeouts import (
    RUNNING_TIMEOUT_ENV,
    RUNNING_TIMEOUT_MSG,
    WAITING_TIMEOUT_ENV,
    WAITING_TIMEOUT_MSG,
    abort_timed_out,
    limit_seconds,
)
from sglang_v4.managers.scheduler import Scheduler

pytestmark = pytest.mark.timeout(120)

N = 6


@pytest.fixture(scope="module")
def roomy(sched_model_dir: str) -> Scheduler:
    """The default chunking and a 32-page pool: the cold-run scheduler."""
    return make_scheduler(sched_model_dir)


_COLD: dict[tuple[int, int, int], list[int]] = {}


def cold(roomy: Scheduler, n_prompt: int, seed: int, n: int = N) -> list[int]:
    """Greedy output ids of ``random_ids(n_prompt, seed)`` run alone on a flushed roomy scheduler."""
    key = (n_prompt, seed, n)
    if key not in _COLD:
        assert roomy.flush_cache()
        submit(roomy, "cold", random_ids(n_prompt, seed), n)
        _COLD[key] = drain(roomy)["cold"]["ids"]
        assert roomy.flush_cache()
    return _COLD[key]


def _step_into(s: Scheduler, res: dict[str, dict]) -> set[str]:
    """One step; its outputs added to ``res``; returns the rids that got output ids this step."""
    out = s.step()
    got: set[str] = set()
    for i, rid in enumerate(out.rids if out else []):
        r = res.setdefault(rid, {"ids": [], "finish": None})
        r["ids"] += out.output_ids[i]
        r["finish"] = out.finished_reasons[i]
        if out.output_ids[i]:
            got.add(rid)
    return got


# --------------------------------------------------------------------------- priority preemption


def test_preempted_low_priority_request_resumes_with_cold_output(
    sched_model_dir: str, roomy: Scheduler
) -> None:
    """vllm-project/vllm#26661 (fixing #23316): a low-priority request preempted by priority
    scheduling kept stale per-step block bookkeeping, and when it was scheduled again its block
    table started past index 0 (out of range). Expected: with one running slot, a request of much
    higher priority preempts the running low-priority one; both finish with ``length`` and their
    cold outputs (the preempted one resumes where it was), and no page is leaked."""
    s = make_scheduler(sched_model_dir, enable_priority_scheduling=True, max_running_requests=1)
    low, high = random_ids(200, 2701), random_ids(120, 2702)
    submit(s, "low", low, 12, priority=0)
    res: dict[str, dict] = {}
    for _ in range(3):
        _step_into(s, res)
    assert len(res["low"]["ids"]) >= 1
    submit(s, "high", high, N, priority=100)
    for _ in range(20_000):
        if not s.has_work():
            break
        _step_into(s, res)
    assert s.num_retractions >= 1
    assert res["high"]["ids"] == cold(roomy, 120, 2702)
    assert res["low"]["ids"] == cold(roomy, 200, 2701, 12)
    assert res["low"]["finish"]["type"] == res["high"]["finish"]["type"] == "length"
    assert_idle(s)


def test_one_blocked_request_preempts_only_one_running_request(
    sched_model_dir: str, roomy: Scheduler
) -> None:
    """sgl-project/sglang#12494 (issue #12493): priority preemption kept removing running
    requests after the blocked request's needs were met, preempting more than necessary.
    Expected: two low-priority requests fill the two running slots; one high-priority arrival
    needs one slot, so exactly one of them is preempted; all three end with their cold outputs."""
    s = make_scheduler(sched_model_dir, enable_priority_scheduling=True, max_running_requests=2)
    a, b, h = random_ids(100, 2711), random_ids(110, 2712), random_ids(90, 2713)
    submit(s, "a", a, 10, priority=0)
    submit(s, "b", b, 10, priority=0)
    res: dict[str, dict] = {}
    for _ in range(3):
        _step_into(s, res)
    assert len(s.running) == 2
    submit(s, "h", h, N, priority=100)
    for _ in range(20_000):
        if not s.has_work():
            break
        _step_into(s, res)
    assert s.num_retractions == 1
    assert res["h"]["ids"] == cold(roomy, 90, 2713)
    assert res["a"]["ids"] == cold(roomy, 100, 2711, 10)
    assert res["b"]["ids"] == cold(roomy, 110, 2712, 10)
    assert_idle(s)


# --------------------------------------------------------------------------- lpm


@pytest.mark.parametrize(
    ("policy", "radix_off", "first"), [("lpm", False, "hot"), ("fcfs", False, "cold"), ("lpm", True, "cold")]
)
def test_lpm_admits_the_cached_prefix_first(
    sched_model_dir: str, roomy: Scheduler, policy: str, radix_off: bool, first: str
) -> None:
    """sgl-project/sglang#31954 (and #31723) describe SGLang's ``lpm``: the waiting queue is
    sorted by matched-prefix length, so a cache-hot request is admitted before an earlier
    cache-cold one; ``fcfs`` keeps arrival order, and (SGLang's rule) a cache-aware policy orders
    first come first served when the radix cache is off. Expected, with one running slot and a
    cached 256-token block: under ``lpm`` the later request sharing that block is admitted first,
    under ``fcfs`` (or ``lpm`` without the radix cache) the earlier cold one is; both end with
    their cold outputs either way."""
    s = make_scheduler(
        sched_model_dir, schedule_policy=policy, max_running_requests=1, disable_radix_cache=radix_off
    )
    warm = random_ids(300, 2761)
    submit(s, "warm", warm, 2)
    drain(s)
    hot = warm[:PAGE] + random_ids(40, 2762)
    submit(s, "cold", random_ids(296, 2763), 2)
    submit(s, "hot", hot, 2)
    s.step()
    assert [r.rid for r in s.running] == [first]
    res = drain(s)
    assert res["cold"]["ids"] == cold(roomy, 296, 2763, 2)
    assert res["hot"]["ids"] == _cold_ids(roomy, hot, 2)
    assert res["hot"]["cached"] == (0 if radix_off else PAGE)
    assert_idle(s)


def _cold_ids(roomy: Scheduler, ids: list[int], n: int) -> list[int]:
    """Greedy output ids of ``ids`` run alone on a flushed roomy scheduler."""
    assert roomy.flush_cache()
    submit(roomy, "cold-ids", ids, n)
    out = drain(roomy)["cold-ids"]["ids"]
    assert roomy.flush_cache()
    return out


# --------------------------------------------------------------------------- chunked prefill


def test_decoding_request_gets_a_token_every_step_beside_a_chunked_prompt(
    sched_model_dir: str, roomy: Scheduler
) -> None:
    """sgl-project/sglang#2158 (mixed chunked prefill, "fix the one token delay"; first fixed in
    #1850): when a decode batch was mixed with a prompt chunk, the decoding requests lost a step.
    Expected: while a 700-token prompt is prefilled in 256-token chunks beside a decoding
    request, that request gets exactly one new token in every step until it finishes, and both
    outputs equal their cold runs."""
    s = make_scheduler(sched_model_dir, chunked_prefill_size=PAGE)
    submit(s, "dec", random_ids(60, 2721), 8, stream=True)
    res: dict[str, dict] = {}
    while "dec" not in res:  # "dec" prefilled: its first token out
        _step_into(s, res)
    submit(s, "long", random_ids(700, 2722), 2)
    per_step: list[int] = []
    while res["dec"]["finish"] is None:
        before = len(res["dec"]["ids"])
        _step_into(s, res)
        per_step.append(len(res["dec"]["ids"]) - before)
    assert per_step and all(n == 1 for n in per_step), per_step
    drain_res = drain(s)
    res["long"]["ids"] = res.get("long", {"ids": []})["ids"] + drain_res.get("long", {"ids": []})["ids"]
    assert res["dec"]["ids"] == cold(roomy, 60, 2721, 8)
    assert res["long"]["ids"] == cold(roomy, 700, 2722, 2)
    assert_idle(s)


def test_prompts_just_over_one_chunk_without_radix_cache(sched_model_dir: str, roomy: Scheduler) -> None:
    """sgl-project/sglang#2255: ``--chunked-prefill-size 2048 --disable-radix-cache`` with many
    2064-token prompts (just over one chunk) tripped ``assert self.being_chunked_req is None``
    and killed the scheduler. Scaled to this checkpoint: 264-token prompts with 256-token
    chunks and the radix cache off (two at once) all finish with their cold outputs, and nothing leaks."""
    s = make_scheduler(sched_model_dir, chunked_prefill_size=PAGE, disable_radix_cache=True)
    seeds = range(2731, 2733)
    for seed in seeds:
        submit(s, f"r{seed}", random_ids(PAGE + 8, seed), N)
    res = drain(s)
    for seed in seeds:
        assert res[f"r{seed}"]["ids"] == cold(roomy, PAGE + 8, seed), seed
        assert res[f"r{seed}"]["finish"]["type"] == "length"
    assert_idle(s)


# --------------------------------------------------------------------------- retraction


@pytest.mark.slow  # retraction with cold outputs is also checked by test_scheduler_core
def test_retraction_without_radix_cache_frees_enough_pages(sched_model_dir: str, roomy: Scheduler) -> None:
    """sgl-project/sglang#9982 (fixed by #9989): with ``page_size > 1`` a retraction freed fewer
    pages than it counted on, so decode ran out of memory again right after. Here pages are 256
    tokens, the radix cache is off and three requests each grow past a page on a 5-page pool:
    retraction happens, every request finishes with its cold output (the retracted one resumes),
    and the pool is whole afterwards."""
    s = make_scheduler(sched_model_dir, max_total_tokens=5 * PAGE, disable_radix_cache=True)
    prompts = {f"g{i}": (248, 2741 + i) for i in range(3)}
    for rid, (n, seed) in prompts.items():
        submit(s, rid, random_ids(n, seed), 10)
    res = drain(s)
    assert s.num_retractions > 0
    for rid, (n, seed) in prompts.items():
        assert res[rid]["ids"] == cold(roomy, n, seed, 10), rid
        assert res[rid]["finish"]["type"] == "length"
    assert_idle(s)


# --------------------------------------------------------------------------- request timeouts


@pytest.mark.parametrize(
    ("old", "new"),
    [("SGLANG_QUEUED_TIMEOUT_MS", WAITING_TIMEOUT_ENV), ("SGLANG_FORWARD_TIMEOUT_MS", RUNNING_TIMEOUT_ENV)],
)
def test_deprecated_millisecond_timeout_names_are_honoured(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, old: str, new: str
) -> None:
    """sgl-project/sglang#18766: ``SGLANG_QUEUED_TIMEOUT_MS`` / ``SGLANG_FORWARD_TIMEOUT_MS``
    were renamed ``SGLANG_REQ_WAITING_TIMEOUT`` / ``SGLANG_REQ_RUNNING_TIMEOUT`` (seconds);
    "old env var names are still supported with a deprecation warning and automatic ms-to-seconds
    conversion". Expected: the old name alone at 2500 gives a 2.5 s limit and a warning naming
    both names; the new name, when set, wins."""
    monkeypatch.delenv(new, raising=False)
    monkeypatch.setenv(old, "2500")
    with caplog.at_level(logging.WARNING, logger="sglang_v4.managers.request_timeouts"):
        assert limit_seconds(new) == pytest.approx(2.5)
    assert any(old in r.getMessage() and new in r.getMessage() for r in caplog.records)
    monkeypatch.setenv(new, "7")
    assert limit_seconds(new) == pytest.approx(7.0)


def test_deprecated_queued_timeout_aborts_a_queued_request(
    sched_model_dir: str, roomy: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sgl-project/sglang#17143 with its original variable (``SGLANG_QUEUED_TIMEOUT_MS``, kept by
    #18766): with one running slot, a request queued longer than the limit is aborted with 503
    "Request waiting timeout reached." before the next batch, while the running request finishes
    with its cold output; with ``SGLANG_FORWARD_TIMEOUT_MS`` a request running past its limit is
    aborted the same way with "Request running timeout reached."."""
    monkeypatch.delenv(WAITING_TIMEOUT_ENV, raising=False)
    monkeypatch.delenv(RUNNING_TIMEOUT_ENV, raising=False)
    monkeypatch.setenv("SGLANG_QUEUED_TIMEOUT_MS", "5000")
    monkeypatch.delenv("SGLANG_FORWARD_TIMEOUT_MS", raising=False)
    s = make_scheduler(sched_model_dir, max_running_requests=1)
    submit(s, "a", random_ids(80, 2751), N)
    res: dict[str, dict] = {}
    _step_into(s, res)
    submit(s, "b", random_ids(70, 2752), N)
    s.waiting[0].arrival -= 6.0  # queued 6 s: past 5000 ms
    assert abort_timed_out(s) == 1
    res_b = drain(s)
    fin = res_b["b"]["finish"]
    assert fin["type"] == "abort" and fin["message"] == WAITING_TIMEOUT_MSG and fin["status_code"] == 503
    assert res.get("a", {"ids": []})["ids"] + res_b["a"]["ids"] == cold(roomy, 80, 2751)
    assert_idle(s)

    monkeypatch.delenv("SGLANG_QUEUED_TIMEOUT_MS")
    monkeypatch.setenv("SGLANG_FORWARD_TIMEOUT_MS", "5000")
    submit(s, "c", random_ids(80, 2753), 40)
    res = {}
    _step_into(s, res)
    assert abort_timed_out(s) == 0  # starts the running clock
    s.running[0].running_since -= 6.0
    assert abort_timed_out(s) == 1
    fin = drain(s)["c"]["finish"]
    assert fin["type"] == "abort" and fin["message"] == RUNNING_TIMEOUT_MSG and fin["status_code"] == 503
    assert_idle(s)


def test_timeout_variables_are_not_called_unread_at_start_up() -> None:
    """sgl-project/sglang#18766 (the variables it names, old and new): the start-up warning that
    lists SGLang environment variables set but not read must not name a variable the scheduler
    does read, or an operator removes a working timeout. Expected: with the four timeout
    variables and one kernel switch set, only the kernel switch is called unread."""
    from sglang_v4.managers.request_timeouts import DEPRECATED_MS_ENV
    from sglang_v4.server_args_compat import unread_sglang_env

    env = {name: "5" for name in (WAITING_TIMEOUT_ENV, RUNNING_TIMEOUT_ENV, *DEPRECATED_MS_ENV.values())}
    env["SGL_ENABLE_JIT_DEEPGEMM"] = "1"
    assert len(env) == 5
    assert unread_sglang_env(env) == ["SGL_ENABLE_JIT_DEEPGEMM"]

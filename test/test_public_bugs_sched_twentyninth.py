"""Scheduler regressions from public SGLang / vLLM / other serving reports (twenty-ninth round):
an abort of a request in the middle of its chunked prefill, a prefix hit that leaves a long
prompt's remainder inside one chunk, several long prompts chunked on a small chunk size at once,
``--max-queued-requests`` refusals (and an abort of a refused request), and an abort of a queued
request beside running ones.

Every test drives an in-process :class:`~sglang_v4.managers.scheduler.Scheduler` on the shared
random checkpoint (``sched_model_dir``, CPU, float32, 256-token pages, greedy). Oracles: cold runs
(each prompt alone on a flushed scheduler that prefills it in one piece), SGLang's finish reasons
and status codes as its source states them, the hit sizes derived by hand, and the allocators'
counters after a flush.
"""

from __future__ import annotations

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, collect_outputs, drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

pytestmark = pytest.mark.timeout(120)

N = 4


@pytest.fixture(scope="module")
def whole(sched_model_dir: str) -> Scheduler:
    """Prompts prefilled in one piece on a 16-page pool: the cold-run scheduler."""
    return make_scheduler(
        sched_model_dir,
        max_total_tokens=16 * PAGE,
        chunked_prefill_size=16 * PAGE,
        disable_overlap_schedule=True,
    )


@pytest.fixture(scope="module")
def chunked(sched_model_dir: str) -> Scheduler:
    """256-token prefill chunks on a 16-page pool."""
    return make_scheduler(
        sched_model_dir, max_total_tokens=16 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )


_COLD: dict[tuple[int, int], list[int]] = {}


def cold(whole: Scheduler, n_prompt: int, seed: int) -> list[int]:
    """Greedy output ids of ``random_ids(n_prompt, seed)`` alone on a flushed ``whole``."""
    key = (n_prompt, seed)
    if key not in _COLD:
        assert whole.flush_cache()
        submit(whole, "cold", random_ids(n_prompt, seed), N)
        _COLD[key] = drain(whole)["cold"]["ids"]
        assert whole.flush_cache()
    return _COLD[key]


def _run(s: Scheduler, res: dict[str, dict], max_steps: int = 500) -> None:
    for _ in range(max_steps):
        if not s.has_work():
            return
        collect_outputs(s.step(), res)
    raise AssertionError("scheduler did not finish")


def test_sglang_28086_abort_in_the_middle_of_a_chunked_prefill(whole: Scheduler, chunked: Scheduler) -> None:
    """sgl-project/sglang#28086 (an abort of the request being chunk-prefilled must tear it down
    at the next step: partial KV released, no further chunk run) and
    torch-spyre/sendnn-inference#577 (cancelling a large prefill during chunked prefill crashed
    the scheduler). A 900-token prompt (four 256-token chunks) is aborted after its first
    chunk, beside a short request: the long one finishes ``abort`` with no output token, the
    short one's tokens equal its cold run, and a flush then finds no page or slot in use."""
    assert chunked.flush_cache()
    submit(chunked, "long", random_ids(900, 28086), N)
    submit(chunked, "short", random_ids(40, 577), N)
    res: dict[str, dict] = {}
    collect_outputs(chunked.step(), res)
    assert "long" not in res or not res["long"]["ids"]
    chunked.abort_request("long")
    _run(chunked, res)
    assert res["long"]["ids"] == [] and res["long"]["finish"]["type"] == "abort"
    assert res["short"]["ids"] == cold(whole, 40, 577)
    assert_idle(chunked)


def test_mlxcel_183_a_hit_leaves_the_remainder_inside_one_chunk(whole: Scheduler, chunked: Scheduler) -> None:
    """lablup/mlxcel#183 (a prompt longer than the chunk size whose cached prefix covers all but
    a short suffix: the first chunk already reaches the prompt end, and continuing the chunked
    prefill ran an empty chunk and crashed). A 300-token prompt is run (caching its first
    256-token block); then the same prompt extended to 330 tokens hits ``floor(329 / 256) *
    256 = 256`` tokens, prefills its 74-token remainder in one chunk, and its tokens equal the
    330-token prompt's cold run."""
    base = random_ids(330, 183)
    assert chunked.flush_cache()
    submit(chunked, "first", base[:300], 1)
    drain(chunked)
    submit(chunked, "second", base, N)
    got = drain(chunked)["second"]
    assert got["cached"] == PAGE
    assert got["ids"] == cold(whole, 330, 183) and got["finish"]["type"] == "length"
    assert_idle(chunked)


def test_sglang_12676_several_long_prompts_on_a_small_chunk_size(
    whole: Scheduler, chunked: Scheduler
) -> None:
    """sgl-project/sglang#12676 (a small ``chunked_prefill_size`` tripped the scheduler's
    one-chunked-request assertion when several long prompts arrived together). Three prompts of
    600, 520 and 700 tokens arrive at once on 256-token chunks: each finishes ``length`` with
    its cold tokens, and a flush finds the pools empty."""
    specs = [(600, 1), (520, 2), (700, 3)]
    assert chunked.flush_cache()
    for n, seed in specs:
        submit(chunked, f"p{seed}", random_ids(n, 12676 + seed), N)
    res: dict[str, dict] = {}
    _run(chunked, res)
    for n, seed in specs:
        assert res[f"p{seed}"]["ids"] == cold(whole, n, 12676 + seed), (n, seed)
        assert res[f"p{seed}"]["finish"]["type"] == "length"
    assert_idle(chunked)


@pytest.fixture(scope="module")
def capped(sched_model_dir: str) -> Scheduler:
    """``--max-queued-requests 2``, ``--max-running-requests 1``."""
    return make_scheduler(
        sched_model_dir, max_queued_requests=2, max_running_requests=1, disable_overlap_schedule=True
    )


def test_sglang_7565_queue_limit_refuses_with_503_and_serves_the_rest(
    whole: Scheduler, capped: Scheduler
) -> None:
    """sgl-project/sglang#7565 (``--max-queued-requests``: a request arriving at a full waiting
    queue is refused at admission with 503, the queued ones are served) and ollama/ollama#7758
    (a queue limit that did not take effect). With a limit of 2 and one running slot, three
    requests arrive together: the third finishes ``abort`` with status 503 and no token, the
    first two finish ``length`` with their cold tokens, never more than one running at once;
    then sgl-project/sglang#14537 (handling a request the queue limit already refused crashed on
    missing state): aborting the refused rid afterwards changes nothing and the pools are empty."""
    assert capped.flush_cache()
    for i in range(3):
        submit(capped, f"q{i}", random_ids(30, 7565 + i), N)
    res: dict[str, dict] = {}
    for _ in range(500):
        if not capped.has_work():
            break
        collect_outputs(capped.step(), res)
        assert len(capped.running) <= 1
    assert not capped.has_work()
    fin = res["q2"]["finish"]
    assert res["q2"]["ids"] == [] and fin["type"] == "abort" and fin.get("status_code") == 503, fin
    for i in range(2):
        assert res[f"q{i}"]["ids"] == cold(whole, 30, 7565 + i) and res[f"q{i}"]["finish"]["type"] == "length"
    capped.abort_request("q2")
    assert not capped.has_work()
    assert_idle(capped)


def test_sglang_6931_abort_of_a_queued_request_leaves_the_running_one_alone(
    whole: Scheduler, capped: Scheduler
) -> None:
    """sgl-project/sglang#6931 (an abort of a request still in the waiting queue pops it without
    running anything for it and tells the client; SGLang's message ``"Abort in waiting
    queue"``). One running slot: ``a`` runs, ``b`` waits and is aborted after the first step:
    ``b`` finishes ``abort`` with that message and no token, ``a`` finishes with its cold
    tokens, and the pools end empty."""
    assert capped.flush_cache()
    submit(capped, "a", random_ids(30, 6931), N)
    submit(capped, "b", random_ids(30, 6932), N)
    res: dict[str, dict] = {}
    collect_outputs(capped.step(), res)
    assert [r.rid for r in capped.waiting] == ["b"]
    capped.abort_request("b")
    _run(capped, res)
    fin = res["b"]["finish"]
    assert res["b"]["ids"] == [] and fin["type"] == "abort" and fin["message"] == "Abort in waiting queue", (
        fin
    )
    assert res["a"]["ids"] == cold(whole, 30, 6931) and res["a"]["finish"]["type"] == "length"
    assert_idle(capped)

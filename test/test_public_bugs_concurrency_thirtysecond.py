"""Public reports on concurrency, replayed against sglang-v4 (round 32): the same prompt 32 times
at once (prefix sharing while copies finish at different steps), distinct prompts batched
together, an abort of a request still queued, an abort that races its own finish, an abort in the
middle of a chunked prefill, ``flush_cache`` racing with admissions, duplicate request ids sent at
the same time, an abort of a request still being tokenized, a batch ``/generate`` with one entry
aborted, a cancelled (timed-out) handler whose late output must not reach anyone else, and many
concurrent requests answered out of order (no cross-talk). Each test names its report.

Fixtures: an in-process CPU ``Scheduler`` over conftest's ``sched_model_dir`` checkpoint (sixteen
256-token pages, 256-token prefill chunks, no overlap), stepped by the test; and the in-process
``TokenizerManager`` of ``admin_app_testutil`` whose scheduler never answers: the test reads the
requests sent to the scheduler socket and answers them itself, in the order it chooses.

Oracles: cold runs of each prompt alone on a flushed cache, finish reasons and token counts
worked out by hand (SGLang's abort messages), the allocators' counters back to idle
(``assert_idle``), and the rids and texts the test itself fed back per request.

No fault was found by these reports; the tests guard the behaviour they ask for.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, cold_output_ids, drain, make_scheduler, step_outputs, submit

pytestmark = pytest.mark.timeout(300)

ABORT_IN_QUEUE = "Abort in waiting queue"  # SGLang's message for a queued request it aborts
ABORT_RUNNING = "Aborted"  # ... and for a running one


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """Sixteen block pages (4096 tokens), 256-token prefill chunks, no overlap."""
    return make_scheduler(
        sched_model_dir, max_total_tokens=16 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )


def _is_abort(finish: Any, message: str) -> bool:
    return isinstance(finish, dict) and finish.get("type") == "abort" and finish.get("message") == message


# --- scheduler level -----------------------------------------------------------------------------


def test_maclocal_api_140_same_prompt_32_times_with_early_finishers(sched: Any) -> None:
    """scouzi1966/maclocal-api#140 (at high concurrency, generations that finished early left
    their slot's state to corrupt the sequences still running: repeated-token garbage). The same
    300-token prompt sent 32 times at once, ``max_new_tokens`` cycling 1..8 so copies finish at
    different steps while the rest share the cached prefix: each copy's output must be the first
    ``n`` tokens of the prompt's cold run, with ``n`` completion tokens and finish ``length``; the
    pools are back to idle afterwards."""
    ids = random_ids(300, seed=3201)
    cold = cold_output_ids(sched, "cold", ids, 8)
    lengths = {f"s{i}": 1 + i % 8 for i in range(32)}
    for rid, n in lengths.items():
        submit(sched, rid, ids, n)
    res = drain(sched)
    assert set(res) == set(lengths)
    for rid, n in lengths.items():
        assert res[rid]["ids"] == cold[:n], rid
        assert res[rid]["completion"] == n
        assert res[rid]["finish"] == {"type": "length", "length": n}
    assert_idle(sched)


def test_vllm_27034_distinct_prompts_batched_equal_each_alone(sched: Any) -> None:
    """vllm-project/vllm#27034 (prompts that differ only in their last tokens gave other outputs
    when batched than when sent one at a time, with and without prefix caching). Three prompts
    sharing a 256-token prefix and each with its own 40-token tail, all submitted at once: each
    output equals that prompt's cold run alone."""
    prefix = random_ids(PAGE, seed=3202)
    prompts = {f"p{i}": prefix + random_ids(40, seed=3210 + i) for i in range(3)}
    cold = {rid: cold_output_ids(sched, f"cold-{rid}", ids, 6) for rid, ids in prompts.items()}
    for rid, ids in prompts.items():
        submit(sched, rid, ids, 6)
    res = drain(sched)
    assert {rid: r["ids"] for rid, r in res.items()} == cold
    assert_idle(sched)


def test_vllm_52969_abort_while_queued_never_scheduled(sched: Any) -> None:
    """vllm-project/vllm#52969 (a request aborted while still in the waiting queue, before it
    was ever scheduled, crashed the engine when the scheduler popped it). Three requests queued,
    the middle one aborted before any step: it ends with SGLang's ``"Abort in waiting queue"``,
    no output token and no completion token; the other two equal their cold runs; idle after."""
    a, b, c = (random_ids(100 + 30 * i, seed=3220 + i) for i in range(3))
    cold_a, cold_c = cold_output_ids(sched, "ca", a, 5), cold_output_ids(sched, "cc", c, 5)
    submit(sched, "qa", a, 5)
    submit(sched, "qb", b, 5)
    submit(sched, "qc", c, 5)
    sched.abort_request("qb")
    res = drain(sched)
    assert _is_abort(res["qb"]["finish"], ABORT_IN_QUEUE), res["qb"]["finish"]
    assert res["qb"]["ids"] == [] and res["qb"]["completion"] == 0
    assert res["qa"]["ids"] == cold_a and res["qc"]["ids"] == cold_c
    assert_idle(sched)


def test_sglang_21257_abort_after_finish_is_a_no_op(sched: Any) -> None:
    """sgl-project/sglang#21257 (an abort that arrived after its request had finished and been
    cleaned up raised a ``KeyError`` and took the event loop down). A 2-token request finishes
    while a 10-token one runs; aborting the finished rid (and an unknown one) then changes
    nothing: no second output for it, the running request equals its cold run, idle after."""
    a, b = random_ids(90, seed=3230), random_ids(120, seed=3231)
    cold_b = cold_output_ids(sched, "cb", b, 10)
    submit(sched, "fa", a, 2)
    submit(sched, "fb", b, 10)
    seen: dict[str, dict] = {}
    for _ in range(50):
        for rid, r in step_outputs(sched, 1).items():
            seen.setdefault(rid, {"ids": []})["ids"] += r["ids"]
            seen[rid]["finish"] = r["finish"]
        if seen.get("fa", {}).get("finish") is not None:
            break
    assert seen["fa"]["finish"] == {"type": "length", "length": 2}
    assert seen.get("fb", {}).get("finish") is None  # still running: the race's other side
    sched.abort_request("fa")
    sched.abort_request("never-sent")
    rest = drain(sched)
    assert "fa" not in rest and "never-sent" not in rest
    assert seen["fb"]["ids"] + rest["fb"]["ids"] == cold_b
    assert rest["fb"]["finish"] == {"type": "length", "length": 10}
    assert_idle(sched)


def test_sglang_jax_984_abort_mid_chunked_prefill_frees_its_pages(sched: Any) -> None:
    """sgl-project/sglang-jax#984 (an abort that landed while a request was in the middle of a
    chunked prefill left its KV pages held: a later memory check found them leaked). A 700-token
    prompt (three 256-token chunks) aborted after its first chunk: it ends aborted with no output
    token, every page is free again, and the same prompt run afterwards equals its cold run (no
    half-written block was left in the cache)."""
    ids = random_ids(700, seed=3240)
    cold = cold_output_ids(sched, "cold", ids, 4)
    submit(sched, "chunky", ids, 4)
    assert step_outputs(sched, 1) == {}  # one chunk done, nothing to report yet
    sched.abort_request("chunky")
    res = drain(sched)
    finish = res["chunky"]["finish"]
    assert _is_abort(finish, ABORT_RUNNING) or _is_abort(finish, ABORT_IN_QUEUE), finish
    assert res["chunky"]["ids"] == []
    assert_idle(sched)
    submit(sched, "again", ids, 4)
    assert drain(sched)["again"]["ids"] == cold
    assert_idle(sched)


def test_sglang_jax_384_flush_cache_racing_admissions(sched: Any) -> None:
    """sgl-project/sglang-jax#384 (``/flush_cache`` sent while the server was serving raised an
    error inside the server). A flush between steps while one request runs and another has just
    been queued is refused (``False``: a request holds KV), and neither request is disturbed:
    both equal their cold runs; once idle the flush succeeds and every page is free."""
    a, b = random_ids(300, seed=3250), random_ids(300, seed=3251)
    cold_a, cold_b = cold_output_ids(sched, "ca", a, 6), cold_output_ids(sched, "cb", b, 6)
    submit(sched, "ra", a, 6)
    got = step_outputs(sched, 2)
    submit(sched, "rb", b, 6)
    assert sched.flush_cache() is False
    got2 = step_outputs(sched, 1)
    assert sched.flush_cache() is False
    rest = drain(sched)
    ids_a = (
        got.get("ra", {"ids": []})["ids"]
        + got2.get("ra", {"ids": []})["ids"]
        + rest.get("ra", {"ids": []})["ids"]
    )
    ids_b = got2.get("rb", {"ids": []})["ids"] + rest.get("rb", {"ids": []})["ids"]
    assert ids_a == cold_a and ids_b == cold_b
    assert_idle(sched)


# --- tokenizer manager level (the test answers for the scheduler) ----------------------------------


@pytest.fixture(scope="module")
def tm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The ``TokenizerManager`` of ``admin_app_testutil`` (its scheduler never answers)."""
    from admin_app_testutil import admin_app_client

    with admin_app_client(tmp_path_factory.mktemp("conc32"), openai_routes=False) as (_, manager):
        yield manager


@pytest.fixture
def sent(tm: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Everything ``tm`` sends to the scheduler from now on (it is still sent)."""
    out: list[Any] = []
    send = tm._send.send_pyobj
    monkeypatch.setattr(tm._send, "send_pyobj", lambda o, *a, **k: (out.append(o), send(o, *a, **k))[1])
    return out


def _answer(rid: str, text: str, finish: dict[str, Any] | None = None) -> Any:
    """A finished detokenizer message for ``rid`` whose whole output is ``text`` (one token)."""
    from sglang_v4.managers.io_struct import BatchStrOut

    return BatchStrOut(
        rids=[rid],
        finished_reasons=[finish or {"type": "length", "length": 1}],
        output_strs=[text],
        final_strs=[text],
        output_ids=[[1]],
        prompt_tokens=[3],
        completion_tokens=[1],
        cached_tokens=[0],
        time_stats=[None],
        detokenizer_ts=0.0,
    )


def _gen(tm: Any, body: dict[str, Any]) -> Any:
    from sglang_v4.entrypoints.native_api import parse_generate_body

    return tm.generate_request(parse_generate_body(body))


async def _first(tm: Any, body: dict[str, Any]) -> Any:
    """The first (here: only) output of ``body``; closes the generator after."""
    g = _gen(tm, body)
    try:
        return await g.__anext__()
    finally:
        await g.aclose()


def _generated(sent: list[Any]) -> list[Any]:
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput

    return [o for o in sent if isinstance(o, TokenizedGenerateReqInput)]


def _aborts(sent: list[Any]) -> list[str]:
    from sglang_v4.managers.io_struct import AbortReq

    return [o.rid for o in sent if isinstance(o, AbortReq)]


async def _until(cond: Any, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.005)


def test_mcp_python_sdk_3060_duplicate_rids_at_once_do_not_cross_wire(tm: Any, sent: list[Any]) -> None:
    """modelcontextprotocol/python-sdk#3060 (two concurrent requests with the same id
    cross-wired: the later one received the earlier one's payload and the earlier one hung).
    Two ``/generate`` with ``rid`` ``dup`` started at the same time: exactly one reaches the
    scheduler, the other is refused with a 400 naming the duplicate id, and the one sent gets
    exactly the answer fed back for it."""
    from sglang_v4.managers.tokenization import RequestError

    async def main() -> list[Any]:
        body = {"text": "same", "rid": "dup", "sampling_params": {"max_new_tokens": 1}}
        tasks = [asyncio.ensure_future(_first(tm, body)) for _ in range(2)]
        await _until(lambda: len(_generated(sent)) == 1 and any(t.done() for t in tasks))
        tm._handle_batch_output(_answer("dup", "only-answer"))
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(asyncio.wait_for(main(), 30))
    errors = [r for r in results if isinstance(r, Exception)]
    outs = [r for r in results if not isinstance(r, Exception)]
    assert len(errors) == 1 and len(outs) == 1, results
    assert isinstance(errors[0], RequestError) and errors[0].status_code == 400
    assert "dup" in str(errors[0])
    assert outs[0]["text"] == "only-answer" and outs[0]["meta_info"]["id"] == "dup"
    assert len(_generated(sent)) == 1 and not tm.rid_to_state


def test_sglang_34894_abort_while_tokenizing_is_never_sent(tm: Any, sent: list[Any]) -> None:
    """sgl-project/sglang#34894 (an abort that reached the tokenizer manager before the request
    was handed to the scheduler was dropped, and the request then ran to the end). ``abort_request``
    named while the prompt is still being tokenized: the request is never sent to the scheduler and
    ends as SGLang's queued abort (``"Abort in waiting queue"``, no completion token); a request
    sent afterwards is unaffected."""

    async def main() -> tuple[Any, Any]:
        body = {"text": "word " * 3000, "rid": "tok-abort", "sampling_params": {"max_new_tokens": 4}}
        task = asyncio.ensure_future(_first(tm, body))
        await _until(lambda: "tok-abort" in tm.admitting.rids())
        tm.abort_request("tok-abort")
        out = await task
        task2 = asyncio.ensure_future(_first(tm, {"text": "next", "rid": "after", "sampling_params": {}}))
        await _until(lambda: any(g.rid == "after" for g in _generated(sent)))
        tm._handle_batch_output(_answer("after", "fine"))
        return out, await task2

    out, after = asyncio.run(asyncio.wait_for(main(), 30))
    assert "tok-abort" not in {g.rid for g in _generated(sent)}
    assert _is_abort(out["meta_info"]["finish_reason"], ABORT_IN_QUEUE), out["meta_info"]
    assert out["meta_info"]["completion_tokens"] == 0
    assert after["text"] == "fine" and not tm.rid_to_state


def test_sglang_6184_batch_with_one_entry_aborted(tm: Any, sent: list[Any]) -> None:
    """sgl-project/sglang#6184 (request abortion dropped the request's state too early, so an
    aborted entry's final output had nowhere to go). A batch ``/generate`` of three prompts with
    rids ``b0..b2``; ``b1`` is aborted while all three run: an ``AbortReq`` for ``b1`` (only) goes
    to the scheduler, whose abort answer reaches entry 1, while entries 0 and 2 get the texts fed
    back for them, in the batch's order."""

    async def main() -> Any:
        body = {
            "text": ["x0", "x1", "x2"],
            "rid": ["b0", "b1", "b2"],
            "sampling_params": {"max_new_tokens": 2},
        }
        task = asyncio.ensure_future(_first(tm, body))
        await _until(lambda: len(_generated(sent)) == 3)
        tm.abort_request("b1")
        assert _aborts(sent) == ["b1"]
        tm._handle_batch_output(_answer("b2", "two"))
        tm._handle_batch_output(_answer("b1", "", {"type": "abort", "message": ABORT_RUNNING}))
        tm._handle_batch_output(_answer("b0", "zero"))
        return await task

    out = asyncio.run(asyncio.wait_for(main(), 30))
    assert [o["meta_info"]["id"] for o in out] == ["b0", "b1", "b2"]
    assert out[0]["text"] == "zero" and out[2]["text"] == "two"
    assert _is_abort(out[1]["meta_info"]["finish_reason"], ABORT_RUNNING)
    assert not tm.rid_to_state


def test_ledge_199_timed_out_request_output_goes_to_nobody_else(tm: Any, sent: list[Any]) -> None:
    """ledgetech/ledge#199 (after one request timed out, its late response was delivered to a
    different request). A handler waiting on rid ``slow`` is cancelled (``asyncio`` timeout): an
    ``AbortReq`` for it is sent. A new request reusing ``slow`` is held back until the old one's
    late final output arrives, that output reaches no one, and the new request then gets its own
    answer; a concurrent request ``other`` is answered with its own text throughout."""

    async def main() -> tuple[Any, Any]:
        slow = asyncio.ensure_future(_first(tm, {"text": "a", "rid": "slow", "sampling_params": {}}))
        other = asyncio.ensure_future(_first(tm, {"text": "b", "rid": "other", "sampling_params": {}}))
        await _until(lambda: len(_generated(sent)) == 2)
        slow.cancel()
        await asyncio.gather(slow, return_exceptions=True)
        assert "slow" in _aborts(sent) and "slow" in tm.abandoned
        retry = asyncio.ensure_future(_first(tm, {"text": "c", "rid": "slow", "sampling_params": {}}))
        await asyncio.sleep(0.1)
        assert len(_generated(sent)) == 2  # held until the old request's final output
        tm._handle_batch_output(_answer("slow", "LATE", {"type": "abort", "message": ABORT_RUNNING}))
        await _until(lambda: len(_generated(sent)) == 3)
        tm._handle_batch_output(_answer("other", "for-other"))
        tm._handle_batch_output(_answer("slow", "for-retry"))
        return await other, await retry

    other, retry = asyncio.run(asyncio.wait_for(main(), 30))
    assert other["text"] == "for-other" and other["meta_info"]["id"] == "other"
    assert retry["text"] == "for-retry" and retry["meta_info"]["finish_reason"]["type"] == "length"
    assert not tm.rid_to_state and "slow" not in tm.abandoned


def test_http_kit_361_many_concurrent_requests_no_cross_talk(tm: Any, sent: list[Any]) -> None:
    """http-kit/http-kit#361 (under concurrency one request received the response meant for
    another running at the same time). 32 concurrent ``/generate`` requests, half of them
    streamed, answered in a shuffled order (streamed ones in two chunks, interleaved with the
    others): each caller gets exactly the text fed back for its own rid, and nothing is left."""
    from sglang_v4.managers.io_struct import BatchStrOut

    def chunk(rid: str, text: str, last: bool) -> Any:
        return BatchStrOut(
            rids=[rid],
            finished_reasons=[{"type": "length", "length": 2} if last else None],
            output_strs=[text],
            final_strs=[None],  # the whole text is the pieces the manager gathered
            output_ids=[[1]],
            prompt_tokens=[3],
            completion_tokens=[2 if last else 1],
            cached_tokens=[0],
            time_stats=[None],
            detokenizer_ts=0.0,
        )

    async def collect(i: int) -> str:
        g = _gen(tm, {"text": f"q{i}", "rid": f"c{i}", "stream": i % 2 == 0, "sampling_params": {}})
        outs = [o async for o in g]
        if i % 2 == 0:  # streamed: each chunk carries the text so far (chunks not read yet merge)
            assert all(f"<{i}|{i}>".startswith(o["text"]) for o in outs), outs
        return outs[-1]["text"]

    async def main() -> list[str]:
        tasks = [asyncio.ensure_future(collect(i)) for i in range(32)]
        await _until(lambda: len(_generated(sent)) == 32)
        msgs = [chunk(f"c{i}", f"<{i}|", False) for i in range(32)]
        rng = random.Random(32)
        rng.shuffle(msgs)
        for m in msgs:
            tm._handle_batch_output(m)
            await asyncio.sleep(0)
        last = [chunk(f"c{i}", f"{i}>", True) for i in range(32)]
        rng.shuffle(last)
        for m in last:
            tm._handle_batch_output(m)
        return await asyncio.gather(*tasks)

    texts = asyncio.run(asyncio.wait_for(main(), 30))
    assert texts == [f"<{i}|{i}>" for i in range(32)]
    assert not tm.rid_to_state

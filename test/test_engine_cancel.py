"""``sglang_v4.Engine``: a caller that stops waiting (an ``asyncio`` task cancelled, a blocking call
interrupted by a signal) aborts its request, and the error it sees is its own.

The model-free FakeScheduler holds a ``"[hold]"`` request after its first token (it never ends by
itself), so only an abort frees its pages; the oracle is the scheduler's own page count and the
tokenizer manager's table of in-flight requests, both back to empty, and a later request whose
text is the fake model's known output (``transformers`` decoding of ``FAKE_TEXT``).
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest
from engine_testutil import HELD, _assert_released, engine_fixture, expected_fixture  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(240)


class _Interrupted(Exception):
    """What the test's SIGALRM handler raises in the thread blocked on the Engine."""


def _interrupt_after(seconds: float) -> None:
    def handler(signum: int, frame: Any) -> None:
        raise _Interrupted()

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def test_cancelled_async_stream_consumer_sees_cancelled_error(engine, expected) -> None:
    """Cancelling the task that iterates an ``async_generate(stream=True)`` stream raises
    ``CancelledError`` in it (before: ``RuntimeError: aclose(): asynchronous generator is already
    running``, from closing the stream while its step still ran on the engine's loop), and the
    request is aborted."""
    got: list[dict[str, Any]] = []

    async def consume() -> None:
        async for chunk in await engine.async_generate(**HELD, stream=True):
            got.append(chunk)

    async def main() -> None:
        tasks = [asyncio.create_task(consume()) for _ in range(4)]
        while len(got) < 4:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # every consumer now waits for a chunk that never comes
        for t in tasks:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results), results

    asyncio.run(main())
    assert all(c["meta_info"]["finish_reason"] is None for c in got)
    _assert_released(engine, expected)


def test_cancelled_async_generate_aborts(engine, expected) -> None:
    """``asyncio.wait_for(engine.async_generate(...), t)`` timing out aborts the request."""

    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(engine.async_generate(**HELD), 0.3)

    asyncio.run(main())
    _assert_released(engine, expected)


@pytest.mark.parametrize("stream", [False, True])
def test_interrupted_blocking_call_aborts(engine, expected, stream: bool) -> None:
    """A blocking ``generate`` (or a stream's ``next``) interrupted by a signal handler's exception
    (Ctrl-C's ``KeyboardInterrupt``) raises that exception and aborts the request; before, the
    request kept running and holding its pages."""
    try:
        if stream:
            it = engine.generate(**HELD, stream=True)
            assert next(it)["meta_info"]["finish_reason"] is None
            _interrupt_after(0.3)
            with pytest.raises(_Interrupted):
                next(it)
        else:
            _interrupt_after(0.3)
            with pytest.raises(_Interrupted):
                engine.generate(**HELD)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    _assert_released(engine, expected)


def test_rid_reused_right_after_a_cancel_gets_its_own_output(engine, expected) -> None:
    """A request that reuses the ``rid`` of one just given up (stream closed, task cancelled) gets
    its own output. Before, the abandoned request's final (abort) output, still on its way from
    the scheduler, was delivered to the new request: its text and ``finish_reason`` abort."""
    ok = {"prompt": "ok", "sampling_params": {"max_new_tokens": 3}}
    for k in range(3):
        it = engine.generate(**HELD, stream=True, rid=f"sync-{k}")
        assert next(it)["meta_info"]["finish_reason"] is None
        it.close()
        out = engine.generate(**ok, rid=f"sync-{k}")
        assert (out["text"], out["meta_info"]["finish_reason"]) == (
            expected(3),
            {"type": "length", "length": 3},
        )

    async def main() -> None:
        for k in range(3):
            first = asyncio.Event()

            async def consume(rid: str, first: asyncio.Event) -> None:
                async for _ in await engine.async_generate(**HELD, stream=True, rid=rid):
                    first.set()

            task = asyncio.create_task(consume(f"async-{k}", first))
            await first.wait()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            out = await engine.async_generate(**ok, rid=f"async-{k}")
            assert out["text"] == expected(3), out
            assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 3}

    asyncio.run(main())
    _assert_released(engine, expected)


def test_finished_request_leaves_the_table_before_its_generator_is_closed(engine: Any) -> None:
    """A request whose final output has been handed back is no longer in flight, even while its
    caller has not closed the generator yet. An unclosed generator is only finalised by the garbage
    collector; until then the request stayed in the manager's table, so ``/pause_generation``
    waited on it and the SIGTERM drain reported it in flight (found under load: streams refused
    or aborted while queued)."""
    from sglang_v4.managers.io_struct import GenerateReqInput

    tm = engine.tokenizer_manager

    async def final_output_then_check() -> tuple[bool, Any]:
        obj = GenerateReqInput(text="ok", sampling_params={"max_new_tokens": 3}, rid="left-open")
        gen = tm.generate_request(obj)
        try:
            out = await gen.__anext__()  # non-streaming: the one (final) output
            return "left-open" in tm.rid_to_state, out
        finally:
            await gen.aclose()

    still_listed, out = asyncio.run_coroutine_threadsafe(final_output_then_check(), engine._loop).result(30)
    assert out["meta_info"]["finish_reason"] is not None
    assert not still_listed

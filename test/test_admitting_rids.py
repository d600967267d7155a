"""``AdmittingRids`` on its own: what the tokenizer manager relies on for requests not yet sent to
the scheduler (counting, aborts by ``rid``, failing, refusing once stopped), the queued-abort
message it answers an aborted one with (the scheduler's shape: SGLang's message, no token), and
the HTTP server's drain over it (``drain_in_flight``, with a stand-in tokenizer manager)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sglang_v4.managers.admitting_rids import AdmittingRids, queued_abort_output
from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
from sglang_v4.managers.tokenization import RequestError
from sglang_v4.sampling.sampling_params import SamplingParams


def test_hold_counts_each_rid_until_the_block_ends() -> None:
    a = AdmittingRids()
    with a.hold(["x"]), a.hold(["y_0", "y_1"]), a.hold(["x"]):
        assert a.count == 4 and "x" in a and "y_1" in a
    assert a.count == 0 and "x" not in a


def test_abort_marks_only_the_named_rid_and_wakes_its_ticket() -> None:
    a = AdmittingRids()
    with a.hold(["y_0", "y_1"]) as t, a.hold(["z"]) as other:
        assert not a.abort("y")  # exact rids only (the tokenizer manager expands a parent rid)
        assert a.abort("y_1")
        assert t.aborted_rids == {"y_1"} and not t.all_aborted and t.wake.is_set()
        assert not other.wake.is_set() and not other.aborted_rids
        assert a.abort("y_0") and t.all_aborted


def test_abort_all_marks_every_ticket() -> None:
    a = AdmittingRids()
    with a.hold(["p_0", "p_1"]) as t1, a.hold(["q"]) as t2:
        assert a.abort_all() == 3
        assert t1.all_aborted and t2.all_aborted and t1.wake.is_set() and t2.wake.is_set()
        assert t1.error is None and t2.error is None  # aborted, not failed: they end with an abort


def test_unless_failed_raises_at_once_when_failed_and_waits_through_an_abort() -> None:
    """A request being tokenized (a step that takes long) raises the drain's error as soon as it
    is failed, and its step is cancelled; an abort meanwhile lets the step finish (the request then
    ends with its prompt length known)."""
    err = RequestError("The server is shutting down.", 503)

    async def main() -> tuple[float, bool, str]:
        a = AdmittingRids()
        loop = asyncio.get_running_loop()
        step_cancelled = False

        async def slow_step() -> str:
            nonlocal step_cancelled
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                step_cancelled = True
                raise
            return "tokenized"

        async def short_step() -> str:
            await asyncio.sleep(0.2)
            return "tokenized"

        with a.hold(["r"]) as t:
            loop.call_later(0.1, a.fail_all, err)
            t0 = loop.time()
            with pytest.raises(RequestError) as info:
                await t.unless_failed(slow_step())
            took = loop.time() - t0
            assert info.value.status_code == 503
        await asyncio.sleep(0)
        with a.hold(["s"]) as t:
            loop.call_later(0.05, a.abort, "s")
            result = await t.unless_failed(short_step())
            assert t.all_aborted
        return took, step_cancelled, result

    took, step_cancelled, result = asyncio.run(main())
    assert took < 5 and step_cancelled and result == "tokenized"


def test_fail_all_makes_every_ticket_raise_and_stop_refuses_new_ones() -> None:
    a = AdmittingRids()
    err = RequestError("The server is shutting down.", 503)
    with a.hold(["p", "q"]) as t:
        t.raise_if_failed()  # nothing yet
        a.stop(err)
        with pytest.raises(RequestError), a.hold(["late"]):
            pass
        assert a.count == 2  # those already being admitted go on until failed
        assert a.fail_all(err) == 2 and t.wake.is_set()
        depths = []
        for _ in range(3):  # raised again and again: the shared error's traceback does not grow
            with pytest.raises(RequestError) as info:
                t.raise_if_failed()
            assert info.value.status_code == 503
            depths.append(len(info.traceback))
        assert depths[0] == depths[-1]
    assert a.stopped and a.count == 0


def test_wake_all_reaches_every_waiter() -> None:
    async def main() -> list[bool]:
        a = AdmittingRids()
        with a.hold(["a"]) as t1, a.hold(["b"]) as t2:
            waits = [asyncio.ensure_future(t.wake.wait()) for t in (t1, t2)]
            await asyncio.sleep(0)
            a.wake_all()
            done = await asyncio.wait_for(asyncio.gather(*waits), 10.0)
        return list(done)

    assert asyncio.run(main()) == [True, True]


def test_queued_abort_output_is_the_schedulers_queued_abort() -> None:
    sp = SamplingParams.from_dict({"max_new_tokens": 4})
    reqs = [
        TokenizedGenerateReqInput(rid="r1", input_text=None, input_ids=[5, 6, 7], sampling_params=sp),
        TokenizedGenerateReqInput(rid="r2", input_text=None, input_ids=[8], sampling_params=sp),
    ]
    out = queued_abort_output(reqs)
    assert out.rids == ["r1", "r2"]
    # SGLang's FINISH_ABORT.to_json(): status_code and err_type always present (None when the abort
    # was asked for).
    abort = {"type": "abort", "message": "Abort in waiting queue", "status_code": None, "err_type": None}
    assert out.finished_reasons == [abort] * 2
    assert out.output_ids == [[], []] and out.output_strs == ["", ""]
    assert out.prompt_tokens == [3, 1] and out.completion_tokens == [0, 0]


class _StubTM:
    """What ``drain_in_flight`` reads of a tokenizer manager: requests being admitted only."""

    def __init__(self, paused: bool) -> None:
        self.is_pause = paused
        self.crashed = None
        self.rid_to_state: dict[str, Any] = {}
        self.admitting = AdmittingRids()
        self.pending_control: dict[str, asyncio.Future[Any]] = {}

    def num_in_flight(self) -> int:
        return len(self.rid_to_state) + self.admitting.count

    def stop_admitting(self, message: str, status_code: int = 503) -> None:
        self.admitting.stop(RequestError(message, status_code))

    def fail_all(self, message: str, status_code: int = 503) -> int:
        return self.admitting.fail_all(RequestError(message, status_code))

    def fail_control(self, message: str, status_code: int = 503) -> int:
        from sglang_v4.managers.tokenizer_control_mixin import TokenizerControlMixin

        return TokenizerControlMixin.fail_control(self, message, status_code)  # type: ignore[arg-type]


@pytest.mark.parametrize("paused", [True, False])
def test_drain_counts_requests_being_admitted(paused: bool) -> None:
    """Paused: a request held at the gate could never run, the drain fails it at once (not after
    its 30 s). Not paused: the drain waits for it to be sent. The server's own work is stopped
    first, and a request arriving after the drain began is refused."""
    from sglang_v4.entrypoints.admission import drain_in_flight

    async def main() -> tuple[float, BaseException | None, list[str]]:
        tm = _StubTM(paused)
        order: list[str] = []
        failed: BaseException | None = None

        async def held() -> None:
            nonlocal failed
            with tm.admitting.hold(["r"]) as t:
                if not paused:
                    await asyncio.sleep(0.3)  # then sent: it leaves the admitting set
                    return
                await t.wake.wait()
                try:
                    t.raise_if_failed()
                except RequestError as e:
                    failed = e

        async def stop_work() -> None:
            order.append("stop_work")
            with pytest.raises(RequestError):  # refused once the drain began
                with tm.admitting.hold(["late"]):
                    pass

        task = asyncio.ensure_future(held())
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await drain_in_flight(lambda: tm, lambda: order.append("draining"), 15, 30.0, None, stop_work)
        took = loop.time() - t0
        await asyncio.wait_for(task, 10.0)
        return took, failed, order

    took, failed, order = asyncio.run(main())
    assert order == ["draining", "stop_work"]
    assert took < 5
    if paused:
        assert isinstance(failed, RequestError) and failed.status_code == 503
        assert "generation is paused" in str(failed)
    else:
        assert failed is None and took >= 0.25  # it waited for the request to be sent


@pytest.mark.parametrize("ends", [True, False])
def test_drain_waits_for_a_control_request_then_fails_it(ends: bool) -> None:
    """A control request waiting for the scheduler (a weight update loading) is in flight: the
    drain waits for it like for a request; one still waiting at the drain's end gets the 503
    instead of being cancelled by the HTTP server's stop (a 500 and a traceback)."""
    from sglang_v4.entrypoints.admission import drain_in_flight

    async def main() -> tuple[float, asyncio.Future[Any]]:
        tm = _StubTM(paused=False)
        loop = asyncio.get_running_loop()
        update = tm.pending_control["update"] = loop.create_future()

        async def answer() -> None:
            await asyncio.sleep(0.3)
            update.set_result("loaded")
            del tm.pending_control["update"]

        if ends:
            asyncio.ensure_future(answer())
        t0 = loop.time()
        # answered: a drain timeout far from the answer's 0.3 s, so a loaded machine cannot make
        # a drain that waited for it look like one that ran to its timeout
        await drain_in_flight(lambda: tm, lambda: None, 15, 30.0 if ends else 1.0)
        return loop.time() - t0, update

    took, update = asyncio.run(main())
    if ends:
        assert update.result() == "loaded" and 0.25 <= took < 10.0
    else:
        err = update.exception()
        assert isinstance(err, RequestError) and err.status_code == 503 and took >= 0.95


def test_a_second_signal_cuts_the_stop_work_short() -> None:
    """The server's own work (an open profile's trace being written, batches being cancelled) runs
    first in the drain; a second signal stops waiting for it, as it stops the drain."""
    from sglang_v4.entrypoints.admission import drain_in_flight

    async def main() -> tuple[float, bool]:
        tm = _StubTM(paused=False)
        hurry = asyncio.Event()
        cancelled = False

        async def stop_work() -> None:
            nonlocal cancelled
            try:
                await asyncio.sleep(60)  # a trace that takes long to write
            except asyncio.CancelledError:
                cancelled = True
                raise

        loop = asyncio.get_running_loop()
        loop.call_later(0.2, hurry.set)
        t0 = loop.time()
        await drain_in_flight(lambda: tm, lambda: None, 15, 30.0, hurry, stop_work)
        return loop.time() - t0, cancelled

    took, cancelled = asyncio.run(main())
    # the second signal comes at 0.2 s; without it the drain would wait its 30 s
    assert cancelled and took < 10

"""``AdmittingRids`` on its own: what the tokenizer manager relies on for requests not yet sent to
the scheduler (counting, aborts by ``rid``, failing, refusing once stopped), and the queued-abort
message it answers an aborted one with (the scheduler's shape: SGLang's message, no token)."""

from __future__ import annotations

import asyncio

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
        assert not a.abort("y")  # a parent rid names no request (SGLang's rule)
        assert a.abort("y_1")
        assert t.aborted_rids == {"y_1"} and not t.all_aborted and t.wake.is_set()
        assert not other.wake.is_set() and not other.aborted_rids
        assert a.abort("y_0") and t.all_aborted


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
            done = await asyncio.wait_for(asyncio.gather(*waits), 1.0)
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
    assert out.finished_reasons == [{"type": "abort", "message": "Abort in waiting queue"}] * 2
    assert out.output_ids == [[], []] and out.output_strs == ["", ""]
    assert out.prompt_tokens == [3, 1] and out.completion_tokens == [0, 0]

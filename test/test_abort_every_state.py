"""``/abort_request``'s two wide forms against a running ``sglang_v4.Engine`` (model-free
FakeScheduler; prompts holding ``[hold]`` run until aborted, each holding KV pages):

* ``abort_all`` ends every request the server holds, in every state at once: running (a single
  request, a batch of two prompts, an ``n = 2`` request), still tokenizing its prompt, and held at
  the admission gate while generation is paused. Before, the last two escaped the abort (it was
  sent to the scheduler only) and ran once generation continued. ``/pause_generation``'s abort
  mode and a weight update's ``abort_all_requests`` reach the same states.
* The ``rid`` a client gave an ``n > 1`` (or batch) request aborts each of its samples, running
  or held at the gate; a sample's own rid aborts that sample only, and a request whose rid merely
  starts with the parent's is untouched. Before, a parent rid aborted nothing.

Oracles: SGLang's abort finish reason (``FINISH_ABORT.to_json()``: ``"Aborted"`` for a request the
scheduler ran, ``"Abort in waiting queue"`` for one it never ran, no status code), SGLang's naming
of the samples (``rid_0``, ``rid_1``, ...), the fake scheduler's own page count back to 0, and a
later request's text equal to the fake model's known output decoded by ``transformers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from server_fixture import fake_output_text, hf_auto_tokenizer
from sglang_v4.managers.io_struct import GenerateReqInput

pytestmark = pytest.mark.timeout(240)

HELD = {"max_new_tokens": 450}
#: A prompt with this text waits in tokenization until the test lets it go.
SLOW = "[slow-tokenize]"


def _abort(message: str) -> dict[str, Any]:
    return {"type": "abort", "message": message, "status_code": None, "err_type": None}


RUNNING_ABORT = _abort("Aborted")
QUEUED_ABORT = _abort("Abort in waiting queue")


@pytest.fixture(scope="module")
def engine(shared_fake_engine: Any) -> Any:
    """conftest's session ``Engine`` on ``FakeScheduler`` (``[hold]`` prompts held)."""
    return shared_fake_engine


@pytest.fixture(scope="module")
def expected() -> Callable[[int], str]:
    tok = hf_auto_tokenizer()
    return lambda n: fake_output_text(tok, n)


def _on_engine_loop(engine: Any, coro: Any, timeout_s: float = 120.0) -> Any:
    return asyncio.run_coroutine_threadsafe(coro, engine._loop).result(timeout_s)


async def _until(cond: Callable[[], Any], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await cond():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


class _Requests:
    """Requests started on the engine's loop; ``outs[name]`` is each one's last output."""

    def __init__(self, tm: Any) -> None:
        self.tm = tm
        self.outs: dict[str, Any] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, **fields: Any) -> None:
        async def run() -> None:
            async for out in self.tm.generate_request(GenerateReqInput(**fields)):
                self.outs[name] = out

        self.tasks[name] = asyncio.ensure_future(run())

    async def running(self) -> int:
        return int((await self.tm.get_internal_state())["num_running_reqs"])

    async def ended(self, *names: str, timeout_s: float = 10.0) -> None:
        """Wait for ``names`` to end (their errors raised); a timeout names those still going."""
        tasks = [self.tasks[n] for n in names]
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        assert not pending, f"not ended: {[n for n in names if not self.tasks[n].done()]}"
        for t in done:
            t.result()


@contextlib.asynccontextmanager
async def _slow_prompts_held(tm: Any) -> AsyncIterator[asyncio.Event]:
    """Prompts containing ``SLOW`` stay in tokenization until the yielded event is set; on exit
    the event is set, the tokenizer restored and a pause lifted."""
    release = asyncio.Event()
    original = tm._encode_prompts

    async def encode(objs: list[GenerateReqInput]) -> Any:
        if any(SLOW in (o.text or "") for o in objs):
            await release.wait()
        return await original(objs)

    tm._encode_prompts = encode
    try:
        yield release
    finally:
        release.set()
        tm._encode_prompts = original
        if tm.is_pause:
            await tm.continue_generation()


def _assert_never_sent(outs: dict[str, Any], *names: str) -> None:
    """Each named request ended with the queued abort, no output, its prompt counted: it was
    never sent to the scheduler."""
    for name in names:
        meta = outs[name]["meta_info"]
        assert meta["finish_reason"] == QUEUED_ABORT, name
        assert (outs[name]["output_ids"], meta["completion_tokens"]) == ([], 0), name
        assert meta["prompt_tokens"] > 0, name


def _assert_released(engine: Any, expected: Callable[[int], str]) -> None:
    """No page in use, nothing in flight in the manager, and a fresh request's text is right."""
    tm = engine.tokenizer_manager
    assert engine.get_server_info()["kv_pool"]["used_pages"] == 0
    assert not tm.rid_to_state and tm.admitting.count == 0 and not tm.parent_rids.children("par")
    out = engine.generate(prompt="ok", sampling_params={"max_new_tokens": 3})
    assert out["text"] == expected(3)


def test_abort_all_ends_requests_in_every_state(engine: Any, expected: Callable[[int], str]) -> None:
    tm = engine.tokenizer_manager

    async def main() -> dict[str, Any]:
        reqs = _Requests(tm)
        async with _slow_prompts_held(tm) as release:
            reqs.start("single", text="[hold] a", sampling_params=HELD, rid="all-single")
            reqs.start("batch", text=["[hold] b1", "[hold] b2"], sampling_params=HELD)
            reqs.start("n2", text="[hold] c", sampling_params={**HELD, "n": 2})
            await _until(lambda: _ge(reqs.running(), 5), "5 requests running")
            reqs.start("tokenizing", text=f"{SLOW} d", sampling_params={"max_new_tokens": 3})
            await _until(lambda: _true(tm.admitting.count == 1), "one request tokenizing")
            await tm.pause_generation("in_place")  # the running ones keep their pages
            reqs.start("gate", text="gate e", sampling_params={"max_new_tokens": 3}, rid="all-gate")
            await _until(lambda: _true(tm.admitting.count == 2), "one request held at the gate")

            tm.abort_request(abort_all=True)
            # still paused: the scheduler answers the aborts of what it holds, the gate lets go
            await reqs.ended("single", "batch", "n2", "gate")
            assert not reqs.tasks["tokenizing"].done()
            release.set()  # tokenized now: it ends without being sent
            await reqs.ended("tokenizing")
        return reqs.outs

    outs = _on_engine_loop(engine, main())
    assert outs["single"]["meta_info"]["finish_reason"] == RUNNING_ABORT
    assert outs["single"]["meta_info"]["completion_tokens"] == 1  # the token it had when held
    for name in ("batch", "n2"):
        assert [o["meta_info"]["finish_reason"] for o in outs[name]] == [RUNNING_ABORT] * 2, name
    _assert_never_sent(outs, "tokenizing", "gate")
    _assert_released(engine, expected)


def test_pause_abort_and_update_abort_end_every_request_held(
    engine: Any, expected: Callable[[int], str]
) -> None:
    """``/pause_generation`` (abort mode) and a weight update with ``abort_all_requests`` end every
    request the server holds when they are called, as ``abort_all`` does: running, still
    tokenizing, and held at the gate by an earlier ``in_place`` pause. A request received after the
    pause waits and, after continue, runs to its full output. Before, the tokenizing and held
    requests escaped both aborts and ran afterwards (finish reason ``length``)."""
    tm = engine.tokenizer_manager

    async def main() -> dict[str, Any]:
        reqs = _Requests(tm)
        async with _slow_prompts_held(tm) as release:
            # the pause: one running, one tokenizing, one held by an earlier in_place pause
            reqs.start("p_running", text="[hold] a", sampling_params=HELD)
            await _until(lambda: _ge(reqs.running(), 1), "one request running")
            reqs.start("p_tokenizing", text=f"{SLOW} b", sampling_params={"max_new_tokens": 3})
            await _until(lambda: _true(tm.admitting.count == 1), "one request tokenizing")
            await tm.pause_generation("in_place")
            reqs.start("p_gate", text="gate c", sampling_params={"max_new_tokens": 3})
            await _until(lambda: _true(tm.admitting.count == 2), "one request held at the gate")
            pause = asyncio.ensure_future(tm.pause_generation("abort"))
            await reqs.ended("p_running", "p_gate")
            assert not pause.done()  # it waits for the request still tokenizing
            release.set()
            await reqs.ended("p_tokenizing")
            await asyncio.wait_for(pause, 10)
            reqs.start("p_later", text="later d", sampling_params={"max_new_tokens": 3})
            await asyncio.sleep(0.3)
            assert not reqs.tasks["p_later"].done()  # received after the pause: it waits
            await tm.continue_generation()
            await reqs.ended("p_later")

            # the weight update: one running, one tokenizing
            release.clear()
            reqs.start("u_running", text="[hold] e", sampling_params=HELD)
            await _until(lambda: _ge(reqs.running(), 1), "one request running")
            reqs.start("u_tokenizing", text=f"{SLOW} f", sampling_params={"max_new_tokens": 3})
            await _until(lambda: _true(tm.admitting.count == 1), "one request tokenizing")
            update = asyncio.ensure_future(
                tm.update_weights_from_disk(tm.model_path, abort_all_requests=True)
            )
            await reqs.ended("u_running")
            release.set()
            await reqs.ended("u_tokenizing")
            await asyncio.wait_for(update, 30)  # the fake scheduler loads no weights: its answer
        return reqs.outs

    outs = _on_engine_loop(engine, main())
    for name in ("p_running", "u_running"):
        assert outs[name]["meta_info"]["finish_reason"] == RUNNING_ABORT, name
    _assert_never_sent(outs, "p_tokenizing", "p_gate", "u_tokenizing")
    assert outs["p_later"]["text"] == expected(3)
    assert outs["p_later"]["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    _assert_released(engine, expected)


def test_abort_by_parent_rid_ends_every_sample(engine: Any, expected: Callable[[int], str]) -> None:
    tm = engine.tokenizer_manager

    async def main() -> dict[str, Any]:
        reqs = _Requests(tm)
        try:
            reqs.start("par", text="[hold] p", sampling_params={**HELD, "n": 3}, rid="par")
            reqs.start("bystander", text="[hold] q", sampling_params=HELD, rid="par1")
            reqs.start(
                "list", text=["[hold] r", "[hold] s"], sampling_params={**HELD, "n": 2}, rid=["pl", "pm"]
            )
            await _until(lambda: _ge(reqs.running(), 8), "8 requests running")

            tm.abort_request("par")
            tm.abort_request("pl")
            await reqs.ended("par")
            await _until(lambda: _eq(reqs.running(), 3), "par1, pm_0 and pm_1 left running")
            tm.abort_request("pm_1")  # one sample by its own rid
            await _until(lambda: _eq(reqs.running(), 2), "par1 and pm_0 left running")
            assert not reqs.tasks["list"].done() and not reqs.tasks["bystander"].done()
            tm.abort_request("pm")
            tm.abort_request("par1")
            await reqs.ended("list", "bystander")

            # held at the admission gate (paused): the parent's abort ends its samples there
            await tm.pause_generation("in_place")
            reqs.start("gated", text="gate", sampling_params={"max_new_tokens": 3, "n": 2}, rid="gpar")
            await _until(lambda: _true(tm.admitting.count == 2), "2 samples held at the gate")
            tm.abort_request("gpar")
            await reqs.ended("gated")
        finally:
            if tm.is_pause:
                await tm.continue_generation()
        return reqs.outs

    outs = _on_engine_loop(engine, main())
    ids = lambda name: sorted(o["meta_info"]["id"] for o in outs[name])  # noqa: E731
    assert ids("par") == ["par_0", "par_1", "par_2"]  # SGLang's names of the samples
    assert ids("list") == ["pl_0", "pl_1", "pm_0", "pm_1"]
    assert ids("gated") == ["gpar_0", "gpar_1"]
    for name in ("par", "list"):
        assert [o["meta_info"]["finish_reason"] for o in outs[name]] == [RUNNING_ABORT] * len(outs[name])
    assert [o["meta_info"]["finish_reason"] for o in outs["gated"]] == [QUEUED_ABORT] * 2
    assert outs["bystander"]["meta_info"]["finish_reason"] == RUNNING_ABORT  # by its own abort only
    _assert_released(engine, expected)


async def _ge(value: Any, n: int) -> bool:
    return await value >= n


async def _eq(value: Any, n: int) -> bool:
    return await value == n


async def _true(value: bool) -> bool:
    return value

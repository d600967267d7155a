"""Public bug reports (round twenty) of the offline ``Engine`` API, replayed against sglang-v4.

The tests run the real processes on the model-free ``FakeScheduler``: conftest's session
``shared_fake_engine`` (``[hold]`` prompts run until aborted), and one Engine of their own made in
a worker thread. Oracles: the fake model's known output decoded by ``transformers.AutoTokenizer``
on the same tokenizer files (``fake_output_text``), the scheduler's page count and the tokenizer
manager's request table (both back to empty once a request is given up), the children's liveness.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import threading
import time
from typing import Any

import pytest
from engine_testutil import HELD, _assert_released, engine_fixture, expected_fixture  # noqa: F401 - fixtures
from server_fixture import hf_auto_tokenizer, start_fake_engine

pytestmark = pytest.mark.timeout(240)


def _ctrl_c_after(seconds: float) -> threading.Timer:
    """SIGINT to the main thread after ``seconds`` (a terminal's Ctrl-C: Python's default handler
    raises ``KeyboardInterrupt`` in the main thread, also out of a blocking wait)."""
    timer = threading.Timer(seconds, signal.pthread_kill, args=(threading.main_thread().ident, signal.SIGINT))
    timer.daemon = True
    timer.start()
    return timer


@pytest.fixture
def default_sigint() -> Any:
    """Python's own SIGINT handler (``KeyboardInterrupt``) while the test runs."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


# --- Ctrl-C ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["generate", "stream", "asyncio.run"])
def test_ctrl_c_during_a_request_aborts_it_and_later_requests_are_served(
    engine: Any, expected: Any, default_sigint: Any, mode: str
) -> None:
    """vllm-project/vllm#17738 (interrupting inference with Ctrl-C left the engine in a state where
    every later request hung): a real SIGINT (``KeyboardInterrupt``) during a blocking
    ``generate``, during a stream's iteration and during ``asyncio.run(async_generate(...))``
    reaches the caller, the interrupted request is aborted (its pages freed, the table empty) and
    the next request returns the fake model's text."""
    timer = None
    try:
        with pytest.raises(KeyboardInterrupt):
            if mode == "generate":
                timer = _ctrl_c_after(0.3)
                engine.generate(**HELD)
            elif mode == "stream":
                it = engine.generate(**HELD, stream=True)
                assert next(it)["meta_info"]["finish_reason"] is None
                timer = _ctrl_c_after(0.3)
                for _ in it:
                    pass
            else:
                timer = _ctrl_c_after(0.3)
                asyncio.run(engine.async_generate(**HELD))
    finally:
        if timer is not None:
            timer.cancel()
    _assert_released(engine, expected)


# --- engines in threads and foreign event loops ------------------------------------------------


def test_engine_created_in_a_worker_thread_serves_after_that_thread_ends(
    shared_fake_model_dir: Any, expected: Any
) -> None:
    """sgl-project/sglang#2536 and sgl-project/sglang#4319 (an Engine made outside the main thread,
    in a Ray Serve replica or a web app's start-up thread, could not be used): an Engine created
    in a thread that then ends still serves from the main thread. Before, the children asked the
    kernel for SIGKILL on the death of their parent *thread* (``PR_SET_PDEATHSIG``), so the
    scheduler and detokenizer died with the creating thread and every later request failed with
    "backend crashed"."""
    made: dict[str, Any] = {}

    def create() -> None:
        try:
            made["engine"] = start_fake_engine(shared_fake_model_dir, page_size=256)
            made["text"] = made["engine"].generate("hi", {"max_new_tokens": 3})["text"]
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            made["error"] = e

    worker = threading.Thread(target=create, name="engine-maker")
    worker.start()
    worker.join(180)
    assert not worker.is_alive() and "error" not in made, made.get("error")
    eng = made["engine"]
    try:
        assert made["text"] == expected(3)
        time.sleep(1.0)  # the parent-death signal is immediate; the watchdog polls every 0.5 s
        assert eng._procs.scheduler.is_alive() and eng._procs.detokenizer.is_alive()
        out = eng.generate(["a", "b c"], {"max_new_tokens": 4})
        assert [o["text"] for o in out] == [expected(4)] * 2
        stream = [c["text"] for c in eng.generate("hi", {"max_new_tokens": 3}, stream=True)]
        assert stream[-1] == expected(3)
    finally:
        eng.shutdown()
    assert not eng._procs.scheduler.is_alive() and not eng._procs.detokenizer.is_alive()


def test_async_generate_from_an_event_loop_running_in_another_thread(engine: Any, expected: Any) -> None:
    """sgl-project/sglang#6723 (``async_generate`` could not be awaited from an async Ray actor,
    whose event loop runs in a thread of its own, not the one the Engine was created on): plain
    and streamed ``async_generate`` awaited on a loop running in another thread return the fake
    model's text, as do ten concurrent ones gathered there."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, name="actor-loop", daemon=True)
    runner.start()

    async def actor_calls() -> tuple[str, list[str], list[str]]:
        one = await engine.async_generate("hi", {"max_new_tokens": 3})
        chunks = [
            c["text"] async for c in await engine.async_generate("hi", {"max_new_tokens": 3}, stream=True)
        ]
        many = await asyncio.gather(
            *[engine.async_generate(f"p{i}", {"max_new_tokens": 2}) for i in range(10)]
        )
        return one["text"], chunks, [m["text"] for m in many]

    try:
        one, chunks, many = asyncio.run_coroutine_threadsafe(actor_calls(), loop).result(60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()
    assert one == expected(3)
    # chunks the consumer had not read yet may be merged (cumulative), never lost
    assert chunks[-1] == expected(3) and all(expected(3).startswith(c) for c in chunks)
    assert many == [expected(2)] * 10


# --- giving up a stream ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["break", "dropped"])
def test_stream_left_by_its_caller_is_aborted(engine: Any, expected: Any, how: str) -> None:
    """sgl-project/sglang#3520 (a request kept generating after its caller gave it up): a held
    request whose stream the caller leaves by ``break`` out of the ``for`` loop, or whose iterator
    is dropped after one chunk, is aborted (pages freed, table empty) once the iterator is
    collected, without ``close()`` being called."""
    if how == "break":
        for chunk in engine.generate(**HELD, stream=True):
            assert chunk["meta_info"]["finish_reason"] is None
            break
    else:
        it = engine.generate(**HELD, stream=True)
        next(it)
        del it
    gc.collect()
    _assert_released(engine, expected)


# --- output shapes -----------------------------------------------------------------------------


def test_parallel_sampling_output_shapes(engine: Any, expected: Any) -> None:
    """sgl-project/sglang#37202 (the table of SGLang's parallel-sampling shapes a reimplementation
    of ``/generate`` has to keep): ``n=1`` is one dict, ``n=3`` a list of three with distinct ids,
    two prompts with ``n=2`` four items prompt by prompt; a streamed ``n=3`` request tags its
    chunks with ``index`` 0..2 (each ending with its finish reason), a streamed ``n=1`` request
    carries no ``index``."""
    tok = hf_auto_tokenizer()
    one = engine.generate("hi", {"max_new_tokens": 2, "n": 1})
    assert isinstance(one, dict) and one["text"] == expected(2)
    three = engine.generate("hi", {"max_new_tokens": 2, "n": 3})
    assert isinstance(three, list) and len(three) == 3
    assert len({o["meta_info"]["id"] for o in three}) == 3
    prompts = ["a", "one two three four"]
    four = engine.generate(prompts, {"max_new_tokens": 2, "n": 2})
    want_lengths = [len(tok.encode(p, add_special_tokens=True)) for p in prompts]
    assert [o["meta_info"]["prompt_tokens"] for o in four] == [want_lengths[0]] * 2 + [want_lengths[1]] * 2
    chunks = list(engine.generate("hi", {"max_new_tokens": 2, "n": 3}, stream=True))
    assert {c["index"] for c in chunks} == {0, 1, 2}
    for i in range(3):
        mine = [c for c in chunks if c["index"] == i]
        assert mine[-1]["text"] == expected(2)
        assert mine[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 2}
    plain = list(engine.generate("hi", {"max_new_tokens": 2}, stream=True))
    assert all("index" not in c for c in plain)


def test_many_abandoned_async_requests_leave_the_engine_serving(engine: Any, expected: Any) -> None:
    """vllm-project/vllm#2475 (a client that abandoned many in-flight requests, as an editor
    plug-in does while the user types, killed the async engine: every later request failed with
    ``AsyncEngineDeadError``): eight held ``async_generate`` tasks, plain and streamed, cancelled
    together are all aborted (pages freed, table empty) and the engine then serves as before."""

    async def read_stream() -> None:
        async for _ in await engine.async_generate(**HELD, stream=True):
            pass

    async def abandon() -> tuple[int, list[bool]]:
        tasks = [asyncio.ensure_future(engine.async_generate(**HELD)) for _ in range(4)]
        tasks += [asyncio.ensure_future(read_stream()) for _ in range(4)]
        deadline = time.time() + 30
        while len(engine.tokenizer_manager.rid_to_state) < 8 and time.time() < deadline:
            await asyncio.sleep(0.02)
        in_flight = len(engine.tokenizer_manager.rid_to_state)
        for t in tasks:
            t.cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        return in_flight, [isinstance(d, asyncio.CancelledError) for d in done]

    assert asyncio.run(abandon()) == (8, [True] * 8)
    _assert_released(engine, expected)

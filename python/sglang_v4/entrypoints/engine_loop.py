"""The offline ``Engine``'s private event loop: the thread that runs it, and the streams its
callers step on it from other threads or event loops.

The ``TokenizerManager`` of an :class:`~sglang_v4.entrypoints.engine.Engine` lives on one event
loop run by a background thread (:func:`run_loop_then_close`); each ``generate(stream=True)`` /
``async_generate(stream=True)`` iterator steps its ``generate_request`` stream there through a
:class:`StreamSteps`. At shutdown the engine reads what each open stream has left
(:meth:`StreamSteps.drain`) before it stops the loop, so a stream whose request had already
finished ends normally after the shutdown, as it would have before it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

logger = logging.getLogger(__name__)

#: Seconds the loop thread, once stopped, waits for the tasks still pending to end after they
#: are cancelled (a task that ignores its cancellation is left to the garbage collector).
_CLOSE_TASKS_TIMEOUT_S = 2.0


class StreamSteps:
    """One ``TokenizerManager.generate_request`` stream, stepped on the engine loop by a caller on
    another thread or event loop.

    A caller that stops waiting for a step (its task cancelled, its blocking wait interrupted)
    cancels the step's future; the step itself still runs on the engine loop until that
    cancellation reaches it. :meth:`close` waits for it to end before closing the stream (an
    ``aclose()`` while a step runs raises ``RuntimeError: aclose(): asynchronous generator is
    already running`` and would leave the request running); a request closed unfinished is
    aborted by the stream's own cleanup.

    Steps, :meth:`drain` and :meth:`close` take turns (an ``asyncio.Lock``, bound to the engine
    loop on first contended use). Once the stream has ended (it returned, raised, was drained or
    closed), :meth:`next` and :meth:`rest` hand out what was read and then its end: the outputs
    :meth:`drain` read, then ``StopAsyncIteration`` or the exception the stream raised.
    """

    def __init__(self, agen: AsyncIterator[Any], shut_down_message: str) -> None:
        self.agen = agen
        self.step_task: asyncio.Task[Any] | None = None
        self.started = False  # a step has run: the request was (or is being) submitted
        self.ended = False  # the stream returned, raised, was drained or closed
        self.error: BaseException | None = None  # what it raised (None: it returned)
        self.left: collections.deque[Any] = collections.deque()  # read by drain(), not handed out
        self._shut_down_message = shut_down_message
        self._turn = asyncio.Lock()

    async def next(self) -> Any:
        """The stream's next output (raises ``StopAsyncIteration`` at its end). Runs on the loop."""
        async with self._turn:
            if self.ended:
                return self.rest()
            self.started = True
            self.step_task = asyncio.current_task()
            try:
                return await self.agen.__anext__()
            except StopAsyncIteration:
                self.ended = True
                raise
            except Exception as e:
                self.ended, self.error = True, e
                raise
            finally:
                self.step_task = None

    def rest(self) -> Any:
        """What the ended stream still has for its caller, without the loop (callable from any
        thread once the loop no longer steps this stream): the next output :meth:`drain` read,
        else the stream's end.

        Raises:
            StopAsyncIteration: the stream returned, and every output was handed out.
            Exception: what the stream raised.
            RuntimeError: (the engine's shut-down message) the stream did not end before the loop
                stopped: a request still running (or never started) at shutdown.
        """
        if self.left:
            return self.left.popleft()
        if not self.ended:
            raise RuntimeError(self._shut_down_message)
        if self.error is not None:
            raise self.error
        raise StopAsyncIteration

    async def drain(self) -> None:
        """Read the rest of a started stream into :attr:`left`, up to its end (runs on the loop
        at shutdown, after the requests still unfinished were failed: those streams raise at
        once). A stream never stepped is closed instead: its request was never sent."""
        async with self._turn:
            if self.ended:
                return
            if not self.started:
                await self.agen.aclose()  # type: ignore[attr-defined]
                self.ended, self.error = True, RuntimeError(self._shut_down_message)
                return
            try:
                while True:
                    self.left.append(await self.agen.__anext__())
            except StopAsyncIteration:
                self.ended = True
            except Exception as e:  # noqa: BLE001 - handed to the caller by rest()
                self.ended, self.error = True, e

    async def close(self) -> None:
        """Cancel a step still running, wait for it to end, then close the stream. Runs on the loop."""
        task = self.step_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})
        async with self._turn:
            await self.agen.aclose()  # type: ignore[attr-defined]
            self.ended = True


#: What :func:`rest_of_stream` returns at the stream's end.
END_OF_STREAM = object()


def rest_of_stream(steps: StreamSteps) -> Any:
    """:meth:`StreamSteps.rest`, with the stream's end as :data:`END_OF_STREAM` instead of
    ``StopAsyncIteration`` (which a generator must not let out)."""
    try:
        return steps.rest()
    except StopAsyncIteration:
        return END_OF_STREAM


async def only_output(agen: Any) -> Any:
    """The one output of a non-streaming ``generate_request`` stream, the stream then closed.

    Runs on the engine loop, so the stream's first step (where Python binds an async generator to
    the running loop's finalizer) and its close happen there. Stepped from the caller's thread
    instead, the generator was bound to the caller's event loop: a loop that outlived the call
    got the generator's ``aclose()`` as a task when it was garbage-collected (never run if that
    loop no longer ran: "Task was destroyed but it is pending!"), and ``asyncio.run`` closed it
    on the caller's thread at exit."""
    try:
        return await agen.__anext__()
    finally:
        await agen.aclose()


async def close_streams_and_tm(
    tm: Any, streams: list[StreamSteps], shut_down_message: str, drain_timeout_s: float
) -> None:
    """The shutdown's work on the engine loop: fail ``tm``'s requests still unfinished and those
    not yet sent (``RuntimeError(shut_down_message)``), read the open ``streams`` to their ends
    (up to ``drain_timeout_s`` seconds: a request finished before the shutdown ends its stream
    normally, with the outputs its caller had not read yet), then close ``tm``'s sockets."""
    err = RuntimeError(shut_down_message)
    for state in list(tm.rid_to_state.values()):
        if not state.finished:
            state.error = err
            state.event.set()
    tm.admitting.fail_all(err)  # not sent yet (held while paused): they raise it too
    tm.admitting.stop(err)
    await asyncio.sleep(0)  # let the waiting generators raise before the sockets close
    if streams:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(s.drain() for s in streams)), drain_timeout_s)
    tm.close()


def run_loop_then_close(loop: asyncio.AbstractEventLoop) -> None:
    """The engine loop thread's body: run ``loop`` until it is stopped, then close it as
    ``asyncio.run`` closes its loop: the tasks still pending are cancelled (and waited for, up to
    :data:`_CLOSE_TASKS_TIMEOUT_S`), the async generators still open are closed, the default
    executor is shut down, and the loop is closed (its selector and self-pipe sockets freed: an
    unclosed loop warns ``ResourceWarning: unclosed event loop`` when collected)."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in tasks:
                t.cancel()
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks, timeout=_CLOSE_TASKS_TIMEOUT_S))
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    logger.debug("engine loop task ended with %r at shutdown", t.exception())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        except Exception:  # noqa: BLE001 - best effort: the loop is closed below regardless
            logger.debug("engine loop clean-up failed", exc_info=True)
        finally:
            asyncio.set_event_loop(None)
            loop.close()

"""Start-up and shutdown of the launcher: a stop asked for by a signal is a clean stop at any point.

The launcher (``python -m sglang_v4.launch_server``) may be stopped while it loads the model,
while the HTTP server starts, during the start-up warm-up request or while it serves. A SIGTERM or
SIGINT at any of these points stops every process and ends the launcher with exit code 0, without a
traceback and without reporting a crash; SIGINT may also reach the whole process group (a
terminal's Ctrl+C) and SIGTERM too (``kill -TERM -- -PGID``, a supervisor stopping the group):

* before the HTTP server is up, :class:`StopSignal` records the signal and
  :func:`~sglang_v4.entrypoints.launcher.launch_subprocesses` stops the children and raises
  :class:`StopRequested` (the launcher logs one line and returns 0);
* once it serves, the HTTP server drains (:mod:`sglang_v4.entrypoints.admission`), the warm-up
  request like any other (a stop that fails it is not a failed start-up);
* a child process that ends because it was asked to (exit code 0 after its SIGTERM handler, or
  killed by SIGTERM / SIGINT before it installed one: :func:`stopped_on_request`) is a stop, not a
  crash: the in-flight requests get the 503 shutdown error and the server exits 0.

Children are spawned with SIGINT ignored (:func:`start_ignoring_sigint`), so a Ctrl+C during their
interpreter start-up cannot print a ``KeyboardInterrupt`` traceback; the launcher decides.
:func:`stop_own_work` is what the drain stops first: the server's own batches and profile.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import signal
import threading
from typing import Any

#: Signals that ask the launcher to stop.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequested(Exception):  # noqa: N818 - a request, not an error
    """A stop signal arrived before the server was up; the children are already stopped."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"{signal.Signals(signum).name} received during start-up; stopped.")


class StopSignal:
    """Records the first SIGTERM / SIGINT the launcher receives before its HTTP server handles them.

    The handler only records the signal (no ``KeyboardInterrupt``, no logging from inside a
    handler); start-up code polls :meth:`is_set` and stops.
    """

    def __init__(self) -> None:
        #: The first stop signal received, else None.
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> StopSignal:
        """Install the handler for :data:`STOP_SIGNALS` (main thread only; a no-op elsewhere)."""
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        """Restore the handlers :meth:`install` replaced (for a caller that handles signals its
        own way)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum

    def is_set(self) -> bool:
        """True once a stop signal has arrived."""
        return self.signum is not None

    def check(self) -> None:
        """Raise :class:`StopRequested` when a stop signal has arrived."""
        if self.signum is not None:
            raise StopRequested(self.signum)


def stopped_on_request(exitcode: int | None) -> bool:
    """True when a child process's ``exitcode`` (``multiprocessing.Process.exitcode``) means it was
    asked to stop: 0 (its SIGTERM handler exits 0; no child exits 0 otherwise) or killed by
    SIGTERM / SIGINT (a signal that arrived before it installed its handler)."""
    return exitcode is not None and (exitcode == 0 or -exitcode in STOP_SIGNALS)


#: The lasting thread that starts children for callers outside the main thread: its queue and the
#: process it belongs to (a forked child makes its own).
_spawner_lock = threading.Lock()
_spawner: tuple[int, queue.SimpleQueue[Any]] | None = None


def _spawner_main(jobs: queue.SimpleQueue[Any]) -> None:
    while True:
        process, done = jobs.get()
        try:
            process.start()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            done.set_exception(e)
        else:
            done.set_result(None)


def _start_on_lasting_thread(process: Any) -> None:
    """``process.start()`` on a daemon thread that lives as long as this process.

    The children set ``prctl(PR_SET_PDEATHSIG)`` (:func:`~sglang_v4.utils.set_parent_death_signal`),
    which Linux ties to the *thread* that created the child: started from a thread that ends
    (an ``Engine`` made in a worker thread, a Ray Serve replica's start-up thread), the children
    were killed as that thread ended and the Engine then failed every request."""
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner[0] != os.getpid():
            jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
            threading.Thread(
                target=_spawner_main, args=(jobs,), name="sglang_v4-child-spawner", daemon=True
            ).start()
            _spawner = (os.getpid(), jobs)
        jobs = _spawner[1]
    done: concurrent.futures.Future[None] = concurrent.futures.Future()
    jobs.put((process, done))
    done.result()


def start_ignoring_sigint(process: Any) -> None:
    """``process.start()`` (a ``multiprocessing`` spawn ``Process``) with SIGINT ignored meanwhile,
    so the child starts with SIGINT ignored (an ignored disposition survives ``exec``; Python then
    installs no ``KeyboardInterrupt`` handler) and a Ctrl+C during its interpreter start-up prints
    no traceback. The caller's handler is restored as soon as the child is started (a SIGINT in
    those few milliseconds is lost). Outside the main thread the child is started, without the
    SIGINT change, on a thread that lasts as long as this process (:func:`_start_on_lasting_thread`),
    so it outlives the thread that asked for it."""
    if threading.current_thread() is not threading.main_thread():
        _start_on_lasting_thread(process)
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        process.start()
    finally:
        signal.signal(signal.SIGINT, previous)


async def stop_own_work(openai_serving: Any, tokenizer_manager: Any) -> None:
    """What the server runs of its own and a drain does not end, stopped at the start of the
    drain: running batches are cancelled (``OpenAIServing.cancel_all_batches`` of
    ``openai_serving``: their requests aborted, their files written) and a profile left open is
    stopped, its trace written (``TokenizerManager.stop_open_profile``). Either may be None (that
    part of the server is not up)."""
    if openai_serving is not None:
        await openai_serving.cancel_all_batches()
    if tokenizer_manager is not None:
        await tokenizer_manager.stop_open_profile()

"""Where the model worker's calls run: a background thread (overlap scheduling) or inline.

With overlap scheduling (SGLang's ``TpModelWorkerClient`` / overlap thread, on by default,
``--disable-overlap-schedule`` turns it off) the scheduler hands each :class:`ModelWorkerBatch` to
one worker thread and goes on: while the thread (and the device) run batch N, the scheduler builds
batch N + 1 and processes batch N - 1's result. Batch N + 1's decode inputs are the tokens batch N
is still sampling; they travel as future placeholders resolved on the device (``FutureMap`` in
``tp_worker.py``). The thread runs batches strictly in submission order, so every read of a page
or slot by batch N + 1 happens after batch N's writes, and pages the scheduler frees meanwhile
are only reused by later batches.

On CPU the thread gives real overlap too: torch ops release the GIL, so the scheduler's Python
work runs while the forward computes. Without overlap the same calls run inline, so both modes
execute the same code.
"""

from __future__ import annotations

import queue
import threading
import weakref
from concurrent.futures import Future
from typing import Any

import torch

from sglang_v4.managers.model_worker_batch import GenerationBatchResult, ModelWorkerBatch
from sglang_v4.managers.tp_worker import TpModelWorker

__all__ = ["InlineWorkerClient", "TpModelWorkerClient"]


def _thread_main(jobs: queue.SimpleQueue, device_index: int | None) -> None:
    """The worker thread: bind the device (``torch.cuda.set_device`` is per thread and needs an
    index), then run jobs in order. A failure to bind is handed to every job's future, so the
    scheduler sees it at its next ``result()`` instead of waiting forever."""
    startup_error: BaseException | None = None
    if device_index is not None:
        try:
            torch.cuda.set_device(device_index)
        except BaseException as e:  # noqa: BLE001 - reported through the futures
            startup_error = e
    while True:
        job = jobs.get()
        if job is None:
            return
        fn, arg, fut = job
        del job
        if not fut.set_running_or_notify_cancel():
            continue
        try:
            if startup_error is not None:
                raise RuntimeError(f"model worker thread could not bind its device: {startup_error}")
            fut.set_result(fn(arg))
        except BaseException as e:  # noqa: BLE001 - handed to the scheduler thread
            fut.set_exception(e)
        del fn, arg, fut


def worker_device_index(device: torch.device) -> int | None:
    """The CUDA device index the worker thread binds: ``device.index``, or for a bare ``cuda`` the
    calling thread's current device (a new thread starts on device 0, whatever the caller chose);
    ``None`` off CUDA."""
    if device.type != "cuda":
        return None
    return device.index if device.index is not None else torch.cuda.current_device()


class TpModelWorkerClient:
    """Runs :meth:`TpModelWorker.forward_batch_generation` in one daemon thread, in order.

    Args:
        worker: the model worker.

    The thread ends when the client is garbage collected (or :meth:`shutdown`).
    """

    def __init__(self, worker: TpModelWorker) -> None:
        self.worker = worker
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=_thread_main,
            args=(self._jobs, worker_device_index(worker.device)),
            name="model-worker",
            daemon=True,
        )
        self._thread.start()
        self._finalizer = weakref.finalize(self, self._jobs.put, None)

    def submit(self, wb: ModelWorkerBatch) -> Future[GenerationBatchResult]:
        """Queue ``wb``; its result (or exception) arrives in the returned future."""
        fut: Future[GenerationBatchResult] = Future()
        self._jobs.put((self.worker.forward_batch_generation, wb, fut))
        return fut

    def shutdown(self) -> None:
        """Let the thread finish the queued batches and exit."""
        self._finalizer()


class InlineWorkerClient:
    """The same interface, running each batch at once in the caller's thread (no overlap)."""

    def __init__(self, worker: TpModelWorker) -> None:
        self.worker = worker

    def submit(self, wb: ModelWorkerBatch) -> Future[GenerationBatchResult]:
        """Run ``wb`` now; a finished future holding its result (or the exception it raised)."""
        fut: Future[GenerationBatchResult] = Future()
        try:
            fut.set_result(self.worker.forward_batch_generation(wb))
        except BaseException as e:  # noqa: BLE001 - re-raised by result()
            fut.set_exception(e)
        return fut

    def shutdown(self) -> None:
        """Nothing to stop (no thread)."""
        pass


def make_worker_client(worker: TpModelWorker, overlap: bool) -> Any:
    """:class:`TpModelWorkerClient` when ``overlap``, else :class:`InlineWorkerClient`."""
    return TpModelWorkerClient(worker) if overlap else InlineWorkerClient(worker)

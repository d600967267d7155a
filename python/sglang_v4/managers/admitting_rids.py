"""Requests on their way into the tokenizer manager: tokenized, or held at the admission gate,
but not yet sent to the scheduler (not yet in ``rid_to_state``).

A request spends this time tokenizing its prompt (a worker thread), waiting for an abandoned
request of the same ``rid`` to end (:mod:`.abandoned_rids`), and waiting at the admission gate
while generation is paused (``/pause_generation``) or a weight update runs. The scheduler does not
know it yet, so what concerns requests in flight must reach it here:

* ``/abort_request`` with its ``rid``: the request leaves the gate at once and ends without being
  sent, with the output the scheduler gives a queued request it aborts (:func:`queued_abort_output`:
  no token, SGLang's ``"Abort in waiting queue"``); before, the abort was lost and the request ran
  once generation continued;
* the graceful drain and a stop: the drain counts it as in flight (:attr:`AdmittingRids.count`)
  and, when it fails what is left (:meth:`AdmittingRids.fail_all`), it raises that error instead
  of being sent (before, the drain saw nothing in flight and the HTTP server cancelled the
  handler: a 500 and a traceback); a request still tokenizing a long prompt raises it at once
  (:meth:`AdmissionTicket.unless_failed`), not once its prompt is tokenized;
* ``/abort_request`` with ``abort_all``, ``/pause_generation``'s abort mode and a weight
  update's ``abort_all_requests`` end every one of them the same way
  (:meth:`AdmittingRids.abort_all`): "all" means every request the server holds, wherever it is
  (SGLang's scheduler never sees these, so there a request held at the gate escaped the abort
  and ran once generation continued); a request that arrives afterwards waits at the gate and
  runs after it opens;
* the stop itself: once :meth:`AdmittingRids.stop` was called, a new request is refused at its
  entry with the stop's error (a task inside the server, such as a running batch, cannot start
  requests after the drain began).

Everything runs on the tokenizer manager's event loop.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sglang_v4.managers.detokenizer_manager import str_out_from_token_out
from sglang_v4.managers.io_struct import (
    ABORT_IN_QUEUE,
    BatchStrOut,
    BatchTokenIDOut,
    TokenizedGenerateReqInput,
    finish_abort,
)
from sglang_v4.managers.req import Req

__all__ = ["AdmissionTicket", "AdmittingRids", "queued_abort_output"]

_T = TypeVar("_T")


def queued_abort_output(reqs: list[TokenizedGenerateReqInput]) -> BatchStrOut:
    """The message the scheduler (through the detokenizer) sends for queued requests it aborts:
    each finished with SGLang's ``"Abort in waiting queue"`` abort, no token, its prompt length."""
    ended = []
    for t in reqs:
        req = Req(rid=t.rid, origin_input_ids=list(t.input_ids), sampling_params=t.sampling_params)
        req.finished_reason = finish_abort(ABORT_IN_QUEUE, None)
        ended.append(req)
    return str_out_from_token_out(BatchTokenIDOut.from_reqs(ended))


class AdmissionTicket:
    """One request (or one batch / ``n > 1`` request, all its ``rids``) being admitted.

    Attributes:
        rids: the request ids it carries.
        aborted_rids: those ``/abort_request`` named before they were sent.
        error: the exception to raise instead of sending it (set by :meth:`AdmittingRids.fail_all`).
        wake: set whenever one of the above changes or the admission gate opens.
    """

    def __init__(self, rids: list[str]) -> None:
        self.rids = rids
        self.aborted_rids: set[str] = set()
        self.error: BaseException | None = None
        self.wake = asyncio.Event()

    @property
    def all_aborted(self) -> bool:
        """Every request of the ticket was aborted (it need not wait at the gate any more)."""
        return self.aborted_rids.issuperset(self.rids)

    def raise_if_failed(self) -> None:
        """Raise :attr:`error` when the request was failed while being admitted."""
        if self.error is not None:
            raise self.error.with_traceback(None)  # shared by many requests: no traceback piles up

    async def unless_failed(self, step: Awaitable[_T]) -> _T:
        """Await ``step`` (tokenizing the prompt, waiting for a reused ``rid``) unless the request
        is failed meanwhile: then ``step`` is cancelled and :attr:`error` raised at once (a prompt
        that takes long to tokenize no longer holds up the drain or a crash; its worker thread
        finishes unobserved). An abort does not stop ``step``: the request ends once it is
        tokenized, with its prompt length in the abort output.

        Raises:
            BaseException: :attr:`error`, or what ``step`` raises.
        """
        task = asyncio.ensure_future(step)
        try:
            while True:
                self.raise_if_failed()
                woken = asyncio.ensure_future(self.wake.wait())
                try:
                    await asyncio.wait((task, woken), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    woken.cancel()
                if task.done():
                    return task.result()
                self.wake.clear()  # an abort or the gate: every waiter reads the state again
        finally:
            if not task.done():
                task.cancel()


class AdmittingRids:
    """The requests being admitted (module docstring)."""

    def __init__(self) -> None:
        self._tickets: set[AdmissionTicket] = set()
        self._rids: Counter[str] = Counter()
        self._stop_error: BaseException | None = None

    @property
    def count(self) -> int:
        """Request ids being admitted (a batch counts each of its requests)."""
        return sum(self._rids.values())

    @property
    def aborted_count(self) -> int:
        """Request ids of the requests whose every id was aborted: each ends without being sent
        (once its prompt is tokenized), whether or not the admission gate is open."""
        return sum(len(t.rids) for t in self._tickets if t.all_aborted)

    @property
    def stopped(self) -> bool:
        """:meth:`stop` was called: new requests are refused."""
        return self._stop_error is not None

    def __contains__(self, rid: object) -> bool:
        return self._rids.get(rid, 0) > 0  # type: ignore[call-overload]

    def rids(self) -> list[str]:
        """The request ids being admitted (each once)."""
        return list(self._rids)

    @contextmanager
    def hold(self, rids: Iterable[str]) -> Iterator[AdmissionTicket]:
        """Track ``rids`` until the block ends (the request was sent, or it failed).

        Raises:
            BaseException: the error given to :meth:`stop` (nothing is tracked then).
        """
        if self._stop_error is not None:
            raise self._stop_error.with_traceback(None)
        ticket = AdmissionTicket([str(r) for r in rids])
        self._tickets.add(ticket)
        self._rids.update(ticket.rids)
        try:
            yield ticket
        finally:
            self._tickets.discard(ticket)
            self._rids.subtract(ticket.rids)
            self._rids = +self._rids  # drop the zero counts

    def abort(self, rid: str) -> bool:
        """Mark the request(s) being admitted under ``rid`` aborted; whether there was one."""
        found = False
        for ticket in self._tickets:
            if rid in ticket.rids:
                ticket.aborted_rids.add(rid)
                ticket.wake.set()
                found = True
        return found

    def abort_all(self) -> int:
        """Mark every request being admitted aborted (``/abort_request`` with ``abort_all``): each
        ends without being sent, as a queued request the scheduler aborts; how many request ids."""
        n = 0
        for ticket in self._tickets:
            ticket.aborted_rids.update(ticket.rids)
            ticket.wake.set()
            n += len(ticket.rids)
        return n

    def fail_all(self, error: BaseException) -> int:
        """Make every request being admitted raise ``error`` instead of being sent; how many
        request ids that fails."""
        n = 0
        for ticket in self._tickets:
            if ticket.error is None:
                ticket.error = error
                n += len(ticket.rids)
            ticket.wake.set()
        return n

    def stop(self, error: BaseException) -> None:
        """Refuse every later request with ``error`` (:meth:`hold` raises it); the requests
        already being admitted go on (the drain waits for them or fails them)."""
        if self._stop_error is None:
            self._stop_error = error

    def wake_all(self) -> None:
        """The admission gate opened: every waiting request looks again."""
        for ticket in self._tickets:
            ticket.wake.set()

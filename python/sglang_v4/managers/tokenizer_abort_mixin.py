"""Ending requests before their end in the tokenizer manager: ``/abort_request`` by ``rid``, by the
``rid`` a client gave a batch or ``n > 1`` request, or all of them, and failing every request when
the server stops (SGLang's ``TokenizerManager.abort_request`` role).

A request the server holds is in one of these places, and an abort reaches it in each:

* sent to the scheduler (``rid_to_state``: queued, running, in a batch of a ``/v1/batches`` job):
  an ``AbortReq`` per ``rid``; the scheduler frees its pages and answers with SGLang's abort
  (``"Abort in waiting queue"`` or ``"Aborted"``, no ``status_code``);
* not sent yet (tokenizing, waiting for a reused ``rid``, held at the admission gate while
  generation is paused or weights load: :mod:`.admitting_rids`): it ends without being sent, with
  the queued abort the scheduler would give it.

``abort_all`` reaches every request in both places; ``/pause_generation``'s abort mode and a
weight update's ``abort_all_requests`` use it, so every request the server holds when they are
called ends with SGLang's abort finish reason, those still tokenizing or held at the gate by an
earlier pause included (SGLang's pause repeats its abort until no request that passed its gate is
left, tokenizing ones included, but leaves those held at its gate by an earlier pause). Requests
received after the call wait at the closed gate and run after ``/continue_generation`` (or the
update), with the new weights. A batch or ``n > 1`` request whose ``rid`` is a
string ``R`` runs as requests ``R_0``, ``R_1``, ... (a list of rids with ``n > 1``: ``Ri_0``,
``Ri_1``, ... per prompt), as SGLang's ``GenerateReqInput`` names them; aborting ``R`` (or
``Ri``) aborts each of them, and aborting ``R_1`` that one only. The parent is matched exactly
(``R`` does not abort ``R1_0``). SGLang's scheduler matches an abort's ``rid`` as a prefix of the
request ids, but SGLang 0.5's tokenizer manager drops an abort whose ``rid`` is none of its own
requests and gives ``n > 1`` samples fresh ids, so there a parent's abort reaches nothing.
``prefix=True`` (SGLang's ``/abort_request`` ``prefix`` flag, for clients that namespace rids,
e.g. ``"adapter::<uuid>"``) aborts every request, in either place, whose id starts with ``rid``.

Everything runs on the tokenizer manager's event loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sglang_v4.managers.admitting_rids import AdmissionTicket, queued_abort_output
from sglang_v4.managers.io_struct import AbortReq, TokenizedGenerateReqInput
from sglang_v4.managers.tokenization import RequestError

if TYPE_CHECKING:
    from sglang_v4.managers.tokenizer_manager import TokenizerManager

__all__ = ["ParentRids", "TokenizerAbortMixin", "parent_rid_groups"]


def parent_rid_groups(given: Any, rids: list[str], batch_size: int, n: int) -> dict[str, list[str]]:
    """The request ids of each parent ``rid`` of a normalized batch / ``n > 1`` request.

    Args:
        given: the request's ``rid`` as the client sent it (before normalization): a string
            names the whole request, a list one parent per prompt (only with ``n > 1``: otherwise
            each of its rids is a request's own); ``None`` / ``""`` name none.
        rids: the normalized request ids, ordered as ``GenerateReqInput`` expands them (sample
            ``k`` of prompt ``i`` at ``k * batch_size + i``).
        batch_size: prompts in the request.
        n: samples per prompt (``parallel_sample_num``).

    Returns:
        ``{parent: [request ids]}``; empty when no rid was given as a parent.
    """
    if isinstance(given, str) and given:
        return {given: list(rids)}
    if isinstance(given, list) and n > 1:
        groups: dict[str, list[str]] = {}
        for i, parent in enumerate(given):
            if isinstance(parent, str) and parent:
                groups.setdefault(parent, []).extend(rids[k * batch_size + i] for k in range(n))
        return groups
    return {}


class ParentRids:
    """The parent ``rid``s of the batch / ``n > 1`` requests in flight and their request ids."""

    def __init__(self) -> None:
        self._groups: dict[str, list[list[str]]] = {}

    @contextmanager
    def hold(self, groups: dict[str, list[str]]) -> Iterator[None]:
        """Know ``groups`` (:func:`parent_rid_groups`) until the block ends (the request is over)."""
        for parent, rids in groups.items():
            self._groups.setdefault(parent, []).append(rids)
        try:
            yield
        finally:
            for parent, rids in groups.items():
                held = self._groups.get(parent, [])
                if rids in held:
                    held.remove(rids)
                if not held:
                    self._groups.pop(parent, None)

    def children(self, parent: str) -> list[str]:
        """The request ids of every request in flight whose parent ``rid`` is ``parent``."""
        return [rid for rids in self._groups.get(parent, ()) for rid in rids]


class TokenizerAbortMixin:
    """Aborts and failures of :class:`~sglang_v4.managers.tokenizer_manager.TokenizerManager`'s
    requests (module docstring). :meth:`init_abort` sets its state."""

    def init_abort(self: TokenizerManager) -> None:
        """No parent ``rid`` in flight."""
        #: parent ``rid`` -> request ids of the batch / ``n > 1`` requests in flight
        self.parent_rids = ParentRids()

    def abort_request(
        self: TokenizerManager, rid: str = "", abort_all: bool = False, prefix: bool = False
    ) -> None:
        """Abort the request ``rid`` (or each request of the batch / ``n > 1`` request whose
        ``rid`` it is; with ``prefix`` each request whose id starts with ``rid``), or with
        ``abort_all`` every request the server holds, wherever it is (module docstring). The
        scheduler frees their pages; a request not sent yet ends without being sent. An unknown
        or empty ``rid`` aborts nothing; after :meth:`close` nothing is done."""
        if self._closed:
            return
        if abort_all:
            self.admitting.abort_all()  # they end without being sent (_send_admitted)
            for r in list(self.rid_to_state):
                self._send.send_pyobj(AbortReq(rid=r))
            return
        if not rid:
            return
        if prefix:
            for r in {*self.rid_to_state, *self.admitting.rids()}:
                if r.startswith(rid):
                    self.admitting.abort(r)
                    if r in self.rid_to_state:
                        self._send.send_pyobj(AbortReq(rid=r))
            return
        for r in (rid, *self.parent_rids.children(rid)):
            self.admitting.abort(r)  # not sent yet: it ends without being sent (_send_admitted)
            if r == rid or r in self.rid_to_state:
                self._send.send_pyobj(AbortReq(rid=r))

    def fail_all(self: TokenizerManager, message: str, status_code: int = 503) -> int:
        """Fail every in-flight request with ``RequestError(message, status_code)`` and ask the
        scheduler to abort them (used when a graceful drain times out); the requests not sent yet
        (:attr:`admitting`) raise it instead of being sent, at once even while their prompt is
        being tokenized. Returns how many."""
        err = RequestError(message, status_code)
        states = list(self.rid_to_state.items())
        for rid, state in states:
            if not state.finished:
                state.error = err
                state.event.set()
                self.abort_request(rid)
        return len(states) + self.admitting.fail_all(err)

    def _send_admitted(
        self: TokenizerManager, tokenized: list[TokenizedGenerateReqInput], ticket: AdmissionTicket
    ) -> None:
        """Send the registered requests to the scheduler, except those an abort named while they
        were admitted: they end here, as the scheduler ends a queued request it aborts.

        A send that fails (the socket closed or broken) fails the whole request and leaves none of
        its state behind: the requests not sent leave ``rid_to_state`` at once, those already sent
        are aborted and wait in :attr:`abandoned` for their final output (their ``rid`` is free
        again once it arrives), as a request whose caller went away does.

        Raises:
            RequestError: 503, naming the failed send.
        """
        aborted = [t for t in tokenized if t.rid in ticket.aborted_rids]
        sent: list[str] = []
        try:
            for t in tokenized:
                if t.rid not in ticket.aborted_rids:
                    self._send.send_pyobj(t)
                    sent.append(t.rid)
        except Exception as e:
            self._forget_unsent(tokenized, sent)
            raise RequestError(f"Could not send the request to the scheduler: {e}", 503) from e
        if aborted:
            self._handle_batch_output(queued_abort_output(aborted))

    def _forget_unsent(
        self: TokenizerManager, tokenized: list[TokenizedGenerateReqInput], sent: list[str]
    ) -> None:
        """Drop the registered states of ``tokenized`` after a failed send: those in ``sent``
        reached the scheduler and are aborted (kept in :attr:`abandoned` until their final output
        arrives); the others leave ``rid_to_state`` now."""
        for t in tokenized:
            state = self.rid_to_state.pop(t.rid, None)
            if state is None or t.rid not in sent:
                continue
            try:
                self._send.send_pyobj(AbortReq(rid=t.rid))
            except Exception:  # the socket is broken: no output will come for it either
                continue
            self.abandoned.add(t.rid, state)

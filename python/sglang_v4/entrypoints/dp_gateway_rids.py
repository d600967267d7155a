"""Request ids in flight through the ``--dp-size`` gateway.

A single SGLang server refuses a request whose ``rid`` is that of a request it is still running
(``400``, ``Duplicate request id 'x'.``): its tokenizer manager, scheduler and detokenizer keep
their state by ``rid``. Behind the gateway each replica knows only its own requests, and the
router may send two requests with one ``rid`` to two replicas, which both run them -- and an
``/abort_request`` for that ``rid``, sent to every replica, then ends both. The gateway keeps the
``rid`` values of the generation requests it is passing on (:class:`RidsInFlight`) and refuses a
request reusing one of them as the single server does; a ``rid`` is free again once its request
has ended (answered, failed, or its client gone).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["DuplicateRid", "RidsInFlight", "body_rids"]


class DuplicateRid(ValueError):
    """A request names a ``rid`` that a request still in flight holds; the message is a single
    server's."""


def body_rids(body: bytes | None) -> list[str]:
    """The ``rid`` values a JSON request body names: its ``rid`` when a string, each string of it
    when a list (a batch); ``[]`` for a body that is not a JSON object or names none."""
    if not body:
        return []
    try:
        obj = json.loads(body)
    except ValueError:
        return []
    rid = obj.get("rid") if isinstance(obj, dict) else None
    if isinstance(rid, str):
        return [rid]
    if isinstance(rid, list):
        return [r for r in rid if isinstance(r, str)]
    return []


class RidsInFlight:
    """The ``rid`` values of the requests the gateway is passing on (one event loop: no lock)."""

    def __init__(self) -> None:
        self._held: set[str] = set()

    @contextmanager
    def hold(self, rids: list[str]) -> Iterator[None]:
        """Hold ``rids`` for the duration of the block, released on the way out (however it
        ends).

        Raises:
            DuplicateRid: one of ``rids`` is held by a request still in flight (nothing is held
                then).
        """
        taken = next((r for r in rids if r in self._held), None)
        if taken is not None:
            raise DuplicateRid(f"Duplicate request id {taken!r}.")
        mine = set(rids)
        self._held |= mine
        try:
            yield
        finally:
            self._held -= mine

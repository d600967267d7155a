"""Request ids given up before their end, kept until the scheduler's last output for them arrives.

A request is given up when its caller goes away (HTTP client disconnected, ``Engine`` stream
closed or its task cancelled): the tokenizer manager sends the scheduler an ``AbortReq`` and stops
waiting, but the scheduler's final output for that request (``finish_reason`` abort, or its
normal end if it had already finished) is still on its way through the detokenizer. Outputs are
matched to requests by ``rid``, so a new request reusing that ``rid`` before the final output
arrives would receive it (the old text, an abort). :class:`AbandonedRids` lets the new request
wait for that output first; after it the scheduler and the detokenizer hold nothing under the
``rid`` any more (the three processes pass messages in order). It also keeps the given-up
request's state, so that its end is still counted in the metrics when that output arrives.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

logger = logging.getLogger(__name__)

#: Seconds a request reusing an abandoned ``rid`` waits for that request's final output before
#: it proceeds anyway (the scheduler answers an abort at its next step; this bounds a lost one).
ABANDONED_RID_TIMEOUT_S = 30.0


class AbandonedRids:
    """The ``rid``s (and request states) of requests given up unfinished whose final output has
    not arrived yet.

    All methods run on the tokenizer manager's event loop.

    Args:
        timeout_s: the longest :meth:`wait` waits for one ``rid`` (seconds).
    """

    def __init__(self, timeout_s: float = ABANDONED_RID_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._events: dict[str, asyncio.Event] = {}
        self._states: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self._events)

    def __contains__(self, rid: object) -> bool:
        return rid in self._events

    def add(self, rid: str, state: Any) -> None:
        """``rid`` (its tokenizer-manager ``ReqState`` ``state``) was given up unfinished and its
        abort sent; its final output is still due."""
        self._events.setdefault(rid, asyncio.Event())
        self._states[rid] = state

    def finished(self, rid: str) -> Any:
        """The final output of ``rid`` arrived: forget it and return the state given to
        :meth:`add` (``None`` for a ``rid`` not given up)."""
        event = self._events.pop(rid, None)
        if event is not None:
            event.set()
        return self._states.pop(rid, None)

    def release_all(self) -> None:
        """Wake every waiter and forget every ``rid`` (the backend died: no output will come)."""
        for event in self._events.values():
            event.set()
        self._events.clear()
        self._states.clear()

    async def wait(self, rids: Iterable[str]) -> None:
        """Return once none of ``rids`` awaits a final output (each waits at most ``timeout_s``;
        a ``rid`` still due after that is forgotten, with a warning)."""
        for rid in rids:
            event = self._events.get(rid)
            if event is None:
                continue
            try:
                await asyncio.wait_for(event.wait(), self.timeout_s)
            except asyncio.TimeoutError:
                if self._events.get(rid) is event:
                    del self._events[rid]
                    self._states.pop(rid, None)
                logger.warning(
                    "Request id %r reused: the abort of the earlier request with that id was not "
                    "confirmed within %.0fs; proceeding.",
                    rid,
                    self.timeout_s,
                )

"""Request timeouts of the scheduler: SGLang's ``SGLANG_REQ_WAITING_TIMEOUT`` and
``SGLANG_REQ_RUNNING_TIMEOUT`` environment variables (seconds, float; ``-1``, the default, or any
value ``<= 0`` turns a limit off).

* A queued request that has never run and has waited longer than the waiting limit (from its
  arrival at the scheduler) ends with an abort: HTTP 503, ``"Request waiting timeout reached."``.
* A running request (admitted to a batch) that has run longer than the running limit (from its
  first admission, kept across retractions) ends with an abort: HTTP 503,
  ``"Request running timeout reached."``.

SGLang's earlier names of the two variables, ``SGLANG_QUEUED_TIMEOUT_MS`` and
``SGLANG_FORWARD_TIMEOUT_MS`` (milliseconds), are still read, as SGLang reads them after the
rename: converted to seconds, with a deprecation warning (once per name), and only where the new
name is unset.

Both messages and the 503 status are SGLang's (``Scheduler._poll_timeout_aborts``). The check
runs at the start of every scheduler step, before the step's batch is formed; an aborted request's
pages are released as ``/abort_request`` releases them. A request's running clock starts the first
step that finds it running (at most one step after its admission). A malformed value is treated
as unset (a warning is logged once per value).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sglang_v4.managers.io_struct import finish_abort

if TYPE_CHECKING:
    from sglang_v4.managers.scheduler import Scheduler

logger = logging.getLogger(__name__)

__all__ = [
    "RUNNING_TIMEOUT_ENV",
    "RUNNING_TIMEOUT_MSG",
    "WAITING_TIMEOUT_ENV",
    "WAITING_TIMEOUT_MSG",
    "abort_timed_out",
    "limit_seconds",
    "timeout_seconds",
]

WAITING_TIMEOUT_ENV = "SGLANG_REQ_WAITING_TIMEOUT"
RUNNING_TIMEOUT_ENV = "SGLANG_REQ_RUNNING_TIMEOUT"
WAITING_TIMEOUT_MSG = "Request waiting timeout reached."
RUNNING_TIMEOUT_MSG = "Request running timeout reached."
#: SGLang's deprecated names of the two variables (milliseconds), by the current name
DEPRECATED_MS_ENV = {
    WAITING_TIMEOUT_ENV: "SGLANG_QUEUED_TIMEOUT_MS",
    RUNNING_TIMEOUT_ENV: "SGLANG_FORWARD_TIMEOUT_MS",
}

_warned: set[str] = set()


def timeout_seconds(name: str, environ: Mapping[str, str] | None = None) -> float | None:
    """The limit in seconds that environment variable ``name`` sets, or ``None`` when it is unset,
    ``<= 0`` (SGLang's ``-1`` default means off) or not a finite number (logged once)."""
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if value != value or value in (float("inf"), float("-inf")):
        if raw not in _warned:
            _warned.add(raw)
            logger.warning("%s=%r is not a number of seconds; no limit is applied", name, raw)
        return None
    return value if value > 0 else None


def limit_seconds(name: str, environ: Mapping[str, str] | None = None) -> float | None:
    """The limit in seconds of ``name`` (:data:`WAITING_TIMEOUT_ENV` or
    :data:`RUNNING_TIMEOUT_ENV`): its own value when set (:func:`timeout_seconds`), else the
    deprecated milliseconds variable's (:data:`DEPRECATED_MS_ENV`) divided by 1000, with a
    deprecation warning logged once per name; ``None``: no limit."""
    env = os.environ if environ is None else environ
    raw = env.get(name)
    old = DEPRECATED_MS_ENV.get(name)
    if (raw is not None and raw.strip()) or old is None or not (env.get(old) or "").strip():
        return timeout_seconds(name, env)
    if old not in _warned:
        _warned.add(old)
        logger.warning("%s is deprecated; use %s (seconds) instead", old, name)
    ms = timeout_seconds(old, env)
    return None if ms is None else ms / 1000.0


def abort_timed_out(s: Scheduler, now: float | None = None) -> int:
    """End every request of scheduler ``s`` past its waiting or running limit (module docstring)
    with a 503 abort, its pages released; returns how many were ended.

    Args:
        s: the scheduler (its ``waiting`` and ``running`` requests are read and changed).
        now: the ``time.monotonic()`` reading to judge by (default: now); request arrivals are
            ``time.monotonic()`` readings.
    """
    waiting_limit = limit_seconds(WAITING_TIMEOUT_ENV)
    running_limit = limit_seconds(RUNNING_TIMEOUT_ENV)
    if waiting_limit is None and running_limit is None:
        return 0
    t = time.monotonic() if now is None else now
    expired = []
    if waiting_limit is not None:
        for req in s.waiting:
            if req.running_since is None and req.num_retractions == 0 and t - req.arrival > waiting_limit:
                expired.append((req, WAITING_TIMEOUT_MSG))
    if running_limit is not None:
        for req in s.running:
            if req.running_since is None:
                req.running_since = t
            elif t - req.running_since > running_limit:
                expired.append((req, RUNNING_TIMEOUT_MSG))
    for req, message in expired:
        logger.info("Aborting request %s: %s", req.rid, message)
        s._finish(req, finish_abort(message, 503))
    return len(expired)

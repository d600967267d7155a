"""Backend processes started early: they import while the parent checks the model.

A server start spends most of its time importing: the scheduler process needs torch,
transformers and the model code (~3 s of CPU), and the parent's model-directory check and
tokenizer load need about as long. Run one after the other, as a launcher that spawns its
children once the server arguments are final does, start-up costs their sum. Here the scheduler
and detokenizer processes are spawned as soon as the cheap checks (flags, port) pass: each child
imports its modules, then blocks on its pipe until the parent sends the function to run and its
arguments (:meth:`PrewarmedChild.run`). The parent's checks run meanwhile, so start-up costs
about the longer of the two.

Prewarm only pays off while the parent's checks are slow, i.e. while the parent still has to
import torch and transformers. A parent that has both imported already (a test process, a
notebook, a second ``Engine`` in one script) checks the model directory in a fraction of a
second: overlapping saves nothing there, and a launch the checks refuse would spawn and discard
two children for nothing. Such a parent runs its checks first and spawns the children after they
pass (:func:`prewarm_pays_off`, the rule; ``SGLANG_V4_NO_PREWARM=1`` always does so).

If the parent's checks fail, the children are discarded (:func:`discard_all`, also at exit): a
child waiting on its pipe sees it closed and exits 0, one still importing is sent SIGTERM. A
child whose parent dies gets SIGKILL from the kernel (``PR_SET_PDEATHSIG``, set first).

The scheduler's pipe is duplex and also carries its one :class:`SchedulerReadyInfo` back
(:data:`OWN_PIPE` in the job's arguments stands for the child's end). Before its job, a waiting
child also answers calls (:meth:`PrewarmedChild.call`): the parent's model-directory checks that
need torch and transformers run in the scheduler child, which imports both anyway, so the parent
of ``launch_server`` never imports torch (:mod:`sglang_v4.entrypoints.model_config_checks`). A
job's target may be named by ``"module:function"``, so that the parent need not import the
module (the scheduler's imports torch).
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import logging
import multiprocessing as mp
import os
import pickle
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

#: In the arguments of :meth:`PrewarmedChild.run`: replaced, in the child, by its end of the pipe.
OWN_PIPE = "<sglang_v4: the child's end of its pipe>"

#: The children the launcher starts, by role: process name, what each imports while it waits
#: (``module`` or ``module:function``, the function called with no arguments), daemon flag.
CHILDREN: dict[str, tuple[str, str, bool]] = {
    "scheduler": ("sglang_v4::scheduler", "sglang_v4.managers.scheduler_process:load_scheduler_class", False),
    "detokenizer": ("sglang_v4::detokenizer", "sglang_v4.managers.detokenizer_manager", True),
}

#: Shown when a spawned child fails at start-up, the usual cause being an unguarded script.
MAIN_GUARD_HINT = (
    "The Engine starts its processes with 'spawn', which re-runs the main script in each child: "
    'create the Engine under `if __name__ == "__main__":` (see "Safe importing of main module" '
    "in Python's multiprocessing docs)."
)


def refuse_inside_own_child() -> None:
    """Exit 1 with one line when called in one of the children this module spawns, i.e. an Engine
    created at the top level of a script without a main guard, which ``spawn`` re-runs in each
    child (no traceback: ``SystemExit`` ends the child's spawn bootstrap quietly). The parent sees
    exit code 1 and names the guard (:data:`MAIN_GUARD_HINT`).

    Raises:
        SystemExit: (code 1) in such a child; nothing otherwise.
    """
    name = mp.current_process().name
    if name.startswith("sglang_v4::"):
        sys.stderr.write(
            f"{name}: an Engine was created while this child process imported the main script. "
            + MAIN_GUARD_HINT
            + "\n"
        )
        raise SystemExit(1)


def _preload(spec: str) -> None:
    """Import ``module`` of ``spec`` (``module`` or ``module:function``) and call the function."""
    module, _, func = spec.partition(":")
    loaded = importlib.import_module(module)
    if func:
        getattr(loaded, func)()


def _resolve(target: Callable[..., Any] | str) -> Callable[..., Any]:
    """``target`` itself, or the function a ``"module:function"`` string names (imported here)."""
    if not isinstance(target, str):
        return target
    module, _, func = target.partition(":")
    return getattr(importlib.import_module(module), func)


@dataclasses.dataclass
class _Call:
    """A call the waiting child answers before its job (:meth:`PrewarmedChild.call`)."""

    target: Callable[..., Any]
    args: tuple[Any, ...]


@dataclasses.dataclass
class _Answer:
    """The child's answer to a :class:`_Call`: its return value, or the exception it raised and
    the log records it emitted (re-emitted by the parent's loggers)."""

    value: Any = None
    error: BaseException | None = None
    records: list[logging.LogRecord] = dataclasses.field(default_factory=list)


class _Collect(logging.Handler):
    """Keeps the records logged during a call, made picklable (message formatted, no traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args, record.exc_info, record.exc_text = record.getMessage(), None, None, None
        self.records.append(record)


def _answer(call: _Call) -> _Answer:
    """Run ``call`` with every log record collected (the root logger opened to all levels for its
    duration: the parent applies its own levels when it re-emits them)."""
    root = logging.getLogger()
    collect, level = _Collect(), root.level
    root.addHandler(collect)
    root.setLevel(logging.DEBUG)
    try:
        answer = _Answer(value=call.target(*call.args))
    except Exception as e:  # noqa: BLE001 - raised again in the parent
        answer = _Answer(error=e)
    finally:
        root.removeHandler(collect)
        root.setLevel(level)
    answer.records = collect.records
    try:
        pickle.dumps(answer)
    except Exception as e:  # noqa: BLE001 - an unpicklable value or exception: say what it was
        answer = _Answer(error=RuntimeError(f"{type(answer.error or e).__name__}: {answer.error or e}"))
    return answer


def _child_main(conn: Connection, preload: str) -> None:
    """A prewarmed child: import ``preload``, wait for the job, run it (see the module docstring).
    An import error here is ignored: the job imports the same modules and reports it there."""
    from sglang_v4.utils import set_parent_death_signal

    set_parent_death_signal()
    try:
        _preload(preload)
    except Exception:
        pass
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):  # the parent discarded this child (or is gone)
            return
        if not isinstance(job, _Call):
            break
        try:
            conn.send(_answer(job))
        except (EOFError, OSError):
            return
    if job is None:
        return
    target, args = job
    args = tuple(conn if isinstance(a, str) and a == OWN_PIPE else a for a in args)
    if not any(a is conn for a in args):
        conn.close()
    _resolve(target)(*args)


@dataclasses.dataclass
class PrewarmedChild:
    """A spawned child waiting for its job. ``process``: the ``multiprocessing`` process (its
    ``pid`` / ``is_alive`` / ``exitcode`` as usual); ``conn``: the parent's end of the duplex
    pipe (the scheduler's ready info arrives on it)."""

    role: str
    process: Any
    conn: Connection
    _calls_sent: int = dataclasses.field(default=0, repr=False)
    _answers_received: int = dataclasses.field(default=0, repr=False)

    def call(self, target: Callable[..., Any], *args: Any) -> Callable[[], Any]:
        """Send the waiting child a call of ``target(*args)`` (``target`` importable by name, the
        arguments picklable) to run before its job; returns the function that waits for the
        answer, then re-emits the records the call logged through this process's loggers (at this
        process's levels) and returns its value or raises its exception.

        The child answers once its imports are done, so the caller can work meanwhile. When the
        child cannot answer (gone, or the pipe closed), the waiting function calls ``target``
        here instead.
        """
        try:
            self.conn.send(_Call(target, args))
        except (OSError, ValueError):
            return lambda: target(*args)
        number, self._calls_sent = self._calls_sent, self._calls_sent + 1

        def wait() -> Any:
            try:
                answer = self._receive(number)
            except (EOFError, OSError, ValueError):
                return target(*args)
            for record in answer.records:
                log = logging.getLogger(record.name)
                if log.isEnabledFor(record.levelno):
                    log.handle(record)
            if answer.error is not None:
                raise answer.error
            return answer.value

        return wait

    def _receive(self, number: int) -> _Answer:
        """The answer to call ``number`` (answers come in call order; those of earlier calls
        nobody waited for are dropped).

        Raises:
            EOFError, OSError: the child is gone; ValueError: the pipe was closed here.
        """
        answer = None
        while self._answers_received <= number:
            answer = self.conn.recv()
            self._answers_received += 1
        if answer is None:
            raise ValueError(f"call {number}: its answer was already taken")
        return answer

    def run(self, target: Callable[..., None] | str, *args: Any) -> None:
        """Have the child call ``target(*args)`` (``target`` importable by name, or named by a
        ``"module:function"`` string, imported in the child only; the arguments picklable;
        :data:`OWN_PIPE` stands for the child's end of the pipe). A child that already exited
        (e.g. exit code 1 from :func:`refuse_inside_own_child`) is left for the caller's liveness
        checks: the send error is swallowed. Answers to calls nobody waited for are read first,
        so that what the job sends back comes next on the pipe."""
        try:
            if self._answers_received < self._calls_sent:
                self._receive(self._calls_sent - 1)
            self.conn.send((target, args))
        except (EOFError, OSError, ValueError):
            pass

    def discard(self) -> None:
        """Close the pipe (a waiting child exits 0) and stop a child still importing (SIGTERM,
        then SIGKILL after 2 s); idempotent."""
        from sglang_v4.utils import stop_processes

        self.conn.close()
        if self.process.is_alive():
            stop_processes([self.process], timeout_s=2.0)


_started: dict[str, PrewarmedChild] = {}
_atexit_registered = False


def start_child(role: str) -> PrewarmedChild:
    """Spawn the child of ``role`` (a key of :data:`CHILDREN`) with SIGINT ignored
    (:func:`~sglang_v4.entrypoints.lifecycle.start_ignoring_sigint`); it imports while it waits.

    Raises:
        KeyError: an unknown role.
        SystemExit: called inside one of these children (:func:`refuse_inside_own_child`).
    """
    from sglang_v4.entrypoints.lifecycle import start_ignoring_sigint

    refuse_inside_own_child()
    name, preload, daemon = CHILDREN[role]
    ctx = mp.get_context("spawn")
    parent_end, child_end = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=_child_main, args=(child_end, preload), name=name, daemon=daemon)
    start_ignoring_sigint(proc)
    child_end.close()
    return PrewarmedChild(role, proc, parent_end)


#: The modules whose import makes the parent's model checks slow (see :func:`prewarm_pays_off`).
SLOW_CHECK_IMPORTS = ("torch", "transformers")


def prewarm_pays_off() -> bool:
    """Whether :func:`start_server_children` spawns the children before the parent's checks.

    The children's imports (torch, transformers, the model code: seconds of CPU) only overlap
    something when the parent's model-directory check is itself slow, which is when the parent
    has yet to import torch and transformers (about 3 s on a cold process). Once both are in
    ``sys.modules`` the check takes a fraction of a second, so prewarming saves nothing and a
    refused launch would spawn and discard two children for nothing: the children are then
    spawned after the checks pass (by :func:`take`). False as well when ``SGLANG_V4_NO_PREWARM``
    is set (to any non-empty value).
    """
    if os.environ.get("SGLANG_V4_NO_PREWARM"):
        return False
    return not all(name in sys.modules for name in SLOW_CHECK_IMPORTS)


def start_server_children() -> None:
    """Spawn the scheduler and detokenizer children now, for a later :func:`take` (idempotent;
    discarded at exit if never taken). Nothing is started when :func:`prewarm_pays_off` says
    no (``SGLANG_V4_NO_PREWARM`` set, or torch and transformers already imported): :func:`take`
    then spawns each child after the checks."""
    global _atexit_registered
    if not prewarm_pays_off():
        return
    for role in CHILDREN:  # (start_child refuses inside our own children first)
        if role not in _started:
            _started[role] = start_child(role)
    if not _atexit_registered:
        atexit.register(discard_all)
        _atexit_registered = True


def started(role: str) -> PrewarmedChild | None:
    """The child of ``role`` started by :func:`start_server_children` and not taken yet (it stays
    there for :func:`take`), or ``None``."""
    return _started.get(role)


def take(role: str) -> PrewarmedChild:
    """The child of ``role`` started by :func:`start_server_children` (now the caller's to
    run), or a new one started here."""
    child = _started.pop(role, None)
    return child if child is not None else start_child(role)


def discard_all() -> None:
    """Discard every started child not taken yet (:meth:`PrewarmedChild.discard`)."""
    while _started:
        _started.popitem()[1].discard()

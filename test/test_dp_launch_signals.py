"""``--dp-size``: a stop signal sent to the whole process group (a terminal's Ctrl+C) is a clean stop.

The README promises that a signal reaching the whole process group stops the server with exit code
0 and no traceback. With ``--dp-size 2`` a Ctrl+C reached the gateway and the replicas as well as
the launcher; the launcher's watch loop found the gateway gone before it looked at the signal and
exited 1 with "the DP gateway exited with code 0", and sglang-router's Python wrapper, in the same
process group, printed a ``KeyboardInterrupt`` traceback.

:func:`~sglang_v4.entrypoints.data_parallel.launch_data_parallel` runs here with its processes
replaced by stand-ins (nothing is served); the router stand-in is a real process started with the
launcher's own ``Popen`` arguments, so its process group is the kernel's answer.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import types
from typing import Any

import pytest
from sglang_v4.entrypoints import data_parallel as dp
from sglang_v4.server_args import ServerArgs

pytestmark = pytest.mark.timeout(60)


class _Child:
    """A replica or gateway stand-in (``multiprocessing.Process``'s interface)."""

    def __init__(self, target: Any = None, args: tuple = (), name: str = "", daemon: bool = False):
        self.name, self.pid, self.exitcode, self.alive = name, 1, None, False

    def start(self) -> None:
        self.alive = True

    def is_alive(self) -> bool:
        return self.alive

    def stop(self, code: int) -> None:
        self.alive, self.exitcode = False, code

    def terminate(self) -> None:
        self.stop(-signal.SIGTERM)

    kill = terminate

    def join(self, timeout: float | None = None) -> None:
        pass


def _run_until(monkeypatch: pytest.MonkeyPatch, on_first_sleep: Any) -> tuple[int, list[_Child], int | None]:
    """Run ``launch_data_parallel`` (dp_size 2) with stand-ins; ``on_first_sleep(handlers, children,
    router)`` is what happens during the first sleep once the gateway is up. Returns the exit code, the
    children and the router process's exit status when the launcher returned (``None``: running)."""
    children: list[_Child] = []
    handlers: dict[int, Any] = {}
    started: list[subprocess.Popen[bytes]] = []

    def process(**kw: Any) -> _Child:
        c = _Child(**kw)
        children.append(c)
        return c

    def popen(cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        # the router: a real process with the launcher's Popen arguments, sleeping in its place
        p = real_popen([sys.executable, "-c", "import time; time.sleep(60)"], **kw)
        started.append(p)
        return p

    fired = {"done": False}
    real_popen = subprocess.Popen

    def sleep(s: float) -> None:
        if len(children) == 3 and not fired["done"]:  # serving: replicas and gateway started
            fired["done"] = True
            on_first_sleep(handlers, children, started[0])

    monkeypatch.setattr(dp.mp, "get_context", lambda kind: types.SimpleNamespace(Process=process))
    monkeypatch.setattr(dp.subprocess, "Popen", popen)
    monkeypatch.setattr(dp, "_healthy", lambda url: True)
    monkeypatch.setattr(dp.signal, "signal", lambda sig, h: handlers.__setitem__(sig, h))
    monkeypatch.setattr(dp, "time", types.SimpleNamespace(sleep=sleep, monotonic=lambda: 0.0))
    monkeypatch.setattr(dp.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr("sglang_v4.utils.bind_error", lambda host, port: None)
    monkeypatch.setattr("sglang_v4.entrypoints.launcher.resolve_model_path", lambda sa: None)
    sa = ServerArgs(device="cpu", dp_size=2, port=30000, model_path="unused")
    router_rc = None
    try:
        code = dp.launch_data_parallel(sa)
        router_rc = started[0].poll()
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
            p.wait(10)
    return code, children, router_rc


def test_ctrl_c_of_the_process_group_is_a_clean_stop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The group's SIGINT stops the gateway and both replicas (exit code 0) as it reaches the
    launcher: the launcher returns 0 and logs no error."""

    def ctrl_c(handlers: dict[int, Any], children: list[_Child], router: Any) -> None:
        for c in children:  # the gateway and the replicas stop on the signal themselves
            c.stop(0)
        handlers[signal.SIGINT](signal.SIGINT, None)

    with caplog.at_level(logging.INFO, logger=dp.__name__):
        code, children, _ = _run_until(monkeypatch, ctrl_c)
    assert len(children) == 3  # two replicas and the gateway
    assert code == 0
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_child_that_fails_is_still_a_failure(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a signal, a replica that exits takes the group down with exit code 1, named."""

    def crash(handlers: dict[int, Any], children: list[_Child], router: Any) -> None:
        children[1].stop(1)

    with caplog.at_level(logging.INFO, logger=dp.__name__):
        code, _, _ = _run_until(monkeypatch, crash)
    assert code == 1
    assert any("DP replica 1" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


def test_the_router_is_out_of_the_launchers_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminal's Ctrl+C goes to the foreground process group: the router process the launcher
    starts is not in the launcher's group (os.getpgid), so sglang-router's wrapper is not
    interrupted mid-call; the launcher stops it (it is gone when the launcher returns)."""
    seen: dict[str, int] = {}

    def look(handlers: dict[int, Any], children: list[_Child], router: Any) -> None:
        seen["router_pgid"] = os.getpgid(router.pid)
        handlers[signal.SIGTERM](signal.SIGTERM, None)

    code, _, router_rc = _run_until(monkeypatch, look)
    assert code == 0
    assert seen["router_pgid"] != os.getpgid(0)
    assert router_rc is not None

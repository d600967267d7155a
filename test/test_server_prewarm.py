"""Backend processes started before the model checks (``entrypoints/prewarm.py``).

The scheduler and detokenizer children are spawned once the port check passes and import while
the parent checks the model directory; they get their job later. Checked here: a job reaches the
child with its own pipe end in place of ``OWN_PIPE`` and runs there; a child that is never given a
job goes away (the pipe closed while it waits, or SIGTERM while it imports) and leaves no process
behind; a failing model-directory check discards the children it started, leaving none.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from multiprocessing.connection import Connection

import pytest
from server_fixture import free_port
from sglang_v4.entrypoints import prewarm
from sglang_v4.entrypoints.launcher import preflight_server
from sglang_v4.server_args import ServerArgs


def report_pid_and_args(pipe: Connection, *args: object) -> None:
    """Run in the child: send the child's pid and the other arguments back through its pipe."""
    pipe.send((os.getpid(), args))


def _alive_children() -> set[int]:
    """Pids of this process's live ``sglang_v4::`` children (other tests' servers and engines
    included: compare before and after)."""
    return {p.pid for p in mp.active_children() if p.name.startswith("sglang_v4::")}


def test_job_runs_in_the_prewarmed_child_with_its_own_pipe_end() -> None:
    child = prewarm.start_child("detokenizer")
    try:
        child.run(report_pid_and_args, prewarm.OWN_PIPE, 7, "x")
        assert child.conn.poll(60), "the child never ran its job"
        pid, args = child.conn.recv()
        assert pid == child.process.pid != os.getpid()
        assert args == (7, "x")
        child.process.join(30)
        assert child.process.exitcode == 0
    finally:
        child.discard()


def test_children_never_given_a_job_exit_and_leave_nothing() -> None:
    before = _alive_children()
    prewarm.start_server_children()
    started = [prewarm.take("scheduler"), prewarm.take("detokenizer")]
    # the scheduler child still imports torch (SIGTERM); the detokenizer one may wait already
    time.sleep(0.5)
    for child in started:
        child.discard()
        assert not child.process.is_alive()
        assert child.process.exitcode in (0, -15), (child.role, child.process.exitcode)
    assert _alive_children() <= before


def test_waiting_child_exits_0_when_its_pipe_closes() -> None:
    child = prewarm.start_child("detokenizer")
    child.run(report_pid_and_args, prewarm.OWN_PIPE)  # proves the child reached its wait
    assert child.conn.poll(60)
    child.conn.recv()
    child.process.join(30)
    second = prewarm.start_child("detokenizer")
    # a child that reaches its wait and finds the pipe closed exits 0, not by signal
    second.conn.close()
    second.process.join(60)
    assert second.process.exitcode == 0
    child.discard()
    second.discard()


def test_failed_model_check_discards_the_started_children(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    started: list[prewarm.PrewarmedChild] = []
    real_start = prewarm.start_child

    def recording_start(role: str) -> prewarm.PrewarmedChild:
        started.append(real_start(role))
        return started[-1]

    monkeypatch.setattr(prewarm, "start_child", recording_start)
    before = _alive_children()
    (tmp_path / "config.json").write_text("{not json")
    args = ServerArgs(model_path=str(tmp_path), device="cpu", port=free_port())
    with pytest.raises(ValueError):
        preflight_server(args)
    assert sorted(c.role for c in started) == ["detokenizer", "scheduler"]
    assert all(not c.process.is_alive() for c in started)
    assert prewarm._started == {}
    assert _alive_children() <= before


def test_unknown_role_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        prewarm.start_child("tokenizer")

"""Backend processes started before the model checks (``entrypoints/prewarm.py``).

The scheduler and detokenizer children are spawned once the port check passes and import while
the parent checks the model directory; they get their job later. Checked here: a job reaches the
child with its own pipe end in place of ``OWN_PIPE`` and runs there; a child that is never given a
job goes away (the pipe closed while it waits, or SIGTERM while it imports) and leaves no process
behind; a failing model-directory check discards the children it started, leaving none.

The rule that decides whether to prewarm at all (``prewarm_pays_off``): a parent that has torch
and transformers imported already checks fast, so it spawns the children only after its checks.
The test process has both imported (``conftest`` imports torch; the tokenizer fixtures and model
checks import transformers), so the tests of the prewarm path patch the rule to say yes, and the
rule itself is checked in fresh interpreters with and without those imports.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from multiprocessing.connection import Connection

import pytest
from server_fixture import free_port, real_env
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


def test_children_never_given_a_job_exit_and_leave_nothing(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(prewarm, "prewarm_pays_off", lambda: True)
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
    monkeypatch.setattr(prewarm, "prewarm_pays_off", lambda: True)  # the prewarm path, always
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


# Run in a fresh interpreter: optionally import torch and transformers, then run preflight_server
# with start_child and the model check replaced by recorders (the check refuses), and print the
# order of events as JSON. No process is spawned and nothing depends on timing.
_ORDER_SCRIPT = """
import json, sys
if sys.argv[1] == "imported":
    import torch, transformers
from sglang_v4.entrypoints import launcher, prewarm
from sglang_v4.server_args import ServerArgs

events = []

class Recorded:
    def __init__(self, role):
        self.role = role
    def discard(self):
        events.append("discard:" + self.role)

def start_child(role):
    events.append("start:" + role)
    return Recorded(role)

def refusing_check(server_args):
    events.append("check")
    raise ValueError("model_path: refused by the test")

prewarm.start_child = start_child
launcher.resolve_model_path = refusing_check
try:
    launcher.preflight_server(ServerArgs(model_path="unused", device="cpu", port=int(sys.argv[2])))
except ValueError:
    pass
print(json.dumps({"events": events, "torch": "torch" in sys.modules,
                  "transformers": "transformers" in sys.modules}))
"""


def _events_in_fresh_interpreter(mode: str, extra_env: dict[str, str] | None = None) -> dict:
    env = real_env(extra_env)
    if not extra_env:
        env.pop("SGLANG_V4_NO_PREWARM", None)
    proc = subprocess.run(
        [sys.executable, "-c", _ORDER_SCRIPT, mode, str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cold_parent_spawns_the_children_before_the_model_check() -> None:
    out = _events_in_fresh_interpreter("cold")
    # nothing imported torch before the check in this interpreter: prewarm pays off
    assert out["torch"] is False
    assert out["events"][:3] == ["start:scheduler", "start:detokenizer", "check"]
    assert sorted(out["events"][3:]) == ["discard:detokenizer", "discard:scheduler"]


def test_parent_with_torch_and_transformers_imported_checks_first_and_spawns_nothing() -> None:
    out = _events_in_fresh_interpreter("imported")
    assert out["torch"] is True and out["transformers"] is True
    # the refused check comes first; the children (spawned by take() after a passing check)
    # never start
    assert out["events"] == ["check"]


def test_no_prewarm_switch_checks_first_in_a_cold_parent() -> None:
    out = _events_in_fresh_interpreter("cold", {"SGLANG_V4_NO_PREWARM": "1"})
    assert out["torch"] is False
    assert out["events"] == ["check"]


@pytest.mark.parametrize("missing", ["torch", "transformers"])
def test_rule_wants_both_modules_imported(monkeypatch, missing: str) -> None:  # noqa: ANN001
    import torch  # noqa: F401  (both present first, whatever ran before)
    import transformers  # noqa: F401

    monkeypatch.delenv("SGLANG_V4_NO_PREWARM", raising=False)
    assert prewarm.prewarm_pays_off() is False
    monkeypatch.delitem(sys.modules, missing)  # restored after the test
    assert prewarm.prewarm_pays_off() is True

"""The model-directory checks run in the prewarmed scheduler child (``prewarm.PrewarmedChild.call``,
``entrypoints/model_config_checks.py``), so that ``launch_server``'s HTTP process never imports torch.

Checked here: a waiting child answers calls (value, exception, log records at the parent's
levels) before it runs its job, and a child that cannot answer leaves the call to the parent;
``check_model_dir`` with a scheduler child as ``checker`` gives what it gives in process (the
oracle: the same function with ``checker=None``, the checks run one after the other here): the
same tokenizer, the same first error when several checks fail, the same warnings (logged in the
child, emitted here); and the HTTP
process of a running server has no torch library mapped (oracle: ``/proc/PID/maps``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from server_fixture import make_fake_model_dir
from sglang_v4.configs.presets import get_preset, without_quantization
from sglang_v4.entrypoints import prewarm
from sglang_v4.entrypoints.launcher import ALLOW_LONGER_CONTEXT_ENV, check_model_dir

LOGGER = "sglang_v4.test_prewarm_checks"


def add(a: int, b: int) -> int:
    """Run in the child: ``a + b``."""
    return a + b


def refuse(message: str) -> None:
    """Run in the child: raise ``ValueError(message)``."""
    raise ValueError(message)


def log_and_return(value: int) -> int:
    """Run in the child: log at DEBUG, INFO and WARNING, return ``value``."""
    log = logging.getLogger(LOGGER)
    log.debug("debug %d", value)
    log.info("info %d", value)
    log.warning("warning %d", value)
    return value


def own_pid(*_: Any) -> int:
    """The pid of the process that runs it."""
    return os.getpid()


def report_pid(pipe: Any) -> None:
    """The child's job: send its pid back through its pipe."""
    pipe.send(os.getpid())


def test_waiting_child_answers_calls_then_runs_its_job(caplog: pytest.LogCaptureFixture) -> None:
    child = prewarm.start_child("detokenizer")
    try:
        assert child.call(add, 2, 3)() == 5
        assert child.call(own_pid)() == child.process.pid != os.getpid()
        with pytest.raises(ValueError, match=r"^model_path: refused$"):
            child.call(refuse, "model_path: refused")()
        caplog.set_level(logging.INFO, logger=LOGGER)
        assert child.call(log_and_return, 7)() == 7
        got = [(r.levelname, r.getMessage(), r.process) for r in caplog.records if r.name == LOGGER]
        # the parent's level (INFO) applies: the DEBUG record is dropped
        assert got == [("INFO", "info 7", child.process.pid), ("WARNING", "warning 7", child.process.pid)]
        # an answer nobody waits for is dropped, its records too; the next call gets its own
        caplog.clear()
        child.call(log_and_return, 8)
        child.call(refuse, "never waited for")
        assert child.call(add, 4, 5)() == 9
        assert [r for r in caplog.records if r.name == LOGGER] == []
        child.call(add, 0, 0)  # not waited for: run() reads it before sending the job
        child.run(report_pid, prewarm.OWN_PIPE)
        assert child.conn.poll(60), "the child never ran its job"
        assert child.conn.recv() == child.process.pid
        child.process.join(30)
        assert child.process.exitcode == 0
    finally:
        child.discard()


def test_call_to_a_child_that_cannot_answer_runs_here() -> None:
    gone = prewarm.start_child("detokenizer")
    gone.process.kill()
    gone.process.join(30)
    assert gone.call(own_pid)() == os.getpid()  # the answer never comes: run here
    closed = prewarm.start_child("detokenizer")
    closed.discard()  # the pipe closed: the call cannot be sent
    assert closed.call(add, 1, 1)() == 2
    assert prewarm.started("scheduler") is None  # nothing was started for a later take()


@pytest.fixture(scope="module")
def scheduler_child():  # noqa: ANN201 - a generator fixture
    """A prewarmed scheduler child (it imports torch, transformers and the scheduler), shared by
    the comparisons below: it answers calls until it is discarded."""
    child = prewarm.start_child("scheduler")
    yield child
    child.discard()


def _model_dir(root: Path, name: str, tokenizer: bool = True, weights: str | None = "empty") -> Path:
    """A model directory with the tiny preset's config (unquantized), the DeepSeek tokenizer
    (unless ``tokenizer`` is False) and a safetensors file: ``"empty"`` (no tensor, which the
    checkpoint check accepts), ``"wrong"`` (one tensor the model does not have) or none."""
    d = make_fake_model_dir(root / name, with_tokenizer=tokenizer)
    (d / "model.safetensors").unlink()
    cfg = without_quantization(dict(get_preset("tiny")))
    cfg.update(model_type="deepseek_v4", architectures=["DeepseekV4ForCausalLM"])
    (d / "config.json").write_text(json.dumps(cfg))
    if weights == "empty":
        (d / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    elif weights == "wrong":
        save_file({"not.a.model.tensor": torch.zeros(2)}, str(d / "model.safetensors"))
    return d


def _outcome(path: Path, checker: Any, caplog: pytest.LogCaptureFixture, **kw: Any) -> tuple:
    """``check_model_dir``'s result as comparable values: the error (type, message) or the
    tokenizer's ids for a sample text, and the warnings it logged."""
    caplog.clear()
    try:
        tok = check_model_dir(str(path), checker=checker, **kw)
        result: Any = ("ok", None if tok is None else list(tok.encode("Hello, 世界")))
    except Exception as e:  # noqa: BLE001 - compared below
        result = (type(e).__name__, str(e))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    return result, warnings


@pytest.mark.parametrize(
    ("case", "kw"),
    [
        ("good", {}),
        ("good", {"load_format": "dummy", "skip_tokenizer_init": True}),
        # several checks fail: the first of check_model_dir's order is raised
        ("no_tokenizer", {"model_overrides": {"architectures": ["LlamaForCausalLM"]}}),
        ("no_tokenizer", {"page_size": 100}),
        ("no_tokenizer_wrong_weights", {}),
        ("no_weights_no_tokenizer", {}),
        ("wrong_weights", {}),
        ("wrong_weights", {"load_format": "dummy"}),
        ("good", {"context_length": 10**7}),
        ("good", {"quantization": "awq"}),
    ],
)
def test_checks_in_the_child_give_what_they_give_in_process(
    scheduler_child: prewarm.PrewarmedChild,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    kw: dict[str, Any],
) -> None:
    d = _model_dir(
        tmp_path,
        case,
        tokenizer="no_tokenizer" not in case,
        weights=None if "no_weights" in case else "wrong" if "wrong" in case else "empty",
    )
    if ALLOW_LONGER_CONTEXT_ENV in os.environ:  # the child was spawned without it
        monkeypatch.delenv(ALLOW_LONGER_CONTEXT_ENV)
    caplog.set_level(logging.INFO)
    here = _outcome(d, None, caplog, **kw)
    there = _outcome(d, scheduler_child, caplog, **kw)
    assert there == here
    if case == "good" and not kw:  # the warning about a checkpoint of no tensors, from the child
        assert any("holds no tensors" in w for w in there[1]), there
    assert scheduler_child.process.is_alive()  # still waiting: ready for the next call
    shutil.rmtree(d)


def test_http_process_of_a_server_maps_no_torch(plain_fake_server) -> None:  # noqa: ANN001
    """The shared fake server was started from this (torch-importing) test process, as a fresh
    interpreter that prewarms: its checks ran in its scheduler child."""
    maps = Path(f"/proc/{plain_fake_server.proc.pid}/maps").read_text()
    assert "libtorch" not in maps
    assert plain_fake_server.proc.poll() is None

"""The embedded default model: written once, atomically, reused; loads into HF's model.

Processes that need it at the same time (the workers of ``pytest -n``, servers started together)
write it once and all get the same complete directory: the oracle is a single cold build."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from sglang_v4.configs.presets import get_preset
from sglang_v4.model_loader import load_state_dict
from sglang_v4.tools.default_model import DEFAULT_MODEL_NAME, ensure_default_model
from sglang_v4.tools.make_checkpoint import make_random_state_dict

#: the writers' lock file, left in the cache directory next to the model
LOCK_NAME = f".{DEFAULT_MODEL_NAME}.lock"


def _leftovers(root: Path) -> list[str]:
    """What a writer left in the cache directory ``root`` besides the model and its lock file."""
    return sorted(p for p in os.listdir(root) if p not in (DEFAULT_MODEL_NAME, LOCK_NAME))


@pytest.fixture(scope="module")
def cold_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``(cache dir, model path)``: one cold build by a single process, through
    ``$SGLANG_V4_CACHE``; shared by the reuse test and, as the oracle, the concurrency test (both
    only read it)."""
    root = tmp_path_factory.mktemp("cold_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SGLANG_V4_CACHE", str(root))
        return root, ensure_default_model()


def test_default_model_written_once_and_reused(
    cold_cache: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path, path = cold_cache
    monkeypatch.setenv("SGLANG_V4_CACHE", str(tmp_path))
    assert path == os.path.join(str(tmp_path), DEFAULT_MODEL_NAME)
    assert _leftovers(tmp_path) == []  # no temp dir left behind
    for fn in ("config.json", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"):
        assert os.path.exists(os.path.join(path, fn)), fn
    cfg = json.loads(Path(path, "config.json").read_text())
    assert cfg["layer_types"] == get_preset("tiny")["layer_types"] and cfg["dtype"] == "float32"

    index = Path(path, "model.safetensors.index.json")
    mtime = index.stat().st_mtime_ns
    assert ensure_default_model() == path  # env cache dir again
    assert ensure_default_model(str(tmp_path)) == path  # explicit cache dir
    assert index.stat().st_mtime_ns == mtime  # reused, not rewritten

    loaded = load_state_dict(path, progress=False)
    ref = make_random_state_dict(get_preset("tiny"), 0)
    assert set(loaded) == set(ref) and all(torch.equal(loaded[k], ref[k]) for k in ref)


def test_first_use_logs_where_the_model_goes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # a fresh machine's first launch says where the weights are written (and how to move them)
    with caplog.at_level(logging.INFO, logger="sglang_v4.tools.default_model"):
        path = ensure_default_model(str(tmp_path))
    lines = [r.getMessage() for r in caplog.records if r.name == "sglang_v4.tools.default_model"]
    assert len(lines) == 1 and os.path.join(str(tmp_path), DEFAULT_MODEL_NAME) in lines[0]
    assert "SGLANG_V4_CACHE" in lines[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sglang_v4.tools.default_model"):
        assert ensure_default_model(str(tmp_path)) == path  # reused: nothing written, nothing logged
    assert [r for r in caplog.records if r.name == "sglang_v4.tools.default_model"] == []


def test_incomplete_directory_is_replaced(tmp_path: Path) -> None:
    stale = tmp_path / DEFAULT_MODEL_NAME
    stale.mkdir()
    (stale / "junk.txt").write_text("half-written by an old writer")
    path = ensure_default_model(str(tmp_path))
    assert not os.path.exists(os.path.join(path, "junk.txt"))
    assert os.path.exists(os.path.join(path, "config.json"))
    assert _leftovers(tmp_path) == [] and os.path.isdir(path)


# a process that imports the writer, says it is ready, waits for the go file, then asks for the model
_CONCURRENT_USER = """
import logging, os, sys, time
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="LOG %(name)s %(message)s")
from sglang_v4.tools.default_model import ensure_default_model
root, ready, go = sys.argv[1:]
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.005)
print("PATH " + ensure_default_model(root), flush=True)
"""


def test_concurrent_first_uses_write_one_complete_model(tmp_path: Path, cold_cache: tuple[Path, str]) -> None:
    # two processes released together on an empty cache (pytest -n workers, servers started at once)
    root = tmp_path / "cache"
    go = tmp_path / "go"
    procs = []
    for i in range(2):
        cmd = [sys.executable, "-c", _CONCURRENT_USER, str(root), str(tmp_path / f"ready{i}"), str(go)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.time() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), [p.poll() for p in procs]
        time.sleep(0.01)
    go.touch()
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    path = root / DEFAULT_MODEL_NAME
    assert [o.splitlines()[-1] for o in outs] == [f"PATH {path}"] * 2, outs
    # written once: one process wrote it, the other waited on the lock and found it complete
    writers = [o for o in outs if "LOG sglang_v4.tools.default_model Writing" in o]
    assert len(writers) == 1, outs
    assert _leftovers(root) == []

    # the oracle: a single cold build, file by file
    cold = Path(cold_cache[1])
    names = sorted(os.listdir(cold))
    assert sorted(os.listdir(path)) == names and "model.safetensors.index.json" in names
    for name in names:
        assert (path / name).read_bytes() == (cold / name).read_bytes(), name

"""The embedded default model: written once, atomically, reused; loads into HF's model."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import torch
from sglang_v4.configs.presets import get_preset
from sglang_v4.model_loader import load_state_dict
from sglang_v4.tools.default_model import DEFAULT_MODEL_NAME, ensure_default_model
from sglang_v4.tools.make_checkpoint import make_random_state_dict


def test_default_model_written_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_V4_CACHE", str(tmp_path))
    path = ensure_default_model()
    assert path == os.path.join(str(tmp_path), DEFAULT_MODEL_NAME)
    assert [p for p in os.listdir(tmp_path) if p != DEFAULT_MODEL_NAME] == []  # no temp dir left behind
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
    assert sorted(os.listdir(tmp_path)) == [DEFAULT_MODEL_NAME]

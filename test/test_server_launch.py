"""First impressions: a bad ``--model-path`` gets one clear line and exit code 1.

A directory without ``config.json``, a Hugging Face hub id where a directory is expected, a file,
a directory without weights or without tokenizer files: each prints one log line saying what is
expected and how to make a model directory (``python -m sglang_v4.tools.make_checkpoint``), with
no traceback and no tokenizer red herring, before any child process starts. The ``Engine`` raises
the same message as a ``ValueError``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from server_fixture import REPO, free_port, make_fake_model_dir

pytestmark = pytest.mark.timeout(300)


def _launch(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "sglang_v4.launch_server", "--port", str(free_port()), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def _one_line(p: subprocess.CompletedProcess[str]) -> str:
    out = (p.stdout + p.stderr).strip().splitlines()
    assert p.returncode == 1, p.stdout + p.stderr
    assert len(out) == 1, "\n".join(out)
    assert "Traceback" not in out[0]
    return out[0]


def test_directory_without_config_json(tmp_path: Path) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    line = _one_line(_launch(["--model-path", str(d)], tmp_path))
    assert f"model_path: '{d}' has no config.json" in line
    assert "python -m sglang_v4.tools.make_checkpoint DIR --preset tiny" in line
    assert "tokenizer" not in line.split("(")[0]  # the cause, not a tokenizer red herring


def test_hub_id_where_a_directory_is_expected(tmp_path: Path) -> None:
    line = _one_line(_launch(["--model-path", "deepseek-ai/DeepSeek-V4-Flash"], tmp_path))
    assert "'deepseek-ai/DeepSeek-V4-Flash' is not a local directory" in line
    assert "huggingface-cli download deepseek-ai/DeepSeek-V4-Flash --local-dir DIR" in line
    assert "sglang_v4.tools.make_checkpoint" in line


@pytest.mark.parametrize("case", ["file", "no_weights", "no_tokenizer", "other_model"])
def test_other_bad_directories(tmp_path: Path, case: str) -> None:
    d = make_fake_model_dir(tmp_path)  # config.json, tokenizer files, an empty model.safetensors
    args = ["--model-path", str(d)]
    if case == "file":
        args = ["--model-path", str(d / "config.json")]
        want = "is a file; expected a Hugging Face-layout model directory"
    elif case == "no_weights":
        (d / "model.safetensors").unlink()
        want = "has no *.safetensors weights (use --load-format dummy for random weights)"
    elif case == "no_tokenizer":
        for f in ("tokenizer.json", "tokenizer_config.json"):
            (d / f).unlink()
        want = "tokenizer_path: "
    else:
        (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
        want = "has model_type 'llama'; sglang-v4 serves DeepSeek-V4 models"
    assert want in _one_line(_launch(args, tmp_path))


def test_engine_raises_the_same_message(tmp_path: Path) -> None:
    from sglang_v4 import Engine

    with pytest.raises(ValueError, match="has no config.json; expected a Hugging Face-layout"):
        Engine(model_path=str(tmp_path))

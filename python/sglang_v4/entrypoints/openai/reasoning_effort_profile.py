"""The reasoning-effort profile of a checkpoint: which table of effort prompts its chat encoding
renders ``reasoning_effort`` with (:data:`~sglang_v4.entrypoints.chat_encoding.REASONING_EFFORT_PROFILES`),
read from ``config.json`` or from the checkpoint's own DeepSeek encoder file, as SGLang decides it.
"""

from __future__ import annotations

import json
import os
import re

from sglang_v4.entrypoints.chat_encoding import REASONING_EFFORT_PROFILES

__all__ = ["EFFORT_PROFILE_CONFIG_KEY", "ENCODER_FILE", "detect_reasoning_effort_profile"]

#: ``config.json`` key naming a checkpoint's effort profile (SGLang's name), for converted
#: checkpoints without DeepSeek's encoder file.
EFFORT_PROFILE_CONFIG_KEY = "dsv4_reasoning_effort_profile"
#: DeepSeek's reference encoder shipped with a checkpoint.
ENCODER_FILE = os.path.join("encoding", "encoding_dsv4.py")


def detect_reasoning_effort_profile(model_path: str | None) -> str:
    """The reasoning-effort profile (:data:`~sglang_v4.entrypoints.chat_encoding.REASONING_EFFORT_PROFILES`)
    of the checkpoint at ``model_path``: ``config.json``'s ``dsv4_reasoning_effort_profile`` when
    set; else ``"official"`` when the checkpoint's own encoder (``encoding/encoding_dsv4.py``)
    defines the per-tier table ``REASONING_EFFORT_PROMPTS`` (DeepSeek-V4-Flash-0731 and later:
    their ``config.json`` and tokenizer files are those of the first V4 checkpoints, so the encoder
    is what tells them apart, as SGLang decides it); else ``"preview"`` (the first V4 checkpoints'
    encoder defines only ``REASONING_EFFORT_MAX``; also no directory or no encoder file).

    Raises:
        ValueError: ``config.json`` names an unknown profile (names the key and the file).
    """
    if not model_path or not os.path.isdir(model_path):
        return "preview"
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8-sig") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        cfg = {}
    named = cfg.get(EFFORT_PROFILE_CONFIG_KEY) if isinstance(cfg, dict) else None
    if named is not None:
        if named not in REASONING_EFFORT_PROFILES:
            raise ValueError(
                f"{os.path.join(model_path, 'config.json')}: {EFFORT_PROFILE_CONFIG_KEY} must be one of "
                f"{list(REASONING_EFFORT_PROFILES)}; got {named!r}"
            )
        return named
    try:
        with open(os.path.join(model_path, ENCODER_FILE), encoding="utf-8-sig") as f:
            encoder = f.read()
    except (OSError, UnicodeDecodeError):
        return "preview"
    if re.search(r"^REASONING_EFFORT_PROMPTS\s*(:[^=\n]*)?=", encoder, re.MULTILINE):
        return "official"
    return "preview"

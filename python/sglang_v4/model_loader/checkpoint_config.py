"""The fields of a checkpoint's ``config.json`` that the weight loader reads itself (the model
config proper is ``configs/``): the whole file as a dict, and ``quantization_config``'s
``weight_block_size`` (the block of the FP8 scales, ``weight_scale_inv``)."""

from __future__ import annotations

import json
import os


def checkpoint_config(model_path: str) -> dict:
    """The checkpoint's ``config.json`` (``{}`` when there is none, e.g. a lone ``.safetensors``);
    ``ValueError`` naming the file when it is not a JSON object."""
    cfg = os.path.join(model_path, "config.json") if os.path.isdir(model_path) else None
    if cfg and os.path.exists(cfg):
        with open(cfg, encoding="utf-8-sig") as f:
            raw = json.load(f)
        if not isinstance(raw, dict):
            raise ValueError(f"{cfg}: expected a JSON object, got {type(raw).__name__}")
        return raw
    return {}


def weight_block_size(model_path: str) -> tuple[int, int]:
    """``quantization_config.weight_block_size`` of the checkpoint's config.json; 128x128 (DeepSeek's
    block) when the config has no ``quantization_config`` or the key is absent or null.

    Raises:
        ValueError: naming the field: a ``quantization_config`` that is not an object (a string
            such as ``"fp8"``), or a ``weight_block_size`` that is not two positive integers.
    """
    qc = checkpoint_config(model_path).get("quantization_config")
    if qc is None:
        return 128, 128
    if not isinstance(qc, dict):
        raise ValueError(
            f"{model_path}: quantization_config: expected an object (DeepSeek's block FP8: "
            f'{{"quant_method": "fp8", "weight_block_size": [128, 128]}}), got {type(qc).__name__} {qc!r}'
        )
    bs = qc.get("weight_block_size")
    if bs is None:
        return 128, 128
    ints = isinstance(bs, (list, tuple)) and all(isinstance(b, int) and not isinstance(b, bool) for b in bs)
    if not (ints and len(bs) == 2 and min(bs) > 0):
        raise ValueError(
            f"{model_path}: quantization_config.weight_block_size: expected two positive integers "
            f"[rows, columns], got {bs!r}"
        )
    return int(bs[0]), int(bs[1])

"""Checkpoint loading: safetensors (sharded or not), official DeepSeek or HF tensor names,
FP8 / FP4 dequantization on load. See :mod:`sglang_v4.model_loader.loader`."""

from .loader import (
    checkpoint_files,
    checkpoint_shapes,
    iter_state_dict,
    keeps_fp32,
    load_state_dict,
    load_weights_into,
)

__all__ = [
    "checkpoint_files",
    "checkpoint_shapes",
    "iter_state_dict",
    "keeps_fp32",
    "load_state_dict",
    "load_weights_into",
]

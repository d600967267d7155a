"""Checkpoint loading: safetensors (sharded or not), official DeepSeek or HF tensor names, FP8 /
FP4 weights kept quantized or dequantized on load, dummy weights, and the model builder
(:func:`~sglang_v4.model_loader.builder.get_model`). See :mod:`sglang_v4.model_loader.loader` and
:mod:`sglang_v4.model_loader.weight_loader`."""

from .loader import (
    checkpoint_files,
    checkpoint_nbytes,
    checkpoint_shapes,
    iter_state_dict,
    keeps_fp32,
    load_state_dict,
)
from .weight_loader import check_checkpoint, load_weights_into, weight_nbytes

__all__ = [
    "check_checkpoint",
    "checkpoint_files",
    "checkpoint_nbytes",
    "checkpoint_shapes",
    "iter_state_dict",
    "keeps_fp32",
    "load_state_dict",
    "load_weights_into",
    "weight_nbytes",
]

"""The routed experts' stored format, read from one safetensors header entry of a checkpoint.

DeepSeek's V4 releases store the routed experts as packed FP4 (e2m1, two values per byte: header
dtype ``I8`` or ``U8``, or ``F4`` where a writer names torch's ``float4_e2m1fn_x2``; one ue8m0
scale per 32 inputs) and say so with ``config.json``'s ``expert_dtype: fp4``. FP8 repackages store
them as ``F8_E4M3`` with one ue8m0 scale per 128x128 block, and the converters that write them
drop ``expert_dtype``; the Base releases say ``expert_dtype: fp8``. A config can therefore be
wrong about its own tensors, and following it costs either accuracy (FP8 experts re-quantized to
FP4) or memory (FP4 experts dequantized to bf16, 4x the bytes).

:func:`stored_expert_format` reads the header dtype of one routed-expert weight (no tensor data)
before the model is built; where it is definite (FP4-packed or FP8 e4m3) it decides the experts'
in-memory format (:func:`~sglang_v4.layers.quantization.resolve_quantization`), otherwise (a float
dtype, an unreadable header, no checkpoint) the config does. :func:`expert_format_warning` is the
one line logged when the config and the header disagree.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from safetensors import safe_open

from sglang_v4.layers.quantization import declared_expert_dtype

from .loader import checkpoint_files, index_weight_map

#: Header dtypes of packed FP4 routed experts (``F4*`` is matched by prefix).
FP4_HEADER_DTYPES = ("I8", "U8")
#: Header dtype of FP8 routed experts.
FP8_HEADER_DTYPE = "F8_E4M3"

# official ``layers.L.ffn.experts.E.w1.weight`` (``model.``-prefixed as transformers saves it) and
# HF's packed ``model.layers.L.mlp.experts.gate_up_proj`` / ``down_proj``; never ``mtp.*``
_EXPERT_WEIGHT = re.compile(
    r"^(model\.)?layers\.\d+\.ffn\.experts\.\d+\.w[123]\.weight$"
    r"|^model\.layers\.\d+\.mlp\.experts\.(gate_up_proj|down_proj)$"
)

_LABELS = {"fp4": "packed FP4 (e2m1)", "fp8": "FP8 (e4m3)", None: "unquantized"}


@dataclass(frozen=True)
class StoredExpertFormat:
    """How a checkpoint stores its routed experts.

    Attributes:
        fmt: ``"fp4"`` (packed e2m1), ``"fp8"`` (e4m3) or ``None`` (another dtype, unreadable,
            no routed-expert tensor or no checkpoint: not definite).
        key: the tensor whose header was read (``None`` when none was found).
        header_dtype: its safetensors dtype string (``"I8"``, ``"F8_E4M3"``, ``"BF16"``, ...).
    """

    fmt: str | None = None
    key: str | None = None
    header_dtype: str | None = None


def format_of_header_dtype(dtype: str) -> str | None:
    """``"fp4"`` for ``I8`` / ``U8`` / ``F4*``, ``"fp8"`` for ``F8_E4M3``, else ``None``."""
    if dtype in FP4_HEADER_DTYPES or dtype.startswith("F4"):
        return "fp4"
    return "fp8" if dtype == FP8_HEADER_DTYPE else None


def _first_expert_key(keys: list[str]) -> str | None:
    found = sorted(k for k in keys if _EXPERT_WEIGHT.match(k))
    return found[0] if found else None


def stored_expert_format(model_path: str) -> StoredExpertFormat:
    """The routed experts' stored format: the header dtype of the first (by name) routed-expert
    weight of the checkpoint at ``model_path`` (a directory or one ``.safetensors`` file).

    Only headers are read: the index's ``weight_map`` (or each file's header, until an expert
    tensor is found) and the dtype of that one tensor. Never raises: a missing or unreadable
    checkpoint gives ``StoredExpertFormat()`` (the loader reports it by name later).
    """
    key: str | None = None
    try:
        weight_map = index_weight_map(model_path)
        if weight_map:
            key = _first_expert_key(list(weight_map))
            files = [os.path.join(model_path, weight_map[key])] if key is not None else []
        else:
            files = checkpoint_files(model_path)
        for path in files:
            with safe_open(path, framework="pt") as f:
                k = key or _first_expert_key(list(f.keys()))
                if k is None:
                    continue
                key = k
                dtype = f.get_slice(k).get_dtype()
                return StoredExpertFormat(format_of_header_dtype(dtype), k, dtype)
    except Exception:  # noqa: BLE001 - not definite: the config decides, the loader names the fault
        return StoredExpertFormat(None, key, None)
    return StoredExpertFormat()


def expert_format_warning(hf_config: Any, stored: StoredExpertFormat) -> str | None:
    """One line naming both formats when the config and the stored experts disagree, else ``None``.

    Disagreement: the header is definite (``stored.fmt``) and the config declares another format
    (:func:`~sglang_v4.layers.quantization.declared_expert_dtype`: ``expert_dtype``, else what
    ``quantization_config.quant_method`` implies, else unquantized).
    """
    if stored.fmt is None:
        return None
    declared, source = declared_expert_dtype(hf_config)
    if declared == stored.fmt:
        return None
    want = _LABELS.get(declared, repr(declared))
    if stored.fmt == "fp4":
        keep = "kept packed FP4 where the model keeps quantized weights"
    else:
        keep = "dequantized to the model dtype, not re-quantized to FP4"
    return (
        f"routed experts: config.json says {want} ({source}) but the checkpoint stores them as "
        f"{_LABELS[stored.fmt]} ({stored.key}: {stored.header_dtype}); following the checkpoint: {keep}"
    )

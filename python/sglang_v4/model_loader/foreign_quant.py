"""Quantized checkpoint formats other than DeepSeek's, recognised so that they are refused by name.

sglang-v4 reads DeepSeek's block FP8 / FP4 weights (``model_loader/quant.py``) and float ones. A
checkpoint of another method whose ``config.json`` carries no ``quantization_config`` (stripped by
a re-save, or kept in a file of its own) would otherwise fail on "missing" tensors, or -- an
integer tensor in a float weight's place -- be read as if its packed integers were weights. This
module names such a checkpoint's method from what it stores:

* tensor-name suffixes of the methods' layouts: GPTQ / AWQ ``qweight`` / ``qzeros`` / ``scales`` /
  ``g_idx`` (AutoGPTQ, AutoAWQ; vllm-project/vllm ``gptq.py`` / ``awq.py``), compressed-tensors
  ``weight_packed`` / ``weight_shape`` / ``weight_global_scale`` / ``weight_zero_point``
  (neuralmagic/compressed-tensors), ModelOpt ``weight_scale_2`` / ``input_scale``
  (NVIDIA/TensorRT-Model-Optimizer), bitsandbytes ``absmax`` / ``quant_map`` / ``quant_state.*`` /
  ``SCB`` (bitsandbytes-foundation/bitsandbytes), MXFP4 ``*_blocks`` / ``*_scales`` of routed
  experts (openai/gpt-oss's layout, read by transformers' ``Mxfp4Config``);
* an integer tensor without a scale where a float weight belongs (only ``tid2eid``, the hash
  routing table, is an integer tensor of the model);
* the side files in which GPTQ / AWQ tools write their quantization when ``config.json`` has none
  (``quantize_config.json``, ``quant_config.json``: vLLM reads them from there, vllm-project/vllm
  ``get_quant_config``).
"""

from __future__ import annotations

import json
import os

#: ``(suffix of a stored tensor's name, the method it belongs to)``, tested in order.
FOREIGN_TENSOR_SUFFIXES: tuple[tuple[str, str], ...] = (
    (".qweight", "GPTQ / AWQ (packed int4 qweight)"),
    (".qzeros", "GPTQ / AWQ (packed int4 qweight)"),
    (".g_idx", "GPTQ (packed int4 qweight)"),
    (".scales", "GPTQ / AWQ (packed int4 qweight)"),
    (".weight_packed", "compressed-tensors (packed int / FP4 weight_packed)"),
    (".weight_shape", "compressed-tensors (packed int / FP4 weight_packed)"),
    (".weight_global_scale", "compressed-tensors NVFP4"),
    (".weight_zero_point", "compressed-tensors (asymmetric int)"),
    (".weight_scale_2", "NVIDIA ModelOpt NVFP4"),
    (".input_scale", "static-activation-scale FP8 / FP4 (ModelOpt, vLLM)"),
    (".absmax", "bitsandbytes"),
    (".quant_map", "bitsandbytes"),
    (".SCB", "bitsandbytes int8"),
    ("_blocks", "MXFP4 (gpt-oss layout)"),
    ("_scales", "MXFP4 (gpt-oss layout)"),
)
#: Float safetensors header dtypes (what a weight without a scale is stored as).
FLOAT_HEADER_DTYPES = ("BF16", "F16", "F32", "F64")
#: Side files of GPTQ / AWQ exports holding their quantization (``bits`` / ``w_bit``).
QUANT_SIDE_FILES = ("quantize_config.json", "quant_config.json")
SUPPORTED = "sglang-v4 reads DeepSeek's block FP8 / FP4 weights and unquantized (float) ones"


def foreign_tensor_format(key: str) -> str | None:
    """The quantization method a stored tensor name belongs to, or ``None`` (one of DeepSeek's or a
    plain weight). ``key`` is the name as stored (HF or official spelling)."""
    if ".quant_state." in key:
        return "bitsandbytes"
    for suffix, method in FOREIGN_TENSOR_SUFFIXES:
        if key.endswith(suffix):
            return method
    return None


def check_tensor_name(path: str, key: str) -> None:
    """Refuse a stored tensor whose name belongs to another method's layout
    (:data:`FOREIGN_TENSOR_SUFFIXES`).

    Args:
        path: the file holding it (for the message).
        key: its stored name (HF or official spelling).

    Raises:
        ValueError: one line naming ``path``, ``key`` and the method.
    """
    method = foreign_tensor_format(key)
    if method is not None:
        raise ValueError(
            f"{path}: {key}: a tensor of {method} quantization, which is not supported; {SUPPORTED} "
            "(dequantize the checkpoint, or use DeepSeek's published FP8 weights)"
        )


def check_unscaled_dtype(path: str, key: str, header_dtype: str) -> None:
    """Refuse an integer / bool tensor stored without a scale, other than ``tid2eid`` (the hash
    routing table): packed integers that would otherwise be converted to float weights.

    Args:
        path: the file holding it (for the message).
        key: its stored name.
        header_dtype: its safetensors dtype (``"BF16"``, ``"I32"``, ``"F8_E4M3"``, ...); FP8 ones
            pass here (the loader names the block scale an FP8 weight lacks).

    Raises:
        ValueError: one line naming ``path``, ``key`` and the dtype.
    """
    if key.endswith("tid2eid") or header_dtype in FLOAT_HEADER_DTYPES or header_dtype.startswith("F8_"):
        return
    raise ValueError(
        f"{path}: {key}: {header_dtype} (integer) weight without a scale: packed / integer-quantized "
        f"weights are not supported; {SUPPORTED}"
    )


def check_quant_side_files(model_path: str) -> None:
    """Refuse a GPTQ / AWQ export whose quantization sits in a side file (:data:`QUANT_SIDE_FILES`).

    Raises:
        ValueError: naming the file and its ``bits`` / ``w_bit`` (and ``quant_method`` when it
            gives one); also for a side file that is not a readable JSON object.
    """
    for name in QUANT_SIDE_FILES:
        path = os.path.join(model_path, name)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8-sig") as f:
                cfg = json.load(f)
            if not isinstance(cfg, dict):
                raise ValueError("not an object")
        except (OSError, ValueError) as e:
            raise ValueError(f"model_path: {path} is not a readable JSON object ({e})") from None
        bits = cfg.get("bits", cfg.get("w_bit"))
        method = cfg.get("quant_method")
        if bits is None and method is None:
            continue
        what = f"quant_method {method!r}" if method is not None else ("AWQ" if "w_bit" in cfg else "GPTQ")
        raise ValueError(
            f"model_path: {path}: {what} quantization (bits {bits!r}) is not supported; {SUPPORTED}"
        )

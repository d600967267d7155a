"""Stream a checkpoint into the runtime model, tensor by tensor, in the model's weight formats.

Reads the plan of :mod:`sglang_v4.model_loader.loader` (safetensors headers, official or HF
names, scales attached to their weights) and writes each stored tensor straight into its
destination: FP8 / FP4 weights copied as published where the model keeps them quantized
(``layers/quantization.py``: a tensor ``X`` with a sibling buffer ``X_scale_inv``), dequantized on
the destination device where it does not, quantized where the model is quantized and the
checkpoint is not. Host memory holds one stored tensor at a time.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass

import torch
from safetensors import safe_open
from tqdm.auto import tqdm

from sglang_v4.layers.quantization import SCALE_SUFFIX

from .loader import _Plan, _plan, _Source, keeps_fp32
from .quant import (
    E8M0_DTYPE,
    FP8_DTYPE,
    dequantize_fp4,
    dequantize_fp8_block,
    fp4_scale_bytes,
    quantize_fp4,
    quantize_fp8_block,
    scale_to_float,
)

logger = logging.getLogger(__name__)


def _check_shapes(expected: dict[str, tuple[int, ...]], found: dict[str, tuple[int, ...]]) -> list[str]:
    problems = []
    for name, shape in expected.items():
        if name not in found:
            problems.append(f"{name}: expected shape {list(shape)}, found missing")
        elif tuple(found[name]) != tuple(shape):
            problems.append(f"{name}: expected shape {list(shape)}, found shape {list(found[name])}")
    for name, shape in found.items():
        if name not in expected:
            problems.append(
                f"{name}: unexpected tensor in checkpoint (shape {list(shape)}), not in the model"
            )
    return problems


@dataclass
class _Target:
    """A model tensor the loader fills: its format and, when quantized, its scale buffer."""

    name: str
    tensor: torch.Tensor
    kind: str  # "plain", "fp8" (e4m3 + float32 128x128 block scales), "fp4" (packed e2m1 + ue8m0 bytes)
    scale: torch.Tensor | None = None

    @property
    def logical_shape(self) -> tuple[int, ...]:
        t = self.tensor
        if self.kind == "fp4":
            return (*t.shape[:-1], 2 * t.shape[-1])
        return tuple(t.shape)


def _targets(state: dict[str, torch.Tensor]) -> dict[str, _Target]:
    """The loadable tensors of a model's state dict. A tensor ``X`` with a sibling
    ``X_scale_inv`` is quantized (float8_e4m3fn: FP8 block; uint8: packed FP4)."""
    out: dict[str, _Target] = {}
    for name, t in state.items():
        if name.endswith(SCALE_SUFFIX) and name[: -len(SCALE_SUFFIX)] in state:
            continue
        scale = state.get(name + SCALE_SUFFIX)
        if scale is None:
            out[name] = _Target(name, t, "plain")
        elif t.dtype == FP8_DTYPE:
            out[name] = _Target(name, t, "fp8", scale)
        elif t.dtype == torch.uint8:
            out[name] = _Target(name, t, "fp4", scale)
        else:
            raise ValueError(f"{name}: a {t.dtype} tensor with a {SCALE_SUFFIX} buffer is no known format")
    return out


def _read(src: _Source, handles: dict[str, object], plan: _Plan, device: torch.device) -> tuple:
    """The stored tensor and its scale (or None), moved to ``device``."""
    w = handles[plan.key_file[src.key]].get_tensor(src.key).to(device)  # type: ignore[attr-defined]
    if src.scale is None:
        return w, None
    return w, handles[plan.key_file[src.scale]].get_tensor(src.scale).to(device)  # type: ignore[attr-defined]


def _dequantized(src: _Source, w: torch.Tensor, scale: torch.Tensor | None, plan: _Plan) -> torch.Tensor:
    if src.kind == "plain":
        return w
    assert scale is not None
    if src.kind == "fp4":
        return dequantize_fp4(w, scale, name=src.key)
    return dequantize_fp8_block(w, scale, plan.block, name=src.key)


def _load_source(
    src: _Source,
    handles: dict[str, object],
    plan: _Plan,
    tgt: _Target,
    index: tuple,
    dtype: torch.dtype | None,
) -> None:
    """Write one stored tensor into ``tgt.tensor[index]`` (and its scale) in the target's format:
    copied as stored when the formats agree, else dequantized and, for a quantized target,
    re-quantized (on the target's device)."""
    dev = tgt.tensor.device
    w, scale = _read(src, handles, plan, dev)
    if tgt.kind == "fp8" and src.kind == "fp8" and w.dtype == FP8_DTYPE and plan.block == (128, 128):
        tgt.tensor[index].copy_(w)
        assert tgt.scale is not None and scale is not None
        tgt.scale[index].copy_(scale_to_float(scale))
        return
    if tgt.kind == "fp4" and src.kind == "fp4":
        assert tgt.scale is not None and scale is not None
        tgt.tensor[index].copy_(w.contiguous().view(torch.uint8))
        tgt.scale[index].copy_(fp4_scale_bytes(scale, src.key))
        return
    t = _dequantized(src, w, scale, plan)
    if tgt.kind == "fp8":
        q, s = quantize_fp8_block(t, (128, 128), E8M0_DTYPE)
        assert tgt.scale is not None
        tgt.tensor[index].copy_(q)
        tgt.scale[index].copy_(scale_to_float(s))
        return
    if tgt.kind == "fp4":
        q, s = quantize_fp4(t)
        assert tgt.scale is not None
        tgt.tensor[index].copy_(q.view(torch.uint8))
        tgt.scale[index].copy_(s.view(torch.uint8))
        return
    if tgt.name.endswith("tid2eid") and t.dtype.is_floating_point:
        t = t.round()
    if dtype is not None and t.dtype.is_floating_point and not keeps_fp32(tgt.name):
        t = t.to(dtype)
    tgt.tensor[index].copy_(t)


def load_weights_into(
    model: torch.nn.Module, model_path: str, dtype: torch.dtype | None = None, progress: bool = True
) -> None:
    """Stream a checkpoint into ``model`` (whose ``state_dict()`` keys are HF names), tensor by tensor.

    First checks, from the safetensors headers alone, that every weight of ``model.state_dict()``
    is in the checkpoint with the same (logical, i.e. dequantized) shape and that the checkpoint
    has no other tensor; then reads one stored tensor at a time (a routed expert's ``w1`` / ``w3``
    / ``w2`` are written straight into their rows of the packed destination, so host memory holds
    one stored tensor, never a stacked fp32 copy), moves it to the destination's device and
    writes it in the destination's format (``layers/quantization.py``): FP8 / FP4 copied as
    published with their scales, or dequantized there (then re-quantized if the destination is
    quantized and the checkpoint is not in its format). ``dtype``, if given, is the intermediate
    dtype of floating tensors cast into plain destinations (``None``: the stored / dequantized one).

    Raises:
        ValueError: listing every problem, one per line, each naming the tensor, the expected
            shape and the found shape (or ``missing`` / ``unexpected``); an FP4 scale that is not
            a power of two for an FP4 destination.
        FileNotFoundError: no checkpoint at ``model_path``.
    """
    targets = _targets(model.state_dict())
    plan = _plan(model_path)
    found = {e.name: e.shape for e in plan.entries}
    problems = _check_shapes({k: t.logical_shape for k, t in targets.items()}, found)
    if problems:
        raise ValueError(f"checkpoint {model_path} does not match the model:\n  " + "\n  ".join(problems))
    if plan.skipped:
        logger.info("skipping %d mtp.* tensors (multi-token-prediction head; not used)", len(plan.skipped))
    desc = f"Loading {os.path.basename(os.path.normpath(model_path))} ({plan.fmt} names)"
    t0 = time.perf_counter()
    with torch.no_grad(), ExitStack() as stack:
        handles = {
            p: stack.enter_context(safe_open(p, framework="pt"))
            for p in dict.fromkeys(plan.key_file.values())
        }
        # disable=None: tqdm turns itself off when stderr is not a TTY (no carriage returns in logs)
        for entry in tqdm(plan.entries, desc=desc, unit="tensor", disable=None if progress else True):
            tgt = targets[entry.name]
            if entry.experts is None:
                _load_source(entry.sources[0], handles, plan, tgt, (), dtype)
                continue
            for e, row in enumerate(entry.experts):
                off = 0
                for src in row:
                    n = src.logical_shape[0]
                    _load_source(src, handles, plan, tgt, (e, slice(off, off + n)), dtype)
                    off += n
    if progress:
        logger.info("%s: %d tensors in %.1fs", desc, len(plan.entries), time.perf_counter() - t0)


def weight_nbytes(model: torch.nn.Module) -> int:
    """Bytes of every tensor in ``model.state_dict()`` (weights, scales, tables)."""
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())

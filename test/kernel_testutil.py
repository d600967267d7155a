"""Shared set-up of the Triton kernel tests (``test_kernels_*.py``): where they run and how they
compare.

The tests run on CUDA with Triton, or on the CPU under ``TRITON_INTERPRET=1`` (fp32 only); else
they skip (``KERNEL_MARKS``, used as each module's ``pytestmark``)."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

_HAS_TRITON = importlib.util.find_spec("triton") is not None
if torch.cuda.is_available() and _HAS_TRITON:
    DEVICE: str | None = "cuda"
elif os.environ.get("TRITON_INTERPRET") == "1" and _HAS_TRITON:
    DEVICE = "cpu"
else:
    DEVICE = None

KERNEL_MARKS = [pytest.mark.gpu, pytest.mark.skipif(DEVICE is None, reason="needs CUDA and triton")]
INTERP = DEVICE == "cpu"


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative L2 error ``|a - b| / |b|`` in float64 (``b`` the reference)."""
    a64, b64 = a.double().cpu(), b.double().cpu()
    return ((a64 - b64).norm() / b64.norm().clamp_min(1e-30)).item()


def dtypes() -> list[torch.dtype]:
    """Input dtypes to test: fp32 under the interpreter, bf16 and fp32 on CUDA."""
    return [torch.float32] if INTERP else [torch.bfloat16, torch.float32]

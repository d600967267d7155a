"""Small helpers shared by the Triton kernel wrappers (imports torch only)."""

from __future__ import annotations

import functools

import torch


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for host ints. The wrappers use this rather than ``triton.cdiv``: that is a
    ``ConstexprFunction`` whose host call costs a few microseconds (~300 calls per forward)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``n`` for host ints (1 for ``n <= 1``: a block size is never 0;
    ``triton.next_power_of_2`` gives 0 or 1 for 0 depending on the interpreter; see :func:`cdiv`)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@functools.lru_cache(maxsize=8)
def _sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def num_sms(device: torch.device) -> int:
    """Multiprocessor count of ``device`` (132 on H200); 8 for non-CUDA devices (Triton interpreter)."""
    if device.type != "cuda":
        return 8
    return _sms(device.index if device.index is not None else torch.cuda.current_device())


def ieee_f32_dots(dtype: torch.dtype) -> bool:
    """Whether kernels whose ``tl.dot`` operands have ``dtype`` multiply them in IEEE fp32.

    True for ``torch.float32`` operands while torch's own fp32 matmuls exclude TF32
    (``torch.backends.cuda.matmul.allow_tf32`` False: torch's default, also what
    ``torch.set_float32_matmul_precision("highest")`` and ``torch.backends.cuda.matmul.fp32_precision
    = "ieee"`` set). Triton's ``tl.dot`` on fp32 operands otherwise rounds them to TF32 (10-bit
    mantissa), so an fp32 model would not get the products torch gives it: the kernels pass
    ``input_precision="ieee"`` then (the constexpr ``IEEE`` of :mod:`sgl_kernel_v4.triton._dot`).
    False for bf16 / fp16 / fp8 operands (their kernels compile exactly as without the flag) and
    when the user allowed TF32 (Triton's default precision, as torch's matmuls then use too).
    Read at each launch: the flag may change between calls, and a CUDA graph keeps the kernels
    of its capture.
    """
    return dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32

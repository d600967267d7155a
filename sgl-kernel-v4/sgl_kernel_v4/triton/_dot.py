"""``tl.dot`` whose fp32 precision follows torch's fp32 matmul setting (a constexpr per launch).

Triton's ``tl.dot`` rounds fp32 operands to TF32 unless told ``input_precision="ieee"`` (or the
environment variable ``TRITON_F32_DEFAULT`` is set when the kernel is compiled; Triton's in-memory
kernel cache is not keyed on it, so the kernels take the choice as a constexpr instead). The
wrappers pass ``IEEE=ieee_f32_dots(operand dtype)`` (:func:`sgl_kernel_v4.triton._utils.ieee_f32_dots`):
True only for fp32 operands with TF32 disallowed; otherwise ``input_precision="tf32"``, Triton's
own default, so bf16 / fp8 kernels compile exactly as a plain ``tl.dot`` (the precision only acts on
fp32 operands). A constexpr flag passed as an element of a tuple splatted into a ``@triton.jit``
helper (``f(*tile)``) broke Triton 3.6's lowering of the indexer's extend scoring (the GPU image's
version); the kernels pass it as a separate argument.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["dot", "dot_acc"]


@triton.jit
def dot(a, b, IEEE: tl.constexpr):
    """``tl.dot(a, b)`` (fp32 result); IEEE fp32 products when ``IEEE``."""
    return tl.dot(a, b, input_precision="ieee" if IEEE else "tf32")


@triton.jit
def dot_acc(a, b, acc, IEEE: tl.constexpr):
    """``tl.dot(a, b, acc)``; IEEE fp32 products when ``IEEE``."""
    return tl.dot(a, b, acc, input_precision="ieee" if IEEE else "tf32")

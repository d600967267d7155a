"""Rounding helpers shared by the Triton kernels that reproduce torch's reduced-precision ops bit for bit."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def round_as(v, like):
    """float32 ``v`` rounded to the dtype of ``like`` (bf16 / fp16 / fp32) and widened back to
    float32, round-to-nearest-even as torch casts (a bf16 / fp16 op of torch computes in float32
    and rounds its result this way). bf16 by bit arithmetic (``c10::round_to_nearest_even``; finite
    inputs): the interpreter's float32 -> bf16 cast truncates, the GPU's ``cvt.rn`` gives the same bits."""
    if like.dtype == tl.bfloat16:
        b = v.to(tl.uint32, bitcast=True)
        b = (b + (((b >> 16) & 1) + 0x7FFF)) & 0xFFFF0000
        return b.to(tl.float32, bitcast=True)
    elif like.dtype == tl.float16:
        return v.to(tl.float16).to(tl.float32)
    else:
        return v

"""Clamped SwiGLU (Triton): the shared expert's activation in one launch (op ``swiglu_clamped``).

Formula of :func:`sgl_kernel_v4.ref.moe.swiglu_clamped` (HF ``DeepseekV4MLP``):
``silu(clamp(gate, max=limit)) * clamp(up, -limit, limit)`` on ``gate_up = [gate | up]`` (last
dim), with torch's rounding in the input dtype ``L``: ``silu(g) = L(g / (1 + exp(-g)))`` in float32
(libdevice ``expf`` on CUDA, the function torch's CUDA kernel calls; a round-to-nearest
division), then ``L(float32(silu) * float32(up))``. It replaces four torch kernels (two clamps,
SiLU, multiply) and the ``torch.cat`` of the two halves when they come from one fused GEMM.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from sgl_kernel_v4.triton._round import round_as
from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2

__all__ = ["swiglu_clamped"]

_BLOCK = 1024


@triton.jit(do_not_specialize=["T"])  # the batch's token count
def _swiglu_clamped_kernel(
    gu_ptr,
    stride_gt,
    out_ptr,
    T,
    N_INTER,
    limit,
    BLOCK: tl.constexpr,
    LIBDEVICE: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N_INTER
    gate = tl.load(gu_ptr + t * stride_gt + offs, mask=m, other=0.0)
    up = tl.load(gu_ptr + t * stride_gt + N_INTER + offs, mask=m, other=0.0)
    g = tl.minimum(gate.to(tl.float32), limit)
    u = tl.minimum(tl.maximum(up.to(tl.float32), -limit), limit)
    if LIBDEVICE:
        e = libdevice.exp(-g)
    else:
        e = tl.exp(-g)
    s = round_as(tl.math.div_rn(g, 1.0 + e), gate)
    y = round_as(s * u, gate)
    tl.store(out_ptr + t * N_INTER + offs, y.to(out_ptr.dtype.element_ty), mask=m)


def swiglu_clamped(gate_up: torch.Tensor, limit: float) -> torch.Tensor:
    """``silu(clamp(gate, max=limit)) * clamp(up, -limit, limit)``, one launch.

    Args:
        gate_up: ``[T, 2I]`` bf16 / fp16 / fp32, gate columns then up columns (last dim contiguous;
            any row stride).
        limit: clamp limit (``swiglu_limit``, V4: 10.0; exactly representable in ``gate_up``'s
            dtype, as torch's clamp rounds it to that dtype).

    Returns:
        ``[T, I]`` contiguous, ``gate_up``'s dtype; torch's rounding (module docstring): bit-equal to
        :func:`sgl_kernel_v4.ref.moe.swiglu_clamped` where ``expf`` agrees (CUDA), else within an ulp.

    Raises:
        ValueError: not a 2-D tensor with an even, contiguous last dim, or an unsupported dtype.
    """
    if gate_up.dim() != 2 or gate_up.shape[1] % 2 or gate_up.stride(1) != 1:
        raise ValueError(f"gate_up: expected [T, 2I] with a contiguous last dim, got {tuple(gate_up.shape)}")
    if gate_up.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"gate_up: expected bf16 / fp16 / fp32, got {gate_up.dtype}")
    T, inter = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty((T, inter), dtype=gate_up.dtype, device=gate_up.device)
    if T == 0 or inter == 0:
        return out
    block = min(_BLOCK, next_power_of_2(inter))
    _swiglu_clamped_kernel[(T, cdiv(inter, block))](
        gate_up, gate_up.stride(0), out, T, inter, float(limit), BLOCK=block,
        LIBDEVICE=gate_up.is_cuda and os.environ.get("TRITON_INTERPRET") != "1", num_warps=4,
    )  # fmt: skip
    return out

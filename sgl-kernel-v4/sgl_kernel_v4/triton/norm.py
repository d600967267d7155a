"""RMSNorm (Triton), op-table entry 1 (``sgl_kernel_v4/ops.py``).

HF ``DeepseekV4RMSNorm`` (``transformers/models/deepseek_v4/modeling_deepseek_v4.py``): statistics
and the weight multiply in fp32, one cast to the input dtype at the end; ``weight=None`` is the
unweighted variant (``DeepseekV4UnweightedRMSNorm``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.triton._utils import next_power_of_2

__all__ = ["rms_norm"]


@triton.jit
def _rms_norm_kernel(
    x_ptr, stride_x, w_ptr, out_ptr, stride_o, T, D, eps, BLOCK_D: tl.constexpr, HAS_W: tl.constexpr
):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_D)
    m = offs < D
    x = tl.load(x_ptr + t * stride_x + offs, mask=m, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, 0) / D + eps)
    y = x * rstd
    if HAS_W:
        y = y * tl.load(w_ptr + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + t * stride_o + offs, y.to(out_ptr.dtype.element_ty), mask=m)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """RMSNorm over the last dim.

    Args:
        x: ``[..., D]``, any float dtype and strides (a last dim with a stride other than 1 is
            read through a contiguous copy).
        weight: ``[D]`` (fp32; any stride) or None (unweighted).
        eps: added to the mean square.
        out: optional ``[T, D]`` output buffer in x's dtype (may be ``x``; any strides: a last dim
            with a stride other than 1 is written through a contiguous copy).

    Returns:
        ``[T, D]`` in x's dtype.

    Raises:
        ValueError: bad shapes, or an ``out`` of another shape or dtype.
    """
    if x.dim() != 2:
        if x.dim() < 1:
            raise ValueError("x: expected [..., D]")
        y = rms_norm(
            x.reshape(-1, x.shape[-1]), weight, eps, out=None if out is None else out.view(-1, x.shape[-1])
        )
        return y.view(x.shape) if out is None else out
    T, D = x.shape
    if weight is not None and weight.shape != (D,):
        raise ValueError(f"weight: expected [{D}], got {tuple(weight.shape)}")
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype):
        raise ValueError(f"out: expected {tuple(x.shape)} {x.dtype}, got {tuple(out.shape)} {out.dtype}")
    if out is not None and out.stride(1) != 1 and T * D:
        # the kernel writes rows with unit column stride: go through a contiguous buffer
        return out.copy_(rms_norm(x, weight, eps))
    if x.stride(1) != 1:
        x = x.contiguous()
    if weight is not None and weight.stride(0) != 1:
        weight = weight.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out
    if T == 0:
        return out
    block = next_power_of_2(D)
    _rms_norm_kernel[(T,)](
        x, x.stride(0), weight if weight is not None else x, out, out.stride(0), T, D, float(eps),
        BLOCK_D=block, HAS_W=weight is not None, num_warps=max(1, min(8, block // 512)),
    )  # fmt: skip
    return out

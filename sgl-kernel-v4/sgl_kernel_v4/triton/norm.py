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
        x: ``[..., D]`` (last dim contiguous), any float dtype.
        weight: ``[D]`` (fp32) or None (unweighted).
        eps: added to the mean square.
        out: optional ``[T, D]`` output buffer (may be ``x``).

    Returns:
        ``[T, D]`` in x's dtype.

    Raises:
        ValueError: bad shapes.
    """
    if x.dim() != 2:
        if x.dim() < 1:
            raise ValueError("x: expected [..., D]")
        y = rms_norm(
            x.reshape(-1, x.shape[-1]), weight, eps, out=None if out is None else out.view(-1, x.shape[-1])
        )
        return y.view(x.shape) if out is None else out
    if x.stride(1) != 1:
        raise ValueError(f"x: expected [T, D] with a contiguous last dim, got {tuple(x.shape)}")
    T, D = x.shape
    if weight is not None and weight.shape != (D,):
        raise ValueError(f"weight: expected [{D}], got {tuple(weight.shape)}")
    out = torch.empty_like(x) if out is None else out
    if T == 0:
        return out
    block = next_power_of_2(D)
    _rms_norm_kernel[(T,)](
        x, x.stride(0), weight if weight is not None else x, out, out.stride(0), T, D, float(eps),
        BLOCK_D=block, HAS_W=weight is not None, num_warps=max(1, min(8, block // 512)),
    )  # fmt: skip
    return out

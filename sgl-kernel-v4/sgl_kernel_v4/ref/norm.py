"""RMSNorm reference (DeepSeek-V4 paper §2; HF ``DeepseekV4RMSNorm`` / ``DeepseekV4UnweightedRMSNorm``)."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Root-mean-square norm over the last dim.

    Args:
        x: ``[..., D]`` any float dtype.
        weight: ``[D]`` (fp32 in DeepSeek-V4 checkpoints) or ``None`` for the unweighted norm.
        eps: added to the mean square.

    Returns:
        ``[..., D]`` in ``x.dtype``; computed in fp32, weight applied in fp32, one cast at the end
        (as HF's ``DeepseekV4RMSNorm``). The unweighted variant mirrors
        ``DeepseekV4UnweightedRMSNorm``: the fp32 rsqrt factor is cast to ``x.dtype`` first.
    """
    if weight is None:
        return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps).to(x.dtype)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (weight.float() * xf).to(x.dtype)

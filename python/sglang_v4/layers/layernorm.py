"""RMSNorm module (HF ``DeepseekV4RMSNorm``; the weight is kept in fp32)."""

from __future__ import annotations

import torch
from sgl_kernel_v4 import ops
from torch import nn


class RMSNorm(nn.Module):
    """Weighted RMSNorm over the last dim; ``weight: [dim]`` fp32.

    ``forward(x [..., dim]) -> [..., dim]`` in ``x.dtype`` (computed in fp32).
    """

    def __init__(self, dim: int, eps: float, device: torch.device | str) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=torch.float32, device=device), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., dim]`` normalised by its root mean square and scaled by ``weight``, in ``x.dtype``."""
        return ops.rms_norm(x, self.weight, self.eps)

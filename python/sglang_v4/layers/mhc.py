"""mHC modules (paper §2.2; HF ``DeepseekV4HyperConnection`` / ``DeepseekV4HyperHead``). Parameters fp32."""

from __future__ import annotations

import torch
from sgl_kernel_v4 import ops
from sgl_kernel_v4.ref import mhc as ref_mhc
from torch import nn

from sglang_v4.layers.layernorm import RMSNorm


class HyperConnection(nn.Module):
    """Holds ``fn [(2+n)*n, n*D]``, ``base [(2+n)*n]``, ``scale [3]``; see :func:`sgl_kernel_v4.ref.mhc.hc_pre`."""

    def __init__(
        self, hc_mult: int, hidden: int, iters: int, eps: float, norm_eps: float, device: torch.device | str
    ) -> None:
        super().__init__()
        k = (2 + hc_mult) * hc_mult
        self.fn = nn.Parameter(
            torch.empty(k, hc_mult * hidden, dtype=torch.float32, device=device), requires_grad=False
        )
        self.base = nn.Parameter(torch.empty(k, dtype=torch.float32, device=device), requires_grad=False)
        self.scale = nn.Parameter(torch.empty(3, dtype=torch.float32, device=device), requires_grad=False)
        self.iters, self.eps, self.norm_eps = iters, eps, norm_eps

    def pre(
        self, x: torch.Tensor, norm: RMSNorm | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x [T, n, D] -> (collapsed [T, D], post [T, n], comb [T, n, n])``; with ``norm`` (the
        block's RMSNorm) ``collapsed`` is returned through it (one fused launch on CUDA)."""
        if norm is None:
            return ops.hc_pre(x, self.fn, self.base, self.scale, self.iters, self.eps, self.norm_eps)
        return ops.hc_pre(x, self.fn, self.base, self.scale, self.iters, self.eps, self.norm_eps,
                          norm_weight=norm.weight, norm_weight_eps=norm.eps)  # fmt: skip


class HyperHead(nn.Module):
    """Final stream collapse: ``hc_fn [n, n*D]``, ``hc_base [n]``, ``hc_scale [1]``."""

    def __init__(
        self, hc_mult: int, hidden: int, eps: float, norm_eps: float, device: torch.device | str
    ) -> None:
        super().__init__()
        self.hc_fn = nn.Parameter(
            torch.empty(hc_mult, hc_mult * hidden, dtype=torch.float32, device=device), requires_grad=False
        )
        self.hc_base = nn.Parameter(
            torch.empty(hc_mult, dtype=torch.float32, device=device), requires_grad=False
        )
        self.hc_scale = nn.Parameter(torch.empty(1, dtype=torch.float32, device=device), requires_grad=False)
        self.eps, self.norm_eps = eps, norm_eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, n, D] -> [T, D]``."""
        return ref_mhc.hc_head(x, self.hc_fn, self.hc_base, self.hc_scale, self.eps, self.norm_eps)

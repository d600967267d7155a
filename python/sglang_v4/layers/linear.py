"""Weight-holding linear layers (no initialisation: weights come from the loader)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Module):
    """``y = x @ weight.T`` with ``weight: [out_features, in_features]`` (HF ``nn.Linear`` naming, no bias).

    The weight is allocated uninitialised; the checkpoint loader (or ``--load-format dummy``) fills it.
    """

    def __init__(
        self, in_features: int, out_features: int, dtype: torch.dtype, device: torch.device | str
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(
            torch.empty(out_features, in_features, dtype=dtype, device=device), requires_grad=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(self.weight.dtype), self.weight)


class GroupedLinear(nn.Module):
    """Block-diagonal grouped projection (DeepSeek-V4 grouped output projection, paper §2.3.1).

    ``weight: [n_groups * out_per_group, in_per_group]`` (HF ``DeepseekV4GroupedLinear`` layout).
    Input ``[T, n_groups, in_per_group]`` -> output ``[T, n_groups * out_per_group]``.
    """

    def __init__(
        self,
        in_per_group: int,
        out_features: int,
        n_groups: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        super().__init__()
        self.n_groups = n_groups
        self.weight = nn.Parameter(
            torch.empty(out_features, in_per_group, dtype=dtype, device=device), requires_grad=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T, g, i = x.shape
        w = self.weight.view(g, -1, i)  # [g, out_g, in_g]
        y = torch.einsum("tgi,goi->tgo", x.to(w.dtype), w)
        return y.reshape(T, -1)

"""Weight-holding linear layers (no initialisation: weights come from the loader).

With ``quant="fp8"`` a layer holds DeepSeek's block-scaled FP8 weight as published: ``weight``
float8_e4m3fn ``[out, in]`` and ``weight_scale_inv`` float32 ``[ceil(out/128), ceil(in/128)]``
(the real weight is ``weight * scale`` per 128x128 block; HF's name for the scale), and multiplies
through :func:`sgl_kernel_v4.ops.fp8_linear` (Triton on CUDA, exact dequantizing reference on CPU).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from sgl_kernel_v4 import ops
from torch import nn

from sglang_v4.layers.quantization import FP8_BLOCK


def _make_weight(
    module: nn.Module, rows: int, cols: int, dtype: torch.dtype, device: torch.device | str, quant: str | None
) -> None:
    if quant is None:
        module.weight = nn.Parameter(torch.empty(rows, cols, dtype=dtype, device=device), requires_grad=False)
        return
    if quant != "fp8":
        raise ValueError(f"quant: expected None or 'fp8', got {quant!r}")
    module.weight = nn.Parameter(
        torch.empty(rows, cols, dtype=torch.float8_e4m3fn, device=device), requires_grad=False
    )
    bm, bn = FP8_BLOCK
    module.register_buffer(
        "weight_scale_inv", torch.empty(-(-rows // bm), -(-cols // bn), dtype=torch.float32, device=device)
    )


class Linear(nn.Module):
    """``y = x @ weight.T`` with ``weight: [out_features, in_features]`` (HF ``nn.Linear`` naming, no bias).

    The weight is allocated uninitialised; the checkpoint loader (or ``--load-format dummy``) fills it.
    ``quant="fp8"``: FP8 weight + ``weight_scale_inv`` (module docstring); the input is cast to
    ``dtype`` (the activation dtype) and the output has that dtype.

    Raises:
        ValueError: unknown ``quant``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        dtype: torch.dtype,
        device: torch.device | str,
        quant: str | None = None,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.quant, self.act_dtype = quant, dtype
        _make_weight(self, out_features, in_features, dtype, device, quant)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quant == "fp8":
            return ops.fp8_linear(x.to(self.act_dtype), self.weight, self.weight_scale_inv)
        return F.linear(x.to(self.weight.dtype), self.weight)


class GroupedLinear(nn.Module):
    """Block-diagonal grouped projection (DeepSeek-V4 grouped output projection, paper §2.3.1).

    ``weight: [n_groups * out_per_group, in_per_group]`` (HF ``DeepseekV4GroupedLinear`` layout).
    Input ``[T, n_groups, in_per_group]`` -> output ``[T, n_groups * out_per_group]``. With
    ``quant="fp8"`` the weight is FP8 with 128x128 block scales over the whole ``[G*out_g, in_g]``
    matrix (as published) and group ``g`` multiplies its rows ``g*out_g .. (g+1)*out_g - 1``.

    Raises:
        ValueError: unknown ``quant``.
    """

    def __init__(
        self,
        in_per_group: int,
        out_features: int,
        n_groups: int,
        dtype: torch.dtype,
        device: torch.device | str,
        quant: str | None = None,
    ) -> None:
        super().__init__()
        self.n_groups = n_groups
        self.quant, self.act_dtype = quant, dtype
        _make_weight(self, out_features, in_per_group, dtype, device, quant)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quant == "fp8":
            return ops.fp8_linear(x.to(self.act_dtype), self.weight, self.weight_scale_inv)
        T, g, i = x.shape
        w = self.weight.view(g, -1, i)  # [g, out_g, in_g]
        y = torch.einsum("tgi,goi->tgo", x.to(w.dtype), w)
        return y.reshape(T, -1)

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
        """``x [..., in_features] -> [..., out_features]`` (class docstring: dtype, FP8 path)."""
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
        """``x [T, n_groups, in_per_group] -> [T, n_groups * out_per_group]``: group ``g`` times its
        block of rows of ``weight``."""
        if self.quant == "fp8":
            return ops.fp8_linear(x.to(self.act_dtype), self.weight, self.weight_scale_inv)
        T, g, i = x.shape
        w = self.weight.view(g, -1, i)  # [g, out_g, in_g]
        y = torch.einsum("tgi,goi->tgo", x.to(w.dtype), w)
        return y.reshape(T, -1)


class MergedLinear:
    """Several :class:`Linear` layers that read the same input, multiplied as one GEMM.

    SGLang's ``fused_qkv_a_proj_with_mqa`` / ``MergedColumnParallelLinear`` idea without new
    parameter names: the layers keep their modules and state-dict names (what the checkpoint
    loader, the dummy initialiser and the TP shard table address), but their ``weight`` tensors are
    re-allocated as consecutive row slices of one ``[sum(out), in]`` tensor, and with FP8 their
    ``weight_scale_inv`` ``[out/128, in/128]`` as row slices of one ``[sum(out)/128, in/128]``
    buffer. The loader copies into the slices in place, so it fills the merged tensor.

    Not a module (a plain attribute of its owner): the merged tensor adds no state-dict entry and
    no bytes. :meth:`__call__` checks on the host that every slice still aliases the merged tensor
    (``Module.to`` or an assignment re-allocates them) and otherwise multiplies the layers one by
    one, so the result never depends on the merge.

    Only replicated layers may be merged (TP shards rows per layer; a merged tensor of sharded
    layers would interleave ranks' rows), which the callers ensure.

    Raises:
        ValueError: fewer than two layers, layers with different ``in_features`` / ``quant`` /
            weight dtype / device, or FP8 layers whose ``out_features`` are not all multiples of
            the 128-row scale block (:meth:`can_merge` says whether a group is valid).
    """

    def __init__(self, layers: list[Linear]) -> None:
        if not self.can_merge(layers):
            raise ValueError(
                "MergedLinear: expected >= 2 Linear layers with equal in_features, quant, dtype and "
                "device (FP8: every out_features a multiple of 128), got "
                + ", ".join(f"[{m.out_features}, {m.in_features}] {m.quant}" for m in layers)
            )
        self.layers = list(layers)
        self.sizes = [m.out_features for m in layers]
        first = layers[0]
        self.quant, self.act_dtype = first.quant, first.act_dtype
        w = first.weight
        self.weight = torch.empty(sum(self.sizes), first.in_features, dtype=w.dtype, device=w.device)
        self.scale: torch.Tensor | None = None
        if self.quant == "fp8":
            s = first.weight_scale_inv
            n_blocks = sum(self.sizes) // FP8_BLOCK[0]
            self.scale = torch.empty(n_blocks, s.shape[1], dtype=s.dtype, device=s.device)
        r = sr = 0
        for m, n in zip(self.layers, self.sizes):
            m.weight = nn.Parameter(self.weight[r : r + n], requires_grad=False)
            if self.scale is not None:
                nb = n // FP8_BLOCK[0]
                m.weight_scale_inv = self.scale[sr : sr + nb]  # re-registers the buffer, same name
                sr += nb
            r += n

    @staticmethod
    def can_merge(layers: list[Linear]) -> bool:
        """Whether ``layers`` can share one weight tensor (see the class docstring)."""
        if len(layers) < 2:
            return False
        a = layers[0]
        for m in layers:
            if (m.in_features, m.quant, m.weight.dtype, m.weight.device) != (
                a.in_features, a.quant, a.weight.dtype, a.weight.device,
            ):  # fmt: skip
                return False
            if m.quant == "fp8" and m.out_features % FP8_BLOCK[0]:
                return False
        return True

    def is_aliased(self) -> bool:
        """Every layer's weight (and FP8 scale) is still its row slice of the merged tensors."""
        return _rows_alias(self.weight, [m.weight for m in self.layers]) and (
            self.scale is None or _rows_alias(self.scale, [m.weight_scale_inv for m in self.layers])
        )

    def gemm(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, in]`` -> ``[layers[0](x) | layers[1](x) | ...]`` ``[T, sum(out)]`` in the
        activation dtype: one GEMM while :meth:`is_aliased`, else one per layer and a concatenation."""
        if not self.is_aliased():
            return torch.cat([m(x) for m in self.layers], dim=-1)
        if self.scale is not None:
            return ops.fp8_linear(x.to(self.act_dtype), self.weight, self.scale)
        return F.linear(x.to(self.weight.dtype), self.weight)

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``x [T, in]`` -> ``(layers[0](x), layers[1](x), ...)``, each ``[T, out_i]`` in the
        activation dtype: column views of one :meth:`gemm` output (row stride ``sum(out)``, last
        dim contiguous) while :meth:`is_aliased`, else one GEMM per layer."""
        if not self.is_aliased():
            return tuple(m(x) for m in self.layers)
        return tuple(torch.split(self.gemm(x), self.sizes, dim=-1))


def _rows_alias(merged: torch.Tensor, parts: list[torch.Tensor]) -> bool:
    """``parts`` are still consecutive row slices of ``merged``, in order (no one re-allocated them)."""
    if merged.device.type == "meta":
        return False
    ptr, step = merged.data_ptr(), merged.stride(0) * merged.element_size()
    for p in parts:
        if p.data_ptr() != ptr or p.shape[1:] != merged.shape[1:] or p.stride() != merged.stride():
            return False
        ptr += p.shape[0] * step
    return ptr == merged.data_ptr() + merged.shape[0] * step

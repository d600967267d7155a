"""Routed-expert MoE reference (HF ``DeepseekV4Experts``; SwiGLU with clamping at ``swiglu_limit``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def swiglu_clamped(gate_up: torch.Tensor, limit: float) -> torch.Tensor:
    """``silu(clamp(gate, max=limit)) * clamp(up, -limit, limit)`` on ``gate_up = [gate | up]`` (last dim)."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate.clamp(max=limit)) * up.clamp(min=-limit, max=limit)


def fused_moe(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    swiglu_limit: float,
) -> torch.Tensor:
    """Weighted sum of the selected experts' outputs.

    Args:
        x: ``[T, D]``.
        w_gate_up: ``[E, 2I, D]`` (gate rows then up rows, HF packing); w_down: ``[E, D, I]``.
        topk_ids: ``[T, k]`` int64 expert ids (ids outside ``[0, E)`` contribute nothing, as in the
            Triton kernel); topk_weights: ``[T, k]`` fp32 routing weights.
        swiglu_limit: clamp limit.

    Returns:
        ``[T, D]`` in ``x.dtype``: ``sum_j w[t, j] * down_e(swiglu(gate_up_e(x_t)))`` with ``e = topk_ids[t, j]``.
    """
    T, D = x.shape
    out = torch.zeros_like(x)
    if T == 0:
        return out
    E = w_gate_up.shape[0]
    flat_ids = topk_ids.reshape(-1).to(torch.int64)
    pairs = torch.nonzero((flat_ids >= 0) & (flat_ids < E)).flatten()
    order = pairs[torch.argsort(flat_ids[pairs], stable=True)]
    counts = torch.bincount(flat_ids[order], minlength=E).tolist()
    token_of = order // topk_ids.shape[1]
    slot_of = order % topk_ids.shape[1]
    start = 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        tok = token_of[start : start + c]
        slot = slot_of[start : start + c]
        h = swiglu_clamped(F.linear(x[tok], w_gate_up[e]), swiglu_limit)
        y = F.linear(h, w_down[e]) * topk_weights[tok, slot].unsqueeze(-1).to(x.dtype)
        out.index_add_(0, tok, y.to(out.dtype))
        start += c
    return out

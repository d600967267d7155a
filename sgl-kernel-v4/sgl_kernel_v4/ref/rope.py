"""Interleaved RoPE references (HF ``deepseek_v4.apply_rotary_pos_emb``; paper §2.3, partial RoPE).

DeepSeek-V4 rotates *consecutive pairs* ``(x[2i], x[2i+1])`` of the trailing ``r`` channels of each
head (the first ``D - r`` "nope" channels are untouched). ``cos``/``sin`` hold one value per pair
(``[T, r/2]``).
"""

from __future__ import annotations

import torch

from .norm import rms_norm


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the trailing ``2 * cos.shape[-1]`` channels of ``x`` by interleaved pairs.

    Args:
        x: ``[T, H, D]`` or ``[T, D]``.
        cos, sin: ``[T, r/2]`` fp32. Pass ``-sin`` for the inverse rotation (rotate by -position).

    Returns:
        Same shape and dtype as ``x``; the rotation is computed in fp32.
    """
    squeeze = x.dim() == 2
    if squeeze:
        x = x.unsqueeze(1)
    r = cos.shape[-1] * 2
    c = cos.float().repeat_interleave(2, dim=-1).unsqueeze(1)  # [T, 1, r]
    s = sin.float().repeat_interleave(2, dim=-1).unsqueeze(1)
    nope, rope = x[..., :-r], x[..., -r:]
    rf = rope.float()
    rot = torch.stack((-rf[..., 1::2], rf[..., 0::2]), dim=-1).flatten(-2)
    out = torch.cat([nope, (rf * c + rot * s).to(x.dtype)], dim=-1)
    return out.squeeze(1) if squeeze else out


def inv_rope_quant(o: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, fp8: bool = False) -> torch.Tensor:
    """Undo RoPE on the attention output's rope slice (rotate by -position); HF ``DeepseekV4Attention``.

    Args:
        o: ``[T, H, D]`` attention output.
        cos, sin: ``[T, r/2]`` at the query positions.
        fp8: quantize the result for an FP8 O projection. Not supported by the reference
            (the CPU path keeps bf16/fp32 weights).

    Raises:
        NotImplementedError: if ``fp8`` is requested.
    """
    if fp8:
        raise NotImplementedError("inv_rope_quant: fp8 output is only implemented by the Triton kernel")
    return apply_rope(o, cos, -sin)


def qnorm_rope_kv_insert(
    q: torch.Tensor,
    kv: torch.Tensor,
    kv_norm_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    swa_flat: torch.Tensor,
    swa_index: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head unweighted RMSNorm + RoPE on q; weighted RMSNorm + RoPE on kv, written to the window pool.

    Args:
        q: ``[T, H, D]`` output of ``q_b_proj``.
        kv: ``[T, D]`` output of ``kv_proj`` (one shared K=V head).
        kv_norm_weight: ``[D]`` fp32.
        cos, sin: ``[T, r/2]``.
        swa_flat: ``[N, D]`` flat view of the raw sliding-window pool of this layer (storage dtype).
        swa_index: ``[T]`` int64 flat slots to write ``kv_out`` to; ``-1`` skips the write.
        eps: RMSNorm epsilon.

    Returns:
        ``(q_out [T, H, D], kv_out [T, D])`` in the input dtypes.
    """
    q = apply_rope(rms_norm(q, None, eps), cos, sin)
    kv = apply_rope(rms_norm(kv, kv_norm_weight, eps), cos, sin)
    valid = swa_index >= 0
    if bool(valid.any()):
        swa_flat[swa_index[valid]] = kv[valid].to(swa_flat.dtype)
    return q, kv

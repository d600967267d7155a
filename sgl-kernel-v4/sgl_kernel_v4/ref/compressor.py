"""KV compressor reference (paper §2.3.1 eqs. 9-12 for CSA, §2.3.2 eqs. 20-23 for HCA).

Reference file: HF ``transformers/models/deepseek_v4/modeling_deepseek_v4.py``
(``DeepseekV4CSACompressor``, ``DeepseekV4HCACompressor``, ``DeepseekV4Indexer``).
"""

from __future__ import annotations

import torch

from .norm import rms_norm
from .rope import apply_rope


def compress_and_insert(
    kv: torch.Tensor,
    score: torch.Tensor,
    norm_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pool_flat: torch.Tensor | None,
    out_index: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """Gated softmax pooling of complete windows, RMSNorm, RoPE, and write into the compressed pool.

    For window ``w`` and channel ``c``: ``e[w, c] = sum_l softmax_l(score[w, :, c]) * kv[w, l, c]``
    (softmax over the window's ``L`` slots, in fp32), then ``rms_norm(e, norm_weight)`` and interleaved
    RoPE on the trailing ``r = 2 * cos.shape[-1]`` channels at the window's position (``w * ratio``).

    Args:
        kv: ``[W, L, d]`` projected KV of each window's slots. CSA: ``L = 2 * ratio`` (the previous
            window's "Ca" half followed by this window's "Cb" half); HCA: ``L = ratio``.
        score: ``[W, L, d]`` gate logits plus the learned position bias (``ape``); ``-inf`` marks an
            empty slot (the overlap half of window 0), which gets softmax weight 0.
        norm_weight: ``[d]`` fp32 weight of the compressor's RMSNorm.
        cos, sin: ``[W, r/2]`` rope at each window's position.
        pool_flat: ``[N, d]`` flat view of the compressed pool (or ``None`` to skip the write).
        out_index: ``[W]`` int64 flat slots; ``-1`` skips the write.
        eps: RMSNorm epsilon.

    Returns:
        ``[W, d]`` compressed entries in ``kv.dtype``.
    """
    w = score.float().softmax(dim=1).to(kv.dtype)
    pooled = (kv * w).sum(dim=1)
    out = apply_rope(rms_norm(pooled, norm_weight, eps), cos, sin)
    if pool_flat is not None and out_index is not None and out.shape[0] > 0:
        valid = out_index >= 0
        pool_flat[out_index[valid]] = out[valid].to(pool_flat.dtype)
    return out

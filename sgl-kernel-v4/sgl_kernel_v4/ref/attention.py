"""Sparse attention and lightning-indexer references (paper §2.3.1 eqs. 13-18, §2.3.3).

Reference file: HF ``modeling_deepseek_v4.py`` (``eager_attention_forward`` with sinks,
``DeepseekV4IndexerScorer``, ``DeepseekV4Indexer``).
"""

from __future__ import annotations

import torch


def gather_rows(flat: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather ``flat[idx]`` with ``-1`` padding.

    Args:
        flat: ``[N, d]``.
        idx: ``[T, K]`` int64, ``-1`` = none.

    Returns:
        ``(rows [T, K, d], valid [T, K] bool)``; padded rows are zeros.
    """
    valid = idx >= 0
    rows = flat[idx.clamp(min=0)]
    rows = rows.masked_fill(~valid.unsqueeze(-1), 0)
    return rows, valid


def sparse_attention(
    q: torch.Tensor,
    sources: list[tuple[torch.Tensor, torch.Tensor]],
    sinks: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Shared-KV (MQA, K = V) attention over gathered keys with a per-head sink logit.

    Args:
        q: ``[T, H, D]``.
        sources: list of ``(kv_flat [N_i, D], idx [T, K_i] int64)``; the keys of query ``t`` are the
            valid rows ``kv_flat[idx[t, j]]`` of every source (``-1`` = padding).
        sinks: ``[H]`` fp32 learned sink logits: one extra logit per head whose probability mass is
            dropped from the output (HF ``eager_attention_forward``).
        scale: softmax scale (``head_dim ** -0.5``).

    Returns:
        ``[T, H, D]`` in ``q.dtype``. A query with no valid key returns zeros.
    """
    T, H, D = q.shape
    if T == 0:
        return q.new_zeros((0, H, D))
    keys, masks = [], []
    for flat, idx in sources:
        rows, valid = gather_rows(flat, idx)
        keys.append(rows.to(q.dtype))
        masks.append(valid)
    k = torch.cat(keys, dim=1)  # [T, K, D]
    valid = torch.cat(masks, dim=1)  # [T, K]
    logits = torch.einsum("thd,tkd->thk", q.float(), k.float()) * scale
    logits = logits.masked_fill(~valid.unsqueeze(1), float("-inf"))
    sink = sinks.float().view(1, H, 1).expand(T, H, 1)
    combined = torch.cat([logits, sink], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = combined.softmax(dim=-1)[..., :-1]
    out = torch.einsum("thk,tkd->thd", probs.to(q.dtype), k)
    return out


def indexer_topk(
    q: torch.Tensor,
    weights: torch.Tensor,
    idx_kv_flat: torch.Tensor,
    candidates: torch.Tensor,
    topk: int,
    scale: float,
) -> torch.Tensor:
    """Lightning-indexer scores and top-k selection (paper eqs. 13-17).

    ``score[t, c] = sum_h weights[t, h] * relu(scale * q[t, h] . K[candidates[t, c]])`` over valid
    candidates (fp32), then the ``topk`` best.

    Args:
        q: ``[T, Hi, di]`` indexer queries (RoPE applied).
        weights: ``[T, Hi]`` fp32 per-head weights (``weights_proj(x) * Hi**-0.5``).
        idx_kv_flat: ``[N, di]`` flat indexer-key pool.
        candidates: ``[T, C]`` int64 flat slots of the visible compressed entries, ``-1`` = padding.
        topk: number of entries to keep.
        scale: ``di ** -0.5``.

    Returns:
        ``[T, topk]`` int64 positions into ``candidates`` (``0..C-1``), ``-1`` where a query has fewer
        than ``topk`` valid candidates. Order within a row is unspecified.
    """
    T, C = candidates.shape
    if C == 0 or T == 0:
        return torch.full((T, topk), -1, dtype=torch.long, device=q.device)
    valid = candidates >= 0
    # Tokens of one request share (prefixes of) one candidate list: score each distinct key once
    # per token instead of gathering a [T, C, di] copy (which is GBs for a long prompt's chunk).
    uniq, inv = torch.unique(candidates.clamp(min=0), return_inverse=True)  # inv: [T, C]
    keys = idx_kv_flat[uniq].float()  # [U, di]
    H, U = q.shape[1], uniq.shape[0]
    score = torch.empty((T, C), dtype=torch.float32, device=q.device)
    rows = max(1, (1 << 24) // max(1, H * U))  # bound the [rows, H, U] intermediate to 16M floats
    for t0 in range(0, T, rows):
        t1 = min(T, t0 + rows)
        s = torch.relu(torch.einsum("thd,ud->thu", q[t0:t1].float(), keys)) * scale
        su = (s * weights[t0:t1].float().unsqueeze(-1)).sum(dim=1)  # [rows, U]
        score[t0:t1] = su.gather(1, inv[t0:t1])
    score = score.masked_fill(~valid, float("-inf"))
    k = min(topk, C)
    top = score.topk(k, dim=-1)
    pos = torch.where(
        torch.isinf(top.values) & (top.values < 0), torch.full_like(top.indices, -1), top.indices
    )
    if k < topk:
        pad = torch.full((T, topk - k), -1, dtype=torch.long, device=q.device)
        pos = torch.cat([pos, pad], dim=1)
    return pos
